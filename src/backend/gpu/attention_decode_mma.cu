/* attention_decode_mma.cu: the decode attention on tensor cores (CUDA sm_80+), a twin of
 * cpu_attention for long contexts and, with rope fused, for one query head per KV head at every
 * context: the kernel, its instances, and when and how it launches. attention_decode.cu's
 * launchers choose between it and the f32 kernels (attention_decode.cuh). On HIP only the
 * entry points are compiled, and they say no. */
#include <stdlib.h>
#include <type_traits>

#include "attention_decode.cuh"
#include "attention_mma.cuh"
#include "rope_device.cuh"
#include "phase_stamps.cuh"
#include "mbarrier.cuh"
#if RF_GPU_CUDA
#include <cuda.h> /* CUtensorMap (the types only: the encoder comes from the driver at run time) */
#endif

#if RF_GPU_CUDA
/* ---- decode on tensor cores (CUDA sm_80+): long contexts, and MHA with rope fused ----------------
 * attn_dec_mma_kernel<HD, T, TU, NT, MINB, RK>: grid (n_tokens * n_kv_head, n_split), DM_THREADS threads
 * (4 warps of 32: the mma.sync fragment layout is defined for 32-lane warps; MINB: the launch
 * bound's blocks per SM, a register cap). Block (t, g, s) takes all G = n_head / n_kv_head query
 * heads of group g (1 <= G <= 8 NT, NT = 1 or 2; G = 1 is not launched for f32 caches) for token t
 * and the positions of split s as attn_dec_kernel does ([s * per, min((s + 1) * per, n_pos)), per =
 * ceil(n_pos / n_split), n_pos = pos[t] + 1 read on the device); warp w takes rounds of NP = 16 * TU
 * positions w, w + 4, ... of that range. The products are transposed so that the positions take the
 * mma's 16 rows and the heads its 8 columns (NT tiles of 8 heads): per round, on mma.sync m16n8k16
 * (f16 operands, f32 accumulation), S^T = K Q^T per 16 positions (rows: positions; columns: heads,
 * those >= G zero; k: head dims), one online-softmax step per head over the round's NP positions in
 * base 2 (scale * log2 e folded in), O^T += V^T P^T (P rounded to f16; rows: head dims; columns:
 * heads; k: the 16 positions). P^T's B fragment is S^T's C fragment transposed per 8 x 8 block
 * (movmatrix). With the heads on the rows (S = Q K^T), a group of G <= 8 filled G of 16 rows: this
 * takes half the mmas, exponentials and accumulator scaling per position (1B file at 32k positions,
 * q4_0 cache: +2.2%; 7B MHA at 8k: +6.3%; docs/PERF.md). Each lane loads its own fragments, 16-byte
 * vectors of one row: from the cache, or for q8_0 / q4_0 on sm_90 (BT, below the helpers) from a
 * ring of rounds that tensor copies fill in shared memory. That works because the order of an
 * mma's k (dims in S^T, positions in O^T) and of O^T's rows (dims) is free as long as both operands
 * agree; lane (r, c), r = lane / 4, c = lane % 4, holds
 *   for S^T: positions r and 8 + r of each 16-position tile (A rows), dims [c * HD / 4, (c + 1) *
 *     HD / 4); step kk takes dims c * HD / 4 + 4 kk .. + 3 (q's B fragment: head 8n + r of tile n,
 *     the same dims); C: heads 8n + 2c and 8n + 2c + 1, whose softmax state (m, l) it keeps, the
 *     same in the 8 lanes of one c;
 *   for O^T: positions 2c, 2c + 1, 8 + 2c, 9 + 2c of each tile (A's k), dims [r * HD / 8, (r + 1) *
 *     HD / 8): output tile i, row r is dim r * HD / 8 + 2i, row r + 8 dim r * HD / 8 + 2i + 1.
 * All of a round's K and V loads are issued before any is used; the next round's cache slots are
 * looked up (one per lane, fetched by shuffle) during the current one. The end is attn_dec_kernel's
 * (dec_block_out): the same partials, combined by attn_combine_kernel, which also writes the int8
 * copy (the fused combine's serial loop over the splits is too slow for G * head_dim outputs); the
 * RK instance (below the helpers) ends as attn_dec_kernel's fused one.
 * Precision as attn_mma_kernel: q, k, v and p rounded to f16 (11 significant bits), scores, sums and
 * accumulators f32, exponentials with results below 2^-126 flushed to zero: outputs differ from the
 * CPU by ~1e-3 relative of the output scale. Limits: |q|, |k|, |v| < 65504 (f16 range); an inf v
 * at a position whose weight rounds to 0 in f16, or at the first position of a warp's last round,
 * gives NaN (0 * inf) where the CPU gives inf. Positions outside the split are not used; in a
 * warp's last round those past its end read the round's first position again (dm_slot, dm_lds).
 * Needs q and the caches 16-byte aligned (the launcher checks). Dynamic shared memory: dec_smem(HD,
 * G), one warp's more for RK, and BT's ring (dec_bt_smem). */
#define DM_THREADS 128
#define DM_MAX_G 16
static_assert(DM_RK_MAX_G == DM_THREADS / 32, "the RK instance's q_rot has one row per warp");
/* The q8_0 / q4_0 rope-fused instances at head_dim 128: positions per round / 16 and the blocks
 * per SM their registers are capped for (-D to experiment). */
#ifndef RK_TU_Q8
#define RK_TU_Q8 2
#endif
#ifndef RK_MINB_Q8
#define RK_MINB_Q8 3
#endif
#ifndef RK_TU_Q4
#define RK_TU_Q4 2
#endif
#ifndef RK_MINB_Q4
#define RK_MINB_Q4 4
#endif
/* The plain q8_0 / q4_0 instances at head_dim 128 (GQA files from RF_GPU_ATTN_TC_MIN_POS): the
 * same two choices (-D to experiment). */
#ifndef DM_TU_Q8
#define DM_TU_Q8 1
#endif
#ifndef DM_MINB_Q8
#define DM_MINB_Q8 3
#endif
#ifndef DM_TU_Q4
#define DM_TU_Q4 2
#endif
#ifndef DM_MINB_Q4
#define DM_MINB_Q4 3
#endif
static_assert(DM_THREADS <= DEC_THREADS, "dec_smem sizes the warps' end states for at most DEC_THREADS / 32 warps");

/* N consecutive cache elements of one row within one quantized block (N = 8, 16 or 32, the first
 * a multiple of N), in stored form: the float formats as N / 8 kv_raw8; q8_0 and q4_0 as their N
 * codes (one load of the N or N / 2 bytes, up to 16 per load) and the block's scale (one load,
 * not one per 8 elements). kv_piece_load's p: the address of the first element (kv_at; for q4_0
 * the byte holding it), soff: the byte offset from there to the block's scale (scale_off).
 * Streaming loads (kv_ldv) where the caller asks for them. */
template <typename T, int N> struct kv_piece {
    kv_raw8<T> p[N / 8];
};
template <typename Q, int N> struct kv_piece_q {
    uint32_t q[N / (kv_fmt<Q>::Q4 ? 8 : 4)]; /* the codes' 32-bit words */
    __half d;
};
template <int N> struct kv_piece<kv_q8, N> : kv_piece_q<kv_q8, N> {};
template <int N> struct kv_piece<kv_q4, N> : kv_piece_q<kv_q4, N> {};
template <typename T, int N, bool S = true>
static __device__ __forceinline__ void kv_piece_load(kv_piece<T, N> &x, const char *p, int soff) {
    static_assert(kv_fmt<T>::Q8 || kv_fmt<T>::Q4, "q8_0 / q4_0 pieces (the float formats: below)");
    constexpr int W = sizeof x.q / 4;
    if (W == 1) {
        x.q[0] = kv_ldv<S, uint32_t>(p);
    } else if (W == 2) {
        const uint2 v = kv_ldv<S, uint2>(p);
        x.q[0] = v.x, x.q[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < W / 4; i++) {
            const uint4 v = kv_ldv<S, uint4>(p + 16 * i);
            x.q[4 * i] = v.x, x.q[4 * i + 1] = v.y, x.q[4 * i + 2] = v.z, x.q[4 * i + 3] = v.w;
        }
    }
    x.d = kv_ldv<S, __half>(p + soff);
}
/* The float formats' pieces, addressed from the cache pointer per 8 elements (kv_at). */
template <typename T, int N, bool S = true>
static __device__ __forceinline__ void kv_piece_load(kv_piece<T, N> &x, const void *cache, int slot, int kv_dim, int e) {
#pragma unroll
    for (int i = 0; i < N / 8; i++) kv_load8<S>(x.p[i], kv_at<T>(cache, slot, kv_dim, e + 8 * i), 0);
}
/* The piece as N / 2 f16 pairs (element 2i in the low half of w[i]), rounded as kv_h8 rounds. */
template <typename T, int N> static __device__ __forceinline__ void kv_piece_h(const kv_piece<T, N> &x, uint32_t *w) {
#pragma unroll
    for (int i = 0; i < N / 8; i++) {
        const uint4 h = kv_h8(x.p[i]);
        w[4 * i] = h.x, w[4 * i + 1] = h.y, w[4 * i + 2] = h.z, w[4 * i + 3] = h.w;
    }
}
template <int N> static __device__ __forceinline__ void kv_piece_h(const kv_piece<kv_q8, N> &x, uint32_t *w) {
    const __half2 d2 = __half2half2(x.d);
#pragma unroll
    for (int i = 0; i < N / 4; i++) q8_h4(x.q[i], d2, w[2 * i], w[2 * i + 1]);
}
template <int N> static __device__ __forceinline__ void kv_piece_h(const kv_piece<kv_q4, N> &x, uint32_t *w) {
    const __half2 d2 = __half2half2(x.d);
#pragma unroll
    for (int i = 0; i < N / 8; i++) q4_h8(x.q[i], d2, w + 4 * i);
}

