/* The HTTP server: one libevent loop thread that accepts connections
 * (http/conn.c speaks HTTP/1.1 on bufferevents), parses and validates
 * requests, hands generations to the engine's scheduler thread, and
 * streams what comes back (docs/architecture.md, The request path).
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
#include "embeddings.h"
#include "errors.h"
#include "logprobs_json.h"
#include "otlp.h"
#include "prometheus.h"
#include "request_parse.h"
#include "request_ring.h"
#include "responses.h"
#include "sse.h"
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
    struct ft_otlp *otlp; /* NULL without --otlp-endpoint */
    struct ft_request_ring *ring; /* the last requests, for GET /v1/requests/recent */
    FILE *log;
    uint64_t rng; /* ids and default seeds */

    pthread_mutex_t lock;                 /* guards the ready list and every outbox */
    struct srv_req *ready_head, *ready_tail;
    int exit_status;
};

/* One choice of a request (loop thread only). */
struct srv_choice {
    struct evbuffer *text;      /* non-streaming: the completion so far */
    struct ft_token_logprob *lp; /* with logprobs: the tokens not yet answered (streaming: not yet sent) */
    int32_t n_lp, cap_lp;
    int64_t text_offset;        /* completions' logprobs: characters before the next token */
    bool finished;              /* streaming: its finish chunk is sent */
};

/* One generation (or embeddings) request, from parsing to the last byte. */
struct srv_req {
    struct srv *srv;
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
    struct ft_conn *conn;          /* NULL once the client is gone or answered */
    bool gone;                     /* the client went away first */
    struct srv_choice *choices;    /* api.n of them */
    bool tools;                    /* the answer is parsed for tool calls (ft_chat_tools_active; then n is 1) */
    struct ft_tool_stream ts;      /* streaming with tools: content passed on, a call held back */
    struct srv_req *prev, *next;   /* srv->inflight */

    /* Guarded by srv->lock: pieces of text as [struct piece][bytes][NUL]. */
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
                   int status, const char *finish, const struct ft_request_metrics *m, const char *error,
                   const char *prompt) {
    ft_prom_count_request(s->prom, endpoint, status);
    const struct ft_access_entry e = {remote, method, path, status, finish, m, error, prompt};
    ft_access_log_write(s->log, s->cfg->log_json ? FT_LOG_FORMAT_JSON : FT_LOG_FORMAT_TEXT, &e);
}

static const char *req_method(const struct ft_http_request *req) { return req ? req->method_name : "-"; }
static const char *req_path(const struct ft_http_request *req) { return req ? req->target : "-"; }

/* A whole response. Logged first: the connection frees req with the reply. */
static void reply(struct srv *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint,
                  int status, const char *content_type, const struct ft_http_header_out *extra, int n_extra,
                  const char *body, const char *error) {
    record(s, ft_conn_remote(c), req_method(req), req_path(req), endpoint, status, NULL, NULL, error, NULL);
    ft_conn_reply(c, status, content_type, extra, n_extra, body, body ? strlen(body) : 0);
}

