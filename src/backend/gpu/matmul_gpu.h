/* matmul_gpu.h: weight-times-activation products on the GPU (CUDA or HIP from the same sources:
 * matmul.cu, with the device layouts and host-side runs in matmul_formats.cu), directly on every
 * supported GGUF weight type.
 *
 *   y[n][n_out] = x[n][n_in] * W^T (+ bias[n_out])
 *
 * W: n_out rows of n_in elements of GGUF type `type` (core/dtype.h) or of a device layout (below),
 * rows contiguous (row o starts at o * rf_gpu_mm_row_bytes(type, n_in)), device memory; n_in must
 * be a multiple of the type's block size.
 * x, y, bias: f32, row-major, rows contiguous, device memory; y must not overlap x, W or bias.
 * W must be followed by RF_GPU_WEIGHT_PAD readable bytes (the int8 kernels load whole aligned
 * words, which for the last block of a Q4_0 row reach up to 2 bytes past it).
 *
 * Paths (chosen per call by n):
 *  - n <= RF_GPU_MATVEC_MAX_N: matrix-vector kernels that decode the weight blocks in registers
 *    and accumulate in f32 (decode bit-exact with core/quant.c; only the summation order
 *    differs from the CPU).
 *    n == 1 (decode; n == 2 too with RF_MM_I8_N2=1 at init, off by default: on the tiny random-weight
 *    test model, 2-token decode vs the f16 prompt GEMM then differs by 0.12-0.15 > test_model's 5e-2
 *    fork tolerance) with Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K weights, n_in <= 32768,
 *    n_in % 32 == 0 and x 16-byte aligned: int8 activations instead (as llama.cpp): x (normed
 *    first in rf_gpu_matmul_ex) is quantized per 32 elements, q = round(x / d) in [-127, 127],
 *    d = amax / 127, and the dots use 4-way int8 products with int32 sums per block. Error per
 *    output <= sum_i |w_i| * d_b(i) / 2 (+ f32 rounding); a column whose x has a non-finite
 *    element is computed in f32 (exact NaN/inf semantics below). At n == 1 (and for F16/BF16
 *    weights with n_in * 4 bytes <= 46 KB) this is k_mvp: one launch per call, every block
 *    quantizing (or staging) x itself, the same arithmetic as the two-kernel path (x quantized
 *    once into context scratch, then the product) that n == 2 uses. Read at init: RF_MM_F32_MV=1
 *    keeps the f32 kernels for every type, RF_MM_MVP=0 the two-kernel path (reference / A/B),
 *    RF_MM_PDL=0 / RF_MM_PDL_GRAPH=0 no programmatic dependent launch (anywhere / inside graph
 *    capture), RF_MM_REPACK=0 no device layouts (rf_gpu_mm_repack leaves every weight as it is),
 *    RF_MM_XQ=0 no int8 x from rf_gpu_mm_swiglu or rf_gpu_mm_xq_buffers, RF_MM_SWIGLU_FUSE=0 no
 *    fused gate / up / swiglu (rf_gpu_mm_gate_up_swiglu returns 0), RF_MM_MIX=0 no two-format
 *    launch (below). With a norm, k_mvp
 *    stages x * norm_w and multiplies each output by the RMS scale (one pass over x instead of
 *    two). On sm_90+, the Q4_0 X8 weights stream through shared memory by bulk copies instead
 *    (k_mvt, same arithmetic; RF_MM_TMA=0: k_mvp). A call at n == 1 whose outputs are Q4_K and
 *    Q6_K X8 (a Q4_K_M layer's q / k / v) runs both formats in one launch (k_mvp2), bit for bit
 *    what the per-format launches give.
 *  - larger n (prompt processing): CUDA with cuBLAS (loaded at run time with dlopen, no link
 *    dependency): the weight is decoded to an f16 scratch in row slabs, x is converted to f16,
 *    and cublasGemmEx accumulates in f32 (F32 weights: cublasSgemm-equivalent f32 GEMM, no
 *    scratch). Without cuBLAS, and always on HIP: a tiled f32 GEMM kernel of matmul.cu that
 *    decodes weight tiles into shared memory.
 *
 * Calls are enqueued on the context's stream: no host synchronisation, no allocation on the
 * matvec path, so a decode step can be captured as a graph. The GEMM path's scratch is grown on
 * demand, but only outside graph capture (a call that would need to grow it during capture fails
 * with an error).
 *
 * Non-finite values: NaN in x or W makes the affected outputs NaN; an infinite x element gives
 * +-inf (or NaN where it meets a zero weight or an opposite infinity), exactly as the f64 CPU
 * dot would. The f16 GEMM path additionally turns |x| or |w| > 65504 into inf.
 *
 * The functions are plain C; the file is usable from C and from .cu sources.
 */
