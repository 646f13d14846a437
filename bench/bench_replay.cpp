// bench_replay: draft-length policies and lookup proposers compared on a real model's real outputs without timing noise.
//
// 1. Records each prompt's plain greedy continuation on the model (SpeculativeDecoder with no proposer).
// 2. Profiles the model's verification cost once (decoder/cost_profile.hpp; or takes --profile), in 1-row forwards.
// 3. Replays every configuration against the recordings (decoder/replay.hpp): the real decoder, proposer and policy run
//    their real steps, each target forward is charged its profiled cost, and each draft position c 1-row forwards
//    (--draft-cost). A configuration's modelled speedup on a prompt is tokens / charged cost (plain decoding: 1 a token).
//    Every replay must emit the recording (greedy output equals plain decoding); a mismatch is an error.
// Configurations, per proposer or chain (--proposers suffix,ngram,suffix+draft: members of a chain joined by +; draft =
// the bundled draft model, charged --draft-model-cost a position, lookups --draft-cost): fixed g = 1 .. G; the adaptive
// policy (the CLI's default, costs from the profile); and the ceiling: g = G, the lookups drafting as far as they reach
// (suffix: no node budget, no path-probability floor), each step's drafts cut to the prefix the target accepts, known
// in advance (an oracle no length policy can beat with those drafts and this cost profile; a draft model is still
// charged every position it drafted before the cut).
//
//   bench_replay [--model GGUF] [--prompts JSONL] [--g 8] [--max-new-tokens 128] [--threads 0]
//                [--profile "1 1.1 1.3 ..."] [--draft-cost 0.002] [--draft-model DIR] [--draft-model-cost 0.15]
//                [--proposers suffix,ngram] [--json OUT] [--acceptance-decay 0.9] [--save-recordings JSONL] [--cut-lookups 1|0]
//                [--charged-profile "..." (forwards charged this, the policy told --profile: its error's cost)]
//                [--suffix-alpha 1] [--suffix-min-match 1] [--suffix-min-prob 0.1] [--suffix-width 1 (4: trees)]
//                [--trace JSONL]
// REPLAY_TIMING=1 prints each replay's proposer time a call. --trace writes the adaptive policy's steps, one JSON line
// each (configuration, prompt, drafts proposed, how far the recording matched them, drafts verified, accepted), and
// prints per configuration the draft rows it verified past the accepted ones and the matched drafts it left unverified:
// where a policy loses against the ceiling. With the suffix proposer each line also has the length of the suffix match
// behind the proposal ("match"), and a table per configuration gives P(the recording continues a proposal >= i drafts |
// its match length): how much the match length tells a policy about a proposal.
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/decoder/cost_profile.hpp"
#include "specdec/decoder/replay.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/models/chat_template.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/prompt_file.hpp"
#include "specdec/models/tokenizer.hpp"
#include "specdec/proposers/draft_model.hpp"
#include "specdec/proposers/ngram.hpp"
#include "specdec/proposers/proposer_chain.hpp"
#include "specdec/proposers/suffix.hpp"

