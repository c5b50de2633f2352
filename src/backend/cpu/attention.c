#include <stdlib.h>
#include <math.h>

#include "core/util.h"
#include "ops.h"

static float round_f16(float v) { return rf_fp16_to_fp32(rf_fp32_to_fp16(v)); }

void cpu_attention(const rf_step *step, const rf_attn_dims *d, const float *q, const float *k_cache,
                   const float *v_cache, float *out, int64_t begin, int64_t end) {
    int hd = d->head_dim, kv_dim = d->n_kv_head * hd, q_dim = d->n_head * hd;
    int group = d->n_head / d->n_kv_head;
    float *acc = rf_xmalloc((size_t)hd * sizeof(float));
    for (int64_t r = begin; r < end; r++) {
        int t = (int)(r / d->n_head), h = (int)(r % d->n_head);
        const int32_t *bt = step->block_table + (int64_t)step->seq_row[t] * step->max_blocks;
        const float *qh = q + (int64_t)t * q_dim + (int64_t)h * hd;
        int g = h / group;
        float m = -INFINITY, l = 0.0f;
        for (int i = 0; i < hd; i++) acc[i] = 0.0f;
        for (int p = 0; p <= step->pos[t]; p++) {
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
    free(acc);
}

/* llama.cpp's non-flash CPU attention: scores q_f16 . k_f16, softmax with the sum in double,
 * normalised probabilities rounded to f16, then sum_p p_f16 * v_f16. Two passes over the
 * positions with a buffer of one score row per call (a test mode, not the fast path). */
void cpu_attention_ggml(const rf_step *step, const rf_attn_dims *d, const float *q, const float *k_cache,
                        const float *v_cache, float *out, int64_t begin, int64_t end) {
    int hd = d->head_dim, kv_dim = d->n_kv_head * hd, q_dim = d->n_head * hd;
    int group = d->n_head / d->n_kv_head;
    float *score = NULL;
    int cap = 0;
    for (int64_t r = begin; r < end; r++) {
        int t = (int)(r / d->n_head), h = (int)(r % d->n_head);
        const int32_t *bt = step->block_table + (int64_t)step->seq_row[t] * step->max_blocks;
        const float *qh = q + (int64_t)t * q_dim + (int64_t)h * hd;
        int g = h / group, n_pos = step->pos[t] + 1;
        if (n_pos > cap) {
            cap = n_pos;
            score = rf_xrealloc(score, (size_t)cap * sizeof(float));
        }
        float m = -INFINITY;
        for (int p = 0; p < n_pos; p++) {
            int64_t slot = (int64_t)bt[p / step->block_size] * step->block_size + p % step->block_size;
            const float *kp = k_cache + slot * kv_dim + (int64_t)g * hd;
            float s = 0.0f;
            for (int i = 0; i < hd; i++) s += round_f16(qh[i]) * kp[i];
            score[p] = s * d->scale;
            m = score[p] > m ? score[p] : m;
        }
        double sum = 0;
        for (int p = 0; p < n_pos; p++) sum += score[p] = expf(score[p] - m);
        float inv = (float)(1.0 / sum);
        float *o = out + (int64_t)t * q_dim + (int64_t)h * hd;
        for (int i = 0; i < hd; i++) o[i] = 0.0f;
        for (int p = 0; p < n_pos; p++) {
            int64_t slot = (int64_t)bt[p / step->block_size] * step->block_size + p % step->block_size;
            const float *vp = v_cache + slot * kv_dim + (int64_t)g * hd;
            float w = round_f16(score[p] * inv);
            for (int i = 0; i < hd; i++) o[i] += w * vp[i];
        }
    }
    free(score);
}
