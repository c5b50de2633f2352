/* matmul_decoders.cuh: the block decoders of the matmul sources (included once, by
 * matmul_common.cuh).
 *
 * The GPU twins of core/quant.c's dequantizers: struct Dec<T> decodes one chunk of a weight row into
 * f32, bit-exact with quant.c (host and device: rf_gpu_mm_host_decode checks them without a GPU);
 * Qd<D> is the same decoder split into integer values and per-group scales for the f32 matvec
 * kernels. The device-only X8 layouts (rf_gpu_mm_repack) are decoded here too. Needs gpu_port.h and
 * the MM_* definitions of matmul_common.cuh. */

/* ---- Scalar helpers --------------------------------------------------------------------- */

/* IEEE half bits -> f32, exact (hardware conversion on the device, bit arithmetic on the host). */
HD float mm_h2f(uint16_t h) {
#ifdef MM_DEVICE_PASS
    return __half2float(__ushort_as_half(h));
#else
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int e = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            e--;
        }
        bits = sign | ((uint32_t)e << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
#endif
}

HD float mm_bits2f(uint32_t u) {
#ifdef MM_DEVICE_PASS
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

HD float mm_bf2f(uint16_t h) { return mm_bits2f((uint32_t)h << 16); }

/* Loads of weight bytes (every use of the helpers below). A decode step reads each weight once,
 * gigabytes through a 50 MB L2, so on CUDA they are streaming loads (ld.global.cs: evict-first in
 * L1 and L2): they recycle their own lines instead of evicting what the step reuses (the K/V
 * cache, activations, norm gains, the kernels' code). Plain loads on the host and on HIP. */
#if defined(MM_DEVICE_PASS) && !defined(RF_GPU_HIP)
#define MM_LDW(T, p) (__isGlobal(p) ? __ldcs((const T *)(p)) : *(const T *)(p))
#else
#define MM_LDW(T, p) (*(const T *)(p))
#endif

/* `a2`: address 2-byte aligned, `a4`: 4, `a8`: 8, `a16`: 16. Out: little-endian 32-bit words. */
HD uint16_t ld16(const uint8_t *p) { return MM_LDW(unsigned short, p); }
HD uint32_t ld32_a2(const uint8_t *p) { return (uint32_t)ld16(p) | ((uint32_t)ld16(p + 2) << 16); }
HD uint32_t ld32_a4(const uint8_t *p) { return MM_LDW(unsigned int, p); }

template <int NB> HD void ldw_a2(const uint8_t *p, uint32_t *out) {
MM_UNROLL
    for (int i = 0; i < NB / 4; i++) out[i] = ld32_a2(p + 4 * i);
}
template <int NB> HD void ldw_a4(const uint8_t *p, uint32_t *out) {
MM_UNROLL
    for (int i = 0; i < NB / 4; i++) out[i] = ld32_a4(p + 4 * i);
}
template <int NB> HD void ldw_a8(const uint8_t *p, uint32_t *out) {
MM_UNROLL
    for (int i = 0; i < NB / 8; i++) {
        const uint2 v = MM_LDW(uint2, p + 8 * i);
        out[2 * i] = v.x;
        out[2 * i + 1] = v.y;
    }
}
template <int NB> HD void ldw_a16(const uint8_t *p, uint32_t *out) {
MM_UNROLL
    for (int i = 0; i < NB / 16; i++) {
        const uint4 v = MM_LDW(uint4, p + 16 * i);
        out[4 * i] = v.x;
        out[4 * i + 1] = v.y;
        out[4 * i + 2] = v.z;
        out[4 * i + 3] = v.w;
    }
}
/* Byte j of a little-endian word array (j must be a compile-time constant after unrolling: a
 * run-time index would move the array to local memory; use byte_rt for those). */
HD uint32_t byte_of(const uint32_t *w, int j) { return (w[j >> 2] >> (8 * (j & 3))) & 0xffu; }
/* Byte j (run-time, 0..11) of the 12 bytes in words w0, w1, w2. */
HD uint32_t byte_rt(uint32_t w0, uint32_t w1, uint32_t w2, int j) {
    const uint32_t w = j < 4 ? w0 : (j < 8 ? w1 : w2);
    return (w >> (8 * (j & 3))) & 0xffu;
}

/* Bytes of {y, x} (x = bytes 0..3, y = 4..7) picked by the selector's nibbles 0..3, each below 8
 * (CUDA's __byte_perm, one PRMT; the host computes the same). */
HD uint32_t mm_byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#ifdef MM_DEVICE_PASS
    return __byte_perm(x, y, s);
#else
    const uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) r |= (uint32_t)((v >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
    return r;
#endif
}
/* PTX prmt in its default mode with all four selector bits: bits 0-2 of a selector nibble pick a
 * byte of {y, x} as above, bit 3 replaces that byte by its sign (0x00 or 0xff). CUDA only:
 * __byte_perm keeps three bits, and HIP's v_perm_b32 has no sign mode. The host computes the same. */
#ifndef RF_GPU_HIP
HD uint32_t mm_prmt_sign(uint32_t x, uint32_t y, uint32_t s) {
#ifdef MM_DEVICE_PASS
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(y), "r"(s));
    return d;
#else
    const uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) {
        const uint32_t sel = (s >> (4 * n)) & 0xfu;
        uint32_t b = (uint32_t)(v >> (8 * (sel & 7u))) & 0xffu;
        if (sel & 8u) b = (b & 0x80u) ? 0xffu : 0u;
        r |= b << (8 * n);
    }
    return r;
