/* bench_gpu_matmul: times rf_gpu_matmul on the device.
 *
 *   bench_gpu_matmul [iters] [quick|ab]
 *
 * ab: decode A/B in one process: for Q4_K Q6_K Q4_0 Q8_0 F16 and the 7B and 1B decode shapes, n = 1,
 * GB/s of a context with the switch AB_SWITCH=0 (default RF_MM_MVP: the two-kernel path k_qx +
 * k_mvq, or k_mv for F16; e.g. AB_SWITCH=RF_MM_TMA: k_mvp instead of k_mvt) and of the default
 * context, each on the GGUF layout and after rf_gpu_mm_repack (the device layouts of Q4_0, Q8_0
 * and Q6_K; Q4_K and F16 have none, so those columns repeat).
 * one TYPE N_OUT N_IN: n = 1 calls of the default context on a repacked weight (for a profiler;
 * RF_MM_REPACK=0: the GGUF layout).
 *
 * Matvec (n = 1, 2, 8): GB/s of weight bytes (weight bytes / median time per call), weights
 * rotated among enough copies (>= 256 MB together) that they are not served from L2.
 * GEMM (n = 512): TFLOP/s (2 * n * n_out * n_in / time) for the default path and the tiled kernel.
 * Build: sh bench/gpu_mm_build.sh (CUDA). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend/gpu/matmul_gpu.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "core/util.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}
static float randf(void) { return (float)((rng() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }

static void put_f16(uint8_t *p, float f) {
    uint16_t h = rf_fp32_to_fp16(f);
    memcpy(p, &h, 2);
}

/* Random weights: random bytes with sane f16 scales (quantized), random floats (plain). */
static void fill(uint32_t type, int64_t n_out, int64_t n_in, uint8_t *buf) {
    const rf_type_info *ti = rf_type_get(type);
    uint64_t rb = 0;
    rf_row_bytes(type, (uint64_t)n_in, &rb);
    if (ti->block_elems == 1) {
        float *tmp = malloc(sizeof(float) * (size_t)n_in);
        for (int64_t r = 0; r < n_out; r++) {
            for (int64_t i = 0; i < n_in; i++) tmp[i] = randf();
            rf_quantize_row(type, tmp, buf + r * rb, n_in);
        }
        free(tmp);
        return;
    }
    const int64_t nb = n_out * (n_in / ti->block_elems);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = buf + b * ti->block_bytes;
        for (uint32_t i = 0; i < ti->block_bytes; i++) p[i] = (uint8_t)rng();
        switch (type) {
        case RF_TYPE_Q4_K: case RF_TYPE_Q5_K: put_f16(p, 0.001f); put_f16(p + 2, 0.001f); break;
        case RF_TYPE_Q2_K: put_f16(p + 80, 0.01f); put_f16(p + 82, 0.01f); break;
        case RF_TYPE_Q3_K: put_f16(p + 108, 0.001f); break;
        case RF_TYPE_Q6_K: put_f16(p + 208, 0.0001f); break;
        case RF_TYPE_Q4_1: case RF_TYPE_Q5_1: put_f16(p, 0.01f); put_f16(p + 2, -0.1f); break;
        default: put_f16(p, 0.01f); break;
        }
    }
}

/* Copies of one random weight matrix in device memory, each followed by the padding that
 * matmul_gpu.h asks for; *bytes: the weight bytes of one copy. */
static void **upload_copies(uint32_t type, int64_t n_out, int64_t n_in, int copies, size_t *bytes) {
    uint64_t rb = 0;
    rf_row_bytes(type, (uint64_t)n_in, &rb);
    *bytes = (size_t)(rb * (uint64_t)n_out);
    uint8_t *hw = malloc(*bytes);
    fill(type, n_out, n_in, hw);
    void **dw = calloc((size_t)copies, sizeof(void *));
    for (int c = 0; c < copies; c++) {
        dw[c] = rf_gpu_mm_alloc(*bytes + RF_GPU_WEIGHT_PAD);
        rf_gpu_mm_upload(dw[c], hw, *bytes);
    }
    free(hw);
    return dw;
}

