/* gemm_amx.c: the AMX level's many-token GEMMs (Intel AMX tiles): F16 and BF16 weights on
 * AMX-BF16 (this part), the quantized types' int8 GEMM on AMX-INT8 (the part at the end).
 *
 * Contract: the rf_gemm_f32_fn of matmul_kernels.h. y[t*n_out + o] = sum_k W[o][k] * x[t][k] for
 * every token t < n_tok and the rows taken from `rows`, to f32 accuracy: |error| <= ~1e-5 of
 * sum_k |W[o][k] x[t][k]| (tests/test_matmul.c holds it to 1e-4, the f32 paths' tolerance).
 *
 * Why this is exact enough: AMX multiplies bf16 pairs (8-bit significands), so an operand is
 * split into bf16 parts that sum to it. An f16 weight (11-bit significand) is exactly w_hi + w_lo
 * (w_hi = w rounded to bf16; the remainder has at most 3 significant bits, and bf16 has f32's
 * exponent range); a bf16 weight is itself. Each token row of x is first scaled by a power of two
 * so that its largest |x| lies in [0.5, 1) (exact; the scale is undone on the output), then split
 * the same way: x_hi + x_lo, within 2^-17 of x relative to its own magnitude. The dot product is
 * w_hi x_hi + w_hi x_lo + w_lo x_hi (three tile products; two for bf16 weights): the one term
 * left out, w_lo x_lo, is below 2^-17 of |w x|. Products of bf16 values are exact in f32 and
 * summed in f32. The scaling keeps x_lo clear of the subnormal range, which AMX flushes to zero.
 * Tokens whose row holds a NaN or an inf take the AVX-512 level's per-row f32 dot (so they
 * propagate as in the reference); a weight of +-inf gives NaN here where the reference gives +-inf
 * (its split is inf + NaN), a difference only a broken file can show.
 *
 * Fewer than AMX_MIN_TOK tokens take the AVX-512 level's GEMM instead (the int16-code GEMM of
 * gemm_i16.h where the CPU has AVX512_VNNI; the driver itself takes the per-row kernels below 5
 * tokens): a tile product costs
 * the same for 1 token as for 16.
 *
 * Data layout (AMX tiles, all 16 rows x 64 bytes; C = A B):
 *   A (weights): 16 weight rows x 32 consecutive k as bf16: a 1 KiB block [row][k] per K step;
 *   B (activations): 16 pairs of k x 16 tokens x 2 bf16: [k/2][token][k%2] per K step and group
 *     of 16 tokens (the k-pair interleave that TDPBF16PS reads);
 *   C: 16 weight rows x 16 tokens of f32 [row][token].
 * Tiles 0-3 hold C for four token groups (64 tokens, one "token chunk"), 4/5 the weights' hi/lo,
 * 6/7 one token group's hi/lo. K is padded with zeros to a multiple of 32, rows past n_out repeat
 * the last row (their outputs are not stored), tokens past n_tok are zero.
 *
 * Loop order per thread: row pieces of up to 64 rows from `rows`, each in units of one K chunk of
 * 1024. A unit's weights are converted once (256 KiB) and used by every token chunk, whose packed
 * activations for that K chunk (256 KiB) are used by every 16-row block of the piece; partial C
 * tiles stay in a per-thread buffer between K chunks. The next unit's conversion runs one K step
 * at a time between this unit's tile products (wjob), into the other of two buffers. Each thread
 * packs all of x itself (a few percent of the GEMM's time), as the AVX-512 f32 GEMM does. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/avx512_tr16.h"
#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/thread_scratch.h"
#include "core/util.h"

#define AI static inline __attribute__((always_inline))

#ifndef AMX_MIN_TOK /* fewer tokens take the AVX-512 f32 GEMM (docs/PERF-CPU.md section 20); -D to experiment */
#define AMX_MIN_TOK 8
#endif
enum {
    KSTEP = 32,       /* k per tile product */
    KC_STEPS = 32,    /* K steps per chunk: 1024 k */
    PIECE_BLOCKS = 4, /* 16-row blocks per row piece */
    CHUNK_GROUPS = 4, /* 16-token groups per token chunk (C tiles 0-3) */
    TILE_ELEMS = 512, /* bf16 per tile (16 x 64 bytes) */
};

