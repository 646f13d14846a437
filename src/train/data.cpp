// specdec::train — Training data from the target: self-distilled answers with stored features and top-k distributions, and the EAGLE-3 fused features. (see specdec/train/data.hpp)
#include "specdec/train/data.hpp"

#include <sys/resource.h>

#include <c10/util/Half.h>

#include <limits>

#include "specdec/models/detail/cpu_kernels.hpp"
#include "specdec/sampling/logits_simd.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/torch/rows.hpp"

namespace specdec::train {

namespace {

// Purpose tags of the data generator's Philox streams (counter word 3), apart from the decoder's Purpose values.
constexpr std::uint32_t kTagTemperature = 0x7e3d0001u, kTagToken = 0x7e3d0002u;

// A uniform in (0, 1) for (seed, prompt, position, tag): a record's draws depend on nothing else.
float data_uniform(std::uint64_t seed, std::size_t prompt, std::int64_t position, std::uint32_t tag) {
  const auto pr = static_cast<std::uint64_t>(prompt);
  const Philox4x32 ctr{{static_cast<std::uint32_t>(position), static_cast<std::uint32_t>(pr), static_cast<std::uint32_t>(pr >> 32), tag}};
  return bits_to_uniform(philox4x32_10(ctr, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)).v[0]);
}

double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

}  // namespace

std::vector<TemperatureShare> parse_temperature_mix(const std::string& text, const std::string& what) {
  std::vector<TemperatureShare> out;
  double total = 0;
  std::size_t a = 0;
  auto number = [&](const std::string& s, const char* part) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(s, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != s.size() || !std::isfinite(v) || v < 0)
      fail(fmt::format("{}: expected entries TEMPERATURE[:WEIGHT] with non-negative numbers, separated by commas; got {} '{}' in '{}'",
                       what, part, s, text));
    return v;
  };
  while (a <= text.size()) {
    std::size_t b = text.find(',', a);
    if (b == std::string::npos) b = text.size();
    const std::string entry = trim(text.substr(a, b - a));
    a = b + 1;
    if (entry.empty()) fail(fmt::format("{}: expected entries TEMPERATURE[:WEIGHT] separated by commas, got an empty entry in '{}'", what, text));
    const auto colon = entry.find(':');
    TemperatureShare t;
    t.temperature = number(trim(entry.substr(0, colon)), "temperature");
    if (colon != std::string::npos) t.weight = number(trim(entry.substr(colon + 1)), "weight");
    total += t.weight;
    out.push_back(t);
  }
  if (!(total > 0)) fail(fmt::format("{}: expected weights with a positive sum, got '{}'", what, text));
  return out;
}

double record_temperature(const DataOptions& o, std::size_t prompt_index) {
  std::vector<TemperatureShare> mix = o.temperatures;
  if (mix.empty()) mix = {{0, o.greedy_fraction}, {1, 1 - o.greedy_fraction}};
  double total = 0;
  for (const auto& t : mix) total += std::max(t.weight, 0.0);
  if (!(total > 0)) fail("record_temperature: the temperature mix has no positive weight");
  const double u = static_cast<double>(data_uniform(o.seed, prompt_index, 0, kTagTemperature)) * total;
  double acc = 0;
  double last = mix.front().temperature;
  for (const auto& t : mix) {
    if (t.weight <= 0) continue;
    last = t.temperature;
    if ((acc += t.weight) >= u) return t.temperature;
  }
  return last;
}

