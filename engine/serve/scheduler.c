/* The scheduler thread (engine/include/ft/scheduler.h): continuous batching over
 * n_slots sequences on a shared KV block pool with the prefix cache.
 *
 * Slot i runs on KV sequence i; a request with n choices holds n slots.
 * Choice 0 prefills the prompt; when its first logits are ready, the other
 * choices' sequences attach the prompt's KV blocks (ft_prefix_cache_fork:
 * shared, the partly filled last block copied on the first write) and
 * sample their first token from the same logits row. A failed or cancelled
 * request ends all its choices at once. Each step: cancelled requests leave,
 * queued ones join while slots are free, then one forward pass evaluates
 * the pending token of every decoding sequence and prompt chunks of the
 * prefilling ones (oldest admission first) up to n_batch tokens; each
 * sequence that got logits samples through its struct ft_gen (the same
 * per-request logic `ft run` uses). Requests finish as soon as their step
 * says so; the others go on at the next step.
 *
 * Locking: `lock` guards the queue and `stop`; everything else the thread
 * touches (model, KV cache, prefix cache, slots, batch) is its own.
 * Statistics are atomics so the HTTP thread can read them for /metrics
 * without a lock. */
#include "ft/scheduler.h"

#include "ft/clock.h"
#include "ft/common.h"
#include "ft/kv_events.h"
#include "ft/prefix_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SLOTS 1024

struct slot {
    struct ft_request *r; /* NULL: free */
    int32_t choice;       /* of r */
    bool wait_fork;       /* a choice > 0 waiting for choice 0's prefill */
    struct ft_gen g;      /* g.n_past: tokens whose KV the sequence holds */
    uint64_t order;       /* admission number: prefill is first come, first served */
    const int32_t *prompt; /* r->prompt, or the embeddings input's tokens */
    int32_t n_prompt;
    int32_t input;        /* embeddings: the input this slot runs; -1 for a generation */
    int32_t chunk;        /* prompt tokens in the current step */
    int32_t row;          /* logits row in the current step, -1: none */
    int32_t erow, n_erows; /* embeddings: its hidden-state rows in the current step */
};

struct ft_scheduler {
    struct ft_model *m;
    struct ft_kv_cache *kv;
    struct ft_prefix_cache *pc;
    struct ft_scheduler_params p;
    int32_t n_vocab;
    struct slot *slots;
    int32_t n_running;  /* slots in use */
    int32_t n_requests; /* requests running */
    uint64_t n_admitted;
    /* the step's batch */
    float *logits; /* n_slots rows */
    int32_t *b_token, *b_pos, *b_seq;
    bool *b_want, *b_want_embd;
    int32_t n_embd;
    float *embd;      /* n_batch rows of n_embd: the step's hidden states */
    double *embd_sum; /* n_slots rows of n_embd: each embeddings slot's pooled sum so far */
    /* Embeddings requests admitted with inputs not started yet, first come
     * first served (linked by next); they get free slots before the queue. */
    struct ft_request *embd_head;
    int32_t *prefill_order; /* n_slots */
    struct ft_grammar_vocab *gvocab; /* token trie, built at the first request with a grammar */

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct ft_request *head, *tail; /* queue */
    int32_t n_queued;
    bool stop;

    atomic_int running;
    atomic_int waiting;
    atomic_int kv_used_blocks;
};

static void set_error(struct ft_request *r, int rc, const char *what) {
    r->error = rc;
    const char *detail = ft_last_error();
    snprintf(r->error_msg, sizeof(r->error_msg), "%s: %s", what, detail && *detail ? detail : ft_strerror(rc));
}

static void publish_kv_usage(struct ft_scheduler *s) {
    atomic_store(&s->kv_used_blocks, ft_kv_cache_blocks_total(s->kv) - ft_kv_cache_blocks_free(s->kv));
}

/* Stamp, compute the metrics and hand the request back. The last thing
 * done with r: the owner may free it during the callback. */
static void report_done(struct ft_scheduler *s, struct ft_request *r) {
    r->timing.done = ft_clock_ticks();
    ft_metrics_compute(&r->timing, &r->metrics);
    s->p.on_event(s->p.ud, r, FT_EVENT_DONE, NULL, 0);
}

/* The request's record from its choices' (moved): choice 0's stamps of
 * the prompt, and every choice's token stamps one after the other. */
