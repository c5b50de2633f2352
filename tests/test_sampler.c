/* The host sampler (runtime/sampler.h), which is also the CPU backend's `sample` op and the twin
 * the GPU sampler is checked against: each stage of the documented algorithm on logits whose
 * answer is known, plus seeded reproducibility and the reported log-probability. */
#include <math.h>
#include <string.h>

#include "rocmforge.h"
#include "runtime/sampler.h"
#include "test.h"

static rf_sample_params greedy(void) {
    rf_sample_params p = rf_sample_params_default();
    p.temp = 0;
    return p;
}

/* Fraction of n draws (fresh u each) that chose `id`. */
static double freq(const float *lg, int nv, const rf_sample_params *p, int32_t id, int n) {
    rf_rng r;
    rf_rng_seed(&r, test_rng());
    int hit = 0;
    for (int i = 0; i < n; i++) hit += rf_sample_host(lg, nv, p, NULL, 0, rf_rng_uniform(&r), NULL) == id;
    return (double)hit / n;
}

/* The public constructor refuses parameters the algorithm has no meaning for. */
static void test_sampler_new_params(void) {
    rf_sampler *s = rf_sampler_new(NULL);
    CHECK(s != NULL, "default sampler: %s", rf_error());
    rf_sampler_free(s);
    for (int k = 0; k < 7; k++) {
        rf_sampler_params p = rf_sampler_default_params();
        switch (k) {
        case 0: p.temp = NAN; break;
        case 1: p.temp = INFINITY; break;
        case 2: p.top_p = NAN; break;
        case 3: p.min_p = NAN; break;
        case 4: p.repeat_penalty = 0.0f; break;
        case 5: p.freq_penalty = -INFINITY; break;
        default: p.presence_penalty = NAN; break;
        }
        s = rf_sampler_new(&p);
        CHECK(s == NULL && strstr(rf_error(), "sampler parameters"), "case %d: refused with a message (%s)", k,
              s ? "accepted" : rf_error());
        rf_sampler_free(s);
    }
    rf_sampler_params ok = rf_sampler_default_params();
    ok.temp = -1.0f, ok.top_p = 2.0f, ok.min_p = -1.0f, ok.top_k = -3; /* documented as greedy / filters off */
    s = rf_sampler_new(&ok);
    CHECK(s != NULL, "greedy and filters off are valid: %s", s ? "" : rf_error());
    rf_sampler_free(s);
}