#endif
}
#endif
/* The IQ4 nibble order of the device layouts: a word of 4 quant bytes (byte k = element k in its
 * low nibble, element k + 16 of the block in its high nibble) with its nibbles reordered so that
 * nibble k (k < 4) holds byte k's low nibble and nibble 4 + k its high nibble; a lookup then
 * selects with the word itself (mm_iq4_dot_word). */
HD uint32_t iq4_nib_shuffle(uint32_t q) {
    const uint32_t a = q & 0x0f0f0f0fu, b = (q >> 4) & 0x0f0f0f0fu;
    return mm_byte_perm(a, b, 0x6420u) | (mm_byte_perm(a, b, 0x7531u) << 4);
}
/* n quant words src -> dst (unaligned bytes; dst may be src) in iq4_nib_shuffle's order. */
HD void iq4_shuffle_words(const uint8_t *src, uint8_t *dst, int n) {
    for (int i = 0; i < n; i++) {
        uint32_t q;
        memcpy(&q, src + 4 * i, 4);
        q = iq4_nib_shuffle(q);
        memcpy(dst + 4 * i, &q, 4);
    }
}
/* Element k (0..3) of a shuffled word and element k + 16: nibbles k and 4 + k. */
HD uint32_t iq4s_lo(uint32_t c, int k) { return (c >> (4 * k)) & 0xfu; }
HD uint32_t iq4s_hi(uint32_t c, int k) { return (c >> (16 + 4 * k)) & 0xfu; }

/* Exact small-integer -> f32 without the (slow) integer-convert instruction: 0x4B000000 | v is
 * the float 2^23 + v for v < 2^23, so (bits - (2^23 + bias)) = v - bias exactly. */
HD float u2f_sub(uint32_t v, float two23_plus_bias) { return mm_bits2f(0x4B000000u | v) - two23_plus_bias; }
#define MAGIC 8388608.0f /* 2^23 */

/* IQ4_NL codebook {-127,-104,-83,-65,-49,-35,-22,-10,1,13,25,38,53,69,89,113} as four words of
 * int8 (little-endian): selected without memory lookups. */
HD float iq4_value(uint32_t idx) {
    const uint32_t w0 = 0xBFAD9881u, w1 = 0xF6EADDCFu, w2 = 0x26190D01u, w3 = 0x71594535u;
    const uint32_t w = (idx & 8) ? ((idx & 4) ? w3 : w2) : ((idx & 4) ? w1 : w0);
    /* int8 byte b: (b ^ 0x80) = value + 128 */
    return u2f_sub(((w >> (8 * (idx & 3))) & 0xffu) ^ 0x80u, MAGIC + 128.0f);
}

/* Q4_K / Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 scale bytes (3 words). */
HD void k4_sm(const uint32_t *s, int j, float *sc, float *mn) {
    uint32_t a, b;
    if (j < 4) {
        const int sh = 8 * j;
        a = (s[0] >> sh) & 63;
        b = (s[1] >> sh) & 63;
    } else {
        const int sh = 8 * (j - 4);
        const uint32_t hi = (s[2] >> sh) & 0xff; /* byte j + 4 */
        a = (hi & 0xf) | (((s[0] >> sh) >> 6 & 3) << 4);
        b = (hi >> 4) | (((s[1] >> sh) >> 6 & 3) << 4);
    }
    *sc = (float)a;
    *mn = (float)b;
}

/* ---- Block decoders ----------------------------------------------------------------------
 * struct Dec<T> { QK: elements per block; BB: bytes per block; E: elements per chunk (a chunk is
 * elements [p*E, p*E+E) of a block, p < C = QK/E); A: alignment of the weight base pointer the
 * loads assume (row bytes keep it for every row); dec(b, p, w): w[0..E) = chunk p of the block
 * at b }. Layouts are documented in core/quant.c. */

