/* attention_decode.cuh: what the decode attention's two kernel families share
 * (attention_decode.cu: the split-K kernels in f32, the combine, the launch choices;
 * attention_decode_mma.cu: the kernel on tensor cores): the block sizes and shared memory of a
 * block's end states, the end of a decode block (its warps merged into a partial or, with one
 * split, into the output and its int8 copy), the fused combine, and the tensor-core kernel's entry
 * points for the launch choices. The common contract is attention_kv.cuh's. */
#ifndef RF_ATTENTION_DECODE_CUH
#define RF_ATTENTION_DECODE_CUH

#include "attention_kv.cuh"
#include "quantize32.cuh"

/* Threads of a split-K decode block (a multiple of every warp size). */
#define DEC_THREADS 128
#define DEC_MAX_WARPS (DEC_THREADS / 32) /* the smallest warp size any target has is 32 */

static inline size_t dec_smem(int hd, int gb) { return sizeof(float) * (size_t)DEC_MAX_WARPS * gb * (hd + 2); }

/* The factor that rescales an online-softmax state of maximum m to the maximum M >= m when states
 * merge: an empty state (m = -inf, l = 0) contributes nothing; a NaN l or acc stays NaN. */
static __device__ __forceinline__ float dec_scale(float m, float M) { return m == -INFINITY ? 0.0f : expf(m - M); }

/* Counters of the fused combine at the start of the decode scratch (fixed place and size, so
 * calls with other token or split counts never write partials over them). */
#define DEC_COUNTERS 4096
#define DEC_COUNTER_BYTES (DEC_COUNTERS * sizeof(int))
/* The fused combine reads every split's partial in one thread: used up to this many splits. */
#define DEC_FUSED_MAX_SPLITS 32

/* Moves the n bytes at p into L2, one prefetch per 128-byte line (CUDA; a no-op elsewhere). */
static __device__ __forceinline__ void dec_prefetch_l2(const void *p, int n) {
#if defined(__CUDA_ARCH__)
    const uintptr_t a = (uintptr_t)p, end = a + (uintptr_t)n;
    for (uintptr_t l = a & ~(uintptr_t)127; l < end; l += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(l));
#else
    (void)p, (void)n;
#endif
}

/* The end of a decode block (attn_dec_kernel, attn_dec_mma_kernel). dsm holds each of the nw
 * warps' softmax state for the block's nh heads h0 .. h0 + nh - 1 of token t, [warp][j][2 + hd]
 * with j < gbs: m (natural-log units), l, acc[hd] (a warp with no positions: -inf, 0, 0), complete
 * (after a barrier). The warps are merged per head; with the fused combine (fused) and one split
 * the block writes the output o = acc / L (and its int8 copy, a.xq) itself and returns 1; else it
 * writes its partial (m, l, acc) to part[((t * n_head + h) * n_split + s) * (hd + 2)] (no positions:
 * m = -inf, l = 0, acc = 0) and returns 0. */
static __device__ __forceinline__ bool dec_block_out(const rf_gpu_attn_args &a, const float *dsm, int gbs, int nw,
                                                     int nh, int hd, int t, int h0, int s, int n_split, float *part,
                                                     bool fused) {
    const bool direct = fused && n_split == 1;
    for (int i = threadIdx.x; i < nh * hd; i += blockDim.x) {
        const int j = i / hd, d = i % hd;
        float M = -INFINITY;
        for (int w = 0; w < nw; w++) M = fmaxf(M, dsm[((int64_t)w * gbs + j) * (hd + 2)]);
        float L = 0.0f, v = 0.0f;
        for (int w = 0; w < nw; w++) {
            const float *ww = dsm + ((int64_t)w * gbs + j) * (hd + 2);
            const float c = dec_scale(ww[0], M);
            L += ww[1] * c;
            v += ww[2 + d] * c;
        }
        if (direct) { /* what the combine below computes from the one partial, bit for bit */
            const int64_t e = ((int64_t)t * a.n_head + h0 + j) * hd + d;
            const float o = v / L;
            a.out[e] = o;
            if (a.xq) rf_quantize32(o, e, (int8_t *)a.xq, (float2 *)a.xd);
            continue;
        }
        float *dst = part + (((int64_t)t * a.n_head + h0 + j) * n_split + s) * (hd + 2);
        dst[2 + d] = L != 0.0f ? v : 0.0f;
        if (d == 0) {
            dst[0] = L != 0.0f ? M : -INFINITY;
            dst[1] = L;
        }
    }
    return direct;
}

