/* rocmforge info: what a GGUF file holds. Works on any readable GGUF (vocab-only files, files
 * with types this build cannot compute) because it reads the description, not the weights. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "core/dtype.h"
#include "core/gguf.h"
#include "core/util.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

static void print_kv_value(const rf_gguf_kv *kv) {
    switch (kv->type) {
    case RF_GGUF_STRING: printf("\"%.80s%s\"", kv->str, kv->str_len > 80 ? "..." : ""); break;
    case RF_GGUF_F32:
    case RF_GGUF_F64: printf("%g", kv->f64); break;
    case RF_GGUF_BOOL: printf("%s", kv->i64 ? "true" : "false"); break;
    case RF_GGUF_U8:
    case RF_GGUF_U16:
    case RF_GGUF_U32:
    case RF_GGUF_U64: printf("%" PRIu64, kv->u64); break;
    case RF_GGUF_ARRAY: printf("[%s x %" PRIu64 "]", rf_gguf_vtype_name(kv->arr_type), kv->arr_n); break;
    default: printf("%" PRId64, kv->i64); break;
    }
}

int cmd_info(int argc, char **argv) {
    rf_args a;
    rf_args_defaults(&a);
    const int parsed = rf_args_parse(&a, "info", "-m -v", argc, argv, 2);
    if (parsed) return parsed < 0; /* 1: -h printed the usage */
    if (!a.model) return rf_fail("no model: give -m FILE.gguf");
    rf_gguf *g = rf_gguf_open(a.model);
    if (!g) return rf_fail("%s", rf_last_error());
    printf("file: %s\nformat: GGUF v%u, %" PRIu64 " metadata keys, %" PRIu64 " tensors, alignment %" PRIu64 "\n",
           a.model, g->version, g->n_kv, g->n_tensors, g->alignment);

    rf_hparams hp;
    if (g->n_tensors == 0) {
        printf("architecture: none (vocabulary-only file)\n");
    } else if (rf_hparams_read(g, &hp) == 0) {
        printf("architecture: %s\n", hp.arch_name);
        printf("  n_embd %d, n_layer %d, n_head %d, n_head_kv %d, head_dim %d, n_ff %d\n", hp.n_embd,
               hp.n_layer, hp.n_head, hp.n_kv_head, hp.head_dim, hp.n_ff);
        printf("  context_length %d, rms_eps %g, rope: %s, base %g, dims %d, linear scale %g\n", hp.n_ctx_train,
               hp.rms_eps, hp.rope_mode == RF_ROPE_NEOX ? "neox" : "normal", hp.rope_base, hp.n_rot,
               1.0 / hp.rope_freq_scale);
        printf("  tied embeddings: %s\n", rf_gguf_find_tensor(g, "output.weight") ? "no" : "yes");
    } else {
        printf("architecture: not runnable: %s\n", rf_last_error());
    }
    rf_tokenizer *tk = rf_tokenizer_load(g);
    if (tk) {
        printf("tokenizer: %s (pre-tokenizer %s), %d tokens, bos %d, eos %d, add_bos %s\n",
               rf_tokenizer_model_name(tk), rf_tokenizer_pre_name(tk), rf_tokenizer_n_vocab(tk),
               rf_tokenizer_bos(tk), rf_tokenizer_eos(tk), rf_tokenizer_add_bos(tk) ? "yes" : "no");
        rf_tokenizer_free(tk);
    } else {
        printf("tokenizer: unavailable: %s\n", rf_last_error());
    }
    if (a.verbose) {
        printf("metadata:\n");
        for (uint64_t i = 0; i < g->n_kv; i++) {
            printf("  %-44s ", g->kv[i].key);
            print_kv_value(&g->kv[i]);
            printf("\n");
        }
    }
    if (g->n_tensors) {
        uint64_t bytes_by_type[RF_TYPE_COUNT] = {0}, count_by_type[RF_TYPE_COUNT] = {0}, total = 0, params = 0;
        printf("tensors:\n  %-32s %-8s %-24s %12s\n", "name", "type", "shape", "bytes");
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const rf_gguf_tensor *t = &g->tensors[i];
            char shape[64];
            int o = snprintf(shape, sizeof shape, "[%" PRIu64, t->ne[0]);
            for (uint32_t d = 1; d < t->n_dims && o < (int)sizeof shape; d++)
                o += snprintf(shape + o, sizeof shape - (size_t)o, ", %" PRIu64, t->ne[d]);
            snprintf(shape + RF_MIN(o, (int)sizeof shape - 2), 2, "]");
            printf("  %-32s %-8s %-24s %12" PRIu64 "\n", t->name, rf_type_name(t->type), shape, t->n_bytes);
            bytes_by_type[t->type] += t->n_bytes;
            count_by_type[t->type]++;
            total += t->n_bytes;
            params += t->n_elems;
        }
        printf("bytes by weight type:\n");
        for (int t = 0; t < RF_TYPE_COUNT; t++)
            if (count_by_type[t])
                printf("  %-8s %4" PRIu64 " tensors %14" PRIu64 " bytes (%.2f MiB)%s\n", rf_type_name((uint32_t)t),
                       count_by_type[t], bytes_by_type[t], bytes_by_type[t] / 1048576.0,
                       rf_type_get((uint32_t)t)->supported ? "" : "  (not supported)");
        printf("total: %" PRIu64 " parameters, %" PRIu64 " bytes (%.2f MiB)\n", params, total, total / 1048576.0);
    }
    rf_gguf_close(g);
    return 0;
}
