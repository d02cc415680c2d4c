/* OpenAI request bodies to struct ft_api_request (http/request_parse.h). */
#include "request_parse.h"

#include "reasoning.h"

#include "ft/common.h"
#include "ft/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ft_api_error_set(struct ft_api_error *err, int status, const char *param, const char *code, const char *fmt, ...) {
    err->status = status;
    snprintf(err->param, sizeof(err->param), "%s", param ? param : "");
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
}

void ft_api_request_free(struct ft_api_request *r) {
    if (!r)
        return;
    free(r->model);
    for (int32_t i = 0; i < r->n_messages; i++) {
        free(r->messages[i].content);
        free(r->messages[i].reasoning_content);
        ft_api_message_tools_free(&r->messages[i]);
    }
    free(r->messages);
    ft_api_tools_free(r);
    free(r->prompt);
    free(r->prompt_tokens);
    for (int i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    ft_grammar_free(r->grammar);
    free(r->logit_bias);
    for (int32_t i = 0; i < r->n_bias_text; i++)
        free(r->bias_text[i]);
    free(r->bias_text);
    free(r->bias_text_value);
    memset(r, 0, sizeof(*r));
}

#define BAD(param, ...) (ft_api_error_set(err, 400, (param), NULL, __VA_ARGS__), -1)

/* JSON escapes can encode U+0000, which would silently cut a C string short;
 * such a request is refused instead. Every backslash in valid JSON starts an
 * escape pair inside a string, so pairs can be skipped without tracking
 * string boundaries. */
static bool has_nul_escape(const char *s, size_t len) {
    for (size_t i = 0; i + 1 < len; i++) {
        if (s[i] != '\\')
            continue;
        if (s[i + 1] == 'u' && i + 5 < len && s[i + 2] == '0' && s[i + 3] == '0' && s[i + 4] == '0' &&
            s[i + 5] == '0')
            return true;
        i++;
    }
    return false;
}

/* Bounds the tree cJSON would build, in one pass over the text: depth is
 * the count of open brackets, and values are at most one more than the
 * brackets and commas outside strings. Malformed text passes through to
 * cJSON, which reports it. */
static int check_json_shape(const char *s, size_t len, struct ft_api_error *err) {
    size_t depth = 0, values = 1;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        const char c = s[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > FT_API_MAX_JSON_DEPTH)
                return BAD(NULL, "the request body nests JSON deeper than %d levels", FT_API_MAX_JSON_DEPTH);
            values++;
        } else if (c == ']' || c == '}') {
            if (depth)
                depth--;
        } else if (c == ',') {
            values++;
        }
        if (values > FT_API_MAX_JSON_VALUES)
            return BAD(NULL, "the request body has more than %d JSON values", FT_API_MAX_JSON_VALUES);
    }
    return 0;
}

static const cJSON *field(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsNull(v) ? NULL : v; /* null means "not given", as SDKs send it */
}

