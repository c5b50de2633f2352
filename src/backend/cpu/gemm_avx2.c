/* gemm_avx2.c: the many-token int8 GEMM at the AVX2 level (compiled with -mavx2 -mfma -mf16c;
 * installed by rf_mm_kernels_avx2, so only called on CPUs with those features).
 *
 * The plan of the AVX-512 GEMM (matmul_avx512.c) with 8 lanes: a tile of 8 weight rows is packed
 * per chunk of K so that one 256-bit register holds 4 consecutive k-values of each of the 8 rows
 * (lane i = row i), and the packed chunk is reused for every token. Per group of 4 k-values and
 * token, vpmaddubsw of the packed unsigned codes with a broadcast dword of the token's int8
 * activations gives each row two int16 sums of 2 products; these are added in int16 over GI
 * groups and widened with vpmaddwd by ones, so every lane ends with the exact integer block dot
 * product of its row, with no horizontal reduction. Per block and token three float operations
 * follow (convert, scale product, fma).
 *
 * Weights are stored per block as w = s * (u - z) + m: unsigned codes u with a per-type integer
 * zero point z (added to the integer sum as -z * sum(xq)), a per-row float scale s and, for
 * formats with mins, a per-row float m (applied through d_x * sum(xq)). Signed formats (Q8_0,
 * IQ4_XS, IQ4_NL) keep signed codes and use the sign trick per product: |w| * (x with w's sign).
 *
 * int16 bounds (vpmaddubsw and the int16 adds saturate, so a sum past them would be wrong): |x| <=
 * 127 (the activation quantizer's range). Unsigned u <= 15 (Q4_0, Q4_1, Q4_K): a pair is at most
 * 3810, 8 groups (GI 8) 30480. u <= 31 (Q5_0, Q5_1, Q5_K): pair 7874, GI 4: 31496. u <= 63
 * (Q6_K): pair 16002, GI 2: 32004. u <= 3 / 7 (Q2_K / Q3_K, 16-element blocks): GI 4: 3048 /
 * 7112. Sign trick (|w| <= 128, Q8_0's -128 included): pair 32512, GI 1. test_matmul's extreme
 * codes reach these sums.
 *
 * Batch invariance: a token's result does not depend on how many tokens share the call or on
 * its position among them: per row and token, acc = fma(float(I_b), fl(s_b * d_x,b), acc) (then
 * acc = fma(m_b, d_x,b * sum, acc) for mins) for every block b in order from acc = 0, with I_b the
 * exact integer block sum; partial sums go through y between K chunks, which is exact. Below the
 * per-type thresholds (end of file) the driver takes the per-row kernels instead, which differ in
 * float summation order (docs/PERF-CPU.md section 6: the SIMD levels agree to float rounding). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/x86_shared.h"
#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/thread_scratch.h"
#include "core/util.h"

#define AI static inline __attribute__((always_inline))

/* Tokens per micro-kernel pass: 2T + 4 registers live (T accumulators, T int sums, weights, a
 * broadcast, constants), so 6 for the 4-bit kernels; 4 where the sign trick or Q6_K's shorter
 * int16 chains need more (6 spilled there). */
#define GT_MAX 6
#define KCQ 1024 /* K elements per packed chunk (multiple of 256) */

/* Micro-kernel: nbc packed block records (BS = 4G k-values: G x 32 bytes of codes, 8 floats s,
 * with has_m 8 floats m) against T <= GT tokens of the packed activations (per block: [GT][BS]
 * int8 codes, and [GT] each of -z*sum(xq), d_x, d_x*sum(xq)); rows whose mask lane is set are
 * written to y (token t at y + t * n_out), added to what y holds when accumulate. GI: groups per
 * int16 sum (bounds above); sgn: signed codes (sign trick). */
