/* The scheduler thread (include/ft/scheduler.h): a FIFO of submitted
 * requests, each run to completion on the prefix-cache slot that shares
 * the most of its prompt.
 *
 * Locking: `lock` guards the queue and `stop`; everything else the thread
 * touches (model, KV cache, prefix cache, logits) is its own. Statistics are
 * atomics so the HTTP thread can read them for /metrics without a lock. */
#include "ft/scheduler.h"

#include "ft/clock.h"
#include "ft/common.h"
#include "ft/prefix_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ft_scheduler {
    struct ft_model *m;
    struct ft_kv_cache *kv;
    struct ft_prefix_cache *pc;
    struct ft_scheduler_params p;
    float *logits;

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct ft_request *head, *tail; /* queue */
    int32_t n_queued;
    bool stop;
    struct ft_request *current; /* running request, for cancelling on stop */

    atomic_int running;
    atomic_int waiting;
    atomic_int kv_used_blocks;
};

static void finish_request(struct ft_scheduler *s, struct ft_request *r, struct ft_gen *g) {
    if (g) {
        r->finish = g->finish;
        r->timing = g->timing; /* moved: the request owns the stamps now */
        memset(&g->timing, 0, sizeof(g->timing));
    }
    r->timing.done = ft_clock_ticks();
    ft_metrics_compute(&r->timing, &r->metrics);
    s->p.on_event(s->p.ud, r, FT_EVENT_DONE, NULL, 0);
}

/* The step callback needs both the scheduler and the request. */
struct step_ctx {
    struct ft_scheduler *s;
    struct ft_request *r;
};

static bool step_cb(void *ud, const struct ft_gen *g) {
    struct step_ctx *c = ud;
    if (g->out_len)
        c->s->p.on_event(c->s->p.ud, c->r, FT_EVENT_TEXT, g->out, g->out_len);
    return atomic_load_explicit(&c->r->cancel, memory_order_relaxed);
}

static void set_error(struct ft_request *r, int rc, const char *what) {
    r->finish = FT_FINISH_ERROR;
    r->error = rc;
    const char *detail = ft_last_error();
    snprintf(r->error_msg, sizeof(r->error_msg), "%s: %s", what, detail && *detail ? detail : ft_strerror(rc));
}

static void run_request(struct ft_scheduler *s, struct ft_request *r) {
    const struct ft_tokenizer *tok = ft_model_tokenizer(s->m);
    const int32_t n_vocab = ft_model_hparams(s->m)->n_vocab;
    struct ft_gen g;
    ft_clear_error();
    int rc = ft_gen_init(&g, tok, n_vocab, s->p.n_ctx, &r->params);
    g.timing.received = r->received;
    g.timing.admitted = ft_clock_ticks();
    g.timing.prompt_tokens = r->n_prompt;
    if (rc) {
        set_error(r, rc, "bad sampling parameters");
        g.finish = FT_FINISH_ERROR;
    } else if (atomic_load(&r->cancel)) {
        g.finish = FT_FINISH_CANCELLED;
    } else {
        int32_t n_cached = 0;
        const int32_t seq = ft_prefix_cache_acquire(s->pc, r->prompt, r->n_prompt, &n_cached);
        ft_gen_accept_prompt(&g, r->prompt, r->n_prompt);
        struct step_ctx c = {s, r};
        rc = ft_generate(s->m, s->kv, seq, r->prompt, r->n_prompt, s->p.n_batch, s->logits, &g, step_cb, &c);
        if (rc) {
            set_error(r, rc, "generation failed");
            ft_prefix_cache_clear(s->pc, seq);
        } else {
            /* The last sampled token was never evaluated: the KV holds the
             * prompt and the tokens before it. */
            ft_prefix_cache_commit(s->pc, seq, r->prompt, r->n_prompt, g.tokens, g.n_past - r->n_prompt);
        }
        atomic_store(&s->kv_used_blocks, ft_kv_cache_blocks_total(s->kv) - ft_kv_cache_blocks_free(s->kv));
    }
    /* Not running any more by the time the owner hears DONE, and no longer
     * `current`: the owner frees r on DONE, so ft_scheduler_free must not
     * reach it through s->current after that. */
    pthread_mutex_lock(&s->lock);
    s->current = NULL;
    atomic_store(&s->running, 0);
    pthread_mutex_unlock(&s->lock);
    finish_request(s, r, &g);
    ft_gen_free(&g);
}

static void *thread_main(void *arg) {
    struct ft_scheduler *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (!s->stop && !s->head)
            pthread_cond_wait(&s->wake, &s->lock);
        if (s->stop) {
            pthread_mutex_unlock(&s->lock);
            break;
        }
        struct ft_request *r = s->head;
        s->head = r->next;
        if (!s->head)
            s->tail = NULL;
        s->n_queued--;
        s->current = r;
        atomic_store(&s->waiting, s->n_queued);
        atomic_store(&s->running, 1);
        pthread_mutex_unlock(&s->lock);

        run_request(s, r);
    }
    return NULL;
}

int ft_scheduler_new(struct ft_model *m, const struct ft_scheduler_params *p, struct ft_scheduler **out) {
    *out = NULL;
    if (!m || !p || !p->on_event || p->n_ctx < 2 || p->n_slots < 1 || p->n_batch < 1 || p->max_queue < 1) {
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
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    int rc;
    if ((rc = ft_kv_cache_new(m, p->n_ctx, p->n_slots, &s->kv)) ||
        (rc = ft_prefix_cache_new(s->kv, p->n_slots, p->prefix_reuse, &s->pc)))
        goto fail;
    if (!(s->logits = malloc(sizeof(float) * (size_t)ft_model_hparams(m)->n_vocab))) {
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
        pthread_mutex_lock(&s->lock);
        s->stop = true;
        if (s->current)
            atomic_store(&s->current->cancel, true);
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
    }
    /* Whatever was still queued ends as cancelled, with its stamps. */
    while (s->head) {
        struct ft_request *r = s->head;
        s->head = r->next;
        ft_request_timing_init(&r->timing);
        r->timing.received = r->received;
        r->timing.prompt_tokens = r->n_prompt;
        r->finish = FT_FINISH_CANCELLED;
        finish_request(s, r, NULL);
    }
    free(s->logits);
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
