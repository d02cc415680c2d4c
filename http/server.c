/* The HTTP server: one libevent loop thread that accepts connections
 * (http/conn.c speaks HTTP/1.1 on bufferevents), parses and validates
 * requests, hands generations to the engine's scheduler thread, and
 * streams what comes back (DESIGN.md §2).
 *
 * Threads and ownership:
 *  - The loop thread owns every connection and every struct srv_req; it
 *    alone frees them.
 *  - The scheduler thread reports through on_engine_event(): it appends the
 *    released text to the request's outbox under `lock`, puts the request
 *    on the ready list and wakes the loop with event_active(). After the
 *    DONE event it never touches the request again, so the loop may free
 *    it once it has seen DONE.
 *  - The loader thread loads the model (so /health answers 503 meanwhile)
 *    and wakes the loop when it is done.
 *  - A client that goes away while its request runs (EOF or an error on
 *    the socket, which stays readable during generation, or a stalled
 *    write) makes the connection call on_gone: the request forgets the
 *    connection and asks the engine to cancel, which stops it within one
 *    step; it is logged as 499 with the metrics it has.
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
#include "prometheus.h"
#include "request_parse.h"
#include "responses.h"
#include "sse.h"

#include "ft/clock.h"
#include "ft/common.h"

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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum srv_state { STATE_LOADING, STATE_READY, STATE_FAILED };

/* Bounds of the HTTP layer (the body limit is --max-body-size). */
#define SRV_MAX_HEAD (32 * 1024)            /* request line + headers */
#define SRV_MAX_HEADERS 100
#define SRV_MAX_OUTPUT (8u << 20)           /* streamed bytes a client may leave unread */
#define SRV_MAX_CONNS 512
#define SRV_HARD_EXIT_SECONDS 10            /* after cancelling, stop waiting for slow clients */

struct srv_req;

struct srv {
    const struct ft_server_config *cfg;
    struct event_base *base;
    struct evconnlistener *listener;
    struct ft_conn_pool *pool;
    struct event *wake_ev;   /* the scheduler has news (ready list) */
    struct event *loaded_ev; /* the loader thread finished */
    struct event *sig_int, *sig_term;
    struct event *drain_ev;  /* --shutdown-timeout, then the hard exit */
    struct event *accept_ev; /* re-enables the listener after an accept error */
    int signals;             /* SIGINT/SIGTERM seen */
    bool cancelled;          /* in-flight requests were told to stop */
    struct srv_req *inflight; /* submitted, DONE not yet handled */
    int n_inflight;
    pthread_t loader;
    bool loader_started;
    atomic_int state;
    char load_error[768];
    struct ft_backend *backend; /* valid once state == STATE_READY */
    char model_id[256];
    long long started;
    struct ft_prom *prom;
    FILE *log;
    uint64_t rng; /* ids and default seeds */

    pthread_mutex_t lock;                 /* guards the ready list and every outbox */
    struct srv_req *ready_head, *ready_tail;
    int exit_status;
};

/* One generation request, from parsing to the last byte. */
struct srv_req {
    struct srv *srv;
    struct ft_request er; /* what the scheduler runs */
    struct ft_api_request api;
    int32_t *prompt;
    bool want_metrics;
    struct ft_resp_ctx ctx;
    char id[48];
    char remote[80];
    const char *endpoint; /* route path, static */

    /* Loop thread only. */
    struct ft_conn *conn;          /* NULL once the client is gone or answered */
    bool gone;                     /* the client went away first */
    struct evbuffer *text;         /* non-streaming: the completion so far */
    struct srv_req *prev, *next;   /* srv->inflight */

    /* Guarded by srv->lock: pieces of text as [uint32 len][bytes][NUL]. */
    char *outbox;
    size_t out_len, out_cap;
    bool oom;    /* an outbox append failed: the text is incomplete */
    bool done;   /* FT_EVENT_DONE arrived */
    bool queued; /* on the ready list */
    struct srv_req *ready_next;
};

