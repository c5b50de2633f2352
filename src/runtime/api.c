/* api.c: the model, tokenizer and sampler parts of the public API (rocmforge.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "context.h"
#include "core/util.h"
#include "sampler.h"
#include "tokenizer/tokenizer.h"

#define RF_VERSION "0.1.0"

const char *rf_error(void) { return rf_last_error(); }
const char *rf_version(void) { return RF_VERSION; }
const char *rf_build_info(void) { return rf_backends_built(); }
int rf_gpu_devices(void) { return rf_gpu_count(); }

rf_model_params rf_model_default_params(void) {
    rf_model_params p = {"cpu", 0, -1};
    return p;
}

rf_model *rf_model_load(const char *path, const rf_model_params *params) {
    if (!path) {
        rf_set_error("no model path");
        return NULL;
    }
    rf_model_params p = params ? *params : rf_model_default_params();
    if (p.n_threads > RF_MAX_THREADS) {
        /* thousands of spinning workers on a few cores make every step crawl: an error, not a hang */
        rf_set_error("%d CPU threads asked for: at most %d", p.n_threads, RF_MAX_THREADS);
        return NULL;
    }
    rf_model *m = rf_model_open(path);
    if (!m) return NULL;
    const char *dev = p.device ? p.device : "cpu";
    bool gpu = !strncmp(dev, "gpu", 3);
    if (gpu && p.n_gpu_layers >= 0 && p.n_gpu_layers < m->hp.n_layer) {
        /* Splitting layers between devices is not implemented; running some layers elsewhere
         * without being asked would be a silent fallback. */
        rf_set_error("-ngl %d: this model has %d layers and rocmforge runs either all of them on the GPU "
                     "(-ngl %d or more) or none (-ngl 0)", p.n_gpu_layers, m->hp.n_layer, m->hp.n_layer);
        rf_model_close(m);
        return NULL;
    }
    rf_backend *be = rf_backend_create(dev, p.n_threads);
    if (!be) {
        rf_model_close(m);
        return NULL;
    }
    if (rf_model_upload(m, be)) {
        rf_model_close(m);
        rf_backend_destroy(be);
        return NULL;
    }
    return m;
}

void rf_model_free(rf_model *m) {
    if (!m) return;
    rf_backend *be = m->be;
    rf_model_close(m);
    rf_backend_destroy(be);
}

int rf_model_n_vocab(const rf_model *m) { return m->hp.n_vocab; }
int rf_model_n_ctx_train(const rf_model *m) { return m->hp.n_ctx_train; }

const char *rf_model_backend(const rf_model *m) {
    static _Thread_local char buf[160];
    if (!m->be) return "none";
    snprintf(buf, sizeof buf, "%s (%s)", m->be->ops->name, m->be->ops->describe(m->be));
    return buf;
}

int rf_tokenize(const rf_model *m, const char *text, size_t len, bool add_special, bool parse_special, int32_t **out) {
    return rf_tokenizer_encode(m->tok, text, len, add_special, parse_special, out);
}

int rf_token_to_piece(const rf_model *m, int32_t token, char *buf, size_t cap) {
    return rf_tokenizer_piece(m->tok, token, false, buf, cap);
}

bool rf_token_is_eog(const rf_model *m, int32_t token) { return rf_tokenizer_is_eog(m->tok, token); }
int32_t rf_token_bos(const rf_model *m) { return rf_tokenizer_bos(m->tok); }

struct rf_sampler {
    rf_sample_params p;
    rf_rng rng;
    int32_t *history;
    int n_history, cap;
};

rf_sampler_params rf_sampler_default_params(void) {
    rf_sample_params d = rf_sample_params_default();
    rf_sampler_params p = {d.temp, d.top_k, d.top_p, d.min_p, d.repeat_penalty, d.freq_penalty,
                           d.presence_penalty, d.penalty_last_n, d.seed};
    return p;
}