namespace {

namespace sd = specdec::decoder;
namespace sm = specdec::models;
namespace sp = specdec::proposers;
namespace fs = std::filesystem;
using Tokens = std::vector<std::int64_t>;

struct Args {
  std::string model = std::string(SPECDEC_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string prompts = std::string(SPECDEC_SOURCE_DIR) + "/examples/prompts/demo.jsonl";
  int g = 8;
  int max_new_tokens = 128;
  int threads = 0;
  std::string profile;
  // c of the lookups: a suffix or n-gram lookup takes 1-7 us a call here (REPLAY_TIMING=1 prints it) against a 2.6 ms
  // 1-row forward, so 0.002 of a forward a draft position is an upper bound
  double draft_cost = 0.002;
  double draft_model_cost = 0.15;  // c of the bundled draft model (specdec-generate's measured default)
  double acceptance_decay = sd::AdaptiveSpeculation{}.acceptance_decay;
  std::string save_recordings;
  bool cut_lookups = sd::AdaptiveSpeculation{}.cut_lookups;
  std::string charged_profile;  // what forwards are charged, when it differs from what the policy was told (--profile)  // JSONL: name, prompt token ids, output token ids (tests/decoder/data/ keeps one)
  std::string draft_model = std::string(SPECDEC_SOURCE_DIR) + "/models/smollm2-135m-draft";
  std::string proposers = "suffix,ngram";
  std::string json;
  std::string trace;
  sp::SuffixOptions suffix = [] {  // the CLI's defaults (chains without --tree)
    sp::SuffixOptions so;
    so.max_width = 1;
    return so;
  }();
};

[[noreturn]] void usage(const std::string& why) {
  fmt::print(stderr, "bench_replay: {}\nusage: bench_replay [--model GGUF] [--prompts JSONL] [--g 8] [--max-new-tokens 128] "
                     "[--threads 0] [--profile \"1 1.1 ...\"] [--draft-cost 0.002] [--draft-model DIR] [--draft-model-cost 0.15] "
                     "[--proposers suffix,ngram,suffix+draft] [--json OUT] [--acceptance-decay 0.9] [--save-recordings JSONL] "
                     "[--cut-lookups 1|0] [--charged-profile \"...\"] [--suffix-alpha 1] [--suffix-min-match 1] [--suffix-min-prob 0.1] [--suffix-width 1] [--trace JSONL]\n",
             why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage("missing value after " + k);
    const std::string v = argv[++i];
    try {
      if (k == "--model") a.model = v;
      else if (k == "--prompts") a.prompts = v;
      else if (k == "--g") a.g = std::stoi(v);
      else if (k == "--max-new-tokens") a.max_new_tokens = std::stoi(v);
      else if (k == "--threads") a.threads = std::stoi(v);
      else if (k == "--profile") a.profile = v;
      else if (k == "--draft-cost") a.draft_cost = std::stod(v);
      else if (k == "--draft-model-cost") a.draft_model_cost = std::stod(v);
      else if (k == "--draft-model") a.draft_model = v;
      else if (k == "--acceptance-decay") a.acceptance_decay = std::stod(v);
      else if (k == "--save-recordings") a.save_recordings = v;
      else if (k == "--cut-lookups") a.cut_lookups = v != "0";
      else if (k == "--charged-profile") a.charged_profile = v;
      else if (k == "--proposers") a.proposers = v;
      else if (k == "--json") a.json = v;
      else if (k == "--trace") a.trace = v;
      else if (k == "--suffix-alpha") a.suffix.tokens_per_match_token = std::stod(v);
      else if (k == "--suffix-min-match") a.suffix.min_match = std::stoi(v);
      else if (k == "--suffix-min-prob") a.suffix.min_path_probability = std::stod(v);
      else if (k == "--suffix-width") a.suffix.max_width = std::stoi(v);
      else usage("unknown option " + k);
    } catch (const std::logic_error&) {
      usage("bad value '" + v + "' for " + k);
    }
  }
  if (a.g < 1 || a.g > 32) usage("--g: expected in [1, 32]");
  if (a.max_new_tokens < 1) usage("--max-new-tokens: expected >= 1");
  if (!(a.draft_cost >= 0)) usage("--draft-cost: expected >= 0");
  return a;
}

/// One step of a traced replay (one request per replay): its proposal's depth, how far the recording continued it, and
/// the drafts the step verified and accepted; with the suffix proposer, the length of the suffix match behind the
/// proposal (-1: none reported).
struct TracedStep {
  std::int64_t proposed = 0, matched = 0, verified = 0, accepted = 0, match = -1;
};

/// The traced steps' proposals by the length of the suffix match behind them (classes 1, 2, 3-4, 5-8, 9+): per draft
/// position i, the fraction of the proposals at least i deep that the recording continued at least i drafts (n: how
/// many were that deep), over every prompt of a configuration. Nothing when no step has a match length.
template <class Traces>
void print_match_table(const Traces& traces, std::int32_t g) {
  constexpr std::int64_t kClasses = 5;
  static constexpr const char* kNames[kClasses] = {"1", "2", "3-4", "5-8", "9+"};
  auto class_of = [](std::int64_t m) -> std::int64_t { return m <= 1 ? 0 : m == 2 ? 1 : m <= 4 ? 2 : m <= 8 ? 3 : 4; };
  std::map<std::string, std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>>> by;  // config: [class][i-1]
  for (const auto& t : traces)
    for (const TracedStep& x : t.steps) {
      if (x.match <= 0 || x.proposed <= 0) continue;
      auto& c = by[t.config];
      if (c.empty()) c.assign(kClasses, std::vector<std::pair<std::int64_t, std::int64_t>>(static_cast<std::size_t>(g)));
      auto& row = c[static_cast<std::size_t>(class_of(x.match))];
      for (std::int64_t i = 1; i <= std::min<std::int64_t>(x.proposed, g); ++i) {
        ++row[static_cast<std::size_t>(i - 1)].second;
        if (x.matched >= i) ++row[static_cast<std::size_t>(i - 1)].first;
      }
    }
  for (const auto& [config, c] : by) {
    fmt::print("\n{}: P(the recording continues the proposal >= i drafts | suffix match length), proposals >= i deep\n", config);
    std::string head = "| match |", rule = "|---|";
    for (std::int32_t i = 1; i <= g; ++i) head += fmt::format(" i = {} |", i), rule += "---|";
    fmt::print("{}\n{}\n", head, rule);
    for (std::int64_t k = 0; k < kClasses; ++k) {
      std::string row = fmt::format("| {} |", kNames[k]);
      for (const auto& [hit, n] : c[static_cast<std::size_t>(k)])
        row += n == 0 ? std::string(" - |") : fmt::format(" {:.2f} ({}) |", static_cast<double>(hit) / static_cast<double>(n), n);
      fmt::print("{}\n", row);
    }
  }
}

/// A proposer as the replay runs it: counts sequential draft positions (the drafting cost), and as the ceiling cuts each
/// step's drafts to the prefix (a tree: the path) the recording continues with. With a recording to trace against, it
/// keeps each step's TracedStep.
template <class P>
class Metered {
 public:
  static constexpr bool supports_trees = sp::supports_trees<P>;
  Metered(P& p, const sd::ReplayTarget* oracle) : p_(&p), oracle_(oracle) {}
  bool drafts_are_lookups() const {
    if constexpr (sp::has_lookup_drafts<P>) return p_->drafts_are_lookups();
    return false;
  }
  void begin_request(const sp::RequestContext& c) { p_->begin_request(c); }
  void end_request(sp::RequestId id) { p_->end_request(id); }
  void observe(std::span<const sp::StepFeedback> f) {
    const auto t0 = std::chrono::steady_clock::now();
    p_->observe(f);
    observe_.add(t0);
    if (traced_ != nullptr && !f.empty()) {  // a step without a proposal proposed nothing
      pending_.verified = f[0].num_drafts;
      pending_.accepted = f[0].num_accepted;
      steps_.push_back(pending_);
      pending_ = {};
    }
  }
  /// Keep a TracedStep a step against `recording` (the replay target, whose continuation of a context is the recording's).
  void trace(const sd::ReplayTarget* recording) { traced_ = recording; }
  /// Where a traced step's match length comes from (request id -> length; empty: none).
  void trace_match(std::function<std::int64_t(sp::RequestId)> fn) { match_of_ = std::move(fn); }
  const std::vector<TracedStep>& traced_steps() const { return steps_; }
  sp::DraftBatch propose(std::span<const sp::ProposeRequest> rs) {
    const auto t0 = std::chrono::steady_clock::now();
    sp::DraftBatch d = p_->propose(rs);
    propose_.add(t0);
    std::int32_t depth = 0;
    for (std::int64_t b = 0; b < d.num_requests(); ++b)
      for (const std::int32_t x : sd::detail::draft_depths(d, b)) depth = std::max(depth, x);
    positions_ += static_cast<double>(depth);
    if (traced_ != nullptr && d.num_requests() > 0) {
      const auto depths = sd::detail::draft_depths(d, 0);
      pending_.proposed = depths.empty() ? 0 : *std::max_element(depths.begin(), depths.end());
      pending_.matched = sd::detail::matched_depth(d, 0, traced_->continuation(rs[0].context));
      if (match_of_) pending_.match = match_of_(rs[0].id);
    }
    if (!oracle_) return d;
    // The ceiling: what the target accepts of each request's drafts, known in advance (a tree: its one right path).
    sp::DraftBatch cut;
    cut.cu_num_drafts.push_back(0);
    for (std::int64_t b = 0; b < d.num_requests(); ++b) {
      const auto next = oracle_->continuation(rs[static_cast<std::size_t>(b)].context);
      const auto m = static_cast<std::size_t>(sd::detail::matched_depth(d, b, next));
      if (m == 0) ++empty_;
      cut.append(next.first(m));
    }
    return cut;
  }
  double positions() const { return positions_; }
  bool oracle() const { return oracle_ != nullptr; }
  /// Ceiling: steps whose cut drafts were empty (the step emits one token).
  std::int64_t empty_steps() const { return empty_; }
  /// Wall time in the proposer's propose and observe (REPLAY_TIMING=1 prints it a call).
  struct Timing {
    double seconds = 0;
    std::int64_t calls = 0;
    void add(std::chrono::steady_clock::time_point t0) {
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++calls;
    }
    double us_per_call() const { return 1e6 * seconds / static_cast<double>(std::max<std::int64_t>(calls, 1)); }
  };
  const Timing& propose_timing() const { return propose_; }
  const Timing& observe_timing() const { return observe_; }

