/* rope.cu: rotary position embedding fused with storing K/V into the paged cache
 * (twin of cpu_rope + cpu_store_kv). */
#include "core/dtype.h"
#include "core/kv_format.h"
#include "gpu_port.h"
#include "kernels.h"
#include "kv_quant.cuh"
#include "rope_device.cuh"

/* rope_store_kv_kernel: grid (n_tokens, ceil((n_head + n_kv_head) / ROPE_HPB)); block (t, y)
 * takes heads y * ROPE_HPB .. (+ROPE_HPB) of token t, counting q heads first, then k heads.
 *   q: [n_tokens][n_head * head_dim], k: [n_tokens][n_kv_head * head_dim], rotated in place;
 *   v: [n_tokens][n_kv_head * head_dim]; k_cache, v_cache: [n_slots][n_kv_head * head_dim] of
 *   T (float, or __half written with __float2half_rn: round to nearest even, overflow to inf, NaN
 *   stays NaN, as the CPU's rf_fp32_to_fp16), row slot[t] receives token t's rotated k and its v
 *   (skipped when k_cache is NULL; q8_0 and q4_0 caches are written by kv_store_q8_kernel /
 *   kv_store_q4_kernel after it).
 * Pair i (< n_rot/2) of every head is rotated by theta = pos[t] * freq_scale * base^(-2i/n_rot)
 * / freq_factors[i]: NORMAL pairs (2i, 2i+1), NEOX pairs (i, i + n_rot/2); dims >= n_rot pass
 * through. base^(-2i/n_rot) and sin/cos are evaluated in f64 and rounded to f32 (the CPU's
 * powf/sinf/cosf are correctly rounded or nearly so), theta in f32 in the CPU's order, and the
 * rotation without FMA contraction: results match the CPU to an ulp or so of theta (theta grows
 * with the position, so at position 5000 an ulp of theta is ~5e-4 rad). The n_rot/2 (cos, sin)
 * pairs are computed once per block into shared memory (f64 sin/cos once per pair, not once per
 * pair and head), then every head of the block is rotated from the table.
 * Every element is touched by one thread only: no intra-block ordering is needed.
 * A programmatic dependent launch: the table is computed before waiting for the previous kernel.
 * NaN/inf in q/k propagate into their pair; a NaN factor or angle makes the pair NaN.
 * n_rot <= 2 * ROPE_MAX_HALF. */
#define ROPE_HPB 8
#define ROPE_MAX_HALF 256
static __device__ __forceinline__ void kv_put(float *p, float x) { *p = x; }
static __device__ __forceinline__ void kv_put(__half *p, float x) { *p = __float2half_rn(x); }

template <typename T>
static __global__ void rope_store_kv_kernel(const int32_t *pos, const int32_t *slot, int mode, int n_rot, float base,
                                            float freq_scale, const float *freq_factors, int n_head, int n_kv_head,
                                            int head_dim, float *q, float *k, const float *v, T *k_cache,
                                            T *v_cache) {
    __shared__ float cs_s[ROPE_MAX_HALF], sn_s[ROPE_MAX_HALF];
    const int t = blockIdx.x;
    const int half = n_rot / 2;
    const float p = (float)pos[t];
    const int h_lo = blockIdx.y * ROPE_HPB, h_hi = min(h_lo + ROPE_HPB, n_head + n_kv_head);
    const int kv_dim = n_kv_head * head_dim;
    T *kc = k_cache ? k_cache + (int64_t)slot[t] * kv_dim : NULL;
    T *vc = v_cache ? v_cache + (int64_t)slot[t] * kv_dim : NULL;
    float *qt = q + (int64_t)t * n_head * head_dim;
    float *kt = k + (int64_t)t * kv_dim;
    rf_grid_dep_launch(); /* the attention may launch and wait for us */
    for (int i = threadIdx.x; i < half; i += blockDim.x)
        rope_cos_sin(p, i, n_rot, base, freq_scale, freq_factors, &cs_s[i], &sn_s[i]);
    rf_grid_dep_wait(); /* q, k, v come from the previous kernel (pos, slot and the table do not) */
    __syncthreads();
    const int n_pairs = (h_hi - h_lo) * half;
    for (int idx = threadIdx.x; idx < n_pairs; idx += blockDim.x) {
        const int hh = h_lo + idx / half, i = idx % half;
        const float c = cs_s[i], s = sn_s[i];
        const bool is_k = hh >= n_head;
        float *vec = is_k ? kt + (int64_t)(hh - n_head) * head_dim : qt + (int64_t)hh * head_dim;
        const int a = mode == RF_ROPE_NEOX ? i : 2 * i;
        const int b = mode == RF_ROPE_NEOX ? i + half : 2 * i + 1;
        const float x0 = vec[a], x1 = vec[b];
        const float y0 = rope_lo(x0, x1, c, s);
        const float y1 = rope_hi(x0, x1, c, s);
        vec[a] = y0;
        vec[b] = y1;
        if (is_k && kc) {
            T *kd = kc + (int64_t)(hh - n_head) * head_dim;
            kv_put(kd + a, y0);
            kv_put(kd + b, y1);
        }
    }
    /* dims not rotated (>= n_rot) of this block's k heads, and their v, go to the cache as they are */
    const int k_lo = max(h_lo, n_head) - n_head, k_hi = h_hi - n_head;
    if (kc && k_hi > k_lo) {
        for (int idx = k_lo * head_dim + threadIdx.x; idx < k_hi * head_dim; idx += blockDim.x) {
            if (idx % head_dim >= 2 * half) kv_put(kc + idx, kt[idx]);
            kv_put(vc + idx, v[(int64_t)t * kv_dim + idx]);
        }
    }
}

