/* matmul.cu: y = x * W^T on the GPU for every supported GGUF weight type (matmul_gpu.h has the
 * API contract). One source for CUDA (nvcc) and HIP (hipcc, AMD): the few runtime differences
 * are behind gpu_port.h's names; device code never assumes a warp size (warpSize is 32 on
 * NVIDIA, 32 or 64 on AMD).
 *
 * Structure
 *  - Block decoders (struct Dec*, matmul_decoders.cuh): each decodes one "chunk" of E consecutive
 *    elements of a row into f32 registers, bit-exact with core/quant.c (same products, same
 *    order; the GPU may contract a multiply-add into an FMA). They are __host__ __device__ so the
 *    library can check them against the CPU oracle on a machine without a GPU
 *    (rf_gpu_mm_host_decode).
 *  - Unit formats (struct V*, matmul_units.cuh): the part of a block one lane loads and dots with
 *    int8 x per step; the int8-activation kernels below are templates over them.
 *  - k_mvp (decode, n = 1; matmul_decode.cuh, with k_mvt): the int8-activation (or f32-x for
 *    F16/BF16) matvec in one launch: persistent grid, each block stages x itself (one pass, the
 *    RMSNorm's scale applied to the outputs) or copies the int8 x its producer left (k_swiglu_q,
 *    the decode attention), warps pipeline over their rows. k_mvt (sm_90+, the formats MvtTune
 *    turns on): k_mvp with the weights streamed into shared memory by bulk copies instead of
 *    loaded into registers. k_qx + k_mvq (n = 2) and k_mv (f32 x, n <= 2) are the two-kernel /
 *    f32 variants of the same product.
 *  - k_matvec: one warp per output row, lanes stride over the row's chunks, f32 accumulation,
 *    shuffle reduction; up to 8 x columns per launch reuse each decoded chunk.
 *  - GEMM for large n: CUDA with cuBLAS (dlopen'ed; weight decoded to f16 slabs, x to f16,
 *    f32 accumulation); otherwise k_gemm_tiled (f32, decodes weight tiles into shared memory).
 *  - The device layouts' repacking and the host-side runs of the decoders and unit formats:
 *    matmul_formats.cu; what the two files share: matmul_common.cuh.
 */
#include "matmul_common.cuh"
#include "phase_stamps.cuh"
#if RF_GPU_CUDA
#include <dlfcn.h>
#endif

/* ---- Kernels ------------------------------------------------------------------------------ */

#define MV_THREADS 128
#define MV_MAX_COLS 8
#ifdef RF_GPU_HIP
#define MV_LAUNCH_BOUNDS(NC) __launch_bounds__(MV_THREADS)
#else
/* few columns: ask for >= 8 resident blocks (32 warps) per multiprocessor (<= 64 registers) */
#define MV_LAUNCH_BOUNDS(NC) __launch_bounds__(MV_THREADS, (NC) <= 2 ? 8 : 4)
#endif

#define MV_KT 1024 /* x elements staged in shared memory per tile (a multiple of every E) */

/* Shared-memory position of x element e of a tile: float4 groups are XOR-swizzled with bits 5..7
 * of e, so that lanes reading the same float4 of consecutive 8- or 32-element chunks hit
 * different banks, while consecutive float4s (staging stores, 4-element chunks) stay distinct. */
__device__ __forceinline__ int xs_pos(int e) { return (((e >> 2) ^ ((e >> 5) & 7)) << 2) | (e & 3); }

/* Dot of a decoded chunk w[E] with the staged x elements e0 .. e0+E-1 (e0 a multiple of E). */
template <int E> __device__ __forceinline__ float chunk_dot_s(const float *w, const float *xs, int e0) {
    float s = 0.0f;
    if ((E % 4) == 0) {
MM_UNROLL
        for (int i = 0; i < E; i += 4) {
            const float4 v = *(const float4 *)(xs + xs_pos(e0 + i));
            s += w[i] * v.x;
            s += w[i + 1] * v.y;
            s += w[i + 2] * v.z;
            s += w[i + 3] * v.w;
        }
    } else {
MM_UNROLL
        for (int i = 0; i < E; i++) s += w[i] * xs[xs_pos(e0 + i)];
    }
    return s;
}

/* k_matvec: y[c][row] = sum_e W[row][e] * x[c][e] (+ bias[row]) for c < ncols <= NC.
 * Shapes: W has n_out rows of row_bytes bytes (n_in / D::E chunks of D::E elements); x: ncols
 * rows of n_in floats (row c at x + c*n_in); y: ncols rows of n_out.
 * Launch: blockDim.x = MV_THREADS (a multiple of warpSize), one warp per row, gridDim.x =
 * ceil(n_out / (MV_THREADS / warpSize)). Alignment: W base to D::A bytes; x to 16 bytes and
 * n_in % 4 == 0 if xv (else scalar x loads).
 * The block's rows share x: it is staged tile by tile (MV_KT elements per column) in shared
 * memory with coalesced loads; each lane decodes whole chunks (the first one's loads are issued
 * before the staging) and reads its x from shared memory without bank conflicts (xs_pos).
 * f32 accumulation, xor-shuffle reduction from warpSize/2 down. NaN/inf propagate as IEEE
 * arithmetic (no padding values are ever multiplied). accum != 0: y += (dot + bias). */
template <class D, int NC>
__global__ void MV_LAUNCH_BOUNDS(NC)
    k_matvec(const uint8_t *__restrict__ W, int64_t row_bytes, int64_t n_out, int64_t n_in, const float *__restrict__ x,
             int ncols, int xv, const float *__restrict__ bias, float *__restrict__ y, int accum) {
    __shared__ __align__(16) float xs[NC * MV_KT];
    const int ws = warpSize;
    const int lane = (int)threadIdx.x % ws;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / ws) + threadIdx.x / ws;
    const bool valid = row < n_out; /* uniform per warp */
    const uint8_t *wr = W + (valid ? row : 0) * row_bytes;
    float acc[NC];
MM_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    for (int64_t k0 = 0; k0 < n_in; k0 += MV_KT) {
        const int kt = (int)(n_in - k0 < MV_KT ? n_in - k0 : MV_KT); /* a multiple of E */
        const int tchunks = kt / D::E;
        const int c0 = (int)(k0 / D::E);
        float w[D::E];
        const bool have = valid && lane < tchunks;
        if (have) D::dec(wr + (int64_t)((c0 + lane) / D::C) * D::BB, (c0 + lane) % D::C, w);
        if (xv) {
            const int q = kt >> 2;
            for (int i = (int)threadIdx.x; i < ncols * q; i += (int)blockDim.x) {
                const int c = i / q, f = i - c * q;
                const float4 v = *(const float4 *)(x + (int64_t)c * n_in + k0 + 4 * f);
                *(float4 *)(xs + c * MV_KT + xs_pos(4 * f)) = v;
            }
        } else {
            for (int i = (int)threadIdx.x; i < ncols * kt; i += (int)blockDim.x) {
                const int c = i / kt, e = i - c * kt;
                xs[c * MV_KT + xs_pos(e)] = x[(int64_t)c * n_in + k0 + e];
            }
        }
        __syncthreads();
        if (have) {
MM_UNROLL
            for (int c = 0; c < NC; c++)
                if (c < ncols) acc[c] += chunk_dot_s<D::E>(w, xs + c * MV_KT, lane * D::E);
            for (int kk = lane + ws; kk < tchunks; kk += ws) {
                D::dec(wr + (int64_t)((c0 + kk) / D::C) * D::BB, (c0 + kk) % D::C, w);
MM_UNROLL
                for (int c = 0; c < NC; c++)
                    if (c < ncols) acc[c] += chunk_dot_s<D::E>(w, xs + c * MV_KT, kk * D::E);
            }
        }
        __syncthreads();
    }
MM_UNROLL
    for (int c = 0; c < NC; c++)
        for (int off = ws / 2; off > 0; off >>= 1) acc[c] += RF_SHFL_XOR(acc[c], off);
    if (lane == 0 && valid) {
        const float bv = bias ? bias[row] : 0.0f;
MM_UNROLL
        for (int c = 0; c < NC; c++)
            if (c < ncols) {
                float *yp = y + (int64_t)c * n_out + row;
                const float v = bias ? acc[c] + bv : acc[c];
                *yp = accum ? *yp + v : v;
            }
    }
}

/* ---- Fast matvec (n <= 2): x staged whole, no barrier in the weight loop ------------------ */

#define MV_MAX_OUTS 4
/* One output of a fast-matvec launch: rows [row0, row0 + ceil(n_out / R) * R) of the launch's
 * concatenated row space (row0 a multiple of R) belong to it. */
struct MvJob {
    const uint8_t *w;
    const float *bias;
    float *y;
    int64_t n_out;
    int64_t row0;
};
struct MvJobs {
    MvJob j[MV_MAX_OUTS];
    int n;
};

/* The jobs of one matvec launch: outs with n_out > 0 in order, each job's rows starting at a
 * multiple of `round` in the concatenated row space (k_mv's R). Returns the rows in all. */
static int64_t mv_jobs(const rf_gpu_mm_out *outs, int nouts, int64_t round, MvJobs *jobs) {
    memset(jobs, 0, sizeof *jobs);
    int64_t rows = 0;
    for (int i = 0; i < nouts; i++) {
        if (outs[i].n_out <= 0) continue;
        MvJob *j = &jobs->j[jobs->n++];
        j->w = (const uint8_t *)outs[i].w;
        j->bias = outs[i].bias;
        j->y = outs[i].y;
        j->n_out = outs[i].n_out;
        j->row0 = rows;
        rows += (outs[i].n_out + round - 1) / round * round;
    }
    return rows;
}

/* k_mv: for each job J and c < ncols <= NC:
 *   y_J[c][o] (+)= sum_e W_J[o][e] * xin[c][e] + bias_J[o]
 * xin = x, or with norm_w: x[c][e] * (1 / sqrt(sum_e x[c][e]^2 / n_in + eps)) * norm_w[e].
 * Shapes: every W_J has n_in columns (row_bytes bytes per row, n_in / D::E chunks); x: ncols rows of
 * n_in floats; y_J: ncols rows of n_out_J. Alignment: W_J to D::A; x to 16 bytes, n_in % 4 == 0.
 * Launch: blockDim.x = MV_THREADS (a multiple of warpSize), dynamic shared memory NC * n_in floats,
 * gridDim.x = ceil(total rows / (R * warps per block)). Each block stages all of xin (normed in
 * place) in shared memory once (swizzled as xs_pos within 32-element groups), then each warp owns
 * R consecutive rows of one job: lanes stride over chunk indices, every lane decodes the same chunk
 * of its R rows (R independent weight loads in flight) against one x chunk. No barrier after the
 * staging. f32 accumulation, xor-shuffle reduction from warpSize/2. Rows past n_out read row
 * n_out - 1 (in bounds) and are not stored. NaN/inf propagate as IEEE arithmetic (a non-finite x
 * element with the norm makes its whole column non-finite through the scale). */
template <class D, int NC, int R>
__global__ void __launch_bounds__(MV_THREADS)
    k_mv(MvJobs jobs, int64_t row_bytes, int64_t n_in, const float *__restrict__ x, int ncols,
         const float *__restrict__ norm_w, float eps, int accum, int pf) {
    extern __shared__ float4 mv_smem[];
    float *xs = (float *)mv_smem;
    __shared__ float red[NC][MV_THREADS];
    const int ws = warpSize, nwarps = (int)blockDim.x / ws;
    const int lane = (int)threadIdx.x % ws, warp = (int)threadIdx.x / ws;
    const int q4 = (int)(n_in >> 2);
    /* this warp's rows (found before the staging so that their bytes are requested first) */
    const int64_t g0 = ((int64_t)blockIdx.x * nwarps + warp) * R;
    int jb = -1;
    for (int j = 0; j < jobs.n; j++)
        if (g0 >= jobs.j[j].row0) jb = j;
    const MvJob job = jobs.j[jb < 0 ? 0 : jb];
    const int64_t o0 = g0 - job.row0;
    const bool active = jb >= 0 && o0 < job.n_out; /* uniform per warp */
    const uint8_t *wr[R];
MM_UNROLL
    for (int r = 0; r < R; r++) wr[r] = job.w + (o0 + r < job.n_out ? o0 + r : job.n_out - 1) * row_bytes;
#ifndef RF_GPU_HIP
    /* pf: ask L2 for the warp's whole rows now: the DRAM reads overlap the x staging below and
     * are all in flight at once (H200: 10-20 % faster for weights <= 16 MB, up to 15 % slower
     * for larger ones, so the host enables it for small weights only). */
    if (active && pf)
MM_UNROLL
        for (int r = 0; r < R; r++)
            for (int64_t off = (int64_t)lane * 128; off < row_bytes; off += (int64_t)ws * 128)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(wr[r] + off));
#else
    (void)pf;
#endif
    /* stage x (and the sums of squares) */
    float ss[NC];
