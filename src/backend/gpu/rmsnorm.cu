/* rmsnorm.cu: RMS normalisation with the residual add fused in (twin of cpu_rmsnorm). */
#include "gpu_port.h"
#include "kernels.h"

/* rmsnorm_kernel: one block per row of `dim` f32 (row-major [n_rows][dim], rows contiguous).
 *   if residual: x[r][i] += residual[r][i] (x is updated in place: it is the residual stream);
 *   out[r][i] = x[r][i] * (1 / sqrtf(mean(x[r]^2) + eps)) * w[i].
 * out may alias x (each element is read and written by the same thread). The sum of squares is
 * a parallel f32 reduction (the CPU sums in index order: results differ by rounding, ~1e-6
 * relative). NaN/inf in x make the whole row's output NaN/inf as on the CPU. No alignment
 * requirement; blockDim.x a multiple of warpSize. */
static __global__ void rmsnorm_kernel(float *x, const float *residual, const float *w, int dim, float eps,
                                      float *out) {
    __shared__ float sh[RF_MAX_WARPS];
    const int64_t base = (int64_t)blockIdx.x * dim;
    float *xr = x + base;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xr[i];
        if (residual) {
            v += residual[base + i];
            xr[i] = v;
        }
        ss += v * v;
    }
    ss = rf_block_sum(ss, sh);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) out[base + i] = xr[i] * inv * w[i];
}

extern "C" int rf_gpu_rmsnorm(void *stream, float *x, const float *residual, const float *w, int n_rows, int dim,
                              float eps, float *out) {
    if (n_rows <= 0 || dim <= 0) return 0;
    const int bs = dim >= 1024 ? 512 : dim >= 256 ? 256 : 128;
    rmsnorm_kernel<<<n_rows, bs, 0, (gpuStream_t)stream>>>(x, residual, w, dim, eps, out);
    return (int)gpuGetLastError();
}
