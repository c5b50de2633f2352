/* GGUF reader/writer: round trip of every value type and tensor layout, every real file in
 * ../shared, and a corpus of broken files (explicit defects, truncation at every header offset,
 * seeded random mutations) that must be rejected with a message and never crash or leak. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/gguf.h"
#include "core/util.h"
#include "test.h"

/* ---- raw byte builder, for files the writer refuses to make ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} tb;

static void tb_put(tb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void tb_le(tb *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        tb_put(b, &c, 1);
    }
}
static void tb_u32(tb *b, uint32_t v) { tb_le(b, v, 4); }
static void tb_u64(tb *b, uint64_t v) { tb_le(b, v, 8); }
static void tb_str(tb *b, const char *s) {
    tb_u64(b, strlen(s));
    tb_put(b, s, strlen(s));
}
static void tb_hdr(tb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    tb_put(b, "GGUF", 4);
    tb_u32(b, version);
    tb_u64(b, n_tensors);
    tb_u64(b, n_kv);
}
static void tb_kv_u32(tb *b, const char *key, uint32_t v) {
    tb_str(b, key);
    tb_u32(b, RF_GGUF_U32);
    tb_u32(b, v);
}
static void tb_tensor(tb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    tb_str(b, name);
    tb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) tb_u64(b, ne[d]);
    tb_u32(b, type);
    tb_u64(b, off);
}
static void tb_pad(tb *b, size_t align) {
    while (b->n % align) tb_le(b, 0, 1);
}

/* Opens from memory; on failure the error must be a real message. Returns the file (or NULL). */
static rf_gguf *open_mem(const void *p, size_t n, bool *msg_ok) {
    rf_clear_error();
    rf_gguf *g = rf_gguf_open_memory(p, n);
    if (msg_ok) *msg_ok = g || (strlen(rf_last_error()) > 10 && strcmp(rf_last_error(), "unknown error"));
    return g;
}

/* Touches everything a successfully parsed file exposes, so ASan sees any bad pointer. */
static bool walk_ok(const rf_gguf *g) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const rf_gguf_kv *kv = &g->kv[i];
        if (!kv->key || !*kv->key || rf_gguf_find(g, kv->key) != kv) return false;
        if (kv->type == RF_GGUF_STRING) sum += strlen(kv->str) + kv->str_len;
        if (kv->type == RF_GGUF_ARRAY) {
            for (uint64_t j = 0; j < kv->arr_n; j++) {
                if (kv->arr_type == RF_GGUF_STRING)
                    sum += (uint8_t)kv->arr_str[j][kv->arr_str_len[j]] + strlen(kv->arr_str[j]);
                else
                    sum += (uint64_t)rf_gguf_arr_int(kv, j);
            }
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const rf_gguf_tensor *t = &g->tensors[i];
        const uint8_t *d = t->data;
        if (rf_gguf_find_tensor(g, t->name) != t) return false;
        if (d < g->base + g->data_offset || t->n_bytes > g->size ||
            (uint64_t)(d - g->base) > g->size - t->n_bytes)
            return false;
        sum += d[0] + d[t->n_bytes - 1];
    }
    return sum != 1; /* keeps the reads */
}

/* ---- round trip ---- */

static const char *const str_items[] = {"", "hello", "", "w\xc3\xb6rld", "x"};

/* Every scalar type and an array of every element type, hand-made (the writer has no setter
 * for some of them; they reach it through copy_kv). */
