// Test helpers: the EAGLE head's rows as tensors (the tests' references are ATen).
#pragma once

#include <ATen/ATen.h>

#include "specdec/proposers/eagle.hpp"
#include "specdec/torch/rows.hpp"

namespace specdec::test {

struct TensorOutput {
  at::Tensor hidden, logits;
};

/// head.forward(batch) with its hidden states and logits as [rows, width] CPU tensors.
inline TensorOutput forward(proposers::EagleHead& head, const proposers::EagleHeadBatch& batch) {
  const proposers::EagleHeadOutput o = head.forward(batch);
  return {specdec::torch::tensor_of(o.hidden), specdec::torch::tensor_of(o.logits)};
}

/// A 2-D float32 CPU tensor as EagleHeadBatch::features (made contiguous; the rows keep it alive).
inline Rows rows(const at::Tensor& t) { return specdec::torch::rows_of(t.contiguous()); }

}  // namespace specdec::test