/* ---- K / V rounds by tensor copies (BT; CUDA sm_90) -----------------------------------------------
 * A warp's round of NP positions lies in one cache block when its first position is a multiple of
 * NP and block_size a power of two >= NP: NP consecutive slots, so its K codes, K scales, V codes
 * and V scales are four boxes of a 2D tensor map over the cache (rows: slots, columns: row bytes),
 * one bulk tensor copy each into the warp's ring stage, completed on one mbarrier. Lane 0 keeps
 * NS rounds in flight; no registers hold bytes in flight (the register rounds, one in flight per
 * warp, waited on their loads for half of a 7B step's loop at 8k positions: ncu, H200,
 * docs/PERF.md, fifty-sixth session). The stage: [NP][CB] K codes, [NP][16] K scales (the 16-byte
 * aligned span holding the head's HD / 16 scale bytes, at sbo within it), then the same for V.
 * With DmMaps::early the first rounds are issued before the grid dependency wait, as the f16
 * instances' L2 prefetch is: rows of positions before the one this step writes (RK: its own;
 * otherwise rope's launch writes it) come from earlier steps, or from copy-on-write copies that
 * precede the step's first kernel. The maps' row count is a bound (2^28 slots); only slots of
 * the block table are read. */
struct DmMaps {
    CUtensorMap kc, ks, vc, vs;
    int early; /* the first rounds issued before the grid dependency wait (one token per launch) */
};
template <int HD, typename T, int NP> struct DmStage {
    static constexpr int CB = kv_fmt<T>::Q4 ? HD / 2 : HD; /* code bytes of one head's row */
    static constexpr int KC = 0, KS = NP * CB, VC = KS + NP * 16, VS = VC + NP * CB, BYTES = VS + NP * 16;
    static_assert(KS % 128 == 0 && VC % 128 == 0 && VS % 128 == 0 && BYTES % 128 == 0, "tensor copies land 128-byte aligned");
};
/* Ring stages per warp (rounds in flight): two, but one for the rope-fused q8_0 instance at
 * head_dim 128 (RK_BT_NS_Q8), whose two stages of 9 KB per warp would cost it a block per SM. */
#ifndef DM_BT_NS
#define DM_BT_NS 2
#endif
#ifndef RK_BT_NS_Q8
#define RK_BT_NS_Q8 1
#endif
/* One box of map m at (x bytes, row y) into dst (128-byte aligned), completing on bar. */
static __device__ __forceinline__ void dm_tma2d(void *dst, const CUtensorMap *m, int x, int y, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(gpu_smem_u32(dst)), "l"(m), "r"(x), "r"(y), "r"(gpu_smem_u32(bar))
                 : "memory");
#else
    (void)dst, (void)m, (void)x, (void)y, (void)bar;
    __trap();
#endif
}
/* One round's four boxes into stage d (lane 0; the round's first slot y). */
template <class S>
static __device__ __forceinline__ void dm_bt_issue(char *d, const DmMaps *m, int xc, int xs, int y, uint64_t *bar) {
    gpu_mbar_arrive_expect(bar, S::BYTES);
    dm_tma2d(d + S::KC, &m->kc, xc, y, bar);
    dm_tma2d(d + S::KS, &m->ks, xs, y, bar);
    dm_tma2d(d + S::VC, &m->vc, xc, y, bar);
    dm_tma2d(d + S::VS, &m->vs, xs, y, bar);
}
/* A q8_0 / q4_0 piece from a ring stage: its codes at `codes`, its block's scale at `scale`. */
template <typename T, int N>
static __device__ __forceinline__ void kv_piece_lds(kv_piece<T, N> &x, const char *codes, const char *scale) {
    constexpr int W = sizeof x.q / 4;
    if (W == 1) {
        x.q[0] = *(const uint32_t *)codes;
    } else if (W == 2) {
        const uint2 v = *(const uint2 *)codes;
        x.q[0] = v.x, x.q[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < W / 4; i++) {
            const uint4 v = *(const uint4 *)(codes + 16 * i);
            x.q[4 * i] = v.x, x.q[4 * i + 1] = v.y, x.q[4 * i + 2] = v.z, x.q[4 * i + 3] = v.w;
        }
    }
    x.d = *(const __half *)scale;
}

/* One round of a warp: the K and V pieces its lane loads for NP = 16 * TU positions. */
template <int HD, typename T, int TU> struct DmRound {
    kv_piece<T, HD / 4> k[TU][2];
    kv_piece<T, HD / 8> v[TU][4];
};

/* att_slot with bs_log2 = log2(block_size) when that is a power of two (the runtime's 32), -1
 * otherwise (att_bs_log2): shifts instead of the ~25 instructions of a division per lookup. */
static __device__ __forceinline__ int att_bs_log2(int block_size) {
    return (block_size & (block_size - 1)) == 0 ? __ffs(block_size) - 1 : -1;
}
static __device__ __forceinline__ int att_slot2(const int32_t *bt, int block_size, int bs_log2, int p) {
    return bs_log2 >= 0 ? (bt[p >> bs_log2] << bs_log2) | (p & (block_size - 1)) : (int)att_slot(bt, block_size, p);
}

/* The slot of position p (lane l of a round's NP lanes: p = p0 + l) for dm_load: att_slot2's, or
 * for p >= pe that of lane 0's position p0 < pe (every lane calls: a shuffle). The positions past
 * the split's end then load p0's rows, whose scores the round masks (weight 0): guarded loads and
 * zero fills cost ~40 instructions of every round (not only the last). */
static __device__ __forceinline__ int dm_slot(const int32_t *bt, int block_size, int bs_log2, int p, int pe) {
    const int sl = p < pe ? att_slot2(bt, block_size, bs_log2, p) : 0, s0 = ATT_SHFL_IDX(sl, 0);
    return p < pe ? sl : s0;
}

/* Where the lane's K and V pieces are: for q8_0 / q4_0 their addresses in row 0 of the caches
 * (kv_at of the first elements), the byte offsets from there to their scales and the row length,
 * so that a piece of row `slot` is at k + slot * rb, one wide multiply-add instead of ~8
 * instructions of 64-bit arithmetic (slots are non-negative and a cache's bytes fit size_t).
 * With att_slot2, q8_0 caches at 8k / 32k positions: 1B file +0.1% / +0.4%, 7B +0.6% / +1.0%
 * (H200, docs/PERF.md, fifty-second session). The float formats address from the cache pointers
 * (kernel parameters, no registers) as kv_at does: with row bases in registers and att_slot2 the
 * GQA f16 instance took 136 registers, not 128 (3 blocks per SM, not 4), and the 1B file's f16
 * decode lost 0.7-1%. */
template <typename T> struct DmRows {
    const char *k, *v;
    int ks, vs;
    unsigned rb;
    int kv_dim, ek, ev;
};
template <typename T>
static __device__ __forceinline__ DmRows<T> dm_rows(const rf_gpu_attn_args &a, int kv_dim, int ek, int ev) {
    return DmRows<T>{kv_at<T>(a.k_cache, 0, kv_dim, ek), kv_at<T>(a.v_cache, 0, kv_dim, ev),
                     kv_fmt<T>::scale_off(kv_dim, ek), kv_fmt<T>::scale_off(kv_dim, ev),
                     (unsigned)kv_fmt<T>::row_bytes(kv_dim), kv_dim, ek, ev};
}
/* Loads the lane's K (v = false) or V piece of row `slot`. */
template <typename T, int N, bool S>
static __device__ __forceinline__ void dm_piece(kv_piece<T, N> &x, const rf_gpu_attn_args &a, const DmRows<T> &L, bool v,
                                                int slot) {
    if constexpr (kv_fmt<T>::Q8 || kv_fmt<T>::Q4)
        kv_piece_load<T, N, S>(x, (v ? L.v : L.k) + (size_t)(unsigned)slot * L.rb, v ? L.vs : L.ks);
    else kv_piece_load<T, N, S>(x, v ? a.v_cache : a.k_cache, slot, L.kv_dim, v ? L.ev : L.ek);
}

