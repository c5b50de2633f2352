/* thread_scratch.h: per-thread scratch buffers for the CPU kernels. A decode step calls the
 * matmul hundreds of times with the same shapes, so each thread keeps its buffers (grown on
 * demand, 64-byte aligned) for its whole life; they are freed when the thread exits (a pool's
 * workers exit when the pool is freed). */
#ifndef RF_THREAD_SCRATCH_H
#define RF_THREAD_SCRATCH_H

#include <stddef.h>

enum { RF_SCRATCH_SLOTS = 4 };

/* Buffer `slot` (< RF_SCRATCH_SLOTS) of the calling thread, at least n bytes; its contents are
 * not kept when it grows. Aborts on out-of-memory. */
void *rf_thread_scratch(int slot, size_t n);

#endif
