#include "heap.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#define AT(h, i) ((h)->v + (i) * (h)->size)

void tk_heap_push(tk_heap *h, const void *elem) {
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->v = rf_xrealloc(h->v, h->cap * h->size);
    }
    size_t i = h->n++;
    while (i > 0) { /* sift up: move parents down until elem's place is found */
        size_t p = (i - 1) / 2;
        if (!h->before(elem, AT(h, p))) break;
        memcpy(AT(h, i), AT(h, p), h->size);
        i = p;
    }
    memcpy(AT(h, i), elem, h->size);
}

void tk_heap_pop(tk_heap *h, void *out) {
    memcpy(out, AT(h, 0), h->size);
    const unsigned char *last = AT(h, --h->n);
    size_t i = 0;
    for (;;) { /* sift down the last element from the root */
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->before(AT(h, c + 1), AT(h, c))) c++;
        if (!h->before(AT(h, c), last)) break;
        memcpy(AT(h, i), AT(h, c), h->size);
        i = c;
    }
    if (h->n) memmove(AT(h, i), last, h->size);
}

void tk_heap_free(tk_heap *h) {
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}
