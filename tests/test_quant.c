/* Reference dequantization of every supported GGUF weight type.
 *
 * 1. Hand-built blocks: bytes written from known scales/mins/quants, specific elements checked
 *    against values computed by hand from the documented layout.
 * 2. An independent decoder written here (element-at-a-time, bit extraction by element index,
 *    no shared structure with quant.c) compared bit-exactly on random blocks with sane f16
 *    scales.
 * 3. Encode/decode round trips for every type with an encoder.
 * 4. Real tensors from /work/shared/models/tiny-llama-<type>.gguf (made by llama.cpp's
 *    llama-quantize from tiny-llama-f32.gguf) decoded and compared with the f32 file's tensor:
 *    relative L2 error per type below a measured bound (see BOUNDS). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/gguf.h"
#include "core/quant.h"
#include "core/util.h"
#include "test.h"

static const int8_t IQ4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static float h2f(const uint8_t *p) { return rf_fp16_to_fp32((uint16_t)(p[0] | (p[1] << 8))); }
static void f2h(uint8_t *p, float f) {
    uint16_t h = rf_fp32_to_fp16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}
/* Bit `i` of a little-endian bit string. */
static int bit(const uint8_t *p, int i) { return (p[i >> 3] >> (i & 7)) & 1; }
/* Nibble of element j (0..31) in a 16-byte legacy quant array: j<16 low nibble of byte j. */
static int nib32(const uint8_t *qs, int j) { return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4); }

/* Q4_K/Q5_K 6-bit scale and min of sub-block j, by bit extraction from the 96-bit field. */
static void k_sm(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[4 + j] & 63;
    } else {
        *sc = (s[8 + j - 4] & 15) + 16 * bit(s, 8 * (j - 4) + 6) + 32 * bit(s, 8 * (j - 4) + 7);
        *mn = (s[8 + j - 4] >> 4) + 16 * bit(s, 8 * j + 6) + 32 * bit(s, 8 * j + 7);
    }
}

/* Independent decode of element e of the block at p (float arithmetic in ggml's order). */
static float ref_elem(uint32_t type, const uint8_t *p, int e) {
    switch (type) {
    case RF_TYPE_Q4_0: return (float)(nib32(p + 2, e) - 8) * h2f(p);
    case RF_TYPE_Q4_1: return (float)nib32(p + 4, e) * h2f(p) + h2f(p + 2);
    case RF_TYPE_Q5_0: return (float)(nib32(p + 6, e) + 16 * bit(p + 2, e) - 16) * h2f(p);
    case RF_TYPE_Q5_1: return (float)(nib32(p + 8, e) + 16 * bit(p + 4, e)) * h2f(p) + h2f(p + 2);
    case RF_TYPE_Q8_0: return (float)(int8_t)p[2 + e] * h2f(p);
    case RF_TYPE_IQ4_NL: return h2f(p) * (float)IQ4[nib32(p + 2, e)];
    case RF_TYPE_Q2_K: {
        const int half = e / 128, k = (e % 128) / 32, l = e % 32, s = e / 16;
        const int q = bit(p + 16, 8 * (32 * half + l) + 2 * k) + 2 * bit(p + 16, 8 * (32 * half + l) + 2 * k + 1);
        const float dl = h2f(p + 80) * (float)(p[s] & 15), ml = h2f(p + 82) * (float)(p[s] >> 4);
        return dl * (float)q - ml;
    }
    case RF_TYPE_Q3_K: {
        const int half = e / 128, k = (e % 128) / 32, l = e % 32, s = e / 16;
        const uint8_t *qs = p + 32, *sc = p + 96;
        const int lo2 = bit(qs, 8 * (32 * half + l) + 2 * k) + 2 * bit(qs, 8 * (32 * half + l) + 2 * k + 1);
        const int hb = bit(p, 8 * l + 4 * half + k);
        /* 6-bit scale s: bits 0-3 are bits 4*s .. 4*s+3 of the first 8 bytes read as nibbles in
         * the order (byte0 lo, byte1 lo, ... byte7 lo, byte0 hi, ...); bits 4-5 from byte 8+s%4. */
        const int low4 = s < 8 ? (sc[s] & 15) : (sc[s - 8] >> 4);
        const int hi2 = bit(sc + 8, 8 * (s % 4) + 2 * (s / 4)) + 2 * bit(sc + 8, 8 * (s % 4) + 2 * (s / 4) + 1);
        const float dl = h2f(p + 108) * (float)(low4 + 16 * hi2 - 32);
        return dl * (float)(lo2 + 4 * hb - 4);
    }
    case RF_TYPE_Q4_K:
    case RF_TYPE_Q5_K: {
        const int s = e / 32, l = e % 32, c = e / 64;
        int sc, mn;
        k_sm(p + 4, s, &sc, &mn);
        const uint8_t *qs = p + (type == RF_TYPE_Q4_K ? 16 : 48);
        int q = (s & 1) ? (qs[32 * c + l] >> 4) : (qs[32 * c + l] & 15);
        if (type == RF_TYPE_Q5_K) q += 16 * bit(p + 16, 8 * l + s);
        return h2f(p) * (float)sc * (float)q - h2f(p + 2) * (float)mn;
    }
    case RF_TYPE_Q6_K: {
        const int half = e / 128, g = (e % 128) / 32, l = e % 32;
        const uint8_t lb = p[64 * half + l + 32 * (g & 1)];
        const int lo = (g >= 2) ? (lb >> 4) : (lb & 15);
        const int hi = bit(p + 128, 8 * (32 * half + l) + 2 * g) + 2 * bit(p + 128, 8 * (32 * half + l) + 2 * g + 1);
        return h2f(p + 208) * (float)(int8_t)p[192 + e / 16] * (float)(lo + 16 * hi - 32);
    }
    case RF_TYPE_IQ4_XS: {
        const int s = e / 32, j = e % 32;
        int ls = 0;
        for (int b = 0; b < 4; b++) ls += bit(p + 4, 4 * s + b) << b;
        ls += (bit(p + 2, 2 * s) << 4) + (bit(p + 2, 2 * s + 1) << 5);
        return h2f(p) * (float)(ls - 32) * (float)IQ4[nib32(p + 8 + 16 * s, j)];
    }
    }
    return NAN;
}

