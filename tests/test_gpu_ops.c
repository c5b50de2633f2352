/* GPU backend tests: every kernel against its CPU twin (backend/cpu/ops.h, runtime/sampler.c) on
 * fresh random inputs, then whole models on device "gpu" against llama.cpp's golden logits.
 * Every output element is checked; each test states its tolerance. Without a GPU (or without a
 * GPU toolchain in the build) every group SKIPs.
 *
 * Tolerances (|gpu - cpu| <= atol + rtol * |cpu|; NaN must meet NaN, inf the same inf):
 *   embed (all types), get_rows, copy_block, scale, causal mask, greedy sampling: exact
 *   rmsnorm, softmax rows, swiglu: 1e-5 relative (parallel sums / expf ulps)
 *   rope: 2e-3 absolute on values in [-1, 1] (an ulp of theta at position 5000 is 5e-4 rad); the
 *     KV store, f32 and f16 caches: v exact (f16: the same round-to-nearest-even, incl. ties,
 *     overflow to inf, subnormals and NaN), rotated k 2e-3 (f32) / 3e-3 (f16: 2e-3 before
 *     rounding can flip the rounding by one f16 ulp, 9.8e-4 below 1)
 *   attention (every case with an f32 and an f16 cache; CPU and GPU read the same cached values):
 *     1e-4 absolute + 1e-4 relative (summation order over up to 9000 positions); one-token
 *     decode cases also with the int8 copy of the output for the next matvec, which must equal
 *     the host's quantization of the f32 output bit for bit (NaN blocks marked);
 *     the tensor-core prefill and decode (CUDA sm_80+, head dims 64/128) round q, k, v and the softmax
 *     weights to f16 (relative error 2^-11 = 4.9e-4 each; scores of |q| <= 2, |k| <= 1, hd 128
 *     err ~ scale * sqrt(hd) * 2 * 4.9e-4 ~ 1e-3 before the exp): 2e-3 absolute + 1e-2 relative
 *     on outputs of magnitude <= 1 (the measured worst case is printed)
 *   seeded sampling: same token as the CPU (at most 1 in 100 draws may differ, where expf's last
 *   bit decides), log-probability 1e-4; the same seed twice gives the same tokens
 *   models: golden tolerances of ../shared/golden/README.md (stories260K 3e-3 + 48 greedy tokens) */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "core/dtype.h"
#include "core/kv_format.h"
#include "core/quant.h"
#include "core/util.h"
#include "golden.h"
#include "paged_kv.h"
#include "model/model.h"
#include "rocmforge.h"
#include "runtime/sampler.h"
#include "test.h"

#if defined(RF_HAVE_CUDA) || defined(RF_HAVE_HIP)
#include "backend/gpu/gpu_backend.h"
#include "backend/gpu/kernels.h"
#define HAVE_GPU_BUILD 1
#else
#define HAVE_GPU_BUILD 0
#endif

static rf_backend *be;
/* ROCMFORGE_GPU_QUICK=1: smaller shapes (for runs under compute-sanitizer) */
static int quick;

/* ---- helpers ------------------------------------------------------------------------------ */

static void *dput(const void *h, size_t bytes) {
    void *d = be->ops->alloc(be, bytes ? bytes : 4);
    if (d && bytes) be->ops->upload(be, d, h, bytes);
    return d;
}
static int dget(void *h, const void *d, size_t bytes) { return be->ops->download(be, h, d, bytes); }
static void dfree(void *d) { be->ops->free(be, d); }

static void fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = test_randf(lo, hi);
}

/* Element-wise comparison; returns the number of bad elements and prints the first. */
static size_t compare(const char *what, const float *got, const float *ref, size_t n, double atol, double rtol) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float g = got[i], r = ref[i];
        bool ok;
        if (isnan(r) || isnan(g)) ok = isnan(r) && isnan(g);
        else if (isinf(r) || isinf(g)) ok = g == r;
        else ok = fabs((double)g - r) <= atol + rtol * fabs((double)r);
        if (!ok && bad++ == 0)
            fprintf(stderr, "  %s: element %zu: gpu %.9g, cpu %.9g\n", what, i, (double)g, (double)r);
    }
    return bad;
}

#define CHECK_CLOSE(what, got, ref, n, atol, rtol)                                                   \
    do {                                                                                             \
        size_t bad_ = compare(what, got, ref, n, atol, rtol);                                        \
        CHECK(bad_ == 0, "%s: %zu of %zu elements outside tolerance", what, bad_, (size_t)(n));       \
    } while (0)

static rf_weight f32_weight(const char *name, void *dev, int64_t n) {
    rf_weight w = {name, RF_TYPE_F32, 1, n, NULL, dev, 0};
    return w;
}

/* ---- embed: every weight type ------------------------------------------------------------ */

static void test_embed(void) {
    const uint32_t types[] = {RF_TYPE_F32,  RF_TYPE_F16,  RF_TYPE_BF16, RF_TYPE_Q4_0, RF_TYPE_Q4_1,
                              RF_TYPE_Q5_0, RF_TYPE_Q5_1, RF_TYPE_Q8_0, RF_TYPE_Q2_K, RF_TYPE_Q3_K,
                              RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K, RF_TYPE_IQ4_NL, RF_TYPE_IQ4_XS};
    for (size_t ti = 0; ti < RF_ARRAY_LEN(types); ti++) {
        uint32_t t = types[ti];
        for (int variant = 0; variant < 2; variant++) {
            const int64_t n_in = variant ? 256 : 768 + 256 * test_randint(0, 2);
            const int n_vocab = variant ? 3 : 37 + test_randint(0, 20);
            uint64_t rb = 0;
            rf_row_bytes(t, (uint64_t)n_in, &rb);
            uint8_t *table = malloc(rb * (size_t)n_vocab);
            float *rowf = malloc(sizeof(float) * (size_t)n_in);
            /* variant 0: encoded realistic data (random bytes where no encoder exists);
             * variant 1: random bytes everywhere (any bit pattern must decode identically) */
            for (int r = 0; r < n_vocab; r++) {
                fill(rowf, (size_t)n_in, -2.0f, 2.0f);
                if (r == 1) memset(rowf, 0, sizeof(float) * (size_t)n_in);
                if (r == 2) for (int64_t i = 0; i < n_in; i++) rowf[i] *= 3e4f;
                if (variant || rf_quantize_row(t, rowf, table + rb * (size_t)r, n_in))
                    for (uint64_t b = 0; b < rb; b++) table[rb * (size_t)r + b] = (uint8_t)test_randint(0, 255);
            }
            const int n = 23;
            int32_t tok[23];
            for (int i = 0; i < n; i++) tok[i] = i < 3 ? (i == 0 ? 0 : i == 1 ? n_vocab - 1 : 1) : test_randint(0, n_vocab - 1);
            void *dt = dput(table, rb * (size_t)n_vocab);
            int32_t *dtok = dput(tok, sizeof tok);
            float *dout = be->ops->alloc(be, sizeof(float) * (size_t)n * n_in);
            rf_weight w = {"tok_embd", t, n_vocab, n_in, table, dt, 0};
            be->ops->embed(be, &w, dtok, n, dout);
            float *got = malloc(sizeof(float) * (size_t)n * n_in), *ref = malloc(sizeof(float) * (size_t)n * n_in);
            int rc = dget(got, dout, sizeof(float) * (size_t)n * n_in);
            CHECK(rc == 0, "embed %s: %s", rf_type_name(t), rf_error());
            rf_weight hw = w;
            hw.data = table;
            cpu_embed(&hw, tok, n, ref);
            char what[64];
            snprintf(what, sizeof what, "embed %s (%s)", rf_type_name(t), variant ? "random bytes" : "encoded");
            CHECK_CLOSE(what, got, ref, (size_t)n * n_in, 0, 0);
            dfree(dt);
            dfree(dtok);
            dfree(dout);
            free(table);
            free(rowf);
            free(got);
            free(ref);
        }
    }
}

/* ---- rmsnorm ------------------------------------------------------------------------------ */

static void test_rmsnorm(void) {
    const int shapes[][2] = {{1, 1}, {3, 7}, {5, 64}, {7, 257}, {2, 4096}, {33, 100}, {4, 1000}, {64, 128}};
    for (size_t si = 0; si < RF_ARRAY_LEN(shapes); si++) {
        for (int mode = 0; mode < 4; mode++) { /* 0 plain, 1 residual, 2 out aliases x, 3 edge values */
            int rows = shapes[si][0], dim = shapes[si][1];
            size_t n = (size_t)rows * dim;
            float *x = malloc(4 * n), *res = malloc(4 * n), *w = malloc(4 * (size_t)dim);
            fill(x, n, -3, 3);
            fill(res, n, -3, 3);
            fill(w, (size_t)dim, -1.5f, 1.5f);
            if (mode == 3) {
                for (int i = 0; i < dim; i++) x[i] = 0; /* a zero row */
                if (rows > 1) for (int i = 0; i < dim; i++) x[dim + i] *= 1e15f; /* huge: x^2 overflows */
                if (rows > 2) x[2 * dim + dim / 2] = NAN;
                if (rows > 3) x[3 * dim] = INFINITY;
            }
            float *dx = dput(x, 4 * n), *dr = dput(res, 4 * n), *dw = dput(w, 4 * (size_t)dim);
            float *dout = mode == 2 ? dx : be->ops->alloc(be, 4 * n);
            rf_weight wt = f32_weight("norm", dw, dim);
            const float *resid = mode == 1 || mode == 3 ? dr : NULL;
            be->ops->rmsnorm(be, dx, resid, &wt, rows, dim, 1e-5f, dout);
            float *gx = malloc(4 * n), *gout = malloc(4 * n), *rout = malloc(4 * n);
            CHECK(dget(gx, dx, 4 * n) == 0 && dget(gout, dout, 4 * n) == 0, "rmsnorm: %s", rf_error());
            cpu_rmsnorm(x, resid ? res : NULL, w, rows, dim, 1e-5f, mode == 2 ? x : rout);
            char what[80];
            snprintf(what, sizeof what, "rmsnorm %dx%d mode %d", rows, dim, mode);
            CHECK_CLOSE(what, gout, mode == 2 ? x : rout, n, 1e-6, 1e-5);
            if (mode != 2) CHECK_CLOSE("rmsnorm residual stream", gx, x, n, 0, 0);
            dfree(dx);
            dfree(dr);
            dfree(dw);
            if (mode != 2) dfree(dout);
            free(x); free(res); free(w); free(gx); free(gout); free(rout);
        }
    }
}

/* ---- rope + KV store ------------------------------------------------------------------------ */

