/* The NUMA modes end to end on a machine we do not have: HWLOC_SYNTHETIC
 * makes hwloc describe two nodes of two cores ("pack:2 numa:1 core:2 pu:1")
 * for the whole process. Threads cannot be pinned to made-up cores and
 * memory cannot be bound to made-up nodes (the pool and the weight
 * placement warn and carry on), but the plan, the per-node copies and who
 * reads which copy are exactly what a real two-node machine gets:
 *   - the hardware report and the core/node counts show the synthetic machine;
 *   - replicate with 4 threads places threads 0, 2 on node 0 and 1, 3 on
 *     node 1 and makes two copies; with 2 threads, thread 1 is on node 1;
 *     inside a task every share's ft_weight_data() is the copy of the node
 *     of the thread running it (a share the caller took over: the caller's);
 *   - zeroing node 1's copy of some weights changes the logits (node 1's
 *     worker really reads it during the forward pass); restoring it gives
 *     the --numa off logits back bit for bit;
 *   - distribute, isolate and replicate all give the --numa off logits. */
#include "ft_test_model.h"

#include "engine/model/model_internal.h"
#include "engine/runtime/placement.h"
#include "ft/common.h"
#include "ft/model.h"
#include "ft/threadpool.h"
#include "ft/topology.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_TOK 10

static int32_t g_tokens[N_TOK] = {1, 450, 4996, 1735, 1701, 432, 6, 23, 7999, 3};

static float *eval(struct ft_model *m) { return ft_test_eval_last(m, g_tokens, N_TOK); }

static struct ft_model *load(const char *path, enum ft_numa_mode mode, int threads) {
    struct ft_model *m = NULL;
    const struct ft_model_params mp = {.n_threads = threads, .numa = mode, .numa_node = -1};
    const int rc = ft_model_load(path, &mp, &m);
    CHECKF(rc == FT_OK, "load --numa %s: %s", ft_numa_mode_name(mode), ft_last_error());
    return m;
}

struct probe {
    const struct ft_weight *w;
    const void *seen[8];
    int node[8];
    pthread_t self[8];
};

static void probe_task(void *ctx, int ith, int nth) {
    struct probe *p = ctx;
    (void)nth;
    if (ith == 0) { /* give the worker time to start its share */
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    p->self[ith] = pthread_self();
    p->node[ith] = ft_threadpool_current_node();
    p->seen[ith] = ft_weight_data(p->w, p->node[ith]);
}

static void report(void) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f && ft_hw_report(f) == FT_OK);
    fclose(f);
    CHECKF(buf && strstr(buf, "4 cores") && strstr(buf, "2 NUMA nodes") && strstr(buf, "numa 1:"),
           "hardware report:\n%s", buf ? buf : "");
    free(buf);
}

