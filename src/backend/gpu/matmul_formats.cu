/* matmul_formats.cu: the weight formats' host-facing side. The device layouts (X8, S, H: rows
 * rearranged so that a lane's unit is one wide load; matmul_decoders.cuh) and their repacking on
 * the device at load time (rf_gpu_mm_repack), the bytes of a row in any format, and the decoders
 * and int8 unit formats run on the host (rf_gpu_mm_host_decode, rf_gpu_mm_host_qdot), where the
 * tests check them against core/quant.c without a GPU. Contracts: matmul_gpu.h. */
#include "matmul_common.cuh"

/* ---- Weight repacking (device layouts: X8, see DecQ4_0X8; IQ4_XS's S, DecIQ4_XSS; Q5_K's H,
 * DecQ5_KH) ------------------------------------------------------------------------------- */

/* The device-layout type of `type` for rows of n_in elements, or 0 when it has none: Q4_0 / Q8_0 /
 * IQ4_NL with n_in % 256 == 0, Q6_K, IQ4_XS and Q5_K always (whole superblocks). */
static uint32_t layout_type(uint32_t type, int64_t n_in) {
    if (n_in <= 0 || n_in % 256) return 0;
    switch (type) {
    case RF_TYPE_Q4_0: case RF_TYPE_Q8_0: case RF_TYPE_Q6_K: case RF_TYPE_IQ4_NL: case RF_TYPE_IQ4_XS:
    case RF_TYPE_Q5_K:
        return type | RF_GPU_MM_LAYOUT;
    default: return 0;
    }
}

/* The rearranged groups: G::E elements of a row (8 blocks, 8 superblocks, or IQ4_XS's one
 * superblock), G::B bytes (a multiple of sizeof(G::Word)), rearranged by G::run(src, dst) (no
 * overlap). */
struct X8GroupQ4_0 {
    enum { E = 256, B = 144 };
    typedef uint4 Word;
    static HD void run(const uint8_t *src, uint8_t *dst) { x8_group(src, dst, 18); }
};
struct X8GroupQ8_0 {
    enum { E = 256, B = 272 };
    typedef uint4 Word;
    static HD void run(const uint8_t *src, uint8_t *dst) { x8_group(src, dst, 34); }
};
struct X8GroupQ6_K {
    enum { E = 2048, B = 1680 };
    typedef uint4 Word;
    static HD void run(const uint8_t *src, uint8_t *dst) { q6_k_x8_group(src, dst); }
};
/* k_repack_q6_k_rows: dst (rows of dst_rb bytes) = the X8 layout of src (GGUF rows of nsb
 * superblocks, src_rb bytes), partial last groups included; one thread per group of a row. */
__global__ void k_repack_q6_k_rows(const uint8_t *src, uint8_t *dst, int64_t n_out, int64_t src_rb, int64_t dst_rb,
                                   int nsb) {
    const int gpr = (nsb + 7) / 8;
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= n_out * gpr) return;
    const int64_t r = g / gpr;
    const int i = (int)(g % gpr), m = nsb - 8 * i < 8 ? nsb - 8 * i : 8;
    q6_k_x8_group_m(src + r * src_rb + (int64_t)i * 8 * 210, dst + r * dst_rb + (int64_t)i * 1680, m);
}
struct X8GroupIQ4_NL {
    enum { E = 256, B = 144 };
    typedef uint4 Word;
    static HD void run(const uint8_t *src, uint8_t *dst) { iq4_nl_x8_group(src, dst); }
};
struct HGroupQ5_K {
    enum { E = 256, B = 176 };
    typedef uint4 Word;
    static HD void run(const uint8_t *src, uint8_t *dst) { q5_k_h_block(src, dst); }
};
struct SGroupIQ4_XS {
    enum { E = 256, B = 136 };
    typedef uint2 Word;
    static HD void run(const uint8_t *src, uint8_t *dst) { iq4_xs_s_block(src, dst); }
};

/* k_repack_x8: w (16-byte aligned) holds ngroups groups of G; each thread rewrites one in place
 * from a copy in local memory, so groups never overlap in time. Any grid covering ngroups
 * threads. */
template <class G> __global__ void k_repack_x8(uint8_t *w, int64_t ngroups) {
    typedef typename G::Word W;
    enum { NW = G::B / sizeof(W) };
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= ngroups) return;
    W *p = (W *)(w + g * G::B);
    W src[NW], dst[NW];
    for (int i = 0; i < NW; i++) src[i] = p[i];
    G::run((const uint8_t *)src, (uint8_t *)dst);
    for (int i = 0; i < NW; i++) p[i] = dst[i];
}
template <class G> static void repack_launch(rf_gpu_matmul_ctx *ctx, void *w, int64_t n_out, int64_t n_in) {
    const int64_t ngroups = n_out * (n_in / G::E);
    k_repack_x8<G><<<(unsigned)((ngroups + 127) / 128), 128, 0, ctx->stream>>>((uint8_t *)w, ngroups);
}
template <class G> static void repack_host(const void *src, void *dst, int64_t n_in) {
    for (int64_t g = 0; g < n_in / G::E; g++) G::run((const uint8_t *)src + g * G::B, (uint8_t *)dst + g * G::B);
}

