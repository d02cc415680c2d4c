/* ft-bench-threadpool: what one ft_threadpool_run() costs beyond its work.
 *
 * Decode issues a few hundred small tasks per token, so dispatch (waking the
 * workers) plus the closing barrier (waiting for the last one) is paid
 * hundreds of times per token. For each thread count it prints the median
 * over several trials of:
 *   empty:   ns per run() of a task that does nothing, back to back;
 *   gap:     the same with ~2 us of work on the caller alone between runs
 *            (the serial bits of a forward pass between two parallel ops);
 *   idle:    ns per run() after the pool has been idle for 2 ms, long enough
 *            for the workers to have gone to sleep (the first op of a token
 *            after sampling, or of a request after a pause).
 * Only the public interface is used, so the same file measures any version
 * of the pool. Not a test: it asserts nothing. Usage:
 *   ft-bench-threadpool [-t 1,2] [--runs N] [--trials N]
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

/* Busy work the compiler cannot drop: about `iters` dependent adds. */
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

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

int main(int argc, char **argv) {
    int counts[MAX_COUNTS] = {1, 2};
    int n_counts = 2, runs = 20000, trials = 7;
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
        } else if (!strcmp(argv[i], "--trials") && i + 1 < argc) {
            trials = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [-t 1,2] [--runs N] [--trials N]\n", argv[0]);
            return 2;
        }
    }
    if (runs < 1 || trials < 1 || trials > 101 || n_counts < 1) {
        fprintf(stderr, "%s: bad arguments\n", argv[0]);
        return 2;
    }
    const int gap_iters = calibrate_work(2000.0);
    const int idle_runs = 200;
    printf("%-8s %14s %14s %14s   (median of %d trials; empty/gap: %d runs, idle: %d runs)\n", "threads",
           "empty ns/run", "gap ns/run", "idle ns/run", trials, runs, idle_runs);
    for (int c = 0; c < n_counts; c++) {
        struct ft_threadpool *p = NULL;
        if (ft_threadpool_new(counts[c], &p) != FT_OK) {
            fprintf(stderr, "%s: cannot make a pool of %d threads\n", argv[0], counts[c]);
            return 1;
        }
        for (int i = 0; i < 1000; i++) /* warm up: threads started and spinning */
            ft_threadpool_run(p, empty_task, NULL);
        double empty[101], gap[101], idle[101];
        for (int t = 0; t < trials; t++) {
            double t0 = now_ns();
            for (int i = 0; i < runs; i++)
                ft_threadpool_run(p, empty_task, NULL);
            empty[t] = (now_ns() - t0) / runs;

            /* Time of the runs alone: the caller's serial work is outside. */
            double in_run = 0;
            for (int i = 0; i < runs; i++) {
                caller_work(gap_iters);
                double a = now_ns();
                ft_threadpool_run(p, empty_task, NULL);
                in_run += now_ns() - a;
            }
            gap[t] = in_run / runs;

            double in_idle = 0;
            for (int i = 0; i < idle_runs; i++) {
                sleep_ns(2000000);
                double a = now_ns();
                ft_threadpool_run(p, empty_task, NULL);
                in_idle += now_ns() - a;
            }
            idle[t] = in_idle / idle_runs;
        }
        printf("%-8d %14.0f %14.0f %14.0f\n", ft_threadpool_n_threads(p), median(empty, trials),
               median(gap, trials), median(idle, trials));
        fflush(stdout);
        ft_threadpool_free(p);
    }
    return 0;
}
