/* The scheduler thread (include/ft/scheduler.h): continuous batching over
 * n_slots sequences on a shared KV block pool with the prefix cache.
 *
 * Slot i runs on KV sequence i. Each step: cancelled requests leave,
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
#include "ft/prefix_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SLOTS 1024

struct slot {
    struct ft_request *r; /* NULL: free */
    struct ft_gen g;      /* g.n_past: tokens whose KV the sequence holds */
    uint64_t order;       /* admission number: prefill is first come, first served */
    int32_t chunk;        /* prompt tokens in the current step */
    int32_t row;          /* logits row in the current step, -1: none */
};

struct ft_scheduler {
    struct ft_model *m;
    struct ft_kv_cache *kv;
    struct ft_prefix_cache *pc;
    struct ft_scheduler_params p;
    int32_t n_vocab;
    struct slot *slots;
    int32_t n_running;
    uint64_t n_admitted;
    /* the step's batch */
    float *logits; /* n_slots rows */
    int32_t *b_token, *b_pos, *b_seq;
    bool *b_want;
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

/* Slot i leaves: its KV goes to the prefix cache (unless it failed), its
 * record to the request. reason overrides g.finish when not NONE. */
static void finish_slot(struct ft_scheduler *s, int32_t i, enum ft_finish_reason reason) {
    struct slot *sl = &s->slots[i];
    struct ft_request *r = sl->r;
    struct ft_gen *g = &sl->g;
    if (reason != FT_FINISH_NONE)
        g->finish = reason;
    if (g->finish == FT_FINISH_ERROR) {
        ft_prefix_cache_release(s->pc, i, NULL, 0, NULL, 0);
    } else {
        /* The last sampled token was never evaluated: the KV holds the
         * prompt (or the part of it prefilled) and the tokens before it. */
        const int32_t na = FT_MIN(g->n_past, r->n_prompt), nb = FT_MAX(0, g->n_past - r->n_prompt);
        ft_prefix_cache_release(s->pc, i, r->prompt, na, g->tokens, nb);
    }
    r->finish = g->finish;
    r->timing = g->timing; /* moved: the request owns the stamps now */
    memset(&g->timing, 0, sizeof(g->timing));
    ft_gen_free(g);
    sl->r = NULL;
    s->n_running--;
    /* Not running any more by the time the owner hears DONE. */
    atomic_store(&s->running, s->n_running);
    publish_kv_usage(s);
    report_done(s, r);
}

static void admit(struct ft_scheduler *s, struct ft_request *r) {
    int32_t i = 0;
    while (s->slots[i].r)
        i++;
    struct slot *sl = &s->slots[i];
    sl->r = r;
    sl->order = ++s->n_admitted;
    s->n_running++;
    atomic_store(&s->running, s->n_running);
    ft_clear_error();
    int rc = FT_OK;
    if (r->params.grammar && !s->gvocab) {
        const uint64_t t0 = ft_clock_ticks();
        if ((rc = ft_grammar_vocab_new(ft_model_tokenizer(s->m), &s->gvocab)) == FT_OK)
            FT_LOG_I("token trie for grammars: %d tokens, %zu nodes, %.1f MiB, built in %.1f ms",
                     (int)ft_grammar_vocab_n_tokens(s->gvocab), ft_grammar_vocab_n_nodes(s->gvocab),
                     (double)ft_grammar_vocab_bytes(s->gvocab) / (1 << 20),
                     ft_clock_ticks_to_ms(ft_clock_ticks() - t0));
    }
    struct ft_gen_params gp = r->params; /* the request's stay read-only */
    if (gp.grammar)
        gp.grammar_vocab = s->gvocab;
    if (!rc)
        rc = ft_gen_init(&sl->g, ft_model_tokenizer(s->m), s->n_vocab, s->p.n_ctx, &gp);
    sl->g.timing.received = r->received;
    sl->g.timing.admitted = ft_clock_ticks();
    sl->g.timing.prompt_tokens = r->n_prompt;
    if (rc) {
        set_error(r, rc, "bad sampling parameters or grammar");
        finish_slot(s, i, FT_FINISH_ERROR);
        return;
    }
    ft_gen_accept_prompt(&sl->g, r->prompt, r->n_prompt);
    const int32_t cached = ft_prefix_cache_attach(s->pc, i, r->prompt, r->n_prompt);
    sl->g.timing.cached_prompt_tokens = cached;
    sl->g.n_past = cached;
    publish_kv_usage(s);
}

static void add_token(struct ft_scheduler *s, int32_t *n, int32_t *n_rows, int32_t seq, int32_t token, int32_t pos,
                      bool want) {
    s->b_token[*n] = token;
    s->b_pos[*n] = pos;
    s->b_seq[*n] = seq;
    s->b_want[*n] = want;
    (*n)++;
    if (want)
        s->slots[seq].row = (*n_rows)++;
}

/* Build the step's batch: decode tokens first, then prompt chunks. */
static int32_t build_batch(struct ft_scheduler *s) {
    int32_t n = 0, n_rows = 0, n_prefill = 0;
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        struct slot *sl = &s->slots[i];
        sl->chunk = 0;
        sl->row = -1;
        if (!sl->r)
            continue;
        if (sl->g.n_past >= sl->r->n_prompt)
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
        const int32_t take = FT_MIN(sl->r->n_prompt - sl->g.n_past, budget);
        for (int32_t j = 0; j < take; j++) {
            const int32_t pos = sl->g.n_past + j;
            add_token(s, &n, &n_rows, i, sl->r->prompt[pos], pos, pos == sl->r->n_prompt - 1);
        }
        sl->chunk = take;
        budget -= take;
    }
    return n;
}

