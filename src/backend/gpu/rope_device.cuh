/* rope_device.cuh: the rotary-embedding angle and rotation, shared by rope.cu and the decode
 * attention (attention_decode.cu and attention_decode_mma.cu, whose kernels rotate q and the new
 * k themselves when rope is fused into them), so both compute the same bits. The contract is rope.cu's: base^(-2i/n_rot) and cos/sin evaluated in f64 and
 * rounded to f32, theta in f32 in the CPU's order (cpu_rope), the rotation without FMA contraction. */
#ifndef RF_GPU_ROPE_DEVICE_CUH
#define RF_GPU_ROPE_DEVICE_CUH

#include "gpu_port.h"

/* (cos, sin) of pair i (< n_rot / 2) at position p; freq_factors may be NULL. */
static __device__ __forceinline__ void rope_cos_sin(float p, int i, int n_rot, float base, float freq_scale,
                                                    const float *freq_factors, float *c, float *s) {
    const float freq = (float)pow((double)base, (double)(-2.0f * (float)i / (float)n_rot));
    float theta = p * freq_scale * freq;
    if (freq_factors) theta = theta / freq_factors[i];
    *c = (float)cos((double)theta);
    *s = (float)sin((double)theta);
}

/* The rotated pair: (x0, x1) -> (x0 c - x1 s, x0 s + x1 c), each operation rounded. */
static __device__ __forceinline__ float rope_lo(float x0, float x1, float c, float s) {
    return RF_SUB(RF_MUL(x0, c), RF_MUL(x1, s));
}
static __device__ __forceinline__ float rope_hi(float x0, float x1, float c, float s) {
    return RF_ADD(RF_MUL(x0, s), RF_MUL(x1, c));
}

#endif
