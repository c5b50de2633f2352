/* gemm_i16_avx512.c: the F16 / BF16 prompt GEMM on AVX-512 VNNI's int16 dot product (vpdpwssd).
 *
 * Why: f32 FMA caps the F16 prompt at this machine's f32 rate (docs/PERF-CPU.md section 9), and
 * bf16 arithmetic is outside the F16 tolerance. vpdpwssd multiplies 32 pairs of int16 per
 * instruction, twice the f32 FMA's 16, at the same issue rate on the cores measured. Both
 * operands become 14-bit block integers, which keep more bits of each f16 weight than f16 itself
 * has wherever a block's magnitudes stay within ~2^3 of its largest.
 *
 * Contract (rf_avx512_gemm_i16): y[t*n_out + o] = sum_k W[o][k] * x[t*n_in + k] for t < n_tok and
 * the rows taken from rq (chunks of multiples of 16 rows), W of type F16 or BF16 (row bytes rb,
 * any n_in >= 1), x f32 [n_tok][n_in], y f32 [n_tok][n_out] not aliasing x.
 * - Every 32-element block along K of a weight row and of a token row is held as codes
 *   q = round(v / s), s = max|v| / 8191, |q| <= 8191 (the last block of a row zero-padded). The
 *   32 products of two blocks sum exactly in int32: 32 * 8191^2 < 2^31, so vpdpwssd never wraps.
 *   Per block and token: y += (float(sum) * s_w) * s_x.
 * - Error per block: at most (s_w * sum|x| + s_x * sum|W| + s_w * s_x * 16) / 2 against the exact
 *   product, about 6e-5 of max|W| * sum|x| + 6e-5 of max|x| * sum|W| (typically ~1e-5 of
 *   sum|W x| for weights and activations of one block within an order of magnitude).
 * - Falls back to the f32 GEMM (rf_avx512_gemm_h_f32) for the whole call when n_tok is 1 or any
 *   token row holds NaN/inf or a block whose scale would be subnormal; returns 0 then, 1
 *   otherwise. A 16-row tile whose weights hold
 *   NaN/inf (or, for BF16, a block's max outside [2^-100, 2^100]) is recomputed in f32 from its
 *   weights, so non-finite values propagate as in an f32 dot product.
 * Threads call it concurrently with the same rq; each packs x itself (scratch slot 1) and its
 * weight chunks (slot 0). */
#pragma GCC target("avx512vnni")
#include <immintrin.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/avx512_tr16.h"
#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/thread_scratch.h"
#include "core/util.h"

#define AI static inline __attribute__((always_inline))

enum {
    QMAX = 8191,        /* largest code: 32 * QMAX^2 < 2^31 */
    GT = 8,             /* tokens per micro-kernel pass */
    KC = 512,          /* K elements per packed weight chunk (multiple of 32) */
    REC = 16 * 64 + 64, /* one packed block of 16 rows: 16 pair steps of [16 rows] dwords, 16 f32 scales */
    XREC = 16 * GT,     /* one packed activation block of a token group: [16 pairs][GT tokens] dwords */
    MIN_TOK = 2 /* from 2 tokens on: 1B F16 pp2 +17-28% over the f32 GEMM, pp8 +16%, pp64 +45% */
};

/* ---- Activations ---------------------------------------------------------------------------
 * Per token group of GT and 32-block b: codes xq [tg][b][16][GT] (one dword = the pair k, k+1 of
 * one token) and scales xd [tg][b][GT]; tokens past n_tok are zero. Returns nonzero if a token
 * row cannot be held so (NaN/inf, or a nonzero block below 8191 * FLT_MIN). */
