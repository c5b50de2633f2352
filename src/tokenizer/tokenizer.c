/* tokenizer.c: loading a tokenizer from GGUF metadata, special-token partitioning and the
 * encode entry point. The per-model settings (defaults, overrides, end-of-generation detection
 * by token text) follow llama.cpp's llama_vocab::load so that ids match it exactly. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf.h"
#include "core/util.h"
#include "tokenizer/tk_internal.h"

void rf_tokenizer_free(rf_tokenizer *t) {
    if (!t) return;
    if (t->text)
        for (int32_t i = 0; i < t->n_vocab; i++) free(t->text[i]);
    free(t->text);
    free(t->text_len);
    free(t->score);
    free(t->type);
    free(t->lstrip);
    free(t->rstrip);
    tk_strmap_free(&t->tok_map);
    tk_strmap_free(&t->merge_map);
    tk_pretok_free(t->pretok);
    free(t->eog);
    free(t->special);
    free(t->piece_blob);
    free(t->piece_off);
    free(t->model_name);
    free(t->pre_name);
    free(t);
}

/* Optional special-token id key: ids past the vocab are ignored (llama.cpp warns and keeps the
 * default). Returns -1 only for a key of the wrong type. */
static int read_id(const rf_gguf *g, const char *key, int32_t n_vocab, int32_t *id) {
    int64_t v;
    int rc = rf_gguf_get_int(g, key, &v);
    if (rc < 0) return -1;
    if (rc == 1 && v >= 0 && v < n_vocab) *id = (int32_t)v;
    return 0;
}

static int read_bool(const rf_gguf *g, const char *key, bool *b) {
    bool v;
    int rc = rf_gguf_get_bool(g, key, &v);
    if (rc < 0) return -1;
    if (rc == 1) *b = v;
    return 0;
}

/* The id llama.cpp's token_to_id map gives a text, or -1. */
static int32_t find_text(const rf_tokenizer *t, const char *s) {
    return tk_strmap_get(&t->tok_map, s, strlen(s));
}

/* Looks for the first of `names` present in the vocab (lowest id wins among several, since
 * llama.cpp's hash-map order is unspecified) and forces it to control type, as llama.cpp does
 * for control-looking tokens that the converter left normal. */
static void detect(rf_tokenizer *t, int32_t *id, const char *const *names) {
    if (*id >= 0) return;
    int32_t best = -1;
    for (const char *const *n = names; *n; n++) {
        int32_t x = find_text(t, *n);
        if (x >= 0 && (best < 0 || x < best)) best = x;
    }
    if (best >= 0) {
        *id = best;
        t->type[best] = TK_CONTROL;
    }
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const rf_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y]) return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static bool is_special_type(uint8_t ty) {
    return ty == TK_CONTROL || ty == TK_USER_DEFINED || ty == TK_UNKNOWN;
}

