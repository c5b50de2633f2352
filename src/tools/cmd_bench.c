/* rocmforge bench: prompt processing (ppN) and generation (tgN) speed, printed as llama-bench
 * prints it so the two can be read side by side. -p, -n and -d take comma-separated lists, as
 * llama-bench's do: for every depth D of -d, every ppN, then every tgN (0 skips a test). Each
 * test runs once as a warm-up, then -r times; the table shows mean +- sample standard deviation
 * of tokens/s.
 *   pp: N tokens of one fresh sequence in batches of -b (default: the largest N or D, at most
 *       2048) with the last logits asked; timed until those logits are on the host.
 *   tg: N single-token steps of one fresh sequence, each sampled greedily on the device; timed
 *       until the last token id is on the host.
 * With D > 0 the sequence first holds D tokens of context (prefilled, not timed): "pp512 @ d8192",
 * "tg128 @ d8192". */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "core/dtype.h"
#include "core/gguf.h"
#include "core/util.h"
#include "load.h"
#include "model/model.h"
#include "rocmforge.h"

static const char *ftype_label(int64_t ft) {
    switch (ft) {
    case 0: return "all F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K - Medium";
    case 11: return "Q3_K - Small";
    case 12: return "Q3_K - Medium";
    case 14: return "Q4_K - Small";
    case 15: return "Q4_K - Medium";
    case 16: return "Q5_K - Small";
    case 17: return "Q5_K - Medium";
    case 18: return "Q6_K";
    case 25: return "IQ4_NL - 4.5 bpw";
    case 30: return "IQ4_XS - 4.25 bpw";
    case 32: return "BF16";
    default: return "?";
    }
}

/* Prefills `depth` tokens of context into seq (untimed; waits until they are done). */
static int prefill_depth(rf_context *c, int seq, int depth, int n_vocab) {
    if (depth <= 0) return 0;
    int32_t *ctx = malloc(sizeof(int32_t) * (size_t)depth);
    if (!ctx) return -1;
    for (int i = 0; i < depth; i++) ctx[i] = (int32_t)((i * 7919 + 13) % n_vocab);
    int rc = rf_cli_prefill(c, seq, ctx, depth, 0);
    free(ctx);
    return rc || !rf_get_logits(c, (depth - 1) % rf_context_n_batch(c)) ? -1 : 0;
}

/* n prompt tokens after `depth` tokens of context. */
static int run_pp(rf_context *c, int n, int depth, int n_vocab, double *secs) {
    int seq = rf_seq_new(c);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    int rc = tok ? prefill_depth(c, seq, depth, n_vocab) : -1;
    if (!rc) {
        for (int i = 0; i < n; i++) tok[i] = (int32_t)((i * 7919 + 13) % n_vocab);
        double t0 = rf_time_s();
        rc = rf_cli_prefill(c, seq, tok, n, depth);
        if (!rc && !rf_get_logits(c, (n - 1) % rf_context_n_batch(c))) rc = -1;
        *secs = rf_time_s() - t0;
    }
    rf_seq_remove(c, seq);
    free(tok);
    return rc;
}