static int pack_x(const float *x, int64_t n_in, int64_t n_tok, int32_t **xq_out, float **xd_out) {
    const int64_t nb = (n_in + 31) / 32, ntg = (n_tok + GT - 1) / GT;
    const size_t qb = sizeof(int32_t) * (size_t)(ntg * nb * XREC);
    uint8_t *sc = rf_thread_scratch(1, qb + sizeof(float) * (size_t)(ntg * nb * GT));
    int32_t *xq = (int32_t *)sc;
    float *xd = (float *)(sc + qb);
    memset(sc, 0, qb + sizeof(float) * (size_t)(ntg * nb * GT));
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    for (int64_t t = 0; t < n_tok; t++) {
        const float *xr = x + t * n_in;
        const int64_t tg = t / GT, tj = t % GT;
        for (int64_t b = 0; b < nb; b++) {
            const int64_t n = RF_MIN(32, n_in - 32 * b);
            const __mmask16 k0 = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
            const __mmask16 k1 = (__mmask16)(n <= 16 ? 0 : n >= 32 ? 0xFFFF : (1u << (n - 16)) - 1);
            const __m512 a = _mm512_maskz_loadu_ps(k0, xr + 32 * b), c = _mm512_maskz_loadu_ps(k1, xr + 32 * b + 16);
            /* classes QNaN, +inf, -inf, SNaN */
            if (_mm512_fpclass_ps_mask(a, 0x99) | _mm512_fpclass_ps_mask(c, 0x99)) return 1;
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(a, absm), _mm512_and_ps(c, absm)));
            if (amax > 0 && amax < (float)QMAX * FLT_MIN) return 1;
            if (amax == 0) continue;
            const __m512 inv = _mm512_set1_ps((float)QMAX / amax);
            const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, inv)), qc = _mm512_cvtps_epi32(_mm512_mul_ps(c, inv));
            int32_t pairs[16];
            _mm256_storeu_si256((__m256i *)pairs, _mm512_cvtepi32_epi16(qa));
            _mm256_storeu_si256((__m256i *)(pairs + 8), _mm512_cvtepi32_epi16(qc));
            int32_t *o = xq + (tg * nb + b) * XREC + tj;
            for (int g = 0; g < 16; g++) o[g * GT] = pairs[g];
            xd[(tg * nb + b) * GT + tj] = amax / (float)QMAX;
        }
    }
    *xq_out = xq;
    *xd_out = xd;
    return 0;
}

/* ---- Weights -------------------------------------------------------------------------------
 * Blocks [b0, b0 + nbc) of the 16 rows at wr + ridx[i] into records of REC bytes: lane i of
 * dword vector g holds row i's codes of elements 32b + 2g and 32b + 2g + 1. kind 1: F16, 2: BF16.
 * Returns nonzero if a block holds NaN/inf (or, for BF16, a scale out of range). */
AI __m512 h_lo(__m512i v, const int kind) {
    return kind == 1 ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)) : _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
AI __m512 h_hi(__m512i v, const int kind) {
    return kind == 1 ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)))
                     : _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xFFFF0000u)));
}

