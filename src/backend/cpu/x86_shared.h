/* x86_shared.h: small inline helpers of the x86 kernel files (matmul_x86.inc, gemm_avx2.c,
 * gemv_avx2.c): weight-block field readers, nibble / bit expansion, the IQ4_NL codebook and
 * horizontal sums. Those files are compiled with AVX2 and F16C enabled; nothing else may include
 * this header. */
#ifndef RF_CPU_X86_SHARED_H
#define RF_CPU_X86_SHARED_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The IEEE half at p (any alignment) as f32: exact. */
static inline __attribute__((always_inline)) float f16v(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 6-bit scales and mins of Q4_K/Q5_K's 12-byte field (layout in quant.c). */
static inline __attribute__((always_inline)) void k4_unpack(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 0xF) | ((s[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/* 16 packed nibbles -> 32 bytes: element j (j < 16) = low nibble of byte j, element j + 16 =
 * high nibble of byte j (the legacy and IQ4 nibble order). */
static inline __attribute__((always_inline)) __m256i nibbles32(const uint8_t *qs) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

/* The IQ4_NL codebook (quant.c's rf_iq4nl_values), for vpshufb by nibble. */
static inline __attribute__((always_inline)) __m128i iq4_codebook(void) {
    return _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
}

/* Byte i = 0xFF where bit i % 8 is set in the byte that sel[i] (a vpshufb index) picks from
 * v's 128-bit half. */
static inline __attribute__((always_inline)) __m256i bits_spread(__m256i v, __m256i sel) {
    v = _mm256_shuffle_epi8(v, sel);
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL));
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

/* Byte i = 0xFF where bit i of x is set (Q5 high bits). */
static inline __attribute__((always_inline)) __m256i bits32(uint32_t x) {
    return bits_spread(_mm256_set1_epi32((int)x), _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                                                    0x0101010101010101LL, 0));
}

/* Sum of the 8 lanes. */
static inline __attribute__((always_inline)) float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline)) int hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

#endif
