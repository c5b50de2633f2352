/* tk_internal.h: what the tokenizer's source files share. Not part of the public API. */
#ifndef RF_TK_INTERNAL_H
#define RF_TK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* Token types as GGUF stores them (llama_token_type). */
enum {
    TK_UNDEFINED = 0,
    TK_NORMAL = 1,
    TK_UNKNOWN = 2,
    TK_CONTROL = 3,
    TK_USER_DEFINED = 4,
    TK_UNUSED = 5,
    TK_BYTE = 6,
};

enum { TK_SPM = 1, TK_BPE = 2 };

/* ---- byte-string hash map (strmap.c) ----
 * Open addressing, linear probing; keys are copied into an arena owned by the map. Lookups of
 * absent keys return -1; values are >= 0. */
typedef struct {
    uint64_t *hashes; /* 0 = empty slot */
    uint32_t *key_off;
    uint32_t *key_len;
    int32_t *vals;
    size_t cap, n; /* cap is a power of two */
    char *arena;
    size_t arena_len, arena_cap;
} tk_strmap;

void tk_strmap_init(tk_strmap *m, size_t expect);
void tk_strmap_free(tk_strmap *m);
/* overwrite=true: the last put wins (like std::map operator[]); false: the first wins (emplace). */
void tk_strmap_put(tk_strmap *m, const char *key, size_t len, int32_t val, bool overwrite);
int32_t tk_strmap_get(const tk_strmap *m, const char *key, size_t len);

/* ---- UTF-8 helpers (unicode.c), with llama.cpp's leniency ---- */
/* Sequence length implied by a lead byte (continuation bytes and 0xF8.. give 1). */
int tk_utf8_len(unsigned char c);
/* Decodes one codepoint at s[*i] (n bytes total) the way llama.cpp's unicode_cpt_from_utf8
 * does (no overlong/surrogate checks); invalid input yields 0xFFFD and advances one byte. */
uint32_t tk_utf8_decode(const char *s, size_t n, size_t *i);
/* Encodes cp (any value < 0x200000) into out; returns the byte count (1..4). */
int tk_utf8_encode(uint32_t cp, char *out);
/* GPT-2 byte-level mapping: byte -> codepoint, and codepoint -> byte (-1 if not in the map). */
uint32_t tk_byte_to_cp(uint8_t b);
int tk_cp_to_byte(uint32_t cp);

/* ---- growable int32 vector ---- */
typedef struct {
    int32_t *v;
    size_t n, cap;
} tk_ivec;
void tk_ivec_push(tk_ivec *a, int32_t x);

/* ---- pre-tokenizer (pretokenize.c) ---- */
typedef struct tk_pretok tk_pretok;
/* Builds the regex list for a pre-tokenizer name; NULL + error naming it when unknown or when
 * a regex fails to compile. Also reports the name's flags (llama.cpp's per-name settings). */
tk_pretok *tk_pretok_new(const char *pre_name, bool *ignore_merges, bool *add_bos_default,
                         bool *known);
void tk_pretok_free(tk_pretok *p);
/* Splits text[0..len) into words, each returned as byte-level-encoded UTF-8 (every byte of the
 * word's UTF-8 mapped through the GPT-2 byte->unicode table). The words are concatenated in
 * *buf (malloc'd) with their end offsets in *ends (malloc'd, *n_words entries). Invalid UTF-8
 * input bytes become U+FFFD first, as llama.cpp does. -1 + error on a regex engine failure. */
int tk_pretok_split(const tk_pretok *p, const char *text, size_t len, char **buf, size_t **ends,
                    size_t *n_words);

/* ---- the tokenizer ---- */
struct rf_tokenizer {
    int kind; /* TK_SPM / TK_BPE */
    char *model_name, *pre_name;
    int32_t n_vocab;
    char **text;      /* token strings (NUL-terminated), empty ones renamed "[EMPTY_i]" */
    uint32_t *text_len;
    float *score;
    uint8_t *type;    /* TK_* */
    uint8_t *lstrip, *rstrip;
    tk_strmap tok_map;   /* text -> id (last id wins on duplicates) */
    tk_strmap merge_map; /* u32 len(left) ++ left ++ right -> rank (first wins) */
    tk_pretok *pretok;
    bool ignore_merges;
    bool add_bos, add_eos, add_space_prefix;
    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    uint8_t *eog; /* per id */
    int32_t *special;  /* control/user-defined/unknown ids, longest text first */
    int32_t n_special;
    char *piece_blob;      /* rendered pieces (special=true), concatenated */
    uint32_t *piece_off;   /* n_vocab + 1 offsets into piece_blob */
};

/* spm.c: appends the SPM tokens of an already escaped ("▁" for spaces) text. -1 + error when
 * a byte has no token and the vocab has no fallback. */
int tk_spm_tokenize(const rf_tokenizer *t, const char *text, size_t len, tk_ivec *out);
/* bpe.c: appends the BPE tokens of a raw text fragment. */
int tk_bpe_tokenize(const rf_tokenizer *t, const char *text, size_t len, tk_ivec *out);
/* bpe.c: merge rank of the pair (left, right), -1 if none. */
int32_t tk_bpe_rank(const rf_tokenizer *t, const char *l, size_t ln, const char *r, size_t rn,
                    char **scratch, size_t *scratch_cap);
/* detok.c: renders token `id` (special=true) the way llama.cpp's token_to_piece does, into a
 * malloc'd string. */
char *tk_render_piece(const rf_tokenizer *t, int32_t id, size_t *len);

#endif
