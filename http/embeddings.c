/* POST /v1/embeddings (http/embeddings.h): the request's fields, its
 * inputs as the scheduler's embeddings job, and OpenAI's response. The
 * server routes the request (http/server.c); the generation path
 * (http/generation.c) submits r->job with the other requests and calls
 * ft_embd_response when the scheduler is done. */
#include "embeddings.h"

#include "ft/common.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(param, ...) (ft_api_error_set(err, 400, (param), NULL, __VA_ARGS__), -1)
#define OOM() (ft_api_error_set(err, 500, NULL, NULL, "out of memory"), -1)

void ft_embd_request_free(struct ft_embd_request *r) {
    if (!r)
        return;
    free(r->model);
    if (r->texts)
        for (int32_t i = 0; i < r->n_inputs; i++)
            free(r->texts[i]);
    free(r->texts);
    free(r->tokens);
    free(r->offs);
    free(r->out);
    memset(r, 0, sizeof(*r));
}

static const cJSON *field(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsNull(v) ? NULL : v; /* null means "not given", as SDKs send it */
}

static bool is_int(const cJSON *v) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && floor(v->valuedouble) == v->valuedouble;
}

/* One token-id input (an array of integers) appended to r->tokens. */
static int add_token_input(struct ft_embd_request *r, const cJSON *arr, int32_t n_vocab, int32_t index,
                           struct ft_api_error *err) {
    const int n = cJSON_GetArraySize(arr);
    if (n == 0)
        return BAD("input", "input %d is an empty array of token ids", (int)index);
    const int32_t have = r->offs[r->n_inputs];
    if (n > FT_EMBD_MAX_TOTAL_TOKENS - have)
        return BAD("input", "the inputs have more than %d tokens in all", FT_EMBD_MAX_TOTAL_TOKENS);
    int32_t *t = realloc(r->tokens, sizeof(int32_t) * (size_t)(have + n));
    if (!t)
        return OOM();
    r->tokens = t;
    int32_t k = have;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        if (!is_int(v) || v->valuedouble < 0 || v->valuedouble >= n_vocab)
            return BAD("input", "token ids in 'input' must be integers in 0..%d", (int)n_vocab - 1);
        t[k++] = (int32_t)v->valuedouble;
    }
    r->offs[++r->n_inputs] = k;
    return 0;
}

static int parse_input(const cJSON *root, int32_t n_vocab, struct ft_embd_request *r, struct ft_api_error *err) {
    const cJSON *in = field(root, "input");
    if (!in)
        return BAD("input", "'input' is required");
    const bool is_str = cJSON_IsString(in);
    if (!is_str && !cJSON_IsArray(in))
        return BAD("input", "'input' must be a string, an array of strings, an array of token ids, or an array "
                            "of arrays of token ids");
    const int n = is_str ? 1 : cJSON_GetArraySize(in);
    if (n == 0)
        return BAD("input", "'input' must not be an empty array");
    if (n > FT_EMBD_MAX_INPUTS && !cJSON_IsNumber(cJSON_GetArrayItem(in, 0)))
        return BAD("input", "'input' has %d inputs; at most %d are allowed", n, FT_EMBD_MAX_INPUTS);
    const cJSON *first = is_str ? in : cJSON_GetArrayItem(in, 0);
    if (cJSON_IsString(first)) {
        if (!(r->texts = calloc((size_t)n, sizeof(char *))))
            return OOM();
        const cJSON *v;
        int i = 0;
        for (v = is_str ? in : in->child; v && i < n; v = v->next, i++) {
            if (!cJSON_IsString(v))
                return BAD("input", "'input' mixes strings with other types (item %d)", i);
            if (!v->valuestring[0])
                return BAD("input", "input %d is an empty string", i);
            if (!(r->texts[i] = strdup(v->valuestring)))
                return OOM();
            r->n_inputs = i + 1;
        }
        return 0;
    }
    /* Token ids: one input (integers) or several (arrays of integers). */
    const bool nested = cJSON_IsArray(first);
    if (!nested && !cJSON_IsNumber(first))
        return BAD("input", "'input' must be a string, an array of strings, an array of token ids, or an array "
                            "of arrays of token ids");
    if (!(r->offs = calloc((size_t)(nested ? n : 1) + 1, sizeof(int32_t))))
        return OOM();
    if (!nested)
        return add_token_input(r, in, n_vocab, 0, err);
    const cJSON *v;
    int i = 0;
    cJSON_ArrayForEach(v, in) {
        if (!cJSON_IsArray(v))
            return BAD("input", "'input' mixes arrays of token ids with other types (item %d)", i);
        if (add_token_input(r, v, n_vocab, i, err))
            return -1;
        i++;
    }
    return 0;
}