static void make_all_types(tb *b) {
    tb_hdr(b, 3, 0, 26);
    static const uint32_t sizes[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    static const uint64_t raw[13] = {200, 0x80, 65000, 0x8000, 4000000000u, 0xfffffff6u, 0x3fc00000u /* 1.5f */, 1,
                                     0, 0, 0xfedcba9876543210ULL, 0xfffffffffffffffbULL,
                                     0x400921fb54442d18ULL /* pi */};
    char key[32];
    for (uint32_t t = 0; t <= 12; t++) {
        if (t == RF_GGUF_STRING || t == RF_GGUF_ARRAY) continue;
        snprintf(key, sizeof key, "s.%s", rf_gguf_vtype_name(t));
        tb_str(b, key);
        tb_u32(b, t);
        tb_le(b, raw[t], (int)sizes[t]);
    }
    /* 11 scalars so far */
    tb_str(b, "s.string");
    tb_u32(b, RF_GGUF_STRING);
    tb_str(b, "a string");
    tb_str(b, "s.empty");
    tb_u32(b, RF_GGUF_STRING);
    tb_str(b, "");
    for (uint32_t t = 0; t <= 12; t++) {
        if (t == RF_GGUF_STRING || t == RF_GGUF_ARRAY) continue;
        snprintf(key, sizeof key, "a.%s", rf_gguf_vtype_name(t));
        tb_str(b, key);
        tb_u32(b, RF_GGUF_ARRAY);
        tb_u32(b, t);
        tb_u64(b, 3);
        /* elements: 0, a type-specific value, 2 */
        uint64_t el[3] = {0, raw[t], 2};
        if (t == RF_GGUF_F32) el[1] = 0xc0200000u /* -2.5f */, el[2] = 0x40000000u;
        if (t == RF_GGUF_F64) el[1] = 0xc004000000000000ULL /* -2.5 */, el[2] = 0x4000000000000000ULL;
        for (int i = 0; i < 3; i++) tb_le(b, el[i], (int)sizes[t]);
    }
    tb_str(b, "a.string");
    tb_u32(b, RF_GGUF_ARRAY);
    tb_u32(b, RF_GGUF_STRING);
    tb_u64(b, RF_ARRAY_LEN(str_items));
    for (size_t i = 0; i < RF_ARRAY_LEN(str_items); i++) tb_str(b, str_items[i]);
    tb_str(b, "a.empty");
    tb_u32(b, RF_GGUF_ARRAY);
    tb_u32(b, RF_GGUF_U32);
    tb_u64(b, 0);
    tb_pad(b, 32);
}

static void check_all_types(const rf_gguf *g, const char *what) {
    int64_t i;
    uint64_t u;
    double f;
    bool bo;
    const char *s;
    const rf_gguf_kv *a;
    CHECK(rf_gguf_get_uint(g, "s.u8", &u) == 1 && u == 200, "%s: u8", what);
    CHECK(rf_gguf_get_int(g, "s.i8", &i) == 1 && i == -128, "%s: i8", what);
    CHECK(rf_gguf_get_uint(g, "s.u16", &u) == 1 && u == 65000, "%s: u16", what);
    CHECK(rf_gguf_get_int(g, "s.i16", &i) == 1 && i == -32768, "%s: i16", what);
    CHECK(rf_gguf_get_uint(g, "s.u32", &u) == 1 && u == 4000000000u, "%s: u32", what);
    CHECK(rf_gguf_get_int(g, "s.i32", &i) == 1 && i == -10, "%s: i32", what);
    CHECK(rf_gguf_get_float(g, "s.f32", &f) == 1 && f == 1.5, "%s: f32", what);
    CHECK(rf_gguf_get_bool(g, "s.bool", &bo) == 1 && bo, "%s: bool", what);
    CHECK(rf_gguf_get_uint(g, "s.u64", &u) == 1 && u == 0xfedcba9876543210ULL, "%s: u64", what);
    CHECK(rf_gguf_get_int(g, "s.i64", &i) == 1 && i == -5, "%s: i64", what);
    CHECK(rf_gguf_get_float(g, "s.f64", &f) == 1 && f == 3.141592653589793, "%s: f64", what);
    CHECK(rf_gguf_get_float(g, "s.i32", &f) == 1 && f == -10.0, "%s: int read as float", what);
    CHECK(rf_gguf_get_str(g, "s.string", &s) == 1 && !strcmp(s, "a string"), "%s: string", what);
    CHECK(rf_gguf_get_str(g, "s.empty", &s) == 1 && !strcmp(s, "") && rf_gguf_find(g, "s.empty")->str_len == 0,
          "%s: empty string", what);
    /* typed-getter refusals */
    CHECK(rf_gguf_get_int(g, "s.u64", &i) == -1 && strstr(rf_last_error(), "s.u64"), "%s: u64 too big for int", what);
    CHECK(rf_gguf_get_uint(g, "s.i8", &u) == -1 && strstr(rf_last_error(), "negative"), "%s: negative uint", what);
    CHECK(rf_gguf_get_str(g, "s.u32", &s) == -1 && strstr(rf_last_error(), "u32") &&
              strstr(rf_last_error(), "string"),
          "%s: wrong type message names both types: %s", what, rf_last_error());
    CHECK(rf_gguf_get_bool(g, "s.u8", &bo) == -1, "%s: int is not bool", what);
    CHECK(rf_gguf_get_float(g, "s.string", &f) == -1, "%s: string is not float", what);
    CHECK(rf_gguf_get_int(g, "missing", &i) == 0 && rf_gguf_get_str(g, "missing", &s) == 0, "%s: absent", what);
    CHECK(rf_gguf_get_arr(g, "a.u8", RF_GGUF_U16, &a) == -1 && rf_gguf_get_arr(g, "s.u8", -1, &a) == -1,
          "%s: array type mismatch", what);
    /* arrays */
    static const double expect_f[13] = {200, -128, 65000, -32768, 4000000000.0, -10, -2.5, 1, 0, 0,
                                        (double)0xfedcba9876543210ULL, -5, -2.5};
    int bad = 0;
    for (uint32_t t = 0; t <= 12; t++) {
        if (t == RF_GGUF_STRING || t == RF_GGUF_ARRAY) continue;
        char key[32];
        snprintf(key, sizeof key, "a.%s", rf_gguf_vtype_name(t));
        if (rf_gguf_get_arr(g, key, (int)t, &a) != 1 || a->arr_n != 3) {
            bad++;
            continue;
        }
        if (rf_gguf_arr_int(a, 0) != 0 || rf_gguf_arr_float(a, 2) != 2 || rf_gguf_arr_float(a, 1) != expect_f[t] ||
            rf_gguf_arr_float(a, 3) != 0)
            bad++;
    }
    CHECK(bad == 0, "%s: %d numeric arrays differ", what, bad);
    CHECK(rf_gguf_get_arr(g, "a.string", RF_GGUF_STRING, &a) == 1 && a->arr_n == RF_ARRAY_LEN(str_items), "%s: string array",
          what);
    bad = 0;
    for (size_t k = 0; k < RF_ARRAY_LEN(str_items) && a && a->arr_type == RF_GGUF_STRING; k++)
        if (strcmp(a->arr_str[k], str_items[k]) || a->arr_str_len[k] != strlen(str_items[k])) bad++;
    CHECK(bad == 0, "%s: string array items", what);
    CHECK(rf_gguf_get_arr(g, "a.empty", -1, &a) == 1 && a->arr_n == 0, "%s: empty array", what);
}

/* Tensors of the round trip: odd shapes, three types, one made by the fill callback. */
typedef struct {
    const char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
    bool use_fill;
} tspec;
static const tspec tspecs[] = {
    {"t.f32", RF_TYPE_F32, 3, {3, 5, 2, 1}, false},
    {"t.f16", RF_TYPE_F16, 1, {7, 1, 1, 1}, false},
    {"t.q8_0", RF_TYPE_Q8_0, 2, {64, 3, 1, 1}, false},
    {"t.filled", RF_TYPE_F32, 4, {5, 1, 1, 3}, true},
    {"t.one", RF_TYPE_F32, 1, {1, 1, 1, 1}, false},
    {"t.q8_fill", RF_TYPE_Q8_0, 2, {32, 1, 1, 1}, true},
};

static uint8_t pattern_byte(uint64_t tensor, uint64_t i) { return (uint8_t)(tensor * 31 + i * 7 + (i >> 8)); }

static uint64_t tspec_bytes(const tspec *t) {
    uint64_t row;
    rf_row_bytes(t->type, t->ne[0], &row);
    return row * t->ne[1] * t->ne[2] * t->ne[3];
}

static int fill_cb(void *ctx, uint64_t idx, void *dst, uint64_t n) {
    int *calls = ctx;
    (*calls)++;
    for (uint64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = pattern_byte(idx, i);
    return 0;
}

static int fill_fail(void *ctx, uint64_t idx, void *dst, uint64_t n) {
    (void)ctx, (void)idx, (void)dst, (void)n;
    rf_set_error("synthetic failure");
    return -1;
}

static void check_tensors(const rf_gguf *g, uint64_t align, const char *what) {
    CHECK(g->n_tensors == RF_ARRAY_LEN(tspecs), "%s: tensor count %llu", what, (unsigned long long)g->n_tensors);
    CHECK(g->alignment == align && g->data_offset % align == 0, "%s: alignment %llu, data at %llu", what,
          (unsigned long long)g->alignment, (unsigned long long)g->data_offset);
    uint64_t expect_end = g->data_offset;
    for (size_t k = 0; k < RF_ARRAY_LEN(tspecs); k++) {
        const tspec *s = &tspecs[k];
        const rf_gguf_tensor *t = rf_gguf_find_tensor(g, s->name);
        if (!t) {
            CHECK(0, "%s: tensor %s missing", what, s->name);
            continue;
        }
        uint64_t nb = tspec_bytes(s);
        bool shape = t->type == s->type && t->n_dims == s->n_dims && !memcmp(t->ne, s->ne, sizeof t->ne) &&
                     t->n_elems == s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3] && t->n_bytes == nb;
        CHECK(shape, "%s: tensor %s info", what, s->name);
        CHECK(t == &g->tensors[k], "%s: tensor %s keeps its position", what, s->name);
        CHECK(t->offset % align == 0 && ((uintptr_t)t->data % align) == 0, "%s: tensor %s aligned", what, s->name);
        CHECK((const uint8_t *)t->data == g->base + g->data_offset + t->offset, "%s: tensor %s data pointer", what,
              s->name);
        int bad = 0;
        for (uint64_t i = 0; i < nb; i++) bad += ((const uint8_t *)t->data)[i] != pattern_byte(k, i);
        CHECK(bad == 0, "%s: tensor %s bytes (%d differ)", what, s->name, bad);
        uint64_t end = g->data_offset + t->offset + (nb + align - 1) / align * align;
        if (end > expect_end) expect_end = end;
    }
    CHECK(g->size == expect_end, "%s: file ends after the padded last tensor (%llu vs %llu)", what,
          (unsigned long long)g->size, (unsigned long long)expect_end);
}

static void test_round_trip(void) {
    tb raw = {0};
    make_all_types(&raw);
    rf_gguf *src = open_mem(raw.p, raw.n, NULL);
    CHECK(src != NULL, "hand-made all-types file opens: %s", rf_last_error());
    if (!src) {
        free(raw.p);
        return;
    }
    check_all_types(src, "hand-made");
    CHECK(src->n_tensors == 0 && src->data_offset == raw.n, "hand-made: no tensors, data offset at the end");

    const uint64_t align = 64;
    rf_gguf_writer *w = rf_gguf_writer_new();
    rf_gguf_w_str(w, "general.architecture", "test");
    rf_gguf_w_u32(w, "general.alignment", 32);
    rf_gguf_w_copy_kv(w, src, "");
    rf_gguf_w_u8(w, "w.u8", 7);
    rf_gguf_w_i32(w, "w.i32", -123456);
    rf_gguf_w_u64(w, "w.u64", UINT64_MAX);
    rf_gguf_w_f32(w, "w.f32", 0.25f);
    rf_gguf_w_bool(w, "w.bool", false);
    rf_gguf_w_str(w, "w.str", "");
    rf_gguf_w_u32(w, "w.replaced", 1);
    rf_gguf_w_u32(w, "w.replaced", 2);
    static const int16_t i16s[] = {-1, 2, -300, 32767};
    static const float f32s[] = {1.0f, -0.5f, 1e30f};
    rf_gguf_w_arr(w, "w.arr_i16", RF_GGUF_I16, i16s, 4);
    rf_gguf_w_arr(w, "w.arr_f32", RF_GGUF_F32, f32s, 3);
    rf_gguf_w_arr_str(w, "w.arr_str", (const char *const *)str_items, RF_ARRAY_LEN(str_items));
    rf_gguf_w_u32(w, "general.alignment", (uint32_t)align); /* replaces 32, keeps position 1 */
    uint8_t *scratch = malloc(4096);
    for (size_t k = 0; k < RF_ARRAY_LEN(tspecs); k++) {
        const tspec *s = &tspecs[k];
        for (uint64_t i = 0; i < tspec_bytes(s); i++) scratch[i] = pattern_byte(k, i);
        rf_gguf_w_tensor(w, s->name, s->type, s->n_dims, s->ne, s->use_fill ? NULL : scratch);
    }
    memset(scratch, 0, 4096); /* the writer must have copied */
    free(scratch);

    int calls = 0;
    void *mem = NULL;
    size_t mem_n = 0;
    CHECK(rf_gguf_writer_to_memory(w, &mem, &mem_n, fill_cb, &calls) == 0, "writer to memory: %s", rf_last_error());
    CHECK(calls == 2, "fill called once per data-less tensor (%d)", calls);
    char path[64];
    snprintf(path, sizeof path, "/tmp/rf_test_gguf_%ld.gguf", (long)getpid());
    CHECK(rf_gguf_writer_write(w, path, fill_cb, &calls) == 0, "writer to file: %s", rf_last_error());
    size_t file_n = 0;
    char *file = test_read_file(path, &file_n);
    CHECK(file && file_n == mem_n && !memcmp(file, mem, mem_n), "file and memory output are identical");
    free(file);

    /* Writer failures surface at write time with a message. */
    CHECK(rf_gguf_writer_write(w, path, NULL, NULL) == -1 && strstr(rf_last_error(), "t.filled"),
          "missing fill callback is an error: %s", rf_last_error());
    CHECK(rf_gguf_writer_to_memory(w, &(void *){NULL}, &(size_t){0}, fill_fail, NULL) == -1 &&
              strstr(rf_last_error(), "synthetic failure"),
          "fill failure keeps the callback's message: %s", rf_last_error());

    const char *srcs[2] = {"memory", "file"};
    for (int m = 0; m < 2; m++) {
        rf_gguf *g = m == 0 ? rf_gguf_open_memory(mem, mem_n) : rf_gguf_open(path);
        CHECK(g != NULL, "%s: written file opens: %s", srcs[m], rf_last_error());
        if (!g) continue;
        CHECK(g->version == 3, "%s: version 3", srcs[m]);
        CHECK(m == 0 ? (g->owned && !g->map) : (g->map && !g->owned), "%s: ownership fields", srcs[m]);
        check_all_types(g, srcs[m]);
        check_tensors(g, align, srcs[m]);
        const char *s;
        int64_t i;
        uint64_t u;
        double f;
        bool bo;
        const rf_gguf_kv *a;
        CHECK(g->n_kv == src->n_kv + 12, "%s: kv count %llu", srcs[m], (unsigned long long)g->n_kv);
        CHECK(!strcmp(g->kv[0].key, "general.architecture") && !strcmp(g->kv[1].key, "general.alignment") &&
                  !strcmp(g->kv[2].key, src->kv[0].key) && !strcmp(g->kv[g->n_kv - 1].key, "w.arr_str"),
              "%s: insertion order kept", srcs[m]);
        CHECK(rf_gguf_get_str(g, "general.architecture", &s) == 1 && !strcmp(s, "test"), "%s: arch", srcs[m]);
        CHECK(rf_gguf_get_uint(g, "w.u8", &u) == 1 && u == 7 && g->kv[rf_gguf_find(g, "w.u8") - g->kv].type == RF_GGUF_U8,
              "%s: w.u8", srcs[m]);
        CHECK(rf_gguf_get_int(g, "w.i32", &i) == 1 && i == -123456, "%s: w.i32", srcs[m]);
        CHECK(rf_gguf_get_uint(g, "w.u64", &u) == 1 && u == UINT64_MAX, "%s: w.u64", srcs[m]);
        CHECK(rf_gguf_get_float(g, "w.f32", &f) == 1 && f == 0.25, "%s: w.f32", srcs[m]);
        CHECK(rf_gguf_get_bool(g, "w.bool", &bo) == 1 && !bo, "%s: w.bool", srcs[m]);
        CHECK(rf_gguf_get_str(g, "w.str", &s) == 1 && !*s, "%s: w.str", srcs[m]);
        CHECK(rf_gguf_get_uint(g, "w.replaced", &u) == 1 && u == 2, "%s: rewritten key keeps last value", srcs[m]);
        CHECK(rf_gguf_get_arr(g, "w.arr_i16", RF_GGUF_I16, &a) == 1 && a->arr_n == 4 && rf_gguf_arr_int(a, 2) == -300 &&
                  rf_gguf_arr_int(a, 3) == 32767,
              "%s: i16 array", srcs[m]);
        CHECK(rf_gguf_get_arr(g, "w.arr_f32", RF_GGUF_F32, &a) == 1 && rf_gguf_arr_float(a, 1) == -0.5 &&
                  rf_gguf_arr_float(a, 2) == (double)1e30f && rf_gguf_arr_int(a, 2) == INT64_MAX,
              "%s: f32 array", srcs[m]);
        CHECK(rf_gguf_get_arr(g, "w.arr_str", RF_GGUF_STRING, &a) == 1 && a->arr_n == RF_ARRAY_LEN(str_items) &&
                  !strcmp(a->arr_str[3], str_items[3]) && a->arr_str_len[0] == 0,
              "%s: string array", srcs[m]);
        rf_gguf_close(g);
    }
    unlink(path);
    free(mem);
    rf_gguf_writer_free(w);

    /* Writer refusals. */
    static const uint64_t ne33[1] = {33}, ne0[2] = {4, 0}, ne4[1] = {4};
    struct {
        const char *what;
        int kind;
    } bad_w[] = {{"alignment 3", 0}, {"alignment 0", 1}, {"duplicate tensor", 2}, {"q8_0 row of 33", 3},
                 {"zero dimension", 4}, {"n_dims 5", 5}, {"unknown type", 6}, {"empty key", 7},
                 {"nested array type", 8}, {"alignment as u64", 9}};
    for (size_t k = 0; k < RF_ARRAY_LEN(bad_w); k++) {
        rf_gguf_writer *bw = rf_gguf_writer_new();
        rf_gguf_w_tensor(bw, "a", RF_TYPE_F32, 1, ne4, NULL);
        switch (bad_w[k].kind) {
        case 0: rf_gguf_w_u32(bw, "general.alignment", 3); break;
        case 1: rf_gguf_w_u32(bw, "general.alignment", 0); break;
        case 2: rf_gguf_w_tensor(bw, "a", RF_TYPE_F32, 1, ne4, NULL); break;
        case 3: rf_gguf_w_tensor(bw, "b", RF_TYPE_Q8_0, 1, ne33, NULL); break;
        case 4: rf_gguf_w_tensor(bw, "b", RF_TYPE_F32, 2, ne0, NULL); break;
        case 5: rf_gguf_w_tensor(bw, "b", RF_TYPE_F32, 5, ne4, NULL); break;
        case 6: rf_gguf_w_tensor(bw, "b", 4, 1, ne4, NULL); break;
        case 7: rf_gguf_w_u32(bw, "", 1); break;
        case 8: rf_gguf_w_arr(bw, "x", RF_GGUF_ARRAY, ne4, 1); break;
        case 9: rf_gguf_w_u64(bw, "general.alignment", 64); break;
        }
        void *out = NULL;
        size_t out_n = 0;
        int calls2 = 0;
        rf_clear_error();
        int rc = rf_gguf_writer_to_memory(bw, &out, &out_n, fill_cb, &calls2);
        CHECK(rc == -1 && out == NULL && strlen(rf_last_error()) > 10, "writer refuses %s (%s)", bad_w[k].what,
              rf_last_error());
        free(out);
        rf_gguf_writer_free(bw);
    }

    /* An empty writer makes a valid file. */
    rf_gguf_writer *ew = rf_gguf_writer_new();
    void *eb = NULL;
    size_t en = 0;
    CHECK(rf_gguf_writer_to_memory(ew, &eb, &en, NULL, NULL) == 0 && en == 32, "empty writer output (%zu bytes)", en);
    rf_gguf *eg = eb ? rf_gguf_open_memory(eb, en) : NULL;
    CHECK(eg && eg->n_kv == 0 && eg->n_tensors == 0, "empty file opens");
    rf_gguf_close(eg);
    free(eb);
    rf_gguf_writer_free(ew);
    rf_gguf_close(src);
    free(raw.p);
}

/* ---- real files ---- */

/* Re-writes a real file through the writer (copy_kv + every tensor) and compares: the files in
 * shared/ come from llama.cpp's tools, so this checks that our layout is theirs. */
static void rewrite_real(const char *path) {
    rf_gguf *g = rf_gguf_open(path);
    if (!g) {
        SKIP("%s is missing", path);
        return;
    }
    rf_gguf_writer *w = rf_gguf_writer_new();
    rf_gguf_w_copy_kv(w, g, NULL);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const rf_gguf_tensor *t = &g->tensors[i];
        rf_gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    void *buf = NULL;
    size_t n = 0;
    CHECK(rf_gguf_writer_to_memory(w, &buf, &n, NULL, NULL) == 0, "%s: rewrite: %s", path, rf_last_error());
    rf_gguf *h = buf ? rf_gguf_open_memory(buf, n) : NULL;
    CHECK(h != NULL, "%s: rewritten file opens: %s", path, rf_last_error());
    if (h) {
        /* Same layout as llama.cpp's writer, so the bytes match; the one allowed difference is
         * that we (like llama.cpp) pad a tensor-less file to the alignment and some writers don't. */
        bool same = n >= g->size && !memcmp(buf, g->base, (size_t)g->size) &&
                    (n == g->size || (!g->n_tensors && n % g->alignment == 0 && n - g->size < g->alignment));
        CHECK(same, "%s: rewrite is byte-identical (%zu vs %llu bytes)", path, n, (unsigned long long)g->size);
        int bad = h->n_kv != g->n_kv || h->n_tensors != g->n_tensors;
        for (uint64_t i = 0; !bad && i < g->n_kv; i++) {
            const rf_gguf_kv *a = &g->kv[i], *b = &h->kv[i];
            bad += strcmp(a->key, b->key) || a->type != b->type || a->u64 != b->u64 || a->arr_n != b->arr_n ||
                   a->arr_type != b->arr_type || a->str_len != b->str_len;
            if (!bad && a->type == RF_GGUF_ARRAY && a->arr_type == RF_GGUF_STRING)
                for (uint64_t j = 0; j < a->arr_n; j++)
                    bad += a->arr_str_len[j] != b->arr_str_len[j] || memcmp(a->arr_str[j], b->arr_str[j], a->arr_str_len[j]);
        }
        for (uint64_t i = 0; !bad && i < g->n_tensors; i++)
            bad += memcmp(g->tensors[i].data, h->tensors[i].data, g->tensors[i].n_bytes) != 0;
        CHECK(!bad, "%s: rewritten metadata and tensors equal", path);
    }
    rf_gguf_close(h);
    free(buf);
    rf_gguf_writer_free(w);
    rf_gguf_close(g);
}

static int scan_dir(const char *dir, bool models) {
    DIR *d = opendir(dir);
    if (!d) {
        SKIP("%s is missing", dir);
        return 0;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".gguf")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        n++;
        rf_gguf *g = rf_gguf_open(path);
        CHECK(g != NULL, "%s opens: %s", path, rf_last_error());
        if (!g) continue;
        const char *arch;
        CHECK(walk_ok(g), "%s: tensors and metadata in bounds", path);
        CHECK(rf_gguf_get_str(g, "general.architecture", &arch) == 1, "%s has general.architecture", path);
        if (models) {
            CHECK(g->n_tensors > 0, "%s has tensors", path);
            CHECK(rf_gguf_find_tensor(g, "token_embd.weight") != NULL, "%s has token_embd.weight", path);
        } else {
            CHECK(g->n_tensors == 0 && rf_gguf_find(g, "tokenizer.ggml.tokens"), "%s is vocab-only", path);
        }
        rf_gguf_close(g);
        rewrite_real(path);
    }
    closedir(d);
    return n;
}

