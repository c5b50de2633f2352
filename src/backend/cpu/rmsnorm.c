#include <math.h>

#include "ops.h"

void cpu_rmsnorm(float *x, const float *residual, const float *w, int n_rows, int dim, float eps,
                 float *out) {
    for (int r = 0; r < n_rows; r++) {
        float *xr = x + (int64_t)r * dim;
        float *o = out + (int64_t)r * dim;
        if (residual) {
            const float *rr = residual + (int64_t)r * dim;
            for (int i = 0; i < dim; i++) xr[i] += rr[i];
        }
        float ss = 0.0f;
        for (int i = 0; i < dim; i++) ss += xr[i] * xr[i];
        float inv = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int i = 0; i < dim; i++) o[i] = xr[i] * inv * w[i];
    }
}
