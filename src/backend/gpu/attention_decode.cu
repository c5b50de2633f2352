/* attention_decode.cu: decode attention over the paged KV cache, a few query tokens against
 * long contexts (twin of cpu_attention): the split-K (flash-decoding) kernels in f32, rope
 * optionally fused in, the splits' combine, and the launchers' choices between these and the
 * tensor-core kernel (attention_decode_mma.cu). The common contract (layouts, precision, NaN
 * behaviour) is attention_kv.cuh's. */
#include <stdlib.h>

#include "attention_decode.cuh"
#include "rope_device.cuh"
#include "phase_stamps.cuh"

/* q . k over a row held by LP lanes, eight dims each: the lane's part, then xor-shuffles over
 * offsets LP / 2 .. 1 (every lane of the warp calls it; each ends with the whole dot). */
template <int LP>
static __device__ __forceinline__ float dec_dot8(const float *q, const float *k) {
    float d = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) d += q[e] * k[e];
#pragma unroll
    for (int o = LP / 2; o > 0; o >>= 1) d += RF_SHFL_XOR(d, o);
    return d;
}

/* Rotates the eight elements x = dims d0 .. d0 + 7 of a head held by this lane (rope_device.cuh;
 * cs / sn: the (cos, sin) of every pair at this position). NORMAL pairs (2i, 2i + 1) lie within a
 * lane; NEOX pairs (i, i + n_rot / 2) lie n_rot / 16 lanes apart (needs n_rot % 16 == 0, so a
 * lane's eight dims sit in one half), fetched by shuffle: every lane of the warp must call this. */
static __device__ __forceinline__ void dec_rope8(float *x, int d0, int lane, int mode, int n_rot, const float *cs,
                                                 const float *sn) {
    const int half = n_rot / 2;
    if (mode == RF_ROPE_NEOX) {
        const bool lo = d0 < half, rot = d0 < n_rot;
        const int src = !rot ? lane : lo ? lane + half / 8 : lane - half / 8;
        float xp[8];
#pragma unroll
        for (int e = 0; e < 8; e++) xp[e] = ATT_SHFL_IDX(x[e], src);
        if (rot)
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const int i = (lo ? d0 : d0 - half) + e;
                x[e] = lo ? rope_lo(x[e], xp[e], cs[i], sn[i]) : rope_hi(xp[e], x[e], cs[i], sn[i]);
            }
    } else {
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
            const int d = d0 + e;
            if (d < n_rot) {
                const float x0 = x[e], x1 = x[e + 1];
                x[e] = rope_lo(x0, x1, cs[d / 2], sn[d / 2]);
                x[e + 1] = rope_hi(x0, x1, cs[d / 2], sn[d / 2]);
            }
        }
    }
}

/* ---- decode: split-K (flash-decoding) over GQA groups ---------------------------------------
 * attn_dec_kernel<T, GB, VEC, LP, RK>: grid (n_tokens * n_kv_head * n_chunks, n_split), DEC_THREADS
 * threads (a multiple of every warp size). Block (t, g, c, s) takes the query heads h0 = g * G +
 * c * GB .. h0 + nh - 1 (G = n_head / n_kv_head, n_chunks = ceil(G / GB), nh = min(GB, G - c *
 * GB)) of token t: every K/V row it loads serves all nh heads, so a GQA group's K/V is read once,
 * not G times. Split s takes the contiguous positions [s * per, min((s + 1) * per, n_pos)), per =
 * ceil(n_pos / n_split), n_pos = pos[t] + 1 read from device memory: positions are always spread
 * over all the splits, whatever context a graph was captured at.
 *
 * Work layout. A row of head_dim elements is read by LP lanes (a template constant, so the
 * reductions below unroll and interleave: 8, 16 or 32 with VEC, the smallest with LP * 8 >=
 * head_dim; 32 without), 8 consecutive elements each: one 16-byte load per lane for f16 (VEC; two
 * for f32), element-wise loads otherwise. A warp is warpSize / LP sub-groups, each one position
 * at a time.
 * Warp w takes the chunks of warpSize consecutive positions c0 = pb + w * warpSize, + NW *
 * warpSize, ...; lane i looks up the slot of position c0 + i once (one block-table read per
 * position) and the sub-groups fetch them by shuffle. Sub-group sg handles chunk positions
 * (i + u) * PW + sg, U at a time with all their K and V loads issued before any is used (V does
 * not depend on the scores), then: dots reduced over the LP lanes by xor-shuffles (offsets LP/2
 * .. 1: valid for any warp size >= LP), one online-softmax update (running max m, sum l and
 * acc[8 dims] per head) for the U positions. No barrier in the loop: every sub-group keeps its
 * own state; at the end the sub-groups of a warp merge by xor-shuffles (offsets LP .. warpSize /
 * 2), the warps through shared memory, and the block writes its partial (m, l, acc[head_dim]) per
 * head to scratch; a split with no positions writes m = -inf, l = 0, acc = 0.
 * RK (rope fused, a.k_new != NULL, one token, VEC; kernels.h): the (cos, sin) table of pos[t] is
 * computed into shared memory before the grid dependency wait, q is rotated as it is loaded, and
 * the split holding position pos[t] reads only the positions before it from the cache: before its
 * loop, its last warp (the fewest positions) rotates k_new, rounds the K and V rows to the cache's
 * type, stores them at slot[t] (head chunk 0 of the group only) and adds that position to
 * sub-group 0's softmax state from registers, so no block waits for that store.
 * Before the grid dependency wait each lane prefetches into L2 the K and V rows (its head group's
 * slice) of the position it looks up for its warp's first chunk (dec_prefetch_l2; CUDA only; the RK
 * instance only). K/V rows are loaded plainly in the RK instance and as streaming loads in the
 * others (kv_load8<S>), which long contexts take.
 * Correct for any n_split >= 1. Dynamic shared memory: dec_smem(hd, GB). */
