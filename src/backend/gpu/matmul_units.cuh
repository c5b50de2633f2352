/* matmul_units.cuh: the int8-activation unit formats of the matmul sources (included once, by
 * matmul_common.cuh).
 *
 * A unit is the part of a weight block one lane loads and dots with int8 x per step (struct V* below:
 * its raw words, load, dot); the decode matvecs k_mvp / k_mvt and the two-kernel k_mvq are templates
 * over them. Host and device: rf_gpu_mm_host_qdot runs them on the host against the f32 oracle.
 * Needs matmul_decoders.cuh and the definitions of matmul_common.cuh before it. */
#include "mbarrier.cuh"

/* 4 int8 x 4 int8 dot added to c (signed). */
HD int mm_dp4a(int a, int b, int c) {
#if !defined(MM_DEVICE_PASS)
    int s = c;
    for (int i = 0; i < 4; i++) s += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * i)) * (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * i));
    return s;
#elif defined(RF_GPU_HIP)
#if defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || \
    defined(__gfx942__)
    return __builtin_amdgcn_sdot4(a, b, c, false);
#else
    int s = c;
MM_UNROLL
    for (int i = 0; i < 4; i++) s += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * i)) * (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * i));
    return s;
#endif
#else
    return __dp4a(a, b, c);
#endif
}

/* 4 uint8 x 4 int8 dot added to c (CUDA device code only: HIP and the host keep Q4_0's other form). */
#if defined(MM_DEVICE_PASS) && !defined(RF_GPU_HIP)
#define MM_DP4A_US 1
__device__ __forceinline__ int mm_dp4a_us(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
#endif


#ifndef RF_GPU_HIP
/* Bulk copies into shared memory (the Hopper TMA unit, sm_90+), completed on an mbarrier
 * (mbarrier.cuh): the copy engine streams the bytes while the warps compute, holding no registers.
 * Used by k_mvt only; other targets never launch it (the bodies trap there). Contract of
 * mm_bulk_load: dst and src 16-byte aligned, bytes a multiple of 16 (< 2^20); one call per barrier
 * phase, by one thread. mm_bulk_copy: one bulk copy whose bytes complete on bar (its arrival is
 * gpu_mbar_arrive_expect's). */
__device__ __forceinline__ void mm_bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* Weights: evict-first in L2, as MM_LDW (matmul_decoders.cuh). The operand is the 64-bit L2
     * cache-policy encoding of evict-first (the constant CUTLASS names CacheHintSm90::EVICT_FIRST),
     * which saves a createpolicy per copy; a createpolicy.fractional.L2::evict_first policy works as
     * well (both checked on an H200 with a 1 KB probe copy, 2026-11-23). */
    const uint64_t pol = 0x12F0000000000000ull;
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
            gpu_smem_u32(dst)),
        "l"(src), "r"(bytes), "r"(gpu_smem_u32(bar)), "l"(pol)
        : "memory");
#else
    (void)dst, (void)src, (void)bytes, (void)bar;
    __trap();
#endif
}
__device__ __forceinline__ void mm_bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    gpu_mbar_arrive_expect(bar, bytes);
    mm_bulk_copy(dst, src, bytes, bar);
}
/* Two bulk copies completed on one barrier phase (one arrival for both); bytes_b may be 0 (no
 * second copy). Contract as mm_bulk_load's for each copy. */
__device__ __forceinline__ void mm_bulk_load2(void *dst_a, const void *src_a, uint32_t bytes_a, void *dst_b,
                                              const void *src_b, uint32_t bytes_b, uint64_t *bar) {
    gpu_mbar_arrive_expect(bar, bytes_a + bytes_b);
    mm_bulk_copy(dst_a, src_a, bytes_a, bar);
    if (bytes_b) mm_bulk_copy(dst_b, src_b, bytes_b, bar);
}
#endif

/* NW little-endian words of the bytes [p, p + 4 NW), p 2-byte aligned: NW (+1 when p % 4 == 2)
 * aligned word loads, then a 16-bit funnel shift. Reads no word outside [p & ~3, p + 4 NW). */
template <int NW> HD void ldw_u2(const uint8_t *p, uint32_t *out) {
    const bool odd = ((uintptr_t)p & 2) != 0;
    const uint32_t *a = (const uint32_t *)(p - (odd ? 2 : 0)); /* pointer arithmetic keeps the address space known */
    uint32_t w[NW + 1];
MM_UNROLL
    for (int i = 0; i < NW; i++) w[i] = MM_LDW(unsigned int, a + i);
    w[NW] = odd ? MM_LDW(unsigned int, a + NW) : 0u;
MM_UNROLL
    for (int i = 0; i < NW; i++) out[i] = odd ? ((w[i] >> 16) | (w[i + 1] << 16)) : w[i];
}

/* 16 int8 of x (16-byte aligned) as 4 words. */
HD int4 ldx16(const int8_t *p) { return *(const int4 *)p; }

