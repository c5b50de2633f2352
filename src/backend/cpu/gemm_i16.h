/* gemm_i16.h: the F16 / BF16 GEMM on int16 block codes, shared by its two levels
 * (gemm_i16_avx512.c: AVX-512 VNNI, 16 rows per tile; gemm_i16_avx2.c: AVX2, with AVX-VNNI's
 * vpdpwssd where the CPU has it, 8 rows per tile) and the portable pieces (gemm_i16.c).
 *
 * Why: f32 FMA caps F16 prompts at the core's f32 rate (docs/PERF-CPU.md section 9), and bf16
 * arithmetic is outside the F16 tolerance. vpdpwssd multiplies twice as many int16 pairs per
 * instruction as the f32 FMA has lanes, at the same issue rate on the cores measured (section 28).
 *
 * Contract of each level's rf_*_gemm_i16: y[t*n_out + o] = sum_k W[o][k] * x[t*n_in + k] for
 * t < n_tok and the rows taken from rq (chunks of multiples of 16 rows), W of type F16 or BF16
 * (row bytes rb, any n_in >= 1), x f32 [n_tok][n_in], y f32 [n_tok][n_out] not aliasing x.
 * - Every 32-element block along K of a weight row and of a token row is held as codes
 *   q = round(v / s), s = max|v| / RF_I16_QMAX, |q| <= RF_I16_QMAX = 8191 (the last block of a row
 *   zero-padded). The 32 products of two blocks sum exactly in int32: 32 * 8191^2 < 2^31, so the
 *   integer sums never wrap. Per block and token: y += (float(sum) * s_w) * s_x.
 * - Error per block: at most (s_w * sum|x| + s_x * sum|W| + s_w * s_x * 16) / 2 against the exact
 *   product (plus the float rounding of s and 1 / s), about 6e-5 of max|W| * sum|x| + 6e-5 of
 *   max|x| * sum|W|: ~1e-4 of sum|W x| at random values. A code keeps 13 bits against its block's
 *   largest element, more than f16's 11 wherever the block spans less than 2^3.
 * - One token, or a token row holding NaN/inf or a block whose scale would be subnormal: the
 *   whole call takes the level's f32 path; the function returns 0 then, 1 otherwise. A tile
 *   whose weights hold NaN/inf (or, for BF16, a block's max outside [2^-100, 2^100]) is
 *   recomputed in f32 from its weights, so non-finite values propagate as in an f32 dot product.
 * - Threads call it concurrently with the same rq; each packs x itself (scratch slot 1) and its
 *   weight chunks (slot 0). */
#ifndef RF_GEMM_I16_H
#define RF_GEMM_I16_H

#include <stdint.h>

#include "backend/cpu/matmul_kernels.h"

enum { RF_I16_QMAX = 8191 };

/* x's codes for a level whose micro-kernel takes gt tokens per pass: q [tg][b][16][gt] dwords
 * (one dword = the codes of elements 32b + 2g and 32b + 2g + 1 of one token), d [tg][b][gt]
 * scales; tokens past n_tok and blocks of zeros stay zero. Each level fills it with its own SIMD
 * conversion (rf_i16_x_put per token and block) and refuses a token row that cannot be held so
 * (NaN/inf, or a nonzero block whose max is below RF_I16_QMAX * FLT_MIN). */
typedef struct {
    int32_t *q;
    float *d;
    int64_t nb;
    int gt;
} rf_i16_x;

/* The layout for n_tok tokens of n_in, zeroed, in the calling thread's scratch slot 1. */
rf_i16_x rf_i16_x_alloc(int64_t n_in, int64_t n_tok, int gt);

/* Token t's block b: its 16 code pairs and its scale. */
static inline void rf_i16_x_put(const rf_i16_x *x, int64_t t, int64_t b, const int32_t pairs[16], float d) {
    const int64_t tg = t / x->gt, tj = t % x->gt;
    int32_t *o = x->q + (tg * x->nb + b) * 16 * x->gt + tj;
    for (int g = 0; g < 16; g++) o[g * x->gt] = pairs[g];
    x->d[(tg * x->nb + b) * x->gt + tj] = d;
}

/* Rows [0, nr) of W (at wr, row bytes rb; kind 1 F16, 2 BF16) against every token, in f32 one
 * product at a time, into y[t*n_out + i]: the tile fallback. */
void rf_i16_tile_f32(const uint8_t *wr, uint64_t rb, int nr, int64_t n_in, const float *x, int64_t n_tok, float *y,
                     int64_t n_out, int kind);

/* The levels' entries (the contract above) and installers: rf_mm_gemm_i16_avx512 sets gemm_f32
 * of F16 / BF16 where the CPU has AVX512_VNNI, rf_mm_gemm_i16_avx2 on every AVX2 CPU (with
 * vpdpwssd where it has AVX-VNNI; the whole-call fallback there is the table's per-row f32
 * kernels, so it installs after them). rf_avx2_gemm_i16's vnni selects the variant (tests). */
int rf_avx512_gemm_i16(uint32_t type, const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in,
                       const float *x, int64_t n_tok, float *y);
void rf_mm_gemm_i16_avx512(rf_mm_kernels *k);
int rf_avx2_gemm_i16(uint32_t type, const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in,
                     const float *x, int64_t n_tok, float *y, int vnni);
int rf_avx2_has_vnni(void);
void rf_mm_gemm_i16_avx2(rf_mm_kernels *k);

#endif
