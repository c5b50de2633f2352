/* gemv_avx2.c: one-token (decode) int8 matrix-vector kernels at the AVX2 level (compiled with
 * -mavx2 -mfma -mf16c; installed by rf_mm_kernels_avx2, so only called on CPUs with those
 * features).
 *
 * Rows are taken in chunks from the shared queue (rf_rowq) and done one after the other, one
 * sequential stream per thread (the AVX-512 matvec notes in matmul_avx512.c: interleaving rows
 * defeats the hardware prefetcher), with a software prefetch some bytes ahead in the row.
 *
 * Work per 8 activation blocks of 32 (one K-quant superblock, or 8 legacy blocks): the 8 integer
 * block dot products are formed as 8 vectors of 8 int32 (vpmaddubsw + vpmaddwd), reduced to one
 * vector of 8 block sums with a vphaddd tree (lane b: block b; the paired legacy formats, Q4_0
 * and those after it: permuted, see there), integer offsets are applied there from the
 * activation sums, and one convert and one fma with the 8 per-block scales d_w * d_x (built as a
 * vector, no scalar scale arithmetic) add them to a float accumulator. Compared with the per-row
 * kernels of matmul_x86.inc (nt = 1), that removes the per-block convert, broadcast, scalar
 * scale products and scalar offset/min terms.
 *
 * int16 bounds of vpmaddubsw (a saturated pair sum would be wrong): |xq| <= 127. Q4_0 / Q4_K:
 * u <= 15, pair <= 3810 (Q4_0 adds two pairs in int16: 7620); Q5_K: u <= 31, pair <= 7874;
 * Q6_K: u <= 63, pair <= 16002, then vpmaddwd by the int8 scale (int32 exact); Q2_K / Q3_K:
 * u <= 3 / 7, pair <= 762 / 1778, then int32 (vpmaddwd by 1, vpmulld by the scales); Q4_1: as
 * Q4_0; Q5_0 / Q5_1: u <= 31, two pairs added in int16 <= 15748; Q8_0 / IQ4_XS / IQ4_NL with the
 * sign trick (|w| <= 128): pair <= 32512, widened one pair at a time.
 * test_matmul's extreme codes reach them at n_tok = 1.
 *
 * Batch invariance: the float summation order differs from the AVX2 GEMM and from the per-row
 * kernels (which 2-token calls take), so a token alone and in a batch agree to float rounding
 * only, which is the contract of the SIMD levels (matmul.c, docs/PERF-CPU.md sections 5-6). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/thread_scratch.h"
#include "backend/cpu/x86_shared.h"

#define AI static inline __attribute__((always_inline))

/* Software prefetch distance in bytes ahead in the row (0: off). */
#ifndef GEMV2_PF
#define GEMV2_PF 1536
#endif
#define PF(p) do { if (GEMV2_PF) _mm_prefetch((const char *)(p) + GEMV2_PF, _MM_HINT_T0); } while (0)

/* u8 x s8 -> 8 int32 sums of 4 products (bounds in the header). */
AI __m256i dot_us8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
/* signed x signed via the sign trick: |w| * (x with w's sign). */
AI __m256i dot_ss8(__m256i w, __m256i x) { return dot_us8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)); }

/* Pairwise stage of the 8-vector reduction: hadd(a, b) per 128-bit half. */
#define HADD _mm256_hadd_epi32
/* [sum(a), sum(b), ..., sum(h)] from the two-level partial reductions p = hadd(hadd(a,b),hadd(c,d)),
 * q = the same for e..h (per half: the 4 vectors' half sums). */
AI __m256i hfinish(__m256i p, __m256i q) {
    return _mm256_add_epi32(_mm256_permute2x128_si256(p, q, 0x20), _mm256_permute2x128_si256(p, q, 0x31));
}


/* ---- Q4_K / Q5_K --------------------------------------------------------------------------
 * Row of nsb superblocks (144 bytes: d, dmin, 12 bytes of 6-bit scales/mins, 128 nibble bytes;
 * Q5_K 176: the 32 bytes of fifth bits at 16, the nibbles at 48). 32-byte chunk c of the quants
 * holds sub-block 2c in the low nibbles and 2c+1 in the high ones, so activation blocks are used
 * in natural order straight from x. Lane b of the reduced sums is sub-block b; scales d*sc_b*dx_b
 * as one vector, the mins dmin*mn_b*dsum_b accumulated as one vector per superblock. */
