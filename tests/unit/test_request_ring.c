/* The ring of the last requests' metrics (http/request_ring.c), behind GET
 * /v1/requests/recent: bounded at its capacity however many requests are
 * added, newest first, `since` and `limit` applied, hostile queries
 * refused, the JSON's shape, and adds from several threads while another
 * reads. */
#include "http/request_parse.h"
#include "http/request_ring.h"

#include "ft_test.h"

#include <cjson/cJSON.h>
#include <pthread.h>

static struct ft_request_metrics metrics_with(int32_t completion) {
    struct ft_request_metrics m = {0};
    m.prompt_tokens = 10;
    m.cached_prompt_tokens = 4;
    m.prefill_tokens = 6;
    m.completion_tokens = completion;
    m.decode_tokens = completion > 0 ? completion - 1 : 0;
    m.queue_time_ms = 1.5;
    m.ttft_ms = 20;
    m.prefill_tokens_per_second = 300;
    m.decode_tokens_per_second = completion > 1 ? 25 : -1; /* undefined: null in JSON */
    m.inter_token_latency_ms = (struct ft_itl){40, 45, 50, 55};
    m.total_time_ms = 100;
    return m;
}

static void test_capacity_bounds(void) {
    CHECK(ft_request_ring_new(0) == NULL);
    CHECK(ft_request_ring_new(-5) == NULL);
    CHECK(ft_request_ring_new(FT_REQUEST_RING_MAX_CAPACITY + 1) == NULL);
    struct ft_request_ring *r = ft_request_ring_new(1);
    CHECK(r && ft_request_ring_capacity(r) == 1);
    ft_request_ring_free(r);
    ft_request_ring_free(NULL);
}

/* 20 requests into 8 slots: the newest 8, newest first, totals over all 20. */
static void test_bounded_and_ordered(void) {
    struct ft_request_ring *r = ft_request_ring_new(8);
    struct ft_request_ring_entry out[32];
    uint64_t recorded = 99, tokens = 99;
    CHECK_EQ_INT(ft_request_ring_snapshot(r, 0, out, 32, &recorded, &tokens), 0);
    CHECK(recorded == 0 && tokens == 0);
    for (int i = 1; i <= 20; i++) {
        const struct ft_request_metrics m = metrics_with(i);
        char id[32];
        snprintf(id, sizeof(id), "chatcmpl-%d", i);
        ft_request_ring_add(r, id, "/v1/chat/completions", i == 20 ? 499 : 200, "stop", i % 2, &m);
    }
    const int32_t n = ft_request_ring_snapshot(r, 0, out, 32, &recorded, &tokens);
    CHECK_EQ_INT(n, 8);
    CHECK_EQ_INT(recorded, 20);
    CHECK_EQ_INT(tokens, 20 * 21 / 2);
    for (int32_t i = 0; i < n; i++) {
        CHECK_EQ_INT(out[i].seq, 20 - i);
        CHECK_EQ_INT(out[i].metrics.completion_tokens, 20 - i);
        char id[32];
        snprintf(id, sizeof(id), "chatcmpl-%d", 20 - i);
        CHECK(!strcmp(out[i].id, id));
        CHECK(out[i].stream == ((20 - i) % 2 == 1));
        CHECK(out[i].finished_at > 1.6e9); /* Unix seconds */
    }
    CHECK_EQ_INT(out[0].status, 499);
    CHECK_EQ_INT(out[1].status, 200);
    /* max and since */
    CHECK_EQ_INT(ft_request_ring_snapshot(r, 0, out, 3, NULL, NULL), 3);
    CHECK(out[0].seq == 20 && out[2].seq == 18);
    CHECK_EQ_INT(ft_request_ring_snapshot(r, 15, out, 32, NULL, NULL), 5);
    CHECK(out[0].seq == 20 && out[4].seq == 16);
    CHECK_EQ_INT(ft_request_ring_snapshot(r, 20, out, 32, NULL, NULL), 0);
    CHECK_EQ_INT(ft_request_ring_snapshot(r, 1000, out, 32, NULL, NULL), 0);
    CHECK_EQ_INT(ft_request_ring_snapshot(r, 3, out, 32, NULL, NULL), 8); /* 4..12 are gone: the 8 held */
    CHECK_EQ_INT(ft_request_ring_snapshot(r, 0, out, 0, NULL, NULL), 0);
    ft_request_ring_free(r);
}

