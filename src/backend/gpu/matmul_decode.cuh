/* matmul_decode.cuh: the decode matvecs of matmul.cu (n = 1), k_mvp and k_mvt, with their x
 * staging and the per-format tuning of both (included once, by matmul.cu only; their dispatch,
 * mvp_launch / mvp_try, stays in matmul.cu beside the other kernels' dispatch).
 *
 * k_mvp: a persistent grid of one resident wave whose warps own fixed runs of rows and pipeline
 * their weight loads through registers; k_mvt (CUDA sm_90+): the same contract with the weights
 * streamed into per-warp shared-memory rings by bulk copies. Both stage x once per block (RMS-normed
 * and quantized to int8, or copied from the int8 x its producer left). Needs matmul_units.cuh and
 * the definitions of matmul.cu above its include. */

/* ---- k_mvp: the decode matvec (n = 1), persistent and pipelined --------------------------- */

/* Unit formats of k_mvp. Int8 formats (MvpI8<V>) wrap a k_mvq unit format V: x is staged as int8
 * (k_qx's quantization, done by every block into its own shared memory). Plain formats (MvpF16,
 * MvpBF16): a unit is 8 elements (16 bytes); x is staged in f32, split in two halves so that the
 * 8 x values of unit k are the float4s at k * 4 and n_in / 2 + k * 4 (lanes read consecutive
 * 16-byte words: no bank conflicts). F32X says which staging a format needs. */
/* Bytes of k_mvp's int8 x before its block scales: n_in rounded up to the 64-byte swizzle group. */
HD int64_t mvp_round64(int64_t n) { return (n + 63) & ~(int64_t)63; }

template <class V> struct MvpI8;
template <class V> struct RowPart<MvpI8<V> > : RowPart<V> {};
/* A unit's work after its loads landed that every lane of the warp runs together, outside the
 * unit guard (shuffles): none, except for the formats that say otherwise. */
template <class V> struct MvpPrep {
    enum { ON = 0 };
    static __device__ __forceinline__ void run(typename V::Raw &) {}
};
template <> struct MvpPrep<VQ4_KS> {
    enum { ON = 1 };
    static __device__ __forceinline__ void run(VQ4_KS::Raw &r) { VQ4_KS::prep(r); }
};
template <class V> struct MvpI8 {
    typedef typename V::Raw Raw;
    typedef typename V::Dec Dec;
    enum { QK = V::QK, BB = V::BB, UPB = V::UPB, A = V::A, F32X = 0, PREP = MvpPrep<V>::ON };
    static __device__ __forceinline__ void load(const uint8_t *b, int u, Raw &r) { V::load(b, u, r); }
    static __device__ __forceinline__ void prep(Raw &r) { MvpPrep<V>::run(r); }
    static __device__ __forceinline__ float dot(const Raw &r, int k, const uint8_t *xs, int64_t n_in) {
        const uint32_t blk = (uint32_t)k / UPB; /* k >= 0: unsigned, so no signed-division fix-up */
        return V::template dot<1>(r, (int)((uint32_t)k % UPB), (const int8_t *)xs + (size_t)blk * QK,
                                  (const float2 *)(xs + mvp_round64(n_in)) + (size_t)blk * (QK / 32));
    }
    /* k_mvt with hoisted x addresses (MvtTune XH): unit kk + lane, x at the lane's MvtX. */
    template <class X> static __device__ __forceinline__ float dot_lane(const Raw &r, const X &x, int kk) {
        static_assert(QK / UPB == 32, "MvtX holds the x of one 32-element block per unit");
        return V::dot_x(r, *(const int4 *)(x.lo + 32 * kk), *(const int4 *)(x.hi + 32 * kk), x.d[kk]);
    }
};
/* A plain format's two elements of one 32-bit word (element 2i low, 2i + 1 high) as f32. */
struct PlainF16 {
    typedef DecF16x8 Dec;
    static __device__ __forceinline__ float lo(uint32_t w) { return mm_h2f((uint16_t)(w & 0xffffu)); }
    static __device__ __forceinline__ float hi(uint32_t w) { return mm_h2f((uint16_t)(w >> 16)); }
};
struct PlainBF16 {
    typedef DecBF16x8 Dec;
    static __device__ __forceinline__ float lo(uint32_t w) { return mm_bits2f(w << 16); }
    static __device__ __forceinline__ float hi(uint32_t w) { return mm_bits2f(w & 0xffff0000u); }
};
template <class E> struct MvpPlain {
    struct Raw {
        uint32_t q[4];
    };
    typedef typename E::Dec Dec;
    enum { QK = 8, BB = 16, UPB = 1, A = 16, F32X = 1, PREP = 0 };
    static __device__ __forceinline__ void load(const uint8_t *b, int, Raw &r) { ldw_a16<16>(b, r.q); }
    static __device__ __forceinline__ void prep(Raw &) {}
    static __device__ __forceinline__ float dot(const Raw &r, int k, const uint8_t *xs, int64_t n_in) {
        const float4 a = *(const float4 *)((const float *)xs + 4 * (int64_t)k);
        const float4 b = *(const float4 *)((const float *)xs + n_in / 2 + 4 * (int64_t)k);
        float s = E::lo(r.q[0]) * a.x;
        s += E::hi(r.q[0]) * a.y;
        s += E::lo(r.q[1]) * a.z;
        s += E::hi(r.q[1]) * a.w;
        s += E::lo(r.q[2]) * b.x;
        s += E::hi(r.q[2]) * b.y;
        s += E::lo(r.q[3]) * b.z;
        s += E::hi(r.q[3]) * b.w;
        return s;
    }
};
typedef MvpPlain<PlainF16> MvpF16;
typedef MvpPlain<PlainBF16> MvpBF16;

/* Units per lane per pipeline step of k_mvp (two steps of raw words live in registers). 8 for
 * the small raw units measured the same as 4 (H200, 2026-11-22). */
template <class V> struct MvpUn {
    enum { UN = sizeof(typename V::Raw) <= 32 ? 4 : 2 };
};
/* The units of 64 weights, one per lane per step. Q5_K (GGUF layout, 80 raw bytes): two took 133
 * registers and one block per SM (ptxas sm_90), one 126 and two blocks. Q5_K H (56 bytes) and
 * IQ4_XS S (40 bytes) fit two per step in 126 registers, but one streamed faster (7B tg128 on an
 * H200: Q5_K_M 426 -> 456 t/s, IQ4_XS 388 -> 448). */
#ifndef MVP_PAIR_UN
#define MVP_PAIR_UN 1
#endif
template <> struct MvpUn<VQ5_K> {
    enum { UN = MVP_PAIR_UN };
};
template <> struct MvpUn<VQ5_KH> {
    enum { UN = MVP_PAIR_UN };
};
template <> struct MvpUn<VIQ4_XSS> {
    enum { UN = MVP_PAIR_UN };
};

#define MVP_THREADS 256 /* threads per block of k_mvt, and of k_mvp unless MvpThreads says otherwise */
#ifndef MVP_WIDE_THREADS /* the wider block of MvpThreads (overridable for benchmarks) */
#define MVP_WIDE_THREADS 512
#endif
/* Resident k_mvp blocks per SM the compiler must allow (CUDA; registers capped to fit): Q4_0 and
 * Q8_0 stream faster with 4 (more loads in flight; 11008x4096 on an H200: Q4_0 X8 1.84 -> 2.09,
 * Q8_0 X8 2.68 -> 3.02 TB/s), the K-quants slower (Q4_K 2.30 -> 1.69, Q6_K spills: 1.82 -> 1.23),
 * so the cap is per format. Q4_K held to 3 (80 registers, 4 bytes of spills, after the twenty-
 * eighth session's leaner unit) lost 7% for 7B Q4_K_M tg128 on an H200 (docs/PERF.md). */
