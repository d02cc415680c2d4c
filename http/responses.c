/* OpenAI response objects (http/responses.h). Field order follows OpenAI's
 * own responses, so a diff against theirs reads cleanly. */
#include "responses.h"

#include <stdlib.h>

const char *ft_resp_finish_reason(enum ft_finish_reason r) {
    return r == FT_FINISH_LENGTH ? "length" : "stop";
}

static void add_rate(cJSON *o, const char *name, double v) {
    if (v < 0)
        cJSON_AddNullToObject(o, name);
    else
        cJSON_AddNumberToObject(o, name, v);
}

cJSON *ft_resp_metrics(const struct ft_request_metrics *m) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "ttft_ms", m->ttft_ms);
    cJSON_AddNumberToObject(o, "queue_time_ms", m->queue_time_ms);
    cJSON_AddNumberToObject(o, "prefill_tokens", m->prefill_tokens);
    cJSON_AddNumberToObject(o, "cached_prompt_tokens", m->cached_prompt_tokens);
    cJSON_AddNumberToObject(o, "prefill_time_ms", m->prefill_time_ms);
    add_rate(o, "prefill_tokens_per_second", m->prefill_tokens_per_second);
    cJSON_AddNumberToObject(o, "decode_tokens", m->decode_tokens);
    cJSON_AddNumberToObject(o, "decode_time_ms", m->decode_time_ms);
    add_rate(o, "decode_tokens_per_second", m->decode_tokens_per_second);
    cJSON *itl = cJSON_AddObjectToObject(o, "inter_token_latency_ms");
    if (itl) {
        cJSON_AddNumberToObject(itl, "p50", m->inter_token_latency_ms.p50);
        cJSON_AddNumberToObject(itl, "p90", m->inter_token_latency_ms.p90);
        cJSON_AddNumberToObject(itl, "p99", m->inter_token_latency_ms.p99);
        cJSON_AddNumberToObject(itl, "max", m->inter_token_latency_ms.max);
    }
    cJSON_AddNumberToObject(o, "total_time_ms", m->total_time_ms);
    return o;
}

cJSON *ft_resp_usage(const struct ft_request_metrics *m) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "prompt_tokens", m->prompt_tokens);
    cJSON_AddNumberToObject(o, "completion_tokens", m->completion_tokens);
    cJSON_AddNumberToObject(o, "total_tokens", (double)m->prompt_tokens + m->completion_tokens);
    cJSON *d = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    if (d)
        cJSON_AddNumberToObject(d, "cached_tokens", m->cached_prompt_tokens);
    return o;
}

static const char *object_name(const struct ft_resp_ctx *c, bool chunk) {
    if (c->endpoint == FT_API_COMPLETIONS)
        return "text_completion"; /* OpenAI uses the same name for its chunks */
    return chunk ? "chat.completion.chunk" : "chat.completion";
}

static cJSON *envelope(const struct ft_resp_ctx *c, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "id", c->id);
    cJSON_AddStringToObject(o, "object", object_name(c, chunk));
    cJSON_AddNumberToObject(o, "created", (double)c->created);
    cJSON_AddStringToObject(o, "model", c->model);
    cJSON_AddStringToObject(o, "system_fingerprint", "freetoken");
    return o;
}

