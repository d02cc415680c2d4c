/* Work stealing over a list of chunks, shared by the matmul tasks
 * (engine/model/matmul.c, engine/model/moe_matmul.c). Not a public header.
 *
 * Each thread owns a contiguous run of the chunks and takes them in order
 * from its front, so its reads are one stream, as in the bandwidth probe:
 * the prefetch that runs ahead of the end of one chunk lands on the start
 * of its next. A thread whose run is done takes chunks from the back of
 * the others' runs, so a thread that starts late (woken late, or
 * preempted on a busy machine) takes fewer chunks instead of holding up
 * the barrier. Which thread takes a chunk never changes its result. */
#ifndef FT_CHUNK_RUNS_H
#define FT_CHUNK_RUNS_H

#include "ft/common.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Runs of chunks at most; threads beyond share them (thread i owns run
 * i % FT_CHUNK_RUNS_MAX). */
#define FT_CHUNK_RUNS_MAX 64

/* A run [front, back) of chunk indices in one word, front in the low half,
 * so the owner's take from the front and a thief's from the back cannot
 * both get the last chunk. On its own cache line: the owner updates it
 * once a chunk. */
struct ft_chunk_run {
    _Alignas(64) atomic_uint_fast64_t fb;
};

struct ft_chunk_runs {
    int n_runs;
    struct ft_chunk_run run[FT_CHUNK_RUNS_MAX];
};

static inline uint64_t ft_chunk_run_word(uint64_t front, uint64_t back) { return back << 32 | front; }

/* Splits the chunks [0, n) into runs of nearly equal length, one per thread. */
static inline void ft_chunk_runs_init(struct ft_chunk_runs *r, int64_t n, int n_threads) {
    r->n_runs = FT_MAX(1, FT_MIN(n_threads, FT_CHUNK_RUNS_MAX));
    for (int i = 0; i < r->n_runs; i++)
        atomic_init(&r->run[i].fb,
                    ft_chunk_run_word((uint64_t)(n * i / r->n_runs), (uint64_t)(n * (i + 1) / r->n_runs)));
}

/* Takes the chunk at the front (from_back false) or the back of a run. */
static inline bool ft_chunk_run_take(struct ft_chunk_run *r, bool from_back, int64_t *c) {
    uint64_t v = atomic_load_explicit(&r->fb, memory_order_relaxed);
    for (;;) {
        const uint64_t front = v & 0xffffffffu, back = v >> 32;
        if (front >= back)
            return false;
        const uint64_t next = from_back ? ft_chunk_run_word(front, back - 1) : ft_chunk_run_word(front + 1, back);
        if (atomic_compare_exchange_weak_explicit(&r->fb, &v, next, memory_order_relaxed, memory_order_relaxed)) {
            *c = (int64_t)(from_back ? back - 1 : front);
            return true;
        }
    }
}

/* The next chunk for thread ith: its own run's front, else another's back;
 * false when none is left anywhere. */
static inline bool ft_chunk_runs_next(struct ft_chunk_runs *r, int ith, int64_t *c) {
    const int own = ith % r->n_runs;
    bool got = ft_chunk_run_take(&r->run[own], false, c);
    for (int k = 1; !got && k < r->n_runs; k++)
        got = ft_chunk_run_take(&r->run[(own + k) % r->n_runs], true, c);
    return got;
}

#endif
