/* gguf.c: GGUF reader (mmap, fully bounds-checked) and writer (v3). See gguf.h for the contract.
 *
 * Reader notes
 * - All multi-byte values are decoded byte by byte as little-endian, so the parser never does
 *   an unaligned or host-endian load from the mapping.
 * - The key/value and tensor tables grow as entries are actually parsed, and an array's claimed
 *   length is compared with the bytes left before anything is sized from it, so a forged count
 *   cannot make us allocate more than a small multiple of the file size.
 * - The strings of one string array share a single allocation (arr_str[0] is its start):
 *   vocabularies have 10^5 entries and one malloc each would dominate load time.
 * - Tensor data are aligned in memory to min(general.alignment, 4096): mappings and the copy
 *   made by rf_gguf_open_memory start on a 4096-byte boundary.
 * - A file without tensors may end before its padded data section (vocab-only files written by
 *   the Python tools do); data_offset is then clamped to the file size.
 *
 * Writer notes
 * - The add functions return nothing, so the first invalid call (bad key, tensor shape, ...) is
 *   remembered and reported by the write function, which then writes nothing.
 * - Setting a key again replaces its value in place (first position kept), as llama.cpp does.
 * - A file is written under a temporary name and renamed, so a failed write leaves no partial
 *   file behind.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"
#include "util.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_BUF_ALIGN 4096
#define GGUF_ALIGN_KEY "general.alignment"
/* Longest key/tensor name quoted in an error message (the error buffer is 1 KiB). */
#define NAME_SHOW 96

typedef unsigned long long ull;

/* ---- value type table ---- */

const char *rf_gguf_vtype_name(uint32_t t) {
    static const char *const names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return t < RF_ARRAY_LEN(names) ? names[t] : "unknown";
}

/* Size of a scalar of type t; 0 for string/array/unknown. */
static uint32_t vtype_size(uint32_t t) {
    switch (t) {
    case RF_GGUF_U8: case RF_GGUF_I8: case RF_GGUF_BOOL: return 1;
    case RF_GGUF_U16: case RF_GGUF_I16: return 2;
    case RF_GGUF_U32: case RF_GGUF_I32: case RF_GGUF_F32: return 4;
    case RF_GGUF_U64: case RF_GGUF_I64: case RF_GGUF_F64: return 8;
    default: return 0;
    }
}

static bool vtype_is_int(uint32_t t) {
    return t == RF_GGUF_U8 || t == RF_GGUF_I8 || t == RF_GGUF_U16 || t == RF_GGUF_I16 ||
           t == RF_GGUF_U32 || t == RF_GGUF_I32 || t == RF_GGUF_U64 || t == RF_GGUF_I64;
}

static bool vtype_is_signed(uint32_t t) {
    return t == RF_GGUF_I8 || t == RF_GGUF_I16 || t == RF_GGUF_I32 || t == RF_GGUF_I64;
}