/* Strings are cut to their fields and always terminated; NULLs are empty. */
static void test_strings(void) {
    struct ft_request_ring *r = ft_request_ring_new(2);
    char long_id[200];
    memset(long_id, 'x', sizeof(long_id) - 1);
    long_id[sizeof(long_id) - 1] = '\0';
    ft_request_ring_add(r, long_id, "/v1/an/endpoint/path/longer/than/its/field", 200,
                        "a_finish_reason_too_long", false, NULL);
    ft_request_ring_add(r, NULL, NULL, 500, NULL, false, NULL);
    struct ft_request_ring_entry out[2];
    CHECK_EQ_INT(ft_request_ring_snapshot(r, 0, out, 2, NULL, NULL), 2);
    CHECK(out[0].id[0] == '\0' && out[0].endpoint[0] == '\0' && out[0].finish_reason[0] == '\0');
    CHECK(out[0].metrics.completion_tokens == 0);
    CHECK_EQ_INT(strlen(out[1].id), sizeof(out[1].id) - 1);
    CHECK_EQ_INT(strlen(out[1].endpoint), sizeof(out[1].endpoint) - 1);
    CHECK_EQ_INT(strlen(out[1].finish_reason), sizeof(out[1].finish_reason) - 1);
    ft_request_ring_free(r);
}

