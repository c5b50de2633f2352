/* ops.h: the CPU reference implementation of every forward-pass operation.
 *
 * These are the oracles: plain f32 arithmetic, the same algorithm as the GPU kernels of the same
 * name (backend/gpu/<name>.cu), no shortcuts. Tensors are f32, row-major, rows contiguous,
 * no alignment requirement. NaN/inf: nothing is masked or clamped; a NaN or inf in an input
 * propagates to the outputs that depend on it (IEEE semantics), except where stated.
 * Each function's parameters are validated by its caller (the forward pass sizes everything
 * from validated hyperparameters); they do not fail.
 */
#ifndef RF_CPU_OPS_H
#define RF_CPU_OPS_H

#include <stdint.h>

#include "backend/backend.h"

/* embed: out[t][:] = dequantize(table row tokens[t]), table [n_vocab][n_embd] of any supported
 * type. Every tokens[t] is in [0, table->n_out) (checked by the runtime before upload). */
void cpu_embed(const rf_weight *table, const int32_t *tokens, int n, float *out);

/* rmsnorm: for each of n_rows rows of dim elements: if residual, x += residual (x is updated in
 * place, it is the residual stream); out = x * w / sqrt(mean(x^2) + eps), w a [dim] f32 weight.
 * The sum of squares is accumulated in f32 in index order. out may alias x. x is only read when
 * residual is NULL. (The backend's matmul op applies it to its input when given a norm weight.) */
void cpu_rmsnorm(float *x, const float *residual, const float *w, int n_rows, int dim, float eps,
                 float *out);

/* matmul (reference): y[t][o] = sum_i W[o][i] * x[t][i] (+ bias[o]); each W row is dequantized
 * exactly (quant.h) and the dot product accumulates in f32 in index order. */
void cpu_matmul_ref(const rf_weight *w, const float *bias, const float *x, int n, float *y);
/* The same with each x row first rounded as llama.cpp's CPU backend rounds it (cpu_round_like_ggml). */
void cpu_matmul_ref_ggml(const rf_weight *w, const float *bias, const float *x, int n, float *y);

/* rope_store_kv: see rf_rope (backend.h) for the rotation; applied to every head of q and k of
 * each token t at position pos[t]; then K/V rows are copied into the caches at slot[t].
 * Angles are computed as theta = pos * freq_scale * powf(base, -2i/n_rot) / factor, in f32.
 * cpu_store_kv: k_cache, v_cache are [n_slots] rows of kv_type (backend.h's cache layout),
 * written by rf_kv_write_row (core/kv_format.h): RF_TYPE_F32 copies, RF_TYPE_F16 rounds to
 * nearest even (rf_fp32_to_fp16: overflow to inf, NaN stays NaN), as the GPU's __float2half_rn;
 * RF_TYPE_Q8_0 and RF_TYPE_Q4_0 quantize per 32 elements. */
void cpu_rope(float *x, int n_tokens, int n_heads, int head_dim, const int32_t *pos, const rf_rope *rope);
void cpu_store_kv(const float *k, const float *v, int n_tokens, int kv_dim, const int32_t *slot,
                  void *k_cache, void *v_cache, uint32_t kv_type);

/* attention: for token t, query head h, KV head g = h / (n_head/n_kv_head):
 *   s_p = scale * dot(q[t,h], K[p,g]) for p = 0..pos[t] of t's sequence (through the block table)
 *   out[t,h] = sum_p softmax(s)_p V[p,g]
 * K and V are read from caches of d->kv_type (f16 elements widened exactly to f32, q8_0 codes
 * and q4_0 codes minus 8 times their scale, exact in f32); all
 * arithmetic is f32. Computed in one pass with an online softmax (running max and sum), so
 * memory does not grow with the context. Position pos[t] itself is always visible, so no row is
 * empty. Processes the (token, head) pairs r = t * n_head + h in [begin, end), so callers can
 * split the work across threads. */
void cpu_attention(const rf_step *step, const rf_attn_dims *d, const float *q, const void *k_cache,
                   const void *v_cache, float *out, int64_t begin, int64_t end);
/* The same result computed as llama.cpp's CPU backend does (for "cpu-ggml"): q rounded to f16
 * before q.k, softmax normalised first and each probability rounded to f16 before weighting V
 * (K and V hold f16 values: an f16 cache, or an f32 one the caller rounded to f16). */
void cpu_attention_ggml(const rf_step *step, const rf_attn_dims *d, const float *q, const void *k_cache,
                        const void *v_cache, float *out, int64_t begin, int64_t end);

/* swiglu: out[i] = gate[i] / (1 + exp(-gate[i])) * up[i]. */
void cpu_swiglu(const float *gate, const float *up, int64_t n, float *out);

/* Building blocks used by tests and for reference: x *= s; causal mask (row r of an
 * [n_rows][n_cols] score matrix whose last row is query position n_cols-1: entries c > r +
 * (n_cols - n_rows) become -inf); numerically stable row softmax (max-subtracted; a row of all
 * -inf becomes all zeros instead of NaN). */
void cpu_scale(float *x, int64_t n, float s);
void cpu_causal_mask(float *x, int n_rows, int n_cols);
void cpu_softmax_rows(float *x, int n_rows, int n_cols);

/* llama.cpp-compatible rounding of an activation row before a dot product with weights of type
 * wtype (f16/bf16 rounding, or 8-bit quantization per ggml's q8_0 / q8_K), in place; n is a
 * multiple of the weight type's block size. Used only by the "cpu-ggml" device. */
void cpu_round_like_ggml(uint32_t wtype, float *x, int64_t n);

/* get_rows: out[r][:] = x[rows[r]][:]. */
void cpu_get_rows(const float *x, const int32_t *rows, int n_rows, int dim, float *out);

#endif
