/* How many GPUs the runtime can see (0 when there is no driver or no device): lets the CLI pick
 * the GPU by default only when one is present. */
#if defined(RF_HAVE_CUDA) || defined(RF_HAVE_HIP)
#include "gpu_port.h"

int rf_gpu_device_count(void) {
    int n = 0;
    if (gpuGetDeviceCount(&n) != gpuSuccess) {
        gpuGetLastError();
        return 0;
    }
    return n;
}
#else
typedef int rf_gpu_device_count_unused; /* ISO C forbids an empty translation unit */
#endif
