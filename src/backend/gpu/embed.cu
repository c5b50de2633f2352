/* embed.cu: token embedding gather (twin of cpu_embed). */
#include "dequant.cuh"
#include "kernels.h"

/* embed_kernel: out[t][i] = element i of row tokens[t] of `table`, decoded with dequant.cuh
 * (bit-exact with rf_dequantize_row).
 *   table: [n_vocab] rows of row_bytes bytes of `type` (n_in a multiple of the block size);
 *   tokens: [n] int32, each in [0, n_vocab) (validated by the runtime before upload);
 *   out: [n][n_in] f32, row-major. Grid: (ceil(n_in / blockDim.x), n). NaN/inf in the table are
 *   copied through (F32/F16/BF16) or decoded by IEEE arithmetic (quantized types). */
static __global__ void embed_kernel(uint32_t type, const uint8_t *table, size_t row_bytes, int64_t n_in,
                                    const int32_t *tokens, float *out) {
    const int t = blockIdx.y;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_in) return;
    const uint8_t *row = table + (size_t)tokens[t] * row_bytes;
    out[(int64_t)t * n_in + i] = rf_dq_elem(type, row, i);
}

extern "C" int rf_gpu_embed(void *stream, uint32_t type, const void *table, size_t row_bytes, int64_t n_in,
                            const int32_t *tokens, int n, float *out) {
    if (n <= 0 || n_in <= 0) return 0;
    const int bs = 256;
    dim3 grid((unsigned)((n_in + bs - 1) / bs), (unsigned)n);
    embed_kernel<<<grid, bs, 0, (gpuStream_t)stream>>>(type, (const uint8_t *)table, row_bytes, n_in, tokens, out);
    return (int)gpuGetLastError();
}

static __global__ void probe_kernel(int *flag) {
    if (threadIdx.x == 0 && flag) *flag = warpSize;
}

extern "C" int rf_gpu_probe(void *stream, int *dev_flag) {
    probe_kernel<<<1, 64, 0, (gpuStream_t)stream>>>(dev_flag);
    return (int)gpuGetLastError();
}
