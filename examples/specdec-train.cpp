// specdec-train: trains the drafts of the bundled target on CPU with libtorch.
//
//   specdec-train data   builds a training set: chat prompts made from a text corpus (Python source files: docstrings to
//                        summarise, functions to edit, plus general questions) are answered by the target itself through its
//                        chat template (self-distillation); every token fed to the target keeps its post-norm final hidden
//                        state (the EAGLE-1 feature, EagleFeature::kPostNorm, exactly as the decoder hands it to the
//                        proposer) and the top-k of the target's next-token distribution.
//   specdec-train fuse   re-runs the target over a training set (one prefill per record) and stores, per token, the outputs
//                        of EAGLE-3's three feature blocks (low, mid, high) in place of the final state.
//   specdec-train eagle  trains an EAGLE-1 head on that set: Smooth-L1 between predicted and true next features plus
//                        0.1 x cross-entropy against the target's distribution (soft labels), AdamW (0.9, 0.95), gradient
//                        clipping 0.5; or, with --version 3 on a fused set, an EAGLE-3 head on the cross-entropy alone.
//                        Both can unroll EAGLE-3's training-time test (--ttt-steps). Saves the checkpoint load_eagle_head
//                        reads (float16 safetensors + config.json).
//   specdec-train draft  distils a small Llama (the target's vocabulary, tied embeddings) with cross-entropy to the target's
//                        top-k distributions; saves a Hugging Face directory load_llama_safetensors reads (float16).
//
// Both trainers show progress (loss, tokens/s, ETA), write a resumable checkpoint every --checkpoint-every steps and stop at
// --minutes or --epochs. The library parts (data records, the two trainable modules, the savers) live in
// specdec::train so tests can drive them on a tiny random target.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "specdec/models/chat_template.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/tokenizer.hpp"
#include "specdec/proposers/eagle.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

[[noreturn]] inline void fail(const std::string& msg) { throw specdec::error(Status::kInvalidArgument, msg); }

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

inline std::string hms(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<long>(s + 0.5);
  return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
}

// --- training records ------------------------------------------------------------------------------------------------------

/// One conversation: the tokens fed to the target and, per token, the target's post-norm final hidden state (float16) and
/// the top-k of its next-token distribution (ids, probabilities at temperature 1 as float16).
struct Record {
  std::vector<std::int32_t> tokens;  // [T]
  std::int32_t prompt_length = 0;
  at::Tensor features;               // [T, H] half
  at::Tensor topk_ids;               // [T, K] int32
  at::Tensor topk_probs;             // [T, K] half
};

constexpr char kRecordMagic[8] = {'S', 'D', 'T', 'R', 'A', 'I', 'N', '1'};

inline void write_tensor(std::ofstream& out, const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * c.element_size()));
}

/// File layout: magic, int32 hidden, int32 k, then records: int32 T, int32 prompt_length, tokens int32[T],
/// features half[T, H], topk_ids int32[T, K], topk_probs half[T, K].
class RecordWriter {
 public:
  RecordWriter(const fs::path& path, std::int64_t hidden, std::int64_t k, bool append) : hidden_(hidden), k_(k) {
    const bool exists = append && fs::exists(path) && fs::file_size(path) > 0;
    out_.open(path, std::ios::binary | (exists ? std::ios::app : std::ios::trunc));
    if (!out_) fail(fmt::format("RecordWriter: cannot open '{}' for writing", path.string()));
    if (!exists) {
      out_.write(kRecordMagic, 8);
      const std::int32_t h = static_cast<std::int32_t>(hidden), kk = static_cast<std::int32_t>(k);
      out_.write(reinterpret_cast<const char*>(&h), 4);
      out_.write(reinterpret_cast<const char*>(&kk), 4);
    }
  }
  void write(const Record& r) {
    const auto T = static_cast<std::int32_t>(r.tokens.size());
    if (r.features.size(0) != T || r.features.size(1) != hidden_ || r.topk_ids.size(1) != k_)
      fail("RecordWriter::write: record shapes do not match the file");
    out_.write(reinterpret_cast<const char*>(&T), 4);
    out_.write(reinterpret_cast<const char*>(&r.prompt_length), 4);
    out_.write(reinterpret_cast<const char*>(r.tokens.data()), static_cast<std::streamsize>(T) * 4);
    write_tensor(out_, r.features.to(at::kHalf));
    write_tensor(out_, r.topk_ids.to(at::kInt));
    write_tensor(out_, r.topk_probs.to(at::kHalf));
    out_.flush();
  }

 private:
  std::ofstream out_;
  std::int64_t hidden_, k_;
};

inline std::vector<Record> read_records(const fs::path& path, std::int64_t* hidden_out = nullptr) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(fmt::format("read_records: cannot open '{}'", path.string()));
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, kRecordMagic, 8) != 0) fail(fmt::format("read_records: '{}' is not a specdec-train data file", path.string()));
  std::int32_t H = 0, K = 0;
  in.read(reinterpret_cast<char*>(&H), 4);
  in.read(reinterpret_cast<char*>(&K), 4);
  if (hidden_out) *hidden_out = H;
  std::vector<Record> out;
  for (;;) {
    std::int32_t T = 0;
    if (!in.read(reinterpret_cast<char*>(&T), 4)) break;
    Record r;
    in.read(reinterpret_cast<char*>(&r.prompt_length), 4);
    r.tokens.resize(static_cast<std::size_t>(T));
    in.read(reinterpret_cast<char*>(r.tokens.data()), static_cast<std::streamsize>(T) * 4);
    r.features = at::empty({T, H}, at::kHalf);
    r.topk_ids = at::empty({T, K}, at::kInt);
    r.topk_probs = at::empty({T, K}, at::kHalf);
    in.read(static_cast<char*>(r.features.data_ptr()), static_cast<std::streamsize>(T) * H * 2);
    in.read(static_cast<char*>(r.topk_ids.data_ptr()), static_cast<std::streamsize>(T) * K * 4);
    in.read(static_cast<char*>(r.topk_probs.data_ptr()), static_cast<std::streamsize>(T) * K * 2);
    if (!in) break;  // a truncated last record (an interrupted run) is dropped
    out.push_back(std::move(r));
  }
  return out;
}

/// Several training-set files read in order (all with the same feature width).
inline std::vector<Record> read_record_files(const std::vector<std::string>& paths, std::int64_t* hidden_out = nullptr) {
  std::vector<Record> all;
  std::int64_t H = -1;
  for (const auto& p : paths) {
    std::int64_t h = 0;
    auto part = read_records(p, &h);
    if (H >= 0 && h != H) fail(fmt::format("read_records: '{}' has features of width {}, the first file {}", p, h, H));
    H = h;
    for (auto& r : part) all.push_back(std::move(r));
  }
  if (hidden_out) *hidden_out = H;
  return all;
}

// --- prompts from the corpus ---------------------------------------------------------------------------------------------

/// Prose paragraphs (docstrings) and function bodies scraped from Python source files.
struct Corpus {
  std::vector<std::string> paragraphs;
  std::vector<std::string> functions;
};

inline std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

inline bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 128; });
}

inline void scan_python_file(const std::string& text, Corpus& c) {
  // Docstrings: triple-quoted blocks of prose, whitespace collapsed to single spaces.
  std::size_t pos = 0;
  while ((pos = text.find("\"\"\"", pos)) != std::string::npos) {
    const std::size_t end = text.find("\"\"\"", pos + 3);
    if (end == std::string::npos) break;
    std::string body = text.substr(pos + 3, end - pos - 3);
    pos = end + 3;
    // Split into paragraphs at blank lines; keep prose-like ones.
    std::size_t p0 = 0;
    while (p0 < body.size()) {
      std::size_t p1 = body.find("\n\n", p0);
      if (p1 == std::string::npos) p1 = body.size();
      std::string para = body.substr(p0, p1 - p0);
      p0 = p1 + 2;
      std::string flat;
      bool space = false;
      for (char ch : para) {
        if (ch == '\n' || ch == ' ' || ch == '\t') {
          space = true;
        } else {
          if (space && !flat.empty()) flat.push_back(' ');
          space = false;
          flat.push_back(ch);
        }
      }
      if (flat.size() < 250 || flat.size() > 1400 || !is_ascii(flat)) continue;
      if (flat.find(">>>") != std::string::npos || flat.find("    ") != std::string::npos) continue;
      const auto letters = std::count_if(flat.begin(), flat.end(), [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)); });
      if (letters < static_cast<long>(flat.size() * 7 / 10)) continue;
      c.paragraphs.push_back(flat);
    }
  }
  // Functions: a "def" line and the lines indented deeper than it, 5..28 lines, without nested defs/classes.
  std::vector<std::string> lines;
  {
    std::size_t a = 0;
    while (a <= text.size()) {
      std::size_t b = text.find('\n', a);
      if (b == std::string::npos) b = text.size();
      lines.push_back(text.substr(a, b - a));
      a = b + 1;
    }
  }
  auto indent_of = [](const std::string& l) { return l.find_first_not_of(' '); };
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto ind = indent_of(lines[i]);
    if (ind == std::string::npos || lines[i].compare(ind, 4, "def ") != 0) continue;
    std::size_t j = i + 1;
    while (j < lines.size() && (trim(lines[j]).empty() || indent_of(lines[j]) > ind)) ++j;
    while (j > i + 1 && trim(lines[j - 1]).empty()) --j;
    const std::size_t n = j - i;
    if (n < 5 || n > 28) continue;
    std::string f;
    bool ok = true;
    for (std::size_t k = i; k < j; ++k) {
      const std::string& l = lines[k];
      if (k > i && (l.find(" def ") != std::string::npos || l.find("class ") != std::string::npos)) ok = false;
      f += (l.size() >= ind ? l.substr(ind) : trim(l)) + "\n";
    }
    if (ok && is_ascii(f) && f.size() < 1500) c.functions.push_back(f);
  }
}

