/* rocmforge mkmodel: writes a GGUF model of a chosen architecture, shape and weight type with
 * random weights and the tokenizer of a vocab GGUF. This is how rocmforge is benchmarked at real
 * sizes (e.g. the Llama-2-7B shape) where real weights cannot be shipped; llama.cpp loads these
 * files too.
 *
 * Quantized tensors are written as random blocks whose f16 scale fields are set to values that
 * keep weights near +-0.02 (typical of trained models), so activations stay finite; this is
 * fast enough for multi-gigabyte files. Norm weights are 1, biases small. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "core/dtype.h"
#include "core/gguf.h"
#include "core/util.h"

typedef struct {
    const char *name;
    uint32_t base;  /* most tensors */
    uint32_t more;  /* attn_v / ffn_down in the layers that get more bits, and output */
    uint32_t ftype; /* llama.cpp's general.file_type */
} ftype_info;

static const ftype_info ftypes[] = {
    {"f32", RF_TYPE_F32, RF_TYPE_F32, 0},        {"f16", RF_TYPE_F16, RF_TYPE_F16, 1},
    {"bf16", RF_TYPE_BF16, RF_TYPE_BF16, 32},    {"q8_0", RF_TYPE_Q8_0, RF_TYPE_Q8_0, 7},
    {"q4_0", RF_TYPE_Q4_0, RF_TYPE_Q4_0, 2},     {"q4_1", RF_TYPE_Q4_1, RF_TYPE_Q4_1, 3},
    {"q5_0", RF_TYPE_Q5_0, RF_TYPE_Q5_0, 8},     {"q5_1", RF_TYPE_Q5_1, RF_TYPE_Q5_1, 9},
    {"q2_k", RF_TYPE_Q2_K, RF_TYPE_Q2_K, 10},    {"q3_k", RF_TYPE_Q3_K, RF_TYPE_Q3_K, 11},
    {"q4_k", RF_TYPE_Q4_K, RF_TYPE_Q4_K, 14},    {"q4_k_m", RF_TYPE_Q4_K, RF_TYPE_Q6_K, 15},
    {"q5_k", RF_TYPE_Q5_K, RF_TYPE_Q5_K, 16},    {"q5_k_m", RF_TYPE_Q5_K, RF_TYPE_Q6_K, 17},
    {"q6_k", RF_TYPE_Q6_K, RF_TYPE_Q6_K, 18},    {"iq4_nl", RF_TYPE_IQ4_NL, RF_TYPE_IQ4_NL, 25},
    {"iq4_xs", RF_TYPE_IQ4_XS, RF_TYPE_IQ4_XS, 30},
};

/* f16 scale fields of each block type: offset of d (and of dmin/m when present, else -1),
 * and the values that give weights of roughly +-0.02 for random quants and sub-scales. */
typedef struct {
    uint32_t type;
    int d_off, m_off;
    float d, m;
} scale_spec;

static const scale_spec scales[] = {
    {RF_TYPE_Q4_0, 0, -1, 4e-3f, 0},       {RF_TYPE_Q4_1, 0, 2, 4e-3f, -3e-2f},
    {RF_TYPE_Q5_0, 0, -1, 2e-3f, 0},       {RF_TYPE_Q5_1, 0, 2, 2e-3f, -3e-2f},
    {RF_TYPE_Q8_0, 0, -1, 2e-4f, 0},       {RF_TYPE_Q2_K, 80, 82, 2e-3f, 3e-3f},
    {RF_TYPE_Q3_K, 108, -1, 6e-4f, 0},     {RF_TYPE_Q4_K, 0, 2, 8e-5f, 6e-4f},
    {RF_TYPE_Q5_K, 0, 2, 4e-5f, 6e-4f},    {RF_TYPE_Q6_K, 208, -1, 2e-5f, 0},
    {RF_TYPE_IQ4_NL, 0, -1, 3e-4f, 0},     {RF_TYPE_IQ4_XS, 0, -1, 2e-5f, 0},
};

typedef enum { K_WEIGHT, K_NORM, K_BIAS } tensor_kind;

typedef struct {
    tensor_kind *kind;
    uint32_t *type;
    uint64_t rng;
} fill_ctx;

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static float rand_weight(uint64_t *s) {
    return ((float)(next_rand(s) >> 40) * (1.0f / 16777216.0f) - 0.5f) * 0.07f; /* uniform +-0.035 */
}