static void free_copies(void **dw, int copies) {
    for (int c = 0; c < copies; c++) rf_gpu_mm_dfree(dw[c]);
    free(dw);
}

/* Enough copies of a matrix of `bytes` that, cycled through, they are read from DRAM, not L2. */
static int dram_copies(size_t bytes) {
    int copies = (int)((256u << 20) / bytes) + 1;
    return copies < 2 ? 2 : (copies > 64 ? 64 : copies);
}

/* Repacks *w (n_out GGUF rows of `type`) into the context's device layout, into a new buffer
 * where the layout's rows are longer (as the backend does); returns the type to pass. */
static uint32_t repack_one(rf_gpu_matmul_ctx *c, uint32_t type, void **w, int64_t n_out, int64_t n_in) {
    const uint32_t xt = rf_gpu_mm_repack_type(c, type, n_in);
    if (xt == type) return type;
    const int64_t rb = rf_gpu_mm_row_bytes(type, n_in), drb = rf_gpu_mm_row_bytes(xt, n_in);
    void *dst = *w;
    if (drb != rb) {
        dst = rf_gpu_mm_alloc((size_t)(drb * n_out) + RF_GPU_WEIGHT_PAD);
        if (!dst || rf_gpu_mm_fill((uint8_t *)dst + drb * n_out, 0, RF_GPU_WEIGHT_PAD)) return type;
    }
    uint32_t pt = type;
    if (rf_gpu_mm_repack(c, type, *w, dst, n_out, n_in, &pt) || rf_gpu_mm_sync(c)) {
        fprintf(stderr, "repack: %s\n", rf_last_error());
        if (dst != *w) rf_gpu_mm_dfree(dst);
        return type;
    }
    if (dst != *w) {
        rf_gpu_mm_dfree(*w);
        *w = dst;
    }
    return pt;
}

static rf_gpu_matmul_ctx *ctx_env(const char *name, const char *val) {
    if (name) setenv(name, val, 1);
    rf_gpu_matmul_ctx *c = rf_gpu_matmul_init(NULL);
    if (name) unsetenv(name);
    return c;
}

static int run_ab(int iters) {
    const char *sw = getenv("AB_SWITCH") ? getenv("AB_SWITCH") : "RF_MM_MVP";
    rf_gpu_matmul_ctx *ctx[2] = {ctx_env(sw, "0"), ctx_env(NULL, NULL)};
    if (!ctx[0] || !ctx[1]) {
        fprintf(stderr, "init: %s\n", rf_last_error());
        return 1;
    }
    const uint32_t types[] = {RF_TYPE_Q4_K, RF_TYPE_Q6_K, RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_F16};
    const int64_t shapes[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {1024, 4096}, {3072, 2048}, {16384, 2048}, {2048, 8192}};
    const int64_t xn = 2 * 11008;
    float *dx = rf_gpu_mm_alloc(sizeof(float) * (size_t)xn), *dy = rf_gpu_mm_alloc(sizeof(float) * (size_t)xn);
    float *hx = malloc(sizeof(float) * (size_t)xn);
    for (int64_t i = 0; i < xn; i++) hx[i] = randf();
    rf_gpu_mm_upload(dx, hx, sizeof(float) * (size_t)xn);
    free(hx);
    printf("%s=0 (A) against the default (B); x8: after rf_gpu_mm_repack\n", sw);
    printf("%-6s %-12s %2s | %9s %9s %9s %9s | %8s %8s %8s %8s (GB/s | us)\n", "type", "n_out x n_in", "n", "A", "B",
           "A x8", "B x8", "A", "B", "A x8", "B x8");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const uint32_t type = types[t];
            const int64_t n_out = shapes[s][0], n_in = shapes[s][1];
            uint64_t rb = 0;
            rf_row_bytes(type, (uint64_t)n_in, &rb);
            const int copies = dram_copies((size_t)(rb * (uint64_t)n_out));
            size_t bytes = 0;
            void **dw = upload_copies(type, n_out, n_in, copies, &bytes);
            {
                const int n = 1;
                double ms[4];
                for (int k = 0; k < 2; k++)
                    ms[k] = rf_gpu_mm_time(ctx[k], type, (const void *const *)dw, copies, n_out, n_in, dx, n, dy, iters);
                uint32_t pt = type;
                for (int c = 0; c < copies; c++) pt = repack_one(ctx[1], type, &dw[c], n_out, n_in);
                for (int k = 0; k < 2; k++)
                    ms[2 + k] = rf_gpu_mm_time(ctx[k], pt, (const void *const *)dw, copies, n_out, n_in, dx, n, dy, iters);
                printf("%-6s %5lldx%-6lld %2d |", rf_type_name(type), (long long)n_out, (long long)n_in, n);
                for (int k = 0; k < 4; k++) printf(" %9.1f", (double)bytes / (ms[k] * 1e6));
                printf(" |");
                for (int k = 0; k < 4; k++) printf(" %8.2f", ms[k] * 1e3);
                printf("\n");
            }
            free_copies(dw, copies);
        }
    rf_gpu_mm_dfree(dx);
    rf_gpu_mm_dfree(dy);
    for (int k = 0; k < 2; k++) rf_gpu_matmul_free(ctx[k]);
    return 0;
}

