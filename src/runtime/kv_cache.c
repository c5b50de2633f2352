#include "kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

int rf_kv_init(rf_kv_pool *kv, int n_blocks, int block_size, int n_ctx, int max_seqs) {
    memset(kv, 0, sizeof *kv);
    if (n_blocks <= 0 || block_size <= 0 || n_ctx <= 0 || max_seqs <= 0) {
        rf_set_error("bad KV cache geometry (%d blocks of %d, context %d, %d sequences)", n_blocks,
                     block_size, n_ctx, max_seqs);
        return -1;
    }
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;
    kv->max_blocks = (n_ctx + block_size - 1) / block_size;
    kv->max_seqs = max_seqs;
    kv->refcount = rf_xcalloc((size_t)n_blocks, sizeof(int32_t));
    kv->free_list = rf_xmalloc((size_t)n_blocks * sizeof(int32_t));
    /* Pop order = ascending block ids, which keeps a lone sequence's slots contiguous. */
    for (int i = 0; i < n_blocks; i++) kv->free_list[i] = n_blocks - 1 - i;
    kv->n_free = n_blocks;
    kv->seqs = rf_xcalloc((size_t)max_seqs, sizeof(rf_kv_seq));
    for (int s = 0; s < max_seqs; s++) kv->seqs[s].blocks = rf_xcalloc((size_t)kv->max_blocks, sizeof(int32_t));
    return 0;
}

void rf_kv_free(rf_kv_pool *kv) {
    for (int s = 0; kv->seqs && s < kv->max_seqs; s++) free(kv->seqs[s].blocks);
    free(kv->seqs);
    free(kv->refcount);
    free(kv->free_list);
    memset(kv, 0, sizeof *kv);
}

bool rf_kv_seq_valid(const rf_kv_pool *kv, int seq) {
    return seq >= 0 && seq < kv->max_seqs && kv->seqs[seq].used;
}

int rf_kv_seq_new(rf_kv_pool *kv) {
    for (int s = 0; s < kv->max_seqs; s++) {
        if (!kv->seqs[s].used) {
            kv->seqs[s].used = true;
            kv->seqs[s].n_pos = 0;
            kv->seqs[s].n_blocks = 0;
            return s;
        }
    }
    rf_set_error("all %d sequence slots are in use", kv->max_seqs);
    return -1;
}

int rf_kv_seq_fork(rf_kv_pool *kv, int src) {
    if (!rf_kv_seq_valid(kv, src)) {
        rf_set_error("cannot fork sequence %d: no such sequence", src);
        return -1;
    }
    int s = rf_kv_seq_new(kv);
    if (s < 0) return -1;
    rf_kv_seq *a = &kv->seqs[src], *b = &kv->seqs[s];
    memcpy(b->blocks, a->blocks, (size_t)a->n_blocks * sizeof(int32_t));
    b->n_blocks = a->n_blocks;
    b->n_pos = a->n_pos;
    for (int i = 0; i < a->n_blocks; i++) kv->refcount[a->blocks[i]]++;
    return s;
}

static void release(rf_kv_pool *kv, int32_t b) {
    if (--kv->refcount[b] == 0) kv->free_list[kv->n_free++] = b;
}

void rf_kv_seq_remove(rf_kv_pool *kv, int seq) {
    if (!rf_kv_seq_valid(kv, seq)) return;
    rf_kv_seq *s = &kv->seqs[seq];
    for (int i = 0; i < s->n_blocks; i++) release(kv, s->blocks[i]);
    s->used = false;
    s->n_blocks = s->n_pos = 0;
}

int rf_kv_seq_truncate(rf_kv_pool *kv, int seq, int n_pos) {
    if (!rf_kv_seq_valid(kv, seq)) {
        rf_set_error("cannot truncate sequence %d: no such sequence", seq);
        return -1;
    }
    rf_kv_seq *s = &kv->seqs[seq];
    if (n_pos < 0 || n_pos > s->n_pos) {
        rf_set_error("cannot truncate sequence %d of %d tokens to %d tokens", seq, s->n_pos, n_pos);
        return -1;
    }
    const int keep = (n_pos + kv->block_size - 1) / kv->block_size;
    for (int i = keep; i < s->n_blocks; i++) release(kv, s->blocks[i]);
    s->n_blocks = keep;
    s->n_pos = n_pos;
    return 0;
}

int rf_kv_reserve(rf_kv_pool *kv, int seq, int n_new, rf_kv_copy *copies, int *n_copies) {
    if (!rf_kv_seq_valid(kv, seq)) {
        rf_set_error("sequence %d does not exist", seq);
        return -1;
    }
    rf_kv_seq *s = &kv->seqs[seq];
    int bs = kv->block_size;
    int64_t total = (int64_t)s->n_pos + n_new;
    if (total > (int64_t)kv->max_blocks * bs) {
        rf_set_error("sequence %d would hold %lld tokens, more than the context size %d", seq,
                     (long long)total, kv->max_blocks * bs);
        return -1;
    }
    int need_blocks = (int)((total + bs - 1) / bs);
    bool cow = n_new > 0 && s->n_pos % bs != 0 && kv->refcount[s->blocks[s->n_blocks - 1]] > 1;
    int want = need_blocks - s->n_blocks + (cow ? 1 : 0);
    if (want > kv->n_free) {
        rf_set_error("KV cache is full: %d free blocks of %d tokens, %d needed", kv->n_free, bs, want);
        return -1;
    }
    if (cow) {
        int32_t old = s->blocks[s->n_blocks - 1];
        int32_t nb = kv->free_list[--kv->n_free];
        kv->refcount[nb] = 1;
        kv->refcount[old]--;
        s->blocks[s->n_blocks - 1] = nb;
        copies[(*n_copies)++] = (rf_kv_copy){old, nb};
    }
    while (s->n_blocks < need_blocks) {
        int32_t nb = kv->free_list[--kv->n_free];
        kv->refcount[nb] = 1;
        s->blocks[s->n_blocks++] = nb;
    }
    s->n_pos = (int)total;
    return 0;
}

int rf_kv_blocks_used(const rf_kv_pool *kv) { return kv->n_blocks - kv->n_free; }