struct DecF32x1 {
    enum { QK = 1, BB = 4, E = 1, C = 1, A = 4 };
    static HD void dec(const uint8_t *b, int, float *w) { w[0] = *(const float *)b; }
};
struct DecF32x4 {
    enum { QK = 4, BB = 16, E = 4, C = 1, A = 16 };
    static HD void dec(const uint8_t *b, int, float *w) {
        const float4 v = *(const float4 *)b;
        w[0] = v.x;
        w[1] = v.y;
        w[2] = v.z;
        w[3] = v.w;
    }
};
struct DecF16x1 {
    enum { QK = 1, BB = 2, E = 1, C = 1, A = 2 };
    static HD void dec(const uint8_t *b, int, float *w) { w[0] = mm_h2f(ld16(b)); }
};
struct DecF16x8 {
    enum { QK = 8, BB = 16, E = 8, C = 1, A = 16 };
    static HD void dec(const uint8_t *b, int, float *w) {
        uint32_t q[4];
        ldw_a16<16>(b, q);
MM_UNROLL
        for (int i = 0; i < 4; i++) {
            w[2 * i] = mm_h2f((uint16_t)(q[i] & 0xffffu));
            w[2 * i + 1] = mm_h2f((uint16_t)(q[i] >> 16));
        }
    }
};
struct DecBF16x1 {
    enum { QK = 1, BB = 2, E = 1, C = 1, A = 2 };
    static HD void dec(const uint8_t *b, int, float *w) { w[0] = mm_bf2f(ld16(b)); }
};
struct DecBF16x8 {
    enum { QK = 8, BB = 16, E = 8, C = 1, A = 16 };
    static HD void dec(const uint8_t *b, int, float *w) {
        uint32_t q[4];
        ldw_a16<16>(b, q);
MM_UNROLL
        for (int i = 0; i < 4; i++) {
            w[2 * i] = mm_bits2f(q[i] << 16);
            w[2 * i + 1] = mm_bits2f(q[i] & 0xffff0000u);
        }
    }
};

/* Q8_0: f16 d, int8 q[32]. */
HD void q8_0_vals(float d, const uint32_t *q, float *w) {
MM_UNROLL
    for (int j = 0; j < 32; j++) w[j] = d * u2f_sub(byte_of(q, j) ^ 0x80u, MAGIC + 128.0f);
}
struct DecQ8_0 {
    enum { QK = 32, BB = 34, E = 32, C = 1, A = 2 };
    static HD void dec(const uint8_t *b, int, float *w) {
        uint32_t q[8];
        ldw_a2<32>(b + 2, q);
        q8_0_vals(mm_h2f(ld16(b)), q, w);
    }
};
/* Q4_0: f16 d, qs[16]; element j < 16 low nibble of qs[j], j >= 16 high nibble of qs[j-16]. */
HD void q4_0_vals(float d, const uint32_t *q, float *w) {
MM_UNROLL
    for (int j = 0; j < 16; j++) {
        const uint32_t v = byte_of(q, j);
        w[j] = u2f_sub(v & 0xf, MAGIC + 8.0f) * d;
        w[j + 16] = u2f_sub(v >> 4, MAGIC + 8.0f) * d;
    }
}
struct DecQ4_0 {
    enum { QK = 32, BB = 18, E = 32, C = 1, A = 2 };
    static HD void dec(const uint8_t *b, int, float *w) {
        uint32_t q[4];
        ldw_a2<16>(b + 2, q);
        q4_0_vals(mm_h2f(ld16(b)), q, w);
    }
};

/* The X8 layout of Q4_0 / Q8_0 (rf_gpu_mm_repack; a device-only arrangement, same bytes per row):
 * every group of 8 consecutive blocks of a row, 8 x BB bytes, holds the 8 f16 scales first
 * (16 bytes), then the 8 blocks' quants in block order (8 x (BB - 2) bytes). With n_in % 256 == 0
 * and a 16-byte aligned base every group and every block's quants are 16-byte aligned (BB - 2 =
 * 16 or 32), so a block's quants are one or two 16-byte loads instead of 2-byte-aligned words.
 * A decoder "block" is one group: QK = 256, chunk p = original block p of the group. */