/* The AVX-512 level's entries, for few tokens and for non-finite token rows (rf_mm_kernels_amx). */
static rf_gemm_f32_fn avx512_gemm[RF_TYPE_COUNT];
static rf_dot_f32_fn avx512_dot[RF_TYPE_COUNT];

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

static void amx_configure(void) {
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) cfg.colsb[i] = 64, cfg.rows[i] = 16;
    _tile_loadconfig(&cfg);
}

/* f0 (k 0..15) and f1 (k 16..31) as 32 bf16 hi = RNE(f) and lo = RNE(f - hi). Non-finite f give
 * a NaN lo; callers keep such values out (tokens) or accept it (weights, see above). */
AI void split_bf16(__m512 f0, __m512 f1, __m512i *hi, __m512i *lo) {
    const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(f1, f0);
    const __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
    const __m512 h1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
    *hi = h;
    *lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(f1, h1), _mm512_sub_ps(f0, h0));
}

/* The first n lanes (none for n <= 0, all for n >= the width). */
AI __mmask32 tail_mask32(int64_t n) { return n >= 32 ? 0xFFFFFFFFu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1); }
AI __mmask16 tail_mask16(int64_t n) { return n >= 16 ? 0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

/* One conversion job: the weights of one 16-row block for K steps [s0, s0 + ns) into wa, per
 * step the hi tile, then (F16) the lo tile. roff: byte offsets of the block's 16 rows (clamped to
 * the last valid row). Each 64-byte load also asks the L2 for the matching line of the block that
 * will be converted next (pf: its 16 row offsets, from K step pf_s0; NULL: none): without that
 * the conversion waited on DRAM (38% of the F16 prompt's GEMM time). */
typedef struct {
    const uint8_t *w;
    const int64_t *roff, *pf;
    int64_t n_in, s0, pf_s0;
    int ns, f16;
    uint16_t *wa;
} wjob;

/* Step s (< j->ns) of job j, all 16 rows. */
AI void wjob_step(const wjob *j, int s) {
    const int64_t k = (j->s0 + s) * KSTEP, kp = (j->pf_s0 + s) * KSTEP;
    const __mmask32 m = tail_mask32(j->n_in - k);
    uint16_t *d = j->wa + (int64_t)s * (j->f16 ? 2 : 1) * TILE_ELEMS;
    for (int r = 0; r < 16; r++, d += 32) {
        if (j->pf && kp < j->n_in) _mm_prefetch((const char *)(j->w + j->pf[r] + 2 * kp), _MM_HINT_T1);
        const __m512i v = _mm512_maskz_loadu_epi16(m, (const uint16_t *)(j->w + j->roff[r]) + k);
        if (!j->f16) {
            _mm512_store_si512((void *)d, v);
            continue;
        }
        __m512i hi, lo;
        split_bf16(_mm512_cvtph_ps(_mm512_castsi512_si256(v)), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)), &hi, &lo);
        _mm512_store_si512((void *)d, hi);
        _mm512_store_si512((void *)(d + TILE_ELEMS), lo);
    }
}

/* x, scaled per token, into the B tiles: xb[((tc * nsteps + s) * CHUNK_GROUPS + g) * 2 + hl]
 * (TILE_ELEMS each). Per token: scale[t] = 2^e with max|x_t| / 2^e in [0.5, 1) (e clamped to
 * [-125, 126], so that 2^-e stays a normal float; 1 for an all-zero row) and inv[t] = 1 / scale[t];
 * bad[t] = 1 for a row holding NaN/inf (packed as zeros). Returns the number of bad rows. */
