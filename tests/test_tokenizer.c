/* test_tokenizer.c: the tokenizer against llama.cpp's own outputs.
 * - vocab/: llama.cpp's tokenizer test vectors for 5 vocabularies (SPM and BPE); every vector
 *   must match.
 * - golden/: the prompt tokens llama.cpp produced for the test models (BOS first), and the
 *   greedy continuation of stories260K rendered back to text.
 * - streaming detokenizer, special-token parsing, and decode(encode(x)) round trips on random
 *   strings. */
#include <stdlib.h>
#include <string.h>

#include "core/gguf.h"
#include "core/util.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

static rf_tokenizer *load_tok(const char *path) {
    rf_gguf *g = rf_gguf_open(path);
    if (!g) {
        CHECK(0, "open %s: %s", path, rf_last_error());
        return NULL;
    }
    rf_tokenizer *t = rf_tokenizer_load(g);
    CHECK(t != NULL, "load tokenizer from %s: %s", path, t ? "" : rf_last_error());
    rf_gguf_close(g); /* the tokenizer keeps no pointer into the file */
    return t;
}

/* Concatenated pieces of ids[0..n) into a malloc'd NUL-terminated string. */
static char *decode(const rf_tokenizer *t, const int32_t *ids, int n, bool special, size_t *len) {
    size_t cap = 64, l = 0;
    char *s = malloc(cap);
    for (int i = 0; i < n; i++) {
        int pl = rf_tokenizer_piece_len(t, ids[i], special);
        if (pl < 0) continue;
        while (l + (size_t)pl + 1 > cap) s = realloc(s, cap *= 2);
        l += (size_t)rf_tokenizer_piece(t, ids[i], special, s + l, cap - l);
    }
    s[l] = 0;
    if (len) *len = l;
    return s;
}

static int vocab_file(const char *name, int *total, int *passed) {
    char rel[256];
    snprintf(rel, sizeof rel, "vocab/%s.gguf", name);
    const char *path = test_shared(rel);
    if (!test_file_exists(path)) {
        SKIP("%s missing", path);
        return 0;
    }
    snprintf(rel, sizeof rel, "vocab/%s.gguf.inp", name);
    char *inp = test_read_file(test_shared(rel), NULL);
    snprintf(rel, sizeof rel, "vocab/%s.gguf.out", name);
    char *outf = test_read_file(test_shared(rel), NULL);
    if (!inp || !outf) {
        CHECK(0, "%s: missing .inp/.out", name);
        free(inp);
        free(outf);
        return 0;
    }
    double t0 = rf_time_s();
    rf_tokenizer *t = load_tok(path);
    double t1 = rf_time_s();
    if (!t) {
        free(inp);
        free(outf);
        return 0;
    }
    const char *sep = "\n__ggml_vocab_test__\n";
    int nv = 0, ok = 0;
    char *p = inp, *o = outf;
    for (;;) {
        char *e = strstr(p, sep);
        if (!e) break; /* the text after the last separator is empty */
        char *ol = o, *oe = strchr(o, '\n');
        if (!oe) oe = o + strlen(o);
        o = *oe ? oe + 1 : oe;
        int32_t expect[512];
        int ne = 0;
        for (char *q = ol; q < oe && ne < 512;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            expect[ne++] = (int32_t)v;
            q = end;
        }
        int32_t *ids;
        int n = rf_tokenizer_encode(t, p, (size_t)(e - p), false, false, &ids);
        bool same = n == ne && (n <= 0 || memcmp(ids, expect, (size_t)n * sizeof *ids) == 0);
        CHECK(same, "%s vector %d (\"%.*s\"): got %d tokens, expected %d", name, nv, (int)(e - p), p, n,
              ne);
        if (!same && n >= 0) {
            fprintf(stderr, "  got:     ");
            for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n  expected:");
            for (int i = 0; i < ne; i++) fprintf(stderr, " %d", expect[i]);
            fprintf(stderr, "\n");
        }
        ok += same;
        nv++;
        free(ids);
        p = e + strlen(sep);
    }
    double t2 = rf_time_s();
    printf("vocab %-22s %s/%s: %d/%d (load %.0f ms, encode %.1f ms)\n", name,
           rf_tokenizer_model_name(t), rf_tokenizer_pre_name(t), ok, nv, (t1 - t0) * 1e3,
           (t2 - t1) * 1e3);
    CHECK(nv == 46, "%s: %d vectors, expected 46", name, nv);
    *total += nv;
    *passed += ok;
    rf_tokenizer_free(t);
    free(inp);
    free(outf);
    return 0;
}

