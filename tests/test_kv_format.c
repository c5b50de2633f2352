/* The K/V cache row formats (core/kv_format.h), the oracle every backend's cache writer and
 * reader is checked against, checked here first:
 * 1. Q8_0 blocks whose codes and scale were worked out by hand from the rule in kv_format.h
 *    (scale = fp16(amax / 127), codes roundf(x * 127 / amax) with the f32 reciprocal, exact .5
 *    ties away from zero, |q| <= 127, all-zero block, NaN / inf element, fp16(d) overflow at
 *    amax = 65520 * 127, a scale that underflows to zero).
 * 2. Row layout: row bytes for kv_dim 32 .. 4096, codes then little-endian scales then zeroed
 *    padding, nothing written past the row; reading sub-ranges; a hand-built row (code -128,
 *    negative scale) read as the layout says.
 * 3. Random blocks over magnitudes 3e-2 .. 1e5: the properties the rule implies (|q| <= 127, the
 *    largest element gets +-127, each code the nearest integer to x * id, the read value q *
 *    fp16(d) exactly) and the error a q8_0 cache adds (RF_TEST_VERBOSE=1 prints it: RMS ~0.23%
 *    of the block's amax, at most amax / 254 plus the scale's f16 rounding).
 * 4. The f32 and f16 rows (copy; round to nearest even, overflow to inf, NaN stays NaN).
 * 5. Q4_0 blocks worked out by hand from the rule (m the first element of largest |x|, negative
 *    and positive; d = m / -8; codes (int)(x * id + 8.5) clamped at 15, so .5 ties go up and
 *    x = -m gets 15; an inexact f32 reciprocal; fp16(d) rounded up, subnormal, underflowing to
 *    0, the largest below overflow; the all-zero block; NaN / inf elements and fp16(d) overflow at
 *    |m| = 65520 * 8 give codes 8 and scale 0x7e00).
 * 6. Q4_0 row layout: row bytes for kv_dim 32 .. 4096, a kv_dim 64 row compared byte by byte
 *    with one built by hand (the nibble of element 8w + j at bits 4 (j / 2) + 16 (j % 2) of
 *    little-endian word w, scales little-endian after kv_dim / 2 bytes, zeroed padding, nothing
 *    written past the row), a hand-built row read back, sub-range reads, kv_dim 512 and 4096.
 * 7. Random Q4_0 blocks over magnitudes 3e-2 .. 1e5: codes in 0..15, the first element of
 *    largest |x| reads back as exactly -8 * fp16(d), each code (c - 8) within 1/2 of x * id (ties
 *    up) unless clamped at 15, and the error bound: |error| <= |d| / 2 + 8 |fp16(d) - d| <=
 *    amax (1/16 + 1/2048), amax (1/8 + 1/2048) for the clamped x near -m (RF_TEST_VERBOSE=1
 *    prints the RMS: ~3.9% of the block's amax, 17x q8_0's; 6.5% and 8.6% of an element's RMS
 *    for uniform and Gaussian blocks). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/kv_format.h"
#include "core/util.h"
#include "test.h"

enum { B = RF_KV_Q8_BLOCK };

typedef struct {
    const char *what;
    float x[B];   /* elements not listed are 0 */
    int8_t q[B];  /* expected codes */
    uint16_t d;   /* expected binary16 scale */
} hand_block;

/* Worked out by hand (f32 arithmetic where the rule says f32):
 *  A: amax 127: d = 1 exactly (0x3c00), id = 1, so q = roundf(x): 2.5 -> 3, -2.5 -> -3, 0.5 -> 1,
 *     -0.5 -> -1, 1.5 -> 2, 126.5 -> 127, 3.49 -> 3, -3.51 -> -4; the amax element is negative.
 *  B: amax 254: d = 2 (0x4000), id = 0.5: 5 -> 2.5 -> 3, -5 -> -3, 3 -> 1.5 -> 2, 1 -> 0.5 -> 1,
 *     -253 -> -126.5 -> -127, 0.999 -> 0.4995 -> 0, 254 -> 127.
 *  C: amax 1: d = 1/127 = 0.0078740157 in f32, stored as fp16 0x2008 = 0.00787353515625 (rounded
 *     down), id = 1 / d = 127 exactly in f32: 0.5 -> 63.5 -> 64, 0.25 -> 31.75 -> 32,
 *     -0.125 -> -15.875 -> -16.
 *  D: amax 100: d = 0.78740156 rounds *up* to fp16 0x3a4d = 0.78759765625; id = 1.27 (f32
 *     1.26999998): -50 * id = -63.4999990 rounds to the f32 -63.5 -> -64; 30 -> 38.1 -> 38.
 *  E: all zeros (and -0): d = 0 (0x0000), q = 0.
 *  F: amax 65519 * 127 = 8320913: d = 65519, the largest value below fp16's overflow threshold
 *     65520, stored as 65504 (0x7bff); codes 127 / -127 / 64 (x * id = 127.000008 and 63.500004 in f32).
 *  G: amax 1e-6: d = 7.9e-9 rounds to fp16 0 (0x0000), yet the codes follow the f32 id
 *     (1e-6 * id = 126.99999 -> 127): the block reads as zeros, as llama.cpp's q8_0 does.
 *  H: amax 1e-5: d = 7.87e-8, the fp16 subnormal 0x0001 (5.96e-8); -5e-6 * id = -63.5 -> -64. */