static void test_rope(void) {
    struct { int mode, hd, n_rot, n_head, n_kv, ff; float fs; } cfg[] = {
        {RF_ROPE_NORMAL, 64, 64, 8, 8, 0, 1.0f},   {RF_ROPE_NEOX, 128, 128, 16, 4, 0, 1.0f},
        {RF_ROPE_NORMAL, 128, 64, 8, 1, 1, 0.25f}, {RF_ROPE_NEOX, 64, 32, 32, 4, 1, 0.5f},
        {RF_ROPE_NEOX, 128, 128, 32, 8, 1, 1.0f},
    };
    const uint32_t kv_types[] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_Q8_0, RF_TYPE_Q4_0};
    for (size_t ki = 0; ki < RF_ARRAY_LEN(kv_types); ki++)
    for (size_t ci = 0; ci < RF_ARRAY_LEN(cfg); ci++) {
        const uint32_t kvt = kv_types[ki];
        const int n_tok = 1 + test_randint(0, 40), hd = cfg[ci].hd;
        const int qd = cfg[ci].n_head * hd, kvd = cfg[ci].n_kv * hd;
        const int n_slots = 64;
        float *q = malloc(4 * (size_t)n_tok * qd), *k = malloc(4 * (size_t)n_tok * kvd), *v = malloc(4 * (size_t)n_tok * kvd);
        float *sent = malloc(4 * (size_t)n_slots * kvd);
        float ff[64];
        int32_t pos[64], slot[64];
        fill(q, (size_t)n_tok * qd, -1, 1);
        fill(k, (size_t)n_tok * kvd, -1, 1);
        fill(v, (size_t)n_tok * kvd, -1, 1);
        /* f16 rounding edge cases in v (stored as is, compared exactly): ties to even, the largest
         * finite value, overflow to inf, subnormals, underflow to zero, NaN */
        const float edge[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.0f, 65520.0f, -1e6f,
                              0x1p-20f,        3e-8f,               -2e-8f,   NAN,      0x1.8p-25f};
        for (size_t i = 0; i < RF_ARRAY_LEN(edge) && i < (size_t)n_tok * kvd; i++)
            v[test_randint(0, n_tok * kvd - 1)] = edge[i];
        /* q8_0 rounding ties: a block of v with amax 127 has d = 1 and id = 1, so x * id = x and the
         * halves must round away from zero (roundf), not to even */
        const float ties[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, -1.5f, 126.5f, -126.5f, 3.5f, -3.5f};
        for (size_t i = 0; i < RF_ARRAY_LEN(ties); i++) v[i] = ties[i];
        /* q4_0: the second block of v has m = -8, so d = 1, id = 1 and x + 8.5 truncates: halves
         * go up (0.5 -> code 9, -0.5 -> 8, -7.5 -> 1), 7.5 clamps to 15; the third has m = 8
         * (d = -1): -8 gives 16.5, clamped to 15; of the tie 8 / -8 the first is m */
        const float q4a[] = {-8.0f, 0.5f, -0.5f, 1.5f, -1.5f, 7.5f, 7.49f, -7.5f, 8.0f * 0.999f, -0.0f};
        const float q4b[] = {7.9f, -7.9f, 8.0f, -8.0f, 3.999f, -4.0f, 0.01f};
        for (size_t i = 0; i < RF_ARRAY_LEN(q4a); i++) v[32 + i] = q4a[i];
        for (size_t i = 0; i < RF_ARRAY_LEN(q4b); i++) v[64 + i] = q4b[i];
        fill(sent, (size_t)n_slots * kvd, -9, -8); /* sentinel: untouched slots must stay */
        const size_t rb = rf_kv_row_bytes(kvt, kvd), kvb = rb * n_slots;
        void *kc = test_kv_pack(sent, kvt, n_slots, kvd), *vc = test_kv_pack(sent, kvt, n_slots, kvd);
        fill(ff, 64, 1.0f, 8.0f);
        int perm[64];
        for (int i = 0; i < n_slots; i++) perm[i] = i;
        for (int i = n_slots - 1; i > 0; i--) {
            int j = test_randint(0, i), tmp = perm[i];
            perm[i] = perm[j];
            perm[j] = tmp;
        }
        for (int t = 0; t < n_tok; t++) {
            pos[t] = t == 0 ? 0 : t == 1 ? 4999 : test_randint(0, 5000);
            slot[t] = perm[t];
        }
        float *dq = dput(q, 4 * (size_t)n_tok * qd), *dk = dput(k, 4 * (size_t)n_tok * kvd), *dv = dput(v, 4 * (size_t)n_tok * kvd);
        void *dkc = dput(kc, kvb), *dvc = dput(vc, kvb);
        float *dff = dput(ff, sizeof ff);
        int32_t *dpos = dput(pos, sizeof pos), *dslot = dput(slot, sizeof slot);
        rf_rope rope = {cfg[ci].mode, cfg[ci].n_rot, 10000.0f, cfg[ci].fs, cfg[ci].ff ? dff : NULL};
        rf_attn_dims dims = {cfg[ci].n_head, cfg[ci].n_kv, hd, 1.0f / sqrtf((float)hd), kvt};
        rf_step st = {0};
        st.n_tokens = n_tok;
        st.pos = dpos;
        st.slot = dslot;
        be->ops->rope_store_kv(be, &st, &rope, &dims, dq, dk, dv, dkc, dvc);
        float *gq = malloc(4 * (size_t)n_tok * qd), *gk = malloc(4 * (size_t)n_tok * kvd);
        void *gkc_raw = malloc(kvb), *gvc_raw = malloc(kvb);
        int rc = dget(gq, dq, 4 * (size_t)n_tok * qd) | dget(gk, dk, 4 * (size_t)n_tok * kvd) |
                 dget(gkc_raw, dkc, kvb) | dget(gvc_raw, dvc, kvb);
        CHECK(rc == 0, "rope: %s", rf_error());
        rf_rope hr = rope;
        hr.freq_factors = cfg[ci].ff ? ff : NULL;
        cpu_rope(q, n_tok, cfg[ci].n_head, hd, pos, &hr);
        cpu_rope(k, n_tok, cfg[ci].n_kv, hd, pos, &hr);
        cpu_store_kv(k, v, n_tok, kvd, slot, kc, vc, kvt);
        float *gkc = malloc(4 * (size_t)n_slots * kvd), *gvc = malloc(4 * (size_t)n_slots * kvd);
        float *rkc = malloc(4 * (size_t)n_slots * kvd), *rvc = malloc(4 * (size_t)n_slots * kvd);
        test_kv_unpack(gkc_raw, kvt, n_slots, kvd, gkc);
        test_kv_unpack(gvc_raw, kvt, n_slots, kvd, gvc);
        test_kv_unpack(kc, kvt, n_slots, kvd, rkc);
        test_kv_unpack(vc, kvt, n_slots, kvd, rvc);
        char what[128];
        snprintf(what, sizeof what, "rope %s hd %d n_rot %d heads %d/%d kv %s (q)", cfg[ci].mode ? "neox" : "normal", hd,
                 cfg[ci].n_rot, cfg[ci].n_head, cfg[ci].n_kv, rf_kv_type_name(kvt));
        CHECK_CLOSE(what, gq, q, (size_t)n_tok * qd, 2e-3, 0);
        CHECK_CLOSE("rope k", gk, k, (size_t)n_tok * kvd, 2e-3, 0);
        /* f16: the rotated k differs by up to 2e-3 before rounding, so its f16 (ulp 9.8e-4 below 1)
         * may round the other way: 2e-3 + 1 ulp. q8_0: each side is within half a step d of its own
         * k, d = amax / 127 <= sqrt(2) / 127 (rotated |k| <= sqrt(2)): 2e-3 + d + the scale's
         * binary16 rounding, 1.5e-2; q4_0 the same with d = |m| / 8 <= sqrt(2) / 8: a code apart,
         * 2e-3 + 0.18 */
        CHECK_CLOSE("rope k cache", gkc, rkc, (size_t)n_slots * kvd,
                    kvt == RF_TYPE_F16 ? 3e-3 : kvt == RF_TYPE_Q8_0 ? 1.5e-2 : kvt == RF_TYPE_Q4_0 ? 0.2 : 2e-3, 0);
        CHECK_CLOSE("rope v cache", gvc, rvc, (size_t)n_slots * kvd, 0, 0);
        /* q8_0's and q4_0's store, byte for byte: the GPU's rows are the reference writer's rows of
         * the GPU's own rotated k, and of v (edge values included); untouched rows keep the sentinel
         * (the float formats are compared by value above: the NaN payloads of f16 differ) */
        if (kvt == RF_TYPE_Q8_0 || kvt == RF_TYPE_Q4_0) {
            void *want_k = malloc(kvb);
            memcpy(want_k, kc, kvb);
            for (int t = 0; t < n_tok; t++) rf_kv_write_row(kvt, gk + (size_t)t * kvd, kvd, (char *)want_k + slot[t] * rb);
            size_t bad_k = 0, bad_v = 0;
            for (int r = 0; r < n_slots; r++) {
                /* the padding is not written */
                const size_t used = (kvt == RF_TYPE_Q8_0 ? (size_t)kvd : (size_t)kvd / 2) + (size_t)kvd / 16;
                bad_k += memcmp((char *)want_k + r * rb, (char *)gkc_raw + r * rb, used) != 0;
                bad_v += memcmp((char *)vc + r * rb, (char *)gvc_raw + r * rb, used) != 0;
            }
            CHECK(bad_k == 0 && bad_v == 0, "%s: %zu k rows and %zu v rows differ from the reference writer's bytes",
                  what, bad_k, bad_v);
            free(want_k);
        }
        dfree(dq); dfree(dk); dfree(dv); dfree(dkc); dfree(dvc); dfree(dff); dfree(dpos); dfree(dslot);
        free(q); free(k); free(v); free(kc); free(vc); free(gq); free(gk); free(gkc); free(gvc); free(sent);
        free(gkc_raw); free(gvc_raw); free(rkc); free(rvc);
    }
}

/* ---- attention ------------------------------------------------------------------------------ */

#if HAVE_GPU_BUILD
/* The decode kernel's int8 copy of its output (kernels.h, rf_gpu_attn_args.xq; one token, written
 * by the fused combine or the combine kernel): at 1, 3 and 200 splits the f32 output is checked as
 * above, and the int8 copy must equal the int8 path's quantization of that output (test_xq_diff),
 * bit for bit. */
static void attention_xq_check(const char *label, const rf_step *ds, const rf_attn_dims *dims, const float *dq,
                               const void *dkc, const void *dvc, float *dout, const float *ref, uint32_t kvt) {
    const int n_head = dims->n_head, hd = dims->head_dim;
    const size_t nq = (size_t)n_head * hd, nb = nq / 32;
    int8_t *hq = malloc(nq);
    float *hdd = malloc(sizeof(float) * 2 * nb), *got = malloc(sizeof(float) * nq);
    void *dxq = be->ops->alloc(be, nq), *dxd = be->ops->alloc(be, sizeof(float) * 2 * nb);
    /* whole groups, then one head per block (1 and 3 splits: the fused combine; 200: the combine
     * kernel), then the tensor-core kernel (always the combine kernel) */
    static const int splits[] = {1, 3, 200, 1, 3, 1, 3, 200};
    for (size_t si = 0; si < RF_ARRAY_LEN(splits); si++) {
        const int ns = splits[si], tc = si >= 5;
        if (tc) {
            rf_gpu_attention_decode_tc(2);
            const int ok = rf_gpu_attn_decode_tc(n_head, dims->n_kv_head, hd, kvt, 1);
            rf_gpu_attention_decode_tc(1);
            if (!ok) continue;
        }
        const size_t sb = rf_gpu_attn_decode_scratch(1, n_head, hd, ns);
        void *zero = calloc(1, sb), *scr = dput(zero, sb);
        rf_gpu_attn_args a = {1,         n_head,   dims->n_kv_head, hd,  dims->scale, ds->block_size, ds->max_blocks,
                              ds->pos,   ds->seq_row, ds->block_table, dq, dkc,      dvc,             kvt,
                              dout,      dxq,      dxd,             {0},  NULL,       NULL,           NULL, si < 3 ? 8 : 1, tc, 0};
        for (size_t i = 0; i < nq; i++) got[i] = -77.0f;
        be->ops->upload(be, dout, got, sizeof(float) * nq);
        int rc = rf_gpu_attention_decode(rf_gpu_backend_stream(be), &a, ns, (float *)scr);
        if (!rc) rc = dget(got, dout, sizeof(float) * nq) || dget(hq, dxq, nq) || dget(hdd, dxd, sizeof(float) * 2 * nb);
        CHECK(rc == 0, "attention %s int8 copy, %d splits: launch or copy failed", label, ns);
        char what[160];
        snprintf(what, sizeof what, "attention %s (kv %s, %d splits, gb %d%s, int8 copy on)", label,
                 rf_kv_type_name(kvt), ns, a.gb, tc ? ", tensor-core" : "");
        if (tc)
            CHECK_CLOSE(what, got, ref, nq, 2e-3, 1e-2);
        else
            CHECK_CLOSE(what, got, ref, nq, 1e-4, 1e-4);
        size_t marked = 0;
        const size_t bad = test_xq_diff(got, hq, hdd, nb, &marked);
        CHECK(bad == 0, "%s: %zu int8 values or scales differ from the host quantization (%zu blocks marked non-finite)",
              what, bad, marked);
        dfree(scr);
        free(zero);
    }
    dfree(dxq), dfree(dxd);
    free(hq), free(hdd), free(got);
}
#endif

/* Sequences of the given lengths in a paged cache with shuffled (non-contiguous) blocks; the
 * batch holds the last `tail[s]` positions of sequence s (tail 1 = decode). Unused slots hold NaN:
 * reading one would show. mode/n_split select the GPU kernel (gpu_backend.h). kv_scale scales K
 * and V (and the absolute tolerances with them). */
