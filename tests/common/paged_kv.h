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
/* n_rows rows of kvd floats as a cache of type kv_type stores them (core/kv_format.h: F32 copied,
 * F16 rounded, Q8_0 and Q4_0 quantized; NaN stays NaN / poisons its block); malloc'ed,
 * n_rows * rf_kv_row_bytes bytes. */
void *test_kv_pack(const float *src, uint32_t kv_type, size_t n_rows, size_t kvd);
/* The inverse read: n_rows cache rows of kv_type as f32 into dst [n_rows][kvd]. */
void test_kv_unpack(const void *src, uint32_t kv_type, size_t n_rows, size_t kvd, float *dst);
#endif
