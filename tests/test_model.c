/* End-to-end model tests on the CPU against what llama.cpp computed (../shared/golden):
 * prompt tokens, every prompt position's logits (relative L2 and top-1), greedy continuation;
 * plus the paged cache under batches of several sequences, forks and removals. Each model runs on
 * the reference backend ("cpu-ref") and on the fast one ("cpu"), each with its default f32 K/V
 * cache, "cpu" also with an f16 cache (as llama.cpp's, which made the golden data) and with q8_0
 * and q4_0 caches (the models with head_dim % 32 == 0; the others must refuse them, naming
 * head_dim); ROCMFORGE_TEST_DEVICE adds another device (e.g. gpu), with its default cache (f16 on
 * a GPU) and with f32, q8_0 and q4_0 ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "rocmforge.h"
#include "test.h"

typedef struct {
    const char *stem;
    double tol; /* relative L2 vs llama.cpp */
    int top1;   /* 1: top-1 must agree at every position */
} model_case;

/* Tolerances (relative L2 over all prompt logits, vs llama.cpp). llama.cpp's CPU backend keeps
 * K/V in f16, rounds activations to f16/bf16 for f16/bf16 weights and to 8 bits (q8_0 per 32,
 * q8_K per 256) before every quantized dot product; rocmforge's reference computes in exact f32.
 * Measured distance from that rounding alone (2026-11-21, this machine): f32 4e-4, f16 7e-4,
 * bf16 5e-3, quantized types 1.4e-2 to 3.2e-2 (random weights amplify it). A wrong block decode
 * lands near 1e-1 or worse (golden/README.md), so the quantized limit is 4e-2; f32/f16 also
 * require the same top-1 token at every position, stories260K 3e-3 and greedy-exact.
 * The "cpu-ggml" device reproduces llama.cpp's CPU roundings (f16 K/V and q, q8_0/q8_K
 * activations); there q4_0 and q6_k files agree with llama.cpp to 4e-7 at every position and
 * the others to ~3e-7 up to the first 8-bit rounding decision that flips (llama.cpp's own SIMD
 * expf differs in the last bit and random weights amplify one flip to ~1e-2). Not emulated:
 * q8_1's separately rounded block sum (q4_1, q5_1). Measured worst 1.7e-2; limit 2e-2. */
#define QTOL 4e-2
/* A q8_0 K/V cache (a binary16 scale and int8 codes per 32 elements: RMS error 0.23% of the
 * block's max |x|, 0.4-0.5% of an element's RMS for uniform or Gaussian blocks,
 * tests/test_kv_format.c). Measured 2026-11-22 against the same engine ("cpu") with an f32 cache:
 * on the float-weight files (llama f32 / f16 / bf16, qwen2 f32) 8.5e-3 to 9.7e-3, ~25x what an
 * f16 cache gives (3.5e-4; its per-element error, ~2.8e-4 RMS, is 15-20x smaller). That adds to
 * the engine's distance from llama.cpp on those files (4e-4 to 5.5e-3): 1.5e-2 at most even added
 * linearly, so their limit is 2e-2 (measured 8.5e-3 to 1.1e-2); top-1 is not required
 * (tiny-qwen2-f32 flips one near-tied position of 17). The quantized files move 1.8e-2 to 2.2e-2
 * from their f32-cache run, not by the cache's error but because any perturbation flips 8-bit
 * activation roundings that random weights amplify (an f16 cache moves them 1.4e-2 too); against
 * llama.cpp they stay near where an f16 cache leaves them (worst 3.23e-2 vs 3.21e-2), inside
 * QTOL. So the q8_0 limit is max(case limit, 2e-2). A wrong q8_0 read lands far outside it: the
 * SIMD attention taking the scale of the head's other block gave 0.36 to 0.49 on every file. */
#define Q8KV_TOL 2e-2
/* A q4_0 K/V cache (a binary16 scale and 4-bit codes per 32 elements: RMS error ~3.9% of the
 * block's max |x|, 6.5-8.6% of an element's RMS for uniform or Gaussian blocks, ~16x q8_0's,
 * tests/test_kv_format.c). Measured 2026-11-24 on "cpu" against
 * llama.cpp: 1.30e-1 to 1.79e-1 over all 20 files (float weights 1.49e-1 to 1.63e-1, where the
 * engine itself is within 5.5e-3 of llama.cpp, so this is the cache's own error, ~16x q8_0's
 * 9.5e-3), and top-1 agrees at only 11-16 of 17 positions, so it is not required. The limit,
 * 3e-1 for every file, is 1.7x the worst measured (room for a GPU's other roundings, which flip
 * 4-bit codes). Wrong q4_0 reads land outside it (measured by mutating the SIMD read): codes
 * with another nibble order 1.05 to 1.15, the scale of the head's other block 0.93 to 1.10,
 * codes minus 7 instead of 8 0.43 to 0.49. */
