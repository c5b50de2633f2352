/* tokenizer.h: text <-> token ids from a GGUF file's `tokenizer.ggml.*` metadata.
 *
 * Two vocabulary kinds are supported, both reproducing llama.cpp's tokenizer id for id:
 * - "llama": SentencePiece (SPM) — scores, byte fallback <0xNN>, "▁" for spaces, optional
 *   leading space (tokenizer.ggml.add_space_prefix, default true).
 * - "gpt2": byte-level BPE — GPT-2 byte<->unicode mapping, merge ranks from
 *   tokenizer.ggml.merges, pre-tokenizer regexes chosen by tokenizer.ggml.pre.
 *
 * Special tokens: control (type 3) and unknown (type 2) token text is recognised in the input
 * only with parse_special; user-defined (type 4) token text is always recognised, as llama.cpp
 * (and HF tokenizers) do for added tokens.
 *
 * A loaded tokenizer is immutable: every function taking `const rf_tokenizer *` may be called
 * from several threads at once. It keeps no pointer into the rf_gguf, which may be closed after
 * rf_tokenizer_load returns.
 */
#ifndef RF_TOKENIZER_H
#define RF_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rf_gguf;
typedef struct rf_tokenizer rf_tokenizer;

/* NULL + rf_set_error on missing, malformed or unsupported metadata (unknown model or
 * pre-tokenizer name: the error names it). */
rf_tokenizer *rf_tokenizer_load(const struct rf_gguf *g);
void rf_tokenizer_free(rf_tokenizer *t);

int32_t rf_tokenizer_n_vocab(const rf_tokenizer *t);
int32_t rf_tokenizer_bos(const rf_tokenizer *t); /* -1 if none */
int32_t rf_tokenizer_eos(const rf_tokenizer *t); /* -1 if none */
int32_t rf_tokenizer_eot(const rf_tokenizer *t); /* -1 if none */
bool rf_tokenizer_add_bos(const rf_tokenizer *t);
bool rf_tokenizer_add_eos(const rf_tokenizer *t);
/* eos, eot, eom and the other end-of-generation ids llama.cpp recognises by their text
 * ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", ...). */
bool rf_tokenizer_is_eog(const rf_tokenizer *t, int32_t id);
/* Token type as stored in GGUF (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
 * 6 byte), after llama.cpp's overrides (e.g. "<|eot_id|>" forced to control); 0 for a bad id. */
int rf_tokenizer_token_type(const rf_tokenizer *t, int32_t id);
const char *rf_tokenizer_model_name(const rf_tokenizer *t); /* "llama" (SPM) / "gpt2" (BPE) */
const char *rf_tokenizer_pre_name(const rf_tokenizer *t);   /* pre-tokenizer name ("default" if unset) */

/* Encodes text[0..len). add_special: add BOS/EOS as the vocab's flags say. parse_special:
 * recognise control/unknown special token text (e.g. "<s>", "<|eot_id|>") in the input as
 * single tokens. Returns the count and a malloc'd array in *out (free() it; non-NULL even for 0
 * tokens), or -1 with an error (e.g. add_special with add_bos set but no BOS id). */
int rf_tokenizer_encode(const rf_tokenizer *t, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t **out);

/* The id whose vocabulary string is exactly text[0..len), or -1. */
int32_t rf_tokenizer_token_id(const rf_tokenizer *t, const char *text, size_t len);
/* The raw vocabulary string of a token (NUL-terminated; NULL for a bad id). */
const char *rf_tokenizer_token_text(const rf_tokenizer *t, int32_t id);
/* The bytes of a token rendered as text (SPM: "▁"->" ", "<0xNN>"-> byte NN; BPE byte-level:
 * unicode->bytes; control and unknown tokens render as "" unless special, unused tokens always
 * as ""). Writes no NUL. Returns bytes written, or -1 (with an error) if cap is too small or the
 * id is bad. */
int rf_tokenizer_piece(const rf_tokenizer *t, int32_t id, bool special, char *buf, size_t cap);
/* Length of the piece without copying it (-1 for a bad id). */
int rf_tokenizer_piece_len(const rf_tokenizer *t, int32_t id, bool special);

/* Streaming detokenizer: emits only complete UTF-8 characters, holding back a trailing
 * partial sequence (at most 3 bytes) until the next token completes it. Bytes that can never
 * become valid UTF-8 are emitted as U+FFFD (one per maximal invalid subpart, as Unicode
 * recommends), so the output is always valid UTF-8. Pieces are
 * rendered with special=false (control tokens produce nothing).
 * Zero-initialise an rf_detok (`rf_detok d = {0};`) before the first push. */
typedef struct {
    unsigned char pending[8];
    int n_pending;
} rf_detok;
/* Bytes emitted into out, or -1 (state unchanged, error set) for a bad id or when cap is too
 * small; cap >= 3 * (piece length + 4) always suffices. */
int rf_detok_push(rf_detok *d, const rf_tokenizer *t, int32_t id, char *out, size_t cap);
/* Emits what is left (a held-back truncated sequence as one U+FFFD; cap >= 3 suffices) and
 * resets d. Returns bytes emitted or -1 if cap is too small. */
int rf_detok_flush(rf_detok *d, char *out, size_t cap);

#endif