AI float qk45_row(const uint8_t *w, const rf_xq8 *x, int64_t nsb, const int five) {
    const int bb = five ? 176 : 144, qo = five ? 48 : 16;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
    const int8_t *xq = x->q;
    for (int64_t S = 0; S < nsb; S++, w += bb, xq += 256) {
        PF(w);
        PF(w + 64);
        PF(w + 128);
        if (five) PF(w + 175);
        uint64_t sc8, mn8;
        k4_unpack64(w + 4, &sc8, &mn8);
        const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc8)));
        const __m256 mnf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn8)));
        const __m256 sv = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(f16v(w)), scf), _mm256_loadu_ps(x->d + 8 * S));
        macc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(f16v(w + 2)), mnf), _mm256_loadu_ps(x->dsum + 8 * S), macc);
        __m256i hbits = _mm256_setzero_si256();
        if (five) hbits = _mm256_loadu_si256((const __m256i *)(w + 16));
        __m256i h[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(w + qo + 32 * c));
            __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            if (five) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c + 1), one), 4));
            }
            h[c] = HADD(dot_us8(lo, _mm256_loadu_si256((const __m256i *)(xq + 64 * c))),
                        dot_us8(hi, _mm256_loadu_si256((const __m256i *)(xq + 64 * c + 32))));
        }
        const __m256i isum = hfinish(HADD(h[0], h[1]), HADD(h[2], h[3]));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), sv, acc);
    }
    return hsum8(acc) - hsum8(macc);
}

AI void gemv_qk45(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y, const int five) {
    const int64_t nsb = x->n_in / 256;
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r++) y[r] = qk45_row(w + (uint64_t)r * rb, x, nsb, five);
}
static void gemv_q4_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) { gemv_qk45(w, rb, rq, x, y, 0); }
static void gemv_q5_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) { gemv_qk45(w, rb, rq, x, y, 1); }

/* ---- Q6_K ---------------------------------------------------------------------------------
 * Superblock of 210 bytes: ql[128], qh[64], 16 int8 scales (one per 16 elements) at 192, d at
 * 208; codes q in 0..63 with offset 32 (layout in quant.c; unpacking as in matmul_x86.inc).
 * Activation block b = 4h + k of the superblock: vpmaddwd multiplies the int16 pair sums by the
 * scale of each 16-element half (sc[2b] on the low 128 bits, sc[2b+1] on the high), spread with
 * vpshufb from the broadcast scale bytes and sign-extended by vpsraw. The offset is exact in
 * int32 per block: -32 * (sc[2b]*s16[2b] + sc[2b+1]*s16[2b+1]), one vpmaddwd of the scales with
 * the activation 16-sums for all 8 blocks. Then one fma with d * dx_b. */
AI __m256i q6_scale_sel(__m256i scb, const int b) {
    const __m256i idx = _mm256_set_m128i(_mm_set1_epi16((short)(((2 * b + 1) << 8) | 0x80)), _mm_set1_epi16((short)((2 * b << 8) | 0x80)));
    return _mm256_srai_epi16(_mm256_shuffle_epi8(scb, idx), 8);
}

AI float q6_k_row(const uint8_t *w, const rf_xq8 *x, int64_t nsb) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    const int8_t *xq = x->q;
    for (int64_t S = 0; S < nsb; S++, w += 210, xq += 256) {
        PF(w);
        PF(w + 64);
        PF(w + 128);
        PF(w + 192);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)(w + 192));
        const __m256i scb = _mm256_broadcastsi128_si256(sc8);
        const __m256 fs = _mm256_mul_ps(_mm256_set1_ps(f16v(w + 208)), _mm256_loadu_ps(x->d + 8 * S));
        __m256i hh[2];
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(w + 64 * h));
            const __m256i b = _mm256_loadu_si256((const __m256i *)(w + 64 * h + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(w + 128 + 32 * h));
            const __m256i g0 = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
            const __m256i g1 = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
            const __m256i g2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(hb, m30));
            const __m256i g3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
            const int8_t *xh = xq + 128 * h;
