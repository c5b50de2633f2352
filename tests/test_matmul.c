/* rf_matmul against the exact reference (each row decoded with rf_dequantize_row, dot products
 * in double) for every supported weight type, every ISA level this CPU has, 1 and 3 threads,
 * sizes that are not multiples of the SIMD width or the thread count; plus zeros, large and tiny
 * magnitudes, NaN/inf propagation, and the thread pool itself.
 *
 * Tolerance, per output element: |y - ref| <= tol * sum_i |W[o][i] * x[i]| + 1e-30, with
 *   tol = 1e-4 for the f32 paths (F32/F16/BF16 at every level, every type at the scalar level:
 *         f32 accumulation of <= 768 terms),
 *   tol = 1e-3 for F16/BF16 with 5 or more tokens at the AVX2 and AVX-512 VNNI levels (14-bit
 *         block codes for weights and x, gemm_i16.h; test_gemm_i16 checks its per-block bound),
 *   tol = 1e-2 for quantized types at the AVX2/AVX-512 levels (x quantized to int8 per 32;
 *         the measured worst is printed with RF_TEST_VERBOSE=1, typically ~2e-3),
 * and for the int8 path also sqrt(sum err^2) / sqrt(sum (sum_i |W x|)^2) <= 4e-3 over the output.
 * (An int8 block scale is set by the block's largest |x|: one huge outlier zeroes its 31
 * neighbours, as in ggml's q8 dot products; the edge test uses a moderate outlier.) */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/matmul.h"
#include "backend/cpu/gemm_i16.h"
#include "backend/cpu/threadpool.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "core/util.h"
#include "test.h"

static void f2h(uint8_t *p, float f) {
    uint16_t h = rf_fp32_to_fp16(f);
    memcpy(p, &h, 2);
}

/* Offsets of the f16 scale fields per block, so random blocks get sane scales. */
static int f16_fields(uint32_t type, int off[2]) {
    switch (type) {
    case RF_TYPE_Q4_0: case RF_TYPE_Q5_0: case RF_TYPE_Q8_0: case RF_TYPE_IQ4_NL: case RF_TYPE_IQ4_XS:
        off[0] = 0; return 1;
    case RF_TYPE_Q4_1: case RF_TYPE_Q5_1: case RF_TYPE_Q4_K: case RF_TYPE_Q5_K:
        off[0] = 0; off[1] = 2; return 2;
    case RF_TYPE_Q2_K: off[0] = 80; off[1] = 82; return 2;
    case RF_TYPE_Q3_K: off[0] = 108; return 1;
    case RF_TYPE_Q6_K: off[0] = 208; return 1;
    }
    return 0;
}

/* Random weights of `type`: random bytes with sane f16 scales for block types, random values
 * for the plain float types. */
static uint8_t *random_weights(uint32_t type, int64_t n_out, int64_t n_in, uint64_t *row_bytes) {
    const rf_type_info *ti = rf_type_get(type);
    rf_row_bytes(type, (uint64_t)n_in, row_bytes);
    const size_t total = (size_t)(*row_bytes * (uint64_t)n_out);
    uint8_t *w = malloc(total + 1);
    if (ti->block_elems == 1) {
        float *tmp = malloc(sizeof(float) * (size_t)n_in);
        for (int64_t o = 0; o < n_out; o++) {
            for (int64_t i = 0; i < n_in; i++) tmp[i] = test_randf(-1, 1);
            rf_quantize_row(type, tmp, w + (uint64_t)o * *row_bytes, n_in);
        }
        free(tmp);
        return w;
    }
    for (size_t i = 0; i < total; i++) w[i] = (uint8_t)test_rng();
    int off[2];
    const int nf = f16_fields(type, off);
    for (size_t b = 0; b < total / ti->block_bytes; b++)
        for (int f = 0; f < nf; f++) f2h(w + b * ti->block_bytes + off[f], test_randf(-0.05f, 0.05f));
    return w;
}

/* ref[t][o] and mag[t][o] = sum |w x| in double. */
static void reference(uint32_t type, const uint8_t *w, uint64_t row_bytes, int64_t n_out, int64_t n_in,
                      const float *x, int64_t n_tok, double *ref, double *mag) {
    float *row = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t o = 0; o < n_out; o++) {
        rf_dequantize_row(type, w + (uint64_t)o * row_bytes, row, n_in);
        for (int64_t t = 0; t < n_tok; t++) {
            double s = 0, m = 0;
            for (int64_t i = 0; i < n_in; i++) {
                s += (double)row[i] * (double)x[t * n_in + i];
                m += fabs((double)row[i] * (double)x[t * n_in + i]);
            }
            ref[t * n_out + o] = s;
            mag[t * n_out + o] = m;
        }
    }
    free(row);
}

static int is_int8_path(uint32_t type, rf_isa isa) {
    return isa != RF_ISA_SCALAR && type != RF_TYPE_F32 && type != RF_TYPE_F16 && type != RF_TYPE_BF16;
}

/* F16 / BF16 with RF_I16_ROWS_BELOW (5) or more tokens (fewer take the per-row f32
 * kernels) take the GEMM on 14-bit block codes (gemm_i16.h) at the AVX2 level, at the AVX-512
 * level where the CPU has AVX512_VNNI, and at the AMX level below gemm_amx.c's AMX_MIN_TOK (8
 * tokens); its error is about 1e-4 of sum|W x| at random values: 1e-3 here; test_gemm_i16 holds
 * it to its own sharper bound. */
static int is_int16_path(uint32_t type, rf_isa isa, int64_t n_tok) {
#if defined(__x86_64__)
    if ((type != RF_TYPE_F16 && type != RF_TYPE_BF16) || n_tok < RF_I16_ROWS_BELOW || isa == RF_ISA_SCALAR) return 0;
    return isa == RF_ISA_AVX2 || ((isa < RF_ISA_AMX || n_tok < 8) && __builtin_cpu_supports("avx512vnni"));
#else
    (void)type, (void)isa, (void)n_tok;
    return 0;
#endif
}