inline Corpus load_corpus(const std::vector<fs::path>& roots) {
  Corpus c;
  std::vector<fs::path> files;
  for (const auto& root : roots) {
    if (fs::is_regular_file(root)) {
      files.push_back(root);
      continue;
    }
    if (!fs::is_directory(root)) fail(fmt::format("--corpus: '{}' is neither a file nor a directory", root.string()));
    for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied);
         it != fs::recursive_directory_iterator(); ++it) {
      const auto& p = it->path();
      if (it->is_directory() && (p.filename() == "test" || p.filename() == "tests" || p.filename() == "idlelib")) {
        it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && p.extension() == ".py") files.push_back(p);
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    scan_python_file(text, c);
  }
  return c;
}

/// Varied chat prompts: summaries of corpus paragraphs, edits of corpus functions and general questions, shuffled with `seed`.
inline std::vector<std::string> make_prompts(const Corpus& c, std::size_t count, std::uint64_t seed,
                                             const std::set<std::string>& exclude) {
  std::mt19937_64 rng(seed);
  auto pick = [&](const auto& v) -> const auto& { return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)]; };
  static const std::vector<std::string> summarise = {
      "Summarise the following text in two sentences.", "Summarize this text in one sentence.",
      "Give a short summary of the following text.", "Summarise the following text in three bullet points.",
      "What is the main idea of this text? Answer briefly.", "Explain the following text in simple words.",
      "Write a one-paragraph summary of the text below.", "List the key points of this text."};
  static const std::vector<std::string> edits = {
      "Rename the variable `{a}` to `{b}` in this function and return the whole function.",
      "Add a docstring to this function and return the whole function.",
      "Add type hints to this function and return it.", "Explain what this function does.",
      "Rewrite this function to make it easier to read.", "Rename the function to `{b}` and return the whole function.",
      "Are there any bugs in this function? Explain briefly.", "Add comments to this function and return it.",
      "Rename the variable `{a}` to `{b}` in this code and return the whole code."};
  static const std::vector<std::string> new_names = {"result", "value_list", "count", "items", "output", "total_count",
                                                     "data", "buffer", "index", "new_value", "sum_of_items", "text"};
  static const std::vector<std::string> tips_for = {
      "staying focused while studying", "learning a new language", "saving money", "cooking healthy meals", "sleeping better",
      "giving a good presentation", "writing a cover letter", "running a meeting", "learning to program",
      "keeping a plant alive", "travelling on a budget", "reducing stress", "staying productive at home",
      "writing a good essay", "making friends in a new city", "preparing for a job interview", "organising a desk",
      "reading more books", "starting to exercise", "managing time"};
  static const std::vector<std::string> concepts = {
      "photosynthesis", "gravity", "inflation", "machine learning", "the water cycle", "a hash table", "recursion",
      "climate change", "the internet", "vaccines", "democracy", "black holes", "compound interest", "DNA", "a neural network",
      "object-oriented programming", "the stock market", "renewable energy", "version control", "an operating system"};
  static const std::vector<std::string> pairs = {
      "a list and a tuple in Python", "weather and climate", "a virus and a bacterium", "RAM and storage", "HTTP and HTTPS",
      "a process and a thread", "speed and velocity", "an alligator and a crocodile", "TCP and UDP", "a compiler and an interpreter",
      "stocks and bonds", "a lake and a pond", "SQL and NoSQL databases", "empathy and sympathy"};
  static const std::vector<std::string> chat_forms = {
      "What are three tips for {t}?", "Give me five tips for {t}.", "How can I get better at {t}?",
      "Explain {c} in simple terms.", "What is {c}? Answer in a short paragraph.", "Why is {c} important?",
      "What is the difference between {p}?", "Write a short poem about {c}.", "Tell me a fun fact about {c}.",
      "Write a short story about a robot who likes {t}.", "Write a haiku about {c}.",
      "Write a Python function that reverses a string.", "Write a Python function that checks whether a number is prime.",
      "How do I read a file line by line in Python?", "Write a short email inviting a colleague to lunch.",
      "Write a polite email asking for a deadline extension.", "What should I pack for a weekend trip?",
      "Suggest a name for a coffee shop.", "What is the capital of France?", "How many days are in a leap year?",
      "Give me a recipe for pancakes.", "What are the benefits of {t}?"};
  auto fill = [&](std::string s) {
    auto rep = [&](const std::string& key, const std::string& val) {
      for (std::size_t p; (p = s.find(key)) != std::string::npos;) s.replace(p, key.size(), val);
    };
    rep("{t}", pick(tips_for));
    rep("{c}", pick(concepts));
    rep("{p}", pick(pairs));
    return s;
  };
  static const std::regex assign(R"(^\s*([a-z_][a-z0-9_]*)\s*=[^=])");
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::size_t attempts = 0;
  while (out.size() < count && attempts++ < count * 20) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    std::string p;
    if (u < 0.35 && !c.paragraphs.empty()) {
      p = pick(summarise) + "\n\n" + pick(c.paragraphs);
    } else if (u < 0.7 && !c.functions.empty()) {
      const std::string& f = pick(c.functions);
      std::string form = pick(edits);
      std::vector<std::string> vars;
      std::size_t a = 0;
      while (a < f.size()) {
        std::size_t b = f.find('\n', a);
        if (b == std::string::npos) b = f.size();
        std::smatch m;
        const std::string line = f.substr(a, b - a);
        if (std::regex_search(line, m, assign) && m[1].str() != "self") vars.push_back(m[1].str());
        a = b + 1;
      }
      if (form.find("{a}") != std::string::npos) {
        if (vars.empty()) form = edits[1];
        else {
          const std::string v = pick(vars);
          form.replace(form.find("{a}"), 3, v);
        }
      }
      if (auto q = form.find("{b}"); q != std::string::npos) form.replace(q, 3, pick(new_names));
      p = form + "\n\n" + f;
    } else {
      p = fill(pick(chat_forms));
    }
    if (exclude.count(p) || !seen.insert(p).second) continue;
    out.push_back(p);
  }
  return out;
}

// --- data generation -------------------------------------------------------------------------------------------------------

struct DataOptions {
  std::int64_t max_new_tokens = 192;
  std::int64_t max_prompt_tokens = 448;
  std::int64_t batch = 16;        // sequences decoded together
  std::int64_t top_k = 32;        // stored entries of the target distribution
  double greedy_fraction = 0.6;   // the rest sampled at temperature 1
  double minutes = 15;            // stop starting new prompts after this; unfinished answers are kept as they are
  std::uint64_t seed = 1;
};

struct DataStats {
  std::int64_t records = 0, prompt_tokens = 0, answer_tokens = 0;
  double seconds = 0;
};

