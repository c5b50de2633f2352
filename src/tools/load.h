#ifndef RF_TOOLS_LOAD_H
#define RF_TOOLS_LOAD_H
#include "args.h"
#include "rocmforge.h"
/* Loads -m on the device the flags choose; prints the error and returns NULL on failure. */
rf_model *rf_cli_load(const rf_args *a);
/* A context for m: rf_context_params's defaults with these three fields (n_ctx, n_batch <= 0: their
 * defaults); prints the error and returns NULL on failure. */
rf_context *rf_cli_context(rf_model *m, int n_ctx, int n_batch, int kv_type);
/* Decodes tokens[0..n) into `seq` from position pos0 in batch-size chunks, asking for the last
 * token's logits (batch index (n - 1) % n_batch of the last chunk). */
int rf_cli_prefill(rf_context *c, int seq, const int32_t *tokens, int n, int pos0);
#endif
