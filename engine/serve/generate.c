/* One completion: sampling, streaming text and limits per sequence, and the
 * single-sequence driver (include/ft/generate.h). */
#include "ft/generate.h"

#include "ft/clock.h"
#include "ft/common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *ft_finish_reason_name(enum ft_finish_reason r) {
    switch (r) {
    case FT_FINISH_STOP: return "stop";
    case FT_FINISH_LENGTH: return "length";
    case FT_FINISH_CANCELLED: return "cancelled";
    case FT_FINISH_ERROR: return "error";
    default: return "none";
    }
}

int ft_gen_init(struct ft_gen *g, const struct ft_tokenizer *tok, int32_t n_vocab, int32_t n_ctx,
                const struct ft_gen_params *p) {
    memset(g, 0, sizeof(*g));
    g->tok = tok;
    g->max_tokens = p->max_tokens;
    g->n_ctx = n_ctx;
    g->ignore_eos = p->ignore_eos;
    g->logprobs = p->logprobs;
    g->top_logprobs = FT_MAX(0, FT_MIN(p->top_logprobs, FT_MAX_TOP_LOGPROBS));
    g->n_vocab = n_vocab;
    ft_request_timing_init(&g->timing);
    ft_stop_init(&g->stop, p->stops, p->n_stops);
    /* A generated stream keeps the first piece's leading space. */
    ft_detok_init(&g->detok, tok, false);
    int rc = ft_sampler_new(&p->sampling, n_vocab, &g->sampler);
    if (rc)
        return rc;
    if (p->grammar) {
        if (!p->grammar_vocab || ft_grammar_vocab_n_tokens(p->grammar_vocab) != n_vocab) {
            ft_gen_free(g);
            FT_LOG_E("a grammar needs the token trie of this model's %d-token vocabulary", (int)n_vocab);
            return FT_EINVAL;
        }
        if ((rc = ft_grammar_matcher_new(p->grammar, p->grammar_vocab, &g->grammar))) {
            ft_gen_free(g);
            return rc;
        }
        g->grammar_on = !p->grammar_trigger || !p->grammar_trigger[0];
        g->trigger = g->grammar_on ? NULL : p->grammar_trigger;
        g->trigger_at_start = p->grammar_trigger_at_start;
    }
    g->min_tokens = FT_MAX(0, p->min_tokens);
    if ((g->grammar || g->min_tokens > 0) && !(g->masked = malloc(sizeof(float) * (size_t)n_vocab))) {
        ft_gen_free(g);
        FT_LOG_E("out of memory");
        return FT_ENOMEM;
    }
    g->out_cap = 512;
    if (!(g->out = malloc(g->out_cap))) {
        ft_gen_free(g);
        FT_LOG_E("out of memory");
        return FT_ENOMEM;
    }
    g->out[0] = '\0';
    return FT_OK;
}

void ft_gen_free(struct ft_gen *g) {
    if (!g)
        return;
    ft_sampler_free(g->sampler);
    g->sampler = NULL;
    ft_grammar_matcher_free(g->grammar);
    g->grammar = NULL;
    free(g->masked);
    g->masked = NULL;
    free(g->watch);
    g->watch = NULL;
    g->watch_len = g->watch_cap = 0;
    ft_stop_free(&g->stop);
    g->stop.buf = NULL;
    ft_request_timing_free(&g->timing);
    free(g->tokens);
    g->tokens = NULL;
    free(g->out);
    g->out = NULL;
}

void ft_gen_accept_prompt(struct ft_gen *g, const int32_t *tokens, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        ft_sampler_accept(g->sampler, tokens[i]);
}

static int out_append(struct ft_gen *g, const char *s, size_t n) {
    if (!n)
        return FT_OK;
    if (g->out_len + n + 1 > g->out_cap) {
        size_t cap = g->out_cap;
        while (cap < g->out_len + n + 1)
            cap *= 2;
        char *p = realloc(g->out, cap);
        if (!p)
            return FT_ENOMEM;
        g->out = p;
        g->out_cap = cap;
    }
    memcpy(g->out + g->out_len, s, n);
    g->out_len += n;
    g->out[g->out_len] = '\0';
    return FT_OK;
}

