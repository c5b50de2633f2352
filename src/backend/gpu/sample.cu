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

/* apply_penalties: runtime/sampler.h step 1 for the ids in [lo, hi): each distinct id of the
 * window history[start..n_history) (start = n_history - penalty_last_n, 0 when the window covers
 * it all, n_history when penalty_last_n == 0) is penalised once, by the thread holding its first
 * occurrence, in place in lg. Called by every thread of the block; no barrier inside. */
__device__ static void apply_penalties(float *lg, const rf_sample_params &P, const int32_t *history, int n_history,
                                       int lo, int hi) {
    int start = P.penalty_last_n > 0 && n_history > P.penalty_last_n ? n_history - P.penalty_last_n : 0;
    if (P.penalty_last_n == 0) start = n_history;
    for (int i = start + (int)threadIdx.x; i < n_history; i += (int)blockDim.x) {
        const int32_t id = history[i];
        if (id < lo || id >= hi) continue;
        bool first = true;
        for (int j = start; j < i && first; j++) first = history[j] != id;
        if (!first) continue;
        int count = 0;
        for (int j = start; j < n_history; j++) count += history[j] == id;
        float l = lg[id];
        l = l > 0 ? l / P.repeat_penalty : l * P.repeat_penalty;
        lg[id] = l - (float)count * P.freq_penalty - P.presence_penalty;
    }
}

/* block_sort: sorts keys/ids[0..npad) (npad a power of two) in the sampler's order (descending
 * key, ascending id on ties; see before()) with a bitonic network. Called by every thread of the
 * block; the arrays are in shared or global memory visible to the whole block; ends synchronised. */
