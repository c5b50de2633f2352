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

int rf_dequantize_row(uint32_t type, const void *src_, float *dst, int64_t n) {
    const uint8_t *src = src_;
    switch (type) {
    case RF_TYPE_F32: dq_f32(src, dst, n); return 0;
    case RF_TYPE_F16: dq_f16(src, dst, n); return 0;
    case RF_TYPE_BF16: dq_bf16(src, dst, n); return 0;
    case RF_TYPE_Q8_0: dq_q8_0(src, dst, n); return 0;
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
    default: rf_set_error("no encoder for weight type %s", rf_type_name(type)); return -1;
    }
}
