/* HTTP/1.1 connections (http/conn.h). */
#include "conn.h"

#include "errors.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* After a response that closes the connection, unread request bytes are
 * read and dropped for this long after our FIN, so the client sees the
 * response instead of a reset (a 413 arrives while the body is still
 * being sent). */
#define LINGER_SECONDS 2

enum conn_state {
    C_READ_HEAD, /* waiting for (the rest of) a request head; idle when no byte came yet */
    C_READ_BODY, /* head parsed, Content-Length bytes to come */
    C_BUSY,      /* the handler has the request (or a refusal) and answers it */
    C_CLOSING,   /* the last response is being written */
    C_LINGER,    /* written and half-closed: dropping input until EOF or the linger timer */
    C_DEAD,      /* freed by the next kick */
};

struct ft_conn {
    struct ft_conn_pool *pool;
    struct ft_conn *prev, *next;
    struct bufferevent *bev;
    struct event *timer; /* head deadline, body stall, idle keep-alive, linger */
    struct event *kick;  /* deferred work: parse pipelined input, or free */
    enum conn_state state;
    char remote[80];

    struct ft_http_parser parser;
    struct ft_http_request req; /* valid from C_READ_BODY until the response ends */
    char *body;
    bool got_bytes;   /* the current request has started arriving */
    uint64_t idle_seq; /* when it last became idle, in pool->idle_clock ticks: the lowest goes first */
    bool close_after; /* no keep-alive after the current response */
    bool chunked;     /* the streamed response uses chunked encoding */
    void *active;     /* the handler's mark for on_gone */
};

struct ft_conn_pool {
    struct event_base *base;
    struct ft_conn_config cfg;
    struct ft_conn_handler h;
    void *ud;
    struct ft_conn *head;
    int count;
    bool draining;
    uint64_t idle_clock;
    unsigned long long evicted;
};

static void arm_timer(struct ft_conn *c, int seconds) {
    const struct timeval tv = {seconds, 0};
    evtimer_add(c->timer, &tv);
}

/* Stop everything now; the kick frees the connection from the loop. */
static void close_later(struct ft_conn *c) {
    if (c->state == C_DEAD)
        return;
    c->state = C_DEAD;
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
    evtimer_del(c->timer);
    event_active(c->kick, EV_READ, 0);
}

/* The client is gone before the response ended. */
static void client_gone(struct ft_conn *c) {
    void *active = c->active;
    c->active = NULL;
    close_later(c);
    if (active && c->pool->h.on_gone)
        c->pool->h.on_gone(c->pool->ud, active);
}

static void destroy(struct ft_conn *c) {
    struct ft_conn_pool *p = c->pool;
    if (c->prev)
        c->prev->next = c->next;
    else
        p->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    p->count--;
    bufferevent_free(c->bev);
    event_free(c->timer);
    event_free(c->kick);
    ft_http_request_free(&c->req);
    free(c->body);
    free(c);
    if (p->h.on_closed)
        p->h.on_closed(p->ud);
}

static void refuse(struct ft_conn *c, const struct ft_http_request *req, int status, const char *message,
                   const char *code) {
    evtimer_del(c->timer);
    c->state = C_BUSY;
    c->close_after = true;
    c->pool->h.on_refused(c->pool->ud, c, req, status, message, code);
}