/* Positions in flight per sub-group for blocks of one or two heads (the registers allow 8 there;
 * 4 was 3% slower at 8k positions on an H200, docs/PERF.md fifth session). -D to experiment. */
#ifndef DEC_U_SMALL
#define DEC_U_SMALL 8
#endif
/* The same for q8_0 caches (-D to experiment). */
#ifndef DEC_U_Q8
#define DEC_U_Q8 4 /* 8 took 128 registers in the 7B instance (one block fewer per SM): 7B at 32k positions 135 -> 126 us per layer with 4 */
#endif
/* The same for q4_0 caches (a position's codes are one word per lane; -D to experiment). */
#ifndef DEC_U_Q4
#define DEC_U_Q4 8
#endif
template <typename T, int GB, bool VEC, int LP, bool RK>
static __global__ void __launch_bounds__(DEC_THREADS) attn_dec_kernel(rf_gpu_attn_args a, int n_chunks, float *part,
                                                                      int *counters) {
    RF_STAMPS_BEGIN;
    constexpr int U = GB >= 8 ? 2 : GB >= 4 ? 4 : kv_fmt<T>::Q8 ? DEC_U_Q8 : kv_fmt<T>::Q4 ? DEC_U_Q4 : DEC_U_SMALL;
    extern __shared__ float dsm[];
    const int hd = a.head_dim, kv_dim = a.n_kv_head * hd, G = a.n_head / a.n_kv_head;
    const int chunk = blockIdx.x % n_chunks, tg_ = blockIdx.x / n_chunks;
    const int g = tg_ % a.n_kv_head, t = tg_ / a.n_kv_head;
    const int h0 = g * G + chunk * GB, nh = min(GB, G - chunk * GB);
    const int s = blockIdx.y, n_split = gridDim.y;
    const int ws = warpSize, lane = threadIdx.x % ws, warp = threadIdx.x / ws, nw = blockDim.x / ws;
    const int PW = ws / LP, sg = lane / LP, li = lane % LP, d0 = 8 * li;
    const int32_t *bt = a.block_table + (int64_t)a.seq_row[t] * a.max_blocks;
    const int n_pos = a.pos[t] + 1;
    const int per = (n_pos + n_split - 1) / n_split;
    const int pb = s * per, pe_all = min(n_pos, pb + per);
    /* rope fused (a.k_new): the split holding the last position takes that position from k_new /
     * v_new, not from the cache its loop reads (it stores that row there itself) */
    constexpr bool fr = RK && VEC; /* an instance of its own: the plain kernel stays as it was */
    const bool own = fr && pb < pe_all && pe_all == n_pos;
    const int pe = own ? pe_all - 1 : pe_all;
    /* row r of a cache starts r * rs units of T in (kv_dim for the float formats: the same
     * address arithmetic as before the q8_0 format, whose registers the loop is tuned to) */
    const int rs = kv_fmt<T>::row_bytes(kv_dim) / (int)sizeof(T);
    const int soff = kv_fmt<T>::scale_off(kv_dim, g * hd + d0);
    const T *kbase = (const T *)a.k_cache + kv_fmt<T>::elems((int64_t)g * hd + d0);
    const T *vbase = (const T *)a.v_cache + kv_fmt<T>::elems((int64_t)g * hd + d0);
    __shared__ float rope_cs[fr ? RF_GPU_ATTN_MAX_HEAD_DIM / 2 : 1], rope_sn[fr ? RF_GPU_ATTN_MAX_HEAD_DIM / 2 : 1];
    if (counters) rf_grid_dep_launch(); /* fused: the output projection may start loading its weights */
    /* the first slots (block table: written before the step) and the rotation table (position:
     * the same) are computed before waiting for the previous kernel (it writes q and the new K/V) */
    int slot_next = pb + warp * ws + lane < pe ? (int)att_slot(bt, a.block_size, pb + warp * ws + lane) : 0;
    /* ... and, in the rope-fused instance (the one short contexts take; its grid is one wave), the
     * first chunk's K and V rows of this head group are prefetched into L2. Written in earlier
     * steps and long evicted by the weights, they otherwise cost the loop DRAM latency queued
     * behind the output projection's weight prefetch (7B Q4_0 decode 561 -> 578 t/s, H200; again
     * 2026-11-29, without it: 1B F16 tg128 -1.0%, 1B Q8_0 -0.15%, after 512 tokens level and
     * +1.0%, docs/PERF.md fifty-fifth session). Not in the plain instance: there the prefetch
     * raised registers 96 -> 109, fewer blocks and splits fit, and 7B Q4_K_M at 32k positions
     * fell 160 -> 147 t/s. */
    if (fr && pb + warp * ws + lane < pe) {
        dec_prefetch_l2(kv_at<T>(a.k_cache, slot_next, kv_dim, g * hd), kv_fmt<T>::elems(hd) * (int)sizeof(T));
        dec_prefetch_l2(kv_at<T>(a.v_cache, slot_next, kv_dim, g * hd), kv_fmt<T>::elems(hd) * (int)sizeof(T));
    }
    if (fr)
        for (int i = threadIdx.x; i < a.rope.n_rot / 2; i += blockDim.x)
            rope_cos_sin((float)a.pos[t], i, a.rope.n_rot, a.rope.base, a.rope.freq_scale, a.rope.freq_factors,
                         &rope_cs[i], &rope_sn[i]);
    rf_grid_dep_wait();
    RF_STAMP(1);
    if (fr) __syncthreads();

    float qr[GB][8];
#pragma unroll
    for (int j = 0; j < GB; j++) {
        const float *qh = a.q + ((int64_t)t * a.n_head + h0 + (j < nh ? j : 0)) * hd;
#pragma unroll
        for (int e = 0; e < 8; e++) qr[j][e] = j < nh && d0 + e < hd ? qh[d0 + e] : 0.0f;
        if (fr) dec_rope8(qr[j], d0, lane, a.rope.mode, a.rope.n_rot, rope_cs, rope_sn);
    }
    RF_STAMP_AFTER(4, qr[0][0]);
    float m[GB], l[GB], acc[GB][8];
#pragma unroll
    for (int j = 0; j < GB; j++) {
        m[j] = -INFINITY;
        l[j] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[j][e] = 0.0f;
    }

    /* rope fused: the last position first, by the last warp (it has the fewest positions in the loop
     * below): k_new rotated, both rows rounded to the cache's type and stored at slot[t], then one
     * online-softmax step of sub-group 0 with them (the other sub-groups only help the shuffles).
     * Before the loop, so that nothing of it stays live in registers through the loop. */
    if (own && warp == nw - 1) { /* warp-uniform */
        float k8[8], v8[8];
        const float *kn = a.k_new + (int64_t)t * kv_dim + (int64_t)g * hd + d0;
        const float *vn = a.v_new + (int64_t)t * kv_dim + (int64_t)g * hd + d0;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            k8[e] = d0 + e < hd ? kn[e] : 0.0f;
            v8[e] = d0 + e < hd ? vn[e] : 0.0f;
        }
        dec_rope8(k8, d0, lane, a.rope.mode, a.rope.n_rot, rope_cs, rope_sn);
        kv_raw8<T> kr, vr;
        kv_pack8(kr, k8);
        kv_pack8(vr, v8);
        kv_cvt8(kr, k8);
        kv_cvt8(vr, v8);
        if (sg == 0 && d0 < hd && chunk == 0) { /* every head chunk of the group computes the row */
            const int64_t row = (int64_t)a.slot[t] * rs + kv_fmt<T>::elems((int64_t)g * hd + d0);
            kv_store8((char *)((T *)a.k_cache + row), soff, kr, li % 4 == 0);
            kv_store8((char *)((T *)a.v_cache + row), soff, vr, li % 4 == 0);
        }
#pragma unroll
        for (int j = 0; j < GB; j++) {
            const float d = dec_dot8<LP>(qr[j], k8);
            if (sg == 0) {
                const float sc = d * a.scale, mx = fmaxf(m[j], sc);
                const float corr = expf(m[j] - mx), w = expf(sc - mx);
                l[j] = l[j] * corr + w;
                m[j] = mx;
#pragma unroll
                for (int e = 0; e < 8; e++) acc[j][e] = acc[j][e] * corr + w * v8[e];
            }
        }
    }
    /* the next chunk's slots are looked up while this chunk's K/V are read (the block-table read
     * is a dependent load: without this it would add one memory latency per chunk) */
    for (int c0 = pb + warp * ws; c0 < pe; c0 += nw * ws) { /* warp-uniform */
        const int nc = min(ws, pe - c0);
        const int slot = slot_next, cn = c0 + nw * ws + lane;
        slot_next = cn < pe ? (int)att_slot(bt, a.block_size, cn) : 0;
        for (int i0 = 0; i0 < LP && i0 * PW < nc; i0 += U) { /* warp-uniform */
            bool ok[U];
            kv_raw8<T> kr[U], vr[U]; /* VEC: the loads, all issued before any is used */
            float kx[VEC ? 1 : U][8], vx[VEC ? 1 : U][8]; /* !VEC: element-wise loads */
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int j = (i0 + u) * PW + sg;
                const int sl = ATT_SHFL_IDX(slot, j < ws ? j : 0);
                ok[u] = i0 + u < LP && j < nc;
                if (VEC) {
                    kv_zero8(kr[u]);
                    kv_zero8(vr[u]);
                    if (ok[u] && d0 < hd) {
                        kv_load8<!fr>(kr[u], (const char *)(kbase + (int64_t)sl * rs), soff);
                        kv_load8<!fr>(vr[u], (const char *)(vbase + (int64_t)sl * rs), soff);
                    }
                } else {
#pragma unroll
                    for (int e = 0; e < 8; e++) {
                        const bool in = ok[u] && d0 + e < hd;
                        kx[VEC ? 0 : u][e] = in ? kv_get1<T>(a.k_cache, sl, kv_dim, g * hd + d0 + e) : 0.0f;
                        vx[VEC ? 0 : u][e] = in ? kv_get1<T>(a.v_cache, sl, kv_dim, g * hd + d0 + e) : 0.0f;
                    }
                }
            }
            float sc[U][GB];
#pragma unroll
            for (int u = 0; u < U; u++) {
                float k8[8];
                if (VEC)
                    kv_cvt8(kr[u], k8);
                else
#pragma unroll
                    for (int e = 0; e < 8; e++) k8[e] = kx[VEC ? 0 : u][e];
#pragma unroll
                for (int j = 0; j < GB; j++) {
                    const float d = dec_dot8<LP>(qr[j], k8);
                    sc[u][j] = ok[u] ? d * a.scale : -INFINITY;
                }
            }
            if (!ok[0]) continue; /* no position for this sub-group (no shuffles below) */
            /* online softmax: new max over the U scores, weights w = e^(s - m), old sums rescaled */
#pragma unroll
            for (int j = 0; j < GB; j++) {
                float mx = m[j];
#pragma unroll
                for (int u = 0; u < U; u++) mx = fmaxf(mx, sc[u][j]);
                /* mx = -inf only if every score is NaN: corr and w are then NaN, as on the CPU */
                const float corr = expf(m[j] - mx);
                float ps = 0.0f;
#pragma unroll
                for (int u = 0; u < U; u++) {
                    sc[u][j] = ok[u] ? expf(sc[u][j] - mx) : 0.0f;
                    ps += sc[u][j];
                }
                l[j] = l[j] * corr + ps;
                m[j] = mx;
#pragma unroll
                for (int e = 0; e < 8; e++) acc[j][e] *= corr;
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                float v8[8];
                if (VEC)
                    kv_cvt8(vr[u], v8);
                else
#pragma unroll
                    for (int e = 0; e < 8; e++) v8[e] = vx[VEC ? 0 : u][e];
#pragma unroll
                for (int j = 0; j < GB; j++)
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[j][e] += sc[u][j] * v8[e];
            }
        }
    }
    RF_STAMP_AFTER(5, acc[0][0]);
    /* merge the sub-groups of the warp (every lane ends with the warp's state for its dims) */
    for (int o = LP; o < ws; o <<= 1) {
#pragma unroll
        for (int j = 0; j < GB; j++) {
            const float mo = RF_SHFL_XOR(m[j], o), lo = RF_SHFL_XOR(l[j], o);
            const float M = fmaxf(m[j], mo);
            const float ca = dec_scale(m[j], M), cb = dec_scale(mo, M);
            l[j] = l[j] * ca + lo * cb;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float ao = RF_SHFL_XOR(acc[j][e], o);
                acc[j][e] = acc[j][e] * ca + ao * cb;
            }
            m[j] = M;
        }
    }
    /* the warps, through shared memory: [warp][head][2 + hd] = m, l, acc */
    if (sg == 0) {
#pragma unroll
        for (int j = 0; j < GB; j++) {
            float *w = dsm + ((int64_t)warp * GB + j) * (hd + 2);
            if (li == 0) {
                w[0] = m[j];
                w[1] = l[j];
            }
#pragma unroll
            for (int e = 0; e < 8; e++)
                if (d0 + e < hd) w[2 + d0 + e] = acc[j][e];
        }
    }
    __syncthreads();
    RF_STAMP(2);
    if (GB == 1 && counters && n_split == 1 && hd <= (int)blockDim.x) {
        dec_block_out1<DEC_MAX_WARPS>(a, dsm, hd + 2, nw, hd, t, h0);
        RF_STAMPS_END(RF_STAMP_ATTN);
        return;
    }
    const bool direct = dec_block_out(a, dsm, GB, nw, nh, hd, t, h0, s, n_split, part, counters != NULL);
    RF_STAMPS_END(RF_STAMP_ATTN);
    if (counters && !direct) dec_combine_last(a, nh, hd, t, h0, n_split, part, counters + blockIdx.x);
}

