/* Prefix cache over shared KV blocks (engine/include/ft/prefix_cache.h).
 *
 * A node describes one cached block and is stored at the block's index
 * (a block is at most one node). Full nodes are in a hash table keyed by
 * the chain hash; every node is in its parent's list of children, which
 * the partial match scans. Each sequence keeps the chain of full nodes its
 * table starts with, to continue it as blocks fill up. */
#include "ft/prefix_cache.h"

#include "ft/common.h"
#include "ft/kv_events.h"

#include <stdlib.h>
#include <string.h>

#define BT FT_KV_BLOCK_TOKENS
#define NONE (-1)
#define ROOT_HASH 0x9e3779b97f4a7c15ull

struct node {
    uint64_t hash;
    int32_t n;      /* tokens in the block; 0: not a node */
    int32_t parent; /* node of the previous block; NONE for a first block */
    int32_t first_child, next_sibling, prev_sibling;
    int32_t hash_next; /* bucket chain (full nodes) */
    int32_t tokens[BT];
};

struct chain {
    int32_t *nodes; /* full nodes of the sequence's first blocks, in order */
    int32_t n;
    bool frozen; /* its blocks duplicate cached ones: keep nothing more of it */
};

struct ft_prefix_cache {
    struct ft_kv_cache *kv;
    bool reuse;
    int32_t n_blocks;
    struct node *nodes;
    int32_t *buckets;
    uint32_t bucket_mask;
    int32_t root_first_child;
    struct chain *seqs;
    int32_t n_seqs;
    int32_t n_nodes;
    struct ft_kv_events *events; /* full nodes' stores and removals go there; NULL: none */
};

_Static_assert(FT_KV_EVENTS_BLOCK == BT, "KV events carry whole prefix-cache blocks");

/* Also the block hash routers see (ft serve --kv-events): docs/api.md "KV-cache
 * events" gives this function for them to compute it from a prompt, so a
 * change here is a change of the published format. */
