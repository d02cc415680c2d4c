/* Stop strings over streamed text, and per-request metric definitions
 * (docs/architecture.md, Metrics contract) computed from hand-made stamps. */
#include "ft/clock.h"
#include "ft/metrics.h"
#include "ft/stop_strings.h"
#include "ft_test.h"

/* Feed `pieces` to a matcher; return everything released, NUL-terminated. */
static void run_stop(const char *const *stops, int n_stops, const char *const *pieces, int n, char *out,
                     int *stopped) {
    struct ft_stop_matcher m;
    ft_stop_init(&m, stops, n_stops);
    out[0] = '\0';
    for (int i = 0; i < n && !m.stopped; i++) {
        const char *o;
        size_t ol;
        CHECK(ft_stop_push(&m, pieces[i], strlen(pieces[i]), &o, &ol) == 0);
        strncat(out, o, ol);
    }
    const char *o;
    size_t ol;
    ft_stop_flush(&m, &o, &ol);
    strncat(out, o, ol);
    *stopped = m.stopped;
    ft_stop_free(&m);
}

static void test_stop_strings(void) {
    char out[256];
    int stopped;
    const char *stops1[] = {"\n\n", "END"};
    const char *p1[] = {"Hello", " wor", "ld\n", "\nmore"};
    run_stop(stops1, 2, p1, 4, out, &stopped);
    CHECKF(!strcmp(out, "Hello world"), "got '%s'", out);
    CHECK(stopped);

    /* a stop string split over three pieces */
    const char *p2[] = {"abc E", "N", "Dxyz"};
    run_stop(stops1, 2, p2, 3, out, &stopped);
    CHECKF(!strcmp(out, "abc "), "got '%s'", out);
    CHECK(stopped);

    /* a false start is released once it stops matching */
    const char *p3[] = {"EN", "Z end"};
    run_stop(stops1, 2, p3, 2, out, &stopped);
    CHECKF(!strcmp(out, "ENZ end"), "got '%s'", out);
    CHECK(!stopped);

    /* held-back prefix at the end of generation is released by flush */
    const char *p4[] = {"tail E"};
    run_stop(stops1, 2, p4, 1, out, &stopped);
    CHECKF(!strcmp(out, "tail E"), "got '%s'", out);

    /* no stop strings: everything passes straight through */
    const char *p5[] = {"a", "b"};
    run_stop(NULL, 0, p5, 2, out, &stopped);
    CHECKF(!strcmp(out, "ab"), "got '%s'", out);
}

static void test_metrics(void) {
    /* ticks are nanoseconds here only if the clock says so; build stamps
     * from ms via the inverse of ft_clock_ticks_to_ms */
    ft_clock_init();
    double tick_ms = ft_clock_ticks_to_ms(1000000) / 1000000.0; /* ms per tick */
#define MS(x) ((uint64_t)((x) / tick_ms + 0.5))
    struct ft_request_timing t;
    ft_request_timing_init(&t);
    t.received = MS(1000);
    t.admitted = MS(1002);
    t.prefill_start = MS(1003);
    t.prefill_end = MS(1053); /* 50 ms */
    t.prompt_tokens = 120;
    t.cached_prompt_tokens = 20;
    /* 5 tokens: first at 1055, then gaps 10, 20, 10, 40 */
    uint64_t ready[] = {MS(1055), MS(1065), MS(1085), MS(1095), MS(1135)};
    for (int i = 0; i < 5; i++)
        CHECK(ft_request_timing_token(&t, ready[i]) == 0);
    t.done = MS(1140);
    struct ft_request_metrics m;
    ft_metrics_compute(&t, &m);
    CHECK_EQ_INT(m.prefill_tokens, 100);
    CHECK_EQ_INT(m.prompt_tokens, m.cached_prompt_tokens + m.prefill_tokens);
    CHECK_EQ_INT(m.completion_tokens, 5);
    CHECK_EQ_INT(m.decode_tokens, 4);
    CHECK_NEAR(m.queue_time_ms, 2.0, 1e-3);
    CHECK_NEAR(m.ttft_ms, 55.0, 1e-3);
    CHECK_NEAR(m.prefill_time_ms, 50.0, 1e-3);
    CHECK_NEAR(m.prefill_tokens_per_second, 2000.0, 0.1);
    CHECK_NEAR(m.decode_time_ms, 80.0, 1e-3);
    CHECK_NEAR(m.decode_tokens_per_second, 50.0, 0.01);
    CHECK_NEAR(m.inter_token_latency_ms.p50, 10.0, 1e-3);  /* sorted gaps 10 10 20 40 */
    CHECK_NEAR(m.inter_token_latency_ms.p90, 40.0, 1e-3);
    CHECK_NEAR(m.inter_token_latency_ms.max, 40.0, 1e-3);
    CHECK_NEAR(m.total_time_ms, 140.0, 1e-3);
    CHECK(m.queue_time_ms <= m.ttft_ms && m.ttft_ms <= m.total_time_ms);
    char buf[1024];
    CHECK(ft_metrics_format_text(&m, buf, sizeof(buf)) > 0);
    CHECK(strstr(buf, "2000.00 tokens/s") != NULL);
    ft_request_timing_free(&t);

    /* one token only: no decode, rates null, no gaps */
    ft_request_timing_init(&t);
    t.received = MS(0);
    t.prefill_start = MS(1);
    t.prefill_end = MS(1);
    t.prompt_tokens = 3;
    CHECK(ft_request_timing_token(&t, MS(2)) == 0);
    t.done = MS(3);
    ft_metrics_compute(&t, &m);
    CHECK_EQ_INT(m.decode_tokens, 0);
    CHECK(m.decode_tokens_per_second < 0);
    CHECK(m.prefill_tokens_per_second < 0); /* zero prefill time */
    CHECK_NEAR(m.inter_token_latency_ms.max, 0.0, 0);
    ft_request_timing_free(&t);
#undef MS
}

int main(void) {
    test_stop_strings();
    test_metrics();
    return ft_test_finish("test_stop_metrics");
}
