/* ft-bench-threadpool: what one ft_threadpool_run() costs beyond its work.
 *
 * Decode issues a few hundred small tasks per token, so dispatch (waking the
 * workers) plus the closing barrier (waiting for the last one) is paid
 * hundreds of times per token. For each thread count it times every run()
 * of a task that does nothing, in three situations:
 *   b2b:   back to back (workers stay hot);
 *   gap:   ~2 us of work on the caller alone before each run (the serial
 *          bits of a forward pass between two parallel ops);
 *   idle:  after 5 ms of idleness, long enough for the workers to have
 *          gone to sleep (the first op after a pause);
 * and prints the median and 99th percentile in ns per run (the median is
 * what a run costs; on a busy machine the tail is the scheduler's), plus
 * the mean of b2b. Only the public interface is used, so the same file
 * measures any version of the pool. Not a test: it asserts nothing. Usage:
 *   ft-bench-threadpool [-t 1,2] [--runs N]
 */
#include "ft/common.h"
#include "ft/threadpool.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_COUNTS 16

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void empty_task(void *ctx, int ith, int nth) {
    (void)ctx;
    (void)ith;
    (void)nth;
}

/* Busy work the compiler cannot drop: about `iters` dependent multiply-adds. */
static volatile uint64_t g_sink;
static void caller_work(int iters) {
    uint64_t x = g_sink;
    for (int i = 0; i < iters; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    g_sink = x;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of v[0..n) (sorts v). */
static double quantile(double *v, int n, double q) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[(int)(q * (n - 1) + 0.5)];
}

/* Iterations of caller_work that take about `ns`. */
static int calibrate_work(double ns) {
    int iters = 1000;
    for (int round = 0; round < 5; round++) {
        double t0 = now_ns();
        for (int i = 0; i < 100; i++)
            caller_work(iters);
        double per = (now_ns() - t0) / 100.0;
        if (per > 0)
            iters = (int)((double)iters * ns / per) + 1;
    }
    return iters;
}

static void sleep_ns(long ns) {
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
}

/* Time `n` runs, each preceded by `work` iterations or `idle_ns` of sleep. */
static void time_runs(struct ft_threadpool *p, int n, int work, long idle_ns, double *out) {
    for (int i = 0; i < n; i++) {
        if (work)
            caller_work(work);
        if (idle_ns)
            sleep_ns(idle_ns);
        const double a = now_ns();
        ft_threadpool_run(p, empty_task, NULL);
        out[i] = now_ns() - a;
    }
}

int main(int argc, char **argv) {
    int counts[MAX_COUNTS] = {1, 2};
    int n_counts = 2, runs = 100000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) {
            n_counts = 0;
            for (char *s = argv[++i]; *s && n_counts < MAX_COUNTS;) {
                counts[n_counts++] = (int)strtol(s, &s, 10);
                if (*s == ',')
                    s++;
                else if (*s)
                    break;
            }
        } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            runs = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [-t 1,2] [--runs N]\n", argv[0]);
            return 2;
        }
    }
    if (runs < 100 || runs > 10000000 || n_counts < 1) {
        fprintf(stderr, "%s: bad arguments (--runs 100..10000000)\n", argv[0]);
        return 2;
    }
    const int gap_iters = calibrate_work(2000.0);
    const int idle_runs = 200;
    double *t = malloc((size_t)runs * sizeof(double));
    if (!t)
        return 1;
    printf("ns per run() of an empty task; b2b/gap: %d runs, idle: %d runs\n", runs, idle_runs);
    printf("%-8s %9s %9s %9s %9s %9s %9s %9s\n", "threads", "b2b mean", "b2b p50", "b2b p99", "gap p50",
           "gap p99", "idle p50", "idle p99");
    for (int c = 0; c < n_counts; c++) {
        struct ft_threadpool *p = NULL;
        if (ft_threadpool_new(counts[c], &p) != FT_OK) {
            fprintf(stderr, "%s: cannot make a pool of %d threads\n", argv[0], counts[c]);
            free(t);
            return 1;
        }
        for (int i = 0; i < 1000; i++) /* warm up: threads started and spinning */
            ft_threadpool_run(p, empty_task, NULL);
        double t0 = now_ns();
        for (int i = 0; i < runs; i++)
            ft_threadpool_run(p, empty_task, NULL);
        const double mean = (now_ns() - t0) / runs;
        time_runs(p, runs, 0, 0, t);
        const double b50 = quantile(t, runs, 0.5), b99 = quantile(t, runs, 0.99);
        time_runs(p, runs, gap_iters, 0, t);
        const double g50 = quantile(t, runs, 0.5), g99 = quantile(t, runs, 0.99);
        time_runs(p, idle_runs, 0, 5000000, t);
        const double i50 = quantile(t, idle_runs, 0.5), i99 = quantile(t, idle_runs, 0.99);
        printf("%-8d %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f\n", ft_threadpool_n_threads(p), mean, b50, b99,
               g50, g99, i50, i99);
        fflush(stdout);
        ft_threadpool_free(p);
    }
    free(t);
    return 0;
}
