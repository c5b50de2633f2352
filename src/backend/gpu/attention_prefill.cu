/* attention_prefill.cu: prefill attention over the paged KV cache, many query tokens at once
 * (twin of cpu_attention): query tiles x key tiles with an online softmax, in f32 through shared
 * memory or on tensor cores. The common contract (layouts, precision, NaN behaviour) is
 * attention_kv.cuh's. */
#include "attention_kv.cuh"
#include "attention_mma.cuh"

/* ---- prefill: query tiles x key tiles ----------------------------------------------------------
 * attn_tile_kernel: grid (ceil(n_tokens / ATT_BQ), n_head), blockDim ATT_THREADS. A block takes
 * ATT_BQ consecutive tokens and one query head; for each distinct sequence among its tokens it
 * streams that sequence's K/V in tiles of ATT_BK positions (up to the largest position of its
 * tokens) through shared memory; each token masks positions past its own (causal) and keeps an
 * online-softmax state (m, l in shared memory, acc in registers). Tokens of different sequences in
 * one tile are handled in turn, so the kernel is correct for any batch. Dynamic shared memory:
 * q[BQ][hd] + k[BK][hd+1] + v[BK][hd] + w[BQ][BK] + per-row state. */
#define ATT_BQ 16
#define ATT_BK 16
#define ATT_THREADS 128
#define ATT_ACC_PER_THREAD (ATT_BQ * RF_GPU_ATTN_MAX_HEAD_DIM / ATT_THREADS)

static size_t attn_tile_smem(int hd) {
    return sizeof(float) * ((size_t)ATT_BQ * hd + (size_t)ATT_BK * (hd + 1) + (size_t)ATT_BK * hd +
                            ATT_BQ * ATT_BK + 3 * ATT_BQ) +
           sizeof(int) * 3 * ATT_BQ;
}

