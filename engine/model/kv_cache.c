/* KV cache: fp16 K and V in fixed blocks of FT_KV_BLOCK_TOKENS tokens, a
 * block table per sequence and a free list (docs/architecture.md, KV blocks).
 *
 * A sequence's positions 0..len-1 live in the blocks its table lists, in
 * order, so blocks need not be contiguous and are returned independently
 * when a sequence is truncated. The same block id indexes every layer's
 * pool. Blocks are reserved for a whole batch before the forward pass starts
 * (ft_kv_cache_prepare), copies for copy-on-write included and idle cached
 * blocks evicted first if needed, so a pass never fails half-way for lack
 * of room.
 *
 * Sharing: seq_refs[b] counts the tables listing block b, cached[b] says
 * the prefix cache holds it. A block is free (on free_list) when neither,
 * idle (on the LRU list) when only cached, in use otherwise.
 *
 * Ownership: the cache belongs to whoever created it and must not outlive
 * its model. Not thread-safe; the scheduler thread owns it. */
#include "kv_cache.h"

#include "ft/common.h"
#include "model_internal.h"

#include <stdlib.h>
#include <string.h>

int ft_kv_cache_new_pool(const struct ft_model *m, int32_t n_ctx, int32_t max_seqs, int32_t n_blocks_req,
                         struct ft_kv_cache **out) {
    *out = NULL;
    if (!m || n_ctx <= 0 || max_seqs <= 0 || max_seqs > 65536 || n_blocks_req <= 0) {
        FT_LOG_E("bad arguments: n_ctx %d, max_seqs %d, %d blocks (need n_ctx > 0, 0 < max_seqs <= 65536, "
                 "blocks > 0)",
                 (int)n_ctx, (int)max_seqs, (int)n_blocks_req);
        return FT_EINVAL;
    }
    const struct ft_hparams *hp = &m->hp;
    const int32_t per_seq = (int32_t)((n_ctx + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS);
    const size_t n_blocks = (size_t)n_blocks_req;
    size_t cells = 0, k_bytes = 0, v_bytes = 0;
    const size_t k_row = (size_t)hp->n_head_kv * (size_t)hp->head_dim_k;
    const size_t v_row = (size_t)hp->n_head_kv * (size_t)hp->head_dim_v;
    if (ft_mul_overflow(n_blocks, FT_KV_BLOCK_TOKENS, &cells) ||
        ft_mul_overflow(cells, k_row * sizeof(uint16_t), &k_bytes) ||
        ft_mul_overflow(cells, v_row * sizeof(uint16_t), &v_bytes)) {
        FT_LOG_E("KV cache of %d blocks is too large", (int)n_blocks_req);
        return FT_ERANGE;
    }

    struct ft_kv_cache *kv = calloc(1, sizeof(*kv));
    if (!kv)
        goto fail;
    kv->m = m;
    kv->n_ctx = n_ctx;
    kv->max_seqs = max_seqs;
    kv->n_blocks = n_blocks_req;
    kv->max_blocks_per_seq = per_seq;
    kv->n_layer = hp->n_layer;
    kv->k_row = (int64_t)k_row;
    kv->v_row = (int64_t)v_row;
    kv->head_dim_k = hp->head_dim_k;
    kv->head_dim_v = hp->head_dim_v;
    kv->lru_head = kv->lru_tail = -1;
    kv->max_idle = INT32_MAX;
    kv->k = calloc((size_t)hp->n_layer, sizeof(*kv->k));
    kv->v = calloc((size_t)hp->n_layer, sizeof(*kv->v));
    kv->seqs = calloc((size_t)max_seqs, sizeof(*kv->seqs));
    kv->free_list = malloc(n_blocks * sizeof(*kv->free_list));
    kv->pending = malloc((size_t)max_seqs * sizeof(*kv->pending));
    kv->touched = malloc((size_t)max_seqs * sizeof(*kv->touched));
    kv->seq_refs = calloc(n_blocks, sizeof(*kv->seq_refs));
    kv->cached = calloc(n_blocks, sizeof(*kv->cached));
    kv->lru_prev = malloc(n_blocks * sizeof(*kv->lru_prev));
    kv->lru_next = malloc(n_blocks * sizeof(*kv->lru_next));
    if (!kv->k || !kv->v || !kv->seqs || !kv->free_list || !kv->pending || !kv->touched || !kv->seq_refs ||
        !kv->cached || !kv->lru_prev || !kv->lru_next)
        goto fail;
    for (int32_t s = 0; s < max_seqs; s++)
        kv->pending[s] = -1;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        /* Zeroed so a never-written cell reads as 0, not NaN garbage. */
        kv->k[il] = calloc(1, k_bytes);
        kv->v[il] = calloc(1, v_bytes);
        if (!kv->k[il] || !kv->v[il])
            goto fail;
    }
    for (int32_t s = 0; s < max_seqs; s++) {
        kv->seqs[s].blocks = malloc((size_t)per_seq * sizeof(int32_t));
        if (!kv->seqs[s].blocks)
            goto fail;
    }
    /* Pop order 0, 1, 2, ... so a fresh cache fills low blocks first. */
    for (int32_t i = 0; i < kv->n_blocks; i++) {
        kv->free_list[i] = kv->n_blocks - 1 - i;
        kv->lru_prev[i] = kv->lru_next[i] = -1;
    }
    kv->n_free = kv->n_blocks;
    *out = kv;
    return FT_OK;

fail:
    ft_kv_cache_free(kv);
    FT_LOG_E("out of memory for a KV cache of %d blocks of %d tokens (%zu MiB)", (int)n_blocks_req,
             FT_KV_BLOCK_TOKENS, (k_bytes + v_bytes) * (size_t)hp->n_layer >> 20);
    return FT_ENOMEM;
}

