/* matmul_avx512.c: the AVX-512 level. Its int8 kernels are the shared x86 kernels built with
 * AVX-512 VNNI's vpdpbusd (one instruction for maddubs + madd, no int16 step) when the CPU has
 * VNNI; the file is compiled with -mavx512f/bw/vl/dq and enables VNNI per function below, so
 * rf_mm_kernels_avx512 installs them only after checking the CPU flag. Without VNNI the AVX-512
 * level keeps the AVX2 kernels (on current AMD cores 512-bit operations run as two 256-bit
 * halves, so wider registers alone gain little for these memory-bound kernels). */
#if !defined(__clang__)
#pragma GCC target("avx512vnni,avx512vbmi")
#endif
#include <immintrin.h>

#define MUL_SUM_US8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))

#include <stdlib.h>

#if defined(__clang__) /* clang ignores GCC's target pragma: the same features by its own, to the end of the file */
#pragma clang attribute push(__attribute__((target("avx512vnni,avx512vbmi"))), apply_to = function)
#endif

#include "backend/cpu/avx512_tr16.h"
#include "backend/cpu/gemm_i16.h"
#include "backend/cpu/matmul_x86.inc"
#include "core/quant.h"
#include "core/util.h"
#include "backend/cpu/thread_scratch.h"

/* ---- Many-token GEMM (AVX-512 + VNNI) ----------------------------------------------------
 *
 * A tile of 16 weight rows is packed so that one 512-bit register holds 4 consecutive k-values of
 * each of the 16 rows (lane i = row i). vpdpbusd with a broadcast dword of one token's int8
 * activations then adds 4 products to each row's lane: after BS/4 such instructions every lane
 * holds the exact integer block dot product of its row, with no horizontal reduction. Per block
 * and token only three float operations follow (convert, scale product, fma), so the int8 units
 * do nearly all the work. Weights are stored unsigned (u8) per block as w = s * (u - z) + m with
 * a per-type integer zero point z (folded into the integer accumulator's start value
 * -z * sum(xq)), a per-row float scale s and, for formats with mins, a per-row float m (applied
 * through d_x * sum(xq)). Tiles are packed per chunk of K (gathers straight from the 16 rows),
 * the chunk is reused for every token, and partial sums go through y between chunks. */

#define GT 8      /* tokens per int8 micro-kernel pass */
#define GTF 16    /* tokens per f32 micro-kernel pass */
#define KCQ 1024  /* K elements per packed int8 chunk (multiple of 256) */
#ifndef KCF       /* K elements per packed f32 chunk (-DKCF= for experiments): 512 over 256 was
                   * +3% F16 pp64 single-thread (PERF-CPU.md section 9); fewer chunks, fewer y
                   * round trips and pack calls, although the 64 KiB chunk no longer fits L1 */
#define KCF 512
#endif

static void *gscratch(int i, size_t n) { return rf_thread_scratch(i, n); }

/* Micro-kernel: nbc packed weight records (BS = 4G elements each) against T tokens of the packed
 * activations (per block: [GT tokens][BS] int8 codes, and [GT] each of -zp*sum, d, d*sum), 16
 * rows (mask: the valid ones) of y. */
AI void mk_q8(const uint8_t *pk, int64_t nbc, const int G, const int has_m, const int zp, const int T,
              const int8_t *xp, const int32_t *xz, const float *xd, const float *xds, float *y, int64_t n_out,
              __mmask16 mask, int accumulate) {
    const int BS = 4 * G;
    const int64_t rec = G * 64 + 64 + (has_m ? 64 : 0);
    __m512 acc[GT];
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)
        acc[t] = accumulate ? _mm512_maskz_loadu_ps(mask, y + t * n_out) : _mm512_setzero_ps();
    for (int64_t i = 0; i < nbc; i++, pk += rec, xp += GT * BS, xz += GT, xd += GT, xds += GT) {
        __m512i ia[GT];
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) ia[t] = zp ? _mm512_set1_epi32(xz[t]) : _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int g = 0; g < G; g++) {
            const __m512i wv = _mm512_load_si512((const void *)(pk + 64 * g));
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
                int32_t v;
                memcpy(&v, xp + t * BS + 4 * g, 4);
                ia[t] = _mm512_dpbusd_epi32(ia[t], wv, _mm512_set1_epi32(v));
            }
        }
        const __m512 s = _mm512_load_ps((const float *)(pk + G * 64));
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[t]), _mm512_mul_ps(s, _mm512_set1_ps(xd[t])), acc[t]);
        if (has_m) {
            const __m512 m = _mm512_load_ps((const float *)(pk + G * 64 + 64));
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(xds[t]), acc[t]);
        }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * n_out, mask, acc[t]);
}

#define MK_Q8(name, G, has_m, zp)                                                                               \
    static void name(const uint8_t *pk, int64_t nbc, int T, const int8_t *xp, const int32_t *xz, const float *xd, \
                     const float *xds, float *y, int64_t n_out, __mmask16 mask, int acc) {                      \
        switch (T) {                                                                                            \
        case 1: mk_q8(pk, nbc, G, has_m, zp, 1, xp, xz, xd, xds, y, n_out, mask, acc); break;                   \
        case 2: mk_q8(pk, nbc, G, has_m, zp, 2, xp, xz, xd, xds, y, n_out, mask, acc); break;                   \
        case 3: mk_q8(pk, nbc, G, has_m, zp, 3, xp, xz, xd, xds, y, n_out, mask, acc); break;                   \
        case 4: mk_q8(pk, nbc, G, has_m, zp, 4, xp, xz, xd, xds, y, n_out, mask, acc); break;                   \
        case 5: mk_q8(pk, nbc, G, has_m, zp, 5, xp, xz, xd, xds, y, n_out, mask, acc); break;                   \
        case 6: mk_q8(pk, nbc, G, has_m, zp, 6, xp, xz, xd, xds, y, n_out, mask, acc); break;                   \
        case 7: mk_q8(pk, nbc, G, has_m, zp, 7, xp, xz, xd, xds, y, n_out, mask, acc); break;                   \
        default: mk_q8(pk, nbc, G, has_m, zp, 8, xp, xz, xd, xds, y, n_out, mask, acc); break;                  \
        }                                                                                                       \
    }
MK_Q8(mk_g8, 8, 0, 1)
MK_Q8(mk_g8m, 8, 1, 0)
MK_Q8(mk_g4, 4, 0, 1)

typedef rf_mk_q8_fn mk_q8_fn; /* matmul_kernels.h */

/* The quant bytes of 4 Q4_0 blocks (16 at bp + 2 + 18k) in one register, and of 2 Q8_0 blocks
 * (32 at bp + 2 + 34k). Measured (tools-style microbenchmark, one core, L2-resident rows): 128- and
 * 256-bit loads with inserts beat one vpermi2b over two 512-bit loads by 1.2x (Q4_0) and 1.6x
 * (Q8_0, together with scalar f16 scales instead of vpermw) on this core. */
AI __m512i ld_q4_0x4(const uint8_t *bp) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(bp + 2)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(bp + 20)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(bp + 38)), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(bp + 56)), 3);
}

AI __m512i ld_q8_0x2(const uint8_t *bp) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(bp + 2))),
                              _mm256_loadu_si256((const __m256i *)(bp + 36)), 1);
}

/* lanes 0-7: f16 at bp, lanes 8-15: f16 at bp + 34 */
AI __m512 d_q8_0x2(const uint8_t *bp) {
    uint16_t d0, d1;
    memcpy(&d0, bp, 2);
    memcpy(&d1, bp + 34, 2);
    return _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16((short)d1), _mm_set1_epi16((short)d0)));
}

/* Packers: blocks [b0, b0 + nbc) (in the format's BS units) of the 16 rows at w + ridx[i]
 * (vidx: the same offsets as a vector, for gathers). Gathers on this core cost about as much as
 * the micro-kernel work they feed, so the main loops load each row with plain loads (4 or 2 blocks'
 * quant bytes into one register, as in the matvec kernels) and
 * transpose 16 x 16 dwords in registers; only leftover blocks use gathers. */
static void pack_q4_0(const uint8_t *w, const int32_t *ridx, __m512i vidx, int64_t b0, int64_t nbc, uint8_t *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    int64_t i = 0;
    for (; i + 4 <= nbc; i += 4, out += 4 * 576) {
        __m512i r[16];
        _Alignas(64) uint16_t dk[4][16];
        for (int row = 0; row < 16; row++) {
            const uint8_t *p = w + ridx[row] + (b0 + i) * 18;
            r[row] = ld_q4_0x4(p);
            for (int k = 0; k < 4; k++) memcpy(&dk[k][row], p + 18 * k, 2);
        }
        tr16(r);
        for (int k = 0; k < 4; k++) {
            uint8_t *o = out + k * 576;
            _mm512_store_ps((float *)(o + 512), _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dk[k])));
            for (int j = 0; j < 4; j++) {
                _mm512_store_si512((void *)(o + 64 * j), _mm512_and_si512(r[4 * k + j], m4));
                _mm512_store_si512((void *)(o + 64 * (j + 4)), _mm512_and_si512(_mm512_srli_epi32(r[4 * k + j], 4), m4));
            }
        }
    }
    for (; i < nbc; i++, out += 576) {
        const uint8_t *blk = w + (b0 + i) * 18;
        const __m512i dv = _mm512_i32gather_epi32(vidx, (const void *)blk, 1);
        _mm512_store_ps((float *)(out + 512), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dv)));
        for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_i32gather_epi32(vidx, (const void *)(blk + 2 + 4 * j), 1);
            _mm512_store_si512((void *)(out + 64 * j), _mm512_and_si512(v, m4));
            _mm512_store_si512((void *)(out + 64 * (j + 4)), _mm512_and_si512(_mm512_srli_epi32(v, 4), m4));
        }
    }
}

