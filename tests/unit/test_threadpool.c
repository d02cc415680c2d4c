/* The compute thread pool: every thread runs each task exactly once with
 * the right (ith, nth), the caller is thread 0, results are visible when
 * ft_threadpool_run returns, and many small tasks in a row (the forward
 * pass issues hundreds per token) neither lose nor repeat work. */
#include "ft_test.h"

#include "ft/common.h"
#include "ft/threadpool.h"

#include <pthread.h>
#include <stdint.h>

#define MAX_T 8

struct ctx {
    int calls[MAX_T];
    int nth_seen[MAX_T];
    pthread_t self[MAX_T];
    int64_t sum[MAX_T];
    int64_t n;
};

static void task(void *vp, int ith, int nth) {
    struct ctx *c = vp;
    c->calls[ith]++;
    c->nth_seen[ith] = nth;
    c->self[ith] = pthread_self();
    int64_t s = 0;
    for (int64_t i = c->n * ith / nth; i < c->n * (ith + 1) / nth; i++)
        s += i;
    c->sum[ith] = s;
}

int main(void) {
    for (int nt = 1; nt <= 4; nt++) {
        struct ft_threadpool *p = NULL;
        CHECK(ft_threadpool_new(nt, &p) == FT_OK);
        CHECK_EQ_INT(ft_threadpool_n_threads(p), nt);
        for (int rep = 0; rep < 500; rep++) {
            struct ctx c = {.n = 1000 + rep};
            ft_threadpool_run(p, task, &c);
            int64_t total = 0;
            for (int i = 0; i < nt; i++) {
                if (c.calls[i] != 1 || c.nth_seen[i] != nt)
                    CHECKF(0, "nt %d rep %d thread %d: %d calls, nth %d", nt, rep, i, c.calls[i], c.nth_seen[i]);
                total += c.sum[i];
            }
            CHECK_EQ_INT(total, c.n * (c.n - 1) / 2);
            if (rep == 0)
                CHECK(pthread_equal(c.self[0], pthread_self()));
        }
        ft_threadpool_free(p);
    }
    struct ft_threadpool *d = NULL;
    CHECK(ft_threadpool_new(0, &d) == FT_OK); /* 0: one per online CPU */
    CHECK(ft_threadpool_n_threads(d) >= 1);
    ft_threadpool_free(d);
    ft_threadpool_free(NULL);
    CHECK(ft_threadpool_new(100000, &d) == FT_EINVAL);
    return ft_test_finish("test_threadpool");
}
