/* block_fields.h: scalar readers of weight-block fields shared by the x86 kernel files
 * (matmul_x86.inc, gemm_avx2.c); those files are compiled with F16C enabled. */
#ifndef RF_CPU_BLOCK_FIELDS_H
#define RF_CPU_BLOCK_FIELDS_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The IEEE half at p (any alignment) as f32: exact. */
static inline __attribute__((always_inline)) float f16v(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 6-bit scales and mins of Q4_K/Q5_K's 12-byte field (layout in quant.c). */
static inline __attribute__((always_inline)) void k4_unpack(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 0xF) | ((s[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

#endif