static void pack_q8_0(const uint8_t *w, const int32_t *ridx, __m512i vidx, int64_t b0, int64_t nbc, uint8_t *out) {
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    int64_t i = 0;
    for (; i + 2 <= nbc; i += 2, out += 2 * 576) {
        __m512i r[16];
        _Alignas(64) uint16_t dk[2][16];
        for (int row = 0; row < 16; row++) {
            const uint8_t *p = w + ridx[row] + (b0 + i) * 34;
            r[row] = ld_q8_0x2(p);
            memcpy(&dk[0][row], p, 2);
            memcpy(&dk[1][row], p + 34, 2);
        }
        tr16(r);
        for (int k = 0; k < 2; k++) {
            uint8_t *o = out + k * 576;
            _mm512_store_ps((float *)(o + 512), _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dk[k])));
            for (int g = 0; g < 8; g++) _mm512_store_si512((void *)(o + 64 * g), _mm512_xor_si512(r[8 * k + g], x80));
        }
    }
    for (; i < nbc; i++, out += 576) {
        const uint8_t *blk = w + (b0 + i) * 34;
        const __m512i dv = _mm512_i32gather_epi32(vidx, (const void *)blk, 1);
        _mm512_store_ps((float *)(out + 512), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dv)));
        for (int g = 0; g < 8; g++) {
            const __m512i v = _mm512_i32gather_epi32(vidx, (const void *)(blk + 2 + 4 * g), 1);
            _mm512_store_si512((void *)(out + 64 * g), _mm512_xor_si512(v, x80));
        }
    }
}

/* Q4_K (five = 0) and Q5_K (five = 1): BS 32, b0 and nbc multiples of 8; records of 640 bytes
 * (weights u in 0..15 / 0..31, s = d*sc, m = -dmin*mn). Q5_K is Q4_K's superblock with the 32
 * bytes qh after the scales (bit k of qh[l]: the fifth bit of element l of sub-block k), so the
 * quants sit at 48 instead of 16 (layouts in quant.c). */
AI void pack_qk45(const uint8_t *w, const int32_t *ridx, int64_t b0, int64_t nbc, uint8_t *out, const int five) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    const int bb = five ? 176 : 144, qo = five ? 48 : 16;
    for (int64_t S = b0 / 8; S < (b0 + nbc) / 8; S++, out += 8 * 640) {
        const uint8_t *sb = w + S * bb;
        for (int r = 0; r < 16; r++) {
            const uint8_t *p = sb + ridx[r];
            const float d = f16v(p), dmin = f16v(p + 2);
            uint8_t sc[8], mn[8];
            k4_unpack(p + 4, sc, mn);
            for (int j = 0; j < 8; j++) {
                ((float *)(out + j * 640 + 512))[r] = d * (float)sc[j];
                ((float *)(out + j * 640 + 576))[r] = -dmin * (float)mn[j];
            }
        }
        __m512i hv[16]; /* Q5_K: hv[g] = qh dword g (elements 4g..4g+3) of the 16 rows */
        if (five) {
            for (int row = 0; row < 16; row++)
                hv[row] = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(sb + ridx[row] + 16)));
            tr16(hv);
        }
        for (int h = 0; h < 2; h++) { /* quant bytes 64h..64h+63: chunks 2h, 2h+1 */
            __m512i v[16];
            for (int row = 0; row < 16; row++) v[row] = _mm512_loadu_si512((const void *)(sb + ridx[row] + qo + 64 * h));
            tr16(v);
            for (int e = 0; e < 16; e++) {
                const int c = 2 * h + e / 8, g = e % 8;
                __m512i lo = _mm512_and_si512(v[e], m4), hi = _mm512_and_si512(_mm512_srli_epi32(v[e], 4), m4);
                if (five) { /* bits 2c and 2c + 1 of each qh byte to bit 4 */
                    lo = _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hv[g], 2 * c), one), 4));
                    hi = _mm512_or_si512(hi, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hv[g], 2 * c + 1), one), 4));
                }
                _mm512_store_si512((void *)(out + (2 * c) * 640 + 64 * g), lo);
                _mm512_store_si512((void *)(out + (2 * c + 1) * 640 + 64 * g), hi);
            }
        }
    }
}
static void pack_q4_k(const uint8_t *w, const int32_t *ridx, __m512i vidx, int64_t b0, int64_t nbc, uint8_t *out) {
    (void)vidx;
    pack_qk45(w, ridx, b0, nbc, out, 0);
}
static void pack_q5_k(const uint8_t *w, const int32_t *ridx, __m512i vidx, int64_t b0, int64_t nbc, uint8_t *out) {
    (void)vidx;
    pack_qk45(w, ridx, b0, nbc, out, 1);
}

/* The IQ4_NL codebook plus 128 (unsigned codes for vpdpbusd; the zero point 128 goes through the
 * activation sums; + 128 on int8 flips the top bit), in each 128-bit lane for vpshufb. */
AI __m512i iq4_utab(void) {
    return _mm512_broadcast_i32x4(_mm_xor_si128(iq4_codebook(), _mm_set1_epi8((char)0x80)));
}

/* IQ4_XS: BS 32, b0 and nbc multiples of 8; records of 576 bytes (weights u = value + 128, z =
 * 128, s = d * (sc6 - 32)). Layout in quant.c: sub-block s of a 136-byte superblock has its 16
 * quant bytes at 8 + 16s (element j low nibble, j + 16 high nibble). */
static void pack_iq4_xs(const uint8_t *w, const int32_t *ridx, __m512i vidx, int64_t b0, int64_t nbc, uint8_t *out) {
    (void)vidx;
    const __m512i m4 = _mm512_set1_epi8(0x0F), tab = iq4_utab();
    for (int64_t S = b0 / 8; S < (b0 + nbc) / 8; S++, out += 8 * 576) {
        const uint8_t *sb = w + S * 136;
        for (int r = 0; r < 16; r++) {
            const uint8_t *p = sb + ridx[r];
            const float d = f16v(p);
            uint16_t sh;
            memcpy(&sh, p + 2, 2);
            for (int j = 0; j < 8; j++) {
                const int ls = ((p[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((sh >> (2 * j)) & 3) << 4);
                ((float *)(out + j * 576 + 512))[r] = d * (float)(ls - 32);
            }
        }
        for (int h = 0; h < 2; h++) { /* quant bytes 64h..64h+63: sub-blocks 4h..4h+3 */
            __m512i v[16];
            for (int row = 0; row < 16; row++) v[row] = _mm512_loadu_si512((const void *)(sb + ridx[row] + 8 + 64 * h));
            tr16(v);
            for (int e = 0; e < 16; e++) { /* dword e % 4 of sub-block 4h + e / 4: groups e % 4 and e % 4 + 4 */
                uint8_t *o = out + (4 * h + e / 4) * 576 + 64 * (e % 4);
                _mm512_store_si512((void *)o, _mm512_shuffle_epi8(tab, _mm512_and_si512(v[e], m4)));
                _mm512_store_si512((void *)(o + 256), _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi32(v[e], 4), m4)));
            }
        }
    }
}

/* Q6_K: BS 16, b0 and nbc multiples of 16; records of 320 bytes (weights u = q in 0..63, z = 32,
 * s = d*sc). */
static void pack_q6_k(const uint8_t *w, const int32_t *ridx, __m512i vidx, int64_t b0, int64_t nbc, uint8_t *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    for (int64_t S = b0 / 16; S < (b0 + nbc) / 16; S++, out += 16 * 320) {
        const uint8_t *sb = w + S * 210;
        /* d is at 208..209; read 206..209 so the gather stays inside the block */
        const __m512i dv = _mm512_srli_epi32(_mm512_i32gather_epi32(vidx, (const void *)(sb + 206), 1), 16);
        const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dv));
        for (int q = 0; q < 4; q++) {
            const __m512i scv = _mm512_i32gather_epi32(vidx, (const void *)(sb + 192 + 4 * q), 1);
            _mm512_store_ps((float *)(out + (4 * q + 0) * 320 + 256), _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(scv, 24), 24))));
            _mm512_store_ps((float *)(out + (4 * q + 1) * 320 + 256), _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(scv, 16), 24))));
            _mm512_store_ps((float *)(out + (4 * q + 2) * 320 + 256), _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(scv, 8), 24))));
            _mm512_store_ps((float *)(out + (4 * q + 3) * 320 + 256), _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(scv, 24))));
        }
        /* quant bytes by row loads + transposes: tl[h][e] = ql dword e of half h (dwords 0-7
         * "a", 8-15 "b"), th[e] = qh dword e (0-7 half 0, 8-15 half 1) */
        __m512i tl[2][16], th[16];
        for (int row = 0; row < 16; row++) {
            const uint8_t *p = sb + ridx[row];
            tl[0][row] = _mm512_loadu_si512((const void *)p);
            tl[1][row] = _mm512_loadu_si512((const void *)(p + 64));
            th[row] = _mm512_loadu_si512((const void *)(p + 128));
        }
        tr16(tl[0]);
        tr16(tl[1]);
        tr16(th);
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < 8; p++) {
                const __m512i A = tl[h][p], B = tl[h][8 + p], H = th[8 * h + p];
                __m512i g[4];
                g[0] = _mm512_or_si512(_mm512_and_si512(A, m4), _mm512_and_si512(_mm512_slli_epi32(H, 4), m30));
                g[1] = _mm512_or_si512(_mm512_and_si512(B, m4), _mm512_and_si512(_mm512_slli_epi32(H, 2), m30));
                g[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(A, 4), m4), _mm512_and_si512(H, m30));
                g[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(B, 4), m4), _mm512_and_si512(_mm512_srli_epi32(H, 2), m30));
                for (int k = 0; k < 4; k++)
                    _mm512_store_si512((void *)(out + (8 * h + 2 * k + (p >> 2)) * 320 + 64 * (p & 3)), g[k]);
            }
    }
}

