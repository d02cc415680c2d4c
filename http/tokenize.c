/* POST /tokenize and /detokenize (http/tokenize.h). */
#include "tokenize.h"

#include "ft/common.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define BAD(param, ...) (ft_api_error_set(err, 400, (param), NULL, __VA_ARGS__), -1)

static int get_bool(const cJSON *root, const char *name, bool *out, struct ft_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v))
        return BAD(name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

static char *print_free(cJSON *o, struct ft_api_error *err) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s)
        ft_api_error_set(err, 500, NULL, NULL, "out of memory");
    return s;
}

/* A piece as llama-server shows it: its text if valid UTF-8, else its bytes. */
static cJSON *piece_json(const struct ft_tokenizer *tok, int32_t id, char *buf, size_t cap) {
    int n = ft_token_to_piece(tok, id, true, buf, cap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= cap)
        n = (int)cap - 1; /* cap is the vocabulary's longest piece + 1 */
    if (ft_utf8_valid(buf, (size_t)n)) {
        buf[n] = '\0';
        return cJSON_CreateString(buf);
    }
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)buf[i]));
    return a;
}

char *ft_tokenize_handle(const struct ft_tokenizer *tok, const char *body, size_t len, struct ft_api_error *err) {
    memset(err, 0, sizeof(*err));
    cJSON *root = ft_api_parse_body(body, len, err);
    if (!root)
        return NULL;
    bool add_special = false, parse_special = true, with_pieces = false;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "content");
    int rc = 0;
    if (!c || cJSON_IsNull(c))
        rc = BAD("content", "'content' is required");
    else if (!cJSON_IsString(c))
        rc = BAD("content", "'content' must be a string");
    if (rc || get_bool(root, "add_special", &add_special, err) ||
        get_bool(root, "parse_special", &parse_special, err) || get_bool(root, "with_pieces", &with_pieces, err)) {
        cJSON_Delete(root);
        return NULL;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    rc = ft_tokenize(tok, c->valuestring, strlen(c->valuestring), add_special, parse_special, &ids, &n);
    cJSON_Delete(root);
    if (rc || n > FT_TOKENIZE_MAX_TOKENS) {
        free(ids);
        if (rc == FT_ENOMEM)
            ft_api_error_set(err, 500, NULL, NULL, "out of memory");
        else if (rc)
            ft_api_error_set(err, 400, "content", NULL, "'content' cannot be tokenized");
        else
            ft_api_error_set(err, 400, "content", NULL, "'content' gives %zu tokens; at most %d are returned", n,
                             FT_TOKENIZE_MAX_TOKENS);
        return NULL;
    }
    const size_t cap = ft_tokenizer_max_piece_len(tok) + 1;
    char *buf = with_pieces ? malloc(cap) : NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "tokens") : NULL;
    bool ok = arr && (!with_pieces || buf);
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *item;
        if (with_pieces) {
            item = cJSON_CreateObject();
            if (item) {
                cJSON_AddNumberToObject(item, "id", ids[i]);
                cJSON *p = piece_json(tok, ids[i], buf, cap);
                ok = p != NULL;
                cJSON_AddItemToObject(item, "piece", p);
            }
        } else {
            item = cJSON_CreateNumber(ids[i]);
        }
        ok = ok && item && cJSON_AddItemToArray(arr, item);
    }
    free(buf);
    free(ids);
    if (!ok) {
        cJSON_Delete(o);
        ft_api_error_set(err, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    return print_free(o, err);
}

/* Append s[0..n) to out, each byte that does not start a valid UTF-8
 * sequence replaced by U+FFFD. out has room for 3 * n bytes. */
static size_t append_utf8_fixed(char *out, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const unsigned char b = (unsigned char)s[i];
        const size_t l = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
        if (l && i + l <= n && ft_utf8_valid(s + i, l)) {
            memcpy(out + o, s + i, l);
            o += l;
            i += l;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    return o;
}

char *ft_detokenize_handle(const struct ft_tokenizer *tok, const char *body, size_t len, struct ft_api_error *err) {
    memset(err, 0, sizeof(*err));
    cJSON *root = ft_api_parse_body(body, len, err);
    if (!root)
        return NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    const int32_t n_vocab = ft_tokenizer_n_vocab(tok);
    int rc = 0;
    if (!t || cJSON_IsNull(t))
        rc = BAD("tokens", "'tokens' is required");
    else if (!cJSON_IsArray(t))
        rc = BAD("tokens", "'tokens' must be an array of token ids");
    const cJSON *v;
    size_t total = 0;
    if (!rc) {
        cJSON_ArrayForEach(v, t) {
            if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble ||
                v->valuedouble < 0 || v->valuedouble >= n_vocab) {
                rc = BAD("tokens", "token ids in 'tokens' must be integers in 0..%d", (int)n_vocab - 1);
                break;
            }
            char first;
            const int k = ft_token_to_piece(tok, (int32_t)v->valuedouble, true, &first, 1); /* the length */
            total += k > 0 ? (size_t)k : 0;
        }
    }
    char *raw = rc ? NULL : malloc(total + 1);
    char *fixed = rc ? NULL : malloc(3 * total + 1);
    if (!rc && (!raw || !fixed)) {
        ft_api_error_set(err, 500, NULL, NULL, "out of memory");
        rc = -1;
    }
    size_t o = 0;
    if (!rc) {
        cJSON_ArrayForEach(v, t) {
            const int k = ft_token_to_piece(tok, (int32_t)v->valuedouble, true, raw + o, total + 1 - o);
            o += k > 0 ? (size_t)k : 0;
        }
    }
    cJSON_Delete(root);
    char *out = NULL;
    if (!rc) {
        fixed[append_utf8_fixed(fixed, raw, o)] = '\0';
        cJSON *obj = cJSON_CreateObject();
        if (obj)
            cJSON_AddStringToObject(obj, "content", fixed);
        out = print_free(obj, err);
    }
    free(raw);
    free(fixed);
    return out;
}
