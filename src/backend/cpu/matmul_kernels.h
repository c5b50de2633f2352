/* matmul_kernels.h: internal interface between the matmul driver (matmul.c) and its per-ISA
 * kernels (matmul_avx2.c, matmul_avx512.c). Not part of the public API.
 *
 * Activations for the int8 path: every token row of x is cut into 32-element blocks, each
 * quantized as q = round(x / d), d = max|x| / 127 (q in -127..127). Per block the driver also
 * keeps d * sum(q) (for the constant offsets/mins of weight formats) and per 16 elements the
 * integer sum of q (for Q6_K's 16-element sub-blocks).
 */
#ifndef RF_MATMUL_KERNELS_H
#define RF_MATMUL_KERNELS_H

#include <stdint.h>

#include "core/dtype.h"

typedef struct {
    int64_t n_in;
    const int8_t *q;     /* [n_tok][n_in] */
    const float *d;      /* [n_tok][n_in/32] */
    const float *dsum;   /* [n_tok][n_in/32] d * sum of the block's q */
    const int16_t *s16;  /* [n_tok][n_in/16] sum of each 16 q */
} rf_xq8;

/* Dot products of one weight row (n_in elements) with tokens t0 .. t0+nt-1 (1 <= nt <= 4):
 * out[j] = row . x[t0 + j]. */
typedef void (*rf_dot_q8_fn)(const uint8_t *w, const rf_xq8 *x, int64_t t0, int nt, float *out);
/* Same for f32 activations (x rows of n_in floats, token j at x + j*n_in). */
typedef void (*rf_dot_f32_fn)(const uint8_t *w, int64_t n_in, const float *x, int nt, float *out);

/* Rows handed out in chunks to whichever thread asks next: a thread that the OS has not
 * scheduled yet simply takes fewer chunks. The gemv path uses one chunk per thread (a stream
 * each; matmul.c's mm_chunks), so a thread descheduled in the middle of its chunk holds that
 * matvec up; the gemm path has several per thread. */
typedef struct {
    int64_t next; /* accessed with __atomic builtins */
    int64_t end, chunk;
} rf_rowq;

static inline int rf_rowq_take(rf_rowq *q, int64_t *r0, int64_t *r1) {
    const int64_t a = __atomic_fetch_add(&q->next, q->chunk, __ATOMIC_RELAXED);
    if (a >= q->end) return 0;
    *r0 = a;
    *r1 = a + q->chunk < q->end ? a + q->chunk : q->end;
    return 1;
}

/* Many-token tiled GEMM: y[t*n_out + o] for every t < n_tok and the rows taken from `rows`
 * (chunks are multiples of 16 rows). The kernel packs 16-row tiles of W into a layout where one
 * SIMD lane is one row and reuses each tile for every token. */
typedef void (*rf_gemm_q8_fn)(const uint8_t *w, uint64_t row_bytes, rf_rowq *rows, int64_t n_out,
                              const rf_xq8 *x, int64_t n_tok, float *y);
typedef void (*rf_gemm_f32_fn)(const uint8_t *w, uint64_t row_bytes, rf_rowq *rows, int64_t n_out,
                               int64_t n_in, const float *x, int64_t n_tok, float *y);

/* One token (n_tok == 1): y[o] = row o . x for the rows taken from `rows`. */
typedef void (*rf_gemv_q8_fn)(const uint8_t *w, uint64_t row_bytes, rf_rowq *rows, const rf_xq8 *x,
                              float *y);
typedef void (*rf_gemv_f32_fn)(const uint8_t *w, uint64_t row_bytes, rf_rowq *rows, int64_t n_in,
                               const float *x, float *y);

