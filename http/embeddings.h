/* POST /v1/embeddings: parsing and validating the request, turning its
 * inputs into the scheduler's embeddings job (engine/include/ft/scheduler.h), and
 * the OpenAI response ({"object": "list", "data": [{"object": "embedding",
 * "index", "embedding"}], "model", "usage"}), float or base64.
 *
 * What an embedding is here: the final hidden states of the input's tokens
 * (after the output norm, before the LM head) pooled as the GGUF's
 * <arch>.pooling_type says (llama.cpp's numbering: 1 mean, 2 cls = the
 * first token's, 3 last), mean when the key is absent -- for a causal LM,
 * the average of every token's final hidden state, BOS included, which is
 * what llama.cpp computes with --embeddings --pooling mean -- and then
 * L2-normalized, as llama-server does. A model whose key says none (0:
 * per-token vectors) or rank (4) has no single vector per input: 400. */
#ifndef FT_HTTP_EMBEDDINGS_H
#define FT_HTTP_EMBEDDINGS_H

#include "request_parse.h"

#include "ft/metrics.h"
#include "ft/scheduler.h"
#include "ft/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

/* OpenAI's bounds: at most 2048 inputs, and 300,000 tokens summed over them. */
#define FT_EMBD_MAX_INPUTS 2048
#define FT_EMBD_MAX_TOTAL_TOKENS 300000

struct ft_embd_request {
    char *model;             /* NULL when absent */
    int32_t n_inputs;
    char **texts;            /* string inputs (n_inputs), or NULL for token-id inputs */
    int32_t *tokens;         /* every input's tokens, flat: input i is tokens[offs[i] .. offs[i + 1]) */
    int32_t *offs;           /* n_inputs + 1 */
    bool base64;             /* encoding_format "base64": little-endian float32, as OpenAI's */
    int32_t dimensions;      /* 0: not given */
    int performance_metrics; /* -1 not given, 0 false, 1 true */
    int32_t n_embd;          /* set by ft_embd_prepare */
    float *out;              /* (n_inputs, n_embd): the scheduler's pooled vectors */
    struct ft_embd_job job;
};

/* Parse body[0..len) (every field hostile: types, counts, token ids in
 * 0..n_vocab-1, no empty input). Returns 0, or -1 with *err filled (and
 * *out freed). No model needed, so the fuzzer can run it. */
int ft_embd_parse(const char *body, size_t len, int32_t n_vocab, struct ft_embd_request *out /* OUT */,
                  struct ft_api_error *err /* OUT */);

/* Check `dimensions` against n_embd and the pooling type (<arch>.pooling_type,
 * -1 when absent: mean), tokenize text inputs (BOS/EOS as the vocabulary
 * asks, special-token text parsed, as llama-server does), bound every input
 * to n_ctx tokens and the sum to FT_EMBD_MAX_TOTAL_TOKENS, and fill r->job
 * for ft_scheduler_submit. 0, or -1 with a 400 in *err. */
int ft_embd_prepare(struct ft_embd_request *r, const struct ft_tokenizer *tok, int32_t n_ctx, int32_t n_embd,
                    int32_t pooling_type, struct ft_api_error *err /* OUT */);

/* Whether every pooled vector is finite (JSON has no NaN; the server
 * answers 500 otherwise). */
bool ft_embd_finite(const struct ft_embd_request *r);

/* The response body after the job is done: every vector L2-normalized.
 * usage's prompt_tokens (= total_tokens) sums the inputs' tokens; metrics
 * (NULL: not asked for) gets the engine's queue, prefill and total times.
 * malloc'd JSON, NULL on allocation failure. */
char *ft_embd_response(const struct ft_embd_request *r, const char *model, const struct ft_request_metrics *m,
                       bool with_metrics);

/* Frees what r holds and zeroes it (accepts NULL and a zeroed struct); r itself is the caller's. */
void ft_embd_request_free(struct ft_embd_request *r);

#endif