static int get_number(const cJSON *obj, const char *name, double lo, double hi, double *out, bool *given,
                      struct ft_api_error *err) {
    const cJSON *v = field(obj, name);
    if (given)
        *given = v != NULL;
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return BAD(name, "'%s' must be a number", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return BAD(name, "'%s' must be between %g and %g (got %g)", name, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return 0;
}

static int get_int(const cJSON *obj, const char *name, double lo, double hi, int64_t *out, bool *given,
                   struct ft_api_error *err) {
    const cJSON *v = field(obj, name);
    if (given)
        *given = v != NULL;
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble)
        return BAD(name, "'%s' must be an integer", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return BAD(name, "'%s' must be between %.0f and %.0f (got %.0f)", name, lo, hi, v->valuedouble);
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *obj, const char *name, bool *out, bool *given, struct ft_api_error *err) {
    const cJSON *v = field(obj, name);
    if (given)
        *given = v != NULL;
    if (!v)
        return 0;
    if (!cJSON_IsBool(v))
        return BAD(name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

#define OOM() (ft_api_error_set(err, 500, NULL, "server_error", "out of memory"), -1)

/* content: a string, or an array of {"type": "text", "text": ...} parts. */
static int parse_content(const cJSON *c, const char *param, char **out, struct ft_api_error *err) {
    if (cJSON_IsString(c)) {
        if (!(*out = dup_str(c->valuestring)))
            return OOM();
        return 0;
    }
    if (!cJSON_IsArray(c))
        return BAD(param, "'%s' must be a string or an array of text parts", param);
    int n = cJSON_GetArraySize(c);
    if (n > FT_API_MAX_PARTS)
        return BAD(param, "'%s' has more than %d parts", param, FT_API_MAX_PARTS);
    size_t total = 1;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type))
            return BAD(param, "each part of '%s' must be an object with a 'type'", param);
        if (strcmp(type->valuestring, "text") != 0)
            return BAD(param, "content parts of type '%.40s' are not supported: only 'text'", type->valuestring);
        if (!cJSON_IsString(text))
            return BAD(param, "a text part of '%s' needs a string 'text'", param);
        total += strlen(text->valuestring) + 1;
    }
    char *s = malloc(total), *p = s;
    if (!s)
        return OOM();
    cJSON_ArrayForEach(part, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t l = strlen(t);
        if (p != s)
            *p++ = '\n';
        memcpy(p, t, l);
        p += l;
    }
    *p = '\0';
    *out = s;
    return 0;
}

static int parse_messages(const cJSON *root, struct ft_api_request *r, struct ft_api_error *err) {
    const cJSON *msgs = field(root, "messages");
    if (!msgs)
        return BAD("messages", "'messages' is required");
    if (!cJSON_IsArray(msgs))
        return BAD("messages", "'messages' must be an array");
    int n = cJSON_GetArraySize(msgs);
    if (n == 0)
        return BAD("messages", "'messages' must not be empty");
    if (n > FT_API_MAX_MESSAGES)
        return BAD("messages", "'messages' has more than %d entries", FT_API_MAX_MESSAGES);
    if (!(r->messages = calloc((size_t)n, sizeof(*r->messages))))
        return OOM();
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        char param[64];
        const int i = r->n_messages;
        snprintf(param, sizeof(param), "messages[%d]", i);
        if (!cJSON_IsObject(m))
            return BAD(param, "'%s' must be an object", param);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        snprintf(param, sizeof(param), "messages[%d].role", i);
        if (!cJSON_IsString(role))
            return BAD(param, "'%s' must be a string", param);
        const char *rs = role->valuestring;
        /* "developer" is OpenAI's newer name for the system role. */
        if (!strcmp(rs, "system") || !strcmp(rs, "developer"))
            r->messages[i].role = "system";
        else if (!strcmp(rs, "user"))
            r->messages[i].role = "user";
        else if (!strcmp(rs, "assistant"))
            r->messages[i].role = "assistant";
        else if (!strcmp(rs, "tool"))
            r->messages[i].role = "tool";
        else
            return BAD(param, "unknown role '%.40s' in %s: expected system, developer, user, assistant or tool", rs,
                       param);
        /* Counted now so that ft_api_request_free frees what the tool fields hold. */
        r->n_messages++;
        if (ft_api_parse_message_tools(m, i, &r->messages[i], err))
            return -1;
        const cJSON *content = field(m, "content");
        snprintf(param, sizeof(param), "messages[%d].content", i);
        if (!content) {
            /* An assistant turn may carry no text (OpenAI allows null there). */
            if (strcmp(r->messages[i].role, "assistant") != 0)
                return BAD(param, "'%s' is required", param);
            if (!(r->messages[i].content = dup_str("")))
                return OOM();
        } else if (parse_content(content, param, &r->messages[i].content, err)) {
            return -1;
        }
    }
    return 0;
}

