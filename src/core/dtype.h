/* dtype.h: the tensor element types of GGUF files (numbering = ggml's `ggml_type`).
 *
 * A row of `n` elements of a block type occupies (n / block_elems) * block_bytes bytes and n must
 * be a multiple of block_elems. Plain types (F32, F16, BF16) have block_elems 1.
 * `supported` says whether this build can compute with the type; a file using an unsupported
 * type is refused by name at load time.
 */
#ifndef RF_DTYPE_H
#define RF_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    RF_TYPE_F32 = 0,
    RF_TYPE_F16 = 1,
    RF_TYPE_Q4_0 = 2,
    RF_TYPE_Q4_1 = 3,
    RF_TYPE_Q5_0 = 6,
    RF_TYPE_Q5_1 = 7,
    RF_TYPE_Q8_0 = 8,
    RF_TYPE_Q8_1 = 9,
    RF_TYPE_Q2_K = 10,
    RF_TYPE_Q3_K = 11,
    RF_TYPE_Q4_K = 12,
    RF_TYPE_Q5_K = 13,
    RF_TYPE_Q6_K = 14,
    RF_TYPE_Q8_K = 15,
    RF_TYPE_IQ2_XXS = 16,
    RF_TYPE_IQ2_XS = 17,
    RF_TYPE_IQ3_XXS = 18,
    RF_TYPE_IQ1_S = 19,
    RF_TYPE_IQ4_NL = 20,
    RF_TYPE_IQ3_S = 21,
    RF_TYPE_IQ2_S = 22,
    RF_TYPE_IQ4_XS = 23,
    RF_TYPE_I8 = 24,
    RF_TYPE_I16 = 25,
    RF_TYPE_I32 = 26,
    RF_TYPE_I64 = 27,
    RF_TYPE_F64 = 28,
    RF_TYPE_IQ1_M = 29,
    RF_TYPE_BF16 = 30,
    RF_TYPE_TQ1_0 = 34,
    RF_TYPE_TQ2_0 = 35,
    RF_TYPE_MXFP4 = 39, /* 32 E2M1 codes under one E8M0 exponent (gpt-oss experts); named, not computed */
    RF_TYPE_COUNT = 40
} rf_type;

typedef struct {
    const char *name;    /* ggml's name, e.g. "q4_K"; NULL for unused ids */
    uint32_t block_elems; /* elements per block (1 for plain types) */
    uint32_t block_bytes; /* bytes per block */
    bool supported;      /* this build can dequantize / compute with it */
} rf_type_info;

/* Returns NULL when `t` is not a known ggml type id (including out-of-range values). */
const rf_type_info *rf_type_get(uint32_t t);
/* Name for messages; "unknown(<id>)" style text for unknown ids (static buffer per thread). */
const char *rf_type_name(uint32_t t);
/* Bytes of one row of `n` elements; returns false if n is not a multiple of the block size,
 * the type is unknown, or the size overflows. */
bool rf_row_bytes(uint32_t t, uint64_t n, uint64_t *out);

#endif