namespace detail {

std::int32_t summarise_logits_row(const float* logits, std::int64_t V, std::int64_t k, std::int32_t* ids, std::uint16_t* probs,
                                  double temperature, float u, float* scratch) {
  if (k < 1 || k > V) fail(fmt::format("summarise_logits_row: k: expected in [1, {}], got {}", V, k));
  struct Cand {
    float v;
    std::int32_t i;
  };
  const auto better = [](const Cand& a, const Cand& b) { return a.v > b.v || (a.v == b.v && a.i < b.i); };
  // Top k in one pass: candidates above the running k-th value, compacted when the buffer fills.
  thread_local std::vector<Cand> cand;
  thread_local std::vector<float> masses;
  const auto kk = static_cast<std::size_t>(k);
  const std::size_t cap = std::max<std::size_t>(4 * kk, 64);
  cand.clear();
  cand.reserve(cap);
  float thr = -std::numeric_limits<float>::infinity();
  bool full = false;
  for (std::int64_t x = 0; x < V; ++x) {
    const float v = logits[x];
    if (v > thr || (!full && v == thr)) {
      cand.push_back({v, static_cast<std::int32_t>(x)});
      if (cand.size() == cap) {
        std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(kk - 1), cand.end(), better);
        cand.resize(kk);
        thr = cand[kk - 1].v;
        full = true;
      }
    }
  }
  if (cand.size() < kk) fail(fmt::format("summarise_logits_row: fewer than {} finite logits in a row of {}", k, V));
  std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(kk), cand.end(), better);
  const float max_logit = cand[0].v;
  // Probabilities at temperature 1: exp(l - max) / sum, the weights and tile masses of the sampler's logits processing.
  const auto path = specdec::detail::best_logits_path();
  const std::int64_t tiles = specdec::num_tiles(V);
  masses.resize(static_cast<std::size_t>(tiles));
  auto weigh = [&](float t) {
    specdec::detail::logit_weights(path, logits, V, max_logit, t, scratch);
    specdec::detail::tile_masses(path, scratch, V, masses.data());
    double total = 0;
    for (const float m : masses) total += m;
    return total;
  };
  double total = weigh(1.0f);
  for (std::size_t j = 0; j < kk; ++j)
    probs[j] = c10::Half(static_cast<float>(static_cast<double>(scratch[cand[j].i]) / total)).x;
  for (std::size_t j = 0; j < kk; ++j) ids[j] = cand[j].i;
  if (!(temperature > 0)) return cand[0].i;
  if (temperature != 1.0) total = weigh(static_cast<float>(temperature));
  // Inverse CDF: the tile whose running mass reaches u x total, then the token inside it.
  const double target = static_cast<double>(u) * total;
  double acc = 0;
  std::int64_t t = 0;
  for (; t + 1 < tiles; ++t) {
    if (acc + masses[static_cast<std::size_t>(t)] >= target) break;
    acc += masses[static_cast<std::size_t>(t)];
  }
  const std::int64_t begin = t * specdec::kTileSize, end = std::min<std::int64_t>(V, begin + specdec::kTileSize);
  std::int64_t chosen = -1;
  for (std::int64_t x = begin; x < end; ++x) {
    if (scratch[x] <= 0) continue;
    chosen = x;
    if ((acc += scratch[x]) >= target) break;
  }
  return chosen >= 0 ? static_cast<std::int32_t>(chosen) : cand[0].i;  // rounding left the tile's mass short: its last token
}

}  // namespace detail

