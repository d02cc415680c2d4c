/* The scheduler thread: FIFO admission, events, the metrics invariants of
 * docs/architecture.md (Metrics contract), the queue bound, continuous
 * batching (several requests in one step give the greedy output each gives
 * alone), cancellation in prefill and in decode, and shutdown with requests
 * in flight (tiny llama model from ../shared). */
#include "ft_test_model.h"

#include "ft/clock.h"
#include "ft/common.h"
#include "ft/scheduler.h"
#include "ft/tokenizer.h"

#include <pthread.h>
#include <stdatomic.h>

#define MAX_ID 16

struct probe {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int n_done;
    int done_order[64];
    int n_text[MAX_ID];
    char text[MAX_ID][1024];
    /* while hold is set, the first TEXT event of request 0 blocks */
    bool hold;
    bool holding;
    /* at the cancel_at-th TEXT event of request cancel_by, set cancel on cancel_req */
    int cancel_by, cancel_at;
    struct ft_request *cancel_req;
    /* DONE frees requests allocated by the test (the HTTP side does the same) */
    bool free_on_done;
    int32_t done_tokens[MAX_ID];
    enum ft_finish_reason done_finish[MAX_ID];
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
        if (P.cancel_req && id == P.cancel_by && P.n_text[id] == P.cancel_at)
            atomic_store(&P.cancel_req->cancel, true);
        if (id == 0 && P.hold) {
            P.holding = true;
            pthread_cond_broadcast(&P.cond);
            while (P.hold)
                pthread_cond_wait(&P.cond, &P.lock);
        }
    } else {
        P.done_order[P.n_done++] = id;
        P.done_tokens[id] = r->metrics.completion_tokens;
        P.done_finish[id] = r->finish;
        if (P.free_on_done) {
            ft_request_timing_free(&r->timing);
            free(r);
        }
        pthread_cond_broadcast(&P.cond);
    }
    pthread_mutex_unlock(&P.lock);
}

static void probe_reset(void) {
    pthread_mutex_lock(&P.lock);
    P.n_done = 0;
    memset(P.n_text, 0, sizeof(P.n_text));
    memset(P.text, 0, sizeof(P.text));
    P.hold = P.holding = false;
    P.cancel_req = NULL;
    P.free_on_done = false;
    pthread_mutex_unlock(&P.lock);
}

static void wait_done(int n) {
    pthread_mutex_lock(&P.lock);
    while (P.n_done < n)
        pthread_cond_wait(&P.cond, &P.lock);
    pthread_mutex_unlock(&P.lock);
}

static void wait_holding(void) {
    pthread_mutex_lock(&P.lock);
    while (!P.holding)
        pthread_cond_wait(&P.cond, &P.lock);
    pthread_mutex_unlock(&P.lock);
}

static void release_hold(void) {
    pthread_mutex_lock(&P.lock);
    P.hold = false;
    pthread_cond_broadcast(&P.cond);
    pthread_mutex_unlock(&P.lock);
}

static void check_invariants(const struct ft_request *r) {
    const struct ft_request_metrics *m = &r->metrics;
    CHECK_EQ_INT(m->prompt_tokens, r->n_prompt);
    CHECK_EQ_INT(m->prompt_tokens, m->cached_prompt_tokens + m->prefill_tokens);
    CHECK_EQ_INT(m->decode_tokens, m->completion_tokens - 1);
    CHECK(m->queue_time_ms <= m->ttft_ms && m->ttft_ms <= m->total_time_ms);
    CHECK(m->prefill_time_ms > 0 && m->prefill_time_ms <= m->ttft_ms);
    CHECK(r->timing.admitted <= r->timing.prefill_start && r->timing.prefill_start < r->timing.prefill_end);
    CHECK(r->timing.prefill_end <= r->timing.token_ready[0]);
    if (m->decode_tokens > 0 && m->decode_time_ms > 0)
        CHECK_NEAR(m->decode_tokens_per_second, m->decode_tokens / (m->decode_time_ms / 1e3),
                   1e-9 * m->decode_tokens_per_second);
    CHECK(m->inter_token_latency_ms.p50 <= m->inter_token_latency_ms.p90);
    CHECK(m->inter_token_latency_ms.p99 <= m->inter_token_latency_ms.max);
    CHECK(r->timing.n_tokens == m->completion_tokens);
}

static struct ft_model *g_model;

static int32_t tokenize(const char *text, int32_t *out, int32_t cap) {
    return ft_test_tokenize(g_model, text, out, cap);
}

