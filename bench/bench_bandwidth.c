/* ft-bench-bandwidth: the machine's DRAM read bandwidth, the yardstick of
 * decode (docs/architecture.md, Models and the forward pass: decode should
 * reach >= 85% of it).
 *
 * Decode reads every weight byte once per token, so tokens/s times weight
 * bytes per token cannot exceed the rate at which the cores can stream
 * memory they do not find in any cache. This program measures that rate
 * the way decode reads: each of T threads sums its own contiguous slice of
 * a buffer far larger than the last-level cache, 64 bytes per step with
 * several independent accumulators, and the best of several passes counts.
 * It prints GB/s (10^9 bytes) for 1..T threads, without and with software
 * prefetch (the kernels prefetch; the better column is the yardstick).
 *
 * Not a test: it asserts nothing. Usage:
 *   ft-bench-bandwidth [-t MAX_THREADS] [--mib SIZE] [--passes N]
 */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Software prefetch distance: 4 KiB ahead, as the decode kernels do
 * (simd/kernels.h FT_PREFETCH_DIST). A prefetch never faults, so running
 * past the end of a slice is harmless. */
#define PREFETCH_WORDS (4096 / 8)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct slice {
    const uint64_t *p;
    size_t n; /* uint64 words, a multiple of 8 */
    int prefetch;
    uint64_t sum;
    double t_start, t_end; /* this thread's own clock readings */
    pthread_barrier_t *start;
};

/* Eight independent sums of one cache line per step: enough loads in
 * flight for the prefetchers to keep the line fill buffers busy. */
static void *read_slice(void *arg) {
    struct slice *s = arg;
    pthread_barrier_wait(s->start);
    s->t_start = now();
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (size_t i = 0; i < s->n; i += 8) {
        if (s->prefetch)
            __builtin_prefetch(s->p + i + PREFETCH_WORDS);
        a0 += s->p[i + 0];
        a1 += s->p[i + 1];
        a2 += s->p[i + 2];
        a3 += s->p[i + 3];
        a4 += s->p[i + 4];
        a5 += s->p[i + 5];
        a6 += s->p[i + 6];
        a7 += s->p[i + 7];
    }
    s->sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    s->t_end = now();
    return NULL;
}

/* One pass of `threads` threads over the buffer; seconds from the first
 * thread's start to the last thread's end, each read by the readers
 * themselves: under a real-time policy (chrt -f) the readers may run to
 * their end before this thread is scheduled again, so its own clock
 * readings would time nothing. */
static double pass(const uint64_t *buf, size_t words, int threads, int prefetch, uint64_t *sink) {
    pthread_t tid[64];
    struct slice sl[64];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    const size_t per = words / (size_t)threads / 8 * 8;
    for (int i = 0; i < threads; i++) {
        sl[i] = (struct slice){.p = buf + (size_t)i * per, .n = per, .prefetch = prefetch, .start = &start};
        if (pthread_create(&tid[i], NULL, read_slice, &sl[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    }
    pthread_barrier_wait(&start);
    double t0 = 0.0, t1 = 0.0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        *sink += sl[i].sum;
        t0 = i == 0 || sl[i].t_start < t0 ? sl[i].t_start : t0;
        t1 = i == 0 || sl[i].t_end > t1 ? sl[i].t_end : t1;
    }
    const double dt = t1 - t0;
    pthread_barrier_destroy(&start);
    return dt;
}

int main(int argc, char **argv) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int max_threads = ncpu > 0 ? (int)ncpu : 1;
    size_t mib = 1024;
    int passes = 5;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-t") || !strcmp(argv[i], "--threads")) && i + 1 < argc)
            max_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            mib = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--passes") && i + 1 < argc)
            passes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: %s [-t MAX_THREADS] [--mib SIZE] [--passes N]\n"
                   "Streams a SIZE MiB buffer (default 1024) with 1..MAX_THREADS threads and prints the\n"
                   "best read bandwidth of N passes (default 5) in GB/s.\n",
                   argv[0]);
            return 0;
        } else {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", argv[0], argv[i]);
            return 2;
        }
    }
    if (max_threads < 1 || max_threads > 64 || mib < 64 || mib > (1u << 20) || passes < 1 || passes > 1000) {
        fprintf(stderr, "%s: need 1 <= threads <= 64, 64 <= MiB <= 1048576, 1 <= passes <= 1000\n", argv[0]);
        return 2;
    }
    const size_t bytes = mib << 20;
    uint64_t *buf = malloc(bytes);
    if (!buf) {
        fprintf(stderr, "%s: cannot allocate %zu MiB\n", argv[0], mib);
        return 1;
    }
    /* touch every page, with values the compiler cannot predict */
    for (size_t i = 0; i < bytes / 8; i++)
        buf[i] = i * 0x9e3779b97f4a7c15ull;

    uint64_t sink = 0;
    printf("read bandwidth, %zu MiB buffer, best of %d passes\n", mib, passes);
    printf("%7s %12s %16s\n", "threads", "plain GB/s", "prefetch GB/s");
    for (int t = 1; t <= max_threads; t++) {
        double best[2] = {1e30, 1e30};
        for (int p = 0; p < passes; p++) {
            for (int pf = 0; pf < 2; pf++) { /* interleaved: noise hits both alike */
                const double dt = pass(buf, bytes / 8, t, pf, &sink);
                if (dt < best[pf])
                    best[pf] = dt;
            }
        }
        const double read = (double)(bytes / 8 / (size_t)t / 8 * 8 * 8 * (size_t)t);
        printf("%7d %12.2f %16.2f\n", t, read / best[0] * 1e-9, read / best[1] * 1e-9);
    }
    free(buf);
    return sink == 42 ? 3 : 0; /* keep the sums alive */
}