static int parse_fields(const cJSON *root, int32_t n_vocab, struct ft_embd_request *r, struct ft_api_error *err) {
    const cJSON *v = field(root, "model");
    if (v) {
        if (!cJSON_IsString(v))
            return BAD("model", "'model' must be a string");
        if (!(r->model = strdup(v->valuestring)))
            return OOM();
    }
    if (parse_input(root, n_vocab, r, err))
        return -1;
    if ((v = field(root, "encoding_format"))) {
        if (!cJSON_IsString(v) || (strcmp(v->valuestring, "float") && strcmp(v->valuestring, "base64")))
            return BAD("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        r->base64 = !strcmp(v->valuestring, "base64");
    }
    if ((v = field(root, "dimensions"))) {
        if (!is_int(v) || v->valuedouble < 1 || v->valuedouble > INT32_MAX)
            return BAD("dimensions", "'dimensions' must be a positive integer");
        r->dimensions = (int32_t)v->valuedouble;
    }
    if ((v = field(root, "user")) && !cJSON_IsString(v))
        return BAD("user", "'user' must be a string");
    if ((v = field(root, "performance_metrics"))) {
        if (!cJSON_IsBool(v))
            return BAD("performance_metrics", "'performance_metrics' must be a boolean");
        r->performance_metrics = cJSON_IsTrue(v);
    }
    return 0;
}

int ft_embd_parse(const char *body, size_t len, int32_t n_vocab, struct ft_embd_request *out,
                  struct ft_api_error *err) {
    memset(out, 0, sizeof(*out));
    memset(err, 0, sizeof(*err));
    out->performance_metrics = -1;
    cJSON *root = ft_api_parse_body(body, len, err);
    if (!root)
        return -1;
    const int rc = parse_fields(root, n_vocab, out, err);
    cJSON_Delete(root);
    if (rc)
        ft_embd_request_free(out);
    return rc;
}

static const char *pooling_name(int32_t p) {
    switch (p) {
    case FT_POOLING_NONE: return "none";
    case FT_POOLING_MEAN: return "mean";
    case FT_POOLING_CLS: return "cls";
    case FT_POOLING_LAST: return "last";
    case 4: return "rank";
    default: return "unknown";
    }
}

int ft_embd_prepare(struct ft_embd_request *r, const struct ft_tokenizer *tok, int32_t n_ctx, int32_t n_embd,
                    int32_t pooling_type, struct ft_api_error *err) {
    memset(err, 0, sizeof(*err));
    if (r->dimensions && r->dimensions != n_embd)
        return BAD("dimensions",
                   "'dimensions' is %d, but this model's embeddings have %d (they cannot be shortened: "
                   "send %d or leave it out)",
                   (int)r->dimensions, (int)n_embd, (int)n_embd);
    const int32_t pooling = pooling_type < 0 ? FT_POOLING_MEAN : pooling_type;
    if (pooling != FT_POOLING_MEAN && pooling != FT_POOLING_CLS && pooling != FT_POOLING_LAST)
        return BAD(NULL,
                   "this model's pooling type is %s (%d, <arch>.pooling_type): it gives no single vector per "
                   "input, so /v1/embeddings cannot serve it",
                   pooling_name(pooling), (int)pooling);
    if (r->texts) {
        if (!(r->offs = calloc((size_t)r->n_inputs + 1, sizeof(int32_t))))
            return OOM();
        for (int32_t i = 0; i < r->n_inputs; i++) {
            int32_t *ids = NULL;
            size_t n = 0;
            if (ft_tokenize(tok, r->texts[i], strlen(r->texts[i]), true, true, &ids, &n)) {
                free(ids);
                return BAD("input", "input %d cannot be tokenized", (int)i);
            }
            const int32_t have = r->offs[i];
            if (n > (size_t)(FT_EMBD_MAX_TOTAL_TOKENS - have)) {
                free(ids);
                return BAD("input", "the inputs have more than %d tokens in all", FT_EMBD_MAX_TOTAL_TOKENS);
            }
            int32_t *t = n ? realloc(r->tokens, sizeof(int32_t) * ((size_t)have + n)) : r->tokens;
            if (n && !t) {
                free(ids);
                return OOM();
            }
            r->tokens = t;
            if (n)
                memcpy(t + have, ids, sizeof(int32_t) * n);
            free(ids);
            r->offs[i + 1] = have + (int32_t)n;
        }
    }
    for (int32_t i = 0; i < r->n_inputs; i++) {
        const int32_t n = r->offs[i + 1] - r->offs[i];
        if (n == 0)
            return BAD("input", "input %d has no tokens", (int)i);
        if (n > n_ctx) {
            ft_api_error_set(err, 400, "input", "context_length_exceeded",
                             "input %d has %d tokens; this server's context holds %d", (int)i, (int)n, (int)n_ctx);
            return -1;
        }
    }
    r->n_embd = n_embd;
    if (!(r->out = calloc((size_t)r->n_inputs * (size_t)n_embd, sizeof(float))))
        return OOM();
    r->job = (struct ft_embd_job){
        .n_inputs = r->n_inputs,
        .tokens = r->tokens,
        .offs = r->offs,
        .pooling = (enum ft_pooling)pooling,
        .out = r->out,
    };
    return 0;
}

/* ---- the response ------------------------------------------------------------ */

bool ft_embd_finite(const struct ft_embd_request *r) {
    for (size_t i = 0; i < (size_t)r->n_inputs * (size_t)r->n_embd; i++)
        if (!isfinite(r->out[i]))
            return false;
    return true;
}

/* llama.cpp's common_embd_normalize(…, 2): v / |v|, a zero vector stays zero. */
static void l2_normalize(const float *in, float *out, int32_t n) {
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        sum += (double)in[i] * in[i];
    const double norm = sum > 0.0 ? 1.0 / sqrt(sum) : 0.0;
    for (int32_t i = 0; i < n; i++)
        out[i] = (float)(in[i] * norm);
}

/* The vector as OpenAI sends it: a JSON array of numbers (9 significant
 * digits: every float32 reads back exactly) or a base64 string of its
 * little-endian float32 bytes. Raw JSON text, malloc'd. */
static char *encode_vector(const float *v, int32_t n, bool base64) {
    if (base64) {
        static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const size_t nb = (size_t)n * 4;
        char *s = malloc(2 + (nb + 2) / 3 * 4 + 1);
        unsigned char *bytes = malloc(nb);
        if (!s || !bytes) {
            free(s);
            free(bytes);
            return NULL;
        }
        for (int32_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++)
                bytes[(size_t)i * 4 + (size_t)k] = (unsigned char)(u >> (8 * k));
        }
        size_t o = 0;
        s[o++] = '"';
        for (size_t i = 0; i < nb; i += 3) {
            const uint32_t b = (uint32_t)bytes[i] << 16 | (i + 1 < nb ? (uint32_t)bytes[i + 1] << 8 : 0) |
                               (i + 2 < nb ? bytes[i + 2] : 0);
            s[o++] = abc[b >> 18 & 63];
            s[o++] = abc[b >> 12 & 63];
            s[o++] = i + 1 < nb ? abc[b >> 6 & 63] : '=';
            s[o++] = i + 2 < nb ? abc[b & 63] : '=';
        }
        s[o++] = '"';
        s[o] = '\0';
        free(bytes);
        return s;
    }
    const size_t cap = 2 + (size_t)n * 18 + 1; /* "-1.23456789e-38," is at most 17 bytes */
    char *s = malloc(cap);
    if (!s)
        return NULL;
    size_t o = 0;
    s[o++] = '[';
    for (int32_t i = 0; i < n; i++)
        o += (size_t)snprintf(s + o, cap - o, "%s%.9g", i ? "," : "", (double)v[i]);
    s[o++] = ']';
    s[o] = '\0';
    return s;
}