static void test_real_files(void) {
    int n = scan_dir(test_shared("models"), true);
    n += scan_dir(test_shared("vocab"), false);
    const char *stories = test_shared("models/stories260K.gguf");
    rf_gguf *g = rf_gguf_open(stories);
    if (!g) {
        SKIP("stories260K.gguf not available");
        return;
    }
    const char *arch;
    CHECK(rf_gguf_get_str(g, "general.architecture", &arch) == 1 && !strcmp(arch, "llama"), "stories260K arch");
    const rf_gguf_tensor *t = rf_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->n_dims == 2 && t->ne[1] == 512, "stories260K token_embd.weight");
    const rf_gguf_kv *toks;
    CHECK(rf_gguf_get_arr(g, "tokenizer.ggml.tokens", RF_GGUF_STRING, &toks) == 1 && toks->arr_n == 512,
          "stories260K vocab of 512");
    rf_gguf_close(g);
    CHECK(n >= 2, "found %d real files", n);
}

/* ---- broken files ---- */

static int n_rejected, n_mut_ok, n_mut_rejected;

static void expect_reject(const tb *b, const char *what, const char *needle) {
    bool msg;
    rf_gguf *g = open_mem(b->p, b->n, &msg);
    CHECK(!g && msg && (!needle || strstr(rf_last_error(), needle)), "rejects %s (got: %s)", what,
          g ? "accepted" : rf_last_error());
    if (!g) fprintf(stderr, "  %-32s -> %s\n", what, rf_last_error());
    rf_gguf_close(g);
    n_rejected++;
}