MM_UNROLL
    for (int c = 0; c < NC; c++) {
        ss[c] = 0.0f;
        if (c < ncols)
            for (int i = (int)threadIdx.x; i < q4; i += (int)blockDim.x) {
                const float4 v = *(const float4 *)(x + (int64_t)c * n_in + 4 * i);
                ss[c] += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
                *(float4 *)(xs + (int64_t)c * n_in + xs_pos(4 * i)) = v;
            }
    }
    if (norm_w) {
MM_UNROLL
        for (int c = 0; c < NC; c++) {
            for (int off = ws / 2; off > 0; off >>= 1) ss[c] += RF_SHFL_XOR(ss[c], off);
            if (lane == 0) red[c][warp] = ss[c];
        }
        __syncthreads();
MM_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= ncols) continue;
            float t = 0.0f;
            for (int i = 0; i < nwarps; i++) t += red[c][i];
            const float scale = 1.0f / sqrtf(t / (float)n_in + eps);
            /* each thread rescales the float4s it stored itself: no barrier needed before */
            for (int i = (int)threadIdx.x; i < q4; i += (int)blockDim.x) {
                float4 *pv = (float4 *)(xs + (int64_t)c * n_in + xs_pos(4 * i));
                const float4 g = *(const float4 *)(norm_w + 4 * i);
                float4 v = *pv;
                v.x = v.x * scale * g.x;
                v.y = v.y * scale * g.y;
                v.z = v.z * scale * g.z;
                v.w = v.w * scale * g.w;
                *pv = v;
            }
        }
    }
    typedef Qd<D> Q;
    /* Q::MIN formats factor a dot as mul * sum(t x) + add * sum(x): exact for finite x, but an
     * infinite x_j where t_j = 0 gives NaN where w_j x_j is +-inf. A block whose staged x has an
     * infinity decodes exactly instead (D::dec, w * x per element), as the f64 oracle computes. */
    int has_inf = 0;
    if (Q::MIN) {
        __syncthreads();
        for (int i = (int)threadIdx.x; i < ncols * (int)n_in; i += (int)blockDim.x)
            if (isinf(xs[(int64_t)(i / n_in) * n_in + xs_pos((int)(i % n_in))])) has_inf = 1;
        has_inf = __syncthreads_or(has_inf);
    } else {
        __syncthreads();
    }
    if (!active) return; /* uniform per warp; no barrier follows */
    float acc[R][NC];
MM_UNROLL
    for (int r = 0; r < R; r++)
MM_UNROLL
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    const int nchunks = (int)(n_in / D::E);
    if (has_inf)
        for (int kk = lane; kk < nchunks; kk += ws) {
            const int64_t boff = (int64_t)(kk / D::C) * D::BB;
MM_UNROLL
            for (int r = 0; r < R; r++) {
                float w[D::E];
                D::dec(wr[r] + boff, kk % D::C, w);
MM_UNROLL
                for (int c = 0; c < NC; c++)
                    if (c < ncols)
                        for (int e = 0; e < D::E; e++) acc[r][c] += w[e] * xs[(int64_t)c * n_in + xs_pos(kk * D::E + e)];
            }
        }
    /* small chunks (plain types, 16 bytes): U chunks per lane per step, U * R loads in flight */
    const int U = D::E <= 8 ? 4 : 1;
    if (!has_inf)
    for (int k0 = lane; k0 < nchunks; k0 += U * ws)
MM_UNROLL
    for (int u = 0; u < U; u++) {
        const int kk = k0 + u * ws;
        if (kk >= nchunks) break;
        const int64_t boff = (int64_t)(kk / D::C) * D::BB;
        const int p = kk % D::C;
        float t[R][D::E], mul[R][Q::G], add[R][Q::G];
MM_UNROLL
        for (int r = 0; r < R; r++) Q::decq(wr[r] + boff, p, t[r], mul[r], add[r]);
        const int e0 = kk * D::E;
MM_UNROLL
        for (int c = 0; c < NC; c++) {
            const float *xc = xs + (int64_t)c * n_in;
MM_UNROLL
            for (int g = 0; g < Q::G; g++) {
                const int L = D::E / Q::G;
                float sxr[R], sx = 0.0f;
MM_UNROLL
                for (int r = 0; r < R; r++) sxr[r] = 0.0f;
                if ((L % 4) == 0) {
MM_UNROLL
                    for (int i = 0; i < L; i += 4) {
                        const float4 v = *(const float4 *)(xc + xs_pos(e0 + g * L + i));
                        if (Q::MIN) sx += (v.x + v.y) + (v.z + v.w);
MM_UNROLL
                        for (int r = 0; r < R; r++) {
                            const float *tt = t[r] + g * L + i;
                            sxr[r] += tt[0] * v.x;
                            sxr[r] += tt[1] * v.y;
                            sxr[r] += tt[2] * v.z;
                            sxr[r] += tt[3] * v.w;
                        }
                    }
                } else {
MM_UNROLL
                    for (int i = 0; i < L; i++) {
                        const float v = xc[xs_pos(e0 + g * L + i)];
                        if (Q::MIN) sx += v;
MM_UNROLL
                        for (int r = 0; r < R; r++) sxr[r] += t[r][g * L + i] * v;
                    }
                }
MM_UNROLL
                for (int r = 0; r < R; r++) {
                    acc[r][c] += mul[r][g] * sxr[r];
                    if (Q::MIN) acc[r][c] += add[r][g] * sx;
                }
            }
        }
    }
MM_UNROLL
    for (int r = 0; r < R; r++)
MM_UNROLL
        for (int c = 0; c < NC; c++)
            for (int off = ws / 2; off > 0; off >>= 1) acc[r][c] += RF_SHFL_XOR(acc[r][c], off);
    if (lane == 0) {
MM_UNROLL
        for (int r = 0; r < R; r++) {
            const int64_t o = o0 + r;
            if (o >= job.n_out) continue;
            const float bv = job.bias ? job.bias[o] : 0.0f;
MM_UNROLL
            for (int c = 0; c < NC; c++) {
                if (c >= ncols) continue;
                float *yp = job.y + (int64_t)c * job.n_out + o;
                const float v = acc[r][c] + bv;
                *yp = accum ? *yp + v : v;
            }
        }
    }
}

/* ---- int8-activation matvec (n <= 2, "mvq"): x quantized once per call, dp4a dots ----------
 * Quantized x (scratch owned by the context): per column c, xq[c][n_in] int8 and, per 32-element
 * block b, xd[c][b] = {d, d * sum_b(q)} with d = amax_b / 127, q = round(xin / d) in [-127, 127];
 * rinfo[c] = {norm scale (1 without norm), 1 if any xin element of the column is not finite}.
 * A column with a non-finite xin is recomputed by the matvec kernel in f32 (exact IEEE
 * propagation as the other paths). */


#define QX_THREADS 512

/* Block-wide RMS scale of x (1 when norm_w is NULL): 1 / sqrt(sum x^2 / n_in + eps), the sum of
 * squares in f32, warp sums combined in warp order, so every thread gets the same value. x and
 * n_in as k_qx; red: blockDim.x / warpSize floats of shared memory. Contains a barrier when
 * norm_w is set (every thread of the block must call it). */
__device__ __forceinline__ float mm_norm_scale(const float *__restrict__ x, int64_t n_in, const float *norm_w,
                                               float eps, float *red) {
    if (!norm_w) return 1.0f;
    const int ws = warpSize, tid = (int)threadIdx.x, bd = (int)blockDim.x;
    float ss = 0.0f;
    for (int64_t i = tid; i < n_in / 4; i += bd) {
        const float4 v = *(const float4 *)(x + 4 * i);
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    for (int off = ws / 2; off > 0; off >>= 1) ss += RF_SHFL_XOR(ss, off);
    if (tid % ws == 0) red[tid / ws] = ss;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < bd / ws; i++) t += red[i];
    return 1.0f / sqrtf(t / (float)n_in + eps);
}

