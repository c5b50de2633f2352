#include "quant.h"

#include <math.h>
#include <string.h>

#include "dtype.h"
#include "util.h"

static inline float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return rf_fp16_to_fp32(h);
}

/* F32: plain little-endian floats. */
static void dq_f32(const uint8_t *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

/* F16: IEEE binary16. */
static void dq_f16(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = f16_at(src + 2 * i);
}

/* BF16: upper 16 bits of an f32. */
static void dq_bf16(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = rf_bf16_to_fp32(h);
    }
}

/* Q8_0: 32 elements in 34 bytes: f16 scale d, then 32 int8 q. x = d * q. */
static void dq_q8_0(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, src += 34) {
        float d = f16_at(src);
        const int8_t *q = (const int8_t *)(src + 2);
        for (int i = 0; i < 32; i++) dst[b * 32 + i] = d * (float)q[i];
    }
}

/* ---- 32-element "legacy" blocks ----------------------------------------------------------
 * All four store 32 elements as 16 bytes of nibbles: byte j (0..15) holds element j in its low
 * nibble and element j+16 in its high nibble (not j/2j+1 interleaving). */

/* Q4_0: 32 elements in 18 bytes: f16 d, qs[16]. x = d * (nibble - 8). */
static void dq_q4_0(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, src += 18, dst += 32) {
        const float d = f16_at(src);
        const uint8_t *qs = src + 2;
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((qs[j] & 0xF) - 8) * d;
            dst[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1: 32 elements in 20 bytes: f16 d, f16 m, qs[16]. x = d * nibble + m. */
static void dq_q4_1(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, src += 20, dst += 32) {
        const float d = f16_at(src), m = f16_at(src + 2);
        const uint8_t *qs = src + 4;
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)(qs[j] & 0xF) * d + m;
            dst[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

/* Q5_0: 32 elements in 22 bytes: f16 d, qh (u32 little-endian), qs[16]. The 5-bit value of
 * element e is its nibble (as above) plus bit e of qh as bit 4; x = d * (q5 - 16). */
static void dq_q5_0(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, src += 22, dst += 32) {
        const float d = f16_at(src);
        uint32_t qh;
        memcpy(&qh, src + 2, 4);
        const uint8_t *qs = src + 6;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = (float)(lo - 16) * d;
            dst[j + 16] = (float)(hi - 16) * d;
        }
    }
}

/* Q5_1: 32 elements in 24 bytes: f16 d, f16 m, qh (u32), qs[16]; 5-bit q as Q5_0;
 * x = d * q5 + m. */
static void dq_q5_1(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, src += 24, dst += 32) {
        const float d = f16_at(src), m = f16_at(src + 2);
        uint32_t qh;
        memcpy(&qh, src + 4, 4);
        const uint8_t *qs = src + 8;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = (float)lo * d + m;
            dst[j + 16] = (float)hi * d + m;
        }
    }
}

/* IQ4_NL: 32 elements in 18 bytes: f16 d, qs[16] with Q4_0's nibble order; a nibble indexes a
 * fixed non-uniform codebook (rf_iq4nl_values): x = d * value[nibble]. */
static const int8_t rf_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};

static void dq_iq4_nl(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, src += 18, dst += 32) {
        const float d = f16_at(src);
        const uint8_t *qs = src + 2;
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)rf_iq4nl_values[qs[j] & 0xF];
            dst[j + 16] = d * (float)rf_iq4nl_values[qs[j] >> 4];
        }
    }
}

/* ---- 256-element "K" super-blocks ---------------------------------------------------------- */

/* Q2_K: 256 elements in 84 bytes: scales[16], qs[64], f16 d, f16 dmin.
 * 16 sub-blocks of 16 elements; scales[s] holds the 4-bit scale (low nibble) and 4-bit min
 * (high nibble) of sub-block s. 2-bit quants: the 256 elements form two halves of 128; half h
 * uses qs[32h .. 32h+32); within a half, element 32*k + l (k = 0..3, l = 0..31) is bits
 * 2k..2k+1 of qs[32h + l]. Sub-block s = e / 16. x = (d * sc) * q - (dmin * m). */