HD void x8_group(const uint8_t *src, uint8_t *dst, int bb) {
    for (int b = 0; b < 8; b++) {
        memcpy(dst + 2 * b, src + b * bb, 2);
        memcpy(dst + 16 + b * (bb - 2), src + b * bb + 2, (size_t)(bb - 2));
    }
}
struct DecQ4_0X8 {
    enum { QK = 256, BB = 144, E = 32, C = 8, A = 16 };
    static HD void dec(const uint8_t *b, int p, float *w) {
        uint32_t q[4];
        ldw_a16<16>(b + 16 + 16 * p, q);
        q4_0_vals(mm_h2f(ld16(b + 2 * p)), q, w);
    }
};
struct DecQ8_0X8 {
    enum { QK = 256, BB = 272, E = 32, C = 8, A = 16 };
    static HD void dec(const uint8_t *b, int p, float *w) {
        uint32_t q[8];
        ldw_a16<32>(b + 16 + 32 * p, q);
        q8_0_vals(mm_h2f(ld16(b + 2 * p)), q, w);
    }
};
/* Q4_1: f16 d, f16 m, qs[16]. */
struct DecQ4_1 {
    enum { QK = 32, BB = 20, E = 32, C = 1, A = 4 };
    static HD void dec(const uint8_t *b, int, float *w) {
        const uint32_t dm = ld32_a4(b);
        const float d = mm_h2f((uint16_t)(dm & 0xffffu)), m = mm_h2f((uint16_t)(dm >> 16));
        uint32_t q[4];
        ldw_a4<16>(b + 4, q);
MM_UNROLL
        for (int j = 0; j < 16; j++) {
            const uint32_t v = byte_of(q, j);
            w[j] = u2f_sub(v & 0xf, MAGIC) * d + m;
            w[j + 16] = u2f_sub(v >> 4, MAGIC) * d + m;
        }
    }
};
/* Q5_0: f16 d, u32 qh, qs[16]. */
struct DecQ5_0 {
    enum { QK = 32, BB = 22, E = 32, C = 1, A = 2 };
    static HD void dec(const uint8_t *b, int, float *w) {
        const float d = mm_h2f(ld16(b));
        const uint32_t qh = ld32_a2(b + 2);
        uint32_t q[4];
        ldw_a2<16>(b + 6, q);
MM_UNROLL
        for (int j = 0; j < 16; j++) {
            const uint32_t v = byte_of(q, j);
            const uint32_t lo = (v & 0xf) | (((qh >> j) & 1) << 4);
            const uint32_t hi = (v >> 4) | (((qh >> (j + 16)) & 1) << 4);
            w[j] = u2f_sub(lo, MAGIC + 16.0f) * d;
            w[j + 16] = u2f_sub(hi, MAGIC + 16.0f) * d;
        }
    }
};
/* Q5_1: f16 d, f16 m, u32 qh, qs[16]. */
struct DecQ5_1 {
    enum { QK = 32, BB = 24, E = 32, C = 1, A = 8 };
    static HD void dec(const uint8_t *b, int, float *w) {
        const uint32_t dm = ld32_a4(b);
        const float d = mm_h2f((uint16_t)(dm & 0xffffu)), m = mm_h2f((uint16_t)(dm >> 16));
        const uint32_t qh = ld32_a4(b + 4);
        uint32_t q[4];
        ldw_a4<16>(b + 8, q);
MM_UNROLL
        for (int j = 0; j < 16; j++) {
            const uint32_t v = byte_of(q, j);
            const uint32_t lo = (v & 0xf) | (((qh >> j) & 1) << 4);
            const uint32_t hi = (v >> 4) | (((qh >> (j + 16)) & 1) << 4);
            w[j] = u2f_sub(lo, MAGIC) * d + m;
            w[j + 16] = u2f_sub(hi, MAGIC) * d + m;
        }
    }
};
/* IQ4_NL: f16 d, qs[16] (Q4_0 nibble order) indexing the codebook. */
struct DecIQ4_NL {
    enum { QK = 32, BB = 18, E = 32, C = 1, A = 2 };
    static HD void dec(const uint8_t *b, int, float *w) {
        const float d = mm_h2f(ld16(b));
        uint32_t q[4];
        ldw_a2<16>(b + 2, q);
MM_UNROLL
        for (int j = 0; j < 16; j++) {
            const uint32_t v = byte_of(q, j);
            w[j] = d * iq4_value(v & 0xf);
            w[j + 16] = d * iq4_value(v >> 4);
        }
    }
};
/* The 32 elements of an IQ4 block from d and its 4 shuffled quant words (iq4_nib_shuffle). */
HD void iq4s_vals(float d, const uint32_t *c, float *w) {
MM_UNROLL
    for (int i = 0; i < 4; i++)
MM_UNROLL
        for (int k = 0; k < 4; k++) {
            w[4 * i + k] = d * iq4_value(iq4s_lo(c[i], k));
            w[16 + 4 * i + k] = d * iq4_value(iq4s_hi(c[i], k));
        }
}
/* The X8 layout of IQ4_NL (rf_gpu_mm_repack; device-only, same bytes per row, n_in % 256 == 0):
 * Q4_0's X8 arrangement (8 f16 scales, then the 8 blocks' 16 quant bytes, 16-byte aligned) with
 * every quant word in the nibble order of iq4_nib_shuffle. */
HD void iq4_nl_x8_group(const uint8_t *src, uint8_t *dst) {
    x8_group(src, dst, 18);
    iq4_shuffle_words(dst + 16, dst + 16, 32);
}
struct DecIQ4_NLX8 {
    enum { QK = 256, BB = 144, E = 32, C = 8, A = 16 };
    static HD void dec(const uint8_t *b, int p, float *w) {
        uint32_t c[4];
        ldw_a16<16>(b + 16 + 16 * p, c);
        iq4s_vals(mm_h2f(ld16(b + 2 * p)), c, w);
    }
};
/* Q2_K: scales[16], qs[64], f16 d, f16 dmin. Chunk p (32 elements) = half h = p/4, shift k = p%4:
 * element l is bits 2k..2k+1 of qs[32h + l], sub-block 8h + 2k + l/16. */
