// specdec::torch — the decoder's DeviceBackend on ATen (see specdec/torch/device_backend.hpp).
#include "specdec/torch/device_backend.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "specdec/torch/device_copy.hpp"
#include "specdec/torch/rows.hpp"
#include "specdec/torch/verify_logits.hpp"

namespace specdec::torch {
namespace {

class AtenDeviceBackend final : public decoder::DeviceBackend {
 public:
  /// specdec::torch::verify_logits on the logits' device. The step's small inputs (ids, cu, parents, seeds, positions,
  /// sampling parameters, draft kinds) are staged in one host buffer and uploaded in one copy; the results (tokens,
  /// counts, statuses, tree nodes) come back in one copy. The [N + B, V] rows stay on the device.
  decoder::Verified verify(const proposers::DraftBatch& d, const Rows& target_logits,
                           std::span<const SamplingParams* const> params, std::span<const std::int64_t> positions,
                           VerifyMethod method, bool expected_acceptance) override {
    // Every tensor made here stays here (the results are plain vectors): inference mode skips autograd's dispatch on
    // the step's few dozen small ATen calls. The workspace is made in it too, and only ever written by verify_logits.
    c10::InferenceMode inference;
    const at::Tensor logits = tensor_of(target_logits);
    const auto B = static_cast<std::int64_t>(params.size());
    const auto N = static_cast<std::int64_t>(d.token_ids.size());
    const bool tree = !d.parents.empty(), kinds = !d.has_probs.empty();
    std::int64_t max_k = 0;
    for (std::int64_t b = 0; b < B; ++b) max_k = std::max(max_k, d.num_drafts(b));
    // Staging layout: 8-byte aligned sections, so each is a view of its own dtype.
    auto up8 = [](std::int64_t n) { return (n + 7) / 8 * 8; };
    const std::int64_t o_ids = 0, o_cu = o_ids + 8 * N, o_par = o_cu + 8 * (B + 1), o_seed = o_par + (tree ? 8 * N : 0),
                       o_pos = o_seed + 8 * B, o_temp = o_pos + 8 * B, o_topk = o_temp + up8(4 * B),
                       o_topp = o_topk + up8(4 * B), o_minp = o_topp + up8(4 * B), o_kind = o_minp + up8(4 * B),
                       total = o_kind + up8(kinds ? B : 0);
    const at::Device dev = logits.device();
    // Page-locked on a device, so the upload is asynchronous (the host allocator's cached blocks: no allocation per step).
    at::Tensor host = at::empty({total}, at::TensorOptions().dtype(at::kByte).pinned_memory(!logits.is_cpu()));
    std::uint8_t* h = host.data_ptr<std::uint8_t>();
    // An empty section (no drafts this step) may come from an empty vector whose data() is null: copy nothing then.
    auto put = [h](std::int64_t off, const void* src, std::int64_t bytes) {
      if (bytes > 0) std::memcpy(h + off, src, static_cast<std::size_t>(bytes));
    };
    put(o_ids, d.token_ids.data(), 8 * N);
    put(o_cu, d.cu_num_drafts.data(), 8 * (B + 1));
    if (tree) {
      const std::vector<std::int64_t> par = decoder::detail::flat_parents(d);
      put(o_par, par.data(), 8 * N);
    }
    put(o_pos, positions.data(), 8 * B);
    for (std::int64_t b = 0; b < B; ++b) {
      const SamplingParams& p = *params[static_cast<std::size_t>(b)];
      const auto seed = static_cast<std::int64_t>(p.seed);
      std::memcpy(h + o_seed + 8 * b, &seed, 8);
      std::memcpy(h + o_temp + 4 * b, &p.temperature, 4);
      std::memcpy(h + o_topk + 4 * b, &p.top_k, 4);
      std::memcpy(h + o_topp + 4 * b, &p.top_p, 4);
      std::memcpy(h + o_minp + 4 * b, &p.min_p, 4);
    }
    if (kinds) put(o_kind, d.has_probs.data(), B);
    const at::Tensor staged = logits.is_cpu() ? host : host.to(dev, /*non_blocking=*/true);  // host -> device, no sync
    auto view = [&](std::int64_t off, std::int64_t n, at::ScalarType t, std::int64_t size) {
      return staged.slice(0, off, off + n * size).view(t);
    };
    VerifyLogitsArgs a;
    a.target_logits = logits;
    a.draft_token_ids = view(o_ids, N, at::kLong, 8);
    a.cu_num_draft_tokens = view(o_cu, B + 1, at::kLong, 8);
    if (d.probs.defined())  // draft rows (host memory, or the proposer's device): on the target's device
      a.draft_probs = to_device_async(tensor_of(d.probs), dev);
    if (tree) a.parents = view(o_par, N, at::kLong, 8);
    if (kinds) a.has_draft_probs = view(o_kind, B, at::kByte, 1);
    a.temperature = view(o_temp, B, at::kFloat, 4);
    a.top_k = view(o_topk, B, at::kInt, 4);
    a.top_p = view(o_topp, B, at::kFloat, 4);
    a.min_p = view(o_minp, B, at::kFloat, 4);
    a.seeds = view(o_seed, B, at::kLong, 8);
    a.positions = view(o_pos, B, at::kLong, 8);
    a.max_num_draft_tokens = max_k;
    a.method = method;
    a.all_target_probs = expected_acceptance;  // the only reader of the rows past a rejection
    const bool draft_rows = false;             // draft probs are float32 rows (check_draft_batch)
    const std::int64_t need = verify_logits_workspace_bytes(B, N, logits.size(1), tree, draft_rows);
    if (!workspace_.defined() || workspace_.device() != dev || workspace_.numel() < need)
      workspace_ = at::empty({need + need / 2}, at::TensorOptions().device(dev).dtype(at::kByte));  // room to grow
    a.workspace = workspace_;
    const VerifyLogitsResult r = verify_logits(a);
    std::vector<at::Tensor> parts{r.output_token_ids.reshape({-1}).to(at::kLong), r.num_accepted.to(at::kLong),
                                  r.status.to(at::kLong)};
    if (tree) parts.push_back(r.accepted.reshape({-1}).to(at::kLong));
    const at::Tensor packed = at::cat(parts);
    // device -> host: the step's one host synchronisation (none on CPU).
    const at::Tensor back = packed.is_cpu() ? packed : packed.cpu();
    const std::int64_t stride = r.output_token_ids.size(1);
    const std::int64_t* out = back.data_ptr<std::int64_t>();
    const std::int64_t* nacc = out + B * stride;
    const std::int64_t* status = nacc + B;
    const std::int64_t* nodes = tree ? status + B : nullptr;
    decoder::Verified v = decoder::detail::verified_from(B, stride, out, nacc, status, nodes);
    if (expected_acceptance && !tree && d.probs.defined()) {
      const at::Tensor p = r.target_probs.is_cpu() ? r.target_probs.contiguous() : r.target_probs.cpu().contiguous();
      proposers::DraftBatch host = d;
      if (!d.probs.device().is_cpu()) host.probs = to_host_float32(d.probs);
      decoder::detail::add_expected(v, host, p.data_ptr<float>(), p.size(1), params);
    }
    return v;
  }

  Rows select_rows(const Rows& rows, std::span<const std::int64_t> index) override {
    c10::InferenceMode inference;
    const at::Tensor t = tensor_of(rows);
    at::Tensor idx = at::empty({static_cast<std::int64_t>(index.size())},
                               at::TensorOptions().dtype(at::kLong).pinned_memory(!t.is_cpu()));
    std::copy(index.begin(), index.end(), idx.data_ptr<std::int64_t>());
    if (!t.is_cpu()) idx = idx.to(t.device(), /*non_blocking=*/true);
    return rows_of(t.index_select(0, idx));
  }

  Rows to_host_float32(const Rows& rows) override { return rows_to_host_float32(rows); }

 private:
  at::Tensor workspace_;  // verification's device rows, kept across steps (no fresh [N + B, V] rows per step)
};

}  // namespace

std::unique_ptr<decoder::DeviceBackend> make_device_backend() { return std::make_unique<AtenDeviceBackend>(); }

}  // namespace specdec::torch
