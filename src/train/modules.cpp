// specdec::train — The trainable modules: shared Llama-block pieces, the EAGLE head (EAGLE-1 / EAGLE-3) and the distilled draft model, their losses and savers. (see specdec/train/modules.hpp)
#include "specdec/train/modules.hpp"
#include "specdec/torch/write_safetensors.hpp"

namespace specdec::train {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

std::pair<torch::Tensor, torch::Tensor> rope_tables(std::int64_t T, std::int64_t hd, double theta) {
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

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const std::int64_t half = x.size(2) / 2;
  auto a = x.narrow(2, 0, half), b = x.narrow(2, half, half);
  auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  return torch::cat({a * c - b * s, b * c + a * s}, 2);
}

BlockWeights init_block(const BlockShape& s, bool with_input_norm, std::int64_t num_layers, torch::Generator* gen) {
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

torch::Tensor block_forward(const BlockWeights& w, const BlockShape& s, const torch::Tensor& x, const torch::Tensor& cos,
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

torch::Tensor causal_mask(std::int64_t T) {
  return torch::full({T, T}, -std::numeric_limits<float>::infinity()).triu(1);
}

torch::Tensor soft_ce(const torch::Tensor& logits, const torch::Tensor& ids, const torch::Tensor& probs) {
  auto p = probs.to(torch::kFloat);
  p = p / p.sum(-1, true).clamp_min(1e-6);
  auto logq = torch::log_softmax(logits, -1).gather(1, ids.to(torch::kLong));
  return -(p * logq).sum(-1).mean();
}

VocabularyIndex vocabulary_index(std::vector<std::int64_t> ids, std::int64_t vocab, const char* who) {
  std::sort(ids.begin(), ids.end());
  if (ids.empty() || std::adjacent_find(ids.begin(), ids.end()) != ids.end() || ids.front() < 0 || ids.back() >= vocab)
    fail(fmt::format("{}: expected distinct target ids", who));
  VocabularyIndex v;
  v.ids = torch::tensor(ids, torch::kLong);
  v.t2d = torch::full({vocab}, -1, torch::kLong);
  v.t2d.index_put_({v.ids}, torch::arange(static_cast<std::int64_t>(ids.size()), torch::kLong));
  return v;
}

void to_vocabulary_columns(const torch::Tensor& t2d, torch::Tensor& ids, torch::Tensor& probs) {
  auto d = t2d.index({ids});
  probs = probs * d.ge(0).to(torch::kFloat);
  ids = d.clamp_min(0);
}

void write_safetensors_f16(const fs::path& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  models::write_tensors_safetensors(path, tensors, at::kHalf);
}

EagleLosses eagle_loss(const EagleTrainable& m, const Record& r, std::int64_t max_len, const torch::Tensor& noise, double ce_fraction,
                              std::mt19937_64& rng, int steps, double step_weight, bool answers_only, double ce_weight) {
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
  // Row i predicts token i + 2; the answer's tokens start at prompt_length. With answers_only the loss reads the rows that
  // predict answer tokens (at least the last row), as EAGLE's loss mask keeps the assistant's tokens.
  const std::int64_t loss_begin = answers_only ? std::clamp<std::int64_t>(r.prompt_length - 2, 0, n - 1) : 0;
  L.rows = n - loss_begin;
  std::vector<std::int64_t> pick;
  std::uniform_real_distribution<double> u(0, 1);
  for (std::int64_t i = loss_begin; i < n; ++i)
    if (u(rng) < ce_fraction) pick.push_back(i);
  if (pick.empty()) pick.push_back(n - 1);
  auto ids_all = r.topk_ids.narrow(0, 1, n).to(torch::kLong);
  auto probs_all = r.topk_probs.narrow(0, 1, n).to(torch::kFloat);
  if (m.t2d_index.defined()) to_vocabulary_columns(m.t2d_index, ids_all, probs_all);
  if (m.eagle3()) ce_weight = 1.0;  // EAGLE-3 trains on the cross-entropy alone
  double weight = 1.0;
  for (int k = 1; k <= static_cast<int>(preds.size()); ++k, weight *= step_weight) {
    const std::int64_t first = std::max<std::int64_t>(k - 1, loss_begin);  // rows before k - 1 have no real context at step k
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

DraftLosses draft_loss(const DraftTrainable& m, const Record& r, std::int64_t max_len, bool answers_only) {
  const std::int64_t T = std::min<std::int64_t>(static_cast<std::int64_t>(r.tokens.size()), max_len);
  auto tokens = torch::from_blob(const_cast<std::int32_t*>(r.tokens.data()), {T}, torch::kInt).to(torch::kLong);
  // Row i predicts token i + 1; with answers_only the loss reads the rows that predict the answer's tokens (at least
  // the last row).
  const std::int64_t b = answers_only ? std::clamp<std::int64_t>(r.prompt_length - 1, 0, T - 1) : 0;
  auto logits = torch::linear(m.hidden(tokens).narrow(0, b, T - b), m.output_rows());
  auto ids = r.topk_ids.narrow(0, b, T - b).to(torch::kLong);
  auto probs = r.topk_probs.narrow(0, b, T - b).to(torch::kFloat);
  auto cols = ids;
  if (m.draft_ids.defined()) to_vocabulary_columns(m.t2d_index, cols, probs);
  DraftLosses L;
  L.rows = T - b;
  L.total = soft_ce(logits, cols, probs);
  {
    torch::NoGradGuard ng;
    auto am = logits.argmax(-1);
    if (m.draft_ids.defined()) am = m.draft_ids.index({am});  // top-1 in target ids
    L.top1 = am.eq(ids.select(1, 0)).to(torch::kFloat).mean().item<double>();
  }
  return L;
}

}  // namespace specdec::train
