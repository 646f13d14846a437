// specdec-generate — speculative decoding on a real model from the command line.
//
//   specdec-generate                                   # bundled SmolLM2-135M-Instruct, best proposer available
//   specdec-generate --prompt "..." --chat --proposer ngram -g 5 --compare --json out.json
//   specdec-generate --prompt-file prompts.jsonl --temperature 0.8 --seed 7
//
// --compare runs the autoregressive baseline and the speculative decoder on the same prompts in one process and prints
// tokens/s of each, the speedup, acceptance rate, mean accepted length, the cost ratios c and r, and the theoretical
// speedup for the measured a, c and r. Every prompt's generated text and finish reason go to stdout (--quiet: none).
//
// Every flag is checked before a model loads (check_options): a bad value stops the program at once with one line that
// names the flag, the value and what it accepts, and writes nothing. docs/cli.md documents the flags and the --json
// output (docs/generate.schema.json); tests/cli runs this program to hold it to both.
//
// Two builds of this file: specdec-generate links no libtorch (the CPU forward, every proposer); with --device other
// than cpu it hands its arguments to specdec-generate-torch beside it (SPECDEC_GENERATE_TORCH: the ATen forward on
// that device), which a build with libtorch makes.
#if defined(SPECDEC_GENERATE_TORCH)
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#endif
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "cli_util.hpp"

#include "specdec/decoder/cost_profile.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/models/chat_template.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama_config.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/prompt_file.hpp"
#include "specdec/models/tokenizer.hpp"
#include "specdec/proposers/draft_model.hpp"
#include "specdec/proposers/ngram.hpp"
#include "specdec/proposers/cross_vocab.hpp"
#include "specdec/proposers/proposer_chain.hpp"
#include "specdec/proposers/suffix.hpp"
#include "specdec/proposers/corpus.hpp"
#include "specdec/sampling/theory.hpp"
#if defined(SPECDEC_GENERATE_TORCH)
#include "specdec/torch/aten_llama.hpp"
#include "specdec/torch/device_backend.hpp"
#include "specdec/torch/host_threads.hpp"
#endif
#if defined(SPECDEC_HAVE_EAGLE)
#include "specdec/proposers/eagle.hpp"
#endif

namespace fs = std::filesystem;
using specdec::decoder::DecoderMetrics;
using specdec::decoder::DecoderOptions;
using specdec::decoder::GenerationRequest;
using specdec::decoder::GenerationResult;
using specdec::models::LlamaModel;
using specdec::models::Tokenizer;

namespace specdec::cli {
const char* build_version();     // generated at build time (cmake/build-info.cmake)
const char* build_git_commit();
}  // namespace specdec::cli

namespace {

const auto kProgramStart = std::chrono::steady_clock::now();
const fs::path kSourceDir = SPECDEC_SOURCE_DIR;
// The largest g: the startup cost profile times about 4 (g + 1) forwards of up to g + 1 rows per round, so its time grows
// with g squared (g = 8: a third of a second; g = 64: tens of seconds on two cores), while the proposers here rarely
// have more than a few tens of tokens worth drafting (suffix tries are 24 deep) and a verification of g + 1 rows costs
// more one-row forwards the larger g is.
constexpr int kMaxG = 64;
// --threads and --aten-threads beyond this multiple of the CPUs the process may run on are refused (threads that wait
// for a core only slow the forward down); above the CPU count they are allowed with a warning.
constexpr int kThreadsPerCpu = 4;
// A prompt of at least this many tokens reports its prefill on stderr.
constexpr std::size_t kLongPrompt = 512;
// --draft-min-path-prob's defaults. Greedy requests: the adaptive policy's confidence cut chooses each chain's length, and
// this bound only caps what the drafts it would cut cost: on open-ended chat the default chain verified as much at 0.15
// as at 0.05 (tau 1.91 either way over three alternated rounds) for less drafting (c 0.066-0.114 against 0.073-0.147).
// Sampled requests decide all or nothing against a fixed cost, so the bound is their chain length: at temperature 0.7
// EAGLE gave 1.04x / 1.04x at 0.05, 1.16x / 1.21x at 0.3, 1.18x / 1.23x at 0.5 and 1.16x at 0.7 (docs/adaptive-policy.md,
// "The default proposer").
constexpr double kGreedyMinPathProb = 0.15;
// The draft model's greedy default (a draft model of the target's vocabulary): its step costs c 0.02, so drafting on
// at a lower path probability pays (ten chat prompts, four alternated rounds: 1.20-1.21x at 0.05 against 1.04-1.18x
// at 0.15; docs/cli.md).
constexpr double kGreedyDraftModelMinPathProb = 0.05;
constexpr double kSampledMinPathProb = 0.5;
// --eagle-sampled-drafts tree: trees of at most 4 nodes, 2 children per node, nodes of path probability >= 0.3 at the
// request's temperature. At a fixed depth <= 4, at temperature 0.7 on the chat prompts (three alternated rounds, 2026-11-30) EAGLE
// alone gave 1.17x / 1.29x / 1.18x (tau 1.59, c 0.08-0.09) against sampled chains' 1.14x / 1.19x / 1.06x (tau 1.37, c
// 0.13-0.16); at path bound 0.15 the trees grew to 4 nodes nearly every step (tau 1.72) and their rows cost more than
// they brought (0.89x-0.91x against 1.07x-1.20x); 3 nodes 1.04x-1.18x.
constexpr std::int32_t kSampledTreeNodes = 4;
constexpr std::int32_t kSampledTreeTopK = 2;
constexpr double kSampledTreeMinPathProb = 0.3;
// Their fixed cost per verified row (--sampled-cost-slope): trees of 3-4 rows measured in-run r 1.10-1.12, about 0.03 a
// row (their first rows ride on the forward's weight stream); at the chains' 0.15 the all-or-nothing test stopped them
// (tau 1.31, 1.16x against sampled chains' 1.19x at temperature 0.7), at 0.06 they gave 1.31x against 1.21x at 0.7 and
// 1.02x against 1.01x at 1.0 (0.08: 1.25x and 1.04x); at a fixed depth, without the test, 1.27x-1.28x at 0.7 but
// 0.95x-0.96x against 1.03x at 1.0.
constexpr double kSampledTreeCostSlope = 0.06;
const fs::path kDefaultModel = kSourceDir / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
const fs::path kDefaultEagleHead = kSourceDir / "models" / "smollm2-135m-eagle";
const fs::path kDefaultDraftModel = kSourceDir / "models" / "smollm2-135m-draft";
const fs::path kDefaultCorpus = kSourceDir / "models" / "smollm2-135m-corpus.bin";

struct Options {
  std::string model = kDefaultModel.string();
  std::string tokenizer;
  std::string draft_model;
  std::string proposer;  // empty = best available
  std::string eagle_head;
  std::string corpus;    // empty = kDefaultCorpus
  std::shared_ptr<const specdec::proposers::CorpusTable> corpus_table;  // read by check_options
  int num_speculative_tokens = 8;
  bool adaptive = true;       // the adaptive draft-length policy (greedy requests; off with --fixed-g)
  bool adaptive_all = false;  // --adaptive: the policy for sampled requests too
  bool fixed_g = false;       // --fixed-g / --no-adaptive: exactly g drafts per step
  int probe_backoff = 8;      // the adaptive policy's wait after rejected probes, in probe intervals at most
  bool no_shadow_probes = false;  // probes that verify a draft instead of shadow probes (lookup proposers)
  bool no_confidence_cut = false; // EAGLE chains: choose g before proposing instead of cutting by the head's confidences
  std::string chain_select = "first";  // a --proposer chain's choice per request: first member that drafts, or most expected
  double chain_enough = specdec::proposers::ChainOptions{}.enough_expected;  // --chain-select expected: stop asking above this
  bool no_cut_lookups = false;    // choose g before proposing (lookup proposers), as before AdaptiveSpeculation::cut_lookups
  std::string cost_model = "profile";  // the adaptive policy's verification costs: profiled at startup, or learned
  // Sampled requests without --adaptive: each decides alone whether to draft, against a fixed cost (no timing, so a
  // seed's tokens stay reproducible): a step with x draft rows costs 1 + slope * x plain steps (this CPU forward's
  // profile over the 1-4 drafts a lookup proposer mostly makes: 1.16, 1.23, 1.44, 1.68), a draft position `draft_cost`
  // (< 0: the proposer's measured c).
  double sampled_cost_slope = 0.15;
  double sampled_draft_cost = -1.0;
  bool tree = false;
  std::string eagle_sampled_drafts = "tree";  // EAGLE drafts of sampled requests: sample (q's draws), argmax (cut) or tree
  bool eagle_sampled_trees = false;             // --eagle-sampled-drafts tree at temperature > 0 (set by check_options)
  std::int32_t tree_top_k = 8;   // the EAGLE-2 defaults (DynamicTreeParams)
  std::int32_t tree_nodes = 24;
  double draft_min_prob = 0.0;
  double draft_min_path_prob = -1.0;  // < 0: kGreedyMinPathProb at temperature 0, kSampledMinPathProb when sampling
  double draft_model_min_path_prob = -1.0;  // the draft model's: --draft-min-path-prob when given, else its own default
  std::string cross_vocab_greedy = "slem";  // a draft model of another vocabulary, greedy requests: slem or tli
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  std::string seed = "0";  // parsed by check_options (a decimal in [0, 2^64), never wrapped)
  std::uint64_t seed_value = 0;
  int max_new_tokens = 128;
  int rounds = 1;  // the prompt set, this many times in sequence through the same proposer
  std::string prompt;
  std::string prompt_file;
  bool chat = false;
  bool quiet = false;  // no generated text on stdout
  bool compare = false;
  bool baseline_last = false;  // --compare: the baseline after the speculative run
  std::string json;
  std::string trace_steps;
  int threads = 0;
  std::string activation_bits = "16";  // ActivationBits::parse
  std::string kv_cache = "f16";        // parse_kv_cache_type
  std::string draft_weights = "q4_0";
  int aten_threads = 1;
  int ngram_min_n = 1, ngram_max_n = 4;
  std::string verify = "token";  // token | block
  bool expected_acceptance = false;
  double suffix_alpha = specdec::proposers::SuffixOptions{}.tokens_per_match_token;
  // 1, the library's: one-token matches draft too, and the policy, which cuts each lookup proposal after seeing it and
  // learns from every proposed position the step emitted, verifies them only while they pay (docs/adaptive-policy.md).
  std::int32_t suffix_min_match = specdec::proposers::SuffixOptions{}.min_match;
  std::string device = "cpu";     // cpu: LlamaModel's packed kernels; otherwise AtenLlamaModel on that ATen device
  std::string dtype = "float32";  // AtenLlamaModel's weights and activations
};

[[noreturn]] void fail(const std::string& message) { throw specdec::error(specdec::Status::kInvalidArgument, message); }
void warn(const std::string& message) { fmt::print(stderr, "specdec-generate: warning: {}\n", message); }


/// The format --draft-weights quantises the drafts' float weights to (unused with float).
specdec::models::GgmlType draft_weights_type(const Options& o) {
  return o.draft_weights == "q4_0" ? specdec::models::GgmlType::kQ4_0 : specdec::models::GgmlType::kQ8_0;
}

/// Loads a Llama-family model from a GGUF file or a Hugging Face directory (safetensors + config.json); `open`: the same
/// GGUF file already parsed (for its tokenizer), or null.
LlamaModel load_model(const std::string& path, const char* flag, const Options& o, bool quantize = false,
                      specdec::models::GgmlType quantized_type = specdec::models::GgmlType::kQ8_0,
                      const specdec::models::GgufFile* open = nullptr, std::vector<std::int64_t> output_ids = {}) {
  if (!fs::exists(path))
    fail(fmt::format("{}: '{}' does not exist{}", flag, path,
                     path == kDefaultModel.string() ? " (run ./scripts/setup.sh to download the bundled model)" : ""));
  specdec::models::LlamaOptions options;
  options.num_threads = o.threads;
  options.activation_bits = specdec::models::ActivationBits::parse(o.activation_bits);
  options.kv_cache_half = specdec::models::parse_kv_cache_type(o.kv_cache);
  options.quantize_float_weights = quantize;
  options.quantized_float_type = quantized_type;
  options.output_ids = std::move(output_ids);
  try {
    if (fs::is_directory(path)) return specdec::models::load_llama_safetensors(path, options);
    if (open != nullptr) return specdec::models::load_llama_gguf(*open, options);
    return specdec::models::load_llama_gguf(path, options);
  } catch (const std::exception& e) {
    fail(fmt::format("{}: '{}': {}", flag, path, e.what()));
  }
}

/// A progress bar on stderr, in prompts finished and tokens generated: redrawn in place (at most 10 times a second) on a
/// terminal, one line per finished prompt otherwise. Nothing is drawn before the first token.
class Progress {
 public:
  Progress(std::string label, std::size_t total)
      : label_(std::move(label)), total_(total), tty_(isatty(fileno(stderr)) != 0) {}
  void add_tokens(std::size_t n) {
    tokens_ += n;
    draw(false);
  }
  void finish_one() {
    ++done_;
    draw(true);
    if (done_ == total_ && tty_) std::fputc('\n', stderr);
  }