static const hand_block HAND[] = {
    {"A amax 127", {2.5f, -2.5f, 0.5f, -0.5f, 1.5f, 126.5f, -127.0f, 3.49f, -3.51f, -0.0f, 127.0f},
     {3, -3, 1, -1, 2, 127, -127, 3, -4, 0, 127}, 0x3c00},
    {"B amax 254", {5.0f, -5.0f, 3.0f, -3.0f, 1.0f, -1.0f, -253.0f, 0.999f, 254.0f},
     {3, -3, 2, -2, 1, -1, -127, 0, 127}, 0x4000},
    {"C amax 1", {1.0f, -1.0f, 0.5f, -0.5f, 0.25f, -0.125f}, {127, -127, 64, -64, 32, -16}, 0x2008},
    {"D amax 100", {100.0f, -50.0f, 30.0f}, {127, -64, 38}, 0x3a4d},
    {"E zeros", {0.0f, -0.0f}, {0}, 0x0000},
    {"F amax 65519*127", {8320913.0f, -8320913.0f, 4160456.5f}, {127, -127, 64}, 0x7bff},
    {"G amax 1e-6", {1e-6f, -1e-6f}, {127, -127}, 0x0000},
    {"H amax 1e-5", {1e-5f, -5e-6f}, {127, -64}, 0x0001},
};

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static void test_hand_blocks(void) {
    for (size_t k = 0; k < sizeof HAND / sizeof HAND[0]; k++) {
        const hand_block *h = &HAND[k];
        int8_t q[B];
        uint16_t d = 0x1234;
        memset(q, 0x55, B);
        rf_kv_q8_block(h->x, q, &d);
        int bad = -1;
        for (int i = 0; i < B && bad < 0; i++)
            if (q[i] != h->q[i]) bad = i;
        CHECK(d == h->d, "block %s: scale 0x%04x, expected 0x%04x", h->what, d, h->d);
        CHECK(bad < 0, "block %s: code %d is %d, expected %d (x = %.9g)", h->what, bad, bad < 0 ? 0 : q[bad],
              bad < 0 ? 0 : h->q[bad], bad < 0 ? 0.0 : h->x[bad]);
        /* the same block through a row (kv_dim 32: 32 codes, scale at byte 32, 14 bytes padding) */
        uint8_t row[64];
        memset(row, 0xAA, sizeof row);
        rf_kv_write_row(RF_TYPE_Q8_0, h->x, B, row);
        int pad_ok = 1;
        for (int i = 34; i < 48; i++) pad_ok &= row[i] == 0;
        for (int i = 48; i < 64; i++) pad_ok &= row[i] == 0xAA;
        CHECK(!memcmp(row, h->q, B) && le16(row + 32) == h->d && pad_ok,
              "block %s as a kv_dim 32 row: codes, scale 0x%04x, padding zero and nothing past byte 48", h->what,
              le16(row + 32));
        float out[B + 1];
        out[B] = 42.0f;
        rf_kv_read_row(RF_TYPE_Q8_0, row, B, 0, B, out);
        const float dv = rf_fp16_to_fp32(h->d);
        int rd = 1;
        for (int i = 0; i < B; i++) rd &= out[i] == (float)h->q[i] * dv;
        CHECK(rd && out[B] == 42.0f, "block %s: read back as q * fp16(d)", h->what);
    }
    /* a few reads written out as numbers */
    float out[B];
    uint8_t row[48];
    rf_kv_write_row(RF_TYPE_Q8_0, HAND[2].x, B, row);
    rf_kv_read_row(RF_TYPE_Q8_0, row, B, 0, B, out);
    CHECK(out[0] == 0.99993896484375f && out[2] == 0.50390625f && out[5] == -0.1259765625f && out[6] == 0.0f,
          "block C reads 127, 64, -16 times 0.00787353515625: %.9g %.9g %.9g", out[0], out[2], out[5]);
    rf_kv_write_row(RF_TYPE_Q8_0, HAND[1].x, B, row);
    rf_kv_read_row(RF_TYPE_Q8_0, row, B, 0, B, out);
    CHECK(out[0] == 6.0f && out[1] == -6.0f && out[6] == -254.0f && out[7] == 0.0f && out[8] == 254.0f,
          "block B reads 6 -6 -254 0 254: %g %g %g %g %g", out[0], out[1], out[6], out[7], out[8]);

    /* non-finite elements and scale overflow: q = 0 everywhere, d = NaN (0x7e00), reads NaN */
    static const struct { const char *what; int at; float v; float amax; } bad[] = {
        {"NaN", 17, NAN, 1.0f},           {"+inf", 0, INFINITY, 1.0f},        {"-inf", 31, -INFINITY, 1.0f},
        {"NaN with large neighbours", 5, NAN, 1e6f},
        {"amax 65520 * 127 (fp16(d) = 65520 ties to inf)", 3, 8321040.0f, 1.0f},
        {"amax -8.4e6", 9, -8.4e6f, 1.0f}, {"amax 3e38", 9, 3e38f, 1.0f},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        float x[B];
        for (int i = 0; i < B; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * bad[k].amax * (float)(i + 1) / B;
        x[bad[k].at] = bad[k].v;
        int8_t q[B];
        uint16_t d;
        memset(q, 0x55, B);
        rf_kv_q8_block(x, q, &d);
        int zero = 1;
        for (int i = 0; i < B; i++) zero &= q[i] == 0;
        CHECK(zero && d == 0x7e00, "block with %s: codes all 0 and scale 0x7e00 (got 0x%04x)", bad[k].what, d);
        /* as block 1 of a kv_dim 96 row: blocks 0 and 2 unaffected, all 32 of block 1 read NaN */
        float row_x[96], out[96];
        for (int i = 0; i < 96; i++) row_x[i] = i < 32 ? 127.0f - (float)i : i < 64 ? x[i - 32] : 254.0f;
        uint8_t row[112];
        rf_kv_write_row(RF_TYPE_Q8_0, row_x, 96, row);
        rf_kv_read_row(RF_TYPE_Q8_0, row, 96, 0, 96, out);
        int ok = 1;
        for (int i = 0; i < 96; i++) ok &= i < 32 ? out[i] == 127.0f - (float)i : i < 64 ? isnan(out[i]) : out[i] == 254.0f;
        CHECK(ok, "row with a %s block: only that block's 32 elements read NaN", bad[k].what);
    }
}

static void test_rows(void) {
    static const struct { uint32_t t; int64_t kv_dim; size_t bytes; } rb[] = {
        {RF_TYPE_Q8_0, 64, 80},     {RF_TYPE_Q8_0, 512, 544}, {RF_TYPE_Q8_0, 4096, 4352}, {RF_TYPE_Q8_0, 32, 48},
        {RF_TYPE_Q8_0, 96, 112},    {RF_TYPE_Q8_0, 128, 144}, {RF_TYPE_Q8_0, 256, 272},   {RF_TYPE_Q8_0, 1024, 1088},
        {RF_TYPE_Q8_0, 48, 0},      {RF_TYPE_Q8_0, 8, 0},     {RF_TYPE_F32, 64, 256},     {RF_TYPE_F16, 64, 128},
        {RF_TYPE_F16, 40, 80},      {RF_TYPE_BF16, 64, 0},    {RF_TYPE_Q4_0, 32, 32},     {RF_TYPE_Q4_0, 64, 48},
        {RF_TYPE_Q4_0, 96, 64},     {RF_TYPE_Q4_0, 128, 80},  {RF_TYPE_Q4_0, 256, 144},   {RF_TYPE_Q4_0, 512, 288},
        {RF_TYPE_Q4_0, 1024, 576},  {RF_TYPE_Q4_0, 4096, 2304}, {RF_TYPE_Q4_0, 48, 0},    {RF_TYPE_Q4_0, 8, 0},
    };
    for (size_t k = 0; k < sizeof rb / sizeof rb[0]; k++)
        CHECK(rf_kv_row_bytes(rb[k].t, rb[k].kv_dim) == rb[k].bytes, "row bytes of %s kv_dim %lld: %zu, expected %zu",
              rf_kv_type_name(rb[k].t), (long long)rb[k].kv_dim, rf_kv_row_bytes(rb[k].t, rb[k].kv_dim), rb[k].bytes);
    CHECK(rf_kv_type_ok(RF_TYPE_F32) && rf_kv_type_ok(RF_TYPE_F16) && rf_kv_type_ok(RF_TYPE_Q8_0) &&
              rf_kv_type_ok(RF_TYPE_Q4_0) && !rf_kv_type_ok(RF_TYPE_BF16) && !rf_kv_type_ok(RF_TYPE_Q4_1),
          "rf_kv_type_ok: f32, f16, q8_0, q4_0 and nothing else");
    CHECK(!strcmp(rf_kv_type_name(RF_TYPE_Q8_0), "q8_0") && !strcmp(rf_kv_type_name(RF_TYPE_F16), "f16") &&
              !strcmp(rf_kv_type_name(RF_TYPE_F32), "f32") && !strcmp(rf_kv_type_name(RF_TYPE_Q4_0), "q4_0"),
          "type names");

    /* kv_dim 64 = blocks A and B: bytes 0-31 A's codes, 32-63 B's, 64-65 A's scale 0x3c00 as
     * 00 3c, 66-67 B's 0x4000 as 00 40, 68-79 zero, nothing written at 80 or after */
    {
        float x[64];
        memcpy(x, HAND[0].x, sizeof HAND[0].x);
        memcpy(x + 32, HAND[1].x, sizeof HAND[1].x);
        uint8_t row[96];
        memset(row, 0xAA, sizeof row);
        rf_kv_write_row(RF_TYPE_Q8_0, x, 64, row);
        int pad = 1;
        for (int i = 68; i < 80; i++) pad &= row[i] == 0;
        for (int i = 80; i < 96; i++) pad &= row[i] == 0xAA;
        CHECK(!memcmp(row, HAND[0].q, 32) && !memcmp(row + 32, HAND[1].q, 32), "kv_dim 64 row: codes in element order");
        CHECK(row[64] == 0x00 && row[65] == 0x3c && row[66] == 0x00 && row[67] == 0x40,
              "kv_dim 64 row: scales little-endian after the codes (%02x %02x %02x %02x)", row[64], row[65], row[66],
              row[67]);
        CHECK(pad, "kv_dim 64 row: bytes 68-79 zero, 80+ untouched");
        float out[66];
        out[0] = out[33] = out[34] = out[65] = 42.0f;
        rf_kv_read_row(RF_TYPE_Q8_0, row, 64, 32, 32, out + 1); /* block 1 alone */
        CHECK(out[0] == 42.0f && out[33] == 42.0f && out[1] == 6.0f && out[2] == -6.0f && out[9] == 254.0f,
              "kv_dim 64 row: read e0 32 n 32 gives block B only (%g %g %g)", out[1], out[2], out[9]);
        rf_kv_read_row(RF_TYPE_Q8_0, row, 64, 0, 32, out + 1);
        CHECK(out[0] == 42.0f && out[33] == 42.0f && out[1] == 3.0f && out[7] == -127.0f,
              "kv_dim 64 row: read e0 0 n 32 gives block A only (%g %g)", out[1], out[7]);
    }

    /* kv_dim 512 and 4096 (the 1B and 7B models' rows): every block where the layout puts it,
     * no padding (544 and 4352 are multiples of 16), nothing written past the row; sub-range
     * reads equal the whole-row read */
    for (int64_t kv_dim = 512; kv_dim <= 4096; kv_dim *= 8) {
        const size_t rbytes = rf_kv_row_bytes(RF_TYPE_Q8_0, kv_dim);
        float *x = malloc(sizeof(float) * (size_t)kv_dim), *all = malloc(sizeof(float) * (size_t)kv_dim);
        float *part = malloc(sizeof(float) * ((size_t)kv_dim + 1));
        uint8_t *row = malloc(rbytes + 32);
        for (int64_t i = 0; i < kv_dim; i++) x[i] = test_randf(-1, 1) * powf(10.0f, (float)((i / B) % 7) - 3.0f);
        memset(row, 0xAA, rbytes + 32);
        rf_kv_write_row(RF_TYPE_Q8_0, x, kv_dim, row);
        int ok = 1;
        for (int64_t b = 0; b < kv_dim / B; b++) {
            int8_t q[B];
            uint16_t d;
            rf_kv_q8_block(x + b * B, q, &d);
            ok &= !memcmp(row + b * B, q, B) && le16(row + kv_dim + 2 * b) == d;
        }
        int tail = 1;
        for (size_t i = rbytes; i < rbytes + 32; i++) tail &= row[i] == 0xAA;
        CHECK(ok && tail, "kv_dim %lld row (%zu bytes): block b's codes at 32b, its scale at %lld + 2b; nothing past the row",
              (long long)kv_dim, rbytes, (long long)kv_dim);
        rf_kv_read_row(RF_TYPE_Q8_0, row, kv_dim, 0, kv_dim, all);
        int sub = 1;
        for (int k = 0; k < 20; k++) {
            const int64_t nb = kv_dim / B, b0 = test_randint(0, (int)nb - 1), b1 = test_randint((int)b0 + 1, (int)nb);
            part[(b1 - b0) * B] = 42.0f;
            rf_kv_read_row(RF_TYPE_Q8_0, row, kv_dim, b0 * B, (b1 - b0) * B, part);
            sub &= !memcmp(part, all + b0 * B, sizeof(float) * (size_t)(b1 - b0) * B) && part[(b1 - b0) * B] == 42.0f;
        }
        CHECK(sub, "kv_dim %lld: reads of sub-ranges [e0, e0 + n) equal the whole row's and write n floats",
              (long long)kv_dim);
        free(x);
        free(all);
        free(part);
        free(row);
    }

    /* a row built byte by byte (codes a writer never makes, e.g. -128): the reader takes the
     * codes as int8 and the scales as little-endian binary16 */
    {
        uint8_t row[48] = {0};
        row[0] = 0x80;             /* -128 */
        row[1] = 0x7f;             /* 127 */
        row[2] = 0xff;             /* -1 */
        row[31] = 0x05;            /* 5 */
        row[32] = 0x00, row[33] = 0xc0; /* scale 0xc000 = -2 */
        float out[B];
        rf_kv_read_row(RF_TYPE_Q8_0, row, B, 0, B, out);
        CHECK(out[0] == 256.0f && out[1] == -254.0f && out[2] == 2.0f && out[31] == -10.0f && out[3] == 0.0f,
              "hand-built row: -128, 127, -1, 5 times -2 read %g %g %g %g", out[0], out[1], out[2], out[31]);
    }
}

/* Random blocks at magnitudes 3e-2 .. 1e5 (so fp16(d) is normal: d >= 2^-14 needs amax >= 7.8e-3):
 * the rule's consequences. */
static void test_random_blocks(void) {
    double se = 0, sa = 0, worst = 0;
    long n_el = 0;
    int n_bad = 0;
    char first[200] = "";
    for (int it = 0; it < 4000; it++) {
        const float mag = powf(10.0f, test_randf(-1.5f, 5.0f));
        float x[B];
        for (int i = 0; i < B; i++) x[i] = test_randf(-mag, mag);
        if (it % 5 == 0) x[test_randint(0, B - 1)] = it % 10 ? mag : -mag; /* amax element at +-mag */
        int8_t q[B];
        uint16_t d;
        rf_kv_q8_block(x, q, &d);
        float amax = 0;
        int imax = 0;
        for (int i = 0; i < B; i++)
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]), imax = i;
        const float df = amax / 127.0f, id = 1.0f / df, dh = rf_fp16_to_fp32(d);
        int ok = d == rf_fp32_to_fp16(df) && abs(q[imax]) == 127 && (q[imax] > 0) == (x[imax] > 0);
        float out[B];
        for (int i = 0; i < B; i++) {
            const float t = x[i] * id;
            ok &= q[i] != -128 && fabsf(t - (float)q[i]) <= 0.5f;
            if (fabsf(t - (float)q[i]) == 0.5f) ok &= fabsf((float)q[i]) > fabsf(t); /* tie: away from 0 */
            const double e = (double)q[i] * dh - x[i];
            se += e * e;
            sa += (double)amax * amax;
            worst = fmax(worst, fabs(e) / amax);
            n_el++;
        }
        uint8_t row[48];
        rf_kv_write_row(RF_TYPE_Q8_0, x, B, row);
        rf_kv_read_row(RF_TYPE_Q8_0, row, B, 0, B, out);
        for (int i = 0; i < B; i++) ok &= out[i] == (float)q[i] * dh;
        if (!ok && n_bad++ == 0) snprintf(first, sizeof first, "block %d, amax %.9g, scale 0x%04x", it, amax, d);
    }
    CHECK(n_bad == 0, "random blocks: %d of 4000 break the rule (first: %s)", n_bad, first);
    /* |error| <= d/2 + 127 |fp16(d) - d| <= amax / 254 + amax * 2^-11 = 0.44% of amax */
    CHECK(worst <= 1.0 / 254 + 1.0 / 2048, "random blocks: worst |error| %.3g of amax", worst);
    if (getenv("RF_TEST_VERBOSE"))
        printf("q8_0 random blocks: RMS error %.3g of amax, worst %.3g of amax (%ld elements)\n", sqrt(se / sa), worst,
               n_el);
}

