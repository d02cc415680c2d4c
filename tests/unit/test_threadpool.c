/* The compute thread pool: every share (ith) of every task runs exactly
 * once with the right (ith, nth), share 0 on the caller, results are
 * visible when ft_threadpool_run returns, and many small tasks in a row (the
 * forward pass issues hundreds per token) neither lose nor repeat work, also
 * across the spin -> sleep -> wake transitions (idle gaps around the spin
 * time, a task on which one thread is slow so the others sleep). Workers do
 * run shares; a worker that cannot start (held in a signal handler here,
 * preempted or asleep in real life) has its shares run by the caller, and
 * finds them gone when it comes back. Threads are bound where the
 * placement plan says (read back from the kernel), the caller too; a nested
 * run() runs inline; every share knows the node of the thread running it. */
#include "ft_test.h"

#include "engine/runtime/placement.h"
#include "ft/common.h"
#include "ft/threadpool.h"
#include "ft/topology.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

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

/* One run, checked: every share once, the sum split without gaps, share 0
 * on the caller. Counts the shares workers ran (not the caller) in by_worker. */
static void run_checked(struct ft_threadpool *p, int nt, int64_t n, int slow_ith, long slow_us, const char *what,
                        int rep, int *by_worker) {
    struct ctx c = {.n = n, .slow_ith = slow_ith, .slow_us = slow_us};
    ft_threadpool_run(p, task, &c);
    int64_t total = 0;
    for (int i = 0; i < nt; i++) {
        if (c.calls[i] != 1 || c.nth_seen[i] != nt)
            CHECKF(0, "%s: nt %d rep %d share %d: %d calls, nth %d", what, nt, rep, i, c.calls[i], c.nth_seen[i]);
        total += c.sum[i];
        if (by_worker && i > 0 && !pthread_equal(c.self[i], pthread_self()))
            by_worker[i]++;
    }
    CHECKF(total == n * (n - 1) / 2, "%s: nt %d rep %d: sum %lld", what, nt, rep, (long long)total);
    CHECK(pthread_equal(c.self[0], pthread_self()));
}

static void many_runs(void) {
    for (int nt = 1; nt <= 4; nt++) {
        struct ft_threadpool *p = NULL;
        CHECK(ft_threadpool_new(nt, &p) == FT_OK);
        CHECK_EQ_INT(ft_threadpool_n_threads(p), nt);
        /* Back to back: workers stay spinning, and do take part. */
        int by_worker[MAX_T] = {0};
        for (int rep = 0; rep < 20000; rep++)
            run_checked(p, nt, 1000 + rep % 97, -1, 0, "back to back", rep, by_worker);
        for (int i = 1; i < nt; i++)
            CHECKF(by_worker[i] > 0, "nt %d: no worker ever ran share %d", nt, i);
        /* Gaps around the spin time (FT_POOL_SPIN_NS, 1 ms): some runs
         * find workers spinning, some asleep, some just falling asleep. */
        for (int rep = 0; rep < 200; rep++) {
            sleep_us(500 + (rep * 37) % 1000);
            run_checked(p, nt, 500 + rep, -1, 0, "after a gap", rep, NULL);
        }
        /* One thread slow: the others (caller included) wait long enough
         * to sleep and must be woken by the last one. */
        for (int rep = 0; rep < 40; rep++)
            run_checked(p, nt, 700, rep % nt, 1200 + rep * 20, "one slow thread", rep, NULL);
        ft_threadpool_free(p);
    }
}

/* Which thread ran each share and the node it reported. */
struct where {
    pthread_t self[MAX_T];
    int node[MAX_T];
};

static void where_task(void *vp, int ith, int nth) {
    struct where *w = vp;
    (void)nth;
    w->self[ith] = pthread_self();
    w->node[ith] = ft_threadpool_current_node();
}

/* The kernel's CPU binding of every worker thread of this process (named
 * ft-worker-N by the pool; sanitizers may run threads of their own). */
static int worker_bindings(hwloc_topology_t topo, hwloc_bitmap_t *out, int cap) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        const int tid = atoi(e->d_name);
        if (tid <= 0 || n == cap)
            continue;
        char path[64], comm[32] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%d/comm", tid);
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(comm, sizeof(comm), f))
                comm[0] = '\0';
            fclose(f);
        }
        if (strncmp(comm, "ft-worker-", 10) != 0)
            continue;
        out[n] = hwloc_bitmap_alloc();
        CHECK(hwloc_get_proc_cpubind(topo, tid, out[n], HWLOC_CPUBIND_THREAD) == 0);
        n++;
    }
    if (d)
        closedir(d);
    return n;
}

