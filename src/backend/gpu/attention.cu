/* attention.cu: attention over the paged KV cache (twin of cpu_attention).
 *
 * Common contract. q: [n_tokens][n_head * head_dim]; out: same shape; k_cache, v_cache:
 * [n_slots][n_kv_head * head_dim] f32. Token t, query head h reads KV head g = h / (n_head /
 * n_kv_head) at positions p = 0..pos[t] of its sequence, slot = block_table[seq_row[t] *
 * max_blocks + p / block_size] * block_size + p % block_size. pos, seq_row and block_table are
 * read from device memory (never from the host), so a captured graph replays with new data.
 * Only visible positions are read: cache slots past a sequence's end may hold anything.
 * out[t,h] = sum_p softmax_p(scale * q.k_p) v_p, with an online softmax (running max and sum),
 * so no score matrix is stored. head_dim <= RF_GPU_ATTN_MAX_HEAD_DIM. Results differ from the
 * CPU by summation order only (~1e-6 relative). NaN in a visible q/k/v makes the outputs that
 * depend on it NaN (as on the CPU). No alignment requirement. */
#include "gpu_port.h"
#include "kernels.h"

#define ATT_CHUNK 256                                      /* positions per split chunk */
#define ATT_MAXJ (RF_GPU_ATTN_MAX_HEAD_DIM / 32)           /* head dims per lane, upper bound */

static __device__ __forceinline__ int64_t att_slot(const int32_t *bt, int block_size, int p) {
    return (int64_t)bt[p / block_size] * block_size + p % block_size;
}

/* ---- decode: split-K (flash-decoding) ---------------------------------------------------------
 * attn_split_kernel: grid (n_tokens * n_head, n_split), blockDim a multiple of warpSize.
 * Split s takes the chunks c = s, s + n_split, ... of ATT_CHUNK positions of its token; inside a
 * block each warp takes positions in turn (lanes split the head dimension), keeping its own
 * online-softmax state; the warps are merged in shared memory and the block writes its partial
 * (m, l, acc[head_dim]) to scratch. A split with no positions writes m = -inf, l = 0, acc = 0.
 * Correct for any n_split >= 1 and any positions (the split count is only a speed choice). */
static __global__ void attn_split_kernel(rf_gpu_attn_args a, float *part) {
    const int ws = warpSize, lane = threadIdx.x % ws, w = threadIdx.x / ws, nw = blockDim.x / ws;
    const int th = blockIdx.x, t = th / a.n_head, h = th % a.n_head;
    const int s = blockIdx.y, n_split = gridDim.y;
    const int hd = a.head_dim, g = h / (a.n_head / a.n_kv_head), kv_dim = a.n_kv_head * hd;
    const int32_t *bt = a.block_table + (int64_t)a.seq_row[t] * a.max_blocks;
    const int n_pos = a.pos[t] + 1;
    const float *qh = a.q + ((int64_t)t * a.n_head + h) * hd;

    float qv[ATT_MAXJ], acc[ATT_MAXJ];
#pragma unroll
    for (int j = 0; j < ATT_MAXJ; j++) {
        const int d = lane + j * ws;
        qv[j] = d < hd ? qh[d] : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int c = s; c * ATT_CHUNK < n_pos; c += n_split) {
        const int p_end = min((c + 1) * ATT_CHUNK, n_pos);
        for (int p = c * ATT_CHUNK + w; p < p_end; p += nw) {
            const int64_t off = att_slot(bt, a.block_size, p) * kv_dim + (int64_t)g * hd;
            const float *kp = a.k_cache + off, *vp = a.v_cache + off;
            float dot = 0.0f;
#pragma unroll
            for (int j = 0; j < ATT_MAXJ; j++) {
                const int d = lane + j * ws;
                if (d < hd) dot += qv[j] * kp[d];
            }
            const float sc = rf_warp_sum(dot) * a.scale;
            const float m_new = sc > m ? sc : m;
            const float corr = expf(m - m_new);
            const float wt = expf(sc - m_new);
            l = l * corr + wt;
#pragma unroll
            for (int j = 0; j < ATT_MAXJ; j++) {
                const int d = lane + j * ws;
                if (d < hd) acc[j] = acc[j] * corr + wt * vp[d];
            }
            m = m_new;
        }
    }
    /* merge the warps of this block */
    extern __shared__ float sm[]; /* [nw][hd] acc, then [nw] m, [nw] l */
    float *sacc = sm, *sm_m = sm + nw * hd, *sm_l = sm_m + nw;
#pragma unroll
    for (int j = 0; j < ATT_MAXJ; j++) {
        const int d = lane + j * ws;
        if (d < hd) sacc[w * hd + d] = acc[j];
    }
    if (lane == 0) {
        sm_m[w] = m;
        sm_l[w] = l;
    }
    __syncthreads();
    float M = -INFINITY;
    for (int i = 0; i < nw; i++) M = sm_m[i] > M ? sm_m[i] : M;
    float *dst = part + ((int64_t)th * n_split + s) * (hd + 2);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float v = 0.0f;
        for (int i = 0; i < nw; i++)
            if (sm_l[i] != 0.0f) v += sacc[i * hd + d] * expf(sm_m[i] - M);
        dst[2 + d] = v;
    }
    if (threadIdx.x == 0) {
        float L = 0.0f;
        for (int i = 0; i < nw; i++)
            if (sm_l[i] != 0.0f) L += sm_l[i] * expf(sm_m[i] - M);
        dst[0] = M;
        dst[1] = L;
    }
}