static void merge_timing(struct ft_request *r, int32_t n) {
    r->timing = r->choice_timing[0];
    memset(&r->choice_timing[0], 0, sizeof(r->choice_timing[0]));
    if (n <= 1)
        return;
    int32_t total = 0;
    for (int32_t c = 0; c < n; c++)
        total += c ? r->choice_timing[c].n_tokens : r->timing.n_tokens;
    uint64_t *all = malloc(sizeof(uint64_t) * (size_t)FT_MAX(total, 1));
    if (!all) {
        FT_LOG_E("out of memory: the metrics keep choice 0's tokens only");
    } else {
        int32_t at = r->timing.n_tokens;
        if (at)
            memcpy(all, r->timing.token_ready, sizeof(uint64_t) * (size_t)at);
        r->timing.choice_tokens[0] = at;
        for (int32_t c = 1; c < n; c++) {
            const struct ft_request_timing *t = &r->choice_timing[c];
            if (t->n_tokens)
                memcpy(all + at, t->token_ready, sizeof(uint64_t) * (size_t)t->n_tokens);
            r->timing.choice_tokens[c] = t->n_tokens;
            at += t->n_tokens;
        }
        free(r->timing.token_ready);
        r->timing.token_ready = all;
        r->timing.n_tokens = r->timing.cap_tokens = total;
        r->timing.n_choices = n;
    }
    for (int32_t c = 1; c < n; c++)
        ft_request_timing_free(&r->choice_timing[c]);
}

/* Slot i leaves: its KV goes to the prefix cache (unless it failed), its
 * record to the request. reason overrides g.finish when not NONE. When it
 * was the request's last choice, the request is reported DONE (and may be
 * freed). Embeddings slots end in finish_embd_slot(). */
static void finish_embd_slot(struct ft_scheduler *s, int32_t i, enum ft_finish_reason reason);

static void finish_slot(struct ft_scheduler *s, int32_t i, enum ft_finish_reason reason) {
    struct slot *sl = &s->slots[i];
    if (sl->input >= 0) {
        finish_embd_slot(s, i, reason);
        return;
    }
    struct ft_request *r = sl->r;
    struct ft_gen *g = &sl->g;
    if (reason != FT_FINISH_NONE)
        g->finish = reason;
    if (g->finish == FT_FINISH_ERROR || sl->wait_fork) {
        ft_prefix_cache_release(s->pc, i, NULL, 0, NULL, 0);
    } else {
        /* The last sampled token was never evaluated: the KV holds the
         * prompt (or the part of it prefilled) and the tokens before it. */
        const int32_t na = FT_MIN(g->n_past, r->n_prompt), nb = FT_MAX(0, g->n_past - r->n_prompt);
        ft_prefix_cache_release(s->pc, i, r->prompt, na, g->tokens, nb);
    }
    const int32_t c = sl->choice;
    r->choice_finish[c] = g->finish;
    r->choice_timing[c] = g->timing; /* moved: the request owns the stamps now */
    memset(&g->timing, 0, sizeof(g->timing));
    ft_gen_free(g);
    sl->r = NULL;
    sl->wait_fork = false;
    s->n_running--;
    publish_kv_usage(s);
    if (--r->choices_left > 0)
        return;
    const int32_t n = FT_MAX(r->n_choices, 1);
    r->finish = r->choice_finish[0];
    for (int32_t k = 0; k < n; k++) {
        if (r->choice_finish[k] == FT_FINISH_ERROR)
            r->finish = FT_FINISH_ERROR;
        else if (r->choice_finish[k] == FT_FINISH_CANCELLED && r->finish != FT_FINISH_ERROR)
            r->finish = FT_FINISH_CANCELLED;
    }
    merge_timing(r, n);
    s->n_requests--;
    /* Not running any more by the time the owner hears DONE. */
    atomic_store(&s->running, s->n_requests);
    report_done(s, r);
}

/* A failed or cancelled request ends as a whole: every choice it still runs. */
static void finish_request(struct ft_scheduler *s, struct ft_request *r, enum ft_finish_reason reason) {
    int32_t idx[FT_MAX_CHOICES], n = 0;
    for (int32_t i = 0; i < s->p.n_slots && n < FT_MAX_CHOICES; i++)
        if (s->slots[i].r == r)
            idx[n++] = i;
    for (int32_t k = 0; k < n; k++)
        finish_slot(s, idx[k], reason); /* the last one may free r */
}

static void embd_admit(struct ft_scheduler *s, struct ft_request *r);

