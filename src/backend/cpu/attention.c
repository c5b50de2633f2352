#include <stdlib.h>
#include <math.h>

#include "core/util.h"
#include "ops.h"

void cpu_attention(const rf_step *step, const rf_attn_dims *d, const float *q, const float *k_cache,
                   const float *v_cache, float *out, int64_t begin, int64_t end) {
    int hd = d->head_dim, kv_dim = d->n_kv_head * hd, q_dim = d->n_head * hd;
    int group = d->n_head / d->n_kv_head;
    float *acc = rf_xmalloc((size_t)hd * sizeof(float));
    for (int64_t r = begin; r < end; r++) {
        int t = (int)(r / d->n_head), h = (int)(r % d->n_head);
        const int32_t *bt = step->block_table + (int64_t)step->seq_row[t] * step->max_blocks;
        int n_pos = step->pos[t] + 1;
        {
            const float *qh = q + (int64_t)t * q_dim + (int64_t)h * hd;
            int g = h / group;
            float m = -INFINITY, l = 0.0f;
            for (int i = 0; i < hd; i++) acc[i] = 0.0f;
            for (int p = 0; p < n_pos; p++) {
                int64_t slot = (int64_t)bt[p / step->block_size] * step->block_size + p % step->block_size;
                const float *kp = k_cache + slot * kv_dim + (int64_t)g * hd;
                const float *vp = v_cache + slot * kv_dim + (int64_t)g * hd;
                float s = 0.0f;
                for (int i = 0; i < hd; i++) s += qh[i] * kp[i];
                s *= d->scale;
                /* Online softmax: rescale what has been accumulated when the max grows. */
                float m_new = s > m ? s : m;
                float corr = expf(m - m_new); /* exp(-inf) = 0 on the first position */
                float w = expf(s - m_new);
                l = l * corr + w;
                for (int i = 0; i < hd; i++) acc[i] = acc[i] * corr + w * vp[i];
                m = m_new;
            }
            float *o = out + (int64_t)t * q_dim + (int64_t)h * hd;
            for (int i = 0; i < hd; i++) o[i] = acc[i] / l;
        }
    }
    free(acc);
}
