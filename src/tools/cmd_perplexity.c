/* rocmforge perplexity: exp(mean negative log-likelihood) of each next token of a text.
 * The text is tokenized exactly as `run` does (BOS first when the model asks for it) and split
 * into windows of the context size, each evaluated as a fresh sequence. --logits-out writes
 * every position's logits as float32 [n_tokens][n_vocab] (the layout of ../shared/golden). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "core/util.h"
#include "load.h"
#include "rocmforge.h"

int cmd_perplexity(int argc, char **argv) {
    rf_args a;
    rf_args_defaults(&a);
    const int parsed = rf_args_parse(
        &a, "perplexity", "-m -p -f -c -b -t -ngl --device --logits-out --special --no-bos -ctk -ctv", argc, argv, 2);
    if (parsed) return parsed < 0; /* 1: -h printed the usage */
    int kv;
    if (rf_args_kv_type(&a, &kv)) return 1;
    size_t len;
    char *text = rf_args_prompt_text(&a, &len);
    if (!text) return 1;
    rf_model *m = rf_cli_load(&a);
    if (!m) {
        free(text);
        return 1;
    }
    int rc = 1;
    int32_t *toks = NULL;
    rf_context *c = NULL;
    FILE *out = NULL;
    int32_t *pos = NULL, *sid = NULL;
    int8_t *want = NULL;
    int n = rf_tokenize(m, text, len, !a.no_bos, a.special, &toks);
    if (n < 0) {
        rf_fail("%s", rf_error());
        goto done;
    }
    if (n < 2) {
        rf_fail("the text has %d token(s); perplexity needs at least 2", n);
        goto done;
    }
    c = rf_cli_context(m, a.n_ctx, a.n_batch, kv);
    if (!c) goto done;
    if (rf_context_n_ctx(c) < 2) { /* each window scores its tokens after the first: none in windows of 1 */
        rf_fail("perplexity needs a context of at least 2 tokens (-c %d)", rf_context_n_ctx(c));
        goto done;
    }
    if (a.logits_out && !(out = fopen(a.logits_out, "wb"))) {
        rf_fail("cannot write %s", a.logits_out);
        goto done;
    }
    int n_ctx = rf_context_n_ctx(c), nb = rf_context_n_batch(c), nv = rf_model_n_vocab(m);
    pos = malloc(sizeof(int32_t) * (size_t)nb);
    sid = malloc(sizeof(int32_t) * (size_t)nb);
    want = malloc((size_t)nb);
    double nll = 0;
    int n_scored = 0;
    double t0 = rf_time_s();
    for (int w0 = 0; w0 < n; w0 += n_ctx) {
        int wn = RF_MIN(n_ctx, n - w0);
        int seq = rf_seq_new(c);
        for (int s0 = 0; s0 < wn; s0 += nb) {
            int k = RF_MIN(nb, wn - s0);
            for (int i = 0; i < k; i++) {
                pos[i] = s0 + i;
                sid[i] = seq;
                want[i] = 1;
            }
            rf_batch b = {k, toks + w0 + s0, pos, sid, want};
            if (rf_decode(c, &b)) {
                rf_fail("%s", rf_error());
                goto done;
            }
            for (int i = 0; i < k; i++) {
                const float *lg = rf_get_logits(c, i);
                if (!lg) {
                    rf_fail("%s", rf_error());
                    goto done;
                }
                if (out && fwrite(lg, sizeof(float), (size_t)nv, out) != (size_t)nv) {
                    rf_fail("writing %s failed", a.logits_out);
                    goto done;
                }
                int gi = w0 + s0 + i; /* predicts token gi + 1 if it is in this window */
                if (s0 + i + 1 < wn) {
                    float mx = -INFINITY;
                    for (int v = 0; v < nv; v++) mx = lg[v] > mx ? lg[v] : mx;
                    double sum = 0;
                    for (int v = 0; v < nv; v++) sum += exp((double)lg[v] - mx);
                    nll -= (double)lg[toks[gi + 1]] - mx - log(sum);
                    n_scored++;
                }
            }
        }
        rf_seq_remove(c, seq);
    }
    double t1 = rf_time_s();
    printf("perplexity: %.4f over %d predicted tokens (%d tokens, windows of %d)\n", exp(nll / n_scored), n_scored,
           n, n_ctx);
    fprintf(stderr, "%.2f tokens/s\n", n / (t1 - t0));
    rc = 0;
done:
    if (out && fclose(out) && rc == 0) rc = rf_fail("writing %s failed", a.logits_out);
    free(pos);
    free(sid);
    free(want);
    free(toks);
    free(text);
    rf_context_free(c);
    rf_model_free(m);
    return rc;
}
