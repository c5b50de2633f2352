/* kernels.h: the host-callable launchers of the GPU kernels (one .cu file per family).
 *
 * Every launcher enqueues its work on `stream` (a cudaStream_t / hipStream_t passed as void *;
 * NULL is the legacy default stream), never synchronizes, never allocates, and returns 0 or the
 * runtime's error code of the launch (gpuGetLastError), which the backend turns into a message.
 * All pointers are device memory. Shapes follow the CPU twins in backend/cpu/ops.h; each kernel's
 * contract is written above it in its .cu file. Usable from C and from .cu sources.
 */
#ifndef RF_GPU_KERNELS_H
#define RF_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A trivial kernel: fails with "no kernel image" when the device's architecture is not built. */
int rf_gpu_probe(void *stream, int *dev_flag);

/* embed.cu: out[t][:] = dequantize(table row tokens[t]); row_bytes = bytes of one table row. */
int rf_gpu_embed(void *stream, uint32_t type, const void *table, size_t row_bytes, int64_t n_in,
                 const int32_t *tokens, int n, float *out);

/* rmsnorm.cu */
int rf_gpu_rmsnorm(void *stream, float *x, const float *residual, const float *w, int n_rows, int dim,
                   float eps, float *out);

/* rope.cu: rotates q and k of each token (rf_rope), then stores k and v rows at slot[t] of the
 * caches (k_cache / v_cache may be NULL: rotate only) in the row format of kv_type (RF_TYPE_F32,
 * RF_TYPE_F16 rounded to nearest even, or RF_TYPE_Q8_0 / RF_TYPE_Q4_0 with n_kv_head * head_dim %
 * 32 == 0, byte for byte as core/kv_format.h's rf_kv_write_row; anything else: invalid-value
 * error, nothing launched). */
int rf_gpu_rope_store_kv(void *stream, int n_tokens, const int32_t *pos, const int32_t *slot, const rf_rope *rope,
                         int n_head, int n_kv_head, int head_dim, float *q, float *k, const float *v,
                         void *k_cache, void *v_cache, uint32_t kv_type);

/* attention_decode.cu, attention_decode_mma.cu, attention_prefill.cu (common contract:
 * attention_kv.cuh) */
/* k_cache / v_cache: one layer, [n_slots] rows of n_kv_head * head_dim elements in the row format
 * of kv_type (RF_TYPE_F32, RF_TYPE_F16, or RF_TYPE_Q8_0 / RF_TYPE_Q4_0 with head_dim % 32 == 0
 * and 16-byte aligned caches; backend.h's layout, core/kv_format.h). The launchers return an invalid-value
 * error for another type. */
