#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "attention_simd.h"
#include "backend/cpu/cpu_features.h"
#include "core/dtype.h"
#include "core/kv_format.h"
#include "core/util.h"
#include "ops.h"

static float round_f16(float v) { return rf_fp16_to_fp32(rf_fp32_to_fp16(v)); }

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Exact f16 -> f32 widening without branches on the data (so the compiler can vectorize a row):
 * normal, subnormal, zero, inf and NaN all map as rf_fp16_to_fp32 maps them. Normals and
 * inf/NaN: shift exponent and mantissa into place and rescale by 2^-112 (the exponent bias
 * difference, applied as an exact multiply so that inf/NaN stay inf/NaN); subnormals: place the
 * mantissa under the exponent of 0.5 and subtract 0.5. */
static inline float widen_f16(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
    const float normalized = bits_f32((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    const float denormalized = bits_f32((two_w >> 17) | (126u << 23)) - 0.5f;
    return bits_f32(sign | (two_w < (1u << 27) ? f32_bits(denormalized) : f32_bits(normalized)));
}

static void widen_row_portable(const uint16_t *src, float *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = widen_f16(src[i]);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* The same widening with the F16C instruction (exact, as the portable one), 8 at a time. */
__attribute__((target("avx,f16c"))) static void widen_row_f16c(const uint16_t *src, float *dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = widen_f16(src[i]);
}
static void widen_row(const uint16_t *src, float *dst, int n) {
    if (rf_cpu_has_f16c() && __builtin_cpu_supports("avx")) widen_row_f16c(src, dst, n);
    else widen_row_portable(src, dst, n);
}
#else
static void widen_row(const uint16_t *src, float *dst, int n) { widen_row_portable(src, dst, n); }
#endif

/* Head g of cache row `slot` (kv_format.h) as f32: the cache itself when it is f32, else widened
 * (f16) or scaled (q8_0, q4_0) into buf [hd]. */
static inline const float *cache_row(const void *cache, uint32_t kv_type, int64_t slot, int kv_dim, int g, int hd,
                                     float *buf) {
    if (kv_type == RF_TYPE_F32) return (const float *)cache + slot * kv_dim + (int64_t)g * hd;
    if (kv_type == RF_TYPE_F16) {
        widen_row((const uint16_t *)cache + slot * kv_dim + (int64_t)g * hd, buf, hd);
        return buf;
    }
    const size_t rb = rf_kv_row_bytes(kv_type, kv_dim);
    rf_kv_read_row(kv_type, (const char *)cache + (size_t)slot * rb, kv_dim, (int64_t)g * hd, hd, buf);
    return buf;
}

void cpu_attention(const rf_step *step, const rf_attn_dims *d, const float *q, const void *k_cache,
                   const void *v_cache, float *out, int64_t begin, int64_t end) {
    int hd = d->head_dim, kv_dim = d->n_kv_head * hd, q_dim = d->n_head * hd;
    int group = d->n_head / d->n_kv_head;
    float *acc = rf_xmalloc((size_t)hd * 3 * sizeof(float));
    float *kbuf = acc + hd, *vbuf = kbuf + hd;
    for (int64_t r = begin; r < end; r++) {
        int t = (int)(r / d->n_head), h = (int)(r % d->n_head);
        const int32_t *bt = step->block_table + (int64_t)step->seq_row[t] * step->max_blocks;
        const float *qh = q + (int64_t)t * q_dim + (int64_t)h * hd;
        int g = h / group;
        float m = -INFINITY, l = 0.0f;
        for (int i = 0; i < hd; i++) acc[i] = 0.0f;
        for (int p = 0; p <= step->pos[t]; p++) {
            int64_t slot = (int64_t)bt[p / step->block_size] * step->block_size + p % step->block_size;
            const float *kp = cache_row(k_cache, d->kv_type, slot, kv_dim, g, hd, kbuf);
            const float *vp = cache_row(v_cache, d->kv_type, slot, kv_dim, g, hd, vbuf);
            float s = 0.0f;
            for (int i = 0; i < hd; i++) s += qh[i] * kp[i];
            s *= d->scale;
            /* Online softmax: rescale what has been accumulated when the max grows. When it does
             * not, the factor is expf(0) = 1 exactly, so skipping it changes no bit. */
            if (s > m) {
                float corr = expf(m - s); /* exp(-inf) = 0 on the first position */
                l *= corr;
                for (int i = 0; i < hd; i++) acc[i] *= corr;
                m = s;
            }
            float w = expf(s - m);
            l += w;
            for (int i = 0; i < hd; i++) acc[i] += w * vp[i];
        }
        float *o = out + (int64_t)t * q_dim + (int64_t)h * hd;
        for (int i = 0; i < hd; i++) o[i] = acc[i] / l;
    }
    free(acc);
}

/* llama.cpp's non-flash CPU attention: scores q_f16 . k_f16, softmax with the sum in double,
 * normalised probabilities rounded to f16, then sum_p p_f16 * v_f16. Two passes over the
 * positions with a buffer of one score row per call (a test mode, not the fast path). */
void cpu_attention_ggml(const rf_step *step, const rf_attn_dims *d, const float *q, const void *k_cache,
                        const void *v_cache, float *out, int64_t begin, int64_t end) {
    int hd = d->head_dim, kv_dim = d->n_kv_head * hd, q_dim = d->n_head * hd;
    int group = d->n_head / d->n_kv_head;
    float *score = NULL;
    float *buf = rf_xmalloc((size_t)hd * sizeof(float));
    int cap = 0;
    for (int64_t r = begin; r < end; r++) {
        int t = (int)(r / d->n_head), h = (int)(r % d->n_head);
        const int32_t *bt = step->block_table + (int64_t)step->seq_row[t] * step->max_blocks;
        const float *qh = q + (int64_t)t * q_dim + (int64_t)h * hd;
        int g = h / group, n_pos = step->pos[t] + 1;
        if (n_pos > cap) {
            cap = n_pos;
            score = rf_xrealloc(score, (size_t)cap * sizeof(float));
        }
        float m = -INFINITY;
        for (int p = 0; p < n_pos; p++) {
            int64_t slot = (int64_t)bt[p / step->block_size] * step->block_size + p % step->block_size;
            const float *kp = cache_row(k_cache, d->kv_type, slot, kv_dim, g, hd, buf);
            float s = 0.0f;
            for (int i = 0; i < hd; i++) s += round_f16(qh[i]) * kp[i];
            score[p] = s * d->scale;
            m = score[p] > m ? score[p] : m;
        }
        double sum = 0;
        for (int p = 0; p < n_pos; p++) sum += score[p] = expf(score[p] - m);
        float inv = (float)(1.0 / sum);
        float *o = out + (int64_t)t * q_dim + (int64_t)h * hd;
        for (int i = 0; i < hd; i++) o[i] = 0.0f;
        for (int p = 0; p < n_pos; p++) {
            int64_t slot = (int64_t)bt[p / step->block_size] * step->block_size + p % step->block_size;
            const float *vp = cache_row(v_cache, d->kv_type, slot, kv_dim, g, hd, buf);
            float w = round_f16(score[p] * inv);
            for (int i = 0; i < hd; i++) o[i] += w * vp[i];
        }
    }
    free(buf);
    free(score);
}

/* ---- SIMD levels (attention_simd.h) ------------------------------------------------------ */

/* Highest attention level the CPU has: the matmul levels' flags plus F16C (f16 caches). */
static rf_isa attn_cpu_isa(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !rf_cpu_has_f16c())
        return RF_ISA_SCALAR;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return RF_ISA_AVX512;
    return RF_ISA_AVX2;
#else
    return RF_ISA_SCALAR;
#endif
}

const rf_attn_kernels *rf_attn_kernels_at(rf_isa isa) {
    static rf_attn_kernels tab[3];
    static rf_isa have;
    static int ready; /* benign race: every thread computes the same table */
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        rf_attn_kernels k[3];
        memset(k, 0, sizeof k);
        const rf_isa h = attn_cpu_isa();
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (h >= RF_ISA_AVX2) rf_attn_kernels_avx2(&k[RF_ISA_AVX2]);
        if (h >= RF_ISA_AVX512) rf_attn_kernels_avx512(&k[RF_ISA_AVX512]);
#endif
        memcpy(tab, k, sizeof tab);
        have = h;
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return isa == RF_ISA_SCALAR || isa > have ? NULL : &tab[isa];
}

void cpu_attention_isa(rf_isa isa, const rf_step *step, const rf_attn_dims *d, const float *q, const void *k_cache,
                       const void *v_cache, float *out, int64_t begin, int64_t end) {
    const rf_attn_kernels *k = NULL;
    for (int i = isa; i > RF_ISA_SCALAR && !k; i--) k = rf_attn_kernels_at((rf_isa)i);
    (k ? k->attention : cpu_attention)(step, d, q, k_cache, v_cache, out, begin, end);
}