static void attention_case_kv(const char *label, int n_head, int n_kv, int hd, int bsz, const int *len,
                              const int *tail, int n_seq, int nan_case, uint32_t kvt, float kv_scale) {
    test_paged_kv c;
    test_paged_kv_make(&c, n_kv, hd, bsz, len, tail, n_seq);
    for (size_t i = 0; i < c.n_slots * c.kvd; i++) c.kc[i] *= kv_scale, c.vc[i] *= kv_scale;
    const int n_tok = c.n_tok, max_blocks = c.max_blocks, max_pos = c.max_len - 1;
    const size_t kvd = c.kvd, qd = (size_t)n_head * hd, n_slots = c.n_slots;
    int32_t *bt = c.bt, *pos = c.pos, *seq_row = c.seq_row;
    float *kc = c.kc, *vc = c.vc;
    float *q = malloc(4 * (size_t)n_tok * qd);
    fill(q, (size_t)n_tok * qd, -2, 2);
    if (nan_case) /* a NaN in a visible V element of sequence 0, position 0: dim 3 of KV head 0 */
        vc[test_paged_kv_slot(&c, 0, 0) * kvd + 3] = NAN;
    /* the cache as stored (f16: the values rounded, NaN stays NaN; q8_0: quantized, a NaN poisons
     * its block); CPU and GPU read the same one */
    const size_t kvb = rf_kv_row_bytes(kvt, kvd) * n_slots;
    void *kcs = test_kv_pack(kc, kvt, n_slots, kvd), *vcs = test_kv_pack(vc, kvt, n_slots, kvd);
    void *dkc = dput(kcs, kvb), *dvc = dput(vcs, kvb);
    float *dq = dput(q, 4 * (size_t)n_tok * qd);
    int32_t *dpos = dput(pos, 4 * (size_t)n_tok), *dseq = dput(seq_row, 4 * (size_t)n_tok);
    int32_t *dbt = dput(bt, sizeof(int32_t) * (size_t)n_seq * max_blocks);
    float *dout = be->ops->alloc(be, 4 * (size_t)n_tok * qd);
    float *ref = malloc(4 * (size_t)n_tok * qd), *got = malloc(4 * (size_t)n_tok * qd);
    rf_step hs = {n_tok, n_seq, max_blocks, bsz, 0, max_pos, NULL, pos, NULL, seq_row, bt, NULL, false};
    rf_attn_dims dims = {n_head, n_kv, hd, 1.0f / sqrtf((float)hd), kvt};
    cpu_attention(&hs, &dims, q, kcs, vcs, ref, 0, (int64_t)n_tok * n_head);
    rf_step ds = {n_tok, n_seq, max_blocks, bsz, 0, max_pos, NULL, dpos, NULL, dseq, dbt, NULL, false};
#if HAVE_GPU_BUILD
    /* {mode, splits, tensor cores allowed, heads per decode block}: mode 2 runs twice, with and
     * without tensor cores; the decode kernel with the automatic choice of heads per block (one
     * below 16k positions) and with 2 and 8 (whole groups up to 8, as at long contexts), then on
     * tensor cores (rf_gpu_attention_decode_tc mode 2: wherever the shape allows, whatever the
     * context) at the automatic split count, 1, 3 and 200; the other rows with it off */
    const int modes[][4] = {{0, 0, 1, 0}, {1, 0, 1, 0}, {1, 1, 1, 0}, {1, 3, 1, 0}, {1, 200, 1, 0},
                            {1, 1, 1, 8},  {1, 3, 1, 8}, {1, 0, 1, 2}, {2, 0, 1, 0}, {2, 0, 0, 0},
                            {1, 0, 2, 0},  {1, 1, 2, 0}, {1, 3, 2, 0}, {1, 200, 2, 0}};
    for (size_t mi = 0; mi < RF_ARRAY_LEN(modes); mi++) {
        rf_gpu_backend_set_attention(be, modes[mi][0], modes[mi][1], modes[mi][3]);
        const int prefill = modes[mi][0] == 2 || (modes[mi][0] == 0 && n_tok > 8);
        rf_gpu_attention_decode_tc(!prefill && modes[mi][2] == 2 ? 2 : 0);
        const int dtc = !prefill && modes[mi][2] == 2 && rf_gpu_attn_decode_tc(n_head, n_kv, hd, kvt, 1);
        if (!prefill && modes[mi][2] == 2 && !dtc) continue; /* the shape has no tensor-core decode */
        const int tc = (prefill && rf_gpu_attention_prefill_tc(modes[mi][2], hd)) || dtc;
        for (size_t i = 0; i < (size_t)n_tok * qd; i++) got[i] = -77.0f; /* poison: every output is written */
        be->ops->upload(be, dout, got, 4 * (size_t)n_tok * qd);
        be->ops->attention(be, &ds, &dims, dq, dkc, dvc, dout);
        int rc = dget(got, dout, 4 * (size_t)n_tok * qd);
        CHECK(rc == 0, "attention %s: %s", label, rf_error());
        char what[160];
        snprintf(what, sizeof what, "attention %s (heads %d/%d, hd %d, %d tokens, kv %s, kernel %s%s, splits %d, gb %d)",
                 label, n_head, n_kv, hd, n_tok, rf_kv_type_name(kvt),
                 modes[mi][0] == 2 ? "tiled" : modes[mi][0] == 1 ? "split" : "auto", tc ? " tensor-core" : "",
                 modes[mi][1], modes[mi][3]);
        if (tc && !nan_case) {
            double worst = 0;
            for (size_t i = 0; i < (size_t)n_tok * qd; i++) worst = fmax(worst, fabs((double)got[i] - ref[i]));
            printf("  %s: max abs error %.2e\n", what, worst);
        }
        if (tc)
            CHECK_CLOSE(what, got, ref, (size_t)n_tok * qd, 2e-3 * kv_scale, 1e-2);
        else
            CHECK_CLOSE(what, got, ref, (size_t)n_tok * qd, 1e-4 * kv_scale, 1e-4);
    }
    rf_gpu_attention_prefill_tc(1, hd);
    rf_gpu_attention_decode_tc(1);
    rf_gpu_backend_set_attention(be, 0, 0, 0);
    if (n_tok == 1 && hd % 32 == 0) attention_xq_check(label, &ds, &dims, dq, dkc, dvc, dout, ref, kvt);
#else
    (void)ds;
    (void)label;
#endif
    if (nan_case) {
        int n_nan = 0;
        for (size_t i = 0; i < (size_t)n_tok * qd; i++) n_nan += isnan(ref[i]);
        CHECK(n_nan > 0, "attention NaN case: the CPU reference shows no NaN");
    }
    dfree(dkc); dfree(dvc); dfree(dq); dfree(dpos); dfree(dseq); dfree(dbt); dfree(dout);
    test_paged_kv_free(&c); free(q); free(ref); free(got);
    free(kcs); free(vcs);
}

/* Each case with every cache type its head size allows (q8_0, q4_0: head_dim % 32 == 0). The GPU
 * reads the same stored values as the CPU (codes times scales are exact in f32), so every type
 * has the same tolerances. */
static void attention_case(const char *label, int n_head, int n_kv, int hd, int bsz, const int *len, const int *tail,
                           int n_seq, int nan_case) {
    attention_case_kv(label, n_head, n_kv, hd, bsz, len, tail, n_seq, nan_case, RF_TYPE_F32, 1.0f);
    attention_case_kv(label, n_head, n_kv, hd, bsz, len, tail, n_seq, nan_case, RF_TYPE_F16, 1.0f);
    if (hd % 32 == 0) attention_case_kv(label, n_head, n_kv, hd, bsz, len, tail, n_seq, nan_case, RF_TYPE_Q8_0, 1.0f);
    if (hd % 32 == 0) attention_case_kv(label, n_head, n_kv, hd, bsz, len, tail, n_seq, nan_case, RF_TYPE_Q4_0, 1.0f);
}

static void test_attention(void) {
    int len1[] = {1}, tail1[] = {1};
    attention_case("one position", 4, 4, 64, 16, len1, tail1, 1, 0);
    int len2[] = {5000}, tail2[] = {1};
    if (quick) len2[0] = 700;
    attention_case("decode 5000", 32, 8, 128, 32, len2, tail2, 1, 0);
    int len3[] = {37, 300, 1, 1025}, tail3[] = {1, 1, 1, 1};
    attention_case("decode 4 seqs", 8, 8, 64, 16, len3, tail3, 4, 0);
    attention_case("decode 4 seqs gqa4", 16, 4, 128, 32, len3, tail3, 4, 0);
    /* q4_0 blocks with scales below 2^-10, where the tensor-core kernels' widening rounds d / 16
     * once more (q4_h8): K and V times 2^-9, the absolute tolerances with them */
    attention_case_kv("small values", 8, 8, 64, 16, len3, tail3, 4, 0, RF_TYPE_Q4_0, 1.0f / 512);
    attention_case_kv("small values gqa4", 16, 4, 128, 32, len3, tail3, 4, 0, RF_TYPE_Q4_0, 1.0f / 512);
    int len4[] = {77}, tail4[] = {77};
    attention_case("prefill 77", 8, 1, 64, 16, len4, tail4, 1, 0);
    int len5[] = {130, 45, 300}, tail5[] = {50, 45, 20};
    attention_case("mixed prefill gqa8", 32, 4, 128, 32, len5, tail5, 3, 0);
    attention_case("mixed prefill gqa4 hd64", 16, 4, 64, 16, len5, tail5, 3, 0);
    int len6[] = {5000, 700}, tail6[] = {33, 2};
    if (quick) len6[0] = 600;
    attention_case("long prefill 5000", 8, 1, 128, 32, len6, tail6, 2, 0);
    /* tensor-core prefill shapes: MHA (GQA 1) at head dims 128 and 64, odd lengths, GQA 4 with a
     * group count that leaves a partial block, and a long decode over many splits */
    int len8[] = {131}, tail8[] = {131};
    attention_case("prefill 131 mha hd128", 8, 8, 128, 16, len8, tail8, 1, 0);
    int len9[] = {200, 67}, tail9[] = {67, 67};
    attention_case("prefill 2 seqs mha hd64", 4, 4, 64, 32, len9, tail9, 2, 0);
    attention_case("prefill 2 seqs gqa4 hd128", 12, 3, 128, 16, len9, tail9, 2, 0);
    int len10[] = {9000}, tail10[] = {1};
    if (quick) len10[0] = 900;
    attention_case("decode 9000", 8, 2, 64, 64, len10, tail10, 1, 0);
    int len7[] = {20, 9}, tail7[] = {3, 9};
    attention_case("NaN in V", 4, 2, 64, 16, len7, tail7, 2, 1);
    /* decode kernel layouts: a GQA group of 7 (a partly used 8-head block) at head dim 80 (10 of
     * 16 lanes per row), groups of 16 (two head chunks) at head dim 256 (a whole warp per row),
     * head dim 36 (not a multiple of 8: element-wise loads) */
    int len11[] = {3001, 17}, tail11[] = {1, 1};
    if (quick) len11[0] = 301;
    attention_case("decode gqa7 hd80", 14, 2, 80, 32, len11, tail11, 2, 0);
    int len12[] = {1500}, tail12[] = {1};
    attention_case("decode gqa16 hd256", 32, 2, 256, 32, len12, tail12, 1, 0);
    int len13[] = {777, 1, 64}, tail13[] = {1, 1, 2};
    attention_case("decode hd36", 6, 3, 36, 16, len13, tail13, 3, 0);
    /* one token with a NaN in V (position 0, dim 3 of KV head 0): the int8 copy marks its blocks */
    int len14[] = {300}, tail14[] = {1};
    attention_case("decode NaN in V", 8, 2, 64, 16, len14, tail14, 1, 1);
    /* the tensor-core decode kernel's groups: 16 (two full tiles of 8 heads), 12 (a half-used
     * second tile) and an odd one (7: lane pairs with one head), lengths that are not multiples of
     * its 16- or 32-position rounds */
    int len15[] = {1203, 50}, tail15[] = {1, 1};
    attention_case("decode gqa16 hd64", 32, 2, 64, 16, len15, tail15, 2, 0);
    attention_case("decode gqa12 hd128", 24, 2, 128, 16, len15, tail15, 2, 0);
    attention_case("decode gqa7 hd128", 14, 2, 128, 32, len15, tail15, 2, 0);
    /* MHA at head dim 128 (the 7B shape's tensor-core decode): one split's warps take 17 rounds
     * of 16 positions, and a short one */
    int len16[] = {1100, 40}, tail16[] = {1, 1};
    attention_case("decode mha hd128", 8, 8, 128, 32, len16, tail16, 2, 0);
}

#if HAVE_GPU_BUILD
/* rope_attention (rope, the K/V store and attention as one op; the GPU fuses them into the decode
 * kernel where rf_gpu_attn_decode_rope_ok allows, else runs them as two launches): one token at
 * position len - 1 whose cache slot holds NaN until the op stores it. Checked against the CPU's
 * cpu_rope + cpu_store_kv + cpu_attention (out: 1e-3 absolute + 1e-3 relative, as rotated q and
 * k differ from the CPU's by an ulp of theta, see rope; the cache: the rope tolerances, every
 * other slot unchanged), and against the GPU's own two-op path (rope_store_kv, attention) on the
 * same inputs: the cache bit for bit, out 1e-5 (only the last position's place in the sum
 * differs). Split counts: automatic, 1, 3 and 200 (more than the fused combine takes). At 1 and 3
 * splits the fused launch is also called directly with its int8 copy on (the output projection's
 * x, which the op leaves in the matmul context): out as path 1's, the copy bit for bit the host
 * quantization of that out (test_xq_diff). k_kind: RA_K_PLAIN; RA_K_NAN, a NaN in the new k;
 * RA_K_SHIFTED, every k (cached and new) plus 3, so that quantized codes sit near the top of their
 * range: the largest products of code and scale the tensor-core kernels round to f16, and the
 * largest offsets a kernel scoring the raw codes would cancel
 * (docs/experiments/decode-attention-one-head-raw-k-scores.diff). */
