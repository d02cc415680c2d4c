/* ft-bench-clock: what one per-request metrics stamp costs (docs/architecture.md,
 * Metrics clock).
 *
 * Times a tight loop of ft_clock_ticks() (the engine's stamp: lfence+rdtsc
 * on x86 with an invariant TSC, cntvct_el0 on ARM64, else clock_gettime),
 * of clock_gettime(CLOCK_MONOTONIC) for comparison, and of recording a
 * token stamp (ft_request_timing_token, what the engine does per generated
 * token), and prints ns per call as the median of several rounds. Then the
 * stamps a request takes (5 + one per token) against the time of one token
 * from the command line (default: 20 ms, Gemma 3 270M decode here), as the
 * share of decode time that metrics cost.
 *
 * Not a test: it asserts nothing. Usage: ft-bench-clock [TOKEN_MS]
 */
#include "ft/clock.h"
#include "ft/metrics.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROUNDS 7
#define CALLS 2000000

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static volatile uint64_t g_sink;

static double bench_ticks(void) {
    uint64_t acc = 0;
    double t0 = now_ns();
    for (int i = 0; i < CALLS; i++)
        acc += ft_clock_ticks();
    double t1 = now_ns();
    g_sink = acc;
    return (t1 - t0) / CALLS;
}

static double bench_gettime(void) {
    uint64_t acc = 0;
    struct timespec ts;
    double t0 = now_ns();
    for (int i = 0; i < CALLS; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        acc += (uint64_t)ts.tv_nsec;
    }
    double t1 = now_ns();
    g_sink = acc;
    return (t1 - t0) / CALLS;
}

/* A request's worth of token stamps, growing the array as the engine does. */
static double bench_token_stamp(void) {
    struct ft_request_timing t;
    double total = 0;
    const int per_request = 1000;
    for (int r = 0; r < CALLS / per_request; r++) {
        ft_request_timing_init(&t);
        double t0 = now_ns();
        for (int i = 0; i < per_request; i++)
            ft_request_timing_token(&t, ft_clock_ticks());
        total += now_ns() - t0;
        ft_request_timing_free(&t);
    }
    return total / CALLS;
}

static double median(double (*fn)(void)) {
    double v[ROUNDS];
    for (int i = 0; i < ROUNDS; i++)
        v[i] = fn();
    qsort(v, ROUNDS, sizeof(double), cmp);
    return v[ROUNDS / 2];
}

int main(int argc, char **argv) {
    const double token_ms = argc > 1 ? atof(argv[1]) : 20.0;
    ft_clock_init();
    const double ticks = median(bench_ticks), gettime = median(bench_gettime), token = median(bench_token_stamp);
    printf("clock source:                 %s\n", ft_clock_source());
    printf("ft_clock_ticks():             %.1f ns per stamp (median of %d x %d)\n", ticks, ROUNDS, CALLS);
    printf("clock_gettime(MONOTONIC):     %.1f ns per call\n", gettime);
    printf("token stamp (ticks + record): %.1f ns per generated token\n", token);
    const double per_token_share = token / (token_ms * 1e6);
    printf("share of a %.2f ms token:      %.2e (%.5f%%)\n", token_ms, per_token_share, per_token_share * 100);
    return 0;
}