static void test_float_rows(void) {
    const float x[8] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65520.0f, -65519.0f, NAN, -INFINITY, 5.96046448e-8f, -0.0f};
    uint16_t h[9];
    h[8] = 0xAAAA;
    rf_kv_write_row(RF_TYPE_F16, x, 8, h);
    CHECK(h[0] == 0x3c00 && h[1] == 0x3c02 && h[2] == 0x7c00 && h[3] == 0xfbff && (h[4] & 0x7c00) == 0x7c00 &&
              (h[4] & 0x3ff) && h[5] == 0xfc00 && h[6] == 0x0001 && h[7] == 0x8000 && h[8] == 0xAAAA,
          "f16 row: ties to even, overflow to inf, NaN, -inf, subnormal, -0, nothing past the row");
    float out[4];
    rf_kv_read_row(RF_TYPE_F16, h, 8, 2, 4, out);
    CHECK(out[0] == INFINITY && out[1] == -65504.0f && isnan(out[2]) && out[3] == -INFINITY, "f16 row: read e0 2 n 4");
    float f[8];
    rf_kv_write_row(RF_TYPE_F32, x, 8, f);
    CHECK(!memcmp(f, x, sizeof f), "f32 row: a copy");
    rf_kv_read_row(RF_TYPE_F32, f, 8, 5, 3, out);
    CHECK(!memcmp(out, x + 5, 3 * sizeof(float)), "f32 row: read e0 5 n 3");
}

