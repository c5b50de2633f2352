/* rocmforge.h: the public C API.
 *
 *   rf_model *m = rf_model_load("model.gguf", NULL);          // NULL params: defaults
 *   rf_context *c = rf_context_new(m, NULL);
 *   int32_t *ids; int n = rf_tokenize(m, "Hello", 5, true, false, &ids);
 *   int seq = rf_seq_new(c);
 *   rf_batch b = rf_batch_for_sequence(seq, ids, n, start_pos = 0, last_logits = true);
 *   rf_decode(c, &b);
 *   rf_sampler *s = rf_sampler_new(NULL);
 *   int32_t next = rf_sampler_sample(s, c, n - 1, NULL);
 *
 * Errors: functions return NULL or a negative value and rf_error() describes the last failure
 * of the calling thread in one line. Nothing in the library exits or prints errors itself.
 * A NULL path, text, output pointer, buffer, model (rf_context_new) or batch (or batch array) is
 * such an error; a refused batch changes nothing. The handles a function works on (m, c, s) must
 * come from this library, and the _free functions take NULL.
 */
#ifndef ROCMFORGE_H
#define ROCMFORGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_model rf_model;
typedef struct rf_context rf_context;
typedef struct rf_sampler rf_sampler;

const char *rf_error(void);
const char *rf_version(void);
/* Backends compiled into this library, e.g. "cpu cuda(sm_80,sm_90)". */
const char *rf_build_info(void);
/* GPUs this build can use on this machine (0: none, or no GPU backend built). */
int rf_gpu_devices(void);

#define RF_MAX_THREADS 1024 /* the most CPU threads rf_model_load takes */

typedef struct {
    const char *device; /* "cpu" (default), "cpu-ref" (exact reference ops), "gpu", "gpu:N" */
    int n_threads;      /* CPU threads, at most RF_MAX_THREADS; <= 0: one per physical core */
    int n_gpu_layers;   /* layers on the GPU; < 0: all */
} rf_model_params;

rf_model_params rf_model_default_params(void);
rf_model *rf_model_load(const char *path, const rf_model_params *params);
void rf_model_free(rf_model *m);
int rf_model_n_vocab(const rf_model *m);
int rf_model_n_ctx_train(const rf_model *m);
/* e.g. "cpu (avx512, 2 threads)" or "cuda (NVIDIA H100 80GB HBM3)". */
const char *rf_model_backend(const rf_model *m);

/* Tokenization. add_special: BOS/EOS as the vocabulary asks. parse_special: control-token text
 * such as "<s>" becomes that token. Returns the count and a malloc'd array (free()). */
int rf_tokenize(const rf_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                int32_t **out);
/* Text of one token (bytes, possibly part of a UTF-8 character); -1 if cap is too small. */
int rf_token_to_piece(const rf_model *m, int32_t token, char *buf, size_t cap);
bool rf_token_is_eog(const rf_model *m, int32_t token);
int32_t rf_token_bos(const rf_model *m);

/* Element type of the K/V cache (keys and values alike). f16 halves the cache's memory and the
 * bytes attention reads per generated token (llama.cpp's default); f32 is the exact reference;
 * q8_0 (int8 codes with a binary16 scale per 32 elements, llama.cpp's q8_0 rounding) halves f16's
 * bytes again for long contexts, at ~0.3% relative error per cached element; it needs head_dim a
 * multiple of 32. q4_0 (4-bit codes with a binary16 scale per 32 elements: 4.5 bits per element,
 * about half q8_0's bytes; llama.cpp's q4_0 rounding; head_dim a multiple of 32) errs ~16x as
 * much as q8_0: ~7% relative error per cached element (RMS), which moved the test models' logits
 * 13-18% (relative L2) from llama.cpp's, against ~1% for q8_0. */
typedef enum {
    RF_KV_AUTO = 0, /* the backend's choice: f16 (f32 on the reference CPU modes) */
    RF_KV_F32 = 1,
    RF_KV_F16 = 2,
    RF_KV_Q8_0 = 3,
    RF_KV_Q4_0 = 4,
} rf_kv_type;

typedef struct {
    int n_ctx;     /* tokens per sequence; <= 0: the model's training context, capped at 4096; at most 2^24 */
    int n_batch;   /* most tokens per rf_decode call; <= 0: 512; at most 2^20 */
    int n_seq_max; /* sequences at once; <= 0: 1; at most 4096 */
    int kv_type;   /* rf_kv_type; another value makes rf_context_new fail */
} rf_context_params;