static int64_t pack_x(const float *x, int64_t n_tok, int64_t n_in, int64_t nsteps, uint16_t *xb, float *scale,
                      float *inv, uint8_t *bad) {
    int64_t n_bad = 0;
    for (int64_t t = 0; t < n_tok; t++) {
        const float *xt = x + t * n_in;
        __m512 m = _mm512_setzero_ps();
        __mmask16 nonfinite = 0;
        for (int64_t k = 0; k < n_in; k += 16) {
            const __m512 v = _mm512_maskz_loadu_ps(tail_mask16(n_in - k), xt + k);
            nonfinite |= _mm512_fpclass_ps_mask(v, 0x99); /* QNaN, SNaN, +inf, -inf */
            m = _mm512_max_ps(m, _mm512_abs_ps(v));
        }
        bad[t] = nonfinite != 0;
        n_bad += bad[t];
        const float amax = _mm512_reduce_max_ps(m);
        int e = 0;
        if (!bad[t] && amax > 0) frexpf(amax, &e);
        e = e < -125 ? -125 : e > 126 ? 126 : e;
        scale[t] = ldexpf(1.0f, e);
        inv[t] = bad[t] ? 0.0f : ldexpf(1.0f, -e);
    }
    const int64_t ntc = (n_tok + 63) / 64;
    for (int64_t tc = 0; tc < ntc; tc++)
        for (int g = 0; g < CHUNK_GROUPS; g++) {
            const int64_t t0 = tc * 64 + g * 16;
            if (t0 >= n_tok) break;
            for (int64_t s = 0; s < nsteps; s++) {
                __m512i hv[16], lv[16];
                const int64_t k = s * KSTEP;
                const __mmask16 m0 = tail_mask16(n_in - k), m1 = tail_mask16(n_in - k - 16);
                for (int j = 0; j < 16; j++) {
                    const int64_t t = t0 + j;
                    if (t >= n_tok || bad[t]) {
                        hv[j] = lv[j] = _mm512_setzero_si512();
                        continue;
                    }
                    const __m512 sc = _mm512_set1_ps(inv[t]);
                    const float *xt = x + t * n_in + k;
                    split_bf16(_mm512_mul_ps(_mm512_maskz_loadu_ps(m0, xt), sc),
                               _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, xt + 16), sc), &hv[j], &lv[j]);
                }
                /* token j's 16 k-pairs -> pair p's 16 tokens */
                tr16(hv);
                tr16(lv);
                uint16_t *d = xb + ((tc * nsteps + s) * CHUNK_GROUPS + g) * 2 * TILE_ELEMS;
                for (int p = 0; p < 16; p++) {
                    _mm512_store_si512((void *)(d + p * 32), hv[p]);
                    _mm512_store_si512((void *)(d + TILE_ELEMS + p * 32), lv[p]);
                }
            }
        }
    return n_bad;
}

/* One 16-row block against ng (1..4) token groups over ns K steps: C tiles from acc (or zero when
 * first), += the products, back to acc ([g][16 rows][16 tokens] f32). terms: 3 for F16 weights
 * (hi hi, hi lo, lo hi), 2 for BF16 (the weight is its own hi). job (or NULL): a conversion run
 * one step per K step between the tile products, so that the AVX-512 conversion of the next
 * block overlaps the tile unit's work instead of following it. */
#define MK_GROUP(c, bp)                                                                            \
    do {                                                                                           \
        _tile_loadd(6, (bp), 64);                                                                  \
        _tile_loadd(7, (bp) + TILE_ELEMS, 64);                                                     \
        _tile_dpbf16ps(c, 4, 6);                                                                   \
        _tile_dpbf16ps(c, 4, 7);                                                                   \
        if (terms == 3) _tile_dpbf16ps(c, 5, 6);                                                   \
    } while (0)

