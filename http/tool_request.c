/* The tool fields of a chat request (http/request_parse.h): `tools`,
 * `tool_choice`, `parallel_tool_calls`, and in messages the assistant's
 * `tool_calls` and the `tool` role's `tool_call_id` / `name`.
 *
 * tools are normalized to what chat templates are written for (Hugging
 * Face's and llama.cpp's convention): [{"type": "function", "function":
 * {"name", "description" ("" when absent), "parameters" ({} when absent)}}].
 *
 * Forced and strict calls (ft_api_tools_grammar): tool_choice "required" or
 * a named function, and `strict: true`, are kept by constrained decoding.
 * One JSON Schema describes a call, {"name": const, "arguments": the tool's
 * parameters} (anyOf over the tools), with each tool's parameters under
 * $defs/t<i> and their $refs rewritten to point there; the grammar puts
 * it in the markup of the template's format (include/ft/tool_calls.h), so
 * the parser reads the answer unchanged. Refused: the deprecated
 * `functions` / `function_call`, and tool types other than "function". */
#include "request_parse.h"

#include "ft/common.h"
#include "ft/grammar.h"

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

static int parse_tool(const cJSON *t, int i, cJSON *out_list, char **name_out, bool *strict_out,
                      struct ft_api_error *err) {
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
    *strict_out = cJSON_IsTrue(strict);

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
            if (!(r->tools = cJSON_CreateArray()) || !(r->tool_names = calloc((size_t)n, sizeof(char *))) ||
                !(r->tool_strict = calloc((size_t)n, sizeof(bool))))
                return OOM();
            const cJSON *t;
            cJSON_ArrayForEach(t, tools) {
                const int i = r->n_tools;
                if (parse_tool(t, i, r->tools, &r->tool_names[i], &r->tool_strict[i], err))
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
    return 0;
}

/* ------------------------------------------------------------ forced calls */

/* Point the $refs of a tool's parameters (JSON pointers into the parameters
 * themselves) at where they sit in the call schema: "#/x" -> "<base>/x". */
static bool rebase_refs(cJSON *s, const char *base, int depth) {
    if (depth > FT_GRAMMAR_MAX_DEPTH)
        return true; /* the compiler refuses the nesting itself */
    cJSON *c;
    cJSON_ArrayForEach(c, s) {
        if (c->string && !strcmp(c->string, "$ref") && cJSON_IsString(c) && c->valuestring[0] == '#') {
            size_t n = strlen(base) + strlen(c->valuestring);
            char *v = malloc(n);
            if (!v)
                return false;
            snprintf(v, n, "%s%s", base, c->valuestring + 1);
            bool ok = cJSON_SetValuestring(c, v) != NULL;
            free(v);
            if (!ok)
                return false;
        } else if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && !rebase_refs(c, base, depth + 1)) {
            return false;
        }
    }
    return true;
}

/* A parameters schema the arguments can follow: it must describe objects
 * (the parser takes only an object) and compile. A strict tool's that does
 * not is a 400; another's is replaced by "any object" (best effort, as
 * OpenAI's non-strict calls are). NULL with *err filled. */
static cJSON *arguments_schema(const cJSON *params, const char *name, int i, bool enforce, bool strict,
                               struct ft_api_error *err) {
    char param[64], msg[256] = "";
    snprintf(param, sizeof(param), "tools[%d].function.parameters", i);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(params, "type");
    bool object = !type || (cJSON_IsString(type) && !strcmp(type->valuestring, "object"));
    for (const cJSON *t = cJSON_IsArray(type) ? type->child : NULL; t; t = t->next)
        object |= cJSON_IsString(t) && !strcmp(t->valuestring, "object");
    int rc = FT_EINVAL;
    if (enforce && object && params->child) {
        char *text = cJSON_PrintUnformatted(params);
        struct ft_grammar *g = NULL;
        if (!text)
            return (void)OOM(), NULL;
        rc = ft_grammar_from_json_schema(text, strlen(text), &g, msg, sizeof(msg));
        cJSON_free(text);
        ft_grammar_free(g);
        if (rc == FT_ENOMEM)
            return (void)OOM(), NULL;
    }
    if (rc == FT_OK) {
        cJSON *d = cJSON_Duplicate(params, true);
        if (!d)
            (void)OOM();
        return d;
    }
    if (strict && !object)
        return (void)BAD(param, "'%s' must describe a JSON object (\"type\": \"object\") for a strict function", param),
               NULL;
    if (strict && params->child)
        return (void)BAD(param, "Invalid schema for function '%s': %s", name, msg), NULL;
    cJSON *any = cJSON_CreateObject();
    if (!any || !cJSON_AddStringToObject(any, "type", "object"))
        return cJSON_Delete(any), (void)OOM(), NULL;
    return any;
}

