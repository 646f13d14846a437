// specdec-train data: records round-trip and resume across sittings, the prompt corpus leaves the examples' prompts out,
// generation is deterministic with a seed (and does not depend on the batch), the temperature mix draws its shares, and the
// row summary (top-k, probabilities, sampled token) matches the target's distribution.
#include "specdec/train/corpus.hpp"
#include "specdec/train/data.hpp"
#include "specdec/train/records.hpp"
#include "specdec/torch/rows.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <map>

namespace {

namespace fs = std::filesystem;
namespace st = specdec::train;
using specdec::models::LlamaConfig;
using specdec::models::LlamaModel;

const fs::path kExamplePrompts = fs::path(SPECDEC_SOURCE_DIR) / "examples" / "prompts";

fs::path temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / fmt::format("specdec-data-test-{}-{}", name, ::getpid());
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// A tiny random target whose next-token distributions are broad (logits of a few units), so sampled answers differ.
LlamaModel tiny_target(std::int64_t slots) {
  LlamaConfig c;
  c.vocab_size = 96;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.rope_theta = 10000;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 256;
  torch::manual_seed(7);
  std::map<std::string, at::Tensor> w;
  auto r = [](std::vector<std::int64_t> shape, double std) { return torch::randn(shape) * std; };
  w["model.embed_tokens.weight"] = r({96, 32}, 0.4);
  w["model.norm.weight"] = torch::ones({32});
  for (int l = 0; l < 2; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    w[p + "input_layernorm.weight"] = torch::ones({32});
    w[p + "post_attention_layernorm.weight"] = torch::ones({32});
    w[p + "self_attn.q_proj.weight"] = r({32, 32}, 0.3);
    w[p + "self_attn.k_proj.weight"] = r({16, 32}, 0.3);
    w[p + "self_attn.v_proj.weight"] = r({16, 32}, 0.2);
    w[p + "self_attn.o_proj.weight"] = r({32, 32}, 0.2);
    w[p + "mlp.gate_proj.weight"] = r({64, 32}, 0.2);
    w[p + "mlp.up_proj.weight"] = r({64, 32}, 0.2);
    w[p + "mlp.down_proj.weight"] = r({32, 64}, 0.15);
  }
  specdec::models::LlamaOptions o;
  o.initial_cache_slots = slots;
  o.num_threads = 1;
  return LlamaModel(c, specdec::train::weights_of(w), o);
}

std::vector<std::vector<std::int32_t>> random_prompts(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::int32_t>> prompts;
  for (int i = 0; i < n; ++i) {
    std::vector<std::int32_t> p;
    for (int j = 0; j < 5 + 4 * (i % 5); ++j) p.push_back(static_cast<std::int32_t>(rng() % 96));
    prompts.push_back(p);
  }
  return prompts;
}

// Records by prompt index.
std::map<std::size_t, st::Record> generate(LlamaModel& m, const std::vector<std::vector<std::int32_t>>& prompts, const st::DataOptions& o,
                                           const std::vector<std::int32_t>& stops = {}, const std::vector<bool>& skip = {}) {
  std::map<std::size_t, st::Record> out;
  st::generate_records(m, prompts, stops, o, [&](std::size_t i, const st::Record& r) {
    st::Record c = r;
    c.features = r.features.clone();
    c.topk_ids = r.topk_ids.clone();
    c.topk_probs = r.topk_probs.clone();
    EXPECT_TRUE(out.emplace(i, std::move(c)).second) << "prompt " << i << " answered twice";
  }, false, skip);
  return out;
}

bool same_record(const st::Record& a, const st::Record& b) {
  return a.tokens == b.tokens && a.prompt_length == b.prompt_length && at::equal(a.features, b.features) &&
         at::equal(a.topk_ids, b.topk_ids) && at::equal(a.topk_probs, b.topk_probs);
}

st::DataOptions mixed_options() {
  st::DataOptions o;
  o.max_new_tokens = 12;
  o.top_k = 8;
  o.temperatures = st::parse_temperature_mix("0:1,0.7:1,1:1");
  o.seed = 5;
  return o;
}

TEST(TrainData, RecordsRoundTripAndAppendingCutsAnInterruptedRecord) {
  auto m = tiny_target(4);
  const auto prompts = random_prompts(5, 1);
  const fs::path dir = temp_dir("append");
  const fs::path file = dir / "data.bin";
  const auto recs = generate(m, prompts, mixed_options());
  ASSERT_EQ(recs.size(), 5u);
  {
    st::RecordWriter w(file, 32, 8, false);
    for (std::size_t i = 0; i < 3; ++i) w.write(recs.at(i));
  }
  auto back = st::read_records(file);
  ASSERT_EQ(back.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_record(back[i], recs.at(i))) << i;
  // An interrupted sitting: half of a fourth record.
  const auto complete = fs::file_size(file);
  {
    std::ofstream out(file, std::ios::binary | std::ios::app);
    const std::int32_t head[2] = {40, 10};
    out.write(reinterpret_cast<const char*>(head), 8);
    out.write(std::string(300, 'x').data(), 300);
  }
  auto scan = st::scan_record_file(file);
  EXPECT_EQ(scan.records, 3);
  EXPECT_EQ(scan.complete_bytes, complete);
  ASSERT_EQ(scan.prompts.size(), 3u);
  EXPECT_EQ(scan.prompts[1], prompts[1]);
  EXPECT_EQ(scan.answer_tokens, 3 * 12);
  // The next sitting appends after the last complete record.
  {
    st::RecordWriter w(file, 32, 8, true);
    w.write(recs.at(3));
    w.write(recs.at(4));
  }
  back = st::read_records(file);
  ASSERT_EQ(back.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_TRUE(same_record(back[i], recs.at(i))) << i;
  // The first N records only (specdec-train --records): of one file, and across files read in order.
  back = st::read_records(file, nullptr, 2);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_TRUE(same_record(back[1], recs.at(1)));
  back = st::read_record_files({file.string(), file.string()}, nullptr, 7);
  ASSERT_EQ(back.size(), 7u);
  EXPECT_TRUE(same_record(back[6], recs.at(1)));
  EXPECT_EQ(st::read_record_files({file.string(), file.string()}).size(), 10u);
  // Tokens and argmax without the features (specdec-train corpus): each record's tokens, prompt length and the first
  // of its top-k ids, the whole file or its first N records.
  std::vector<std::vector<std::int32_t>> tokens, argmax;
  std::vector<std::int32_t> prompt_lengths;
  const auto each = [&](std::span<const std::int32_t> t, std::int32_t p, std::span<const std::int32_t> a) {
    tokens.emplace_back(t.begin(), t.end());
    prompt_lengths.push_back(p);
    argmax.emplace_back(a.begin(), a.end());
  };
  EXPECT_EQ(st::for_each_record_tokens(file, each), 5);
  ASSERT_EQ(tokens.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(tokens[i], recs.at(i).tokens) << i;
    EXPECT_EQ(prompt_lengths[i], recs.at(i).prompt_length) << i;
    const at::Tensor first = recs.at(i).topk_ids.select(1, 0).contiguous();
    EXPECT_EQ(argmax[i], std::vector<std::int32_t>(first.data_ptr<std::int32_t>(), first.data_ptr<std::int32_t>() + first.numel()))
        << i;
  }
  tokens.clear();
  EXPECT_EQ(st::for_each_record_tokens(file, each, 2), 2);
  EXPECT_EQ(tokens.size(), 2u);
  // A file of another shape is refused.
  EXPECT_THROW(st::RecordWriter(file, 64, 8, true), std::exception);
  EXPECT_THROW(st::RecordWriter(file, 32, 4, true), std::exception);
  fs::remove_all(dir);
}

TEST(TrainData, GenerationIsDeterministicWithASeedWhateverTheBatch) {
  auto m = tiny_target(8);
  const auto prompts = random_prompts(9, 2);
  st::DataOptions o = mixed_options();
  o.batch = 4;
  const auto a = generate(m, prompts, o);
  const auto b = generate(m, prompts, o);
  st::DataOptions one = o;
  one.batch = 1;
  const auto c = generate(m, prompts, one);
  st::DataOptions small_prefill = o;
  small_prefill.batch = 7;
  small_prefill.prefill_rows = 6;
  const auto d = generate(m, prompts, small_prefill);
  ASSERT_EQ(a.size(), prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_TRUE(same_record(a.at(i), b.at(i))) << "prompt " << i;
    EXPECT_EQ(a.at(i).tokens, c.at(i).tokens) << "prompt " << i << " alone";
    EXPECT_EQ(a.at(i).tokens, d.at(i).tokens) << "prompt " << i << " batch 7";
    EXPECT_TRUE(at::allclose(a.at(i).features.to(at::kFloat), c.at(i).features.to(at::kFloat), 1e-2, 1e-2)) << i;
  }
  // Another seed changes the sampled answers (and only by the seed: temperatures and uniforms are drawn from it).
  st::DataOptions other = o;
  other.seed = 6;
  const auto e = generate(m, prompts, other);
  int differ = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) differ += e.at(i).tokens != a.at(i).tokens;
  EXPECT_GE(differ, 3);
  // Greedy records equal the target's own greedy decoding.
  st::DataOptions greedy = o;
  greedy.temperatures = {{0, 1}};
  const auto g = generate(m, prompts, greedy);
  for (std::size_t i = 0; i < 3; ++i) {
    std::vector<std::int64_t> seq(prompts[i].begin(), prompts[i].end());
    const std::int64_t slot = m.allocate_sequence();
    auto out = m.forward(specdec::models::make_chain_batch(slot, seq));
    for (int t = 0; t < 12; ++t) {
      const std::int64_t next = specdec::torch::tensor_of(out.logits)[specdec::torch::tensor_of(out.logits).size(0) - 1].argmax().item<std::int64_t>();
      seq.push_back(next);
      out = m.forward(specdec::models::make_chain_batch(slot, std::vector<std::int64_t>{next}));
    }
    m.free_sequence(slot);
    EXPECT_EQ(std::vector<std::int64_t>(g.at(i).tokens.begin(), g.at(i).tokens.end()), seq) << "prompt " << i;
  }
}

TEST(TrainData, StopsSkipsAndLongPrompts) {
  auto m = tiny_target(4);
  auto prompts = random_prompts(6, 3);
  prompts[2].assign(50, 7);  // longer than max_prompt_tokens
  st::DataOptions o = mixed_options();
  o.batch = 3;
  o.max_prompt_tokens = 40;
  std::vector<bool> skip(prompts.size(), false);
  skip[4] = true;
  const auto full = generate(m, prompts, o);
  const auto recs = generate(m, prompts, o, {}, skip);
  EXPECT_EQ(recs.size(), 4u);
  EXPECT_FALSE(recs.count(2));
  EXPECT_FALSE(recs.count(4));
  for (const auto& [i, r] : recs) {  // the same answers (this float32 target's rows may round differently beside other rows)
    EXPECT_EQ(r.tokens, full.at(i).tokens) << "a skipped prompt changed prompt " << i;
    EXPECT_TRUE(at::allclose(r.features.to(at::kFloat), full.at(i).features.to(at::kFloat), 1e-2, 1e-2)) << i;
  }
  // A stop token ends an answer before it is fed; every answer token holds a feature row and its top-k.
  const auto& f0 = full.at(0);
  const auto P0 = static_cast<std::size_t>(f0.prompt_length);
  const std::int32_t stop = f0.tokens.at(P0 + 3);
  const auto first = static_cast<std::size_t>(std::find(f0.tokens.begin() + static_cast<std::ptrdiff_t>(P0), f0.tokens.end(), stop) - f0.tokens.begin());
  const auto stopped = generate(m, prompts, o, {stop});
  const auto& r0 = stopped.at(0);
  EXPECT_EQ(r0.tokens, std::vector<std::int32_t>(f0.tokens.begin(), f0.tokens.begin() + static_cast<std::ptrdiff_t>(first)));
  for (const auto& [i, r] : stopped) {
    EXPECT_EQ(r.features.size(0), static_cast<std::int64_t>(r.tokens.size()));
    for (std::size_t t = static_cast<std::size_t>(r.prompt_length); t < r.tokens.size(); ++t) EXPECT_NE(r.tokens[t], stop);
  }
  std::vector<bool> bad(3, false);
  EXPECT_THROW(generate(m, prompts, o, {}, bad), std::exception);
}

TEST(TrainData, TemperatureMixDrawsItsShares) {
  const auto mix = st::parse_temperature_mix("0:0.4, 0.7:0.3,1:0.3");
  ASSERT_EQ(mix.size(), 3u);
  EXPECT_DOUBLE_EQ(mix[1].temperature, 0.7);
  EXPECT_DOUBLE_EQ(mix[1].weight, 0.3);
  EXPECT_EQ(st::parse_temperature_mix("0.7").at(0).weight, 1.0);
  for (const char* bad : {"", "x", "0:-1", "-1:1", "0:0", "0.7:1,", "1:2:3", "0:nan"}) EXPECT_THROW(st::parse_temperature_mix(bad), std::exception) << bad;
  st::DataOptions o;
  o.temperatures = mix;
  o.seed = 9;
  const std::int64_t n = 30000;
  std::map<double, std::int64_t> count;
  for (std::int64_t i = 0; i < n; ++i) ++count[st::record_temperature(o, static_cast<std::size_t>(i))];
  ASSERT_EQ(count.size(), 3u);
  for (const auto& t : mix) {
    const double pi = t.weight, mean = static_cast<double>(n) * pi;
    EXPECT_LE(std::abs(static_cast<double>(count[t.temperature]) - mean), 6 * std::sqrt(mean * (1 - pi)) + 5) << t.temperature;
  }
  // The default: greedy_fraction greedy, the rest at temperature 1.
  st::DataOptions d;
  d.greedy_fraction = 0.25;
  std::int64_t greedy = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double t = st::record_temperature(d, static_cast<std::size_t>(i));
    ASSERT_TRUE(t == 0 || t == 1);
    greedy += t == 0;
  }
  EXPECT_LE(std::abs(static_cast<double>(greedy) - 0.25 * n), 6 * std::sqrt(0.25 * 0.75 * n) + 5);
}

