/* OpenAI's answer of a generation, from the pieces of text the scheduler
 * released (http/generation.c takes them from the outbox on the loop
 * thread): streamed, a chunk per piece with the logprobs of the tokens
 * since the last one, and each choice's finish chunk as soon as it ends;
 * not streamed, the text gathered per choice for one JSON body at the end.
 * With tools, the text is parsed for calls (engine/text/tool_calls.c) and
 * the calls are sent in OpenAI's shape, with ids made here. The JSON
 * itself is written by http/responses.c. Loop thread only.
 */
#include "completion.h"

#include "backend.h"
#include "conn.h"
#include "logprobs_json.h"
#include "reasoning.h"
#include "server_internal.h"
#include "sse.h"

#include "ft/common.h"

#include <event2/buffer.h>

#include <stdlib.h>
#include <string.h>

/* The logprobs of choice c's tokens not yet answered, as JSON (NULL
 * without logprobs); they count as answered. */
static cJSON *take_logprobs(struct ft_generation *r, int32_t c) {
    struct ft_generation_choice *ch = &r->choices[c];
    if (!r->api.logprobs || (r->api.stream && !ch->n_lp))
        return NULL; /* a streamed chunk without tokens has "logprobs": null */
    cJSON *j = ft_logprobs_json(r->ctx.endpoint, r->srv->backend->tok, ch->lp, ch->n_lp, r->api.tokens_as_ids,
                                &ch->text_offset);
    if (!j)
        r->oom = true;
    ch->n_lp = 0;
    return j;
}

