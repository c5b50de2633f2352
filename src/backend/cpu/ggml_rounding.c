/* ggml_rounding.c: the roundings llama.cpp's CPU backend applies to activations, so the
 * reference backend can reproduce its outputs closely ("cpu-ggml" device). Used to check our
 * block decoders against llama.cpp's golden logits far more tightly than an exact f32 engine
 * can be (random-weight models amplify llama.cpp's 8-bit activation rounding to ~2e-2). */
#include <math.h>

#include "core/dtype.h"
#include "core/util.h"
#include "ops.h"

static float round_f16(float v) { return rf_fp16_to_fp32(rf_fp32_to_fp16(v)); }

/* q8_0 / q8_1: per 32 values, d = amax / 127 stored as f16, q = round-half-even(x * 127/amax). */
static void round_q8_0(float *x, int64_t n) {
    for (int64_t b = 0; b + 32 <= n; b += 32) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        float d = round_f16(amax / 127.0f), id = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int i = 0; i < 32; i++) x[b + i] = nearbyintf(x[b + i] * id) * d;
    }
}

/* q8_K: per 256 values, the signed value of largest magnitude sets iscale = -127 / max,
 * q = min(127, nearest(iscale * x)), d = 1 / iscale kept in f32. */
static void round_q8_k(float *x, int64_t n) {
    for (int64_t b = 0; b + 256 <= n; b += 256) {
        float amax = 0, max = 0;
        for (int i = 0; i < 256; i++)
            if (fabsf(x[b + i]) > amax) {
                amax = fabsf(x[b + i]);
                max = x[b + i];
            }
        if (amax == 0.0f) continue;
        float iscale = -127.0f / max;
        for (int i = 0; i < 256; i++) {
            float q = nearbyintf(iscale * x[b + i]);
            x[b + i] = fminf(q, 127.0f) * (1.0f / iscale);
        }
    }
}

void cpu_round_like_ggml(uint32_t wtype, float *x, int64_t n) {
    switch (wtype) {
    case RF_TYPE_F32: return;
    case RF_TYPE_F16:
        for (int64_t i = 0; i < n; i++) x[i] = round_f16(x[i]);
        return;
    case RF_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) x[i] = rf_bf16_to_fp32(rf_fp32_to_bf16(x[i]));
        return;
    case RF_TYPE_Q4_0:
    case RF_TYPE_Q4_1:
    case RF_TYPE_Q5_0:
    case RF_TYPE_Q5_1:
    case RF_TYPE_Q8_0:
    case RF_TYPE_IQ4_NL: round_q8_0(x, n); return;
    default: round_q8_k(x, n); return; /* k-quants and iq4_xs dot with q8_K */
    }
}
