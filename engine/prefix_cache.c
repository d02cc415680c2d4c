/* Prefix cache over the slots of the KV cache (include/ft/prefix_cache.h). */
#include "ft/prefix_cache.h"

#include "ft/common.h"

#include <stdlib.h>
#include <string.h>

struct slot {
    int32_t *tokens; /* whose KV sequence `index` holds, in position order */
    int32_t n;
    int32_t cap;
    uint64_t last_used; /* acquire counter; 0 = never used */
};

struct ft_prefix_cache {
    struct ft_kv_cache *kv;
    struct slot *slots;
    int32_t n_slots;
    bool reuse;
    uint64_t clock;
};

int ft_prefix_cache_new(struct ft_kv_cache *kv, int32_t n_slots, bool reuse, struct ft_prefix_cache **out) {
    *out = NULL;
    if (!kv || n_slots < 1 || n_slots > ft_kv_cache_max_seqs(kv)) {
        FT_LOG_E("need 1..%d slots (got %d)", (int)ft_kv_cache_max_seqs(kv), (int)n_slots);
        return FT_EINVAL;
    }
    struct ft_prefix_cache *pc = calloc(1, sizeof(*pc));
    if (!pc || !(pc->slots = calloc((size_t)n_slots, sizeof(*pc->slots)))) {
        free(pc);
        FT_LOG_E("out of memory");
        return FT_ENOMEM;
    }
    pc->kv = kv;
    pc->n_slots = n_slots;
    pc->reuse = reuse;
    *out = pc;
    return FT_OK;
}

void ft_prefix_cache_free(struct ft_prefix_cache *pc) {
    if (!pc)
        return;
    for (int32_t i = 0; i < pc->n_slots; i++)
        free(pc->slots[i].tokens);
    free(pc->slots);
    free(pc);
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = FT_MIN(na, nb), i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

void ft_prefix_cache_clear(struct ft_prefix_cache *pc, int32_t seq) {
    if (seq < 0 || seq >= pc->n_slots)
        return;
    pc->slots[seq].n = 0;
    ft_kv_cache_seq_truncate(pc->kv, seq, 0);
}

/* The reusable prefix of slot i for the prompt. */
static int32_t reusable(const struct ft_prefix_cache *pc, int32_t i, const int32_t *prompt, int32_t n) {
    if (!pc->reuse)
        return 0;
    int32_t len = common_prefix(pc->slots[i].tokens, pc->slots[i].n, prompt, n);
    return len > n - 1 ? n - 1 : len; /* leave one token to compute: its logits start the reply */
}

int32_t ft_prefix_cache_acquire(struct ft_prefix_cache *pc, const int32_t *prompt, int32_t n,
                                int32_t *n_cached) {
    /* The longest shared prefix wins; among equals, the slot that loses the
     * least, then the least recently used. */
    int32_t best = 0, best_len = -1, lru = 0;
    for (int32_t i = 0; i < pc->n_slots; i++) {
        const struct slot *s = &pc->slots[i];
        const int32_t len = reusable(pc, i, prompt, n);
        const struct slot *b = &pc->slots[best];
        if (len > best_len || (len == best_len && (s->n - len < b->n - best_len ||
                                                   (s->n - len == b->n - best_len && s->last_used < b->last_used)))) {
            best = i;
            best_len = len;
        }
        if (s->n == 0 ? pc->slots[lru].n != 0 || s->last_used < pc->slots[lru].last_used
                      : pc->slots[lru].n != 0 && s->last_used < pc->slots[lru].last_used)
            lru = i;
    }
    /* A short match (a BOS, a common first word) would throw away most of
     * another conversation's cache for a few tokens: unless the match is at
     * least half of the new prompt or half of what the slot holds, take the
     * empty or least recently used slot instead. */
    if (best_len * 2 < n && best_len * 2 < pc->slots[best].n) {
        best = lru;
        best_len = reusable(pc, lru, prompt, n);
    }
    struct slot *s = &pc->slots[best];
    s->n = best_len;
    s->last_used = ++pc->clock;
    ft_kv_cache_seq_truncate(pc->kv, best, best_len);
    *n_cached = best_len;
    return best;
}

void ft_prefix_cache_commit(struct ft_prefix_cache *pc, int32_t seq, const int32_t *a, int32_t na,
                            const int32_t *b, int32_t nb) {
    if (seq < 0 || seq >= pc->n_slots)
        return;
    struct slot *s = &pc->slots[seq];
    const int32_t n = na + nb;
    if (n != ft_kv_cache_seq_len(pc->kv, seq)) {
        FT_LOG_W("slot %d holds %d tokens, expected %d: cleared", (int)seq,
                 (int)ft_kv_cache_seq_len(pc->kv, seq), (int)n);
        ft_prefix_cache_clear(pc, seq);
        return;
    }
    if (n > s->cap) {
        int32_t *p = realloc(s->tokens, sizeof(int32_t) * (size_t)n);
        if (!p) {
            ft_prefix_cache_clear(pc, seq);
            return;
        }
        s->tokens = p;
        s->cap = n;
    }
    /* The prompt may overlap the slot's own list; memmove is safe. */
    if (na)
        memmove(s->tokens, a, sizeof(int32_t) * (size_t)na);
    if (nb)
        memcpy(s->tokens + na, b, sizeof(int32_t) * (size_t)nb);
    s->n = n;
}
