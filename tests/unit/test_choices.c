/* Log-probabilities and requests with several choices (the API's logprobs
 * and n): ft_logprobs_compute against a plain double-precision log-softmax
 * and a full sort; the metrics of a request whose choices interleave;
 * ft_prefix_cache_fork (blocks shared, the partial block copied on write,
 * the continuation the same as a cold run); and the scheduler running n
 * choices of one prompt (greedy choices equal the n = 1 answer, seeded
 * choice i equals n = 1 with seed + i, one prefill, an event with the
 * token's logprobs per token). Tiny llama models from ../shared. */
#include "ft_test_model.h"

#include "ft/clock.h"
#include "ft/common.h"
#include "ft/logprobs.h"
#include "ft/metrics.h"
#include "ft/prefix_cache.h"
#include "ft/scheduler.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

/* ---- ft_logprobs_compute ---------------------------------------------------- */

static uint64_t rng = 0x1234567;
static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static const float *g_sort_logits;
static int cmp_rank(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (g_sort_logits[x] != g_sort_logits[y])
        return g_sort_logits[x] > g_sort_logits[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static void check_logprobs(const float *l, int32_t n, int32_t token, int32_t k) {
    double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < n; i++)
        mx = fmax(mx, l[i]);
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)l[i] - mx);
    const double lse = mx + log(sum);
    struct ft_token_logprob lp;
    ft_logprobs_compute(l, n, token, k, &lp);
    CHECK_EQ_INT(lp.token, token);
    CHECK_NEAR(lp.logprob, l[token] - lse, 1e-5);
    int32_t *order = malloc(sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++)
        order[i] = i;
    g_sort_logits = l;
    qsort(order, (size_t)n, sizeof(int32_t), cmp_rank);
    const int32_t want = k < 0 ? 0 : k > FT_MAX_TOP_LOGPROBS ? FT_MAX_TOP_LOGPROBS : k > n ? n : k;
    CHECK_EQ_INT(lp.n_top, want);
    for (int32_t j = 0; j < lp.n_top; j++) {
        CHECKF(lp.top_token[j] == order[j], "k=%d rank %d: %d, want %d", k, j, lp.top_token[j], order[j]);
        CHECK_NEAR(lp.top_logprob[j], l[order[j]] - lse, 1e-5);
    }
    free(order);
}

static void test_logprobs(void) {
    enum { N = 262144 + 5 }; /* Gemma 3's vocabulary, and a tail past the 8-wide loop */
    float *l = malloc(sizeof(float) * N);
    for (int32_t i = 0; i < N; i++)
        l[i] = (float)(urand() * 30.0 - 20.0);
    check_logprobs(l, N, 7, 20);
    check_logprobs(l, N, N - 1, 5);
    check_logprobs(l, N, 0, 0);
    check_logprobs(l, N, 3, 25); /* clamped to 20 */
    /* Ties: the lower id ranks first; coarse values make many. */
    for (int32_t i = 0; i < 1000; i++)
        l[i] = (float)(int)(urand() * 6.0);
    check_logprobs(l, 1000, 999, 20);
    check_logprobs(l, 3, 1, 20); /* fewer tokens than asked for */
    /* The values are log-probabilities: they sum to 1. */
    for (int32_t i = 0; i < 10; i++)
        l[i] = (float)i;
    struct ft_token_logprob lp;
    ft_logprobs_compute(l, 10, 9, 10, &lp);
    double p = 0;
    for (int32_t j = 0; j < lp.n_top; j++)
        p += exp(lp.top_logprob[j]);
    CHECK_NEAR(p, 1.0, 1e-6);
    CHECK_EQ_INT(lp.top_token[0], 9);
    CHECK_NEAR(lp.logprob, lp.top_logprob[0], 0);
    free(l);
}

/* ---- metrics of several choices --------------------------------------------- */

