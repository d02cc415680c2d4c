/* The HTTP server: one libevent (evhttp) loop thread that parses and
 * validates requests, hands generations to the engine's scheduler thread,
 * and streams what comes back (DESIGN.md §2).
 *
 * Threads and ownership:
 *  - The loop thread owns every evhttp object and every struct srv_req; it
 *    alone frees them.
 *  - The scheduler thread reports through on_engine_event(): it appends the
 *    released text to the request's outbox under `lock`, puts the request
 *    on the ready list and wakes the loop with event_active(). After the
 *    DONE event it never touches the request again, so the loop may free
 *    it once it has seen DONE.
 *  - The loader thread loads the model (so /health answers 503 meanwhile)
 *    and wakes the loop when it is done.
 *  - A client that goes away while its request runs fires the connection's
 *    close callback: the request forgets its evhttp handles and asks the
 *    engine to cancel; its metrics are still logged and counted.
 */
#include "ft/server.h"

#include "access_log.h"
#include "backend.h"
#include "errors.h"
#include "prometheus.h"
#include "request_parse.h"
#include "responses.h"
#include "sse.h"

#include "ft/clock.h"
#include "ft/common.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum srv_state { STATE_LOADING, STATE_READY, STATE_FAILED };



struct srv_req;

struct srv {
    const struct ft_server_config *cfg;
    struct event_base *base;
    struct evhttp *http;
    struct event *wake_ev;   /* the scheduler has news (ready list) */
    struct event *loaded_ev; /* the loader thread finished */
    struct event *sig_int, *sig_term;
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
    struct evhttp_request *req;
    bool gone;                     /* the client went away: req is detached */
    struct evhttp_connection *conn;
    struct evbuffer *text;         /* non-streaming: the completion so far */

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

static void peer_name(struct evhttp_request *req, char *buf, size_t cap) {
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    char *addr = NULL;
    ev_uint16_t port = 0;
    if (c)
        evhttp_connection_get_peer(c, &addr, &port);
    snprintf(buf, cap, "%s:%u", addr ? addr : "-", (unsigned)port);
}

static const char *method_name(enum evhttp_cmd_type m) {
    switch (m) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH: return "PATCH";
    default: return "?";
    }
}

/* ---- logging and counting of finished requests ---------------------------- */

static void record(struct srv *s, const char *remote, const char *method, const char *path, const char *endpoint,
                   int status, const char *finish, const struct ft_request_metrics *m, const char *error) {
    ft_prom_count_request(s->prom, endpoint, status);
    const struct ft_access_entry e = {remote, method, path, status, finish, m, error};
    ft_access_log_write(s->log, s->cfg->log_json ? FT_LOG_FORMAT_JSON : FT_LOG_FORMAT_TEXT, &e);
}

/* An error answered right away (no generation). */
static void reply_error(struct srv *s, struct evhttp_request *req, const char *endpoint, int status,
                        const char *message, const char *param, const char *code) {
    char remote[80];
    peer_name(req, remote, sizeof(remote));
    const char *path = evhttp_request_get_uri(req);
    ft_http_send_error(req, status, message, param, code);
    record(s, remote, method_name(evhttp_request_get_command(req)), path ? path : "-", endpoint, status, NULL, NULL,
           message);
}