static int fill(void *vctx, uint64_t ti, void *dst, uint64_t n_bytes) {
    fill_ctx *c = vctx;
    uint32_t t = c->type[ti];
    uint8_t *b = dst;
    if (c->kind[ti] != K_WEIGHT || t == RF_TYPE_F32 || t == RF_TYPE_F16 || t == RF_TYPE_BF16) {
        uint64_t esz = rf_type_get(t)->block_bytes, n = n_bytes / esz;
        for (uint64_t i = 0; i < n; i++) {
            float v = c->kind[ti] == K_NORM ? 1.0f : c->kind[ti] == K_BIAS ? rand_weight(&c->rng) * 0.3f : rand_weight(&c->rng);
            if (t == RF_TYPE_F32) {
                memcpy(b + 4 * i, &v, 4);
            } else {
                uint16_t h = t == RF_TYPE_F16 ? rf_fp32_to_fp16(v) : rf_fp32_to_bf16(v);
                memcpy(b + 2 * i, &h, 2);
            }
        }
        return 0;
    }
    for (uint64_t i = 0; i + 8 <= n_bytes; i += 8) {
        uint64_t r = next_rand(&c->rng);
        memcpy(b + i, &r, 8);
    }
    const scale_spec *sp = NULL;
    for (size_t i = 0; i < RF_ARRAY_LEN(scales); i++)
        if (scales[i].type == t) sp = &scales[i];
    uint64_t bb = rf_type_get(t)->block_bytes;
    uint16_t d = rf_fp32_to_fp16(sp->d), m = rf_fp32_to_fp16(sp->m);
    for (uint64_t off = 0; off + bb <= n_bytes; off += bb) {
        memcpy(b + off + sp->d_off, &d, 2);
        if (sp->m_off >= 0) memcpy(b + off + sp->m_off, &m, 2);
    }
    return 0;
}

/* llama.cpp's Q4_K_M / Q5_K_M give attn_v and ffn_down more bits in the first and last eighth
 * of the layers and in every third layer between. */
static bool more_bits(int l, int n) { return l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2; }

int cmd_mkmodel(int argc, char **argv) {
    rf_args a;
    rf_args_defaults(&a);
    a.arch = "llama";
    a.type = "f16";
    a.n_embd = 256;
    a.n_layer = 2;
    a.n_head = 4;
    a.n_ff = 512;
    a.n_ctx = 4096;
    const int parsed = rf_args_parse(
        &a, "mkmodel", "--arch --type --n-embd --n-layer --n-head --n-head-kv --n-ff -c --vocab -o -s", argc, argv, 2);
    if (parsed) return parsed < 0; /* 1: -h printed the usage */
    if (!a.out) return rf_fail("no output file: give -o FILE.gguf");
    if (!a.vocab) return rf_fail("no tokenizer: give --vocab VOCAB.gguf (e.g. ../shared/vocab/ggml-vocab-llama-spm.gguf)");
    if (strcmp(a.arch, "llama") && strcmp(a.arch, "qwen2") && strcmp(a.arch, "qwen3"))
        return rf_fail("unsupported --arch '%s' (llama, qwen2, qwen3)", a.arch);
    const ftype_info *ft = NULL;
    for (size_t i = 0; i < RF_ARRAY_LEN(ftypes); i++)
        if (!strcmp(ftypes[i].name, a.type)) ft = &ftypes[i];
    if (!ft) return rf_fail("unsupported --type '%s' (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q4_k_m q5_k q5_k_m q6_k iq4_nl iq4_xs)", a.type);
    if (!a.n_head_kv) a.n_head_kv = a.n_head;
    /* the caps are far above any released model (n_embd 16384, n_ff 53248); a typo such as a
     * million-wide model is refused here instead of failing tens of gigabytes into the write */
    if (a.n_embd <= 0 || a.n_layer <= 0 || a.n_head <= 0 || a.n_ff <= 0 || a.n_head_kv <= 0 || a.n_ctx <= 0 ||
        a.n_embd % a.n_head || a.n_head % a.n_head_kv || a.n_layer > 4096 || a.n_embd > 65536 || a.n_ff > 262144 ||
        (a.n_embd / a.n_head) % 2) /* RoPE rotates pairs: the loader refuses an odd head dimension */
        return rf_fail("bad shape: n_embd %d (at most 65536), n_layer %d (at most 4096), n_head %d, n_head_kv %d, n_ff %d "
                       "(at most 262144), context %d: all positive, n_embd a multiple of n_head with an even quotient "
                       "(the head dimension), n_head of n_head_kv",
                       a.n_embd, a.n_layer, a.n_head, a.n_head_kv, a.n_ff, a.n_ctx);
    int blk = (int)rf_type_get(ft->base)->block_elems;
    if (a.n_embd % blk || a.n_ff % blk) return rf_fail("n_embd and n_ff must be multiples of %d for %s", blk, a.type);

    rf_gguf *voc = rf_gguf_open(a.vocab);
    if (!voc) return rf_fail("%s", rf_last_error());
    const rf_gguf_kv *toks;
    if (rf_gguf_get_arr(voc, "tokenizer.ggml.tokens", RF_GGUF_STRING, &toks) != 1) {
        rf_gguf_close(voc);
        return rf_fail("%s has no tokenizer.ggml.tokens", a.vocab);
    }
    int n_vocab = (int)toks->arr_n;
    int hd = a.n_embd / a.n_head, q_dim = a.n_embd, kv_dim = a.n_head_kv * hd;

    rf_gguf_writer *w = rf_gguf_writer_new();
    char key[128], name[128];
    rf_gguf_w_str(w, "general.architecture", a.arch);
    snprintf(name, sizeof name, "rocmforge-random %s %dx%d %s", a.arch, a.n_layer, a.n_embd, a.type);
    rf_gguf_w_str(w, "general.name", name);
    rf_gguf_w_u32(w, "general.file_type", ft->ftype);
#define KEY(k) (snprintf(key, sizeof key, "%s.%s", a.arch, k), key)
    rf_gguf_w_u32(w, KEY("context_length"), (uint32_t)a.n_ctx);
    rf_gguf_w_u32(w, KEY("embedding_length"), (uint32_t)a.n_embd);
    rf_gguf_w_u32(w, KEY("block_count"), (uint32_t)a.n_layer);
    rf_gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)a.n_ff);
    rf_gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)a.n_head);
    rf_gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)a.n_head_kv);
    rf_gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), strcmp(a.arch, "llama") ? 1e-6f : 1e-5f);
    rf_gguf_w_f32(w, KEY("rope.freq_base"), strcmp(a.arch, "llama") ? 1e6f : 1e4f);
    rf_gguf_w_u32(w, KEY("vocab_size"), (uint32_t)n_vocab);
    if (!strcmp(a.arch, "qwen3")) rf_gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)hd);
    rf_gguf_w_copy_kv(w, voc, "tokenizer.");

    int cap = 16 * a.n_layer + 8, nt = 0;
    fill_ctx fc = {rf_xmalloc(sizeof(tensor_kind) * (size_t)cap), rf_xmalloc(sizeof(uint32_t) * (size_t)cap),
                   a.seed_set ? a.seed | 1 : 0x853c49e6748fea9bULL};
