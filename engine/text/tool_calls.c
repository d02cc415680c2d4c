/* Tool calls in generated text (engine/include/ft/tool_calls.h): format detection,
 * the parsers of the four formats, and the streaming hold-back.
 *
 * Every parser is all-or-nothing past the point where a call starts: either
 * each call is well-formed (a JSON object naming an offered tool, arguments
 * a JSON object) and nothing but whitespace separates or follows them, or
 * the whole text is content. That keeps a model's prose that merely
 * mentions "<tool_call>" from turning into a half-parsed call, and is what
 * a grammar-forced call will always satisfy. */
#include "ft/tool_calls.h"

#include "ft/common.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char hermes_open[] = "<tool_call>", hermes_close[] = "</tool_call>";
static const char python_tag[] = "<|python_tag|>";
static const char mistral_calls[] = "[TOOL_CALLS]", mistral_args[] = "[ARGS]";

static bool contains(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0)
            return true;
    return false;
}

enum ft_tool_format ft_tool_format_detect(const char *src, size_t len) {
    if (!src)
        return FT_TOOL_FORMAT_GENERIC;
    if (contains(src, len, mistral_calls))
        return FT_TOOL_FORMAT_MISTRAL;
    /* XML calls are not these formats: Qwen3-Coder and its kin put
     * <function=...> inside <tool_call>, GLM <arg_key>, functionary v3.1
     * writes <function=...> in a Llama 3 template. */
    const bool xml = contains(src, len, "<function=") || contains(src, len, "<arg_key>");
    if (contains(src, len, hermes_open) && !xml)
        return FT_TOOL_FORMAT_HERMES;
    /* Llama 3.1/3.3 name <|python_tag|>; 3.2 only has the ipython role. */
    if (!xml && contains(src, len, "<|start_header_id|>") &&
        (contains(src, len, python_tag) || contains(src, len, "ipython")))
        return FT_TOOL_FORMAT_LLAMA3;
    return FT_TOOL_FORMAT_GENERIC;
}

const char *ft_tool_format_name(enum ft_tool_format f) {
    switch (f) {
    case FT_TOOL_FORMAT_HERMES: return "hermes";
    case FT_TOOL_FORMAT_LLAMA3: return "llama3";
    case FT_TOOL_FORMAT_MISTRAL: return "mistral";
    default: return "generic";
    }
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && is_ws(*p))
        p++;
    return p;
}

static bool starts(const char *p, const char *end, const char *lit) {
    size_t k = strlen(lit);
    return (size_t)(end - p) >= k && memcmp(p, lit, k) == 0;
}

static const char *find(const char *p, const char *end, const char *lit) {
    for (; p < end; p++)
        if (starts(p, end, lit))
            return p;
    return NULL;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* A parse in progress: calls collected so far. */
struct acc {
    const char *const *names;
    size_t n_names, max_calls;
    struct ft_tool_call *calls;
    size_t n, cap;
    bool oom;
};

static void acc_clear(struct acc *a) {
    for (size_t i = 0; i < a->n; i++) {
        free(a->calls[i].id);
        free(a->calls[i].name);
        free(a->calls[i].arguments);
    }
    free(a->calls);
    a->calls = NULL;
    a->n = a->cap = 0;
}

static bool name_offered(const struct acc *a, const char *name) {
    for (size_t i = 0; i < a->n_names; i++)
        if (strcmp(a->names[i], name) == 0)
            return true;
    return false;
}

/* Add one call. args: a JSON object, or a string holding one (some models
 * quote the arguments). false when the call is not well-formed. */
static bool add_call(struct acc *a, const cJSON *name, const cJSON *args, const cJSON *id) {
    if (!cJSON_IsString(name) || !name_offered(a, name->valuestring))
        return false;
    if (a->max_calls && a->n >= a->max_calls)
        return false;
    cJSON *parsed = NULL;
    if (cJSON_IsString(args)) {
        args = parsed = cJSON_Parse(args->valuestring);
    }
    if (!cJSON_IsObject(args)) {
        cJSON_Delete(parsed);
        return false;
    }
    char *text = cJSON_PrintUnformatted(args);
    cJSON_Delete(parsed);
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4;
        struct ft_tool_call *c = realloc(a->calls, cap * sizeof(*c));
        if (!c) {
            free(text);
            a->oom = true;
            return false;
        }
        a->calls = c;
        a->cap = cap;
    }
    struct ft_tool_call *c = &a->calls[a->n];
    c->name = dup_n(name->valuestring, strlen(name->valuestring));
    c->arguments = text;
    c->id = cJSON_IsString(id) ? dup_n(id->valuestring, strlen(id->valuestring)) : NULL;
    a->n++;
    if (!c->name || !c->arguments || (cJSON_IsString(id) && !c->id)) {
        a->oom = true;
        return false;
    }
    return true;
}