/* Issues the loads of the round at positions p0 .. p0 + NP - 1. slot: the cache slot of position
 * p0 + lane % NP, or for a position >= pe that of p0 (dm_slot), so that the round's loads need
 * no guards and no zero fills (every lane calls: shuffles). */
template <int HD, typename T, int TU, bool S = true>
static __device__ __forceinline__ void dm_load(DmRound<HD, T, TU> &R, const rf_gpu_attn_args &a, const DmRows<T> &L,
                                               int slot) {
    const int lane = threadIdx.x & 31, r = lane >> 2, c = lane & 3;
#pragma unroll
    for (int u = 0; u < TU; u++) {
#pragma unroll
        for (int n = 0; n < 2; n++) {
            dm_piece<T, HD / 4, S>(R.k[u][n], a, L, false, ATT_SHFL_IDX(slot, 16 * u + 8 * n + r));
        }
#pragma unroll
        for (int qi = 0; qi < 4; qi++) {
            dm_piece<T, HD / 8, S>(R.v[u][qi], a, L, true, ATT_SHFL_IDX(slot, 16 * u + (qi >> 1) * 8 + 2 * c + (qi & 1)));
        }
    }
}

/* dm_load's pieces from a ring stage (BT): the round's rows 0 .. NP - 1; rows nv and beyond (past
 * the split's end) read row 0 instead, as dm_slot does, so that no stale row reaches the mma. */
template <int HD, typename T, int TU>
static __device__ __forceinline__ void dm_lds(DmRound<HD, T, TU> &R, const char *st, int nv, int sbo) {
    typedef DmStage<HD, T, 16 * TU> S;
    const int lane = threadIdx.x & 31, r = lane >> 2, c = lane & 3;
#pragma unroll
    for (int u = 0; u < TU; u++) {
#pragma unroll
        for (int n = 0; n < 2; n++) {
            int row = 16 * u + 8 * n + r;
            row = row < nv ? row : 0;
            const int e = c * (HD / 4);
            kv_piece_lds<T, HD / 4>(R.k[u][n], st + S::KC + row * S::CB + kv_fmt<T>::elems(e),
                                    st + S::KS + row * 16 + sbo + (e / 32) * 2);
        }
#pragma unroll
        for (int qi = 0; qi < 4; qi++) {
            int row = 16 * u + (qi >> 1) * 8 + 2 * c + (qi & 1);
            row = row < nv ? row : 0;
            const int e = r * (HD / 8);
            kv_piece_lds<T, HD / 8>(R.v[u][qi], st + S::VC + row * S::CB + kv_fmt<T>::elems(e),
                                    st + S::VS + row * 16 + sbo + (e / 32) * 2);
        }
    }
}

/* 2^x, subnormal results flushed to zero: a weight below 2^-126 rounds to 0 in f16 anyway, and
 * exp2f's subnormal path costs three instructions per weight. */
static __device__ __forceinline__ float fa_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
/* An 8 x 8 f16 matrix in the mma fragment layout (lane r * 4 + c: row r, columns 2c, 2c + 1)
 * transposed in place (movmatrix, sm_75+). */
static __device__ __forceinline__ uint32_t fa_trans8(uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
    return y;
#else
    (void)x;
    __trap();
    return 0;
#endif
}

/* The warp's softmax state per tile n of 8 heads: heads 8n + 2c (o[i][n][0], o[i][n][2], m0[n],
 * l0[n]) and 8n + 2c + 1 (o[i][n][1], o[i][n][3], m1[n], l1[n]); m in base 2; l per lane (summed
 * over the lanes of its c at the end). */
template <int HD, int NT> struct DmState {
    float o[HD / 16][NT][4], m0[NT], m1[NT], l0[NT], l1[NT];
};

/* Adds the round at p0 (loaded by dm_load) to the state: S^T for its NP positions, one
 * online-softmax step per head, O^T += V^T P^T. */
template <int HD, typename T, int TU, int NT>
static __device__ __forceinline__ void dm_round(DmState<HD, NT> &st, const DmRound<HD, T, TU> &R,
                                                const uint32_t (*qb)[HD / 16][2], int p0, int pe, float sl2) {
    const int r = (threadIdx.x & 31) >> 2;
    float sf[TU][NT][4]; /* [u][n]: (position 16u + r: heads 8n + 2c, + 1), (16u + 8 + r: the same) */
#pragma unroll
    for (int u = 0; u < TU; u++) {
        uint32_t k0[HD / 8], k1[HD / 8];
        kv_piece_h(R.k[u][0], k0);
        kv_piece_h(R.k[u][1], k1);
#pragma unroll
        for (int n = 0; n < NT; n++) sf[u][n][0] = sf[u][n][1] = sf[u][n][2] = sf[u][n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            const uint32_t ka[4] = {k0[2 * kk], k1[2 * kk], k0[2 * kk + 1], k1[2 * kk + 1]};
#pragma unroll
            for (int n = 0; n < NT; n++) fa_mma(sf[u][n], ka, qb[n][kk][0], qb[n][kk][1]);
        }
    }
#pragma unroll
    for (int n = 0; n < NT; n++) {
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int u = 0; u < TU; u++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const bool vis = p0 + 16 * u + 8 * h + r < pe;
                sf[u][n][2 * h] = vis ? sf[u][n][2 * h] * sl2 : -INFINITY;
                sf[u][n][2 * h + 1] = vis ? sf[u][n][2 * h + 1] * sl2 : -INFINITY;
                mx0 = fmaxf(mx0, sf[u][n][2 * h]);
                mx1 = fmaxf(mx1, sf[u][n][2 * h + 1]);
            }
#pragma unroll
        for (int x = 4; x < 32; x <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));
        }
        const float mn0 = fmaxf(st.m0[n], mx0), mn1 = fmaxf(st.m1[n], mx1);
        const float c0 = mn0 == -INFINITY ? 1.0f : fa_exp2(st.m0[n] - mn0);
        const float c1 = mn1 == -INFINITY ? 1.0f : fa_exp2(st.m1[n] - mn1);
        const float b0 = mn0 == -INFINITY ? 0.0f : mn0, b1 = mn1 == -INFINITY ? 0.0f : mn1;
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int u = 0; u < TU; u++) {
            sf[u][n][0] = fa_exp2(sf[u][n][0] - b0);
            sf[u][n][1] = fa_exp2(sf[u][n][1] - b1);
            sf[u][n][2] = fa_exp2(sf[u][n][2] - b0);
            sf[u][n][3] = fa_exp2(sf[u][n][3] - b1);
            s0 += sf[u][n][0] + sf[u][n][2];
            s1 += sf[u][n][1] + sf[u][n][3];
        }
        st.l0[n] = st.l0[n] * c0 + s0;
        st.l1[n] = st.l1[n] * c1 + s1;
        st.m0[n] = mn0;
        st.m1[n] = mn1;
#pragma unroll
        for (int i = 0; i < HD / 16; i++) {
            st.o[i][n][0] *= c0, st.o[i][n][1] *= c1;
            st.o[i][n][2] *= c0, st.o[i][n][3] *= c1;
        }
    }
#pragma unroll
    for (int u = 0; u < TU; u++) {
        /* P^T's B fragments: (positions 2c, 2c + 1; head 8n + r) and (8 + 2c, 9 + 2c; head 8n + r) */
        uint32_t pb[NT][2];
#pragma unroll
        for (int n = 0; n < NT; n++) {
            pb[n][0] = fa_trans8(fa_pack(sf[u][n][0], sf[u][n][1]));
            pb[n][1] = fa_trans8(fa_pack(sf[u][n][2], sf[u][n][3]));
        }
        uint32_t vw[4][HD / 16];
#pragma unroll
        for (int qi = 0; qi < 4; qi++) kv_piece_h(R.v[u][qi], vw[qi]);
#pragma unroll
        for (int i = 0; i < HD / 16; i++) {
            /* rows r (dim 2i of the lane's piece) and r + 8 (dim 2i + 1); k: the four positions */
            const uint32_t va[4] = {__byte_perm(vw[0][i], vw[1][i], 0x5410u), __byte_perm(vw[0][i], vw[1][i], 0x7632u),
                                    __byte_perm(vw[2][i], vw[3][i], 0x5410u), __byte_perm(vw[2][i], vw[3][i], 0x7632u)};
#pragma unroll
            for (int n = 0; n < NT; n++) fa_mma(st.o[i][n], va, pb[n][0], pb[n][1]);
        }
    }
}

/* Dims d .. d + 3 (d % 4 == 0) of a row rotated at the position whose (cos, sin) table is cs / sn,
 * as dec_rope8 rotates them: v holds the four, p their NEOX partners (d +- n_rot / 2, dm_rope4_src;
 * unused for NORMAL pairs, which lie within the four). NEOX needs n_rot % 8 == 0, which
 * rf_gpu_attn_decode_rope_ok's n_rot % 16 ensures. */
