/* Compute thread pool on hwloc: workers pinned where engine/runtime/placement.c
 * says, the caller is thread 0.
 *
 * A forward pass issues hundreds of small tasks per decoded token, so what
 * one run() costs beyond its work (dispatch + the closing barrier) matters.
 * The hot path takes no lock and makes no system call:
 *   dispatch  the caller writes fn/ctx and bumps `generation`; workers
 *             spinning on it see the new value within tens of nanoseconds;
 *   barrier   each worker bumps `n_done`; the caller, having done its own
 *             share, spins until it reaches generation * (n_threads - 1).
 *             The counter never resets (wrapping is fine): a reset would be
 *             one more cache-line transfer per task.
 * Spinning is bounded in time (FT_POOL_SPIN_NS, 1 ms): a worker that saw no task
 * for that long sleeps on a futex on `generation`, and a caller that waited
 * that long for the last worker sleeps on a futex on `n_done`, so an idle
 * pool costs no CPU and a long, unbalanced task does not burn the caller's
 * core. Wake-ups are needed only when someone sleeps, which the sleepers
 * announce (`n_sleeping`, `caller_waiting`).
 *
 * A share is claimed before it runs (`claim`, one word per worker, on the
 * worker's own cache line). A caller that has finished its share and still
 * waits runs, itself, every share whose worker has not even started it: the
 * worker is asleep or preempted, and would finish later than the caller
 * can (shares are equal), so taking it never loses. On a busy machine this
 * turns a scheduler time slice into one share of work. The caller looks at
 * the claims only after spinning a little (FT_POOL_STEAL_SPINS), so the
 * back-to-back path does not move the workers' lines.
 *
 * What must stay true:
 *  - fn/ctx are written before the generation bump (release) and read
 *    after seeing it (acquire);
 *  - sleeping is a Dekker handshake: the sleeper announces itself, then
 *    rechecks the word it waits on, then futex-waits on the value it saw;
 *    the waker changes the word, then reads the announcement. Both sides use
 *    seq_cst so at least one of them sees the other; the futex compares the
 *    value atomically, so a change between recheck and wait is not lost;
 *  - share ith of task g runs once: whoever moves claim[ith] from g - 1 to
 *    g (compare-and-swap) runs it and counts it in n_done; a worker reads
 *    fn/ctx only after winning, when the caller cannot have moved on;
 *  - claim[ith] is g - 1 or g while task g is out, because task g + 1 starts
 *    only after every share of g was counted. */
#include "ft/threadpool.h"

#include "ft/common.h"
#include "placement.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FT_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define FT_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define FT_CPU_RELAX() ((void)0)
#endif

/* How long a worker waits for the next task, or the caller for the last
 * worker, before sleeping: longer than the gaps inside a forward pass (a
 * few microseconds of serial work between ops) and than sampling between
 * two decode steps, so a generating model never pays a wake-up (tens of
 * microseconds, more in a VM); short enough that an idle pool goes quiet
 * at once. */
#define FT_POOL_SPIN_NS 1000000
/* Pause instructions between two reads of the clock while spinning. */
#define FT_POOL_SPIN_CHECK 64
/* Pause instructions the caller waits before running unstarted shares
 * itself (about a microsecond): a spinning worker claims its share within
 * a few cache-line transfers, well under that. Measured on the 2-vCPU test
 * machine under load, decode ran as fast with 8, 16 or 32 (and 1.8x faster
 * than without taking shares over); a steal pass reads every worker's line,
 * so it should not run when workers are merely a little late. */
#define FT_POOL_STEAL_SPINS 16

#define FT_CACHE_LINE 64

/* The generation counter's first value; a test starts it just below 2^32
 * to run the pool across the wrap. */
#ifndef FT_POOL_GEN0
#define FT_POOL_GEN0 0u
#endif

/* Park on a 32-bit word while it holds `val`; wake every thread parked on
 * it. Without futexes, parking yields: correct, only less frugal. */
static void park(atomic_uint *word, unsigned val) {
#if defined(__linux__)
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
    (void)word;
    (void)val;
    sched_yield();
#endif
}

