#include "golden.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static int int_list(const char *json, const char *key, int32_t *out, int cap) {
    const char *p = strstr(json, key);
    if (!p || !(p = strchr(p, '['))) return -1;
    int n = 0;
    p++;
    while (*p && *p != ']' && n < cap) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        out[n++] = (int32_t)v;
        p = end;
    }
    return n;
}

int golden_load(const char *stem, golden *g) {
    char rel[256];
    memset(g, 0, sizeof *g);
    snprintf(rel, sizeof rel, "golden/%s.json", stem);
    char *json = test_read_file(test_shared(rel), NULL);
    if (!json) return -1;
    const char *p = strstr(json, "\"prompt\"");
    if (p && (p = strchr(p + 8, '"'))) {
        p++;
        size_t n = 0;
        while (*p && *p != '"' && n + 1 < sizeof g->prompt) g->prompt[n++] = *p++;
    }
    g->n_prompt = int_list(json, "\"prompt_tokens\"", g->prompt_tokens, 256);
    g->n_greedy = int_list(json, "\"greedy_tokens\"", g->greedy, 64);
    int32_t nv[1];
    const char *q = strstr(json, "\"n_vocab\"");
    g->n_vocab = q ? atoi(strchr(q, ':') + 1) : 0;
    (void)nv;
    free(json);
    if (g->n_prompt <= 0 || g->n_vocab <= 0) return -1;
    snprintf(rel, sizeof rel, "golden/%s.logits.f32", stem);
    size_t len;
    g->logits = (float *)test_read_file(test_shared(rel), &len);
    if (!g->logits || len != (size_t)g->n_prompt * g->n_vocab * sizeof(float)) {
        free(g->logits);
        g->logits = NULL;
        return -1;
    }
    return 0;
}

void golden_free(golden *g) {
    free(g->logits);
    g->logits = NULL;
}