static double path_tol(uint32_t type, rf_isa isa, int64_t n_tok) {
    return is_int8_path(type, isa) ? 1e-2 : is_int16_path(type, isa, n_tok) ? 1e-3 : 1e-4;
}

static double worst_rel[RF_TYPE_COUNT][RF_ISA_COUNT];

/* Compares y with the reference; returns the number of bad elements. */
static int compare(uint32_t type, rf_isa isa, int64_t n_tok, const float *y, const double *ref, const double *mag,
                   int64_t n, const char *what) {
    const double tol = path_tol(type, isa, n_tok);
    int bad = 0;
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)y[i] - ref[i]);
        if (!(e <= tol * mag[i] + 1e-30)) {
            if (!bad)
                fprintf(stderr, "  %s %s %s: element %lld: y %.9g ref %.9g (|wx| %.3g)\n", what,
                        rf_type_name(type), rf_isa_name(isa), (long long)i, y[i], ref[i], mag[i]);
            bad++;
        }
        if (mag[i] > 0 && e / mag[i] > worst_rel[type][isa]) worst_rel[type][isa] = e / mag[i];
        num += e * e;
        den += mag[i] * mag[i];
    }
    /* whole-output error relative to the typical product scale sqrt(sum mag^2) */
    if (is_int8_path(type, isa) && den > 0 && sqrt(num / den) > 4e-3) {
        fprintf(stderr, "  %s %s %s: rel L2 %.4g\n", what, rf_type_name(type), rf_isa_name(isa), sqrt(num / den));
        bad++;
    }
    return bad;
}

static void test_random(rf_threadpool *tp3, rf_isa best) {
    static const int shapes[][3] = {/* n_out, n_tok, blocks (odd counts for 1-element types) */
                                    {1, 1, 1}, {3, 2, 2}, {17, 5, 3}, {67, 1, 3}, {5, 33, 1}, {67, 33, 2}, {4, 4, 5}, {3, 3, 7}, {2, 17, 9},
                                    /* whole 16-row tiles, several token groups, blocks past one packing step */
                                    {40, 19, 11}, {35, 1, 10}, {20, 7, 37},
                                    /* AVX2 GEMM (8-row tiles, 4- or 6-token passes, from 3 to 8 tokens): every
                                     * token remainder, rows not a multiple of 8 */
                                    {9, 14, 3}, {16, 12, 2}, {23, 10, 9}, {8, 6, 1}, {13, 11, 33},
                                    /* matvec kernels (one token, rows one at a time, legacy blocks in groups of
                                     * 8 then one at a time): odd row counts, every block remainder mod 8 */
                                    {33, 1, 8}, {19, 1, 15}, {5, 1, 17}, {70, 1, 12}, {3, 1, 13}, {7, 1, 14},
                                    {2, 1, 2}};
    for (uint32_t type = 0; type < RF_TYPE_COUNT; type++) {
        const rf_type_info *ti = rf_type_get(type);
        if (!ti || !ti->supported) continue;
        for (size_t s = 0; s < RF_ARRAY_LEN(shapes); s++) {
            const int64_t n_out = shapes[s][0], n_tok = shapes[s][1];
            /* plain types: odd lengths (1, 33, 67, ...) that leave SIMD tails */
            const int64_t n_in = ti->block_elems == 1 ? (int64_t)(34 * shapes[s][2] - 1) : (int64_t)ti->block_elems * shapes[s][2];
            uint64_t rb;
            uint8_t *w = random_weights(type, n_out, n_in, &rb);
            float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
            /* magnitudes that differ per 32-element block (0.25x .. 3.25x), so that a kernel
             * pairing a block's codes with another block's activation scale fails */
            for (int64_t i = 0; i < n_tok * n_in; i++) x[i] = test_randf(-2, 2) * (0.25f + (float)((i / 32 * 7) % 13) * 0.25f);
            double *ref = malloc(sizeof(double) * (size_t)(n_tok * n_out));
            double *mag = malloc(sizeof(double) * (size_t)(n_tok * n_out));
            reference(type, w, rb, n_out, n_in, x, n_tok, ref, mag);
            float *y = malloc(sizeof(float) * (size_t)(n_tok * n_out));
            for (int isa = 0; isa <= (int)best; isa++) {
                for (int th = 0; th < 2; th++) {
                    for (int64_t i = 0; i < n_tok * n_out; i++) y[i] = NAN;
                    rf_matmul(th ? tp3 : NULL, (rf_isa)isa, type, w, n_out, n_in, x, n_tok, y);
                    char what[96];
                    snprintf(what, sizeof what, "%lldx%lld tok %lld th %d", (long long)n_out, (long long)n_in,
                             (long long)n_tok, th ? 3 : 1);
                    const int bad = compare(type, (rf_isa)isa, n_tok, y, ref, mag, n_tok * n_out, what);
                    CHECK(bad == 0, "%s %s %s: %d bad elements", rf_type_name(type), rf_isa_name((rf_isa)isa), what, bad);
                }
            }
            free(w);
            free(x);
            free(ref);
            free(mag);
            free(y);
        }
    }
}