static uint64_t ld_le(const uint8_t *p, unsigned n) {
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void st_le(uint8_t *p, uint64_t v, unsigned n) {
    for (unsigned i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Decodes one scalar of type t at p into the three views of rf_gguf_kv. */
static void decode_scalar(uint32_t t, const uint8_t *p, int64_t *i, uint64_t *u, double *f) {
    uint64_t raw = ld_le(p, vtype_size(t));
    int64_t iv = 0;
    uint64_t uv = 0;
    double fv = 0;
    switch (t) {
    case RF_GGUF_U8: case RF_GGUF_U16: case RF_GGUF_U32: case RF_GGUF_U64: case RF_GGUF_BOOL:
        uv = raw; iv = (int64_t)raw; fv = (double)raw; break;
    case RF_GGUF_I8: iv = (int8_t)(uint8_t)raw; uv = (uint64_t)iv; fv = (double)iv; break;
    case RF_GGUF_I16: iv = (int16_t)(uint16_t)raw; uv = (uint64_t)iv; fv = (double)iv; break;
    case RF_GGUF_I32: iv = (int32_t)(uint32_t)raw; uv = (uint64_t)iv; fv = (double)iv; break;
    case RF_GGUF_I64: memcpy(&iv, &raw, 8); uv = raw; fv = (double)iv; break;
    case RF_GGUF_F32: {
        uint32_t b = (uint32_t)raw;
        float x;
        memcpy(&x, &b, 4);
        fv = x;
        break;
    }
    case RF_GGUF_F64: memcpy(&fv, &raw, 8); break;
    default: break;
    }
    if (i) *i = iv;
    if (u) *u = uv;
    if (f) *f = fv;
}

/* ---- name index (open addressing; slot holds index + 1, 0 = empty) ---- */

typedef struct {
    uint64_t *slot;
    uint64_t cap; /* power of two */
    uint64_t n;
} name_index;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return h;
}

typedef const char *(*name_of_fn)(const void *arr, uint64_t i);

static const char *kv_name(const void *arr, uint64_t i) { return ((const rf_gguf_kv *)arr)[i].key; }
static const char *tensor_name(const void *arr, uint64_t i) {
    return ((const rf_gguf_tensor *)arr)[i].name;
}

/* Returns the index of `name`, or UINT64_MAX. */
static uint64_t index_find(const name_index *ix, const void *arr, name_of_fn name_of, const char *name) {
    if (!ix->cap) return UINT64_MAX;
    for (uint64_t h = hash_str(name) & (ix->cap - 1);; h = (h + 1) & (ix->cap - 1)) {
        uint64_t s = ix->slot[h];
        if (!s) return UINT64_MAX;
        if (!strcmp(name_of(arr, s - 1), name)) return s - 1;
    }
}

static void index_put_raw(name_index *ix, const void *arr, name_of_fn name_of, uint64_t i) {
    uint64_t h = hash_str(name_of(arr, i)) & (ix->cap - 1);
    while (ix->slot[h]) h = (h + 1) & (ix->cap - 1);
    ix->slot[h] = i + 1;
    ix->n++;
}

/* Adds entry i (whose name must not be present yet); grows at 50% load. */
static void index_add(name_index *ix, const void *arr, name_of_fn name_of, uint64_t i) {
    if ((ix->n + 1) * 2 > ix->cap) {
        name_index bigger = {NULL, ix->cap ? ix->cap * 2 : 16, 0};
        bigger.slot = rf_xcalloc(bigger.cap, sizeof(uint64_t));
        for (uint64_t k = 0; k < ix->cap; k++)
            if (ix->slot[k]) index_put_raw(&bigger, arr, name_of, ix->slot[k] - 1);
        free(ix->slot);
        *ix = bigger;
    }
    index_put_raw(ix, arr, name_of, i);
}

/* The public struct is the first member, so rf_gguf * and gguf_priv * convert both ways. */
typedef struct {
    rf_gguf pub;
    name_index kv_ix, t_ix;
} gguf_priv;

/* ---- parser ---- */

typedef struct {
    const uint8_t *b;
    uint64_t size;
    uint64_t pos;
    const char *src; /* path or "<memory>" for messages */
    char what[NAME_SHOW + 32]; /* "key 'x'" / "tensor 'y'" / "header" */
} parser;

static void set_ctx(parser *p, const char *kind, const char *name) {
    size_t n = strlen(name);
    snprintf(p->what, sizeof p->what, "%s '%.*s%s'", kind, NAME_SHOW, name, n > NAME_SHOW ? "..." : "");
}

static uint64_t left(const parser *p) { return p->size - p->pos; }

/* Consumes n bytes; reports what was being read when the file ends first. */
static const uint8_t *take(parser *p, uint64_t n, const char *item) {
    if (n > left(p)) {
        rf_set_error("%s: %s: %s at offset %llu needs %llu bytes but only %llu remain (file size %llu)",
                     p->src, p->what, item, (ull)p->pos, (ull)n, (ull)left(p), (ull)p->size);
        return NULL;
    }
    const uint8_t *r = p->b + p->pos;
    p->pos += n;
    return r;
}

static bool rd_u32(parser *p, uint32_t *v, const char *item) {
    const uint8_t *q = take(p, 4, item);
    if (!q) return false;
    *v = (uint32_t)ld_le(q, 4);
    return true;
}

static bool rd_u64(parser *p, uint64_t *v, const char *item) {
    const uint8_t *q = take(p, 8, item);
    if (!q) return false;
    *v = ld_le(q, 8);
    return true;
}

/* Reads a length-prefixed string without copying. */
static bool rd_str(parser *p, const uint8_t **s, uint64_t *len, const char *item) {
    uint64_t at = p->pos;
    if (!rd_u64(p, len, item)) return false;
    if (*len > left(p)) {
        rf_set_error("%s: %s: %s at offset %llu has length %llu but only %llu bytes remain (file size %llu)",
                     p->src, p->what, item, (ull)at, (ull)*len, (ull)left(p), (ull)p->size);
        return false;
    }
    *s = p->b + p->pos;
    p->pos += *len;
    return true;
}

static char *dup_bytes(const uint8_t *s, uint64_t len) {
    char *d = rf_xmalloc((size_t)len + 1);
    if (len) memcpy(d, s, (size_t)len);
    d[len] = 0;
    return d;
}

/* Names (keys, tensor names) must be non-empty for keys and free of NUL bytes, because lookups
 * compare them as C strings. */
static char *rd_name(parser *p, bool allow_empty, const char *item) {
    uint64_t at = p->pos;
    const uint8_t *s;
    uint64_t len;
    if (!rd_str(p, &s, &len, item)) return NULL;
    if (!len && !allow_empty) {
        rf_set_error("%s: %s: %s at offset %llu is empty", p->src, p->what, item, (ull)at);
        return NULL;
    }
    if (memchr(s, 0, (size_t)len)) {
        rf_set_error("%s: %s: %s at offset %llu contains a NUL byte", p->src, p->what, item, (ull)at);
        return NULL;
    }
    return dup_bytes(s, len);
}

static bool parse_array(parser *p, rf_gguf_kv *kv) {
    uint64_t at = p->pos;
    if (!rd_u32(p, &kv->arr_type, "array element type")) return false;
    uint32_t et = kv->arr_type;
    if (et == RF_GGUF_ARRAY) {
        rf_set_error("%s: %s: nested arrays are not allowed (element type at offset %llu)", p->src, p->what,
                     (ull)at);
        return false;
    }
    if (et > RF_GGUF_F64) {
        rf_set_error("%s: %s: unknown array element type %u at offset %llu", p->src, p->what, et, (ull)at);
        return false;
    }
    uint64_t n_at = p->pos;
    if (!rd_u64(p, &kv->arr_n, "array length")) return false;
    uint64_t n = kv->arr_n;
    if (et != RF_GGUF_STRING) {
        uint64_t bytes;
        if (!rf_mul_u64(n, vtype_size(et), &bytes) || bytes > left(p)) {
            rf_set_error("%s: %s: array of %llu %s at offset %llu does not fit in the %llu bytes left", p->src,
                         p->what, (ull)n, rf_gguf_vtype_name(et), (ull)n_at, (ull)left(p));
            return false;
        }
        if (bytes) {
            kv->arr = rf_xmalloc((size_t)bytes);
            memcpy(kv->arr, p->b + p->pos, (size_t)bytes);
        }
        p->pos += bytes;
        return true;
    }
    /* Each string needs at least its 8-byte length. */
    if (n > left(p) / 8) {
        rf_set_error("%s: %s: array of %llu strings at offset %llu cannot fit in the %llu bytes left", p->src,
                     p->what, (ull)n, (ull)n_at, (ull)left(p));
        return false;
    }
    if (!n) return true;
    /* First pass validates and sizes, second copies into one block. */
    uint64_t start = p->pos, total = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t at = p->pos, len = 0;
        if (left(p) >= 8) len = ld_le(p->b + p->pos, 8);
        if (left(p) < 8 || len > left(p) - 8) {
            rf_set_error("%s: %s: string %llu of the array at offset %llu %s (file size %llu)", p->src, p->what,
                         (ull)i, (ull)at, left(p) < 8 ? "is cut off" : "runs past the end of the file",
                         (ull)p->size);
            return false;
        }
        p->pos += 8 + len;
        total += len + 1; /* bounded by the file size, cannot overflow */
    }
    kv->arr_str = rf_xmalloc((size_t)n * sizeof(char *));
    kv->arr_str_len = rf_xmalloc((size_t)n * sizeof(uint64_t));
    char *blob = rf_xmalloc((size_t)total);
    p->pos = start;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *s;
        uint64_t len;
        rd_str(p, &s, &len, "string"); /* already validated */
        if (len) memcpy(blob, s, (size_t)len);
        blob[len] = 0;
        kv->arr_str[i] = blob;
        kv->arr_str_len[i] = len;
        blob += len + 1;
    }
    return true;
}