static uint64_t next_random(struct srv *s) {
    /* splitmix64: ids only need to be unique, seeds only to differ. */
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- logging and counting of finished requests ---------------------------- */

static void record(struct srv *s, const char *remote, const char *method, const char *path, const char *endpoint,
                   int status, const char *finish, const struct ft_request_metrics *m, const char *error) {
    ft_prom_count_request(s->prom, endpoint, status);
    const struct ft_access_entry e = {remote, method, path, status, finish, m, error};
    ft_access_log_write(s->log, s->cfg->log_json ? FT_LOG_FORMAT_JSON : FT_LOG_FORMAT_TEXT, &e);
}

static const char *req_method(const struct ft_http_request *req) { return req ? req->method_name : "-"; }
static const char *req_path(const struct ft_http_request *req) { return req ? req->target : "-"; }

/* A whole response. Logged first: the connection frees req with the reply. */
static void reply(struct srv *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint,
                  int status, const char *content_type, const struct ft_http_header_out *extra, int n_extra,
                  const char *body, const char *error) {
    record(s, ft_conn_remote(c), req_method(req), req_path(req), endpoint, status, NULL, NULL, error);
    ft_conn_reply(c, status, content_type, extra, n_extra, body, body ? strlen(body) : 0);
}

/* An error answered right away (no generation), as an OpenAI error object. */
static void reply_error_h(struct srv *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint,
                          int status, const char *message, const char *param, const char *code,
                          const struct ft_http_header_out *extra, int n_extra) {
    char *body = ft_http_error_body(status, message, param, code);
    reply(s, c, req, endpoint, status, "application/json", extra, n_extra,
          body ? body
               : "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}",
          message);
    free(body);
}

static void reply_error(struct srv *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint,
                        int status, const char *message, const char *param, const char *code) {
    reply_error_h(s, c, req, endpoint, status, message, param, code, NULL, 0);
}

static void reply_json(struct srv *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint,
                       int status, const char *json) {
    reply(s, c, req, endpoint, status, "application/json", NULL, 0, json, NULL);
}

/* Shutting down and nothing left: end the loop. */
static void check_drained(struct srv *s) {
    if (s->signals && s->n_inflight == 0 && (!s->pool || ft_conn_pool_count(s->pool) == 0))
        event_base_loopexit(s->base, NULL);
}

/* ---- the engine's side: events from the scheduler thread ------------------- */

static void outbox_append(struct srv_req *r, const char *text, size_t len) {
    const size_t need = r->out_len + sizeof(uint32_t) + len + 1;
    if (len > UINT32_MAX || need < r->out_len) {
        r->oom = true;
        return;
    }
    if (need > r->out_cap) {
        size_t cap = r->out_cap ? r->out_cap : 256;
        while (cap < need)
            cap *= 2;
        char *p = realloc(r->outbox, cap);
        if (!p) {
            r->oom = true;
            return;
        }
        r->outbox = p;
        r->out_cap = cap;
    }
    uint32_t l = (uint32_t)len;
    memcpy(r->outbox + r->out_len, &l, sizeof(l));
    memcpy(r->outbox + r->out_len + sizeof(l), text, len);
    r->outbox[r->out_len + sizeof(l) + len] = '\0';
    r->out_len = need;
}

/* Runs on the scheduler thread; must not block. */
static void on_engine_event(void *ud, struct ft_request *er, enum ft_event ev, const char *text, size_t len) {
    struct srv *s = ud;
    struct srv_req *r = er->user;
    pthread_mutex_lock(&s->lock);
    if (ev == FT_EVENT_TEXT)
        outbox_append(r, text, len);
    else
        r->done = true;
    if (!r->queued) {
        r->queued = true;
        r->ready_next = NULL;
        if (s->ready_tail)
            s->ready_tail->ready_next = r;
        else
            s->ready_head = r;
        s->ready_tail = r;
    }
    pthread_mutex_unlock(&s->lock);
    /* r may be freed by the loop from here on: only s is used. */
    event_active(s->wake_ev, EV_READ, 0);
}

/* ---- the loop's side: requests in flight ----------------------------------- */

static void srv_req_free(struct srv_req *r) {
    if (!r)
        return;
    ft_api_request_free(&r->api);
    ft_request_timing_free(&r->er.timing);
    free(r->prompt);
    free(r->outbox);
    if (r->text)
        evbuffer_free(r->text);
    free(r);
}

static void inflight_add(struct srv *s, struct srv_req *r) {
    r->prev = NULL;
    r->next = s->inflight;
    if (s->inflight)
        s->inflight->prev = r;
    s->inflight = r;
    s->n_inflight++;
}

static void inflight_remove(struct srv *s, struct srv_req *r) {
    if (r->prev)
        r->prev->next = r->next;
    else
        s->inflight = r->next;
    if (r->next)
        r->next->prev = r->prev;
    s->n_inflight--;
}

/* The connection's on_gone: the client left before its answer was complete. */
static void on_client_gone(void *ud, void *active) {
    (void)ud;
    struct srv_req *r = active;
    r->gone = true;
    r->conn = NULL;
    atomic_store(&r->er.cancel, true);
}

static void send_piece(struct srv_req *r, const char *text) {
    if (!r->api.stream) {
        evbuffer_add(r->text, text, strlen(text));
        return;
    }
    if (!r->conn)
        return;
    char *chunk = ft_resp_chunk_text(&r->ctx, text);
    ft_sse_send(r->conn, chunk); /* on failure on_client_gone has run */
    free(chunk);
}

static void finish_request(struct srv *s, struct srv_req *r) {
    struct ft_request *er = &r->er;
    const struct ft_request_metrics *m = &er->metrics;
    int status = 200;
    const char *error = NULL;
    char msg[400];
    if (!r->gone && (er->finish == FT_FINISH_ERROR || er->finish == FT_FINISH_CANCELLED || r->oom)) {
        status = er->finish == FT_FINISH_CANCELLED ? 503 : 500;
        snprintf(msg, sizeof(msg), "%s",
                 er->finish == FT_FINISH_CANCELLED ? "the server is shutting down: the request was cancelled"
                 : r->oom                          ? "out of memory while streaming"
                                                   : er->error_msg);
        error = msg;
    }
    const struct ft_request_metrics *metrics = r->want_metrics ? m : NULL;
    if (r->conn && r->api.stream) {
        /* Each send may find the client gone (r->conn becomes NULL). */
        if (error) {
            char *body = ft_http_error_body(status, error, NULL, er->finish == FT_FINISH_CANCELLED ? "shutting_down" : NULL);
            ft_sse_send(r->conn, body);
            free(body);
        } else {
            char *c = ft_resp_chunk_finish(&r->ctx, er->finish);
            ft_sse_send(r->conn, c);
            free(c);
            if (r->conn && (r->api.include_usage || metrics)) {
                c = ft_resp_chunk_final(&r->ctx, r->api.include_usage ? m : NULL, metrics);
                ft_sse_send(r->conn, c);
                free(c);
            }
        }
        if (r->conn)
            ft_sse_finish(r->conn);
        /* A stream has sent its 200 already; the log keeps the real outcome. */
    } else if (r->conn) {
        if (error) {
            char *body = ft_http_error_body(status, error, NULL, er->finish == FT_FINISH_CANCELLED ? "shutting_down" : NULL);
            const char *fallback = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
            ft_conn_reply(r->conn, status, "application/json", NULL, 0, body ? body : fallback,
                          strlen(body ? body : fallback));
            free(body);
        } else {
            evbuffer_add(r->text, "", 1);
            const char *text = (const char *)evbuffer_pullup(r->text, -1);
            char *body = ft_resp_completion(&r->ctx, text ? text : "", er->finish, m, metrics);
            if (!body) {
                status = 500;
                error = "out of memory";
                body = ft_http_error_body(status, error, NULL, NULL);
            }
            ft_conn_reply(r->conn, status, "application/json", NULL, 0, body ? body : "", body ? strlen(body) : 0);
            free(body);
        }
    }
    r->conn = NULL;
    if (r->gone) {
        status = 499; /* nginx's "client closed request" */
        error = NULL;
    }
    if (er->finish != FT_FINISH_ERROR)
        ft_prom_observe(s->prom, &er->timing, m);
    const char *finish = er->finish == FT_FINISH_STOP || er->finish == FT_FINISH_LENGTH
                             ? ft_resp_finish_reason(er->finish)
                             : ft_finish_reason_name(er->finish);
    record(s, r->remote, "POST", r->endpoint, r->endpoint, status, finish, m, error);
    inflight_remove(s, r);
    srv_req_free(r); /* the scheduler never touches a request after its DONE */
    check_drained(s);
}

/* The scheduler has news: text for some requests, the end of others. */
static void on_wake(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct srv *s = arg;
    pthread_mutex_lock(&s->lock);
    struct srv_req *list = s->ready_head;
    s->ready_head = s->ready_tail = NULL;
    pthread_mutex_unlock(&s->lock);
    while (list) {
        struct srv_req *r = list;
        pthread_mutex_lock(&s->lock);
        list = r->ready_next;
        r->queued = false;
        char *box = r->outbox;
        size_t len = r->out_len;
        r->outbox = NULL;
        r->out_len = r->out_cap = 0;
        const bool done = r->done;
        pthread_mutex_unlock(&s->lock);
        for (size_t off = 0; off + sizeof(uint32_t) <= len;) {
            uint32_t l;
            memcpy(&l, box + off, sizeof(l));
            send_piece(r, box + off + sizeof(l));
            off += sizeof(l) + l + 1;
        }
        free(box);
        if (done)
            finish_request(s, r);
    }
}

/* ---- routes ------------------------------------------------------------------ */

static void handle_generate(struct srv *s, struct ft_conn *conn, const struct ft_http_request *req, const char *body,
                            size_t len, const char *endpoint, enum ft_api_endpoint ep) {
    if (s->signals) {
        reply_error(s, conn, req, endpoint, 503, "the server is shutting down", NULL, "shutting_down");
        return;
    }
    if (atomic_load(&s->state) != STATE_READY) {
        reply_error(s, conn, req, endpoint, 503, "the model is still loading; retry when GET /health answers 200",
                    NULL, "model_loading");
        return;
    }
    struct ft_backend *b = s->backend;
    struct srv_req *r = calloc(1, sizeof(*r));
    if (!r || (r->text = evbuffer_new()) == NULL) {
        srv_req_free(r);
        reply_error(s, conn, req, endpoint, 500, "out of memory", NULL, NULL);
        return;
    }
    struct ft_api_error err;
    int rc = ft_api_request_parse(body, len, ep, b->n_vocab, &r->api, &err);
    r->er.received = ft_clock_ticks(); /* DESIGN.md §3: received = body parsed */
    if (rc) {
        reply_error(s, conn, req, endpoint, err.status, err.message, err.param, err.code);
        srv_req_free(r);
        return;
    }
    if (r->api.model && strcmp(r->api.model, s->model_id) != 0 && strcmp(r->api.model, s->cfg->model_path) != 0) {
        char msg[480];
        snprintf(msg, sizeof(msg), "the model '%.200s' does not exist; this server serves '%.150s'", r->api.model,
                 s->model_id);
        reply_error(s, conn, req, endpoint, 404, msg, "model", "model_not_found");
        srv_req_free(r);
        return;
    }
    if (ft_backend_prompt(b, &r->api, &r->prompt, &r->er.n_prompt, &err)) {
        reply_error(s, conn, req, endpoint, err.status, err.message, err.param, err.code);
        srv_req_free(r);
        return;
    }
    r->srv = s;
    r->endpoint = endpoint;
    r->er.prompt = r->prompt;
    r->er.user = r;
    r->er.params.sampling = r->api.sampling;
    if (!r->api.seed_set)
        r->er.params.sampling.seed = next_random(s);
    r->er.params.max_tokens = r->api.max_tokens;
    r->er.params.ignore_eos = r->api.ignore_eos;
    r->er.params.stops = (const char *const *)r->api.stops;
    r->er.params.n_stops = r->api.n_stops;
    r->er.params.grammar = r->api.grammar;
    r->want_metrics = r->api.performance_metrics >= 0 ? r->api.performance_metrics == 1 : s->cfg->metrics_default;
    snprintf(r->id, sizeof(r->id), "%s%016llx", ep == FT_API_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)next_random(s));
    r->ctx = (struct ft_resp_ctx){ep, r->id, (long long)time(NULL), s->model_id, r->api.include_usage};
    snprintf(r->remote, sizeof(r->remote), "%s", ft_conn_remote(conn));

    ft_clear_error();
    if ((rc = ft_scheduler_submit(b->sched, &r->er))) {
        if (rc == FT_EFULL) {
            static const struct ft_http_header_out retry[] = {{"Retry-After", "1"}};
            reply_error_h(s, conn, req, endpoint, 503, "the server is busy: too many requests are waiting", NULL,
                          "server_busy", retry, 1);
        } else {
            reply_error(s, conn, req, endpoint, 400, ft_last_error(), NULL, NULL);
        }
        srv_req_free(r);
        return;
    }
    /* Events for r are handled on this thread, after this function returns. */
    inflight_add(s, r);
    r->conn = conn;
    ft_conn_set_active(conn, r);
    if (r->api.stream) {
        ft_sse_start(conn);
        if (ep == FT_API_CHAT) {
            char *c = ft_resp_chunk_role(&r->ctx);
            ft_sse_send(conn, c);
            free(c);
        }
    }
}

