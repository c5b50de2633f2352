/* The CPU backend: host memory, the reference ops of ops.h, and the fast matmul of matmul.h.
 * Modes: "cpu" uses the fast matmul and the SIMD attention (attention_simd.h); "cpu-ref" the
 * exact reference everywhere (the oracle);
 * "cpu-ggml" the reference with llama.cpp's CPU roundings (see ggml_rounding.c). */
#include "cpu_backend.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/dtype.h"
#include "core/util.h"
#include "attention_simd.h"
#include "matmul.h"
#include "ops.h"
#include "runtime/sampler.h"
#include "threadpool.h"

typedef struct {
    rf_threadpool *tp;
    rf_isa isa;
    rf_cpu_mode mode;
    unsigned char async_bytes[RF_DOWNLOAD_ASYNC_MAX]; /* download_start's copy (ops run at once) */
    size_t n_async;
    float *acc;     /* op_matmul's accumulate output before it is added (grown on demand) */
    size_t acc_cap; /* floats */
    rf_backend_ops ops; /* cpu_ops with this mode's default K/V cache type */
} cpu_impl;

static cpu_impl *impl_of(rf_backend *be) { return be->impl; }

static void cpu_destroy(rf_backend *be) {
    cpu_impl *c = impl_of(be);
    rf_threadpool_free(c->tp);
    free(c->acc);
    free(c);
    free(be);
}

static void *cpu_alloc(rf_backend *be, size_t bytes) {
    (void)be;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? (bytes + 63) / 64 * 64 : 64)) {
        rf_set_error("out of host memory allocating %zu bytes", bytes);
        return NULL;
    }
    return p;
}
static void cpu_free(rf_backend *be, void *p) { (void)be; free(p); }
/* Weights are copied out of the file mapping into huge-page memory (matmul.h: decode reads them
 * faster from there). */
static void *cpu_upload_weight(rf_backend *be, const void *host, size_t bytes) {
    (void)be;
    return rf_cpu_weights_copy(host, bytes);
}
static void cpu_free_weight(rf_backend *be, void *p) { (void)be; rf_cpu_weights_free(p); }
static void cpu_upload(rf_backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    memcpy(dst, src, n);
}
static int cpu_download(rf_backend *be, void *dst, const void *src, size_t n) {
    be->n_downloads++;
    memcpy(dst, src, n);
    return 0;
}

static int cpu_download_start(rf_backend *be, const void *src, size_t n) {
    if (n > RF_DOWNLOAD_ASYNC_MAX) {
        rf_set_error("download_start of %zu bytes: at most %d", n, RF_DOWNLOAD_ASYNC_MAX);
        return -1;
    }
    memcpy(impl_of(be)->async_bytes, src, n);
    impl_of(be)->n_async = n;
    return 0;
}

static int cpu_download_wait(rf_backend *be, void *dst) {
    be->n_downloads++;
    memcpy(dst, impl_of(be)->async_bytes, impl_of(be)->n_async);
    return 0;
}
static int cpu_sync(rf_backend *be) { (void)be; return 0; }
static size_t cpu_mem_free(rf_backend *be) { (void)be; return 0; }

static void op_embed(rf_backend *be, const rf_weight *table, const int32_t *tokens, int n, float *out) {
    (void)be;
    cpu_embed(table, tokens, n, out);
}

static void op_rmsnorm(rf_backend *be, float *x, const float *residual, const rf_weight *w, int n_rows,
                       int dim, float eps, float *out) {
    (void)be;
    cpu_rmsnorm(x, residual, w->data, n_rows, dim, eps, out);
}

/* y[t][o] += bias[o] for n token rows of w's outputs (no bias: nothing). */
static void add_bias(const rf_weight *w, const rf_weight *bias, int n, float *y) {
    if (!bias) return;
    const float *b = bias->data;
    for (int t = 0; t < n; t++)
        for (int64_t o = 0; o < w->n_out; o++) y[(int64_t)t * w->n_out + o] += b[o];
}

/* One weight, y = xin W^T (+ bias), on the mode's matmul. */
static void matmul_one(cpu_impl *c, const rf_weight *w, const rf_weight *bias, const float *x, int n, float *y) {
    if (c->mode != RF_CPU_FAST) {
        (c->mode == RF_CPU_GGML ? cpu_matmul_ref_ggml : cpu_matmul_ref)(w, bias ? bias->data : NULL, x, n, y);
        return;
    }
    rf_matmul(c->tp, c->isa, w->type, w->data, w->n_out, w->n_in, x, n, y);
    add_bias(w, bias, n, y);
}

