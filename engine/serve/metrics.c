/* Per-request metrics from raw stamps. Definitions: docs/architecture.md,
 * Metrics contract. */
#include "ft/metrics.h"
#include "ft/clock.h"
#include "ft/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ft_request_timing_init(struct ft_request_timing *t) { memset(t, 0, sizeof(*t)); }

void ft_request_timing_free(struct ft_request_timing *t) {
    if (!t)
        return;
    free(t->token_ready);
    t->token_ready = NULL;
    t->n_tokens = t->cap_tokens = 0;
}

int ft_request_timing_token(struct ft_request_timing *t, uint64_t now) {
    if (t->n_tokens == t->cap_tokens) {
        int32_t cap = t->cap_tokens ? t->cap_tokens * 2 : 64;
        uint64_t *p = realloc(t->token_ready, sizeof(uint64_t) * (size_t)cap);
        if (!p)
            return FT_ENOMEM;
        t->token_ready = p;
        t->cap_tokens = cap;
    }
    t->token_ready[t->n_tokens++] = now;
    return FT_OK;
}

static double ms_between(uint64_t a, uint64_t b) { return b > a ? ft_clock_ticks_to_ms(b - a) : 0.0; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0..n). */
static double percentile(const double *v, int32_t n, double q) {
    int32_t rank = (int32_t)((q * n) + 0.999999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}

bool ft_request_timing_is_gap(const struct ft_request_timing *t, int32_t i) {
    if (i <= 0 || i >= t->n_tokens)
        return false;
    if (t->n_choices <= 1)
        return true;
    int32_t start = 0;
    for (int32_t c = 0; c < t->n_choices && c < FT_MAX_CHOICES; c++) {
        if (i == start)
            return false;
        start += t->choice_tokens[c];
    }
    return true;
}

void ft_metrics_compute(const struct ft_request_timing *t, struct ft_request_metrics *m) {
    memset(m, 0, sizeof(*m));
    m->prompt_tokens = t->prompt_tokens;
    m->cached_prompt_tokens = t->cached_prompt_tokens;
    m->prefill_tokens = t->prompt_tokens - t->cached_prompt_tokens;
    m->completion_tokens = t->n_tokens;
    m->queue_time_ms = ms_between(t->received, t->admitted);
    m->prefill_time_ms = ms_between(t->prefill_start, t->prefill_end);
    m->prefill_tokens_per_second = (m->prefill_tokens > 0 && m->prefill_time_ms > 0)
                                       ? m->prefill_tokens / (m->prefill_time_ms / 1000.0)
                                       : -1.0;
    /* First and last stamp of any choice; one sequence is one choice. */
    int32_t n_seq = 0, start = 0;
    uint64_t first = UINT64_MAX, last = 0;
    const int32_t n_choices = t->n_choices > 1 ? FT_MIN(t->n_choices, FT_MAX_CHOICES) : 1;
    for (int32_t c = 0; c < n_choices; c++) {
        const int32_t n = n_choices == 1 ? t->n_tokens : FT_MIN(t->choice_tokens[c], t->n_tokens - start);
        if (n > 0) {
            n_seq++;
            first = FT_MIN(first, t->token_ready[start]);
            last = FT_MAX(last, t->token_ready[start + n - 1]);
        }
        start += FT_MAX(n, 0);
    }
    m->decode_tokens = t->n_tokens - n_seq;
    if (n_seq) {
        m->ttft_ms = ms_between(t->received, first);
        m->decode_time_ms = ms_between(first, last);
    }
    m->decode_tokens_per_second = (m->decode_tokens > 0 && m->decode_time_ms > 0)
                                      ? m->decode_tokens / (m->decode_time_ms / 1000.0)
                                      : -1.0;
    if (m->decode_tokens > 0) {
        double *gaps = malloc(sizeof(double) * (size_t)m->decode_tokens);
        if (gaps) {
            int32_t n = 0;
            for (int32_t i = 1; i < t->n_tokens && n < m->decode_tokens; i++)
                if (ft_request_timing_is_gap(t, i))
                    gaps[n++] = ms_between(t->token_ready[i - 1], t->token_ready[i]);
            qsort(gaps, (size_t)n, sizeof(double), cmp_double);
            if (n) {
                m->inter_token_latency_ms.p50 = percentile(gaps, n, 0.50);
                m->inter_token_latency_ms.p90 = percentile(gaps, n, 0.90);
                m->inter_token_latency_ms.p99 = percentile(gaps, n, 0.99);
                m->inter_token_latency_ms.max = gaps[n - 1];
            }
            free(gaps);
        }
    }
    m->total_time_ms = ms_between(t->received, t->done);
}

static void fmt_rate(char *buf, size_t cap, double v) {
    if (v < 0)
        snprintf(buf, cap, "n/a");
    else
        snprintf(buf, cap, "%.2f", v);
}

int ft_metrics_format_text(const struct ft_request_metrics *m, char *buf, size_t cap) {
    char pre[32], dec[32];
    fmt_rate(pre, sizeof(pre), m->prefill_tokens_per_second);
    fmt_rate(dec, sizeof(dec), m->decode_tokens_per_second);
    return snprintf(buf, cap,
                    "prompt tokens:      %d (%d cached, %d computed)\n"
                    "generated tokens:   %d\n"
                    "time to first token: %.2f ms\n"
                    "prefill:            %.2f ms, %s tokens/s\n"
                    "decode:             %.2f ms, %s tokens/s (%d tokens)\n"
                    "inter-token latency: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n"
                    "total:              %.2f ms\n",
                    m->prompt_tokens, m->cached_prompt_tokens, m->prefill_tokens, m->completion_tokens,
                    m->ttft_ms, m->prefill_time_ms, pre, m->decode_time_ms, dec, m->decode_tokens,
                    m->inter_token_latency_ms.p50, m->inter_token_latency_ms.p90,
                    m->inter_token_latency_ms.p99, m->inter_token_latency_ms.max, m->total_time_ms);
}
