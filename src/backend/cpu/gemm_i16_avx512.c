/* gemm_i16_avx512.c: the F16 / BF16 GEMM on int16 block codes (contract, error bound and
 * fallbacks in gemm_i16.h) at the AVX-512 level, with AVX-512 VNNI's vpdpwssd: 32 int16 pairs per
 * instruction, tiles of 16 rows (one per lane) and passes of 8 tokens. */
#if !defined(__clang__)
#pragma GCC target("avx512vnni")
#endif
#include <immintrin.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__) /* clang ignores GCC's target pragma: the same feature by its own, to the end of the file */
#pragma clang attribute push(__attribute__((target("avx512vnni"))), apply_to = function)
#endif

#include "backend/cpu/avx512_tr16.h"
#include "backend/cpu/gemm_i16.h"
#include "backend/cpu/thread_scratch.h"
#include "core/util.h"

#define AI static inline __attribute__((always_inline))

enum {
    GT = 8,             /* tokens per micro-kernel pass */
    KC = 512,           /* K elements per packed weight chunk (multiple of 32) */
    REC = 16 * 64 + 64, /* one packed block of 16 rows: 16 pair steps of [16 rows] dwords, 16 f32 scales */
    XREC = 16 * GT,     /* one packed activation block of a token group: [16 pairs][GT tokens] dwords */
};

/* x's codes (gemm_i16.h's layout for GT tokens per pass); nonzero if a token row cannot be held. */
static int pack_x(const float *x, int64_t n_in, int64_t n_tok, rf_i16_x *out) {
    const rf_i16_x p = rf_i16_x_alloc(n_in, n_tok, GT);
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    for (int64_t t = 0; t < n_tok; t++) {
        const float *xr = x + t * n_in;
        for (int64_t b = 0; b < p.nb; b++) {
            const int64_t n = RF_MIN(32, n_in - 32 * b);
            const __mmask16 k0 = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
            const __mmask16 k1 = (__mmask16)(n <= 16 ? 0 : n >= 32 ? 0xFFFF : (1u << (n - 16)) - 1);
            const __m512 a = _mm512_maskz_loadu_ps(k0, xr + 32 * b), c = _mm512_maskz_loadu_ps(k1, xr + 32 * b + 16);
            /* classes QNaN, +inf, -inf, SNaN */
            if (_mm512_fpclass_ps_mask(a, 0x99) | _mm512_fpclass_ps_mask(c, 0x99)) return 1;
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(a, absm), _mm512_and_ps(c, absm)));
            if (amax > 0 && amax < (float)RF_I16_QMAX * FLT_MIN) return 1;
            if (amax == 0) continue;
            const __m512 inv = _mm512_set1_ps((float)RF_I16_QMAX / amax);
            const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, inv)), qc = _mm512_cvtps_epi32(_mm512_mul_ps(c, inv));
            int32_t pairs[16];
            _mm256_storeu_si256((__m256i *)(void *)pairs, _mm512_cvtepi32_epi16(qa));
            _mm256_storeu_si256((__m256i *)(void *)(pairs + 8), _mm512_cvtepi32_epi16(qc));
            rf_i16_x_put(&p, t, b, pairs, amax / (float)RF_I16_QMAX);
        }
    }
    *out = p;
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
        const __m512 inv = _mm512_maskz_div_ps(nz, _mm512_set1_ps((float)RF_I16_QMAX), amax);
        _mm512_store_ps((float *)(pk + 16 * 64), _mm512_div_ps(amax, _mm512_set1_ps((float)RF_I16_QMAX)));
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

AI int gemm_i16(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                int64_t n_tok, float *y, const int kind) {
    rf_i16_x px;
    if (n_tok < RF_I16_MIN_TOK || pack_x(x, n_in, n_tok, &px)) {
        rf_avx512_gemm_h_f32(w, rb, rq, n_out, n_in, x, n_tok, y, kind);
        return 0;
    }
    const int64_t nb = px.nb, kcb = KC / 32, ntg = (n_tok + GT - 1) / GT;
    const int32_t *xq = px.q;
    const float *xd = px.d;
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
                const rf_i16_next next = rf_i16_next_chunk(wr, rb, nr, 16, r, r1, b0, kcb, nb);
                for (int64_t tg = 0; tg < ntg; tg++) {
                    rf_i16_prefetch(&next, rb, tg, ntg);
                    const int T = (int)RF_MIN(GT, n_tok - tg * GT);
                    const int64_t o = tg * nb + b0;
                    mk_i16_any(pk, nbc, T, xq + o * XREC, xd + o * GT, y + tg * GT * n_out + r, n_out, mask, b0 > 0);
                }
            }
            if (bad) rf_i16_tile_f32(wr, rb, nr, n_in, x, n_tok, y + r, n_out, kind);
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
    k->gemm_f32_min_tok[RF_TYPE_F16] = k->gemm_f32_min_tok[RF_TYPE_BF16] = RF_I16_ROWS_BELOW;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