#define Q4KV_TOL 3e-1
/* head_dim of these models (8 and 4) is not a multiple of 32: a q8_0 or q4_0 cache is refused */
static bool quant_refused(const char *stem) {
    return !strcmp(stem, "stories260K") || !strcmp(stem, "llama-2-tiny-random");
}

static const model_case cases[] = {
    {"stories260K", 3e-3, 1},       {"llama-2-tiny-random", 1e-2, 1}, {"tiny-llama-f32", 1e-2, 1},
    {"tiny-llama-f16", 1e-2, 1},    {"tiny-llama-bf16", 1e-2, 0},     {"tiny-llama-q8_0", QTOL, 0},
    {"tiny-llama-q4_0", QTOL, 0},   {"tiny-llama-q4_1", QTOL, 0},     {"tiny-llama-q5_0", QTOL, 0},
    {"tiny-llama-q5_1", QTOL, 0},   {"tiny-llama-q2_k", QTOL, 0},     {"tiny-llama-q3_k_m", QTOL, 0},
    {"tiny-llama-q4_k_m", QTOL, 0}, {"tiny-llama-q5_k_m", QTOL, 0},   {"tiny-llama-q6_k", QTOL, 0},
    {"tiny-llama-iq4_nl", QTOL, 0}, {"tiny-llama-iq4_xs", QTOL, 0},   {"tiny-qwen2-f32", 1e-2, 1},
    {"tiny-qwen2-q8_0", QTOL, 0},   {"tiny-qwen2-q4_0", QTOL, 0},     {"tiny-qwen2-q4_k_m", QTOL, 0},
    {"tiny-qwen2-q6_k", QTOL, 0},
};

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Runs a whole prompt as one batch asking for every position's logits. */
static float *prompt_logits(rf_context *c, int seq, const int32_t *toks, int n, int nv) {
    int32_t pos[256], sid[256];
    int8_t want[256];
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        sid[i] = seq;
        want[i] = 1;
    }
    rf_batch b = {n, toks, pos, sid, want};
    if (rf_decode(c, &b)) return NULL;
    float *out = malloc(sizeof(float) * (size_t)n * nv);
    for (int i = 0; i < n; i++) {
        const float *l = rf_get_logits(c, i);
        if (!l) {
            free(out);
            return NULL;
        }
        memcpy(out + (size_t)i * nv, l, sizeof(float) * (size_t)nv);
    }
    return out;
}

/* max over v of |a[v] - ref[v]| / (1 + |ref[v]|): logits compared relative to their size */
static float rel_diff(const float *a, const float *ref, int n) {
    float e = 0;
    for (int v = 0; v < n; v++) e = fmaxf(e, fabsf(a[v] - ref[v]) / (1.0f + fabsf(ref[v])));
    return e;
}

static const char *kv_name(int kv) {
    return kv == RF_KV_F16    ? "f16"
           : kv == RF_KV_F32  ? "f32"
           : kv == RF_KV_Q8_0 ? "q8_0"
           : kv == RF_KV_Q4_0 ? "q4_0"
                              : "auto";
}

/* kv: the context's K/V cache type (rf_kv_type). */
/* CPU threads for the model loads below (0: the library default, one per physical core). */
static int g_threads;

