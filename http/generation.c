/* The generation path: a request the scheduler runs, from the POST that
 * starts it to the last byte of its answer (docs/architecture.md, The
 * request path). A chat or completions request is parsed and becomes the
 * engine's request in ft_backend_engine_request() (http/backend.c);
 * POST /v1/embeddings (http/embeddings.c) takes the same way through the
 * scheduler. The routes that lead here, and the loop, are http/server.c;
 * the answer's chunks and bodies are http/completion.c.
 *
 * Threads and ownership:
 *  - The loop thread owns every struct ft_generation; it alone frees them.
 *  - The scheduler thread reports through ft_generation_on_event(): it
 *    appends the released text to the request's outbox under the server's
 *    `lock`, puts the request on the ready list and wakes the loop with
 *    event_active(). After the DONE event it never touches the request
 *    again, so the loop may free it once it has seen DONE.
 *  - A client that goes away while its request runs (EOF or an error on
 *    the socket, which stays readable during generation, or a stalled
 *    write) makes the connection call on_gone: the request forgets the
 *    connection and asks the engine to cancel, which stops it within one
 *    step; it is logged as 499 with the metrics it has.
 */
#include "generation.h"

#include "backend.h"
#include "completion.h"
#include "conn.h"
#include "embeddings.h"
#include "errors.h"
#include "otlp.h"
#include "prometheus.h"
#include "reasoning.h"
#include "request_ring.h"
#include "server_internal.h"
#include "sse.h"

#include "ft/clock.h"
#include "ft/common.h"

#include <event2/buffer.h>
#include <event2/event.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the engine's side: events from the scheduler thread ------------------- */

/* An outbox record's head; the text follows. */
struct piece {
    uint32_t len;
    int32_t choice;
    uint32_t has_lp;
    int32_t finish; /* enum ft_finish_reason: the choice's last piece */
    struct ft_token_logprob lp;
};