/// Runs the target over `prompts` (already in chat-template form) and writes one record per prompt.
inline DataStats generate_records(models::LlamaModel& target, const std::vector<std::vector<std::int32_t>>& prompts,
                                  const std::vector<std::int32_t>& stop_ids, const DataOptions& o, RecordWriter& writer,
                                  bool verbose) {
  struct Active {
    std::size_t prompt = 0;
    std::int64_t slot = -1;
    bool greedy = true;
    std::vector<std::int32_t> tokens;
    std::vector<at::Tensor> feats, ids, probs;  // per forward call, [rows, ...]
    std::int32_t next = -1;                     // sampled, not yet fed
    std::int64_t generated = 0;
  };
  const auto t0 = Clock::now();
  DataStats st;
  std::mt19937_64 rng(o.seed);
  std::vector<Active> active;
  std::size_t next_prompt = 0;
  const std::set<std::int32_t> stops(stop_ids.begin(), stop_ids.end());
  auto sample = [&](const at::Tensor& logits_row, bool greedy) -> std::int32_t {
    if (greedy) return static_cast<std::int32_t>(logits_row.argmax().item<std::int64_t>());
    at::Tensor p = at::softmax(logits_row, -1);
    const float* pp = p.data_ptr<float>();
    double u = std::uniform_real_distribution<double>(0, 1)(rng), acc = 0;
    for (std::int64_t i = 0; i < p.numel(); ++i)
      if ((acc += pp[i]) >= u) return static_cast<std::int32_t>(i);
    return static_cast<std::int32_t>(p.argmax().item<std::int64_t>());
  };
  auto keep = [&](Active& a, const models::ForwardOutput& out, std::int64_t row0, std::int64_t rows, const at::Tensor& logits) {
    a.feats.push_back(out.hidden_post_norm.narrow(0, row0, rows).to(at::kHalf));
    auto [v, i] = at::topk(at::softmax(logits, -1), o.top_k, -1);
    a.ids.push_back(i.to(at::kInt));
    a.probs.push_back(v.to(at::kHalf));
  };
  auto finish = [&](Active& a) {
    Record r;
    r.tokens = a.tokens;
    r.prompt_length = static_cast<std::int32_t>(std::min<std::size_t>(prompts[a.prompt].size(), a.tokens.size()));
    r.features = at::cat(a.feats, 0);
    r.topk_ids = at::cat(a.ids, 0);
    r.topk_probs = at::cat(a.probs, 0);
    writer.write(r);
    ++st.records;
    st.answer_tokens += static_cast<std::int64_t>(a.tokens.size()) - r.prompt_length;
    target.free_sequence(a.slot);
  };
  std::int64_t steps = 0;
  bool stopping = false;
  while (true) {
    // Admit new prompts (prefill one at a time: BLAS over the prompt rows).
    while (!stopping && static_cast<std::int64_t>(active.size()) < o.batch && next_prompt < prompts.size()) {
      Active a;
      a.prompt = next_prompt++;
      a.greedy = std::uniform_real_distribution<double>(0, 1)(rng) < o.greedy_fraction;
      a.slot = target.allocate_sequence();
      a.tokens = prompts[a.prompt];
      if (static_cast<std::int64_t>(a.tokens.size()) > o.max_prompt_tokens) a.tokens.resize(static_cast<std::size_t>(o.max_prompt_tokens));
      models::ForwardBatch b = models::make_chain_batch(a.slot, std::vector<std::int64_t>(a.tokens.begin(), a.tokens.end()));
      b.return_final_hidden = true;
      const auto out = target.forward(b);
      keep(a, out, 0, static_cast<std::int64_t>(a.tokens.size()), out.logits);
      st.prompt_tokens += static_cast<std::int64_t>(a.tokens.size());
      a.next = sample(out.logits[out.logits.size(0) - 1], a.greedy);
      active.push_back(std::move(a));
    }
    // Retire finished ones.
    for (std::size_t i = 0; i < active.size();) {
      Active& a = active[i];
      if (stops.count(a.next) || a.generated >= o.max_new_tokens) {
        finish(a);
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    if (active.empty() && (stopping || next_prompt >= prompts.size())) break;
    if (active.empty()) continue;
    // One decode step over every active sequence.
    models::ForwardBatch b;
    b.cu_num_tokens.push_back(0);
    for (auto& a : active) {
      b.slots.push_back(a.slot);
      b.token_ids.push_back(a.next);
      b.cu_num_tokens.push_back(static_cast<std::int64_t>(b.token_ids.size()));
    }
    b.return_final_hidden = true;
    const auto out = target.forward(b);
    for (std::size_t i = 0; i < active.size(); ++i) {
      Active& a = active[i];
      a.tokens.push_back(a.next);
      ++a.generated;
      const auto r = static_cast<std::int64_t>(i);
      keep(a, out, r, 1, out.logits.narrow(0, r, 1));
      a.next = sample(out.logits[r], a.greedy);
    }
    ++steps;
    const double el = seconds_since(t0);
    if (!stopping && el > o.minutes * 60) {
      stopping = true;
      for (auto& a : active) a.generated = o.max_new_tokens;  // finish everything at the next retire pass
    }
    if (verbose && steps % 25 == 0) {
      std::int64_t live = 0;
      for (auto& a : active) live += a.generated;
      const double tok = static_cast<double>(st.answer_tokens + live);
      const double frac = std::max(static_cast<double>(next_prompt) / static_cast<double>(prompts.size()), el / (o.minutes * 60));
      fmt::print("data: {} / {} prompts done, {} prompt + {} answer tokens, {:.1f} answer tok/s, elapsed {}, ETA {}\n",
                 st.records, prompts.size(), st.prompt_tokens, static_cast<std::int64_t>(tok), tok / el, hms(el),
                 hms(el / std::max(frac, 1e-6) - el));
      std::fflush(stdout);
    }
  }
  st.seconds = seconds_since(t0);
  return st;
}

/// EAGLE-3's training features: re-runs the target over each record's tokens (one prefill per record) and writes the record
/// again with features = the concatenation of the outputs of blocks `layers` ([T, 3 H], float16, in that order: what the
/// decoder hands an EAGLE-3 proposer), the tokens and the stored target distributions unchanged. Returns the records written.
inline std::int64_t fuse_records(models::LlamaModel& target, const std::vector<Record>& data, const std::vector<std::int64_t>& layers,
                                 RecordWriter& writer, bool verbose) {
  const auto t0 = Clock::now();
  std::int64_t done = 0, tokens = 0;
  for (const auto& r : data) {
    const std::int64_t slot = target.allocate_sequence();
    models::ForwardBatch b = models::make_chain_batch(slot, std::vector<std::int64_t>(r.tokens.begin(), r.tokens.end()));
    b.hidden_layers = layers;
    b.last_logits_only = true;
    models::ForwardOutput out;
    try {
      out = target.forward(b);
    } catch (...) {
      target.free_sequence(slot);
      throw;
    }
    target.free_sequence(slot);
    Record f;
    f.tokens = r.tokens;
    f.prompt_length = r.prompt_length;
    f.features = at::cat(out.layer_hidden, 1).to(at::kHalf);
    f.topk_ids = r.topk_ids;
    f.topk_probs = r.topk_probs;
    writer.write(f);
    ++done;
    tokens += static_cast<std::int64_t>(r.tokens.size());
    if (verbose && (done % 25 == 0 || done == static_cast<std::int64_t>(data.size()))) {
      const double el = seconds_since(t0);
      fmt::print("fuse: {} / {} records, {} tokens, {:.0f} tok/s, elapsed {}, ETA {}\n", done, data.size(), tokens, tokens / el, hms(el),
                 hms(el / static_cast<double>(done) * static_cast<double>(static_cast<std::int64_t>(data.size()) - done)));
      std::fflush(stdout);
    }
  }
  return done;
}

// --- shared pieces of the trainable modules ---------------------------------------------------------------------------------

inline torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

/// cos/sin tables [T, hd/2] for positions 0..T-1 (plain RoPE, base theta), as the library's models compute them.
inline std::pair<torch::Tensor, torch::Tensor> rope_tables(std::int64_t T, std::int64_t hd, double theta) {
  const std::int64_t half = hd / 2;
  std::vector<float> c(static_cast<std::size_t>(T * half)), s(static_cast<std::size_t>(T * half));
  for (std::int64_t j = 0; j < half; ++j) {
    const double inv = 1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(hd));
    for (std::int64_t p = 0; p < T; ++p) {
      c[static_cast<std::size_t>(p * half + j)] = static_cast<float>(std::cos(static_cast<double>(p) * inv));
      s[static_cast<std::size_t>(p * half + j)] = static_cast<float>(std::sin(static_cast<double>(p) * inv));
    }
  }
  return {torch::tensor(c).view({T, half}), torch::tensor(s).view({T, half})};
}

/// x [T, heads, hd] rotated in the rotate_half convention.
inline torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const std::int64_t half = x.size(2) / 2;
  auto a = x.narrow(2, 0, half), b = x.narrow(2, half, half);
  auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  return torch::cat({a * c - b * s, b * c + a * s}, 2);
}

/// Weights of one Llama block (Hugging Face names relative to the block prefix).
struct BlockWeights {
  torch::Tensor input_norm;  // undefined for EAGLE-1's first layer
  torch::Tensor post_norm, wq, wk, wv, wo, gate, up, down;
  std::vector<std::pair<std::string, torch::Tensor>> named() const {
    std::vector<std::pair<std::string, torch::Tensor>> v;
    if (input_norm.defined()) v.emplace_back("input_layernorm.weight", input_norm);
    v.emplace_back("post_attention_layernorm.weight", post_norm);
    v.emplace_back("self_attn.q_proj.weight", wq);
    v.emplace_back("self_attn.k_proj.weight", wk);
    v.emplace_back("self_attn.v_proj.weight", wv);
    v.emplace_back("self_attn.o_proj.weight", wo);
    v.emplace_back("mlp.gate_proj.weight", gate);
    v.emplace_back("mlp.up_proj.weight", up);
    v.emplace_back("mlp.down_proj.weight", down);
    return v;
  }
};

struct BlockShape {
  std::int64_t H, nh, nkv, hd, F;
  double eps, theta;
};

inline BlockWeights init_block(const BlockShape& s, bool with_input_norm, std::int64_t num_layers, torch::Generator* gen = nullptr) {
  (void)gen;
  const double std = 0.02, out_std = 0.02 / std::sqrt(2.0 * static_cast<double>(num_layers));
  BlockWeights w;
  if (with_input_norm) w.input_norm = torch::ones({s.H});
  w.post_norm = torch::ones({s.H});
  w.wq = torch::randn({s.nh * s.hd, s.H}) * std;
  w.wk = torch::randn({s.nkv * s.hd, s.H}) * std;
  w.wv = torch::randn({s.nkv * s.hd, s.H}) * std;
  w.wo = torch::randn({s.H, s.nh * s.hd}) * out_std;
  w.gate = torch::randn({s.F, s.H}) * std;
  w.up = torch::randn({s.F, s.H}) * std;
  w.down = torch::randn({s.H, s.F}) * out_std;
  return w;
}

/// One causal Llama block over a single sequence x [T, H].
inline torch::Tensor block_forward(const BlockWeights& w, const BlockShape& s, const torch::Tensor& x, const torch::Tensor& cos,
                                   const torch::Tensor& sin, const torch::Tensor& causal_mask) {
  const std::int64_t T = x.size(0), group = s.nh / s.nkv;
  torch::Tensor a_in = w.input_norm.defined() ? rms_norm(x, w.input_norm, s.eps) : x;
  auto q = rope(torch::linear(a_in, w.wq).view({T, s.nh, s.hd}), cos, sin).transpose(0, 1);    // [nh, T, hd]
  auto k = rope(torch::linear(a_in, w.wk).view({T, s.nkv, s.hd}), cos, sin).transpose(0, 1);   // [nkv, T, hd]
  auto v = torch::linear(a_in, w.wv).view({T, s.nkv, s.hd}).transpose(0, 1);
  if (group > 1) {
    k = k.repeat_interleave(group, 0);
    v = v.repeat_interleave(group, 0);
  }
  auto scores = torch::matmul(q, k.transpose(1, 2)) * (1.0 / std::sqrt(static_cast<double>(s.hd))) + causal_mask;
  auto o = torch::matmul(torch::softmax(scores, -1), v).transpose(0, 1).reshape({T, s.nh * s.hd});
  torch::Tensor h = x + torch::linear(o, w.wo);
  auto n = rms_norm(h, w.post_norm, s.eps);
  return h + torch::linear(torch::silu(torch::linear(n, w.gate)) * torch::linear(n, w.up), w.down);
}

inline torch::Tensor causal_mask(std::int64_t T) {
  return torch::full({T, T}, -std::numeric_limits<float>::infinity()).triu(1);
}

/// Soft cross-entropy of logits [T, V] against the top-k target distribution (ids [T, K], probs [T, K], renormalised).
inline torch::Tensor soft_ce(const torch::Tensor& logits, const torch::Tensor& ids, const torch::Tensor& probs) {
  auto p = probs.to(torch::kFloat);
  p = p / p.sum(-1, true).clamp_min(1e-6);
  auto logq = torch::log_softmax(logits, -1).gather(1, ids.to(torch::kLong));
  return -(p * logq).sum(-1).mean();
}

// --- safetensors (float16) writer ------------------------------------------------------------------------------------------

inline void write_safetensors_f16(const fs::path& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  models::write_tensors_safetensors(path, tensors, at::kHalf);
}

