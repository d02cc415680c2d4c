/* Chat prompt tokens whose control tokens come only from the template
 * (http/chat_prompt.h).
 *
 * The template is rendered twice: once as it is, once with every message's
 * content replaced by a placeholder ("\x02" K "\x03": control characters no
 * template writes and that are not whitespace (Python strip() takes \x1c-\x1f),
 * and digits: they survive trim, upper and lower). Where
 * the placeholders, put back as the contents (or as the trimmed contents),
 * rebuild the real render byte for byte, the contents' spans in it are
 * known, and the render is tokenized with special-token parsing off inside
 * them. Otherwise the template transforms contents in a way we cannot
 * follow; then the render is tokenized whole when no content holds
 * special-token text, and refused with a 400 naming the message when one
 * does (it could not be kept apart). */
#include "chat_prompt.h"

#include "ft/common.h"
#include "ft/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PH_OPEN '\x02'
#define PH_CLOSE '\x03'

/* One message content: the JSON string in the context and where it lands. */
struct content {
    cJSON *node;      /* messages[i].content in the placeholder context */
    const char *text; /* the content */
    size_t len;
    int32_t message;  /* i */
    size_t at;        /* position of its placeholder in the placeholder render */
    bool seen;
};

struct collected {
    struct content *c;
    int32_t n;
};

static const char *const k_space = " \t\n\r\v\f";

static void trim(const char *s, size_t len, size_t *start, size_t *n) {
    size_t a = 0, b = len;
    while (a < b && strchr(k_space, s[a]))
        a++;
    while (b > a && strchr(k_space, s[b - 1]))
        b--;
    *start = a;
    *n = b - a;
}

/* Every string content of messages[] in the (duplicated) context. */
static int collect(cJSON *ctx, struct collected *out) {
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(ctx, "messages");
    const int n = cJSON_GetArraySize(msgs);
    out->c = calloc((size_t)(n > 0 ? n : 1), sizeof(*out->c));
    out->n = 0;
    if (!out->c)
        return FT_ENOMEM;
    int i = 0;
    for (cJSON *m = msgs ? msgs->child : NULL; m; m = m->next, i++) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (cJSON_IsString(content) && content->valuestring[0])
            out->c[out->n++] = (struct content){content, NULL, 0, i, 0, false};
    }
    return FT_OK;
}

/* Finds each placeholder in the placeholder render; false unless every one
 * appears exactly once and no other placeholder byte does. */
static bool locate(const char *ph, size_t len, struct collected *cs) {
    for (size_t i = 0; i < len; i++) {
        if (ph[i] == PH_CLOSE)
            return false;
        if (ph[i] != PH_OPEN)
            continue;
        size_t j = i + 1;
        long k = 0;
        while (j < len && ph[j] >= '0' && ph[j] <= '9' && k < 1000000)
            k = k * 10 + (ph[j++] - '0');
        if (j == i + 1 || j >= len || ph[j] != PH_CLOSE || k >= cs->n || cs->c[k].seen)
            return false;
        cs->c[k].seen = true;
        cs->c[k].at = i;
        i = j;
    }
    for (int32_t k = 0; k < cs->n; k++)
        if (!cs->c[k].seen)
            return false;
    return true;
}

/* The placeholder render with each placeholder replaced by its content
 * (trimmed when `trimmed`): equal to the real render? Then spans[] holds the
 * contents' byte ranges in it, in text order. */
static bool rebuild_matches(const char *ph, size_t ph_len, const struct collected *cs, bool trimmed,
                            const char *real, size_t real_len, struct ft_text_span *spans) {
    size_t r = 0; /* position in real */
    int32_t n_spans = 0;
    for (size_t i = 0; i < ph_len;) {
        if (ph[i] != PH_OPEN) {
            if (r >= real_len || real[r] != ph[i])
                return false;
            r++, i++;
            continue;
        }
        size_t j = i + 1;
        long k = 0;
        while (ph[j] != PH_CLOSE)
            k = k * 10 + (ph[j++] - '0');
        const struct content *c = &cs->c[k];
        size_t start = 0, n = c->len;
        if (trimmed)
            trim(c->text, c->len, &start, &n);
        if (r + n > real_len || memcmp(real + r, c->text + start, n) != 0)
            return false;
        spans[n_spans++] = (struct ft_text_span){r, r + n};
        r += n;
        i = j + 1;
    }
    return r == real_len;
}