static void test_model(const model_case *mc, const char *device, int kv) {
    golden g;
    if (golden_load(mc->stem, &g)) {
        SKIP("%s: golden data missing", mc->stem);
        return;
    }
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s.gguf", mc->stem);
    rf_model_params mp = rf_model_default_params();
    mp.device = device;
    mp.n_threads = g_threads;
    rf_model *m = rf_model_load(test_shared(rel), &mp);
    CHECK(m != NULL, "%s on %s: load failed: %s", mc->stem, device, rf_error());
    if (!m) {
        golden_free(&g);
        return;
    }
    int32_t *toks = NULL;
    int n = rf_tokenize(m, g.prompt, strlen(g.prompt), true, false, &toks);
    CHECK(n == g.n_prompt && !memcmp(toks, g.prompt_tokens, sizeof(int32_t) * (size_t)n),
          "%s: prompt tokens differ from llama.cpp's (%d vs %d tokens)", mc->stem, n, g.n_prompt);
    CHECK(rf_model_n_vocab(m) == g.n_vocab, "%s: n_vocab %d, golden %d", mc->stem, rf_model_n_vocab(m), g.n_vocab);
    rf_context_params cparams = rf_context_default_params();
    cparams.kv_type = kv;
    rf_context *c = rf_context_new(m, &cparams);
    if ((kv == RF_KV_Q8_0 || kv == RF_KV_Q4_0) && quant_refused(mc->stem)) {
        CHECK(c == NULL && strstr(rf_error(), "head_dim") && strstr(rf_error(), kv_name(kv)),
              "%s on %s: a %s cache must be refused naming head_dim: %s", mc->stem, device, kv_name(kv),
              c ? "(accepted)" : rf_error());
        rf_context_free(c);
        free(toks);
        rf_model_free(m);
        golden_free(&g);
        return;
    }
    CHECK(c != NULL, "%s: context: %s", mc->stem, rf_error());
    CHECK(!c || kv == RF_KV_AUTO || rf_context_kv_type(c) == (rf_kv_type)kv, "%s: context K/V type %d, asked for %d",
          mc->stem, c ? (int)rf_context_kv_type(c) : -1, kv);
    const double tol = kv == RF_KV_Q4_0                         ? Q4KV_TOL
                       : kv == RF_KV_Q8_0 && mc->tol < Q8KV_TOL ? Q8KV_TOL
                                                                : mc->tol;
    const int top1 = mc->top1 && kv != RF_KV_Q8_0 && kv != RF_KV_Q4_0;
    if (c && n == g.n_prompt) {
        int seq = rf_seq_new(c);
        float *lg = prompt_logits(c, seq, g.prompt_tokens, n, g.n_vocab);
        CHECK(lg != NULL, "%s: decode failed: %s", mc->stem, rf_error());
        if (lg) {
            double err = test_rel_l2(lg, g.logits, (size_t)n * g.n_vocab);
            int agree = 0;
            for (int i = 0; i < n; i++)
                agree += argmax(lg + (size_t)i * g.n_vocab, g.n_vocab) == argmax(g.logits + (size_t)i * g.n_vocab, g.n_vocab);
            printf("%-22s %-8s kv %-4s rel L2 %.2e (limit %.0e), top-1 %d/%d\n", mc->stem, device, kv_name(kv), err,
                   tol, agree, n);
            CHECK(err <= tol, "%s on %s (kv %s): logits rel L2 %.3e > %.0e", mc->stem, device, kv_name(kv), err, tol);
            if (top1)
                CHECK(agree == n, "%s on %s (kv %s): top-1 differs at %d positions", mc->stem, device, kv_name(kv),
                      n - agree);
            if (!strcmp(device, "cpu-ggml"))
                CHECK(err <= 2e-2, "%s on cpu-ggml: rel L2 %.3e > 2e-2", mc->stem, err);
            free(lg);
        }
        /* Greedy continuation (stories260K is a real model: must match exactly). */
        if (!strcmp(mc->stem, "stories260K") && g.n_greedy > 0) {
            rf_sampler_params sp = rf_sampler_default_params();
            sp.temp = 0;
            rf_sampler *s = rf_sampler_new(&sp);
            int32_t next = rf_sampler_sample(s, c, n - 1, NULL);
            int ok = 0, pos = n;
            for (int i = 0; i < g.n_greedy; i++) {
                if (next != g.greedy[i]) break;
                ok++;
                int8_t want = 1;
                rf_batch b = {1, &next, &pos, &seq, &want};
                if (rf_decode(c, &b)) break;
                pos++;
                next = rf_sampler_sample(s, c, 0, NULL);
            }
            CHECK(ok == g.n_greedy, "%s on %s (kv %s): greedy matches %d of %d golden tokens", mc->stem, device,
                  kv_name(kv), ok, g.n_greedy);
            rf_sampler_free(s);
            /* The same continuation pipelined (rocmforge.h: the token goes to the next step on the
             * device, the host fetches it while that step runs), on a second sequence. Misuse is
             * refused by name. */
            CHECK(rf_decode_next(c, seq) < 0 && strstr(rf_error(), "rf_sampler_sample_async"),
                  "rf_decode_next without a sampled token: %s", rf_error());
            rf_sampler *s2 = rf_sampler_new(&sp);
            CHECK(rf_sampler_fetch(s2, c) < 0 && strstr(rf_error(), "no rf_sampler_sample_async"),
                  "rf_sampler_fetch with nothing pending: %s", rf_error());
            rf_seq_remove(c, seq); /* the context holds one sequence */
            int seq2 = rf_seq_new(c);
            float *lg2 = seq2 >= 0 ? prompt_logits(c, seq2, g.prompt_tokens, n, g.n_vocab) : NULL;
            CHECK(lg2 != NULL, "%s on %s: second sequence: %s", mc->stem, device, rf_error());
            int ok2 = 0;
            if (lg2 && !rf_sampler_sample_async(s2, c, n - 1)) {
                rf_sampler *s3 = rf_sampler_new(&sp); /* another sampler must not take s2's slot */
                CHECK(rf_sampler_sample_async(s3, c, n - 1) < 0 && strstr(rf_error(), "not fetched"),
                      "a second sample before the first was fetched: %s", rf_error());
                rf_sampler_free(s3);
                for (int i = 0; i < g.n_greedy; i++) {
                    const bool more = i + 1 < g.n_greedy;
                    if (more && rf_decode_next(c, seq2)) break;
                    int32_t t = rf_sampler_fetch(s2, c);
                    if (t != g.greedy[i]) break;
                    ok2++;
                    if (more && rf_sampler_sample_async(s2, c, 0)) break;
                }
            }
            CHECK(ok2 == g.n_greedy, "%s on %s (kv %s): pipelined greedy matches %d of %d golden tokens", mc->stem,
                  device, kv_name(kv), ok2, g.n_greedy);
            CHECK(rf_seq_len(c, seq2) == n + g.n_greedy - 1, "%s: pipelined sequence holds %d positions, expected %d",
                  mc->stem, rf_seq_len(c, seq2), n + g.n_greedy - 1);
            /* A sampled token stays the one sampled when an rf_decode with a token of its own comes
             * before the fetch: that step's upload rewrites the device slot the token is copied
             * from (the GPU copies it on a side stream). */
            const float *last = ok2 == g.n_greedy ? rf_get_logits(c, 0) : NULL;
            if (ok2 == g.n_greedy)
                CHECK(last != NULL, "%s on %s: logits of the last pipelined step: %s", mc->stem, device, rf_error());
            if (last) {
                int32_t want = 0;
                for (int v = 1; v < g.n_vocab; v++)
                    if (last[v] > last[want]) want = v;
                int32_t other = (want + 1) % g.n_vocab, at = rf_seq_len(c, seq2);
                int8_t lw = 1;
                rf_batch ob = {1, &other, &at, &seq2, &lw};
                const int rc = rf_sampler_sample_async(s2, c, 0) || rf_decode(c, &ob);
                const int32_t got = rc ? -1 : rf_sampler_fetch(s2, c);
                CHECK(got == want, "%s on %s: token sampled before an rf_decode of token %d: %d, expected %d (%s)",
                      mc->stem, device, other, got, want, rc ? rf_error() : "");
            }
            free(lg2);
            rf_sampler_free(s2);
        }
    }
    rf_context_free(c);
    free(toks);
    rf_model_free(m);
    golden_free(&g);
}

