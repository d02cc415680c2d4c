/* The HTTP server: one libevent loop thread that accepts connections
 * (http/conn.c speaks HTTP/1.1 on bufferevents), routes requests, checks
 * API keys and answers the small routes itself; generations and
 * embeddings go to the engine's scheduler thread through
 * http/generation.c, which streams what comes back (docs/architecture.md,
 * The request path).
 *
 * Threads and ownership:
 *  - The loop thread owns every connection and every request in flight
 *    (struct ft_generation); it alone frees them.
 *  - The scheduler thread reports through ft_generation_on_event(), which
 *    wakes the loop (http/generation.c).
 *  - The loader thread loads the model (so /health answers 503 meanwhile)
 *    and wakes the loop when it is done.
 *  - A client that goes away while its request runs cancels the request
 *    (ft_generation_on_gone()); it is logged as 499.
 *  - SIGINT/SIGTERM: stop accepting, close idle connections, let requests
 *    in flight finish for --shutdown-timeout seconds, then cancel the rest
 *    (their clients get a 503 error, or an error event in the stream); a
 *    second signal cancels at once. The loop ends when no request and no
 *    connection is left.
 */
#include "ft/server.h"

#include "access_log.h"
#include "backend.h"
#include "conn.h"
#include "errors.h"
#include "generation.h"
#include "otlp.h"
#include "prometheus.h"
#include "request_parse.h"
#include "request_ring.h"
#include "responses.h"
#include "server_internal.h"
#include "tokenize.h"
#include "webui.h"

#include "ft/clock.h"
#include "ft/common.h"
#include "ft/kv_events.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum srv_state { STATE_LOADING, STATE_READY, STATE_FAILED };

/* Bounds of the HTTP layer (the body limit is --max-body-size). */
#define SRV_MAX_HEAD (32 * 1024)            /* request line + headers */
#define SRV_MAX_HEADERS 100
#define SRV_MAX_OUTPUT (8u << 20)           /* streamed bytes a client may leave unread */
#define SRV_HARD_EXIT_SECONDS 10            /* after cancelling, stop waiting for slow clients */