#ifndef GEMM_Q_HINT
#define GEMM_Q_HINT _MM_HINT_T0
#endif
typedef void (*pack_fn)(const uint8_t *, const int32_t *, __m512i, int64_t, int64_t, uint8_t *);

/* Shared driver. G: groups of 4 per block (BS = 4G), zp: zero point, has_m: per-block mins; gt
 * tokens per micro-kernel pass (GT here; 16 for the AMX micro-kernels of gemm_amx.c); with
 * signed_codes the packed codes become u - zp (int8) before the micro-kernel sees them. */
static void gemm_q8_common(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x,
                           int64_t n_tok, float *y, const int G, const int has_m, const int zp, pack_fn pack,
                           mk_q8_fn mk, const int gt, const int signed_codes) {
    const int BS = 4 * G;
    const int64_t nbz = x->n_in / BS;
    const int64_t rec = G * 64 + 64 + (has_m ? 64 : 0);
    const int64_t ntg = (n_tok + gt - 1) / gt;
    const rf_gemm_x px = rf_gemm_pack_x(x, n_tok, G, zp, gt);
    const int8_t *xp = px.q;
    const int32_t *xz = px.z;
    const float *xd = px.d, *xds = px.ds;
    const int64_t kcb = KCQ / BS; /* blocks per chunk */
    uint8_t *pk = gscratch(0, (size_t)(kcb * rec));
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
    for (int64_t r = r0; r < r1; r += 16) {
        const int nr = (int)RF_MIN(16, r1 - r);
        int32_t ridx[16];
        for (int i = 0; i < 16; i++) ridx[i] = (int32_t)((uint64_t)RF_MIN(i, nr - 1) * rb);
        const __m512i vidx = _mm512_loadu_si512((const void *)ridx);
        const __mmask16 mask = (__mmask16)((1u << nr) - 1);
        const uint8_t *wr = w + (uint64_t)r * rb;
        for (int64_t b0 = 0; b0 < nbz; b0 += kcb) {
            const int64_t nbc = RF_MIN(kcb, nbz - b0);
            pack(wr, ridx, vidx, b0, nbc, pk);
            if (signed_codes && zp)
                for (int64_t i = 0; i < nbc; i++)
                    for (int g = 0; g < G; g++) {
                        uint8_t *p = pk + i * rec + 64 * g;
                        _mm512_store_si512((void *)p, _mm512_sub_epi8(_mm512_load_si512((const void *)p), _mm512_set1_epi8((char)zp)));
                    }
            /* The gathers above wait on DRAM for 16 separate rows, which the hardware prefetcher
             * follows poorly: fetch the next chunk (or the next tile's first chunk) now, while
             * the micro-kernels work on this one. */
            const uint8_t *nw = NULL;
            uint64_t noff = 0, nlen = rb * (uint64_t)kcb / (uint64_t)nbz;
            int nnr = 0;
            if (b0 + kcb < nbz) nw = wr, noff = rb * (uint64_t)(b0 + kcb) / (uint64_t)nbz, nnr = nr;
            else if (r + 16 < r1) nw = wr + 16 * rb, nnr = (int)RF_MIN(16, r1 - r - 16);
            if (noff + nlen > rb) nlen = rb - noff;
            /* spread over the micro-kernel passes (all at once, 144 lines for Q4_0, the pack
             * still waited on the first loads: 28% of the Q4_0 pp64 profile) */
            const int64_t nlines = nw ? (int64_t)((nlen + 63) / 64) : 0;
            for (int64_t tg = 0; tg < ntg; tg++) {
                const int T = (int)RF_MIN(gt, n_tok - tg * gt);
                for (int64_t l = tg * nlines / ntg; l < (tg + 1) * nlines / ntg; l++)
                    for (int i = 0; i < nnr; i++)
                        _mm_prefetch((const char *)(nw + (uint64_t)i * rb + noff + RF_MIN((uint64_t)l * 64, nlen - 1)), GEMM_Q_HINT);
                const int64_t o = (tg * nbz + b0) * gt;
                mk(pk, nbc, T, xp + o * BS, xz + o, xd + o, xds + o, y + tg * gt * n_out + r, n_out, mask, b0 > 0);
            }
        }
    }
}

/* The formats with an AVX-512 int8 GEMM: block of 4G elements, mins, zero point, packer, kernel. */
typedef struct {
    int G, has_m, zp;
    pack_fn pack;
    mk_q8_fn mk;
} q8_format;

static int q8_format_of(uint32_t type, q8_format *f) {
    switch (type) {
    case RF_TYPE_Q4_0: *f = (q8_format){8, 0, 8, pack_q4_0, mk_g8}; return 1;
    case RF_TYPE_Q8_0: *f = (q8_format){8, 0, 128, pack_q8_0, mk_g8}; return 1;
    case RF_TYPE_Q4_K: *f = (q8_format){8, 1, 0, pack_q4_k, mk_g8m}; return 1;
    case RF_TYPE_Q5_K: *f = (q8_format){8, 1, 0, pack_q5_k, mk_g8m}; return 1;
    case RF_TYPE_IQ4_XS: *f = (q8_format){8, 0, 128, pack_iq4_xs, mk_g8}; return 1;
    case RF_TYPE_Q6_K: *f = (q8_format){4, 0, 32, pack_q6_k, mk_g4}; return 1;
    }
    return 0;
}

#define GEMM_Q8(name, type)                                                                                   \
    static void name(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, \
                     float *y) {                                                                              \
        q8_format f;                                                                                          \
        q8_format_of(type, &f);                                                                               \
        gemm_q8_common(w, rb, rq, n_out, x, n_tok, y, f.G, f.has_m, f.zp, f.pack, f.mk, GT, 0);                  \
    }
GEMM_Q8(gemm_q4_0, RF_TYPE_Q4_0)
GEMM_Q8(gemm_q8_0, RF_TYPE_Q8_0)
GEMM_Q8(gemm_q4_k, RF_TYPE_Q4_K)
GEMM_Q8(gemm_q5_k, RF_TYPE_Q5_K)
GEMM_Q8(gemm_iq4_xs, RF_TYPE_IQ4_XS)
GEMM_Q8(gemm_q6_k, RF_TYPE_Q6_K)

int rf_avx512_q8_format(uint32_t type, int *G, int *has_m, int *zp) {
    q8_format f;
    if (!q8_format_of(type, &f)) return 0;
    *G = f.G, *has_m = f.has_m, *zp = f.zp;
    return 1;
}

void rf_avx512_gemm_q8_with(uint32_t type, const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x,
                            int64_t n_tok, float *y, int gt, rf_mk_q8_fn mk, int signed_codes) {
    q8_format f;
    if (!q8_format_of(type, &f)) abort();
    gemm_q8_common(w, rb, rq, n_out, x, n_tok, y, f.G, f.has_m, f.zp, f.pack, mk, gt, signed_codes);
}

/* f32 micro-kernel: 32 rows (two 16-row vectors per k: pk is [k][32]) x T <= 8 tokens of the
 * packed activations ([k][GTF] floats, starting at this pass's first token): per k two weight
 * loads and T broadcast loads feed 2T FMAs. */
AI void mk_f32(const float *pk, int64_t kn, const int T, const float *xp, float *y, int64_t n_out, __mmask16 m0,
               __mmask16 m1, int accumulate) {
    __m512 a0[8], a1[8];
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
        a0[t] = accumulate ? _mm512_maskz_loadu_ps(m0, y + t * n_out) : _mm512_setzero_ps();
        a1[t] = accumulate ? _mm512_maskz_loadu_ps(m1, y + t * n_out + 16) : _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kn; k++, pk += 32, xp += GTF) {
        const __m512 w0 = _mm512_load_ps(pk), w1 = _mm512_load_ps(pk + 16);
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
            const __m512 xv = _mm512_set1_ps(xp[t]);
            a0[t] = _mm512_fmadd_ps(w0, xv, a0[t]);
            a1[t] = _mm512_fmadd_ps(w1, xv, a1[t]);
        }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
        _mm512_mask_storeu_ps(y + t * n_out, m0, a0[t]);
        _mm512_mask_storeu_ps(y + t * n_out + 16, m1, a1[t]);
    }
}

