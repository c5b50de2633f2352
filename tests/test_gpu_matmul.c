/* GPU matmul (src/backend/gpu/matmul.cu, matmul_formats.cu) against the CPU oracle.
 *
 * 1. Host decode check (no GPU needed): the device block decoders, run on the host through
 *    rf_gpu_mm_host_decode, must equal rf_dequantize_row bit for bit on random blocks of every
 *    type (and the 16-byte plain-type decoders too).
 *    The IQ4 codebook lookups of the int8 units (rf_gpu_mm_host_iq4_dot: CUDA's by prmt's sign
 *    mode, HIP's by permutes and a select) against the codebook, every nibble value at every
 *    position and random words.
 * 2. On a device: for every type, random weights (random bytes with sane f16 scales for the
 *    quantized types; encoded random floats for F32/F16/BF16), random x, y = x W^T (+ bias)
 *    for n = 1, 2, 7, 16 (matvec), 17, 33, 100 (GEMM; on CUDA through cuBLAS and again through
 *    the tiled kernel), shapes whose n_out / n_in are not multiples of the tiles, bias on and
 *    off, x misaligned (scalar x loads). Output poisoned with NaN before each call.
 *    Oracle: rows decoded by rf_dequantize_row, dot in double. Tolerance per output:
 *    |y - ref| <= tol * (sum_i |w_i x_i| + |bias|), tol = 1e-4 for f32 paths and 2e-3 for the f16
 *    GEMM path (x and decoded W rounded to f16: 2^-11 relative each). For n <= 2 the quantized types
 *    may take the int8-activation path (x rounded to int8 per 32-element block: q = round(x / d),
 *    d = amax / 127, so |x - q d| <= d / 2): the tolerance then adds that rounding's exact worst
 *    case, 1.01 * sum_i |w_i| d_b(i) / 2 (b(i): the block of element i; 1 % slack for the f32
 *    scale arithmetic). For random x this is ~1e-2 of sum |w x| (like the CPU int8 path's
 *    tol = 1e-2 in tests/test_matmul.c) but it is a bound, not a statistical guess.
 *    Non-finite x (n = 1, 2, 3, 33): a NaN in a column makes that whole output column NaN; an inf
 *    gives exactly the oracle's inf / NaN per output (the int8 path recomputes such a column in f32).
 *    A few cases run again on a context with RF_MM_F32_MV=1 (the f32 matvec kernels at n <= 2).
 *    Long decode matvecs (test_mv_long: 9000-13000 rows, n = 1) make every warp of the persistent
 *    matvec walk several rows and steps; they and test_ex run again with RF_MM_TMA=0 (k_mvp
 *    where the default takes the bulk-copy kernel k_mvt). The fused gate / up / swiglu decode
 *    matvec of F16 / BF16 (test_gate_up_swiglu) must equal the unfused calls bit for bit, as must
 *    the two-format decode launch of Q4_K (or Q5_K H) with Q6_K X8 outputs (test_mixed_formats).
 *    Decode calls sized from the wave the matvec reports (test_decode_pair_bounds) put a job
 *    boundary inside a warp's second or later row pair, where k_mvt's paired refill crosses it.
 *    Device layouts (rf_gpu_mm_repack: Q4_0 / Q8_0 / Q6_K / IQ4_NL X8, IQ4_XS's nibble order and
 *    Q5_K's fifth-bit words, rearranged on the device; "/dev" in test names) run the same checks:
 *    the weight is uploaded in GGUF order, repacked (in place, or into a new buffer where Q6_K's
 *    rows end in a partial group; the result compared byte for byte with
 *    rf_gpu_mm_host_repack's), and compared with the same oracle; the host decoders of the
 *    layouts are checked bit for bit on rf_gpu_mm_host_repack'ed rows.
 * 3. Errors: unsupported type and bad n_in return -1.
 * Without a GPU (or a build without a GPU toolchain) the device checks SKIP with a count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/quant.h"
#include "core/util.h"
#include "test.h"

#if defined(RF_HAVE_CUDA) || defined(RF_HAVE_HIP)
#include "backend/gpu/kernels.h"
#include "backend/gpu/matmul_gpu.h"

static const uint32_t TYPES[] = {RF_TYPE_F32,  RF_TYPE_F16,  RF_TYPE_BF16, RF_TYPE_Q4_0,   RF_TYPE_Q4_1,
                                 RF_TYPE_Q5_0, RF_TYPE_Q5_1, RF_TYPE_Q8_0, RF_TYPE_Q2_K,   RF_TYPE_Q3_K,
                                 RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K, RF_TYPE_IQ4_NL, RF_TYPE_IQ4_XS};
#define N_TYPES ((int)(sizeof TYPES / sizeof TYPES[0]))
#define LAYOUT RF_GPU_MM_LAYOUT
/* The GGUF type of a test type (device-layout variants: the type they are repacked from). */
static uint32_t base_type(uint32_t t) { return t & ~(uint32_t)LAYOUT; }
/* What n_in of a device layout must divide by: 8 blocks (Q4_0, Q8_0, IQ4_NL), one superblock
 * (Q6_K, whose rows may end in a partial group of 8, IQ4_XS, Q5_K). */
#define LAYOUT_UNIT 256
/* Test-type names: "q4_0/dev" for the repacked variants. */
static const char *tname(uint32_t t) {
    static char buf[4][32];
    static int k;
    if (!(t & LAYOUT)) return rf_type_name(t);
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/dev", rf_type_name(base_type(t)));
    return buf[k];
}

static void put_f16(uint8_t *p, float f) {
    uint16_t h = rf_fp32_to_fp16(f);
    memcpy(p, &h, 2);
}

static float gauss(void) {
    float s = 0;
    for (int i = 0; i < 4; i++) s += test_randf(-1.0f, 1.0f);
    return s * 0.5f;
}

/* Fills `rows` rows of n_in elements of `type` into buf. */
static void make_weights(uint32_t type, int64_t rows, int64_t n_in, uint8_t *buf) {
    const rf_type_info *ti = rf_type_get(type);
    uint64_t rb = 0;
    rf_row_bytes(type, (uint64_t)n_in, &rb);
    if (ti->block_elems == 1) {
        float *tmp = malloc(sizeof(float) * (size_t)n_in);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < n_in; i++) tmp[i] = gauss();
            rf_quantize_row(type, tmp, buf + r * rb, n_in);
        }
        free(tmp);
        return;
    }
    const int64_t nblocks = rows * (n_in / ti->block_elems);
    for (int64_t b = 0; b < nblocks; b++) {
        uint8_t *p = buf + b * ti->block_bytes;
        for (uint32_t i = 0; i < ti->block_bytes; i++) p[i] = (uint8_t)test_rng();
        const float d = test_randf(0.002f, 0.05f), m = test_randf(-0.2f, 0.2f), dmin = test_randf(0.0f, 0.02f);
        switch (type) {
        case RF_TYPE_Q4_0: case RF_TYPE_Q5_0: case RF_TYPE_Q8_0: case RF_TYPE_IQ4_NL: case RF_TYPE_IQ4_XS:
            put_f16(p, d);
            break;
        case RF_TYPE_Q4_1: case RF_TYPE_Q5_1:
            put_f16(p, d);
            put_f16(p + 2, m);
            break;
        case RF_TYPE_Q4_K: case RF_TYPE_Q5_K:
            put_f16(p, d * 0.1f);
            put_f16(p + 2, dmin);
            break;
        case RF_TYPE_Q2_K:
            put_f16(p + 80, d);
            put_f16(p + 82, dmin);
            break;
        case RF_TYPE_Q3_K: put_f16(p + 108, d * 0.1f); break;
        case RF_TYPE_Q6_K: put_f16(p + 208, d * 0.01f); break;
        default: break;
        }
    }
}

/* rows random rows of type (make_weights) in *w and their f32 decode (rf_dequantize_row) in *wf,
 * both malloc'ed; *rb: the bytes of a row. */
static void make_weights_f32(uint32_t type, int64_t rows, int64_t n_in, uint8_t **w, float **wf, uint64_t *rb) {
    rf_row_bytes(type, (uint64_t)n_in, rb);
    *w = malloc(*rb * (uint64_t)rows);
    make_weights(type, rows, n_in, *w);
    *wf = malloc(sizeof(float) * (size_t)(rows * n_in));
    for (int64_t o = 0; o < rows; o++) rf_dequantize_row(type, *w + o * *rb, *wf + o * n_in, n_in);
}

static void test_host_decode(void) {
    for (int t = 0; t < N_TYPES; t++) {
        const uint32_t type = TYPES[t];
        const rf_type_info *ti = rf_type_get(type);
        const int64_t n_in = ti->block_elems == 1 ? 264 : ti->block_elems * 5;
        uint64_t rb = 0;
        rf_row_bytes(type, (uint64_t)n_in, &rb);
        uint8_t *row = malloc(rb);
        float *ref = malloc(sizeof(float) * (size_t)n_in), *got = malloc(sizeof(float) * (size_t)n_in);
        for (int vec = 0; vec <= (ti->block_elems == 1); vec++) {
            int bad = -1;
            for (int rep = 0; rep < 20 && bad < 0; rep++) {
                make_weights(type, 1, n_in, row);
                rf_dequantize_row(type, row, ref, n_in);
                for (int64_t i = 0; i < n_in; i++) got[i] = NAN;
                rf_gpu_mm_host_decode(type, row, n_in, got, vec);
                for (int64_t i = 0; i < n_in && bad < 0; i++)
                    if (memcmp(&got[i], &ref[i], 4)) bad = (int)i;
            }
            CHECK(bad < 0, "host decode %s%s: element %d got %g want %g", rf_type_name(type), vec ? " (vector)" : "", bad,
                  bad >= 0 ? got[bad] : 0.0, bad >= 0 ? ref[bad] : 0.0);
        }
        free(row);
        free(ref);
        free(got);
    }
}

/* Device layouts: the host decoders of the repacked rows equal rf_dequantize_row of the GGUF rows;
 * types or shapes without a device layout are refused (0). */
static void test_host_decode_layouts(void) {
    /* Q6_K three times: rows of a partial group of 8 superblocks only, of whole groups, of both */
    static const uint32_t XT[] = {RF_TYPE_Q4_0,   RF_TYPE_Q8_0, RF_TYPE_Q6_K, RF_TYPE_Q6_K,
                                  RF_TYPE_Q6_K,   RF_TYPE_IQ4_NL, RF_TYPE_IQ4_XS, RF_TYPE_Q5_K};
    for (size_t t = 0; t < sizeof XT / sizeof XT[0]; t++) {
        const uint32_t type = XT[t];
        const int64_t groups = t == 2 ? 0 : test_randint(1, 2), part = t == 3 ? 0 : test_randint(1, 7);
        const int64_t n_in = LAYOUT_UNIT * (type == RF_TYPE_Q6_K ? 8 * groups + part : test_randint(1, 20));
        uint64_t rb = 0;
        rf_row_bytes(type, (uint64_t)n_in, &rb);
        const int64_t drb = rf_gpu_mm_row_bytes(type | LAYOUT, n_in);
        uint8_t *row = malloc(rb), *pk = malloc((size_t)drb);
        float *ref = malloc(sizeof(float) * (size_t)n_in), *got = malloc(sizeof(float) * (size_t)n_in);
        int bad = -1;
        for (int rep = 0; rep < 20 && bad < 0; rep++) {
            make_weights(type, 1, n_in, row);
            rf_dequantize_row(type, row, ref, n_in);
            memset(pk, 0xAB, (size_t)drb);
            const uint32_t xt = rf_gpu_mm_host_repack(type, row, pk, n_in);
            if (xt != (type | LAYOUT)) {
                bad = -2;
                break;
            }
            for (int64_t i = 0; i < n_in; i++) got[i] = NAN;
            rf_gpu_mm_host_decode(xt, pk, n_in, got, 0);
            for (int64_t i = 0; i < n_in && bad < 0; i++)
                if (memcmp(&got[i], &ref[i], 4)) bad = (int)i;
        }
        CHECK(bad < 0, "host decode %s (n_in %lld): %s %d", tname(type | LAYOUT), (long long)n_in,
              bad == -2 ? "repack refused" : "element", bad);
        if (type != RF_TYPE_IQ4_XS) /* (IQ4_XS rows are whole superblocks) */
            CHECK(rf_gpu_mm_host_repack(type, row, pk, 224) == 0, "%s: n_in 224 has no device layout",
                  rf_type_name(type));
        CHECK(drb == (type == RF_TYPE_Q6_K ? (n_in / 2048) * 1680 + (n_in % 2048 ? 144 + n_in % 2048 / 256 * 192 : 0)
                                           : (int64_t)rb),
              "%s/dev: %lld bytes per row of %lld", rf_type_name(type), (long long)drb, (long long)n_in);
        free(row);
        free(pk);
        free(ref);
        free(got);
    }
    uint8_t b[300] = {0}, o[300];
    CHECK(rf_gpu_mm_host_repack(RF_TYPE_Q4_K, b, o, 256) == 0, "q4_K has no device layout");
    /* Llama-2-7B's ffn_down rows: 43 superblocks, 5 whole groups and a partial one of 3 */
    CHECK(rf_gpu_mm_row_bytes(RF_TYPE_Q6_K | LAYOUT, 11008) == 9120, "q6_K/dev row of 11008");
    CHECK(rf_gpu_mm_row_bytes(RF_TYPE_Q6_K, 11008) == 9030, "q6_K row of 11008");
    CHECK(rf_gpu_mm_row_bytes(RF_TYPE_Q4_0 | LAYOUT, 224) == -1, "q4_0/dev has no row of 224");
}

