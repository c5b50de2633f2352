/* attention_kv.cuh: the paged KV cache's rows on the device, shared by the decode
 * (attention_decode.cu, attention_decode_mma.cu) and prefill (attention_prefill.cu) attention kernels, twins of
 * cpu_attention (backend/cpu/attention.c).
 *
 * Common contract. q: [n_tokens][n_head * head_dim] f32; out: same shape; k_cache, v_cache:
 * [n_slots] rows of n_kv_head * head_dim elements in the row format of a.kv_type (f32, f16, q8_0
 * or q4_0: core/kv_format.h, backend.h's layout), widened to f32 on load (q8_0, q4_0: code times
 * its block's scale, exact in f32). Token t, query head h reads KV head g = h / (n_head / n_kv_head) at positions p =
 * 0..pos[t] of its sequence, slot = block_table[seq_row[t] * max_blocks + p / block_size] *
 * block_size + p % block_size. pos, seq_row and block_table are read from device memory (never
 * from the host), so a captured graph replays with new data. Only visible positions are read:
 * cache slots past a sequence's end may hold anything.
 * out[t,h] = sum_p softmax_p(scale * q.k_p) v_p, with an online softmax (running max and sum),
 * so no score matrix is stored. head_dim <= RF_GPU_ATTN_MAX_HEAD_DIM. Results differ from the
 * CPU (which reads the same cached values) by summation order only (~1e-6 relative). NaN in a
 * visible q/k/v makes the outputs that depend on it NaN (as on the CPU). No alignment
 * requirement: 16-byte loads are used when the caches are 16-byte aligned and head_dim % 8 == 0,
 * narrower ones otherwise. */
#ifndef RF_ATTENTION_KV_CUH
#define RF_ATTENTION_KV_CUH

#include "core/dtype.h"
#include "core/kv_format.h"
#include "gpu_port.h"
#include "kernels.h"
#include "kv_quant.cuh"

static __device__ __forceinline__ int64_t att_slot(const int32_t *bt, int block_size, int p) {
    return (int64_t)bt[p / block_size] * block_size + p % block_size;
}

/* The q8_0 cache's element (kv_format.h): one int8 code, so a kv_q8 pointer steps one code. */
struct kv_q8 {
    int8_t q;
};
/* The q4_0 cache's byte (kv_format.h): two 4-bit codes, so a kv_q4 pointer steps two elements. */
struct kv_q4 {
    uint8_t b;
};

/* Row geometry of a cache of element type T on the device (kv_format.h; rf_kv_row_bytes is the
 * host's): the bytes of a row (an int: a 32-bit factor keeps the row address one wide
 * multiply-add), the T units before element e of a row (elems: e, or e / 2 for q4_0's bytes of two
 * codes; e a multiple of 8 there), and, from the address of element e (for q4_0 the byte
 * holding it), the byte offset to the binary16 scale of e's block (0 for the float formats, which
 * have none). Q8 / Q4: whether T is q8_0 / q4_0. */
template <typename T> struct kv_fmt {
    enum { Q8 = 0, Q4 = 0 };
    static __host__ __device__ __forceinline__ int row_bytes(int kv_dim) { return kv_dim * (int)sizeof(T); }
    template <typename I> static __host__ __device__ __forceinline__ I elems(I e) { return e; }
    static __device__ __forceinline__ int scale_off(int kv_dim, int e) { return (void)kv_dim, (void)e, 0; }
};
template <> struct kv_fmt<kv_q8> {
    enum { Q8 = 1, Q4 = 0 };
    static __host__ __device__ __forceinline__ int row_bytes(int kv_dim) { return (kv_dim + kv_dim / 16 + 15) & ~15; }
    template <typename I> static __host__ __device__ __forceinline__ I elems(I e) { return e; }
    static __device__ __forceinline__ int scale_off(int kv_dim, int e) { return kv_dim - e + (e / 32) * 2; }
};
template <> struct kv_fmt<kv_q4> {
    enum { Q8 = 0, Q4 = 1 };
    static __host__ __device__ __forceinline__ int row_bytes(int kv_dim) { return (kv_dim / 2 + kv_dim / 16 + 15) & ~15; }
    template <typename I> static __host__ __device__ __forceinline__ I elems(I e) { return e / 2; }
    static __device__ __forceinline__ int scale_off(int kv_dim, int e) { return kv_dim / 2 - e / 2 + (e / 32) * 2; }
};
/* Address of element e of row `slot` of a cache of T (q4_0: of the byte holding it). */
template <typename T>
static __device__ __forceinline__ const char *kv_at(const void *cache, int64_t slot, int kv_dim, int e) {
    return (const char *)cache + slot * kv_fmt<T>::row_bytes(kv_dim) + kv_fmt<T>::elems(e) * (int)sizeof(T);
}