typedef struct {
    int n_tokens, n_head, n_kv_head, head_dim;
    float scale;
    int block_size, max_blocks;
    const int32_t *pos, *seq_row, *block_table;
    const float *q;
    const void *k_cache, *v_cache;
    uint32_t kv_type;
    float *out;
    /* Optional (decode, n_tokens == 1, head_dim % 32 == 0; NULL otherwise): out is also written
     * quantized as matmul.cu's int8 path quantizes an x (per 32 elements q = round(v * 127 / amax)
     * to xq[n_head * head_dim] int8, {d = amax / 127, d * sum q} to xd[n_head * head_dim / 32]
     * float pairs; a block holding inf / NaN gets d = NaN), for the next matvec to copy
     * (matmul_gpu.h, rf_gpu_mm_xq_buffers). */
    void *xq, *xd;
    /* Optional rope fused into the decode kernel (rf_gpu_attention_decode where
     * rf_gpu_attn_decode_rope_ok says so; k_new = NULL otherwise): q is read as the projection
     * wrote it and rotated by `rope` at pos[0] on load (q in memory stays unrotated); k_new, v_new:
     * the token's k (unrotated) and v rows [n_kv_head * head_dim] f32. The kernel rotates k_new,
     * stores both rows at slot[0] of the caches exactly as rf_gpu_rope_store_kv would, and attends
     * to position pos[0] with those stored values. */
    rf_rope rope;
    const float *k_new, *v_new;
    const int32_t *slot;
    /* Decode: heads of a GQA group per block (1, 2, 4 or 8; 0: the long-context choice), a speed
     * choice (rf_gpu_attn_decode_gb); every value gives the same results. */
    int gb;
    /* Decode: 1 runs the tensor-core kernel (where rf_gpu_attn_decode_tc says it is the choice for
     * the context; f16 operands: ~1e-3 relative, see attention_decode_mma.cu; no rope fused, k_new = NULL;
     * q and the caches 16-byte aligned), 0 the f32 kernels. Asked for where it cannot run: the
     * launcher returns an invalid-value error. */
    int tc;
    /* Decode: the longest context this launch is expected at (the host's max_pos + 1; a graph is
     * captured per 256-position bucket), for speed choices that depend on it; 0: none given. */
    int n_pos_hint;
} rf_gpu_attn_args;
/* Largest head_dim the attention kernels take. */
#define RF_GPU_ATTN_MAX_HEAD_DIM 256
/* Decode-style (split-K, flash-decoding): n_split partial passes per (token, GQA group of heads),
 * combined by the last pass of each group to finish (up to 32 splits; more, or after the
 * tensor-core kernel: by a second kernel);
 * scratch holds rf_gpu_attn_decode_scratch(...) bytes and must be zero-filled before its first use
 * (it begins with counters that every call leaves at zero). Correct for any batch and any
 * n_split >= 1. rf_gpu_attn_decode_splits: the split count that fills the GPU
 * (n_sm multiprocessors) in one wave of the kernel that will take the step, for this shape and cache
 * type at a context of about n_pos positions (a speed choice: at most 256, a power of two below
 * RF_GPU_ATTN_TC_MIN_POS, one below 128 positions). */
size_t rf_gpu_attn_decode_scratch(int n_tokens, int n_head, int head_dim, int n_split);
/* Heads per decode block (rf_gpu_attn_args.gb) for a context of about n_pos positions: one below
 * RF_GPU_ATTN_GB1_MAX_POS (more blocks and shorter dependency chains; each head's block reads its
 * group's K/V again, from the L2), else the whole group up to 8. Measured on an H200 (tg128, 1B
 * F16, GQA 4, 2026-11-22), one head against four: 1104 -> 1218 tokens/s at 128 positions, 979 ->
 * 1017 at 4096, 923 -> 940 at 8192, 701 -> 667 at 32768 (that traffic outgrows the L2). */
#define RF_GPU_ATTN_GB1_MAX_POS 16384
int rf_gpu_attn_decode_gb(int n_head, int n_kv_head, int n_pos);
int rf_gpu_attn_decode_splits(int n_tokens, int n_head, int n_kv_head, int head_dim, uint32_t kv_type, int n_pos,
                              int n_sm);
int rf_gpu_attention_decode(void *stream, const rf_gpu_attn_args *a, int n_split, float *scratch);
/* Decode on tensor cores (rf_gpu_attn_args.tc): 1 when it is the choice for a decode at about
 * n_pos positions of these shapes on the current device: CUDA sm_80+, head_dim 64 or 128, 1..16
 * query heads per KV head (2..16 with an f32 cache), and (the default mode 1) n_pos >=
 * RF_GPU_ATTN_TC_MIN_POS, where it is faster than the f32 kernels (H200: level or ahead from 1,024
 * positions, 1.7-10% behind at the first 128; docs/PERF.md). rf_gpu_attention_decode_tc sets the
 * mode: 0 never, 1 at long contexts (and where rf_gpu_attn_decode_tc_rope says so), 2 wherever it
 * can run (tests), < 0 leaves it; returns the
 * previous mode. Not thread-safe (a process-wide switch for tests and benchmarks). */
#define RF_GPU_ATTN_TC_MIN_POS 1024
int rf_gpu_attn_decode_tc(int n_head, int n_kv_head, int head_dim, uint32_t kv_type, int n_pos);
int rf_gpu_attention_decode_tc(int mode);
/* The tensor-core kernel's q8_0 / q4_0 rounds by tensor copies (sm_90, attention_decode_mma.cu):
 * mode 0 never, 1 issued after the grid dependency wait, 2 (the default, or RF_GPU_ATTN_TMA) the
 * first rounds before it; mode < 0 only reads. Returns the previous mode. Not thread-safe (a
 * process-wide switch for tests and benchmarks); every mode gives the same results. */