static uint64_t chain_hash(uint64_t parent, const int32_t *tokens, int32_t n) {
    uint64_t h = parent ^ 0xcbf29ce484222325ull;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)tokens[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

static int32_t *children_head(struct ft_prefix_cache *pc, int32_t parent) {
    return parent == NONE ? &pc->root_first_child : &pc->nodes[parent].first_child;
}

static uint64_t parent_hash(const struct ft_prefix_cache *pc, int32_t parent) {
    return parent == NONE ? ROOT_HASH : pc->nodes[parent].hash;
}

static void evict_cb(void *ud, int32_t block);

int ft_prefix_cache_new(struct ft_kv_cache *kv, bool reuse, struct ft_prefix_cache **out) {
    *out = NULL;
    if (!kv) {
        FT_LOG_E("no KV cache");
        return FT_EINVAL;
    }
    struct ft_prefix_cache *pc = calloc(1, sizeof(*pc));
    if (!pc)
        goto oom;
    pc->kv = kv;
    pc->reuse = reuse;
    pc->n_blocks = ft_kv_cache_blocks_total(kv);
    pc->n_seqs = ft_kv_cache_max_seqs(kv);
    pc->root_first_child = NONE;
    uint32_t n_buckets = 1;
    while (n_buckets < (uint32_t)pc->n_blocks && n_buckets < (1u << 30))
        n_buckets <<= 1;
    pc->bucket_mask = n_buckets - 1;
    pc->nodes = calloc((size_t)pc->n_blocks, sizeof(*pc->nodes));
    pc->buckets = malloc(sizeof(*pc->buckets) * n_buckets);
    pc->seqs = calloc((size_t)pc->n_seqs, sizeof(*pc->seqs));
    if (!pc->nodes || !pc->buckets || !pc->seqs)
        goto oom;
    for (uint32_t i = 0; i < n_buckets; i++)
        pc->buckets[i] = NONE;
    const int32_t per_seq = (ft_kv_cache_n_ctx(kv) + BT - 1) / BT;
    for (int32_t s = 0; s < pc->n_seqs; s++)
        if (!(pc->seqs[s].nodes = malloc(sizeof(int32_t) * (size_t)per_seq)))
            goto oom;
    ft_kv_cache_set_evict(kv, evict_cb, pc);
    *out = pc;
    return FT_OK;
oom:
    ft_prefix_cache_free(pc);
    FT_LOG_E("out of memory");
    return FT_ENOMEM;
}

void ft_prefix_cache_set_events(struct ft_prefix_cache *pc, struct ft_kv_events *ev) {
    if (pc)
        pc->events = ev;
}

void ft_prefix_cache_free(struct ft_prefix_cache *pc) {
    if (!pc)
        return;
    ft_kv_events_all_cleared(pc->events);
    if (pc->nodes) {
        for (int32_t i = 0; i < pc->n_blocks; i++)
            if (pc->nodes[i].n)
                ft_kv_cache_block_set_cached(pc->kv, i, false);
        ft_kv_cache_set_evict(pc->kv, NULL, NULL);
    }
    if (pc->seqs)
        for (int32_t s = 0; s < pc->n_seqs; s++)
            free(pc->seqs[s].nodes);
    free(pc->seqs);
    free(pc->nodes);
    free(pc->buckets);
    free(pc);
}

int32_t ft_prefix_cache_blocks(const struct ft_prefix_cache *pc) { return pc ? pc->n_nodes : 0; }

/* A node and, first, every node that continues it. Nodes whose block a
 * sequence lists are only dropped from the cache; the block stays with the
 * sequence. */
static void remove_node(struct ft_prefix_cache *pc, int32_t idx) {
    struct node *nd = &pc->nodes[idx];
    while (nd->first_child != NONE)
        remove_node(pc, nd->first_child);
    if (nd->prev_sibling != NONE)
        pc->nodes[nd->prev_sibling].next_sibling = nd->next_sibling;
    else
        *children_head(pc, nd->parent) = nd->next_sibling;
    if (nd->next_sibling != NONE)
        pc->nodes[nd->next_sibling].prev_sibling = nd->prev_sibling;
    if (nd->n == BT) {
        int32_t *p = &pc->buckets[nd->hash & pc->bucket_mask];
        while (*p != idx)
            p = &pc->nodes[*p].hash_next;
        *p = nd->hash_next;
        ft_kv_events_block_removed(pc->events, nd->hash);
    }
    nd->n = 0;
    pc->n_nodes--;
    ft_kv_cache_block_set_cached(pc->kv, idx, false);
}

static void evict_cb(void *ud, int32_t block) {
    struct ft_prefix_cache *pc = ud;
    if (pc->nodes[block].n)
        remove_node(pc, block);
}

/* Block `block` (listed by a sequence) becomes a node of n tokens under
 * parent; false if the KV cache refuses. */
static bool add_node(struct ft_prefix_cache *pc, int32_t block, int32_t parent, uint64_t hash, const int32_t *tokens,
                     int32_t n) {
    if (block < 0 || block >= pc->n_blocks || pc->nodes[block].n ||
        ft_kv_cache_block_set_cached(pc->kv, block, true) != FT_OK)
        return false;
    struct node *nd = &pc->nodes[block];
    nd->hash = hash;
    nd->n = n;
    nd->parent = parent;
    nd->first_child = NONE;
    memcpy(nd->tokens, tokens, sizeof(int32_t) * (size_t)n);
    int32_t *head = children_head(pc, parent);
    nd->prev_sibling = NONE;
    nd->next_sibling = *head;
    if (*head != NONE)
        pc->nodes[*head].prev_sibling = block;
    *head = block;
    nd->hash_next = NONE;
    if (n == BT) {
        int32_t *bucket = &pc->buckets[hash & pc->bucket_mask];
        nd->hash_next = *bucket;
        *bucket = block;
        /* Only full blocks are announced (as vLLM does): a partial one is
         * reused only by the prompts that extend it, which no router can
         * match by block hash. */
        ft_kv_events_block_stored(pc->events, hash, parent != NONE, parent_hash(pc, parent), tokens);
    }
    pc->n_nodes++;
    return true;
}

static int32_t find_full(const struct ft_prefix_cache *pc, int32_t parent, uint64_t hash, const int32_t *tokens) {
    for (int32_t i = pc->buckets[hash & pc->bucket_mask]; i != NONE; i = pc->nodes[i].hash_next) {
        const struct node *nd = &pc->nodes[i];
        if (nd->hash == hash && nd->parent == parent && !memcmp(nd->tokens, tokens, sizeof(int32_t) * BT))
            return i;
    }
    return NONE;
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    const int32_t n = FT_MIN(na, nb);
    int32_t i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

int32_t ft_prefix_cache_attach(struct ft_prefix_cache *pc, int32_t seq, const int32_t *prompt, int32_t n) {
    if (!pc || seq < 0 || seq >= pc->n_seqs)
        return 0;
    struct chain *c = &pc->seqs[seq];
    c->n = 0;
    c->frozen = false;
    if (!pc->reuse || n < 2 || ft_kv_cache_seq_len(pc->kv, seq) != 0)
        return 0;
    const int32_t limit = FT_MIN(n - 1, ft_kv_cache_n_ctx(pc->kv) - 1); /* leave one token for the logits */
    int32_t parent = NONE, nb = 0;
    while ((nb + 1) * BT <= limit) {
        const int32_t *t = prompt + (size_t)nb * BT;
        const int32_t idx = find_full(pc, parent, chain_hash(parent_hash(pc, parent), t, BT), t);
        if (idx == NONE)
            break;
        c->nodes[nb++] = idx;
        parent = idx;
    }
    int32_t len = nb * BT;
    /* The next block: the candidate whose first rows match the most. */
    const int32_t rest = FT_MIN(limit - len, BT - 1);
    int32_t best = NONE, best_len = 0;
    for (int32_t i = *children_head(pc, parent); i != NONE && rest > 0; i = pc->nodes[i].next_sibling) {
        const int32_t l = common_prefix(pc->nodes[i].tokens, pc->nodes[i].n, prompt + len, rest);
        if (l > best_len) {
            best = i;
            best_len = l;
        }
    }
    int32_t n_attach = nb;
    if (best != NONE) {
        c->nodes[n_attach++] = best; /* the table to attach; the chain keeps only the full ones */
        len += best_len;
    }
    if (!len || ft_kv_cache_seq_attach(pc->kv, seq, c->nodes, n_attach, len) != FT_OK) {
        c->n = 0;
        return 0;
    }
    c->n = nb;
    return len;
}

int ft_prefix_cache_fork(struct ft_prefix_cache *pc, int32_t dst, int32_t src, int32_t len) {
    if (!pc || dst < 0 || dst >= pc->n_seqs || src < 0 || src >= pc->n_seqs || dst == src || len < 1 ||
        len > ft_kv_cache_seq_len(pc->kv, src) || ft_kv_cache_seq_len(pc->kv, dst) != 0) {
        FT_LOG_E("cannot fork %d tokens of sequence %d into sequence %d", (int)len, (int)src, (int)dst);
        return FT_EINVAL;
    }
    struct chain *d = &pc->seqs[dst];
    const struct chain *c = &pc->seqs[src];
    const int32_t n_blocks = (len + BT - 1) / BT;
    /* dst's chain array (room for a whole context) holds the table first. */
    for (int32_t i = 0; i < n_blocks; i++)
        d->nodes[i] = ft_kv_cache_seq_block(pc->kv, src, i);
    const int rc = ft_kv_cache_seq_attach(pc->kv, dst, d->nodes, n_blocks, len);
    d->n = 0;
    d->frozen = false;
    if (rc)
        return rc;
    d->n = FT_MIN(c->n, len / BT);
    memcpy(d->nodes, c->nodes, sizeof(int32_t) * (size_t)d->n);
    d->frozen = c->frozen;
    return FT_OK;
}

static void gather(int32_t *dst, int32_t from, int32_t n, const int32_t *a, int32_t na, const int32_t *b) {
    for (int32_t i = 0; i < n; i++) {
        const int32_t j = from + i;
        dst[i] = j < na ? a[j] : b[j - na];
    }
}

void ft_prefix_cache_update(struct ft_prefix_cache *pc, int32_t seq, const int32_t *a, int32_t na,
                            const int32_t *b, int32_t nb) {
    if (!pc || !pc->reuse || seq < 0 || seq >= pc->n_seqs || !a || na < 0 || nb < 0 || (nb && !b))
        return;
    struct chain *c = &pc->seqs[seq];
    const int32_t n_tok = FT_MIN(ft_kv_cache_seq_len(pc->kv, seq), na + nb);
    int32_t t[BT];
    while (!c->frozen && c->n < n_tok / BT) {
        const int32_t i = c->n, parent = i ? c->nodes[i - 1] : NONE;
        const int32_t blk = ft_kv_cache_seq_block(pc->kv, seq, i);
        gather(t, i * BT, BT, a, na, b);
        const uint64_t h = chain_hash(parent_hash(pc, parent), t, BT);
        const int32_t idx = find_full(pc, parent, h, t);
        if ((idx == NONE && add_node(pc, blk, parent, h, t, BT)) || (idx != NONE && idx == blk)) {
            c->nodes[c->n++] = blk;
        } else {
            /* Computed twice (another sequence's copy is cached): keep that
             * one. The chain cannot go on from a node whose block this
             * sequence does not hold (it could be evicted meanwhile), so
             * nothing more of this sequence is kept. */
            c->frozen = true;
        }
    }
}

void ft_prefix_cache_release(struct ft_prefix_cache *pc, int32_t seq, const int32_t *a, int32_t na,
                             const int32_t *b, int32_t nb) {
    if (!pc || seq < 0 || seq >= pc->n_seqs)
        return;
    struct chain *c = &pc->seqs[seq];
    if (a) {
        ft_prefix_cache_update(pc, seq, a, na, b, nb);
        const int32_t len = FT_MIN(ft_kv_cache_seq_len(pc->kv, seq), na + nb), r = len % BT;
        if (pc->reuse && !c->frozen && r && c->n == len / BT) {
            const int32_t parent = c->n ? c->nodes[c->n - 1] : NONE;
            int32_t t[BT];
            gather(t, len - r, r, a, na, b);
            bool covered = false;
            for (int32_t i = *children_head(pc, parent); i != NONE && !covered; i = pc->nodes[i].next_sibling)
                covered = common_prefix(pc->nodes[i].tokens, pc->nodes[i].n, t, r) == r;
            if (!covered)
                add_node(pc, ft_kv_cache_seq_block(pc->kv, seq, len / BT), parent,
                         chain_hash(parent_hash(pc, parent), t, r), t, r);
        }
    }
    c->n = 0;
    c->frozen = false;
    ft_kv_cache_seq_truncate(pc->kv, seq, 0);
}
