/* util.h: error reporting, logging, overflow-checked arithmetic, half-precision conversion.
 *
 * Error convention used everywhere in rocmforge: a failing function records one human-readable
 * line with rf_set_error() and returns -1 (int) or NULL (pointer). The caller may add context
 * with rf_prefix_error(). The message is thread-local; rf_last_error() reads it. Nothing in the
 * library prints errors itself or exits.
 */
#ifndef RF_UTIL_H
#define RF_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define RF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RF_PRINTF(a, b)
#endif

void rf_set_error(const char *fmt, ...) RF_PRINTF(1, 2);
/* Prepends "<context>: " to the current error message. */
void rf_prefix_error(const char *fmt, ...) RF_PRINTF(1, 2);
const char *rf_last_error(void);
void rf_clear_error(void);

/* Logging goes to stderr. Level 0 = errors only, 1 = info (default), 2 = debug. */
extern int rf_log_level;
void rf_log(int level, const char *fmt, ...) RF_PRINTF(2, 3);
#define RF_INFO(...) rf_log(1, __VA_ARGS__)
#define RF_DEBUG(...) rf_log(2, __VA_ARGS__)

/* Allocation that never returns NULL for a non-zero size: aborts with a message on OOM
 * (host out-of-memory is not a recoverable condition for an inference engine). */
void *rf_xmalloc(size_t n);
void *rf_xcalloc(size_t count, size_t size);
void *rf_xrealloc(void *p, size_t n);
char *rf_xstrdup(const char *s);

/* Overflow-checked arithmetic: return false (and leave *out unspecified) on overflow. */
static inline bool rf_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool rf_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* IEEE half <-> float, exact (round-to-nearest-even on narrowing; NaN/inf preserved). */
float rf_fp16_to_fp32(uint16_t h);
uint16_t rf_fp32_to_fp16(float f);
/* bfloat16 <-> float. Narrowing rounds to nearest even; NaN stays NaN (quiet). */
static inline float rf_bf16_to_fp32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t rf_fp32_to_bf16(float f);

/* Monotonic wall clock in seconds. */
double rf_time_s(void);

#define RF_MIN(a, b) ((a) < (b) ? (a) : (b))
#define RF_MAX(a, b) ((a) > (b) ? (a) : (b))
#define RF_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