static void expect_accept(const tb *b, const char *what) {
    rf_gguf *g = open_mem(b->p, b->n, NULL);
    CHECK(g && walk_ok(g), "accepts %s (%s)", what, g ? "ok" : rf_last_error());
    rf_gguf_close(g);
}

/* One small valid file with a string kv, an array and two tensors, then one defect at a time. */
enum {
    D_NONE, D_MAGIC, D_VER0, D_VER1, D_VER4, D_VER_BE, D_NKV_63, D_NKV_MAX, D_NKV_PAST, D_NT_63, D_NT_MAX, D_NT_PAST,
    D_KEYLEN_63, D_KEYLEN_MAX, D_KEYLEN_PAST, D_STRLEN_63, D_STRLEN_PAST, D_ARR_63, D_ARR_MAX, D_ARR_PAST, D_SARR_63,
    D_SARR_PAST, D_VTYPE, D_VTYPE_MAX, D_NESTED, D_ARR_ELEM_BAD, D_EMPTY_KEY, D_NUL_KEY, D_DUP_KEY, D_DUP_TENSOR,
    D_TTYPE, D_TTYPE_40, D_TTYPE_MAX, D_NDIMS0, D_NDIMS5, D_DIM0, D_DIM_NEG, D_DIM_OVF, D_ROW_BLOCK, D_MISALIGNED,
    D_OFF_PAST, D_OFF_HUGE, D_SIZE_PAST, D_OVERLAP, D_ALIGN0, D_ALIGN3, D_ALIGN_U64, D_NAMELEN_63, D_DATA_EOF,
    D_KEYLEN_EDGE, D_STRLEN_EDGE, D_ARR_EDGE, D_SARR_EDGE, D_NAMELEN_EDGE, D_COUNT,
    /* accepted variants */
    A_V2 = 100, A_IQ2, A_MXFP4, A_ALIGN1, A_EMPTY_NAME, A_EXACT_END, A_REVERSED, A_BOOL2,
};