static void test_metrics(void) {
    ft_clock_init();
    const uint64_t ms = (uint64_t)(1e9 / ft_clock_ticks_to_ns(1000000000ull) * 1e6); /* ticks per ms */
    struct ft_request_timing t;
    ft_request_timing_init(&t);
    t.received = 1000 * ms;
    t.admitted = 1001 * ms;
    t.prefill_start = 1002 * ms;
    t.prefill_end = 1010 * ms;
    t.done = 1100 * ms;
    t.prompt_tokens = 20;
    t.cached_prompt_tokens = 4;
    /* choice 0: 1011, 1020, 1030; choice 1: 1012, 1014; choice 2: 1013 */
    const uint64_t stamps[] = {1011, 1020, 1030, 1012, 1014, 1013};
    for (int i = 0; i < 6; i++)
        CHECK_EQ_INT(ft_request_timing_token(&t, stamps[i] * ms), FT_OK);
    t.n_choices = 3;
    t.choice_tokens[0] = 3;
    t.choice_tokens[1] = 2;
    t.choice_tokens[2] = 1;
    const bool gap[] = {false, true, true, false, true, false};
    for (int i = 0; i < 6; i++)
        CHECKF(ft_request_timing_is_gap(&t, i) == gap[i], "token %d", i);
    struct ft_request_metrics m;
    ft_metrics_compute(&t, &m);
    CHECK_EQ_INT(m.completion_tokens, 6);
    CHECK_EQ_INT(m.decode_tokens, 3); /* 6 tokens - 3 first tokens from the prefill */
    CHECK_EQ_INT(m.prefill_tokens, 16);
    CHECK_NEAR(m.ttft_ms, 11.0, 0.05);       /* the first token of any choice */
    CHECK_NEAR(m.decode_time_ms, 19.0, 0.05); /* 1011 .. 1030 */
    CHECK_NEAR(m.decode_tokens_per_second, 3 / 0.019, 0.5);
    /* gaps 9, 10 (choice 0) and 2 (choice 1); none across choices */
    CHECK_NEAR(m.inter_token_latency_ms.max, 10.0, 0.05);
    CHECK_NEAR(m.inter_token_latency_ms.p50, 9.0, 0.05);
    /* One choice is one sequence, as before. */
    t.n_choices = 0;
    ft_metrics_compute(&t, &m);
    CHECK_EQ_INT(m.decode_tokens, 5);
    ft_request_timing_free(&t);
}

/* ---- ft_prefix_cache_fork --------------------------------------------------- */

static struct ft_model *g_model;

