/* l2-retention-probe.cu: which ways of asking the H200's L2 for a region A leave A there for a
 * later reader, and does A survive B bytes of evict-first streaming in between? (Forty-first
 * session; results and their reading: docs/PERF.md, "Forty-first session"; raw output:
 * docs/bench-h200-2026-11-28d.md. Not built by the Makefile: nvcc -O2 -arch=sm_90.)
 *
 * Each cell: flush the L2 (512 MB read), fill A one way, 20 us of idle, read B (evict-first), then
 * time the read of A (median of 11), by plain 16-byte loads with an evict-first policy ("ldv4") or
 * by bulk copies into a shared-memory ring as k_mvt streams its weights ("bulk"). Fills (wn[]):
 * cold (none); cp.async.bulk.prefetch.L2 in 128 B - 16 KB requests; prefetch.global.L2 (plain,
 * evict_last) per line; one 4-byte load per 32-byte sector (plain, evict_last) or per 256 / 128
 * bytes with the L2::256B / L2::128B prefetch-size qualifier, the values consumed; A read whole
 * ("ldv4warm", the hot reference); cp.async 16 bytes with L2::128B into a slot per thread or one
 * shared slot; the L2::128B load with its value dropped as a volatile load, a plain load, or a
 * relaxed.gpu load. The last row times the fills themselves on a cold A of 32 MB.
 *
 * This is the code as it ran (2026-11-28, about 11:05 UTC); the fill forms are numbered in k_touch. */
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__device__ __forceinline__ uint64_t pol_make(int mode) {
    uint64_t p;
    if (mode == 1) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    else if (mode == 2) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    else asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
    return p;
}
// mode: 0 normal, 1 evict_last, 2 evict_first
__global__ void k_read(const uint4 *p, size_t n, int mode, unsigned *sink) {
    uint64_t pol = pol_make(mode);
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v;
        asm volatile("ld.global.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p + i), "l"(pol));
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) *sink = acc;
}
// bulk L2 prefetch, chunk bytes per request; mode as above, 3 = no hint
__global__ void k_prefetch(const char *p, size_t bytes, int chunk, int mode) {
    uint64_t pol = pol_make(mode == 3 ? 0 : mode);
    size_t nch = bytes / chunk;
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < nch; c += (size_t)gridDim.x * blockDim.x) {
        const char *a = p + c * chunk;
        if (mode == 3) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(chunk) : "memory");
        else asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(a), "r"(chunk), "l"(pol) : "memory");
    }
}

