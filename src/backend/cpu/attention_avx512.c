/* attention_avx512.c: the AVX-512 level of the SIMD attention (attention_simd.h): 16 positions
 * per block, any head_dim (masked loads for the last partial vector of a row). Compiled with
 * -mavx512f/bw/vl/dq -mavx2 -mfma -mf16c; the dispatcher calls it only on such a CPU. */
#include <immintrin.h>
#include <stdint.h>

#include "backend/cpu/avx512_tr16.h"

#define AI static inline __attribute__((always_inline))
#define W 16
#define VF __m512
#define CV 4
#define SQ 4
#define HD_OK(hd) ((hd) > 0)

AI __mmask16 mask_n(int n) { return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

AI VF vzero(void) { return _mm512_setzero_ps(); }
AI VF vset1(float f) { return _mm512_set1_ps(f); }
AI VF vload(const float *p) { return _mm512_loadu_ps(p); }
AI void vstore(float *p, VF v) { _mm512_storeu_ps(p, v); }
AI VF vload_n(const float *p, int n) { return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mask_n(n), p); }
AI VF vloadh_n(const uint16_t *p, int n) {
    return _mm512_cvtph_ps(n >= 16 ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(mask_n(n), p));
}
AI VF vload_q8(const int8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p))); }
/* Two little-endian words of q4_0 codes (kv_format.h: element j of a word at bits 4 (j / 2) +
 * 16 (j % 2)): lanes 0-7 shift the first word, lanes 8-15 the second. */
AI VF vload_q4(const uint8_t *p) {
    const __m512i w = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                               _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)p)));
    const __m512i sh = _mm512_setr_epi32(0, 16, 4, 20, 8, 24, 12, 28, 0, 16, 4, 20, 8, 24, 12, 28);
    const __m512i c = _mm512_and_si512(_mm512_srlv_epi32(w, sh), _mm512_set1_epi32(15));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(c, _mm512_set1_epi32(8)));
}
AI VF vadd(VF a, VF b) { return _mm512_add_ps(a, b); }
AI VF vsub(VF a, VF b) { return _mm512_sub_ps(a, b); }
AI VF vmul(VF a, VF b) { return _mm512_mul_ps(a, b); }
AI VF vdiv(VF a, VF b) { return _mm512_div_ps(a, b); }
AI VF vfma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
AI VF vmax(VF a, VF b) { return _mm512_max_ps(a, b); }
AI VF vmin(VF a, VF b) { return _mm512_min_ps(a, b); }
AI VF vround(VF a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
AI VF vscale2(VF y, VF n) { return _mm512_scalef_ps(y, n); }
AI float vhmax(VF v) { return _mm512_reduce_max_ps(v); }
AI float vhsum(VF v) { return _mm512_reduce_add_ps(v); }
AI VF vkeep(VF v, int n, float fill) { return _mm512_mask_blend_ps(mask_n(n), _mm512_set1_ps(fill), v); }

/* 16 x 16 transpose of the block's K rows (avx512_tr16.h). */
AI void vtranspose(VF r[16]) {
    __m512i x[16];
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) x[i] = _mm512_castps_si512(r[i]);
    tr16(x);
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) r[i] = _mm512_castsi512_ps(x[i]);
}

#include "backend/cpu/attention_exp.inc"
#include "backend/cpu/attention_x86.inc"

void rf_attn_kernels_avx512(rf_attn_kernels *k) {
    k->attention = attention_simd;
    k->exp = exp_simd;
    k->swiglu = swiglu_simd;
}