/* ---- minimal JSON field readers for the golden files ---- */

static int json_ints(const char *js, const char *key, int32_t *out, int cap) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\"", key);
    const char *p = strstr(js, k);
    if (!p) return -1;
    p = strchr(p, '[');
    if (!p) return -1;
    p++;
    int n = 0;
    while (*p && *p != ']' && n < cap) {
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p) {
            p++;
            continue;
        }
        out[n++] = (int32_t)v;
        p = e;
    }
    return n;
}

static void put_utf8(char **o, uint32_t cp) {
    unsigned char *u = (unsigned char *)*o;
    if (cp < 0x80) {
        *u++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *u++ = (unsigned char)(0xc0 | (cp >> 6));
        *u++ = (unsigned char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *u++ = (unsigned char)(0xe0 | (cp >> 12));
        *u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        *u++ = (unsigned char)(0x80 | (cp & 0x3f));
    } else {
        *u++ = (unsigned char)(0xf0 | (cp >> 18));
        *u++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        *u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        *u++ = (unsigned char)(0x80 | (cp & 0x3f));
    }
    *o = (char *)u;
}

/* The unescaped string value of `key`, malloc'd; NULL if absent. */
static char *json_str(const char *js, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\"", key);
    const char *p = strstr(js, k);
    if (!p) return NULL;
    p = strchr(p + strlen(k), '"');
    if (!p) return NULL;
    p++;
    char *out = malloc(strlen(p) + 1), *o = out;
    while (*p && *p != '"') {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        p++;
        char c = *p++;
        switch (c) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'u': {
            uint32_t cp = (uint32_t)strtoul((char[5]){p[0], p[1], p[2], p[3], 0}, NULL, 16);
            p += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && p[0] == '\\' && p[1] == 'u') {
                uint32_t lo = (uint32_t)strtoul((char[5]){p[2], p[3], p[4], p[5], 0}, NULL, 16);
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                p += 6;
            }
            put_utf8(&o, cp);
            break;
        }
        default: *o++ = c; break; /* \" \\ \/ */
        }
    }
    *o = 0;
    return out;
}

static void golden(const char *model, bool check_text) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", model);
    const char *mpath = test_shared(rel);
    snprintf(rel, sizeof rel, "golden/%s.json", model);
    const char *jpath = test_shared(rel);
    if (!test_file_exists(mpath) || !test_file_exists(jpath)) {
        SKIP("%s or %s missing", mpath, jpath);
        return;
    }
    char *js = test_read_file(jpath, NULL);
    rf_tokenizer *t = load_tok(mpath);
    if (!t || !js) {
        free(js);
        rf_tokenizer_free(t);
        return;
    }
    char *prompt = json_str(js, "prompt");
    int32_t expect[256];
    int ne = json_ints(js, "prompt_tokens", expect, 256);
    int32_t *ids;
    int n = rf_tokenizer_encode(t, prompt, strlen(prompt), true, false, &ids);
    bool same = n == ne && n > 0 && memcmp(ids, expect, (size_t)n * sizeof *ids) == 0;
    CHECK(same, "%s: prompt tokens differ (%d vs %d)", model, n, ne);
    CHECK(n > 0 && ids[0] == rf_tokenizer_bos(t), "%s: BOS first", model);
    printf("golden %-22s prompt tokens %s (%d)\n", model, same ? "match" : "DIFFER", n);
    free(ids);
    if (check_text) {
        int32_t greedy[256];
        int ng = json_ints(js, "greedy_tokens", greedy, 256);
        char *want = json_str(js, "greedy_text");
        char *got = decode(t, greedy, ng, false, NULL);
        CHECK(ng > 0 && want && strcmp(got, want) == 0, "%s: greedy text\n  got  '%s'\n  want '%s'",
              model, got, want ? want : "(null)");
        free(want);
        free(got);
    }
    free(prompt);
    free(js);
    rf_tokenizer_free(t);
}