AI void mk_q8(const uint8_t *pk, int64_t nbc, const int G, const int GI, const int sgn, const int has_m, const int zp,
              const int GT, const int T, const int8_t *xp, const int32_t *xz, const float *xd, const float *xds, float *y,
              int64_t n_out, __m256i mask, int accumulate) {
    const int BS = 4 * G;
    const int64_t rec = 32 * G + 32 + (has_m ? 32 : 0);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[GT_MAX];
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)
        acc[t] = accumulate ? _mm256_maskload_ps(y + t * n_out, mask) : _mm256_setzero_ps();
    for (int64_t i = 0; i < nbc; i++, pk += rec, xp += GT * BS, xz += GT, xd += GT, xds += GT) {
        __m256i ia[GT_MAX], i16[GT_MAX];
        _Pragma("GCC unroll 8") for (int g = 0; g < G; g++) {
            const __m256i wv = _mm256_load_si256((const __m256i *)(pk + 32 * g));
            const __m256i ua = sgn ? _mm256_sign_epi8(wv, wv) : wv;
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
                int32_t v;
                memcpy(&v, xp + t * BS + 4 * g, 4);
                __m256i xb = _mm256_set1_epi32(v);
                if (sgn) xb = _mm256_sign_epi8(xb, wv);
                const __m256i p = _mm256_maddubs_epi16(ua, xb);
                i16[t] = g % GI ? _mm256_adds_epi16(i16[t], p) : p;
                if (g % GI == GI - 1) {
                    const __m256i s32 = _mm256_madd_epi16(i16[t], ones);
                    ia[t] = g == GI - 1 ? s32 : add32_chain(ia[t], s32);
                }
            }
        }
        const __m256 s = _mm256_load_ps((const float *)(pk + 32 * G));
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
            if (zp) ia[t] = _mm256_add_epi32(ia[t], _mm256_set1_epi32(xz[t]));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[t]), _mm256_mul_ps(s, _mm256_set1_ps(xd[t])), acc[t]);
        }
        if (has_m) {
            const __m256 m = _mm256_load_ps((const float *)(pk + 32 * G + 32));
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) acc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(xds[t]), acc[t]);
        }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) _mm256_maskstore_ps(y + t * n_out, mask, acc[t]);
}

typedef void (*mk_fn)(const uint8_t *, int64_t, int, const int8_t *, const int32_t *, const float *, const float *,
                      float *, int64_t, __m256i, int);

#define MK_Q8(name, G, GI, sgn, has_m, zp, GT)                                                                     \
    static void name(const uint8_t *pk, int64_t nbc, int T, const int8_t *xp, const int32_t *xz, const float *xd,    \
                     const float *xds, float *y, int64_t n_out, __m256i mask, int acc) {                            \
        switch (T) {                                                                                               \
        case 1: mk_q8(pk, nbc, G, GI, sgn, has_m, zp, GT, 1, xp, xz, xd, xds, y, n_out, mask, acc); break;         \
        case 2: mk_q8(pk, nbc, G, GI, sgn, has_m, zp, GT, 2, xp, xz, xd, xds, y, n_out, mask, acc); break;         \
        case 3: mk_q8(pk, nbc, G, GI, sgn, has_m, zp, GT, 3, xp, xz, xd, xds, y, n_out, mask, acc); break;         \
        case 4: mk_q8(pk, nbc, G, GI, sgn, has_m, zp, GT, RF_MIN(4, GT), xp, xz, xd, xds, y, n_out, mask, acc); break; \
        case 5: mk_q8(pk, nbc, G, GI, sgn, has_m, zp, GT, RF_MIN(5, GT), xp, xz, xd, xds, y, n_out, mask, acc); break; \
        default: mk_q8(pk, nbc, G, GI, sgn, has_m, zp, GT, GT, xp, xz, xd, xds, y, n_out, mask, acc); break;       \
        }                                                                                                          \
    }
MK_Q8(mk_u4z, 8, 8, 0, 0, 8, 6)   /* Q4_0 */
MK_Q8(mk_s8, 8, 1, 1, 0, 0, 4)    /* Q8_0, IQ4_XS, IQ4_NL */
MK_Q8(mk_u4m, 8, 8, 0, 1, 0, 6)   /* Q4_K, Q4_1 */
MK_Q8(mk_u5m, 8, 4, 0, 1, 0, 6)   /* Q5_K, Q5_1 */
MK_Q8(mk_u6z, 4, 2, 0, 0, 32, 4)  /* Q6_K */
MK_Q8(mk_u5z, 8, 4, 0, 0, 16, 6)  /* Q5_0 */
MK_Q8(mk_u2m, 4, 4, 0, 1, 0, 6)   /* Q2_K */
MK_Q8(mk_u3z, 4, 4, 0, 0, 4, 6)   /* Q3_K */