static void mk_f32_any(const float *pk, int64_t kn, int T, const float *xp, float *y, int64_t n_out, __mmask16 m0,
                       __mmask16 m1, int acc) {
    switch (T) {
#define C_(n) case n: mk_f32(pk, kn, n, xp, y, n_out, m0, m1, acc); break;
    C_(1) C_(2) C_(3) C_(4) C_(5) C_(6) C_(7)
#undef C_
    default: mk_f32(pk, kn, 8, xp, y, n_out, m0, m1, acc); break;
    }
}

/* Packs k-steps [k0, k0 + kn) of 16 rows (wr + ridx[i]) as f32 into pk[k * 32 + i]. */
AI void pack_h16(const uint8_t *wr, const int32_t *ridx, int64_t k0, int64_t kn, float *pk, const int kind) {
    const __m512i vidx = _mm512_loadu_si512((const void *)ridx);
    int64_t k = 0;
    for (; k + 32 <= kn; k += 32) { /* 16 rows x 32 k: row loads, transposed as dwords */
        __m512i v[16];
        for (int i = 0; i < 16; i++) v[i] = _mm512_loadu_si512((const void *)(wr + ridx[i] + 2 * (k0 + k)));
        tr16(v);
        for (int e = 0; e < 16; e++) {
            __m512 lo, hi;
            if (kind == 1) {
                lo = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v[e]));
                hi = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v[e], 16)));
            } else {
                lo = _mm512_castsi512_ps(_mm512_slli_epi32(v[e], 16));
                hi = _mm512_castsi512_ps(_mm512_and_si512(v[e], _mm512_set1_epi32((int)0xFFFF0000u)));
            }
            _mm512_store_ps(pk + 32 * (k + 2 * e), lo);
            _mm512_store_ps(pk + 32 * (k + 2 * e + 1), hi);
        }
    }
    for (; k + 1 < kn; k += 2) {
        const __m512i v = _mm512_i32gather_epi32(vidx, (const void *)(wr + 2 * (k0 + k)), 1);
        __m512 lo, hi;
        if (kind == 1) {
            lo = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
            hi = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
        } else {
            lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
            hi = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xFFFF0000u)));
        }
        _mm512_store_ps(pk + 32 * k, lo);
        _mm512_store_ps(pk + 32 * (k + 1), hi);
    }
    if (k < kn) { /* odd tail: one element per row */
        for (int i = 0; i < 16; i++) {
            uint16_t h;
            memcpy(&h, wr + ridx[i] + 2 * (k0 + k), 2);
            if (kind == 1) pk[32 * k + i] = _cvtsh_ss(h);
            else {
                const uint32_t u = (uint32_t)h << 16;
                memcpy(pk + 32 * k + i, &u, 4);
            }
        }
    }
}

#ifndef GEMM_F_PF /* 0: no prefetch of the next F16/BF16 chunk */
#define GEMM_F_PF 1
#endif
#ifndef GEMM_F_HINT
#define GEMM_F_HINT _MM_HINT_T1
#endif
AI void gemm_h_common(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in,
                      const float *x, int64_t n_tok, float *y, const int kind) {
    float *pk = gscratch(0, sizeof(float) * 32 * KCF);
    const int64_t ntg = (n_tok + GTF - 1) / GTF;
    float *xp = gscratch(1, sizeof(float) * (size_t)(ntg * GTF * n_in));
    for (int64_t tg = 0; tg < ntg; tg++) {
        const int64_t nt = RF_MIN(GTF, n_tok - tg * GTF);
        float *d = xp + tg * GTF * n_in;
        const float *xs = x + tg * GTF * n_in;
        int64_t k = 0;
        for (; k + 16 <= n_in; k += 16) { /* 16 tokens x 16 k, transposed in registers */
            __m512i v[16];
            for (int j = 0; j < 16; j++)
                v[j] = j < nt ? _mm512_loadu_si512((const void *)(xs + j * n_in + k)) : _mm512_setzero_si512();
            tr16(v);
            for (int e = 0; e < 16; e++) _mm512_store_si512((void *)(d + (k + e) * GTF), v[e]);
        }
        for (; k < n_in; k++)
            for (int64_t j = 0; j < GTF; j++) d[k * GTF + j] = j < nt ? xs[j * n_in + k] : 0.0f;
    }
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
    for (int64_t r = r0; r < r1; r += 32) {
        const int nr = (int)RF_MIN(32, r1 - r);
        int32_t ridx[32];
        for (int i = 0; i < 32; i++) ridx[i] = (int32_t)((uint64_t)RF_MIN(i, nr - 1) * rb);
        const __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFFu : (1u << nr) - 1);
        const __mmask16 m1 = (__mmask16)(nr <= 16 ? 0u : nr >= 32 ? 0xFFFFu : (1u << (nr - 16)) - 1);
        const uint8_t *wr = w + (uint64_t)r * rb;
        for (int64_t k0 = 0; k0 < n_in; k0 += KCF) {
            const int64_t kn = RF_MIN(KCF, n_in - k0);
            pack_h16(wr, ridx, k0, kn, pk, kind);
            pack_h16(wr, ridx + 16, k0, kn, pk + 16, kind);
            /* The next chunk's weights (32 rows, each in its own 4 KiB page or more apart) are
             * prefetched into L2 while the micro-kernel runs on this one, a share per pass; the
             * pack's row loads otherwise wait on DRAM (35% of the F16 prompt profile). */
            const uint8_t *nw = NULL;
            int64_t nk0 = 0, nkn = 0, nnr = 0;
            if (k0 + KCF < n_in) nw = wr, nk0 = k0 + KCF, nkn = RF_MIN(KCF, n_in - nk0), nnr = nr;
            else if (r + 32 < r1) nw = wr + 32 * rb, nkn = RF_MIN(KCF, n_in), nnr = RF_MIN(32, r1 - r - 32);
            const int64_t nlines = nw && GEMM_F_PF ? (2 * nkn + 63) / 64 : 0, npass = (n_tok + 7) / 8;
            for (int64_t t0 = 0; t0 < n_tok; t0 += 8) {
                const int64_t tg = t0 / GTF, p = t0 / 8;
                for (int64_t l = p * nlines / npass; l < (p + 1) * nlines / npass; l++)
                    for (int64_t i = 0; i < nnr; i++)
                        _mm_prefetch((const char *)(nw + (uint64_t)i * rb + 2 * nk0 + 64 * l), GEMM_F_HINT);
                mk_f32_any(pk, kn, (int)RF_MIN(8, n_tok - t0), xp + (tg * n_in + k0) * GTF + (t0 % GTF), y + t0 * n_out + r,
                           n_out, m0, m1, k0 > 0);
            }
        }
    }
}

static void gemm_f16(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in,
                     const float *x, int64_t n_tok, float *y) {
    gemm_h_common(w, rb, rq, n_out, n_in, x, n_tok, y, 1);
}
static void gemm_bf16(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in,
                      const float *x, int64_t n_tok, float *y) {
    gemm_h_common(w, rb, rq, n_out, n_in, x, n_tok, y, 2);
}
void rf_avx512_gemm_h_f32(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                          int64_t n_tok, float *y, int kind) {
    if (kind == 1) gemm_f16(w, rb, rq, n_out, n_in, x, n_tok, y);
    else gemm_bf16(w, rb, rq, n_out, n_in, x, n_tok, y);
}

/* ---- Matrix-vector (one token, AVX-512 + VNNI) -------------------------------------------
 *
 * Decode reads every weight once, so nothing is packed: the kernels pull several 32-blocks into
 * one 512-bit register straight from the row (loads with inserts collect the quant bytes of 4 or
 * 2 blocks, vpermw or scalar loads their f16 scales), multiply with vpdpbusd against activations that
 * were rearranged once per call to match that order, and scale 16 lanes at a time. Integer
 * offsets (Q4_0's 8, Q8_0's 128 after making its bytes unsigned, Q6_K's 32) start the integer
 * accumulator at -zp * sum(xq), precomputed per block. Rows are done one after the other: the
 * kernels take R rows at once (sharing activation loads), but R = 4 measured 25 t/s against 43
 * for R = 1 end to end (Q4_0 decode): rows are contiguous, so one row at a time is one
 * sequential stream per thread, which the hardware prefetcher follows; 4 interleaved streams it
 * does not (software prefetch did not help). Leftover blocks (a row length that is
 * not a multiple of the group) are done with the reference decoder. */

/* Software prefetch distance (bytes ahead in the row) per kernel. A/B, one thread, weights
 * from DRAM (bench_matmul "DRAM" column, 3 alternating rounds, GB/s), AMD EPYC (Zen 4): Q4_0 0:
 * 15.5, 1536: 15.6, 3072: 12.8; Q8_0 14.6 / 15.6 / 16.9; Q4_K 13.6 / 15.4 / 15.9; F16 16.6 / 16.1 /
 * 14.6. On an Intel Xeon with AMX 3072 serves Q4_0 and F16 best (bench two threads Q4_0 24.3-24.7
 * -> 26.5-28.1 GB/s, F16 30.9-32.1 -> 35.4-38.4; 1B tg32 Q4_0 +5%, F16 +8-15%; PERF-CPU.md
 * section 21). With the far L2 prefetch below, Q4_0 at 3072 also gains on the EPYC in decode
 * (section 25), so only F16 takes its distance by vendor (PF_F16_INTEL). Q4_0 and Q8_0, whose
 * groups of 72 and 68 bytes straddle lines, also prefetch each group's last byte (Intel: tg32
 * +2-4%; not measured on the EPYC). */