enum { RA_K_PLAIN, RA_K_NAN, RA_K_SHIFTED };
/* The paged cache's block size of rope_attention_case (16 unless a case sets it). */
static int g_ra_block = 16;
static void rope_attention_case(int n_head, int n_kv, int hd, int mode, int n_rot, int use_ff, int len, int k_kind,
                                uint32_t kvt) {
    int lens[] = {len}, tails[] = {1};
    test_paged_kv c;
    test_paged_kv_make(&c, n_kv, hd, g_ra_block, lens, tails, 1);
    const size_t kvd = c.kvd, qd = (size_t)n_head * hd, n_slots = c.n_slots;
    const size_t kvb = rf_kv_row_bytes(kvt, kvd) * n_slots;
    const int32_t slot = (int32_t)test_paged_kv_slot(&c, 0, len - 1);
    for (size_t i = 0; i < kvd; i++) c.kc[slot * kvd + i] = c.vc[slot * kvd + i] = NAN; /* not stored yet */
    float *q = malloc(4 * qd), *k = malloc(4 * kvd), *v = malloc(4 * kvd), ff[128];
    fill(q, qd, -2, 2);
    fill(k, kvd, -1, 1);
    fill(v, kvd, -1, 1);
    fill(ff, 128, 1.0f, 8.0f);
    if (k_kind == RA_K_NAN) k[test_randint(0, (int)kvd - 1)] = NAN;
    if (k_kind == RA_K_SHIFTED) {
        for (size_t i = 0; i < kvd; i++) k[i] += 3.0f;
        for (size_t i = 0; i < n_slots * kvd; i++) c.kc[i] += 3.0f; /* NaN (unused) slots stay NaN */
    }
    void *kcs = test_kv_pack(c.kc, kvt, n_slots, kvd), *vcs = test_kv_pack(c.vc, kvt, n_slots, kvd);
    float *dff = dput(ff, sizeof ff);
    rf_rope rope = {mode, n_rot, 10000.0f, 1.0f, use_ff ? dff : NULL}, hrope = rope;
    hrope.freq_factors = use_ff ? ff : NULL;
    rf_attn_dims dims = {n_head, n_kv, hd, 1.0f / sqrtf((float)hd), kvt};
    /* the CPU: rope, store, attention */
    float *ref = malloc(4 * qd), *hq = malloc(4 * qd), *hk = malloc(4 * kvd);
    memcpy(hq, q, 4 * qd);
    memcpy(hk, k, 4 * kvd);
    void *rkc = malloc(kvb), *rvc = malloc(kvb);
    memcpy(rkc, kcs, kvb);
    memcpy(rvc, vcs, kvb);
    cpu_rope(hq, 1, n_head, hd, c.pos, &hrope);
    cpu_rope(hk, 1, n_kv, hd, c.pos, &hrope);
    cpu_store_kv(hk, v, 1, (int)kvd, &slot, rkc, rvc, kvt);
    rf_step hs = {1, 1, c.max_blocks, g_ra_block, 0, len - 1, NULL, c.pos, (int32_t *)&slot, c.seq_row, c.bt, NULL, false};
    cpu_attention(&hs, &dims, hq, rkc, rvc, ref, 0, n_head);
    float *rkf = malloc(4 * n_slots * kvd), *rvf = malloc(4 * n_slots * kvd);
    test_kv_unpack(rkc, kvt, n_slots, kvd, rkf);
    test_kv_unpack(rvc, kvt, n_slots, kvd, rvf);

    int32_t *dpos = dput(c.pos, 4), *dseq = dput(c.seq_row, 4), *dslot = dput(&slot, 4);
    int32_t *dbt = dput(c.bt, sizeof(int32_t) * (size_t)c.max_blocks);
    rf_step ds = {1, 1, c.max_blocks, g_ra_block, 0, len - 1, NULL, dpos, dslot, dseq, dbt, NULL, false};
    float *dout = be->ops->alloc(be, 4 * qd);
    float *got = malloc(4 * qd), *two = malloc(4 * qd), *poison = malloc(4 * qd), *gkf = malloc(4 * n_slots * kvd), *gvf = malloc(4 * n_slots * kvd);
    void *gk1 = malloc(kvb), *gv1 = malloc(kvb);
    void *gk2 = malloc(kvb), *gv2 = malloc(kvb);
    /* splits (0: automatic) and heads per block (0: automatic) */
    static const int splits[][2] = {{0, 0}, {1, 0}, {3, 0}, {200, 0}, {1, 8}, {3, 2}};
    /* tensor-core mode 0: the f32 kernels; 1 (the default): where rf_gpu_attn_decode_tc_rope or, from
     * RF_GPU_ATTN_TC_MIN_POS positions, rf_gpu_attn_decode_tc says so, the tensor-core kernel's
     * rope-fused instance (else two launches: rope_store_kv and the tensor-core attention), with
     * the tensor-core tolerance of the file's header */
    for (int dm = 0; dm <= 1; dm++)
    for (size_t si = 0; si < RF_ARRAY_LEN(splits); si++) {
        rf_gpu_attention_decode_tc(dm);
        const int tc = dm == 1 && (rf_gpu_attn_decode_tc_rope(n_head, n_kv, hd, kvt) ||
                                   rf_gpu_attn_decode_tc(n_head, n_kv, hd, kvt, len));
        if (dm == 1 && (!tc || splits[si][1])) continue;
        const double atol = tc ? 2e-3 : 1e-3, rtol = tc ? 1e-2 : 1e-3;
        rf_gpu_backend_set_attention(be, 1, splits[si][0], splits[si][1]);
        char what[200];
        snprintf(what, sizeof what,
                 "rope_attention %s n_rot %d%s heads %d/%d hd %d, %d positions, kv %s, splits %d, gb %d%s%s",
                 mode == RF_ROPE_NEOX ? "neox" : "normal", n_rot, use_ff ? " (factors)" : "", n_head, n_kv, hd, len,
                 rf_kv_type_name(kvt), splits[si][0], splits[si][1],
                 k_kind == RA_K_NAN ? ", NaN in k" : k_kind == RA_K_SHIFTED ? ", k + 3" : "",
                 tc ? ", tensor cores" : "");
        /* path 1: the op; path 2: the two ops on fresh copies of the same inputs */
        for (int path = 1; path <= 2; path++) {
            float *dq = dput(q, 4 * qd), *dk = dput(k, 4 * kvd), *dv = dput(v, 4 * kvd);
            void *dkc = dput(kcs, kvb), *dvc = dput(vcs, kvb);
            for (size_t i = 0; i < qd; i++) poison[i] = -77.0f; /* every output is written */
            be->ops->upload(be, dout, poison, 4 * qd);
            if (path == 1) {
                be->ops->rope_attention(be, &ds, &rope, &dims, dq, dk, dv, dkc, dvc, dout);
            } else {
                be->ops->rope_store_kv(be, &ds, &rope, &dims, dq, dk, dv, dkc, dvc);
                be->ops->attention(be, &ds, &dims, dq, dkc, dvc, dout);
            }
            int rc = dget(path == 1 ? got : two, dout, 4 * qd) | dget(path == 1 ? gk1 : gk2, dkc, kvb) |
                     dget(path == 1 ? gv1 : gv2, dvc, kvb);
            CHECK(rc == 0, "%s (path %d): %s", what, path, rf_error());
            dfree(dq); dfree(dk); dfree(dv); dfree(dkc); dfree(dvc);
        }
        if (kvt == RF_TYPE_Q8_0 || kvt == RF_TYPE_Q4_0) {
            /* the new k row may quantize differently on the two sides (rotations an ulp of theta
             * apart, rope's test): the CPU's attention over the GPU's own cache is the reference */
            float *ref_g = malloc(4 * qd);
            cpu_attention(&hs, &dims, hq, gk1, gv1, ref_g, 0, n_head);
            CHECK_CLOSE(what, got, ref_g, qd, tc ? atol : 1e-3, tc ? rtol : 1e-3);
            free(ref_g);
        } else {
            CHECK_CLOSE(what, got, ref, qd, atol, rtol);
        }
        test_kv_unpack(gk1, kvt, n_slots, kvd, gkf);
        test_kv_unpack(gv1, kvt, n_slots, kvd, gvf);
        /* a quantized new row may differ by a code: its step grows with |k| (rotated k + 3 <= 6) */
        const double kstep = k_kind == RA_K_SHIFTED ? 6.0 : 1.0;
        CHECK_CLOSE("rope_attention k cache", gkf, rkf, n_slots * kvd,
                    kvt == RF_TYPE_F16    ? 3e-3
                    : kvt == RF_TYPE_Q8_0 ? 1.5e-2 * kstep
                    : kvt == RF_TYPE_Q4_0 ? 0.2 * kstep
                                          : 2e-3,
                    0);
        CHECK_CLOSE("rope_attention v cache", gvf, rvf, n_slots * kvd, 0, 0);
        CHECK(!memcmp(gk1, gk2, kvb) && !memcmp(gv1, gv2, kvb),
              "%s: the cache differs from the two-op path's", what);
        if (splits[si][0] == 1 || splits[si][0] == 3) {
            /* path 3: the fused launch itself with the int8 copy on (the output projection's x;
             * one split: the one-split merge, dec_block_out1), against path 1's output
             * and the host quantization of its own */
            float *dq = dput(q, 4 * qd), *dk = dput(k, 4 * kvd), *dv = dput(v, 4 * kvd);
            void *dkc = dput(kcs, kvb), *dvc = dput(vcs, kvb);
            const size_t nb = qd / 32, sb = rf_gpu_attn_decode_scratch(1, n_head, hd, splits[si][0]);
            void *dxq = be->ops->alloc(be, qd), *dxd = be->ops->alloc(be, sizeof(float) * 2 * nb);
            void *zero = calloc(1, sb), *scr = dput(zero, sb);
            int8_t *hxq = malloc(qd);
            float *hxd = malloc(sizeof(float) * 2 * nb), *three = malloc(4 * qd);
            rf_gpu_attn_args a = {1,       n_head,     n_kv,     hd,   dims.scale, ds.block_size, ds.max_blocks,
                                  ds.pos,  ds.seq_row, ds.block_table, dq, dkc,    dvc,           kvt,
                                  dout,    dxq,        dxd,      rope, dk,         dv,            ds.slot,
                                  rf_gpu_attn_decode_gb(n_head, n_kv, len), tc, 0};
            const int fusable = hd % 32 == 0 && rf_gpu_attn_decode_rope_ok(&a, &rope, dk, dv, splits[si][0], 0);
            if (fusable) {
                be->ops->upload(be, dout, poison, 4 * qd);
                int rc = rf_gpu_attention_decode(rf_gpu_backend_stream(be), &a, splits[si][0], (float *)scr);
                if (!rc) rc = dget(three, dout, 4 * qd) || dget(hxq, dxq, qd) || dget(hxd, dxd, sizeof(float) * 2 * nb);
                CHECK(rc == 0, "%s (path 3, int8 copy): launch or copy failed", what);
                char what3[240];
                snprintf(what3, sizeof what3, "%s, the launch with its int8 copy on", what);
                CHECK_CLOSE(what3, three, got, qd, tc ? atol : 1e-5, tc ? rtol : 1e-5);
                size_t marked = 0;
                const size_t bad = test_xq_diff(three, hxq, hxd, nb, &marked);
                CHECK(bad == 0, "%s: %zu int8 values or scales differ from the host quantization (%zu blocks marked)",
                      what3, bad, marked);
            }
            dfree(dq); dfree(dk); dfree(dv); dfree(dkc); dfree(dvc); dfree(dxq); dfree(dxd); dfree(scr);
            free(zero); free(hxq); free(hxd); free(three);
        }
        char what2[240];
        snprintf(what2, sizeof what2, "%s vs the two-op path", what);
        /* tensor cores: the two-op path rounds the new position's q and weight to f16 as well */
        CHECK_CLOSE(what2, got, two, qd, tc ? atol : 1e-5, tc ? rtol : 1e-5);
    }
    rf_gpu_attention_decode_tc(1);
    rf_gpu_backend_set_attention(be, 0, 0, 0);
    dfree(dpos); dfree(dseq); dfree(dslot); dfree(dbt); dfree(dout); dfree(dff);
    test_paged_kv_free(&c);
    free(q); free(k); free(v); free(kcs); free(vcs); free(ref); free(hq); free(hk); free(rkc); free(rvc);
    free(rkf); free(rvf); free(got); free(two); free(poison); free(gkf); free(gvf); free(gk1); free(gv1); free(gk2); free(gv2);
}