static bool parse_kv(parser *p, rf_gguf_kv *kv) {
    uint64_t at = p->pos;
    uint32_t type;
    if (!rd_u32(p, &type, "value type")) return false;
    kv->type = type;
    if (type > RF_GGUF_F64) {
        rf_set_error("%s: %s: unknown value type %u at offset %llu", p->src, p->what, type, (ull)at);
        return false;
    }
    if (type == RF_GGUF_STRING) {
        const uint8_t *s;
        if (!rd_str(p, &s, &kv->str_len, "string value")) return false;
        kv->str = dup_bytes(s, kv->str_len);
        return true;
    }
    if (type == RF_GGUF_ARRAY) return parse_array(p, kv);
    const uint8_t *q = take(p, vtype_size(type), "value");
    if (!q) return false;
    decode_scalar(type, q, &kv->i64, &kv->u64, &kv->f64);
    return true;
}

typedef struct {
    uint64_t off, end, idx;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : 0;
}

static bool parse_tensor(parser *p, rf_gguf_tensor *t, uint64_t alignment) {
    uint32_t nd;
    uint64_t at = p->pos;
    if (!rd_u32(p, &nd, "n_dims")) return false;
    if (nd < 1 || nd > 4) {
        rf_set_error("%s: %s: n_dims %u at offset %llu is outside 1..4", p->src, p->what, nd, (ull)at);
        return false;
    }
    t->n_dims = nd;
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        at = p->pos;
        if (!rd_u64(p, &t->ne[d], "dimension")) return false;
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX) {
            rf_set_error("%s: %s: dimension %u is %lld at offset %llu (must be positive)", p->src, p->what, d,
                         (long long)t->ne[d], (ull)at);
            return false;
        }
        if (!rf_mul_u64(n_elems, t->ne[d], &n_elems) || n_elems > (uint64_t)INT64_MAX) {
            rf_set_error("%s: %s: element count overflows at dimension %u (offset %llu)", p->src, p->what, d,
                         (ull)at);
            return false;
        }
    }
    t->n_elems = n_elems;
    at = p->pos;
    if (!rd_u32(p, &t->type, "tensor type")) return false;
    const rf_type_info *ti = rf_type_get(t->type);
    if (!ti) {
        rf_set_error("%s: %s: unknown tensor type id %u at offset %llu", p->src, p->what, t->type, (ull)at);
        return false;
    }
    if (t->ne[0] % ti->block_elems) {
        rf_set_error("%s: %s: row length %llu is not a multiple of the %s block size %u", p->src, p->what,
                     (ull)t->ne[0], ti->name, ti->block_elems);
        return false;
    }
    uint64_t row;
    if (!rf_row_bytes(t->type, t->ne[0], &row) || !rf_mul_u64(row, t->ne[1], &t->n_bytes) ||
        !rf_mul_u64(t->n_bytes, t->ne[2], &t->n_bytes) || !rf_mul_u64(t->n_bytes, t->ne[3], &t->n_bytes)) {
        rf_set_error("%s: %s: byte size overflows", p->src, p->what);
        return false;
    }
    at = p->pos;
    if (!rd_u64(p, &t->offset, "data offset")) return false;
    if (t->offset % alignment) {
        rf_set_error("%s: %s: data offset %llu (at offset %llu) is not a multiple of the alignment %llu", p->src,
                     p->what, (ull)t->offset, (ull)at, (ull)alignment);
        return false;
    }
    return true;
}