/* Sources of mm_quantize_x: piece p is the 8 values xin[8p, 8p + 8). */
/* xin = x * scale * norm_w (or x when norm_w is NULL); ss += the squares of the raw x. */
struct MmXSrc {
    const float *xr, *norm_w;
    float scale;
    __device__ __forceinline__ void load(int p, float v[8], float &ss) const {
        const float4 a = *(const float4 *)(xr + 8 * p), b = *(const float4 *)(xr + 8 * p + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
MM_UNROLL
        for (int i = 0; i < 8; i++) ss += v[i] * v[i];
        if (norm_w) {
            const float4 ga = *(const float4 *)(norm_w + 8 * p), gb = *(const float4 *)(norm_w + 8 * p + 4);
            const float g[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
MM_UNROLL
            for (int i = 0; i < 8; i++) v[i] = v[i] * scale * g[i];
        }
    }
};
/* The int8 path's quantization of one column xin (from source S, see above): per 32 elements
 * q = round(xin / d) in [-127, 127], d = amax / 127; q to xq[0, n_in), {d, d * sum q} to
 * xd[0, n_in / 32); with MARK, a 32-block holding an inf or NaN gets d = NaN (so that a reader of
 * xd alone can tell). SW = 1 stores q through mm_xswz (k_mvp's permuted shared copy). Each thread quantizes
 * 8-element pieces p = p0 + threadIdx.x + i * stride (p0, stride: multiples of blockDim.x, the
 * same in the whole block); the 4 lanes of a 32-block combine amax, sum(q) and the non-finite
 * flag with xor shuffles 1, 2 (every thread of a block runs the same number of iterations, so
 * shuffles see full warps). *ss accumulates the source's sum of squares. Returns nonzero in a
 * thread that met an inf or NaN (no barrier: the caller combines the flags). */
template <int SW, int MARK, class S>
__device__ __forceinline__ int mm_quantize_x(const S &src, int64_t n_in, int p0, int stride, int8_t *xq, float2 *xd,
                                             float *ss) {
    const int npieces = (int)(n_in / 8);
    const int iters = npieces > p0 ? (npieces - p0 + stride - 1) / stride : 0;
    int bad = 0;
    float sq_acc = 0.0f;
    for (int it = 0; it < iters; it++) {
        const int p = p0 + (int)threadIdx.x + it * stride;
        const bool act = p < npieces;
        float v[8];
        if (act) {
            src.load(p, v, sq_acc);
        } else {
MM_UNROLL
            for (int i = 0; i < 8; i++) v[i] = 0.0f;
        }
        float amax = 0.0f;
        int pbad = 0;
MM_UNROLL
        for (int i = 0; i < 8; i++) {
            const float a = fabsf(v[i]);
            if (!(a <= 3.402823466e38f)) pbad = 1; /* inf or NaN */
            amax = fmaxf(amax, a);
        }
        bad |= pbad;
        amax = fmaxf(amax, RF_SHFL_XOR(amax, 1));
        amax = fmaxf(amax, RF_SHFL_XOR(amax, 2));
        if (MARK) {
            pbad |= RF_SHFL_XOR(pbad, 1);
            pbad |= RF_SHFL_XOR(pbad, 2);
        }
        const float d = MARK && pbad ? NAN : amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        uint32_t pk[2] = {0u, 0u};
        int sq = 0;
MM_UNROLL
        for (int i = 0; i < 8; i++) {
            int q = __float2int_rn(v[i] * id);
            q = q > 127 ? 127 : (q < -127 ? -127 : q);
            sq += q;
            pk[i >> 2] |= ((uint32_t)q & 0xffu) << (8 * (i & 3));
        }
        sq += RF_SHFL_XOR(sq, 1);
        sq += RF_SHFL_XOR(sq, 2);
        if (act) {
            *(uint2 *)(SW ? mm_xswz(xq + 8 * p) : xq + 8 * p) = make_uint2(pk[0], pk[1]);
            if ((p & 3) == 0) xd[p / 4] = make_float2(d, d * (float)sq);
        }
    }
    *ss += sq_acc;
    return bad;
}

/* k_qx: quantizes xin (x, or x RMS-normed as k_mv does) of column c = blockIdx.x to int8
 * (mm_quantize_x). Shapes: x: ncols rows of n_in floats (16-byte aligned, n_in % 32 == 0);
 * norm_w: n_in floats (16-byte aligned) or NULL. Out: xq[c][n_in] int8, xd[c][n_in / 32] =
 * {d, d * sum q}, rinfo[c] = {norm scale or 1, non-finite flag}. Launch: gridDim.x = ncols,
 * blockDim.x = QX_THREADS (a multiple of warpSize). Deterministic (fixed reduction order). */
__global__ void __launch_bounds__(QX_THREADS)
    k_qx(const float *__restrict__ x, int64_t n_in, const float *__restrict__ norm_w, float eps, int8_t *__restrict__ xq,
         float2 *__restrict__ xd, float2 *__restrict__ rinfo) {
    __shared__ float red[QX_THREADS];
    rf_grid_dep_launch(); /* the matvec may start its weight loads; it waits for our completion */
    const int c = (int)blockIdx.x;
    const float *xr = x + (int64_t)c * n_in;
    const float scale = mm_norm_scale(xr, n_in, norm_w, eps, red);
    const MmXSrc src = {xr, norm_w, scale};
    float ss = 0.0f;
    const int bad = __syncthreads_or(mm_quantize_x<0, 0>(src, n_in, 0, (int)blockDim.x, xq + (int64_t)c * n_in,
                                                      xd + (int64_t)c * (n_in / 32), &ss));
    if (threadIdx.x == 0) rinfo[c] = make_float2(scale, bad ? 1.0f : 0.0f);
}

/* k_swiglu_q: out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + expf(-gate[i])) * up[i] for i < n_in
 * (elementwise.cu's swiglu; out may alias gate or up: each thread reads its element before it
 * writes it), and the same values quantized as k_qx does into xq[0, n_in), xd[0, n_in / 32)
 * (rf_quantize32; a 32-block with a non-finite value gets d = NaN). n_in % 32 == 0. Launch:
 * blockDim.x = SWQ_THREADS (a multiple of 32), gridDim.x = ceil(n_in / SWQ_THREADS): one element
 * per thread, so that the step's chain through this kernel is one load, one expf and the block's
 * two reductions (H200 tg128, blocks of 256 against eight elements per thread in 3 blocks of 512:
 * 7B / 1B Q4_K_M +0.45% / +2.3%, 7B Q4_0 +1.2%; blocks of 128 against 256: 7B Q4_0 +0.95%, the
 * others level; of 64: 7B Q4_0 -1.8%; docs/PERF.md, forty-ninth session). Lets the next kernel
 * (the down projection's matvec) start at once; launched as a programmatic dependent launch where
 * that matvec is (it waits before reading gate and up). */
#ifndef SWQ_THREADS /* a build-time knob (bench/gpu_mm_build.sh's NVCC_EXTRA); any multiple of 32 */
#define SWQ_THREADS 128
#endif
__global__ void __launch_bounds__(SWQ_THREADS)
    k_swiglu_q(const float *gate, const float *up, int64_t n_in, float *out, int8_t *__restrict__ xq,
               float2 *__restrict__ xd) {
    RF_STAMPS_BEGIN;
    rf_grid_dep_launch();
    rf_grid_dep_wait(); /* gate and up come from the previous kernel */
    RF_STAMP(1);
    RF_STAMP(2); /* no staging */
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_in) { /* whole 32-element blocks: n_in % 32 == 0 */
        const float g = gate[i], v = g / (1.0f + expf(-g)) * up[i];
        out[i] = v;
        rf_quantize32(v, i, xq, xd);
    }
    RF_STAMPS_END(RF_STAMP_SWIGLU);
}

/* k_mvq: for each job J and c < ncols <= NC:
 *   y_J[c][o] (+)= sum_e W_J[o][e] * xin[c][e] + bias_J[o]
 * with xin as quantized by k_qx (xq, xd, rinfo: see there). Shapes: every W_J has row_bytes bytes
 * per row (mm_row_bytes<V>: n_in / V::QK blocks, or a partial last group), aligned to V::A.
 * Launch: blockDim.x = MV_THREADS (a multiple of warpSize), one warp per row of the concatenated
 * row space (MvJob.row0, R = 1), gridDim.x = ceil(rows / warps per block); may be a programmatic
 * dependent launch after k_qx (the weight loads of the first step are issued before waiting for
 * it). Lanes stride over the row's units
 * (V::UPB per block), UN units per step (UN weight loads in flight), int32 dp4a sums per block
 * half, scales applied once per unit, f32 accumulation, xor-shuffle reduction from warpSize/2.
 * A column flagged non-finite (rinfo.y != 0) is recomputed in f32 from x, norm_w and the
 * row scale (V::Dec decode), so NaN/inf propagate exactly as in the f32 kernels. */
template <class V, int NC, int UN>
__global__ void __launch_bounds__(MV_THREADS)
    k_mvq(MvJobs jobs, int64_t row_bytes, int64_t n_in, const int8_t *__restrict__ xq, const float2 *__restrict__ xd,
          const float2 *__restrict__ rinfo, const float *__restrict__ x, const float *__restrict__ norm_w, int ncols,
          int accum) {
    const int ws = warpSize, nwarps = (int)blockDim.x / ws;
    const int lane = (int)threadIdx.x % ws, warp = (int)threadIdx.x / ws;
    const int64_t g0 = (int64_t)blockIdx.x * nwarps + warp;
    int jb = -1;
    for (int j = 0; j < jobs.n; j++)
        if (g0 >= jobs.j[j].row0) jb = j;
    const MvJob job = jobs.j[jb < 0 ? 0 : jb];
    const int64_t o = g0 - job.row0;
    if (jb < 0 || o >= job.n_out) return; /* uniform per warp; no barrier in this kernel */
    const uint8_t *wr = job.w + o * row_bytes;
    const int nunits = (int)(n_in / (V::QK / V::UPB));
    typename V::Raw raw[UN];
    int k0 = lane;
MM_UNROLL
    for (int u = 0; u < UN; u++) {
        const int k = k0 + u * ws;
        if (k < nunits) V::load(wr + (int64_t)(k / V::UPB) * V::BB, k % V::UPB, raw[u]);
    }
    rf_grid_dep_wait();
    float acc[NC];
MM_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    const int64_t nb32 = n_in / 32;
    for (;;) {
MM_UNROLL
        for (int u = 0; u < UN; u++) {
            const int k = k0 + u * ws;
            if (k < nunits) {
                const int blk = k / V::UPB;
MM_UNROLL
                for (int c = 0; c < NC; c++)
                    if (c < ncols)
                        acc[c] += V::template dot<0>(raw[u], k % V::UPB, xq + c * n_in + (int64_t)blk * V::QK,
                                         xd + c * nb32 + (int64_t)blk * (V::QK / 32));
            }
        }
        k0 += UN * ws;
        if (k0 >= nunits) break;
MM_UNROLL
        for (int u = 0; u < UN; u++) {
            const int k = k0 + u * ws;
            if (k < nunits) V::load(wr + (int64_t)(k / V::UPB) * V::BB, k % V::UPB, raw[u]);
        }
    }
    /* non-finite xin: exact f32 recomputation of the column */
MM_UNROLL
    for (int c = 0; c < NC; c++) {
        if (c >= ncols) continue;
        const float2 ri = rinfo[c];
        if (ri.y == 0.0f) continue;
        typedef typename V::Dec D;
        const float *xc = x + c * n_in;
        float a = 0.0f;
        for (int kk = lane; kk < (int)(n_in / D::E); kk += ws) {
            float w[D::E];
            D::dec(wr + (int64_t)(kk / D::C) * D::BB, kk % D::C, w);
            for (int e = 0; e < D::E; e++) {
                const int64_t i = (int64_t)kk * D::E + e;
                const float xi = norm_w ? xc[i] * ri.x * norm_w[i] : xc[i];
                a += w[e] * xi;
            }
        }
        acc[c] = a;
    }
MM_UNROLL
    for (int c = 0; c < NC; c++)
        for (int off = ws / 2; off > 0; off >>= 1) acc[c] += RF_SHFL_XOR(acc[c], off);
    if (lane == 0) {
        const float bv = job.bias ? job.bias[o] : 0.0f;
MM_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= ncols) continue;
            float *yp = job.y + (int64_t)c * job.n_out + o;
            const float v = acc[c] + bv;
            *yp = accum ? *yp + v : v;
        }
    }
}

#include "matmul_decode.cuh"

/* k_rmsnorm: out[t][k] = x[t][k] * (1 / sqrt(sum_k x[t][k]^2 / n_in + eps)) * norm_w[k] for k < n_in;
 * one block per row t (gridDim.x = rows), any blockDim.x that is a power of two <= 1024 (the
 * reduction halves from blockDim.x / 2). Sum of squares in f32; NaN/inf in a row make that row's
 * scale NaN/0 as the IEEE formula does. x and out may not overlap. */
__global__ void __launch_bounds__(256)
    k_rmsnorm(const float *__restrict__ x, const float *__restrict__ norm_w, float eps, int64_t n_in,
              float *__restrict__ out) {
    __shared__ float red[1024];
    const float *xr = x + (int64_t)blockIdx.x * n_in;
    float *orow = out + (int64_t)blockIdx.x * n_in;
    float ss = 0.0f;
    for (int64_t k = threadIdx.x; k < n_in; k += blockDim.x) ss += xr[k] * xr[k];
    red[threadIdx.x] = ss;
    __syncthreads();
    for (int s = (int)blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float scale = 1.0f / sqrtf(red[0] / (float)n_in + eps);
    for (int64_t k = threadIdx.x; k < n_in; k += blockDim.x) orow[k] = xr[k] * scale * norm_w[k];
}

#define GT_BM 64 /* tokens per tile */
#define GT_BN 64 /* output rows per tile */
#define GT_BK 32 /* K per step (a multiple of every E) */
#define GT_THREADS 256

/* k_gemm_tiled: y[m][o] = sum_e x[m][e] * W[o][e] (+ bias[o]), m < n, o < n_out, f32 throughout.
 * W: n_out rows of row_bytes (nchunks chunks of D::E; n_in <= nchunks * E, the elements past n_in
 * are never read because only whole chunks exist); x: n rows of n_in floats; y: n rows of n_out.
 * Launch: blockDim.x = GT_THREADS (any warp size), grid (ceil(n_out/GT_BN), ceil(n/GT_BM)).
 * Each block stages a GT_BK slice of x (zero past n / n_in) and of W (decoded, zero past n_out)
 * in shared memory; each thread owns a 4x4 output tile. Alignment: W base to D::A; x, y: 4.
 * Zero padding never meets a non-finite value inside the valid range (both operands are zero
 * there), so NaN/inf behave as in the exact dot. accum != 0: y += (dot + bias). */
template <class D>
__global__ void __launch_bounds__(GT_THREADS)
    k_gemm_tiled(const uint8_t *__restrict__ W, int64_t row_bytes, int64_t n_out, int nchunks, int64_t n_in,
                 const float *__restrict__ x, int n, const float *__restrict__ bias, float *__restrict__ y, int accum) {
    __shared__ __align__(16) float Xs[GT_BK][GT_BM + 4];
    __shared__ __align__(16) float Ws[GT_BK][GT_BN + 4];
    const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t o0 = (int64_t)blockIdx.x * GT_BN;
    const int64_t m0 = (int64_t)blockIdx.y * GT_BM;
    float acc[4][4];
MM_UNROLL
    for (int i = 0; i < 4; i++)
MM_UNROLL
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    const int CPT = GT_BK / D::E; /* chunks per row per K step */
    for (int64_t k0 = 0; k0 < n_in; k0 += GT_BK) {
        for (int i = tid; i < GT_BM * GT_BK; i += GT_THREADS) {
            const int tok = i / GT_BK, kk = i % GT_BK;
            const int64_t gm = m0 + tok, gk = k0 + kk;
            Xs[kk][tok] = (gm < n && gk < n_in) ? x[gm * n_in + gk] : 0.0f;
        }
        for (int i = tid; i < GT_BN * CPT; i += GT_THREADS) {
            const int orow = i / CPT, part = i % CPT;
            const int64_t go = o0 + orow;
            const int gc = (int)(k0 / D::E) + part;
            float w[D::E];
            if (go < n_out && gc < nchunks) {
                D::dec(W + go * row_bytes + (int64_t)(gc / D::C) * D::BB, gc % D::C, w);
            } else {
MM_UNROLL
                for (int e = 0; e < D::E; e++) w[e] = 0.0f;
            }
MM_UNROLL
            for (int e = 0; e < D::E; e++) Ws[part * D::E + e][orow] = w[e];
        }
        __syncthreads();
MM_UNROLL
        for (int kk = 0; kk < GT_BK; kk++) {
            const float4 a = *(const float4 *)&Xs[kk][ty * 4];
            const float4 b = *(const float4 *)&Ws[kk][tx * 4];
            const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
MM_UNROLL
            for (int i = 0; i < 4; i++)
MM_UNROLL
                for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
MM_UNROLL
    for (int i = 0; i < 4; i++) {
        const int64_t gm = m0 + ty * 4 + i;
        if (gm >= n) continue;
MM_UNROLL
        for (int j = 0; j < 4; j++) {
            const int64_t go = o0 + tx * 4 + j;
            if (go < n_out) {
                const float v = bias ? acc[i][j] + bias[go] : acc[i][j];
                y[gm * n_out + go] = accum ? y[gm * n_out + go] + v : v;
            }
        }
    }
}

#ifndef RF_GPU_HIP
/* k_dequant_f16: out[r][e] = (half)W[r][e] for r < rows, e < n_in = nchunks * E (f16 rounding
 * to nearest; |w| > 65504 becomes inf, NaN stays NaN). One thread per chunk; out rows
 * contiguous (n_in halves). Alignment: W to D::A; out to 16 bytes when E % 8 == 0 (then
 * n_in % 8 == 0 and every row start is 16-byte aligned). */
template <class D>
__global__ void k_dequant_f16(const uint8_t *__restrict__ W, int64_t row_bytes, int64_t rows, int nchunks,
                              __half *__restrict__ out) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * nchunks) return;
    const int64_t r = idx / nchunks;
    const int k = (int)(idx % nchunks);
    float w[D::E];
    D::dec(W + r * row_bytes + (int64_t)(k / D::C) * D::BB, k % D::C, w);
    __half *o = out + r * ((int64_t)nchunks * D::E) + (int64_t)k * D::E;
    if ((D::E % 8) == 0) {
MM_UNROLL
        for (int i = 0; i < D::E; i += 8) {
            uint32_t p[4];
MM_UNROLL
            for (int e = 0; e < 4; e++)
                p[e] = (uint32_t)__half_as_ushort(__float2half_rn(w[i + 2 * e])) |
                       ((uint32_t)__half_as_ushort(__float2half_rn(w[i + 2 * e + 1])) << 16);
            *(uint4 *)(o + i) = make_uint4(p[0], p[1], p[2], p[3]);
        }
    } else {
MM_UNROLL
        for (int e = 0; e < D::E; e++) o[e] = __float2half_rn(w[e]);
    }
}

/* k_f32_to_f16: out[i] = (half)in[i], i < count (round to nearest; overflow to inf). */
__global__ void k_f32_to_f16(const float *__restrict__ in, __half *__restrict__ out, int64_t count) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) out[i] = __float2half_rn(in[i]);
}