AI int pack_w(const uint8_t *wr, const int32_t *ridx, int64_t n_in, int64_t b0, int64_t nbc, uint8_t *pk,
              const int kind) {
    __mmask16 bad = 0;
    const __m512i absm = _mm512_set1_epi32(0x7FFF7FFF), lo16 = _mm512_set1_epi32(0xFFFF);
    for (int64_t b = b0; b < b0 + nbc; b++, pk += REC) {
        const int64_t n = RF_MIN(32, n_in - 32 * b); /* elements of this block (the last may be short) */
        const __mmask32 km = (__mmask32)(n >= 32 ? 0xFFFFFFFFu : (1u << n) - 1);
        __m512i v[16];
        if (n == 32)
            for (int i = 0; i < 16; i++) v[i] = _mm512_loadu_si512((const void *)(wr + ridx[i] + 64 * b));
        else
            for (int i = 0; i < 16; i++) v[i] = _mm512_maskz_loadu_epi16(km, wr + ridx[i] + 64 * b);
        tr16(v);
        /* |h| as an unsigned 16-bit integer orders like the value for both formats */
        __m512i m = _mm512_setzero_si512();
        for (int e = 0; e < 16; e++) m = _mm512_max_epu16(m, _mm512_and_si512(v[e], absm));
        m = _mm512_and_si512(_mm512_max_epu16(m, _mm512_srli_epi32(m, 16)), lo16);
        const __m512 amax = h_lo(m, kind);
        if (kind == 1) bad |= _mm512_cmpge_epu32_mask(m, _mm512_set1_epi32(0x7C00));
        else
            bad |= _mm512_cmpge_epu32_mask(m, _mm512_set1_epi32(0x7F80)) |
                   _mm512_mask_cmp_ps_mask(_mm512_cmpneq_ps_mask(amax, _mm512_setzero_ps()), amax,
                                           _mm512_set1_ps(0x1p-100f), _CMP_LT_OQ) |
                   _mm512_cmp_ps_mask(amax, _mm512_set1_ps(0x1p100f), _CMP_GT_OQ);
        const __mmask16 nz = _mm512_cmpneq_ps_mask(amax, _mm512_setzero_ps());
        const __m512 inv = _mm512_maskz_div_ps(nz, _mm512_set1_ps((float)QMAX), amax);
        _mm512_store_ps((float *)(pk + 16 * 64), _mm512_div_ps(amax, _mm512_set1_ps((float)QMAX)));
        for (int e = 0; e < 16; e++) {
            const __m512i ql = _mm512_cvtps_epi32(_mm512_mul_ps(h_lo(v[e], kind), inv));
            const __m512i qh = _mm512_cvtps_epi32(_mm512_mul_ps(h_hi(v[e], kind), inv));
            _mm512_store_si512((void *)(pk + 64 * e), _mm512_mask_blend_epi16(0xAAAAAAAAu, ql, _mm512_slli_epi32(qh, 16)));
        }
    }
    return bad != 0;
}

/* ---- Micro-kernel: nb records against T <= GT tokens, 16 rows of y (mask: the valid ones) ---- */
AI void mk_i16(const uint8_t *pk, int64_t nb, const int T, const int32_t *xq, const float *xd, float *y,
               int64_t n_out, __mmask16 mask, int accumulate) {
    __m512 acc[GT];
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)
        acc[t] = accumulate ? _mm512_maskz_loadu_ps(mask, y + t * n_out) : _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++, pk += REC, xq += XREC, xd += GT) {
        __m512i ia[GT];
        const __m512i w0 = _mm512_load_si512((const void *)pk);
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) ia[t] = _mm512_madd_epi16(w0, _mm512_set1_epi32(xq[t]));
        _Pragma("GCC unroll 15") for (int g = 1; g < 16; g++) {
            const __m512i wv = _mm512_load_si512((const void *)(pk + 64 * g));
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)
                ia[t] = _mm512_dpwssd_epi32(ia[t], wv, _mm512_set1_epi32(xq[g * GT + t]));
        }
        const __m512 s = _mm512_load_ps((const float *)(pk + 16 * 64));
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(ia[t]), s), _mm512_set1_ps(xd[t]), acc[t]);
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * n_out, mask, acc[t]);
}

static void mk_i16_any(const uint8_t *pk, int64_t nb, int T, const int32_t *xq, const float *xd, float *y,
                       int64_t n_out, __mmask16 mask, int acc) {
    switch (T) {
#define C_(n) case n: mk_i16(pk, nb, n, xq, xd, y, n_out, mask, acc); break;
    C_(1) C_(2) C_(3) C_(4) C_(5) C_(6) C_(7)
#undef C_
    default: mk_i16(pk, nb, GT, xq, xd, y, n_out, mask, acc); break;
    }
}

/* A tile whose weights the codes cannot hold: its nr rows in f32, one product at a time. */
static void tile_f32(const uint8_t *wr, uint64_t rb, int nr, int64_t n_in, const float *x, int64_t n_tok, float *y,
                     int64_t n_out, const int kind) {
    for (int i = 0; i < nr; i++) {
        const uint16_t *h = (const uint16_t *)(const void *)(wr + (uint64_t)i * rb);
        for (int64_t t = 0; t < n_tok; t++) {
            float s = 0;
            for (int64_t k = 0; k < n_in; k++)
                s += (kind == 1 ? rf_fp16_to_fp32(h[k]) : rf_bf16_to_fp32(h[k])) * x[t * n_in + k];
            y[t * n_out + i] = s;
        }
    }
}

