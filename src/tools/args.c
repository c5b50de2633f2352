#include "args.h"
#include "rocmforge.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rf_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("rocmforge: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

void rf_args_defaults(rf_args *a) {
    memset(a, 0, sizeof *a);
    a->n_predict = 128;
    a->n_gpu_layers = -1;
    a->temp = 0.8f;
    a->top_k = 40;
    a->top_p = 0.95f;
    a->min_p = 0.05f;
    a->repeat_penalty = 1.0f;
    a->repeat_last_n = 64;
    a->reps = 5;
}

typedef enum { T_STR, T_INT, T_FLOAT, T_U64, T_BOOL, T_LIST } kind;
typedef struct {
    const char *shrt, *lng;
    kind k;
    size_t off, list_off; /* list_off: its rf_int_list, 0 for none */
} opt;

#define O(s, l, k, f) {s, l, k, offsetof(rf_args, f), 0}
#define OL(s, l, f, lf) {s, l, T_INT, offsetof(rf_args, f), offsetof(rf_args, lf)}
static const opt opts[] = {
    O("-m", "--model", T_STR, model),
    O("-p", "--prompt", T_STR, prompt),
    O("-f", "--file", T_STR, file),
    OL("-n", "--n-predict", n_predict, n_predict_list),
    O("-c", "--ctx-size", T_INT, n_ctx),
    O("-t", "--threads", T_INT, n_threads),
    O("-b", "--batch-size", T_INT, n_batch),
    O("-s", "--seed", T_U64, seed),
    O("-r", "--repetitions", T_INT, reps),
    O("-d", "--n-depth", T_LIST, depth_list),
    O("-ngl", "--n-gpu-layers", T_INT, n_gpu_layers),
    O(NULL, "--device", T_STR, device),
    O(NULL, "--temp", T_FLOAT, temp),
    O(NULL, "--top-k", T_INT, top_k),
    O(NULL, "--top-p", T_FLOAT, top_p),
    O(NULL, "--min-p", T_FLOAT, min_p),
    O(NULL, "--repeat-penalty", T_FLOAT, repeat_penalty),
    O(NULL, "--repeat-last-n", T_INT, repeat_last_n),
    O(NULL, "--frequency-penalty", T_FLOAT, freq_penalty),
    O(NULL, "--presence-penalty", T_FLOAT, presence_penalty),
    O(NULL, "--ids", T_BOOL, ids_only),
    O(NULL, "--no-bos", T_BOOL, no_bos),
    O(NULL, "--special", T_BOOL, special),
    O("-v", "--verbose", T_BOOL, verbose),
    O(NULL, "--logits-out", T_STR, logits_out),
    O("-o", "--output", T_STR, out),
    O(NULL, "--vocab", T_STR, vocab),
    O(NULL, "--arch", T_STR, arch),
    O(NULL, "--type", T_STR, type),
    O(NULL, "--n-embd", T_INT, n_embd),
    O(NULL, "--n-layer", T_INT, n_layer),
    O(NULL, "--n-head", T_INT, n_head),
    O(NULL, "--n-head-kv", T_INT, n_head_kv),
    O(NULL, "--n-ff", T_INT, n_ff),
    O(NULL, "--n-vocab", T_INT, n_vocab),
    O("-ctk", "--cache-type-k", T_STR, cache_type_k),
    O("-ctv", "--cache-type-v", T_STR, cache_type_v),
};

/* 0: `name` is not in `allowed`; 1: it is; 2: it is, as a list ("-n,"). */
static int allowed_has(const char *allowed, const char *name) {
    size_t n = strlen(name);
    for (const char *p = allowed; (p = strstr(p, name)); p += n)
        if ((p == allowed || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0 || p[n] == ','))
            return p[n] == ',' ? 2 : 1;
    return 0;
}