/* attn_combine_kernel: one block of COMB_THREADS per (token, head): merges the n_split partials,
 * out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M), M = max_s m_s. An empty partial (m =
 * -inf, l = 0, acc = 0) gets weight 0; a NaN m or l makes the output NaN (as on the CPU). The
 * block's threads are rows of hd (R = COMB_THREADS / hd rows; hd = 256: one): thread (r, d) merges
 * dimension d of the splits r, r + R, ..., COMB_U of them per step, loading their m, l and acc
 * together, into its own running (m, l, acc) (online softmax: one dependent load per COMB_U
 * splits, none for the maximum first); then row 0 merges the R rows' states through shared memory.
 * The earlier form took the maximum, then the weights, then the sums, each a round of loads after
 * a barrier: ~10 dependent round trips, 8.7 us at 66 splits of the 1B shape (ncu, H200; 5.6 us
 * with 16 splits per round). COMB_U = 24: those 66 take one round at head_dim 64 (4 rows; 24
 * against 16 gained 0.8% at 32k positions, docs/PERF.md). A programmatic dependent launch of
 * this kernel lost 1%. */
#define COMB_THREADS 256
#define COMB_U 24
static __global__ void __launch_bounds__(COMB_THREADS) attn_combine_kernel(const float *part, int n_split, int hd,
                                                                           float *out, int8_t *xq, float2 *xd) {
    rf_grid_dep_launch(); /* the output projection's matvec may start loading its weights */
    __shared__ float st_m[COMB_THREADS], st_l[COMB_THREADS], st_a[COMB_THREADS];
    const int th = blockIdx.x, stride = hd + 2, R = COMB_THREADS / hd;
    const int r = threadIdx.x / hd, d = threadIdx.x % hd;
    const float *p0 = part + (int64_t)th * n_split * stride;
    float m = -INFINITY, l = 0.0f, acc = 0.0f;
    if (r < R) {
        for (int s0 = r; s0 < n_split; s0 += COMB_U * R) {
            float ms[COMB_U], ls[COMB_U], as[COMB_U];
#pragma unroll
            for (int u = 0; u < COMB_U; u++) {
                const int s = s0 + u * R;
                const float *q = p0 + (int64_t)s * stride;
                ms[u] = s < n_split ? q[0] : -INFINITY;
                ls[u] = s < n_split ? q[1] : 0.0f;
                as[u] = s < n_split ? q[2 + d] : 0.0f;
            }
            float mx = m;
#pragma unroll
            for (int u = 0; u < COMB_U; u++) mx = fmaxf(mx, ms[u]);
            const float c = dec_scale(m, mx);
            l *= c;
            acc *= c;
#pragma unroll
            for (int u = 0; u < COMB_U; u++) {
                const float w = dec_scale(ms[u], mx);
                l += ls[u] * w;
                acc += as[u] * w;
            }
            m = mx;
        }
    }
    st_m[threadIdx.x] = m, st_l[threadIdx.x] = l, st_a[threadIdx.x] = acc;
    __syncthreads();
    if (r == 0) { /* whole warps (hd % 32 == 0 where xq is written): rf_quantize32's lanes */
        float M = -INFINITY;
        for (int i = 0; i < R; i++) M = fmaxf(M, st_m[i * hd + d]);
        float L = 0.0f, A = 0.0f;
        for (int i = 0; i < R; i++) {
            const float w = dec_scale(st_m[i * hd + d], M);
            L += st_l[i * hd + d] * w;
            A += st_a[i * hd + d] * w;
        }
        out[(int64_t)th * hd + d] = A / L;
        if (xq) rf_quantize32(A / L, (int64_t)th * hd + d, xq, xd);
    }
}