static bool parse_all(parser *p, gguf_priv *gp) {
    rf_gguf *g = &gp->pub;
    snprintf(p->what, sizeof p->what, "header");
    const uint8_t *m = take(p, 4, "magic");
    if (!m) return false;
    if (memcmp(m, "GGUF", 4)) {
        rf_set_error("%s: not a GGUF file (magic %02x %02x %02x %02x at offset 0, expected \"GGUF\")", p->src, m[0],
                     m[1], m[2], m[3]);
        return false;
    }
    if (!rd_u32(p, &g->version, "version")) return false;
    if (g->version != 2 && g->version != 3) {
        uint32_t v = g->version;
        uint32_t sw = (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
        rf_set_error("%s: unsupported GGUF version %u at offset 4 (only 2 and 3 are read)%s", p->src, v,
                     (sw == 2 || sw == 3) ? "; the file looks big-endian" : "");
        return false;
    }
    uint64_t n_tensors, n_kv;
    if (!rd_u64(p, &n_tensors, "tensor count") || !rd_u64(p, &n_kv, "metadata count")) return false;
    /* Minimal sizes: a key/value is 8 (key length) + 1 (key) + 4 (type) + 1 (u8) bytes; a tensor
     * info is 8 (name length) + 4 + 8 (one dim) + 4 + 8 bytes. */
    if (n_kv > left(p) / 14) {
        rf_set_error("%s: metadata count %llu at offset 16 cannot fit in a file of %llu bytes", p->src, (ull)n_kv,
                     (ull)p->size);
        return false;
    }
    if (n_tensors > left(p) / 32) {
        rf_set_error("%s: tensor count %llu at offset 8 cannot fit in a file of %llu bytes", p->src,
                     (ull)n_tensors, (ull)p->size);
        return false;
    }

    uint64_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        uint64_t at = p->pos;
        if (i == cap) {
            cap = cap ? cap * 2 : 16;
            if (cap > n_kv) cap = n_kv;
            g->kv = rf_xrealloc(g->kv, (size_t)cap * sizeof *g->kv);
        }
        rf_gguf_kv *kv = &g->kv[i];
        memset(kv, 0, sizeof *kv);
        g->n_kv = i + 1; /* so close() frees a partly parsed entry */
        snprintf(p->what, sizeof p->what, "metadata");
        char item[48];
        snprintf(item, sizeof item, "key of entry %llu", (ull)i);
        kv->key = rd_name(p, false, item);
        if (!kv->key) return false;
        set_ctx(p, "key", kv->key);
        if (index_find(&gp->kv_ix, g->kv, kv_name, kv->key) != UINT64_MAX) {
            rf_set_error("%s: %s at offset %llu is a duplicate", p->src, p->what, (ull)at);
            return false;
        }
        if (!parse_kv(p, kv)) return false;
        index_add(&gp->kv_ix, g->kv, kv_name, i);
    }

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const rf_gguf_kv *al = rf_gguf_find(g, GGUF_ALIGN_KEY);
    if (al) {
        if (al->type != RF_GGUF_U32) {
            rf_set_error("%s: key '" GGUF_ALIGN_KEY "' has type %s, expected u32", p->src,
                         rf_gguf_vtype_name(al->type));
            return false;
        }
        if (al->u64 == 0 || (al->u64 & (al->u64 - 1))) {
            rf_set_error("%s: key '" GGUF_ALIGN_KEY "' is %llu, not a power of two", p->src, (ull)al->u64);
            return false;
        }
        g->alignment = al->u64;
    }

    cap = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        uint64_t at = p->pos;
        if (i == cap) {
            cap = cap ? cap * 2 : 16;
            if (cap > n_tensors) cap = n_tensors;
            g->tensors = rf_xrealloc(g->tensors, (size_t)cap * sizeof *g->tensors);
        }
        rf_gguf_tensor *t = &g->tensors[i];
        memset(t, 0, sizeof *t);
        g->n_tensors = i + 1;
        snprintf(p->what, sizeof p->what, "tensor infos");
        char item[48];
        snprintf(item, sizeof item, "name of tensor %llu", (ull)i);
        t->name = rd_name(p, true, item);
        if (!t->name) return false;
        set_ctx(p, "tensor", t->name);
        if (index_find(&gp->t_ix, g->tensors, tensor_name, t->name) != UINT64_MAX) {
            rf_set_error("%s: %s at offset %llu is a duplicate", p->src, p->what, (ull)at);
            return false;
        }
        if (!parse_tensor(p, t, g->alignment)) return false;
        index_add(&gp->t_ix, g->tensors, tensor_name, i);
    }

    /* The data section starts at the next multiple of the alignment. */
    uint64_t pad = (g->alignment - p->pos % g->alignment) % g->alignment;
    if (!rf_add_u64(p->pos, pad, &g->data_offset)) {
        rf_set_error("%s: data section offset overflows", p->src);
        return false;
    }
    if (!n_tensors) {
        /* Keeps base + data_offset inside (or one past) the buffer. */
        if (g->data_offset > p->size) g->data_offset = p->size;
        return true;
    }
    if (g->data_offset > p->size) {
        rf_set_error("%s: data section at offset %llu starts past the end of the file (%llu bytes)", p->src,
                     (ull)g->data_offset, (ull)p->size);
        return false;
    }
    uint64_t data_size = p->size - g->data_offset;
    span *sp = rf_xmalloc((size_t)n_tensors * sizeof *sp);
    bool ok = true;
    for (uint64_t i = 0; i < n_tensors && ok; i++) {
        rf_gguf_tensor *t = &g->tensors[i];
        uint64_t end;
        if (!rf_add_u64(t->offset, t->n_bytes, &end) || end > data_size) {
            set_ctx(p, "tensor", t->name);
            rf_set_error("%s: %s: %llu bytes of data at data offset %llu run past the end of the file (data "
                         "section %llu..%llu)", p->src, p->what, (ull)t->n_bytes, (ull)t->offset,
                         (ull)g->data_offset, (ull)p->size);
            ok = false;
            break;
        }
        t->data = p->b + g->data_offset + t->offset;
        sp[i] = (span){t->offset, end, i};
    }
    if (ok) {
        qsort(sp, (size_t)n_tensors, sizeof *sp, span_cmp);
        for (uint64_t i = 1; i < n_tensors; i++) {
            if (sp[i].off < sp[i - 1].end) {
                const char *a = g->tensors[sp[i - 1].idx].name, *b = g->tensors[sp[i].idx].name;
                rf_set_error("%s: tensor '%.*s' (data %llu..%llu) overlaps tensor '%.*s' (data from %llu)", p->src,
                             NAME_SHOW, a, (ull)sp[i - 1].off, (ull)sp[i - 1].end, NAME_SHOW, b, (ull)sp[i].off);
                ok = false;
                break;
            }
        }
    }
    free(sp);
    return ok;
}

