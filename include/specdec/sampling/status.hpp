// specdec — status codes of the torch-free core and the exception thrown at public C++ entry points.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "specdec/sampling/config.hpp"

namespace specdec {

/// Result of a core or kernel call. kSuccess is 0 so a status can be tested like an error code.
enum class Status : std::int32_t {
  kSuccess = 0,
  kInvalidArgument = 1,     ///< a size, pointer or parameter is out of its domain
  kInvalidTokenId = 2,      ///< a draft token id is outside [0, vocab_size)
  kInvalidProbability = 3,  ///< a probability read is NaN, infinite or negative
  kZeroMass = 4,            ///< a distribution to sample from has no positive mass
  kInvalidTree = 5,         ///< a parent index does not point at an earlier node
  kWorkspaceTooSmall = 6,   ///< the caller-provided workspace is smaller than required
  kCudaError = 7,           ///< a CUDA runtime call failed
};

SPECDEC_INLINE const char* to_string(Status s) {
  switch (s) {
    case Status::kSuccess: return "success";
    case Status::kInvalidArgument: return "invalid argument";
    case Status::kInvalidTokenId: return "token id out of range";
    case Status::kInvalidProbability: return "probability is NaN, infinite or negative";
    case Status::kZeroMass: return "distribution has zero mass";
    case Status::kInvalidTree: return "parent index does not point at an earlier node";
    case Status::kWorkspaceTooSmall: return "workspace too small";
    case Status::kCudaError: return "CUDA error";
  }
  return "unknown status";
}

/// The exception thrown by specdec's public C++ entry points (never abort/exit on a caller's behalf).
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  error(Status status, const std::string& what) : std::runtime_error(what), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_ = Status::kInvalidArgument;
};

}  // namespace specdec
