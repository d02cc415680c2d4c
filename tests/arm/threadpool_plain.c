/* A plain pthread version of the thread pool's API (engine/include/ft/threadpool.h)
 * for the aarch64 cross build of tests/arm, which has libc and nothing else:
 * the engine's pool (engine/runtime/threadpool.c) places its threads with
 * hwloc, which the cross toolchain has no library of. It is enough for
 * what the cross-built tests run on a pool -- engine/model/attention.c's
 * shares (test_attention) -- and keeps the API's contract: run() calls
 * fn(ctx, ith, nth) once for every ith, share 0 on the caller, the others
 * each on a thread of their own, and returns when all have finished, their
 * writes visible (pthread_join). No pinning, no NUMA: threads are started
 * per run(), which costs microseconds that no test here measures. */
#include "ft/threadpool.h"

#include "ft/common.h"

#include <pthread.h>
#include <stdlib.h>

struct ft_threadpool {
    int n_threads;
};

struct share {
    ft_task_fn fn;
    void *ctx;
    int ith, nth;
};

static void *share_main(void *arg) {
    const struct share *s = arg;
    s->fn(s->ctx, s->ith, s->nth);
    return NULL;
}

int ft_threadpool_new(int n_threads, struct ft_threadpool **out) {
    *out = NULL;
    struct ft_threadpool *p = malloc(sizeof(*p));
    if (!p)
        return FT_ENOMEM;
    p->n_threads = n_threads > 0 ? FT_MIN(n_threads, 64) : 2;
    *out = p;
    return FT_OK;
}

void ft_threadpool_free(struct ft_threadpool *p) { free(p); }

int ft_threadpool_n_threads(const struct ft_threadpool *p) { return p ? p->n_threads : 1; }

void ft_threadpool_run(struct ft_threadpool *p, ft_task_fn fn, void *ctx) {
    const int nth = ft_threadpool_n_threads(p);
    struct share shares[64];
    pthread_t threads[64];
    bool started[64] = {false};
    for (int i = 1; i < nth; i++) {
        shares[i] = (struct share){fn, ctx, i, nth};
        started[i] = pthread_create(&threads[i], NULL, share_main, &shares[i]) == 0;
    }
    fn(ctx, 0, nth);
    for (int i = 1; i < nth; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        else
            fn(ctx, i, nth); /* no thread for it: the caller runs the share */
    }
}

int ft_threadpool_current_node(void) { return -1; }
