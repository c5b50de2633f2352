/* matmul_weights.c: where the CPU backend keeps its weights (see matmul.h, rf_cpu_weights_*).
 *
 * Why copy instead of reading the file mapping in place: decode streams every weight once per
 * token, at the per-core memory rate. On this machine (Zen 4, 2 vCPUs) a plain sequential read
 * measured 22 GB/s per thread from the file mapping (4 KiB page-cache pages) against 30 GB/s
 * from anonymous memory backed by 2 MiB transparent huge pages (docs/PERF-CPU.md, section 8):
 * with 4 KiB pages every 4 KiB of a stream is a new TLB entry and the hardware prefetcher stops
 * at each page boundary.
 *
 * Layout: slabs of anonymous memory, 2 MiB aligned, advised MADV_HUGEPAGE; tensors are placed
 * one after the other at 64-byte alignment (so small tensors such as norm weights do not each
 * occupy a huge page). A tensor larger than the default slab gets a slab of its own. Each slab
 * counts its live tensors and is unmapped when the last one is freed. Huge pages are a request
 * to the kernel, not a guarantee (THP "never" leaves 4 KiB pages); results do not depend on it. */
#include "backend/cpu/matmul.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/util.h"

#define HUGE_SZ ((size_t)2 << 20)
#define SLAB_SZ ((size_t)64 << 20)

typedef struct slab {
    struct slab *next;
    uint8_t *base;  /* 2 MiB aligned */
    size_t size;    /* multiple of 2 MiB */
    size_t used;
    long live;      /* tensors placed here and not freed */
    void *map;      /* what mmap returned (base is inside it) */
    size_t map_len;
} slab;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static slab *slabs;

static slab *slab_new(size_t size) {
    size = (size + HUGE_SZ - 1) & ~(HUGE_SZ - 1);
    const size_t len = size + HUGE_SZ; /* room to align the start to 2 MiB */
    void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        rf_set_error("out of host memory mapping %zu bytes for weights: %s", len, strerror(errno));
        return NULL;
    }
    slab *s = calloc(1, sizeof *s);
    if (!s) {
        munmap(map, len);
        rf_set_error("out of host memory");
        return NULL;
    }
    s->base = (uint8_t *)(((uintptr_t)map + HUGE_SZ - 1) & ~(uintptr_t)(HUGE_SZ - 1));
    s->size = size;
    s->map = map;
    s->map_len = len;
    /* A refusal (THP disabled) only costs speed: the memory works with 4 KiB pages. */
    (void)madvise(s->base, size, MADV_HUGEPAGE);
    s->next = slabs;
    slabs = s;
    return s;
}

void *rf_cpu_weights_copy(const void *src, size_t bytes) {
    /* at least one line, so every copy (even of 0 bytes) lies inside its slab for the lookup at free */
    const size_t need = ((bytes ? bytes : 1) + 63) & ~(size_t)63;
    pthread_mutex_lock(&mu);
    slab *s = slabs;
    if (!s || s->size - s->used < need) s = slab_new(need > SLAB_SZ ? need : SLAB_SZ);
    void *p = NULL;
    if (s) {
        p = s->base + s->used;
        s->used += need;
        s->live++;
    }
    pthread_mutex_unlock(&mu);
    if (p) memcpy(p, src, bytes);
    return p;
}

void rf_cpu_weights_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&mu);
    for (slab **pp = &slabs; *pp; pp = &(*pp)->next) {
        slab *s = *pp;
        if ((uint8_t *)p < s->base || (uint8_t *)p >= s->base + s->size) continue;
        if (--s->live == 0) {
            *pp = s->next;
            munmap(s->map, s->map_len);
            free(s);
        }
        pthread_mutex_unlock(&mu);
        return;
    }
    pthread_mutex_unlock(&mu);
    fprintf(stderr, "rocmforge: rf_cpu_weights_free: %p is not a CPU weight\n", p);
    abort();
}