static void test_rope_attention(void) {
    const uint32_t kv_types[] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_Q8_0, RF_TYPE_Q4_0};
    /* {n_head, n_kv, hd, mode, n_rot, factors}: Llama 7B and 1B shapes; a group of 7 at hd 64
     * (NEOX, Qwen2); a group of 8 with partial NEOX rotation; hd 80 with n_rot 40 (NORMAL pairs
     * ending inside a lane's eight dims); a group of 16 (two blocks of heads, one stores the row);
     * not fusable, so two launches: NEOX n_rot 24 (not a multiple of 16), hd 36 (not a multiple
     * of 8); one head per KV head at hd 64 with partial NEOX rotation and at hd 128 with whole
     * NEOX rotation (the tensor-core kernel's rope-fused instances, whose lanes rotate four of q's
     * dims each, with their partners from q's other half) */
    static const int cfg[][6] = {{32, 32, 128, RF_ROPE_NORMAL, 128, 0}, {32, 8, 64, RF_ROPE_NORMAL, 64, 1},
                                 {14, 2, 64, RF_ROPE_NEOX, 64, 0},      {8, 1, 128, RF_ROPE_NEOX, 64, 1},
                                 {4, 2, 80, RF_ROPE_NORMAL, 40, 0},     {32, 2, 32, RF_ROPE_NEOX, 32, 0},
                                 {4, 4, 64, RF_ROPE_NEOX, 24, 0},       {6, 3, 36, RF_ROPE_NORMAL, 36, 0},
                                 {8, 8, 64, RF_ROPE_NEOX, 32, 1},       {32, 32, 128, RF_ROPE_NEOX, 128, 0}};
    static const int lens[] = {1, 2, 33, 200, 700};
    for (size_t ci = 0; ci < RF_ARRAY_LEN(cfg); ci++)
        for (size_t ki = 0; ki < RF_ARRAY_LEN(kv_types); ki++) {
            if ((kv_types[ki] == RF_TYPE_Q8_0 || kv_types[ki] == RF_TYPE_Q4_0) && cfg[ci][2] % 32) continue;
            const int len = lens[test_randint(0, (int)RF_ARRAY_LEN(lens) - 1)];
            rope_attention_case(cfg[ci][0], cfg[ci][1], cfg[ci][2], cfg[ci][3], cfg[ci][4], cfg[ci][5], len, RA_K_PLAIN,
                                kv_types[ki]);
        }
    /* every length on the 1B shape, and a NaN in the new k (its group's outputs turn NaN) */
    for (size_t li = 0; li < RF_ARRAY_LEN(lens); li++)
        rope_attention_case(32, 8, 64, RF_ROPE_NEOX, 64, 0, lens[li], RA_K_PLAIN, RF_TYPE_F16);
    rope_attention_case(32, 8, 128, RF_ROPE_NORMAL, 128, 0, 45, RA_K_NAN, RF_TYPE_F16);
    rope_attention_case(32, 8, 128, RF_ROPE_NORMAL, 128, 0, 45, RA_K_NAN, RF_TYPE_Q8_0);
    rope_attention_case(32, 8, 128, RF_ROPE_NORMAL, 128, 0, 45, RA_K_NAN, RF_TYPE_Q4_0);
    /* the 7B shape (one head per block) at lengths around a warp's round: the f32 kernels' (16
     * positions for f16 and q4_0, 8 for q8_0), their four warps' first rounds (64) and first chunks
     * of 32 (128); the rope-fused tensor-core instances' rounds of 32 (every type, 129: a block's
     * four warps plus one position) */
    static const int lens7[] = {16, 17, 63, 64, 65, 129};
    for (size_t li = 0; li < RF_ARRAY_LEN(lens7); li++) {
        rope_attention_case(32, 32, 128, RF_ROPE_NORMAL, 128, 0, lens7[li], RA_K_PLAIN,
                            li % 2 ? RF_TYPE_Q8_0 : RF_TYPE_F16);
        rope_attention_case(32, 32, 128, RF_ROPE_NORMAL, 128, 0, lens7[li], RA_K_PLAIN, RF_TYPE_Q4_0);
    }
    /* past RF_GPU_ATTN_TC_MIN_POS, mode 1: the tensor-core kernel's rope-fused instance with one
     * query head per KV head (the 7B shape, every cache type) and, with an f16 cache, with groups
     * of 4 (the 1B and 8B shapes) and of 2 (partial NEOX rotation), whose partials the combine
     * kernel merges; the plain tensor-core kernel after rope's own launch for GQA groups with a
     * q8_0 or q4_0 cache, for a group of 8 (more than the instance takes) and at 200 splits (more
     * than one wave). A NaN in the new k with a quantized cache (its block reads as NaN). */
    rope_attention_case(32, 32, 128, RF_ROPE_NEOX, 128, 0, 1100, RA_K_PLAIN, RF_TYPE_F16);
    rope_attention_case(32, 32, 128, RF_ROPE_NEOX, 128, 0, 1100, RA_K_PLAIN, RF_TYPE_Q8_0);
    rope_attention_case(32, 32, 128, RF_ROPE_NORMAL, 128, 0, 1100, RA_K_PLAIN, RF_TYPE_Q4_0);
    rope_attention_case(32, 8, 64, RF_ROPE_NEOX, 64, 0, 1100, RA_K_PLAIN, RF_TYPE_F16);
    rope_attention_case(32, 8, 64, RF_ROPE_NEOX, 64, 1, 1100, RA_K_PLAIN, RF_TYPE_Q8_0);
    rope_attention_case(32, 8, 64, RF_ROPE_NORMAL, 64, 0, 1100, RA_K_NAN, RF_TYPE_Q4_0);
    rope_attention_case(32, 8, 128, RF_ROPE_NORMAL, 128, 0, 1100, RA_K_PLAIN, RF_TYPE_Q8_0);
    rope_attention_case(32, 8, 128, RF_ROPE_NEOX, 128, 0, 1100, RA_K_PLAIN, RF_TYPE_F16);
    rope_attention_case(8, 4, 64, RF_ROPE_NEOX, 32, 0, 1030, RA_K_PLAIN, RF_TYPE_F16);
    rope_attention_case(32, 4, 128, RF_ROPE_NEOX, 128, 0, 1100, RA_K_PLAIN, RF_TYPE_F16);
    rope_attention_case(32, 32, 128, RF_ROPE_NORMAL, 128, 0, 45, RA_K_NAN, RF_TYPE_Q8_0);
    rope_attention_case(16, 16, 64, RF_ROPE_NEOX, 64, 0, 200, RA_K_NAN, RF_TYPE_Q4_0);
    /* K far from zero with one head per KV head: q8_0 and q4_0 codes near their largest */
    rope_attention_case(32, 32, 128, RF_ROPE_NEOX, 128, 0, 1100, RA_K_SHIFTED, RF_TYPE_Q8_0);
    rope_attention_case(32, 32, 128, RF_ROPE_NORMAL, 128, 0, 129, RA_K_SHIFTED, RF_TYPE_Q4_0);
    rope_attention_case(8, 8, 64, RF_ROPE_NEOX, 64, 0, 700, RA_K_SHIFTED, RF_TYPE_Q4_0);
    rope_attention_case(8, 8, 64, RF_ROPE_NORMAL, 64, 0, 1100, RA_K_SHIFTED, RF_TYPE_Q8_0);
    /* and with GQA groups of 4 (rope's own launch, then the plain tensor-core kernel's q8_0 / q4_0
     * instances at head dims 64 and 128; docs/experiments/decode-attention-k-by-blocks.diff scored
     * their K from the raw codes) */
    rope_attention_case(32, 8, 64, RF_ROPE_NEOX, 64, 0, 1100, RA_K_SHIFTED, RF_TYPE_Q8_0);
    rope_attention_case(32, 8, 64, RF_ROPE_NEOX, 64, 0, 1300, RA_K_SHIFTED, RF_TYPE_Q4_0);
    rope_attention_case(32, 8, 128, RF_ROPE_NORMAL, 128, 0, 1100, RA_K_SHIFTED, RF_TYPE_Q8_0);
    rope_attention_case(32, 8, 128, RF_ROPE_NORMAL, 128, 0, 2100, RA_K_SHIFTED, RF_TYPE_Q4_0);
    /* the runtime's block size (32): a round of the tensor-core kernel's q8_0 / q4_0 instances then
     * lies in one cache block and comes by tensor copies (sm_90; rf_gpu_attention_decode_tma: mode
     * 2, the default, issues the first rounds before the grid dependency wait, mode 1 after it),
     * with last rounds of one position, splits that hold none, and GQA groups after rope's launch */
    g_ra_block = 32;
    static const int lens32[] = {2, 33, 97, 1057, 2113}, lens32g[] = {1057, 2113};
    for (int tma = 2; tma >= 1; tma--) {
        const int old_tma = rf_gpu_attention_decode_tma(tma);
        for (size_t li = 0; li < RF_ARRAY_LEN(lens32); li++) {
            rope_attention_case(32, 32, 128, RF_ROPE_NORMAL, 128, 0, lens32[li], RA_K_SHIFTED, RF_TYPE_Q4_0);
            rope_attention_case(32, 32, 128, RF_ROPE_NEOX, 128, 0, lens32[li], RA_K_PLAIN, RF_TYPE_Q8_0);
            rope_attention_case(8, 8, 64, RF_ROPE_NEOX, 64, 0, lens32[li], RA_K_SHIFTED, RF_TYPE_Q4_0);
            rope_attention_case(8, 8, 64, RF_ROPE_NORMAL, 64, 0, lens32[li], RA_K_PLAIN, RF_TYPE_Q8_0);
        }
        rope_attention_case(32, 32, 128, RF_ROPE_NORMAL, 128, 0, 700, RA_K_NAN, RF_TYPE_Q4_0);
        for (size_t li = 0; li < RF_ARRAY_LEN(lens32g); li++) {
            rope_attention_case(32, 8, 64, RF_ROPE_NEOX, 64, 0, lens32g[li], RA_K_SHIFTED, RF_TYPE_Q8_0);
            rope_attention_case(32, 8, 64, RF_ROPE_NEOX, 64, 0, lens32g[li], RA_K_PLAIN, RF_TYPE_Q4_0);
            rope_attention_case(32, 8, 128, RF_ROPE_NORMAL, 128, 0, lens32g[li], RA_K_PLAIN, RF_TYPE_Q8_0);
            rope_attention_case(32, 8, 128, RF_ROPE_NORMAL, 128, 0, lens32g[li], RA_K_SHIFTED, RF_TYPE_Q4_0);
        }
        rf_gpu_attention_decode_tma(old_tma);
    }
    g_ra_block = 16;
}
#endif

/* ---- micro-benchmark (group "bench", not in the default run) --------------------------------
 * Each kernel at decode / prefill shapes of a Llama-2-7B (32 heads, hd 128) and a 1B (32/8
 * heads, hd 64) model: `reps` launches captured into a graph, the graph replayed 7 times, the
 * median replay / reps printed as us per call (launch gaps mostly removed, as in graph replay). */
#if HAVE_GPU_BUILD
#include "backend/gpu/gpu_port.h"
static double bench_graph(void (*fn)(void *), void *arg, int reps) {
    gpuStream_t st = (gpuStream_t)rf_gpu_backend_stream(be);
    fn(arg); /* warm-up, eager */
    if (gpuStreamSynchronize(st) != gpuSuccess) return -1;
    gpuGraph_t gr;
    gpuGraphExec_t ex;
    if (gpuStreamBeginCapture(st, gpuStreamCaptureModeThreadLocal) != gpuSuccess) return -1;
    for (int i = 0; i < reps; i++) fn(arg);
    if (gpuStreamEndCapture(st, &gr) != gpuSuccess || gpuGraphInstantiate(&ex, gr) != gpuSuccess) return -1;
    gpuEvent_t e0, e1;
    gpuEventCreate(&e0);
    gpuEventCreate(&e1);
    double t[7];
    gpuGraphLaunch(ex, st);
    for (int k = 0; k < 7; k++) {
        gpuEventRecord(e0, st);
        gpuGraphLaunch(ex, st);
        gpuEventRecord(e1, st);
        gpuStreamSynchronize(st);
        float ms = 0;
        gpuEventElapsedTime(&ms, e0, e1);
        t[k] = ms * 1000.0 / reps;
    }
    for (int i = 0; i < 7; i++)
        for (int j = i + 1; j < 7; j++)
            if (t[j] < t[i]) { double x = t[i]; t[i] = t[j]; t[j] = x; }
    gpuEventDestroy(e0);
    gpuEventDestroy(e1);
    gpuGraphExecDestroy(ex);
    gpuGraphDestroy(gr);
    return t[3];
}

typedef struct {
    rf_gpu_attn_args a;
    int n_split;
    float *scratch;
    rf_rope rope;
    int32_t *pos, *slot;
    float *q, *k, *v, *x, *res, *w, *out, *lg;
    void *kc, *vc;
    int n_vocab, dim;
    rf_sample_params sp;
    int32_t *tok;
    float *lp;
    void *sscr;
} bench_ctx;
static void b_decode(void *p) { bench_ctx *c = p; rf_gpu_attention_decode(rf_gpu_backend_stream(be), &c->a, c->n_split, c->scratch); }
static void b_prefill(void *p) { bench_ctx *c = p; rf_gpu_attention_prefill(rf_gpu_backend_stream(be), &c->a); }
static void b_rope(void *p) {
    bench_ctx *c = p;
    rf_gpu_rope_store_kv(rf_gpu_backend_stream(be), c->a.n_tokens, c->pos, c->slot, &c->rope, c->a.n_head, c->a.n_kv_head,
                         c->a.head_dim, c->q, c->k, c->v, c->kc, c->vc, c->a.kv_type);
}
static void b_rms(void *p) { bench_ctx *c = p; rf_gpu_rmsnorm(rf_gpu_backend_stream(be), c->x, c->res, c->w, 1, c->dim, 1e-5f, c->out); }
static void b_swiglu(void *p) { bench_ctx *c = p; rf_gpu_swiglu(rf_gpu_backend_stream(be), c->x, c->res, c->dim, c->out); }
static void b_embed(void *p) {
    bench_ctx *c = p;
    rf_gpu_embed(rf_gpu_backend_stream(be), RF_TYPE_F32, c->w, 4 * (size_t)c->dim, c->dim, c->slot, 1, c->out);
}
static void b_sample(void *p) {
    bench_ctx *c = p;
    rf_gpu_sample(rf_gpu_backend_stream(be), c->lg, c->n_vocab, &c->sp, c->slot, 0, 0.5f, c->tok, c->lp, c->sscr);
}

static void *copy_src, *copy_dst;
static size_t copy_bytes;
static void b_copy(void *p) {
    (void)p;
    gpuMemcpyAsync(copy_dst, copy_src, copy_bytes, gpuMemcpyDeviceToDevice, (gpuStream_t)rf_gpu_backend_stream(be));
}

/* Slot of position p under bench_attn_shape's block table (block i holds block (i * 37) % max_blocks). */
static int32_t dbt_host_slot(int p, int bsz, int max_blocks) {
    return (int32_t)(((p / bsz) * 37 % max_blocks) * bsz + p % bsz);
}

static int bench_n_sm(void) {
    int n = 0;
#if RF_GPU_HIP
    if (hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, 0) != hipSuccess) n = 0;
#else
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) n = 0;
#endif
    return n;
}

/* Decode attention at 128..32768 positions (the runtime's 32-position blocks, scattered), then
 * prefill and rope at this shape; kvt: the cache type. */
