/* detok.c: token -> text. Pieces are rendered as llama.cpp's token_to_piece does; the
 * streaming detokenizer turns a token stream into valid UTF-8 without ever splitting a
 * character across two outputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tokenizer/tk_internal.h"

/* Appends to a growable buffer. */
typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = rf_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

char *tk_render_piece(const rf_tokenizer *t, int32_t id, size_t *len) {
    sbuf b = {0};
    sb_add(&b, "", 0);
    const char *s = t->text[id];
    size_t n = t->text_len[id];
    uint8_t ty = t->type[id];
    if (ty == TK_UNKNOWN || ty == TK_CONTROL || ty == TK_USER_DEFINED) {
        sb_add(&b, s, n);
    } else if (t->kind == TK_SPM) {
        if (ty == TK_NORMAL) {
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                    sb_add(&b, " ", 1);
                    i += 3;
                } else {
                    sb_add(&b, s + i, 1);
                    i++;
                }
            }
        } else if (ty == TK_BYTE) {
            /* "<0xNN>": the two hex digits at offset 3 */
            char hex[3] = {n > 3 ? s[3] : 0, n > 4 ? s[4] : 0, 0};
            char c = (char)strtol(hex, NULL, 16);
            sb_add(&b, &c, 1);
        }
        /* unused / undefined: nothing */
    } else if (ty == TK_NORMAL) {
        /* byte-level BPE: each codepoint stands for one byte */
        for (size_t i = 0; i < n;) {
            uint32_t cp = tk_utf8_decode(s, n, &i);
            int byte = tk_cp_to_byte(cp);
            if (byte >= 0) {
                char c = (char)byte;
                sb_add(&b, &c, 1);
            } else {
                /* llama.cpp's marker for a codepoint outside the byte map */
                char u[4], h[4];
                int nu = tk_utf8_encode(cp, u);
                sb_add(&b, "[UNK_BYTE_0x", 12);
                for (int k = 0; k < nu; k++) {
                    snprintf(h, sizeof h, "%02x", (unsigned char)u[k]);
                    sb_add(&b, h, 2);
                }
                sb_add(&b, s, n);
                sb_add(&b, "]", 1);
            }
        }
    }
    *len = b.n;
    return b.p;
}

int rf_tokenizer_piece_len(const rf_tokenizer *t, int32_t id, bool special) {
    if (id < 0 || id >= t->n_vocab) return -1;
    if (!special && (t->type[id] == TK_CONTROL || t->type[id] == TK_UNKNOWN)) return 0;
    return (int)(t->piece_off[id + 1] - t->piece_off[id]);
}

int rf_tokenizer_piece(const rf_tokenizer *t, int32_t id, bool special, char *buf, size_t cap) {
    int n = rf_tokenizer_piece_len(t, id, special);
    if (n < 0) {
        rf_set_error("tokenizer: bad token id %d (vocab has %d)", id, t->n_vocab);
        return -1;
    }
    if ((size_t)n > cap) {
        rf_set_error("tokenizer: piece of token %d needs %d bytes, buffer has %zu", id, n, cap);
        return -1;
    }
    if (n && !buf) {
        rf_set_error("tokenizer: NULL buffer for the piece of token %d", id);
        return -1;
    }
    if (n) memcpy(buf, t->piece_blob + t->piece_off[id], (size_t)n);
    return n;
}

/* Strict UTF-8 check of the sequence at s[0..n): returns its length when complete and valid,
 * 0 when it is a valid but truncated prefix, or -k when invalid, k >= 1 being the maximal
 * valid prefix to replace with one U+FFFD (Unicode's "maximal subpart" practice). */
static int utf8_check(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int len;
    unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        return -1;
    }
    for (int k = 1; k < len; k++) {
        if ((size_t)k >= n) return 0;
        unsigned x = s[k];
        if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xbf)) return -k;
    }
    return len;
}

static const char fffd[3] = {'\xef', '\xbf', '\xbd'};

int rf_detok_push(rf_detok *d, const rf_tokenizer *t, int32_t id, char *out, size_t cap) {
    int pl = rf_tokenizer_piece_len(t, id, false);
    if (pl < 0) {
        rf_set_error("tokenizer: bad token id %d (vocab has %d)", id, t->n_vocab);
        return -1;
    }
    if (d->n_pending < 0 || d->n_pending > 3) d->n_pending = 0; /* not initialised: start clean */
    size_t n = (size_t)d->n_pending + (size_t)pl;
    unsigned char *s = rf_xmalloc(n ? n : 1);
    memcpy(s, d->pending, (size_t)d->n_pending);
    if (pl) memcpy(s + d->n_pending, t->piece_blob + t->piece_off[id], (size_t)pl);
    /* Worst case every byte becomes U+FFFD. */
    char *o = rf_xmalloc(3 * n + 1);
    size_t on = 0, i = 0;
    while (i < n) {
        int r = utf8_check(s + i, n - i);
        if (r > 0) {
            memcpy(o + on, s + i, (size_t)r);
            on += (size_t)r;
            i += (size_t)r;
        } else if (r < 0) {
            memcpy(o + on, fffd, 3);
            on += 3;
            i += (size_t)-r;
        } else {
            break; /* truncated tail: hold it back */
        }
    }
    if (on > cap) {
        free(s);
        free(o);
        rf_set_error("tokenizer: detokenizer output needs %zu bytes, buffer has %zu", on, cap);
        return -1;
    }
    memcpy(out, o, on);
    d->n_pending = (int)(n - i);
    memcpy(d->pending, s + i, n - i);
    free(s);
    free(o);
    return (int)on;
}

int rf_detok_flush(rf_detok *d, char *out, size_t cap) {
    if (d->n_pending <= 0 || d->n_pending > 3) {
        d->n_pending = 0;
        return 0;
    }
    /* What is held back is always one truncated sequence: one U+FFFD. */
    if (cap < 3) {
        rf_set_error("tokenizer: detokenizer flush needs 3 bytes, buffer has %zu", cap);
        return -1;
    }
    memcpy(out, fffd, 3);
    d->n_pending = 0;
    return 3;
}