static char *print_free(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* One choice of a chunk: chat has delta, completions have text. */
static cJSON *chunk_choice(const struct ft_resp_ctx *c, const char *role, const char *text, const char *finish) {
    cJSON *ch = cJSON_CreateObject();
    if (!ch)
        return NULL;
    cJSON_AddNumberToObject(ch, "index", 0);
    if (c->endpoint == FT_API_CHAT) {
        cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
        if (delta && role)
            cJSON_AddStringToObject(delta, "role", role);
        if (delta && text)
            cJSON_AddStringToObject(delta, "content", text);
    } else {
        cJSON_AddStringToObject(ch, "text", text ? text : "");
    }
    cJSON_AddNullToObject(ch, "logprobs");
    if (finish)
        cJSON_AddStringToObject(ch, "finish_reason", finish);
    else
        cJSON_AddNullToObject(ch, "finish_reason");
    return ch;
}

static char *chunk(const struct ft_resp_ctx *c, const char *role, const char *text, const char *finish) {
    cJSON *o = envelope(c, true);
    cJSON *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    if (choices)
        cJSON_AddItemToArray(choices, chunk_choice(c, role, text, finish));
    if (o && c->include_usage)
        cJSON_AddNullToObject(o, "usage");
    return print_free(o);
}

char *ft_resp_chunk_role(const struct ft_resp_ctx *c) { return chunk(c, "assistant", "", NULL); }

char *ft_resp_chunk_text(const struct ft_resp_ctx *c, const char *text) { return chunk(c, NULL, text, NULL); }

char *ft_resp_chunk_finish(const struct ft_resp_ctx *c, enum ft_finish_reason finish) {
    return chunk(c, NULL, c->endpoint == FT_API_CHAT ? NULL : "", ft_resp_finish_reason(finish));
}

char *ft_resp_chunk_final(const struct ft_resp_ctx *c, const struct ft_request_metrics *usage,
                          const struct ft_request_metrics *metrics) {
    cJSON *o = envelope(c, true);
    if (!o)
        return NULL;
    cJSON_AddArrayToObject(o, "choices");
    if (usage)
        cJSON_AddItemToObject(o, "usage", ft_resp_usage(usage));
    if (metrics)
        cJSON_AddItemToObject(o, "metrics", ft_resp_metrics(metrics));
    return print_free(o);
}

char *ft_resp_completion(const struct ft_resp_ctx *c, const char *text, enum ft_finish_reason finish,
                         const struct ft_request_metrics *usage, const struct ft_request_metrics *metrics) {
    cJSON *o = envelope(c, false);
    cJSON *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    cJSON *ch = choices ? cJSON_CreateObject() : NULL;
    if (!ch) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToArray(choices, ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    if (c->endpoint == FT_API_CHAT) {
        cJSON *msg = cJSON_AddObjectToObject(ch, "message");
        if (msg) {
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddStringToObject(msg, "content", text);
            cJSON_AddNullToObject(msg, "refusal");
        }
    } else {
        cJSON_AddStringToObject(ch, "text", text);
    }
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddStringToObject(ch, "finish_reason", ft_resp_finish_reason(finish));
    cJSON_AddItemToObject(o, "usage", ft_resp_usage(usage));
    if (metrics)
        cJSON_AddItemToObject(o, "metrics", ft_resp_metrics(metrics));
    return print_free(o);
}

char *ft_resp_models(const char *model_id, long long created) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON *m = data ? cJSON_CreateObject() : NULL;
    if (m) {
        cJSON_AddItemToArray(data, m);
        cJSON_AddStringToObject(m, "id", model_id);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", (double)created);
        cJSON_AddStringToObject(m, "owned_by", "freetoken");
    }
    return print_free(o);
}

/* ---- tool calls (http/tool_calls.h parses them from the model's text) ---- */

static cJSON *tool_call_json(int index, const char *id, const char *name, const char *arguments, bool in_delta) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    if (in_delta)
        cJSON_AddNumberToObject(o, "index", index);
    if (id)
        cJSON_AddStringToObject(o, "id", id);
    if (name)
        cJSON_AddStringToObject(o, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(o, "function");
    if (f && name)
        cJSON_AddStringToObject(f, "name", name);
    if (f)
        cJSON_AddStringToObject(f, "arguments", arguments);
    return o;
}

char *ft_resp_completion_tools(const struct ft_resp_ctx *c, const struct ft_tool_parse *p, const char *const *ids,
                               const struct ft_request_metrics *usage, const struct ft_request_metrics *metrics) {
    cJSON *o = envelope(c, false);
    cJSON *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    cJSON *ch = choices ? cJSON_CreateObject() : NULL;
    if (!ch) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToArray(choices, ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    cJSON *msg = cJSON_AddObjectToObject(ch, "message");
    if (msg) {
        cJSON_AddStringToObject(msg, "role", "assistant");
        if (p->content && p->content[0])
            cJSON_AddStringToObject(msg, "content", p->content);
        else
            cJSON_AddNullToObject(msg, "content");
        cJSON *calls = cJSON_AddArrayToObject(msg, "tool_calls");
        for (size_t i = 0; calls && i < p->n_calls; i++)
            cJSON_AddItemToArray(calls, tool_call_json((int)i, ids[i], p->calls[i].name, p->calls[i].arguments, false));
        cJSON_AddNullToObject(msg, "refusal");
    }
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddStringToObject(ch, "finish_reason", "tool_calls");
    cJSON_AddItemToObject(o, "usage", ft_resp_usage(usage));
    if (metrics)
        cJSON_AddItemToObject(o, "metrics", ft_resp_metrics(metrics));
    return print_free(o);
}

char *ft_resp_chunk_tool_call(const struct ft_resp_ctx *c, int index, const char *id, const char *name,
                              const char *arguments) {
    cJSON *o = envelope(c, true);
    cJSON *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    cJSON *ch = choices ? chunk_choice(c, NULL, NULL, NULL) : NULL;
    if (ch) {
        cJSON_AddItemToArray(choices, ch);
        cJSON *delta = cJSON_GetObjectItemCaseSensitive(ch, "delta");
        cJSON *calls = delta ? cJSON_AddArrayToObject(delta, "tool_calls") : NULL;
        if (calls)
            cJSON_AddItemToArray(calls, tool_call_json(index, id, name, arguments, true));
    }
    if (o && c->include_usage)
        cJSON_AddNullToObject(o, "usage");
    return print_free(o);
}

char *ft_resp_chunk_finish_tools(const struct ft_resp_ctx *c) { return chunk(c, NULL, NULL, "tool_calls"); }
