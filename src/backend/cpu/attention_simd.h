/* attention_simd.h: the SIMD levels of cpu_attention (ops.h), chosen at run time.
 *
 * Contract: cpu_attention_isa computes what cpu_attention computes (same arguments, same rows
 * [begin, end)), at SIMD level isa, lowered to what this CPU supports (RF_ISA_SCALAR, or a level
 * the CPU lacks, runs cpu_attention itself: the reference). The SIMD levels process the query
 * heads that share one KV head together (for a tile of up to 8 tokens of one sequence), so each
 * K/V row is read once for all of them, and the positions in blocks of one vector width (16 at
 * AVX-512, 8 at AVX2): the block's scores as one vector (K block transposed in registers), one
 * running-max update per block, a vectorized exp, then V accumulated with FMAs. f16 caches are
 * widened with F16C; q8_0 and q4_0 caches (kv_format.h) read each vector of codes widened to f32
 * (q4_0: unpacked by per-lane shifts, minus 8) times its block's scale, the exact value the
 * reference reads, so such a cache gives bit for bit what the same level gives over an f32 cache
 * holding the dequantized values.
 *
 * Precision: the same f32 arithmetic as the reference in another order (dot products in four
 * partial sums, the softmax max per block and its sum per lane), with exp from
 * rf_attn_kernels.exp (within 2 ulp of expf, subnormal results included). Bound checked against
 * cpu_attention in tests/test_cpu_attention.c: per element within 1e-5 of max |V|, relative L2
 * 1e-5 (measured ~5e-7 and ~8e-7, f32, f16, q8_0 and q4_0 caches alike). Results are bit-identical
 * however [begin, end) is cut.
 * NaN/inf: a NaN score (NaN in q or K) makes the whole output row NaN, as in the reference. A
 * score of -inf gets weight 0 unless every score up to the end of its block is -inf as well (the
 * row then is NaN; the reference gives NaN when the first position's score is -inf).
 * AVX2 handles head_dim % 8 == 0 and hands other sizes to the reference; AVX-512 takes any. Both
 * take q8_0 and q4_0 caches at head_dim % 32 == 0 (the only such caches a context makes) and hand
 * the reference any other. */
#ifndef RF_ATTENTION_SIMD_H
#define RF_ATTENTION_SIMD_H

#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/matmul.h"

typedef void rf_attn_fn(const rf_step *step, const rf_attn_dims *d, const float *q, const void *k_cache,
                        const void *v_cache, float *out, int64_t begin, int64_t end);

typedef struct {
    rf_attn_fn *attention;
    /* y[i] = exp(x[i]) for i < n (y may alias x): the level's vectorized expf (for tests). */
    void (*exp)(const float *x, float *y, int64_t n);
    /* out[i] = silu(gate[i]) * up[i] for i < n (out may alias gate or up): cpu_swiglu with this
     * exp (here because it shares it; the fast backend's FFN activation). Per element the same
     * value wherever the element sits in the range. */
    void (*swiglu)(const float *gate, const float *up, int64_t n, float *out);
} rf_attn_kernels;

/* Fill k for their level; only called once the CPU is known to have it (with F16C). */
void rf_attn_kernels_avx2(rf_attn_kernels *k);
void rf_attn_kernels_avx512(rf_attn_kernels *k);

/* The kernels of exactly level isa; NULL at the scalar level and for a level the CPU lacks. */
const rf_attn_kernels *rf_attn_kernels_at(rf_isa isa);

void cpu_attention_isa(rf_isa isa, const rf_step *step, const rf_attn_dims *d, const float *q, const void *k_cache,
                       const void *v_cache, float *out, int64_t begin, int64_t end);

#endif