/* Worst-case error of the int8-activation rounding for one output: sum_i |w_i| * d_b(i) / 2,
 * d_b = max_{j in block b} |x_j| / 127 over 32-element blocks of x (matmul_gpu.h). */
static double q8_bound(const float *w, const double *x, int64_t n_in) {
    double s = 0;
    for (int64_t b = 0; b < n_in; b += 32) {
        double amax = 0, sw = 0;
        for (int64_t i = b; i < b + 32 && i < n_in; i++) {
            if (fabs(x[i]) > amax) amax = fabs(x[i]);
            sw += fabs((double)w[i]);
        }
        s += sw * amax / 127.0 * 0.5;
    }
    return s;
}

/* Host check of the int8-activation unit layouts (rf_gpu_mm_host_qdot) against the double oracle
 * with the int8 rounding bound (no GPU needed). */
static void test_host_qdot(void) {
    static const uint32_t QT[] = {RF_TYPE_Q4_0,          RF_TYPE_Q4_1,          RF_TYPE_Q5_0,
                                  RF_TYPE_Q5_1,          RF_TYPE_Q8_0,          RF_TYPE_Q4_K,
                                  RF_TYPE_Q5_K,          RF_TYPE_Q6_K,          RF_TYPE_Q4_0 | LAYOUT,
                                  RF_TYPE_Q8_0 | LAYOUT, RF_TYPE_IQ4_NL,        RF_TYPE_IQ4_XS,
                                  RF_TYPE_Q2_K,          RF_TYPE_Q3_K,          RF_TYPE_Q6_K | LAYOUT,
                                  RF_TYPE_IQ4_NL | LAYOUT, RF_TYPE_IQ4_XS | LAYOUT, RF_TYPE_Q5_K | LAYOUT};
    for (size_t t = 0; t < sizeof QT / sizeof QT[0]; t++) {
        const uint32_t type = QT[t], bt = base_type(type);
        /* Q6_K: a whole group and a partial one */
        const int64_t n_in = type == (RF_TYPE_Q6_K | LAYOUT) ? 2816 : 768;
        uint64_t rb = 0;
        rf_row_bytes(bt, (uint64_t)n_in, &rb);
        const int64_t drb = (type & LAYOUT) ? rf_gpu_mm_row_bytes(type, n_in) : (int64_t)rb;
        uint8_t *row = malloc(rb + 16), *pk = malloc((size_t)drb + 16);
        float *wf = malloc(sizeof(float) * (size_t)n_in), *x = malloc(sizeof(float) * (size_t)n_in);
        double *xd = malloc(sizeof(double) * (size_t)n_in);
        double worst = 0;
        int rc = 0;
        for (int rep = 0; rep < 40 && rc == 0; rep++) {
            /* 2-byte offset rows where the layout allows them (device layouts: 16-byte aligned) */
            uint8_t *r = row + 2 * (rep % 2 && !(type & LAYOUT) && rf_type_get(bt)->block_bytes % 4 ? 1 : 0);
            make_weights(bt, 1, n_in, r);
            rf_dequantize_row(bt, r, wf, n_in);
            if (type & LAYOUT) r = rf_gpu_mm_host_repack(bt, r, pk, n_in) == type ? pk : NULL;
            for (int64_t i = 0; i < n_in; i++) xd[i] = x[i] = gauss() * (rep % 3 ? 1.0f : 100.0f);
            double got = 0, ref = 0, mag = 0;
            rc = r ? rf_gpu_mm_host_qdot(type, r, n_in, x, &got) : -1;
            for (int64_t i = 0; i < n_in; i++) {
                ref += (double)wf[i] * xd[i];
                mag += fabs((double)wf[i] * xd[i]);
            }
            const double e = fabs(got - ref) / (1e-5 * mag + 1.01 * q8_bound(wf, xd, n_in) + 1e-30);
            if (!(e <= worst)) worst = e;
        }
        CHECK(rc == 0 && worst <= 1.0, "host int8 dot %s: rc %d, worst error %.3g x bound", tname(type), rc, worst);
        free(row);
        free(pk);
        free(wf);
        free(x);
        free(xd);
    }
}

typedef struct {
    rf_gpu_matmul_ctx *ctx;
    int has_cublas;
} gpu_env;

/* Device copy of `rows` GGUF rows w of base_type(type) (+ the weight padding); device-layout test
 * types are then repacked on the device (the call must report the layout type). NULL + a failed
 * check on error. */
static void *upload_w(gpu_env *env, uint32_t type, const uint8_t *w, int64_t rows, int64_t n_in) {
    uint64_t rb = 0;
    rf_row_bytes(base_type(type), (uint64_t)n_in, &rb);
    const size_t bytes = (size_t)(rb * (uint64_t)rows);
    void *dw = rf_gpu_mm_alloc(bytes + RF_GPU_WEIGHT_PAD);
    if (!dw || rf_gpu_mm_upload(dw, w, bytes) || rf_gpu_mm_fill((uint8_t *)dw + bytes, 0, RF_GPU_WEIGHT_PAD)) {
        CHECK(0, "weight upload: %s", rf_last_error());
        rf_gpu_mm_dfree(dw);
        return NULL;
    }
    if (type & LAYOUT) {
        /* in place where the layout keeps the row bytes, else into a new buffer (as the backend) */
        const int64_t drb = rf_gpu_mm_row_bytes(type, n_in);
        const size_t dbytes = (size_t)(drb * rows);
        void *dst = dw;
        if (drb != (int64_t)rb) {
            dst = rf_gpu_mm_alloc(dbytes + RF_GPU_WEIGHT_PAD);
            if (!dst || rf_gpu_mm_fill((uint8_t *)dst + dbytes, 0, RF_GPU_WEIGHT_PAD)) {
                CHECK(0, "weight allocation: %s", rf_last_error());
                rf_gpu_mm_dfree(dw);
                rf_gpu_mm_dfree(dst);
                return NULL;
            }
        }
        uint32_t got = 0;
        const int rc = rf_gpu_mm_repack(env->ctx, base_type(type), dw, dst, rows, n_in, &got);
        CHECK(rc == 0 && got == type, "repack %s %lldx%lld: rc %d, type %s (%s)", tname(type), (long long)rows,
              (long long)n_in, rc, tname(got), rc ? rf_last_error() : "");
        rf_gpu_mm_sync(env->ctx);
        if (dst != dw) rf_gpu_mm_dfree(dw);
        if (rc || got != type) {
            rf_gpu_mm_dfree(dst);
            return NULL;
        }
        dw = dst;
        /* the device's rearrangement, byte for byte the host's (rf_gpu_mm_host_repack, whose
         * decoders test_host_decode_layouts checks against the oracle) */
        uint8_t *dev = malloc(dbytes), *host = malloc((size_t)drb);
        rf_gpu_mm_download(dev, dw, dbytes);
        int64_t bad = -1;
        for (int64_t r = 0; r < rows && bad < 0; r++) {
            rf_gpu_mm_host_repack(base_type(type), w + r * (int64_t)rb, host, n_in);
            if (memcmp(host, dev + r * drb, (size_t)drb)) bad = r;
        }
        CHECK(bad < 0, "repack %s %lldx%lld: row %lld differs from the host's", tname(type), (long long)rows,
              (long long)n_in, (long long)bad);
        free(dev);
        free(host);
    }
    return dw;
}

/* One (type, shape) case: all n, bias on/off, every GEMM path. */
static void test_case(gpu_env *env, uint32_t type, int64_t n_out, int64_t n_in) {
    static const int NS[] = {1, 2, 7, 16, 17, 33, 100};
    const int NMAX = 100;
    const uint32_t bt = base_type(type);
    uint64_t rb = 0;
    rf_row_bytes(bt, (uint64_t)n_in, &rb);
    const size_t wbytes = (size_t)(rb * (uint64_t)n_out);
    uint8_t *w = malloc(wbytes);
    make_weights(bt, n_out, n_in, w);
    float *wf = malloc(sizeof(float) * (size_t)(n_out * n_in));
    for (int64_t o = 0; o < n_out; o++) rf_dequantize_row(bt, w + o * rb, wf + o * n_in, n_in);
    /* +1 float so that x + 1 can be used as a misaligned x */
    float *x = malloc(sizeof(float) * (size_t)(NMAX * n_in + 1));
    for (int64_t i = 0; i < NMAX * n_in + 1; i++) x[i] = gauss();
    float *bias = malloc(sizeof(float) * (size_t)n_out);
    for (int64_t o = 0; o < n_out; o++) bias[o] = gauss();
    float *y = malloc(sizeof(float) * (size_t)(NMAX * n_out));
    double *ref = malloc(sizeof(double) * (size_t)(NMAX * n_out)), *mag = malloc(sizeof(double) * (size_t)(NMAX * n_out));
    double *qbd = malloc(sizeof(double) * (size_t)(2 * n_out)), *xdbl = malloc(sizeof(double) * (size_t)n_in);

    void *dw = upload_w(env, type, w, n_out, n_in);
    float *dx = rf_gpu_mm_alloc(sizeof(float) * (size_t)(NMAX * n_in + 1));
    float *db = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_out);
    float *dy = rf_gpu_mm_alloc(sizeof(float) * (size_t)(NMAX * n_out));
    if (!dw || !dx || !db || !dy) {
        CHECK(0, "device allocation: %s", rf_last_error());
        goto done;
    }
    rf_gpu_mm_upload(dx, x, sizeof(float) * (size_t)(NMAX * n_in + 1));
    rf_gpu_mm_upload(db, bias, sizeof(float) * (size_t)n_out);

    for (int xoff = 0; xoff <= 1; xoff++) {
        const float *xs = x + xoff;
        for (int c = 0; c < NMAX; c++)
            for (int64_t o = 0; o < n_out; o++) {
                double s = 0, a = 0;
                for (int64_t i = 0; i < n_in; i++) {
                    const double p = (double)wf[o * n_in + i] * (double)xs[c * n_in + i];
                    s += p;
                    a += fabs(p);
                }
                ref[c * n_out + o] = s;
                mag[c * n_out + o] = a;
            }
        for (int c = 0; c < 2; c++) {
            for (int64_t i = 0; i < n_in; i++) xdbl[i] = xs[c * n_in + i];
            for (int64_t o = 0; o < n_out; o++) qbd[c * n_out + o] = 1.01 * q8_bound(wf + o * n_in, xdbl, n_in);
        }
        for (size_t ni = 0; ni < sizeof NS / sizeof NS[0]; ni++) {
            const int n = NS[ni];
            if (xoff && n != 2 && n != 33) continue; /* misaligned x: one matvec and one GEMM case */
            const int gemm = n > RF_GPU_MATVEC_MAX_N;
            /* GEMM: path 0 = default, 1 = tiled */
            const int npath = gemm ? 1 + env->has_cublas : 1;
            for (int path = 0; path < npath; path++) {
                rf_gpu_mm_force_tiled(env->ctx, path);
                const int f16 = gemm && env->has_cublas && !path && bt != RF_TYPE_F32;
                const double tol = f16 ? 2e-3 : 1e-4;
                for (int use_bias = 0; use_bias <= 1; use_bias++) {
                    rf_gpu_mm_fill(dy, 0xff, sizeof(float) * (size_t)(n * n_out));
                    int rc = rf_gpu_matmul(env->ctx, type, dw, n_out, n_in, dx + xoff, n, use_bias ? db : NULL, dy);
                    if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
                    if (rc) {
                        CHECK(0, "%s %lldx%lld n=%d: %s", tname(type), (long long)n_out, (long long)n_in, n,
                              rf_last_error());
                        continue;
                    }
                    rf_gpu_mm_download(y, dy, sizeof(float) * (size_t)(n * n_out));
                    double worst = 0;
                    int64_t worst_i = -1;
                    for (int64_t i = 0; i < (int64_t)n * n_out; i++) {
                        const double bv = use_bias ? bias[i % n_out] : 0.0;
                        const double qb = n <= 2 ? qbd[i] : 0.0; /* int8 x path (see the top) */
                        const double r = ref[i] + bv, lim = tol * (mag[i] + fabs(bv)) + qb + 1e-30;
                        const double e = isfinite(y[i]) ? fabs(y[i] - r) / lim : INFINITY;
                        if (!(e <= worst)) {
                            worst = e;
                            worst_i = i;
                        }
                    }
                    CHECK(worst <= 1.0, "%s %lldx%lld n=%d bias=%d xoff=%d path=%s: worst error %.3g x tolerance "
                          "at %lld (got %g want %g)",
                          tname(type), (long long)n_out, (long long)n_in, n, use_bias, xoff,
                          gemm ? rf_gpu_mm_gemm_path(env->ctx) : "matvec", worst, (long long)worst_i,
                          worst_i >= 0 ? y[worst_i] : 0.0, worst_i >= 0 ? ref[worst_i] : 0.0);
                }
            }
            rf_gpu_mm_force_tiled(env->ctx, 0);
        }
    }

    /* Non-finite x: column 0 gets a NaN, the last column an inf. */
    for (int ni = 0; ni < 4; ni++) {
        static const int NSF[] = {1, 2, 3, 33};
        const int n = NSF[ni];
        for (int path = 0; path <= (n > RF_GPU_MATVEC_MAX_N && env->has_cublas); path++) {
            rf_gpu_mm_force_tiled(env->ctx, path);
            /* with n = 1 both land in one column: distinct elements, or the inf would replace the NaN */
            const int64_t jn = test_randint(0, (int)n_in - 1);
            const int64_t ji = n == 1 ? (jn + test_randint(1, (int)n_in - 1)) % n_in : test_randint(0, (int)n_in - 1);
            float *xn = malloc(sizeof(float) * (size_t)(n * n_in));
            memcpy(xn, x, sizeof(float) * (size_t)(n * n_in));
            xn[jn] = NAN;
            xn[(int64_t)(n - 1) * n_in + ji] = INFINITY;
            rf_gpu_mm_upload(dx, xn, sizeof(float) * (size_t)(n * n_in));
            rf_gpu_mm_fill(dy, 0xff, sizeof(float) * (size_t)(n * n_out));
            int rc = rf_gpu_matmul(env->ctx, type, dw, n_out, n_in, dx, n, db, dy);
            if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
            rf_gpu_mm_download(y, dy, sizeof(float) * (size_t)(n * n_out));
            int bad = rc != 0;
            for (int64_t o = 0; o < n_out && !bad; o++) {
                if (!isnan(y[o])) bad = 1;
                double s = bias[o];
                for (int64_t i = 0; i < n_in; i++) s += (double)wf[o * n_in + i] * (double)xn[(int64_t)(n - 1) * n_in + i];
                const float g = y[(int64_t)(n - 1) * n_out + o];
                if (isnan(s) ? !isnan(g) : (g != (float)s)) bad = 1;
            }
            CHECK(!bad, "%s %lldx%lld n=%d path=%s: non-finite x not propagated", tname(type), (long long)n_out,
                  (long long)n_in, n, n > RF_GPU_MATVEC_MAX_N ? rf_gpu_mm_gemm_path(env->ctx) : "matvec");
            free(xn);
        }
        rf_gpu_mm_force_tiled(env->ctx, 0);
    }
    rf_gpu_mm_upload(dx, x, sizeof(float) * (size_t)(NMAX * n_in + 1));