#ifndef RF_MATMUL_GPU_H
#define RF_MATMUL_GPU_H

#define RF_GPU_WEIGHT_PAD 16

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest n served by the matrix-vector kernels (in launches of up to 8 columns). */
#define RF_GPU_MATVEC_MAX_N 16

typedef struct rf_gpu_matmul_ctx rf_gpu_matmul_ctx;

/* stream: a cudaStream_t / hipStream_t (NULL = the legacy default stream) of the current device.
 * Returns NULL + rf_set_error on failure. */
rf_gpu_matmul_ctx *rf_gpu_matmul_init(void *stream);
void rf_gpu_matmul_free(rf_gpu_matmul_ctx *ctx);

/* y[n][n_out] = x[n][n_in] * W^T (+ bias[n_out] if bias != NULL); see above. n >= 0 (n == 0 is a
 * no-op). Returns 0, or -1 + rf_set_error for an unsupported type, a bad shape (n_in not a
 * multiple of the block size), a launch failure, or a scratch growth needed during capture. */
int rf_gpu_matmul(rf_gpu_matmul_ctx *ctx, uint32_t type, const void *w, int64_t n_out, int64_t n_in,
                  const float *x, int n, const float *bias, float *y);

/* Fused matmul: several outputs sharing x (and n_in), optional RMSNorm on the input, optional
 * accumulation into y.
 *   For each i < n_outs: y_i[t][o] (+)= sum_k xin[t][k] * W_i[o][k] + bias_i[o]   (t < n, o < n_out_i)
 *   xin = x, or, when norm_w != NULL, xin[t][k] = x[t][k] / sqrt(mean_k x[t][k]^2 + eps) * norm_w[k]
 *   (sum of squares in f32). accumulate != 0: y += (the residual add folded into the output),
 *   else y =.
 * scratch: device memory of at least n * n_in floats that the call may overwrite (required when
 * norm_w != NULL; may be NULL otherwise); it must not overlap x, W, bias or y. y_i must not overlap
 * x, scratch or another y_j. Enqueued on the context's stream: no allocation or host sync on the
 * matvec path (n <= RF_GPU_MATVEC_MAX_N), so graph-capturable (the GEMM path as rf_gpu_matmul).
 * Returns 0, or -1 + rf_set_error as rf_gpu_matmul. NaN/inf: as rf_gpu_matmul, applied to xin
 * (a NaN anywhere in row t of x makes every output of row t NaN when norm_w != NULL). */
typedef struct {
    uint32_t type;     /* weight type (core/dtype.h) */
    const void *w;     /* [n_out][n_in] rows of `type`, device memory */
    int64_t n_out;
    const float *bias; /* [n_out] or NULL */
    float *y;          /* [n][n_out] */
} rf_gpu_mm_out;

int rf_gpu_matmul_ex(rf_gpu_matmul_ctx *ctx, int n_outs, const rf_gpu_mm_out *outs, int64_t n_in, const float *x,
                     int n, const float *norm_w, float eps, int accumulate, float *scratch);

/* out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + expf(-gate[i])) * up[i], i < n_in (elementwise.cu's
 * swiglu; out may alias gate or up), that also leaves out quantized to int8 (the int8 path's
 * quantization) in the context's scratch, so that the next matmul call, when it is
 * rf_gpu_matmul_ex with x == out, n == 1, the same n_in and no norm (the down projection of a
 * decode step), copies that int8 x instead of quantizing out in every block. The copy is good for
 * that one next call only (any matmul call forgets it), and out must not change before it. Needs n_in % 32 == 0, n_in <= 32768,
 * 16-byte aligned pointers, and RF_MM_XQ not 0 at init; otherwise nothing is enqueued and 0 is
 * returned (call the plain swiglu). Returns 1 when enqueued, -1 + rf_set_error on a launch error. */
int rf_gpu_mm_swiglu(rf_gpu_matmul_ctx *ctx, const float *gate, const float *up, int64_t n_in, float *out);