/* prompt: a string, an array holding one string, or an array of token ids. */
static int parse_prompt(const cJSON *root, int32_t n_vocab, struct ft_api_request *r, struct ft_api_error *err) {
    const cJSON *p = field(root, "prompt");
    if (!p)
        return BAD("prompt", "'prompt' is required");
    if (cJSON_IsString(p)) {
        if (!(r->prompt = dup_str(p->valuestring)))
            return OOM();
        return 0;
    }
    if (!cJSON_IsArray(p))
        return BAD("prompt", "'prompt' must be a string, an array of one string, or an array of token ids");
    int n = cJSON_GetArraySize(p);
    if (n == 0)
        return BAD("prompt", "'prompt' must not be empty");
    const cJSON *first = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsString(first)) {
        if (n != 1)
            return BAD("prompt", "only one prompt per request is supported (got %d)", n);
        if (!(r->prompt = dup_str(first->valuestring)))
            return OOM();
        return 0;
    }
    if (!(r->prompt_tokens = malloc(sizeof(int32_t) * (size_t)n)))
        return OOM();
    const cJSON *t;
    cJSON_ArrayForEach(t, p) {
        if (!cJSON_IsNumber(t) || floor(t->valuedouble) != t->valuedouble || t->valuedouble < 0 ||
            t->valuedouble >= n_vocab)
            return BAD("prompt", "token ids in 'prompt' must be integers in 0..%d", (int)n_vocab - 1);
        r->prompt_tokens[r->n_prompt_tokens++] = (int32_t)t->valuedouble;
    }
    return 0;
}

static int add_stop(struct ft_api_request *r, const cJSON *s, struct ft_api_error *err) {
    if (!cJSON_IsString(s))
        return BAD("stop", "'stop' must be a string or an array of strings");
    size_t l = strlen(s->valuestring);
    if (l == 0 || l > FT_API_MAX_STOP_LEN)
        return BAD("stop", "each stop string must have 1 to %d bytes", FT_API_MAX_STOP_LEN);
    if (r->n_stops == FT_API_MAX_STOPS)
        return BAD("stop", "at most %d stop strings are supported", FT_API_MAX_STOPS);
    if (!(r->stops[r->n_stops] = dup_str(s->valuestring)))
        return OOM();
    r->n_stops++;
    return 0;
}

static int parse_sampling(const cJSON *root, struct ft_api_request *r, struct ft_api_error *err) {
    struct ft_sampler_params *sp = &r->sampling;
    double d;
    int64_t i;
    bool given;
    if (get_number(root, "temperature", 0, 2, &d, &given, err))
        return -1;
    if (given)
        sp->temperature = (float)d;
    if (get_number(root, "top_p", 0, 1, &d, &given, err))
        return -1;
    if (given)
        sp->top_p = (float)d;
    if (get_number(root, "min_p", 0, 1, &d, &given, err))
        return -1;
    if (given)
        sp->min_p = (float)d;
    if (get_int(root, "top_k", 0, 1 << 20, &i, &given, err))
        return -1;
    if (given)
        sp->top_k = (int32_t)i;
    if (get_number(root, "presence_penalty", -2, 2, &d, &given, err))
        return -1;
    if (given)
        sp->presence_penalty = (float)d;
    if (get_number(root, "frequency_penalty", -2, 2, &d, &given, err))
        return -1;
    if (given)
        sp->frequency_penalty = (float)d;
    if (get_number(root, "typical_p", 0, 1, &d, &given, err))
        return -1;
    if (given)
        sp->typical_p = (float)d;
    /* Any 64-bit integer, as OpenAI allows; negative seeds wrap. Doubles
     * hold integers exactly up to 2^53, which is what JSON clients send. */
    if (get_int(root, "seed", -9007199254740992.0, 9007199254740992.0, &i, &r->seed_set, err))
        return -1;
    if (r->seed_set)
        sp->seed = (uint64_t)i;
    return 0;
}

/* Chat: logprobs (boolean) and top_logprobs (0..20, needs logprobs true).
 * Completions: logprobs, the number of most likely tokens (an integer;
 * null or absent: none). */