/* Text through the stop matcher into g->out; sets finish on a match.
 * Before min_tokens the text bypasses the matcher, as vLLM checks stop
 * strings only from the min_tokens-th token on. */
static int release(struct ft_gen *g, const char *s, size_t n) {
    if (g->n_tokens < g->min_tokens)
        return out_append(g, s, n);
    const char *o;
    size_t ol;
    if (ft_stop_push(&g->stop, s, n, &o, &ol))
        return FT_ENOMEM;
    int rc = out_append(g, o, ol);
    if (g->stop.stopped)
        g->finish = FT_FINISH_STOP;
    return rc;
}

/* End of generation: whatever the detokenizer and the stop matcher hold. */
static int flush(struct ft_gen *g) {
    char piece[8];
    int nb = ft_detok_flush(&g->detok, piece, sizeof(piece));
    if (nb > 0) {
        int rc = release(g, piece, (size_t)nb);
        if (rc)
            return rc;
    }
    if (g->stop.stopped)
        return FT_OK;
    const char *o;
    size_t ol;
    ft_stop_flush(&g->stop, &o, &ol);
    return out_append(g, o, ol);
}

static int push_token(struct ft_gen *g, int32_t t) {
    if (g->n_tokens == g->cap_tokens) {
        int32_t cap = g->cap_tokens ? g->cap_tokens * 2 : 64;
        int32_t *p = realloc(g->tokens, sizeof(int32_t) * (size_t)cap);
        if (!p)
            return FT_ENOMEM;
        g->tokens = p;
        g->cap_tokens = cap;
    }
    g->tokens[g->n_tokens++] = t;
    return FT_OK;
}

static int detok_release(struct ft_gen *g, int32_t t) {
    char small[256];
    int nb = ft_detok_push(&g->detok, t, small, sizeof(small));
    if (nb >= 0)
        return nb ? release(g, small, (size_t)nb) : FT_OK;
    if (nb != FT_ERANGE)
        return nb;
    /* A piece longer than any valid-UTF-8 token of the supported
     * vocabularies: the documented bound always suffices. */
    size_t cap = 3 * (ft_tokenizer_max_piece_len(g->tok) + 3);
    char *big = malloc(cap);
    if (!big)
        return FT_ENOMEM;
    nb = ft_detok_push(&g->detok, t, big, cap);
    int rc = nb > 0 ? release(g, big, (size_t)nb) : nb;
    free(big);
    return rc;
}

/* Start a lazy grammar on text[0..n) (from its trigger on). Text the
 * grammar rejects gives up: the answer goes on unconstrained (a call in it
 * is then not well-formed, and the tool parser returns it as content). */