#ifndef GEMV_PF_SCALE /* 0 turns all of them off */
#define GEMV_PF_SCALE 1
#endif
#ifndef PF_Q4_0
#define PF_Q4_0 3072
#endif
#ifndef PF_Q8_0
#define PF_Q8_0 3072
#endif
#ifndef PF_Q4_K
#define PF_Q4_K 3072
#endif
#ifndef PF_Q6_K
#define PF_Q6_K 3072
#endif
#define PF_IQ4_XS 3072
/* A second, farther prefetch into the L2 only (T1) for Q4_0 and Q8_0 (every CPU) and F16 (Intel):
 * the L2 streamer stops at each 4 KiB page and the 16 L1 fill buffers cannot keep a DRAM
 * latency's worth of lines in flight, so the near T0 prefetch alone leaves the core short of
 * lines in flight. A/B on the Xeon with AMX, 1B tg32, alternating rounds, one run of rows per
 * thread (PERF-CPU.md section 22): Q4_0 +3-7%, Q8_0 +2-5%, F16 +3-5% (7 of 7 rounds; it had lost
 * 4% when the rows were handed out in 4 chunks per thread); Q4_K_M lost 5% with it (Q4_K and
 * Q6_K), so the K-quants do not take it. On the 2-core EPYC (Zen 4), 1B tg32, 17 alternating
 * rounds (section 25): Q4_0 (with 3072 near) and Q8_0 won 13 of 17 each, medians +5-8%; F16 at
 * Intel's distances lost (-8%, 4 of 7), so F16 keeps them for Intel. 0 turns it off. */
#ifndef PF_Q4_0_L2
#define PF_Q4_0_L2 9216
#endif
#ifndef PF_F16_L2_INTEL
#define PF_F16_L2_INTEL 6144
#endif
#ifndef PF_Q8_0_L2
#define PF_Q8_0_L2 6144 /* 9216: -3% (Xeon, 9 rounds); Q4_0 measured level at 6144 / 9216 / 12288 */
#endif
#ifndef PF_F16
#define PF_F16 1536
#endif
#ifndef PF_F16_INTEL
#define PF_F16_INTEL 3072
#endif
static int gemv_pf_intel; /* rf_mm_kernels_avx512: an Intel CPU (F16's *_INTEL distances) */
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T0
#endif
#define PF(p, d) do { if (GEMV_PF_SCALE) _mm_prefetch((const char *)(p) + (d) * GEMV_PF_SCALE, PF_HINT); } while (0)
#define PF_L2(p, d) do { if (GEMV_PF_SCALE && (d)) _mm_prefetch((const char *)(p) + (d) * GEMV_PF_SCALE, _MM_HINT_T1); } while (0)

AI float hsum16(__m512 v) { return _mm512_reduce_add_ps(v); }

/* Q4_0: groups of 4 blocks (72 bytes). Per group the activation record is 256 bytes: codes of
 * elements 0..15 of the 4 blocks, codes of elements 16..31, 16 dx (lane j: block j/4), 16 int32
 * -8*sum (lane 4k: block k). */
/* Batch invariance: a token's result must not depend on how many tokens share the call (decode
 * and prompt of the same position must agree bit for bit: one ulp here can flip an int8 code of
 * the next layer's activations, which random-weight test models amplify to 1e-1 in the logits).
 * The GEMM defines the arithmetic: per block b in order, acc = fma(float(I_b), fl(d_w,b * d_x,b),
 * acc) with I_b the exact integer block sum (offset included), from acc = 0. The matvec kernels
 * compute the I_b and products with SIMD and then run that same scalar fma chain. */

/* One Q4_0 group (4 blocks): f32 block partial products of 16 lanes, scale not yet applied. */
AI __m512 q4_0_grp(const uint8_t *bp, const uint8_t *xr, __m512 *scale, const int pf, const int pf2) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i idd = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 27, 27, 27, 27, 18, 18, 18, 18,
                                         9, 9, 9, 9, 0, 0, 0, 0);
    const __m512i xl = _mm512_load_si512((const void *)xr), xh = _mm512_load_si512((const void *)(xr + 64));
    const __m512i xz = _mm512_load_si512((const void *)(xr + 192));
    PF(bp, pf);
    PF(bp + 71, pf); /* a group's last byte too: 72-byte groups leave one 64-byte line in 9 unprefetched */
    PF_L2(bp, pf2);
    PF_L2(bp + 71, pf2);
    const __m512i qs = ld_q4_0x4(bp);
    const __m512 dv = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idd, _mm512_loadu_si512((const void *)bp))));
    *scale = _mm512_mul_ps(dv, _mm512_load_ps((const float *)(xr + 128)));
    __m512i ia = _mm512_dpbusd_epi32(xz, _mm512_and_si512(qs, m4), xl);
    ia = _mm512_dpbusd_epi32(ia, _mm512_and_si512(_mm512_srli_epi16(qs, 4), m4), xh);
    return _mm512_cvtepi32_ps(ia);
}

/* Lane-parallel: lane 4k+j accumulates a quarter of block k of every group in f32 (no per-block
 * horizontal step, no serial chain); two accumulators (even/odd groups) so the fma latency is
 * not the limit. Not bit-identical to the GEMM (other summation order): within float rounding. */
AI void gemv_q4_0_rows(const uint8_t *w, uint64_t rb, const int R, const uint8_t *xr, int64_t ng, float *out,
                       const int pf, const int pf2) {
    (void)rb;
    (void)R;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), s0, s1;
    int64_t g = 0;
    for (; g + 2 <= ng; g += 2, xr += 512) {
        const __m512 p0 = q4_0_grp(w + 72 * g, xr, &s0, pf, pf2);
        const __m512 p1 = q4_0_grp(w + 72 * g + 72, xr + 256, &s1, pf, pf2);
        a0 = _mm512_fmadd_ps(p0, s0, a0);
        a1 = _mm512_fmadd_ps(p1, s1, a1);
    }
    if (g < ng) {
        const __m512 p0 = q4_0_grp(w + 72 * g, xr, &s0, pf, pf2);
        a0 = _mm512_fmadd_ps(p0, s0, a0);
    }
    out[0] = hsum16(_mm512_add_ps(a0, a1));
}

/* Leftover blocks [b0, nb) of a Q4_0 (kind 0) or Q8_0 (kind 1) row, continuing the chain. */
static float gemv_tail(const uint8_t *row, int kind, int64_t b0, int64_t nb, const rf_xq8 *x, float acc) {
    for (int64_t b = b0; b < nb; b++) {
        const uint8_t *blk = row + b * (kind ? 34 : 18);
        const int8_t *xq = x->q + 32 * b;
        int32_t I = 0;
        for (int i = 0; i < 32; i++) {
            const int q = kind ? (int)(int8_t)blk[2 + i] : (int)((i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4)) - 8;
            I += q * xq[i];
        }
        acc = fmaf((float)I, f16v(blk) * x->d[b], acc);
    }
    return acc;
}

static void gemv_q4_0(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) {
    const int64_t nb = x->n_in / 32, ng = nb / 4;
    uint8_t *xr = gscratch(1, (size_t)(ng * 256) + 64);
    for (int64_t g = 0; g < ng; g++) {
        uint8_t *o = xr + g * 256;
        for (int k = 0; k < 4; k++) {
            const int64_t b = 4 * g + k;
            memcpy(o + 16 * k, x->q + 32 * b, 16);
            memcpy(o + 64 + 16 * k, x->q + 32 * b + 16, 16);
            for (int j = 0; j < 4; j++) {
                ((float *)(o + 128))[4 * k + j] = x->d[b];
                ((int32_t *)(o + 192))[4 * k + j] = j ? 0 : -8 * ((int32_t)x->s16[2 * b] + x->s16[2 * b + 1]);
            }
        }
    }
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1)) {
        for (int64_t r = r0; r < r1; r++) gemv_q4_0_rows(w + (uint64_t)r * rb, rb, 1, xr, ng, y + r, PF_Q4_0, PF_Q4_0_L2);
        if (ng * 4 < nb)
            for (int64_t r = r0; r < r1; r++) y[r] = gemv_tail(w + (uint64_t)r * rb, 0, ng * 4, nb, x, y[r]);
    }
}

/* Q8_0: groups of 2 blocks (68 bytes); codes made unsigned (xor 0x80, zero point 128). The
 * activation codes are used in place; per group the record holds 16 dx (lane j: block j/8) and
 * 16 int32 -128*sum (lanes 0 and 8). */
AI __m512 q8_0_grp(const uint8_t *bp, const int8_t *xq, const uint8_t *xr, __m512 *scale, const int pf2) {
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    const __m512i xv = _mm512_loadu_si512((const void *)xq);
    const __m512i xz = _mm512_load_si512((const void *)(xr + 64));
    PF(bp, PF_Q8_0);
    PF(bp + 67, PF_Q8_0); /* a group's last byte too: 68-byte groups leave one line in 17 unprefetched */
    PF_L2(bp, pf2);
    PF_L2(bp + 67, pf2);
    const __m512i qs = _mm512_xor_si512(ld_q8_0x2(bp), x80);
    *scale = _mm512_mul_ps(d_q8_0x2(bp), _mm512_load_ps((const float *)xr));
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(xz, qs, xv));
}