/* Zeros, huge and tiny magnitudes, NaN and inf in x. */
static void test_edges(rf_threadpool *tp3, rf_isa best) {
    const uint32_t types[] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_BF16, RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_Q4_K,
                              RF_TYPE_Q6_K, RF_TYPE_Q5_1, RF_TYPE_IQ4_NL, RF_TYPE_Q3_K};
    const int64_t n_out = 7, n_tok = 6;
    for (size_t k = 0; k < RF_ARRAY_LEN(types); k++) {
        const uint32_t type = types[k];
        const int64_t n_in = RF_MAX(256, (int64_t)rf_type_get(type)->block_elems);
        uint64_t rb;
        uint8_t *w = random_weights(type, n_out, n_in, &rb);
        float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
        float y[7 * 6];
        double ref[7 * 6], mag[7 * 6];
        for (int isa = 0; isa <= (int)best; isa++) {
            const char *tn = rf_type_name(type), *in = rf_isa_name((rf_isa)isa);
            /* x = 0 -> y = 0 exactly */
            memset(x, 0, sizeof(float) * (size_t)(n_tok * n_in));
            rf_matmul(tp3, (rf_isa)isa, type, w, n_out, n_in, x, n_tok, y);
            int nz = 0;
            for (int i = 0; i < n_out * n_tok; i++) nz += y[i] != 0.0f;
            CHECK(nz == 0, "%s %s: zero x gives %d non-zero outputs", tn, in, nz);
            /* token rows of different scale: 1e25, 1, 1e-35 (int8 scale would be subnormal),
             * and mixed */
            for (int64_t t = 0; t < n_tok; t++) {
                const float scale = t == 0 ? 1e25f : t == 1 ? 1e-35f : t == 2 ? 1e-20f : 1.0f;
                for (int64_t i = 0; i < n_in; i++) x[t * n_in + i] = test_randf(-1, 1) * scale;
            }
            x[3 * n_in + 5] = 4.0f; /* one moderate outlier in a block */
            reference(type, w, rb, n_out, n_in, x, n_tok, ref, mag);
            rf_matmul(tp3, (rf_isa)isa, type, w, n_out, n_in, x, n_tok, y);
            CHECK(compare(type, (rf_isa)isa, n_tok, y, ref, mag, n_out * n_tok, "magnitudes") == 0, "%s %s: magnitudes", tn, in);
            /* NaN in token 1, +inf in token 4: those rows become NaN/inf exactly as the
             * reference; the other tokens stay accurate. */
            for (int64_t i = 0; i < n_tok * n_in; i++) x[i] = test_randf(-1, 1);
            x[1 * n_in + 17] = NAN;
            x[4 * n_in + 200] = INFINITY;
            reference(type, w, rb, n_out, n_in, x, n_tok, ref, mag);
            rf_matmul(tp3, (rf_isa)isa, type, w, n_out, n_in, x, n_tok, y);
            int mism = 0, finite_bad = 0;
            for (int64_t t = 0; t < n_tok; t++) {
                for (int64_t o = 0; o < n_out; o++) {
                    const double r = ref[t * n_out + o];
                    const float v = y[t * n_out + o];
                    if (isnan(r)) mism += !isnan(v);
                    else if (isinf(r)) mism += !(isinf(v) && (v > 0) == (r > 0));
                    else {
                        const double tol = path_tol(type, (rf_isa)isa, n_tok);
                        finite_bad += !(fabs(v - r) <= tol * mag[t * n_out + o]);
                    }
                }
            }
            CHECK(mism == 0, "%s %s: %d NaN/inf outputs not propagated", tn, in, mism);
            CHECK(finite_bad == 0, "%s %s: %d finite outputs wrong next to NaN/inf rows", tn, in, finite_bad);
            /* every x row non-finite */
            for (int64_t t = 0; t < n_tok; t++) x[t * n_in] = NAN;
            rf_matmul(NULL, (rf_isa)isa, type, w, n_out, n_in, x, n_tok, y);
            int nn = 0;
            for (int i = 0; i < n_out * n_tok; i++) nn += !isnan(y[i]);
            CHECK(nn == 0, "%s %s: all-NaN x: %d outputs not NaN", tn, in, nn);
        }
        /* zero weights -> 0 */
        memset(w, 0, (size_t)(rb * (uint64_t)n_out));
        for (int64_t i = 0; i < n_tok * n_in; i++) x[i] = test_randf(-1, 1);
        for (int isa = 0; isa <= (int)best; isa++) {
            rf_matmul(tp3, (rf_isa)isa, type, w, n_out, n_in, x, n_tok, y);
            int nz = 0;
            for (int i = 0; i < n_out * n_tok; i++) nz += y[i] != 0.0f;
            CHECK(nz == 0, "%s %s: zero W gives %d non-zero outputs", rf_type_name(type), rf_isa_name((rf_isa)isa), nz);
        }
        free(w);
        free(x);
    }
}

/* The many-token f32-activation GEMMs (F32 / F16 / BF16; at the AMX level the tile GEMM of
 * gemm_amx.c, which takes 16 tokens or more): weight rows of f16-subnormal, ordinary and near-max
 * magnitudes; token rows of zeros, 1e25, 1e-35 and subnormals (its per-token scaling), one with a
 * NaN and one with an inf (its per-row f32 fallback). Shapes: one thread with takes of several
 * 64-row pieces, a short last block and a K past one 1024-step chunk with a ragged end; three
 * threads with two 64-token chunks (the second a partial group) and three K chunks. Tolerance
 * as above, with an absolute slack of 1e-42 only (float's subnormal spacing times the terms), so
 * that the tiny token rows are checked too. */