/* ---- streaming detokenizer ---- */

static bool valid_utf8(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t l = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!l || i + l > n) return false;
        for (size_t k = 1; k < l; k++)
            if ((u[i + k] & 0xc0) != 0x80) return false;
        if (c == 0xe0 && u[i + 1] < 0xa0) return false;
        if (c == 0xed && u[i + 1] > 0x9f) return false;
        if (c == 0xf0 && u[i + 1] < 0x90) return false;
        if (c == 0xf4 && u[i + 1] > 0x8f) return false;
        i += l;
    }
    return true;
}

/* Streams ids through the detokenizer; every single output must be valid UTF-8 on its own. */
static char *stream(const rf_tokenizer *t, const int32_t *ids, int n, size_t *len) {
    rf_detok d = {0};
    size_t cap = 256, l = 0;
    char *s = malloc(cap);
    bool all_valid = true;
    for (int i = 0; i < n; i++) {
        int pl = rf_tokenizer_piece_len(t, ids[i], false);
        size_t need = 3 * ((size_t)pl + 4);
        while (l + need + 1 > cap) s = realloc(s, cap *= 2);
        int k = rf_detok_push(&d, t, ids[i], s + l, need);
        CHECK(k >= 0, "detok push: %s", rf_last_error());
        if (k < 0) break;
        all_valid &= valid_utf8(s + l, (size_t)k);
        l += (size_t)k;
    }
    while (l + 4 > cap) s = realloc(s, cap *= 2);
    int k = rf_detok_flush(&d, s + l, 3);
    CHECK(k >= 0, "detok flush");
    if (k > 0) l += (size_t)k;
    CHECK(all_valid, "streamed output split a UTF-8 character");
    s[l] = 0;
    *len = l;
    return s;
}

static void test_detok_spm(const rf_tokenizer *t) {
    /* 世 = E4 B8 96 as byte-fallback tokens: nothing until the last byte arrives. */
    int32_t b[4];
    const char *names[4] = {"<0xE4>", "<0xB8>", "<0x96>", "<0xFF>"};
    for (int i = 0; i < 4; i++) b[i] = rf_tokenizer_token_id(t, names[i], strlen(names[i]));
    CHECK(b[0] >= 0 && b[1] >= 0 && b[2] >= 0 && b[3] >= 0, "byte tokens present");
    rf_detok d = {0};
    char out[64];
    CHECK(rf_detok_push(&d, t, b[0], out, sizeof out) == 0, "partial 1 held back");
    CHECK(rf_detok_push(&d, t, b[1], out, sizeof out) == 0, "partial 2 held back");
    int k = rf_detok_push(&d, t, b[2], out, sizeof out);
    CHECK(k == 3 && memcmp(out, "\xe4\xb8\x96", 3) == 0, "complete character emitted (%d)", k);
    CHECK(rf_detok_flush(&d, out, sizeof out) == 0, "nothing left");
    /* an incomplete sequence then flush -> U+FFFD; an impossible byte -> U+FFFD at once */
    CHECK(rf_detok_push(&d, t, b[0], out, sizeof out) == 0, "partial held");
    k = rf_detok_flush(&d, out, sizeof out);
    CHECK(k == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0, "flush gives U+FFFD");
    k = rf_detok_push(&d, t, b[3], out, sizeof out);
    CHECK(k == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0, "0xFF gives U+FFFD");
    /* a partial sequence interrupted by ASCII: one U+FFFD, then the ASCII */
    rf_detok_push(&d, t, b[0], out, sizeof out);
    int32_t a = rf_tokenizer_token_id(t, "a", 1);
    k = rf_detok_push(&d, t, a, out, sizeof out);
    CHECK(k == 4 && memcmp(out, "\xef\xbf\xbd" "a", 4) == 0, "interrupted sequence (%d)", k);
    /* a too-small buffer fails without consuming */
    rf_detok_push(&d, t, b[0], out, sizeof out);
    rf_detok_push(&d, t, b[1], out, sizeof out);
    CHECK(rf_detok_push(&d, t, b[2], out, 2) == -1, "cap too small -> -1");
    CHECK(rf_detok_push(&d, t, b[2], out, 3) == 3, "retry succeeds");
    CHECK(rf_detok_push(&d, t, 1 << 30, out, sizeof out) == -1, "bad id -> -1");

    /* emoji and CJK through the real encoder: byte fallback for what the vocab lacks */
    const char *txt = "Hi 🦙 世界 ✨ naïve — 🎉🎉 end";
    int32_t *ids;
    int n = rf_tokenizer_encode(t, txt, strlen(txt), false, false, &ids);
    size_t l;
    char *s = stream(t, ids, n, &l);
    char want[128];
    snprintf(want, sizeof want, " %s", txt);
    CHECK(strcmp(s, want) == 0, "SPM stream '%s' vs '%s'", s, want);
    free(s);
    free(ids);
}

