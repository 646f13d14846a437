// The thread pools of the libraries beneath ATen, sized for the host work the CPU models leave to them (the EAGLE
// head's ops, ATen-side sampling, the long-prompt attention's batched products): ATen's intra-op pool and, where the
// process runs OpenBLAS, OpenBLAS's own pool. The models' forward runs on their own pool (LlamaOptions::num_threads);
// these are the pools that would otherwise stack on it. OpenBLAS's workers spin (sched_yield) for a while after every
// BLAS call, so on a machine with few cores an idle-but-spinning worker takes a core from the forward's threads for the
// first steps after a prompt's prefill.
#pragma once

namespace specdec::models {

/// Sets ATen's intra-op threads (at::set_num_threads) and OpenBLAS's threads (openblas_set_num_threads, looked up at run
/// time, so no link dependency) to `threads` (>= 1). Process-wide: call it once at startup, from the program, not from a
/// library. Returns whether OpenBLAS was found (false: another BLAS, or none, whose threads ATen's setting governs or
/// which has none). Throws specdec::error for threads < 1.
bool set_host_library_threads(int threads);

/// OpenBLAS's thread count (openblas_get_num_threads), or -1 where the process does not run OpenBLAS.
int openblas_threads();

}  // namespace specdec::models