/* Heads per block for a group of G: at most `most` (a power of two), all of the group up to 8
 * (registers grow with it; larger groups in chunks). RF_GPU_ATTN_GB=1/2/4/8 sets `most` (A/B). */
static int dec_gb(int G, int most) {
    static int cap = -1;
    if (cap < 0) cap = getenv("RF_GPU_ATTN_GB") ? atoi(getenv("RF_GPU_ATTN_GB")) : 0;
    if (cap > 0) most = cap;
    const int gb = G >= 5 ? 8 : G >= 3 ? 4 : G;
    return gb <= most ? gb : most >= 4 ? 4 : most >= 2 ? 2 : 1;
}

extern "C" int rf_gpu_attn_decode_gb(int n_head, int n_kv_head, int n_pos) {
    if (n_kv_head <= 0 || n_head % n_kv_head) return 1;
    return dec_gb(n_head / n_kv_head, n_pos < RF_GPU_ATTN_GB1_MAX_POS ? 1 : 8);
}

/* The heads per block a launch uses (a->gb, or the long-context choice). */
static int dec_gb_of(const rf_gpu_attn_args *a) { return dec_gb(a->n_head / a->n_kv_head, a->gb > 0 ? a->gb : 8); }

extern "C" size_t rf_gpu_attn_decode_scratch(int n_tokens, int n_head, int head_dim, int n_split) {
    return DEC_COUNTER_BYTES + (size_t)n_tokens * n_head * n_split * (head_dim + 2) * sizeof(float);
}

