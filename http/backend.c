/* Model, chat template and scheduler for the server (http/backend.h). */
#include "backend.h"

#include "reasoning.h"
#include "chat_prompt.h"

#include "ft/common.h"
#include "ft/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TEMPLATE_FILE (1u << 20)

static void set_err(char *buf, size_t cap, const char *what) {
    const char *d = ft_last_error();
    if (d && *d)
        snprintf(buf, cap, "%s: %s", what, d);
    else
        snprintf(buf, cap, "%s", what);
}

static char *dup_piece(const struct ft_tokenizer *tok, int32_t id) {
    struct ft_str s = id >= 0 ? ft_tokenizer_piece_raw(tok, id) : (struct ft_str){"", 0};
    char *d = malloc(s.len + 1);
    if (d) {
        if (s.len)
            memcpy(d, s.s, s.len);
        d[s.len] = '\0';
    }
    return d;
}

/* The context per sequence and the number of parallel sequences: asked
 * for (or the model's context), such that the KV pool (every parallel
 * sequence at full context, plus the prefix cache's share) takes at most
 * half of the available memory. Without -c the model's context shrinks
 * first (down to 4096 tokens); then there are fewer parallel sequences;
 * the context shrinks further only when even one does not fit. Each cap
 * is logged. */
static bool choose_sizes(const struct ft_model *m, int32_t requested_ctx, int32_t parallel, int32_t *cache_mib,
                         int32_t *n_ctx_out, int32_t *parallel_out) {
    const struct ft_hparams *hp = ft_model_hparams(m);
    const double per_token = (double)ft_model_kv_bytes_per_token(m);
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double avail = (pages > 0 && page > 0) ? (double)pages * (double)page : 8.0 * (1 << 30);
    const double budget = avail * 0.5;
    double cache = (double)*cache_mib * (1 << 20);
    if (cache > budget * 0.5) {
        FT_LOG_W("prefix cache capped to %.0f MiB of KV: %d MiB asked, %.2f GiB available (choose with --cache-mib)",
                 budget * 0.5 / (1 << 20), (int)*cache_mib, avail / (1 << 30));
        *cache_mib = (int32_t)(budget * 0.5 / (1 << 20));
        cache = (double)*cache_mib * (1 << 20);
    }
    int32_t n_ctx = requested_ctx > 0 ? requested_ctx : (hp->n_ctx_train > 0 ? hp->n_ctx_train : 4096);
    const double per_block = per_token * FT_KV_BLOCK_TOKENS;
    /* Without -c, the asked-for parallelism wins over the model's (often
     * 128K) context: the context shrinks, but not below 4096 tokens (the
     * default of llama.cpp's server), so that every parallel sequence fits. */
    if (requested_ctx <= 0) {
        const int32_t floor_ctx = FT_MIN(n_ctx, 4096);
        const double blocks = (budget - cache) / (per_block * parallel) - 1; /* one for copy-on-write */
        const int32_t fit = blocks >= (double)n_ctx / FT_KV_BLOCK_TOKENS ? n_ctx
                                                                           : (int32_t)blocks * FT_KV_BLOCK_TOKENS;
        if (fit < n_ctx) {
            const int32_t c = FT_MAX(fit, floor_ctx);
            FT_LOG_W("context capped to %d tokens (the model's is %d) so that %d parallel requests fit in %.2f GiB "
                     "available (choose with -c and -np)",
                     (int)c, (int)n_ctx, (int)parallel, avail / (1 << 30));
            n_ctx = c;
        }
    }
    /* a sequence's share of the pool: its blocks plus one for copy-on-write */
    const double per_seq = per_block * ((n_ctx + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS + 1);
    if (per_seq * parallel + cache > budget) {
        const int32_t fit = (int32_t)((budget - cache) / per_seq);
        if (fit >= 1) {
            FT_LOG_W("parallel requests capped to %d: %d of %d tokens would need %.2f GiB of KV cache, %.2f GiB "
                     "available (choose with -np and -c)",
                     (int)fit, (int)parallel, (int)n_ctx, (per_seq * parallel + cache) / (1 << 30),
                     avail / (1 << 30));
            parallel = fit;
        } else {
            int32_t cap = (int32_t)((budget - cache) / per_token) - 2 * FT_KV_BLOCK_TOKENS;
            cap -= cap % FT_KV_BLOCK_TOKENS;
            if (cap < FT_KV_BLOCK_TOKENS)
                return false;
            FT_LOG_W("one request at a time, context capped to %d tokens: %d tokens would need %.2f GiB of KV "
                     "cache, %.2f GiB available (choose with -c)",
                     (int)cap, (int)n_ctx, (per_seq + cache) / (1 << 30), avail / (1 << 30));
            parallel = 1;
            n_ctx = cap;
        }
    }
    *n_ctx_out = n_ctx;
    *parallel_out = parallel;
    return true;
}

static char *read_small_file(const char *path, size_t *len, char *errbuf, size_t errcap) {
    FILE *f = fopen(path, "rb");
    if (!f && errno == ENOENT) {
        snprintf(errbuf, errcap,
                 "chat template %s: no such file, and no built-in template has that name "
                 "(" FT_CHAT_TEMPLATE_BUILTIN_NAMES ")",
                 path);
        return NULL;
    }
    if (!f) {
        snprintf(errbuf, errcap, "chat template %s: cannot open it (%s)", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(MAX_TEMPLATE_FILE + 1);
    size_t n = buf ? fread(buf, 1, MAX_TEMPLATE_FILE + 1, f) : 0;
    fclose(f);
    if (!buf || n > MAX_TEMPLATE_FILE) {
        snprintf(errbuf, errcap, "chat template %s: larger than %u bytes", path, MAX_TEMPLATE_FILE);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Render a system + user conversation once, so a template that the
 * interpreter cannot run fails at start-up rather than on the first
 * request. Templates that refuse a system role get a user-only try. */
static int trial_render(const struct ft_backend *b) {
    const struct ft_chat_message sys_user[] = {{"system", "You are a helpful assistant."}, {"user", "Hello!"}};
    char *out = NULL;
    int rc = ft_chat_template_render(b->tmpl, sys_user, 2, true, b->bos_text, b->eos_text, &out, NULL);
    if (rc == FT_EINVAL)
        rc = ft_chat_template_render(b->tmpl, sys_user + 1, 1, true, b->bos_text, b->eos_text, &out, NULL);
    free(out);
    return rc;
}

static int load_template(struct ft_backend *b, const struct ft_server_config *cfg, char *errbuf, size_t errcap) {
    int rc;
    char what[600];
    /* --chat-template names a file, or a built-in template when no file
     * has that name. */
    if (cfg->chat_template && access(cfg->chat_template, F_OK) != 0 &&
        ft_chat_template_builtin_exists(cfg->chat_template)) {
        FT_LOG_I("chat template: the built-in '%s' (--chat-template)", cfg->chat_template);
        rc = ft_chat_template_builtin(cfg->chat_template, &b->tmpl);
        snprintf(what, sizeof(what), "built-in chat template '%s'", cfg->chat_template);
    } else if (cfg->chat_template) {
        size_t len = 0;
        char *src = read_small_file(cfg->chat_template, &len, errbuf, errcap);
        if (!src)
            return FT_EIO;
        rc = ft_chat_template_parse(src, len, &b->tmpl);
        free(src);
        snprintf(what, sizeof(what), "chat template %s", cfg->chat_template);
    } else {
        struct ft_str src;
        if (ft_gguf_get_str(ft_model_gguf(b->model), "tokenizer.chat_template", &src) == FT_OK) {
            rc = ft_chat_template_parse(src.s, src.len, &b->tmpl);
            snprintf(what, sizeof(what), "the model's chat template (override it with --chat-template FILE|NAME)");
            FT_LOG_I("chat template: the model's tokenizer.chat_template");
        } else {
            /* Converters copy the template of instruction-tuned models,
             * so a GGUF without one is a base model: it continues text
             * and was never trained on turn markers. */
            FT_LOG_W("the model has no tokenizer.chat_template (a base model): chat messages are sent as plain "
                     "text; --chat-template NAME (" FT_CHAT_TEMPLATE_BUILTIN_NAMES ") picks a chat format");
            rc = ft_chat_template_builtin("plain", &b->tmpl);
            snprintf(what, sizeof(what), "built-in chat template 'plain'");
        }
    }
    if (rc) {
        char msg[700];
        snprintf(msg, sizeof(msg), "%s cannot be parsed", what);
        set_err(errbuf, errcap, msg);
        return rc;
    }
    ft_clear_error();
    if ((rc = trial_render(b))) {
        char msg[700];
        snprintf(msg, sizeof(msg), "%s cannot be rendered", what);
        set_err(errbuf, errcap, msg);
        return rc;
    }
    ft_chat_tool_caps_probe(b->tmpl, b->bos_text, b->eos_text, &b->tool_caps);
    size_t src_len = 0;
    const char *src = ft_chat_template_source(b->tmpl, &src_len);
    b->reasoning_syntax = ft_reasoning_syntax_detect(src, src_len);
    if (b->reasoning_syntax != FT_REASONING_SYNTAX_NONE)
        FT_LOG_I("reasoning: the template's syntax is %s (reasoning_content, --reasoning-format %s)",
                 ft_reasoning_syntax_name(b->reasoning_syntax), ft_reasoning_format_name(b->reasoning_format));
    ft_clear_error();
    return FT_OK;
}

int ft_backend_load(const struct ft_server_config *cfg, ft_event_fn on_event, void *ud, struct ft_backend **out,
                    char *errbuf, size_t errcap) {
    *out = NULL;
    errbuf[0] = '\0';
    struct ft_backend *b = calloc(1, sizeof(*b));
    if (!b) {
        snprintf(errbuf, errcap, "out of memory");
        return FT_ENOMEM;
    }
    ft_clear_error();
    struct ft_model_params mp = cfg->model;
    int rc = ft_model_load(cfg->model_path, &mp, &b->model);
    if (rc) {
        set_err(errbuf, errcap, cfg->model_path);
        goto fail;
    }
    b->tok = ft_model_tokenizer(b->model);
    b->n_vocab = ft_model_hparams(b->model)->n_vocab;
    b->special_in_messages = cfg->special_tokens_in_messages;
    b->reasoning_format = cfg->reasoning_format;
    b->bos_text = dup_piece(b->tok, ft_tokenizer_bos(b->tok));
    b->eos_text = dup_piece(b->tok, ft_tokenizer_eos(b->tok));
    if (!b->bos_text || !b->eos_text) {
        rc = FT_ENOMEM;
        snprintf(errbuf, errcap, "out of memory");
        goto fail;
    }
    if ((rc = load_template(b, cfg, errbuf, errcap)))
        goto fail;
    int32_t cache_mib = cfg->no_prefix_cache ? 0 : FT_MAX(cfg->cache_mib, 0);
    if (!choose_sizes(b->model, cfg->n_ctx, cfg->parallel > 0 ? cfg->parallel : 1, &cache_mib, &b->n_ctx,
                      &b->n_parallel)) {
        rc = FT_ENOMEM;
        snprintf(errbuf, errcap, "not enough memory for any KV cache");
        goto fail;
    }
    const struct ft_scheduler_params sp = {
        .n_ctx = b->n_ctx,
        .n_slots = b->n_parallel,
        .prefix_reuse = !cfg->no_prefix_cache,
        .n_batch = cfg->n_batch,
        .cache_mib = cache_mib,
        .max_queue = cfg->max_queue,
        .kv_events = cfg->kv_events,
        .on_event = on_event,
        .ud = ud,
    };
    ft_clear_error();
    if ((rc = ft_scheduler_new(b->model, &sp, &b->sched))) {
        set_err(errbuf, errcap, "starting the engine");
        goto fail;
    }
    *out = b;
    return FT_OK;
fail:
    ft_backend_free(b);
    return rc;
}

void ft_backend_free(struct ft_backend *b) {
    if (!b)
        return;
    ft_scheduler_free(b->sched);
    ft_chat_template_free(b->tmpl);
    free(b->bos_text);
    free(b->eos_text);
    ft_model_free(b->model);
    free(b);
}

static int tokenize_or_fail(const struct ft_backend *b, const char *text, size_t len, bool add_special,
                            int32_t **ids, size_t *n, struct ft_api_error *err) {
    ft_clear_error();
    int rc = ft_tokenize(b->tok, text, len, add_special, true, ids, n);
    if (rc == FT_ENOMEM) {
        ft_api_error_set(err, 500, NULL, "server_error", "out of memory while tokenizing");
        return -1;
    }
    if (rc) {
        ft_api_error_set(err, 400, NULL, NULL, "the prompt cannot be tokenized: %s",
                         ft_last_error());
        return -1;
    }
    return 0;
}

static int render_ctx(const struct ft_backend *b, const cJSON *ctx, char **text, size_t *len,
                      struct ft_api_error *err) {
    *text = NULL;
    *len = 0;
    ft_clear_error();
    int rc = ft_chat_template_render_json(b->tmpl, ctx, 0, text, len);
    if (rc == FT_ENOMEM) {
        ft_api_error_set(err, 500, NULL, "server_error", "out of memory while rendering the chat template");
        return -1;
    }
    if (rc) {
        /* raise_exception() in a template (roles that do not alternate, ...)
         * and resource bounds are the request's fault. */
        ft_api_error_set(err, 400, "messages", NULL, "the chat template rejected the messages: %s",
                         ft_last_error());
        return -1;
    }
    return 0;
}

int ft_backend_render_chat(const struct ft_backend *b, const struct ft_api_request *r, char **text, size_t *len,
                           struct ft_api_error *err) {
    cJSON *ctx = ft_chat_context_build(r, &b->tool_caps, b->bos_text, b->eos_text, err);
    if (!ctx || !ft_reasoning_context(ctx, r, b->reasoning_syntax)) {
        cJSON_Delete(ctx);
        if (ctx)
            ft_api_error_set(err, 500, NULL, "server_error", "out of memory");
        return -1;
    }
    const int rc = render_ctx(b, ctx, text, len, err);
    cJSON_Delete(ctx);
    return rc;
}

/* Control tokens come from the template only, unless the server was
 * started with --special-tokens-in-messages (the behaviour of llama-server
 * and vLLM: message text may hold them). */
static int render_chat(const struct ft_backend *b, struct ft_api_request *r, int32_t **ids, size_t *n,
                       struct ft_api_error *err) {
    cJSON *ctx = ft_chat_context_build(r, &b->tool_caps, b->bos_text, b->eos_text, err);
    if (!ctx || !ft_reasoning_context(ctx, r, b->reasoning_syntax)) {
        cJSON_Delete(ctx);
        if (ctx)
            ft_api_error_set(err, 500, NULL, "server_error", "out of memory");
        return -1;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = render_ctx(b, ctx, &text, &len, err);
    if (!rc) /* QwQ and R1 open <think> in the generation prompt */
        r->reasoning_opens = ft_reasoning_prompt_opens(b->reasoning_syntax, text, len);
    if (!rc)
        rc = b->special_in_messages ? tokenize_or_fail(b, text, len, false, ids, n, err)
                                    : ft_chat_prompt_tokens(b->tmpl, b->tok, ctx, text, len, ids, n, err);
    cJSON_Delete(ctx);
    free(text);
    if (rc)
        return -1;
    /* Templates usually write bos_token themselves; add BOS only when the
     * vocabulary wants one and the template did not. */
    const int32_t bos = ft_tokenizer_bos(b->tok);
    if (ft_tokenizer_add_bos(b->tok) && bos >= 0 && (*n == 0 || (*ids)[0] != bos)) {
        int32_t *p = realloc(*ids, sizeof(int32_t) * (*n + 1));
        if (!p) {
            ft_api_error_set(err, 500, NULL, "server_error", "out of memory");
            return -1;
        }
        memmove(p + 1, p, sizeof(int32_t) * *n);
        p[0] = bos;
        *ids = p;
        (*n)++;
    }
    return 0;
}

/* The prompt tokens for a parsed request: the chat template rendered and
 * tokenized, or the completion prompt (text tokenized, or token ids).
 * *out is malloc'd. */
static int prompt_tokens(const struct ft_backend *b, struct ft_api_request *r, int32_t **out, int32_t *n_out,
                         struct ft_api_error *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    *out = NULL;
    *n_out = 0;
    if (r->endpoint == FT_API_CHAT) {
        if (render_chat(b, r, &ids, &n, err))
            goto fail;
    } else if (r->prompt) {
        if (tokenize_or_fail(b, r->prompt, strlen(r->prompt), true, &ids, &n, err))
            goto fail;
    } else {
        n = (size_t)r->n_prompt_tokens;
        if (!(ids = malloc(sizeof(int32_t) * (n ? n : 1)))) {
            ft_api_error_set(err, 500, NULL, "server_error", "out of memory");
            goto fail;
        }
        if (n)
            memcpy(ids, r->prompt_tokens, sizeof(int32_t) * n);
    }
    if (n == 0) {
        ft_api_error_set(err, 400, r->endpoint == FT_API_CHAT ? "messages" : "prompt", NULL,
                         "the prompt is empty");
        goto fail;
    }
    if (n >= (size_t)b->n_ctx) {
        ft_api_error_set(err, 400, r->endpoint == FT_API_CHAT ? "messages" : "prompt", "context_length_exceeded",
                         "the prompt has %zu tokens but the context holds %d tokens (at least one must be left "
                         "for the completion; start the server with a larger -c)",
                         n, (int)b->n_ctx);
        goto fail;
    }
    *out = ids;
    *n_out = (int32_t)n;
    return 0;
fail:
    free(ids);
    return -1;
}

int ft_backend_engine_request(const struct ft_backend *b, struct ft_api_request *api, uint64_t seed,
                              struct ft_request *er, int32_t **prompt, struct ft_api_error *err) {
    *prompt = NULL;
    /* The checks in the order clients have always seen them: n, then what
     * needs the tokenizer (logit_bias text keys) or the template's format
     * (forced or strict tool calls), then the prompt. */
    if (api->n > FT_MIN(b->n_parallel, FT_MAX_CHOICES)) {
        ft_api_error_set(err, 400, "n", NULL,
                         "'n' is %d but this server generates at most %d sequences at once (-np %d): each choice "
                         "needs one",
                         (int)api->n, (int)FT_MIN(b->n_parallel, FT_MAX_CHOICES), (int)b->n_parallel);
        return -1;
    }
    if (ft_api_logit_bias_resolve(api, b->tok, err) ||
        (api->endpoint == FT_API_CHAT && ft_api_tools_grammar(api, b->tool_caps.format, err)))
        return -1;
    if (prompt_tokens(b, api, prompt, &er->n_prompt, err))
        return -1;
    if (api->endpoint == FT_API_CHAT && ft_chat_tools_active(api) && (api->n > 1 || api->logprobs)) {
        /* Tool calls are parsed from one answer, and their chunks carry no
         * log-probabilities: refused rather than dropped. */
        ft_api_error_set(err, 400, api->n > 1 ? "n" : "logprobs", NULL, "%s",
                         api->n > 1 ? "'n' greater than 1 is not supported together with 'tools'"
                                    : "'logprobs' is not supported together with 'tools'");
        free(*prompt);
        *prompt = NULL;
        er->n_prompt = 0;
        return -1;
    }
    er->prompt = *prompt;
    er->n_choices = api->n;
    /* Borrowed from api: the stop strings, the grammar, the logit biases
     * (through sampling). */
    struct ft_gen_params *p = &er->params;
    memset(p, 0, sizeof(*p));
    p->sampling = api->sampling;
    if (!api->seed_set)
        p->sampling.seed = seed;
    p->max_tokens = api->max_tokens;
    p->ignore_eos = api->ignore_eos;
    p->stops = (const char *const *)api->stops;
    p->n_stops = api->n_stops;
    p->logprobs = api->logprobs;
    p->top_logprobs = api->top_logprobs;
    p->grammar = api->grammar;
    p->grammar_trigger = api->grammar_trigger;
    p->grammar_trigger_at_start = api->grammar_trigger_at_start;
    p->min_tokens = api->min_tokens;
    return 0;
}