AI void gemv_q8_0_rows(const uint8_t *w, uint64_t rb, const int R, const int8_t *xq, const uint8_t *xr, int64_t ng,
                       float *out, const int pf2) {
    (void)rb;
    (void)R;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), s0, s1;
    int64_t g = 0;
    for (; g + 2 <= ng; g += 2, xr += 256, xq += 128) {
        const __m512 p0 = q8_0_grp(w + 68 * g, xq, xr, &s0, pf2);
        const __m512 p1 = q8_0_grp(w + 68 * g + 68, xq + 64, xr + 128, &s1, pf2);
        a0 = _mm512_fmadd_ps(p0, s0, a0);
        a1 = _mm512_fmadd_ps(p1, s1, a1);
    }
    if (g < ng) {
        const __m512 p0 = q8_0_grp(w + 68 * g, xq, xr, &s0, pf2);
        a0 = _mm512_fmadd_ps(p0, s0, a0);
    }
    out[0] = hsum16(_mm512_add_ps(a0, a1));
}

static void gemv_q8_0(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) {
    const int64_t nb = x->n_in / 32, ng = nb / 2;
    uint8_t *xr = gscratch(1, (size_t)(ng * 128) + 64);
    for (int64_t g = 0; g < ng; g++) {
        uint8_t *o = xr + g * 128;
        for (int j = 0; j < 16; j++) {
            const int64_t b = 2 * g + j / 8;
            ((float *)o)[j] = x->d[b];
            ((int32_t *)(o + 64))[j] = (j % 8) ? 0 : -128 * ((int32_t)x->s16[2 * b] + x->s16[2 * b + 1]);
        }
    }
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1)) {
        for (int64_t r = r0; r < r1; r++) gemv_q8_0_rows(w + (uint64_t)r * rb, rb, 1, x->q, xr, ng, y + r, PF_Q8_0_L2);
        if (ng * 2 < nb)
            for (int64_t r = r0; r < r1; r++) y[r] = gemv_tail(w + (uint64_t)r * rb, 1, ng * 2, nb, x, y[r]);
    }
}

/* Q4_K (five = 0): one superblock (144 bytes) per step. The 128 quant bytes are two registers;
 * the low nibbles of register p hold sub-blocks 4p and 4p+2, the high nibbles 4p+1 and 4p+3, so
 * the activations are regrouped per superblock to that order (record: 256 codes, then per
 * sub-block in natural order its dx and its d*sum for the mins; 320 bytes). The 6-bit scales and
 * mins are unpacked with 32-bit masks; the 8 products d*sc*dx are formed once per superblock in
 * one 256-bit multiply and spread over the lanes with vpermps (the same products, rounded the
 * same way, as forming d*sc per lane and multiplying by the lane's dx). Q5_K (five = 1, 176-byte
 * superblocks): the same with the fifth bits of qh (at 16; the quants at 48) merged in: qh is
 * broadcast to both 256-bit halves, and each half is shifted (vpsrlvw) by its sub-block's bit. */
enum { QK45_REC = 320 }; /* activation record bytes per superblock (a multiple of 64: aligned loads) */
AI void gemv_qk45_row(const uint8_t *w, const uint8_t *xr, int64_t nsb, float *out, const int five) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    const int bb = five ? 176 : 144, qo = five ? 48 : 16;
#define SH2(a, b) _mm512_set_epi64(b, b, b, b, a, a, a, a) /* 16-bit shift counts per half */
    const __m512i hs[4] = {SH2(0, 0x0002000200020002LL), SH2(0x0001000100010001LL, 0x0003000300030003LL),
                           SH2(0x0004000400040004LL, 0x0006000600060006LL),
                           SH2(0x0005000500050005LL, 0x0007000700070007LL)};
#undef SH2
    const __m512i ip[4] = {_mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0),
                           _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1),
                           _mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 4, 4, 4, 4, 4, 4, 4, 4),
                           _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 5, 5, 5, 5, 5, 5, 5, 5)};
    __m512 acc = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    __m256 macc = _mm256_setzero_ps();
    for (int64_t S = 0; S < nsb; S++, w += bb, xr += QK45_REC) {
        PF(w, PF_Q4_K);
        PF(w + 64, PF_Q4_K);
        PF(w + 128, PF_Q4_K);
        if (five) PF(w + 175, PF_Q4_K);
        const float d = f16v(w), dmin = f16v(w + 2);
        uint64_t sc8, mn8;
        k4_unpack64(w + 4, &sc8, &mn8);
        const __m256 scf = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc8))));
        const __m256 mnf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn8)));
        macc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), mnf), _mm256_load_ps((const float *)(xr + 288)), macc);
        const __m512 sc16 = _mm512_castps256_ps512(_mm256_mul_ps(scf, _mm256_load_ps((const float *)(xr + 256))));
        __m512i hb = _mm512_setzero_si512();
        if (five) hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w + 16)));
        _Pragma("GCC unroll 2") for (int p = 0; p < 2; p++) {
            const __m512i v = _mm512_loadu_si512((const void *)(w + qo + 64 * p));
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            if (five) {
                lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, hs[2 * p]), one), 4));
                hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, hs[2 * p + 1]), one), 4));
            }
            const __m512i ilo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_load_si512((const void *)(xr + 128 * p)));
            const __m512i ihi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, _mm512_load_si512((const void *)(xr + 128 * p + 64)));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ilo), _mm512_permutexvar_ps(ip[2 * p], sc16), acc);
            acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ihi), _mm512_permutexvar_ps(ip[2 * p + 1], sc16), acc1);
        }
    }
    *out = hsum16(_mm512_add_ps(acc, acc1)) - hsum8(macc);
}

AI void gemv_qk45(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y, const int five) {
    const int64_t nsb = x->n_in / 256;
    uint8_t *xr = gscratch(1, (size_t)(nsb * QK45_REC) + 64);
    static const int order[8] = {0, 2, 1, 3, 4, 6, 5, 7}; /* sub-block in each 32-byte slot */
    for (int64_t S = 0; S < nsb; S++) {
        uint8_t *o = xr + S * QK45_REC;
        for (int k = 0; k < 8; k++) {
            memcpy(o + 32 * k, x->q + 32 * (8 * S + order[k]), 32);
            ((float *)(o + 256))[k] = x->d[8 * S + k];
            ((float *)(o + 288))[k] = x->dsum[8 * S + k];
        }
    }
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r++) gemv_qk45_row(w + (uint64_t)r * rb, xr, nsb, y + r, five);
}
static void gemv_q4_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) {
    gemv_qk45(w, rb, rq, x, y, 0);
}
static void gemv_q5_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) {
    gemv_qk45(w, rb, rq, x, y, 1);
}

/* IQ4_XS: one superblock (136 bytes) per step. The 128 quant bytes are two registers; register p
 * holds sub-blocks 4p..4p+3, 16 bytes each, so dword lane j belongs to sub-block 4p + j / 4: its
 * low nibbles are elements 4(j % 4).., its high nibbles 16 + 4(j % 4)... Codes u = value + 128
 * by vpshufb. Activation record per superblock (448 bytes): for each p, the codes of elements
 * 0..15 of the four sub-blocks, of elements 16..31, then for both p 16 int32 -128 * sum (lane
 * 4k: sub-block 4p + k), then the 8 sub-blocks' dx (and 32 bytes of padding). The 8 scales
 * d * (sc6 - 32) are unpacked with vpsrlvd, multiplied by the dx in one 256-bit multiply and
 * spread over the lanes with vpermps (the same products as spreading first and multiplying per
 * lane). */
enum { IQ4XS_REC = 448 }; /* activation record bytes per superblock (a multiple of 64: aligned loads) */
AI void gemv_iq4_xs_row(const uint8_t *w, const uint8_t *xr, int64_t nsb, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), tab = iq4_utab();
    const __m256i shl = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), shh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m512i ip[2] = {_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                           _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4)};
    __m512 acc = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t S = 0; S < nsb; S++, w += 136, xr += IQ4XS_REC) {
        PF(w, PF_IQ4_XS);
        PF(w + 64, PF_IQ4_XS);
        PF(w + 135, PF_IQ4_XS);
        uint32_t sl;
        uint16_t sh;
        memcpy(&sl, w + 4, 4);
        memcpy(&sh, w + 2, 2);
        const __m256i ls = _mm256_or_si256(
            _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), shl), _mm256_set1_epi32(15)),
            _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(sh), shh), _mm256_set1_epi32(3)), 4));
        const __m512 sc16 = _mm512_castps256_ps512(
            _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(f16v(w)), _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)))),
                          _mm256_load_ps((const float *)(xr + 384))));
        _Pragma("GCC unroll 2") for (int p = 0; p < 2; p++) {
            const __m512i v = _mm512_loadu_si512((const void *)(w + 8 + 64 * p));
            const __m512i ulo = _mm512_shuffle_epi8(tab, _mm512_and_si512(v, m4));
            const __m512i uhi = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
            __m512i ia = _mm512_dpbusd_epi32(_mm512_load_si512((const void *)(xr + 256 + 64 * p)), ulo,
                                             _mm512_load_si512((const void *)(xr + 128 * p)));
            ia = _mm512_dpbusd_epi32(ia, uhi, _mm512_load_si512((const void *)(xr + 128 * p + 64)));
            const __m512 s = _mm512_permutexvar_ps(ip[p], sc16);
            if (p) acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), s, acc1);
            else acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), s, acc);
        }
    }
    *out = hsum16(_mm512_add_ps(acc, acc1));
}

