/* backend.h: the interface every compute backend implements. The forward pass
 * (runtime/forward.c) is written once against it.
 *
 * Memory. A backend owns its memory; pointers it hands out ("backend memory") are only passed
 * back to its own ops and never dereferenced by the caller. For the CPU backend they are host
 * pointers; for a GPU backend they are device pointers. Activations are f32, row-major,
 * rows contiguous (a [n][d] tensor has element (i, j) at i*d + j).
 *
 * Ordering. Ops, uploads and downloads execute in issue order (one stream). Ops never return
 * errors directly: a backend records the first failure and reports it from sync(), so a whole
 * decode step can be enqueued (and captured as a graph) without host round trips. download()
 * is the only call that waits; a decode step downloads exactly one thing, the sampled token id.
 *
 * Graphs. Every value an op reads that changes from step to step (token ids, positions, cache
 * slots, block tables, sampling randomness) is read from backend memory or is a scalar that
 * stays fixed for a given batch shape; so a backend may capture a step's op sequence once
 * (graph_begin/graph_end) and replay it (graph_launch) after uploading the new step data.
 */
#ifndef RF_BACKEND_H
#define RF_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rf_backend rf_backend;

/* A weight matrix (or vector: n_out == 1) in backend memory, rows of `type` (dtype.h).
 * Row o holds n_in elements; rows are contiguous. */
typedef struct {
    const char *name; /* tensor name, for messages */
    uint32_t type;
    int64_t n_out, n_in;
    const void *host; /* the bytes in the GGUF mapping */
    void *data;       /* backend memory (NULL for an absent optional weight) */
    uint32_t layout;  /* 0: data holds the GGUF rows; else a backend-specific rearrangement that
                         only that backend's matmul reads (set by ops->prepare_matmul_weight) */
} rf_weight;

enum { RF_ROPE_NORMAL = 0, RF_ROPE_NEOX = 2 };

/* Rotary embedding. Dimension pair i (0 <= i < n_rot/2) of a head at position p is rotated by
 * theta = p * freq_scale * base^(-2i/n_rot) / freq_factors[i] (freq_factors NULL -> 1).
 * NORMAL rotates adjacent pairs (2i, 2i+1); NEOX rotates (i, i + n_rot/2). Dimensions at
 * n_rot and above pass through unchanged. */
typedef struct {
    int mode;
    int n_rot;
    float base;
    float freq_scale;
    const float *freq_factors; /* backend memory, n_rot/2 floats, or NULL */
} rf_rope;

/* One forward step's batch description. Scalars are host values; arrays are backend memory.
 * Token t belongs to the sequence whose block-table row is seq_row[t]; it sits at position
 * pos[t] and its K/V go to cache slot slot[t] (= block * block_size + pos % block_size).
 * Attention for token t covers positions 0..pos[t] of its sequence, read through
 * block_table[seq_row[t] * max_blocks + p / block_size]. K/V of every token of the batch are
 * stored before attention runs, so tokens of one sequence in one batch see each other causally.
 * out_rows[0..n_out) are the token indices whose logits the step produces, in that order;
 * out_all: they are all of them (n_out == n_tokens, out_rows[t] == t). */
typedef struct {
    int n_tokens;
    int n_seq_rows;
    int max_blocks;
    int block_size;
    int n_out;
    int max_pos; /* host hint: max over pos[]; kernels must not depend on it for correctness */
    int32_t *tokens;
    int32_t *pos;
    int32_t *slot;
    int32_t *seq_row;
    int32_t *block_table;
    int32_t *out_rows;
    bool out_all;
} rf_step;

/* Attention geometry and the K/V cache layout.
 *
 * K/V cache. The K and V caches of one layer are two arrays of [n_slots] rows, untyped backend
 * memory (void *); a row holds the kv_dim = n_kv_head * head_dim elements of one position (element
 * (slot, g, i) is element g * head_dim + i of row slot) in the row format of kv_type, and takes
 * rf_kv_row_bytes(kv_type, kv_dim) bytes (core/kv_format.h: f32, f16 as IEEE binary16 written
 * with round-to-nearest-even, q8_0: int8 codes and a binary16 scale per 32 elements, or q4_0:
 * 4-bit codes and a binary16 scale per 32 elements, rows padded to 16 bytes); all arithmetic on
 * cached values is f32, on the exactly widened / scaled element. The runtime places layer l at byte offset l * n_slots * row_bytes of one allocation,
 * n_slots a multiple of the block size (32), so each layer's cache is as aligned as the
 * allocation is (GPU kernels use 16-byte loads when head_dim is a multiple of 8 and fall back to
 * narrower ones otherwise). Slots nobody wrote may hold anything; only visible positions are
 * ever read.
 * Query head h reads KV head h / (n_head / n_kv_head) (grouped-query attention). */