static __device__ __forceinline__ int dm_rope4_src(int d, int mode, int n_rot) {
    return mode == RF_ROPE_NEOX && d < n_rot ? (d < n_rot / 2 ? d + n_rot / 2 : d - n_rot / 2) : d;
}
static __device__ __forceinline__ float4 dm_rope4(float4 v, float4 p, int d, int mode, int n_rot, const float *cs,
                                                  const float *sn) {
    float e[4] = {v.x, v.y, v.z, v.w};
    const int half = n_rot / 2;
    if (mode == RF_ROPE_NEOX) {
        if (d < n_rot) {
            const bool lo = d < half;
            const float q[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int j = (lo ? d : d - half) + i;
                e[i] = lo ? rope_lo(e[i], q[i], cs[j], sn[j]) : rope_hi(q[i], e[i], cs[j], sn[j]);
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < 4; i += 2)
            if (d + i < n_rot) {
                const float x0 = e[i], x1 = e[i + 1], c = cs[(d + i) / 2], sv = sn[(d + i) / 2];
                e[i] = rope_lo(x0, x1, c, sv);
                e[i + 1] = rope_hi(x0, x1, c, sv);
            }
    }
    return make_float4(e[0], e[1], e[2], e[3]);
}

/* RK (rope fused, one token; one query head per KV head with an f16, q8_0 or q4_0 cache, or up to
 * DM_RK_MAX_G with an f16 cache, whose rows of q the block rotates together and whose partials
 * go to attn_combine_kernel; rf_gpu_attn_decode_rope_ok; the
 * backend takes it at every context where it fits one wave, rf_gpu_attn_decode_tc_rope): as attn_dec_kernel's
 * RK instance, the (cos, sin) table is computed and (f16 caches) the first round's K / V rows are
 * prefetched into L2 before the grid dependency wait; q is loaded right after the wait (ahead of the barrier
 * that publishes the table), four dims per lane, rotated into the warp's row of shared memory and
 * read from there into the fragments; only then does the block let the output projection launch,
 * so that its early weight loads do not queue ahead of q's (7B tg128 on an H200, both together:
 * Q4_0 +2.2%, Q4_K_M +1.7%, Q8_0 +2.5%, F16 +1.0%; the trigger at the block's start was slower for
 * every 7B file, after the loop for all but Q4_K_M: docs/PERF.md, forty-seventh session); and the
 * split holding the last position reads only the positions before it: its last warp rotates k_new,
 * stores both rows (rounded to f16, or quantized by kv_pack8 as rope.cu's store kernels quantize) at
 * slot[t] and writes that one position's state (m = its score,
 * l = 1, acc = its v row) as a fifth warp's, so no warp waits for the store and nothing of it stays
 * live through the loop. The loads are streaming (evict-first) for f16 caches, as in the plain
 * instances, and plain for q8_0 / q4_0 (H200, against plain loads: 1B F16 file with an f16 cache
 * +0.3% / +1.3% at 8k / 32k positions, 7B Q4_K_M +1.2% / +0.4%, -0.15% to +0.3% at 512-2k; a
 * q4_0 cache -0.4% / -4.3%; docs/PERF.md, fifty-third session). The block writes its output itself
 * (one split) or the last split block of the group merges the partials (counters,
 * dec_combine_last), as attn_dec_kernel's fused combine. */
template <int HD, typename T, int TU, int NT, bool RK, int NS>
static __device__ __forceinline__ void attn_dec_mma_body(const rf_gpu_attn_args &a, float *part, int *counters,
                                                         const DmMaps *maps) {
    RF_STAMPS_BEGIN;
    constexpr bool BT = NS > 0; /* rounds by tensor copies through a ring of NS stages per warp */
    constexpr int NP = 16 * TU;
    static_assert(NP <= 32, "a lane looks up one position's slot per round: rounds of at most 32 positions");
    constexpr bool Q = kv_fmt<T>::Q8 || kv_fmt<T>::Q4, F16 = std::is_same<T, __half>::value;
    static_assert(!RK || ((Q || F16) && NT == 1),
                  "the fused rope: f16, q8_0 or q4_0 rows, one tile of heads");
    static_assert(!BT || Q, "tensor-copy rounds: the q8_0 / q4_0 instances");
    extern __shared__ float dsm[];
    const int G = a.n_head / a.n_kv_head, kv_dim = a.n_kv_head * HD;
    const int g = blockIdx.x % a.n_kv_head, t = blockIdx.x / a.n_kv_head, h0 = g * G;
    const int s = blockIdx.y, n_split = gridDim.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int r = lane >> 2, c = lane & 3;
    const int32_t *bt = a.block_table + (int64_t)a.seq_row[t] * a.max_blocks;
    const int n_pos = a.pos[t] + 1, per0 = (n_pos + n_split - 1) / n_split;
    const int per = BT ? (per0 + NP - 1) / NP * NP : per0; /* BT: rounds start at multiples of NP */
    const int pb = s * per, pe_all = min(n_pos, pb + per), stride = nw * NP;
    const bool own = RK && pb < pe_all && pe_all == n_pos; /* this split holds the new position */
    const int pe = own ? pe_all - 1 : pe_all;
    const int ek = g * HD + c * (HD / 4), ev = g * HD + r * (HD / 8); /* this lane's K / V piece */
    __shared__ float rope_cs[RK ? HD / 2 : 1], rope_sn[RK ? HD / 2 : 1];
    __shared__ __align__(16) float q_rot[RK ? DM_THREADS / 32 : 1][RK ? HD : 4]; /* rotated q: each warp's (G == 1), the group's heads (G > 1) */
    /* the first round's slots (the block table is written before the step) before the wait */
    int p0 = pb + warp * NP;
    /* slots by shifts for q8_0 / q4_0; the float formats keep the division (DmRows: with shifts and
     * row bases in registers the GQA f16 instance left its 128-register cap) */
    const int bs_log2 = Q ? att_bs_log2(a.block_size) : -1;
    int slot = BT ? 0 : dm_slot(bt, a.block_size, bs_log2, p0 + lane % NP, pe);
    /* BT: lane j holds the slot of the first position of this warp's round j (of the first 32) */
    const int bmask = a.block_size - 1, nr = p0 < pe ? (pe - p0 + stride - 1) / stride : 0;
    typedef DmStage<HD, T, NP> S;
    char *ring = NULL;
    uint64_t *bars = NULL;
    int xs = 0, xc = 0, sbo = 0, issued = 0;
    if constexpr (BT) {
        const int pj = p0 + lane * stride;
        slot = lane < nr ? (bt[pj >> bs_log2] << bs_log2) | (pj & bmask) : 0;
        const uint32_t sa = gpu_smem_u32(dsm); /* tensor copies land 128-byte aligned in the shared window */
        const int ring0 = (int)(((sa + (DEC_MAX_WARPS + 1) * G * (HD + 2) * (uint32_t)sizeof(float) + 127) & ~127u) - sa);
        ring = (char *)dsm + ring0 + warp * NS * S::BYTES;
        bars = (uint64_t *)((char *)dsm + ring0 + nw * NS * S::BYTES) + warp * NS;
        const int sb = g * (HD / 16);                                           /* the head's scale bytes */
        sbo = sb & 15, xs = kv_fmt<T>::elems(kv_dim) + (sb & ~15), xc = kv_fmt<T>::elems(g * HD);
        if (lane == 0)
            for (int i = 0; i < NS; i++) gpu_mbar_init(&bars[i]);
        /* rounds wholly before the position this step writes (RK: none of a split's rounds holds it) */
        if (maps->early)
            for (; issued < NS && issued < nr && (RK || p0 + issued * stride + NP < n_pos); issued++) {
                const int y = __shfl_sync(0xffffffffu, slot, issued);
                if (lane == 0) dm_bt_issue<S>(ring + issued * S::BYTES, maps, xc, xs, y, &bars[issued]);
            }
        __syncwarp();
    }
    /* RK with an f16 cache: the first round's K / V rows into L2 before the wait. Not for q8_0 /
     * q4_0 (7B Q4_K_M without it, H200: q4_0 +0.4% / +1.0% / +0.5% at 512 / 8k / 32k positions,
     * q8_0 +0.4% / +1.2%; f16 loses 0.45% at the first positions; the plain instances with it lost
     * 3% for the 1B file; docs/PERF.md, fifty-fifth session) */
    if (RK && F16 && lane < NP && p0 + lane < pe) {
        dec_prefetch_l2(kv_at<T>(a.k_cache, slot, kv_dim, g * HD), HD * (int)sizeof(T));
        dec_prefetch_l2(kv_at<T>(a.v_cache, slot, kv_dim, g * HD), HD * (int)sizeof(T));
    }
    if (RK)
        for (int i = threadIdx.x; i < a.rope.n_rot / 2; i += blockDim.x)
            rope_cos_sin((float)a.pos[t], i, a.rope.n_rot, a.rope.base, a.rope.freq_scale, a.rope.freq_factors,
                         &rope_cs[i], &rope_sn[i]);
    rf_grid_dep_wait();
    RF_STAMP(1);
    const float4 z4 = make_float4(0.f, 0.f, 0.f, 0.f);
    /* RK: lane l's four dims of q (and of the new position's k and v) and their NEOX partners' */
    const int ld = 4 * lane, lsrc = dm_rope4_src(ld, a.rope.mode, a.rope.n_rot);
    uint32_t qb[NT][HD / 16][2];
    if (RK && G > 1) {
        /* GQA (G <= DM_RK_MAX_G; from RF_GPU_ATTN_TC_MIN_POS, rf_gpu_attn_decode_tc): the block
         * rotates the group's G rows of q into q_rot[0 .. G - 1], four dims per thread, after the
         * table's barrier; lanes r < G read their head's pieces */
        __syncthreads();
        for (int i = threadIdx.x; i < G * (HD / 4); i += blockDim.x) {
            const int j = i / (HD / 4), d = 4 * (i % (HD / 4)), src = dm_rope4_src(d, a.rope.mode, a.rope.n_rot);
            const float *qh = a.q + ((int64_t)t * a.n_head + h0 + j) * HD;
            const float4 qv = *(const float4 *)(qh + d), qpv = src != d ? *(const float4 *)(qh + src) : qv;
            *(float4 *)&q_rot[j][d] = dm_rope4(qv, qpv, d, a.rope.mode, a.rope.n_rot, rope_cs, rope_sn);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            const float4 x = r < G ? *(const float4 *)&q_rot[r][c * (HD / 4) + 4 * kk] : z4;
            qb[0][kk][0] = fa_pack(x.x, x.y);
            qb[0][kk][1] = fa_pack(x.z, x.w);
        }
    } else if constexpr (RK) {
        /* One query head (G == 1). Lane l of each warp loads q's dims 4l .. 4l + 3 and their NEOX
         * partners right after the wait, rotates them once the table's barrier has passed and puts
         * them in the warp's row of q_rot, from which the lanes of the fragments' row r == 0 read
         * their pieces: one load pair and one rotation per lane, not HD / 16 of each on the four lanes
         * that hold q. q_rot[warp] is the same rotated row dec_rope8 gives. */
        const float *qh = a.q + ((int64_t)t * a.n_head + h0) * HD;
        float4 qv = z4, qpv = z4;
        if (ld < HD) {
            qv = *(const float4 *)(qh + ld);
            qpv = lsrc != ld ? *(const float4 *)(qh + lsrc) : qv;
        }
        __syncthreads();
        if (ld < HD)
            *(float4 *)&q_rot[warp][ld] = dm_rope4(qv, qpv, ld, a.rope.mode, a.rope.n_rot, rope_cs, rope_sn);
        __syncwarp();
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            const float4 x = r == 0 ? *(const float4 *)&q_rot[warp][c * (HD / 4) + 4 * kk] : z4;
            qb[0][kk][0] = fa_pack(x.x, x.y);
            qb[0][kk][1] = fa_pack(x.z, x.w);
        }
    } else {
        /* this lane's q pieces (lanes r < G of each head tile) */
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int j = 8 * n + r;
            const float *q = j < G ? a.q + ((int64_t)t * a.n_head + h0 + j) * HD : NULL;
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                const float4 x = q ? *(const float4 *)(q + c * (HD / 4) + 4 * kk) : z4;
                qb[n][kk][0] = fa_pack(x.x, x.y);
                qb[n][kk][1] = fa_pack(x.z, x.w);
            }
        }
    }
    RF_STAMP_AFTER(4, __uint_as_float(qb[0][0][0]));
    if (RK) rf_grid_dep_launch(); /* the output projection may start loading its weights */
    /* the new position, by the last warp before its loop: lane l's NE dims from nd = NE * l (four
     * for f16, as q's; eight for q8_0 / q4_0, so that four lanes hold a block of 32 as kv_pack8
     * wants). Done after the loop with its inputs loaded before it, the f16 kernel took 242
     * registers against 208 and 7B Q4_0 decode lost 0.7% (H200). */
    constexpr int NE = Q ? 8 : 4;
    const bool nown = RK && own && warp == nw - 1; /* warp-uniform */
    const int nd = NE * lane;
    const bool non = nown && nd < HD;
    const int64_t nkv = (int64_t)t * kv_dim + (int64_t)g * HD;
    float4 nk[NE / 4], nkp[NE / 4], nv[NE / 4];
