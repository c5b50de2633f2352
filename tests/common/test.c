#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int test_passed, test_failed, test_skipped;

int test_finish(void) {
    printf("RESULT %d %d %d\n", test_passed, test_failed, test_skipped);
    fflush(stdout);
    return test_failed ? 1 : 0;
}

const char *test_shared(const char *rel) {
    static char bufs[8][1024];
    static int slot;
    const char *root = getenv("ROCMFORGE_SHARED");
    if (!root || !*root) root = "../shared";
    char *b = bufs[slot++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", root, rel);
    return b;
}

bool test_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

static uint64_t rng_state;
uint64_t test_seed(void) {
    static uint64_t seed;
    if (!seed) {
        const char *s = getenv("ROCMFORGE_TEST_SEED");
        if (s && *s) {
            seed = strtoull(s, NULL, 0);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            seed = ((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40));
        }
        if (!seed) seed = 1;
        rng_state = seed;
        fprintf(stderr, "test seed: %llu (replay with ROCMFORGE_TEST_SEED)\n", (unsigned long long)seed);
    }
    return seed;
}

uint64_t test_rng(void) {
    if (!rng_state) test_seed();
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

float test_randf(float lo, float hi) {
    return lo + (hi - lo) * (float)((test_rng() >> 40) * (1.0 / 16777216.0));
}

int test_randint(int lo, int hi) { return lo + (int)(test_rng() % (uint64_t)(hi - lo + 1)); }

double test_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

size_t test_xq_diff(const float *v, const int8_t *q, const float *d, size_t nb, size_t *marked) {
    size_t bad = 0;
    for (size_t b = 0; b < nb; b++) {
        float amax = 0.0f;
        int nf = 0;
        for (int i = 0; i < 32; i++) {
            const float a = fabsf(v[32 * b + i]);
            if (!(a <= FLT_MAX)) nf = 1;
            amax = fmaxf(amax, a);
        }
        if (nf) {
            ++*marked;
            bad += !isnan(d[2 * b]);
            continue;
        }
        const float db = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        int sq = 0;
        for (int i = 0; i < 32; i++) {
            int c = (int)rintf(v[32 * b + i] * id);
            c = c > 127 ? 127 : (c < -127 ? -127 : c);
            sq += c;
            bad += q[32 * b + i] != c;
        }
        bad += d[2 * b] != db || d[2 * b + 1] != db * (float)sq;
    }
    return bad;
}
