/* The batch and KV-cache contract of ft_model_forward (docs/architecture.md,
 * Models and the forward pass) on real models from ../shared/models:
 *   (a) a prompt in one batch and in chunks give the same logits, and one
 *       token at a time agrees with them (below);
 *   (b) two sequences interleaved in one batch give the logits each gives alone;
 *   (c) truncating a sequence and re-evaluating reproduces the logits;
 *   (d) KV blocks return to the free list;
 * plus logits only for the rows that ask, a batch longer than one internal
 * pass, and the errors for bad batches (nothing changes on error).
 *
 * A row is computed with the kernels llama.cpp uses for the rows of the
 * row's own sequence in the batch (engine/model/blocks.c): the single-row dot for
 * one row, repacked weights in groups of 4 rows, attention by one algorithm
 * below 64 rows and another from 64 up. Rows of other sequences never
 * change a row's numbers, so (b) is exact; and splitting a sequence into
 * chunks that keep those choices (multiples of 4 rows, all below or all
 * from 64) changes nothing either: (a), (c), the subset of logits and the
 * long batch are checked to TOL, tight on purpose. One token at a time uses
 * the single-row kernels: where a model's types have the same dot for one
 * row as for a batch (gemma3-Q8_0) that is exact too; where they add in
 * another order (Q4_K: llama.cpp's repack GEMV vs GEMM) the 8-bit
 * re-quantization of activations turns last-bit differences into logit
 * differences of a few tenths, as between llama.cpp's own decode and
 * prefill, and TOL_ONE_ROW bounds that (a KV cache fault gives errors of
 * several units). The same holds where the kernel level has a GEMM for a
 * type (engine/model/matmul.c): batches take it, single rows do not
 * (the amx level's Q4_K/Q5_K kernels and its one-row dot add in one order
 * at every batch size), so (b) stays exact. gemma3 (sliding window 16, a global layer) and llama
 * (GQA 4:2) are both run, so window masking and KV-head sharing are
 * covered on both paths. */
#include "ft_test.h"

#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/model.h"
#include "ft/ops.h"
#include "ft/qgemm.h"
#include "ft/types.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-4
#define TOL_ONE_ROW 1.0

/* Whether every matrix of the model has the same dot for one row as for a
 * batch in the kernel table in use, and no GEMM for batches (vectors --
 * norms -- are no matmul). */
static bool one_row_dot_same(const char *path) {
    struct ft_gguf *g = NULL;
    if (ft_gguf_open(path, &g) != FT_OK)
        return false;
    bool same = true;
    for (int64_t i = 0; i < ft_gguf_n_tensors(g); i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
        if (t->n_dims < 2)
            continue;
        const struct ft_type_info *ti = ft_type_traits(t->type);
        const bool is_float = t->type == FT_TYPE_F32 || t->type == FT_TYPE_F16 || t->type == FT_TYPE_BF16;
        same &= ti && ti->vec_dot == ti->vec_dot_gemv && !ft_qgemm_get(t->type) &&
                !(is_float && ft_float_kernels()->gemm_mr > 0);
    }
    ft_gguf_close(g);
    return same;
}

static int32_t g_nv;

/* Evaluate n tokens of one sequence starting at pos0; logits for all. */
static int eval_seq(struct ft_model *m, struct ft_kv_cache *kv, int32_t seq, const int32_t *tok, int n,
                    int32_t pos0, float *logits) {
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *sid = malloc(sizeof(int32_t) * (size_t)n);
    bool *want = malloc(sizeof(bool) * (size_t)n);
    for (int i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        sid[i] = seq;
        want[i] = true;
    }
    struct ft_batch b = {n, tok, pos, sid, want};
    const int rc = ft_model_forward(m, kv, &b, logits);
    free(pos);
    free(sid);
    free(want);
    return rc;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d))
            d = e != e ? 1e30 : e;
    }
    return d;
}

static void make_tokens(int32_t *t, int n, uint32_t seed) {
    uint32_t x = seed;
    t[0] = 1; /* BOS */
    for (int i = 1; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        t[i] = 3 + (int32_t)((x >> 8) % (uint32_t)(g_nv - 3));
    }
}