#pragma unroll
    for (int i = 0; i < NE / 4; i++) {
        const int d = nd + 4 * i, src = dm_rope4_src(d, a.rope.mode, a.rope.n_rot);
        nk[i] = non ? *(const float4 *)(a.k_new + nkv + d) : z4;
        nkp[i] = non ? *(const float4 *)(a.k_new + nkv + src) : z4;
        nv[i] = non ? *(const float4 *)(a.v_new + nkv + d) : z4;
    }
    if (nown) { /* rotated, rounded to the cache's type and stored; its state m = score, l = 1,
                 * acc = v (as stored) as warp nw's */
        float kf[NE], vf[NE]; /* k and v as the cache holds them */
#pragma unroll
        for (int i = 0; i < NE / 4; i++) {
            const float4 r = dm_rope4(nk[i], nkp[i], nd + 4 * i, a.rope.mode, a.rope.n_rot, rope_cs, rope_sn);
            kf[4 * i] = r.x, kf[4 * i + 1] = r.y, kf[4 * i + 2] = r.z, kf[4 * i + 3] = r.w;
            vf[4 * i] = nv[i].x, vf[4 * i + 1] = nv[i].y, vf[4 * i + 2] = nv[i].z, vf[4 * i + 3] = nv[i].w;
        }
        if constexpr (Q) {
            kv_raw8<T> kr, vr; /* every lane packs (shuffles over its block's four lanes) */
            kv_pack8(kr, kf);
            kv_pack8(vr, vf);
            kv_cvt8(kr, kf);
            kv_cvt8(vr, vf);
            if (non) {
                const int soff = kv_fmt<T>::scale_off(kv_dim, g * HD + nd);
                kv_store8((char *)kv_at<T>(a.k_cache, a.slot[t], kv_dim, g * HD + nd), soff, kr, lane % 4 == 0);
                kv_store8((char *)kv_at<T>(a.v_cache, a.slot[t], kv_dim, g * HD + nd), soff, vr, lane % 4 == 0);
            }
        } else {
            const __half2 k01 = __floats2half2_rn(kf[0], kf[1]), k23 = __floats2half2_rn(kf[2], kf[3]);
            const __half2 v01 = __floats2half2_rn(vf[0], vf[1]), v23 = __floats2half2_rn(vf[2], vf[3]);
            if (non) {
                const int64_t row = (int64_t)a.slot[t] * kv_dim + (int64_t)g * HD + nd;
                *(uint2 *)((__half *)a.k_cache + row) = make_uint2(*(const uint32_t *)&k01, *(const uint32_t *)&k23);
                *(uint2 *)((__half *)a.v_cache + row) = make_uint2(*(const uint32_t *)&v01, *(const uint32_t *)&v23);
            }
            const float2 ka = __half22float2(k01), kb = __half22float2(k23);
            const float2 va = __half22float2(v01), vb = __half22float2(v23);
            kf[0] = ka.x, kf[1] = ka.y, kf[2] = kb.x, kf[3] = kb.y;
            vf[0] = va.x, vf[1] = va.y, vf[2] = vb.x, vf[3] = vb.y;
        }
        for (int j = 0; j < G; j++) { /* each head's score with q rotated, as above */
            const float *qr = q_rot[G == 1 ? warp : j];
            float dot = 0.0f;
            if (non)
#pragma unroll
                for (int i = 0; i < NE / 4; i++) {
                    const float4 qf = *(const float4 *)&qr[nd + 4 * i];
                    dot += qf.x * kf[4 * i] + qf.y * kf[4 * i + 1] + qf.z * kf[4 * i + 2] + qf.w * kf[4 * i + 3];
                }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
            float *w = dsm + ((int64_t)nw * G + j) * (HD + 2);
            if (lane == 0) {
                w[0] = dot * a.scale;
                w[1] = 1.0f;
            }
            if (non)
#pragma unroll
                for (int e = 0; e < NE; e++) w[2 + nd + e] = vf[e];
        }
    }
    DmState<HD, NT> st;
