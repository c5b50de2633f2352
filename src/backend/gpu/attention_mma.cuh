/* attention_mma.cuh: what the tensor-core attention kernels of attention_prefill.cu and
 * attention_decode_mma.cu share: the mma.sync m16n8k16 (f16 operands, f32 accumulation) and its f16
 * packing, the cache elements as f16 operands, and the device's compute capability. CUDA sm_80+
 * only (the launchers check the device); on HIP only attn_cc_major (0) is defined. */
#ifndef RF_ATTENTION_MMA_CUH
#define RF_ATTENTION_MMA_CUH

#include "attention_kv.cuh"

/* The current device's compute capability (major), once; 0 on HIP. */
static inline int attn_cc_major(void) {
#if RF_GPU_CUDA
    static int cc_major = -1;
    if (cc_major < 0) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
            cc_major = 0;
    }
    return cc_major;
#else
    return 0;
#endif
}

#if RF_GPU_CUDA
/* x and y rounded to f16 (nearest even), as one word: x in the low half (an mma operand pair). */
static __device__ __forceinline__ uint32_t fa_pack(float x, float y) {
    const __half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<const uint32_t *>(&h);
}
/* c += A B on one warp: A 16 x 16 (a[4]), B 16 x 8 (b0, b1), c 16 x 8 f32 (c[4]), in mma.sync's
 * m16n8k16 fragment layout (PTX ISA); f16 operands, f32 accumulation. */
static __device__ __forceinline__ void fa_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)c; (void)a; (void)b0; (void)b1;
    __trap(); /* never launched below sm_80 (the launcher checks the device) */
#endif
}

/* Eight cache elements as eight f16 (four words, element pairs low half first): an f16 cache as
 * stored, an f32 one rounded to nearest (the same values as fa_pack of the f32 elements), a q8_0
 * one as code times scale rounded to nearest (q8_h4). */
static __device__ __forceinline__ uint4 kv_h8(const kv_raw8<__half> &r) { return r.u; }
static __device__ __forceinline__ uint4 kv_h8(const kv_raw8<float> &r) {
    return make_uint4(fa_pack(r.a.x, r.a.y), fa_pack(r.a.z, r.a.w), fa_pack(r.b.x, r.b.y), fa_pack(r.b.z, r.b.w));
}
/* q8_0 in half arithmetic: four codes (one word of the row's bytes) to two half2 words (w0: codes 0,
 * 1; w1: codes 2, 3) times the scale d2. The biased byte (code + 128) becomes the low mantissa byte
 * of 1024 (0x64nn is 1024 + nn exactly), minus 1152 gives the code exactly, times the scale gives
 * the exact product rounded once: the same value as fa_pack of the f32 product (exact in f32). */
static __device__ __forceinline__ void q8_h4(uint32_t codes, __half2 d2, uint32_t &w0, uint32_t &w1) {
    const __half2 off = __float2half2_rn(1152.0f);
    const uint32_t b = codes ^ 0x80808080u;
    const uint32_t lo = __byte_perm(b, 0x64646464u, 0x4140u), hi = __byte_perm(b, 0x64646464u, 0x4342u);
    const __half2 h0 = __hmul2(__hsub2(*reinterpret_cast<const __half2 *>(&lo), off), d2);
    const __half2 h1 = __hmul2(__hsub2(*reinterpret_cast<const __half2 *>(&hi), off), d2);
    w0 = *reinterpret_cast<const uint32_t *>(&h0);
    w1 = *reinterpret_cast<const uint32_t *>(&h1);
}
static __device__ __forceinline__ uint4 kv_h8(const kv_raw8<kv_q8> &r) {
    const __half2 d2 = __half2half2(r.d);
    uint32_t o[4];
    q8_h4(r.q.x, d2, o[0], o[1]);
    q8_h4(r.q.y, d2, o[2], o[3]);
    return make_uint4(o[0], o[1], o[2], o[3]);
}
/* (a & b) | c as one LOP3: with b and c both constants the compiler emits two. */
static __device__ __forceinline__ uint32_t lop_and_or(uint32_t a, uint32_t b, uint32_t c) {
#if RF_GPU_CUDA
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    return (a & b) | c;
#endif
}
/* q4_0 in half arithmetic: the word's eight codes (kv_format.h's order) to four half2 words (w[i]:
 * elements 2i, 2i + 1). Each code goes into the mantissa of 1024 by one and-or, at bits 0-3 (pairs
 * 0 and 2, the word shifted by 8 for pair 2) or 4-7 (pairs 1 and 3): 1024 + c or 1024 + 16 c, minus
 * 1032 or 1152 gives c - 8 or 16 (c - 8) exactly, times d2 or d2 / 16 gives the exact product
 * rounded once. d2 / 16 is exact unless |d| < 2^-10 (a block whose largest |x| is below 0.008),
 * whose products of pairs 1 and 3 may then differ from (c - 8) d by one rounding of d / 16 (< 4e-6
 * absolute). Five integer instructions per word instead of seven shifts and eight ands / ors. */
static __device__ __forceinline__ void q4_h8(uint32_t codes, __half2 d2, uint32_t *w) {
    const __half2 off = __float2half2_rn(1032.0f), off16 = __float2half2_rn(1152.0f);
    const __half2 d16 = __hmul2(d2, __float2half2_rn(0.0625f));
    const uint32_t hi = codes >> 8;
    const uint32_t t[4] = {lop_and_or(codes, 0x000F000Fu, 0x64006400u), lop_and_or(codes, 0x00F000F0u, 0x64006400u),
                           lop_and_or(hi, 0x000F000Fu, 0x64006400u), lop_and_or(hi, 0x00F000F0u, 0x64006400u)};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __half2 h = __hmul2(__hsub2(*reinterpret_cast<const __half2 *>(&t[i]), i & 1 ? off16 : off), i & 1 ? d16 : d2);
        w[i] = *reinterpret_cast<const uint32_t *>(&h);
    }
}
static __device__ __forceinline__ uint4 kv_h8(const kv_raw8<kv_q4> &r) {
    uint32_t o[4];
    q4_h8(r.q, __half2half2(r.d), o);
    return make_uint4(o[0], o[1], o[2], o[3]);
}
#endif

#endif