int ft_kv_cache_new(const struct ft_model *m, int32_t n_ctx, int32_t max_seqs, struct ft_kv_cache **out) {
    *out = NULL;
    if (n_ctx <= 0 || max_seqs <= 0)
        return ft_kv_cache_new_pool(m, n_ctx, max_seqs, 1, out); /* reports the bad argument */
    const int64_t per_seq = ((int64_t)n_ctx + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS;
    if (per_seq * max_seqs > INT32_MAX) {
        FT_LOG_E("KV cache of %d tokens x %d sequences is too large", (int)n_ctx, (int)max_seqs);
        return FT_ERANGE;
    }
    return ft_kv_cache_new_pool(m, n_ctx, max_seqs, (int32_t)(per_seq * max_seqs), out);
}

void ft_kv_cache_free(struct ft_kv_cache *kv) {
    if (!kv)
        return;
    for (int32_t il = 0; il < kv->n_layer; il++) {
        if (kv->k)
            free(kv->k[il]);
        if (kv->v)
            free(kv->v[il]);
    }
    free(kv->k);
    free(kv->v);
    if (kv->seqs) {
        for (int32_t s = 0; s < kv->max_seqs; s++)
            free(kv->seqs[s].blocks);
    }
    free(kv->seqs);
    free(kv->free_list);
    free(kv->pending);
    free(kv->touched);
    free(kv->seq_refs);
    free(kv->cached);
    free(kv->lru_prev);
    free(kv->lru_next);
    free(kv);
}

int32_t ft_kv_cache_seq_len(const struct ft_kv_cache *kv, int32_t seq) {
    if (!kv || seq < 0 || seq >= kv->max_seqs)
        return 0;
    return kv->seqs[seq].len;
}

static void lru_remove(struct ft_kv_cache *kv, int32_t b) {
    const int32_t p = kv->lru_prev[b], n = kv->lru_next[b];
    if (p >= 0)
        kv->lru_next[p] = n;
    else
        kv->lru_head = n;
    if (n >= 0)
        kv->lru_prev[n] = p;
    else
        kv->lru_tail = p;
    kv->lru_prev[b] = kv->lru_next[b] = -1;
    kv->n_idle--;
}

static void lru_append(struct ft_kv_cache *kv, int32_t b) {
    kv->lru_prev[b] = kv->lru_tail;
    kv->lru_next[b] = -1;
    if (kv->lru_tail >= 0)
        kv->lru_next[kv->lru_tail] = b;
    else
        kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_idle++;
}

static void evict_one(struct ft_kv_cache *kv);

/* Evict the oldest idle blocks beyond the limit. */
static void trim_idle(struct ft_kv_cache *kv) {
    while (kv->n_idle > kv->max_idle)
        evict_one(kv);
}

/* One table stops listing block b. */
static void block_unref(struct ft_kv_cache *kv, int32_t b) {
    if (--kv->seq_refs[b] > 0)
        return;
    if (kv->cached[b]) {
        lru_append(kv, b);
        trim_idle(kv);
    } else {
        kv->free_list[kv->n_free++] = b;
    }
}

/* One more table lists block b (in use or idle). */
static void block_ref(struct ft_kv_cache *kv, int32_t b) {
    if (kv->seq_refs[b]++ == 0)
        lru_remove(kv, b);
}

void ft_kv_cache_seq_truncate(struct ft_kv_cache *kv, int32_t seq, int32_t pos) {
    if (!kv || seq < 0 || seq >= kv->max_seqs)
        return;
    struct ft_kv_seq *s = &kv->seqs[seq];
    if (pos < 0)
        pos = 0;
    if (pos < s->len)
        s->len = pos;
    /* Also returns blocks reserved by a batch that failed before using
     * them. The last block goes first, so among a sequence's idle blocks
     * the later ones are evicted before the prefixes they continue. */
    const int32_t keep = (s->len + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS;
    while (s->n_blocks > keep)
        block_unref(kv, s->blocks[--s->n_blocks]);
}

int32_t ft_kv_cache_n_ctx(const struct ft_kv_cache *kv) { return kv ? kv->n_ctx : 0; }
int32_t ft_kv_cache_max_seqs(const struct ft_kv_cache *kv) { return kv ? kv->max_seqs : 0; }
int32_t ft_kv_cache_blocks_free(const struct ft_kv_cache *kv) { return kv ? kv->n_free : 0; }
int32_t ft_kv_cache_blocks_idle(const struct ft_kv_cache *kv) { return kv ? kv->n_idle : 0; }
int32_t ft_kv_cache_blocks_total(const struct ft_kv_cache *kv) { return kv ? kv->n_blocks : 0; }

int32_t ft_kv_cache_seq_block(const struct ft_kv_cache *kv, int32_t seq, int32_t i) {
    if (!kv || seq < 0 || seq >= kv->max_seqs || i < 0 || i >= kv->seqs[seq].n_blocks)
        return -1;
    return kv->seqs[seq].blocks[i];
}

int ft_kv_cache_seq_attach(struct ft_kv_cache *kv, int32_t seq, const int32_t *blocks, int32_t n, int32_t len) {
    if (!kv || seq < 0 || seq >= kv->max_seqs || n < 1 || n > kv->max_blocks_per_seq || len > kv->n_ctx ||
        len <= (n - 1) * FT_KV_BLOCK_TOKENS || len > n * FT_KV_BLOCK_TOKENS) {
        FT_LOG_E("bad attach: sequence %d, %d blocks, %d tokens", (int)seq, (int)n, (int)len);
        return FT_EINVAL;
    }
    struct ft_kv_seq *s = &kv->seqs[seq];
    if (s->len || s->n_blocks) {
        FT_LOG_E("sequence %d is not empty", (int)seq);
        return FT_EINVAL;
    }
    for (int32_t i = 0; i < n; i++) {
        const int32_t b = blocks[i];
        if (b < 0 || b >= kv->n_blocks || (!kv->seq_refs[b] && !kv->cached[b])) {
            FT_LOG_E("block %d is free or outside the pool", (int)b);
            return FT_EINVAL;
        }
    }
    for (int32_t i = 0; i < n; i++) {
        block_ref(kv, blocks[i]);
        s->blocks[i] = blocks[i];
    }
    s->n_blocks = n;
    s->len = len;
    return FT_OK;
}

int ft_kv_cache_block_set_cached(struct ft_kv_cache *kv, int32_t b, bool cached) {
    if (!kv || b < 0 || b >= kv->n_blocks)
        return FT_EINVAL;
    if (cached == (bool)kv->cached[b])
        return FT_OK;
    if (cached) {
        if (!kv->seq_refs[b])
            return FT_EINVAL; /* a free block holds nothing worth caching */
        kv->cached[b] = 1;
        return FT_OK;
    }
    kv->cached[b] = 0;
    if (!kv->seq_refs[b]) {
        lru_remove(kv, b);
        kv->free_list[kv->n_free++] = b;
    }
    return FT_OK;
}

bool ft_kv_cache_block_is_cached(const struct ft_kv_cache *kv, int32_t b) {
    return kv && b >= 0 && b < kv->n_blocks && kv->cached[b];
}

int32_t ft_kv_cache_block_seq_refs(const struct ft_kv_cache *kv, int32_t b) {
    return kv && b >= 0 && b < kv->n_blocks ? kv->seq_refs[b] : 0;
}

void ft_kv_cache_set_evict(struct ft_kv_cache *kv, ft_kv_evict_fn fn, void *ud) {
    kv->evict = fn;
    kv->evict_ud = ud;
}

void ft_kv_cache_set_idle_limit(struct ft_kv_cache *kv, int32_t n) {
    if (!kv)
        return;
    kv->max_idle = n < 0 ? 0 : n;
    trim_idle(kv);
}

/* Free the oldest idle block (and whatever its holder lets go with it). */
static void evict_one(struct ft_kv_cache *kv) {
    const int32_t b = kv->lru_head;
    if (kv->evict)
        kv->evict(kv->evict_ud, b);
    if (kv->cached[b]) /* no callback, or one that kept it */
        ft_kv_cache_block_set_cached(kv, b, false);
}

/* Whether writing position `len` of sequence s lands in a block that
 * someone else also holds (another table or the prefix cache). */
static bool needs_copy(const struct ft_kv_cache *kv, const struct ft_kv_seq *s) {
    if (s->len % FT_KV_BLOCK_TOKENS == 0 || s->len / FT_KV_BLOCK_TOKENS >= s->n_blocks)
        return false;
    const int32_t b = s->blocks[s->len / FT_KV_BLOCK_TOKENS];
    return kv->seq_refs[b] > 1 || kv->cached[b];
}

/* Replace the shared partly filled last block of s by a private copy (of
 * the whole block: its rows beyond len % FT_KV_BLOCK_TOKENS are never read
 * before they are written, and the block is head-major, so whole is one
 * copy where the valid rows would be one per head). */
static void copy_on_write(struct ft_kv_cache *kv, struct ft_kv_seq *s) {
    const int32_t idx = s->len / FT_KV_BLOCK_TOKENS;
    const int32_t from = s->blocks[idx], to = kv->free_list[--kv->n_free];
    const size_t k_block = FT_KV_BLOCK_TOKENS * (size_t)kv->k_row, v_block = FT_KV_BLOCK_TOKENS * (size_t)kv->v_row;
    for (int32_t il = 0; il < kv->n_layer; il++) {
        memcpy(kv->k[il] + (size_t)to * k_block, kv->k[il] + (size_t)from * k_block, k_block * sizeof(uint16_t));
        memcpy(kv->v[il] + (size_t)to * v_block, kv->v[il] + (size_t)from * v_block, v_block * sizeof(uint16_t));
    }
    kv->seq_refs[to] = 1;
    s->blocks[idx] = to;
    block_unref(kv, from);
}

int ft_kv_cache_prepare(struct ft_kv_cache *kv, const struct ft_batch *b) {
    /* pending[s] is -1 outside this function; only the batch's sequences
     * are touched, so the cost does not grow with max_seqs. */
    int32_t n_touched = 0;
    int rc = FT_OK;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        const int32_t seq = b->seq_id[i];
        if (seq < 0 || seq >= kv->max_seqs) {
            FT_LOG_E("token %d: sequence id %d is outside 0..%d", (int)i, (int)seq,
                     (int)kv->max_seqs - 1);
            rc = FT_EINVAL;
            goto done;
        }
        if (kv->pending[seq] < 0) {
            kv->pending[seq] = kv->seqs[seq].len;
            kv->touched[n_touched++] = seq;
        }
        if (b->pos[i] != kv->pending[seq]) {
            FT_LOG_E("token %d: position %d of sequence %d does not continue it (expected %d)",
                     (int)i, (int)b->pos[i], (int)seq, (int)kv->pending[seq]);
            rc = FT_EINVAL;
            goto done;
        }
        if (kv->pending[seq] >= kv->n_ctx) {
            FT_LOG_E("sequence %d is full: the cache holds %d tokens per sequence", (int)seq,
                     (int)kv->n_ctx);
            rc = FT_EFULL;
            goto done;
        }
        kv->pending[seq]++;
    }
    int64_t need = 0;
    for (int32_t i = 0; i < n_touched; i++) {
        const struct ft_kv_seq *sq = &kv->seqs[kv->touched[i]];
        const int32_t blocks = (kv->pending[kv->touched[i]] + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS;
        need += FT_MAX(0, blocks - sq->n_blocks) + needs_copy(kv, sq);
    }
    if (need > (int64_t)kv->n_free + kv->n_idle) {
        FT_LOG_E("KV cache full: the batch needs %lld more blocks, %d are free and %d cached ones could be "
                 "evicted",
                 (long long)need, (int)kv->n_free, (int)kv->n_idle);
        rc = FT_EFULL;
        goto done;
    }
    /* From here on nothing fails. Evicting only touches idle blocks, which
     * no sequence of the batch lists. */
    while (kv->n_free < need)
        evict_one(kv);
    for (int32_t i = 0; i < n_touched; i++) {
        struct ft_kv_seq *sq = &kv->seqs[kv->touched[i]];
        if (needs_copy(kv, sq))
            copy_on_write(kv, sq);
        const int32_t blocks =
            (kv->pending[kv->touched[i]] + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS;
        while (sq->n_blocks < blocks) {
            const int32_t nb = kv->free_list[--kv->n_free];
            kv->seq_refs[nb] = 1;
            sq->blocks[sq->n_blocks++] = nb;
        }
    }
done:
    for (int32_t i = 0; i < n_touched; i++)
        kv->pending[kv->touched[i]] = -1;
    return rc;
}

void ft_kv_cache_commit(struct ft_kv_cache *kv, int32_t seq, int32_t pos) {
    struct ft_kv_seq *s = &kv->seqs[seq];
    if (pos + 1 > s->len)
        s->len = pos + 1;
}