extern "C" uint32_t rf_gpu_mm_repack_type(const rf_gpu_matmul_ctx *ctx, uint32_t type, int64_t n_in) {
    const uint32_t xt = ctx && ctx->repack ? layout_type(type, n_in) : 0;
    return xt ? xt : type;
}

extern "C" int64_t rf_gpu_mm_row_bytes(uint32_t type, int64_t n_in) {
    if (n_in <= 0) return -1;
    if (type == (RF_TYPE_Q6_K | RF_GPU_MM_LAYOUT)) return n_in % 256 ? -1 : mm_row_bytes<DecQ6_KX8>(n_in);
    if (type & RF_GPU_MM_LAYOUT) {
        if (!layout_type(type & ~RF_GPU_MM_LAYOUT, n_in)) return -1;
        type &= ~RF_GPU_MM_LAYOUT; /* the other device layouts keep GGUF's bytes per row */
    }
    uint64_t rb = 0;
    return rf_row_bytes(type, (uint64_t)n_in, &rb) && rb <= (uint64_t)INT64_MAX ? (int64_t)rb : -1;
}

extern "C" int rf_gpu_mm_repack(rf_gpu_matmul_ctx *ctx, uint32_t type, const void *src, void *dst, int64_t n_out,
                                int64_t n_in, uint32_t *out_type) {
    if (!ctx || !out_type || n_out < 0 || n_in < 0 || (n_out > 0 && (!src || !dst))) {
        rf_set_error("gpu matmul: bad repack arguments");
        return -1;
    }
    *out_type = type;
    const uint32_t xt = rf_gpu_mm_repack_type(ctx, type, n_in);
    if (xt == type || n_out == 0) return 0;
    const int64_t src_rb = rf_gpu_mm_row_bytes(type, n_in), dst_rb = rf_gpu_mm_row_bytes(xt, n_in);
    if ((uintptr_t)src % 16 || (uintptr_t)dst % 16 || (src == dst) != (src_rb == dst_rb)) {
        rf_set_error("gpu matmul: repack of %s to %s: %s", mm_type_name(type), mm_type_name(xt),
                     (uintptr_t)src % 16 || (uintptr_t)dst % 16 ? "pointers not 16-byte aligned"
                     : src_rb != dst_rb                         ? "needs a separate destination (longer rows)"
                                                                : "rearranges in place (dst must be src)");
        return -1;
    }
    if (src_rb != dst_rb) { /* Q6_K rows ending in a partial group */
        const int nsb = (int)(n_in / 256);
        const int64_t threads = n_out * ((nsb + 7) / 8);
        k_repack_q6_k_rows<<<(unsigned)((threads + 127) / 128), 128, 0, ctx->stream>>>(
            (const uint8_t *)src, (uint8_t *)dst, n_out, src_rb, dst_rb, nsb);
    } else {
        switch (type) {
        case RF_TYPE_Q4_0: repack_launch<X8GroupQ4_0>(ctx, dst, n_out, n_in); break;
        case RF_TYPE_Q8_0: repack_launch<X8GroupQ8_0>(ctx, dst, n_out, n_in); break;
        case RF_TYPE_Q6_K: repack_launch<X8GroupQ6_K>(ctx, dst, n_out, n_in); break;
        case RF_TYPE_IQ4_NL: repack_launch<X8GroupIQ4_NL>(ctx, dst, n_out, n_in); break;
        case RF_TYPE_Q5_K: repack_launch<HGroupQ5_K>(ctx, dst, n_out, n_in); break;
        default: repack_launch<SGroupIQ4_XS>(ctx, dst, n_out, n_in); break;
        }
    }
    if (mm_check(gpuGetLastError(), "repack launch")) return -1;
    *out_type = xt;
    return 0;
}