template <class F> struct MvpMinBlocks {
    enum { N = 1 };
};
template <> struct MvpMinBlocks<MvpI8<VQ4_0> > {
    enum { N = 4 };
};
template <> struct MvpMinBlocks<MvpI8<VQ8_0> > {
    enum { N = 4 };
};
template <> struct MvpMinBlocks<MvpI8<VQ4_0X8> > {
    enum { N = 4 };
};
template <> struct MvpMinBlocks<MvpI8<VQ8_0X8> > {
    enum { N = 4 };
};
/* Threads per block of k_mvp<F>. Every block of a normed matvec reads x and norm_w whole to stage
 * them (2 x 16 KB at n_in 4096), all blocks at the same moment after the grid dependency wait, and
 * those reads are what a normed staging waits for. So the formats whose registers allow it keep
 * their warps per SM in half as many blocks of twice the threads: the plain formats (F16, BF16,
 * x staged in f32) and Q8_0 X8 (64 registers: 4 blocks of 256 per SM -> 2 of 512). H200,
 * 2026-11-24, tg128 against 256 threads in one run: 7B F16 266.6 -> 273.1 t/s, 1B F16 1,322.5 ->
 * 1,338.4, 7B Q8_0 431.6 -> 439.8, 1B Q8_0 1,852 -> 1,882. 1024 threads lost for F16 (207.7); the
 * K-quants (126 registers: 2 blocks of 256 -> 1 of 512) lost 1% (7B Q4_K_M 529.6 -> 524.4). The
 * other 4-block formats (Q4_0 X8, on k_mvt on sm_90; Q4_0 / Q8_0 rows without the X8 layout) were
 * not measured and keep 256 (docs/PERF.md, twenty-first session). */
template <class F> struct MvpThreads {
    enum { N = F::F32X ? MVP_WIDE_THREADS : MVP_THREADS };
};
template <> struct MvpThreads<MvpI8<VQ8_0X8> > {
    enum { N = MVP_WIDE_THREADS };
};
/* the compiler's minimum of resident blocks for blocks of MvpThreads<F>::N threads */
template <class F> struct MvpBoundBlocks {
    enum { B = MvpMinBlocks<F>::N * MVP_THREADS / MvpThreads<F>::N, N = B > 0 ? B : 1 };
};
/* Staging variants per format (the same results; only the code the compiler schedules around the
 * first step's loads differs): chunks per thread per copy round (mvp_stage_copy) and whether the
 * quantizer marks non-finite blocks (mm_quantize_x MARK). At the 64-register cap of Q4_0 the
 * second variant streamed 2184 against 1785 GB/s for the first at 11008x4096 (X8, H200); Q8_0
 * went the other way (3085 against 2739). */
template <class F> struct MvpStageTune {
    enum { CB = 2, MARK = 0 };
};
#ifndef MVP_Q4_0_CB /* (overridable for benchmarks: -DMVP_Q4_0_CB=2 -DMVP_Q4_0_MARK=0) */
#define MVP_Q4_0_CB 4
#define MVP_Q4_0_MARK 1
#endif
template <> struct MvpStageTune<MvpI8<VQ4_0> > {
    enum { CB = MVP_Q4_0_CB, MARK = MVP_Q4_0_MARK };
};
template <> struct MvpStageTune<MvpI8<VQ4_0X8> > {
    enum { CB = MVP_Q4_0_CB, MARK = MVP_Q4_0_MARK };
};
/* The same for the swiglu-pairing instances (PAIR = 1, k_mvp): held to the blocks per SM of their
 * PAIR = 0 twins (two of 512 at UN = 4, one at UN = 8), so that the pairing's registers never cost
 * a block (ptxas sm_90: 62 / 102 registers; a first version took 71 uncapped and lost one). */
template <int UN> struct MvpPairBlocks {
    enum { N = UN > 4 ? 1 : 2 };
};
#ifdef RF_GPU_HIP
#define MVP_BOUNDS(F, UN, PAIR) __launch_bounds__(MvpThreads<F>::N)
#else
#define MVP_BOUNDS(F, UN, PAIR) \
    __launch_bounds__(MvpThreads<F>::N, PAIR ? (int)MvpPairBlocks<UN>::N : (int)MvpBoundBlocks<F>::N)
#endif
/* The norm's reduction slots of k_mvt: a float per warp (the smallest warp size is 32); its rings
 * start after them. They stay MVP_THREADS / 32 whatever k_mvp's block sizes: with the slots of 512
 * threads there (32 bytes more before the rings) 7B Q4_0 decode lost 2%, with those of 1024 (96
 * more) it did not (H200, 2026-11-24), so the rings keep their offset. */
#define MVP_MAX_WARPS (MVP_THREADS / 32)

/* Dynamic shared memory of k_mvp for a row of n_in elements. */
HD size_t mvp_x_bytes(int f32x, int64_t n_in) {
    return f32x ? (size_t)n_in * 4 : (size_t)mvp_round64(n_in) + (size_t)(n_in / 32) * 8;
}
/* 64 bytes of alignment slack, the staged x, then a float per warp of a block of `threads` (the
 * smallest warp size is 32) for the norm reduction. */
static size_t mvp_smem_bytes(int f32x, int64_t n_in, int threads) {
    return 64 + mvp_x_bytes(f32x, n_in) + 4 * (size_t)(threads / 32);
}

/* k_mvp's x staging. Int8 formats: xin = x * s * norm_w with the RMS scale s of x (or xin = x
 * without norm_w): the stagers store x * norm_w quantized, add the squares of x to *ss, and s
 * multiplies each output (mvp_stage_end), so the norm costs no pass of its own over x; each
 * returns nonzero in a thread that met an inf or NaN in x * norm_w (no barrier). */

/* int8, quantized as k_qx does (mm_quantize_x): q at xs[0, n_in) (permuted, mm_xswz), then
 * n_in / 32 float2 {d, d * sum q} at xs + mvp_round64(n_in). */
template <int MARK>
__device__ __forceinline__ int mvp_stage_i8(const float *__restrict__ xr, int64_t n_in, const float *norm_w,
                                            uint8_t *xs, float *ss) {
    const MmXSrc src = {xr, norm_w, 1.0f};
    return mm_quantize_x<1, MARK>(src, n_in, 0, (int)blockDim.x, (int8_t *)xs, (float2 *)(xs + mvp_round64(n_in)), ss);
}

/* int8 already quantized by the producer (xq[0, n_in), xd[0, n_in / 32) as mm_quantize_x writes
 * them, 16- and 8-byte aligned): copied into the layout of mvp_stage_i8, every thread's loads of
 * a round issued before its stores (CB 16-byte chunks of q per thread and round, CB even). A
 * block with d = NaN marks a non-finite x. */
template <int CB>
__device__ __forceinline__ int mvp_stage_copy(const int8_t *__restrict__ xq, const float2 *__restrict__ xd,
                                              int64_t n_in, uint8_t *xs) {
    const int tid = (int)threadIdx.x, bd = (int)blockDim.x;
    const int nq = (int)(n_in / 16), nd = (int)(n_in / 32);
    float2 *xsd = (float2 *)(xs + mvp_round64(n_in));
    int bad = 0;
    /* Two spellings of the same copy: CB == 2 with one scalar d per round. The array spelling for
     * CB == 2 made ptxas schedule the 126-register Q4_K / Q6_K kernels differently, and 7B Q4_K_M
     * decode went 430 -> 384 t/s (H200, 2026-11-22); keep this one. */
    if (CB == 2) {
        for (int base = 0; base < nq; base += 2 * bd) {
            int4 q[2];
            float2 d = make_float2(0.0f, 0.0f);
            const int cd = base / 2 + tid;
MM_UNROLL
            for (int u = 0; u < 2; u++) {
                const int c = base + tid + u * bd;
                if (c < nq) q[u] = *(const int4 *)(xq + 16 * c);
            }
            if (cd < nd) d = xd[cd];
MM_UNROLL
            for (int u = 0; u < 2; u++) {
                const int c = base + tid + u * bd;
                if (c < nq) *(int4 *)mm_xswz((int8_t *)xs + 16 * c) = q[u];
            }
            if (cd < nd) {
                xsd[cd] = d;
                if (!(fabsf(d.x) <= 3.402823466e38f)) bad = 1;
            }
        }
    } else {
        for (int base = 0; base < nq; base += CB * bd) {
            int4 q[CB];
            float2 d[CB / 2];
MM_UNROLL
            for (int u = 0; u < CB; u++) {
                const int c = base + tid + u * bd;
                if (c < nq) q[u] = *(const int4 *)(xq + 16 * c);
            }
MM_UNROLL
            for (int u = 0; u < CB / 2; u++) {
                const int c = base / 2 + tid + u * bd;
                if (c < nd) d[u] = xd[c];
            }
MM_UNROLL
            for (int u = 0; u < CB; u++) {
                const int c = base + tid + u * bd;
                if (c < nq) *(int4 *)mm_xswz((int8_t *)xs + 16 * c) = q[u];
            }
MM_UNROLL
            for (int u = 0; u < CB / 2; u++) {
                const int c = base / 2 + tid + u * bd;
                if (c < nd) {
                    xsd[c] = d[u];
                    if (!(fabsf(d[u].x) <= 3.402823466e38f)) bad = 1;
                }
            }
        }
    }
    return bad;
}