static void test_many_tokens_f32(rf_threadpool *tp3, rf_isa best) {
    static const int64_t shapes[][4] = {/* n_out, n_in, n_tok, threads */ {1100, 1100, 20, 1}, {37, 2111, 70, 3}};
    static const uint32_t types[] = {RF_TYPE_F16, RF_TYPE_BF16, RF_TYPE_F32};
    for (size_t k = 0; k < RF_ARRAY_LEN(types); k++)
        for (size_t s = 0; s < RF_ARRAY_LEN(shapes); s++) {
            const uint32_t type = types[k];
            const int64_t n_out = shapes[s][0], n_in = shapes[s][1], n_tok = shapes[s][2];
            uint64_t rb;
            rf_row_bytes(type, (uint64_t)n_in, &rb);
            uint8_t *w = malloc((size_t)(rb * (uint64_t)n_out));
            float *tmp = malloc(sizeof(float) * (size_t)n_in);
            for (int64_t o = 0; o < n_out; o++) {
                const float m = o % 3 == 0 ? 3e-6f : o % 3 == 1 ? 6e4f : 1.0f; /* 3e-6: f16 subnormals */
                for (int64_t i = 0; i < n_in; i++) tmp[i] = test_randf(-1, 1) * m;
                rf_quantize_row(type, tmp, w + (uint64_t)o * rb, n_in);
            }
            float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
            for (int64_t t = 0; t < n_tok; t++) {
                const float m = t == 3 ? 0.0f : t == 5 ? 1e25f : t == 8 ? 1e-35f : t == 11 ? 1e-41f : 1.0f;
                for (int64_t i = 0; i < n_in; i++) x[t * n_in + i] = test_randf(-1, 1) * m;
            }
            x[6 * n_in + n_in - 1] = NAN; /* in the K tail */
            x[17 * n_in + 40] = INFINITY;
            double *ref = malloc(sizeof(double) * (size_t)(n_tok * n_out)), *mag = malloc(sizeof(double) * (size_t)(n_tok * n_out));
            float *y = malloc(sizeof(float) * (size_t)(n_tok * n_out));
            reference(type, w, rb, n_out, n_in, x, n_tok, ref, mag);
            for (int isa = 0; isa <= (int)best; isa++) {
                for (int64_t i = 0; i < n_tok * n_out; i++) y[i] = -1.0f;
                rf_matmul(shapes[s][3] > 1 ? tp3 : NULL, (rf_isa)isa, type, w, n_out, n_in, x, n_tok, y);
                int bad = 0, zero = 0;
                for (int64_t t = 0; t < n_tok; t++)
                    for (int64_t o = 0; o < n_out; o++) {
                        const double r = ref[t * n_out + o];
                        const float v = y[t * n_out + o];
                        if (isnan(r)) bad += !isnan(v);
                        else if (isinf(r)) bad += !(isinf(v) && (v > 0) == (r > 0));
                        else bad += !(fabs(v - r) <= 1e-4 * mag[t * n_out + o] + 1e-42);
                        if (t == 3) zero += v != 0.0f;
                    }
                CHECK(bad == 0 && zero == 0, "%s %s %lldx%lld tok %lld: %d wrong outputs, %d non-zero for a zero token",
                      rf_type_name(type), rf_isa_name((rf_isa)isa), (long long)n_out, (long long)n_in, (long long)n_tok,
                      bad, zero);
            }
            free(w);
            free(tmp);
            free(x);
            free(ref);
            free(mag);
            free(y);
        }
}

/* The AMX level's int8 GEMM (gemm_amx.c) is the AVX-512 int8 GEMM with its integer products on
 * tiles: the same exact block sums and the same float epilogue, so its output must equal the
 * AVX-512 level's bit for bit. Shapes past one 1024-element packing chunk, with a last chunk of a
 * block count that is not a multiple of four (the kernel's four-block step) where the format
 * allows it, token groups of 16 with a partial last one, a NaN token (its f32 fallback). */
static void test_amx_int8_equals_avx512(rf_threadpool *tp3, rf_isa best) {
    if (best < RF_ISA_AMX) {
        SKIP("AMX int8 GEMM: this CPU has no AMX level");
        return;
    }
    const uint32_t types[] = {RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_IQ4_XS};
    const int64_t n_out = 37, n_tok = 45;
    for (size_t k = 0; k < RF_ARRAY_LEN(types); k++) {
        const int64_t n_in = rf_type_get(types[k])->block_elems == 32 ? 2144 : 2304;
        uint64_t rb;
        uint8_t *w = random_weights(types[k], n_out, n_in, &rb);
        float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
        float *ya = malloc(sizeof(float) * (size_t)(n_tok * n_out)), *yb = malloc(sizeof(float) * (size_t)(n_tok * n_out));
        for (int64_t i = 0; i < n_tok * n_in; i++) x[i] = test_randf(-2, 2) * (0.25f + (float)((i / 32 * 7) % 13) * 0.25f);
        x[20 * n_in + 7] = NAN;
        rf_matmul(tp3, RF_ISA_AVX512, types[k], w, n_out, n_in, x, n_tok, ya);
        rf_matmul(tp3, RF_ISA_AMX, types[k], w, n_out, n_in, x, n_tok, yb);
        int diff = 0;
        for (int64_t i = 0; i < n_tok * n_out; i++) diff += memcmp(&ya[i], &yb[i], sizeof(float)) != 0;
        CHECK(diff == 0, "%s: AMX and AVX-512 int8 GEMMs differ in %d of %lld outputs", rf_type_name(types[k]), diff,
              (long long)(n_tok * n_out));
        free(w);
        free(x);
        free(ya);
        free(yb);
    }
}

/* rf_matmul_many against rf_matmul on each matrix, bit for bit: sets of matrices sharing x with
 * mixed types (Q4_K_M's q/k/v), row counts that are not multiples of 16 or of the thread count,
 * an empty matrix, f32 next to int8 matrices, a NaN x, one token (the shared dispatch) and
 * several (one call per matrix). */