rf_tokenizer *rf_tokenizer_load(const struct rf_gguf *g) {
    const char *model = NULL, *pre = NULL;
    int rc = rf_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (rc < 0) return NULL;
    if (rc == 0) {
        rf_set_error("tokenizer: missing key tokenizer.ggml.model");
        return NULL;
    }
    int kind;
    if (strcmp(model, "llama") == 0) {
        kind = TK_SPM;
    } else if (strcmp(model, "gpt2") == 0) {
        kind = TK_BPE;
    } else {
        rf_set_error("tokenizer: unsupported tokenizer model '%s' (supported: llama, gpt2)", model);
        return NULL;
    }
    if (rf_gguf_get_str(g, "tokenizer.ggml.pre", &pre) < 0) return NULL;

    const rf_gguf_kv *toks, *scores = NULL, *types = NULL, *merges = NULL;
    rc = rf_gguf_get_arr(g, "tokenizer.ggml.tokens", RF_GGUF_STRING, &toks);
    if (rc < 0) return NULL;
    if (rc == 0) {
        rf_set_error("tokenizer: missing key tokenizer.ggml.tokens");
        return NULL;
    }
    if (toks->arr_n == 0 || toks->arr_n > INT32_MAX / 2) {
        rf_set_error("tokenizer: tokenizer.ggml.tokens has %llu entries",
                     (unsigned long long)toks->arr_n);
        return NULL;
    }
    int32_t n = (int32_t)toks->arr_n;
    if (rf_gguf_get_arr(g, "tokenizer.ggml.scores", -1, &scores) < 0) return NULL;
    if (rf_gguf_get_arr(g, "tokenizer.ggml.token_type", -1, &types) < 0) return NULL;
    if (scores && (scores->arr_type == RF_GGUF_STRING || scores->arr_n != (uint64_t)n)) {
        rf_set_error("tokenizer: tokenizer.ggml.scores must be %d numbers", n);
        return NULL;
    }
    if (types && (types->arr_type == RF_GGUF_STRING || types->arr_type == RF_GGUF_F32 ||
                  types->arr_type == RF_GGUF_F64 || types->arr_n != (uint64_t)n)) {
        rf_set_error("tokenizer: tokenizer.ggml.token_type must be %d integers", n);
        return NULL;
    }
    if (kind == TK_BPE) {
        rc = rf_gguf_get_arr(g, "tokenizer.ggml.merges", RF_GGUF_STRING, &merges);
        if (rc < 0) return NULL;
        if (rc == 0) {
            rf_set_error("tokenizer: gpt2 tokenizer without tokenizer.ggml.merges");
            return NULL;
        }
    }

    rf_tokenizer *t = rf_xcalloc(1, sizeof *t);
    t->kind = kind;
    t->model_name = rf_xstrdup(model);
    t->pre_name = rf_xstrdup(pre && *pre ? pre : "default");
    t->n_vocab = n;

    if (kind == TK_BPE) {
        bool known, add_bos_default;
        t->pretok = tk_pretok_new(pre, &t->ignore_merges, &add_bos_default, &known);
        if (!t->pretok) {
            rf_prefix_error("tokenizer");
            rf_tokenizer_free(t);
            return NULL;
        }
        t->add_bos = add_bos_default;
        t->add_eos = false;
        t->add_space_prefix = false;
        t->bos = 11;
        t->eos = 11;
        t->unk = -1;
        if (strcmp(t->pre_name, "chatglm-bpe") == 0) t->bos = -1;
    } else {
        t->add_bos = true;
        t->add_eos = false;
        t->add_space_prefix = true;
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
    }
    t->eot = t->eom = t->sep = t->pad = t->mask = -1;
    t->fim_pre = t->fim_suf = t->fim_mid = t->fim_pad = t->fim_rep = t->fim_sep = -1;

    /* vocabulary */
    t->text = rf_xcalloc((size_t)n, sizeof *t->text);
    t->text_len = rf_xmalloc((size_t)n * sizeof *t->text_len);
    t->score = rf_xmalloc((size_t)n * sizeof *t->score);
    t->type = rf_xmalloc((size_t)n);
    t->lstrip = rf_xcalloc((size_t)n, 1);
    t->rstrip = rf_xcalloc((size_t)n, 1);
    tk_strmap_init(&t->tok_map, (size_t)n);
    for (int32_t i = 0; i < n; i++) {
        uint64_t len = toks->arr_str_len[i];
        if (len == 0) {
            char b[32];
            snprintf(b, sizeof b, "[EMPTY_%d]", i);
            t->text[i] = rf_xstrdup(b);
            len = strlen(b);
        } else {
            if (len > UINT32_MAX / 2) {
                rf_set_error("tokenizer: token %d is %llu bytes long", i, (unsigned long long)len);
                rf_tokenizer_free(t);
                return NULL;
            }
            t->text[i] = rf_xmalloc(len + 1);
            memcpy(t->text[i], toks->arr_str[i], len + 1);
        }
        t->text_len[i] = (uint32_t)len;
        t->score[i] = scores ? (float)rf_gguf_arr_float(scores, (uint64_t)i) : 0.0f;
        int64_t ty = types ? rf_gguf_arr_int(types, (uint64_t)i) : TK_NORMAL;
        t->type[i] = (ty >= TK_NORMAL && ty <= TK_BYTE) ? (uint8_t)ty : TK_UNDEFINED;
        tk_strmap_put(&t->tok_map, t->text[i], len, i, true);
    }

    /* merges: "left right", split at the first space after the first byte */
    if (merges) {
        tk_strmap_init(&t->merge_map, (size_t)merges->arr_n);
        char *key = NULL;
        size_t key_cap = 0;
        for (uint64_t i = 0; i < merges->arr_n && i < INT32_MAX; i++) {
            const char *w = merges->arr_str[i];
            size_t wl = (size_t)merges->arr_str_len[i];
            const char *sp = wl > 1 ? memchr(w + 1, ' ', wl - 1) : NULL;
            const char *l = w, *r = w;
            size_t ln = 0, rn = 0;
            if (sp) {
                ln = (size_t)(sp - w);
                r = sp + 1;
                rn = wl - ln - 1;
            }
            size_t need = 4 + ln + rn;
            if (need > key_cap) {
                key_cap = need * 2;
                key = rf_xrealloc(key, key_cap);
            }
            uint32_t l32 = (uint32_t)ln;
            memcpy(key, &l32, 4);
            memcpy(key + 4, l, ln);
            memcpy(key + 4 + ln, r, rn);
            tk_strmap_put(&t->merge_map, key, need, (int32_t)i, false);
        }
        free(key);
    }

    /* flags and special ids from metadata */
    static const struct {
        const char *key;
        size_t off;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(rf_tokenizer, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(rf_tokenizer, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(rf_tokenizer, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(rf_tokenizer, eom)},
        {"tokenizer.ggml.unknown_token_id", offsetof(rf_tokenizer, unk)},
        {"tokenizer.ggml.seperator_token_id", offsetof(rf_tokenizer, sep)},
        {"tokenizer.ggml.padding_token_id", offsetof(rf_tokenizer, pad)},
        {"tokenizer.ggml.mask_token_id", offsetof(rf_tokenizer, mask)},
        {"tokenizer.ggml.fim_pre_token_id", offsetof(rf_tokenizer, fim_pre)},
        {"tokenizer.ggml.fim_suf_token_id", offsetof(rf_tokenizer, fim_suf)},
        {"tokenizer.ggml.fim_mid_token_id", offsetof(rf_tokenizer, fim_mid)},
        {"tokenizer.ggml.fim_pad_token_id", offsetof(rf_tokenizer, fim_pad)},
        {"tokenizer.ggml.fim_rep_token_id", offsetof(rf_tokenizer, fim_rep)},
        {"tokenizer.ggml.fim_sep_token_id", offsetof(rf_tokenizer, fim_sep)},
        {"tokenizer.ggml.prefix_token_id", offsetof(rf_tokenizer, fim_pre)},
        {"tokenizer.ggml.suffix_token_id", offsetof(rf_tokenizer, fim_suf)},
        {"tokenizer.ggml.middle_token_id", offsetof(rf_tokenizer, fim_mid)},
    };
    if (read_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix) ||
        read_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos) ||
        read_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos)) {
        rf_prefix_error("tokenizer");
        rf_tokenizer_free(t);
        return NULL;
    }
    for (size_t i = 0; i < RF_ARRAY_LEN(ids); i++) {
        if (read_id(g, ids[i].key, n, (int32_t *)((char *)t + ids[i].off))) {
            rf_prefix_error("tokenizer");
            rf_tokenizer_free(t);
            return NULL;
        }
    }
    /* Defaults that do not fit a tiny vocab mean "none". */
    int32_t *all_ids[] = {&t->bos, &t->eos, &t->unk};
    for (size_t i = 0; i < RF_ARRAY_LEN(all_ids); i++)
        if (*all_ids[i] >= n) *all_ids[i] = -1;

    /* Auto-detection by text, as llama.cpp does for files whose converter did not record the
     * ids; each detected token becomes a control token. */
    static const char *const eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|endoftext|>", "<EOT>", "_<EOT>",
                                            "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                            NULL};
    static const char *const eom_names[] = {"<|eom_id|>", NULL};
    static const char *const fim_pre_names[] = {"<|fim_prefix|>", "<fim-prefix>",
                                                "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
                                                "<PRE>", NULL};
    static const char *const fim_suf_names[] = {"<|fim_suffix|>", "<fim-suffix>",
                                                "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
                                                "<SUF>", NULL};
    static const char *const fim_mid_names[] = {"<|fim_middle|>", "<fim-middle>",
                                                "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
                                                "<MID>", NULL};
    static const char *const fim_pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<PAD>", NULL};
    static const char *const fim_rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                "<REPO>", NULL};
    static const char *const fim_sep_names[] = {"<|file_sep|>", NULL};
    detect(t, &t->eot, eot_names);
    detect(t, &t->eom, eom_names);
    detect(t, &t->fim_pre, fim_pre_names);
    detect(t, &t->fim_suf, fim_suf_names);
    detect(t, &t->fim_mid, fim_mid_names);
    detect(t, &t->fim_pad, fim_pad_names);
    detect(t, &t->fim_rep, fim_rep_names);
    detect(t, &t->fim_sep, fim_sep_names);

    /* end-of-generation set */
    t->eog = rf_xcalloc((size_t)n, 1);
    static const char *const eog_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", NULL};
    for (const char *const *nm = eog_names; *nm; nm++) {
        int32_t x = find_text(t, *nm);
        if (x >= 0) {
            t->eog[x] = 1;
            t->type[x] = TK_CONTROL;
        }
    }
    int32_t eog_ids[] = {t->eos, t->eot, t->eom, t->fim_pad, t->fim_rep, t->fim_sep};
    for (size_t i = 0; i < RF_ARRAY_LEN(eog_ids); i++)
        if (eog_ids[i] >= 0) t->eog[eog_ids[i]] = 1;

    /* special tokens, longest text first, so that a longer token wins over its prefix */
    t->special = rf_xmalloc((size_t)n * sizeof *t->special);
    for (int32_t i = 0; i < n; i++)
        if (is_special_type(t->type[i])) t->special[t->n_special++] = i;
    qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, cmp_special, t);

    /* rendered pieces (special=true), built once: llama.cpp caches them the same way */
    t->piece_off = rf_xmalloc(((size_t)n + 1) * sizeof *t->piece_off);
    size_t blob_len = 0, blob_cap = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t pl;
        char *p = tk_render_piece(t, i, &pl);
        if (blob_len + pl > UINT32_MAX) {
            free(p);
            rf_set_error("tokenizer: vocabulary too large");
            rf_tokenizer_free(t);
            return NULL;
        }
        if (blob_len + pl + 1 > blob_cap) {
            blob_cap = (blob_len + pl + 1) * 2;
            t->piece_blob = rf_xrealloc(t->piece_blob, blob_cap);
        }
        memcpy(t->piece_blob + blob_len, p, pl);
        free(p);
        t->piece_off[i] = (uint32_t)blob_len;
        blob_len += pl;
    }
    t->piece_off[n] = (uint32_t)blob_len;

    /* Per-token strip attributes that llama.cpp sets by model name (not stored in GGUF). */
    const char *gname = NULL;
    if (rf_gguf_get_str(g, "general.name", &gname) < 0) gname = NULL;
    char lname[256] = {0};
    if (gname)
        for (size_t i = 0; gname[i] && i + 1 < sizeof lname; i++)
            lname[i] = (char)tolower((unsigned char)gname[i]);
    if (strstr(t->pre_name, "jina-v2-de") || strstr(t->pre_name, "jina-v2-es") ||
        strstr(t->pre_name, "jina-v2-code")) {
        int32_t x = find_text(t, "<mask>");
        if (x >= 0) t->lstrip[x] = 1;
    } else if (strstr(lname, "phi-3") || strstr(lname, "phi3")) {
        for (int32_t i = 0; i < t->n_special; i++) t->rstrip[t->special[i]] = 1;
        int32_t x = find_text(t, "</s>");
        if (x >= 0) t->rstrip[x] = 1;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < RF_ARRAY_LEN(keep); i++) {
            x = find_text(t, keep[i]);
            if (x >= 0) t->rstrip[x] = 0;
        }
    }
    rf_clear_error();
    return t;
}

