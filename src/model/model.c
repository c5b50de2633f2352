#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/util.h"
#include "tokenizer/tokenizer.h"

static const struct {
    const char *name;
    rf_arch arch;
} archs[] = {{"llama", RF_ARCH_LLAMA}, {"qwen2", RF_ARCH_QWEN2}, {"qwen3", RF_ARCH_QWEN3}};

/* Reads "<arch>.<key>" as a positive int; required keys fail when absent. */
static int get_dim(const rf_gguf *g, const char *arch, const char *key, bool required, int dflt, int *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    int64_t v;
    int r = rf_gguf_get_int(g, full, &v);
    if (r < 0) return -1;
    if (r == 0) {
        if (required) {
            rf_set_error("missing hyperparameter %s", full);
            return -1;
        }
        *out = dflt;
        return 0;
    }
    if (v <= 0 || v > (1 << 30)) {
        rf_set_error("hyperparameter %s = %lld is out of range", full, (long long)v);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int get_real(const rf_gguf *g, const char *arch, const char *key, float dflt, float *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    double v;
    int r = rf_gguf_get_float(g, full, &v);
    if (r < 0) return -1;
    *out = r ? (float)v : dflt;
    return 0;
}

int rf_hparams_read(const rf_gguf *g, rf_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    const char *arch;
    if (rf_gguf_get_str(g, "general.architecture", &arch) != 1) {
        rf_set_error("missing general.architecture: not a model file");
        return -1;
    }
    size_t i;
    for (i = 0; i < RF_ARRAY_LEN(archs); i++)
        if (!strcmp(arch, archs[i].name)) break;
    if (i == RF_ARRAY_LEN(archs)) {
        rf_set_error("unsupported architecture '%s' (supported: llama, qwen2, qwen3)", arch);
        return -1;
    }
    hp->arch = archs[i].arch;
    hp->arch_name = archs[i].name;
    if (get_dim(g, arch, "embedding_length", true, 0, &hp->n_embd) ||
        get_dim(g, arch, "block_count", true, 0, &hp->n_layer) ||
        get_dim(g, arch, "attention.head_count", true, 0, &hp->n_head) ||
        get_dim(g, arch, "attention.head_count_kv", false, hp->n_head, &hp->n_kv_head) ||
        get_dim(g, arch, "feed_forward_length", true, 0, &hp->n_ff) ||
        get_dim(g, arch, "context_length", false, 2048, &hp->n_ctx_train) ||
        get_dim(g, arch, "attention.key_length", false, hp->n_embd / hp->n_head, &hp->head_dim) ||
        get_dim(g, arch, "rope.dimension_count", false, hp->head_dim, &hp->n_rot) ||
        get_dim(g, arch, "vocab_size", false, 0, &hp->n_vocab))
        return -1;
    if (hp->n_head % hp->n_kv_head) {
        rf_set_error("head_count %d is not a multiple of head_count_kv %d", hp->n_head, hp->n_kv_head);
        return -1;
    }
    if (hp->head_dim <= 0 || hp->head_dim % 2 || hp->n_rot > hp->head_dim || hp->n_rot % 2) {
        rf_set_error("bad head dimension %d / rope dimension %d", hp->head_dim, hp->n_rot);
        return -1;
    }
    float dflt_base = hp->arch == RF_ARCH_LLAMA ? 10000.0f : 1000000.0f;
    float eps_dflt = 1e-5f;
    if (get_real(g, arch, "attention.layer_norm_rms_epsilon", eps_dflt, &hp->rms_eps) ||
        get_real(g, arch, "rope.freq_base", dflt_base, &hp->rope_base))
        return -1;
    /* Rope scaling: `rope.scaling.type` linear with `rope.scaling.factor`, or the older
     * `rope.scale_linear`. Other types (yarn, longrope) are refused rather than run wrongly. */
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *stype = NULL;
    if (rf_gguf_get_str(g, key, &stype) < 0) return -1;
    float factor = 1.0f;
    if (get_real(g, arch, "rope.scale_linear", 1.0f, &factor)) return -1;
    if (stype && strcmp(stype, "none") && strcmp(stype, "linear")) {
        rf_set_error("rope scaling type '%s' is not supported (supported: none, linear)", stype);
        return -1;
    }
    if (stype && !strcmp(stype, "linear") && get_real(g, arch, "rope.scaling.factor", factor, &factor)) return -1;
    if (!(factor > 0.0f)) {
        rf_set_error("bad rope scaling factor %g", factor);
        return -1;
    }
    hp->rope_freq_scale = 1.0f / factor;
    hp->rope_mode = hp->arch == RF_ARCH_LLAMA ? RF_ROPE_NORMAL : RF_ROPE_NEOX;
    hp->has_qkv_bias = hp->arch == RF_ARCH_QWEN2;
    hp->has_qk_norm = hp->arch == RF_ARCH_QWEN3;
    return 0;
}

/* Binds `w` to tensor `name` and checks it is [n_in] x [n_out] (ne[0] = n_in). 1-D tensors
 * (norms, biases) must be f32: every backend reads them as plain floats. */
static int bind(rf_model *m, rf_weight *w, const char *name, int64_t n_in, int64_t n_out, bool required) {
    const rf_gguf_tensor *t = rf_gguf_find_tensor(m->gguf, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (!required) return 0;
        if (m->gguf->n_tensors == 0)
            rf_set_error("tensor %s is missing: the file holds no tensors (a vocabulary-only file)", name);
        else
            rf_set_error("tensor %s is missing", name);
        return -1;
    }
    bool is_vec = n_out == 1;
    uint64_t want_ne1 = (uint64_t)n_out;
    if ((uint64_t)t->ne[0] != (uint64_t)n_in || t->ne[1] != (is_vec ? 1 : want_ne1) || t->ne[2] != 1 || t->ne[3] != 1) {
        rf_set_error("tensor %s has shape [%llu, %llu, %llu, %llu], expected [%lld, %lld]", name,
                     (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                     (unsigned long long)t->ne[3], (long long)n_in, (long long)n_out);
        return -1;
    }
    const rf_type_info *ti = rf_type_get(t->type);
    if (!ti || !ti->supported) {
        rf_set_error("tensor %s has weight type %s, which rocmforge does not support", name, rf_type_name(t->type));
        return -1;
    }
    if (is_vec && t->type != RF_TYPE_F32) {
        rf_set_error("tensor %s has type %s; 1-D tensors must be f32", name, rf_type_name(t->type));
        return -1;
    }
    w->name = t->name;
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->host = t->data;
    m->weight_bytes += t->n_bytes;
    m->n_params += t->n_elems;
    return 0;
}

rf_model *rf_model_open(const char *path) {
    rf_gguf *g = rf_gguf_open(path);
    if (!g) return NULL;
    rf_model *m = rf_xcalloc(1, sizeof *m);
    m->gguf = g;
    rf_hparams *hp = &m->hp;
    if (rf_hparams_read(g, hp)) goto fail;
    m->tok = rf_tokenizer_load(g);
    if (!m->tok) {
        rf_prefix_error("tokenizer");
        goto fail;
    }
    /* Vocabulary size: metadata, else the embedding / output shapes, else the token list. */
    const rf_gguf_tensor *te = rf_gguf_find_tensor(g, "token_embd.weight");
    const rf_gguf_tensor *to = rf_gguf_find_tensor(g, "output.weight");
    if (!hp->n_vocab) {
        if (te && te->n_dims == 2) hp->n_vocab = (int)RF_MIN(te->ne[1], (uint64_t)1 << 30);
        else if (to && to->n_dims == 2) hp->n_vocab = (int)RF_MIN(to->ne[1], (uint64_t)1 << 30);
        else hp->n_vocab = rf_tokenizer_n_vocab(m->tok);
    }
    if (rf_tokenizer_n_vocab(m->tok) > hp->n_vocab) {
        rf_set_error("tokenizer has %d tokens but the model's vocabulary is %d", rf_tokenizer_n_vocab(m->tok), hp->n_vocab);
        goto fail;
    }
    hp->tied_embeddings = to == NULL;

    int64_t d = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim, kv_dim = (int64_t)hp->n_kv_head * hp->head_dim;
    if (bind(m, &m->tok_embd, "token_embd.weight", d, hp->n_vocab, true) ||
        bind(m, &m->output_norm, "output_norm.weight", d, 1, true) ||
        bind(m, &m->output, "output.weight", d, hp->n_vocab, false) ||
        bind(m, &m->rope_freqs, "rope_freqs.weight", hp->n_rot / 2, 1, false))
        goto fail;
    if (hp->tied_embeddings) m->output = m->tok_embd;
    hp->has_rope_freqs = m->rope_freqs.host != NULL;

    m->layers = rf_xcalloc((size_t)hp->n_layer, sizeof *m->layers);
    for (int l = 0; l < hp->n_layer; l++) {
        rf_layer *L = &m->layers[l];
        char n[14][64];
        const char *suffix[14] = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                                  "attn_output.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias",
                                  "attn_q_norm.weight", "attn_k_norm.weight", "ffn_norm.weight",
                                  "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};
        for (int i = 0; i < 14; i++) snprintf(n[i], sizeof n[i], "blk.%d.%s", l, suffix[i]);
        bool bias = hp->has_qkv_bias, qkn = hp->has_qk_norm;
        if (bind(m, &L->attn_norm, n[0], d, 1, true) || bind(m, &L->wq, n[1], d, q_dim, true) ||
            bind(m, &L->wk, n[2], d, kv_dim, true) || bind(m, &L->wv, n[3], d, kv_dim, true) ||
            bind(m, &L->wo, n[4], q_dim, d, true) || bind(m, &L->bq, n[5], q_dim, 1, bias) ||
            bind(m, &L->bk, n[6], kv_dim, 1, bias) || bind(m, &L->bv, n[7], kv_dim, 1, bias) ||
            bind(m, &L->q_norm, n[8], hp->head_dim, 1, qkn) || bind(m, &L->k_norm, n[9], hp->head_dim, 1, qkn) ||
            bind(m, &L->ffn_norm, n[10], d, 1, true) || bind(m, &L->w_gate, n[11], d, hp->n_ff, true) ||
            bind(m, &L->w_up, n[12], d, hp->n_ff, true) || bind(m, &L->w_down, n[13], hp->n_ff, d, true))
            goto fail;
    }
    const char *name = NULL;
    rf_gguf_get_str(g, "general.name", &name);
    if (!name) {
        name = strrchr(path, '/');
        name = name ? name + 1 : path;
    }
    m->name = rf_xstrdup(name);
    return m;
fail:
    rf_prefix_error("%s", path);
    rf_model_close(m);
    return NULL;
}

static int upload_one(rf_model *m, rf_weight *w) {
    if (!w->host || w->data) return 0;
    uint64_t bytes = 0;
    rf_row_bytes(w->type, (uint64_t)w->n_in, &bytes);
    bytes *= (uint64_t)w->n_out;
    w->data = m->be->ops->upload_weight(m->be, w->host, bytes);
    if (!w->data) {
        rf_prefix_error("uploading %s", w->name);
        return -1;
    }
    return 0;
}

/* Uploads a weight that only matmul reads and lets the backend rearrange it. */
static int upload_matrix(rf_model *m, rf_weight *w) {
    const bool fresh = w->host && !w->data;
    if (upload_one(m, w)) return -1;
    if (fresh && w->data && m->be->ops->prepare_matmul_weight && m->be->ops->prepare_matmul_weight(m->be, w)) {
        rf_prefix_error("preparing %s", w->name);
        return -1;
    }
    return 0;
}

int rf_model_upload(rf_model *m, rf_backend *be) {
    m->be = be;
    if (upload_one(m, &m->tok_embd) || upload_one(m, &m->output_norm) || upload_one(m, &m->rope_freqs))
        return -1;
    if (m->hp.tied_embeddings) m->output = m->tok_embd; /* read by embed too: not rearranged */
    else if (upload_matrix(m, &m->output)) return -1;
    for (int l = 0; l < m->hp.n_layer; l++) {
        rf_layer *L = &m->layers[l];
        rf_weight *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            if (upload_matrix(m, mats[i])) return -1;
        rf_weight *w = &L->attn_norm;
        for (size_t i = 0; i < sizeof(rf_layer) / sizeof(rf_weight); i++)
            if (upload_one(m, &w[i])) return -1;
    }
    return 0;
}

static void free_one(rf_model *m, rf_weight *w) {
    if (w->data && m->be) m->be->ops->free_weight(m->be, w->data);
    w->data = NULL;
    w->layout = 0;
}

void rf_model_close(rf_model *m) {
    if (!m) return;
    if (m->be) {
        if (!m->hp.tied_embeddings) free_one(m, &m->output);
        free_one(m, &m->tok_embd);
        free_one(m, &m->output_norm);
        free_one(m, &m->rope_freqs);
        for (int l = 0; m->layers && l < m->hp.n_layer; l++) {
            rf_weight *w = &m->layers[l].attn_norm;
            for (size_t i = 0; i < sizeof(rf_layer) / sizeof(rf_weight); i++) free_one(m, &w[i]);
        }
    }
    free(m->layers);
    free(m->name);
    if (m->tok) rf_tokenizer_free(m->tok);
    rf_gguf_close(m->gguf);
    free(m);
}
