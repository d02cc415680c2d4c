/* Prometheus exposition of the server's aggregates (http/prometheus.h).
 * Base units (seconds), `_total` on counters, cumulative histogram buckets. */
#include "prometheus.h"

#include "ft/clock.h"
#include "ft/common.h"

#include <event2/buffer.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Latencies a user feels (TTFT, queueing, token gaps), and whole phases. */
static const double k_latency_s[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                     0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
static const double k_phase_s[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};

#define MAX_BUCKETS 16

struct histogram {
    const char *name, *help;
    const double *bounds;
    int n_bounds;
    uint64_t counts[MAX_BUCKETS + 1]; /* per bucket, not cumulative; last is +Inf */
    double sum;
    uint64_t count;
};

static const char *const k_endpoints[] = {"/v1/chat/completions", "/v1/completions", "/v1/models",
                                          "/health", "/metrics", "/v1/embeddings", "/tokenize", "/detokenize",
                                          "other"};
#define N_ENDPOINTS ((int)FT_ARRAY_LEN(k_endpoints))
#define MAX_STATUS_ROWS 128

struct status_row {
    int endpoint;
    int status;
    uint64_t n;
};

enum { H_TTFT, H_ITL, H_QUEUE, H_PREFILL, H_DECODE, H_DURATION, N_HIST };

struct ft_prom {
    struct histogram h[N_HIST];
    struct status_row rows[MAX_STATUS_ROWS];
    int n_rows;
    uint64_t prompt_tokens, cached_tokens, generation_tokens;
};

static void hist_init(struct histogram *h, const char *name, const char *help, const double *b, int n) {
    h->name = name;
    h->help = help;
    h->bounds = b;
    h->n_bounds = n;
}

struct ft_prom *ft_prom_new(void) {
    struct ft_prom *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    _Static_assert(FT_ARRAY_LEN(k_latency_s) <= MAX_BUCKETS && FT_ARRAY_LEN(k_phase_s) <= MAX_BUCKETS,
                   "bucket table too long");
    hist_init(&p->h[H_TTFT], "ft_time_to_first_token_seconds", "Time from request received to first token.",
              k_latency_s, (int)FT_ARRAY_LEN(k_latency_s));
    hist_init(&p->h[H_ITL], "ft_inter_token_latency_seconds", "Gap between consecutive tokens of a request.",
              k_latency_s, (int)FT_ARRAY_LEN(k_latency_s));
    hist_init(&p->h[H_QUEUE], "ft_request_queue_time_seconds", "Time from request received to admitted.",
              k_latency_s, (int)FT_ARRAY_LEN(k_latency_s));
    hist_init(&p->h[H_PREFILL], "ft_request_prefill_time_seconds", "Prefill forward passes of a request.",
              k_phase_s, (int)FT_ARRAY_LEN(k_phase_s));
    hist_init(&p->h[H_DECODE], "ft_request_decode_time_seconds", "First to last token of a request.", k_phase_s,
              (int)FT_ARRAY_LEN(k_phase_s));
    hist_init(&p->h[H_DURATION], "ft_request_duration_seconds", "Request received to response complete.",
              k_phase_s, (int)FT_ARRAY_LEN(k_phase_s));
    return p;
}

void ft_prom_free(struct ft_prom *p) { free(p); }

static void observe(struct histogram *h, double v) {
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void ft_prom_count_request(struct ft_prom *p, const char *endpoint, int status) {
    int ep = N_ENDPOINTS - 1;
    for (int i = 0; i < N_ENDPOINTS - 1; i++)
        if (!strcmp(endpoint, k_endpoints[i]))
            ep = i;
    for (int i = 0; i < p->n_rows; i++) {
        if (p->rows[i].endpoint == ep && p->rows[i].status == status) {
            p->rows[i].n++;
            return;
        }
    }
    /* Statuses come from a small fixed set; the bound only guards against a bug. */
    if (p->n_rows == MAX_STATUS_ROWS)
        return;
    p->rows[p->n_rows++] = (struct status_row){ep, status, 1};
}

void ft_prom_observe(struct ft_prom *p, const struct ft_request_timing *t, const struct ft_request_metrics *m) {
    p->prompt_tokens += (uint64_t)m->prompt_tokens;
    p->cached_tokens += (uint64_t)m->cached_prompt_tokens;
    p->generation_tokens += (uint64_t)m->completion_tokens;
    observe(&p->h[H_QUEUE], m->queue_time_ms / 1e3);
    observe(&p->h[H_DURATION], m->total_time_ms / 1e3);
    if (t->prefill_end > t->prefill_start)
        observe(&p->h[H_PREFILL], m->prefill_time_ms / 1e3);
    if (m->completion_tokens > 0) {
        observe(&p->h[H_TTFT], m->ttft_ms / 1e3);
        observe(&p->h[H_DECODE], m->decode_time_ms / 1e3);
    }
    for (int32_t i = 1; i < t->n_tokens; i++) {
        uint64_t a = t->token_ready[i - 1], b = t->token_ready[i];
        observe(&p->h[H_ITL], b > a ? ft_clock_ticks_to_ns(b - a) * 1e-9 : 0.0);
    }
}

static void render_hist(const struct histogram *h, struct evbuffer *out) {
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        evbuffer_add_printf(out, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    evbuffer_add_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n", h->name, (unsigned long long)cum);
    evbuffer_add_printf(out, "%s_sum %.9g\n%s_count %llu\n", h->name, h->sum, h->name, (unsigned long long)h->count);
}

static void render_counter(struct evbuffer *out, const char *name, const char *help, uint64_t v) {
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                        (unsigned long long)v);
}

static void render_gauge(struct evbuffer *out, const char *name, const char *help, double v) {
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s gauge\n%s %.9g\n", name, help, name, name, v);
}

void ft_prom_render(const struct ft_prom *p, const struct ft_scheduler_stats *stats, struct evbuffer *out) {
    for (int i = 0; i < N_HIST; i++)
        render_hist(&p->h[i], out);
    evbuffer_add_printf(out, "# HELP ft_requests_total HTTP requests by endpoint and status.\n"
                             "# TYPE ft_requests_total counter\n");
    for (int i = 0; i < p->n_rows; i++)
        evbuffer_add_printf(out, "ft_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                            k_endpoints[p->rows[i].endpoint], p->rows[i].status, (unsigned long long)p->rows[i].n);
    render_counter(out, "ft_prompt_tokens_total", "Prompt tokens of finished requests.", p->prompt_tokens);
    render_counter(out, "ft_prompt_tokens_cached_total", "Prompt tokens whose KV came from the prefix cache.",
                   p->cached_tokens);
    render_counter(out, "ft_generation_tokens_total", "Completion tokens generated.", p->generation_tokens);
    render_gauge(out, "ft_requests_running", "Requests generating now.", stats ? stats->running : 0);
    render_gauge(out, "ft_requests_waiting", "Requests queued for the engine.", stats ? stats->waiting : 0);
    render_gauge(out, "ft_kv_cache_usage_ratio", "Used KV cache blocks over all blocks.", stats ? stats->kv_usage : 0);
}