#define Q6D(g, k) _mm256_madd_epi16(_mm256_maddubs_epi16((g), _mm256_loadu_si256((const __m256i *)(xh + 32 * (k)))), q6_scale_sel(scb, 4 * h + (k)))
            hh[h] = HADD(HADD(Q6D(g0, 0), Q6D(g1, 1)), HADD(Q6D(g2, 2), Q6D(g3, 3)));
#undef Q6D
        }
        const __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)(x->s16 + 16 * S)));
        const __m256i isum = _mm256_sub_epi32(hfinish(hh[0], hh[1]), _mm256_slli_epi32(off, 5));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), fs, acc);
    }
    return hsum8(acc);
}

static void gemv_q6_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) {
    const int64_t nsb = x->n_in / 256;
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r++) y[r] = q6_k_row(w + (uint64_t)r * rb, x, nsb);
}

/* ---- Q2_K / Q3_K --------------------------------------------------------------------------
 * Superblocks of 84 bytes (Q2_K: 16 bytes of 4-bit scale (low nibble) and min (high nibble) per
 * 16 elements, qs[64] at 16, d at 80, dmin at 82) or 110 (Q3_K: hmask[32], qs[64] at 32, 12
 * bytes of 6-bit scales at 96, d at 108); layouts in quant.c. Activation block b = 4h + k of the
 * superblock has the codes u = bits 2k..2k+1 of qs[32h + l], l < 32 (Q3_K: bit 4h+k of hmask[l]
 * is bit 2 of u), so the activations are used in natural order straight from x.
 * Every 16 elements have their own scale. vpmaddubsw leaves the pair sums of elements 0..15 in
 * the low 128 bits and of 16..31 in the high ones; vpmaddwd by 1 widens them, and the first two
 * hadd levels over blocks 4h..4h+3 give one vector of their 16-element sums (low half: elements
 * 0..15 of each block, high half: 16..31), which one vpmulld multiplies by the 8 scales in that
 * order (sc[8h + 0, 2, 4, 6, 1, 3, 5, 7], int32). The last level (hfinish) adds the halves: lane
 * b = block b. (Scaling each block's pair sums by vpmaddwd instead needs a scale vector per block,
 * one vpshufb each: 5% slower, section 17 of docs/PERF-CPU.md.)
 * Q2_K: x = d*sc*u - dmin*mn; the mins as one vpmaddwd of mn with the activation 16-sums (lane b:
 * mn[2b]*s16[2b] + mn[2b+1]*s16[2b+1]) and one fma with dmin*dx per superblock.
 * Q3_K: x = d*(sc6 - 32)*(u - 4); the offset exact in int32 as for Q6_K: -4 * (one vpmaddwd of
 * the scales with the 16-sums), then one fma with d*dx.
 * Bounds (Q2_K / Q3_K): u <= 3 / 7 and |xq| <= 127, so the vpmaddubsw pairs are <= 762 / 1778
 * in int16 (a quarter of saturation at most; 0xFF codes with +-127 activations reach them); the
 * rest is int32: a 16-element sum <= 6096 / 14224, times |sc| <= 15 / 32: <= 91440 / 455168, a
 * block <= 182880 / 910336; with |s16| <= 16 * 127 = 2032 the mins term is <= 2 * 15 *
 * 2032 = 60960 and Q3_K's offset 4 * 2 * 32 * 2032 = 520192. */
/* Bit j (0..7) of every byte moved to bit 2, the other bits cleared. 16-bit shifts suffice: for
 * j >= 2 a byte's bit 2 comes from its own bit j, for j < 2 likewise, and the mask drops what
 * crosses the byte boundary. */
AI __m256i q3_hbit(__m256i hm, const int j) {
    const __m256i v = j >= 2 ? _mm256_srli_epi16(hm, j - 2) : _mm256_slli_epi16(hm, 2 - j);
    return _mm256_and_si256(v, _mm256_set1_epi8(4));
}

