/* context.h: the state of running a model: KV pool, activation buffers, step description. */
#ifndef RF_CONTEXT_H
#define RF_CONTEXT_H

#include "backend/backend.h"
#include "kv_cache.h"
#include "model/model.h"
#include "rocmforge.h"

struct rf_context {
    rf_model *m;
    rf_backend *be;
    int n_ctx, n_batch, n_seq_max;

    rf_kv_pool kv;
    /* Backend memory: [n_layer][n_slots][kv_dim] elements of kv_type (backend.h's layout). */
    void *k_cache, *v_cache;
    uint32_t kv_type;   /* RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_Q8_0 or RF_TYPE_Q4_0 (core/kv_format.h) */
    size_t layer_bytes; /* n_slots * kv_dim * element size: layer l starts at l * layer_bytes */

    /* Activations, backend memory, sized for n_batch tokens. */
    float *x, *h, *q, *k, *v, *attn, *gate, *up, *hsel, *logits;

    /* Step description: one int32 region in backend memory mirrored on the host, uploaded once
     * per step: tokens, pos, slot, seq_row, out_rows ([n_batch] each), then the block table. */
    rf_step step;
    int32_t *step_dev, *step_host;
    size_t step_ints;

    /* Sampling: device-side outputs and penalty history. token_on_device: the last
     * rf_sampler_sample_async wrote its token into the step region's tokens[0], for
     * rf_decode_next; sample_pending: its copy to the host (the backend's one download_start
     * slot) is not fetched yet, whichever sampler made it. */
    int32_t *d_token, *d_history;
    bool token_on_device, sample_pending;
    float *d_logprob;
    int history_cap;

    /* Captured single-token decode steps, one per 256-position bucket of the context (kernels may
     * size launches from step.max_pos, a hint: a replayed graph is correct at any position, the
     * bucket keeps it fast). seen[b]: a step of bucket b ran eagerly (scratch is sized). */
    bool use_graphs;
    int n_graph_buckets;
    rf_graph **graphs;
    bool *graph_seen;

    /* Logits of the last decode: batch index -> output row (-1: not requested). */
    int last_n_tokens;
    int32_t *out_row_of;
    float *host_logits;
    bool host_logits_valid;
};

/* The forward pass over the step already uploaded to c->step (forward.c). */
void rf_forward(rf_context *c);

#endif