/* r's choices take n free slots (the caller checked there are); an
 * embeddings request waits for slots in embd_fill(). */
static void admit(struct ft_scheduler *s, struct ft_request *r) {
    if (r->embd) {
        embd_admit(s, r);
        return;
    }
    const int32_t n = FT_MAX(r->n_choices, 1);
    const uint64_t now = ft_clock_ticks();
    r->choices_left = n;
    s->n_requests++;
    atomic_store(&s->running, s->n_requests);
    int32_t i = 0, rc = FT_OK;
    if (r->params.grammar && !s->gvocab) {
        const uint64_t t0 = ft_clock_ticks();
        ft_clear_error();
        if ((rc = ft_grammar_vocab_new(ft_model_tokenizer(s->m), &s->gvocab)) == FT_OK)
            FT_LOG_I("token trie for grammars: %d tokens, %zu nodes, %.1f MiB, built in %.1f ms",
                     (int)ft_grammar_vocab_n_tokens(s->gvocab), ft_grammar_vocab_n_nodes(s->gvocab),
                     (double)ft_grammar_vocab_bytes(s->gvocab) / (1 << 20),
                     ft_clock_ticks_to_ms(ft_clock_ticks() - t0));
        else
            set_error(r, rc, "cannot build the token trie for the grammar");
    }
    for (int32_t c = 0; c < n; c++) {
        while (s->slots[i].r)
            i++;
        struct slot *sl = &s->slots[i];
        sl->r = r;
        sl->prompt = r->prompt;
        sl->n_prompt = r->n_prompt;
        sl->input = -1;
        sl->choice = c;
        sl->wait_fork = c > 0;
        sl->order = ++s->n_admitted;
        s->n_running++;
        struct ft_gen_params gp = r->params; /* the request's stay read-only */
        gp.sampling.seed += (uint64_t)c;     /* choice c: seed + c, reproducible */
        if (gp.grammar)
            gp.grammar_vocab = s->gvocab;
        ft_clear_error();
        if (rc) /* no trie: the slot ends with the request, its state empty */
            memset(&sl->g, 0, sizeof(sl->g));
        const int grc = rc ? rc : ft_gen_init(&sl->g, ft_model_tokenizer(s->m), s->n_vocab, s->p.n_ctx, &gp);
        sl->g.timing.received = r->received;
        sl->g.timing.admitted = now;
        sl->g.timing.prompt_tokens = r->n_prompt;
        if (grc && !rc) {
            rc = grc;
            set_error(r, rc, "bad sampling parameters or grammar");
        }
        if (!grc)
            ft_gen_accept_prompt(&sl->g, r->prompt, r->n_prompt);
        if (c == 0 && !grc) {
            const int32_t cached = ft_prefix_cache_attach(s->pc, i, r->prompt, r->n_prompt);
            sl->g.timing.cached_prompt_tokens = cached;
            sl->g.n_past = cached;
        }
    }
    if (rc)
        finish_request(s, r, FT_FINISH_ERROR);
    publish_kv_usage(s);
}

static void add_token(struct ft_scheduler *s, int32_t *n, int32_t *n_rows, int32_t seq, int32_t token, int32_t pos,
                      bool want) {
    s->b_token[*n] = token;
    s->b_pos[*n] = pos;
    s->b_seq[*n] = seq;
    s->b_want[*n] = want;
    s->b_want_embd[*n] = false;
    (*n)++;
    if (want)
        s->slots[seq].row = (*n_rows)++;
}

/* An embeddings input's token: it wants its hidden state when the pooling
 * reads it. */
static void add_embd_token(struct ft_scheduler *s, int32_t *n, int32_t *n_erows, int32_t seq, int32_t pos) {
    struct slot *sl = &s->slots[seq];
    const enum ft_pooling pool = sl->r->embd->pooling;
    const bool want = pool == FT_POOLING_MEAN || (pool == FT_POOLING_CLS && pos == 0) ||
                      (pool == FT_POOLING_LAST && pos == sl->n_prompt - 1);
    s->b_token[*n] = sl->prompt[pos];
    s->b_pos[*n] = pos;
    s->b_seq[*n] = seq;
    s->b_want[*n] = false;
    s->b_want_embd[*n] = want;
    (*n)++;
    if (want && sl->n_erows++ == 0)
        sl->erow = *n_erows;
    *n_erows += want;
}

