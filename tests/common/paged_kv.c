#include "paged_kv.h"

#include <math.h>
#include <stdlib.h>

#include "core/dtype.h"
#include "core/kv_format.h"
#include "core/util.h"
#include "test.h"

void test_paged_kv_make(test_paged_kv *c, int n_kv, int hd, int bsz, const int *len, const int *tail, int n_seq) {
    c->max_len = 0;
    c->n_tok = 0;
    for (int s = 0; s < n_seq; s++) {
        c->max_len = len[s] > c->max_len ? len[s] : c->max_len;
        c->n_tok += tail[s];
    }
    c->bsz = bsz;
    c->max_blocks = (c->max_len + bsz - 1) / bsz;
    const int n_blocks = c->max_blocks * n_seq + 3;
    c->kvd = (size_t)n_kv * hd;
    c->n_slots = (size_t)n_blocks * bsz;
    int *perm = malloc(sizeof(int) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = test_randint(0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    c->bt = malloc(sizeof(int32_t) * (size_t)n_seq * c->max_blocks);
    for (int i = 0; i < n_seq * c->max_blocks; i++) c->bt[i] = perm[i];
    free(perm);
    c->kc = malloc(4 * c->n_slots * c->kvd);
    c->vc = malloc(4 * c->n_slots * c->kvd);
    for (size_t i = 0; i < c->n_slots * c->kvd; i++) c->kc[i] = c->vc[i] = NAN;
    for (int s = 0; s < n_seq; s++)
        for (int p = 0; p < len[s]; p++) {
            const size_t sl = test_paged_kv_slot(c, s, p);
            for (size_t i = 0; i < c->kvd; i++) {
                c->kc[sl * c->kvd + i] = test_randf(-1, 1);
                c->vc[sl * c->kvd + i] = test_randf(-1, 1);
            }
        }
    c->pos = malloc(4 * (size_t)c->n_tok);
    c->seq_row = malloc(4 * (size_t)c->n_tok);
    int t = 0;
    for (int r = 0; t < c->n_tok; r++)
        for (int s = 0; s < n_seq; s++)
            if (r < tail[s]) {
                c->pos[t] = len[s] - tail[s] + r;
                c->seq_row[t++] = s;
            }
}

void test_paged_kv_free(test_paged_kv *c) {
    free(c->bt);
    free(c->pos);
    free(c->seq_row);
    free(c->kc);
    free(c->vc);
}

size_t test_paged_kv_slot(const test_paged_kv *c, int s, int p) {
    return (size_t)c->bt[s * c->max_blocks + p / c->bsz] * c->bsz + p % c->bsz;
}

void *test_kv_pack(const float *src, uint32_t kv_type, size_t n) {
    void *d = malloc(n * (kv_type == RF_TYPE_F16 ? 2 : 4));
    for (size_t i = 0; i < n; i++) {
        if (kv_type == RF_TYPE_F16) ((uint16_t *)d)[i] = rf_fp32_to_fp16(src[i]);
        else ((float *)d)[i] = src[i];
    }
    return d;
}

void *test_kv_pack_rows(const float *src, uint32_t kv_type, size_t n_rows, size_t kv_dim) {
    const size_t rb = rf_kv_row_bytes(kv_type, (int64_t)kv_dim);
    char *d = malloc(n_rows * rb);
    for (size_t r = 0; r < n_rows; r++) rf_kv_write_row(kv_type, src + r * kv_dim, (int64_t)kv_dim, d + r * rb);
    return d;
}

float *test_kv_unpack_rows(const void *cache, uint32_t kv_type, size_t n_rows, size_t kv_dim) {
    const size_t rb = rf_kv_row_bytes(kv_type, (int64_t)kv_dim);
    float *f = malloc(sizeof(float) * n_rows * kv_dim);
    for (size_t r = 0; r < n_rows; r++)
        rf_kv_read_row(kv_type, (const char *)cache + r * rb, (int64_t)kv_dim, 0, (int64_t)kv_dim, f + r * kv_dim);
    return f;
}
