/* Reasoning in the server (http/reasoning.h): request fields, the
 * template's view of them, and the answer's per-choice parsers.
 *
 * The semantics are llama-server's: reasoning_format "none" leaves the
 * answer as the model wrote it, "auto" and "deepseek" separate it when the
 * template has a reasoning syntax (engine/include/ft/reasoning.h); the
 * server's --reasoning-format is the default, the request's field wins. A
 * previous assistant turn's reasoning_content reaches the template as
 * `reasoning_content` (Qwen3's and R1's templates show it only after the
 * last user message, or drop it) and, for gpt-oss, as `thinking`. */
#include "reasoning.h"

#include "ft/common.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(param, ...) (ft_api_error_set(err, 400, (param), NULL, __VA_ARGS__), -1)

int ft_api_parse_reasoning(const cJSON *root, struct ft_api_request *r, struct ft_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "reasoning_format");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v) || ft_reasoning_format_parse(v->valuestring, &r->reasoning_format))
            return BAD("reasoning_format", "'reasoning_format' must be \"none\", \"auto\" or \"deepseek\"");
        r->reasoning_format_set = true;
    }
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw)) {
        if (!cJSON_IsObject(kw))
            return BAD("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        const cJSON *et = cJSON_GetObjectItemCaseSensitive(kw, "enable_thinking");
        if (et && !cJSON_IsBool(et))
            return BAD("chat_template_kwargs.enable_thinking", "'chat_template_kwargs.enable_thinking' must be a "
                                                               "boolean");
        r->thinking_off = et && cJSON_IsFalse(et);
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages"), *m;
    int32_t i = 0;
    cJSON_ArrayForEach(m, msgs) {
        if (i >= r->n_messages)
            break;
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (rc && !cJSON_IsNull(rc)) {
            char param[64];
            snprintf(param, sizeof(param), "messages[%d].reasoning_content", (int)i);
            if (!cJSON_IsString(rc) || strcmp(r->messages[i].role, "assistant") != 0)
                return BAD(param, "'%s' must be a string, in an assistant message", param);
            if (!(r->messages[i].reasoning_content = strdup(rc->valuestring))) {
                ft_api_error_set(err, 500, NULL, "server_error", "out of memory");
                return -1;
            }
        }
        i++;
    }
    return 0;
}

bool ft_reasoning_context(cJSON *ctx, const struct ft_api_request *r, enum ft_reasoning_syntax syntax) {
    if (!cJSON_AddBoolToObject(ctx, "enable_thinking", !r->thinking_off))
        return false;
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(ctx, "messages"), *m;
    /* ft_chat_context_build keeps one JSON message per request message,
     * in order, except that it may insert a system message first or merge
     * the first into the next: match assistant turns by counting them. */
    int32_t next = 0;
    cJSON_ArrayForEach(m, msgs) {
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
        if (!role || strcmp(role, "assistant") != 0)
            continue;
        while (next < r->n_messages && strcmp(r->messages[next].role, "assistant") != 0)
            next++;
        if (next >= r->n_messages)
            break;
        const char *rc = r->messages[next++].reasoning_content;
        if (!rc)
            continue;
        if (!cJSON_AddStringToObject(m, "reasoning_content", rc))
            return false;
        if (syntax == FT_REASONING_SYNTAX_HARMONY) {
            if (!cJSON_AddStringToObject(m, "thinking", rc))
                return false;
            const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
            if (cJSON_GetArraySize(tc) > 0)
                cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
        }
    }
    return true;
}

struct ft_reasoning_answer *ft_reasoning_answer_new(enum ft_reasoning_syntax syntax,
                                                    enum ft_reasoning_format fmt_default,
                                                    const struct ft_api_request *api, bool *oom) {
    *oom = false;
    if (syntax == FT_REASONING_SYNTAX_NONE || api->endpoint != FT_API_CHAT || api->n < 1)
        return NULL;
    const enum ft_reasoning_format fmt = api->reasoning_format_set ? api->reasoning_format : fmt_default;
    /* "none" with <think> is the text as written: no parser at all. Harmony
     * still needs one to take the headers out. */
    if (fmt == FT_REASONING_FORMAT_NONE && syntax == FT_REASONING_SYNTAX_THINK)
        return NULL;
    struct ft_reasoning_answer *a = calloc(1, sizeof(*a) + (size_t)api->n * sizeof(a->choices[0]));
    if (!a) {
        *oom = true;
        return NULL;
    }
    a->syntax = syntax;
    a->n = api->n;
    for (int32_t c = 0; c < a->n; c++)
        ft_reasoning_init(&a->choices[c].parser, syntax, fmt != FT_REASONING_FORMAT_NONE, api->reasoning_opens);
    return a;
}

void ft_reasoning_answer_free(struct ft_reasoning_answer *a) {
    if (!a)
        return;
    for (int32_t c = 0; c < a->n; c++) {
        ft_reasoning_free(&a->choices[c].parser);
        free(a->choices[c].text.s);
    }
    free(a);
}

static bool offered(const char *name, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(name, names[i]))
            return true;
    return false;
}

int ft_reasoning_take_calls(struct ft_reasoning_answer *a, const char *const *names, size_t n_names,
                            size_t max_calls, struct ft_tool_parse *p) {
    if (!a || a->syntax != FT_REASONING_SYNTAX_HARMONY || a->n < 1)
        return FT_OK;
    const struct ft_reasoning_parser *rp = &a->choices[0].parser;
    size_t n = 0;
    for (size_t i = 0; i < rp->n_calls; i++)
        n += offered(rp->calls[i].name, names, n_names);
    if (!n || (max_calls && n > max_calls))
        return FT_OK;
    struct ft_tool_call *calls = calloc(n, sizeof(*calls));
    if (!calls)
        return FT_ENOMEM;
    size_t k = 0;
    int rc;
    for (size_t i = 0; i < rp->n_calls; i++) {
        if (!offered(rp->calls[i].name, names, n_names))
            continue;
        cJSON *args = cJSON_Parse(rp->calls[i].arguments);
        if (!cJSON_IsObject(args)) { /* not a call: the answer keeps what it had */
            cJSON_Delete(args);
            goto none;
        }
        calls[k].name = strdup(rp->calls[i].name);
        calls[k].arguments = cJSON_PrintUnformatted(args);
        cJSON_Delete(args);
        if (!calls[k].name || !calls[k].arguments) {
            k++;
            goto oom;
        }
        k++;
    }
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].id);
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    p->calls = calls;
    p->n_calls = k;
    return FT_OK;
none:
    rc = FT_OK;
    goto out;
oom:
    rc = FT_ENOMEM;
out:
    for (size_t i = 0; i < k; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
    return rc;
}