AI float qk23_row(const uint8_t *w, const rf_xq8 *x, int64_t nsb, const int three) {
    const int bb = three ? 110 : 84, qo = three ? 32 : 16;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    /* the scales in the order of the 16-element sums after two hadd levels */
    const __m128i sc_ord = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
    const int8_t *xq = x->q;
    for (int64_t S = 0; S < nsb; S++, w += bb, xq += 256) {
        PF(w);
        PF(w + 64);
        const __m256 dx = _mm256_loadu_ps(x->d + 8 * S);
        const __m256i s16 = _mm256_loadu_si256((const __m256i *)(x->s16 + 16 * S));
        __m128i sc8; /* the 16 scales as int8, natural order */
        __m256i hm = _mm256_setzero_si256();
        float d;
        if (three) {
            sc8 = q3k_scales(w + 96);
            hm = _mm256_loadu_si256((const __m256i *)w);
            d = f16v(w + 108);
        } else {
            const __m128i sm = _mm_loadu_si128((const __m128i *)w);
            sc8 = _mm_and_si128(sm, m4);
            const __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m4));
            macc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mn, s16)), _mm256_mul_ps(_mm256_set1_ps(f16v(w + 82)), dx), macc);
            d = f16v(w + 80);
        }
        const __m128i sco = _mm_shuffle_epi8(sc8, sc_ord);
        const __m256i scg[2] = {_mm256_cvtepi8_epi32(sco), _mm256_cvtepi8_epi32(_mm_srli_si128(sco, 8))};
        __m256i hh[2];
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(w + qo + 32 * h));
            __m256i p[4];
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                __m256i g = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * k), m3);
                if (three) g = _mm256_or_si256(g, q3_hbit(hm, 4 * h + k));
                p[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(g, _mm256_loadu_si256((const __m256i *)(xq + 128 * h + 32 * k))), ones);
            }
            hh[h] = _mm256_mullo_epi32(HADD(HADD(p[0], p[1]), HADD(p[2], p[3])), scg[h]);
        }
        __m256i isum = hfinish(hh[0], hh[1]);
        if (three) isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), s16), 2));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(_mm256_set1_ps(d), dx), acc);
    }
    return hsum8(acc) - hsum8(macc);
}

AI void gemv_qk23(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y, const int three) {
    const int64_t nsb = x->n_in / 256;
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r++) y[r] = qk23_row(w + (uint64_t)r * rb, x, nsb, three);
}
static void gemv_q2_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) { gemv_qk23(w, rb, rq, x, y, 0); }
static void gemv_q3_k(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) { gemv_qk23(w, rb, rq, x, y, 1); }

/* ---- Q8_0 ---------------------------------------------------------------------------------
 * Groups of 8 blocks of 34 bytes (f16 d, 32 int8 codes), multiplied with the sign trick. The 8
 * f16 scales are collected into one register (vpinsrw) and converted together. Leftover blocks
 * (nb % 8) one at a time. */
AI float q8_0_row(const uint8_t *w, const rf_xq8 *x, int64_t nb) {
    __m256 acc = _mm256_setzero_ps();
    const int8_t *xq = x->q;
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8, w += 8 * 34, xq += 256) {
        PF(w);
        PF(w + 64);
        PF(w + 128);
        PF(w + 192);
        PF(w + 256);
        __m256i p[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
            p[k] = HADD(dot_ss8(_mm256_loadu_si256((const __m256i *)(w + 68 * k + 2)), _mm256_loadu_si256((const __m256i *)(xq + 64 * k))),
                        dot_ss8(_mm256_loadu_si256((const __m256i *)(w + 68 * k + 36)), _mm256_loadu_si256((const __m256i *)(xq + 64 * k + 32))));
        uint16_t h[8];
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) memcpy(&h[k], w + 34 * k, 2);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hfinish(HADD(p[0], p[1]), HADD(p[2], p[3]))), _mm256_mul_ps(dw, _mm256_loadu_ps(x->d + b)), acc);
    }
    float s = hsum8(acc);
    for (; b < nb; b++, w += 34, xq += 32) {
        const int I = hsum8i(dot_ss8(_mm256_loadu_si256((const __m256i *)(w + 2)), _mm256_loadu_si256((const __m256i *)xq)));
        s += (float)I * (f16v(w) * x->d[b]);
    }
    return s;
}

static void gemv_q8_0(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) {
    const int64_t nb = x->n_in / 32;
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r++) y[r] = q8_0_row(w + (uint64_t)r * rb, x, nb);
}