static void test_special_spm(const rf_tokenizer *t) {
    const char *txt = "<s>Hello</s>";
    int32_t *a, *b;
    int na = rf_tokenizer_encode(t, txt, strlen(txt), false, true, &a);
    int nb = rf_tokenizer_encode(t, txt, strlen(txt), false, false, &b);
    CHECK(na >= 3 && a[0] == 1 && a[na - 1] == 2, "parse_special: <s> and </s> become ids 1/2");
    bool any = false;
    for (int i = 0; i < nb; i++) any |= b[i] == 1 || b[i] == 2;
    CHECK(nb > na && !any, "no parse_special: <s> is plain text");
    /* llama.cpp: text after a special token gets the SPM leading space again */
    int32_t *c;
    int nc = rf_tokenizer_encode(t, "Hello", 5, false, false, &c);
    CHECK(na == nc + 2 && memcmp(a + 1, c, (size_t)nc * sizeof *c) == 0, "text after <s> as at start");
    char *d = decode(t, b, nb, false, NULL);
    CHECK(strcmp(d, " <s>Hello</s>") == 0, "plain-text specials round trip: '%s'", d);
    free(d);
    d = decode(t, a, na, false, NULL);
    CHECK(strcmp(d, " Hello") == 0, "control pieces render empty unless special: '%s'", d);
    free(d);
    d = decode(t, a, na, true, NULL);
    CHECK(strcmp(d, "<s> Hello</s>") == 0, "special=true renders control text: '%s'", d);
    free(d);
    free(a);
    free(b);
    free(c);
    CHECK(rf_tokenizer_is_eog(t, rf_tokenizer_eos(t)), "eos is eog");
    CHECK(!rf_tokenizer_is_eog(t, rf_tokenizer_bos(t)), "bos is not eog");
    int32_t *e;
    int ne = rf_tokenizer_encode(t, "", 0, true, false, &e);
    CHECK(ne == 1 && e[0] == 1, "empty text with add_special: [BOS]");
    free(e);
    ne = rf_tokenizer_encode(t, "", 0, false, false, &e);
    CHECK(ne == 0 && e != NULL, "empty text: no tokens");
    free(e);
}

