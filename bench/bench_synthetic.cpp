// bench_synthetic — the decoder's speedup against g at a chosen acceptance rate, independent of any proposer
// (synthetic acceptance, as vLLM's and llama.cpp's benchmarks offer), beside theory::walltime_improvement.
//
// The drafts come from proposers::SyntheticProposer: the target's own greedy continuation (from a plain run) for the
// first min(n, g) drafts with n ~ Geometric(alpha), wrong tokens after. At temperature 0 verification keeps exactly those,
// so every step is the decoder's real step (a real (g + 1)-token verification, logits processing, verification, cache
// rollback) at a known acceptance: E[tokens per step] = (1 - alpha^(g+1)) / (1 - alpha). Each point runs right after its
// own plain run on the same prompts (speedup = tokens/s ratio, prefill excluded), and the theory column takes the
// measured verify cost ratio r of that point (its mean verification forward / the plain run's mean 1-token forward) and c
// (near 0 here: the synthetic proposer's lookups). The `adaptive` rows run the adaptive draft-length policy with g <= the
// largest g of the sweep at the same acceptance.
//
//   bench_synthetic [--model GGUF] [--alpha 0,0.5,0.7,0.8,0.9] [--g 0,1,2,3,4,5,6,8] [--max-new-tokens 64]
//                   [--threads 2] [--batch] [--json out.json] [--prompt-file FILE]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <ATen/Parallel.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/models/chat_template.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/prompt_file.hpp"
#include "specdec/models/tokenizer.hpp"
#include "specdec/proposers/synthetic.hpp"
#include "specdec/sampling/theory.hpp"

namespace fs = std::filesystem;
namespace sd = specdec::decoder;
namespace sm = specdec::models;
namespace sp = specdec::proposers;