extern "C" uint32_t rf_gpu_mm_host_repack(uint32_t type, const void *src, void *dst, int64_t n_in) {
    const uint32_t xt = layout_type(type, n_in);
    if (!xt) return 0;
    switch (type) {
    case RF_TYPE_Q4_0: repack_host<X8GroupQ4_0>(src, dst, n_in); break;
    case RF_TYPE_Q8_0: repack_host<X8GroupQ8_0>(src, dst, n_in); break;
    case RF_TYPE_Q6_K: {
        const int nsb = (int)(n_in / 256);
        for (int i = 0; 8 * i < nsb; i++)
            q6_k_x8_group_m((const uint8_t *)src + (int64_t)i * 8 * 210, (uint8_t *)dst + (int64_t)i * 1680,
                            nsb - 8 * i < 8 ? nsb - 8 * i : 8);
        break;
    }
    case RF_TYPE_IQ4_NL: repack_host<X8GroupIQ4_NL>(src, dst, n_in); break;
    case RF_TYPE_Q5_K: repack_host<HGroupQ5_K>(src, dst, n_in); break;
    default: repack_host<SGroupIQ4_XS>(src, dst, n_in); break;
    }
    return xt;
}

/* ---- Host-side decoder check (no GPU needed) --------------------------------------------- */

template <class D> static void host_decode(const uint8_t *row, int64_t n_in, float *out) {
    for (int64_t k = 0; k < n_in / D::E; k++) D::dec(row + (k / D::C) * D::BB, (int)(k % D::C), out + k * D::E);
}

extern "C" int rf_gpu_mm_host_decode(uint32_t type, const void *row_v, int64_t n_in, float *out, int vector) {
    const uint8_t *row = (const uint8_t *)row_v;
    switch (type) {
    case RF_TYPE_F32: vector ? host_decode<DecF32x4>(row, n_in, out) : host_decode<DecF32x1>(row, n_in, out); return 0;
    case RF_TYPE_F16: vector ? host_decode<DecF16x8>(row, n_in, out) : host_decode<DecF16x1>(row, n_in, out); return 0;
    case RF_TYPE_BF16:
        vector ? host_decode<DecBF16x8>(row, n_in, out) : host_decode<DecBF16x1>(row, n_in, out);
        return 0;
    case RF_TYPE_Q4_0: host_decode<DecQ4_0>(row, n_in, out); return 0;
    case RF_TYPE_Q4_1: host_decode<DecQ4_1>(row, n_in, out); return 0;
    case RF_TYPE_Q5_0: host_decode<DecQ5_0>(row, n_in, out); return 0;
    case RF_TYPE_Q5_1: host_decode<DecQ5_1>(row, n_in, out); return 0;
    case RF_TYPE_Q8_0: host_decode<DecQ8_0>(row, n_in, out); return 0;
    case RF_TYPE_Q4_0 | RF_GPU_MM_LAYOUT: host_decode<DecQ4_0X8>(row, n_in, out); return 0;
    case RF_TYPE_Q8_0 | RF_GPU_MM_LAYOUT: host_decode<DecQ8_0X8>(row, n_in, out); return 0;
    case RF_TYPE_Q6_K | RF_GPU_MM_LAYOUT: host_decode<DecQ6_KX8>(row, n_in, out); return 0;
    case RF_TYPE_IQ4_NL | RF_GPU_MM_LAYOUT: host_decode<DecIQ4_NLX8>(row, n_in, out); return 0;
    case RF_TYPE_IQ4_XS | RF_GPU_MM_LAYOUT: host_decode<DecIQ4_XSS>(row, n_in, out); return 0;
    case RF_TYPE_Q5_K | RF_GPU_MM_LAYOUT: host_decode<DecQ5_KH>(row, n_in, out); return 0;
    case RF_TYPE_Q2_K: host_decode<DecQ2_K>(row, n_in, out); return 0;
    case RF_TYPE_Q3_K: host_decode<DecQ3_K>(row, n_in, out); return 0;
    case RF_TYPE_Q4_K: host_decode<DecQ4_K>(row, n_in, out); return 0;
    case RF_TYPE_Q5_K: host_decode<DecQ5_K>(row, n_in, out); return 0;
    case RF_TYPE_Q6_K: host_decode<DecQ6_K>(row, n_in, out); return 0;
    case RF_TYPE_IQ4_NL: host_decode<DecIQ4_NL>(row, n_in, out); return 0;
    case RF_TYPE_IQ4_XS: host_decode<DecIQ4_XS>(row, n_in, out); return 0;
    default: rf_set_error("gpu matmul: weight type %s is not supported", mm_type_name(type)); return -1;
    }
}

/* Host emulation of the int8-activation path for one row: x quantized as k_qx does (no norm),
 * then the unit loads / dots of k_mvq in unit order, summed in double. */
template <class V> static double host_qdot(const uint8_t *row, int64_t n_in, const int8_t *xq, const float2 *xd) {
    double s = 0;
    const int64_t nunits = n_in / (V::QK / V::UPB);
    for (int64_t k = 0; k < nunits; k++) {
        typename V::Raw r;
        const int64_t blk = k / V::UPB;
        V::load(row + blk * V::BB, (int)(k % V::UPB), r);
        s += V::template dot<0>(r, (int)(k % V::UPB), xq + blk * V::QK, xd + blk * (V::QK / 32));
    }
    return s;
}