 private:
  void draw(bool milestone) {
    const auto now = std::chrono::steady_clock::now();
    if (!tty_ && !milestone) return;
    if (tty_ && !milestone && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const int filled = total_ ? static_cast<int>(kWidth * done_ / total_) : kWidth;
    fmt::print(stderr, "{}{:<28} [{}{}] {}/{} prompts, {} tokens{}", tty_ ? "\r" : "", label_,
               std::string(filled, '#'), std::string(kWidth - filled, '.'), done_, total_, tokens_, tty_ ? "" : "\n");
    std::fflush(stderr);
  }
  std::string label_;
  std::size_t total_, done_ = 0, tokens_ = 0;
  bool tty_;
  std::chrono::steady_clock::time_point last_{};
};

struct RunOutcome {
  std::vector<GenerationResult> results;
  std::vector<nlohmann::json> trace;  // with RunSettings::trace: one object per request and step (--trace-steps)
  std::vector<double> seconds;  // per prompt, last round: from the round's start (prefill included) to its last token
  DecoderMetrics metrics;
  double wall_seconds = 0;
};

/// How a run goes: stream the text (one prompt) or show progress; how many rounds of the prompt set in sequence.
struct RunSettings {
  bool stream = false;
  int rounds = 1;
  bool trace = false;  // record each request's steps (StepTrace) in RunOutcome::trace
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// "finish reason: length; 128 tokens in 1.20 s, 106.7 tokens/s": what stdout says after a prompt's text.
std::string finish_line(const GenerationResult& r, double seconds) {
  return fmt::format("[finish reason: {}; {} tokens in {:.2f} s, {:.1f} tokens/s]", specdec::decoder::to_string(r.finish_reason),
                     r.tokens.size(), seconds, seconds > 0 ? static_cast<double>(r.tokens.size()) / seconds : 0.0);
}

/// Decodes the prompt set `how.rounds` times in sequence with one decoder over the same proposer (a proposer that learns
/// from finished outputs, such as suffix decoding's global cache, sees the earlier rounds); the metrics cover every round,
/// the results are the last round's. Prompts of kLongPrompt tokens or more report their prefill on stderr.
template <class Proposer, class Target>
RunOutcome run(Proposer& proposer, Target& target, const std::vector<GenerationRequest>& requests,
               const DecoderOptions& options, const Tokenizer& tokenizer, const std::string& label, const RunSettings& how) {
  specdec::decoder::SpeculativeDecoder<Proposer, Target> decoder(proposer, target, options);
  std::optional<Progress> progress;
  std::optional<specdec::models::StreamingDecoder> text;
  if (how.stream) {
    text.emplace(tokenizer, /*skip_special=*/true);
  } else {
    progress.emplace(label, requests.size() * static_cast<std::size_t>(how.rounds));
  }
  RunOutcome out;
  out.seconds.assign(requests.size(), 0.0);
  std::unordered_map<specdec::decoder::RequestId, std::size_t> index;
  auto t_round = std::chrono::steady_clock::now();
  decoder.set_callback([&](specdec::decoder::RequestId id, std::span<const std::int64_t> tokens, bool finished) {
    if (finished) out.seconds[index.at(id)] = seconds_since(t_round);
    if (text) {
      std::string piece;
      for (auto t : tokens) piece += text->push(static_cast<std::int32_t>(t));
      if (finished) piece += text->flush();
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      if (finished) std::fputc('\n', stdout);
      std::fflush(stdout);
    } else {
      progress->add_tokens(tokens.size());
      if (finished) progress->finish_one();
    }
  });
  int current_round = 0;
  if (how.trace)
    decoder.set_step_observer([&](const specdec::decoder::StepTrace& t) {
      nlohmann::json e;
      e["round"] = current_round;
      e["prompt"] = index.at(t.id);
      e["step"] = t.step;
      e["position"] = t.position;
      e["proposed"] = t.proposed;
      e["verified"] = t.verified;
      e["accepted"] = t.accepted;
      e["emitted"] = t.emitted;
      if (t.tree) {
        e["tree"] = true;
        e["parents"] = std::vector<std::int64_t>(t.parents.begin(), t.parents.end());
        e["accepted_nodes"] = std::vector<std::int64_t>(t.accepted_nodes.begin(), t.accepted_nodes.end());
      }
      if (!t.confidence.empty()) e["confidence"] = std::vector<float>(t.confidence.begin(), t.confidence.end());
      out.trace.push_back(std::move(e));
    });
  const auto t0 = std::chrono::steady_clock::now();
  for (int round = 0; round < how.rounds; ++round) {
    current_round = round;
    if (text) fmt::print("--- {}{} ---\n", label, how.rounds > 1 ? fmt::format(" (round {})", round + 1) : "");
    std::fflush(stdout);
    t_round = std::chrono::steady_clock::now();
    index.clear();
    std::vector<specdec::decoder::RequestId> ids;
    try {
      for (std::size_t i = 0; i < requests.size(); ++i) {
        const std::size_t n = requests[i].prompt.size();
        const bool long_prompt = n >= kLongPrompt;
        if (long_prompt) {
          fmt::print(stderr, "specdec-generate: {}: prefill of prompt {} ({} tokens) ...", label, i + 1, n);
          std::fflush(stderr);
        }
        const auto t_prefill = std::chrono::steady_clock::now();
        ids.push_back(decoder.add_request(requests[i]));
        index[ids.back()] = i;
        if (long_prompt) {
          const double s = seconds_since(t_prefill);
          fmt::print(stderr, " {:.2f} s ({:.0f} tokens/s)\n", s, s > 0 ? static_cast<double>(n) / s : 0.0);
        }
      }
      while (!decoder.idle()) decoder.step();
    } catch (...) {
      for (const auto id : ids) {
        decoder.cancel(id);
        try {
          (void)decoder.take_result(id);
        } catch (const std::exception&) {
        }
      }
      throw;
    }
    out.results.clear();
    for (const auto id : ids) out.results.push_back(decoder.take_result(id));
    if (text)
      for (std::size_t i = 0; i < out.results.size(); ++i) fmt::print("{}\n", finish_line(out.results[i], out.seconds[i]));
  }
  for (std::size_t i = 0; i < out.results.size(); ++i) {
    const auto total = static_cast<std::int64_t>(requests[i].prompt.size() + out.results[i].tokens.size());
    if (out.results[i].finish_reason == specdec::decoder::FinishReason::kLength && total >= target.max_sequence_length())
      fmt::print(stderr, "specdec-generate: prompt {} stopped at the model's context length of {} tokens ({} prompt + {} "
                 "generated; finish reason: length)\n", i + 1, target.max_sequence_length(), requests[i].prompt.size(),
                 out.results[i].tokens.size());
  }
  out.wall_seconds = seconds_since(t0);
  out.metrics = decoder.metrics();
  return out;
}

#if defined(SPECDEC_HAVE_EAGLE)
/// The EAGLE proposer the flags describe (--eagle-head, --tree*, --draft-min-prob, --draft-weights), on the target's pool.
specdec::proposers::EagleProposer make_eagle(const Options& o, const LlamaModel& target) {
  const fs::path head_dir = o.eagle_head.empty() ? kDefaultEagleHead : fs::path(o.eagle_head);
  if (!fs::exists(head_dir / "config.json"))
    fail(fmt::format("--eagle-head: '{}' holds no config.json (an EAGLE head checkpoint directory is expected)",
                     head_dir.string()));
  const auto weights = fs::is_directory(o.model) ? specdec::proposers::eagle_target_weights_from_safetensors(o.model)
                                                 : specdec::proposers::eagle_target_weights_from_gguf(o.model);
  specdec::proposers::EagleProposerOptions eo;
  eo.mode = o.tree || o.eagle_sampled_trees ? specdec::proposers::EagleDraftMode::kTree : specdec::proposers::EagleDraftMode::kChain;
  eo.chain_sampling = o.eagle_sampled_drafts == "argmax" ? specdec::proposers::EagleChainSampling::kArgmax
                                                         : specdec::proposers::EagleChainSampling::kSample;
  eo.tree.top_k = o.tree_top_k;
  eo.tree.num_nodes = o.tree_nodes;
  eo.min_draft_prob = o.draft_min_prob;
  eo.min_path_prob = o.draft_min_path_prob;
  eo.target_num_layers = target.config().num_layers;
  specdec::proposers::EagleHeadOptions ho;
  ho.quantize_weights = o.draft_weights != "float";
  ho.quantized_type = draft_weights_type(o);
  ho.num_threads = o.threads;  // the target's pool
  return specdec::proposers::EagleProposer(specdec::proposers::load_eagle_head(head_dir, weights, ho), eo);
}

RunOutcome run_eagle(const Options& o, LlamaModel& target, const std::vector<GenerationRequest>& requests,
                     const DecoderOptions& options, const Tokenizer& tokenizer, const RunSettings& how) {
  specdec::proposers::EagleProposer eagle = make_eagle(o, target);
  return run(eagle, target, requests, options, tokenizer, o.tree ? "speculative (EAGLE-2 tree)" : "speculative (EAGLE)",
             how);
}
#endif

/// Sets j[key] = v when v is a finite number (a ratio over nothing measured is left out rather than written as null).
void put_finite(nlohmann::json& j, const char* key, double v) {
  if (std::isfinite(v)) j[key] = v;
}

/// A run's figures under stable names. Only what the run measured appears: the expected-acceptance figures only under
/// --expected-acceptance, their means only when some step had them, the acceptance by position only when drafts were
/// verified.
nlohmann::json speculative_json(const DecoderMetrics& m, double t1, bool expected_acceptance) {
  nlohmann::json j;
  put_finite(j, "tokens_per_second", m.tokens_per_second());
  j["target_forwards"] = m.total.target_forwards;
  j["tokens"] = m.total.emitted;
  put_finite(j, "mean_accepted_length", m.total.mean_accepted_length());
  put_finite(j, "overhead_fraction", m.overhead_fraction());
  if (m.step_seconds() > 0) j["draft_fraction"] = m.draft_seconds / m.step_seconds();
  if (m.steps) j["ms_per_step"] = 1e3 * m.step_seconds() / static_cast<double>(m.steps);
  if (m.total.drafted > 0) {
    put_finite(j, "acceptance_rate", m.total.acceptance_rate());
    j["per_position_acceptance"] = m.total.acceptance_by_position();
    j["proposed_by_position"] = m.total.proposed_at;
    j["accepted_by_position"] = m.total.accepted_at;
    put_finite(j, "cost_ratio_c", m.cost_ratio(t1));
    put_finite(j, "verify_cost_ratio", m.verify_cost_ratio(t1));
  }
  if (expected_acceptance) {
    j["expected_steps"] = m.total.expected_steps;
    if (m.total.expected_steps > 0) {
      const double steps = static_cast<double>(m.total.expected_steps);
      j["expected_accepted_token"] = m.total.expected_accepted_token / steps;
      j["expected_accepted_block"] = m.total.expected_accepted_block / steps;
    }
  }
  return j;
}

/// The 1-token forward time c and r are measured against: the baseline's mean over all its steps when it ran (the
/// most samples, same prompts), otherwise the speculative run's own calibration.
double reference_one_token_seconds(const std::optional<RunOutcome>& base, const RunOutcome& spec) {
  if (base && base->metrics.one_token_forwards > 0) return base->metrics.one_token_forward_seconds();
  return spec.metrics.one_token_forward_seconds();
}

void print_table(const std::optional<RunOutcome>& base, const RunOutcome& spec, const std::string& proposer, int g,
                 bool adaptive) {
  const DecoderMetrics& m = spec.metrics;
  const double t1 = reference_one_token_seconds(base, spec);
  fmt::print("\n{:<24}{:>12}{:>10}{:>10}{:>8}{:>8}{:>8}{:>10}\n", "run", "tokens/s", "speedup", "accept", "tau", "c",
             "r", "theory");
  if (base)
    fmt::print("{:<24}{:>12.1f}{:>10}{:>10}{:>8}{:>8}{:>8}{:>10}\n", "autoregressive",
               base->metrics.tokens_per_second(), "1.00x", "-", "1.00", "-", "-", "-");
  const std::string speedup =
      base ? fmt::format("{:.2f}x", m.tokens_per_second() / base->metrics.tokens_per_second()) : "-";
  fmt::print("{:<24}{:>12.1f}{:>10}{:>10.3f}{:>8.2f}{:>8.3f}{:>8.2f}{:>9.2f}x\n",
             fmt::format("{} (g{}{})", proposer, adaptive ? "<=" : "=", g), m.tokens_per_second(), speedup, m.total.acceptance_rate(),
             m.total.mean_accepted_length(), m.cost_ratio(t1), m.verify_cost_ratio(t1), m.theoretical_speedup(t1));
  if (adaptive && m.total.target_forwards > 0)
    fmt::print("adaptive draft length: {:.0f}% of request-steps drafted, {:.2f} drafts per drafting step{}\n",
               100.0 * static_cast<double>(m.total.steps_with_drafts) / static_cast<double>(m.total.target_forwards),
               m.mean_gamma(),
               m.total.shadow_probes > 0 ? fmt::format("; shadow probes {} ({} right)", m.total.shadow_probes, m.total.shadow_accepted)
                                         : std::string());
  const auto by_pos = m.total.acceptance_by_position();
  if (!by_pos.empty()) {
    fmt::print("acceptance by draft position:");
    for (double a : by_pos) fmt::print(" {:.2f}", a);
    fmt::print("\n");
  }
  if (m.total.expected_steps > 0) {
    const double steps = static_cast<double>(m.total.expected_steps);
    fmt::print("expected accepted drafts per step on these drafts ({} steps): token-level {:.4f}, block {:.4f}\n",
               m.total.expected_steps, m.total.expected_accepted_token / steps, m.total.expected_accepted_block / steps);
  }
  fmt::print("tau = tokens per target forward; c = draft cost per token / 1-token target forward; r = verify forward / "
             "1-token forward; theory = E[tokens/step] / (r + g c)\n");
}

struct Prepared;
/// The tokenizer's GGUF file and the tokenizer, read once, before the model (so a bad one is named at once).
struct TokenizerSource {
  specdec::models::GgufFile file;
  Tokenizer tokenizer;
};
template <class Target>
int run_on(const Options& o, const Prepared& p, const TokenizerSource& ts, Target& target);

specdec::proposers::NgramOptions ngram_options(const Options& o) {
  specdec::proposers::NgramOptions no;
  no.min_n = o.ngram_min_n;
  no.max_n = o.ngram_max_n;
  no.max_drafts = std::max(1, o.num_speculative_tokens);
  no.num_candidates = o.tree ? 3 : 1;
  return no;
}

/// The corpus proposer over --corpus-table (default: the bundled table of the target's own answers), which
/// check_options read.
specdec::proposers::CorpusProposer make_corpus(const Options& o) {
  if (!o.corpus_table) fail("--corpus-table: the table was not read (internal: check_options reads it)");
  return specdec::proposers::CorpusProposer(o.corpus_table);
}

specdec::proposers::SuffixOptions suffix_options(const Options& o) {
  specdec::proposers::SuffixOptions so;
  so.max_width = o.tree ? 4 : 1;
  so.tokens_per_match_token = o.suffix_alpha;
  so.min_match = o.suffix_min_match;
  return so;
}

/// The members of a --proposer value, in order (one name unless it is a comma-separated chain).
std::vector<std::string> proposer_names(const std::string& proposer) {
  std::vector<std::string> names;
  for (std::size_t begin = 0; begin <= proposer.size();) {
    const std::size_t end = std::min(proposer.find(',', begin), proposer.size());
    names.push_back(proposer.substr(begin, end - begin));
    begin = end + 1;
  }
  return names;
}

/// A draft position's cost in plain steps (c) for a proposer or chain, as `specdec-generate --compare` reported it on the
/// bundled model sampling chat prompts at temperature 0.7: lookups 0.01-0.02; the draft model 0.09 and the EAGLE head 0.08,
/// both on the target's packed kernels (docs/drafts-on-packed-kernels.md; 3 prompts in a batch, g = 4); a chain, its
/// costliest member.
double default_draft_cost(const std::string& proposer) {
  double c = 0.0;
  for (const std::string& name : proposer_names(proposer))
    c = std::max(c, name == "draft" ? 0.09 : name == "eagle" ? 0.08 : 0.02);
  return c;
}

/// The draft model proposer's options the flags describe (--draft-min-path-prob), with the draft's reduced output
/// vocabulary when it has one.
specdec::proposers::DraftModelOptions draft_options(const Options& o, const LlamaModel& draft) {
  specdec::proposers::DraftModelOptions d;
  d.min_path_prob = o.draft_model_min_path_prob;
  d.output_ids = draft.output_ids();
  return d;
}

/// The draft model, scoring only its checkpoint's output vocabulary when it has one (tensor d2t: read_output_ids).
LlamaModel load_draft_model(const Options& o) {
  const std::string path = o.draft_model.empty() ? kDefaultDraftModel.string() : o.draft_model;
  std::vector<std::int64_t> output_ids;
  if (fs::is_directory(path)) {
    try {
      output_ids = specdec::models::read_output_ids(path);
    } catch (const std::exception& e) {
      fail(fmt::format("--draft-model: '{}': {}", path, e.what()));
    }
  }
  return load_model(path, "--draft-model", o, o.draft_weights != "float", draft_weights_type(o), nullptr,
                    std::move(output_ids));
}

/// What check_options found and run_on uses: the proposer, the prompts (with their names and the chain members each
/// names), the sampling parameters and the tokenizer's path. Everything in it was checked before any model loaded.
struct Prepared {
  std::string proposer;
  std::vector<std::string> prompts, names;
  std::vector<std::vector<std::string>> named;
  bool chat = false;
  bool user_prompts = false;  // --prompt or --prompt-file (not the built-in set)
  specdec::SamplingParams params;
  std::string tokenizer_path;
};

bool has_member(const std::string& proposer, const char* name) {
  const auto names = proposer_names(proposer);
  return std::find(names.begin(), names.end(), name) != names.end();
}

/// "--flag: expected ..., got ...": the one line every refused value gets.
[[noreturn]] void bad_value(const std::string& flag, const std::string& expected, const std::string& got) {
  fail(fmt::format("{}: expected {}, got {}", flag, expected, got));
}

void check_utf8(const std::string& text, const std::string& where) {
  if (const auto at = specdec::cli::first_invalid_utf8(text))
    fail(fmt::format("{}: invalid UTF-8 at byte offset {} (byte 0x{:02x}); prompts must be UTF-8 text", where, *at,
                     static_cast<unsigned char>(text[*at])));
}

#if defined(SPECDEC_HAVE_EAGLE)
/// Why the EAGLE head in head_dir cannot draft for the GGUF model (the widths and vocabulary it reads differ), or ""
/// when it fits. Reads the two configs only; throws specdec::error where either does not read.
std::string eagle_head_misfit(const fs::path& head_dir, const std::string& model) {
  const auto target = specdec::models::llama_config_from_gguf(specdec::models::GgufFile(model));
  const auto head = specdec::proposers::load_eagle_head_config(head_dir);
  const std::int64_t head_hidden = head.target_hidden_size > 0 ? head.target_hidden_size : head.layer.hidden_size;
  if (head_hidden == target.hidden_size && head.layer.vocab_size == target.vocab_size) return "";
  return fmt::format("the EAGLE head in '{}' reads a target of hidden size {} and vocabulary {}, and '{}' has {} and {}",
                     head_dir.string(), head_hidden, head.layer.vocab_size, fs::path(model).filename().string(),
                     target.hidden_size, target.vocab_size);
}
#endif

/// The proposer when --proposer is not given: the best measured for the run (docs/adaptive-policy.md, "The default
/// proposer").
/// One request on the CPU whose model the EAGLE head fits (--eagle-head, else the bundled head; the same hidden size and
/// vocabulary) drafts with suffix decoding and EAGLE, each step keeping the proposal worth the most expected accepted
/// drafts (--chain-select expected): on open-ended chat the head's drafts, on text that copies the prompt the lookup's.
/// Batches draft with suffix decoding alone: there the head's drafts did not pay for their verification rows on a
/// 2-core CPU (four chat prompts: 0.89x / 0.90x against suffix's 0.94x / 1.05x).
std::string default_proposer(const Options& o, std::size_t num_prompts) {
#if defined(SPECDEC_HAVE_EAGLE)
  if (num_prompts != 1 || o.device != "cpu" || !fs::is_regular_file(o.model)) return "suffix";
  const fs::path head_dir = o.eagle_head.empty() ? kDefaultEagleHead : fs::path(o.eagle_head);
  if (!fs::is_regular_file(head_dir / "config.json") || !fs::is_regular_file(head_dir / "model.safetensors")) return "suffix";
  try {
    if (eagle_head_misfit(head_dir, o.model).empty()) return "suffix,eagle";
  } catch (const std::exception&) {
    // A model or head that does not read is reported when it loads; the default then stays suffix decoding.
  }
#else
  (void)o, (void)num_prompts;
#endif
  return "suffix";
}

/// Checks every flag before anything loads, so a bad value costs no model load and writes nothing: each refusal is one
/// line naming the flag, the value and what it accepts. Flags that another flag makes meaningless are refused when
/// the combination cannot be what was meant (a draft model without the draft proposer), and warned about when the run
/// would merely ignore them. Also reads the prompt file, so its errors come before the model too.
Prepared check_options(Options& o, const CLI::App& app) {
  auto given = [&](const char* name) { return app.count(name) > 0; };
  Prepared p;
  const int cpus = std::max(1, specdec::models::available_cpus());

  if (o.num_speculative_tokens < 0 || o.num_speculative_tokens > kMaxG)
    bad_value("-g/--num-speculative-tokens",
              fmt::format("an integer in [0, {}] (the startup cost profile grows with g squared; no proposer here drafts "
                          "usefully past a few tens of tokens)", kMaxG),
              std::to_string(o.num_speculative_tokens));
  auto check_threads = [&](const char* flag, int value, int least) {
    const int most = kThreadsPerCpu * cpus;
    if (value < least || value > most)
      bad_value(flag,
                fmt::format("{} in [1, {}] ({} x the {} CPU(s) this process may run on)",
                            least == 0 ? "0 (every CPU) or an integer" : "an integer", most, kThreadsPerCpu, cpus),
                std::to_string(value));
    if (value > cpus)
      warn(fmt::format("{} {}: more threads than the {} CPU(s) this process may run on; the extra threads wait for a core",
                       flag, value, cpus));
  };
  check_threads("--threads", o.threads, 0);
  check_threads("--aten-threads", o.aten_threads, 1);
  if (const auto seed = specdec::cli::parse_u64(o.seed)) {
    o.seed_value = *seed;
  } else {
    bad_value("--seed", "a non-negative decimal integer below 2^64 = 18446744073709551616", "'" + o.seed + "'");
  }
  if (!(std::isfinite(o.temperature) && o.temperature >= 0.0f))
    bad_value("--temperature", "a finite value >= 0 (0 = greedy)", fmt::format("{}", o.temperature));
  if (o.top_k < 0) bad_value("--top-k", "an integer >= 0 (0 = off)", std::to_string(o.top_k));
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) bad_value("--top-p", "a value in (0, 1] (1 = off)", fmt::format("{}", o.top_p));
  if (!(o.min_p >= 0.0f && o.min_p <= 1.0f)) bad_value("--min-p", "a value in [0, 1] (0 = off)", fmt::format("{}", o.min_p));
  if (o.max_new_tokens < 1 || o.max_new_tokens > (1 << 20))
    bad_value("--max-new-tokens", "an integer in [1, 1048576]", std::to_string(o.max_new_tokens));
  if (o.rounds < 1 || o.rounds > 1000) bad_value("--rounds", "an integer in [1, 1000]", std::to_string(o.rounds));
  if (o.ngram_min_n < 1 || o.ngram_min_n > 64)
    bad_value("--ngram-min-n", "an integer in [1, 64]", std::to_string(o.ngram_min_n));
  if (o.ngram_max_n < o.ngram_min_n || o.ngram_max_n > 64)
    bad_value("--ngram-max-n", fmt::format("an integer in [--ngram-min-n = {}, 64]", o.ngram_min_n),
              std::to_string(o.ngram_max_n));
  if (!(std::isfinite(o.suffix_alpha) && o.suffix_alpha > 0 && o.suffix_alpha <= 1e9))
    bad_value("--suffix-alpha", "a value in (0, 1e9] (draft nodes per matched token)", fmt::format("{}", o.suffix_alpha));
  p.params.temperature = o.temperature;
  p.params.top_k = o.top_k;
  p.params.top_p = o.top_p;
  p.params.min_p = o.min_p;
  p.params.seed = o.seed_value;
  o.draft_model_min_path_prob = o.draft_min_path_prob >= 0 ? o.draft_min_path_prob
                                : p.params.greedy()       ? kGreedyDraftModelMinPathProb
                                                          : kSampledMinPathProb;