AI void mk_amx(const uint16_t *wa, const uint16_t *xb, int ns, const int ng, const int terms, float *acc, int first,
               const wjob *job) {
    if (first) {
        _tile_zero(0);
        if (ng > 1) _tile_zero(1);
        if (ng > 2) _tile_zero(2);
        if (ng > 3) _tile_zero(3);
    } else {
        _tile_loadd(0, acc, 64);
        if (ng > 1) _tile_loadd(1, acc + 256, 64);
        if (ng > 2) _tile_loadd(2, acc + 512, 64);
        if (ng > 3) _tile_loadd(3, acc + 768, 64);
    }
    const int wt = terms == 3 ? 2 : 1;
    for (int s = 0; s < ns; s++, wa += wt * TILE_ELEMS, xb += CHUNK_GROUPS * 2 * TILE_ELEMS) {
        _tile_loadd(4, wa, 64);
        if (terms == 3) _tile_loadd(5, wa + TILE_ELEMS, 64);
        MK_GROUP(0, xb);
        if (ng > 1) MK_GROUP(1, xb + 2 * TILE_ELEMS);
        if (ng > 2) MK_GROUP(2, xb + 4 * TILE_ELEMS);
        if (ng > 3) MK_GROUP(3, xb + 6 * TILE_ELEMS);
        if (job && s < job->ns) wjob_step(job, s);
    }
    for (int s = ns; job && s < job->ns; s++) wjob_step(job, s);
    _tile_stored(0, acc, 64);
    if (ng > 1) _tile_stored(1, acc + 256, 64);
    if (ng > 2) _tile_stored(2, acc + 512, 64);
    if (ng > 3) _tile_stored(3, acc + 768, 64);
}

static void mk_dispatch(const uint16_t *wa, const uint16_t *xb, int ns, int ng, int f16, float *acc, int first,
                        const wjob *job) {
    switch (ng * 2 + f16) {
    case 2: mk_amx(wa, xb, ns, 1, 2, acc, first, job); break;
    case 3: mk_amx(wa, xb, ns, 1, 3, acc, first, job); break;
    case 4: mk_amx(wa, xb, ns, 2, 2, acc, first, job); break;
    case 5: mk_amx(wa, xb, ns, 2, 3, acc, first, job); break;
    case 6: mk_amx(wa, xb, ns, 3, 2, acc, first, job); break;
    case 7: mk_amx(wa, xb, ns, 3, 3, acc, first, job); break;
    case 8: mk_amx(wa, xb, ns, 4, 2, acc, first, job); break;
    default: mk_amx(wa, xb, ns, 4, 3, acc, first, job); break;
    }
}

/* acc tiles ([16 rows][16 tokens]) of one block -> y rows [r, r + nr) of the group's tokens,
 * times each token's scale. */
static void store_block(const float *acc, int64_t t0, int64_t n_tok, const float *scale, const uint8_t *bad, float *y,
                        int64_t n_out, int64_t r, int nr) {
    __m512i v[16];
    for (int i = 0; i < 16; i++) v[i] = _mm512_load_si512((const void *)(acc + 16 * i));
    tr16(v);
    const __mmask16 m = tail_mask16(nr);
    for (int j = 0; j < 16 && t0 + j < n_tok; j++)
        if (!bad[t0 + j])
            _mm512_mask_storeu_ps(y + (t0 + j) * n_out + r, m,
                                  _mm512_mul_ps(_mm512_castsi512_ps(v[j]), _mm512_set1_ps(scale[t0 + j])));
}

/* A unit of work: one row piece (up to PIECE_BLOCKS blocks of 16 rows from row p) and one K chunk
 * (KC_STEPS steps from step s0); units run chunk by chunk, then piece by piece, within one take
 * [r0, r1) of rows. ok: the unit exists in the take. */
typedef struct {
    int64_t p, s0;
    int ok;
} unit;

static unit unit_after(unit u, int64_t nsteps, int64_t r1) {
    unit n = {u.p, u.s0 + KC_STEPS, 0};
    if (n.s0 >= nsteps) n.s0 = 0, n.p += 16 * PIECE_BLOCKS;
    n.ok = u.ok && n.p < r1;
    return n;
}

