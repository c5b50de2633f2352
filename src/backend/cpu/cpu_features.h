/* cpu_features.h: the x86 CPUID feature bits that not every compiler's __builtin_cpu_supports
 * knows (clang 14 rejects "f16c", "avxvnni" and the AMX names at compile time), read directly.
 * Each says what the CPU has; whether the OS saves the registers is the caller's check, as with
 * __builtin_cpu_supports: F16C and AVX-VNNI are used only where "avx2" (which implies the OS's
 * AVX state) holds, AMX only after the kernel granted its tile state (matmul.c). */
#ifndef RF_CPU_FEATURES_H
#define RF_CPU_FEATURES_H

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static inline int rf_cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
    unsigned r[4] = {0, 0, 0, 0};
    if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return 0;
    return (int)((r[reg] >> bit) & 1u);
}
enum { RF_EAX = 0, RF_EBX = 1, RF_ECX = 2, RF_EDX = 3 };

/* CPUID is slow (in a virtual machine it exits to the hypervisor: the reference attention, which
 * asks per cache row, ran 30x slower with it uncached), so each answer is read once per
 * translation unit: *cache is 0 before, the bit + 1 after (a benign race computes it twice). */
static inline int rf_cpu_bit_cached(int *cache, unsigned leaf, unsigned sub, int reg, int bit) {
    int v = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (!v) __atomic_store_n(cache, v = rf_cpuid_bit(leaf, sub, reg, bit) + 1, __ATOMIC_RELAXED);
    return v - 1;
}
static inline int rf_cpu_has_f16c(void) {
    static int c;
    return rf_cpu_bit_cached(&c, 1, 0, RF_ECX, 29);
}
static inline int rf_cpu_has_avxvnni(void) {
    static int c;
    return rf_cpu_bit_cached(&c, 7, 1, RF_EAX, 4);
}
/* AMX-BF16, AMX-TILE and AMX-INT8 together */
static inline int rf_cpu_has_amx(void) {
    static int c22, c24, c25;
    return rf_cpu_bit_cached(&c22, 7, 0, RF_EDX, 22) && rf_cpu_bit_cached(&c24, 7, 0, RF_EDX, 24) &&
           rf_cpu_bit_cached(&c25, 7, 0, RF_EDX, 25);
}
#endif

#endif