  // Prompts.
  if (given("--prompt")) {
    if (o.prompt.empty())
      fail("--prompt: expected a non-empty prompt text, got an empty string (leave --prompt out to run the built-in "
           "prompt set)");
    check_utf8(o.prompt, "--prompt");
    p.prompts.push_back(o.prompt);
    p.names.emplace_back();
    p.named.emplace_back();
  }
  if (!o.prompt_file.empty()) {
    std::vector<specdec::models::PromptEntry> entries;
    try {
      entries = specdec::models::read_prompt_entries(o.prompt_file);
    } catch (const std::exception& e) {
      fail(fmt::format("--prompt-file: {}", e.what()));
    }
    for (auto& e : entries) {
      check_utf8(e.prompt, fmt::format("--prompt-file '{}': prompt {}", o.prompt_file, p.prompts.size() + 1));
      p.prompts.push_back(std::move(e.prompt));
      p.names.push_back(std::move(e.name));
      p.named.push_back(std::move(e.proposers));
    }
  } else if (given("--prompt-file")) {
    bad_value("--prompt-file", "a file path", "an empty string");
  }
  p.user_prompts = !p.prompts.empty();
  p.chat = o.chat;
  if (p.prompts.empty()) {
    for (auto& e : specdec::models::read_prompt_entries(kSourceDir / "examples" / "prompts" / "demo.jsonl")) {
      p.prompts.push_back(std::move(e.prompt));
      p.names.push_back(std::move(e.name));
      p.named.emplace_back();
    }
    p.chat = true;
  }
  // The proposer and its members: default_proposer unless named.
  p.proposer = o.proposer.empty() ? default_proposer(o, p.prompts.size()) : o.proposer;
  if (o.proposer.empty() && p.proposer != "suffix" && !given("--chain-select")) o.chain_select = "expected";
  const auto members = proposer_names(p.proposer);
  const bool chain = members.size() > 1;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const std::string& m = members[i];
    if (chain) {
      if (m != "ngram" && m != "suffix" && m != "corpus" && m != "draft" && m != "eagle")
        bad_value("--proposer", "a chain of distinct members from ngram, suffix, corpus, draft and eagle, separated by commas",
                  fmt::format("'{}' in '{}'", m, p.proposer));
      for (std::size_t k = 0; k < i; ++k)
        if (members[k] == m)
          bad_value("--proposer", "a chain of distinct members", fmt::format("'{}' twice in '{}'", m, p.proposer));
    }
  }
  const bool uses_draft = has_member(p.proposer, "draft"), uses_eagle = has_member(p.proposer, "eagle");
  // Sampled requests drafting EAGLE trees: small trees ranked at the request's temperature, sized by their own path
  // bound; the sampled policy still decides whether a request drafts at all. Runs without EAGLE keep every default.
  o.eagle_sampled_trees = uses_eagle && o.eagle_sampled_drafts == "tree" && !p.params.greedy();
  if (o.eagle_sampled_trees) {
    if (!given("--tree-nodes")) o.tree_nodes = kSampledTreeNodes;
    if (!given("--tree-top-k")) o.tree_top_k = kSampledTreeTopK;
    if (!given("--draft-min-path-prob")) o.draft_min_path_prob = kSampledTreeMinPathProb;
    if (!given("--sampled-cost-slope")) o.sampled_cost_slope = kSampledTreeCostSlope;
  }
  if (o.draft_min_path_prob < 0) o.draft_min_path_prob = p.params.greedy() ? kGreedyMinPathProb : kSampledMinPathProb;
#if !defined(SPECDEC_HAVE_EAGLE)
  if (uses_eagle) bad_value("--proposer", "none, ngram, suffix or draft (this build has no EAGLE proposer)", "'" + p.proposer + "'");
#endif
  const bool uses_ngram = has_member(p.proposer, "ngram"), uses_suffix = has_member(p.proposer, "suffix");
  const bool uses_corpus = has_member(p.proposer, "corpus");