/* Loads per thread in flight per round of the plain f32 staging: 2 took 2048x8192 F16 from 2.44 to
 * 2.80 TB/s (1B F16 decode 1004 -> 1060 t/s, H200); 4 needs 75 registers (3 blocks per SM) and was
 * slower. */
#ifndef MVP_F32_BATCH
#define MVP_F32_BATCH 2
#endif
/* f32 (plain formats), xin = x * scale * norm_w (or x without norm_w), halves split as MvpF16
 * reads them (element e at (e / 4 % 2) * n_in / 2 + e / 8 * 4 + e % 4). With norm_w, mvp_stage
 * takes it only when the sum of x^2 is not finite: f32 arithmetic then gives NaN / inf / 0 as the
 * f32 kernels do, with no f32 fallback in the kernel. Ends with a barrier. */
__device__ __forceinline__ void mvp_stage_f32(const float *__restrict__ xr, int64_t n_in, const float *norm_w,
                                              float scale, uint8_t *xs) {
    float *xf = (float *)xs;
    const int64_t n4 = n_in / 4;
    if (norm_w) {
        for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
            float4 v = *(const float4 *)(xr + 4 * i);
            const float4 g = *(const float4 *)(norm_w + 4 * i);
            v.x = v.x * scale * g.x, v.y = v.y * scale * g.y, v.z = v.z * scale * g.z, v.w = v.w * scale * g.w;
            *(float4 *)(xf + (i & 1) * (n_in / 2) + (i >> 1) * 4) = v;
        }
    } else { /* a plain copy: MVP_F32_BATCH loads of a round in flight together */
        for (int64_t base = threadIdx.x; base < n4; base += MVP_F32_BATCH * (int64_t)blockDim.x) {
            float4 v[MVP_F32_BATCH];
MM_UNROLL
            for (int u = 0; u < MVP_F32_BATCH; u++) {
                const int64_t i = base + u * (int64_t)blockDim.x;
                if (i < n4) v[u] = *(const float4 *)(xr + 4 * i);
            }
MM_UNROLL
            for (int u = 0; u < MVP_F32_BATCH; u++) {
                const int64_t i = base + u * (int64_t)blockDim.x;
                if (i < n4) *(float4 *)(xf + (i & 1) * (n_in / 2) + (i >> 1) * 4) = v[u];
            }
        }
    }
    __syncthreads();
}

/* f32 in one pass (plain formats with norm_w): xs = x * norm_w, halves split as mvp_stage_f32;
 * returns this thread's sum of x^2 (its elements in mm_norm_scale's order), so that after
 * mvp_stage_end the RMS scale multiplies each output instead of each x. No barrier. */
__device__ __forceinline__ float mvp_stage_f32_sq(const float *__restrict__ xr, int64_t n_in,
                                                  const float *__restrict__ norm_w, uint8_t *xs) {
    float *xf = (float *)xs;
    float ss = 0.0f;
    const int64_t n4 = n_in / 4;
    for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = *(const float4 *)(xr + 4 * i);
        const float4 g = *(const float4 *)(norm_w + 4 * i);
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        v.x *= g.x, v.y *= g.y, v.z *= g.z, v.w *= g.w;
        *(float4 *)(xf + (i & 1) * (n_in / 2) + (i >> 1) * 4) = v;
    }
    return ss;
}

/* 1 / sqrt(sum x^2 / n_in + eps) from the nw warp sums in red (warp order). */
__device__ __forceinline__ float mvp_red_scale(const float *red, int nw, int64_t n_in, float eps) {
    float t = 0.0f;
    for (int i = 0; i < nw; i++) t += red[i];
    return 1.0f / sqrtf(t / (float)n_in + eps);
}

/* Ends the staging: one barrier, after which every thread has the block's combined non-finite
 * flag (the return value) and *scale = 1 / sqrt(sum x^2 / n_in + eps) (1 without norm_w), the
 * sum in f32 with warp sums combined in warp order. red: blockDim.x / warpSize floats. */
__device__ __forceinline__ int mvp_stage_end(float ss, int bad, int64_t n_in, const float *norm_w, float eps,
                                             float *red, float *scale) {
    const int ws = warpSize, tid = (int)threadIdx.x, nw = (int)blockDim.x / ws;
    if (norm_w) {
        for (int off = ws / 2; off > 0; off >>= 1) ss += RF_SHFL_XOR(ss, off);
        if (tid % ws == 0) red[tid / ws] = ss;
    }
    bad = __syncthreads_or(bad);
    *scale = norm_w ? mvp_red_scale(red, nw, n_in, eps) : 1.0f;
    return bad;
}

/* Row r of the launch's concatenated row space: its job and row within the job. */
__device__ __forceinline__ int mvp_job(const MvJobs &jobs, int64_t r) {
    int jb = 0;
    for (int j = 1; j < jobs.n; j++)
        if (r >= jobs.j[j].row0) jb = j;
    return jb;
}

/* The swiglu pairing of k_mvp (PAIR = 1): the feed-forward's gate and up in one launch, for the
 * formats that stage x in f32 (F::F32X; their down projection stages its x in f32 too, so nothing
 * needs h in int8). Row r of the launch is row r / 2 of job r % 2 (jobs.j[0] = gate, jobs.j[1] =
 * up, the same n_out), rpw is even, so a warp computes gate_o and then up_o, and lane 0 keeps
 * gate_o in a register to write h_o = silu(gate_o) * up_o to jobs.j[0].y[o] with k_swiglu_q's
 * arithmetic (bit for bit what the two kernels give). jobs.j[1].y is not written; accum = 0. */
/* A paired launch's row r: its weights. */
__device__ __forceinline__ const uint8_t *mvp_pair_row_w(const MvJobs &jobs, int64_t r, int64_t row_bytes) {
    return jobs.j[r & 1].w + (r >> 1) * row_bytes;
}
/* Lane 0's store of a paired row's sum acc (y's expression, as k_mvp's unpaired store): gate_o
 * kept in *g, or h_o written. */
__device__ __forceinline__ void mvp_pair_emit(const MvJobs &jobs, int64_t r, float acc, float out_scale, float *g) {
    const int j = (int)(r & 1);
    const int64_t o = r >> 1;
    const float v = acc * out_scale + (jobs.j[j].bias ? jobs.j[j].bias[o] : 0.0f);
    if (j == 0)
        *g = v;
    else
        jobs.j[0].y[o] = *g / (1.0f + expf(-*g)) * v; /* k_swiglu_q's expression */
}

/* The staging of k_mvp / k_mvt (see k_mvp): stages x into xs, returns the block's non-finite flag
 * (int8 formats; 0 for F32X), *scale = the RMS scale of x (1 without norm_w), *out_scale = the
 * factor of every output: the RMS scale, except for F32X when the sum of x^2 is not finite (then
 * 1, and the scale is in xs). */