static void test_special_bpe(const rf_tokenizer *t) {
    const char *bot = "<|begin_of_text|>", *eot = "<|eot_id|>";
    int32_t bid = rf_tokenizer_token_id(t, bot, strlen(bot));
    int32_t eid = rf_tokenizer_token_id(t, eot, strlen(eot));
    CHECK(bid >= 0 && eid >= 0, "llama3 special tokens present");
    CHECK(rf_tokenizer_bos(t) == bid && rf_tokenizer_add_bos(t), "llama3 BOS %d", rf_tokenizer_bos(t));
    CHECK(rf_tokenizer_is_eog(t, eid), "<|eot_id|> is end of generation");
    const char *txt = "<|begin_of_text|>Hi there<|eot_id|>";
    int32_t *a, *b;
    int na = rf_tokenizer_encode(t, txt, strlen(txt), false, true, &a);
    int nb = rf_tokenizer_encode(t, txt, strlen(txt), false, false, &b);
    CHECK(na >= 3 && a[0] == bid && a[na - 1] == eid, "parse_special finds both");
    bool any = false;
    for (int i = 0; i < nb; i++) any |= b[i] == bid || b[i] == eid;
    CHECK(!any && nb > na, "without parse_special they are text");
    char *d = decode(t, b, nb, false, NULL);
    CHECK(strcmp(d, txt) == 0, "round trip of special-looking text: '%s'", d);
    free(d);
    d = decode(t, a, na, true, NULL);
    CHECK(strcmp(d, txt) == 0, "special=true pieces: '%s'", d);
    free(d);
    int32_t *c;
    int nc = rf_tokenizer_encode(t, "Hi", 2, true, false, &c);
    CHECK(nc >= 2 && c[0] == bid, "add_special adds <|begin_of_text|>");
    free(c);
    free(a);
    free(b);

    /* emoji / CJK split into byte-level tokens stream without broken characters */
    const char *txt2 = "🦙🦙 世界 ✨ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ☃";
    int n = rf_tokenizer_encode(t, txt2, strlen(txt2), false, false, &a);
    size_t l;
    char *s = stream(t, a, n, &l);
    CHECK(strcmp(s, txt2) == 0, "BPE stream '%s'", s);
    free(s);
    free(a);
}

/* Random strings of ASCII, whitespace and multi-byte characters (no U+2581, which SPM cannot
 * round-trip since it is its space marker). */
static size_t random_text(char *buf, size_t cap, bool ascii_only) {
    static const uint32_t pool[] = {0xe9, 0xdf, 0x3c0, 0x416, 0x5d0, 0x627, 0x905, 0xe01, 0x3042,
                                    0x4e16, 0x754c, 0xac00, 0x2014, 0x20ac, 0x2728, 0xff01,
                                    0x1f999, 0x1f389, 0x1d518, 0x10348, 0xa0, 0x3000};
    size_t n = (size_t)test_randint(0, 40), l = 0;
    for (size_t i = 0; i < n && l + 8 < cap; i++) {
        int r = test_randint(0, 9);
        uint32_t cp;
        if (r < 5 || ascii_only) {
            cp = (uint32_t)test_randint(32, 126);
        } else if (r < 7) {
            static const char ws[] = " \n\t  \r";
            cp = (unsigned char)ws[test_randint(0, 5)];
        } else {
            cp = pool[test_randint(0, (int)RF_ARRAY_LEN(pool) - 1)];
        }
        char *o = buf + l;
        put_utf8(&o, cp);
        l = (size_t)(o - buf);
    }
    buf[l] = 0;
    return l;
}

static void round_trip(const rf_tokenizer *t, const char *name, bool spm) {
    int ok = 0, total = 0;
    for (int it = 0; it < 300; it++) {
        char buf[512];
        size_t l = random_text(buf, sizeof buf, it % 3 == 0);
        int32_t *ids;
        int n = rf_tokenizer_encode(t, buf, l, false, false, &ids);
        size_t dl;
        char *d = decode(t, ids, n, false, &dl);
        /* SPM adds its leading space (llama.cpp's detokenizer strips it again) */
        const char *got = spm && dl > 0 && d[0] == ' ' ? d + 1 : d;
        bool same = n >= 0 && strcmp(got, buf) == 0 && (!spm || l == 0 || d[0] == ' ');
        if (!same && total - ok < 3) fprintf(stderr, "%s round trip failed: '%s' -> '%s'\n", name, buf, d);
        ok += same;
        total++;
        free(d);
        free(ids);
    }
    CHECK(ok == total, "%s round trip %d/%d", name, ok, total);
    printf("round trip %-20s %d/%d\n", name, ok, total);
}