done:
    rf_gpu_mm_dfree(dw);
    rf_gpu_mm_dfree(dx);
    rf_gpu_mm_dfree(db);
    rf_gpu_mm_dfree(dy);
    free(w);
    free(wf);
    free(x);
    free(bias);
    free(y);
    free(ref);
    free(mag);
    free(qbd);
    free(xdbl);
}

/* rf_gpu_matmul_ex: n_outs outputs of mixed types sharing x, RMSNorm folded in or not,
 * accumulate on/off, bias per output on/off, n in {1, 2, 5, 33}, x of ordinary, zero and ~1e15
 * magnitudes. The last trials decode (n = 1) outputs of 3,001-4,501 rows, an odd number each, so
 * that every warp of the decode matvecs has several rows (k_mvt's row pairs, k_mvp's per-lane row
 * outputs) and some warps' rows belong to two outputs. Oracle: RMSNorm in double, then the exact dot in double (+ bias, + the old y when
 * accumulating). Tolerance as test_case, the magnitude including |bias| and |old y|. Then NaN:
 * a NaN in row 0 of x makes every output of row 0 NaN when the norm is on (the row's scale is
 * NaN); a NaN in y stays NaN with accumulate. */
static void test_ex(gpu_env *env) {
    static const uint32_t EXT[] = {RF_TYPE_Q4_K,          RF_TYPE_F16,            RF_TYPE_Q8_0,
                                   RF_TYPE_Q6_K,          RF_TYPE_Q4_0,           RF_TYPE_BF16,
                                   RF_TYPE_F32,           RF_TYPE_Q5_K,           RF_TYPE_IQ4_XS,
                                   RF_TYPE_Q4_0 | LAYOUT, RF_TYPE_Q8_0 | LAYOUT,  RF_TYPE_IQ4_XS | LAYOUT,
                                   RF_TYPE_IQ4_NL | LAYOUT, RF_TYPE_Q5_K | LAYOUT};
    const int NE = (int)(sizeof EXT / sizeof EXT[0]);
    static const uint32_t MANY[] = {RF_TYPE_Q4_0 | LAYOUT, RF_TYPE_Q6_K | LAYOUT, RF_TYPE_Q4_K};
    static const int NS[] = {1, 2, 5, 33};
    const int64_t n_in = 512;
    const int NMAX = 33;
    for (int trial = 0; trial < 28; trial++) {
        const int many = trial >= 24; /* outputs of thousands of rows, decoded */
        const int n_outs = many ? 2 + trial % 2 : 1 + trial % 3;
        const int use_norm = many ? (trial / 2) % 2 : (trial / 3) % 2, accumulate = many ? trial % 2 : (trial / 6) % 2;
        const int n = many ? 1 : NS[(trial / 12 + trial) % 4];
        uint32_t types[3];
        int64_t nout[3];
        uint8_t *w[3];
        float *wf[3], *bias[3], *y0[3], *y[3];
        void *dw[3];
        float *db[3], *dy[3];
        rf_gpu_mm_out outs[3];
        for (int i = 0; i < n_outs; i++) {
            types[i] = many ? MANY[test_randint(0, 2)] : EXT[test_randint(0, NE - 1)];
            if (i == 1 && trial % 4 == 0) types[i] = types[0]; /* same-type outputs */
            nout[i] = many ? 2 * test_randint(1500, 2250) + 1 : test_randint(1, 300);
            const uint32_t bt = base_type(types[i]);
            uint64_t rb = 0;
            rf_row_bytes(bt, (uint64_t)n_in, &rb);
            w[i] = malloc(rb * (uint64_t)nout[i]);
            make_weights(bt, nout[i], n_in, w[i]);
            wf[i] = malloc(sizeof(float) * (size_t)(nout[i] * n_in));
            for (int64_t o = 0; o < nout[i]; o++) rf_dequantize_row(bt, w[i] + o * rb, wf[i] + o * n_in, n_in);
            const int has_bias = test_randint(0, 1);
            bias[i] = NULL;
            db[i] = NULL;
            if (has_bias) {
                bias[i] = malloc(sizeof(float) * (size_t)nout[i]);
                for (int64_t o = 0; o < nout[i]; o++) bias[i][o] = gauss();
                db[i] = rf_gpu_mm_alloc(sizeof(float) * (size_t)nout[i]);
                rf_gpu_mm_upload(db[i], bias[i], sizeof(float) * (size_t)nout[i]);
            }
            y0[i] = malloc(sizeof(float) * (size_t)(NMAX * nout[i]));
            y[i] = malloc(sizeof(float) * (size_t)(NMAX * nout[i]));
            for (int64_t k = 0; k < NMAX * nout[i]; k++) y0[i][k] = accumulate ? gauss() : NAN;
            dw[i] = upload_w(env, types[i], w[i], nout[i], n_in);
            dy[i] = rf_gpu_mm_alloc(sizeof(float) * (size_t)(NMAX * nout[i]));
            rf_gpu_mm_upload(dy[i], y0[i], sizeof(float) * (size_t)(NMAX * nout[i]));
            outs[i].type = types[i];
            outs[i].w = dw[i];
            outs[i].n_out = nout[i];
            outs[i].bias = db[i];
            outs[i].y = dy[i];
        }
        float *x = malloc(sizeof(float) * (size_t)(n * n_in)), *nw = malloc(sizeof(float) * (size_t)n_in);
        /* edge magnitudes: x all zero (the norm's scale is then 1 / sqrt(eps)), and |x| ~ 1e15 (the
         * RMS scale k_mvp applies to its outputs is ~1e-15; sum x^2 still fits in f32), the latter
         * not on the f16 GEMM path without a norm (|x| > 65504 is inf there, as documented) */
        const int huge = trial % 8 == 4 && (use_norm || n <= RF_GPU_MATVEC_MAX_N);
        const float scale = trial % 8 == 7 ? 0.0f : huge ? 1e15f : test_randf(0.1f, 10.0f), eps = 1e-5f;
        for (int64_t k = 0; k < n * n_in; k++) x[k] = gauss() * scale;
        for (int64_t k = 0; k < n_in; k++) nw[k] = gauss();
        float *dx = rf_gpu_mm_alloc(sizeof(float) * (size_t)(n * n_in));
        float *dnw = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in);
        float *dscr = rf_gpu_mm_alloc(sizeof(float) * (size_t)(n * n_in));
        rf_gpu_mm_upload(dx, x, sizeof(float) * (size_t)(n * n_in));
        rf_gpu_mm_upload(dnw, nw, sizeof(float) * (size_t)n_in);
        rf_gpu_mm_fill(dscr, 0xff, sizeof(float) * (size_t)(n * n_in));
        /* oracle input */
        double *xin = malloc(sizeof(double) * (size_t)(n * n_in));
        for (int t = 0; t < n; t++) {
            double ss = 0;
            for (int64_t k = 0; k < n_in; k++) ss += (double)x[t * n_in + k] * x[t * n_in + k];
            const double sc = use_norm ? 1.0 / sqrt(ss / (double)n_in + (double)eps) : 1.0;
            for (int64_t k = 0; k < n_in; k++)
                xin[t * n_in + k] = use_norm ? (double)x[t * n_in + k] * sc * (double)nw[k] : (double)x[t * n_in + k];
        }
        int rc = rf_gpu_matmul_ex(env->ctx, n_outs, outs, n_in, dx, n, use_norm ? dnw : NULL, eps, accumulate,
                                  use_norm ? dscr : NULL);
        if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
        CHECK(rc == 0, "matmul_ex trial %d: %s", trial, rc ? rf_last_error() : "");
        const double tol = (n > RF_GPU_MATVEC_MAX_N && env->has_cublas) ? 2e-3 : 1e-4;
        for (int i = 0; i < n_outs && rc == 0; i++) {
            rf_gpu_mm_download(y[i], dy[i], sizeof(float) * (size_t)(n * nout[i]));
            double worst = 0;
            int64_t wi = -1;
            double wref = 0;
            for (int t = 0; t < n; t++)
                for (int64_t o = 0; o < nout[i]; o++) {
                    double s = 0, a = 0;
                    for (int64_t k = 0; k < n_in; k++) {
                        const double p = (double)wf[i][o * n_in + k] * xin[t * n_in + k];
                        s += p;
                        a += fabs(p);
                    }
                    const double bv = bias[i] ? bias[i][o] : 0.0, yv = accumulate ? y0[i][t * nout[i] + o] : 0.0;
                    const double qb = n <= 2 ? 1.01 * q8_bound(wf[i] + o * n_in, xin + t * n_in, n_in) : 0.0;
                    const double r = s + bv + yv, lim = tol * (a + fabs(bv) + fabs(yv)) + qb + 1e-30;
                    const float g = y[i][t * nout[i] + o];
                    const double e = isfinite(g) ? fabs(g - r) / lim : INFINITY;
                    if (!(e <= worst)) {
                        worst = e;
                        wi = t * nout[i] + o;
                        wref = r;
                    }
                }
            CHECK(worst <= 1.0, "matmul_ex trial %d out %d/%d %s %lldx%lld n=%d norm=%d acc=%d bias=%d: worst %.3g x tol at "
                  "%lld (got %g want %g)", trial, i, n_outs, tname(types[i]), (long long)nout[i], (long long)n_in, n,
                  use_norm, accumulate, bias[i] != NULL, worst, (long long)wi, wi >= 0 ? y[i][wi] : 0.0, wref);
        }
        /* NaN propagation (norm on): x row 0 gets a NaN -> row 0 of every output is NaN; with
         * accumulate, a NaN y element of the last row stays NaN. */
        if (use_norm && rc == 0) {
            x[test_randint(0, (int)n_in - 1)] = NAN;
            rf_gpu_mm_upload(dx, x, sizeof(float) * (size_t)(n * n_in));
            if (accumulate)
                for (int i = 0; i < n_outs; i++) {
                    y0[i][(int64_t)(n - 1) * nout[i]] = NAN;
                    rf_gpu_mm_upload(dy[i], y0[i], sizeof(float) * (size_t)(n * nout[i]));
                }
            rc = rf_gpu_matmul_ex(env->ctx, n_outs, outs, n_in, dx, n, dnw, eps, accumulate, dscr);
            if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
            int bad = rc != 0;
            for (int i = 0; i < n_outs && !bad; i++) {
                rf_gpu_mm_download(y[i], dy[i], sizeof(float) * (size_t)(n * nout[i]));
                for (int64_t o = 0; o < nout[i]; o++)
                    if (!isnan(y[i][o])) bad = 1;
                if (accumulate && !isnan(y[i][(int64_t)(n - 1) * nout[i]])) bad = 1;
                if (n > 1 && !isfinite(y[i][(int64_t)(n - 1) * nout[i] + nout[i] - 1]) && nout[i] > 1) bad = 1;
            }
            CHECK(!bad, "matmul_ex trial %d n=%d acc=%d: NaN not propagated (or leaked into another row)", trial, n,
                  accumulate);
        }
        for (int i = 0; i < n_outs; i++) {
            free(w[i]);
            free(wf[i]);
            free(bias[i]);
            free(y0[i]);
            free(y[i]);
            rf_gpu_mm_dfree(dw[i]);
            rf_gpu_mm_dfree(db[i]);
            rf_gpu_mm_dfree(dy[i]);
        }
        free(x);
        free(nw);
        free(xin);
        rf_gpu_mm_dfree(dx);
        rf_gpu_mm_dfree(dnw);
        rf_gpu_mm_dfree(dscr);
    }
    /* errors: unsupported type; norm without scratch */
    rf_gpu_mm_out bad = {RF_TYPE_Q8_1, NULL, 1, NULL, NULL};
    float *d = rf_gpu_mm_alloc(4096);
    CHECK(rf_gpu_matmul_ex(env->ctx, 1, &bad, 32, d, 1, NULL, 1e-5f, 0, NULL) == -1, "matmul_ex: Q8_1 must be refused");
    bad.type = RF_TYPE_F32;
    bad.w = d;
    bad.y = d + 512;
    CHECK(rf_gpu_matmul_ex(env->ctx, 1, &bad, 32, d, 1, d + 256, 1e-5f, 0, NULL) == -1,
          "matmul_ex: norm without scratch must be refused");
    CHECK(rf_gpu_matmul_ex(env->ctx, 0, NULL, 32, d, 1, NULL, 1e-5f, 0, NULL) == 0, "matmul_ex: n_outs 0 is a no-op");
    CHECK(rf_gpu_mm_sync(env->ctx) == 0, "sync after matmul_ex error paths: %s", rf_last_error());
    rf_gpu_mm_dfree(d);
}