static void greedy(struct ft_request *r, const int32_t *prompt, int32_t n, int32_t max_tokens, int id) {
    memset(r, 0, sizeof(*r));
    r->prompt = prompt;
    r->n_prompt = n;
    r->params.sampling = ft_sampler_default_params();
    r->params.sampling.temperature = 0;
    r->params.max_tokens = max_tokens;
    r->params.ignore_eos = true;
    r->user = (void *)(intptr_t)id;
    r->received = ft_clock_ticks();
}

/* 1. One slot: first in, first out, the queue bound, the cache. */
static void test_fifo(const int32_t *ids, int32_t n) {
    probe_reset();
    struct ft_scheduler *s = NULL;
    struct ft_scheduler_params sp = {.n_ctx = 128, .n_slots = 1, .prefix_reuse = true, .n_batch = 16,
                                     .cache_mib = 1, .max_queue = 2, .on_event = on_event};
    CHECK_EQ_INT(ft_scheduler_new(g_model, &sp, &s), FT_OK);
    static struct ft_request req[6];
    for (int i = 0; i < 6; i++)
        greedy(&req[i], ids, n, 6 + i, i);

    /* Request 0 is held inside its first TEXT event, so requests 1 and 2
     * queue up behind it and a third waiting one is refused. */
    P.hold = true;
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[0]), FT_OK);
    wait_holding();
    struct ft_scheduler_stats st;
    ft_scheduler_get_stats(s, &st);
    CHECK_EQ_INT(st.running, 1);
    CHECK(st.kv_usage > 0 && st.kv_usage <= 1);
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[1]), FT_OK);
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[2]), FT_OK);
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[3]), FT_EFULL);
    ft_scheduler_get_stats(s, &st);
    CHECK_EQ_INT(st.waiting, 2);
    /* A prompt that fills the context is refused before queueing. */
    struct ft_request big = req[3];
    big.n_prompt = 128;
    CHECK_EQ_INT(ft_scheduler_submit(s, &big), FT_EINVAL);
    release_hold();
    wait_done(3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(P.done_order[i], i);
        CHECK_EQ_INT(req[i].finish, FT_FINISH_LENGTH);
        CHECK_EQ_INT(req[i].metrics.completion_tokens, 6 + i);
        check_invariants(&req[i]);
        if (i > 0) /* greedy: each text starts with the shorter ones' text */
            CHECKF(!strncmp(P.text[i], P.text[0], strlen(P.text[0])), "'%s' vs '%s'", P.text[i], P.text[0]);
    }
    CHECK(req[1].metrics.queue_time_ms > req[0].metrics.queue_time_ms);
    CHECK(req[2].timing.admitted >= req[1].timing.done);
    /* The same prompt again: all but its last token came from the cache. */
    CHECK_EQ_INT(req[0].metrics.cached_prompt_tokens, 0);
    CHECK_EQ_INT(req[1].metrics.cached_prompt_tokens, n - 1);
    ft_scheduler_get_stats(s, &st);
    CHECK_EQ_INT(st.running, 0);
    CHECK_EQ_INT(st.waiting, 0);
    CHECK(st.kv_usage > 0 && st.kv_usage <= 1); /* what stays is cached */

    /* Cancelled before admission: the request ends without tokens. */
    atomic_store(&req[3].cancel, true);
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[3]), FT_OK);
    wait_done(4);
    CHECK_EQ_INT(req[3].finish, FT_FINISH_CANCELLED);
    CHECK_EQ_INT(req[3].metrics.completion_tokens, 0);
    ft_scheduler_free(s);
    for (int i = 0; i < 6; i++)
        ft_request_timing_free(&req[i].timing);
}

#define N_BATCHED 6

/* 2. Batched requests give what each gives alone (greedy), and their
 *    metrics keep the invariants. */