/// The trainable tensors of a module, in the order of its named() list (the order checkpoints store them in).
template <class Module>
struct Trainable {
  std::vector<torch::Tensor> parameters() const {
    std::vector<torch::Tensor> v;
    for (auto& [n, t] : static_cast<const Module&>(*this).named()) v.push_back(t);
    return v;
  }
  void set_requires_grad() {
    for (auto& t : parameters()) t.set_requires_grad(true);
  }
};

// --- the EAGLE head as a trainable module -----------------------------------------------------------------------------------

/// An EAGLE head with one decoder layer, exactly the math of EagleHead::forward for a chain from position 0:
///   EAGLE-1: x = fc([embed(x_{i+1}); f_i]) + bias, the layer without input norm, logits = the target's LM head rows.
///   EAGLE-3: x = fc(fused_i) (3H -> H, the outputs of three target blocks), the midlayer attends over
///            [input_layernorm(embed); hidden_norm(x)] with x as the residual, logits = its own lm_head(norm(out)).
struct EagleTrainable : Trainable<EagleTrainable> {
  proposers::EagleVersion version = proposers::EagleVersion::kEagle1;
  BlockShape shape;
  torch::Tensor fc_w, fc_b;
  BlockWeights layer;
  torch::Tensor hidden_norm, final_norm;  // EAGLE-3 only
  torch::Tensor embed, lm_head;  // the target's, frozen
  // Draft vocabulary (all of the target's when draft_ids is undefined): the head scores lm_head rows draft_ids [Vd];
  // t2d_index [V] is the draft index of a target id or -1. EAGLE-3 trains lm_head_d (its own LM head, started from those
  // rows of the target's); EAGLE-1 keeps it frozen.
  torch::Tensor draft_ids, t2d_index, lm_head_d;
  models::LlamaConfig layer_config;
  std::vector<std::int64_t> feature_layers;  // EAGLE-3: the target blocks whose outputs the fused feature concatenates

  EagleTrainable(const models::LlamaConfig& target, const proposers::EagleTargetWeights& tw, std::uint64_t seed,
                 proposers::EagleVersion v = proposers::EagleVersion::kEagle1) : version(v) {
    torch::manual_seed(seed);
    layer_config = target;
    layer_config.num_layers = 1;
    const std::int64_t H = target.hidden_size;
    const std::int64_t hd = target.head_dim ? target.head_dim : H / target.num_heads;
    shape = {H, target.num_heads, target.num_kv_heads ? target.num_kv_heads : target.num_heads, hd, target.intermediate_size,
             target.rms_norm_eps, target.rope_theta};
    embed = tw.embed_tokens.to(at::kFloat).contiguous();
    lm_head = tw.lm_head.to(at::kFloat).contiguous();
    if (eagle3()) {
      // fc starts as [0.02 randn | 0.02 randn | I]: the fused feature starts as the highest of the three target layers.
      fc_w = torch::cat({torch::randn({H, 2 * H}) * 0.02, torch::eye(H)}, 1);
      BlockShape wide = shape;
      wide.H = 2 * H;  // q/k/v read [norm(embed); norm(x)]
      BlockWeights in = init_block(wide, false, 1);
      layer = init_block(shape, true, 1);
      layer.wq = in.wq, layer.wk = in.wk, layer.wv = in.wv;
      hidden_norm = torch::ones({H});
      final_norm = torch::ones({H});
      lm_head_d = lm_head.clone();
      feature_layers = proposers::eagle3_default_feature_layers(target.num_layers);
    } else {
      // fc starts as [0 | I]: the fused input is the target feature plus a small learned share of the token embedding.
      fc_w = torch::cat({torch::randn({H, H}) * 0.02, torch::eye(H)}, 1);
      fc_b = torch::zeros({H});
      layer = init_block(shape, false, 1);
      lm_head_d = lm_head;
    }
  }
  bool eagle3() const { return version == proposers::EagleVersion::kEagle3; }
  /// Width of one row of the training features: EAGLE-1 the target's final hidden state, EAGLE-3 three layers' outputs.
  std::int64_t feature_width() const { return eagle3() ? 3 * shape.H : shape.H; }
  std::int64_t vocab() const { return lm_head.size(0); }
  std::int64_t draft_vocab() const { return lm_head_d.size(0); }
  /// Restricts the scored vocabulary to `ids` (target ids, distinct), kept in ascending order.
  void set_draft_vocabulary(std::vector<std::int64_t> ids) {
    std::sort(ids.begin(), ids.end());
    if (ids.empty() || std::adjacent_find(ids.begin(), ids.end()) != ids.end() || ids.front() < 0 || ids.back() >= vocab())
      fail("EagleTrainable::set_draft_vocabulary: expected distinct target ids");
    draft_ids = torch::tensor(ids, torch::kLong);
    t2d_index = torch::full({vocab()}, -1, torch::kLong);
    t2d_index.index_put_({draft_ids}, torch::arange(static_cast<std::int64_t>(ids.size()), torch::kLong));
    lm_head_d = lm_head.index_select(0, draft_ids).contiguous();
  }
  std::vector<std::pair<std::string, torch::Tensor>> named() const {
    if (eagle3()) {
      std::vector<std::pair<std::string, torch::Tensor>> v = {{"fc.weight", fc_w}, {"midlayer.hidden_norm.weight", hidden_norm}};
      for (auto& [n, t] : layer.named()) v.emplace_back("midlayer." + n, t);
      v.emplace_back("norm.weight", final_norm);
      v.emplace_back("lm_head.weight", lm_head_d);
      return v;
    }
    std::vector<std::pair<std::string, torch::Tensor>> v = {{"fc.weight", fc_w}, {"fc.bias", fc_b}};
    for (auto& [n, t] : layer.named()) v.emplace_back("layers.0." + n, t);
    return v;
  }
  /// Draft-vocabulary logits of layer outputs [n, H] (EAGLE-3 applies its final norm first).
  torch::Tensor logits(const torch::Tensor& out) const {
    return torch::linear(eagle3() ? rms_norm(out, final_norm, shape.eps) : out, lm_head_d);
  }
  /// tokens_next [T] (x_{i+1}), features [T, feature_width()] -> layer outputs [T, H] (EAGLE-1: the predicted f_{i+1}).
  torch::Tensor forward(const torch::Tensor& tokens_next, const torch::Tensor& features) const {
    return forward_steps(tokens_next, features, 1).front();
  }
  /// Training-time test (as EAGLE-3 trains): `steps` unrolled draft steps over one sequence. Step 1 is forward(); at step
  /// k >= 2 row i reads the head's own step-(k-1) output of row i-1 in place of f_i (row 0 keeps f_0; EAGLE-3 feeds it
  /// straight in as x, skipping fc, as at inference) and attends exactly as the k-th draft of a chain does at inference: to
  /// the step-1 rows j <= i-k+1 (built from true features), to the step-m row i-k+m for 2 <= m < k (the earlier drafts of
  /// its chain) and to itself. Returns [steps] x [T, H].
  std::vector<torch::Tensor> forward_steps(const torch::Tensor& tokens_next, const torch::Tensor& features, int steps) const {
    const std::int64_t T = features.size(0), group = shape.nh / shape.nkv;
    auto emb = embed.index_select(0, tokens_next);
    auto [c, s] = rope_tables(T, shape.hd, shape.theta);
    const double scale = 1.0 / std::sqrt(static_cast<double>(shape.hd));
    std::vector<torch::Tensor> keys, values, outs;
    torch::Tensor in_f = features;
    const auto ninf = -std::numeric_limits<float>::infinity();
    torch::Tensor x1, emb_n;  // EAGLE-3: fc(fused) of step 1, the normalised embedding
    if (eagle3()) {
      x1 = torch::linear(features, fc_w);
      emb_n = rms_norm(emb, layer.input_norm, shape.eps);
    }
    for (int k = 1; k <= steps; ++k) {
      torch::Tensor x, a_in;
      if (eagle3()) {
        x = k == 1 ? x1 : torch::cat({x1.narrow(0, 0, 1), outs.back().narrow(0, 0, T - 1)}, 0);
        a_in = torch::cat({emb_n, rms_norm(x, hidden_norm, shape.eps)}, 1);
      } else {
        if (k >= 2) in_f = torch::cat({features.narrow(0, 0, 1), outs.back().narrow(0, 0, T - 1)}, 0);
        x = torch::linear(torch::cat({emb, in_f}, 1), fc_w, fc_b);
        a_in = x;
      }
      const BlockWeights& w = layer;
      auto q = rope(torch::linear(a_in, w.wq).view({T, shape.nh, shape.hd}), c, s).transpose(0, 1);  // [nh, T, hd]
      auto kk = rope(torch::linear(a_in, w.wk).view({T, shape.nkv, shape.hd}), c, s).transpose(0, 1);
      auto vv = torch::linear(a_in, w.wv).view({T, shape.nkv, shape.hd}).transpose(0, 1);
      if (group > 1) {
        kk = kk.repeat_interleave(group, 0);
        vv = vv.repeat_interleave(group, 0);
      }
      keys.push_back(kk);
      values.push_back(vv);
      // Mask over the keys of steps 1..k: [T, k*T].
      std::vector<torch::Tensor> blocks;
      blocks.push_back(torch::full({T, T}, ninf).triu(-(k - 1) + 1));  // step 1: j <= i-k+1
      for (int m = 2; m <= k; ++m) {
        // step m: only row i-k+m (the diagonal shifted by k-m)
        auto eye = torch::full({T, T}, ninf);
        eye.diagonal(-(k - m)).fill_(0);
        blocks.push_back(eye);
      }
      auto mask = torch::cat(blocks, 1);
      auto K = torch::cat(keys, 1), Vv = torch::cat(values, 1);  // [nh, k*T, hd]
      auto scores = torch::matmul(q, K.transpose(1, 2)) * scale + mask;  // every row sees at least itself
      auto o = torch::matmul(torch::softmax(scores, -1), Vv).transpose(0, 1).reshape({T, shape.nh * shape.hd});
      torch::Tensor h = x + torch::linear(o, w.wo);
      auto n = rms_norm(h, w.post_norm, shape.eps);
      outs.push_back(h + torch::linear(torch::silu(torch::linear(n, w.gate)) * torch::linear(n, w.up), w.down));
    }
    return outs;
  }
  proposers::EagleHeadConfig head_config() const {
    proposers::EagleHeadConfig c;
    c.version = version;
    c.layer = layer_config;
    c.fc_bias = !eagle3();
    c.feature = proposers::EagleFeature::kPostNorm;
    c.draft_vocab_size = draft_vocab();
    if (eagle3()) {
      c.target_hidden_size = shape.H;
      c.feature_layers = feature_layers;
    }
    return c;
  }
  /// The library's EagleHead holding these weights (copied).
  proposers::EagleHead to_head(const proposers::EagleTargetWeights& tw) const {
    std::map<std::string, at::Tensor> w;
    for (auto& [n, t] : named()) w[n] = t.detach().clone();
    if (draft_ids.defined()) w["d2t"] = draft_ids - torch::arange(draft_vocab(), torch::kLong);
    else if (eagle3()) w["d2t"] = torch::zeros({draft_vocab()}, torch::kLong);
    return proposers::EagleHead(head_config(), [&](const std::string& n) {
      auto it = w.find(n);
      return it == w.end() ? at::Tensor() : it->second;
    }, tw);
  }
  /// Copies the weights (and the draft vocabulary) of a saved head of the same version and shape.
  void load_from(const fs::path& dir, const proposers::EagleTargetWeights& tw) {
    const proposers::EagleHead head = proposers::load_eagle_head(dir, tw);
    if (head.version() != version)
      fail(fmt::format("--init: '{}' is an {} head, expected {}", dir.string(), proposers::to_string(head.version()),
                       proposers::to_string(version)));
    // First, so that EAGLE-3's own LM head (one of named()) has the saved rows' shape when the loop copies it.
    if (head.draft_vocab_size() < head.vocab_size()) set_draft_vocabulary(head.draft_to_target());
    std::map<std::string, at::Tensor> w;
    for (auto& [n, t] : head.named_weights()) w[n] = t;
    torch::NoGradGuard ng;
    for (auto& [n, t] : named()) {
      auto it = w.find(n);
      if (it == w.end() || it->second.sizes() != t.sizes())
        fail(fmt::format("--init: '{}': weight '{}' is missing or has another shape", dir.string(), n));
      t.copy_(it->second);
    }
    if (eagle3()) feature_layers = head.config().feature_layers.empty() ? feature_layers : head.config().feature_layers;
  }
  /// Writes config.json (EagleHead::save) and float16 weights.
  void save(const fs::path& dir, const proposers::EagleTargetWeights& tw) const {
    proposers::EagleHead head = to_head(tw);
    head.save(dir);
    write_safetensors_f16(dir / "model.safetensors", head.named_weights());
  }
};

