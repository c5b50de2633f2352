/* gemm_i16.c: the portable pieces of the int16-code GEMM (gemm_i16.h): x's codes and the tile
 * fallback. Codes round as the SIMD conversions do (to nearest, ties to even: lrintf in the
 * default rounding mode). */
#include "backend/cpu/gemm_i16.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/thread_scratch.h"
#include "core/util.h"

int rf_i16_pack_x(const float *x, int64_t n_in, int64_t n_tok, int gt, int32_t **xq_out, float **xd_out) {
    const int64_t nb = (n_in + 31) / 32, ntg = (n_tok + gt - 1) / gt;
    const size_t qb = sizeof(int32_t) * (size_t)(ntg * nb * 16 * gt), db = sizeof(float) * (size_t)(ntg * nb * gt);
    uint8_t *sc = rf_thread_scratch(1, qb + db);
    int32_t *xq = (int32_t *)(void *)sc;
    float *xd = (float *)(void *)(sc + qb);
    memset(sc, 0, qb + db);
    for (int64_t t = 0; t < n_tok; t++) {
        const float *xr = x + t * n_in;
        const int64_t tg = t / gt, tj = t % gt;
        for (int64_t b = 0; b < nb; b++) {
            const int64_t k0 = 32 * b, n = RF_MIN(32, n_in - k0);
            float amax = 0;
            for (int64_t k = 0; k < n; k++) {
                if (!isfinite(xr[k0 + k])) return 1;
                amax = fmaxf(amax, fabsf(xr[k0 + k]));
            }
            if (amax == 0) continue;
            if (amax < (float)RF_I16_QMAX * FLT_MIN) return 1;
            const float inv = (float)RF_I16_QMAX / amax;
            int32_t *o = xq + (tg * nb + b) * 16 * gt + tj;
            for (int g = 0; g < 16; g++) {
                const int64_t k = k0 + 2 * g;
                const int32_t lo = k < n_in ? (int32_t)lrintf(xr[k] * inv) : 0;
                const int32_t hi = k + 1 < n_in ? (int32_t)lrintf(xr[k + 1] * inv) : 0;
                o[g * gt] = (int32_t)(((uint32_t)hi << 16) | ((uint32_t)lo & 0xFFFFu));
            }
            xd[(tg * nb + b) * gt + tj] = amax / (float)RF_I16_QMAX;
        }
    }
    *xq_out = xq;
    *xd_out = xd;
    return 0;
}

void rf_i16_tile_f32(const uint8_t *wr, uint64_t rb, int nr, int64_t n_in, const float *x, int64_t n_tok, float *y,
                     int64_t n_out, int kind) {
    for (int i = 0; i < nr; i++) {
        const uint8_t *h = wr + (uint64_t)i * rb;
        for (int64_t t = 0; t < n_tok; t++) {
            float s = 0;
            for (int64_t k = 0; k < n_in; k++) {
                uint16_t v;
                memcpy(&v, h + 2 * k, 2);
                s += (kind == 1 ? rf_fp16_to_fp32(v) : rf_bf16_to_fp32(v)) * x[t * n_in + k];
            }
            y[t * n_out + i] = s;
        }
    }
}
