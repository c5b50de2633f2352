/* attention_avx2.c: the AVX2 level of the SIMD attention (attention_simd.h): 8 positions per
 * block, head_dim a multiple of 8 (rows are read in whole vectors; other sizes run the
 * reference). Compiled with -mavx2 -mfma -mf16c; the dispatcher calls it only on such a CPU. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#define W 8
#define VF __m256
#define CV 2
#define SQ 2
#define HD_OK(hd) ((hd) > 0 && (hd) % 8 == 0)

/* lanes i < n all ones */
AI __m256i mask_n(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }

AI VF vzero(void) { return _mm256_setzero_ps(); }
AI VF vset1(float f) { return _mm256_set1_ps(f); }
AI VF vload(const float *p) { return _mm256_loadu_ps(p); }
AI void vstore(float *p, VF v) { _mm256_storeu_ps(p, v); }
AI VF vload_n(const float *p, int n) { return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask_n(n)); }
AI VF vloadh_n(const uint16_t *p, int n) {
    if (n >= 8) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    uint16_t t[8] = {0};
    memcpy(t, p, sizeof(uint16_t) * (size_t)(n > 0 ? n : 0));
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t));
}
AI VF vload_q8(const int8_t *p) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p))); }
/* One little-endian word of q4_0 codes (kv_format.h: element j at bits 4 (j / 2) + 16 (j % 2)). */
AI VF vload_q4(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, sizeof w);
    const __m256i sh = _mm256_setr_epi32(0, 16, 4, 20, 8, 24, 12, 28);
    const __m256i c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), sh), _mm256_set1_epi32(15));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(c, _mm256_set1_epi32(8)));
}
AI VF vadd(VF a, VF b) { return _mm256_add_ps(a, b); }
AI VF vsub(VF a, VF b) { return _mm256_sub_ps(a, b); }
AI VF vmul(VF a, VF b) { return _mm256_mul_ps(a, b); }
AI VF vdiv(VF a, VF b) { return _mm256_div_ps(a, b); }
AI VF vfma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
AI VF vmax(VF a, VF b) { return _mm256_max_ps(a, b); }
AI VF vmin(VF a, VF b) { return _mm256_min_ps(a, b); }
AI VF vround(VF a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* y * 2^n as y * 2^(n>>1) * 2^(n - (n>>1)): both factors are normal for n in [-150, 128], the
 * first product is exact and the second rounds once (subnormal results included). */
AI VF vscale2(VF y, VF n) {
    const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i b = _mm256_set1_epi32(127);
    const VF f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, b), 23));
    const VF f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, b), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, f1), f2);
}
AI float vhmax(VF v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
AI float vhsum(VF v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
AI VF vkeep(VF v, int n, float fill) { return _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(mask_n(n))); }

AI void vtranspose(VF r[8]) {
    const VF t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const VF t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const VF t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const VF t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const VF u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const VF u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const VF u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const VF u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

#include "backend/cpu/attention_exp.inc"
#include "backend/cpu/attention_x86.inc"

void rf_attn_kernels_avx2(rf_attn_kernels *k) {
    k->attention = attention_simd;
    k->exp = exp_simd;
    k->swiglu = swiglu_simd;
}