/* One cache element as f32 (exact for every format): p its address (kv_at), soff kv_fmt::scale_off
 * of it, e its index in the row (q4_0: which code of its word). */
template <typename T> static __device__ __forceinline__ float kv_ld1(const char *p, int soff, int e);
template <> __device__ __forceinline__ float kv_ld1<float>(const char *p, int, int) { return *(const float *)p; }
template <> __device__ __forceinline__ float kv_ld1<__half>(const char *p, int, int) {
    return __half2float(*(const __half *)p);
}
template <> __device__ __forceinline__ float kv_ld1<kv_q8>(const char *p, int soff, int) {
    return (float)*(const int8_t *)p * __half2float(*(const __half *)(p + soff));
}
template <> __device__ __forceinline__ float kv_ld1<kv_q4>(const char *p, int soff, int e) {
    const uint32_t w = *(const uint32_t *)(p - (e & 7) / 2); /* the word of e's group of eight */
    return (float)((int)(w >> kvq4_shift(e & 7) & 15u) - 8) * __half2float(*(const __half *)(p + soff));
}
/* Element e of row `slot` as f32. */
template <typename T> static __device__ __forceinline__ float kv_get1(const void *cache, int64_t slot, int kv_dim, int e) {
    return kv_ld1<T>(kv_at<T>(cache, slot, kv_dim, e), kv_fmt<T>::scale_off(kv_dim, e), e);
}
/* Eight consecutive elements in their stored form (one 16-byte load for f16, two for f32, an
 * 8-byte load and the block's scale for q8_0, a 4-byte one and the scale for q4_0; p aligned to
 * 16 bytes, 8 for q8_0, 4 for q4_0; the eight share one block), widened by kv_cvt8 when used, so
 * several loads can be in flight first. */
template <typename T> struct kv_raw8;
template <> struct kv_raw8<float> { float4 a, b; };
template <> struct kv_raw8<__half> { uint4 u; };
template <> struct kv_raw8<kv_q8> { uint2 q; __half d; };
template <> struct kv_raw8<kv_q4> { uint32_t q; __half d; };
static __device__ __forceinline__ void kv_zero8(kv_raw8<float> &r) { r.a = r.b = make_float4(0.f, 0.f, 0.f, 0.f); }
static __device__ __forceinline__ void kv_zero8(kv_raw8<__half> &r) { r.u = make_uint4(0u, 0u, 0u, 0u); }
static __device__ __forceinline__ void kv_zero8(kv_raw8<kv_q8> &r) {
    r.q = make_uint2(0u, 0u);
    r.d = __float2half(0.0f);
}
static __device__ __forceinline__ void kv_zero8(kv_raw8<kv_q4> &r) {
    r.q = 0x88888888u; /* code 8: zero */
    r.d = __float2half(0.0f);
}
/* A load of cached K/V, plain or (S) streaming: CUDA's ld.global.cs, evict-first in L1 and L2, as
 * the weights are loaded (matmul_decoders.cuh, MM_LDW). The long-context kernels stream: their
 * K/V, hundreds of MB per step, would otherwise push out of the L2 what the step reuses. Short
 * contexts load plainly: there a layer's rows stay in the L2 from one step to the next. */