#pragma unroll
    for (int n = 0; n < NT; n++) {
#pragma unroll
        for (int i = 0; i < HD / 16; i++) st.o[i][n][0] = st.o[i][n][1] = st.o[i][n][2] = st.o[i][n][3] = 0.0f;
        st.m0[n] = st.m1[n] = -INFINITY;
        st.l0[n] = st.l1[n] = 0.0f;
    }
    const float sl2 = a.scale * 1.4426950408889634f;
    const DmRows<T> rows = dm_rows<T>(a, kv_dim, ek, ev);
    if constexpr (BT) {
        for (; issued < NS && issued < nr; issued++) {
            const int y = __shfl_sync(0xffffffffu, slot, issued);
            if (lane == 0) dm_bt_issue<S>(ring + issued * S::BYTES, maps, xc, xs, y, &bars[issued]);
        }
        for (int i = 0; i < nr; i++, p0 += stride) { /* warp-uniform */
            const int k = i % NS, nx = i + NS;
            gpu_mbar_wait(&bars[k], (uint32_t)(i / NS) & 1u);
            DmRound<HD, T, TU> cur;
            dm_lds<HD, T, TU>(cur, ring + k * S::BYTES, pe - p0, sbo);
            if (nx < nr) {
                if ((nx & 31) == 0) { /* the next 32 rounds' slots */
                    const int pj = p0 + (NS + lane) * stride;
                    slot = nx + lane < nr ? (bt[pj >> bs_log2] << bs_log2) | (pj & bmask) : 0;
                }
                const int y = __shfl_sync(0xffffffffu, slot, nx & 31);
                __syncwarp(); /* every lane's reads of stage k before the copy that refills it */
                if (lane == 0) {
                    gpu_fence_proxy_async();
                    dm_bt_issue<S>(ring + k * S::BYTES, maps, xc, xs, y, &bars[k]);
                }
            }
            dm_round<HD, T, TU, NT>(st, cur, qb, p0, pe, sl2);
        }
    } else {
        for (; p0 < pe; p0 += stride) { /* warp-uniform */
            DmRound<HD, T, TU> cur;
            const int sl = slot, pn = p0 + stride + lane % NP;
            slot = dm_slot(bt, a.block_size, bs_log2, pn, pe); /* the next round's, during this one */
            dm_load<HD, T, TU, !RK || F16>(cur, a, rows, sl); /* streaming but for RK's q8_0 / q4_0 (above) */
            dm_round<HD, T, TU, NT>(st, cur, qb, p0, pe, sl2);
        }
    }
    RF_STAMP_AFTER(5, st.o[0][0][0]);
    /* this warp's state per head into [warp][j][2 + HD], m in natural-log units (dec_block_out) */
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float l = h ? st.l1[n] : st.l0[n];
#pragma unroll
            for (int x = 4; x < 32; x <<= 1) l += __shfl_xor_sync(0xffffffffu, l, x);
            const int j = 8 * n + 2 * c + h;
            if (j >= G) continue;
            float *w = dsm + ((int64_t)warp * G + j) * (HD + 2);
            const float m = h ? st.m1[n] : st.m0[n];
            if (r == 0) {
                w[0] = m == -INFINITY ? -INFINITY : m * 0.6931471805599453f;
                w[1] = l;
            }
#pragma unroll
            for (int i = 0; i < HD / 16; i++) {
                w[2 + r * (HD / 8) + 2 * i] = st.o[i][n][h];
                w[2 + r * (HD / 8) + 2 * i + 1] = st.o[i][n][2 + h];
            }
        }
    __syncthreads();
    RF_STAMP(2);
    if (!RK || G > 1) { /* partials for attn_combine_kernel */
        dec_block_out(a, dsm, G, nw + (own ? 1 : 0), G, HD, t, h0, s, n_split, part, false);
        RF_STAMPS_END(RF_STAMP_ATTN);
        return;
    }
    if (n_split == 1) {
        dec_block_out1<DM_THREADS / 32 + 1>(a, dsm, HD + 2, nw + (own ? 1 : 0), HD, t, h0);
        RF_STAMPS_END(RF_STAMP_ATTN);
        return;
    }
    const bool direct = dec_block_out(a, dsm, G, nw + (own ? 1 : 0), G, HD, t, h0, s, n_split, part, true);
    RF_STAMPS_END(RF_STAMP_ATTN);
    if (!direct) dec_combine_last(a, G, HD, t, h0, n_split, part, counters + blockIdx.x);
}
template <int HD, typename T, int TU, int NT, int MINB, bool RK>
static __global__ void __launch_bounds__(DM_THREADS, MINB) attn_dec_mma_kernel(rf_gpu_attn_args a, float *part,
                                                                               int *counters) {
    attn_dec_mma_body<HD, T, TU, NT, RK, 0>(a, part, counters, nullptr);
}
/* The q8_0 / q4_0 instances with their rounds by tensor copies (BT, sm_90). */
template <int HD, typename T, int TU, int NT, int MINB, bool RK, int NS>
static __global__ void __launch_bounds__(DM_THREADS, MINB) attn_dec_mma_bt_kernel(rf_gpu_attn_args a, float *part,
                                                                                  int *counters,
                                                                                  const __grid_constant__ DmMaps maps) {
    attn_dec_mma_body<HD, T, TU, NT, RK, NS>(a, part, counters, &maps);
}
#endif

/* ---- decode on tensor cores: when, and the launch ---------------------------------------------- */
static int g_dec_tc = -1; /* rf_gpu_attention_decode_tc's mode; RF_GPU_ATTN_DEC_TC=0/1/2 sets its start (A/B runs) */
static int dec_tc_mode(void) {
    if (g_dec_tc < 0) g_dec_tc = getenv("RF_GPU_ATTN_DEC_TC") ? atoi(getenv("RF_GPU_ATTN_DEC_TC")) : 1;
    return g_dec_tc;
}

/* attn_dec_mma_kernel can run these shapes on this device. */
int rf_attn_dec_tc_capable(int n_head, int n_kv_head, int hd, uint32_t kv_type) {
#if RF_GPU_CUDA
    if (n_kv_head <= 0 || n_head % n_kv_head || bad_kv_type(kv_type)) return 0;
    /* one head per KV head (MHA) but for f32 caches (not measured): with the heads on the columns
     * the mma beats the f32 loop for f16 and q8_0 too (7B Q4_K_M file at 8k positions, H200: 318.4
     * -> 327.1 and 345.4 -> 371.7 tokens/s; docs/PERF.md, twenty-fourth session) */
    const int G = n_head / n_kv_head;
    return attn_cc_major() >= 8 && (hd == 64 || hd == 128) && (G >= 2 || kv_type != RF_TYPE_F32) && G <= DM_MAX_G;
#else
    (void)n_head, (void)n_kv_head, (void)hd, (void)kv_type;
    return 0;
#endif
}

extern "C" int rf_gpu_attn_decode_tc(int n_head, int n_kv_head, int head_dim, uint32_t kv_type, int n_pos) {
    const int mode = dec_tc_mode();
    return rf_attn_dec_tc_capable(n_head, n_kv_head, head_dim, kv_type) &&
           (mode == 2 || (mode == 1 && n_pos >= RF_GPU_ATTN_TC_MIN_POS));
}

extern "C" int rf_gpu_attn_decode_tc_rope(int n_head, int n_kv_head, int head_dim, uint32_t kv_type) {
    return dec_tc_mode() == 1 && kv_type != RF_TYPE_F32 && n_head == n_kv_head &&
           rf_attn_dec_tc_capable(n_head, n_kv_head, head_dim, kv_type);
}

#if RF_GPU_CUDA
static int dm_bt_mode = -1; /* RF_GPU_ATTN_TMA */
static int dec_tma_mode(void) {
    if (dm_bt_mode < 0) dm_bt_mode = getenv("RF_GPU_ATTN_TMA") ? atoi(getenv("RF_GPU_ATTN_TMA")) : 2;
    return dm_bt_mode;
}
#endif
extern "C" int rf_gpu_attention_decode_tma(int mode) {
#if RF_GPU_CUDA
    const int old = dec_tma_mode();
    if (mode >= 0) dm_bt_mode = mode;
    return old;
#else
    (void)mode;
    return 0;
#endif
}

extern "C" int rf_gpu_attention_decode_tc(int mode) {
    const int old = dec_tc_mode();
    if (mode >= 0) g_dec_tc = mode;
    return old;
}

#if RF_GPU_CUDA
typedef void (*dec_tc_fn)(rf_gpu_attn_args, float *, int *);
/* Rounds of 32 positions per warp (TU 2), but 16 for the f32 and q8_0 caches at head_dim 128 (with
 * 32: f32 spilled in the earlier kernel; q8_0, 164 registers at 3 blocks per SM, gained 1.1% at 2k
 * positions and lost 0.35% / 0.2% at 8k / 32k for the 8B shape, fifty-fourth session). q4_0 at
 * head_dim 128 in rounds of 32 (DM_TU_Q4): the 8B shape +1.2% / level / +1.8% at 2k / 8k / 32k
 * (525.4 -> 531.9, 413.6 -> 421.2 tokens/s; at 4 blocks per SM, 24 bytes of spills, +1.4% at 32k
 * only). Register caps
 * (blocks per SM): 4 at head_dim 64 but for f32 and for f16 with two head tiles (4 for one tile:
 * 1B F16 file at 32k positions 884.4 -> 918.2; 5 for q4_0: 978.3 -> 968.1), 3 for q8_0 and q4_0
 * at head_dim 128. One head tile: 110-130 registers at head_dim 64, no spills; two (G > 8, not
 * measured for speed): q8_0 at head_dim 64 and f16 at 128 spill 12-48 bytes. Tried again for the
 * 1B file at 32k positions with q8_0 / q4_0 caches (fifty-first session): rounds of 16 at 6 or 8
 * blocks per SM -3 to -4%, of 32 at 5 -3.4% / -1%, of 64 at 3 (two slots per lane,
 * docs/experiments/decode-attention-tc-rounds-of-64.diff) -4.4%; the 8B shape's head_dim 128 in
 * rounds of 32 at 3 -1.4 to -3.3%. H200, docs/PERF.md. */
