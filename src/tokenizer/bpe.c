/* bpe.c: byte-level BPE tokenization of one text fragment, as llama.cpp's llm_tokenizer_bpe
 * does it.
 *
 * The pre-tokenizer splits the fragment into words (byte-level encoded). Within a word, each
 * character is a symbol; adjacent pairs listed in tokenizer.ggml.merges are candidates, and the
 * candidate with the lowest merge rank (ties: leftmost) is merged repeatedly, skipping
 * candidates an earlier merge invalidated. With ignore_merges (llama3, tekken) a word that is
 * itself a vocab token is taken whole. Each final symbol maps to its token; a symbol that is
 * not a token falls back to its single bytes that are tokens (others are dropped, as in
 * llama.cpp). */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tokenizer/heap.h"
#include "tokenizer/tk_internal.h"

typedef struct {
    int prev, next;
    size_t off, n;
} sym;

typedef struct {
    int32_t rank;
    int left, right;
    size_t ln, rn; /* symbol lengths when queued: the pair is stale once either changed */
} bigram;

static bool before(const void *pa, const void *pb) {
    const bigram *a = pa, *b = pb;
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}


int32_t tk_bpe_rank(const rf_tokenizer *t, const char *l, size_t ln, const char *r, size_t rn,
                    char **scratch, size_t *scratch_cap) {
    size_t need = 4 + ln + rn;
    if (need > *scratch_cap) {
        *scratch_cap = need * 2;
        *scratch = rf_xrealloc(*scratch, *scratch_cap);
    }
    uint32_t l32 = (uint32_t)ln;
    memcpy(*scratch, &l32, 4);
    memcpy(*scratch + 4, l, ln);
    memcpy(*scratch + 4 + ln, r, rn);
    return tk_strmap_get(&t->merge_map, *scratch, need);
}

typedef struct {
    const rf_tokenizer *t;
    const char *w;
    sym *s;
    tk_heap h;
    char *scratch;
    size_t scratch_cap;
} session;

static void add_bigram(session *S, int l, int r) {
    if (l < 0 || r < 0) return;
    const sym *a = &S->s[l], *b = &S->s[r];
    int32_t rank = tk_bpe_rank(S->t, S->w + a->off, a->n, S->w + b->off, b->n, &S->scratch,
                               &S->scratch_cap);
    if (rank < 0) return;
    bigram g = {rank, l, r, a->n, b->n};
    tk_heap_push(&S->h, &g);
}

static void emit(const rf_tokenizer *t, const char *txt, size_t n, tk_ivec *out) {
    int32_t id = tk_strmap_get(&t->tok_map, txt, n);
    if (id >= 0) {
        tk_ivec_push(out, id);
        return;
    }
    for (size_t j = 0; j < n; j++) {
        int32_t b = tk_strmap_get(&t->tok_map, txt + j, 1);
        if (b >= 0) tk_ivec_push(out, b);
    }
}

int tk_bpe_tokenize(const rf_tokenizer *t, const char *text, size_t len, tk_ivec *out) {
    char *buf;
    size_t *ends, nw;
    if (tk_pretok_split(t->pretok, text, len, &buf, &ends, &nw)) return -1;
    session S = {.t = t, .h = tk_heap_new(sizeof(bigram), before)};
    size_t cap = 0;
    size_t start = 0;
    for (size_t wi = 0; wi < nw; wi++) {
        const char *w = buf + start;
        size_t wl = ends[wi] - start;
        start = ends[wi];
        if (t->ignore_merges && tk_strmap_get(&t->tok_map, w, wl) >= 0) {
            emit(t, w, wl, out);
            continue;
        }
        if (wl > cap) {
            cap = wl * 2;
            S.s = rf_xrealloc(S.s, cap * sizeof *S.s);
        }
        S.w = w;
        int ns = 0;
        for (size_t off = 0; off < wl;) {
            size_t n = RF_MIN((size_t)tk_utf8_len((unsigned char)w[off]), wl - off);
            S.s[ns] = (sym){ns - 1, off + n == wl ? -1 : ns + 1, off, n};
            off += n;
            ns++;
        }
        S.h.n = 0;
        for (int i = 1; i < ns; i++) add_bigram(&S, i - 1, i);
        while (S.h.n) {
            bigram b;
            tk_heap_pop(&S.h, &b);
            sym *l = &S.s[b.left], *r = &S.s[b.right];
            if (l->n == 0 || r->n == 0 || l->n != b.ln || r->n != b.rn) continue; /* stale */
            l->n += r->n;
            r->n = 0;
            l->next = r->next;
            if (r->next >= 0) S.s[r->next].prev = b.left;
            add_bigram(&S, l->prev, b.left);
            add_bigram(&S, b.left, l->next);
        }
        for (int i = 0; i < ns; i++)
            if (S.s[i].n) emit(t, w + S.s[i].off, S.s[i].n, out);
    }
    free(S.s);
    tk_heap_free(&S.h);
    free(S.scratch);
    free(buf);
    free(ends);
    return 0;
}