template <bool S, typename V> static __device__ __forceinline__ V kv_ldv(const void *p) {
#if !RF_GPU_HIP
    if (S) return __ldcs((const V *)p);
#endif
    return *(const V *)p;
}
template <bool S = false> static __device__ __forceinline__ void kv_load8(kv_raw8<float> &r, const char *p, int) {
    r.a = kv_ldv<S, float4>(p);
    r.b = kv_ldv<S, float4>(p + 16);
}
template <bool S = false> static __device__ __forceinline__ void kv_load8(kv_raw8<__half> &r, const char *p, int) {
    r.u = kv_ldv<S, uint4>(p);
}
template <bool S = false> static __device__ __forceinline__ void kv_load8(kv_raw8<kv_q8> &r, const char *p, int soff) {
    r.q = kv_ldv<S, uint2>(p);
    r.d = kv_ldv<S, __half>(p + soff);
}
template <bool S = false> static __device__ __forceinline__ void kv_load8(kv_raw8<kv_q4> &r, const char *p, int soff) {
    r.q = kv_ldv<S, uint32_t>(p);
    r.d = kv_ldv<S, __half>(p + soff);
}
static __device__ __forceinline__ void kv_cvt8(const kv_raw8<float> &r, float *x) {
    x[0] = r.a.x; x[1] = r.a.y; x[2] = r.a.z; x[3] = r.a.w;
    x[4] = r.b.x; x[5] = r.b.y; x[6] = r.b.z; x[7] = r.b.w;
}
static __device__ __forceinline__ void kv_cvt8(const kv_raw8<__half> &r, float *x) {
    const uint32_t w[4] = {r.u.x, r.u.y, r.u.z, r.u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&w[i]));
        x[2 * i] = f.x;
        x[2 * i + 1] = f.y;
    }
}
/* q8_0 codes to f32 without the int-to-float converter (a fraction of the FP32 rate, and at
 * long contexts the decode loop converts every cached element): the biased byte (code + 128)
 * becomes the low mantissa byte of 2^23 (one byte permute), minus 2^23 + 128 gives the code
 * exactly, times the scale exactly. */
static __device__ __forceinline__ void kv_cvt8(const kv_raw8<kv_q8> &r, float *x) {
    const float d = __half2float(r.d);
    const uint32_t w[2] = {r.q.x ^ 0x80808080u, r.q.y ^ 0x80808080u};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint32_t bits = __byte_perm(w[i / 4], 0x4B000000u, 0x7540u | (uint32_t)(i % 4));
        x[i] = (__uint_as_float(bits) - 8388736.0f) * d;
    }
}
/* q4_0 the same way: one shift and mask put the codes of elements 2i and 2i + 1 in the low bits
 * of the word's halves (kv_format.h's order), each becomes the low mantissa bits of 2^23, minus
 * 2^23 + 8 gives code - 8 exactly, times the scale exactly. */
static __device__ __forceinline__ void kv_cvt8(const kv_raw8<kv_q4> &r, float *x) {
    const float d = __half2float(r.d);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t t = (r.q >> (4 * i)) & 0x000F000Fu;
        x[2 * i] = (__uint_as_float(0x4B000000u | (t & 0xFFFFu)) - 8388616.0f) * d;
        x[2 * i + 1] = (__uint_as_float(0x4B000000u | (t >> 16)) - 8388616.0f) * d;
    }
}

#if RF_GPU_HIP
#define ATT_SHFL_IDX(v, src) __shfl((v), (src))
#else
#define ATT_SHFL_IDX(v, src) __shfl_sync(0xffffffffu, (v), (src))
#endif
/* Eight f32 values in the cache's form (f16: rounded to nearest even, as rope.cu stores them;
 * q8_0: below). */
