/* KV block sharing (engine/model/kv_cache.c): reference counts, attaching
 * existing blocks, copy-on-write of a shared partly filled block (the
 * logits stay exactly those of an unshared run), idle cached blocks evicted
 * oldest first only when the free list is empty, and errors that change
 * nothing (tiny llama model from ../shared). */
#include "ft_test_model.h"

#include "ft/common.h"
#include "ft/model.h"

#define N_CTX 64

static struct ft_model *g_model;
static int32_t g_evicted[16];
static int g_n_evicted;

static void on_evict(void *ud, int32_t block) {
    struct ft_kv_cache *kv = ud;
    if (g_n_evicted < 16)
        g_evicted[g_n_evicted++] = block;
    ft_kv_cache_block_set_cached(kv, block, false);
}

/* tokens[0..n) at positions pos0.. of seq in one batch; logits of the last. */
static int eval(struct ft_kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n, int32_t pos0, float *logits) {
    int32_t pos[64], seqs[64];
    bool want[64];
    for (int32_t i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        seqs[i] = seq;
        want[i] = logits && i == n - 1;
    }
    const struct ft_batch b = {.n_tokens = n, .token = tokens, .pos = pos, .seq_id = seqs, .want_logits = want};
    return ft_model_forward(g_model, kv, &b, logits);
}

static bool same(const float *a, const float *b, int32_t n) { return !memcmp(a, b, sizeof(float) * (size_t)n); }

