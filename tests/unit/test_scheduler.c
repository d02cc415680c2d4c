/* The scheduler thread: FIFO order, events, the metrics invariants of
 * DESIGN.md §3, cancellation, the queue bound and shutdown (tiny llama
 * model from ../shared). */
#include "ft_test.h"

#include "ft/clock.h"
#include "ft/common.h"
#include "ft/scheduler.h"
#include "ft/tokenizer.h"

#include <pthread.h>
#include <stdatomic.h>

#define N_REQ 4

struct probe {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int n_done;
    int done_order[8];
    int n_text[8];
    char text[8][512];
    /* while hold is set, the first TEXT event of request 0 blocks */
    bool hold;
    bool holding;
};

static struct probe P = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void on_event(void *ud, struct ft_request *r, enum ft_event ev, const char *text, size_t len) {
    (void)ud;
    const int id = (int)(intptr_t)r->user;
    pthread_mutex_lock(&P.lock);
    if (ev == FT_EVENT_TEXT) {
        size_t have = strlen(P.text[id]);
        if (have + len < sizeof(P.text[id]))
            memcpy(P.text[id] + have, text, len), P.text[id][have + len] = '\0';
        P.n_text[id]++;
        if (id == 0 && P.hold) {
            P.holding = true;
            pthread_cond_broadcast(&P.cond);
            while (P.hold)
                pthread_cond_wait(&P.cond, &P.lock);
        }
    } else {
        P.done_order[P.n_done++] = id;
        pthread_cond_broadcast(&P.cond);
    }
    pthread_mutex_unlock(&P.lock);
}

static void wait_done(int n) {
    pthread_mutex_lock(&P.lock);
    while (P.n_done < n)
        pthread_cond_wait(&P.cond, &P.lock);
    pthread_mutex_unlock(&P.lock);
}

static void check_invariants(const struct ft_request *r) {
    const struct ft_request_metrics *m = &r->metrics;
    CHECK_EQ_INT(m->prompt_tokens, r->n_prompt);
    CHECK_EQ_INT(m->prompt_tokens, m->cached_prompt_tokens + m->prefill_tokens);
    CHECK_EQ_INT(m->decode_tokens, m->completion_tokens - 1);
    CHECK(m->queue_time_ms <= m->ttft_ms && m->ttft_ms <= m->total_time_ms);
    CHECK(m->prefill_time_ms > 0 && m->prefill_time_ms <= m->ttft_ms);
    if (m->decode_tokens > 0 && m->decode_time_ms > 0)
        CHECK_NEAR(m->decode_tokens_per_second, m->decode_tokens / (m->decode_time_ms / 1e3),
                   1e-9 * m->decode_tokens_per_second);
    CHECK(m->inter_token_latency_ms.p50 <= m->inter_token_latency_ms.p90);
    CHECK(m->inter_token_latency_ms.p99 <= m->inter_token_latency_ms.max);
    CHECK(r->timing.n_tokens == m->completion_tokens);
}