static void gemv_iq4_xs(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) {
    const int64_t nsb = x->n_in / 256;
    uint8_t *xr = gscratch(1, (size_t)(nsb * IQ4XS_REC) + 64);
    for (int64_t S = 0; S < nsb; S++) {
        uint8_t *o = xr + S * IQ4XS_REC;
        for (int p = 0; p < 2; p++)
            for (int k = 0; k < 4; k++) {
                const int64_t b = 8 * S + 4 * p + k;
                memcpy(o + 128 * p + 16 * k, x->q + 32 * b, 16);
                memcpy(o + 128 * p + 64 + 16 * k, x->q + 32 * b + 16, 16);
                for (int j = 0; j < 4; j++)
                    ((int32_t *)(o + 256 + 64 * p))[4 * k + j] = j ? 0 : -128 * ((int32_t)x->s16[2 * b] + x->s16[2 * b + 1]);
                ((float *)(o + 384))[4 * p + k] = x->d[b];
            }
    }
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r++) gemv_iq4_xs_row(w + (uint64_t)r * rb, xr, nsb, y + r);
}

/* Q6_K: one superblock (210 bytes) per step, 64 elements per register in natural order (the
 * high-bit pairs come from one 32-byte qh load broadcast to both halves and shifted per half
 * with vpsllvw/vpsrlvw). Record per superblock: 4 x 16 int32 -32*sum16 (lane 4j: 16-block j of
 * the register), then the dx of each 16-element group (16 floats; 320 bytes). The int8 scales
 * become 16 floats d*sc, times the groups' dx in one multiply per superblock, spread with
 * vpermps (the same products as d*sc spread first and multiplied by each lane's dx). */
enum { Q6K_REC = 320 }; /* activation record bytes per superblock (a multiple of 64: aligned loads) */
AI void gemv_q6_k_row(const uint8_t *w, const int8_t *xq, const uint8_t *xr, int64_t nsb, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i shl = _mm512_set_epi64(0x0002000200020002LL, 0x0002000200020002LL, 0x0002000200020002LL, 0x0002000200020002LL,
                                         0x0004000400040004LL, 0x0004000400040004LL, 0x0004000400040004LL, 0x0004000400040004LL);
    const __m512i shr = _mm512_set_epi64(0x0002000200020002LL, 0x0002000200020002LL, 0x0002000200020002LL, 0x0002000200020002LL, 0, 0, 0, 0);
    __m512 acc = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t S = 0; S < nsb; S++, w += 210, xr += Q6K_REC, xq += 256) {
        PF(w, PF_Q6_K);
        PF(w + 64, PF_Q6_K);
        PF(w + 128, PF_Q6_K);
        PF(w + 192, PF_Q6_K);
        const __m512 scv = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(f16v(w + 208)),
                                                       _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + 192))))),
                                         _mm512_load_ps((const float *)(xr + 256)));
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m512i ab = _mm512_loadu_si512((const void *)(w + 64 * h));
            const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w + 128 + 32 * h)));
            const __m512i g01 = _mm512_or_si512(_mm512_and_si512(ab, m4), _mm512_and_si512(_mm512_sllv_epi16(hb, shl), m30));
            const __m512i g23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ab, 4), m4), _mm512_and_si512(_mm512_srlv_epi16(hb, shr), m30));
            _Pragma("GCC unroll 2") for (int c = 0; c < 2; c++) {
                const int q = 2 * h + c; /* 64-element chunk */
                const __m512i ia = _mm512_dpbusd_epi32(_mm512_load_si512((const void *)(xr + 64 * q)), c ? g23 : g01,
                                                       _mm512_loadu_si512((const void *)(xq + 64 * q)));
                const __m512i idx = _mm512_srli_epi32(_mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                                       _mm512_set1_epi32(16 * q)), 2);
                const __m512 s = _mm512_permutexvar_ps(idx, scv);
                if (c) acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), s, acc1);
                else acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), s, acc);
            }
        }
    }
    *out = hsum16(_mm512_add_ps(acc, acc1));
}

static void gemv_q6_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) {
    const int64_t nsb = x->n_in / 256;
    uint8_t *xr = gscratch(1, (size_t)(nsb * Q6K_REC) + 64);
    for (int64_t S = 0; S < nsb; S++) {
        uint8_t *o = xr + S * Q6K_REC;
        for (int q = 0; q < 4; q++)
            for (int j = 0; j < 16; j++) {
                const int64_t e = 256 * S + 64 * q + 4 * j; /* first element of the lane */
                ((int32_t *)(o + 64 * q))[j] = (j % 4) ? 0 : -32 * (int32_t)x->s16[e / 16];
            }
        for (int g = 0; g < 16; g++) ((float *)(o + 256))[g] = x->d[8 * S + g / 2];
    }
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r++) gemv_q6_k_row(w + (uint64_t)r * rb, x->q + 0, xr, nsb, y + r);
}

/* Q2_K / Q3_K (three = 0 / 1): one superblock (84 / 110 bytes, layouts in quant.c and the
 * AVX2 kernel qk23_row) per step. Activation block b = 4h + c of the superblock has the codes
 * bits 2c, 2c+1 of qs[32h + l], l < 32 (Q3_K: bit 4h + c of hmask[l] is bit 2), and every 16
 * elements (group g = 2b + l / 16 = 8h + 2c + t) have their own scale. Chunk layout: step
 * (h, t) broadcasts the 16 bytes qs[32h + 16t ..] to the four 128-bit lanes, and lane c takes
 * block 4h + c from them: one vgf2p8affineqb (a per-lane bit matrix) moves bits 2c, 2c+1 to
 * 0, 1 and clears the rest (Q3_K: a second one moves hmask bit 4h + c to bit 2, one vpor), so
 * every dword lane of every step belongs to one group and the lanes of a 128-bit lane to one
 * block. vpdpbusd with the rearranged activations gives quad sums D (int32); the two steps of an
 * h are packed to int16 (vpackssdw: lane c holds t = 0 in words 0..3, t = 1 in words 4..7) and
 * one vpdpwssd multiplies them with the scales as int16 words sc * 256 (one vpshufb of the 16
 * scale bytes broadcast to every lane puts sc[8h + 2c + t] in the high byte, zero in the low:
 * a signed word without a sign extension), which leaves per lane c int32 sums of block 4h + c
 * only; one convert each h and an fma with dx (record) / and d / 256 per superblock.
 * Q3_K: x = d * (sc6 - 32) * (u - 4); the offset enters D exactly as the vpdpbusd start value
 * -4 * s16 (record, lane 4c of step (h, t): group 8h + 2c + t). Q2_K: x = d * sc * u - dmin *
 * mn; the mins as in the AVX2 kernel: one vpmaddwd of the mins with the activation 16-sums
 * (x->s16, natural order), one fma with dmin * dx (x->d) per superblock.
 * Activation record per superblock (384 bytes, Q3_K 640): 4 x 64 codes, step s = 2h + t: lane
 * c = xq of elements 16t .. 16t + 15 of block 4h + c; 2 x 16 floats dx (h: lane 4c + j =
 * dx[4h + c]); Q3_K: 4 x 16 int32 -4 * s16 (lane 4c of step s, the other lanes 0).
 * Bounds (|xq| <= 127, |s16| <= 16 * 127 = 2032): u <= 3 / 7, so |D| <= 4 * 3 * 127 = 1524
 * (Q2_K) / 4 * 7 * 127 + 4 * 2032 = 11684 (Q3_K) fits int16 (vpackssdw does not saturate);
 * |sc| <= 15 / 32, a vpdpwssd product <= 1524 * 15 * 256 = 5852160 / 11684 * 32 * 256 =
 * 95715328, a lane (two products) <= 1.2e7 / 1.9e8 < 2^31. The convert of a Q3_K lane above
 * 2^24 rounds (relative 2^-24, as the float accumulation after it). The mins term as in
 * qk23_row (<= 60960). test_matmul's extreme codes (0xFF with +-127, Q3_K scale -32) reach
 * the largest D. */
#ifndef PF_QK23
#define PF_QK23 3072
#endif
#define QK23_SW(a) 0x80, a, 0x80, a, 0x80, a, 0x80, a, 0x80, a + 1, 0x80, a + 1, 0x80, a + 1, 0x80, a + 1
static const uint8_t qk23_swi[2][64] __attribute__((aligned(64))) = {{QK23_SW(0), QK23_SW(2), QK23_SW(4), QK23_SW(6)},
                                                                     {QK23_SW(8), QK23_SW(10), QK23_SW(12), QK23_SW(14)}};
#undef QK23_SW
/* gf2p8affine matrices (qword lanes 2c, 2c+1 = 128-bit lane c; row byte 7 - j makes bit j):
 * code bits 2c, 2c+1 -> bits 0, 1; hmask bit b -> bit 2 */
