/* Perplexity and KL divergence, with the definitions of llama.cpp's
 * perplexity tool (tools/perplexity/perplexity.cpp), so the numbers compare
 * with the ones users quote:
 *
 *   - The text is tokenized once (BOS first when the vocabulary adds one) and
 *     cut into non-overlapping windows ("chunks") of n_ctx tokens; the last
 *     partial window is dropped. Each window is evaluated from an empty KV
 *     cache with its first token replaced by BOS (when the vocabulary adds
 *     one), and only its second half is scored: the logits at positions
 *     n_ctx/2 .. n_ctx-2 predict the next token, so every scored token has at
 *     least n_ctx/2 tokens of context. n_ctx - 1 - n_ctx/2 tokens per window.
 *   - PPL = exp(mean NLL), ± PPL * (standard error of the mean NLL).
 *   - Against a base distribution P (the base model's) and the evaluated
 *     model's Q at the same position: KLD = sum_i P_i (ln P_i - ln Q_i);
 *     "same top" = both have the same most likely token (top-1 agreement);
 *     Δp = Q(correct token) - P(correct token); ln(PPL(Q)/PPL(base)) with
 *     its uncertainty from the correlation of the two NLLs; percentiles.
 *
 * Base log-probabilities can come from a model evaluated alongside (exact)
 * or from a file written by an earlier run, in llama.cpp's
 * --kl-divergence-base format (perplexity_logits.c), which stores each
 * position's log-probabilities as 16-bit steps over the top 16 nats: exact
 * enough for KLD down to ~1e-4, and half the size of floats. As in
 * llama.cpp, the KLD from such a file sums only the tokens whose stored
 * log-probability is above -16. Files written by llama-perplexity
 * --kl-divergence-base can be read, and ours can be read by it.
 */
#ifndef FT_PERPLEXITY_H
#define FT_PERPLEXITY_H

#include "ft/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- one position ---------------------------------------------------------- */

/* uint16 elements of one stored row: scale and offset (two floats), then
 * n_vocab steps, padded to an even count. */
static inline size_t ft_logprob_row_len(int32_t n_vocab) { return 2 * (((size_t)n_vocab + 1) / 2) + 4; }

/* Store a row of logits as llama.cpp does; returns -ln softmax(logits)[tok]. */
double ft_logprob_encode(const float *logits, int32_t n_vocab, int32_t tok, uint16_t *row);
/* Decode a stored row into log-probabilities. FT_EFORMAT (not logged: the
 * caller names the file) when its scale or offset is not a value an encoder
 * can write (hostile file). */
int ft_logprob_decode(const uint16_t *row, int32_t n_vocab, float *logp);
/* Exact log-softmax of a row of logits. */
void ft_log_softmax(const float *logits, int32_t n_vocab, float *logp);

struct ft_ppl_score {
    double nll;      /* -ln Q(tok) */
    double nll_base; /* -ln P(tok) */
    double kld;      /* sum_i P_i (ln P_i - ln Q_i) over i with ln P_i > cutoff */
    double p_diff;   /* Q(tok) - P(tok) */
    bool same_top;
};

/* Score the logits of one position for target `tok`. With base_logp (ln P,
 * n_vocab values) also the comparison; terms with ln P_i <= base_cutoff are
 * left out of the KLD (-INFINITY for none; -16 for llama.cpp's files). */
void ft_ppl_score_row(const float *logits, int32_t n_vocab, int32_t tok, const float *base_logp, float base_cutoff,
                      struct ft_ppl_score *out);

/* Running sums over scored positions (llama.cpp's kl_divergence_result). */
struct ft_ppl_acc {
    int64_t count;
    double sum_nll, sum_nll2;
    double sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2;
    double sum_p_diff, sum_p_diff2, sum_p_diff4, max_p_diff;
    int64_t n_same_top;
};

void ft_ppl_acc_add(struct ft_ppl_acc *a, const struct ft_ppl_score *s);

struct ft_ppl_quantiles {
    double max, p99_9, p99, p95, p90, p75, median, p25, p10, p5, p1, p0_1, min;
};

