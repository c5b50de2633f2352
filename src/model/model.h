/* model.h: what a GGUF file describes: architecture, hyperparameters, weights, tokenizer.
 *
 * Supported architectures: `llama` (Llama 1/2/3, Mistral), `qwen2` (Q/K/V biases, NEOX rotary),
 * `qwen3` (per-head RMSNorm on Q and K, NEOX rotary). Loading validates every tensor's presence,
 * shape and type against the hyperparameters before anything is computed; errors name the tensor.
 */
#ifndef RF_MODEL_H
#define RF_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/gguf.h"

typedef enum { RF_ARCH_LLAMA, RF_ARCH_QWEN2, RF_ARCH_QWEN3 } rf_arch;

typedef struct {
    rf_arch arch;
    const char *arch_name;
    int n_vocab;
    int n_embd;
    int n_layer;
    int n_head;
    int n_kv_head;
    int head_dim; /* attention.key_length when present, else n_embd / n_head */
    int n_ff;
    int n_ctx_train;
    int n_rot; /* rope.dimension_count, else head_dim */
    float rms_eps;
    float rope_base;
    float rope_freq_scale; /* 1 / linear scaling factor */
    int rope_mode;         /* RF_ROPE_NORMAL or RF_ROPE_NEOX */
    bool tied_embeddings;  /* no output.weight: logits use token_embd.weight */
    bool has_qkv_bias;
    bool has_qk_norm;
    bool has_rope_freqs; /* Llama 3 style per-frequency factors (rope_freqs.weight) */
} rf_hparams;

typedef struct {
    rf_weight attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm;
    rf_weight ffn_norm, w_gate, w_up, w_down;
} rf_layer;

struct rf_tokenizer;

typedef struct rf_model {
    rf_gguf *gguf;
    rf_hparams hp;
    struct rf_tokenizer *tok;
    rf_weight tok_embd, output_norm, output, rope_freqs;
    rf_layer *layers;
    char *name; /* general.name or the file name */
    rf_backend *be; /* where the weights live (NULL: described only, not uploaded) */
    uint64_t weight_bytes;
    uint64_t n_params;
} rf_model;

/* Opens and validates a model file (hyperparameters, tensors, tokenizer). Nothing is uploaded.
 * Unsupported architectures and weight types are refused by name. */
rf_model *rf_model_open(const char *path);
/* Makes every weight available to `be` (GPU: copies to device memory). */
int rf_model_upload(rf_model *m, rf_backend *be);
void rf_model_close(rf_model *m);

/* Reads only the hyperparameters (used by `info` on files whose tensors are not loadable). */
int rf_hparams_read(const rf_gguf *g, rf_hparams *hp);

#endif