/* ---- Q4_0 -------------------------------------------------------------------------------- */

typedef struct {
    const char *what;
    float x[B];    /* elements past n are 0 */
    int n;
    uint8_t c[B];  /* expected codes of x[0..n); the zeros past n get 8 (0 * id + 8.5) */
    uint16_t d;    /* expected binary16 scale */
} hand_q4;

/* Worked out by hand (f32 arithmetic where the rule says f32; c = min(15, trunc(x * id + 8.5))):
 *  A: m = -8 (the first of -8, 8, -8): d = 1 (0x3c00), id = 1, c = trunc(x + 8.5): ties go up,
 *     0.5 -> 9, -0.5 -> 8, 1.5 -> 10, -1.5 -> 7, -7.5 -> 1; 2.49 -> 10.99 -> 10, -2.51 -> 5,
 *     0.4999 -> 8; 6.5 -> 15; 7.4 -> 15.9 -> 15; x = -m = 8 -> 16.5 and 7.5 -> 16 clamp to 15
 *     (read 7); -0 -> 8; the second -8 -> 0.
 *  B: m = +16 (the first of 16, -16): d = -2 (0xc000), id = -0.5, c = trunc(8.5 - x / 2):
 *     16 -> 0, -16 -> 16.5 -> 15, 1 -> 8, -1 -> 9, 3 -> 7, -3 -> 10, 5 -> 6,
 *     0.999 -> 8.0005 -> 8, 1.001 -> 7.9995 -> 7, -15 -> 16 -> 15.
 *  C: m = 3: d = -0.375 (0xb600), id = f32(-1 / 0.375) = -2.66666675 (inexact): 3 * id =
 *     -8.00000024 rounds to -8 -> 0; -3 -> 15; 1 -> 5.8333 -> 5; -1 -> 11.17 -> 11;
 *     0.1875 -> -0.500000015 rounds to -0.5 -> 8.0 -> 8 (a tie, up); -0.1875 -> 9.
 *  D: m = 0.3f = 0.30000001: d = -0.0375000015, fp16 rounds it *up* to -0.037506103515625
 *     (0xa8cd: mantissa 204.8 -> 205), so m reads 0.300048828125; id = -26.666666:
 *     -0.15 -> 4 + 8.5 -> 12, 0.1 -> -2.67 + 8.5 -> 5.
 *  E: all zeros (and -0): d = +0 (0x0000; the rule's exception, where m / -8 would give -0),
 *     id = 0: every code 8.
 *  F: m = 65519 * 8 = 524152: d = -65519, below fp16's overflow threshold 65520, stored as
 *     -65504 (0xfbff); 524152 -> 0, -524152 -> 15, 262076 -> -4 + 8.5 -> 4.
 *  G: m = 2^-21: d = -2^-24, the smallest fp16 subnormal (0x8001), id = -2^24 exactly:
 *     -2^-22 -> 12, 2^-23 -> 6 (all read back exactly).
 *  H: m = -1e-8: d = 1.25e-9 rounds to fp16 0 (0x0000), yet the codes follow the f32 id (8e8):
 *     -1e-8 -> 0, 5e-9 -> 12.5 -> 12; the block reads as zeros. */
