/* golden.h: reading ../shared/golden/<model>.json and .logits.f32 (what llama.cpp computed). */
#ifndef RF_TEST_GOLDEN_H
#define RF_TEST_GOLDEN_H

#include <stdint.h>

typedef struct {
    char prompt[512];
    int32_t prompt_tokens[256];
    int n_prompt;
    int32_t greedy[64];
    int n_greedy;
    int n_vocab;
    float *logits; /* [n_prompt][n_vocab] */
} golden;

/* Returns 0, or -1 when the files are missing or malformed. */
int golden_load(const char *model_stem, golden *g);
void golden_free(golden *g);

#endif
