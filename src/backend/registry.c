/* Backend selection by name. The GPU backend is compiled in only when a GPU toolchain was found
 * (RF_HAVE_CUDA / RF_HAVE_HIP); asking for it otherwise is an error, never a CPU run. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "backend.h"
#include "core/util.h"
#include "cpu/cpu_backend.h"

#if defined(RF_HAVE_CUDA) || defined(RF_HAVE_HIP)
#include "gpu/gpu_backend.h"
int rf_gpu_device_count(void);
#endif

rf_backend *rf_backend_create(const char *kind, int n_threads) {
    if (!strcmp(kind, "cpu")) return rf_cpu_backend_create(n_threads, RF_CPU_FAST);
    if (!strcmp(kind, "cpu-ref")) return rf_cpu_backend_create(n_threads, RF_CPU_REF);
    if (!strcmp(kind, "cpu-ggml")) return rf_cpu_backend_create(n_threads, RF_CPU_GGML);
    if (!strncmp(kind, "gpu", 3) && (kind[3] == 0 || kind[3] == ':')) {
        int dev = kind[3] == ':' ? atoi(kind + 4) : 0;
#if defined(RF_HAVE_CUDA) || defined(RF_HAVE_HIP)
        return rf_gpu_backend_create(dev);
#else
        (void)dev;
        rf_set_error("a GPU was requested but this build has no GPU backend (built: %s)", rf_backends_built());
        return NULL;
#endif
    }
    rf_set_error("unknown device '%s' (expected cpu, cpu-ref, cpu-ggml, gpu or gpu:N)", kind);
    return NULL;
}

void rf_backend_destroy(rf_backend *be) {
    if (be) be->ops->destroy(be);
}

int rf_gpu_count(void) {
#if defined(RF_HAVE_CUDA) || defined(RF_HAVE_HIP)
    return rf_gpu_device_count();
#else
    return 0;
#endif
}

const char *rf_backends_built(void) {
#if defined(RF_HAVE_CUDA) || defined(RF_HAVE_HIP)
    return rf_gpu_backends_built();
#else
    return "cpu";
#endif
}