/* ---- encoding ---- */

typedef struct {
    int32_t id; /* >= 0: a special token; -1: raw text [off, off+len) */
    size_t off, len;
} frag;

typedef struct {
    frag *v;
    size_t n, cap;
} fragvec;

static void frag_push(fragvec *f, frag x) {
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 16;
        f->v = rf_xrealloc(f->v, f->cap * sizeof *f->v);
    }
    f->v[f->n++] = x;
}

/* Splits the raw fragments of *cur at every occurrence of special token `id` (llama.cpp's
 * tokenizer_st_partition for one token): leftmost occurrences first, non-overlapping, with
 * lstrip/rstrip dropping the whitespace next to the token. */
static void partition_one(const rf_tokenizer *t, const char *text, int32_t id, fragvec *cur,
                          fragvec *nxt) {
    const char *tok = t->text[id];
    size_t tl = t->text_len[id];
    nxt->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        frag f = cur->v[i];
        if (f.id >= 0 || f.len < tl) {
            frag_push(nxt, f);
            continue;
        }
        size_t base = f.off, blen = f.len;
        for (;;) {
            const char *m = memmem(text + base, blen, tok, tl);
            if (!m) {
                if (blen) frag_push(nxt, (frag){-1, base, blen});
                break;
            }
            size_t mo = (size_t)(m - text);
            size_t ll = mo - base;
            if (t->lstrip[id])
                while (ll > 0 && isspace((unsigned char)text[base + ll - 1])) ll--;
            if (ll) frag_push(nxt, (frag){-1, base, ll});
            frag_push(nxt, (frag){id, 0, 0});
            size_t ro = mo + tl, rl = base + blen - ro;
            if (t->rstrip[id])
                while (rl > 0 && isspace((unsigned char)text[ro])) ro++, rl--;
            base = ro;
            blen = rl;
            if (!blen) break;
        }
    }
    fragvec tmp = *cur;
    *cur = *nxt;
    *nxt = tmp;
}