TEST(TrainData, RowSummaryIsTheTargetsDistribution) {
  torch::manual_seed(3);
  const std::int64_t V = 3000, k = 16;  // more than one sampler tile
  at::Tensor logits = at::randn({V}) * 2;
  logits[17] = logits[2999] = logits.max().item<float>() + 1;  // a tie at the top: the lower id first
  std::vector<float> scratch(V);
  std::vector<std::int32_t> ids(k);
  std::vector<std::uint16_t> probs(k);
  const float* l = logits.data_ptr<float>();
  EXPECT_EQ(st::detail::summarise_logits_row(l, V, k, ids.data(), probs.data(), 0, 0.5f, scratch.data()), 17);
  auto [want_p, want_i] = at::topk(at::softmax(logits, 0), k);
  EXPECT_EQ(ids[0], 17);
  EXPECT_EQ(ids[1], 2999);
  for (std::int64_t j = 0; j < k; ++j) {
    EXPECT_NEAR(static_cast<float>(c10::Half(probs[static_cast<std::size_t>(j)], c10::Half::from_bits())), want_p[j].item<float>(), 1e-3);
    if (j >= 2) {
      EXPECT_EQ(ids[static_cast<std::size_t>(j)], want_i[j].item<std::int64_t>());
    }
  }
  // Sampled tokens follow softmax(l / T): 6-sigma per token over a grid of uniforms and a few Philox draws.
  for (const double T : {0.7, 1.0, 1.6}) {
    const at::Tensor pi = at::softmax(logits / T, 0);
    const std::int64_t n = 20000;
    std::vector<std::int64_t> count(V, 0);
    std::mt19937_64 rng(4);
    for (std::int64_t d = 0; d < n; ++d) {
      const float u = (static_cast<float>(rng() >> 40) + 0.5f) / 16777216.0f;
      ++count[static_cast<std::size_t>(st::detail::summarise_logits_row(l, V, k, ids.data(), probs.data(), T, u, scratch.data()))];
    }
    for (std::int64_t x = 0; x < V; ++x) {
      const double p = pi[x].item<double>(), mean = static_cast<double>(n) * p;
      ASSERT_LE(std::abs(static_cast<double>(count[static_cast<std::size_t>(x)]) - mean), 6 * std::sqrt(mean * (1 - p)) + 5 * (p > 0))
          << "T " << T << " token " << x;
    }
  }
  EXPECT_THROW(st::detail::summarise_logits_row(l, V, 0, ids.data(), probs.data(), 0, 0.5f, scratch.data()), std::exception);
}