/* One JSON value starting at *p (after whitespace); *p moves past it. */
static cJSON *parse_value(const char **p, const char *end) {
    const char *s = skip_ws(*p, end), *stop = NULL;
    /* cJSON also skips control characters before a value; JSON does not. */
    if (s >= end || (unsigned char)*s < 0x20)
        return NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(s, (size_t)(end - s), &stop, 0);
    if (v)
        *p = stop;
    return v;
}

/* {"name": ..., "<args_key>": {...}} as one call. */
static bool add_call_obj(struct acc *a, const cJSON *o, const char *args_key, const char *alt_key) {
    if (!cJSON_IsObject(o))
        return false;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, args_key);
    if (!args && alt_key)
        args = cJSON_GetObjectItemCaseSensitive(o, alt_key);
    return add_call(a, cJSON_GetObjectItemCaseSensitive(o, "name"), args, cJSON_GetObjectItemCaseSensitive(o, "id"));
}

/* Each parser reads the calls in text[p, end) (p at the start of the first
 * call) and returns false when they are not all well-formed. */

static bool parse_hermes(struct acc *a, const char *p, const char *end) {
    while (p < end) {
        if (!starts(p, end, hermes_open))
            return false;
        p += strlen(hermes_open);
        const char *close = find(p, end, hermes_close);
        if (!close)
            return false;
        const char *q = p;
        cJSON *o = parse_value(&q, close);
        bool ok = o && skip_ws(q, close) == close && add_call_obj(a, o, "arguments", NULL);
        cJSON_Delete(o);
        if (!ok)
            return false;
        p = skip_ws(close + strlen(hermes_close), end);
    }
    return a->n > 0;
}

static bool parse_llama3(struct acc *a, const char *p, const char *end) {
    p = skip_ws(p, end);
    if (starts(p, end, python_tag))
        p += strlen(python_tag);
    while (p < end) {
        cJSON *o = parse_value(&p, end);
        bool ok = o && add_call_obj(a, o, "parameters", "arguments");
        cJSON_Delete(o);
        if (!ok)
            return false;
        p = skip_ws(p, end);
        if (p < end && *p == ';')
            p = skip_ws(p + 1, end);
    }
    return a->n > 0;
}

static bool parse_mistral(struct acc *a, const char *p, const char *end) {
    while (p < end) {
        if (!starts(p, end, mistral_calls))
            return false;
        p = skip_ws(p + strlen(mistral_calls), end);
        if (p < end && *p == '[') {
            /* [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}, ...] */
            cJSON *arr = parse_value(&p, end);
            bool ok = cJSON_IsArray(arr) && cJSON_GetArraySize(arr) > 0;
            const cJSON *o;
            cJSON_ArrayForEach(o, arr) ok = ok && add_call_obj(a, o, "arguments", NULL);
            cJSON_Delete(arr);
            if (!ok)
                return false;
        } else {
            /* [TOOL_CALLS]name[ARGS]{...} */
            const char *args = find(p, end, mistral_args);
            if (!args || args == p || (size_t)(args - p) > 256)
                return false;
            char name[257];
            memcpy(name, p, (size_t)(args - p));
            name[args - p] = '\0';
            p = args + strlen(mistral_args);
            cJSON *o = parse_value(&p, end);
            cJSON *n = cJSON_CreateString(name);
            bool ok = o && n && add_call(a, n, o, NULL);
            cJSON_Delete(o);
            cJSON_Delete(n);
            if (!ok)
                return false;
        }
        p = skip_ws(p, end);
    }
    return a->n > 0;
}