static rf_gguf *parse_buffer(const uint8_t *b, uint64_t size, const char *src, void *map, void *owned) {
    gguf_priv *gp = rf_xcalloc(1, sizeof *gp);
    rf_gguf *g = &gp->pub;
    g->base = b;
    g->size = size;
    g->map = map;
    g->owned = owned;
    parser p = {.b = b, .size = size, .pos = 0, .src = src};
    if (!parse_all(&p, gp)) {
        rf_gguf_close(g);
        return NULL;
    }
    return g;
}

rf_gguf *rf_gguf_open(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rf_set_error("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rf_set_error("%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        rf_set_error("%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size <= 0) {
        rf_set_error("%s: empty file, not a GGUF file", path);
        close(fd);
        return NULL;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        rf_set_error("%s: file too large to map (%llu bytes)", path, (ull)st.st_size);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) {
        rf_set_error("%s: mmap failed: %s", path, strerror(e));
        return NULL;
    }
    return parse_buffer(map, (uint64_t)st.st_size, path, map, NULL);
}

rf_gguf *rf_gguf_open_memory(const void *buf, size_t n) {
    if (!buf || !n) {
        rf_set_error("<memory>: empty buffer, not a GGUF file");
        return NULL;
    }
    if (n > SIZE_MAX - GGUF_BUF_ALIGN) {
        rf_set_error("<memory>: buffer too large (%zu bytes)", n);
        return NULL;
    }
    size_t cap = (n + GGUF_BUF_ALIGN - 1) / GGUF_BUF_ALIGN * GGUF_BUF_ALIGN;
    void *copy = aligned_alloc(GGUF_BUF_ALIGN, cap);
    if (!copy) {
        rf_set_error("<memory>: out of memory copying %zu bytes", n);
        return NULL;
    }
    memcpy(copy, buf, n);
    return parse_buffer(copy, n, "<memory>", NULL, copy);
}

void rf_gguf_close(rf_gguf *g) {
    if (!g) return;
    gguf_priv *gp = (gguf_priv *)g;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        rf_gguf_kv *kv = &g->kv[i];
        free(kv->key);
        free(kv->str);
        free(kv->arr);
        if (kv->arr_str) free(kv->arr_str[0]);
        free(kv->arr_str);
        free(kv->arr_str_len);
    }
    free(g->kv);
    for (uint64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->tensors);
    free(gp->kv_ix.slot);
    free(gp->t_ix.slot);
    if (g->map) munmap(g->map, (size_t)g->size);
    free(g->owned);
    free(gp);
}

/* ---- lookups and typed getters ---- */

const rf_gguf_kv *rf_gguf_find(const rf_gguf *g, const char *key) {
    if (!g || !key) return NULL;
    const gguf_priv *gp = (const gguf_priv *)g;
    uint64_t i = index_find(&gp->kv_ix, g->kv, kv_name, key);
    return i == UINT64_MAX ? NULL : &g->kv[i];
}

const rf_gguf_tensor *rf_gguf_find_tensor(const rf_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    const gguf_priv *gp = (const gguf_priv *)g;
    uint64_t i = index_find(&gp->t_ix, g->tensors, tensor_name, name);
    return i == UINT64_MAX ? NULL : &g->tensors[i];
}

static int wrong_type(const rf_gguf_kv *kv, const char *expected) {
    rf_set_error("key '%.*s' has type %s, expected %s", NAME_SHOW, kv->key, rf_gguf_vtype_name(kv->type), expected);
    return -1;
}

int rf_gguf_get_int(const rf_gguf *g, const char *key, int64_t *out) {
    const rf_gguf_kv *kv = rf_gguf_find(g, key);
    if (!kv) return 0;
    if (!vtype_is_int(kv->type) && kv->type != RF_GGUF_BOOL) return wrong_type(kv, "an integer");
    if (kv->type == RF_GGUF_U64 && kv->u64 > (uint64_t)INT64_MAX) {
        rf_set_error("key '%.*s' (u64) value %llu does not fit in i64", NAME_SHOW, kv->key, (ull)kv->u64);
        return -1;
    }
    *out = kv->i64;
    return 1;
}

int rf_gguf_get_uint(const rf_gguf *g, const char *key, uint64_t *out) {
    const rf_gguf_kv *kv = rf_gguf_find(g, key);
    if (!kv) return 0;
    if (!vtype_is_int(kv->type) && kv->type != RF_GGUF_BOOL) return wrong_type(kv, "an unsigned integer");
    if (vtype_is_signed(kv->type) && kv->i64 < 0) {
        rf_set_error("key '%.*s' (%s) value %lld is negative, expected an unsigned integer", NAME_SHOW, kv->key,
                     rf_gguf_vtype_name(kv->type), (long long)kv->i64);
        return -1;
    }
    *out = kv->u64;
    return 1;
}

int rf_gguf_get_float(const rf_gguf *g, const char *key, double *out) {
    const rf_gguf_kv *kv = rf_gguf_find(g, key);
    if (!kv) return 0;
    if (!vtype_is_int(kv->type) && kv->type != RF_GGUF_F32 && kv->type != RF_GGUF_F64)
        return wrong_type(kv, "a number");
    *out = kv->f64;
    return 1;
}

int rf_gguf_get_bool(const rf_gguf *g, const char *key, bool *out) {
    const rf_gguf_kv *kv = rf_gguf_find(g, key);
    if (!kv) return 0;
    if (kv->type != RF_GGUF_BOOL) return wrong_type(kv, "bool");
    *out = kv->u64 != 0;
    return 1;
}

int rf_gguf_get_str(const rf_gguf *g, const char *key, const char **out) {
    const rf_gguf_kv *kv = rf_gguf_find(g, key);
    if (!kv) return 0;
    if (kv->type != RF_GGUF_STRING) return wrong_type(kv, "string");
    *out = kv->str;
    return 1;
}

