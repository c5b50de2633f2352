/* kv_format.c: reference writer and reader of the K/V cache row formats (kv_format.h). */
#include "kv_format.h"

#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "core/util.h"

bool rf_kv_type_ok(uint32_t type) {
    return type == RF_TYPE_F32 || type == RF_TYPE_F16 || type == RF_TYPE_Q8_0 || type == RF_TYPE_Q4_0;
}

size_t rf_kv_row_bytes(uint32_t type, int64_t kv_dim) {
    switch (type) {
    case RF_TYPE_F32: return (size_t)kv_dim * 4;
    case RF_TYPE_F16: return (size_t)kv_dim * 2;
    case RF_TYPE_Q8_0:
        if (kv_dim % RF_KV_Q8_BLOCK) return 0;
        return ((size_t)kv_dim + (size_t)kv_dim / RF_KV_Q8_BLOCK * 2 + 15) & ~(size_t)15;
    case RF_TYPE_Q4_0:
        if (kv_dim % RF_KV_Q8_BLOCK) return 0;
        return ((size_t)kv_dim / 2 + (size_t)kv_dim / RF_KV_Q8_BLOCK * 2 + 15) & ~(size_t)15;
    default: return 0;
    }
}

const char *rf_kv_type_name(uint32_t type) {
    return type == RF_TYPE_F32    ? "f32"
           : type == RF_TYPE_F16  ? "f16"
           : type == RF_TYPE_Q8_0 ? "q8_0"
           : type == RF_TYPE_Q4_0 ? "q4_0"
                                  : "?";
}

void rf_kv_q8_block(const float *x, int8_t *q, uint16_t *d) {
    float amax = 0.0f;
    bool bad = false;
    for (int i = 0; i < RF_KV_Q8_BLOCK; i++) {
        bad |= !isfinite(x[i]);
        amax = fmaxf(amax, fabsf(x[i]));
    }
    const float dq = amax / 127.0f;
    const uint16_t dh = rf_fp32_to_fp16(dq);
    if (bad || (dh & 0x7c00u) == 0x7c00u) { /* non-finite input, or the scale overflows binary16 */
        memset(q, 0, RF_KV_Q8_BLOCK);
        *d = 0x7e00u; /* NaN */
        return;
    }
    const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
    for (int i = 0; i < RF_KV_Q8_BLOCK; i++) {
        const float r = roundf(x[i] * id);
        /* r is NaN only for 0 times an id that overflowed (amax below ~4e-36): code 0, as the
         * GPU's conversion gives, without converting a NaN (undefined in C) */
        q[i] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : r == r ? (int)r : 0);
    }
    *d = dh;
}

void rf_kv_q4_block(const float *x, uint8_t *c, uint16_t *d) {
    float amax = 0.0f, m = 0.0f;
    bool bad = false;
    for (int i = 0; i < RF_KV_Q8_BLOCK; i++) {
        bad |= !isfinite(x[i]);
        if (amax < fabsf(x[i])) {
            amax = fabsf(x[i]);
            m = x[i];
        }
    }
    const float dq = amax > 0.0f ? m / -8.0f : 0.0f; /* an all-zero block: +0, not -0 */
    const uint16_t dh = rf_fp32_to_fp16(dq);
    if (bad || (dh & 0x7c00u) == 0x7c00u) {
        memset(c, 8, RF_KV_Q8_BLOCK);
        *d = 0x7e00u;
        return;
    }
    const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
    for (int i = 0; i < RF_KV_Q8_BLOCK; i++) {
        const float p = x[i] * id; /* a statement of its own: rounded before the add (no contraction) */
        const float v = p + 8.5f;
        c[i] = (uint8_t)(v >= 15.0f ? 15 : v >= 0.0f ? (int)v : 0);
    }
    *d = dh;
}

static void put_scale(uint8_t *p, uint16_t s) {
    p[0] = (uint8_t)(s & 0xff);
    p[1] = (uint8_t)(s >> 8);
}
static float get_scale(const uint8_t *p) { return rf_fp16_to_fp32((uint16_t)(p[0] | p[1] << 8)); }

