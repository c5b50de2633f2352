/* matmul_common.cuh: what the matmul sources share, private to them (matmul.cu: the kernels,
 * the context and the dispatch; matmul_formats.cu: the device layouts and the host-side runs of
 * the decoders and unit formats): the HD / MM_* definitions, the block decoders
 * (matmul_decoders.cuh) and int8 unit formats (matmul_units.cuh), the bytes of a format's rows,
 * the context's state and the error helpers. */
#ifndef RF_GPU_MATMUL_COMMON_CUH
#define RF_GPU_MATMUL_COMMON_CUH
#include "gpu_port.h"
#if RF_GPU_CUDA
#include <cublas_v2.h>
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "core/dtype.h"
#include "core/util.h"
}
#include "matmul_gpu.h"
#include "quantize32.cuh"

#define HD __host__ __device__ __forceinline__

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define MM_DEVICE_PASS 1
#define MM_UNROLL _Pragma("unroll")
#else
#define MM_UNROLL /* the host compiler unrolls as it sees fit */
#endif

#include "matmul_decoders.cuh"
#include "matmul_units.cuh"

/* Rows of a format T (a decoder Dec*, a unit format V* or a k_mvp format): whole blocks of T::QK
 * elements and T::BB bytes, except where RowPart<T> allows the grouped device layouts a partial
 * last group: its parts (superblocks) of SUB elements at the full group's offsets, HEAD bytes of
 * group header, then SUBB bytes per part (DecQ6_KX8). mm_row_step: what n_in must divide by;
 * mm_row_bytes: bytes per row (n_in a multiple of mm_row_step). */
template <class T> struct RowPart {
    enum { SUB = 0, HEAD = 0, SUBB = 0 };
};
template <> struct RowPart<DecQ6_KX8> {
    enum { SUB = 256, HEAD = 144, SUBB = 192 };
};
template <> struct RowPart<VQ6_KX8> : RowPart<DecQ6_KX8> {};
template <class T> HD int64_t mm_row_step(void) {
    const int64_t sub = RowPart<T>::SUB;
    return sub != 0 ? sub : (int64_t)T::QK;
}
template <class T> HD int64_t mm_row_bytes(int64_t n_in) {
    const int64_t r = n_in % T::QK, sub = RowPart<T>::SUB;
    return n_in / T::QK * T::BB + (sub != 0 && r != 0 ? RowPart<T>::HEAD + r / sub * RowPart<T>::SUBB : 0);
}

#define QX_MAX_IN 32768 /* largest n_in of the int8 path (scratch sized at init) */
#define QX_MAX_N 2

/* ---- The context ----------------------------------------------------------------------- */

#ifndef RF_GPU_HIP
/* cuBLAS, loaded at run time (matmul.cu, mm_cublas_load). */
typedef cublasStatus_t (*pf_cublasCreate)(cublasHandle_t *);
typedef cublasStatus_t (*pf_cublasDestroy)(cublasHandle_t);
typedef cublasStatus_t (*pf_cublasSetStream)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*pf_cublasSetWorkspace)(cublasHandle_t, void *, size_t);
typedef cublasStatus_t (*pf_cublasGemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                          const void *, const void *, cudaDataType, int, const void *,
                                          cudaDataType, int, const void *, void *, cudaDataType, int,
                                          cublasComputeType_t, cublasGemmAlgo_t);
typedef struct {
    void *lib;
    pf_cublasCreate create;
    pf_cublasDestroy destroy;
    pf_cublasSetStream set_stream;
    pf_cublasSetWorkspace set_workspace; /* optional */
    pf_cublasGemmEx gemm_ex;
} mm_cublas_api;
#endif

#define QX_XD_OFF ((size_t)QX_MAX_N * QX_MAX_IN)
#define QX_RI_OFF (QX_XD_OFF + (size_t)QX_MAX_N * (QX_MAX_IN / 32) * 8)
#define QX_BYTES (QX_RI_OFF + (size_t)QX_MAX_N * 8)