static void bench_attn_shape(const char *name, int n_head, int n_kv, int hd, uint32_t kvt) {
    const int bsz = 32;
    const int ctxs[] = {128, 512, 2048, 4096, 8192, 32768};
    const int max_ctx = 32768, max_blocks = max_ctx / bsz;
    const size_t kvd = (size_t)n_kv * hd, qd = (size_t)n_head * hd, rb = rf_kv_row_bytes(kvt, kvd);
    const char *tn = rf_kv_type_name(kvt);
    float *kh = malloc(4 * (size_t)max_ctx * kvd);
    fill(kh, (size_t)max_ctx * kvd, -1, 1);
    void *khs = test_kv_pack(kh, kvt, max_ctx, kvd);
    void *kc = dput(khs, rb * max_ctx), *vc = dput(khs, rb * max_ctx);
    free(kh);
    free(khs);
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)max_blocks), pos[512], seq[512];
    for (int i = 0; i < max_blocks; i++) bt[i] = (i * 37) % max_blocks; /* a permutation: 37 is odd */
    float *qh = malloc(4 * 512 * qd);
    fill(qh, 512 * qd, -1, 1);
    float *q = dput(qh, 4 * 512 * qd), *out = be->ops->alloc(be, 4 * 512 * qd);
    free(qh);
    int32_t *dbt = dput(bt, sizeof(int32_t) * (size_t)max_blocks);
    free(bt);
    const int n_sm = bench_n_sm();
    const size_t scr_bytes = rf_gpu_attn_decode_scratch(1, n_head, hd, 256);
    float *scr = be->ops->alloc(be, scr_bytes);
    void *zeros = calloc(1, scr_bytes); /* the scratch starts zero-filled (kernels.h) */
    be->ops->upload(be, scr, zeros, scr_bytes);
    free(zeros);
    bench_ctx c;
    memset(&c, 0, sizeof c);
    for (size_t ci = 0; ci < RF_ARRAY_LEN(ctxs); ci++) {
        pos[0] = ctxs[ci] - 1;
        seq[0] = 0;
        int32_t *dpos = dput(pos, 4), *dseq = dput(seq, 4);
        rf_gpu_attn_args a = {1, n_head, n_kv, hd, 1.0f / sqrtf((float)hd), bsz, max_blocks, dpos, dseq, dbt, q, kc, vc,
                              kvt, out, NULL, NULL, {0}, NULL, NULL, NULL, 0, 0, 0};
        const double mb = 2.0 * ctxs[ci] * rb / 1e6;
        double us = 0;
        /* the f32 kernels, then the tensor-core kernel where the shape has one (each with the
         * split count and heads per block the backend would pick for it) */
        for (int dm = 2; dm >= 0; dm -= 2) {
            rf_gpu_attention_decode_tc(dm);
            if (dm == 2 && !rf_gpu_attn_decode_tc(n_head, n_kv, hd, kvt, ctxs[ci])) continue;
            c.a = a;
            c.a.gb = rf_gpu_attn_decode_gb(n_head, n_kv, ctxs[ci]); /* as the backend picks it */
            c.a.tc = dm == 2;
            c.n_split = rf_gpu_attn_decode_splits(1, n_head, n_kv, hd, kvt, ctxs[ci], n_sm);
            c.scratch = scr;
            us = bench_graph(b_decode, &c, 50);
            printf("BENCH %-4s attention decode kv %s ctx %5d (splits %3d)%s: %8.2f us  (%.1f MB K/V, %.0f GB/s)\n",
                   name, tn, ctxs[ci], c.n_split, dm ? " tensor-core" : "", us, mb, mb / us * 1e3);
            const int auto_split = c.n_split; /* the tensor-core kernel at half and twice that count */
            for (int v = 0; v < 2 && dm == 2 && ctxs[ci] >= 8192; v++) {
                c.n_split = v ? RF_MIN(256, 2 * auto_split) : RF_MAX(1, auto_split / 2);
                const double us2 = bench_graph(b_decode, &c, 50);
                printf("BENCH %-4s attention decode kv %s ctx %5d (splits %3d) tensor-core: %8.2f us  (%.1f MB K/V, %.0f "
                       "GB/s)\n", name, tn, ctxs[ci], c.n_split, us2, mb, mb / us2 * 1e3);
            }
        }
        /* rope fused into it (kernels.h): NORMAL rotation of every dim, the new row at pos[0] */
        if (kvt != RF_TYPE_Q8_0 && kvt != RF_TYPE_Q4_0) {
            float *knh = malloc(4 * kvd);
            fill(knh, kvd, -1, 1);
            float *kn = dput(knh, 4 * kvd), *vn = dput(knh, 4 * kvd);
            const int32_t sl = dbt_host_slot(ctxs[ci] - 1, bsz, max_blocks);
            int32_t *dsl = dput(&sl, 4);
            rf_rope rope = {RF_ROPE_NORMAL, hd, 10000.0f, 1.0f, NULL};
            c.a.rope = rope;
            c.a.k_new = kn;
            c.a.v_new = vn;
            c.a.slot = dsl;
            us = bench_graph(b_decode, &c, 50);
            printf("BENCH %-4s attention decode kv %s ctx %5d (splits %3d): %8.2f us  with rope fused\n", name, tn,
                   ctxs[ci], c.n_split, us);
            rf_gpu_attention_decode_tc(1);
            if (rf_gpu_attn_decode_tc_rope(n_head, n_kv, hd, kvt)) {
                c.a.tc = 1;
                us = bench_graph(b_decode, &c, 50);
                printf("BENCH %-4s attention decode kv %s ctx %5d (splits %3d): %8.2f us  tensor-core with rope fused\n",
                       name, tn, ctxs[ci], c.n_split, us);
                c.a.tc = 0;
            }
            rf_gpu_attention_decode_tc(0);
            c.a.k_new = c.a.v_new = NULL;
            c.a.slot = NULL;
            dfree(kn), dfree(vn), dfree(dsl), free(knh);
        }
        /* the split count's effect at long contexts: half and twice the automatic count */
        const int auto_split = c.n_split;
        for (int v = 0; v < 2 && ctxs[ci] >= 8192; v++) {
            c.n_split = v ? RF_MIN(256, 2 * auto_split) : RF_MAX(1, auto_split / 2);
            us = bench_graph(b_decode, &c, 50);
            printf("BENCH %-4s attention decode kv %s ctx %5d (splits %3d): %8.2f us  (%.1f MB K/V, %.0f GB/s)\n", name,
                   tn, ctxs[ci], c.n_split, us, mb, mb / us * 1e3);
        }
        rf_gpu_attention_decode_tc(1);
        dfree(dpos);
        dfree(dseq);
    }
    for (int i = 0; i < 512; i++) { pos[i] = i; seq[i] = 0; }
    int32_t *dpos = dput(pos, 4 * 512), *dseq = dput(seq, 4 * 512);
    rf_gpu_attn_args a = {512, n_head, n_kv, hd, 1.0f / sqrtf((float)hd), bsz, max_blocks, dpos, dseq, dbt, q, kc, vc,
                          kvt, out, NULL, NULL, {0}, NULL, NULL, NULL, 0, 0, 0};
    c.a = a;
#ifdef RF_GPU_ATTN_TC
    for (int tc = 1; tc >= 0; tc--) {
        rf_gpu_attention_prefill_tc(tc, hd);
        double us = bench_graph(b_prefill, &c, 5);
        printf("BENCH %-4s attention prefill kv %s n=512 %s: %8.2f us  (%.1f TFLOP/s causal)\n", name, tn,
               tc ? "tensor-core" : "scalar     ", us, 4.0 * n_head * hd * 512.0 * 513 / 2 / us * 1e-6);
    }
    rf_gpu_attention_prefill_tc(1, hd);
#else
    double us = bench_graph(b_prefill, &c, 5);
    printf("BENCH %-4s attention prefill kv %s n=512 %s: %8.2f us  (%.1f TFLOP/s causal)\n", name, tn, "scalar     ",
           us, 4.0 * n_head * hd * 512.0 * 513 / 2 / us * 1e-6);
#endif
    /* rope + store at decode (1 token) */
    int32_t slot0 = 5;
    c.pos = dpos + 300;
    c.slot = dput(&slot0, 4);
    c.rope = (rf_rope){RF_ROPE_NORMAL, hd, 10000.0f, 1.0f, NULL};
    c.q = q;
    c.k = out;
    c.v = out + kvd;
    c.kc = kc;
    c.vc = vc;
    c.a.n_tokens = 1;
    printf("BENCH %-4s rope_store_kv kv %s (1 token): %8.2f us\n", name, tn, bench_graph(b_rope, &c, 50));
    dfree(c.slot);
    dfree(dpos);
    dfree(dseq);
    dfree(kc); dfree(vc); dfree(q); dfree(out); dfree(dbt); dfree(scr);
}

static void test_bench(void) {
    /* the device-to-device copy bandwidth (bytes read + written), the yardstick for the K/V reads */
    copy_bytes = (size_t)1 << 30;
    copy_src = be->ops->alloc(be, copy_bytes);
    copy_dst = be->ops->alloc(be, copy_bytes);
    if (copy_src && copy_dst) {
        double us = bench_graph(b_copy, NULL, 5);
        printf("BENCH copy 1 GiB device to device: %8.2f us  (%.0f GB/s read + written)\n", us, 2.0 * copy_bytes / us * 1e-3);
    }
    if (copy_src) dfree(copy_src);
    if (copy_dst) dfree(copy_dst);
    for (int kt = 0; kt < 4; kt++) {
        const uint32_t kvt = kt == 0 ? RF_TYPE_F16 : kt == 1 ? RF_TYPE_Q8_0 : kt == 2 ? RF_TYPE_Q4_0 : RF_TYPE_F32;
        bench_attn_shape("7B", 32, 32, 128, kvt);
        bench_attn_shape("1B", 32, 8, 64, kvt);
        bench_attn_shape("8B", 32, 8, 128, kvt); /* Llama-3-8B: GQA 4 at head dim 128 */
    }
    bench_ctx c;
    memset(&c, 0, sizeof c);
    const int dim = 4096, ffn = 11008, vocabs[] = {32000, 152064};
    float *h = malloc(4 * 152064);
    fill(h, 152064, -10, 10);
    c.x = dput(h, 4 * (size_t)ffn);
    c.res = dput(h + 1000, 4 * (size_t)ffn);
    c.w = dput(h + 2000, 4 * (size_t)dim * 8);
    c.out = be->ops->alloc(be, 4 * (size_t)ffn);
    c.dim = dim;
    printf("BENCH rmsnorm dim 4096 (+residual): %8.2f us\n", bench_graph(b_rms, &c, 100));
    c.dim = ffn;
    printf("BENCH swiglu 11008: %8.2f us\n", bench_graph(b_swiglu, &c, 100));
    c.dim = dim;
    int32_t tok3 = 3;
    c.slot = dput(&tok3, 4);
    printf("BENCH embed f32 row 4096: %8.2f us\n", bench_graph(b_embed, &c, 100));
    c.tok = be->ops->alloc(be, 4);
    c.lp = be->ops->alloc(be, 4);
    for (size_t vi = 0; vi < 2; vi++) {
        c.n_vocab = vocabs[vi];
        c.lg = dput(h, 4 * (size_t)c.n_vocab);
        c.sscr = be->ops->alloc(be, rf_gpu_sample_scratch(c.n_vocab));
        c.sp = rf_sample_params_default();
        c.sp.temp = 0;
        printf("BENCH sample greedy vocab %6d (+logprob): %8.2f us\n", c.n_vocab, bench_graph(b_sample, &c, 50));
        c.sp.temp = 0.8f;
        c.sp.top_k = 40;
        printf("BENCH sample temp 0.8 top-k 40 vocab %6d: %8.2f us\n", c.n_vocab, bench_graph(b_sample, &c, 5));
        dfree(c.lg);
        dfree(c.sscr);
    }
    free(h);
    dfree(c.x); dfree(c.res); dfree(c.w); dfree(c.out); dfree(c.slot); dfree(c.tok); dfree(c.lp);
    CHECK(be->ops->sync(be) == 0, "bench: %s", rf_error());
}
#endif

/* ---- elementwise ---------------------------------------------------------------------------- */

static void test_elementwise(void) {
    const int64_t sizes[] = {1, 31, 1000, 65537, 1000003};
    for (size_t si = 0; si < RF_ARRAY_LEN(sizes) - (quick ? 1 : 0); si++) {
        int64_t n = sizes[si];
        float *g = malloc(4 * (size_t)n), *u = malloc(4 * (size_t)n), *ref = malloc(4 * (size_t)n), *got = malloc(4 * (size_t)n);
        fill(g, (size_t)n, -20, 20);
        fill(u, (size_t)n, -5, 5);
        if (n > 10) {
            g[0] = 0; g[1] = 200; g[2] = -200; g[3] = INFINITY; g[4] = -INFINITY; g[5] = NAN; u[6] = INFINITY;
        }
        float *dg = dput(g, 4 * (size_t)n), *du = dput(u, 4 * (size_t)n), *dout = be->ops->alloc(be, 4 * (size_t)n);
        be->ops->swiglu(be, dg, du, n, dout);
        CHECK(dget(got, dout, 4 * (size_t)n) == 0, "swiglu: %s", rf_error());
        cpu_swiglu(g, u, n, ref);
        CHECK_CLOSE("swiglu", got, ref, (size_t)n, 1e-30, 1e-5);
#if HAVE_GPU_BUILD
        void *stream = rf_gpu_backend_stream(be);
        rf_gpu_backend_check(be, "scale", rf_gpu_scale(stream, dg, n, 0.37f));
        CHECK(dget(got, dg, 4 * (size_t)n) == 0, "scale: %s", rf_error());
        cpu_scale(g, n, 0.37f);
        CHECK_CLOSE("scale", got, g, (size_t)n, 0, 0);
#endif
        dfree(dg); dfree(du); dfree(dout);
        free(g); free(u); free(ref); free(got);
    }
#if HAVE_GPU_BUILD
    void *stream = rf_gpu_backend_stream(be);
    const int mshape[][2] = {{1, 1}, {3, 3}, {5, 17}, {64, 64}, {7, 1000}, {100, 5000}};
    for (size_t si = 0; si < RF_ARRAY_LEN(mshape); si++) {
        int r = mshape[si][0], c = mshape[si][1];
        size_t n = (size_t)r * c;
        float *x = malloc(4 * n), *got = malloc(4 * n);
        fill(x, n, -30, 30);
        if (r >= 3) {
            x[(size_t)1 * c] = NAN;                            /* NaN row */
            for (int j = 0; j < c; j++) x[(size_t)2 * c + j] = -INFINITY; /* all -inf row */
        }
        float *dx = dput(x, 4 * n);
        rf_gpu_backend_check(be, "causal_mask", rf_gpu_causal_mask(stream, dx, r, c));
        CHECK(dget(got, dx, 4 * n) == 0, "causal mask: %s", rf_error());
        cpu_causal_mask(x, r, c);
        CHECK_CLOSE("causal mask", got, x, n, 0, 0);
        rf_gpu_backend_check(be, "softmax_rows", rf_gpu_softmax_rows(stream, dx, r, c));
        CHECK(dget(got, dx, 4 * n) == 0, "softmax: %s", rf_error());
        cpu_softmax_rows(x, r, c);
        CHECK_CLOSE("softmax rows", got, x, n, 1e-7, 1e-5);
        dfree(dx);
        free(x); free(got);
    }
#endif
    /* get_rows and copy_block */
    {
        int rows = 50, dim = 333, n_sel = 17;
        float *x = malloc(4 * (size_t)rows * dim), *ref = malloc(4 * (size_t)n_sel * dim), *got = malloc(4 * (size_t)n_sel * dim);
        int32_t sel[17];
        fill(x, (size_t)rows * dim, -1, 1);
        for (int i = 0; i < n_sel; i++) sel[i] = test_randint(0, rows - 1);
        float *dx = dput(x, 4 * (size_t)rows * dim), *dout = be->ops->alloc(be, 4 * (size_t)n_sel * dim);
        int32_t *dsel = dput(sel, sizeof sel);
        be->ops->get_rows(be, dx, dsel, n_sel, dim, dout);
        CHECK(dget(got, dout, 4 * (size_t)n_sel * dim) == 0, "get_rows: %s", rf_error());
        cpu_get_rows(x, sel, n_sel, dim, ref);
        CHECK_CLOSE("get_rows", got, ref, (size_t)n_sel * dim, 0, 0);
        /* blocks of 7 slots x kv_dim 65 of f16 (910 bytes: not a multiple of 4) and of f32 */
        for (size_t es = 2; es <= 4; es += 2) {
            const size_t bb = 7 * 65 * es;
            be->ops->upload(be, dx, x, 4 * (size_t)rows * dim);
            be->ops->copy_block(be, dx, bb, 3, 11);
            be->ops->copy_block(be, dx, bb, 11, 0);
            char *all = malloc(4 * (size_t)rows * dim), *want = malloc(4 * (size_t)rows * dim);
            CHECK(dget(all, dx, 4 * (size_t)rows * dim) == 0, "copy_block: %s", rf_error());
            memcpy(want, x, 4 * (size_t)rows * dim);
            memcpy(want + 11 * bb, want + 3 * bb, bb);
            memcpy(want + 0 * bb, want + 11 * bb, bb);
            CHECK(!memcmp(all, want, 4 * (size_t)rows * dim), "copy_block (%zu-byte elements): bytes differ", es);
            free(all);
            free(want);
        }
        dfree(dx); dfree(dout); dfree(dsel);
        free(x); free(ref); free(got);
    }
}

