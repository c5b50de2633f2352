/* cpu_backend.h: constructor of the CPU backend (backend.h). */
#ifndef RF_CPU_BACKEND_H
#define RF_CPU_BACKEND_H

#include <stdbool.h>

#include "backend/backend.h"

/* n_threads <= 0: one per physical core. reference: use the exact reference matmul. */
rf_backend *rf_cpu_backend_create(int n_threads, bool reference);
/* e.g. "avx512, 2 threads". */
const char *rf_cpu_backend_describe(rf_backend *be);

#endif