static void dq_q2_k(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, src += 84) {
        const uint8_t *scales = src, *q = src + 16;
        const float d = f16_at(src + 80), dmin = f16_at(src + 82);
        int is = 0;
        for (int h = 0; h < 2; h++, q += 32) {
            for (int k = 0; k < 4; k++) {
                for (int part = 0; part < 2; part++) {
                    const uint8_t sc = scales[is++];
                    const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *dst++ = dl * (float)((q[l + 16 * part] >> (2 * k)) & 3) - ml;
                }
            }
        }
    }
}

/* Q3_K: 256 elements in 110 bytes: hmask[32], qs[64], scales[12], f16 d.
 * Low 2 bits of each quant are placed exactly as in Q2_K (qs). The third bit of element
 * e = 128h + 32k + l is bit (4h + k) of hmask[l]; q3 = low2 + 4*hbit - 4, i.e. a clear high bit
 * means "subtract 4" (range -4..3). 16 sub-blocks of 16 with 6-bit signed scales (stored +32):
 * scale s has low 4 bits in scales[s] & 0xF (s < 8) or scales[s-8] >> 4 (s >= 8), and high 2
 * bits at bits 2*(s/4).. of scales[8 + s%4]. x = (d * (sc6 - 32)) * q3. */
static void dq_q3_k(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, src += 110) {
        const uint8_t *hm = src, *q = src + 32, *sc = src + 96;
        const float d = f16_at(src + 108);
        int8_t scale[16];
        for (int s = 0; s < 16; s++) {
            int lo = s < 8 ? (sc[s] & 0xF) : (sc[s - 8] >> 4);
            int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
            scale[s] = (int8_t)((lo | (hi << 4)) - 32);
        }
        int is = 0;
        uint8_t m = 1;
        for (int h = 0; h < 2; h++, q += 32) {
            for (int k = 0; k < 4; k++, m <<= 1) {
                for (int part = 0; part < 2; part++) {
                    const float dl = d * (float)scale[is++];
                    for (int l = 16 * part; l < 16 * part + 16; l++) {
                        int v = ((q[l] >> (2 * k)) & 3) - ((hm[l] & m) ? 0 : 4);
                        *dst++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

/* The 12-byte scale/min packing shared by Q4_K and Q5_K: 8 sub-blocks, each a 6-bit scale and a
 * 6-bit min. For j < 4: scale = sc[j] & 63, min = sc[j+4] & 63. For j >= 4: the low 4 bits come
 * from sc[j+4] (scale: low nibble, min: high nibble), the high 2 bits from the top two bits of
 * sc[j-4] (scale) and sc[j] (min). */
static inline void k4_scale_min(int j, const uint8_t *sc, uint8_t *scale, uint8_t *min) {
    if (j < 4) {
        *scale = sc[j] & 63;
        *min = sc[j + 4] & 63;
    } else {
        *scale = (uint8_t)((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4));
        *min = (uint8_t)((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
    }
}

/* Q4_K: 256 elements in 144 bytes: f16 d, f16 dmin, scales[12] (k4_scale_min), qs[128].
 * 8 sub-blocks of 32. Elements 64c .. 64c+31 are the low nibbles of qs[32c .. 32c+32) and use
 * sub-block 2c; elements 64c+32 .. 64c+63 are the high nibbles of the same bytes, sub-block
 * 2c+1. x = (d * scale) * q - (dmin * min). */
static void dq_q4_k(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, src += 144) {
        const float d = f16_at(src), dmin = f16_at(src + 2);
        const uint8_t *sc = src + 4, *q = src + 16;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t s0, m0, s1, m1;
            k4_scale_min(2 * c, sc, &s0, &m0);
            k4_scale_min(2 * c + 1, sc, &s1, &m1);
            const float d0 = d * (float)s0, mm0 = dmin * (float)m0;
            const float d1 = d * (float)s1, mm1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++) *dst++ = d0 * (float)(q[l] & 0xF) - mm0;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)(q[l] >> 4) - mm1;
        }
    }
}

/* Q5_K: 256 elements in 176 bytes: f16 d, f16 dmin, scales[12] (k4_scale_min), qh[32],
 * qs[128]. Nibbles and sub-blocks as Q4_K; the fifth bit of sub-block s (0..7) element l
 * (0..31) is bit s of qh[l]. x = (d * scale) * q5 - (dmin * min). */
static void dq_q5_k(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, src += 176) {
        const float d = f16_at(src), dmin = f16_at(src + 2);
        const uint8_t *sc = src + 4, *qh = src + 16, *q = src + 48;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t s0, m0, s1, m1;
            k4_scale_min(2 * c, sc, &s0, &m0);
            k4_scale_min(2 * c + 1, sc, &s1, &m1);
            const float d0 = d * (float)s0, mm0 = dmin * (float)m0;
            const float d1 = d * (float)s1, mm1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d0 * (float)((q[l] & 0xF) + (((qh[l] >> (2 * c)) & 1) << 4)) - mm0;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (float)((q[l] >> 4) + (((qh[l] >> (2 * c + 1)) & 1) << 4)) - mm1;
        }
    }
}

/* Q6_K: 256 elements in 210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), int8
 * scales[16], f16 d. Two halves of 128; half h uses ql[64h..64h+64), qh[32h..32h+32).
 * For l = 0..31 within half h (element base 128h):
 *   element l      : low nibble of ql[l],    bits 0-1 of qh[l]
 *   element l + 32 : low nibble of ql[l+32], bits 2-3 of qh[l]
 *   element l + 64 : high nibble of ql[l],   bits 4-5 of qh[l]
 *   element l + 96 : high nibble of ql[l+32],bits 6-7 of qh[l]
 * q6 = (low | high << 4) - 32. 16 sub-blocks of 16 with int8 scales: element e uses scales[e/16].
 * x = (d * scale) * q6. */
static void dq_q6_k(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, src += 210) {
        const uint8_t *ql = src, *qh = src + 128;
        const int8_t *sc = (const int8_t *)(src + 192);
        const float d = f16_at(src + 208);
        for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, dst += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                dst[l] = d * (float)sc[is] * (float)q1;
                dst[l + 32] = d * (float)sc[is + 2] * (float)q2;
                dst[l + 64] = d * (float)sc[is + 4] * (float)q3;
                dst[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

/* IQ4_XS: 256 elements in 136 bytes: f16 d, u16 scales_h, scales_l[4], qs[128]. 8 sub-blocks
 * of 32, each with a 6-bit scale (stored +32): low 4 bits = nibble (s % 2) of scales_l[s / 2],
 * high 2 bits = bits 2s..2s+1 of scales_h. Sub-block s uses qs[16s .. 16s+16) in Q4_0's nibble
 * order, each nibble indexing the IQ4_NL codebook. x = (d * (sc6 - 32)) * value[nibble]. */
static void dq_iq4_xs(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, src += 136) {
        const float d = f16_at(src);
        uint16_t sh;
        memcpy(&sh, src + 2, 2);
        const uint8_t *sl = src + 4, *qs = src + 8;
        for (int s = 0; s < 8; s++, qs += 16, dst += 32) {
            const int ls = ((sl[s / 2] >> (4 * (s % 2))) & 0xF) | (((sh >> (2 * s)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)rf_iq4nl_values[qs[j] & 0xF];
                dst[j + 16] = dl * (float)rf_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

int rf_dequantize_row(uint32_t type, const void *src_, float *dst, int64_t n) {
    const uint8_t *src = src_;
    switch (type) {
    case RF_TYPE_F32: dq_f32(src, dst, n); return 0;
    case RF_TYPE_F16: dq_f16(src, dst, n); return 0;
    case RF_TYPE_BF16: dq_bf16(src, dst, n); return 0;
    case RF_TYPE_Q8_0: dq_q8_0(src, dst, n); return 0;
    case RF_TYPE_Q4_0: dq_q4_0(src, dst, n); return 0;
    case RF_TYPE_Q4_1: dq_q4_1(src, dst, n); return 0;
    case RF_TYPE_Q5_0: dq_q5_0(src, dst, n); return 0;
    case RF_TYPE_Q5_1: dq_q5_1(src, dst, n); return 0;
    case RF_TYPE_IQ4_NL: dq_iq4_nl(src, dst, n); return 0;
    case RF_TYPE_Q2_K: dq_q2_k(src, dst, n); return 0;
    case RF_TYPE_Q3_K: dq_q3_k(src, dst, n); return 0;
    case RF_TYPE_Q4_K: dq_q4_k(src, dst, n); return 0;
    case RF_TYPE_Q5_K: dq_q5_k(src, dst, n); return 0;
    case RF_TYPE_Q6_K: dq_q6_k(src, dst, n); return 0;
    case RF_TYPE_IQ4_XS: dq_iq4_xs(src, dst, n); return 0;
    default: rf_set_error("weight type %s is not supported", rf_type_name(type)); return -1;
    }
}

/* Q8_0 encoder: d = max|x| / 127, q = round(x / d) (ggml's quantize_row_q8_0_ref). */
static void q_q8_0(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, dst += 34) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        uint16_t dh = rf_fp32_to_fp16(d);
        memcpy(dst, &dh, 2);
        for (int i = 0; i < 32; i++) ((int8_t *)(dst + 2))[i] = (int8_t)roundf(x[b * 32 + i] * id);
    }
}

/* ---- Encoders ------------------------------------------------------------------------------
 * Round-to-nearest, one pass, like ggml's *_ref quantizers for the 32-element types; the K-type
 * encoders are simple (no iterative scale search), good enough for tests and synthetic files. */

static inline void put_f16(uint8_t *p, float f) {
    uint16_t h = rf_fp32_to_fp16(f);
    memcpy(p, &h, 2);
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Value with the largest magnitude (sign kept), so that it maps exactly to the code -8 / -16. */
static float signed_absmax(const float *x, int n) {
    float amax = 0, vmax = 0;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            vmax = x[i];
        }
    }
    return vmax;
}

/* Q4_0 / Q5_0: d = vmax / -(2^(bits-1)), q = clamp(trunc(x/d + 2^(bits-1) + 0.5)). */
static void q_q4_0(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, dst += 18) {
        const float d = signed_absmax(x, 32) / -8.0f, id = d ? 1.0f / d : 0.0f;
        put_f16(dst, d);
        for (int j = 0; j < 16; j++) {
            int lo = clampi((int)(x[j] * id + 8.5f), 0, 15);
            int hi = clampi((int)(x[j + 16] * id + 8.5f), 0, 15);
            dst[2 + j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

static void q_q5_0(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, dst += 22) {
        const float d = signed_absmax(x, 32) / -16.0f, id = d ? 1.0f / d : 0.0f;
        put_f16(dst, d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int lo = clampi((int)(x[j] * id + 16.5f), 0, 31);
            int hi = clampi((int)(x[j + 16] * id + 16.5f), 0, 31);
            dst[6 + j] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
            qh |= (uint32_t)(lo >> 4) << j;
            qh |= (uint32_t)(hi >> 4) << (j + 16);
        }
        memcpy(dst + 2, &qh, 4);
    }
}

/* Q4_1 / Q5_1: m = min, d = (max - min) / (2^bits - 1), q = clamp(trunc((x - m)/d + 0.5)). */
static void minmax(const float *x, int n, float *mn, float *mx) {
    *mn = INFINITY;
    *mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        *mn = fminf(*mn, x[i]);
        *mx = fmaxf(*mx, x[i]);
    }
}

static void q_q4_1(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, dst += 20) {
        float mn, mx;
        minmax(x, 32, &mn, &mx);
        const float d = (mx - mn) / 15.0f, id = d ? 1.0f / d : 0.0f;
        put_f16(dst, d);
        put_f16(dst + 2, mn);
        for (int j = 0; j < 16; j++) {
            int lo = clampi((int)((x[j] - mn) * id + 0.5f), 0, 15);
            int hi = clampi((int)((x[j + 16] - mn) * id + 0.5f), 0, 15);
            dst[4 + j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

static void q_q5_1(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, dst += 24) {
        float mn, mx;
        minmax(x, 32, &mn, &mx);
        const float d = (mx - mn) / 31.0f, id = d ? 1.0f / d : 0.0f;
        put_f16(dst, d);
        put_f16(dst + 2, mn);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int lo = clampi((int)((x[j] - mn) * id + 0.5f), 0, 31);
            int hi = clampi((int)((x[j + 16] - mn) * id + 0.5f), 0, 31);
            dst[8 + j] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
            qh |= (uint32_t)(lo >> 4) << j;
            qh |= (uint32_t)(hi >> 4) << (j + 16);
        }
        memcpy(dst + 4, &qh, 4);
    }
}

/* IQ4_NL: d = vmax / -127 (so the extreme value hits codebook entry 0), each element takes the
 * nearest codebook entry. */
static void q_iq4_nl(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, dst += 18) {
        const float d = signed_absmax(x, 32) / -127.0f, id = d ? 1.0f / d : 0.0f;
        put_f16(dst, d);
        uint8_t q[32];
        for (int j = 0; j < 32; j++) {
            const float v = x[j] * id;
            int best = 0;
            for (int k = 1; k < 16; k++)
                if (fabsf(v - rf_iq4nl_values[k]) < fabsf(v - rf_iq4nl_values[best])) best = k;
            q[j] = (uint8_t)best;
        }
        for (int j = 0; j < 16; j++) dst[2 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
    }
}

/* Packs 6-bit scale/min pairs into Q4_K/Q5_K's 12-byte layout (inverse of k4_scale_min). */
static void k4_pack(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[12]) {
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        out[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
}

/* Shared by Q4_K/Q5_K: per 32-sub-block affine fit with min <= 0 (decoded as d*sc*q - dmin*m),
 * 6-bit sub-scales relative to the f16 super-block scales. Fills q[256] in 0..qmax. */
static void kquant_affine(const float *x, int qmax, uint8_t *d_f16, uint8_t *dmin_f16, uint8_t sc12[12],
                          uint8_t q[256]) {
    float scale[8], minv[8], max_scale = 0, max_min = 0;
    for (int s = 0; s < 8; s++) {
        float mn, mx;
        minmax(x + 32 * s, 32, &mn, &mx);
        if (mn > 0) mn = 0;
        scale[s] = (mx - mn) / (float)qmax;
        minv[s] = -mn;
        max_scale = fmaxf(max_scale, scale[s]);
        max_min = fmaxf(max_min, minv[s]);
    }
    const float d = rf_fp16_to_fp32(rf_fp32_to_fp16(max_scale / 63.0f));
    const float dmin = rf_fp16_to_fp32(rf_fp32_to_fp16(max_min / 63.0f));
    put_f16(d_f16, d);
    put_f16(dmin_f16, dmin);
    uint8_t ls[8], lm[8];
    for (int s = 0; s < 8; s++) {
        ls[s] = (uint8_t)clampi(d ? (int)lrintf(scale[s] / d) : 0, 0, 63);
        lm[s] = (uint8_t)clampi(dmin ? (int)lrintf(minv[s] / dmin) : 0, 0, 63);
        const float ds = d * (float)ls[s], dm = dmin * (float)lm[s];
        for (int l = 0; l < 32; l++) {
            const int v = ds ? (int)lrintf((x[32 * s + l] + dm) / ds) : 0;
            q[32 * s + l] = (uint8_t)clampi(v, 0, qmax);
        }
    }
    k4_pack(ls, lm, sc12);
}

static void q_q4_k(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256, dst += 144) {
        uint8_t q[256];
        kquant_affine(x, 15, dst, dst + 2, dst + 4, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                dst[16 + 32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}

static void q_q5_k(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256, dst += 176) {
        uint8_t q[256];
        kquant_affine(x, 31, dst, dst + 2, dst + 4, q);
        uint8_t *qh = dst + 16, *qs = dst + 48;
        memset(qh, 0, 32);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t a = q[64 * c + l], bq = q[64 * c + 32 + l];
                qs[32 * c + l] = (uint8_t)((a & 0xF) | ((bq & 0xF) << 4));
                qh[l] |= (uint8_t)(((a >> 4) << (2 * c)) | ((bq >> 4) << (2 * c + 1)));
            }
        }
    }
}

/* Q6_K: per 16-sub-block scale = vmax / -32, int8 sub-scales relative to d = max|scale| / 127. */
static void q_q6_k(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256, dst += 210) {
        float scale[16], amax = 0;
        for (int s = 0; s < 16; s++) {
            scale[s] = signed_absmax(x + 16 * s, 16) / -32.0f;
            amax = fmaxf(amax, fabsf(scale[s]));
        }
        const float d = rf_fp16_to_fp32(rf_fp32_to_fp16(amax / 127.0f));
        put_f16(dst + 208, d);
        int8_t *sc = (int8_t *)(dst + 192);
        uint8_t q[256];
        for (int s = 0; s < 16; s++) {
            sc[s] = (int8_t)clampi(d ? (int)lrintf(scale[s] / d) : 0, -127, 127);
            const float ds = d * (float)sc[s];
            for (int l = 0; l < 16; l++) {
                const int v = ds ? (int)lrintf(x[16 * s + l] / ds) : 0;
                q[16 * s + l] = (uint8_t)(clampi(v, -32, 31) + 32);
            }
        }
        uint8_t *ql = dst, *qh = dst + 128;
        memset(qh, 0, 64);
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t *e = q + 128 * h + l;
                ql[64 * h + l] = (uint8_t)((e[0] & 0xF) | ((e[64] & 0xF) << 4));
                ql[64 * h + l + 32] = (uint8_t)((e[32] & 0xF) | ((e[96] & 0xF) << 4));
                qh[32 * h + l] = (uint8_t)((e[0] >> 4) | ((e[32] >> 4) << 2) | ((e[64] >> 4) << 4) | ((e[96] >> 4) << 6));
            }
        }
    }
}

int rf_quantize_row(uint32_t type, const float *src, void *dst_, int64_t n) {
    uint8_t *dst = dst_;
    switch (type) {
    case RF_TYPE_F32: memcpy(dst, src, (size_t)n * 4); return 0;
    case RF_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = rf_fp32_to_fp16(src[i]);
            memcpy(dst + 2 * i, &h, 2);
        }
        return 0;
    case RF_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = rf_fp32_to_bf16(src[i]);
            memcpy(dst + 2 * i, &h, 2);
        }
        return 0;
    case RF_TYPE_Q8_0: q_q8_0(src, dst, n); return 0;
    case RF_TYPE_Q4_0: q_q4_0(src, dst, n); return 0;
    case RF_TYPE_Q4_1: q_q4_1(src, dst, n); return 0;
    case RF_TYPE_Q5_0: q_q5_0(src, dst, n); return 0;
    case RF_TYPE_Q5_1: q_q5_1(src, dst, n); return 0;
    case RF_TYPE_IQ4_NL: q_iq4_nl(src, dst, n); return 0;
    case RF_TYPE_Q4_K: q_q4_k(src, dst, n); return 0;
    case RF_TYPE_Q5_K: q_q5_k(src, dst, n); return 0;
    case RF_TYPE_Q6_K: q_q6_k(src, dst, n); return 0;
    default: rf_set_error("no encoder for weight type %s", rf_type_name(type)); return -1;
    }
}