/* k_mvp keeps the int8 x in shared memory with its 16-byte chunks permuted inside each 64-byte
 * group: address bits 4, 5 are XORed with bits 7, 8 (CUDA only; a bijection per aligned group).
 * Lanes of a quarter-warp read chunks 64 or 256 bytes apart (Q4_K: sub-block pairs of two
 * blocks; Q4_0 / Q8_0: consecutive 32-byte blocks); unpermuted those share banks (2- to 4-way
 * conflicts, the top stall in ncu), permuted they spread over the bank row. mm_xswz maps an
 * address of the logical array to where the chunk lives; the writer and the readers both use it,
 * so any base works for correctness (k_mvp aligns its base to 64 bytes and pads x to 64). */
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ int8_t *mm_xswz(int8_t *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return p + (int)((a ^ ((a >> 3) & 0x30u)) - a);
}
#define MM_XSWZ_ON 1
#else
HD int8_t *mm_xswz(int8_t *p) { return p; }
#define MM_XSWZ_ON 0
#endif
/* ldx16 from k_mvp's permuted shared x (SW = 1) or a plain array (SW = 0). */
template <int SW> HD int4 ldx16s(const int8_t *p) {
#if MM_XSWZ_ON
    if (SW) return *(const int4 *)mm_xswz((int8_t *)p);
#endif
    return *(const int4 *)p;
}
/* The 64 bytes of x at p, four 16-byte chunks, p 64-byte aligned in the logical array (as the x of
 * every 64-weight unit is). mm_xswz's XOR takes address bits 7-8, which are the same for all four
 * chunks, so it is computed once: chunk i lives at p + (t ^ 16 i). */
template <int SW> HD void ldx64s(const int8_t *p, int4 *x) {
    int t = 0;
#if MM_XSWZ_ON
    if (SW) t = (int)(((uint32_t)__cvta_generic_to_shared(p) >> 3) & 0x30u);
#endif
MM_UNROLL
    for (int i = 0; i < 4; i++) x[i] = *(const int4 *)(p + (t ^ (16 * i)));
}
/* dot of 16 weight bytes (4 words, int8 values) with 16 x int8 */
HD int dot16(const uint32_t *w, int4 x, int s) {
    s = mm_dp4a((int)w[0], x.x, s);
    s = mm_dp4a((int)w[1], x.y, s);
    s = mm_dp4a((int)w[2], x.z, s);
    return mm_dp4a((int)w[3], x.w, s);
}
#ifdef MM_DP4A_US
/* 4 words of packed nibbles: the low nibbles dotted with xl added to sl, the high nibbles in
 * place (16 q as unsigned bytes) dotted with xh added to sh, so sh holds 16 times their dot
 * (exact: shift it right by 4 after the last call). One shift fewer per word than unpacking the
 * high nibbles, and two independent dp4a chains. CUDA device code (mm_dp4a_us). */
__device__ __forceinline__ void mm_dot_nib16(const uint32_t *q, int4 xl, int4 xh, int &sl, int &sh) {
    sl = mm_dp4a((int)(q[0] & 0x0f0f0f0fu), xl.x, sl), sh = mm_dp4a_us(q[0] & 0xf0f0f0f0u, xh.x, sh);
    sl = mm_dp4a((int)(q[1] & 0x0f0f0f0fu), xl.y, sl), sh = mm_dp4a_us(q[1] & 0xf0f0f0f0u, xh.y, sh);
    sl = mm_dp4a((int)(q[2] & 0x0f0f0f0fu), xl.z, sl), sh = mm_dp4a_us(q[2] & 0xf0f0f0f0u, xh.z, sh);
    sl = mm_dp4a((int)(q[3] & 0x0f0f0f0fu), xl.w, sl), sh = mm_dp4a_us(q[3] & 0xf0f0f0f0u, xh.w, sh);
}
#endif
/* The IQ4_NL codebook (quant.c's rf_iq4nl_values), four int8 entries per word, entry 0 lowest. */
#define MM_IQ4_W0 0xbfad9881u
#define MM_IQ4_W1 0xf6eaddcfu
#define MM_IQ4_W2 0x26190d01u
#define MM_IQ4_W3 0x71594535u
/* The codebook entries of a shuffled quant word c (iq4_nib_shuffle): *lo = those of nibbles 0..3,
 * *hi = those of nibbles 4..7, four int8 per word. The nibbles' low 3 bits select within each
 * half of the table (four byte permutes), their bit 3 then picks the half per byte (one permute
 * each, its selector nibble k = k + 4 * bit 3): 6 permutes and 5 other instructions per 8 entries. */
HD void mm_iq4_pair(uint32_t c, uint32_t *lo, uint32_t *hi) {
    const uint32_t s = c & 0x77777777u, t = (c >> 1) & 0x44444444u;
    const uint32_t a0 = mm_byte_perm(MM_IQ4_W0, MM_IQ4_W1, s), b0 = mm_byte_perm(MM_IQ4_W2, MM_IQ4_W3, s);
    const uint32_t a1 = mm_byte_perm(MM_IQ4_W0, MM_IQ4_W1, s >> 16), b1 = mm_byte_perm(MM_IQ4_W2, MM_IQ4_W3, s >> 16);
    *lo = mm_byte_perm(a0, b0, t | 0x3210u);
    *hi = mm_byte_perm(a1, b1, (t >> 16) | 0x3210u);
}
/* The IQ4_NL codebook's entries 8..15 plus one, four per word (mm_iq4_dot_word). */
#define MM_IQ4_B0 0x271a0e02u
#define MM_IQ4_B1 0x725a4636u
/* s + the dot of the 8 codebook entries of a shuffled quant word c (iq4_nib_shuffle) with x: the
 * entries of nibbles 0..3 against the 4 int8 of xl, of nibbles 4..7 against xh. On CUDA by prmt's
 * sign mode (mm_prmt_sign): entries 0..7 are all negative, 8..15 all positive, so a lookup in
 * entries 0..7 by the raw nibble gives the entry for n < 8 and -1 (the sign of entry n - 8) for
 * n >= 8, and one in entries 8..15 plus one by the nibble with bit 3 flipped gives 0 for n < 8 and
 * the entry plus one for n >= 8: their sum is the entry, so two dp4a take the two lookups. Four
 * permutes, one xor, two shifts and four dp4a per 8 entries, against mm_iq4_pair's 6 permutes, 5
 * other instructions and two dp4a; the integer sum is the same. On HIP mm_iq4_pair (both are
 * checked on the host: rf_gpu_mm_host_iq4_dot). */