static void pinning(void) {
    hwloc_topology_t topo;
    CHECK(ft_topology_get(&topo) == FT_OK);
    const int n_cores = ft_hw_n_cores();
    CHECK_EQ_INT(n_cores, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE));
    struct ft_threadpool *p = NULL;
    CHECK(ft_threadpool_new(0, &p) == FT_OK); /* default: one per core */
    CHECK_EQ_INT(ft_threadpool_n_threads(p), n_cores);
    if (n_cores > MAX_T) {
        ft_threadpool_free(p);
        p = NULL;
        CHECK(ft_threadpool_new(MAX_T, &p) == FT_OK);
    }
    const int n = ft_threadpool_n_threads(p);
    struct where w;
    ft_threadpool_run(p, where_task, &w); /* pins the caller */
    CHECK(ft_threadpool_pinned(p));
    const struct ft_placement *pl = ft_threadpool_placement(p);
    CHECK(pl && pl->n_threads == n);
    if (!pl)
        return;
    /* NUMA off: thread i on core i. The caller (this thread) is bound to
     * core 0; the workers, as a set, to cores 1..n-1. */
    for (int i = 0; i < n; i++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i);
        CHECKF(pl->workers[i].core == i && core && hwloc_bitmap_isequal(pl->workers[i].cpuset, core->cpuset),
               "thread %d planned on core %d", i, pl->workers[i].core);
    }
    hwloc_bitmap_t mine = hwloc_bitmap_alloc();
    CHECK(hwloc_get_cpubind(topo, mine, HWLOC_CPUBIND_THREAD) == 0);
    CHECKF(hwloc_bitmap_isequal(mine, pl->workers[0].cpuset), "the caller is not bound to core 0");
    hwloc_bitmap_free(mine);
    hwloc_bitmap_t bound[MAX_T];
    const int nb = worker_bindings(topo, bound, MAX_T);
    CHECK_EQ_INT(nb, n - 1);
    for (int i = 1; i < n; i++) {
        int matches = 0;
        for (int j = 0; j < nb; j++)
            matches += hwloc_bitmap_isequal(bound[j], pl->workers[i].cpuset);
        CHECKF(matches == 1, "%d worker threads bound to core %d", matches, i);
    }
    for (int j = 0; j < nb; j++)
        hwloc_bitmap_free(bound[j]);
    /* Each share reports the node of the thread that ran it. */
    for (int i = 0; i < n; i++) {
        const int want = pthread_equal(w.self[i], pthread_self()) ? pl->workers[0].node : pl->workers[i].node;
        CHECKF(w.node[i] == want && ft_threadpool_node_of(p, i) == pl->workers[i].node,
               "share %d: node %d, expected %d", i, w.node[i], want);
    }
    CHECK_EQ_INT(ft_threadpool_node_of(p, -1), -1);
    CHECK_EQ_INT(ft_threadpool_node_of(p, n), -1);
    ft_threadpool_free(p);
}

/* A worker that cannot run (held in a signal handler) has its shares run
 * by the caller; when released it finds them gone and joins in again. */
static atomic_int g_held, g_release;

static void hold_handler(int sig) {
    (void)sig;
    atomic_store(&g_held, 1);
    while (!atomic_load(&g_release)) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

static void held_worker(void) {
    struct ft_threadpool *p = NULL;
    CHECK(ft_threadpool_new(2, &p) == FT_OK);
    struct ctx c = {.n = 10, .slow_ith = -1};
    pthread_t worker = pthread_self();
    for (int rep = 0; rep < 100000 && pthread_equal(worker, pthread_self()); rep++) {
        memset(c.calls, 0, sizeof(c.calls));
        ft_threadpool_run(p, task, &c);
        worker = c.self[1];
    }
    CHECK(!pthread_equal(worker, pthread_self()));
    struct sigaction sa = {.sa_handler = hold_handler};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    atomic_store(&g_held, 0);
    atomic_store(&g_release, 0);
    CHECK(pthread_kill(worker, SIGUSR1) == 0);
    while (!atomic_load(&g_held))
        sleep_us(50);
    for (int rep = 0; rep < 200; rep++) {
        int by_worker[MAX_T] = {0};
        run_checked(p, 2, 5000 + rep, -1, 0, "worker held", rep, by_worker);
        CHECKF(by_worker[1] == 0, "rep %d: share 1 ran on the held worker", rep);
    }
    atomic_store(&g_release, 1);
    int by_worker[MAX_T] = {0};
    for (int rep = 0; rep < 20000; rep++)
        run_checked(p, 2, 3000 + rep % 7, -1, 0, "worker released", rep, by_worker);
    CHECKF(by_worker[1] > 0, "the released worker never ran a share again");
    ft_threadpool_free(p);
    signal(SIGUSR1, SIG_DFL);
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
        run_checked(c.p, nt, 1234, -1, 0, "after nesting", 0, NULL);
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
        run_checked(d, 2, 99, -1, 0, ft_numa_mode_name((enum ft_numa_mode)mode), 0, NULL);
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
    held_worker();
    nested();
    misc();
    return ft_test_finish("test_threadpool");
}