struct EagleLosses {
  torch::Tensor total, reg, ce;
  double top1 = 0;  // fraction of rows whose head argmax equals the target's argmax
  std::int64_t rows = 0;
};

/// The EAGLE objective on one record: rows i = 0..T-2 read (f_i, x_{i+1}) and predict f_{i+1} and the target's distribution
/// at i+1. `ce_fraction` of the rows (at random) get the cross-entropy term (the LM head product dominates the cost).
/// EAGLE-3 drops the feature regression (its records carry fused features, not the next final state) and trains on the
/// cross-entropy alone, weight 1. With
/// `steps` > 1 the unrolled draft steps of forward_steps() add the same objective on their rows (i >= k-1), weighted
/// `step_weight`^(k-1) (EAGLE-3's training-time test). The cross-entropy is over the draft vocabulary: the target's top-k
/// entries outside it are dropped and the rest renormalised.
inline EagleLosses eagle_loss(const EagleTrainable& m, const Record& r, std::int64_t max_len, const torch::Tensor& noise, double ce_fraction,
                              std::mt19937_64& rng, int steps = 1, double step_weight = 0.8) {
  const std::int64_t T = std::min<std::int64_t>(static_cast<std::int64_t>(r.tokens.size()), max_len + 1);
  const std::int64_t n = T - 1;
  auto tokens = torch::from_blob(const_cast<std::int32_t*>(r.tokens.data()), {T}, torch::kInt).to(torch::kLong);
  auto feats = r.features.narrow(0, 0, T).to(torch::kFloat);
  auto in_f = feats.narrow(0, 0, n);
  if (noise.defined() && noise.abs().max().item<double>() > 0) in_f = in_f + (torch::rand_like(in_f) - 0.5) * noise;
  auto target_f = m.eagle3() ? torch::Tensor() : feats.narrow(0, 1, n);
  steps = static_cast<int>(std::min<std::int64_t>(steps, n));
  auto preds = m.forward_steps(tokens.narrow(0, 1, n), in_f, std::max(steps, 1));
  EagleLosses L;
  L.rows = n;
  std::vector<std::int64_t> pick;
  std::uniform_real_distribution<double> u(0, 1);
  for (std::int64_t i = 0; i < n; ++i)
    if (u(rng) < ce_fraction) pick.push_back(i);
  if (pick.empty()) pick.push_back(n - 1);
  auto ids_all = r.topk_ids.narrow(0, 1, n).to(torch::kLong);
  auto probs_all = r.topk_probs.narrow(0, 1, n).to(torch::kFloat);
  if (m.t2d_index.defined()) {  // to draft indices; entries outside the draft vocabulary get probability 0
    auto d = m.t2d_index.index({ids_all});
    probs_all = probs_all * d.ge(0).to(torch::kFloat);
    ids_all = d.clamp_min(0);
  }
  double weight = 1.0;
  for (int k = 1; k <= static_cast<int>(preds.size()); ++k, weight *= step_weight) {
    const std::int64_t first = k - 1;  // rows before it have no real context at this step
    std::vector<std::int64_t> rows;
    for (auto i : pick)
      if (i >= first) rows.push_back(i);
    if (rows.empty()) continue;
    auto pred = preds[static_cast<std::size_t>(k - 1)];
    auto idx = torch::tensor(rows, torch::kLong);
    auto logits = m.logits(pred.index_select(0, idx));
    auto ids = ids_all.index_select(0, idx);
    auto ce = soft_ce(logits, ids, probs_all.index_select(0, idx));
    auto reg = m.eagle3() ? torch::zeros({}) : torch::smooth_l1_loss(pred.narrow(0, first, n - first), target_f.narrow(0, first, n - first));
    const double ce_weight = m.eagle3() ? 1.0 : 0.1;
    if (k == 1) {
      L.reg = reg;
      L.ce = ce;
      L.total = reg + ce_weight * ce;
      torch::NoGradGuard ng;
      // top-1 against the target's argmax (its top-k entry 0), in target ids
      auto am = logits.argmax(-1);
      if (m.draft_ids.defined()) am = m.draft_ids.index({am});
      L.top1 = am.eq(r.topk_ids.narrow(0, 1, n).to(torch::kLong).index_select(0, idx).select(1, 0)).to(torch::kFloat).mean().item<double>();
    } else {
      L.total = L.total + weight * (reg + ce_weight * ce);
    }
  }
  return L;
}

// --- the distilled draft model -----------------------------------------------------------------------------------------------

struct DraftTrainable : Trainable<DraftTrainable> {
  models::LlamaConfig config;
  BlockShape shape;
  torch::Tensor embed, final_norm;
  std::vector<BlockWeights> layers;

  /// A small Llama with the target's vocabulary; the embedding starts as the target's embedding projected on its top
  /// `hidden` principal directions (so related tokens start close), rescaled to an element RMS of 1/sqrt(hidden) (tied
  /// output logits of order 1 at the start).
  DraftTrainable(const models::LlamaConfig& target, const at::Tensor& target_embed, std::int64_t hidden, std::int64_t layers_n,
                 std::int64_t heads, std::int64_t kv_heads, std::int64_t intermediate, std::uint64_t seed) {
    torch::manual_seed(seed);
    config = target;
    config.hidden_size = hidden;
    config.num_layers = layers_n;
    config.num_heads = heads;
    config.num_kv_heads = kv_heads;
    config.head_dim = hidden / heads;
    config.intermediate_size = intermediate;
    config.tie_word_embeddings = true;
    shape = {hidden, heads, kv_heads, hidden / heads, intermediate, target.rms_norm_eps, target.rope_theta};
    {
      torch::NoGradGuard ng;
      auto E = target_embed.to(torch::kFloat);
      auto Ec = E - E.mean(0, true);
      auto C = torch::matmul(Ec.t(), Ec);
      auto [evals, evecs] = torch::linalg_eigh(C, "L");
      auto P = evecs.narrow(1, evecs.size(1) - std::min(hidden, evecs.size(1)), std::min(hidden, evecs.size(1)));
      auto e = torch::matmul(Ec, P);
      if (e.size(1) < hidden) e = torch::cat({e, torch::randn({e.size(0), hidden - e.size(1)}) * 0.02}, 1);
      embed = (e / e.pow(2).mean().sqrt() / std::sqrt(static_cast<double>(hidden))).contiguous();
    }
    for (std::int64_t i = 0; i < layers_n; ++i) layers.push_back(init_block(shape, true, layers_n));
    final_norm = torch::ones({hidden});
  }
  std::vector<std::pair<std::string, torch::Tensor>> named() const {
    std::vector<std::pair<std::string, torch::Tensor>> v = {{"model.embed_tokens.weight", embed}};
    for (std::size_t i = 0; i < layers.size(); ++i)
      for (auto& [n, t] : layers[i].named()) v.emplace_back(fmt::format("model.layers.{}.{}", i, n), t);
    v.emplace_back("model.norm.weight", final_norm);
    return v;
  }
  /// tokens [T] -> final normed hidden [T, H] (logits = hidden @ embed^T).
  torch::Tensor hidden(const torch::Tensor& tokens) const {
    const std::int64_t T = tokens.size(0);
    auto x = embed.index_select(0, tokens);
    auto [c, s] = rope_tables(T, shape.hd, shape.theta);
    auto mask = causal_mask(T);
    for (const auto& l : layers) x = block_forward(l, shape, x, c, s, mask);
    return rms_norm(x, final_norm, shape.eps);
  }
  void save(const fs::path& dir) const {
    fs::create_directories(dir);
    nlohmann::ordered_json j;
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["hidden_act"] = "silu";
    j["hidden_size"] = config.hidden_size;
    j["intermediate_size"] = config.intermediate_size;
    j["num_hidden_layers"] = config.num_layers;
    j["num_attention_heads"] = config.num_heads;
    j["num_key_value_heads"] = config.num_kv_heads;
    j["head_dim"] = config.head_dim;
    j["vocab_size"] = config.vocab_size;
    j["rms_norm_eps"] = config.rms_norm_eps;
    j["rope_theta"] = config.rope_theta;
    j["max_position_embeddings"] = config.max_position_embeddings;
    j["tie_word_embeddings"] = true;
    if (config.bos_token_id) j["bos_token_id"] = *config.bos_token_id;
    if (!config.eos_token_ids.empty()) j["eos_token_id"] = config.eos_token_ids.front();
    j["torch_dtype"] = "float16";
    std::ofstream out(dir / "config.json", std::ios::trunc);
    out << j.dump(2) << "\n";
    if (!out) fail(fmt::format("DraftTrainable::save: writing '{}' failed", (dir / "config.json").string()));
    write_safetensors_f16(dir / "model.safetensors", named());
  }
};

