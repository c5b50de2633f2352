/* The SIMD attention levels (attention_simd.h) against the scalar reference cpu_attention, at
 * every level this CPU has (a level it lacks is a SKIP): random q/K/V over head_dim 64, 80, 96,
 * 128, 40, 36 (not a multiple of 8: the AVX2 level hands it to the reference, AVX-512 masks),
 * visible lengths 1, 7, 33, 200, 1000, GQA groups 1, 4, 8, f32, f16, q8_0 and q4_0 caches (the
 * quantized ones at head_dim 32, 64, 96, 128: they need a multiple of 32), two sequences in
 * a paged cache with shuffled blocks of 32, 16 or 7 slots (unwritten slots hold NaN, so a read of
 * one shows), causal prompts (every position of a sequence in the batch) and decode-like tails,
 * the rows cut into 1-3 ranges at random places (as the thread split does, GQA groups cut too;
 * the result must be bit-identical to one uncut call).
 * Edge cases: a GQA group of 80 heads (split: the kernel takes 64 queries at once), scores
 * around 1e3 (exp without the max subtracted would overflow), a position whose score is -inf,
 * NaN in q (that row all NaN), NaN in V (that dimension NaN; with q8_0 and q4_0 the 32 of its
 * block, and the -inf in K makes its block NaN: they store a block with a non-finite element as
 * NaN).
 * q8_0 and q4_0 also exactly: such a cache's element reads as (code, or code - 8) times scale,
 * exact in f32, so the reference over it must equal, bit for bit, the reference over an f32 cache
 * holding those dequantized values (test_kv_unpack), and each SIMD level over it its own f32
 * path over that cache (the same vectors, the same arithmetic in the same order).
 *
 * Tolerance: with M = max |V| over the cache, every element |got - ref| <= 1e-5 * M, and over
 * the whole output relative L2 <= 1e-5 (measured worst on random cases, printed with
 * RF_TEST_VERBOSE=1: ~5e-7 and ~8e-7 respectively; both are f32 arithmetic in another order).
 * NaN must appear exactly where the reference has NaN. For scores of ~1e3 an f32 rounding of a
 * score is ~1e-4 absolute, which moves weights by ~1e-4 relative: there the bounds are 1e-3.
 * The vectorized exp of each level: at most 2 ulp from libm expf over [-104, 89] and exact
 * special values; each level's swiglu within 4 ulp of cpu_swiglu, special values as it gives them.
 * RF_TEST_VERBOSE=1 also times a 64- and a 512-token prompt per level and cache type, and one
 * decode step at depths 512 and 4096. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/attention_simd.h"
#include "backend/cpu/ops.h"
#include "core/dtype.h"
#include "core/kv_format.h"
#include "core/util.h"
#include "paged_kv.h"
#include "test.h"

enum { EDGE_NONE, EDGE_LARGE, EDGE_NEGINF, EDGE_NAN_Q, EDGE_NAN_V };
static const char *edge_name[] = {"random", "large scores", "-inf score", "NaN in q", "NaN in V"};

static double worst_abs[3], worst_l2[3]; /* per level, random cases only (scaled by M) */
static double worst_q8_abs[3], worst_q8_l2[3]; /* the same, q8_0 and q4_0 caches only */
static int verbose;

static void fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = test_randf(lo, hi);
}

/* Sequences of lengths len[0..n_seq); the batch holds the last tail[s] positions of sequence s,
 * tokens of the sequences interleaved. */
