// specdec torch front — named tensors into one safetensors file (the trainers' checkpoints and exported drafts).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace specdec::models {

/// Writes named CPU tensors as one safetensors file (metadata {"format": "pt"}): floating tensors as `float_type`
/// (at::kFloat, at::kHalf or at::kBFloat16), int64 and bool tensors as they are. Throws specdec::error on failure.
void write_tensors_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                               at::ScalarType float_type = at::kFloat);

}  // namespace specdec::models