/* Several sequences of different lengths in shared batches, with a fork and removals between
 * steps: each sequence's logits must equal its logits when run alone. */
static void test_batches(const char *device, int kv) {
    /* The f32 file: paging is what is tested here, and f32 weights keep every path free of the
     * 8-bit activation rounding whose flips random weights amplify. */
    const char *path = test_shared("models/tiny-llama-f32.gguf");
    if (!test_file_exists(path)) {
        SKIP("tiny-llama-f32.gguf missing");
        return;
    }
    rf_model_params mp = rf_model_default_params();
    mp.device = device;
    mp.n_threads = g_threads;
    rf_model *m = rf_model_load(path, &mp);
    CHECK(m != NULL, "load: %s", rf_error());
    if (!m) return;
    int nv = rf_model_n_vocab(m);
    enum { NS = 4, LEN = 70 };
    int32_t toks[NS][LEN];
    for (int s = 0; s < NS; s++)
        for (int i = 0; i < LEN; i++) toks[s][i] = test_randint(0, nv - 1);
    int lens[NS] = {LEN, 37, 5, 61};
    /* Alone: one context per sequence, token by token after a prefix batch. */
    float *alone[NS];
    for (int s = 0; s < NS; s++) {
        rf_context_params cp = rf_context_default_params();
        cp.n_ctx = 128;
        cp.kv_type = kv;
        rf_context *c = rf_context_new(m, &cp);
        int seq = rf_seq_new(c);
        alone[s] = prompt_logits(c, seq, toks[s], lens[s], nv);
        CHECK(alone[s] != NULL, "alone run %d: %s", s, rf_error());
        rf_context_free(c);
    }
    /* Together: round-robin chunks of random sizes from every live sequence in one batch. */
    rf_context_params cp = {128, 64, 6, kv};
    rf_context *c = rf_context_new(m, &cp);
    int seq_of[NS], done[NS] = {0};
    float max_err = 0;
    int checked = 0;
    for (int s = 0; s < NS; s++) seq_of[s] = rf_seq_new(c);
    /* an extra sequence that is added and removed between steps */
    int extra = rf_seq_new(c);
    int32_t xt[3] = {1, 2, 3}, xp[3] = {0, 1, 2}, xs[3] = {extra, extra, extra};
    int8_t xw[3] = {0, 0, 1};
    rf_batch xb = {3, xt, xp, xs, xw};
    CHECK(rf_decode(c, &xb) == 0, "extra sequence decode: %s", rf_error());
    rf_seq_remove(c, extra);
    for (int step = 0; step < 200; step++) {
        int32_t bt[64], bp[64], bs[64], who[64];
        int8_t bw[64];
        int n = 0;
        for (int s = 0; s < NS && n < 64; s++) {
            int r = test_randint(1, 9), k = RF_TEST_MIN(r, lens[s] - done[s]);
            for (int i = 0; i < k && n < 64; i++) {
                bt[n] = toks[s][done[s]];
                bp[n] = done[s];
                bs[n] = seq_of[s];
                bw[n] = 1;
                who[n] = s;
                done[s]++;
                n++;
            }
        }
        if (n == 0) break;
        rf_batch b = {n, bt, bp, bs, bw};
        if (rf_decode(c, &b)) {
            CHECK(0, "batched decode: %s", rf_error());
            break;
        }
        for (int i = 0; i < n; i++) {
            const float *l = rf_get_logits(c, i);
            const float *ref = alone[who[i]] + (size_t)bp[i] * nv;
            max_err = fmaxf(max_err, rel_diff(l, ref, nv));
            checked++;
        }
        if (step == 2) { /* remove and re-add sequence 2 between steps: start it over */
            rf_seq_remove(c, seq_of[2]);
            seq_of[2] = rf_seq_new(c);
            done[2] = 0;
        }
    }
    /* The reference devices (cpu-ref, cpu-ggml) compute each token the same way whatever the
     * batch, so they must agree to rounding. The fast paths may use other kernels for other batch
     * sizes (GPU: tensor-core f16-operand attention above 8 tokens, f32 matvec vs GEMM; CPU: matvec
     * vs GEMM summation order). Measured on this f32 model (2026-11-21): CPU 0, H200 9.6e-3; a
     * cache slot or block-table mistake gives differences of order 1. A q8_0 cache on the GPU
     * brings back the 8-bit rounding flips that the f32 file avoids: K and V come from the batch's
     * GEMM in one run and from matvecs in the other, and a value that lands on the other side of
     * a q8_0 rounding step is amplified by the random weights. 19 runs of random tokens on an H200
     * (2026-11-23): 1.6e-2 .. 4.9e-2, 8 of them above 3e-2; f16 / f32 caches in the same runs
     * 4.8e-3 .. 1.5e-2. q4_0 flips whole 4-bit steps: 2.1e-1 (H100), 3.1e-1 and 1.1e-1 (H200) in
     * the first three GPU runs (2026-11-24; the CPU measures 0), so its limit, 6e-1, only guards
     * against gross errors: the slot and block-table logic is the same code for every cache type
     * and is held to 3e-2 by the f16 and f32 runs. */
    bool reference = !strcmp(device, "cpu-ref") || !strcmp(device, "cpu-ggml");
    bool gpu = !strncmp(device, "gpu", 3);
    float tol = reference ? 1e-4f : !gpu ? 1e-2f : kv == RF_KV_Q4_0 ? 6e-1f : kv == RF_KV_Q8_0 ? 1e-1f : 3e-2f;
    printf("batched vs alone on %s (kv %s): %d positions, max rel diff %.2e (limit %.0e)\n", device, kv_name(kv),
           checked, max_err, tol);
    CHECK(max_err < tol, "batched logits differ from alone logits by %.3e on %s", max_err, device);

    /* Fork: a shared 40-token prefix continued two ways equals each path run alone. */
    for (int s = 0; s < NS; s++) rf_seq_remove(c, seq_of[s]);
    int a = rf_seq_new(c);
    float *pre = prompt_logits(c, a, toks[0], 40, nv);
    free(pre);
    int f = rf_seq_fork(c, a);
    CHECK(f >= 0 && rf_seq_len(c, f) == 40, "fork: %s", rf_error());
    int32_t bt[2] = {toks[0][40], toks[1][40]}, bp[2] = {40, 40}, bs[2] = {a, f};
    int8_t bw[2] = {1, 1};
    rf_batch b = {2, bt, bp, bs, bw};
    CHECK(rf_decode(c, &b) == 0, "decode after fork: %s", rf_error());
    /* Reference for the forked path: prefix of toks[0] then toks[1][40], alone. */
    int32_t fpath[41];
    memcpy(fpath, toks[0], 40 * sizeof(int32_t));
    fpath[40] = toks[1][40];
    rf_context *c2 = rf_context_new(m, &cp);
    int s2 = rf_seq_new(c2);
    float *ref = prompt_logits(c2, s2, fpath, 41, nv);
    const float *la = rf_get_logits(c, 0), *lf = rf_get_logits(c, 1);
    const float ea = rel_diff(la, alone[0] + 40 * (size_t)nv, nv), ef = rel_diff(lf, ref + 40 * (size_t)nv, nv);
    CHECK(ea < tol && ef < tol, "forked sequences differ from their alone runs (%.2e, %.2e) on %s", ea, ef, device);

    /* Truncation: a (41 positions) cut back to 20, inside a cache block it still shares with the
     * fork f, then continued with toks[1][20..40]: its logits must equal that path run alone, and
     * f, continued by one token, must not see a's new rows. Bad lengths and sequences are refused. */
    CHECK(rf_seq_truncate(c, a, 42) < 0 && rf_seq_truncate(c, a, -1) < 0 && rf_seq_truncate(c, 99, 0) < 0,
          "truncate accepted a length past the sequence, a negative one, or no sequence");
    CHECK(rf_seq_truncate(c, a, 41) == 0 && rf_seq_len(c, a) == 41, "truncate to the same length: %s", rf_error());
    CHECK(rf_seq_truncate(c, a, 20) == 0 && rf_seq_len(c, a) == 20, "truncate to 20: %s", rf_error());
    int32_t tpath[41], tp[21], ts[21];
    int8_t tw[21];
    memcpy(tpath, toks[0], 20 * sizeof(int32_t));
    memcpy(tpath + 20, toks[1] + 20, 21 * sizeof(int32_t));
    for (int i = 0; i < 21; i++) tp[i] = 20 + i, ts[i] = a, tw[i] = 1;
    rf_batch tb = {21, tpath + 20, tp, ts, tw};
    CHECK(rf_decode(c, &tb) == 0, "decode after truncate: %s", rf_error());
    rf_context *c3 = rf_context_new(m, &cp);
    float *tref = prompt_logits(c3, rf_seq_new(c3), tpath, 41, nv);
    float et = 0;
    for (int i = 0; tref && i < 21; i++)
        et = fmaxf(et, rel_diff(rf_get_logits(c, i), tref + (size_t)(20 + i) * nv, nv));
    CHECK(tref != NULL && et < tol, "truncated and continued sequence differs from its alone run (%.2e) on %s", et,
          device);
    free(tref);
    rf_context_free(c3);
    int32_t fpath2[42];
    memcpy(fpath2, fpath, 41 * sizeof(int32_t));
    fpath2[41] = toks[2][41];
    int32_t fp41 = 41;
    int8_t fw = 1;
    rf_batch fb = {1, fpath2 + 41, &fp41, &f, &fw};
    CHECK(rf_decode(c, &fb) == 0, "fork decode after the truncate: %s", rf_error());
    rf_context *c4 = rf_context_new(m, &cp);
    float *fref = prompt_logits(c4, rf_seq_new(c4), fpath2, 42, nv);
    const float ef2 = fref ? rel_diff(rf_get_logits(c, 0), fref + 41 * (size_t)nv, nv) : 0;
    CHECK(fref != NULL && ef2 < tol, "the fork changed after its sibling was truncated (%.2e) on %s", ef2, device);
    free(fref);
    rf_context_free(c4);
    CHECK(rf_seq_truncate(c, a, 0) == 0 && rf_seq_len(c, a) == 0, "truncate to 0: %s", rf_error());
    free(ref);
    rf_context_free(c2);
    rf_context_free(c);
    for (int s = 0; s < NS; s++) free(alone[s]);
    rf_model_free(m);
}