static void step(struct ft_scheduler *s) {
    for (int32_t i = 0; i < s->p.n_slots; i++)
        if (s->slots[i].r && atomic_load_explicit(&s->slots[i].r->cancel, memory_order_relaxed))
            finish_slot(s, i, FT_FINISH_CANCELLED);
    if (!s->n_running)
        return;
    const int32_t n = build_batch(s);
    const uint64_t t0 = ft_clock_ticks();
    for (int32_t i = 0; i < s->p.n_slots; i++)
        if (s->slots[i].r && s->slots[i].chunk && !s->slots[i].g.timing.prefill_start)
            s->slots[i].g.timing.prefill_start = t0;
    const struct ft_batch b = {
        .n_tokens = n, .token = s->b_token, .pos = s->b_pos, .seq_id = s->b_seq, .want_logits = s->b_want};
    ft_clear_error();
    int rc = ft_model_forward(s->m, s->kv, &b, s->logits);
    const uint64_t t1 = ft_clock_ticks();
    publish_kv_usage(s);
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        struct slot *sl = &s->slots[i];
        if (!sl->r || (!sl->chunk && sl->row < 0))
            continue;
        struct ft_request *r = sl->r;
        if (rc) {
            set_error(r, rc, "generation failed");
            finish_slot(s, i, FT_FINISH_ERROR);
            continue;
        }
        sl->g.n_past += sl->chunk ? sl->chunk : 1;
        if (sl->chunk && sl->g.n_past == r->n_prompt)
            sl->g.timing.prefill_end = t1;
        const int32_t na = FT_MIN(sl->g.n_past, r->n_prompt);
        ft_prefix_cache_update(s->pc, i, r->prompt, na, sl->g.tokens, sl->g.n_past - na);
        if (sl->row < 0)
            continue;
        const int grc = ft_gen_step(&sl->g, s->logits + (size_t)sl->row * (size_t)s->n_vocab);
        if (grc) {
            set_error(r, grc, "generation failed");
            finish_slot(s, i, FT_FINISH_ERROR);
            continue;
        }
        if (sl->g.out_len)
            s->p.on_event(s->p.ud, r, FT_EVENT_TEXT, sl->g.out, sl->g.out_len);
        if (sl->g.finish)
            finish_slot(s, i, FT_FINISH_NONE);
        else if (atomic_load_explicit(&r->cancel, memory_order_relaxed))
            finish_slot(s, i, FT_FINISH_CANCELLED);
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
        pthread_mutex_lock(&s->lock);
        while (!s->stop && !s->head && !s->n_running)
            pthread_cond_wait(&s->wake, &s->lock);
        if (s->stop) {
            pthread_mutex_unlock(&s->lock);
            break;
        }
        /* Take what fits into free slots; admit outside the lock. */
        struct ft_request *joining = NULL, **tail = &joining;
        for (int32_t free_slots = s->p.n_slots - s->n_running; free_slots > 0 && s->head; free_slots--) {
            struct ft_request *r = s->head;
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
        step(s);
    }
    for (int32_t i = 0; i < s->p.n_slots; i++)
        if (s->slots[i].r)
            finish_slot(s, i, FT_FINISH_CANCELLED);
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
    ft_kv_cache_set_idle_limit(s->kv, cache_blocks);
    s->slots = calloc((size_t)p->n_slots, sizeof(*s->slots));
    s->logits = malloc(sizeof(float) * (size_t)s->n_vocab * (size_t)p->n_slots);
    s->b_token = malloc(sizeof(int32_t) * FT_MAX_BATCH);
    s->b_pos = malloc(sizeof(int32_t) * FT_MAX_BATCH);
    s->b_seq = malloc(sizeof(int32_t) * FT_MAX_BATCH);
    s->b_want = malloc(sizeof(bool) * FT_MAX_BATCH);
    s->prefill_order = malloc(sizeof(int32_t) * (size_t)p->n_slots);
    if (!s->slots || !s->logits || !s->b_token || !s->b_pos || !s->b_seq || !s->b_want || !s->prefill_order) {
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
    free(s->prefill_order);
    ft_prefix_cache_free(s->pc);
    ft_kv_cache_free(s->kv);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int ft_scheduler_submit(struct ft_scheduler *s, struct ft_request *r) {
    if (r->n_prompt < 1 || r->n_prompt >= s->p.n_ctx) {
        FT_LOG_E("the prompt has %d tokens; the context holds %d", (int)r->n_prompt, (int)s->p.n_ctx);
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
}