/* The feed-forward's gated half of a decode step in one matvec launch (n == 1), for F16 and BF16
 * weights (the formats whose matvecs stage x in f32, so no int8 copy of h is left):
 *   h[o] = silu(g[o]) * u[o],  g = xin Wgate^T (+ bias),  u = xin Wup^T (+ bias),  o < n_ff,
 * xin = x RMS-normed with norm_w (or x without it), gate_up[0] = gate (h is written to its y),
 * gate_up[1] = up (its y is not written), of one type and n_out = n_ff. Each warp computes a
 * gate row and then the up row of the same o, so no swiglu kernel runs between the gate / up and
 * the down projections. h is bit for bit what rf_gpu_matmul_ex of both outputs and then the
 * swiglu give. Needs RF_MM_SWIGLU_FUSE not 0 at init and the decode matvec (k_mvp) eligible for
 * the call; otherwise nothing is enqueued and 0 is returned (call rf_gpu_matmul_ex, then the
 * swiglu). Returns 1 when enqueued, -1 + rf_set_error on a launch error. */
int rf_gpu_mm_gate_up_swiglu(rf_gpu_matmul_ctx *ctx, const rf_gpu_mm_out gate_up[2], int64_t n_in, const float *x,
                             const float *norm_w, float eps);

/* The same hand-off for an x that another kernel produces (the decode attention's output before
 * the output projection): rf_gpu_mm_xq_buffers gives the scratch where that kernel writes x
 * quantized (*q: n_in int8, *d: n_in / 32 pairs of floats {d, d * sum q}, as the int8 path
 * quantizes; a block with inf / NaN: d = NaN), or returns 0 (and nothing may be written) when
 * the context has none, n_in % 32 != 0, n_in is too large or RF_MM_XQ is 0. After enqueueing
 * that kernel, rf_gpu_mm_xq_mark(ctx, x, n_in) makes the next matmul call (rf_gpu_matmul_ex with
 * that x, n == 1, no norm) copy it; any other matmul call forgets it, and x must not change
 * before. Returns 1 when the buffers are given. */
int rf_gpu_mm_xq_buffers(rf_gpu_matmul_ctx *ctx, int64_t n_in, void **q, void **d);
void rf_gpu_mm_xq_mark(rf_gpu_matmul_ctx *ctx, const float *x, int64_t n_in);

/* Device-only weight layouts: RF_GPU_MM_LAYOUT on the type passed to rf_gpu_matmul /
 * rf_gpu_matmul_ex marks a weight that rf_gpu_mm_repack rearranged into its type's device layout
 * (one per type, matmul_decoders.cuh):
 *  - X8 of Q4_0, Q8_0, IQ4_NL (n_in % 256 == 0): every group of 8 consecutive blocks of a row holds
 *    its 8 f16 scales first, then the 8 blocks' quants, so each block's quants start 16-byte
 *    aligned (DecQ4_0X8); IQ4_NL's quant words also in the nibble order of iq4_nib_shuffle.
 *    Same bytes per row as the GGUF type.
 *  - X8 of Q6_K: every group of 8 superblocks holds its 8 d, then its 8 x 16 scales, then each
 *    superblock's ql and qh, all 16-byte aligned (DecQ6_KX8). A row of n_in % 2048 != 0 ends in a
 *    partial group at a full group's offsets, so its rows are longer than GGUF's.
 *  - S of IQ4_XS: GGUF's superblocks with the quant words in iq4_nib_shuffle's order (DecIQ4_XSS).
 *  - H of Q5_K: GGUF's superblocks with the 32 qh bytes as one word of fifth bits per sub-block
 *    (DecQ5_KH).
 * rf_gpu_mm_row_bytes gives the bytes per row of each. Any other combination of flag, type and
 * n_in is refused as an unsupported type / shape. */
#define RF_GPU_MM_LAYOUT 0x10000u

/* The type rf_gpu_mm_repack turns `type` into for rows of n_in elements: type | RF_GPU_MM_LAYOUT
 * where the type has a device layout for that n_in (Q4_0, Q8_0 and IQ4_NL with n_in % 256 == 0, Q6_K,
 * IQ4_XS and Q5_K), else `type` (also always with RF_MM_REPACK=0 at init: never rearranges, A/B). */
uint32_t rf_gpu_mm_repack_type(const rf_gpu_matmul_ctx *ctx, uint32_t type, int64_t n_in);
/* Bytes per row of n_in elements of `type`, device layouts included; -1 when the type / n_in has
 * no such rows. */
int64_t rf_gpu_mm_row_bytes(uint32_t type, int64_t n_in);
/* Writes W (src: device memory, n_out GGUF rows of n_in elements of `type`) to dst in the layout
 * rf_gpu_mm_repack_type names, and sets *out_type to that type (`type` itself: nothing written).
 * dst is src where the layout keeps the bytes per row (rf_gpu_mm_row_bytes: rearranged in place),
 * else a separate buffer of n_out rows of the new row bytes (refused otherwise); both 16-byte
 * aligned. The result is a device-only
 * arrangement: only rf_gpu_matmul / rf_gpu_matmul_ex read it (not the embedding lookup).
 * Enqueued on the context's stream. Returns 0, or -1 + rf_set_error. */
