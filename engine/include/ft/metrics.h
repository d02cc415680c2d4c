/* Per-request performance metrics (docs/architecture.md, Metrics contract).
 * The engine fills a struct ft_request_timing with raw clock stamps as the
 * request moves through it; ft_metrics_compute() turns it into the reported
 * fields once, at the end. Every consumer (ft run, the HTTP response, the
 * access log, Prometheus) reads the same struct ft_request_metrics. */
#ifndef FT_METRICS_H
#define FT_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Choices (the API's `n`) of one request at most. */
#define FT_MAX_CHOICES 16

struct ft_request_timing {
    uint64_t received;      /* request received (body parsed) */
    uint64_t admitted;      /* admitted to a batch */
    uint64_t prefill_start; /* first prefill forward pass started */
    uint64_t prefill_end;   /* last prefill forward pass ended */
    uint64_t done;          /* response complete */
    int32_t prompt_tokens;
    int32_t cached_prompt_tokens;
    /* one stamp per completion token, when it was ready */
    uint64_t *token_ready;
    int32_t n_tokens;
    int32_t cap_tokens;
    /* A request with n > 1 choices: token_ready holds choice 0's stamps,
     * then choice 1's, ...; choice_tokens[c] counts choice c's. n_choices
     * 0 or 1: all stamps belong to one sequence. */
    int32_t n_choices;
    int32_t choice_tokens[FT_MAX_CHOICES];
};

struct ft_itl {
    double p50, p90, p99, max;
};

/* Times in milliseconds. Rates are negative when undefined (null in JSON):
 * when the token count or the time is 0. */
struct ft_request_metrics {
    int32_t prompt_tokens;
    int32_t cached_prompt_tokens;
    int32_t prefill_tokens;
    int32_t completion_tokens;
    int32_t decode_tokens;
    double queue_time_ms;
    double ttft_ms;
    double prefill_time_ms;
    double prefill_tokens_per_second;
    double decode_time_ms;
    double decode_tokens_per_second;
    struct ft_itl inter_token_latency_ms; /* all 0 with fewer than 2 tokens */
    double total_time_ms;
};

void ft_request_timing_init(struct ft_request_timing *t);
void ft_request_timing_free(struct ft_request_timing *t);
/* Stamp one completion token as ready now; FT_ENOMEM if it cannot grow. */
int ft_request_timing_token(struct ft_request_timing *t, uint64_t now);

/* Token i > 0 follows token i - 1 of the same choice (a gap between
 * tokens); false for the first token of every choice. */
bool ft_request_timing_is_gap(const struct ft_request_timing *t, int32_t i);

/* With several choices (the metrics contract, docs/architecture.md, applied to the request as a whole):
 * completion_tokens sums them; decode_tokens = completion_tokens - (choices
 * with a token), since each choice's first token comes from the one shared
 * prefill; TTFT runs to the first token of any choice, decode_time from
 * there to the last token of any choice, so decode_tokens_per_second is
 * the request's throughput over all choices; the inter-token latencies are
 * the gaps within each choice. */
void ft_metrics_compute(const struct ft_request_timing *t, struct ft_request_metrics *out);
/* Multi-line human-readable block (ft run). Returns bytes as snprintf. */
int ft_metrics_format_text(const struct ft_request_metrics *m, char *buf, size_t cap);

#endif
