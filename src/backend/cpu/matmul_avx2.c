/* matmul_avx2.c: AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; only called
 * after the driver has checked the CPU supports them). */
#include <immintrin.h>

/* u8 x s8 -> 8 int32 sums of 4 products. maddubs saturates int16 pair sums, which cannot happen
 * here: |u| <= 128 and |s| <= 127, so a pair is at most 32512. */
#define MUL_SUM_US8(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))

#include "backend/cpu/gemm_i16.h"
#include "backend/cpu/matmul_x86.inc"

void rf_mm_kernels_avx2(rf_mm_kernels *k) {
    fill_kernels(k);
    rf_mm_gemm_avx2(k);
    rf_mm_gemm_i16_avx2(k); /* after fill_kernels: its fallback is the per-row f32 kernels */
    rf_mm_gemv_avx2(k);
}
