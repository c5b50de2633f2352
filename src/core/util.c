#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Thread_local char err_buf[1024];
int rf_log_level = 1;

void rf_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
}

void rf_prefix_error(const char *fmt, ...) {
    char prefix[512], old[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof old);
    snprintf(err_buf, sizeof err_buf, "%.400s: %.600s", prefix, old);
}

const char *rf_last_error(void) { return err_buf[0] ? err_buf : "unknown error"; }
void rf_clear_error(void) { err_buf[0] = 0; }

void rf_log(int level, const char *fmt, ...) {
    if (level > rf_log_level) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

static void oom(size_t n) {
    fprintf(stderr, "rocmforge: out of host memory (allocating %zu bytes)\n", n);
    abort();
}
void *rf_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}
void *rf_xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) oom(count * size);
    return p;
}
void *rf_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}
char *rf_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = rf_xmalloc(n);
    memcpy(d, s, n);
    return d;
}

float rf_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while (!(mant & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t rf_fp32_to_fp16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t absu = u & 0x7fffffff;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((absu >> 13) & 0x3ff)); /* NaN */
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow (after rounding) -> inf */
    if (absu < 0x38800000u) { /* result is subnormal or zero */
        if (absu < 0x33000000u) return (uint16_t)sign; /* below half the smallest subnormal */
        /* value = mant * 2^(e-150); in half-subnormal units of 2^-24 that is mant >> (126-e). */
        uint32_t e = absu >> 23;
        uint32_t mant = (absu & 0x7fffff) | 0x800000;
        uint32_t sh = 126 - e;
        uint32_t res = mant >> sh;
        uint32_t rem = mant & ((1u << sh) - 1);
        uint32_t half = 1u << (sh - 1);
        if (rem > half || (rem == half && (res & 1))) res++;
        return (uint16_t)(sign | res);
    }
    uint32_t res = ((absu >> 13) - (112u << 10));
    uint32_t rem = absu & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (res & 1))) res++;
    return (uint16_t)(sign | res);
}

uint16_t rf_fp32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

double rf_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