/* Build the step's batch: decode tokens first, then prompt chunks. */
static int32_t build_batch(struct ft_scheduler *s) {
    int32_t n = 0, n_rows = 0, n_erows = 0, n_prefill = 0;
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        struct slot *sl = &s->slots[i];
        sl->chunk = 0;
        sl->row = -1;
        sl->n_erows = 0;
        if (!sl->r || sl->wait_fork)
            continue;
        if (sl->g.n_past >= sl->n_prompt)
            add_token(s, &n, &n_rows, i, sl->g.tokens[sl->g.n_tokens - 1], sl->g.n_past, true);
        else {
            /* insertion by admission order */
            int32_t j = n_prefill++;
            while (j > 0 && s->slots[s->prefill_order[j - 1]].order > sl->order) {
                s->prefill_order[j] = s->prefill_order[j - 1];
                j--;
            }
            s->prefill_order[j] = i;
        }
    }
    /* Decoding sequences never wait; prefill gets the rest of the step,
     * at least one token so it always advances. */
    int32_t budget = s->p.n_batch > n ? s->p.n_batch - n : 1;
    budget = FT_MIN(budget, FT_MAX_BATCH - n);
    for (int32_t k = 0; k < n_prefill && budget > 0; k++) {
        const int32_t i = s->prefill_order[k];
        struct slot *sl = &s->slots[i];
        const int32_t take = FT_MIN(sl->n_prompt - sl->g.n_past, budget);
        for (int32_t j = 0; j < take; j++) {
            const int32_t pos = sl->g.n_past + j;
            if (sl->input >= 0)
                add_embd_token(s, &n, &n_erows, i, pos);
            else
                add_token(s, &n, &n_rows, i, sl->prompt[pos], pos, pos == sl->n_prompt - 1);
        }
        sl->chunk = take;
        budget -= take;
    }
    return n;
}

/* ---- embeddings --------------------------------------------------------------- */

static bool embd_stopped(const struct ft_request *r) {
    return r->finish == FT_FINISH_ERROR || atomic_load_explicit(&r->cancel, memory_order_relaxed);
}

/* The request's last input is done (or it stopped and none runs): report. */
static void embd_maybe_done(struct ft_scheduler *s, struct ft_request *r) {
    struct ft_embd_job *j = r->embd;
    if (j->active > 0 || j->next < j->n_inputs)
        return;
    if (r->finish == FT_FINISH_NONE)
        r->finish = atomic_load_explicit(&r->cancel, memory_order_relaxed) ? FT_FINISH_CANCELLED : FT_FINISH_STOP;
    s->n_requests--;
    atomic_store(&s->running, s->n_requests);
    report_done(s, r);
}

static void embd_unlink(struct ft_scheduler *s, struct ft_request *r) {
    for (struct ft_request **p = &s->embd_head; *p; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            r->next = NULL;
            return;
        }
    }
}

/* A stopped request starts nothing more. */
static void embd_drop_rest(struct ft_scheduler *s, struct ft_request *r) {
    if (r->embd->next < r->embd->n_inputs) {
        r->embd->next = r->embd->n_inputs;
        embd_unlink(s, r);
    }
}

static void finish_embd_slot(struct ft_scheduler *s, int32_t i, enum ft_finish_reason reason) {
    struct slot *sl = &s->slots[i];
    struct ft_request *r = sl->r;
    ft_prefix_cache_release(s->pc, i, NULL, 0, NULL, 0);
    sl->r = NULL;
    sl->input = -1;
    s->n_running--;
    publish_kv_usage(s);
    r->embd->active--;
    if (reason == FT_FINISH_ERROR || reason == FT_FINISH_CANCELLED) {
        if (r->finish != FT_FINISH_ERROR)
            r->finish = reason;
        embd_drop_rest(s, r);
    }
    embd_maybe_done(s, r);
}

/* Start the next input of r on free slot i. */
static void embd_start(struct ft_scheduler *s, struct ft_request *r, int32_t i) {
    struct ft_embd_job *j = r->embd;
    struct slot *sl = &s->slots[i];
    memset(&sl->g, 0, sizeof(sl->g));
    sl->r = r;
    sl->input = j->next++;
    sl->prompt = j->tokens + j->offs[sl->input];
    sl->n_prompt = j->offs[sl->input + 1] - j->offs[sl->input];
    sl->order = ++s->n_admitted;
    j->active++;
    memset(s->embd_sum + (size_t)i * (size_t)s->n_embd, 0, sizeof(double) * (size_t)s->n_embd);
    if (!r->timing.admitted)
        r->timing.admitted = ft_clock_ticks();
    sl->choice = 0;
    sl->wait_fork = false;
    s->n_running++;
}