/* Packers: blocks [b0, b0 + nbc) (in the format's BS units) of the 8 rows at w + ridx[i] into
 * consecutive records (layout above). Rows are read with plain loads and transposed in
 * registers. */
typedef void (*pack_fn)(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out);

/* Legacy 32-element blocks (layouts in quant.c), kind: 0 Q4_0 (u = nibble, z = 8), 1 Q4_1 (u =
 * nibble, m), 2 Q5_0 (u = nibble + 16 * bit e of qh, z = 16), 3 Q5_1 (the same u, m), 4 IQ4_NL
 * (signed codebook values); s = d. Records of 288 bytes, 320 with m. The 16 quant bytes end each
 * block (at bb - 16); two blocks per transpose: block b in the low half, b + 1 in the high half
 * (dword e: bytes 4e..4e+3, low nibbles group e, high nibbles group e + 4). Q5 fifth bits: qh
 * expanded to one byte per element (bit 4) and transposed like the quants. */
AI void pack_legacy(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out, const int kind) {
    const int bb = kind == 0 || kind == 4 ? 18 : kind == 1 ? 20 : kind == 2 ? 22 : 24, qo = bb - 16;
    const int has_m = kind == 1 || kind == 3, five = kind == 2 || kind == 3, ho = kind == 2 ? 2 : 4;
    const int64_t rec = has_m ? 320 : 288;
    const __m256i m4 = _mm256_set1_epi8(0x0F), x10 = _mm256_set1_epi8(0x10);
    const __m128i cb = iq4_codebook();
    const __m256i tab = _mm256_set_m128i(cb, cb);
    for (int64_t i = 0; i < nbc; i += 2, out += 2 * rec) {
        const int two = i + 1 < nbc;
        __m256i r[8];
        _Alignas(16) uint16_t dk[2][8], mk[2][8];
        uint32_t qh[2][8];
        for (int row = 0; row < 8; row++) {
            const uint8_t *p = w + ridx[row] + (b0 + i) * bb, *p1 = two ? p + bb : p;
            const __m128i a = _mm_loadu_si128((const __m128i *)(p + qo));
            r[row] = _mm256_set_m128i(two ? _mm_loadu_si128((const __m128i *)(p1 + qo)) : a, a);
            memcpy(&dk[0][row], p, 2);
            memcpy(&dk[1][row], p1, 2);
            if (has_m) {
                memcpy(&mk[0][row], p + 2, 2);
                memcpy(&mk[1][row], p1 + 2, 2);
            }
            if (five) {
                memcpy(&qh[0][row], p + ho, 4);
                memcpy(&qh[1][row], p1 + ho, 4);
            }
        }
        tr8(r);
        for (int k = 0; k < 1 + two; k++) {
            uint8_t *o = out + k * rec;
            _mm256_store_ps((float *)(o + 256), _mm256_cvtph_ps(_mm_load_si128((const __m128i *)dk[k])));
            if (has_m) _mm256_store_ps((float *)(o + 288), _mm256_cvtph_ps(_mm_load_si128((const __m128i *)mk[k])));
            __m256i hv[8];
            if (five) {
                for (int row = 0; row < 8; row++) hv[row] = _mm256_and_si256(bits32(qh[k][row]), x10);
                tr8(hv);
            }
            for (int j = 0; j < 4; j++) {
                __m256i lo = _mm256_and_si256(r[4 * k + j], m4), hi = _mm256_and_si256(_mm256_srli_epi32(r[4 * k + j], 4), m4);
                if (five) {
                    lo = _mm256_or_si256(lo, hv[j]);
                    hi = _mm256_or_si256(hi, hv[j + 4]);
                }
                if (kind == 4) {
                    lo = _mm256_shuffle_epi8(tab, lo);
                    hi = _mm256_shuffle_epi8(tab, hi);
                }
                _mm256_store_si256((__m256i *)(o + 32 * j), lo);
                _mm256_store_si256((__m256i *)(o + 32 * (j + 4)), hi);
            }
        }
    }
}
static void pack_q4_0(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out) {
    pack_legacy(w, ridx, b0, nbc, out, 0);
}
static void pack_q4_1(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out) {
    pack_legacy(w, ridx, b0, nbc, out, 1);
}
static void pack_q5_0(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out) {
    pack_legacy(w, ridx, b0, nbc, out, 2);
}
static void pack_q5_1(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out) {
    pack_legacy(w, ridx, b0, nbc, out, 3);
}
static void pack_iq4_nl(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out) {
    pack_legacy(w, ridx, b0, nbc, out, 4);
}

