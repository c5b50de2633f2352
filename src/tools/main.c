/* rocmforge: the command-line front end. One subcommand per file (cmd_*.c). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "rocmforge.h"

/* Each command's usage lines (`rocmforge help` prints them all, `rocmforge CMD -h` its own, and
 * then its flags' meanings and defaults where the command has any beyond the synopsis). */
static const struct {
    const char *cmd, *text, *flags;
} usages[] = {
    {"run", "  run        -m MODEL (-p TEXT | -f FILE) [-n N] [-c CTX] [--temp T] [--top-k K] [--top-p P]\n"
            "             [--min-p P] [--repeat-penalty R] [-s SEED] [-t THREADS] [-ngl N] [--device D]\n",
     "    -n N               tokens to generate (128; -1 or -2: until generation or the context ends)\n"
     "    -c CTX             context length (0: the model's training context, at most 4096)\n"
     "    -b N               prompt tokens per batch (512)\n"
     "    --temp T           sampling temperature (0.8; 0 or less: greedy)\n"
     "    --top-k K          keep the K most likely tokens (40; 0: off)\n"
     "    --top-p P          keep the smallest set of probability >= P (0.95; 1: off)\n"
     "    --min-p P          drop tokens below P times the most likely one's probability (0.05; 0: off)\n"
     "    --repeat-penalty R on the last --repeat-last-n N tokens (1: off; N 64, -1: all, 0: off);\n"
     "                       also --frequency-penalty F and --presence-penalty P (0: off)\n"
     "    -s SEED            sampler seed (default: the time)\n"
     "    -t THREADS         CPU threads (default: the physical cores)\n"
     "    --device D         cpu, gpu or gpu:N (default: the GPU when there is one); -ngl 0 is --device cpu,\n"
     "                       -ngl N < the layer count is refused (no split across devices)\n"
     "    --special          let the prompt's text spell special tokens; --no-bos: no BOS token; -v: verbose\n"},
    {"info", "  info       -m MODEL [-v]\n", NULL},
    {"tokenize", "  tokenize   -m MODEL (-p TEXT | -f FILE) [--ids] [--no-bos] [--special]\n", NULL},
    {"perplexity", "  perplexity -m MODEL (-p TEXT | -f FILE) [--logits-out FILE] [-c CTX]\n", NULL},
    {"bench", "  bench      -m MODEL [-p 512] [-n 128] [-d 0] [-r 5] [-t N] [-ngl N]\n"
              "             -p, -n and -d take comma-separated lists (e.g. -d 0,8192): every test at every depth\n",
     "    -p N / -n N        prompt processing of N tokens / generation of N tokens (0 skips the test)\n"
     "    -d N               tokens of context before each test (prefilled, not timed)\n"
     "    -r N               timed repetitions after one warm-up; the table gives mean +- standard deviation\n"
     "    -b N               prompt and depth tokens per batch (default: the largest -p or -d, at most 2048)\n"
     "    -t N, -ngl N, --device D   as for run\n"},
    {"mkmodel", "  mkmodel    -o OUT --vocab VOCAB.gguf [--arch llama|qwen2|qwen3] [--type f16|q8_0|q4_k_m|...]\n"
                "             [--n-embd N] [--n-layer N] [--n-head N] [--n-head-kv N] [--n-ff N] [-s SEED]\n",
     NULL},
};

#ifndef RF_COMMIT
#define RF_COMMIT "unknown"
#endif
const char *rf_cli_commit(void) { return RF_COMMIT; }

void rf_usage(FILE *f, const char *cmd) {
    fprintf(f, "rocmforge %s: LLM inference for GGUF models on AMD and NVIDIA GPUs and the CPU\n"
               "usage: rocmforge COMMAND [flags]\n", rf_version());
    for (size_t i = 0; i < sizeof usages / sizeof usages[0]; i++)
        if (!cmd || !strcmp(cmd, usages[i].cmd)) {
            fputs(usages[i].text, f);
            if (cmd && usages[i].flags) fputs(usages[i].flags, f);
        }
    if (!cmd || !strcmp(cmd, "run") || !strcmp(cmd, "perplexity") || !strcmp(cmd, "bench"))
        fputs("  run, perplexity and bench also take -ctk/--cache-type-k and -ctv/--cache-type-v f16|f32|q8_0|q4_0:\n"
              "             the K/V cache type (default f16; f32 on cpu-ref and cpu-ggml; K and V alike)\n",
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