int rf_tokenizer_encode(const rf_tokenizer *t, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t **out) {
    if (!out) {
        rf_set_error("tokenizer: NULL output pointer");
        return -1;
    }
    *out = NULL;
    if (len && !text) {
        rf_set_error("tokenizer: NULL text");
        return -1;
    }
    if (add_special && t->add_bos && t->bos < 0) {
        rf_set_error("tokenizer: the vocab asks for a BOS token but has none");
        return -1;
    }
    if (add_special && t->add_eos && t->eos < 0) {
        rf_set_error("tokenizer: the vocab asks for an EOS token but has none");
        return -1;
    }
    fragvec cur = {0}, nxt = {0};
    if (len) frag_push(&cur, (frag){-1, 0, len});
    for (int32_t s = 0; s < t->n_special && cur.n; s++) {
        int32_t id = t->special[s];
        uint8_t ty = t->type[id];
        if (!parse_special && (ty == TK_CONTROL || ty == TK_UNKNOWN)) continue;
        partition_one(t, text, id, &cur, &nxt);
    }
    free(nxt.v);

    tk_ivec o = {0};
    int rc = 0;
    if (add_special && t->add_bos) tk_ivec_push(&o, t->bos);
    char *buf = NULL;
    size_t buf_cap = 0;
    bool prev_special = true; /* SPM: the first text fragment gets the leading space */
    for (size_t i = 0; i < cur.n && rc == 0; i++) {
        frag f = cur.v[i];
        if (f.id >= 0) {
            tk_ivec_push(&o, f.id);
            prev_special = true;
            continue;
        }
        if (t->kind == TK_BPE) {
            rc = tk_bpe_tokenize(t, text + f.off, f.len, &o);
            continue;
        }
        /* SPM: optional leading space, then every ' ' becomes U+2581 "▁" (3 bytes). */
        size_t need = 3 * (f.len + 1);
        if (need > buf_cap) {
            buf_cap = need;
            buf = rf_xrealloc(buf, buf_cap);
        }
        size_t bl = 0;
        if (t->add_space_prefix && prev_special) {
            memcpy(buf, "\xe2\x96\x81", 3);
            bl = 3;
        }
        for (size_t k = 0; k < f.len; k++) {
            char c = text[f.off + k];
            if (c == ' ') {
                memcpy(buf + bl, "\xe2\x96\x81", 3);
                bl += 3;
            } else {
                buf[bl++] = c;
            }
        }
        rc = tk_spm_tokenize(t, buf, bl, &o);
        prev_special = false;
    }
    free(buf);
    free(cur.v);
    if (rc) {
        free(o.v);
        return -1;
    }
    if (add_special && t->add_eos) tk_ivec_push(&o, t->eos);
    if (o.n > INT32_MAX) {
        free(o.v);
        rf_set_error("tokenizer: too many tokens");
        return -1;
    }
    if (!o.v) o.v = rf_xmalloc(sizeof(int32_t));
    *out = o.v;
    return (int)o.n;
}