/* dec_block_out's direct case with one head per block (GB == 1, one split): thread d < hd writes dim
 * d, merging the nw <= MAXW warps' states (wstride floats apart) in unrolled, predicated loops. The
 * same operations in the same order as dec_block_out, so the same outputs bit for bit, without its
 * general loops over heads and warps and its divisions by the runtime hd (H200 tg128, same run: 1B
 * Q4_K_M +1.5%, Q8_0 +1.1%, F16 +0.7%; the tensor-core RK instance, 7B Q4_K_M +0.5%; docs/PERF.md,
 * forty-ninth and fiftieth sessions). Needs hd <= blockDim.x and, where xq is written, hd % 32 == 0
 * (whole warps reach rf_quantize32). */
template <int MAXW>
static __device__ __forceinline__ void dec_block_out1(const rf_gpu_attn_args &a, const float *dsm, int wstride, int nw,
                                                      int hd, int t, int h0) {
    const int d = threadIdx.x;
    if (d >= hd) return; /* whole warps where xq is written: hd % 32 == 0 */
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < MAXW; w++)
        if (w < nw) M = fmaxf(M, dsm[w * wstride]);
    float L = 0.0f, v = 0.0f;
#pragma unroll
    for (int w = 0; w < MAXW; w++)
        if (w < nw) {
            const float *ww = dsm + w * wstride;
            const float c = dec_scale(ww[0], M);
            L += ww[1] * c;
            v += ww[2 + d] * c;
        }
    const int64_t e = ((int64_t)t * a.n_head + h0) * hd + d;
    const float o = v / L;
    a.out[e] = o;
    if (a.xq) rf_quantize32(o, e, (int8_t *)a.xq, (float2 *)a.xd);
}

/* Fused combine: the last of the n_split blocks of this (token, head chunk) to finish (counter:
 * its counter) merges the partials (as attn_combine_kernel). Each block publishes its partial
 * (fence) before counting itself; the last one resets the counter for the next launch (graph
 * replays). Every thread of the block calls it. */
static __device__ __forceinline__ void dec_combine_last(const rf_gpu_attn_args &a, int nh, int hd, int t, int h0,
                                                        int n_split, const float *part, int *counter) {
    __shared__ int last_s;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const int done = atomicAdd(counter, 1);
        last_s = done == n_split - 1;
        if (last_s) *counter = 0;
    }
    __syncthreads();
    if (!last_s) return;
    __threadfence();
    const int stride = hd + 2;
    for (int i = threadIdx.x; i < nh * hd; i += blockDim.x) {
        const int j = i / hd, d = i % hd;
        const volatile float *p0 = part + ((int64_t)t * a.n_head + h0 + j) * n_split * stride; /* not from L1 */
        float M = -INFINITY;
        for (int q = 0; q < n_split; q++) M = fmaxf(M, p0[(int64_t)q * stride]);
        float L = 0.0f, v = 0.0f;
        for (int q = 0; q < n_split; q++) {
            const float w = expf(p0[(int64_t)q * stride] - M);
            L += p0[(int64_t)q * stride + 1] * w;
            v += p0[(int64_t)q * stride + 2 + d] * w;
        }
        const int64_t e = ((int64_t)t * a.n_head + h0 + j) * hd + d;
        const float o = v / L;
        a.out[e] = o;
        if (a.xq) rf_quantize32(o, e, (int8_t *)a.xq, (float2 *)a.xd);
    }
}

/* The most query heads per KV head the tensor-core kernel's rope-fused instance takes (its q_rot
 * rows: one per warp of DM_THREADS). */
#define DM_RK_MAX_G 4
/* The tensor-core kernel (attention_decode_mma.cu) for the launch choices: whether it can run
 * these shapes on this device; its blocks resident per multiprocessor (rk: the rope-fused
 * instance); its launch (counters: the fused combine's, with the rope-fused instance). */
int rf_attn_dec_tc_capable(int n_head, int n_kv_head, int hd, uint32_t kv_type);
int rf_attn_dec_tc_resident(uint32_t kv_type, int hd, int G, bool rk);
int rf_attn_dec_tc_launch(gpuStream_t st, const rf_gpu_attn_args *a, int n_split, float *part, int *counters);

#endif
