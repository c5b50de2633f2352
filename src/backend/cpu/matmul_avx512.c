/* matmul_avx512.c: the AVX-512 level. Its int8 kernels are the shared x86 kernels built with
 * AVX-512 VNNI's vpdpbusd (one instruction for maddubs + madd, no int16 step) when the CPU has
 * VNNI; the file is compiled with -mavx512f/bw/vl/dq and enables VNNI per function below, so
 * rf_mm_kernels_avx512 installs them only after checking the CPU flag. Without VNNI the AVX-512
 * level keeps the AVX2 kernels (on current AMD cores 512-bit operations run as two 256-bit
 * halves, so wider registers alone gain little for these memory-bound kernels). */
#pragma GCC target("avx512vnni")
#include <immintrin.h>

#define MUL_SUM_US8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))

#include "backend/cpu/matmul_x86.inc"

void rf_mm_kernels_avx512(rf_mm_kernels *k) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni")) fill_kernels(k);
}
