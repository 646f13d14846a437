// specdec — the host verification entry (include/specdec/verify/host.hpp): size checks, then the CPU path on plain
// arrays (src/verify/cpu_rows.cpp).
#include "specdec/verify/host.hpp"

#include <algorithm>
#include <sstream>
#include <string>

#include "specdec/sampling/status.hpp"
#include "specdec/verify/detail/cpu_rows.hpp"

namespace specdec {
namespace {

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  throw error(Status::kInvalidArgument, "verify_logits_host: " + s.str());
}

}  // namespace

#define SPECDEC_HOST_CHECK(cond, ...) \
  do {                                \
    if (!(cond)) fail(__VA_ARGS__);   \
  } while (false)

HostVerifyResult verify_logits_host(const HostVerifyArgs& a) {
  SPECDEC_HOST_CHECK(a.vocab_size >= 1 && a.vocab_size < (std::int64_t{1} << 31), "vocab_size: expected V in [1, 2^31), got ",
              a.vocab_size);
  SPECDEC_HOST_CHECK(!a.cu_num_draft_tokens.empty(), "cu_num_draft_tokens: expected [B + 1] offsets, got none");
  const auto B = static_cast<std::int64_t>(a.cu_num_draft_tokens.size()) - 1;
  const auto N = static_cast<std::int64_t>(a.draft_token_ids.size());
  const std::int64_t V = a.vocab_size;
  auto check_b = [B](std::size_t n, const char* name, bool optional) {
    SPECDEC_HOST_CHECK((optional && n == 0) || static_cast<std::int64_t>(n) == B, name, ": expected ", B,
                optional ? " values (one per request) or none, got " : " values (one per request), got ", n);
  };
  check_b(a.has_draft_probs.size(), "has_draft_probs", true);
  check_b(a.temperature.size(), "temperature", true);
  check_b(a.top_k.size(), "top_k", true);
  check_b(a.top_p.size(), "top_p", true);
  check_b(a.min_p.size(), "min_p", true);
  check_b(a.seeds.size(), "seeds", false);
  check_b(a.positions.size(), "positions", false);
  const bool tree = !a.parents.empty();
  SPECDEC_HOST_CHECK(!tree || static_cast<std::int64_t>(a.parents.size()) == N, "parents: expected ", N,
              " values (one per draft) or none, got ", a.parents.size());
  SPECDEC_HOST_CHECK(a.target_logits != nullptr || N + B == 0, "target_logits: expected [N + B, V] = [", N + B, ", ", V,
              "] floats, got none");
  SPECDEC_HOST_CHECK(N + B <= 1 || a.target_logits_stride >= V, "target_logits_stride: expected rows at least V = ", V,
              " floats apart, got ", a.target_logits_stride);
  SPECDEC_HOST_CHECK(a.workspace != nullptr || N + B == 0, "workspace: expected [N + B, V] = [", N + B, ", ", V,
              "] floats, got none");
  SPECDEC_HOST_CHECK(a.max_num_draft_tokens >= -1, "max_num_draft_tokens: expected >= 0 (or -1), got ", a.max_num_draft_tokens);
  SPECDEC_HOST_CHECK(a.method == VerifyMethod::kToken || a.method == VerifyMethod::kBlock, "method: expected token or block, got ",
              static_cast<int>(a.method));
  SPECDEC_HOST_CHECK(a.method != VerifyMethod::kBlock || !tree,
              "method: expected token for tree verification (block verification applies to chains), got block");
  check_b(a.block.size(), "block", true);
  SPECDEC_HOST_CHECK(a.block.empty() || !tree,
              "block: expected none for tree verification (block verification applies to chains), got ", a.block.size(),
              " flags");
  std::int64_t width = a.max_num_draft_tokens;
  if (width < 0) {
    width = 0;
    for (std::int64_t b = 0; b < B; ++b) width = std::max(width, a.cu_num_draft_tokens[b + 1] - a.cu_num_draft_tokens[b]);
  }
  HostVerifyResult r;
  r.stride = width + 1;
  r.output_token_ids.resize(static_cast<std::size_t>(B * r.stride));
  r.num_accepted.resize(static_cast<std::size_t>(B));
  if (tree) r.accepted_nodes.resize(static_cast<std::size_t>(B * r.stride));
  else r.accepted.resize(static_cast<std::size_t>(N));
  r.status.resize(static_cast<std::size_t>(B));
  auto opt = [](auto span) { return span.empty() ? nullptr : span.data(); };
  detail::CpuRows<std::int64_t> c;
  c.B = B;
  c.N = N;
  c.V = V;
  c.stride = r.stride;
  c.logits = a.target_logits;
  c.logits_stride = a.target_logits_stride;
  c.cu = a.cu_num_draft_tokens.data();
  c.ids = a.draft_token_ids.data();
  c.parents = tree ? a.parents.data() : nullptr;
  c.q = a.draft_probs;
  c.has_q = opt(a.has_draft_probs);
  c.temperature = opt(a.temperature);
  c.top_k = opt(a.top_k);
  c.top_p = opt(a.top_p);
  c.min_p = opt(a.min_p);
  c.seeds = a.seeds.data();
  c.positions = a.positions.data();
  c.method = a.method;
  c.block = opt(a.block);
  c.all_target_probs = a.all_target_probs;
  c.greedy_by_scan = true;  // no target_probs come back from this entry
  c.probs = a.workspace;
  c.out = r.output_token_ids.data();
  c.nacc = r.num_accepted.data();
  c.flags = tree ? nullptr : r.accepted.data();
  c.nodes = tree ? r.accepted_nodes.data() : nullptr;
  c.status = r.status.data();
  detail::verify_rows_cpu(c, detail::ranges_of(a.parallel_for));
  return r;
}

#undef SPECDEC_HOST_CHECK

}  // namespace specdec