template <class F>
__device__ __forceinline__ int mvp_stage(const float *__restrict__ x, int64_t n_in, const float *__restrict__ norm_w,
                                         float eps, const int8_t *__restrict__ xq, const float2 *__restrict__ xd,
                                         uint8_t *xs, float *red, float *scale, float *out_scale) {
    float ss = 0.0f;
    int bad = 0;
    *out_scale = 1.0f;
    if (F::F32X && norm_w) {
        /* one pass over x: x * norm_w staged while its squares are summed, the RMS scale applied
         * to each output (one L2 round trip and one barrier fewer before the first dot than
         * mm_norm_scale's pass and then the staging: 7B F16 tg128 267.8 -> 270.0 t/s, 1B F16
         * 1,331 -> 1,348, H200, docs/PERF.md, thirty-first session) */
        mvp_stage_end(mvp_stage_f32_sq(x, n_in, norm_w, xs), 0, n_in, norm_w, eps, red, scale);
        if (*scale > 0.0f && *scale <= 3.402823466e38f) /* sum x^2 finite (uniform per block) */
            *out_scale = *scale;
        else /* x * scale * norm_w staged instead: NaN, inf and 0 come out as the f32 kernels give them */
            mvp_stage_f32(x, n_in, norm_w, *scale, xs);
    } else if (F::F32X) {
        *scale = 1.0f;
        mvp_stage_f32(x, n_in, NULL, 1.0f, xs);
    } else {
        if (xq)
            bad = mvp_stage_copy<MvpStageTune<F>::CB>(xq, xd, n_in, xs);
        else
            bad = mvp_stage_i8<MvpStageTune<F>::MARK>(x, n_in, norm_w, xs, &ss);
        bad = mvp_stage_end(ss, bad, n_in, norm_w, eps, red, scale);
        *out_scale = *scale;
    }
    return bad;
}

/* The warp's rows [r0, r1) in f32 from x (F::Dec decode): what k_mvp / k_mvt compute when xin
 * holds an inf or NaN, so that they propagate exactly as in the f32 kernels. */
template <class F>
__device__ __forceinline__ void mvp_rows_exact(const MvJobs &jobs, int64_t r0, int64_t r1, int64_t row_bytes,
                                            int64_t n_in, const float *__restrict__ x,
                                            const float *__restrict__ norm_w, float scale, int accum) {
    typedef typename F::Dec D;
    const int ws = warpSize, lane = (int)threadIdx.x % ws;
    for (int64_t r = r0; r < r1; r++) {
        const int j = mvp_job(jobs, r);
        const int64_t o = r - jobs.j[j].row0;
        const uint8_t *w = jobs.j[j].w + o * row_bytes;
        float a = 0.0f;
        for (int kk = lane; kk < (int)(n_in / D::E); kk += ws) {
            float wv[D::E];
            D::dec(w + (int64_t)(kk / D::C) * D::BB, kk % D::C, wv);
            for (int e = 0; e < D::E; e++) {
                const int64_t i = (int64_t)kk * D::E + e;
                a += wv[e] * (norm_w ? x[i] * scale * norm_w[i] : x[i]);
            }
        }
        for (int off = ws / 2; off > 0; off >>= 1) a += RF_SHFL_XOR(a, off);
        if (lane == 0) {
            float *yp = jobs.j[j].y + o;
            const float v = a + (jobs.j[j].bias ? jobs.j[j].bias[o] : 0.0f);
            *yp = accum ? *yp + v : v;
        }
    }
}

template <class F, int UN>
__device__ __forceinline__ void mvp_load(const uint8_t *wr, int k0, int nunits, typename F::Raw *raw) {
    const int ws = warpSize;
MM_UNROLL
    for (int u = 0; u < UN; u++) {
        const int k = k0 + u * ws;
        if (k < nunits) F::load(wr + (int64_t)(k / F::UPB) * F::BB, k % F::UPB, raw[u]);
    }
}

/* k_mvp: for each job J (rows of the concatenated row space, MvJob.row0 ascending, no padding):
 *   y_J[o] (+)= sum_e W_J[o][e] * xin[e] + bias_J[o],   n = 1,
 * xin = x or x RMS-normed (as k_mv). Shapes and alignment: every W_J has row_bytes bytes per row
 * (mm_row_bytes<F>), aligned to F::A and followed by RF_GPU_WEIGHT_PAD readable bytes; x and
 * norm_w 16-byte aligned; n_in % 32 == 0 (int8 formats) or % 8 == 0 (plain formats).
 * Launch: blockDim.x = MvpThreads<F>::N, dynamic shared memory mvp_smem_bytes(F::F32X, n_in,
 * MvpThreads<F>::N), any gridDim.x (the host sizes it to one resident wave); warp g owns rows
 * [g * rpw, (g + 1) * rpw).
 * Each warp issues the loads of its first step before the block stages x (so weight reads overlap
 * the staging and, as a programmatic dependent launch, the previous kernel's tail), then runs a
 * two-deep pipeline over its (row, step) sequence: the next step's UN units per lane are loaded
 * before the current ones are used, and the use begins with the format's prep (MvpPrep) on every
 * lane. Per row: f32 accumulation, xor-shuffle reduction from warpSize / 2, one lane stores (times
 * the RMS scale, see mvp_stage_end): lane 0, or the row's own lane (MvpYLane), which holds the same
 * sum. xq != NULL (int8 formats, no norm_w): x already quantized by
 * its producer (xq[0, n_in) int8, xd[0, n_in / 32) as mm_quantize_x writes them), copied instead
 * of quantized. A non-finite x * norm_w makes the whole block compute its rows in f32 from x
 * (F::Dec decode), so NaN/inf propagate exactly as in the f32 kernels.
 * mvp_block is the body, for the launch's blocks from blk0 on (k_mvp: all of them; k_mvp2). */
/* RF_BOUND_NODOT (a timing-only build, `scripts/device-run.sh bound`): the decode matvecs read
 * each unit's weights as usual and skip its dot, so a step's time without the consumers' work
 * bounds what a faster unit or a shorter row path can gain (docs/PERF.md, forty-second session).
 * Its outputs are meaningless. */
#ifdef RF_BOUND_NODOT
template <class R> __device__ __forceinline__ float mm_bound_nodot(const R &w) {
    const uint32_t *p = (const uint32_t *)&w;
    uint32_t v = 0;
MM_UNROLL
    for (int i = 0; i < (int)(sizeof w / 4); i++) v ^= p[i];
    return (float)(v & 1u);
}
#define MM_UNIT_DOT(F, w, k, xs, n_in) mm_bound_nodot(w)
#define MM_UNIT_DOT_LANE(F, w, x, kk) mm_bound_nodot(w)
#else
#define MM_UNIT_DOT(F, w, k, xs, n_in) F::dot(w, k, xs, n_in)
#define MM_UNIT_DOT_LANE(F, w, x, kk) F::dot_lane(w, x, kk)
#endif
/* A row's store by one lane: y = v, or y += v when accumulating (the output and down projections
 * add into the residual). On CUDA the accumulate is a reduction (red.global.add.f32), which returns
 * nothing, so the lane does not wait an L2 round trip for y's old value before the warp goes on to
 * its next row. Each row has one writer per launch, so y + v is rounded once, to nearest, as a read,
 * add and write round it; the reduction flushes subnormal operands and results to zero, which the
 * CPU reference does not (values below 2^-126: not a residual's). HIP keeps the read, add and write
 * (a float reduction to global memory is a compare-and-swap loop on RDNA).
 * RF_BOUND_NOYREAD (timing only, as above): an accumulating row's store does not read y first. */
#if defined(RF_BOUND_NOYREAD)
#define MM_ROW_STORE(yp, v, accum) (*(yp) = (v))
#elif defined(RF_GPU_HIP)
#define MM_ROW_STORE(yp, v, accum) (*(yp) = (accum) ? *(yp) + (v) : (v))
#else
#define MM_ROW_STORE(yp, v, accum) ((accum) ? (void)atomicAdd((yp), (v)) : (void)(*(yp) = (v)))
#endif