/* Free slots go to admitted embeddings requests first, in admission order. */
static void embd_fill(struct ft_scheduler *s) {
    int32_t i = 0;
    for (struct ft_request *r = s->embd_head, *next; r; r = next) {
        next = r->next;
        if (embd_stopped(r)) {
            embd_drop_rest(s, r);
            embd_maybe_done(s, r);
            continue;
        }
        while (r->embd->next < r->embd->n_inputs) {
            while (i < s->p.n_slots && s->slots[i].r)
                i++;
            if (i == s->p.n_slots)
                return;
            embd_start(s, r, i);
        }
        embd_unlink(s, r);
    }
}

static void embd_admit(struct ft_scheduler *s, struct ft_request *r) {
    ft_request_timing_init(&r->timing);
    r->timing.received = r->received;
    r->embd->next = r->embd->active = 0;
    for (int32_t k = 0; k < r->embd->n_inputs; k++)
        r->timing.prompt_tokens += r->embd->offs[k + 1] - r->embd->offs[k];
    s->n_requests++; /* running from admission on, as a generation is */
    atomic_store(&s->running, s->n_requests);
    r->next = NULL;
    struct ft_request **p = &s->embd_head;
    while (*p)
        p = &(*p)->next;
    *p = r;
}

/* After a forward pass [t0, t1]: pool slot i's new rows; its input ends
 * when its last token is in. */
static void embd_advance(struct ft_scheduler *s, int32_t i, uint64_t t0, uint64_t t1) {
    struct slot *sl = &s->slots[i];
    struct ft_request *r = sl->r;
    const size_t E = (size_t)s->n_embd;
    double *sum = s->embd_sum + (size_t)i * E;
    for (int32_t k = 0; k < sl->n_erows; k++) {
        const float *h = s->embd + (size_t)(sl->erow + k) * E;
        for (size_t c = 0; c < E; c++)
            sum[c] += h[c];
    }
    if (!r->timing.prefill_start)
        r->timing.prefill_start = t0;
    r->timing.prefill_end = t1;
    sl->g.n_past += sl->chunk;
    if (sl->g.n_past < sl->n_prompt)
        return;
    const double n = r->embd->pooling == FT_POOLING_MEAN ? (double)sl->n_prompt : 1.0;
    float *out = r->embd->out + (size_t)sl->input * E;
    for (size_t c = 0; c < E; c++)
        out[c] = (float)(sum[c] / n);
    finish_embd_slot(s, i, FT_FINISH_NONE);
}

/* Slot i samples from `row`, reports the text (and, with logprobs, the
 * token) and leaves when it is done. */
static void sample_slot(struct ft_scheduler *s, int32_t i, const float *row) {
    struct slot *sl = &s->slots[i];
    struct ft_request *r = sl->r;
    const int grc = ft_gen_step(&sl->g, row);
    if (grc) {
        set_error(r, grc, "generation failed");
        finish_request(s, r, FT_FINISH_ERROR);
        return;
    }
    if (sl->g.out_len || sl->g.logprobs || sl->g.finish) {
        r->event_choice = sl->choice;
        r->event_logprob = sl->g.logprobs ? &sl->g.lp : NULL;
        r->event_finish = sl->g.finish;
        s->p.on_event(s->p.ud, r, FT_EVENT_TEXT, sl->g.out, sl->g.out_len);
        r->event_logprob = NULL;
        r->event_finish = FT_FINISH_NONE;
    }
    if (sl->g.finish)
        finish_slot(s, i, FT_FINISH_NONE);
    else if (atomic_load_explicit(&r->cancel, memory_order_relaxed))
        finish_request(s, r, FT_FINISH_CANCELLED);
}

/* Choice 0 of r (slot i) has prefilled the prompt: the waiting choices
 * start on its KV blocks and sample from the same logits row. */