int main(void) {
    g_model = ft_test_load_shared_model("llama-F16.gguf", 1);
    const int32_t nv = ft_model_hparams(g_model)->n_vocab;
    float *ref = malloc(sizeof(float) * (size_t)nv), *got = malloc(sizeof(float) * (size_t)nv);
    int32_t t[64];
    for (int32_t i = 0; i < 64; i++)
        t[i] = (i * 37 + 11) % nv;

    struct ft_kv_cache *kv = NULL;
    CHECK_EQ_INT(ft_kv_cache_new_pool(g_model, N_CTX, 4, 0, &kv), FT_EINVAL);
    CHECK_EQ_INT(ft_kv_cache_new_pool(g_model, N_CTX, 4, 6, &kv), FT_OK);
    CHECK_EQ_INT(ft_kv_cache_blocks_total(kv), 6);

    /* Reference: 22 tokens on sequence 3 alone, 20 then 1 then 1. */
    CHECK_EQ_INT(eval(kv, 3, t, 20, 0, NULL), FT_OK);
    CHECK_EQ_INT(eval(kv, 3, t + 20, 1, 20, ref), FT_OK);
    float *ref2 = malloc(sizeof(float) * (size_t)nv);
    CHECK_EQ_INT(eval(kv, 3, t + 21, 1, 21, ref2), FT_OK);
    ft_kv_cache_seq_truncate(kv, 3, 0);
    CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), 6);

    /* Sequence 0 holds 20 tokens (2 blocks); sequence 1 attaches them. */
    CHECK_EQ_INT(eval(kv, 0, t, 20, 0, NULL), FT_OK);
    const int32_t blk[2] = {ft_kv_cache_seq_block(kv, 0, 0), ft_kv_cache_seq_block(kv, 0, 1)};
    CHECK(blk[0] >= 0 && blk[1] >= 0 && blk[0] != blk[1]);
    CHECK_EQ_INT(ft_kv_cache_seq_block(kv, 0, 2), -1);
    CHECK_EQ_INT(ft_kv_cache_block_seq_refs(kv, blk[0]), 1);
    /* bad attaches change nothing */
    CHECK_EQ_INT(ft_kv_cache_seq_attach(kv, 0, blk, 2, 20), FT_EINVAL);  /* not empty */
    CHECK_EQ_INT(ft_kv_cache_seq_attach(kv, 1, blk, 2, 16), FT_EINVAL);  /* length ends before block 2 */
    CHECK_EQ_INT(ft_kv_cache_seq_attach(kv, 1, blk, 2, 33), FT_EINVAL);  /* beyond 2 blocks */
    int32_t free_blk[1] = {0};
    while (free_blk[0] == blk[0] || free_blk[0] == blk[1])
        free_blk[0]++;
    CHECK_EQ_INT(ft_kv_cache_seq_attach(kv, 1, free_blk, 1, 4), FT_EINVAL); /* a free block */
    CHECK_EQ_INT(ft_kv_cache_seq_len(kv, 1), 0);
    CHECK_EQ_INT(ft_kv_cache_block_set_cached(kv, free_blk[0], true), FT_EINVAL);
    CHECK_EQ_INT(ft_kv_cache_seq_attach(kv, 1, blk, 2, 20), FT_OK);
    CHECK_EQ_INT(ft_kv_cache_seq_len(kv, 1), 20);
    CHECK_EQ_INT(ft_kv_cache_block_seq_refs(kv, blk[0]), 2);
    CHECK_EQ_INT(ft_kv_cache_block_seq_refs(kv, blk[1]), 2);
    CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), 4);

    /* Copy-on-write: sequence 1 writes position 20 into the shared block
     * 1 and gets its own copy; its logits are exactly the unshared ones. */
    CHECK_EQ_INT(eval(kv, 1, t + 20, 1, 20, got), FT_OK);
    CHECKF(same(ref, got, nv), "logits after copy-on-write differ");
    CHECK_EQ_INT(ft_kv_cache_seq_block(kv, 1, 0), blk[0]); /* full block: still shared */
    CHECK(ft_kv_cache_seq_block(kv, 1, 1) != blk[1]);
    CHECK_EQ_INT(ft_kv_cache_block_seq_refs(kv, blk[1]), 1);
    CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), 3);
    /* Sequence 0 writes a different token at position 20 of its block: the
     * copy of sequence 1 is untouched. */
    CHECK_EQ_INT(eval(kv, 0, t + 40, 1, 20, NULL), FT_OK);
    CHECK_EQ_INT(ft_kv_cache_seq_block(kv, 0, 1), blk[1]); /* sole holder: written in place */
    CHECK_EQ_INT(eval(kv, 1, t + 21, 1, 21, got), FT_OK);
    CHECKF(same(ref2, got, nv), "logits of the copy changed");
    ft_kv_cache_seq_truncate(kv, 1, 0);
    CHECK_EQ_INT(ft_kv_cache_block_seq_refs(kv, blk[0]), 1);

    /* A block the prefix cache holds is copied on write as well. */
    ft_kv_cache_seq_truncate(kv, 0, 0);
    CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), 6);
    CHECK_EQ_INT(eval(kv, 0, t, 20, 0, NULL), FT_OK);
    const int32_t b1 = ft_kv_cache_seq_block(kv, 0, 1);
    CHECK_EQ_INT(ft_kv_cache_block_set_cached(kv, b1, true), FT_OK);
    CHECK_EQ_INT(eval(kv, 0, t + 20, 1, 20, got), FT_OK);
    CHECKF(same(ref, got, nv), "logits after copy-on-write of a cached block differ");
    CHECK(ft_kv_cache_seq_block(kv, 0, 1) != b1);
    /* b1 is now idle: cached, listed by no sequence */
    CHECK_EQ_INT(ft_kv_cache_blocks_idle(kv), 1);
    CHECK_EQ_INT(ft_kv_cache_block_set_cached(kv, b1, false), FT_OK);
    CHECK_EQ_INT(ft_kv_cache_blocks_idle(kv), 0);
    ft_kv_cache_seq_truncate(kv, 0, 0);
    CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), 6);

    /* LRU: 3 cached blocks go idle, last block first; a pass needing more
     * than the 3 free blocks evicts the oldest idle one: the last block. */
    ft_kv_cache_set_evict(kv, on_evict, kv);
    CHECK_EQ_INT(eval(kv, 0, t, 48, 0, NULL), FT_OK);
    int32_t c[3];
    for (int i = 0; i < 3; i++) {
        c[i] = ft_kv_cache_seq_block(kv, 0, i);
        CHECK_EQ_INT(ft_kv_cache_block_set_cached(kv, c[i], true), FT_OK);
    }
    ft_kv_cache_seq_truncate(kv, 0, 0);
    CHECK_EQ_INT(ft_kv_cache_blocks_idle(kv), 3);
    CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), 3);
    /* attaching an idle block takes it off the idle list */
    CHECK_EQ_INT(ft_kv_cache_seq_attach(kv, 2, c, 1, 16), FT_OK);
    CHECK_EQ_INT(ft_kv_cache_blocks_idle(kv), 2);
    ft_kv_cache_seq_truncate(kv, 2, 0); /* idle again, now the most recent */
    CHECK_EQ_INT(eval(kv, 1, t, 64, 0, NULL), FT_OK); /* 4 blocks: 3 free + 1 evicted */
    CHECK_EQ_INT(g_n_evicted, 1);
    CHECK_EQ_INT(g_evicted[0], c[2]);
    CHECK(!ft_kv_cache_block_is_cached(kv, c[2]));
    CHECK_EQ_INT(ft_kv_cache_blocks_idle(kv), 2);

    /* Exhaustion: 3 more blocks than free + idle: FT_EFULL, nothing changes. */
    CHECK_EQ_INT(eval(kv, 2, t, 48, 0, NULL), FT_EFULL);
    CHECK_EQ_INT(ft_kv_cache_seq_len(kv, 2), 0);
    CHECK_EQ_INT(ft_kv_cache_blocks_idle(kv), 2);
    CHECK_EQ_INT(g_n_evicted, 1);
    /* A full sequence: FT_EFULL too. */
    CHECK_EQ_INT(eval(kv, 1, t, 1, 64, NULL), FT_EFULL);
    /* Without a callback the cache lets go of idle blocks itself; c[1]
     * (older than c[0], touched last) goes first. */
    ft_kv_cache_set_evict(kv, NULL, NULL);
    CHECK_EQ_INT(eval(kv, 2, t, 16, 0, NULL), FT_OK);
    CHECK(!ft_kv_cache_block_is_cached(kv, c[1]));
    CHECK(ft_kv_cache_block_is_cached(kv, c[0]));
    CHECK_EQ_INT(g_n_evicted, 1);

    ft_kv_cache_seq_truncate(kv, 1, 0);
    ft_kv_cache_seq_truncate(kv, 2, 0);
    CHECK_EQ_INT(ft_kv_cache_block_set_cached(kv, c[0], false), FT_OK);
    CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), 6);

    /* Idle limit: 3 cached blocks go idle (last block first) under a limit
     * of 1: the two oldest are evicted at once, through the callback, and
     * the next pass gets the most recently freed block back first. */
    ft_kv_cache_set_evict(kv, on_evict, kv);
    g_n_evicted = 0;
    ft_kv_cache_set_idle_limit(kv, 1);
    CHECK_EQ_INT(eval(kv, 0, t, 48, 0, NULL), FT_OK);
    for (int i = 0; i < 3; i++) {
        c[i] = ft_kv_cache_seq_block(kv, 0, i);
        CHECK_EQ_INT(ft_kv_cache_block_set_cached(kv, c[i], true), FT_OK);
    }
    ft_kv_cache_seq_truncate(kv, 0, 0);
    CHECK_EQ_INT(ft_kv_cache_blocks_idle(kv), 1);
    CHECK_EQ_INT(g_n_evicted, 2);
    CHECK_EQ_INT(g_evicted[0], c[2]);
    CHECK_EQ_INT(g_evicted[1], c[1]);
    CHECK(ft_kv_cache_block_is_cached(kv, c[0]));
    CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), 5);
    CHECK_EQ_INT(eval(kv, 1, t, 1, 0, NULL), FT_OK);
    CHECK_EQ_INT(ft_kv_cache_seq_block(kv, 1, 0), c[1]);
    ft_kv_cache_seq_truncate(kv, 1, 0);
    /* Lowering the limit evicts at once. */
    ft_kv_cache_set_idle_limit(kv, 0);
    CHECK_EQ_INT(ft_kv_cache_blocks_idle(kv), 0);
    CHECK_EQ_INT(g_n_evicted, 3);
    CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), 6);
    ft_kv_cache_free(kv);
    free(ref);
    free(ref2);
    free(got);
    ft_model_free(g_model);
    return ft_test_finish("test_kv_cache");
}
