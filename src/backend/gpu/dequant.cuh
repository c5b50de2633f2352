/* dequant.cuh: device decoders for every weight type rocmforge supports, the GPU twins of
 * core/quant.c (whose comments document each block layout).
 *
 * Contract (for every decoder): given a pointer `b` to the first byte of one block and an element
 * index j inside it (0 <= j < block_elems), return that element as f32, bit-identical to
 * rf_dequantize_row(): scales are converted from f16 exactly and every product / sum is rounded
 * in the same order as the CPU (RF_MUL / RF_ADD / RF_SUB: no FMA contraction).
 *
 * Alignment: `b` must be 2-byte aligned (every block size is even and device allocations are
 * 256-byte aligned, so any row of any type starts 2-byte aligned); 32-bit fields that are not
 * 4-byte aligned inside their block (Q5_0's qh) are assembled from bytes. F32 rows must be
 * 4-byte aligned.
 *
 * NaN/inf: an f16 scale that is NaN or inf decodes as IEEE arithmetic gives (as on the CPU).
 *
 * Entry points:
 *   rf_dq_<type>(b, j)            one element of one block
 *   rf_dq_elem(type, row, i)      element i of a row (dispatch on the ggml type id, dtype.h)
 *   rf_dq_block_elems / rf_dq_block_bytes(type)   block geometry (0 for unsupported types)
 * Everything is static __device__ (header-only; include it from any .cu file).
 */
#ifndef RF_GPU_DEQUANT_CUH
#define RF_GPU_DEQUANT_CUH

#include <stdint.h>

#include "gpu_port.h"

/* ggml type ids (same numbering as core/dtype.h, repeated here so device code needs no C header) */
enum {
    RF_DQ_F32 = 0, RF_DQ_F16 = 1, RF_DQ_Q4_0 = 2, RF_DQ_Q4_1 = 3, RF_DQ_Q5_0 = 6, RF_DQ_Q5_1 = 7,
    RF_DQ_Q8_0 = 8, RF_DQ_Q2_K = 10, RF_DQ_Q3_K = 11, RF_DQ_Q4_K = 12, RF_DQ_Q5_K = 13, RF_DQ_Q6_K = 14,
    RF_DQ_IQ4_NL = 20, RF_DQ_IQ4_XS = 23, RF_DQ_BF16 = 30
};

static __host__ __device__ __forceinline__ int rf_dq_block_elems(uint32_t t) {
    switch (t) {
    case RF_DQ_F32: case RF_DQ_F16: case RF_DQ_BF16: return 1;
    case RF_DQ_Q4_0: case RF_DQ_Q4_1: case RF_DQ_Q5_0: case RF_DQ_Q5_1: case RF_DQ_Q8_0: case RF_DQ_IQ4_NL: return 32;
    case RF_DQ_Q2_K: case RF_DQ_Q3_K: case RF_DQ_Q4_K: case RF_DQ_Q5_K: case RF_DQ_Q6_K: case RF_DQ_IQ4_XS: return 256;
    default: return 0;
    }
}

static __host__ __device__ __forceinline__ int rf_dq_block_bytes(uint32_t t) {
    switch (t) {
    case RF_DQ_F32: return 4;
    case RF_DQ_F16: case RF_DQ_BF16: return 2;
    case RF_DQ_Q4_0: return 18;
    case RF_DQ_Q4_1: return 20;
    case RF_DQ_Q5_0: return 22;
    case RF_DQ_Q5_1: return 24;
    case RF_DQ_Q8_0: return 34;
    case RF_DQ_IQ4_NL: return 18;
    case RF_DQ_Q2_K: return 84;
    case RF_DQ_Q3_K: return 110;
    case RF_DQ_Q4_K: return 144;
    case RF_DQ_Q5_K: return 176;
    case RF_DQ_Q6_K: return 210;
    case RF_DQ_IQ4_XS: return 136;
    default: return 0;
    }
}

