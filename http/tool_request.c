/* The tool fields of a chat request (http/request_parse.h): `tools`,
 * `tool_choice`, `parallel_tool_calls`, and in messages the assistant's
 * `tool_calls` and the `tool` role's `tool_call_id` / `name`.
 *
 * tools are normalized to what chat templates are written for (Hugging
 * Face's and llama.cpp's convention): [{"type": "function", "function":
 * {"name", "description" ("" when absent), "parameters" ({} when absent)}}].
 *
 * Refused with a 400 naming the field, not ignored: tool_choice "required"
 * or a named function and `strict: true` — each promises a well-formed call
 * of a given schema, which only constrained decoding (a grammar built from
 * the parameter schema, forcing the format of include/ft/tool_calls.h) can
 * keep; ft_api_parse_tools() is where that will plug in. Also refused: the
 * deprecated `functions` / `function_call`, and tool types other than
 * "function". */
#include "request_parse.h"

#include "ft/common.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(param, ...) (ft_api_error_set(err, 400, (param), NULL, __VA_ARGS__), -1)
#define OOM() (ft_api_error_set(err, 500, NULL, "server_error", "out of memory"), -1)

static const cJSON *tr_field(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsNull(v) ? NULL : v;
}

static char *tr_dup(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

/* OpenAI's rule for function names: a-z, A-Z, 0-9, '_' and '-', 1 to 64. */
static bool valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static int parse_tool(const cJSON *t, int i, cJSON *out_list, char **name_out, struct ft_api_error *err) {
    char param[96];
    snprintf(param, sizeof(param), "tools[%d]", i);
    if (!cJSON_IsObject(t))
        return BAD(param, "'%s' must be an object", param);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
    snprintf(param, sizeof(param), "tools[%d].type", i);
    if (!cJSON_IsString(type))
        return BAD(param, "'%s' must be the string \"function\"", param);
    if (strcmp(type->valuestring, "function") != 0)
        return BAD(param, "tools of type '%.40s' are not supported: only \"function\"", type->valuestring);
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
    snprintf(param, sizeof(param), "tools[%d].function", i);
    if (!cJSON_IsObject(fn))
        return BAD(param, "'%s' must be an object", param);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    snprintf(param, sizeof(param), "tools[%d].function.name", i);
    if (!cJSON_IsString(name) || !valid_name(name->valuestring))
        return BAD(param, "'%s' must be a string of 1 to 64 characters a-z, A-Z, 0-9, '_' or '-'", param);
    const cJSON *desc = tr_field(fn, "description");
    snprintf(param, sizeof(param), "tools[%d].function.description", i);
    if (desc && !cJSON_IsString(desc))
        return BAD(param, "'%s' must be a string", param);
    const cJSON *params = tr_field(fn, "parameters");
    snprintf(param, sizeof(param), "tools[%d].function.parameters", i);
    if (params && !cJSON_IsObject(params))
        return BAD(param, "'%s' must be a JSON Schema object", param);
    const cJSON *strict = tr_field(fn, "strict");
    snprintf(param, sizeof(param), "tools[%d].function.strict", i);
    if (strict && !cJSON_IsBool(strict))
        return BAD(param, "'%s' must be a boolean", param);
    if (cJSON_IsTrue(strict))
        return BAD(param,
                   "'%s': true needs constrained decoding to guarantee the schema, which this server does not have "
                   "yet; send false or leave it out",
                   param);

    cJSON *o = cJSON_CreateObject(), *f = NULL;
    if (!o || !cJSON_AddItemToArray(out_list, o))
        return cJSON_Delete(o), OOM();
    if (!cJSON_AddStringToObject(o, "type", "function") || !(f = cJSON_AddObjectToObject(o, "function")) ||
        !cJSON_AddStringToObject(f, "name", name->valuestring) ||
        !cJSON_AddStringToObject(f, "description", desc ? desc->valuestring : ""))
        return OOM();
    cJSON *pc = params ? cJSON_Duplicate(params, true) : cJSON_CreateObject();
    if (!pc || !cJSON_AddItemToObject(f, "parameters", pc))
        return cJSON_Delete(pc), OOM();
    if (!(*name_out = tr_dup(name->valuestring)))
        return OOM();
    return 0;
}

int ft_api_parse_tools(const cJSON *root, struct ft_api_request *r, struct ft_api_error *err) {
    r->parallel_tool_calls = true;
    r->tool_choice = FT_API_TOOL_CHOICE_NONE;
    if (tr_field(root, "functions"))
        return BAD("functions", "'functions' is deprecated and not supported: use 'tools'");
    if (tr_field(root, "function_call"))
        return BAD("function_call", "'function_call' is deprecated and not supported: use 'tool_choice'");
    const cJSON *tools = tr_field(root, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools))
            return BAD("tools", "'tools' must be an array");
        int n = cJSON_GetArraySize(tools);
        if (n > FT_API_MAX_TOOLS)
            return BAD("tools", "'tools' has more than %d entries", FT_API_MAX_TOOLS);
        /* An empty list is no tools, as OpenAI treats it. */
        if (n > 0) {
            if (!(r->tools = cJSON_CreateArray()) || !(r->tool_names = calloc((size_t)n, sizeof(char *))))
                return OOM();
            const cJSON *t;
            cJSON_ArrayForEach(t, tools) {
                const int i = r->n_tools;
                if (parse_tool(t, i, r->tools, &r->tool_names[i], err))
                    return -1;
                r->n_tools++;
                for (int j = 0; j < i; j++)
                    if (!strcmp(r->tool_names[j], r->tool_names[i])) {
                        char param[64];
                        snprintf(param, sizeof(param), "tools[%d].function.name", i);
                        return BAD(param, "'%s': two tools are named '%s'", param, r->tool_names[i]);
                    }
            }
            r->tool_choice = FT_API_TOOL_CHOICE_AUTO;
        }
    }

    const cJSON *v = tr_field(root, "parallel_tool_calls");
    if (v) {
        if (!cJSON_IsBool(v))
            return BAD("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        r->parallel_tool_calls = cJSON_IsTrue(v);
    }

    const cJSON *tc = tr_field(root, "tool_choice");
    if (!tc)
        return 0;
    if (cJSON_IsString(tc)) {
        if (!strcmp(tc->valuestring, "none"))
            r->tool_choice = FT_API_TOOL_CHOICE_NONE;
        else if (!strcmp(tc->valuestring, "auto"))
            r->tool_choice = FT_API_TOOL_CHOICE_AUTO;
        else if (!strcmp(tc->valuestring, "required"))
            r->tool_choice = FT_API_TOOL_CHOICE_REQUIRED;
        else
            return BAD("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                      "{\"type\": \"function\", \"function\": {\"name\": ...}} (got '%.40s')",
                       tc->valuestring);
    } else if (cJSON_IsObject(tc)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *name = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 || !cJSON_IsString(name))
            return BAD("tool_choice", "an object 'tool_choice' must be {\"type\": \"function\", \"function\": "
                                      "{\"name\": ...}}");
        int k = -1;
        for (int j = 0; j < r->n_tools && k < 0; j++)
            if (!strcmp(r->tool_names[j], name->valuestring))
                k = j;
        if (k < 0)
            return BAD("tool_choice", "'tool_choice' names the function '%.64s', which is not in 'tools'",
                       name->valuestring);
        r->tool_choice = FT_API_TOOL_CHOICE_FUNCTION;
        if (!(r->tool_choice_name = tr_dup(name->valuestring)))
            return OOM();
    } else {
        return BAD("tool_choice", "'tool_choice' must be a string or an object");
    }
    if (r->tool_choice != FT_API_TOOL_CHOICE_NONE && r->n_tools == 0)
        return BAD("tool_choice", "'tool_choice' other than \"none\" needs a non-empty 'tools'");
    /* The integration point for constrained decoding: with a grammar built
     * from the tools' parameter schemas in the format the template's model
     * writes (include/ft/tool_calls.h), these become forced calls. */
    if (r->tool_choice == FT_API_TOOL_CHOICE_REQUIRED || r->tool_choice == FT_API_TOOL_CHOICE_FUNCTION)
        return BAD("tool_choice",
                   "'tool_choice' %s needs constrained decoding to force a well-formed call, which this server "
                   "does not have yet; use \"auto\" (the model decides) or \"none\"",
                   r->tool_choice == FT_API_TOOL_CHOICE_REQUIRED ? "\"required\"" : "naming a function");
    return 0;
}