/* An error answered right away (no generation), as an OpenAI error object. */
static void reply_error_h(struct srv *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint,
                          int status, const char *message, const char *param, const char *code,
                          const struct ft_http_header_out *extra, int n_extra) {
    char *body = ft_http_error_body(status, message, param, code);
    reply(s, c, req, endpoint, status, "application/json", extra, n_extra,
          body ? body : ft_http_oom_body, message);
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

/* An outbox record's head; the text follows. */
struct piece {
    uint32_t len;
    int32_t choice;
    uint32_t has_lp;
    int32_t finish; /* enum ft_finish_reason: the choice's last piece */
    struct ft_token_logprob lp;
};

static void outbox_append(struct srv_req *r, int32_t choice, const struct ft_token_logprob *lp,
                          enum ft_finish_reason finish, const char *text, size_t len) {
    const size_t need = r->out_len + sizeof(struct piece) + len + 1;
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
    struct piece h = {.len = (uint32_t)len, .choice = choice, .has_lp = lp != NULL, .finish = (int32_t)finish};
    if (lp)
        h.lp = *lp;
    memcpy(r->outbox + r->out_len, &h, sizeof(h));
    if (len)
        memcpy(r->outbox + r->out_len + sizeof(h), text, len);
    r->outbox[r->out_len + sizeof(h) + len] = '\0';
    r->out_len = need;
}

/* Runs on the scheduler thread; must not block. */
static void on_engine_event(void *ud, struct ft_request *er, enum ft_event ev, const char *text, size_t len) {
    struct srv *s = ud;
    struct srv_req *r = er->user;
    pthread_mutex_lock(&s->lock);
    if (ev == FT_EVENT_TEXT)
        outbox_append(r, er->event_choice, er->event_logprob, er->event_finish, text, len);
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
    ft_embd_request_free(r->embd);
    free(r->embd);
    ft_request_timing_free(&r->er.timing);
    free(r->prompt);
    free(r->outbox);
    if (r->choices) {
        for (int32_t i = 0; i < r->api.n; i++) {
            if (r->choices[i].text)
                evbuffer_free(r->choices[i].text);
            free(r->choices[i].lp);
        }
        free(r->choices);
    }
    ft_tool_stream_free(&r->ts);
    ft_api_request_free(&r->api);
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

/* The logprobs of choice c's tokens not yet answered, as JSON (NULL
 * without logprobs); they count as answered. */
static cJSON *take_logprobs(struct srv_req *r, int32_t c) {
    struct srv_choice *ch = &r->choices[c];
    if (!r->api.logprobs || (r->api.stream && !ch->n_lp))
        return NULL; /* a streamed chunk without tokens has "logprobs": null */
    cJSON *j = ft_logprobs_json(r->ctx.endpoint, r->srv->backend->tok, ch->lp, ch->n_lp, r->api.tokens_as_ids,
                                &ch->text_offset);
    if (!j)
        r->oom = true;
    ch->n_lp = 0;
    return j;
}

static void push_logprob(struct srv_req *r, struct srv_choice *ch, const struct ft_token_logprob *lp) {
    if (ch->n_lp == ch->cap_lp) {
        const int32_t cap = ch->cap_lp ? ch->cap_lp * 2 : 16;
        struct ft_token_logprob *p = realloc(ch->lp, sizeof(*p) * (size_t)cap);
        if (!p) {
            r->oom = true;
            return;
        }
        ch->lp = p;
        ch->cap_lp = cap;
    }
    ch->lp[ch->n_lp++] = *lp;
}

/* Streaming: choice c's chunk with its finish_reason, once. */
static void send_finish(struct srv_req *r, int32_t c, enum ft_finish_reason finish) {
    if (!r->conn || r->choices[c].finished)
        return;
    r->choices[c].finished = true;
    char *chunk = ft_resp_chunk_finish(&r->ctx, c, finish, take_logprobs(r, c));
    ft_sse_send(r->conn, chunk);
    free(chunk);
}

/* A piece of choice c's text; a streamed chunk carries the logprobs of the
 * tokens sampled since the last one (a token whose text is held back, as
 * part of a UTF-8 character or of a possible stop string, goes with the
 * chunk that releases text after it, or with the finish chunk). A choice's
 * finish chunk goes out as soon as it ends, while the others go on. */
static void send_piece(struct srv_req *r, int32_t c, const char *text, size_t len, const struct ft_token_logprob *lp,
                       enum ft_finish_reason finish) {
    if (c < 0 || c >= r->api.n)
        return;
    struct srv_choice *ch = &r->choices[c];
    if (lp && r->api.logprobs)
        push_logprob(r, ch, lp);
    if (!r->api.stream) {
        evbuffer_add(ch->text, text, len);
        return;
    }
    if (r->tools) {
        /* Content goes out as it comes; what may be a call waits for the
         * end (finish_tools() sends it and the finish chunk). */
        char *content = NULL;
        if (ft_tool_stream_feed(&r->ts, text, len, &content)) {
            r->oom = true;
            return;
        }
        if (r->conn && *content) {
            char *chunk = ft_resp_chunk_text(&r->ctx, c, content, strlen(content), take_logprobs(r, c));
            ft_sse_send(r->conn, chunk); /* on failure on_client_gone has run */
            free(chunk);
        }
        free(content);
        return;
    }
    if (r->conn && len) {
        char *chunk = ft_resp_chunk_text(&r->ctx, c, text, len, take_logprobs(r, c));
        ft_sse_send(r->conn, chunk); /* on failure on_client_gone has run */
        free(chunk);
    }
    if (finish == FT_FINISH_STOP || finish == FT_FINISH_LENGTH)
        send_finish(r, c, finish);
}

/* The non-streaming body: every choice's text, finish reason and logprobs. */
static char *completion_body(struct srv_req *r, const struct ft_request_metrics *m,
                             const struct ft_request_metrics *metrics) {
    struct ft_resp_choice *cs = calloc((size_t)r->api.n, sizeof(*cs));
    if (!cs)
        return NULL;
    for (int32_t i = 0; i < r->api.n; i++) {
        const size_t len = evbuffer_get_length(r->choices[i].text);
        evbuffer_add(r->choices[i].text, "", 1);
        const char *t = (const char *)evbuffer_pullup(r->choices[i].text, -1);
        cs[i] = (struct ft_resp_choice){t ? t : "", t ? len : 0, r->er.choice_finish[i], take_logprobs(r, i)};
    }
    char *body = r->oom ? NULL : ft_resp_completion(&r->ctx, cs, r->api.n, m, metrics);
    if (r->oom)
        for (int32_t i = 0; i < r->api.n; i++)
            cJSON_Delete(cs[i].logprobs);
    free(cs);
    return body;
}

/* The request's span for the trace exporter (http/otlp.h). */
static void submit_span(struct srv *s, const struct srv_req *r, int status, const char *finish) {
    const struct ft_request_metrics *m = &r->er.metrics;
    struct ft_otlp_span sp = {.operation = r->ctx.endpoint == FT_API_CHAT ? "chat" : "text_completion",
                              .http_status = status,
                              .input_tokens = m->prompt_tokens,
                              .cached_input_tokens = m->cached_prompt_tokens,
                              .output_tokens = m->completion_tokens,
                              .max_tokens = r->api.max_tokens,
                              .temperature = r->api.sampling.temperature,
                              .top_p = r->api.sampling.top_p,
                              .stream = r->api.stream,
                              .queue_s = m->queue_time_ms / 1e3,
                              .ttft_s = m->ttft_ms / 1e3,
                              .prefill_s = m->prefill_time_ms / 1e3,
                              .decode_s = m->decode_time_ms / 1e3,
                              .e2e_s = m->total_time_ms / 1e3};
    memcpy(sp.trace_id, r->trace_id, sizeof(sp.trace_id));
    memcpy(sp.parent_span_id, r->parent_span_id, sizeof(sp.parent_span_id));
    ft_otlp_new_ids(&sp, false);
    snprintf(sp.model, sizeof(sp.model), "%s", s->model_id);
    snprintf(sp.response_id, sizeof(sp.response_id), "%s", r->id);
    snprintf(sp.finish_reason, sizeof(sp.finish_reason), "%s", status == 499 ? "client_closed" : finish);
    /* Wall-clock ends from the request's clock stamps. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const uint64_t ticks = ft_clock_ticks();
    sp.end_unix_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    const double age_ns = ticks > r->er.received ? ft_clock_ticks_to_ns(ticks - r->er.received) : 0;
    sp.start_unix_ns = sp.end_unix_ns - (uint64_t)age_ns;
    ft_otlp_submit(s->otlp, &sp);
}

/* --log-prompts: "role: content" per message, or the completion prompt,
 * cut at LOG_PROMPT_MAX bytes (on a UTF-8 boundary). */
#define LOG_PROMPT_MAX 8192
static const char *prompt_for_log(const struct ft_api_request *api, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    if (api->endpoint == FT_API_CHAT) {
        for (int32_t i = 0; i < api->n_messages && n < LOG_PROMPT_MAX; i++)
            n += (size_t)snprintf(buf + n, LOG_PROMPT_MAX + 1 - n, "%s%s: %s", i ? "\n" : "", api->messages[i].role,
                                  api->messages[i].content ? api->messages[i].content : "");
    } else if (api->prompt) {
        n = (size_t)snprintf(buf, LOG_PROMPT_MAX + 1, "%s", api->prompt);
    } else {
        n = (size_t)snprintf(buf, LOG_PROMPT_MAX + 1, "[%d token ids]", api->n_prompt_tokens);
    }
    if (n > LOG_PROMPT_MAX) {
        n = LOG_PROMPT_MAX;
        while (n > 0 && ((unsigned char)buf[n] & 0xC0) == 0x80)
            n--;
        snprintf(buf + n, cap - n, "...[truncated]");
    }
    return buf;
}

/* Ids for the calls of one answer: "call_" and 24 letters or digits, as
 * OpenAI's look; the mistral format's own 9-character ids when the model
 * wrote them (Mistral's templates accept nothing else in the history), else
 * 9 new ones. */
static void make_call_ids(struct srv *s, const struct ft_tool_parse *p, char (*ids)[32]) {
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const bool mistral = s->backend->tool_caps.format == FT_TOOL_FORMAT_MISTRAL;
    for (size_t i = 0; i < p->n_calls; i++) {
        const char *own = p->calls[i].id;
        if (mistral && own && strlen(own) == 9 && strspn(own, alnum) == 9) {
            memcpy(ids[i], own, 10);
            continue;
        }
        size_t k = 0, n = mistral ? 9 : 24;
        if (!mistral) {
            memcpy(ids[i], "call_", 5);
            k = 5;
        }
        for (size_t j = 0; j < n; j++)
            ids[i][k++] = alnum[next_random(s) % (sizeof(alnum) - 1)];
        ids[i][k] = '\0';
    }
}

/* The end of an answer with tools: parse (non-streaming: the whole text;
 * streaming: what the stream held back) and send the calls. Returns the
 * finish reason for the log, or NULL on allocation failure. */
static const char *finish_tools(struct srv *s, struct srv_req *r, const struct ft_request_metrics *usage,
                                const struct ft_request_metrics *metrics) {
    const char *const *names = (const char *const *)r->api.tool_names;
    const size_t max_calls = r->api.parallel_tool_calls ? 0 : 1;
    struct ft_tool_parse p;
    int rc;
    if (r->api.stream) {
        rc = ft_tool_stream_finish(&r->ts, names, (size_t)r->api.n_tools, max_calls, &p);
    } else {
        struct evbuffer *tb = r->choices[0].text;
        const size_t tl = evbuffer_get_length(tb);
        evbuffer_add(tb, "", 1);
        const char *text = (const char *)evbuffer_pullup(tb, -1);
        rc = text ? ft_tool_calls_parse(s->backend->tool_caps.format, text, tl, names, (size_t)r->api.n_tools,
                                        max_calls, &p)
                  : FT_ENOMEM;
    }
    if (rc)
        return NULL;
    char (*ids)[32] = p.n_calls ? calloc(p.n_calls, sizeof(*ids)) : NULL;
    const char **idp = p.n_calls ? calloc(p.n_calls, sizeof(*idp)) : NULL;
    if (p.n_calls && (!ids || !idp)) {
        free(ids);
        free(idp);
        ft_tool_parse_free(&p);
        return NULL;
    }
    make_call_ids(s, &p, ids);
    for (size_t i = 0; i < p.n_calls; i++)
        idp[i] = ids[i];
    const enum ft_finish_reason finish = r->er.finish;
    const char *reason = p.n_calls ? "tool_calls" : ft_resp_finish_reason(finish);
    if (r->api.stream) {
        if (p.content[0]) {
            char *c = ft_resp_chunk_text(&r->ctx, 0, p.content, strlen(p.content), NULL);
            if (r->conn && c)
                ft_sse_send(r->conn, c);
            free(c);
        }
        for (size_t i = 0; i < p.n_calls && r->conn; i++) {
            char *c = ft_resp_chunk_tool_call(&r->ctx, (int)i, idp[i], p.calls[i].name, "");
            if (r->conn && c)
                ft_sse_send(r->conn, c);
            free(c);
            c = ft_resp_chunk_tool_call(&r->ctx, (int)i, NULL, NULL, p.calls[i].arguments);
            if (r->conn && c)
                ft_sse_send(r->conn, c);
            free(c);
        }
        char *c = p.n_calls ? ft_resp_chunk_finish_tools(&r->ctx) : ft_resp_chunk_finish(&r->ctx, 0, finish, NULL);
        if (r->conn && c)
            ft_sse_send(r->conn, c);
        free(c);
    } else if (r->conn) {
        /* The generic format's {"response": ...} comes back as the content. */
        const struct ft_resp_choice content = {p.content, strlen(p.content), finish, NULL};
        char *body = p.n_calls ? ft_resp_completion_tools(&r->ctx, &p, idp, usage, metrics)
                               : ft_resp_completion(&r->ctx, &content, 1, usage, metrics);
        if (!body)
            reason = NULL;
        else
            ft_conn_reply(r->conn, 200, "application/json", NULL, 0, body, strlen(body));
        free(body);
    }
    free(ids);
    free(idp);
    ft_tool_parse_free(&p);
    return reason;
}

static void finish_request(struct srv *s, struct srv_req *r) {
    struct ft_request *er = &r->er;
    if (r->embd && er->finish == FT_FINISH_STOP && !ft_embd_finite(r->embd)) {
        er->finish = FT_FINISH_ERROR;
        snprintf(er->error_msg, sizeof(er->error_msg), "the model's hidden states are not finite (NaN or infinity)");
    }
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
    const char *tool_finish = NULL; /* "tool_calls" when the answer called tools */
    if (r->conn && r->api.stream) {
        /* Each send may find the client gone (r->conn becomes NULL). */
        if (error) {
            char *body = ft_http_error_body(status, error, NULL, er->finish == FT_FINISH_CANCELLED ? "shutting_down" : NULL);
            ft_sse_send(r->conn, body);
            free(body);
        } else {
            if (r->tools) {
                if (!(tool_finish = finish_tools(s, r, m, metrics))) {
                    char *body = ft_http_error_body(500, "out of memory", NULL, NULL);
                    if (r->conn && body)
                        ft_sse_send(r->conn, body);
                    free(body);
                }
            } else {
                for (int32_t i = 0; i < r->api.n; i++) /* those not sent with their last piece */
                    send_finish(r, i, er->choice_finish[i]);
            }
            if (r->conn && (r->api.include_usage || metrics)) {
                char *c;
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
            const char *out = body ? body : ft_http_oom_body;
            ft_conn_reply(r->conn, status, "application/json", NULL, 0, out, strlen(out));
            free(body);
        } else if (r->tools) {
            if (!(tool_finish = finish_tools(s, r, m, metrics))) {
                status = 500;
                error = "out of memory";
                char *body = ft_http_error_body(status, error, NULL, NULL);
                ft_conn_reply(r->conn, status, "application/json", NULL, 0, body ? body : "", body ? strlen(body) : 0);
                free(body);
            }
        } else {
            char *body = r->embd ? ft_embd_response(r->embd, s->model_id, m, r->want_metrics)
                                 : completion_body(r, m, metrics);
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
        ft_prom_observe(s->prom, r->endpoint, &er->timing, m);
    const char *finish = tool_finish ? tool_finish : ft_finish_reason_name(er->finish);
    if (s->otlp)
        submit_span(s, r, status, finish);
    char prompt[LOG_PROMPT_MAX + 32];
    record(s, r->remote, "POST", r->endpoint, r->endpoint, status, finish, m, error,
           s->cfg->log_prompts ? prompt_for_log(&r->api, prompt, sizeof(prompt)) : NULL);
    ft_request_ring_add(s->ring, r->id, r->endpoint, status, finish, r->api.stream, m);
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
        for (size_t off = 0; off + sizeof(struct piece) <= len;) {
            struct piece h;
            memcpy(&h, box + off, sizeof(h));
            send_piece(r, h.choice, box + off + sizeof(h), h.len, h.has_lp ? &h.lp : NULL,
                       (enum ft_finish_reason)h.finish);
            off += sizeof(h) + h.len + 1;
        }
        free(box);
        if (done)
            finish_request(s, r);
    }
}

/* ---- routes ------------------------------------------------------------------ */

/* Requests that need the model: a 503 unless it is loaded and the server is
 * not shutting down. */
static bool engine_ready(struct srv *s, struct ft_conn *conn, const struct ft_http_request *req, const char *endpoint) {
    if (s->signals) {
        reply_error(s, conn, req, endpoint, 503, "the server is shutting down", NULL, "shutting_down");
        return false;
    }
    if (atomic_load(&s->state) != STATE_READY) {
        reply_error(s, conn, req, endpoint, 503, "the model is still loading; retry when GET /health answers 200",
                    NULL, "model_loading");
        return false;
    }
    return true;
}

static bool model_matches(const struct srv *s, const char *model) {
    return !model || !strcmp(model, s->model_id) || !strcmp(model, s->cfg->model_path);
}

static void reply_model_not_found(struct srv *s, struct ft_conn *conn, const struct ft_http_request *req,
                                  const char *endpoint, const char *model) {
    char msg[480];
    snprintf(msg, sizeof(msg), "the model '%.200s' does not exist; this server serves '%.150s'", model, s->model_id);
    reply_error(s, conn, req, endpoint, 404, msg, "model", "model_not_found");
}

/* Hand r to the scheduler; on refusal answer, free it and return false. */
static bool submit(struct srv *s, struct ft_conn *conn, const struct ft_http_request *req, const char *endpoint,
                   struct srv_req *r) {
    ft_clear_error();
    const int rc = ft_scheduler_submit(s->backend->sched, &r->er);
    if (rc) {
        if (rc == FT_EFULL) {
            static const struct ft_http_header_out retry[] = {{"Retry-After", "1"}};
            reply_error_h(s, conn, req, endpoint, 503, "the server is busy: too many requests are waiting", NULL,
                          "server_busy", retry, 1);
        } else {
            reply_error(s, conn, req, endpoint, 400, ft_last_error(), NULL, NULL);
        }
        srv_req_free(r);
        return false;
    }
    /* Events for r are handled on this thread, after this function returns. */
    inflight_add(s, r);
    r->conn = conn;
    ft_conn_set_active(conn, r);
    return true;
}

static void handle_embeddings(struct srv *s, struct ft_conn *conn, const struct ft_http_request *req,
                              const char *body, size_t len, const char *endpoint) {
    if (!engine_ready(s, conn, req, endpoint))
        return;
    struct ft_backend *b = s->backend;
    const struct ft_hparams *hp = ft_model_hparams(b->model);
    struct srv_req *r = calloc(1, sizeof(*r));
    if (!r || !(r->embd = calloc(1, sizeof(*r->embd)))) {
        srv_req_free(r);
        reply_error(s, conn, req, endpoint, 500, "out of memory", NULL, NULL);
        return;
    }
    struct ft_api_error err;
    int rc = ft_embd_parse(body, len, b->n_vocab, r->embd, &err);
    r->er.received = ft_clock_ticks(); /* docs/architecture.md, Metrics contract: received = body parsed */
    if (!rc && !model_matches(s, r->embd->model)) {
        reply_model_not_found(s, conn, req, endpoint, r->embd->model);
        srv_req_free(r);
        return;
    }
    if (rc || ft_embd_prepare(r->embd, b->tok, b->n_ctx, hp->n_embd, hp->pooling_type, &err)) {
        reply_error(s, conn, req, endpoint, err.status, err.message, err.param, err.code);
        srv_req_free(r);
        return;
    }
    r->srv = s;
    r->endpoint = endpoint;
    r->er.embd = &r->embd->job;
    r->er.user = r;
    r->want_metrics = r->embd->performance_metrics >= 0 ? r->embd->performance_metrics == 1 : s->cfg->metrics_default;
    snprintf(r->remote, sizeof(r->remote), "%s", ft_conn_remote(conn));
    submit(s, conn, req, endpoint, r);
}

/* POST /tokenize and /detokenize (http/tokenize.h): answered on this thread. */
static void handle_tokenize(struct srv *s, struct ft_conn *conn, const struct ft_http_request *req, const char *body,
                            size_t len, const char *endpoint, bool detokenize) {
    if (!engine_ready(s, conn, req, endpoint))
        return;
    struct ft_api_error err;
    char *json = detokenize ? ft_detokenize_handle(s->backend->tok, body, len, &err)
                            : ft_tokenize_handle(s->backend->tok, body, len, &err);
    if (json)
        reply_json(s, conn, req, endpoint, 200, json);
    else
        reply_error(s, conn, req, endpoint, err.status, err.message, err.param, err.code);
    free(json);
}

static void handle_generate(struct srv *s, struct ft_conn *conn, const struct ft_http_request *req, const char *body,
                            size_t len, const char *endpoint, enum ft_api_endpoint ep) {
    if (!engine_ready(s, conn, req, endpoint))
        return;
    struct ft_backend *b = s->backend;
    struct srv_req *r = calloc(1, sizeof(*r));
    if (!r) {
        reply_error(s, conn, req, endpoint, 500, "out of memory", NULL, NULL);
        return;
    }
    struct ft_api_error err;
    int rc = ft_api_request_parse(body, len, ep, b->n_vocab, &r->api, &err);
    r->er.received = ft_clock_ticks(); /* metrics contract: received = body parsed */
    if (rc) {
        reply_error(s, conn, req, endpoint, err.status, err.message, err.param, err.code);
        srv_req_free(r);
        return;
    }
    if (!model_matches(s, r->api.model)) {
        reply_model_not_found(s, conn, req, endpoint, r->api.model);
        srv_req_free(r);
        return;
    }
    if (ft_backend_engine_request(b, &r->api, next_random(s), &r->er, &r->prompt, &err)) {
        reply_error(s, conn, req, endpoint, err.status, err.message, err.param, err.code);
        srv_req_free(r);
        return;
    }
    bool oom = !(r->choices = calloc((size_t)r->api.n, sizeof(*r->choices)));
    for (int32_t i = 0; !oom && i < r->api.n; i++)
        oom = !(r->choices[i].text = evbuffer_new());
    if (oom) {
        reply_error(s, conn, req, endpoint, 500, "out of memory", NULL, NULL);
        srv_req_free(r);
        return;
    }
    r->srv = s;
    r->endpoint = endpoint;
    /* Our span joins the caller's trace (W3C Trace Context) or starts one. */
    if (s->otlp && !ft_traceparent_parse(ft_http_field(req, "traceparent"), r->trace_id, r->parent_span_id)) {
        struct ft_otlp_span ids;
        ft_otlp_new_ids(&ids, true);
        memcpy(r->trace_id, ids.trace_id, sizeof(r->trace_id));
    }
    r->tools = ep == FT_API_CHAT && ft_chat_tools_active(&r->api);
    ft_tool_stream_init(&r->ts, b->tool_caps.format);
    r->er.user = r;
    r->want_metrics = r->api.performance_metrics >= 0 ? r->api.performance_metrics == 1 : s->cfg->metrics_default;
    snprintf(r->id, sizeof(r->id), "%s%016llx", ep == FT_API_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)next_random(s));
    r->ctx = (struct ft_resp_ctx){ep, r->id, (long long)time(NULL), s->model_id, r->api.include_usage};
    snprintf(r->remote, sizeof(r->remote), "%s", ft_conn_remote(conn));

    if (!submit(s, conn, req, endpoint, r))
        return;
    if (r->api.stream) {
        ft_sse_start(conn);
        for (int32_t i = 0; ep == FT_API_CHAT && i < r->api.n && r->conn; i++) {
            char *c = ft_resp_chunk_role(&r->ctx, i);
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

/* Liveness: the event loop answers, whether or not the model is loaded yet
 * (GET /health is readiness). */
static void handle_live(struct srv *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint) {
    reply_json(s, c, req, endpoint, 200, "{\"status\":\"alive\"}");
}

/* --kv-events: the publisher's counters (README "KV-cache events"). */
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

static void handle_metrics(struct srv *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint) {
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
        reply_error(s, c, req, endpoint, 500, "out of memory", NULL, NULL);
    if (b)
        evbuffer_free(b);
}

/* GET /v1/requests/recent (http/request_ring.h): the last requests' metrics and the gauges now. */
static void handle_recent(struct srv *s, struct ft_conn *c, const struct ft_http_request *req, const char *endpoint) {
    struct ft_request_ring_gauges g = {.connections = ft_conn_pool_count(s->pool), .model = s->model_id};
    if ((g.loaded = atomic_load(&s->state) == STATE_READY))
        ft_scheduler_get_stats(s->backend->sched, &g.sched);
    struct ft_api_error err;
    char *json = ft_request_ring_json(s->ring, req->target, &g, &err);
    if (json)
        reply_json(s, c, req, endpoint, 200, json);
    else
        reply_error(s, c, req, endpoint, err.status, err.message, err.param, err.code);
    free(json);
}

/* The web UI's pages and assets (http/webui.h). */
static void handle_webui(struct srv *s, struct ft_conn *c, const struct ft_http_request *req) {
    struct ft_webui_reply w;
    ft_webui_respond(req, &w);
    record(s, ft_conn_remote(c), req_method(req), req_path(req), "other", w.status, NULL, NULL, NULL, NULL);
    ft_conn_reply(c, w.status, w.content_type, w.headers, w.n_headers, w.body, w.len);
}

/* POST /apply-template (llama-server's): the prompt a chat request would
 * run, {"prompt": "..."}, without generating: the body is a chat
 * completions request, validated the same way. */
static void handle_apply_template(struct srv *s, struct ft_conn *c, const struct ft_http_request *req,
                                  const char *body, size_t len, const char *endpoint) {
    if (atomic_load(&s->state) != STATE_READY) {
        reply_error(s, c, req, endpoint, 503, "the model is still loading; retry when GET /health answers 200", NULL,
                    "model_loading");
        return;
    }
    struct ft_api_request api;
    struct ft_api_error err;
    if (ft_api_request_parse(body, len, FT_API_CHAT, s->backend->n_vocab, &api, &err)) {
        reply_error(s, c, req, endpoint, err.status, err.message, err.param, err.code);
        return;
    }
    char *text = NULL;
    size_t n = 0;
    if (ft_backend_render_chat(s->backend, &api, &text, &n, &err)) {
        ft_api_request_free(&api);
        reply_error(s, c, req, endpoint, err.status, err.message, err.param, err.code);
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
        reply_error(s, c, req, endpoint, 500, "out of memory", NULL, NULL);
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
static bool authorized(const struct srv *s, const struct ft_http_request *req) {
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
static bool cors_preflight(struct srv *s, struct ft_conn *c, const struct ft_http_request *req,
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
    struct srv *s = ud;
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
    case R_LIVE: handle_live(s, c, req, route->path); break;
    case R_METRICS: handle_metrics(s, c, req, route->path); break;
    case R_EMBEDDINGS: handle_embeddings(s, c, req, body, body_len, route->path); break;
    case R_TOKENIZE: handle_tokenize(s, c, req, body, body_len, route->path, false); break;
    case R_DETOKENIZE: handle_tokenize(s, c, req, body, body_len, route->path, true); break;
    case R_APPLY_TEMPLATE: handle_apply_template(s, c, req, body, body_len, route->path); break;
    case R_RECENT: handle_recent(s, c, req, route->path); break;
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
        .request_timeout_s = cfg->request_timeout_s,
        .max_output = SRV_MAX_OUTPUT,
        .max_conns = max_conns_for_fds(cfg->max_conns),
        .cors_origins = cfg->cors_origins,
        .n_cors_origins = cfg->n_cors_origins,
    };
    const struct ft_conn_handler handler = {on_request, on_refused, on_client_gone, on_conn_closed};
    if (evthread_use_pthreads() != 0 || !(s->base = event_base_new()) ||
        !(s->pool = ft_conn_pool_new(s->base, &ccfg, &handler, s)) || !(s->prom = ft_prom_new(&(struct ft_prom_config){s->model_id, cfg->metrics_vllm_names})) ||
        !(s->wake_ev = event_new(s->base, -1, 0, on_wake, s)) ||
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
    ft_otlp_free(s->otlp); /* flushes the last spans */
    ft_prom_free(s->prom);
    ft_request_ring_free(s->ring);
    pthread_mutex_destroy(&s->lock);
    libevent_global_shutdown();
    return status;
}