__global__ void k_spin(long long ns) { long long t0 = clock64(); while (clock64() - t0 < ns * 2) {} }
// per-line prefetch forms. form 0: prefetch.global.L2, 1: prefetch.global.L2::evict_last,
// 2: ld.u32 per 32B sector normal, 3: ld.u32 per 32B sector evict_last, 4: ld.L2::256B per 256B, 5: ld.L2::128B per 128B
__global__ void k_touch(const char *p, size_t bytes, int form, unsigned *sink) {
    __shared__ __align__(16) char junk[256 * 16];
    int step = form == 4 ? 256 : (form == 2 || form == 3) ? 32 : 128;
    uint64_t pol = pol_make(form == 3 ? 1 : 0);
    unsigned acc = 0;
    for (size_t o = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * step; o < bytes; o += (size_t)gridDim.x * blockDim.x * step) {
        const char *a = p + o; unsigned v = 0;
        if (form == 0) asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
        else if (form == 1) asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(a));
        else if (form == 2) asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(a));
        else if (form == 3) asm volatile("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(a), "l"(pol));
        else if (form == 4) asm volatile("ld.global.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(a));
        else if (form == 5) asm volatile("ld.global.L2::128B.u32 %0, [%1];" : "=r"(v) : "l"(a));
        else if (form == 8) asm volatile("{\n\t.reg .b32 t;\n\tld.volatile.global.L2::128B.b32 t, [%0];\n\t}" ::"l"(a) : "memory");
        else if (form == 9) asm volatile("{\n\t.reg .b32 t;\n\tld.global.L2::128B.b32 t, [%0];\n\t}" ::"l"(a) : "memory");
        else if (form == 10) asm volatile("{\n\t.reg .b32 t;\n\tld.relaxed.gpu.global.L2::128B.b32 t, [%0];\n\t}" ::"l"(a) : "memory");
        else asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(junk + (form == 6 ? threadIdx.x * 16 : 0))), "l"(a) : "memory");
        acc ^= v;
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    if (acc == 0x12345678u) *sink = acc;
}
// k_mvt-like reader: each block streams its contiguous share through a 4-stage smem ring by bulk copies (evict-first)
__global__ void k_bulkread(const char *p, size_t bytes, unsigned *sink) {
    extern __shared__ __align__(128) char ring[];
    __shared__ __align__(8) uint64_t bar[4];
    const int CH = 8192, S = 4;
    size_t per = bytes / gridDim.x; per -= per % CH;
    const char *base = p + blockIdx.x * per;
    int nch = (int)(per / CH);
    if (threadIdx.x == 0) { for (int s = 0; s < S; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"((unsigned)__cvta_generic_to_shared(&bar[s]))); asm volatile("fence.mbarrier_init.release.cluster;"); }
    __syncthreads();
    const uint64_t pol = 0x12F0000000000000ull;
    auto issue = [&](int c) {
        int s = c % S; unsigned b = (unsigned)__cvta_generic_to_shared(&bar[s]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(CH) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"((unsigned)__cvta_generic_to_shared(ring + s * CH)), "l"(base + (size_t)c * CH), "r"(CH), "r"(b), "l"(pol) : "memory");
    };
    if (threadIdx.x == 0) for (int c = 0; c < S && c < nch; c++) issue(c);
    unsigned acc = 0;
    for (int c = 0; c < nch; c++) {
        int s = c % S; unsigned b = (unsigned)__cvta_generic_to_shared(&bar[s]); unsigned par = (c / S) & 1, done = 0;
        do { asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(b), "r"(par) : "memory"); } while (!done);
        acc ^= ((const unsigned *)(ring + s * CH))[threadIdx.x];
        __syncthreads();
        if (threadIdx.x == 0 && c + S < nch) issue(c + S);
    }
    if (acc == 0x12345678u) *sink = acc;
}

int main() {
    cudaDeviceProp pr; CK(cudaGetDeviceProperties(&pr, 0));
    const size_t MB = 1 << 20, FL = 512 * MB, AMAX = 48 * MB, BMAX = 48 * MB;
    char *F, *A, *B; unsigned *sink;
    CK(cudaMalloc(&F, FL)); CK(cudaMalloc(&A, AMAX)); CK(cudaMalloc(&B, BMAX)); CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(F, 1, FL)); CK(cudaMemset(A, 2, AMAX)); CK(cudaMemset(B, 3, BMAX));
    CK(cudaFuncSetAttribute(k_bulkread, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * 8192));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    int G = pr.multiProcessorCount * 4, T = 256;
    const char *wn[] = {"cold", "bulkpf128", "bulkpf1k", "bulkpf4k", "bulkpf16k", "pf.L2", "pf.L2evl", "ld32B", "ld32Bevl", "ld256B", "ld128B", "ldv4warm", "cpas16", "cpas16same", "ldvol", "lddead", "ldrelaxed"};
    for (int reader = 0; reader < 2; reader++)
    for (size_t SA : {16 * MB, 32 * MB}) for (size_t SB : {0 * MB, 16 * MB}) {
        printf("%s A %2zu MB, B %2zu MB:", reader ? "bulk" : "ldv4", SA / MB, SB / MB);
        for (int w = 0; w < 17; w++) {
            std::vector<float> ts;
            for (int r = 0; r < 11; r++) {
                k_read<<<G, T>>>((const uint4 *)F, FL / 16, 0, sink);
                if (w >= 1 && w <= 4) k_prefetch<<<G, T>>>(A, SA, w == 1 ? 128 : w == 2 ? 1024 : w == 3 ? 4096 : 16384, 3);
                if (w >= 5 && w <= 10) k_touch<<<G, T>>>(A, SA, w - 5, sink);
                if (w == 11) k_read<<<G, T>>>((const uint4 *)A, SA / 16, 0, sink);
                if (w >= 12 && w <= 13) k_touch<<<G, T>>>(A, SA, w - 6, sink);
                if (w >= 14) k_touch<<<G, T>>>(A, SA, w - 6, sink);
                k_spin<<<1, 1>>>(20000);
                if (SB) k_read<<<G, T>>>((const uint4 *)B, SB / 16, 2, sink);
                cudaEventRecord(e0);
                if (reader) k_bulkread<<<pr.multiProcessorCount * 2, 256, 4 * 8192>>>(A, SA, sink);
                else k_read<<<G, T>>>((const uint4 *)A, SA / 16, 2, sink);
                cudaEventRecord(e1);
                CK(cudaEventSynchronize(e1));
                float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms * 1000);
            }
            std::sort(ts.begin(), ts.end());
            printf("  %s %.1f", wn[w], ts[ts.size() / 2]);
        }
        printf("  (us)\n");
    }
    /* prefetch cost: time of the touch/prefetch kernels themselves on cold A */
    printf("cost of filling 32 MB (us):");
    for (int w = 1; w <= 16; w++) {
        std::vector<float> ts;
        for (int r = 0; r < 11; r++) {
            k_read<<<G, T>>>((const uint4 *)F, FL / 16, 0, sink);
            cudaEventRecord(e0);
            if (w >= 1 && w <= 4) k_prefetch<<<G, T>>>(A, 32 * MB, w == 1 ? 128 : w == 2 ? 1024 : w == 3 ? 4096 : 16384, 3);
            if (w >= 5 && w <= 10) k_touch<<<G, T>>>(A, 32 * MB, w - 5, sink);
            if (w == 11) k_read<<<G, T>>>((const uint4 *)A, 32 * MB / 16, 0, sink);
            if (w >= 12) k_touch<<<G, T>>>(A, 32 * MB, w - 6, sink);
            k_read<<<1, 32>>>((const uint4 *)B, 32, 0, sink);
            cudaEventRecord(e1);
            CK(cudaEventSynchronize(e1));
            float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms * 1000);
        }
        std::sort(ts.begin(), ts.end());
        printf("  %s %.1f", wn[w], ts[ts.size() / 2]);
    }
    printf("\n");
    CK(cudaGetLastError());
    return 0;
}