template <typename T>
static __global__ void __launch_bounds__(ATT_THREADS) attn_tile_kernel(rf_gpu_attn_args a) {
    extern __shared__ float sm[];
    const int hd = a.head_dim, kv_dim = a.n_kv_head * hd, q_dim = a.n_head * hd;
    const int h = blockIdx.y, g = h / (a.n_head / a.n_kv_head);
    const int t0 = blockIdx.x * ATT_BQ;
    float *q_s = sm;                              /* [BQ][hd] */
    float *k_s = q_s + ATT_BQ * hd;               /* [BK][hd+1] */
    float *v_s = k_s + ATT_BK * (hd + 1);         /* [BK][hd] */
    float *w_s = v_s + ATT_BK * hd;               /* [BQ][BK] */
    float *m_s = w_s + ATT_BQ * ATT_BK;           /* [BQ] */
    float *l_s = m_s + ATT_BQ;                    /* [BQ] */
    float *c_s = l_s + ATT_BQ;                    /* [BQ] correction of this tile */
    int *seq_s = (int *)(c_s + ATT_BQ);           /* [BQ] seq row, -1 for rows past n_tokens */
    int *pos_s = seq_s + ATT_BQ;                  /* [BQ] */
    int *nv_s = pos_s + ATT_BQ;                   /* [BQ] visible positions in this tile (current sequence) */

    for (int r = threadIdx.x; r < ATT_BQ; r += blockDim.x) {
        const int t = t0 + r;
        seq_s[r] = t < a.n_tokens ? a.seq_row[t] : -1;
        pos_s[r] = t < a.n_tokens ? a.pos[t] : -1;
        m_s[r] = -INFINITY;
        l_s[r] = 0.0f;
    }
    for (int i = threadIdx.x; i < ATT_BQ * hd; i += blockDim.x) {
        const int r = i / hd, d = i % hd, t = t0 + r;
        q_s[i] = t < a.n_tokens ? a.q[(int64_t)t * q_dim + (int64_t)h * hd + d] : 0.0f;
    }
    float acc[ATT_ACC_PER_THREAD];
#pragma unroll
    for (int i = 0; i < ATT_ACC_PER_THREAD; i++) acc[i] = 0.0f;
    __syncthreads();

    for (int r0 = 0; r0 < ATT_BQ; r0++) {
        const int sq = seq_s[r0];
        if (sq < 0) break;
        bool first = true;
        for (int r = 0; r < r0; r++) first &= seq_s[r] != sq;
        if (!first) continue; /* this sequence was handled with an earlier row */
        int maxp = 0;
        for (int r = r0; r < ATT_BQ; r++)
            if (seq_s[r] == sq && pos_s[r] > maxp) maxp = pos_s[r];
        const int32_t *bt = a.block_table + (int64_t)sq * a.max_blocks;

        for (int p0 = 0; p0 <= maxp; p0 += ATT_BK) {
            /* load the K/V tile (positions past maxp are never read below) */
            for (int i = threadIdx.x; i < ATT_BK * hd; i += blockDim.x) {
                const int j = i / hd, d = i % hd, p = p0 + j;
                if (p <= maxp) {
                    const int64_t sl = att_slot(bt, a.block_size, p);
                    k_s[j * (hd + 1) + d] = kv_get1<T>(a.k_cache, sl, kv_dim, g * hd + d);
                    v_s[j * hd + d] = kv_get1<T>(a.v_cache, sl, kv_dim, g * hd + d);
                }
            }
            if (threadIdx.x < ATT_BQ) {
                const int r = threadIdx.x;
                const int nv = seq_s[r] == sq ? min(ATT_BK, pos_s[r] - p0 + 1) : 0;
                nv_s[r] = nv > 0 ? nv : 0;
            }
            __syncthreads();
            /* scores of visible (row, position) pairs */
            for (int i = threadIdx.x; i < ATT_BQ * ATT_BK; i += blockDim.x) {
                const int r = i / ATT_BK, j = i % ATT_BK;
                float sc = 0.0f;
                if (j < nv_s[r]) {
                    const float *qr = q_s + r * hd, *kr = k_s + j * (hd + 1);
                    for (int d = 0; d < hd; d++) sc += qr[d] * kr[d];
                    sc *= a.scale;
                }
                w_s[i] = sc;
            }
            __syncthreads();
            /* online-softmax update, one thread per row, positions in order (as the CPU) */
            if (threadIdx.x < ATT_BQ) {
                const int r = threadIdx.x, nv = nv_s[r];
                if (nv > 0) {
                    float m = m_s[r];
                    float mt = -INFINITY;
                    for (int j = 0; j < nv; j++) mt = w_s[r * ATT_BK + j] > mt ? w_s[r * ATT_BK + j] : mt;
                    const float m_new = mt > m ? mt : m;
                    const float corr = expf(m - m_new);
                    float l = l_s[r] * corr;
                    for (int j = 0; j < nv; j++) {
                        const float wt = expf(w_s[r * ATT_BK + j] - m_new);
                        w_s[r * ATT_BK + j] = wt;
                        l += wt;
                    }
                    m_s[r] = m_new;
                    l_s[r] = l;
                    c_s[r] = corr;
                }
            }
            __syncthreads();
            /* acc[r][d] = acc * corr + sum_j w[r][j] v[j][d] */
#pragma unroll
            for (int i = 0; i < ATT_ACC_PER_THREAD; i++) {
                const int e = threadIdx.x + i * ATT_THREADS;
                if (e < ATT_BQ * hd) {
                    const int r = e / hd, d = e % hd, nv = nv_s[r];
                    if (nv > 0) {
                        float v = acc[i] * c_s[r];
                        for (int j = 0; j < nv; j++) v += w_s[r * ATT_BK + j] * v_s[j * hd + d];
                        acc[i] = v;
                    }
                }
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int i = 0; i < ATT_ACC_PER_THREAD; i++) {
        const int e = threadIdx.x + i * ATT_THREADS;
        if (e < ATT_BQ * hd) {
            const int r = e / hd, d = e % hd, t = t0 + r;
            if (t < a.n_tokens) a.out[(int64_t)t * q_dim + (int64_t)h * hd + d] = acc[i] / l_s[r];
        }
    }
}

/* ---- prefill on tensor cores (CUDA sm_80+ only) -------------------------------------------------
 * attn_mma_kernel<HD>: grid (ceil(n_tokens / TB), n_kv_head), 128 threads (4 warps of 32: the
 * mma.sync fragment layout is defined for 32-lane warps, and this path is compiled for CUDA only).
 * A block takes FA_BR = 64 "rows", each a (token, query head) pair of one GQA group g = blockIdx.y:
 * with G = n_head / n_kv_head heads per group, row r is token t0 + r / G, head g * G + r % G, for
 * r < TB * G, TB = 64 / G (G <= 64): the K/V tiles of group g are loaded once for all its heads.
 * Warp w owns rows 16w..16w+15. For each distinct sequence among the block's rows, K/V tiles of
 * FA_BC = 64 positions (0 .. the rows' largest position) are loaded into shared memory as f16 (an
 * f16 cache as stored, an f32 one rounded) (K as [pos][dim], V transposed [dim][pos]; positions
 * past that largest one are zeroed);
 * S = Q K^T and O += P V run on mma.sync m16n8k16 (f16 operands, f32 accumulation), with a
 * per-row online softmax in base 2 (scale * log2 e folded in) in registers. A row sees position p
 * iff it belongs to the tile's sequence and p <= its pos (mask applied by selection, so K values
 * it cannot see never matter). P V of rows of other sequences is computed but dropped, so a NaN of
 * one sequence never reaches another. Precision: q, k, v and the weights p are rounded to f16
 * (11 significant bits), scores and sums are f32: outputs differ from the CPU by ~1e-3 relative
 * of the output scale. Limits (the launcher checks them or documents them): |q|, |k|, |v| < 65504
 * (f16 range); a NaN/inf v at a position p can turn rows of the same sequence at positions < p
 * in the same 64-position tile into NaN (0 * NaN), which the scalar path does not. */
#if RF_GPU_CUDA
#define FA_BR 64
#define FA_BC 64

static __device__ __forceinline__ uint32_t fa_ld32(const __half *p) { return *reinterpret_cast<const uint32_t *>(p); }
/* Online softmax of the two mma rows a lane holds (gr: m0, mx0; gr + 8: m1, mx1), base 2: the
 * rows' maxima over the quad's 4 lanes, the new running maxima mn, the old sums' factors c (1
 * while a row has seen nothing) and the exponent bases b (0 then, so that exp2(-inf - b) = 0). */
struct FaStep {
    float mn0, mn1, c0, c1, b0, b1;
};
static __device__ __forceinline__ FaStep fa_step(float m0, float m1, float mx0, float mx1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    FaStep f;
    f.mn0 = fmaxf(m0, mx0), f.mn1 = fmaxf(m1, mx1);
    f.c0 = f.mn0 == -INFINITY ? 1.0f : exp2f(m0 - f.mn0);
    f.c1 = f.mn1 == -INFINITY ? 1.0f : exp2f(m1 - f.mn1);
    f.b0 = f.mn0 == -INFINITY ? 0.0f : f.mn0, f.b1 = f.mn1 == -INFINITY ? 0.0f : f.mn1;
    return f;
}

template <int HD, typename T>
static __global__ void __launch_bounds__(128) attn_mma_kernel(rf_gpu_attn_args a) {
    constexpr int KS = HD + 8;    /* k_s row stride (halves): fragment reads conflict-free */
    constexpr int VS = FA_BC + 2; /* vt_s row stride (halves): an odd number of words */
    __shared__ __align__(16) __half k_s[FA_BC * KS];
    __shared__ __align__(16) __half vt_s[HD * VS];
    __shared__ int seq_s[FA_BR], pos_s[FA_BR];
    __shared__ int64_t slot_s[FA_BC]; /* cache slot of each position of the current tile, -1 past maxp */
    const int G = a.n_head / a.n_kv_head, TB = FA_BR / G;
    const int g = blockIdx.y, t0 = blockIdx.x * TB;
    const int kv_dim = a.n_kv_head * HD, q_dim = a.n_head * HD;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gr = lane >> 2, tg = lane & 3;
    for (int r = tid; r < FA_BR; r += blockDim.x) {
        const int t = t0 + r / G;
        const bool ok = r < TB * G && t < a.n_tokens;
        seq_s[r] = ok ? a.seq_row[t] : -1;
        pos_s[r] = ok ? a.pos[t] : -1;
    }
    __syncthreads();
    /* this thread's rows: r0 (fragment rows gr) and r1 (gr + 8) of its warp */
    const int r0 = warp * 16 + gr, r1 = r0 + 8;
    const int sq0 = seq_s[r0], sq1 = seq_s[r1], ps0 = pos_s[r0], ps1 = pos_s[r1];
    const float *q0 = sq0 >= 0 ? a.q + (int64_t)(t0 + r0 / G) * q_dim + (int64_t)(g * G + r0 % G) * HD : NULL;
    const float *q1 = sq1 >= 0 ? a.q + (int64_t)(t0 + r1 / G) * q_dim + (int64_t)(g * G + r1 % G) * HD : NULL;
    uint32_t qa[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        const int d = kk * 16 + tg * 2;
        float2 x0 = make_float2(0.f, 0.f), x1 = x0, x2 = x0, x3 = x0;
        if (q0) { x0 = *(const float2 *)(q0 + d); x2 = *(const float2 *)(q0 + d + 8); }
        if (q1) { x1 = *(const float2 *)(q1 + d); x3 = *(const float2 *)(q1 + d + 8); }
        qa[kk][0] = fa_pack(x0.x, x0.y);
        qa[kk][1] = fa_pack(x1.x, x1.y);
        qa[kk][2] = fa_pack(x2.x, x2.y);
        qa[kk][3] = fa_pack(x3.x, x3.y);
    }
    float o[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    const float sl2 = a.scale * 1.4426950408889634f;

    for (int rr = 0; rr < FA_BR; rr++) {
        const int sq = seq_s[rr];
        if (sq < 0) continue;
        bool first = true;
        for (int r = 0; r < rr && first; r++) first = seq_s[r] != sq;
        if (!first) continue; /* handled with an earlier row */
        int maxp = 0;
        for (int r = rr; r < FA_BR; r++)
            if (seq_s[r] == sq && pos_s[r] > maxp) maxp = pos_s[r];
        const int32_t *bt = a.block_table + (int64_t)sq * a.max_blocks;
        const bool in0 = sq0 == sq, in1 = sq1 == sq;
        int wmax = max(in0 ? ps0 : -1, in1 ? ps1 : -1); /* largest position this warp needs */
        for (int o2 = 16; o2 > 0; o2 >>= 1) wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, o2));

        for (int p0 = 0; p0 <= maxp; p0 += FA_BC) {
            /* Tile load: the slots first, then each thread issues all its 16-byte loads before
             * storing any (K: HD / 16 chunks of 8 elements, V: HD / 32 position pairs), so a tile
             * costs about one memory latency instead of one per element group. */
            if (tid < FA_BC) slot_s[tid] = p0 + tid <= maxp ? att_slot(bt, a.block_size, p0 + tid) : -1;
            __syncthreads(); /* slots ready; the previous tile is consumed */
            {
                constexpr int NK = FA_BC * HD / 8 / 128, NV = (FA_BC / 2) * (HD / 8) / 128;
                kv_raw8<T> kr[NK], va[NV], vb[NV];
#pragma unroll
                for (int i = 0; i < NK; i++) {
                    const int c = tid + i * 128, j = c / (HD / 8), d = (c % (HD / 8)) * 8;
                    const int64_t sl = slot_s[j];
                    if (sl >= 0) kv_load8(kr[i], kv_at<T>(a.k_cache, sl, kv_dim, g * HD + d), kv_fmt<T>::scale_off(kv_dim, g * HD + d));
                    else kv_zero8(kr[i]);
                }
#pragma unroll
                for (int i = 0; i < NV; i++) { /* lanes of a warp: 32 position pairs of one chunk */
                    const int c = tid + i * 128, jp = c % (FA_BC / 2), d = (c / (FA_BC / 2)) * 8;
                    const int64_t sa = slot_s[2 * jp], sb = slot_s[2 * jp + 1];
                    const int so = kv_fmt<T>::scale_off(kv_dim, g * HD + d);
                    if (sa >= 0) kv_load8(va[i], kv_at<T>(a.v_cache, sa, kv_dim, g * HD + d), so);
                    else kv_zero8(va[i]);
                    if (sb >= 0) kv_load8(vb[i], kv_at<T>(a.v_cache, sb, kv_dim, g * HD + d), so);
                    else kv_zero8(vb[i]);
                }
#pragma unroll
                for (int i = 0; i < NK; i++) {
                    const int c = tid + i * 128, j = c / (HD / 8), d = (c % (HD / 8)) * 8;
                    *reinterpret_cast<uint4 *>(k_s + j * KS + d) = kv_h8(kr[i]);
                }
#pragma unroll
                for (int i = 0; i < NV; i++) {
                    const int c = tid + i * 128, jp = c % (FA_BC / 2), d = (c / (FA_BC / 2)) * 8;
                    const uint4 ha = kv_h8(va[i]), hb = kv_h8(vb[i]);
                    const uint32_t wa[4] = {ha.x, ha.y, ha.z, ha.w}, wb[4] = {hb.x, hb.y, hb.z, hb.w};
                    uint32_t *dst = reinterpret_cast<uint32_t *>(vt_s + d * VS + 2 * jp);
#pragma unroll
                    for (int w = 0; w < 4; w++) { /* dims d + 2w, d + 2w + 1: (pos 2jp, pos 2jp + 1) pairs */
                        dst[(2 * w) * (VS / 2)] = __byte_perm(wa[w], wb[w], 0x5410);
                        dst[(2 * w + 1) * (VS / 2)] = __byte_perm(wa[w], wb[w], 0x7632);
                    }
                }
            }
            __syncthreads();
            if (p0 > wmax) continue; /* warp-uniform: no row of this warp sees this tile */

            float sfr[FA_BC / 8][4];
#pragma unroll
            for (int n = 0; n < FA_BC / 8; n++) sfr[n][0] = sfr[n][1] = sfr[n][2] = sfr[n][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
                for (int n = 0; n < FA_BC / 8; n++) {
                    const __half *kp = k_s + (n * 8 + gr) * KS + kk * 16 + tg * 2;
                    fa_mma(sfr[n], qa[kk], fa_ld32(kp), fa_ld32(kp + 8));
                }
            float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
            for (int n = 0; n < FA_BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int p = p0 + n * 8 + tg * 2 + (e & 1);
                    const bool vis = e < 2 ? (in0 && p <= ps0) : (in1 && p <= ps1);
                    const float v = vis ? sfr[n][e] * sl2 : -INFINITY;
                    sfr[n][e] = v;
                    if (e < 2) mx0 = fmaxf(mx0, v);
                    else mx1 = fmaxf(mx1, v);
                }
            const FaStep f = fa_step(m0, m1, mx0, mx1);
            const float mn0 = f.mn0, mn1 = f.mn1, c0 = f.c0, c1 = f.c1, b0 = f.b0, b1 = f.b1;
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
            for (int n = 0; n < FA_BC / 8; n++) {
                sfr[n][0] = exp2f(sfr[n][0] - b0);
                sfr[n][1] = exp2f(sfr[n][1] - b0);
                sfr[n][2] = exp2f(sfr[n][2] - b1);
                sfr[n][3] = exp2f(sfr[n][3] - b1);
                s0 += sfr[n][0] + sfr[n][1];
                s1 += sfr[n][2] + sfr[n][3];
            }
            l0 = l0 * c0 + s0;
            l1 = l1 * c1 + s1;
            m0 = mn0;
            m1 = mn1;
            uint32_t pa[FA_BC / 16][4];
#pragma unroll
            for (int kk = 0; kk < FA_BC / 16; kk++) {
                pa[kk][0] = fa_pack(sfr[2 * kk][0], sfr[2 * kk][1]);
                pa[kk][1] = fa_pack(sfr[2 * kk][2], sfr[2 * kk][3]);
                pa[kk][2] = fa_pack(sfr[2 * kk + 1][0], sfr[2 * kk + 1][1]);
                pa[kk][3] = fa_pack(sfr[2 * kk + 1][2], sfr[2 * kk + 1][3]);
            }
#pragma unroll
            for (int n = 0; n < HD / 8; n++) {
                float tacc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int kk = 0; kk < FA_BC / 16; kk++) {
                    const __half *vp = vt_s + (n * 8 + gr) * VS + kk * 16 + tg * 2;
                    fa_mma(tacc, pa[kk], fa_ld32(vp), fa_ld32(vp + 8));
                }
                o[n][0] = in0 ? o[n][0] * c0 + tacc[0] : o[n][0];
                o[n][1] = in0 ? o[n][1] * c0 + tacc[1] : o[n][1];
                o[n][2] = in1 ? o[n][2] * c1 + tacc[2] : o[n][2];
                o[n][3] = in1 ? o[n][3] * c1 + tacc[3] : o[n][3];
            }
        }
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float *out0 = sq0 >= 0 ? a.out + (int64_t)(t0 + r0 / G) * q_dim + (int64_t)(g * G + r0 % G) * HD : NULL;
    float *out1 = sq1 >= 0 ? a.out + (int64_t)(t0 + r1 / G) * q_dim + (int64_t)(g * G + r1 % G) * HD : NULL;
#pragma unroll
    for (int n = 0; n < HD / 8; n++) {
        const int d = n * 8 + tg * 2;
        if (out0) *(float2 *)(out0 + d) = make_float2(o[n][0] / l0, o[n][1] / l0);
        if (out1) *(float2 *)(out1 + d) = make_float2(o[n][2] / l1, o[n][3] / l1);
    }
}
#endif

static int g_attn_tc_enabled = 1;

/* 1 when the tensor-core prefill path will run for head dim hd on the current device. */
static int attn_tc_usable(int hd) { return g_attn_tc_enabled && attn_cc_major() >= 8 && (hd == 64 || hd == 128); }

extern "C" int rf_gpu_attention_prefill_tc(int enable, int head_dim) {
    if (enable >= 0) g_attn_tc_enabled = enable != 0;
    return attn_tc_usable(head_dim);
}

template <typename T>
static int prefill_launch(gpuStream_t st, const rf_gpu_attn_args *a) {
#if RF_GPU_CUDA
    const int G = a->n_kv_head > 0 ? a->n_head / a->n_kv_head : 0;
    const bool aligned = (((uintptr_t)a->k_cache | (uintptr_t)a->v_cache) % 16 == 0) &&
                         (((uintptr_t)a->q | (uintptr_t)a->out) % 8 == 0);
    if (G >= 1 && G <= FA_BR && aligned && attn_tc_usable(a->head_dim)) {
        const int TB = FA_BR / G;
        dim3 grid((unsigned)((a->n_tokens + TB - 1) / TB), (unsigned)a->n_kv_head);
        if (a->head_dim == 64)
            attn_mma_kernel<64, T><<<grid, 128, 0, st>>>(*a);
        else
            attn_mma_kernel<128, T><<<grid, 128, 0, st>>>(*a);
        return (int)gpuGetLastError();
    }
#endif
    const size_t smem = attn_tile_smem(a->head_dim);
    if (smem > 48 * 1024) {
        int rc = (int)gpuFuncSetMaxDynSmem(attn_tile_kernel<T>, smem);
        if (rc) return rc;
    }
    dim3 grid((unsigned)((a->n_tokens + ATT_BQ - 1) / ATT_BQ), (unsigned)a->n_head);
    attn_tile_kernel<T><<<grid, ATT_THREADS, smem, st>>>(*a);
    return (int)gpuGetLastError();
}

extern "C" int rf_gpu_attention_prefill(void *stream, const rf_gpu_attn_args *a) {
    if (a->n_tokens <= 0) return 0;
    if (bad_kv_type(a->kv_type)) return invalid_value();
    if ((a->kv_type == RF_TYPE_Q8_0 || a->kv_type == RF_TYPE_Q4_0) && a->head_dim % 32) return invalid_value();
    return a->kv_type == RF_TYPE_F16    ? prefill_launch<__half>((gpuStream_t)stream, a)
           : a->kv_type == RF_TYPE_Q8_0 ? prefill_launch<kv_q8>((gpuStream_t)stream, a)
           : a->kv_type == RF_TYPE_Q4_0 ? prefill_launch<kv_q4>((gpuStream_t)stream, a)
                                        : prefill_launch<float>((gpuStream_t)stream, a);
}