static void run_case(int n_head, int n_kv, int hd, int bsz, const int *len, const int *tail, int n_seq, uint32_t kvt,
                     int edge) {
    test_paged_kv c;
    test_paged_kv_make(&c, n_kv, hd, bsz, len, tail, n_seq);
    const int n_tok = c.n_tok, max_len = c.max_len, max_blocks = c.max_blocks;
    const size_t kvd = c.kvd, qd = (size_t)n_head * hd, n_slots = c.n_slots;
    int32_t *bt = c.bt, *pos = c.pos, *seq_row = c.seq_row;
    float *kc = c.kc, *vc = c.vc;
    float *q = malloc(4 * (size_t)n_tok * qd);
    fill(q, (size_t)n_tok * qd, -2, 2);
    const int group = n_head / n_kv;
    if (edge == EDGE_LARGE)
        for (size_t i = 0; i < (size_t)n_tok * qd; i++) q[i] *= 500.0f;
    if (edge == EDGE_NEGINF) { /* K[p = len/2, head 0][0] = -inf with q[., heads of group 0][0] > 0 */
        const int p = len[0] / 2;
        kc[test_paged_kv_slot(&c, 0, p) * kvd] = -INFINITY;
        for (int i = 0; i < n_tok; i++)
            for (int h = 0; h < group; h++) q[(size_t)i * qd + (size_t)h * hd] = test_randf(0.5f, 2.0f);
    }
    if (edge == EDGE_NAN_Q) q[(size_t)(n_tok - 1) * qd + (size_t)(n_head - 1) * hd + hd - 1] = NAN;
    if (edge == EDGE_NAN_V) vc[test_paged_kv_slot(&c, 0, 0) * kvd + 3] = NAN; /* sequence 0, position 0, dim 3 */
    void *kcs = test_kv_pack(kc, kvt, n_slots, kvd), *vcs = test_kv_pack(vc, kvt, n_slots, kvd);
    /* q8_0, q4_0: the values the cache holds, as an f32 cache (vmax and the exact checks use them) */
    float *kdq = NULL, *vdq = NULL;
    if (kvt == RF_TYPE_Q8_0 || kvt == RF_TYPE_Q4_0) {
        kdq = malloc(sizeof(float) * n_slots * kvd);
        vdq = malloc(sizeof(float) * n_slots * kvd);
        test_kv_unpack(kcs, kvt, n_slots, kvd, kdq);
        test_kv_unpack(vcs, kvt, n_slots, kvd, vdq);
    }
    const size_t n_out = (size_t)n_tok * qd;
    float *ref = malloc(4 * n_out), *got = malloc(4 * n_out);
    rf_step st = {.n_tokens = n_tok, .n_seq_rows = n_seq, .max_blocks = max_blocks, .block_size = bsz,
                  .max_pos = max_len - 1, .pos = pos, .seq_row = seq_row, .block_table = bt};
    rf_attn_dims dims = {n_head, n_kv, hd, 1.0f / sqrtf((float)hd), kvt};
    const int64_t rows = (int64_t)n_tok * n_head;
    cpu_attention(&st, &dims, q, kcs, vcs, ref, 0, rows);
    rf_attn_dims dims32 = dims;
    dims32.kv_type = RF_TYPE_F32;
    char what[200];
    snprintf(what, sizeof what, "%s: heads %d/%d hd %d bsz %d len %d/%d tokens %d kv %s", edge_name[edge], n_head, n_kv,
             hd, bsz, len[0], n_seq > 1 ? len[1] : 0, n_tok, rf_kv_type_name(kvt));
    if (kdq && max_len <= 200) { /* the reference over q8_0 / q4_0 = over the dequantized values, exactly
                                     (not at 1000 positions: the reference is the test's slow part) */
        float *r32 = malloc(4 * n_out);
        cpu_attention(&st, &dims32, q, kdq, vdq, r32, 0, rows);
        size_t nd = 0;
        for (size_t i = 0; i < n_out; i++) nd += !(r32[i] == ref[i] || (isnan(r32[i]) && isnan(ref[i])));
        CHECK(nd == 0, "reference %s: %zu outputs differ from the reference over the dequantized f32 cache", what, nd);
        free(r32);
    }
    const float *vval = vdq ? vdq : vc;
    double vmax = 0;
    for (int s = 0; s < n_seq; s++)
        for (int p = 0; p < len[s]; p++) {
            const size_t sl = test_paged_kv_slot(&c, s, p);
            for (size_t i = 0; i < kvd; i++)
                if (!isnan(vval[sl * kvd + i])) vmax = fmax(vmax, fabs(vval[sl * kvd + i]));
        }
    const double tol = edge == EDGE_LARGE ? 1e-3 : 1e-5;
    for (int isa = RF_ISA_AVX2; isa <= RF_ISA_AVX512; isa++) {
        const rf_attn_kernels *k = rf_attn_kernels_at((rf_isa)isa);
        if (!k) continue;
        for (size_t i = 0; i < n_out; i++) got[i] = -77.0f; /* poison: every output is written */
        /* 1-3 ranges of rows, cut anywhere */
        int64_t cut[4] = {0, rows, rows, rows};
        const int n_parts = test_randint(1, 3);
        for (int i = 1; i < n_parts; i++) cut[i] = test_randint((int)cut[i - 1], (int)rows);
        for (int i = 0; i < n_parts; i++)
            if (cut[i] < cut[i + 1]) k->attention(&st, &dims, q, kcs, vcs, got, cut[i], cut[i + 1]);
        double num = 0, den = 0, wabs = 0;
        size_t n_nan_bad = 0, n_bad = 0, first_bad = 0;
        for (size_t i = 0; i < n_out; i++) {
            if (isnan(ref[i]) || isnan(got[i])) {
                if (isnan(ref[i]) != isnan(got[i]) && n_nan_bad++ == 0) first_bad = i;
                continue;
            }
            const double e = fabs((double)got[i] - ref[i]);
            num += e * e;
            den += (double)ref[i] * ref[i];
            wabs = fmax(wabs, e);
            if (!(e <= tol * vmax) && n_bad++ == 0 && !n_nan_bad) first_bad = i;
        }
        const double l2 = den > 0 ? sqrt(num / den) : sqrt(num);
        const char *isa_name = rf_isa_name((rf_isa)isa);
        CHECK(n_nan_bad == 0 && n_bad == 0 && l2 <= tol, "%s %s: %zu NaN mismatches, %zu over %.0e * %.3g, rel L2 %.3g (first: [%zu] %.9g vs %.9g)",
              isa_name, what, n_nan_bad, n_bad, tol, vmax, l2, first_bad, got[first_bad], ref[first_bad]);
        /* batch invariance: the same bits whatever the cut (each head's arithmetic does not
         * depend on the heads processed with it) */
        float *one = malloc(4 * n_out);
        k->attention(&st, &dims, q, kcs, vcs, one, 0, rows);
        CHECK(!memcmp(one, got, 4 * n_out), "%s %s: result depends on how the rows were cut (%d parts)", isa_name, what,
              n_parts);
        if (kdq) { /* this level over q8_0 / q4_0 = this level over the dequantized f32 cache, bit for bit */
            k->attention(&st, &dims32, q, kdq, vdq, got, 0, rows);
            CHECK(!memcmp(one, got, 4 * n_out), "%s %s: differs from the level's f32 path over the dequantized cache",
                  isa_name, what);
        }
        free(one);
        if (edge == EDGE_NONE) {
            double *wa = kdq ? worst_q8_abs : worst_abs, *wl = kdq ? worst_q8_l2 : worst_l2;
            wa[isa] = fmax(wa[isa], vmax > 0 ? wabs / vmax : wabs);
            wl[isa] = fmax(wl[isa], l2);
        }
        if (edge == EDGE_LARGE) {
            size_t nf = 0;
            for (size_t i = 0; i < n_out; i++) nf += !isfinite(got[i]);
            CHECK(nf == 0, "%s %s: %zu non-finite outputs", isa_name, what, nf);
        }
        if (edge == EDGE_NAN_Q) {
            size_t nn = 0;
            for (int i = 0; i < hd; i++) nn += isnan(got[n_out - (size_t)hd + (size_t)i]);
            CHECK(nn == (size_t)hd, "%s %s: %zu of %d NaN in the row of the NaN query", isa_name, what, nn, hd);
        }
    }
    test_paged_kv_free(&c);
    free(q);
    free(kcs);
    free(vcs);
    free(kdq);
    free(vdq);
    free(ref);
    free(got);
}

