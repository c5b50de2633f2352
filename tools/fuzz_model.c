/* fuzz_model: a libFuzzer target for everything a model file reaches before and during the first
 * tokens: the GGUF reader, the tokenizer on its own (vocab-only files reach it so too),
 * hyperparameters, tensor validation, and (for files that load) a context of 16 positions, a
 * 3-token prompt and one decode step on the CPU reference backend. A bad file must end in an error, never a crash, a sanitizer report or a hang.
 * Build and run: scripts/fuzz.sh [seconds] (clang's libFuzzer with ASan + UBSan; seeds: the
 * shared models and vocab files). Not part of `make test`. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/gguf.h"
#include "rocmforge.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char text[] = "Once upon a <s> time, \xe2\x80\x94 3.14 caf\xc3\xa9\n\n  x";

static void tokenizer_alone(const uint8_t *data, size_t size) {
    rf_gguf *g = rf_gguf_open_memory(data, size);
    rf_tokenizer *t = g ? rf_tokenizer_load(g) : NULL;
    if (t) {
        int32_t *ids = NULL;
        char piece[64];
        for (int special = 0; special < 2; special++) {
            const int n = rf_tokenizer_encode(t, text, sizeof text - 1, special, special, &ids);
            for (int i = 0; i < n; i++) rf_tokenizer_piece(t, ids[i], special, piece, sizeof piece);
            free(ids);
            ids = NULL;
        }
        rf_tokenizer_free(t);
    }
    rf_gguf_close(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tokenizer_alone(data, size);
    static int fd = -1;
    if (fd < 0) fd = memfd_create("fuzz_model", 0);
    if (fd < 0 || ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    rf_model_params mp = rf_model_default_params();
    mp.device = "cpu-ref";
    mp.n_threads = 1;
    rf_model *m = rf_model_load(path, &mp);
    if (!m) return 0;
    int32_t *ids = NULL;
    const int n = rf_tokenize(m, text, sizeof text - 1, true, true, &ids);
    char piece[64];
    for (int i = 0; i < n; i++) rf_token_to_piece(m, ids[i], piece, sizeof piece);
    rf_context_params cp = rf_context_default_params();
    cp.n_ctx = 16;
    rf_context *c = rf_context_new(m, &cp);
    if (c && n > 0) {
        const int seq = rf_seq_new(c);
        int32_t tok[3], pos[3], sid[3];
        int8_t want[3];
        const int nt = n < 3 ? n : 3;
        for (int i = 0; i < nt; i++) tok[i] = ids[i], pos[i] = i, sid[i] = seq, want[i] = i == nt - 1;
        rf_batch b = {nt, tok, pos, sid, want};
        if (seq >= 0 && rf_decode(c, &b) == 0 && rf_get_logits(c, nt - 1)) {
            tok[0] = 0, pos[0] = nt, want[0] = 1;
            rf_batch b1 = {1, tok, pos, sid, want};
            if (rf_decode(c, &b1) == 0) rf_get_logits(c, 0);
        }
    }
    rf_context_free(c);
    free(ids);
    rf_model_free(m);
    return 0;
}