static void op_matmul(rf_backend *be, int n_outs, const rf_mm_out *outs, const float *x, int n, const rf_weight *norm,
                      float eps, bool accumulate, float *scratch) {
    cpu_impl *c = impl_of(be);
    int64_t n_in = outs[0].w->n_in;
    const float *xin = x;
    if (norm) {
        cpu_rmsnorm((float *)x, NULL, norm->data, n, (int)n_in, eps, scratch); /* x is only read */
        xin = scratch;
    }
    if (!accumulate && c->mode == RF_CPU_FAST && n_outs > 1 && n_outs <= 4) { /* q/k/v, gate/up: one dispatch */
        rf_mm_mat mats[4];
        for (int i = 0; i < n_outs; i++) mats[i] = (rf_mm_mat){outs[i].w->type, outs[i].w->data, outs[i].w->n_out, outs[i].y};
        rf_matmul_many(c->tp, c->isa, n_outs, mats, n_in, xin, n);
        for (int i = 0; i < n_outs; i++) add_bias(outs[i].w, outs[i].bias, n, outs[i].y);
        return;
    }
    for (int i = 0; i < n_outs; i++) {
        const rf_mm_out *o = &outs[i];
        if (!accumulate) {
            matmul_one(c, o->w, o->bias, xin, n, o->y);
            continue;
        }
        size_t len = (size_t)n * (size_t)o->w->n_out;
        if (len > c->acc_cap) {
            free(c->acc);
            c->acc = rf_xmalloc(len * sizeof(float));
            c->acc_cap = len;
        }
        matmul_one(c, o->w, o->bias, xin, n, c->acc);
        for (size_t j = 0; j < len; j++) o->y[j] += c->acc[j];
    }
}

static void op_rope_store_kv(rf_backend *be, const rf_step *step, const rf_rope *rope, const rf_attn_dims *d,
                             float *q, float *k, const float *v, void *k_cache, void *v_cache) {
    cpu_rope(q, step->n_tokens, d->n_head, d->head_dim, step->pos, rope);
    cpu_rope(k, step->n_tokens, d->n_kv_head, d->head_dim, step->pos, rope);
    int kv_dim = d->n_kv_head * d->head_dim;
    cpu_store_kv(k, v, step->n_tokens, kv_dim, step->slot, k_cache, v_cache, d->kv_type);
    if (impl_of(be)->mode == RF_CPU_GGML && d->kv_type == RF_TYPE_F32) /* llama.cpp keeps K/V in f16 */
        for (int t = 0; t < step->n_tokens; t++) {
            cpu_round_like_ggml(RF_TYPE_F16, (float *)k_cache + (int64_t)step->slot[t] * kv_dim, kv_dim);
            cpu_round_like_ggml(RF_TYPE_F16, (float *)v_cache + (int64_t)step->slot[t] * kv_dim, kv_dim);
        }
}

typedef struct {
    const rf_step *step;
    const rf_attn_dims *d;
    const float *q;
    const void *k, *v;
    float *out;
    rf_cpu_mode mode;
    rf_isa isa;
} attn_job;

/* First attention row (token t, head h: row t * n_head + h) whose work starts at or after x, where
 * rows are laid end to end and the row of token t weighs pos[t] + 1 positions. */
static int64_t attn_first_row_from(const rf_step *st, int n_head, int64_t x) {
    int64_t cum = 0;
    for (int t = 0; t < st->n_tokens; t++) {
        const int64_t w = (int64_t)st->pos[t] + 1, tw = w * n_head;
        if (cum + tw > x) {
            const int64_t h = x <= cum ? 0 : (x - cum + w - 1) / w;
            if (h < n_head) return (int64_t)t * n_head + h;
        }
        cum += tw;
    }
    return (int64_t)st->n_tokens * n_head;
}

/* Rows are split so that each thread attends over about the same number of positions (with a
 * causal prompt an equal split by rows gave the last thread most of the work): thread ith takes
 * the rows whose work starts in [work * ith / nth, work * (ith + 1) / nth). */
static void attn_worker(void *ctx, int ith, int nth) {
    attn_job *j = ctx;
    const rf_step *st = j->step;
    const int n_head = j->d->n_head;
    int64_t work = 0;
    for (int t = 0; t < st->n_tokens; t++) work += ((int64_t)st->pos[t] + 1) * n_head;
    const int64_t b = attn_first_row_from(st, n_head, work * ith / nth);
    const int64_t e = attn_first_row_from(st, n_head, work * (ith + 1) / nth);
    if (b >= e) return;
    if (j->mode == RF_CPU_FAST) cpu_attention_isa(j->isa, st, j->d, j->q, j->k, j->v, j->out, b, e);
    else (j->mode == RF_CPU_GGML ? cpu_attention_ggml : cpu_attention)(st, j->d, j->q, j->k, j->v, j->out, b, e);
}

static void op_attention(rf_backend *be, const rf_step *step, const rf_attn_dims *d, const float *q,
                         const void *k_cache, const void *v_cache, float *out) {
    attn_job j = {step, d, q, k_cache, v_cache, out, impl_of(be)->mode, impl_of(be)->isa};
    rf_threadpool_run(impl_of(be)->tp, attn_worker, &j);
}

static void op_rope_attention(rf_backend *be, const rf_step *step, const rf_rope *rope, const rf_attn_dims *d,
                              float *q, float *k, const float *v, void *k_cache, void *v_cache, float *out) {
    op_rope_store_kv(be, step, rope, d, q, k, v, k_cache, v_cache);
    op_attention(be, step, d, q, k_cache, v_cache, out);
}

typedef struct {
    const float *gate, *up;
    float *out;
    int64_t n;
    const rf_attn_kernels *k;
} swiglu_job;