int rf_args_int_list(const char *s, const char *flag, long lo, long hi, rf_int_list *out) {
    out->n = 0;
    for (const char *p = s;; p++) {
        char *end = NULL;
        errno = 0;
        const long v = strtol(p, &end, 10);
        if (end == p || errno || v < lo || v > hi || (*end && *end != ',') || out->n == RF_ARGS_LIST_MAX) {
            rf_fail("bad value '%s' for %s: expected up to %d comma-separated integers in [%ld, %ld]", s, flag,
                    RF_ARGS_LIST_MAX, lo, hi);
            return -1;
        }
        out->v[out->n++] = (int)v;
        if (!*end) return 0;
        p = end;
    }
}

int rf_args_parse(rf_args *a, const char *cmd, const char *allowed, int argc, char **argv, int first) {
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = NULL;
        char name[64];
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        if (eq && (size_t)(eq - arg) < sizeof name) {
            memcpy(name, arg, (size_t)(eq - arg));
            name[eq - arg] = 0;
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", arg);
        }
        if (!val && (!strcmp(name, "-h") || !strcmp(name, "--help"))) {
            rf_usage(stdout, cmd);
            return 1;
        }
        const opt *o = NULL;
        for (size_t j = 0; j < sizeof opts / sizeof opts[0]; j++)
            if ((opts[j].shrt && !strcmp(name, opts[j].shrt)) || !strcmp(name, opts[j].lng)) o = &opts[j];
        int allow = o ? allowed_has(allowed, o->lng) : 0;
        if (o && o->shrt && allowed_has(allowed, o->shrt) > allow) allow = allowed_has(allowed, o->shrt);
        if (!allow) {
            if (name[0] != '-') rf_fail("unexpected argument '%s' for '%s' (see 'rocmforge help')", arg, cmd);
            else rf_fail("unknown flag '%s' for '%s' (see 'rocmforge help')", name, cmd);
            return -1;
        }
        void *dst = (char *)a + o->off;
        if (o->k == T_BOOL) {
            if (val) {
                rf_fail("flag %s takes no value", name);
                return -1;
            }
            *(bool *)dst = true;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc) {
                rf_fail("flag %s needs a value", name);
                return -1;
            }
            val = argv[++i];
        }
        char *end = NULL;
        errno = 0;
        switch (o->k) {
        case T_STR: *(const char **)dst = val; break;
        case T_INT: {
            if (allow == 2 && o->list_off) {
                rf_int_list *l = (rf_int_list *)((char *)a + o->list_off);
                if (rf_args_int_list(val, name, 0, RF_ARGS_LIST_HI, l)) return -1;
                *(int *)dst = l->v[0];
                break;
            }
            long v = strtol(val, &end, 10);
            if (!*val || *end) {
                rf_fail("bad value '%s' for %s: expected an integer", val, name);
                return -1;
            }
            if (errno || v < INT_MIN || v > INT_MAX) {
                rf_fail("bad value '%s' for %s: out of range (at most %d)", val, name, INT_MAX);
                return -1;
            }
            *(int *)dst = (int)v;
            break;
        }
        case T_U64: {
            unsigned long long v = strtoull(val, &end, 10);
            if (!*val || *end || errno || val[0] == '-') {
                rf_fail("bad value '%s' for %s: expected a non-negative integer", val, name);
                return -1;
            }
            *(uint64_t *)dst = v;
            if (o->off == offsetof(rf_args, seed)) a->seed_set = true;
            break;
        }
        case T_FLOAT: {
            float v = strtof(val, &end);
            if (!*val || *end || errno || v != v) {
                rf_fail("bad value '%s' for %s: expected a number", val, name);
                return -1;
            }
            *(float *)dst = v;
            break;
        }
        case T_LIST:
            if (rf_args_int_list(val, name, 0, RF_ARGS_LIST_HI, (rf_int_list *)dst)) return -1;
            break;
        case T_BOOL: break;
        }
    }
    /* Values the library would quietly read as its defaults (rocmforge.h) are refused when
     * negative: a negative context or batch size is a mistake, not a request for the default. */
    if (a->n_ctx < 0) {
        rf_fail("bad value %d for -c: expected 0 (the model's training context, at most 4096) or more", a->n_ctx);
        return -1;
    }
    if (a->n_batch < 0) {
        rf_fail("bad value %d for -b: expected 0 (the default, 512) or more", a->n_batch);
        return -1;
    }
    /* -1 and -2 as llama.cpp spells them (no limit: generation stops at its end or the context's) */
    if (a->n_predict < -2) {
        rf_fail("bad value %d for -n: expected -1 or -2 (until the end of generation or of the context), 0 or more",
                a->n_predict);
        return -1;
    }
    /* sampling: values whose arithmetic has no meaning (an infinite temperature or penalty, a
     * probability outside [0, 1], a penalty factor <= 0) */
    const struct {
        float v;
        const char *flag, *want;
        bool ok;
    } f[] = {{a->temp, "--temp", "a finite number (0 or less: greedy)", isfinite(a->temp)},
             {a->top_p, "--top-p", "a probability in [0, 1]", a->top_p >= 0.0f && a->top_p <= 1.0f},
             {a->min_p, "--min-p", "a probability in [0, 1]", a->min_p >= 0.0f && a->min_p <= 1.0f},
             {a->repeat_penalty, "--repeat-penalty", "a finite factor > 0 (1: off)",
              isfinite(a->repeat_penalty) && a->repeat_penalty > 0.0f},
             {a->freq_penalty, "--frequency-penalty", "a finite number", isfinite(a->freq_penalty)},
             {a->presence_penalty, "--presence-penalty", "a finite number", isfinite(a->presence_penalty)}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!f[i].ok) {
            rf_fail("bad value %g for %s: expected %s", (double)f[i].v, f[i].flag, f[i].want);
            return -1;
        }
    if (a->repeat_last_n < -1) {
        rf_fail("bad value %d for --repeat-last-n: expected -1 (the whole history), 0 (off) or more", a->repeat_last_n);
        return -1;
    }
    return 0;
}

