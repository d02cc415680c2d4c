/* OpenAI response objects (http/responses.h). Field order follows OpenAI's
 * own responses, so a diff against theirs reads cleanly. */
#include "responses.h"

#include <stdlib.h>
#include <string.h>

/* OpenAI knows "stop" and "length" only: a cancelled or failed request
 * never reaches a client as a finish reason, and NONE cannot end one. */
const char *ft_resp_finish_reason(enum ft_finish_reason r) {
    return ft_finish_reason_name(r == FT_FINISH_LENGTH ? FT_FINISH_LENGTH : FT_FINISH_STOP);
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

/* Generated text may hold NUL bytes (a model can emit the byte 0), which
 * cJSON's C strings cannot: add_text() writes them as the byte 0xFF, which
 * valid UTF-8 never contains, and print_text_free() turns each into the
 * escape \u0000 after printing. Nothing of the text is lost. */
#define NUL_STANDIN '\xff'

enum text_added { TEXT_PLAIN, TEXT_WITH_NUL, TEXT_OOM };

static enum text_added add_text(cJSON *o, const char *name, const char *text, size_t len) {
    if (!memchr(text, 0, len))
        return cJSON_AddStringToObject(o, name, text) ? TEXT_PLAIN : TEXT_OOM;
    char *copy = malloc(len + 1);
    if (!copy)
        return TEXT_OOM;
    for (size_t i = 0; i < len; i++)
        copy[i] = text[i] ? text[i] : NUL_STANDIN;
    copy[len] = '\0';
    const bool ok = cJSON_AddStringToObject(o, name, copy) != NULL;
    free(copy);
    return ok ? TEXT_WITH_NUL : TEXT_OOM;
}

static char *print_text_free(cJSON *o, bool has_nul) {
    char *s = print_free(o);
    if (!s || !has_nul)
        return s;
    size_t n = 0, len = strlen(s);
    for (size_t i = 0; i < len; i++)
        n += s[i] == NUL_STANDIN;
    char *out = malloc(len + 5 * n + 1), *w = out;
    if (out) {
        for (size_t i = 0; i < len; i++) {
            if (s[i] == NUL_STANDIN) {
                memcpy(w, "\\u0000", 6);
                w += 6;
            } else {
                *w++ = s[i];
            }
        }
        *w = '\0';
    }
    free(s);
    return out;
}

/* One choice of a chunk: chat has delta, completions have text. */
static cJSON *chunk_choice(const struct ft_resp_ctx *c, int index, const char *role, const char *text,
                           size_t len, const char *finish, cJSON *logprobs, enum text_added *added) {
    cJSON *ch = cJSON_CreateObject();
    if (!ch) {
        cJSON_Delete(logprobs);
        return NULL;
    }
    cJSON_AddNumberToObject(ch, "index", index);
    if (c->endpoint == FT_API_CHAT) {
        cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
        if (delta && role)
            cJSON_AddStringToObject(delta, "role", role);
        if (delta && text)
            *added = add_text(delta, "content", text, len);
    } else {
        *added = add_text(ch, "text", text ? text : "", text ? len : 0);
    }
    if (logprobs)
        cJSON_AddItemToObject(ch, "logprobs", logprobs);
    else
        cJSON_AddNullToObject(ch, "logprobs");
    if (finish)
        cJSON_AddStringToObject(ch, "finish_reason", finish);
    else
        cJSON_AddNullToObject(ch, "finish_reason");
    return ch;
}

static char *chunk(const struct ft_resp_ctx *c, int index, const char *role, const char *text, size_t len,
                   const char *finish, cJSON *logprobs) {
    cJSON *o = envelope(c, true);
    cJSON *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    if (!choices) {
        cJSON_Delete(logprobs);
        cJSON_Delete(o);
        return NULL;
    }
    enum text_added added = TEXT_PLAIN;
    cJSON *ch = chunk_choice(c, index, role, text, len, finish, logprobs, &added);
    if (!ch || added == TEXT_OOM) {
        cJSON_Delete(ch);
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToArray(choices, ch);
    if (o && c->include_usage)
        cJSON_AddNullToObject(o, "usage");
    return print_text_free(o, added == TEXT_WITH_NUL);
}

char *ft_resp_chunk_role(const struct ft_resp_ctx *c, int index) {
    return chunk(c, index, "assistant", "", 0, NULL, NULL);
}

char *ft_resp_chunk_text(const struct ft_resp_ctx *c, int index, const char *text, size_t len, cJSON *logprobs) {
    return chunk(c, index, NULL, text, len, NULL, logprobs);
}

char *ft_resp_chunk_reasoning(const struct ft_resp_ctx *c, int index, const char *text, size_t len,
                              cJSON *logprobs) {
    cJSON *o = envelope(c, true);
    cJSON *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    if (!choices) {
        cJSON_Delete(logprobs);
        cJSON_Delete(o);
        return NULL;
    }
    enum text_added added = TEXT_PLAIN;
    cJSON *ch = chunk_choice(c, index, NULL, NULL, 0, NULL, logprobs, &added);
    cJSON *delta = ch ? cJSON_GetObjectItemCaseSensitive(ch, "delta") : NULL;
    if (delta)
        added = add_text(delta, "reasoning_content", text, len);
    if (!delta || added == TEXT_OOM) {
        cJSON_Delete(ch);
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToArray(choices, ch);
    if (c->include_usage)
        cJSON_AddNullToObject(o, "usage");
    return print_text_free(o, added == TEXT_WITH_NUL);
}

char *ft_resp_chunk_finish(const struct ft_resp_ctx *c, int index, enum ft_finish_reason finish, cJSON *logprobs) {
    return chunk(c, index, NULL, c->endpoint == FT_API_CHAT ? NULL : "", 0, ft_resp_finish_reason(finish), logprobs);
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

char *ft_resp_completion(const struct ft_resp_ctx *c, const struct ft_resp_choice *choices, int n,
                         const struct ft_request_metrics *usage, const struct ft_request_metrics *metrics) {
    cJSON *o = envelope(c, false);
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    bool ok = arr != NULL, has_nul = false;
    enum text_added added = TEXT_PLAIN;
    for (int i = 0; i < n; i++) {
        cJSON *ch = ok ? cJSON_CreateObject() : NULL;
        if (!ch) {
            ok = false;
            cJSON_Delete(choices[i].logprobs);
            continue;
        }
        cJSON_AddItemToArray(arr, ch);
        cJSON_AddNumberToObject(ch, "index", i);
        if (c->endpoint == FT_API_CHAT) {
            cJSON *msg = cJSON_AddObjectToObject(ch, "message");
            if (msg) {
                cJSON_AddStringToObject(msg, "role", "assistant");
                added = add_text(msg, "content", choices[i].text, choices[i].len);
                if (choices[i].reasoning_len && added != TEXT_OOM) {
                    /* llama-server's and vLLM's field, only when there is reasoning */
                    has_nul |= added == TEXT_WITH_NUL;
                    added = add_text(msg, "reasoning_content", choices[i].reasoning, choices[i].reasoning_len);
                }
                cJSON_AddNullToObject(msg, "refusal");
            }
        } else {
            added = add_text(ch, "text", choices[i].text, choices[i].len);
        }
        ok &= added != TEXT_OOM;
        has_nul |= added == TEXT_WITH_NUL;
        if (choices[i].logprobs)
            cJSON_AddItemToObject(ch, "logprobs", choices[i].logprobs);
        else
            cJSON_AddNullToObject(ch, "logprobs");
        cJSON_AddStringToObject(ch, "finish_reason", ft_resp_finish_reason(choices[i].finish));
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToObject(o, "usage", ft_resp_usage(usage));
    if (metrics)
        cJSON_AddItemToObject(o, "metrics", ft_resp_metrics(metrics));
    return print_text_free(o, has_nul);
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
                               const char *reasoning, const struct ft_request_metrics *usage,
                               const struct ft_request_metrics *metrics) {
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
        if (reasoning && reasoning[0])
            cJSON_AddStringToObject(msg, "reasoning_content", reasoning);
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
    enum text_added added = TEXT_PLAIN;
    cJSON *ch = choices ? chunk_choice(c, 0, NULL, NULL, 0, NULL, NULL, &added) : NULL;
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

char *ft_resp_chunk_finish_tools(const struct ft_resp_ctx *c) { return chunk(c, 0, NULL, NULL, 0, "tool_calls", NULL); }
