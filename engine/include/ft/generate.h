/* Generating one completion: the per-sequence state that turns logits into
 * tokens and released text (sampler, streaming detokenizer, stop strings,
 * limits, timing stamps), and a driver that runs one sequence through
 * prefill and decode on its own.
 *
 * The split lets `ft run` and the server's scheduler share everything but the
 * forward passes: a scheduler that batches many sequences
 * (docs/architecture.md, Scheduler) calls ft_gen_step() per sequence with
 * that sequence's row of logits, while ft_generate() is the batch of one.
 *
 * Timing (docs/architecture.md, Metrics contract): ft_gen_step() stamps each
 * token as ready and ft_generate() stamps the prefill; `received`, `admitted`
 * and `done` belong to whoever owns the request. */
#ifndef FT_GENERATE_H
#define FT_GENERATE_H

#include "ft/grammar.h"
#include "ft/logprobs.h"
#include "ft/metrics.h"
#include "ft/model.h"
#include "ft/sampler.h"
#include "ft/stop_strings.h"
#include "ft/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ft_finish_reason {
    FT_FINISH_NONE = 0,  /* still generating */
    FT_FINISH_STOP,      /* end-of-generation token or a stop string */
    FT_FINISH_LENGTH,    /* max_tokens reached or the context is full */
    FT_FINISH_CANCELLED, /* the owner asked to stop (client gone) */
    FT_FINISH_ERROR,     /* a forward pass failed */
};

const char *ft_finish_reason_name(enum ft_finish_reason r); /* "stop", "length", ... */

struct ft_gen_params {
    struct ft_sampler_params sampling;
    int32_t max_tokens;       /* completion tokens at most; <= 0: until EOG or the context is full */
    const char *const *stops; /* kept by pointer: the caller keeps them alive */
    int n_stops;
    bool ignore_eos;          /* keep going after an end-of-generation token */
    bool logprobs;            /* compute each token's log-probability (engine/include/ft/logprobs.h) */
    int32_t top_logprobs;     /* with logprobs: also the most likely tokens, 0 .. FT_MAX_TOP_LOGPROBS */
    /* Structured output: tokens are masked by this grammar and generation
     * stops when it is complete and nothing may follow. Both borrowed; the
     * vocabulary trie is built once per tokenizer (ft_grammar_vocab_new). */
    const struct ft_grammar *grammar;
    const struct ft_grammar_vocab *grammar_vocab;
};

/* One sequence's generation. Owned by one thread at a time. */
struct ft_gen {
    const struct ft_tokenizer *tok;
    struct ft_sampler *sampler;
    struct ft_detok detok;
    struct ft_stop_matcher stop;
    int32_t max_tokens;
    int32_t n_ctx;      /* context of the sequence: generation stops when it is full */
    int32_t n_vocab;
    bool ignore_eos;
    bool logprobs;
    int32_t top_logprobs;
    struct ft_token_logprob lp; /* with logprobs: the last step's token (valid until the next step) */
    int32_t n_past;     /* tokens whose KV is in the sequence */
    int32_t *tokens;    /* sampled tokens, in order */
    int32_t n_tokens;
    int32_t cap_tokens;
    enum ft_finish_reason finish;
    struct ft_request_timing timing;
    struct ft_grammar_matcher *grammar; /* NULL: unconstrained */
    float *masked;      /* (n_vocab) the logits with the grammar's mask applied */
    char *out;          /* text released by the last step (NUL-terminated) */
    size_t out_len;
    size_t out_cap;
};

/* FT_EINVAL for bad sampling parameters (ft_last_error names the field);
 * FT_ENOMEM. */
int ft_gen_init(struct ft_gen *g, const struct ft_tokenizer *tok, int32_t n_vocab, int32_t n_ctx,
                const struct ft_gen_params *p);
void ft_gen_free(struct ft_gen *g); /* accepts a zeroed or freed struct */

/* The prompt, for the penalties' history. */
void ft_gen_accept_prompt(struct ft_gen *g, const int32_t *tokens, int32_t n);

/* Sample the next token from `logits` (the row after the last evaluated
 * token), stamp it ready, and release the text it completes: on return
 * g->out[0..g->out_len) is text that is safe to send (whole UTF-8
 * characters, never part of a stop string), valid until the next call.
 * When g->finish is set the remaining text has been flushed; otherwise the
 * token g->tokens[g->n_tokens - 1] must be evaluated at position g->n_past
 * before the next step. With p->logprobs, g->lp describes the sampled token.
 * FT_ENOMEM on allocation failure. */
int ft_gen_step(struct ft_gen *g, const float *logits);

/* Called after every sampled token with the text it released (possibly
 * empty); return true to cancel the generation. */
typedef bool (*ft_gen_step_fn)(void *ud, const struct ft_gen *g);

/* Run one sequence to completion: prefill prompt[n_cached..n_prompt) on
 * sequence `seq`, whose KV already holds prompt[0..n_cached) (n_cached ==
 * ft_kv_cache_seq_len(kv, seq) < n_prompt), in passes of at most n_batch
 * tokens, then decode until g->finish is set. Fills timing.prompt_tokens,
 * cached_prompt_tokens, prefill_start and prefill_end. `logits` holds
 * n_vocab floats. Returns the forward pass's error (g->finish ==
 * FT_FINISH_ERROR) or FT_OK. */
int ft_generate(struct ft_model *m, struct ft_kv_cache *kv, int32_t seq, const int32_t *prompt,
                int32_t n_prompt, int32_t n_batch, float *logits, struct ft_gen *g, ft_gen_step_fn on_step,
                void *ud);

#endif