/* The worst error of a decode output's rows against the oracle, in units of test_ex's tolerance:
 * y[o] against the double dot of row o (W rows of rb bytes in GGUF type bt, decoded into wf) with
 * xin, plus y0[o] when y0 is not NULL (accumulate); the int8 rounding bound where int8. *worst and
 * *wrow move when a row is worse (or not finite). */
static void worst_rows(uint32_t bt, const uint8_t *w, uint64_t rb, int64_t nout, const double *xin, int64_t n_in,
                       const float *y, const float *y0, int int8, float *wf, double *worst, int64_t *wrow) {
    for (int64_t o = 0; o < nout; o++) {
        rf_dequantize_row(bt, w + o * rb, wf, n_in);
        double s = 0, a = 0;
        for (int64_t k = 0; k < n_in; k++) {
            s += (double)wf[k] * xin[k];
            a += fabs((double)wf[k] * xin[k]);
        }
        const double yv = y0 ? y0[o] : 0.0, r = s + yv;
        const double lim = 1e-4 * (a + fabs(yv)) + (int8 ? 1.01 * q8_bound(wf, xin, n_in) : 0.0) + 1e-30;
        const double e = isfinite(y[o]) ? fabs(y[o] - r) / lim : INFINITY;
        if (!(e <= *worst)) *worst = e, *wrow = o;
    }
}

/* Decode-shaped calls (n = 1) with more rows than the GPU has resident warps, so that the
 * persistent matvec gives each warp several consecutive rows, crossing from one output to the
 * next inside a warp, and rows long enough for several pipeline steps (n_in 4352 = 17 x 256).
 * Three same-type outputs of 700-3000 rows, norm and accumulate random; oracle and tolerance as
 * test_ex (the int8 rounding bound only for the int8 types); then a NaN in x: every row NaN. */
static void test_ex_rows(gpu_env *env) {
    static const uint32_t RT[] = {RF_TYPE_Q4_K, RF_TYPE_Q6_K, RF_TYPE_Q8_0,          RF_TYPE_Q4_0,
                                  RF_TYPE_Q5_K, RF_TYPE_F16,  RF_TYPE_BF16,          RF_TYPE_Q4_0 | LAYOUT,
                                  RF_TYPE_Q8_0 | LAYOUT,      RF_TYPE_Q4_0 | LAYOUT};
    for (size_t t = 0; t < sizeof RT / sizeof RT[0]; t++) {
        const uint32_t type = RT[t], bt = base_type(type);
        const int int8 = type != RF_TYPE_F16 && type != RF_TYPE_BF16;
        const int64_t n_in = t % 2 ? 4352 : 1280;
        const int use_norm = test_randint(0, 1), accumulate = test_randint(0, 1);
        uint64_t rb = 0;
        rf_row_bytes(bt, (uint64_t)n_in, &rb);
        int64_t nout[3], total = 0;
        uint8_t *w[3];
        float *y0[3], *y[3], *dy[3];
        void *dw[3];
        rf_gpu_mm_out outs[3];
        for (int i = 0; i < 3; i++) {
            nout[i] = test_randint(700, 3000);
            total += nout[i];
            w[i] = malloc(rb * (uint64_t)nout[i]);
            make_weights(bt, nout[i], n_in, w[i]);
            y0[i] = malloc(sizeof(float) * (size_t)nout[i]);
            y[i] = malloc(sizeof(float) * (size_t)nout[i]);
            for (int64_t k = 0; k < nout[i]; k++) y0[i][k] = accumulate ? gauss() : NAN;
            dw[i] = upload_w(env, type, w[i], nout[i], n_in);
            dy[i] = rf_gpu_mm_alloc(sizeof(float) * (size_t)nout[i]);
            rf_gpu_mm_upload(dy[i], y0[i], sizeof(float) * (size_t)nout[i]);
            outs[i].type = type;
            outs[i].w = dw[i];
            outs[i].n_out = nout[i];
            outs[i].bias = NULL;
            outs[i].y = dy[i];
        }
        float *x = malloc(sizeof(float) * (size_t)n_in), *nw = malloc(sizeof(float) * (size_t)n_in);
        float *wf = malloc(sizeof(float) * (size_t)n_in);
        double *xin = malloc(sizeof(double) * (size_t)n_in);
        const float eps = 1e-5f;
        for (int64_t k = 0; k < n_in; k++) x[k] = gauss() * 3.0f, nw[k] = gauss();
        double ss = 0;
        for (int64_t k = 0; k < n_in; k++) ss += (double)x[k] * x[k];
        const double sc = 1.0 / sqrt(ss / (double)n_in + (double)eps);
        for (int64_t k = 0; k < n_in; k++) xin[k] = use_norm ? (double)x[k] * sc * (double)nw[k] : (double)x[k];
        float *dx = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in), *dnw = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in);
        float *dscr = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in);
        rf_gpu_mm_upload(dx, x, sizeof(float) * (size_t)n_in);
        rf_gpu_mm_upload(dnw, nw, sizeof(float) * (size_t)n_in);
        int rc = rf_gpu_matmul_ex(env->ctx, 3, outs, n_in, dx, 1, use_norm ? dnw : NULL, eps, accumulate, dscr);
        if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
        CHECK(rc == 0, "rows %s: %s", tname(type), rc ? rf_last_error() : "");
        double worst = 0;
        int wout = 0;
        int64_t wrow = -1;
        for (int i = 0; i < 3 && rc == 0; i++) {
            rf_gpu_mm_download(y[i], dy[i], sizeof(float) * (size_t)nout[i]);
            const double before = worst;
            int64_t row = -1;
            worst_rows(bt, w[i], rb, nout[i], xin, n_in, y[i], accumulate ? y0[i] : NULL, int8, wf, &worst, &row);
            if (worst != before) wout = i, wrow = row;
        }
        CHECK(worst <= 1.0, "rows %s 3 x ~%lld rows (%lld) x %lld norm=%d acc=%d: worst %.3g x tol at out %d row %lld",
              tname(type), (long long)(total / 3), (long long)total, (long long)n_in, use_norm, accumulate, worst,
              wout, (long long)wrow);
        /* NaN in x: every row of every output NaN */
        x[test_randint(0, (int)n_in - 1)] = NAN;
        rf_gpu_mm_upload(dx, x, sizeof(float) * (size_t)n_in);
        rc = rf_gpu_matmul_ex(env->ctx, 3, outs, n_in, dx, 1, use_norm ? dnw : NULL, eps, accumulate, dscr);
        if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
        int64_t finite = rc ? -1 : 0;
        for (int i = 0; i < 3 && rc == 0; i++) {
            rf_gpu_mm_download(y[i], dy[i], sizeof(float) * (size_t)nout[i]);
            for (int64_t o = 0; o < nout[i]; o++) {
                /* without the norm, a NaN element reaches a row only through a nonzero weight:
                 * compare with the oracle's own propagation */
                rf_dequantize_row(bt, w[i] + o * rb, wf, n_in);
                double s = 0;
                for (int64_t k = 0; k < n_in; k++) s += (double)wf[k] * (double)x[k];
                if (use_norm || isnan(s)) {
                    if (!isnan(y[i][o])) finite++;
                } else if (isnan(y[i][o])) {
                    finite++;
                }
            }
        }
        CHECK(finite == 0, "rows %s norm=%d: %lld rows disagree with NaN propagation", tname(type), use_norm,
              (long long)finite);
        for (int i = 0; i < 3; i++) {
            free(w[i]);
            free(y0[i]);
            free(y[i]);
            rf_gpu_mm_dfree(dw[i]);
            rf_gpu_mm_dfree(dy[i]);
        }
        free(x);
        free(nw);
        free(wf);
        free(xin);
        rf_gpu_mm_dfree(dx);
        rf_gpu_mm_dfree(dnw);
        rf_gpu_mm_dfree(dscr);
    }
}

/* Decode calls whose job boundaries fall inside a warp's second or later row pair: k_mvt takes the
 * rows of Q4_0 X8 and Q6_K X8 two per ring slot, and the refill that moves to a warp's next pair
 * must look up each row's job (a pair may straddle two outputs). Random sizes seldom produce that
 * case, so the sizes come from the wave the first call reports (rf_gpu_mm_last_decode): R rows per
 * warp (4 and 7), output 0 ending at row 3 of warp a, output 1 at row 3 (R = 4) or 5 (R = 7) of a
 * later warp. A row read from past its output's weights (the padding is zeros) gives 0, not the
 * oracle's dot. Oracle and tolerance as test_ex_rows. */