static int parse_logprobs(const cJSON *root, enum ft_api_endpoint ep, struct ft_api_request *r,
                          struct ft_api_error *err) {
    int64_t i;
    bool given;
    if (ep == FT_API_CHAT) {
        if (get_bool(root, "logprobs", &r->logprobs, NULL, err))
            return -1;
        if (get_int(root, "top_logprobs", 0, FT_API_MAX_TOP_LOGPROBS, &i, &given, err))
            return -1;
        if (given && !r->logprobs)
            return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r->top_logprobs = given ? (int32_t)i : 0;
    } else {
        const cJSON *v = field(root, "logprobs");
        if (v && cJSON_IsBool(v))
            return BAD("logprobs", "'logprobs' must be an integer (0 to %d) for completions: the number of most "
                       "likely tokens to return", FT_API_MAX_TOP_LOGPROBS);
        if (get_int(root, "logprobs", 0, FT_API_MAX_TOP_LOGPROBS, &i, &given, err))
            return -1;
        r->logprobs = given;
        r->top_logprobs = given ? (int32_t)i : 0;
    }
    return get_bool(root, "return_tokens_as_token_ids", &r->tokens_as_ids, NULL, err);
}

/* One logit_bias value: a number in -100..100 (OpenAI's range), or false
 * (llama.cpp's ban). */
static int bias_value(const cJSON *v, float *out, struct ft_api_error *err) {
    if (cJSON_IsFalse(v)) {
        *out = -INFINITY;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < -100 || v->valuedouble > 100)
        return BAD("logit_bias", "'logit_bias' values must be numbers from -100 to 100 (or false to ban a token)");
    *out = (float)v->valuedouble;
    return 0;
}

/* One logit_bias key: a token id (decimal digits), or llama.cpp's text. */
static int bias_entry(struct ft_api_request *r, const char *key, const cJSON *id, float bias, int32_t n_vocab,
                      struct ft_api_error *err) {
    if (id) { /* the array form's [id, bias] */
        if (!cJSON_IsNumber(id) || floor(id->valuedouble) != id->valuedouble || id->valuedouble < 0 ||
            id->valuedouble >= n_vocab)
            return BAD("logit_bias", "'logit_bias' names token %.0f, outside this model's vocabulary (0..%d)",
                       cJSON_IsNumber(id) && isfinite(id->valuedouble) ? id->valuedouble : -1.0, (int)n_vocab - 1);
        r->logit_bias[r->n_logit_bias++] = (struct ft_logit_bias){(int32_t)id->valuedouble, bias};
        return 0;
    }
    size_t len = strlen(key);
    if (len == 0 || len > FT_API_MAX_BIAS_TEXT)
        return BAD("logit_bias", "'logit_bias' keys must be token ids (or text of 1 to %d bytes)", FT_API_MAX_BIAS_TEXT);
    size_t sign = key[0] == '-' || key[0] == '+';
    if (len > sign && strspn(key + sign, "0123456789") == len - sign) {
        char *end = NULL;
        long long v = strtoll(key, &end, 10);
        if (v < 0 || v >= n_vocab || len - sign > 10)
            return BAD("logit_bias", "'logit_bias' names token %.24s, outside this model's vocabulary (0..%d)", key,
                       (int)n_vocab - 1);
        r->logit_bias[r->n_logit_bias++] = (struct ft_logit_bias){(int32_t)v, bias};
        return 0;
    }
    if (!(r->bias_text[r->n_bias_text] = dup_str(key)))
        return OOM();
    r->bias_text_value[r->n_bias_text++] = bias;
    return 0;
}

/* logit_bias: OpenAI's {"token id": bias}, and llama.cpp's text keys and
 * [[id or text, bias], ...] arrays. Ids are checked against the vocabulary
 * here; text is tokenized by ft_api_logit_bias_resolve(). */