std::vector<std::string> example_prompts() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kExamplePrompts)) {
    if (e.path().extension() != ".jsonl") continue;
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);)
      if (!st::trim(line).empty()) out.push_back(nlohmann::json::parse(line).at("prompt").get<std::string>());
  }
  return out;
}

TEST(TrainData, CorpusLeavesTheExamplePromptsOut) {
  const auto examples = example_prompts();
  ASSERT_GE(examples.size(), 3u);
  const st::PromptExcluder ex(examples);
  for (const auto& p : examples) {
    EXPECT_TRUE(ex.excludes(p)) << p;
    std::string upper = p;
    for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    EXPECT_TRUE(ex.excludes(upper + "!!")) << "case and punctuation: " << p;
  }
  EXPECT_TRUE(ex.excludes("What are three tips for writing clear emails"));
  EXPECT_TRUE(ex.excludes("What are three tips for writing good emails?"));  // one word changed
  EXPECT_TRUE(ex.excludes("Explain to a ten year old why the sky is blue?"));
  // A long example's passage under another instruction.
  const auto article = std::find_if(examples.begin(), examples.end(), [](const std::string& p) { return p.size() > 400; });
  ASSERT_NE(article, examples.end());
  const std::string passage = article->substr(article->find("\n\n") + 2);
  EXPECT_TRUE(ex.excludes("List the key points of this text.\n\n" + passage));
  // Unrelated prompts pass.
  EXPECT_FALSE(ex.excludes("What are three tips for growing tomatoes?"));
  EXPECT_FALSE(ex.excludes("Write a haiku about the sea."));
  EXPECT_FALSE(ex.excludes("Summarise the following text in two sentences.\n\nThe quick brown fox jumps over the lazy dog many times a day."));

  // A corpus that holds the examples' own material yields none of it.
  st::Corpus c;
  c.paragraphs = {passage, std::string(300, 'a') + " is a long word. " + "The river rises in the hills and runs to the sea past three towns."};
  c.topics = {"autumn in a small town", "the sky", "writing clear emails", "gardening", "the moon", "bicycles"};
  c.words = {"river", "lantern", "copper", "meadow"};
  c.quotes = {"Simplicity is the ultimate sophistication."};
  c.riddles = {"What has keys but can't open locks?"};
  c.functions = {"def add(a, b):\n    total = a + b\n    return total\n"};
  const auto prompts = st::make_prompts(c, 400, 1, ex);
  EXPECT_GE(prompts.size(), 300u);
  std::set<std::string> kinds;
  for (const auto& p : prompts) {
    EXPECT_FALSE(ex.excludes(p)) << p;
    EXPECT_EQ(p.find(passage.substr(0, 80)), std::string::npos) << p;
    for (const auto& e : examples) EXPECT_NE(st::normalise_words(p), st::normalise_words(e));
  }
  EXPECT_EQ(std::set<std::string>(prompts.begin(), prompts.end()).size(), prompts.size());
  // The same seed gives the same prompts.
  EXPECT_EQ(st::make_prompts(c, 400, 1, ex), prompts);
}

