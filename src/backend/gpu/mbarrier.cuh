/* mbarrier.cuh: the shared-memory barriers that the Hopper copy engine (TMA, sm_90+) completes
 * its bulk and tensor copies on, for the kernels that stream through rings in shared memory
 * (matmul.cu's k_mvt, attention_decode_mma.cu's q8_0 / q4_0 rounds). CUDA only; on older targets
 * the bodies trap (the launchers never take those paths there).
 *
 * Protocol: one thread initializes each barrier (count 1) before any use and the block's threads
 * see it after a __syncwarp / __syncthreads; per phase one thread arrives with the bytes it
 * expects (gpu_mbar_arrive_expect) and issues the copies that complete them; readers wait on the
 * phase's parity (0 for a barrier's first phase, then alternating). Before a stage read by the
 * generic proxy is overwritten by a copy, the readers synchronize and the issuing thread orders
 * its view with gpu_fence_proxy_async. */
#ifndef RF_GPU_MBARRIER_CUH
#define RF_GPU_MBARRIER_CUH
#ifndef RF_GPU_HIP
#include <stdint.h>

/* The shared-window address of a generic pointer into shared memory. */
__device__ __forceinline__ uint32_t gpu_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
/* Initializes bar for one arrival per phase and makes that visible to the copy engine. */
__device__ __forceinline__ void gpu_mbar_init(uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(gpu_smem_u32(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
    (void)bar;
    __trap();
#endif
}
/* One arrival on bar that expects `bytes` more transaction bytes in the current phase. */
__device__ __forceinline__ void gpu_mbar_arrive_expect(uint64_t *bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(gpu_smem_u32(bar)), "r"(bytes)
                 : "memory");
#else
    (void)bar, (void)bytes;
    __trap();
#endif
}
/* Waits until the barrier's phase with this parity completed. */
__device__ __forceinline__ void gpu_mbar_wait(uint64_t *bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(gpu_smem_u32(bar)), "r"(parity)
                     : "memory");
    } while (!done);
#else
    (void)bar, (void)parity;
    __trap();
#endif
}
/* Orders this thread's earlier shared-memory accesses (and those a __syncwarp / __syncthreads made
 * visible to it) before its later copies (the async proxy). */
__device__ __forceinline__ void gpu_fence_proxy_async(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

#endif
#endif
