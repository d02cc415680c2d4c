/* Loading one of ../shared/models in a unit test: skips (exit 77) with a
 * message when ../shared or the model is absent. */
#ifndef FT_TEST_MODEL_H
#define FT_TEST_MODEL_H

#include "ft/common.h"
#include "ft/model.h"
#include "ft/tokenizer.h"
#include "ft_test.h"

static inline struct ft_model *ft_test_load_shared_model(const char *name, int n_threads) {
    const char *shared = ft_test_shared_dir();
    if (!shared)
        FT_TEST_SKIP("FT_SHARED_DIR (../shared with models/) not found; no model to run");
    char path[4096];
    snprintf(path, sizeof(path), "%s/models/%s", shared, name);
    struct ft_model_params mp = {.n_threads = n_threads};
    struct ft_model *m = NULL;
    if (ft_model_load(path, &mp, &m) != FT_OK)
        FT_TEST_SKIP("cannot load %s", path);
    return m;
}

/* text's tokens (with BOS) into out, at most cap of them; returns the count. */
static inline int32_t ft_test_tokenize(struct ft_model *m, const char *text, int32_t *out, int32_t cap) {
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_EQ_INT(ft_tokenize(ft_model_tokenizer(m), text, strlen(text), true, false, &ids, &n), FT_OK);
    if ((int32_t)n > cap)
        n = (size_t)cap;
    memcpy(out, ids, sizeof(int32_t) * n);
    free(ids);
    return (int32_t)n;
}

/* Logits of the last of tokens[0..n) (n <= 64), evaluated in one batch from
 * position 0 on a fresh KV cache of sequence 0; malloc'd, NULL on failure. */
static inline float *ft_test_eval_last(struct ft_model *m, const int32_t *tokens, int32_t n) {
    int32_t pos[64], seq[64] = {0};
    if (n < 1 || n > 64)
        return NULL;
    for (int32_t i = 0; i < n; i++)
        pos[i] = i;
    const size_t nv = (size_t)ft_model_hparams(m)->n_vocab;
    struct ft_kv_cache *kv = NULL;
    float *logits = malloc(nv * sizeof(float));
    struct ft_batch b = {n, tokens, pos, seq, NULL};
    if (!logits || ft_kv_cache_new(m, 64, 1, &kv) || ft_model_forward(m, kv, &b, logits)) {
        free(logits);
        logits = NULL;
    }
    ft_kv_cache_free(kv);
    return logits;
}

#endif
