// Shared by the device tests: skip without a CUDA device, and device buffers with sentinel guard bytes on each side so
// that a kernel writing outside its buffer is caught (guards_intact) as well as by compute-sanitizer.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

namespace specdec::cuda::testing {

inline bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SPECDEC_REQUIRE_DEVICE()                                                                             \
  do {                                                                                                       \
    if (!::specdec::cuda::testing::have_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount failed or 0)"; \
  } while (0)

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

inline constexpr std::size_t kGuard = 64;  // guard bytes on each side of every device buffer
inline constexpr unsigned char kSentinel = 0xA5;

/// A device buffer with guard bytes before and after, filled with the sentinel (or `fill` for the payload); 16 bytes of
/// slack after the payload keep 16-byte vector loads of the last element inside the allocation.
struct Guarded {
  char* raw = nullptr;
  std::size_t bytes = 0;
  explicit Guarded(std::size_t n, int fill = kSentinel) : bytes(n) {
    if (cudaMalloc(&raw, n + 2 * kGuard + 16) != cudaSuccess) raw = nullptr;
    if (raw) cudaMemset(raw, kSentinel, n + 2 * kGuard + 16);
    if (raw && n && fill != kSentinel) cudaMemset(raw + kGuard, fill, n);
  }
  ~Guarded() { cudaFree(raw); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  template <class U>
  U* get() const { return reinterpret_cast<U*>(raw + kGuard); }
  template <class U>
  void upload(const std::vector<U>& v) { cudaMemcpy(raw + kGuard, v.data(), v.size() * sizeof(U), cudaMemcpyHostToDevice); }
  template <class U>
  std::vector<U> download(std::size_t count) const {
    std::vector<U> v(count);
    cudaMemcpy(v.data(), raw + kGuard, count * sizeof(U), cudaMemcpyDeviceToHost);
    return v;
  }
  bool guards_intact() const {
    std::vector<unsigned char> g(kGuard);
    for (std::size_t off : {std::size_t{0}, kGuard + bytes}) {
      cudaMemcpy(g.data(), raw + off, kGuard, cudaMemcpyDeviceToHost);
      for (unsigned char c : g)
        if (c != kSentinel) return false;
    }
    return true;
  }
};

/// A guarded device copy of `v` (at least one byte, so an empty vector still has a valid pointer).
template <class U>
std::unique_ptr<Guarded> upload(const std::vector<U>& v) {
  auto g = std::make_unique<Guarded>(std::max<std::size_t>(v.size() * sizeof(U), 1));
  g->upload(v);
  return g;
}

}  // namespace specdec::cuda::testing
