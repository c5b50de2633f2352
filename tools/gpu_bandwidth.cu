// gpu_bandwidth: device-to-device copy bandwidth (bytes read + bytes written per second), the
// figure the decode floor is computed from (model bytes / bandwidth). Usage: gpu_bandwidth [GiB]
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

int main(int argc, char **argv) {
    size_t gib = argc > 1 ? (size_t)atoi(argv[1]) : 4;
    size_t n = gib << 30;
    void *a, *b;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) {
        fprintf(stderr, "gpu_bandwidth: cannot allocate 2 x %zu GiB\n", gib);
        return 1;
    }
    cudaMemset(a, 1, n);
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice); /* warm-up */
    float best = 1e30f;
    for (int r = 0; r < 10; r++) {
        cudaEventRecord(t0);
        cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
        cudaEventRecord(t1);
        cudaEventSynchronize(t1);
        float ms;
        cudaEventElapsedTime(&ms, t0, t1);
        if (ms < best) best = ms;
    }
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf("%s: device-to-device copy of %zu GiB: %.1f GB/s (read + write, best of 10)\n", p.name, gib,
           2.0 * n / (best * 1e-3) / 1e9);
    return 0;
}