struct ft_ppl_stats {
    int64_t count;
    double ppl, ppl_err; /* of the evaluated model */
    bool has_base;
    double ppl_base, ppl_base_err;
    double cor_ln_ppl; /* correlation of ln PPL(Q) and ln PPL(base) */
    double ln_ratio, ln_ratio_err; /* ln(PPL(Q)/PPL(base)) */
    double ratio, ratio_err;       /* PPL(Q)/PPL(base) */
    double diff, diff_err;         /* PPL(Q)-PPL(base) */
    double kld, kld_err;
    struct ft_ppl_quantiles kld_q;
    double dp, dp_err; /* mean Δp */
    struct ft_ppl_quantiles dp_q;
    double dp_rms, dp_rms_err;
    double same_top, same_top_err; /* fractions (0..1) */
};

/* The statistics llama.cpp prints. kld_values/p_diff_values (n each, one
 * per scored position) are sorted in place for the percentiles; NULL skips
 * the percentiles. */
void ft_ppl_stats_compute(const struct ft_ppl_acc *a, bool has_base, float *kld_values, float *p_diff_values,
                          size_t n, struct ft_ppl_stats *out);

/* ---- llama.cpp's log-probability file ------------------------------------
 * "_logits_", u32 n_ctx, i32 n_vocab, i32 n_chunk, i32 tokens[n_chunk *
 * n_ctx] (the windows' tokens before BOS replacement), then for every
 * window its n_ctx - 1 - n_ctx/2 rows of ft_logprob_row_len(n_vocab)
 * uint16 (little-endian). Opening checks every field and the exact file
 * size, and every token id against n_vocab; each row is checked when read. */
struct ft_logprob_file;

int ft_logprob_file_open(const char *path, struct ft_logprob_file **out);
/* The same over a caller-owned buffer (tests, fuzzing). */
int ft_logprob_file_open_buffer(const void *data, size_t size, const char *name, struct ft_logprob_file **out);
void ft_logprob_file_close(struct ft_logprob_file *f); /* accepts NULL */
int32_t ft_logprob_file_n_ctx(const struct ft_logprob_file *f);
int32_t ft_logprob_file_n_vocab(const struct ft_logprob_file *f);
int32_t ft_logprob_file_n_chunk(const struct ft_logprob_file *f);
const int32_t *ft_logprob_file_tokens(const struct ft_logprob_file *f); /* n_chunk * n_ctx */
/* Row k (0 .. n_ctx-2-n_ctx/2) of window `chunk`, decoded into ln P.
 * `tmp` holds ft_logprob_row_len(n_vocab) uint16. Thread-safe. */
int ft_logprob_file_read(struct ft_logprob_file *f, int32_t chunk, int32_t k, uint16_t *tmp, float *logp);

/* ---- evaluation ------------------------------------------------------------ */

struct ft_ppl_config {
    int32_t n_ctx;    /* window; 0 with base_file: the file's */
    int32_t n_batch;  /* tokens per forward call (0: n_ctx); >= n_ctx evaluates
                       * n_batch / n_ctx windows per call as separate sequences */
    int32_t n_chunks; /* at most this many windows (<= 0: all) */
    int n_threads;    /* threads for scoring (<= 0: one per CPU) */
};

struct ft_ppl_inputs {
    struct ft_model *model;
    const int32_t *tokens; /* the tokenized text (unused with base_file) */
    size_t n_tokens;
    struct ft_model *base_model;       /* exact comparison with this model, or NULL */
    struct ft_logprob_file *base_file; /* comparison with saved log-probs (and their tokens), or NULL */
    const char *save_path;             /* write this model's log-probs here (atomically), or NULL */
    /* After each window: its 1-based index, the count, the running sums. */
    void (*on_chunk)(void *ud, int32_t chunk, int32_t n_chunk, const struct ft_ppl_acc *acc);
    void *ud;
};

struct ft_ppl_result {
    struct ft_ppl_acc acc;
    int32_t n_ctx, n_chunk;
    float *kld_values, *p_diff_values; /* acc.count each, with a base; else NULL */
};

/* Run it. FT_EINVAL (logged) for a text shorter than two windows, a base
 * with another vocabulary, a window that does not fit; errors of the
 * forward pass and of the files pass through. Nothing is written to
 * save_path unless the whole run succeeds. */
int ft_perplexity_eval(const struct ft_ppl_inputs *in, const struct ft_ppl_config *cfg, struct ft_ppl_result *out);
void ft_ppl_result_free(struct ft_ppl_result *r); /* accepts NULL */

#endif