/* Byte offsets of the unit's 16 rows per block (rows past r1 - 1 repeat the last). */
static void unit_rows(unit u, uint64_t rb, int64_t r1, int64_t offs[PIECE_BLOCKS][16]) {
    for (int b = 0; b < PIECE_BLOCKS; b++)
        for (int r = 0; r < 16; r++) offs[b][r] = (int64_t)((uint64_t)RF_MIN(u.p + 16 * b + r, r1 - 1) * rb);
}

static void gemm_amx(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                     int64_t n_tok, float *y, uint32_t type) {
    if (n_tok < AMX_MIN_TOK) {
        avx512_gemm[type](w, rb, rq, n_out, n_in, x, n_tok, y);
        return;
    }
    const int f16 = type == RF_TYPE_F16;
    const int wt = f16 ? 2 : 1;
    const int64_t nsteps = (n_in + KSTEP - 1) / KSTEP, ntc = (n_tok + 63) / 64;
    uint16_t *xb = rf_thread_scratch(1, sizeof(uint16_t) * (size_t)(ntc * nsteps * CHUNK_GROUPS * 2 * TILE_ELEMS));
    float *scale = rf_thread_scratch(3, (sizeof(float) * 2 + 1) * (size_t)n_tok);
    float *inv = scale + n_tok;
    uint8_t *bad = (uint8_t *)(inv + n_tok);
    const int64_t n_bad = pack_x(x, n_tok, n_in, nsteps, xb, scale, inv, bad);
    /* two buffers of converted weights (this unit's, the next unit's), then the C tiles */
    const int64_t wbuf = PIECE_BLOCKS * KC_STEPS * wt * TILE_ELEMS;
    uint16_t *wa = rf_thread_scratch(0, sizeof(uint16_t) * (size_t)(2 * wbuf) +
                                            sizeof(float) * (size_t)(PIECE_BLOCKS * ntc * CHUNK_GROUPS * 256));
    float *acc = (float *)(wa + 2 * wbuf);
    amx_configure();
    int64_t r0, r1;
    int64_t offs[3][PIECE_BLOCKS][16]; /* row offsets of the current, next and following unit */
    wjob jobs[PIECE_BLOCKS];
    while (rf_rowq_take(rq, &r0, &r1)) {
        unit cur = {r0, 0, 1}, nxt = unit_after(cur, nsteps, r1), aft = unit_after(nxt, nsteps, r1);
        int64_t(*oc)[16] = offs[0], (*on)[16] = offs[1], (*oa)[16] = offs[2];
        unit_rows(cur, rb, r1, oc);
        unit_rows(nxt, rb, r1, on);
        unit_rows(aft, rb, r1, oa);
        int par = 0; /* the weight buffer of the current unit */
        /* the first unit is converted on its own */
        for (int b = 0; b < PIECE_BLOCKS && cur.p + 16 * b < r1; b++) {
            const wjob j = {w, oc[b], nxt.ok ? on[b] : NULL, n_in, 0, nxt.s0, (int)RF_MIN(KC_STEPS, nsteps), f16,
                            wa + b * KC_STEPS * wt * TILE_ELEMS};
            for (int st = 0; st < j.ns; st++) wjob_step(&j, st);
        }
        for (;;) {
            const int64_t p = cur.p, s0 = cur.s0;
            const int nb = (int)RF_MIN(PIECE_BLOCKS, (r1 - p + 15) / 16);
            const int ns = (int)RF_MIN(KC_STEPS, nsteps - s0);
            int nj = 0; /* the next unit's blocks: nb or fewer (only a take's last piece is short) */
            if (nxt.ok)
                for (; nj < PIECE_BLOCKS && nxt.p + 16 * nj < r1; nj++)
                    jobs[nj] = (wjob){w, on[nj], aft.ok ? oa[nj] : NULL, n_in, nxt.s0, aft.s0,
                                      (int)RF_MIN(KC_STEPS, nsteps - nxt.s0), f16,
                                      wa + ((par ^ 1) * PIECE_BLOCKS + nj) * KC_STEPS * wt * TILE_ELEMS};
            for (int64_t tc = 0; tc < ntc; tc++) {
                const int ng = (int)RF_MIN(CHUNK_GROUPS, (n_tok - tc * 64 + 15) / 16);
                const uint16_t *xc = xb + (tc * nsteps + s0) * CHUNK_GROUPS * 2 * TILE_ELEMS;
                for (int b = 0; b < nb; b++)
                    mk_dispatch(wa + (par * PIECE_BLOCKS + b) * KC_STEPS * wt * TILE_ELEMS, xc, ns, ng, f16,
                                acc + (b * ntc + tc) * CHUNK_GROUPS * 256, s0 == 0, tc == 0 && b < nj ? &jobs[b] : NULL);
            }
            if (s0 + KC_STEPS >= nsteps) { /* the piece's last chunk: its outputs are complete */
                for (int b = 0; b < nb; b++)
                    for (int64_t tc = 0; tc < ntc; tc++)
                        for (int g = 0; g < CHUNK_GROUPS && tc * 64 + g * 16 < n_tok; g++)
                            store_block(acc + ((b * ntc + tc) * CHUNK_GROUPS + g) * 256, tc * 64 + g * 16, n_tok,
                                        scale, bad, y, n_out, p + 16 * b, (int)RF_MIN(16, r1 - p - 16 * b));
                for (int64_t t = 0; n_bad && t < n_tok; t++)
                    if (bad[t])
                        for (int64_t o = p; o < RF_MIN(r1, p + 16 * PIECE_BLOCKS); o++)
                            avx512_dot[type](w + (uint64_t)o * rb, n_in, x + t * n_in, 1, y + t * n_out + o);
            }
            if (!nxt.ok) break;
            int64_t(*t)[16] = oc;
            cur = nxt, nxt = aft, aft = unit_after(aft, nsteps, r1);
            oc = on, on = oa, oa = t;
            unit_rows(aft, rb, r1, oa);
            par ^= 1;
        }
    }
    _tile_release();
}

