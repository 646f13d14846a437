// bench_host_probe: what the host's cores do, for reading the kernels' figures (docs/results-log.md). Stand-alone loops:
//   - the clock, from a chain of dependent integer adds (one a cycle);
//   - 512-bit vpdpbusd (AVX-512 VNNI) throughput a cycle, alone and beside 4 float multiplies, 4 conversions or 4
//     integer shifts / adds, with memory-broadcast operands folded or as separate vpbroadcastd loads, or beside register
//     copies (which of them share the multiply pipes the packed products' float stage uses, and whether the compiler's
//     separate broadcasts and zero copies cost anything); and 12 dependent vpdpbusd (its latency: 4 cycles needs 8
//     independent sums in flight to keep 2 a cycle);
//   - the same vpdpbusd loop on two threads at once against one thread: per-thread rate 1.0 when the two threads run
//     on two cores' pipes, about 0.5 when they share one core's.
// x86-64 with AVX-512 VNNI only (it says so and exits 0 elsewhere). No libtorch; bench_torch_rss is the memory probe.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;
constexpr long kIters = 50'000'000;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SPECDEC_PROBE_ASM 1
#define DP12                                                                                                            \
  "vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm1\n vpdpbusd %%zmm30, %%zmm31, %%zmm2\n"        \
  "vpdpbusd %%zmm30, %%zmm31, %%zmm3\n vpdpbusd %%zmm30, %%zmm31, %%zmm4\n vpdpbusd %%zmm30, %%zmm31, %%zmm5\n"        \
  "vpdpbusd %%zmm30, %%zmm31, %%zmm6\n vpdpbusd %%zmm30, %%zmm31, %%zmm7\n vpdpbusd %%zmm30, %%zmm31, %%zmm8\n"        \
  "vpdpbusd %%zmm30, %%zmm31, %%zmm9\n vpdpbusd %%zmm30, %%zmm31, %%zmm10\n vpdpbusd %%zmm30, %%zmm31, %%zmm11\n"
// 4 independent 3-operand float instructions `ins` (into zmm12-15), beside DP12.
#define FLOAT4(ins)                                                                                                     \
  ins " %%zmm28, %%zmm29, %%zmm12\n " ins " %%zmm28, %%zmm29, %%zmm13\n " ins " %%zmm28, %%zmm29, %%zmm14\n " ins    \
      " %%zmm28, %%zmm29, %%zmm15\n"
#define CLOBBERS "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", \
                 "xmm12", "xmm13", "xmm14", "xmm15"

double ghz() {
  std::uint64_t x = 1;
  const long n = 10 * kIters;
  const auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) asm volatile("add $1, %0" : "+r"(x));
  return static_cast<double>(n) / seconds_since(t0) / 1e9;
}

