/* test.h: the tiny test framework every tests/test_*.c uses.
 *
 * CHECK(cond, fmt, ...) counts one passed or failed check (printing the failure with file:line).
 * SKIP(fmt, ...) counts one skipped check. test_finish() prints the machine-readable line
 * "RESULT <passed> <failed> <skipped>" that tests/run.sh sums, and returns the exit code.
 * test_shared(rel) resolves a path under ../shared (override: $ROCMFORGE_SHARED).
 * test_rng() is seeded fresh per run (printed, override with $ROCMFORGE_TEST_SEED) so random
 * tests explore new inputs each time yet can be replayed. */
#ifndef RF_TEST_H
#define RF_TEST_H

#define RF_TEST_MIN(a, b) ((a) < (b) ? (a) : (b))

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

extern int test_passed, test_failed, test_skipped;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            test_passed++;                                                 \
        } else {                                                           \
            test_failed++;                                                 \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

#define SKIP(...)                                                          \
    do {                                                                   \
        test_skipped++;                                                    \
        fprintf(stderr, "SKIP %s:%d: ", __FILE__, __LINE__);              \
        fprintf(stderr, __VA_ARGS__);                                      \
        fputc('\n', stderr);                                               \
    } while (0)

int test_finish(void);
/* Path under the shared data folder; returns a static buffer (rotating, 8 slots). */
const char *test_shared(const char *rel);
bool test_file_exists(const char *path);
/* Reads a whole file into a malloc'd buffer (NUL-terminated); NULL if missing. */
char *test_read_file(const char *path, size_t *len);

/* xorshift64* generator, seeded once per process. */
uint64_t test_rng(void);
float test_randf(float lo, float hi);
int test_randint(int lo, int hi); /* inclusive */
uint64_t test_seed(void);

/* Relative L2 error ||a-b|| / ||b||. */
double test_rel_l2(const float *a, const float *b, size_t n);
/* How many of an int8 copy's codes and scales (q[32 * nb], d[2 * nb]) differ from the GPU int8
 * path's quantization of v[32 * nb]: per 32 elements d = amax / 127, q = round-to-even(v * 127 /
 * amax) clamped to +-127 (0 where amax = 0), the pair {d, d * sum q}; a block holding inf or NaN
 * must have d = NaN (its codes are not compared) and is counted in *marked. */
size_t test_xq_diff(const float *v, const int8_t *q, const float *d, size_t nb, size_t *marked);

#endif