TEST(TrainData, CorpusSpansTheKindsOfPrompt) {
  st::Corpus c;
  c.paragraphs = {"The river rises in the hills above the town and runs west for forty miles before it reaches the sea. Along "
                  "the way it turns three mills, feeds a canal and floods the low meadows every spring, which keeps the soil rich "
                  "and the farmers busy with repairs to their walls and ditches."};
  c.functions = {"def add(a, b):\n    total = a + b\n    return total\n"};
  c.quotes = {"Simplicity is the ultimate sophistication."};
  c.riddles = {"What has keys but can't open locks?", "What gets wetter the more it dries?", "What has a neck but no head?",
               "What can you catch but not throw?", "What has hands but cannot clap?", "What goes up but never comes down?"};
  c.words = {"river", "lantern", "copper", "meadow", "pepper", "violin"};
  c.topics = {"gardening", "the moon", "bicycles", "volcano", "library"};
  const auto prompts = st::make_prompts(c, 1500, 2, st::PromptExcluder{});
  std::map<std::string, int> seen;
  auto has = [&](const std::string& what, const std::function<bool(const std::string&)>& f) {
    for (const auto& p : prompts)
      if (f(p)) ++seen[what];
  };
  auto contains = [](const char* s) { return [s](const std::string& p) { return p.find(s) != std::string::npos; }; };
  has("summary", contains("The river rises"));
  has("code edit", contains("def add"));
  has("code to write", [](const std::string& p) { return p.rfind("Write a", 0) == 0 && p.find(" function that ") != std::string::npos; });
  has("quote", contains("Simplicity"));
  has("riddle", contains("riddle?"));
  has("email", contains(" email "));
  has("poem or story", [](const std::string& p) { return p.find("poem") != std::string::npos || p.find("story") != std::string::npos; });
  has("word problem", [](const std::string& p) {
    for (const char* s : {"How many", "How much", "How far", "How old", "sale price", "area"})
      if (p.find(s) != std::string::npos) return true;
    return false;
  });
  has("advice", [](const std::string& p) { return p.find("tips") != std::string::npos || p.find("advice") != std::string::npos; });
  has("explanation", [](const std::string& p) { return p.rfind("Explain", 0) == 0 || p.rfind("What is", 0) == 0; });
  for (const char* k : {"summary", "code edit", "code to write", "quote", "riddle", "email", "poem or story", "word problem", "advice", "explanation"})
    EXPECT_GE(seen[k], std::string(k) == "riddle" ? 3 : 5) << k;
}