/* ---- Q4_0 ---------------------------------------------------------------------------------
 * Blocks of 18 bytes (f16 d, 16 nibble bytes; element j < 16: low nibble of byte j, j + 16:
 * high nibble; codes u - 8), in groups of 8. Blocks 2k and 2k+1 of a group are 18 bytes apart,
 * so one 256-bit register holds both blocks' nibble bytes (low 128 bits: block 2k); its low
 * nibbles are elements 0..15 of both blocks, its high nibbles elements 16..31, and the
 * activations are rearranged once per call (per thread) to that order. The products of both
 * nibble halves are added in int16 (2 x 3810) before one vpmaddwd; lanes 0-3 then belong to
 * block 2k, 4-7 to 2k+1, and the hadd tree leaves the block sums in the order 0,2,4,6,1,3,5,7,
 * which the scales (f16 collected in that order) and the record follow. Record per group of 8
 * blocks (320 bytes): 4 x 64 rearranged codes, 8 dx, 8 int32 -8 * sum(xq). Leftover blocks
 * (nb % 8) one at a time from x. Against one block per register (the Q8_0 scheme with nibbles):
 * 18.1 -> 21.6 GB/s one thread from L3 (docs/PERF-CPU.md section 16). */
/* The block order the hadd tree leaves two-blocks-per-register sums in (Q4_0 and IQ4_XS). */
static const int pair_ord[8] = {0, 2, 4, 6, 1, 3, 5, 7};

AI float q4_0_row(const uint8_t *w, const rf_xq8 *x, const uint8_t *xr, int64_t nb) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8, w += 144, xr += 320) {
        PF(w);
        PF(w + 64);
        PF(w + 128);
        __m256i a[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const __m256i v = _mm256_loadu2_m128i((const __m128i *)(w + 36 * k + 20), (const __m128i *)(w + 36 * k + 2));
            const __m256i plo = _mm256_maddubs_epi16(_mm256_and_si256(v, m4), _mm256_load_si256((const __m256i *)(xr + 64 * k)));
            const __m256i phi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                                     _mm256_load_si256((const __m256i *)(xr + 64 * k + 32)));
            a[k] = _mm256_madd_epi16(_mm256_add_epi16(plo, phi), ones);
        }
        const __m256i isum = _mm256_add_epi32(HADD(HADD(a[0], a[1]), HADD(a[2], a[3])), _mm256_load_si256((const __m256i *)(xr + 288)));
        uint16_t h[8];
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) memcpy(&h[k], w + 18 * pair_ord[k], 2);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_load_ps((const float *)(xr + 256))), acc);
    }
    float s = hsum8(acc);
    const int8_t *xq = x->q + 32 * b;
    for (; b < nb; b++, w += 18, xq += 32) {
        const int I = hsum8i(dot_us8(nibbles32(w + 2), _mm256_loadu_si256((const __m256i *)xq))) -
                      8 * ((int)x->s16[2 * b] + x->s16[2 * b + 1]);
        s += (float)I * (f16v(w) * x->d[b]);
    }
    return s;
}

/* The activation record of the paired legacy kernels (Q4_0 above, and Q4_1 / Q5_0 / Q5_1 /
 * IQ4_NL below), per group of 8 blocks (320 bytes): 4 x 64 codes in low-nibble / high-nibble
 * order, 8 dx in pair_ord order, then 8 values in that order: zp > 0: int32 -zp * sum(xq) (the
 * zero point of Q4_0 / Q5_0), zp == 0: float dsum (for the mins of Q4_1 / Q5_1). In the calling
 * thread's scratch slot 1, valid until its next use. */
static const uint8_t *pair_pack_x(const rf_xq8 *x, const int zp) {
    const int64_t ng = x->n_in / 256;
    uint8_t *xr = rf_thread_scratch(1, (size_t)(ng * 320) + 64);
    for (int64_t g = 0; g < ng; g++) {
        uint8_t *o = xr + g * 320;
        const int8_t *xq = x->q + 256 * g;
        for (int k = 0; k < 4; k++) {
            memcpy(o + 64 * k, xq + 64 * k, 16);
            memcpy(o + 64 * k + 16, xq + 64 * k + 32, 16);
            memcpy(o + 64 * k + 32, xq + 64 * k + 16, 16);
            memcpy(o + 64 * k + 48, xq + 64 * k + 48, 16);
        }
        for (int j = 0; j < 8; j++) {
            const int64_t bj = 8 * g + pair_ord[j];
            ((float *)(o + 256))[j] = x->d[bj];
            if (zp) ((int32_t *)(o + 288))[j] = -zp * ((int32_t)x->s16[2 * bj] + x->s16[2 * bj + 1]);
            else ((float *)(o + 288))[j] = x->dsum[bj];
        }
    }
    return xr;
}

