/* gemm_i16_avx2.c: the F16 / BF16 GEMM on int16 block codes (contract, error bound and fallbacks
 * in gemm_i16.h) at the AVX2 level: tiles of 8 rows (one per lane), passes of 6 tokens (2T + 4
 * live registers, as gemm_avx2.c counts them). The pair products run on AVX-VNNI's vpdpwssd (16
 * int16 pairs per instruction) where the CPU has it, else on vpmaddwd + vpaddd. The whole-call
 * fallback is the level's per-row f32 kernels (matmul_x86.inc), taken from the table at install.
 * Compiled with AVX2, FMA and F16C (a *_avx2.c file); installed only on CPUs that have them. */
#include <immintrin.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm_i16.h"
#include "backend/cpu/thread_scratch.h"
#include "backend/cpu/x86_shared.h"
#include "core/util.h"

#define AI static inline __attribute__((always_inline))

enum {
    GT = 6,             /* tokens per micro-kernel pass */
    KC = 512,           /* K elements per packed weight chunk (multiple of 32) */
    REC = 16 * 32 + 32, /* one packed block of 8 rows: 16 pair steps of [8 rows] dwords, 8 f32 scales */
    XREC = 16 * GT,     /* one packed activation block of a token group: [16 pairs][GT tokens] dwords */
};

static rf_dot_f32_fn row_f32[3]; /* by kind (1 F16, 2 BF16): the table's per-row f32 kernels */

/* AVX-VNNI's vpdpwssd (VEX form): a += the pair products of w and x, as inline assembly so that
 * this one instruction, and nothing the compiler might choose, needs the feature. */
AI __m256i dot_vnni(__m256i a, __m256i w, __m256i x) {
    __asm__("%{vex%} vpdpwssd %2, %1, %0" : "+x"(a) : "x"(w), "x"(x));
    return a;
}
AI __m256i dot_step(__m256i a, __m256i w, __m256i x, const int vnni) {
    return vnni ? dot_vnni(a, w, x) : add32_chain(a, _mm256_madd_epi16(w, x));
}

/* x's codes (gemm_i16.h's layout for GT tokens per pass); nonzero if a token row cannot be held. */
static int pack_x(const float *x, int64_t n_in, int64_t n_tok, rf_i16_x *out) {
    const rf_i16_x p = rf_i16_x_alloc(n_in, n_tok, GT);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), big = _mm256_set1_ps(FLT_MAX);
    for (int64_t t = 0; t < n_tok; t++) {
        const float *xr = x + t * n_in;
        for (int64_t b = 0; b < p.nb; b++) {
            const int64_t n = RF_MIN(32, n_in - 32 * b);
            float tail[32];
            const float *src = xr + 32 * b;
            if (n < 32) { /* the row's last elements, zero-padded */
                memset(tail, 0, sizeof tail);
                memcpy(tail, src, sizeof(float) * (size_t)n);
                src = tail;
            }
            __m256 v[4], m = _mm256_setzero_ps();
            int bad = 0;
            for (int i = 0; i < 4; i++) {
                v[i] = _mm256_loadu_ps(src + 8 * i);
                const __m256 a = _mm256_and_ps(v[i], absm);
                bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, big, _CMP_NLE_UQ)); /* NaN or inf */
                m = _mm256_max_ps(m, a);
            }
            if (bad) return 1;
            const float amax = hmax8(m);
            if (amax > 0 && amax < (float)RF_I16_QMAX * FLT_MIN) return 1;
            if (amax == 0) continue;
            const __m256 inv = _mm256_set1_ps((float)RF_I16_QMAX / amax);
            int32_t pairs[16];
            for (int h = 0; h < 2; h++) { /* 16 codes as words in order: 8 dwords of pairs */
                const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(v[2 * h], inv));
                const __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(v[2 * h + 1], inv));
                _mm256_storeu_si256((__m256i *)(void *)(pairs + 8 * h), _mm256_permute4x64_epi64(_mm256_packs_epi32(a, c), 0xD8));
            }
            rf_i16_x_put(&p, t, b, pairs, amax / (float)RF_I16_QMAX);
        }
    }
    *out = p;
    return 0;
}