void ft_api_tools_free(struct ft_api_request *r) {
    cJSON_Delete(r->tools);
    r->tools = NULL;
    for (int32_t i = 0; i < r->n_tools; i++)
        free(r->tool_names[i]);
    free(r->tool_names);
    r->tool_names = NULL;
    r->n_tools = 0;
    free(r->tool_choice_name);
    r->tool_choice_name = NULL;
}

static int parse_call(const cJSON *c, int i, int j, struct ft_api_tool_call *out, struct ft_api_error *err) {
    char param[96];
    snprintf(param, sizeof(param), "messages[%d].tool_calls[%d]", i, j);
    if (!cJSON_IsObject(c))
        return BAD(param, "'%s' must be an object", param);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    const cJSON *type = tr_field(c, "type");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
    snprintf(param, sizeof(param), "messages[%d].tool_calls[%d].id", i, j);
    if (!cJSON_IsString(id) || !id->valuestring[0] || strlen(id->valuestring) > 256)
        return BAD(param, "'%s' must be a string of 1 to 256 bytes", param);
    snprintf(param, sizeof(param), "messages[%d].tool_calls[%d].type", i, j);
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0))
        return BAD(param, "'%s' must be \"function\"", param);
    snprintf(param, sizeof(param), "messages[%d].tool_calls[%d].function", i, j);
    if (!cJSON_IsObject(fn))
        return BAD(param, "'%s' must be an object with 'name' and 'arguments'", param);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    snprintf(param, sizeof(param), "messages[%d].tool_calls[%d].function.name", i, j);
    if (!cJSON_IsString(name) || !valid_name(name->valuestring))
        return BAD(param, "'%s' must be a string of 1 to 64 characters a-z, A-Z, 0-9, '_' or '-'", param);
    snprintf(param, sizeof(param), "messages[%d].tool_calls[%d].function.arguments", i, j);
    if (!cJSON_IsString(args))
        return BAD(param, "'%s' must be a string holding JSON", param);
    /* Templates read the arguments as an object (llama.cpp parses them too). */
    cJSON *parsed = cJSON_Parse(args->valuestring);
    bool is_obj = cJSON_IsObject(parsed);
    cJSON_Delete(parsed);
    if (!is_obj)
        return BAD(param, "'%s' must be a string holding a JSON object", param);
    if (!(out->id = tr_dup(id->valuestring)) || !(out->name = tr_dup(name->valuestring)) ||
        !(out->arguments = tr_dup(args->valuestring)))
        return OOM();
    return 0;
}