static void handle_models(struct srv *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint) {
    char *json = ft_resp_models(s->model_id, s->started);
    if (json)
        reply_json(s, c, req, endpoint, 200, json);
    else
        reply_error(s, c, req, endpoint, 500, "out of memory", NULL, NULL);
    free(json);
}

static void handle_health(struct srv *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint) {
    const int st = atomic_load(&s->state);
    reply_json(s, c, req, endpoint, st == STATE_READY ? 200 : 503,
               st == STATE_READY ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}");
}

static void handle_metrics(struct srv *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint) {
    struct ft_scheduler_stats st;
    const bool ready = atomic_load(&s->state) == STATE_READY;
    if (ready)
        ft_scheduler_get_stats(s->backend->sched, &st);
    struct evbuffer *b = evbuffer_new();
    if (b) {
        ft_prom_render(s->prom, ready ? &st : NULL, b);
        evbuffer_add(b, "", 1);
    }
    const char *text = b ? (const char *)evbuffer_pullup(b, -1) : NULL;
    if (text)
        reply(s, c, req, endpoint, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, 0, text, NULL);
    else
        reply_error(s, c, req, endpoint, 500, "out of memory", NULL, NULL);
    if (b)
        evbuffer_free(b);
}

enum route_kind { R_CHAT, R_COMPLETIONS, R_MODELS, R_HEALTH, R_METRICS };