static void run(const char *path) {
    struct ft_model *m = NULL;
    struct ft_model_params mp = {.n_threads = 2};
    int rc = ft_model_load(path, &mp, &m);
    CHECKF(rc == FT_OK, "load %s: %s", path, ft_last_error());
    if (rc)
        return;
    g_nv = ft_model_hparams(m)->n_vocab;
    const size_t nv = (size_t)g_nv;
    /* NB: more than one internal pass (FT_UBATCH = 512): 512 + 128 rows in
     * one batch, 320 + 320 in halves -- multiples of 4, all from 64 up */
    enum { N = 40, NB = 640, CHUNK = 8 };
    int32_t ta[N], tb[N];
    make_tokens(ta, N, 1);
    make_tokens(tb, N, 2);
    float *full = malloc(sizeof(float) * N * nv);
    float *one = malloc(sizeof(float) * N * nv);
    float *mix = malloc(sizeof(float) * 2 * N * nv);
    float *alone_b = malloc(sizeof(float) * N * nv);

    /* (a) one batch vs batches of 8 (same matmul path) and vs one token at a time */
    struct ft_kv_cache *kv = NULL;
    CHECK(ft_kv_cache_new(m, 1024, 4, &kv) == FT_OK);
    const int32_t total = ft_kv_cache_blocks_total(kv);
    CHECK_EQ_INT(total, 4 * (1024 / FT_KV_BLOCK_TOKENS));
    CHECK(eval_seq(m, kv, 0, ta, N, 0, full) == FT_OK);
    CHECK_EQ_INT(ft_kv_cache_seq_len(kv, 0), N);
    CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), total - (N + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS);
    for (int i = 0; i < N; i += CHUNK)
        CHECK(eval_seq(m, kv, 1, &ta[i], CHUNK, i, one + (size_t)i * nv) == FT_OK);
    double d = max_diff(full, one, N * nv);
    printf("  (a) one batch vs chunks of %d: max diff %.2e\n", CHUNK, d);
    CHECKF(d <= TOL, "(a) %s: %g", path, d);
    ft_kv_cache_seq_truncate(kv, 1, 0);
    for (int i = 0; i < N; i++)
        CHECK(eval_seq(m, kv, 1, &ta[i], 1, i, one + (size_t)i * nv) == FT_OK);
    d = max_diff(full, one, N * nv);
    const bool same = one_row_dot_same(path);
    printf("  (a) one batch vs token by token: max diff %.2e (%s dots for one row)\n", d, same ? "same" : "other");
    CHECKF(d <= (same ? TOL : TOL_ONE_ROW), "(a) token by token %s: %g", path, d);

    /* (b) two sequences interleaved in one batch vs each alone */
    CHECK(eval_seq(m, kv, 2, tb, N, 0, alone_b) == FT_OK);
    {
        int32_t tok[2 * N], pos[2 * N], sid[2 * N];
        bool want[2 * N];
        for (int i = 0; i < N; i++) {
            tok[2 * i] = ta[i], pos[2 * i] = i, sid[2 * i] = 3, want[2 * i] = true;
            tok[2 * i + 1] = tb[i], pos[2 * i + 1] = i, sid[2 * i + 1] = 0, want[2 * i + 1] = true;
        }
        ft_kv_cache_seq_truncate(kv, 0, 0); /* reuse seq 0 for b */
        struct ft_batch b = {2 * N, tok, pos, sid, want};
        CHECK(ft_model_forward(m, kv, &b, mix) == FT_OK);
        double da = 0, db = 0;
        for (int i = 0; i < N; i++) {
            da = fmax(da, max_diff(mix + (size_t)(2 * i) * nv, full + (size_t)i * nv, nv));
            db = fmax(db, max_diff(mix + (size_t)(2 * i + 1) * nv, alone_b + (size_t)i * nv, nv));
        }
        printf("  (b) interleaved vs alone: max diff %.2e / %.2e\n", da, db);
        CHECKF(da <= TOL && db <= TOL, "(b) %s: %g %g", path, da, db);
    }

    /* (c) truncate and re-evaluate; (d) blocks freed */
    {
        const int cut = 20;
        const int32_t free_before = ft_kv_cache_blocks_free(kv);
        ft_kv_cache_seq_truncate(kv, 3, cut);
        CHECK_EQ_INT(ft_kv_cache_seq_len(kv, 3), cut);
        /* 40 tokens took 3 blocks, 20 take 2 */
        CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), free_before + 1);
        float *again = malloc(sizeof(float) * (N - cut) * nv);
        CHECK(eval_seq(m, kv, 3, ta + cut, N - cut, cut, again) == FT_OK);
        d = max_diff(again, full + (size_t)cut * nv, (size_t)(N - cut) * nv);
        printf("  (c) truncate to %d and re-evaluate: max diff %.2e\n", cut, d);
        CHECKF(d <= TOL, "(c) %s: %g", path, d);
        free(again);
        /* logits only where asked: rows come back in batch order */
        ft_kv_cache_seq_truncate(kv, 3, 0);
        int32_t pos[N], sid[N];
        bool want[N];
        int n_want = 0;
        for (int i = 0; i < N; i++) {
            pos[i] = i, sid[i] = 3, want[i] = (i % 7 == 3) || i == N - 1;
            n_want += want[i];
        }
        float *some = malloc(sizeof(float) * (size_t)n_want * nv);
        struct ft_batch b = {N, ta, pos, sid, want};
        CHECK(ft_model_forward(m, kv, &b, some) == FT_OK);
        double ds = 0;
        for (int i = 0, o = 0; i < N; i++)
            if (want[i])
                ds = fmax(ds, max_diff(some + (size_t)(o++) * nv, full + (size_t)i * nv, nv));
        printf("  want_logits subset (%d rows): max diff %.2e\n", n_want, ds);
        CHECKF(ds <= TOL, "subset %s: %g", path, ds);
        free(some);

        for (int s = 0; s < 4; s++)
            ft_kv_cache_seq_truncate(kv, s, 0);
        CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), total);
        for (int s = 0; s < 4; s++)
            CHECK_EQ_INT(ft_kv_cache_seq_len(kv, s), 0);
    }

    /* Errors leave the cache untouched. */
    {
        CHECK(eval_seq(m, kv, 0, ta, 5, 0, one) == FT_OK);
        const int32_t fb = ft_kv_cache_blocks_free(kv);
        CHECK(eval_seq(m, kv, 0, ta, 3, 7, one) == FT_EINVAL); /* gap: expected position 5 */
        CHECK(eval_seq(m, kv, 4, ta, 3, 0, one) == FT_EINVAL); /* no such sequence */
        int32_t bad = g_nv;
        CHECK(eval_seq(m, kv, 1, &bad, 1, 0, one) == FT_EINVAL); /* token outside the vocabulary */
        CHECK_EQ_INT(ft_kv_cache_seq_len(kv, 0), 5);
        CHECK_EQ_INT(ft_kv_cache_blocks_free(kv), fb);
        struct ft_batch big = {4097, ta, ta, ta, NULL}; /* rejected before any array is read */
        CHECK(ft_model_forward(m, kv, &big, one) == FT_EINVAL);
        ft_kv_cache_seq_truncate(kv, 0, 0);
    }
    ft_kv_cache_free(kv);

    /* A full cache: FT_EFULL, nothing reserved. */
    {
        struct ft_kv_cache *small = NULL;
        CHECK(ft_kv_cache_new(m, 32, 1, &small) == FT_OK);
        CHECK(eval_seq(m, small, 0, ta, 30, 0, one) == FT_OK);
        CHECK(eval_seq(m, small, 0, ta, 3, 30, one) == FT_EFULL);
        CHECK_EQ_INT(ft_kv_cache_seq_len(small, 0), 30);
        CHECK(eval_seq(m, small, 0, ta, 2, 30, one) == FT_OK);
        ft_kv_cache_free(small);
    }

    /* A batch longer than one internal pass equals two halves. */
    {
        int32_t *tl = malloc(sizeof(int32_t) * NB);
        make_tokens(tl, NB, 3);
        struct ft_kv_cache *k2 = NULL;
        CHECK(ft_kv_cache_new(m, NB, 2, &k2) == FT_OK);
        int32_t *pos = malloc(sizeof(int32_t) * NB), *sid = malloc(sizeof(int32_t) * NB);
        for (int i = 0; i < NB; i++)
            pos[i] = i, sid[i] = 0;
        float *l1 = malloc(sizeof(float) * nv), *l2 = malloc(sizeof(float) * nv);
        struct ft_batch b = {NB, tl, pos, sid, NULL}; /* NULL want_logits: last token only */
        CHECK(ft_model_forward(m, k2, &b, l1) == FT_OK);
        struct ft_batch h1 = {NB / 2, tl, pos, sid, NULL};
        for (int i = 0; i < NB; i++)
            sid[i] = 1;
        CHECK(ft_model_forward(m, k2, &h1, l2) == FT_OK);
        struct ft_batch h2 = {NB - NB / 2, tl + NB / 2, pos + NB / 2, sid, NULL};
        CHECK(ft_model_forward(m, k2, &h2, l2) == FT_OK);
        d = max_diff(l1, l2, nv);
        printf("  %d tokens in one batch vs two: max diff %.2e\n", NB, d);
        CHECKF(d <= TOL, "long batch %s: %g", path, d);
        free(l1);
        free(l2);
        free(pos);
        free(sid);
        free(tl);
        ft_kv_cache_free(k2);
    }

    /* (e) More threads than the machine has cores: threads are preempted,
     * finish their own runs of a product's chunks at different times and
     * take chunks from each other's runs (engine/model/matmul.c). Every row must
     * still be computed, once: the logits match the 2-thread ones, for a
     * batch (GEMM) and for one token at a time (vec_dot). */
    {
        struct ft_model *m5 = NULL;
        struct ft_model_params mp5 = {.n_threads = 5};
        CHECK(ft_model_load(path, &mp5, &m5) == FT_OK);
        struct ft_kv_cache *k2 = NULL, *k5 = NULL;
        CHECK(m5 && ft_kv_cache_new(m, N, 1, &k2) == FT_OK && ft_kv_cache_new(m5, N, 1, &k5) == FT_OK);
        if (m5 && k2 && k5) {
            float *l5 = malloc(sizeof(float) * N * nv);
            CHECK(eval_seq(m5, k5, 0, ta, N, 0, l5) == FT_OK);
            d = max_diff(l5, full, N * nv);
            ft_kv_cache_seq_truncate(k5, 0, 0);
            double dt = 0;
            for (int i = 0; i < N; i++) {
                CHECK(eval_seq(m, k2, 0, &ta[i], 1, i, one) == FT_OK);
                CHECK(eval_seq(m5, k5, 0, &ta[i], 1, i, l5) == FT_OK);
                dt = fmax(dt, max_diff(l5, one, nv));
            }
            printf("  (e) 5 threads vs 2: max diff %.2e in one batch, %.2e token by token\n", d, dt);
            CHECKF(d <= TOL && dt <= TOL, "(e) %s: %g %g", path, d, dt);
            free(l5);
        }
        ft_kv_cache_free(k2);
        ft_kv_cache_free(k5);
        ft_model_free(m5);
    }

    free(full);
    free(one);
    free(mix);
    free(alone_b);
    ft_model_free(m);
}

int main(void) {
    const char *shared = ft_test_shared_dir();
    if (!shared)
        FT_TEST_SKIP("FT_SHARED_DIR (../shared with models/) not found; no models to run");
    const char *models[] = {"gemma3-Q8_0.gguf", "llama-Q4_K_M.gguf"};
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/models/%s", shared, models[i]);
        printf("%s\n", models[i]);
        run(path);
    }
    return ft_test_finish("test_model_batch");
}