  // A prompt that names its proposers drafts with those members of the --proposer chain, in its order.
  for (std::size_t i = 0; i < p.named.size(); ++i)
    for (const std::string& name : p.named[i])
      if (!chain || std::find(members.begin(), members.end(), name) == members.end())
        fail(fmt::format("--prompt-file: prompt {} names the proposer '{}', which {}", i + 1, name,
                         !chain ? "needs a chain: --proposer lists the members, e.g. --proposer suffix,draft"
                                : "is not in --proposer " + p.proposer));

  // Flags that need another flag, or that the run would ignore.
  if (given("--chain-select") && !chain)
    fail(fmt::format("--chain-select: applies to a --proposer chain such as suffix,eagle, got --proposer {}", p.proposer));
  if (given("--chain-enough") && (!chain || o.chain_select != "expected"))
    fail(fmt::format("--chain-enough: applies with --chain-select expected on a --proposer chain, got --proposer {} with "
                     "--chain-select {}", p.proposer, o.chain_select));
  if (!(o.chain_enough >= 0.0)) bad_value("--chain-enough", "a value >= 0", fmt::format("{}", o.chain_enough));
  if (given("--draft-model") && !uses_draft)
    fail(fmt::format("--draft-model: applies to --proposer draft or a chain with draft, got --proposer {}", p.proposer));
  if (given("--corpus-table") && !uses_corpus)
    fail(fmt::format("--corpus-table: applies to --proposer corpus or a chain with corpus, got --proposer {}", p.proposer));
  if (uses_corpus) {  // read now (tens of milliseconds), so a bad table costs no model load
    const fs::path table = o.corpus.empty() ? kDefaultCorpus : fs::path(o.corpus);
    if (!fs::is_regular_file(table))
      fail(fmt::format("--corpus-table: '{}' is not a file (a table written by `specdec-train corpus` is expected)", table.string()));
    try {
      o.corpus_table = std::make_shared<const specdec::proposers::CorpusTable>(specdec::proposers::CorpusTable::load(table));
    } catch (const std::exception& e) {
      fail(fmt::format("--corpus-table: {}", e.what()));
    }
  }
#if defined(SPECDEC_HAVE_EAGLE)
  // Before the model loads, a head for another model is refused (the default proposer only takes EAGLE where it fits).
  if (uses_eagle && !o.proposer.empty() && fs::is_regular_file(o.model)) {
    const fs::path head_dir = o.eagle_head.empty() ? kDefaultEagleHead : fs::path(o.eagle_head);
    std::string why;
    try {
      if (fs::is_regular_file(head_dir / "config.json")) why = eagle_head_misfit(head_dir, o.model);
    } catch (const std::exception&) {
      // a head or model that does not read is reported, naming it, where it loads
    }
    if (!why.empty())
      fail(fmt::format("--proposer {}: {} (--eagle-head DIR takes a head trained for this model: specdec-train eagle)",
                       p.proposer, why));
  }
#endif
  if (given("--eagle-head") && !uses_eagle)
    fail(fmt::format("--eagle-head: applies to --proposer eagle or a chain with eagle, got --proposer {}", p.proposer));
  if (o.baseline_last && !o.compare) fail("--baseline-last: applies with --compare (it orders the baseline's run)");
  if (given("--dtype") && o.device == "cpu")
    fail(fmt::format("--dtype: applies with --device other than cpu (the CPU forward runs the GGUF's own block formats; "
                     "see --activation-bits), got --dtype {} with --device cpu", o.dtype));
  if (o.device != "cpu" && uses_eagle)
    fail(fmt::format("--proposer {}: EAGLE runs with --device cpu (the EAGLE head reads the CPU target's features), got "
                     "--device {}", p.proposer, o.device));
  if (p.proposer == "none" && given("-g")) warn("-g: ignored with --proposer none (no drafts)");
  for (const char* flag : {"--tree-top-k", "--tree-nodes", "--draft-min-prob", "--eagle-sampled-drafts"})
    if (given(flag) && !uses_eagle) warn(fmt::format("{}: ignored without eagle in --proposer", flag));
  if (given("--draft-min-path-prob") && !uses_eagle && !uses_draft)
    warn("--draft-min-path-prob: ignored without eagle or draft in --proposer");
  for (const char* flag : {"--ngram-min-n", "--ngram-max-n"})
    if (given(flag) && !uses_ngram) warn(fmt::format("{}: ignored without ngram in --proposer", flag));
  for (const char* flag : {"--suffix-alpha", "--suffix-min-match"})
    if (given(flag) && !uses_suffix) warn(fmt::format("{}: ignored without suffix in --proposer", flag));
  if (given("--draft-weights") && !uses_draft && !uses_eagle)
    warn("--draft-weights: ignored without a draft model or EAGLE head in --proposer");
  if (o.fixed_g)
    for (const char* flag : {"--cost-model", "--probe-backoff", "--no-shadow-probes", "--no-cut-lookups", "--no-confidence-cut",
                             "--sampled-cost-slope", "--sampled-draft-cost"})
      if (given(flag)) warn(fmt::format("{}: ignored with --fixed-g (the adaptive policy is off)", flag));
  if (!o.fixed_g && (o.adaptive_all || p.params.greedy()))
    for (const char* flag : {"--sampled-cost-slope", "--sampled-draft-cost"})
      if (given(flag))
        warn(fmt::format("{}: ignored {} (it prices sampled requests that the timed policy does not cover)", flag,
                         o.adaptive_all ? "with --adaptive" : "at temperature 0"));
  if (p.params.greedy()) {
    for (const char* flag : {"--top-k", "--top-p", "--min-p", "--seed"})
      if (given(flag)) warn(fmt::format("{}: ignored at temperature 0 (greedy decoding takes the argmax)", flag));
    if (o.expected_acceptance) warn("--expected-acceptance: measures sampled chains; nothing to measure at temperature 0");
  }
  if (o.verify == "block" && o.tree) warn("--verify block: trees stay token-level (--tree)");
  if (o.device != "cpu" && !uses_draft)
    for (const char* flag : {"--activation-bits", "--kv-cache"})
      if (given(flag)) warn(fmt::format("{}: ignored with --device {} (it applies to the CPU forward)", flag, o.device));

