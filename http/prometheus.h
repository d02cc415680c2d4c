/* Aggregate metrics for GET /metrics in Prometheus text format (0.0.4), with
 * the names of the metrics contract (docs/architecture.md). Fed from the same
 * per-request record (struct ft_request_timing / ft_request_metrics) as the
 * responses and the access log. Owned by the HTTP thread: no locking. */
#ifndef FT_HTTP_PROMETHEUS_H
#define FT_HTTP_PROMETHEUS_H

#include "ft/metrics.h"
#include "ft/scheduler.h"

struct evbuffer;
struct ft_prom;

struct ft_prom *ft_prom_new(void);
void ft_prom_free(struct ft_prom *p); /* accepts NULL */

/* Every HTTP request, by endpoint ("/v1/completions", ...; anything else
 * counts as "other") and status. */
void ft_prom_count_request(struct ft_prom *p, const char *endpoint, int status);
/* A finished generation (completed or abandoned by its client). */
void ft_prom_observe(struct ft_prom *p, const struct ft_request_timing *t, const struct ft_request_metrics *m);
/* The exposition; stats may be NULL while the model loads. */
void ft_prom_render(const struct ft_prom *p, const struct ft_scheduler_stats *stats, struct evbuffer *out);

#endif
