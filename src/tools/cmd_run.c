/* rocmforge run: generate text from a prompt. Generated text streams to stdout (the prompt is
 * not echoed); everything else goes to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"

#include "args.h"
#include "load.h"
#include "rocmforge.h"
#include "tokenizer/tokenizer.h"
#include "model/model.h"

static const char *RUN_FLAGS =
    "-m -p -f -n -c -t -s -b --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n "
    "--frequency-penalty --presence-penalty -ngl --device --special --no-bos -v -ctk -ctv";

/* Decodes tokens[0..n) into sequence `seq` starting at position `pos0` in chunks of the batch
 * size, asking for the logits of the last token only. */
int rf_cli_prefill(rf_context *c, int seq, const int32_t *tokens, int n, int pos0) {
    int nb = rf_context_n_batch(c);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)nb), *sid = malloc(sizeof(int32_t) * (size_t)nb);
    int8_t *want = malloc((size_t)nb);
    int rc = 0;
    for (int start = 0; start < n && rc == 0; start += nb) {
        int k = n - start < nb ? n - start : nb;
        for (int i = 0; i < k; i++) {
            pos[i] = pos0 + start + i;
            sid[i] = seq;
            want[i] = start + i == n - 1;
        }
        rf_batch b = {k, tokens + start, pos, sid, want};
        rc = rf_decode(c, &b);
    }
    free(pos);
    free(sid);
    free(want);
    return rc;
}

int cmd_run(int argc, char **argv) {
    rf_args a;
    rf_args_defaults(&a);
    const int parsed = rf_args_parse(&a, "run", RUN_FLAGS, argc, argv, 2);
    if (parsed) return parsed < 0; /* 1: -h printed the usage */
    int kv;
    if (rf_args_kv_type(&a, &kv)) return 1;
    size_t len;
    char *text = rf_args_prompt_text(&a, &len);
    if (!text) return 1;
    if (a.n_predict < 0) a.n_predict = 1 << 30;
    rf_model *m = rf_cli_load(&a);
    if (!m) {
        free(text);
        return 1;
    }
    int rc = 1;
    int32_t *toks = NULL;
    rf_context *c = NULL;
    rf_sampler *s = NULL;
    int n = rf_tokenize(m, text, len, !a.no_bos, a.special, &toks);
    if (n < 0) {
        rf_fail("tokenizing the prompt: %s", rf_error());
        goto out;
    }
    if (n == 0) {
        rf_fail("the prompt is empty (no tokens); give some text or drop --no-bos");
        goto out;
    }
    c = rf_cli_context(m, a.n_ctx, a.n_batch, kv);
    if (!c) goto out;
    int n_ctx = rf_context_n_ctx(c);
    if (n >= n_ctx) {
        rf_fail("the prompt is %d tokens, which does not fit the context of %d (raise -c)", n, n_ctx);
        goto out;
    }
    rf_sampler_params sp = rf_sampler_default_params();
    sp.temp = a.temp;
    sp.top_k = a.top_k;
    sp.top_p = a.top_p;
    sp.min_p = a.min_p;
    sp.repeat_penalty = a.repeat_penalty;
    sp.freq_penalty = a.freq_penalty;
    sp.presence_penalty = a.presence_penalty;
    sp.penalty_last_n = a.repeat_last_n;
    sp.seed = a.seed_set ? a.seed : (uint64_t)time(NULL);
    if (!(s = rf_sampler_new(&sp))) {
        rf_fail("%s", rf_error());
        goto out;
    }
    for (int i = 0; i < n; i++) rf_sampler_accept(s, toks[i]);

    int seq = rf_seq_new(c);
    double t0 = rf_time_s();
    if (rf_cli_prefill(c, seq, toks, n, 0)) {
        rf_fail("%s", rf_error());
        goto out;
    }
    /* Pipelined (rocmforge.h): the step that consumes a sampled token is enqueued before the host
     * learns that token, so the device does not wait for printing; after an end-of-generation
     * token that step is wasted (the run ends). */
    if (rf_sampler_sample_async(s, c, (n - 1) % rf_context_n_batch(c))) {
        rf_fail("%s", rf_error());
        goto out;
    }
    double t1 = rf_time_s();
    rf_detok dt = {0};
    char piece[256];
    int n_gen = 0, pos = n;
    bool full = false; /* the run stopped because the context had no position left */
    const struct rf_tokenizer *tk = m->tok;
    while (n_gen < a.n_predict) {
        const bool more = n_gen + 1 < a.n_predict && pos + 1 < n_ctx; /* a token after this one */
        if (more && rf_decode_next(c, seq)) {
            rf_fail("%s", rf_error());
            goto out;
        }
        int32_t next = rf_sampler_fetch(s, c);
        if (next < 0) {
            rf_fail("%s", rf_error());
            goto out;
        }
        if (n_gen == 0) t1 = rf_time_s(); /* the prompt's time ends with its first token */
        if (rf_token_is_eog(m, next)) break;
        int k = rf_detok_push(&dt, tk, next, piece, sizeof piece);
        if (k > 0) {
            fwrite(piece, 1, (size_t)k, stdout);
            fflush(stdout);
        }
        n_gen++;
        if (!more) {
            full = n_gen < a.n_predict;
            break;
        }
        pos++;
        if (rf_sampler_sample_async(s, c, 0)) {
            rf_fail("%s", rf_error());
            goto out;
        }
    }
    int k = rf_detok_flush(&dt, piece, sizeof piece);
    if (k > 0) fwrite(piece, 1, (size_t)k, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    double t2 = rf_time_s();
    if (full) fprintf(stderr, "rocmforge: the context of %d tokens is full: generation stopped (raise -c)\n", n_ctx);
    fprintf(stderr, "\nprompt: %d tokens in %.3f s (%.2f tokens/s)\n", n, t1 - t0, n / (t1 - t0));
    fprintf(stderr, "generation: %d tokens in %.3f s (%.2f tokens/s)\n", n_gen, t2 - t1,
            n_gen > 0 ? n_gen / (t2 - t1) : 0.0);
    rc = 0;
out:
    rf_sampler_free(s);
    rf_context_free(c);
    free(toks);
    free(text);
    rf_model_free(m);
    return rc;
}
