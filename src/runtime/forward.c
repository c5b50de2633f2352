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
 *   logits = (rmsnorm(x) * output_norm)[out_rows] Woutput
 *
 * Each residual add is fused into the next rmsnorm (it updates x in place). Nothing here waits
 * for the device: the whole step is enqueued and can be captured as a graph.
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
    rf_attn_dims dims = {hp->n_head, hp->n_kv_head, hp->head_dim, 1.0f / sqrtf((float)hp->head_dim)};
    rf_rope rope = {hp->rope_mode, hp->n_rot, hp->rope_base, hp->rope_freq_scale, m->rope_freqs.data};

    op->embed(be, &m->tok_embd, st->tokens, n, c->x);
    const float *residual = NULL;
    for (int l = 0; l < hp->n_layer; l++) {
        const rf_layer *L = &m->layers[l];
        float *k_cache = c->k_cache + l * c->layer_floats;
        float *v_cache = c->v_cache + l * c->layer_floats;

        op->rmsnorm(be, c->x, residual, &L->attn_norm, n, d, eps, c->h);
        op->matmul(be, &L->wq, opt(&L->bq), c->h, n, c->q);
        op->matmul(be, &L->wk, opt(&L->bk), c->h, n, c->k);
        op->matmul(be, &L->wv, opt(&L->bv), c->h, n, c->v);
        if (hp->has_qk_norm) {
            op->rmsnorm(be, c->q, NULL, &L->q_norm, n * hp->n_head, hp->head_dim, eps, c->q);
            op->rmsnorm(be, c->k, NULL, &L->k_norm, n * hp->n_kv_head, hp->head_dim, eps, c->k);
        }
        op->rope_store_kv(be, st, &rope, &dims, c->q, c->k, c->v, k_cache, v_cache);
        op->attention(be, st, &dims, c->q, k_cache, v_cache, c->attn);
        op->matmul(be, &L->wo, NULL, c->attn, n, c->delta);

        op->rmsnorm(be, c->x, c->delta, &L->ffn_norm, n, d, eps, c->h);
        op->matmul(be, &L->w_gate, NULL, c->h, n, c->gate);
        op->matmul(be, &L->w_up, NULL, c->h, n, c->up);
        op->swiglu(be, c->gate, c->up, (int64_t)n * hp->n_ff, c->gate);
        op->matmul(be, &L->w_down, NULL, c->gate, n, c->delta);
        residual = c->delta;
    }
    op->rmsnorm(be, c->x, residual, &m->output_norm, n, d, eps, c->h);
    op->get_rows(be, c->h, st->out_rows, st->n_out, d, c->hsel);
    op->matmul(be, &m->output, NULL, c->hsel, st->n_out, c->logits);
}