struct DecQ2_K {
    enum { QK = 256, BB = 84, E = 32, C = 8, A = 4 };
    static HD void dec(const uint8_t *b, int p, float *w) {
        const int h = p >> 2, k = p & 3;
        const uint32_t dd = ld32_a4(b + 80);
        const float d = mm_h2f((uint16_t)(dd & 0xffffu)), dmin = mm_h2f((uint16_t)(dd >> 16));
        uint32_t q[8];
        ldw_a4<32>(b + 16 + 32 * h, q);
        const uint16_t sc2 = ld16(b + 8 * h + 2 * k); /* scales of sub-blocks 8h+2k, 8h+2k+1 */
MM_UNROLL
        for (int part = 0; part < 2; part++) {
            const uint32_t sc = part ? (uint32_t)(sc2 >> 8) : (uint32_t)(sc2 & 0xff);
            const float dl = d * (float)(sc & 0xf), ml = dmin * (float)(sc >> 4);
MM_UNROLL
            for (int l = 0; l < 16; l++) {
                const uint32_t v = (byte_of(q, 16 * part + l) >> (2 * k)) & 3;
                w[16 * part + l] = dl * u2f_sub(v, MAGIC) - ml;
            }
        }
    }
};
/* Q3_K: hmask[32], qs[64], scales[12], f16 d. Chunk p: h = p/4, k = p%4 as Q2_K; high bit of
 * element l is bit 4h+k of hmask[l] (clear = subtract 4). */
struct DecQ3_K {
    enum { QK = 256, BB = 110, E = 32, C = 8, A = 2 };
    static HD void dec(const uint8_t *b, int p, float *w) {
        const int h = p >> 2, k = p & 3;
        const float d = mm_h2f(ld16(b + 108));
        uint32_t q[8], hm[8];
        ldw_a2<32>(b + 32 + 32 * h, q);
        ldw_a2<32>(b, hm);
        const uint32_t s0 = ld32_a2(b + 96), s1 = ld32_a2(b + 100), s2 = ld32_a2(b + 104);
        const int hb = 4 * h + k;
MM_UNROLL
        for (int part = 0; part < 2; part++) {
            const int s = 8 * h + 2 * k + part;
            const uint32_t lo = s < 8 ? (byte_rt(s0, s1, s2, s) & 0xf) : (byte_rt(s0, s1, s2, s - 8) >> 4);
            const uint32_t hi = (byte_rt(s0, s1, s2, 8 + (s & 3)) >> (2 * (s >> 2))) & 3;
            const float dl = d * (float)((int)(lo | (hi << 4)) - 32);
MM_UNROLL
            for (int l = 0; l < 16; l++) {
                const int j = 16 * part + l;
                /* q3 + 4 = low2 | hbit << 2 (0..7) */
                const uint32_t v = ((byte_of(q, j) >> (2 * k)) & 3) | (((byte_of(hm, j) >> hb) & 1) << 2);
                w[j] = dl * u2f_sub(v, MAGIC + 4.0f);
            }
        }
    }
};
/* Q4_K: f16 d, f16 dmin, scales[12], qs[128]. Chunk p = sub-block p: the low (p even) or high
 * (p odd) nibbles of qs[32*(p/2) .. +32). */
struct DecQ4_K {
    enum { QK = 256, BB = 144, E = 32, C = 8, A = 16 };
    static HD void dec(const uint8_t *b, int p, float *w) {
        const uint32_t dd = ld32_a4(b);
        const float d = mm_h2f((uint16_t)(dd & 0xffffu)), dmin = mm_h2f((uint16_t)(dd >> 16));
        uint32_t sc[3], q[8];
        ldw_a4<12>(b + 4, sc);
        ldw_a16<32>(b + 16 + 32 * (p >> 1), q);
        float s, m;
        k4_sm(sc, p, &s, &m);
        const float d1 = d * s, m1 = dmin * m;
        const int sh = 4 * (p & 1);
MM_UNROLL
        for (int l = 0; l < 32; l++) w[l] = d1 * u2f_sub((byte_of(q, l) >> sh) & 0xf, MAGIC) - m1;
    }
};
/* Q5_K: f16 d, f16 dmin, scales[12], qh[32], qs[128]; fifth bit of sub-block p element l is
 * bit p of qh[l]. */
struct DecQ5_K {
    enum { QK = 256, BB = 176, E = 32, C = 8, A = 16 };
    static HD void dec(const uint8_t *b, int p, float *w) {
        const uint32_t dd = ld32_a4(b);
        const float d = mm_h2f((uint16_t)(dd & 0xffffu)), dmin = mm_h2f((uint16_t)(dd >> 16));
        uint32_t sc[3], qh[8], q[8];
        ldw_a4<12>(b + 4, sc);
        ldw_a16<32>(b + 16, qh);
        ldw_a16<32>(b + 48 + 32 * (p >> 1), q);
        float s, m;
        k4_sm(sc, p, &s, &m);
        const float d1 = d * s, m1 = dmin * m;
        const int sh = 4 * (p & 1);
MM_UNROLL
        for (int l = 0; l < 32; l++) {
            const uint32_t v = ((byte_of(q, l) >> sh) & 0xf) | (((byte_of(qh, l) >> p) & 1) << 4);
            w[l] = d1 * u2f_sub(v, MAGIC) - m1;
        }
    }
};
/* The H layout of Q5_K (rf_gpu_mm_repack; device-only, in place, same 176-byte superblocks): the
 * 32 qh bytes become 8 words F[p], one per sub-block p, F[p] bit 8k + i = the fifth bit of
 * element 4i + k (bit p of qh[4i + k]); so for the quant word i of a sub-block (elements 4i..4i+3
 * in bytes 0..3) one shift and a mask of F[p] place its four fifth bits at bit 4 of each byte. */