/* The K/V cache type must be accepted as documented and refused otherwise. */
static void test_kv_types(void) {
    const char *path = test_shared("models/stories260K.gguf");
    if (!test_file_exists(path)) {
        SKIP("stories260K.gguf missing");
        return;
    }
    /* auto: f16 on the fast CPU mode (as llama.cpp), f32 on the reference modes (exact) */
    const char *refs[] = {"cpu-ref", "cpu-ggml"};
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
        rf_model_params rp = rf_model_default_params();
        rp.device = refs[i];
        rf_model *r = rf_model_load(path, &rp);
        rf_context_params cp = rf_context_default_params();
        cp.n_ctx = 64;
        rf_context *c = r ? rf_context_new(r, &cp) : NULL;
        CHECK(c && rf_context_kv_type(c) == RF_KV_F32, "%s: auto K/V type %d, expected f32", refs[i],
              c ? (int)rf_context_kv_type(c) : -1);
        rf_context_free(c);
        rf_model_free(r);
    }
    rf_model_params mp = rf_model_default_params();
    mp.device = "cpu";
    rf_model *m = rf_model_load(path, &mp);
    CHECK(m != NULL, "load: %s", rf_error());
    if (!m) return;
    const int want[3] = {RF_KV_F16, RF_KV_F32, RF_KV_F16};
    /* (q8_0, q4_0: test_model, and their refusal for this model's head_dim 8 there too) */
    for (int kv = RF_KV_AUTO; kv <= RF_KV_F16; kv++) {
        rf_context_params cp = rf_context_default_params();
        cp.n_ctx = 64;
        cp.kv_type = kv;
        rf_context *c = rf_context_new(m, &cp);
        CHECK(c && rf_context_kv_type(c) == (rf_kv_type)want[kv], "kv_type %d: context %p, type %d", kv, (void *)c,
              c ? (int)rf_context_kv_type(c) : -1);
        rf_context_free(c);
    }
    rf_context_params cp = rf_context_default_params();
    cp.kv_type = 7;
    rf_context *c = rf_context_new(m, &cp);
    CHECK(c == NULL && strstr(rf_error(), "K/V cache type 7"), "kv_type 7 accepted or badly reported: %s",
          c ? "(accepted)" : rf_error());
    rf_context_free(c);
    rf_model_free(m);
}