static int parse_logit_bias(const cJSON *root, int32_t n_vocab, struct ft_api_request *r, struct ft_api_error *err) {
    const cJSON *lb = field(root, "logit_bias");
    if (!lb)
        return 0;
    if (!cJSON_IsObject(lb) && !cJSON_IsArray(lb))
        return BAD("logit_bias", "'logit_bias' must be an object mapping token ids to biases from -100 to 100");
    const int n = cJSON_GetArraySize(lb);
    if (n > FT_API_MAX_LOGIT_BIAS)
        return BAD("logit_bias", "'logit_bias' has %d entries: at most %d are allowed", n, FT_API_MAX_LOGIT_BIAS);
    if (n == 0)
        return 0;
    if (!(r->logit_bias = malloc(sizeof(*r->logit_bias) * (size_t)n)) ||
        !(r->bias_text = calloc((size_t)n, sizeof(char *))) ||
        !(r->bias_text_value = malloc(sizeof(float) * (size_t)n)))
        return OOM();
    const cJSON *e;
    cJSON_ArrayForEach(e, lb) {
        float bias;
        if (cJSON_IsObject(lb)) {
            if (bias_value(e, &bias, err) || bias_entry(r, e->string, NULL, bias, n_vocab, err))
                return -1;
            continue;
        }
        const cJSON *k = cJSON_GetArrayItem(e, 0), *v = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !(cJSON_IsString(k) || cJSON_IsNumber(k)))
            return BAD("logit_bias", "an array 'logit_bias' holds [token id or text, bias] pairs");
        if (bias_value(v, &bias, err) ||
            bias_entry(r, cJSON_IsString(k) ? k->valuestring : NULL, cJSON_IsString(k) ? NULL : k, bias, n_vocab,
                       err))
            return -1;
    }
    return 0;
}

int ft_api_logit_bias_resolve(struct ft_api_request *r, const struct ft_tokenizer *tok, struct ft_api_error *err) {
    for (int32_t i = 0; i < r->n_bias_text; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        const char *t = r->bias_text[i];
        if (ft_tokenize(tok, t, strlen(t), false, false, &ids, &n))
            return OOM();
        const size_t total = (size_t)r->n_logit_bias + n;
        struct ft_logit_bias *lb = total > FT_SAMPLER_MAX_LOGIT_BIAS ? NULL
                                   : realloc(r->logit_bias, sizeof(*lb) * (total ? total : 1));
        if (!lb) {
            free(ids);
            if (total > FT_SAMPLER_MAX_LOGIT_BIAS)
                return BAD("logit_bias", "the text keys of 'logit_bias' give more than %d tokens",
                           FT_SAMPLER_MAX_LOGIT_BIAS);
            return OOM();
        }
        r->logit_bias = lb;
        for (size_t j = 0; j < n; j++)
            r->logit_bias[r->n_logit_bias++] = (struct ft_logit_bias){ids[j], r->bias_text_value[i]};
        free(ids);
    }
    for (int32_t i = 0; i < r->n_bias_text; i++)
        free(r->bias_text[i]);
    r->n_bias_text = 0;
    r->sampling.logit_bias = r->logit_bias;
    r->sampling.n_logit_bias = r->n_logit_bias;
    return 0;
}

/* Fields of OpenAI's, vLLM's and llama-server's APIs that would change the
 * answer and that FreeToken does not implement: a 400 naming the field
 * rather than an answer that silently differs. (Fields without effect on
 * the answer, such as user, store, metadata and service_tier, are
 * accepted.) A null value counts as absent. */
static int refuse_unsupported(const cJSON *root, struct ft_api_error *err) {
    static const char *const fields[] = {
        "suffix", "prediction", "audio", "web_search_options", "mirostat", "mirostat_tau", "mirostat_eta",
        "prompt_logprobs",
    };
    for (size_t k = 0; k < FT_ARRAY_LEN(fields); k++) {
        const cJSON *v = field(root, fields[k]);
        if (v && !cJSON_IsNull(v))
            return BAD(fields[k], "'%s' is not supported by this server", fields[k]);
    }
    const cJSON *m = field(root, "modalities");
    for (const cJSON *x = m && cJSON_IsArray(m) ? m->child : NULL; x; x = x->next)
        if (!cJSON_IsString(x) || strcmp(x->valuestring, "text") != 0)
            return BAD("modalities", "only the \"text\" modality is supported");
    if (m && !cJSON_IsNull(m) && !cJSON_IsArray(m))
        return BAD("modalities", "'modalities' must be an array");
    return 0;
}

/* A JSON Schema (a cJSON tree) compiled to r->grammar; `param` names the
 * field in errors. */