static void unpark_all(atomic_uint *word) {
#if defined(__linux__)
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)word;
#endif
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct ft_worker {
    _Alignas(FT_CACHE_LINE) atomic_uint claim; /* the last task whose share ith is taken */
    struct ft_threadpool *pool;
    int ith;
    pthread_t thread;
};

struct ft_threadpool {
    /* Written by the caller once per task, read by every worker. */
    _Alignas(FT_CACHE_LINE) atomic_uint generation;
    ft_task_fn fn;
    void *ctx;
    int n_threads;

    /* Written by every worker once per task. */
    _Alignas(FT_CACHE_LINE) atomic_uint n_done;

    /* Written only around sleeps, start and stop. */
    _Alignas(FT_CACHE_LINE) atomic_int n_sleeping; /* workers parked on generation */
    atomic_int caller_waiting;                     /* the caller is parked on n_done */
    atomic_uint n_started;
    atomic_bool stop;
    atomic_int pin_failures;
    atomic_bool pin_warned;

    uint64_t id; /* tells callers which pool they were pinned for */
    hwloc_topology_t topo;
    struct ft_placement plan;
    struct ft_worker *workers; /* n_threads - 1 of them; thread 0 is the caller */
};

static atomic_uint_fast64_t g_next_pool_id = 1;

/* Per thread: the pool whose task it is running (nested run() detection),
 * the pool it was last pinned for as a caller, its NUMA node, and whether
 * it is some pool's worker (then it is never re-pinned as a caller). */
static _Thread_local struct ft_threadpool *tls_running;
static _Thread_local uint64_t tls_pinned_for;
static _Thread_local int tls_node = -1;
static _Thread_local bool tls_is_worker;

static void pin_self(struct ft_threadpool *p, int ith) {
    hwloc_const_cpuset_t set = p->plan.workers[ith].cpuset;
    if (set && hwloc_set_cpubind(p->topo, set, HWLOC_CPUBIND_THREAD) != 0)
        atomic_fetch_add(&p->pin_failures, 1);
}

static void warn_if_unpinned(struct ft_threadpool *p) {
    if (atomic_load(&p->pin_failures) > 0 && !atomic_exchange(&p->pin_warned, true))
        FT_LOG_W("could not pin %d of %d threads to their cores (%s); they run unpinned",
                 atomic_load(&p->pin_failures), p->n_threads,
                 hwloc_topology_is_thissystem(p->topo) ? "binding refused" : "HWLOC_SYNTHETIC/XML topology");
}

/* One step of a spin. With more threads than hardware threads, the thread
 * we wait for may need this CPU: give it up instead of pausing. */
static inline void relax(const struct ft_threadpool *p) {
    if (p->plan.oversubscribed)
        sched_yield();
    else
        FT_CPU_RELAX();
}

/* Wait until generation moves past `seen`; returns the new value. */
static unsigned wait_for_task(struct ft_threadpool *p, unsigned seen) {
    unsigned gen;
    uint64_t deadline = 0; /* read the clock only once spinning has lasted a while */
    for (unsigned i = 1;; i++) {
        gen = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (gen != seen)
            return gen;
        relax(p);
        if (i % FT_POOL_SPIN_CHECK == 0) {
            const uint64_t t = now_ns();
            if (!deadline)
                deadline = t + FT_POOL_SPIN_NS;
            else if (t > deadline)
                break;
        }
    }
    atomic_fetch_add(&p->n_sleeping, 1);
    while ((gen = atomic_load(&p->generation)) == seen)
        park(&p->generation, seen);
    atomic_fetch_sub(&p->n_sleeping, 1);
    return gen;
}

