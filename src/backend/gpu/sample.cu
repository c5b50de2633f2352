/* sample.cu: token sampling on the device (twin of rf_sample_host, runtime/sampler.c).
 * Only the chosen id (and its log-probability) is written, to device memory. */
#include <limits.h>

#include "gpu_port.h"
#include "kernels.h"

#define SAMPLE_THREADS 1024

static __host__ __device__ int sample_npad(int n) {
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}

/* (key desc, id asc): the CPU's cand_cmp order, a total order for non-NaN keys. */
static __device__ __forceinline__ bool before(float ka, int ia, float kb, int ib) {
    return ka > kb || (ka == kb && ia < ib);
}

/* First index i in [lo, n) (contiguous chunks per thread) at which the running double sum of
 * val(i) (starting at `base` before lo) satisfies cum >= thr (ge) or cum > thr (!ge); n if none.
 * The sums are per-thread chunks combined by an exclusive scan, so the cumulative value at each
 * index equals the sequential one up to double rounding. */
static __device__ int first_crossing(const float *pr, int lo, int n, double div, double thr, bool ge, double *sh,
                                     int *best) {
    const int bs = blockDim.x, tid = threadIdx.x;
    const int cs = (n - lo + bs - 1) / bs;
    const int b = lo + tid * cs, e = min(n, b + cs);
    double loc = 0.0;
    for (int i = b; i < e; i++) loc += (double)pr[i] / div;
    sh[tid] = loc;
    if (tid == 0) *best = n;
    __syncthreads();
    if (tid == 0) {
        double run = 0.0;
        for (int i = 0; i < bs; i++) {
            const double v = sh[i];
            sh[i] = run;
            run += v;
        }
    }
    __syncthreads();
    double cum = sh[tid];
    for (int i = b; i < e; i++) {
        cum += (double)pr[i] / div;
        if (ge ? cum >= thr : cum > thr) {
            atomicMin(best, i);
            break;
        }
    }
    __syncthreads();
    const int r = *best;
    __syncthreads();
    return r;
}

/* sample_kernel: one block of SAMPLE_THREADS threads runs runtime/sampler.h's algorithm:
 *  1. penalties over history[start..n_history) (start from penalty_last_n as in the CPU code),
 *     applied once per distinct id by the thread holding its first occurrence;
 *  2. temp <= 0: argmax, lowest id on ties (a NaN at id 0 wins, as in the CPU's scan; other NaNs
 *     never win);
 *  3-6. otherwise a full bitonic sort of (logit desc, id asc) in scratch (NaN logits sort as
 *     -inf), top-k, top-p (cumulative mass in f64), min-p, temperature softmax and the pick of the
 *     first token whose cumulative probability exceeds u * total.
 * logprob_out (may be NULL) gets the chosen id's log-softmax over the raw logits (f64 sum).
 * scratch: rf_gpu_sample_scratch(n_vocab) bytes, 4-byte aligned. n_vocab >= 1. The result equals
 * the CPU's except where the two differ in the last bits of expf at an exact decision boundary. */
