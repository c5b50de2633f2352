/* gpu_backend.h: the GPU backend (CUDA or HIP, one source), implementing backend.h.
 * Compiled in when the build found a GPU toolchain (RF_HAVE_CUDA / RF_HAVE_HIP). */
#ifndef RF_GPU_BACKEND_H
#define RF_GPU_BACKEND_H

#include "backend/backend.h"

/* Device `dev` (0-based). NULL + rf_set_error when there is no driver or device ("no CUDA
 * device found: ..."), the index is out of range, the device's architecture is not in this
 * build, or its memory cannot be had. Never falls back to the CPU. */
rf_backend *rf_gpu_backend_create(int dev);
/* e.g. "cpu cuda(sm_80,sm_90)". */
const char *rf_gpu_backends_built(void);

/* ---- for tests -------------------------------------------------------------------------- */
/* The backend's stream (cudaStream_t / hipStream_t), to call kernels.h launchers directly. */
void *rf_gpu_backend_stream(rf_backend *be);
/* Attention kernel choice: mode 0 = automatic, 1 = split-K decode kernel with n_split splits
 * (n_split <= 0: automatic) and gb heads per block (1, 2, 4, 8; <= 0: automatic), 2 = tiled
 * prefill kernel. */
void rf_gpu_backend_set_attention(rf_backend *be, int mode, int n_split, int gb);
/* Records a launcher's return code as the backend's error (reported by the next sync). */
void rf_gpu_backend_check(rf_backend *be, const char *what, int rc);

#endif
