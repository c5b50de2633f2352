/* threadpool.h: a fixed set of persistent worker threads for data-parallel kernels.
 *
 * Contract: rf_threadpool_run(tp, fn, ctx) calls fn(ctx, ith, nth) exactly once for every
 * ith in [0, nth) (nth = rf_threadpool_size) and returns when all calls have returned; the
 * calling thread runs ith 0 itself, then claims any part no worker has claimed yet, so a worker
 * that the OS has not scheduled costs no waiting (which thread runs a given ith > 0 is not
 * fixed). Workers are created once by rf_threadpool_new; between runs
 * they spin briefly (a decode step issues hundreds of small runs back to back, and waking a
 * sleeping thread costs tens of microseconds) and then sleep on a condition variable.
 * One run at a time: rf_threadpool_run must not be called concurrently on the same pool, nor
 * from inside fn. A pool of size 1 runs fn inline.
 */
#ifndef RF_THREADPOOL_H
#define RF_THREADPOOL_H

typedef struct rf_threadpool rf_threadpool;

rf_threadpool *rf_threadpool_new(int n_threads); /* n_threads >= 1 (smaller values mean 1) */
void rf_threadpool_free(rf_threadpool *tp);
int rf_threadpool_size(const rf_threadpool *tp);
void rf_threadpool_run(rf_threadpool *tp, void (*fn)(void *ctx, int ith, int nth), void *ctx);
/* Number of physical cores available to this process (SMT siblings counted once); >= 1. */
int rf_physical_cores(void);

#endif