rf_sampler *rf_sampler_new(const rf_sampler_params *params) {
    rf_sampler_params q = params ? *params : rf_sampler_default_params();
    /* NaN passes every comparison the filters make and an infinite factor makes every weight
     * inf or 0: the draws would no longer follow the documented algorithm */
    if (!isfinite(q.temp) || isnan(q.top_p) || isnan(q.min_p) || !isfinite(q.repeat_penalty) ||
        q.repeat_penalty <= 0.0f || !isfinite(q.freq_penalty) || !isfinite(q.presence_penalty)) {
        rf_set_error("sampler parameters: temp %g, top_p %g, min_p %g, repeat_penalty %g, frequency %g, presence %g "
                     "(NaN, infinite values and a repeat penalty <= 0 are refused)",
                     (double)q.temp, (double)q.top_p, (double)q.min_p, (double)q.repeat_penalty,
                     (double)q.freq_penalty, (double)q.presence_penalty);
        return NULL;
    }
    rf_sampler *s = rf_xcalloc(1, sizeof *s);
    s->p = (rf_sample_params){q.temp, q.top_k, q.top_p, q.min_p, q.repeat_penalty, q.freq_penalty,
                              q.presence_penalty, q.penalty_last_n, q.seed};
    rf_rng_seed(&s->rng, q.seed);
    return s;
}

void rf_sampler_free(rf_sampler *s) {
    if (!s) return;
    free(s->history);
    free(s);
}

void rf_sampler_accept(rf_sampler *s, int32_t token) {
    if (s->n_history == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->history = rf_xrealloc(s->history, (size_t)s->cap * sizeof(int32_t));
    }
    s->history[s->n_history++] = token;
}

/* Enqueues the sampling of batch index i's logits into token_out (backend memory). */
static int enqueue_sample(rf_sampler *s, rf_context *c, int i, int32_t *token_out, float *logprob_out) {
    if (i < 0 || i >= c->last_n_tokens || c->out_row_of[i] < 0) {
        rf_set_error("no logits for batch index %d (the last batch did not ask for them)", i);
        return -1;
    }
    if (c->sample_pending) {
        rf_set_error("a token of rf_sampler_sample_async was not fetched (rf_sampler_fetch)");
        return -1;
    }
    int nv = c->m->hp.n_vocab;
    rf_backend *be = c->be;
    /* Penalties read the window of recent tokens from backend memory: an upload, not a round trip. */
    int n_hist = 0;
    bool penalize = s->p.repeat_penalty != 1.0f || s->p.freq_penalty != 0.0f || s->p.presence_penalty != 0.0f;
    if (penalize && s->n_history) {
        int window = s->p.penalty_last_n < 0 ? s->n_history : s->p.penalty_last_n;
        n_hist = RF_MIN(RF_MIN(s->n_history, window), c->history_cap);
        be->ops->upload(be, c->d_history, s->history + s->n_history - n_hist, (size_t)n_hist * sizeof(int32_t));
    }
    rf_sample_params p = s->p;
    p.penalty_last_n = n_hist;
    float u = rf_rng_uniform(&s->rng);
    be->ops->sample(be, c->logits + (size_t)c->out_row_of[i] * nv, nv, &p, c->d_history, n_hist, u, token_out,
                    logprob_out);
    return 0;
}

int32_t rf_sampler_sample(rf_sampler *s, rf_context *c, int i, float *logprob) {
    if (enqueue_sample(s, c, i, c->d_token, logprob ? c->d_logprob : NULL)) return -1;
    rf_backend *be = c->be;
    int32_t tok;
    if (be->ops->download(be, &tok, c->d_token, sizeof tok)) return -1;
    if (logprob && be->ops->download(be, logprob, c->d_logprob, sizeof *logprob)) return -1;
    rf_sampler_accept(s, tok);
    return tok;
}

/* The token goes to tokens[0] of the device's step region, where rf_decode_next's step reads it,
 * and to the host by a copy that rf_sampler_fetch waits for. */
int rf_sampler_sample_async(rf_sampler *s, rf_context *c, int i) {
    if (enqueue_sample(s, c, i, c->step_dev, NULL)) return -1;
    if (c->be->ops->download_start(c->be, c->step_dev, sizeof(int32_t))) return -1;
    c->sample_pending = true;
    c->token_on_device = true;
    return 0;
}

int32_t rf_sampler_fetch(rf_sampler *s, rf_context *c) {
    if (!c->sample_pending) {
        rf_set_error("rf_sampler_fetch: no rf_sampler_sample_async to fetch");
        return -1;
    }
    int32_t tok;
    c->sample_pending = false;
    if (c->be->ops->download_wait(c->be, &tok)) return -1;
    rf_sampler_accept(s, tok);
    return tok;
}
