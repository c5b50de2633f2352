/* pretokenize.c: the regex pre-tokenizers of byte-level BPE vocabularies.
 *
 * Each `tokenizer.ggml.pre` name selects a list of regexes (those llama.cpp uses for it). They
 * are applied the way llama.cpp's unicode_regex_split does: the text starts as one piece; each
 * regex in turn splits every current piece further, keeping both the matches and the text
 * between matches as pieces; a regex never sees past the ends of the piece it splits (so a
 * lookahead like \s+(?!\S) treats a piece end as the end of the text). The final pieces are
 * the words that BPE merges within.
 *
 * The regexes run under PCRE2 with Unicode classes (UTF + UCP), compiled once at load and
 * JIT-compiled when available. `$` matches only at the very end (DOLLAR_ENDONLY), as in the
 * ECMAScript grammar llama.cpp's std::regex uses. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tokenizer/tk_internal.h"

/* ---- regex lists, as in llama.cpp's llm_tokenizer_bpe ----
 * Non-ASCII characters are written as PCRE \x{...} escapes: several of them (U+212A KELVIN
 * SIGN, U+2126 OHM SIGN, U+1FBE, ...) change under Unicode normalization, which editors and
 * tools may apply to literal text, silently turning a range into a different (or invalid) one. */

/* GPT-2's regex (also the word-level step of many others). */
#define RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
/* Llama 3 (tiktoken cl100k style), with the case-insensitive contractions spelled out. */
#define RX_LLAMA3                                                                               \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen2 / StableLM2: like Llama 3 but single digits. */
#define RX_QWEN2                                                                                \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

