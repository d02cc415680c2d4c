/* The generation path (http/generation.c): a request the scheduler runs,
 * from the POST that starts it to the last byte of its answer. */
#ifndef FT_HTTP_GENERATION_H
#define FT_HTTP_GENERATION_H

#include "request_parse.h"
#include "responses.h"

#include "ft/scheduler.h"
#include "ft/tool_calls.h"

#include <event2/util.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;
struct ft_conn;
struct ft_embd_request;
struct ft_reasoning_answer;
struct ft_http_request;
struct ft_server;

/* One choice of a generation (loop thread only). */
struct ft_generation_choice {
    struct evbuffer *text;      /* non-streaming: the completion so far */
    struct ft_token_logprob *lp; /* with logprobs: the tokens not yet answered (streaming: not yet sent) */
    int32_t n_lp, cap_lp;
    int64_t text_offset;        /* completions' logprobs: characters before the next token */
    bool finished;              /* streaming: its finish chunk is sent */
};

/* One generation (or embeddings) request, from parsing to the last byte. */
struct ft_generation {
    struct ft_server *srv;
    struct ft_request er; /* what the scheduler runs */
    struct ft_api_request api;
    struct ft_embd_request *embd; /* POST /v1/embeddings (er.embd is &embd->job); NULL for a generation */
    int32_t *prompt;
    bool want_metrics;
    struct ft_resp_ctx ctx;
    char id[48];
    char remote[80];
    const char *endpoint; /* route path, static */
    uint8_t trace_id[16], parent_span_id[8]; /* from traceparent; parent all zero: none */

    /* Loop thread only. */
    struct ft_conn *conn;                 /* NULL once the client is gone or answered */
    bool gone;                            /* the client went away first */
    struct ft_generation_choice *choices; /* api.n of them */
    bool tools;                           /* the answer is parsed for tool calls (ft_chat_tools_active; then n is 1) */
    struct ft_tool_stream ts;             /* streaming with tools: content passed on, a call held back */
    struct ft_reasoning_answer *reasoning; /* chat with a reasoning syntax: reasoning apart from content
                                              (http/reasoning.h); NULL otherwise */
    struct ft_generation *prev, *next;    /* srv->inflight */

    /* Guarded by srv->lock: pieces of text as [struct piece][bytes][NUL]. */
    char *outbox;
    size_t out_len, out_cap;
    bool oom;    /* an outbox append failed: the text is incomplete */
    bool done;   /* FT_EVENT_DONE arrived */
    bool queued; /* on the ready list */
    struct ft_generation *ready_next;
};

/* POST /v1/chat/completions (ep FT_API_CHAT) and /v1/completions: parse,
 * build the engine request (ft_backend_engine_request()), submit it and,
 * streaming, start the SSE stream; every refusal is answered here. */
void ft_generation_handle(struct ft_server *s, struct ft_conn *conn, const struct ft_http_request *req,
                          const char *body, size_t len, const char *endpoint, enum ft_api_endpoint ep);
/* POST /v1/embeddings (http/embeddings.h), through the same scheduler. */
void ft_generation_handle_embeddings(struct ft_server *s, struct ft_conn *conn, const struct ft_http_request *req,
                                     const char *body, size_t len, const char *endpoint);

/* The scheduler's event callback (ft_backend_load's on_event, ud the
 * server): runs on the scheduler thread and must not block. */
void ft_generation_on_event(void *ud, struct ft_request *er, enum ft_event ev, const char *text, size_t len);
/* The loop's side of it (the server's wake_ev, arg the server): text for
 * some requests, the end of others. */
void ft_generation_on_wake(evutil_socket_t fd, short what, void *arg);
/* The connection's on_gone (http/conn.h): the client left before its
 * answer was complete; the request is cancelled. */
void ft_generation_on_gone(void *ud, void *active);

#endif
