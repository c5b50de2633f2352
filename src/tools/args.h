/* args.h: command-line flags shared by the subcommands, named as llama.cpp names them. */
#ifndef RF_ARGS_H
#define RF_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A comma-separated list of counts (bench's -p / -n / -d, as llama-bench takes them): at most
 * RF_ARGS_LIST_MAX values, each in [0, RF_ARGS_LIST_HI] (so that sums of two stay within an int). */
#define RF_ARGS_LIST_MAX 16
#define RF_ARGS_LIST_HI (1 << 22)
typedef struct {
    int n, v[RF_ARGS_LIST_MAX];
} rf_int_list;

typedef struct {
    const char *model, *prompt, *file, *device, *logits_out, *out, *vocab, *arch, *type;
    const char *cache_type_k, *cache_type_v; /* -ctk / -ctv as given, NULL when absent */
    int n_predict, n_ctx, n_threads, n_batch, n_gpu_layers, reps;
    rf_int_list n_predict_list; /* -n where a command takes a list (else n = 0) */
    rf_int_list depth_list;     /* -d (always a list; n = 0 when absent) */
    uint64_t seed;
    bool seed_set;
    float temp, top_p, min_p, repeat_penalty, freq_penalty, presence_penalty;
    int top_k, repeat_last_n;
    bool ids_only, no_bos, special, verbose;
    /* mkmodel */
    int n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab;
} rf_args;

/* Parses argv[first..argc) for subcommand `cmd`, accepting only the flags listed in `allowed`
 * (space-separated long or short names, e.g. "-m -p --temp"; a name followed by a comma, "-n,",
 * takes a list of counts where the flag has a list field: -n; -d is always a list). Returns 0; -1 after
 * printing one error line to stderr; 1 after printing the command's usage to stdout for -h /
 * --help (the command then exits with status 0). */
int rf_args_parse(rf_args *a, const char *cmd, const char *allowed, int argc, char **argv, int first);
/* Parses "A,B,..." (at most RF_ARGS_LIST_MAX integers, each in [lo, hi]) into *out; on a bad list
 * prints one error line naming flag and returns -1. */
int rf_args_int_list(const char *s, const char *flag, long lo, long hi, rf_int_list *out);
/* Prints the usage of command `cmd` (NULL: of every command) to f (main.c). */
void rf_usage(FILE *f, const char *cmd);
void rf_args_defaults(rf_args *a);
/* The K/V cache type from -ctk / -ctv (rf_kv_type) into *kv: "f16", "f32", "q8_0" or "q4_0";
 * one flag alone sets both, neither leaves RF_KV_AUTO (the device's choice). Another value, or K
 * and V of different types, prints one error line and returns -1. */
int rf_args_kv_type(const rf_args *a, int *kv);
/* Reads -p or -f into a malloc'd string; NULL (error printed) if neither or unreadable. */
char *rf_args_prompt_text(const rf_args *a, size_t *len);

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* The source commit the CLI was built from (`git describe --always --dirty`; "unknown" outside a
 * git checkout). */
const char *rf_cli_commit(void);

/* Prints "rocmforge: <msg>" to stderr and returns 1 (exit status). */
int rf_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