/* {"type": "object", "properties": {<key>: inner}, "required": [<key>],
 * "additionalProperties": false}; takes inner (deleted on failure). */
static cJSON *object_with(const char *key, cJSON *inner) {
    cJSON *o = cJSON_CreateObject(), *props = o ? cJSON_AddObjectToObject(o, "properties") : NULL;
    if (!props || !inner || !cJSON_AddItemToObject(props, key, inner)) {
        cJSON_Delete(inner);
        cJSON_Delete(o);
        return NULL;
    }
    cJSON *req = cJSON_AddArrayToObject(o, "required");
    if (!cJSON_AddStringToObject(o, "type", "object") || !req || !cJSON_AddItemToArray(req, cJSON_CreateString(key)) ||
        !cJSON_AddFalseToObject(o, "additionalProperties")) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The schema of one call: {"name": <const>, "<args_key>": {"$ref": "#/$defs/t<i>"}}. */
static cJSON *call_schema(const char *name, const char *args_key, int i) {
    char ref[32];
    snprintf(ref, sizeof(ref), "#/$defs/t%d", i);
    cJSON *props = cJSON_CreateObject(), *n = NULL, *a = NULL;
    bool ok = props && (n = cJSON_AddObjectToObject(props, "name")) && cJSON_AddStringToObject(n, "const", name) &&
              (a = cJSON_AddObjectToObject(props, args_key)) && cJSON_AddStringToObject(a, "$ref", ref);
    if (!ok) {
        cJSON_Delete(props);
        return NULL;
    }
    cJSON *o = cJSON_CreateObject(), *req = NULL;
    ok = o && cJSON_AddStringToObject(o, "type", "object") && cJSON_AddItemToObject(o, "properties", props) &&
         (req = cJSON_AddArrayToObject(o, "required")) && cJSON_AddItemToArray(req, cJSON_CreateString("name")) &&
         cJSON_AddItemToArray(req, cJSON_CreateString(args_key)) && cJSON_AddFalseToObject(o, "additionalProperties");
    if (!ok) {
        if (!o || !cJSON_GetObjectItemCaseSensitive(o, "properties"))
            cJSON_Delete(props);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int ft_api_tools_grammar(struct ft_api_request *r, enum ft_tool_format f, struct ft_api_error *err) {
    if (r->n_tools == 0 || r->tool_choice == FT_API_TOOL_CHOICE_NONE)
        return 0;
    const bool forced = r->tool_choice == FT_API_TOOL_CHOICE_REQUIRED || r->tool_choice == FT_API_TOOL_CHOICE_FUNCTION;
    bool any_strict = false;
    for (int32_t i = 0; i < r->n_tools; i++)
        any_strict |= r->tool_strict[i];
    if (!forced && !any_strict)
        return 0;
    if (r->grammar) {
        const char *p = r->grammar_param ? r->grammar_param : "response_format";
        return BAD(p, "'%s' cannot be combined with %s: both constrain the output", p,
                   forced ? "a 'tool_choice' that forces a call" : "tools with 'strict': true");
    }
    const char *args_key = f == FT_TOOL_FORMAT_LLAMA3 ? "parameters" : "arguments";
    cJSON *doc = cJSON_CreateObject();
    cJSON *defs = doc ? cJSON_AddObjectToObject(doc, "$defs") : NULL;
    cJSON *calls = cJSON_CreateArray();
    int rc = -1;
    if (!defs || !calls) {
        (void)OOM();
        goto done;
    }
    const cJSON *t = r->tools->child;
    for (int32_t i = 0; i < r->n_tools; i++, t = t->next) {
        if (r->tool_choice == FT_API_TOOL_CHOICE_FUNCTION && strcmp(r->tool_names[i], r->tool_choice_name) != 0)
            continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"),
                                                               "parameters");
        /* forced: every offered tool's parameters hold (best effort for a
         * non-strict one the compiler cannot take); auto: the strict ones' */
        cJSON *args = arguments_schema(params, r->tool_names[i], i, forced || r->tool_strict[i], r->tool_strict[i], err);
        char key[16], base[32];
        snprintf(key, sizeof(key), "t%d", i);
        snprintf(base, sizeof(base), "#/$defs/t%d", i);
        if (!args)
            goto done;
        if (!cJSON_AddItemToObject(defs, key, args)) {
            cJSON_Delete(args);
            (void)OOM();
            goto done;
        }
        cJSON *c = call_schema(r->tool_names[i], args_key, i);
        if (!rebase_refs(args, base, 0) || !c || !cJSON_AddItemToArray(calls, c)) {
            cJSON_Delete(c);
            (void)OOM();
            goto done;
        }
    }
    cJSON *one = cJSON_CreateObject(); /* {"anyOf": [calls]} */
    if (!one || !cJSON_AddItemToObject(one, "anyOf", calls)) {
        cJSON_Delete(one);
        (void)OOM();
        goto done;
    }
    calls = NULL;
    const size_t max_calls = r->parallel_tool_calls ? 0 : 1;
    struct ft_grammar_frame fr = {.max_items = (int32_t)max_calls};
    cJSON *root = NULL; /* what goes next to $defs */
    switch (f) {
    case FT_TOOL_FORMAT_HERMES:
        fr.open = "<tool_call>\n", fr.close = "\n</tool_call>", fr.sep = "\n";
        root = one;
        break;
    case FT_TOOL_FORMAT_LLAMA3:
        fr.sep = "; ";
        root = one;
        break;
    case FT_TOOL_FORMAT_MISTRAL:
        fr.prefix = "[TOOL_CALLS][", fr.sep = ", ", fr.suffix = "]";
        root = one;
        break;
    default: { /* generic: {"tool_call": call} or {"tool_calls": [call, ...]} */
        cJSON *arr = NULL;
        if (r->parallel_tool_calls) {
            arr = cJSON_CreateObject();
            if (!arr || !cJSON_AddStringToObject(arr, "type", "array") || !cJSON_AddItemToObject(arr, "items", one) ||
                !cJSON_AddNumberToObject(arr, "minItems", 1)) {
                if (!arr || !cJSON_GetObjectItemCaseSensitive(arr, "items"))
                    cJSON_Delete(one);
                cJSON_Delete(arr);
                (void)OOM();
                goto done;
            }
        }
        root = object_with(r->parallel_tool_calls ? "tool_calls" : "tool_call", arr ? arr : one);
        if (root && !forced) {
            /* strict under auto: the answer may also be {"response": "..."} */
            cJSON *str = cJSON_CreateObject(), *resp = NULL, *alts = cJSON_CreateObject(), *list = NULL;
            if (str && cJSON_AddStringToObject(str, "type", "string"))
                resp = object_with("response", str);
            else
                cJSON_Delete(str);
            if (!resp || !alts || !(list = cJSON_AddArrayToObject(alts, "anyOf")) || !cJSON_AddItemToArray(list, root)) {
                cJSON_Delete(resp);
                cJSON_Delete(alts);
                cJSON_Delete(root);
                root = NULL;
            } else {
                cJSON_AddItemToArray(list, resp);
                root = alts;
            }
        }
        if (!root) {
            (void)OOM();
            goto done;
        }
        break;
    }
    }
    /* the doc: {"$defs": {...}, <root's keywords>} */
    cJSON *k;
    while ((k = root->child)) {
        cJSON_DetachItemViaPointer(root, k);
        cJSON_AddItemToObject(doc, k->string, k);
    }
    cJSON_Delete(root);
    char *text = cJSON_PrintUnformatted(doc);
    if (!text) {
        (void)OOM();
        goto done;
    }
    char msg[256];
    const bool framed = f != FT_TOOL_FORMAT_GENERIC;
    int grc = ft_grammar_from_json_schema_frame(text, strlen(text), framed ? &fr : NULL, &r->grammar, msg, sizeof(msg));
    cJSON_free(text);
    if (grc == FT_ENOMEM) {
        (void)OOM();
        goto done;
    }
    if (grc) {
        (void)BAD("tools", "the tools' parameters give no usable grammar: %s", msg);
        goto done;
    }
    r->grammar_param = forced ? "tool_choice" : "tools";
    /* auto: the grammar starts where a call does (generic answers are
     * always JSON, so there it holds from the start) */
    if (!forced && f == FT_TOOL_FORMAT_HERMES)
        r->grammar_trigger = "<tool_call>";
    else if (!forced && f == FT_TOOL_FORMAT_MISTRAL)
        r->grammar_trigger = "[TOOL_CALLS]";
    else if (!forced && f == FT_TOOL_FORMAT_LLAMA3)
        r->grammar_trigger = "{", r->grammar_trigger_at_start = true;
    rc = 0;
done:
    cJSON_Delete(calls);
    cJSON_Delete(doc);
    return rc;
}

void ft_api_tools_free(struct ft_api_request *r) {
    cJSON_Delete(r->tools);
    r->tools = NULL;
    for (int32_t i = 0; i < r->n_tools; i++)
        free(r->tool_names[i]);
    free(r->tool_names);
    r->tool_names = NULL;
    free(r->tool_strict);
    r->tool_strict = NULL;
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
