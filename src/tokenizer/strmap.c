/* strmap.c: byte-string -> int32 hash map for vocabularies (128k tokens) and merge tables
 * (280k pairs), so that every lookup during tokenization is O(length of the key). */
#include "tokenizer/tk_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

static uint64_t hash_bytes(const char *s, size_t n) {
    /* FNV-1a with a final avalanche; 0 is reserved for empty slots. */
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h ? h : 1;
}

void tk_strmap_init(tk_strmap *m, size_t expect) {
    memset(m, 0, sizeof *m);
    size_t cap = 16;
    while (cap < expect * 2) cap <<= 1;
    m->cap = cap;
    m->hashes = rf_xcalloc(cap, sizeof *m->hashes);
    m->key_off = rf_xmalloc(cap * sizeof *m->key_off);
    m->key_len = rf_xmalloc(cap * sizeof *m->key_len);
    m->vals = rf_xmalloc(cap * sizeof *m->vals);
}

void tk_strmap_free(tk_strmap *m) {
    free(m->hashes);
    free(m->key_off);
    free(m->key_len);
    free(m->vals);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

static void grow(tk_strmap *m) {
    tk_strmap old = *m;
    size_t cap = old.cap * 2;
    m->cap = cap;
    m->hashes = rf_xcalloc(cap, sizeof *m->hashes);
    m->key_off = rf_xmalloc(cap * sizeof *m->key_off);
    m->key_len = rf_xmalloc(cap * sizeof *m->key_len);
    m->vals = rf_xmalloc(cap * sizeof *m->vals);
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.hashes[i]) continue;
        size_t j = old.hashes[i] & (cap - 1);
        while (m->hashes[j]) j = (j + 1) & (cap - 1);
        m->hashes[j] = old.hashes[i];
        m->key_off[j] = old.key_off[i];
        m->key_len[j] = old.key_len[i];
        m->vals[j] = old.vals[i];
    }
    free(old.hashes);
    free(old.key_off);
    free(old.key_len);
    free(old.vals);
}

void tk_strmap_put(tk_strmap *m, const char *key, size_t len, int32_t val, bool overwrite) {
    if ((m->n + 1) * 2 > m->cap) grow(m);
    uint64_t h = hash_bytes(key, len);
    size_t j = h & (m->cap - 1);
    while (m->hashes[j]) {
        if (m->hashes[j] == h && m->key_len[j] == len &&
            memcmp(m->arena + m->key_off[j], key, len) == 0) {
            if (overwrite) m->vals[j] = val;
            return;
        }
        j = (j + 1) & (m->cap - 1);
    }
    if (m->arena_len + len + 1 > m->arena_cap) {
        size_t nc = m->arena_cap ? m->arena_cap : 4096;
        while (nc < m->arena_len + len + 1) nc *= 2;
        m->arena = rf_xrealloc(m->arena, nc);
        m->arena_cap = nc;
    }
    memcpy(m->arena + m->arena_len, key, len);
    m->arena[m->arena_len + len] = 0;
    m->hashes[j] = h;
    m->key_off[j] = (uint32_t)m->arena_len;
    m->key_len[j] = (uint32_t)len;
    m->vals[j] = val;
    m->arena_len += len + 1;
    m->n++;
}

int32_t tk_strmap_get(const tk_strmap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    uint64_t h = hash_bytes(key, len);
    size_t j = h & (m->cap - 1);
    while (m->hashes[j]) {
        if (m->hashes[j] == h && m->key_len[j] == len &&
            memcmp(m->arena + m->key_off[j], key, len) == 0)
            return m->vals[j];
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void tk_ivec_push(tk_ivec *a, int32_t x) {
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 64;
        a->v = rf_xrealloc(a->v, a->cap * sizeof *a->v);
    }
    a->v[a->n++] = x;
}
