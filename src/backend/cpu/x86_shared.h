/* x86_shared.h: small inline helpers of the x86 kernel files (matmul_x86.inc, gemm_avx2.c,
 * gemv_avx2.c, gemm_i16_avx2.c): weight-block field readers, nibble / bit expansion, the IQ4_NL
 * codebook, horizontal sums and maxima, the 8 x 8 dword transpose and an add GCC keeps in order. Those files
 * are compiled with AVX2 and F16C enabled; nothing else may include this header. */
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

/* The same, word-parallel: byte j of *sc / *mn = sub-block j's scale / min. */
static inline __attribute__((always_inline)) void k4_unpack64(const uint8_t *s, uint64_t *sc, uint64_t *mn) {
    uint32_t s0, s1, s2;
    memcpy(&s0, s, 4);
    memcpy(&s1, s + 4, 4);
    memcpy(&s2, s + 8, 4);
    *sc = (uint64_t)((s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u)) << 32 | (s0 & 0x3f3f3f3fu);
    *mn = (uint64_t)(((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u)) << 32 | (s1 & 0x3f3f3f3fu);
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

/* Q3_K's 16 6-bit scales (the 12 bytes at s, layout in quant.c) minus 32, as int8 in natural
 * order. Scale j: low nibble in byte j (j < 8) or the high nibble of byte j - 8, high pair at
 * bits 2*(j/4) of byte 8 + j%4; four scales per 32-bit word. */
static inline __attribute__((always_inline)) __m128i q3k_scales(const uint8_t *s) {
    uint32_t a0, a1, a2;
    memcpy(&a0, s, 4);
    memcpy(&a1, s + 4, 4);
    memcpy(&a2, s + 8, 4);
    const uint32_t lo4 = 0x0f0f0f0fu, hi2 = 0x03030303u;
    return _mm_sub_epi8(_mm_setr_epi32((int)((a0 & lo4) | ((a2 & hi2) << 4)), (int)((a1 & lo4) | (((a2 >> 2) & hi2) << 4)),
                                       (int)(((a0 >> 4) & lo4) | (((a2 >> 4) & hi2) << 4)),
                                       (int)(((a1 >> 4) & lo4) | (((a2 >> 6) & hi2) << 4))),
                        _mm_set1_epi8(32));
}

/* Sum of the 8 lanes. */
static inline __attribute__((always_inline)) float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Largest of the 8 lanes. */
static inline __attribute__((always_inline)) float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline)) int hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* 8 x 8 transpose of dwords: on return r[e] holds dword e of the 8 input rows (lane i: row i). */
static inline __attribute__((always_inline)) void tr8(__m256i r[8]) {
    __m256i t[8], u[8];
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
        u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
        u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    /* u[4i + j], 128-bit half H: rows 4i..4i+3, dword j + 4H */
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);
        r[j + 4] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);
    }
}

/* An int32 add that GCC does not re-associate. The GEMM micro-kernels are written as chains so
 * that the products of one group can be added as they come (about 2T + 4 live registers); GCC
 * re-associates integer vector adds into trees, which computes all G x T products first and
 * spills most of them (gemm_avx2.c's mk_s8: 244 stack accesses per block loop); the empty asm
 * stops that (as the saturating int16 adds of gemm_avx2.c are not re-associated either). */
static inline __attribute__((always_inline)) __m256i add32_chain(__m256i a, __m256i b) {
    __m256i r = _mm256_add_epi32(a, b);
    __asm__("" : "+x"(r));
    return r;
}

#endif
