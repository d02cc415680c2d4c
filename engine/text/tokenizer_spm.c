/* SentencePiece-style tokenization ("llama" vocabularies: Llama 2, Mistral,
 * TinyLlama, Phi-3, Gemma).
 *
 * Spaces become U+2581 (▁), optionally with one ▁ prepended (the dummy
 * prefix). The text starts as one symbol per UTF-8 character; every adjacent
 * pair whose concatenation is a vocabulary token is a candidate bigram, and
 * the best one (highest token score; leftmost on ties) is merged, repeatedly,
 * with a binary heap — O(n log n). Symbols that end up not being tokens are
 * emitted byte by byte as <0xXX> tokens (byte fallback), or <unk> when the
 * vocabulary has no byte tokens.
 *
 * This reproduces llama.cpp's llm_tokenizer_spm exactly, including its
 * tie-breaking, since the conformance vectors come from it.
 */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

struct spm_sym {
    int32_t prev, next;
    uint32_t start, n; /* bytes of the escaped text; n == 0: merged away */
};

static int try_bigram(const struct ft_tokenizer *t, const char *text, const struct spm_sym *sym, int32_t l,
                      int32_t r, struct ft_bigram_heap *h) {
    if (l < 0 || r < 0)
        return 0;
    size_t len = (size_t)sym[l].n + sym[r].n;
    int32_t id = ft_tok_lookup(t, text + sym[l].start, len);
    if (id < 0)
        return 0;
    struct ft_bigram b = {t->score[id], l, r, (uint32_t)len};
    return ft_bigram_push(h, b);
}

static size_t utf8_len_lead(uint8_t b) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[b >> 4];
}

int ft_spm_tokenize(const struct ft_tokenizer *t, const char *text, size_t len, bool prefix_space,
                    struct ft_tokvec *out) {
    int rc = 0;
    /* escape: ' ' -> ▁ (3 bytes), so at most 3 bytes per input byte */
    size_t cap = 3 * (len + 1);
    char *s = malloc(cap);
    struct spm_sym *sym = malloc((len + 1) * sizeof(*sym));
    struct ft_bigram_heap heap = {NULL, 0, 0};
    if (!s || !sym) {
        FT_LOG_E("out of memory for %zu bytes of text", len);
        rc = FT_ENOMEM;
        goto done;
    }
    size_t n = 0;
    if (prefix_space) {
        memcpy(s, "\xE2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + n, "\xE2\x96\x81", 3);
            n += 3;
        } else {
            s[n++] = text[i];
        }
    }
    if (n == 0)
        goto done;

    int32_t n_sym = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = FT_MIN(utf8_len_lead((uint8_t)s[off]), n - off);
        sym[n_sym].start = (uint32_t)off;
        sym[n_sym].n = (uint32_t)cl;
        sym[n_sym].prev = n_sym - 1;
        off += cl;
        sym[n_sym].next = off == n ? -1 : n_sym + 1;
        n_sym++;
    }

    for (int32_t i = 1; i < n_sym; i++)
        if ((rc = try_bigram(t, s, sym, i - 1, i, &heap)))
            goto done;

    while (heap.n) {
        struct ft_bigram b = ft_bigram_pop(&heap);
        struct spm_sym *l = &sym[b.left], *r = &sym[b.right];
        /* stale: one side was merged since this pair was queued */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size || l->next != b.right)
            continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        if ((rc = try_bigram(t, s, sym, l->prev, b.left, &heap)) ||
            (rc = try_bigram(t, s, sym, b.left, l->next, &heap)))
            goto done;
    }

    for (int32_t i = 0; i != -1; i = sym[i].next) {
        const char *p = s + sym[i].start;
        int32_t id = ft_tok_lookup(t, p, sym[i].n);
        if (id >= 0) {
            if ((rc = ft_tokvec_push(out, id)))
                goto done;
            continue;
        }
        /* byte fallback (a merged symbol is always a token, so this is a
         * single character missing from the vocabulary); without byte
         * tokens the character is one <unk>, as in SentencePiece */
        bool all_bytes = true;
        for (uint32_t k = 0; k < sym[i].n; k++)
            all_bytes &= t->byte_to_id[(uint8_t)p[k]] >= 0;
        if (!all_bytes) {
            if (t->unk >= 0 && (rc = ft_tokvec_push(out, t->unk)))
                goto done;
            continue;
        }
        for (uint32_t k = 0; k < sym[i].n; k++)
            if ((rc = ft_tokvec_push(out, t->byte_to_id[(uint8_t)p[k]])))
                goto done;
    }

done:
    free(s);
    free(sym);
    free(heap.v);
    return rc;
}