static void *worker_main(void *arg) {
    struct ft_worker *w = arg;
    struct ft_threadpool *p = w->pool;
    const unsigned n_workers = (unsigned)p->n_threads - 1; /* the caller is not one */
#if defined(__linux__)
    char name[16]; /* shown by top -H, gdb, /proc/PID/task/TID/comm */
    snprintf(name, sizeof(name), "ft-worker-%d", w->ith);
    pthread_setname_np(pthread_self(), name);
#endif
    pin_self(p, w->ith);
    tls_node = p->plan.workers[w->ith].node;
    tls_running = p;
    tls_is_worker = true;
    atomic_fetch_add(&p->n_started, 1);
    unsigned seen = FT_POOL_GEN0; /* no task runs before every worker has started */
    for (;;) {
        seen = wait_for_task(p, seen);
        if (atomic_load(&p->stop))
            return NULL;
        unsigned prev = seen - 1;
        if (!atomic_compare_exchange_strong(&w->claim, &prev, seen))
            continue; /* the caller ran it (we were late), or the task is gone */
        p->fn(p->ctx, w->ith, p->n_threads);
        if (atomic_fetch_add(&p->n_done, 1) + 1 == seen * n_workers && atomic_load(&p->caller_waiting))
            unpark_all(&p->n_done);
    }
}

/* n_done has not reached `want` yet (modulo 2^32). */
static inline bool before(unsigned done, unsigned want) { return (int)(done - want) < 0; }

/* Run, on the caller, the shares of task `gen` no worker has started. */
static void run_unstarted(struct ft_threadpool *p, unsigned gen) {
    for (int i = 1; i < p->n_threads; i++) {
        struct ft_worker *w = &p->workers[i - 1];
        unsigned prev = gen - 1;
        if (atomic_load_explicit(&w->claim, memory_order_relaxed) != prev ||
            !atomic_compare_exchange_strong(&w->claim, &prev, gen))
            continue;
        struct ft_threadpool *outer = tls_running;
        tls_running = p;
        p->fn(p->ctx, i, p->n_threads);
        tls_running = outer;
        atomic_fetch_add(&p->n_done, 1);
    }
}

/* The caller after its own share: wait until every share of task `gen` is
 * counted, i.e. n_done == gen * (n_threads - 1). */
static void wait_for_workers(struct ft_threadpool *p, unsigned gen) {
    const unsigned want = gen * ((unsigned)p->n_threads - 1);
    uint64_t deadline = 0;
    for (unsigned i = 1; before(atomic_load_explicit(&p->n_done, memory_order_acquire), want); i++) {
        relax(p);
        if (i == FT_POOL_STEAL_SPINS)
            run_unstarted(p, gen);
        if (i % FT_POOL_SPIN_CHECK != 0)
            continue;
        const uint64_t t = now_ns();
        if (!deadline) {
            deadline = t + FT_POOL_SPIN_NS;
        } else if (t > deadline) {
            atomic_store(&p->caller_waiting, 1);
            unsigned done;
            while (before(done = atomic_load(&p->n_done), want))
                park(&p->n_done, done);
            atomic_store(&p->caller_waiting, 0);
            return;
        }
    }
}

int ft_threadpool_new(int n_threads, struct ft_threadpool **out) {
    const struct ft_threadpool_params params = {.n_threads = n_threads, .numa = FT_NUMA_OFF, .numa_node = -1};
    return ft_threadpool_new_ex(&params, out);
}

