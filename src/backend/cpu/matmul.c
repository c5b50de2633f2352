#include "backend/cpu/matmul.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul_kernels.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "core/util.h"
#include "backend/cpu/thread_scratch.h"

/* ---- ISA selection ---------------------------------------------------------------------- */

/* Linux hands out AMX tile state only to a process that asks for it (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it the first tile instruction faults.
 * Asked once; the answer covers every thread of the process. */
static int amx_permitted(void) {
#if defined(__x86_64__) && defined(__linux__) && defined(SYS_arch_prctl)
    static int state; /* 0 not asked, 1 granted, 2 refused; a benign race asks twice at most */
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (!s) {
        enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
        s = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 1 : 2;
        __atomic_store_n(&state, s, __ATOMIC_RELEASE);
    }
    return s == 1;
#else
    return 0;
#endif
}

static rf_isa cpu_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        if (__builtin_cpu_supports("avx512bf16") && rf_cpu_has_amx() && amx_permitted())
            return RF_ISA_AMX;
        return RF_ISA_AVX512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return RF_ISA_AVX2;
#endif
    return RF_ISA_SCALAR;
}

rf_isa rf_isa_best(void) {
    rf_isa best = cpu_isa();
    const char *env = getenv("ROCMFORGE_ISA");
    if (env && *env) {
        rf_isa want = best;
        if (!strcmp(env, "scalar")) want = RF_ISA_SCALAR;
        else if (!strcmp(env, "avx2")) want = RF_ISA_AVX2;
        else if (!strcmp(env, "avx512")) want = RF_ISA_AVX512;
        else if (!strcmp(env, "amx")) want = RF_ISA_AMX;
        if (want < best) best = want;
    }
    return best;
}

const char *rf_isa_name(rf_isa isa) {
    switch (isa) {
    case RF_ISA_SCALAR: return "scalar";
    case RF_ISA_AVX2: return "avx2";
    case RF_ISA_AVX512: return "avx512";
    case RF_ISA_AMX: return "amx";
    }
    return "unknown";
}

/* ---- Portable pieces -------------------------------------------------------------------- */

