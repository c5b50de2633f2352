/* gguf.h: reading and writing GGUF files (versions 2 and 3).
 *
 * Reader contract
 * - rf_gguf_open() memory-maps the file and parses the header, every metadata key/value and every
 *   tensor info into owned memory; tensor data stay in the mapping and are reached through
 *   rf_gguf_tensor.data (aligned to the file's `general.alignment`, default 32).
 * - Every count, string length, array length, dimension, dimension product, byte size and offset
 *   is checked for overflow and against the file size before use. A bad file gives NULL and one
 *   error line (rf_last_error()) that says what is wrong and where (key or tensor name, byte
 *   offset); never a crash, never an unbounded allocation (counts are bounded by what the
 *   remaining bytes could possibly hold before anything is allocated).
 * - Rejected: bad magic, version other than 2 or 3, unknown metadata value type, nested arrays,
 *   duplicate keys or tensor names, n_dims outside 1..4, a zero or negative dimension,
 *   unknown tensor type ids, a row length not a multiple of its type's block size, tensor offsets
 *   not aligned, data past the end of the file, overlapping tensor data, `general.alignment`
 *   not a power of two (or zero).
 * - Known-but-unsupported tensor types (see dtype.h `supported`) are accepted here: refusing them
 *   is the model loader's job, so that `info` can still describe such a file.
 */
#ifndef RF_GGUF_H
#define RF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    RF_GGUF_U8 = 0,
    RF_GGUF_I8 = 1,
    RF_GGUF_U16 = 2,
    RF_GGUF_I16 = 3,
    RF_GGUF_U32 = 4,
    RF_GGUF_I32 = 5,
    RF_GGUF_F32 = 6,
    RF_GGUF_BOOL = 7,
    RF_GGUF_STRING = 8,
    RF_GGUF_ARRAY = 9,
    RF_GGUF_U64 = 10,
    RF_GGUF_I64 = 11,
    RF_GGUF_F64 = 12,
} rf_gguf_vtype;

typedef struct {
    char *key;     /* NUL-terminated */
    uint32_t type; /* rf_gguf_vtype */
    /* Scalars: integers (signed or unsigned) and bool in i64/u64 (u64 holds the raw unsigned
     * value, i64 the signed one), floats in f64. */
    int64_t i64;
    uint64_t u64;
    double f64;
    /* STRING: NUL-terminated copy (may contain interior NULs; str_len is authoritative). */
    char *str;
    uint64_t str_len;
    /* ARRAY: arr_type is the element type; arr_n elements.
     * Numeric/bool elements: `arr` is a packed little-endian copy with the element size of
     * arr_type (1, 2, 4 or 8 bytes); use the rf_gguf_arr_* accessors.
     * String elements: `arr_str[i]` is a NUL-terminated copy, `arr_str_len[i]` its length. */
    uint32_t arr_type;
    uint64_t arr_n;
    void *arr;
    char **arr_str;
    uint64_t *arr_str_len;
} rf_gguf_kv;

typedef struct {
    char *name;      /* NUL-terminated */
    uint32_t n_dims; /* 1..4 */
    uint64_t ne[4];  /* ne[0] is the row length (fastest-varying); unused dims are 1 */
    uint32_t type;   /* rf_type */
    uint64_t offset; /* relative to the start of the data section */
    uint64_t n_elems;
    uint64_t n_bytes;
    const void *data; /* into the mapping */
} rf_gguf_tensor;

typedef struct rf_gguf {
    uint32_t version;
    uint64_t n_kv;
    rf_gguf_kv *kv;
    uint64_t n_tensors;
    rf_gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset; /* absolute file offset of the data section */
    const uint8_t *base;  /* whole file */
    uint64_t size;
    void *map; /* non-NULL when memory-mapped (unmapped by close) */
    void *owned; /* non-NULL when the buffer is owned (freed by close) */
} rf_gguf;

