/* prefetch.h: one software prefetch of the line holding p into L1, for the CPU kernels.
 * It is an asm statement on x86: GCC 12 at -O1 and above deletes a loop whose only statement is
 * __builtin_prefetch (what _mm_prefetch expands to), as a loop without side effects; that left the
 * AVX2 int16 GEMM with no prefetch at all (docs/PERF-CPU.md section 29). */
#ifndef RF_CPU_PREFETCH_H
#define RF_CPU_PREFETCH_H

static inline __attribute__((always_inline)) void rf_prefetch_l1(const void *p) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
#else
    __builtin_prefetch(p, 0, 3);
#endif
}

#endif