static int compile_schema(const cJSON *schema, const char *param, const char *name, struct ft_api_request *r,
                          struct ft_api_error *err) {
    char *text = cJSON_PrintUnformatted(schema);
    if (!text)
        return OOM();
    char msg[256];
    int rc = ft_grammar_from_json_schema(text, strlen(text), &r->grammar, msg, sizeof(msg));
    cJSON_free(text);
    if (rc == FT_ENOMEM)
        return OOM();
    if (rc) {
        if (name)
            return BAD(param, "Invalid schema for response_format '%.64s': %s", name, msg);
        return BAD(param, "Invalid schema in '%s': %s", param, msg);
    }
    return 0;
}

/* response_format (OpenAI), json_schema and grammar (llama.cpp server),
 * guided_json (vLLM): at most one of them. */
static int parse_structured(const cJSON *root, struct ft_api_request *r, struct ft_api_error *err) {
    static const char *const names[] = {"response_format", "json_schema", "grammar",       "guided_json",
                                        "guided_choice",   "guided_regex", "guided_grammar"};
    const char *given = NULL;
    for (size_t i = 0; i < FT_ARRAY_LEN(names); i++) {
        const cJSON *v = field(root, names[i]);
        if (!v)
            continue;
        if (i == 0) { /* {"type": "text"} constrains nothing */
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
            if (cJSON_IsObject(v) && cJSON_IsString(t) && !strcmp(t->valuestring, "text"))
                continue;
        }
        if (given)
            return BAD(names[i], "'%s' and '%s' both constrain the output: give one of them", given, names[i]);
        given = names[i];
    }
    r->grammar_param = given;
    const cJSON *v;
    char msg[256];
    if ((v = field(root, "guided_choice"))) { /* vLLM: the output is exactly one of the strings */
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
        if (n == 0 || n > FT_GRAMMAR_MAX_CHOICES)
            return BAD("guided_choice", "'guided_choice' must be an array of 1 to %d strings", FT_GRAMMAR_MAX_CHOICES);
        const char **cs = malloc(sizeof(*cs) * (size_t)n);
        if (!cs)
            return OOM();
        int k = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, v) {
            if (!cJSON_IsString(c) || !c->valuestring[0]) {
                free(cs);
                return BAD("guided_choice", "'guided_choice[%d]' must be a non-empty string", k);
            }
            cs[k++] = c->valuestring;
        }
        int rc = ft_grammar_from_choices(cs, (size_t)n, &r->grammar, msg, sizeof(msg));
        free(cs);
        if (rc == FT_ENOMEM)
            return OOM();
        return rc ? BAD("guided_choice", "Invalid 'guided_choice': %s", msg) : 0;
    }
    if ((v = field(root, "guided_regex"))) {
        if (!cJSON_IsString(v) || !v->valuestring[0])
            return BAD("guided_regex", "'guided_regex' must be a non-empty string (a regular expression)");
        int rc = ft_grammar_from_regex(v->valuestring, strlen(v->valuestring), &r->grammar, msg, sizeof(msg));
        if (rc == FT_ENOMEM)
            return OOM();
        return rc ? BAD("guided_regex", "Invalid 'guided_regex': %s", msg) : 0;
    }
    if ((v = field(root, "response_format"))) {
        if (!cJSON_IsObject(v))
            return BAD("response_format", "'response_format' must be an object");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (!cJSON_IsString(t))
            return BAD("response_format.type", "'response_format.type' must be one of 'text', 'json_object', "
                                               "'json_schema'");
        if (!strcmp(t->valuestring, "json_object")) {
            if (ft_grammar_json_object(&r->grammar))
                return OOM();
        } else if (!strcmp(t->valuestring, "json_schema")) {
            const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
            if (!cJSON_IsObject(js))
                return BAD("response_format.json_schema", "Missing required parameter: 'response_format.json_schema'");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name");
            if (!cJSON_IsString(name))
                return BAD("response_format.json_schema.name",
                           "Missing required parameter: 'response_format.json_schema.name'");
            size_t nl = strlen(name->valuestring);
            if (nl == 0 || nl > 64 || strspn(name->valuestring, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                                "0123456789_-") != nl)
                return BAD("response_format.json_schema.name", "'response_format.json_schema.name' must be 1 to 64 "
                                                               "characters from a-z, A-Z, 0-9, '_' and '-'");
            const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
            if (strict && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
                return BAD("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a "
                                                                 "boolean");
            const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
            if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema))
                return BAD("response_format.json_schema.schema", "'response_format.json_schema.schema' must be an "
                                                                 "object");
            if (!schema) { /* no schema: any JSON value */
                cJSON *any = cJSON_CreateObject();
                if (!any)
                    return OOM();
                int rc = compile_schema(any, "response_format.json_schema.schema", name->valuestring, r, err);
                cJSON_Delete(any);
                return rc;
            }
            return compile_schema(schema, "response_format.json_schema.schema", name->valuestring, r, err);
        } else if (strcmp(t->valuestring, "text") != 0) {
            return BAD("response_format.type", "'response_format.type' must be one of 'text', 'json_object', "
                                               "'json_schema' (got '%.40s')", t->valuestring);
        }
    }
    static const char *const schema_fields[] = {"json_schema", "guided_json"};
    for (size_t i = 0; i < FT_ARRAY_LEN(schema_fields); i++) {
        if (!(v = field(root, schema_fields[i])))
            continue;
        if (cJSON_IsString(v)) { /* vLLM also takes the schema as JSON text */
            cJSON *parsed = cJSON_Parse(v->valuestring);
            if (!parsed)
                return BAD(schema_fields[i], "'%s' is a string that is not JSON", schema_fields[i]);
            int rc = compile_schema(parsed, schema_fields[i], NULL, r, err);
            cJSON_Delete(parsed);
            return rc;
        }
        if (!cJSON_IsObject(v) && !cJSON_IsBool(v))
            return BAD(schema_fields[i], "'%s' must be a JSON Schema object", schema_fields[i]);
        return compile_schema(v, schema_fields[i], NULL, r, err);
    }
    /* llama.cpp's grammar and vLLM's guided_grammar (GBNF, as vLLM's
     * xgrammar backend takes it) */
    static const char *const gbnf_fields[] = {"grammar", "guided_grammar"};
    for (size_t i = 0; i < FT_ARRAY_LEN(gbnf_fields); i++) {
        if (!(v = field(root, gbnf_fields[i])))
            continue;
        if (!cJSON_IsString(v))
            return BAD(gbnf_fields[i], "'%s' must be a string (GBNF)", gbnf_fields[i]);
        int rc = ft_grammar_from_gbnf(v->valuestring, strlen(v->valuestring), &r->grammar, msg, sizeof(msg));
        if (rc == FT_ENOMEM)
            return OOM();
        if (rc)
            return BAD(gbnf_fields[i], "Invalid grammar: %s", msg);
    }
    return 0;
}

