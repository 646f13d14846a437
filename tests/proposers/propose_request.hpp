// The ProposeRequest the decoder makes for one request's context (position = the context's length), for the proposer
// tests that call propose() directly. Torch-free.
#pragma once

#include <cstdint>
#include <span>

#include "specdec/proposers/proposer.hpp"

namespace specdec::test {

inline proposers::ProposeRequest propose_request(proposers::RequestId id, std::span<const std::int64_t> context,
                                                 const SamplingParams* params, std::int32_t g) {
  proposers::ProposeRequest r;
  r.id = id;
  r.context = context;
  r.params = params;
  r.max_drafts = g;
  r.position = static_cast<std::int64_t>(context.size());
  return r;
}

}  // namespace specdec::test