namespace {

struct Run {
  double tokens_per_second = 0, tau = 0, acceptance = 0, one_token_seconds = 0, verify_seconds = 0, verify_rows = 0;
  double draft_position_seconds = 0, mean_gamma = 0, drafting_fraction = 0;
  std::vector<std::vector<std::int64_t>> tokens;
};

/// Runs every request (one at a time, or as one batch) through one decoder and sums its metrics.
template <class P>
Run run(P& proposer, sm::LlamaModel& target, const std::vector<sd::GenerationRequest>& requests, sd::DecoderOptions o,
        bool batch) {
  sd::SpeculativeDecoder<P, sm::LlamaModel> dec(proposer, target, o);
  Run out;
  if (batch) {
    for (auto& r : dec.generate(requests)) out.tokens.push_back(r.tokens);
  } else {
    for (const auto& q : requests) out.tokens.push_back(dec.generate({&q, 1})[0].tokens);
  }
  const auto& m = dec.metrics();
  out.tokens_per_second = m.tokens_per_second();
  out.tau = m.total.mean_accepted_length();
  out.acceptance = m.total.acceptance_rate();
  out.one_token_seconds = m.one_token_forward_seconds();
  out.verify_seconds = m.verify_forwards ? m.verify_seconds / static_cast<double>(m.verify_forwards) : 0.0;
  out.verify_rows = m.verify_tokens_per_request;
  out.mean_gamma = m.mean_gamma();
  out.drafting_fraction = m.total.target_forwards ? static_cast<double>(m.total.steps_with_drafts) /
                                                        static_cast<double>(m.total.target_forwards)
                                                  : 0.0;
  out.draft_position_seconds = m.draft_positions > 0 ? m.draft_seconds / static_cast<double>(m.draft_positions) : 0.0;
  return out;
}

std::vector<double> parse_list(const std::string& s) {
  std::vector<double> v;
  std::size_t begin = 0;
  while (begin <= s.size()) {
    const std::size_t end = std::min(s.find(',', begin), s.size());
    if (end > begin) v.push_back(std::stod(s.substr(begin, end - begin)));
    begin = end + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string model = (fs::path(SPECDEC_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
  std::string prompt_file = (fs::path(SPECDEC_SOURCE_DIR) / "examples" / "prompts" / "demo.jsonl").string();
  std::string alphas_s = "0,0.5,0.7,0.8,0.9", gs_s = "0,1,2,3,4,5,6,8", json_path;
  int max_new = 64, threads = 0;
  bool batch = false;
  CLI::App app{"bench_synthetic: the decoder's speedup against g at chosen acceptance rates, beside the theory"};
  app.add_option("--model", model, "GGUF file")->capture_default_str();
  app.add_option("--prompt-file", prompt_file, "prompts (run with the chat template)")->capture_default_str();
  app.add_option("--alpha", alphas_s, "acceptance rates, comma-separated")->capture_default_str();
  app.add_option("--g", gs_s, "fixed g values, comma-separated (the adaptive rows use g <= the largest)")->capture_default_str();
  app.add_option("--max-new-tokens", max_new, "tokens per prompt")->capture_default_str();
  app.add_option("--threads", threads, "threads of the forward (0 = every CPU this process may run on)")->capture_default_str();
  app.add_flag("--batch", batch, "run the prompts as one batch (default: one at a time, batch size 1)");
  app.add_option("--json", json_path, "write every point as JSON");
  CLI11_PARSE(app, argc, argv);
  if (threads <= 0) threads = sm::available_cpus();
  at::set_num_threads(1);
  const auto alphas = parse_list(alphas_s);
  std::vector<int> gs;
  for (double g : parse_list(gs_s)) gs.push_back(static_cast<int>(g));
  const int max_g = gs.empty() ? 0 : *std::max_element(gs.begin(), gs.end());

  sm::LlamaOptions lo;
  lo.num_threads = threads;
  sm::LlamaModel target = sm::load_llama_gguf(model, lo);
  const sm::GgufFile file(model);
  const auto tokenizer = sm::Tokenizer::from_gguf(file);
  const auto chat = sm::ChatTemplate::from_gguf(file);
  std::vector<sd::GenerationRequest> requests;
  for (const auto& text : sm::read_prompt_file(prompt_file)) {
    const std::vector<sm::ChatMessage> msgs = {{"user", text}};
    const auto ids = tokenizer.encode(chat.apply(msgs, true), {.add_special = true, .parse_special = true});
    sd::GenerationRequest r;
    r.prompt.assign(ids.begin(), ids.end());
    r.params.temperature = 0.0f;  // greedy: verification keeps exactly the reference's drafts
    r.max_new_tokens = max_new;   // no stop tokens: every request runs its max_new_tokens
    requests.push_back(std::move(r));
  }
  const auto V = static_cast<std::int64_t>(target.vocab_size());

  sd::DecoderOptions plain_options;
  plain_options.num_speculative_tokens = 0;
  plain_options.calibrate = false;
  sp::NoProposer none;
  const Run reference = run(none, target, requests, plain_options, batch);  // the greedy continuations (and a warm-up)

  fmt::print(stderr, "bench_synthetic: {} prompt(s), {} tokens each, {}, {} threads, load average at start: {}\n",
             requests.size(), max_new, batch ? "one batch" : "one at a time", threads, [] {
               std::ifstream f("/proc/loadavg");
               std::string a, b, c;
               f >> a >> b >> c;
               return a + " " + b + " " + c;
             }());
  fmt::print("| alpha | g | tau | theory tau | r | speedup | theory | speedup / theory |\n|---|---|---|---|---|---|---|---|\n");
  nlohmann::json points = nlohmann::json::array();
  bool identical = true;
  for (double alpha : alphas) {
    std::vector<std::pair<std::string, int>> configs;
    for (int g : gs) configs.emplace_back(std::to_string(g), g);
    configs.emplace_back("adaptive", max_g);
    for (const auto& [label, g] : configs) {
      const Run base = run(none, target, requests, plain_options, batch);
      sp::SyntheticProposer synthetic(V, alpha, 7);
      for (std::size_t i = 0; i < requests.size(); ++i) synthetic.set_reference(requests[i].prompt, reference.tokens[i]);
      sd::DecoderOptions o;
      o.num_speculative_tokens = g;
      o.calibrate = false;
      o.adaptive.enabled = label == "adaptive";
      const Run spec = run(synthetic, target, requests, o, batch);
      identical &= spec.tokens == reference.tokens;
      const double speedup = spec.tokens_per_second / base.tokens_per_second;
      const double r = spec.verify_seconds > 0 ? spec.verify_seconds / base.one_token_seconds : 1.0;
      const double c = spec.draft_position_seconds / base.one_token_seconds;
      const int g_theory = label == "adaptive" ? static_cast<int>(std::lround(spec.mean_gamma)) : g;
      const double theory_tau = specdec::theory::expected_tokens_per_step(alpha, g_theory);
      const double theory = g_theory == 0 ? 1.0 : specdec::theory::walltime_improvement(alpha, g_theory, c, r);
      fmt::print("| {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f}x | {} | {} |\n", alpha, label == "adaptive"
                     ? fmt::format("adaptive (<= {}; mean {:.1f}, {:.0f}% drafting)", max_g, spec.mean_gamma,
                                   100 * spec.drafting_fraction)
                     : label,
                 spec.tau, theory_tau, r, speedup, label == "adaptive" ? "-" : fmt::format("{:.2f}x", theory),
                 label == "adaptive" ? "-" : fmt::format("{:.2f}", speedup / theory));
      std::fflush(stdout);
      points.push_back({{"alpha", alpha}, {"g", label}, {"tau", spec.tau}, {"theory_tau", theory_tau}, {"r", r}, {"c", c},
                        {"speedup", speedup}, {"theory", theory}, {"tokens_per_second", spec.tokens_per_second},
                        {"baseline_tokens_per_second", base.tokens_per_second}, {"mean_gamma", spec.mean_gamma},
                        {"drafting_step_fraction", spec.drafting_fraction}, {"acceptance_rate", spec.acceptance}});
    }
  }
  fmt::print(stderr, "bench_synthetic: outputs identical to plain decoding: {}\n", identical ? "yes" : "NO");
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << nlohmann::json{{"model", fs::path(model).filename().string()}, {"max_new_tokens", max_new}, {"threads", threads},
                        {"batch", batch}, {"prompts", requests.size()}, {"outputs_identical", identical},
                        {"points", points}}
             .dump(2)
      << "\n";
  }
  return identical ? 0 : 1;
} catch (const std::exception& e) {
  fmt::print(stderr, "bench_synthetic: error: {}\n", e.what());
  return 1;
}
