/* kv_cache.h: paged key/value cache bookkeeping (host side).
 *
 * The cache is a pool of n_blocks fixed-size blocks of block_size token slots; every layer's K
 * and V tensors are [n_blocks * block_size][kv_dim] in backend memory, so one block id names
 * the same slots in all of them. Each sequence owns a block table: its position p lives in slot
 * table[p / block_size] * block_size + p % block_size.
 *
 * Blocks are reference-counted. Forking a sequence shares all of its blocks (no copy); when a
 * sequence is about to write into a block that another sequence also references (only ever its
 * last, partially filled block), that block is first duplicated: rf_kv_reserve reports the
 * (src, dst) pairs the caller must copy on the backend before the step writes. Full shared
 * blocks are never written again, so they stay shared.
 */
#ifndef RF_KV_CACHE_H
#define RF_KV_CACHE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    bool used;
    int n_pos;      /* tokens stored */
    int n_blocks;   /* entries used in blocks[] */
    int32_t *blocks; /* [max_blocks] */
} rf_kv_seq;

typedef struct {
    int block_size;
    int n_blocks;
    int max_blocks; /* per sequence: ceil(n_ctx / block_size) */
    int max_seqs;
    int32_t *refcount; /* [n_blocks] */
    int32_t *free_list;
    int n_free;
    rf_kv_seq *seqs; /* [max_seqs] */
} rf_kv_pool;

typedef struct {
    int32_t src, dst;
} rf_kv_copy;

int rf_kv_init(rf_kv_pool *kv, int n_blocks, int block_size, int n_ctx, int max_seqs);
void rf_kv_free(rf_kv_pool *kv);
/* New empty sequence id, or -1 (error set) when all max_seqs are in use. */
int rf_kv_seq_new(rf_kv_pool *kv);
/* New sequence sharing every block of src (the sequences then diverge independently). */
int rf_kv_seq_fork(rf_kv_pool *kv, int src);
void rf_kv_seq_remove(rf_kv_pool *kv, int seq);
bool rf_kv_seq_valid(const rf_kv_pool *kv, int seq);
/* Keeps positions [0, n_pos) of seq (n_pos <= its length): the blocks past them are released (freed
 * unless another sequence shares them). A kept last block that is shared stays shared; the next
 * write into it is un-shared by rf_kv_reserve as usual. -1 with an error on a bad seq or n_pos. */
int rf_kv_seq_truncate(rf_kv_pool *kv, int seq, int n_pos);
/* Makes room for n_new more tokens of seq: allocates blocks and un-shares a shared last block.
 * Appends needed copies to copies[*n_copies] (capacity: at least 1 per call). On failure (no
 * free blocks, context full) changes nothing and returns -1 with an error. */
int rf_kv_reserve(rf_kv_pool *kv, int seq, int n_new, rf_kv_copy *copies, int *n_copies);
/* Slot of position p (p < n_pos after reserve). */
static inline int32_t rf_kv_slot(const rf_kv_pool *kv, int seq, int p) {
    return kv->seqs[seq].blocks[p / kv->block_size] * kv->block_size + p % kv->block_size;
}
int rf_kv_blocks_used(const rf_kv_pool *kv);

#endif