static const hand_q4 HAND4[] = {
    {"A m -8", {-8.0f, 8.0f, 0.5f, -0.5f, 1.5f, -1.5f, 2.49f, -2.51f, 0.4999f, -7.5f, 6.5f, 7.4f, -0.0f, 7.5f, -8.0f},
     15, {0, 15, 9, 8, 10, 7, 10, 5, 8, 1, 15, 15, 8, 15, 0}, 0x3c00},
    {"B m +16", {16.0f, -16.0f, 1.0f, -1.0f, 3.0f, -3.0f, 5.0f, 0.999f, 1.001f, -15.0f}, 10,
     {0, 15, 8, 9, 7, 10, 6, 8, 7, 15}, 0xc000},
    {"C m 3", {3.0f, -3.0f, 1.0f, -1.0f, 0.1875f, -0.1875f}, 6, {0, 15, 5, 11, 8, 9}, 0xb600},
    {"D m 0.3", {0.3f, -0.15f, 0.1f}, 3, {0, 12, 5}, 0xa8cd},
    {"E zeros", {0.0f, -0.0f}, 2, {8, 8}, 0x0000},
    {"F m 65519*8", {524152.0f, -524152.0f, 262076.0f}, 3, {0, 15, 4}, 0xfbff},
    {"G m 2^-21", {0x1p-21f, -0x1p-22f, 0x1p-23f}, 3, {0, 12, 6}, 0x8001},
    {"H m -1e-8", {-1e-8f, 5e-9f}, 2, {0, 12}, 0x0000},
};

/* Bit position of element j (0..7) in its 32-bit word, as the header's list spells it out. */
static const int Q4_SHIFT[8] = {0, 16, 4, 20, 8, 24, 12, 28};

static uint8_t hand_code(const hand_q4 *h, int i) { return i < h->n ? h->c[i] : 8; }