HD int mm_iq4_dot_word_pair(uint32_t c, int xl, int xh, int s) {
    uint32_t lo, hi;
    mm_iq4_pair(c, &lo, &hi);
    return mm_dp4a((int)hi, xh, mm_dp4a((int)lo, xl, s));
}
#ifndef RF_GPU_HIP
HD int mm_iq4_dot_word_sign(uint32_t c, int xl, int xh, int s) {
    const uint32_t f = c ^ 0x88888888u;
    s = mm_dp4a((int)mm_prmt_sign(MM_IQ4_W0, MM_IQ4_W1, c), xl, s);
    s = mm_dp4a((int)mm_prmt_sign(MM_IQ4_B0, MM_IQ4_B1, f), xl, s);
    s = mm_dp4a((int)mm_prmt_sign(MM_IQ4_W0, MM_IQ4_W1, c >> 16), xh, s);
    return mm_dp4a((int)mm_prmt_sign(MM_IQ4_B0, MM_IQ4_B1, f >> 16), xh, s);
}
#endif
HD int mm_iq4_dot_word(uint32_t c, int xl, int xh, int s) {
#ifndef RF_GPU_HIP
    return mm_iq4_dot_word_sign(c, xl, xh, s);
#else
    return mm_iq4_dot_word_pair(c, xl, xh, s);
#endif
}
/* The 32 elements of 4 shuffled quant words against x (xl: the elements of nibbles 0..3, xh: 4..7). */
HD int mm_iq4_dot32(const uint32_t *c, int4 xl, int4 xh) {
    int s = mm_iq4_dot_word(c[0], xl.x, xh.x, 0);
    s = mm_iq4_dot_word(c[1], xl.y, xh.y, s);
    s = mm_iq4_dot_word(c[2], xl.z, xh.z, s);
    return mm_iq4_dot_word(c[3], xl.w, xh.w, s);
}
/* bits 0..3 of v -> bit 4 of bytes 0..3 */
HD uint32_t spread4(uint32_t v) { return (((v & 0xfu) * 0x00204081u) & 0x01010101u) << 4; }

/* Unit formats V: a "unit" is the part of a weight block one lane handles per step (32 weights).
 * V { Dec: the f32 decoder (fallback); QK, BB: block elements / bytes; UPB: units per block;
 * A: weight alignment; Raw: the unit's loaded bytes; load(b, u, r): loads unit u of block b;
 * dot(r, u, xq, xd): sum over the unit's elements of w * xin, with xq / xd pointing at the x of
 * the block's first element }. */
struct VQ4_0 {
    typedef DecQ4_0 Dec;
    enum { QK = 32, BB = 18, UPB = 1, A = 2 };
    struct Raw {
        uint32_t d, q[4];
    };
    static HD void load(const uint8_t *b, int, Raw &r) {
        r.d = ld16(b);
        ldw_u2<4>(b + 2, r.q);
    }
    template <int SW> static HD float dot(const Raw &r, int, const int8_t *xq, const float2 *xd) {
        return dot_x(r, ldx16s<SW>(xq), ldx16s<SW>(xq + 16), xd[0]);
    }
    /* The dot with the block's x already loaded: elements 0..15 (xl), 16..31 (xh), their pair dx. */
    static HD float dot_x(const Raw &r, int4 xl, int4 xh, float2 dx) {
#ifdef MM_DP4A_US
        /* The high nibbles stay in place (16 q, 0 <= 16 q <= 240, as unsigned bytes) and the sum is
         * shifted back, exact since it is a multiple of 16: one shift fewer per word, and two
         * independent dp4a chains. Whole-model tg128, same-run A/B on an H200: 7B Q4_0 +0.35%,
         * 1B Q4_0 +1.0% (docs/PERF.md, twenty-sixth session). */
        int sl = 0, sh = 0;
        mm_dot_nib16(r.q, xl, xh, sl, sh);
        const int s = sl + (sh >> 4);
#else
        uint32_t lo[4], hi[4];
MM_UNROLL
        for (int i = 0; i < 4; i++) {
            lo[i] = r.q[i] & 0x0f0f0f0fu;
            hi[i] = (r.q[i] >> 4) & 0x0f0f0f0fu;
        }
        const int s = dot16(hi, xh, dot16(lo, xl, 0));
#endif
        return mm_h2f((uint16_t)r.d) * (dx.x * (float)s - 8.0f * dx.y);
    }
};
/* IQ4_NL: Q4_0's block (layout, loads) with the nibbles indexing the codebook (shuffled in
 * registers for mm_iq4_dot32), no offset. */
struct VIQ4_NL : VQ4_0 {
    typedef DecIQ4_NL Dec;
    template <int SW> static HD float dot(const Raw &r, int, const int8_t *xq, const float2 *xd) {
        uint32_t c[4];
MM_UNROLL
        for (int i = 0; i < 4; i++) c[i] = iq4_nib_shuffle(r.q[i]);
        const int s = mm_iq4_dot32(c, ldx16s<SW>(xq), ldx16s<SW>(xq + 16));
        return mm_h2f((uint16_t)r.d) * xd[0].x * (float)s;
    }
};
/* IQ4_XS (layout in quant.c): unit u = sub-block u of the 136-byte superblock, its 16 quant bytes
 * at 8 + 16u indexing the codebook (mm_iq4_dot32), its scale d * (sc6 - 32) from scales_l
 * nibble u and scales_h bits 2u, 2u + 1. */