uint64_t ft_server_random(struct ft_server *s) {
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- logging and counting of finished requests ---------------------------- */

void ft_server_record(struct ft_server *s, const char *remote, const char *method, const char *path,
                      const char *endpoint, int status, const char *finish, const struct ft_request_metrics *m,
                      const char *error, const char *prompt) {
    ft_prom_count_request(s->prom, endpoint, status);
    const struct ft_access_entry e = {remote, method, path, status, finish, m, error, prompt};
    ft_access_log_write(s->log, s->cfg->log_json ? FT_LOG_FORMAT_JSON : FT_LOG_FORMAT_TEXT, &e);
}

static const char *req_method(const struct ft_http_request *req) { return req ? req->method_name : "-"; }
static const char *req_path(const struct ft_http_request *req) { return req ? req->target : "-"; }

/* A whole response. Logged first: the connection frees req with the reply. */
static void reply(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint,
                  int status, const char *content_type, const struct ft_http_header_out *extra, int n_extra,
                  const char *body, const char *error) {
    ft_server_record(s, ft_conn_remote(c), req_method(req), req_path(req), endpoint, status, NULL, NULL, error, NULL);
    ft_conn_reply(c, status, content_type, extra, n_extra, body, body ? strlen(body) : 0);
}

/* An error answered right away (no generation), as an OpenAI error object. */
void ft_server_reply_error_h(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req,
                             const char *endpoint, int status, const char *message, const char *param, const char *code,
                             const struct ft_http_header_out *extra, int n_extra) {
    char *body = ft_http_error_body(status, message, param, code);
    reply(s, c, req, endpoint, status, "application/json", extra, n_extra,
          body ? body : ft_http_oom_body, message);
    free(body);
}

void ft_server_reply_error(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req,
                           const char *endpoint, int status, const char *message, const char *param, const char *code) {
    ft_server_reply_error_h(s, c, req, endpoint, status, message, param, code, NULL, 0);
}

static void reply_json(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint,
                       int status, const char *json) {
    reply(s, c, req, endpoint, status, "application/json", NULL, 0, json, NULL);
}

/* Shutting down and nothing left: end the loop. */
void ft_server_check_drained(struct ft_server *s) {
    if (s->signals && s->n_inflight == 0 && (!s->pool || ft_conn_pool_count(s->pool) == 0))
        event_base_loopexit(s->base, NULL);
}

/* ---- routes ------------------------------------------------------------------ */

/* Requests that need the model: a 503 unless it is loaded and the server is
 * not shutting down. */
bool ft_server_engine_ready(struct ft_server *s, struct ft_conn *conn, const struct ft_http_request *req,
                            const char *endpoint) {
    if (s->signals) {
        ft_server_reply_error(s, conn, req, endpoint, 503, "the server is shutting down", NULL, "shutting_down");
        return false;
    }
    if (atomic_load(&s->state) != STATE_READY) {
        ft_server_reply_error(s, conn, req, endpoint, 503,
                              "the model is still loading; retry when GET /health answers 200", NULL, "model_loading");
        return false;
    }
    return true;
}

bool ft_server_model_matches(const struct ft_server *s, const char *model) {
    return !model || !strcmp(model, s->model_id) || !strcmp(model, s->cfg->model_path);
}

void ft_server_reply_model_not_found(struct ft_server *s, struct ft_conn *conn, const struct ft_http_request *req,
                                     const char *endpoint, const char *model) {
    char msg[480];
    snprintf(msg, sizeof(msg), "the model '%.200s' does not exist; this server serves '%.150s'", model, s->model_id);
    ft_server_reply_error(s, conn, req, endpoint, 404, msg, "model", "model_not_found");
}

/* POST /tokenize and /detokenize (http/tokenize.h): answered on this thread. */
static void handle_tokenize(struct ft_server *s, struct ft_conn *conn, const struct ft_http_request *req,
                            const char *body, size_t len, const char *endpoint, bool detokenize) {
    if (!ft_server_engine_ready(s, conn, req, endpoint))
        return;
    struct ft_api_error err;
    char *json = detokenize ? ft_detokenize_handle(s->backend->tok, body, len, &err)
                            : ft_tokenize_handle(s->backend->tok, body, len, &err);
    if (json)
        reply_json(s, conn, req, endpoint, 200, json);
    else
        ft_server_reply_error(s, conn, req, endpoint, err.status, err.message, err.param, err.code);
    free(json);
}

static void handle_models(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req,
                          const char *endpoint) {
    char *json = ft_resp_models(s->model_id, s->started);
    if (json)
        reply_json(s, c, req, endpoint, 200, json);
    else
        ft_server_reply_error(s, c, req, endpoint, 500, "out of memory", NULL, NULL);
    free(json);
}

static void handle_health(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req,
                          const char *endpoint) {
    const int st = atomic_load(&s->state);
    reply_json(s, c, req, endpoint, st == STATE_READY ? 200 : 503,
               st == STATE_READY ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}");
}

/* Liveness: the event loop answers, whether or not the model is loaded yet
 * (GET /health is readiness). */
static void handle_live(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req,
                        const char *endpoint) {
    reply_json(s, c, req, endpoint, 200, "{\"status\":\"alive\"}");
}

/* --kv-events: the publisher's counters (docs/api.md "KV-cache events"). */
static void render_kv_events(struct ft_kv_events *ev, struct evbuffer *b) {
    if (!ev)
        return;
    struct ft_kv_events_stats st;
    ft_kv_events_get_stats(ev, &st);
    evbuffer_add_printf(b,
                        "# HELP ft_kv_events_batches_total KV-event batches published (the next sequence number)\n"
                        "# TYPE ft_kv_events_batches_total counter\nft_kv_events_batches_total %llu\n"
                        "# HELP ft_kv_events_total KV-cache events queued for publishing (one per block)\n"
                        "# TYPE ft_kv_events_total counter\nft_kv_events_total %llu\n"
                        "# HELP ft_kv_events_dropped_total KV-cache events dropped from a full queue (each time, "
                        "AllBlocksCleared is sent instead)\n"
                        "# TYPE ft_kv_events_dropped_total counter\nft_kv_events_dropped_total %llu\n",
                        (unsigned long long)st.batches, (unsigned long long)st.events,
                        (unsigned long long)st.dropped);
}

static void handle_metrics(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req,
                           const char *endpoint) {
    struct ft_scheduler_stats st;
    const bool ready = atomic_load(&s->state) == STATE_READY;
    if (ready)
        ft_scheduler_get_stats(s->backend->sched, &st);
    struct evbuffer *b = evbuffer_new();
    if (b) {
        ft_prom_render(s->prom, ready ? &st : NULL, b);
        if (s->otlp)
            ft_otlp_render_metrics(s->otlp, b);
        evbuffer_add_printf(b,
                            "# HELP ft_http_connections Client connections open.\n"
                            "# TYPE ft_http_connections gauge\nft_http_connections %d\n"
                            "# HELP ft_http_connections_evicted_total Idle connections closed to make room at "
                            "the connection limit.\n"
                            "# TYPE ft_http_connections_evicted_total counter\nft_http_connections_evicted_total %llu\n",
                            ft_conn_pool_count(s->pool), ft_conn_pool_evicted(s->pool));
        render_kv_events(s->cfg->kv_events, b);
        evbuffer_add(b, "", 1);
    }
    const char *text = b ? (const char *)evbuffer_pullup(b, -1) : NULL;
    if (text)
        reply(s, c, req, endpoint, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, 0, text, NULL);
    else
        ft_server_reply_error(s, c, req, endpoint, 500, "out of memory", NULL, NULL);
    if (b)
        evbuffer_free(b);
}

/* GET /v1/requests/recent (http/request_ring.h): the last requests' metrics and the gauges now. */
static void handle_recent(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req,
                          const char *endpoint) {
    struct ft_request_ring_gauges g = {.connections = ft_conn_pool_count(s->pool), .model = s->model_id};
    if ((g.loaded = atomic_load(&s->state) == STATE_READY))
        ft_scheduler_get_stats(s->backend->sched, &g.sched);
    struct ft_api_error err;
    char *json = ft_request_ring_json(s->ring, req->target, &g, &err);
    if (json)
        reply_json(s, c, req, endpoint, 200, json);
    else
        ft_server_reply_error(s, c, req, endpoint, err.status, err.message, err.param, err.code);
    free(json);
}

/* The web UI's pages and assets (http/webui.h). */
static void handle_webui(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req) {
    struct ft_webui_reply w;
    ft_webui_respond(req, &w);
    ft_server_record(s, ft_conn_remote(c), req_method(req), req_path(req), "other", w.status, NULL, NULL, NULL, NULL);
    ft_conn_reply(c, w.status, w.content_type, w.headers, w.n_headers, w.body, w.len);
}

/* POST /apply-template (llama-server's): the prompt a chat request would
 * run, {"prompt": "..."}, without generating: the body is a chat
 * completions request, validated the same way. */
static void handle_apply_template(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req,
                                  const char *body, size_t len, const char *endpoint) {
    if (atomic_load(&s->state) != STATE_READY) {
        ft_server_reply_error(s, c, req, endpoint, 503,
                              "the model is still loading; retry when GET /health answers 200", NULL, "model_loading");
        return;
    }
    struct ft_api_request api;
    struct ft_api_error err;
    if (ft_api_request_parse(body, len, FT_API_CHAT, s->backend->n_vocab, &api, &err)) {
        ft_server_reply_error(s, c, req, endpoint, err.status, err.message, err.param, err.code);
        return;
    }
    char *text = NULL;
    size_t n = 0;
    if (ft_backend_render_chat(s->backend, &api, &text, &n, &err)) {
        ft_api_request_free(&api);
        ft_server_reply_error(s, c, req, endpoint, err.status, err.message, err.param, err.code);
        return;
    }
    ft_api_request_free(&api);
    cJSON *o = cJSON_CreateObject();
    char *json = o && cJSON_AddStringToObject(o, "prompt", text) ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    free(text);
    if (json)
        reply_json(s, c, req, endpoint, 200, json);
    else
        ft_server_reply_error(s, c, req, endpoint, 500, "out of memory", NULL, NULL);
    free(json);
}

enum route_kind {
    R_CHAT,
    R_COMPLETIONS,
    R_MODELS,
    R_HEALTH,
    R_LIVE,
    R_METRICS,
    R_EMBEDDINGS,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_APPLY_TEMPLATE,
    R_RECENT,
};

static const struct route {
    const char *path;
    enum ft_http_method method;
    enum route_kind kind;
} k_routes[] = {
    {"/v1/chat/completions", FT_HTTP_POST, R_CHAT},
    {"/v1/completions", FT_HTTP_POST, R_COMPLETIONS},
    {"/v1/models", FT_HTTP_GET, R_MODELS},
    {"/health", FT_HTTP_GET, R_HEALTH},
    {"/livez", FT_HTTP_GET, R_LIVE},
    {"/metrics", FT_HTTP_GET, R_METRICS},
    {"/v1/embeddings", FT_HTTP_POST, R_EMBEDDINGS},
    {"/tokenize", FT_HTTP_POST, R_TOKENIZE},
    {"/detokenize", FT_HTTP_POST, R_DETOKENIZE},
    {"/apply-template", FT_HTTP_POST, R_APPLY_TEMPLATE},
    {"/v1/requests/recent", FT_HTTP_GET, R_RECENT},
};

/* Compares the whole key in constant time, so response timing does not
 * reveal how much of a guess was right. */
static bool key_matches(const char *given, const char *key) {
    const size_t gl = strlen(given), kl = strlen(key);
    unsigned diff = gl != kl;
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

/* Every key is compared, so the time taken does not tell which one (or
 * whether any) matched. */
static bool authorized(const struct ft_server *s, const struct ft_http_request *req) {
    if (s->cfg->n_api_keys == 0)
        return true;
    const char *h = ft_http_field(req, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    bool ok = false;
    for (int i = 0; i < s->cfg->n_api_keys; i++)
        ok |= key_matches(h, s->cfg->api_keys[i]);
    return ok;
}

/* A CORS preflight from an allowed origin: what the browser may send.
 * Answered before authentication (browsers send no credentials here). */
static bool cors_preflight(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req,
                           const char *endpoint) {
    if (req->method != FT_HTTP_OPTIONS || !ft_conn_cors_origin(ft_conn_pool_of(c), req) ||
        !ft_http_field(req, "Access-Control-Request-Method"))
        return false;
    static const struct ft_http_header_out h[] = {
        {"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
        {"Access-Control-Allow-Headers", "Authorization, Content-Type, traceparent"},
        {"Access-Control-Max-Age", "600"},
    };
    reply(s, c, req, endpoint, 204, NULL, h, (int)FT_ARRAY_LEN(h), NULL, NULL);
    return true;
}

/* The connection's on_request: a complete request to route. */
static void on_request(void *ud, struct ft_conn *c, const struct ft_http_request *req, const char *body,
                       size_t body_len) {
    struct ft_server *s = ud;
    const char *path = req->path;
    /* HEAD is GET without the body (the connection leaves it out). */
    const enum ft_http_method method = req->method == FT_HTTP_HEAD ? FT_HTTP_GET : req->method;
    /* Served without the key: http/webui.h says why. */
    if (!s->cfg->no_webui && ft_webui_handles(path)) {
        handle_webui(s, c, req);
        return;
    }
    const struct route *route = NULL;
    bool path_known = false;
    for (size_t i = 0; i < FT_ARRAY_LEN(k_routes); i++) {
        if (strcmp(path, k_routes[i].path) != 0)
            continue;
        path_known = true;
        if (k_routes[i].method == method)
            route = &k_routes[i];
    }
    const char *endpoint = path_known ? path : "other";
    char msg[300];
    if (path_known && cors_preflight(s, c, req, endpoint))
        return;
    /* /health and /livez stay open so a load balancer or kubelet needs no key. */
    if (!(route && (route->kind == R_HEALTH || route->kind == R_LIVE)) && !authorized(s, req)) {
        static const struct ft_http_header_out h[] = {{"WWW-Authenticate", "Bearer"}};
        ft_server_reply_error_h(s, c, req, endpoint, 401,
                                "missing or incorrect API key: send it as 'Authorization: Bearer KEY'", NULL,
                                "invalid_api_key", h, 1);
        return;
    }
    if (!path_known) {
        snprintf(msg, sizeof(msg), "unknown URL: %s %.200s", req->method_name, path);
        ft_server_reply_error(s, c, req, endpoint, 404, msg, NULL, "unknown_url");
        return;
    }
    if (!route) {
        const char *allowed = "GET, HEAD";
        for (size_t i = 0; i < FT_ARRAY_LEN(k_routes); i++)
            if (!strcmp(path, k_routes[i].path) && k_routes[i].method == FT_HTTP_POST)
                allowed = "POST";
        const struct ft_http_header_out h[] = {{"Allow", allowed}};
        snprintf(msg, sizeof(msg), "method %s is not allowed for %s (use %s)", req->method_name, path, allowed);
        ft_server_reply_error_h(s, c, req, endpoint, 405, msg, NULL, "method_not_allowed", h, 1);
        return;
    }
    switch (route->kind) {
    case R_CHAT: ft_generation_handle(s, c, req, body, body_len, route->path, FT_API_CHAT); break;
    case R_COMPLETIONS: ft_generation_handle(s, c, req, body, body_len, route->path, FT_API_COMPLETIONS); break;
    case R_MODELS: handle_models(s, c, req, route->path); break;
    case R_HEALTH: handle_health(s, c, req, route->path); break;
    case R_LIVE: handle_live(s, c, req, route->path); break;
    case R_METRICS: handle_metrics(s, c, req, route->path); break;
    case R_EMBEDDINGS: ft_generation_handle_embeddings(s, c, req, body, body_len, route->path); break;
    case R_TOKENIZE: handle_tokenize(s, c, req, body, body_len, route->path, false); break;
    case R_DETOKENIZE: handle_tokenize(s, c, req, body, body_len, route->path, true); break;
    case R_APPLY_TEMPLATE: handle_apply_template(s, c, req, body, body_len, route->path); break;
    case R_RECENT: handle_recent(s, c, req, route->path); break;
    }
}

/* The connection's on_refused: what could not be read as a request. */
static void on_refused(void *ud, struct ft_conn *c, const struct ft_http_request *req, int status, const char *message,
                       const char *code) {
    struct ft_server *s = ud;
    struct ft_http_header_out h[1];
    int n = 0;
    if (status == 405)
        h[n++] = (struct ft_http_header_out){"Allow", "GET, HEAD, POST"};
    else if (status == 503)
        h[n++] = (struct ft_http_header_out){"Retry-After", "1"};
    ft_server_reply_error_h(s, c, req, "other", status, message, NULL, code, h, n);
}

static void on_conn_closed(void *ud) { ft_server_check_drained(ud); }

/* ---- start-up and shut-down ---------------------------------------------------- */

static void *loader_main(void *arg) {
    struct ft_server *s = arg;
    struct ft_backend *b = NULL;
    int rc = ft_backend_load(s->cfg, ft_generation_on_event, s, &b, s->load_error, sizeof(s->load_error));
    s->backend = b;
    atomic_store(&s->state, rc ? STATE_FAILED : STATE_READY); /* publishes backend */
    event_active(s->loaded_ev, EV_READ, 0);
    return NULL;
}

static void on_loaded(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct ft_server *s = arg;
    if (atomic_load(&s->state) == STATE_FAILED) {
        fprintf(stderr, "ft serve: %s\n", s->load_error);
        s->exit_status = 1;
        event_base_loopbreak(s->base);
        return;
    }
    fprintf(stderr, "ft serve: ready: %s, context %d tokens, %d parallel requests, clock %s\n", s->model_id,
            (int)s->backend->n_ctx, (int)s->backend->n_parallel, ft_clock_source());
}

/* Tell every request in flight to stop; each still ends through DONE and
 * its client gets a clear error. */
static void cancel_inflight(struct ft_server *s) {
    if (s->cancelled)
        return;
    s->cancelled = true;
    if (s->n_inflight)
        fprintf(stderr, "ft serve: cancelling %d request%s in flight\n", s->n_inflight, s->n_inflight == 1 ? "" : "s");
    for (struct ft_generation *r = s->inflight; r; r = r->next)
        atomic_store(&r->er.cancel, true);
    /* Clients that do not read their answers do not hold the exit up long. */
    const struct timeval tv = {SRV_HARD_EXIT_SECONDS, 0};
    event_add(s->drain_ev, &tv);
}

static void on_drain_timeout(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct ft_server *s = arg;
    if (!s->cancelled) {
        cancel_inflight(s);
        return;
    }
    fprintf(stderr, "ft serve: %d connection%s still open after the shutdown; closing them\n",
            ft_conn_pool_count(s->pool), ft_conn_pool_count(s->pool) == 1 ? "" : "s");
    event_base_loopexit(s->base, NULL);
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    (void)what;
    struct ft_server *s = arg;
    const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (s->signals++) {
        fprintf(stderr, "ft serve: %s again: cancelling now\n", name);
        cancel_inflight(s);
        ft_server_check_drained(s);
        return;
    }
    fprintf(stderr, "ft serve: %s: shutting down (%d request%s in flight, waiting up to %d s)\n", name,
            s->n_inflight, s->n_inflight == 1 ? "" : "s", s->cfg->shutdown_timeout_s);
    if (s->listener)
        evconnlistener_disable(s->listener);
    event_del(s->accept_ev);
    ft_conn_pool_drain(s->pool);
    if (s->cfg->shutdown_timeout_s > 0) {
        const struct timeval tv = {s->cfg->shutdown_timeout_s, 0};
        event_add(s->drain_ev, &tv);
    } else {
        cancel_inflight(s);
    }
    ft_server_check_drained(s);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg) {
    (void)l;
    struct ft_server *s = arg;
    ft_conn_pool_accept(s->pool, fd, sa, salen);
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct ft_server *s = arg;
    if (!s->signals)
        evconnlistener_enable(s->listener);
}

/* accept() failed (out of descriptors, most likely): pause accepting for a
 * moment instead of spinning on the readable listening socket. */
static void on_accept_error(struct evconnlistener *l, void *arg) {
    struct ft_server *s = arg;
    evconnlistener_disable(l);
    const struct timeval tv = {0, 100 * 1000};
    event_add(s->accept_ev, &tv);
}

/* Listen on host:port (numeric or a name getaddrinfo knows). */
static struct evconnlistener *listen_on(struct ft_server *s, const char *host, int port) {
    struct evutil_addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    hints.ai_flags = EVUTIL_AI_PASSIVE | EVUTIL_AI_ADDRCONFIG;
    char port_s[16];
    snprintf(port_s, sizeof(port_s), "%d", port);
    if (evutil_getaddrinfo(host, port_s, &hints, &ai) != 0 || !ai)
        return NULL;
    struct evconnlistener *l = NULL;
    for (struct evutil_addrinfo *a = ai; a && !l; a = a->ai_next)
        l = evconnlistener_new_bind(s->base, on_accept, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128,
                                    a->ai_addr, (int)a->ai_addrlen);
    evutil_freeaddrinfo(ai);
    if (l)
        evconnlistener_set_error_cb(l, on_accept_error);
    return l;
}

/* The connection limit the descriptor table allows: the soft limit is
 * raised to the hard one, and the pool may hold up to twice max_conns
 * sockets for a moment (see http/conn.h) besides the model, logs and
 * listeners. */
static int max_conns_for_fds(int want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return want;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    const long long fit = ((long long)rl.rlim_cur - 64) / 2;
    if (rl.rlim_cur != RLIM_INFINITY && fit < want) {
        fprintf(stderr, "ft serve: %lld open files allowed (ulimit -n): at most %lld connections, not %d\n",
                (long long)rl.rlim_cur, fit > 16 ? fit : 16, want);
        return fit > 16 ? (int)fit : 16;
    }
    return want;
}

static void model_id_from_path(const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, cap, "%s", base);
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf"))
        out[n - 5] = '\0';
}

int ft_server_run(const struct ft_server_config *cfg) {
    struct ft_server s_, *s = &s_;
    memset(s, 0, sizeof(*s));
    s->cfg = cfg;
    s->log = stdout;
    s->started = (long long)time(NULL);
    s->rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ ft_clock_ticks();
    atomic_store(&s->state, STATE_LOADING);
    pthread_mutex_init(&s->lock, NULL);
    if (cfg->model_alias)
        snprintf(s->model_id, sizeof(s->model_id), "%s", cfg->model_alias);
    else
        model_id_from_path(cfg->model_path, s->model_id, sizeof(s->model_id));
    ft_clock_init();
    /* A client that disconnects must not kill the server with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);

    int status = 1;
    const struct ft_conn_config ccfg = {
        .limits = {.max_head = SRV_MAX_HEAD, .max_headers = SRV_MAX_HEADERS, .max_body = cfg->max_body},
        .timeout_s = cfg->timeout_s,
        .request_timeout_s = cfg->request_timeout_s,
        .max_output = SRV_MAX_OUTPUT,
        .max_conns = max_conns_for_fds(cfg->max_conns),
        .cors_origins = cfg->cors_origins,
        .n_cors_origins = cfg->n_cors_origins,
    };
    const struct ft_conn_handler handler = {on_request, on_refused, ft_generation_on_gone, on_conn_closed};
    if (evthread_use_pthreads() != 0 || !(s->base = event_base_new()) ||
        !(s->pool = ft_conn_pool_new(s->base, &ccfg, &handler, s)) || !(s->prom = ft_prom_new(&(struct ft_prom_config){s->model_id, cfg->metrics_vllm_names})) ||
        !(s->wake_ev = event_new(s->base, -1, 0, ft_generation_on_wake, s)) ||
        !(s->loaded_ev = event_new(s->base, -1, 0, on_loaded, s)) ||
        !(s->drain_ev = evtimer_new(s->base, on_drain_timeout, s)) ||
        !(s->accept_ev = evtimer_new(s->base, on_accept_resume, s)) ||
        !(s->sig_int = evsignal_new(s->base, SIGINT, on_signal, s)) ||
        !(s->sig_term = evsignal_new(s->base, SIGTERM, on_signal, s)) ||
        !(s->ring = ft_request_ring_new(FT_REQUEST_RING_CAPACITY))) {
        fprintf(stderr, "ft serve: cannot set up the event loop\n");
        goto done;
    }
    if (cfg->otlp_endpoint) {
        char err[300];
        const char *service = getenv("OTEL_SERVICE_NAME");
        if (!(s->otlp = ft_otlp_new(cfg->otlp_endpoint, service && *service ? service : "freetoken", err,
                                    sizeof(err)))) {
            fprintf(stderr, "ft serve: %s\n", err);
            status = 2;
            goto done;
        }
    }
    event_add(s->sig_int, NULL);
    event_add(s->sig_term, NULL);
    if (!(s->listener = listen_on(s, cfg->host, cfg->port))) {
        fprintf(stderr, "ft serve: cannot listen on %s:%d (in use, or not an address of this machine)\n", cfg->host,
                cfg->port);
        goto done;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int port = cfg->port;
    if (getsockname(evconnlistener_get_fd(s->listener), (struct sockaddr *)&ss, &sl) == 0)
        port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);
    fprintf(stderr, "ft serve: listening on http://%s%s%s:%d (loading %s)\n", strchr(cfg->host, ':') ? "[" : "",
            cfg->host, strchr(cfg->host, ':') ? "]" : "", port, cfg->model_path);

    if (pthread_create(&s->loader, NULL, loader_main, s) != 0) {
        fprintf(stderr, "ft serve: cannot start the loader thread\n");
        goto done;
    }
    s->loader_started = true;
    status = 0;
    event_base_dispatch(s->base);
    if (s->exit_status)
        status = s->exit_status;

done:
    if (s->loader_started)
        pthread_join(s->loader, NULL);
    /* Stopping the scheduler ends every request with a DONE event; answer
     * and free them before the connections go. */
    ft_backend_free(s->backend);
    s->backend = NULL;
    if (s->wake_ev)
        ft_generation_on_wake(-1, 0, s);
    if (s->listener)
        evconnlistener_free(s->listener);
    ft_conn_pool_free(s->pool);
    if (s->drain_ev)
        event_free(s->drain_ev);
    if (s->accept_ev)
        event_free(s->accept_ev);
    if (s->sig_int)
        event_free(s->sig_int);
    if (s->sig_term)
        event_free(s->sig_term);
    if (s->wake_ev)
        event_free(s->wake_ev);
    if (s->loaded_ev)
        event_free(s->loaded_ev);
    if (s->base)
        event_base_free(s->base);
    ft_otlp_free(s->otlp); /* flushes the last spans */
    ft_prom_free(s->prom);
    ft_request_ring_free(s->ring);
    pthread_mutex_destroy(&s->lock);
    libevent_global_shutdown();
    return status;
}
