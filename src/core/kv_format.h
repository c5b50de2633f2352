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

/* Elements per Q8_0 scale. */
#define RF_KV_Q8_BLOCK 32

/* True for the three cache formats above. */
bool rf_kv_type_ok(uint32_t type);
/* Bytes of one row of kv_dim elements (kv_dim % 32 == 0 for Q8_0); 0 for another type. */
size_t rf_kv_row_bytes(uint32_t type, int64_t kv_dim);
/* Short name for messages and tables: "f32", "f16", "q8_0". */
const char *rf_kv_type_name(uint32_t type);

/* Writes the kv_dim elements x as one row of the format (row: rf_kv_row_bytes bytes; Q8_0's
 * padding bytes are zeroed). */
void rf_kv_write_row(uint32_t type, const float *x, int64_t kv_dim, void *row);
/* Reads elements [e0, e0 + n) of a row as f32 (for Q8_0 e0 and n multiples of 32). */
void rf_kv_read_row(uint32_t type, const void *row, int64_t kv_dim, int64_t e0, int64_t n, float *out);

/* One Q8_0 block: codes q[32] and the binary16 scale of the 32 elements x (rule above). */
void rf_kv_q8_block(const float *x, int8_t *q, uint16_t *d);

#ifdef __cplusplus
}
#endif

#endif