static void test_query(void) {
    static const struct {
        const char *target;
        int ok;
        int32_t limit;
        uint64_t since;
    } cases[] = {
        {"/v1/requests/recent", 1, 8, 0}, /* default: min(50, capacity) */
        {"/v1/requests/recent?", 1, 8, 0},
        {"/v1/requests/recent?limit=5", 1, 5, 0},
        {"/v1/requests/recent?limit=8", 1, 8, 0},
        {"/v1/requests/recent?limit=1&since=7", 1, 1, 7},
        {"/v1/requests/recent?since=0", 1, 8, 0},
        {"/v1/requests/recent?since=9223372036854775807", 1, 8, 9223372036854775807ull}, /* 2^63 - 1 */
        {"/v1/requests/recent?x=1&&limit=3&y&=z&limits=99&since_=x", 1, 3, 0}, /* unknown keys ignored */
        {"/v1/requests/recent?limit=007", 1, 7, 0},
        {"/v1/requests/recent?limit=9", 0, 0, 0}, /* above the capacity */
        {"/v1/requests/recent?limit=0", 0, 0, 0},
        {"/v1/requests/recent?limit=-1", 0, 0, 0},
        {"/v1/requests/recent?limit=+1", 0, 0, 0},
        {"/v1/requests/recent?limit=", 0, 0, 0},
        {"/v1/requests/recent?limit", 0, 0, 0},
        {"/v1/requests/recent?limit=1.5", 0, 0, 0},
        {"/v1/requests/recent?limit=%33", 0, 0, 0},
        {"/v1/requests/recent?limit=3 ", 0, 0, 0},
        {"/v1/requests/recent?limit=1&limit=2", 0, 0, 0},
        {"/v1/requests/recent?limit=4294967297", 0, 0, 0},       /* wraps to 1 in 32 bits */
        {"/v1/requests/recent?limit=99999999999999999999999", 0, 0, 0},
        {"/v1/requests/recent?since=9223372036854775808", 0, 0, 0}, /* 2^63 */
        {"/v1/requests/recent?since=18446744073709551616", 0, 0, 0},
        {"/v1/requests/recent?since=-1", 0, 0, 0},
        {"/v1/requests/recent?since=abc", 0, 0, 0},
        {"/v1/requests/recent?since=1&since=1", 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct ft_request_ring_query q;
        struct ft_api_error err;
        const int rc = ft_request_ring_parse_query(cases[i].target, 8, &q, &err);
        CHECKF((rc == 0) == cases[i].ok, "%s: rc %d", cases[i].target, rc);
        if (cases[i].ok && rc == 0)
            CHECKF(q.limit == cases[i].limit && q.since == cases[i].since, "%s: limit %d since %llu",
                   cases[i].target, (int)q.limit, (unsigned long long)q.since);
        if (!cases[i].ok && rc)
            CHECKF(err.status == 400 && err.message[0] && (!strcmp(err.param, "limit") || !strcmp(err.param, "since")),
                   "%s: status %d param '%s'", cases[i].target, err.status, err.param);
    }
    /* The default limit is 50 when the ring is larger. */
    struct ft_request_ring_query q;
    struct ft_api_error err;
    CHECK(ft_request_ring_parse_query("/v1/requests/recent", 256, &q, &err) == 0 &&
          q.limit == FT_REQUEST_RING_DEFAULT_LIMIT);
    CHECK(ft_request_ring_parse_query(NULL, 256, &q, &err) == 0 && q.limit == FT_REQUEST_RING_DEFAULT_LIMIT);
    /* A long hostile query is walked to its end without harm. */
    size_t n = 30000;
    char *t = malloc(n + 1);
    memcpy(t, "/r?", 3);
    for (size_t i = 3; i < n; i++)
        t[i] = "&=a"[i % 3];
    t[n] = '\0';
    CHECK(ft_request_ring_parse_query(t, 8, &q, &err) == 0 && q.limit == 8);
    free(t);
}

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static void test_json(void) {
    struct ft_request_ring *r = ft_request_ring_new(4);
    for (int i = 1; i <= 6; i++) {
        const struct ft_request_metrics m = metrics_with(i);
        ft_request_ring_add(r, "chatcmpl-x", "/v1/completions", 200, "length", true, &m);
    }
    struct ft_request_ring_gauges g = {.loaded = true, .connections = 3, .model = "tiny"};
    g.sched.running = 2;
    g.sched.waiting = 1;
    g.sched.kv_usage = 0.25;
    g.sched.kv_blocks_total = 64;
    struct ft_api_error err;
    char *s = ft_request_ring_json(r, "/v1/requests/recent?limit=3", &g, &err);
    CHECK(s != NULL);
    cJSON *o = s ? cJSON_Parse(s) : NULL;
    CHECK(o != NULL);
    if (o) {
        CHECK(cJSON_IsString(item(o, "object")) && !strcmp(item(o, "object")->valuestring, "list"));
        CHECK(cJSON_IsString(item(o, "model")) && !strcmp(item(o, "model")->valuestring, "tiny"));
        CHECK(cJSON_IsNumber(item(o, "time")) && item(o, "time")->valuedouble > 1.6e9);
        CHECK(cJSON_IsNumber(item(o, "capacity")) && item(o, "capacity")->valueint == 4);
        CHECK(cJSON_IsNumber(item(o, "recorded")) && item(o, "recorded")->valueint == 6);
        CHECK(cJSON_IsNumber(item(o, "completion_tokens_total")) && item(o, "completion_tokens_total")->valueint == 21);
        const cJSON *gj = item(o, "gauges");
        CHECK(cJSON_IsTrue(item(gj, "loaded")));
        CHECK(item(gj, "running") && item(gj, "running")->valueint == 2);
        CHECK(item(gj, "waiting") && item(gj, "waiting")->valueint == 1);
        CHECK(item(gj, "kv_cache_usage") && item(gj, "kv_cache_usage")->valuedouble == 0.25);
        CHECK(item(gj, "kv_blocks_total") && item(gj, "kv_blocks_total")->valueint == 64);
        CHECK(item(gj, "connections") && item(gj, "connections")->valueint == 3);
        const cJSON *data = item(o, "data");
        CHECK(cJSON_IsArray(data) && cJSON_GetArraySize(data) == 3);
        int expect = 6;
        const cJSON *e;
        cJSON_ArrayForEach(e, data) {
            CHECK(item(e, "seq") && item(e, "seq")->valueint == expect);
            CHECK(cJSON_IsString(item(e, "id")) && !strcmp(item(e, "id")->valuestring, "chatcmpl-x"));
            CHECK(cJSON_IsString(item(e, "endpoint")) && !strcmp(item(e, "endpoint")->valuestring, "/v1/completions"));
            CHECK(item(e, "status") && item(e, "status")->valueint == 200);
            CHECK(cJSON_IsString(item(e, "finish_reason")) && !strcmp(item(e, "finish_reason")->valuestring, "length"));
            CHECK(cJSON_IsTrue(item(e, "stream")));
            CHECK(cJSON_IsNumber(item(e, "finished_at")));
            CHECK(item(e, "prompt_tokens") && item(e, "prompt_tokens")->valueint == 10);
            CHECK(item(e, "completion_tokens") && item(e, "completion_tokens")->valueint == expect);
            const cJSON *m = item(e, "metrics");
            CHECK(cJSON_IsObject(m));
            for (const char *const *k = (const char *const[]){"ttft_ms", "queue_time_ms", "prefill_tokens",
                                                                "cached_prompt_tokens", "prefill_time_ms",
                                                                "decode_tokens", "decode_time_ms", "total_time_ms",
                                                                NULL};
                 *k; k++)
                CHECKF(cJSON_IsNumber(item(m, *k)), "metrics.%s", *k);
            CHECK(cJSON_IsNumber(item(m, "prefill_tokens_per_second")));
            CHECK(cJSON_IsNumber(item(m, "decode_tokens_per_second")));
            const cJSON *itl = item(m, "inter_token_latency_ms");
            CHECK(itl && item(itl, "p50") && item(itl, "p50")->valuedouble == 40);
            CHECK(itl && item(itl, "p99") && item(itl, "p99")->valuedouble == 50);
            expect--;
        }
        cJSON_Delete(o);
    }
    free(s);

    /* since past the newest: an empty list; the model still loading: null gauges. */
    g.loaded = false;
    s = ft_request_ring_json(r, "/v1/requests/recent?since=6", &g, &err);
    o = s ? cJSON_Parse(s) : NULL;
    CHECK(o && cJSON_GetArraySize(item(o, "data")) == 0);
    CHECK(o && cJSON_IsFalse(item(item(o, "gauges"), "loaded")));
    CHECK(o && cJSON_IsNull(item(item(o, "gauges"), "running")));
    CHECK(o && cJSON_IsNull(item(item(o, "gauges"), "kv_cache_usage")));
    cJSON_Delete(o);
    free(s);

    /* A refused query: no body, a 400 naming the parameter. */
    s = ft_request_ring_json(r, "/v1/requests/recent?limit=5", &g, &err);
    CHECK(s == NULL && err.status == 400 && !strcmp(err.param, "limit"));
    free(s);
    ft_request_ring_free(r);
}

/* Adds from several threads while another thread reads: every snapshot is
 * a run of consecutive seqs, newest first, never more than the capacity;
 * the totals count every add. (Run under ASan/UBSan in CI; the lock is
 * what keeps a reader from seeing a slot half written.) */
#define N_WRITERS 4
#define N_ADDS 5000
#define RING_CAP 16

static void *writer(void *arg) {
    struct ft_request_ring *r = arg;
    const struct ft_request_metrics m = metrics_with(3);
    for (int i = 0; i < N_ADDS; i++)
        ft_request_ring_add(r, "chatcmpl-t", "/v1/chat/completions", 200, "stop", false, &m);
    return NULL;
}

static void test_threads(void) {
    struct ft_request_ring *r = ft_request_ring_new(RING_CAP);
    pthread_t th[N_WRITERS];
    for (int i = 0; i < N_WRITERS; i++)
        pthread_create(&th[i], NULL, writer, r);
    int bad = 0, reads = 0;
    uint64_t last = 0;
    struct ft_request_ring_entry out[RING_CAP];
    for (;;) {
        uint64_t recorded = 0;
        const int32_t n = ft_request_ring_snapshot(r, 0, out, RING_CAP, &recorded, NULL);
        reads++;
        if (n > RING_CAP || recorded < last || (n && out[0].seq != recorded))
            bad++;
        for (int32_t i = 1; i < n; i++)
            if (out[i].seq != out[i - 1].seq - 1 || out[i].metrics.completion_tokens != 3 || strcmp(out[i].id, "chatcmpl-t"))
                bad++;
        last = recorded;
        if (recorded == (uint64_t)N_WRITERS * N_ADDS)
            break;
    }
    for (int i = 0; i < N_WRITERS; i++)
        pthread_join(th[i], NULL);
    uint64_t recorded = 0, tokens = 0;
    CHECK_EQ_INT(ft_request_ring_snapshot(r, 0, out, RING_CAP, &recorded, &tokens), RING_CAP);
    CHECK_EQ_INT(recorded, N_WRITERS * N_ADDS);
    CHECK_EQ_INT(tokens, 3ull * N_WRITERS * N_ADDS);
    CHECKF(bad == 0, "%d inconsistent snapshots of %d", bad, reads);
    ft_request_ring_free(r);
}

int main(void) {
    test_capacity_bounds();
    test_bounded_and_ordered();
    test_strings();
    test_query();
    test_json();
    test_threads();
    return ft_test_finish("test_request_ring");
}
