/* Token sampling: logit bias, repetition/presence/frequency penalties,
 * top-k, locally typical sampling, top-p, min-p and temperature, applied in
 * llama.cpp's default order (logit bias -> penalties -> top-k -> typical ->
 * top-p -> min-p -> temperature -> draw), then a draw from a seeded
 * generator, so the same seed and settings give the same tokens.
 * temperature <= 0 means greedy: the argmax after bias and penalties (and,
 * with typical_p < 1, among the typical set, as llama.cpp's chain does). */
#ifndef FT_SAMPLER_H
#define FT_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

/* One entry of OpenAI's logit_bias: added to the token's logit before
 * sampling; -INFINITY bans it (llama.cpp's `false`). */
struct ft_logit_bias {
    int32_t token;
    float bias;
};

#define FT_SAMPLER_MAX_LOGIT_BIAS 4096

struct ft_sampler_params {
    float temperature;      /* <= 0: greedy */
    int32_t top_k;          /* <= 0: off */
    float top_p;            /* >= 1: off */
    float min_p;            /* <= 0: off */
    float repeat_penalty;   /* 1: off */
    int32_t repeat_last_n;  /* window for all penalties; 0: off, -1: whole history */
    float presence_penalty; /* 0: off */
    float frequency_penalty;/* 0: off */
    float typical_p;        /* locally typical sampling (Meister et al.); >= 1: off */
    /* Entries applied in order (a token given twice gets both); copied by
     * ft_sampler_new, at most FT_SAMPLER_MAX_LOGIT_BIAS, ids < n_vocab. */
    const struct ft_logit_bias *logit_bias;
    int32_t n_logit_bias;
    uint64_t seed;
};

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05,
 * penalties off, last-n 64; seed must be set by the caller. */
struct ft_sampler_params ft_sampler_default_params(void);

/* Validate ranges; FT_EINVAL with a log line naming the field. */
int ft_sampler_params_check(const struct ft_sampler_params *p);

struct ft_sampler;

int ft_sampler_new(const struct ft_sampler_params *p, int32_t n_vocab, struct ft_sampler **out);
void ft_sampler_free(struct ft_sampler *s); /* accepts NULL */
/* Record a token in the penalty history (prompt tokens and sampled ones). */
void ft_sampler_accept(struct ft_sampler *s, int32_t token);
/* Pick the next token from n_vocab logits (not modified). */
int32_t ft_sampler_sample(struct ft_sampler *s, const float *logits);

#endif