int rf_gpu_attention_decode_tma(int mode);
/* 1 when, in mode 1 (the default), the tensor-core kernel's rope-fused instance is the choice for a
 * one-token decode with rope fused in, at any context (rf_gpu_attn_decode_rope_ok with tc = 1 decides
 * whether it can take it; rf_gpu_attn_decode_splits sizes one-token steps for it): one query head per
 * KV head and an f16, q8_0 or q4_0 cache. Below RF_GPU_ATTN_TC_MIN_POS it beat the f32 rope-fused
 * kernel (f16, 7B files at 128 positions, H200: +0.3-0.45% tg128 for F16, Q8_0 and Q4_K_M, level for
 * Q4_0; with GQA groups of 4 it lost 3.4%; docs/PERF.md, thirty-fourth session; q8_0 / q4_0 caches,
 * 7B Q4_K_M at 512 positions: +6.6% / +5.0%, fifty-first), from there the plain tensor-core kernel
 * after rope's own launch (7B Q4_K_M, f16: +3.7% at 1k positions, +4% at 8k, +1.7% at 32k;
 * fiftieth; q8_0 / q4_0 +1.2% / +1.5% at 8k, +1.6% / +3.7% at 32k, fifty-first). */
int rf_gpu_attn_decode_tc_rope(int n_head, int n_kv_head, int head_dim, uint32_t kv_type);
/* 1 when rf_gpu_attention_decode can take `rope` fused for these arguments: one token, head_dim %
 * 8 == 0 with 16-byte aligned caches and rows, 0 < n_rot <= head_dim, n_rot even (NEOX: n_rot % 16 == 0); for
 * the tensor-core kernel (a->tc) also q 16-byte aligned and either an f16, q8_0 or q4_0 cache with
 * n_head == n_kv_head and at most 32 splits (its fused combine) or an f16 cache with up to 4 query
 * heads per KV head (its partials merged by the combine kernel); and, when n_sm > 0
 * (a speed choice), the n_split blocks per group fit in one wave of the fused kernel on n_sm
 * multiprocessors. */
int rf_gpu_attn_decode_rope_ok(const rf_gpu_attn_args *a, const rf_rope *rope, const float *k_new, const float *v_new,
                               int n_split, int n_sm);
/* Prefill (query tiles x key tiles with online softmax in shared memory). Correct for any batch. */
int rf_gpu_attention_prefill(void *stream, const rf_gpu_attn_args *a);
/* Prefill on tensor cores (CUDA sm_80+, head_dim 64 or 128, n_head / n_kv_head <= 64, 16-byte
 * aligned caches): f16 operands, f32 accumulation, ~1e-3 relative; other cases take the scalar
 * path. enable: 1 allow (the default), 0 forbid, < 0 leave as is. Returns 1 when the tensor-core
 * path would run for head_dim on the current device. Not thread-safe (a process-wide switch for
 * tests and benchmarks). */
#define RF_GPU_ATTN_TC 1
int rf_gpu_attention_prefill_tc(int enable, int head_dim);

/* elementwise.cu */
int rf_gpu_swiglu(void *stream, const float *gate, const float *up, int64_t n, float *out);
int rf_gpu_scale(void *stream, float *x, int64_t n, float s);
int rf_gpu_causal_mask(void *stream, float *x, int n_rows, int n_cols);
int rf_gpu_softmax_rows(void *stream, float *x, int n_rows, int n_cols);
int rf_gpu_get_rows(void *stream, const float *x, const int32_t *rows, int n_rows, int dim, float *out);
int rf_gpu_copy_block(void *stream, float *cache, size_t block_floats, int src, int dst);

/* sample.cu: runtime/sampler.h's algorithm; scratch holds rf_gpu_sample_scratch(n_vocab) bytes. */
size_t rf_gpu_sample_scratch(int n_vocab);
int rf_gpu_sample(void *stream, const float *logits, int n_vocab, const rf_sample_params *p,
                  const int32_t *history, int n_history, float u, int32_t *token_out, float *logprob_out,
                  void *scratch);

#ifdef __cplusplus
}
#endif

#endif