static void test_decode_pair_bounds(gpu_env *env) {
    static const uint32_t PT[] = {RF_TYPE_Q4_0 | LAYOUT, RF_TYPE_Q6_K | LAYOUT};
    const int64_t n_in = 512;
    for (size_t t = 0; t < sizeof PT / sizeof PT[0]; t++) {
        const uint32_t type = PT[t], bt = base_type(type);
        uint64_t rb = 0;
        rf_row_bytes(bt, (uint64_t)n_in, &rb);
        float *x = malloc(sizeof(float) * (size_t)n_in), *wf = malloc(sizeof(float) * (size_t)n_in);
        double *xin = malloc(sizeof(double) * (size_t)n_in);
        for (int64_t k = 0; k < n_in; k++) x[k] = gauss(), xin[k] = (double)x[k];
        float *dx = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in);
        rf_gpu_mm_upload(dx, x, sizeof(float) * (size_t)n_in);
        /* the wave: one call of a few rows of this format */
        uint8_t *pw = malloc(rb * 8);
        make_weights(bt, 8, n_in, pw);
        void *pdw = upload_w(env, type, pw, 8, n_in);
        float *pdy = rf_gpu_mm_alloc(sizeof(float) * 8);
        rf_gpu_mm_out probe = {type, pdw, 8, NULL, pdy};
        int rc = rf_gpu_matmul_ex(env->ctx, 1, &probe, n_in, dx, 1, NULL, 1e-5f, 0, NULL);
        if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
        int64_t rpw = 0;
        int mvt = 0;
        const int64_t wave = rc ? 0 : rf_gpu_mm_last_decode(env->ctx, &rpw, &mvt);
        CHECK(rc == 0 && wave >= 16, "pair bounds %s: probe rc %d, wave %lld", tname(type), rc, (long long)wave);
        free(pw);
        rf_gpu_mm_dfree(pdw);
        rf_gpu_mm_dfree(pdy);
        for (int R = 4; R <= 7 && wave >= 16; R += 3) {
            const int64_t a = test_randint(1, (int)(wave / 4) - 1), b = test_randint((int)(wave / 4) + 1, (int)(wave / 2));
            const int64_t b1 = R * a + 3, b2 = R * b + (R == 4 ? 3 : 5);
            const int64_t total = R * wave - test_randint(0, (int)(wave / 2)); /* (R - 1) wave < total <= R wave */
            const int64_t nout[3] = {b1, b2 - b1, total - b2};
            uint8_t *w[3];
            float *y[3], *dy[3];
            void *dw[3];
            rf_gpu_mm_out outs[3];
            for (int i = 0; i < 3; i++) {
                w[i] = malloc(rb * (uint64_t)nout[i]);
                make_weights(bt, nout[i], n_in, w[i]);
                dw[i] = upload_w(env, type, w[i], nout[i], n_in);
                y[i] = malloc(sizeof(float) * (size_t)nout[i]);
                dy[i] = rf_gpu_mm_alloc(sizeof(float) * (size_t)nout[i]);
                rf_gpu_mm_fill(dy[i], 0xff, sizeof(float) * (size_t)nout[i]);
                outs[i] = (rf_gpu_mm_out){type, dw[i], nout[i], NULL, dy[i]};
            }
            rc = rf_gpu_matmul_ex(env->ctx, 3, outs, n_in, dx, 1, NULL, 1e-5f, 0, NULL);
            if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
            int64_t got_rpw = 0;
            rf_gpu_mm_last_decode(env->ctx, &got_rpw, &mvt);
            CHECK(rc == 0 && got_rpw == R, "pair bounds %s: rc %d, %lld rows per warp (want %d) over a wave of %lld",
                  tname(type), rc, (long long)got_rpw, R, (long long)wave);
            double worst = 0;
            int wout = 0;
            int64_t wrow = -1;
            for (int i = 0; i < 3 && rc == 0; i++) {
                rf_gpu_mm_download(y[i], dy[i], sizeof(float) * (size_t)nout[i]);
                const double before = worst;
                int64_t row = -1;
                worst_rows(bt, w[i], rb, nout[i], xin, n_in, y[i], NULL, 1, wf, &worst, &row);
                if (worst != before) wout = i, wrow = row;
            }
            CHECK(worst <= 1.0, "pair bounds %s (%s) %lld + %lld + %lld rows, %d per warp: worst %.3g x tol at out %d "
                  "row %lld", tname(type), mvt ? "k_mvt" : "k_mvp", (long long)nout[0], (long long)nout[1],
                  (long long)nout[2], R, worst, wout, (long long)wrow);
            for (int i = 0; i < 3; i++) {
                free(w[i]);
                free(y[i]);
                rf_gpu_mm_dfree(dw[i]);
                rf_gpu_mm_dfree(dy[i]);
            }
        }
        free(x);
        free(wf);
        free(xin);
        rf_gpu_mm_dfree(dx);
    }
}

/* rf_gpu_mm_swiglu (swiglu that leaves its output quantized to int8) followed by the matmul that
 * reads it (n = 1, no norm: the down projection of a decode step, which then copies that int8
 * x). Oracle: out = g / (1 + expf(-g)) * u on the host (the device's expf may differ by a couple
 * of ulp: |out - ref| <= 1e-6 |ref|), then the exact dot in double with test_case's int8
 * tolerance. Odd block counts of 32, a few large n_in (several producer blocks), accumulate and
 * bias on / off, then non-finite inputs: a NaN in up makes every output NaN, an inf in gate gives
 * exactly the oracle's inf / NaN per output (the consumer's exact f32 path). The int8 copy itself
 * (rf_gpu_mm_xq_buffers) must be the host quantization of out bit for bit (test_xq_diff), with
 * blocks marked exactly when an input was not finite. Finally the int8 copy must be good for the
 * next call only: a matmul on another x in between, then x = out again. */
static void test_swiglu_q(gpu_env *env) {
    static const uint32_t ST[] = {RF_TYPE_Q4_0, RF_TYPE_Q4_0 | LAYOUT, RF_TYPE_Q8_0 | LAYOUT, RF_TYPE_Q4_K,
                                  RF_TYPE_Q6_K, RF_TYPE_Q5_0,      RF_TYPE_F16,       RF_TYPE_IQ4_XS,
                                  RF_TYPE_Q6_K | LAYOUT, RF_TYPE_IQ4_XS | LAYOUT, RF_TYPE_Q5_K | LAYOUT};
    const int NT = (int)(sizeof ST / sizeof ST[0]);
    for (int trial = 0; trial < 2 * NT; trial++) {
        const uint32_t type = ST[trial % NT], bt = base_type(type);
        const int64_t qk = rf_type_get(bt)->block_elems;
        const int64_t unit = (type & LAYOUT) ? LAYOUT_UNIT : (qk > 32 ? qk : 32);
        int64_t n_in = unit * test_randint(1, unit > 256 ? 8 : 24);
        if (trial % 5 == 4) n_in = unit * ((11008 + unit - 1) / unit);
        if (n_in % 64 == 0 && unit == 32 && trial % 3 == 0) n_in += 32; /* an odd count of 32-blocks */
        const int64_t n_out = test_randint(1, 300);
        /* every type once with finite inputs (first round) and once with a NaN or an inf (second) */
        const int round = trial / NT, accumulate = (trial + round) % 2;
        const int non_finite = round == 1 ? 1 + (trial % NT) % 2 : 0;
        const int int8_path = bt != RF_TYPE_F16;
        uint64_t rb = 0;
        uint8_t *w;
        float *wf;
        make_weights_f32(bt, n_out, n_in, &w, &wf, &rb);
        float *g = malloc(sizeof(float) * (size_t)n_in), *u = malloc(sizeof(float) * (size_t)n_in);
        float *ref = malloc(sizeof(float) * (size_t)n_in), *out = malloc(sizeof(float) * (size_t)n_in);
        const float scale = test_randf(0.2f, 4.0f);
        for (int64_t k = 0; k < n_in; k++) g[k] = gauss() * scale, u[k] = gauss() * scale;
        if (non_finite == 1) u[test_randint(0, (int)n_in - 1)] = NAN;
        if (non_finite == 2) g[test_randint(0, (int)n_in - 1)] = INFINITY;
        for (int64_t k = 0; k < n_in; k++) ref[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
        float *y0 = malloc(sizeof(float) * (size_t)n_out), *y = malloc(sizeof(float) * (size_t)n_out);
        for (int64_t o = 0; o < n_out; o++) y0[o] = accumulate ? gauss() : NAN;
        void *dw = upload_w(env, type, w, n_out, n_in);
        float *dg = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in), *du = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in);
        float *dy = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_out);
        float *dx2 = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in);
        rf_gpu_mm_upload(dg, g, sizeof(float) * (size_t)n_in);
        rf_gpu_mm_upload(du, u, sizeof(float) * (size_t)n_in);
        rf_gpu_mm_upload(dy, y0, sizeof(float) * (size_t)n_out);
        rf_gpu_mm_upload(dx2, ref, sizeof(float) * (size_t)n_in);
        const int bias_on = test_randint(0, 1);
        float *bias = malloc(sizeof(float) * (size_t)n_out);
        for (int64_t o = 0; o < n_out; o++) bias[o] = bias_on ? gauss() : 0.0f;
        float *db = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_out);
        rf_gpu_mm_upload(db, bias, sizeof(float) * (size_t)n_out);
        rf_gpu_mm_out mo = {type, dw, n_out, bias_on ? db : NULL, dy};
        /* out aliases gate, as in the forward pass */
        int rc = dw ? rf_gpu_mm_swiglu(env->ctx, dg, du, n_in, dg) : -1;
        CHECK(rc == 1, "swiglu_q %s n_in %lld: rc %d (%s)", tname(type), (long long)n_in, rc,
              rc < 0 ? rf_last_error() : "");
        void *dxq = NULL, *dxd = NULL;
        const int has_xq = rc == 1 && rf_gpu_mm_xq_buffers(env->ctx, n_in, &dxq, &dxd);
        CHECK(rc != 1 || has_xq, "swiglu_q %s n_in %lld: no int8 copy after the swiglu", tname(type), (long long)n_in);
        if (has_xq) {
            /* the int8 copy itself: bit for bit the quantization of out, its non-finite blocks marked */
            const size_t nb = (size_t)n_in / 32;
            int8_t *hq = malloc((size_t)n_in);
            float *hd = malloc(sizeof(float) * 2 * nb);
            int rc2 = rf_gpu_mm_sync(env->ctx);
            if (rc2 == 0) rc2 = rf_gpu_mm_download(out, dg, sizeof(float) * (size_t)n_in);
            if (rc2 == 0) rc2 = rf_gpu_mm_download(hq, dxq, (size_t)n_in);
            if (rc2 == 0) rc2 = rf_gpu_mm_download(hd, dxd, sizeof(float) * 2 * nb);
            size_t marked = 0;
            const size_t bad = rc2 == 0 ? test_xq_diff(out, hq, hd, nb, &marked) : 1;
            CHECK(bad == 0 && (marked > 0) == (non_finite != 0),
                  "swiglu_q %s n_in %lld non_finite %d: %zu int8 codes or scales differ from the host quantization, "
                  "%zu blocks marked", tname(type), (long long)n_in, non_finite, bad, marked);
            free(hq), free(hd);
        }
        if (rc == 1) rc = rf_gpu_matmul_ex(env->ctx, 1, &mo, n_in, dg, 1, NULL, 0.0f, accumulate, NULL);
        else rc = -1;
        if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
        CHECK(rc == 0, "swiglu_q %s: matmul: %s", tname(type), rc ? rf_last_error() : "");
        for (int pass = 0; pass < 2 && rc == 0; pass++) {
            rf_gpu_mm_download(y, dy, sizeof(float) * (size_t)n_out);
            if (pass == 0) {
                rf_gpu_mm_download(out, dg, sizeof(float) * (size_t)n_in);
                int64_t bad = -1;
                for (int64_t k = 0; k < n_in && bad < 0; k++)
                    if (isfinite(ref[k]) ? !(fabsf(out[k] - ref[k]) <= 1e-6f * fabsf(ref[k]) + 1e-30f)
                                         : memcmp(&out[k], &ref[k], 4) && !(isnan(out[k]) && isnan(ref[k])))
                        bad = k;
                CHECK(bad < 0, "swiglu_q %s n_in %lld: out[%lld] = %g, want %g", tname(type), (long long)n_in,
                      (long long)bad, bad >= 0 ? out[bad] : 0.0, bad >= 0 ? ref[bad] : 0.0);
            }
            double *xin = malloc(sizeof(double) * (size_t)n_in);
            for (int64_t k = 0; k < n_in; k++) xin[k] = ref[k];
            double worst = 0;
            int64_t wi = -1;
            double wref = 0;
            for (int64_t o = 0; o < n_out; o++) {
                double sum = 0, a = 0;
                for (int64_t k = 0; k < n_in; k++) {
                    const double p = (double)wf[o * n_in + k] * xin[k];
                    sum += p;
                    a += fabs(p);
                }
                const double yv = accumulate && !pass ? y0[o] : 0.0;
                const double r = sum + bias[o] + yv;
                const float gv = y[o];
                double e;
                if (!isfinite(r) || !isfinite(gv))
                    e = (isnan(r) && isnan(gv)) || (!isnan(r) && r == (double)gv) ? 0.0 : INFINITY;
                else {
                    const double lim = 1e-4 * (a + fabs(bias[o]) + fabs(yv)) +
                                       (int8_path ? 1.01 * q8_bound(wf + o * n_in, xin, n_in) : 0.0) + 1e-30;
                    e = fabs(gv - r) / lim;
                }
                if (!(e <= worst)) worst = e, wi = o, wref = r;
            }
            free(xin);
            CHECK(worst <= 1.0, "swiglu_q %s %lldx%lld acc=%d bias=%d nonfinite=%d pass %d: worst %.3g x tol at %lld "
                  "(got %g want %g)", tname(type), (long long)n_out, (long long)n_in, accumulate, bias_on, non_finite,
                  pass, worst, (long long)wi, wi >= 0 ? y[wi] : 0.0, wref);
            if (pass == 0) {
                /* another x in between (forgets the int8 copy), then x = out again, not accumulating */
                rf_gpu_mm_out m2 = mo;
                rc = rf_gpu_matmul_ex(env->ctx, 1, &m2, n_in, dx2, 1, NULL, 0.0f, 0, NULL);
                if (rc == 0) rc = rf_gpu_matmul_ex(env->ctx, 1, &m2, n_in, dg, 1, NULL, 0.0f, 0, NULL);
                if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
                CHECK(rc == 0, "swiglu_q %s: second matmul: %s", tname(type), rc ? rf_last_error() : "");
            }
        }
        free(w), free(wf), free(g), free(u), free(ref), free(out), free(y0), free(y), free(bias);
        rf_gpu_mm_dfree(dw), rf_gpu_mm_dfree(dg), rf_gpu_mm_dfree(du), rf_gpu_mm_dfree(dy), rf_gpu_mm_dfree(dx2);
        rf_gpu_mm_dfree(db);
    }
    /* refused shapes: nothing enqueued, 0 returned */
    float *d = rf_gpu_mm_alloc(4096);
    CHECK(rf_gpu_mm_swiglu(env->ctx, d, d + 256, 48, d) == 0, "swiglu_q: n_in 48 must be refused (0)");
    CHECK(rf_gpu_mm_swiglu(env->ctx, d + 1, d + 256, 64, d) == 0, "swiglu_q: misaligned gate must be refused (0)");
    rf_gpu_mm_dfree(d);
}