static void test_batched(int32_t prompts[N_BATCHED][96], const int32_t *lens) {
    static const int32_t max_tokens[N_BATCHED] = {12, 20, 7, 16, 25, 9};
    char alone[N_BATCHED][1024];
    int32_t alone_n[N_BATCHED];
    struct ft_request req[N_BATCHED];

    /* Alone: one slot, no prefix cache, one request at a time. */
    probe_reset();
    struct ft_scheduler *s = NULL;
    struct ft_scheduler_params sp = {.n_ctx = 160, .n_slots = 1, .prefix_reuse = false, .n_batch = 16,
                                     .max_queue = 8, .on_event = on_event};
    CHECK_EQ_INT(ft_scheduler_new(g_model, &sp, &s), FT_OK);
    for (int i = 0; i < N_BATCHED; i++) {
        greedy(&req[i], prompts[i], lens[i], max_tokens[i], i);
        CHECK_EQ_INT(ft_scheduler_submit(s, &req[i]), FT_OK);
        wait_done(i + 1);
        memcpy(alone[i], P.text[i], sizeof(alone[i]));
        alone_n[i] = req[i].metrics.completion_tokens;
        CHECK_EQ_INT(alone_n[i], max_tokens[i]);
        ft_request_timing_free(&req[i].timing);
    }
    ft_scheduler_free(s);

    /* Together: 4 slots, 16 tokens per step (so prompt chunks interleave
     * with decode tokens), the prefix cache on. */
    probe_reset();
    sp.n_slots = 4;
    sp.prefix_reuse = true;
    sp.cache_mib = 1;
    CHECK_EQ_INT(ft_scheduler_new(g_model, &sp, &s), FT_OK);
    /* Request 0 first, held at its first token (its prompt is in the
     * cache by then); the others join while it decodes. */
    P.hold = true;
    for (int i = 0; i < N_BATCHED; i++) {
        greedy(&req[i], prompts[i], lens[i], max_tokens[i], i);
        CHECK_EQ_INT(ft_scheduler_submit(s, &req[i]), FT_OK);
        if (i == 0)
            wait_holding();
    }
    release_hold();
    struct ft_scheduler_stats st;
    wait_done(N_BATCHED);
    int overlapped = 0;
    for (int i = 0; i < N_BATCHED; i++) {
        CHECK_EQ_INT(req[i].finish, FT_FINISH_LENGTH);
        CHECK_EQ_INT(req[i].metrics.completion_tokens, alone_n[i]);
        CHECKF(!strcmp(P.text[i], alone[i]), "request %d batched '%s' vs alone '%s'", i, P.text[i], alone[i]);
        check_invariants(&req[i]);
        for (int j = 0; j < N_BATCHED; j++)
            overlapped += j != i && req[j].timing.prefill_start < req[i].timing.token_ready[0] &&
                          req[i].timing.token_ready[0] < req[j].timing.done;
    }
    CHECK(overlapped > 0); /* requests really ran at the same time */
    /* Requests 1 and 3 share their first 40 tokens and more with request 0. */
    CHECK(req[1].metrics.cached_prompt_tokens >= 40);
    CHECK(req[3].metrics.cached_prompt_tokens >= 40);
    ft_scheduler_get_stats(s, &st);
    CHECK_EQ_INT(st.running, 0);
    ft_scheduler_free(s);
    for (int i = 0; i < N_BATCHED; i++)
        ft_request_timing_free(&req[i].timing);
}

/* 3. Cancelling one request in prefill and another in decode frees their
 *    blocks at once while a third goes on. */
static void test_cancel(const int32_t *long_prompt, int32_t n_long, const int32_t *ids, int32_t n) {
    probe_reset();
    struct ft_scheduler *s = NULL;
    struct ft_scheduler_params sp = {.n_ctx = 160, .n_slots = 3, .prefix_reuse = false, .n_batch = 8,
                                     .max_queue = 8, .on_event = on_event};
    CHECK_EQ_INT(ft_scheduler_new(g_model, &sp, &s), FT_OK);
    struct ft_request req[3];
    greedy(&req[0], ids, n, 40, 0);           /* runs to the end */
    greedy(&req[1], long_prompt, n_long, 40, 1); /* cancelled in prefill */
    greedy(&req[2], ids, n, 40, 2);           /* cancelled in decode */
    P.hold = true;
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[0]), FT_OK);
    wait_holding();
    /* Both join at the next step; request 1's prompt takes many steps of
     * 8 tokens; cancel it at request 0's second token and request 2 at
     * request 0's sixth. */
    pthread_mutex_lock(&P.lock);
    P.cancel_by = 0;
    P.cancel_at = 2;
    P.cancel_req = &req[1];
    pthread_mutex_unlock(&P.lock);
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[1]), FT_OK);
    CHECK_EQ_INT(ft_scheduler_submit(s, &req[2]), FT_OK);
    release_hold();
    wait_done(1);
    CHECK_EQ_INT(P.done_order[0], 1);
    CHECK_EQ_INT(req[1].finish, FT_FINISH_CANCELLED);
    CHECK_EQ_INT(req[1].metrics.completion_tokens, 0);
    CHECK(req[1].timing.prefill_start > 0); /* it had started its prompt */
    pthread_mutex_lock(&P.lock);
    P.cancel_at = P.n_text[0] + 4;
    P.cancel_req = &req[2];
    pthread_mutex_unlock(&P.lock);
    wait_done(2);
    CHECK_EQ_INT(P.done_order[1], 2);
    CHECK_EQ_INT(req[2].finish, FT_FINISH_CANCELLED);
    CHECK(req[2].metrics.completion_tokens >= 1 && req[2].metrics.completion_tokens < 40);
    struct ft_scheduler_stats st;
    ft_scheduler_get_stats(s, &st);
    CHECK(st.running <= 1);
    wait_done(3);
    CHECK_EQ_INT(req[0].finish, FT_FINISH_LENGTH);
    CHECK_EQ_INT(req[0].metrics.completion_tokens, 40);
    check_invariants(&req[0]);
    ft_scheduler_get_stats(s, &st);
    CHECK_EQ_INT(st.running, 0);
    CHECK(st.kv_usage == 0); /* no prefix cache: every block is free again */
    ft_scheduler_free(s);
    for (int i = 0; i < 3; i++)
        ft_request_timing_free(&req[i].timing);
}