static const char *const rx_llama3[] = {RX_LLAMA3, NULL};
static const char *const rx_gpt2[] = {RX_GPT2, NULL};
static const char *const rx_qwen2[] = {RX_QWEN2, NULL};
static const char *const rx_starcoder[] = {"\\p{N}", RX_GPT2, NULL};
static const char *const rx_poro[] = {RX_PORO, NULL};
static const char *const rx_viking[] = {RX_PORO, "\\p{N}", NULL};
static const char *const rx_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    RX_GPT2,
    "\\p{N}+",
    "[0-9][0-9][0-9]",
    NULL,
};
static const char *const rx_falcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    RX_GPT2,
    "[0-9][0-9][0-9]",
    NULL,
};
static const char *const rx_deepseek_llm[] = {
    "[\r\n]",
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}+",
    NULL,
};
static const char *const rx_deepseek3_llm[] = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const rx_deepseek_coder[] = {
    "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}", NULL,
};
static const char *const rx_tekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?(("
    "?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const rx_chameleon[] = {
    "<sentinel:[0-9]+>",
    "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    "([\\t\\n]|    |  )",
    "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]",
    RX_GPT2,
    NULL,
};
static const char *const rx_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'["
    "vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-"
    "Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};

enum { F_IGNORE_MERGES = 1, F_ADD_BOS = 2 };

static const struct {
    const char *name;
    const char *const *rx;
    int flags;
} pre_table[] = {
    {"default", rx_default, 0},
    {"llama3", rx_llama3, F_IGNORE_MERGES | F_ADD_BOS},
    {"llama-v3", rx_llama3, F_IGNORE_MERGES | F_ADD_BOS},
    {"llama-bpe", rx_llama3, F_IGNORE_MERGES | F_ADD_BOS},
    {"falcon3", rx_llama3, F_IGNORE_MERGES | F_ADD_BOS},
    {"falcon-h1", rx_llama3, F_IGNORE_MERGES | F_ADD_BOS},
    {"pixtral", rx_llama3, F_IGNORE_MERGES | F_ADD_BOS},
    {"dbrx", rx_llama3, 0},
    {"smaug-bpe", rx_llama3, 0},
    {"chatglm-bpe", rx_llama3, 0},
    {"deepseek-llm", rx_deepseek_llm, 0},
    {"deepseek-v3", rx_deepseek3_llm, 0},
    {"deepseek3-llm", rx_deepseek3_llm, 0},
    {"deepseek-coder", rx_deepseek_coder, 0},
    {"falcon", rx_falcon, 0},
    {"mpt", rx_gpt2, 0},
    {"olmo", rx_gpt2, 0},
    {"jais", rx_gpt2, 0},
    {"gpt-2", rx_gpt2, 0},
    {"phi-2", rx_gpt2, 0},
    {"jina-es", rx_gpt2, 0},
    {"jina-de", rx_gpt2, 0},
    {"gigachat", rx_gpt2, 0},
    {"jina-v1-en", rx_gpt2, 0},
    {"jina-v2-es", rx_gpt2, 0},
    {"jina-v2-de", rx_gpt2, 0},
    {"jina-v2-code", rx_gpt2, 0},
    {"roberta-bpe", rx_gpt2, 0},
    {"starcoder", rx_starcoder, 0},
    {"refact", rx_starcoder, 0},
    {"command-r", rx_starcoder, 0},
    {"smollm", rx_starcoder, 0},
    {"codeshell", rx_starcoder, 0},
    {"exaone", rx_starcoder, 0},
    {"minerva-7b", rx_starcoder, 0},
    {"minerva", rx_starcoder, 0},
    {"qwen2", rx_qwen2, 0},
    {"deepseek-r1-qwen", rx_qwen2, 0},
    {"megrez", rx_qwen2, 0},
    {"stablelm2", rx_qwen2, 0},
    {"poro-chat", rx_poro, 0},
    {"poro", rx_poro, 0},
    {"bloom", rx_poro, 0},
    {"gpt3-finnish", rx_poro, 0},
    {"viking", rx_viking, 0},
    {"tekken", rx_tekken, F_IGNORE_MERGES | F_ADD_BOS},
    {"chameleon", rx_chameleon, F_ADD_BOS},
    {"gpt-4o", rx_gpt4o, 0},
    {"llama4", rx_gpt4o, 0},
};

/* llama.cpp's \s is Unicode White_Space (its unicode_set_whitespace); PCRE2's UCP \s also
 * matches U+180E. Rewrites \s and \S into explicit classes so both agree. Inside a bracket
 * class only \s occurs (as in [^\s\p{L}\p{N}]) and is replaced by the class contents. */
#define WS_SET "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

static char *rewrite_ws(const char *rx) {
    size_t n = strlen(rx), cap = n * 48 + 1, o = 0; /* each escape grows to < 96 bytes */
    char *out = rf_xmalloc(cap);
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = rx[i];
        if (c == '\\' && i + 1 < n) {
            char e = rx[i + 1];
            const char *rep = NULL;
            if (e == 's') rep = in_class ? WS_SET : "[" WS_SET "]";
            else if (e == 'S' && !in_class) rep = "[^" WS_SET "]";
            if (rep) {
                size_t rl = strlen(rep);
                memcpy(out + o, rep, rl);
                o += rl;
            } else {
                out[o++] = c;
                out[o++] = e;
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out[o++] = c;
            /* a ']' right after '[' or '[^' would be literal: copy those verbatim */
            if (i + 1 < n && rx[i + 1] == '^') out[o++] = rx[++i];
            if (i + 1 < n && rx[i + 1] == ']') out[o++] = rx[++i];
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        out[o++] = c;
    }
    out[o] = 0;
    return out;
}

struct tk_pretok {
    int n;
    pcre2_code **code;
};

void tk_pretok_free(tk_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->code[i]);
    free(p->code);
    free(p);
}

tk_pretok *tk_pretok_new(const char *pre_name, bool *ignore_merges, bool *add_bos_default,
                         bool *known) {
    const char *const *rx = NULL;
    int flags = 0;
    if (!pre_name || !*pre_name) pre_name = "default"; /* llama.cpp warns and uses default */
    for (size_t i = 0; i < RF_ARRAY_LEN(pre_table); i++) {
        if (strcmp(pre_table[i].name, pre_name) == 0) {
            rx = pre_table[i].rx;
            flags = pre_table[i].flags;
            break;
        }
    }
    if (known) *known = rx != NULL;
    if (!rx) {
        rf_set_error("unknown pre-tokenizer type: '%s'", pre_name);
        return NULL;
    }
    *ignore_merges = (flags & F_IGNORE_MERGES) != 0;
    *add_bos_default = (flags & F_ADD_BOS) != 0;
    tk_pretok *p = rf_xcalloc(1, sizeof *p);
    while (rx[p->n]) p->n++;
    p->code = rf_xcalloc((size_t)p->n, sizeof *p->code);
    for (int i = 0; i < p->n; i++) {
        int err;
        PCRE2_SIZE erroff;
        char *pat = rewrite_ws(rx[i]);
        p->code[i] = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &erroff, NULL);
        free(pat);
        if (!p->code[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            rf_set_error("pre-tokenizer '%s': regex %d does not compile at offset %zu: %s", pre_name,
                         i, (size_t)erroff, (const char *)msg);
            p->n = i;
            tk_pretok_free(p);
            return NULL;
        }
        /* JIT is an optimisation only: without it pcre2_match interprets. */
        (void)pcre2_jit_compile(p->code[i], PCRE2_JIT_COMPLETE);
    }
    return p;
}

typedef struct {
    size_t *v; /* piece lengths in codepoints */
    size_t n, cap;
} szvec;

static void sz_push(szvec *a, size_t x) {
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 16;
        a->v = rf_xrealloc(a->v, a->cap * sizeof *a->v);
    }
    a->v[a->n++] = x;
}