static void fork_choices(struct ft_scheduler *s, int32_t i, const float *row) {
    struct ft_request *r = s->slots[i].r;
    for (int32_t j = 0; j < s->p.n_slots; j++) {
        struct slot *sj = &s->slots[j];
        if (sj->r != r || !sj->wait_fork)
            continue;
        ft_clear_error();
        const int rc = ft_prefix_cache_fork(s->pc, j, i, r->n_prompt);
        if (rc) {
            set_error(r, rc, "sharing the prompt between choices failed");
            finish_request(s, r, FT_FINISH_ERROR);
            return;
        }
        sj->wait_fork = false;
        sj->g.n_past = r->n_prompt;
    }
    for (int32_t j = 0; j < s->p.n_slots; j++)
        if (j != i && s->slots[j].r == r && !s->slots[j].g.n_tokens)
            sample_slot(s, j, row); /* an error or a cancel ends all of r: then no slot lists it */
}

static void step(struct ft_scheduler *s) {
    for (int32_t i = 0; i < s->p.n_slots; i++)
        if (s->slots[i].r && atomic_load_explicit(&s->slots[i].r->cancel, memory_order_relaxed))
            finish_request(s, s->slots[i].r, FT_FINISH_CANCELLED);
    if (!s->n_running)
        return;
    const int32_t n = build_batch(s);
    const uint64_t t0 = ft_clock_ticks();
    for (int32_t i = 0; i < s->p.n_slots; i++)
        if (s->slots[i].r && s->slots[i].input < 0 && s->slots[i].chunk && !s->slots[i].g.timing.prefill_start)
            s->slots[i].g.timing.prefill_start = t0;
    const struct ft_batch b = {
        .n_tokens = n, .token = s->b_token, .pos = s->b_pos, .seq_id = s->b_seq, .want_logits = s->b_want};
    ft_clear_error();
    int rc = ft_model_forward_embd(s->m, s->kv, &b, s->b_want_embd, s->logits, s->embd);
    const uint64_t t1 = ft_clock_ticks();
    publish_kv_usage(s);
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        struct slot *sl = &s->slots[i];
        if (!sl->r || sl->wait_fork || (!sl->chunk && sl->row < 0))
            continue;
        struct ft_request *r = sl->r;
        if (rc) {
            set_error(r, rc, r->embd ? "embedding failed" : "generation failed");
            finish_request(s, r, FT_FINISH_ERROR);
            continue;
        }
        if (sl->input >= 0) {
            embd_advance(s, i, t0, t1);
            continue;
        }
        sl->g.n_past += sl->chunk ? sl->chunk : 1;
        if (sl->chunk && sl->g.n_past == sl->n_prompt)
            sl->g.timing.prefill_end = t1;
        const int32_t na = FT_MIN(sl->g.n_past, r->n_prompt);
        ft_prefix_cache_update(s->pc, i, r->prompt, na, sl->g.tokens, sl->g.n_past - na);
        if (sl->row < 0)
            continue;
        const float *row = s->logits + (size_t)sl->row * (size_t)s->n_vocab;
        if (sl->chunk && r->n_choices > 1)
            fork_choices(s, i, row);
        if (s->slots[i].r == r) /* a fork failure ends the request */
            sample_slot(s, i, row);
    }
    publish_kv_usage(s);
}

/* Everything still queued ends as cancelled, with its stamps. */
static void cancel_queued(struct ft_scheduler *s, struct ft_request *r) {
    while (r) {
        struct ft_request *next = r->next; /* r may be freed by its DONE */
        ft_request_timing_init(&r->timing);
        r->timing.received = r->received;
        r->timing.prompt_tokens = r->n_prompt;
        r->finish = FT_FINISH_CANCELLED;
        report_done(s, r);
        r = next;
    }
}