#define QK23_CM(c) (long long)(((1ULL << (2 * (c))) << 56) | ((1ULL << (2 * (c) + 1)) << 48))
#define QK23_HM(b) (long long)((1ULL << (b)) << 40)
#define QK23_X4(M, o) _mm512_set_epi64(M(o + 3), M(o + 3), M(o + 2), M(o + 2), M(o + 1), M(o + 1), M(o), M(o))

__attribute__((target("gfni,avx512vnni,avx512vbmi"))) AI void gemv_qk23_row(const uint8_t *w, const uint8_t *xr, const int16_t *s16, const float *dx,
                                                       int64_t nsb, float *out, const int three) {
    const int bb = three ? 110 : 84, qo = three ? 32 : 16, rec = three ? 640 : 384;
    const __m512i cm = QK23_X4(QK23_CM, 0);
    const __m512i hmm[2] = {QK23_X4(QK23_HM, 0), QK23_X4(QK23_HM, 4)};
    const __m512i swi[2] = {_mm512_load_si512((const void *)qk23_swi[0]), _mm512_load_si512((const void *)qk23_swi[1])};
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps();
    __m256 macc = _mm256_setzero_ps();
    for (int64_t S = 0; S < nsb; S++, w += bb, xr += rec) {
        PF(w, PF_QK23);
        PF(w + 64, PF_QK23);
        if (three) PF(w + 109, PF_QK23);
        __m512i bcsc, hm[2];
        float d;
        if (three) {
            bcsc = _mm512_broadcast_i32x4(q3k_scales(w + 96));
            hm[0] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)w));
            hm[1] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(w + 16)));
            d = f16v(w + 108);
        } else {
            const __m128i sm = _mm_loadu_si128((const __m128i *)w);
            bcsc = _mm512_broadcast_i32x4(_mm_and_si128(sm, m4));
            const __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m4));
            const __m256i s = _mm256_loadu_si256((const __m256i *)(s16 + 16 * S));
            macc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mn, s)),
                                   _mm256_mul_ps(_mm256_set1_ps(f16v(w + 82)), _mm256_loadu_ps(dx + 8 * S)), macc);
            d = f16v(w + 80);
        }
        __m512 f = _mm512_setzero_ps();
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            __m512i D[2];
            _Pragma("GCC unroll 2") for (int t = 0; t < 2; t++) {
                const int s = 2 * h + t;
                __m512i u = _mm512_gf2p8affine_epi64_epi8(
                    _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(w + qo + 32 * h + 16 * t))), cm, 0);
                if (three) u = _mm512_or_si512(u, _mm512_gf2p8affine_epi64_epi8(hm[t], hmm[h], 0));
                const __m512i z = three ? _mm512_load_si512((const void *)(xr + 384 + 64 * s)) : _mm512_setzero_si512();
                D[t] = _mm512_dpbusd_epi32(z, u, _mm512_load_si512((const void *)(xr + 64 * s)));
            }
            const __m512i I = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(D[0], D[1]),
                                                  _mm512_shuffle_epi8(bcsc, swi[h]));
            f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_load_ps((const float *)(xr + 256 + 64 * h)), f);
        }
        acc = _mm512_fmadd_ps(f, _mm512_set1_ps(d * (1.0f / 256)), acc);
    }
    *out = hsum16(acc) - hsum8(macc);
}
#undef QK23_CM
#undef QK23_HM
#undef QK23_X4

__attribute__((target("gfni,avx512vnni,avx512vbmi"))) AI void gemv_qk23(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y,
                                                   const int three) {
    const int64_t nsb = x->n_in / 256;
    const int rec = three ? 640 : 384;
    uint8_t *xr = gscratch(1, (size_t)(nsb * rec) + 64);
    for (int64_t S = 0; S < nsb; S++) {
        uint8_t *o = xr + S * rec;
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 4; c++) {
                const int64_t b = 8 * S + 4 * h + c;
                for (int t = 0; t < 2; t++) {
                    const int s = 2 * h + t;
                    memcpy(o + 64 * s + 16 * c, x->q + 32 * b + 16 * t, 16);
                    if (three)
                        for (int j = 0; j < 4; j++) ((int32_t *)(o + 384 + 64 * s))[4 * c + j] = j ? 0 : -4 * (int32_t)x->s16[2 * b + t];
                }
                for (int j = 0; j < 4; j++) ((float *)(o + 256 + 64 * h))[4 * c + j] = x->d[b];
            }
    }
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r++) gemv_qk23_row(w + (uint64_t)r * rb, xr, x->s16, x->d, nsb, y + r, three);
}
__attribute__((target("gfni,avx512vnni,avx512vbmi"))) static void gemv_q2_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) {
    gemv_qk23(w, rb, rq, x, y, 0);
}
__attribute__((target("gfni,avx512vnni,avx512vbmi"))) static void gemv_q3_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) {
    gemv_qk23(w, rb, rq, x, y, 1);
}

/* F16: 32 halves per step (two registers), f32 FMA against x; one row at a time (see above). */
AI void gemv_f16_rows(const uint8_t *w, uint64_t rb, int64_t r0, int64_t r1, int64_t n_in, const float *x, float *y,
                      const int pf, const int pf2) {
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *p = w + (uint64_t)r * rb;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 32 <= n_in; i += 32) {
            PF(p + 2 * i, pf);
            PF_L2(p + 2 * i, pf2);
            a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i))), _mm512_loadu_ps(x + i), a0);
            a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i + 32))), _mm512_loadu_ps(x + i + 16), a1);
        }
        if (i < n_in) { /* masked tail of up to 31 elements */
            const int64_t n = n_in - i;
            const __mmask16 k0 = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
            const __mmask16 k1 = (__mmask16)(n <= 16 ? 0 : (1u << (n - 16)) - 1);
            a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k0, p + 2 * i)), _mm512_maskz_loadu_ps(k0, x + i), a0);
            a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k1, p + 2 * i + 32)), _mm512_maskz_loadu_ps(k1, x + i + 16), a1);
        }
        y[r] = hsum16(_mm512_add_ps(a0, a1));
    }
}
static void gemv_f16(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_in, const float *x, float *y) {
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        if (gemv_pf_intel) gemv_f16_rows(w, rb, r0, r1, n_in, x, y, PF_F16_INTEL, PF_F16_L2_INTEL);
        else gemv_f16_rows(w, rb, r0, r1, n_in, x, y, PF_F16, 0);
}

void rf_mm_kernels_avx512(rf_mm_kernels *k) {
    __builtin_cpu_init();
    gemv_pf_intel = __builtin_cpu_is("intel");
    /* the f32 GEMM needs only AVX-512F (no VNNI instruction is generated for it) */
    k->gemm_f32[RF_TYPE_F16] = gemm_f16;
    k->gemm_f32[RF_TYPE_BF16] = gemm_bf16;
    k->gemm_f32_min_tok[RF_TYPE_F16] = k->gemm_f32_min_tok[RF_TYPE_BF16] = 0; /* not the AVX2 table's */
    k->gemv_f32[RF_TYPE_F16] = gemv_f16;
    if (!__builtin_cpu_supports("avx512vnni")) return;
    fill_kernels(k);
    k->gemm_q8[RF_TYPE_Q4_0] = gemm_q4_0;
    k->gemm_q8[RF_TYPE_Q8_0] = gemm_q8_0;
    k->gemm_q8[RF_TYPE_Q4_K] = gemm_q4_k;
    k->gemm_q8[RF_TYPE_Q5_K] = gemm_q5_k;
    k->gemm_q8[RF_TYPE_Q6_K] = gemm_q6_k;
    k->gemm_q8[RF_TYPE_IQ4_XS] = gemm_iq4_xs;
    rf_mm_gemm_i16_avx512(k); /* F16 / BF16 prompts on int16 codes */
    /* every n_tok (the AVX2 table's thresholds are for its own GEMM) */
    static const uint32_t gt[] = {RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K, RF_TYPE_IQ4_XS};
    for (size_t i = 0; i < sizeof gt / sizeof gt[0]; i++) k->gemm_q8_min_tok[gt[i]] = 0;
    /* Without VBMI the AVX2 matvec kernels (gemv_avx2.c) stay in gemv_q8: one token through the
     * GEMM above was 2-4x slower than them (docs/PERF-CPU.md section 16). */
    if (!__builtin_cpu_supports("avx512vbmi")) return;
    k->gemv_q8[RF_TYPE_Q4_0] = gemv_q4_0;
    k->gemv_q8[RF_TYPE_Q8_0] = gemv_q8_0;
    k->gemv_q8[RF_TYPE_Q4_K] = gemv_q4_k;
    k->gemv_q8[RF_TYPE_Q5_K] = gemv_q5_k;
    k->gemv_q8[RF_TYPE_Q6_K] = gemv_q6_k;
    k->gemv_q8[RF_TYPE_IQ4_XS] = gemv_iq4_xs;
    if (__builtin_cpu_supports("gfni")) { /* the Q2_K / Q3_K code extraction */
        k->gemv_q8[RF_TYPE_Q2_K] = gemv_q2_k;
        k->gemv_q8[RF_TYPE_Q3_K] = gemv_q3_k;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
