/* HTTP/1.1 connections on libevent bufferevents: reading requests with
 * http_parse.h under time and size limits, writing responses (whole, or
 * streamed with chunked transfer encoding), keep-alive and pipelining.
 *
 * Why not evhttp: libevent 2.1's evhttp answers oversize heads and bodies
 * with its own HTML page before any callback runs, and stops reading the
 * socket while a request is handled, so a client that leaves during a long
 * non-streaming generation goes unnoticed. Here the socket stays readable
 * for the whole request: EOF or a socket error at any time calls the
 * handler's on_gone, so the request can be cancelled at once. (A client
 * that half-closes its side while its request runs counts as gone, as
 * nginx treats it by default.)
 *
 * One request per connection is handled at a time; pipelined requests wait
 * in the input buffer (bounded: reading pauses above the limits) and are
 * parsed after the response to the previous one.
 *
 * Timeouts: an idle keep-alive connection closes silently after timeout_s;
 * a request head must be complete within request_timeout_s of its first
 * byte and a body may not stall for request_timeout_s (both: 408 and
 * close: slow-loris clients hold a slot briefly); a write that makes no
 * progress for timeout_s closes the connection (client gone). While a
 * request is handled there is no read timeout.
 *
 * Connection limit (max_conns): when it is reached, the connection idle
 * the longest (no request under way) is closed to make room, so idle
 * sockets never starve new requests; only when every connection is busy
 * is a new one answered 503. Past twice the limit sockets are closed
 * unanswered: the descriptor table is the bound.
 *
 * All functions run on the event-loop thread. A connection frees itself
 * (deferred, from the loop) once it is closed; the pool tracks them. */
#ifndef FT_HTTP_CONN_H
#define FT_HTTP_CONN_H

#include "http_parse.h"

#include <event2/util.h>
#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct ft_conn;
struct ft_conn_pool;

struct ft_conn_config {
    struct ft_http_limits limits;
    int timeout_s;         /* idle keep-alive, stalled write */
    int request_timeout_s; /* a request head from its first byte, a stalled body */
    size_t max_output;  /* bytes queued for a slow reader before it counts as gone */
    int max_conns;      /* open at once: the longest idle one makes room, else 503 */
    /* CORS: responses to a request whose Origin is listed (or when "*" is)
     * carry Access-Control-Allow-Origin. n_cors_origins 0: never. */
    const char *const *cors_origins;
    int n_cors_origins;
};

struct ft_http_header_out {
    const char *name, *value;
};

struct ft_conn_handler {
    /* A complete request. Answer it with ft_conn_reply() or ft_conn_stream_*
     * now or later; req and body stay valid until then. */
    void (*on_request)(void *ud, struct ft_conn *c, const struct ft_http_request *req, const char *body,
                       size_t body_len);
    /* The connection refuses what it read (malformed, too large, too slow,
     * server full): answer with ft_conn_reply() now; the connection closes
     * after it. req is NULL when the head was not parsed. */
    void (*on_refused)(void *ud, struct ft_conn *c, const struct ft_http_request *req, int status,
                       const char *message, const char *code);
    /* The client went away (or stalled) before the response to the request
     * marked with ft_conn_set_active() was complete; `active` is that mark.
     * The connection is unusable from now on. */
    void (*on_gone)(void *ud, void *active);
    /* A connection was freed (for shutdown: the pool may now be empty). */
    void (*on_closed)(void *ud);
};

struct ft_conn_pool *ft_conn_pool_new(struct event_base *base, const struct ft_conn_config *cfg,
                                      const struct ft_conn_handler *h, void *ud);
/* Closes every connection (on_gone for the active ones). Accepts NULL. */
void ft_conn_pool_free(struct ft_conn_pool *p);
/* Take over an accepted socket. */
void ft_conn_pool_accept(struct ft_conn_pool *p, evutil_socket_t fd, const struct sockaddr *sa, int salen);
/* Shutting down: idle connections close now, the others after their
 * current response; no keep-alive from here on. */
void ft_conn_pool_drain(struct ft_conn_pool *p);
int ft_conn_pool_count(const struct ft_conn_pool *p);
/* Idle connections closed to make room for new ones so far. */
unsigned long long ft_conn_pool_evicted(const struct ft_conn_pool *p);

const char *ft_conn_remote(const struct ft_conn *c); /* "127.0.0.1:50312" */
/* The value of Access-Control-Allow-Origin for req ("*" or its Origin), or
 * NULL when CORS is off or the origin is not allowed. */
const char *ft_conn_cors_origin(const struct ft_conn_pool *p, const struct ft_http_request *req);
const struct ft_conn_pool *ft_conn_pool_of(const struct ft_conn *c);
/* The mark on_gone reports (NULL: none). */
void ft_conn_set_active(struct ft_conn *c, void *active);

/* The whole response. content_type may be NULL (no body expected); a
 * HEAD request gets the headers only. Ends the request. */
void ft_conn_reply(struct ft_conn *c, int status, const char *content_type, const struct ft_http_header_out *extra,
                   int n_extra, const char *body, size_t len);
/* A streamed response: headers now, then pieces, then the end. Returns -1
 * from stream_write when the client cannot keep up (more than max_output
 * bytes queued): the connection is then closed and on_gone was called. */
void ft_conn_stream_start(struct ft_conn *c, int status, const char *content_type,
                          const struct ft_http_header_out *extra, int n_extra);
int ft_conn_stream_write(struct ft_conn *c, const char *data, size_t len);
void ft_conn_stream_end(struct ft_conn *c);

#endif
