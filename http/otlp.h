/* OpenTelemetry traces: one span per generation request, exported over
 * OTLP/HTTP (JSON encoding) to a collector (`ft serve --otlp-endpoint URL`).
 *
 * The loop thread hands finished requests to ft_otlp_submit(), which only
 * copies the span into a bounded queue: a slow or dead collector never
 * delays a token. An exporter thread batches the queue (every second, or
 * at FT_OTLP_BATCH spans) and POSTs it; when the queue is full new spans
 * are dropped and counted. Attributes follow the GenAI semantic
 * conventions (gen_ai.operation.name, gen_ai.request.model,
 * gen_ai.usage.input_tokens, ...) plus vLLM's latency attributes
 * (gen_ai.latency.time_to_first_token, ...), so trace back-ends built for
 * vLLM read them alike. */
#ifndef FT_HTTP_OTLP_H
#define FT_HTTP_OTLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;
struct ft_otlp;

#define FT_OTLP_QUEUE 4096 /* spans waiting for export at most */
#define FT_OTLP_BATCH 256  /* spans per POST at most */

struct ft_otlp_span {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t parent_span_id[8]; /* all zero: a root span */
    uint64_t start_unix_ns, end_unix_ns;
    const char *operation; /* "chat" or "text_completion" (static) */
    char model[256];
    char response_id[48];
    char finish_reason[24]; /* "stop", "length", "cancelled", "error", ... */
    int http_status;        /* 200, or the error status sent */
    int32_t input_tokens, cached_input_tokens, output_tokens;
    int32_t max_tokens; /* 0: not given */
    double temperature, top_p;
    bool stream;
    double queue_s, ttft_s, prefill_s, decode_s, e2e_s;
};

/* Starts the exporter thread. url: "http://HOST[:PORT][/PATH]"; an empty
 * path means OTLP's /v1/traces, the port defaults to 4318. NULL with a
 * message in err on a malformed URL or when the thread cannot start. */
struct ft_otlp *ft_otlp_new(const char *url, const char *service_name, char *err, size_t err_cap);
/* Flushes what is queued (each POST bounded by a short timeout), stops the
 * thread. Accepts NULL. */
void ft_otlp_free(struct ft_otlp *o);

/* Copies the span into the queue; false when it was full (the span is
 * dropped and counted). Any thread. */
bool ft_otlp_submit(struct ft_otlp *o, const struct ft_otlp_span *span);

/* Fresh random ids for a span, and for its trace unless it has a parent. */
void ft_otlp_new_ids(struct ft_otlp_span *span, bool new_trace);

/* W3C Trace Context: parse a `traceparent` header value. Returns true and
 * fills the trace id and the caller's span id (our span's parent) when it
 * is well formed; false for anything else (then a new trace is started). */
bool ft_traceparent_parse(const char *value, uint8_t trace_id[16], uint8_t parent_span_id[8]);

/* Prometheus lines for the exporter: spans exported, dropped, failed POSTs. */
void ft_otlp_render_metrics(struct ft_otlp *o, struct evbuffer *out);

#endif