HD void q5_k_h_block(const uint8_t *src, uint8_t *dst) {
    memcpy(dst, src, 16);
    memcpy(dst + 48, src + 48, 128);
    for (int p = 0; p < 8; p++) {
        uint32_t f = 0;
        for (int l = 0; l < 32; l++) f |= (uint32_t)((src[16 + l] >> p) & 1u) << (8 * (l & 3) + (l >> 2));
        memcpy(dst + 16 + 4 * p, &f, 4);
    }
}
struct DecQ5_KH {
    enum { QK = 256, BB = 176, E = 32, C = 8, A = 16 };
    static HD void dec(const uint8_t *b, int p, float *w) {
        const uint32_t dd = ld32_a4(b);
        const float d = mm_h2f((uint16_t)(dd & 0xffffu)), dmin = mm_h2f((uint16_t)(dd >> 16));
        uint32_t sc[3], q[8];
        ldw_a4<12>(b + 4, sc);
        const uint32_t f = ld32_a4(b + 16 + 4 * p);
        ldw_a16<32>(b + 48 + 32 * (p >> 1), q);
        float s, m;
        k4_sm(sc, p, &s, &m);
        const float d1 = d * s, m1 = dmin * m;
        const int sh = 4 * (p & 1);
MM_UNROLL
        for (int l = 0; l < 32; l++) {
            const uint32_t v = ((byte_of(q, l) >> sh) & 0xf) | (((f >> (8 * (l & 3) + (l >> 2))) & 1) << 4);
            w[l] = d1 * u2f_sub(v, MAGIC) - m1;
        }
    }
};
/* Q6_K: ql[128], qh[64], int8 scales[16], f16 d. Chunk p: half h = p/4, quarter t = p%4:
 * element l: nibble (t >= 2 ? high : low) of ql[64h + 32(t&1) + l], bits 2t..2t+1 of
 * qh[32h + l]; scale index 8h + 2t + l/16. */
/* Chunk p of a Q6_K superblock from its parts: ql (128 bytes), qh (64), scales (16), d. */
HD void q6_k_chunk(const uint8_t *ql_b, const uint8_t *qh_b, const uint8_t *sc_b, const uint8_t *d_b, int p,
                   float *w) {
    const int h = p >> 2, t = p & 3;
    const float d = mm_h2f(ld16(d_b));
    uint32_t ql[8], qh[8];
    ldw_a2<32>(ql_b + 64 * h + 32 * (t & 1), ql);
    ldw_a2<32>(qh_b + 32 * h, qh);
    const uint16_t sc2 = ld16(sc_b + 8 * h + 2 * t);
    const int shl = (t >> 1) * 4, shh = 2 * t;
MM_UNROLL
    for (int part = 0; part < 2; part++) {
        const float dl = d * (float)(int8_t)(uint8_t)(part ? (sc2 >> 8) : (sc2 & 0xff));
MM_UNROLL
        for (int l = 0; l < 16; l++) {
            const int j = 16 * part + l;
            const uint32_t v = ((byte_of(ql, j) >> shl) & 0xf) | (((byte_of(qh, j) >> shh) & 3) << 4);
            w[j] = dl * u2f_sub(v, MAGIC + 32.0f);
        }
    }
}
struct DecQ6_K {
    enum { QK = 256, BB = 210, E = 32, C = 8, A = 2 };
    static HD void dec(const uint8_t *b, int p, float *w) { q6_k_chunk(b, b + 128, b + 192, b + 208, p, w); }
};
/* The X8 layout of Q6_K (rf_gpu_mm_repack; device-only): every group of 8 superblocks (1680
 * bytes) holds the 8 d first (16 bytes), then the 8 x 16 scale bytes, then each superblock's ql
 * and qh (192 bytes) in superblock order. With a 16-byte aligned base every superblock's ql / qh
 * and every 16-byte piece of them is 16-byte aligned (GGUF's 210-byte superblocks leave them
 * 2-byte aligned). A row of n_in % 2048 != 0 ends in a partial group of m < 8 superblocks at a
 * full group's offsets (144 + 192 m bytes, the unused header slots zero), so such rows are longer
 * than GGUF's (Llama-2-7B's ffn_down, 43 superblocks: 9120 bytes against 9030) and 16-byte
 * aligned. A decoder "block" is one group: chunk p = chunk p % 8 of superblock p / 8. */