/* kv_store_q8_kernel: grid (n_tokens, ceil(kv_dim / KVQ_THREADS)), KVQ_THREADS threads (a
 * multiple of 32: every aligned group of 32 lanes holds one block, for any warp size >= 32).
 * Writes row slot[t] of the q8_0 caches (core/kv_format.h: codes at byte e, the binary16 scale of
 * block b at byte kv_dim + 2b, rows of rb bytes) from k[t] and v[t] with rf_kv_write_row's f32
 * operations in the same order (amax, d = amax / 127, its binary16 rounding, id = 1 / d,
 * roundf(x * id) clamped to +-127; a block with a non-finite element or an overflowing scale: q = 0,
 * d = NaN), so the bytes equal the CPU's. kv_dim % 32 == 0; the row's padding is not written
 * (never read). A programmatic dependent launch: k and v come from the previous kernel. */
#define KVQ_THREADS 256
static __device__ __forceinline__ void kvq_block(float x, int e, int kv_dim, uint8_t *row) {
    float amax = fabsf(x);
    int bad = kvq_nonfinite(x);
    for (int off = 16; off > 0; off >>= 1) {
        amax = fmaxf(amax, RF_SHFL_XOR(amax, off));
        bad |= RF_SHFL_XOR(bad, off);
    }
    const kvq_scale sc = kvq_scale_of(amax, bad);
    row[e] = kvq_code(x, sc);
    if (e % 32 == 0) {
        row[kv_dim + e / 16] = (uint8_t)(sc.bits & 0xffu);
        row[kv_dim + e / 16 + 1] = (uint8_t)(sc.bits >> 8);
    }
}
static __global__ void __launch_bounds__(KVQ_THREADS)
    kv_store_q8_kernel(const int32_t *slot, int kv_dim, int64_t rb, const float *k, const float *v, uint8_t *k_cache,
                       uint8_t *v_cache) {
    const int t = blockIdx.x, e = blockIdx.y * blockDim.x + threadIdx.x;
    rf_grid_dep_launch();
    const int64_t row = (int64_t)slot[t] * rb; /* slot is the step's, not the previous kernel's */
    rf_grid_dep_wait();
    if (e >= kv_dim) return; /* whole groups of 32 (kv_dim % 32 == 0): no shuffle partner leaves */
    kvq_block(k[(int64_t)t * kv_dim + e], e, kv_dim, k_cache + row);
    kvq_block(v[(int64_t)t * kv_dim + e], e, kv_dim, v_cache + row);
}

/* kv_store_q4_kernel: kv_store_q8_kernel's grid and contract for the q4_0 caches (core/kv_format.h:
 * codes packed eight to a little-endian word at byte e / 2, the binary16 scale of block b at byte
 * kv_dim / 2 + 2b), with rf_kv_write_row's q4_0 operations: m = the first element of the largest
 * |x|, d = m / -8, its binary16 rounding, id = 1 / d, min(15, (int)(x * id + 8.5f)); a block with a
 * non-finite element or an overflowing scale: codes 8, d = NaN. The eight lanes of a word OR their
 * codes together (xor-shuffles within the aligned group of 8); its first lane stores it. */