struct VIQ4_XS {
    typedef DecIQ4_XS Dec;
    enum { QK = 256, BB = 136, UPB = 8, A = 8 };
    struct Raw {
        uint32_t h, l, q[4]; /* h: d | scales_h << 16; l: scales_l */
    };
    static HD void load(const uint8_t *b, int u, Raw &r) {
        r.h = ld32_a4(b);
        r.l = ld32_a4(b + 4);
        ldw_a4<16>(b + 8 + 16 * u, r.q);
    }
    template <int SW> static HD float dot(const Raw &r, int u, const int8_t *xq, const float2 *xd) {
        uint32_t c[4];
MM_UNROLL
        for (int i = 0; i < 4; i++) c[i] = iq4_nib_shuffle(r.q[i]);
        const int s = mm_iq4_dot32(c, ldx16s<SW>(xq + 32 * u), ldx16s<SW>(xq + 32 * u + 16));
        const int ls = (int)((r.l >> (4 * u)) & 0xfu) | (int)(((r.h >> (16 + 2 * u)) & 3u) << 4);
        return mm_h2f((uint16_t)(r.h & 0xffffu)) * (float)(ls - 32) * xd[u].x * (float)s;
    }
};
/* IQ4_NL X8 (see DecIQ4_NLX8): unit u = block u of the group, its 16 shuffled quant bytes one
 * 16-byte load. */
struct VIQ4_NLX8 {
    typedef DecIQ4_NLX8 Dec;
    enum { QK = 256, BB = 144, UPB = 8, A = 16 };
    typedef VQ4_0::Raw Raw;
    static HD void load(const uint8_t *b, int u, Raw &r) {
        r.d = ld16(b + 2 * u);
        ldw_a16<16>(b + 16 + 16 * u, r.q);
    }
    template <int SW> static HD float dot(const Raw &r, int u, const int8_t *xq, const float2 *xd) {
        const int8_t *x = xq + 32 * u;
        const int s = mm_iq4_dot32(r.q, ldx16s<SW>(x), ldx16s<SW>(x + 16));
        return mm_h2f((uint16_t)r.d) * xd[u].x * (float)s;
    }
};
/* IQ4_XS S (see DecIQ4_XSS): unit j (0..3) = sub-blocks 2j and 2j + 1, their 32 shuffled quant
 * bytes at 8 + 32j and the header as 8-byte loads (superblocks are 8-byte aligned); scales from
 * scales_l byte j and scales_h bits 4j..4j + 3, the header decoded once per 64 weights. */
struct VIQ4_XSS {
    typedef DecIQ4_XSS Dec;
    enum { QK = 256, BB = 136, UPB = 4, A = 8 };
    struct Raw {
        uint32_t h, l, q[8]; /* h: d | scales_h << 16; l: scales_l */
    };
    static HD void load(const uint8_t *b, int j, Raw &r) {
        uint32_t hl[2];
        ldw_a8<8>(b, hl);
        r.h = hl[0];
        r.l = hl[1];
        ldw_a8<32>(b + 8 + 32 * j, r.q);
    }
    template <int SW> static HD float dot(const Raw &r, int j, const int8_t *xq, const float2 *xd) {
        const int8_t *x = xq + 64 * j;
        const int s0 = mm_iq4_dot32(r.q, ldx16s<SW>(x), ldx16s<SW>(x + 16));
        const int s1 = mm_iq4_dot32(r.q + 4, ldx16s<SW>(x + 32), ldx16s<SW>(x + 48));
        const uint32_t l = r.l >> (8 * j), h = r.h >> (16 + 4 * j);
        const int ls0 = (int)((l & 0xfu) | ((h & 3u) << 4)), ls1 = (int)(((l >> 4) & 0xfu) | ((h & 0xcu) << 2));
        return mm_h2f((uint16_t)(r.h & 0xffffu)) *
               ((float)(ls0 - 32) * xd[2 * j].x * (float)s0 + (float)(ls1 - 32) * xd[2 * j + 1].x * (float)s1);
    }
};
struct VQ4_1 {
    typedef DecQ4_1 Dec;
    enum { QK = 32, BB = 20, UPB = 1, A = 4 };
    struct Raw {
        uint32_t dm, q[4];
    };
    static HD void load(const uint8_t *b, int, Raw &r) {
        r.dm = ld32_a4(b);
        ldw_a4<16>(b + 4, r.q);
    }
    template <int SW> static HD float dot(const Raw &r, int, const int8_t *xq, const float2 *xd) {
        uint32_t lo[4], hi[4];
MM_UNROLL
        for (int i = 0; i < 4; i++) {
            lo[i] = r.q[i] & 0x0f0f0f0fu;
            hi[i] = (r.q[i] >> 4) & 0x0f0f0f0fu;
        }
        const int s = dot16(hi, ldx16s<SW>(xq + 16), dot16(lo, ldx16s<SW>(xq), 0));
        const float2 dx = xd[0];
        return mm_h2f((uint16_t)(r.dm & 0xffffu)) * dx.x * (float)s + mm_h2f((uint16_t)(r.dm >> 16)) * dx.y;
    }
};
struct VQ5_0 {
    typedef DecQ5_0 Dec;
    enum { QK = 32, BB = 22, UPB = 1, A = 2 };
    struct Raw {
        uint32_t d, w[5]; /* w[0] = qh, w[1..4] = qs */
    };
    static HD void load(const uint8_t *b, int, Raw &r) {
        r.d = ld16(b);
        ldw_u2<5>(b + 2, r.w);
    }
    template <int SW> static HD float dot(const Raw &r, int, const int8_t *xq, const float2 *xd) {
        uint32_t lo[4], hi[4];
MM_UNROLL
        for (int i = 0; i < 4; i++) {
            lo[i] = (r.w[1 + i] & 0x0f0f0f0fu) | spread4(r.w[0] >> (4 * i));
            hi[i] = ((r.w[1 + i] >> 4) & 0x0f0f0f0fu) | spread4(r.w[0] >> (16 + 4 * i));
        }
        const int s = dot16(hi, ldx16s<SW>(xq + 16), dot16(lo, ldx16s<SW>(xq), 0));
        const float2 dx = xd[0];
        return mm_h2f((uint16_t)r.d) * (dx.x * (float)s - 16.0f * dx.y);
    }
};
struct VQ5_1 {
    typedef DecQ5_1 Dec;
    enum { QK = 32, BB = 24, UPB = 1, A = 8 };
    struct Raw {
        uint32_t dm, w[5];
    };
    static HD void load(const uint8_t *b, int, Raw &r) {
        r.dm = ld32_a4(b);
        ldw_a4<20>(b + 4, r.w);
    }
    template <int SW> static HD float dot(const Raw &r, int, const int8_t *xq, const float2 *xd) {
        uint32_t lo[4], hi[4];
MM_UNROLL
        for (int i = 0; i < 4; i++) {
            lo[i] = (r.w[1 + i] & 0x0f0f0f0fu) | spread4(r.w[0] >> (4 * i));
            hi[i] = ((r.w[1 + i] >> 4) & 0x0f0f0f0fu) | spread4(r.w[0] >> (16 + 4 * i));
        }
        const int s = dot16(hi, ldx16s<SW>(xq + 16), dot16(lo, ldx16s<SW>(xq), 0));
        const float2 dx = xd[0];
        return mm_h2f((uint16_t)(r.dm & 0xffffu)) * dx.x * (float)s + mm_h2f((uint16_t)(r.dm >> 16)) * dx.y;
    }
};
struct VQ8_0 {
    typedef DecQ8_0 Dec;
    enum { QK = 32, BB = 34, UPB = 1, A = 2 };
    struct Raw {
        uint32_t d, q[8];
    };
    static HD void load(const uint8_t *b, int, Raw &r) {
        r.d = ld16(b);
        ldw_u2<8>(b + 2, r.q);
    }
    template <int SW> static HD float dot(const Raw &r, int, const int8_t *xq, const float2 *xd) {
        const int s = dot16(r.q + 4, ldx16s<SW>(xq + 16), dot16(r.q, ldx16s<SW>(xq), 0));
        return mm_h2f((uint16_t)r.d) * xd[0].x * (float)s;
    }
};
/* X8 layouts (see DecQ4_0X8): a "block" is a group of 8 original blocks, unit u = block u of
 * the group; its scale is at b + 2u, its quants 16-byte aligned after the 16 scale bytes. */
