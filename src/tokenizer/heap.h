/* heap.h: a binary min-heap of fixed-size elements ordered by a caller's `before` (true when a
 * must pop before b). Both merge tokenizers use it for their queue of candidate pairs. */
#ifndef RF_TK_HEAP_H
#define RF_TK_HEAP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    unsigned char *v;
    size_t n, cap, size; /* size: bytes per element */
    bool (*before)(const void *a, const void *b);
} tk_heap;

static inline tk_heap tk_heap_new(size_t elem_size, bool (*before)(const void *, const void *)) {
    tk_heap h = {NULL, 0, 0, elem_size, before};
    return h;
}
void tk_heap_push(tk_heap *h, const void *elem);
/* Removes the first element into *out; h->n must be > 0. */
void tk_heap_pop(tk_heap *h, void *out);
void tk_heap_free(tk_heap *h);

#endif
