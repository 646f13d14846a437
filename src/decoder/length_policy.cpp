// The adaptive draft-length policy's compiled parts (include/specdec/decoder/length_policy.hpp).
#include "specdec/decoder/length_policy.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace specdec::decoder {

namespace {
constexpr double kPriorWeight = 1.0;  // pseudo-observations behind each position's prior
constexpr double kSlopeWeight = 1.0;  // pseudo-weight (in token^2) of the cost model's prior slope
constexpr double kCellShrink = 2.0;   // pseudo-observations of the line behind a step size's own mean
}  // namespace

void AcceptanceEstimate::observe(std::int64_t drafted, std::int64_t accepted) {
  if (drafted <= 0) return;
  accepted = std::clamp<std::int64_t>(accepted, 0, drafted);
  const std::int64_t tested = std::min(drafted, accepted + 1);  // position i is tested when 1..i-1 were accepted
  if (tested_.empty()) {  // position 1 starts from one pseudo-observation of the prior, which fades like the data
    tested_.push_back(kPriorWeight);
    accepted_.push_back(kPriorWeight * prior_);
  }
  if (static_cast<std::int64_t>(tested_.size()) < tested) {
    tested_.resize(static_cast<std::size_t>(tested), 0.0);
    accepted_.resize(static_cast<std::size_t>(tested), 0.0);
  }
  // Every position forgets, tested or not: one not tried for a while drifts back to the estimate it inherits, so a
  // depth cut after a few rejections is tried again.
  for (std::size_t u = 0; u < tested_.size(); ++u) {
    const bool t = static_cast<std::int64_t>(u) < tested;
    tested_[u] = decay_ * tested_[u] + (t ? 1.0 : 0.0);
    accepted_[u] = decay_ * accepted_[u] + (t && static_cast<std::int64_t>(u) < accepted ? 1.0 : 0.0);
  }
}

double AcceptanceEstimate::h(std::int64_t i) const {
  if (tested_.empty() || i < 1) return prior_;
  double h = accepted_[0] / tested_[0];
  const auto n = static_cast<std::size_t>(std::min<std::int64_t>(i, static_cast<std::int64_t>(tested_.size())));
  for (std::size_t u = 1; u < n; ++u) h = (accepted_[u] + kPriorWeight * h) / (tested_[u] + kPriorWeight);
  return h;  // deeper positions than tried inherit the deepest estimate
}

void AcceptanceEstimate::expected_tokens(std::span<double> out) const {
  double h = prior_, reach = 1.0, sum = 1.0;
  for (std::size_t g = 0; g < out.size(); ++g) {
    if (g > 0) {
      const std::size_t u = g - 1;
      if (u == 0 && !tested_.empty()) h = accepted_[0] / tested_[0];
      else if (u > 0 && u < tested_.size()) h = (accepted_[u] + kPriorWeight * h) / (tested_[u] + kPriorWeight);
      reach *= h;
      sum += reach;
    }
    out[g] = sum;
  }
}

double AcceptanceEstimate::expected_tokens(std::int64_t g) const {
  std::vector<double> out(static_cast<std::size_t>(std::max<std::int64_t>(g, 0) + 1));
  expected_tokens(out);
  return out.back();
}

void ForwardCostModel::observe(std::int64_t requests, std::int64_t tokens, double seconds) {
  if (requests <= 0 || tokens < requests || !(seconds > 0) || !std::isfinite(seconds)) return;
  Fit& f = fits_[requests];
  const auto xi = static_cast<std::size_t>(tokens - requests);
  const double x = static_cast<double>(xi);
  if (f.cells.size() <= xi) f.cells.resize(xi + 1);
  for (auto& c : f.cells) c.w *= decay_, c.y *= decay_;
  f.cells[xi].w += 1.0;
  f.cells[xi].y += seconds;
  f.w = decay_ * f.w + 1.0;
  f.x = decay_ * f.x + x;
  f.y = decay_ * f.y + seconds;
  f.xx = decay_ * f.xx + x * x;
  f.xy = decay_ * f.xy + x * seconds;
}

void DraftingYield::observe(std::int64_t rows, std::int64_t tokens, std::int64_t positions) {
  weight_ = decay_ * weight_ + 1.0;
  tokens_ = decay_ * tokens_ + static_cast<double>(tokens);
  rows_ = decay_ * rows_ + static_cast<double>(rows);
  positions_ = decay_ * positions_ + static_cast<double>(positions < 0 ? rows : positions);
}