typedef struct {
    rf_gemv_q8_fn gemv_q8[RF_TYPE_COUNT];   /* NULL where absent */
    rf_gemv_f32_fn gemv_f32[RF_TYPE_COUNT]; /* NULL where absent */
    rf_gemm_q8_fn gemm_q8[RF_TYPE_COUNT];   /* NULL where absent */
    rf_gemm_f32_fn gemm_f32[RF_TYPE_COUNT]; /* NULL where absent */
    /* Per type, the fewest tokens for which the driver takes gemm_q8 (0 counts as 1); fewer take
     * gemv_q8 or the per-row q8 kernels. */
    int gemm_q8_min_tok[RF_TYPE_COUNT];
    /* The same for gemm_f32 (0 counts as 1); fewer take the per-row f32 kernels. */
    int gemm_f32_min_tok[RF_TYPE_COUNT];
    rf_dot_q8_fn q8[RF_TYPE_COUNT];   /* int8-activation kernels, NULL where absent */
    rf_dot_f32_fn f32[RF_TYPE_COUNT]; /* f32-activation kernels (F32/F16/BF16), NULL where absent */
    /* sum_i a[i]*b[i] in f32 (used by the generic decode-then-dot path). */
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    /* Quantizes n (multiple of 32) floats as described above; returns nonzero if the row must
     * take the f32 path (a NaN/inf, or a block whose scale would be subnormal). NULL: use the
     * portable C version. */
    int (*quantize_x)(const float *x, int64_t n, int8_t *q, float *d, float *dsum, int16_t *s16);
} rf_mm_kernels;

/* The activations of a tiled GEMM call regrouped per GT tokens and weight block of BS = 4G
 * elements (G = 8: 32-element blocks; G = 4: 16-element blocks), so that a micro-kernel reaches
 * every token of a pass through one pointer: q [tg][b][GT][BS] codes, and [tg][b][GT] of
 * z = -zp * sum(q), d and ds = d * sum(q) (the block's, or for G = 4 the 16 elements'); tokens
 * past n_tok are zero. In the calling thread's scratch slot 1 (thread_scratch.h), valid until
 * its next use. */
typedef struct {
    int8_t *q;
    int32_t *z;
    float *d, *ds;
} rf_gemm_x;
rf_gemm_x rf_gemm_pack_x(const rf_xq8 *x, int64_t n_tok, int G, int zp, int GT);

/* The AVX-512 int8 GEMM with another micro-kernel (gemm_amx.c's): the same weight packing (per
 * block of BS = 4G elements and 16 rows, a record of G x 64 bytes of unsigned codes u as [k/4]
 * [row][4], then 16 f32 scales s, then for formats with mins 16 f32 m; with signed_codes the
 * codes are u - zp as int8 instead), the same activation packing (rf_gemm_pack_x with GT = gt),
 * chunking, prefetch and accumulation through y between chunks. mk: nbc records at pk against
 * T <= gt tokens, xp / xz / xd / xds of the pass's first block, 16 rows of y (mask: the valid
 * ones), adding to y when acc. rf_avx512_q8_format gives the type's G, mins and zero point, or
 * returns 0 for a type without an AVX-512 GEMM (then rf_avx512_gemm_q8_with must not be
 * called). */
typedef void (*rf_mk_q8_fn)(const uint8_t *pk, int64_t nbc, int T, const int8_t *xp, const int32_t *xz,
                            const float *xd, const float *xds, float *y, int64_t n_out, uint16_t mask, int acc);
int rf_avx512_q8_format(uint32_t type, int *G, int *has_m, int *zp);
void rf_avx512_gemm_q8_with(uint32_t type, const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x,
                            int64_t n_tok, float *y, int gt, rf_mk_q8_fn mk, int signed_codes);

/* The AVX-512 f32 GEMM of F16 (kind 1) or BF16 (kind 2) weights (matmul_avx512.c): the
 * rf_gemm_f32_fn contract, computed in f32. */
void rf_avx512_gemm_h_f32(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                          int64_t n_tok, float *y, int kind);

void rf_mm_kernels_avx2(rf_mm_kernels *k);
void rf_mm_gemm_avx2(rf_mm_kernels *k);     /* gemm_avx2.c: the AVX2 int8 GEMM entries */
void rf_mm_gemv_avx2(rf_mm_kernels *k);     /* gemv_avx2.c: the AVX2 int8 matvec entries */
void rf_mm_kernels_avx512(rf_mm_kernels *k); /* fills over an AVX2 table */
void rf_mm_kernels_amx(rf_mm_kernels *k);    /* gemm_amx.c: fills over an AVX-512 table */

#endif