static void test_random(void) {
    static const int hds[] = {64, 80, 96, 128, 40, 36, 32};
    static const uint32_t kvts[] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_Q8_0, RF_TYPE_Q4_0};
    static const int lens[] = {1, 7, 33, 200, 1000};
    static const int groups[] = {1, 4, 8};
    static const int bszs[] = {32, 16, 7};
    int ci = 0;
    for (size_t a = 0; a < sizeof hds / sizeof hds[0]; a++)
        for (size_t b = 0; b < sizeof lens / sizeof lens[0]; b++)
            for (size_t c = 0; c < sizeof groups / sizeof groups[0]; c++)
                for (size_t t = 0; t < sizeof kvts / sizeof kvts[0]; t++) {
                    /* q8_0 and q4_0 at the head_dims they take; 32 (one block per head) for them only */
                    const bool quant = kvts[t] == RF_TYPE_Q8_0 || kvts[t] == RF_TYPE_Q4_0;
                    if (quant ? hds[a] % 32 != 0 : hds[a] == 32) continue;
                    ci++;
                    const int L = lens[b];
                    /* sequence 0: a causal prompt up to 200 positions, else a tail of 5; sequence 1:
                     * about 2/3 as long, decode-like tail of up to 3 */
                    const int len[2] = {L, L * 2 / 3 > 0 ? L * 2 / 3 : 1};
                    const int tail[2] = {L <= 200 ? L : 5, len[1] < 3 ? len[1] : 3};
                    run_case(2 * groups[c], 2, hds[a], bszs[ci % 3], len, tail, 2, kvts[t], EDGE_NONE);
                }
}

