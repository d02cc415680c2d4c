/* ft_perplexity_eval: run a model over the windows of a text and score the
 * second half of each window (definitions in ft/perplexity.h).
 *
 * Each forward call evaluates either several whole windows as separate
 * sequences (n_batch >= n_ctx, as llama.cpp's n_seq) or a slice of one
 * window; logits are asked only for the scored positions. The rows of one
 * call are scored in parallel into per-row results, which are then summed
 * in row order on the calling thread, so the numbers do not depend on the
 * thread count. A base model, when given, is evaluated on the same batches
 * with its own KV cache; a base file is read row by row. */
#include "ft/common.h"
#include "ft/perplexity.h"
#include "ft/threadpool.h"
#include "perplexity_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct eval_row {
    int32_t chunk; /* window index */
    int32_t pos;   /* position in the window */
    int32_t tok;   /* the token that follows */
};

struct score_task {
    int32_t n_vocab, first, n_rows;
    size_t nv; /* uint16 per stored row */
    const struct eval_row *rows;
    const float *logits;      /* n_rows x n_vocab */
    const float *base_logits; /* n_rows x n_vocab, or NULL */
    const uint16_t *base_raw; /* n_rows stored rows (checked), or NULL */
    uint16_t *save;           /* n_rows stored rows to write, or NULL */
    float *scratch;           /* n_threads x n_vocab */
    struct ft_ppl_score *scores;
};

static void score_rows(void *ctx, int ith, int nth) {
    struct score_task *t = ctx;
    float *logp = t->scratch + (size_t)ith * (size_t)t->n_vocab;
    const int32_t r0 = (int32_t)((int64_t)t->n_rows * ith / nth), r1 = (int32_t)((int64_t)t->n_rows * (ith + 1) / nth);
    for (int32_t r = r0; r < r1; r++) {
        const float *lg = t->logits + (size_t)r * (size_t)t->n_vocab;
        const int32_t tok = t->rows[r].tok;
        if (t->save)
            ft_logprob_encode(lg, t->n_vocab, tok, t->save + (size_t)r * t->nv);
        const float *base = NULL;
        float cutoff = -INFINITY;
        if (t->base_logits) {
            ft_log_softmax(t->base_logits + (size_t)r * (size_t)t->n_vocab, t->n_vocab, logp);
            base = logp;
        } else if (t->base_raw) {
            ft_logprob_decode(t->base_raw + (size_t)r * t->nv, t->n_vocab, logp); /* checked when read */
            base = logp;
            cutoff = -16.0f; /* llama.cpp sums the file's rows above -16 only */
        }
        ft_ppl_score_row(lg, t->n_vocab, tok, base, cutoff, &t->scores[r]);
    }
}

void ft_ppl_result_free(struct ft_ppl_result *r) {
    if (!r)
        return;
    free(r->kld_values);
    free(r->p_diff_values);
    r->kld_values = r->p_diff_values = NULL;
}