  // Where the output goes: checked now, so a long run never ends unable to save.
  if (given("--json"))
    if (const std::string why = specdec::cli::output_file_problem(o.json); !why.empty()) fail("--json: " + why);
  if (given("--trace-steps")) {
    if (const std::string why = specdec::cli::output_file_problem(o.trace_steps); !why.empty()) fail("--trace-steps: " + why);
    if (p.proposer == "none") warn("--trace-steps: nothing to trace with --proposer none (every step is plain)");
  }

  // The device and the forward's settings.
#if defined(SPECDEC_GENERATE_TORCH)
  if (o.device != "cpu") {
    try {
      const at::Device device(o.device);
      if (device.is_cuda() && !at::hasCUDA())
        fail(fmt::format("--device: '{}' needs CUDA, and this build's libtorch has no CUDA device to run on", o.device));
    } catch (const c10::Error&) {
      bad_value("--device", "cpu, cuda or cuda:N", "'" + o.device + "'");
    }
  }
#else
  if (o.device != "cpu") fail("--device: only cpu runs without libtorch (main hands other devices to specdec-generate-torch)");
#endif
  try {
    (void)specdec::models::ActivationBits::parse(o.activation_bits);
  } catch (const std::exception&) {
    bad_value("--activation-bits", "16, 8 or a list such as 16,attn_out=8 (kinds qkv, attn_out, gate_up, down, lm_head)",
              "'" + o.activation_bits + "'");
  }

  // Files.
  if (!fs::exists(o.model))
    fail(fmt::format("--model: '{}' does not exist{}", o.model,
                     o.model == kDefaultModel.string() ? " (run ./scripts/setup.sh to download the bundled model)" : ""));
  p.tokenizer_path = o.tokenizer;
  if (p.tokenizer_path.empty()) {
    if (fs::is_directory(o.model))
      fail(fmt::format("--tokenizer: a GGUF file holding the tokenizer is needed for the Hugging Face directory '{}'",
                       o.model));
    p.tokenizer_path = o.model;
  }
  if (!fs::is_regular_file(p.tokenizer_path))
    fail(fmt::format("--tokenizer: '{}' is not a file (a GGUF file holding the tokenizer is expected)", p.tokenizer_path));
  if (uses_draft) {
    const std::string path = o.draft_model.empty() ? kDefaultDraftModel.string() : o.draft_model;
    if (!fs::exists(path)) fail(fmt::format("--draft-model: '{}' does not exist", path));
  }
  if (uses_eagle) {
    const fs::path dir = o.eagle_head.empty() ? kDefaultEagleHead : fs::path(o.eagle_head);
    if (!fs::exists(dir / "config.json"))
      fail(fmt::format("--eagle-head: '{}' holds no config.json (an EAGLE head checkpoint directory is expected)",
                       dir.string()));
  }
  return p;
}

/// Whether the GGUF describes an instruct (chat) model: it ships a chat template, or its name says so.
bool looks_instruct(const specdec::models::GgufFile& file) {
  if (file.contains("tokenizer.chat_template")) return true;
  for (const char* key : {"general.name", "general.finetune"}) {
    if (!file.contains(key)) continue;
    try {
      std::string v = file.get_string(key);
      std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (v.find("instruct") != std::string::npos || v.find("chat") != std::string::npos) return true;
    } catch (const std::exception&) {
    }
  }
  return false;
}

int run_cli(const Options& o, const Prepared& p) {
  std::optional<specdec::models::GgufFile> read;
  std::optional<Tokenizer> tokenizer;
  try {
    read.emplace(p.tokenizer_path);
    tokenizer.emplace(Tokenizer::from_gguf(*read));
  } catch (const std::exception& e) {
    fail(fmt::format("{}: '{}': {}", o.tokenizer.empty() ? "--model" : "--tokenizer", p.tokenizer_path, e.what()));
  }
  const TokenizerSource ts{std::move(*read), std::move(*tokenizer)};
  // A raw prompt to an instruct model is continued as text rather than answered: say so before the run.
  if (p.user_prompts && !p.chat && looks_instruct(ts.file))
    warn(fmt::format("{} without --chat: '{}' looks like an instruct model (it has a chat template), which continues "
                     "raw text rather than answering it; add --chat to apply the template",
                     o.prompt_file.empty() ? "--prompt" : "--prompt-file", fs::path(p.tokenizer_path).filename().string()));
  if (o.device == "cpu") {
    // The target's file is parsed once when it is also the tokenizer's.
    const bool same_file = p.tokenizer_path == o.model && !fs::is_directory(o.model);
    LlamaModel target = load_model(o.model, "--model", o, false, specdec::models::GgmlType::kQ8_0, same_file ? &ts.file : nullptr);
    return run_on(o, p, ts, target);
  }
#if !defined(SPECDEC_GENERATE_TORCH)
  fail("--device: only cpu runs without libtorch");
#else
  specdec::models::AtenLlamaOptions ao;
  ao.device = at::Device(o.device);
  if (o.dtype == "bfloat16") ao.dtype = at::kBFloat16;
  else if (o.dtype == "float16") ao.dtype = at::kHalf;
  auto target = fs::is_directory(o.model) ? specdec::models::load_aten_llama_safetensors(o.model, ao)
                                          : specdec::models::load_aten_llama_gguf(o.model, ao);
  return run_on(o, p, ts, target);
#endif
}

/// Prints every prompt's generated text and finish reason (a prompt set; one prompt streams its text as it comes).
void print_outputs(const Prepared& p, const std::vector<GenerationRequest>& requests, const RunOutcome& run,
                   const Tokenizer& tokenizer) {
  for (std::size_t i = 0; i < run.results.size(); ++i) {
    const auto& r = run.results[i];
    const std::vector<std::int32_t> ids(r.tokens.begin(), r.tokens.end());
    fmt::print("--- prompt {}{}: {} prompt tokens ---\n{}\n{}\n", i + 1, p.names[i].empty() ? "" : " (" + p.names[i] + ")",
               requests[i].prompt.size(), tokenizer.decode(ids, /*skip_special=*/true), finish_line(r, run.seconds[i]));
  }
  std::fflush(stdout);
}

/// The SHA-256 of the model: of the file, or of each file of a Hugging Face directory (by name).
nlohmann::json model_digest(const std::string& path) {
  if (!fs::is_directory(path)) return specdec::cli::sha256_file(path);
  nlohmann::json files = nlohmann::json::object();
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(path))
    if (e.is_regular_file()) entries.push_back(e.path());
  std::sort(entries.begin(), entries.end());
  for (const auto& e : entries) files[e.filename().string()] = specdec::cli::sha256_file(e);
  return files;
}

