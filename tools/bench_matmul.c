/* bench_matmul: speed of rf_matmul on the shapes of a 1.1B llama (not a test).
 * Build and run (from the repository root, after `make`, or standalone):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Isrc -pthread -o build/bench_matmul tools/bench_matmul.c \
 *       src/core/{quant,dtype,util}.c src/backend/cpu/{threadpool,matmul}.c \
 *       build/obj/src/backend/cpu/matmul_avx2.o build/obj/src/backend/cpu/matmul_avx512.o -lm
 *   build/bench_matmul [threads] [types...]      (ROCMFORGE_ISA=avx2 etc. to pick the level)
 * Prints, per type and shape, matvec (n_tok = 1) GB/s of weights read (hot: the same matrix
 * again and again, mostly from L3; DRAM: cycling over copies larger than the caches) and pp64
 * (n_tok = 64) GFLOP/s (fastest repetition of each). Build with the library:
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Isrc -pthread -o build-perf/bench_matmul tools/bench_matmul.c \
 *       build-perf/librocmforge.a -lpcre2-8 -lm
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/matmul.h"
#include "backend/cpu/threadpool.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "core/util.h"

/* With one thread, time the calling thread's CPU time instead of wall time: on a shared machine
 * that leaves out the time the OS gives to other processes (set BENCH_WALL=1 for wall time). */
static int use_cpu_time;
static double now_s(void) {
    if (!use_cpu_time) return rf_time_s();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double bench(rf_threadpool *tp, rf_isa isa, uint32_t type, const void *w, int64_t n_out, int64_t n_in,
                    const float *x, int64_t n_tok, float *y, double min_s) {
    rf_matmul(tp, isa, type, w, n_out, n_in, x, n_tok, y); /* warm-up */
    /* Fastest of the repetitions: the machine is shared, the minimum is the least disturbed. */
    const double t0 = now_s();
    double best = 1e30;
    do {
        const double a = now_s();
        rf_matmul(tp, isa, type, w, n_out, n_in, x, n_tok, y);
        const double b = now_s() - a;
        if (b < best) best = b;
    } while (now_s() - t0 < min_s);
    return best;
}

int main(int argc, char **argv) {
    const int nth = argc > 1 ? atoi(argv[1]) : rf_physical_cores();
    const char *names[] = {"q4_0", "q8_0", "q4_K", "q5_K", "q6_K", "iq4_xs", "f16", "q2_K", "q3_K", "q4_1", "q5_0", "q5_1", "iq4_nl"};
    const uint32_t types[] = {RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K,
                              RF_TYPE_IQ4_XS, RF_TYPE_F16, RF_TYPE_Q2_K, RF_TYPE_Q3_K, RF_TYPE_Q4_1,
                              RF_TYPE_Q5_0, RF_TYPE_Q5_1, RF_TYPE_IQ4_NL};
    const int64_t shapes[][2] = {{2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}, {32000, 2048}};
    const rf_isa isa = rf_isa_best();
    rf_threadpool *tp = rf_threadpool_new(nth);
    use_cpu_time = nth == 1 && !getenv("BENCH_WALL");
    printf("isa %s, %d threads\n", rf_isa_name(isa), nth);
    float *x = malloc(sizeof(float) * 64 * 8192), *y = malloc(sizeof(float) * 64 * 32000);
    for (int i = 0; i < 64 * 8192; i++) x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        if (argc > 2) {
            int want = 0;
            for (int a = 2; a < argc; a++) want |= !strcmp(argv[a], names[k]);
            if (!want) continue;
        }
        double tot_cold = 0, tot_b = 0, tot_tv = 0, tot_f = 0, tot_tp = 0;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int64_t n_out = shapes[s][0], n_in = shapes[s][1];
            uint64_t rb;
            rf_row_bytes(types[k], (uint64_t)n_in, &rb);
            /* matvec also runs over enough copies (>= 96 MiB) that the weights come from DRAM, as in
             * a real decode step */
            const uint64_t mb = rb * (uint64_t)n_out;
            const int ncopy = (int)RF_MAX(1, (96ull << 20) / mb + 1);
            uint8_t *w = malloc(mb * (uint64_t)ncopy);
            float *row = malloc(sizeof(float) * (size_t)n_in);
            for (int64_t o = 0; o < n_out; o++) {
                for (int64_t i = 0; i < n_in; i++) row[i] = (float)(((o * 31 + i * 17) % 1000) - 500) / 500.0f;
                if (types[k] == RF_TYPE_Q2_K || types[k] == RF_TYPE_Q3_K) {
                    /* no encoder for these: pseudo-random codes, and f16 scales of 2^-7 in the
                     * superblock's d (and dmin) fields (layouts in quant.c) */
                    uint8_t *p = w + (uint64_t)o * rb;
                    for (uint64_t i = 0; i < rb; i++) p[i] = (uint8_t)(((uint64_t)o * 2654435761u + i * 40503u) >> 7);
                    const int sbb = types[k] == RF_TYPE_Q2_K ? 84 : 110, d_at = types[k] == RF_TYPE_Q2_K ? 80 : 108;
                    for (uint64_t b = 0; b < rb / (uint64_t)sbb; b++)
                        for (int f = 0; f < (types[k] == RF_TYPE_Q2_K ? 2 : 1); f++) memcpy(p + b * sbb + d_at + 2 * f, "\x00\x20", 2);
                } else if (rf_quantize_row(types[k], row, w + (uint64_t)o * rb, n_in)) {
                    fprintf(stderr, "%s: %s\n", names[k], rf_last_error());
                    return 1;
                }
            }
            for (int cpy = 1; cpy < ncopy; cpy++) memcpy(w + cpy * mb, w, mb);
            const double tv = bench(tp, isa, types[k], w, n_out, n_in, x, 1, y, 0.3);
            double tcold = 1e30;
            for (int rep = 0; rep < 3; rep++) {
                const double a = now_s();
                for (int cpy = 0; cpy < ncopy; cpy++) rf_matmul(tp, isa, types[k], w + cpy * mb, n_out, n_in, x, 1, y);
                tcold = RF_MIN(tcold, (now_s() - a) / ncopy);
            }
            const double tpp = bench(tp, isa, types[k], w, n_out, n_in, x, 64, y, 0.3);
            const double bytes = (double)rb * (double)n_out, flop = 2.0 * (double)n_out * (double)n_in * 64;
            printf("%-5s %5lld x %5lld  matvec %7.1f us %6.1f GB/s (DRAM %6.1f GB/s)  pp64 %8.1f us %7.1f GFLOP/s\n", names[k],
                   (long long)n_in, (long long)n_out, tv * 1e6, bytes / tv / 1e9, bytes / tcold / 1e9, tpp * 1e6, flop / tpp / 1e9);
            tot_cold += tcold;
            tot_b += bytes;
            tot_tv += tv;
            tot_f += flop;
            tot_tp += tpp;
            free(w);
            free(row);
        }
        printf("%-5s all shapes: matvec %.1f GB/s (DRAM %.1f GB/s), pp64 %.1f GFLOP/s\n", names[k], tot_b / tot_tv / 1e9,
               tot_b / tot_cold / 1e9, tot_f / tot_tp / 1e9);
    }
    rf_threadpool_free(tp);
    free(x);
    free(y);
    return 0;
}