static void replicate(const char *path, const float *ref) {
    struct ft_model *m = load(path, FT_NUMA_REPLICATE, 4);
    if (!m)
        return;
    const int want4[4] = {0, 1, 0, 1};
    for (int i = 0; i < 4; i++)
        CHECKF(ft_threadpool_node_of(m->pool, i) == want4[i], "thread %d on node %d", i,
               ft_threadpool_node_of(m->pool, i));
    CHECK_EQ_INT(ft_threadpool_placement(m->pool)->n_buffers, 2);
    ft_model_free(m);

    /* Two threads from here on, one per node, so the worker keeps up with
     * the caller on this two-CPU machine and runs its own shares. */
    if (!(m = load(path, FT_NUMA_REPLICATE, 2)))
        return;
    const int want_node[2] = {0, 1};
    for (int i = 0; i < 2; i++)
        CHECKF(ft_threadpool_node_of(m->pool, i) == want_node[i], "thread %d on node %d", i,
               ft_threadpool_node_of(m->pool, i));
    const struct ft_placement *pl = ft_threadpool_placement(m->pool);
    CHECK_EQ_INT(pl->n_buffers, 2);
    const struct ft_weight *wq = &m->layers[0].wq;
    CHECK(wq->rep && wq->rep->n_nodes == 2 && wq->rep->base[0] && wq->rep->base[1] &&
          wq->rep->base[0] != wq->rep->base[1]);
    if (!wq->rep)
        goto done;
    const size_t bytes = (size_t)wq->rows * wq->row_size;
    CHECK(!memcmp(wq->rep->base[0] + wq->rep_off, wq->rep->base[1] + wq->rep_off, bytes));

    /* Until the worker runs share 1 itself (the caller takes it over when
     * the worker is slow to start): every share reads its thread's copy. */
    bool worker_ran = false;
    for (int rep = 0; rep < 1000 && !worker_ran; rep++) {
        struct probe pr = {.w = wq};
        ft_threadpool_run(m->pool, probe_task, &pr);
        for (int i = 0; i < 2; i++) {
            const int node = pthread_equal(pr.self[i], pthread_self()) ? want_node[0] : want_node[i];
            CHECKF(pr.node[i] == node && pr.seen[i] == wq->rep->base[node] + wq->rep_off,
                   "share %d (node %d) reads the copy at %p", i, pr.node[i], pr.seen[i]);
        }
        worker_ran = !pthread_equal(pr.self[1], pthread_self());
    }
    CHECK(worker_ran);

    float *same = eval(m);
    const size_t nv = (size_t)m->hp.n_vocab;
    CHECKF(same && !memcmp(same, ref, nv * sizeof(float)), "replicate: logits differ from --numa off");
    free(same);

    /* Spoil node 1's copy of every ffn_down: only node 1's worker sees it.
     * A forward pass has dozens of tasks; if the worker took part in none
     * (the caller ran every share 1), try again. */
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct ft_weight *d = &m->layers[il].ffn_down;
        memset(d->rep->base[1] + d->rep_off, 0, (size_t)d->rows * d->row_size);
    }
    bool changed = false;
    for (int attempt = 0; attempt < 500 && !changed; attempt++) { /* a loaded machine may need many */
        float *spoiled = eval(m);
        changed = spoiled && memcmp(spoiled, ref, nv * sizeof(float)) != 0;
        free(spoiled);
    }
    CHECKF(changed, "zeroing node 1's copy changed nothing");
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct ft_weight *d = &m->layers[il].ffn_down;
        memcpy(d->rep->base[1] + d->rep_off, d->rep->base[0] + d->rep_off, (size_t)d->rows * d->row_size);
    }
    float *back = eval(m);
    CHECKF(back && !memcmp(back, ref, nv * sizeof(float)), "restored copy: logits differ");
    free(back);
done:
    ft_model_free(m);
}

int main(void) {
    /* Before anything asks hwloc: the process topology is loaded once. */
    setenv("HWLOC_SYNTHETIC", "pack:2 numa:1 core:2 pu:1", 1);
    ft_log_set_level(FT_LOG_ERROR); /* "cannot pin", "cannot bind" are expected */
    const char *shared = ft_test_shared_dir();
    if (!shared)
        FT_TEST_SKIP("FT_SHARED_DIR (../shared with models/) not found; no models to run");
    CHECK_EQ_INT(ft_hw_n_numa_nodes(), 2);
    CHECK_EQ_INT(ft_hw_n_cores(), 4);
    report();

    char path[4096];
    snprintf(path, sizeof(path), "%s/models/gemma3-Q8_0.gguf", shared);
    struct ft_model *m = load(path, FT_NUMA_OFF, 4);
    float *ref = m ? eval(m) : NULL;
    ft_model_free(m);
    CHECK(ref != NULL);
    if (!ref)
        return ft_test_finish("test_numa_synthetic");
    replicate(path, ref);

    for (int mode = FT_NUMA_DISTRIBUTE; mode <= FT_NUMA_REPLICATE; mode++) {
        m = load(path, (enum ft_numa_mode)mode, 0);
        if (!m)
            continue;
        /* Default threads: every core, or node 0's two for isolate (the
         * caller's node is unknown on a made-up machine). */
        CHECK_EQ_INT(ft_threadpool_n_threads(m->pool), mode == FT_NUMA_ISOLATE ? 2 : 4);
        float *l = eval(m);
        CHECKF(l && !memcmp(l, ref, (size_t)m->hp.n_vocab * sizeof(float)), "--numa %s: logits differ",
               ft_numa_mode_name((enum ft_numa_mode)mode));
        free(l);
        ft_model_free(m);
    }
    free(ref);
    return ft_test_finish("test_numa_synthetic");
}