static const char *const defect_names[D_COUNT] = {
    "none", "bad magic", "version 0", "version 1", "version 4", "big-endian version", "n_kv 2^63", "n_kv 2^64-1",
    "n_kv one too many", "n_tensors 2^63", "n_tensors 2^64-1", "n_tensors one too many", "key length 2^63",
    "key length 2^64-1", "key length 1000", "string length 2^63", "string length 1000",
    "array count 2^63", "array count 2^64-1", "u32 array count 10000", "string array count 2^63",
    "string array count 500", "unknown value type 13", "value type 0xffffffff", "nested array",
    "unknown array element type", "empty key", "key with NUL", "duplicate key", "duplicate tensor name",
    "unknown tensor type 4", "tensor type 40", "tensor type 0xffffffff", "n_dims 0", "n_dims 5", "dimension 0",
    "negative dimension", "dimension product overflow", "q8_0 row not a block multiple", "misaligned offset",
    "offset past the end", "offset 2^64-32", "data past the end", "overlapping tensors", "alignment 0",
    "alignment 3", "alignment as u64", "tensor name length 2^63", "data section past EOF",
    "key length 1 past the end", "string length 1 past the end", "u32 array 1 element too long",
    "string array longer than its bytes", "tensor name length 1 past the end"};

/* Fields whose forged value depends on where the file ends: patched after the file is built,
 * to the smallest value that no longer fits (count = remaining / edge_div + edge_add). */
static size_t edge_pos;
static uint64_t edge_div, edge_add;

static void edge_field(tb *b, bool active, uint64_t normal, uint64_t div, uint64_t add) {
    if (active) edge_pos = b->n, edge_div = div, edge_add = add;
    tb_u64(b, normal);
}

static void make_case_body(tb *b, int d);

