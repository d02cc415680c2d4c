/* The Jinja context of a chat request (http/chat_context.h).
 *
 * Messages reach the template as llama.cpp passes them: {"role", "content",
 * "name" (tool), "tool_call_id" (tool), "tool_calls": [{"type": "function",
 * "function": {"name", "arguments"}, "id"}]}, content "" rather than null
 * beside tool calls, arguments parsed into an object when the template
 * wants one (Qwen, Hermes and Llama 3 print `arguments | tojson`). */
#include "chat_context.h"

#include "ft/common.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OOM_NULL() (ft_api_error_set(err, 500, NULL, "server_error", "out of memory"), (cJSON *)NULL)

static const char probe_tool[] = "ft_probe_tool_needle";
static const char probe_args[] = "{\"argument_needle\": \"print('Hello, World!')\"}";

static bool has(const char *s, const char *needle) { return s && strstr(s, needle) != NULL; }

static char *probe_render(const struct ft_chat_template *t, cJSON *ctx) {
    char *out = NULL;
    /* A template may reject a probe: that is an answer, not an error to log. */
    if (!ctx || ft_chat_template_try_render_json(t, ctx, &out))
        out = NULL;
    cJSON_Delete(ctx);
    return out;
}

/* A probe's context: the messages (JSON text) and the special tokens. */
static cJSON *probe_base_ctx(const char *msgs, const char *bos, const char *eos) {
    cJSON *ctx = cJSON_CreateObject();
    if (!ctx)
        return NULL;
    cJSON_AddItemToObject(ctx, "messages", cJSON_Parse(msgs));
    cJSON_AddStringToObject(ctx, "bos_token", bos ? bos : "");
    cJSON_AddStringToObject(ctx, "eos_token", eos ? eos : "");
    return ctx;
}

static const char probe_system[] = "ft_probe_system_needle";

static cJSON *probe_system_ctx(const char *bos, const char *eos) {
    char msgs[256];
    snprintf(msgs, sizeof(msgs),
             "[{\"role\": \"system\", \"content\": \"%s\"}, {\"role\": \"user\", \"content\": \"Hey\"}]",
             probe_system);
    cJSON *ctx = probe_base_ctx(msgs, bos, eos);
    if (!ctx)
        return NULL;
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", true);
    return ctx;
}

static cJSON *probe_ctx(const char *bos, const char *eos, bool with_call, bool object_args) {
    char tools[512], msgs[1024];
    snprintf(tools, sizeof(tools),
             "[{\"type\": \"function\", \"function\": {\"name\": \"%s\", \"description\": \"\", \"parameters\": "
             "{\"type\": \"object\", \"properties\": {\"argument_needle\": {\"type\": \"string\"}}, \"required\": "
             "[\"argument_needle\"]}}}]",
             probe_tool);
    if (with_call) {
        cJSON *a = cJSON_CreateString(probe_args);
        char *args = a ? cJSON_PrintUnformatted(a) : NULL;
        cJSON_Delete(a);
        if (!args)
            return NULL;
        snprintf(msgs, sizeof(msgs),
                 "[{\"role\": \"user\", \"content\": \"Hey\"}, {\"role\": \"assistant\", \"content\": \"\", "
                 "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"%s\", \"arguments\": %s}, "
                 "\"id\": \"call00001\"}]}]",
                 probe_tool, object_args ? probe_args : args);
        free(args);
    } else {
        snprintf(msgs, sizeof(msgs), "[{\"role\": \"user\", \"content\": \"Hey\"}]");
    }
    cJSON *ctx = probe_base_ctx(msgs, bos, eos);
    if (!ctx)
        return NULL;
    /* Not with the call probes: the parameter schema would show the needle. */
    if (!with_call)
        cJSON_AddItemToObject(ctx, "tools", cJSON_Parse(tools));
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", !with_call);
    return ctx;
}

