/* OTLP/HTTP trace export (http/otlp.h).
 *
 * The exporter thread owns its own libevent base and one keep-alive
 * connection to the collector; the POST is the only blocking step and it
 * runs on that thread alone. Wire format: OTLP's JSON encoding of
 * ExportTraceServiceRequest (ids as lowercase hex, 64-bit integers as
 * decimal strings, enums as numbers). */
#include "otlp.h"

#include "ft/common.h"

#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define OTLP_DEFAULT_PORT 4318
#define OTLP_FLUSH_MS 1000    /* a partial batch waits this long at most */
#define OTLP_POST_TIMEOUT_S 5 /* connect + send + answer */

struct ft_otlp {
    char host[256];
    char path[512];
    int port;
    char service[64];

    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct ft_otlp_span *queue; /* ring of FT_OTLP_QUEUE */
    int head, count;
    bool stop;

    struct event_base *base; /* exporter thread only */
    int post_status;

    atomic_ullong exported, dropped, failed_posts;
};

/* ---- ids and trace context -------------------------------------------------- */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t g_id_rng;
static pthread_mutex_t g_id_lock = PTHREAD_MUTEX_INITIALIZER;

static void random_bytes(uint8_t *out, size_t n) {
    pthread_mutex_lock(&g_id_lock);
    if (!g_id_rng && getrandom(&g_id_rng, sizeof(g_id_rng), 0) != (ssize_t)sizeof(g_id_rng))
        g_id_rng = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)out;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = splitmix(&g_id_rng);
        memcpy(out + i, &v, n - i < 8 ? n - i : 8);
    }
    pthread_mutex_unlock(&g_id_lock);
}

static bool all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

void ft_otlp_new_ids(struct ft_otlp_span *span, bool new_trace) {
    do
        random_bytes(span->span_id, sizeof(span->span_id));
    while (all_zero(span->span_id, sizeof(span->span_id)));
    if (new_trace) {
        memset(span->parent_span_id, 0, sizeof(span->parent_span_id));
        do
            random_bytes(span->trace_id, sizeof(span->trace_id));
        while (all_zero(span->trace_id, sizeof(span->trace_id)));
    }
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1; /* the W3C format is lowercase only */
}