struct VQ4_0X8 {
    typedef DecQ4_0X8 Dec;
    enum { QK = 256, BB = 144, UPB = 8, A = 16 };
    typedef VQ4_0::Raw Raw;
    static HD void load(const uint8_t *b, int u, Raw &r) {
        r.d = ld16(b + 2 * u);
        ldw_a16<16>(b + 16 + 16 * u, r.q);
    }
    template <int SW> static HD float dot(const Raw &r, int u, const int8_t *xq, const float2 *xd) {
        return VQ4_0::dot<SW>(r, 0, xq + 32 * u, xd + u);
    }
    static HD float dot_x(const Raw &r, int4 xl, int4 xh, float2 dx) { return VQ4_0::dot_x(r, xl, xh, dx); }
};
struct VQ8_0X8 {
    typedef DecQ8_0X8 Dec;
    enum { QK = 256, BB = 272, UPB = 8, A = 16 };
    typedef VQ8_0::Raw Raw;
    static HD void load(const uint8_t *b, int u, Raw &r) {
        r.d = ld16(b + 2 * u);
        ldw_a16<32>(b + 16 + 32 * u, r.q);
    }
    template <int SW> static HD float dot(const Raw &r, int u, const int8_t *xq, const float2 *xd) {
        return VQ8_0::dot<SW>(r, 0, xq + 32 * u, xd + u);
    }
};

/* Scales and mins of Q4_K / Q5_K sub-blocks 2j and 2j + 1 (j = 0..3) from the 12 scale bytes
 * (words s[0..2]), without branches: sub-blocks 0..3 keep 6 bits in bytes 0..3 (scale) and 4..7
 * (min); 4..7 take 4 bits from bytes 8..11 and their top 2 bits from bits 6..7 of bytes 0..7. */
HD void k4_sm_pair(const uint32_t *s, int j, float *sc0, float *m0, float *sc1, float *m1) {
    const int sh = 16 * (j & 1);
    const uint32_t b0 = s[0] >> sh, b1 = s[1] >> sh, b2 = s[2] >> sh;
    const bool hi = j >= 2;
    /* Both sub-blocks at once (byte 0: 2j, byte 1: 2j + 1), the two cases as masks and selects:
     * lanes of one warp hold different j, so a branch here would run both sides. */
    const uint32_t low = hi ? 0x0f0fu : 0x3f3fu, top = hi ? 0x3030u : 0u;
    const uint32_t a = ((hi ? b2 : b0) & low) | ((b0 >> 2) & top);
    const uint32_t c = ((hi ? b2 >> 4 : b1) & low) | ((b1 >> 2) & top);
    *sc0 = (float)(a & 255u), *sc1 = (float)((a >> 8) & 255u), *m0 = (float)(c & 255u), *m1 = (float)((c >> 8) & 255u);
}