/* ---- sampler -------------------------------------------------------------------------------- */

static int32_t gpu_sample(const float *dlogits, int nv, const rf_sample_params *p, const int32_t *dhist, int n_hist,
                          float u, int32_t *dtok, float *dlp, float *lp) {
    int32_t tok = -1;
    be->ops->sample(be, dlogits, nv, p, dhist, n_hist, u, dtok, dlp);
    if (dget(&tok, dtok, 4)) return -1;
    if (lp && dget(lp, dlp, 4)) return -1;
    return tok;
}

/* Exact agreement with rf_sample_host over the top-k selection path (sample.cu's radix select)
 * and the full-sort path: vocab sizes around k, top_k in {1, 40, 1000, vocab, 0}, logits without
 * ties, with a few ties at the top, and coarsely quantized (massive ties: the overflow fallback),
 * penalties off and on, many u per case. The token must be identical, the log-probability within
 * 1e-4 (relative + absolute). */
static void test_sampler_exact(int32_t *dtok, float *dlp) {
    const int vocabs[] = {1, 7, 40, 41, 1000, 32000, 152064};
    int32_t hist[200];
    for (size_t vi = 0; vi < RF_ARRAY_LEN(vocabs) - (quick ? 2 : 0); vi++) {
        const int nv = vocabs[vi];
        float *lg = malloc(4 * (size_t)nv);
        float *dl = be->ops->alloc(be, 4 * (size_t)nv);
        for (int i = 0; i < 200; i++) hist[i] = i % 3 == 0 ? test_randint(0, nv - 1) : test_randint(0, RF_MIN(nv, 60) - 1);
        int32_t *dhist = dput(hist, sizeof hist);
        const int ks[] = {1, 40, 1000, nv, 0};
        int bad = 0, lp_bad = 0, calls = 0;
        for (int mode = 0; mode < 3; mode++) {
            if (mode == 0) fill(lg, (size_t)nv, -8, 8);
            if (mode == 1) { /* a handful of likely tokens, some tied with each other, -0 and +0 */
                fill(lg, (size_t)nv, -6, 6);
                for (int i = 0; i < RF_MIN(nv, 30); i++) lg[test_randint(0, nv - 1)] = 4.0f + (float)test_randint(0, 3);
                lg[0] = -0.0f;
                if (nv > 1) lg[nv - 1] = 0.0f;
            }
            if (mode == 2) /* coarse levels: thousands of ties at 152064 */
                for (int i = 0; i < nv; i++) lg[i] = (float)test_randint(-12, 12) * 0.5f;
            be->ops->upload(be, dl, lg, 4 * (size_t)nv);
            for (size_t ki = 0; ki < RF_ARRAY_LEN(ks); ki++)
                for (int pen = 0; pen < 2; pen++) {
                    rf_sample_params p = rf_sample_params_default();
                    p.top_k = ks[ki];
                    if (pen) {
                        p.repeat_penalty = 1.3f;
                        p.freq_penalty = 0.2f;
                        p.presence_penalty = 0.4f;
                        p.penalty_last_n = mode == 1 ? -1 : 64;
                    }
                    if (mode == 2 && ki == 1) { p.top_p = 1.0f; p.min_p = 0.0f; p.temp = 1.5f; }
                    if (mode == 0 && ki == 2) { p.top_p = 0.5f; p.min_p = 0.01f; }
                    const bool slow = nv > 5000 && (p.top_k <= 0 || p.top_k >= nv || mode == 2);
                    const int draws = quick ? 2 : slow ? 3 : nv > 5000 ? 24 : 40;
                    rf_rng rng;
                    rf_rng_seed(&rng, 1000 + 17 * vi + 5 * ki + pen + 100 * mode);
                    for (int d = 0; d < draws; d++) {
                        const float u = d == 0 ? 0.0f : d == 1 ? 0.99999994f : rf_rng_uniform(&rng);
                        float lp = 0, lpr = 0;
                        int32_t g = gpu_sample(dl, nv, &p, dhist, 200, u, dtok, dlp, &lp);
                        int32_t r = rf_sample_host(lg, nv, &p, hist, 200, u, &lpr);
                        calls++;
                        if (g != r && bad++ < 5)
                            fprintf(stderr, "  exact sampling: vocab %d mode %d top_k %d pen %d u %.9g: gpu %d, cpu %d\n", nv,
                                    mode, p.top_k, pen, (double)u, g, r);
                        if (g == r && !(fabsf(lp - lpr) <= 1e-4f * (1 + fabsf(lpr))) && lp_bad++ < 5)
                            fprintf(stderr, "  exact sampling: vocab %d mode %d top_k %d: logprob gpu %g, cpu %g\n", nv, mode,
                                    p.top_k, (double)lp, (double)lpr);
                    }
                }
        }
        CHECK(bad == 0, "exact sampling (vocab %d): %d of %d tokens differ from the CPU", nv, bad, calls);
        CHECK(lp_bad == 0, "exact sampling (vocab %d): %d log-probabilities off", nv, lp_bad);
        dfree(dhist);
        dfree(dl);
        free(lg);
    }
}

#if HAVE_GPU_BUILD
/* ROCMFORGE_SAMPLE_BENCH=1: times the sampler (us per call, median of 7) at vocab 32000 and
 * 152064, uniform logits in [-10, 10], with the log-probability: graph replay (bench_graph) and
 * eager launches bracketed by events. */
typedef struct {
    const float *lg;
    int nv;
    rf_sample_params p;
    const int32_t *hist;
    int n_hist;
    int32_t *tok;
    float *lp;
} sbench;
static void sb_call(void *a) {
    sbench *s = a;
    be->ops->sample(be, s->lg, s->nv, &s->p, s->hist, s->n_hist, 0.37f, s->tok, s->lp);
}
static double sb_eager(sbench *s, int reps) {
    gpuStream_t st = (gpuStream_t)rf_gpu_backend_stream(be);
    gpuEvent_t e0, e1;
    gpuEventCreate(&e0);
    gpuEventCreate(&e1);
    double t[7];
    sb_call(s);
    for (int k = 0; k < 7; k++) {
        gpuEventRecord(e0, st);
        for (int i = 0; i < reps; i++) sb_call(s);
        gpuEventRecord(e1, st);
        gpuStreamSynchronize(st);
        float ms = 0;
        gpuEventElapsedTime(&ms, e0, e1);
        t[k] = ms * 1000.0 / reps;
    }
    for (int i = 0; i < 7; i++)
        for (int j = i + 1; j < 7; j++)
            if (t[j] < t[i]) { double x = t[i]; t[i] = t[j]; t[j] = x; }
    gpuEventDestroy(e0);
    gpuEventDestroy(e1);
    return t[3];
}
static void bench_sampler(int32_t *dtok, float *dlp) {
    const int vocabs[] = {32000, 152064};
    float *h = malloc(4 * 152064);
    fill(h, 152064, -10, 10);
    int32_t hist[64];
    for (int i = 0; i < 64; i++) hist[i] = test_randint(0, 31999);
    int32_t *dhist = dput(hist, sizeof hist);
    for (size_t vi = 0; vi < 2; vi++) {
        sbench s = {dput(h, 4 * (size_t)vocabs[vi]), vocabs[vi], rf_sample_params_default(), dhist, 0, dtok, dlp};
        const char *names[] = {"default (top-k 40)", "top-k 40 + penalties", "top-k 1000", "top-k off (full sort)"};
        for (int c = 0; c < 4; c++) {
            s.p = rf_sample_params_default();
            s.n_hist = 0;
            if (c == 1) { s.p.repeat_penalty = 1.1f; s.n_hist = 64; }
            if (c == 2) s.p.top_k = 1000;
            if (c == 3) s.p.top_k = 0;
            const int reps = c == 3 ? 3 : 20;
            printf("BENCH sampler vocab %6d %-22s: graph %9.2f us, eager %9.2f us\n", vocabs[vi], names[c],
                   bench_graph(sb_call, &s, reps), sb_eager(&s, reps));
        }
        dfree((void *)s.lg);
    }
    dfree(dhist);
    free(h);
    CHECK(be->ops->sync(be) == 0, "sampler bench: %s", rf_error());
}
#endif

static void test_sampler(void) {
    const int vocabs[] = {1, 7, 512, 32000, 151936};
    int32_t *dtok = be->ops->alloc(be, 4);
    float *dlp = be->ops->alloc(be, 4);
    for (size_t vi = 0; vi < RF_ARRAY_LEN(vocabs) - (quick ? 2 : 0); vi++) {
        const int nv = vocabs[vi];
        float *lg = malloc(4 * (size_t)nv);
        int32_t hist[300];
        for (int i = 0; i < 300; i++) hist[i] = test_randint(0, RF_MIN(nv, 50) - 1);
        int32_t *dhist = dput(hist, sizeof hist);
        float *dl = be->ops->alloc(be, 4 * (size_t)nv);
        /* greedy: ties (lowest id wins), NaN away from id 0, penalties */
        for (int trial = 0; trial < 6; trial++) {
            fill(lg, (size_t)nv, -10, 10);
            if (nv > 10 && trial >= 1) {
                float top = 50.0f;
                lg[nv - 1] = top; lg[nv / 2] = top; lg[5] = trial == 2 ? top : 0; /* ties */
                lg[3] = NAN;
            }
            if (trial == 3) for (int i = 0; i < nv; i++) lg[i] = -INFINITY;
            be->ops->upload(be, dl, lg, 4 * (size_t)nv);
            rf_sample_params p = rf_sample_params_default();
            p.temp = 0;
            if (trial >= 4) {
                p.repeat_penalty = 1.3f;
                p.freq_penalty = trial == 5 ? 0.7f : 0;
                p.presence_penalty = 0.5f;
                p.penalty_last_n = trial == 5 ? 64 : 300;
            }
            float lp = 0, lpr = 0;
            int32_t g = gpu_sample(dl, nv, &p, dhist, 300, 0.5f, dtok, dlp, &lp);
            int32_t r = rf_sample_host(lg, nv, &p, hist, 300, 0.5f, &lpr);
            CHECK(g == r, "greedy (vocab %d, trial %d): gpu %d, cpu %d", nv, trial, g, r);
            CHECK((isnan(lp) && isnan(lpr)) || fabsf(lp - lpr) <= 1e-4f * (1 + fabsf(lpr)) || (isinf(lp) && lp == lpr),
                  "greedy logprob (vocab %d, trial %d): gpu %g, cpu %g", nv, trial, lp, lpr);
        }
        /* seeded sampling against the CPU, and reproducibility */
        struct { float temp; int k; float p, minp, rep, freq, pres; } cfg[] = {
            {0.8f, 40, 0.95f, 0.05f, 1, 0, 0}, {1.5f, 0, 1.0f, 0, 1, 0, 0},  {1.0f, 1, 1.0f, 0, 1, 0, 0},
            {0.7f, 0, 0.5f, 0, 1, 0, 0},      {1.0f, 0, 1.0f, 0.2f, 1, 0, 0}, {0.9f, 100, 0.9f, 0.02f, 1.2f, 0.3f, 0.4f},
        };
        const int draws = quick ? 3 : nv >= 100000 ? 12 : 40;
        for (size_t ci = 0; ci < RF_ARRAY_LEN(cfg); ci++) {
            fill(lg, (size_t)nv, -6, 6);
            for (int i = 0; i < RF_MIN(nv, 20); i++) lg[test_randint(0, nv - 1)] += 5; /* a few likely tokens */
            be->ops->upload(be, dl, lg, 4 * (size_t)nv);
            rf_sample_params p = {cfg[ci].temp, cfg[ci].k, cfg[ci].p, cfg[ci].minp, cfg[ci].rep, cfg[ci].freq,
                                  cfg[ci].pres, 64, 1234};
            rf_rng a, b2;
            rf_rng_seed(&a, 42 + ci);
            rf_rng_seed(&b2, 42 + ci);
            int mism = 0, repro = 1, lp_bad = 0;
            for (int d = 0; d < draws; d++) {
                float u = rf_rng_uniform(&a), u2 = rf_rng_uniform(&b2);
                float lp = 0, lpr = 0;
                int32_t g = gpu_sample(dl, nv, &p, dhist, 100, u, dtok, dlp, &lp);
                int32_t g2 = gpu_sample(dl, nv, &p, dhist, 100, u2, dtok, dlp, NULL);
                int32_t r = rf_sample_host(lg, nv, &p, hist, 100, u, &lpr);
                repro &= g == g2;
                mism += g != r;
                if (g == r) lp_bad += !(fabsf(lp - lpr) <= 1e-4f * (1 + fabsf(lpr)));
            }
            CHECK(repro, "sampling (vocab %d, config %zu): the same seed gave different tokens", nv, ci);
            CHECK(mism <= draws / 100 + (draws >= 100 ? 1 : 0), "sampling (vocab %d, config %zu): %d of %d draws differ from the CPU", nv, ci, mism, draws);
            CHECK(lp_bad == 0, "sampling (vocab %d, config %zu): %d log-probabilities off", nv, ci, lp_bad);
        }
        dfree(dhist);
        dfree(dl);
        free(lg);
    }
    test_sampler_exact(dtok, dlp);
#if HAVE_GPU_BUILD
    if (getenv("ROCMFORGE_SAMPLE_BENCH") && atoi(getenv("ROCMFORGE_SAMPLE_BENCH"))) bench_sampler(dtok, dlp);
#endif
    dfree(dtok);
    dfree(dlp);
}