static void make_case(tb *b, int d) {
    edge_pos = 0;
    make_case_body(b, d);
    if (edge_pos) {
        uint64_t remaining = b->n - (edge_pos + 8);
        uint64_t v = remaining / edge_div + edge_add;
        for (int i = 0; i < 8; i++) b->p[edge_pos + (size_t)i] = (uint8_t)(v >> (8 * i));
    }
}

static void make_case_body(tb *b, int d) {
    uint64_t p2_63 = 1ULL << 63;
    uint32_t version = d == D_VER0 ? 0 : d == D_VER1 ? 1 : d == D_VER4 ? 4 : d == D_VER_BE ? 0x03000000u : d == A_V2 ? 2 : 3;
    uint64_t n_kv = 4, n_t = 2;
    /* The "one too many" counts must not be caught by the up-front size bound, only later. */
    if (d == D_NKV_63) n_kv = p2_63;
    if (d == D_NKV_MAX) n_kv = UINT64_MAX;
    if (d == D_NKV_PAST) n_kv = 5;
    if (d == D_NT_63) n_t = p2_63;
    if (d == D_NT_MAX) n_t = UINT64_MAX;
    if (d == D_NT_PAST) n_t = 3;
    if (d == D_DUP_KEY || d == D_ALIGN_U64 || d == D_ALIGN0 || d == D_ALIGN3 || d == A_ALIGN1) n_kv = 5;
    b->n = 0;
    tb_hdr(b, version, n_t, n_kv);
    if (d == D_MAGIC) b->p[0] = 'g';

    /* kv 0: string */
    if (d == D_KEYLEN_63 || d == D_KEYLEN_MAX || d == D_KEYLEN_PAST) {
        tb_u64(b, d == D_KEYLEN_63 ? p2_63 : d == D_KEYLEN_MAX ? UINT64_MAX : 1000);
    } else if (d == D_EMPTY_KEY) {
        tb_str(b, "");
    } else if (d == D_NUL_KEY) {
        tb_u64(b, 3);
        tb_put(b, "a\0b", 3);
    } else {
        edge_field(b, d == D_KEYLEN_EDGE, 12, 1, 1);
        tb_put(b, "general.name", 12);
    }
    tb_u32(b, d == D_VTYPE ? 13 : d == D_VTYPE_MAX ? 0xffffffffu : RF_GGUF_STRING);
    if (d == D_STRLEN_63 || d == D_STRLEN_PAST) {
        tb_u64(b, d == D_STRLEN_63 ? p2_63 : 1000);
        tb_put(b, "tiny", 4);
    } else {
        edge_field(b, d == D_STRLEN_EDGE, 4, 1, 1);
        tb_put(b, "tiny", 4);
    }
    /* kv 1: u32 array */
    tb_str(b, "x.arr");
    tb_u32(b, RF_GGUF_ARRAY);
    tb_u32(b, d == D_NESTED ? RF_GGUF_ARRAY : d == D_ARR_ELEM_BAD ? 77 : RF_GGUF_U32);
    edge_field(b, d == D_ARR_EDGE, d == D_ARR_63 ? p2_63 : d == D_ARR_MAX ? UINT64_MAX : d == D_ARR_PAST ? 10000 : 3,
               4, 1);
    tb_u32(b, 1), tb_u32(b, 2), tb_u32(b, 3);
    /* kv 2: string array */
    tb_str(b, "x.strs");
    tb_u32(b, RF_GGUF_ARRAY);
    tb_u32(b, RF_GGUF_STRING);
    edge_field(b, d == D_SARR_EDGE, d == D_SARR_63 ? p2_63 : d == D_SARR_PAST ? 500 : 2, 8, 0);
    tb_str(b, "");
    tb_str(b, "ab");
    /* kv 3: bool */
    tb_str(b, "x.flag");
    tb_u32(b, RF_GGUF_BOOL);
    tb_le(b, d == A_BOOL2 ? 2 : 1, 1);
    if (d == D_DUP_KEY) {
        tb_str(b, "x.flag");
        tb_u32(b, RF_GGUF_BOOL);
        tb_le(b, 0, 1);
    }
    uint64_t align = 32;
    if (d == D_ALIGN_U64) {
        tb_str(b, "general.alignment");
        tb_u32(b, RF_GGUF_U64);
        tb_u64(b, 32);
    }
    if (d == D_ALIGN0 || d == D_ALIGN3 || d == A_ALIGN1) {
        tb_kv_u32(b, "general.alignment", d == D_ALIGN0 ? 0 : d == D_ALIGN3 ? 3 : 1);
        if (d == A_ALIGN1) align = 1;
    }

    /* tensor 0: f32 [8, 2] = 64 bytes at 0; tensor 1: q8_0 [32] = 34 bytes at 64 */
    uint64_t ne0[4] = {8, 2, 1, 1}, ne1[4] = {32, 1, 1, 1};
    uint32_t nd0 = 2, t1 = RF_TYPE_Q8_0;
    uint64_t off0 = 0, off1 = 64;
    if (d == D_NDIMS0) nd0 = 0;
    if (d == D_NDIMS5) nd0 = 5;
    if (d == D_DIM0) ne0[1] = 0;
    if (d == D_DIM_NEG) ne0[1] = p2_63;
    if (d == D_DIM_OVF) ne0[0] = ne0[1] = 1ULL << 32, ne0[2] = 8;
    if (d == D_ROW_BLOCK) ne1[0] = 33;
    if (d == D_TTYPE) t1 = 4;
    if (d == D_TTYPE_40) t1 = 40;
    if (d == D_TTYPE_MAX) t1 = 0xffffffffu;
    if (d == A_IQ2) t1 = RF_TYPE_IQ2_XXS, ne1[0] = 256; /* 66 bytes */
    if (d == A_MXFP4) t1 = RF_TYPE_MXFP4, ne1[0] = 64;  /* 34 bytes, as the q8_0 row */
    if (d == D_MISALIGNED) off1 = 48;
    if (d == D_OFF_PAST) off1 = 4096;
    if (d == D_OFF_HUGE) off1 = UINT64_MAX - 31;
    if (d == D_SIZE_PAST) ne1[0] = 64;
    if (d == D_OVERLAP) off1 = 32;
    if (d == A_REVERSED) off0 = 64, off1 = 0;
    if (d == D_NAMELEN_63) {
        tb_u64(b, p2_63);
        tb_put(b, "w", 1);
    } else if (d == A_EMPTY_NAME) {
        tb_str(b, "");
    } else {
        edge_field(b, d == D_NAMELEN_EDGE, 1, 1, 1);
        tb_put(b, "w", 1);
    }
    tb_u32(b, nd0);
    for (uint32_t k = 0; k < nd0 && k < 5; k++) tb_u64(b, k < 4 ? ne0[k] : 1);
    tb_u32(b, RF_TYPE_F32);
    tb_u64(b, off0);
    tb_tensor(b, d == D_DUP_TENSOR ? "w" : "q", 1, ne1, t1, off1);
    if (d == D_DATA_EOF) return; /* file ends right after the tensor infos */
    tb_pad(b, (size_t)align);
    size_t data = b->n;
    for (int k = 0; k < 64 + 66; k++) tb_le(b, (uint64_t)k, 1);
    if (d == A_EXACT_END) {
        b->n = data + 64 + 34;
    } else if (d == A_IQ2) {
        tb_pad(b, 32);
    } else {
        b->n = data + 64 + 34;
        tb_pad(b, (size_t)align);
    }
}