static int parse_fields(const cJSON *root, enum ft_api_endpoint ep, int32_t n_vocab, struct ft_api_request *r,
                        struct ft_api_error *err) {
    const cJSON *v;
    if ((v = field(root, "model"))) {
        if (!cJSON_IsString(v))
            return BAD("model", "'model' must be a string");
        if (!(r->model = dup_str(v->valuestring)))
            return OOM();
    }
    if (ep == FT_API_CHAT ? parse_messages(root, r, err) : parse_prompt(root, n_vocab, r, err))
        return -1;
    if (ep == FT_API_CHAT && (ft_api_parse_tools(root, r, err) || ft_api_parse_reasoning(root, r, err)))
        return -1;

    int64_t i;
    bool given;
    /* max_completion_tokens is the newer name; it wins when both are given. */
    if (get_int(root, "max_tokens", -2147483648.0, 2147483647.0, &i, &given, err))
        return -1;
    if (given) {
        if (i < 1)
            return BAD("max_tokens", "'max_tokens' must be at least 1 (got %lld)", (long long)i);
        r->max_tokens = (int32_t)i;
    }
    if (get_int(root, "max_completion_tokens", -2147483648.0, 2147483647.0, &i, &given, err))
        return -1;
    if (given) {
        if (i < 1)
            return BAD("max_completion_tokens", "'max_completion_tokens' must be at least 1 (got %lld)", (long long)i);
        r->max_tokens = (int32_t)i;
    }
    if (get_int(root, "n", -2147483648.0, 2147483647.0, &i, &given, err))
        return -1;
    if (given && (i < 1 || i > FT_API_MAX_N))
        return BAD("n", "'n' must be between 1 and %d (got %lld)", FT_API_MAX_N, (long long)i);
    r->n = given ? (int32_t)i : 1;
    if (parse_sampling(root, r, err))
        return -1;

    if ((v = field(root, "stop"))) {
        if (cJSON_IsArray(v)) {
            const cJSON *s;
            cJSON_ArrayForEach(s, v) if (add_stop(r, s, err)) return -1;
        } else if (add_stop(r, v, err)) {
            return -1;
        }
    }
    if (get_bool(root, "ignore_eos", &r->ignore_eos, NULL, err))
        return -1;
    if (get_int(root, "min_tokens", 0, 2147483647.0, &i, &given, err))
        return -1;
    if (given && r->max_tokens > 0 && i > r->max_tokens)
        return BAD("min_tokens", "'min_tokens' (%lld) must not exceed 'max_tokens' (%d)", (long long)i,
                   (int)r->max_tokens);
    r->min_tokens = given ? (int32_t)i : 0;
    if (parse_logit_bias(root, n_vocab, r, err))
        return -1;
    r->sampling.logit_bias = r->logit_bias;
    r->sampling.n_logit_bias = r->n_logit_bias;
    if (get_bool(root, "stream", &r->stream, NULL, err))
        return -1;
    if ((v = field(root, "stream_options"))) {
        if (!cJSON_IsObject(v))
            return BAD("stream_options", "'stream_options' must be an object");
        if (get_bool(v, "include_usage", &r->include_usage, NULL, err))
            return -1;
    }
    bool pm = false;
    if (get_bool(root, "performance_metrics", &pm, &given, err))
        return -1;
    r->performance_metrics = given ? (int)pm : -1;

    if (parse_logprobs(root, ep, r, err))
        return -1;
    /* Features that would change the answer's shape are refused, not ignored. */
    if ((v = field(root, "echo")) && !cJSON_IsFalse(v))
        return BAD("echo", "'echo' is not supported");
    if (refuse_unsupported(root, err))
        return -1;
    if (get_int(root, "best_of", -2147483648.0, 2147483647.0, &i, &given, err))
        return -1;
    if (given && i != 1)
        return BAD("best_of", "only best_of=1 is supported");
    return parse_structured(root, r, err);
}

