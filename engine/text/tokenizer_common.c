/* What the tokenizer's algorithms share with its front end
 * (engine/text/tokenizer.c): the hashes and lookups of the vocabulary and
 * merge tables tokenizer.c builds at load, the growable output vector of
 * token ids, and the symbol merging of SentencePiece (tokenizer_spm.c) and
 * byte-level BPE (tokenizer_bpe.c) over a bigram heap. Everything here reads a loaded,
 * immutable tokenizer or the caller's own buffers. */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

uint64_t ft_tok_hash(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a, then a 64-bit finalizer */
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    return h;
}

uint64_t ft_tok_merge_hash(const char *s, size_t len, size_t left_len) {
    uint64_t h = ft_tok_hash(s, len) + (uint64_t)left_len * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

int32_t ft_tok_lookup(const struct ft_tokenizer *t, const char *s, size_t len) {
    if (len == 0 || len > t->max_token_len)
        return -1;
    uint32_t i = (uint32_t)ft_tok_hash(s, len) & t->vhash_mask;
    for (;;) {
        uint32_t v = t->vhash[i];
        if (!v)
            return -1;
        int32_t id = (int32_t)(v - 1);
        if (t->text_off[id + 1] - t->text_off[id] == len && !memcmp(t->text + t->text_off[id], s, len))
            return id;
        i = (i + 1) & t->vhash_mask;
    }
}

int32_t ft_tok_merge_rank(const struct ft_tokenizer *t, const char *s, size_t len, size_t left_len) {
    if (!t->mhash || len > t->max_merge_len)
        return -1;
    uint32_t i = (uint32_t)ft_tok_merge_hash(s, len, left_len) & t->mhash_mask;
    for (;;) {
        uint32_t v = t->mhash[i];
        if (!v)
            return -1;
        const struct ft_tok_merge *m = &t->merges[v - 1];
        if (m->left_len == left_len && (size_t)m->left_len + m->right_len == len &&
            !memcmp(t->merge_text + m->off, s, len))
            return (int32_t)(v - 1);
        i = (i + 1) & t->mhash_mask;
    }
}

int ft_tokvec_push(struct ft_tokvec *tv, int32_t id) {
    if (tv->n == tv->cap) {
        size_t cap = tv->cap ? tv->cap * 2 : 64;
        int32_t *v = realloc(tv->v, cap * sizeof(*v));
        if (!v) {
            FT_LOG_E("out of memory (%zu token ids)", cap);
            return FT_ENOMEM;
        }
        tv->v = v;
        tv->cap = cap;
    }
    tv->v[tv->n++] = id;
    return 0;
}

/* a goes before b: larger key first, then the leftmost pair */
static bool bigram_before(const struct ft_bigram *a, const struct ft_bigram *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static int bigram_push(struct ft_bigram_heap *h, struct ft_bigram x) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct ft_bigram *v = realloc(h->v, cap * sizeof(*v));
        if (!v) {
            FT_LOG_E("out of memory (%zu bigrams)", cap);
            return FT_ENOMEM;
        }
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&x, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
    return 0;
}

/* h->n > 0 */
static struct ft_bigram bigram_pop(struct ft_bigram_heap *h) {
    struct ft_bigram top = h->v[0], x = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!bigram_before(&h->v[c], &x))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = x;
    return top;
}

static size_t utf8_len_lead(uint8_t b) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[b >> 4];
}

/* Queues symbols l and r as a candidate pair if they merge (either may be
 * -1, the end of the list). */
static int queue_pair(const struct ft_tokenizer *t, const char *text, const struct ft_tok_sym *sym, int32_t l,
                      int32_t r, ft_tok_pair_key key, struct ft_bigram_heap *h) {
    if (l < 0 || r < 0)
        return 0;
    size_t len = (size_t)sym[l].n + sym[r].n;
    struct ft_bigram b = {0, l, r, (uint32_t)len};
    if (!key(t, text + sym[l].start, len, sym[l].n, &b.key))
        return 0;
    return bigram_push(h, b);
}

int ft_tok_merge(const struct ft_tokenizer *t, const char *text, size_t n, ft_tok_pair_key key,
                 struct ft_bigram_heap *heap, struct ft_tok_sym *sym, int32_t *n_sym) {
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = FT_MIN(utf8_len_lead((uint8_t)text[off]), n - off);
        sym[ns].start = (uint32_t)off;
        sym[ns].n = (uint32_t)cl;
        sym[ns].prev = ns - 1;
        off += cl;
        sym[ns].next = off == n ? -1 : ns + 1;
        ns++;
    }
    *n_sym = ns;
    int rc;
    heap->n = 0;
    for (int32_t i = 1; i < ns; i++)
        if ((rc = queue_pair(t, text, sym, i - 1, i, key, heap)))
            return rc;
    while (heap->n) {
        struct ft_bigram b = bigram_pop(heap);
        struct ft_tok_sym *l = &sym[b.left], *r = &sym[b.right];
        /* stale: one side was merged since this pair was queued */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size || l->next != b.right)
            continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        if ((rc = queue_pair(t, text, sym, l->prev, b.left, key, heap)) ||
            (rc = queue_pair(t, text, sym, b.left, l->next, key, heap)))
            return rc;
    }
    return 0;
}
