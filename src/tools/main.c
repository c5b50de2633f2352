/* rocmforge: the command-line front end. One subcommand per file (cmd_*.c). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "rocmforge.h"

/* Each command's usage lines (`rocmforge help` prints them all, `rocmforge CMD -h` its own). */
static const struct {
    const char *cmd, *text;
} usages[] = {
    {"run", "  run        -m MODEL (-p TEXT | -f FILE) [-n N] [-c CTX] [--temp T] [--top-k K] [--top-p P]\n"
            "             [--min-p P] [--repeat-penalty R] [-s SEED] [-t THREADS] [-ngl N] [--device D]\n"},
    {"info", "  info       -m MODEL [-v]\n"},
    {"tokenize", "  tokenize   -m MODEL (-p TEXT | -f FILE) [--ids] [--no-bos] [--special]\n"},
    {"perplexity", "  perplexity -m MODEL (-p TEXT | -f FILE) [--logits-out FILE] [-c CTX]\n"},
    {"bench", "  bench      -m MODEL [-p 512] [-n 128] [-d 0] [-r 5] [-t N] [-ngl N]\n"
              "             -p, -n and -d take comma-separated lists (e.g. -d 0,8192): every test at every depth\n"},
    {"mkmodel", "  mkmodel    -o OUT --vocab VOCAB.gguf [--arch llama|qwen2|qwen3] [--type f16|q8_0|q4_k_m|...]\n"
                "             [--n-embd N] [--n-layer N] [--n-head N] [--n-head-kv N] [--n-ff N] [-s SEED]\n"},
};

#ifndef RF_COMMIT
#define RF_COMMIT "unknown"
#endif
const char *rf_cli_commit(void) { return RF_COMMIT; }

void rf_usage(FILE *f, const char *cmd) {
    fprintf(f, "rocmforge %s: LLM inference for GGUF models on AMD and NVIDIA GPUs and the CPU\n"
               "usage: rocmforge COMMAND [flags]\n", rf_version());
    for (size_t i = 0; i < sizeof usages / sizeof usages[0]; i++)
        if (!cmd || !strcmp(cmd, usages[i].cmd)) fputs(usages[i].text, f);
    if (!cmd || !strcmp(cmd, "run") || !strcmp(cmd, "perplexity") || !strcmp(cmd, "bench"))
        fputs("  run, perplexity and bench also take -ctk/--cache-type-k and -ctv/--cache-type-v f16|f32|q8_0|q4_0:\n"
              "             the K/V cache type (default f16 on a GPU, f32 on the CPU; K and V alike)\n",
              f);
    if (!cmd) fputs("  --version, help; COMMAND -h for one command's flags\n", f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "rocmforge: no command given (usage: rocmforge COMMAND [flags]; see 'rocmforge help')\n");
        return 1;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("rocmforge %s (commit %s)\nbackends: %s\n", rf_version(), rf_cli_commit(), rf_build_info());
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        rf_usage(stdout, NULL);
        return 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"run", cmd_run},     {"info", cmd_info},       {"tokenize", cmd_tokenize},
                {"perplexity", cmd_perplexity}, {"mkmodel", cmd_mkmodel}, {"bench", cmd_bench}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(cmd, cmds[i].name)) return cmds[i].fn(argc, argv);
    fprintf(stderr, "rocmforge: unknown command '%s' (see 'rocmforge help')\n", cmd);
    return 1;
}
