// specdec torch front — the CPU models' float32 weights (models::FloatTensor) as tensors and back: how torch code hands
// weights to a WeightGetter (LlamaModel, the EAGLE head) and reads the ones a loader gives (AtenLlamaModel).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>

#include "specdec/models/float_tensor.hpp"
#include "specdec/models/llama.hpp"

namespace specdec::torch {

/// A float32 CPU copy of `t` (any floating dtype, any device, any strides); an undefined tensor gives an undefined one.
models::FloatTensor float_tensor_of(const at::Tensor& t);

/// The values of `t` as a float32 CPU tensor of its shape, sharing its memory (the tensor keeps it alive); an undefined
/// one gives an undefined tensor.
at::Tensor tensor_of(const models::FloatTensor& t);

/// A WeightGetter over a function that returns tensors by name (undefined when absent): each converted by
/// float_tensor_of.
models::WeightGetter weight_getter(std::function<at::Tensor(const std::string&)> get);

}  // namespace specdec::torch
