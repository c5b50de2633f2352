/* kv_format.h: the element formats of the K/V cache, one row (slot) at a time.
 *
 * A layer's K (or V) cache is [n_slots] rows; a row holds the kv_dim = n_kv_head * head_dim
 * elements of one position, heads one after the other (element (g, i) at g * head_dim + i), and
 * takes rf_kv_row_bytes(type, kv_dim) bytes. Row r starts at r * row_bytes, so a cache block of
 * block_size slots is block_size * row_bytes contiguous bytes (copy-on-write copies bytes).
 *
 *   RF_TYPE_F32   kv_dim floats.
 *   RF_TYPE_F16   kv_dim IEEE binary16, written round-to-nearest-even, read by exact widening.
 *   RF_TYPE_Q8_0  kv_dim % 32 == 0 (head_dim % 32 == 0, so no block spans two heads):
 *                   bytes [0, kv_dim)                  int8 codes q[i], element order;
 *                   bytes [kv_dim, kv_dim + kv_dim/16)  binary16 scales d[b] of the 32-element
 *                                                       blocks b = i / 32, little-endian;
 *                   then zero to 15 bytes of padding, so row_bytes % 16 == 0 (16-byte loads).
 *                 Element i reads as (float)q[i] * fp16_to_fp32(d[i / 32]) (exact in f32).
 *                 Written per block of 32 (llama.cpp's Q8_0 rounding): amax = max |x|,
 *                 d = amax / 127 (f32), id = d != 0 ? 1 / d : 0, q = roundf(x * id) (half away
 *                 from zero; |q| <= 127), stored scale = fp16(d) (round to nearest even). A block
 *                 with a NaN or inf element, or whose fp16(d) overflows (amax > ~8.3e6), is
 *                 stored as q = 0, d = NaN: all 32 elements read as NaN, so the outputs that
 *                 depend on it are NaN, as with the float formats.
 *   RF_TYPE_Q4_0  kv_dim % 32 == 0:
 *                   bytes [0, kv_dim / 2)               4-bit codes c in 0..15, eight elements per
 *                                                       little-endian 32-bit word: element 8w + j
 *                                                       at bits 4 * (j / 2) + 16 * (j % 2) of word
 *                                                       w (bits 0-3: j = 0, 16-19: 1, 4-7: 2,
 *                                                       20-23: 3, ...), so that one shift and one
 *                                                       mask give the pair (2i, 2i + 1) in the two
 *                                                       halves of a word;
 *                   bytes [kv_dim / 2, kv_dim / 2 + kv_dim / 16)  binary16 scales d[i / 32];
 *                   then zero to 15 bytes of padding (row_bytes % 16 == 0).
 *                 Element i reads as (float)(c[i] - 8) * fp16_to_fp32(d[i / 32]) (exact in f32).
 *                 Written per block of 32 (llama.cpp's Q4_0 rounding): m = the element of the
 *                 largest |x| (the first one on ties), d = m / -8 (f32; 0 when every element is
 *                 +-0), id = d != 0 ? 1 / d : 0, c = min(15, (int)(x * id + 8.5f)) with the
 *                 product and the sum each rounded to f32 (no fused multiply-add) and the
 *                 conversion truncating (the sum is clamped to 0..15 in f32 first, so a scale
 *                 whose reciprocal overflows gives defined codes; they read as +-0, its binary16
 *                 scale being 0), stored scale = fp16(d). So m reads as -8 * d exactly and the
 *                 codes span -8 .. 7 times d. The non-finite rule is q8_0's: codes 8, d = NaN.
 *
 * Every backend writes and reads exactly these bytes; the functions below are the reference
 * (the CPU backend's twins and the GPU tests' oracle). */
#ifndef RF_KV_FORMAT_H
#define RF_KV_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* the GPU launchers (C++) call these too */
#endif

/* Elements per Q8_0 (and Q4_0) scale. */
#define RF_KV_Q8_BLOCK 32

/* True for the four cache formats above. */
bool rf_kv_type_ok(uint32_t type);
/* Bytes of one row of kv_dim elements (kv_dim % 32 == 0 for Q8_0 and Q4_0); 0 for another type. */
size_t rf_kv_row_bytes(uint32_t type, int64_t kv_dim);
/* Short name for messages and tables: "f32", "f16", "q8_0", "q4_0". */
const char *rf_kv_type_name(uint32_t type);

/* Writes the kv_dim elements x as one row of the format (row: rf_kv_row_bytes bytes; Q8_0's and
 * Q4_0's padding bytes are zeroed). */
void rf_kv_write_row(uint32_t type, const float *x, int64_t kv_dim, void *row);
/* Reads elements [e0, e0 + n) of a row as f32 (for Q8_0 and Q4_0 e0 and n multiples of 32). */
void rf_kv_read_row(uint32_t type, const void *row, int64_t kv_dim, int64_t e0, int64_t n, float *out);

/* One Q8_0 block: codes q[32] and the binary16 scale of the 32 elements x (rule above). */
void rf_kv_q8_block(const float *x, int8_t *q, uint16_t *d);
/* One Q4_0 block: codes c[32] (0..15, element order, not yet packed) and the binary16 scale of
 * the 32 elements x (rule above). */
void rf_kv_q4_block(const float *x, uint8_t *c, uint16_t *d);
/* Bit position of element i's code within its row's 32-bit word i / 8 (layout above). */
static inline int rf_kv_q4_shift(int64_t i) { return (int)(4 * ((i & 7) >> 1) + 16 * (i & 1)); }

#ifdef __cplusplus
}
#endif

#endif