/* Malformed metadata gives NULL and an error that names the problem. */
static void test_errors(void) {
    const char *toks[] = {"a", "b", "ab"};
    const char *merges[] = {"a b"};
    struct {
        const char *model, *pre, *want;
    } cases[] = {
        {"gpt2", "no-such-pre", "no-such-pre"},
        {"bert", NULL, "bert"},
    };
    for (size_t i = 0; i < RF_ARRAY_LEN(cases); i++) {
        rf_gguf_writer *w = rf_gguf_writer_new();
        rf_gguf_w_str(w, "tokenizer.ggml.model", cases[i].model);
        if (cases[i].pre) rf_gguf_w_str(w, "tokenizer.ggml.pre", cases[i].pre);
        rf_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
        rf_gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 1);
        void *buf;
        size_t n;
        CHECK(rf_gguf_writer_to_memory(w, &buf, &n, NULL, NULL) == 0, "write: %s", rf_last_error());
        rf_gguf_writer_free(w);
        rf_gguf *g = rf_gguf_open_memory(buf, n);
        free(buf);
        CHECK(g != NULL, "open: %s", rf_last_error());
        if (!g) continue;
        rf_tokenizer *t = rf_tokenizer_load(g);
        CHECK(t == NULL && strstr(rf_last_error(), cases[i].want), "error names '%s': %s",
              cases[i].want, rf_last_error());
        rf_tokenizer_free(t);
        rf_gguf_close(g);
    }
    /* a tiny valid BPE vocab with the default pre-tokenizer */
    rf_gguf_writer *w = rf_gguf_writer_new();
    rf_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    rf_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    rf_gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    void *buf;
    size_t n;
    rf_gguf_writer_to_memory(w, &buf, &n, NULL, NULL);
    rf_gguf_writer_free(w);
    rf_gguf *g = rf_gguf_open_memory(buf, n);
    free(buf);
    rf_tokenizer *t = g ? rf_tokenizer_load(g) : NULL;
    CHECK(t != NULL, "tiny BPE vocab loads: %s", t ? "" : rf_last_error());
    if (t) {
        int32_t *ids;
        int k = rf_tokenizer_encode(t, "abba", 4, false, false, &ids);
        CHECK(k == 3 && ids[0] == 2 && ids[1] == 1 && ids[2] == 0, "tiny BPE merges 'ab' (%d)", k);
        free(ids);
        CHECK(strcmp(rf_tokenizer_pre_name(t), "default") == 0, "missing pre -> default");
        CHECK(rf_tokenizer_bos(t) == -1, "default BPE BOS 11 does not fit a 3-token vocab");
    }
    rf_tokenizer_free(t);
    rf_gguf_close(g);
}

/* Every pre-tokenizer name llama.cpp knows for llama/qwen2-family files loads (its regexes
 * compile under PCRE2) and splits a mixed text without error. */