DataStats generate_records(models::LlamaModel& target, const std::vector<std::vector<std::int32_t>>& prompts,
                           const std::vector<std::int32_t>& stop_ids, const DataOptions& o, const RecordSink& sink, bool verbose,
                           const std::vector<bool>& skip) {
  if (o.batch < 1) fail(fmt::format("generate_records: batch: expected >= 1, got {}", o.batch));
  if (o.top_k < 1 || o.top_k > target.vocab_size())
    fail(fmt::format("generate_records: top_k: expected in [1, {}], got {}", target.vocab_size(), o.top_k));
  if (!skip.empty() && skip.size() != prompts.size())
    fail(fmt::format("generate_records: skip: expected {} entries (one per prompt) or none, got {}", prompts.size(), skip.size()));
  for (const auto& t : o.temperatures)
    if (!(t.temperature >= 0) || !(t.weight >= 0))
      fail(fmt::format("generate_records: temperatures: expected non-negative temperatures and weights, got {}:{}", t.temperature, t.weight));
  struct Active {
    std::size_t prompt = 0;
    std::int64_t slot = -1;
    double temperature = 0;
    std::int32_t prompt_length = 0;
    std::vector<std::int32_t> tokens;  // fed to the target so far (after this step's forward: including `feed`)
    std::vector<std::int32_t> feed;    // this step's new tokens
    std::vector<std::uint16_t> feats, probs;
    std::vector<std::int32_t> ids;
    std::int32_t next = -1;            // sampled from the last row, not yet fed
    std::int64_t generated = 0;
  };
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_seconds();
  const std::int64_t H = target.hidden_size(), V = target.vocab_size(), K = o.top_k;
  DataStats st;
  std::vector<Active> active;
  std::size_t next_prompt = 0;
  const std::set<std::int32_t> stops(stop_ids.begin(), stop_ids.end());
  std::size_t todo = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) todo += skip.empty() || !skip[i];
  struct Row {
    Active* a;
    std::int64_t index;  // row within the sequence's record
    bool last;
  };
  std::vector<Row> rows;
  bool stopping = false;
  double last_report = 0;
  while (true) {
    // Admit prompts into free sequences: their whole prompts join this step's forward, up to prefill_rows rows.
    std::int64_t prefill = 0;
    while (!stopping && static_cast<std::int64_t>(active.size()) < o.batch && next_prompt < prompts.size()) {
      const std::size_t i = next_prompt;
      const auto P = static_cast<std::int64_t>(prompts[i].size());
      if (!skip.empty() && skip[i]) {
        ++next_prompt;
        continue;
      }
      if (P == 0 || P > o.max_prompt_tokens) {
        ++st.skipped;
        ++next_prompt;
        continue;
      }
      if (prefill > 0 && prefill + P > o.prefill_rows) break;
      ++next_prompt;
      Active a;
      a.prompt = i;
      a.temperature = record_temperature(o, i);
      a.prompt_length = static_cast<std::int32_t>(P);
      a.feed = prompts[i];
      a.slot = target.allocate_sequence();
      prefill += P;
      st.prompt_tokens += P;
      active.push_back(std::move(a));
    }
    if (active.empty()) break;
    // One forward over every active sequence's new tokens.
    models::ForwardBatch b;
    b.cu_num_tokens.push_back(0);
    rows.clear();
    for (auto& a : active) {
      b.slots.push_back(a.slot);
      const auto base = static_cast<std::int64_t>(a.tokens.size());
      for (std::size_t j = 0; j < a.feed.size(); ++j) {
        b.token_ids.push_back(a.feed[j]);
        rows.push_back({&a, base + static_cast<std::int64_t>(j), j + 1 == a.feed.size()});
      }
      b.cu_num_tokens.push_back(static_cast<std::int64_t>(b.token_ids.size()));
      a.tokens.insert(a.tokens.end(), a.feed.begin(), a.feed.end());
      const auto T = a.tokens.size();
      a.feats.resize(T * static_cast<std::size_t>(H));
      a.ids.resize(T * static_cast<std::size_t>(K));
      a.probs.resize(T * static_cast<std::size_t>(K));
    }
    b.return_final_hidden = true;
    auto tf = Clock::now();
    const auto out = target.forward(b);
    st.forward_seconds += seconds_since(tf);
    ++st.forwards;
    // Every row: float16 features, top-k, and the next token from each sequence's last row; rows spread over the
    // model's threads.
    tf = Clock::now();
    const float* logits = out.logits.host_float32_data("data: the target's logits");
    const float* hidden = out.hidden_post_norm.host_float32_data("data: the target's hidden states");
    target.parallel_for(static_cast<std::int64_t>(rows.size()), [&](std::int64_t r) {
      thread_local std::vector<float> scratch;
      scratch.resize(static_cast<std::size_t>(V));
      const Row& row = rows[static_cast<std::size_t>(r)];
      Active& a = *row.a;
      models::detail::floats_to_halves(hidden + r * H, a.feats.data() + row.index * H, H);
      const double temp = row.last ? a.temperature : 0.0;
      const float u = row.last ? data_uniform(o.seed, a.prompt, row.index + 1, kTagToken) : 0.5f;
      const std::int32_t tok = detail::summarise_logits_row(logits + r * V, V, K, a.ids.data() + row.index * K,
                                                            a.probs.data() + row.index * K, temp, u, scratch.data());
      if (row.last) a.next = tok;
    });
    st.rows_seconds += seconds_since(tf);
    // Retire finished sequences; the others feed their sampled token next.
    tf = Clock::now();
    for (std::size_t i = 0; i < active.size();) {
      Active& a = active[i];
      if (stops.count(a.next) || a.generated >= o.max_new_tokens) {
        const auto T = static_cast<std::int64_t>(a.tokens.size());
        Record r;
        r.tokens = a.tokens;
        r.prompt_length = a.prompt_length;
        r.features = at::from_blob(a.feats.data(), {T, H}, at::kHalf);
        r.topk_ids = at::from_blob(a.ids.data(), {T, K}, at::kInt);
        r.topk_probs = at::from_blob(a.probs.data(), {T, K}, at::kHalf);
        sink(a.prompt, r);
        ++st.records;
        st.answer_tokens += a.generated;
        target.free_sequence(a.slot);
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        a.feed.assign(1, a.next);
        ++a.generated;
        ++i;
      }
    }
    st.write_seconds += seconds_since(tf);
    const double el = seconds_since(t0);
    if (!stopping && el > o.minutes * 60) stopping = true;  // no new prompts; the answers under way finish
    if (verbose && (el - last_report >= 10 || active.empty())) {
      last_report = el;
      std::int64_t live = 0;
      for (auto& a : active) live += a.generated;
      const double ans = static_cast<double>(st.answer_tokens + live), all = ans + static_cast<double>(st.prompt_tokens);
      const double frac = std::max(static_cast<double>(st.records) / static_cast<double>(std::max<std::size_t>(todo, 1)), el / (o.minutes * 60));
      fmt::print("data: {} / {} prompts done, {} prompt + {} answer tokens, {:.0f} target tok/s ({:.0f} answer tok/s), "
                 "elapsed {}, ETA {}\n",
                 st.records, todo, st.prompt_tokens, static_cast<std::int64_t>(ans), all / el, ans / el, hms(el),
                 hms(el / std::max(frac, 1e-6) - el));
      std::fflush(stdout);
    }
  }
  st.seconds = seconds_since(t0);
  st.cpu_seconds = process_cpu_seconds() - cpu0;
  return st;
}

DataStats generate_records(models::LlamaModel& target, const std::vector<std::vector<std::int32_t>>& prompts,
                           const std::vector<std::int32_t>& stop_ids, const DataOptions& o, RecordWriter& writer, bool verbose) {
  return generate_records(target, prompts, stop_ids, o, [&](std::size_t, const Record& r) { writer.write(r); }, verbose);
}

std::int64_t fuse_records(models::LlamaModel& target, const std::vector<Record>& data, const std::vector<std::int64_t>& layers,
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
    std::vector<at::Tensor> layers_out;
    for (const auto& h : out.layer_hidden) layers_out.push_back(torch::tensor_of(h));
    f.features = at::cat(layers_out, 1).to(at::kHalf);
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

}  // namespace specdec::train