/* The low and high halves of each dword of v (8 pairs of f16 or bf16) as f32. */
AI void h_split(__m256i v, const int kind, __m256 *lo, __m256 *hi) {
    if (kind == 1) { /* per 128-bit half: low words to qword 0, high words to qword 1; then the halves' qwords paired */
        const __m256i idx = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12,
                                             13, 2, 3, 6, 7, 10, 11, 14, 15);
        const __m256i p = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, idx), 0xD8);
        *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(p));
        *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(p, 1));
    } else {
        *lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        *hi = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u)));
    }
}

/* Blocks [b0, b0 + nbc) of the 8 rows at wr + ridx[i] into records of REC bytes: lane i of dword
 * vector g holds row i's codes of elements 32b + 2g and 32b + 2g + 1. Returns nonzero if a block
 * holds NaN/inf (or, for BF16, a scale out of range). */
AI int pack_w(const uint8_t *wr, const int64_t *ridx, int64_t n_in, int64_t b0, int64_t nbc, uint8_t *pk,
              const int kind) {
    int bad = 0;
    const __m256i absm = _mm256_set1_epi32(0x7FFF7FFF), lo16 = _mm256_set1_epi32(0xFFFF);
    for (int64_t b = b0; b < b0 + nbc; b++, pk += REC) {
        const int64_t n = RF_MIN(32, n_in - 32 * b); /* elements of this block (the last may be short) */
        __m256i v[16];
        for (int i = 0; i < 8; i++) {
            const uint8_t *p = wr + ridx[i] + 64 * b;
            uint8_t tail[64];
            if (n < 32) { /* the row's last elements, zero-padded: no read past the row */
                memset(tail, 0, sizeof tail);
                memcpy(tail, p, (size_t)(2 * n));
                p = tail;
            }
            v[i] = _mm256_loadu_si256((const __m256i *)p);
            v[8 + i] = _mm256_loadu_si256((const __m256i *)(p + 32));
        }
        tr8(v);
        tr8(v + 8);
        /* |h| as an unsigned 16-bit integer orders like the value for both formats */
        __m256i m = _mm256_setzero_si256();
        for (int e = 0; e < 16; e++) m = _mm256_max_epu16(m, _mm256_and_si256(v[e], absm));
        m = _mm256_and_si256(_mm256_max_epu16(m, _mm256_srli_epi32(m, 16)), lo16);
        __m256 amax, unused;
        h_split(m, kind, &amax, &unused);
        if (kind == 1) bad |= _mm256_movemask_epi8(_mm256_cmpgt_epi32(m, _mm256_set1_epi32(0x7BFF)));
        else
            bad |= _mm256_movemask_epi8(_mm256_cmpgt_epi32(m, _mm256_set1_epi32(0x7F7F))) |
                   _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(amax, _mm256_setzero_ps(), _CMP_NEQ_OQ),
                                                    _mm256_cmp_ps(amax, _mm256_set1_ps(0x1p-100f), _CMP_LT_OQ))) |
                   _mm256_movemask_ps(_mm256_cmp_ps(amax, _mm256_set1_ps(0x1p100f), _CMP_GT_OQ));
        const __m256 nz = _mm256_cmp_ps(amax, _mm256_setzero_ps(), _CMP_NEQ_OQ);
        const __m256 inv = _mm256_and_ps(nz, _mm256_div_ps(_mm256_set1_ps((float)RF_I16_QMAX), amax));
        _mm256_store_ps((float *)(void *)(pk + 16 * 32), _mm256_div_ps(amax, _mm256_set1_ps((float)RF_I16_QMAX)));
        for (int e = 0; e < 16; e++) {
            __m256 lo, hi;
            h_split(v[e], kind, &lo, &hi);
            const __m256i ql = _mm256_cvtps_epi32(_mm256_mul_ps(lo, inv)), qh = _mm256_cvtps_epi32(_mm256_mul_ps(hi, inv));
            _mm256_store_si256((__m256i *)(void *)(pk + 32 * e), _mm256_blend_epi16(ql, _mm256_slli_epi32(qh, 16), 0xAA));
        }
    }
    return bad != 0;
}