/* Q8_0: BS 32, signed codes as stored, s = d. */
static void pack_q8_0(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out) {
    for (int64_t i = 0; i < nbc; i++, out += 288) {
        __m256i r[8];
        _Alignas(16) uint16_t dk[8];
        for (int row = 0; row < 8; row++) {
            const uint8_t *p = w + ridx[row] + (b0 + i) * 34;
            r[row] = _mm256_loadu_si256((const __m256i *)(p + 2));
            memcpy(&dk[row], p, 2);
        }
        tr8(r);
        _mm256_store_ps((float *)(out + 256), _mm256_cvtph_ps(_mm_load_si128((const __m128i *)dk)));
        for (int g = 0; g < 8; g++) _mm256_store_si256((__m256i *)(out + 32 * g), r[g]);
    }
}

/* Q4_K (five = 0) and Q5_K (five = 1): BS 32, b0 and nbc multiples of 8; records of 320 bytes
 * (u in 0..15 / 0..31, s = d*sc, m = -dmin*mn). Quant chunk c (32 bytes at qo + 32c): low
 * nibbles sub-block 2c, high nibbles 2c + 1; Q5_K's fifth bits: bit s of qh[l] (qh at 16) for
 * element l of sub-block s. */
AI void pack_qk45(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out, const int five) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const int bb = five ? 176 : 144, qo = five ? 48 : 16;
    for (int64_t S = b0 / 8; S < (b0 + nbc) / 8; S++, out += 8 * 320) {
        const uint8_t *sb = w + S * bb;
        for (int r = 0; r < 8; r++) {
            const uint8_t *p = sb + ridx[r];
            const float d = f16v(p), dmin = f16v(p + 2);
            uint8_t sc[8], mn[8];
            k4_unpack(p + 4, sc, mn);
            for (int j = 0; j < 8; j++) {
                ((float *)(out + j * 320 + 256))[r] = d * (float)sc[j];
                ((float *)(out + j * 320 + 288))[r] = -dmin * (float)mn[j];
            }
        }
        __m256i hv[8]; /* Q5_K: hv[e] = qh dword e (elements 4e..4e+3) of the 8 rows */
        if (five) {
            for (int row = 0; row < 8; row++) hv[row] = _mm256_loadu_si256((const __m256i *)(sb + ridx[row] + 16));
            tr8(hv);
        }
        for (int c = 0; c < 4; c++) {
            __m256i v[8];
            for (int row = 0; row < 8; row++) v[row] = _mm256_loadu_si256((const __m256i *)(sb + ridx[row] + qo + 32 * c));
            tr8(v);
            for (int e = 0; e < 8; e++) {
                __m256i lo = _mm256_and_si256(v[e], m4), hi = _mm256_and_si256(_mm256_srli_epi32(v[e], 4), m4);
                if (five) { /* bits 2c and 2c + 1 of each qh byte to bit 4 */
                    lo = _mm256_or_si256(lo, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hv[e], 2 * c), one), 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hv[e], 2 * c + 1), one), 4));
                }
                _mm256_store_si256((__m256i *)(out + (2 * c) * 320 + 32 * e), lo);
                _mm256_store_si256((__m256i *)(out + (2 * c + 1) * 320 + 32 * e), hi);
            }
        }
    }
}
static void pack_q4_k(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out) {
    pack_qk45(w, ridx, b0, nbc, out, 0);
}
static void pack_q5_k(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out) {
    pack_qk45(w, ridx, b0, nbc, out, 1);
}