// Seconds for kIters iterations of one loop body (each a fixed instruction group).
enum class Body { kDp, kDpFma, kDpMul, kDpCvt, kDpInt, kDpBroadcast, kDpLoadBroadcast, kDpMove, kDpChain };
double run(Body body) {
  alignas(64) static const std::int32_t x[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  const auto t0 = Clock::now();
  for (long i = 0; i < kIters; ++i) switch (body) {
      case Body::kDp: asm volatile(DP12 ::: CLOBBERS); break;
      case Body::kDpFma: asm volatile(DP12 FLOAT4("vfmadd231ps") ::: CLOBBERS); break;
      case Body::kDpMul: asm volatile(DP12 FLOAT4("vmulps") ::: CLOBBERS); break;
      case Body::kDpCvt:
        asm volatile(DP12 "vcvtdq2ps %%zmm28, %%zmm12\n vcvtdq2ps %%zmm28, %%zmm13\n"
                          "vcvtdq2ps %%zmm28, %%zmm14\n vcvtdq2ps %%zmm28, %%zmm15\n" ::: CLOBBERS);
        break;
      case Body::kDpInt:
        asm volatile(DP12 "vpslld $8, %%zmm28, %%zmm12\n vpaddd %%zmm28, %%zmm29, %%zmm13\n"
                          "vpslld $8, %%zmm28, %%zmm14\n vpaddd %%zmm28, %%zmm29, %%zmm15\n" ::: CLOBBERS);
        break;
      case Body::kDpBroadcast:  // each vpdpbusd's activation bytes as a memory broadcast, as the packed products load them
        asm volatile(
            "vpdpbusd 0(%0)%{1to16%}, %%zmm31, %%zmm0\n vpdpbusd 4(%0)%{1to16%}, %%zmm31, %%zmm1\n"
            "vpdpbusd 8(%0)%{1to16%}, %%zmm31, %%zmm2\n vpdpbusd 12(%0)%{1to16%}, %%zmm31, %%zmm3\n"
            "vpdpbusd 16(%0)%{1to16%}, %%zmm31, %%zmm4\n vpdpbusd 20(%0)%{1to16%}, %%zmm31, %%zmm5\n"
            "vpdpbusd 24(%0)%{1to16%}, %%zmm31, %%zmm6\n vpdpbusd 28(%0)%{1to16%}, %%zmm31, %%zmm7\n"
            "vpdpbusd 32(%0)%{1to16%}, %%zmm31, %%zmm8\n vpdpbusd 36(%0)%{1to16%}, %%zmm31, %%zmm9\n"
            "vpdpbusd 40(%0)%{1to16%}, %%zmm31, %%zmm10\n vpdpbusd 44(%0)%{1to16%}, %%zmm31, %%zmm11\n" ::"r"(x)
            : CLOBBERS);
        break;
      case Body::kDpLoadBroadcast:  // each activation broadcast by its own vpbroadcastd from memory, then vpdpbusd
        asm volatile(
            "vpbroadcastd 0(%0), %%zmm12\n vpdpbusd %%zmm12, %%zmm31, %%zmm0\n vpbroadcastd 4(%0), %%zmm13\n vpdpbusd %%zmm13, %%zmm31, %%zmm1\n"
            "vpbroadcastd 8(%0), %%zmm14\n vpdpbusd %%zmm14, %%zmm31, %%zmm2\n vpbroadcastd 12(%0), %%zmm15\n vpdpbusd %%zmm15, %%zmm31, %%zmm3\n"
            "vpbroadcastd 16(%0), %%zmm12\n vpdpbusd %%zmm12, %%zmm31, %%zmm4\n vpbroadcastd 20(%0), %%zmm13\n vpdpbusd %%zmm13, %%zmm31, %%zmm5\n"
            "vpbroadcastd 24(%0), %%zmm14\n vpdpbusd %%zmm14, %%zmm31, %%zmm6\n vpbroadcastd 28(%0), %%zmm15\n vpdpbusd %%zmm15, %%zmm31, %%zmm7\n"
            "vpbroadcastd 32(%0), %%zmm12\n vpdpbusd %%zmm12, %%zmm31, %%zmm8\n vpbroadcastd 36(%0), %%zmm13\n vpdpbusd %%zmm13, %%zmm31, %%zmm9\n"
            "vpbroadcastd 40(%0), %%zmm14\n vpdpbusd %%zmm14, %%zmm31, %%zmm10\n vpbroadcastd 44(%0), %%zmm15\n vpdpbusd %%zmm15, %%zmm31, %%zmm11\n" ::"r"(x)
            : CLOBBERS);
        break;
      case Body::kDpChain:  // 12 dependent vpdpbusd (one accumulator): the instruction's latency
        asm volatile(
            "vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm0\n"
            "vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm0\n"
            "vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm0\n"
            "vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm0\n" ::
                : CLOBBERS);
        break;
      case Body::kDpMove:  // + 12 register copies (an accumulator started as a copy of a zero register)
        asm volatile(DP12 "vmovdqa32 %%zmm28, %%zmm12\n vmovdqa32 %%zmm28, %%zmm13\n vmovdqa32 %%zmm28, %%zmm14\n vmovdqa32 %%zmm28, %%zmm15\n"
                          "vmovdqa32 %%zmm28, %%zmm12\n vmovdqa32 %%zmm28, %%zmm13\n vmovdqa32 %%zmm28, %%zmm14\n vmovdqa32 %%zmm28, %%zmm15\n"
                          "vmovdqa32 %%zmm28, %%zmm12\n vmovdqa32 %%zmm28, %%zmm13\n vmovdqa32 %%zmm28, %%zmm14\n vmovdqa32 %%zmm28, %%zmm15\n" ::: CLOBBERS);
        break;
    }
  return seconds_since(t0);
}
#endif

}  // namespace

int main() {
#ifdef SPECDEC_PROBE_ASM
  if (!__builtin_cpu_supports("avx512vnni")) {
    std::printf("bench_host_probe: this CPU has no AVX-512 VNNI; nothing to probe\n");
    return 0;
  }
  const double f = ghz();
  std::printf("clock (dependent adds): %.2f GHz\n", f);
  const struct {
    Body body;
    const char* name;
  } loops[] = {{Body::kDp, "12 vpdpbusd"},
               {Body::kDpFma, "12 vpdpbusd + 4 vfmadd231ps"},
               {Body::kDpMul, "12 vpdpbusd + 4 vmulps"},
               {Body::kDpCvt, "12 vpdpbusd + 4 vcvtdq2ps"},
               {Body::kDpInt, "12 vpdpbusd + 2 vpslld + 2 vpaddd"},
               {Body::kDpBroadcast, "12 vpdpbusd, memory-broadcast operands"},
               {Body::kDpLoadBroadcast, "12 vpdpbusd + 12 vpbroadcastd (memory)"},
               {Body::kDpMove, "12 vpdpbusd + 12 vmovdqa32 (register)"},
               {Body::kDpChain, "12 vpdpbusd, one dependent chain"}};
  for (const auto& l : loops) std::printf("%-36s %.2f cycles\n", l.name, run(l.body) * f * 1e9 / kIters);
  run(Body::kDp);
  const double one = run(Body::kDp);
  double other = 0;
  std::thread t([&] { other = run(Body::kDp); });
  const double mine = run(Body::kDp);
  t.join();
  std::printf("12 vpdpbusd on two threads at once: each at %.2f of one thread's rate\n", one / std::max(mine, other));
#else
  std::printf("bench_host_probe: x86-64 only; nothing to probe\n");
#endif
  return 0;
}
