/* The compute thread pool: every thread runs each task exactly once with
 * the right (ith, nth), the caller is thread 0, results are visible when
 * ft_threadpool_run returns, and many small tasks in a row (the forward
 * pass issues hundreds per token) neither lose nor repeat work, also across
 * the spin -> sleep -> wake transitions (idle gaps around the spin time, a
 * task on which one worker is slow so the caller sleeps). Threads run where
 * the placement plan says (checked with hwloc on this machine), the caller
 * is pinned too, a nested run() runs inline, and every thread knows its
 * NUMA node. */
#include "ft_test.h"

#include "engine/placement.h"
#include "ft/common.h"
#include "ft/threadpool.h"
#include "ft/topology.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#define MAX_T 8

struct ctx {
    int calls[MAX_T];
    int nth_seen[MAX_T];
    pthread_t self[MAX_T];
    int64_t sum[MAX_T];
    int64_t n;
    int slow_ith;     /* this thread sleeps slow_us in the task; -1: none */
    long slow_us;
};

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void task(void *vp, int ith, int nth) {
    struct ctx *c = vp;
    c->calls[ith]++;
    c->nth_seen[ith] = nth;
    c->self[ith] = pthread_self();
    int64_t s = 0;
    for (int64_t i = c->n * ith / nth; i < c->n * (ith + 1) / nth; i++)
        s += i;
    c->sum[ith] = s;
    if (ith == c->slow_ith)
        sleep_us(c->slow_us);
}

/* One run, checked: every thread once, the sum split without gaps. */
static void run_checked(struct ft_threadpool *p, int nt, int64_t n, int slow_ith, long slow_us, const char *what,
                        int rep) {
    struct ctx c = {.n = n, .slow_ith = slow_ith, .slow_us = slow_us};
    ft_threadpool_run(p, task, &c);
    int64_t total = 0;
    for (int i = 0; i < nt; i++) {
        if (c.calls[i] != 1 || c.nth_seen[i] != nt)
            CHECKF(0, "%s: nt %d rep %d thread %d: %d calls, nth %d", what, nt, rep, i, c.calls[i], c.nth_seen[i]);
        total += c.sum[i];
    }
    CHECKF(total == n * (n - 1) / 2, "%s: nt %d rep %d: sum %lld", what, nt, rep, (long long)total);
    CHECK(pthread_equal(c.self[0], pthread_self()));
    for (int i = 1; i < nt; i++)
        CHECKF(!pthread_equal(c.self[i], pthread_self()), "%s: thread %d ran on the caller", what, i);
}

static void many_runs(void) {
    for (int nt = 1; nt <= 4; nt++) {
        struct ft_threadpool *p = NULL;
        CHECK(ft_threadpool_new(nt, &p) == FT_OK);
        CHECK_EQ_INT(ft_threadpool_n_threads(p), nt);
        /* Back to back: workers stay spinning. */
        for (int rep = 0; rep < 20000; rep++)
            run_checked(p, nt, 1000 + rep % 97, -1, 0, "back to back", rep);
        /* Gaps around the spin time (FT_POOL_SPIN_NS, 1 ms): some runs
         * find workers spinning, some asleep, some just falling asleep. */
        for (int rep = 0; rep < 200; rep++) {
            sleep_us(500 + (rep * 37) % 1000);
            run_checked(p, nt, 500 + rep, -1, 0, "after a gap", rep);
        }
        /* One thread slow: the others (caller included) wait long enough
         * to sleep and must be woken by the last one. */
        for (int rep = 0; rep < 40; rep++)
            run_checked(p, nt, 700, rep % nt, 1200 + rep * 20, "one slow thread", rep);
        ft_threadpool_free(p);
    }
}

/* Each thread's CPU binding and node, as the threads themselves see them. */
struct where {
    hwloc_topology_t topo;
    hwloc_cpuset_t bound[MAX_T];
    int node[MAX_T];
    int node_of[MAX_T];
    struct ft_threadpool *p;
};

static void where_task(void *vp, int ith, int nth) {
    struct where *w = vp;
    (void)nth;
    hwloc_get_cpubind(w->topo, w->bound[ith], HWLOC_CPUBIND_THREAD);
    w->node[ith] = ft_threadpool_current_node();
    w->node_of[ith] = ft_threadpool_node_of(w->p, ith);
}