/* A Q4_K / Q5_K sub-block pair j's contribution from its two integer dots s0 / s1 (sub-blocks 2j /
 * 2j + 1 with their int8 x), hd = the superblock's d, dmin and 12 scale bytes. */
HD float k4_pair_scale(int s0, int s1, const uint32_t *hd, int j, const float2 *xd) {
    const float2 x0 = xd[2 * j], x1 = xd[2 * j + 1];
    float sc0, m0, sc1, m1;
    k4_sm_pair(hd + 1, j, &sc0, &m0, &sc1, &m1);
    const float d = mm_h2f((uint16_t)(hd[0] & 0xffffu)), dmin = mm_h2f((uint16_t)(hd[0] >> 16));
    return d * (sc0 * x0.x * (float)s0 + sc1 * x1.x * (float)s1) - dmin * (m0 * x0.y + m1 * x1.y);
}
/* The dot of a Q4_K / Q5_K sub-block pair j with int8 x: lo / hi = the 4- or 5-bit values of
 * sub-blocks 2j / 2j + 1 (8 words each), hd as above. */
template <int SW>
HD float k4_pair_dot(const uint32_t *lo, const uint32_t *hi, const uint32_t *hd, int j, const int8_t *xq,
                     const float2 *xd) {
    int4 x[4];
    ldx64s<SW>(xq + 64 * j, x);
    const int s0 = dot16(lo + 4, x[1], dot16(lo, x[0], 0));
    const int s1 = dot16(hi + 4, x[3], dot16(hi, x[2], 0));
    return k4_pair_scale(s0, s1, hd, j, xd);
}
/* Q4_K unit u (0..3) = sub-block pair j = u: qs bytes [32j, +32): low nibbles = the 32 elements
 * of sub-block 2j, high nibbles = those of sub-block 2j + 1; both scales and mins applied once
 * per unit (64 weights, so the scale decode and the index arithmetic are paid per 64). */
struct VQ4_K {
    typedef DecQ4_K Dec;
    enum { QK = 256, BB = 144, UPB = 4, A = 16 };
    struct Raw {
        uint32_t hd[4], q[8];
    };
    static HD void load(const uint8_t *b, int u, Raw &r) {
        ldw_a16<16>(b, r.hd);
        ldw_a16<32>(b + 16 + 32 * u, r.q);
    }
    template <int SW> static HD float dot(const Raw &r, int j, const int8_t *xq, const float2 *xd) {
#ifdef MM_DP4A_US
        /* Sub-block 2j + 1's nibbles stay in place, as in VQ4_0::dot (16 q as unsigned bytes, the
         * sum shifted back: exact, a multiple of 16): one shift fewer per word, two dp4a chains.
         * With k4_sm_pair's selects and ldx64s, ~105 PTX instructions per unit instead of ~138:
         * 7B Q4_K_M tg128 +2.9%, 1B +1.7% on an H200 (docs/PERF.md, twenty-eighth session). */
        int4 x[4];
        ldx64s<SW>(xq + 64 * j, x);
        int s0 = 0, s1 = 0;
        mm_dot_nib16(r.q, x[0], x[2], s0, s1);
        mm_dot_nib16(r.q + 4, x[1], x[3], s0, s1);
        return k4_pair_scale(s0, s1 >> 4, r.hd, j, xd);
#else
        uint32_t lo[8], hi[8];
MM_UNROLL
        for (int i = 0; i < 8; i++) {
            lo[i] = r.q[i] & 0x0f0f0f0fu;
            hi[i] = (r.q[i] >> 4) & 0x0f0f0f0fu;
        }
        return k4_pair_dot<SW>(lo, hi, r.hd, j, xq, xd);
#endif
    }
};
/* Q4_K for k_mvp (MvpUnitOf): VQ4_K's unit with the superblock's 16-byte header spread over the
 * lanes of its four units. k_mvp puts unit k on lane k % warpSize, so the units of one superblock
 * (k / 4) sit on lanes 4m .. 4m + 3 with j = k % 4 = lane % 4: unit j's lane loads header word j
 * only (d and dmin, or four scale bytes) and prep() gathers the four words from its group of four
 * lanes, so 9 raw words per unit are in flight instead of 12. prep runs on every lane of the warp
 * together (k_mvp calls it outside the unit guard); a group's lanes are all in range or all out
 * (n_in % 256 == 0), so an out-of-range group's shuffles read only its own unused words. dot is
 * VQ4_K's. 7B Q4_K_M tg128 on an H200 +0.5-0.7% (552.3 -> 556.3 t/s; six same-run pairs,
 * docs/PERF.md, thirtieth session). Device only: the host check runs VQ4_K. */
struct VQ4_KS {
    typedef DecQ4_K Dec;
    enum { QK = 256, BB = 144, UPB = 4, A = 16 };
    typedef VQ4_K::Raw Raw; /* hd[0] as loaded: this lane's header word; hd[0..3] after prep */
    static __device__ __forceinline__ void load(const uint8_t *b, int u, Raw &r) {
        r.hd[0] = ld32_a4(b + 4 * u);
        ldw_a16<32>(b + 16 + 32 * u, r.q);
    }
    static __device__ __forceinline__ void prep(Raw &r) {
        const uint32_t h = r.hd[0];
MM_UNROLL
        for (int i = 0; i < 4; i++) r.hd[i] = RF_SHFL_IN(h, i, 4);
    }
    template <int SW>
    static __device__ __forceinline__ float dot(const Raw &r, int j, const int8_t *xq, const float2 *xd) {
        return VQ4_K::dot<SW>(r, j, xq, xd);
    }
};
/* Q5_K unit u (0..3) = sub-block pair j = u, as Q4_K's: qs bytes [48 + 32j, +32) hold sub-block
 * 2j in their low nibbles and 2j + 1 in their high nibbles; the fifth bit of element l of
 * sub-block p is bit p of qh byte l, so the unit loads all 32 qh bytes and takes bits 2j, 2j + 1.
 * 64 weights per unit: the scale pair is decoded once and the header and qh loaded once per 64
 * (a unit of 32 loaded them once per 32). */
