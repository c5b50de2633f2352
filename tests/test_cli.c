/* The command-line tool as a user meets it: every bad input gives one "rocmforge: ..." line and
 * a non-zero exit, never a crash; mkmodel -> info round trip; tokenize; perplexity --logits-out
 * against the golden logits; run streams the golden greedy text. Runs build/rocmforge
 * ($ROCMFORGE_BIN). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "golden.h"
#include "test.h"

static const char *bin;
static char out_buf[1 << 16], err_buf[1 << 16];

/* Runs the tool with `args` (shell words); returns its exit status (-1: killed by a signal). */
static int run(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s >/tmp/rf-cli-out.%d 2>/tmp/rf-cli-err.%d", bin, args, getpid(), getpid());
    int st = system(cmd);
    char p[64];
    snprintf(p, sizeof p, "/tmp/rf-cli-out.%d", getpid());
    char *o = test_read_file(p, NULL);
    snprintf(out_buf, sizeof out_buf, "%s", o ? o : "");
    free(o);
    unlink(p);
    snprintf(p, sizeof p, "/tmp/rf-cli-err.%d", getpid());
    char *e = test_read_file(p, NULL);
    snprintf(err_buf, sizeof err_buf, "%s", e ? e : "");
    free(e);
    unlink(p);
    if (WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) > 128)) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A bad input: exit 1, stderr has one error line naming the cause. */
static void bad(const char *args, const char *want) {
    int rc = run(args);
    int lines = 0;
    for (const char *p = err_buf; *p; p++) lines += *p == '\n';
    CHECK(rc == 1 && strstr(err_buf, "rocmforge: ") && strstr(err_buf, want),
          "`rocmforge %s`: exit %d, stderr '%s' (expected an error mentioning '%s')", args, rc, err_buf, want);
    CHECK(lines <= 2, "`rocmforge %s`: %d stderr lines, expected one error line", args, lines);
}