int main(void) {
    const char *shared = ft_test_shared_dir();
    if (!shared)
        FT_TEST_SKIP("FT_SHARED_DIR (../shared with models/) not found; no model to run");
    char path[4096];
    snprintf(path, sizeof(path), "%s/models/llama-Q8_0.gguf", shared);
    struct ft_model *m = NULL;
    struct ft_model_params mp = {.n_threads = 1};
    if (ft_model_load(path, &mp, &m) != FT_OK)
        FT_TEST_SKIP("cannot load %s", path);
    ft_clock_init();

    struct ft_scheduler *s = NULL;
    struct ft_scheduler_params sp = {
        .n_ctx = 128, .n_slots = 2, .prefix_reuse = true, .n_batch = 16, .max_queue = 2, .on_event = on_event};
    CHECK_EQ_INT(ft_scheduler_new(m, &sp, &s), FT_OK);

    int32_t *ids = NULL;
    size_t n = 0;
    const char *text = "Once upon a time, in a land far away";
    CHECK_EQ_INT(ft_tokenize(ft_model_tokenizer(m), text, strlen(text), true, false, &ids, &n), FT_OK);

    static struct ft_request req[N_REQ + 2];
    for (int i = 0; i < N_REQ + 2; i++) {
        req[i].prompt = ids;
        req[i].n_prompt = (int32_t)n;
        req[i].params.sampling = ft_sampler_default_params();
        req[i].params.sampling.temperature = 0;
        req[i].params.max_tokens = 6 + i;
        req[i].params.ignore_eos = true;
        req[i].user = (void *)(intptr_t)i;
    }

    /* Request 0 is held inside its first TEXT event, so requests 1 and 2
     * queue up behind it and a third waiting one is refused. */
    P.hold = true;
    for (int i = 0; i < 3; i++)
        req[i].received = ft_clock_ticks();
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[0]), FT_OK);
    pthread_mutex_lock(&P.lock);
    while (!P.holding)
        pthread_cond_wait(&P.cond, &P.lock);
    pthread_mutex_unlock(&P.lock);
    struct ft_scheduler_stats st;
    ft_scheduler_get_stats(s, &st);
    CHECK_EQ_INT(st.running, 1);
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[1]), FT_OK);
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[2]), FT_OK);
    req[3].received = ft_clock_ticks();
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[3]), FT_EFULL);
    ft_scheduler_get_stats(s, &st);
    CHECK_EQ_INT(st.waiting, 2);
    /* A prompt that fills the context is refused before queueing. */
    struct ft_request big = req[3];
    big.n_prompt = 128;
    CHECK_EQ_INT(ft_scheduler_submit(s, &big), FT_EINVAL);
    pthread_mutex_lock(&P.lock);
    P.hold = false;
    pthread_cond_broadcast(&P.cond);
    pthread_mutex_unlock(&P.lock);
    wait_done(3);

    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(P.done_order[i], i); /* first in, first out */
        CHECK_EQ_INT(req[i].finish, FT_FINISH_LENGTH);
        CHECK_EQ_INT(req[i].metrics.completion_tokens, 6 + i);
        check_invariants(&req[i]);
        /* Greedy: each text starts with the shorter ones' text. */
        if (i > 0)
            CHECKF(!strncmp(P.text[i], P.text[0], strlen(P.text[0])), "'%s' vs '%s'", P.text[i], P.text[0]);
    }
    /* Requests 1 and 2 waited behind request 0. */
    CHECK(req[1].metrics.queue_time_ms > req[0].metrics.queue_time_ms);
    CHECK(req[2].timing.admitted >= req[1].timing.done);
    /* The same prompt again: all but its last token came from the cache. */
    CHECK_EQ_INT(req[0].metrics.cached_prompt_tokens, 0);
    CHECK_EQ_INT(req[1].metrics.cached_prompt_tokens, (int)n - 1);
    ft_scheduler_get_stats(s, &st);
    CHECK(st.kv_usage > 0 && st.kv_usage <= 1);
    CHECK_EQ_INT(st.running, 0);

    /* Cancelling: set before admission, the request ends without tokens. */
    atomic_store(&req[3].cancel, true);
    req[3].received = ft_clock_ticks();
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[3]), FT_OK);
    wait_done(4);
    CHECK_EQ_INT(req[3].finish, FT_FINISH_CANCELLED);
    CHECK_EQ_INT(req[3].metrics.completion_tokens, 0);

    /* Shutdown with a request held mid-generation and one queued: both end
     * as cancelled and still get their DONE event. */
    P.hold = true;
    P.holding = false;
    memset(P.text[0], 0, sizeof(P.text[0]));
    ft_request_timing_free(&req[0].timing); /* the submitter owns the record of its first run */
    req[0].params.max_tokens = 100;
    req[0].received = ft_clock_ticks();
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[0]), FT_OK);
    pthread_mutex_lock(&P.lock);
    while (!P.holding)
        pthread_cond_wait(&P.cond, &P.lock);
    pthread_mutex_unlock(&P.lock);
    req[4].received = ft_clock_ticks();
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[4]), FT_OK);
    atomic_store(&req[0].cancel, true); /* what ft_scheduler_free does for the running one */
    pthread_mutex_lock(&P.lock);
    P.hold = false;
    pthread_cond_broadcast(&P.cond);
    pthread_mutex_unlock(&P.lock);
    ft_scheduler_free(s);
    CHECK_EQ_INT(P.n_done, 6);
    CHECK_EQ_INT(req[0].finish, FT_FINISH_CANCELLED);
    CHECK(req[0].metrics.completion_tokens >= 1 && req[0].metrics.completion_tokens < 100);
    CHECK(req[4].finish == FT_FINISH_CANCELLED || req[4].finish == FT_FINISH_LENGTH);

    for (int i = 0; i < N_REQ + 2; i++)
        ft_request_timing_free(&req[i].timing);
    free(ids);
    ft_model_free(m);
    return ft_test_finish("test_scheduler");
}