#define ADD(nm, kd, ty, n0, n1)                                                              \
    do {                                                                                     \
        uint64_t ne_[2] = {(uint64_t)(n0), (uint64_t)(n1)};                                  \
        fc.kind[nt] = kd;                                                                    \
        fc.type[nt] = ty;                                                                    \
        nt++;                                                                                \
        rf_gguf_w_tensor(w, nm, ty, (n1) == 1 ? 1 : 2, ne_, NULL);                           \
    } while (0)
    ADD("token_embd.weight", K_WEIGHT, ft->base, a.n_embd, n_vocab);
    ADD("output_norm.weight", K_NORM, RF_TYPE_F32, a.n_embd, 1);
    ADD("output.weight", K_WEIGHT, ft->more, a.n_embd, n_vocab);
    for (int l = 0; l < a.n_layer; l++) {
        uint32_t vt = more_bits(l, a.n_layer) ? ft->more : ft->base;
        char t[64];
#define T(s) (snprintf(t, sizeof t, "blk.%d.%s", l, s), t)
        ADD(T("attn_norm.weight"), K_NORM, RF_TYPE_F32, a.n_embd, 1);
        ADD(T("attn_q.weight"), K_WEIGHT, ft->base, a.n_embd, q_dim);
        ADD(T("attn_k.weight"), K_WEIGHT, ft->base, a.n_embd, kv_dim);
        ADD(T("attn_v.weight"), K_WEIGHT, vt, a.n_embd, kv_dim);
        ADD(T("attn_output.weight"), K_WEIGHT, ft->base, q_dim, a.n_embd);
        if (!strcmp(a.arch, "qwen2")) {
            ADD(T("attn_q.bias"), K_BIAS, RF_TYPE_F32, q_dim, 1);
            ADD(T("attn_k.bias"), K_BIAS, RF_TYPE_F32, kv_dim, 1);
            ADD(T("attn_v.bias"), K_BIAS, RF_TYPE_F32, kv_dim, 1);
        }
        if (!strcmp(a.arch, "qwen3")) {
            ADD(T("attn_q_norm.weight"), K_NORM, RF_TYPE_F32, hd, 1);
            ADD(T("attn_k_norm.weight"), K_NORM, RF_TYPE_F32, hd, 1);
        }
        ADD(T("ffn_norm.weight"), K_NORM, RF_TYPE_F32, a.n_embd, 1);
        ADD(T("ffn_gate.weight"), K_WEIGHT, ft->base, a.n_embd, a.n_ff);
        ADD(T("ffn_up.weight"), K_WEIGHT, ft->base, a.n_embd, a.n_ff);
        ADD(T("ffn_down.weight"), K_WEIGHT, more_bits(l, a.n_layer) ? ft->more : ft->base, a.n_ff, a.n_embd);
    }
    int rc = rf_gguf_writer_write(w, a.out, fill, &fc) ? rf_fail("%s", rf_last_error()) : 0;
    if (!rc) fprintf(stderr, "wrote %s: %s, %d layers, n_embd %d, %d tensors, type %s\n", a.out, a.arch, a.n_layer, a.n_embd, nt, a.type);
    rf_gguf_writer_free(w);
    rf_gguf_close(voc);
    free(fc.kind);
    free(fc.type);
    return rc;
}