/// Writes `text` to `path` through `path.partial` renamed into place, so a reader never sees half a file; on any failure
/// the partial file is removed and the error names `flag`.
void write_output(const char* flag, const std::string& path, const std::string& text) {
  const std::string tmp = path + ".partial";
  std::error_code ec;
  try {
    {
      std::ofstream f(tmp);
      if (!f) fail(fmt::format("{}: cannot write '{}'", flag, tmp));
      f << text;
      f.flush();
      if (!f) fail(fmt::format("{}: cannot write '{}'", flag, tmp));
    }
    fs::rename(tmp, path);
  } catch (const fs::filesystem_error& e) {
    fs::remove(tmp, ec);
    fail(fmt::format("{}: cannot write '{}': {}", flag, path, e.code().message()));
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
}

/// The rest of a run on a loaded target (LlamaModel on the CPU kernels, or AtenLlamaModel on --device).
template <class Target>
int run_on(const Options& o, const Prepared& p, const TokenizerSource& ts, Target& target) {
  const specdec::models::GgufFile& tokenizer_file = ts.file;
  const Tokenizer& tokenizer = ts.tokenizer;
  const std::string& proposer = p.proposer;
  const auto& prompts = p.prompts;
  const auto& named = p.named;
  const auto& params = p.params;
  std::optional<specdec::models::ChatTemplate> chat_template;
  if (p.chat) chat_template.emplace(specdec::models::ChatTemplate::from_gguf(tokenizer_file));
  std::vector<GenerationRequest> requests;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    std::string text = prompts[i];
    if (p.chat) {
      const std::vector<specdec::models::ChatMessage> msgs = {{"user", prompts[i]}};
      text = chat_template->apply(msgs, /*add_generation_prompt=*/true);
    }
    const auto ids = tokenizer.encode(text, {.add_special = true, .parse_special = p.chat});
    if (ids.empty()) fail(fmt::format("prompt {}: encodes to no tokens", i + 1));
    if (static_cast<std::int64_t>(ids.size()) >= target.max_sequence_length())
      fail(fmt::format("prompt {}: {} tokens leave no room for a new token in the model's context length of {}", i + 1,
                       ids.size(), target.max_sequence_length()));
    r.prompt.assign(ids.begin(), ids.end());
    r.params = params;
    r.params.seed = params.seed + i;
    r.max_new_tokens = o.max_new_tokens;
    r.verify_method = o.verify == "block" ? specdec::VerifyMethod::kBlock : specdec::VerifyMethod::kToken;
    for (const std::int32_t id : tokenizer.end_of_generation_ids())
      if (id < target.vocab_size()) r.stop_token_ids.push_back(id);
    requests.push_back(std::move(r));
  }
  const RunSettings how{prompts.size() == 1 && !o.quiet, o.rounds};
  RunSettings spec_how = how;  // the speculative run's: its steps traced for --trace-steps
  spec_how.trace = !o.trace_steps.empty();

  DecoderOptions spec_options;
  spec_options.num_speculative_tokens = o.num_speculative_tokens;
#if defined(SPECDEC_GENERATE_TORCH)
  if (o.device != "cpu") spec_options.device_backend = specdec::torch::make_device_backend;  // rows on the device
#endif
  spec_options.adaptive.enabled = o.adaptive;
  spec_options.adaptive.probe_backoff = o.probe_backoff;
  spec_options.adaptive.shadow_probes = !o.no_shadow_probes;
  spec_options.adaptive.cut_lookups = !o.no_cut_lookups;
  spec_options.adaptive.confidence_cut = !o.no_confidence_cut;
  spec_options.adaptive.sampled = o.adaptive_all;
  if (o.adaptive && !o.adaptive_all) {
    const double slope = o.sampled_cost_slope;
    spec_options.adaptive.sampled_cost = [slope](std::int64_t rows) { return 1.0 + slope * static_cast<double>(rows); };
    spec_options.adaptive.sampled_draft_cost = o.sampled_draft_cost >= 0 ? o.sampled_draft_cost : default_draft_cost(proposer);
  }
  const bool joint = o.adaptive && (params.greedy() || o.adaptive_all);  // the timed policy (greedy, or --adaptive)
  const bool adaptive = o.adaptive;                                       // what the run does
  std::vector<double> profile_ratios;
  if (joint && proposer != "none" && o.cost_model == "profile") {
    // The policy's cost model profiled once before the runs (specdec/decoder/cost_profile.hpp), not learned from them.
    const bool tty = isatty(fileno(stderr)) != 0;
    const std::string what = fmt::format("specdec-generate: profiling the verification cost of 1..{} rows",
                                         o.num_speculative_tokens + 1);
    fmt::print(stderr, "{}{}", what, tty ? " ..." : " ...\n");
    std::fflush(stderr);
    const auto profile = specdec::decoder::profile_forward_seconds(
        target, o.num_speculative_tokens + 1, 128, 3, [&](int done, int total) {
          if (tty) fmt::print(stderr, "\r{} ... round {}/{}", what, done, total);
          else fmt::print(stderr, "specdec-generate: cost profile round {}/{} done\n", done, total);
          std::fflush(stderr);
        });
    if (tty) std::fputc('\n', stderr);
    std::string ratios;
    for (const double s : profile) {
      profile_ratios.push_back(s / profile[0]);
      ratios += fmt::format(" {:.2f}", s / profile[0]);
    }
    fmt::print(stderr, "specdec-generate: verification cost profiled, 1..{} rows / 1 row:{}\n", profile.size(), ratios);
    spec_options.adaptive.forward_seconds = specdec::decoder::forward_cost_from_profile(profile);
  }
  spec_options.measure_expected_acceptance = o.expected_acceptance;
  spec_options.detokenize = specdec::decoder::make_detokenizer(tokenizer);
  DecoderOptions base_options = spec_options;
  base_options.num_speculative_tokens = 0;
  base_options.adaptive.enabled = false;

  fmt::print(stderr, "specdec-generate: model {} (V = {}), {} prompt(s), proposer {}, g = {}{}, temperature {}, verify {}\n",
             fs::path(o.model).filename().string(), target.vocab_size(), prompts.size(), proposer,
             o.num_speculative_tokens, adaptive ? " (adaptive: at most)" : " (fixed)", o.temperature, o.verify);

  // The baseline goes first, or after the speculative run with --baseline-last: in one process the second run of
  // identical work measures a few percent slower on this project's host (docs/adaptive-policy.md), so scripts alternate.
  std::optional<RunOutcome> base;
  auto run_baseline = [&] {
    specdec::proposers::NoProposer none;
    base = run(none, target, requests, base_options, tokenizer, "autoregressive", how);
  };
  if (o.compare && !o.baseline_last) run_baseline();
  RunOutcome spec;
  std::optional<LlamaModel> draft_model;
  if (proposer == "none") {
    specdec::proposers::NoProposer none;
    spec = run(none, target, requests, base_options, tokenizer, "autoregressive", how);
  } else if (proposer.find(',') != std::string::npos) {
    // A proposer chain: the members in priority order; each request's drafts come from the first member that finds any
    // (--chain-select first) or from the member whose proposal is worth the most expected accepted drafts (expected).
    std::optional<specdec::proposers::NgramProposer> ngram;
    std::optional<specdec::proposers::SuffixProposer> suffix;
    std::optional<specdec::proposers::CorpusProposer> corpus;
    std::optional<specdec::proposers::DraftModelProposer<LlamaModel>> dp;
#if defined(SPECDEC_HAVE_EAGLE)
    std::optional<specdec::proposers::EagleProposer> eagle;
#endif
    specdec::proposers::ChainOptions chain_options;
    if (o.chain_select == "expected") chain_options.selection = specdec::proposers::ChainSelection::kMostExpected;
    chain_options.enough_expected = o.chain_enough;
    specdec::proposers::ProposerChain chain(chain_options);
    for (const std::string& name : proposer_names(proposer)) {
      if (name == "ngram" && !ngram) {
        chain.add(ngram.emplace(ngram_options(o)), name);
      } else if (name == "suffix" && !suffix) {
        chain.add(suffix.emplace(suffix_options(o)), name);
      } else if (name == "corpus" && !corpus) {
        chain.add(corpus.emplace(make_corpus(o)), name);
      } else if (name == "draft" && !dp) {
        draft_model.emplace(load_draft_model(o));
        chain.add(dp.emplace(*draft_model, target.vocab_size(), draft_options(o, *draft_model)), name);
#if defined(SPECDEC_HAVE_EAGLE)
      } else if (name == "eagle" && !eagle) {
        if constexpr (std::is_same_v<Target, LlamaModel>)
          chain.add(eagle.emplace(make_eagle(o, target)), name);
        else
          fail("--proposer: EAGLE runs with --device cpu (the EAGLE head reads the CPU target's features)");
#endif
      } else {
        fail(fmt::format("--proposer: a chain lists distinct members from ngram, suffix, corpus, draft and eagle, separated by "
                         "commas; got '{}' in '{}'", name, proposer));
      }
    }
    std::vector<GenerationRequest> chain_requests = requests;
    for (std::size_t i = 0; i < chain_requests.size(); ++i) chain_requests[i].proposers = named[i];
    spec = run(chain, target, chain_requests, spec_options, tokenizer, "speculative (" + proposer + ")", spec_how);
    for (std::size_t i = 0; i < chain.size(); ++i)
      fmt::print(stderr, "specdec-generate: chain member {} drafted {} request-steps\n", chain.name(i), chain.drafted_by(i));
  } else if (proposer == "ngram") {
    specdec::proposers::NgramProposer ngram(ngram_options(o));
    spec = run(ngram, target, requests, spec_options, tokenizer, "speculative (ngram)", spec_how);
  } else if (proposer == "suffix") {
    specdec::proposers::SuffixProposer suffix(suffix_options(o));
    spec = run(suffix, target, requests, spec_options, tokenizer, "speculative (suffix)", spec_how);
  } else if (proposer == "corpus") {
    specdec::proposers::CorpusProposer corpus = make_corpus(o);
    spec = run(corpus, target, requests, spec_options, tokenizer, "speculative (corpus)", spec_how);
  } else if (proposer == "draft") {
    draft_model.emplace(load_draft_model(o));
    if (static_cast<std::int64_t>(draft_model->vocab_size()) == static_cast<std::int64_t>(target.vocab_size())) {
      specdec::proposers::DraftModelProposer<LlamaModel> dp(*draft_model, target.vocab_size(), draft_options(o, *draft_model));
      spec = run(dp, target, requests, spec_options, tokenizer, "speculative (draft model)", spec_how);
    } else {
      // Another tokenizer: token-level intersection over the two GGUF vocabularies, the context re-tokenized each step.
      const std::string path = o.draft_model.empty() ? kDefaultDraftModel.string() : o.draft_model;
      if (fs::is_directory(path))
        fail(fmt::format("--draft-model: '{}' has a vocabulary of {} tokens, the target {}; drafting across vocabularies "
                         "needs the draft's tokenizer from a GGUF file", path, draft_model->vocab_size(), target.vocab_size()));
      const Tokenizer draft_tokenizer = Tokenizer::from_gguf(specdec::models::GgufFile(path));
      auto texts = [](const Tokenizer& t, std::vector<std::string>& text, std::vector<std::uint8_t>& usable) {
        for (std::int32_t i = 0; i < t.vocab_size(); ++i) {
          text.push_back(t.token_to_piece(i));
          const auto type = t.token_type(i);
          usable.push_back(type == specdec::models::TokenType::kNormal || type == specdec::models::TokenType::kUserDefined ||
                           type == specdec::models::TokenType::kByte);
        }
      };
      std::vector<std::string> dt, tt;
      std::vector<std::uint8_t> du, tu;
      texts(draft_tokenizer, dt, du);
      texts(tokenizer, tt, tu);
      auto bridge = specdec::proposers::VocabBridge::from_texts(dt, tt, du, tu);
      fmt::print(stderr, "specdec-generate: draft vocabulary {} tokens, target {}: {} draft tokens bridged by their text\n",
                 draft_model->vocab_size(), target.vocab_size(), bridge.shared);
      // Ids of one tokenizer decoded (control tokens skipped) and encoded by the other; `whole_chars`: a trailing
      // incomplete UTF-8 character left out.
      auto reencode = [](const Tokenizer& from, const Tokenizer& to, std::span<const std::int64_t> ids,
                         specdec::models::EncodeOptions eo, bool whole_chars) {
        const std::string text = from.decode(std::vector<std::int32_t>(ids.begin(), ids.end()), /*skip_special=*/true);
        const std::size_t n = whole_chars ? specdec::models::detail::utf8_complete_prefix(text) : text.size();
        const std::vector<std::int32_t> out = to.encode(std::string_view(text).substr(0, n), eo);
        return std::vector<std::int64_t>(out.begin(), out.end());
      };
      specdec::proposers::Retokenize retokenize = [&](std::span<const std::int64_t> ids) {
        return reencode(tokenizer, draft_tokenizer, ids, {.add_special = draft_tokenizer.add_bos()}, false);
      };
      // Greedy requests: string-level exact match, the draft's own text written in the target's tokens.
      specdec::proposers::ToTarget to_target = [&](std::span<const std::int64_t> ids) {
        return reencode(draft_tokenizer, tokenizer, ids, {.add_special = false, .continuation = true}, true);
      };
      specdec::proposers::DraftModelOptions cross = draft_options(o, *draft_model);
      cross.min_path_prob = o.draft_min_path_prob;  // a draft half the target's size keeps the common default
      specdec::proposers::CrossVocabDraftProposer<LlamaModel> cp(*draft_model, std::move(bridge), retokenize, cross,
                                                                 o.cross_vocab_greedy == "slem" ? to_target : specdec::proposers::ToTarget{});
      spec = run(cp, target, requests, spec_options, tokenizer, "speculative (draft model, another vocabulary)", spec_how);
    }
#if defined(SPECDEC_HAVE_EAGLE)
  } else if (proposer == "eagle") {
    if constexpr (std::is_same_v<Target, LlamaModel>)
      spec = run_eagle(o, target, requests, spec_options, tokenizer, spec_how);
    else
      fail("--proposer eagle: runs with --device cpu (the EAGLE head reads the CPU target's features)");
#endif
  } else {
    fail(fmt::format("--proposer: expected one of none, ngram, suffix, draft{}, got '{}'",
#if defined(SPECDEC_HAVE_EAGLE)
                     ", eagle",
#else
                     "",
#endif
                     proposer));
  }

  if (o.compare && o.baseline_last) run_baseline();

  if (!o.quiet && !how.stream) print_outputs(p, requests, spec, tokenizer);
  print_table(base, spec, proposer, o.num_speculative_tokens, adaptive);

  if (!o.trace_steps.empty()) {
    std::string text;
    for (const auto& e : spec.trace) text += e.dump() + "\n";
    write_output("--trace-steps", o.trace_steps, text);
    fmt::print(stderr, "specdec-generate: wrote {} ({} request steps)\n", o.trace_steps, spec.trace.size());
  }
  if (!o.json.empty()) {
    const DecoderMetrics& m = spec.metrics;
    const double t1 = reference_one_token_seconds(base, spec);
    nlohmann::json j;
    j["version"] = specdec::cli::build_version();
    j["git_commit"] = specdec::cli::build_git_commit();
    j["model"] = o.model;
    if (fs::is_directory(o.model)) j["model_files_sha256"] = model_digest(o.model);
    else j["model_sha256"] = model_digest(o.model);
    j["tokenizer"] = p.tokenizer_path;
    j["proposer"] = proposer;
    j["num_speculative_tokens"] = o.num_speculative_tokens;
    j["adaptive"] = adaptive;
    j["temperature"] = o.temperature;
    j["top_k"] = o.top_k;
    j["top_p"] = o.top_p;
    j["min_p"] = o.min_p;
    j["seed"] = o.seed_value;
    j["max_new_tokens"] = o.max_new_tokens;
    j["rounds"] = o.rounds;
    j["chat"] = p.chat;
    j["threads"] = o.threads;
    {
      const specdec::cli::CpuDescription cpu = specdec::cli::read_cpu_description();
      nlohmann::json h;
      if (!cpu.vendor.empty()) h["vendor"] = cpu.vendor;
      if (!cpu.model_name.empty()) h["cpu"] = cpu.model_name;
      if (cpu.family >= 0) h["family"] = cpu.family;
      if (cpu.model >= 0) h["model"] = cpu.model;
      h["logical_cpus"] = cpu.logical_cpus;
      if constexpr (std::is_same_v<Target, LlamaModel>) h["kernels"] = target.kernel_name();
      j["host"] = std::move(h);
    }
    j["aten_threads"] = o.aten_threads;
    j["device"] = o.device;
    if (o.device == "cpu") {
      j["activation_bits"] = o.activation_bits;
      j["kv_cache"] = o.kv_cache;
    } else {
      j["dtype"] = o.dtype;
    }
    j["verify"] = o.verify;
    j["compare"] = o.compare;
    j["baseline_last"] = o.compare && o.baseline_last;
    if (!profile_ratios.empty()) j["cost_profile"] = profile_ratios;
    nlohmann::json results = nlohmann::json::array();
    for (std::size_t i = 0; i < spec.results.size(); ++i) {
      const auto& r = spec.results[i];
      const std::vector<std::int32_t> ids(r.tokens.begin(), r.tokens.end());
      nlohmann::json e;
      e["index"] = i;
      if (!p.names[i].empty()) e["name"] = p.names[i];
      e["prompt_tokens"] = requests[i].prompt.size();
      e["text"] = tokenizer.decode(ids, /*skip_special=*/true);
      e["finish_reason"] = specdec::decoder::to_string(r.finish_reason);
      e["tokens"] = r.tokens.size();
      e["seconds"] = spec.seconds[i];
      if (spec.seconds[i] > 0) e["tokens_per_second"] = static_cast<double>(r.tokens.size()) / spec.seconds[i];
      results.push_back(std::move(e));
    }
    j["prompts"] = std::move(results);
    if (proposer != "none" && m.total.target_forwards > 0) {
      j["drafting_step_fraction"] =
          static_cast<double>(m.total.steps_with_drafts) / static_cast<double>(m.total.target_forwards);
      if (m.total.steps_with_drafts > 0) put_finite(j, "mean_gamma", m.mean_gamma());
    }
    if (adaptive && !o.no_shadow_probes && proposer != "none") {
      j["shadow_probes"] = m.total.shadow_probes;
      j["shadow_probes_right"] = m.total.shadow_accepted;
    }
    j["speculative"] = speculative_json(m, t1, o.expected_acceptance);
    if (m.total.drafted > 0) put_finite(j, "theoretical_speedup", m.theoretical_speedup(t1));
    put_finite(j, "one_token_forward_seconds", t1);
    if (base) {
      const auto& bm = base->metrics;
      nlohmann::json b;
      put_finite(b, "tokens_per_second", bm.tokens_per_second());
      b["tokens"] = bm.total.emitted;
      put_finite(b, "overhead_fraction", bm.overhead_fraction());
      if (bm.steps) b["ms_per_step"] = 1e3 * bm.step_seconds() / static_cast<double>(bm.steps);
      j["baseline"] = std::move(b);
      put_finite(j, "speedup", m.tokens_per_second() / bm.tokens_per_second());
      bool same = true;
      for (std::size_t i = 0; i < spec.results.size(); ++i) same &= spec.results[i].tokens == base->results[i].tokens;
      j["outputs_identical"] = same;
    }
    j["wall_seconds"] = seconds_since(kProgramStart);
    write_output("--json", o.json, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    fmt::print(stderr, "specdec-generate: wrote {}\n", o.json);
  }
  return 0;
}

}  // namespace