/* k_fill_bias: y[m][o] = bias[o] (add == 0) or y[m][o] += bias[o] (add != 0) for m < n,
 * o < n_out, count = n * n_out (the GEMM then adds with beta = 1). */
__global__ void k_fill_bias(float *__restrict__ y, const float *__restrict__ bias, int64_t n_out, int64_t count, int add) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) y[i] = add ? y[i] + bias[i % n_out] : bias[i % n_out];
}
#endif

/* ---- cuBLAS, loaded at run time --------------------------------------------------------- */

#ifndef RF_GPU_HIP
/* mm_cublas_api (matmul_common.cuh): the entry points this file calls. */
static int mm_cublas_load(mm_cublas_api *api) {
    const char *names[] = {getenv("RF_CUBLAS_LIB"), "libcublas.so", "libcublas.so.13", "libcublas.so.12",
                           "/usr/local/cuda/lib64/libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13",
                           "/usr/local/cuda/lib64/libcublas.so.12"};
    memset(api, 0, sizeof *api);
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !api->lib; i++)
        if (names[i] && *names[i]) api->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!api->lib) return -1;
    api->create = (pf_cublasCreate)dlsym(api->lib, "cublasCreate_v2");
    api->destroy = (pf_cublasDestroy)dlsym(api->lib, "cublasDestroy_v2");
    api->set_stream = (pf_cublasSetStream)dlsym(api->lib, "cublasSetStream_v2");
    api->gemm_ex = (pf_cublasGemmEx)dlsym(api->lib, "cublasGemmEx");
    api->set_workspace = (pf_cublasSetWorkspace)dlsym(api->lib, "cublasSetWorkspace_v2");
    if (!api->create || !api->destroy || !api->set_stream || !api->gemm_ex) {
        dlclose(api->lib);
        memset(api, 0, sizeof *api);
        return -1;
    }
    return 0;
}
#endif

/* ---- Context (its state: matmul_common.cuh) -------------------------------------------------- */

/* cuBLAS workspace (NVIDIA's recommendation for Hopper: 32 MiB). */
#define MM_CUBLAS_WS ((size_t)32 << 20)
/* Weight scratch cap for the f16 GEMM path: slabs of at most this many elements. */
#define MM_WSCR_MAX_ELEMS ((int64_t)32 << 20)