cJSON *ft_api_parse_body(const char *body, size_t len, struct ft_api_error *err) {
    if (len == 0)
        return ft_api_error_set(err, 400, NULL, NULL, "the request body is empty: send a JSON object"), NULL;
    if (!ft_utf8_valid(body, len))
        return ft_api_error_set(err, 400, NULL, NULL, "the request body is not valid UTF-8"), NULL;
    if (memchr(body, 0, len) || has_nul_escape(body, len))
        return ft_api_error_set(err, 400, NULL, NULL, "strings in the request must not contain U+0000"), NULL;
    if (check_json_shape(body, len, err))
        return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        size_t at = (end && end >= body && end <= body + len) ? (size_t)(end - body) : 0;
        return ft_api_error_set(err, 400, NULL, NULL, "the request body is not valid JSON (error near byte %zu)", at), NULL;
    }
    int rc = 0;
    for (const char *p = end; p < body + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
            rc = BAD(NULL, "the request body has data after the JSON value (byte %zu)", (size_t)(p - body));
            break;
        }
    }
    if (!rc && !cJSON_IsObject(root))
        rc = BAD(NULL, "the request body must be a JSON object");
    if (rc) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int ft_api_request_parse(const char *body, size_t len, enum ft_api_endpoint ep, int32_t n_vocab,
                         struct ft_api_request *out, struct ft_api_error *err) {
    memset(out, 0, sizeof(*out));
    memset(err, 0, sizeof(*err));
    out->endpoint = ep;
    out->sampling = ft_sampler_default_params();
    out->performance_metrics = -1;
    cJSON *root = ft_api_parse_body(body, len, err);
    if (!root)
        return -1;
    int rc = parse_fields(root, ep, n_vocab, out, err);
    cJSON_Delete(root);
    if (rc)
        ft_api_request_free(out);
    return rc;
}