static __device__ __forceinline__ void kv_pack8(kv_raw8<float> &r, const float *x) {
    r.a = make_float4(x[0], x[1], x[2], x[3]);
    r.b = make_float4(x[4], x[5], x[6], x[7]);
}
static __device__ __forceinline__ void kv_pack8(kv_raw8<__half> &r, const float *x) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __half2 h = __floats2half2_rn(x[2 * i], x[2 * i + 1]);
        w[i] = *reinterpret_cast<const uint32_t *>(&h);
    }
    r.u = make_uint4(w[0], w[1], w[2], w[3]);
}
static __device__ __forceinline__ void kv_store8(float *p, const kv_raw8<float> &r) {
    ((float4 *)p)[0] = r.a;
    ((float4 *)p)[1] = r.b;
}
static __device__ __forceinline__ void kv_store8(__half *p, const kv_raw8<__half> &r) { *(uint4 *)p = r.u; }
/* q8_0: the 32 elements of a block are held by 4 consecutive lanes (8 each, the first lane's index
 * a multiple of 4), all of the warp calling together; the block's codes and scale are computed as
 * rope.cu's kv_store_q8_kernel and rf_kv_write_row compute them (amax, d = amax / 127, binary16
 * d, id = 1 / d, roundf(x * id) clamped; non-finite element or overflowing scale: q = 0, d = NaN). */
static __device__ __forceinline__ void kv_pack8(kv_raw8<kv_q8> &r, const float *x) {
    float amax = 0.0f;
    int bad = 0;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        amax = fmaxf(amax, fabsf(x[e]));
        bad |= kvq_nonfinite(x[e]);
    }
    for (int off = 1; off < 4; off <<= 1) {
        amax = fmaxf(amax, RF_SHFL_XOR(amax, off));
        bad |= RF_SHFL_XOR(bad, off);
    }
    const kvq_scale sc = kvq_scale_of(amax, bad);
    uint32_t w[2] = {0u, 0u};
#pragma unroll
    for (int e = 0; e < 8; e++) w[e / 4] |= (uint32_t)kvq_code(x[e], sc) << (8 * (e % 4));
    r.q = make_uint2(w[0], w[1]);
    r.d = __ushort_as_half(sc.bits);
}
/* Stores a packed row piece at p (soff: its scale's offset, kv_fmt::scale_off); q8_0: the block's
 * scale by its first lane only (scale_lane). */
static __device__ __forceinline__ void kv_store8(char *p, int, const kv_raw8<float> &r, bool) { kv_store8((float *)p, r); }
static __device__ __forceinline__ void kv_store8(char *p, int, const kv_raw8<__half> &r, bool) { kv_store8((__half *)p, r); }
static __device__ __forceinline__ void kv_store8(char *p, int soff, const kv_raw8<kv_q8> &r, bool scale_lane) {
    *(uint2 *)p = r.q;
    if (scale_lane) *(__half *)(p + soff) = r.d;
}
/* q4_0: kv_pack8's q8_0 contract (4 consecutive lanes of 8 elements per block), with the q4_0 rule
 * of kv_quant.cuh (the first element of the largest |x| over the lanes in element order). */
static __device__ __forceinline__ void kv_pack8(kv_raw8<kv_q4> &r, const float *x) {
    const int li = (int)(threadIdx.x % 4u);
    kvq4_max c = {-1.0f, 0.0f, 0};
    int bad = 0;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const kvq4_max o = {fabsf(x[e]), x[e], 8 * li + e};
        if (o.a > c.a) c = o;
        bad |= kvq_nonfinite(x[e]);
    }
    for (int off = 1; off < 4; off <<= 1) {
        const kvq4_max o = {RF_SHFL_XOR(c.a, off), RF_SHFL_XOR(c.m, off), RF_SHFL_XOR(c.i, off)};
        if (kvq4_better(c, o)) c = o;
        bad |= RF_SHFL_XOR(bad, off);
    }
    const kvq_scale sc = kvq4_scale_of(c.a, c.m, bad);
    uint32_t w = 0u;
#pragma unroll
    for (int e = 0; e < 8; e++) w |= kvq4_code(x[e], sc) << kvq4_shift(e);
    r.q = w;
    r.d = __ushort_as_half(sc.bits);
}
static __device__ __forceinline__ void kv_store8(char *p, int soff, const kv_raw8<kv_q4> &r, bool scale_lane) {
    *(uint32_t *)p = r.q;
    if (scale_lane) *(__half *)(p + soff) = r.d;
}

static inline int bad_kv_type(uint32_t t) { return !rf_kv_type_ok(t); }
static inline int invalid_value(void) {
#if RF_GPU_HIP
    return (int)hipErrorInvalidValue;
#else
    return (int)cudaErrorInvalidValue;
#endif
}

#endif