TEST(TrainData, SelfInstructRequestsAndAnswers) {
  st::Corpus c;
  c.topics = {"gardening", "the moon", "bicycles"};
  const auto req = st::self_instruct_requests(c, 20, 1);
  EXPECT_EQ(req.size(), 20u);
  EXPECT_EQ(std::set<std::string>(req.begin(), req.end()).size(), req.size());
  EXPECT_EQ(st::self_instruct_requests(c, 20, 1), req);
  EXPECT_EQ(st::self_instruct_question("\"How do bicycles stay upright when moving?\"\nThey balance because...").value_or(""),
            "How do bicycles stay upright when moving?");
  EXPECT_EQ(st::self_instruct_question("\n1. Question: Why does the moon have phases?").value_or(""), "Why does the moon have phases?");
  EXPECT_EQ(st::self_instruct_question("**Task:** Write a poem about a garden in winter.").value_or(""), "Write a poem about a garden in winter.");
  EXPECT_EQ(st::self_instruct_question("A student might ask, \"Why is the moon sometimes red?\" It is a good question.").value_or(""),
            "Why is the moon sometimes red?");
  EXPECT_EQ(st::self_instruct_question("Student: Is inflation a good thing?").value_or(""), "Is inflation a good thing?");
  EXPECT_FALSE(st::self_instruct_question("What a delightful question about the moon! Here it is."));
  EXPECT_FALSE(st::self_instruct_question("Sure"));
  EXPECT_FALSE(st::self_instruct_question("Here is a question about the moon and"));
  EXPECT_FALSE(st::self_instruct_question(""));
}