/* Rows of head_dim elements take LP lanes of 8 elements: 8, 16 or 32 (head_dim <= 256). */
static int dec_lp(int hd) { return hd <= 64 ? 8 : hd <= 128 ? 16 : 32; }

/* Blocks of attn_dec_kernel<T, GB, true, LP, RK> resident per multiprocessor (registers bound it: GB
 * = 4 takes ~160 registers a thread), from the occupancy calculator, once per instance. */
template <typename T, int GB, int LP, bool RK>
static int dec_resident(int hd) {
    static int cached[RF_GPU_ATTN_MAX_HEAD_DIM / 8 + 1];
    const int key = (hd + 7) / 8;
    if (!cached[key]) {
        int n = 0;
#if RF_GPU_HIP
        if (hipOccupancyMaxActiveBlocksPerMultiprocessor(&n, attn_dec_kernel<T, GB, true, LP, RK>, DEC_THREADS,
                                                         dec_smem(hd, GB)) != hipSuccess)
            n = 0;
#else
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, attn_dec_kernel<T, GB, true, LP, RK>, DEC_THREADS,
                                                          dec_smem(hd, GB)) != cudaSuccess)
            n = 0;
#endif
        gpuGetLastError();
        cached[key] = n > 0 ? n : 2;
    }
    return cached[key];
}