__device__ static void block_sort(float *keys, int *ids, int npad) {
    const int tid = (int)threadIdx.x, bs = (int)blockDim.x;
    for (int k = 2; k <= npad; k <<= 1)
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
 * the CPU's except where the two differ in the last bits of expf at an exact decision boundary
 * (exponentials are taken as (float)exp(double), the correctly rounded value in all but
 * vanishingly rare cases, as glibc's expf). gate (may be NULL): when *gate == 0 the kernel does
 * nothing (the top-k path's fallback, armed by sel_final when its candidates overflow). */
static __global__ void __launch_bounds__(SAMPLE_THREADS)
sample_kernel(const float *logits, int nv, rf_sample_params P, const int32_t *history, int n_history, float u,
              int32_t *token_out, float *logprob_out, float *scratch, const int *gate) {
    __shared__ double shd[SAMPLE_THREADS];
    __shared__ float shf[RF_MAX_WARPS];
    __shared__ double shw[RF_MAX_WARPS];
    __shared__ int sbest;
    __shared__ int sbest_v_nan;
    if (gate && *gate == 0) return;
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
        apply_penalties(lg, P, history, n_history, 0, nv);
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
        block_sort(keys, ids, npad);
        int n = nv;
        if (P.top_k > 0 && P.top_k < n) n = P.top_k;
        const float c0 = keys[0];
        double sum = 0.0;
        for (int i = tid; i < n; i += bs) {
            pr[i] = (float)exp((double)(keys[i] - c0));
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
            pr[i] = (float)exp((double)((keys[i] - c0) / P.temp));
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

/* ---- temp > 0 with a top-k: multi-block radix select, then one block over the candidates ------
 * The order is the CPU's: key desc, id asc, with key = the (penalized) logit, NaN as -inf and -0
 * as +0. sel_key maps a key to a uint32 that orders like the key (equal keys, equal words), so the
 * k-th largest key is found digit by digit: digit 1 = bits 31..20 (sel_hist_kernel), digit 2 =
 * bits 19..8 among the tokens of digit 1's bin (sel_gather_kernel). The tokens above digit 2's bin
 * together with that whole bin hold the top k (>= k tokens, usually a few more); sel_gather's last
 * block sorts them (at most SEL_CAP) and runs top-k / top-p / min-p / temperature / pick with the
 * CPU's sequential f64 sums in the CPU's order, so the token is the CPU's. More than SEL_CAP
 * candidates (massive ties) arm sample_kernel, launched behind, which then does the full sort.
 * Counters and histograms live in sel_state, zeroed by a memset before each call; "last block"
 * hand-offs use __threadfence + an atomic counter (no block waits on another). */
#define SEL_THREADS 256
#define SEL_BINS 4096
#define SEL_CAP 2048
#define SEL_MAX_BLOCKS 128

struct sel_state {
    unsigned hist1[SEL_BINS], hist2[SEL_BINS];
    unsigned done1, done2, n_above, n_mid;
    unsigned bin1, need2;
    int fallback, pad_;
};

static int sel_blocks(int nv) {
    int b = (nv + SEL_THREADS * 8 - 1) / (SEL_THREADS * 8);
    return b < 1 ? 1 : b > SEL_MAX_BLOCKS ? SEL_MAX_BLOCKS : b;
}

static __device__ __forceinline__ float sel_keyf(float v) { return v != v ? -INFINITY : v == 0.0f ? 0.0f : v; }
static __device__ __forceinline__ unsigned sel_key(float v) {
    const unsigned b = __float_as_uint(sel_keyf(v));
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* One block of SEL_THREADS threads. h: SEL_BINS counts whose total is >= need >= 1. Finds the
 * bin b with (sum of h above b) < need <= (sum of h from b up) and stores b in *bin_out and the
 * sum above b in *above_out (shared). scan: SEL_THREADS unsigneds of shared memory. Ends with a
 * barrier. */
static __device__ void sel_find_bin(const volatile unsigned *h, unsigned need, unsigned *scan, unsigned *bin_out,
                                    unsigned *above_out) {
    const int tid = threadIdx.x, per = SEL_BINS / SEL_THREADS;
    const int top = SEL_BINS - 1 - tid * per; /* this thread's bins: top, top-1, ..., top-per+1 */
    unsigned loc = 0;
    for (int j = 0; j < per; j++) loc += h[top - j];
    scan[tid] = loc;
    __syncthreads();
    for (int off = 1; off < SEL_THREADS; off <<= 1) { /* inclusive scan over threads (bins descending) */
        const unsigned v = tid >= off ? scan[tid - off] : 0u;
        __syncthreads();
        scan[tid] += v;
        __syncthreads();
    }
    unsigned acc = scan[tid] - loc;
    if (acc < need && acc + loc >= need)
        for (int j = 0; j < per; j++) {
            const unsigned c = h[top - j];
            if (acc + c >= need) {
                *bin_out = (unsigned)(top - j);
                *above_out = acc;
                break;
            }
            acc += c;
        }
    __syncthreads();
}

/* penalty_copy_kernel: grid sel_blocks(nv) x SEL_THREADS. lg = logits with runtime/sampler.h's
 * penalties over history[start..n_history) (start as in the CPU code): block b copies its
 * contiguous id range, then applies the penalty of each distinct history id in that range once,
 * by the thread holding the id's first occurrence. */
static __global__ void __launch_bounds__(SEL_THREADS)
penalty_copy_kernel(const float *logits, int nv, rf_sample_params P, const int32_t *history, int n_history,
                    float *lg) {
    const int chunk = (nv + gridDim.x - 1) / gridDim.x;
    const int lo = blockIdx.x * chunk, hi = min(nv, lo + chunk);
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) lg[i] = logits[i];
    __syncthreads();
    apply_penalties(lg, P, history, n_history, lo, hi);
}

/* sel_hist_kernel: grid nb = sel_blocks(nv) x SEL_THREADS; 1 <= k <= nv. Adds the digit-1
 * histogram of sel_key(lg[i]) to st->hist1 (per-block shared histogram, then global atomics).
 * With want_lp, block b writes lpp[2b] = its max of the raw logits (NaN ignored) and lpp[2b+1] =
 * sum of e^(x - max) in f64 (0 when the max is -inf), as argmax_part_kernel. The last block to
 * finish finds digit 1's bin of the k-th largest key: st->bin1 and st->need2 = k - (tokens in
 * higher bins), the rank sought inside the bin. st zeroed before the launch. */
static __global__ void __launch_bounds__(SEL_THREADS)
sel_hist_kernel(const float *lg, const float *logits, int nv, int k, int want_lp, sel_state *st, double *lpp) {
    __shared__ unsigned h[SEL_BINS];
    __shared__ unsigned scan[SEL_THREADS];
    __shared__ float shf[RF_MAX_WARPS];
    __shared__ double shd[RF_MAX_WARPS];
    __shared__ unsigned sbin, sabove;
    __shared__ int last;
    const int tid = threadIdx.x, bs = blockDim.x;
    for (int i = tid; i < SEL_BINS; i += bs) h[i] = 0;
    __syncthreads();
    for (int i = blockIdx.x * bs + tid; i < nv; i += gridDim.x * bs) atomicAdd(&h[sel_key(lg[i]) >> 20], 1u);
    __syncthreads();
    for (int i = tid; i < SEL_BINS; i += bs)
        if (h[i]) atomicAdd(&st->hist1[i], h[i]);
    if (want_lp) {
        float mx = -INFINITY;
        for (int i = blockIdx.x * bs + tid; i < nv; i += gridDim.x * bs) mx = logits[i] > mx ? logits[i] : mx;
        const float bm = rf_block_max(mx, shf);
        double sm = 0.0;
        for (int i = blockIdx.x * bs + tid; i < nv; i += gridDim.x * bs) {
            const float x = logits[i];
            sm += bm != -INFINITY ? exp((double)x - bm) : x != x ? (double)x : 0.0;
        }
        sm = rf_block_sum_d(sm, shd);
        if (tid == 0) {
            lpp[2 * blockIdx.x] = bm;
            lpp[2 * blockIdx.x + 1] = sm;
        }
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(&st->done1, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    sel_find_bin(st->hist1, (unsigned)k, scan, &sbin, &sabove);
    if (tid == 0) {
        st->bin1 = sbin;
        st->need2 = (unsigned)k - sabove;
    }
}

/* sel_gather_kernel: grid sel_blocks(nv) x SEL_THREADS, after sel_hist_kernel on the same st;
 * 1 <= k <= SEL_CAP, k < nv, P.temp > 0. Ids whose digit 1 is above st->bin1 go to above[] (fewer
 * than k), ids in the bin to mid[] (up to nv) with their digit 2 counted in st->hist2. The last
 * block finds digit 2's bin of rank st->need2 and, when the candidates (above[] plus mid[] at or
 * above that bin) number at most SEL_CAP, sorts them in (key desc, id asc) order, keeps the first k
 * and runs top-p (f64 sum of e^(x - x0) as floats, in order, cumulative >= top_p), min-p
 * (p >= min_p * p0), temperature (e^((x - x0) / temp)) and the pick (first cumulative > u * total)
 * exactly as rf_sample_host, writing *token_out and, with logprob_out, the log-softmax of the raw
 * logits from the nb1 partials lpp of sel_hist_kernel. Otherwise it sets st->fallback. */
static __global__ void __launch_bounds__(SEL_THREADS)
sel_gather_kernel(const float *lg, const float *logits, int nv, rf_sample_params P, float u, sel_state *st,
                  const double *lpp, int nb1, int *above, int *mid, int32_t *token_out, float *logprob_out) {
    __shared__ unsigned h[SEL_BINS];
    __shared__ float ck[SEL_CAP], cp[SEL_CAP];
    __shared__ int ci[SEL_CAP];
    __shared__ unsigned scan[SEL_THREADS];
    __shared__ unsigned sbin, sabove, scnt;
    __shared__ int last, sn;
    const int tid = threadIdx.x, bs = blockDim.x;
    for (int i = tid; i < SEL_BINS; i += bs) h[i] = 0;
    __syncthreads();
    const unsigned bin1 = st->bin1;
    for (int i = blockIdx.x * bs + tid; i < nv; i += gridDim.x * bs) {
        const unsigned key = sel_key(lg[i]), d1 = key >> 20;
        if (d1 > bin1) {
            above[atomicAdd(&st->n_above, 1u)] = i;
        } else if (d1 == bin1) {
            mid[atomicAdd(&st->n_mid, 1u)] = i;
            atomicAdd(&h[(key >> 8) & (SEL_BINS - 1)], 1u);
        }
    }
    __syncthreads();
    for (int i = tid; i < SEL_BINS; i += bs)
        if (h[i]) atomicAdd(&st->hist2[i], h[i]);
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(&st->done2, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const volatile sel_state *vst = st;
    const unsigned n_above = vst->n_above, n_mid = vst->n_mid;
    sel_find_bin(st->hist2, vst->need2, scan, &sbin, &sabove);
    const unsigned bin2 = sbin, total = n_above + sabove + vst->hist2[bin2];
    if (total > SEL_CAP) {
        if (tid == 0) st->fallback = 1;
        return;
    }
    const volatile int *vabove = above, *vmid = mid;
    for (unsigned j = tid; j < n_above; j += bs) {
        const int id = vabove[j];
        ci[j] = id;
        ck[j] = sel_keyf(lg[id]);
    }
    if (tid == 0) scnt = n_above;
    __syncthreads();
    for (unsigned j = tid; j < n_mid; j += bs) {
        const int id = vmid[j];
        const float x = lg[id];
        if (((sel_key(x) >> 8) & (SEL_BINS - 1)) >= bin2) {
            const unsigned pos = atomicAdd(&scnt, 1u);
            ci[pos] = id;
            ck[pos] = sel_keyf(x);
        }
    }
    const int npad = sample_npad((int)total);
    for (int i = (int)total + tid; i < npad; i += bs) {
        ck[i] = -INFINITY;
        ci[i] = INT_MAX;
    }
    __syncthreads();
    block_sort(ck, ci, npad);
    const int k = P.top_k; /* <= total */
    const float c0 = ck[0];
    for (int i = tid; i < k; i += bs) cp[i] = (float)exp((double)(ck[i] - c0));
    __syncthreads();
    if (tid == 0) {
        int n = k;
        double sum = 0.0;
        for (int i = 0; i < n; i++) sum += cp[i];
        if (P.top_p < 1.0f) {
            double cum = 0.0;
            int keep = n;
            for (int i = 0; i < n; i++) {
                cum += cp[i] / sum;
                if (cum >= P.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            n = keep;
        }
        if (P.min_p > 0.0f) {
            int keep = 1;
            while (keep < n && cp[keep] >= P.min_p * cp[0]) keep++;
            n = keep;
        }
        sn = n;
    }
    __syncthreads();
    const int n = sn;
    for (int i = tid; i < n; i += bs) cp[i] = (float)exp((double)((ck[i] - c0) / P.temp));
    __syncthreads();
    if (tid == 0) {
        double tot = 0.0;
        for (int i = 0; i < n; i++) tot += cp[i];
        const double target = (double)u * tot;
        double cum = 0.0;
        int pick = n - 1;
        for (int i = 0; i < n; i++) {
            cum += cp[i];
            if (cum > target) {
                pick = i;
                break;
            }
        }
        const int chosen = ci[pick];
        *token_out = chosen;
        if (logprob_out) {
            double M = -INFINITY, S = 0.0;
            for (int b = 0; b < nb1; b++) M = lpp[2 * b] > M ? lpp[2 * b] : M;
            if (M == -INFINITY) S = NAN;
            else
                for (int b = 0; b < nb1; b++) S += lpp[2 * b + 1] * exp(lpp[2 * b] - M);
            *logprob_out = (float)((double)logits[chosen] - M - log(S));
        }
    }
}

/* Scratch layout: the full-sort arrays of sample_kernel (2 nv + 2 npad floats; the argmax
 * partials overlap their start), then, 256-byte aligned, sel_state, the lp partials
 * (2 SEL_MAX_BLOCKS doubles), above[SEL_CAP], the penalized logits [nv] and mid[nv]. */
static size_t sel_offset(int nv) {
    size_t a = (size_t)(2 * (size_t)nv + 2 * (size_t)sample_npad(nv)) * 4;
    const size_t b = ARGMAX_MAX_BLOCKS * sizeof(argmax_part);
    a = a > b ? a : b;
    return (a + 255) & ~(size_t)255;
}
static size_t sel_bytes(int nv) {
    return ((sizeof(sel_state) + 255) & ~(size_t)255) + 2 * SEL_MAX_BLOCKS * sizeof(double) + SEL_CAP * 4 +
           2 * (size_t)nv * 4;
}

extern "C" size_t rf_gpu_sample_scratch(int n_vocab) { return sel_offset(n_vocab) + sel_bytes(n_vocab); }

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
    const int *gate = NULL;
    if (p->temp > 0.0f && p->top_k > 0 && p->top_k < n_vocab && p->top_k <= SEL_CAP) {
        gpuStream_t st = (gpuStream_t)stream;
        char *base = (char *)scratch + sel_offset(n_vocab);
        sel_state *ss = (sel_state *)base;
        double *lpp = (double *)(base + ((sizeof(sel_state) + 255) & ~(size_t)255));
        int *above = (int *)(lpp + 2 * SEL_MAX_BLOCKS);
        float *pen = (float *)(above + SEL_CAP);
        int *mid = (int *)(pen + n_vocab);
        const int nb = sel_blocks(n_vocab);
        int rc = (int)gpuMemsetAsync(ss, 0, sizeof(sel_state), st);
        if (rc) return rc;
        const float *lg = logits;
        if (penalize && n_history > 0 && p->penalty_last_n != 0) {
            penalty_copy_kernel<<<nb, SEL_THREADS, 0, st>>>(logits, n_vocab, *p, history, n_history, pen);
            lg = pen;
        }
        sel_hist_kernel<<<nb, SEL_THREADS, 0, st>>>(lg, logits, n_vocab, p->top_k, logprob_out != NULL, ss, lpp);
        sel_gather_kernel<<<nb, SEL_THREADS, 0, st>>>(lg, logits, n_vocab, *p, u, ss, lpp, nb, above, mid, token_out,
                                                      logprob_out);
        rc = (int)gpuGetLastError();
        if (rc) return rc;
        gate = &ss->fallback;
    }
    sample_kernel<<<1, SAMPLE_THREADS, 0, (gpuStream_t)stream>>>(logits, n_vocab, *p, history, n_history, u, token_out,
                                                                 logprob_out, (float *)scratch, gate);
    return (int)gpuGetLastError();
}