int rf_gpu_mm_repack(rf_gpu_matmul_ctx *ctx, uint32_t type, const void *src, void *dst, int64_t n_out, int64_t n_in,
                     uint32_t *out_type);
/* The same rearrangement of one row on the host, src -> dst (dst: rf_gpu_mm_row_bytes of the
 * result; no overlap); returns the repacked type, or 0 (nothing written) when the type / n_in has
 * no such layout. */
uint32_t rf_gpu_mm_host_repack(uint32_t type, const void *src, void *dst, int64_t n_in);

/* Whether rf_gpu_matmul supports weight type `type`. */
int rf_gpu_matmul_supports(uint32_t type);

/* ---- Test and benchmark support (thin wrappers over the runtime, so that C code needs no GPU
 * headers). All return 0 / non-NULL on success, -1 / NULL + rf_set_error on failure. ---------- */

/* Number of usable devices (0 when no driver or no device). Never fails. */
int rf_gpu_mm_device_count(void);
void *rf_gpu_mm_alloc(size_t bytes);
void rf_gpu_mm_dfree(void *p);
int rf_gpu_mm_upload(void *dst_dev, const void *src_host, size_t bytes);
int rf_gpu_mm_download(void *dst_host, const void *src_dev, size_t bytes);
/* Fills device memory with a byte value (to poison outputs). */
int rf_gpu_mm_fill(void *dst_dev, int byte, size_t bytes);
/* Waits for the context's stream; reports any asynchronous error. */
int rf_gpu_mm_sync(rf_gpu_matmul_ctx *ctx);
/* GEMM path selection for tests: 0 = default (cuBLAS where available), 1 = the tiled kernel. */
void rf_gpu_mm_force_tiled(rf_gpu_matmul_ctx *ctx, int on);
/* Two-format decode launches (k_mvp2) the context has enqueued so far (for tests). */
long rf_gpu_mm_mixed_launches(rf_gpu_matmul_ctx *ctx);
/* The last one-format decode launch (k_mvp or k_mvt, for tests): its resident wave in warps (the
 * return value; 0 before any), its rows per warp (*rpw) and whether it ran k_mvt (*mvt). */
int64_t rf_gpu_mm_last_decode(rf_gpu_matmul_ctx *ctx, int64_t *rpw, int *mvt);
/* Name of the GEMM path the context uses by default ("cublas" or "tiled"). */
const char *rf_gpu_mm_gemm_path(rf_gpu_matmul_ctx *ctx);
/* Times rf_gpu_matmul (no bias): each of `iters` samples is one device-event interval around
 * n_w calls, call i using weight ws[i] (rotate among copies so that the weight is not served
 * from cache); returns the median over samples of ms per call, after warm-up; -1 on failure. */
double rf_gpu_mm_time(rf_gpu_matmul_ctx *ctx, uint32_t type, const void *const *ws, int n_w, int64_t n_out,
                      int64_t n_in, const float *x, int n, float *y, int iters);
/* Runs the device block decoders on the host: out[0..n_in) = row of `type` (vector: use the
 * 16-byte decoders of F32/F16/BF16, n_in a multiple of 4/8). Checks the GPU decode logic
 * against core/quant.c without a GPU. */
int rf_gpu_mm_host_decode(uint32_t type, const void *row, int64_t n_in, float *out, int vector);
/* Host emulation of the int8-activation matvec (n <= 2 path) for one row of a type it serves
 * (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; -1 otherwise): x quantized per 32 elements
 * as the device does, the device's unit loads and dp4a dots, *out = the row's dot. Checks the
 * int8 unit layouts without a GPU. */
int rf_gpu_mm_host_qdot(uint32_t type, const void *row, int64_t n_in, const float *x, double *out);
/* The IQ4 codebook lookup of the int8 units on the host, for one quant word c in the device
 * layouts' nibble order: sum over nibbles k < 4 of value[nibble k] * byte k of xl, plus over k >= 4
 * of value[nibble k] * byte k - 4 of xh (int8 bytes). sign: the CUDA lookup (prmt's sign mode;
 * where the build has none, HIP, the other), else the HIP one (mm_iq4_pair). */
int rf_gpu_mm_host_iq4_dot(int sign, uint32_t c, int32_t xl, int32_t xh);
/* Device name into buf (for logs). */
void rf_gpu_mm_device_name(char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