template <typename T, int GB, bool RK>
static int dec_resident_lp(int hd) {
    switch (dec_lp(hd)) {
    case 8: return dec_resident<T, GB, 8, RK>(hd);
    case 16: return dec_resident<T, GB, 16, RK>(hd);
    default: return dec_resident<T, GB, 32, RK>(hd);
    }
}

template <typename T, bool RK>
static int dec_resident_gb(int gb, int hd) {
    switch (gb) {
    case 1: return dec_resident_lp<T, 1, RK>(hd);
    case 2: return dec_resident_lp<T, 2, RK>(hd);
    case 4: return dec_resident_lp<T, 4, RK>(hd);
    default: return dec_resident_lp<T, 8, RK>(hd);
    }
}

static int dec_resident_t(uint32_t kv_type, int gb, int hd, bool rk) {
    if (kv_type == RF_TYPE_Q8_0) return rk ? dec_resident_gb<kv_q8, true>(gb, hd) : dec_resident_gb<kv_q8, false>(gb, hd);
    if (kv_type == RF_TYPE_Q4_0) return rk ? dec_resident_gb<kv_q4, true>(gb, hd) : dec_resident_gb<kv_q4, false>(gb, hd);
    if (kv_type == RF_TYPE_F16) return rk ? dec_resident_gb<__half, true>(gb, hd) : dec_resident_gb<__half, false>(gb, hd);
    return rk ? dec_resident_gb<float, true>(gb, hd) : dec_resident_gb<float, false>(gb, hd);
}


extern "C" int rf_gpu_attn_decode_splits(int n_tokens, int n_head, int n_kv_head, int head_dim, uint32_t kv_type,
                                         int n_pos, int n_sm) {
    if (n_tokens <= 0 || n_kv_head <= 0 || n_head % n_kv_head || head_dim <= 0 ||
        head_dim > RF_GPU_ATTN_MAX_HEAD_DIM || bad_kv_type(kv_type))
        return 1;
    const int G = n_head / n_kv_head;
    const bool tc = rf_gpu_attn_decode_tc(n_head, n_kv_head, head_dim, kv_type, n_pos);
    const int gb = tc ? G : rf_gpu_attn_decode_gb(n_head, n_kv_head, n_pos);
    const int64_t blocks = (int64_t)n_tokens * n_kv_head * ((G + gb - 1) / gb);
    /* A one-token step the tensor-core kernel's rope-fused instance can take (at any context) is
     * sized by that kernel's residency: a count that fills the plain kernel's wave would leave it
     * two waves, and the step would go to the plain kernel (7B at 512 positions, H200: 9 splits,
     * 288 blocks against its 264; 8 splits there gave tg128 +7.6%, docs/PERF.md, fiftieth session). */
    const bool tc_rk = n_tokens == 1 && rf_gpu_attn_decode_tc_rope(n_head, n_kv_head, head_dim, kv_type);
    const int resident =
        tc || tc_rk ? rf_attn_dec_tc_resident(kv_type, head_dim, G, tc_rk) : dec_resident_t(kv_type, gb, head_dim, false);
    /* one full wave of resident blocks (no tail of idle SMs), each split at least 64 positions, at
     * most 256 splits. Measured on an H200 (test_gpu_ops bench, 2026-11-22): at 8k and 32k
     * positions, 7B and 1B shapes, f16 and f32, one wave was 5-25% faster than two and two than
     * four (the combine's cost grows with the split count). Below 128 positions one split: the
     * combine costs about what a block's loop over 64-128 more positions does (tg128 after 64
     * tokens, one split against two, H200: 7B Q4_K_M +2.0%, 1B Q4_K_M +6.0%; docs/PERF.md,
     * fiftieth session) */
    int64_t n = (int64_t)resident * (n_sm > 0 ? n_sm : 100) / blocks;
    const int64_t by_pos = n_pos < 128 ? 1 : ((int64_t)n_pos + 63) / 64;
    if (n > by_pos) n = by_pos;
    if (n > 256) n = 256;
    /* Below RF_GPU_ATTN_TC_MIN_POS a power of two: tg128 of the 1B shape (H200, every count from 2
     * to 32 at 128-1,024 positions) lost 1.5-4% at 3, 5, 6 and 9 splits against 2, 4 and 8. The
     * likely reason is balance, not the power: with 32 blocks per split on the H200's 132 SMs, 4
     * and 8 splits put the same number of blocks on every SM, 5, 6 and 9 do not (docs/PERF.md,
     * fiftieth session; not measured on a GPU with another SM count). */
    if (n_pos < RF_GPU_ATTN_TC_MIN_POS)
        while (n & (n - 1)) n &= n - 1;
    return n < 1 ? 1 : (int)n;
}