static void pinning(void) {
    hwloc_topology_t topo;
    CHECK(ft_topology_get(&topo) == FT_OK);
    const int n_cores = ft_hw_n_cores();
    CHECK_EQ_INT(n_cores, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE));
    struct ft_threadpool *p = NULL;
    CHECK(ft_threadpool_new(0, &p) == FT_OK); /* default: one per core */
    const int nt = ft_threadpool_n_threads(p);
    CHECK_EQ_INT(nt, n_cores);
    if (nt > MAX_T) {
        ft_threadpool_free(p);
        p = NULL;
        CHECK(ft_threadpool_new(MAX_T, &p) == FT_OK);
    }
    const int n = ft_threadpool_n_threads(p);
    CHECK(ft_threadpool_pinned(p));
    struct where w = {.topo = topo, .p = p};
    for (int i = 0; i < n; i++)
        w.bound[i] = hwloc_bitmap_alloc();
    ft_threadpool_run(p, where_task, &w);
    const struct ft_placement *pl = ft_threadpool_placement(p);
    CHECK(pl && pl->n_threads == n);
    for (int i = 0; i < n && pl; i++) {
        /* Thread i runs on core i (NUMA off), bound to exactly its CPUs;
         * thread 0 is the caller, which run() pinned too. */
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i);
        CHECKF(pl->workers[i].core == i, "thread %d planned on core %d", i, pl->workers[i].core);
        CHECKF(core && hwloc_bitmap_isequal(w.bound[i], core->cpuset), "thread %d is not bound to core %d", i, i);
        const int node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, 0) ? 0 : -1;
        const bool one_node = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE) == 1;
        if (one_node)
            CHECKF(w.node[i] == node, "thread %d reports node %d", i, w.node[i]);
        CHECKF(w.node[i] == pl->workers[i].node && w.node_of[i] == w.node[i], "thread %d: node %d, node_of %d", i,
               w.node[i], w.node_of[i]);
    }
    for (int i = 0; i < n; i++)
        hwloc_bitmap_free(w.bound[i]);
    CHECK_EQ_INT(ft_threadpool_node_of(p, -1), -1);
    CHECK_EQ_INT(ft_threadpool_node_of(p, n), -1);
    ft_threadpool_free(p);
}

/* A run() from inside a task of the same pool runs inline on that thread. */
struct nested {
    struct ft_threadpool *p;
    int outer_calls[MAX_T];
    int inner_calls[MAX_T];
    int inner_nth[MAX_T];
    int inner_ith[MAX_T];
};

static _Thread_local int tls_outer_ith = -1;

static void inner_task(void *vp, int ith, int nth) {
    struct nested *c = vp;
    const int outer = tls_outer_ith;
    c->inner_calls[outer]++;
    c->inner_nth[outer] = nth;
    c->inner_ith[outer] = ith;
}

static void outer_task(void *vp, int ith, int nth) {
    struct nested *c = vp;
    (void)nth;
    c->outer_calls[ith]++;
    tls_outer_ith = ith;
    ft_threadpool_run(c->p, inner_task, c);
    tls_outer_ith = -1;
}

static void nested(void) {
    for (int nt = 1; nt <= 3; nt++) {
        struct nested c = {0};
        CHECK(ft_threadpool_new(nt, &c.p) == FT_OK);
        for (int rep = 0; rep < 100; rep++)
            ft_threadpool_run(c.p, outer_task, &c);
        for (int i = 0; i < nt; i++) {
            CHECKF(c.outer_calls[i] == 100 && c.inner_calls[i] == 100, "nt %d thread %d: %d outer, %d inner", nt, i,
                   c.outer_calls[i], c.inner_calls[i]);
            CHECKF(c.inner_nth[i] == 1 && c.inner_ith[i] == 0, "nt %d thread %d: inner ran as %d of %d", nt, i,
                   c.inner_ith[i], c.inner_nth[i]);
        }
        /* The pool still works normally afterwards. */
        run_checked(c.p, nt, 1234, -1, 0, "after nesting", 0);
        ft_threadpool_free(c.p);
    }
}

/* A thread no pool has placed has no node. */
static void *fresh_thread(void *arg) {
    *(int *)arg = ft_threadpool_current_node();
    return NULL;
}

static void misc(void) {
    pthread_t t;
    int node = 5;
    CHECK(pthread_create(&t, NULL, fresh_thread, &node) == 0);
    pthread_join(t, NULL);
    CHECK_EQ_INT(node, -1);

    struct ft_threadpool *d = NULL;
    ft_threadpool_free(NULL);
    CHECK_EQ_INT(ft_threadpool_n_threads(NULL), 1);
    CHECK(ft_threadpool_new(100000, &d) == FT_EINVAL && d == NULL);
    CHECK(ft_threadpool_new(FT_MAX_THREADS + 1, &d) == FT_EINVAL);
    const struct ft_threadpool_params bad = {.n_threads = 1, .numa = FT_NUMA_ISOLATE, .numa_node = 99};
    CHECK(ft_threadpool_new_ex(&bad, &d) == FT_EINVAL && d == NULL);
    /* Created and freed without ever running a task. */
    CHECK(ft_threadpool_new(3, &d) == FT_OK);
    ft_threadpool_free(d);
    /* A NUMA mode on this machine: every thread on a node the plan names. */
    for (int mode = FT_NUMA_OFF; mode <= FT_NUMA_REPLICATE; mode++) {
        const struct ft_threadpool_params pp = {.n_threads = 2, .numa = (enum ft_numa_mode)mode, .numa_node = -1};
        CHECK(ft_threadpool_new_ex(&pp, &d) == FT_OK);
        run_checked(d, 2, 99, -1, 0, ft_numa_mode_name((enum ft_numa_mode)mode), 0);
        for (int i = 0; i < 2; i++)
            CHECKF(ft_threadpool_node_of(d, i) >= 0 && ft_threadpool_node_of(d, i) < ft_hw_n_numa_nodes(),
                   "mode %s thread %d node %d", ft_numa_mode_name((enum ft_numa_mode)mode), i,
                   ft_threadpool_node_of(d, i));
        ft_threadpool_free(d);
    }
}

int main(void) {
    ft_log_set_level(FT_LOG_ERROR);
    many_runs();
    pinning();
    nested();
    misc();
    return ft_test_finish("test_threadpool");
}