static void gemm_amx_f16(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                         int64_t n_tok, float *y) {
    gemm_amx(w, rb, rq, n_out, n_in, x, n_tok, y, RF_TYPE_F16);
}
static void gemm_amx_bf16(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, int64_t n_in, const float *x,
                          int64_t n_tok, float *y) {
    gemm_amx(w, rb, rq, n_out, n_in, x, n_tok, y, RF_TYPE_BF16);
}

/* ---- The int8 GEMM of the quantized types (AMX-INT8) -------------------------------------
 *
 * The AVX-512 int8 GEMM (matmul_avx512.c) with its micro-kernel on tiles: per block, TDPBSSD
 * multiplies the block's 16 tokens of int8 codes (A: 16 x 4G bytes, as rf_gemm_pack_x lays them
 * out with GT = 16) by the packed weight record's codes made signed (u - zp; B: G rows of [16
 * rows][4], the record layout itself) into int32 C[token][row]. That is exactly the integer
 * vpdpbusd accumulated from -zp * sum(x) on, and the float epilogue per block and token is
 * mk_q8's, in its order: so the result is bit for bit the AVX-512 GEMM's (tests/test_matmul.c
 * checks that). Tiles 0-3 take four consecutive blocks, 4/5 and 6/7 alternate as their A and B, so
 * four products are in flight before their epilogues read them back. */
#ifndef AMX_Q8_MIN_TOK /* fewer tokens take the AVX-512 int8 GEMM (docs/PERF-CPU.md section 20) */
#define AMX_Q8_MIN_TOK 32
#endif

static rf_gemm_q8_fn avx512_gemm_q8[RF_TYPE_COUNT];