 private:
  P* p_;
  const sd::ReplayTarget* oracle_;
  double positions_ = 0;
  std::int64_t empty_ = 0;
  Timing propose_, observe_;
  const sd::ReplayTarget* traced_ = nullptr;
  TracedStep pending_;
  std::vector<TracedStep> steps_;
  std::function<std::int64_t(sp::RequestId)> match_of_;
};


struct Outcome {
  double speedup = 0;  // tokens / (charged forwards + draft positions x c)
  std::int64_t steps = 0;
  std::int64_t one_token_steps = -1;  // the ceiling's steps without an accepted draft (-1: not known)
};

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  at::set_num_threads(1);
  sm::LlamaOptions lo;
  lo.num_threads = a.threads;
  sm::LlamaModel model = sm::load_llama_gguf(a.model, lo);
  const sm::GgufFile gguf(a.model);
  const sm::Tokenizer tokenizer = sm::Tokenizer::from_gguf(gguf);
  const auto chat = sm::ChatTemplate::from_gguf(gguf);
  const std::vector<std::string> texts = sm::read_prompt_file(a.prompts);
  std::vector<std::string> names;  // a JSONL line's "name", else p<i>
  {
    std::ifstream in(a.prompts);
    for (std::string line; std::getline(in, line);) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      std::string name = fmt::format("p{}", names.size());
      if (line.front() == '{') {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("name") && j["name"].is_string()) name = j["name"].get<std::string>();
      }
      names.push_back(name);
    }
    names.resize(texts.size(), "p");
  }
  std::vector<sd::GenerationRequest> requests;
  for (const auto& text : texts) {
    sd::GenerationRequest r;
    const std::vector<sm::ChatMessage> msgs = {{"user", text}};
    const auto ids = tokenizer.encode(chat.apply(msgs, /*add_generation_prompt=*/true), {.add_special = true, .parse_special = true});
    r.prompt.assign(ids.begin(), ids.end());
    r.params.temperature = 0.0f;
    r.max_new_tokens = a.max_new_tokens;
    for (const std::int32_t id : tokenizer.end_of_generation_ids())
      if (id < model.vocab_size()) r.stop_token_ids.push_back(id);
    requests.push_back(std::move(r));
  }

  // 1. the recordings
  std::vector<Tokens> outputs;
  {
    sp::NoProposer none;
    sd::DecoderOptions o;
    o.num_speculative_tokens = 0;
    o.calibrate = false;
    sd::SpeculativeDecoder dec(none, model, o);
    for (const auto& r : requests) outputs.push_back(dec.generate(std::span<const sd::GenerationRequest>(&r, 1))[0].tokens);
  }
  if (!a.save_recordings.empty()) {
    std::ofstream out(a.save_recordings);
    for (std::size_t i = 0; i < requests.size(); ++i)
      out << nlohmann::json{{"name", names[i]}, {"prompt", requests[i].prompt}, {"output", outputs[i]}}.dump() << "\n";
    if (!out) throw std::runtime_error("cannot write " + a.save_recordings);
  }
  // 2. the cost profile, in 1-row forwards
  std::vector<double> profile;
  if (!a.profile.empty()) {
    std::istringstream in(a.profile);
    for (double x; in >> x;) profile.push_back(x);
    if (profile.empty() || !(profile[0] > 0)) usage("--profile: expected positive numbers, 1 row first");
  } else {
    profile = sd::profile_forward_seconds(model, a.g + 1);
  }
  const double one_row = profile.front();
  for (double& x : profile) x /= one_row;
  const sd::ForwardCostFn cost = sd::forward_cost_from_profile(profile);
  std::string ratios;
  for (double x : profile) ratios += fmt::format(" {:.2f}", x);
  fmt::print("bench_replay: {} prompt(s), g <= {}, verification cost (1..{} rows, in 1-row forwards):{}, draft position "
             "{:.3f}\n",
             requests.size(), a.g, profile.size(), ratios, a.draft_cost);

  // 3. the replays
  sd::ForwardCostFn charged = cost;
  if (!a.charged_profile.empty()) {
    std::vector<double> cp;
    std::istringstream in(a.charged_profile);
    for (double x; in >> x;) cp.push_back(x);
    if (cp.empty() || !(cp[0] > 0)) usage("--charged-profile: expected positive numbers, 1 row first");
    const double c0 = cp.front();
    for (double& x : cp) x /= c0;
    charged = sd::forward_cost_from_profile(cp);
  }
  sd::ReplayTarget replay(model.vocab_size(), charged);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    Tokens s = requests[i].prompt;
    s.insert(s.end(), outputs[i].begin(), outputs[i].end());
    replay.add_script(s);
  }
  auto replay_one = [&](auto& proposer, const sd::DecoderOptions& o, std::size_t i) {
    replay.reset_counters();
    sd::DecoderOptions opt = o;
    opt.calibrate = false;
    sd::SpeculativeDecoder dec(proposer, replay, opt);
    const auto res = dec.generate(std::span<const sd::GenerationRequest>(&requests[i], 1));
    if (res[0].tokens != outputs[i])
      throw std::runtime_error(fmt::format("prompt {}: the replay emitted other tokens than the recording", names[i]));
    return Outcome{0.0, replay.forwards(), proposer.oracle() ? proposer.empty_steps() : -1};
  };
  std::vector<std::string> config_names;
  std::vector<std::vector<Outcome>> table;  // [config][prompt]
  auto run_config = [&](const std::string& name, const std::function<Outcome(std::size_t)>& one) {
    config_names.push_back(name);
    table.emplace_back();
    for (std::size_t i = 0; i < requests.size(); ++i) table.back().push_back(one(i));
  };
  struct Trace {
    std::string config, prompt;
    std::vector<TracedStep> steps;
  };
  std::vector<Trace> traces;  // --trace: the adaptive configurations' steps, per prompt
  std::optional<sm::LlamaModel> draft_model;  // loaded when a configuration names `draft`
  std::stringstream ps(a.proposers);
  for (std::string pname; std::getline(ps, pname, ',');) {
    std::vector<std::string> members;  // a chain's members in priority order (`suffix+draft`)
    for (std::size_t begin = 0; begin <= pname.size();) {
      const std::size_t end = std::min(pname.find('+', begin), pname.size());
      members.push_back(pname.substr(begin, end - begin));
      begin = end + 1;
    }
    double max_c = 0;
    for (const auto& m : members) {
      if (m != "suffix" && m != "ngram" && m != "draft") usage("--proposers: unknown proposer " + m);
      max_c = std::max(max_c, m == "draft" ? a.draft_model_cost : a.draft_cost);
      if (m == "draft" && !draft_model) {
        sm::LlamaOptions dlo = lo;
        dlo.quantize_float_weights = true;  // the CLI's default --draft-weights q8_0
        draft_model.emplace(sm::load_llama_safetensors(a.draft_model, dlo));
      }
    }
    // The members, each metered at its own cost per draft position, in a chain (one member: the chain passes its drafts
    // through); the ceiling cuts the chain's drafts.
    auto make_and_run = [&](const sd::DecoderOptions& o, bool oracle, std::size_t i) -> Outcome {
      std::optional<sp::SuffixProposer> suffix;
      std::optional<sp::NgramProposer> ngram;
      std::optional<sp::DraftModelProposer<sm::LlamaModel>> dp;
      std::optional<Metered<sp::SuffixProposer>> m_suffix;
      std::optional<Metered<sp::NgramProposer>> m_ngram;
      std::optional<Metered<sp::DraftModelProposer<sm::LlamaModel>>> m_dp;
      sp::ProposerChain chain;
      for (const auto& m : members) {
        if (m == "suffix") {
          sp::SuffixOptions so = a.suffix;
          if (oracle) {  // the tries' whole reach: no node budget or probability floor, the oracle cuts instead
            so.tokens_per_match_token = 1e6;
            so.min_path_probability = 0.0;
          }
          chain.add(m_suffix.emplace(suffix.emplace(so), nullptr), m);
        } else if (m == "ngram") {
          chain.add(m_ngram.emplace(ngram.emplace(), nullptr), m);
        } else {
          chain.add(m_dp.emplace(dp.emplace(*draft_model, model.vocab_size()), nullptr), m);
        }
      }
      Metered<sp::ProposerChain> top(chain, oracle ? &replay : nullptr);
      const bool traced = !a.trace.empty() && o.adaptive.enabled && !oracle;
      if (traced) top.trace(&replay);
      if (traced && suffix) top.trace_match([&](sp::RequestId id) { return std::int64_t{suffix->last_match_length(id)}; });
      Outcome out = replay_one(top, o, i);
      if (traced) traces.push_back({fmt::format("{} adaptive", pname), names[i], top.traced_steps()});
      if (std::getenv("REPLAY_TIMING"))
        fmt::print(stderr, "{}: propose {:.1f} us/call over {} calls, observe {:.1f} us/call\n", pname,
                   top.propose_timing().us_per_call(), top.propose_timing().calls, top.observe_timing().us_per_call());
      const double positions = (m_suffix ? m_suffix->positions() : 0.0) + (m_ngram ? m_ngram->positions() : 0.0);
      const double charged = replay.modelled_seconds() + a.draft_cost * positions +
                             a.draft_model_cost * (m_dp ? m_dp->positions() : 0.0);
      out.speedup = static_cast<double>(outputs[i].size()) / charged;
      return out;
    };
    for (int g = 1; g <= a.g; ++g) {
      sd::DecoderOptions o;
      o.num_speculative_tokens = g;
      run_config(fmt::format("{} g={}", pname, g), [&](std::size_t i) { return make_and_run(o, false, i); });
    }
    sd::DecoderOptions ad;
    ad.num_speculative_tokens = a.g;
    ad.adaptive.enabled = true;
    ad.adaptive.forward_seconds = cost;
    ad.adaptive.draft_seconds_per_position = max_c;  // the CLI's d: a chain's costliest member
    ad.adaptive.acceptance_decay = a.acceptance_decay;
    ad.adaptive.cut_lookups = a.cut_lookups;
    run_config(fmt::format("{} adaptive", pname), [&](std::size_t i) { return make_and_run(ad, false, i); });
    sd::DecoderOptions orc;
    orc.num_speculative_tokens = a.g;
    run_config(fmt::format("{} ceiling", pname), [&](std::size_t i) { return make_and_run(orc, true, i); });
  }

  // 4. the table: modelled speedup over plain decoding per prompt, and the geometric mean
  std::string head = fmt::format("| configuration |");
  std::string rule = "|---|";
  for (const auto& n : names) head += fmt::format(" {} |", n), rule += "---|";
  head += " geometric mean |";
  rule += "---|";
  fmt::print("{}\n{}\n", head, rule);
  std::ostringstream js;
  js << "{\"profile\": [";
  for (std::size_t i = 0; i < profile.size(); ++i) js << (i ? ", " : "") << profile[i];
  js << "], \"draft_cost\": " << a.draft_cost << ", \"tokens\": [";
  for (std::size_t i = 0; i < outputs.size(); ++i) js << (i ? ", " : "") << outputs[i].size();
  js << "], \"prompts\": [";
  for (std::size_t i = 0; i < names.size(); ++i) js << (i ? ", " : "") << '"' << names[i] << '"';
  js << "], \"configurations\": {";
  for (std::size_t c = 0; c < table.size(); ++c) {
    std::string row = fmt::format("| {} |", config_names[c]);
    double logsum = 0;
    js << (c ? ", " : "") << '"' << config_names[c] << "\": [";
    for (std::size_t i = 0; i < table[c].size(); ++i) {
      const Outcome& t = table[c][i];
      row += t.one_token_steps >= 0 ? fmt::format(" {:.3f}x ({} steps, {} of one token) |", t.speedup, t.steps, t.one_token_steps)
                                    : fmt::format(" {:.3f}x ({} steps) |", t.speedup, t.steps);
      logsum += std::log(table[c][i].speedup);
      js << (i ? ", " : "") << table[c][i].speedup;
    }
    js << "]";
    row += fmt::format(" {:.3f}x |", std::exp(logsum / static_cast<double>(table[c].size())));
    fmt::print("{}\n", row);
  }
  js << "}}\n";
  if (!a.trace.empty()) {
    std::ofstream out(a.trace);
    std::map<std::string, std::pair<std::int64_t, std::int64_t>> lost;  // config: rows verified past acceptance, left
    std::map<std::string, std::int64_t> steps;
    for (const Trace& t : traces)
      for (const TracedStep& x : t.steps) {
        nlohmann::json line{{"config", t.config}, {"prompt", t.prompt}, {"proposed", x.proposed}, {"matched", x.matched},
                            {"verified", x.verified}, {"accepted", x.accepted}};
        if (x.match >= 0) line["match"] = x.match;
        out << line.dump() << "\n";
        lost[t.config].first += x.verified - x.accepted;
        lost[t.config].second += std::max<std::int64_t>(x.matched - x.verified, 0);
        ++steps[t.config];
      }
    if (!out) throw std::runtime_error("cannot write " + a.trace);
    for (const auto& [config, l] : lost)
      fmt::print("trace: {}: {} steps, {} draft rows verified past the accepted ones, {} matched drafts left unverified\n",
                 config, steps[config], l.first, l.second);
    print_match_table(traces, a.g);
  }
  if (!a.json.empty()) {
    std::ofstream out(a.json);
    out << js.str();
    if (!out) throw std::runtime_error("cannot write " + a.json);
  }
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "bench_replay: {}\n", e.what());
  return 1;
}