typedef struct {
    int n_head;
    int n_kv_head;
    int head_dim;
    float scale;      /* usually 1/sqrt(head_dim) */
    uint32_t kv_type; /* RF_TYPE_F32 (0), RF_TYPE_F16, RF_TYPE_Q8_0 or RF_TYPE_Q4_0 (head_dim % 32 == 0) */
} rf_attn_dims;

/* Sampling parameters (see runtime/sampler.h for the algorithm; every backend implements the
 * same one). */
typedef struct {
    float temp;           /* <= 0: greedy (argmax; lowest id wins ties) */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    float freq_penalty;   /* 0: off */
    float presence_penalty;
    int penalty_last_n;
    uint64_t seed;
} rf_sample_params;

/* One output of a matmul op: y [n][w->n_out] from weight w and optional f32 bias [w->n_out]. */
typedef struct {
    const rf_weight *w;
    const rf_weight *bias;
    float *y;
} rf_mm_out;

typedef struct rf_graph rf_graph;

/* Most bytes download_start takes (a sampled token, its log-probability). */
#define RF_DOWNLOAD_ASYNC_MAX 64

typedef struct rf_backend_ops {
    const char *name;
    void (*destroy)(rf_backend *be);
    /* One line for logs and `bench`, e.g. "avx512, 2 threads" or "NVIDIA H100 80GB HBM3". */
    const char *(*describe)(rf_backend *be);

    /* ---- memory ---- */
    /* NULL and an error naming the size when it does not fit. */
    void *(*alloc)(rf_backend *be, size_t bytes);
    void (*free)(rf_backend *be, void *p);
    /* Makes `bytes` of a weight available to ops; CPU may return `host` itself. */
    void *(*upload_weight)(rf_backend *be, const void *host, size_t bytes);
    void (*free_weight)(rf_backend *be, void *p);
    /* Optional (NULL: none). Called once after upload_weight for a weight that only the matmul op
     * reads (never embed / rmsnorm); may rearrange w->data in place into a faster layout and
     * record it in w->layout. Returns -1 (error set) on failure. */
    int (*prepare_matmul_weight)(rf_backend *be, rf_weight *w);
    void (*upload)(rf_backend *be, void *dst, const void *src, size_t bytes);
    /* Waits for all prior work; returns -1 (error set) if any op failed. */
    int (*download)(rf_backend *be, void *dst, const void *src, size_t bytes);
    /* A download that does not wait for work enqueued after it: download_start enqueues the copy
     * of `bytes` (<= RF_DOWNLOAD_ASYNC_MAX) of src after all prior work and returns at once;
     * download_wait waits for that copy only and writes the bytes to dst. One at a time. Both
     * return -1 (error set) if an op failed. */
    int (*download_start)(rf_backend *be, const void *src, size_t bytes);
    int (*download_wait)(rf_backend *be, void *dst);
    int (*sync)(rf_backend *be);
    /* Free device memory in bytes (for sizing the KV pool); 0 when unknown. */
    size_t (*mem_free)(rf_backend *be);
    /* K/V cache type a context gets unless it asks for one (RF_TYPE_F32 or RF_TYPE_F16). */
    uint32_t kv_type_default;

    /* ---- ops ---- see backend/cpu/ops.h for each op's full contract (the CPU twins) */
    void (*embed)(rf_backend *be, const rf_weight *table, const int32_t *tokens, int n, float *out);
    /* x += residual (if residual != NULL); out = x / rms(x) * w, per row of dim elements. */
    void (*rmsnorm)(rf_backend *be, float *x, const float *residual, const rf_weight *w, int n_rows,
                    int dim, float eps, float *out);
    /* The matmul family, one op so a backend can read x once, launch once per weight type and
     * fold the RMSNorm before and the residual add after into the product. For i < n_outs:
     *   outs[i].y[t][:] (+)= xin[t][:] * outs[i].w^T (+ outs[i].bias)
     * xin = x [n][n_in], or, when norm != NULL, x[t] / sqrt(mean(x[t]^2) + eps) * norm (RMSNorm);
     * accumulate: y += (the residual add), else y =. All weights share n_in. scratch: backend
     * memory of n * n_in floats the backend may use to materialise xin (only when norm != NULL).
     * x must not alias any y. */
    void (*matmul)(rf_backend *be, int n_outs, const rf_mm_out *outs, const float *x, int n, const rf_weight *norm,
                   float eps, bool accumulate, float *scratch);
    /* Rotates q [n][n_head*head_dim] in place and k [n][n_kv_head*head_dim], then writes k and v
     * rows, converted to dims->kv_type, to k_cache/v_cache (one layer, layout above) at
     * step->slot[t]. */
    void (*rope_store_kv)(rf_backend *be, const rf_step *step, const rf_rope *rope,
                          const rf_attn_dims *dims, float *q, float *k, const float *v,
                          void *k_cache, void *v_cache);
    /* out [n][n_head*head_dim] = softmax(q k^T * scale) v over each token's visible positions,
     * K and V read from caches of dims->kv_type (widened to f32). */
    void (*attention)(rf_backend *be, const rf_step *step, const rf_attn_dims *dims, const float *q,
                      const void *k_cache, const void *v_cache, float *out);
    /* rope_store_kv, then attention, as one op (a backend may fuse them): the results are the
     * caches and out; q and k may be left rotated or not. */
    void (*rope_attention)(rf_backend *be, const rf_step *step, const rf_rope *rope, const rf_attn_dims *dims,
                           float *q, float *k, const float *v, void *k_cache, void *v_cache, float *out);
    /* out[i] = silu(gate[i]) * up[i] for i < n. */
    void (*swiglu)(rf_backend *be, const float *gate, const float *up, int64_t n, float *out);
    /* The feed-forward's gated half, one op so that a backend can fold the swiglu into the matmul:
     *   out[t][:] = silu(xin[t] * gate^T) * (xin[t] * up^T)
     * with xin, norm, eps and scratch as in matmul; gate and up share n_in and n_out (n_ff).
     * up_out: n * n_ff floats the op may use (matmul of up, then swiglu, leaves xin * up^T there).
     * out and up_out must not alias x or each other. Results as matmul of both, then swiglu. */
    void (*matmul_swiglu)(rf_backend *be, const rf_weight *gate, const rf_weight *up, const float *x, int n,
                          const rf_weight *norm, float eps, float *out, float *up_out, float *scratch);
    /* out[r][:] = x[rows[r]][:] for r < n_rows (rows in backend memory). */
    void (*get_rows)(rf_backend *be, const float *x, const int32_t *rows, int n_rows, int dim, float *out);
    /* Copies cache block src to block dst of one layer's K or V cache (copy-on-write): bytes
     * [src * block_bytes, +block_bytes) to [dst * block_bytes, ...), src != dst; block_bytes =
     * block_size * row bytes. An exact byte copy, whatever the element type. */
    void (*copy_block)(rf_backend *be, void *cache, size_t block_bytes, int src, int dst);
    /* Samples one token from logits [n_vocab] into *token_out (backend memory). history: the
     * last n_history tokens of the sequence (backend memory) for penalties; u: a uniform
     * random number in [0,1) drawn by the caller's seeded generator. logprob_out (backend memory,
     * may be NULL) receives the chosen token's log-probability under the model (raw logits). */
    void (*sample)(rf_backend *be, const float *logits, int n_vocab, const rf_sample_params *p,
                   const int32_t *history, int n_history, float u, int32_t *token_out,
                   float *logprob_out);

    /* ---- graphs (optional: NULL when unsupported) ---- */
    int (*graph_begin)(rf_backend *be);
    int (*graph_end)(rf_backend *be, rf_graph **out);
    int (*graph_launch)(rf_backend *be, rf_graph *g);
    void (*graph_free)(rf_backend *be, rf_graph *g);
} rf_backend_ops;

struct rf_backend {
    const rf_backend_ops *ops;
    void *impl;
    /* How many host round trips (download calls) happened; tests read it to prove that a
     * decode step has exactly one (the sampled token). */
    uint64_t n_downloads;
};

/* Backend registry. kind: "cpu", "gpu" (first GPU), or "gpu:N". n_threads for the CPU. */
rf_backend *rf_backend_create(const char *kind, int n_threads);
void rf_backend_destroy(rf_backend *be);
/* GPUs present and usable by this build's GPU backend (0 without one). */
int rf_gpu_count(void);
/* Backends compiled into this build, e.g. "cpu cuda(sm_80,sm_90)". */
const char *rf_backends_built(void);

#endif