/* attn_combine_kernel: one block per (token, head): merges the n_split partials,
 * out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M), M = max_s m_s. Empty partials (l == 0)
 * are skipped; split 0 always holds position 0, so at least one partial is non-empty. */
static __global__ void attn_combine_kernel(const float *part, int n_split, int hd, float *out) {
    const int th = blockIdx.x;
    const float *p0 = part + (int64_t)th * n_split * (hd + 2);
    float M = -INFINITY, L = 0.0f;
    for (int s = 0; s < n_split; s++) M = p0[s * (hd + 2)] > M ? p0[s * (hd + 2)] : M;
    for (int s = 0; s < n_split; s++) {
        const float *ps = p0 + s * (hd + 2);
        if (ps[1] != 0.0f) L += ps[1] * expf(ps[0] - M);
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float *ps = p0 + s * (hd + 2);
            if (ps[1] != 0.0f) v += ps[2 + d] * expf(ps[0] - M);
        }
        out[(int64_t)th * hd + d] = v / L;
    }
}

extern "C" size_t rf_gpu_attn_decode_scratch(int n_tokens, int n_head, int head_dim, int n_split) {
    return (size_t)n_tokens * n_head * n_split * (head_dim + 2) * sizeof(float);
}

extern "C" int rf_gpu_attention_decode(void *stream, const rf_gpu_attn_args *a, int n_split, float *scratch) {
    if (a->n_tokens <= 0) return 0;
    if (n_split < 1) n_split = 1;
    const int bs = 128;
    const int nw_max = bs / 16; /* upper bound on warps per block for any warp size >= 16 */
    const size_t smem = ((size_t)nw_max * a->head_dim + 2 * nw_max) * sizeof(float);
    dim3 grid((unsigned)(a->n_tokens * a->n_head), (unsigned)n_split);
    attn_split_kernel<<<grid, bs, smem, (gpuStream_t)stream>>>(*a, scratch);
    int rc = (int)gpuGetLastError();
    if (rc) return rc;
    attn_combine_kernel<<<a->n_tokens * a->n_head, 128, 0, (gpuStream_t)stream>>>(scratch, n_split, a->head_dim,
                                                                                   a->out);
    return (int)gpuGetLastError();
}

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
                    const int64_t off = att_slot(bt, a.block_size, p) * kv_dim + (int64_t)g * hd + d;
                    k_s[j * (hd + 1) + d] = a.k_cache[off];
                    v_s[j * hd + d] = a.v_cache[off];
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

extern "C" int rf_gpu_attention_prefill(void *stream, const rf_gpu_attn_args *a) {
    if (a->n_tokens <= 0) return 0;
    const size_t smem = attn_tile_smem(a->head_dim);
    if (smem > 48 * 1024) {
        int rc = (int)gpuFuncSetMaxDynSmem(attn_tile_kernel, smem);
        if (rc) return rc;
    }
    dim3 grid((unsigned)((a->n_tokens + ATT_BQ - 1) / ATT_BQ), (unsigned)a->n_head);
    attn_tile_kernel<<<grid, ATT_THREADS, smem, (gpuStream_t)stream>>>(*a);
    return (int)gpuGetLastError();
}