/* Parse what has arrived; hands a complete request to the handler. */
static void process_input(struct ft_conn *c) {
    struct ft_conn_pool *p = c->pool;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    if (c->state == C_READ_HEAD) {
        const size_t len = evbuffer_get_length(in);
        if (len == 0) {
            if (!c->got_bytes) {
                arm_timer(c, p->cfg.timeout_s); /* idle keep-alive */
                c->idle_seq = ++p->idle_clock;
            }
            return;
        }
        if (!c->got_bytes) {
            c->got_bytes = true;
            arm_timer(c, p->cfg.request_timeout_s); /* the whole head in time: no slow-loris */
        }
        const size_t n = len < p->cfg.limits.max_head + 1 ? len : p->cfg.limits.max_head + 1;
        const char *buf = (const char *)evbuffer_pullup(in, (ev_ssize_t)n);
        size_t head_len = 0;
        struct ft_http_error err;
        const enum ft_http_status st = buf ? ft_http_parse(&c->parser, buf, n, &c->req, &head_len, &err)
                                           : FT_HTTP_REFUSED;
        if (!buf)
            err = (struct ft_http_error){503, "server_busy", "out of memory reading the request"};
        if (st == FT_HTTP_NEED_MORE)
            return;
        if (st == FT_HTTP_REFUSED) {
            refuse(c, NULL, err.status, err.message, err.code);
            return;
        }
        evbuffer_drain(in, head_len);
        c->state = C_READ_BODY;
        arm_timer(c, p->cfg.request_timeout_s);
        if (c->req.expect_continue && c->req.content_length > evbuffer_get_length(in))
            bufferevent_write(c->bev, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    }
    if (c->state == C_READ_BODY) {
        const size_t cl = c->req.content_length;
        if (evbuffer_get_length(in) < cl)
            return;
        evtimer_del(c->timer);
        c->body = malloc(cl + 1);
        if (!c->body) {
            refuse(c, &c->req, 503, "out of memory for the request body", "server_busy");
            return;
        }
        evbuffer_remove(in, c->body, cl);
        c->body[cl] = '\0';
        c->state = C_BUSY;
        c->close_after = !c->req.keep_alive || p->draining;
        p->h.on_request(p->ud, c, &c->req, c->body, cl);
    }
}

static void on_read(struct bufferevent *bev, void *arg) {
    struct ft_conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    const struct ft_http_limits *l = &c->pool->cfg.limits;
    switch (c->state) {
    case C_READ_BODY:
        arm_timer(c, c->pool->cfg.request_timeout_s); /* progress: the stall clock restarts */
        /* fall through */
    case C_READ_HEAD: process_input(c); break;
    case C_BUSY:
        /* Pipelined bytes wait; past one whole request's worth, stop
         * reading (the socket then only tells us about a hang-up through
         * failing writes). */
        if (evbuffer_get_length(in) > l->max_head + l->max_body)
            bufferevent_disable(bev, EV_READ);
        break;
    case C_CLOSING:
    case C_LINGER: evbuffer_drain(in, evbuffer_get_length(in)); break;
    case C_DEAD: break;
    }
}

static void on_write(struct bufferevent *bev, void *arg) {
    struct ft_conn *c = arg;
    if (c->state != C_CLOSING)
        return;
    /* Everything is out: half-close and drop what the client still sends. */
    shutdown(bufferevent_getfd(bev), SHUT_WR);
    c->state = C_LINGER;
    evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
    bufferevent_enable(bev, EV_READ);
    arm_timer(c, LINGER_SECONDS);
}

static void on_event(struct bufferevent *bev, short what, void *arg) {
    (void)bev;
    struct ft_conn *c = arg;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)))
        return;
    if (c->state == C_BUSY) {
        client_gone(c); /* EOF, reset, or a write stalled for timeout_s */
    } else if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR) &&
               (c->state == C_READ_HEAD || c->state == C_READ_BODY) &&
               evbuffer_get_length(bufferevent_get_output(c->bev)) > 0) {
        /* The client half-closed after its last request: answers already
         * queued still go out before the connection closes. */
        evtimer_del(c->timer);
        c->state = C_CLOSING;
    } else {
        close_later(c);
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct ft_conn *c = arg;
    char msg[160];
    switch (c->state) {
    case C_READ_HEAD:
        if (!c->got_bytes) {
            close_later(c); /* idle keep-alive connection */
            return;
        }
        snprintf(msg, sizeof(msg), "the request head did not arrive within %d s (--request-timeout)",
                 c->pool->cfg.request_timeout_s);
        refuse(c, NULL, 408, msg, "request_timeout");
        break;
    case C_READ_BODY:
        snprintf(msg, sizeof(msg), "the request body stalled for %d s (--request-timeout)",
                 c->pool->cfg.request_timeout_s);
        refuse(c, &c->req, 408, msg, "request_timeout");
        break;
    case C_LINGER: close_later(c); break;
    case C_BUSY:
    case C_CLOSING:
    case C_DEAD: break;
    }
}

static void on_kick(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct ft_conn *c = arg;
    if (c->state == C_DEAD)
        destroy(c);
    else if (c->state == C_READ_HEAD)
        process_input(c);
}

/* ---- responses ------------------------------------------------------------------- */