/* nb records against T <= GT tokens, 8 rows of y (mask: lanes of the valid rows all ones). */
AI void mk_i16(const uint8_t *pk, int64_t nb, const int T, const int32_t *xq, const float *xd, float *y,
               int64_t n_out, __m256i mask, int accumulate, const int vnni) {
    __m256 acc[GT];
    _Pragma("GCC unroll 6") for (int t = 0; t < T; t++)
        acc[t] = accumulate ? _mm256_maskload_ps(y + t * n_out, mask) : _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, pk += REC, xq += XREC, xd += GT) {
        __m256i ia[GT];
        const __m256i w0 = _mm256_load_si256((const __m256i *)(const void *)pk);
        _Pragma("GCC unroll 6") for (int t = 0; t < T; t++) ia[t] = _mm256_madd_epi16(w0, _mm256_set1_epi32(xq[t]));
        _Pragma("GCC unroll 15") for (int g = 1; g < 16; g++) {
            const __m256i wv = _mm256_load_si256((const __m256i *)(const void *)(pk + 32 * g));
            _Pragma("GCC unroll 6") for (int t = 0; t < T; t++)
                ia[t] = dot_step(ia[t], wv, _mm256_set1_epi32(xq[g * GT + t]), vnni);
        }
        const __m256 s = _mm256_load_ps((const float *)(const void *)(pk + 16 * 32));
        _Pragma("GCC unroll 6") for (int t = 0; t < T; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(ia[t]), s), _mm256_set1_ps(xd[t]), acc[t]);
    }
    _Pragma("GCC unroll 6") for (int t = 0; t < T; t++) _mm256_maskstore_ps(y + t * n_out, mask, acc[t]);
}

#define MK_ANY(name, vnni)                                                                                  \
    static void name(const uint8_t *pk, int64_t nb, int T, const int32_t *xq, const float *xd, float *y,  \
                     int64_t n_out, __m256i mask, int acc) {                                              \
        switch (T) {                                                                                      \
        case 1: mk_i16(pk, nb, 1, xq, xd, y, n_out, mask, acc, vnni); break;                              \
        case 2: mk_i16(pk, nb, 2, xq, xd, y, n_out, mask, acc, vnni); break;                              \
        case 3: mk_i16(pk, nb, 3, xq, xd, y, n_out, mask, acc, vnni); break;                              \
        case 4: mk_i16(pk, nb, 4, xq, xd, y, n_out, mask, acc, vnni); break;                              \
        case 5: mk_i16(pk, nb, 5, xq, xd, y, n_out, mask, acc, vnni); break;                              \
        default: mk_i16(pk, nb, GT, xq, xd, y, n_out, mask, acc, vnni); break;                            \
        }                                                                                                 \
    }
MK_ANY(mk_plain, 0)
MK_ANY(mk_vnni, 1)

/* The whole call on the per-row f32 kernels (4 tokens per row pass), rows from rq; before the
 * installer has run (a direct rf_avx2_gemm_i16 call), on the portable tile fallback. */
static void rows_f32(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                     int64_t n_tok, float *y, int kind) {
    int64_t r0, r1;
    float out[4];
    while (rf_rowq_take(rq, &r0, &r1)) {
        if (!row_f32[kind]) {
            rf_i16_tile_f32(w + (uint64_t)r0 * rb, rb, (int)(r1 - r0), n_in, x, n_tok, y + r0, n_out, kind);
            continue;
        }
        for (int64_t t0 = 0; t0 < n_tok; t0 += 4) {
            const int nt = (int)RF_MIN(4, n_tok - t0);
            for (int64_t o = r0; o < r1; o++) {
                row_f32[kind](w + (uint64_t)o * rb, n_in, x + t0 * n_in, nt, out);
                for (int j = 0; j < nt; j++) y[(t0 + j) * n_out + o] = out[j];
            }
        }
    }
}