static void test_matmul_many(rf_threadpool *tp3, rf_isa best) {
    static const uint32_t sets[][3] = {{RF_TYPE_Q4_K, RF_TYPE_Q4_K, RF_TYPE_Q6_K}, {RF_TYPE_Q4_0, RF_TYPE_Q4_0, RF_TYPE_Q8_0},
                                       {RF_TYPE_F16, RF_TYPE_F16, RF_TYPE_F16}, {RF_TYPE_F16, RF_TYPE_F16, RF_TYPE_F32},
                                       {RF_TYPE_F16, RF_TYPE_Q4_0, RF_TYPE_IQ4_XS}};
    const int64_t n_in = 512, n_out[3] = {37, 0, 101};
    rf_threadpool *tp2 = rf_threadpool_new(2);
    for (int isa = 0; isa <= (int)best; isa++)
        for (size_t s = 0; s < RF_ARRAY_LEN(sets); s++)
            for (int variant = 0; variant < 4; variant++) {
                const int64_t n_tok = variant == 3 ? 3 : 1;
                const int64_t n1 = variant == 1 ? 16 : n_out[1]; /* variant 1: no empty matrix */
                rf_threadpool *tp = variant == 2 ? tp2 : tp3;
                uint8_t *w[3];
                float *ya[3], *yb[3];
                rf_mm_mat m[3];
                float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
                for (int64_t i = 0; i < n_tok * n_in; i++) x[i] = test_randf(-2, 2);
                if (variant == 2) x[100] = NAN;
                for (int j = 0; j < 3; j++) {
                    const int64_t no = j == 1 ? n1 : n_out[j];
                    uint64_t rb;
                    w[j] = random_weights(sets[s][j], no ? no : 1, n_in, &rb);
                    ya[j] = malloc(sizeof(float) * (size_t)(n_tok * no + 1));
                    yb[j] = malloc(sizeof(float) * (size_t)(n_tok * no + 1));
                    rf_matmul(tp, (rf_isa)isa, sets[s][j], w[j], no, n_in, x, n_tok, ya[j]);
                    m[j] = (rf_mm_mat){sets[s][j], w[j], no, yb[j]};
                }
                rf_matmul_many(tp, (rf_isa)isa, 3, m, n_in, x, n_tok);
                int diff = 0;
                for (int j = 0; j < 3; j++) {
                    diff += memcmp(ya[j], yb[j], sizeof(float) * (size_t)(n_tok * m[j].n_out)) != 0;
                    free(w[j]);
                    free(ya[j]);
                    free(yb[j]);
                }
                CHECK(diff == 0, "rf_matmul_many %s: %s / %s / %s, variant %d: %d of 3 outputs differ from rf_matmul",
                      rf_isa_name((rf_isa)isa), rf_type_name(sets[s][0]), rf_type_name(sets[s][1]),
                      rf_type_name(sets[s][2]), variant, diff);
                free(x);
            }
    rf_threadpool_free(tp2);
}

/* Extreme codes: every quant byte 0xFF, 0x80 or 0x00 (largest unsigned codes, Q8_0's -128,
 * smallest) against activations that quantize to +127 or -127 everywhere: the largest integer
 * sums the int8 kernels can meet, where an int16 step too many would saturate or wrap (random
 * codes and activations stay far below that). 12 tokens: the GEMM path at every level that has
 * one. */
static void test_extreme_codes(rf_threadpool *tp3, rf_isa best) {
    const int64_t n_out = 9, n_tok = 12;
    for (uint32_t type = 0; type < RF_TYPE_COUNT; type++) {
        const rf_type_info *ti = rf_type_get(type);
        if (!ti || !ti->supported || ti->block_elems == 1) continue;
        /* 32-element formats: 19 blocks, so block groups of 8 and a remainder of 3 both see them */
        const int64_t n_in = ti->block_elems == 32 ? 19 * 32 : RF_MAX(512, 2 * (int64_t)ti->block_elems);
        uint64_t rb;
        uint8_t *w = random_weights(type, n_out, n_in, &rb);
        const size_t total = (size_t)(rb * (uint64_t)n_out);
        float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t i = 0; i < n_in; i++) x[t * n_in + i] = t % 3 == 0 ? 1.0f : t % 3 == 1 ? -1.0f : test_randf(-1, 1);
        double *ref = malloc(sizeof(double) * (size_t)(n_tok * n_out)), *mag = malloc(sizeof(double) * (size_t)(n_tok * n_out));
        float *y = malloc(sizeof(float) * (size_t)(n_tok * n_out));
        static const uint8_t fills[] = {0xFF, 0x80, 0x00};
        for (size_t f = 0; f < RF_ARRAY_LEN(fills); f++) {
            memset(w, fills[f], total);
            int off[2];
            const int nf = f16_fields(type, off);
            for (size_t b = 0; b < total / ti->block_bytes; b++)
                for (int k = 0; k < nf; k++) f2h(w + b * ti->block_bytes + off[k], test_randf(0.01f, 0.05f));
            reference(type, w, rb, n_out, n_in, x, n_tok, ref, mag);
            for (int isa = 0; isa <= (int)best; isa++) {
                rf_matmul(tp3, (rf_isa)isa, type, w, n_out, n_in, x, n_tok, y);
                char what[64];
                snprintf(what, sizeof what, "bytes 0x%02X", fills[f]);
                CHECK(compare(type, (rf_isa)isa, n_tok, y, ref, mag, n_tok * n_out, what) == 0, "%s %s %s", rf_type_name(type),
                      rf_isa_name((rf_isa)isa), what);
                /* one token (the matvec kernels): all +127, all -127 */
                for (int64_t t = 0; t < 2; t++) {
                    rf_matmul(tp3, (rf_isa)isa, type, w, n_out, n_in, x + t * n_in, 1, y);
                    snprintf(what, sizeof what, "bytes 0x%02X one token %lld", fills[f], (long long)t);
                    CHECK(compare(type, (rf_isa)isa, 1, y, ref + t * n_out, mag + t * n_out, n_out, what) == 0, "%s %s %s",
                          rf_type_name(type), rf_isa_name((rf_isa)isa), what);
                }
            }
        }
        free(w);
        free(x);
        free(ref);
        free(mag);
        free(y);
    }
}

/* Batch consistency: a token's output computed alone or inside a batch of any size. The scalar
 * (reference) level must be bit-identical; the SIMD levels may use other kernels for other batch
 * sizes (matvec for one token, GEMM for many: different summation orders), so they only have to
 * agree to float rounding (1e-4 of the largest |y|; the exact-reference tolerances are checked in
 * test_random). */