/* The whole answer as one JSON object, perhaps in a ```json fence.
 * *response: the "response" string, when that is what the model wrote. */
static bool parse_generic(struct acc *a, const char *p, const char *end, char **response) {
    p = skip_ws(p, end);
    while (end > p && is_ws(end[-1]))
        end--;
    if (starts(p, end, "```")) {
        p += 3;
        if (starts(p, end, "json"))
            p += 4;
        if (end - p < 3 || memcmp(end - 3, "```", 3) != 0)
            return false;
        end -= 3;
    }
    cJSON *o = parse_value(&p, end);
    bool ok = cJSON_IsObject(o) && skip_ws(p, end) == end;
    if (ok) {
        const cJSON *call = cJSON_GetObjectItemCaseSensitive(o, "tool_call");
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(o, "tool_calls");
        const cJSON *resp = cJSON_GetObjectItemCaseSensitive(o, "response");
        if (call && !calls && !resp) {
            ok = add_call_obj(a, call, "arguments", NULL);
        } else if (cJSON_IsArray(calls) && !call && !resp) {
            ok = cJSON_GetArraySize(calls) > 0;
            const cJSON *c;
            cJSON_ArrayForEach(c, calls) ok = ok && add_call_obj(a, c, "arguments", NULL);
        } else if (cJSON_IsString(resp) && !call && !calls) {
            if (!(*response = dup_n(resp->valuestring, strlen(resp->valuestring))))
                a->oom = true;
            ok = false; /* no calls: the response is the content */
        } else {
            ok = false;
        }
    }
    cJSON_Delete(o);
    return ok;
}

/* Where a call may start: the marker of hermes / mistral anywhere, the
 * start of the answer otherwise. */
static const char *call_start(enum ft_tool_format f, const char *p, const char *end) {
    if (f == FT_TOOL_FORMAT_HERMES)
        return find(p, end, hermes_open);
    if (f == FT_TOOL_FORMAT_MISTRAL)
        return find(p, end, mistral_calls);
    return p;
}

int ft_tool_calls_parse(enum ft_tool_format f, const char *text, size_t len, const char *const *names,
                        size_t n_names, size_t max_calls, struct ft_tool_parse *out) {
    memset(out, 0, sizeof(*out));
    const char *end = text + len;
    struct acc a = {.names = names, .n_names = n_names, .max_calls = max_calls};
    char *response = NULL;
    const char *start = call_start(f, text, end);
    bool ok = false;
    if (start) {
        switch (f) {
        case FT_TOOL_FORMAT_HERMES: ok = parse_hermes(&a, start, end); break;
        case FT_TOOL_FORMAT_LLAMA3: ok = parse_llama3(&a, start, end); break;
        case FT_TOOL_FORMAT_MISTRAL: ok = parse_mistral(&a, start, end); break;
        default: ok = parse_generic(&a, start, end, &response); break;
        }
    }
    if (a.oom) {
        acc_clear(&a);
        free(response);
        return FT_ENOMEM;
    }
    if (!ok) {
        acc_clear(&a);
        out->content = response ? response : dup_n(text, len);
        return out->content ? 0 : FT_ENOMEM;
    }
    /* The text before the first call, without the whitespace that led up to it. */
    const char *c_end = start;
    while (c_end > text && is_ws(c_end[-1]))
        c_end--;
    out->content = dup_n(text, (size_t)(c_end - text));
    if (!out->content) {
        acc_clear(&a);
        return FT_ENOMEM;
    }
    out->calls = a.calls;
    out->n_calls = a.n;
    return 0;
}

void ft_tool_parse_free(struct ft_tool_parse *p) {
    if (!p)
        return;
    struct acc a = {.calls = p->calls, .n = p->n_calls};
    acc_clear(&a);
    free(p->content);
    memset(p, 0, sizeof(*p));
}

/* ---------------------------------------------------------------- stream */

void ft_tool_stream_init(struct ft_tool_stream *s, enum ft_tool_format f) {
    memset(s, 0, sizeof(*s));
    s->format = f;
}

void ft_tool_stream_free(struct ft_tool_stream *s) {
    if (!s)
        return;
    free(s->buf);
    memset(s, 0, sizeof(*s));
}

