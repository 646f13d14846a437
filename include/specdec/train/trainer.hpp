// specdec::train — The training loop (AdamW, warm-up, clipping, resumable checkpoints) and the EAGLE / draft trainers on top of it.
#pragma once

#include "specdec/train/records.hpp"
#include "specdec/train/corpus.hpp"
#include "specdec/train/data.hpp"
#include "specdec/train/modules.hpp"

namespace specdec::train {

// --- the training loop ------------------------------------------------------------------------------------------------------

struct TrainOptions {
  double lr = 1e-3;
  double min_lr_ratio = 0.1;
  std::int64_t warmup_steps = 30;
  std::int64_t tokens_per_step = 2048;  // gradient accumulation over records until this many rows
  std::int64_t max_len = 640;
  double epochs = 4;
  double minutes = 12;          // wall-clock budget (the cosine schedule runs to whichever ends first: estimated)
  double sitting_minutes = 0;   // > 0: this call stops (and saves its state) after this long; the schedule is unchanged
  bool bf16 = false;            // the forward and backward matrix products in bfloat16 (autocast); parameters stay float32
  double clip = 0.5;
  double weight_decay = 0.0;
  double noise = 0.2;           // EAGLE: uniform feature noise amplitude (x feature RMS)
  double ce_fraction = 0.25;    // EAGLE: rows with the cross-entropy term
  double ce_weight = 0.1;       // EAGLE-1: the cross-entropy term's weight beside the feature regression (EAGLE-3: 1, alone)
  int ttt_steps = 1;            // EAGLE: unrolled draft steps per row (training-time test)
  double ttt_weight = 0.8;      // EAGLE: loss weight of step k is ttt_weight^(k-1)
  bool answers_only = false;    // the loss on the rows that predict answer tokens only (EAGLE's loss mask)
  std::int64_t log_every = 10;
  std::int64_t checkpoint_every = 50;
  std::uint64_t seed = 1;
  fs::path checkpoint;          // resumable state (parameters + optimizer + step); empty = none
  bool verbose = true;
  /// Every `eval_every` optimizer steps (0 = never), `on_eval(step, rows seen)` runs between steps (held-out accuracy and
  /// snapshots for a learning curve); its time counts against the wall-clock budget like the steps'.
  std::int64_t eval_every = 0;
  std::function<void(std::int64_t, std::int64_t)> on_eval;
};

struct TrainResult {
  std::int64_t steps = 0, rows = 0;
  double first_loss = 0, last_loss = 0, last_top1 = 0, seconds = 0;
  std::vector<double> step_losses;
  bool finished = true;  // false: --sitting-minutes ended this call before the schedule did (rerun to continue)
};

/// bfloat16 autocast on the CPU while alive (when `on`): matrix products run in bfloat16 with float32 accumulation, the
/// gradients reach the float32 parameters. The weight-cast cache is cleared when the guard ends.
class AutocastBf16 {
 public:
  explicit AutocastBf16(bool on) : on_(on) {
    if (!on_) return;
    was_enabled_ = at::autocast::is_cpu_enabled();
    was_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
    at::autocast::increment_nesting();
  }
  ~AutocastBf16() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(was_dtype_);
  }
  AutocastBf16(const AutocastBf16&) = delete;
  AutocastBf16& operator=(const AutocastBf16&) = delete;

 private:
  bool on_ = false, was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
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
  bool sitting_over = false;
  auto progress = [&](double el) {
    const double by_rows = static_cast<double>(rows_done) / planned_rows;
    const double by_time = el / (o.minutes * 60);
    return std::min(1.0, std::max(by_rows, by_time));
  };
  while (true) {
    const double el = elapsed_before + seconds_since(t0);
    const double frac = progress(el);
    if (frac >= 1.0) break;
    if (o.sitting_minutes > 0 && res.steps > 0 && seconds_since(t0) > o.sitting_minutes * 60) {  // at least one step a call
      sitting_over = true;
      break;
    }
    // Learning rate: linear warm-up, then cosine to min_lr_ratio over the planned budget.
    double lr = o.lr;
    if (step < o.warmup_steps) lr = o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
    else lr = o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + std::cos(M_PI * frac)));
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    opt.zero_grad();
    std::int64_t rows = 0;
    double loss_sum = 0, top1_sum = 0;
    // bfloat16 autocast for the whole step: the float32 parameters' bf16 copies are cast once and reused by every record
    // (the cache holds until the parameters change, after the step).
    const AutocastBf16 amp(o.bf16);
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
    if (o.eval_every > 0 && o.on_eval && step % o.eval_every == 0) o.on_eval(step, rows_done);
  }
  res.seconds = elapsed_before + seconds_since(t0);
  save_checkpoint(res.seconds);
  res.finished = !sitting_over;
  res.rows = rows_done;
  res.last_loss = ema;
  res.last_top1 = ema_top1;
  return res;
}

/// RMS of the features over (up to) the first 64 records, per block of `block` columns ([W], each block's RMS repeated):
/// EAGLE-3's fused features concatenate three layers of very different scales.
torch::Tensor feature_rms(const std::vector<Record>& data, std::int64_t block);

/// The `size` target ids the target emits most often as its argmax over the training set (ties to the smaller id), and the
/// share of rows whose argmax they cover.
std::pair<std::vector<std::int64_t>, double> frequent_argmax_tokens(const std::vector<Record>& data, std::int64_t vocab,
                                                                           std::int64_t size);

TrainResult train_eagle(EagleTrainable& m, const std::vector<Record>& data, const TrainOptions& o);

/// Held-out accuracy of the unrolled draft steps: for step k, the share of rows (i >= k-1, answer rows only when
/// `answers_only`) whose draft argmax equals the target's argmax given the true tokens so far — at temperature 0 the chance
/// that draft k is accepted when drafts 1..k-1 were.
/// eagle_step_accuracy with the head's calibration: per step, the rows binned by the head's largest probability (over its
/// draft vocabulary, temperature 1) into `bins` equal bins of [0, 1], with the rows whose argmax was the target's and
/// the summed probabilities (a calibrated head has hits / rows close to confidence / rows in every bin).
struct EagleStepStats {
  std::vector<double> accuracy;                     // per step
  std::vector<std::vector<double>> bin_rows, bin_hits, bin_confidence;  // [step][bin]
};
EagleStepStats eagle_step_stats(const EagleTrainable& m, const std::vector<Record>& data, int steps, std::int64_t max_len,
                                bool answers_only, int bins);

/// The first draft's acceptance when the head's drafts are sampled at each of `temperatures` (held-out rows,
/// teacher-forced; one head forward a record for all of them): the mean over rows of sum_v min(p_T(v), q_T(v)), the
/// chance a draft drawn from the head's law q_T is accepted against the target's p_T (from its stored top-k,
/// renormalised at T), beside the mean of the head's largest probability at T * scales[i], the confidence a decoder
/// could report for such a draft. One result per temperature.
struct EagleSampledOverlap {
  double rows = 0, mean_overlap = 0;
  std::vector<double> mean_top;  // per scale
};
std::vector<EagleSampledOverlap> eagle_sampled_overlap(const EagleTrainable& m, const std::vector<Record>& data,
                                                       std::int64_t max_len, bool answers_only,
                                                       const std::vector<double>& temperatures,
                                                       const std::vector<double>& scales);

std::vector<double> eagle_step_accuracy(const EagleTrainable& m, const std::vector<Record>& data, int steps, std::int64_t max_len,
                                               bool answers_only);

TrainResult train_draft(DraftTrainable& m, const std::vector<Record>& data, const TrainOptions& o);

}  // namespace specdec::train