/* Q6_K: BS 16, b0 and nbc multiples of 16; records of 160 bytes (u = q in 0..63, z = 32,
 * s = d*sc). Half h (128 elements) of a 210-byte superblock: a = ql[64h..64h+32), b =
 * ql[64h+32..64h+64), hb = qh[32h..32h+32); its four 32-element runs are a's low nibbles, b's low
 * nibbles, a's high, b's high, with the high bit pairs of hb at bits 0-1, 2-3, 4-5, 6-7; run k
 * element l is in 16-block 8h + 2k + l / 16. */
static void pack_q6_k(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    for (int64_t S = b0 / 16; S < (b0 + nbc) / 16; S++, out += 16 * 160) {
        const uint8_t *sb = w + S * 210;
        for (int r = 0; r < 8; r++) {
            const uint8_t *p = sb + ridx[r];
            const float d = f16v(p + 208);
            for (int j = 0; j < 16; j++) ((float *)(out + j * 160 + 128))[r] = d * (float)(int8_t)p[192 + j];
        }
        for (int h = 0; h < 2; h++) {
            __m256i hv[8];
            for (int row = 0; row < 8; row++) hv[row] = _mm256_loadu_si256((const __m256i *)(sb + ridx[row] + 128 + 32 * h));
            tr8(hv);
            for (int ab = 0; ab < 2; ab++) { /* runs ab (low nibbles) and ab + 2 (high nibbles) */
                __m256i v[8];
                for (int row = 0; row < 8; row++) v[row] = _mm256_loadu_si256((const __m256i *)(sb + ridx[row] + 64 * h + 32 * ab));
                tr8(v);
                for (int e = 0; e < 8; e++) {
                    const __m256i H = hv[e];
                    const __m256i hlo = ab ? _mm256_slli_epi32(H, 2) : _mm256_slli_epi32(H, 4);
                    const __m256i hhi = ab ? _mm256_srli_epi32(H, 2) : H;
                    const __m256i lo = _mm256_or_si256(_mm256_and_si256(v[e], m4), _mm256_and_si256(hlo, m30));
                    const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(v[e], 4), m4), _mm256_and_si256(hhi, m30));
                    const int jl = 8 * h + 2 * ab + e / 4, jh = 8 * h + 2 * (ab + 2) + e / 4;
                    _mm256_store_si256((__m256i *)(out + jl * 160 + 32 * (e % 4)), lo);
                    _mm256_store_si256((__m256i *)(out + jh * 160 + 32 * (e % 4)), hi);
                }
            }
        }
    }
}

/* Q2_K (three = 0) and Q3_K (three = 1): BS 16, b0 and nbc multiples of 16; records of 192 /
 * 160 bytes. Element 128h + 32k + l of a superblock is bits 2k..2k+1 of qs[32h + l] (qs at 16 /
 * 32), in 16-block 8h + 2k + l / 16. Q2_K: u in 0..3, s = d * sc, m = -dmin * mn (scale byte j:
 * sc low nibble, mn high nibble; d, dmin at 80, 82). Q3_K: u = low2 + 4 * (bit 4h + k of
 * hmask[l]) in 0..7, z = 4, s = d * (sc6 - 32) (6-bit scales as in quant.c, d at 108). */