static void test_batch_invariance(rf_threadpool *tp3, rf_isa best) {
    const uint32_t types[] = {RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_Q4_K, RF_TYPE_Q6_K, RF_TYPE_Q5_0, RF_TYPE_IQ4_NL,
                              RF_TYPE_Q2_K, RF_TYPE_Q3_K, RF_TYPE_Q4_1, RF_TYPE_Q5_1, RF_TYPE_F16};
    const int64_t n_out = 37, n_in = 768, n_tok = 21;
    for (size_t k = 0; k < RF_ARRAY_LEN(types); k++) {
        uint64_t rb;
        uint8_t *w = random_weights(types[k], n_out, n_in, &rb);
        float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
        float *yb = malloc(sizeof(float) * (size_t)(n_tok * n_out)), *y1 = malloc(sizeof(float) * (size_t)(n_tok * n_out));
        for (int64_t i = 0; i < n_tok * n_in; i++) x[i] = test_randf(-1, 1);
        for (int isa = 0; isa <= (int)best; isa++) {
            rf_matmul(tp3, (rf_isa)isa, types[k], w, n_out, n_in, x, n_tok, yb);
            /* the same tokens alone, and in uneven groups */
            for (int64_t t = 0; t < n_tok;) {
                const int64_t g = RF_MIN(n_tok - t, 1 + t % 7);
                rf_matmul(tp3, (rf_isa)isa, types[k], w, n_out, n_in, x + t * n_in, g, y1 + t * n_out);
                t += g;
            }
            int diff = 0;
            double ymax = 0, dmax = 0;
            for (int64_t i = 0; i < n_tok * n_out; i++) {
                diff += memcmp(&yb[i], &y1[i], sizeof(float)) != 0;
                ymax = fmax(ymax, fabs((double)yb[i]));
                dmax = fmax(dmax, fabs((double)yb[i] - (double)y1[i]));
            }
            if (isa == RF_ISA_SCALAR)
                CHECK(diff == 0, "%s %s: %d outputs differ between one batch and groups of 1..7 tokens",
                      rf_type_name(types[k]), rf_isa_name((rf_isa)isa), diff);
            else
                CHECK(dmax <= (is_int16_path(types[k], (rf_isa)isa, n_tok) ? 1e-3 : 1e-4) * ymax,
                      "%s %s: one batch vs groups of 1..7 tokens differ by %.3g (max |y| %.3g)",
                      rf_type_name(types[k]), rf_isa_name((rf_isa)isa), dmax, ymax);
        }
        free(w);
        free(x);
        free(yb);
        free(y1);
    }
}

#if defined(__x86_64__)
/* The error bound of gemm_i16_avx512.c's contract for output (t, o), from the blocks' maxima:
 * sum over 32-blocks of 0.51 * (s_w sum|x| + s_x sum|w| + 16 s_w s_x) (0.5 for the codes'
 * rounding, the rest for the float rounding of the scale and its reciprocal), plus 1e-5 of
 * sum|w x| for the float epilogue and 1e-44 per term for sums that end in float's subnormals
 * (the f32 fallback's tiny tokens). */
static double i16_bound(const float *row, const float *xr, int64_t n_in, double mag) {
    double e = 0;
    for (int64_t b = 0; b < n_in; b += 32) {
        double aw = 0, ax = 0, sw = 0, sx = 0;
        for (int64_t k = b; k < RF_MIN(n_in, b + 32); k++) {
            aw = fmax(aw, fabs(row[k])), ax = fmax(ax, fabs(xr[k]));
            sw += fabs(row[k]), sx += fabs(xr[k]);
        }
        aw /= 8191, ax /= 8191;
        e += 0.51 * (aw * sx + ax * sw + 16 * aw * ax);
    }
    return e + 1e-5 * mag + 1e-44 * (double)(n_in + 1);
}

/* One call of the int16 GEMM (one thread, 16-row takes) checked against the reference: outputs
 * within i16_bound where the reference is finite, NaN / inf where it is; returns the path flag. */
/* The int16 GEMM of one level: 0 AVX-512 VNNI, 1 AVX2 with vpmaddwd, 2 AVX2 with AVX-VNNI. */
static const char *const i16_level_name[3] = {"avx512", "avx2", "avx2-vnni"};
static int i16_run(int level, uint32_t type, const uint8_t *w, uint64_t rb, int64_t n_out, int64_t n_in,
                   const float *x, int64_t n_tok, float *y) {
    rf_rowq rq = {0, n_out, 16};
    return level == 0 ? rf_avx512_gemm_i16(type, w, rb, &rq, n_out, n_in, x, n_tok, y)
                      : rf_avx2_gemm_i16(type, w, rb, &rq, n_out, n_in, x, n_tok, y, level == 2);
}

static int i16_check(int level, uint32_t type, const uint8_t *w, uint64_t rb, int64_t n_out, int64_t n_in,
                     const float *x, int64_t n_tok, const char *what) {
    double *ref = malloc(sizeof(double) * (size_t)(n_tok * n_out)), *mag = malloc(sizeof(double) * (size_t)(n_tok * n_out));
    float *y = malloc(sizeof(float) * (size_t)(n_tok * n_out)), *row = malloc(sizeof(float) * (size_t)n_in);
    reference(type, w, rb, n_out, n_in, x, n_tok, ref, mag);
    for (int64_t i = 0; i < n_tok * n_out; i++) y[i] = -7.0f;
    const int ran = i16_run(level, type, w, rb, n_out, n_in, x, n_tok, y);
    int bad = 0;
    for (int64_t o = 0; o < n_out; o++) {
        rf_dequantize_row(type, w + (uint64_t)o * rb, row, n_in);
        for (int64_t t = 0; t < n_tok; t++) {
            const double r = ref[t * n_out + o];
            const float v = y[t * n_out + o];
            if (isnan(r)) bad += !isnan(v);
            else if (isinf(r)) bad += !(isinf(v) && (v > 0) == (r > 0));
            else bad += !(fabs(v - r) <= i16_bound(row, x + t * n_in, n_in, mag[t * n_out + o]));
        }
    }
    CHECK(bad == 0, "int16 GEMM %s %s %s %lldx%lld, %lld tokens: %d outputs outside the bound", i16_level_name[level],
          rf_type_name(type), what, (long long)n_out, (long long)n_in, (long long)n_tok, bad);
    free(ref);
    free(mag);
    free(y);
    free(row);
    return ran;
}