int rf_gguf_get_arr(const rf_gguf *g, const char *key, int elem_type, const rf_gguf_kv **out) {
    const rf_gguf_kv *kv = rf_gguf_find(g, key);
    if (!kv) return 0;
    if (kv->type != RF_GGUF_ARRAY) return wrong_type(kv, "array");
    if (elem_type >= 0 && kv->arr_type != (uint32_t)elem_type) {
        rf_set_error("key '%.*s' is an array of %s, expected an array of %s", NAME_SHOW, kv->key,
                     rf_gguf_vtype_name(kv->arr_type), rf_gguf_vtype_name((uint32_t)elem_type));
        return -1;
    }
    *out = kv;
    return 1;
}

/* Out-of-range indices and string arrays read as 0. */
double rf_gguf_arr_float(const rf_gguf_kv *kv, uint64_t i) {
    if (!kv || kv->type != RF_GGUF_ARRAY || i >= kv->arr_n || !vtype_size(kv->arr_type)) return 0;
    uint32_t es = vtype_size(kv->arr_type);
    double f;
    decode_scalar(kv->arr_type, (const uint8_t *)kv->arr + i * es, NULL, NULL, &f);
    return f;
}

int64_t rf_gguf_arr_int(const rf_gguf_kv *kv, uint64_t i) {
    if (!kv || kv->type != RF_GGUF_ARRAY || i >= kv->arr_n || !vtype_size(kv->arr_type)) return 0;
    uint32_t es = vtype_size(kv->arr_type);
    int64_t v;
    double f;
    decode_scalar(kv->arr_type, (const uint8_t *)kv->arr + i * es, &v, NULL, &f);
    if (kv->arr_type == RF_GGUF_F32 || kv->arr_type == RF_GGUF_F64) {
        /* Truncate toward zero, saturating (the cast itself would be undefined out of range). */
        if (f != f) return 0;
        if (f >= 9223372036854775807.0) return INT64_MAX;
        if (f <= -9223372036854775808.0) return INT64_MIN;
        return (int64_t)f;
    }
    return v;
}

/* ---- writer ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void b_put(bytes *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 64;
        while (c < b->n + n) c *= 2;
        b->p = rf_xrealloc(b->p, c);
        b->cap = c;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void b_le(bytes *b, uint64_t v, unsigned n) {
    uint8_t t[8];
    st_le(t, v, n);
    b_put(b, t, n);
}

static void b_str(bytes *b, const char *s, uint64_t len) {
    b_le(b, len, 8);
    b_put(b, s, (size_t)len);
}

typedef struct {
    char *key;
    uint32_t type;
    bytes val; /* serialised value, without the type */
} wkv;

typedef struct {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
    uint64_t n_bytes;
    void *data; /* NULL: produced by the fill callback */
} wtensor;

struct rf_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    /* First error of a void add call; reported by the write functions. */
    char err[512];
};

rf_gguf_writer *rf_gguf_writer_new(void) { return rf_xcalloc(1, sizeof(rf_gguf_writer)); }

