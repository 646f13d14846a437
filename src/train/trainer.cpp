// specdec::train — The training loop (AdamW, warm-up, clipping, resumable checkpoints) and the EAGLE / draft trainers on top of it. (see specdec/train/trainer.hpp)
#include "specdec/train/trainer.hpp"

namespace specdec::train {

torch::Tensor feature_rms(const std::vector<Record>& data, std::int64_t block) {
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

std::pair<std::vector<std::int64_t>, double> frequent_argmax_tokens(const std::vector<Record>& data, std::int64_t vocab,
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

TrainResult train_eagle(EagleTrainable& m, const std::vector<Record>& data, const TrainOptions& o) {
  m.set_requires_grad();
  const torch::Tensor noise = o.noise * feature_rms(data, m.shape.H);
  return train_loop(m.parameters(), data, o, [&](const Record& r, std::mt19937_64& rng) {
    auto L = eagle_loss(m, r, o.max_len, noise, o.ce_fraction, rng, o.ttt_steps, o.ttt_weight, o.answers_only, o.ce_weight);
    return std::tuple<torch::Tensor, std::int64_t, double>(L.total, L.rows, L.top1);
  }, "eagle");
}

namespace {
// The head's unrolled draft steps over record r, teacher-forced on its first max_len + 1 tokens: outs[k] ([n, H]) is
// draft step k + 1, row i predicting token i + 2 (n = 0: the record is too short); rows from first_answer_row on
// predict answer tokens.
struct HeadSteps {
  std::vector<torch::Tensor> outs;
  std::int64_t n = 0, first_answer_row = 0;
};
HeadSteps head_steps(const EagleTrainable& m, const Record& r, std::int64_t max_len, int steps) {
  HeadSteps h;
  const std::int64_t T = std::min<std::int64_t>(static_cast<std::int64_t>(r.tokens.size()), max_len + 1);
  h.n = T - 1;
  if (h.n < steps) return {};
  auto tokens = torch::from_blob(const_cast<std::int32_t*>(r.tokens.data()), {T}, torch::kInt).to(torch::kLong);
  auto feats = r.features.narrow(0, 0, h.n).to(torch::kFloat);
  h.outs = m.forward_steps(tokens.narrow(0, 1, h.n), feats, steps);
  h.first_answer_row = std::max<std::int64_t>(0, r.prompt_length - 2);
  return h;
}
}  // namespace

EagleStepStats eagle_step_stats(const EagleTrainable& m, const std::vector<Record>& data, int steps, std::int64_t max_len,
                                bool answers_only, int bins) {
  torch::NoGradGuard ng;
  EagleStepStats st;
  const auto K = static_cast<std::size_t>(steps);
  st.accuracy.assign(K, 0.0);
  st.bin_rows.assign(K, std::vector<double>(static_cast<std::size_t>(bins), 0.0));
  st.bin_hits = st.bin_rows;
  st.bin_confidence = st.bin_rows;
  std::vector<double> hit(K, 0.0), rows(K, 0.0);
  for (const auto& r : data) {
    const HeadSteps h = head_steps(m, r, max_len, steps);
    const std::int64_t n = h.n, first_answer_row = h.first_answer_row;
    if (n == 0) continue;
    const auto& outs = h.outs;
    auto want = r.topk_ids.narrow(0, 1, n).select(1, 0).to(torch::kLong);
    for (int k = 1; k <= steps; ++k) {
      const auto kk = static_cast<std::size_t>(k - 1);
      const std::int64_t b = std::max<std::int64_t>(k - 1, answers_only ? first_answer_row : 0);
      if (b >= n) continue;
      auto logits = m.logits(outs[kk].narrow(0, b, n - b));
      auto [top, am] = torch::softmax(logits, -1).max(-1);
      if (m.draft_ids.defined()) am = m.draft_ids.index({am});
      auto ok = am.eq(want.narrow(0, b, n - b));
      hit[kk] += ok.sum().item<double>();
      rows[kk] += static_cast<double>(n - b);
      if (bins > 0) {
        const auto top_a = top.contiguous();
        const auto ok_a = ok.contiguous();
        const float* tp = top_a.data_ptr<float>();
        const bool* op = ok_a.data_ptr<bool>();
        for (std::int64_t i = 0; i < n - b; ++i) {
          const auto bin = static_cast<std::size_t>(std::min<double>(bins - 1, std::floor(tp[i] * bins)));
          st.bin_rows[kk][bin] += 1;
          st.bin_hits[kk][bin] += op[i] ? 1 : 0;
          st.bin_confidence[kk][bin] += tp[i];
        }
      }
    }
  }
  for (std::size_t k = 0; k < K; ++k) st.accuracy[k] = rows[k] > 0 ? hit[k] / rows[k] : 0.0;
  return st;
}

std::vector<EagleSampledOverlap> eagle_sampled_overlap(const EagleTrainable& m, const std::vector<Record>& data,
                                                       std::int64_t max_len, bool answers_only,
                                                       const std::vector<double>& temperatures,
                                                       const std::vector<double>& scales) {
  torch::NoGradGuard ng;
  std::vector<EagleSampledOverlap> out(temperatures.size());
  for (auto& o : out) o.mean_top.assign(scales.size(), 0.0);
  double rows = 0;
  for (const auto& r : data) {
    const HeadSteps h = head_steps(m, r, max_len, 1);  // one head forward a record, for every temperature
    const std::int64_t n = h.n, b = answers_only ? h.first_answer_row : 0;
    if (n == 0 || b >= n) continue;
    auto z = m.logits(h.outs[0].narrow(0, b, n - b));  // [R, Vd]
    auto pk = r.topk_probs.narrow(0, 1 + b, n - b).to(torch::kFloat).clamp_min(1e-30);
    auto ids = r.topk_ids.narrow(0, 1 + b, n - b).to(torch::kLong);
    // Where the target's top-k ids sit in the head's vocabulary (-1: not in its draft vocabulary).
    auto local = m.draft_ids.defined() ? m.t2d_index.index({ids}) : ids;
    for (std::size_t t = 0; t < temperatures.size(); ++t) {
      const double T = temperatures[t];
      // The target's next-token law at T from its stored top-k (probabilities at 1): p^(1/T), renormalised over the
      // top-k (the tail beyond k carries little mass at T < 1).
      auto pt = torch::pow(pk, 1.0 / T);
      pt = pt / pt.sum(-1, true);
      auto q = torch::softmax(z / T, -1);  // the head's draft law at T, over its vocabulary
      auto qk = torch::where(local.ge(0), q.gather(1, local.clamp_min(0)), torch::zeros_like(pt));  // q at those ids
      out[t].mean_overlap += torch::minimum(pt, qk).sum().item<double>();
      for (std::size_t i = 0; i < scales.size(); ++i)
        out[t].mean_top[i] += torch::softmax(z / (T * scales[i]), -1).amax(-1).sum().item<double>();
    }
    rows += static_cast<double>(n - b);
  }
  for (auto& o : out) {
    o.rows = rows;
    if (rows > 0) {
      o.mean_overlap /= rows;
      for (auto& v : o.mean_top) v /= rows;
    }
  }
  return out;
}

std::vector<double> eagle_step_accuracy(const EagleTrainable& m, const std::vector<Record>& data, int steps, std::int64_t max_len,
                                        bool answers_only) {
  return eagle_step_stats(m, data, steps, max_len, answers_only, 0).accuracy;
}

TrainResult train_draft(DraftTrainable& m, const std::vector<Record>& data, const TrainOptions& o) {
  m.set_requires_grad();
  return train_loop(m.parameters(), data, o, [&](const Record& r, std::mt19937_64&) {
    auto L = draft_loss(m, r, o.max_len, o.answers_only);
    return std::tuple<torch::Tensor, std::int64_t, double>(L.total, L.rows, L.top1);
  }, "draft");
}

}  // namespace specdec::train
