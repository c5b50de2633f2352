/* quant.h: reference (scalar, exact) decoding of GGUF weight rows to f32.
 *
 * Contract: rf_dequantize_row() decodes `n` consecutive elements of type `type` starting at
 * `src` (which need not be aligned: blocks are read with memcpy) into dst[0..n). n must be a
 * multiple of the type's block size (dtype.h). Returns 0, or -1 with an error for a type this
 * build does not support. The decode is bit-exact with ggml's reference dequantization: every
 * scale is converted from f16 exactly and every product is computed in f32 in the same order.
 * Block layouts are documented beside each decoder in quant.c.
 *
 * This is the oracle for every other decode path (SIMD, GPU).
 */
#ifndef RF_QUANT_H
#define RF_QUANT_H

#include <stdint.h>

int rf_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Encoders used by tests and `mkmodel` to produce files of each type from f32 data
 * (round-to-nearest, as ggml's reference quantizers). Same length rules as above.
 * Returns 0 or -1 for types without an encoder. */
int rf_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

#endif