/* Byte offsets of the f16 fields of each type (set to sane values in random blocks). */
static int f16_fields(uint32_t type, int off[2]) {
    switch (type) {
    case RF_TYPE_Q4_0: case RF_TYPE_Q5_0: case RF_TYPE_Q8_0: case RF_TYPE_IQ4_NL: case RF_TYPE_IQ4_XS:
        off[0] = 0; return 1;
    case RF_TYPE_Q4_1: case RF_TYPE_Q5_1: case RF_TYPE_Q4_K: case RF_TYPE_Q5_K:
        off[0] = 0; off[1] = 2; return 2;
    case RF_TYPE_Q2_K: off[0] = 80; off[1] = 82; return 2;
    case RF_TYPE_Q3_K: off[0] = 108; return 1;
    case RF_TYPE_Q6_K: off[0] = 208; return 1;
    }
    return 0;
}

static const uint32_t QTYPES[] = {RF_TYPE_Q4_0, RF_TYPE_Q4_1, RF_TYPE_Q5_0, RF_TYPE_Q5_1, RF_TYPE_Q8_0,
                                  RF_TYPE_Q2_K, RF_TYPE_Q3_K, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K,
                                  RF_TYPE_IQ4_NL, RF_TYPE_IQ4_XS};

static void random_blocks(uint32_t type, uint8_t *buf, int nb) {
    const rf_type_info *ti = rf_type_get(type);
    for (size_t i = 0; i < (size_t)nb * ti->block_bytes; i++) buf[i] = (uint8_t)test_rng();
    int off[2];
    const int nf = f16_fields(type, off);
    for (int b = 0; b < nb; b++)
        for (int f = 0; f < nf; f++) f2h(buf + (size_t)b * ti->block_bytes + off[f], test_randf(-2.0f, 2.0f));
}

