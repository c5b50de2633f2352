/* rope.cu: rotary position embedding fused with storing K/V into the paged cache
 * (twin of cpu_rope + cpu_store_kv). */
#include "gpu_port.h"
#include "kernels.h"

/* rope_store_kv_kernel: one block per token t (grid n_tokens).
 *   q: [n_tokens][n_head * head_dim], k: [n_tokens][n_kv_head * head_dim], rotated in place;
 *   v: [n_tokens][n_kv_head * head_dim]; k_cache, v_cache: [n_slots][n_kv_head * head_dim],
 *   row slot[t] receives token t's rotated k and its v (skipped when k_cache is NULL).
 * Pair i (< n_rot/2) of every head is rotated by theta = pos[t] * freq_scale * base^(-2i/n_rot)
 * / freq_factors[i]: NORMAL pairs (2i, 2i+1), NEOX pairs (i, i + n_rot/2); dims >= n_rot pass
 * through. base^(-2i/n_rot) and sin/cos are evaluated in f64 and rounded to f32 (the CPU's
 * powf/sinf/cosf are correctly rounded or nearly so), theta in f32 in the CPU's order, and the
 * rotation without FMA contraction: results match the CPU to an ulp or so of theta (theta grows
 * with the position, so at position 5000 an ulp of theta is ~5e-4 rad).
 * Every element is touched by one thread only: no intra-block ordering is needed.
 * NaN/inf in q/k propagate into their pair; a NaN factor or angle makes the pair NaN. */
static __global__ void rope_store_kv_kernel(const int32_t *pos, const int32_t *slot, int mode, int n_rot, float base,
                                            float freq_scale, const float *freq_factors, int n_head, int n_kv_head,
                                            int head_dim, float *q, float *k, const float *v, float *k_cache,
                                            float *v_cache) {
    const int t = blockIdx.x;
    const int half = n_rot / 2;
    const float p = (float)pos[t];
    const int n_pairs = (n_head + n_kv_head) * half;
    const int kv_dim = n_kv_head * head_dim;
    float *kc = k_cache ? k_cache + (int64_t)slot[t] * kv_dim : NULL;
    float *vc = v_cache ? v_cache + (int64_t)slot[t] * kv_dim : NULL;
    float *qt = q + (int64_t)t * n_head * head_dim;
    float *kt = k + (int64_t)t * kv_dim;
    for (int idx = threadIdx.x; idx < n_pairs; idx += blockDim.x) {
        const int hh = idx / half, i = idx % half;
        const float freq = (float)pow((double)base, (double)(-2.0f * (float)i / (float)n_rot));
        float theta = p * freq_scale * freq;
        if (freq_factors) theta = theta / freq_factors[i];
        const float c = (float)cos((double)theta), s = (float)sin((double)theta);
        const bool is_k = hh >= n_head;
        float *vec = is_k ? kt + (int64_t)(hh - n_head) * head_dim : qt + (int64_t)hh * head_dim;
        const int a = mode == RF_ROPE_NEOX ? i : 2 * i;
        const int b = mode == RF_ROPE_NEOX ? i + half : 2 * i + 1;
        const float x0 = vec[a], x1 = vec[b];
        const float y0 = RF_SUB(RF_MUL(x0, c), RF_MUL(x1, s));
        const float y1 = RF_ADD(RF_MUL(x0, s), RF_MUL(x1, c));
        vec[a] = y0;
        vec[b] = y1;
        if (is_k && kc) {
            float *kd = kc + (int64_t)(hh - n_head) * head_dim;
            kd[a] = y0;
            kd[b] = y1;
        }
    }
    /* dims not rotated (>= n_rot) of k, and all of v, go to the cache as they are */
    if (kc) {
        for (int idx = threadIdx.x; idx < kv_dim; idx += blockDim.x) {
            if (idx % head_dim >= 2 * half) kc[idx] = kt[idx];
            vc[idx] = v[(int64_t)t * kv_dim + idx];
        }
    }
}

extern "C" int rf_gpu_rope_store_kv(void *stream, int n_tokens, const int32_t *pos, const int32_t *slot,
                                    const rf_rope *rope, int n_head, int n_kv_head, int head_dim, float *q, float *k,
                                    const float *v, float *k_cache, float *v_cache) {
    if (n_tokens <= 0) return 0;
    rope_store_kv_kernel<<<n_tokens, 256, 0, (gpuStream_t)stream>>>(
        pos, slot, rope->mode, rope->n_rot, rope->base, rope->freq_scale, rope->freq_factors, n_head, n_kv_head,
        head_dim, q, k, v, k_cache, v_cache);
    return (int)gpuGetLastError();
}