static bool parse_hex(const char *s, uint8_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int hi = hex_digit(s[2 * i]), lo = hi < 0 ? -1 : hex_digit(s[2 * i + 1]);
        if (lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

bool ft_traceparent_parse(const char *v, uint8_t trace_id[16], uint8_t parent_span_id[8]) {
    /* version "-" trace-id(32) "-" parent-id(16) "-" flags(2): 55 chars.
     * Version 00 is exactly that; a later version may append "-..."; ff is
     * invalid. */
    if (!v)
        return false;
    while (*v == ' ' || *v == '\t')
        v++;
    uint8_t ver, t[16], p[8], flags;
    const size_t len = strlen(v);
    if (len < 55 || !parse_hex(v, &ver, 1) || ver == 0xff || v[2] != '-' || !parse_hex(v + 3, t, 16) ||
        v[35] != '-' || !parse_hex(v + 36, p, 8) || v[52] != '-' || !parse_hex(v + 53, &flags, 1))
        return false;
    if (ver == 0 ? len != 55 && strspn(v + 55, " \t") != len - 55 : len > 55 && v[55] != '-')
        return false;
    if (all_zero(t, 16) || all_zero(p, 8))
        return false;
    memcpy(trace_id, t, 16);
    memcpy(parent_span_id, p, 8);
    return true;
}

/* ---- the queue ---------------------------------------------------------------- */

bool ft_otlp_submit(struct ft_otlp *o, const struct ft_otlp_span *span) {
    pthread_mutex_lock(&o->lock);
    const bool room = o->count < FT_OTLP_QUEUE && !o->stop;
    if (room) {
        o->queue[(o->head + o->count) % FT_OTLP_QUEUE] = *span;
        if (++o->count >= FT_OTLP_BATCH)
            pthread_cond_signal(&o->wake);
    }
    pthread_mutex_unlock(&o->lock);
    if (!room)
        atomic_fetch_add(&o->dropped, 1);
    return room;
}

/* ---- JSON --------------------------------------------------------------------- */

static void hex(const uint8_t *p, size_t n, char *out) {
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[p[i] >> 4];
        out[2 * i + 1] = d[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static cJSON *attr(cJSON *list, const char *key) {
    cJSON *a = cJSON_CreateObject(), *v = cJSON_CreateObject();
    cJSON_AddItemToArray(list, a);
    cJSON_AddStringToObject(a, "key", key);
    cJSON_AddItemToObject(a, "value", v);
    return v;
}

static void attr_str(cJSON *list, const char *key, const char *s) {
    cJSON_AddStringToObject(attr(list, key), "stringValue", s);
}

static void attr_int(cJSON *list, const char *key, long long i) {
    char b[24];
    snprintf(b, sizeof(b), "%lld", i);
    cJSON_AddStringToObject(attr(list, key), "intValue", b);
}

static void attr_double(cJSON *list, const char *key, double d) {
    cJSON_AddNumberToObject(attr(list, key), "doubleValue", d);
}

static void attr_bool(cJSON *list, const char *key, bool b) {
    cJSON_AddBoolToObject(attr(list, key), "boolValue", b);
}

static void attr_str_array(cJSON *list, const char *key, const char *s) {
    cJSON *arr = cJSON_CreateObject(), *vals = cJSON_CreateArray(), *one = cJSON_CreateObject();
    cJSON_AddStringToObject(one, "stringValue", s);
    cJSON_AddItemToArray(vals, one);
    cJSON_AddItemToObject(arr, "values", vals);
    cJSON_AddItemToObject(attr(list, key), "arrayValue", arr);
}

static cJSON *span_json(const struct ft_otlp_span *s) {
    char b[40];
    cJSON *j = cJSON_CreateObject();
    hex(s->trace_id, 16, b);
    cJSON_AddStringToObject(j, "traceId", b);
    hex(s->span_id, 8, b);
    cJSON_AddStringToObject(j, "spanId", b);
    if (!all_zero(s->parent_span_id, 8)) {
        hex(s->parent_span_id, 8, b);
        cJSON_AddStringToObject(j, "parentSpanId", b);
    }
    char name[300];
    snprintf(name, sizeof(name), "%s %s", s->operation, s->model); /* GenAI: "{operation} {model}" */
    cJSON_AddStringToObject(j, "name", name);
    cJSON_AddNumberToObject(j, "kind", 2); /* SPAN_KIND_SERVER */
    snprintf(b, sizeof(b), "%llu", (unsigned long long)s->start_unix_ns);
    cJSON_AddStringToObject(j, "startTimeUnixNano", b);
    snprintf(b, sizeof(b), "%llu", (unsigned long long)s->end_unix_ns);
    cJSON_AddStringToObject(j, "endTimeUnixNano", b);

    cJSON *a = cJSON_AddArrayToObject(j, "attributes");
    attr_str(a, "gen_ai.operation.name", s->operation);
    attr_str(a, "gen_ai.request.model", s->model);
    attr_str(a, "gen_ai.response.model", s->model);
    attr_str(a, "gen_ai.response.id", s->response_id);
    if (s->finish_reason[0])
        attr_str_array(a, "gen_ai.response.finish_reasons", s->finish_reason);
    if (s->max_tokens > 0)
        attr_int(a, "gen_ai.request.max_tokens", s->max_tokens);
    attr_double(a, "gen_ai.request.temperature", s->temperature);
    attr_double(a, "gen_ai.request.top_p", s->top_p);
    attr_bool(a, "gen_ai.request.stream", s->stream);
    attr_int(a, "gen_ai.usage.input_tokens", s->input_tokens);
    attr_int(a, "gen_ai.usage.output_tokens", s->output_tokens);
    attr_int(a, "gen_ai.usage.cached_input_tokens", s->cached_input_tokens);
    /* vLLM's names for the same (vllm/tracing.py SpanAttributes). */
    attr_int(a, "gen_ai.usage.prompt_tokens", s->input_tokens);
    attr_int(a, "gen_ai.usage.completion_tokens", s->output_tokens);
    attr_double(a, "gen_ai.latency.time_in_queue", s->queue_s);
    attr_double(a, "gen_ai.latency.time_to_first_token", s->ttft_s);
    attr_double(a, "gen_ai.latency.time_in_model_prefill", s->prefill_s);
    attr_double(a, "gen_ai.latency.time_in_model_decode", s->decode_s);
    attr_double(a, "gen_ai.latency.e2e", s->e2e_s);
    attr_int(a, "http.response.status_code", s->http_status);

    cJSON *st = cJSON_AddObjectToObject(j, "status");
    if (s->http_status >= 500) {
        cJSON_AddNumberToObject(st, "code", 2); /* STATUS_CODE_ERROR */
        cJSON_AddStringToObject(st, "message", s->finish_reason);
    }
    return j;
}

/* ExportTraceServiceRequest for spans[0..n). */
static char *batch_json(const struct ft_otlp *o, const struct ft_otlp_span *spans, int n) {
    cJSON *root = cJSON_CreateObject();
    cJSON *rs = cJSON_CreateObject(), *res = cJSON_CreateObject(), *ss = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "resourceSpans"), rs);
    cJSON_AddItemToObject(rs, "resource", res);
    cJSON *ra = cJSON_AddArrayToObject(res, "attributes");
    attr_str(ra, "service.name", o->service);
    attr_str(ra, "telemetry.sdk.name", "freetoken");
    attr_str(ra, "telemetry.sdk.language", "c");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(rs, "scopeSpans"), ss);
    cJSON *scope = cJSON_AddObjectToObject(ss, "scope");
    cJSON_AddStringToObject(scope, "name", "freetoken.server");
    cJSON *list = cJSON_AddArrayToObject(ss, "spans");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(list, span_json(&spans[i]));
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

/* ---- the exporter thread ------------------------------------------------------ */

static void on_post_done(struct evhttp_request *req, void *arg) {
    struct ft_otlp *o = arg;
    o->post_status = req ? evhttp_request_get_response_code(req) : 0;
    event_base_loopbreak(o->base);
}

/* One blocking POST on this thread's base; true on a 2xx answer. A new
 * connection each time: at most one POST a second, and no stale
 * keep-alive connection to detect. */
static bool post(struct ft_otlp *o, const char *body) {
    struct evhttp_connection *conn = evhttp_connection_base_new(o->base, NULL, o->host, (unsigned short)o->port);
    struct evhttp_request *req = conn ? evhttp_request_new(on_post_done, o) : NULL;
    if (!req) {
        if (conn)
            evhttp_connection_free(conn);
        return false;
    }
    evhttp_connection_set_timeout(conn, OTLP_POST_TIMEOUT_S);
    char host_hdr[300];
    snprintf(host_hdr, sizeof(host_hdr), "%s:%d", o->host, o->port);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", host_hdr);
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Connection", "close");
    evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
    o->post_status = -1;
    if (evhttp_make_request(conn, req, EVHTTP_REQ_POST, o->path) == 0) /* frees req either way */
        event_base_dispatch(o->base);
    evhttp_connection_free(conn);
    return o->post_status >= 200 && o->post_status < 300;
}

static void *exporter_main(void *arg) {
    struct ft_otlp *o = arg;
    struct ft_otlp_span *batch = malloc(sizeof(*batch) * FT_OTLP_BATCH);
    for (;;) {
        pthread_mutex_lock(&o->lock);
        if (o->count < FT_OTLP_BATCH && !o->stop) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += (long)OTLP_FLUSH_MS * 1000000L;
            until.tv_sec += until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
            while (o->count < FT_OTLP_BATCH && !o->stop)
                if (pthread_cond_timedwait(&o->wake, &o->lock, &until) == ETIMEDOUT)
                    break;
        }
        int n = o->count < FT_OTLP_BATCH ? o->count : FT_OTLP_BATCH;
        for (int i = 0; batch && i < n; i++)
            batch[i] = o->queue[(o->head + i) % FT_OTLP_QUEUE];
        o->head = (o->head + n) % FT_OTLP_QUEUE;
        o->count -= n;
        const bool stop = o->stop;
        pthread_mutex_unlock(&o->lock);
        bool ok = true;
        if (n > 0) {
            char *body = batch ? batch_json(o, batch, n) : NULL;
            ok = body && post(o, body);
            if (ok) {
                atomic_fetch_add(&o->exported, (unsigned long long)n);
            } else {
                atomic_fetch_add(&o->failed_posts, 1);
                atomic_fetch_add(&o->dropped, (unsigned long long)n);
            }
            cJSON_free(body);
        }
        if (stop) {
            /* Shutting down: flush while the collector answers, but wait
             * for a dead one only once. */
            pthread_mutex_lock(&o->lock);
            const int left = o->count;
            if (!ok) {
                atomic_fetch_add(&o->dropped, (unsigned long long)left);
                o->count = 0;
            }
            pthread_mutex_unlock(&o->lock);
            if (!ok || left == 0)
                break;
        }
    }
    free(batch);
    return NULL;
}

/* ---- set-up ------------------------------------------------------------------- */

struct ft_otlp *ft_otlp_new(const char *url, const char *service_name, char *err, size_t err_cap) {
    struct evhttp_uri *u = evhttp_uri_parse(url);
    const char *scheme = u ? evhttp_uri_get_scheme(u) : NULL, *host = u ? evhttp_uri_get_host(u) : NULL;
    if (!u || !scheme || strcmp(scheme, "http") != 0 || !host || !*host || strlen(host) >= 256 ||
        evhttp_uri_get_query(u) || evhttp_uri_get_fragment(u) || evhttp_uri_get_userinfo(u)) {
        snprintf(err, err_cap, "--otlp-endpoint must be http://HOST[:PORT][/PATH] (got '%.200s')", url);
        if (u)
            evhttp_uri_free(u);
        return NULL;
    }
    struct ft_otlp *o = calloc(1, sizeof(*o));
    if (!o || !(o->queue = calloc(FT_OTLP_QUEUE, sizeof(*o->queue)))) {
        snprintf(err, err_cap, "out of memory");
        free(o);
        evhttp_uri_free(u);
        return NULL;
    }
    snprintf(o->host, sizeof(o->host), "%s", host);
    o->port = evhttp_uri_get_port(u) > 0 ? evhttp_uri_get_port(u) : OTLP_DEFAULT_PORT;
    const char *path = evhttp_uri_get_path(u);
    snprintf(o->path, sizeof(o->path), "%s", path && *path && strcmp(path, "/") != 0 ? path : "/v1/traces");
    snprintf(o->service, sizeof(o->service), "%s", service_name);
    evhttp_uri_free(u);
    pthread_mutex_init(&o->lock, NULL);
    pthread_cond_init(&o->wake, NULL);
    if (!(o->base = event_base_new()) || pthread_create(&o->thread, NULL, exporter_main, o) != 0) {
        snprintf(err, err_cap, "cannot start the trace exporter");
        if (o->base)
            event_base_free(o->base);
        free(o->queue);
        free(o);
        return NULL;
    }
    return o;
}

void ft_otlp_free(struct ft_otlp *o) {
    if (!o)
        return;
    pthread_mutex_lock(&o->lock);
    o->stop = true;
    pthread_cond_signal(&o->wake);
    pthread_mutex_unlock(&o->lock);
    pthread_join(o->thread, NULL);
    event_base_free(o->base);
    pthread_cond_destroy(&o->wake);
    pthread_mutex_destroy(&o->lock);
    free(o->queue);
    free(o);
}

void ft_otlp_render_metrics(struct ft_otlp *o, struct evbuffer *out) {
    evbuffer_add_printf(out,
                        "# HELP ft_otlp_spans_exported_total Request spans the collector accepted.\n"
                        "# TYPE ft_otlp_spans_exported_total counter\nft_otlp_spans_exported_total %llu\n"
                        "# HELP ft_otlp_spans_dropped_total Request spans lost: queue full or export failed.\n"
                        "# TYPE ft_otlp_spans_dropped_total counter\nft_otlp_spans_dropped_total %llu\n"
                        "# HELP ft_otlp_export_failures_total POSTs to the collector that failed.\n"
                        "# TYPE ft_otlp_export_failures_total counter\nft_otlp_export_failures_total %llu\n",
                        (unsigned long long)atomic_load(&o->exported), (unsigned long long)atomic_load(&o->dropped),
                        (unsigned long long)atomic_load(&o->failed_posts));
}