static __global__ void __launch_bounds__(SAMPLE_THREADS)
sample_kernel(const float *logits, int nv, rf_sample_params P, const int32_t *history, int n_history, float u,
              int32_t *token_out, float *logprob_out, float *scratch) {
    __shared__ double shd[SAMPLE_THREADS];
    __shared__ float shf[RF_MAX_WARPS];
    __shared__ double shw[RF_MAX_WARPS];
    __shared__ int sbest;
    __shared__ int sbest_v_nan;
    const int tid = threadIdx.x, bs = blockDim.x;
    const int npad = sample_npad(nv);
    float *lg = scratch;              /* [nv] penalized logits */
    float *pr = lg + nv;              /* [nv] probabilities */
    float *keys = pr + nv;            /* [npad] */
    int *ids = (int *)(keys + npad);  /* [npad] */

    for (int i = tid; i < nv; i += bs) lg[i] = logits[i];
    __syncthreads();

    const bool penalize = P.repeat_penalty != 1.0f || P.freq_penalty != 0.0f || P.presence_penalty != 0.0f;
    if (penalize && n_history > 0) {
        int start = P.penalty_last_n > 0 && n_history > P.penalty_last_n ? n_history - P.penalty_last_n : 0;
        if (P.penalty_last_n == 0) start = n_history;
        for (int i = start + tid; i < n_history; i += bs) {
            const int32_t id = history[i];
            if (id < 0 || id >= nv) continue;
            bool first = true;
            for (int j = start; j < i && first; j++) first = history[j] != id;
            if (!first) continue;
            int count = 0;
            for (int j = start; j < n_history; j++) count += history[j] == id;
            float l = lg[id];
            l = l > 0 ? l / P.repeat_penalty : l * P.repeat_penalty;
            lg[id] = l - (float)count * P.freq_penalty - P.presence_penalty;
        }
        __syncthreads();
    }

    int chosen;
    if (P.temp <= 0.0f) {
        /* each thread scans ids tid, tid+bs, ... in increasing order keeping the first maximum */
        float bv = -INFINITY;
        int bi = INT_MAX;
        for (int i = tid; i < nv; i += bs) {
            const float v = lg[i];
            if (v > bv || (v == bv && bi == INT_MAX)) {
                bv = v;
                bi = i;
            }
        }
        for (int o = warpSize / 2; o > 0; o >>= 1) {
            const float ov = RF_SHFL_XOR(bv, o);
            const int oi = RF_SHFL_XOR(bi, o);
            if (before(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (tid == 0) sbest_v_nan = lg[0] != lg[0];
        if (tid % warpSize == 0) {
            shf[tid / warpSize] = bv;
            ((int *)shw)[tid / warpSize] = bi;
        }
        __syncthreads();
        if (tid == 0) {
            float v = shf[0];
            int id = ((int *)shw)[0];
            for (int w = 1; w < bs / warpSize; w++)
                if (before(shf[w], ((int *)shw)[w], v, id)) {
                    v = shf[w];
                    id = ((int *)shw)[w];
                }
            sbest = (sbest_v_nan || id == INT_MAX) ? 0 : id;
        }
        __syncthreads();
        chosen = sbest;
    } else {
        for (int i = tid; i < npad; i += bs) {
            const float v = i < nv ? lg[i] : -INFINITY;
            keys[i] = v != v ? -INFINITY : v;
            ids[i] = i < nv ? i : INT_MAX;
        }
        __syncthreads();
        for (int k = 2; k <= npad; k <<= 1) {
            for (int j = k >> 1; j > 0; j >>= 1) {
                for (int i = tid; i < npad; i += bs) {
                    const int ixj = i ^ j;
                    if (ixj > i) {
                        const float ka = keys[i], kb = keys[ixj];
                        const int ia = ids[i], ib = ids[ixj];
                        const bool up = (i & k) == 0;
                        if (up ? before(kb, ib, ka, ia) : before(ka, ia, kb, ib)) {
                            keys[i] = kb;
                            keys[ixj] = ka;
                            ids[i] = ib;
                            ids[ixj] = ia;
                        }
                    }
                }
                __syncthreads();
            }
        }
        int n = nv;
        if (P.top_k > 0 && P.top_k < n) n = P.top_k;
        const float c0 = keys[0];
        double sum = 0.0;
        for (int i = tid; i < n; i += bs) {
            pr[i] = expf(keys[i] - c0);
            sum += pr[i];
        }
        sum = rf_block_sum_d(sum, shw);
        if (P.top_p < 1.0f) {
            const int idx = first_crossing(pr, 0, n, sum, (double)P.top_p, true, shd, &sbest);
            n = idx < n ? idx + 1 : n;
        }
        if (P.min_p > 0.0f) {
            if (tid == 0) sbest = n;
            __syncthreads();
            const float thr = P.min_p * pr[0];
            for (int i = 1 + tid; i < n; i += bs)
                if (!(pr[i] >= thr)) {
                    atomicMin(&sbest, i);
                    break;
                }
            __syncthreads();
            n = sbest;
            __syncthreads();
        }
        double total = 0.0;
        for (int i = tid; i < n; i += bs) {
            pr[i] = expf((keys[i] - c0) / P.temp);
            total += pr[i];
        }
        total = rf_block_sum_d(total, shw);
        const int idx = first_crossing(pr, 0, n, 1.0, (double)u * total, false, shd, &sbest);
        chosen = ids[idx < n ? idx : n - 1];
    }

    if (logprob_out) {
        float m = -INFINITY;
        for (int i = tid; i < nv; i += bs) m = logits[i] > m ? logits[i] : m;
        m = rf_block_max(m, shf);
        double s = 0.0;
        for (int i = tid; i < nv; i += bs) s += exp((double)logits[i] - m);
        s = rf_block_sum_d(s, shw);
        if (tid == 0) *logprob_out = (float)((double)logits[chosen] - m - log(s));
    }
    if (tid == 0) *token_out = chosen;
}

/* ---- greedy without penalties: a multi-block argmax ---------------------------------------------
 * argmax_part_kernel: grid ARGMAX_BLOCKS(nv) blocks of ARGMAX_THREADS; block b scans the ids
 * b*bs+tid, stepping by gridDim*bs, keeping the first maximum (the CPU's scan order: a later id
 * wins only with a strictly larger value; NaN never wins here), combined in (value desc, id asc)
 * order, which is the same first maximum. With `lp`, it also writes its max bm (NaN ignored) and
 * sum_i e^(x_i - bm) in f64 (0 when bm = -inf). Partials: float val, int id, double bm, double sum.
 * argmax_final_kernel: one block; merges the partials in the same orders, applies the CPU's rules
 * (a NaN at id 0 wins; all-NaN gives 0) and writes the token and, with logprob_out,
 * x_chosen - M - log(S) (NaN when every logit is -inf, as in the single-block path). */
#define ARGMAX_THREADS 256
#define ARGMAX_MAX_BLOCKS 128
static int argmax_blocks(int nv) {
    int b = (nv + ARGMAX_THREADS * 8 - 1) / (ARGMAX_THREADS * 8);
    return b < 1 ? 1 : b > ARGMAX_MAX_BLOCKS ? ARGMAX_MAX_BLOCKS : b;
}
struct argmax_part {
    double bm, sum;
    float val;
    int id;
};

static __global__ void __launch_bounds__(ARGMAX_THREADS)
argmax_part_kernel(const float *logits, int nv, int want_lp, argmax_part *part) {
    __shared__ float shf[RF_MAX_WARPS];
    __shared__ int shi[RF_MAX_WARPS];
    __shared__ double shd[RF_MAX_WARPS];
    const int tid = threadIdx.x, bs = blockDim.x, lane = tid % warpSize, w = tid / warpSize;
    float bv = -INFINITY, mx = -INFINITY;
    int bi = INT_MAX;
    for (int i = blockIdx.x * bs + tid; i < nv; i += gridDim.x * bs) {
        const float v = logits[i];
        if (v > bv || (v == bv && bi == INT_MAX)) {
            bv = v;
            bi = i;
        }
        mx = v > mx ? v : mx;
    }
    for (int o = warpSize / 2; o > 0; o >>= 1) {
        const float ov = RF_SHFL_XOR(bv, o);
        const int oi = RF_SHFL_XOR(bi, o);
        if (before(ov, oi, bv, bi)) {
            bv = ov;
            bi = oi;
        }
    }
    if (lane == 0) {
        shf[w] = bv;
        shi[w] = bi;
    }
    __syncthreads();
    if (tid == 0) {
        for (int i = 1; i < bs / warpSize; i++)
            if (before(shf[i], shi[i], bv, bi)) {
                bv = shf[i];
                bi = shi[i];
            }
        part[blockIdx.x].val = bv;
        part[blockIdx.x].id = bi;
    }
    if (want_lp) {
        __syncthreads();
        const float bm = rf_block_max(mx, shf);
        double sm = 0.0;
        for (int i = blockIdx.x * bs + tid; i < nv; i += gridDim.x * bs) {
            const float x = logits[i]; /* bm = -inf: only a NaN counts (and makes the sum NaN) */
            sm += bm != -INFINITY ? exp((double)x - bm) : x != x ? (double)x : 0.0;
        }
        sm = rf_block_sum_d(sm, shd);
        if (tid == 0) {
            part[blockIdx.x].bm = bm;
            part[blockIdx.x].sum = sm;
        }
    }
}

static __global__ void argmax_final_kernel(const float *logits, int nb, const argmax_part *part, int32_t *token_out,
                                           float *logprob_out) {
    if (threadIdx.x != 0) return;
    float v = part[0].val;
    int id = part[0].id;
    double M = -INFINITY;
    for (int b = 0; b < nb; b++) {
        if (before(part[b].val, part[b].id, v, id)) {
            v = part[b].val;
            id = part[b].id;
        }
        if (logprob_out) M = part[b].bm > M ? part[b].bm : M;
    }
    const int chosen = (logits[0] != logits[0] || id == INT_MAX) ? 0 : id;
    *token_out = chosen;
    if (logprob_out) {
        double S = 0.0;
        if (M == -INFINITY) S = NAN; /* every logit -inf (or NaN): the single-block path's NaN */
        else
            for (int b = 0; b < nb; b++) S += part[b].sum * exp(part[b].bm - M);
        *logprob_out = (float)((double)logits[chosen] - M - log(S));
    }
}

extern "C" size_t rf_gpu_sample_scratch(int n_vocab) {
    return (size_t)(2 * (size_t)n_vocab + 2 * (size_t)sample_npad(n_vocab)) * 4 +
           ARGMAX_MAX_BLOCKS * sizeof(argmax_part);
}

extern "C" int rf_gpu_sample(void *stream, const float *logits, int n_vocab, const rf_sample_params *p,
                             const int32_t *history, int n_history, float u, int32_t *token_out, float *logprob_out,
                             void *scratch) {
    if (n_vocab <= 0) return 0;
    const bool penalize = p->repeat_penalty != 1.0f || p->freq_penalty != 0.0f || p->presence_penalty != 0.0f;
    if (p->temp <= 0.0f && !(penalize && n_history > 0 && p->penalty_last_n != 0)) {
        const int nb = argmax_blocks(n_vocab);
        argmax_part *part = (argmax_part *)scratch; /* nb <= ARGMAX_MAX_BLOCKS partials fit */
        argmax_part_kernel<<<nb, ARGMAX_THREADS, 0, (gpuStream_t)stream>>>(logits, n_vocab, logprob_out != NULL,
                                                                             part);
        int rc = (int)gpuGetLastError();
        if (rc) return rc;
        argmax_final_kernel<<<1, 64, 0, (gpuStream_t)stream>>>(logits, nb, part, token_out, logprob_out);
        return (int)gpuGetLastError();
    }
    sample_kernel<<<1, SAMPLE_THREADS, 0, (gpuStream_t)stream>>>(logits, n_vocab, *p, history, n_history, u, token_out,
                                                                 logprob_out, (float *)scratch);
    return (int)gpuGetLastError();
}
