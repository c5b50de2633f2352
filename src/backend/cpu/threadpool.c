#include "backend/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"

/* Spin iterations (each one pause instruction) before a worker sleeps: roughly 0.1-1 ms, enough
 * to bridge the gap between consecutive kernels of one forward step. */
#define SPIN_ITERS (1 << 16)

struct rf_threadpool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void (*fn)(void *, int, int);
    void *ctx;
    _Atomic unsigned gen;   /* bumped once per run; workers wait for it to change */
    _Atomic int next;       /* next unclaimed ith of the current run (1 .. n-1) */
    _Atomic int remaining;  /* claimed-or-not parts 1 .. n-1 not finished yet */
    _Atomic int stop;
    _Atomic int sleeping;   /* workers inside (or entering) the condition-variable wait */
};

typedef struct {
    rf_threadpool *tp;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claims and runs parts 1 .. n-1 of the current run until none is left. Any thread may run any
 * part: a worker that the OS has not scheduled yet (a busy machine, more threads than free
 * cores) then costs nothing, because the caller runs its part instead of spinning for it. fn and
 * ctx are written before `next` is reset (release), and a claim reads `next` with acquire, so a
 * claimed part always sees its own run's fn and ctx; a late worker whose run is over finds
 * next >= n and claims nothing. */
static void run_parts(rf_threadpool *tp) {
    for (;;) {
        const int i = atomic_fetch_add_explicit(&tp->next, 1, memory_order_acq_rel);
        if (i >= tp->n) return;
        tp->fn(tp->ctx, i, tp->n);
        atomic_fetch_sub_explicit(&tp->remaining, 1, memory_order_acq_rel);
    }
}

static void *worker_main(void *arg_) {
    worker_arg *arg = arg_;
    rf_threadpool *tp = arg->tp;
    free(arg);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&tp->stop, memory_order_acquire)) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                /* Oversubscribed (more threads than cores): let the others run. */
                if ((spins & 255) == 0) sched_yield();
                continue;
            }
            /* The run side bumps gen and then takes the mutex to broadcast, so checking gen
             * under the mutex cannot miss a wake-up. */
            atomic_fetch_add_explicit(&tp->sleeping, 1, memory_order_seq_cst);
            pthread_mutex_lock(&tp->mu);
            while (atomic_load_explicit(&tp->gen, memory_order_seq_cst) == seen &&
                   !atomic_load_explicit(&tp->stop, memory_order_acquire))
                pthread_cond_wait(&tp->cv, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
            atomic_fetch_sub_explicit(&tp->sleeping, 1, memory_order_relaxed);
            spins = 0;
        }
        if (atomic_load_explicit(&tp->stop, memory_order_acquire)) return NULL;
        seen = g;
        run_parts(tp);
    }
}

rf_threadpool *rf_threadpool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    rf_threadpool *tp = rf_xcalloc(1, sizeof *tp);
    tp->n = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    tp->threads = rf_xcalloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = rf_xmalloc(sizeof *a);
        a->tp = tp;
        a->ith = i;
        if (pthread_create(&tp->threads[i], NULL, worker_main, a) != 0) {
            /* Could not start more threads: run with the ones we have. */
            free(a);
            tp->n = i;
            break;
        }
    }
    return tp;
}

void rf_threadpool_free(rf_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, 1);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    free(tp->threads);
    free(tp);
}

int rf_threadpool_size(const rf_threadpool *tp) { return tp ? tp->n : 1; }

void rf_threadpool_run(rf_threadpool *tp, void (*fn)(void *ctx, int ith, int nth), void *ctx) {
    if (!tp || tp->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store_explicit(&tp->remaining, tp->n - 1, memory_order_relaxed);
    atomic_store_explicit(&tp->next, 1, memory_order_release);
    /* Wake sleepers only when some worker may be asleep (spinning ones see gen directly). The
     * bump of gen and the read of `sleeping` are seq_cst, as are the worker's increment of
     * `sleeping` and its read of gen before waiting: either the worker sees the new gen, or this
     * thread sees it sleeping and broadcasts under the mutex. */
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&tp->sleeping, memory_order_seq_cst) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
    fn(ctx, 0, tp->n);
    run_parts(tp);
    int spins = 0;
    while (atomic_load_explicit(&tp->remaining, memory_order_acquire) > 0) {
        cpu_relax();
        if ((++spins & 255) == 0) sched_yield();
    }
}

/* Counts distinct (physical package, core id) pairs among the CPUs this process may run on;
 * falls back to the online CPU count when sysfs is unavailable. */
int rf_physical_cores(void) {
    cpu_set_t set;
    int n_allowed = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n_allowed = CPU_COUNT(&set);
    else {
        CPU_ZERO(&set);
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        for (long i = 0; i < n && i < CPU_SETSIZE; i++) CPU_SET((int)i, &set);
        n_allowed = (int)(n > 0 ? n : 1);
    }
    long keys[CPU_SETSIZE > 1024 ? 1024 : CPU_SETSIZE];
    int n_keys = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && n_keys < (int)RF_ARRAY_LEN(keys); cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        char path[128];
        long pkg = 0, core = cpu;
        FILE *f;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%ld", &pkg) != 1) pkg = 0;
            fclose(f);
        }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%ld", &core) != 1) core = cpu;
            fclose(f);
        } else {
            return n_allowed > 0 ? n_allowed : 1;
        }
        const long key = pkg * 1000000 + core;
        int dup = 0;
        for (int k = 0; k < n_keys; k++) dup |= keys[k] == key;
        if (!dup) keys[n_keys++] = key;
    }
    return n_keys > 0 ? n_keys : 1;
}