static float dot_f32_c(const float *a, const float *b, int64_t n) {
    /* Four partial sums: keeps the scalar fallback from being one long dependency chain. */
    float s[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) s[k] += a[i + k] * b[i + k];
    for (; i < n; i++) s[0] += a[i] * b[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

static int quantize_x_c(const float *x, int64_t n, int8_t *q, float *d, float *dsum, int16_t *s16) {
    int bad = 0;
    for (int64_t b = 0; b < n / 32; b++, x += 32, q += 32) {
        float amax = 0;
        for (int i = 0; i < 32; i++) {
            bad |= !isfinite(x[i]);
            amax = fmaxf(amax, fabsf(x[i]));
        }
        if (amax > 0 && amax < 1e-30f) bad = 1;
        const float id = amax > 0 ? 127.0f / amax : 0.0f;
        int s[2] = {0, 0};
        for (int i = 0; i < 32; i++) {
            const float v = isfinite(x[i]) ? x[i] * id : 0.0f;
            q[i] = (int8_t)lrintf(v);
            s[i / 16] += q[i];
        }
        d[b] = amax / 127.0f;
        dsum[b] = d[b] * (float)(s[0] + s[1]);
        s16[2 * b] = (int16_t)s[0];
        s16[2 * b + 1] = (int16_t)s[1];
    }
    return bad;
}

static const rf_mm_kernels *kernels_for(rf_isa isa) {
    static rf_mm_kernels tab[RF_ISA_COUNT];
    static int ready; /* benign race: every thread computes the same table */
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        rf_mm_kernels k[RF_ISA_COUNT];
        memset(k, 0, sizeof k);
        for (int i = 0; i < RF_ISA_COUNT; i++) k[i].dot_f32 = dot_f32_c;
        const rf_isa have = cpu_isa();
        if (have >= RF_ISA_AVX2) rf_mm_kernels_avx2(&k[RF_ISA_AVX2]);
        if (have >= RF_ISA_AVX512) {
            k[RF_ISA_AVX512] = k[RF_ISA_AVX2];
            rf_mm_kernels_avx512(&k[RF_ISA_AVX512]);
        }
        if (have >= RF_ISA_AMX) {
            k[RF_ISA_AMX] = k[RF_ISA_AVX512];
            rf_mm_kernels_amx(&k[RF_ISA_AMX]);
        }
        memcpy(tab, k, sizeof tab);
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    if (isa > cpu_isa()) isa = cpu_isa();
    return &tab[isa];
}

/* ---- Driver ----------------------------------------------------------------------------- */

typedef struct {
    const rf_mm_kernels *k;
    uint32_t type;
    const uint8_t *w;
    uint64_t row_bytes;
    int64_t n_out, n_in, n_tok;
    const float *x;
    float *y;
    rf_xq8 xq;              /* valid when use_q8 */
    int use_q8;
    const uint8_t *tok_bad; /* [n_tok]: token must take the f32 path (q8 mode only) */
    int64_t n_bad;
    int8_t *qbuf;           /* quantization output, filled by the quantize pass */
    float *dbuf, *dsbuf;
    int16_t *sbuf;
    uint8_t *badbuf;
    rf_rowq rq;             /* row chunks for the gemv / gemm kernels */
    int path;               /* 0 per-row kernels, 1 gemv, 2 gemm */
} mm_ctx;

/* Rows [r0, r1) of thread ith among nth: contiguous, balanced, multiples of 4 where possible so
 * that threads do not share cache lines of y for n_tok == 1. */
static void split_rows(int64_t n, int ith, int nth, int64_t *r0, int64_t *r1) {
    const int64_t units = (n + 3) / 4;
    *r0 = RF_MIN(n, units * ith / nth * 4);
    *r1 = RF_MIN(n, units * (ith + 1) / nth * 4);
}

static void quantize_pass(void *ctx_, int ith, int nth) {
    mm_ctx *c = ctx_;
    const int64_t nb = c->n_in / 32;
    int (*qx)(const float *, int64_t, int8_t *, float *, float *, int16_t *) =
        c->k->quantize_x ? c->k->quantize_x : quantize_x_c;
    for (int64_t t = ith; t < c->n_tok; t += nth)
        c->badbuf[t] = (uint8_t)(qx(c->x + t * c->n_in, c->n_in, c->qbuf + t * c->n_in, c->dbuf + t * nb,
                                    c->dsbuf + t * nb, c->sbuf + t * 2 * nb) != 0);
}

/* Generic path: decode each row once with the reference decoder, dot it with every token
 * (or only the tokens flagged bad when only_bad). */
static void rows_generic(const mm_ctx *c, int64_t r0, int64_t r1, int only_bad) {
    float *row = rf_xmalloc(sizeof(float) * (size_t)c->n_in);
    for (int64_t o = r0; o < r1; o++) {
        rf_dequantize_row(c->type, c->w + (uint64_t)o * c->row_bytes, row, c->n_in);
        for (int64_t t = 0; t < c->n_tok; t++) {
            if (only_bad && !c->tok_bad[t]) continue;
            c->y[t * c->n_out + o] = c->k->dot_f32(row, c->x + t * c->n_in, c->n_in);
        }
    }
    free(row);
}

/* Row tile so that the tile's weights (~48 KiB) stay cached while all tokens pass over them. */
static int64_t tile_rows(const mm_ctx *c) {
    if (c->n_tok <= 4) return 1 << 30;
    int64_t r = (int64_t)(48 * 1024 / (c->row_bytes ? c->row_bytes : 1));
    return RF_MAX(4, RF_MIN(r, 64));
}

/* Tokens from which the tiled GEMM kernels (when the level has one for the type) replace the
 * per-row kernels. 1: every n_tok takes the GEMM (or, for n_tok == 1, a matvec kernel), except
 * where a level's table raises it per type (gemm_q8_min_tok: the AVX2 GEMM starts at 3 to 8
 * tokens). Paths differ in float summation order only (docs/PERF-CPU.md sections 5-6: exact
 * batch invariance is required of the scalar reference level, the SIMD levels agree to float
 * rounding). */
#define GEMM_MIN_TOK 1

/* Tokens flagged bad after a gemm pass: their rows are redone with the generic f32 path. */
static void bad_worker(void *ctx_, int ith, int nth) {
    const mm_ctx *c = ctx_;
    int64_t r0, r1;
    split_rows(c->n_out, ith, nth, &r0, &r1);
    if (r0 < r1) rows_generic(c, r0, r1, 1);
}

/* The gemv kernel of c's matrix over the rows taken from rq. */
static void mm_gemv(const mm_ctx *c, rf_rowq *rq) {
    if (c->use_q8) c->k->gemv_q8[c->type](c->w, c->row_bytes, rq, &c->xq, c->y);
    else c->k->gemv_f32[c->type](c->w, c->row_bytes, rq, c->n_in, c->x, c->y);
}

static void mm_worker(void *ctx_, int ith, int nth) {
    const mm_ctx *c = ctx_;
    int64_t r0, r1;
    if (c->path == 1) {
        mm_gemv(c, (rf_rowq *)&c->rq);
        return;
    }
    if (c->path == 2) {
        if (c->use_q8) c->k->gemm_q8[c->type](c->w, c->row_bytes, (rf_rowq *)&c->rq, c->n_out, &c->xq, c->n_tok, c->y);
        else c->k->gemm_f32[c->type](c->w, c->row_bytes, (rf_rowq *)&c->rq, c->n_out, c->n_in, c->x, c->n_tok, c->y);
        return;
    }
    split_rows(c->n_out, ith, nth, &r0, &r1);
    if (r0 >= r1) return;
    rf_dot_q8_fn kq = c->use_q8 ? c->k->q8[c->type] : NULL;
    rf_dot_f32_fn kf = c->use_q8 ? NULL : c->k->f32[c->type];
    if (!kq && !kf) {
        rows_generic(c, r0, r1, 0);
        return;
    }
    const int64_t tr = tile_rows(c);
    float out[4];
    for (int64_t a = r0; a < r1; a += tr) {
        const int64_t b = RF_MIN(r1, a + tr);
        for (int64_t t0 = 0; t0 < c->n_tok; t0 += 4) {
            const int nt = (int)RF_MIN(4, c->n_tok - t0);
            for (int64_t o = a; o < b; o++) {
                const uint8_t *wr = c->w + (uint64_t)o * c->row_bytes;
                if (kq) kq(wr, &c->xq, t0, nt, out);
                else kf(wr, c->n_in, c->x + t0 * c->n_in, nt, out);
                for (int j = 0; j < nt; j++) c->y[(t0 + j) * c->n_out + o] = out[j];
            }
        }
    }
    if (kq && c->n_bad) rows_generic(c, r0, r1, 1);
}

/* The calling thread's scratch for the quantized activations (thread_scratch.h; slot 2, as the
 * AVX-512 kernels use slots 0 and 1 of the worker threads, the caller among them). */
static void *scratch_get(size_t n) { return rf_thread_scratch(2, n); }

/* The matrix's fields of c (aborts on an unsupported type or row length, as rf_matmul's
 * contract says). */
static void mm_set_matrix(mm_ctx *c, uint32_t type, const void *w, int64_t n_out, float *y) {
    const rf_type_info *ti = rf_type_get(type);
    uint64_t row_bytes = 0;
    if (!ti || !ti->supported || c->n_in <= 0 || !rf_row_bytes(type, (uint64_t)c->n_in, &row_bytes)) {
        fprintf(stderr, "rf_matmul: unsupported type %s or bad row length %lld\n", rf_type_name(type),
                (long long)c->n_in);
        abort();
    }
    c->type = type;
    c->w = w;
    c->row_bytes = row_bytes;
    c->n_out = n_out;
    c->y = y;
}

/* Whether the matrix takes x quantized to int8 (before looking at x's values). */
static int mm_wants_q8(const mm_ctx *c, rf_isa isa) {
    return isa != RF_ISA_SCALAR && c->k->q8[c->type] != NULL && c->n_in % 32 == 0;
}

/* Quantizes x into the thread's scratch (c->xq, the bad-token flags); turns use_q8 off when no
 * token row is finite. */
static void mm_quantize_x(mm_ctx *c, rf_threadpool *tp) {
    const int64_t n_in = c->n_in, n_tok = c->n_tok, nb = n_in / 32;
    const size_t qbytes = (size_t)(n_tok * n_in + 63) & ~(size_t)63;
    const size_t fbytes = sizeof(float) * (size_t)(n_tok * nb);
    const size_t sbytes = sizeof(int16_t) * (size_t)(n_tok * nb * 2);
    uint8_t *s = scratch_get(qbytes + 2 * fbytes + sbytes + (size_t)n_tok + 64);
    c->qbuf = (int8_t *)s;
    c->dbuf = (float *)(s + qbytes);
    c->dsbuf = (float *)(s + qbytes + fbytes);
    c->sbuf = (int16_t *)(s + qbytes + 2 * fbytes);
    c->badbuf = s + qbytes + 2 * fbytes + sbytes;
    if (n_tok == 1 || !tp) quantize_pass(c, 0, 1);
    else rf_threadpool_run(tp, quantize_pass, c);
    for (int64_t t = 0; t < n_tok; t++) c->n_bad += c->badbuf[t];
    c->tok_bad = c->badbuf;
    c->xq = (rf_xq8){n_in, c->qbuf, c->dbuf, c->dsbuf, c->sbuf};
    if (c->n_bad == n_tok) c->use_q8 = 0; /* all rows non-finite: plain f32 path */
}

/* gemv (one token) / gemm (many) kernels take rows in chunks from a shared counter: a few chunks
 * per thread for the gemm, one per thread for the gemv, multiples of 16 rows (gemm tiles; y cache
 * lines not shared). A gemv is a stream from memory: every chunk a thread starts is a new stream
 * for the prefetchers, and threads taking alternate chunks interleave their streams. 1B tg32 on
 * the Xeon with AMX, 4 chunks per thread against 1, alternating, 4 rounds: Q4_0 -2.5%, Q4_K_M
 * -3%, Q8_0 -2%, F16 -1%; 16 per thread: Q4_0 -13% (PERF-CPU.md section 22). A thread the OS has
 * not scheduled still costs nothing: the other one takes its chunk from the shared counter. */
static rf_rowq mm_chunks(int path, int64_t n_rows, int nth) {
    int64_t chunk = path == 1 ? (n_rows + nth - 1) / nth : n_rows / ((int64_t)nth * 8);
    chunk = RF_MAX(16, (chunk + 15) / 16 * 16);
    return (rf_rowq){0, n_rows, chunk};
}

static void mm_choose_path(mm_ctx *c, int nth) {
    const uint32_t type = c->type;
    c->path = 0;
    if (c->n_tok == 1 && (c->use_q8 ? c->k->gemv_q8[type] != NULL : c->k->gemv_f32[type] != NULL)) c->path = 1;
    else if (c->n_tok >= GEMM_MIN_TOK &&
             (c->use_q8 ? c->k->gemm_q8[type] != NULL && c->n_tok >= c->k->gemm_q8_min_tok[type]
                        : c->k->gemm_f32[type] != NULL && c->n_tok >= c->k->gemm_f32_min_tok[type]))
        c->path = 2;
    if (c->path) c->rq = mm_chunks(c->path, c->n_out, nth);
}

static void mm_run(mm_ctx *c, rf_threadpool *tp) {
    const int nth = tp ? rf_threadpool_size(tp) : 1;
    if (nth > 1 && c->n_out > 1) rf_threadpool_run(tp, mm_worker, c);
    else mm_worker(c, 0, 1);
    if (c->path == 2 && c->use_q8 && c->n_bad) {
        if (nth > 1 && c->n_out > 1) rf_threadpool_run(tp, bad_worker, c);
        else bad_worker(c, 0, 1);
    }
}

void rf_matmul(rf_threadpool *tp, rf_isa isa, uint32_t type, const void *w, int64_t n_out, int64_t n_in,
               const float *x, int64_t n_tok, float *y) {
    mm_ctx c = {0};
    c.k = kernels_for(isa);
    c.n_in = n_in;
    c.n_tok = n_tok;
    c.x = x;
    mm_set_matrix(&c, type, w, n_out, y);
    if (n_out <= 0 || n_tok <= 0) return;
    c.use_q8 = mm_wants_q8(&c, isa);
    if (c.use_q8) mm_quantize_x(&c, tp);
    mm_choose_path(&c, tp ? rf_threadpool_size(tp) : 1);
    mm_run(&c, tp);
}

/* One dispatch over the rows of several matvecs: the rows of all matrices in order, one chunk
 * per thread, each chunk's piece of a matrix run by that matrix's gemv kernel. */
typedef struct {
    const mm_ctx *mats;
    int n_mat;
    rf_rowq rq;
} mm_many;

static void many_worker(void *ctx_, int ith, int nth) {
    (void)ith;
    (void)nth;
    mm_many *m = ctx_;
    int64_t a, b;
    while (rf_rowq_take(&m->rq, &a, &b)) {
        int64_t base = 0;
        for (int i = 0; i < m->n_mat && base < b; base += m->mats[i].n_out, i++) {
            const int64_t lo = RF_MAX(a, base) - base, hi = RF_MIN(b, base + m->mats[i].n_out) - base;
            if (lo >= hi) continue;
            rf_rowq piece = {lo, hi, hi - lo};
            mm_gemv(&m->mats[i], &piece);
        }
    }
}

#define MM_MANY_MAX 8

void rf_matmul_many(rf_threadpool *tp, rf_isa isa, int n_mat, const rf_mm_mat *mats, int64_t n_in, const float *x,
                    int64_t n_tok) {
    if (n_mat > MM_MANY_MAX || n_tok != 1) {
        for (int i = 0; i < n_mat; i++) rf_matmul(tp, isa, mats[i].type, mats[i].w, mats[i].n_out, n_in, x, n_tok, mats[i].y);
        return;
    }
    mm_ctx c[MM_MANY_MAX] = {{0}};
    int n = 0, use_q8 = -1, same = 1;
    for (int i = 0; i < n_mat; i++) {
        c[n].k = kernels_for(isa);
        c[n].n_in = n_in;
        c[n].n_tok = n_tok;
        c[n].x = x;
        mm_set_matrix(&c[n], mats[i].type, mats[i].w, mats[i].n_out, mats[i].y);
        if (mats[i].n_out <= 0) continue;
        const int q8 = mm_wants_q8(&c[n], isa);
        if (use_q8 < 0) use_q8 = q8;
        same &= q8 == use_q8;
        n++;
    }
    if (!n) return;
    if (!same) { /* an f32 and an int8 matrix: nothing to share */
        for (int i = 0; i < n; i++) rf_matmul(tp, isa, c[i].type, c[i].w, c[i].n_out, n_in, x, n_tok, c[i].y);
        return;
    }
    c[0].use_q8 = use_q8;
    if (use_q8) mm_quantize_x(&c[0], tp);
    const int nth = tp ? rf_threadpool_size(tp) : 1;
    int64_t rows = 0;
    int all_gemv = 1;
    for (int i = 0; i < n; i++) {
        if (i) { /* the quantized x, shared */
            c[i].use_q8 = c[0].use_q8;
            c[i].xq = c[0].xq;
            c[i].tok_bad = c[0].tok_bad;
            c[i].n_bad = c[0].n_bad;
        }
        mm_choose_path(&c[i], nth);
        all_gemv &= c[i].path == 1;
        rows += c[i].n_out;
    }
    if (!all_gemv) {
        for (int i = 0; i < n; i++) mm_run(&c[i], tp);
        return;
    }
    mm_many m = {c, n, mm_chunks(1, rows, nth)};
    if (nth > 1 && rows > 1) rf_threadpool_run(tp, many_worker, &m);
    else many_worker(&m, 0, 1);
}