void rf_gguf_writer_free(rf_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

static void w_fail(rf_gguf_writer *w, const char *fmt, ...) RF_PRINTF(2, 3);
static void w_fail(rf_gguf_writer *w, const char *fmt, ...) {
    if (w->err[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

/* Takes ownership of val. A key written twice keeps its first position and the latest value. */
static void w_set(rf_gguf_writer *w, const char *key, uint32_t type, bytes val) {
    if (!key || !*key) {
        w_fail(w, "gguf writer: metadata key is empty");
        free(val.p);
        return;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kv[i].key, key)) {
            free(w->kv[i].val.p);
            w->kv[i].type = type;
            w->kv[i].val = val;
            return;
        }
    }
    if (w->n_kv == w->cap_kv) {
        w->cap_kv = w->cap_kv ? w->cap_kv * 2 : 16;
        w->kv = rf_xrealloc(w->kv, w->cap_kv * sizeof *w->kv);
    }
    w->kv[w->n_kv++] = (wkv){rf_xstrdup(key), type, val};
}

static void w_scalar(rf_gguf_writer *w, const char *key, uint32_t type, uint64_t raw) {
    bytes b = {0};
    b_le(&b, raw, vtype_size(type));
    w_set(w, key, type, b);
}

void rf_gguf_w_u8(rf_gguf_writer *w, const char *key, uint8_t v) { w_scalar(w, key, RF_GGUF_U8, v); }
void rf_gguf_w_u32(rf_gguf_writer *w, const char *key, uint32_t v) { w_scalar(w, key, RF_GGUF_U32, v); }
void rf_gguf_w_i32(rf_gguf_writer *w, const char *key, int32_t v) {
    w_scalar(w, key, RF_GGUF_I32, (uint32_t)v);
}
void rf_gguf_w_u64(rf_gguf_writer *w, const char *key, uint64_t v) { w_scalar(w, key, RF_GGUF_U64, v); }
void rf_gguf_w_f32(rf_gguf_writer *w, const char *key, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    w_scalar(w, key, RF_GGUF_F32, u);
}
void rf_gguf_w_bool(rf_gguf_writer *w, const char *key, bool v) { w_scalar(w, key, RF_GGUF_BOOL, v ? 1 : 0); }

static void w_str_len(rf_gguf_writer *w, const char *key, const char *v, uint64_t len) {
    bytes b = {0};
    b_str(&b, v, len);
    w_set(w, key, RF_GGUF_STRING, b);
}

void rf_gguf_w_str(rf_gguf_writer *w, const char *key, const char *v) {
    if (!v) {
        w_fail(w, "gguf writer: key '%.*s': string value is NULL", NAME_SHOW, key ? key : "");
        return;
    }
    w_str_len(w, key, v, strlen(v));
}

void rf_gguf_w_arr(rf_gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n) {
    uint32_t es = vtype_size(elem_type);
    uint64_t nb;
    if (!es) {
        w_fail(w, "gguf writer: key '%.*s': array element type %s (%u) is not a numeric type", NAME_SHOW,
               key ? key : "", rf_gguf_vtype_name(elem_type), elem_type);
        return;
    }
    if (!rf_mul_u64(n, es, &nb) || nb > SIZE_MAX / 2 || (n && !data)) {
        w_fail(w, "gguf writer: key '%.*s': bad array of %llu elements", NAME_SHOW, key ? key : "", (ull)n);
        return;
    }
    bytes b = {0};
    b_le(&b, elem_type, 4);
    b_le(&b, n, 8);
    b_put(&b, data, (size_t)nb);
    w_set(w, key, RF_GGUF_ARRAY, b);
}

static void w_arr_str_len(rf_gguf_writer *w, const char *key, const char *const *strs, const uint64_t *lens,
                          uint64_t n) {
    if (n && !strs) {
        w_fail(w, "gguf writer: key '%.*s': string array is NULL", NAME_SHOW, key ? key : "");
        return;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) {
            w_fail(w, "gguf writer: key '%.*s': string %llu of the array is NULL", NAME_SHOW, key ? key : "",
                   (ull)i);
            return;
        }
    }
    bytes b = {0};
    b_le(&b, RF_GGUF_STRING, 4);
    b_le(&b, n, 8);
    for (uint64_t i = 0; i < n; i++) b_str(&b, strs[i], lens ? lens[i] : strlen(strs[i]));
    w_set(w, key, RF_GGUF_ARRAY, b);
}

void rf_gguf_w_arr_str(rf_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    w_arr_str_len(w, key, strs, NULL, n);
}

void rf_gguf_w_copy_kv(rf_gguf_writer *w, const rf_gguf *src, const char *prefix) {
    if (!src) {
        w_fail(w, "gguf writer: copy_kv from a NULL file");
        return;
    }
    size_t pl = prefix ? strlen(prefix) : 0;
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const rf_gguf_kv *kv = &src->kv[i];
        if (pl && strncmp(kv->key, prefix, pl)) continue;
        if (kv->type == RF_GGUF_STRING) {
            w_str_len(w, kv->key, kv->str, kv->str_len);
        } else if (kv->type == RF_GGUF_ARRAY && kv->arr_type == RF_GGUF_STRING) {
            w_arr_str_len(w, kv->key, (const char *const *)kv->arr_str, kv->arr_str_len, kv->arr_n);
        } else if (kv->type == RF_GGUF_ARRAY) {
            rf_gguf_w_arr(w, kv->key, kv->arr_type, kv->arr, kv->arr_n);
        } else if (kv->type == RF_GGUF_F32) {
            rf_gguf_w_f32(w, kv->key, (float)kv->f64);
        } else if (kv->type == RF_GGUF_F64) {
            uint64_t u;
            memcpy(&u, &kv->f64, 8);
            w_scalar(w, kv->key, RF_GGUF_F64, u);
        } else {
            w_scalar(w, kv->key, kv->type, kv->u64);
        }
    }
}

void rf_gguf_w_tensor(rf_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                      const void *data) {
    if (!name) {
        w_fail(w, "gguf writer: tensor name is NULL");
        return;
    }
    const char *sname = name;
    for (size_t i = 0; i < w->n_t; i++) {
        if (!strcmp(w->t[i].name, name)) {
            w_fail(w, "gguf writer: duplicate tensor '%.*s'", NAME_SHOW, sname);
            return;
        }
    }
    const rf_type_info *ti = rf_type_get(type);
    if (!ti) {
        w_fail(w, "gguf writer: tensor '%.*s': unknown type id %u", NAME_SHOW, sname, type);
        return;
    }
    if (n_dims < 1 || n_dims > 4 || !ne) {
        w_fail(w, "gguf writer: tensor '%.*s': n_dims %u is outside 1..4", NAME_SHOW, sname, n_dims);
        return;
    }
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        t.ne[d] = ne[d];
        if (!ne[d] || ne[d] > (uint64_t)INT64_MAX || !rf_mul_u64(n_elems, ne[d], &n_elems) ||
            n_elems > (uint64_t)INT64_MAX) {
            w_fail(w, "gguf writer: tensor '%.*s': bad dimension %u (%llu)", NAME_SHOW, sname, d, (ull)ne[d]);
            return;
        }
    }
    uint64_t row;
    if (!rf_row_bytes(type, t.ne[0], &row) || !rf_mul_u64(row, t.ne[1], &t.n_bytes) ||
        !rf_mul_u64(t.n_bytes, t.ne[2], &t.n_bytes) || !rf_mul_u64(t.n_bytes, t.ne[3], &t.n_bytes) ||
        t.n_bytes > SIZE_MAX / 2) {
        w_fail(w, "gguf writer: tensor '%.*s': row length %llu is not a multiple of the %s block size %u or the "
               "size overflows", NAME_SHOW, sname, (ull)t.ne[0], ti->name, ti->block_elems);
        return;
    }
    if (data) {
        t.data = rf_xmalloc((size_t)t.n_bytes);
        memcpy(t.data, data, (size_t)t.n_bytes);
    }
    t.name = rf_xstrdup(name);
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? w->cap_t * 2 : 16;
        w->t = rf_xrealloc(w->t, w->cap_t * sizeof *w->t);
    }
    w->t[w->n_t++] = t;
}

/* Serialises everything before the data section (padding included) and computes the size of the
 * whole file. */
