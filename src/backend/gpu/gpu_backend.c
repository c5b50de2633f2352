/* gpu_backend.c: the GPU backend's host side (C): device memory, one stream, error recording,
 * graphs, and the ops of backend.h as launches of the kernels in kernels.h (and the matmul of
 * matmul_gpu.h). Compiled to nothing unless the build has a GPU toolchain.
 *
 * Errors. Ops never return errors: the first failure (a launch error, an unsupported type, a
 * matmul error) is recorded with the op's name and reported by the next sync()/download(); once
 * a failure is recorded every later sync/download fails with the same message (the CUDA context
 * may be unusable after a kernel fault).
 *
 * Memory. Everything is plain device memory (cudaMalloc / hipMalloc); weights are uploaded once
 * (synchronously) by upload_weight. Scratch for attention splits and sampling grows on demand
 * outside graph capture only (during capture the attention picks fewer splits instead).
 */
#if defined(RF_HAVE_CUDA) || defined(RF_HAVE_HIP)

#include "gpu_backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/util.h"
#include "gpu_port.h"
#include "kernels.h"
#include "profile.h"

#include "matmul_gpu.h"

#if RF_GPU_HIP
#define API_UPPER "HIP"
#else
#define API_UPPER "CUDA"
#endif

struct rf_graph {
    gpuGraph_t graph;
    gpuGraphExec_t exec;
};

typedef struct {
    int dev;
    gpuStream_t stream;
    char name[256];
    char err[1024];
    int cc_major, cc_minor;
    int n_sm; /* multiprocessors */
    rf_gpu_matmul_ctx *mm;
    void *attn_scratch;
    size_t attn_scratch_bytes;
    void *sample_scratch;
    size_t sample_scratch_bytes;
    int capturing;
    int attn_mode, attn_split, attn_gb;
    bool rope_fused; /* rope inside the decode attention kernel (RF_GPU_ROPE_FUSED=0: its own launch) */
    rf_gpu_profile *prof; /* NULL unless ROCMFORGE_PROFILE=1 */
    /* download_start / download_wait (lazily made): pinned bytes, the side stream that copies
     * them, the events before and after the copy, and the source while the copy may be pending */
    void *async_host;
    gpuStream_t async_stream;
    gpuEvent_t async_ready, async_done;
    size_t async_bytes;
    const char *async_src; /* NULL: no copy pending */
} gpu_impl;

static gpu_impl *G(rf_backend *be) { return be->impl; }