static void test_edges(void) {
    static const uint32_t kvts[] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_Q8_0, RF_TYPE_Q4_0};
    for (size_t t = 0; t < sizeof kvts / sizeof kvts[0]; t++) {
        const uint32_t kvt = kvts[t];
        const int hd_small = kvt == RF_TYPE_Q8_0 || kvt == RF_TYPE_Q4_0 ? 32 : 40; /* head_dim % 32 == 0 */
        { /* a GQA group of 80 heads: more than the kernel takes at once (64) */
            const int len[2] = {33, 20}, tail[2] = {33, 2};
            run_case(80, 1, hd_small, 16, len, tail, 2, kvt, EDGE_NONE);
        }
        for (int edge = EDGE_LARGE; edge <= EDGE_NAN_V; edge++) {
            const int len[2] = {45, 20}, tail[2] = {45, 2};
            run_case(8, 2, 64, 32, len, tail, 2, kvt, edge);
            run_case(4, 4, hd_small, 16, len, tail, 2, kvt, edge);
            const int len1[1] = {1000}, tail1[1] = {3};
            run_case(8, 1, 128, 32, len1, tail1, 1, kvt, edge);
        }
    }
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_exp(void) {
    enum { N = 1 << 16 };
    float *x = malloc(4 * N), *y = malloc(4 * N);
    for (int isa = RF_ISA_AVX2; isa <= RF_ISA_AVX512; isa++) {
        const rf_attn_kernels *k = rf_attn_kernels_at((rf_isa)isa);
        if (!k) continue;
        uint32_t worst = 0;
        float worst_x = 0;
        for (int round = 0; round < 8; round++) {
            for (int i = 0; i < N; i++)
                x[i] = round == 0 ? -104.0f + 193.0f * (float)i / N : round < 4 ? test_randf(-104, 89) : test_randf(-2, 0.5f);
            k->exp(x, y, N - round); /* odd lengths: the tail */
            for (int i = 0; i < N - round; i++) {
                const float e = expf(x[i]);
                const uint32_t a = fbits(y[i]), b = fbits(e), d = a > b ? a - b : b - a;
                if (d > worst) worst = d, worst_x = x[i];
            }
        }
        CHECK(worst <= 2, "%s exp: %u ulp from expf at x = %.9g", rf_isa_name((rf_isa)isa), worst, worst_x);
        if (verbose) printf("%s exp: worst %u ulp (x = %.9g)\n", rf_isa_name((rf_isa)isa), worst, worst_x);
        const float sx[] = {0.0f, -INFINITY, INFINITY, NAN, -1000.0f, 1000.0f, 88.72f, -87.5f, -103.9f, -0.0f};
        float sy[10];
        k->exp(sx, sy, 10);
        int ok = 1;
        for (int i = 0; i < 10; i++) {
            const float e = expf(sx[i]);
            ok &= isnan(e) ? isnan(sy[i]) : (isinf(e) || e == 0 || i == 0 || i == 9) ? sy[i] == e : fabsf(sy[i] - e) <= 2e-7f * e + 1e-44f;
        }
        CHECK(ok, "%s exp: special values (exp(0) = 1, -inf -> 0, inf -> inf, NaN, overflow, underflow)", rf_isa_name((rf_isa)isa));
    }
    free(x);
    free(y);
}

/* The SIMD levels' swiglu against cpu_swiglu (libm expf): random gates over the whole useful range
 * and odd lengths (the tail), within 8 ulp: the SIMD exp's 2 ulp and libm's 1, then on both sides
 * an addition, a division and a product, are relative errors that add to at most ~12 units of
 * 2^-24, i.e. 6-12 ulp of the result depending on its mantissa (seeds give 3-4 typically; 5 was
 * seen once, 2026-11-22, at gate -16.77 with seed 15385696246705271, and failed the earlier bound
 * of 4; a wrong formula is off by far more); the
 * special values (0, -0, +-inf, NaN, large magnitudes) exactly as the reference gives them
 * (NaN where it is NaN, the same infinities and zeros); and in place (out == gate). */
