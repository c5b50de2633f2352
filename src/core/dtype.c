#include "dtype.h"

#include <stdio.h>

#include "util.h"

/* Supported types are listed here once; the quant module provides their kernels. */
static const rf_type_info infos[RF_TYPE_COUNT] = {
    [RF_TYPE_F32] = {"f32", 1, 4, true},
    [RF_TYPE_F16] = {"f16", 1, 2, true},
    [RF_TYPE_BF16] = {"bf16", 1, 2, true},
    [RF_TYPE_Q4_0] = {"q4_0", 32, 18, true},
    [RF_TYPE_Q4_1] = {"q4_1", 32, 20, true},
    [RF_TYPE_Q5_0] = {"q5_0", 32, 22, true},
    [RF_TYPE_Q5_1] = {"q5_1", 32, 24, true},
    [RF_TYPE_Q8_0] = {"q8_0", 32, 34, true},
    [RF_TYPE_Q8_1] = {"q8_1", 32, 36, false},
    [RF_TYPE_Q2_K] = {"q2_K", 256, 84, true},
    [RF_TYPE_Q3_K] = {"q3_K", 256, 110, true},
    [RF_TYPE_Q4_K] = {"q4_K", 256, 144, true},
    [RF_TYPE_Q5_K] = {"q5_K", 256, 176, true},
    [RF_TYPE_Q6_K] = {"q6_K", 256, 210, true},
    [RF_TYPE_Q8_K] = {"q8_K", 256, 292, false},
    [RF_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, false},
    [RF_TYPE_IQ2_XS] = {"iq2_xs", 256, 74, false},
    [RF_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, false},
    [RF_TYPE_IQ1_S] = {"iq1_s", 256, 50, false},
    [RF_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, true},
    [RF_TYPE_IQ3_S] = {"iq3_s", 256, 110, false},
    [RF_TYPE_IQ2_S] = {"iq2_s", 256, 82, false},
    [RF_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, true},
    [RF_TYPE_I8] = {"i8", 1, 1, false},
    [RF_TYPE_I16] = {"i16", 1, 2, false},
    [RF_TYPE_I32] = {"i32", 1, 4, false},
    [RF_TYPE_I64] = {"i64", 1, 8, false},
    [RF_TYPE_F64] = {"f64", 1, 8, false},
    [RF_TYPE_IQ1_M] = {"iq1_m", 256, 56, false},
    [RF_TYPE_TQ1_0] = {"tq1_0", 256, 54, false},
    [RF_TYPE_TQ2_0] = {"tq2_0", 256, 66, false},
    [RF_TYPE_MXFP4] = {"mxfp4", 32, 17, false}, /* exponent byte, then 16 bytes of nibbles */
};

const rf_type_info *rf_type_get(uint32_t t) {
    if (t >= RF_TYPE_COUNT || !infos[t].name) return NULL;
    return &infos[t];
}

const char *rf_type_name(uint32_t t) {
    static _Thread_local char buf[32];
    const rf_type_info *ti = rf_type_get(t);
    if (ti) return ti->name;
    snprintf(buf, sizeof buf, "unknown type id %u", t);
    return buf;
}

bool rf_row_bytes(uint32_t t, uint64_t n, uint64_t *out) {
    const rf_type_info *ti = rf_type_get(t);
    if (!ti || n % ti->block_elems) return false;
    return rf_mul_u64(n / ti->block_elems, ti->block_bytes, out);
}
