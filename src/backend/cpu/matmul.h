/* matmul.h: CPU matrix multiplication directly on GGUF weight blocks.
 *
 * Contract of rf_matmul: y[t*n_out + o] = sum_i W[o][i] * x[t*n_in + i] for t < n_tok, o < n_out.
 * W is n_out contiguous rows of n_in elements of `type` (row bytes = rf_row_bytes(type, n_in));
 * x is f32 [n_tok][n_in]; y is f32 [n_tok][n_out] and must not alias x. n_in must be a multiple
 * of the type's block size and the type must be `supported` (dtype.h); anything else is a
 * programming error and aborts with a message. tp may be NULL (single-threaded).
 *
 * Precision: F32/F16/BF16 are computed in f32, except F16/BF16 with 5 or more tokens at the AVX2
 * level and at the AVX-512 level on a CPU with AVX512_VNNI, whose products run on 14-bit codes
 * per 32-element block of weights and x (~1e-4 of sum_i |W[o][i] x[i]|; bound in gemm_i16.h),
 * and at the AMX level with 8 or more tokens, as sums of exact bf16 tile products (within ~1e-5
 * of the f32 result: gemm_amx.c). For quantized types at the AVX2/AVX-512/AMX levels x is
 * quantized to int8 per 32 elements (scale = max|x|/127) and the block products are summed
 * exactly in int32 before scaling, so y is within ~1e-2 of the exact result relative to
 * sum_i |W[o][i] x[i]| (in practice ~2e-3). Token rows of x holding NaN/inf (or values so small
 * their int8 scale would be subnormal) skip the int8 path and use the f32 path, so NaN/inf
 * propagate exactly as in an f32 dot product. The scalar level decodes each weight row with
 * rf_dequantize_row and accumulates in f32: the reference-quality fallback.
 *
 * Work is split across the pool's threads by output rows. The whole matrix is never expanded:
 * at most one decoded row per thread exists at a time. For n_tok > 1 rows are processed in tiles
 * small enough to stay in L1/L2 while every token passes over them.
 */
#ifndef RF_MATMUL_H
#define RF_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/threadpool.h"

/* RF_ISA_AMX is the AVX-512 level plus Intel AMX tiles for the many-token GEMMs (gemm_amx.c:
 * AMX-BF16 for F16 / BF16 weights, AMX-INT8 for the quantized types with an AVX-512 GEMM); it
 * needs AVX512_BF16 and the kernel's permission to use tile data. */
typedef enum { RF_ISA_SCALAR = 0, RF_ISA_AVX2 = 1, RF_ISA_AVX512 = 2, RF_ISA_AMX = 3 } rf_isa;
enum { RF_ISA_COUNT = 4 };

/* Highest level this CPU (and OS) supports; the environment variable ROCMFORGE_ISA =
 * scalar|avx2|avx512|amx lowers it (never raises it above what the CPU has). */
rf_isa rf_isa_best(void);
const char *rf_isa_name(rf_isa isa);

void rf_matmul(rf_threadpool *tp, rf_isa isa, uint32_t type, const void *w, int64_t n_out, int64_t n_in,
               const float *x, int64_t n_tok, float *y);

/* One matrix of rf_matmul_many: W (type, n_out rows of the shared n_in) and its output y. */
typedef struct {
    uint32_t type;
    const void *w;
    int64_t n_out;
    float *y;
} rf_mm_mat;

/* rf_matmul for each of n_mat matrices over the same x, with the same outputs bit for bit (every
 * output row is computed the same way). For one token (decode: q/k/v, gate/up) x is quantized
 * once and the rows of all matrices are split over the threads in one dispatch, so each thread
 * streams one run of rows instead of one per matrix. The matrices may differ in type. */
void rf_matmul_many(rf_threadpool *tp, rf_isa isa, int n_mat, const rf_mm_mat *mats, int64_t n_in, const float *x,
                    int64_t n_tok);

/* Weight placement for the CPU backend (matmul_weights.c): rf_cpu_weights_copy returns a copy of
 * `bytes` bytes at 64-byte alignment in memory advised for 2 MiB transparent huge pages (decode
 * streams weights at a higher rate from there than from 4 KiB file-mapping pages), or NULL with
 * rf_set_error on out-of-memory. rf_cpu_weights_free releases one such copy (NULL: no-op; any
 * other pointer aborts). Thread-safe. */
void *rf_cpu_weights_copy(const void *src, size_t bytes);
void rf_cpu_weights_free(void *p);

#endif
