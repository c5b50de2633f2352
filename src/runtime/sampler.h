/* sampler.h: turning a row of logits into a token id.
 *
 * The algorithm every backend implements (backend.h `sample`), in this order:
 *  1. penalties over the last penalty_last_n tokens of the sequence: for a token seen c > 0
 *     times, logit = logit > 0 ? logit / repeat_penalty : logit * repeat_penalty, then
 *     logit -= c * freq_penalty + presence_penalty (llama.cpp's semantics);
 *  2. temp <= 0: the argmax (lowest id on ties), done;
 *  3. top-k: keep the k largest logits (ties broken by lower id);
 *  4. top-p: softmax of the kept logits; keep the smallest prefix (by descending probability)
 *     whose mass reaches top_p (at least one token);
 *  5. min-p: keep tokens whose probability is at least min_p times the largest;
 *  6. divide the kept logits by temp, softmax, and pick the first token (descending order)
 *     whose cumulative probability exceeds u * total, u uniform in [0,1).
 * The reported log-probability is the chosen token's log-softmax over the raw logits.
 * u comes from rf_rng, a seeded generator: the same seed gives the same tokens.
 */
#ifndef RF_SAMPLER_H
#define RF_SAMPLER_H

#include <stdint.h>

#include "backend/backend.h"

/* Defaults as llama.cpp's CLI: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, no penalties,
 * penalty window 64. */
rf_sample_params rf_sample_params_default(void);

/* Samples on the host (the CPU backend's `sample` op). logprob may be NULL. */
int32_t rf_sample_host(const float *logits, int n_vocab, const rf_sample_params *p,
                       const int32_t *history, int n_history, float u, float *logprob);

/* splitmix64-seeded xorshift generator. */
typedef struct {
    uint64_t s;
} rf_rng;
void rf_rng_seed(rf_rng *r, uint64_t seed);
uint64_t rf_rng_next(rf_rng *r);
/* Uniform in [0, 1) with 24 bits of randomness. */
float rf_rng_uniform(rf_rng *r);

#endif
