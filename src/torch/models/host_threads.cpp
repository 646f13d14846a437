// ATen's and OpenBLAS's thread pools (include/specdec/torch/host_threads.hpp).
#include "specdec/torch/host_threads.hpp"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include "specdec/models/detail/errors.hpp"

namespace specdec::models {

namespace {
template <class Fn>
Fn openblas_symbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, name));
}
}  // namespace

bool set_host_library_threads(int threads) {
  if (threads < 1) detail::fail(fmt::format("set_host_library_threads: threads: expected >= 1, got {}", threads));
  at::set_num_threads(threads);
  auto set = openblas_symbol<void (*)(int)>("openblas_set_num_threads");
  if (set == nullptr) return false;
  set(threads);
  return true;
}

int openblas_threads() {
  auto get = openblas_symbol<int (*)()>("openblas_get_num_threads");
  return get == nullptr ? -1 : get();
}

}  // namespace specdec::models