static void test_random_vs_independent(void) {
    for (size_t t = 0; t < RF_ARRAY_LEN(QTYPES); t++) {
        const uint32_t type = QTYPES[t];
        const rf_type_info *ti = rf_type_get(type);
        CHECK(ti && ti->supported, "%s supported", rf_type_name(type));
        const int nb = 64, n = nb * (int)ti->block_elems;
        uint8_t *buf = malloc((size_t)nb * ti->block_bytes);
        float *out = malloc(sizeof(float) * (size_t)n);
        random_blocks(type, buf, nb);
        CHECK(rf_dequantize_row(type, buf, out, n) == 0, "%s decodes", ti->name);
        int bad = 0, first = -1;
        for (int e = 0; e < n; e++) {
            const float r = ref_elem(type, buf + (size_t)(e / ti->block_elems) * ti->block_bytes, e % (int)ti->block_elems);
            if (memcmp(&r, &out[e], 4) != 0) {
                if (first < 0) first = e;
                bad++;
            }
        }
        CHECK(bad == 0, "%s: %d of %d elements differ from the independent decoder (first %d)", ti->name, bad, n, first);
        free(buf);
        free(out);
    }
}

/* Hand-built blocks: every field set to known values, a few elements checked by hand. */
static void test_hand_blocks(void) {
    float y[256];
    uint8_t b[256];

    /* Q4_0: d = 0.5; byte 3 = 0xA2 -> element 3 = (2-8)*0.5 = -3, element 19 = (10-8)*0.5 = 1. */
    memset(b, 0x88, sizeof b);
    f2h(b, 0.5f);
    b[2 + 3] = 0xA2;
    rf_dequantize_row(RF_TYPE_Q4_0, b, y, 32);
    CHECK(y[3] == -3.0f && y[19] == 1.0f && y[0] == 0.0f, "q4_0 hand: %g %g %g", y[3], y[19], y[0]);

    /* Q4_1: d = 0.25, m = -1; byte 0 = 0xF0 -> e0 = -1, e16 = 15*0.25 - 1 = 2.75. */
    memset(b, 0, sizeof b);
    f2h(b, 0.25f);
    f2h(b + 2, -1.0f);
    b[4] = 0xF0;
    rf_dequantize_row(RF_TYPE_Q4_1, b, y, 32);
    CHECK(y[0] == -1.0f && y[16] == 2.75f, "q4_1 hand: %g %g", y[0], y[16]);

    /* Q5_0: d = 1; qh bit 5 and bit 20 set; qs[5] = 0x31, qs[4] = 0x00.
     * e5 = (1 + 16) - 16 = 1; e21 = (3 + 0) - 16 = -13; e20 = (0 + 16) - 16 = 0; e4 = -16. */
    memset(b, 0, sizeof b);
    f2h(b, 1.0f);
    const uint32_t qh = (1u << 5) | (1u << 20);
    memcpy(b + 2, &qh, 4);
    b[6 + 5] = 0x31;
    rf_dequantize_row(RF_TYPE_Q5_0, b, y, 32);
    CHECK(y[5] == 1.0f && y[21] == -13.0f && y[20] == 0.0f && y[4] == -16.0f, "q5_0 hand: %g %g %g %g", y[5], y[21], y[20], y[4]);

    /* Q5_1: d = 0.5, m = 1, qh bit 31 set, qs[15] = 0xF0: e31 = 31*0.5+1 = 16.5, e15 = 1. */
    memset(b, 0, sizeof b);
    f2h(b, 0.5f);
    f2h(b + 2, 1.0f);
    const uint32_t qh1 = 1u << 31;
    memcpy(b + 4, &qh1, 4);
    b[8 + 15] = 0xF0;
    rf_dequantize_row(RF_TYPE_Q5_1, b, y, 32);
    CHECK(y[31] == 16.5f && y[15] == 1.0f, "q5_1 hand: %g %g", y[31], y[15]);

    /* Q8_0: d = 2, q[7] = -5 -> -10. */
    memset(b, 0, sizeof b);
    f2h(b, 2.0f);
    b[2 + 7] = (uint8_t)-5;
    rf_dequantize_row(RF_TYPE_Q8_0, b, y, 32);
    CHECK(y[7] == -10.0f && y[8] == 0.0f, "q8_0 hand: %g", y[7]);

    /* IQ4_NL: d = 0.5; byte 0 = 0xF0 -> e0 = -127*0.5, e16 = 113*0.5. */
    memset(b, 0x88, sizeof b);
    f2h(b, 0.5f);
    b[2] = 0xF0;
    rf_dequantize_row(RF_TYPE_IQ4_NL, b, y, 32);
    CHECK(y[0] == -63.5f && y[16] == 56.5f && y[1] == 0.5f, "iq4_nl hand: %g %g %g", y[0], y[16], y[1]);

    /* Q2_K: d = 1, dmin = 0.5. scales[0] = 0x23 (sc 3, m 2); scales[5] = 0x14 (sc 4, m 1).
     * qs[0] = 0b11100100: e0 = q 0 (bits 0-1), e32 = q 1, e64 = q 2, e96 = q 3.
     * e0: sub 0 -> 3*0 - 0.5*2 = -1; e32 is sub-block 2 (scales[2]=0 -> 0 - 0 = 0);
     * e80 = 64 + 16: sub 5, byte qs[16], bits 4-5. Set qs[16] = 0x30 -> q 3 -> 4*3 - 0.5 = 11.5. */
    memset(b, 0, sizeof b);
    b[0] = 0x23;
    b[5] = 0x14;
    b[16 + 0] = 0xE4;
    b[16 + 16] = 0x30;
    f2h(b + 80, 1.0f);
    f2h(b + 82, 0.5f);
    rf_dequantize_row(RF_TYPE_Q2_K, b, y, 256);
    CHECK(y[0] == -1.0f && y[32] == 0.0f && y[80] == 11.5f, "q2_k hand: %g %g %g", y[0], y[32], y[80]);

    /* Q3_K: d = 1; all scales 6-bit value 33 (-> +1) except scale 9 = 40 (-> +8).
     * 33 = 0b100001: low4 = 1, hi2 = 2. 40 = 0b101000: low4 = 8, hi2 = 2.
     * scale bytes 0..7: low nibble = scales 0..7 low4, high nibble = scales 8..15 low4.
     * byte 8+s%4, bits 2*(s/4): hi2 = 2 for all -> each of bytes 8..11 = 0b10101010.
     * e0: qs[0] bits 0-1 = 3, hmask[0] bit 0 set -> 3 -> 1*3 = 3.
     * e144 = 128 + 16: half 1, k 0, l 16, sub 9: qs[32+16] bits 0-1 = 1, hmask[16] bit 4 clear
     *   -> 1 - 4 = -3 -> 8 * -3 = -24. */
    memset(b, 0, sizeof b);
    for (int i = 0; i < 8; i++) b[96 + i] = 0x11;
    b[96 + 1] = 0x81; /* scale 9 low4 = 8 (high nibble of byte 1) */
    for (int i = 8; i < 12; i++) b[96 + i] = 0xAA;
    b[32 + 0] = 0x03;
    b[0] = 0x01;
    b[32 + 48] = 0x01;
    f2h(b + 108, 1.0f);
    rf_dequantize_row(RF_TYPE_Q3_K, b, y, 256);
    CHECK(y[0] == 3.0f && y[144] == -24.0f && y[1] == -4.0f, "q3_k hand: %g %g %g", y[0], y[144], y[1]);

    /* Q4_K: d = 1, dmin = 1. Sub-block 1: scale 2, min 1 (j<4: scales[1] = 2, scales[5] = 1).
     * Sub-block 6: scale 35 = 0b100011, min 17 = 0b010001:
     *   scales[10] low nibble = 3, high nibble = 1; top bits of scales[2] = 2 (scale hi), of
     *   scales[6] = 1 (min hi).
     * e32 = high nibble of qs[0] (sub 1): qs[0] = 0x70 -> 2*7 - 1 = 13.
     * e192 + 5 = sub 6 (low nibble of qs[96 + 5]): qs[101] = 0x04 -> 35*4 - 17 = 123. */
    memset(b, 0, sizeof b);
    f2h(b, 1.0f);
    f2h(b + 2, 1.0f);
    b[4 + 1] = 2;
    b[4 + 5] = 1;
    b[4 + 10] = 0x13;
    b[4 + 2] = 0x80;
    b[4 + 6] = 0x40;
    b[16 + 0] = 0x70;
    b[16 + 101] = 0x04;
    rf_dequantize_row(RF_TYPE_Q4_K, b, y, 256);
    CHECK(y[32] == 13.0f && y[197] == 123.0f && y[0] == 0.0f, "q4_k hand: %g %g %g", y[32], y[197], y[0]);

    /* Q5_K: same scales; e197 also gets qh[5] bit 6 -> q = 4 + 16 = 20 -> 35*20 - 17 = 683. */
    memset(b + 16, 0, 160);
    b[16 + 5] = 1 << 6;
    b[48 + 101] = 0x04;
    rf_dequantize_row(RF_TYPE_Q5_K, b, y, 256);
    CHECK(y[197] == 683.0f, "q5_k hand: %g", y[197]);

    /* Q6_K: d = 0.5, scales[0] = 2, scales[14] = -3.
     * e0: ql[0] low = 5, qh[0] bits 0-1 = 2 -> 5 + 32 - 32 = 5 -> 0.5*2*5 = 5.
     * e224 = 128 + 96: half 1, g 3, l 0: ql[64+32] high nibble, qh[32] bits 6-7; sub 14.
     *   ql[96] = 0x10, qh[32] = 0x00 -> q = 1 - 32 = -31 -> 0.5 * -3 * -31 = 46.5. */
    memset(b, 0, sizeof b);
    b[0] = 0x05;
    b[128] = 0x02;
    b[96] = 0x10;
    b[192] = 2;
    b[192 + 14] = (uint8_t)-3;
    f2h(b + 208, 0.5f);
    rf_dequantize_row(RF_TYPE_Q6_K, b, y, 256);
    CHECK(y[0] == 5.0f && y[224] == 46.5f, "q6_k hand: %g %g", y[0], y[224]);

    /* IQ4_XS: d = 1; sub-block 3 scale 6-bit 34 = 0b100010: scales_l[1] high nibble = 2,
     * scales_h bits 6-7 = 2. e96 + 17 = sub 3, j 17: high nibble of qs[48 + 1] = 0xF -> 113*2. */
    memset(b, 0, sizeof b);
    f2h(b, 1.0f);
    const uint16_t sh = 2u << 6;
    memcpy(b + 2, &sh, 2);
    b[4 + 1] = 0x20;
    b[8 + 48 + 1] = 0xF0;
    rf_dequantize_row(RF_TYPE_IQ4_XS, b, y, 256);
    CHECK(y[113] == 226.0f && y[0] == -32.0f * -127.0f, "iq4_xs hand: %g %g", y[113], y[0]);
}

