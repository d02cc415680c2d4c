/* Repacking matmul weights once at load into the tiles their kernel reads
 * (include/ft/qgemm.h: repack_w / kernel_rw), so no product unpacks them
 * again: decode of a few requests then costs little more than decode of
 * one, and a single token reads the tiles as it would the rows.
 *
 * Only copied weights are repacked (the file mapping of --mmap stays as it
 * is), in place and in every NUMA copy, one tile after another on the
 * thread pool; a tile has exactly as many bytes as its rows. The token
 * embedding is repacked only when it is also the output head (tied
 * weights, as in Llama 3.2 1B and Gemma 3), and then its lookup rebuilds
 * each row (rw_row). The stacked expert matrices of a mixture of experts
 * are repacked when each expert's rows are whole tiles, so that expert
 * e's tiles are its rows' bytes (engine/model/moe_matmul.c). The kernels are the level's at load:
 * a later ft_cpu_force_isa() does not change them for this model. */
#include "repack.h"

#include "ft/common.h"
#include "ft/qgemm.h"
#include "ft/threadpool.h"
#include "model_internal.h"
#include "moe_matmul.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COPIES 64

struct repack_job {
    struct ft_weight *w;
    char *dst[MAX_COPIES]; /* every copy of w's bytes */
    int n_dst;
};

struct repack_task {
    struct repack_job *jobs;
    int n_jobs;
    int64_t *first_tile; /* per job, n_jobs + 1: prefix sums of tiles */
    size_t max_tile;     /* bytes of the largest tile */
    atomic_int_fast64_t next;
    atomic_int failed;
};

static void repack_run(void *ctx, int ith, int nth) {
    (void)ith;
    (void)nth;
    struct repack_task *t = ctx;
    char *rows = malloc(t->max_tile);
    if (!rows) {
        atomic_store(&t->failed, 1);
        return;
    }
    int j = 0;
    for (;;) {
        const int64_t c = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        if (c >= t->first_tile[t->n_jobs])
            break;
        while (c >= t->first_tile[j + 1])
            j++;
        const struct repack_job *jb = &t->jobs[j];
        const struct ft_qgemm *g = jb->w->rw;
        const size_t bytes = (size_t)g->tile_rows * jb->w->row_size;
        const size_t off = (size_t)(c - t->first_tile[j]) * bytes;
        for (int d = 0; d < jb->n_dst; d++) {
            memcpy(rows, jb->dst[d] + off, bytes);
            g->repack_w(rows, jb->w->row_size, jb->w->cols, jb->dst[d] + off);
        }
    }
    free(rows);
}

/* The kernels that would take w repacked, or NULL. w of n_mat stacked
 * matrices (experts) is repacked only when every matrix is whole tiles. */
static const struct ft_qgemm *repack_for(const struct ft_model *m, const struct ft_weight *w, int64_t n_mat) {
    const bool tied = m->output.data == m->tok_embd.data;
    if (!w->data || w->rows <= 0 || (w == &m->tok_embd && (!tied || w->row_size > FT_RW_EMBED_ROW_MAX)) ||
        (w == &m->output && tied))
        return NULL;
    const struct ft_qgemm *g = ft_qgemm_get(w->type);
    if (!g || !g->repack_w || w->rows % (n_mat * g->tile_rows) != 0 ||
        g->rw_tile_size(w->cols) != (size_t)g->tile_rows * w->row_size)
        return NULL;
    return g;
}

/* Queue w (every copy of it) if its type is repacked; count its bytes. */
static void add_job(const struct ft_model *m, struct repack_task *t, size_t *bytes, struct ft_weight *w,
                    int64_t n_mat) {
    const struct ft_qgemm *g = repack_for(m, w, n_mat);
    if (!g)
        return;
    struct repack_job *jb = &t->jobs[t->n_jobs];
    jb->w = w;
    jb->dst[jb->n_dst++] = (char *)(uintptr_t)w->data;
    for (int nd = 0; w->rep && nd < w->rep->n_nodes; nd++) {
        char *p = w->rep->base[nd] ? w->rep->base[nd] + w->rep_off : NULL;
        bool seen = !p;
        for (int d = 0; d < jb->n_dst && !seen; d++)
            seen = jb->dst[d] == p;
        if (!seen && jb->n_dst < MAX_COPIES)
            jb->dst[jb->n_dst++] = p;
    }
    w->rw = g;
    t->max_tile = FT_MAX(t->max_tile, (size_t)g->tile_rows * w->row_size);
    t->first_tile[t->n_jobs + 1] = t->first_tile[t->n_jobs] + w->rows / g->tile_rows;
    *bytes += (size_t)w->rows * w->row_size;
    t->n_jobs++;
}

int ft_weights_repack(struct ft_model *m) {
    const char *env = getenv("FT_REPACK");
    if (!m->numa_weights || (env && !strcmp(env, "0")))
        return FT_OK;
    const int n_max = 2 + 10 * m->hp.n_layer;
    struct repack_job *jobs = calloc((size_t)n_max, sizeof(*jobs));
    int64_t *first = malloc(sizeof(int64_t) * ((size_t)n_max + 1));
    if (!jobs || !first) {
        free(jobs);
        free(first);
        return FT_ENOMEM;
    }
    struct repack_task t = {.jobs = jobs, .first_tile = first};
    first[0] = 0;
    size_t bytes = 0;
    add_job(m, &t, &bytes, &m->tok_embd, 1); /* only when it is the output head too */
    add_job(m, &t, &bytes, &m->output, 1);   /* only when it is not the embedding */
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct ft_layer *l = &m->layers[il];
        struct ft_weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->ffn_gate, &l->ffn_up, &l->ffn_down};
        for (size_t i = 0; i < FT_ARRAY_LEN(ws); i++)
            add_job(m, &t, &bytes, ws[i], 1);
        /* experts: moe_matmul.c reads them; the one-expert-at-a-time path
         * of float experts never sees repacked types */
        struct ft_weight *xs[] = {&l->ffn_gate_exps, &l->ffn_up_exps, &l->ffn_down_exps};
        const bool experts = m->hp.n_expert > 0 && ft_moe_matmul_applies(l);
        for (size_t i = 0; experts && i < FT_ARRAY_LEN(xs); i++)
            add_job(m, &t, &bytes, xs[i], m->hp.n_expert);
    }
    if (m->output.data == m->tok_embd.data)
        m->output.rw = m->tok_embd.rw; /* the same bytes */
    int rc = FT_OK;
    if (t.n_jobs > 0) {
        atomic_init(&t.next, 0);
        atomic_init(&t.failed, 0);
        ft_threadpool_run(m->pool, repack_run, &t);
        if (atomic_load(&t.failed)) {
            FT_LOG_E("out of memory repacking the weights");
            rc = FT_ENOMEM;
        } else {
            FT_LOG_I("weights: %d matrices (%.1f MiB) repacked for the %s kernels", t.n_jobs,
                     (double)bytes / (1 << 20), ft_simd_isa_name());
        }
    }
    free(jobs);
    free(first);
    return rc;
}