/* 4. Freeing the scheduler with requests running and queued: each gets
 *    DONE (cancelled, or finished if it got there first) exactly once,
 *    and the DONE callback frees the request. */
static void test_free_in_flight(const int32_t *ids, int32_t n) {
    probe_reset();
    struct ft_scheduler *s = NULL;
    struct ft_scheduler_params sp = {.n_ctx = 160, .n_slots = 2, .prefix_reuse = true, .n_batch = 16,
                                     .cache_mib = 1, .max_queue = 8, .on_event = on_event};
    CHECK_EQ_INT(ft_scheduler_new(g_model, &sp, &s), FT_OK);
    P.free_on_done = true;
    P.hold = true;
    for (int i = 0; i < 5; i++) {
        struct ft_request *r = malloc(sizeof(*r));
        greedy(r, ids, n, 100, i);
        CHECK_EQ_INT(ft_scheduler_submit(s, r), FT_OK);
    }
    wait_holding();
    release_hold();
    ft_scheduler_free(s);
    CHECK_EQ_INT(P.n_done, 5);
    int seen[5] = {0};
    for (int i = 0; i < 5; i++)
        seen[P.done_order[i]]++;
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(seen[i], 1);
        CHECK(P.done_finish[i] == FT_FINISH_CANCELLED);
    }
    CHECK(P.done_tokens[0] >= 1 && P.done_tokens[0] < 100);
    CHECK_EQ_INT(P.done_tokens[4], 0); /* never admitted */
}

int main(void) {
    g_model = ft_test_load_shared_model("llama-Q8_0.gguf", 1);
    ft_clock_init();

    int32_t ids[64];
    const int32_t n = tokenize("Once upon a time, in a land far away", ids, 64);

    static int32_t prompts[N_BATCHED][96];
    int32_t lens[N_BATCHED];
    static const char *const texts[N_BATCHED] = {
        "The committee met on a rainy Tuesday to discuss the budget for the new library, and after a long "
        "and rather loud argument that lasted well into the evening about the roof they agreed to ask the town for help",
        "The committee met on a rainy Tuesday to discuss the budget for the new library, and after a long "
        "and rather loud argument that lasted well into the evening about the windows they went home",
        "Seven ships sailed north",
        "The committee met on a rainy Tuesday to discuss the budget for the new library, and after a long "
        "and rather loud argument that lasted well into the evening about the garden the mayor laughed",
        "A quiet village at the edge of the forest had one baker, two wells and a clock that always ran five "
        "minutes late, which nobody minded",
        "Mountains",
    };
    for (int i = 0; i < N_BATCHED; i++)
        lens[i] = tokenize(texts[i], prompts[i], 96);
    CHECK(lens[0] > 40 && !memcmp(prompts[0], prompts[1], 40 * sizeof(int32_t)) &&
          !memcmp(prompts[0], prompts[3], 40 * sizeof(int32_t)));

    test_fifo(ids, n);
    test_batched(prompts, lens);
    test_cancel(prompts[4], lens[4], ids, n);
    test_free_in_flight(ids, n);

    ft_model_free(g_model);
    return ft_test_finish("test_scheduler");
}