AI void pack_qk23(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out, const int three) {
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    const int bb = three ? 110 : 84, qo = three ? 32 : 16;
    const int64_t rec = three ? 160 : 192;
    for (int64_t S = b0 / 16; S < (b0 + nbc) / 16; S++, out += 16 * rec) {
        const uint8_t *sb = w + S * bb;
        for (int r = 0; r < 8; r++) {
            const uint8_t *p = sb + ridx[r];
            if (three) {
                const float d = f16v(p + 108);
                const uint8_t *sc = p + 96;
                for (int j = 0; j < 16; j++) {
                    const int lo = j < 8 ? (sc[j] & 0xF) : (sc[j - 8] >> 4), hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
                    ((float *)(out + j * rec + 128))[r] = d * (float)((lo | (hi << 4)) - 32);
                }
            } else {
                const float d = f16v(p + 80), dmin = f16v(p + 82);
                for (int j = 0; j < 16; j++) {
                    ((float *)(out + j * rec + 128))[r] = d * (float)(p[j] & 0xF);
                    ((float *)(out + j * rec + 160))[r] = -dmin * (float)(p[j] >> 4);
                }
            }
        }
        __m256i hm[8]; /* Q3_K: hm[e] = hmask dword e (l = 4e..4e+3) of the 8 rows */
        if (three) {
            for (int row = 0; row < 8; row++) hm[row] = _mm256_loadu_si256((const __m256i *)(sb + ridx[row]));
            tr8(hm);
        }
        for (int h = 0; h < 2; h++) {
            __m256i v[8];
            for (int row = 0; row < 8; row++) v[row] = _mm256_loadu_si256((const __m256i *)(sb + ridx[row] + qo + 32 * h));
            tr8(v);
            for (int k = 0; k < 4; k++)
                for (int e = 0; e < 8; e++) {
                    __m256i u = _mm256_and_si256(_mm256_srli_epi32(v[e], 2 * k), m3);
                    if (three) u = _mm256_or_si256(u, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hm[e], 4 * h + k), one), 2));
                    _mm256_store_si256((__m256i *)(out + (8 * h + 2 * k + e / 4) * rec + 32 * (e % 4)), u);
                }
        }
    }
}
static void pack_q2_k(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out) {
    pack_qk23(w, ridx, b0, nbc, out, 0);
}
static void pack_q3_k(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out) {
    pack_qk23(w, ridx, b0, nbc, out, 1);
}

/* IQ4_XS: BS 32, b0 and nbc multiples of 8; records of 288 bytes (signed codebook values,
 * s = d * (sc6 - 32)). Sub-block s of a 136-byte superblock has its 16 quant bytes at 8 + 16s
 * (element j low nibble, j + 16 high nibble); two sub-blocks per transpose as for Q4_0. */
static void pack_iq4_xs(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m128i cb = iq4_codebook();
    const __m256i tab = _mm256_set_m128i(cb, cb);
    for (int64_t S = b0 / 8; S < (b0 + nbc) / 8; S++, out += 8 * 288) {
        const uint8_t *sb = w + S * 136;
        for (int r = 0; r < 8; r++) {
            const uint8_t *p = sb + ridx[r];
            const float d = f16v(p);
            uint16_t sh;
            memcpy(&sh, p + 2, 2);
            for (int j = 0; j < 8; j++) {
                const int ls = ((p[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((sh >> (2 * j)) & 3) << 4);
                ((float *)(out + j * 288 + 256))[r] = d * (float)(ls - 32);
            }
        }
        for (int q = 0; q < 4; q++) { /* sub-blocks 2q, 2q + 1 */
            __m256i v[8];
            for (int row = 0; row < 8; row++) v[row] = _mm256_loadu_si256((const __m256i *)(sb + ridx[row] + 8 + 32 * q));
            tr8(v);
            for (int e = 0; e < 8; e++) {
                uint8_t *o = out + (2 * q + e / 4) * 288 + 32 * (e % 4);
                _mm256_store_si256((__m256i *)o, _mm256_shuffle_epi8(tab, _mm256_and_si256(v[e], m4)));
                _mm256_store_si256((__m256i *)(o + 128), _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi32(v[e], 4), m4)));
            }
        }
    }
}

/* Shared driver. G: groups of 4 per block (BS = 4G), has_m: per-block mins, zp: zero point, GT:
 * the micro-kernel's tokens per pass. */