/* F16 / BF16 weights from floats of magnitude m(o) per row. */
static uint8_t *h_weights(uint32_t type, int64_t n_out, int64_t n_in, uint64_t *rb, float (*m)(int64_t o, int64_t k)) {
    rf_row_bytes(type, (uint64_t)n_in, rb);
    uint8_t *w = malloc((size_t)(*rb * (uint64_t)n_out));
    float *tmp = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t k = 0; k < n_in; k++) tmp[k] = test_randf(-1, 1) * m(o, k);
        rf_quantize_row(type, tmp, w + (uint64_t)o * *rb, n_in);
    }
    free(tmp);
    return w;
}
static float m_plain(int64_t o, int64_t k) { return 0.25f + (float)((o + k / 32) % 5); }
/* rows of f16 subnormals, near-max values and ordinary ones; blocks of mixed range in a row */
static float m_rows(int64_t o, int64_t k) {
    return o % 4 == 0 ? 3e-6f : o % 4 == 1 ? 6e4f : o % 4 == 2 ? (k % 32 == 5 ? 8.0f : 1.0f) : 0.01f;
}

/* gemm_i16.h: the F16 / BF16 GEMM on 14-bit block codes, at each level, against the exact reference,
 * within its stated error bound (which a code paired with another block's scale, or a wrapped
 * int32 sum, exceeds by orders of magnitude), on odd shapes; the sums at their largest (every
 * code +-8191, where one more step of code range would wrap); its fallbacks: one token and
 * non-finite token rows (whole call in f32), non-finite weights and, for BF16, scales out of
 * range (the tile in f32); and through rf_matmul with three threads, bit for bit the same. */
static void i16_level(rf_threadpool *tp3, int level) {
    static const int64_t shapes[][3] = {/* n_out, n_in, n_tok */ {37, 2111, 70}, {16, 32, 8}, {1, 1, 9},
                                        {33, 95, 17}, {50, 1100, 24}, {20, 64, 15}};
    static const uint32_t types[] = {RF_TYPE_F16, RF_TYPE_BF16};
    for (size_t ty = 0; ty < RF_ARRAY_LEN(types); ty++) {
        const uint32_t type = types[ty];
        for (size_t s = 0; s < RF_ARRAY_LEN(shapes); s++) {
            const int64_t n_out = shapes[s][0], n_in = shapes[s][1], n_tok = shapes[s][2];
            uint64_t rb;
            uint8_t *w = h_weights(type, n_out, n_in, &rb, s % 2 ? m_plain : m_rows);
            float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
            for (int64_t t = 0; t < n_tok; t++) {
                const float m = t == 3 ? 0.0f : t == 5 ? 1e25f : t == 6 ? 1e-30f : 1.0f;
                for (int64_t k = 0; k < n_in; k++) x[t * n_in + k] = test_randf(-2, 2) * m * (0.25f + (float)(k / 32 % 7));
            }
            CHECK(i16_check(level, type, w, rb, n_out, n_in, x, n_tok, "random") == 1, "%s %s %lld tokens took the int16 path",
                  i16_level_name[level], rf_type_name(type), (long long)n_tok);
            /* rf_matmul, three threads: the same rows, the same sums */
            if (level != 1 || !rf_avx2_has_vnni()) { /* the level rf_matmul takes on this CPU */
                float *y1 = malloc(sizeof(float) * (size_t)(n_tok * n_out)), *y3 = malloc(sizeof(float) * (size_t)(n_tok * n_out));
                i16_run(level, type, w, rb, n_out, n_in, x, n_tok, y1);
                rf_matmul(tp3, level ? RF_ISA_AVX2 : RF_ISA_AVX512, type, w, n_out, n_in, x, n_tok, y3);
                CHECK(!memcmp(y1, y3, sizeof(float) * (size_t)(n_tok * n_out)), "%s %s %lldx%lld: rf_matmul differs from one call",
                      i16_level_name[level], rf_type_name(type), (long long)n_out, (long long)n_in);
                free(y1);
                free(y3);
            }
            /* a NaN token: the whole call in f32 */
            x[(n_tok - 1) * n_in + n_in / 2] = NAN;
            CHECK(i16_check(level, type, w, rb, n_out, n_in, x, n_tok, "NaN token") == 0, "NaN token: f32 path");
            x[(n_tok - 1) * n_in + n_in / 2] = 1.0f;
            x[2 * n_in] = 1e-36f; /* alone in its block: the scale would be subnormal */
            for (int64_t k = 1; k < RF_MIN(32, n_in); k++) x[2 * n_in + k] = 0;
            CHECK(i16_check(level, type, w, rb, n_out, n_in, x, n_tok, "tiny block") == 0, "tiny block: f32 path");
            CHECK(i16_check(level, type, w, rb, n_out, n_in, x + n_in, 1, "one token") == 0, "one token: f32 path");
            CHECK(i16_check(level, type, w, rb, n_out, n_in, x, 2, "two tokens") == 1, "two tokens: int16 path");
            free(w);
            free(x);
        }
        /* Largest sums: every weight +-max of its type's codes' block, every activation +-1 */
        const int64_t n_out = 18, n_in = 96, n_tok = 9;
        uint64_t rb;
        rf_row_bytes(type, (uint64_t)n_in, &rb);
        uint8_t *w = malloc((size_t)(rb * (uint64_t)n_out));
        float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in)), *tmp = malloc(sizeof(float) * (size_t)n_in);
        for (int64_t o = 0; o < n_out; o++) {
            for (int64_t k = 0; k < n_in; k++) tmp[k] = o % 2 ? -60000.0f : 60000.0f;
            rf_quantize_row(type, tmp, w + (uint64_t)o * rb, n_in);
        }
        for (int64_t i = 0; i < n_tok * n_in; i++) x[i] = i / n_in % 2 ? -1.0f : 1.0f;
        CHECK(i16_check(level, type, w, rb, n_out, n_in, x, n_tok, "largest sums") == 1, "largest sums: int16 path");
        /* non-finite weights (and a BF16 block too small to scale): their tile in f32 */
        uint16_t *h = (uint16_t *)(void *)(w + 3 * rb);
        h[40] = type == RF_TYPE_F16 ? 0x7C00 : 0x7F80; /* +inf in row 3 */
        h = (uint16_t *)(void *)(w + 17 * rb);
        h[95] = type == RF_TYPE_F16 ? 0x7E00 : 0x7FC0; /* NaN in row 17 (the second tile, last element) */
        if (type == RF_TYPE_BF16) {
            h = (uint16_t *)(void *)(w + 5 * rb);
            for (int k = 0; k < 32; k++) h[k] = rf_fp32_to_bf16(k % 2 ? 1e-35f : -3e-36f);
        }
        for (int64_t i = 0; i < n_tok * n_in; i++) x[i] = test_randf(-1, 1);
        CHECK(i16_check(level, type, w, rb, n_out, n_in, x, n_tok, "non-finite weights") == 1, "non-finite weights: int16 path");
        free(w);
        free(x);
        free(tmp);
    }
}
static void test_gemm_i16(rf_threadpool *tp3, rf_isa best) {
    if (best < RF_ISA_AVX2) {
        SKIP("int16 GEMM: this CPU has no AVX2");
        return;
    }
    i16_level(tp3, 1);
    if (rf_avx2_has_vnni()) i16_level(tp3, 2);
    else SKIP("int16 GEMM on AVX-VNNI: this CPU has none");
    if (best >= RF_ISA_AVX512 && __builtin_cpu_supports("avx512vnni")) i16_level(tp3, 0);
    else SKIP("int16 GEMM on AVX-512 VNNI: this CPU has none");
}
#else
static void test_gemm_i16(rf_threadpool *tp3, rf_isa best) {
    (void)tp3, (void)best;
    SKIP("int16 GEMM: x86-64 only");
}
#endif