void ft_chat_tool_caps_probe(const struct ft_chat_template *t, const char *bos, const char *eos,
                             struct ft_chat_tool_caps *out) {
    memset(out, 0, sizeof(*out));
    size_t len;
    const char *src = ft_chat_template_source(t, &len);
    out->format = ft_tool_format_detect(src, len);
    char *o = probe_render(t, probe_ctx(bos, eos, false, false));
    out->renders_tools = has(o, probe_tool);
    free(o);
    o = probe_render(t, probe_system_ctx(bos, eos));
    out->system_role = has(o, probe_system);
    free(o);
    /* A call counts as rendered when its function's name shows (tools are
     * not passed to these probes); the arguments are passed as an object
     * when an object's key shows in some form (tojson, or key by key as GLM
     * does): on llama.cpp's 68 templates this gives exactly llama.cpp's
     * supports_object_arguments (tests/unit/test_tool_calls.c). */
    char *o_str = probe_render(t, probe_ctx(bos, eos, true, false));
    char *o_obj = probe_render(t, probe_ctx(bos, eos, true, true));
    out->renders_tool_calls = has(o_str, probe_tool) || has(o_obj, probe_tool);
    out->object_arguments = has(o_obj, "argument_needle");
    free(o_str);
    free(o_obj);
    FT_LOG_I("chat template: tool calls in the %s format; the template %s tools and %s tool calls%s",
             ft_tool_format_name(out->format), out->renders_tools ? "describes" : "does not describe",
             out->renders_tool_calls ? "renders" : "does not render",
             out->renders_tool_calls ? (out->object_arguments ? " (arguments as objects)" : " (arguments as strings)")
                                     : "");
}

bool ft_chat_tools_active(const struct ft_api_request *r) {
    return r->n_tools > 0 && r->tool_choice != FT_API_TOOL_CHOICE_NONE;
}

bool ft_chat_generic_prompt(const struct ft_api_request *r, const struct ft_chat_tool_caps *caps) {
    return ft_chat_tools_active(r) && caps->format == FT_TOOL_FORMAT_GENERIC && !caps->renders_tools;
}

/* JSON indented by two spaces, as Python's json.dumps(indent=2) and
 * nlohmann's dump(2) print it (cJSON_Print indents with tabs and keeps
 * arrays of objects on one line). */
struct pbuf {
    char *p;
    size_t n, cap;
    bool oom;
};

