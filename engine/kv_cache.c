/* KV cache: fp16 K and V in fixed blocks of FT_KV_BLOCK_TOKENS tokens, a
 * block table per sequence and a free list (DESIGN.md §4).
 *
 * A sequence's positions 0..len-1 live in the blocks its table lists, in
 * order, so blocks need not be contiguous and are returned to the free list
 * independently when a sequence is truncated. The same block id indexes
 * every layer's pool. Blocks are reserved for a whole batch before the
 * forward pass starts (ft_kv_cache_prepare), so a pass never fails half-way
 * for lack of room; sharing blocks between sequences (prefix cache) will add
 * a reference count per block on top of this layout.
 *
 * Ownership: the cache belongs to whoever created it and must not outlive
 * its model. Not thread-safe; the scheduler thread owns it. */
#include "model_internal.h"

#include <stdlib.h>
#include <string.h>

int ft_kv_cache_new(const struct ft_model *m, int32_t n_ctx, int32_t max_seqs,
                    struct ft_kv_cache **out) {
    *out = NULL;
    if (!m || n_ctx <= 0 || max_seqs <= 0 || max_seqs > 65536) {
        FT_LOG_E("bad arguments: n_ctx %d, max_seqs %d (need n_ctx > 0, 0 < max_seqs <= 65536)",
                 (int)n_ctx, (int)max_seqs);
        return FT_EINVAL;
    }
    const struct ft_hparams *hp = &m->hp;
    const int32_t per_seq = (int32_t)((n_ctx + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS);
    size_t n_blocks = 0, cells = 0, k_bytes = 0, v_bytes = 0;
    const size_t k_row = (size_t)hp->n_head_kv * (size_t)hp->head_dim_k;
    const size_t v_row = (size_t)hp->n_head_kv * (size_t)hp->head_dim_v;
    if (ft_mul_overflow((size_t)per_seq, (size_t)max_seqs, &n_blocks) || n_blocks > INT32_MAX ||
        ft_mul_overflow(n_blocks, FT_KV_BLOCK_TOKENS, &cells) ||
        ft_mul_overflow(cells, k_row * sizeof(uint16_t), &k_bytes) ||
        ft_mul_overflow(cells, v_row * sizeof(uint16_t), &v_bytes)) {
        FT_LOG_E("KV cache of %d tokens x %d sequences is too large", (int)n_ctx, (int)max_seqs);
        return FT_ERANGE;
    }

    struct ft_kv_cache *kv = calloc(1, sizeof(*kv));
    if (!kv)
        goto fail;
    kv->m = m;
    kv->n_ctx = n_ctx;
    kv->max_seqs = max_seqs;
    kv->n_blocks = (int32_t)n_blocks;
    kv->max_blocks_per_seq = per_seq;
    kv->n_layer = hp->n_layer;
    kv->k_row = (int64_t)k_row;
    kv->v_row = (int64_t)v_row;
    kv->k = calloc((size_t)hp->n_layer, sizeof(*kv->k));
    kv->v = calloc((size_t)hp->n_layer, sizeof(*kv->v));
    kv->seqs = calloc((size_t)max_seqs, sizeof(*kv->seqs));
    kv->free_list = malloc(n_blocks * sizeof(*kv->free_list));
    kv->pending = malloc((size_t)max_seqs * sizeof(*kv->pending));
    kv->touched = malloc((size_t)max_seqs * sizeof(*kv->touched));
    if (!kv->k || !kv->v || !kv->seqs || !kv->free_list || !kv->pending || !kv->touched)
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
    for (int32_t i = 0; i < kv->n_blocks; i++)
        kv->free_list[i] = kv->n_blocks - 1 - i;
    kv->n_free = kv->n_blocks;
    *out = kv;
    return FT_OK;

fail:
    ft_kv_cache_free(kv);
    FT_LOG_E("out of memory for a KV cache of %d tokens x %d sequences (%zu MiB)", (int)n_ctx,
             (int)max_seqs, (k_bytes + v_bytes) * (size_t)hp->n_layer >> 20);
    return FT_ENOMEM;
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
    free(kv);
}

int32_t ft_kv_cache_seq_len(const struct ft_kv_cache *kv, int32_t seq) {
    if (!kv || seq < 0 || seq >= kv->max_seqs)
        return 0;
    return kv->seqs[seq].len;
}

void ft_kv_cache_seq_truncate(struct ft_kv_cache *kv, int32_t seq, int32_t pos) {
    if (!kv || seq < 0 || seq >= kv->max_seqs)
        return;
    struct ft_kv_seq *s = &kv->seqs[seq];
    if (pos < 0)
        pos = 0;
    if (pos < s->len)
        s->len = pos;
    /* Also returns blocks reserved by a batch that failed before using them. */
    const int32_t keep = (s->len + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS;
    while (s->n_blocks > keep)
        kv->free_list[kv->n_free++] = s->blocks[--s->n_blocks];
}

int32_t ft_kv_cache_n_ctx(const struct ft_kv_cache *kv) { return kv ? kv->n_ctx : 0; }
int32_t ft_kv_cache_max_seqs(const struct ft_kv_cache *kv) { return kv ? kv->max_seqs : 0; }
int32_t ft_kv_cache_blocks_free(const struct ft_kv_cache *kv) { return kv ? kv->n_free : 0; }
int32_t ft_kv_cache_blocks_total(const struct ft_kv_cache *kv) { return kv ? kv->n_blocks : 0; }

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
        const int32_t s = kv->touched[i];
        const int32_t blocks = (kv->pending[s] + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS;
        need += FT_MAX(0, blocks - kv->seqs[s].n_blocks);
    }
    if (need > kv->n_free) {
        FT_LOG_E("KV cache full: the batch needs %lld more blocks, %d are free", (long long)need,
                 (int)kv->n_free);
        rc = FT_EFULL;
        goto done;
    }
    for (int32_t i = 0; i < n_touched; i++) {
        struct ft_kv_seq *sq = &kv->seqs[kv->touched[i]];
        const int32_t blocks =
            (kv->pending[kv->touched[i]] + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS;
        while (sq->n_blocks < blocks)
            sq->blocks[sq->n_blocks++] = kv->free_list[--kv->n_free];
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