TEST(TrainData, TextDocumentsAndFortunesBecomeParagraphsAndQuotes) {
  st::Corpus c;
  const std::string para =
      "A :func:`len` call returns the number of items in a container. It works on strings, lists, tuples, dictionaries and any "
      "object that defines a ``__len__`` method, which makes it one of the most common built-in functions in everyday code. "
      "Beginners use it to check whether a list is empty.";
  st::scan_text_document("Title\n=====\n\n" + para + "\n\n.. note::\n   skipped\n\n    indented code block\n", c);
  ASSERT_EQ(c.paragraphs.size(), 1u);
  EXPECT_EQ(c.paragraphs[0].rfind("A `len` call returns", 0), 0u) << c.paragraphs[0];
  EXPECT_NE(c.paragraphs[0].find("`__len__`"), std::string::npos);
  st::scan_fortune_file("A stitch in time saves nine.\n%\nx\n%\nThe early bird gets the worm,\n  but the second mouse gets the cheese.\n%\n", c, false);
  st::scan_fortune_file("What has four legs in the morning?\n%\n", c, true);
  ASSERT_EQ(c.quotes.size(), 2u);
  EXPECT_EQ(c.quotes[1], "The early bird gets the worm, but the second mouse gets the cheese.");
  EXPECT_EQ(c.riddles.size(), 1u);
  EXPECT_EQ(st::ascii_punctuation("\u201cHi\u201d \u2014 it\u2019s"), "\"Hi\"  -  it's");
}

}  // namespace