static int w_header(rf_gguf_writer *w, bytes *h, uint64_t *align_out, uint64_t *total) {
    if (w->err[0]) {
        rf_set_error("%s", w->err);
        return -1;
    }
    uint64_t align = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, GGUF_ALIGN_KEY)) continue;
        if (w->kv[i].type != RF_GGUF_U32) {
            rf_set_error("gguf writer: '" GGUF_ALIGN_KEY "' must be u32, not %s", rf_gguf_vtype_name(w->kv[i].type));
            return -1;
        }
        align = ld_le(w->kv[i].val.p, 4);
        if (!align || (align & (align - 1))) {
            rf_set_error("gguf writer: '" GGUF_ALIGN_KEY "' is %llu, not a power of two", (ull)align);
            return -1;
        }
    }
    b_put(h, "GGUF", 4);
    b_le(h, 3, 4);
    b_le(h, w->n_t, 8);
    b_le(h, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        b_str(h, w->kv[i].key, strlen(w->kv[i].key));
        b_le(h, w->kv[i].type, 4);
        b_put(h, w->kv[i].val.p, w->kv[i].val.n);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        b_str(h, t->name, strlen(t->name));
        b_le(h, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) b_le(h, t->ne[d], 8);
        b_le(h, t->type, 4);
        b_le(h, off, 8);
        uint64_t padded = t->n_bytes + (align - t->n_bytes % align) % align;
        if (!rf_add_u64(off, padded, &off)) {
            rf_set_error("gguf writer: total data size overflows");
            return -1;
        }
    }
    static const uint8_t zeros[64];
    uint64_t pad = (align - h->n % align) % align;
    while (pad) {
        size_t k = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
        b_put(h, zeros, k);
        pad -= k;
    }
    *align_out = align;
    if (!rf_add_u64(h->n, off, total) || *total > SIZE_MAX) {
        rf_set_error("gguf writer: file size overflows");
        return -1;
    }
    return 0;
}

static int w_fill(rf_gguf_writer *w, size_t i, void *dst, rf_gguf_fill_fn fill, void *ctx) {
    const wtensor *t = &w->t[i];
    if (t->data) {
        memcpy(dst, t->data, (size_t)t->n_bytes);
        return 0;
    }
    if (!fill) {
        rf_set_error("gguf writer: tensor '%.*s' has no data and no fill callback was given", NAME_SHOW, t->name);
        return -1;
    }
    rf_clear_error();
    if (fill(ctx, i, dst, t->n_bytes) != 0) {
        rf_prefix_error("gguf writer: fill callback failed for tensor '%.*s'", NAME_SHOW, t->name);
        return -1;
    }
    return 0;
}

int rf_gguf_writer_to_memory(rf_gguf_writer *w, void **buf, size_t *n, rf_gguf_fill_fn fill, void *ctx) {
    bytes h = {0};
    uint64_t align, total;
    *buf = NULL;
    *n = 0;
    if (w_header(w, &h, &align, &total) != 0) {
        free(h.p);
        return -1;
    }
    uint8_t *out = rf_xcalloc(1, (size_t)total);
    memcpy(out, h.p, h.n);
    uint64_t pos = h.n;
    free(h.p);
    for (size_t i = 0; i < w->n_t; i++) {
        if (w_fill(w, i, out + pos, fill, ctx) != 0) {
            free(out);
            return -1;
        }
        pos += w->t[i].n_bytes + (align - w->t[i].n_bytes % align) % align;
    }
    *buf = out;
    *n = (size_t)total;
    return 0;
}

static bool write_zeros(FILE *f, uint64_t n) {
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        if (fwrite(zeros, 1, k, f) != k) return false;
        n -= k;
    }
    return true;
}

/* Writes to a temporary name beside `path` and renames it into place, so a failed write never
 * leaves a truncated file that looks like a model. */
int rf_gguf_writer_write(rf_gguf_writer *w, const char *path, rf_gguf_fill_fn fill, void *ctx) {
    bytes h = {0};
    uint64_t align, total;
    if (w_header(w, &h, &align, &total) != 0) {
        free(h.p);
        return -1;
    }
    size_t pl = strlen(path);
    char *tmp = rf_xmalloc(pl + 16);
    snprintf(tmp, pl + 16, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        rf_set_error("%s: cannot create: %s", tmp, strerror(errno));
        free(h.p);
        free(tmp);
        return -1;
    }
    bool ok = fwrite(h.p, 1, h.n, f) == h.n;
    free(h.p);
    int err = 0; /* 1: I/O error (errno), 2: error already set */
    if (!ok) err = 1;
    for (size_t i = 0; i < w->n_t && !err; i++) {
        const wtensor *t = &w->t[i];
        void *scratch = NULL;
        const void *src = t->data;
        if (!src) {
            /* one tensor at a time; a tensor too large for this host is an error, not an abort */
            scratch = t->n_bytes <= SIZE_MAX ? malloc((size_t)t->n_bytes ? (size_t)t->n_bytes : 1) : NULL;
            if (!scratch) {
                rf_set_error("gguf writer: cannot allocate %llu bytes for tensor '%.*s'", (unsigned long long)t->n_bytes,
                             NAME_SHOW, t->name);
                err = 2;
                break;
            }
            if (w_fill(w, i, scratch, fill, ctx) != 0) {
                free(scratch);
                err = 2;
                break;
            }
            src = scratch;
        }
        if (fwrite(src, 1, (size_t)t->n_bytes, f) != t->n_bytes ||
            !write_zeros(f, (align - t->n_bytes % align) % align))
            err = 1;
        free(scratch);
    }
    if (!err && fflush(f) != 0) err = 1;
    int e = errno;
    if (fclose(f) != 0 && !err) {
        err = 1;
        e = errno;
    }
    if (!err && rename(tmp, path) != 0) {
        err = 1;
        e = errno;
    }
    if (err) {
        if (err == 1) rf_set_error("%s: write failed: %s", path, strerror(e));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}