static __device__ __forceinline__ void kvq4_block(float x, int e, int kv_dim, uint8_t *row) {
    kvq4_max c = {fabsf(x), x, e % 32};
    int bad = kvq_nonfinite(x);
    for (int off = 16; off > 0; off >>= 1) {
        const kvq4_max o = {RF_SHFL_XOR(c.a, off), RF_SHFL_XOR(c.m, off), RF_SHFL_XOR(c.i, off)};
        if (kvq4_better(c, o)) c = o;
        bad |= RF_SHFL_XOR(bad, off);
    }
    const kvq_scale sc = kvq4_scale_of(c.a, c.m, bad);
    uint32_t w = kvq4_code(x, sc) << kvq4_shift(e % 8);
    for (int off = 1; off < 8; off <<= 1) w |= RF_SHFL_XOR(w, off);
    if (e % 8 == 0) *(uint32_t *)(row + e / 2) = w;
    if (e % 32 == 0) *(unsigned short *)(row + kv_dim / 2 + e / 16) = sc.bits;
}
static __global__ void __launch_bounds__(KVQ_THREADS)
    kv_store_q4_kernel(const int32_t *slot, int kv_dim, int64_t rb, const float *k, const float *v, uint8_t *k_cache,
                       uint8_t *v_cache) {
    const int t = blockIdx.x, e = blockIdx.y * blockDim.x + threadIdx.x;
    rf_grid_dep_launch();
    const int64_t row = (int64_t)slot[t] * rb;
    rf_grid_dep_wait();
    if (e >= kv_dim) return;
    kvq4_block(k[(int64_t)t * kv_dim + e], e, kv_dim, k_cache + row);
    kvq4_block(v[(int64_t)t * kv_dim + e], e, kv_dim, v_cache + row);
}

extern "C" int rf_gpu_rope_store_kv(void *stream, int n_tokens, const int32_t *pos, const int32_t *slot,
                                    const rf_rope *rope, int n_head, int n_kv_head, int head_dim, float *q, float *k,
                                    const float *v, void *k_cache, void *v_cache, uint32_t kv_type) {
    if (n_tokens <= 0) return 0;
    const int kv_dim = n_kv_head * head_dim;
    if (rope->n_rot / 2 > ROPE_MAX_HALF || !rf_kv_type_ok(kv_type) || !rf_kv_row_bytes(kv_type, kv_dim)) {
#if RF_GPU_HIP
        return (int)hipErrorInvalidValue;
#else
        return (int)cudaErrorInvalidValue;
#endif
    }
    dim3 grid((unsigned)n_tokens, (unsigned)((n_head + n_kv_head + ROPE_HPB - 1) / ROPE_HPB));
    gpuError_t err;
    /* q8_0 / q4_0: rotate only, then quantize the rotated k and v rows per 32 elements into the caches */
    const bool quant = kv_type == RF_TYPE_Q8_0 || kv_type == RF_TYPE_Q4_0;
    if (kv_type == RF_TYPE_F16) {
        void (*fn)(const int32_t *, const int32_t *, int, int, float, float, const float *, int, int, int, float *,
                   float *, const float *, __half *, __half *) = rope_store_kv_kernel<__half>;
        RF_LAUNCH_PDL(err, fn, grid, dim3(256), 0, (gpuStream_t)stream, pos, slot, rope->mode, rope->n_rot, rope->base,
                      rope->freq_scale, rope->freq_factors, n_head, n_kv_head, head_dim, q, k, v, (__half *)k_cache,
                      (__half *)v_cache);
    } else {
        void (*fn)(const int32_t *, const int32_t *, int, int, float, float, const float *, int, int, int, float *,
                   float *, const float *, float *, float *) = rope_store_kv_kernel<float>;
        RF_LAUNCH_PDL(err, fn, grid, dim3(256), 0, (gpuStream_t)stream, pos, slot, rope->mode, rope->n_rot, rope->base,
                      rope->freq_scale, rope->freq_factors, n_head, n_kv_head, head_dim, q, k, v,
                      quant ? NULL : (float *)k_cache, quant ? NULL : (float *)v_cache);
    }
    if (err == gpuSuccess && quant && k_cache) {
        void (*fq)(const int32_t *, int, int64_t, const float *, const float *, uint8_t *, uint8_t *) =
            kv_type == RF_TYPE_Q4_0 ? kv_store_q4_kernel : kv_store_q8_kernel;
        const int64_t rb = (int64_t)rf_kv_row_bytes(kv_type, kv_dim);
        dim3 gq((unsigned)n_tokens, (unsigned)((kv_dim + KVQ_THREADS - 1) / KVQ_THREADS));
        RF_LAUNCH_PDL(err, fq, gq, dim3(KVQ_THREADS), 0, (gpuStream_t)stream, slot, kv_dim, rb, k, v,
                      (uint8_t *)k_cache, (uint8_t *)v_cache);
    }
    return (int)err;
}
