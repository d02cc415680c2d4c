/* The layout of the KV cache (engine/model/kv_cache.c) behind
 * engine/include/ft/model.h's opaque struct ft_kv_cache, for the forward pass that
 * reserves, writes and reads it (engine/model/model.c, blocks.c,
 * attention.c). Not a public header. */
#ifndef FT_KV_CACHE_H
#define FT_KV_CACHE_H

#include "ft/model.h"

#include <stdint.h>

/* KV cache (engine/model/kv_cache.c). Pools are per layer: n_blocks blocks of
 * FT_KV_BLOCK_TOKENS rows, a row holding one token's K (n_head_kv * hd_k
 * fp16) or V. A sequence's block table maps position p to block
 * blocks[p / FT_KV_BLOCK_TOKENS], row p % FT_KV_BLOCK_TOKENS. */
struct ft_kv_seq {
    int32_t len;      /* positions 0..len-1 are held */
    int32_t n_blocks; /* entries of blocks[] in use */
    int32_t *blocks;  /* max_blocks_per_seq entries */
};

struct ft_kv_cache {
    const struct ft_model *m;
    int32_t n_ctx;
    int32_t max_seqs;
    int32_t n_blocks;
    int32_t max_blocks_per_seq;
    int32_t n_layer;
    int64_t k_row; /* elements per token: every KV head's row */
    int64_t v_row;
    int64_t head_dim_k, head_dim_v;
    uint16_t **k;  /* n_layer pools */
    uint16_t **v;
    struct ft_kv_seq *seqs;
    int32_t *free_list; /* stack of free block ids */
    int32_t n_free;
    int32_t *pending;   /* max_seqs: lengths after the batch being validated, else -1 */
    int32_t *touched;   /* max_seqs: the sequences a batch touches */
    /* Sharing (engine/include/ft/model.h): per block, how many sequence tables
     * list it and whether the prefix cache holds it. A cached block no
     * sequence lists is idle: it sits in the LRU list (oldest at lru_head)
     * and is evicted through `evict` when the free list runs dry. */
    int32_t *seq_refs;
    uint8_t *cached;
    int32_t *lru_prev, *lru_next; /* -1 terminated */
    int32_t lru_head, lru_tail;
    int32_t n_idle;
    int32_t max_idle; /* ft_kv_cache_set_idle_limit; INT32_MAX: none */
    ft_kv_evict_fn evict;
    void *evict_ud;
};

/* Check a batch against the cache and reserve the blocks it needs; on
 * error nothing is changed. */
int ft_kv_cache_prepare(struct ft_kv_cache *kv, const struct ft_batch *b);
/* Record that (seq, pos) now holds valid KV. */
void ft_kv_cache_commit(struct ft_kv_cache *kv, int32_t seq, int32_t pos);
/* Blocks are head-major (engine/include/ft/model.h): within a block, KV head h's
 * rows start this many elements after head 0's. */
static inline int64_t ft_kv_head_offset(int64_t h, int64_t head_dim) { return h * FT_KV_BLOCK_TOKENS * head_dim; }
/* Elements into a layer's pool (row = k_row or v_row, head_dim its head's)
 * of KV head 0 of a reserved position (head h: ft_kv_head_offset further). */
static inline int64_t ft_kv_offset(const struct ft_kv_cache *kv, int32_t seq, int32_t pos, int64_t row,
                                   int64_t head_dim) {
    return (int64_t)kv->seqs[seq].blocks[pos / FT_KV_BLOCK_TOKENS] * FT_KV_BLOCK_TOKENS * row +
           pos % FT_KV_BLOCK_TOKENS * head_dim;
}

#endif