static int gemm_i16(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                    int64_t n_tok, float *y, const int kind, const int vnni) {
    rf_i16_x px;
    if (n_tok < RF_I16_MIN_TOK || pack_x(x, n_in, n_tok, &px)) {
        rows_f32(w, rb, rq, n_out, n_in, x, n_tok, y, kind);
        return 0;
    }
    const int64_t nb = px.nb, kcb = KC / 32, ntg = (n_tok + GT - 1) / GT;
    const int32_t *xq = px.q;
    const float *xd = px.d;
    uint8_t *pk = rf_thread_scratch(0, (size_t)(kcb * REC));
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r += 8) {
            const int nr = (int)RF_MIN(8, r1 - r);
            int64_t ridx[8];
            int32_t lanes[8];
            for (int i = 0; i < 8; i++) ridx[i] = (int64_t)((uint64_t)RF_MIN(i, nr - 1) * rb), lanes[i] = i < nr ? -1 : 0;
            const __m256i mask = _mm256_loadu_si256((const __m256i *)(const void *)lanes);
            const uint8_t *wr = w + (uint64_t)r * rb;
            int bad = 0;
            for (int64_t b0 = 0; b0 < nb; b0 += kcb) {
                const int64_t nbc = RF_MIN(kcb, nb - b0);
                bad |= kind == 1 ? pack_w(wr, ridx, n_in, b0, nbc, pk, 1) : pack_w(wr, ridx, n_in, b0, nbc, pk, 2);
                const rf_i16_next next = rf_i16_next_chunk(wr, rb, nr, 8, r, r1, b0, kcb, nb);
                for (int64_t tg = 0; tg < ntg; tg++) {
                    rf_i16_prefetch(&next, rb, tg, ntg);
                    const int T = (int)RF_MIN(GT, n_tok - tg * GT);
                    const int64_t o = tg * nb + b0;
                    if (vnni) mk_vnni(pk, nbc, T, xq + o * XREC, xd + o * GT, y + tg * GT * n_out + r, n_out, mask, b0 > 0);
                    else mk_plain(pk, nbc, T, xq + o * XREC, xd + o * GT, y + tg * GT * n_out + r, n_out, mask, b0 > 0);
                }
            }
            if (bad) rf_i16_tile_f32(wr, rb, nr, n_in, x, n_tok, y + r, n_out, kind);
        }
    return 1;
}

static int have_vnni;

int rf_avx2_has_vnni(void) { return rf_cpu_has_avxvnni(); }

int rf_avx2_gemm_i16(uint32_t type, const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in,
                     const float *x, int64_t n_tok, float *y, int vnni) {
    if (type != RF_TYPE_F16 && type != RF_TYPE_BF16) abort();
    return gemm_i16(w, rb, rq, n_out, n_in, x, n_tok, y, type == RF_TYPE_F16 ? 1 : 2, vnni);
}

static void gemm_f16_i16(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                         int64_t n_tok, float *y) {
    gemm_i16(w, rb, rq, n_out, n_in, x, n_tok, y, 1, have_vnni);
}
static void gemm_bf16_i16(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                          int64_t n_tok, float *y) {
    gemm_i16(w, rb, rq, n_out, n_in, x, n_tok, y, 2, have_vnni);
}

void rf_mm_gemm_i16_avx2(rf_mm_kernels *k) {
    if (!k->f32[RF_TYPE_F16] || !k->f32[RF_TYPE_BF16]) return; /* the fallback must exist */
    row_f32[1] = k->f32[RF_TYPE_F16];
    row_f32[2] = k->f32[RF_TYPE_BF16];
    have_vnni = rf_avx2_has_vnni();
    k->gemm_f32[RF_TYPE_F16] = gemm_f16_i16;
    k->gemm_f32[RF_TYPE_BF16] = gemm_bf16_i16;
    k->gemm_f32_min_tok[RF_TYPE_F16] = k->gemm_f32_min_tok[RF_TYPE_BF16] = RF_I16_ROWS_BELOW;
}