static void test_all_pre_names(void) {
    static const char *names[] = {
        "default", "llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe", "chatglm-bpe",
        "deepseek-llm", "deepseek-v3", "deepseek3-llm", "deepseek-coder", "falcon", "mpt", "olmo",
        "jais", "gpt-2", "phi-2", "roberta-bpe", "starcoder", "refact", "command-r", "smollm",
        "codeshell", "exaone", "minerva-7b", "qwen2", "deepseek-r1-qwen", "megrez", "stablelm2",
        "poro-chat", "bloom", "gpt3-finnish", "viking", "tekken", "chameleon", "gpt-4o",
    };
    /* all 256 byte-level single-byte tokens, so every text round-trips */
    char *toks[256];
    for (int b = 0; b < 256; b++) {
        toks[b] = malloc(4);
        unsigned cp = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae) ? (unsigned)b
                      : b <= 0x20 ? 0x100u + (unsigned)b
                      : b <= 0xa0 ? 0x100u + 33 + ((unsigned)b - 0x7f) : 0x143u;
        char *o = toks[b];
        put_utf8(&o, cp);
        *o = 0;
    }
    const char *merges[] = {"a b"};
    const char *txt = "Hello  world!\n\n  It's 12345 x\t\u00e9t\u00e9 \u4e16\u754c\u3002 <sentinel:3> IMGIMGABZ "
                      "\xe1\xa0\x8e end   ";
    int ok = 0;
    for (size_t i = 0; i < RF_ARRAY_LEN(names); i++) {
        rf_gguf_writer *w = rf_gguf_writer_new();
        rf_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
        rf_gguf_w_str(w, "tokenizer.ggml.pre", names[i]);
        rf_gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, 256);
        rf_gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 1);
        void *buf;
        size_t n;
        rf_gguf_writer_to_memory(w, &buf, &n, NULL, NULL);
        rf_gguf_writer_free(w);
        rf_gguf *g = rf_gguf_open_memory(buf, n);
        free(buf);
        rf_tokenizer *t = g ? rf_tokenizer_load(g) : NULL;
        CHECK(t != NULL, "pre '%s' loads: %s", names[i], t ? "" : rf_last_error());
        if (t) {
            int32_t *ids;
            int k = rf_tokenizer_encode(t, txt, strlen(txt), false, false, &ids);
            char *d = k >= 0 ? decode(t, ids, k, false, NULL) : NULL;
            bool good = d && strcmp(d, txt) == 0;
            CHECK(good, "pre '%s': byte round trip", names[i]);
            ok += good;
            free(d);
            free(ids);
        }
        rf_tokenizer_free(t);
        rf_gguf_close(g);
    }
    printf("pre-tokenizers: %d/%zu load and round-trip\n", ok, RF_ARRAY_LEN(names));
    for (int b = 0; b < 256; b++) free(toks[b]);
}

int main(void) {
    double t0 = rf_time_s();
    static const char *files[] = {"ggml-vocab-llama-spm", "ggml-vocab-phi-3", "ggml-vocab-llama-bpe",
                                  "ggml-vocab-gpt-2", "ggml-vocab-starcoder"};
    int total = 0, passed = 0;
    for (size_t i = 0; i < RF_ARRAY_LEN(files); i++) vocab_file(files[i], &total, &passed);
    printf("vocab vectors: %d/%d\n", passed, total);

    golden("stories260K", true);
    golden("llama-2-tiny-random", false);
    golden("tiny-llama-f32", false);
    golden("tiny-qwen2-f32", false);

    const char *spm_path = test_shared("vocab/ggml-vocab-llama-spm.gguf");
    if (test_file_exists(spm_path)) {
        rf_tokenizer *t = load_tok(spm_path);
        if (t) {
            test_detok_spm(t);
            test_special_spm(t);
            round_trip(t, "llama-spm", true);
        }
        rf_tokenizer_free(t);
    } else {
        SKIP("%s missing", spm_path);
    }
    const char *bpe_path = test_shared("vocab/ggml-vocab-llama-bpe.gguf");
    if (test_file_exists(bpe_path)) {
        rf_tokenizer *t = load_tok(bpe_path);
        if (t) {
            test_special_bpe(t);
            round_trip(t, "llama-bpe", false);
        }
        rf_tokenizer_free(t);
    } else {
        SKIP("%s missing", bpe_path);
    }
    const char *g2 = test_shared("vocab/ggml-vocab-gpt-2.gguf");
    if (test_file_exists(g2)) {
        rf_tokenizer *t = load_tok(g2);
        if (t) round_trip(t, "gpt-2", false);
        rf_tokenizer_free(t);
    }
    test_errors();
    test_all_pre_names();
    printf("tokenizer tests took %.2f s\n", rf_time_s() - t0);
    return test_finish();
}