static cJSON *metrics_object(const struct ft_request_metrics *m) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "queue_time_ms", m->queue_time_ms);
    cJSON_AddNumberToObject(o, "prefill_tokens", m->prefill_tokens);
    cJSON_AddNumberToObject(o, "prefill_time_ms", m->prefill_time_ms);
    if (m->prefill_tokens_per_second < 0)
        cJSON_AddNullToObject(o, "prefill_tokens_per_second");
    else
        cJSON_AddNumberToObject(o, "prefill_tokens_per_second", m->prefill_tokens_per_second);
    cJSON_AddNumberToObject(o, "total_time_ms", m->total_time_ms);
    return o;
}

char *ft_embd_response(const struct ft_embd_request *r, const char *model, const struct ft_request_metrics *m,
                       bool with_metrics) {
    float *v = malloc(sizeof(float) * (size_t)r->n_embd);
    cJSON *o = cJSON_CreateObject();
    if (o)
        cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = o ? cJSON_AddArrayToObject(o, "data") : NULL;
    bool ok = v && data;
    for (int32_t i = 0; ok && i < r->n_inputs; i++) {
        l2_normalize(r->out + (size_t)i * (size_t)r->n_embd, v, r->n_embd);
        char *enc = encode_vector(v, r->n_embd, r->base64);
        cJSON *item = cJSON_CreateObject();
        cJSON *raw = enc ? cJSON_CreateRaw(enc) : NULL;
        free(enc);
        ok = item && raw && cJSON_AddItemToArray(data, item);
        if (!ok) {
            cJSON_Delete(item);
            cJSON_Delete(raw);
            break;
        }
        cJSON_AddStringToObject(item, "object", "embedding");
        cJSON_AddNumberToObject(item, "index", i);
        cJSON_AddItemToObject(item, "embedding", raw);
    }
    free(v);
    if (ok) {
        cJSON_AddStringToObject(o, "model", model);
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        if (u) {
            cJSON_AddNumberToObject(u, "prompt_tokens", r->offs[r->n_inputs]);
            cJSON_AddNumberToObject(u, "total_tokens", r->offs[r->n_inputs]);
        }
        if (with_metrics)
            cJSON_AddItemToObject(o, "metrics", metrics_object(m));
    }
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}
