/* kv_quant.cuh: the q8_0 and q4_0 K/V block rules of core/kv_format.h on the device, for the two
 * kernels that write quantized rows (rope.cu's store kernels and the rope-fused decode attention):
 * the same f32 operations in the same order as rf_kv_write_row, so the bytes equal the CPU's. */
#ifndef RF_KV_QUANT_CUH
#define RF_KV_QUANT_CUH

/* A block's scale: the f32 scale dq rounded to binary16 (bits), id = 1 / dq in f32 (0 for dq = 0);
 * a non-finite element (bad) or a scale that overflows binary16 makes the block bad (NaN scale;
 * codes 0 for q8_0, 8 for q4_0). */
struct kvq_scale {
    float id;
    unsigned short bits;
    bool bad;
};
static __device__ __forceinline__ kvq_scale kvq_scale_from(float dq, int bad) {
    const __half dh = __float2half_rn(dq);
    kvq_scale s;
    s.bad = bad || !(fabsf(__half2float(dh)) <= 65504.0f);
    s.id = dq != 0.0f ? 1.0f / dq : 0.0f;
    s.bits = s.bad ? (unsigned short)0x7e00u : __half_as_ushort(dh);
    return s;
}
/* q8_0: dq = amax / 127 from the largest |x| of the block's 32 elements. */
static __device__ __forceinline__ kvq_scale kvq_scale_of(float amax, int bad) { return kvq_scale_from(amax / 127.0f, bad); }
/* The code of element x: roundf(x * id) (half away from zero) clamped to +-127; 0 in a bad block. */
static __device__ __forceinline__ uint8_t kvq_code(float x, const kvq_scale &s) {
    const float r = roundf(x * s.id);
    return s.bad ? (uint8_t)0 : (uint8_t)(int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
}
/* Whether |x| is inf or NaN. */
static __device__ __forceinline__ int kvq_nonfinite(float x) { return !(fabsf(x) <= 3.402823466e38f); }

/* q4_0. The block's m (the element of the largest |x|, the first on ties) is found by a
 * reduction over (|x|, index, x); kvq4_better says whether candidate b replaces a. */
struct kvq4_max {
    float a, m; /* |x| and x of the candidate */
    int i;      /* its index in the block */
};
static __device__ __forceinline__ bool kvq4_better(const kvq4_max &a, const kvq4_max &b) {
    return b.a > a.a || (b.a == a.a && b.i < a.i);
}
/* q4_0: dq = m / -8 (0 for an all-zero block). */
static __device__ __forceinline__ kvq_scale kvq4_scale_of(float amax, float m, int bad) {
    return kvq_scale_from(amax > 0.0f ? m / -8.0f : 0.0f, bad);
}
/* The code of element x: v = x * id + 8.5f, product and sum each rounded (no FMA), clamped to
 * 0..15 in f32, then truncated; 8 in a bad block. */
static __device__ __forceinline__ uint32_t kvq4_code(float x, const kvq_scale &s) {
    const float v = __fadd_rn(__fmul_rn(x, s.id), 8.5f);
    return s.bad ? 8u : v >= 15.0f ? 15u : v >= 0.0f ? (uint32_t)(int)v : 0u;
}
/* Bit position of element j (0..7) of a group of eight in its 32-bit word (rf_kv_q4_shift). */
static __device__ __forceinline__ int kvq4_shift(int j) { return 4 * (j >> 1) + 16 * (j & 1); }

#endif
