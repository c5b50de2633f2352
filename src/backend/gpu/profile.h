/* profile.h: per-op GPU time, for the performance notes' breakdown of a decode step.
 * Enabled by ROCMFORGE_PROFILE=1 (and only outside graph capture: run with
 * ROCMFORGE_NO_GRAPHS=1 to see every op). An event is recorded after each op; the time between
 * consecutive events is charged to the op that ended it, summed by op name, and printed to
 * stderr when the backend is destroyed. Costs nothing when disabled. */
#ifndef RF_GPU_PROFILE_H
#define RF_GPU_PROFILE_H

#include "gpu_port.h"

typedef struct rf_gpu_profile rf_gpu_profile;

/* NULL unless ROCMFORGE_PROFILE is set to something other than 0. */
rf_gpu_profile *rf_gpu_profile_new(gpuStream_t stream);
/* Marks the end of an op named `name` (copied). */
void rf_gpu_profile_mark(rf_gpu_profile *p, const char *name);
/* Accounts every pending mark (synchronizes the stream). */
void rf_gpu_profile_flush(rf_gpu_profile *p);
/* Prints the table and frees. */
void rf_gpu_profile_free(rf_gpu_profile *p);

#endif
