/* gemm_i16.c: the portable pieces of the int16-code GEMM (gemm_i16.h): the layout of x's codes
 * and the tile fallback. */
#include "backend/cpu/gemm_i16.h"

#include <string.h>

#include "backend/cpu/thread_scratch.h"
#include "core/util.h"

rf_i16_x rf_i16_x_alloc(int64_t n_in, int64_t n_tok, int gt) {
    const int64_t nb = (n_in + 31) / 32, ntg = (n_tok + gt - 1) / gt;
    const size_t qb = sizeof(int32_t) * (size_t)(ntg * nb * 16 * gt), db = sizeof(float) * (size_t)(ntg * nb * gt);
    uint8_t *sc = rf_thread_scratch(1, qb + db);
    memset(sc, 0, qb + db);
    return (rf_i16_x){(int32_t *)(void *)sc, (float *)(void *)(sc + qb), nb, gt};
}

void rf_i16_tile_f32(const uint8_t *wr, uint64_t rb, int nr, int64_t n_in, const float *x, int64_t n_tok, float *y,
                     int64_t n_out, int kind) {
    for (int i = 0; i < nr; i++) {
        const uint8_t *h = wr + (uint64_t)i * rb;
        for (int64_t t = 0; t < n_tok; t++) {
            float s = 0;
            for (int64_t k = 0; k < n_in; k++) {
                uint16_t v;
                memcpy(&v, h + 2 * k, 2);
                s += (kind == 1 ? rf_fp16_to_fp32(v) : rf_bf16_to_fp32(v)) * x[t * n_in + k];
            }
            y[t * n_out + i] = s;
        }
    }
}