static int buf_add(struct ft_tool_stream *s, const char *t, size_t n) {
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + n + 1)
            cap *= 2;
        char *p = realloc(s->buf, cap);
        if (!p)
            return FT_ENOMEM;
        s->buf = p;
        s->cap = cap;
    }
    memcpy(s->buf + s->n, t, n);
    s->n += n;
    s->buf[s->n] = '\0';
    return 0;
}

/* Emit buf[0..k) and keep the rest. */
static int emit_prefix(struct ft_tool_stream *s, size_t k, char **emit) {
    *emit = dup_n(s->buf ? s->buf : "", k);
    if (!*emit)
        return FT_ENOMEM;
    memmove(s->buf, s->buf + k, s->n - k);
    s->n -= k;
    s->buf[s->n] = '\0';
    return 0;
}

/* The start-anchored formats: may an answer beginning with buf[0..n) still
 * be a call? (true while it is a prefix of an opening, or starts with one) */
static bool may_open(enum ft_tool_format f, const char *p, size_t n) {
    static const char *const llama3[] = {"{", python_tag, NULL};
    static const char *const generic[] = {"{", "```", NULL};
    const char *const *open = f == FT_TOOL_FORMAT_LLAMA3 ? llama3 : generic;
    for (size_t i = 0; open[i]; i++) {
        size_t k = strlen(open[i]), m = FT_MIN(k, n);
        if (memcmp(p, open[i], m) == 0)
            return true;
    }
    return false;
}

int ft_tool_stream_feed(struct ft_tool_stream *s, const char *text, size_t len, char **emit) {
    *emit = NULL;
    if (s->passing) {
        *emit = dup_n(text, len);
        return *emit ? 0 : FT_ENOMEM;
    }
    if (buf_add(s, text, len))
        return FT_ENOMEM;
    if (s->holding)
        return emit_prefix(s, 0, emit);
    if (s->format == FT_TOOL_FORMAT_HERMES || s->format == FT_TOOL_FORMAT_MISTRAL) {
        const char *marker = s->format == FT_TOOL_FORMAT_HERMES ? hermes_open : mistral_calls;
        const char *hit = find(s->buf, s->buf + s->n, marker);
        size_t keep_from;
        if (hit) {
            s->holding = true;
            keep_from = (size_t)(hit - s->buf);
        } else {
            /* Hold a suffix that may be the start of the marker. */
            size_t k = strlen(marker);
            keep_from = s->n;
            for (size_t m = FT_MIN(k - 1, s->n); m > 0; m--)
                if (memcmp(s->buf + s->n - m, marker, m) == 0) {
                    keep_from = s->n - m;
                    break;
                }
        }
        /* Whitespace just before a call is not content (see ft_tool_calls_parse). */
        while (keep_from > 0 && is_ws(s->buf[keep_from - 1]))
            keep_from--;
        return emit_prefix(s, keep_from, emit);
    }
    const char *p = skip_ws(s->buf, s->buf + s->n);
    if (p == s->buf + s->n)
        return emit_prefix(s, 0, emit); /* only whitespace so far */
    if (may_open(s->format, p, (size_t)(s->buf + s->n - p))) {
        size_t k = FT_MIN((size_t)(s->buf + s->n - p), (size_t)14); /* the longest opening, <|python_tag|> */
        bool complete = s->format == FT_TOOL_FORMAT_LLAMA3 ? (*p == '{' || k >= strlen(python_tag))
                                                          : (*p == '{' || k >= 3);
        if (complete)
            s->holding = true;
        return emit_prefix(s, 0, emit);
    }
    s->passing = true;
    return emit_prefix(s, s->n, emit);
}

int ft_tool_stream_finish(struct ft_tool_stream *s, const char *const *names, size_t n_names, size_t max_calls,
                          struct ft_tool_parse *out) {
    memset(out, 0, sizeof(*out));
    if (s->passing || s->n == 0) {
        out->content = dup_n(s->buf ? s->buf : "", s->n);
        return out->content ? 0 : FT_ENOMEM;
    }
    /* What was held: a call from its start marker on, or text that was not
     * one (a suffix that never became a marker, whitespace). */
    return ft_tool_calls_parse(s->format, s->buf, s->n, names, n_names, max_calls, out);
}