static void amx_configure_q8(int G) {
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 4; i++) cfg.colsb[i] = 64, cfg.rows[i] = 16;         /* C: 16 tokens x 16 int32 */
    for (int i = 4; i < 8; i += 2) cfg.colsb[i] = (uint16_t)(4 * G), cfg.rows[i] = 16; /* A: 16 tokens x 4G */
    for (int i = 5; i < 8; i += 2) cfg.colsb[i] = 64, cfg.rows[i] = (uint8_t)G;       /* B: G x [16 rows][4] */
    _tile_loadconfig(&cfg);
}

/* Block j's epilogue for the 16 tokens from its C tile (c: [token][row] int32), as mk_q8. */
AI void q8_epilogue(const int32_t *c, const float *rec_s, const float *rec_m, const float *xd, const float *xds,
                    __m512 *acc, const int has_m) {
    const __m512 s = _mm512_load_ps(rec_s);
    const __m512 m = has_m ? _mm512_load_ps(rec_m) : _mm512_setzero_ps();
    _Pragma("GCC unroll 16") for (int t = 0; t < 16; t++) {
        const __m512i ia = _mm512_load_si512((const void *)(c + 16 * t));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), _mm512_mul_ps(s, _mm512_set1_ps(xd[t])), acc[t]);
        if (has_m) acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(xds[t]), acc[t]);
    }
}

#define Q8_TILE(c, a, b, j)                                                                        \
    do {                                                                                           \
        _tile_zero(c);                                                                             \
        _tile_loadd(a, xp + (i + (j)) * 16 * BS, BS);                                              \
        _tile_loadd(b, pk + (i + (j)) * rec, 64);                                                  \
        _tile_dpbssd(c, a, b);                                                                     \
    } while (0)

/* xz is not read: the signed codes carry the zero point. */
AI void mk_amx_q8(const uint8_t *pk, int64_t nbc, int T, const int8_t *xp, const float *xd, const float *xds, float *y,
                  int64_t n_out, uint16_t mask, int accumulate, const int G, const int has_m) {
    const int BS = 4 * G;
    const int64_t rec = G * 64 + 64 + (has_m ? 64 : 0);
    _Alignas(64) int32_t cb[4][256];
    __m512 acc[16];
    _Pragma("GCC unroll 16") for (int t = 0; t < 16; t++)
        acc[t] = accumulate && t < T ? _mm512_maskz_loadu_ps(mask, y + t * n_out) : _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= nbc; i += 4) {
        Q8_TILE(0, 4, 5, 0);
        Q8_TILE(1, 6, 7, 1);
        Q8_TILE(2, 4, 5, 2);
        Q8_TILE(3, 6, 7, 3);
        _tile_stored(0, cb[0], 64);
        _tile_stored(1, cb[1], 64);
        _tile_stored(2, cb[2], 64);
        _tile_stored(3, cb[3], 64);
        for (int j = 0; j < 4; j++) {
            const uint8_t *r = pk + (i + j) * rec;
            const int64_t o = (i + j) * 16;
            q8_epilogue(cb[j], (const float *)(r + G * 64), (const float *)(r + G * 64 + 64), xd + o, xds + o, acc, has_m);
        }
    }
    for (; i < nbc; i++) {
        Q8_TILE(0, 4, 5, 0);
        _tile_stored(0, cb[0], 64);
        const uint8_t *r = pk + i * rec;
        q8_epilogue(cb[0], (const float *)(r + G * 64), (const float *)(r + G * 64 + 64), xd + i * 16, xds + i * 16, acc,
                    has_m);
    }
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * n_out, mask, acc[t]);
}