static _Atomic int tp_calls[8];
static _Atomic int tp_nth_ok;
static void tp_fn(void *ctx, int ith, int nth) {
    (void)ctx;
    atomic_fetch_add(&tp_calls[ith], 1);
    if (nth == 3) atomic_fetch_add(&tp_nth_ok, 1);
}

static void test_threadpool(rf_threadpool *tp3) {
    CHECK(rf_threadpool_size(tp3) == 3, "pool size %d", rf_threadpool_size(tp3));
    for (int r = 0; r < 200; r++) rf_threadpool_run(tp3, tp_fn, NULL);
    CHECK(tp_calls[0] == 200 && tp_calls[1] == 200 && tp_calls[2] == 200 && tp_nth_ok == 600,
          "every thread ran every job: %d %d %d", tp_calls[0], tp_calls[1], tp_calls[2]);
    rf_threadpool *one = rf_threadpool_new(0);
    CHECK(rf_threadpool_size(one) == 1, "size clamps to 1");
    rf_threadpool_free(one);
    CHECK(rf_physical_cores() >= 1, "physical cores %d", rf_physical_cores());
}

/* rf_cpu_weights_copy/free: copies are exact and 64-byte aligned, small ones share a slab,
 * one larger than a slab gets its own, and freeing in any order releases everything. */
static void test_weights(void) {
    enum { N = 40 };
    size_t sz[N];
    uint8_t *src[N], *dst[N];
    for (int i = 0; i < N; i++) {
        sz[i] = i == 7 ? ((size_t)80 << 20) + 3 : i == 9 ? 0 : (size_t)(1 + (i * 7919) % 300000);
        src[i] = malloc(sz[i] + 1);
        for (size_t j = 0; j < sz[i]; j += 97) src[i][j] = (uint8_t)(i + j);
        dst[i] = rf_cpu_weights_copy(src[i], sz[i]);
    }
    int bad = 0;
    for (int i = 0; i < N; i++) {
        bad += !dst[i] || ((uintptr_t)dst[i] & 63) || memcmp(dst[i], src[i], sz[i]);
        for (int j = 0; j < i; j++) /* no overlap */
            bad += dst[i] && dst[j] && dst[i] < dst[j] + sz[j] && dst[j] < dst[i] + sz[i];
    }
    CHECK(bad == 0, "weight copies: %d bad", bad);
    for (int i = 0; i < N; i += 2) rf_cpu_weights_free(dst[i]);
    for (int i = 1; i < N; i += 2) CHECK(!memcmp(dst[i], src[i], sz[i]), "weight copy %d intact after frees", i);
    for (int i = 1; i < N; i += 2) rf_cpu_weights_free(dst[i]);
    rf_cpu_weights_free(NULL);
    for (int i = 0; i < N; i++) free(src[i]);
}

int main(void) {
    const rf_isa best = rf_isa_best();
    printf("isa %s, physical cores %d\n", rf_isa_name(best), rf_physical_cores());
    CHECK(!strcmp(rf_isa_name(RF_ISA_AVX2), "avx2"), "isa names");
    rf_threadpool *tp3 = rf_threadpool_new(3);
    test_threadpool(tp3);
    test_weights();
    test_random(tp3, best);
    test_edges(tp3, best);
    test_extreme_codes(tp3, best);
    test_many_tokens_f32(tp3, best);
    test_gemm_i16(tp3, best);
    test_amx_int8_equals_avx512(tp3, best);
    test_matmul_many(tp3, best);
    test_batch_invariance(tp3, best);
    rf_threadpool_free(tp3);
    if (getenv("RF_TEST_VERBOSE"))
        for (uint32_t t = 0; t < RF_TYPE_COUNT; t++)
            if (worst_rel[t][0] + worst_rel[t][1] + worst_rel[t][2] + worst_rel[t][3] > 0)
                printf("%-7s worst |err|/sum|wx|: scalar %.2e avx2 %.2e avx512 %.2e amx %.2e\n", rf_type_name(t),
                       worst_rel[t][0], worst_rel[t][1], worst_rel[t][2], worst_rel[t][3]);
    return test_finish();
}