rf_context_params rf_context_default_params(void);
rf_context *rf_context_new(rf_model *m, const rf_context_params *params);
void rf_context_free(rf_context *c);
int rf_context_n_ctx(const rf_context *c);
int rf_context_n_batch(const rf_context *c);
/* The K/V cache type the context got (never RF_KV_AUTO). */
rf_kv_type rf_context_kv_type(const rf_context *c);

/* Sequences: ids are small integers; fork shares the cache (no copy). */
int rf_seq_new(rf_context *c);
int rf_seq_fork(rf_context *c, int seq);
void rf_seq_remove(rf_context *c, int seq);
int rf_seq_len(const rf_context *c, int seq);
/* Keeps the first n_pos positions of seq (0 <= n_pos <= rf_seq_len) and drops the rest: a
 * rejected continuation, or the step a pipelined loop enqueued after an end-of-generation token.
 * The next token of seq goes to position n_pos. Cache blocks no other sequence shares go back to
 * the pool; a fork keeps what it shares. 0 on success, negative (rf_error says why) otherwise. */
int rf_seq_truncate(rf_context *c, int seq, int n_pos);

/* A batch: n_tokens tokens, each appended to sequence seq_id[i] at position pos[i], which must be
 * that sequence's current length (counting earlier tokens of the same sequence in this batch).
 * logits[i] != 0 asks for the logits of token i. */
typedef struct {
    int n_tokens;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *seq_id;
    const int8_t *logits;
} rf_batch;

/* Runs the model over the batch (n_tokens <= n_batch). 0 on success. */
int rf_decode(rf_context *c, const rf_batch *batch);
/* Logits [n_vocab] of batch token i of the last rf_decode (it must have asked for them).
 * The first call after a decode copies all requested rows to the host. */
const float *rf_get_logits(rf_context *c, int i);

typedef struct {
    float temp;           /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    float freq_penalty;
    float presence_penalty;
    int penalty_last_n;
    uint64_t seed;
} rf_sampler_params;

rf_sampler_params rf_sampler_default_params(void);
/* params NULL: the defaults. Returns NULL (rf_error() says why) for a NaN or infinite parameter
 * or a repeat_penalty <= 0. */
rf_sampler *rf_sampler_new(const rf_sampler_params *params);
void rf_sampler_free(rf_sampler *s);
/* Samples from the logits of batch token i on the context's device; only the token id (and
 * log-probability, when asked) comes back to the host. The token is added to the sampler's
 * history (for penalties). Negative on error. */
int32_t rf_sampler_sample(rf_sampler *s, rf_context *c, int i, float *logprob);
/* Adds a token to the penalty history without sampling it (e.g. prompt tokens). */
void rf_sampler_accept(rf_sampler *s, int32_t token);

/* Pipelined generation: the sampled token goes to the next step on the device, and the host
 * learns it while that step runs, so the GPU does not wait for the host between tokens.
 *   rf_sampler_sample_async(s, c, i);     // after the prompt's rf_decode
 *   for (;;) {
 *       rf_decode_next(c, seq);           // decodes the token just sampled, not yet known here
 *       int32_t t = rf_sampler_fetch(s, c);
 *       if (t < 0 || done(t)) break;      // the step already enqueued has consumed t
 *       rf_sampler_sample_async(s, c, 0);
 *   }
 * rf_sampler_sample_async samples like rf_sampler_sample and returns at once; rf_sampler_fetch
 * waits for that token (not for work enqueued after it) and adds it to the history; it returns
 * the token sampled even when an rf_decode of other tokens came between. A context's
 * sample must be fetched before its next one, with whichever sampler. rf_decode_next is rf_decode
 * of one token at the sequence's next position with logits, the token being the last
 * rf_sampler_sample_async's (an error if there is none, or if an rf_decode came between). 0 / the
 * token on success, negative on error. */
int rf_sampler_sample_async(rf_sampler *s, rf_context *c, int i);
int32_t rf_sampler_fetch(rf_sampler *s, rf_context *c);
int rf_decode_next(rf_context *c, int seq);

#ifdef __cplusplus
}
#endif
#endif
