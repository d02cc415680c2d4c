/* Log-probabilities of generated tokens, for the API's `logprobs`.
 *
 * They come from the model's raw distribution: the log-softmax of the
 * logits row the token was sampled from, before penalties, top-k/top-p/
 * min-p and temperature (vLLM's default, `raw_logprobs`). So they do not
 * depend on the sampling settings, and a greedy token's log-probability is
 * the row's largest. One pass finds the maximum, one sums the exponentials
 * (in double), and a bounded heap keeps the k largest logits: nothing sorts
 * the vocabulary, and nothing runs unless a request asks. */
#ifndef FT_LOGPROBS_H
#define FT_LOGPROBS_H

#include <stdint.h>

#define FT_MAX_TOP_LOGPROBS 20

struct ft_token_logprob {
    int32_t token;
    float logprob;
    int32_t n_top;                                /* 0 .. FT_MAX_TOP_LOGPROBS */
    int32_t top_token[FT_MAX_TOP_LOGPROBS];       /* most likely first; ties: lower id first */
    float top_logprob[FT_MAX_TOP_LOGPROBS];
};

/* The log-probability of `token` in logits[0..n_vocab) and the k most
 * likely tokens (k clamped to 0..min(FT_MAX_TOP_LOGPROBS, n_vocab)). */
void ft_logprobs_compute(const float *logits, int32_t n_vocab, int32_t token, int32_t k,
                         struct ft_token_logprob *out /* OUT */);

#endif