/* ---- accessors ---- */

int32_t rf_tokenizer_n_vocab(const rf_tokenizer *t) { return t->n_vocab; }
int32_t rf_tokenizer_bos(const rf_tokenizer *t) { return t->bos; }
int32_t rf_tokenizer_eos(const rf_tokenizer *t) { return t->eos; }
int32_t rf_tokenizer_eot(const rf_tokenizer *t) { return t->eot; }
bool rf_tokenizer_add_bos(const rf_tokenizer *t) { return t->add_bos; }
bool rf_tokenizer_add_eos(const rf_tokenizer *t) { return t->add_eos; }
bool rf_tokenizer_is_eog(const rf_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}
int rf_tokenizer_token_type(const rf_tokenizer *t, int32_t id) {
    return (id >= 0 && id < t->n_vocab) ? t->type[id] : 0;
}
const char *rf_tokenizer_model_name(const rf_tokenizer *t) { return t->model_name; }
const char *rf_tokenizer_pre_name(const rf_tokenizer *t) { return t->pre_name; }
const char *rf_tokenizer_token_text(const rf_tokenizer *t, int32_t id) {
    return (id >= 0 && id < t->n_vocab) ? t->text[id] : NULL;
}
int32_t rf_tokenizer_token_id(const rf_tokenizer *t, const char *text, size_t len) {
    return tk_strmap_get(&t->tok_map, text, len);
}