static void gemv_q4_0(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) {
    const int64_t nb = x->n_in / 32;
    const uint8_t *xr = pair_pack_x(x, 8);
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r++) y[r] = q4_0_row(w + (uint64_t)r * rb, x, xr, nb);
}

/* ---- Q4_1 / Q5_0 / Q5_1 / IQ4_NL ----------------------------------------------------------
 * Q4_0's pairing (see there) for the other 32-element formats: blocks of 20 bytes (Q4_1: f16 d,
 * f16 m, 16 nibble bytes), 22 (Q5_0: d, 32 fifth bits qh, nibbles), 24 (Q5_1: d, m, qh, nibbles)
 * and 18 (IQ4_NL: d, nibbles indexing the codebook); layouts in quant.c. One 256-bit register
 * holds the nibble bytes of blocks 2k (low 128 bits) and 2k+1, the activations come from
 * pair_pack_x's record, and the block sums leave the hadd tree in pair_ord order, which the f16
 * scales and mins are gathered in. Q5_0 / Q5_1: the fifth bits of the low nibbles (elements
 * 0..15) are bits 0..15 of each block's qh, those of the high nibbles bits 16..31; both blocks'
 * qh go into one 64-bit broadcast, and one bits_spread per nibble half picks 16 bits of each
 * (against a bits32 per half of 16 + 16 bits merged in scalar code: 8% faster, docs/PERF-CPU.md
 * section 17). Q5_0's offset -16 * sum(xq) is the
 * record's int32; Q4_1 / Q5_1's mins m * dx * sum(xq) one fma of the 8 m with the record's dsum.
 * Leftover blocks (nb % 8) one at a time from x.
 * Bounds: u <= 15 (Q4_1) / 31 (Q5_0, Q5_1): pairs <= 3810 / 7874, and the two nibble halves'
 * pairs added in int16 before one vpmaddwd: <= 7620 / 15748. IQ4_NL with the sign trick: |value|
 * <= 127, pairs <= 32258, so its halves are widened by vpmaddwd separately (as IQ4_XS). kind:
 * legacy_impl's numbering in matmul_x86.inc (1 Q4_1, 2 Q5_0, 3 Q5_1, 5 IQ4_NL). */
