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

/* SentencePiece: a pair merges when it is a token; the better its score,
 * the sooner. */
static bool spm_pair_key(const struct ft_tokenizer *t, const char *s, size_t len, size_t left_n, double *key) {
    (void)left_n;
    int32_t id = ft_tok_lookup(t, s, len);
    if (id < 0)
        return false;
    *key = t->score[id];
    return true;
}

int ft_spm_tokenize(const struct ft_tokenizer *t, const char *text, size_t len, bool prefix_space,
                    struct ft_tokvec *out) {
    int rc = 0;
    /* escape: ' ' -> ▁ (3 bytes), so at most 3 bytes per input byte */
    size_t cap = 3 * (len + 1);
    char *s = malloc(cap);
    struct ft_tok_sym *sym = malloc((len + 1) * sizeof(*sym));
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

    int32_t n_sym;
    if ((rc = ft_tok_merge(t, s, n, spm_pair_key, &heap, sym, &n_sym)))
        goto done;

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
