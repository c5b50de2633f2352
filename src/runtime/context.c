/* context.c: contexts, sequences and rf_decode: turns a user batch into a step description,
 * reserves KV blocks, uploads the step once and runs the forward pass. */
#include "context.h"

#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/kv_format.h"
#include "core/util.h"

rf_context_params rf_context_default_params(void) {
    rf_context_params p = {0, 512, 1, RF_KV_AUTO};
    return p;
}

enum { KV_BLOCK_SIZE = 32, GRAPH_BUCKET = 256 };

static void *balloc(rf_context *c, size_t bytes, bool *ok) {
    if (!*ok) return NULL;
    void *p = c->be->ops->alloc(c->be, bytes);
    if (!p) *ok = false;
    return p;
}

rf_context *rf_context_new(rf_model *m, const rf_context_params *params) {
    rf_context_params p = params ? *params : rf_context_default_params();
    if (!m || !m->be) {
        rf_set_error("%s (load it with rf_model_load)", m ? "model has no backend" : "no model");
        return NULL;
    }
    const rf_hparams *hp = &m->hp;
    if (p.n_ctx <= 0) p.n_ctx = RF_MIN(hp->n_ctx_train, 4096);
    if (p.n_batch <= 0) p.n_batch = 512;
    if (p.n_seq_max <= 0) p.n_seq_max = 1;
    enum { MAX_CTX = 1 << 24, MAX_BATCH = 1 << 20, MAX_SEQ = 4096 };
    if (p.n_ctx > MAX_CTX || p.n_batch > MAX_BATCH || p.n_seq_max > MAX_SEQ) {
        rf_set_error("context size %d / batch %d / sequences %d out of range (at most %d / %d / %d)", p.n_ctx,
                     p.n_batch, p.n_seq_max, MAX_CTX, MAX_BATCH, MAX_SEQ);
        return NULL;
    }
    p.n_batch = RF_MIN(p.n_batch, p.n_ctx * p.n_seq_max);
    uint32_t kv_type;
    switch (p.kv_type) {
    case RF_KV_AUTO: kv_type = m->be->ops->kv_type_default; break;
    case RF_KV_F32: kv_type = RF_TYPE_F32; break;
    case RF_KV_F16: kv_type = RF_TYPE_F16; break;
    case RF_KV_Q8_0: kv_type = RF_TYPE_Q8_0; break;
    case RF_KV_Q4_0: kv_type = RF_TYPE_Q4_0; break;
    default:
        rf_set_error("creating context: K/V cache type %d: expected RF_KV_AUTO, RF_KV_F32, RF_KV_F16, RF_KV_Q8_0 or "
                     "RF_KV_Q4_0",
                     p.kv_type);
        return NULL;
    }
    if ((kv_type == RF_TYPE_Q8_0 || kv_type == RF_TYPE_Q4_0) && hp->head_dim % RF_KV_Q8_BLOCK) {
        rf_set_error("creating context: a %s K/V cache needs head_dim a multiple of %d (this model: %d); use f16",
                     rf_kv_type_name(kv_type), RF_KV_Q8_BLOCK, hp->head_dim);
        return NULL;
    }

    rf_context *c = rf_xcalloc(1, sizeof *c);
    c->m = m;
    c->be = m->be;
    c->n_ctx = p.n_ctx;
    c->n_batch = p.n_batch;
    c->n_seq_max = p.n_seq_max;
    c->kv_type = kv_type;

    int max_blocks = (p.n_ctx + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE;
    int n_blocks = max_blocks * p.n_seq_max;
    if (rf_kv_init(&c->kv, n_blocks, KV_BLOCK_SIZE, p.n_ctx, p.n_seq_max)) goto fail;
    size_t kv_dim = (size_t)hp->n_kv_head * hp->head_dim;
    size_t n_slots = (size_t)n_blocks * KV_BLOCK_SIZE;
    c->layer_bytes = n_slots * rf_kv_row_bytes(kv_type, (int64_t)kv_dim);
    size_t kv_bytes = c->layer_bytes * (size_t)hp->n_layer;

    size_t nb = (size_t)p.n_batch, d = (size_t)hp->n_embd;
    size_t q_dim = (size_t)hp->n_head * hp->head_dim;
    size_t act_bytes = nb * sizeof(float) * (3 * d + 2 * q_dim + 2 * kv_dim + 2 * (size_t)hp->n_ff) +
                       nb * sizeof(float) * (size_t)hp->n_vocab;
    size_t free_mem = c->be->ops->mem_free(c->be);
    if (free_mem && 2 * kv_bytes + act_bytes > free_mem) {
        rf_set_error("context does not fit in device memory: %s KV cache 2 x %.1f MiB (%d tokens x %d sequences) "
                     "+ activations %.1f MiB > %.1f MiB free; lower -c or the sequence count",
                     rf_kv_type_name(kv_type), kv_bytes / 1048576.0, p.n_ctx, p.n_seq_max,
                     act_bytes / 1048576.0, free_mem / 1048576.0);
        goto fail;
    }
    bool ok = true;
    c->k_cache = balloc(c, kv_bytes, &ok);
    c->v_cache = balloc(c, kv_bytes, &ok);
    c->x = balloc(c, nb * d * 4, &ok);
    c->h = balloc(c, nb * d * 4, &ok);
    c->hsel = balloc(c, nb * d * 4, &ok);
    c->q = balloc(c, nb * q_dim * 4, &ok);
    c->attn = balloc(c, nb * q_dim * 4, &ok);
    c->k = balloc(c, nb * kv_dim * 4, &ok);
    c->v = balloc(c, nb * kv_dim * 4, &ok);
    c->gate = balloc(c, nb * (size_t)hp->n_ff * 4, &ok);
    c->up = balloc(c, nb * (size_t)hp->n_ff * 4, &ok);
    c->logits = balloc(c, nb * (size_t)hp->n_vocab * 4, &ok);
    c->step_ints = 5 * nb + (size_t)p.n_seq_max * max_blocks;
    c->step_dev = balloc(c, c->step_ints * 4, &ok);
    c->history_cap = 4096;
    c->d_token = balloc(c, sizeof(int32_t), &ok);
    c->d_logprob = balloc(c, sizeof(float), &ok);
    c->d_history = balloc(c, (size_t)c->history_cap * 4, &ok);
    if (!ok) goto fail;
    c->step_host = rf_xcalloc(c->step_ints, sizeof(int32_t));
    c->out_row_of = rf_xmalloc(nb * sizeof(int32_t));
    c->host_logits = rf_xmalloc(nb * (size_t)hp->n_vocab * sizeof(float));

    rf_step *st = &c->step;
    st->n_seq_rows = p.n_seq_max;
    st->max_blocks = max_blocks;
    st->block_size = KV_BLOCK_SIZE;
    st->tokens = c->step_dev;
    st->pos = c->step_dev + nb;
    st->slot = c->step_dev + 2 * nb;
    st->seq_row = c->step_dev + 3 * nb;
    st->out_rows = c->step_dev + 4 * nb;
    st->block_table = c->step_dev + 5 * nb;
    const char *ng = getenv("ROCMFORGE_NO_GRAPHS");
    c->use_graphs = c->be->ops->graph_begin && !(ng && *ng && strcmp(ng, "0"));
    c->n_graph_buckets = (p.n_ctx + GRAPH_BUCKET - 1) / GRAPH_BUCKET;
    c->graphs = rf_xcalloc((size_t)c->n_graph_buckets, sizeof *c->graphs);
    c->graph_seen = rf_xcalloc((size_t)c->n_graph_buckets, sizeof *c->graph_seen);
    return c;
fail:
    rf_prefix_error("creating context");
    rf_context_free(c);
    return NULL;
}

void rf_context_free(rf_context *c) {
    if (!c) return;
    void *bufs[] = {c->k_cache, c->v_cache, c->x, c->h, c->hsel, c->q, c->attn, c->k, c->v,
                    c->gate, c->up, c->logits, c->step_dev, c->d_token, c->d_logprob, c->d_history};
    for (size_t i = 0; i < RF_ARRAY_LEN(bufs); i++)
        if (bufs[i]) c->be->ops->free(c->be, bufs[i]);
    for (int i = 0; c->graphs && i < c->n_graph_buckets; i++)
        if (c->graphs[i]) c->be->ops->graph_free(c->be, c->graphs[i]);
    free(c->graphs);
    free(c->graph_seen);
    rf_kv_free(&c->kv);
    free(c->step_host);
    free(c->out_row_of);
    free(c->host_logits);
    free(c);
}

int rf_context_n_ctx(const rf_context *c) { return c->n_ctx; }
int rf_context_n_batch(const rf_context *c) { return c->n_batch; }
rf_kv_type rf_context_kv_type(const rf_context *c) {
    return c->kv_type == RF_TYPE_F16    ? RF_KV_F16
           : c->kv_type == RF_TYPE_Q8_0 ? RF_KV_Q8_0
           : c->kv_type == RF_TYPE_Q4_0 ? RF_KV_Q4_0
                                        : RF_KV_F32;
}

int rf_seq_new(rf_context *c) { return rf_kv_seq_new(&c->kv); }
void rf_seq_remove(rf_context *c, int seq) { rf_kv_seq_remove(&c->kv, seq); }
int rf_seq_truncate(rf_context *c, int seq, int n_pos) { return rf_kv_seq_truncate(&c->kv, seq, n_pos); }
int rf_seq_len(const rf_context *c, int seq) {
    return rf_kv_seq_valid(&c->kv, seq) ? c->kv.seqs[seq].n_pos : -1;
}

/* Applies the copy-on-write copies a reservation asked for, to every layer's K and V. */
static void copy_blocks(rf_context *c, const rf_kv_copy *copies, int n) {
    size_t kv_dim = (size_t)c->m->hp.n_kv_head * c->m->hp.head_dim;
    size_t block_bytes = KV_BLOCK_SIZE * rf_kv_row_bytes(c->kv_type, (int64_t)kv_dim);
    for (int i = 0; i < n; i++)
        for (int l = 0; l < c->m->hp.n_layer; l++) {
            size_t off = (size_t)l * c->layer_bytes;
            c->be->ops->copy_block(c->be, (char *)c->k_cache + off, block_bytes, copies[i].src, copies[i].dst);
            c->be->ops->copy_block(c->be, (char *)c->v_cache + off, block_bytes, copies[i].src, copies[i].dst);
        }
}

int rf_seq_fork(rf_context *c, int seq) { return rf_kv_seq_fork(&c->kv, seq); }

/* Runs the forward pass over the uploaded step. Single-token steps with one logits row (the
 * decode loop) are captured as a graph per position bucket and replayed; a failed capture turns
 * graphs off for this context (the eager path is always correct) and says so once. */
static int run_step(rf_context *c) {
    const rf_backend_ops *op = c->be->ops;
    if (!c->use_graphs || c->step.n_tokens != 1 || c->step.n_out != 1) {
        rf_forward(c);
        return 0;
    }
    int b = RF_MIN(c->step.max_pos / GRAPH_BUCKET, c->n_graph_buckets - 1);
    if (!c->graphs[b]) {
        if (!c->graph_seen[b]) {
            c->graph_seen[b] = true;
            rf_forward(c);
            return 0;
        }
        if (op->graph_begin(c->be)) {
            RF_INFO("rocmforge: graph capture unavailable (%s); running steps eagerly\n", rf_last_error());
            c->use_graphs = false;
            rf_forward(c);
            return 0;
        }
        rf_forward(c);
        if (op->graph_end(c->be, &c->graphs[b])) {
            RF_INFO("rocmforge: graph capture failed (%s); running steps eagerly\n", rf_last_error());
            c->graphs[b] = NULL;
            c->use_graphs = false;
            if (op->sync(c->be)) return -1;
            rf_forward(c);
            return 0;
        }
    }
    return op->graph_launch(c->be, c->graphs[b]);
}

/* rf_decode; with token_on_device (one token), tokens[0] of the batch is ignored: the step takes
 * the token that is already in the device's step region (rf_sampler_sample_async put it there). */
static int decode(rf_context *c, const rf_batch *b, bool token_on_device) {
    if (!b || (!token_on_device && !b->tokens) || !b->pos || !b->seq_id) {
        rf_set_error("%s", b ? "batch without tokens, positions or sequence ids" : "no batch");
        return -1;
    }
    int n = b->n_tokens;
    const rf_hparams *hp = &c->m->hp;
    if (n <= 0 || n > c->n_batch) {
        rf_set_error("batch of %d tokens: must be between 1 and the batch size %d", n, c->n_batch);
        return -1;
    }
    /* Validate everything before touching the cache, so a bad batch changes nothing. */
    int *count = rf_xcalloc((size_t)c->n_seq_max, sizeof(int));
    int ret = -1;
    for (int i = 0; i < n; i++) {
        int s = b->seq_id[i];
        if (!token_on_device && (b->tokens[i] < 0 || b->tokens[i] >= hp->n_vocab)) {
            rf_set_error("token %d at batch index %d is outside the vocabulary (0..%d)", b->tokens[i], i, hp->n_vocab - 1);
            goto out;
        }
        if (!rf_kv_seq_valid(&c->kv, s)) {
            rf_set_error("batch index %d names sequence %d, which does not exist", i, s);
            goto out;
        }
        int want = c->kv.seqs[s].n_pos + count[s];
        if (b->pos[i] != want) {
            rf_set_error("batch index %d: position %d for sequence %d, expected %d (positions must continue the sequence)",
                         i, b->pos[i], s, want);
            goto out;
        }
        count[s]++;
        if (want >= c->n_ctx) {
            rf_set_error("sequence %d would exceed the context size %d", s, c->n_ctx);
            goto out;
        }
    }
    int needed = 0;
    for (int s = 0; s < c->n_seq_max; s++)
        if (count[s]) needed += (count[s] + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE + 1;
    if (needed > c->kv.n_free) {
        /* A conservative pre-check; rf_kv_reserve below does the exact one per sequence. */
        int exact = 0;
        for (int s = 0; s < c->n_seq_max; s++) {
            if (!count[s]) continue;
            rf_kv_seq *q = &c->kv.seqs[s];
            int have = q->n_blocks * KV_BLOCK_SIZE;
            int tot = q->n_pos + count[s];
            exact += tot > have ? (tot - have + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE : 0;
            exact += q->n_pos % KV_BLOCK_SIZE && c->kv.refcount[q->blocks[q->n_blocks - 1]] > 1;
        }
        if (exact > c->kv.n_free) {
            rf_set_error("KV cache is full: %d free blocks, %d needed", c->kv.n_free, exact);
            goto out;
        }
    }
    rf_kv_copy *copies = rf_xmalloc((size_t)c->n_seq_max * sizeof *copies);
    int n_copies = 0;
    for (int s = 0; s < c->n_seq_max; s++)
        if (count[s] && rf_kv_reserve(&c->kv, s, count[s], copies, &n_copies)) {
            free(copies);
            goto out;
        }
    copy_blocks(c, copies, n_copies);
    free(copies);

    /* Fill the host mirror of the step region and upload it in one copy. */
    size_t nb = (size_t)c->n_batch;
    int32_t *h = c->step_host;
    int n_out = 0;
    for (int i = 0; i < n; i++) {
        int s = b->seq_id[i];
        h[i] = b->tokens[i];
        h[nb + i] = b->pos[i];
        h[2 * nb + i] = rf_kv_slot(&c->kv, s, b->pos[i]);
        h[3 * nb + i] = s;
        c->out_row_of[i] = -1;
        if (b->logits && b->logits[i]) {
            c->out_row_of[i] = n_out;
            h[4 * nb + n_out++] = i;
        }
    }
    int max_pos = 0;
    for (int i = 0; i < n; i++) max_pos = RF_MAX(max_pos, b->pos[i]);
    int32_t *bt = h + 5 * nb;
    for (int s = 0; s < c->n_seq_max; s++) {
        rf_kv_seq *q = &c->kv.seqs[s];
        memcpy(bt + (size_t)s * c->step.max_blocks, q->blocks, (size_t)q->n_blocks * sizeof(int32_t));
    }
    if (token_on_device) /* all but tokens[0] */
        c->be->ops->upload(c->be, c->step_dev + 1, h + 1, (c->step_ints - 1) * sizeof(int32_t));
    else {
        c->be->ops->upload(c->be, c->step_dev, h, c->step_ints * sizeof(int32_t));
        c->token_on_device = false; /* tokens[0] now holds this batch's token */
    }
    c->step.n_tokens = n;
    c->step.n_out = n_out;
    c->step.out_all = n_out == n; /* rows were taken in token order */
    c->step.max_pos = max_pos;
    c->last_n_tokens = n;
    c->host_logits_valid = false;
    ret = run_step(c);
out:
    free(count);
    return ret;
}

int rf_decode(rf_context *c, const rf_batch *b) { return decode(c, b, false); }

int rf_decode_next(rf_context *c, int seq) {
    if (!c->token_on_device) {
        rf_set_error("rf_decode_next: no token waits on the device (call rf_sampler_sample_async first)");
        return -1;
    }
    if (!rf_kv_seq_valid(&c->kv, seq)) {
        rf_set_error("rf_decode_next: sequence %d does not exist", seq);
        return -1;
    }
    int32_t tok = 0;
    int pos = c->kv.seqs[seq].n_pos;
    int8_t want = 1;
    rf_batch b = {1, &tok, &pos, &seq, &want};
    int rc = decode(c, &b, true);
    if (!rc) c->token_on_device = false;
    return rc;
}

const float *rf_get_logits(rf_context *c, int i) {
    if (i < 0 || i >= c->last_n_tokens || c->out_row_of[i] < 0) {
        rf_set_error("no logits for batch index %d (the last batch did not ask for them)", i);
        return NULL;
    }
    size_t nv = (size_t)c->m->hp.n_vocab;
    if (!c->host_logits_valid) {
        if (c->be->ops->download(c->be, c->host_logits, c->logits, (size_t)c->step.n_out * nv * sizeof(float)))
            return NULL;
        c->host_logits_valid = true;
    }
    return c->host_logits + (size_t)c->out_row_of[i] * nv;
}