struct VQ5_K {
    typedef DecQ5_K Dec;
    enum { QK = 256, BB = 176, UPB = 4, A = 16 };
    struct Raw {
        uint32_t hd[4], qh[8], q[8];
    };
    static HD void load(const uint8_t *b, int u, Raw &r) {
        ldw_a16<16>(b, r.hd);
        ldw_a16<32>(b + 16, r.qh);
        ldw_a16<32>(b + 48 + 32 * u, r.q);
    }
    template <int SW> static HD float dot(const Raw &r, int j, const int8_t *xq, const float2 *xd) {
        uint32_t lo[8], hi[8];
MM_UNROLL
        for (int i = 0; i < 8; i++) {
            const uint32_t h = r.qh[i] >> (2 * j);
            lo[i] = (r.q[i] & 0x0f0f0f0fu) | ((h << 4) & 0x10101010u);
            hi[i] = ((r.q[i] >> 4) & 0x0f0f0f0fu) | ((h << 3) & 0x10101010u);
        }
        return k4_pair_dot<SW>(lo, hi, r.hd, j, xq, xd);
    }
};
/* Q5_K H (see DecQ5_KH): VQ5_K's pair unit with the fifth bits of sub-blocks 2j, 2j + 1 as the
 * two words F[2j], F[2j + 1] (one 8-byte load instead of all 32 qh bytes): 56 raw bytes. */
struct VQ5_KH {
    typedef DecQ5_KH Dec;
    enum { QK = 256, BB = 176, UPB = 4, A = 16 };
    struct Raw {
        uint32_t hd[4], f[2], q[8];
    };
    static HD void load(const uint8_t *b, int u, Raw &r) {
        ldw_a16<16>(b, r.hd);
        ldw_a8<8>(b + 16 + 8 * u, r.f);
        ldw_a16<32>(b + 48 + 32 * u, r.q);
    }
    template <int SW> static HD float dot(const Raw &r, int j, const int8_t *xq, const float2 *xd) {
        uint32_t lo[8], hi[8];
MM_UNROLL
        for (int i = 0; i < 8; i++) {
            const uint32_t f0 = i <= 4 ? r.f[0] << (4 - i) : r.f[0] >> (i - 4);
            const uint32_t f1 = i <= 4 ? r.f[1] << (4 - i) : r.f[1] >> (i - 4);
            lo[i] = (r.q[i] & 0x0f0f0f0fu) | (f0 & 0x10101010u);
            hi[i] = ((r.q[i] >> 4) & 0x0f0f0f0fu) | (f1 & 0x10101010u);
        }
        return k4_pair_dot<SW>(lo, hi, r.hd, j, xq, xd);
    }
};
/* Q2_K and Q3_K (layouts in quant.c): unit u = the 32 elements 32u.. of the superblock (half h =
 * u / 4, k = u % 4): bits 2k..2k+1 of the 32 quant bytes of half h (Q3_K: plus bit u of hmask[l]
 * as bit 2), two 16-element scale groups 2u, 2u + 1. The codes enter dp4a unsigned; Q2_K's mins
 * and Q3_K's offset -4 use the 16-element sums of x (dp4a with ones), as Q6_K's -32. */
HD int sum16x(int4 x) {
    const uint32_t ones[4] = {0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u};
    return dot16(ones, x, 0);
}
struct VQ2_K {
    typedef DecQ2_K Dec;
    enum { QK = 256, BB = 84, UPB = 8, A = 4 };
    struct Raw {
        uint32_t sc, dm, q[8]; /* sc: scale bytes 2u, 2u + 1 (low nibble scale, high nibble min) */
    };
    static HD void load(const uint8_t *b, int u, Raw &r) {
        r.sc = ld16(b + 2 * u);
        r.dm = ld32_a4(b + 80);
        ldw_a4<32>(b + 16 + 32 * (u >> 2), r.q);
    }
    template <int SW> static HD float dot(const Raw &r, int u, const int8_t *xq, const float2 *xd) {
        const int k = u & 3;
        uint32_t c[8];
MM_UNROLL
        for (int i = 0; i < 8; i++) c[i] = (r.q[i] >> (2 * k)) & 0x03030303u;
        const int4 x0 = ldx16s<SW>(xq + 32 * u), x1 = ldx16s<SW>(xq + 32 * u + 16);
        const int s0 = dot16(c, x0, 0), s1 = dot16(c + 4, x1, 0);
        const float sc0 = (float)(r.sc & 0xfu), m0 = (float)((r.sc >> 4) & 0xfu);
        const float sc1 = (float)((r.sc >> 8) & 0xfu), m1 = (float)((r.sc >> 12) & 0xfu);
        const float d = mm_h2f((uint16_t)(r.dm & 0xffffu)), dmin = mm_h2f((uint16_t)(r.dm >> 16));
        return xd[u].x * (d * (sc0 * (float)s0 + sc1 * (float)s1) - dmin * (m0 * (float)sum16x(x0) + m1 * (float)sum16x(x1)));
    }
};
struct VQ3_K {
    typedef DecQ3_K Dec;
    enum { QK = 256, BB = 110, UPB = 8, A = 2 };
    struct Raw {
        uint32_t d, sc[2], hm[8], q[8]; /* sc: the 6-bit scales 2u, 2u + 1, stored +32 */
    };
    static HD void load(const uint8_t *b, int u, Raw &r) {
        r.d = ld16(b + 108);
        ldw_u2<8>(b, r.hm);
        ldw_u2<8>(b + 32 + 32 * (u >> 2), r.q);
MM_UNROLL
        for (int t = 0; t < 2; t++) {
            const int s = 2 * u + t;
            const uint32_t lo = s < 8 ? b[96 + s] & 0xfu : (uint32_t)b[96 + s - 8] >> 4;
            r.sc[t] = lo | (((uint32_t)b[104 + (s & 3)] >> (2 * (s >> 2)) & 3u) << 4);
        }
    }
    template <int SW> static HD float dot(const Raw &r, int u, const int8_t *xq, const float2 *xd) {
        const int k = u & 3;
        uint32_t c[8];
MM_UNROLL
        for (int i = 0; i < 8; i++) c[i] = ((r.q[i] >> (2 * k)) & 0x03030303u) | (((r.hm[i] >> u) & 0x01010101u) << 2);
        const int4 x0 = ldx16s<SW>(xq + 32 * u), x1 = ldx16s<SW>(xq + 32 * u + 16);
        const int s0 = dot16(c, x0, 0) - 4 * sum16x(x0), s1 = dot16(c + 4, x1, 0) - 4 * sum16x(x1);
        return mm_h2f((uint16_t)r.d) * xd[u].x * ((float)((int)r.sc[0] - 32) * (float)s0 + (float)((int)r.sc[1] - 32) * (float)s1);
    }
};
/* Q6_K unit u (0..3): half h = u / 2, v = u % 2: elements 16v.. of the four 32-element quarters t
 * of half h, from ql bytes [64h + 16v, +16) (quarters 0, 2: low, high nibbles) and
 * [64h + 32 + 16v, +16) (quarters 1, 3), qh bytes [32h + 16v, +16) (bits 2t, 2t + 1), scales
 * 8h + 2t + v. The weights enter dp4a as unsigned 6-bit values; the -32 offset is applied as
 * -32 * sum(x) over the 16 elements (four more dp4a). */
