// specdec — what SpeculativeDecoder does not do itself: rows that live on a device. The decoder verifies a CPU target's
// rows on the host (specdec::verify) and gathers its feature rows with plain copies; a target whose forward returns rows
// on a GPU needs a DeviceBackend, which verifies there, gathers feature rows there and copies rows to the host. The torch
// layer provides one (specdec::torch::make_device_backend, include/specdec/torch/device_backend.hpp); an engine with its
// own GPU runtime can write another. The decoder makes one per instance (DecoderOptions::device_backend), so a backend
// may keep buffers across steps.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "specdec/decoder/types.hpp"
#include "specdec/proposers/proposer.hpp"
#include "specdec/rows.hpp"
#include "specdec/sampling/block.hpp"
#include "specdec/sampling/params.hpp"

namespace specdec::decoder {

/// One step's verification results.
struct Verified {
  std::vector<std::vector<std::int64_t>> tokens;  ///< per request: accepted drafts then the recovered/bonus token
  std::vector<std::vector<std::int64_t>> nodes;   ///< per request: node indices (1-based) of the accepted drafts
  /// per request, when asked for: expected accepted drafts given the block (token-level, block); empty or NaN otherwise
  std::vector<ExpectedAccepted> expected;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  /// Processes the target's rows ([N + B, V] on the device, the K_b + 1 rows of each request) with each request's
  /// SamplingParams and verifies every request's drafts (chains or trees; `method` for every chain) on the rows'
  /// device: the same tokens as the host path (specdec::verify_logits_host) for the same inputs. With
  /// `expected_acceptance`, Verified::expected as detail::add_expected computes it. A failed request throws
  /// specdec::error naming it (detail::verified_from).
  virtual Verified verify(const proposers::DraftBatch& drafts, const Rows& target_logits,
                          std::span<const SamplingParams* const> params, std::span<const std::int64_t> positions,
                          VerifyMethod method, bool expected_acceptance) = 0;
  /// The rows `index` of `rows` (on the device), in that order, as new rows on the same device and of the same dtype.
  virtual Rows select_rows(const Rows& rows, std::span<const std::int64_t> index) = 0;
  /// A host float32 copy of `rows` (the decoder's host path for what the device entry does not do: a chain batch
  /// that mixes block- and token-verified requests).
  virtual Rows to_host_float32(const Rows& rows) = 0;
};

namespace detail {

/// Verified from a verification's outputs in host memory: tokens [B, stride] (-1 padded), counts [B], statuses [B],
/// tree nodes [B, stride] or none (chains: 1..n). Throws specdec::error for the first failed request.
Verified verified_from(std::int64_t B, std::int64_t stride, const std::int64_t* tokens, const std::int64_t* num_accepted,
                       const std::int64_t* status, const std::int64_t* nodes);

/// A tree batch's parents as one [N] array in the verifiers' layout (a request without its own parents: a chain).
std::vector<std::int64_t> flat_parents(const proposers::DraftBatch& drafts);

/// Verified::expected: expected accepted drafts of every sampled chain request with draft probs, from the processed
/// target rows `target_probs` ([N + B, V] float32 in host memory). Trees and batches without draft probs: unchanged.
void add_expected(Verified& v, const proposers::DraftBatch& drafts, const float* target_probs, std::int64_t vocab_size,
                  std::span<const SamplingParams* const> params);

}  // namespace detail
}  // namespace specdec::decoder