static __device__ __forceinline__ float rf_dq_f16at(const uint8_t *p) { return rf_h2f(*(const uint16_t *)p); }

/* The IQ4_NL codebook {-127,-104,-83,-65,-49,-35,-22,-10, 1,13,25,38,53,69,89,113}, packed as
 * bytes of two 64-bit constants (no table in memory). */
static __device__ __forceinline__ float rf_dq_iq4nl_value(int nib) {
    const uint64_t lo = 0xf6eaddcfbfad9881ull, hi = 0x7159453526190d01ull;
    uint64_t w = nib < 8 ? lo : hi;
    return (float)(int8_t)(uint8_t)(w >> (8 * (nib & 7)));
}

/* Nibble of element j of a 32-element legacy block: byte j%16, low nibble for j < 16. */
static __device__ __forceinline__ int rf_dq_nib32(const uint8_t *qs, int j) {
    return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
}

static __device__ __forceinline__ float rf_dq_f32(const uint8_t *b, int j) { return ((const float *)b)[j]; }
static __device__ __forceinline__ float rf_dq_f16(const uint8_t *b, int j) { return rf_h2f(((const uint16_t *)b)[j]); }
static __device__ __forceinline__ float rf_dq_bf16(const uint8_t *b, int j) { return rf_bf2f(((const uint16_t *)b)[j]); }

/* Q8_0: d, q[32]; x = d * q. */
static __device__ __forceinline__ float rf_dq_q8_0(const uint8_t *b, int j) {
    return RF_MUL(rf_dq_f16at(b), (float)(int8_t)b[2 + j]);
}

/* Q4_0: d, qs[16]; x = (nib - 8) * d. */
static __device__ __forceinline__ float rf_dq_q4_0(const uint8_t *b, int j) {
    return RF_MUL((float)(rf_dq_nib32(b + 2, j) - 8), rf_dq_f16at(b));
}

/* Q4_1: d, m, qs[16]; x = nib * d + m. */
static __device__ __forceinline__ float rf_dq_q4_1(const uint8_t *b, int j) {
    return RF_ADD(RF_MUL((float)rf_dq_nib32(b + 4, j), rf_dq_f16at(b)), rf_dq_f16at(b + 2));
}

/* Bit j of the little-endian u32 at p (p need not be 4-byte aligned). */
static __device__ __forceinline__ int rf_dq_bit(const uint8_t *p, int j) { return (p[j >> 3] >> (j & 7)) & 1; }

/* Q5_0: d, qh[4], qs[16]; q5 = nib | bit_j(qh) << 4; x = (q5 - 16) * d. */
static __device__ __forceinline__ float rf_dq_q5_0(const uint8_t *b, int j) {
    int q = rf_dq_nib32(b + 6, j) | (rf_dq_bit(b + 2, j) << 4);
    return RF_MUL((float)(q - 16), rf_dq_f16at(b));
}

/* Q5_1: d, m, qh[4], qs[16]; x = q5 * d + m. */
static __device__ __forceinline__ float rf_dq_q5_1(const uint8_t *b, int j) {
    int q = rf_dq_nib32(b + 8, j) | (rf_dq_bit(b + 4, j) << 4);
    return RF_ADD(RF_MUL((float)q, rf_dq_f16at(b)), rf_dq_f16at(b + 2));
}

/* IQ4_NL: d, qs[16]; x = d * value[nib]. */
static __device__ __forceinline__ float rf_dq_iq4_nl(const uint8_t *b, int j) {
    return RF_MUL(rf_dq_f16at(b), rf_dq_iq4nl_value(rf_dq_nib32(b + 2, j)));
}

/* Q2_K: scales[16], qs[64], d, dmin. Element e: half h = e/128, k = (e%128)/32, l = e%32;
 * q = (qs[32h + l] >> 2k) & 3; sub-block s = e/16; x = (d*(sc&15)) * q - dmin*(sc>>4). */