struct rf_gpu_matmul_ctx {
    gpuStream_t stream;
    int warp_size;
    int force_tiled;
    int legacy_mv; /* RF_MM_LEGACY_MV=1: the tiled-x matvec (k_matvec) for every n (benchmarks) */
    int deep_few;  /* RF_MM_DEEP_FEW=0: F16 / BF16 matvecs of few rows per warp keep UN = 4 (A/B) */
    int n_sm;
    int f32_mv;  /* RF_MM_F32_MV=1: no int8-activation matvec (the f32 k_mv is the reference) */
    int q_max_n; /* largest n of the int8 path: 1, or 2 with RF_MM_I8_N2=1 (see the header) */
    int pdl;     /* k_mvq / k_mvp as programmatic dependent launches (CUDA; RF_MM_PDL=0: off) */
    int mvp;     /* k_mvp for n = 1 (RF_MM_MVP=0: the k_qx + k_mvq / k_mv kernels instead) */
    int pdl_graph; /* k_mvp as a programmatic dependent launch inside graph capture too (RF_MM_PDL_GRAPH=0: off) */
    int xq_on;       /* producers may leave x quantized for the next matvec (RF_MM_XQ=0: off) */
    const float *xq_x; /* the x whose int8 copy is in qbuf column 0 (one-shot: cleared by every matmul call) */
    int64_t xq_n;
    int xq_use;      /* during one rf_gpu_matmul_ex call: k_mvp copies qbuf column 0 instead of quantizing x */
    int pair;        /* during one rf_gpu_mm_gate_up_swiglu call: k_mvp's swiglu pairing */
    int pair_on;     /* rf_gpu_mm_gate_up_swiglu may fuse (RF_MM_SWIGLU_FUSE=0: never, for A/B runs) */
    int mix_on;      /* k_mvp2 for a decode call whose outputs mix two formats it pairs (RF_MM_MIX=0: off) */
    long n_mix;      /* k_mvp2 launches enqueued (rf_gpu_mm_mixed_launches) */
    int64_t last_wave, last_rpw; /* the last mvp_launch's resident warps and rows per warp (rf_gpu_mm_last_decode) */
    int last_mvt;                /* ... and whether it ran k_mvt */
    int tma;       /* k_mvt for the formats it takes (CUDA sm_90+; RF_MM_TMA=0: k_mvp everywhere) */
    int smem_optin; /* largest dynamic shared memory per block the device allows (bytes) */
    int repack;    /* rf_gpu_mm_repack writes device layouts (RF_MM_REPACK=0: leaves every weight as it is) */
    struct {
        const void *fn;
        size_t smem;
        int blocks;
    } occ[48]; /* resident blocks per SM of k_mvp instantiations, by dynamic shared memory */
    int n_occ;
    void *qbuf;  /* int8 x scratch: xq[QX_MAX_N][QX_MAX_IN], xd[QX_MAX_N][QX_MAX_IN / 32], rinfo[QX_MAX_N] */
#ifndef RF_GPU_HIP
    mm_cublas_api cublas;
    cublasHandle_t handle; /* NULL when cuBLAS is unavailable */
    void *wscr;            /* f16 weight slab scratch */
    size_t wscr_bytes;
    void *xscr; /* f16 copy of x */
    size_t xscr_bytes;
    void *cbws; /* cuBLAS workspace, owned here so that cuBLAS never allocates during a call */
#endif
};

/* A weight type's name for messages, device layouts included ("q4_0/x8"). */
static inline const char *mm_type_name(uint32_t type) {
    if (type == (RF_TYPE_Q4_0 | RF_GPU_MM_LAYOUT)) return "q4_0/x8";
    if (type == (RF_TYPE_Q8_0 | RF_GPU_MM_LAYOUT)) return "q8_0/x8";
    if (type == (RF_TYPE_Q6_K | RF_GPU_MM_LAYOUT)) return "q6_K/x8";
    if (type == (RF_TYPE_IQ4_NL | RF_GPU_MM_LAYOUT)) return "iq4_nl/x8";
    if (type == (RF_TYPE_IQ4_XS | RF_GPU_MM_LAYOUT)) return "iq4_xs/s";
    if (type == (RF_TYPE_Q5_K | RF_GPU_MM_LAYOUT)) return "q5_K/h";
    return rf_type_name(type);
}

static inline int mm_check(gpuError_t e, const char *what) {
    if (e == gpuSuccess) return 0;
    rf_set_error("gpu matmul: %s: %s", what, gpuGetErrorString(e));
    return -1;
}

#endif