struct DraftLosses {
  torch::Tensor total;
  double top1 = 0;
  std::int64_t rows = 0;
};

/// Cross-entropy of the draft's next-token distribution against the target's top-k distribution at every position.
inline DraftLosses draft_loss(const DraftTrainable& m, const Record& r, std::int64_t max_len) {
  const std::int64_t T = std::min<std::int64_t>(static_cast<std::int64_t>(r.tokens.size()), max_len);
  auto tokens = torch::from_blob(const_cast<std::int32_t*>(r.tokens.data()), {T}, torch::kInt).to(torch::kLong);
  auto logits = torch::linear(m.hidden(tokens), m.embed);
  auto ids = r.topk_ids.narrow(0, 0, T);
  DraftLosses L;
  L.rows = T;
  L.total = soft_ce(logits, ids, r.topk_probs.narrow(0, 0, T));
  {
    torch::NoGradGuard ng;
    L.top1 = logits.argmax(-1).eq(ids.select(1, 0).to(torch::kLong)).to(torch::kFloat).mean().item<double>();
  }
  return L;
}

// --- the training loop ------------------------------------------------------------------------------------------------------

struct TrainOptions {
  double lr = 1e-3;
  double min_lr_ratio = 0.1;
  std::int64_t warmup_steps = 30;
  std::int64_t tokens_per_step = 2048;  // gradient accumulation over records until this many rows
  std::int64_t max_len = 640;
  double epochs = 4;
  double minutes = 12;          // wall-clock budget (the cosine schedule runs to whichever ends first: estimated)
  double clip = 0.5;
  double weight_decay = 0.0;
  double noise = 0.2;           // EAGLE: uniform feature noise amplitude (x feature RMS)
  double ce_fraction = 0.25;    // EAGLE: rows with the cross-entropy term
  int ttt_steps = 1;            // EAGLE: unrolled draft steps per row (training-time test)
  double ttt_weight = 0.8;      // EAGLE: loss weight of step k is ttt_weight^(k-1)
  std::int64_t log_every = 10;
  std::int64_t checkpoint_every = 50;
  std::uint64_t seed = 1;
  fs::path checkpoint;          // resumable state (parameters + optimizer + step); empty = none
  bool verbose = true;
};

struct TrainResult {
  std::int64_t steps = 0, rows = 0;
  double first_loss = 0, last_loss = 0, last_top1 = 0, seconds = 0;
  std::vector<double> step_losses;
};

/// A generic loop over records: `loss_of(record, rng)` returns (loss tensor, rows, top1). Resumes from opts.checkpoint when it
/// exists and writes it every checkpoint_every steps and at the end.
template <class LossFn>
TrainResult train_loop(std::vector<torch::Tensor> params, const std::vector<Record>& data, const TrainOptions& o, LossFn loss_of,
                       const char* what) {
  if (data.empty()) fail(fmt::format("{}: the training set is empty", what));
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(o.lr).betas({0.9, 0.95}).weight_decay(o.weight_decay));
  std::int64_t step = 0, rows_done = 0;
  double elapsed_before = 0;
  if (!o.checkpoint.empty() && fs::exists(o.checkpoint / "state.txt")) {
    std::vector<torch::Tensor> saved;
    torch::load(saved, (o.checkpoint / "params.pt").string());
    if (saved.size() != params.size()) fail(fmt::format("{}: checkpoint '{}' has {} tensors, expected {}", what, o.checkpoint.string(), saved.size(), params.size()));
    {
      torch::NoGradGuard ng;
      for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(saved[i]);
    }
    torch::load(opt, (o.checkpoint / "optimizer.pt").string());
    std::ifstream st(o.checkpoint / "state.txt");
    st >> step >> rows_done >> elapsed_before;
    if (o.verbose) fmt::print("{}: resumed from '{}' at step {} ({} rows, {} elapsed)\n", what, o.checkpoint.string(), step, rows_done, hms(elapsed_before));
  }
  auto save_checkpoint = [&](double el) {
    if (o.checkpoint.empty()) return;
    fs::create_directories(o.checkpoint);
    std::vector<torch::Tensor> copy;
    for (auto& p : params) copy.push_back(p.detach());
    torch::save(copy, (o.checkpoint / "params.pt").string());
    torch::save(opt, (o.checkpoint / "optimizer.pt").string());
    std::ofstream st(o.checkpoint / "state.txt", std::ios::trunc);
    st << step << " " << rows_done << " " << el << "\n";
  };
  std::int64_t total_rows = 0;
  for (const auto& r : data) total_rows += std::min<std::int64_t>(static_cast<std::int64_t>(r.tokens.size()), o.max_len);
  const double planned_rows = o.epochs * static_cast<double>(total_rows);
  std::mt19937_64 rng(o.seed + static_cast<std::uint64_t>(step) * 7919);
  std::vector<std::size_t> order(data.size());
  std::iota(order.begin(), order.end(), 0);
  std::size_t cursor = order.size();
  const auto t0 = Clock::now();
  TrainResult res;
  double ema = -1, ema_top1 = 0;
  std::int64_t rows_at_start = rows_done;
  auto progress = [&](double el) {
    const double by_rows = static_cast<double>(rows_done) / planned_rows;
    const double by_time = el / (o.minutes * 60);
    return std::min(1.0, std::max(by_rows, by_time));
  };
  while (true) {
    const double el = elapsed_before + seconds_since(t0);
    const double frac = progress(el);
    if (frac >= 1.0) break;
    // Learning rate: linear warm-up, then cosine to min_lr_ratio over the planned budget.
    double lr = o.lr;
    if (step < o.warmup_steps) lr = o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
    else lr = o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + std::cos(M_PI * frac)));
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    opt.zero_grad();
    std::int64_t rows = 0;
    double loss_sum = 0, top1_sum = 0;
    while (rows < o.tokens_per_step) {
      if (cursor >= order.size()) {
        std::shuffle(order.begin(), order.end(), rng);
        cursor = 0;
      }
      const Record& r = data[order[cursor++]];
      if (r.tokens.size() < 3) continue;
      auto [loss, n, top1] = loss_of(r, rng);
      (loss * (static_cast<double>(n) / static_cast<double>(o.tokens_per_step))).backward();
      rows += n;
      loss_sum += loss.template item<double>() * static_cast<double>(n);
      top1_sum += top1 * static_cast<double>(n);
    }
    torch::nn::utils::clip_grad_norm_(params, o.clip);
    opt.step();
    ++step;
    rows_done += rows;
    const double l = loss_sum / static_cast<double>(rows), t1 = top1_sum / static_cast<double>(rows);
    res.step_losses.push_back(l);
    if (res.steps == 0) res.first_loss = l;
    ++res.steps;
    ema = ema < 0 ? l : 0.9 * ema + 0.1 * l;
    ema_top1 = res.steps == 1 ? t1 : 0.9 * ema_top1 + 0.1 * t1;
    const double el2 = elapsed_before + seconds_since(t0);
    if (o.verbose && (step % o.log_every == 0 || step == 1)) {
      const double rate = static_cast<double>(rows_done - rows_at_start) / std::max(seconds_since(t0), 1e-9);
      const double f = progress(el2);
      fmt::print("{}: step {} loss {:.4f} (avg {:.4f}) top1 {:.3f} lr {:.2e} | {:.0f} tok/s, epoch {:.2f}, elapsed {}, ETA {}\n",
                 what, step, l, ema, ema_top1, lr, rate, static_cast<double>(rows_done) / static_cast<double>(total_rows),
                 hms(el2), hms(f > 0 ? (el2 / f - el2) : -1));
      std::fflush(stdout);
    }
    if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) save_checkpoint(el2);
  }
  res.seconds = elapsed_before + seconds_since(t0);
  save_checkpoint(res.seconds);
  res.rows = rows_done;
  res.last_loss = ema;
  res.last_top1 = ema_top1;
  return res;
}

/// RMS of the features over (up to) the first 64 records, per block of `block` columns ([W], each block's RMS repeated):
/// EAGLE-3's fused features concatenate three layers of very different scales.
inline torch::Tensor feature_rms(const std::vector<Record>& data, std::int64_t block) {
  if (data.empty()) return torch::ones({block});
  const std::int64_t W = data.front().features.size(1);
  torch::Tensor ss = torch::zeros({W}, torch::kDouble);
  std::int64_t n = 0;
  for (std::size_t i = 0; i < data.size() && i < 64; ++i) {
    ss += data[i].features.to(at::kDouble).pow(2).sum(0);
    n += data[i].features.size(0);
  }
  auto per_block = (ss.view({W / block, block}).sum(1) / static_cast<double>(std::max<std::int64_t>(n, 1) * block)).sqrt();
  return per_block.repeat_interleave(block).to(torch::kFloat);
}