#ifndef MVP_YLANE /* (overridable for benchmarks) */
#define MVP_YLANE 1
#endif
/* MVP_YLANE: lane i of a warp finds row r0 + i's output address and bias once per launch (before
 * the grid dependency wait) and stores that row, so a row's end waits for no job lookup through
 * the constant bank. Every lane holds the row's sum: each butterfly level adds the same two values
 * in either order, so the stored value is lane 0's, bit for bit. Whole-model tg128, H200,
 * 2026-11-28: 7B Q4_K_M +0.35%, 1B Q4_K_M +0.4%. Only the int8 formats at two blocks per SM have
 * the registers: at 64 (Q4_0, Q8_0 and their X8 layouts, F16 at UN 4) it spilled or cost
 * registers. The same in k_mvt: 7B Q4_0 level, 1B Q4_0 -1.2% (not kept). */
template <class F> struct MvpYLane {
    enum { ON = MVP_YLANE && !F::F32X && MvpMinBlocks<F>::N == 1 };
};
template <class F, int UN, int PAIR>
__device__ __forceinline__ void mvp_block(bool trig_late, unsigned blk0, const MvJobs &jobs, int64_t rows, int64_t rpw,
                                          int64_t row_bytes, int64_t n_in, const float *__restrict__ x,
                                          const float *__restrict__ norm_w, float eps, int accum,
                                          const int8_t *__restrict__ xq, const float2 *__restrict__ xd) {
    RF_STAMPS_BEGIN;
    extern __shared__ float4 mvp_smem4[];
    uint8_t *xs = (uint8_t *)mvp_smem4;
#if MM_XSWZ_ON
    xs += (64u - ((uint32_t)__cvta_generic_to_shared(xs) & 63u)) & 63u;
#endif
    float *red = (float *)(xs + mvp_x_bytes(F::F32X, n_in));
    typedef typename F::Raw Raw;
    const int ws = warpSize, nwarps = (int)blockDim.x / ws;
    const int lane = (int)threadIdx.x % ws;
    const int64_t r0 = ((int64_t)(blockIdx.x - blk0) * nwarps + (int)threadIdx.x / ws) * rpw;
    const int64_t r1 = r0 + rpw < rows ? r0 + rpw : rows;
    const int nunits = (int)(n_in / (F::QK / F::UPB));
    const int nsteps = (nunits + UN * ws - 1) / (UN * ws);
    Raw cur[UN], nxt[UN];
    static_assert(!PAIR || F::F32X, "the swiglu pairing is for the formats that stage x in f32");
    int jb = r0 < r1 && !PAIR ? mvp_job(jobs, r0) : 0;
    const uint8_t *wr = r0 >= r1 ? NULL
                        : PAIR   ? mvp_pair_row_w(jobs, r0, row_bytes)
                                 : jobs.j[jb].w + (r0 - jobs.j[jb].row0) * row_bytes;
    if (wr) mvp_load<F, UN>(wr, lane, nunits, cur);
    float g = 0.0f; /* PAIR: gate_o between its two rows */
    /* The next kernel may launch once every block of this grid has started (it is launched only
     * then, so its blocks never hold a slot one of ours still needs), and its grid dependency wait
     * still waits for this grid to complete. Triggering before this block's own wait rather than
     * after it, here and in k_mvt: 7B Q4_0 decode +1.9%, 1B Q8_0 +2.3%, the other files level
     * (H200, docs/PERF.md, twenty-fifth session). trig_late: after the x staging instead (k_mvp2). */
    if (!trig_late) rf_grid_dep_launch();
    /* Row r0 + lane's output (MvpYLane); the bias is a weight, so it may be read before the wait. */
    float *yo = NULL;
    float bo = 0.0f;
    if (MvpYLane<F>::ON && !PAIR && r0 + lane < r1) {
        const MvJob &J = jobs.j[mvp_job(jobs, r0 + lane)];
        yo = J.y + (r0 + lane - J.row0);
        bo = J.bias ? J.bias[r0 + lane - J.row0] : 0.0f;
    }
    rf_grid_dep_wait(); /* x (and y when accumulating) come from the previous kernel */
    RF_STAMP(1);
    float scale, out_scale;
    const int bad = mvp_stage<F>(x, n_in, norm_w, eps, xq, xd, xs, red, &scale, &out_scale);
    RF_STAMP(2);
    if (trig_late) rf_grid_dep_launch();
    if (!F::F32X && bad) { /* exact f32 semantics for a non-finite xin (uniform per block) */
        mvp_rows_exact<F>(jobs, r0, r1, row_bytes, n_in, x, norm_w, scale, accum);
        return;
    }
    float acc = 0.0f;
    int s = 0;
    for (int64_t r = r0; r < r1;) {
        /* issue the next step's loads */
        int64_t rn = r;
        int sn = s + 1, jn = jb;
        const uint8_t *wn = wr;
        if (sn == nsteps) {
            sn = 0;
            rn = r + 1;
            if (rn < r1 && PAIR) {
                wn = mvp_pair_row_w(jobs, rn, row_bytes);
            } else if (rn < r1) {
                while (jn + 1 < jobs.n && rn >= jobs.j[jn + 1].row0) jn++;
                wn = jobs.j[jn].w + (rn - jobs.j[jn].row0) * row_bytes;
            }
        }
        if (rn < r1) mvp_load<F, UN>(wn, lane + sn * UN * ws, nunits, nxt);
        /* use the current step */
        const int k0 = lane + s * UN * ws;
MM_UNROLL
        for (int u = 0; u < UN; u++) F::prep(cur[u]);
MM_UNROLL
        for (int u = 0; u < UN; u++) {
            const int k = k0 + u * ws;
            if (k < nunits) acc += MM_UNIT_DOT(F, cur[u], k, xs, n_in);
        }
        if (s == nsteps - 1) {
            for (int off = ws / 2; off > 0; off >>= 1) acc += RF_SHFL_XOR(acc, off);
            if (lane == 0 && PAIR) {
                mvp_pair_emit(jobs, r, acc, out_scale, &g);
            } else if (MvpYLane<F>::ON && !PAIR && r - r0 < ws) {
                if (lane == (int)(r - r0)) MM_ROW_STORE(yo, acc * out_scale + bo, accum);
            } else if (lane == 0) {
                const MvJob &J = jobs.j[jb];
                const int64_t o = r - J.row0;
                float *yp = J.y + o;
                const float v = acc * out_scale + (J.bias ? J.bias[o] : 0.0f);
                MM_ROW_STORE(yp, v, accum);
            }
            acc = 0.0f;
        }
MM_UNROLL
        for (int u = 0; u < UN; u++) cur[u] = nxt[u];
        r = rn, s = sn, jb = jn, wr = wn;
    }
    RF_STAMPS_END(RF_STAMP_MVP);
}
template <class F, int UN, int PAIR = 0>
__global__ void MVP_BOUNDS(F, UN, PAIR)
    k_mvp(MvJobs jobs, int64_t rows, int64_t rpw, int64_t row_bytes, int64_t n_in, const float *__restrict__ x,
          const float *__restrict__ norm_w, float eps, int accum, const int8_t *__restrict__ xq,
          const float2 *__restrict__ xd) {
    mvp_block<F, UN, PAIR>(false, 0u, jobs, rows, rpw, row_bytes, n_in, x, norm_w, eps, accum, xq, xd);
}

