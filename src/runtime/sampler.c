#include "sampler.h"

#include <math.h>
#include <stdlib.h>

#include "core/util.h"

rf_sample_params rf_sample_params_default(void) {
    rf_sample_params p = {0};
    p.temp = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.penalty_last_n = 64;
    p.seed = 0;
    return p;
}

typedef struct {
    float logit;
    int32_t id;
} cand;

/* Descending logit, ascending id on ties: a total order, so results never depend on qsort. */
static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

static float log_softmax_at(const float *logits, int n, int32_t id) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = logits[i] > m ? logits[i] : m;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - m);
    return (float)((double)logits[id] - m - log(sum));
}

int32_t rf_sample_host(const float *logits, int n_vocab, const rf_sample_params *p,
                       const int32_t *history, int n_history, float u, float *logprob) {
    cand *c = rf_xmalloc((size_t)n_vocab * sizeof *c);
    for (int i = 0; i < n_vocab; i++) c[i] = (cand){logits[i], i};

    bool penalize = p->repeat_penalty != 1.0f || p->freq_penalty != 0.0f || p->presence_penalty != 0.0f;
    if (penalize && n_history > 0) {
        int start = p->penalty_last_n > 0 && n_history > p->penalty_last_n ? n_history - p->penalty_last_n : 0;
        if (p->penalty_last_n == 0) start = n_history; /* window 0: penalties off */
        for (int i = start; i < n_history; i++) {
            int32_t id = history[i];
            if (id < 0 || id >= n_vocab) continue;
            bool first = true;
            for (int j = start; j < i; j++) first &= history[j] != id;
            if (!first) continue;
            int count = 0;
            for (int j = start; j < n_history; j++) count += history[j] == id;
            float l = c[id].logit;
            l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
            c[id].logit = l - (float)count * p->freq_penalty - p->presence_penalty;
        }
    }

    int32_t chosen;
    if (p->temp <= 0.0f) {
        int best = 0;
        for (int i = 1; i < n_vocab; i++)
            if (c[i].logit > c[best].logit) best = i;
        chosen = c[best].id;
    } else {
        qsort(c, (size_t)n_vocab, sizeof *c, cand_cmp);
        int n = n_vocab;
        if (p->top_k > 0 && p->top_k < n) n = p->top_k;
        /* probabilities at temperature 1 for top-p / min-p */
        float *pr = rf_xmalloc((size_t)n * sizeof *pr);
        double sum = 0;
        for (int i = 0; i < n; i++) sum += pr[i] = expf(c[i].logit - c[0].logit);
        if (p->top_p < 1.0f) {
            double cum = 0;
            int keep = n;
            for (int i = 0; i < n; i++) {
                cum += pr[i] / sum;
                if (cum >= p->top_p) {
                    keep = i + 1;
                    break;
                }
            }
            n = keep;
        }
        if (p->min_p > 0.0f) {
            int keep = 1; /* pr[0] is the largest (== 1 before normalising) */
            while (keep < n && pr[keep] >= p->min_p * pr[0]) keep++;
            n = keep;
        }
        double total = 0;
        for (int i = 0; i < n; i++) total += pr[i] = expf((c[i].logit - c[0].logit) / p->temp);
        double target = (double)u * total, cum = 0;
        int pick = n - 1;
        for (int i = 0; i < n; i++) {
            cum += pr[i];
            if (cum > target) {
                pick = i;
                break;
            }
        }
        chosen = c[pick].id;
        free(pr);
    }
    free(c);
    if (logprob) *logprob = log_softmax_at(logits, n_vocab, chosen);
    return chosen;
}

void rf_rng_seed(rf_rng *r, uint64_t seed) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    r->s = (z ^ (z >> 31)) | 1;
}

uint64_t rf_rng_next(rf_rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}

float rf_rng_uniform(rf_rng *r) { return (float)(rf_rng_next(r) >> 40) * (1.0f / 16777216.0f); }