template <typename T, int NT> static dec_tc_fn dec_tc_kernel_nt(int hd) {
    enum { Q = kv_fmt<T>::Q8 || kv_fmt<T>::Q4 };
    constexpr bool F16 = std::is_same<T, __half>::value;
    if (hd == 64) return attn_dec_mma_kernel<64, T, 2, NT, Q || (F16 && NT == 1) ? 4 : 1, false>;
    if constexpr (F16) return attn_dec_mma_kernel<128, T, 2, NT, 1, false>;
    else if constexpr (kv_fmt<T>::Q8) return attn_dec_mma_kernel<128, T, NT == 1 ? DM_TU_Q8 : 1, NT, NT == 1 ? DM_MINB_Q8 : 3, false>;
    else if constexpr (kv_fmt<T>::Q4) return attn_dec_mma_kernel<128, T, NT == 1 ? DM_TU_Q4 : 1, NT, NT == 1 ? DM_MINB_Q4 : 3, false>;
    else return attn_dec_mma_kernel<128, T, 1, NT, 1, false>;
}
template <typename T> static dec_tc_fn dec_tc_kernel(int hd, int G) {
    return G <= 8 ? dec_tc_kernel_nt<T, 1>(hd) : dec_tc_kernel_nt<T, 2>(hd);
}
/* The rope-fused instances (G = 1; f16 at head_dim 64 capped for 2 blocks per SM: at 4 it spilled
 * 108 bytes). q8_0 and q4_0 at head_dim 128 in rounds of 32 positions, q8_0 capped for 3 blocks per
 * SM (168 registers; at 4 it spilled 192 bytes and 7B Q4_K_M at 8k positions lost 10%), q4_0 for 4
 * (126 registers, no spills). 7B Q4_K_M tg128 at 512 / 2k / 8k / 32k positions, H200: q8_0 rounds of
 * 16 at 4 blocks per SM were -1.6%, +0.1%, +1.5%, +0.8% against these; q4_0 at 3 blocks per SM +1%,
 * +2%, level, -3.3% (two runs). docs/PERF.md, fifty-first session. Both in rounds of 16 at 5 blocks
 * per SM (96 registers): q4_0 -1.8% / -1.2% / -3.9% at 512 / 8k / 32k, q8_0 -4.4% / -6.3% / -10.5%;
 * at 6, -6% to -23% (fifty-third). */
template <typename T> static dec_tc_fn dec_tc_kernel_rk_t(int hd) {
    if (hd == 64) return attn_dec_mma_kernel<64, T, 2, 1, 2, true>;
    if constexpr (std::is_same<T, __half>::value) return attn_dec_mma_kernel<128, T, 2, 1, 1, true>;
    else if constexpr (kv_fmt<T>::Q8) return attn_dec_mma_kernel<128, T, RK_TU_Q8, 1, RK_MINB_Q8, true>;
    else return attn_dec_mma_kernel<128, T, RK_TU_Q4, 1, RK_MINB_Q4, true>;
}
static dec_tc_fn dec_tc_kernel_rk(uint32_t kv_type, int hd) {
    return kv_type == RF_TYPE_Q8_0   ? dec_tc_kernel_rk_t<kv_q8>(hd)
           : kv_type == RF_TYPE_Q4_0 ? dec_tc_kernel_rk_t<kv_q4>(hd)
                                     : dec_tc_kernel_rk_t<__half>(hd);
}
/* The q8_0 / q4_0 instances with their rounds by tensor copies (BT, attn_dec_mma_bt_kernel), taken on
 * sm_90 where the cache's block size is a power of two >= the round, for one tile of heads (G <= 8),
 * where they keep the blocks per SM of the instance they replace (the rope-fused q8_0 one at
 * head_dim 128 with one ring stage: two stages of 9 KB per warp left 2 blocks per SM, not 3, -8.7%
 * at 8k), and from the context where they gain (dec_bt_min_pos). RF_GPU_ATTN_TMA=0:
 * never (A/B runs); 1: the first rounds issued after the grid dependency wait; 2 (the default):
 * before it where that is safe. H200, against the register rounds: 7B Q4_K_M with a q4_0 cache
 * +4.3% / +4.7% after 8k / 32k tokens (+0.3% after 512); the 1B F16 file with q8_0 +2.0% / +1.5%,
 * q4_0 +1.8% / +2.3% at 8k / 32k. Issued after the wait (1) the 7B file gained half of that and the
 * 1B file lost 1.3-3.8%: the first rounds' latency is what the early copies hide (docs/PERF.md,
 * fifty-sixth session). */
typedef void (*dec_tc_bt_fn)(rf_gpu_attn_args, float *, int *, DmMaps);
static dec_tc_bt_fn dec_tc_kernel_bt(uint32_t kv_type, int hd, bool rk) {
    if (kv_type == RF_TYPE_Q4_0) {
        if (rk) return hd == 64 ? attn_dec_mma_bt_kernel<64, kv_q4, 2, 1, 2, true, DM_BT_NS> : attn_dec_mma_bt_kernel<128, kv_q4, RK_TU_Q4, 1, RK_MINB_Q4, true, DM_BT_NS>;
        return hd == 64 ? attn_dec_mma_bt_kernel<64, kv_q4, 2, 1, 4, false, DM_BT_NS> : attn_dec_mma_bt_kernel<128, kv_q4, DM_TU_Q4, 1, DM_MINB_Q4, false, DM_BT_NS>;
    }
    if (rk) return hd == 64 ? attn_dec_mma_bt_kernel<64, kv_q8, 2, 1, 2, true, DM_BT_NS> : attn_dec_mma_bt_kernel<128, kv_q8, RK_TU_Q8, 1, RK_MINB_Q8, true, RK_BT_NS_Q8>;
    return hd == 64 ? attn_dec_mma_bt_kernel<64, kv_q8, 2, 1, 4, false, DM_BT_NS> : attn_dec_mma_bt_kernel<128, kv_q8, DM_TU_Q8, 1, DM_MINB_Q8, false, DM_BT_NS>;
}
/* Positions per round of that instance. */
static int dec_bt_np(uint32_t kv_type, int hd, bool rk) {
    if (hd == 64) return 32;
    if (kv_type == RF_TYPE_Q4_0) return 16 * (rk ? RK_TU_Q4 : DM_TU_Q4);
    return 16 * (rk ? RK_TU_Q8 : DM_TU_Q8);
}
/* Ring stages per warp of that instance. */
static int dec_bt_ns(uint32_t kv_type, int hd, bool rk) {
    return kv_type == RF_TYPE_Q8_0 && hd == 128 && rk ? RK_BT_NS_Q8 : DM_BT_NS;
}
static size_t dec_bt_smem(uint32_t kv_type, int hd, int G, bool rk) {
    const int np = dec_bt_np(kv_type, hd, rk), cb = kv_type == RF_TYPE_Q4_0 ? hd / 2 : hd;
    const size_t base = sizeof(float) * (DEC_MAX_WARPS + 1) * (size_t)G * (hd + 2);
    return base + 128 + (size_t)(DM_THREADS / 32) * dec_bt_ns(kv_type, hd, rk) * ((size_t)np * (2 * cb + 32) + 8);
}
typedef CUresult (*dm_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
/* The four tensor maps of a layer's caches: K and V, codes and scales, each a 2D map of bytes (row
 * bytes x 2^28 slots, a bound: the kernel reads only slots of the block table, < 2^28) with boxes of
 * one head's code bytes or 16 scale bytes by np rows. Kept per cache address and shape (a process-
 * wide table, not thread-safe, like the other launch caches here); 0 when the driver makes none. */
static int dm_bt_maps(const rf_gpu_attn_args *a, int np, DmMaps *out) {
    static struct {
        const void *k, *v;
        uint32_t type;
        int kv_dim, hd, np;
        DmMaps m;
    } memo[256];
    static int n_memo;
    static dm_encode_fn enc;
    const int hd = a->head_dim, kv_dim = a->n_kv_head * hd;
    for (int i = 0; i < n_memo; i++)
        if (memo[i].k == a->k_cache && memo[i].v == a->v_cache && memo[i].type == a->kv_type && memo[i].kv_dim == kv_dim &&
            memo[i].hd == hd && memo[i].np == np) {
            *out = memo[i].m;
            return 1;
        }
    if (!enc) {
        cudaDriverEntryPointQueryResult qr;
        void *fn = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &qr) != cudaSuccess ||
            qr != cudaDriverEntryPointSuccess || !fn) {
            gpuGetLastError();
            return 0;
        }
        enc = (dm_encode_fn)fn;
    }
    const int q4 = a->kv_type == RF_TYPE_Q4_0;
    const cuuint64_t rb = (cuuint64_t)(q4 ? kv_fmt<kv_q4>::row_bytes(kv_dim) : kv_fmt<kv_q8>::row_bytes(kv_dim));
    const cuuint64_t dims[2] = {rb, (cuuint64_t)1 << 28}, strides[1] = {rb};
    const cuuint32_t ebox[2] = {1, 1};
    const cuuint32_t cbox[2] = {(cuuint32_t)(q4 ? hd / 2 : hd), (cuuint32_t)np}, sbox[2] = {16, (cuuint32_t)np};
    DmMaps m;
    m.early = 0;
    const void *caches[2] = {a->k_cache, a->v_cache};
    CUtensorMap *maps[2][2] = {{&m.kc, &m.ks}, {&m.vc, &m.vs}};
    for (int c = 0; c < 2; c++)
        for (int b = 0; b < 2; b++)
            if (enc(maps[c][b], CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)caches[c], dims, strides, b ? sbox : cbox, ebox,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
                return 0;
    if (n_memo < 256) {
        memo[n_memo].k = a->k_cache, memo[n_memo].v = a->v_cache, memo[n_memo].type = a->kv_type;
        memo[n_memo].kv_dim = kv_dim, memo[n_memo].hd = hd, memo[n_memo].np = np, memo[n_memo].m = m;
        n_memo++;
    }
    *out = m;
    return 1;
}
/* The context from which that instance beats the register rounds (rf_gpu_attn_args.n_pos_hint),
 * measured on an H200 (tg128 after N tokens, against the register rounds; docs/PERF.md,
 * fifty-seventh session): the rope-fused q8_0 instance at head_dim 128 (one stage) loses 0.9% /
 * 1.0% at 0 / 1k, is level at 2k and gains 1.4% / 3.0% / 4.9% at 4k / 8k / 32k (7B Q4_K_M); the
 * plain head_dim-128 instances (8B shape, GQA groups of 4): q8_0 -0.3% / -1.5% / +0.8% / +1.1% at
 * 2k / 8k / 16k / 32k, q4_0 -0.6% / +0.2% / +2.3% at 2k / 8k / 32k. The others gain from 512
 * positions (fifty-sixth session). */