/* Each defect alone in an otherwise valid file, then forged counts in a real header. */
static void test_explicit(void) {
    tb b = {0};
    make_case(&b, D_NONE);
    expect_accept(&b, "the valid base case");
    static const char *const needles[D_COUNT] = {
        [D_MAGIC] = "magic", [D_VER0] = "version", [D_VER1] = "version", [D_VER4] = "version",
        [D_VER_BE] = "big-endian", [D_NKV_63] = "metadata count", [D_NKV_MAX] = "metadata count",
        [D_NT_63] = "tensor count", [D_NT_MAX] = "tensor count", [D_KEYLEN_63] = "length",
        [D_KEYLEN_PAST] = "length", [D_STRLEN_63] = "general.name", [D_ARR_63] = "x.arr", [D_ARR_MAX] = "x.arr",
        [D_SARR_63] = "x.strs", [D_SARR_PAST] = "x.strs", [D_VTYPE] = "value type 13", [D_NESTED] = "nested",
        [D_ARR_ELEM_BAD] = "element type", [D_EMPTY_KEY] = "empty", [D_NUL_KEY] = "NUL", [D_DUP_KEY] = "duplicate",
        [D_DUP_TENSOR] = "duplicate", [D_TTYPE] = "type id 4", [D_TTYPE_40] = "type id 40", [D_NDIMS0] = "n_dims",
        [D_NDIMS5] = "n_dims", [D_DIM0] = "dimension", [D_DIM_NEG] = "dimension", [D_DIM_OVF] = "overflow",
        [D_ROW_BLOCK] = "block", [D_MISALIGNED] = "alignment", [D_OFF_PAST] = "'q'", [D_OFF_HUGE] = "'q'",
        [D_SIZE_PAST] = "'q'", [D_OVERLAP] = "overlaps", [D_ALIGN0] = "power of two", [D_ALIGN3] = "power of two",
        [D_ALIGN_U64] = "u32", [D_DATA_EOF] = "past the end", [D_KEYLEN_EDGE] = "entry 0",
        [D_STRLEN_EDGE] = "general.name", [D_ARR_EDGE] = "x.arr", [D_SARR_EDGE] = "x.strs",
        [D_NAMELEN_EDGE] = "tensor 0"};
    for (int d = 1; d < D_COUNT; d++) {
        make_case(&b, d);
        expect_reject(&b, defect_names[d], needles[d]);
    }
    static const struct {
        int d;
        const char *what;
    } accepted[] = {{A_V2, "version 2"}, {A_IQ2, "known-unsupported type iq2_xxs"},
                    {A_MXFP4, "known-unsupported type mxfp4"}, {A_ALIGN1, "alignment 1"},
                    {A_EMPTY_NAME, "an empty tensor name"}, {A_EXACT_END, "no padding after the last tensor"},
                    {A_REVERSED, "tensors stored out of order"}, {A_BOOL2, "bool byte 2"}};
    for (size_t k = 0; k < RF_ARRAY_LEN(accepted); k++) {
        make_case(&b, accepted[k].d);
        expect_accept(&b, accepted[k].what);
    }
    make_case(&b, A_REVERSED);
    rf_gguf *g = rf_gguf_open_memory(b.p, b.n);
    CHECK(g && g->tensors[0].offset == 64 && ((const uint8_t *)g->tensors[1].data)[0] == 0 &&
              ((const uint8_t *)g->tensors[0].data)[0] == 64,
          "out-of-order offsets point at the right bytes");
    rf_gguf_close(g);

    /* Files on disk: missing, directory, empty. */
    rf_clear_error();
    CHECK(!rf_gguf_open("/nonexistent/x.gguf") && strstr(rf_last_error(), "/nonexistent/x.gguf"), "missing file");
    CHECK(!rf_gguf_open("/tmp") && strstr(rf_last_error(), "regular"), "directory");
    char path[64];
    snprintf(path, sizeof path, "/tmp/rf_test_gguf_empty_%ld.gguf", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (f) fclose(f);
    CHECK(!rf_gguf_open(path) && strstr(rf_last_error(), "empty"), "empty file");
    unlink(path);
    CHECK(!rf_gguf_open_memory(b.p, 0) && !rf_gguf_open_memory(NULL, 8), "empty buffer");

    /* The same defects at scale in stories260K: forged counts in a real header. */
    size_t sn = 0;
    char *st = test_read_file(test_shared("models/stories260K.gguf"), &sn);
    if (st) {
        static const uint64_t forged[] = {1ULL << 63, UINT64_MAX, UINT64_MAX - 7, 1ULL << 32};
        for (size_t k = 0; k < RF_ARRAY_LEN(forged); k++) {
            for (int field = 0; field < 3; field++) {
                /* 8: n_tensors, 16: n_kv, 24: length of the first key */
                tb c = {0};
                tb_put(&c, st, sn);
                for (int i = 0; i < 8; i++) c.p[8 + 8 * field + i] = (uint8_t)(forged[k] >> (8 * i));
                expect_reject(&c, field == 0 ? "stories260K n_tensors forged" : field == 1 ? "stories260K n_kv forged"
                                                                                           : "stories260K key length forged",
                              NULL);
                free(c.p);
            }
        }
    } else {
        SKIP("stories260K.gguf not available for forged counts");
    }
    free(st);
    free(b.p);
}

/* Truncation at every offset of [0, header_end) plus sampled offsets in the data. A truncation
 * inside the trailing padding leaves a valid file. */
static void truncations(const uint8_t *buf, size_t n, const char *what) {
    rf_gguf *full = rf_gguf_open_memory(buf, n);
    if (!full) {
        CHECK(0, "%s base opens: %s", what, rf_last_error());
        return;
    }
    uint64_t data_end = full->data_offset;
    for (uint64_t i = 0; i < full->n_tensors; i++) {
        uint64_t e = full->data_offset + full->tensors[i].offset + full->tensors[i].n_bytes;
        if (e > data_end) data_end = e;
    }
    uint64_t hdr = full->data_offset;
    rf_gguf_close(full);
    int wrong = 0, cases = 0;
    for (uint64_t cut = 0; cut < n; cut++) {
        /* Every cut in the header; in a large data region only a sample (each try copies). */
        if (n > 65536 && cut > hdr && cut < n - 1 && test_rng() % ((n - hdr) / 64 + 1) != 0) continue;
        bool msg;
        rf_gguf *g = open_mem(buf, (size_t)cut, &msg);
        bool expect_ok = cut >= data_end;
        if ((g != NULL) != expect_ok || !msg || (g && !walk_ok(g))) {
            if (wrong++ < 5)
                fprintf(stderr, "%s truncated at %llu: %s\n", what, (unsigned long long)cut,
                        g ? "accepted" : rf_last_error());
        }
        rf_gguf_close(g);
        cases++;
    }
    CHECK(wrong == 0, "%s: %d of %d truncations misjudged", what, wrong, cases);
    CHECK(cases > 0, "%s: %d truncations tried", what, cases);
    fprintf(stderr, "%s: %d truncations (header %llu bytes)\n", what, cases, (unsigned long long)hdr);
}

static const uint64_t specials[] = {0, 1, 0xff, 0x7fffffffffffffffULL, 0x8000000000000000ULL, UINT64_MAX,
                                    UINT64_MAX - 1, 0xffffffffULL, 0x100000000ULL, 5, 13, 64};

/* Random mutations inside [0, region): bit flips, byte overwrites, and 4/8-byte overwrites with
 * boundary values. Each either fails with a message or yields a file that can be walked.
 * With `path` the mutations are written into that copy of the file and read through the mmap
 * path (cheap for a large file: only touched pages are faulted in); otherwise through
 * rf_gguf_open_memory, sometimes also cut short to combine defects. */
static void mutations(const uint8_t *buf, size_t n, size_t region, int count, const char *path, const char *what) {
    uint8_t *m = malloc(n);
    memcpy(m, buf, n);
    FILE *f = NULL;
    if (path) {
        f = fopen(path, "wb");
        if (!f || fwrite(m, 1, n, f) != n || fflush(f) != 0) {
            CHECK(0, "%s: cannot write %s", what, path);
            if (f) fclose(f);
            free(m);
            return;
        }
    }
    int bad = 0;
    for (int it = 0; it < count; it++) {
        size_t pos = (size_t)(test_rng() % region);
        size_t width = 1;
        uint8_t saved[8];
        int kind = (int)(test_rng() % 4);
        if (kind >= 2) width = kind == 2 ? 4 : 8;
        if (pos + width > n) pos = n - width;
        memcpy(saved, m + pos, width);
        uint64_t v = kind == 0 ? (uint64_t)1 << (test_rng() % 8) : specials[test_rng() % RF_ARRAY_LEN(specials)];
        if (test_rng() % 4 == 0) v = test_rng();
        if (kind == 0) {
            m[pos] ^= (uint8_t)v;
        } else if (kind == 1) {
            m[pos] = (uint8_t)test_rng();
        } else {
            for (size_t i = 0; i < width; i++) m[pos + i] = (uint8_t)(v >> (8 * i));
        }
        bool msg;
        rf_gguf *g;
        if (f) {
            fseek(f, (long)pos, SEEK_SET);
            fwrite(m + pos, 1, width, f);
            fflush(f);
            rf_clear_error();
            g = rf_gguf_open(path);
            msg = g || strstr(rf_last_error(), path);
        } else {
            size_t len = test_rng() % 8 == 0 ? (size_t)(test_rng() % n) + 1 : n;
            g = open_mem(m, len, &msg);
        }
        if (g) {
            n_mut_ok++;
            if (!walk_ok(g)) bad++;
        } else {
            n_mut_rejected++;
            if (!msg) bad++;
        }
        rf_gguf_close(g);
        memcpy(m + pos, saved, width);
        if (f) {
            fseek(f, (long)pos, SEEK_SET);
            fwrite(m + pos, 1, width, f);
        }
    }
    CHECK(bad == 0, "%s: %d of %d random mutations mishandled", what, bad, count);
    if (f) {
        fclose(f);
        unlink(path);
    }
    free(m);
}

static void test_broken(void) {
    /* A small writer-made file: metadata of several kinds, three tensors. */
    rf_gguf_writer *w = rf_gguf_writer_new();
    rf_gguf_w_str(w, "general.architecture", "llama");
    rf_gguf_w_u32(w, "general.alignment", 32);
    rf_gguf_w_u32(w, "llama.block_count", 1);
    rf_gguf_w_f32(w, "llama.rope.freq_base", 10000.0f);
    static const char *const toks[] = {"<unk>", "", "a", "bc"};
    rf_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    static const int32_t types[] = {1, 3, 1, 1};
    rf_gguf_w_arr(w, "tokenizer.ggml.token_type", RF_GGUF_I32, types, 4);
    static const uint64_t ne_a[2] = {8, 3}, ne_b[1] = {32}, ne_c[3] = {2, 3, 2};
    rf_gguf_w_tensor(w, "a", RF_TYPE_F32, 2, ne_a, NULL);
    rf_gguf_w_tensor(w, "b", RF_TYPE_Q8_0, 1, ne_b, NULL);
    rf_gguf_w_tensor(w, "c", RF_TYPE_F16, 3, ne_c, NULL);
    int calls = 0;
    void *buf = NULL;
    size_t n = 0;
    CHECK(rf_gguf_writer_to_memory(w, &buf, &n, fill_cb, &calls) == 0, "small file: %s", rf_last_error());
    rf_gguf_writer_free(w);
    if (buf) {
        truncations(buf, n, "small file");
        mutations(buf, n, n, 6000, NULL, "small file");
    }
    free(buf);

    size_t sn = 0;
    char *st = test_read_file(test_shared("models/stories260K.gguf"), &sn);
    if (st) {
        rf_gguf *g = rf_gguf_open_memory(st, sn);
        size_t hdr = g ? (size_t)g->data_offset : 0;
        rf_gguf_close(g);
        /* Only the header is parsed, so only it is mutated. */
        if (hdr) {
            truncations((const uint8_t *)st, sn, "stories260K");
            char path[64];
            snprintf(path, sizeof path, "/tmp/rf_test_gguf_mut_%ld.gguf", (long)getpid());
            mutations((const uint8_t *)st, sn, hdr, 2000, path, "stories260K header");
        }
    } else {
        SKIP("stories260K.gguf not available for the broken corpus");
    }
    free(st);
    fprintf(stderr, "random mutations: %d still valid, %d rejected\n", n_mut_ok, n_mut_rejected);
}

int main(void) {
    test_seed();
    test_round_trip();
    test_real_files();
    test_explicit();
    test_broken();
    fprintf(stderr, "explicit broken cases: %d\n", n_rejected);
    return test_finish();
}
