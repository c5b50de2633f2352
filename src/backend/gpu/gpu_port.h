/* gpu_port.h: the one place where CUDA and HIP differ.
 *
 * Included by the kernel sources (*.cu, compiled by nvcc, or by hipcc with -x hip) and by the
 * host code in C (gpu_backend.c, compiled by the C compiler with -DRF_HAVE_CUDA or
 * -DRF_HAVE_HIP). Kernels are written once against the names below:
 *
 *   device side  RF_SHFL_XOR(v, mask)  butterfly shuffle over the whole warp / wavefront
 *                RF_SHFL_IN(v, src, w) v of lane src of each segment of w lanes (every lane calls)
 *                warpSize              lanes per warp (32 on NVIDIA, 32 or 64 on AMD): never
 *                                      hard-code it; blocks are multiples of it
 *                rf_h2f(u16)           exact IEEE half -> float
 *                rf_bf2f(u16)          bfloat16 -> float
 *                RF_MUL/RF_ADD/RF_SUB  f32 arithmetic rounded per operation (no FMA contraction),
 *                                      so decoders reproduce the CPU's results bit for bit
 *   host side    gpu* aliases of the runtime API (stream, event, memory, graph, errors)
 */
#ifndef RF_GPU_PORT_H
#define RF_GPU_PORT_H

#if defined(__HIPCC__) || (defined(RF_HAVE_HIP) && !defined(RF_HAVE_CUDA))
#define RF_GPU_HIP 1
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__
#endif
#else
#define RF_GPU_CUDA 1
#endif

/* ---- host runtime API ------------------------------------------------------------------- */
#if RF_GPU_HIP
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#else
#include <hip/hip_runtime_api.h>
#endif
typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
typedef hipEvent_t gpuEvent_t;
#define gpuEventCreate hipEventCreate
#define gpuEventRecord hipEventRecord
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuEventDestroy hipEventDestroy
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventSynchronize hipEventSynchronize
#define gpuMallocHost hipHostMalloc
#define gpuFreeHost hipHostFree
typedef hipGraph_t gpuGraph_t;
typedef hipGraphExec_t gpuGraphExec_t;
typedef hipDeviceProp_t gpuDeviceProp;
#define gpuSuccess hipSuccess
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuMemGetInfo hipMemGetInfo
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuStreamBeginCapture hipStreamBeginCapture
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define gpuGraphInstantiate(exec, g) hipGraphInstantiate(exec, g, NULL, NULL, 0)
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphExecDestroy hipGraphExecDestroy
#define gpuGraphDestroy hipGraphDestroy
#define gpuMemset hipMemset
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuGetDevice hipGetDevice
#define gpuStreamIsCapturing hipStreamIsCapturing
#define gpuStreamCaptureStatus hipStreamCaptureStatus
#define gpuStreamCaptureStatusNone hipStreamCaptureStatusNone
#define gpuFuncSetMaxDynSmem(fn, bytes) \
    hipFuncSetAttribute((const void *)(fn), hipFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes))
#define RF_GPU_API_NAME "hip"
#else
#if defined(__CUDACC__)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#else
#include <cuda_runtime_api.h>
#endif
typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
typedef cudaEvent_t gpuEvent_t;
#define gpuEventCreate cudaEventCreate
#define gpuEventRecord cudaEventRecord
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuEventDestroy cudaEventDestroy
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuEventSynchronize cudaEventSynchronize
#define gpuMallocHost cudaMallocHost
#define gpuFreeHost cudaFreeHost
typedef cudaGraph_t gpuGraph_t;
typedef cudaGraphExec_t gpuGraphExec_t;
typedef struct cudaDeviceProp gpuDeviceProp;
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuMemGetInfo cudaMemGetInfo
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuStreamBeginCapture cudaStreamBeginCapture
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define gpuGraphInstantiate(exec, g) cudaGraphInstantiate(exec, g, 0)
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphExecDestroy cudaGraphExecDestroy
#define gpuGraphDestroy cudaGraphDestroy
#define gpuMemset cudaMemset
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuGetDevice cudaGetDevice
#define gpuStreamIsCapturing cudaStreamIsCapturing
#define gpuStreamCaptureStatus cudaStreamCaptureStatus
#define gpuStreamCaptureStatusNone cudaStreamCaptureStatusNone
#define gpuFuncSetMaxDynSmem(fn, bytes) \
    cudaFuncSetAttribute((const void *)(fn), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes))
#define RF_GPU_API_NAME "cuda"
#endif

/* ---- device side ------------------------------------------------------------------------ */
#if defined(__CUDACC__) || defined(__HIPCC__)
#include <stdint.h>
#include <stdlib.h>

#if RF_GPU_HIP
#define RF_SHFL_XOR(v, m) __shfl_xor((v), (m))
#define RF_SHFL_IN(v, src, width) __shfl((v), (src), (width))
#else
#define RF_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define RF_SHFL_IN(v, src, width) __shfl_sync(0xffffffffu, (v), (src), (width))
#endif

