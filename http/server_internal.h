/* What the server's files share (http/server.c, http/generation.c,
 * http/completion.c): the server's state and the replies and checks every
 * route makes. The loop thread owns all of it, except what a field says
 * otherwise of. */
#ifndef FT_HTTP_SERVER_INTERNAL_H
#define FT_HTTP_SERVER_INTERNAL_H

#include "ft/server.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct event;
struct event_base;
struct evconnlistener;
struct ft_backend;
struct ft_conn;
struct ft_conn_pool;
struct ft_generation;
struct ft_http_header_out;
struct ft_http_request;
struct ft_otlp;
struct ft_prom;
struct ft_request_metrics;
struct ft_request_ring;

struct ft_server {
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
    struct ft_generation *inflight; /* submitted, DONE not yet handled */
    int n_inflight;
    pthread_t loader;
    bool loader_started;
    atomic_int state;
    char load_error[768];
    struct ft_backend *backend; /* valid once state == STATE_READY */
    char model_id[256];
    long long started;
    struct ft_prom *prom;
    struct ft_otlp *otlp; /* NULL without --otlp-endpoint */
    struct ft_request_ring *ring; /* the last requests, for GET /v1/requests/recent */
    FILE *log;
    uint64_t rng; /* ids and default seeds */

    pthread_mutex_t lock;                 /* guards the ready list and every outbox */
    struct ft_generation *ready_head, *ready_tail;
    int exit_status;
};

/* ids and default seeds (splitmix64): ids only need to be unique, seeds
 * only to differ. */
uint64_t ft_server_random(struct ft_server *s);

/* A finished request: counted for Prometheus and written to the access
 * log (finish, m, error and prompt may be NULL). */
void ft_server_record(struct ft_server *s, const char *remote, const char *method, const char *path,
                      const char *endpoint, int status, const char *finish, const struct ft_request_metrics *m,
                      const char *error, const char *prompt);

/* An error answered right away (no generation), as an OpenAI error object,
 * with extra[0..n_extra) as headers; logged first (the connection frees req
 * with the reply). */
void ft_server_reply_error_h(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req,
                             const char *endpoint, int status, const char *message, const char *param,
                             const char *code, const struct ft_http_header_out *extra, int n_extra);
void ft_server_reply_error(struct ft_server *s, struct ft_conn *c, const struct ft_http_request *req,
                           const char *endpoint, int status, const char *message, const char *param,
                           const char *code);

/* Requests that need the model: false after answering 503 when it is not
 * loaded yet or the server is shutting down. */
bool ft_server_engine_ready(struct ft_server *s, struct ft_conn *conn, const struct ft_http_request *req,
                            const char *endpoint);
/* The request's `model` names this server's (NULL: not given, also fine);
 * else answer 404 with ft_server_reply_model_not_found(). */
bool ft_server_model_matches(const struct ft_server *s, const char *model);
void ft_server_reply_model_not_found(struct ft_server *s, struct ft_conn *conn, const struct ft_http_request *req,
                                     const char *endpoint, const char *model);

/* Shutting down and nothing left: end the loop. Called whenever a request
 * or a connection ends. */
void ft_server_check_drained(struct ft_server *s);

#endif
