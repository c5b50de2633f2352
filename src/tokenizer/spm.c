/* spm.c: SentencePiece-style tokenization of one text fragment, as llama.cpp's
 * llm_tokenizer_spm does it.
 *
 * The fragment (already with "▁" for spaces) starts as one symbol per UTF-8 character (length
 * from the lead byte, clamped at the end). Every adjacent pair whose concatenation is a vocab
 * token is a candidate; repeatedly the candidate with the highest token score (ties: leftmost)
 * is merged, and the new symbol's neighbours become candidates. Candidates invalidated by an
 * earlier merge are skipped. Each final symbol is its token if it is in the vocab, otherwise
 * its bytes as byte-fallback tokens "<0xNN>".
 *
 * llama.cpp also keeps a reverse-merge table to re-split symbols that are not tokens; it is
 * never consulted for a merged symbol (merges only create vocab tokens), and a bigram text can
 * never equal a lone unmerged symbol (both start at a symbol start, so the bigram is strictly
 * longer), so the fallback is always bytes and the table is not needed. */
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
    float score;
    int left, right;
    size_t size;
} bigram;

/* true if a must pop before b: higher score first, then leftmost */
static bool before(const void *pa, const void *pb) {
    const bigram *a = pa, *b = pb;
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}


static void try_add(const rf_tokenizer *t, const char *text, const sym *s, int l, int r, tk_heap *h) {
    if (l < 0 || r < 0) return;
    size_t n = s[l].n + s[r].n;
    int32_t id = tk_strmap_get(&t->tok_map, text + s[l].off, n);
    if (id < 0 || id >= t->n_vocab) return;
    bigram b = {t->score[id], l, r, n};
    tk_heap_push(h, &b);
}

/* llama.cpp's byte_to_token for SPM: "<0xNN>", else the byte itself as a token. */
static int32_t byte_token(const rf_tokenizer *t, unsigned char c) {
    static const char hex[] = "0123456789ABCDEF";
    char b[6] = {'<', '0', 'x', hex[c >> 4], hex[c & 15], '>'};
    int32_t id = tk_strmap_get(&t->tok_map, b, 6);
    if (id >= 0) return id;
    char one = (char)c;
    return tk_strmap_get(&t->tok_map, &one, 1);
}

int tk_spm_tokenize(const rf_tokenizer *t, const char *text, size_t len, tk_ivec *out) {
    if (!len) return 0;
    sym *s = rf_xmalloc(len * sizeof *s);
    int ns = 0;
    for (size_t off = 0; off < len;) {
        size_t n = RF_MIN((size_t)tk_utf8_len((unsigned char)text[off]), len - off);
        s[ns] = (sym){ns - 1, off + n == len ? -1 : ns + 1, off, n};
        off += n;
        ns++;
    }
    tk_heap h = tk_heap_new(sizeof(bigram), before);
    for (int i = 1; i < ns; i++) try_add(t, text, s, i - 1, i, &h);
    while (h.n) {
        bigram b;
        tk_heap_pop(&h, &b);
        sym *l = &s[b.left], *r = &s[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = b.left;
        try_add(t, text, s, l->prev, b.left, &h);
        try_add(t, text, s, b.left, l->next, &h);
    }
    tk_heap_free(&h);
    int rc = 0;
    for (int i = 0; i != -1; i = s[i].next) {
        int32_t id = tk_strmap_get(&t->tok_map, text + s[i].off, s[i].n);
        if (id >= 0) {
            tk_ivec_push(out, id);
            continue;
        }
        for (size_t j = 0; j < s[i].n; j++) {
            int32_t bt = byte_token(t, (unsigned char)text[s[i].off + j]);
            if (bt < 0) bt = t->unk;
            if (bt < 0) {
                rf_set_error("SPM tokenizer: byte 0x%02X has no token and the vocab has no <unk>",
                             (unsigned char)text[s[i].off + j]);
                rc = -1;
                break;
            }
            tk_ivec_push(out, bt);
        }
        if (rc) break;
    }
    free(s);
    return rc;
}
