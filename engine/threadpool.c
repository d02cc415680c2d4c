/* Compute thread pool: plain pthreads, the caller is thread 0.
 *
 * ft_threadpool_run() publishes a task by bumping a generation counter;
 * workers spin on it for a short while (a forward pass issues hundreds of
 * small tasks per token, and a sleep/wake round trip per task would cost
 * more than the work), then sleep on a condition variable. The caller runs
 * its share and spins until every worker has reported done. hwloc pinning
 * and NUMA placement come later behind this same interface.
 *
 * What must stay true: a worker reads fn/ctx only after it has seen the new
 * generation (acquire), and the caller reads the results only after it has
 * seen n_done reach nth - 1 (acquire on the workers' release increments). */
#include "ft/threadpool.h"
#include "ft/common.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FT_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define FT_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define FT_CPU_RELAX() ((void)0)
#endif

/* Spin iterations before a worker sleeps (roughly tens of microseconds). */
#define FT_POOL_SPIN 20000

struct ft_worker {
    struct ft_threadpool *pool;
    int ith;
    pthread_t thread;
};

struct ft_threadpool {
    int n_threads;
    struct ft_worker *workers; /* n_threads - 1 of them; thread 0 is the caller */

    ft_task_fn fn;
    void *ctx;
    atomic_uint generation; /* bumped once per task */
    atomic_int n_done;      /* workers finished with the current task */
    atomic_bool stop;

    pthread_mutex_t mutex; /* guards sleeping + the condition variable */
    pthread_cond_t cond;
    int n_sleeping;
};

static void *worker_main(void *arg) {
    struct ft_worker *w = arg;
    struct ft_threadpool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen = atomic_load_explicit(&p->generation, memory_order_acquire);
        for (int spin = 0; gen == seen && spin < FT_POOL_SPIN; spin++) {
            FT_CPU_RELAX();
            gen = atomic_load_explicit(&p->generation, memory_order_acquire);
        }
        if (gen == seen) {
            pthread_mutex_lock(&p->mutex);
            p->n_sleeping++;
            while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
                   !atomic_load(&p->stop))
                pthread_cond_wait(&p->cond, &p->mutex);
            p->n_sleeping--;
            pthread_mutex_unlock(&p->mutex);
        }
        if (atomic_load(&p->stop))
            return NULL;
        seen = gen;
        p->fn(p->ctx, w->ith, p->n_threads);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_release);
    }
}

static int default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)FT_MIN(n, 1024) : 1;
}

int ft_threadpool_new(int n_threads, struct ft_threadpool **out) {
    *out = NULL;
    if (n_threads <= 0)
        n_threads = default_threads(); /* physical cores once hwloc is in */
    if (n_threads > 1024) {
        FT_LOG_E("n_threads %d is more than 1024", n_threads);
        return FT_EINVAL;
    }
    struct ft_threadpool *p = calloc(1, sizeof(*p));
    if (!p)
        goto fail_alloc;
    p->n_threads = n_threads;
    atomic_init(&p->generation, 0);
    atomic_init(&p->n_done, 0);
    atomic_init(&p->stop, false);
    if (pthread_mutex_init(&p->mutex, NULL) != 0)
        goto fail_mutex;
    if (pthread_cond_init(&p->cond, NULL) != 0)
        goto fail_cond;
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof(*p->workers));
        if (!p->workers)
            goto fail_workers;
    }
    for (int i = 1; i < n_threads; i++) {
        struct ft_worker *w = &p->workers[i - 1];
        w->pool = p;
        w->ith = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            FT_LOG_E("pthread_create failed for worker %d of %d", i, n_threads);
            p->n_threads = i; /* join the ones that started */
            ft_threadpool_free(p);
            return FT_ENOMEM;
        }
    }
    *out = p;
    return FT_OK;

fail_workers:
    pthread_cond_destroy(&p->cond);
fail_cond:
    pthread_mutex_destroy(&p->mutex);
fail_mutex:
    free(p);
fail_alloc:
    FT_LOG_E("out of memory creating a pool of %d threads", n_threads);
    return FT_ENOMEM;
}

void ft_threadpool_free(struct ft_threadpool *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->mutex);
    atomic_store(&p->stop, true);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mutex);
    for (int i = 1; i < p->n_threads; i++)
        pthread_join(p->workers[i - 1].thread, NULL);
    free(p->workers);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mutex);
    free(p);
}

int ft_threadpool_n_threads(const struct ft_threadpool *p) { return p ? p->n_threads : 1; }

void ft_threadpool_run(struct ft_threadpool *p, ft_task_fn fn, void *ctx) {
    if (!p || p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    /* The release on generation publishes fn, ctx and the n_done reset. */
    pthread_mutex_lock(&p->mutex);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    if (p->n_sleeping > 0)
        pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mutex);

    fn(ctx, 0, p->n_threads);

    /* Yield now and then: on an oversubscribed machine the worker we wait
     * for may need this CPU. */
    const int want = p->n_threads - 1;
    for (unsigned spin = 1; atomic_load_explicit(&p->n_done, memory_order_acquire) < want; spin++) {
        FT_CPU_RELAX();
        if (spin % 4096 == 0)
            sched_yield();
    }
}
