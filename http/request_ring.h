/* The last requests' metrics, for GET /v1/requests/recent (docs/api.md,
 * "GET /v1/requests/recent"; the dashboard of http/webui.c polls it): a ring of fixed
 * capacity that the server adds one entry to as each request that reached
 * the engine finishes (the same place it feeds the access log and
 * Prometheus), overwriting the oldest once full, so its memory is
 * allocated once and never grows.
 *
 * Entries carry counts, timings, ids and status, never text (the threat
 * model of docs/architecture.md: prompts and generated text are only
 * logged with --log-prompts).
 *
 * Thread safety: every function may be called from any thread; a mutex
 * guards the entries and totals. Today both the adding (finish_request,
 * http/generation.c) and the reading (the route) run on the event-loop
 * thread, so the lock is never contended; it is there so that moving
 * either to another thread stays correct. The JSON is built from a copy taken under the lock. */
#ifndef FT_HTTP_REQUEST_RING_H
#define FT_HTTP_REQUEST_RING_H

#include "ft/metrics.h"
#include "ft/scheduler.h"

#include <stdbool.h>
#include <stdint.h>

struct ft_api_error;
struct ft_request_ring;

#define FT_REQUEST_RING_CAPACITY 256     /* the server's ring */
#define FT_REQUEST_RING_MAX_CAPACITY 65536
#define FT_REQUEST_RING_DEFAULT_LIMIT 50 /* entries per answer without ?limit= */

struct ft_request_ring_entry {
    uint64_t seq;          /* 1, 2, ... in the order requests finished */
    double finished_at;    /* wall clock when it was added, Unix seconds */
    char id[48];           /* "chatcmpl-..."; empty for embeddings */
    char endpoint[32];     /* the route path, "/v1/chat/completions" */
    char finish_reason[16]; /* "stop", "length", "tool_calls", "cancelled", "error" */
    int status;            /* as logged: 200, 499 (client gone), 500, 503 */
    bool stream;
    struct ft_request_metrics metrics;
};

/* The answer's query: GET /v1/requests/recent?limit=N&since=SEQ. */
struct ft_request_ring_query {
    int32_t limit;  /* 1..capacity */
    uint64_t since; /* only entries with seq > since (0: all) */
};

/* What the server sees now, answered beside the entries. */
struct ft_request_ring_gauges {
    bool loaded;                      /* the model is ready: sched is valid */
    struct ft_scheduler_stats sched;  /* running, waiting, KV use */
    int connections;                  /* client connections open */
    const char *model;                /* the served model id */
};

/* capacity 1..FT_REQUEST_RING_MAX_CAPACITY; NULL on a bad capacity or
 * out of memory. */
struct ft_request_ring *ft_request_ring_new(int32_t capacity);
void ft_request_ring_free(struct ft_request_ring *r); /* accepts NULL */
int32_t ft_request_ring_capacity(const struct ft_request_ring *r);

/* One finished request; strings are copied (cut to fit), NULL ones as
 * empty. The oldest entry makes room once the ring is full. */
void ft_request_ring_add(struct ft_request_ring *r, const char *id, const char *endpoint, int status,
                         const char *finish_reason, bool stream, const struct ft_request_metrics *m);

/* The newest entries with seq > since, newest first, at most max of them,
 * copied into out; returns how many. recorded (OUT, may be NULL) gets the
 * seq of the newest entry (requests added since the start),
 * completion_tokens (OUT, may be NULL) the sum of all their
 * completion_tokens, both read under the same lock as the entries. */
int32_t ft_request_ring_snapshot(struct ft_request_ring *r, uint64_t since, struct ft_request_ring_entry *out,
                                 int32_t max, uint64_t *recorded, uint64_t *completion_tokens);

/* The query of a request target ("/v1/requests/recent?limit=10&since=3"):
 * limit an integer in 1..capacity (default FT_REQUEST_RING_DEFAULT_LIMIT,
 * or capacity if smaller), since an integer >= 0 below 2^63 (default 0).
 * Other parameters are ignored; a known one given twice, empty, signed,
 * or not all digits is refused. Returns 0, or -1 with *err a 400. */
int ft_request_ring_parse_query(const char *target, int32_t capacity, struct ft_request_ring_query *out /* OUT */,
                                struct ft_api_error *err /* OUT */);

/* The body of GET /v1/requests/recent for target's query (docs/api.md,
 * "GET /v1/requests/recent", has the shape). NULL with *err filled (400 for a bad
 * query, 500 out of memory); the caller frees the string. */
char *ft_request_ring_json(struct ft_request_ring *r, const char *target, const struct ft_request_ring_gauges *g,
                           struct ft_api_error *err /* OUT */);

#endif
