/* Compute thread pool. ft_threadpool_run() runs fn(ctx, ith, nth) once for
 * every ith in 0..nth-1 and returns when all have finished; results are then
 * visible to the caller. Work is split by the callee, usually by output rows.
 * Share 0 runs on the calling thread, share ith normally on worker ith; but
 * the caller runs a share itself when its worker has not started it by the
 * time the caller is done with its own (the worker is asleep or preempted).
 * So a task may depend on ith (rows, per-share scratch) but not on which
 * thread runs it: for the NUMA node, ask ft_threadpool_current_node().
 *
 * Threads are placed by hwloc (engine/runtime/placement.h): one per physical core by
 * default, each pinned to its core, the caller too (from its first run()
 * on, and it stays pinned). Under a NUMA mode each thread knows its node,
 * so a task can read the copy of the weights local to it (replicate).
 *
 * Rules: one run() at a time per pool. A run() from inside a task of the
 * same pool (nested) does not deadlock: the inner task runs on the calling
 * thread alone, as fn(ctx, 0, 1). */
#ifndef FT_THREADPOOL_H
#define FT_THREADPOOL_H

#include "ft/topology.h"

#include <stdbool.h>

typedef void (*ft_task_fn)(void *ctx, int ith, int nth);

struct ft_threadpool;
struct ft_placement;

struct ft_threadpool_params {
    int n_threads;          /* <= 0: one per physical core (of the node, for isolate) */
    enum ft_numa_mode numa; /* FT_NUMA_OFF: pin, but no NUMA placement */
    int numa_node;          /* isolate: the node (logical index); -1: the caller's node */
};

/* n_threads <= 0: one per physical core; NUMA off. */
int ft_threadpool_new(int n_threads, struct ft_threadpool **out);
int ft_threadpool_new_ex(const struct ft_threadpool_params *params, struct ft_threadpool **out);
void ft_threadpool_free(struct ft_threadpool *p); /* accepts NULL */
int ft_threadpool_n_threads(const struct ft_threadpool *p);
void ft_threadpool_run(struct ft_threadpool *p, ft_task_fn fn, void *ctx);

/* The NUMA node (hwloc logical index) worker ith is placed on; -1 when
 * not known (not pinned, or ith out of range). */
int ft_threadpool_node_of(const struct ft_threadpool *p, int ith);
/* The node of the calling thread as its pool placed it: inside a task, the
 * node of the worker running it (ft_weight_data() uses this to pick the
 * local weight copy). -1 on a thread no pool has placed. */
int ft_threadpool_current_node(void);
/* The plan the pool applied (engine/runtime/placement.h), for the weight placement. */
const struct ft_placement *ft_threadpool_placement(const struct ft_threadpool *p);
/* false when hwloc could not pin some thread (a warning was logged once). */
bool ft_threadpool_pinned(const struct ft_threadpool *p);

#endif