static void write_head(struct ft_conn *c, int status, const char *content_type,
                       const struct ft_http_header_out *extra, int n_extra, const char *framing) {
    struct evbuffer *out = bufferevent_get_output(c->bev);
    evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\n", status, ft_http_reason(status));
    /* RFC 9110 §6.6.1: an origin server with a clock sends Date. */
    char date[64];
    struct tm tm;
    const time_t now = time(NULL);
    if (gmtime_r(&now, &tm) && strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm))
        evbuffer_add_printf(out, "Date: %s\r\n", date);
    if (content_type)
        evbuffer_add_printf(out, "Content-Type: %s\r\n", content_type);
    for (int i = 0; i < n_extra; i++)
        evbuffer_add_printf(out, "%s: %s\r\n", extra[i].name, extra[i].value);
    if (framing)
        evbuffer_add_printf(out, "%s\r\n", framing);
    const char *origin = c->state != C_READ_HEAD ? ft_conn_cors_origin(c->pool, &c->req) : NULL;
    if (origin)
        evbuffer_add_printf(out, "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n", origin);
    if (c->close_after)
        evbuffer_add_printf(out, "Connection: close\r\n");
    else if (c->req.minor == 0)
        evbuffer_add_printf(out, "Connection: keep-alive\r\n");
    evbuffer_add(out, "\r\n", 2);
}

/* The response is complete: next request, or close once it is written. */
static void end_request(struct ft_conn *c) {
    c->active = NULL;
    ft_http_request_free(&c->req);
    free(c->body);
    c->body = NULL;
    c->chunked = false;
    c->got_bytes = false;
    ft_http_parser_reset(&c->parser);
    if (c->close_after || c->pool->draining) {
        c->state = C_CLOSING; /* on_write half-closes when the output is empty */
        return;
    }
    c->state = C_READ_HEAD;
    bufferevent_enable(c->bev, EV_READ);
    event_active(c->kick, EV_READ, 0); /* a pipelined request may be waiting */
}

void ft_conn_reply(struct ft_conn *c, int status, const char *content_type, const struct ft_http_header_out *extra,
                   int n_extra, const char *body, size_t len) {
    if (c->state != C_BUSY)
        return;
    if (c->pool->draining)
        c->close_after = true;
    char framing[64];
    snprintf(framing, sizeof(framing), "Content-Length: %zu", len);
    /* RFC 9110 §8.6: no Content-Length on a 204; on a 304 it would have to
     * be the length of the 200's body, which is not known here. */
    const bool bodiless = status == 204 || status == 304;
    write_head(c, status, content_type, extra, n_extra, bodiless ? NULL : framing);
    if (len && !bodiless && c->req.method != FT_HTTP_HEAD)
        evbuffer_add(bufferevent_get_output(c->bev), body, len);
    end_request(c);
}

void ft_conn_stream_start(struct ft_conn *c, int status, const char *content_type,
                          const struct ft_http_header_out *extra, int n_extra) {
    if (c->state != C_BUSY)
        return;
    if (c->pool->draining)
        c->close_after = true;
    /* HTTP/1.0 has no chunked encoding: the end of the connection ends the body. */
    c->chunked = c->req.minor >= 1;
    if (!c->chunked)
        c->close_after = true;
    write_head(c, status, content_type, extra, n_extra, c->chunked ? "Transfer-Encoding: chunked" : NULL);
}

int ft_conn_stream_write(struct ft_conn *c, const char *data, size_t len) {
    if (c->state != C_BUSY)
        return -1;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (len == 0)
        return 0;
    if (c->chunked)
        evbuffer_add_printf(out, "%zx\r\n", len);
    evbuffer_add(out, data, len);
    if (c->chunked)
        evbuffer_add(out, "\r\n", 2);
    if (evbuffer_get_length(out) > c->pool->cfg.max_output) {
        client_gone(c);
        return -1;
    }
    return 0;
}

void ft_conn_stream_end(struct ft_conn *c) {
    if (c->state != C_BUSY)
        return;
    if (c->chunked)
        evbuffer_add(bufferevent_get_output(c->bev), "0\r\n\r\n", 5);
    end_request(c);
}

const char *ft_conn_remote(const struct ft_conn *c) { return c->remote; }

void ft_conn_set_active(struct ft_conn *c, void *active) { c->active = active; }

/* ---- the pool ------------------------------------------------------------------------ */

struct ft_conn_pool *ft_conn_pool_new(struct event_base *base, const struct ft_conn_config *cfg,
                                      const struct ft_conn_handler *h, void *ud) {
    struct ft_conn_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->base = base;
    p->cfg = *cfg;
    p->h = *h;
    p->ud = ud;
    return p;
}

void ft_conn_pool_free(struct ft_conn_pool *p) {
    if (!p)
        return;
    p->h.on_closed = NULL;
    while (p->head) {
        struct ft_conn *c = p->head;
        if (c->state == C_BUSY)
            client_gone(c);
        destroy(c);
    }
    free(p);
}