extern "C" rf_gpu_matmul_ctx *rf_gpu_matmul_init(void *stream) {
    int dev = 0;
    if (mm_check(gpuGetDevice(&dev), "get device")) return NULL;
    int ws = 0;
#ifdef RF_GPU_HIP
    if (mm_check(hipDeviceGetAttribute(&ws, hipDeviceAttributeWarpSize, dev), "warp size")) return NULL;
#else
    if (mm_check(cudaDeviceGetAttribute(&ws, cudaDevAttrWarpSize, dev), "warp size")) return NULL;
#endif
    if (ws <= 0 || ws > MV_THREADS || MV_THREADS % ws) {
        rf_set_error("gpu matmul: unsupported warp size %d", ws);
        return NULL;
    }
    rf_gpu_matmul_ctx *ctx = (rf_gpu_matmul_ctx *)calloc(1, sizeof *ctx);
    if (!ctx) {
        rf_set_error("gpu matmul: out of host memory");
        return NULL;
    }
    ctx->stream = (gpuStream_t)stream;
    ctx->warp_size = ws;
    ctx->legacy_mv = getenv("RF_MM_LEGACY_MV") && atoi(getenv("RF_MM_LEGACY_MV")) != 0;
    ctx->deep_few = !(getenv("RF_MM_DEEP_FEW") && atoi(getenv("RF_MM_DEEP_FEW")) == 0);
    ctx->f32_mv = getenv("RF_MM_F32_MV") && atoi(getenv("RF_MM_F32_MV")) != 0;
    ctx->q_max_n = getenv("RF_MM_I8_N2") && atoi(getenv("RF_MM_I8_N2")) != 0 ? 2 : 1;
#ifdef RF_GPU_HIP
    ctx->pdl = 0;
#else
    ctx->pdl = !(getenv("RF_MM_PDL") && atoi(getenv("RF_MM_PDL")) == 0);
#endif
    ctx->mvp = !(getenv("RF_MM_MVP") && atoi(getenv("RF_MM_MVP")) == 0);
    ctx->pdl_graph = !(getenv("RF_MM_PDL_GRAPH") && atoi(getenv("RF_MM_PDL_GRAPH")) == 0);
    ctx->repack = !(getenv("RF_MM_REPACK") && atoi(getenv("RF_MM_REPACK")) == 0);
    ctx->xq_on = !(getenv("RF_MM_XQ") && atoi(getenv("RF_MM_XQ")) == 0);
    ctx->pair_on = !(getenv("RF_MM_SWIGLU_FUSE") && atoi(getenv("RF_MM_SWIGLU_FUSE")) == 0);
    ctx->mix_on = !(getenv("RF_MM_MIX") && atoi(getenv("RF_MM_MIX")) == 0);
#ifndef RF_GPU_HIP
    {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&ctx->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
            major = 0;
        ctx->tma = major >= 9 && !(getenv("RF_MM_TMA") && atoi(getenv("RF_MM_TMA")) == 0);
        (void)gpuGetLastError();
    }
#endif
    /* int8 x scratch (small; without it the int8 path is off) */
    if (gpuMalloc(&ctx->qbuf, QX_BYTES) != gpuSuccess) ctx->qbuf = NULL;
#ifdef RF_GPU_HIP
    if (hipDeviceGetAttribute(&ctx->n_sm, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess) ctx->n_sm = 64;
#else
    if (cudaDeviceGetAttribute(&ctx->n_sm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) ctx->n_sm = 64;
#endif
    (void)gpuGetLastError();
#ifndef RF_GPU_HIP
    if (!getenv("RF_NO_CUBLAS") && mm_cublas_load(&ctx->cublas) == 0) {
        if (ctx->cublas.create(&ctx->handle) != CUBLAS_STATUS_SUCCESS) {
            ctx->handle = NULL;
        } else if (ctx->cublas.set_stream(ctx->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) {
            ctx->cublas.destroy(ctx->handle);
            ctx->handle = NULL;
        } else if (ctx->cublas.set_workspace && gpuMalloc(&ctx->cbws, MM_CUBLAS_WS) == gpuSuccess) {
            /* after set_stream (which resets the workspace) */
            if (ctx->cublas.set_workspace(ctx->handle, ctx->cbws, MM_CUBLAS_WS) != CUBLAS_STATUS_SUCCESS) {
                (void)gpuFree(ctx->cbws);
                ctx->cbws = NULL;
            }
        }
        (void)gpuGetLastError();
    }
#endif
    return ctx;
}

extern "C" void rf_gpu_matmul_free(rf_gpu_matmul_ctx *ctx) {
    if (!ctx) return;
    if (ctx->qbuf) {
        (void)gpuStreamSynchronize(ctx->stream);
        (void)gpuFree(ctx->qbuf);
    }
#ifndef RF_GPU_HIP
    if (ctx->wscr || ctx->xscr || ctx->cbws) (void)gpuStreamSynchronize(ctx->stream);
    if (ctx->wscr) (void)gpuFree(ctx->wscr);
    if (ctx->xscr) (void)gpuFree(ctx->xscr);
    if (ctx->handle) ctx->cublas.destroy(ctx->handle);
    if (ctx->cbws) (void)gpuFree(ctx->cbws);
    /* the library stays loaded: other contexts may use it */
#endif
    free(ctx);
}

/* ---- Dispatch ------------------------------------------------------------------------------ */

template <class D, int NC>
static void launch_matvec(rf_gpu_matmul_ctx *ctx, const uint8_t *w, int64_t row_bytes, int64_t n_out, int nchunks,
                          int64_t n_in, const float *x, int ncols, int xv, const float *bias, float *y, int accum) {
    const int rows_per_block = MV_THREADS / ctx->warp_size;
    const int64_t blocks = (n_out + rows_per_block - 1) / rows_per_block;
    (void)nchunks;
    k_matvec<D, NC><<<dim3((unsigned)blocks), dim3(MV_THREADS), 0, ctx->stream>>>(w, row_bytes, n_out, n_in, x, ncols, xv,
                                                                                 bias, y, accum);
}

#ifndef RF_GPU_HIP
/* Ensures *buf holds `bytes`; grows only outside graph capture. */
static int mm_scratch(rf_gpu_matmul_ctx *ctx, void **buf, size_t *have, size_t bytes) {
    if (*have >= bytes) return 0;
    gpuStreamCaptureStatus st = gpuStreamCaptureStatusNone;
    if (mm_check(gpuStreamIsCapturing(ctx->stream, &st), "capture query")) return -1;
    if (st != gpuStreamCaptureStatusNone) {
        rf_set_error("gpu matmul: GEMM scratch must grow to %zu bytes during graph capture", bytes);
        return -1;
    }
    if (*buf) {
        if (mm_check(gpuStreamSynchronize(ctx->stream), "sync before scratch growth")) return -1;
        (void)gpuFree(*buf);
        *buf = NULL;
        *have = 0;
    }
    if (mm_check(gpuMalloc(buf, bytes), "scratch allocation")) {
        *buf = NULL;
        return -1;
    }
    *have = bytes;
    return 0;
}

template <class D>
static int gemm_cublas(rf_gpu_matmul_ctx *ctx, uint32_t type, const uint8_t *w, int64_t row_bytes, int64_t n_out,
                       int nchunks, int64_t n_in, const float *x, int n, const float *bias, float *y, int accum) {
    const float one = 1.0f, zero = 0.0f;
    const float *beta = (bias || accum) ? &one : &zero;
    if (n_in > INT32_MAX || n_out > INT32_MAX) {
        rf_set_error("gpu matmul: matrix too large for cuBLAS");
        return -1;
    }
    if (bias) {
        const int64_t count = (int64_t)n * n_out;
        k_fill_bias<<<(unsigned)((count + 255) / 256), 256, 0, ctx->stream>>>(y, bias, n_out, count, accum);
    }
    if (type == RF_TYPE_F32) {
        if (ctx->cublas.gemm_ex(ctx->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, n, (int)n_in, &one, w, CUDA_R_32F,
                                (int)n_in, x, CUDA_R_32F, (int)n_in, beta, y, CUDA_R_32F, (int)n_out,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
            rf_set_error("gpu matmul: cublasGemmEx (f32) failed");
            return -1;
        }
        return 0;
    }
    const int64_t xcount = (int64_t)n * n_in;
    if (mm_scratch(ctx, &ctx->xscr, &ctx->xscr_bytes, (size_t)xcount * 2)) return -1;
    k_f32_to_f16<<<(unsigned)((xcount + 255) / 256), 256, 0, ctx->stream>>>(x, (__half *)ctx->xscr, xcount);
    if (type == RF_TYPE_F16) {
        if (ctx->cublas.gemm_ex(ctx->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, n, (int)n_in, &one, w, CUDA_R_16F,
                                (int)n_in, ctx->xscr, CUDA_R_16F, (int)n_in, beta, y, CUDA_R_32F, (int)n_out,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
            rf_set_error("gpu matmul: cublasGemmEx (f16) failed");
            return -1;
        }
        return 0;
    }
    int64_t slab = MM_WSCR_MAX_ELEMS / n_in;
    if (slab < 1) slab = 1;
    if (slab > n_out) slab = n_out;
    if (mm_scratch(ctx, &ctx->wscr, &ctx->wscr_bytes, (size_t)(slab * n_in * 2))) return -1;
    for (int64_t o = 0; o < n_out; o += slab) {
        const int64_t rows = n_out - o < slab ? n_out - o : slab;
        const int64_t threads = rows * nchunks;
        k_dequant_f16<D><<<(unsigned)((threads + 255) / 256), 256, 0, ctx->stream>>>(w + o * row_bytes, row_bytes, rows,
                                                                                      nchunks, (__half *)ctx->wscr);
        if (ctx->cublas.gemm_ex(ctx->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, n, (int)n_in, &one, ctx->wscr,
                                CUDA_R_16F, (int)n_in, ctx->xscr, CUDA_R_16F, (int)n_in, beta, y + o, CUDA_R_32F,
                                (int)n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
            rf_set_error("gpu matmul: cublasGemmEx failed");
            return -1;
        }
    }
    return 0;
}
#endif

/* Largest dynamic shared memory of k_mv / k_mvp (under the 48 KB every target gives). */
#define MV_SMEM_MAX (46 * 1024)

/* ---- programmatic dependent launches (CUDA) --------------------------------------------------- */
#ifndef RF_GPU_HIP
/* Whether the next launch on the context's stream may be a programmatic dependent launch: RF_MM_PDL
 * on, and inside graph capture only when in_graphs. */
static int mm_pdl_now(rf_gpu_matmul_ctx *ctx, int in_graphs) {
    gpuStreamCaptureStatus st = gpuStreamCaptureStatusNone;
    const int ok = ctx->pdl && gpuStreamIsCapturing(ctx->stream, &st) == gpuSuccess &&
                   (st == gpuStreamCaptureStatusNone || in_graphs);
    (void)gpuGetLastError();
    return ok;
}
/* *cfg: a launch of grid x block (smem bytes of dynamic shared memory) on the context's stream as
 * a programmatic dependent launch; at holds its one attribute and must outlive the launch call. */
static void mm_pdl_config(rf_gpu_matmul_ctx *ctx, dim3 grid, dim3 block, size_t smem, cudaLaunchConfig_t *cfg,
                          cudaLaunchAttribute *at) {
    *cfg = cudaLaunchConfig_t();
    *at = cudaLaunchAttribute();
    at->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at->val.programmaticStreamSerializationAllowed = 1;
    cfg->gridDim = grid;
    cfg->blockDim = block;
    cfg->dynamicSmemBytes = smem;
    cfg->stream = ctx->stream;
    cfg->attrs = at;
    cfg->numAttrs = 1;
}
#endif

/* ---- k_mvp dispatch (n = 1) ------------------------------------------------------------------ */

/* Resident blocks per SM of kernel fn (blocks of threads threads) with smem bytes of dynamic shared
 * memory (cached); -1 when the device refused the opt-in above 48 KB (the caller then takes k_mvp,
 * which stays under it). */
static int mvp_occupancy(rf_gpu_matmul_ctx *ctx, const void *fn, int threads, size_t smem) {
    for (int i = 0; i < ctx->n_occ; i++)
        if (ctx->occ[i].fn == fn && ctx->occ[i].smem == smem) return ctx->occ[i].blocks;
    int nb = 0;
#ifdef RF_GPU_HIP
    if (hipOccupancyMaxActiveBlocksPerMultiprocessor(&nb, fn, threads, smem) != hipSuccess) nb = 0;
#else
    /* above the default 48 KB only after opting in (once per kernel: the device's whole limit) */
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, ctx->smem_optin) != cudaSuccess)
        nb = -1;
    else if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, fn, threads, smem) != cudaSuccess)
        nb = 0;
#endif
    (void)gpuGetLastError();
    if (nb == 0) nb = 1;
    if (ctx->n_occ < (int)(sizeof ctx->occ / sizeof ctx->occ[0])) {
        ctx->occ[ctx->n_occ].fn = fn;
        ctx->occ[ctx->n_occ].smem = smem;
        ctx->occ[ctx->n_occ++].blocks = nb;
    }
    return nb;
}

/* k_mvp's swiglu-pairing instance of F (NULL for the formats it does not take; no `if constexpr`:
 * the HIP build is C++14). */
typedef void (*MvpKernel)(MvJobs, int64_t, int64_t, int64_t, int64_t, const float *, const float *, float, int,
                          const int8_t *, const float2 *);
template <class F, int UN, int ON = F::F32X> struct MvpPairKernel {
    static MvpKernel get() { return NULL; }
};
template <class F, int UN> struct MvpPairKernel<F, UN, 1> {
    static MvpKernel get() { return k_mvp<F, UN, 1>; }
};

/* Enqueues k_mvp<F, UN> (k_mvt where MvtTune turns it on and the device has it) over jobs (rows
 * in all); with ctx->pair, k_mvp's swiglu-pairing instance (jobs: gate, up; see mvp_pair_emit).
 * The grid is one resident wave, trimmed so that every warp gets the same number of rows (rpw)
 * except the last; paired, rpw is even. */
template <class F, int UN>
static int mvp_launch(rf_gpu_matmul_ctx *ctx, const MvJobs &jobs, int64_t rows, int64_t row_bytes, int64_t n_in,
                      const float *x, const float *norm_w, float eps, int accum) {
    int threads = MvpThreads<F>::N, wpb = threads / ctx->warp_size;
    size_t smem = mvp_smem_bytes(F::F32X, n_in, threads);
    MvpKernel fn = k_mvp<F, UN>;
    int mvt = 0;
    if (ctx->pair) fn = MvpPairKernel<F, UN>::get();
#ifndef RF_GPU_HIP
    if constexpr (MvtTune<F>::ON) {
        typedef MvtTune<F> T;
        static_assert(F::BB % 16 == 0 && F::A % 16 == 0, "k_mvt copies whole 16-byte aligned blocks");
        static_assert(!F::PREP, "k_mvt loads each unit inside its guard and runs no prep");
        const int twpb = MVP_THREADS / ctx->warp_size; /* k_mvt: blocks of MVP_THREADS */
        const size_t tsmem =
            mvt_smem_bytes(F::F32X, n_in, twpb, T::S, T::P * mvt_step_bytes(T::UN, ctx->warp_size, F::UPB, F::BB));
        if (ctx->tma && ctx->warp_size == MVT_WS && row_bytes % 16 == 0 && tsmem <= (size_t)ctx->smem_optin &&
            mvp_occupancy(ctx, (const void *)k_mvt<F, T::UN>, MVP_THREADS, tsmem) > 0)
            fn = k_mvt<F, T::UN>, smem = tsmem, threads = MVP_THREADS, wpb = twpb, mvt = 1;
    }
#endif
    const int64_t max_warps = (int64_t)ctx->n_sm * mvp_occupancy(ctx, (const void *)fn, threads, smem) * wpb;
    /* x quantized by its producer (rf_gpu_mm_swiglu or an rf_gpu_mm_xq_buffers user) into qbuf column 0 */
    const int8_t *xq = !F::F32X && ctx->xq_use ? (const int8_t *)ctx->qbuf : NULL;
    const float2 *xd = xq ? (const float2 *)((const uint8_t *)ctx->qbuf + QX_XD_OFF) : NULL;
    int64_t rpw = (rows + max_warps - 1) / max_warps;
    if (ctx->pair) rpw += rpw % 2;
    ctx->last_wave = max_warps, ctx->last_rpw = rpw, ctx->last_mvt = mvt;
    const int64_t warps = (rows + rpw - 1) / rpw;
    const dim3 grid((unsigned)((warps + wpb - 1) / wpb)), block(threads);
#ifndef RF_GPU_HIP
    if (mm_pdl_now(ctx, ctx->pdl_graph)) {
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute at;
        mm_pdl_config(ctx, grid, block, smem, &cfg, &at);
        return mm_check(
            cudaLaunchKernelEx(&cfg, fn, jobs, rows, rpw, row_bytes, n_in, x, norm_w, eps, accum, xq, xd),
            "matvec launch (programmatic)");
    }
#endif
    (void)gpuGetLastError();
    fn<<<grid, block, smem, ctx->stream>>>(jobs, rows, rpw, row_bytes, n_in, x, norm_w, eps, accum, xq, xd);
    return mm_check(gpuGetLastError(), "matvec launch");
}

/* 1 when these outputs should take k_mvp<F, 2 * UN> rather than k_mvp<F, UN>: one resident wave
 * of the UN instance gives each warp at most two rows (a 4096-row projection on an H200: 2 rows
 * for 2048 of the 3168 warps that fit), and the 2 * UN instance, fewer of whose blocks fit, needs
 * no more rows per warp. Such a warp runs only a few pipeline steps, each waiting about one
 * memory latency with two steps of loads in flight, so the kernel is latency-bound below the
 * streaming rate (7B F16, H200: o and down 3.2-3.7 TB/s against 4.3-4.4 for q/k/v and gate/up,
 * phase stamps 2026-11-22); twice the units per step doubles the bytes in flight per warp. */
template <class F, int UN>
static bool mvp_few_rows(rf_gpu_matmul_ctx *ctx, const rf_gpu_mm_out *outs, int nouts, int64_t n_in) {
    if (!ctx->deep_few || nouts < 1 || nouts > MV_MAX_OUTS) return false;
    int64_t rows = 0;
    for (int i = 0; i < nouts; i++) rows += outs[i].n_out > 0 ? outs[i].n_out : 0;
    const size_t smem = mvp_smem_bytes(F::F32X, n_in, MvpThreads<F>::N);
    const int threads = MvpThreads<F>::N;
    const int64_t wsm = (int64_t)ctx->n_sm * threads / ctx->warp_size;
    const int64_t w1 = wsm * mvp_occupancy(ctx, (const void *)k_mvp<F, UN>, threads, smem);
    const int64_t w2 = wsm * mvp_occupancy(ctx, (const void *)k_mvp<F, 2 * UN>, threads, smem);
    if (rows <= 0 || w1 <= 0 || w2 <= 0) return false;
    const int64_t rpw1 = (rows + w1 - 1) / w1, rpw2 = (rows + w2 - 1) / w2;
    return rpw1 <= 2 && rpw2 == rpw1;
}

/* What k_mvp<F> in blocks of `threads` needs of a group of nouts outputs (shared by mvp_try and
 * each half of mvp2_try): the decode matvecs on, int8 formats only without RF_MM_F32_MV; n_in a
 * whole number of row steps (and of 32-element blocks for the int8 formats); the staged x within
 * MV_SMEM_MAX; x and norm_w 16-byte aligned; unit indices that fit an int; every W aligned to F::A. */
template <class F>
static bool mvp_group_ok(const rf_gpu_matmul_ctx *ctx, const rf_gpu_mm_out *outs, int nouts, int64_t n_in,
                         const float *x, const float *norm_w, int threads) {
    if (!ctx->mvp || ctx->legacy_mv || (!F::F32X && ctx->f32_mv) || nouts < 1 || nouts > MV_MAX_OUTS || n_in <= 0 ||
        n_in % mm_row_step<F>() || (!F::F32X && n_in % 32) || n_in % 8 ||
        mvp_smem_bytes(F::F32X, n_in, threads) > MV_SMEM_MAX || (uintptr_t)x % 16 ||
        (norm_w && (uintptr_t)norm_w % 16) || n_in / (F::QK / F::UPB) > INT32_MAX)
        return false;
    for (int i = 0; i < nouts; i++)
        if ((uintptr_t)outs[i].w % F::A) return false;
    return true;
}

/* k_mvp for one group of same-format outputs. Returns 1 done, 0 ineligible, -1 error. Eligible:
 * n == 1 and mvp_group_ok; with ctx->pair (the swiglu pairing), a plain format and two outputs. */
template <class F, int UN>
static int mvp_try(rf_gpu_matmul_ctx *ctx, const rf_gpu_mm_out *outs, int nouts, int64_t n_in, const float *x, int n,
                   const float *norm_w, float eps, int accum) {
    if (n != 1 || !mvp_group_ok<F>(ctx, outs, nouts, n_in, x, norm_w, MvpThreads<F>::N)) return 0;
    if (ctx->pair && (!F::F32X || nouts != 2 || outs[0].n_out <= 0)) return 0;
    MvJobs jobs;
    const int64_t rows = mv_jobs(outs, nouts, 1, &jobs);
    if (jobs.n == 0) return 1;
    const int64_t row_bytes = mm_row_bytes<F>(n_in);
    return mvp_launch<F, UN>(ctx, jobs, rows, row_bytes, n_in, x, norm_w, eps, accum) ? -1 : 1;
}

/* Fast matvec for outputs of one decoder D (n <= 2). Returns 1 when done, 0 when ineligible (the
 * caller falls back), -1 on a launch error. Eligible: n <= 2, x 16-byte aligned, n_in % 4 == 0,
 * n * n_in floats fit the shared-memory budget, every W aligned to D::A,
 * n_in % mm_row_step<D>() == 0. */
template <class D>
static int mv_try(rf_gpu_matmul_ctx *ctx, const rf_gpu_mm_out *outs, int nouts, int64_t n_in, const float *x, int n,
                  const float *norm_w, float eps, int accum) {
    if (ctx->pair || ctx->legacy_mv || n < 1 || n > 2 || nouts < 1 || nouts > MV_MAX_OUTS || (uintptr_t)x % 16 || n_in % 4 ||
        n_in % mm_row_step<D>() || (size_t)n * (size_t)n_in * 4 > MV_SMEM_MAX || (norm_w && (uintptr_t)norm_w % 16))
        return 0;
    int64_t total = 0;
    for (int i = 0; i < nouts; i++) {
        if ((uintptr_t)outs[i].w % D::A) return 0;
        total += outs[i].n_out;
    }
    const int R = (n == 1 && total >= 16 * (int64_t)ctx->n_sm) ? 2 : 1;
    MvJobs jobs;
    const int64_t rows = mv_jobs(outs, nouts, R, &jobs);
    if (jobs.n == 0) return 1;
    const int64_t row_bytes = mm_row_bytes<D>(n_in);
    const int wpb = MV_THREADS / ctx->warp_size;
    const int64_t blocks = (rows / R + wpb - 1) / wpb;
    const size_t smem = (size_t)n * (size_t)n_in * 4;
    const int pf = rows * row_bytes <= ((int64_t)16 << 20);
    const dim3 grid((unsigned)blocks), block(MV_THREADS);
    if (n == 2)
        k_mv<D, 2, 1><<<grid, block, smem, ctx->stream>>>(jobs, row_bytes, n_in, x, n, norm_w, eps, accum, pf);
    else if (R == 2)
        k_mv<D, 1, 2><<<grid, block, smem, ctx->stream>>>(jobs, row_bytes, n_in, x, n, norm_w, eps, accum, pf);
    else
        k_mv<D, 1, 1><<<grid, block, smem, ctx->stream>>>(jobs, row_bytes, n_in, x, n, norm_w, eps, accum, pf);
    return mm_check(gpuGetLastError(), "matvec launch") ? -1 : 1;
}

/* mv_try for a group of outputs of one type: picks the decoder as run_plain does. */
template <class DV, class D1>
static int mv_try_plain(rf_gpu_matmul_ctx *ctx, const rf_gpu_mm_out *outs, int nouts, int64_t n_in, const float *x,
                        int n, const float *norm_w, float eps, int accum) {
    int vec = n_in % DV::QK == 0;
    for (int i = 0; i < nouts; i++)
        if ((uintptr_t)outs[i].w % DV::A) vec = 0;
    return vec ? mv_try<DV>(ctx, outs, nouts, n_in, x, n, norm_w, eps, accum)
               : mv_try<D1>(ctx, outs, nouts, n_in, x, n, norm_w, eps, accum);
}

static int mv_try_type(rf_gpu_matmul_ctx *ctx, uint32_t type, const rf_gpu_mm_out *outs, int nouts, int64_t n_in,
                       const float *x, int n, const float *norm_w, float eps, int accum) {
#define MVT(D) mv_try<D>(ctx, outs, nouts, n_in, x, n, norm_w, eps, accum)
    switch (type) {
    case RF_TYPE_F32: return mv_try_plain<DecF32x4, DecF32x1>(ctx, outs, nouts, n_in, x, n, norm_w, eps, accum);
    case RF_TYPE_F16: {
        const int rp = mvp_few_rows<MvpF16, 4>(ctx, outs, nouts, n_in)
                           ? mvp_try<MvpF16, 8>(ctx, outs, nouts, n_in, x, n, norm_w, eps, accum)
                           : mvp_try<MvpF16, 4>(ctx, outs, nouts, n_in, x, n, norm_w, eps, accum);
        return rp ? rp : mv_try_plain<DecF16x8, DecF16x1>(ctx, outs, nouts, n_in, x, n, norm_w, eps, accum);
    }
    case RF_TYPE_BF16: {
        const int rp = mvp_few_rows<MvpBF16, 4>(ctx, outs, nouts, n_in)
                           ? mvp_try<MvpBF16, 8>(ctx, outs, nouts, n_in, x, n, norm_w, eps, accum)
                           : mvp_try<MvpBF16, 4>(ctx, outs, nouts, n_in, x, n, norm_w, eps, accum);
        return rp ? rp : mv_try_plain<DecBF16x8, DecBF16x1>(ctx, outs, nouts, n_in, x, n, norm_w, eps, accum);
    }
    case RF_TYPE_Q4_0: return MVT(DecQ4_0);
    case RF_TYPE_Q4_1: return MVT(DecQ4_1);
    case RF_TYPE_Q5_0: return MVT(DecQ5_0);
    case RF_TYPE_Q5_1: return MVT(DecQ5_1);
    case RF_TYPE_Q8_0: return MVT(DecQ8_0);
    case RF_TYPE_Q4_0 | RF_GPU_MM_LAYOUT: return MVT(DecQ4_0X8);
    case RF_TYPE_Q8_0 | RF_GPU_MM_LAYOUT: return MVT(DecQ8_0X8);
    case RF_TYPE_Q6_K | RF_GPU_MM_LAYOUT: return MVT(DecQ6_KX8);
    case RF_TYPE_IQ4_NL | RF_GPU_MM_LAYOUT: return MVT(DecIQ4_NLX8);
    case RF_TYPE_IQ4_XS | RF_GPU_MM_LAYOUT: return MVT(DecIQ4_XSS);
    case RF_TYPE_Q5_K | RF_GPU_MM_LAYOUT: return MVT(DecQ5_KH);
    case RF_TYPE_Q2_K: return MVT(DecQ2_K);
    case RF_TYPE_Q3_K: return MVT(DecQ3_K);
    case RF_TYPE_Q4_K: return MVT(DecQ4_K);
    case RF_TYPE_Q5_K: return MVT(DecQ5_K);
    case RF_TYPE_Q6_K: return MVT(DecQ6_K);
    case RF_TYPE_IQ4_NL: return MVT(DecIQ4_NL);
    case RF_TYPE_IQ4_XS: return MVT(DecIQ4_XS);
    default: return 0;
    }
#undef MVT
}

/* ---- int8-activation matvec dispatch --------------------------------------------------------- */

/* Whether the int8 path can serve a call (n, n_in, x, norm_w); the per-type part is mvq_type. */
static int mvq_ok(rf_gpu_matmul_ctx *ctx, int64_t n_in, const float *x, int n, const float *norm_w) {
    return ctx->qbuf && !ctx->f32_mv && !ctx->legacy_mv && n >= 1 && n <= ctx->q_max_n && n <= QX_MAX_N && n_in > 0 && n_in <= QX_MAX_IN &&
           n_in % 32 == 0 && (uintptr_t)x % 16 == 0 && (!norm_w || (uintptr_t)norm_w % 16 == 0);
}

/* Enqueues k_qx (x -> int8 scratch). */
static int mvq_quantize(rf_gpu_matmul_ctx *ctx, int64_t n_in, const float *x, int n, const float *norm_w, float eps) {
    int8_t *xq = (int8_t *)ctx->qbuf;
    float2 *xd = (float2 *)((uint8_t *)ctx->qbuf + QX_XD_OFF);
    float2 *ri = (float2 *)((uint8_t *)ctx->qbuf + QX_RI_OFF);
    k_qx<<<dim3((unsigned)n), dim3(QX_THREADS), 0, ctx->stream>>>(x, n_in, norm_w, eps, xq, xd, ri);
    return mm_check(gpuGetLastError(), "x quantize launch");
}

template <class V, int NC, int UN>
static int mvq_launch(rf_gpu_matmul_ctx *ctx, const MvJobs &jobs, int64_t rows, int64_t row_bytes, int64_t n_in,
                      const float *x, int n, const float *norm_w, int accum) {
    const int8_t *xq = (const int8_t *)ctx->qbuf;
    const float2 *xd = (const float2 *)((const uint8_t *)ctx->qbuf + QX_XD_OFF);
    const float2 *ri = (const float2 *)((const uint8_t *)ctx->qbuf + QX_RI_OFF);
    const int wpb = MV_THREADS / ctx->warp_size;
    const dim3 grid((unsigned)((rows + wpb - 1) / wpb)), block(MV_THREADS);
#ifndef RF_GPU_HIP
    if (mm_pdl_now(ctx, 0)) {
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute at;
        mm_pdl_config(ctx, grid, block, 0, &cfg, &at);
        if (cudaLaunchKernelEx(&cfg, k_mvq<V, NC, UN>, jobs, row_bytes, n_in, xq, xd, ri, x, norm_w, n, accum) ==
            cudaSuccess)
            return 0;
        (void)gpuGetLastError();
        ctx->pdl = 0; /* not supported here: plain launches from now on */
    }
#endif
    (void)gpuGetLastError();
    k_mvq<V, NC, UN><<<grid, block, 0, ctx->stream>>>(jobs, row_bytes, n_in, xq, xd, ri, x, norm_w, n, accum);
    return mm_check(gpuGetLastError(), "int8 matvec launch");
}

/* The unit k_mvp runs for a k_mvq unit format V: V itself, or a variant that loads less per lane
 * (k_mvq keeps V, whose lanes do not hold whole superblocks between them). */
template <class V> struct MvpUnitOf {
    typedef V T;
};
template <> struct MvpUnitOf<VQ4_K> {
    typedef VQ4_KS T;
};
/* Int8-activation matvec for outputs of one unit format V; *quantized tracks whether x is
 * already in the scratch for this call. Returns 1 done, 0 ineligible, -1 error. */
template <class V>
static int mvq_try(rf_gpu_matmul_ctx *ctx, const rf_gpu_mm_out *outs, int nouts, int64_t n_in, const float *x, int n,
                   const float *norm_w, float eps, int accum, int *quantized) {
    if (n == 1) {
        const int rp = mvp_try<MvpI8<typename MvpUnitOf<V>::T>, MvpUn<V>::UN>(ctx, outs, nouts, n_in, x, n, norm_w,
                                                                             eps, accum);
        if (rp) return rp;
    }
    if (!mvq_ok(ctx, n_in, x, n, norm_w) || nouts < 1 || nouts > MV_MAX_OUTS || n_in % mm_row_step<V>()) return 0;
    for (int i = 0; i < nouts; i++)
        if ((uintptr_t)outs[i].w % V::A) return 0;
    MvJobs jobs;
    const int64_t rows = mv_jobs(outs, nouts, 1, &jobs);
    if (jobs.n == 0) return 1;
    if (!*quantized) {
        if (mvq_quantize(ctx, n_in, x, n, norm_w, eps)) return -1;
        *quantized = 1;
    }
    const int64_t row_bytes = mm_row_bytes<V>(n_in);
    /* units in flight: 4 (2 per column for two columns), halved for units of more than 64 raw bytes */
    enum { U1 = sizeof(typename V::Raw) <= 64 ? 4 : 2 };
    const int rc = n == 2 ? mvq_launch<V, 2, U1 / 2>(ctx, jobs, rows, row_bytes, n_in, x, n, norm_w, accum)
                          : mvq_launch<V, 1, U1>(ctx, jobs, rows, row_bytes, n_in, x, n, norm_w, accum);
    return rc ? -1 : 1;
}

static int mvq_try_type(rf_gpu_matmul_ctx *ctx, uint32_t type, const rf_gpu_mm_out *outs, int nouts, int64_t n_in,
                        const float *x, int n, const float *norm_w, float eps, int accum, int *quantized) {
#define MVQ(V) mvq_try<V>(ctx, outs, nouts, n_in, x, n, norm_w, eps, accum, quantized)
    switch (type) {
    case RF_TYPE_Q4_0: return MVQ(VQ4_0);
    case RF_TYPE_Q4_1: return MVQ(VQ4_1);
    case RF_TYPE_Q5_0: return MVQ(VQ5_0);
    case RF_TYPE_Q5_1: return MVQ(VQ5_1);
    case RF_TYPE_Q8_0: return MVQ(VQ8_0);
    case RF_TYPE_Q4_0 | RF_GPU_MM_LAYOUT: return MVQ(VQ4_0X8);
    case RF_TYPE_Q8_0 | RF_GPU_MM_LAYOUT: return MVQ(VQ8_0X8);
    case RF_TYPE_Q6_K | RF_GPU_MM_LAYOUT: return MVQ(VQ6_KX8);
    case RF_TYPE_IQ4_NL | RF_GPU_MM_LAYOUT: return MVQ(VIQ4_NLX8);
    case RF_TYPE_IQ4_XS | RF_GPU_MM_LAYOUT: return MVQ(VIQ4_XSS);
    case RF_TYPE_Q5_K | RF_GPU_MM_LAYOUT: return MVQ(VQ5_KH);
    case RF_TYPE_Q4_K: return MVQ(VQ4_K);
    case RF_TYPE_Q5_K: return MVQ(VQ5_K);
    case RF_TYPE_Q6_K: return MVQ(VQ6_K);
    case RF_TYPE_Q2_K: return MVQ(VQ2_K);
    case RF_TYPE_Q3_K: return MVQ(VQ3_K);
    case RF_TYPE_IQ4_NL: return MVQ(VIQ4_NL);
    case RF_TYPE_IQ4_XS: return MVQ(VIQ4_XS);
    default: return 0;
    }
#undef MVQ
}

/* k_mvp2<FA, UA, FB, UB> over outputs a (format FA) and b (FB), n = 1. Returns 1 done, 0 ineligible
 * (the caller then launches per format), -1 error. Eligible where k_mvp would take each group
 * (mvp_group_ok). The grid is one resident wave; its blocks are split between the two
 * groups so that the larger of the two bytes per warp (rows per warp x row bytes) is smallest
 * (weighing the Q6_K X8 bytes 1.25 or 1.5 times cost 7B Q4_K_M 0.6%, H200, docs/PERF.md). */
template <class FA, int UA, class FB, int UB>
static int mvp2_try(rf_gpu_matmul_ctx *ctx, const rf_gpu_mm_out *a, int na, const rf_gpu_mm_out *b, int nb,
                    int64_t n_in, const float *x, const float *norm_w, float eps, int accum) {
    const size_t smem = mvp_smem_bytes(0, n_in, MVP_THREADS);
    if (!mvp_group_ok<FA>(ctx, a, na, n_in, x, norm_w, MVP_THREADS) ||
        !mvp_group_ok<FB>(ctx, b, nb, n_in, x, norm_w, MVP_THREADS))
        return 0;
    MvJobs ja, jb;
    const int64_t rows_a = mv_jobs(a, na, 1, &ja), rows_b = mv_jobs(b, nb, 1, &jb);
    if (rows_a <= 0 || rows_b <= 0) return 0;
    const auto fn = k_mvp2<FA, UA, FB, UB>;
    const int per_sm = mvp_occupancy(ctx, (const void *)fn, MVP_THREADS, smem);
    const int wpb = MVP_THREADS / ctx->warp_size;
    const int64_t nbl = (int64_t)ctx->n_sm * per_sm, rb_a = mm_row_bytes<FA>(n_in), rb_b = mm_row_bytes<FB>(n_in);
    if (per_sm <= 0 || nbl < 2) return 0;
    int64_t best = -1, rpw_a = 0, rpw_b = 0;
    for (int64_t ka = 1; ka < nbl; ka++) {
        const int64_t pa = (rows_a + ka * wpb - 1) / (ka * wpb), pb = (rows_b + (nbl - ka) * wpb - 1) / ((nbl - ka) * wpb);
        const int64_t cost = pa * rb_a > pb * rb_b ? pa * rb_a : pb * rb_b;
        if (best < 0 || cost < best) best = cost, rpw_a = pa, rpw_b = pb;
    }
    const int64_t blocks_a = ((rows_a + rpw_a - 1) / rpw_a + wpb - 1) / wpb;
    const int64_t blocks_b = ((rows_b + rpw_b - 1) / rpw_b + wpb - 1) / wpb;
    const int8_t *xq = ctx->xq_use ? (const int8_t *)ctx->qbuf : NULL;
    const float2 *xd = xq ? (const float2 *)((const uint8_t *)ctx->qbuf + QX_XD_OFF) : NULL;
    const dim3 grid((unsigned)(blocks_a + blocks_b)), block(MVP_THREADS);
    const unsigned nb_a = (unsigned)blocks_a;
    ctx->n_mix++;
#ifndef RF_GPU_HIP
    if (mm_pdl_now(ctx, ctx->pdl_graph)) {
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute at;
        mm_pdl_config(ctx, grid, block, smem, &cfg, &at);
        return mm_check(cudaLaunchKernelEx(&cfg, fn, ja, rows_a, rpw_a, rb_a, nb_a, jb, rows_b, rpw_b, rb_b, n_in, x,
                                           norm_w, eps, accum, xq, xd),
                        "two-format matvec launch (programmatic)")
                   ? -1
                   : 1;
    }
#endif
    (void)gpuGetLastError();
    fn<<<grid, block, smem, ctx->stream>>>(ja, rows_a, rpw_a, rb_a, nb_a, jb, rows_b, rpw_b, rb_b, n_in, x, norm_w, eps,
                                           accum, xq, xd);
    return mm_check(gpuGetLastError(), "two-format matvec launch") ? -1 : 1;
}

/* One launch for a decode call whose outputs are of exactly two formats that k_mvp2 pairs: Q6_K
 * X8 with Q4_K (GGUF layout) or Q5_K H: the q / k / v projections of the Q4_K_M and Q5_K_M layers
 * whose v is Q6_K (half of them), which then pay one kernel boundary fewer. H200 tg128 against the per-format launches
 * (RF_MM_MIX=0), 2026-11-28: 7B Q4_K_M +0.8%, Q5_K_M +2.7%, 1B Q4_K_M +3.3%, Q5_K_M +4.0%.
 * Returns as mvp2_try; 0 for every other mix. */
static int mvp2_try_mix(rf_gpu_matmul_ctx *ctx, int n_outs, const rf_gpu_mm_out *outs, int64_t n_in, const float *x,
                        const float *norm_w, float eps, int accum) {
    const uint32_t tb = RF_TYPE_Q6_K | RF_GPU_MM_LAYOUT;
    rf_gpu_mm_out a[MV_MAX_OUTS], b[MV_MAX_OUTS];
    uint32_t ta = 0;
    int na = 0, nb = 0;
    if (!ctx->mix_on || n_outs < 2 || n_outs > MV_MAX_OUTS) return 0;
    for (int i = 0; i < n_outs; i++) {
        if (outs[i].type == tb) {
            b[nb++] = outs[i];
        } else if (!ta || outs[i].type == ta) {
            ta = outs[i].type;
            a[na++] = outs[i];
        } else {
            return 0;
        }
    }
    if (!na || !nb) return 0;
    switch (ta) {
    case RF_TYPE_Q4_K: /* Q4_K_M */
        return mvp2_try<MvpI8<MvpUnitOf<VQ4_K>::T>, MvpUn<VQ4_K>::UN, MvpI8<VQ6_KX8>, MvpUn<VQ6_KX8>::UN>(
            ctx, a, na, b, nb, n_in, x, norm_w, eps, accum);
    case RF_TYPE_Q5_K | RF_GPU_MM_LAYOUT: /* Q5_K_M */
        return mvp2_try<MvpI8<VQ5_KH>, MvpUn<VQ5_KH>::UN, MvpI8<VQ6_KX8>, MvpUn<VQ6_KX8>::UN>(
            ctx, a, na, b, nb, n_in, x, norm_w, eps, accum);
    default: return 0;
    }
}

template <class D>
static int run_typed(rf_gpu_matmul_ctx *ctx, uint32_t type, const void *wv, int64_t n_out, int64_t n_in,
                     const float *x, int n, const float *bias, float *y, int accum) {
    const uint8_t *w = (const uint8_t *)wv;
    if (n_in % mm_row_step<D>()) {
        rf_set_error("gpu matmul: n_in %lld is not a multiple of %s's block (%d)", (long long)n_in, mm_type_name(type),
                     (int)mm_row_step<D>());
        return -1;
    }
    if ((uintptr_t)w % D::A) {
        rf_set_error("gpu matmul: %s weight pointer not aligned to %d bytes", mm_type_name(type), (int)D::A);
        return -1;
    }
    const int64_t nchunks64 = n_in / D::E;
    if (nchunks64 > INT32_MAX) {
        rf_set_error("gpu matmul: row too long");
        return -1;
    }
    const int nchunks = (int)nchunks64;
    const int64_t row_bytes = mm_row_bytes<D>(n_in);
    if (n <= 2) {
        const rf_gpu_mm_out one = {type, w, n_out, bias, y};
        int quantized = 0;
        const int rq = mvq_try_type(ctx, type, &one, 1, n_in, x, n, NULL, 0.0f, accum, &quantized);
        if (rq) return rq < 0 ? -1 : 0;
        const int rc = mv_try_type(ctx, type, &one, 1, n_in, x, n, NULL, 0.0f, accum);
        if (rc) return rc < 0 ? -1 : 0;
    }
    if (n <= RF_GPU_MATVEC_MAX_N) {
        const int xv = ((uintptr_t)x % 16 == 0) && (n_in % 4 == 0);
        for (int c0 = 0; c0 < n; c0 += MV_MAX_COLS) {
            const int nc = n - c0 < MV_MAX_COLS ? n - c0 : MV_MAX_COLS;
            const float *xc = x + (int64_t)c0 * n_in;
            float *yc = y + (int64_t)c0 * n_out;
            if (nc == 1)
                launch_matvec<D, 1>(ctx, w, row_bytes, n_out, nchunks, n_in, xc, nc, xv, bias, yc, accum);
            else if (nc == 2)
                launch_matvec<D, 2>(ctx, w, row_bytes, n_out, nchunks, n_in, xc, nc, xv, bias, yc, accum);
            else if (nc <= 4)
                launch_matvec<D, 4>(ctx, w, row_bytes, n_out, nchunks, n_in, xc, nc, xv, bias, yc, accum);
            else
                launch_matvec<D, 8>(ctx, w, row_bytes, n_out, nchunks, n_in, xc, nc, xv, bias, yc, accum);
        }
    } else {
#ifndef RF_GPU_HIP
        if (ctx->handle && !ctx->force_tiled) {
            if (gemm_cublas<D>(ctx, type, w, row_bytes, n_out, nchunks, n_in, x, n, bias, y, accum)) return -1;
            return mm_check(gpuGetLastError(), "kernel launch");
        }
#endif
        const dim3 grid((unsigned)((n_out + GT_BN - 1) / GT_BN), (unsigned)((n + GT_BM - 1) / GT_BM));
        k_gemm_tiled<D><<<grid, dim3(GT_THREADS), 0, ctx->stream>>>(w, row_bytes, n_out, nchunks, n_in, x, n, bias, y, accum);
    }
    return mm_check(gpuGetLastError(), "kernel launch");
}

/* Plain types use a 16-byte vector decoder when the row length and the pointer allow it. */
template <class DV, class D1>
static int run_plain(rf_gpu_matmul_ctx *ctx, uint32_t type, const void *w, int64_t n_out, int64_t n_in,
                     const float *x, int n, const float *bias, float *y, int accum) {
    if (n_in % DV::QK == 0 && (uintptr_t)w % DV::A == 0)
        return run_typed<DV>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    return run_typed<D1>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
}

extern "C" int rf_gpu_matmul_supports(uint32_t type) {
    switch (type) {
    case RF_TYPE_F32: case RF_TYPE_F16: case RF_TYPE_BF16: case RF_TYPE_Q4_0: case RF_TYPE_Q4_1:
    case RF_TYPE_Q5_0: case RF_TYPE_Q5_1: case RF_TYPE_Q8_0: case RF_TYPE_Q2_K: case RF_TYPE_Q3_K:
    case RF_TYPE_Q4_K: case RF_TYPE_Q5_K: case RF_TYPE_Q6_K: case RF_TYPE_IQ4_NL: case RF_TYPE_IQ4_XS:
    case RF_TYPE_Q4_0 | RF_GPU_MM_LAYOUT: case RF_TYPE_Q8_0 | RF_GPU_MM_LAYOUT: case RF_TYPE_Q6_K | RF_GPU_MM_LAYOUT:
    case RF_TYPE_IQ4_NL | RF_GPU_MM_LAYOUT: case RF_TYPE_IQ4_XS | RF_GPU_MM_LAYOUT: case RF_TYPE_Q5_K | RF_GPU_MM_LAYOUT:
        return 1;
    default: return 0;
    }
}

static int mm_one(rf_gpu_matmul_ctx *ctx, uint32_t type, const void *w, int64_t n_out, int64_t n_in, const float *x,
                  int n, const float *bias, float *y, int accum) {
    if (!ctx || n < 0 || n_out < 0 || n_in < 0) {
        rf_set_error("gpu matmul: bad arguments");
        return -1;
    }
    if (!rf_gpu_matmul_supports(type)) {
        rf_set_error("gpu matmul: weight type %s is not supported", mm_type_name(type));
        return -1;
    }
    if (n == 0 || n_out == 0) return 0;
    switch (type) {
    case RF_TYPE_F32: return run_plain<DecF32x4, DecF32x1>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_F16: return run_plain<DecF16x8, DecF16x1>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_BF16: return run_plain<DecBF16x8, DecBF16x1>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q4_0: return run_typed<DecQ4_0>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q4_1: return run_typed<DecQ4_1>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q5_0: return run_typed<DecQ5_0>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q5_1: return run_typed<DecQ5_1>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q8_0: return run_typed<DecQ8_0>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q4_0 | RF_GPU_MM_LAYOUT: return run_typed<DecQ4_0X8>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q8_0 | RF_GPU_MM_LAYOUT: return run_typed<DecQ8_0X8>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q6_K | RF_GPU_MM_LAYOUT: return run_typed<DecQ6_KX8>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_IQ4_NL | RF_GPU_MM_LAYOUT: return run_typed<DecIQ4_NLX8>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_IQ4_XS | RF_GPU_MM_LAYOUT: return run_typed<DecIQ4_XSS>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q5_K | RF_GPU_MM_LAYOUT: return run_typed<DecQ5_KH>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q2_K: return run_typed<DecQ2_K>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q3_K: return run_typed<DecQ3_K>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q4_K: return run_typed<DecQ4_K>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q5_K: return run_typed<DecQ5_K>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_Q6_K: return run_typed<DecQ6_K>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_IQ4_NL: return run_typed<DecIQ4_NL>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    case RF_TYPE_IQ4_XS: return run_typed<DecIQ4_XS>(ctx, type, w, n_out, n_in, x, n, bias, y, accum);
    default: return -1;
    }
}

extern "C" int rf_gpu_matmul(rf_gpu_matmul_ctx *ctx, uint32_t type, const void *w, int64_t n_out, int64_t n_in,
                             const float *x, int n, const float *bias, float *y) {
    if (ctx) ctx->xq_x = NULL;
    return mm_one(ctx, type, w, n_out, n_in, x, n, bias, y, 0);
}

extern "C" int rf_gpu_mm_swiglu(rf_gpu_matmul_ctx *ctx, const float *gate, const float *up, int64_t n_in,
                                float *out) {
    if (!ctx) return 0;
    ctx->xq_x = NULL;
    if (!ctx->xq_on || !ctx->qbuf || n_in <= 0 || n_in % 32 || n_in > QX_MAX_IN || (uintptr_t)gate % 16 ||
        (uintptr_t)up % 16 || (uintptr_t)out % 16)
        return 0;
    const unsigned grid = (unsigned)((n_in + SWQ_THREADS - 1) / SWQ_THREADS);
    int8_t *xq = (int8_t *)ctx->qbuf;
    float2 *xd = (float2 *)((uint8_t *)ctx->qbuf + QX_XD_OFF);
#ifndef RF_GPU_HIP
    if (mm_pdl_now(ctx, ctx->pdl_graph)) {
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute at;
        mm_pdl_config(ctx, dim3(grid), dim3(SWQ_THREADS), 0, &cfg, &at);
        if (mm_check(cudaLaunchKernelEx(&cfg, k_swiglu_q, gate, up, n_in, out, xq, xd), "swiglu launch (programmatic)"))
            return -1;
    } else
#endif
    {
        (void)gpuGetLastError();
        k_swiglu_q<<<grid, SWQ_THREADS, 0, ctx->stream>>>(gate, up, n_in, out, xq, xd);
        if (mm_check(gpuGetLastError(), "swiglu launch")) return -1;
    }
    ctx->xq_x = out;
    ctx->xq_n = n_in;
    return 1;
}

extern "C" int rf_gpu_mm_gate_up_swiglu(rf_gpu_matmul_ctx *ctx, const rf_gpu_mm_out gate_up[2], int64_t n_in,
                                        const float *x, const float *norm_w, float eps) {
    if (!ctx) return 0;
    ctx->xq_x = NULL;
    const rf_gpu_mm_out *g = &gate_up[0], *u = &gate_up[1];
    if (!ctx->pair_on || (g->type != RF_TYPE_F16 && g->type != RF_TYPE_BF16) || u->type != g->type ||
        u->n_out != g->n_out || g->n_out <= 0 || !g->y)
        return 0;
    ctx->pair = 1;
    const int rc = mv_try_type(ctx, g->type, gate_up, 2, n_in, x, 1, norm_w, eps, 0);
    ctx->pair = 0;
    return rc;
}

extern "C" int rf_gpu_mm_xq_buffers(rf_gpu_matmul_ctx *ctx, int64_t n_in, void **q, void **d) {
    if (!ctx || !ctx->xq_on || !ctx->qbuf || n_in <= 0 || n_in % 32 || n_in > QX_MAX_IN) return 0;
    *q = ctx->qbuf;
    *d = (uint8_t *)ctx->qbuf + QX_XD_OFF;
    return 1;
}

extern "C" void rf_gpu_mm_xq_mark(rf_gpu_matmul_ctx *ctx, const float *x, int64_t n_in) {
    if (!ctx) return;
    ctx->xq_x = x;
    ctx->xq_n = n_in;
}

static int mm_ex(rf_gpu_matmul_ctx *ctx, int n_outs, const rf_gpu_mm_out *outs, int64_t n_in, const float *x, int n,
                 const float *norm_w, float eps, int accumulate, float *scratch);

extern "C" int rf_gpu_matmul_ex(rf_gpu_matmul_ctx *ctx, int n_outs, const rf_gpu_mm_out *outs, int64_t n_in,
                                const float *x, int n, const float *norm_w, float eps, int accumulate, float *scratch) {
    /* x quantized by its producer for exactly this call (the copy is good for one call) */
    const int xq_use = ctx && ctx->xq_x == x && ctx->xq_n == n_in && n == 1 && !norm_w;
    if (ctx) ctx->xq_x = NULL;
    if (!ctx || n_outs < 0 || (n_outs > 0 && !outs) || n < 0 || n_in < 0 || (norm_w && n > 0 && !scratch)) {
        rf_set_error("gpu matmul: bad arguments");
        return -1;
    }
    for (int i = 0; i < n_outs; i++) {
        if (!rf_gpu_matmul_supports(outs[i].type)) {
            rf_set_error("gpu matmul: weight type %s is not supported", mm_type_name(outs[i].type));
            return -1;
        }
        if (outs[i].n_out < 0) {
            rf_set_error("gpu matmul: bad arguments");
            return -1;
        }
    }
    ctx->xq_use = xq_use;
    const int rc = mm_ex(ctx, n_outs, outs, n_in, x, n, norm_w, eps, accumulate, scratch);
    ctx->xq_use = 0;
    return rc;
}

/* rf_gpu_matmul_ex after its argument checks. */
static int mm_ex(rf_gpu_matmul_ctx *ctx, int n_outs, const rf_gpu_mm_out *outs, int64_t n_in, const float *x, int n,
                 const float *norm_w, float eps, int accumulate, float *scratch) {
    if (n == 0 || n_outs == 0) return 0;
    if (n == 1) { /* two formats in one launch where k_mvp2 pairs them */
        const int rc = mvp2_try_mix(ctx, n_outs, outs, n_in, x, norm_w, eps, accumulate != 0);
        if (rc) return rc < 0 ? -1 : 0;
    }
    /* matvec: one fused launch per group of same-type outputs (norm and accumulate folded in) */
    unsigned char done[64] = {0};
    int all_done = n <= 2 && n_outs <= 64, quantized = 0;
    for (int i = 0; i < n_outs && all_done; i++) {
        if (done[i]) continue;
        rf_gpu_mm_out grp[MV_MAX_OUTS];
        int idx[MV_MAX_OUTS], ng = 0;
        for (int j = i; j < n_outs && ng < MV_MAX_OUTS; j++)
            if (!done[j] && outs[j].type == outs[i].type) {
                idx[ng] = j;
                grp[ng++] = outs[j];
            }
        int rc = mvq_try_type(ctx, outs[i].type, grp, ng, n_in, x, n, norm_w, eps, accumulate != 0, &quantized);
        if (rc == 0) rc = mv_try_type(ctx, outs[i].type, grp, ng, n_in, x, n, norm_w, eps, accumulate != 0);
        if (rc < 0) return -1;
        if (rc == 0) all_done = 0;
        else
            for (int g = 0; g < ng; g++) done[idx[g]] = 1;
    }
    if (all_done) return 0;
    const float *xin = x;
    if (norm_w) {
        const int threads = 256;
        k_rmsnorm<<<dim3((unsigned)n), dim3(threads), 0, ctx->stream>>>(x, norm_w, eps, n_in, scratch);
        if (mm_check(gpuGetLastError(), "rmsnorm launch")) return -1;
        xin = scratch;
    }
    for (int i = 0; i < n_outs; i++) {
        if (n_outs <= 64 && done[i]) continue;
        if (mm_one(ctx, outs[i].type, outs[i].w, outs[i].n_out, n_in, xin, n, outs[i].bias, outs[i].y, accumulate != 0))
            return -1;
    }
    return 0;
}

/* ---- Test / benchmark support ------------------------------------------------------------- */

extern "C" int rf_gpu_mm_device_count(void) {
    int n = 0;
    if (gpuGetDeviceCount(&n) != gpuSuccess) {
        (void)gpuGetLastError();
        return 0;
    }
    return n;
}

extern "C" void *rf_gpu_mm_alloc(size_t bytes) {
    void *p = NULL;
    if (mm_check(gpuMalloc(&p, bytes ? bytes : 1), "malloc")) return NULL;
    return p;
}

extern "C" void rf_gpu_mm_dfree(void *p) {
    if (p) (void)gpuFree(p);
}

extern "C" int rf_gpu_mm_upload(void *dst, const void *src, size_t bytes) {
    return mm_check(gpuMemcpy(dst, src, bytes, gpuMemcpyHostToDevice), "upload");
}

extern "C" int rf_gpu_mm_download(void *dst, const void *src, size_t bytes) {
    return mm_check(gpuMemcpy(dst, src, bytes, gpuMemcpyDeviceToHost), "download");
}

extern "C" int rf_gpu_mm_fill(void *dst, int byte, size_t bytes) { return mm_check(gpuMemset(dst, byte, bytes), "memset"); }

extern "C" int rf_gpu_mm_sync(rf_gpu_matmul_ctx *ctx) {
    if (mm_check(gpuStreamSynchronize(ctx ? ctx->stream : (gpuStream_t)0), "sync")) return -1;
    return mm_check(gpuGetLastError(), "async error");
}

extern "C" void rf_gpu_mm_force_tiled(rf_gpu_matmul_ctx *ctx, int on) { ctx->force_tiled = on; }

extern "C" long rf_gpu_mm_mixed_launches(rf_gpu_matmul_ctx *ctx) { return ctx ? ctx->n_mix : 0; }

extern "C" int64_t rf_gpu_mm_last_decode(rf_gpu_matmul_ctx *ctx, int64_t *rpw, int *mvt) {
    if (rpw) *rpw = ctx ? ctx->last_rpw : 0;
    if (mvt) *mvt = ctx ? ctx->last_mvt : 0;
    return ctx ? ctx->last_wave : 0;
}

extern "C" const char *rf_gpu_mm_gemm_path(rf_gpu_matmul_ctx *ctx) {
#ifndef RF_GPU_HIP
    if (ctx->handle && !ctx->force_tiled) return "cublas";
#else
    (void)ctx;
#endif
    return "tiled";
}

static int cmp_float(const void *a, const void *b) {
    const float fa = *(const float *)a, fb = *(const float *)b;
    return fa < fb ? -1 : fa > fb;
}

extern "C" double rf_gpu_mm_time(rf_gpu_matmul_ctx *ctx, uint32_t type, const void *const *ws, int n_w,
                                 int64_t n_out, int64_t n_in, const float *x, int n, float *y, int iters) {
    if (iters < 1) iters = 1;
    if (n_w < 1) return -1;
    for (int i = 0; i < n_w; i++)
        if (rf_gpu_matmul(ctx, type, ws[i], n_out, n_in, x, n, NULL, y)) return -1;
    if (rf_gpu_mm_sync(ctx)) return -1;
    gpuEvent_t e0, e1;
    if (mm_check(gpuEventCreate(&e0), "event") || mm_check(gpuEventCreate(&e1), "event")) return -1;
    float *ts = (float *)malloc(sizeof(float) * (size_t)iters);
    double med = -1;
    for (int it = 0; it < iters; it++) {
        (void)gpuEventRecord(e0, ctx->stream);
        for (int i = 0; i < n_w; i++)
            if (rf_gpu_matmul(ctx, type, ws[i], n_out, n_in, x, n, NULL, y)) goto out;
        (void)gpuEventRecord(e1, ctx->stream);
        if (mm_check(gpuEventSynchronize(e1), "event sync")) goto out;
        (void)gpuEventElapsedTime(&ts[it], e0, e1);
        ts[it] /= (float)n_w;
    }
    qsort(ts, (size_t)iters, sizeof(float), cmp_float);
    med = ts[iters / 2];
out:
    free(ts);
    (void)gpuEventDestroy(e0);
    (void)gpuEventDestroy(e1);
    return med;
}

extern "C" void rf_gpu_mm_device_name(char *buf, size_t len) {
    int dev = 0;
    snprintf(buf, len, "unknown");
    if (gpuGetDevice(&dev) != gpuSuccess) return;
#ifdef RF_GPU_HIP
    hipDeviceProp_t p;
    if (hipGetDeviceProperties(&p, dev) == hipSuccess) snprintf(buf, len, "%s (%s)", p.name, p.gcnArchName);
#else
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) == cudaSuccess) snprintf(buf, len, "%s (sm_%d%d)", p.name, p.major, p.minor);
#endif
}

#ifdef RF_PHASE_STAMPS
extern "C" void rf_phase_stamps_dump_matmul(void) { rf_phase_stamps_write("matmul"); }
#endif
