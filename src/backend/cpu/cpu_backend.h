/* cpu_backend.h: constructor of the CPU backend (backend.h). */
#ifndef RF_CPU_BACKEND_H
#define RF_CPU_BACKEND_H

#include <stdbool.h>

#include "backend/backend.h"

typedef enum {
    RF_CPU_FAST = 0, /* SIMD/threaded matmul on the stored blocks */
    RF_CPU_REF = 1,  /* exact f32 reference ops everywhere: the oracle */
    RF_CPU_GGML = 2, /* reference ops plus llama.cpp's CPU roundings, to compare with its outputs */
} rf_cpu_mode;

/* n_threads <= 0: one per physical core. */
rf_backend *rf_cpu_backend_create(int n_threads, rf_cpu_mode mode);
/* e.g. "avx512, 2 threads". */
const char *rf_cpu_backend_describe(rf_backend *be);

#endif