AI void gemm_common(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok,
                    float *y, const int G, const int has_m, const int zp, const int GT, pack_fn pack, mk_fn mk) {
    const int BS = 4 * G;
    const int64_t nbz = x->n_in / BS;
    const int64_t rec = 32 * G + 32 + (has_m ? 32 : 0);
    const int64_t ntg = (n_tok + GT - 1) / GT;
    const rf_gemm_x px = rf_gemm_pack_x(x, n_tok, G, zp, GT);
    const int8_t *xp = px.q;
    const int32_t *xz = px.z;
    const float *xd = px.d, *xds = px.ds;
    const int64_t kcb = KCQ / BS; /* blocks per chunk */
    uint8_t *pk = rf_thread_scratch(0, (size_t)(kcb * rec));
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r += 8) {
            const int nr = (int)RF_MIN(8, r1 - r);
            int32_t ridx[8];
            for (int i = 0; i < 8; i++) ridx[i] = (int32_t)((uint64_t)RF_MIN(i, nr - 1) * rb);
            const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            const uint8_t *wr = w + (uint64_t)r * rb;
            for (int64_t b0 = 0; b0 < nbz; b0 += kcb) {
                const int64_t nbc = RF_MIN(kcb, nbz - b0);
                pack(wr, ridx, b0, nbc, pk);
                /* The next chunk (or the next tile's first chunk) is prefetched while the
                 * micro-kernels work on this one, a share per pass: the packer's loads from 8
                 * separate rows are a pattern the hardware prefetcher follows poorly. Into L2
                 * (T1): with few tokens all of a chunk's prefetches go out at once, and into L1
                 * (T0) they stalled on its miss buffers: 8192 x 2048 Q4_0 from DRAM, 2 threads,
                 * 1 token 9.6 -> 16.8 GB/s, 4 tokens 7.9 -> 12.1; 64 tokens unchanged. */
                const uint8_t *nw = NULL;
                uint64_t noff = 0, nlen = rb * (uint64_t)kcb / (uint64_t)nbz;
                int nnr = 0;
                if (b0 + kcb < nbz) nw = wr, noff = rb * (uint64_t)(b0 + kcb) / (uint64_t)nbz, nnr = nr;
                else if (r + 8 < r1) nw = wr + 8 * rb, nnr = (int)RF_MIN(8, r1 - r - 8);
                if (noff + nlen > rb) nlen = rb - noff;
                const int64_t nlines = nw ? (int64_t)((nlen + 63) / 64) : 0;
                for (int64_t tg = 0; tg < ntg; tg++) {
                    const int T = (int)RF_MIN(GT, n_tok - tg * GT);
                    for (int64_t l = tg * nlines / ntg; l < (tg + 1) * nlines / ntg; l++)
                        for (int i = 0; i < nnr; i++)
                            _mm_prefetch((const char *)(nw + (uint64_t)i * rb + noff + RF_MIN((uint64_t)l * 64, nlen - 1)), _MM_HINT_T1);
                    const int64_t o = (tg * nbz + b0) * GT;
                    mk(pk, nbc, T, xp + o * BS, xz + o, xd + o, xds + o, y + tg * GT * n_out + r, n_out, mask, b0 > 0);
                }
            }
        }
}

static void gemm_q4_0(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, float *y) {
    gemm_common(w, rb, rq, n_out, x, n_tok, y, 8, 0, 8, 6, pack_q4_0, mk_u4z);
}
static void gemm_q4_1(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, float *y) {
    gemm_common(w, rb, rq, n_out, x, n_tok, y, 8, 1, 0, 6, pack_q4_1, mk_u4m);
}
static void gemm_q5_0(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, float *y) {
    gemm_common(w, rb, rq, n_out, x, n_tok, y, 8, 0, 16, 6, pack_q5_0, mk_u5z);
}
static void gemm_q5_1(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, float *y) {
    gemm_common(w, rb, rq, n_out, x, n_tok, y, 8, 1, 0, 6, pack_q5_1, mk_u5m);
}
static void gemm_iq4_nl(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, float *y) {
    gemm_common(w, rb, rq, n_out, x, n_tok, y, 8, 0, 0, 4, pack_iq4_nl, mk_s8);
}
static void gemm_q2_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, float *y) {
    gemm_common(w, rb, rq, n_out, x, n_tok, y, 4, 1, 0, 6, pack_q2_k, mk_u2m);
}
static void gemm_q3_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, float *y) {
    gemm_common(w, rb, rq, n_out, x, n_tok, y, 4, 0, 4, 6, pack_q3_k, mk_u3z);
}
static void gemm_q8_0(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, float *y) {
    gemm_common(w, rb, rq, n_out, x, n_tok, y, 8, 0, 0, 4, pack_q8_0, mk_s8);
}
static void gemm_q4_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, float *y) {
    gemm_common(w, rb, rq, n_out, x, n_tok, y, 8, 1, 0, 6, pack_q4_k, mk_u4m);
}
static void gemm_q5_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, float *y) {
    gemm_common(w, rb, rq, n_out, x, n_tok, y, 8, 1, 0, 6, pack_q5_k, mk_u5m);
}
static void gemm_q6_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, float *y) {
    gemm_common(w, rb, rq, n_out, x, n_tok, y, 4, 0, 32, 4, pack_q6_k, mk_u6z);
}
static void gemm_iq4_xs(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, float *y) {
    gemm_common(w, rb, rq, n_out, x, n_tok, y, 8, 0, 0, 4, pack_iq4_xs, mk_s8);
}

