/* elementwise.cu: the small ops (twins of backend/cpu/elementwise.c) and the cache block copy.
 * All tensors f32, row-major, rows contiguous, no alignment requirement. NaN/inf propagate as
 * IEEE arithmetic gives, except where a kernel's contract says otherwise. */
#include "gpu_port.h"
#include "kernels.h"

static unsigned grid_for(int64_t n, int bs) {
    int64_t g = (n + bs - 1) / bs;
    return (unsigned)(g < 65535 * 16 ? g : 65535 * 16); /* kernels loop (grid-stride) beyond this */
}

/* swiglu_kernel: out[i] = gate[i] / (1 + expf(-gate[i])) * up[i], i < n. out may alias gate or up.
 * expf differs from the host's by at most a couple of ulp. gate = -inf gives -0 * up (NaN when
 * up is inf), gate = +inf gives inf * up, as on the CPU. */
static __global__ void swiglu_kernel(const float *gate, const float *up, int64_t n, float *out) {
    rf_grid_dep_launch(); /* the down projection's matvec may start loading its weights */
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* scale_kernel: x[i] *= s, i < n. Exact (one rounding, as on the CPU). */
static __global__ void scale_kernel(float *x, int64_t n, float s) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = RF_MUL(x[i], s);
}

/* causal_mask_kernel: x is [n_rows][n_cols] scores whose last row is query position n_cols-1;
 * entry (r, c) with c > r + (n_cols - n_rows) becomes -inf, others are untouched. One block row
 * per grid row y; threads over columns. */
static __global__ void causal_mask_kernel(float *x, int n_rows, int n_cols) {
    const int r = blockIdx.y;
    const int off = n_cols - n_rows;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < n_cols; c += gridDim.x * blockDim.x)
        if (c > r + off) x[(int64_t)r * n_cols + c] = -INFINITY;
}

/* softmax_rows_kernel: one block per row of n_cols: x = exp(x - max) / sum. A row whose max is
 * -inf (all -inf, NaN ignored by the max) becomes all zeros instead of NaN; otherwise a NaN
 * in a row makes the row NaN (both as on the CPU). The sum is
 * a parallel f32 reduction (CPU: index order), so results differ by rounding only. */
static __global__ void softmax_rows_kernel(float *x, int n_cols) {
    __shared__ float sh[RF_MAX_WARPS];
    float *row = x + (int64_t)blockIdx.x * n_cols;
    float m = -INFINITY; /* NaN never wins a comparison, exactly as in the CPU's max loop */
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) {
        const float v = row[c];
        m = v > m ? v : m;
    }
    m = rf_block_max(m, sh);
    if (m == -INFINITY) {
        for (int c = threadIdx.x; c < n_cols; c += blockDim.x) row[c] = 0.0f;
        return;
    }
    float s = 0.0f;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) {
        const float e = expf(row[c] - m);
        row[c] = e;
        s += e;
    }
    s = rf_block_sum(s, sh);
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) row[c] = row[c] / s;
}

/* get_rows_kernel: out[r][:] = x[rows[r]][:] (rows in device memory, each a valid row index).
 * Grid: (column blocks, n_rows). Exact copy. */
static __global__ void get_rows_kernel(const float *x, const int32_t *rows, int dim, float *out) {
    rf_grid_dep_launch(); /* the output projection's matvec may start loading its weights */
    const int r = blockIdx.y;
    const int64_t src = (int64_t)rows[r] * dim;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < dim; i += gridDim.x * blockDim.x)
        out[(int64_t)r * dim + i] = x[src + i];
}

/* copy_block_kernel: cache[dst*block_floats + i] = cache[src*block_floats + i], i < block_floats
 * (one KV block of one layer; src != dst, so the ranges do not overlap). Exact copy. */
static __global__ void copy_block_kernel(float *cache, size_t block_floats, int src, int dst) {
    const float *s = cache + (size_t)src * block_floats;
    float *d = cache + (size_t)dst * block_floats;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < block_floats; i += (size_t)gridDim.x * blockDim.x)
        d[i] = s[i];
}

extern "C" int rf_gpu_swiglu(void *stream, const float *gate, const float *up, int64_t n, float *out) {
    if (n <= 0) return 0;
    swiglu_kernel<<<grid_for(n, 256), 256, 0, (gpuStream_t)stream>>>(gate, up, n, out);
    return (int)gpuGetLastError();
}

extern "C" int rf_gpu_scale(void *stream, float *x, int64_t n, float s) {
    if (n <= 0) return 0;
    scale_kernel<<<grid_for(n, 256), 256, 0, (gpuStream_t)stream>>>(x, n, s);
    return (int)gpuGetLastError();
}

extern "C" int rf_gpu_causal_mask(void *stream, float *x, int n_rows, int n_cols) {
    if (n_rows <= 0 || n_cols <= 0) return 0;
    dim3 grid(grid_for(n_cols, 256) < 64 ? grid_for(n_cols, 256) : 64, (unsigned)n_rows);
    causal_mask_kernel<<<grid, 256, 0, (gpuStream_t)stream>>>(x, n_rows, n_cols);
    return (int)gpuGetLastError();
}

extern "C" int rf_gpu_softmax_rows(void *stream, float *x, int n_rows, int n_cols) {
    if (n_rows <= 0 || n_cols <= 0) return 0;
    softmax_rows_kernel<<<n_rows, 256, 0, (gpuStream_t)stream>>>(x, n_cols);
    return (int)gpuGetLastError();
}

extern "C" int rf_gpu_get_rows(void *stream, const float *x, const int32_t *rows, int n_rows, int dim, float *out) {
    if (n_rows <= 0 || dim <= 0) return 0;
    dim3 grid(grid_for(dim, 256) < 64 ? grid_for(dim, 256) : 64, (unsigned)n_rows);
    get_rows_kernel<<<grid, 256, 0, (gpuStream_t)stream>>>(x, rows, dim, out);
    return (int)gpuGetLastError();
}

extern "C" int rf_gpu_copy_block(void *stream, float *cache, size_t block_floats, int src, int dst) {
    if (!block_floats || src == dst) return 0;
    copy_block_kernel<<<grid_for((int64_t)block_floats, 256), 256, 0, (gpuStream_t)stream>>>(cache, block_floats, src, dst);
    return (int)gpuGetLastError();
}
