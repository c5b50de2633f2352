/* matmul_fallback.cu: TEMPORARY simple matmul, used by the GPU backend only while the real one
 * (matmul.cu, matmul_gpu.h) is not in the tree (gpu.mk defines RF_HAVE_GPU_MATMUL when it is).
 * Also handy as a slow, obviously-correct reference in tests. */
#include "dequant.cuh"
#include "kernels.h"

/* matmul_fallback_kernel: y[t][o] = sum_i W[o][i] * x[t][i] (+ bias[o]).
 * One warp per output (o, t): grid (ceil(n_out / warps per block), n). W rows of `type`
 * (row_bytes each, n_in a multiple of the block size); x [n][n_in], y [n][n_out], bias [n_out]
 * f32. f32 accumulation, lane-strided then a shuffle reduction (CPU: index order). NaN/inf
 * propagate. */
static __global__ void matmul_fallback_kernel(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n_out,
                                              int64_t n_in, const float *x, const float *bias, float *y) {
    const int ws = warpSize, lane = threadIdx.x % ws;
    const int64_t o = (int64_t)blockIdx.x * (blockDim.x / ws) + threadIdx.x / ws;
    const int t = blockIdx.y;
    if (o >= n_out) return; /* whole warps leave together: o is uniform across a warp */
    const uint8_t *row = w + (size_t)o * row_bytes;
    const float *xt = x + (int64_t)t * n_in;
    float s = 0.0f;
    for (int64_t i = lane; i < n_in; i += ws) s += rf_dq_elem(type, row, i) * xt[i];
    s = rf_warp_sum(s);
    if (lane == 0) y[(int64_t)t * n_out + o] = bias ? s + bias[o] : s;
}

extern "C" int rf_gpu_matmul_fallback(void *stream, uint32_t type, const void *w, size_t row_bytes, int64_t n_out,
                                      int64_t n_in, const float *x, int n, const float *bias, float *y) {
    if (n <= 0 || n_out <= 0) return 0;
    const int per_block = 4; /* 256 threads hold at least 4 warps for any warp size <= 64; the
                                extra warps of a 32-wide target find o >= n_out and leave */
    dim3 grid((unsigned)((n_out + per_block - 1) / per_block), (unsigned)n);
    matmul_fallback_kernel<<<grid, 256, 0, (gpuStream_t)stream>>>(type, (const uint8_t *)w, row_bytes, n_out, n_in, x,
                                                                   bias, y);
    return (int)gpuGetLastError();
}
