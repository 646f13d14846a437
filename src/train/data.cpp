// specdec::train — Training data from the target: self-distilled answers with stored features and top-k distributions, and the EAGLE-3 fused features. (see specdec/train/data.hpp)
#include "specdec/train/data.hpp"

namespace specdec::train {

DataStats generate_records(models::LlamaModel& target, const std::vector<std::vector<std::int32_t>>& prompts,
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

}  // namespace specdec::train
