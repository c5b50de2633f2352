#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "core/kv_format.h"
#include "core/util.h"

#include "ops.h"

void cpu_rope(float *x, int n_tokens, int n_heads, int head_dim, const int32_t *pos, const rf_rope *rope) {
    int half = rope->n_rot / 2;
    for (int t = 0; t < n_tokens; t++) {
        for (int i = 0; i < half; i++) {
            float freq = powf(rope->base, -2.0f * (float)i / (float)rope->n_rot);
            float theta = (float)pos[t] * rope->freq_scale * freq;
            if (rope->freq_factors) theta /= rope->freq_factors[i];
            float c = cosf(theta), s = sinf(theta);
            for (int h = 0; h < n_heads; h++) {
                float *v = x + ((int64_t)t * n_heads + h) * head_dim;
                int a = rope->mode == RF_ROPE_NEOX ? i : 2 * i;
                int b = rope->mode == RF_ROPE_NEOX ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * c - x1 * s;
                v[b] = x0 * s + x1 * c;
            }
        }
    }
}

void cpu_store_kv(const float *k, const float *v, int n_tokens, int kv_dim, const int32_t *slot,
                  void *k_cache, void *v_cache, uint32_t kv_type) {
    const size_t rb = rf_kv_row_bytes(kv_type, kv_dim);
    for (int t = 0; t < n_tokens; t++) {
        rf_kv_write_row(kv_type, k + (int64_t)t * kv_dim, kv_dim, (char *)k_cache + (size_t)slot[t] * rb);
        rf_kv_write_row(kv_type, v + (int64_t)t * kv_dim, kv_dim, (char *)v_cache + (size_t)slot[t] * rb);
    }
}