#define RF_MUL(a, b) __fmul_rn((a), (b))
#define RF_ADD(a, b) __fadd_rn((a), (b))
#define RF_SUB(a, b) __fadd_rn((a), -(b))

/* Upper bound on warps per block (1024 threads / the smallest warp size any target has); used
 * only to size shared arrays, never as the warp size. */
#define RF_MAX_WARPS 32

/* Lets the next kernel of the stream start launching now when it is a programmatic dependent
 * launch (k_mvp of matmul_decode.cuh: it loads weights, then waits for this grid's completion
 * before it reads anything this grid writes). CUDA sm_90+; a no-op elsewhere. Purely a
 * scheduling hint: it never makes data visible early. */
static __device__ __forceinline__ void rf_grid_dep_launch(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Waits until the previous kernel of the stream has completed and its writes are visible, when
 * this kernel was launched with RF_LAUNCH_PDL; a no-op otherwise. Everything before it may only
 * read what no kernel of the current step writes. */
static __device__ __forceinline__ void rf_grid_dep_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Launches kernel fn (a function pointer variable or a plain name: no commas) as a programmatic
 * dependent launch on CUDA: it may start while the previous kernel of the stream is still running
 * (that kernel's rf_grid_dep_launch lets it), and must call rf_grid_dep_wait before it reads
 * anything that kernel writes or writes anything it reads. HIP, or RF_GPU_PDL=0 at the first
 * launch: an ordinary launch. err (a gpuError_t lvalue) receives the launch's status. */
#if RF_GPU_HIP
#define RF_LAUNCH_PDL(err, fn, grid_, block_, smem_, stream_, ...)                  \
    do {                                                                        \
        hipLaunchKernelGGL(fn, grid_, block_, smem_, stream_, __VA_ARGS__);      \
        (err) = hipGetLastError();                                              \
    } while (0)
#else
static inline int rf_pdl_on(void) {
    static int on = -1;
    if (on < 0) on = !(getenv("RF_GPU_PDL") && atoi(getenv("RF_GPU_PDL")) == 0);
    return on;
}
#define RF_LAUNCH_PDL(err, fn, grid_, block_, smem_, stream_, ...)                                      \
    do {                                                                                            \
        cudaLaunchConfig_t cfg_ = {};                                                               \
        cudaLaunchAttribute at_[1] = {};                                                            \
        at_[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;                             \
        at_[0].val.programmaticStreamSerializationAllowed = 1;                                      \
        cfg_.gridDim = (grid_);                                                                     \
        cfg_.blockDim = (block_);                                                                    \
        cfg_.dynamicSmemBytes = (smem_);                                                             \
        cfg_.stream = (stream_);                                                                     \
        cfg_.attrs = at_;                                                                           \
        cfg_.numAttrs = rf_pdl_on();                                                                \
        (err) = cudaLaunchKernelEx(&cfg_, fn, __VA_ARGS__);                                         \
    } while (0)
#endif

static __device__ __forceinline__ float rf_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
static __device__ __forceinline__ float rf_bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* Sum / max over the whole warp; every lane gets the result. */
static __device__ __forceinline__ float rf_warp_sum(float v) {
    for (int o = warpSize / 2; o > 0; o >>= 1) v += RF_SHFL_XOR(v, o);
    return v;
}
static __device__ __forceinline__ double rf_warp_sum_d(double v) {
    for (int o = warpSize / 2; o > 0; o >>= 1) v += RF_SHFL_XOR(v, o);
    return v;
}
static __device__ __forceinline__ float rf_warp_max(float v) {
    for (int o = warpSize / 2; o > 0; o >>= 1) {
        float w = RF_SHFL_XOR(v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* Block-wide sum; blockDim.x a multiple of warpSize. `sh` holds RF_MAX_WARPS floats. Every
 * thread gets the result; the function ends with a barrier so `sh` can be reused. */
static __device__ __forceinline__ float rf_block_sum(float v, float *sh) {
    int lane = threadIdx.x % warpSize, w = threadIdx.x / warpSize, nw = blockDim.x / warpSize;
    v = rf_warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < nw; i++) t += sh[i];
    __syncthreads();
    return t;
}
static __device__ __forceinline__ double rf_block_sum_d(double v, double *sh) {
    int lane = threadIdx.x % warpSize, w = threadIdx.x / warpSize, nw = blockDim.x / warpSize;
    v = rf_warp_sum_d(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    double t = 0.0;
    for (int i = 0; i < nw; i++) t += sh[i];
    __syncthreads();
    return t;
}
static __device__ __forceinline__ float rf_block_max(float v, float *sh) {
    int lane = threadIdx.x % warpSize, w = threadIdx.x / warpSize, nw = blockDim.x / warpSize;
    v = rf_warp_max(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float t = sh[0];
    for (int i = 1; i < nw; i++) t = sh[i] > t ? sh[i] : t;
    __syncthreads();
    return t;
}
#endif

#endif