/* k_mvp2: two k_mvp launches of different int8 formats over the same x in one grid, so that a
 * layer whose q / k / v projections mix formats (Q4_K_M: q and k Q4_K, v Q6_K) pays one kernel
 * boundary for them, not two. Blocks [0, nb_a) are k_mvp<FA, UA>'s blocks over jobs ja (rows_a
 * rows, rpw_a per warp, rb_a bytes per row), the rest k_mvp<FB, UB>'s over jb; each block stages x
 * itself, as k_mvp's do, so every output is bit for bit what the two launches give (and what
 * k_mvt gives for FB where it takes FB). The branch is uniform per block, so each body's block
 * barriers are whole. Launch: blockDim.x = MVP_THREADS (both formats' MvpThreads), dynamic shared
 * memory mvp_smem_bytes(0, n_in, MVP_THREADS); otherwise k_mvp's contract for each half.
 * Where n_in >= MVP2_TRIG_LATE_IN its blocks trigger the next kernel's launch (the decode
 * attention's) after their x staging rather than before their grid dependency wait: whole-model
 * tg128 on an H200, 2026-11-28, the same run: 7B Q4_K_M +1.5%, 7B Q5_K_M +0.7%; for the 1B shape
 * (n_in 2048) the late trigger lost 0.9% (1B Q4_K_M), so it keeps the early one. Late for every
 * decode matvec instead: 7B Q4_K_M +1.8%, but 1B Q4_K_M -3.6%, 1B Q8_0 -9.4% (docs/PERF.md,
 * forty-eighth session). */
#define MVP2_TRIG_LATE_IN 4096
#ifdef RF_GPU_HIP
#define MVP2_BOUNDS __launch_bounds__(MVP_THREADS)
#else
#define MVP2_BOUNDS __launch_bounds__(MVP_THREADS, 2) /* the K-quants' two blocks per SM (<= 128 registers) */
#endif
template <class FA, int UA, class FB, int UB>
__global__ void MVP2_BOUNDS k_mvp2(MvJobs ja, int64_t rows_a, int64_t rpw_a, int64_t rb_a, unsigned nb_a, MvJobs jb,
                                   int64_t rows_b, int64_t rpw_b, int64_t rb_b, int64_t n_in,
                                   const float *__restrict__ x, const float *__restrict__ norm_w, float eps,
                                   int accum, const int8_t *__restrict__ xq, const float2 *__restrict__ xd) {
    static_assert(!FA::F32X && !FB::F32X && (int)MvpThreads<FA>::N == MVP_THREADS &&
                      (int)MvpThreads<FB>::N == MVP_THREADS,
                  "k_mvp2 pairs int8 formats with blocks of MVP_THREADS");
    const bool late = n_in >= MVP2_TRIG_LATE_IN;
    if (blockIdx.x < nb_a)
        mvp_block<FA, UA, 0>(late, 0u, ja, rows_a, rpw_a, rb_a, n_in, x, norm_w, eps, accum, xq, xd);
    else
        mvp_block<FB, UB, 0>(late, nb_a, jb, rows_b, rpw_b, rb_b, n_in, x, norm_w, eps, accum, xq, xd);
}

/* ---- k_mvt: k_mvp with its weights streamed by bulk copies (CUDA sm_90+) ------------------- */
#ifndef RF_GPU_HIP

/* Which formats take k_mvt, with how many ring slots per warp (S) and resident blocks per SM the
 * registers are capped for (B). Measured against k_mvp on an H200 (2026-11-22, whole-model tg128,
 * S / B 4 / 2, 3 / 3, 2 / 4): Q4_0 X8 gained with 3 / 3 (7B 457 -> 487, 1B 1513 -> 1553 t/s); Q8_0 X8
 * (7B 372 -> 362, 1B 1407 -> 1375), Q4_K (7B Q4_K_M 430 -> 410) and F16 (1B F16 1050 -> 1000) were
 * slower, so they stay on k_mvp. A format needs 16-byte multiples per block (every step's bytes
 * are one bulk copy). */
/* P: rows per ring slot. With P = 2 a slot holds one step (UN units per lane) of two rows and each
 * unit's x is read from shared memory once for both, which halves the x reads per row (the staged
 * x is ~2/3 of a row's shared-memory wavefronts). 3 / 3 / 2 with P = 2 against 3 / 3 / 4 with
 * P = 1, the same slot bytes (whole-model tg128, H200, 2026-11-28): 7B Q4_0 +0.7%, 1B Q4_0 +2.1%. */
#ifndef MVT_Q4_0_S /* (overridable for benchmarks) */
#define MVT_Q4_0_S 3
#define MVT_Q4_0_B 3
#define MVT_Q4_0_UN 2
#define MVT_Q4_0_P 2
#endif
/* XH: each lane's x addresses computed once per launch (MvtX) instead of per unit; with the weights'
 * per-lane slot offsets (mvt_units) that took ~15 address instructions per unit off every row's path
 * (whole-model tg128, H200, 2026-11-28: 7B Q4_0 +3.5%, 1B Q4_0 +1.5%; overridable for benchmarks). */
#ifndef MVT_XH
#define MVT_XH 1
#endif
/* WHOLE: a step whose units all exist runs them without guards (mvt_units); EARLY: a warp refills
 * its slot as soon as its units' dots are done, before the row's reduction and store. Whole-model
 * tg128 on an H200, 2026-11-28: 7B Q4_0 +1.6% (WHOLE) and +0.8% more (EARLY); 7B Q4_K_M, whose
 * Q6_K X8 parts take k_mvt, lost 0.1-0.4% with WHOLE and 0.6% with EARLY, so Q6_K X8 keeps both off. */
template <class F> struct MvtTune {
    enum { ON = 0, S = 3, B = 3, UN = 4, WHOLE = 0, EARLY = 0, P = 1, XH = 0 };
};
template <> struct MvtTune<MvpI8<VQ4_0X8> > {
    enum { ON = 1, S = MVT_Q4_0_S, B = MVT_Q4_0_B, UN = MVT_Q4_0_UN, WHOLE = 1, EARLY = 1, P = MVT_Q4_0_P, XH = MVT_XH };
};
/* Q6_K X8 with 3 / 3 and two 64-weight units per lane (80 registers, no spills), retried after the
 * units had become leaner (H200, 2026-11-24, tg128 against k_mvp): 7B Q4_K_M 543.5 -> 552.3, 1B
 * Q4_K_M 1,973 -> 1,999, 7B Q6_K 418.7 -> 445.6 t/s. Other geometries (S / B / UN) on the same
 * kind of run: 2 / 4 / 1 suits whole-Q6_K files (7B Q6_K 474 against 446) but costs 1B Q4_K_M 2%;
 * 3 / 4 / 1, 4 / 3 / 1, 5 / 3 / 1, 2 / 3 / 2 and 4 / 2 / 2 lose 4-7% for 7B Q4_K_M. Q4_K lost again on
 * k_mvt (3 / 3 / 2, 4 / 2 / 2, 6 / 3 / 1: 7B Q4_K_M -5 to -8%), as did Q8_0 X8, IQ4_NL X8 and Q5_K H
 * (docs/PERF.md, twenty-ninth session). */
/* Two rows per slot at one unit per lane (3 / 3 / 1 / 2: the same slot bytes as 3 / 3 / 2 / 1), so
 * each unit's x is read once for two rows and the rows end in pairs (mvt_row_end2): whole-model
 * tg128, H200, 2026-11-28: 7B Q4_K_M +0.6%, 1B Q4_K_M +1.3%, 7B Q4_0 (its output head) +0.1%;
 * 4 / 2 / 1 / 2 did as well for 7B Q4_K_M less 0.2%. */
#ifndef MVT_Q6_KX8_S /* (overridable for benchmarks) */
#define MVT_Q6_KX8_S 3
#define MVT_Q6_KX8_B 3
#define MVT_Q6_KX8_UN 1
#define MVT_Q6_KX8_P 2
#endif
template <> struct MvtTune<MvpI8<VQ6_KX8> > {
    enum { ON = 1, S = MVT_Q6_KX8_S, B = MVT_Q6_KX8_B, UN = MVT_Q6_KX8_UN, WHOLE = 0, EARLY = 0, P = MVT_Q6_KX8_P, XH = 0 };
};
/* Bytes of one k_mvt step: UN units per lane of a ws-lane warp (whole blocks: UN * ws % UPB == 0). */
HD int mvt_step_bytes(int un, int ws, int upb, int bb) { return un * ws / upb * bb; }
/* Offset of the rings from k_mvt's 64-byte aligned base: after the staged x and the norm's reduction
 * slots, 16-byte aligned. Then nwarps * S slots of sb bytes, then one mbarrier per slot. */