static int kv_type_of(const char *flag, const char *v, int *kv) {
    if (!strcmp(v, "f16")) *kv = RF_KV_F16;
    else if (!strcmp(v, "f32")) *kv = RF_KV_F32;
    else if (!strcmp(v, "q8_0")) *kv = RF_KV_Q8_0;
    else if (!strcmp(v, "q4_0")) *kv = RF_KV_Q4_0;
    else {
        rf_fail("cache type '%s' for %s is not supported: use f16, f32, q8_0 or q4_0", v, flag);
        return -1;
    }
    return 0;
}

int rf_args_kv_type(const rf_args *a, int *kv) {
    int k = RF_KV_AUTO, v = RF_KV_AUTO;
    if (a->cache_type_k && kv_type_of("-ctk", a->cache_type_k, &k)) return -1;
    if (a->cache_type_v && kv_type_of("-ctv", a->cache_type_v, &v)) return -1;
    if (k != RF_KV_AUTO && v != RF_KV_AUTO && k != v) {
        rf_fail("-ctk %s and -ctv %s differ: the K and V caches must have the same type", a->cache_type_k,
                a->cache_type_v);
        return -1;
    }
    *kv = k != RF_KV_AUTO ? k : v;
    return 0;
}

char *rf_args_prompt_text(const rf_args *a, size_t *len) {
    if (a->prompt && a->file) {
        rf_fail("give either -p or -f, not both");
        return NULL;
    }
    if (a->prompt) {
        *len = strlen(a->prompt);
        char *s = malloc(*len + 1);
        memcpy(s, a->prompt, *len + 1);
        return s;
    }
    if (!a->file) {
        rf_fail("no input text: give -p TEXT or -f FILE");
        return NULL;
    }
    FILE *f = fopen(a->file, "rb");
    if (!f) {
        rf_fail("cannot open %s: %s", a->file, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) free(buf);
            buf = grown;
        }
    }
    const int err = ferror(f) ? errno : 0; /* a directory opens, then fails to read (EISDIR) */
    fclose(f);
    if (!buf || err) {
        rf_fail("cannot read %s: %s", a->file, buf ? strerror(err) : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}