/* Encoders: decode(encode(x)) close to x (bounds: the type's step size), and exact codes. */
static void test_roundtrip(void) {
    static const struct { uint32_t type; double bound; } enc[] = {
        {RF_TYPE_Q4_0, 0.12}, {RF_TYPE_Q4_1, 0.10}, {RF_TYPE_Q5_0, 0.06}, {RF_TYPE_Q5_1, 0.05},
        {RF_TYPE_Q8_0, 0.01}, {RF_TYPE_Q4_K, 0.12}, {RF_TYPE_Q5_K, 0.06}, {RF_TYPE_Q6_K, 0.03},
        {RF_TYPE_IQ4_NL, 0.12}, {RF_TYPE_F16, 1e-3}, {RF_TYPE_BF16, 5e-3},
    };
    const int n = 1024;
    float x[1024], y[1024];
    uint8_t buf[4096];
    for (int i = 0; i < n; i++) x[i] = test_randf(-1.0f, 1.0f) * (1.0f + (float)(i % 7));
    for (size_t k = 0; k < RF_ARRAY_LEN(enc); k++) {
        CHECK(rf_quantize_row(enc[k].type, x, buf, n) == 0, "%s encodes", rf_type_name(enc[k].type));
        rf_dequantize_row(enc[k].type, buf, y, n);
        const double e = test_rel_l2(y, x, (size_t)n);
        CHECK(e < enc[k].bound, "%s round trip rel L2 %.4f >= %.3f", rf_type_name(enc[k].type), e, enc[k].bound);
    }
    /* Exact values survive: integers -8..7 encode exactly in Q4_0 (d = -1 from vmax -8). */
    for (int i = 0; i < 32; i++) x[i] = (float)(i % 16 - 8);
    rf_quantize_row(RF_TYPE_Q4_0, x, buf, 32);
    rf_dequantize_row(RF_TYPE_Q4_0, buf, y, 32);
    CHECK(memcmp(x, y, 32 * 4) == 0, "q4_0 exact integers");
    /* All zeros stay zeros (no NaN from 0/0). */
    memset(x, 0, sizeof x);
    for (size_t k = 0; k < RF_ARRAY_LEN(enc); k++) {
        rf_quantize_row(enc[k].type, x, buf, 256);
        rf_dequantize_row(enc[k].type, buf, y, 256);
        int nz = 0;
        for (int i = 0; i < 256; i++) nz += y[i] != 0.0f;
        CHECK(nz == 0, "%s zeros decode to zeros (%d non-zero)", rf_type_name(enc[k].type), nz);
    }
    CHECK(rf_quantize_row(RF_TYPE_IQ2_XXS, x, buf, 256) == -1, "no encoder for iq2_xxs");
    CHECK(rf_dequantize_row(RF_TYPE_IQ2_XXS, buf, y, 256) == -1, "iq2_xxs not decoded");
}

