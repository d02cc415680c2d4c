/* Aggregate metrics for GET /metrics in Prometheus text format (0.0.4),
 * with the names of docs/architecture.md's metrics contract. Fed from the
 * same per-request record (struct ft_request_timing / ft_request_metrics)
 * as the responses and the access log. Owned by the HTTP thread: no
 * locking.
 *
 * Three sets of names over the same observations:
 *   ft_*       always: FreeToken's own histograms, counters and gauges;
 *   gen_ai_*   always: OpenTelemetry's GenAI server metrics
 *              (gen_ai.server.time_to_first_token, .time_per_output_token,
 *              .request.duration) as an OTel Prometheus exporter names them,
 *              with the semantic conventions' buckets extended for CPU
 *              latencies;
 *   vllm:*     with --metrics-compat vllm: vLLM's names and model_name label,
 *              so routers and dashboards built for vLLM (the Gateway API
 *              Inference Extension's endpoint picker, llm-d, Grafana boards)
 *              read a FreeToken replica with no configuration. */
#ifndef FT_HTTP_PROMETHEUS_H
#define FT_HTTP_PROMETHEUS_H

#include "ft/metrics.h"
#include "ft/scheduler.h"

#include <stdbool.h>

struct evbuffer;
struct ft_prom;

struct ft_prom_config {
    const char *model_name; /* the served model id: label of gen_ai_* and vllm:* samples */
    bool vllm_names;        /* also expose the vllm:* names */
};

struct ft_prom *ft_prom_new(const struct ft_prom_config *cfg);
void ft_prom_free(struct ft_prom *p); /* accepts NULL */

/* Every HTTP request, by endpoint ("/v1/completions", ...; anything else
 * counts as "other") and status. */
void ft_prom_count_request(struct ft_prom *p, const char *endpoint, int status);
/* A finished generation (completed or abandoned by its client) of the
 * endpoint ("/v1/chat/completions" or "/v1/completions"). */
void ft_prom_observe(struct ft_prom *p, const char *endpoint, const struct ft_request_timing *t,
                     const struct ft_request_metrics *m);
/* The exposition; stats may be NULL while the model loads. */
void ft_prom_render(const struct ft_prom *p, const struct ft_scheduler_stats *stats, struct evbuffer *out);

#endif