template <typename T, int GB>
static int dec_launch(gpuStream_t st, const rf_gpu_attn_args *a, int n_split, float *part, int *counters, bool vec) {
    const int G = a->n_head / a->n_kv_head, n_chunks = (G + GB - 1) / GB;
    dim3 grid((unsigned)(a->n_tokens * a->n_kv_head * n_chunks), (unsigned)n_split);
    const size_t smem = dec_smem(a->head_dim, GB);
    const int lp = dec_lp(a->head_dim);
    void (*fn)(rf_gpu_attn_args, int, float *, int *) =
        !vec       ? attn_dec_kernel<T, GB, false, 32, false>
        : a->k_new ? (lp == 8 ? attn_dec_kernel<T, GB, true, 8, true>
                      : lp == 16 ? attn_dec_kernel<T, GB, true, 16, true>
                                 : attn_dec_kernel<T, GB, true, 32, true>)
        : lp == 8  ? attn_dec_kernel<T, GB, true, 8, false>
        : lp == 16 ? attn_dec_kernel<T, GB, true, 16, false>
                   : attn_dec_kernel<T, GB, true, 32, false>;
    gpuError_t err;
    RF_LAUNCH_PDL(err, fn, grid, dim3(DEC_THREADS), smem, st, *a, n_chunks, part, counters);
    return (int)err;
}

template <typename T>
static int dec_launch_t(gpuStream_t st, const rf_gpu_attn_args *a, int n_split, float *part, int *counters, bool vec) {
    switch (dec_gb_of(a)) {
    case 1: return dec_launch<T, 1>(st, a, n_split, part, counters, vec);
    case 2: return dec_launch<T, 2>(st, a, n_split, part, counters, vec);
    case 4: return dec_launch<T, 4>(st, a, n_split, part, counters, vec);
    default: return dec_launch<T, 8>(st, a, n_split, part, counters, vec);
    }
}

static int g_dec_fused = -1; /* RF_ATTN_FUSED_COMBINE=0: always the separate combine kernel (A/B) */

/* The f32 kernels combine the splits themselves (the last block of each group) where the counters
 * and one thread's loop over the splits suffice. */
static bool dec_fused(int n_tokens, int n_head, int n_kv_head, int n_split) {
    if (g_dec_fused < 0) g_dec_fused = !(getenv("RF_ATTN_FUSED_COMBINE") && atoi(getenv("RF_ATTN_FUSED_COMBINE")) == 0);
    if (n_tokens <= 0 || n_kv_head <= 0 || n_head % n_kv_head) return 0;
    if (n_split < 1) n_split = 1;
    const int64_t groups = (int64_t)n_tokens * n_head; /* at most, whatever the heads per block */
    return g_dec_fused && groups <= DEC_COUNTERS && n_split <= DEC_FUSED_MAX_SPLITS;
}