struct VQ6_K {
    typedef DecQ6_K Dec;
    enum { QK = 256, BB = 210, UPB = 4, A = 2 };
    struct Raw {
        uint32_t la[4], lb[4], qh[4], sc[2], d;
    };
    static HD void load(const uint8_t *b, int u, Raw &r) {
        const int h = u >> 1, v = u & 1;
        ldw_u2<4>(b + 64 * h + 16 * v, r.la);
        ldw_u2<4>(b + 64 * h + 32 + 16 * v, r.lb);
        ldw_u2<4>(b + 128 + 32 * h + 16 * v, r.qh);
        ldw_u2<2>(b + 192 + 8 * h, r.sc);
        r.d = ld16(b + 208);
    }
    template <int SW> static HD float dot(const Raw &r, int u, const int8_t *xq, const float2 *xd) {
        const int h = u >> 1, v = u & 1;
        uint32_t q[4][4];
MM_UNROLL
        for (int i = 0; i < 4; i++) {
            q[0][i] = (r.la[i] & 0x0f0f0f0fu) | ((r.qh[i] << 4) & 0x30303030u);
            q[1][i] = (r.lb[i] & 0x0f0f0f0fu) | ((r.qh[i] << 2) & 0x30303030u);
            q[2][i] = ((r.la[i] >> 4) & 0x0f0f0f0fu) | (r.qh[i] & 0x30303030u);
            q[3][i] = ((r.lb[i] >> 4) & 0x0f0f0f0fu) | ((r.qh[i] >> 2) & 0x30303030u);
        }
        float acc = 0.0f;
MM_UNROLL
        for (int t = 0; t < 4; t++) {
            const int4 x = ldx16s<SW>(xq + 32 * (4 * h + t) + 16 * v);
            const int ones = 0x01010101;
            const int sx = mm_dp4a(ones, x.w, mm_dp4a(ones, x.z, mm_dp4a(ones, x.y, mm_dp4a(ones, x.x, 0))));
            const int dq = dot16(q[t], x, 0) - 32 * sx;
            const float sc = (float)(int8_t)(uint8_t)(r.sc[t >> 1] >> (8 * (v + 2 * (t & 1))));
            acc += sc * xd[4 * h + t].x * (float)dq;
        }
        return mm_h2f((uint16_t)r.d) * acc;
    }
};
/* Q6_K X8 (see DecQ6_KX8): unit k of a group = unit k % 4 of superblock k / 4, its quants as
 * 16-byte aligned loads; VQ6_K's raw words and dot. */
struct VQ6_KX8 {
    typedef DecQ6_KX8 Dec;
    enum { QK = 2048, BB = 1680, UPB = 32, A = 16 };
    typedef VQ6_K::Raw Raw;
    static HD void load(const uint8_t *b, int k, Raw &r) {
        const int s = k >> 2, h = (k >> 1) & 1, v = k & 1;
        const uint8_t *q = b + 144 + 192 * s;
        ldw_a16<16>(q + 64 * h + 16 * v, r.la);
        ldw_a16<16>(q + 64 * h + 32 + 16 * v, r.lb);
        ldw_a16<16>(q + 128 + 32 * h + 16 * v, r.qh);
        ldw_a4<8>(b + 16 + 16 * s + 8 * h, r.sc);
        r.d = ld16(b + 2 * s);
    }
    template <int SW> static HD float dot(const Raw &r, int k, const int8_t *xq, const float2 *xd) {
        return VQ6_K::dot<SW>(r, k & 3, xq + 256 * (k >> 2), xd + 8 * (k >> 2));
    }
};