AI float pair_row(const uint8_t *w, const rf_xq8 *x, const uint8_t *xr, int64_t nb, const int kind) {
    const int bb = kind == 1 ? 20 : kind == 2 ? 22 : kind == 3 ? 24 : 18;
    const int qo = kind == 1 ? 4 : kind == 2 ? 6 : kind == 3 ? 8 : 2, ho = kind == 2 ? 2 : 4;
    const int five = kind == 2 || kind == 3, mins = kind == 1 || kind == 3, nl = kind == 5;
    const __m128i cb = iq4_codebook();
    const __m256i tab = _mm256_set_m128i(cb, cb), m4 = _mm256_set1_epi8(0x0F), m16 = _mm256_set1_epi8(0x10);
    const __m256i ones = _mm256_set1_epi16(1);
    /* bytes of the broadcast qh pair (block 2k at 0..3, 2k+1 at 4..7) that hold the fifth bits
     * of the low nibbles (bits 0..15 of each) and of the high nibbles (16..31), 8 per byte */
    const __m256i q5_sel_lo = _mm256_set_epi64x(0x0505050505050505LL, 0x0404040404040404LL, 0x0101010101010101LL, 0);
    const __m256i q5_sel_hi = _mm256_set_epi64x(0x0707070707070707LL, 0x0606060606060606LL, 0x0303030303030303LL,
                                                0x0202020202020202LL);
    __m256 acc = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8, w += 8 * bb, xr += 320) {
        PF(w);
        PF(w + 64);
        PF(w + 128);
        __m256i a[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const uint8_t *b0 = w + 2 * k * bb, *b1 = b0 + bb;
            const __m256i v = _mm256_loadu2_m128i((const __m128i *)(b1 + qo), (const __m128i *)(b0 + qo));
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if (five) {
                uint32_t h0, h1;
                memcpy(&h0, b0 + ho, 4);
                memcpy(&h1, b1 + ho, 4);
                const __m256i hq = _mm256_set1_epi64x((long long)(((uint64_t)h1 << 32) | h0));
                lo = _mm256_or_si256(lo, _mm256_and_si256(bits_spread(hq, q5_sel_lo), m16));
                hi = _mm256_or_si256(hi, _mm256_and_si256(bits_spread(hq, q5_sel_hi), m16));
            }
            const __m256i xlo = _mm256_load_si256((const __m256i *)(xr + 64 * k)), xhi = _mm256_load_si256((const __m256i *)(xr + 64 * k + 32));
            if (nl) {
                const __m256i qlo = _mm256_shuffle_epi8(tab, lo), qhi = _mm256_shuffle_epi8(tab, hi);
                a[k] = _mm256_add_epi32(dot_ss8(qlo, xlo), dot_ss8(qhi, xhi));
            } else {
                a[k] = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi)), ones);
            }
        }
        __m256i isum = HADD(HADD(a[0], a[1]), HADD(a[2], a[3]));
        if (kind == 2) isum = _mm256_add_epi32(isum, _mm256_load_si256((const __m256i *)(xr + 288)));
        uint16_t h[8];
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) memcpy(&h[k], w + bb * pair_ord[k], 2);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_load_ps((const float *)(xr + 256))), acc);
        if (mins) {
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) memcpy(&h[k], w + bb * pair_ord[k] + 2, 2);
            macc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)), _mm256_load_ps((const float *)(xr + 288)), macc);
        }
    }
    float s = hsum8(acc) + hsum8(macc);
    const int8_t *xq = x->q + 32 * b;
    for (; b < nb; b++, w += bb, xq += 32) {
        __m256i q = nibbles32(w + qo);
        if (five) {
            uint32_t qh;
            memcpy(&qh, w + ho, 4);
            q = _mm256_or_si256(q, _mm256_and_si256(bits32(qh), m16));
        }
        const __m256i xv = _mm256_loadu_si256((const __m256i *)xq);
        int I = nl ? hsum8i(dot_ss8(_mm256_shuffle_epi8(tab, q), xv)) : hsum8i(dot_us8(q, xv));
        if (kind == 2) I -= 16 * ((int)x->s16[2 * b] + x->s16[2 * b + 1]);
        s += (float)I * (f16v(w) * x->d[b]);
        if (mins) s += f16v(w + 2) * x->dsum[b];
    }
    return s;
}

AI void gemv_pair(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y, const int kind) {
    const int64_t nb = x->n_in / 32;
    const uint8_t *xr = pair_pack_x(x, kind == 2 ? 16 : 0);
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r++) y[r] = pair_row(w + (uint64_t)r * rb, x, xr, nb, kind);
}
static void gemv_q4_1(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) { gemv_pair(w, rb, rq, x, y, 1); }
static void gemv_q5_0(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) { gemv_pair(w, rb, rq, x, y, 2); }
static void gemv_q5_1(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) { gemv_pair(w, rb, rq, x, y, 3); }
static void gemv_iq4_nl(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) { gemv_pair(w, rb, rq, x, y, 5); }

/* ---- IQ4_XS -------------------------------------------------------------------------------
 * Superblock of 136 bytes: d (f16), 16 bits of scale high parts (2 per sub-block) at 2, 4 bytes
 * of scale low nibbles at 4, 8 sub-blocks of 16 nibble bytes at 8 (element j < 16: low nibble
 * of byte j, j + 16: high nibble); value = IQ4_NL codebook[nibble], scale d * (sc6 - 32). As
 * for Q4_0, one 256-bit load holds sub-blocks 2k (low 128 bits) and 2k+1, the activations are
 * rearranged once per call to low-nibble / high-nibble order, and the block sums come out in the
 * order 0,2,4,6,1,3,5,7, which the scale unpacking (shift counts) and the record's dx follow.
 * Codes are looked up with vpshufb and multiplied with the sign trick (pairs up to 32512, so the
 * two nibble halves are widened by vpmaddwd separately). Record per superblock (288 bytes): 4 x
 * 64 rearranged codes, 8 dx. */