/* Packs codes c[kv_dim] as the layout says, one nibble at a time (byte 4w + nibble/2, low or high
 * half), independently of the writer's word loop. */
static void pack_q4_by_hand(const uint8_t *c, int64_t kv_dim, uint8_t *row) {
    memset(row, 0, (size_t)kv_dim / 2);
    for (int64_t i = 0; i < kv_dim; i++) {
        const int nib = Q4_SHIFT[i % 8] / 4;
        row[i / 8 * 4 + nib / 2] |= (uint8_t)(c[i] << (4 * (nib % 2)));
    }
}

static void test_q4_hand_blocks(void) {
    int shift_ok = 1;
    for (int64_t i = 0; i < 64; i++) shift_ok &= rf_kv_q4_shift(i) == Q4_SHIFT[i % 8];
    CHECK(shift_ok, "rf_kv_q4_shift: 0 16 4 20 8 24 12 28 for j = 0..7 of each word");
    for (size_t k = 0; k < sizeof HAND4 / sizeof HAND4[0]; k++) {
        const hand_q4 *h = &HAND4[k];
        uint8_t c[B], want[B];
        uint16_t d = 0x1234;
        memset(c, 0x55, B);
        for (int i = 0; i < B; i++) want[i] = hand_code(h, i);
        rf_kv_q4_block(h->x, c, &d);
        int bad = -1;
        for (int i = 0; i < B && bad < 0; i++)
            if (c[i] != want[i]) bad = i;
        CHECK(d == h->d, "q4_0 block %s: scale 0x%04x, expected 0x%04x", h->what, d, h->d);
        CHECK(bad < 0, "q4_0 block %s: code %d is %d, expected %d (x = %.9g)", h->what, bad, bad < 0 ? 0 : c[bad],
              bad < 0 ? 0 : want[bad], bad < 0 ? 0.0 : h->x[bad]);
        /* through a kv_dim 32 row: 16 bytes of codes, the scale at 16, 14 bytes of padding */
        uint8_t row[48], hand[16];
        memset(row, 0xAA, sizeof row);
        rf_kv_write_row(RF_TYPE_Q4_0, h->x, B, row);
        pack_q4_by_hand(want, B, hand);
        int pad_ok = 1;
        for (int i = 18; i < 32; i++) pad_ok &= row[i] == 0;
        for (int i = 32; i < 48; i++) pad_ok &= row[i] == 0xAA;
        CHECK(!memcmp(row, hand, 16) && le16(row + 16) == h->d && pad_ok,
              "q4_0 block %s as a kv_dim 32 row: packed codes, scale 0x%04x, padding zero, nothing past byte 32",
              h->what, le16(row + 16));
        float out[B + 1];
        out[B] = 42.0f;
        rf_kv_read_row(RF_TYPE_Q4_0, row, B, 0, B, out);
        const float dv = rf_fp16_to_fp32(h->d);
        int rd = 1;
        for (int i = 0; i < B; i++) rd &= out[i] == (float)(want[i] - 8) * dv;
        CHECK(rd && out[B] == 42.0f && out[0] == -8.0f * dv, "q4_0 block %s: read back as (c - 8) * fp16(d), m as -8 d",
              h->what);
    }
    /* a few reads written out as numbers */
    float out[B];
    uint8_t row[32];
    rf_kv_write_row(RF_TYPE_Q4_0, HAND4[0].x, B, row);
    rf_kv_read_row(RF_TYPE_Q4_0, row, B, 0, B, out);
    CHECK(out[0] == -8.0f && out[1] == 7.0f && out[2] == 1.0f && out[3] == 0.0f && out[5] == -1.0f && out[13] == 7.0f,
          "block A reads -8 7 1 0 -1 7: %g %g %g %g %g %g", out[0], out[1], out[2], out[3], out[5], out[13]);
    rf_kv_write_row(RF_TYPE_Q4_0, HAND4[3].x, B, row);
    rf_kv_read_row(RF_TYPE_Q4_0, row, B, 0, B, out);
    CHECK(out[0] == 0.300048828125f && out[1] == -0.15002441406250f && out[2] == 0.112518310546875f,
          "block D reads 0.300048828125 -0.1500244140625 0.112518310546875: %.12g %.12g %.12g", out[0], out[1], out[2]);
    rf_kv_write_row(RF_TYPE_Q4_0, HAND4[7].x, B, row);
    rf_kv_read_row(RF_TYPE_Q4_0, row, B, 0, B, out);
    CHECK(out[0] == 0.0f && out[1] == 0.0f, "block H reads as zeros: %g %g", out[0], out[1]);

    /* non-finite elements and scale overflow: codes 8 everywhere, d = NaN (0x7e00), reads NaN */
    static const struct { const char *what; int at; float v; float amax; } bad[] = {
        {"NaN", 17, NAN, 1.0f},           {"+inf", 0, INFINITY, 1.0f},        {"-inf", 31, -INFINITY, 1.0f},
        {"NaN with large neighbours", 5, NAN, 1e5f},
        {"m 65520 * 8 (fp16(d) = -65520 ties to -inf)", 3, 524160.0f, 1.0f},
        {"m -65520 * 8", 9, -524160.0f, 1.0f}, {"m 3e38", 9, 3e38f, 1.0f},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        float x[B];
        for (int i = 0; i < B; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * bad[k].amax * (float)(i + 1) / B;
        x[bad[k].at] = bad[k].v;
        uint8_t c[B];
        uint16_t d;
        memset(c, 0x55, B);
        rf_kv_q4_block(x, c, &d);
        int eight = 1;
        for (int i = 0; i < B; i++) eight &= c[i] == 8;
        CHECK(eight && d == 0x7e00, "q4_0 block with %s: codes all 8 and scale 0x7e00 (got 0x%04x)", bad[k].what, d);
        /* as block 1 of a kv_dim 96 row: blocks 0 and 2 unaffected, all 32 of block 1 read NaN */
        float row_x[96], o[96];
        for (int i = 0; i < 96; i++) row_x[i] = i < 32 ? (float)(i % 16 - 8) : i < 64 ? x[i - 32] : 254.0f;
        uint8_t r[80];
        memset(r, 0xAA, sizeof r);
        rf_kv_write_row(RF_TYPE_Q4_0, row_x, 96, r);
        rf_kv_read_row(RF_TYPE_Q4_0, r, 96, 0, 96, o);
        int ok = r[64] == 0xAA;
        for (int i = 0; i < 96; i++) ok &= i < 32 ? o[i] == (float)(i % 16 - 8) : i < 64 ? isnan(o[i]) : o[i] == 254.0f;
        CHECK(ok, "q4_0 row with a %s block: only that block's 32 elements read NaN", bad[k].what);
    }
}

static void test_q4_rows(void) {
    /* kv_dim 64, written: block 0 x = i % 16 - 8 (m = -8 at i = 0: d = 1, codes i % 16), block 1
     * x = 2 (7 - i % 16) (m = -16 at i = 15: d = 2, codes 15 - i % 16). Built by hand: element
     * 8w + j's nibble at bits 0 16 4 20 8 24 12 28 of word w, so codes 0..7 make the word
     * 0x75316420 (bytes 20 64 31 75), 8..15 0xfdb9eca8, 15..8 0x8ace9bdf, 7..0 0x02461357; then
     * scales 0x3c00 and 0x4000 as 00 3c 00 40 at byte 32, bytes 36-47 zero, nothing at 48+. */
    static const uint8_t want[48] = {
        0x20, 0x64, 0x31, 0x75, 0xa8, 0xec, 0xb9, 0xfd, 0x20, 0x64, 0x31, 0x75, 0xa8, 0xec, 0xb9, 0xfd,
        0xdf, 0x9b, 0xce, 0x8a, 0x57, 0x13, 0x46, 0x02, 0xdf, 0x9b, 0xce, 0x8a, 0x57, 0x13, 0x46, 0x02,
        0x00, 0x3c, 0x00, 0x40, 0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,
    };
    float x[64];
    for (int i = 0; i < 32; i++) {
        x[i] = (float)(i % 16 - 8);
        x[32 + i] = 2.0f * (float)(7 - i % 16);
    }
    uint8_t row[64];
    memset(row, 0xAA, sizeof row);
    rf_kv_write_row(RF_TYPE_Q4_0, x, 64, row);
    int first = -1, tail = 1;
    for (int i = 0; i < 48 && first < 0; i++)
        if (row[i] != want[i]) first = i;
    for (int i = 48; i < 64; i++) tail &= row[i] == 0xAA;
    CHECK(first < 0, "q4_0 kv_dim 64 row: byte %d is %02x, the hand-built row has %02x", first,
          first < 0 ? 0 : row[first], first < 0 ? 0 : want[first]);
    CHECK(tail, "q4_0 kv_dim 64 row: nothing written at byte 48 or after");
    float out[66];
    out[0] = out[33] = 42.0f;
    rf_kv_read_row(RF_TYPE_Q4_0, want, 64, 32, 32, out + 1); /* block 1 alone, from the hand-built bytes */
    int ok = out[0] == 42.0f && out[33] == 42.0f;
    for (int i = 0; i < 32; i++) ok &= out[1 + i] == x[32 + i];
    CHECK(ok, "q4_0 hand-built row: read e0 32 n 32 gives block 1 only (%g %g %g)", out[1], out[2], out[16]);
    rf_kv_read_row(RF_TYPE_Q4_0, want, 64, 0, 32, out + 1);
    ok = out[0] == 42.0f && out[33] == 42.0f;
    for (int i = 0; i < 32; i++) ok &= out[1 + i] == x[i];
    CHECK(ok, "q4_0 hand-built row: read e0 0 n 32 gives block 0 only (%g %g %g)", out[1], out[2], out[16]);
    /* a negative scale and codes in every nibble position, built byte by byte */
    {
        /* word 0 = 0x0000f00f: bits 0-3 (j 0) = 15, bits 12-15 (j 6) = 15; word 1 = 0x001f0000:
         * bits 16-19 (j 1) = 15, bits 20-23 (j 3) = 1; every other code 0 (reads 16); scale -2 */
        uint8_t r[32] = {0x0f, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x1f, 0x00};
        r[16] = 0x00, r[17] = 0xc0;
        float o[B];
        rf_kv_read_row(RF_TYPE_Q4_0, r, B, 0, B, o);
        int k = o[0] == -14.0f && o[6] == -14.0f && o[9] == -14.0f && o[11] == 14.0f && o[1] == 16.0f &&
                o[2] == 16.0f && o[8] == 16.0f && o[31] == 16.0f;
        CHECK(k, "q4_0 byte-built row, scale -2: %g %g %g %g %g (expected -14 -14 -14 14 16)", o[0], o[6], o[9], o[11],
              o[1]);
    }

    /* kv_dim 512 and 4096: every block's codes where the layout puts them, its scale at
     * kv_dim / 2 + 2b, nothing written past the row; sub-range reads equal the whole-row read */
    for (int64_t kv_dim = 512; kv_dim <= 4096; kv_dim *= 8) {
        const size_t rbytes = rf_kv_row_bytes(RF_TYPE_Q4_0, kv_dim);
        float *xx = malloc(sizeof(float) * (size_t)kv_dim), *all = malloc(sizeof(float) * (size_t)kv_dim);
        float *part = malloc(sizeof(float) * ((size_t)kv_dim + 1));
        uint8_t *r = malloc(rbytes + 32), *codes = malloc((size_t)kv_dim), *hand = malloc((size_t)kv_dim / 2);
        for (int64_t i = 0; i < kv_dim; i++) xx[i] = test_randf(-1, 1) * powf(10.0f, (float)((i / B) % 7) - 3.0f);
        memset(r, 0xAA, rbytes + 32);
        rf_kv_write_row(RF_TYPE_Q4_0, xx, kv_dim, r);
        int sc = 1;
        for (int64_t b = 0; b < kv_dim / B; b++) {
            uint16_t d;
            rf_kv_q4_block(xx + b * B, codes + b * B, &d);
            sc &= le16(r + kv_dim / 2 + 2 * b) == d;
        }
        pack_q4_by_hand(codes, kv_dim, hand);
        int t = 1;
        for (size_t i = rbytes; i < rbytes + 32; i++) t &= r[i] == 0xAA;
        CHECK(!memcmp(r, hand, (size_t)kv_dim / 2) && sc && t,
              "q4_0 kv_dim %lld row (%zu bytes): packed codes, block b's scale at %lld + 2b; nothing past the row",
              (long long)kv_dim, rbytes, (long long)kv_dim / 2);
        rf_kv_read_row(RF_TYPE_Q4_0, r, kv_dim, 0, kv_dim, all);
        int sub = 1;
        for (int k = 0; k < 20; k++) {
            const int64_t nb = kv_dim / B, b0 = test_randint(0, (int)nb - 1), b1 = test_randint((int)b0 + 1, (int)nb);
            part[(b1 - b0) * B] = 42.0f;
            rf_kv_read_row(RF_TYPE_Q4_0, r, kv_dim, b0 * B, (b1 - b0) * B, part);
            sub &= !memcmp(part, all + b0 * B, sizeof(float) * (size_t)(b1 - b0) * B) && part[(b1 - b0) * B] == 42.0f;
        }
        CHECK(sub, "q4_0 kv_dim %lld: reads of sub-ranges equal the whole row's and write n floats", (long long)kv_dim);
        free(xx);
        free(all);
        free(part);
        free(r);
        free(codes);
        free(hand);
    }
}

/* Random blocks at magnitudes 3e-2 .. 1e5 (fp16(d) normal: |d| >= 2^-14 needs amax >= 4.9e-4;
 * below the overflow at 5.2e5): the rule's consequences. */
static void test_q4_random_blocks(void) {
    double se = 0, sa = 0, worst = 0, worst_in = 0;
    long n_el = 0;
    int n_bad = 0;
    char first[200] = "";
    for (int it = 0; it < 4000; it++) {
        const float mag = powf(10.0f, test_randf(-1.5f, 5.0f));
        float x[B];
        for (int i = 0; i < B; i++) x[i] = test_randf(-mag, mag);
        if (it % 5 == 0) x[test_randint(0, B - 1)] = it % 10 ? mag : -mag;
        if (it % 7 == 0) { /* -m present too: the clamp at 15 */
            int im = 0;
            for (int i = 1; i < B; i++)
                if (fabsf(x[i]) > fabsf(x[im])) im = i;
            x[(im + test_randint(1, B - 1)) % B] = -x[im];
        }
        uint8_t c[B];
        uint16_t d;
        rf_kv_q4_block(x, c, &d);
        float amax = 0, m = 0;
        int imax = 0;
        for (int i = 0; i < B; i++)
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]), m = x[i], imax = i;
        const float df = m / -8.0f, id = 1.0f / df, dh = rf_fp16_to_fp32(d);
        int ok = d == rf_fp32_to_fp16(df) && c[imax] == 0;
        float out[B];
        uint8_t row[32];
        rf_kv_write_row(RF_TYPE_Q4_0, x, B, row);
        rf_kv_read_row(RF_TYPE_Q4_0, row, B, 0, B, out);
        ok &= out[imax] == -8.0f * dh;
        for (int i = 0; i < B; i++) {
            const float t = x[i] * id, q = (float)(c[i] - 8);
            ok &= c[i] <= 15 && out[i] == q * dh;
            /* the sum t + 8.5 is rounded to f32 (half an ulp <= 2^-20 below 16) before truncation */
            if (c[i] < 15) ok &= fabsf(q - t) <= 0.5f + 0x1p-20f && !(fabsf(q - t) == 0.5f && q < t);
            else ok &= t >= 6.5f - 0x1p-20f && t <= 8.0f + 0x1p-19f;
            const double e = (double)out[i] - x[i];
            se += e * e;
            sa += (double)amax * amax;
            worst = fmax(worst, fabs(e) / amax);
            if (c[i] < 15 || t <= 7.5f) worst_in = fmax(worst_in, fabs(e) / amax);
            n_el++;
        }
        if (!ok && n_bad++ == 0) snprintf(first, sizeof first, "block %d, m %.9g, scale 0x%04x", it, m, d);
    }
    CHECK(n_bad == 0, "q4_0 random blocks: %d of 4000 break the rule (first: %s)", n_bad, first);
    /* |error| <= |d| / 2 + 8 |fp16(d) - d| <= amax / 16 + amax / 2048 (+ f32 slack); the elements
     * clamped at 15 (x * id in (7.5, 8]) read 7 d: up to |d| = amax / 8 */
    CHECK(worst_in <= 1.0 / 16 + 1.0 / 2048 + 1e-6, "q4_0 random blocks: worst |error| %.4g of amax (unclamped)",
          worst_in);
    CHECK(worst <= 1.0 / 8 + 1.0 / 2048 + 1e-6, "q4_0 random blocks: worst |error| %.4g of amax", worst);
    if (getenv("RF_TEST_VERBOSE"))
        printf("q4_0 random blocks: RMS error %.3g of amax, worst %.3g (unclamped %.3g) of amax (%ld elements)\n",
               sqrt(se / sa), worst, worst_in, n_el);
}

int main(void) {
    test_seed();
    test_hand_blocks();
    test_rows();
    test_random_blocks();
    test_float_rows();
    test_q4_hand_blocks();
    test_q4_rows();
    test_q4_random_blocks();
    return test_finish();
}