/* Splits every piece of `in` (lengths in codepoints) with one regex into `out`. The regex runs
 * over `subj` (valid UTF-8), where codepoint k starts at byte cp_off[k]; byte2cp maps a byte
 * offset at a codepoint boundary back to its codepoint index. */
static int split_one(const pcre2_code *code, pcre2_match_data *md, const char *subj,
                     const size_t *cp_off, const size_t *byte2cp, const szvec *in, szvec *out) {
    size_t cstart = 0;
    for (size_t pi = 0; pi < in->n; pi++) {
        size_t clen = in->v[pi];
        size_t bs = cp_off[cstart], be = cp_off[cstart + clen];
        PCRE2_SPTR s = (PCRE2_SPTR)(subj + bs);
        size_t plen = be - bs, pos = 0, last = 0;
        while (pos <= plen) {
            int rc = pcre2_match(code, s, plen, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                rc = pcre2_match(code, s, plen, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                rf_set_error("pre-tokenizer regex failed: %s", (const char *)msg);
                return -1;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me > ms) {
                if (ms > last) sz_push(out, byte2cp[bs + ms] - byte2cp[bs + last]);
                sz_push(out, byte2cp[bs + me] - byte2cp[bs + ms]);
                last = me;
                pos = me;
            } else {
                /* An empty match yields an empty word in llama.cpp, which tokenizes to
                 * nothing: skip it and step over one character. */
                if (ms >= plen) break;
                pos = ms + (size_t)tk_utf8_len((unsigned char)s[ms]);
            }
        }
        if (last < plen) sz_push(out, byte2cp[be] - byte2cp[bs + last]);
        cstart += clen;
    }
    return 0;
}

int tk_pretok_split(const tk_pretok *p, const char *text, size_t len, char **buf, size_t **ends,
                    size_t *n_words) {
    *buf = NULL;
    *ends = NULL;
    *n_words = 0;
    /* Codepoints as llama.cpp decodes them (invalid bytes -> U+FFFD). */
    uint32_t *cps = rf_xmalloc((len + 1) * sizeof *cps);
    size_t ncp = 0;
    for (size_t i = 0; i < len;) cps[ncp++] = tk_utf8_decode(text, len, &i);
    /* The regex subject: the same codepoints as valid UTF-8. Surrogates and values past
     * U+10FFFF (which the lenient decoder lets through) are matched as U+FFFD. */
    char *subj = rf_xmalloc(ncp * 4 + 1);
    size_t *cp_off = rf_xmalloc((ncp + 1) * sizeof *cp_off);
    size_t sl = 0;
    for (size_t k = 0; k < ncp; k++) {
        uint32_t c = cps[k];
        if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) c = 0xFFFD;
        cp_off[k] = sl;
        sl += (size_t)tk_utf8_encode(c, subj + sl);
    }
    cp_off[ncp] = sl;
    subj[sl] = 0;
    size_t *byte2cp = rf_xmalloc((sl + 1) * sizeof *byte2cp);
    for (size_t k = 0; k <= ncp; k++) byte2cp[cp_off[k]] = k;

    szvec cur = {0}, nxt = {0};
    int rc = 0;
    if (ncp) sz_push(&cur, ncp);
    for (int r = 0; r < p->n && cur.n; r++) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->code[r], NULL);
        if (!md) {
            rf_set_error("pre-tokenizer: out of memory for match data");
            rc = -1;
            break;
        }
        nxt.n = 0;
        rc = split_one(p->code[r], md, subj, cp_off, byte2cp, &cur, &nxt);
        pcre2_match_data_free(md);
        if (rc) break;
        szvec t = cur;
        cur = nxt;
        nxt = t;
    }
    if (rc == 0) {
        /* Byte-level encode each word: every UTF-8 byte becomes one GPT-2 codepoint (<= 2 bytes). */
        char *out = rf_xmalloc(ncp * 8 + 1);
        size_t *we = rf_xmalloc((cur.n + 1) * sizeof *we);
        size_t ol = 0, k = 0, nw = 0;
        for (size_t w = 0; w < cur.n; w++) {
            if (cur.v[w] == 0) continue;
            for (size_t e = k + cur.v[w]; k < e; k++) {
                char u[4];
                int nu = tk_utf8_encode(cps[k], u);
                for (int b = 0; b < nu; b++) ol += (size_t)tk_utf8_encode(tk_byte_to_cp((uint8_t)u[b]), out + ol);
            }
            we[nw++] = ol;
        }
        out[ol] = 0;
        *buf = out;
        *ends = we;
        *n_words = nw;
    }
    free(cur.v);
    free(nxt.v);
    free(byte2cp);
    free(cp_off);
    free(subj);
    free(cps);
    return rc;
}