static int dec_bt_min_pos(uint32_t kv_type, int hd, bool rk) {
    if (hd == 64 || (rk && kv_type == RF_TYPE_Q4_0)) return 0;
    if (rk) return 2048;
    return kv_type == RF_TYPE_Q8_0 ? 16384 : 8192;
}
/* The BT instance takes this launch (see dec_tc_kernel_bt): where it runs and keeps the blocks per
 * SM of the instance it replaces (the split count was sized by those). */
static int dec_tc_resident_fn(const void *fn, size_t smem) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, DM_THREADS, smem) != cudaSuccess) n = 0;
    gpuGetLastError();
    return n;
}
static bool dec_bt_ok(const rf_gpu_attn_args *a) {
    const int G = a->n_head / a->n_kv_head;
    const bool rk = a->k_new != NULL;
    if (!dec_tma_mode() || (rk && G != 1) || G > 8 || attn_cc_major() < 9 ||
        (a->kv_type != RF_TYPE_Q4_0 && a->kv_type != RF_TYPE_Q8_0) || (a->head_dim != 64 && a->head_dim != 128))
        return false;
    const int bs = a->block_size;
    if (bs < dec_bt_np(a->kv_type, a->head_dim, rk) || (bs & (bs - 1))) return false;
    if (a->n_pos_hint > 0 && a->n_pos_hint < dec_bt_min_pos(a->kv_type, a->head_dim, rk)) return false;
    static signed char fits[2][2][2][9]; /* [q4][hd 128][rk][G]: 1 yes, -1 no */
    signed char &f = fits[a->kv_type == RF_TYPE_Q4_0][a->head_dim == 128][rk][G];
    if (!f) {
        const dec_tc_bt_fn bfn = dec_tc_kernel_bt(a->kv_type, a->head_dim, rk);
        const size_t bsm = dec_bt_smem(a->kv_type, a->head_dim, G, rk);
        /* the most any group size of this instance asks (the attribute is a limit, also below 48 KB) */
        cudaFuncSetAttribute(bfn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)dec_bt_smem(a->kv_type, a->head_dim, 8, rk)); /* G <= 8 here */
        gpuGetLastError();
        f = dec_tc_resident_fn((const void *)bfn, bsm) >= rf_attn_dec_tc_resident(a->kv_type, a->head_dim, G, rk) ? 1 : -1;
    }
    return f > 0;
}
static dec_tc_fn dec_tc_kernel_t(uint32_t kv_type, int hd, int G) {
    return kv_type == RF_TYPE_F16    ? dec_tc_kernel<__half>(hd, G)
           : kv_type == RF_TYPE_Q8_0 ? dec_tc_kernel<kv_q8>(hd, G)
           : kv_type == RF_TYPE_Q4_0 ? dec_tc_kernel<kv_q4>(hd, G)
                                     : dec_tc_kernel<float>(hd, G);
}
#endif

/* Blocks of attn_dec_mma_kernel resident per multiprocessor (occupancy calculator, cached); rk:
 * of the rope-fused instance (G = 1). */
int rf_attn_dec_tc_resident(uint32_t kv_type, int hd, int G, bool rk) {
#if RF_GPU_CUDA
    static int cached[4][2][2][DM_MAX_G + 1];
    const int ti = kv_type == RF_TYPE_F16 ? 0 : kv_type == RF_TYPE_Q8_0 ? 1 : kv_type == RF_TYPE_Q4_0 ? 3 : 2;
    const int hi = hd == 128;
    if (G < 1 || G > DM_MAX_G || (rk && (G > DM_RK_MAX_G || ti == 2))) return 1;
    if (!cached[ti][hi][rk][G]) {
        int n = 0;
        const dec_tc_fn fn = rk ? dec_tc_kernel_rk(kv_type, hd) : dec_tc_kernel_t(kv_type, hd, G);
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, DM_THREADS, dec_smem(hd, G)) != cudaSuccess) n = 0;
        gpuGetLastError();
        cached[ti][hi][rk][G] = n > 0 ? n : 2;
    }
    return cached[ti][hi][rk][G];
#else
    (void)kv_type, (void)hd, (void)G, (void)rk;
    return 1;
#endif
}

/* counters: the fused combine's (the rope-fused instance, a->k_new; NULL otherwise). */
int rf_attn_dec_tc_launch(gpuStream_t st, const rf_gpu_attn_args *a, int n_split, float *part, int *counters) {
#if RF_GPU_CUDA
    const int G = a->n_head / a->n_kv_head;
    dim3 grid((unsigned)(a->n_tokens * a->n_kv_head), (unsigned)n_split);
    /* the tensor-copy rounds where they apply; where the driver makes no tensor maps, the register
     * rounds of the same kernel (the same arithmetic, on the GPU) */
    DmMaps maps;
    const bool rk = a->k_new != NULL;
    if (dec_bt_ok(a) && dm_bt_maps(a, dec_bt_np(a->kv_type, a->head_dim, rk), &maps)) {
        const dec_tc_bt_fn bfn = dec_tc_kernel_bt(a->kv_type, a->head_dim, rk);
        const size_t bsm = dec_bt_smem(a->kv_type, a->head_dim, G, rk);
        /* early copies only for one token: with more, a token's rounds may hold positions this
         * step's rope launch writes for the tokens before it */
        maps.early = dec_tma_mode() == 2 && a->n_tokens == 1;
        gpuError_t err;
        RF_LAUNCH_PDL(err, bfn, grid, dim3(DM_THREADS), bsm, st, *a, part, counters, maps);
        return (int)err;
    }
    const dec_tc_fn fn = a->k_new ? dec_tc_kernel_rk(a->kv_type, a->head_dim) : dec_tc_kernel_t(a->kv_type, a->head_dim, G);
    /* the rope-fused instance keeps the new position's state as a fifth warp's */
    const size_t smem = a->k_new ? dec_smem(a->head_dim, G) / DEC_MAX_WARPS * (DEC_MAX_WARPS + 1)
                                 : dec_smem(a->head_dim, G);
    gpuError_t err;
    RF_LAUNCH_PDL(err, fn, grid, dim3(DM_THREADS), smem, st, *a, part, counters);
    return (int)err;
#else
    (void)st, (void)a, (void)n_split, (void)part, (void)counters;
    return invalid_value();
#endif
}
#ifdef RF_PHASE_STAMPS
extern "C" void rf_phase_stamps_dump_attention_mma(void) { rf_phase_stamps_write("attention_mma"); }
#endif