/* Real files. Bounds measured on these files (worst tensor, rounded up with margin). */
static void test_real_files(void) {
    static const struct { const char *file; double bound; } files[] = {
        /* measured worst tensor: f16 .0002 bf16 .0017 q8_0 .0054 q4_0 .086 q4_1 .079 q5_0 .043
         * q5_1 .038 q2_k .298 q3_k_m .151 q4_k_m .072 q5_k_m .036 q6_k .018 iq4_nl .077 iq4_xs .077 */
        {"f16", 5e-4},   {"bf16", 3e-3},  {"q8_0", 0.008}, {"q4_0", 0.10},   {"q4_1", 0.10},
        {"q5_0", 0.055}, {"q5_1", 0.05},  {"q2_k", 0.35},  {"q3_k_m", 0.2},  {"q4_k_m", 0.09},
        {"q5_k_m", 0.045}, {"q6_k", 0.023}, {"iq4_nl", 0.095}, {"iq4_xs", 0.095},
    };
    char path[256];
    snprintf(path, sizeof path, "%s", test_shared("models/tiny-llama-f32.gguf"));
    if (!test_file_exists(path)) {
        SKIP("%s missing", path);
        return;
    }
    uint64_t types_seen = 0;
    rf_gguf *ref = rf_gguf_open(path);
    if (!ref) {
        SKIP("gguf reader cannot open %s yet: %s", path, rf_last_error());
        return;
    }
    for (size_t f = 0; f < RF_ARRAY_LEN(files); f++) {
        char qp[256];
        snprintf(qp, sizeof qp, "models/tiny-llama-%s.gguf", files[f].file);
        rf_gguf *g = rf_gguf_open(test_shared(qp));
        if (!g) {
            SKIP("%s: %s", qp, rf_last_error());
            continue;
        }
        double worst = 0;
        int n_checked = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const rf_gguf_tensor *t = &g->tensors[i];
            const rf_gguf_tensor *r = rf_gguf_find_tensor(ref, t->name);
            if (!r || r->type != RF_TYPE_F32 || r->n_elems != t->n_elems || t->type == RF_TYPE_F32) continue;
            float *y = malloc(sizeof(float) * t->n_elems);
            int rc = rf_dequantize_row(t->type, t->data, y, (int64_t)t->n_elems);
            CHECK(rc == 0, "%s %s (%s) decodes", qp, t->name, rf_type_name(t->type));
            if (rc == 0) {
                const double e = test_rel_l2(y, (const float *)r->data, t->n_elems);
                if (e > worst) worst = e;
                CHECK(e < files[f].bound, "%s %s (%s): rel L2 %.4f >= %.3f", qp, t->name, rf_type_name(t->type), e,
                      files[f].bound);
                n_checked++;
                types_seen |= 1ull << t->type;
            }
            free(y);
        }
        CHECK(n_checked > 0, "%s: some quantized tensors checked", qp);
        if (getenv("RF_TEST_VERBOSE")) printf("%-8s %2d tensors, worst rel L2 %.4f\n", files[f].file, n_checked, worst);
        rf_gguf_close(g);
    }
    rf_gguf_close(ref);
    /* The files must have exercised every quantized type this build decodes. */
    for (size_t t = 0; t < RF_ARRAY_LEN(QTYPES); t++)
        CHECK(types_seen >> QTYPES[t] & 1, "a real %s tensor was checked", rf_type_name(QTYPES[t]));
}

int main(void) {
    test_hand_blocks();
    test_random_vs_independent();
    test_roundtrip();
    test_real_files();
    return test_finish();
}
