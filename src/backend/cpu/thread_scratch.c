#include "thread_scratch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/util.h"

typedef struct {
    void *p[RF_SCRATCH_SLOTS];
    size_t n[RF_SCRATCH_SLOTS];
} slots;

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void release(void *v) {
    slots *s = v;
    for (int i = 0; i < RF_SCRATCH_SLOTS; i++) free(s->p[i]);
    free(s);
}

static void make_key(void) {
    if (pthread_key_create(&key, release)) abort();
}

void *rf_thread_scratch(int slot, size_t n) {
    pthread_once(&key_once, make_key);
    slots *s = pthread_getspecific(key);
    if (!s) {
        s = rf_xcalloc(1, sizeof *s);
        pthread_setspecific(key, s);
    }
    if (s->n[slot] < n) {
        free(s->p[slot]);
        size_t bytes = (n + 63) & ~(size_t)63;
        s->p[slot] = aligned_alloc(64, bytes);
        if (!s->p[slot]) { /* host out-of-memory is fatal, as in rf_xmalloc */
            fprintf(stderr, "rocmforge: out of host memory (allocating %zu bytes)\n", bytes);
            abort();
        }
        s->n[slot] = n;
    }
    return s->p[slot];
}
