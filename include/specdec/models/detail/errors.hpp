// The one error helper of the models, proposers and trainers: fail() throws specdec::error (kInvalidArgument) with a
// message that names the argument, what was expected and what was received; shape_str() prints a shape for it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "specdec/sampling/status.hpp"

namespace specdec::models::detail {

[[noreturn]] inline void fail(const std::string& message) { throw specdec::error(Status::kInvalidArgument, message); }

/// "[d0, d1, ...]" for any range of integers (std::vector, at::IntArrayRef, a braced list).
template <class Range>
std::string shape_str(const Range& shape) {
  std::string out = "[";
  bool first = true;
  for (const auto d : shape) {
    out += (first ? "" : ", ") + std::to_string(static_cast<std::int64_t>(d));
    first = false;
  }
  return out + "]";
}
inline std::string shape_str(std::initializer_list<std::int64_t> shape) { return shape_str<std::initializer_list<std::int64_t>>(shape); }

}  // namespace specdec::models::detail
