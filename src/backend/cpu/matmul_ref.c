#include <stdlib.h>
#include <string.h>
#include "core/dtype.h"
#include "core/quant.h"
#include "core/util.h"
#include "ops.h"

void cpu_matmul_ref(const rf_weight *w, const float *bias, const float *x, int n, float *y) {
    uint64_t row_bytes = 0;
    rf_row_bytes(w->type, (uint64_t)w->n_in, &row_bytes);
    float *row = rf_xmalloc((size_t)w->n_in * sizeof(float));
    for (int64_t o = 0; o < w->n_out; o++) {
        rf_dequantize_row(w->type, (const uint8_t *)w->data + (uint64_t)o * row_bytes, row, w->n_in);
        for (int t = 0; t < n; t++) {
            const float *xt = x + (int64_t)t * w->n_in;
            float acc = 0.0f;
            for (int64_t i = 0; i < w->n_in; i++) acc += row[i] * xt[i];
            y[(int64_t)t * w->n_out + o] = bias ? acc + bias[o] : acc;
        }
    }
    free(row);
}

void cpu_matmul_ref_ggml(const rf_weight *w, const float *bias, const float *x, int n, float *y) {
    size_t len = (size_t)n * (size_t)w->n_in;
    float *xr = rf_xmalloc(len * sizeof(float));
    memcpy(xr, x, len * sizeof(float));
    for (int t = 0; t < n; t++) cpu_round_like_ggml(w->type, xr + (size_t)t * w->n_in, w->n_in);
    cpu_matmul_ref(w, bias, xr, n, y);
    free(xr);
}