static const struct route {
    const char *path;
    enum ft_http_method method;
    enum route_kind kind;
} k_routes[] = {
    {"/v1/chat/completions", FT_HTTP_POST, R_CHAT},
    {"/v1/completions", FT_HTTP_POST, R_COMPLETIONS},
    {"/v1/models", FT_HTTP_GET, R_MODELS},
    {"/health", FT_HTTP_GET, R_HEALTH},
    {"/metrics", FT_HTTP_GET, R_METRICS},
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

static bool authorized(const struct srv *s, const struct ft_http_request *req) {
    if (!s->cfg->api_key)
        return true;
    const char *h = ft_http_field(req, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    return key_matches(h, s->cfg->api_key);
}

/* The connection's on_request: a complete request to route. */
static void on_request(void *ud, struct ft_conn *c, const struct ft_http_request *req, const char *body,
                       size_t body_len) {
    struct srv *s = ud;
    const char *path = req->path;
    /* HEAD is GET without the body (the connection leaves it out). */
    const enum ft_http_method method = req->method == FT_HTTP_HEAD ? FT_HTTP_GET : req->method;
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
    /* /health stays open so a load balancer needs no key. */
    if (!(route && route->kind == R_HEALTH) && !authorized(s, req)) {
        static const struct ft_http_header_out h[] = {{"WWW-Authenticate", "Bearer"}};
        reply_error_h(s, c, req, endpoint, 401, "missing or incorrect API key: send it as 'Authorization: Bearer KEY'",
                      NULL, "invalid_api_key", h, 1);
        return;
    }
    if (!path_known) {
        snprintf(msg, sizeof(msg), "unknown URL: %s %.200s", req->method_name, path);
        reply_error(s, c, req, endpoint, 404, msg, NULL, "unknown_url");
        return;
    }
    if (!route) {
        const char *allowed = "GET, HEAD";
        for (size_t i = 0; i < FT_ARRAY_LEN(k_routes); i++)
            if (!strcmp(path, k_routes[i].path) && k_routes[i].method == FT_HTTP_POST)
                allowed = "POST";
        const struct ft_http_header_out h[] = {{"Allow", allowed}};
        snprintf(msg, sizeof(msg), "method %s is not allowed for %s (use %s)", req->method_name, path, allowed);
        reply_error_h(s, c, req, endpoint, 405, msg, NULL, "method_not_allowed", h, 1);
        return;
    }
    switch (route->kind) {
    case R_CHAT: handle_generate(s, c, req, body, body_len, route->path, FT_API_CHAT); break;
    case R_COMPLETIONS: handle_generate(s, c, req, body, body_len, route->path, FT_API_COMPLETIONS); break;
    case R_MODELS: handle_models(s, c, req, route->path); break;
    case R_HEALTH: handle_health(s, c, req, route->path); break;
    case R_METRICS: handle_metrics(s, c, req, route->path); break;
    }
}

/* The connection's on_refused: what could not be read as a request. */
static void on_refused(void *ud, struct ft_conn *c, const struct ft_http_request *req, int status, const char *message,
                       const char *code) {
    struct srv *s = ud;
    struct ft_http_header_out h[1];
    int n = 0;
    if (status == 405)
        h[n++] = (struct ft_http_header_out){"Allow", "GET, HEAD, POST"};
    else if (status == 503)
        h[n++] = (struct ft_http_header_out){"Retry-After", "1"};
    reply_error_h(s, c, req, "other", status, message, NULL, code, h, n);
}

static void on_conn_closed(void *ud) { check_drained(ud); }

/* ---- start-up and shut-down ---------------------------------------------------- */

static void *loader_main(void *arg) {
    struct srv *s = arg;
    struct ft_backend *b = NULL;
    int rc = ft_backend_load(s->cfg, on_engine_event, s, &b, s->load_error, sizeof(s->load_error));
    s->backend = b;
    atomic_store(&s->state, rc ? STATE_FAILED : STATE_READY); /* publishes backend */
    event_active(s->loaded_ev, EV_READ, 0);
    return NULL;
}

static void on_loaded(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct srv *s = arg;
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
static void cancel_inflight(struct srv *s) {
    if (s->cancelled)
        return;
    s->cancelled = true;
    if (s->n_inflight)
        fprintf(stderr, "ft serve: cancelling %d request%s in flight\n", s->n_inflight, s->n_inflight == 1 ? "" : "s");
    for (struct srv_req *r = s->inflight; r; r = r->next)
        atomic_store(&r->er.cancel, true);
    /* Clients that do not read their answers do not hold the exit up long. */
    const struct timeval tv = {SRV_HARD_EXIT_SECONDS, 0};
    event_add(s->drain_ev, &tv);
}

static void on_drain_timeout(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct srv *s = arg;
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
    struct srv *s = arg;
    const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (s->signals++) {
        fprintf(stderr, "ft serve: %s again: cancelling now\n", name);
        cancel_inflight(s);
        check_drained(s);
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
    check_drained(s);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg) {
    (void)l;
    struct srv *s = arg;
    ft_conn_pool_accept(s->pool, fd, sa, salen);
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct srv *s = arg;
    if (!s->signals)
        evconnlistener_enable(s->listener);
}

/* accept() failed (out of descriptors, most likely): pause accepting for a
 * moment instead of spinning on the readable listening socket. */
static void on_accept_error(struct evconnlistener *l, void *arg) {
    struct srv *s = arg;
    evconnlistener_disable(l);
    const struct timeval tv = {0, 100 * 1000};
    event_add(s->accept_ev, &tv);
}

/* Listen on host:port (numeric or a name getaddrinfo knows). */
static struct evconnlistener *listen_on(struct srv *s, const char *host, int port) {
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

static void model_id_from_path(const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, cap, "%s", base);
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf"))
        out[n - 5] = '\0';
}

int ft_server_run(const struct ft_server_config *cfg) {
    struct srv s_, *s = &s_;
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
        .max_output = SRV_MAX_OUTPUT,
        .max_conns = SRV_MAX_CONNS,
    };
    const struct ft_conn_handler handler = {on_request, on_refused, on_client_gone, on_conn_closed};
    if (evthread_use_pthreads() != 0 || !(s->base = event_base_new()) ||
        !(s->pool = ft_conn_pool_new(s->base, &ccfg, &handler, s)) || !(s->prom = ft_prom_new()) ||
        !(s->wake_ev = event_new(s->base, -1, 0, on_wake, s)) ||
        !(s->loaded_ev = event_new(s->base, -1, 0, on_loaded, s)) ||
        !(s->drain_ev = evtimer_new(s->base, on_drain_timeout, s)) ||
        !(s->accept_ev = evtimer_new(s->base, on_accept_resume, s)) ||
        !(s->sig_int = evsignal_new(s->base, SIGINT, on_signal, s)) ||
        !(s->sig_term = evsignal_new(s->base, SIGTERM, on_signal, s))) {
        fprintf(stderr, "ft serve: cannot set up the event loop\n");
        goto done;
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
        on_wake(-1, 0, s);
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
    ft_prom_free(s->prom);
    pthread_mutex_destroy(&s->lock);
    libevent_global_shutdown();
    return status;
}