int main(int argc, char **argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 30;
    if (argc > 2 && !strcmp(argv[2], "ab")) {
        if (rf_gpu_mm_device_count() <= 0) {
            printf("no GPU device\n");
            return 0;
        }
        char nm[256];
        rf_gpu_mm_device_name(nm, sizeof nm);
        printf("device: %s\n", nm);
        return run_ab(iters);
    }
    /* "one TYPE N_OUT N_IN": n = 1 calls of the default context only (for a profiler) */
    if (argc > 5 && !strcmp(argv[2], "one")) {
        uint32_t type = RF_TYPE_COUNT;
        for (uint32_t t = 0; t < RF_TYPE_COUNT; t++)
            if (rf_type_get(t) && rf_type_get(t)->name && !strcasecmp(rf_type_get(t)->name, argv[3])) type = t;
        const int64_t n_out = atoll(argv[4]), n_in = atoll(argv[5]);
        uint64_t rb = 0;
        if (type == RF_TYPE_COUNT || !rf_row_bytes(type, (uint64_t)n_in, &rb) || rf_gpu_mm_device_count() <= 0) {
            fprintf(stderr, "one: bad type/shape or no GPU\n");
            return 1;
        }
        rf_gpu_matmul_ctx *c = rf_gpu_matmul_init(NULL);
        size_t bytes = 0;
        void **dw = upload_copies(type, n_out, n_in, 1, &bytes);
        float *dx = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_in), *dy = rf_gpu_mm_alloc(sizeof(float) * (size_t)n_out);
        float *hx = malloc(sizeof(float) * (size_t)n_in);
        for (int64_t i = 0; i < n_in; i++) hx[i] = randf();
        rf_gpu_mm_upload(dx, hx, sizeof(float) * (size_t)n_in);
        const uint32_t pt = repack_one(c, type, &dw[0], n_out, n_in);
        const double ms = rf_gpu_mm_time(c, pt, (const void *const *)dw, 1, n_out, n_in, dx, 1, dy, iters);
        printf("%s %lldx%lld n=1: %.2f us, %.1f GB/s\n", argv[3], (long long)n_out, (long long)n_in, ms * 1e3,
               (double)bytes / (ms * 1e6));
        free(hx);
        free_copies(dw, 1);
        rf_gpu_mm_dfree(dx);
        rf_gpu_mm_dfree(dy);
        rf_gpu_matmul_free(c);
        return 0;
    }
    /* "quick": the decode-relevant types, n = 1 and 2, the large and the small shapes, one GEMM */
    const int quick = argc > 2 && !strcmp(argv[2], "quick");
    if (rf_gpu_mm_device_count() <= 0) {
        printf("no GPU device\n");
        return 0;
    }
    char name[256];
    rf_gpu_mm_device_name(name, sizeof name);
    rf_gpu_matmul_ctx *ctx = rf_gpu_matmul_init(NULL);
    if (!ctx) {
        fprintf(stderr, "init: %s\n", rf_last_error());
        return 1;
    }
    printf("device: %s; GEMM path: %s\n", name, rf_gpu_mm_gemm_path(ctx));
    const uint32_t types[] = {RF_TYPE_Q4_K, RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_F16, RF_TYPE_Q6_K, RF_TYPE_Q5_K,
                              RF_TYPE_Q2_K, RF_TYPE_Q3_K, RF_TYPE_IQ4_XS, RF_TYPE_BF16, RF_TYPE_F32};
    const uint32_t qtypes[] = {RF_TYPE_Q4_K, RF_TYPE_Q6_K, RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_F16, RF_TYPE_BF16};
    const int64_t shapes[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {1024, 4096}, {4096, 1024}, {2048, 512}};
    const int ns[] = {1, 2, 8};
    const int n_types = quick ? (int)(sizeof qtypes / sizeof qtypes[0]) : (int)(sizeof types / sizeof types[0]);
    const int n_ns = quick ? 2 : 3;
    float *dx = rf_gpu_mm_alloc(sizeof(float) * 512 * 11008);
    float *dy = rf_gpu_mm_alloc(sizeof(float) * 512 * 11008);
    {
        float *hx = malloc(sizeof(float) * 512 * 11008);
        for (int i = 0; i < 512 * 11008; i++) hx[i] = randf();
        rf_gpu_mm_upload(dx, hx, sizeof(float) * 512 * 11008);
        free(hx);
    }
    printf("%-8s %-12s %4s %10s %10s\n", "type", "n_out x n_in", "n", "us", "GB/s");
    for (int t = 0; t < n_types; t++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const uint32_t type = quick ? qtypes[t] : types[t];
            const int64_t n_out = shapes[s][0], n_in = shapes[s][1];
            uint64_t rb = 0;
            rf_row_bytes(type, (uint64_t)n_in, &rb);
            const int copies = dram_copies((size_t)(rb * (uint64_t)n_out));
            size_t bytes = 0;
            void **dw = upload_copies(type, n_out, n_in, copies, &bytes);
            for (int k = 0; k < n_ns; k++) {
                const double ms = rf_gpu_mm_time(ctx, type, (const void *const *)dw, copies, n_out, n_in, dx, ns[k], dy, iters);
                if (ms < 0) {
                    printf("%-8s %5lldx%-6lld %4d failed: %s\n", rf_type_name(type), (long long)n_out, (long long)n_in, ns[k],
                           rf_last_error());
                    continue;
                }
                printf("%-8s %5lldx%-6lld %4d %10.2f %10.1f\n", rf_type_name(type), (long long)n_out, (long long)n_in, ns[k],
                       ms * 1e3, (double)bytes / (ms * 1e-3) / 1e9);
            }
            if (quick ? (s == 0 && (type == RF_TYPE_Q4_K || type == RF_TYPE_F16)) : (s < 2 && t < 4)) {
                for (int tiled = 0; tiled <= !quick; tiled++) {
                    rf_gpu_mm_force_tiled(ctx, tiled);
                    const int n = 512;
                    const double ms = rf_gpu_mm_time(ctx, type, (const void *const *)dw, 2, n_out, n_in, dx, n, dy, 5);
                    printf("%-8s %5lldx%-6lld %4d %10.2f %8.1f TFLOP/s (%s)\n", rf_type_name(type), (long long)n_out,
                           (long long)n_in, n, ms * 1e3, 2.0 * n * (double)n_out * (double)n_in / (ms * 1e-3) / 1e12,
                           rf_gpu_mm_gemm_path(ctx));
                }
                rf_gpu_mm_force_tiled(ctx, 0);
            }
            free_copies(dw, copies);
        }
    }
    rf_gpu_mm_dfree(dx);
    rf_gpu_mm_dfree(dy);
    rf_gpu_matmul_free(ctx);
    return 0;
}
