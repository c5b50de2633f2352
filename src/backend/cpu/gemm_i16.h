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
#include "backend/cpu/prefetch.h"
#include "core/util.h"

/* RF_I16_MIN_TOK: fewer tokens (one) take the level's f32 path (the contract above). */
enum { RF_I16_QMAX = 8191, RF_I16_MIN_TOK = 2 };

/* Below this many tokens the driver takes the per-row f32 kernels (both installers set it as
 * gemm_f32_min_tok), which read each row once for up to 4 tokens and pack nothing. 1B F16, -t 2,
 * t/s per-row / this GEMM: AVX-512 pp2 36-38 / 19, pp4 35-37 / 32-34, pp6 41-43 / 46-47, pp8
 * 51-52 / 64-65; AVX2 pp2 36-38 / 13-16, pp4 35-36 / 30-31, pp6 42-43 / 43-45, pp8 47-51 / 55-57
 * (docs/PERF-CPU.md section 29). */
#ifndef RF_I16_ROWS_BELOW
#define RF_I16_ROWS_BELOW 5
#endif

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

/* The next weights a tile pass should ask for: while the passes over chunk [b0, b0 + kcb) of a
 * tile (row r of the take [r0, r1), tile rows per tile) run, the lines of the same rows' next
 * chunk, or the next tile's first, a share per pass (rf_i16_prefetch): the rows sit in separate
 * pages, which the hardware prefetchers follow poorly. 64 bytes per 32-block (2-byte weights). */
typedef struct {
    const uint8_t *w; /* the first row's start; NULL: nothing to fetch */
    uint64_t off;     /* the chunk's byte offset in each row */
    int64_t lines;    /* 64-byte lines per row */
    int nr;           /* rows */
} rf_i16_next;

static inline rf_i16_next rf_i16_next_chunk(const uint8_t *wr, uint64_t rb, int nr, int tile, int64_t r, int64_t r1,
                                            int64_t b0, int64_t kcb, int64_t nb) {
    rf_i16_next n = {NULL, 0, 0, 0};
    if (b0 + kcb < nb) n.w = wr, n.off = 64 * (uint64_t)(b0 + kcb), n.nr = nr;
    else if (r + tile < r1) n.w = wr + (uint64_t)tile * rb, n.nr = (int)RF_MIN(tile, r1 - r - tile);
    if (n.w) n.lines = (int64_t)((RF_MIN(64 * (uint64_t)kcb, rb - n.off) + 63) / 64);
    return n;
}

/* Pass p of np asks for its share of n's lines (into L1: section 28's T0 / T1 comparison). */
static inline void rf_i16_prefetch(const rf_i16_next *n, uint64_t rb, int64_t p, int64_t np) {
    for (int64_t l = p * n->lines / np; l < (p + 1) * n->lines / np; l++)
        for (int i = 0; i < n->nr; i++) rf_prefetch_l1(n->w + (uint64_t)i * rb + n->off + 64 * (uint64_t)l);
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
