// Internal: the CPU kernels of src/models/cpu/linear_kernel.cpp, shared by the Llama forward and the EAGLE head. Not a stable
// API. Every output's summation order is fixed (independent of the number of rows in a call and of the output range a
// thread takes), so results are batch-invariant.
#pragma once

#include <cstdint>

namespace specdec::models::detail {

/// Columns [o_begin, o_end) of y = x w^T (+ y when `accumulate`): x [n, in] (row stride in), w [*, in] (row stride in),
/// y [n, ldy]. Each weight row is streamed from memory once for up to 6 token rows.
void linear_rows(const float* x, std::int64_t n, std::int64_t in, const float* w, std::int64_t o_begin, std::int64_t o_end,
                 float* y, std::int64_t ldy, bool accumulate);

/// Which part of attention_rows a call runs: all of it (kAll); only the scores of key columns [key_begin, key_end) (kScores:
/// key_begin a multiple of 16, the range clipped to the keys' padded count), so several threads can share one kv head's
/// keys; or only the softmax and the weighted values over the scores earlier kScores calls wrote for every key (kFinish),
/// from key key_begin on (a multiple of 16 no larger than `cached`; every key before it must be masked to -inf in every
/// row, as a sliding window's are: the softmax gives such keys exactly 0, so skipping them changes no bit).
/// Each score and each row's result are computed by the same steps in every case, so splitting a call changes no bit.
struct AttentionPart {
  enum Kind { kAll, kScores, kFinish } kind = kAll;
  std::int64_t key_begin = 0, key_end = 0;
  /// Optional: the same keys also transposed in blocks of 16 positions (KvCache's key blocks of this slot and kv head:
  /// key p at [p / 16][d][p % 16], of the keys' element type). The AVX-512 kernel then reads each block instead of
  /// transposing 16 keys itself; the transposition is exact, so the result does not change.
  const void* key_blocks = nullptr;
};

/// Attention for query rows [row_begin, row_end) of one kv head: row r (ordered (token i, group member g) of `group`
/// members, r = i * group + g) is q[r * hd, +hd) (already scaled by 1/sqrt(hd)); keys and values are [total, hd] with
/// total = cached + n; token i sees the cached keys and the new keys cached + visible[i * n + a] for a < visible_count[i]
/// (ascending: its ancestors and itself); scores is [rows, ld_scores] scratch with ld_scores >= total rounded up to 16;
/// row r's output goes to out + i * ld_out_token + g * ld_out_member. Each row's result is independent of the other rows
/// in the call. KV: float, or std::uint16_t for IEEE float16 keys and values (a half KV cache), each converted exactly to
/// float as it is read, so the result equals the float call's over the same numbers, bit for bit (both instantiated in
/// src/models/cpu/linear_kernel.cpp).
template <class KV>
void attention_rows(const float* q, std::int64_t row_begin, std::int64_t row_end, std::int64_t n, std::int64_t group,
                    std::int64_t hd, const KV* k, const KV* v, std::int64_t total, std::int64_t cached,
                    const std::int32_t* visible, const std::int32_t* visible_count, float* scores, std::int64_t ld_scores,
                    float* out, std::int64_t ld_out_token, std::int64_t ld_out_member, AttentionPart part = {});

/// Whether attention_rows over head size `hd` runs the AVX-512 kernel here, the one that reads AttentionPart::key_blocks
/// (the 8-lane kernel transposes the keys itself): a cache keeps key blocks only where they are read.
bool attention_reads_key_blocks(std::int64_t hd);

/// out[i] = x[i] as IEEE float16, rounded to nearest even (float_to_half's bits for every value but NaN payloads; F16C
/// where the CPU has it).
void floats_to_halves(const float* x, std::uint16_t* out, std::int64_t n);

/// The softmax's row layout in attention_rows: moves a row's visible new-key scores down to follow the context
/// (row[cached + a] = row[cached + visible[a]], a < seen) and pads with -inf up to a multiple of `width`. Returns that
/// padded count.
inline std::int64_t pack_visible_scores(float* row, std::int64_t cached, const std::int32_t* visible, std::int64_t seen,
                                        std::int64_t width) {
  for (std::int64_t a = 0; a < seen; ++a) row[cached + a] = row[cached + visible[a]];
  const std::int64_t count = cached + seen, padded = (count + width - 1) / width * width;
  for (std::int64_t j = count; j < padded; ++j) row[j] = -__builtin_inff();
  return padded;
}

/// attention_rows on AVX-512F (16 lanes; src/models/cpu/attention_x86.cpp, which instantiates float and std::uint16_t),
/// for hd a multiple of 16 up to 128, or 256; returns false (computing nothing) for other head sizes. Only where the CPU has
/// AVX-512F; attention_rows chooses it.
template <class KV>
bool attention_rows_avx512(const float* q, std::int64_t row_begin, std::int64_t row_end, std::int64_t n,
                           std::int64_t group, std::int64_t hd, const KV* k, const KV* v, std::int64_t total,
                           std::int64_t cached, const std::int32_t* visible, const std::int32_t* visible_count,
                           float* scores, std::int64_t ld_scores, float* out, std::int64_t ld_out_token,
                           std::int64_t ld_out_member, AttentionPart part);

/// out[r, i] = silu(gu[r, i]) * gu[r, f + i] = gu[r, i] / (1 + exp(-gu[r, i])) * gu[r, f + i] for rows [0, rows) (gu rows
/// of 2f values, out rows of f). Element by element (exp to ~2e-7 relative), so each value is independent of the batch.
void silu_mul(const float* gu, float* out, std::int64_t rows, std::int64_t f);
/// silu_mul's vector paths, public for the tests that compare them: 8 lanes (only where silu_mul_has_avx2() is true) and
/// 16 (src/models/cpu/silu_x86.cpp; only where silu_mul_has_avx512() is true). silu_mul takes the widest the CPU has
/// (and SPECDEC_CPU_ISA, as for the attention, does not rule out).
void silu_mul_avx2(const float* gu, float* out, std::int64_t rows, std::int64_t f);
void silu_mul_avx512(const float* gu, float* out, std::int64_t rows, std::int64_t f);
bool silu_mul_has_avx2();
bool silu_mul_has_avx512();

/// out[r, i] = gelu_tanh(gu[r, i]) * gu[r, f + i], GELU with the tanh approximation (Gemma's MLP), computed as
/// x / (1 + exp(-2 sqrt(2 / pi) (x + 0.044715 x^3))) (= 0.5 x (1 + tanh(...))) with silu_mul's exp, on the same paths,
/// chosen alike: element by element, so each value is independent of the batch.
void gelu_tanh_mul(const float* gu, float* out, std::int64_t rows, std::int64_t f);
/// gelu_tanh_mul's vector paths, for the tests (available where silu_mul's are).
void gelu_tanh_mul_avx2(const float* gu, float* out, std::int64_t rows, std::int64_t f);
void gelu_tanh_mul_avx512(const float* gu, float* out, std::int64_t rows, std::int64_t f);

}  // namespace specdec::models::detail