static void put(struct pbuf *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void put_indent(struct pbuf *b, int depth) {
    put(b, "\n", 1);
    for (int i = 0; i < depth; i++)
        put(b, "  ", 2);
}

static void put_json(struct pbuf *b, const cJSON *v, int depth) {
    if ((cJSON_IsArray(v) || cJSON_IsObject(v)) && v->child) {
        const bool obj = cJSON_IsObject(v);
        put(b, obj ? "{" : "[", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            put_indent(b, depth + 1);
            if (obj) {
                cJSON *k = cJSON_CreateString(c->string);
                char *ks = k ? cJSON_PrintUnformatted(k) : NULL;
                if (ks)
                    put(b, ks, strlen(ks));
                else
                    b->oom = true;
                put(b, ": ", 2);
                free(ks);
                cJSON_Delete(k);
            }
            put_json(b, c, depth + 1);
            if (c->next)
                put(b, ",", 1);
        }
        put_indent(b, depth);
        put(b, obj ? "}" : "]", 1);
        return;
    }
    char *s = cJSON_PrintUnformatted(v); /* scalars, [] and {} */
    if (s)
        put(b, s, strlen(s));
    else
        b->oom = true;
    free(s);
}

static char *print_indent2(const cJSON *v) {
    struct pbuf b = {0};
    put_json(&b, v, 0);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

static bool add_str(cJSON *o, const char *k, const char *v) { return cJSON_AddStringToObject(o, k, v) != NULL; }

/* A tool call as templates see it; arguments parsed when `object`. */
static cJSON *call_json(const struct ft_api_tool_call *c, bool object) {
    cJSON *o = cJSON_CreateObject(), *f = NULL;
    if (!o)
        return NULL;
    bool ok = add_str(o, "type", "function") && (f = cJSON_AddObjectToObject(o, "function")) != NULL &&
              add_str(f, "name", c->name);
    if (ok) {
        cJSON *args = object ? cJSON_Parse(c->arguments) : cJSON_CreateString(c->arguments);
        ok = args && cJSON_AddItemToObject(f, "arguments", args);
        if (!ok)
            cJSON_Delete(args);
    }
    ok = ok && add_str(o, "id", c->id);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* llama.cpp's polyfill for templates that do not render tool calls: the
 * calls become the assistant's content as {"tool_calls": [...]} JSON, a
 * tool result a user message holding {"tool_response": {...}}. */
static char *polyfill_content(const struct ft_api_message *m) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    bool ok = true;
    if (m->n_tool_calls) {
        cJSON *arr = cJSON_AddArrayToObject(o, "tool_calls");
        ok = arr != NULL;
        for (int32_t j = 0; ok && j < m->n_tool_calls; j++) {
            cJSON *c = cJSON_CreateObject();
            ok = c && cJSON_AddItemToArray(arr, c) && add_str(c, "name", m->tool_calls[j].name);
            cJSON *args = ok ? cJSON_Parse(m->tool_calls[j].arguments) : NULL;
            if (ok && !(args && cJSON_AddItemToObject(c, "arguments", args))) {
                cJSON_Delete(args);
                ok = false;
            }
            ok = ok && add_str(c, "id", m->tool_calls[j].id);
        }
        if (ok && m->content && m->content[0])
            ok = add_str(o, "content", m->content);
    } else {
        cJSON *r = cJSON_AddObjectToObject(o, "tool_response");
        ok = r && add_str(r, "tool", m->name ? m->name : "") && add_str(r, "content", m->content ? m->content : "") &&
             add_str(r, "tool_call_id", m->tool_call_id);
    }
    char *s = ok ? print_indent2(o) : NULL;
    cJSON_Delete(o);
    return s;
}

static cJSON *message_json(const struct ft_api_message *m, const struct ft_chat_tool_caps *caps) {
    const bool is_tool = !strcmp(m->role, "tool");
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    bool ok;
    /* Only for templates that know nothing of tools: one that describes
     * tools has its own way with the history (llama.cpp passes it as is). */
    if ((m->n_tool_calls || is_tool) && !caps->renders_tool_calls && !caps->renders_tools) {
        char *content = polyfill_content(m);
        ok = content && add_str(o, "role", is_tool ? "user" : m->role) && add_str(o, "content", content);
        free(content);
    } else {
        ok = add_str(o, "role", m->role) && add_str(o, "content", m->content ? m->content : "");
        if (ok && m->name)
            ok = add_str(o, "name", m->name);
        if (ok && m->tool_call_id)
            ok = add_str(o, "tool_call_id", m->tool_call_id);
        if (ok && m->n_tool_calls) {
            cJSON *arr = cJSON_AddArrayToObject(o, "tool_calls");
            ok = arr != NULL;
            for (int32_t j = 0; ok && j < m->n_tool_calls; j++) {
                cJSON *c = call_json(&m->tool_calls[j], caps->object_arguments);
                ok = c && cJSON_AddItemToArray(arr, c);
                if (!ok)
                    cJSON_Delete(c);
            }
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* What the generic format tells the model (after llama.cpp's generic
 * handler and minja's tool polyfill). */
static char *generic_instructions(const struct ft_api_request *r) {
    char *tools = print_indent2(r->tools);
    if (!tools)
        return NULL;
    static const char intro[] = "You can call any of the following tools to satisfy the user's requests: ";
    static const char how[] =
        "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to the "
        "user's request.\n"
        "To call a tool: {\"tool_call\": {\"name\": \"<tool name>\", \"arguments\": {<the arguments>}}}\n";
    static const char how_many[] =
        "To call several tools at once: {\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": "
        "{<the arguments>}}, ...]}\n";
    static const char answer[] = "To answer: {\"response\": \"<your answer>\"}";
    size_t n = sizeof(intro) + (tools ? strlen(tools) : 0) + 2 + sizeof(how) + sizeof(how_many) + sizeof(answer);
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s\n\n%s%s%s", intro, tools, how, r->parallel_tool_calls ? how_many : "", answer);
    free(tools);
    return s;
}

/* Set the content of message m to prefix + sep + its content. */
static bool prepend_content(cJSON *m, const char *prefix, const char *sep) {
    const char *c = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "content"));
    c = c ? c : "";
    size_t n = strlen(prefix) + strlen(sep) + strlen(c) + 1;
    char *s = malloc(n);
    if (!s)
        return false;
    snprintf(s, n, "%s%s%s", prefix, sep, c);
    cJSON *v = cJSON_CreateString(s);
    free(s);
    if (!v || !cJSON_ReplaceItemInObjectCaseSensitive(m, "content", v)) {
        cJSON_Delete(v);
        return false;
    }
    return true;
}

static bool is_role(const cJSON *m, const char *role) {
    const char *r = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
    return r && !strcmp(r, role);
}

cJSON *ft_chat_context_build(const struct ft_api_request *r, const struct ft_chat_tool_caps *caps, const char *bos,
                             const char *eos, struct ft_api_error *err) {
    const bool tools = ft_chat_tools_active(r);
    cJSON *ctx = cJSON_CreateObject();
    cJSON *msgs = ctx ? cJSON_AddArrayToObject(ctx, "messages") : NULL;
    bool ok = msgs != NULL;
    for (int32_t i = 0; ok && i < r->n_messages; i++) {
        cJSON *m = message_json(&r->messages[i], caps);
        ok = m && cJSON_AddItemToArray(msgs, m);
        if (!ok)
            cJSON_Delete(m);
    }
    /* The generic format's instructions, for templates that say nothing
     * about tools (as minja polyfilled them), follow the client's system
     * message or are one. A template that describes tools in a format not
     * parsed here keeps its own prompt, as llama.cpp renders it. */
    if (ok && ft_chat_generic_prompt(r, caps)) {
        char *extra = generic_instructions(r);
        cJSON *first = cJSON_GetArrayItem(msgs, 0);
        if (!extra) {
            ok = false;
        } else if (first && is_role(first, "system")) {
            const char *c = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(first, "content"));
            size_t n = (c ? strlen(c) : 0) + 2 + strlen(extra) + 1;
            char *merged = malloc(n);
            if (merged)
                snprintf(merged, n, "%s%s%s", c ? c : "", c && *c ? "\n\n" : "", extra);
            cJSON *v = merged ? cJSON_CreateString(merged) : NULL;
            ok = v && cJSON_ReplaceItemInObjectCaseSensitive(first, "content", v);
            if (!ok)
                cJSON_Delete(v);
            free(merged);
        } else {
            cJSON *sys = cJSON_CreateObject();
            ok = sys && add_str(sys, "role", "system") && add_str(sys, "content", extra) &&
                 cJSON_InsertItemInArray(msgs, 0, sys);
            if (!ok)
                cJSON_Delete(sys);
        }
        free(extra);
    }
    /* llama.cpp's fix for templates without a system role: the system text
     * goes in front of the next message's content ("\n" between), or away
     * when it is alone. */
    cJSON *first = ok ? cJSON_GetArrayItem(msgs, 0) : NULL;
    if (ok && !caps->system_role && first && is_role(first, "system")) {
        cJSON *next = first->next;
        const char *c = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(first, "content"));
        if (next)
            ok = prepend_content(next, c ? c : "", "\n");
        if (ok)
            cJSON_DeleteItemFromArray(msgs, 0);
    }
    ok = ok && add_str(ctx, "bos_token", bos ? bos : "") && add_str(ctx, "eos_token", eos ? eos : "");
    if (ok && tools) {
        cJSON *t = cJSON_Duplicate(r->tools, true);
        ok = t && cJSON_AddItemToObject(ctx, "tools", t);
        if (!ok)
            cJSON_Delete(t);
    }
    ok = ok && cJSON_AddBoolToObject(ctx, "add_generation_prompt", true);
    if (!ok) {
        cJSON_Delete(ctx);
        return OOM_NULL();
    }
    return ctx;
}