int main(void) {
    test_seed();
    test_sampler_new_params();
    /* Greedy: argmax, lowest id on ties, whatever u is. */
    float lg[8] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, -3.0f, 0.0f, 1.9f};
    rf_sample_params g = greedy();
    CHECK(rf_sample_host(lg, 8, &g, NULL, 0, 0.99f, NULL) == 1, "greedy picks the lowest of tied maxima");

    /* Log-probability: log softmax of the raw logits at the chosen id. */
    float lp = 0;
    rf_sample_host(lg, 8, &g, NULL, 0, 0.0f, &lp);
    double z = 0;
    for (int i = 0; i < 8; i++) z += exp(lg[i]);
    CHECK(fabs(lp - (2.0 - log(z))) < 1e-5, "logprob %f vs %f", lp, 2.0 - log(z));

    /* top-k = 1 is greedy at any temperature and u. */
    rf_sample_params p = rf_sample_params_default();
    p.top_k = 1;
    p.top_p = 1;
    p.min_p = 0;
    p.temp = 5;
    int ok = 1;
    for (int i = 0; i < 50; i++) ok &= rf_sample_host(lg, 8, &p, NULL, 0, test_randf(0, 0.999f), NULL) == 1;
    CHECK(ok, "top_k 1 always returns the argmax");

    /* top-k = 2 with ties: only ids 1 and 3 (equal logits) can come out, each about half. */
    p.top_k = 2;
    p.temp = 1;
    double f1 = freq(lg, 8, &p, 1, 4000), f3 = freq(lg, 8, &p, 3, 4000), f7 = freq(lg, 8, &p, 7, 4000);
    CHECK(fabs(f1 - 0.5) < 0.05 && fabs(f3 - 0.5) < 0.05 && f7 == 0.0, "top-k 2: p(1)=%.3f p(3)=%.3f p(7)=%.3f", f1,
          f3, f7);

    /* Temperature: two tokens with logits 0 and log(3) give p = 1/4, 3/4 at T=1, and at T=2
     * p ∝ 1 : sqrt(3). */
    float two[2] = {0.0f, logf(3.0f)};
    rf_sample_params t = rf_sample_params_default();
    t.top_k = 0;
    t.top_p = 1;
    t.min_p = 0;
    t.temp = 1;
    double fa = freq(two, 2, &t, 1, 20000);
    CHECK(fabs(fa - 0.75) < 0.015, "T=1: p(1) = %.3f, expected 0.75", fa);
    t.temp = 2;
    double fb = freq(two, 2, &t, 1, 20000), want = sqrt(3.0) / (1 + sqrt(3.0));
    CHECK(fabs(fb - want) < 0.015, "T=2: p(1) = %.3f, expected %.3f", fb, want);

    /* top-p: probabilities 0.5, 0.3, 0.2; top_p 0.7 keeps the first two (0.5 < 0.7 <= 0.8). */
    float three[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    t.temp = 1;
    t.top_p = 0.7f;
    CHECK(freq(three, 3, &t, 2, 5000) == 0.0, "top-p 0.7 drops the 0.2 token");
    CHECK(freq(three, 3, &t, 1, 5000) > 0.3, "top-p 0.7 keeps the 0.3 token");
    /* min-p: 0.5 keeps tokens with p >= 0.25 (ids 0 and 1). */
    t.top_p = 1;
    t.min_p = 0.5f;
    CHECK(freq(three, 3, &t, 2, 5000) == 0.0 && freq(three, 3, &t, 1, 5000) > 0.3, "min-p 0.5");

    /* Penalties: a repeated id with a positive logit is divided, a negative one multiplied;
     * frequency and presence penalties subtract count * f + p. */
    float pen[3] = {2.0f, 1.9f, -1.0f};
    rf_sample_params q = greedy();
    q.repeat_penalty = 1.5f;
    int32_t hist[2] = {0, 0};
    CHECK(rf_sample_host(pen, 3, &q, hist, 2, 0, NULL) == 1, "repeat penalty moves the argmax (2/1.5 < 1.9)");
    q.repeat_penalty = 1.0f;
    q.freq_penalty = 0.06f; /* 2.0 - 2 * 0.06 = 1.88 < 1.9 */
    CHECK(rf_sample_host(pen, 3, &q, hist, 2, 0, NULL) == 1, "frequency penalty counts occurrences");
    q.freq_penalty = 0;
    q.presence_penalty = 0.05f; /* 1.95 > 1.9: still id 0 */
    CHECK(rf_sample_host(pen, 3, &q, hist, 2, 0, NULL) == 0, "presence penalty is once per token");
    q.presence_penalty = 0.2f;
    q.penalty_last_n = 1; /* window of 1 sees one 0: 1.8 < 1.9 */
    CHECK(rf_sample_host(pen, 3, &q, hist, 2, 0, NULL) == 1, "penalty window");
    q.penalty_last_n = 0; /* window 0: penalties off */
    CHECK(rf_sample_host(pen, 3, &q, hist, 2, 0, NULL) == 0, "penalty window 0 turns penalties off");

    /* Seeded generator: same seed, same stream; different seeds, different streams. */
    rf_rng a, b, c;
    rf_rng_seed(&a, 42);
    rf_rng_seed(&b, 42);
    rf_rng_seed(&c, 43);
    int same = 1, diff = 0;
    for (int i = 0; i < 100; i++) {
        float ua = rf_rng_uniform(&a), ub = rf_rng_uniform(&b), uc = rf_rng_uniform(&c);
        same &= ua == ub && ua >= 0 && ua < 1;
        diff += ua != uc;
    }
    CHECK(same && diff > 90, "rng: same seed reproduces (%d), other seed differs (%d/100)", same, diff);
    return test_finish();
}
