/* logprobs objects of chat and completions choices (http/logprobs_json.h). */
#include "logprobs_json.h"

#include "ft/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 character at s[0..n), or 0. */
static size_t utf8_char_len(const unsigned char *s, size_t n) {
    const size_t l = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
                                    : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    return l && l <= n && ft_utf8_valid((const char *)s, l) ? l : 0;
}

int ft_logprobs_token_text(const struct ft_tokenizer *tok, int32_t id, bool as_id, char **out, size_t *n_bytes_out,
                           unsigned char **bytes_out) {
    *out = NULL;
    *bytes_out = NULL;
    *n_bytes_out = 0;
    char small[256];
    int nb = ft_token_to_piece(tok, id, true, small, sizeof(small));
    if (nb < 0)
        nb = 0;
    unsigned char *bytes = malloc((size_t)nb + 1);
    if (!bytes)
        return FT_ENOMEM;
    if ((size_t)nb <= sizeof(small))
        memcpy(bytes, small, (size_t)nb);
    else
        ft_token_to_piece(tok, id, true, (char *)bytes, (size_t)nb + 1);
    /* Text: valid characters as they are, other bytes as "\xNN". */
    char *text = malloc(as_id ? 32 : 4 * (size_t)nb + 1);
    if (!text) {
        free(bytes);
        return FT_ENOMEM;
    }
    if (as_id) {
        snprintf(text, 32, "token_id:%d", (int)id);
    } else {
        size_t o = 0;
        for (size_t i = 0; i < (size_t)nb;) {
            const size_t l = utf8_char_len(bytes + i, (size_t)nb - i);
            if (l) {
                memcpy(text + o, bytes + i, l);
                o += l;
                i += l;
            } else {
                o += (size_t)snprintf(text + o, 5, "\\x%02x", bytes[i]);
                i++;
            }
        }
        text[o] = '\0';
    }
    *out = text;
    *bytes_out = bytes;
    *n_bytes_out = (size_t)nb;
    return FT_OK;
}

static int64_t n_chars(const unsigned char *b, size_t n) {
    int64_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += (b[i] & 0xc0) != 0x80; /* every byte but a continuation byte starts a character */
    return c;
}

/* {"token", "logprob", "bytes"} (chat's entry and its top_logprobs items). */
static cJSON *chat_item(const struct ft_tokenizer *tok, int32_t id, float lp, bool as_id) {
    char *text;
    unsigned char *bytes;
    size_t nb;
    if (ft_logprobs_token_text(tok, id, as_id, &text, &nb, &bytes))
        return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_CreateArray() : NULL;
    if (arr) {
        cJSON_AddStringToObject(o, "token", text);
        cJSON_AddNumberToObject(o, "logprob", lp);
        for (size_t i = 0; i < nb; i++)
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(bytes[i]));
        cJSON_AddItemToObject(o, "bytes", arr);
    } else {
        cJSON_Delete(o);
        o = NULL;
    }
    free(text);
    free(bytes);
    return o;
}

static cJSON *chat_json(const struct ft_tokenizer *tok, const struct ft_token_logprob *v, int32_t n, bool as_id) {
    cJSON *o = cJSON_CreateObject();
    cJSON *content = o ? cJSON_AddArrayToObject(o, "content") : NULL;
    if (!content)
        goto fail;
    for (int32_t i = 0; i < n; i++) {
        cJSON *e = chat_item(tok, v[i].token, v[i].logprob, as_id);
        if (!e)
            goto fail;
        cJSON_AddItemToArray(content, e);
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        if (!top)
            goto fail;
        for (int32_t k = 0; k < v[i].n_top; k++) {
            cJSON *t = chat_item(tok, v[i].top_token[k], v[i].top_logprob[k], as_id);
            if (!t)
                goto fail;
            cJSON_AddItemToArray(top, t);
        }
    }
    cJSON_AddNullToObject(o, "refusal");
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

/* Adds key: lp unless the key is there already (two ids can decode to the
 * same text; the first, more likely one stays). */
static bool dict_add(cJSON *d, const struct ft_tokenizer *tok, int32_t id, float lp, bool as_id) {
    char *text;
    unsigned char *bytes;
    size_t nb;
    if (ft_logprobs_token_text(tok, id, as_id, &text, &nb, &bytes))
        return false;
    bool ok = true;
    if (!cJSON_GetObjectItemCaseSensitive(d, text))
        ok = cJSON_AddNumberToObject(d, text, lp) != NULL;
    free(text);
    free(bytes);
    return ok;
}

static cJSON *completion_json(const struct ft_tokenizer *tok, const struct ft_token_logprob *v, int32_t n, bool as_id,
                              int64_t *text_offset) {
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = o ? cJSON_AddArrayToObject(o, "tokens") : NULL;
    cJSON *lps = o ? cJSON_AddArrayToObject(o, "token_logprobs") : NULL;
    cJSON *tops = o ? cJSON_AddArrayToObject(o, "top_logprobs") : NULL;
    cJSON *offs = o ? cJSON_AddArrayToObject(o, "text_offset") : NULL;
    if (!tokens || !lps || !tops || !offs)
        goto fail;
    for (int32_t i = 0; i < n; i++) {
        char *text;
        unsigned char *bytes;
        size_t nb;
        if (ft_logprobs_token_text(tok, v[i].token, as_id, &text, &nb, &bytes))
            goto fail;
        cJSON_AddItemToArray(tokens, cJSON_CreateString(text));
        free(text);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(v[i].logprob));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*text_offset));
        if (!ft_tokenizer_is_control(tok, v[i].token))
            *text_offset += n_chars(bytes, nb);
        free(bytes);
        cJSON *d = cJSON_CreateObject();
        if (!d)
            goto fail;
        cJSON_AddItemToArray(tops, d);
        for (int32_t k = 0; k < v[i].n_top; k++)
            if (!dict_add(d, tok, v[i].top_token[k], v[i].top_logprob[k], as_id))
                goto fail;
        if (!dict_add(d, tok, v[i].token, v[i].logprob, as_id))
            goto fail;
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

cJSON *ft_logprobs_json(enum ft_api_endpoint ep, const struct ft_tokenizer *tok, const struct ft_token_logprob *v,
                        int32_t n, bool tokens_as_ids, int64_t *text_offset) {
    return ep == FT_API_CHAT ? chat_json(tok, v, n, tokens_as_ids)
                             : completion_json(tok, v, n, tokens_as_ids, text_offset);
}