/* n generated tokens after `depth` tokens of context (prefilled untimed, as llama-bench -d). */
static int run_tg(rf_context *c, rf_sampler *s, int n, int depth, int n_vocab, double *secs) {
    int seq = rf_seq_new(c);
    int32_t tok = 1;
    int8_t want = 1;
    if (prefill_depth(c, seq, depth, n_vocab)) {
        rf_seq_remove(c, seq);
        return -1;
    }
    /* n steps, each sampled on the device, pipelined as `run` generates (rocmforge.h): step i + 1
     * is enqueued before the host waits for token i */
    double t0 = rf_time_s();
    int pos = depth;
    rf_batch b = {1, &tok, &pos, &seq, &want};
    if (n > 0 && (rf_decode(c, &b) || rf_sampler_sample_async(s, c, 0))) return -1;
    for (int i = 1; i < n; i++)
        if (rf_decode_next(c, seq) || rf_sampler_fetch(s, c) < 0 || rf_sampler_sample_async(s, c, 0)) return -1;
    if (n > 0 && rf_sampler_fetch(s, c) < 0) return -1;
    *secs = rf_time_s() - t0;
    rf_seq_remove(c, seq);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    rf_args a;
    rf_args_defaults(&a);
    a.n_predict = 128;
    const int parsed = rf_args_parse(&a, "bench", "-m -p -n, -r -t -b -d -ngl --device -ctk -ctv", argc, argv, 2);
    if (parsed) return parsed < 0; /* 1: -h printed the usage */
    int kv;
    if (rf_args_kv_type(&a, &kv)) return 1;
    /* The lists (the parser bounds -n and -d; a count of 0 skips that test). */
    rf_int_list pp = {1, {512}}, tg = {1, {a.n_predict}}, dd = {1, {0}};
    if (a.prompt && rf_args_int_list(a.prompt, "-p", 0, RF_ARGS_LIST_HI, &pp)) return 1;
    if (a.n_predict_list.n) tg = a.n_predict_list;
    if (a.depth_list.n) dd = a.depth_list;
    if (a.reps <= 0) return rf_fail("bad value %d for -r: expected at least 1", a.reps);
    int max_pp = 0, max_tg = 0, max_d = 0;
    for (int i = 0; i < pp.n; i++) max_pp = RF_MAX(max_pp, pp.v[i]);
    for (int i = 0; i < tg.n; i++) max_tg = RF_MAX(max_tg, tg.v[i]);
    for (int i = 0; i < dd.n; i++) max_d = RF_MAX(max_d, dd.v[i]);
    if (max_pp == 0 && max_tg == 0) /* every count 0: an empty table would look like a result */
        return rf_fail("nothing to measure: every -p and -n count is 0");
    rf_model *m = rf_cli_load(&a);
    if (!m) return 1;
    /* The batch also fills the depth: sized by -p alone, `-p 0 -d 4096` prefilled its context a
     * token at a time (2.5 minutes for a 1B file on two cores instead of ~10 s). */
    const int n_batch = a.n_batch > 0 ? a.n_batch : RF_MIN(RF_MAX(RF_MAX(max_pp, max_d), 1), 2048);
    const int n_ctx = max_d + RF_MAX(max_pp, max_tg) + 1;
    rf_context *c = rf_cli_context(m, n_ctx, n_batch, kv);
    if (!c) {
        rf_model_free(m);
        return 1;
    }
    rf_sampler_params sp = rf_sampler_default_params();
    sp.temp = 0;
    rf_sampler *s = rf_sampler_new(&sp); /* greedy defaults: always valid */

    int64_t ft = -1;
    rf_gguf_get_int(m->gguf, "general.file_type", &ft);
    char model_desc[64], size[32], params[32];
    double b = (double)m->n_params / 1e9;
    /* "llama 7B Q4_K - Medium" as llama-bench says it; files without general.file_type are
     * named by the type of their feed-forward weights. */
    char tname[16];
    const char *tl = ftype_label(ft);
    if (!strcmp(tl, "?")) {
        snprintf(tname, sizeof tname, "%s", rf_type_name(m->layers[0].w_gate.type));
        for (char *p = tname; *p; p++) *p = (char)toupper((unsigned char)*p);
        tl = tname;
    }
    if (b >= 1) snprintf(model_desc, sizeof model_desc, "%s %.0fB %s", m->hp.arch_name, b < 1.5 ? 1.0 : round(b), tl);
    else snprintf(model_desc, sizeof model_desc, "%s %.*fM %s", m->hp.arch_name, b < 0.01 ? 1 : 0, b * 1000, tl);
    snprintf(size, sizeof size, "%.2f GiB", m->weight_bytes / 1073741824.0);
    if (b >= 1) snprintf(params, sizeof params, "%.2f B", b);
    else snprintf(params, sizeof params, "%.2f M", b * 1000);
    const char *backend = m->be->ops->name;
    int threads = a.n_threads > 0 ? a.n_threads : 0;
    if (!threads) {
        const char *d = m->be->ops->describe(m->be);
        const char *p = strstr(d, ", ");
        threads = p ? atoi(p + 2) : 1;
    }
    /* llama-bench shows type_k / type_v only when they differ from its default, f16; so does this
     * table (the CPU reference modes' default cache is f32: their tables gain the two columns) */
    const rf_kv_type kvt = rf_context_kv_type(c);
    const char *kvn = kvt == RF_KV_F16 ? "f16" : kvt == RF_KV_Q8_0 ? "q8_0" : kvt == RF_KV_Q4_0 ? "q4_0" : "f32";
    const bool kv_cols = rf_context_kv_type(c) != RF_KV_F16;
    printf("| %-30s | %10s | %10s | %-10s | %7s |", "model", "size", "params", "backend", "threads");
    if (kv_cols) printf(" %6s | %6s |", "type_k", "type_v");
    printf(" %15s | %20s |\n", "test", "t/s");
    printf("| ------------------------------ | ---------: | ---------: | ---------- | ------: |");
    if (kv_cols) printf(" -----: | -----: |");
    printf(" --------------: | -------------------: |\n");
    fflush(stdout);
    int rc = 0, n_tests = 0;
    for (int di = 0; di < dd.n && !rc; di++)
        for (int which = 0; which < 2 && !rc; which++) {
            const rf_int_list *ns = which ? &tg : &pp;
            for (int ni = 0; ni < ns->n && !rc; ni++) {
                const int n = ns->v[ni], depth = dd.v[di];
                if (n == 0) continue;
                /* Every test after the first in a fresh context, as llama-bench's: the GPU backend
                 * captures a decode graph per 256-position bucket at that bucket's second step,
                 * with the attention's split count for that position, so `-d 0,128` would
                 * otherwise time d128 with d0's graph (one split where d128 alone takes two: up
                 * to 3% apart on an H200, docs/PERF.md, fiftieth session). */
                if (n_tests++) {
                    rf_context_free(c);
                    if (!(c = rf_cli_context(m, n_ctx, n_batch, kv))) {
                        rc = 1;
                        break;
                    }
                }
                double *ts = malloc(sizeof(double) * (size_t)a.reps), secs = 0;
                if (!ts) {
                    rc = rf_fail("out of memory");
                    break;
                }
                for (int r = -1; r < a.reps && !rc; r++) { /* r == -1: warm-up */
                    rc = which ? run_tg(c, s, n, depth, m->hp.n_vocab, &secs)
                               : run_pp(c, n, depth, m->hp.n_vocab, &secs);
                    if (r >= 0) ts[r] = n / secs;
                }
                if (rc) {
                    free(ts);
                    rf_fail("%s", rf_error());
                    break;
                }
                double mean = 0, var = 0;
                for (int r = 0; r < a.reps; r++) mean += ts[r] / a.reps;
                for (int r = 0; r < a.reps; r++) var += (ts[r] - mean) * (ts[r] - mean);
                double sd = a.reps > 1 ? sqrt(var / (a.reps - 1)) : 0;
                char test[40], val[48];
                if (depth) snprintf(test, sizeof test, "%s%d @ d%d", which ? "tg" : "pp", n, depth);
                else snprintf(test, sizeof test, "%s%d", which ? "tg" : "pp", n);
                snprintf(val, sizeof val, "%.2f ± %.2f", mean, sd);
                printf("| %-30s | %10s | %10s | %-10s | %7d |", model_desc, size, params, backend, threads);
                if (kv_cols) printf(" %6s | %6s |", kvn, kvn);
                printf(" %15s | %21s |\n", test, val);
                fflush(stdout);
                free(ts);
            }
        }
    if (!rc) printf("\nbuild: %s\n", rf_cli_commit()); /* as llama-bench closes its table */
    rf_sampler_free(s);
    rf_context_free(c);
    rf_model_free(m);
    return rc ? 1 : 0;
}