#ifndef GEMM_I16_HINT
#define GEMM_I16_HINT _MM_HINT_T0
#endif

AI int gemm_i16(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                int64_t n_tok, float *y, const int kind) {
    int32_t *xq;
    float *xd;
    if (n_tok < MIN_TOK || pack_x(x, n_in, n_tok, &xq, &xd)) {
        rf_avx512_gemm_h_f32(w, rb, rq, n_out, n_in, x, n_tok, y, kind);
        return 0;
    }
    const int64_t nb = (n_in + 31) / 32, kcb = KC / 32, ntg = (n_tok + GT - 1) / GT;
    uint8_t *pk = rf_thread_scratch(0, (size_t)(kcb * REC));
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r += 16) {
            const int nr = (int)RF_MIN(16, r1 - r);
            int32_t ridx[16];
            for (int i = 0; i < 16; i++) ridx[i] = (int32_t)((uint64_t)RF_MIN(i, nr - 1) * rb);
            const __mmask16 mask = (__mmask16)((1u << nr) - 1);
            const uint8_t *wr = w + (uint64_t)r * rb;
            int bad = 0;
            for (int64_t b0 = 0; b0 < nb; b0 += kcb) {
                const int64_t nbc = RF_MIN(kcb, nb - b0);
                bad |= kind == 1 ? pack_w(wr, ridx, n_in, b0, nbc, pk, 1) : pack_w(wr, ridx, n_in, b0, nbc, pk, 2);
                /* the next chunk (or the next tile's first) into L2 while the passes run on this
                 * one, a share per pass: 16 rows in 16 pages, which the prefetchers follow poorly */
                const uint8_t *nw = NULL;
                uint64_t noff = 0, nlen = 0;
                int nnr = 0;
                if (b0 + kcb < nb) nw = wr, noff = 64 * (uint64_t)(b0 + kcb), nnr = nr;
                else if (r + 16 < r1) nw = wr + 16 * rb, nnr = (int)RF_MIN(16, r1 - r - 16);
                if (nw) nlen = RF_MIN(64 * (uint64_t)kcb, rb - noff);
                const int64_t nlines = (int64_t)((nlen + 63) / 64);
                for (int64_t tg = 0; tg < ntg; tg++) {
                    for (int64_t l = tg * nlines / ntg; l < (tg + 1) * nlines / ntg; l++)
                        for (int i = 0; i < nnr; i++)
                            _mm_prefetch((const char *)(nw + (uint64_t)i * rb + noff + 64 * (uint64_t)l), GEMM_I16_HINT);
                    const int T = (int)RF_MIN(GT, n_tok - tg * GT);
                    const int64_t o = tg * nb + b0;
                    mk_i16_any(pk, nbc, T, xq + o * XREC, xd + o * GT, y + tg * GT * n_out + r, n_out, mask, b0 > 0);
                }
            }
            if (bad) tile_f32(wr, rb, nr, n_in, x, n_tok, y + r, n_out, kind);
        }
    return 1;
}

int rf_avx512_gemm_i16(uint32_t type, const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in,
                       const float *x, int64_t n_tok, float *y) {
    if (type == RF_TYPE_F16) return gemm_i16(w, rb, rq, n_out, n_in, x, n_tok, y, 1);
    if (type == RF_TYPE_BF16) return gemm_i16(w, rb, rq, n_out, n_in, x, n_tok, y, 2);
    abort();
}

static void gemm_f16_i16(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                         int64_t n_tok, float *y) {
    gemm_i16(w, rb, rq, n_out, n_in, x, n_tok, y, 1);
}
static void gemm_bf16_i16(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                          int64_t n_tok, float *y) {
    gemm_i16(w, rb, rq, n_out, n_in, x, n_tok, y, 2);
}

void rf_mm_gemm_i16_avx512(rf_mm_kernels *k) {
    if (!__builtin_cpu_supports("avx512vnni")) return;
    k->gemm_f32[RF_TYPE_F16] = gemm_f16_i16;
    k->gemm_f32[RF_TYPE_BF16] = gemm_bf16_i16;
}