/* Bitwise equality of two f32 arrays, any NaN equal to any NaN; -1 when equal, else the first index. */
static int64_t first_diff(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) && !(isnan(a[i]) && isnan(b[i]))) return i;
    return -1;
}

/* rf_gpu_mm_gate_up_swiglu (gate and up in one decode matvec that writes silu(g) * u) against
 * what it replaces: rf_gpu_matmul_ex of gate and up (RMS-normed x), then rf_gpu_mm_swiglu; then a
 * down projection of each h (Q8_0 where n_ff allows: the unfused h is copied as int8, the fused
 * one quantized by the down projection itself; else F16). Both paths run on the same inputs and
 * must agree bit for bit, h and the down projection's outputs (the unfused path is checked
 * against the CPU oracle by test_case and test_swiglu_q). F16 and BF16 (the paired formats), n_ff
 * odd and small (rows in pairs, the few-rows UN = 8 instance) or a model's (several rows per warp),
 * bias on and off, then x with an inf or a NaN; up's output buffer must stay untouched. The int8
 * formats must be refused (0, nothing enqueued), as must mixed types and n_out. */
static void test_gate_up_swiglu(gpu_env *env) {
    static const uint32_t ST[] = {RF_TYPE_F16, RF_TYPE_BF16};
    const int NT = (int)(sizeof ST / sizeof ST[0]);
    for (int trial = 0; trial < 8 * NT; trial++) {
        const uint32_t type = ST[trial % NT];
        const int64_t n_in = trial % 3 == 2 ? 4096 : 8 * test_randint(1, 160);
        const int64_t n_ff = trial % 4 == 3 ? (trial % 8 == 3 ? 11008 : 8192) : 2 * test_randint(0, 900) + 1;
        const uint32_t dtype = n_ff % 32 ? RF_TYPE_F16 : RF_TYPE_Q8_0;
        const int64_t n_down = test_randint(1, 90);
        const int round = trial / (4 * NT), bias_on = (trial / NT) % 2;
        const int non_finite = round == 1 ? 1 + (trial / NT) % 2 : 0; /* 1: an inf in x, 2: a NaN */
        uint64_t rb = 0, rbd = 0;
        uint8_t *wg, *wu, *wd;
        float *wgf, *wuf, *wdf;
        make_weights_f32(type, n_ff, n_in, &wg, &wgf, &rb);
        make_weights_f32(type, n_ff, n_in, &wu, &wuf, &rb);
        make_weights_f32(dtype, n_down, n_ff, &wd, &wdf, &rbd);
        float *x = malloc(sizeof(float) * (size_t)n_in), *nw = malloc(sizeof(float) * (size_t)n_in);
        const float scale = test_randf(0.2f, 4.0f);
        for (int64_t k = 0; k < n_in; k++) x[k] = gauss() * scale, nw[k] = test_randf(0.5f, 1.5f);
        if (non_finite) x[test_randint(0, (int)n_in - 1)] = non_finite == 1 ? INFINITY : NAN;
        float *bg = malloc(sizeof(float) * (size_t)n_ff), *bu = malloc(sizeof(float) * (size_t)n_ff);
        for (int64_t o = 0; o < n_ff; o++) bg[o] = gauss(), bu[o] = gauss();
        void *dwg = upload_w(env, type, wg, n_ff, n_in), *dwu = upload_w(env, type, wu, n_ff, n_in);
        void *dwd = upload_w(env, dtype, wd, n_down, n_ff);
        const size_t fb = sizeof(float) * (size_t)n_ff, db = sizeof(float) * (size_t)n_down;
        float *dx = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in), *dnw = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in);
        float *dscr = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in);
        float *dbg = rf_gpu_mm_alloc(fb), *dbu = rf_gpu_mm_alloc(fb);
        float *dg = rf_gpu_mm_alloc(fb), *du = rf_gpu_mm_alloc(fb), *dh = rf_gpu_mm_alloc(fb), *du2 = rf_gpu_mm_alloc(fb);
        float *dya = rf_gpu_mm_alloc(db), *dyb = rf_gpu_mm_alloc(db);
        rf_gpu_mm_upload(dx, x, sizeof(float) * (size_t)n_in);
        rf_gpu_mm_upload(dnw, nw, sizeof(float) * (size_t)n_in);
        rf_gpu_mm_upload(dbg, bg, fb);
        rf_gpu_mm_upload(dbu, bu, fb);
        float *poison = malloc(fb);
        for (int64_t o = 0; o < n_ff; o++) poison[o] = (float)o * 0.25f - 7.0f;
        rf_gpu_mm_upload(du2, poison, fb);
        rf_gpu_mm_upload(dh, poison, fb);
        const float eps = 1e-5f;
        /* the unfused path */
        rf_gpu_mm_out gu[2] = {{type, dwg, n_ff, bias_on ? dbg : NULL, dg}, {type, dwu, n_ff, bias_on ? dbu : NULL, du}};
        rf_gpu_mm_out down_a = {dtype, dwd, n_down, NULL, dya}, down_b = {dtype, dwd, n_down, NULL, dyb};
        int rc = dwg && dwu && dwd ? rf_gpu_matmul_ex(env->ctx, 2, gu, n_in, dx, 1, dnw, eps, 0, dscr) : -1;
        if (rc == 0 && rf_gpu_mm_swiglu(env->ctx, dg, du, n_ff, dg) != 1)
            rc = rf_gpu_swiglu(NULL, dg, du, n_ff, dg) ? -1 : 0; /* n_ff the int8 hand-off does not take */
        if (rc == 0) rc = rf_gpu_matmul_ex(env->ctx, 1, &down_a, n_ff, dg, 1, NULL, 0.0f, 0, NULL);
        CHECK(rc == 0, "gate_up_swiglu %s: unfused path: %s", tname(type), rc ? rf_last_error() : "");
        /* the fused one */
        rf_gpu_mm_out gu2[2] = {{type, dwg, n_ff, bias_on ? dbg : NULL, dh}, {type, dwu, n_ff, bias_on ? dbu : NULL, du2}};
        const int fr = rc == 0 ? rf_gpu_mm_gate_up_swiglu(env->ctx, gu2, n_in, dx, dnw, eps) : -1;
        CHECK(fr == 1, "gate_up_swiglu %s %lldx%lld: rc %d (%s)", tname(type), (long long)n_ff, (long long)n_in, fr,
              fr < 0 ? rf_last_error() : "");
        rc = fr == 1 ? rf_gpu_matmul_ex(env->ctx, 1, &down_b, n_ff, dh, 1, NULL, 0.0f, 0, NULL) : -1;
        if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
        CHECK(rc == 0, "gate_up_swiglu %s: fused path: %s", tname(type), rc ? rf_last_error() : "");
        if (rc == 0) {
            float *ha = malloc(fb), *hb = malloc(fb), *u2 = malloc(fb), *ya = malloc(db), *yb = malloc(db);
            rf_gpu_mm_download(ha, dg, fb);
            rf_gpu_mm_download(hb, dh, fb);
            rf_gpu_mm_download(u2, du2, fb);
            rf_gpu_mm_download(ya, dya, db);
            rf_gpu_mm_download(yb, dyb, db);
            const int64_t dh_i = first_diff(ha, hb, n_ff), dy_i = first_diff(ya, yb, n_down);
            CHECK(dh_i < 0, "gate_up_swiglu %s %lldx%lld bias=%d nonfinite=%d: h[%lld] = %.9g, unfused %.9g",
                  tname(type), (long long)n_ff, (long long)n_in, bias_on, non_finite, (long long)dh_i,
                  dh_i >= 0 ? hb[dh_i] : 0.0, dh_i >= 0 ? ha[dh_i] : 0.0);
            CHECK(dy_i < 0, "gate_up_swiglu %s %lldx%lld bias=%d nonfinite=%d: down (%s) y[%lld] = %.9g, unfused %.9g",
                  tname(type), (long long)n_ff, (long long)n_in, bias_on, non_finite, rf_type_name(dtype),
                  (long long)dy_i, dy_i >= 0 ? yb[dy_i] : 0.0, dy_i >= 0 ? ya[dy_i] : 0.0);
            CHECK(first_diff(u2, poison, n_ff) < 0, "gate_up_swiglu %s: up's output buffer was written", tname(type));
            /* the values are real: a non-finite x makes h NaN, a finite x leaves every h finite */
            int64_t nan_h = 0;
            for (int64_t o = 0; o < n_ff; o++) nan_h += isnan(hb[o]) != 0;
            CHECK(non_finite ? nan_h > 0 : nan_h == 0, "gate_up_swiglu %s nonfinite=%d: %lld NaN h of %lld",
                  tname(type), non_finite, (long long)nan_h, (long long)n_ff);
            free(ha), free(hb), free(u2), free(ya), free(yb);
        }
        free(wg), free(wu), free(wd), free(wgf), free(wuf), free(wdf), free(x), free(nw), free(bg), free(bu);
        free(poison);
        rf_gpu_mm_dfree(dwg), rf_gpu_mm_dfree(dwu), rf_gpu_mm_dfree(dwd), rf_gpu_mm_dfree(dx), rf_gpu_mm_dfree(dnw);
        rf_gpu_mm_dfree(dscr), rf_gpu_mm_dfree(dbg), rf_gpu_mm_dfree(dbu), rf_gpu_mm_dfree(dg), rf_gpu_mm_dfree(du);
        rf_gpu_mm_dfree(dh), rf_gpu_mm_dfree(du2), rf_gpu_mm_dfree(dya), rf_gpu_mm_dfree(dyb);
    }
    /* refusals: nothing enqueued, 0 returned */
    float *d = rf_gpu_mm_alloc(1 << 16);
    rf_gpu_mm_out r[2] = {{RF_TYPE_Q8_0, d, 64, NULL, d + 4096}, {RF_TYPE_Q8_0, d, 64, NULL, d + 8192}};
    CHECK(rf_gpu_mm_gate_up_swiglu(env->ctx, r, 64, d, d, 1e-5f) == 0, "gate_up_swiglu: q8_0 must be refused (0)");
    r[0].type = r[1].type = RF_TYPE_Q4_0 | LAYOUT;
    CHECK(rf_gpu_mm_gate_up_swiglu(env->ctx, r, 256, d, d, 1e-5f) == 0, "gate_up_swiglu: q4_0/dev must be refused (0)");
    r[0].type = RF_TYPE_F16;
    CHECK(rf_gpu_mm_gate_up_swiglu(env->ctx, r, 64, d, d, 1e-5f) == 0, "gate_up_swiglu: mixed types must be refused (0)");
    r[1].type = RF_TYPE_F16;
    r[1].n_out = 32;
    CHECK(rf_gpu_mm_gate_up_swiglu(env->ctx, r, 64, d, d, 1e-5f) == 0, "gate_up_swiglu: mixed n_out must be refused (0)");
    rf_gpu_mm_dfree(d);
}