AI float iq4_xs_row(const uint8_t *w, const uint8_t *xr, int64_t nsb) {
    const __m128i cb = iq4_codebook();
    const __m256i tab = _mm256_set_m128i(cb, cb), m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    /* sub-block order 0,2,4,6,1,3,5,7: low scale nibble at bit 4s, high pair at bit 2s */
    const __m256i shl = _mm256_setr_epi32(0, 8, 16, 24, 4, 12, 20, 28), shh = _mm256_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t S = 0; S < nsb; S++, w += 136, xr += 288) {
        PF(w);
        PF(w + 64);
        PF(w + 135);
        uint32_t sl;
        uint16_t sh;
        memcpy(&sl, w + 4, 4);
        memcpy(&sh, w + 2, 2);
        const __m256i ls = _mm256_or_si256(
            _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), shl), _mm256_set1_epi32(15)),
            _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(sh), shh), _mm256_set1_epi32(3)), 4));
        const __m256 sv = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(f16v(w)), _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)))),
                                        _mm256_load_ps((const float *)(xr + 256)));
        __m256i a[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(w + 8 + 32 * k));
            const __m256i qlo = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
            const __m256i qhi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            const __m256i xlo = _mm256_load_si256((const __m256i *)(xr + 64 * k)), xhi = _mm256_load_si256((const __m256i *)(xr + 64 * k + 32));
            const __m256i plo = _mm256_maddubs_epi16(_mm256_sign_epi8(qlo, qlo), _mm256_sign_epi8(xlo, qlo));
            const __m256i phi = _mm256_maddubs_epi16(_mm256_sign_epi8(qhi, qhi), _mm256_sign_epi8(xhi, qhi));
            a[k] = _mm256_add_epi32(_mm256_madd_epi16(plo, ones), _mm256_madd_epi16(phi, ones));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(HADD(HADD(a[0], a[1]), HADD(a[2], a[3]))), sv, acc);
    }
    return hsum8(acc);
}

static void gemv_iq4_xs(const uint8_t *w, uint64_t rb, rf_rowq *rq, const rf_xq8 *x, float *y) {
    const int64_t nsb = x->n_in / 256;
    uint8_t *xr = rf_thread_scratch(1, (size_t)(nsb * 288) + 64);
    for (int64_t S = 0; S < nsb; S++) {
        uint8_t *o = xr + S * 288;
        const int8_t *xq = x->q + 256 * S;
        for (int k = 0; k < 4; k++) {
            memcpy(o + 64 * k, xq + 64 * k, 16);
            memcpy(o + 64 * k + 16, xq + 64 * k + 32, 16);
            memcpy(o + 64 * k + 32, xq + 64 * k + 16, 16);
            memcpy(o + 64 * k + 48, xq + 64 * k + 48, 16);
        }
        for (int j = 0; j < 8; j++) ((float *)(o + 256))[j] = x->d[8 * S + pair_ord[j]];
    }
    int64_t r0, r1;
    while (rf_rowq_take(rq, &r0, &r1))
        for (int64_t r = r0; r < r1; r++) y[r] = iq4_xs_row(w + (uint64_t)r * rb, xr, nsb);
}

/* Installs the matvec kernels into the AVX2 table (rf_mm_kernels_avx2). */
void rf_mm_gemv_avx2(rf_mm_kernels *k) {
    k->gemv_q8[RF_TYPE_Q4_K] = gemv_q4_k;
    k->gemv_q8[RF_TYPE_Q5_K] = gemv_q5_k;
    k->gemv_q8[RF_TYPE_Q6_K] = gemv_q6_k;
    k->gemv_q8[RF_TYPE_Q2_K] = gemv_q2_k;
    k->gemv_q8[RF_TYPE_Q3_K] = gemv_q3_k;
    k->gemv_q8[RF_TYPE_Q4_0] = gemv_q4_0;
    k->gemv_q8[RF_TYPE_Q4_1] = gemv_q4_1;
    k->gemv_q8[RF_TYPE_Q5_0] = gemv_q5_0;
    k->gemv_q8[RF_TYPE_Q5_1] = gemv_q5_1;
    k->gemv_q8[RF_TYPE_IQ4_NL] = gemv_iq4_nl;
    k->gemv_q8[RF_TYPE_Q8_0] = gemv_q8_0;
    k->gemv_q8[RF_TYPE_IQ4_XS] = gemv_iq4_xs;
}