int ft_api_parse_message_tools(const cJSON *m, int i, struct ft_api_message *msg, struct ft_api_error *err) {
    char param[96];
    const cJSON *calls = tr_field(m, "tool_calls");
    const cJSON *call_id = tr_field(m, "tool_call_id");
    const cJSON *name = tr_field(m, "name");
    const bool is_tool = !strcmp(msg->role, "tool");
    snprintf(param, sizeof(param), "messages[%d].tool_calls", i);
    if (calls) {
        if (strcmp(msg->role, "assistant") != 0)
            return BAD(param, "'%s' is only allowed in assistant messages", param);
        if (!cJSON_IsArray(calls))
            return BAD(param, "'%s' must be an array", param);
        int n = cJSON_GetArraySize(calls);
        if (n > FT_API_MAX_TOOLS)
            return BAD(param, "'%s' has more than %d entries", param, FT_API_MAX_TOOLS);
        if (n > 0 && !(msg->tool_calls = calloc((size_t)n, sizeof(*msg->tool_calls))))
            return OOM();
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) {
            int j = msg->n_tool_calls++;
            if (parse_call(c, i, j, &msg->tool_calls[j], err))
                return -1;
        }
    }
    snprintf(param, sizeof(param), "messages[%d].tool_call_id", i);
    if (is_tool) {
        if (!cJSON_IsString(call_id) || !call_id->valuestring[0] || strlen(call_id->valuestring) > 256)
            return BAD(param, "'%s' is required in tool messages: the id of the call this answers (1 to 256 bytes)",
                       param);
        if (!(msg->tool_call_id = tr_dup(call_id->valuestring)))
            return OOM();
    } else if (call_id) {
        return BAD(param, "'%s' is only allowed in tool messages", param);
    }
    snprintf(param, sizeof(param), "messages[%d].name", i);
    if (name) {
        if (!cJSON_IsString(name) || strlen(name->valuestring) > 256)
            return BAD(param, "'%s' must be a string of at most 256 bytes", param);
        /* Only a tool message's name reaches the template (the function's
         * name, which some templates print); a participant name on other
         * roles has no place in any template's prompt. */
        if (is_tool && !(msg->name = tr_dup(name->valuestring)))
            return OOM();
    }
    return 0;
}

void ft_api_message_tools_free(struct ft_api_message *msg) {
    for (int32_t j = 0; j < msg->n_tool_calls; j++) {
        free(msg->tool_calls[j].id);
        free(msg->tool_calls[j].name);
        free(msg->tool_calls[j].arguments);
    }
    free(msg->tool_calls);
    free(msg->tool_call_id);
    free(msg->name);
    msg->tool_calls = NULL;
    msg->n_tool_calls = 0;
    msg->tool_call_id = msg->name = NULL;
}