static void swiglu_worker(void *ctx, int ith, int nth) {
    const swiglu_job *j = ctx;
    const int64_t b = j->n * ith / nth, e = j->n * (ith + 1) / nth;
    if (b < e) j->k->swiglu(j->gate + b, j->up + b, e - b, j->out + b);
}

/* The reference modes keep cpu_swiglu (libm expf); the fast mode uses the SIMD level's swiglu, on
 * every thread for prompt-sized inputs (below 64k elements one thread is faster than the hand-off).
 * Each element's value is the same however the range is split. */
static void op_swiglu(rf_backend *be, const float *gate, const float *up, int64_t n, float *out) {
    const rf_attn_kernels *k = NULL;
    if (impl_of(be)->mode == RF_CPU_FAST)
        for (int i = impl_of(be)->isa; i > RF_ISA_SCALAR && !k; i--) k = rf_attn_kernels_at((rf_isa)i);
    if (!k) {
        cpu_swiglu(gate, up, n, out);
        return;
    }
    swiglu_job j = {gate, up, out, n, k};
    if (n < 65536) swiglu_worker(&j, 0, 1);
    else rf_threadpool_run(impl_of(be)->tp, swiglu_worker, &j);
}

/* The CPU's matmul_swiglu is its definition: both products in one matmul call, then swiglu. */
static void op_matmul_swiglu(rf_backend *be, const rf_weight *gate, const rf_weight *up, const float *x, int n,
                             const rf_weight *norm, float eps, float *out, float *up_out, float *scratch) {
    const rf_mm_out gate_up[2] = {{gate, NULL, out}, {up, NULL, up_out}};
    op_matmul(be, 2, gate_up, x, n, norm, eps, false, scratch);
    op_swiglu(be, out, up_out, (int64_t)n * gate->n_out, out);
}

static void op_get_rows(rf_backend *be, const float *x, const int32_t *rows, int n_rows, int dim, float *out) {
    (void)be;
    cpu_get_rows(x, rows, n_rows, dim, out);
}

static void op_copy_block(rf_backend *be, void *cache, size_t block_bytes, int src, int dst) {
    (void)be;
    memcpy((char *)cache + (size_t)dst * block_bytes, (char *)cache + (size_t)src * block_bytes, block_bytes);
}

static void op_sample(rf_backend *be, const float *logits, int n_vocab, const rf_sample_params *p,
                      const int32_t *history, int n_history, float u, int32_t *token_out, float *logprob_out) {
    (void)be;
    *token_out = rf_sample_host(logits, n_vocab, p, history, n_history, u, logprob_out);
}

const char *rf_cpu_backend_describe(rf_backend *be);

static const rf_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .describe = rf_cpu_backend_describe,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload_weight = cpu_upload_weight,
    .free_weight = cpu_free_weight,
    .upload = cpu_upload,
    .download = cpu_download,
    .download_start = cpu_download_start,
    .download_wait = cpu_download_wait,
    .sync = cpu_sync,
    .mem_free = cpu_mem_free,
    .kv_type_default = RF_TYPE_F32, /* the reference modes' (exact); the fast one's: rf_cpu_backend_create */
    .embed = op_embed,
    .rmsnorm = op_rmsnorm,
    .matmul = op_matmul,
    .rope_store_kv = op_rope_store_kv,
    .attention = op_attention,
    .rope_attention = op_rope_attention,
    .swiglu = op_swiglu,
    .matmul_swiglu = op_matmul_swiglu,
    .get_rows = op_get_rows,
    .copy_block = op_copy_block,
    .sample = op_sample,
};

rf_backend *rf_cpu_backend_create(int n_threads, rf_cpu_mode mode) {
    if (n_threads <= 0) n_threads = rf_physical_cores();
    rf_backend *be = rf_xcalloc(1, sizeof *be);
    cpu_impl *c = rf_xcalloc(1, sizeof *c);
    c->tp = rf_threadpool_new(n_threads);
    c->isa = rf_isa_best();
    c->mode = mode;
    /* The fast mode keeps K/V in f16, as llama.cpp and the GPU backend do: half the bytes a long
     * context reads per step (1B Q4_0 at depth 4096, two threads: tg32 59 t/s against 46 with f32,
     * medians of three rounds; docs/PERF-CPU.md section 30), within the golden tolerances (test_model runs every mode and
     * cache type). The reference modes stay exact in f32. */
    c->ops = cpu_ops;
    c->ops.kv_type_default = mode == RF_CPU_FAST ? RF_TYPE_F16 : RF_TYPE_F32;
    be->ops = &c->ops;
    be->impl = c;
    return be;
}

const char *rf_cpu_backend_describe(rf_backend *be) {
    static _Thread_local char buf[64];
    cpu_impl *c = impl_of(be);
    static const char *names[] = {"", "reference", "reference, ggml rounding"};
    snprintf(buf, sizeof buf, "%s, %d threads", c->mode == RF_CPU_FAST ? rf_isa_name(c->isa) : names[c->mode],
             rf_threadpool_size(c->tp));
    return buf;
}