/* Decode calls (n = 1) whose outputs mix Q4_K (or Q5_K H) and Q6_K X8, as a Q4_K_M (Q5_K_M)
 * layer's q / k / v: one two-format launch (k_mvp2; the context's counter must move), which must
 * equal the per-format calls bit for bit and the double oracle within test_ex's tolerance (1e-4
 * of sum |w x| plus the int8 rounding bound). The outputs in every order, row counts from 1 to
 * several rows per warp, n_in with whole and partial Q6_K X8 groups, norm on and off, bias and
 * accumulate random, then a NaN in x (every output NaN). Other mixes, and n = 2, must take the
 * per-format launches. */
static void test_mixed_formats(gpu_env *env) {
    const uint32_t Q6 = RF_TYPE_Q6_K | LAYOUT;
    static const uint32_t ORDER[5][3] = {{RF_TYPE_Q4_K, RF_TYPE_Q4_K, RF_TYPE_Q6_K | LAYOUT},
                                         {RF_TYPE_Q6_K | LAYOUT, RF_TYPE_Q4_K, RF_TYPE_Q4_K},
                                         {RF_TYPE_Q4_K, RF_TYPE_Q6_K | LAYOUT, RF_TYPE_Q6_K | LAYOUT},
                                         {RF_TYPE_Q6_K | LAYOUT, RF_TYPE_Q4_K, 0},
                                         {RF_TYPE_Q5_K | LAYOUT, RF_TYPE_Q5_K | LAYOUT, RF_TYPE_Q6_K | LAYOUT}};
    static const int64_t NIN[] = {2048, 768, 4096, 2816};
    for (int trial = 0; trial < 15; trial++) {
        const uint32_t *types = ORDER[trial % 5];
        const int n_outs = types[2] ? 3 : 2;
        const int64_t n_in = NIN[(trial / 4 + trial) % 4];
        const int use_norm = trial % 6 != 5, accumulate = test_randint(0, 1), nan_x = trial >= 10;
        int64_t nout[3];
        uint8_t *w[3];
        void *dw[3];
        float *db[3] = {NULL, NULL, NULL}, *dya[3], *dyb[3], *y0[3], *wf[3], *bias[3] = {NULL, NULL, NULL};
        rf_gpu_mm_out all[3], a[3], b[3];
        int na = 0, nb = 0, ok = 1;
        for (int i = 0; i < n_outs; i++) {
            nout[i] = trial % 3 == 0 ? test_randint(1, 40) : test_randint(500, 4000);
            uint64_t rb = 0;
            rf_row_bytes(base_type(types[i]), (uint64_t)n_in, &rb);
            w[i] = malloc(rb * (uint64_t)nout[i]);
            make_weights(base_type(types[i]), nout[i], n_in, w[i]);
            wf[i] = malloc(sizeof(float) * (size_t)(nout[i] * n_in));
            for (int64_t o = 0; o < nout[i]; o++)
                rf_dequantize_row(base_type(types[i]), w[i] + o * (int64_t)rb, wf[i] + o * n_in, n_in);
            dw[i] = upload_w(env, types[i], w[i], nout[i], n_in);
            if (!dw[i]) ok = 0;
            const size_t yb = sizeof(float) * (size_t)nout[i];
            y0[i] = malloc(yb);
            for (int64_t o = 0; o < nout[i]; o++) y0[i][o] = accumulate ? gauss() : NAN;
            if (test_randint(0, 1)) {
                bias[i] = malloc(yb);
                for (int64_t o = 0; o < nout[i]; o++) bias[i][o] = gauss();
                db[i] = rf_gpu_mm_alloc(yb);
                rf_gpu_mm_upload(db[i], bias[i], yb);
            }
            dya[i] = rf_gpu_mm_alloc(yb);
            dyb[i] = rf_gpu_mm_alloc(yb);
            rf_gpu_mm_upload(dya[i], y0[i], yb);
            rf_gpu_mm_upload(dyb[i], y0[i], yb);
            all[i] = (rf_gpu_mm_out){types[i], dw[i], nout[i], db[i], dya[i]};
            if (types[i] != Q6) a[na++] = (rf_gpu_mm_out){types[i], dw[i], nout[i], db[i], dyb[i]};
            else b[nb++] = (rf_gpu_mm_out){types[i], dw[i], nout[i], db[i], dyb[i]};
        }
        float *x = malloc(sizeof(float) * (size_t)n_in), *nw = malloc(sizeof(float) * (size_t)n_in);
        const float scale = test_randf(0.1f, 10.0f), eps = 1e-5f;
        for (int64_t k = 0; k < n_in; k++) x[k] = gauss() * scale, nw[k] = gauss();
        double *xin = malloc(sizeof(double) * (size_t)n_in), ss = 0;
        for (int64_t k = 0; k < n_in; k++) ss += (double)x[k] * x[k];
        for (int64_t k = 0; k < n_in; k++)
            xin[k] = use_norm ? (double)x[k] / sqrt(ss / (double)n_in + (double)eps) * nw[k] : (double)x[k];
        if (nan_x) x[test_randint(0, (int)n_in - 1)] = NAN;
        float *dx = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in), *dnw = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in);
        float *dscr = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in);
        rf_gpu_mm_upload(dx, x, sizeof(float) * (size_t)n_in);
        rf_gpu_mm_upload(dnw, nw, sizeof(float) * (size_t)n_in);
        const long before = rf_gpu_mm_mixed_launches(env->ctx);
        int rc = ok ? rf_gpu_matmul_ex(env->ctx, n_outs, all, n_in, dx, 1, use_norm ? dnw : NULL, eps, accumulate,
                                       use_norm ? dscr : NULL)
                    : -1;
        const long mixed = rf_gpu_mm_mixed_launches(env->ctx) - before;
        if (rc == 0) rc = rf_gpu_matmul_ex(env->ctx, na, a, n_in, dx, 1, use_norm ? dnw : NULL, eps, accumulate,
                                           use_norm ? dscr : NULL);
        if (rc == 0) rc = rf_gpu_matmul_ex(env->ctx, nb, b, n_in, dx, 1, use_norm ? dnw : NULL, eps, accumulate,
                                           use_norm ? dscr : NULL);
        if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
        CHECK(rc == 0, "mixed formats trial %d: %s", trial, rc ? rf_last_error() : "");
        CHECK(mixed == 1 && rf_gpu_mm_mixed_launches(env->ctx) - before == 1,
              "mixed formats trial %d: %ld two-format launches for the mixed call, %ld in all (want 1, 1)", trial,
              mixed, rf_gpu_mm_mixed_launches(env->ctx) - before);
        for (int i = 0; i < n_outs && rc == 0; i++) {
            const size_t yb = sizeof(float) * (size_t)nout[i];
            float *ya = malloc(yb), *yb_ = malloc(yb);
            rf_gpu_mm_download(ya, dya[i], yb);
            rf_gpu_mm_download(yb_, dyb[i], yb);
            const int64_t d = first_diff(ya, yb_, nout[i]);
            int64_t nans = 0;
            for (int64_t o = 0; o < nout[i]; o++) nans += isnan(ya[o]) != 0;
            CHECK(d < 0, "mixed formats trial %d out %d (%s, %lldx%lld, norm=%d acc=%d bias=%d nan=%d): y[%lld] = %.9g, "
                  "per-format %.9g", trial, i, tname(types[i]), (long long)nout[i], (long long)n_in, use_norm,
                  accumulate, db[i] != NULL, nan_x, (long long)d, d >= 0 ? ya[d] : 0.0, d >= 0 ? yb_[d] : 0.0);
            CHECK(nan_x ? nans == nout[i] : nans == 0, "mixed formats trial %d out %d nan=%d: %lld NaN outputs of %lld",
                  trial, i, nan_x, (long long)nans, (long long)nout[i]);
            double worst = 0;
            int64_t wo = -1;
            for (int64_t o = 0; o < nout[i] && !nan_x; o++) {
                double r = 0, m = 0;
                for (int64_t k = 0; k < n_in; k++) {
                    const double p = (double)wf[i][o * n_in + k] * xin[k];
                    r += p, m += fabs(p);
                }
                const double bv = bias[i] ? bias[i][o] : 0.0, yv = accumulate ? y0[i][o] : 0.0;
                const double lim = 1e-4 * (m + fabs(bv) + fabs(yv)) + 1.01 * q8_bound(wf[i] + o * n_in, xin, n_in) + 1e-30;
                const double e = isfinite(ya[o]) ? fabs(ya[o] - (r + bv + yv)) / lim : INFINITY;
                if (!(e <= worst)) worst = e, wo = o;
            }
            CHECK(worst <= 1.0, "mixed formats trial %d out %d (%s, %lldx%lld, norm=%d acc=%d): worst %.3g x tol at %lld",
                  trial, i, tname(types[i]), (long long)nout[i], (long long)n_in, use_norm, accumulate, worst,
                  (long long)wo);
            free(ya), free(yb_);
        }
        for (int i = 0; i < n_outs; i++) {
            free(w[i]), free(wf[i]), free(bias[i]), free(y0[i]);
            rf_gpu_mm_dfree(dw[i]), rf_gpu_mm_dfree(db[i]), rf_gpu_mm_dfree(dya[i]), rf_gpu_mm_dfree(dyb[i]);
        }
        free(x), free(nw), free(xin);
        rf_gpu_mm_dfree(dx), rf_gpu_mm_dfree(dnw), rf_gpu_mm_dfree(dscr);
    }
    /* other mixes, and n = 2, take the per-format launches */
    const int64_t n_in = 512;
    uint8_t *w0 = malloc(4096 * 8), *w1 = malloc(4096 * 8);
    make_weights(RF_TYPE_Q4_K, 8, n_in, w0);
    make_weights(RF_TYPE_Q8_0, 8, n_in, w1);
    void *d0 = upload_w(env, RF_TYPE_Q4_K, w0, 8, n_in), *d1 = upload_w(env, RF_TYPE_Q8_0, w1, 8, n_in);
    float *dx = rf_gpu_mm_alloc(sizeof(float) * 2 * 512), *dy = rf_gpu_mm_alloc(sizeof(float) * 64);
    rf_gpu_mm_fill(dx, 0, sizeof(float) * 2 * 512);
    rf_gpu_mm_out m[2] = {{RF_TYPE_Q4_K, d0, 8, NULL, dy}, {RF_TYPE_Q8_0, d1, 8, NULL, dy + 16}};
    const long before = rf_gpu_mm_mixed_launches(env->ctx);
    int rc = rf_gpu_matmul_ex(env->ctx, 2, m, n_in, dx, 1, NULL, 0.0f, 0, NULL);
    CHECK(rc == 0 && rf_gpu_mm_mixed_launches(env->ctx) == before, "mixed formats: Q4_K + Q8_0 must take two launches");
    uint8_t *w2 = malloc(4096 * 8);
    make_weights(RF_TYPE_Q6_K, 8, n_in, w2);
    void *d2 = upload_w(env, Q6, w2, 8, n_in);
    m[1] = (rf_gpu_mm_out){Q6, d2, 8, NULL, dy + 16};
    rc = d2 ? rf_gpu_matmul_ex(env->ctx, 2, m, n_in, dx, 2, NULL, 0.0f, 0, NULL) : -1;
    CHECK(rc == 0 && rf_gpu_mm_mixed_launches(env->ctx) == before,
          "mixed formats: Q4_K + Q6_K X8 at n = 2 must take the per-format launches (rc %d)", rc);
    free(w0), free(w1), free(w2);
    rf_gpu_mm_dfree(d0), rf_gpu_mm_dfree(d1), rf_gpu_mm_dfree(d2), rf_gpu_mm_dfree(dx), rf_gpu_mm_dfree(dy);
    CHECK(rf_gpu_mm_sync(env->ctx) == 0, "mixed formats: sync: %s", rf_last_error());
}

/* Decode matvecs (n = 1) long enough that every warp of the persistent kernels walks several rows
 * and steps (the bulk-copy ring of k_mvt wraps several times; rows end in a partial step): the
 * device layouts (Q4_0 X8 on k_mvt on sm_90) and F16, BF16, Q4_K, Q5_K, Q6_K, Q4_0 (k_mvp);
 * 9000-13000 rows of n_in 4352 (17 blocks of 256), plain and with the RMSNorm folded in plus accumulation; then a NaN
 * in x. F16 and BF16 again with 3300-6000 rows: on GPUs of about 132 multiprocessors that is two
 * rows per warp, where they take the deeper k_mvp instance (mvp_few_rows; the shorter test cases
 * take it with one row per warp, the longer ones above the other instance). Oracle and tolerance
 * as test_case / test_ex (int8 rounding bound for the quantized types). */
