/* Half/bfloat conversions: exhaustive round trip over all 65536 half patterns, rounding cases. */
#include <math.h>
#include <string.h>

#include "core/util.h"
#include "test.h"

int main(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rf_fp16_to_fp32((uint16_t)h);
        uint16_t back = rf_fp32_to_fp16(f);
        if (isnan(f)) {
            if ((back & 0x7c00) != 0x7c00 || !(back & 0x3ff)) bad++;
        } else if (back != h) {
            bad++;
        }
    }
    CHECK(bad == 0, "fp16 round trip: %d of 65536 patterns differ", bad);
    CHECK(rf_fp32_to_fp16(65520.0f) == 0x7c00, "65520 rounds to inf");
    CHECK(rf_fp32_to_fp16(65519.0f) == 0x7bff, "65519 rounds to max half");
    CHECK(rf_fp32_to_fp16(1.0f + 1.0f / 2048) == 0x3c00, "tie rounds to even (down)");
    CHECK(rf_fp32_to_fp16(1.0f + 3.0f / 2048) == 0x3c02, "tie rounds to even (up)");
    CHECK(rf_fp32_to_fp16(5.96046448e-8f) == 1, "smallest subnormal");
    CHECK(rf_fp32_to_fp16(2.98e-8f) == 0, "below half smallest subnormal flushes to 0");
    CHECK(rf_fp16_to_fp32(0x0001) == 5.96046448e-8f, "subnormal decode");
    CHECK(rf_bf16_to_fp32(rf_fp32_to_bf16(1.5f)) == 1.5f, "bf16 exact value");
    CHECK(isnan(rf_bf16_to_fp32(rf_fp32_to_bf16(NAN))), "bf16 NaN stays NaN");
    CHECK(rf_fp32_to_bf16(1.0f + 1.0f / 256) == 0x3f80, "bf16 tie to even");
    return test_finish();
}