int main(void) {
    bin = getenv("ROCMFORGE_BIN");
    if (!bin) bin = "build/rocmforge";
    char args[2048];
    const char *stories = test_shared("models/stories260K.gguf");
    const char *vocab = test_shared("vocab/ggml-vocab-llama-spm.gguf");
    if (!test_file_exists(stories)) {
        SKIP("../shared missing");
        return test_finish();
    }

    CHECK(run("--version") == 0 && strstr(out_buf, "backends: cpu") && strstr(out_buf, " (commit "),
          "--version lists backends and the commit: %s", out_buf);
    bad("", "usage");
    bad("frobnicate", "unknown command");
    bad("run -m /nonexistent.gguf -p hi", "/nonexistent.gguf");
    bad("run -p hi", "no model");
    snprintf(args, sizeof args, "run -m %s", stories);
    bad(args, "-p TEXT or -f FILE");
    snprintf(args, sizeof args, "run -m %s -p hi --bogus", stories);
    bad(args, "unknown flag '--bogus'");
    snprintf(args, sizeof args, "run -m %s -p hi -n abc", stories);
    bad(args, "bad value 'abc' for -n");
    snprintf(args, sizeof args, "run -m %s -p hi --temp", stories);
    bad(args, "needs a value");
    snprintf(args, sizeof args, "run -m %s -p hi -t 99999", stories);
    bad(args, "99999 CPU threads asked for: at most 1024");
    snprintf(args, sizeof args, "bench -m %s -p 8 -n 4 -d -3", stories);
    bad(args, "bad value '-3' for -d");
    snprintf(args, sizeof args, "bench -m %s -p 8 -n -4", stories);
    bad(args, "bad value '-4' for -n");
    snprintf(args, sizeof args, "bench -m %s -p 8 -n 4 -r 0", stories);
    bad(args, "bad value 0 for -r");
    /* lists (bench's -p, -n, -d, as llama-bench takes them): malformed ones, and only where allowed */
    const char *bad_lists[][2] = {{"-n 4,,8", "for -n"}, {"-n 4,", "for -n"}, {"-p 8,x", "for -p"},
                                  {"-d ,8", "for -d"}, {"-d 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "up to 16"},
                                  {"-p 8,-1", "for -p"}, {"-d 99999999999", "for -d"}};
    for (size_t i = 0; i < sizeof bad_lists / sizeof bad_lists[0]; i++) {
        snprintf(args, sizeof args, "bench -m %s -r 1 %s", stories, bad_lists[i][0]);
        bad(args, bad_lists[i][1]);
    }
    /* Values without meaning, refused with one line each (the model's path goes into %s): negative
     * sizes that the library would read as "the default", sampling values the algorithm has no
     * meaning for, a directory as the prompt file (it used to give an empty prompt), windows of one
     * token for perplexity (it printed -nan), a list where a command takes one value. */
    const char *refused[][2] = {
        {"run -m %s -p hi -c -5", "bad value -5 for -c"},
        {"perplexity -m %s -p hi -b -3", "bad value -3 for -b"},
        {"run -m %s -p hi --repeat-last-n -2", "bad value -2 for --repeat-last-n"},
        {"run -m %s -p hi --temp inf", "--temp"},
        {"run -m %s -p hi --top-p -0.5", "--top-p"},
        {"run -m %s -p hi --top-p 2", "--top-p"},
        {"run -m %s -p hi --min-p 1.5", "--min-p"},
        {"run -m %s -p hi --repeat-penalty 0", "--repeat-penalty"},
        {"run -m %s -p hi --presence-penalty -inf", "--presence-penalty"},
        {"run -m %s -p hi --frequency-penalty inf", "--frequency-penalty"},
        {"perplexity -m %s -p 'a b c d' -c 1", "context of at least 2 tokens"},
        {"run -m %s -f /tmp", "cannot read /tmp"},
        {"run -m %s -p hi -n 4,8", "bad value '4,8' for -n: expected an integer"},
        {"run -m %s -p hi -c 99999999999", "bad value '99999999999' for -c: out of range (at most 2147483647)"},
        {"run -m %s -p hi -n -99999999999", "bad value '-99999999999' for -n: out of range"},
        {"run -m %s -p hi -n -7", "bad value -7 for -n: expected -1 or -2"},
        {"run -m %s -p hi -c 100000000",
         "context size 100000000 / batch 512 / sequences 1 out of range (at most 16777216 / 1048576 / 4096)"},
        {"bench -m %s -p 0 -n 0 -r 1", "nothing to measure"},
        {"bench -m %s -p 0,0 -n 0 -d 8 -r 1", "nothing to measure"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(args, sizeof args, refused[i][0], stories);
        bad(args, refused[i][1]);
    }
    /* ... and the values just inside: defaults, the whole history, greedy, filters off */
    snprintf(args, sizeof args,
             "run -m %s -p hi -c 0 -b 0 --repeat-last-n -1 --temp -1 --top-p 1 --min-p 0 --top-k 0 -n 2 --device cpu",
             stories);
    CHECK(run(args) == 0, "-c 0 -b 0 --repeat-last-n -1 --temp -1 --top-p 1 --min-p 0 --top-k 0: %s", err_buf);
    /* A run that fills its context says so, and one that stops at -n does not. */
    snprintf(args, sizeof args, "run -m %s -p hi -c 8 -n 100 --temp 0", stories);
    CHECK(run(args) == 0 && strstr(err_buf, "the context of 8 tokens is full"), "-c 8 -n 100: '%s'", err_buf);
    snprintf(args, sizeof args, "run -m %s -p hi -c 8 -n 2 --temp 0", stories);
    CHECK(run(args) == 0 && !strstr(err_buf, "is full"), "-c 8 -n 2: '%s'", err_buf);
    /* -h / --help after a command: its usage on stdout, exit 0; as a flag's value it is a value */
    CHECK(run("bench -h") == 0 && strstr(out_buf, "bench ") && strstr(out_buf, "comma-separated") &&
              !strstr(out_buf, "mkmodel") && !err_buf[0],
          "bench -h: %s / %s", out_buf, err_buf);
    CHECK(run("mkmodel --help") == 0 && strstr(out_buf, "--vocab") && !strstr(out_buf, "bench "),
          "mkmodel --help: %s", out_buf);
    CHECK(run("help") == 0 && strstr(out_buf, "bench ") && strstr(out_buf, "mkmodel ") && strstr(out_buf, "COMMAND -h"),
          "help: %s", out_buf);
    snprintf(args, sizeof args, "tokenize -m %s -p -h --ids --no-bos", vocab);
    CHECK(run(args) == 0 && strcmp(out_buf, "") && !strstr(out_buf, "usage"), "-p -h is a prompt: '%s'", out_buf);
    snprintf(args, sizeof args, "run -m %s -p 'Once upon a time there was a girl' -c 4", stories);
    bad(args, "does not fit the context");
    snprintf(args, sizeof args, "run -m %s -p hi --device gpu:7", stories);
    int rc = run(args);
    CHECK(rc == 1 && strstr(err_buf, "rocmforge: ") && !strstr(out_buf, " "), "GPU asked for: error, no CPU run (%d, %s)", rc, err_buf);
    /* K/V cache type flags (-ctk / -ctv, as llama.cpp): f16, f32, q8_0 and q4_0, K and V alike;
     * q8_0 and q4_0 need head_dim % 32 == 0 (stories260K: 8) */
    snprintf(args, sizeof args, "run -m %s -p hi -ctk q4_1", stories);
    bad(args, "cache type 'q4_1' for -ctk is not supported: use f16, f32, q8_0 or q4_0");
    snprintf(args, sizeof args, "run -m %s -p hi --cache-type-v bf16", stories);
    bad(args, "cache type 'bf16' for -ctv is not supported: use f16, f32, q8_0 or q4_0");
    snprintf(args, sizeof args, "run -m %s -p hi -ctk q8_0", stories);
    bad(args, "a q8_0 K/V cache needs head_dim a multiple of 32 (this model: 8)");
    snprintf(args, sizeof args, "run -m %s -p hi -ctv q4_0", stories);
    bad(args, "a q4_0 K/V cache needs head_dim a multiple of 32 (this model: 8)");
    snprintf(args, sizeof args, "run -m %s -p hi -ctk q4_0 -ctv q8_0", stories);
    bad(args, "-ctk q4_0 and -ctv q8_0 differ");
    snprintf(args, sizeof args, "bench -m %s -p 8 -n 4 -r 1 -ctk q8_0 -ctv q8_0", stories);
    bad(args, "head_dim");
    snprintf(args, sizeof args, "run -m %s -p hi -ctk q8_0 -ctv f16", stories);
    bad(args, "-ctk q8_0 and -ctv f16 differ");
    snprintf(args, sizeof args, "bench -m %s -p 8 -n 4 -r 1 -ctk f16 -ctv q8_0", stories);
    bad(args, "must have the same type");
    snprintf(args, sizeof args, "run -m %s -p hi -ctk f16 -ctv f32", stories);
    bad(args, "must have the same type");
    snprintf(args, sizeof args, "perplexity -m %s -p hi -ctk f32 --cache-type-v f16", stories);
    bad(args, "must have the same type");
    snprintf(args, sizeof args, "bench -m %s -p 8 -n 4 -r 1 -ctk f16 -ctv f32", stories);
    bad(args, "must have the same type");
    snprintf(args, sizeof args, "run -m %s -p hi -n 4 --temp 0 --device cpu -ctk f16 -ctv f16", stories);
    CHECK(run(args) == 0, "run -ctk f16 -ctv f16: %s", err_buf);
    /* bench: the llama-bench table, with type_k / type_v columns only when not f16 */
    snprintf(args, sizeof args, "bench -m %s -p 8 -n 4 -r 1 --device cpu -ctk f16", stories);
    CHECK(run(args) == 0 && strstr(out_buf, "| model") && !strstr(out_buf, "type_k") && strstr(out_buf, "tg4"),
          "bench -ctk f16: %s %s", out_buf, err_buf);
    /* lists: for every depth, every pp then every tg, named as llama-bench names them */
    snprintf(args, sizeof args, "bench -m %s -p 8,16 -n 4,0 -d 0,8 -r 1 --device cpu", stories);
    {
        const char *want[] = {"| pp8 |", "| pp16 |", "| tg4 |", "| pp8 @ d8 |", "| pp16 @ d8 |", "| tg4 @ d8 |"};
        int rc = run(args), rows = 0, order = 1;
        const char *at = out_buf;
        for (const char *p = out_buf; (p = strstr(p, "| llama ")); p++) rows++;
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            char cell[32]; /* the test column is right-aligned in 15 characters */
            snprintf(cell, sizeof cell, " %15.*s |", (int)strlen(want[i]) - 4, want[i] + 2);
            const char *q = strstr(at, cell);
            if (!q) order = 0;
            else at = q;
        }
        CHECK(rc == 0 && rows == 6 && order && !strstr(out_buf, "tg0"), "bench lists: %d rows, order %d: %s %s",
              rows, order, out_buf, err_buf);
        const char *last = strstr(out_buf, "\nbuild: "); /* llama-bench's closing line */
        CHECK(last && !strchr(last + 1, '|'), "bench ends with its build line: %s", out_buf);
    }
    snprintf(args, sizeof args, "bench -m %s -p 8 -n 4 -r 1 --device cpu -ctv f32", stories);
    CHECK(run(args) == 0 && strstr(out_buf, "| type_k | type_v |") && strstr(out_buf, "|    f32 |    f32 |"),
          "bench -ctv f32: %s %s", out_buf, err_buf);
    /* q8_0 on a model with head_dim 64: run, bench (its columns) and perplexity take it */
    const char *tiny = test_shared("models/tiny-llama-f32.gguf");
    if (test_file_exists(tiny)) {
        snprintf(args, sizeof args, "run -m %s -p hi -n 4 --temp 0 --device cpu -ctk q8_0", tiny);
        CHECK(run(args) == 0, "run -ctk q8_0: %s", err_buf);
        snprintf(args, sizeof args, "run -m %s -p hi -n 4 --temp 0 --device cpu --cache-type-k q8_0 --cache-type-v q8_0", tiny);
        CHECK(run(args) == 0, "run --cache-type-k q8_0 --cache-type-v q8_0: %s", err_buf);
        snprintf(args, sizeof args, "bench -m %s -p 8 -n 4 -r 1 --device cpu -ctk q8_0 -ctv q8_0", tiny);
        CHECK(run(args) == 0 && strstr(out_buf, "| type_k | type_v |") && strstr(out_buf, "|   q8_0 |   q8_0 |") &&
                  strstr(out_buf, "tg4"),
              "bench -ctk q8_0 -ctv q8_0: %s %s", out_buf, err_buf);
        snprintf(args, sizeof args, "perplexity -m %s -p 'Once upon a time' -ctv q8_0", tiny);
        CHECK(run(args) == 0 && strstr(out_buf, "perplexity: "), "perplexity -ctv q8_0: %s", err_buf);
        /* q4_0 likewise */
        snprintf(args, sizeof args, "run -m %s -p hi -n 4 --temp 0 --device cpu -ctk q4_0 -ctv q4_0", tiny);
        CHECK(run(args) == 0, "run -ctk q4_0 -ctv q4_0: %s", err_buf);
        snprintf(args, sizeof args, "bench -m %s -p 8 -n 4 -r 1 --device cpu -ctv q4_0", tiny);
        CHECK(run(args) == 0 && strstr(out_buf, "| type_k | type_v |") && strstr(out_buf, "|   q4_0 |   q4_0 |") &&
                  strstr(out_buf, "tg4"),
              "bench -ctv q4_0: %s %s", out_buf, err_buf);
        snprintf(args, sizeof args, "perplexity -m %s -p 'Once upon a time' --cache-type-k q4_0", tiny);
        CHECK(run(args) == 0 && strstr(out_buf, "perplexity: "), "perplexity --cache-type-k q4_0: %s", err_buf);
    } else {
        SKIP("tiny-llama-f32.gguf missing: q8_0 and q4_0 cache runs");
    }
    bad("info -m /etc/passwd", "GGUF");
    snprintf(args, sizeof args, "run -m %s -p hi", vocab);
    bad(args, "holds no tensors (a vocabulary-only file)");
    /* A truncated model file. */
    size_t len;
    char *bytes = test_read_file(stories, &len);
    char trunc[64];
    snprintf(trunc, sizeof trunc, "/tmp/rf-trunc-%d.gguf", getpid());
    FILE *f = fopen(trunc, "wb");
    fwrite(bytes, 1, len / 2, f);
    fclose(f);
    snprintf(args, sizeof args, "run -m %s -p hi", trunc);
    bad(args, trunc);
    /* An unsupported architecture: rewrite general.architecture "llama" -> "llamb". */
    char *arch = memmem(bytes, len, "llama", 5);
    if (arch) {
        arch[4] = 'b';
        f = fopen(trunc, "wb");
        fwrite(bytes, 1, len, f);
        fclose(f);
        snprintf(args, sizeof args, "run -m %s -p hi", trunc);
        bad(args, "");
        arch[4] = 'a';
    }
    /* A weight of a type the reader knows but rocmforge does not compute (mxfp4, the gpt-oss
     * experts' type): `info` lists it, loading refuses it by name. The tensor info is the name,
     * n_dims (2), ne[0..1], then the type id; [64, 64] mxfp4 takes fewer bytes than the f32 it
     * replaces, so the offsets stay valid. */
    static const char qname[] = "blk.0.attn_q.weight";
    char *q = memmem(bytes, len, qname, sizeof qname - 1);
    if (q && q + sizeof qname - 1 + 4 + 16 + 4 <= bytes + len) {
        const uint32_t mxfp4 = 39;
        memcpy(q + sizeof qname - 1 + 4 + 16, &mxfp4, 4);
        f = fopen(trunc, "wb");
        fwrite(bytes, 1, len, f);
        fclose(f);
        snprintf(args, sizeof args, "info -m %s -v", trunc);
        CHECK(run(args) == 0 && strstr(out_buf, "mxfp4"), "info lists an mxfp4 tensor: %s %s", out_buf, err_buf);
        snprintf(args, sizeof args, "run -m %s -p hi", trunc);
        bad(args, "blk.0.attn_q.weight has weight type mxfp4, which rocmforge does not support");
    } else {
        CHECK(0, "stories260K.gguf: no tensor info for %s", qname);
    }
    free(bytes);
    unlink(trunc);

    /* run: streams exactly the golden greedy continuation to stdout, speeds to stderr. */
    golden g;
    if (golden_load("stories260K", &g) == 0) {
        snprintf(args, sizeof args, "run -m %s -p '%s' --temp 0 -n 48", stories, g.prompt);
        CHECK(run(args) == 0, "run: %s", err_buf);
        CHECK(strstr(out_buf, " loved to play outside in the park. One day, she saw a big, red ball.") == out_buf,
              "run output: '%s'", out_buf);
        CHECK(strstr(err_buf, "tokens/s") != NULL, "run prints speeds to stderr");
        /* perplexity --logits-out: same layout as golden, same values. */
        char lpath[64];
        snprintf(lpath, sizeof lpath, "/tmp/rf-logits-%d.f32", getpid());
        snprintf(args, sizeof args, "perplexity -m %s -p '%s' --logits-out %s", stories, g.prompt, lpath);
        CHECK(run(args) == 0 && strstr(out_buf, "perplexity: "), "perplexity: %s", err_buf);
        size_t ln;
        float *lg = (float *)test_read_file(lpath, &ln);
        CHECK(lg && ln == (size_t)g.n_prompt * g.n_vocab * 4, "logits file size %zu", ln);
        if (lg && ln == (size_t)g.n_prompt * g.n_vocab * 4)
            CHECK(test_rel_l2(lg, g.logits, (size_t)g.n_prompt * g.n_vocab) < 3e-3, "logits-out differs from golden");
        free(lg);
        unlink(lpath);
        /* tokenize --ids on the model and on a vocab-only file. */
        snprintf(args, sizeof args, "tokenize -m %s -p '%s' --ids", stories, g.prompt);
        CHECK(run(args) == 0 && !strncmp(out_buf, "1 403 407 261", 13), "tokenize --ids: '%s'", out_buf);
        golden_free(&g);
    }
    snprintf(args, sizeof args, "tokenize -m %s -p 'Hello world' --ids --no-bos", vocab);
    CHECK(run(args) == 0 && !strcmp(out_buf, "15043 3186\n"), "tokenize vocab-only: '%s'", out_buf);
    snprintf(args, sizeof args, "tokenize -m %s -p '<s>hi' --ids --no-bos", vocab);
    CHECK(run(args) == 0 && strncmp(out_buf, "1 ", 2), "<s> is text without --special: '%s'", out_buf);
    snprintf(args, sizeof args, "tokenize -m %s -p '<s>hi' --ids --no-bos --special", vocab);
    CHECK(run(args) == 0 && !strncmp(out_buf, "1 ", 2), "<s> is BOS with --special: '%s'", out_buf);

    /* mkmodel -> info -> run round trip, for a few architectures and types. */
    const char *mk[][2] = {{"llama", "q4_k_m"}, {"qwen2", "q8_0"}, {"qwen3", "f16"}, {"llama", "iq4_xs"}};
    for (size_t i = 0; i < sizeof mk / sizeof mk[0]; i++) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/rf-mk-%d.gguf", getpid());
        snprintf(args, sizeof args,
                 "mkmodel -o %s --vocab %s --arch %s --type %s --n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 512",
                 path, vocab, mk[i][0], mk[i][1]);
        CHECK(run(args) == 0, "mkmodel %s %s: %s", mk[i][0], mk[i][1], err_buf);
        snprintf(args, sizeof args, "info -m %s", path);
        CHECK(run(args) == 0 && strstr(out_buf, mk[i][0]) && strstr(out_buf, "n_embd 256, n_layer 2, n_head 4, n_head_kv 2"),
              "info on mkmodel file: %s", out_buf);
        snprintf(args, sizeof args, "run -m %s -p hello -n 4 --temp 0", path);
        CHECK(run(args) == 0, "run on mkmodel %s %s file: %s", mk[i][0], mk[i][1], err_buf);
        unlink(path);
    }
    bad("mkmodel -o /tmp/x.gguf", "--vocab");
    /* shapes: each bad dimension refused before anything is written (a 1M-wide model used to
     * abort allocating its first tensor; the last, head dimension 25, made a file the loader
     * refuses: RoPE rotates pairs) */
    const char *bad_shapes[] = {"--n-ff 0", "--n-layer 0", "-c 0", "--n-embd 100 --n-head 3", "--n-head 4 --n-head-kv 3",
                                "--n-embd 1048576", "--n-ff 524288", "--n-embd 100 --n-head 4"};
    for (size_t i = 0; i < sizeof bad_shapes / sizeof bad_shapes[0]; i++) {
        snprintf(args, sizeof args, "mkmodel -o /tmp/rf-mk-bad-%d.gguf --vocab %s %s", (int)getpid(), vocab,
                 bad_shapes[i]);
        bad(args, "bad shape");
    }
    snprintf(args, sizeof args, "mkmodel -o /tmp/x.gguf --vocab %s --type q9_9", vocab);
    bad(args, "unsupported --type");
    return test_finish();
}
