/* The pool's counters across 2^32: the generation counter starts just
 * below the wrap (FT_POOL_GEN0), so the done count the caller waits for,
 * generation * workers, wraps within the first tasks; every task must
 * still run once per thread and the caller must still wait for all of
 * them, spinning and sleeping. Includes the pool's source to set the start. */
#define FT_POOL_GEN0 0xfffffff0u
#include "engine/runtime/threadpool.c"

#include "ft_test.h"

#include <stdatomic.h>

struct counts {
    atomic_int calls[4];
    int slow_ith;
};

static void task(void *vp, int ith, int nth) {
    struct counts *c = vp;
    (void)nth;
    if (ith == c->slow_ith) {
        struct timespec ts = {0, FT_POOL_SPIN_NS + 300000}; /* longer than the spin: the caller sleeps */
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add(&c->calls[ith], 1);
}

int main(void) {
    ft_log_set_level(FT_LOG_ERROR);
    for (int nt = 2; nt <= 4; nt++) {
        struct ft_threadpool *p = NULL;
        CHECK(ft_threadpool_new(nt, &p) == FT_OK);
        for (int rep = 0; rep < 64; rep++) {
            struct counts c = {.slow_ith = rep % 3 == 0 ? rep % nt : -1};
            ft_threadpool_run(p, task, &c);
            for (int i = 0; i < nt; i++)
                CHECKF(atomic_load(&c.calls[i]) == 1, "nt %d rep %d (generation %u) thread %d ran %d times", nt, rep,
                       atomic_load(&p->generation), i, atomic_load(&c.calls[i]));
        }
        CHECK(atomic_load(&p->generation) < FT_POOL_GEN0); /* it did wrap */
        ft_threadpool_free(p);
    }
    return ft_test_finish("test_threadpool_wrap");
}
