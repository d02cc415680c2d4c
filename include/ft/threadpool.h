/* Compute thread pool. ft_threadpool_run() runs fn(ctx, ith, nth) on every
 * thread (the caller is thread 0) and returns when all have finished. Work is
 * split by the callee, usually by output rows. The speed work pins workers
 * with hwloc and adds NUMA placement behind this same interface. */
#ifndef FT_THREADPOOL_H
#define FT_THREADPOOL_H

typedef void (*ft_task_fn)(void *ctx, int ith, int nth);

struct ft_threadpool;

/* n_threads <= 0: one per physical core. */
int ft_threadpool_new(int n_threads, struct ft_threadpool **out);
void ft_threadpool_free(struct ft_threadpool *p); /* accepts NULL */
int ft_threadpool_n_threads(const struct ft_threadpool *p);
void ft_threadpool_run(struct ft_threadpool *p, ft_task_fn fn, void *ctx);

#endif