static void peer_string(const struct sockaddr *sa, char *buf, size_t cap) {
    char addr[INET6_ADDRSTRLEN] = "-";
    unsigned port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, addr, sizeof(addr));
        port = ntohs(a->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, addr, sizeof(addr));
        port = ntohs(a->sin6_port);
    }
    snprintf(buf, cap, "%s:%u", addr, port);
}

/* The connection idle the longest (no request coming in, nothing left to
 * write), or NULL. O(n), and only when the pool is full. */
static struct ft_conn *longest_idle(struct ft_conn_pool *p) {
    struct ft_conn *best = NULL;
    for (struct ft_conn *c = p->head; c; c = c->next)
        if (c->state == C_READ_HEAD && !c->got_bytes && !evbuffer_get_length(bufferevent_get_output(c->bev)) &&
            (!best || c->idle_seq < best->idle_seq))
            best = c;
    return best;
}

void ft_conn_pool_accept(struct ft_conn_pool *p, evutil_socket_t fd, const struct sockaddr *sa, int salen) {
    (void)salen;
    /* Full: the longest idle connection makes room. Nothing of it is on the
     * stack here (this is the listener's callback), so it goes at once. */
    if (p->count >= p->cfg.max_conns) {
        struct ft_conn *idle = longest_idle(p);
        if (idle) {
            destroy(idle);
            p->evicted++;
        }
    }
    /* Far over the limit, not even an answer: the descriptor table is the bound. */
    if (p->count >= 2 * p->cfg.max_conns) {
        evutil_closesocket(fd);
        return;
    }
    struct ft_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        evutil_closesocket(fd);
        return;
    }
    evutil_make_socket_nonblocking(fd);
    c->pool = p;
    c->bev = bufferevent_socket_new(p->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->timer = c->bev ? evtimer_new(p->base, on_timer, c) : NULL;
    c->kick = c->timer ? event_new(p->base, -1, 0, on_kick, c) : NULL;
    if (!c->kick) {
        if (c->timer)
            event_free(c->timer);
        if (c->bev)
            bufferevent_free(c->bev);
        else
            evutil_closesocket(fd);
        free(c);
        return;
    }
    peer_string(sa, c->remote, sizeof(c->remote));
    ft_http_parser_init(&c->parser, &p->cfg.limits);
    c->next = p->head;
    if (p->head)
        p->head->prev = c;
    p->head = c;
    p->count++;
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    const struct timeval wt = {p->cfg.timeout_s, 0};
    bufferevent_set_timeouts(c->bev, NULL, &wt);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    c->state = C_READ_HEAD;
    c->idle_seq = ++p->idle_clock;
    if (p->count > p->cfg.max_conns) {
        char msg[120];
        snprintf(msg, sizeof(msg), "the server has %d connections open, its limit; retry later", p->cfg.max_conns);
        refuse(c, NULL, 503, msg, "server_busy");
        return;
    }
    arm_timer(c, p->cfg.timeout_s);
}

void ft_conn_pool_drain(struct ft_conn_pool *p) {
    p->draining = true;
    for (struct ft_conn *c = p->head, *next; c; c = next) {
        next = c->next;
        if (c->state == C_READ_HEAD && !c->got_bytes)
            close_later(c);
        else if (c->state == C_READ_HEAD || c->state == C_READ_BODY)
            refuse(c, c->state == C_READ_BODY ? &c->req : NULL, 503, "the server is shutting down",
                   "shutting_down");
        else if (c->state == C_BUSY)
            c->close_after = true;
    }
}

int ft_conn_pool_count(const struct ft_conn_pool *p) { return p->count; }

const struct ft_conn_pool *ft_conn_pool_of(const struct ft_conn *c) { return c->pool; }

const char *ft_conn_cors_origin(const struct ft_conn_pool *p, const struct ft_http_request *req) {
    if (p->cfg.n_cors_origins == 0 || req->n_fields == 0)
        return NULL;
    const char *origin = ft_http_field(req, "Origin");
    if (!origin)
        return NULL;
    for (int i = 0; i < p->cfg.n_cors_origins; i++) {
        if (!strcmp(p->cfg.cors_origins[i], "*"))
            return "*";
        if (!strcmp(p->cfg.cors_origins[i], origin))
            return origin;
    }
    return NULL;
}

unsigned long long ft_conn_pool_evicted(const struct ft_conn_pool *p) { return p->evicted; }
