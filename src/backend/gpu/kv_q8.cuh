/* kv_q8.cuh: the q8_0 K/V block rule of core/kv_format.h on the device, for the two kernels that
 * write q8_0 rows (rope.cu's store kernel and the rope-fused decode attention): the same f32
 * operations in the same order as rf_kv_write_row, so the bytes equal the CPU's. */
#ifndef RF_KV_Q8_CUH
#define RF_KV_Q8_CUH

/* A block's scale from the largest |x| of its 32 elements and whether one was inf / NaN:
 * d = amax / 127 rounded to binary16 (bits), id = 1 / d in f32 (0 for an all-zero block); a
 * non-finite element or a scale that overflows binary16 makes the block bad (NaN scale, codes 0). */
struct kvq_scale {
    float id;
    unsigned short bits;
    bool bad;
};
static __device__ __forceinline__ kvq_scale kvq_scale_of(float amax, int bad) {
    const float dq = amax / 127.0f;
    const __half dh = __float2half_rn(dq);
    kvq_scale s;
    s.bad = bad || !(fabsf(__half2float(dh)) <= 65504.0f);
    s.id = dq != 0.0f ? 1.0f / dq : 0.0f;
    s.bits = s.bad ? (unsigned short)0x7e00u : __half_as_ushort(dh);
    return s;
}
/* The code of element x: roundf(x * id) (half away from zero) clamped to +-127; 0 in a bad block. */
static __device__ __forceinline__ uint8_t kvq_code(float x, const kvq_scale &s) {
    const float r = roundf(x * s.id);
    return s.bad ? (uint8_t)0 : (uint8_t)(int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
}
/* Whether |x| is inf or NaN. */
static __device__ __forceinline__ int kvq_nonfinite(float x) { return !(fabsf(x) <= 3.402823466e38f); }

#endif