/* Whether text holds special-token text (it tokenizes differently with
 * special-token parsing on). */
static int has_special_text(const struct ft_tokenizer *tok, const char *text, size_t len, bool *out) {
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int rc = ft_tokenize(tok, text, len, false, true, &a, &na);
    if (!rc)
        rc = ft_tokenize(tok, text, len, false, false, &b, &nb);
    if (!rc)
        *out = na != nb || memcmp(a, b, na * sizeof(*a)) != 0;
    free(a);
    free(b);
    return rc;
}

static int fail_tokenize(int rc, struct ft_api_error *err) {
    if (rc == FT_ENOMEM)
        ft_api_error_set(err, 500, NULL, "server_error", "out of memory while tokenizing");
    else
        ft_api_error_set(err, 400, NULL, NULL, "the prompt cannot be tokenized: %s", ft_last_error());
    return -1;
}

int ft_chat_prompt_tokens(const struct ft_chat_template *tmpl, const struct ft_tokenizer *tok, const cJSON *ctx,
                          const char *real, size_t real_len, int32_t **ids, size_t *n_ids,
                          struct ft_api_error *err) {
    *ids = NULL;
    *n_ids = 0;
    cJSON *phctx = cJSON_Duplicate(ctx, true);
    struct collected cs = {NULL, 0};
    struct ft_text_span *spans = NULL;
    char *ph = NULL;
    size_t ph_len = 0;
    int result = -1, rc;
    if (!phctx || collect(phctx, &cs)) {
        ft_api_error_set(err, 500, NULL, "server_error", "out of memory");
        goto done;
    }
    for (int32_t k = 0; k < cs.n; k++) {
        char p[24];
        snprintf(p, sizeof(p), "%c%d%c", PH_OPEN, (int)k, PH_CLOSE);
        cs.c[k].text = cJSON_GetStringValue(cs.c[k].node); /* valid until replaced */
        cs.c[k].len = strlen(cs.c[k].text);
        cs.c[k].text = strndup(cs.c[k].text, cs.c[k].len);
        if (!cs.c[k].text || !cJSON_SetValuestring(cs.c[k].node, p)) {
            ft_api_error_set(err, 500, NULL, "server_error", "out of memory");
            goto done;
        }
    }
    spans = malloc(sizeof(*spans) * (size_t)(cs.n > 0 ? cs.n : 1));
    if (!spans) {
        ft_api_error_set(err, 500, NULL, "server_error", "out of memory");
        goto done;
    }
    ft_clear_error();
    const bool aligned = cs.n == 0 || (ft_chat_template_try_render_json(tmpl, phctx, &ph) == FT_OK &&
                                       (ph_len = strlen(ph), locate(ph, ph_len, &cs)) &&
                                       (rebuild_matches(ph, ph_len, &cs, false, real, real_len, spans) ||
                                        rebuild_matches(ph, ph_len, &cs, true, real, real_len, spans)));
    if (aligned) {
        if ((rc = ft_tokenize_spans(tok, real, real_len, false, spans, (size_t)cs.n, ids, n_ids)))
            fail_tokenize(rc, err);
        else
            result = 0;
        goto done;
    }
    /* The template transforms the contents: safe to tokenize whole only
     * when none of them holds special-token text. */
    for (int32_t k = 0; k < cs.n; k++) {
        bool special = false;
        if ((rc = has_special_text(tok, cs.c[k].text, cs.c[k].len, &special))) {
            fail_tokenize(rc, err);
            goto done;
        }
        if (special) {
            char param[48];
            snprintf(param, sizeof(param), "messages[%d].content", (int)cs.c[k].message);
            ft_api_error_set(err, 400, param, NULL,
                             "the message contains the text of a special token, and this chat template changes "
                             "message text in a way that cannot keep it apart from the template's own tokens; "
                             "remove it, or start the server with --special-tokens-in-messages");
            goto done;
        }
    }
    if ((rc = ft_tokenize(tok, real, real_len, false, true, ids, n_ids)))
        fail_tokenize(rc, err);
    else
        result = 0;
done:
    for (int32_t k = 0; k < cs.n; k++)
        free((char *)cs.c[k].text);
    free(cs.c);
    free(spans);
    free(ph);
    cJSON_Delete(phctx);
    return result;
}