static void record(gpu_impl *g, const char *fmt, ...) RF_PRINTF(2, 3);
static void record(gpu_impl *g, const char *fmt, ...) {
    if (g->err[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
}

static void check_launch(gpu_impl *g, const char *op, int rc) {
    if (rc) record(g, "GPU kernel %s failed to launch: %s", op, gpuGetErrorString((gpuError_t)rc));
    if (g->prof && !g->capturing) rf_gpu_profile_mark(g->prof, op);
}

void rf_gpu_backend_check(rf_backend *be, const char *what, int rc) { check_launch(G(be), what, rc); }

/* Reports the recorded error (if any) and the stream's state. */
static int report(gpu_impl *g, const char *when) {
    rf_gpu_profile_flush(g->prof);
    if (!g->err[0]) {
        gpuError_t e = gpuStreamSynchronize(g->stream);
        if (e != gpuSuccess)
            record(g, "GPU kernel failure detected at %s: %s", when, gpuGetErrorString(e));
    }
    if (g->err[0]) {
        rf_set_error("%s", g->err);
        return -1;
    }
    return 0;
}

#ifdef RF_PHASE_STAMPS /* phase_stamps.cuh: each kernel file writes its ring */
void rf_phase_stamps_dump_matmul(void);
void rf_phase_stamps_dump_attention(void);
void rf_phase_stamps_dump_attention_mma(void);
#endif

static void gpu_destroy(rf_backend *be) {
#ifdef RF_PHASE_STAMPS
    rf_phase_stamps_dump_matmul();
    rf_phase_stamps_dump_attention();
    rf_phase_stamps_dump_attention_mma();
#endif
    gpu_impl *g = G(be);
    gpuStreamSynchronize(g->stream);
    rf_gpu_profile_free(g->prof);
    rf_gpu_matmul_free(g->mm);
    if (g->async_host) {
        gpuStreamSynchronize(g->async_stream);
        gpuFreeHost(g->async_host);
        gpuEventDestroy(g->async_ready);
        gpuEventDestroy(g->async_done);
        gpuStreamDestroy(g->async_stream);
    }
    if (g->attn_scratch) gpuFree(g->attn_scratch);
    if (g->sample_scratch) gpuFree(g->sample_scratch);
    gpuStreamDestroy(g->stream);
    free(g);
    free(be);
}

static const char *gpu_describe(rf_backend *be) { return G(be)->name; }

static void *dev_alloc(gpu_impl *g, size_t bytes) {
    void *p = NULL;
    gpuError_t e = gpuMalloc(&p, bytes ? bytes : 1);
    if (e != gpuSuccess) {
        gpuGetLastError(); /* clear the (non-sticky) allocation error */
        size_t fr = 0, tot = 0;
        gpuMemGetInfo(&fr, &tot);
        rf_set_error("out of GPU memory allocating %zu bytes (%.1f MiB) on %s: %.1f MiB free of %.1f MiB (%s)",
                     bytes, bytes / 1048576.0, g->name, fr / 1048576.0, tot / 1048576.0, gpuGetErrorString(e));
        return NULL;
    }
    return p;
}

static void *gpu_alloc(rf_backend *be, size_t bytes) { return dev_alloc(G(be), bytes); }

static void gpu_free(rf_backend *be, void *p) {
    if (!p) return;
    gpuStreamSynchronize(G(be)->stream);
    gpuFree(p);
}

static void *gpu_upload_weight(rf_backend *be, const void *host, size_t bytes) {
    gpu_impl *g = G(be);
    void *p = dev_alloc(g, bytes + RF_GPU_WEIGHT_PAD); /* padding: see matmul_gpu.h */
    if (!p) return NULL;
    static const unsigned char zeros[RF_GPU_WEIGHT_PAD];
    gpuError_t e = gpuMemcpy(p, host, bytes, gpuMemcpyHostToDevice);
    if (e == gpuSuccess) e = gpuMemcpy((char *)p + bytes, zeros, RF_GPU_WEIGHT_PAD, gpuMemcpyHostToDevice);
    if (e != gpuSuccess) {
        rf_set_error("copying %zu bytes of weights to the GPU: %s", bytes, gpuGetErrorString(e));
        gpuFree(p);
        return NULL;
    }
    return p;
}

static void gpu_free_weight(rf_backend *be, void *p) { gpu_free(be, p); }

/* Rearranges a matmul-only weight for the decode matvec where its type has a faster device
 * layout (matmul_gpu.h, rf_gpu_mm_repack); w->layout is then the type the matmul calls pass. */
static int gpu_prepare_matmul_weight(rf_backend *be, rf_weight *w) {
    gpu_impl *g = G(be);
    const uint32_t want = rf_gpu_mm_repack_type(g->mm, w->type, w->n_in);
    if (want == w->type) return 0;
    const int64_t rb_old = rf_gpu_mm_row_bytes(w->type, w->n_in), rb_new = rf_gpu_mm_row_bytes(want, w->n_in);
    void *dst = w->data;
    if (rb_new != rb_old) { /* a longer row (a partial group at its end): a new buffer, padded as upload_weight's */
        const size_t bytes = (size_t)(rb_new * w->n_out);
        dst = dev_alloc(g, bytes + RF_GPU_WEIGHT_PAD);
        if (!dst) return -1;
        const gpuError_t e = gpuMemsetAsync((char *)dst + bytes, 0, RF_GPU_WEIGHT_PAD, g->stream);
        if (e != gpuSuccess) {
            rf_set_error("clearing the weight padding: %s", gpuGetErrorString(e));
            gpuFree(dst);
            return -1;
        }
    }
    uint32_t t = w->type;
    if (rf_gpu_mm_repack(g->mm, w->type, w->data, dst, w->n_out, w->n_in, &t) || rf_gpu_mm_sync(g->mm)) {
        if (dst != w->data) gpuFree(dst);
        return -1;
    }
    if (dst != w->data) {
        gpuFree(w->data);
        w->data = dst;
    }
    w->layout = t;
    return 0;
}

/* Makes the stream wait for download_start's copy before work that writes [dst, dst + bytes)
 * when that range overlaps the copy's source. */
static void async_guard(gpu_impl *g, const void *dst, size_t bytes) {
    const char *d = dst;
    if (!g->async_src || !d || d + bytes <= g->async_src || g->async_src + g->async_bytes <= d) return;
    gpuError_t e = gpuStreamWaitEvent(g->stream, g->async_done, 0);
    if (e != gpuSuccess) record(g, "waiting for a download: %s", gpuGetErrorString(e));
    g->async_src = NULL;
}

static void gpu_upload(rf_backend *be, void *dst, const void *src, size_t bytes) {
    gpu_impl *g = G(be);
    if (!bytes) return;
    async_guard(g, dst, bytes);
    /* from pageable memory: returns once the source has been staged, so the caller may reuse it */
    gpuError_t e = gpuMemcpyAsync(dst, src, bytes, gpuMemcpyHostToDevice, g->stream);
    if (e != gpuSuccess) record(g, "upload of %zu bytes failed: %s", bytes, gpuGetErrorString(e));
    if (g->prof && !g->capturing) rf_gpu_profile_mark(g->prof, "upload (host to device)");
}

static int gpu_download(rf_backend *be, void *dst, const void *src, size_t bytes) {
    gpu_impl *g = G(be);
    be->n_downloads++;
    if (!g->err[0] && bytes) {
        gpuError_t e = gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDeviceToHost, g->stream);
        if (e != gpuSuccess) record(g, "download of %zu bytes failed: %s", bytes, gpuGetErrorString(e));
    }
    return report(g, "download");
}

/* The copy goes to pinned memory on a side stream that waits for the work before it, and
 * download_wait waits for the event after it (a stream sync would also wait for the next decode
 * step). On the side stream the copy is off the main stream's path: in a pipelined decode the
 * next step's upload and graph follow the sampler's kernels directly instead of the copy (the
 * trace put 5-7 us of idle between a copy and the next operation on one stream). Until then,
 * work that writes the source waits for the copy (async_guard; the sampler's token slot, the
 * step region's uploads). test_model checks that contract; on an H200 it also passed with the
 * guard removed (the copy, enqueued first, ran first), so the guard orders what the API
 * promises rather than a failure that was seen. */
static int gpu_download_start(rf_backend *be, const void *src, size_t bytes) {
    gpu_impl *g = G(be);
    if (bytes > RF_DOWNLOAD_ASYNC_MAX) {
        record(g, "download_start of %zu bytes: at most %d", bytes, RF_DOWNLOAD_ASYNC_MAX);
        return report(g, "download_start");
    }
    if (!g->async_host && !g->err[0]) {
        int made = 0; /* of the pinned bytes, the stream and the two events, in that order */
        gpuError_t e = gpuMallocHost(&g->async_host, RF_DOWNLOAD_ASYNC_MAX);
        if (e == gpuSuccess) made++, e = gpuStreamCreateWithFlags(&g->async_stream, gpuStreamNonBlocking);
        if (e == gpuSuccess) made++, e = gpuEventCreateWithFlags(&g->async_ready, gpuEventDisableTiming);
        if (e == gpuSuccess) made++, e = gpuEventCreateWithFlags(&g->async_done, gpuEventDisableTiming);
        if (e != gpuSuccess) {
            record(g, "pinned memory, stream and events for downloads: %s", gpuGetErrorString(e));
            if (made >= 3) gpuEventDestroy(g->async_ready);
            if (made >= 2) gpuStreamDestroy(g->async_stream);
            if (made >= 1) gpuFreeHost(g->async_host);
            g->async_host = NULL;
        }
    }
    if (!g->err[0]) {
        gpuError_t e = gpuEventRecord(g->async_ready, g->stream);
        if (e == gpuSuccess) e = gpuStreamWaitEvent(g->async_stream, g->async_ready, 0);
        if (e == gpuSuccess) e = gpuMemcpyAsync(g->async_host, src, bytes, gpuMemcpyDeviceToHost, g->async_stream);
        if (e == gpuSuccess) e = gpuEventRecord(g->async_done, g->async_stream);
        if (e != gpuSuccess) record(g, "download of %zu bytes failed: %s", bytes, gpuGetErrorString(e));
        g->async_bytes = bytes;
        g->async_src = src;
    }
    if (g->err[0]) {
        rf_set_error("%s", g->err);
        return -1;
    }
    return 0;
}

static int gpu_download_wait(rf_backend *be, void *dst) {
    gpu_impl *g = G(be);
    be->n_downloads++;
    if (!g->err[0]) {
        gpuError_t e = gpuEventSynchronize(g->async_done);
        if (e != gpuSuccess) record(g, "GPU kernel failure detected at download_wait: %s", gpuGetErrorString(e));
        g->async_src = NULL;
    }
    if (g->err[0]) {
        rf_set_error("%s", g->err);
        return -1;
    }
    memcpy(dst, g->async_host, g->async_bytes);
    return 0;
}

static int gpu_sync(rf_backend *be) { return report(G(be), "sync"); }

static size_t gpu_mem_free(rf_backend *be) {
    (void)be;
    size_t fr = 0, tot = 0;
    if (gpuMemGetInfo(&fr, &tot) != gpuSuccess) {
        gpuGetLastError();
        return 0;
    }
    return fr;
}

/* Grows a scratch buffer; fails (returns -1) during capture or when out of memory. */
static int ensure_scratch(gpu_impl *g, void **buf, size_t *have, size_t need) {
    if (need <= *have) return 0;
    if (g->capturing) return -1;
    gpuStreamSynchronize(g->stream);
    if (*buf) gpuFree(*buf);
    *buf = NULL;
    *have = 0;
    size_t want = need + need / 2;
    void *p = NULL;
    if (gpuMalloc(&p, want) != gpuSuccess || gpuMemsetAsync(p, 0, want, g->stream) != gpuSuccess) {
        if (p) gpuFree(p);
        gpuGetLastError();
        return -1;
    }
    *buf = p; /* zero-filled: the decode attention's counters expect it (kernels.h) */
    *have = want;
    return 0;
}

/* ---- ops --------------------------------------------------------------------------------- */

static void op_embed(rf_backend *be, const rf_weight *table, const int32_t *tokens, int n, float *out) {
    gpu_impl *g = G(be);
    uint64_t rb = 0;
    const rf_type_info *ti = rf_type_get(table->type);
    if (!ti || !ti->supported || !rf_row_bytes(table->type, (uint64_t)table->n_in, &rb)) {
        record(g, "embed: weight %s of type %s is not supported on the GPU", table->name ? table->name : "?",
               rf_type_name(table->type));
        return;
    }
    check_launch(g, "embed", rf_gpu_embed(g->stream, table->type, table->data, (size_t)rb, table->n_in, tokens, n, out));
}

static void op_rmsnorm(rf_backend *be, float *x, const float *residual, const rf_weight *w, int n_rows, int dim,
                       float eps, float *out) {
    gpu_impl *g = G(be);
    if (w->type != RF_TYPE_F32) {
        record(g, "rmsnorm: weight %s must be f32, not %s", w->name ? w->name : "?", rf_type_name(w->type));
        return;
    }
    check_launch(g, "rmsnorm", rf_gpu_rmsnorm(g->stream, x, residual, w->data, n_rows, dim, eps, out));
}

static void op_matmul(rf_backend *be, int n_outs, const rf_mm_out *outs, const float *x, int n, const rf_weight *norm,
                      float eps, bool accumulate, float *scratch) {
    gpu_impl *g = G(be);
    if (g->err[0]) return;
    enum { MAX_OUTS = 8 };
    rf_gpu_mm_out mo[MAX_OUTS];
    if (n_outs < 1 || n_outs > MAX_OUTS) {
        record(g, "matmul: %d outputs (1..%d supported)", n_outs, MAX_OUTS);
        return;
    }
    for (int i = 0; i < n_outs; i++) {
        const rf_weight *w = outs[i].w, *bias = outs[i].bias;
        if (bias && bias->type != RF_TYPE_F32) {
            record(g, "matmul: bias %s must be f32, not %s", bias->name ? bias->name : "?", rf_type_name(bias->type));
            return;
        }
        mo[i] = (rf_gpu_mm_out){w->layout ? w->layout : w->type, w->data, w->n_out, bias ? bias->data : NULL, outs[i].y};
    }
    const rf_weight *w0 = outs[0].w;
    if (rf_gpu_matmul_ex(g->mm, n_outs, mo, w0->n_in, x, n, norm ? norm->data : NULL, eps, accumulate, scratch))
        record(g, "matmul %s (%s, %lld x %lld, n=%d, %d outputs): %s", w0->name ? w0->name : "?",
               rf_type_name(w0->type), (long long)w0->n_out, (long long)w0->n_in, n, n_outs, rf_last_error());
    if (g->prof && !g->capturing) {
        /* "matmul ffn_gate+1 q4_K n=1": the first weight's role without the layer number */
        const char *role = w0->name ? w0->name : "?";
        if (!strncmp(role, "blk.", 4) && strchr(role + 4, '.')) role = strchr(role + 4, '.') + 1;
        char nm[64];
        snprintf(nm, sizeof nm, "matmul %.*s%s %s n%s", (int)strcspn(role, "."), role, n_outs > 1 ? "+" : "",
                 rf_type_name(w0->type), n == 1 ? "=1" : n <= 16 ? "<=16" : ">16");
        rf_gpu_profile_mark(g->prof, nm);
    }
}

static void op_rope_store_kv(rf_backend *be, const rf_step *st, const rf_rope *rope, const rf_attn_dims *d, float *q,
                             float *k, const float *v, void *k_cache, void *v_cache) {
    gpu_impl *g = G(be);
    check_launch(g, "rope_store_kv",
                 rf_gpu_rope_store_kv(g->stream, st->n_tokens, st->pos, st->slot, rope, d->n_head, d->n_kv_head,
                                      d->head_dim, q, k, v, k_cache, v_cache, d->kv_type));
}

/* Attention; with rope != NULL, rope_store_kv of (q, k_new, v_new) first: fused into the decode
 * kernel where it can take it (rf_gpu_attn_decode_rope_ok), else as its own launch. */
static void attend(rf_backend *be, const rf_step *st, const rf_attn_dims *d, const rf_rope *rope, float *q,
                   float *k_new, const float *v_new, void *k_cache, void *v_cache, float *out) {
    gpu_impl *g = G(be);
    if (d->head_dim > RF_GPU_ATTN_MAX_HEAD_DIM || d->n_kv_head <= 0 || d->n_head % d->n_kv_head) {
        record(g, "attention: head_dim %d / heads %d / kv heads %d not supported on the GPU (head_dim <= %d)",
               d->head_dim, d->n_head, d->n_kv_head, RF_GPU_ATTN_MAX_HEAD_DIM);
        return;
    }
    rf_gpu_attn_args a = {st->n_tokens, d->n_head,      d->n_kv_head,   d->head_dim, d->scale,
                          st->block_size, st->max_blocks, st->pos,        st->seq_row, st->block_table,
                          q,              k_cache,        v_cache,        d->kv_type,  out,
                          NULL,           NULL,           {0},            NULL,        NULL,
                          NULL,           0,              0,           0};
    int mode = g->attn_mode;
    if (mode == 0) mode = st->n_tokens <= 8 ? 1 : 2;
    if (mode == 1) {
        /* Splits: enough blocks to fill the GPU, each split at least 64 positions of the longest
         * context (max_pos is only a hint: the kernel spreads the positions it reads on the device
         * over the splits and is correct for any count; a graph is captured per 256-position
         * bucket, so the count fits the context it replays at). */
        int n_split = g->attn_split > 0 ? g->attn_split
                                        : rf_gpu_attn_decode_splits(st->n_tokens, d->n_head, d->n_kv_head,
                                                                    d->head_dim, d->kv_type, st->max_pos + 1, g->n_sm);
        a.gb = g->attn_gb > 0 ? g->attn_gb : rf_gpu_attn_decode_gb(d->n_head, d->n_kv_head, st->max_pos + 1);
        a.tc = rf_gpu_attn_decode_tc(d->n_head, d->n_kv_head, d->head_dim, d->kv_type, st->max_pos + 1);
        a.n_pos_hint = st->max_pos + 1;
        /* The scratch is sized on first use for the most splits any decode batch (1..8 tokens)
         * can get at any context (the longest, the longest with one head per block and the longest
         * before the tensor-core kernel): a captured graph keeps the scratch pointer, so the buffer
         * must not be reallocated when a later step at a longer context asks for more splits. */
        size_t need = rf_gpu_attn_decode_scratch(st->n_tokens, d->n_head, d->head_dim, n_split);
        static const int n_pos_most[] = {1 << 30, RF_GPU_ATTN_GB1_MAX_POS - 1, RF_GPU_ATTN_TC_MIN_POS - 1};
        for (int nt = 1; nt <= 8 && g->attn_split <= 0; nt++)
            for (size_t pi = 0; pi < sizeof n_pos_most / sizeof n_pos_most[0]; pi++) {
                size_t most = rf_gpu_attn_decode_scratch(nt, d->n_head, d->head_dim,
                                                         rf_gpu_attn_decode_splits(nt, d->n_head, d->n_kv_head,
                                                                                   d->head_dim, d->kv_type,
                                                                                   n_pos_most[pi], g->n_sm));
                if (most > need) need = most;
            }
        if (ensure_scratch(g, &g->attn_scratch, &g->attn_scratch_bytes, need))
            while (n_split > 1 && ensure_scratch(g, &g->attn_scratch, &g->attn_scratch_bytes,
                                                 rf_gpu_attn_decode_scratch(st->n_tokens, d->n_head, d->head_dim,
                                                                            n_split)))
                n_split /= 2;
        if (!ensure_scratch(g, &g->attn_scratch, &g->attn_scratch_bytes,
                            rf_gpu_attn_decode_scratch(st->n_tokens, d->n_head, d->head_dim, n_split))) {
            /* The tensor-core kernel's rope-fused instance where it can take the step (kernels.h),
             * at every context: at long ones it replaces the plain tensor-core kernel and rope's own
             * launch (H200 tg128, 7B Q4_K_M: +3.7% at 1k positions, +4.0% at 8k; docs/PERF.md,
             * fiftieth session), at short ones the f32 rope-fused kernel. At long contexts the
             * second test below also offers it to GQA groups of up to 4 heads with an f16 cache
             * (1B F16 file, H200: +1-2% at 8k and 32k, ~+2.5% at 2k; fifty-first). Where it
             * cannot, a long context keeps the plain tensor-core kernel and rope's launch. */
            if (rope && g->rope_fused &&
                rf_gpu_attn_decode_tc_rope(d->n_head, d->n_kv_head, d->head_dim, d->kv_type)) {
                rf_gpu_attn_args on_tc = a;
                on_tc.tc = 1;
                a.tc = a.tc || rf_gpu_attn_decode_rope_ok(&on_tc, rope, k_new, v_new, n_split, g->n_sm);
            }
            if (rope && g->rope_fused && rf_gpu_attn_decode_rope_ok(&a, rope, k_new, v_new, n_split, g->n_sm)) {
                a.rope = *rope;
                a.k_new = k_new;
                a.v_new = v_new;
                a.slot = st->slot;
            } else if (rope) {
                op_rope_store_kv(be, st, rope, d, q, k_new, v_new, k_cache, v_cache);
            }
            /* one token: the output also quantized for the output projection's matvec to copy */
            const int64_t n_out = (int64_t)d->n_head * d->head_dim;
            const int xq = st->n_tokens == 1 && d->head_dim % 32 == 0 &&
                           rf_gpu_mm_xq_buffers(g->mm, n_out, &a.xq, &a.xd);
            check_launch(g, "attention (decode)", rf_gpu_attention_decode(g->stream, &a, n_split, g->attn_scratch));
            if (xq) rf_gpu_mm_xq_mark(g->mm, out, n_out);
            return;
        }
    }
    if (rope) op_rope_store_kv(be, st, rope, d, q, k_new, v_new, k_cache, v_cache);
    check_launch(g, "attention (prefill)", rf_gpu_attention_prefill(g->stream, &a));
}

static void op_attention(rf_backend *be, const rf_step *st, const rf_attn_dims *d, const float *q, const void *k_cache,
                         const void *v_cache, float *out) {
    attend(be, st, d, NULL, (float *)q, NULL, NULL, (void *)k_cache, (void *)v_cache, out);
}

static void op_rope_attention(rf_backend *be, const rf_step *st, const rf_rope *rope, const rf_attn_dims *d, float *q,
                              float *k, const float *v, void *k_cache, void *v_cache, float *out) {
    attend(be, st, d, rope, q, k, v, k_cache, v_cache, out);
}

static void op_swiglu(rf_backend *be, const float *gate, const float *up, int64_t n, float *out) {
    gpu_impl *g = G(be);
    /* A decode step's swiglu also leaves its output quantized to int8 for the down projection
     * that reads it next (matmul_gpu.h, rf_gpu_mm_swiglu). */
    const int rc = rf_gpu_mm_swiglu(g->mm, gate, up, n, out);
    if (rc < 0)
        record(g, "swiglu: %s", rf_last_error());
    else if (rc == 0)
        check_launch(g, "swiglu", rf_gpu_swiglu(g->stream, gate, up, n, out));
    else if (g->prof && !g->capturing)
        rf_gpu_profile_mark(g->prof, "swiglu");
}

/* A decode step's gate and up in one matvec launch that also writes the swiglu where the weights
 * allow it (rf_gpu_mm_gate_up_swiglu: F16, BF16); otherwise, and for prompts, matmul and then
 * swiglu. */
static void op_matmul_swiglu(rf_backend *be, const rf_weight *gate, const rf_weight *up, const float *x, int n,
                             const rf_weight *norm, float eps, float *out, float *up_out, float *scratch) {
    gpu_impl *g = G(be);
    if (g->err[0]) return;
    if (n == 1 && up->n_in == gate->n_in) { /* types and n_out: rf_gpu_mm_gate_up_swiglu checks them */
        const rf_gpu_mm_out gate_up[2] = {{gate->layout ? gate->layout : gate->type, gate->data, gate->n_out, NULL, out},
                                          {up->layout ? up->layout : up->type, up->data, up->n_out, NULL, up_out}};
        const int rc = rf_gpu_mm_gate_up_swiglu(g->mm, gate_up, gate->n_in, x, norm ? norm->data : NULL, eps);
        if (rc < 0)
            record(g, "matmul_swiglu %s (%s, %lld x %lld): %s", gate->name ? gate->name : "?", rf_type_name(gate->type),
                   (long long)gate->n_out, (long long)gate->n_in, rf_last_error());
        if (rc != 0) {
            if (rc > 0 && g->prof && !g->capturing) {
                char nm[64];
                snprintf(nm, sizeof nm, "matmul_swiglu %s n=1", rf_type_name(gate->type));
                rf_gpu_profile_mark(g->prof, nm);
            }
            return;
        }
    }
    const rf_mm_out gate_up[2] = {{gate, NULL, out}, {up, NULL, up_out}};
    op_matmul(be, 2, gate_up, x, n, norm, eps, false, scratch);
    op_swiglu(be, out, up_out, (int64_t)n * gate->n_out, out);
}

static void op_get_rows(rf_backend *be, const float *x, const int32_t *rows, int n_rows, int dim, float *out) {
    gpu_impl *g = G(be);
    check_launch(g, "get_rows", rf_gpu_get_rows(g->stream, x, rows, n_rows, dim, out));
}

static void op_copy_block(rf_backend *be, void *cache, size_t block_bytes, int src, int dst) {
    gpu_impl *g = G(be);
    if (!block_bytes || src == dst) return;
    check_launch(g, "copy_block",
                 (int)gpuMemcpyAsync((char *)cache + (size_t)dst * block_bytes, (char *)cache + (size_t)src * block_bytes,
                                     block_bytes, gpuMemcpyDeviceToDevice, g->stream));
}

static void op_sample(rf_backend *be, const float *logits, int n_vocab, const rf_sample_params *p,
                      const int32_t *history, int n_history, float u, int32_t *token_out, float *logprob_out) {
    gpu_impl *g = G(be);
    if (ensure_scratch(g, &g->sample_scratch, &g->sample_scratch_bytes, rf_gpu_sample_scratch(n_vocab))) {
        record(g, "sample: cannot get %zu bytes of scratch%s", rf_gpu_sample_scratch(n_vocab),
               g->capturing ? " during graph capture (sample once before capturing)" : "");
        return;
    }
    async_guard(g, token_out, sizeof *token_out);
    if (logprob_out) async_guard(g, logprob_out, sizeof *logprob_out);
    check_launch(g, "sample",
                 rf_gpu_sample(g->stream, logits, n_vocab, p, history, n_history, u, token_out, logprob_out,
                               g->sample_scratch));
}

/* ---- graphs -------------------------------------------------------------------------------- */

static int gpu_graph_begin(rf_backend *be) {
    gpu_impl *g = G(be);
    if (report(g, "graph_begin")) return -1;
    gpuError_t e = gpuStreamBeginCapture(g->stream, gpuStreamCaptureModeThreadLocal);
    if (e != gpuSuccess) {
        rf_set_error("starting graph capture: %s", gpuGetErrorString(e));
        return -1;
    }
    g->capturing = 1;
    return 0;
}

static int gpu_graph_end(rf_backend *be, rf_graph **out) {
    gpu_impl *g = G(be);
    *out = NULL;
    gpuGraph_t graph = NULL;
    gpuError_t e = gpuStreamEndCapture(g->stream, &graph);
    g->capturing = 0;
    if (g->err[0]) {
        if (graph) gpuGraphDestroy(graph);
        rf_set_error("%s (during graph capture)", g->err);
        return -1;
    }
    if (e != gpuSuccess) {
        rf_set_error("ending graph capture: %s", gpuGetErrorString(e));
        return -1;
    }
    rf_graph *gr = rf_xcalloc(1, sizeof *gr);
    gr->graph = graph;
    e = gpuGraphInstantiate(&gr->exec, graph);
    if (e != gpuSuccess) {
        rf_set_error("instantiating the captured graph: %s", gpuGetErrorString(e));
        gpuGraphDestroy(graph);
        free(gr);
        return -1;
    }
    *out = gr;
    return 0;
}

static int gpu_graph_launch(rf_backend *be, rf_graph *gr) {
    gpu_impl *g = G(be);
    gpuError_t e = gpuGraphLaunch(gr->exec, g->stream);
    if (e != gpuSuccess) {
        record(g, "graph launch failed: %s", gpuGetErrorString(e));
        rf_set_error("%s", g->err);
        return -1;
    }
    return 0;
}

static void gpu_graph_free(rf_backend *be, rf_graph *gr) {
    if (!gr) return;
    gpuStreamSynchronize(G(be)->stream);
    gpuGraphExecDestroy(gr->exec);
    gpuGraphDestroy(gr->graph);
    free(gr);
}

static const rf_backend_ops gpu_ops = {
    .name = RF_GPU_API_NAME,
    .destroy = gpu_destroy,
    .describe = gpu_describe,
    .alloc = gpu_alloc,
    .free = gpu_free,
    .upload_weight = gpu_upload_weight,
    .free_weight = gpu_free_weight,
    .prepare_matmul_weight = gpu_prepare_matmul_weight,
    .upload = gpu_upload,
    .download = gpu_download,
    .download_start = gpu_download_start,
    .download_wait = gpu_download_wait,
    .sync = gpu_sync,
    .mem_free = gpu_mem_free,
    .kv_type_default = RF_TYPE_F16, /* half the bytes per decode step, as llama.cpp */
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
    .graph_begin = gpu_graph_begin,
    .graph_end = gpu_graph_end,
    .graph_launch = gpu_graph_launch,
    .graph_free = gpu_graph_free,
};

rf_backend *rf_gpu_backend_create(int dev) {
    int n = 0;
    gpuError_t e = gpuGetDeviceCount(&n);
    if (e != gpuSuccess || n == 0) {
        rf_set_error("no " API_UPPER " device found%s%s", e != gpuSuccess ? ": " : "",
                     e != gpuSuccess ? gpuGetErrorString(e) : "");
        gpuGetLastError();
        return NULL;
    }
    if (dev < 0 || dev >= n) {
        rf_set_error("GPU %d requested but %d " API_UPPER " device%s found", dev, n, n == 1 ? " was" : "s were");
        return NULL;
    }
    if ((e = gpuSetDevice(dev)) != gpuSuccess) {
        rf_set_error("selecting GPU %d: %s", dev, gpuGetErrorString(e));
        return NULL;
    }
    gpuDeviceProp prop;
    if ((e = gpuGetDeviceProperties(&prop, dev)) != gpuSuccess) {
        rf_set_error("querying GPU %d: %s", dev, gpuGetErrorString(e));
        return NULL;
    }
    gpu_impl *g = rf_xcalloc(1, sizeof *g);
    g->dev = dev;
    g->cc_major = prop.major;
    g->cc_minor = prop.minor;
    g->n_sm = prop.multiProcessorCount;
    g->attn_split = getenv("RF_GPU_ATTN_SPLIT") ? atoi(getenv("RF_GPU_ATTN_SPLIT")) : 0; /* A/B of split counts */
    g->rope_fused = !(getenv("RF_GPU_ROPE_FUSED") && atoi(getenv("RF_GPU_ROPE_FUSED")) == 0);
    snprintf(g->name, sizeof g->name, "%s", prop.name);
    if ((e = gpuStreamCreateWithFlags(&g->stream, gpuStreamNonBlocking)) != gpuSuccess) {
        rf_set_error("creating a stream on %s: %s", g->name, gpuGetErrorString(e));
        free(g);
        return NULL;
    }
    /* A probe launch: a device whose architecture this build lacks fails here, clearly. */
    int *flag = NULL;
    if ((e = gpuMalloc((void **)&flag, sizeof(int))) != gpuSuccess) {
        rf_set_error("allocating on %s: %s", g->name, gpuGetErrorString(e));
        gpuStreamDestroy(g->stream);
        free(g);
        return NULL;
    }
    int rc = rf_gpu_probe(g->stream, flag);
    if (!rc) rc = (int)gpuStreamSynchronize(g->stream);
    gpuFree(flag);
    if (rc) {
#if RF_GPU_HIP
        rf_set_error("GPU %s (%s) cannot run this build's kernels (built for %s): %s", g->name, prop.gcnArchName,
                     RF_HIP_ARCHS, gpuGetErrorString((gpuError_t)rc));
#else
        rf_set_error("GPU %s is sm_%d%d, an architecture this build has no kernels for (built for %s): %s", g->name,
                     prop.major, prop.minor, RF_CUDA_ARCHS, gpuGetErrorString((gpuError_t)rc));
#endif
        gpuGetLastError();
        gpuStreamDestroy(g->stream);
        free(g);
        return NULL;
    }
    g->mm = rf_gpu_matmul_init(g->stream);
    if (!g->mm) {
        rf_prefix_error("GPU matmul on %s", g->name);
        gpuStreamDestroy(g->stream);
        free(g);
        return NULL;
    }
    g->prof = rf_gpu_profile_new(g->stream);
    rf_backend *be = rf_xcalloc(1, sizeof *be);
    be->ops = &gpu_ops;
    be->impl = g;
    return be;
}

const char *rf_gpu_backends_built(void) {
#if RF_GPU_HIP
    return "cpu hip(" RF_HIP_ARCHS ")";
#else
    return "cpu cuda(" RF_CUDA_ARCHS ")";
#endif
}

void *rf_gpu_backend_stream(rf_backend *be) { return G(be)->stream; }

void rf_gpu_backend_set_attention(rf_backend *be, int mode, int n_split, int gb) {
    G(be)->attn_mode = mode;
    G(be)->attn_split = n_split;
    G(be)->attn_gb = gb;
}

#else
typedef int rf_gpu_backend_unused; /* ISO C forbids an empty translation unit */
#endif