static void test_swiglu(void) {
    enum { N = 1 << 14 };
    float *g = malloc(4 * N), *u = malloc(4 * N), *y = malloc(4 * N), *r = malloc(4 * N);
    for (int isa = RF_ISA_AVX2; isa <= RF_ISA_AVX512; isa++) {
        const rf_attn_kernels *k = rf_attn_kernels_at((rf_isa)isa);
        if (!k) continue;
        uint32_t worst = 0;
        float worst_g = 0;
        for (int round = 0; round < 6; round++) {
            const int n = N - round;
            for (int i = 0; i < n; i++) {
                g[i] = round < 2 ? test_randf(-100, 100) : test_randf(-8, 8);
                u[i] = test_randf(-4, 4);
            }
            cpu_swiglu(g, u, n, r);
            if (round == 5) {
                memcpy(y, g, 4 * (size_t)n);
                k->swiglu(y, u, n, y); /* in place */
            } else {
                k->swiglu(g, u, n, y);
            }
            for (int i = 0; i < n; i++) {
                const uint32_t a = fbits(y[i]), b = fbits(r[i]), d = a > b ? a - b : b - a;
                if ((y[i] == 0 && r[i] == 0) || d <= worst) continue;
                worst = d, worst_g = g[i];
            }
        }
        CHECK(worst <= 8, "%s swiglu: %u ulp from cpu_swiglu at gate %.9g", rf_isa_name((rf_isa)isa), worst, worst_g);
        const float sg[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1000.0f, -1000.0f, 88.0f, -88.0f, 3.0f, -3.0f};
        const float su[] = {2.0f, 2.0f, 1.0f, 1.0f, 1.0f, -1.0f, 1.0f, 0.0f, INFINITY, NAN, 1.0f};
        enum { NS = sizeof sg / sizeof sg[0] };
        float sy[NS], sr[NS];
        cpu_swiglu(sg, su, NS, sr);
        k->swiglu(sg, su, NS, sy);
        int ok = 1;
        for (int i = 0; i < NS; i++)
            ok &= isnan(sr[i]) ? isnan(sy[i]) : (isinf(sr[i]) || sr[i] == 0) ? sy[i] == sr[i] : fabsf(sy[i] - sr[i]) <= 1e-6f * fabsf(sr[i]);
        CHECK(ok, "%s swiglu: special values as cpu_swiglu", rf_isa_name((rf_isa)isa));
    }
    free(g);
    free(u);
    free(y);
    free(r);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* A prompt of n tokens of one sequence (positions 0..n-1), 32 heads / 8 KV heads, hd 64: the
 * 1B model's attention for one layer, on one thread. */
static void time_prompt(int n, uint32_t kvt) {
    const int n_head = 32, n_kv = 8, hd = 64, bsz = 32, mb = (n + bsz - 1) / bsz;
    const size_t kvd = (size_t)n_kv * hd, qd = (size_t)n_head * hd;
    float *kc = malloc(4 * (size_t)mb * bsz * kvd), *vc = malloc(4 * (size_t)mb * bsz * kvd);
    fill(kc, (size_t)mb * bsz * kvd, -1, 1);
    fill(vc, (size_t)mb * bsz * kvd, -1, 1);
    void *kcs = test_kv_pack(kc, kvt, (size_t)mb * bsz, kvd), *vcs = test_kv_pack(vc, kvt, (size_t)mb * bsz, kvd);
    float *q = malloc(4 * (size_t)n * qd), *out = malloc(4 * (size_t)n * qd);
    fill(q, (size_t)n * qd, -2, 2);
    int32_t *pos = malloc(4 * (size_t)n), *seq = calloc((size_t)n, 4), *bt = malloc(4 * (size_t)mb);
    for (int i = 0; i < n; i++) pos[i] = i;
    for (int i = 0; i < mb; i++) bt[i] = i;
    rf_step st = {.n_tokens = n, .n_seq_rows = 1, .max_blocks = mb, .block_size = bsz, .max_pos = n - 1, .pos = pos,
                  .seq_row = seq, .block_table = bt};
    rf_attn_dims dims = {n_head, n_kv, hd, 0.125f, kvt};
    for (int isa = RF_ISA_SCALAR; isa <= RF_ISA_AVX512; isa++) {
        const rf_attn_kernels *k = rf_attn_kernels_at((rf_isa)isa);
        if (isa != RF_ISA_SCALAR && !k) continue;
        double best = 1e9;
        const int reps = isa == RF_ISA_SCALAR && n > 100 ? 1 : 5;
        for (int rep = 0; rep < reps; rep++) {
            const double t0 = now_s();
            (k ? k->attention : cpu_attention)(&st, &dims, q, kcs, vcs, out, 0, (int64_t)n * n_head);
            best = fmin(best, now_s() - t0);
        }
        printf("prompt %d kv %s %s: %.3f ms per layer (1 thread, best of %d)\n", n, rf_kv_type_name(kvt),
               rf_isa_name((rf_isa)isa), best * 1e3, reps);
    }
    free(kc);
    free(vc);
    free(kcs);
    free(vcs);
    free(q);
    free(out);
    free(pos);
    free(seq);
    free(bt);
}

/* One decode step (a token at position depth) through 16 layers of the 1B model's attention
 * (32 heads / 8 KV heads, hd 64), each layer its own cache (16 x 2 x (depth + 1) rows: larger
 * than the caches at depth 4096, as in a real decode), one thread, best of 5. */
static void time_decode(int depth, uint32_t kvt) {
    enum { NL = 16 };
    const int n_head = 32, n_kv = 8, hd = 64, bsz = 32, mb = depth / bsz + 1;
    const size_t kvd = (size_t)n_kv * hd, rows = (size_t)mb * bsz;
    float *kc = malloc(4 * rows * kvd), *vc = malloc(4 * rows * kvd), q[2048], out[2048];
    fill(kc, rows * kvd, -1, 1);
    fill(vc, rows * kvd, -1, 1);
    fill(q, 2048, -2, 2);
    void *K[NL], *V[NL];
    for (int l = 0; l < NL; l++) {
        K[l] = test_kv_pack(kc, kvt, rows, kvd);
        V[l] = test_kv_pack(vc, kvt, rows, kvd);
    }
    int32_t pos = depth, seq = 0, *bt = malloc(4 * (size_t)mb);
    for (int i = 0; i < mb; i++) bt[i] = i;
    rf_step st = {.n_tokens = 1, .n_seq_rows = 1, .max_blocks = mb, .block_size = bsz, .max_pos = depth, .pos = &pos,
                  .seq_row = &seq, .block_table = bt};
    rf_attn_dims dims = {n_head, n_kv, hd, 0.125f, kvt};
    for (int isa = RF_ISA_AVX2; isa <= RF_ISA_AVX512; isa++) {
        const rf_attn_kernels *k = rf_attn_kernels_at((rf_isa)isa);
        if (!k) continue;
        double best = 1e9;
        for (int rep = 0; rep < 5; rep++) {
            const double t0 = now_s();
            for (int l = 0; l < NL; l++) k->attention(&st, &dims, q, K[l], V[l], out, 0, n_head);
            best = fmin(best, now_s() - t0);
        }
        const double bytes = 2.0 * NL * (depth + 1) * (double)rf_kv_row_bytes(kvt, (int64_t)kvd);
        printf("decode at depth %d kv %s %s: %.2f ms per token for 16 layers (1 thread, best of 5), %.1f GB/s of K/V\n",
               depth, rf_kv_type_name(kvt), rf_isa_name((rf_isa)isa), best * 1e3, bytes / best * 1e-9);
    }
    for (int l = 0; l < NL; l++) {
        free(K[l]);
        free(V[l]);
    }
    free(kc);
    free(vc);
    free(bt);
}

int main(void) {
    verbose = getenv("RF_TEST_VERBOSE") != NULL;
    int n_levels = 0;
    for (int isa = RF_ISA_AVX2; isa <= RF_ISA_AVX512; isa++) {
        if (rf_attn_kernels_at((rf_isa)isa)) n_levels++;
        else SKIP("attention level %s: this CPU lacks it", rf_isa_name((rf_isa)isa));
    }
    printf("SIMD attention levels on this CPU: %d\n", n_levels);
    test_exp();
    test_swiglu();
    test_random();
    test_edges();
    if (verbose) {
        for (int isa = RF_ISA_AVX2; isa <= RF_ISA_AVX512; isa++)
            if (rf_attn_kernels_at((rf_isa)isa))
                printf("%s random cases: worst |err| / max|V| %.3g, worst rel L2 %.3g (q8_0 / q4_0: %.3g, %.3g)\n",
                       rf_isa_name((rf_isa)isa), worst_abs[isa], worst_l2[isa], worst_q8_abs[isa], worst_q8_l2[isa]);
        const uint32_t kvts[] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_Q8_0, RF_TYPE_Q4_0};
        for (int t = 0; t < 4; t++) {
            time_prompt(64, kvts[t]);
            time_prompt(512, kvts[t]);
        }
        for (int depth = 512; depth <= 4096; depth *= 8)
            for (int t = 0; t < 4; t++) time_decode(depth, kvts[t]);
    }
    return test_finish();
}
