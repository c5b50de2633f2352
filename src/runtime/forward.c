/* forward.c: the transformer forward pass, written once against the backend interface.
 *
 *   x = embed(tokens)
 *   for each layer:
 *       h = rmsnorm(x) * attn_norm
 *       q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv)
 *       q, k = rmsnorm per head (qwen3 only)
 *       q, k = rope(q, k, pos);  cache[slot] = k, v
 *       x = x + attention(q, cache) Wo
 *       h = rmsnorm(x) * ffn_norm
 *       x = x + (silu(h Wgate) * (h Wup)) Wdown
 *   logits = rmsnorm(x[out_rows]) * output_norm Woutput
 *
 * Each RMSNorm is folded into the matmul that consumes it and each residual add into the matmul
 * that produces it (the matmul op's norm and accumulate arguments), rope with the K/V store goes
 * with the attention, and the swiglu with the gate and up products (ops a backend may fuse), so a
 * layer is five ops.
 * Nothing here waits for the device: the whole step is enqueued and can be captured as a graph.
 */
#include <math.h>

#include "context.h"

static const rf_weight *opt(const rf_weight *w) { return w->data ? w : NULL; }

void rf_forward(rf_context *c) {
    const rf_model *m = c->m;
    const rf_hparams *hp = &m->hp;
    rf_backend *be = c->be;
    const rf_backend_ops *op = be->ops;
    const rf_step *st = &c->step;
    int n = st->n_tokens, d = hp->n_embd;
    float eps = hp->rms_eps;
    rf_attn_dims dims = {hp->n_head, hp->n_kv_head, hp->head_dim, 1.0f / sqrtf((float)hp->head_dim), c->kv_type};
    rf_rope rope = {hp->rope_mode, hp->n_rot, hp->rope_base, hp->rope_freq_scale, m->rope_freqs.data};

    op->embed(be, &m->tok_embd, st->tokens, n, c->x);
    for (int l = 0; l < hp->n_layer; l++) {
        const rf_layer *L = &m->layers[l];
        void *k_cache = (char *)c->k_cache + l * c->layer_bytes;
        void *v_cache = (char *)c->v_cache + l * c->layer_bytes;

        rf_mm_out qkv[3] = {{&L->wq, opt(&L->bq), c->q}, {&L->wk, opt(&L->bk), c->k}, {&L->wv, opt(&L->bv), c->v}};
        op->matmul(be, 3, qkv, c->x, n, &L->attn_norm, eps, false, c->h);
        if (hp->has_qk_norm) {
            op->rmsnorm(be, c->q, NULL, &L->q_norm, n * hp->n_head, hp->head_dim, eps, c->q);
            op->rmsnorm(be, c->k, NULL, &L->k_norm, n * hp->n_kv_head, hp->head_dim, eps, c->k);
        }
        op->rope_attention(be, st, &rope, &dims, c->q, c->k, c->v, k_cache, v_cache, c->attn);
        rf_mm_out attn_out = {&L->wo, NULL, c->x};
        op->matmul(be, 1, &attn_out, c->attn, n, NULL, 0.0f, true, NULL);

        op->matmul_swiglu(be, &L->w_gate, &L->w_up, c->x, n, &L->ffn_norm, eps, c->gate, c->up, c->h);
        rf_mm_out down = {&L->w_down, NULL, c->x};
        op->matmul(be, 1, &down, c->gate, n, NULL, 0.0f, true, NULL);
    }
    const float *xo = c->x; /* every token's logits (a decode step): x itself, no copy */
    if (!st->out_all) {
        op->get_rows(be, c->x, st->out_rows, st->n_out, d, c->hsel);
        xo = c->hsel;
    }
    rf_mm_out logits = {&m->output, NULL, c->logits};
    op->matmul(be, 1, &logits, xo, st->n_out, &m->output_norm, eps, false, c->h);
}