#if !defined(SPECDEC_GENERATE_TORCH)
/// --device other than cpu: runs specdec-generate-torch (this program built with libtorch, beside this binary) with the
/// same arguments, so that the CPU path never loads libtorch. Returns only when it cannot be started.
int run_torch_build(int argc, char** argv, const std::string& device) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path other = (ec ? fs::path(argv[0]).parent_path() : self.parent_path()) / "specdec-generate-torch";
  if (!fs::exists(other, ec)) {
    fmt::print(stderr,
               "specdec-generate: error: --device: '{}' runs the target on libtorch, in specdec-generate-torch, which is "
               "not beside this program ('{}'; build specdec with SPECDEC_WITH_TORCH=ON)\n",
               device, other.string());
    return 1;
  }
  std::string path = other.string();
  std::vector<char*> args(argv, argv + argc);
  args[0] = path.data();
  args.push_back(nullptr);
  ::execv(path.c_str(), args.data());
  fmt::print(stderr, "specdec-generate: error: --device: cannot start '{}': {}\n", path, std::strerror(errno));
  return 1;
}
#endif

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"specdec-generate: lossless speculative decoding on a real model", "specdec-generate"};
  app.add_option("--model", o.model,
                 "GGUF file or Hugging Face directory (safetensors + config.json); default: the bundled "
                 "models/SmolLM2-135M-Instruct.Q4_1.gguf");
  app.add_option("--tokenizer", o.tokenizer, "GGUF file with the tokenizer (default: --model when it is a GGUF file)");
  app.add_option("--draft-model", o.draft_model, "draft model for --proposer draft (GGUF or HF directory)");
  app.add_option("--proposer", o.proposer, "none, ngram, suffix, corpus, draft or eagle, or a chain in priority order such as suffix,draft (default: the best measured for the run: suffix,eagle with --chain-select expected for one prompt on the CPU when the EAGLE head fits the model, else suffix)")
      ->check([](const std::string& v) -> std::string {
        for (const char* name : {"none", "ngram", "suffix", "corpus", "draft", "eagle"})
          if (v == name) return {};
        if (v.find(',') != std::string::npos) return {};  // a chain; its members are checked when it is built
        return "expected none, ngram, suffix, corpus, draft, eagle or a comma-separated chain, got '" + v + "'";
      });
  app.add_option("--eagle-head", o.eagle_head, "EAGLE head directory (config.json + model.safetensors)");
  app.add_option("--corpus-table", o.corpus,
                 "table for --proposer corpus, written by `specdec-train corpus` (default: the bundled "
                 "models/smollm2-135m-corpus.bin)");
  app.add_option("-g,--num-speculative-tokens", o.num_speculative_tokens,
                 "drafts per step (g, at most 64): the most a step drafts under the adaptive policy, exactly g with "
                 "--fixed-g")
      ->capture_default_str();
  auto* adaptive = app.add_flag("--adaptive", o.adaptive_all,
                                "the adaptive draft-length policy (the default at temperature 0: g in [0, g] per request "
                                "and step, maximising expected tokens/s from the request's recent acceptance and the "
                                "target's verification cost learned from the run) also when sampling, jointly over the "
                                "batch with those timed costs (sampled tokens for a seed then depend on the run's timings); "
                                "without it sampled requests choose alone against a fixed cost (--sampled-cost-slope)");
  app.add_flag("--fixed-g,--no-adaptive", o.fixed_g, "draft exactly g tokens every step (turn the adaptive policy off)")
      ->excludes(adaptive);
  app.add_option("--sampled-cost-slope", o.sampled_cost_slope,
                 "sampling without --adaptive: each request drafts its g while its drafting steps emitted more tokens than "
                 "they cost, else steps plainly with probes; a step with x drafts costs 1 + slope * x plain steps (no "
                 "timing: a seed's tokens stay reproducible); the default is this CPU forward's measured slope over "
                 "1-4 drafts")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  app.add_option("--sampled-draft-cost", o.sampled_draft_cost,
                 "with --sampled-cost-slope: a draft position's cost in plain steps (default: the proposer's measured "
                 "c, 0.02 for ngram/suffix, 0.09 draft, 0.08 eagle, a chain's costliest)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--cost-model", o.cost_model,
                 "adaptive policy: the target's verification cost per row count, profile (timed once before the runs, "
                 "as vLLM profiles at startup) or learned (from the run's own steps)")
      ->check(CLI::IsMember({"profile", "learned"}));
  app.add_flag("--no-shadow-probes", o.no_shadow_probes,
               "adaptive policy with a lookup proposer (ngram, suffix): probe by verifying one draft after plain steps "
               "(--probe-backoff) instead of comparing each plain step's token with an unverified lookup draft");
  app.add_option("--chain-select", o.chain_select,
                 "a --proposer chain's drafts per request and step: first (the first member in order that drafts) or "
                 "expected (every member proposes; the proposal with the most expected accepted drafts is verified: "
                 "EAGLE's and the draft model's by their confidences, lookups' by the acceptance the request has seen)")
      ->check(CLI::IsMember({"first", "expected"}));
  app.add_option("--chain-enough", o.chain_enough,
                 "--chain-select expected: a request's later members are not asked once a proposal is worth more than this "
                 "many expected accepted drafts (default 2; ChainOptions::enough_expected)");
  app.add_flag("--no-confidence-cut", o.no_confidence_cut,
               "EAGLE chains under the adaptive policy: choose g before proposing from the request's history instead of "
               "proposing at the bound and cutting each chain by the head's own confidences");
  app.add_flag("--no-cut-lookups", o.no_cut_lookups,
               "adaptive policy with a lookup proposer: choose g before proposing (plain steps ask for one draft to compare) "
               "instead of proposing g, choosing how many to verify from the proposal and learning from every proposed "
               "position the step emitted");
  app.add_option("--probe-backoff", o.probe_backoff,
                 "adaptive policy: a request at g = 0 drafts one token after 4 plain steps, and each rejected probe "
                 "doubles the wait, up to this many probe intervals (16 steps each); 1 = after 4, 8, then every 16")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--verify", o.verify,
                 "how chains of drafts are verified: token (token by token) or block (block verification, Sun et al. "
                 "2024: jointly, lossless, never fewer accepted drafts in expectation; trees stay token-level)")
      ->check(CLI::IsMember({"token", "block"}))
      ->capture_default_str();
  app.add_flag("--expected-acceptance", o.expected_acceptance,
               "also report, per step of sampled chains with draft probabilities, the expected accepted drafts given "
               "the drafted block under token-level and under block verification (a paired comparison on the same drafts)");
  app.add_flag("--tree", o.tree, "draft trees (EAGLE-2 dynamic trees; n-gram: several matches as siblings; suffix: up to 4 children per node)");
  app.add_option("--tree-top-k", o.tree_top_k, "EAGLE-2 tree: children per expanded node and nodes expanded per level")
      ->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--tree-nodes", o.tree_nodes, "EAGLE-2 tree: drafts kept (the tree's size without the root)")
      ->capture_default_str()->check(CLI::Range(1, 256));
  app.add_option("--draft-min-prob", o.draft_min_prob,
                 "EAGLE chains: stop drafting at the first step whose head distribution has no probability >= this (0 = always g)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--eagle-sampled-drafts", o.eagle_sampled_drafts,
                 "EAGLE drafts of sampled requests: sample (chains drawn from the head's distribution, verified against "
                 "it), argmax (the head's most likely tokens, deterministic drafts accepted with the target's "
                 "probability, cut by the head's confidence) or tree (EAGLE-2 trees of deterministic drafts ranked at the "
                 "request's temperature, verified without replacement: by default 4 nodes, 2 children a node, path "
                 "probability >= 0.3, --sampled-cost-slope 0.06)")
      ->check(CLI::IsMember({"sample", "argmax", "tree"}))
      ->capture_default_str();
  app.add_option("--draft-min-path-prob", o.draft_min_path_prob,
                 "EAGLE and draft-model chains: stop drafting where the product of the draft distributions' largest "
                 "probabilities so far falls below this (the drafter's chance for the whole chain; 0 = off; default at "
                 "temperature 0 0.15, for a draft model of the target's vocabulary 0.05; 0.5 when sampling); EAGLE "
                 "trees: keep only nodes whose path probability is at least this (0.3 for sampled trees)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--cross-vocab-greedy", o.cross_vocab_greedy,
                 "a draft model of another vocabulary, greedy requests: slem (string-level exact match: the draft's greedy "
                 "text in the target's tokens) or tli (token-level intersection, as sampled requests always draft)")
      ->check(CLI::IsMember({"slem", "tli"}))
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "0 = greedy")->capture_default_str();
  app.add_option("--top-k", o.top_k, "0 = off")->capture_default_str();
  app.add_option("--top-p", o.top_p, "1 = off")->capture_default_str();
  app.add_option("--min-p", o.min_p, "0 = off")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the first prompt (prompt i uses seed + i): a decimal integer in [0, 2^64)")
      ->capture_default_str();
  app.add_option("--max-new-tokens", o.max_new_tokens, "tokens to generate per prompt")->capture_default_str();
  app.add_option("--rounds", o.rounds,
                 "run the prompt set this many times in sequence through the same proposer (a repeated task: suffix "
                 "decoding's global cache sees the earlier rounds' outputs); figures cover every round")
      ->capture_default_str();
  app.add_option("--prompt", o.prompt, "prompt text");
  app.add_option("--prompt-file", o.prompt_file,
                 "one prompt per line, or JSONL objects with a \"prompt\" field (and optionally \"proposers\": the members of "
                 "the --proposer chain that prompt drafts with, in its order, e.g. [\"suffix\"] or \"draft,suffix\"); run as one batch");
  app.add_flag("--chat", o.chat, "apply the model's chat template");
  app.add_flag("--quiet", o.quiet, "print no generated text (the figures and stderr's progress remain)");
  app.add_flag("--compare", o.compare, "also run the autoregressive baseline and report the speedup");
  app.add_flag("--baseline-last", o.baseline_last,
               "with --compare: run the baseline after the speculative run instead of before (alternate the two orders "
               "over repeated runs to cancel the order effect of timing two runs in one process)");
  app.add_option("--json", o.json,
                 "write the run's parameters, each prompt's output and the figures as JSON to this file (its directory "
                 "must be writable; docs/generate.schema.json)");
  app.add_option("--trace-steps", o.trace_steps,
                 "write one JSON line per request and step of the speculative run to this file: round, prompt, step, "
                 "position, drafts proposed (before the adaptive policy's cut), verified and accepted, tokens emitted, the "
                 "proposer's confidences, a tree's parents and accepted nodes (bench/policy_ceiling.py reads it)");
  app.add_option("--suffix-alpha", o.suffix_alpha, "suffix proposer: draft nodes per matched token (the paper's alpha)")
      ->capture_default_str();
  app.add_option("--suffix-min-match", o.suffix_min_match,
                 "suffix proposer: shortest suffix match drafted from (default 1; the adaptive policy cuts what does not pay)")
      ->check(CLI::Range(1, 23))
      ->capture_default_str();
  app.add_option("--ngram-min-n", o.ngram_min_n, "n-gram proposer: shortest match")->capture_default_str();
  app.add_option("--ngram-max-n", o.ngram_max_n, "n-gram proposer: longest match")->capture_default_str();
  app.add_option("--device", o.device,
                 "cpu (default): the block-format CPU kernels, no libtorch; cuda, cuda:N or another ATen device: the ATen "
                 "Llama forward there (weights dequantised to --dtype), run by specdec-generate-torch")
      ->capture_default_str();
  app.add_option("--dtype", o.dtype, "with --device other than cpu: float32, bfloat16 or float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}))
      ->capture_default_str();
  app.add_option("--threads", o.threads,
                 "threads of the models' forward; 0 = every CPU this process may run on (at most 4 per CPU)")
      ->capture_default_str();
  app.add_option("--aten-threads", o.aten_threads,
                 "with --device other than cpu: threads of ATen's and OpenBLAS's own pools; 1 keeps the cores for the "
                 "models' pool (the CPU path runs no ATen)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--draft-weights", o.draft_weights,
                 "the draft model's and the EAGLE head's float weights: q8_0 or q4_0 (quantised at load, run on the "
                 "target's packed products; q4_0 reads half the bytes) or float")
      ->check(CLI::IsMember({"q8_0", "q4_0", "float"}))
      ->capture_default_str();
  app.add_option("--activation-bits", o.activation_bits,
                 "precision of activations meeting block-format weights: 16 (two int8 planes, ~float accuracy), 8 (one "
                 "plane, as llama.cpp), or per kind of matrix, e.g. 16,attn_out=8 (kinds qkv, attn_out, gate_up, down, "
                 "lm_head)")
      ->capture_default_str();
  app.add_option("--kv-cache", o.kv_cache,
                 "the CPU models' KV cache: f16 (IEEE half, half the bytes a long context's attention reads, as llama.cpp) "
                 "or f32")
      ->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the flag (CLI11's own messages do: "--verify: check ... failed", "The following argument was not
    // expected: ..."), as for every error below.
    fmt::print(stderr, "specdec-generate: error: {}\n", e.what());
    return e.get_exit_code() != 0 ? e.get_exit_code() : 1;
  }
#if !defined(SPECDEC_GENERATE_TORCH)
  if (o.device != "cpu") return run_torch_build(argc, argv, o.device);
#endif
  try {
    const Prepared prepared = check_options(o, app);
    if (o.threads <= 0) o.threads = specdec::models::available_cpus();
    if (o.adaptive_all) o.adaptive = true;
    if (o.fixed_g) o.adaptive = false;
#if defined(SPECDEC_GENERATE_TORCH)
    // By default ATen runs on the calling thread only: the models' own pool has the cores, and OpenMP workers that spin
    // after ATen's parallel regions would steal them from the forward. OpenBLAS's pool too: its workers spin after the
    // prefill's batched products (host_threads.hpp).
    specdec::models::set_host_library_threads(o.aten_threads);
#endif
    return run_cli(o, prepared);
#if defined(SPECDEC_GENERATE_TORCH)
  } catch (const c10::Error& e) {
    fmt::print(stderr, "specdec-generate: error: {}\n", e.what_without_backtrace());
#endif
  } catch (const std::exception& e) {
    fmt::print(stderr, "specdec-generate: error: {}\n", e.what());
  }
  return 1;
}