extern "C" int rf_gpu_mm_host_qdot(uint32_t type, const void *row_v, int64_t n_in, const float *x, double *out) {
    if (n_in <= 0 || n_in % 32) return -1;
    int8_t *xq = (int8_t *)aligned_alloc(16, (size_t)((n_in + 15) / 16 * 16));
    float2 *xd = (float2 *)malloc(sizeof(float2) * (size_t)(n_in / 32));
    if (!xq || !xd) {
        free(xq);
        free(xd);
        return -1;
    }
    for (int64_t b = 0; b < n_in / 32; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
        const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        int sq = 0;
        for (int i = 0; i < 32; i++) {
            int q = (int)rintf(x[32 * b + i] * id);
            q = q > 127 ? 127 : (q < -127 ? -127 : q);
            xq[32 * b + i] = (int8_t)q;
            sq += q;
        }
        xd[b] = make_float2(d, d * (float)sq);
    }
    const uint8_t *row = (const uint8_t *)row_v;
    int rc = 0;
    switch (type) {
    case RF_TYPE_Q4_0: *out = host_qdot<VQ4_0>(row, n_in, xq, xd); break;
    case RF_TYPE_Q4_1: *out = host_qdot<VQ4_1>(row, n_in, xq, xd); break;
    case RF_TYPE_Q5_0: *out = host_qdot<VQ5_0>(row, n_in, xq, xd); break;
    case RF_TYPE_Q5_1: *out = host_qdot<VQ5_1>(row, n_in, xq, xd); break;
    case RF_TYPE_Q8_0: *out = host_qdot<VQ8_0>(row, n_in, xq, xd); break;
    case RF_TYPE_Q4_0 | RF_GPU_MM_LAYOUT: if (n_in % 256) rc = -1; else *out = host_qdot<VQ4_0X8>(row, n_in, xq, xd); break;
    case RF_TYPE_Q8_0 | RF_GPU_MM_LAYOUT: if (n_in % 256) rc = -1; else *out = host_qdot<VQ8_0X8>(row, n_in, xq, xd); break;
    case RF_TYPE_Q6_K | RF_GPU_MM_LAYOUT: if (n_in % 256) rc = -1; else *out = host_qdot<VQ6_KX8>(row, n_in, xq, xd); break;
    case RF_TYPE_IQ4_NL | RF_GPU_MM_LAYOUT: if (n_in % 256) rc = -1; else *out = host_qdot<VIQ4_NLX8>(row, n_in, xq, xd); break;
    case RF_TYPE_IQ4_XS | RF_GPU_MM_LAYOUT: if (n_in % 256) rc = -1; else *out = host_qdot<VIQ4_XSS>(row, n_in, xq, xd); break;
    case RF_TYPE_Q5_K | RF_GPU_MM_LAYOUT: if (n_in % 256) rc = -1; else *out = host_qdot<VQ5_KH>(row, n_in, xq, xd); break;
    case RF_TYPE_Q4_K: if (n_in % 256) rc = -1; else *out = host_qdot<VQ4_K>(row, n_in, xq, xd); break;
    case RF_TYPE_Q5_K: if (n_in % 256) rc = -1; else *out = host_qdot<VQ5_K>(row, n_in, xq, xd); break;
    case RF_TYPE_Q6_K: if (n_in % 256) rc = -1; else *out = host_qdot<VQ6_K>(row, n_in, xq, xd); break;
    case RF_TYPE_Q2_K: if (n_in % 256) rc = -1; else *out = host_qdot<VQ2_K>(row, n_in, xq, xd); break;
    case RF_TYPE_Q3_K: if (n_in % 256) rc = -1; else *out = host_qdot<VQ3_K>(row, n_in, xq, xd); break;
    case RF_TYPE_IQ4_NL: *out = host_qdot<VIQ4_NL>(row, n_in, xq, xd); break;
    case RF_TYPE_IQ4_XS: if (n_in % 256) rc = -1; else *out = host_qdot<VIQ4_XS>(row, n_in, xq, xd); break;
    default: rc = -1; break;
    }
    free(xq);
    free(xd);
    return rc;
}

extern "C" int rf_gpu_mm_host_iq4_dot(int sign, uint32_t c, int32_t xl, int32_t xh) {
#ifndef RF_GPU_HIP
    if (sign) return mm_iq4_dot_word_sign(c, xl, xh, 0);
#else
    (void)sign; /* no sign mode on HIP: its lookup either way */
#endif
    return mm_iq4_dot_word_pair(c, xl, xh, 0);
}