/// The `size` target ids the target emits most often as its argmax over the training set (ties to the smaller id), and the
/// share of rows whose argmax they cover.
inline std::pair<std::vector<std::int64_t>, double> frequent_argmax_tokens(const std::vector<Record>& data, std::int64_t vocab,
                                                                           std::int64_t size) {
  std::vector<std::int64_t> count(static_cast<std::size_t>(vocab), 0);
  std::int64_t rows = 0;
  for (const auto& r : data) {
    auto top = r.topk_ids.select(1, 0).contiguous();
    const std::int32_t* p = top.data_ptr<std::int32_t>();
    for (std::int64_t i = 0; i < top.numel(); ++i)
      if (p[i] >= 0 && p[i] < vocab) ++count[static_cast<std::size_t>(p[i])], ++rows;
  }
  std::vector<std::int64_t> ids(static_cast<std::size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](auto a, auto b) { return count[static_cast<std::size_t>(a)] > count[static_cast<std::size_t>(b)]; });
  ids.resize(static_cast<std::size_t>(std::min(size, vocab)));
  std::int64_t covered = 0;
  for (auto i : ids) covered += count[static_cast<std::size_t>(i)];
  return {ids, rows ? static_cast<double>(covered) / static_cast<double>(rows) : 0.0};
}

inline TrainResult train_eagle(EagleTrainable& m, const std::vector<Record>& data, const TrainOptions& o) {
  m.set_requires_grad();
  const torch::Tensor noise = o.noise * feature_rms(data, m.shape.H);
  return train_loop(m.parameters(), data, o, [&](const Record& r, std::mt19937_64& rng) {
    auto L = eagle_loss(m, r, o.max_len, noise, o.ce_fraction, rng, o.ttt_steps, o.ttt_weight);
    return std::tuple<torch::Tensor, std::int64_t, double>(L.total, L.rows, L.top1);
  }, "eagle");
}

/// Held-out accuracy of the unrolled draft steps: for step k, the share of rows (i >= k-1, answer rows only when
/// `answers_only`) whose draft argmax equals the target's argmax given the true tokens so far — at temperature 0 the chance
/// that draft k is accepted when drafts 1..k-1 were.
inline std::vector<double> eagle_step_accuracy(const EagleTrainable& m, const std::vector<Record>& data, int steps, std::int64_t max_len,
                                               bool answers_only) {
  torch::NoGradGuard ng;
  std::vector<double> hit(static_cast<std::size_t>(steps), 0.0), rows(static_cast<std::size_t>(steps), 0.0);
  for (const auto& r : data) {
    const std::int64_t T = std::min<std::int64_t>(static_cast<std::int64_t>(r.tokens.size()), max_len + 1);
    const std::int64_t n = T - 1;
    if (n < steps) continue;
    auto tokens = torch::from_blob(const_cast<std::int32_t*>(r.tokens.data()), {T}, torch::kInt).to(torch::kLong);
    auto feats = r.features.narrow(0, 0, n).to(torch::kFloat);
    auto outs = m.forward_steps(tokens.narrow(0, 1, n), feats, steps);
    auto want = r.topk_ids.narrow(0, 1, n).select(1, 0).to(torch::kLong);
    // row i predicts token i+2; an answer token has index >= prompt_length
    const std::int64_t first_answer_row = std::max<std::int64_t>(0, r.prompt_length - 2);
    for (int k = 1; k <= steps; ++k) {
      const std::int64_t b = std::max<std::int64_t>(k - 1, answers_only ? first_answer_row : 0);
      if (b >= n) continue;
      auto am = m.logits(outs[static_cast<std::size_t>(k - 1)].narrow(0, b, n - b)).argmax(-1);
      if (m.draft_ids.defined()) am = m.draft_ids.index({am});
      hit[static_cast<std::size_t>(k - 1)] += am.eq(want.narrow(0, b, n - b)).sum().item<double>();
      rows[static_cast<std::size_t>(k - 1)] += static_cast<double>(n - b);
    }
  }
  for (std::size_t k = 0; k < hit.size(); ++k) hit[k] = rows[k] > 0 ? hit[k] / rows[k] : 0.0;
  return hit;
}

inline TrainResult train_draft(DraftTrainable& m, const std::vector<Record>& data, const TrainOptions& o) {
  m.set_requires_grad();
  return train_loop(m.parameters(), data, o, [&](const Record& r, std::mt19937_64&) {
    auto L = draft_loss(m, r, o.max_len);
    return std::tuple<torch::Tensor, std::int64_t, double>(L.total, L.rows, L.top1);
  }, "draft");
}

}  // namespace specdec::train

#ifndef SPECDEC_TRAIN_NO_MAIN

#include <CLI/CLI.hpp>