void rf_kv_write_row(uint32_t type, const float *x, int64_t kv_dim, void *row) {
    if (type == RF_TYPE_F32) {
        memcpy(row, x, sizeof(float) * (size_t)kv_dim);
    } else if (type == RF_TYPE_F16) {
        uint16_t *h = row;
        for (int64_t i = 0; i < kv_dim; i++) h[i] = rf_fp32_to_fp16(x[i]);
    } else if (type == RF_TYPE_Q8_0) {
        int8_t *q = row;
        uint8_t *d = (uint8_t *)row + kv_dim;
        for (int64_t b = 0; b < kv_dim / RF_KV_Q8_BLOCK; b++) {
            uint16_t s;
            rf_kv_q8_block(x + b * RF_KV_Q8_BLOCK, q + b * RF_KV_Q8_BLOCK, &s);
            put_scale(d + 2 * b, s);
        }
        const size_t used = (size_t)kv_dim + (size_t)kv_dim / RF_KV_Q8_BLOCK * 2;
        memset((uint8_t *)row + used, 0, rf_kv_row_bytes(type, kv_dim) - used);
    } else {
        uint8_t *w = row, *d = (uint8_t *)row + kv_dim / 2;
        for (int64_t b = 0; b < kv_dim / RF_KV_Q8_BLOCK; b++) {
            uint8_t c[RF_KV_Q8_BLOCK];
            uint16_t s;
            rf_kv_q4_block(x + b * RF_KV_Q8_BLOCK, c, &s);
            for (int g = 0; g < RF_KV_Q8_BLOCK / 8; g++) { /* one 32-bit word per 8 elements */
                uint32_t word = 0;
                for (int j = 0; j < 8; j++) word |= (uint32_t)c[8 * g + j] << rf_kv_q4_shift(j);
                uint8_t *o = w + (b * RF_KV_Q8_BLOCK + 8 * g) / 2;
                for (int k = 0; k < 4; k++) o[k] = (uint8_t)(word >> (8 * k));
            }
            put_scale(d + 2 * b, s);
        }
        const size_t used = (size_t)kv_dim / 2 + (size_t)kv_dim / RF_KV_Q8_BLOCK * 2;
        memset((uint8_t *)row + used, 0, rf_kv_row_bytes(type, kv_dim) - used);
    }
}

void rf_kv_read_row(uint32_t type, const void *row, int64_t kv_dim, int64_t e0, int64_t n, float *out) {
    if (type == RF_TYPE_F32) {
        memcpy(out, (const float *)row + e0, sizeof(float) * (size_t)n);
    } else if (type == RF_TYPE_F16) {
        const uint16_t *h = (const uint16_t *)row + e0;
        for (int64_t i = 0; i < n; i++) out[i] = rf_fp16_to_fp32(h[i]);
    } else if (type == RF_TYPE_Q8_0) {
        const int8_t *q = (const int8_t *)row;
        const uint8_t *d = (const uint8_t *)row + kv_dim;
        for (int64_t e = e0; e < e0 + n;) { /* block by block: one scale conversion per 32 elements */
            const int64_t b = e / RF_KV_Q8_BLOCK, stop = (b + 1) * RF_KV_Q8_BLOCK < e0 + n ? (b + 1) * RF_KV_Q8_BLOCK : e0 + n;
            const float s = get_scale(d + 2 * b);
            for (; e < stop; e++) out[e - e0] = (float)q[e] * s;
        }
    } else {
        const uint8_t *w = (const uint8_t *)row, *d = (const uint8_t *)row + kv_dim / 2;
        for (int64_t e = e0; e < e0 + n;) {
            const int64_t b = e / RF_KV_Q8_BLOCK, stop = (b + 1) * RF_KV_Q8_BLOCK < e0 + n ? (b + 1) * RF_KV_Q8_BLOCK : e0 + n;
            const float s = get_scale(d + 2 * b);
            for (; e < stop; e++) {
                const uint8_t *o = w + (e & ~(int64_t)7) / 2;
                const uint32_t word = (uint32_t)o[0] | (uint32_t)o[1] << 8 | (uint32_t)o[2] << 16 | (uint32_t)o[3] << 24;
                out[e - e0] = (float)((int)(word >> rf_kv_q4_shift(e) & 15u) - 8) * s;
            }
        }
    }
}
