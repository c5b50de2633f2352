#include <math.h>
#include <string.h>

#include "ops.h"

void cpu_swiglu(const float *gate, const float *up, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void cpu_scale(float *x, int64_t n, float s) {
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

void cpu_causal_mask(float *x, int n_rows, int n_cols) {
    int off = n_cols - n_rows;
    for (int r = 0; r < n_rows; r++)
        for (int c = r + off + 1; c < n_cols; c++) x[(int64_t)r * n_cols + c] = -INFINITY;
}

void cpu_softmax_rows(float *x, int n_rows, int n_cols) {
    for (int r = 0; r < n_rows; r++) {
        float *row = x + (int64_t)r * n_cols;
        float m = -INFINITY;
        for (int c = 0; c < n_cols; c++) m = row[c] > m ? row[c] : m;
        if (m == -INFINITY) {
            for (int c = 0; c < n_cols; c++) row[c] = 0.0f;
            continue;
        }
        float sum = 0.0f;
        for (int c = 0; c < n_cols; c++) {
            row[c] = expf(row[c] - m);
            sum += row[c];
        }
        for (int c = 0; c < n_cols; c++) row[c] /= sum;
    }
}

void cpu_get_rows(const float *x, const int32_t *rows, int n_rows, int dim, float *out) {
    for (int r = 0; r < n_rows; r++)
        memcpy(out + (int64_t)r * dim, x + (int64_t)rows[r] * dim, (size_t)dim * sizeof(float));
}