static __device__ __forceinline__ float rf_dq_q2_k(const uint8_t *b, int e) {
    const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
    const int q = (b[16 + 32 * h + l] >> (2 * k)) & 3;
    const uint8_t sc = b[e >> 4];
    const float dl = RF_MUL(rf_dq_f16at(b + 80), (float)(sc & 0xF));
    const float ml = RF_MUL(rf_dq_f16at(b + 82), (float)(sc >> 4));
    return RF_SUB(RF_MUL(dl, (float)q), ml);
}

/* Q3_K: hmask[32], qs[64], scales[12], d. Low 2 bits as Q2_K; high bit = bit (4h + k) of
 * hmask[l], clear means -4; 6-bit signed scales (see quant.c). x = (d * (sc6 - 32)) * q3. */
static __device__ __forceinline__ float rf_dq_q3_k(const uint8_t *b, int e) {
    const int h = e >> 7, k = (e >> 5) & 3, l = e & 31, s = e >> 4;
    const uint8_t *sc = b + 96;
    const int v = ((b[32 + 32 * h + l] >> (2 * k)) & 3) - (((b[l] >> (4 * h + k)) & 1) ? 0 : 4);
    const int lo = s < 8 ? (sc[s] & 0xF) : (sc[s - 8] >> 4);
    const int hi = (sc[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
    const float dl = RF_MUL(rf_dq_f16at(b + 108), (float)((lo | (hi << 4)) - 32));
    return RF_MUL(dl, (float)v);
}

/* Q4_K / Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. */
static __device__ __forceinline__ void rf_dq_k4_scale_min(int j, const uint8_t *sc, int *scale, int *mn) {
    if (j < 4) {
        *scale = sc[j] & 63;
        *mn = sc[j + 4] & 63;
    } else {
        *scale = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
        *mn = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
}

/* Q4_K: d, dmin, scales[12], qs[128]. Element e: c = e/64, r = e%64, sub-block 2c + (r >= 32),
 * nibble (low for r < 32) of qs[32c + r%32]. x = (d*scale) * q - dmin*min. */
static __device__ __forceinline__ float rf_dq_q4_k(const uint8_t *b, int e) {
    const int c = e >> 6, r = e & 63, sub = 2 * c + (r >> 5), l = r & 31;
    int s, m;
    rf_dq_k4_scale_min(sub, b + 4, &s, &m);
    const uint8_t qb = b[16 + 32 * c + l];
    const int q = r < 32 ? (qb & 0xF) : (qb >> 4);
    const float dl = RF_MUL(rf_dq_f16at(b), (float)s), ml = RF_MUL(rf_dq_f16at(b + 2), (float)m);
    return RF_SUB(RF_MUL(dl, (float)q), ml);
}

/* Q5_K: d, dmin, scales[12], qh[32], qs[128]; as Q4_K plus bit `sub` of qh[l] as bit 4. */
static __device__ __forceinline__ float rf_dq_q5_k(const uint8_t *b, int e) {
    const int c = e >> 6, r = e & 63, sub = 2 * c + (r >> 5), l = r & 31;
    int s, m;
    rf_dq_k4_scale_min(sub, b + 4, &s, &m);
    const uint8_t qb = b[48 + 32 * c + l];
    const int q = (r < 32 ? (qb & 0xF) : (qb >> 4)) + (((b[16 + l] >> sub) & 1) << 4);
    const float dl = RF_MUL(rf_dq_f16at(b), (float)s), ml = RF_MUL(rf_dq_f16at(b + 2), (float)m);
    return RF_SUB(RF_MUL(dl, (float)q), ml);
}

/* Q6_K: ql[128], qh[64], int8 scales[16], d. Element e: h = e/128, quarter u = (e%128)/32,
 * l = e%32; low nibble of ql[64h + l + 32*(u&1)] (high nibble for u >= 2), bits 2u..2u+1 of
 * qh[32h + l]; q6 - 32; scale scales[8h + l/16 + 2u]. x = (d * scale) * q6. */
static __device__ __forceinline__ float rf_dq_q6_k(const uint8_t *b, int e) {
    const int h = e >> 7, u = (e >> 5) & 3, l = e & 31;
    const uint8_t qlb = b[64 * h + l + 32 * (u & 1)];
    const int lo = u < 2 ? (qlb & 0xF) : (qlb >> 4);
    const int hi = (b[128 + 32 * h + l] >> (2 * u)) & 3;
    const int q = (lo | (hi << 4)) - 32;
    const float sc = (float)(int8_t)b[192 + 8 * h + (l >> 4) + 2 * u];
    return RF_MUL(RF_MUL(rf_dq_f16at(b + 208), sc), (float)q);
}

/* IQ4_XS: d, scales_h (u16), scales_l[4], qs[128]. Sub-block s = e/32 has a 6-bit scale (+32);
 * element j = e%32 is nibble j of qs[16s..16s+16) in Q4_0 order. x = (d*(ls-32)) * value[nib]. */
static __device__ __forceinline__ float rf_dq_iq4_xs(const uint8_t *b, int e) {
    const int s = e >> 5, j = e & 31;
    const int sh = *(const uint16_t *)(b + 2);
    const int ls = ((b[4 + (s >> 1)] >> (4 * (s & 1))) & 0xF) | (((sh >> (2 * s)) & 3) << 4);
    const float dl = RF_MUL(rf_dq_f16at(b), (float)(ls - 32));
    return RF_MUL(dl, rf_dq_iq4nl_value(rf_dq_nib32(b + 8 + 16 * s, j)));
}

/* Element i of a row of `type` starting at `row`. Unsupported types return NaN (the host
 * refuses them before launching). */
static __device__ __forceinline__ float rf_dq_elem(uint32_t type, const void *row, int64_t i) {
    const uint8_t *r = (const uint8_t *)row;
    switch (type) {
    case RF_DQ_F32: return ((const float *)r)[i];
    case RF_DQ_F16: return rf_h2f(((const uint16_t *)r)[i]);
    case RF_DQ_BF16: return rf_bf2f(((const uint16_t *)r)[i]);
    case RF_DQ_Q8_0: return rf_dq_q8_0(r + (i >> 5) * 34, (int)(i & 31));
    case RF_DQ_Q4_0: return rf_dq_q4_0(r + (i >> 5) * 18, (int)(i & 31));
    case RF_DQ_Q4_1: return rf_dq_q4_1(r + (i >> 5) * 20, (int)(i & 31));
    case RF_DQ_Q5_0: return rf_dq_q5_0(r + (i >> 5) * 22, (int)(i & 31));
    case RF_DQ_Q5_1: return rf_dq_q5_1(r + (i >> 5) * 24, (int)(i & 31));
    case RF_DQ_IQ4_NL: return rf_dq_iq4_nl(r + (i >> 5) * 18, (int)(i & 31));
    case RF_DQ_Q2_K: return rf_dq_q2_k(r + (i >> 8) * 84, (int)(i & 255));
    case RF_DQ_Q3_K: return rf_dq_q3_k(r + (i >> 8) * 110, (int)(i & 255));
    case RF_DQ_Q4_K: return rf_dq_q4_k(r + (i >> 8) * 144, (int)(i & 255));
    case RF_DQ_Q5_K: return rf_dq_q5_k(r + (i >> 8) * 176, (int)(i & 255));
    case RF_DQ_Q6_K: return rf_dq_q6_k(r + (i >> 8) * 210, (int)(i & 255));
    case RF_DQ_IQ4_XS: return rf_dq_iq4_xs(r + (i >> 8) * 136, (int)(i & 255));
    default: return __int_as_float(0x7fc00000);
    }
}

#endif