rf_gguf *rf_gguf_open(const char *path);
/* Parses an in-memory image; the buffer is copied, so the caller keeps ownership of `buf`. */
rf_gguf *rf_gguf_open_memory(const void *buf, size_t n);
void rf_gguf_close(rf_gguf *g);

const rf_gguf_kv *rf_gguf_find(const rf_gguf *g, const char *key);
const rf_gguf_tensor *rf_gguf_find_tensor(const rf_gguf *g, const char *name);

/* Typed getters. Return 1 when found and convertible, 0 when the key is absent, and -1 (with an
 * error naming the key and both types) when present with an unusable type or out-of-range value.
 * get_int accepts every integer type and bool; get_float accepts every numeric type. */
int rf_gguf_get_int(const rf_gguf *g, const char *key, int64_t *out);
int rf_gguf_get_uint(const rf_gguf *g, const char *key, uint64_t *out);
int rf_gguf_get_float(const rf_gguf *g, const char *key, double *out);
int rf_gguf_get_bool(const rf_gguf *g, const char *key, bool *out);
int rf_gguf_get_str(const rf_gguf *g, const char *key, const char **out);
/* Array of the given element type (or, for elem_type == -1, of any type). */
int rf_gguf_get_arr(const rf_gguf *g, const char *key, int elem_type, const rf_gguf_kv **out);

/* Element accessors for numeric arrays (convert from the stored element type). */
double rf_gguf_arr_float(const rf_gguf_kv *kv, uint64_t i);
int64_t rf_gguf_arr_int(const rf_gguf_kv *kv, uint64_t i);

const char *rf_gguf_vtype_name(uint32_t t);

/* ---- Writer ----
 * Builds a GGUF v3 file: metadata in insertion order, then tensor infos, then data, each tensor
 * aligned to `general.alignment` (32 unless set with rf_gguf_w_u32). Output is loadable by
 * llama.cpp. Tensor data are either given (copied at add time) or produced at write time by a
 * fill callback, so multi-gigabyte files can be made without holding them in memory. */
typedef struct rf_gguf_writer rf_gguf_writer;
typedef int (*rf_gguf_fill_fn)(void *ctx, uint64_t tensor_index, void *dst, uint64_t n_bytes);

rf_gguf_writer *rf_gguf_writer_new(void);
void rf_gguf_writer_free(rf_gguf_writer *w);
void rf_gguf_w_u8(rf_gguf_writer *w, const char *key, uint8_t v);
void rf_gguf_w_u32(rf_gguf_writer *w, const char *key, uint32_t v);
void rf_gguf_w_i32(rf_gguf_writer *w, const char *key, int32_t v);
void rf_gguf_w_u64(rf_gguf_writer *w, const char *key, uint64_t v);
void rf_gguf_w_f32(rf_gguf_writer *w, const char *key, float v);
void rf_gguf_w_bool(rf_gguf_writer *w, const char *key, bool v);
void rf_gguf_w_str(rf_gguf_writer *w, const char *key, const char *v);
/* Numeric array: `data` holds n packed elements of elem_type (copied). */
void rf_gguf_w_arr(rf_gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n);
void rf_gguf_w_arr_str(rf_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Copies every metadata key of `src` whose name starts with `prefix` (e.g. "tokenizer."). */
void rf_gguf_w_copy_kv(rf_gguf_writer *w, const rf_gguf *src, const char *prefix);
/* Adds a tensor. data == NULL: the fill callback given to rf_gguf_writer_write produces it. */
void rf_gguf_w_tensor(rf_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                      const uint64_t *ne, const void *data);
/* Serialises to `path` (or to memory with rf_gguf_writer_to_memory). -1 and an error on failure. */
int rf_gguf_writer_write(rf_gguf_writer *w, const char *path, rf_gguf_fill_fn fill, void *ctx);
int rf_gguf_writer_to_memory(rf_gguf_writer *w, void **buf, size_t *n, rf_gguf_fill_fn fill, void *ctx);

#endif