static int trigger_grammar(struct ft_gen *g, const char *text, size_t n) {
    g->trigger = NULL;
    g->watch_len = 0;
    int rc = ft_grammar_matcher_accept_bytes(g->grammar, text, n);
    if (rc == FT_OK)
        g->grammar_on = true;
    return rc == FT_EINVAL ? FT_OK : rc;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* A lazy grammar: look for the trigger in the text so far, token t added.
 * Only the last strlen(trigger) - 1 bytes before t can start a match, so
 * the watch window stays that short (anchored triggers: the answer's first
 * non-whitespace bytes, so at most the trigger's length). */
static int watch_trigger(struct ft_gen *g, int32_t t) {
    if (ft_tokenizer_is_eog(g->tok, t))
        return FT_OK;
    const size_t k = strlen(g->trigger);
    char small[256];
    int n = ft_token_to_piece(g->tok, t, false, small, sizeof(small));
    if (n < 0)
        return n;
    const size_t need = g->watch_len + (size_t)n + 1;
    if (need > g->watch_cap) {
        char *w = realloc(g->watch, need);
        if (!w)
            return FT_ENOMEM;
        g->watch = w;
        g->watch_cap = need;
    }
    if ((size_t)n < sizeof(small))
        memcpy(g->watch + g->watch_len, small, (size_t)n);
    else if (ft_token_to_piece(g->tok, t, false, g->watch + g->watch_len, (size_t)n + 1) != n)
        return FT_EINVAL;
    g->watch_len += (size_t)n;
    if (g->trigger_at_start) {
        size_t i = 0;
        while (i < g->watch_len && is_space(g->watch[i]))
            i++;
        const size_t rest = g->watch_len - i;
        if (rest == 0) {
            g->watch_len = 0;
            return FT_OK;
        }
        if (rest >= k && memcmp(g->watch + i, g->trigger, k) == 0)
            return trigger_grammar(g, g->watch + i, rest);
        if (rest < k && memcmp(g->watch + i, g->trigger, rest) == 0)
            return FT_OK; /* may still become the trigger */
        g->trigger = NULL;  /* the answer starts otherwise: no call */
        return FT_OK;
    }
    for (size_t i = 0; i + k <= g->watch_len; i++)
        if (memcmp(g->watch + i, g->trigger, k) == 0)
            return trigger_grammar(g, g->watch + i, g->watch_len - i);
    if (g->watch_len >= k) {
        memmove(g->watch, g->watch + g->watch_len - (k - 1), k - 1);
        g->watch_len = k - 1;
    }
    return FT_OK;
}

int ft_gen_step(struct ft_gen *g, const float *logits) {
    g->out_len = 0;
    g->out[0] = '\0';
    if (g->finish)
        return FT_OK;
    int rc;
    const float *raw = logits; /* logprobs are the model's, before the grammar's mask */
    const bool early = g->n_tokens < g->min_tokens && !g->ignore_eos;
    if ((g->grammar && g->grammar_on) || early)
        memcpy(g->masked, logits, sizeof(float) * (size_t)g->n_vocab);
    if (g->grammar && g->grammar_on) {
        /* mask, sample among what the grammar allows, advance it */
        int32_t n_allowed = 0;
        if ((rc = ft_grammar_matcher_apply(g->grammar, g->masked, &n_allowed)))
            goto grammar_error;
        if (n_allowed == 0) {
            /* no token of this vocabulary continues the grammar */
            g->finish = FT_FINISH_STOP;
            return flush(g);
        }
    }
    if (early) {
        /* min_tokens: no end of generation yet, unless it is all the
         * grammar allows */
        const int32_t *eog;
        const size_t n_eog = ft_tokenizer_eog_ids(g->tok, &eog);
        bool other = !(g->grammar && g->grammar_on);
        for (int32_t i = 0; !other && i < g->n_vocab; i++)
            other = g->masked[i] != -INFINITY && !ft_tokenizer_is_eog(g->tok, i);
        for (size_t i = 0; other && i < n_eog; i++)
            if (eog[i] >= 0 && eog[i] < g->n_vocab)
                g->masked[eog[i]] = -INFINITY;
    }
    if ((g->grammar && g->grammar_on) || early)
        logits = g->masked;
    const int32_t t = ft_sampler_sample(g->sampler, logits);
    if (g->logprobs) /* only when asked: two passes over the vocabulary */
        ft_logprobs_compute(raw, g->n_vocab, t, g->top_logprobs, &g->lp);
    if (g->grammar && g->grammar_on && (rc = ft_grammar_matcher_accept_token(g->grammar, t)))
        goto grammar_error;
    if (g->grammar && !g->grammar_on && g->trigger && (rc = watch_trigger(g, t)))
        goto grammar_error;
    if ((rc = ft_request_timing_token(&g->timing, ft_clock_ticks())) || (rc = push_token(g, t)))
        goto oom;
    ft_sampler_accept(g->sampler, t);
    if (!g->ignore_eos && ft_tokenizer_is_eog(g->tok, t)) {
        g->finish = FT_FINISH_STOP;
    } else {
        if ((rc = detok_release(g, t)))
            goto oom;
        if (!g->finish && g->grammar && g->grammar_on && ft_grammar_matcher_done(g->grammar))
            g->finish = FT_FINISH_STOP; /* the grammar is complete and nothing may follow */
        if (!g->finish && ((g->max_tokens > 0 && g->n_tokens >= g->max_tokens) || g->n_past >= g->n_ctx))
            g->finish = FT_FINISH_LENGTH;
    }
    if (g->finish && (rc = flush(g)))
        goto oom;
    return FT_OK;
oom:
    FT_LOG_E("out of memory after %d generated tokens", (int)g->n_tokens);
    return rc;
grammar_error:
    /* too ambiguous, out of memory, or a sampled token the mask allowed but
     * the matcher refused (a bug): the request ends in an error */
    FT_LOG_E("grammar matcher failed after %d generated tokens: %s", (int)g->n_tokens, ft_strerror(rc));
    return rc;
}

int ft_generate(struct ft_model *m, struct ft_kv_cache *kv, int32_t seq, const int32_t *prompt,
                int32_t n_prompt, int32_t n_batch, float *logits, struct ft_gen *g, ft_gen_step_fn on_step,
                void *ud) {
    const int32_t n_cached = ft_kv_cache_seq_len(kv, seq);
    if (n_prompt <= 0 || n_cached >= n_prompt || n_batch <= 0) {
        FT_LOG_E("bad arguments: %d prompt tokens, %d cached, batch %d", (int)n_prompt, (int)n_cached,
                 (int)n_batch);
        g->finish = FT_FINISH_ERROR;
        return FT_EINVAL;
    }
    if (n_batch > FT_MAX_BATCH)
        n_batch = FT_MAX_BATCH;
    const int32_t chunk = FT_MIN(n_batch, n_prompt - n_cached);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)chunk);
    int32_t *seqs = malloc(sizeof(int32_t) * (size_t)chunk);
    bool *none = calloc((size_t)chunk, sizeof(bool)); /* no logits for inner chunks */
    int rc = FT_ENOMEM;
    if (!pos || !seqs || !none) {
        FT_LOG_E("out of memory");
        goto done;
    }
    for (int32_t i = 0; i < chunk; i++)
        seqs[i] = seq;
    g->timing.prompt_tokens = n_prompt;
    g->timing.cached_prompt_tokens = n_cached;
    g->n_past = n_cached;

    /* Prefill: logits only for the prompt's last token (want_logits NULL
     * asks for the last entry of the last chunk). */
    g->timing.prefill_start = ft_clock_ticks();
    while (g->n_past < n_prompt) {
        const int32_t nb = FT_MIN(chunk, n_prompt - g->n_past);
        for (int32_t i = 0; i < nb; i++)
            pos[i] = g->n_past + i;
        const bool last = g->n_past + nb == n_prompt;
        struct ft_batch b = {
            .n_tokens = nb, .token = prompt + g->n_past, .pos = pos, .seq_id = seqs, .want_logits = last ? NULL : none};
        if ((rc = ft_model_forward(m, kv, &b, last ? logits : NULL)))
            goto done;
        g->n_past += nb;
    }
    g->timing.prefill_end = ft_clock_ticks();

    for (;;) {
        if ((rc = ft_gen_step(g, logits)))
            goto done;
        if (on_step && on_step(ud, g) && !g->finish) {
            g->finish = FT_FINISH_CANCELLED;
            break;
        }
        if (g->finish)
            break;
        struct ft_batch b = {.n_tokens = 1, .token = &g->tokens[g->n_tokens - 1], .pos = &g->n_past, .seq_id = &seq};
        if ((rc = ft_model_forward(m, kv, &b, logits)))
            goto done;
        g->n_past++;
    }
    rc = FT_OK;
done:
    if (rc)
        g->finish = FT_FINISH_ERROR;
    free(pos);
    free(seqs);
    free(none);
    return rc;
}