HD size_t mvt_ring_off(int f32x, int64_t n_in) {
    return (mvp_x_bytes(f32x, n_in) + 4 * MVP_MAX_WARPS + 15) & ~(size_t)15;
}
static size_t mvt_smem_bytes(int f32x, int64_t n_in, int nwarps, int stages, int sb) {
    return 64 + mvt_ring_off(f32x, n_in) + (size_t)nwarps * stages * ((size_t)sb + 8);
}

/* The next step a warp copies: row r (of job j, its bytes at w), step s of the row. Lane 0 copies
 * that step's bytes (the last step of a row may be shorter) into dst, then moves on. */
struct MvtNext {
    const uint8_t *w;
    int64_t r;
    int s, j;
    const uint8_t *wb; /* P = 2: row r + 1's bytes (NULL past the warp's rows) */
};
/* Row r's job; *j moves forward from where it is (a warp's rows come in increasing order). */
__device__ __forceinline__ const MvJob &mvt_job(const MvJobs &jobs, int *j, int64_t r) {
    while (*j + 1 < jobs.n && r >= jobs.j[*j + 1].row0) (*j)++;
    return jobs.j[*j];
}
/* Row r's bytes; *j (its job) moves forward from where it is. */
__device__ __forceinline__ const uint8_t *mvt_row_w(const MvJobs &jobs, int64_t r, int *j, int64_t row_bytes) {
    const MvJob &J = mvt_job(jobs, j, r);
    return J.w + (r - J.row0) * row_bytes;
}
/* P = 2: a slot holds step s of rows r and r + 1 (sb bytes each), one barrier phase for both. */
template <int P>
__device__ __forceinline__ void mvt_issue(MvtNext &it, const MvJobs &jobs, int64_t r1, int nsteps, int64_t row_bytes,
                                          int sb, uint8_t *dst, uint64_t *bar) {
    const int64_t left = row_bytes - (int64_t)it.s * sb;
    const uint32_t n = (uint32_t)(left < sb ? left : sb);
    if (P == 1)
        mm_bulk_load(dst, it.w + (int64_t)it.s * sb, n, bar);
    else
        mm_bulk_load2(dst, it.w + (int64_t)it.s * sb, n, dst + sb, it.wb ? it.wb + (int64_t)it.s * sb : it.w,
                      it.wb ? n : 0u, bar);
    if (++it.s == nsteps) {
        it.s = 0;
        it.r += P;
        it.w = mvt_row_w(jobs, it.r, &it.j, row_bytes);
        if (P == 2) {
            int j = it.j;
            it.wb = it.r + 1 < r1 ? mvt_row_w(jobs, it.r + 1, &j, row_bytes) : NULL;
        }
    }
}

/* k_mvt is CUDA-only (sm_90+): warps of 32 lanes, a constant so that the loops over them unroll
 * (the row's shuffle reduction as a loop over warpSize cost 7B Q4_0 tg128 1.2%, H200, 2026-11-28). */
#define MVT_WS 32

/* A lane's x addresses for formats whose unit is one 32-element block of int8 x with one (scale,
 * sum) pair (MvtTune XH), computed once per launch. Unit kk + lane (kk a multiple of 32) has its two
 * 16-byte halves at lo + 32 kk and hi + 32 kk and its pair at d + kk: mm_xswz permutes by address
 * bits 7-8, which adding a multiple of 1024 bytes leaves as they are, so one lane's permutation is
 * the same for all of its units. */
struct MvtX {
    const int8_t *lo, *hi;
    const float2 *d;
};
/* Unit k's dot (kk = k - lane): through the lane's hoisted x addresses where the format takes them. */
template <class F, int XH> struct MvtDot {
    static __device__ __forceinline__ float run(const typename F::Raw &w, int k, const uint8_t *xs, int64_t n_in,
                                                const MvtX &, int) {
        return MM_UNIT_DOT(F, w, k, xs, n_in);
    }
};
template <class F> struct MvtDot<F, 1> {
    static __device__ __forceinline__ float run(const typename F::Raw &w, int, const uint8_t *, int64_t,
                                                const MvtX &xl, int kk) {
        return MM_UNIT_DOT_LANE(F, w, xl, kk);
    }
};
__device__ __forceinline__ MvtX mvt_x_lane(uint8_t *xs, int64_t n_in, int lane) {
    int8_t *p = (int8_t *)xs + 32 * lane;
    const MvtX x = {mm_xswz(p), mm_xswz(p + 16), (const float2 *)(xs + mvp_round64(n_in)) + lane};
    return x;
}

/* acc += this lane's units of the step in slot sp (unit k0 + lane + 32 u of the row, u < UN),
 * in unit order; with NR = 2 also acc_b += those of the slot's second row (at sp + sb). The first
 * W units exist in every lane (the caller checked it), so they need no guard and their
 * shared-memory loads can all issue before the first dot; the rest are guarded.
 * A warp's row-to-row path is what k_mvt's streaming waits on: with the guards on every unit,
 * each unit's loads waited for the previous unit's dot (7B Q4_0 tg128 +1.6% without them, H200,
 * 2026-11-28). */
template <class F, int UN, int W, int NR>
__device__ __forceinline__ void mvt_units(float &acc, float &acc_b, const uint8_t *sp, int sb, int k0, int lane,
                                          int nunits, const uint8_t *xs, int64_t n_in, const MvtX &xl) {
    static_assert(MVT_WS % F::UPB == 0, "a lane's units sit at the same place in their blocks");
    const uint8_t *wl = sp + (lane / F::UPB) * F::BB; /* unit lane + 32 u: block lane / UPB + u 32 / UPB */
MM_UNROLL
    for (int u = 0; u < UN; u++) {
        const int k = lane + u * MVT_WS;
        if (u < W || k0 + k < nunits) {
            typename F::Raw w;
            const uint8_t *wb = wl + u * (MVT_WS / F::UPB) * F::BB;
            F::load(wb, lane % F::UPB, w);
            acc += MvtDot<F, MvtTune<F>::XH>::run(w, k0 + k, xs, n_in, xl, k0 + u * MVT_WS);
            if (NR == 2) { /* the second row of the slot: the same x, read once (the loads are common) */
                F::load(wb + sb, lane % F::UPB, w);
                acc_b += MvtDot<F, MvtTune<F>::XH>::run(w, k0 + k, xs, n_in, xl, k0 + u * MVT_WS);
            }
        }
    }
}
/* A step's units for one row (nr 1) or two (nr 2, P = 2 only). */
template <class F, int UN, int W, int P>
__device__ __forceinline__ void mvt_step(int nr, float &acc, float &acc_b, const uint8_t *sp, int sb, int k0, int lane,
                                         int nunits, const uint8_t *xs, int64_t n_in, const MvtX &xl) {
    if (P == 2 && nr == 2)
        mvt_units<F, UN, W, 2>(acc, acc_b, sp, sb, k0, lane, nunits, xs, n_in, xl);
    else
        mvt_units<F, UN, W, 1>(acc, acc_b, sp, sb, k0, lane, nunits, xs, n_in, xl);
}
/* Row r's output from its sum (*jb: r's job, moved forward). */
__device__ __forceinline__ void mvt_row_store(const MvJobs &jobs, int *jb, int64_t r, float sum, float out_scale,
                                              int accum) {
    const MvJob &J = mvt_job(jobs, jb, r);
    const int64_t o = r - J.row0;
    MM_ROW_STORE(J.y + o, sum * out_scale + (J.bias ? J.bias[o] : 0.0f), accum);
}
/* The end of row r: the warp's sum of acc, lane 0's store. */
__device__ __forceinline__ void mvt_row_end(float acc, int lane, const MvJobs &jobs, int *jb, int64_t r, float out_scale,
                                            int accum) {
    for (int off = MVT_WS / 2; off > 0; off >>= 1) acc += RF_SHFL_XOR(acc, off);
    if (lane == 0) mvt_row_store(jobs, jb, r, acc, out_scale, accum);
}