static void outbox_append(struct ft_generation *r, int32_t choice, const struct ft_token_logprob *lp,
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
void ft_generation_on_event(void *ud, struct ft_request *er, enum ft_event ev, const char *text, size_t len) {
    struct ft_server *s = ud;
    struct ft_generation *r = er->user;
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

static void generation_free(struct ft_generation *r) {
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
    ft_reasoning_answer_free(r->reasoning);
    ft_api_request_free(&r->api);
    free(r);
}

static void inflight_add(struct ft_server *s, struct ft_generation *r) {
    r->prev = NULL;
    r->next = s->inflight;
    if (s->inflight)
        s->inflight->prev = r;
    s->inflight = r;
    s->n_inflight++;
}

static void inflight_remove(struct ft_server *s, struct ft_generation *r) {
    if (r->prev)
        r->prev->next = r->next;
    else
        s->inflight = r->next;
    if (r->next)
        r->next->prev = r->prev;
    s->n_inflight--;
}

/* The connection's on_gone: the client left before its answer was complete. */
void ft_generation_on_gone(void *ud, void *active) {
    (void)ud;
    struct ft_generation *r = active;
    r->gone = true;
    r->conn = NULL;
    atomic_store(&r->er.cancel, true);
}

/* The request's span for the trace exporter (http/otlp.h). */
static void submit_span(struct ft_server *s, const struct ft_generation *r, int status, const char *finish) {
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

static void finish_request(struct ft_server *s, struct ft_generation *r) {
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
                if (!(tool_finish = ft_completion_tools(r, m, metrics))) {
                    char *body = ft_http_error_body(500, "out of memory", NULL, NULL);
                    if (r->conn && body)
                        ft_sse_send(r->conn, body);
                    free(body);
                }
            } else {
                for (int32_t i = 0; i < r->api.n; i++) /* those not sent with their last piece */
                    ft_completion_finish_choice(r, i, er->choice_finish[i]);
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
            if (!(tool_finish = ft_completion_tools(r, m, metrics))) {
                status = 500;
                error = "out of memory";
                char *body = ft_http_error_body(status, error, NULL, NULL);
                ft_conn_reply(r->conn, status, "application/json", NULL, 0, body ? body : "", body ? strlen(body) : 0);
                free(body);
            }
        } else {
            char *body = r->embd ? ft_embd_response(r->embd, s->model_id, m, r->want_metrics)
                                 : ft_completion_body(r, m, metrics);
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
    ft_server_record(s, r->remote, "POST", r->endpoint, r->endpoint, status, finish, m, error,
                     s->cfg->log_prompts ? prompt_for_log(&r->api, prompt, sizeof(prompt)) : NULL);
    ft_request_ring_add(s->ring, r->id, r->endpoint, status, finish, r->api.stream, m);
    inflight_remove(s, r);
    generation_free(r); /* the scheduler never touches a request after its DONE */
    ft_server_check_drained(s);
}

/* The scheduler has news: text for some requests, the end of others. */
void ft_generation_on_wake(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct ft_server *s = arg;
    pthread_mutex_lock(&s->lock);
    struct ft_generation *list = s->ready_head;
    s->ready_head = s->ready_tail = NULL;
    pthread_mutex_unlock(&s->lock);
    while (list) {
        struct ft_generation *r = list;
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
            ft_completion_piece(r, h.choice, box + off + sizeof(h), h.len, h.has_lp ? &h.lp : NULL,
                                (enum ft_finish_reason)h.finish);
            off += sizeof(h) + h.len + 1;
        }
        free(box);
        if (done)
            finish_request(s, r);
    }
}

/* ---- the routes that submit ------------------------------------------------ */

/* Hand r to the scheduler; on refusal answer, free it and return false. */
static bool submit(struct ft_server *s, struct ft_conn *conn, const struct ft_http_request *req, const char *endpoint,
                   struct ft_generation *r) {
    ft_clear_error();
    const int rc = ft_scheduler_submit(s->backend->sched, &r->er);
    if (rc) {
        if (rc == FT_EFULL) {
            static const struct ft_http_header_out retry[] = {{"Retry-After", "1"}};
            ft_server_reply_error_h(s, conn, req, endpoint, 503, "the server is busy: too many requests are waiting",
                                    NULL, "server_busy", retry, 1);
        } else {
            ft_server_reply_error(s, conn, req, endpoint, 400, ft_last_error(), NULL, NULL);
        }
        generation_free(r);
        return false;
    }
    /* Events for r are handled on this thread, after this function returns. */
    inflight_add(s, r);
    r->conn = conn;
    ft_conn_set_active(conn, r);
    return true;
}

void ft_generation_handle_embeddings(struct ft_server *s, struct ft_conn *conn, const struct ft_http_request *req,
                                     const char *body, size_t len, const char *endpoint) {
    if (!ft_server_engine_ready(s, conn, req, endpoint))
        return;
    struct ft_backend *b = s->backend;
    const struct ft_hparams *hp = ft_model_hparams(b->model);
    struct ft_generation *r = calloc(1, sizeof(*r));
    if (!r || !(r->embd = calloc(1, sizeof(*r->embd)))) {
        generation_free(r);
        ft_server_reply_error(s, conn, req, endpoint, 500, "out of memory", NULL, NULL);
        return;
    }
    struct ft_api_error err;
    int rc = ft_embd_parse(body, len, b->n_vocab, r->embd, &err);
    r->er.received = ft_clock_ticks(); /* docs/architecture.md, Metrics contract: received = body parsed */
    if (!rc && !ft_server_model_matches(s, r->embd->model)) {
        ft_server_reply_model_not_found(s, conn, req, endpoint, r->embd->model);
        generation_free(r);
        return;
    }
    if (rc || ft_embd_prepare(r->embd, b->tok, b->n_ctx, hp->n_embd, hp->pooling_type, &err)) {
        ft_server_reply_error(s, conn, req, endpoint, err.status, err.message, err.param, err.code);
        generation_free(r);
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

void ft_generation_handle(struct ft_server *s, struct ft_conn *conn, const struct ft_http_request *req,
                          const char *body, size_t len, const char *endpoint, enum ft_api_endpoint ep) {
    if (!ft_server_engine_ready(s, conn, req, endpoint))
        return;
    struct ft_backend *b = s->backend;
    struct ft_generation *r = calloc(1, sizeof(*r));
    if (!r) {
        ft_server_reply_error(s, conn, req, endpoint, 500, "out of memory", NULL, NULL);
        return;
    }
    struct ft_api_error err;
    int rc = ft_api_request_parse(body, len, ep, b->n_vocab, &r->api, &err);
    r->er.received = ft_clock_ticks(); /* metrics contract: received = body parsed */
    if (rc) {
        ft_server_reply_error(s, conn, req, endpoint, err.status, err.message, err.param, err.code);
        generation_free(r);
        return;
    }
    if (!ft_server_model_matches(s, r->api.model)) {
        ft_server_reply_model_not_found(s, conn, req, endpoint, r->api.model);
        generation_free(r);
        return;
    }
    if (ft_backend_engine_request(b, &r->api, ft_server_random(s), &r->er, &r->prompt, &err)) {
        ft_server_reply_error(s, conn, req, endpoint, err.status, err.message, err.param, err.code);
        generation_free(r);
        return;
    }
    bool oom = !(r->choices = calloc((size_t)r->api.n, sizeof(*r->choices)));
    r->reasoning = oom ? NULL : ft_reasoning_answer_new(b->reasoning_syntax, b->reasoning_format, &r->api, &oom);
    for (int32_t i = 0; !oom && i < r->api.n; i++)
        oom = !(r->choices[i].text = evbuffer_new());
    if (oom) {
        ft_server_reply_error(s, conn, req, endpoint, 500, "out of memory", NULL, NULL);
        generation_free(r);
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
             (unsigned long long)ft_server_random(s));
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
