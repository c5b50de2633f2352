#if defined(RF_HAVE_CUDA) || defined(RF_HAVE_HIP)
#include "profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

enum { PENDING = 1024, MAX_NAMES = 128 };

struct rf_gpu_profile {
    gpuStream_t stream;
    gpuEvent_t base; /* the last accounted event: time before the first pending mark starts here */
    gpuEvent_t ev[PENDING];
    int name_of[PENDING];
    int n_pending;
    bool have_base;
    char names[MAX_NAMES][64];
    double ms[MAX_NAMES];
    long count[MAX_NAMES];
    int n_names;
};

rf_gpu_profile *rf_gpu_profile_new(gpuStream_t stream) {
    const char *e = getenv("ROCMFORGE_PROFILE");
    if (!e || !*e || !strcmp(e, "0")) return NULL;
    rf_gpu_profile *p = rf_xcalloc(1, sizeof *p);
    p->stream = stream;
    gpuEventCreate(&p->base);
    for (int i = 0; i < PENDING; i++) gpuEventCreate(&p->ev[i]);
    return p;
}

static int intern(rf_gpu_profile *p, const char *name) {
    for (int i = 0; i < p->n_names; i++)
        if (!strcmp(p->names[i], name)) return i;
    if (p->n_names == MAX_NAMES) return MAX_NAMES - 1; /* the last slot collects the overflow */
    snprintf(p->names[p->n_names], sizeof p->names[0], "%s", name);
    return p->n_names++;
}

void rf_gpu_profile_flush(rf_gpu_profile *p) {
    if (!p || !p->n_pending) return;
    gpuStreamSynchronize(p->stream);
    for (int i = 0; i < p->n_pending; i++) {
        float ms = 0;
        if (i > 0) gpuEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]);
        else if (p->have_base) gpuEventElapsedTime(&ms, p->base, p->ev[0]);
        p->ms[p->name_of[i]] += ms;
        p->count[p->name_of[i]]++;
    }
    /* The last event becomes the base: swap it with the base slot. */
    gpuEvent_t t = p->base;
    p->base = p->ev[p->n_pending - 1];
    p->ev[p->n_pending - 1] = t;
    p->have_base = true;
    p->n_pending = 0;
}

void rf_gpu_profile_mark(rf_gpu_profile *p, const char *name) {
    if (!p) return;
    if (p->n_pending == PENDING) rf_gpu_profile_flush(p);
    p->name_of[p->n_pending] = intern(p, name);
    gpuEventRecord(p->ev[p->n_pending++], p->stream);
}

void rf_gpu_profile_free(rf_gpu_profile *p) {
    if (!p) return;
    rf_gpu_profile_flush(p);
    double total = 0;
    for (int i = 0; i < p->n_names; i++) total += p->ms[i];
    fprintf(stderr, "GPU time by op (%.3f ms in all; gaps between ops are charged to the op after them)\n", total);
    fprintf(stderr, "  %-44s %10s %8s %10s %6s\n", "op", "total ms", "calls", "us/call", "share");
    bool *done = rf_xcalloc((size_t)p->n_names + 1, 1);
    for (int k = 0; k < p->n_names; k++) {
        int best = -1;
        for (int i = 0; i < p->n_names; i++)
            if (!done[i] && (best < 0 || p->ms[i] > p->ms[best])) best = i;
        done[best] = true;
        fprintf(stderr, "  %-44s %10.3f %8ld %10.2f %5.1f%%\n", p->names[best], p->ms[best], p->count[best],
                1000.0 * p->ms[best] / (double)(p->count[best] ? p->count[best] : 1), 100.0 * p->ms[best] / total);
    }
    free(done);
    gpuEventDestroy(p->base);
    for (int i = 0; i < PENDING; i++) gpuEventDestroy(p->ev[i]);
    free(p);
}
#else
typedef int rf_gpu_profile_unused; /* ISO C forbids an empty translation unit */
#endif