HD void q6_k_x8_group_m(const uint8_t *src, uint8_t *dst, int m) {
    memset(dst, 0, 144);
    for (int k = 0; k < m; k++) {
        const uint8_t *b = src + 210 * k;
        memcpy(dst + 2 * k, b + 208, 2);
        memcpy(dst + 16 + 16 * k, b + 192, 16);
        memcpy(dst + 144 + 192 * k, b, 192);
    }
}
HD void q6_k_x8_group(const uint8_t *src, uint8_t *dst) { q6_k_x8_group_m(src, dst, 8); }
struct DecQ6_KX8 {
    enum { QK = 2048, BB = 1680, E = 32, C = 64, A = 16 };
    static HD void dec(const uint8_t *b, int p, float *w) {
        const int k = p >> 3;
        const uint8_t *q = b + 144 + 192 * k;
        q6_k_chunk(q, q + 128, b + 16 + 16 * k, b + 2 * k, p & 7, w);
    }
};
/* IQ4_XS: f16 d, u16 scales_h, scales_l[4], qs[128]. Chunk p = sub-block p: qs[16p .. +16). */
struct DecIQ4_XS {
    enum { QK = 256, BB = 136, E = 32, C = 8, A = 8 };
    static HD void dec(const uint8_t *b, int p, float *w) {
        const uint32_t w0 = ld32_a4(b);
        const float d = mm_h2f((uint16_t)(w0 & 0xffffu));
        const uint32_t sh = w0 >> 16, sl = ld32_a4(b + 4);
        uint32_t q[4];
        ldw_a4<16>(b + 8 + 16 * p, q);
        const int ls = (int)(((sl >> (8 * (p >> 1) + 4 * (p & 1))) & 0xf) | (((sh >> (2 * p)) & 3) << 4));
        const float dl = d * (float)(ls - 32);
MM_UNROLL
        for (int j = 0; j < 16; j++) {
            const uint32_t v = byte_of(q, j);
            w[j] = dl * iq4_value(v & 0xf);
            w[j + 16] = dl * iq4_value(v >> 4);
        }
    }
};

/* The S layout of IQ4_XS (rf_gpu_mm_repack; device-only, in place, same 136-byte superblocks):
 * every quant word in the nibble order of iq4_nib_shuffle, the header as it was. */
HD void iq4_xs_s_block(const uint8_t *src, uint8_t *dst) {
    memcpy(dst, src, 8);
    iq4_shuffle_words(src + 8, dst + 8, 32);
}
struct DecIQ4_XSS {
    enum { QK = 256, BB = 136, E = 32, C = 8, A = 8 };
    static HD void dec(const uint8_t *b, int p, float *w) {
        const uint32_t w0 = ld32_a4(b);
        const uint32_t sh = w0 >> 16, sl = ld32_a4(b + 4);
        uint32_t c[4];
        ldw_a4<16>(b + 8 + 16 * p, c);
        const int ls = (int)(((sl >> (4 * p)) & 0xf) | (((sh >> (2 * p)) & 3) << 4));
        iq4s_vals(mm_h2f((uint16_t)(w0 & 0xffffu)) * (float)(ls - 32), c, w);
    }
};

/* Qd<D>: a decoder view that separates a chunk's integer-valued part from its scales: chunk
 * element l of group g (G groups of E/G elements) is w_l = mul[g] * t[l] + add[g] (add only when
 * MIN), so a dot is mul[g] * sum(t x) + add[g] * sum(x): the scale is applied once per group.
 * Mathematically equal to D::dec (t exact small integers or codebook values); the rounding
 * differs from core/quant.c only by the summation order. Default: t = D::dec, mul = 1. */
template <class D> struct Qd {
    enum { G = 1, MIN = 0 };
    static HD void decq(const uint8_t *b, int p, float *t, float *mul, float *) {
        D::dec(b, p, t);
        mul[0] = 1.0f;
    }
};
/* 4 bytes of u -> 4 floats (v - bias), exact for bytes < 2^8. */
#define MM_BYTES4(u, t, bias)                                                                                           \
    do {                                                                                                                \
        (t)[0] = u2f_sub((u) & 0xffu, (bias));                                                                          \
        (t)[1] = u2f_sub(((u) >> 8) & 0xffu, (bias));                                                                   \
        (t)[2] = u2f_sub(((u) >> 16) & 0xffu, (bias));                                                                  \
        (t)[3] = u2f_sub((u) >> 24, (bias));                                                                            \
    } while (0)