static int32_t greedy_next(const float *logits) {
    const int32_t n = ft_model_hparams(g_model)->n_vocab;
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* Evaluate tokens[0..n) on seq from its current length; the last row's
 * greedy token. */
static int32_t eval(struct ft_kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n, float *logits) {
    int32_t pos[64], seqs[64];
    const int32_t p0 = ft_kv_cache_seq_len(kv, seq);
    for (int32_t i = 0; i < n; i++) {
        pos[i] = p0 + i;
        seqs[i] = seq;
    }
    const struct ft_batch b = {.n_tokens = n, .token = tokens, .pos = pos, .seq_id = seqs};
    CHECK_EQ_INT(ft_model_forward(g_model, kv, &b, logits), FT_OK);
    return greedy_next(logits);
}

static void test_fork(const int32_t *prompt, int32_t n) {
    CHECK(n > FT_KV_BLOCK_TOKENS && n % FT_KV_BLOCK_TOKENS != 0 && n < 64);
    float *logits = malloc(sizeof(float) * (size_t)ft_model_hparams(g_model)->n_vocab);
    struct ft_kv_cache *kv = NULL;
    struct ft_prefix_cache *pc = NULL;
    CHECK_EQ_INT(ft_kv_cache_new(g_model, 128, 3, &kv), FT_OK);
    CHECK_EQ_INT(ft_prefix_cache_new(kv, true, &pc), FT_OK);

    /* The cold answer: 6 greedy tokens on sequence 2. */
    int32_t cold[6];
    cold[0] = eval(kv, 2, prompt, n, logits);
    for (int i = 1; i < 6; i++)
        cold[i] = eval(kv, 2, &cold[i - 1], 1, logits);

    int32_t first = eval(kv, 0, prompt, n, logits);
    CHECK_EQ_INT(first, cold[0]);
    ft_prefix_cache_update(pc, 0, prompt, n, NULL, 0);
    CHECK(ft_prefix_cache_fork(pc, 0, 0, n) == FT_EINVAL);
    CHECK(ft_prefix_cache_fork(pc, 1, 0, n + 1) == FT_EINVAL);
    CHECK_EQ_INT(ft_prefix_cache_fork(pc, 1, 0, n), FT_OK);
    CHECK(ft_prefix_cache_fork(pc, 1, 0, n) == FT_EINVAL); /* not empty any more */
    CHECK_EQ_INT(ft_kv_cache_seq_len(kv, 1), n);
    const int32_t nb = (n + FT_KV_BLOCK_TOKENS - 1) / FT_KV_BLOCK_TOKENS;
    for (int32_t i = 0; i < nb; i++) {
        CHECK_EQ_INT(ft_kv_cache_seq_block(kv, 1, i), ft_kv_cache_seq_block(kv, 0, i));
        CHECK_EQ_INT(ft_kv_cache_block_seq_refs(kv, ft_kv_cache_seq_block(kv, 0, i)), 2);
    }
    const int32_t free_before = ft_kv_cache_blocks_free(kv);
    /* Both continue: the shared partial block is copied on the first write. */
    int32_t a[6] = {first}, b[6] = {first};
    for (int i = 1; i < 6; i++) {
        b[i] = eval(kv, 1, &b[i - 1], 1, logits);
        a[i] = eval(kv, 0, &a[i - 1], 1, logits);
    }
    CHECK(ft_kv_cache_seq_block(kv, 1, nb - 1) != ft_kv_cache_seq_block(kv, 0, nb - 1));
    for (int32_t i = 0; i < nb - 1; i++)
        CHECK_EQ_INT(ft_kv_cache_seq_block(kv, 1, i), ft_kv_cache_seq_block(kv, 0, i));
    CHECK(ft_kv_cache_blocks_free(kv) < free_before);
    CHECKF(!memcmp(a, cold, sizeof(a)) && !memcmp(b, cold, sizeof(b)), "forked continuations differ");
    ft_prefix_cache_free(pc);
    ft_kv_cache_free(kv);
    free(logits);
}

/* ---- the scheduler with n choices ------------------------------------------- */

struct probe {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int n_done;
    char text[FT_MAX_CHOICES][1024];
    int n_events[FT_MAX_CHOICES];
    int n_logprob_events[FT_MAX_CHOICES];
};
static struct probe P = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void on_event(void *ud, struct ft_request *r, enum ft_event ev, const char *text, size_t len) {
    (void)ud;
    pthread_mutex_lock(&P.lock);
    if (ev == FT_EVENT_TEXT) {
        const int c = r->event_choice;
        CHECK(c >= 0 && c < FT_MAX(r->n_choices, 1));
        const size_t have = strlen(P.text[c]);
        if (have + len < sizeof(P.text[c]))
            memcpy(P.text[c] + have, text, len), P.text[c][have + len] = '\0';
        P.n_events[c]++;
        if (r->event_logprob) {
            P.n_logprob_events[c]++;
            CHECK(r->event_logprob->logprob <= 0 && r->event_logprob->n_top == r->params.top_logprobs);
        }
    } else {
        P.n_done++;
        pthread_cond_broadcast(&P.cond);
    }
    pthread_mutex_unlock(&P.lock);
}

static void run(struct ft_scheduler *s, struct ft_request *r) {
    pthread_mutex_lock(&P.lock);
    P.n_done = 0;
    memset(P.text, 0, sizeof(P.text));
    memset(P.n_events, 0, sizeof(P.n_events));
    memset(P.n_logprob_events, 0, sizeof(P.n_logprob_events));
    pthread_mutex_unlock(&P.lock);
    r->received = ft_clock_ticks();
    CHECK_EQ_INT(ft_scheduler_submit(s, r), FT_OK);
    pthread_mutex_lock(&P.lock);
    while (!P.n_done)
        pthread_cond_wait(&P.cond, &P.lock);
    pthread_mutex_unlock(&P.lock);
}

static void request(struct ft_request *r, const int32_t *prompt, int32_t n, int32_t n_choices, float temp,
                    uint64_t seed) {
    ft_request_timing_free(&r->timing);
    memset(r, 0, sizeof(*r));
    r->prompt = prompt;
    r->n_prompt = n;
    r->n_choices = n_choices;
    r->params.sampling = ft_sampler_default_params();
    r->params.sampling.temperature = temp;
    r->params.sampling.seed = seed;
    r->params.max_tokens = 10;
    r->params.ignore_eos = true;
}

static void test_scheduler(const int32_t *prompt, int32_t n) {
    struct ft_scheduler *s = NULL;
    const struct ft_scheduler_params sp = {.n_ctx = 128, .n_slots = 3, .prefix_reuse = false, .n_batch = 64,
                                           .cache_mib = 0, .max_queue = 4, .on_event = on_event};
    CHECK_EQ_INT(ft_scheduler_new(g_model, &sp, &s), FT_OK);
    struct ft_request r = {0};

    request(&r, prompt, n, 4, 0, 1); /* more choices than slots */
    CHECK(ft_scheduler_submit(s, &r) == FT_EINVAL);

    request(&r, prompt, n, 1, 0, 1);
    run(s, &r);
    char greedy[1024];
    snprintf(greedy, sizeof(greedy), "%s", P.text[0]);
    CHECK(strlen(greedy) > 0);

    request(&r, prompt, n, 3, 0, 1);
    r.params.logprobs = true;
    r.params.top_logprobs = 2;
    run(s, &r);
    CHECK(r.finish == FT_FINISH_LENGTH);
    for (int c = 0; c < 3; c++) {
        CHECKF(!strcmp(P.text[c], greedy), "greedy choice %d: '%s' vs '%s'", c, P.text[c], greedy);
        CHECK(r.choice_finish[c] == FT_FINISH_LENGTH);
        CHECK_EQ_INT(P.n_logprob_events[c], 10); /* one per token, text or not */
    }
    CHECK_EQ_INT(r.metrics.completion_tokens, 30);
    CHECK_EQ_INT(r.metrics.decode_tokens, 27);
    CHECK_EQ_INT(r.metrics.prefill_tokens, n); /* prefilled once */
    CHECK_EQ_INT(r.timing.n_choices, 3);

    /* Seeded: choice c samples as n = 1 with seed + c. */
    request(&r, prompt, n, 3, 1.0f, 77);
    run(s, &r);
    char texts[3][1024];
    for (int c = 0; c < 3; c++) {
        snprintf(texts[c], sizeof(texts[c]), "%s", P.text[c]);
        CHECK_EQ_INT(P.n_logprob_events[c], 0);
    }
    for (int c = 0; c < 3; c++) {
        request(&r, prompt, n, 1, 1.0f, 77 + (uint64_t)c);
        run(s, &r);
        CHECKF(!strcmp(P.text[0], texts[c]), "seeded choice %d: '%s' vs '%s'", c, texts[c], P.text[0]);
    }
    CHECK(strcmp(texts[0], texts[1]) || strcmp(texts[1], texts[2]));

    /* max_tokens 1: every choice ends at its first token, from the prefill. */
    request(&r, prompt, n, 3, 1.0f, 5);
    r.params.max_tokens = 1;
    run(s, &r);
    CHECK_EQ_INT(r.metrics.completion_tokens, 3);
    CHECK_EQ_INT(r.metrics.decode_tokens, 0);
    CHECK(r.metrics.decode_tokens_per_second < 0);

    ft_request_timing_free(&r.timing);
    ft_scheduler_free(s);
}

int main(void) {
    test_logprobs();
    test_metrics();
    g_model = ft_test_load_shared_model("llama-F16.gguf", 1);
    int32_t ids[64];
    const int32_t n = ft_test_tokenize(g_model, "The old lighthouse keeper climbed the stairs every evening to light",
                                       ids, 64);
    test_fork(ids, n);
    test_scheduler(ids, n);
    ft_model_free(g_model);
    return ft_test_finish("test_choices");
}