static void mk_amx_g8(const uint8_t *pk, int64_t nbc, int T, const int8_t *xp, const int32_t *xz, const float *xd,
                      const float *xds, float *y, int64_t n_out, uint16_t mask, int acc) {
    (void)xz;
    mk_amx_q8(pk, nbc, T, xp, xd, xds, y, n_out, mask, acc, 8, 0);
}
static void mk_amx_g8m(const uint8_t *pk, int64_t nbc, int T, const int8_t *xp, const int32_t *xz, const float *xd,
                       const float *xds, float *y, int64_t n_out, uint16_t mask, int acc) {
    (void)xz;
    mk_amx_q8(pk, nbc, T, xp, xd, xds, y, n_out, mask, acc, 8, 1);
}
static void gemm_amx_q8(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok,
                        float *y, uint32_t type) {
    int G, has_m, zp;
    rf_avx512_q8_format(type, &G, &has_m, &zp);
    if (n_tok < AMX_Q8_MIN_TOK) {
        avx512_gemm_q8[type](w, rb, rq, n_out, x, n_tok, y);
        return;
    }
    amx_configure_q8(G); /* G = 8: every type installed below */
    rf_avx512_gemm_q8_with(type, w, rb, rq, n_out, x, n_tok, y, 16, has_m ? mk_amx_g8m : mk_amx_g8, 1);
    _tile_release();
}

#define GEMM_AMX_Q8(name, type)                                                                                  \
    static void name(const uint8_t *w, uint64_t rb, rf_rowq *rq, int64_t n_out, const rf_xq8 *x, int64_t n_tok, \
                     float *y) {                                                                                 \
        gemm_amx_q8(w, rb, rq, n_out, x, n_tok, y, type);                                                        \
    }
GEMM_AMX_Q8(gemm_amx_q4_0, RF_TYPE_Q4_0)
GEMM_AMX_Q8(gemm_amx_q8_0, RF_TYPE_Q8_0)
GEMM_AMX_Q8(gemm_amx_q4_k, RF_TYPE_Q4_K)
GEMM_AMX_Q8(gemm_amx_q5_k, RF_TYPE_Q5_K)
GEMM_AMX_Q8(gemm_amx_iq4_xs, RF_TYPE_IQ4_XS)

void rf_mm_kernels_amx(rf_mm_kernels *k) {
    static const uint32_t types[] = {RF_TYPE_F16, RF_TYPE_BF16};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const uint32_t t = types[i];
        if (!k->gemm_f32[t] || !k->f32[t]) return; /* the AVX-512 table is the fallback: keep it whole */
        avx512_gemm[t] = k->gemm_f32[t];
        avx512_dot[t] = k->f32[t];
    }
    k->gemm_f32[RF_TYPE_F16] = gemm_amx_f16;
    k->gemm_f32[RF_TYPE_BF16] = gemm_amx_bf16;
    static const struct {
        uint32_t type;
        rf_gemm_q8_fn fn;
    } q8[] = {{RF_TYPE_Q4_0, gemm_amx_q4_0}, {RF_TYPE_Q8_0, gemm_amx_q8_0}, {RF_TYPE_Q4_K, gemm_amx_q4_k},
              {RF_TYPE_Q5_K, gemm_amx_q5_k}, {RF_TYPE_IQ4_XS, gemm_amx_iq4_xs}};
    /* not Q6_K: its 16-element blocks halve the work per tile product while the float epilogue per
     * block stays, and its GEMM was 10% slower on tiles (docs/PERF-CPU.md section 20) */
    /* only over the AVX-512 GEMM itself: the table holds it (and its packers may run) where the CPU
     * has VNNI and VBMI, as every AMX CPU so far does; elsewhere these types keep what they had */
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512vbmi")) return;
    int G, has_m, zp;
    for (size_t i = 0; i < sizeof q8 / sizeof q8[0]; i++) {
        const uint32_t t = q8[i].type;
        if (!k->gemm_q8[t] || !rf_avx512_q8_format(t, &G, &has_m, &zp)) continue;
        avx512_gemm_q8[t] = k->gemm_q8[t];
        k->gemm_q8[t] = q8[i].fn;
    }
}