static void test_mv_long(gpu_env *env) {
    static const uint32_t LT[] = {RF_TYPE_F16,           RF_TYPE_BF16,            RF_TYPE_Q4_K,
                                  RF_TYPE_Q5_K,          RF_TYPE_Q6_K,            RF_TYPE_Q4_0,
                                  RF_TYPE_Q4_0 | LAYOUT, RF_TYPE_Q8_0 | LAYOUT,   RF_TYPE_Q6_K | LAYOUT,
                                  RF_TYPE_IQ4_XS | LAYOUT, RF_TYPE_IQ4_NL | LAYOUT, RF_TYPE_Q5_K | LAYOUT,
                                  RF_TYPE_F16,           RF_TYPE_BF16};
    for (size_t t = 0; t < sizeof LT / sizeof LT[0]; t++) {
        const uint32_t type = LT[t], bt = base_type(type);
        const int64_t n_in = 4352; /* 17 superblocks: Q6_K X8 rows end in a partial group */
        const int64_t n_out = t < 12 ? test_randint(9000, 13000) : test_randint(3300, 6000);
        uint64_t rb = 0;
        uint8_t *w;
        float *wf;
        make_weights_f32(bt, n_out, n_in, &w, &wf, &rb);
        float *x = malloc(sizeof(float) * (size_t)n_in), *g = malloc(sizeof(float) * (size_t)n_in);
        float *y0 = malloc(sizeof(float) * (size_t)n_out), *y = malloc(sizeof(float) * (size_t)n_out);
        double *xin = malloc(sizeof(double) * (size_t)n_in);
        for (int64_t i = 0; i < n_in; i++) x[i] = gauss(), g[i] = gauss();
        for (int64_t o = 0; o < n_out; o++) y0[o] = gauss();
        void *dw = upload_w(env, type, w, n_out, n_in);
        float *dx = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in), *dg = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in);
        float *ds = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in), *dy = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_out);
        if (!dw || !dx || !dg || !ds || !dy) {
            CHECK(0, "mv_long %s: device allocation: %s", tname(type), rf_last_error());
        } else {
            rf_gpu_mm_upload(dx, x, sizeof(float) * (size_t)n_in);
            rf_gpu_mm_upload(dg, g, sizeof(float) * (size_t)n_in);
            for (int mode = 0; mode < 3; mode++) { /* 0 plain, 1 norm + accumulate, 2 NaN in x */
                const int norm = mode == 1;
                if (mode == 2) {
                    const float nan = NAN;
                    rf_gpu_mm_upload(dx + test_randint(0, (int)n_in - 1), &nan, sizeof nan);
                }
                rf_gpu_mm_upload(dy, y0, sizeof(float) * (size_t)n_out);
                const rf_gpu_mm_out out = {type, dw, n_out, NULL, dy};
                int rc = rf_gpu_matmul_ex(env->ctx, 1, &out, n_in, dx, 1, norm ? dg : NULL, 1e-5f, norm, ds);
                if (rc == 0) rc = rf_gpu_mm_sync(env->ctx);
                if (rc) {
                    CHECK(0, "mv_long %s %lldx%lld mode %d: %s", tname(type), (long long)n_out, (long long)n_in, mode,
                          rf_last_error());
                    continue;
                }
                rf_gpu_mm_download(y, dy, sizeof(float) * (size_t)n_out);
                if (mode == 2) {
                    int64_t bad = 0;
                    for (int64_t o = 0; o < n_out; o++) bad += !isnan(y[o]);
                    CHECK(bad == 0, "mv_long %s %lldx%lld: NaN in x left %lld outputs not NaN", tname(type),
                          (long long)n_out, (long long)n_in, (long long)bad);
                    continue;
                }
                double ss = 0;
                for (int64_t i = 0; i < n_in; i++) ss += (double)x[i] * x[i];
                const double sc = norm ? 1.0 / sqrt(ss / (double)n_in + 1e-5) : 1.0;
                for (int64_t i = 0; i < n_in; i++) xin[i] = norm ? x[i] * sc * g[i] : x[i];
                const int int8 = bt != RF_TYPE_F16 && bt != RF_TYPE_BF16;
                double worst = 0;
                int64_t wo = -1;
                for (int64_t o = 0; o < n_out; o++) {
                    double s = norm ? y0[o] : 0.0, a = norm ? fabs(y0[o]) : 0.0;
                    for (int64_t i = 0; i < n_in; i++) {
                        const double p = (double)wf[o * n_in + i] * xin[i];
                        s += p;
                        a += fabs(p);
                    }
                    const double lim = 1e-4 * a + (int8 ? 1.01 * q8_bound(wf + o * n_in, xin, n_in) : 0.0) + 1e-30;
                    const double e = isfinite(y[o]) ? fabs(y[o] - s) / lim : INFINITY;
                    if (!(e <= worst)) worst = e, wo = o;
                }
                CHECK(worst <= 1.0, "mv_long %s %lldx%lld mode %d: worst error %.3g x tolerance at row %lld", tname(type),
                      (long long)n_out, (long long)n_in, mode, worst, (long long)wo);
            }
        }
        rf_gpu_mm_dfree(dw), rf_gpu_mm_dfree(dx), rf_gpu_mm_dfree(dg), rf_gpu_mm_dfree(ds), rf_gpu_mm_dfree(dy);
        free(w), free(wf), free(x), free(g), free(y0), free(y), free(xin);
    }
}

static void test_gpu(void) {
    const int ndev = rf_gpu_mm_device_count();
    /* number of checks each type would run: see test_case */
    if (ndev <= 0) {
        for (int t = 0; t < N_TYPES; t++) SKIP("no GPU device: %s matmul checks skipped", rf_type_name(TYPES[t]));
        SKIP("no GPU device: error-path checks skipped");
        return;
    }
    gpu_env env;
    setenv("RF_MM_I8_N2", "1", 1); /* check the int8 path for n = 2 as well */
    env.ctx = rf_gpu_matmul_init(NULL);
    CHECK(env.ctx != NULL, "rf_gpu_matmul_init: %s", rf_last_error());
    if (!env.ctx) return;
    env.has_cublas = !strcmp(rf_gpu_mm_gemm_path(env.ctx), "cublas");
    char name[256];
    rf_gpu_mm_device_name(name, sizeof name);
    printf("device: %s, GEMM path: %s\n", name, rf_gpu_mm_gemm_path(env.ctx));
    for (int t = 0; t < N_TYPES; t++) {
        const uint32_t type = TYPES[t];
        const int64_t qk = rf_type_get(type)->block_elems;
        if (qk == 1) {
            test_case(&env, type, 67, 37);  /* scalar decoders */
            test_case(&env, type, 45, 264); /* 16-byte decoders */
        } else if (qk == 32) {
            test_case(&env, type, 67, 224);
            test_case(&env, type, 130, 416);
            if (type == RF_TYPE_Q4_0 || type == RF_TYPE_Q8_0 || type == RF_TYPE_IQ4_NL) {
                test_case(&env, type | LAYOUT, 67, 768);
                test_case(&env, type | LAYOUT, 130, 512);
            }
        } else {
            test_case(&env, type, 37, 768);
            test_case(&env, type, 70, 512);
            if (type == RF_TYPE_Q6_K) { /* whole groups, then partial ones */
                test_case(&env, type | LAYOUT, 37, 2048);
                test_case(&env, type | LAYOUT, 70, 2816);
                test_case(&env, type | LAYOUT, 19, 768);
            }
            if (type == RF_TYPE_IQ4_XS || type == RF_TYPE_Q5_K) {
                test_case(&env, type | LAYOUT, 37, 768);
                test_case(&env, type | LAYOUT, 70, 2816);
            }
        }
    }
    test_ex(&env);
    test_ex_rows(&env);
    test_decode_pair_bounds(&env);
    test_swiglu_q(&env);
    test_gate_up_swiglu(&env);
    test_mixed_formats(&env);
    test_mv_long(&env);
    /* k_mvp where the default context takes k_mvt (RF_MM_TMA=0; on targets without k_mvt these
     * repeat the default's kernels) */
    setenv("RF_MM_TMA", "0", 1);
    gpu_env ep = env;
    ep.ctx = rf_gpu_matmul_init(NULL);
    unsetenv("RF_MM_TMA");
    CHECK(ep.ctx != NULL, "rf_gpu_matmul_init (RF_MM_TMA=0): %s", rf_last_error());
    if (ep.ctx) {
        test_ex(&ep);
        test_mv_long(&ep);
        rf_gpu_matmul_free(ep.ctx);
    }
    /* The f32 matvec kernels (RF_MM_F32_MV=1; also what n = 2 runs without RF_MM_I8_N2) on the
     * formats whose dot they factor as mul * sum(t x) + add * sum(x), where an infinite x needs
     * the exact per-element path. */
    setenv("RF_MM_F32_MV", "1", 1);
    gpu_env e32 = env;
    e32.ctx = rf_gpu_matmul_init(NULL);
    unsetenv("RF_MM_F32_MV");
    CHECK(e32.ctx != NULL, "rf_gpu_matmul_init (RF_MM_F32_MV=1): %s", rf_last_error());
    if (e32.ctx) {
        test_case(&e32, RF_TYPE_Q4_K, 37, 768);
        test_case(&e32, RF_TYPE_Q5_K, 70, 512);
        test_case(&e32, RF_TYPE_Q4_0 | LAYOUT, 67, 768);
        rf_gpu_matmul_free(e32.ctx);
    }
    /* Errors. */
    float *d = rf_gpu_mm_alloc(4096);
    CHECK(rf_gpu_matmul(env.ctx, RF_TYPE_Q8_1, d, 1, 32, d, 1, NULL, d) == -1, "Q8_1 must be refused");
    CHECK(rf_gpu_matmul(env.ctx, RF_TYPE_IQ2_XXS, d, 1, 256, d, 1, NULL, d) == -1, "IQ2_XXS must be refused");
    CHECK(rf_gpu_matmul(env.ctx, RF_TYPE_Q4_0, d, 1, 48, d, 1, NULL, d) == -1, "n_in 48 for Q4_0 must be refused");
    CHECK(rf_gpu_matmul(env.ctx, RF_TYPE_Q4_K, d, 1, 0, d, 0, NULL, d) == 0, "n == 0 is a no-op");
    /* repack: in place exactly where the layout keeps the row bytes (refused before any access) */
    uint32_t rt = 0;
    CHECK(rf_gpu_mm_repack(env.ctx, RF_TYPE_Q4_0, d, d + 512, 1, 256, &rt) == -1,
          "q4_0 repack into another buffer must be refused");
    CHECK(rf_gpu_mm_repack(env.ctx, RF_TYPE_Q6_K, d, d, 1, 768, &rt) == -1,
          "q6_K repack of longer rows in place must be refused");
    CHECK(rf_gpu_mm_sync(env.ctx) == 0, "sync after error paths: %s", rf_last_error());
    rf_gpu_mm_dfree(d);
    rf_gpu_matmul_free(env.ctx);
}

/* Both IQ4 codebook lookups of the int8 units (CUDA's by prmt's sign mode, HIP's by byte
 * permutes and a select) against the codebook: every nibble value at every position with a unit
 * x byte, then random words and random x. */
static void test_host_iq4_lookup(void) {
    static const int8_t cb[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    for (int sign = 0; sign < 2; sign++) {
        int bad = 0;
        for (int k = 0; k < 8; k++)
            for (uint32_t n = 0; n < 16; n++) {
                const uint32_t c = (0x99999999u & ~(0xfu << (4 * k))) | (n << (4 * k)); /* the others: 9 */
                const int32_t xu = (int32_t)(1u << (8 * (k % 4)));
                const int got = rf_gpu_mm_host_iq4_dot(sign, c, k < 4 ? xu : 0, k < 4 ? 0 : xu);
                bad += got != cb[n];
            }
        for (int t = 0; t < 2000; t++) {
            const uint32_t c = (uint32_t)test_rng();
            int8_t xb[8];
            int want = 0;
            for (int k = 0; k < 8; k++) {
                xb[k] = (int8_t)(test_rng() % 255 - 127);
                want += cb[(c >> (4 * k)) & 0xf] * xb[k];
            }
            int32_t xl, xh;
            memcpy(&xl, xb, 4);
            memcpy(&xh, xb + 4, 4);
            bad += rf_gpu_mm_host_iq4_dot(sign, c, xl, xh) != want;
        }
        CHECK(bad == 0, "IQ4 lookup (%s): %d wrong dots", sign ? "prmt sign mode" : "permutes and select", bad);
    }
}

int main(void) {
    printf("seed %llu\n", (unsigned long long)test_seed());
    test_host_decode();
    test_host_decode_layouts();
    test_host_qdot();
    test_host_iq4_lookup();
    test_gpu();
    return test_finish();
}

#else

int main(void) {
    SKIP("built without a GPU toolchain (RF_HAVE_CUDA / RF_HAVE_HIP): GPU matmul checks skipped");
    return test_finish();
}

#endif