bool DraftingYield::pays(const std::function<double(std::int64_t)>& cost, double draft_cost) const {
  const double x = rows();
  const auto lo = static_cast<std::int64_t>(std::floor(x));
  const double c_lo = cost(lo), c = c_lo + (x - static_cast<double>(lo)) * (cost(lo + 1) - c_lo);
  return tokens() > c + draft_cost * positions();
}

double ForwardCostModel::predict(std::int64_t requests, std::int64_t tokens) const {
  const double x = static_cast<double>(std::max<std::int64_t>(tokens - requests, 0));
  if (fits_.empty()) return 1.0 + prior_slope_ * x;
  auto it = fits_.lower_bound(requests);  // the nearest batch size seen (the smaller on a tie)
  if (it == fits_.end()) {
    it = std::prev(it);
  } else if (it->first != requests && it != fits_.begin()) {
    const auto below = std::prev(it);
    if (requests - below->first <= it->first - requests) it = below;
  }
  const Fit& f = it->second;
  const double xm = f.x / f.w, ym = f.y / f.w;
  const double sxx = std::max(f.xx - f.x * f.x / f.w, 0.0), sxy = f.xy - f.x * f.y / f.w;
  const double a_prior = ym / (1.0 + prior_slope_ * xm);  // the intercept if the prior slope held
  const double b = std::max((sxy + kSlopeWeight * prior_slope_ * a_prior) / (sxx + kSlopeWeight), 0.0);
  const double a = std::max(ym - b * xm, 0.05 * ym);
  const double line = a + b * x;
  // Where steps of this size were seen, their own mean, shrunk to the line while few: a verification's cost need not
  // be linear in its rows (on the CPU the first extra row costs more than the next ones).
  const auto xi = static_cast<std::size_t>(x);
  if (xi < f.cells.size() && f.cells[xi].w > 0)
    return (f.cells[xi].y + kCellShrink * line) / (f.cells[xi].w + kCellShrink);
  return line;
}

double ForwardCostModel::ratio(std::int64_t requests, std::int64_t extra_tokens) const {
  return predict(requests, requests + extra_tokens) / predict(requests, requests);
}

std::vector<std::int32_t> choose_draft_lengths(std::span<const LengthChoice> requests, const ForwardCostFn& forward,
                                               double draft_seconds) {
  const auto n = requests.size();
  const auto B = static_cast<std::int64_t>(n);
  std::vector<std::int32_t> g(n, 0);
  std::vector<double> rows(n, 1.0);
  double max_rows = 0;
  for (std::size_t b = 0; b < n; ++b) {
    rows[b] = std::max(requests[b].rows_per_depth, 0.0);
    max_rows += rows[b] * std::max(requests[b].max_g, 0);
    if (requests[b].fixed) g[b] = std::max(requests[b].max_g, 0);
  }
  draft_seconds = std::max(draft_seconds, 0.0);
  // F(B, B + x) for the integer row counts this step can reach, computed once each.
  std::vector<double> cost(static_cast<std::size_t>(std::ceil(max_rows)) + 2, -1.0);
  auto forward_at = [&](double x) {
    const auto i = std::min(static_cast<std::size_t>(std::llround(std::max(x, 0.0))), cost.size() - 1);
    if (cost[i] < 0) cost[i] = std::max(forward(B, B + static_cast<std::int64_t>(i)), 1e-12);
    return cost[i];
  };
  auto tokens_at = [&](std::size_t b, std::int32_t gb) { return requests[b].tokens[static_cast<std::size_t>(gb)]; };

  double tokens = 0, x = 0;
  std::int32_t max_g = 0;
  for (std::size_t b = 0; b < n; ++b) {
    tokens += tokens_at(b, g[b]);
    x += rows[b] * g[b];
    max_g = std::max(max_g, g[b]);
  }
  double current = tokens / (forward_at(x) + draft_seconds * max_g);
  for (;;) {
    double best = current;
    std::size_t best_b = n;
    std::int32_t best_g = 0;
    for (std::size_t b = 0; b < n; ++b) {
      if (requests[b].fixed) continue;
      for (std::int32_t to = g[b] + 1; to <= requests[b].max_g; ++to) {
        const double t = tokens - tokens_at(b, g[b]) + tokens_at(b, to);
        const double v = t / (forward_at(x + rows[b] * (to - g[b])) + draft_seconds * std::max(max_g, to));
        if (v > best * (1.0 + 1e-12)) {
          best = v;
          best_b = b;
          best_g = to;
        }
      }
    }
    if (best_b == n) break;
    tokens += tokens_at(best_b, best_g) - tokens_at(best_b, g[best_b]);
    x += rows[best_b] * (best_g - g[best_b]);
    g[best_b] = best_g;
    max_g = std::max(max_g, best_g);
    current = best;
  }
  return g;
}

}  // namespace specdec::decoder