int ft_threadpool_new_ex(const struct ft_threadpool_params *params, struct ft_threadpool **out) {
    *out = NULL;
    hwloc_topology_t topo;
    int rc = ft_topology_get(&topo);
    if (rc)
        return rc;
    const struct ft_place_params pp = {
        .n_threads = params->n_threads,
        .mode = params->numa,
        .numa_node = params->numa_node,
        .caller_pu = ft_topology_current_pu(topo),
    };
    const size_t bytes = (sizeof(struct ft_threadpool) + FT_CACHE_LINE - 1) & ~(size_t)(FT_CACHE_LINE - 1);
    struct ft_threadpool *p = aligned_alloc(FT_CACHE_LINE, bytes);
    if (!p) {
        FT_LOG_E("out of memory creating a thread pool");
        return FT_ENOMEM;
    }
    memset(p, 0, sizeof(*p));
    atomic_init(&p->generation, FT_POOL_GEN0);
    atomic_init(&p->n_done, 0); /* set to GEN0 * workers once their number is known */
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->caller_waiting, 0);
    atomic_init(&p->n_started, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->pin_failures, 0);
    atomic_init(&p->pin_warned, false);
    p->id = atomic_fetch_add(&g_next_pool_id, 1);
    p->topo = topo;
    if ((rc = ft_placement_plan(topo, &pp, &p->plan))) {
        free(p);
        return rc;
    }
    p->n_threads = p->plan.n_threads;
    atomic_store(&p->n_done, FT_POOL_GEN0 * ((unsigned)p->n_threads - 1));
    if (p->n_threads > 1 &&
        !(p->workers = aligned_alloc(FT_CACHE_LINE, ((size_t)p->n_threads - 1) * sizeof(*p->workers)))) {
        FT_LOG_E("out of memory creating a pool of %d threads", p->n_threads);
        ft_placement_free(&p->plan);
        free(p);
        return FT_ENOMEM;
    }
    for (int i = 1; i < p->n_threads; i++) {
        struct ft_worker *w = &p->workers[i - 1];
        memset(w, 0, sizeof(*w));
        atomic_init(&w->claim, FT_POOL_GEN0);
        w->pool = p;
        w->ith = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            FT_LOG_E("pthread_create failed for thread %d of %d", i, p->n_threads);
            p->n_threads = i; /* join the ones that started */
            ft_threadpool_free(p);
            return FT_ENOMEM;
        }
    }
    /* Wait until every worker is pinned, so the first task (and any memory
     * it touches first) already runs where the plan says. */
    while (atomic_load(&p->n_started) < (unsigned)p->n_threads - 1)
        sched_yield();
    warn_if_unpinned(p);
    *out = p;
    return FT_OK;
}

void ft_threadpool_free(struct ft_threadpool *p) {
    if (!p)
        return;
    /* Wait for the workers to be idle before telling them to stop: a worker
     * still starting up must not mistake the stop bump for a task. */
    while (atomic_load(&p->n_started) < (unsigned)p->n_threads - 1)
        sched_yield();
    atomic_store(&p->stop, true);
    atomic_fetch_add(&p->generation, 1);
    unpark_all(&p->generation);
    for (int i = 1; i < p->n_threads; i++)
        pthread_join(p->workers[i - 1].thread, NULL);
    free(p->workers);
    ft_placement_free(&p->plan);
    free(p);
}

int ft_threadpool_n_threads(const struct ft_threadpool *p) { return p ? p->n_threads : 1; }

/* The caller becomes thread 0: pinned to worker 0's place on its first run
 * (workers of another pool keep their own place), and on worker 0's node. */
static void enter_as_caller(struct ft_threadpool *p) {
    if (tls_pinned_for != p->id && !tls_is_worker) {
        tls_pinned_for = p->id;
        pin_self(p, 0);
        warn_if_unpinned(p);
    }
    if (!tls_is_worker)
        tls_node = p->plan.workers[0].node;
}

void ft_threadpool_run(struct ft_threadpool *p, ft_task_fn fn, void *ctx) {
    struct ft_threadpool *outer = tls_running;
    if (!p || outer == p) { /* no pool, or nested: this thread alone */
        fn(ctx, 0, 1);
        return;
    }
    enter_as_caller(p);
    tls_running = p;
    if (p->n_threads == 1) {
        fn(ctx, 0, 1);
        tls_running = outer;
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    const unsigned gen = atomic_fetch_add(&p->generation, 1) + 1; /* seq_cst: publishes fn, ctx */
    if (atomic_load(&p->n_sleeping) > 0)
        unpark_all(&p->generation);
    fn(ctx, 0, p->n_threads);
    tls_running = outer;
    wait_for_workers(p, gen);
}

int ft_threadpool_node_of(const struct ft_threadpool *p, int ith) {
    if (!p || ith < 0 || ith >= p->n_threads)
        return -1;
    return p->plan.workers[ith].node;
}

int ft_threadpool_current_node(void) { return tls_node; }

const struct ft_placement *ft_threadpool_placement(const struct ft_threadpool *p) { return p ? &p->plan : NULL; }

bool ft_threadpool_pinned(const struct ft_threadpool *p) { return p && atomic_load(&p->pin_failures) == 0; }