extern "C" int rf_gpu_attn_decode_rope_ok(const rf_gpu_attn_args *a, const rf_rope *rope, const float *k_new,
                                          const float *v_new, int n_split, int n_sm) {
    const int hd = a->head_dim;
    if (a->n_tokens != 1 || bad_kv_type(a->kv_type) || a->n_kv_head <= 0 || a->n_head % a->n_kv_head ||
        hd <= 0 || hd > RF_GPU_ATTN_MAX_HEAD_DIM || hd % 8 || !k_new || !v_new)
        return 0;
    /* the tensor-core kernel's rope-fused instance: f16, q8_0 or q4_0 caches with one query head per
     * KV head (and the fused combine), f16 caches with up to DM_RK_MAX_G; q 16-byte aligned. GQA
     * groups with a q8_0 or q4_0 cache keep the plain tensor-core kernel and rope's own launch:
     * the instance was level at 2k and 32k positions and 2% slower at 8k, while f16 gained 1-2% at
     * 8k and 32k and ~2.5% at 2k (1B file, H200; docs/PERF.md, fifty-first session), and the 8B
     * shape's head_dim 128 +2.0% / +1.9% / +2.8% at 2k / 8k / 32k (fifty-fourth); again after the
     * fifty-second session's shorter loop: q8_0 -3.2% / -1.3% at 8k / 32k (fifty-third). */
    if (a->tc && (a->kv_type == RF_TYPE_F32 || !rf_attn_dec_tc_capable(a->n_head, a->n_kv_head, hd, a->kv_type) ||
                  (a->n_head != a->n_kv_head && a->kv_type != RF_TYPE_F16) ||
                  a->n_head / a->n_kv_head > DM_RK_MAX_G || (uintptr_t)a->q % 16 ||
                  (a->n_head == a->n_kv_head && !dec_fused(a->n_tokens, a->n_head, a->n_kv_head, n_split))))
        return 0;
    if ((a->kv_type == RF_TYPE_Q8_0 || a->kv_type == RF_TYPE_Q4_0) && hd % 32) return 0;
    if (((uintptr_t)a->k_cache | (uintptr_t)a->v_cache | (uintptr_t)k_new | (uintptr_t)v_new) % 16) return 0;
    const int n_rot = rope->n_rot;
    if (n_rot <= 0 || n_rot > hd || n_rot % 2 || (rope->mode == RF_ROPE_NEOX && n_rot % 16)) return 0;
    if (rope->mode != RF_ROPE_NEOX && rope->mode != RF_ROPE_NORMAL) return 0;
    /* one wave of the fused kernel (it may take more registers than the plain one, and a second
     * wave for the last blocks costs more than rope's own launch saves) */
    const int G = a->n_head / a->n_kv_head, gb = a->tc ? G : dec_gb_of(a);
    const int resident = a->tc ? rf_attn_dec_tc_resident(a->kv_type, hd, G, true) : dec_resident_t(a->kv_type, gb, hd, true);
    return n_sm <= 0 || (int64_t)a->n_kv_head * ((G + gb - 1) / gb) * (n_split < 1 ? 1 : n_split) <=
                            (int64_t)resident * n_sm;
}

extern "C" int rf_gpu_attention_decode(void *stream, const rf_gpu_attn_args *a, int n_split, float *scratch) {
    if (a->n_tokens <= 0) return 0;
    if (bad_kv_type(a->kv_type) || a->n_kv_head <= 0 || a->n_head % a->n_kv_head ||
        a->head_dim > RF_GPU_ATTN_MAX_HEAD_DIM || a->head_dim <= 0)
        return invalid_value();
    if (n_split < 1) n_split = 1;
    if (n_split > 4096) n_split = 4096; /* a sanity cap: the backend asks for at most 256 */
    gpuStream_t st = (gpuStream_t)stream;
    const bool vec = a->head_dim % 8 == 0 && ((uintptr_t)a->k_cache | (uintptr_t)a->v_cache) % 16 == 0;
    /* q8_0, q4_0: head_dim % 32 == 0 and 16-byte aligned caches (kv_format.h's rows): vector loads only */
    if ((a->kv_type == RF_TYPE_Q8_0 || a->kv_type == RF_TYPE_Q4_0) && (!vec || a->head_dim % 32)) return invalid_value();
    /* one launch (the last split block of each group combines) where the counters and one
     * thread's loop over the splits suffice; else a combine kernel. Always the combine kernel
     * after the tensor-core kernel: its blocks serve a whole group (G * head_dim outputs for the
     * last block's loop over the splits: 8B shape at 2048 positions, 32 splits, 18.1 us fused
     * against 13.3 us at 4096 positions with the combine kernel, H200) */
    const bool fused = (!a->tc || (a->k_new && a->n_head == a->n_kv_head)) &&
                       dec_fused(a->n_tokens, a->n_head, a->n_kv_head, n_split);
    if (a->xq && (a->n_tokens != 1 || a->head_dim % 32)) return invalid_value();
    if (a->k_new && !rf_gpu_attn_decode_rope_ok(a, &a->rope, a->k_new, a->v_new, n_split, 0)) return invalid_value();
    int *counters = fused ? (int *)scratch : NULL;
    float *part = (float *)((char *)scratch + DEC_COUNTER_BYTES);
    if (a->tc && (!rf_attn_dec_tc_capable(a->n_head, a->n_kv_head, a->head_dim, a->kv_type) ||
                  ((uintptr_t)a->q | (uintptr_t)a->k_cache | (uintptr_t)a->v_cache) % 16))
        return invalid_value();
    int rc = a->tc ? rf_attn_dec_tc_launch(st, a, n_split, part, counters)
             : a->kv_type == RF_TYPE_F16    ? dec_launch_t<__half>(st, a, n_split, part, counters, vec)
             : a->kv_type == RF_TYPE_Q8_0 ? dec_launch_t<kv_q8>(st, a, n_split, part, counters, vec)
             : a->kv_type == RF_TYPE_Q4_0 ? dec_launch_t<kv_q4>(st, a, n_split, part, counters, vec)
                                          : dec_launch_t<float>(st, a, n_split, part, counters, vec);
    if (rc || fused) return rc;
    attn_combine_kernel<<<a->n_tokens * a->n_head, COMB_THREADS, 0, st>>>(part, n_split, a->head_dim, a->out,
                                                                         (int8_t *)a->xq, (float2 *)a->xd);
    return (int)gpuGetLastError();
}

#ifdef RF_PHASE_STAMPS
extern "C" void rf_phase_stamps_dump_attention(void) { rf_phase_stamps_write("attention"); }
#endif