int ft_perplexity_eval(const struct ft_ppl_inputs *in, const struct ft_ppl_config *cfg, struct ft_ppl_result *out) {
    memset(out, 0, sizeof(*out));
    if (!in || !in->model || !cfg || (in->base_model && in->base_file)) {
        FT_LOG_E("invalid argument");
        return FT_EINVAL;
    }
    struct ft_model *m = in->model;
    const int32_t n_vocab = ft_model_hparams(m)->n_vocab;
    const struct ft_tokenizer *tk = ft_model_tokenizer(m);
    if (in->base_model && ft_model_hparams(in->base_model)->n_vocab != n_vocab) {
        FT_LOG_E("the base model has %d tokens in its vocabulary, the model %d: they cannot be compared",
                 ft_model_hparams(in->base_model)->n_vocab, n_vocab);
        return FT_EINVAL;
    }

    /* The windows. */
    const int32_t *tokens = in->tokens;
    size_t n_tokens = in->n_tokens;
    int32_t n_ctx = cfg->n_ctx;
    if (in->base_file) {
        const int32_t fc = ft_logprob_file_n_ctx(in->base_file);
        if (ft_logprob_file_n_vocab(in->base_file) != n_vocab) {
            FT_LOG_E("the base log-probabilities have a vocabulary of %d tokens, the model %d: they cannot be "
                     "compared",
                     ft_logprob_file_n_vocab(in->base_file), n_vocab);
            return FT_EINVAL;
        }
        if (n_ctx > 0 && n_ctx != fc) {
            FT_LOG_E("the base log-probabilities were computed with a context of %d, not %d (leave -c out)", fc,
                     n_ctx);
            return FT_EINVAL;
        }
        n_ctx = fc;
        tokens = ft_logprob_file_tokens(in->base_file);
        n_tokens = (size_t)ft_logprob_file_n_chunk(in->base_file) * (size_t)fc;
    } else if (!tokens) {
        FT_LOG_E("no tokens");
        return FT_EINVAL;
    }
    if (n_ctx < 8) {
        FT_LOG_E("a context of %d tokens is too small to score (at least 8)", n_ctx);
        return FT_EINVAL;
    }
    if (!in->base_file && n_tokens < 2 * (size_t)n_ctx) {
        FT_LOG_E("the text has %zu tokens: a context of %d needs at least %d (two windows)", n_tokens, n_ctx,
                 2 * n_ctx);
        return FT_EINVAL;
    }
    int32_t n_chunk = (int32_t)FT_MIN(n_tokens / (size_t)n_ctx, (size_t)INT32_MAX);
    if (cfg->n_chunks > 0 && cfg->n_chunks < n_chunk)
        n_chunk = cfg->n_chunks;
    const int32_t first = n_ctx / 2, n_score = n_ctx - 1 - first;

    int32_t n_batch = cfg->n_batch > 0 ? cfg->n_batch : n_ctx;
    n_batch = FT_MIN(n_batch, FT_MAX_BATCH);
    int32_t n_seq = n_batch >= n_ctx ? n_batch / n_ctx : 1;
    n_seq = FT_MIN(n_seq, n_chunk);
    const int32_t step = n_batch >= n_ctx ? n_ctx : n_batch; /* tokens of a window per call */
    const int32_t n_calls = (n_ctx + step - 1) / step;
    const int32_t rows_cap = n_seq * FT_MIN(step, n_score);
    const size_t nv = ft_logprob_row_len(n_vocab);
    const bool add_bos = ft_tokenizer_add_bos(tk) && ft_tokenizer_bos(tk) >= 0;
    const int32_t bos = ft_tokenizer_bos(tk);
    const bool with_base = in->base_model || in->base_file;

    struct ft_kv_cache *kv = NULL, *kv_base = NULL;
    struct ft_threadpool *pool = NULL;
    struct ft_atomic_file af;
    bool saving = false;
    int32_t *b_tok = NULL, *b_pos = NULL, *b_seq = NULL;
    bool *b_want = NULL;
    struct eval_row *rows = NULL;
    float *logits = NULL, *base_logits = NULL, *scratch = NULL;
    uint16_t *save_rows = NULL, *base_raw = NULL;
    struct ft_ppl_score *scores = NULL;
    int rc;

    if ((rc = ft_kv_cache_new(m, n_ctx, n_seq, &kv)))
        goto done;
    if (in->base_model && (rc = ft_kv_cache_new(in->base_model, n_ctx, n_seq, &kv_base)))
        goto done;
    if ((rc = ft_threadpool_new(cfg->n_threads, &pool)))
        goto done;
    const int nth = ft_threadpool_n_threads(pool);
    const size_t cap_tok = (size_t)n_seq * (size_t)step, lrows = (size_t)rows_cap * (size_t)n_vocab;
    b_tok = malloc(sizeof(int32_t) * cap_tok);
    b_pos = malloc(sizeof(int32_t) * cap_tok);
    b_seq = malloc(sizeof(int32_t) * cap_tok);
    b_want = malloc(sizeof(bool) * cap_tok);
    rows = malloc(sizeof(*rows) * (size_t)rows_cap);
    scores = malloc(sizeof(*scores) * (size_t)rows_cap);
    logits = malloc(sizeof(float) * lrows);
    scratch = malloc(sizeof(float) * (size_t)nth * (size_t)n_vocab);
    if (in->base_model)
        base_logits = malloc(sizeof(float) * lrows);
    if (in->base_file)
        base_raw = malloc(sizeof(uint16_t) * nv * (size_t)rows_cap);
    if (in->save_path)
        save_rows = malloc(sizeof(uint16_t) * nv * (size_t)rows_cap);
    if (with_base) {
        out->kld_values = malloc(sizeof(float) * (size_t)n_chunk * (size_t)n_score);
        out->p_diff_values = malloc(sizeof(float) * (size_t)n_chunk * (size_t)n_score);
    }
    if (!b_tok || !b_pos || !b_seq || !b_want || !rows || !scores || !logits || !scratch ||
        (in->base_model && !base_logits) || (in->base_file && !base_raw) || (in->save_path && !save_rows) ||
        (with_base && (!out->kld_values || !out->p_diff_values))) {
        FT_LOG_E("out of memory (%d rows of %d logits)", rows_cap, n_vocab);
        rc = FT_ENOMEM;
        goto done;
    }
    if (in->save_path) {
        rc = ft_logprob_writer_open(&af, in->save_path, n_ctx, n_vocab, n_chunk, tokens);
        saving = true;
        if (rc)
            goto done;
    }

    for (int32_t c0 = 0; c0 < n_chunk; c0 += n_seq) {
        const int32_t ns = FT_MIN(n_seq, n_chunk - c0);
        for (int32_t s = 0; s < ns; s++) {
            ft_kv_cache_seq_truncate(kv, s, 0);
            if (kv_base)
                ft_kv_cache_seq_truncate(kv_base, s, 0);
        }
        for (int32_t j = 0; j < n_calls; j++) {
            const int32_t p0 = j * step, len = FT_MIN(step, n_ctx - p0);
            int32_t nb = 0, nr = 0;
            for (int32_t s = 0; s < ns; s++) {
                const int32_t *w = tokens + (size_t)(c0 + s) * (size_t)n_ctx;
                for (int32_t k = 0; k < len; k++) {
                    const int32_t p = p0 + k;
                    b_tok[nb] = p == 0 && add_bos ? bos : w[p];
                    b_pos[nb] = p;
                    b_seq[nb] = s;
                    b_want[nb] = p >= first && p <= n_ctx - 2;
                    if (b_want[nb])
                        rows[nr++] = (struct eval_row){c0 + s, p, w[p + 1]};
                    nb++;
                }
            }
            struct ft_batch b = {.n_tokens = nb, .token = b_tok, .pos = b_pos, .seq_id = b_seq, .want_logits = b_want};
            if ((rc = ft_model_forward(m, kv, &b, logits)))
                goto done;
            if (in->base_model && (rc = ft_model_forward(in->base_model, kv_base, &b, base_logits)))
                goto done;
            if (nr == 0)
                continue;
            for (int32_t r = 0; in->base_file && r < nr; r++)
                if ((rc = ft_logprob_file_read_raw(in->base_file, rows[r].chunk, rows[r].pos - first,
                                                   base_raw + (size_t)r * nv)))
                    goto done;
            struct score_task t = {.n_vocab = n_vocab, .first = first, .n_rows = nr, .nv = nv, .rows = rows,
                                   .logits = logits, .base_logits = base_logits, .base_raw = base_raw,
                                   .save = save_rows, .scratch = scratch, .scores = scores};
            ft_threadpool_run(pool, score_rows, &t);
            for (int32_t r = 0; r < nr; r++) {
                if (with_base) {
                    out->kld_values[out->acc.count] = (float)scores[r].kld;
                    out->p_diff_values[out->acc.count] = (float)scores[r].p_diff;
                }
                ft_ppl_acc_add(&out->acc, &scores[r]);
                if (saving && (rc = ft_atomic_file_write(&af, save_rows + (size_t)r * nv, nv * sizeof(uint16_t))))
                    goto done;
                if (rows[r].pos == n_ctx - 2 && in->on_chunk)
                    in->on_chunk(in->ud, rows[r].chunk + 1, n_chunk, &out->acc);
            }
        }
    }
    if (saving) {
        saving = false;
        if ((rc = ft_atomic_file_commit(&af)))
            goto done;
    }
    out->n_ctx = n_ctx;
    out->n_chunk = n_chunk;
    rc = 0;

done:
    if (saving)
        ft_atomic_file_abort(&af);
    if (rc)
        ft_ppl_result_free(out);
    free(b_tok);
    free(b_pos);
    free(b_seq);
    free(b_want);
    free(rows);
    free(scores);
    free(logits);
    free(base_logits);
    free(scratch);
    free(base_raw);
    free(save_rows);
    ft_threadpool_free(pool);
    ft_kv_cache_free(kv);
    ft_kv_cache_free(kv_base);
    return rc;
}