static void *thread_main(void *arg) {
    struct ft_scheduler *s = arg;
    for (;;) {
        embd_fill(s); /* admitted before anything in the queue */
        pthread_mutex_lock(&s->lock);
        while (!s->stop && !s->head && !s->n_running && !s->embd_head)
            pthread_cond_wait(&s->wake, &s->lock);
        if (s->stop) {
            pthread_mutex_unlock(&s->lock);
            break;
        }
        /* Take what fits into free slots; admit outside the lock. */
        struct ft_request *joining = NULL, **tail = &joining;
        /* A request's choices start together; an embeddings request takes
         * a slot per input, as many as are free. */
        for (int32_t free_slots = s->p.n_slots - s->n_running;
             s->head && (s->head->embd ? free_slots > 0 : FT_MAX(s->head->n_choices, 1) <= free_slots);) {
            struct ft_request *r = s->head;
            free_slots -= r->embd ? FT_MIN(r->embd->n_inputs, free_slots) : FT_MAX(r->n_choices, 1);
            s->head = r->next;
            s->n_queued--;
            r->next = NULL;
            *tail = r;
            tail = &r->next;
        }
        if (!s->head)
            s->tail = NULL;
        atomic_store(&s->waiting, s->n_queued);
        pthread_mutex_unlock(&s->lock);
        while (joining) {
            struct ft_request *r = joining;
            joining = r->next; /* read first: admit may finish (and free) r */
            admit(s, r);
        }
        embd_fill(s);
        step(s);
        ft_kv_events_flush(s->p.kv_events); /* the step's stores and evictions, as one batch */
    }
    for (int32_t i = 0; i < s->p.n_slots; i++)
        if (s->slots[i].r)
            finish_request(s, s->slots[i].r, FT_FINISH_CANCELLED);
    while (s->embd_head) {
        struct ft_request *r = s->embd_head;
        embd_unlink(s, r);
        r->finish = FT_FINISH_CANCELLED;
        r->embd->next = r->embd->n_inputs;
        embd_maybe_done(s, r); /* none of its inputs runs any more */
    }
    pthread_mutex_lock(&s->lock);
    struct ft_request *queued = s->head;
    s->head = s->tail = NULL;
    s->n_queued = 0;
    atomic_store(&s->waiting, 0);
    pthread_mutex_unlock(&s->lock);
    cancel_queued(s, queued);
    return NULL;
}

/* Blocks for n_slots whole sequences (one more each for a copy-on-write)
 * plus the prefix cache's budget (*cache_blocks, which also caps the
 * cache's idle blocks). */