namespace {

namespace fs = std::filesystem;
using namespace specdec::train;

#ifndef SPECDEC_SOURCE_DIR
#define SPECDEC_SOURCE_DIR "."
#endif
const fs::path kSourceDir = SPECDEC_SOURCE_DIR;

std::set<std::string> demo_prompt_texts() {
  std::set<std::string> out;
  std::ifstream in(kSourceDir / "examples" / "prompts" / "demo.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (trim(line).empty()) continue;
    try {
      out.insert(nlohmann::json::parse(line).at("prompt").get<std::string>());
    } catch (...) {
    }
  }
  return out;
}

void add_train_flags(CLI::App* app, TrainOptions& t, std::vector<std::string>& data, std::string& out, std::string& ckpt) {
  app->add_option("--data", data, "training set(s) written by `specdec-train data` (several files are concatenated)")->required();
  app->add_option("--out", out, "output checkpoint directory")->required();
  app->add_option("--checkpoint", ckpt, "resumable training state directory (resumes when it exists)");
  app->add_option("--lr", t.lr, "peak learning rate")->capture_default_str();
  app->add_option("--warmup", t.warmup_steps, "warm-up steps")->capture_default_str();
  app->add_option("--tokens-per-step", t.tokens_per_step, "rows per optimizer step")->capture_default_str();
  app->add_option("--max-len", t.max_len, "rows per record at most")->capture_default_str();
  app->add_option("--epochs", t.epochs, "passes over the data at most")->capture_default_str();
  app->add_option("--minutes", t.minutes, "wall-clock budget")->capture_default_str();
  app->add_option("--clip", t.clip, "gradient norm clip")->capture_default_str();
  app->add_option("--checkpoint-every", t.checkpoint_every, "steps between checkpoints")->capture_default_str();
  app->add_option("--seed", t.seed, "seed")->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"specdec-train: build a training set from the target and train an EAGLE-1 head or a distilled draft model"};
  app.require_subcommand(1);
  std::string model = (kSourceDir / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
  int threads = 2;
  app.add_option("--model", model, "target model (GGUF)")->capture_default_str();
  app.add_option("--threads", threads, "torch intra-op threads")->capture_default_str();

  auto* data_cmd = app.add_subcommand("data", "run the target over chat prompts made from a corpus; write the training set");
  DataOptions dopt;
  std::string data_out;
  std::vector<std::string> corpus = {"/usr/lib/python3.11"};
  std::size_t num_prompts = 2000;
  bool append = false;
  data_cmd->add_option("--out", data_out, "training set file")->required();
  data_cmd->add_option("--corpus", corpus, "files or directories of Python sources")->capture_default_str();
  data_cmd->add_option("--num-prompts", num_prompts, "prompts to build")->capture_default_str();
  data_cmd->add_option("--max-new-tokens", dopt.max_new_tokens, "answer tokens per prompt at most")->capture_default_str();
  data_cmd->add_option("--max-prompt-tokens", dopt.max_prompt_tokens, "prompt tokens kept at most")->capture_default_str();
  data_cmd->add_option("--batch", dopt.batch, "sequences decoded together")->capture_default_str();
  data_cmd->add_option("--top-k", dopt.top_k, "stored entries of the target distribution")->capture_default_str();
  data_cmd->add_option("--greedy-fraction", dopt.greedy_fraction, "share of greedy answers (others sampled at T=1)")->capture_default_str();
  data_cmd->add_option("--minutes", dopt.minutes, "wall-clock budget")->capture_default_str();
  data_cmd->add_option("--seed", dopt.seed, "seed (prompt choice and sampling)")->capture_default_str();
  data_cmd->add_flag("--append", append, "append to an existing training set");

  auto* fuse_cmd = app.add_subcommand("fuse", "add EAGLE-3's fused features (three target layers) to training sets");
  std::vector<std::string> f_data;
  std::string f_out;
  fuse_cmd->add_option("--data", f_data, "training set(s) written by `specdec-train data`")->required();
  fuse_cmd->add_option("--out", f_out, "output training set with [T, 3 x hidden] features")->required();

  auto* eagle_cmd = app.add_subcommand("eagle", "train an EAGLE head (EAGLE-1, or EAGLE-3 on `fuse`d training sets)");
  TrainOptions eopt;
  std::vector<std::string> e_data;
  std::string e_out, e_ckpt;
  std::int64_t draft_vocab = 0;
  add_train_flags(eagle_cmd, eopt, e_data, e_out, e_ckpt);
  eagle_cmd->add_option("--noise", eopt.noise, "uniform feature noise amplitude (x feature RMS)")->capture_default_str();
  eagle_cmd->add_option("--ce-fraction", eopt.ce_fraction, "share of rows with the cross-entropy term")->capture_default_str();
  eagle_cmd->add_option("--draft-vocab", draft_vocab,
                        "score only the N tokens the target emits most often as its argmax in the data (0 = all)")->capture_default_str();
  eagle_cmd->add_option("--ttt-steps", eopt.ttt_steps, "unrolled draft steps trained per row (training-time test)")->capture_default_str();
  eagle_cmd->add_option("--ttt-weight", eopt.ttt_weight, "loss weight of step k: w^(k-1)")->capture_default_str();
  std::string e_init;
  std::int64_t holdout = 0;
  eagle_cmd->add_option("--init", e_init, "start from this saved head (same shape; its draft vocabulary too)");
  int e_version = 1;
  eagle_cmd->add_option("--version", e_version, "1: EAGLE-1 (final hidden state); 3: EAGLE-3 (fused features from `fuse`)")
      ->check(CLI::IsMember({1, 3}))
      ->capture_default_str();
  eagle_cmd->add_option("--holdout", holdout, "records kept out of training (the last ones): per-step accuracy reported on them")
      ->capture_default_str();

  auto* draft_cmd = app.add_subcommand("draft", "distil a small draft model on a training set");
  TrainOptions topt;
  topt.lr = 2e-3;
  std::vector<std::string> t_data;
  std::string t_out, t_ckpt;
  std::int64_t hidden = 160, layers = 3, heads = 5, kv_heads = 5, intermediate = 640;
  add_train_flags(draft_cmd, topt, t_data, t_out, t_ckpt);
  draft_cmd->add_option("--hidden", hidden, "hidden width")->capture_default_str();
  draft_cmd->add_option("--layers", layers, "decoder layers")->capture_default_str();
  draft_cmd->add_option("--heads", heads, "attention heads")->capture_default_str();
  draft_cmd->add_option("--kv-heads", kv_heads, "key/value heads")->capture_default_str();
  draft_cmd->add_option("--intermediate", intermediate, "MLP width")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    at::set_num_threads(threads);
    if (!fs::exists(model)) fail(fmt::format("--model: '{}' does not exist", model));
    if (data_cmd->parsed()) {
      const auto t0 = Clock::now();
      specdec::models::LlamaOptions lo;
      lo.num_threads = threads;
      lo.initial_cache_slots = dopt.batch + 1;
      lo.initial_cache_capacity = dopt.max_prompt_tokens + dopt.max_new_tokens + 8;
      auto target = specdec::models::load_llama_gguf(model, lo);
      const specdec::models::GgufFile file(model);
      const auto tok = specdec::models::Tokenizer::from_gguf(file);
      const auto tmpl = specdec::models::ChatTemplate::from_gguf(file);
      std::vector<fs::path> roots(corpus.begin(), corpus.end());
      const Corpus c = load_corpus(roots);
      fmt::print("data: corpus {} paragraphs, {} functions from {}\n", c.paragraphs.size(), c.functions.size(), fmt::join(corpus, ", "));
      const auto texts = make_prompts(c, num_prompts, dopt.seed, demo_prompt_texts());
      std::vector<std::vector<std::int32_t>> prompts;
      for (const auto& t : texts) {
        const std::vector<specdec::models::ChatMessage> msgs = {{"user", t}};
        prompts.push_back(tok.encode(tmpl.apply(msgs, true), {.add_special = true, .parse_special = true}));
      }
      std::vector<std::int32_t> stops;
      for (std::int32_t id = 0; id < tok.vocab_size(); ++id)
        if (tok.is_end_of_generation(id)) stops.push_back(id);
      RecordWriter w(data_out, target.hidden_size(), dopt.top_k, append);
      fmt::print("data: {} prompts (e.g. \"{}\"), batch {}, up to {} answer tokens, {} min\n", prompts.size(),
                 texts.empty() ? "" : texts.front().substr(0, 60), dopt.batch, dopt.max_new_tokens, dopt.minutes);
      const auto st = generate_records(target, prompts, stops, dopt, w, true);
      fmt::print("data: done: {} records, {} prompt + {} answer tokens in {} ({} incl. loading)\n", st.records, st.prompt_tokens,
                 st.answer_tokens, hms(st.seconds), hms(seconds_since(t0)));
      return 0;
    }
    if (fuse_cmd->parsed()) {
      std::int64_t H = 0;
      const auto data = read_record_files(f_data, &H);
      std::int64_t longest = 0;
      for (const auto& r : data) longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(r.tokens.size()));
      specdec::models::LlamaOptions lo;
      lo.num_threads = threads;
      lo.initial_cache_capacity = longest + 8;
      auto target = specdec::models::load_llama_gguf(model, lo);
      if (H != target.hidden_size())
        fail(fmt::format("--data: features of width {}, expected the target's final hidden state ({})", H, target.hidden_size()));
      const auto layers = specdec::proposers::eagle3_default_feature_layers(target.config().num_layers);
      fmt::print("fuse: {} records; features = outputs of target blocks {}\n", data.size(), fmt::join(layers, ", "));
      const fs::path tmp = fs::path(f_out).concat(".partial");
      {
        RecordWriter w(tmp, 3 * target.hidden_size(), data.empty() ? 0 : data.front().topk_ids.size(1), false);
        fuse_records(target, data, layers, w, true);
      }
      fs::rename(tmp, f_out);  // all or nothing
      return 0;
    }
    const auto tw = specdec::proposers::eagle_target_weights_from_gguf(model);
    const specdec::models::GgufFile file(model);
    auto target_cfg = specdec::models::llama_config_from_gguf(file);
    if (target_cfg.num_kv_heads == 0) target_cfg.num_kv_heads = target_cfg.num_heads;
    if (target_cfg.head_dim == 0) target_cfg.head_dim = target_cfg.hidden_size / target_cfg.num_heads;
    if (eagle_cmd->parsed()) {
      std::int64_t H = 0;
      auto data = read_record_files(e_data, &H);
      if (holdout < 0 || holdout >= static_cast<std::int64_t>(data.size()))
        fail(fmt::format("--holdout: expected in [0, {}), got {}", data.size(), holdout));
      std::vector<Record> held(std::make_move_iterator(data.end() - holdout), std::make_move_iterator(data.end()));
      data.resize(data.size() - static_cast<std::size_t>(holdout));
      const auto version = e_version == 3 ? specdec::proposers::EagleVersion::kEagle3 : specdec::proposers::EagleVersion::kEagle1;
      const std::int64_t want_h = (e_version == 3 ? 3 : 1) * target_cfg.hidden_size;
      if (H != want_h)
        fail(fmt::format("--data: features of width {}, EAGLE-{} expects {}{}", H, e_version, want_h,
                         e_version == 3 ? " (three layers: run `specdec-train fuse` on the training set first)" : ""));
      std::int64_t rows = 0;
      for (auto& r : data) rows += static_cast<std::int64_t>(r.tokens.size());
      fmt::print("eagle: {} records, {} tokens\n", data.size(), rows);
      if (eopt.ttt_steps < 1) fail(fmt::format("--ttt-steps: expected >= 1, got {}", eopt.ttt_steps));
      if (draft_vocab < 0 || draft_vocab > target_cfg.vocab_size)
        fail(fmt::format("--draft-vocab: expected in [0, {}], got {}", target_cfg.vocab_size, draft_vocab));
      eopt.checkpoint = e_ckpt;
      EagleTrainable m(target_cfg, tw, eopt.seed, version);
      if (m.eagle3() && e_init.empty()) {
        // EAGLE-3's final norm starts as the target's: with fc passing the high feature through, its logits start at the
        // scale of the target's own.
        const auto* info = file.find_tensor("output_norm.weight");
        if (!info || info->shape != std::vector<std::int64_t>{target_cfg.hidden_size})
          fail(fmt::format("--model: '{}' has no output_norm.weight of shape [{}]", model, target_cfg.hidden_size));
        torch::NoGradGuard ng;
        file.dequantize(*info, std::span<float>(m.final_norm.data_ptr<float>(), static_cast<std::size_t>(m.final_norm.numel())));
      }
      if (!e_init.empty()) {
        m.load_from(e_init, tw);
        fmt::print("eagle: initialised from '{}' (draft vocabulary {})\n", e_init, m.draft_vocab());
      } else if (draft_vocab > 0 && draft_vocab < target_cfg.vocab_size) {
        auto [ids, coverage] = frequent_argmax_tokens(data, target_cfg.vocab_size, draft_vocab);
        m.set_draft_vocabulary(ids);
        fmt::print("eagle: draft vocabulary of {} tokens covers {:.2f}% of the target's argmax tokens in the data\n", draft_vocab,
                   100 * coverage);
      }
      auto report = [&](const char* when) {
        if (held.empty()) return;
        const int k = std::max(eopt.ttt_steps, 3);
        const auto all = eagle_step_accuracy(m, held, k, eopt.max_len, false);
        const auto ans = eagle_step_accuracy(m, held, k, eopt.max_len, true);
        fmt::print("eagle: held-out ({} records) accuracy by draft step {}: all rows {:.3f}, answer rows {:.3f}\n", held.size(), when,
                   fmt::join(all, " "), fmt::join(ans, " "));
        std::fflush(stdout);
      };
      report("before");
      const auto res = eopt.minutes > 0 ? train_eagle(m, data, eopt) : TrainResult{};
      report("after");
      m.save(e_out, tw);
      auto loaded = specdec::proposers::load_eagle_head(e_out, tw);
      fmt::print("eagle: done: {} steps, {} rows in {}; loss {:.4f} -> {:.4f}, top1 {:.3f}; saved {} ({} bytes)\n", res.steps,
                 res.rows, hms(res.seconds), res.first_loss, res.last_loss, res.last_top1, e_out,
                 fs::file_size(fs::path(e_out) / "model.safetensors"));
      (void)loaded;
      return 0;
    }
    if (draft_cmd->parsed()) {
      const auto data = read_record_files(t_data);
      std::int64_t rows = 0;
      for (auto& r : data) rows += static_cast<std::int64_t>(r.tokens.size());
      fmt::print("draft: {} records, {} tokens; hidden {}, {} layers, {} heads ({} kv), MLP {}\n", data.size(), rows, hidden, layers,
                 heads, kv_heads, intermediate);
      topt.checkpoint = t_ckpt;
      DraftTrainable m(target_cfg, tw.embed_tokens, hidden, layers, heads, kv_heads, intermediate, topt.seed);
      const auto res = train_draft(m, data, topt);
      m.save(t_out);
      auto loaded = specdec::models::load_llama_safetensors(t_out);
      fmt::print("draft: done: {} steps, {} rows in {}; loss {:.4f} -> {:.4f}, top1 {:.3f}; saved {} ({} bytes)\n", res.steps, res.rows,
                 hms(res.seconds), res.first_loss, res.last_loss, res.last_top1, t_out,
                 fs::file_size(fs::path(t_out) / "model.safetensors"));
      (void)loaded;
      return 0;
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "specdec-train: {}\n", e.what());
    return 1;
  }
  return 0;
}

#endif  // SPECDEC_TRAIN_NO_MAIN