/* A thread count far beyond any machine is refused by name (before the file is read), not a hang. */
static void test_thread_cap(void) {
    rf_model_params mp = rf_model_default_params();
    mp.device = "cpu";
    mp.n_threads = RF_MAX_THREADS + 1;
    rf_model *m = rf_model_load(test_shared("models/stories260K.gguf"), &mp);
    CHECK(m == NULL && strstr(rf_error(), "CPU threads"), "n_threads %d accepted or badly reported: %s",
          mp.n_threads, m ? "(accepted)" : rf_error());
    rf_model_free(m);
}

/* The library's answers to misuse: NULL arguments and batches it cannot run are refused with a
 * message (rf_error) and change nothing; none of these may crash (the suite runs under ASan and
 * UBSan too). */
static void test_api_misuse(void) {
    CHECK(rf_model_load(NULL, NULL) == NULL && strstr(rf_error(), "no model path"), "NULL path: %s", rf_error());
    CHECK(rf_context_new(NULL, NULL) == NULL && strstr(rf_error(), "no model"), "NULL model: %s", rf_error());
    rf_model_params mp = rf_model_default_params();
    mp.device = "cpu";
    rf_model *m = rf_model_load(test_shared("models/stories260K.gguf"), &mp);
    CHECK(m != NULL, "load: %s", rf_error());
    if (!m) return;
    int32_t *toks = NULL;
    CHECK(rf_tokenize(m, "abc", 3, true, false, NULL) < 0 && strstr(rf_error(), "NULL output"), "NULL out: %s",
          rf_error());
    CHECK(rf_tokenize(m, NULL, 3, true, false, &toks) < 0 && toks == NULL, "NULL text: %s", rf_error());
    char piece[8];
    CHECK(rf_token_to_piece(m, 5, NULL, 16) < 0 && strstr(rf_error(), "NULL buffer"), "NULL buffer: %s", rf_error());
    CHECK(rf_token_to_piece(m, -1, piece, sizeof piece) < 0 && strstr(rf_error(), "bad token id"), "token -1: %s",
          rf_error());
    rf_context *c = rf_context_new(m, NULL);
    CHECK(c != NULL, "context: %s", rf_error());
    if (!c) {
        rf_model_free(m);
        return;
    }
    const int seq = rf_seq_new(c);
    int32_t tk[2] = {1, 5}, pos[2] = {0, 1}, sid[2] = {seq, seq};
    int8_t lg[2] = {0, 1};
    const struct {
        rf_batch b;
        const char *want;
    } bad[] = {
        {{2, NULL, pos, sid, lg}, "without tokens"},
        {{2, tk, NULL, sid, lg}, "without tokens, positions"},
        {{2, tk, pos, NULL, lg}, "sequence ids"},
        {{0, tk, pos, sid, lg}, "batch of 0 tokens"},
        {{-3, tk, pos, sid, lg}, "batch of -3 tokens"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(rf_decode(c, &bad[i].b) < 0 && strstr(rf_error(), bad[i].want), "bad batch %zu: %s", i, rf_error());
    CHECK(rf_decode(c, NULL) < 0 && strstr(rf_error(), "no batch"), "NULL batch: %s", rf_error());
    const int32_t out_of_vocab[2] = {1, rf_model_n_vocab(m)}, gap[2] = {0, 7}, other[2] = {seq, seq + 3};
    rf_batch b = {2, out_of_vocab, pos, sid, lg};
    CHECK(rf_decode(c, &b) < 0 && strstr(rf_error(), "outside the vocabulary"), "token past the vocab: %s", rf_error());
    b = (rf_batch){2, tk, gap, sid, lg};
    CHECK(rf_decode(c, &b) < 0 && strstr(rf_error(), "positions must continue"), "position gap: %s", rf_error());
    b = (rf_batch){2, tk, pos, other, lg};
    CHECK(rf_decode(c, &b) < 0 && strstr(rf_error(), "does not exist"), "unknown sequence: %s", rf_error());
    /* none of that touched the cache: the good batch still starts the sequence at position 0 */
    b = (rf_batch){2, tk, pos, sid, lg};
    CHECK(rf_decode(c, &b) == 0 && rf_seq_len(c, seq) == 2, "good batch after the bad ones: %s", rf_error());
    CHECK(rf_get_logits(c, 1) != NULL, "logits asked for: %s", rf_error());
    CHECK(rf_get_logits(c, 0) == NULL && rf_get_logits(c, 2) == NULL && rf_get_logits(c, -1) == NULL,
          "logits not asked for, or past the batch");
    rf_context_free(c);
    rf_model_free(m);
}

int main(void) {
    test_seed();
    test_api_misuse();
    test_kv_types();
    test_thread_cap();
    /* Each device with its default cache (cpu and a GPU: f16, as llama.cpp's golden data was made;
     * cpu-ref and cpu-ggml: f32), the fast CPU also with an f32, a q8_0 and a q4_0 cache, a GPU
     * also with f32, q8_0 and q4_0. */
    const char *extra = getenv("ROCMFORGE_TEST_DEVICE");
    const struct { const char *device; int kv; } runs[] = {
        {"cpu-ref", RF_KV_AUTO}, {"cpu", RF_KV_AUTO},  {"cpu", RF_KV_F32},  {"cpu", RF_KV_Q8_0},
        {"cpu", RF_KV_Q4_0},     {"cpu-ggml", RF_KV_AUTO}, {extra, RF_KV_AUTO}, {extra, RF_KV_F32},
        {extra, RF_KV_Q8_0},     {extra, RF_KV_Q4_0},
    };
    for (size_t d = 0; d < sizeof runs / sizeof runs[0]; d++) {
        if (!runs[d].device) continue;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_model(&cases[i], runs[d].device, runs[d].kv);
        test_batches(runs[d].device, runs[d].kv);
    }
    /* Three threads: uneven splits of every threaded op (rows of the matmuls, attention rows
     * divided by the positions they cover) on a few models and the interleaved batches. */
    g_threads = 3;
    printf("cpu with 3 threads:\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && i < 4; i++) test_model(&cases[i], "cpu", RF_KV_AUTO);
    test_batches("cpu", RF_KV_AUTO);
    g_threads = 0;
    return test_finish();
}
