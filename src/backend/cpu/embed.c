#include "core/dtype.h"
#include "core/quant.h"
#include "ops.h"

void cpu_embed(const rf_weight *table, const int32_t *tokens, int n, float *out) {
    uint64_t row_bytes = 0;
    rf_row_bytes(table->type, (uint64_t)table->n_in, &row_bytes);
    for (int t = 0; t < n; t++) {
        const uint8_t *row = (const uint8_t *)table->data + (uint64_t)tokens[t] * row_bytes;
        rf_dequantize_row(table->type, row, out + (int64_t)t * table->n_in, table->n_in);
    }
}