/* The ends of rows r and r + 1 (P = 2) at once: one exchange (lanes i and i + 16) leaves lanes 0-15
 * with row r's partial sums and lanes 16-31 with row r + 1's, four levels finish both halves, and
 * lanes 0 and 16 store side by side. Each sum is mvt_row_end's, term for term (lane i + 16 takes
 * lane i's part), in five shuffles instead of ten, and the two stores (job lookup, reduction to y)
 * are one pass instead of two in a row on lane 0. Whole-model tg128, H200, 2026-11-28: 7B Q4_0
 * +4.1% alone, +2.2% after XH; 1B Q4_0 +3.2% after XH. */
__device__ __forceinline__ void mvt_row_end2(float acc, float acc_b, int lane, const MvJobs &jobs, int *jb, int64_t r,
                                             float out_scale, int accum) {
    const int hi = lane & 16;
    float v = (hi ? acc_b : acc) + RF_SHFL_XOR(hi ? acc : acc_b, 16);
    for (int off = 8; off > 0; off >>= 1) v += RF_SHFL_XOR(v, off);
    if ((lane & 15) == 0) mvt_row_store(jobs, jb, r + (hi ? 1 : 0), v, out_scale, accum);
}

/* k_mvt: what k_mvp computes (same contract, same staging, same per-row f32 accumulation order
 * within a lane), for the formats MvtTune turns on, on sm_90+. The weights do not pass through
 * registers: every warp owns a ring of S = MvtTune<F>::S shared-memory slots of one step each (UN
 * units per lane, mvt_step_bytes) of P = MvtTune<F>::P rows (the warp's rows taken in pairs when
 * P = 2, the last one alone when the warp has an odd number), lane 0 keeps S slots in flight as bulk
 * copies (the first ones issued before the grid dependency wait and the x staging), the lanes read
 * their units from the slot once its barrier completes, and lane 0 refills the slot after a
 * __syncwarp. A row's sum is stored by lane 0, or by lanes 0 and 16 for a slot's two rows
 * (mvt_row_end2). Extra contract: row_bytes % 16 == 0, W 16-byte aligned; launch with dynamic shared
 * memory mvt_smem_bytes(F::F32X, n_in, blockDim.x / warpSize, S, P x step bytes); every copy issued
 * is waited for before exit. */
template <class F, int UN>
__global__ void __launch_bounds__(MVP_THREADS, MvtTune<F>::B)
    k_mvt(MvJobs jobs, int64_t rows, int64_t rpw, int64_t row_bytes, int64_t n_in, const float *__restrict__ x,
          const float *__restrict__ norm_w, float eps, int accum, const int8_t *__restrict__ xq,
          const float2 *__restrict__ xd) {
    RF_STAMPS_BEGIN;
    enum { S = MvtTune<F>::S, P = MvtTune<F>::P };
    extern __shared__ float4 mvp_smem4[];
    uint8_t *xs = (uint8_t *)mvp_smem4;
    xs += (64u - ((uint32_t)__cvta_generic_to_shared(xs) & 63u)) & 63u;
    float *red = (float *)(xs + mvp_x_bytes(F::F32X, n_in));
    constexpr int ws = MVT_WS;
    const int nwarps = (int)blockDim.x / ws, wid = (int)threadIdx.x / ws;
    const int lane = (int)threadIdx.x % ws;
    const int sb = mvt_step_bytes(UN, ws, F::UPB, F::BB);
    uint8_t *ring = xs + mvt_ring_off(F::F32X, n_in) + (size_t)wid * S * P * sb;
    uint64_t *bar = (uint64_t *)(xs + mvt_ring_off(F::F32X, n_in) + (size_t)nwarps * S * P * sb) + wid * S;
    const int64_t r0 = ((int64_t)blockIdx.x * nwarps + wid) * rpw;
    const int64_t r1 = r0 + rpw < rows ? r0 + rpw : rows;
    const int nunits = (int)(n_in / (F::QK / F::UPB));
    const int nsteps = (nunits + UN * ws - 1) / (UN * ws);
    const int64_t nt = r0 < r1 ? (r1 - r0 + P - 1) / P * nsteps : 0;
    const int64_t pre = nt < S ? nt : S;
    int jb = r0 < r1 ? mvp_job(jobs, r0) : 0;
    MvtNext it = {r0 < r1 ? jobs.j[jb].w + (r0 - jobs.j[jb].row0) * row_bytes : NULL, r0, 0, jb, NULL};
    if (P == 2 && r0 + 1 < r1) {
        int j = jb;
        it.wb = mvt_row_w(jobs, r0 + 1, &j, row_bytes);
    }
    if (lane == 0) {
        for (int i = 0; i < S; i++) gpu_mbar_init(bar + i);
        for (int t = 0; t < (int)pre; t++)
            mvt_issue<P>(it, jobs, r1, nsteps, row_bytes, sb, ring + (size_t)t * P * sb, bar + t);
    }
    __syncwarp();
    rf_grid_dep_launch(); /* before the wait: see k_mvp */
    rf_grid_dep_wait();   /* x (and y when accumulating) come from the previous kernel */
    RF_STAMP(1);
    float scale, out_scale;
    const int bad = mvp_stage<F>(x, n_in, norm_w, eps, xq, xd, xs, red, &scale, &out_scale);
    RF_STAMP(2);
    if (!F::F32X && bad) { /* exact f32 semantics for a non-finite xin (uniform per block) */
        mvp_rows_exact<F>(jobs, r0, r1, row_bytes, n_in, x, norm_w, scale, accum);
        for (int64_t t = 0; t < pre; t++) gpu_mbar_wait(bar + t, 0); /* no copy may outlive the block */
        return;
    }
    const MvtX xl = mvt_x_lane(xs, n_in, lane);
    float acc = 0.0f, acc_b = 0.0f;
    int s = 0, slot = 0;
    uint32_t parity = 0;
    int64_t r = r0;
    for (int64_t t = 0; t < nt; t++) {
        gpu_mbar_wait(bar + slot, parity);
        if (t == 0) RF_STAMP(4);
        uint8_t *sp = ring + (size_t)slot * P * sb;
        const int k0 = s * UN * ws, nr = P == 2 && r + 1 < r1 ? 2 : 1;
        if (MvtTune<F>::WHOLE && k0 + UN * ws <= nunits) /* a whole step */
            mvt_step<F, UN, UN, P>(nr, acc, acc_b, sp, sb, k0, lane, nunits, xs, n_in, xl);
        else if (MvtTune<F>::WHOLE && UN % 2 == 0 && k0 + UN / 2 * ws <= nunits) /* half of one (1B: n_in 2048, UN 4) */
            mvt_step<F, UN, UN / 2, P>(nr, acc, acc_b, sp, sb, k0, lane, nunits, xs, n_in, xl);
        else
            mvt_step<F, UN, 0, P>(nr, acc, acc_b, sp, sb, k0, lane, nunits, xs, n_in, xl);
        if (MvtTune<F>::EARLY) {
            __syncwarp(); /* every lane is done with the slot */
            if (lane == 0 && t + S < nt) mvt_issue<P>(it, jobs, r1, nsteps, row_bytes, sb, sp, bar + slot);
        }
        if (s == nsteps - 1) {
            if (nr == 2)
                mvt_row_end2(acc, acc_b, lane, jobs, &jb, r, out_scale, accum);
            else
                mvt_row_end(acc, lane, jobs, &jb, r, out_scale, accum);
            acc = acc_b = 0.0f;
            s = 0, r += P;
        } else {
            s++;
        }
        if (!MvtTune<F>::EARLY) {
            __syncwarp();
            if (lane == 0 && t + S < nt) mvt_issue<P>(it, jobs, r1, nsteps, row_bytes, sb, sp, bar + slot);
        }
        if (++slot == S) slot = 0, parity ^= 1u;
    }
    RF_STAMP(5);
    RF_STAMPS_END(RF_STAMP_MVT);
}
#endif
