// specdec::train — what every part of the trainer library shares: includes, the error helper and timing.
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "specdec/models/chat_template.hpp"
#include "specdec/models/detail/errors.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/tokenizer.hpp"
#include "specdec/proposers/eagle.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

using models::detail::fail;

/// Named tensors as the CPU models' weights (models::WeightGetter; each copied to float32 when asked for, undefined when
/// absent): how a trainer hands its modules' weights to LlamaModel or EagleHead. `w` must outlive the getter's calls.
/// The CPU models' float32 values (models::FloatTensor) as a CPU tensor sharing them (the tensor keeps them alive).
inline at::Tensor tensor_of_values(const models::FloatTensor& t) {
  if (!t.defined()) return {};
  auto keep = std::make_shared<models::FloatTensor>(t);
  return at::from_blob(t.mutable_data(), t.shape(), [keep](void*) mutable { keep.reset(); },
                       at::TensorOptions().dtype(at::kFloat));
}

template <class Map>  // std::map or std::unordered_map of std::string -> at::Tensor
models::WeightGetter weights_of(const Map& w) {
  return [&w](const std::string& name) -> models::FloatTensor {
    auto it = w.find(name);
    if (it == w.end() || !it->second.defined()) return {};
    const at::Tensor t = it->second.detach().to(at::kCPU, at::kFloat).contiguous();
    return models::FloatTensor(t.sizes().vec(), std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel()));
  };
}

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

inline std::string hms(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<long>(s + 0.5);
  return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
}

}  // namespace specdec::train