static void push_logprob(struct ft_generation *r, struct ft_generation_choice *ch, const struct ft_token_logprob *lp) {
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

static void reasoning_flush(struct ft_generation *r, int32_t c);

/* Streaming: choice c's chunk with its finish_reason, once. */
void ft_completion_finish_choice(struct ft_generation *r, int32_t c, enum ft_finish_reason finish) {
    reasoning_flush(r, c);
    if (!r->conn || r->choices[c].finished)
        return;
    r->choices[c].finished = true;
    char *chunk = ft_resp_chunk_finish(&r->ctx, c, finish, take_logprobs(r, c));
    ft_sse_send(r->conn, chunk);
    free(chunk);
}

/* A piece of choice c's content: streamed (with tools, a possible call
 * held back) or gathered; on its last piece, the finish chunk. */
static void piece_text(struct ft_generation *r, int32_t c, const char *text, size_t len,
                       enum ft_finish_reason finish) {
    struct ft_generation_choice *ch = &r->choices[c];
    if (!r->api.stream) {
        evbuffer_add(ch->text, text, len);
        return;
    }
    if (r->tools) {
        /* Content goes out as it comes; what may be a call waits for the
         * end (ft_completion_tools() sends it and the finish chunk). */
        char *content = NULL;
        if (ft_tool_stream_feed(&r->ts, text, len, &content)) {
            r->oom = true;
            return;
        }
        if (r->conn && *content) {
            char *chunk = ft_resp_chunk_text(&r->ctx, c, content, strlen(content), take_logprobs(r, c));
            ft_sse_send(r->conn, chunk); /* on failure ft_generation_on_gone has run */
            free(chunk);
        }
        free(content);
        return;
    }
    if (r->conn && len) {
        char *chunk = ft_resp_chunk_text(&r->ctx, c, text, len, take_logprobs(r, c));
        ft_sse_send(r->conn, chunk); /* on failure ft_generation_on_gone has run */
        free(chunk);
    }
    if (finish == FT_FINISH_STOP || finish == FT_FINISH_LENGTH)
        ft_completion_finish_choice(r, c, finish);
}

/* What choice c's reasoning parser released: the reasoning first (a
 * delta.reasoning_content chunk, or gathered for the body), then the
 * content on the usual way. */
static void reasoning_emit(struct ft_generation *r, int32_t c) {
    struct ft_reasoning_choice *rc = &r->reasoning->choices[c];
    const struct ft_reasoning_parser *p = &rc->parser;
    if (p->reasoning.n) {
        if (!r->api.stream) {
            const size_t need = rc->text.n + p->reasoning.n + 1;
            if (need > rc->text.cap) {
                char *q = realloc(rc->text.s, need * 2);
                if (!q) {
                    r->oom = true;
                    return;
                }
                rc->text.s = q;
                rc->text.cap = need * 2;
            }
            memcpy(rc->text.s + rc->text.n, p->reasoning.s, p->reasoning.n);
            rc->text.n += p->reasoning.n;
            rc->text.s[rc->text.n] = '\0';
        } else if (r->conn) {
            char *chunk = ft_resp_chunk_reasoning(&r->ctx, c, p->reasoning.s, p->reasoning.n, take_logprobs(r, c));
            ft_sse_send(r->conn, chunk); /* on failure ft_generation_on_gone has run */
            free(chunk);
        }
    }
    if (p->content.n)
        piece_text(r, c, p->content.s, p->content.n, FT_FINISH_NONE);
}

/* The end of choice c's answer: what its parser held back goes out. */
static void reasoning_flush(struct ft_generation *r, int32_t c) {
    if (!r->reasoning || c < 0 || c >= r->reasoning->n || r->reasoning->choices[c].flushed)
        return;
    r->reasoning->choices[c].flushed = true;
    if (ft_reasoning_finish(&r->reasoning->choices[c].parser)) {
        r->oom = true;
        return;
    }
    reasoning_emit(r, c);
}

/* A piece of choice c's text; a streamed chunk carries the logprobs of the
 * tokens sampled since the last one (a token whose text is held back, as
 * part of a UTF-8 character or of a possible stop string, goes with the
 * chunk that releases text after it, or with the finish chunk). A choice's
 * finish chunk goes out as soon as it ends, while the others go on. With a
 * reasoning syntax the text goes through the choice's parser first. */
void ft_completion_piece(struct ft_generation *r, int32_t c, const char *text, size_t len,
                         const struct ft_token_logprob *lp, enum ft_finish_reason finish) {
    if (c < 0 || c >= r->api.n)
        return;
    if (lp && r->api.logprobs)
        push_logprob(r, &r->choices[c], lp);
    if (!r->reasoning) {
        piece_text(r, c, text, len, finish);
        return;
    }
    if (ft_reasoning_feed(&r->reasoning->choices[c].parser, text, len)) {
        r->oom = true;
        return;
    }
    reasoning_emit(r, c);
    if (finish == FT_FINISH_STOP || finish == FT_FINISH_LENGTH) {
        reasoning_flush(r, c);
        piece_text(r, c, "", 0, finish);
    }
}

/* The non-streaming body: every choice's text, finish reason and logprobs. */
char *ft_completion_body(struct ft_generation *r, const struct ft_request_metrics *m,
                         const struct ft_request_metrics *metrics) {
    struct ft_resp_choice *cs = calloc((size_t)r->api.n, sizeof(*cs));
    if (!cs)
        return NULL;
    for (int32_t i = 0; i < r->api.n; i++) {
        reasoning_flush(r, i);
        const size_t len = evbuffer_get_length(r->choices[i].text);
        evbuffer_add(r->choices[i].text, "", 1);
        const char *t = (const char *)evbuffer_pullup(r->choices[i].text, -1);
        cs[i] = (struct ft_resp_choice){t ? t : "", t ? len : 0, r->er.choice_finish[i], take_logprobs(r, i), NULL, 0};
        if (r->reasoning && r->reasoning->choices[i].text.n) {
            cs[i].reasoning = r->reasoning->choices[i].text.s;
            cs[i].reasoning_len = r->reasoning->choices[i].text.n;
        }
    }
    char *body = r->oom ? NULL : ft_resp_completion(&r->ctx, cs, r->api.n, m, metrics);
    if (r->oom)
        for (int32_t i = 0; i < r->api.n; i++)
            cJSON_Delete(cs[i].logprobs);
    free(cs);
    return body;
}

/* Ids for the calls of one answer: "call_" and 24 letters or digits, as
 * OpenAI's look; the mistral format's own 9-character ids when the model
 * wrote them (Mistral's templates accept nothing else in the history), else
 * 9 new ones. */
static void make_call_ids(struct ft_server *s, const struct ft_tool_parse *p, char (*ids)[32]) {
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
            ids[i][k++] = alnum[ft_server_random(s) % (sizeof(alnum) - 1)];
        ids[i][k] = '\0';
    }
}

/* The end of an answer with tools: parse (non-streaming: the whole text;
 * streaming: what the stream held back) and send the calls. Returns the
 * finish reason for the log, or NULL on allocation failure. */
const char *ft_completion_tools(struct ft_generation *r, const struct ft_request_metrics *usage,
                                const struct ft_request_metrics *metrics) {
    struct ft_server *s = r->srv;
    const char *const *names = (const char *const *)r->api.tool_names;
    const size_t max_calls = r->api.parallel_tool_calls ? 0 : 1;
    struct ft_tool_parse p = {0};
    int rc;
    reasoning_flush(r, 0);
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
    /* gpt-oss writes its calls in harmony headers, which the reasoning
     * parser read (the text it passed on is content). */
    if (!rc && r->reasoning)
        rc = ft_reasoning_take_calls(r->reasoning, names, (size_t)r->api.n_tools, max_calls, &p);
    if (rc) {
        ft_tool_parse_free(&p);
        return NULL;
    }
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
        const char *reasoning = r->reasoning && r->reasoning->choices[0].text.n ? r->reasoning->choices[0].text.s
                                                                                 : NULL;
        const struct ft_resp_choice content = {p.content, strlen(p.content), finish, NULL, reasoning,
                                               reasoning ? r->reasoning->choices[0].text.n : 0};
        char *body = p.n_calls ? ft_resp_completion_tools(&r->ctx, &p, idp, reasoning, usage, metrics)
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