/* Thresholds (gemm_q8_min_tok): below them the per-row kernels (matmul_x86.inc: one row
 * against up to 4 tokens, rows read one after the other) are faster, as weights come from DRAM
 * and the packer's 8 interleaved row streams get less bandwidth than one sequential stream.
 * Measured with weights cycled over 8 copies (8192 x 2048, 2 threads, us per token, per-row /
 * GEMM, single runs on a noisy machine): Q4_0 n_tok 2: 380 / 305, 3: 334 / 222; Q4_1 3: 256 / 260,
 * 4: 232 / 215; Q5_0 4: 275 / 289, 5: 317 / 241; Q5_1 4: 286 / 290, 5: 321 / 250; IQ4_NL 3: 265 /
 * 275, 4: 252 / 234; Q2_K 3: 368 / 393, 4: 368 / 315; Q3_K 2: 665 / 707, 3: 616 / 503; Q4_K 4:
 * 294 / 298, 5: 333 / 261; Q5_K 4: 427 / 333; Q6_K 3: 383 / 399, 4: 617 / 328; Q8_0 6: 245 / 267,
 * 8: 236 / 225 (its sign trick costs an extra operation per product group); IQ4_XS 6: 284 / 324,
 * 8: 264 / 263. */
void rf_mm_gemm_avx2(rf_mm_kernels *k) {
    k->gemm_q8[RF_TYPE_Q4_0] = gemm_q4_0;
    k->gemm_q8[RF_TYPE_Q8_0] = gemm_q8_0;
    k->gemm_q8[RF_TYPE_Q4_K] = gemm_q4_k;
    k->gemm_q8[RF_TYPE_Q5_K] = gemm_q5_k;
    k->gemm_q8[RF_TYPE_Q6_K] = gemm_q6_k;
    k->gemm_q8[RF_TYPE_IQ4_XS] = gemm_iq4_xs;
    k->gemm_q8[RF_TYPE_Q4_1] = gemm_q4_1;
    k->gemm_q8[RF_TYPE_Q5_0] = gemm_q5_0;
    k->gemm_q8[RF_TYPE_Q5_1] = gemm_q5_1;
    k->gemm_q8[RF_TYPE_IQ4_NL] = gemm_iq4_nl;
    k->gemm_q8[RF_TYPE_Q2_K] = gemm_q2_k;
    k->gemm_q8[RF_TYPE_Q3_K] = gemm_q3_k;
    k->gemm_q8_min_tok[RF_TYPE_Q2_K] = 4;
    k->gemm_q8_min_tok[RF_TYPE_Q3_K] = 3;
    k->gemm_q8_min_tok[RF_TYPE_Q4_0] = 3;
    k->gemm_q8_min_tok[RF_TYPE_Q4_1] = 4;
    k->gemm_q8_min_tok[RF_TYPE_Q5_0] = 5;
    k->gemm_q8_min_tok[RF_TYPE_Q5_1] = 5;
    k->gemm_q8_min_tok[RF_TYPE_IQ4_NL] = 4;
    k->gemm_q8_min_tok[RF_TYPE_Q8_0] = 8;
    k->gemm_q8_min_tok[RF_TYPE_Q4_K] = 5;
    k->gemm_q8_min_tok[RF_TYPE_Q5_K] = 4;
    k->gemm_q8_min_tok[RF_TYPE_Q6_K] = 4;
    k->gemm_q8_min_tok[RF_TYPE_IQ4_XS] = 8;
}