static int pool_blocks(const struct ft_model *m, const struct ft_scheduler_params *p, int32_t *out,
                       int32_t *cache_blocks) {
    const int64_t per_seq = ((int64_t)p->n_ctx + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS;
    const int64_t block_bytes = (int64_t)ft_model_kv_bytes_per_token(m) * FT_KV_BLOCK_TOKENS;
    const int64_t cache = p->prefix_reuse && block_bytes > 0 ? ((int64_t)p->cache_mib << 20) / block_bytes : 0;
    const int64_t total = (int64_t)p->n_slots * (per_seq + 1) + cache;
    if (total > INT32_MAX) {
        FT_LOG_E("KV pool of %lld blocks is too large", (long long)total);
        return FT_ERANGE;
    }
    *out = (int32_t)total;
    *cache_blocks = (int32_t)cache;
    return FT_OK;
}

int ft_scheduler_new(struct ft_model *m, const struct ft_scheduler_params *p, struct ft_scheduler **out) {
    *out = NULL;
    if (!m || !p || !p->on_event || p->n_ctx < 2 || p->n_slots < 1 || p->n_slots > MAX_SLOTS || p->n_batch < 1 ||
        p->n_batch > FT_MAX_BATCH || p->max_queue < 1 || p->cache_mib < 0) {
        FT_LOG_E("bad parameters");
        return FT_EINVAL;
    }
    struct ft_scheduler *s = calloc(1, sizeof(*s));
    if (!s) {
        FT_LOG_E("out of memory");
        return FT_ENOMEM;
    }
    s->m = m;
    s->p = *p;
    s->n_vocab = ft_model_hparams(m)->n_vocab;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    int rc;
    int32_t n_blocks = 0, cache_blocks = 0;
    if ((rc = pool_blocks(m, p, &n_blocks, &cache_blocks)) ||
        (rc = ft_kv_cache_new_pool(m, p->n_ctx, p->n_slots, n_blocks, &s->kv)) ||
        (rc = ft_prefix_cache_new(s->kv, p->prefix_reuse, &s->pc)))
        goto fail;
    ft_prefix_cache_set_events(s->pc, p->kv_events);
    ft_kv_cache_set_idle_limit(s->kv, cache_blocks);
    s->slots = calloc((size_t)p->n_slots, sizeof(*s->slots));
    s->logits = malloc(sizeof(float) * (size_t)s->n_vocab * (size_t)p->n_slots);
    s->b_token = malloc(sizeof(int32_t) * FT_MAX_BATCH);
    s->b_pos = malloc(sizeof(int32_t) * FT_MAX_BATCH);
    s->b_seq = malloc(sizeof(int32_t) * FT_MAX_BATCH);
    s->b_want = malloc(sizeof(bool) * FT_MAX_BATCH);
    s->b_want_embd = malloc(sizeof(bool) * FT_MAX_BATCH);
    s->n_embd = ft_model_hparams(m)->n_embd;
    s->embd = malloc(sizeof(float) * (size_t)s->n_embd * (size_t)p->n_batch);
    s->embd_sum = malloc(sizeof(double) * (size_t)s->n_embd * (size_t)p->n_slots);
    s->prefill_order = malloc(sizeof(int32_t) * (size_t)p->n_slots);
    if (!s->slots || !s->logits || !s->b_token || !s->b_pos || !s->b_seq || !s->b_want || !s->b_want_embd ||
        !s->embd || !s->embd_sum || !s->prefill_order) {
        FT_LOG_E("out of memory");
        rc = FT_ENOMEM;
        goto fail;
    }
    if (pthread_create(&s->thread, NULL, thread_main, s)) {
        FT_LOG_E("cannot start the scheduler thread");
        rc = FT_ENOMEM;
        goto fail;
    }
    s->thread_started = true;
    *out = s;
    return FT_OK;
fail:
    ft_scheduler_free(s);
    return rc;
}

void ft_scheduler_free(struct ft_scheduler *s) {
    if (!s)
        return;
    if (s->thread_started) {
        /* The thread cancels the running and queued requests itself (each
         * gets its DONE there) and exits; nothing is touched after. */
        pthread_mutex_lock(&s->lock);
        s->stop = true;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
    }
    free(s->slots);
    ft_grammar_vocab_free(s->gvocab);
    free(s->logits);
    free(s->b_token);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_want);
    free(s->b_want_embd);
    free(s->embd);
    free(s->embd_sum);
    free(s->prefill_order);
    ft_prefix_cache_free(s->pc); /* AllBlocksCleared */
    ft_kv_events_flush(s->p.kv_events);
    ft_kv_cache_free(s->kv);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int ft_scheduler_submit(struct ft_scheduler *s, struct ft_request *r) {
    if (r->embd) {
        const struct ft_embd_job *j = r->embd;
        const enum ft_pooling pool = j->pooling;
        if (j->n_inputs < 1 || !j->tokens || !j->offs || !j->out ||
            (pool != FT_POOLING_MEAN && pool != FT_POOLING_CLS && pool != FT_POOLING_LAST)) {
            FT_LOG_E("bad embeddings request (%d inputs, pooling %d)", (int)j->n_inputs, (int)pool);
            return FT_EINVAL;
        }
        for (int32_t k = 0; k < j->n_inputs; k++) {
            const int32_t n = j->offs[k + 1] - j->offs[k];
            if (n < 1 || n > s->p.n_ctx) {
                FT_LOG_E("input %d has %d tokens; the context holds %d", (int)k, (int)n, (int)s->p.n_ctx);
                return FT_EINVAL;
            }
        }
    } else if (r->n_prompt < 1 || r->n_prompt >= s->p.n_ctx) {
        FT_LOG_E("the prompt has %d tokens; the context holds %d", (int)r->n_prompt, (int)s->p.n_ctx);
        return FT_EINVAL;
    }
    if (r->n_choices < 0 || r->n_choices > FT_MIN(FT_MAX_CHOICES, s->p.n_slots)) {
        FT_LOG_E("n=%d choices: this server runs at most %d at once (-np %d)", (int)r->n_choices,
                 (int)FT_MIN(FT_MAX_CHOICES, s->p.n_slots), (int)s->p.n_slots);
        return FT_EINVAL;
    }
    r->next = NULL;
    r->finish = FT_FINISH_NONE;
    r->error = 0;
    r->error_msg[0] = '\0';
    pthread_mutex_lock(&s->lock);
    if (s->stop || s->n_queued >= s->p.max_queue) {
        pthread_mutex_unlock(&s->lock);
        FT_LOG_E("%d requests are already waiting", (int)s->p.max_queue);
        return FT_EFULL;
    }
    if (s->tail)
        s->tail->next = r;
    else
        s->head = r;
    s->tail = r;
    s->n_queued++;
    atomic_store(&s->waiting, s->n_queued);
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return FT_OK;
}

void ft_scheduler_get_stats(struct ft_scheduler *s, struct ft_scheduler_stats *out) {
    out->running = atomic_load(&s->running);
    out->waiting = atomic_load(&s->waiting);
    const int32_t total = ft_kv_cache_blocks_total(s->kv);
    out->kv_usage = total > 0 ? (double)atomic_load(&s->kv_used_blocks) / total : 0.0;
    out->kv_blocks_total = total;
}