template <> struct Qd<DecQ4_K> {
    enum { G = 1, MIN = 1 };
    static HD void decq(const uint8_t *b, int p, float *t, float *mul, float *add) {
        const uint32_t dd = ld32_a4(b);
        const float d = mm_h2f((uint16_t)(dd & 0xffffu)), dmin = mm_h2f((uint16_t)(dd >> 16));
        uint32_t sc[3], q[8];
        ldw_a4<12>(b + 4, sc);
        ldw_a16<32>(b + 16 + 32 * (p >> 1), q);
        float s, m;
        k4_sm(sc, p, &s, &m);
        mul[0] = d * s;
        add[0] = -(dmin * m);
        const int sh = 4 * (p & 1);
MM_UNROLL
        for (int i = 0; i < 8; i++) {
            const uint32_t u = (q[i] >> sh) & 0x0f0f0f0fu;
            MM_BYTES4(u, t + 4 * i, MAGIC);
        }
    }
};
template <> struct Qd<DecQ5_K> {
    enum { G = 1, MIN = 1 };
    static HD void decq(const uint8_t *b, int p, float *t, float *mul, float *add) {
        const uint32_t dd = ld32_a4(b);
        const float d = mm_h2f((uint16_t)(dd & 0xffffu)), dmin = mm_h2f((uint16_t)(dd >> 16));
        uint32_t sc[3], qh[8], q[8];
        ldw_a4<12>(b + 4, sc);
        ldw_a16<32>(b + 16, qh);
        ldw_a16<32>(b + 48 + 32 * (p >> 1), q);
        float s, m;
        k4_sm(sc, p, &s, &m);
        mul[0] = d * s;
        add[0] = -(dmin * m);
        const int sh = 4 * (p & 1);
MM_UNROLL
        for (int i = 0; i < 8; i++) {
            const uint32_t u = ((q[i] >> sh) & 0x0f0f0f0fu) | (((qh[i] >> p) & 0x01010101u) << 4);
            MM_BYTES4(u, t + 4 * i, MAGIC);
        }
    }
};
template <> struct Qd<DecQ6_K> {
    enum { G = 2, MIN = 0 };
    static HD void decq(const uint8_t *b, int p, float *t, float *mul, float *) {
        const int h = p >> 2, tq = p & 3;
        const float d = mm_h2f(ld16(b + 208));
        uint32_t ql[8], qh[8];
        ldw_a2<32>(b + 64 * h + 32 * (tq & 1), ql);
        ldw_a2<32>(b + 128 + 32 * h, qh);
        const uint16_t sc2 = ld16(b + 192 + 8 * h + 2 * tq);
        const int shl = (tq >> 1) * 4, shh = 2 * tq;
        mul[0] = d * (float)(int8_t)(uint8_t)(sc2 & 0xff);
        mul[1] = d * (float)(int8_t)(uint8_t)(sc2 >> 8);
MM_UNROLL
        for (int i = 0; i < 8; i++) {
            const uint32_t u = ((ql[i] >> shl) & 0x0f0f0f0fu) | (((qh[i] >> shh) & 0x03030303u) << 4);
            MM_BYTES4(u, t + 4 * i, MAGIC + 32.0f);
        }
    }
};
HD void q4_0_ints(const uint32_t *q, float *t) {
MM_UNROLL
    for (int i = 0; i < 4; i++) {
        const uint32_t lo = q[i] & 0x0f0f0f0fu, hi = (q[i] >> 4) & 0x0f0f0f0fu;
        MM_BYTES4(lo, t + 4 * i, MAGIC + 8.0f);
        MM_BYTES4(hi, t + 16 + 4 * i, MAGIC + 8.0f);
    }
}
HD void q8_0_ints(const uint32_t *q, float *t) {
MM_UNROLL
    for (int i = 0; i < 8; i++) {
        const uint32_t u = q[i] ^ 0x80808080u; /* int8 + 128 */
        MM_BYTES4(u, t + 4 * i, MAGIC + 128.0f);
    }
}
template <> struct Qd<DecQ4_0> {
    enum { G = 1, MIN = 0 };
    static HD void decq(const uint8_t *b, int, float *t, float *mul, float *) {
        mul[0] = mm_h2f(ld16(b));
        uint32_t q[4];
        ldw_a2<16>(b + 2, q);
        q4_0_ints(q, t);
    }
};
template <> struct Qd<DecQ8_0> {
    enum { G = 1, MIN = 0 };
    static HD void decq(const uint8_t *b, int, float *t, float *mul, float *) {
        mul[0] = mm_h2f(ld16(b));
        uint32_t q[8];
        ldw_a2<32>(b + 2, q);
        q8_0_ints(q, t);
    }
};
template <> struct Qd<DecQ4_0X8> {
    enum { G = 1, MIN = 0 };
    static HD void decq(const uint8_t *b, int p, float *t, float *mul, float *) {
        mul[0] = mm_h2f(ld16(b + 2 * p));
        uint32_t q[4];
        ldw_a16<16>(b + 16 + 16 * p, q);
        q4_0_ints(q, t);
    }
};
template <> struct Qd<DecQ8_0X8> {
    enum { G = 1, MIN = 0 };
    static HD void decq(const uint8_t *b, int p, float *t, float *mul, float *) {
        mul[0] = mm_h2f(ld16(b + 2 * p));
        uint32_t q[8];
        ldw_a16<32>(b + 16 + 32 * p, q);
        q8_0_ints(q, t);
    }
};
