/* rocmforge tokenize: token ids and pieces of a text. Any GGUF with tokenizer metadata works,
 * including vocab-only files; no weights are loaded. */
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "core/gguf.h"
#include "core/util.h"
#include "tokenizer/tokenizer.h"

int cmd_tokenize(int argc, char **argv) {
    rf_args a;
    rf_args_defaults(&a);
    const int parsed = rf_args_parse(&a, "tokenize", "-m -p -f --ids --no-bos --special", argc, argv, 2);
    if (parsed) return parsed < 0; /* 1: -h printed the usage */
    if (!a.model) return rf_fail("no model: give -m FILE.gguf");
    size_t len;
    char *text = rf_args_prompt_text(&a, &len);
    if (!text) return 1;
    rf_gguf *g = rf_gguf_open(a.model);
    rf_tokenizer *tk = g ? rf_tokenizer_load(g) : NULL;
    if (!tk) {
        rf_gguf_close(g);
        free(text);
        return rf_fail("%s", rf_last_error());
    }
    int32_t *ids = NULL;
    int n = rf_tokenizer_encode(tk, text, len, !a.no_bos, a.special, &ids);
    int rc = 0;
    if (n < 0) {
        rc = rf_fail("%s", rf_last_error());
    } else if (a.ids_only) {
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    } else {
        char piece[512];
        for (int i = 0; i < n; i++) {
            int k = rf_tokenizer_piece(tk, ids[i], true, piece, sizeof piece - 1);
            piece[k > 0 ? k : 0] = 0;
            printf("%6d -> '%s'\n", ids[i], piece);
        }
        fprintf(stderr, "%d tokens\n", n);
    }
    free(ids);
    free(text);
    rf_tokenizer_free(tk);
    rf_gguf_close(g);
    return rc;
}
