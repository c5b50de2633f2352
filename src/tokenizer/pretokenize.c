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

/* ---- regex lists, as in llama.cpp's llm_tokenizer_bpe ---- */

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
#define RX_PORO " ?[^(\\s|.,!?…。，、।۔،)]+"

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
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
    NULL,
};
static const char *const rx_deepseek3_llm[] = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const rx_deepseek_coder[] = {
    "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}", NULL,
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
        p->code[i] = pcre2_compile((PCRE2_SPTR)rx[i], PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &erroff, NULL);
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