/* ---- graph capture -------------------------------------------------------------------------- */

static void run_seq(float *dx, float *dres, rf_weight *w, float *dh, float *dgate, float *dup, int32_t *drows, float *dsel,
                    int rows, int dim) {
    be->ops->rmsnorm(be, dx, dres, w, rows, dim, 1e-6f, dh);
    be->ops->swiglu(be, dh, dup, (int64_t)rows * dim, dgate);
    be->ops->get_rows(be, dgate, drows, 3, dim, dsel);
}

static void test_graph(void) {
    if (!be->ops->graph_begin) {
        SKIP("graphs not supported");
        return;
    }
    const int rows = 9, dim = 200;
    size_t n = (size_t)rows * dim;
    float *x = malloc(4 * n), *res = malloc(4 * n), *w = malloc(4 * dim), *up = malloc(4 * n);
    float *eager = malloc(4 * 3 * dim), *graphed = malloc(4 * 3 * dim);
    int32_t sel[3] = {8, 0, 4};
    float *dx = be->ops->alloc(be, 4 * n), *dres = be->ops->alloc(be, 4 * n), *dw = be->ops->alloc(be, 4 * dim);
    float *dh = be->ops->alloc(be, 4 * n), *dgate = be->ops->alloc(be, 4 * n), *dup = be->ops->alloc(be, 4 * n);
    float *dsel = be->ops->alloc(be, 4 * 3 * dim);
    int32_t *drows = be->ops->alloc(be, sizeof sel);
    rf_weight wt = f32_weight("norm", dw, dim);
    rf_graph *gr = NULL;
    int ok = 1;
    for (int round = 0; round < 3; round++) {
        fill(x, n, -2, 2);
        fill(res, n, -2, 2);
        fill(w, dim, -1, 1);
        fill(up, n, -1, 1);
        sel[0] = test_randint(0, rows - 1);
        /* eager */
        be->ops->upload(be, dx, x, 4 * n);
        be->ops->upload(be, dres, res, 4 * n);
        be->ops->upload(be, dw, w, 4 * dim);
        be->ops->upload(be, dup, up, 4 * n);
        be->ops->upload(be, drows, sel, sizeof sel);
        run_seq(dx, dres, &wt, dh, dgate, dup, drows, dsel, rows, dim);
        ok &= dget(eager, dsel, 4 * 3 * dim) == 0;
        /* graph: captured in round 0, replayed with the new data in every round */
        be->ops->upload(be, dx, x, 4 * n);
        be->ops->upload(be, drows, sel, sizeof sel);
        ok &= be->ops->sync(be) == 0;
        if (round == 0) {
            CHECK(be->ops->graph_begin(be) == 0, "graph_begin: %s", rf_error());
            run_seq(dx, dres, &wt, dh, dgate, dup, drows, dsel, rows, dim);
            CHECK(be->ops->graph_end(be, &gr) == 0 && gr, "graph_end: %s", rf_error());
        }
        if (gr) CHECK(be->ops->graph_launch(be, gr) == 0, "graph_launch: %s", rf_error());
        ok &= dget(graphed, dsel, 4 * 3 * dim) == 0;
        char what[48];
        snprintf(what, sizeof what, "graph replay round %d", round);
        CHECK_CLOSE(what, graphed, eager, 3 * (size_t)dim, 0, 0);
    }
    CHECK(ok, "graph test transfers: %s", rf_error());
    if (gr) be->ops->graph_free(be, gr);
    dfree(dx); dfree(dres); dfree(dw); dfree(dh); dfree(dgate); dfree(dup); dfree(dsel); dfree(drows);
    free(x); free(res); free(w); free(up); free(eager); free(graphed);
}

/* ---- error reporting ------------------------------------------------------------------------ */

static void test_errors(void) {
    void *p = be->ops->alloc(be, (size_t)1 << 50);
    CHECK(p == NULL && strstr(rf_error(), "out of GPU memory"), "a 1 PiB allocation must fail clearly: %s", rf_error());
    CHECK(be->ops->sync(be) == 0, "a failed allocation must not poison the backend: %s", rf_error());
    printf("backend: %s, built: %s, free memory %.0f MiB\n", be->ops->describe(be), rf_backends_built(),
           be->ops->mem_free(be) / 1048576.0);
}

/* ---- models --------------------------------------------------------------------------------- */

typedef struct {
    const char *stem;
    double tol;
} model_case;

static void test_model(const model_case *mc) {
    golden g;
    if (golden_load(mc->stem, &g)) {
        SKIP("%s: golden data missing", mc->stem);
        return;
    }
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s.gguf", mc->stem);
    if (!test_file_exists(test_shared(rel))) {
        SKIP("%s: model file missing", mc->stem);
        golden_free(&g);
        return;
    }
    rf_model_params mp = rf_model_default_params();
    mp.device = "gpu";
    rf_model *m = rf_model_load(test_shared(rel), &mp);
    CHECK(m != NULL, "%s on gpu: load failed: %s", mc->stem, rf_error());
    if (!m) {
        golden_free(&g);
        return;
    }
    rf_context *c = rf_context_new(m, NULL);
    CHECK(c != NULL, "%s: context: %s", mc->stem, rf_error());
    if (c) {
        int n = g.n_prompt, nv = g.n_vocab, seq = rf_seq_new(c);
        int32_t pos[256], sid[256];
        int8_t want[256];
        for (int i = 0; i < n; i++) {
            pos[i] = i;
            sid[i] = seq;
            want[i] = 1;
        }
        rf_batch b = {n, g.prompt_tokens, pos, sid, want};
        int rc = rf_decode(c, &b);
        CHECK(rc == 0, "%s: decode: %s", mc->stem, rf_error());
        float *lg = malloc(4 * (size_t)n * nv);
        int got_all = rc == 0;
        for (int i = 0; got_all && i < n; i++) {
            const float *l = rf_get_logits(c, i);
            if (!l) got_all = 0;
            else memcpy(lg + (size_t)i * nv, l, 4 * (size_t)nv);
        }
        CHECK(got_all, "%s: logits: %s", mc->stem, rf_error());
        if (got_all) {
            double err = test_rel_l2(lg, g.logits, (size_t)n * nv);
            printf("%-22s gpu      rel L2 %.2e (limit %.0e)\n", mc->stem, err, mc->tol);
            CHECK(err <= mc->tol, "%s on gpu: logits rel L2 %.3e > %.0e", mc->stem, err, mc->tol);
        }
        free(lg);
        if (!strcmp(mc->stem, "stories260K") && g.n_greedy > 0 && got_all) {
            rf_sampler_params sp = rf_sampler_default_params();
            sp.temp = 0;
            rf_sampler *s = rf_sampler_new(&sp);
            rf_backend *mbe = m->be;
            uint64_t d0 = mbe->n_downloads;
            int32_t next = rf_sampler_sample(s, c, n - 1, NULL);
            int ok = 0, p = n, trips_ok = mbe->n_downloads - d0 == 1;
            for (int i = 0; i < g.n_greedy; i++) {
                if (next != g.greedy[i]) break;
                ok++;
                int8_t w1 = 1;
                rf_batch b1 = {1, &next, &p, &seq, &w1};
                uint64_t before = mbe->n_downloads;
                if (rf_decode(c, &b1)) break;
                p++;
                next = rf_sampler_sample(s, c, 0, NULL);
                trips_ok &= mbe->n_downloads - before == 1;
            }
            CHECK(ok == g.n_greedy, "stories260K on gpu: greedy matches %d of %d golden tokens", ok, g.n_greedy);
            CHECK(trips_ok, "stories260K on gpu: a generated token cost other than exactly one download");
            printf("stories260K gpu greedy: %d/%d tokens, one download per token: %s\n", ok, g.n_greedy,
                   trips_ok ? "yes" : "no");
            /* pipelined (rf_sampler_sample_async, rf_decode_next, rf_sampler_fetch) on a second
             * sequence: the same tokens, and still one download per token (the fetch) */
            rf_sampler *s2 = rf_sampler_new(&sp);
            rf_seq_remove(c, seq); /* the context holds one sequence */
            int seq2 = rf_seq_new(c), ok2 = 0, trips2 = 1;
            int32_t *pp = malloc(sizeof(int32_t) * (size_t)n), *sq = malloc(sizeof(int32_t) * (size_t)n);
            int8_t *wl = calloc((size_t)n, 1);
            for (int i = 0; i < n; i++) pp[i] = i, sq[i] = seq2;
            wl[n - 1] = 1;
            rf_batch bp = {n, g.prompt_tokens, pp, sq, wl};
            if (seq2 >= 0 && !rf_decode(c, &bp) && !rf_sampler_sample_async(s2, c, n - 1)) {
                for (int i = 0; i < g.n_greedy; i++) {
                    const int more = i + 1 < g.n_greedy;
                    uint64_t before = mbe->n_downloads;
                    if (more && rf_decode_next(c, seq2)) break;
                    int32_t t = rf_sampler_fetch(s2, c);
                    if (more && rf_sampler_sample_async(s2, c, 0)) break;
                    trips2 &= mbe->n_downloads - before == 1;
                    if (t != g.greedy[i]) break;
                    ok2++;
                }
            }
            CHECK(ok2 == g.n_greedy && trips2, "stories260K on gpu, pipelined: %d of %d golden tokens, one download per token: %s",
                  ok2, g.n_greedy, trips2 ? "yes" : "no");
            printf("stories260K gpu greedy pipelined: %d/%d tokens, one download per token: %s\n", ok2, g.n_greedy,
                   trips2 ? "yes" : "no");
            free(pp), free(sq), free(wl);
            rf_sampler_free(s2);
            /* seeded sampling on the GPU is reproducible through the public API */
            rf_sampler_free(s);
        }
    }
    rf_context_free(c);
    rf_model_free(m);
    golden_free(&g);
}

static void test_models(void) {
    const double Q = 4e-2; /* see tests/test_model.c: llama.cpp's own 8-bit activation rounding */
    const model_case cases[] = {
        {"stories260K", 3e-3},       {"llama-2-tiny-random", 1e-2}, {"tiny-llama-f32", 1e-2},
        {"tiny-llama-f16", 1e-2},    {"tiny-llama-bf16", 1e-2},     {"tiny-llama-q8_0", Q},
        {"tiny-llama-q4_0", Q},      {"tiny-llama-q4_1", Q},        {"tiny-llama-q5_0", Q},
        {"tiny-llama-q5_1", Q},      {"tiny-llama-q2_k", Q},        {"tiny-llama-q3_k_m", Q},
        {"tiny-llama-q4_k_m", Q},    {"tiny-llama-q5_k_m", Q},      {"tiny-llama-q6_k", Q},
        {"tiny-llama-iq4_nl", Q},    {"tiny-llama-iq4_xs", Q},      {"tiny-qwen2-f32", 1e-2},
        {"tiny-qwen2-q8_0", Q},      {"tiny-qwen2-q4_0", Q},        {"tiny-qwen2-q4_k_m", Q},
        {"tiny-qwen2-q6_k", Q},
    };
    for (size_t i = 0; i < RF_ARRAY_LEN(cases); i++) test_model(&cases[i]);
}

int main(int argc, char **argv) {
    printf("seed %llu\n", (unsigned long long)test_seed());
    /* argv[1]: groups to run, comma-separated ("kernels" = every kernel group); default all */
    const char *only = argc > 1 ? argv[1] : NULL;
    quick = getenv("ROCMFORGE_GPU_QUICK") && atoi(getenv("ROCMFORGE_GPU_QUICK"));
    static const char *groups[] = {"embed", "rmsnorm", "rope", "attention", "elementwise", "sampler", "graph", "errors", "models"};
    be = rf_backend_create("gpu", 0);
    if (!be) {
        printf("no GPU: %s\n", rf_error());
        for (size_t i = 0; i < RF_ARRAY_LEN(groups); i++) SKIP("GPU test group %s: %s", groups[i], rf_error());
        return test_finish();
    }
    printf("GPU: %s\n", be->ops->describe(be));
#define WANT(g) (!only || strstr(only, "kernels") || strstr(only, g))
    if (WANT("errors")) test_errors();
    if (WANT("embed")) test_embed();
    if (WANT("rmsnorm")) test_rmsnorm();
    if (WANT("rope")) test_rope();
    if (WANT("attention")) test_attention();
#if HAVE_GPU_BUILD
    if (WANT("attention")) test_rope_attention();
#endif
    if (WANT("elementwise")) test_elementwise();
    if (WANT("sampler")) test_sampler();
    if (WANT("graph")) test_graph();
#if HAVE_GPU_BUILD
    if (only && strstr(only, "bench")) test_bench(); /* only when named */
#endif
    CHECK(be->ops->sync(be) == 0, "final sync: %s", rf_error());
    rf_backend_destroy(be);
    if (!only || strstr(only, "models")) test_models();
    return test_finish();
}
