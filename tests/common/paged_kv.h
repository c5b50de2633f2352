/* paged_kv.h: a random paged K/V cache for the attention tests (CPU SIMD levels, GPU kernels).
 *
 * Sequences s < n_seq of len[s] positions live in blocks of bsz slots, the blocks shuffled over
 * n_seq * max_blocks + 3 cache blocks (non-contiguous, as a long-running server leaves them).
 * Filled positions hold uniform values in [-1, 1]; every other slot holds NaN, so a kernel that
 * reads a slot it must not makes its output NaN. The batch is the last tail[s] positions of each
 * sequence, the sequences' tokens interleaved (token order need not group sequences). */
#ifndef RF_TEST_PAGED_KV_H
#define RF_TEST_PAGED_KV_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int n_tok, max_len, max_blocks, bsz;
    size_t kvd, n_slots;        /* floats per cache row (n_kv * hd); slots in the cache */
    int32_t *bt;                /* [n_seq][max_blocks] block table */
    int32_t *pos, *seq_row;     /* [n_tok] */
    float *kc, *vc;             /* [n_slots][kvd], f32 */
} test_paged_kv;

void test_paged_kv_make(test_paged_kv *c, int n_kv, int hd, int bsz, const int *len, const int *tail, int n_seq);
void test_paged_kv_free(test_paged_kv *c);
/* Slot of position p of sequence s. */
size_t test_paged_kv_slot(const test_paged_kv *c, int s, int p);
/* n floats as a cache of type kv_type stores them (F32 copied, F16 rounded; NaN stays NaN);
 * malloc'ed. */
void *test_kv_pack(const float *src, uint32_t kv_type, size_t n);
/* n_rows rows of kv_dim floats as a cache of type kv_type stores them, row r at r *
 * rf_kv_row_bytes (core/kv_format.h; written by rf_kv_write_row: f32 and f16 as test_kv_pack,
 * q8_0 with kv_dim % 32 == 0, a block with a NaN becomes a NaN block); malloc'ed. */
void *test_kv_pack_rows(const float *src, uint32_t kv_type, size_t n_rows, size_t kv_dim);
/* The values the reference reads back from such a cache, as f32 rows (malloc'ed). */
float *test_kv_unpack_rows(const void *cache, uint32_t kv_type, size_t n_rows, size_t kv_dim);

#endif
