/* Prometheus exposition of the server's aggregates (http/prometheus.h).
 * Base units (seconds), `_total` on counters, cumulative histogram buckets. */
#include "prometheus.h"

#include "ft/clock.h"
#include "ft/common.h"
#include "ft/model.h"

#include <event2/buffer.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Latencies a user feels (TTFT, queueing, token gaps), and whole phases. */
static const double k_latency_s[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                     0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
static const double k_phase_s[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
/* The GenAI semantic conventions' bucket boundaries, each extended past its
 * last one for CPU serving, where a long prompt's first token or a whole
 * request can take minutes. */
static const double k_genai_ttft_s[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                        1,     2.5,   5,    7.5,  10,   20,   40,   80,  160, 320};
static const double k_genai_tpot_s[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                                        0.4,  0.5,   0.75, 1,     2.5, 5,    10};
static const double k_genai_duration_s[] = {0.01, 0.02, 0.04,  0.08,  0.16,  0.32,   0.64,   1.28,  2.56,
                                            5.12, 10.24, 20.48, 40.96, 81.92, 163.84, 327.68, 655.36};

#define MAX_BUCKETS 24

struct histogram {
    const char *name, *help;
    const double *bounds;
    int n_bounds;
    uint64_t counts[MAX_BUCKETS + 1]; /* per bucket, not cumulative; last is +Inf */
    double sum;
    uint64_t count;
};

static const char *const k_endpoints[] = {"/v1/chat/completions", "/v1/completions", "/v1/models",
                                          "/health", "/livez", "/metrics", "/v1/embeddings", "/tokenize",
                                          "/detokenize", "/v1/requests/recent", "other"};
#define N_ENDPOINTS ((int)FT_ARRAY_LEN(k_endpoints))
#define MAX_STATUS_ROWS 128
#define MAX_MODEL_NAME 256

struct status_row {
    int endpoint;
    int status;
    uint64_t n;
};

enum { H_TTFT, H_ITL, H_QUEUE, H_PREFILL, H_DECODE, H_DURATION, N_HIST };
/* gen_ai.operation.name of each generating endpoint. */
static const char *const k_genai_ops[] = {"chat", "text_completion"};
#define N_OPS ((int)FT_ARRAY_LEN(k_genai_ops))
enum { G_TTFT, G_TPOT, G_DURATION, N_GENAI };

struct ft_prom {
    struct histogram h[N_HIST];
    struct histogram genai[N_OPS][N_GENAI];
    struct status_row rows[MAX_STATUS_ROWS];
    int n_rows;
    uint64_t prompt_tokens, cached_tokens, generation_tokens;
    bool vllm_names;
    char model_label[2 * MAX_MODEL_NAME]; /* the model id, escaped for a label value */
};

static void hist_init(struct histogram *h, const char *name, const char *help, const double *b, int n) {
    h->name = name;
    h->help = help;
    h->bounds = b;
    h->n_bounds = n;
}

/* Prometheus label values escape backslash, double quote and newline. */
static void escape_label(const char *in, char *out, size_t cap) {
    size_t j = 0;
    for (size_t i = 0; in[i] && i < MAX_MODEL_NAME && j + 3 < cap; i++) {
        const char c = in[i];
        if (c == '\\' || c == '"' || c == '\n')
            out[j++] = '\\';
        out[j++] = c == '\n' ? 'n' : c;
    }
    out[j] = '\0';
}

#define HIST_INIT(h, name, help, bounds) hist_init(h, name, help, bounds, (int)FT_ARRAY_LEN(bounds))

struct ft_prom *ft_prom_new(const struct ft_prom_config *cfg) {
    struct ft_prom *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    _Static_assert(FT_ARRAY_LEN(k_latency_s) <= MAX_BUCKETS && FT_ARRAY_LEN(k_phase_s) <= MAX_BUCKETS &&
                       FT_ARRAY_LEN(k_genai_ttft_s) <= MAX_BUCKETS && FT_ARRAY_LEN(k_genai_tpot_s) <= MAX_BUCKETS &&
                       FT_ARRAY_LEN(k_genai_duration_s) <= MAX_BUCKETS,
                   "bucket table too long");
    HIST_INIT(&p->h[H_TTFT], "ft_time_to_first_token_seconds", "Time from request received to first token.",
              k_latency_s);
    HIST_INIT(&p->h[H_ITL], "ft_inter_token_latency_seconds", "Gap between consecutive tokens of a request.",
              k_latency_s);
    HIST_INIT(&p->h[H_QUEUE], "ft_request_queue_time_seconds", "Time from request received to admitted.",
              k_latency_s);
    HIST_INIT(&p->h[H_PREFILL], "ft_request_prefill_time_seconds", "Prefill forward passes of a request.",
              k_phase_s);
    HIST_INIT(&p->h[H_DECODE], "ft_request_decode_time_seconds", "First to last token of a request.", k_phase_s);
    HIST_INIT(&p->h[H_DURATION], "ft_request_duration_seconds", "Request received to response complete.",
              k_phase_s);
    for (int op = 0; op < N_OPS; op++) {
        HIST_INIT(&p->genai[op][G_TTFT], "gen_ai_server_time_to_first_token_seconds",
                  "Time to generate the first token (OpenTelemetry gen_ai.server.time_to_first_token).",
                  k_genai_ttft_s);
        HIST_INIT(&p->genai[op][G_TPOT], "gen_ai_server_time_per_output_token_seconds",
                  "Decode time per output token after the first (OpenTelemetry "
                  "gen_ai.server.time_per_output_token).",
                  k_genai_tpot_s);
        HIST_INIT(&p->genai[op][G_DURATION], "gen_ai_server_request_duration_seconds",
                  "Request received to response complete (OpenTelemetry gen_ai.server.request.duration).",
                  k_genai_duration_s);
    }
    p->vllm_names = cfg && cfg->vllm_names;
    escape_label(cfg && cfg->model_name ? cfg->model_name : "", p->model_label, sizeof(p->model_label));
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

void ft_prom_observe(struct ft_prom *p, const char *endpoint, const struct ft_request_timing *t,
                     const struct ft_request_metrics *m) {
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
        if (!ft_request_timing_is_gap(t, i))
            continue; /* the first token of another choice */
        uint64_t a = t->token_ready[i - 1], b = t->token_ready[i];
        observe(&p->h[H_ITL], b > a ? ft_clock_ticks_to_ns(b - a) * 1e-9 : 0.0);
    }
    const int op = endpoint && !strcmp(endpoint, "/v1/completions") ? 1 : 0;
    struct histogram *g = p->genai[op];
    observe(&g[G_DURATION], m->total_time_ms / 1e3);
    if (m->completion_tokens > 0)
        observe(&g[G_TTFT], m->ttft_ms / 1e3);
    if (m->decode_tokens > 0)
        observe(&g[G_TPOT], m->decode_time_ms / 1e3 / m->decode_tokens);
}

static void render_head(struct evbuffer *out, const char *name, const char *help, const char *type) {
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The samples of one histogram, under `name` (NULL: its own) with extra
 * labels ("a=\"x\"," with the trailing comma, or ""). */
static void render_hist_samples(const struct histogram *h, const char *name, const char *labels,
                                struct evbuffer *out) {
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        evbuffer_add_printf(out, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, h->bounds[i],
                            (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    evbuffer_add_printf(out, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
    /* Without labels the sum and count carry no braces. */
    const size_t n = strlen(labels);
    const int nl = n ? (int)n - 1 : 0;
    evbuffer_add_printf(out, "%s_sum%s%.*s%s %.9g\n%s_count%s%.*s%s %llu\n", name, n ? "{" : "", nl, labels,
                        n ? "}" : "", h->sum, name, n ? "{" : "", nl, labels, n ? "}" : "",
                        (unsigned long long)h->count);
}

static void render_hist(const struct histogram *h, const char *name, const char *labels, struct evbuffer *out) {
    render_head(out, name, h->help, "histogram");
    render_hist_samples(h, name, labels, out);
}

static void render_counter(struct evbuffer *out, const char *name, const char *labels, const char *help,
                           uint64_t v) {
    render_head(out, name, help, "counter");
    evbuffer_add_printf(out, "%s%s%s%s %llu\n", name, *labels ? "{" : "", labels, *labels ? "}" : "",
                        (unsigned long long)v);
}

static void render_gauge(struct evbuffer *out, const char *name, const char *labels, const char *help, double v) {
    render_head(out, name, help, "gauge");
    evbuffer_add_printf(out, "%s%s%s%s %.9g\n", name, *labels ? "{" : "", labels, *labels ? "}" : "", v);
}

/* vLLM's names for the same observations and gauges (--metrics-compat vllm). */
static void render_vllm(const struct ft_prom *p, const struct ft_scheduler_stats *stats, struct evbuffer *out) {
    char lb[sizeof(p->model_label) + 32], lbc[sizeof(lb) + 1], info[sizeof(lb) + 96];
    snprintf(lb, sizeof(lb), "model_name=\"%s\"", p->model_label);
    snprintf(lbc, sizeof(lbc), "%s,", lb);
    static const struct {
        int h;
        const char *name;
    } hists[] = {
        {H_TTFT, "vllm:time_to_first_token_seconds"},     {H_ITL, "vllm:time_per_output_token_seconds"},
        {H_ITL, "vllm:inter_token_latency_seconds"},      {H_DURATION, "vllm:e2e_request_latency_seconds"},
        {H_QUEUE, "vllm:request_queue_time_seconds"},     {H_PREFILL, "vllm:request_prefill_time_seconds"},
        {H_DECODE, "vllm:request_decode_time_seconds"},
    };
    for (int i = 0; i < (int)FT_ARRAY_LEN(hists); i++)
        render_hist(&p->h[hists[i].h], hists[i].name, lbc, out);
    render_counter(out, "vllm:prompt_tokens_total", lb, "Prompt tokens of finished requests.", p->prompt_tokens);
    render_counter(out, "vllm:generation_tokens_total", lb, "Completion tokens generated.", p->generation_tokens);
    render_counter(out, "vllm:prefix_cache_queries_total", lb, "Prompt tokens looked up in the prefix cache.",
                   p->prompt_tokens);
    render_counter(out, "vllm:prefix_cache_hits_total", lb, "Prompt tokens found in the prefix cache.",
                   p->cached_tokens);
    render_gauge(out, "vllm:num_requests_running", lb, "Requests generating now.", stats ? stats->running : 0);
    render_gauge(out, "vllm:num_requests_waiting", lb, "Requests queued for the engine.", stats ? stats->waiting : 0);
    render_gauge(out, "vllm:kv_cache_usage_perc", lb, "KV-cache usage; 1 means 100 percent.",
                 stats ? stats->kv_usage : 0);
    /* The name before vLLM 0.10, which older endpoint pickers still read. */
    render_gauge(out, "vllm:gpu_cache_usage_perc", lb, "KV-cache usage; 1 means 100 percent (old name).",
                 stats ? stats->kv_usage : 0);
    snprintf(info, sizeof(info), "%s,block_size=\"%d\",num_gpu_blocks=\"%d\"", lb, FT_KV_BLOCK_TOKENS,
             stats ? stats->kv_blocks_total : 0);
    render_gauge(out, "vllm:cache_config_info", info, "KV-cache configuration (labels); value 1.", 1);
}

void ft_prom_render(const struct ft_prom *p, const struct ft_scheduler_stats *stats, struct evbuffer *out) {
    for (int i = 0; i < N_HIST; i++)
        render_hist(&p->h[i], p->h[i].name, "", out);
    for (int g = 0; g < N_GENAI; g++) {
        render_head(out, p->genai[0][g].name, p->genai[0][g].help, "histogram");
        for (int op = 0; op < N_OPS; op++) {
            char lbc[sizeof(p->model_label) + 96];
            snprintf(lbc, sizeof(lbc), "gen_ai_operation_name=\"%s\",gen_ai_request_model=\"%s\",", k_genai_ops[op],
                     p->model_label);
            render_hist_samples(&p->genai[op][g], p->genai[op][g].name, lbc, out);
        }
    }
    render_head(out, "ft_requests_total", "HTTP requests by endpoint and status.", "counter");
    for (int i = 0; i < p->n_rows; i++)
        evbuffer_add_printf(out, "ft_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                            k_endpoints[p->rows[i].endpoint], p->rows[i].status, (unsigned long long)p->rows[i].n);
    render_counter(out, "ft_prompt_tokens_total", "", "Prompt tokens of finished requests.", p->prompt_tokens);
    render_counter(out, "ft_prompt_tokens_cached_total", "", "Prompt tokens whose KV came from the prefix cache.",
                   p->cached_tokens);
    render_counter(out, "ft_generation_tokens_total", "", "Completion tokens generated.", p->generation_tokens);
    render_gauge(out, "ft_requests_running", "", "Requests generating now.", stats ? stats->running : 0);
    render_gauge(out, "ft_requests_waiting", "", "Requests queued for the engine.", stats ? stats->waiting : 0);
    render_gauge(out, "ft_kv_cache_usage_ratio", "", "Used KV cache blocks over all blocks.",
                 stats ? stats->kv_usage : 0);
    char info[64];
    snprintf(info, sizeof(info), "block_size=\"%d\",num_blocks=\"%d\"", FT_KV_BLOCK_TOKENS,
             stats ? stats->kv_blocks_total : 0);
    render_gauge(out, "ft_kv_cache_config_info", info, "KV-cache configuration (labels); value 1.", 1);
    if (p->vllm_names)
        render_vllm(p, stats, out);
}