static void reply_json(struct srv *s, struct evhttp_request *req, const char *endpoint, int status, const char *json) {
    char remote[80];
    peer_name(req, remote, sizeof(remote));
    struct evbuffer *b = evbuffer_new();
    if (b && json)
        evbuffer_add(b, json, strlen(json));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply(req, status, ft_http_reason(status), b);
    if (b)
        evbuffer_free(b);
    const char *path = evhttp_request_get_uri(req);
    record(s, remote, method_name(evhttp_request_get_command(req)), path ? path : "-", endpoint, status, NULL, NULL,
           NULL);
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

/* evhttp calls this while it frees the connection. On a network error
 * (EOF, timeout) during a reply we have not finished, evhttp 2.1 has already
 * detached the request from the connection and left it to us to free, so
 * the request stays valid: we stop writing to it and free it at the end. */
static void on_client_gone(struct evhttp_connection *conn, void *arg) {
    (void)conn;
    struct srv_req *r = arg;
    r->gone = true;
    r->conn = NULL;
    atomic_store(&r->er.cancel, true);
}

/* Detach from the connection before the last bytes go out: evhttp may free
 * the request (and the connection) while sending them. */
static struct evhttp_request *take_req(struct srv_req *r) {
    struct evhttp_request *req = r->req;
    if (r->conn) {
        evhttp_connection_set_closecb(r->conn, NULL, NULL);
        evhttp_connection_set_timeout(r->conn, r->srv->cfg->timeout_s); /* idle keep-alive again */
    }
    r->req = NULL;
    r->conn = NULL;
    return req;
}

static void send_piece(struct srv_req *r, const char *text) {
    if (!r->api.stream) {
        evbuffer_add(r->text, text, strlen(text));
        return;
    }
    if (!r->req || r->gone)
        return;
    char *chunk = ft_resp_chunk_text(&r->ctx, text);
    ft_sse_send(r->req, chunk);
    free(chunk);
}

static void finish_request(struct srv *s, struct srv_req *r) {
    struct ft_request *er = &r->er;
    const struct ft_request_metrics *m = &er->metrics;
    const char *method = "POST";
    int status = 200;
    const char *error = NULL;
    char msg[400];
    if (r->gone) {
        status = 499; /* nginx's "client closed request" */
        if (r->req)
            evhttp_request_free(r->req);
        r->req = NULL;
    } else if (er->finish == FT_FINISH_ERROR || er->finish == FT_FINISH_CANCELLED || r->oom) {
        status = er->finish == FT_FINISH_CANCELLED ? 503 : 500;
        snprintf(msg, sizeof(msg), "%s",
                 er->finish == FT_FINISH_CANCELLED ? "the server is shutting down"
                 : r->oom                          ? "out of memory while streaming"
                                                   : er->error_msg);
        error = msg;
    }
    struct evhttp_request *req = take_req(r);
    const struct ft_request_metrics *metrics = r->want_metrics ? m : NULL;
    if (req && r->api.stream) {
        if (error) {
            char *body = ft_http_error_body(status, error, NULL, NULL);
            ft_sse_send(req, body);
            free(body);
        } else {
            char *c = ft_resp_chunk_finish(&r->ctx, er->finish);
            ft_sse_send(req, c);
            free(c);
            if (r->api.include_usage || metrics) {
                c = ft_resp_chunk_final(&r->ctx, r->api.include_usage ? m : NULL, metrics);
                ft_sse_send(req, c);
                free(c);
            }
        }
        ft_sse_finish(req);
        /* A stream has sent its 200 already; the log keeps the real outcome. */
    } else if (req) {
        if (error) {
            ft_http_send_error(req, status, error, NULL, NULL);
        } else {
            evbuffer_add(r->text, "", 1);
            const char *text = (const char *)evbuffer_pullup(r->text, -1);
            char *body = ft_resp_completion(&r->ctx, text ? text : "", er->finish, m, metrics);
            struct evbuffer *b = evbuffer_new();
            if (b && body)
                evbuffer_add(b, body, strlen(body));
            evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
            evhttp_send_reply(req, body ? 200 : 500, body ? "OK" : "Internal Server Error", b);
            if (b)
                evbuffer_free(b);
            free(body);
        }
    }
    if (er->finish != FT_FINISH_ERROR)
        ft_prom_observe(s->prom, &er->timing, m);
    const char *finish = er->finish == FT_FINISH_STOP || er->finish == FT_FINISH_LENGTH
                             ? ft_resp_finish_reason(er->finish)
                             : ft_finish_reason_name(er->finish);
    record(s, r->remote, method, r->endpoint, r->endpoint, status, finish, m, error);
    srv_req_free(r);
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

static void handle_generate(struct srv *s, struct evhttp_request *req, const char *endpoint,
                            enum ft_api_endpoint ep) {
    if (atomic_load(&s->state) != STATE_READY) {
        reply_error(s, req, endpoint, 503, "the model is still loading; retry when GET /health answers 200", NULL,
                    "model_loading");
        return;
    }
    struct ft_backend *b = s->backend;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    const size_t len = evbuffer_get_length(in);
    if (len > s->cfg->max_body) {
        char msg[160];
        snprintf(msg, sizeof(msg), "the request body has %zu bytes; the limit is %zu (--max-body-size)", len,
                 s->cfg->max_body);
        reply_error(s, req, endpoint, 413, msg, NULL, "request_too_large");
        return;
    }
    struct srv_req *r = calloc(1, sizeof(*r));
    char *body = malloc(len + 1);
    if (!r || !body || (r->text = evbuffer_new()) == NULL) {
        free(body);
        srv_req_free(r);
        reply_error(s, req, endpoint, 500, "out of memory", NULL, NULL);
        return;
    }
    evbuffer_copyout(in, body, len);
    body[len] = '\0';
    struct ft_api_error err;
    int rc = ft_api_request_parse(body, len, ep, b->n_vocab, &r->api, &err);
    free(body);
    r->er.received = ft_clock_ticks(); /* DESIGN.md §3: received = body parsed */
    if (rc) {
        reply_error(s, req, endpoint, err.status, err.message, err.param, err.code);
        srv_req_free(r);
        return;
    }
    if (r->api.model && strcmp(r->api.model, s->model_id) != 0 && strcmp(r->api.model, s->cfg->model_path) != 0) {
        char msg[480];
        snprintf(msg, sizeof(msg), "the model '%.200s' does not exist; this server serves '%.150s'", r->api.model,
                 s->model_id);
        reply_error(s, req, endpoint, 404, msg, "model", "model_not_found");
        srv_req_free(r);
        return;
    }
    if (ft_backend_prompt(b, &r->api, &r->prompt, &r->er.n_prompt, &err)) {
        reply_error(s, req, endpoint, err.status, err.message, err.param, err.code);
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
    r->er.params.stops = (const char *const *)r->api.stops;
    r->er.params.n_stops = r->api.n_stops;
    r->want_metrics = r->api.performance_metrics >= 0 ? r->api.performance_metrics == 1 : s->cfg->metrics_default;
    snprintf(r->id, sizeof(r->id), "%s%016llx", ep == FT_API_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)next_random(s));
    r->ctx = (struct ft_resp_ctx){ep, r->id, (long long)time(NULL), s->model_id, r->api.include_usage};
    peer_name(req, r->remote, sizeof(r->remote));

    ft_clear_error();
    if ((rc = ft_scheduler_submit(b->sched, &r->er))) {
        if (rc == FT_EFULL)
            reply_error(s, req, endpoint, 503, "the server is busy: too many requests are waiting", NULL,
                        "server_busy");
        else
            reply_error(s, req, endpoint, 400, ft_last_error(), NULL, NULL);
        srv_req_free(r);
        return;
    }
    /* Events for r are handled on this thread, after this function returns. */
    r->req = req;
    r->conn = evhttp_request_get_connection(req);
    if (r->conn) {
        evhttp_connection_set_closecb(r->conn, on_client_gone, r);
        /* A long prefill sends nothing for a while: the read timeout that
         * closes idle keep-alive connections must not end this request. */
        struct bufferevent *bev = evhttp_connection_get_bufferevent(r->conn);
        const struct timeval wt = {s->cfg->timeout_s, 0};
        if (bev)
            bufferevent_set_timeouts(bev, NULL, &wt);
    }
    if (r->api.stream) {
        ft_sse_start(req);
        if (ep == FT_API_CHAT) {
            char *c = ft_resp_chunk_role(&r->ctx);
            ft_sse_send(req, c);
            free(c);
        }
    }
}

static void handle_models(struct srv *s, struct evhttp_request *req, const char *endpoint) {
    char *json = ft_resp_models(s->model_id, s->started);
    reply_json(s, req, endpoint, json ? 200 : 500, json);
    free(json);
}

static void handle_health(struct srv *s, struct evhttp_request *req, const char *endpoint) {
    const int st = atomic_load(&s->state);
    reply_json(s, req, endpoint, st == STATE_READY ? 200 : 503,
               st == STATE_READY ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}");
}

static void handle_metrics(struct srv *s, struct evhttp_request *req, const char *endpoint) {
    struct ft_scheduler_stats st;
    const bool ready = atomic_load(&s->state) == STATE_READY;
    if (ready)
        ft_scheduler_get_stats(s->backend->sched, &st);
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        reply_error(s, req, endpoint, 500, "out of memory", NULL, NULL);
        return;
    }
    ft_prom_render(s->prom, ready ? &st : NULL, b);
    char remote[80];
    peer_name(req, remote, sizeof(remote));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
    record(s, remote, "GET", endpoint, endpoint, 200, NULL, NULL, NULL);
}

enum route_kind { R_CHAT, R_COMPLETIONS, R_MODELS, R_HEALTH, R_METRICS };

static const struct route {
    const char *path;
    enum evhttp_cmd_type method;
    enum route_kind kind;
} k_routes[] = {
    {"/v1/chat/completions", EVHTTP_REQ_POST, R_CHAT},
    {"/v1/completions", EVHTTP_REQ_POST, R_COMPLETIONS},
    {"/v1/models", EVHTTP_REQ_GET, R_MODELS},
    {"/health", EVHTTP_REQ_GET, R_HEALTH},
    {"/metrics", EVHTTP_REQ_GET, R_METRICS},
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

static bool authorized(const struct srv *s, struct evhttp_request *req) {
    if (!s->cfg->api_key)
        return true;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    return key_matches(h, s->cfg->api_key);
}

static void on_request(struct evhttp_request *req, void *arg) {
    struct srv *s = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path)
        path = "/";
    const enum evhttp_cmd_type method = evhttp_request_get_command(req);
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
        evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer");
        reply_error(s, req, endpoint, 401,
                    "missing or incorrect API key: send it as 'Authorization: Bearer KEY'", NULL, "invalid_api_key");
        return;
    }
    if (!path_known) {
        snprintf(msg, sizeof(msg), "unknown URL: %s %.200s", method_name(method), path);
        reply_error(s, req, endpoint, 404, msg, NULL, "unknown_url");
        return;
    }
    if (!route) {
        const char *allowed = "GET";
        for (size_t i = 0; i < FT_ARRAY_LEN(k_routes); i++)
            if (!strcmp(path, k_routes[i].path))
                allowed = method_name(k_routes[i].method);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allowed);
        snprintf(msg, sizeof(msg), "method %s is not allowed for %s (use %s)", method_name(method), path, allowed);
        reply_error(s, req, endpoint, 405, msg, NULL, "method_not_allowed");
        return;
    }
    switch (route->kind) {
    case R_CHAT: handle_generate(s, req, route->path, FT_API_CHAT); break;
    case R_COMPLETIONS: handle_generate(s, req, route->path, FT_API_COMPLETIONS); break;
    case R_MODELS: handle_models(s, req, route->path); break;
    case R_HEALTH: handle_health(s, req, route->path); break;
    case R_METRICS: handle_metrics(s, req, route->path); break;
    }
}

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

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    (void)what;
    struct srv *s = arg;
    fprintf(stderr, "ft serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    event_base_loopexit(s->base, NULL);
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
    if (evthread_use_pthreads() != 0 || !(s->base = event_base_new()) || !(s->http = evhttp_new(s->base)) ||
        !(s->prom = ft_prom_new()) || !(s->wake_ev = event_new(s->base, -1, 0, on_wake, s)) ||
        !(s->loaded_ev = event_new(s->base, -1, 0, on_loaded, s)) ||
        !(s->sig_int = evsignal_new(s->base, SIGINT, on_signal, s)) ||
        !(s->sig_term = evsignal_new(s->base, SIGTERM, on_signal, s))) {
        fprintf(stderr, "ft serve: cannot set up the event loop\n");
        goto done;
    }
    event_add(s->sig_int, NULL);
    event_add(s->sig_term, NULL);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    /* evhttp answers bodies above its own cap with an HTML page before any
     * callback sees them; the cap sits above --max-body-size so that every
     * body up to it gets our OpenAI-style 413. */
    const size_t transport_cap = cfg->max_body > ((size_t)1 << 40) ? cfg->max_body : cfg->max_body * 2 + 65536;
    evhttp_set_max_body_size(s->http, (ev_ssize_t)transport_cap);
    evhttp_set_max_headers_size(s->http, 64 * 1024);
    evhttp_set_timeout(s->http, cfg->timeout_s);
    evhttp_set_gencb(s->http, on_request, s);
    struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(s->http, cfg->host, (ev_uint16_t)cfg->port);
    if (!sock) {
        fprintf(stderr, "ft serve: cannot listen on %s:%d (in use, or not an address of this machine)\n", cfg->host,
                cfg->port);
        goto done;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int port = cfg->port;
    if (getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl) == 0)
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
    if (s->http)
        evhttp_free(s->http);
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
