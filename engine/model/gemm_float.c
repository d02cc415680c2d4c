/* Prefill matmuls of float weights (F32, F16, BF16) through the level's
 * GEMM (include/ft/ops.h: ft_float_kernels.gemm*), hooked into the matmul
 * dispatch of engine/model/blocks.c.
 *
 * Why a separate path: the row-by-row vec_dot loop re-reads and re-widens
 * every weight row once per token, which leaves a 512-token prefill at a
 * fraction of the FMA peak; the GEMM widens each weight once per call and
 * keeps a 12x32 tile of outputs in registers. Below a level's gemm_min_m
 * rows the vec_dot loop stays (AVX2: 4); AVX-512 has a small-m kernel that
 * also takes decode (one pass over the weights, each widened once).
 *
 * Two pool tasks per group of projections of the same input (Q/K/V, gate/
 * up): pack A (threads split its panels), then every thread runs its share
 * of the rows of every weight (whole gemm_nr groups, so no two threads
 * write the same cache line of an output row) and adds the biases to them.
 *
 * F32 weights on the avx512 level go to oneDNN instead (in the same task,
 * on the same slices; engine/model/onednn_matmul.c says why), which reads A
 * unpacked. Measured choice: docs/performance.md, Float weights, attention
 * and row ops. */
#include "gemm_float.h"

#include "ft/common.h"
#include "ft/ops.h"
#include "ft/threadpool.h"
#include "model_internal.h"
#include "onednn_matmul.h"

#include <stdatomic.h>

/* oneDNN takes F32 weights from this many rows on; below, our small-m
 * kernel streams the weights once (oneDNN measured 8-14 GFLOP/s at 1 row). */
#define FT_ONEDNN_MIN_ROWS 7
/* Weights per call at most (Q, K, V is the most a forward pass groups). */
#define FT_GEMM_FLOAT_MAX 4

bool ft_gemm_float_applies(const struct ft_fwd *f, const struct ft_weight *w) {
    const struct ft_float_kernels *fk = ft_float_kernels();
    return fk->gemm_mr > 0 && f->n_rows >= fk->gemm_min_m && fk->gemm_packed_size(w->type, f->n_rows, w->cols) > 0 &&
           fk->gemm_packed_size(w->type, f->n_rows, w->cols) <= f->s->act_size;
}

struct pack_task {
    const struct ft_float_kernels *fk;
    enum ft_type wt;
    const float *in;
    int64_t m, k;
    void *packed;
};

static void pack_run(void *ctx, int ith, int nth) {
    const struct pack_task *t = ctx;
    const int64_t panels = (t->m + t->fk->gemm_mr - 1) / t->fk->gemm_mr;
    const int64_t p0 = panels * ith / nth, p1 = panels * (ith + 1) / nth;
    if (p1 > p0)
        t->fk->gemm_pack(t->wt, t->in, t->k, t->m, t->k, p0, p1, t->packed);
}

struct gemm_task {
    const struct ft_float_kernels *fk;
    const float *in; /* non-NULL: F32 weights through oneDNN, A unpacked */
    int n;
    float *const *outs;
    const struct ft_weight *const *ws;
    const struct ft_weight *const *bs;
    const void *packed;
    int64_t m;
    int glu; /* 0: none; else 1 + enum ft_glu: outs[0] = act(outs[0]) * outs[1] */
    /* small batches (plan_chunks): rows in chunks taken in turn */
    bool chunked;
    int64_t chunk_rows[FT_GEMM_FLOAT_MAX];
    int64_t first_chunk[FT_GEMM_FLOAT_MAX + 1]; /* per weight; with glu, gate's chunks cover up's rows too */
    atomic_int_fast64_t next;
};

/* Rows [r0, r1) of weight i: its product, then its bias. */
static void gemm_rows(const struct gemm_task *t, int i, int64_t r0, int64_t r1) {
    const struct ft_weight *w = t->ws[i];
    float *out = t->outs[i];
    const void *wd = ft_weight_data(w, ft_threadpool_current_node()); /* node-local copy (--numa) */
    if (!t->in) {
        t->fk->gemm(w->type, wd, w->row_size, w->cols, r0, r1, t->packed, t->m, out, w->rows);
    } else if (ft_onednn_matmul(t->in, t->m, w->cols, (const float *)wd + r0 * w->cols, r1 - r0, out + r0,
                                w->rows) != FT_OK) {
        /* oneDNN failed (out of cache slots, memory): plain f32 dots */
        ft_matmul_rows_ref(ft_type_traits(FT_TYPE_F32)->vec_dot, wd, w->row_size, w->cols, r0, r1, t->in,
                           (size_t)w->cols * sizeof(float), t->m, out, w->rows);
    }
    const struct ft_weight *b = t->bs ? t->bs[i] : NULL;
    if (b && b->data) {
        const float *bias = b->data;
        for (int64_t row = 0; row < t->m; row++)
            for (int64_t r = r0; r < r1; r++)
                out[row * w->rows + r] += bias[r];
    }
}

/* outs[0] = act(gate) * up on rows [r0, r1), once both are done there. */
static void glu_rows(const struct gemm_task *t, int64_t r0, int64_t r1) {
    const struct ft_float_kernels *fk = t->fk;
    void (*act)(float *, const float *, const float *, int64_t) = t->glu - 1 == FT_GLU_SILU ? fk->swiglu : fk->geglu;
    const int64_t ld = t->ws[0]->rows;
    for (int64_t row = 0; row < t->m; row++) {
        float *g = t->outs[0] + row * ld + r0;
        act(g, g, t->outs[1] + row * ld + r0, r1 - r0);
    }
}

static void gemm_run(void *ctx, int ith, int nth) {
    struct gemm_task *t = ctx;
    if (t->chunked) {
        for (;;) {
            const int64_t c = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
            const int n = t->glu ? 1 : t->n;
            if (c >= t->first_chunk[n])
                break;
            int i = 0;
            while (c >= t->first_chunk[i + 1])
                i++;
            const int64_t r0 = (c - t->first_chunk[i]) * t->chunk_rows[i];
            const int64_t r1 = FT_MIN(t->ws[i]->rows, r0 + t->chunk_rows[i]);
            gemm_rows(t, i, r0, r1);
            if (t->glu) { /* gate and up have the same rows: up's chunk, then the product */
                gemm_rows(t, 1, r0, r1);
                glu_rows(t, r0, r1);
            }
        }
        return;
    }
    const int64_t nr = t->fk->gemm_nr;
    for (int i = 0; i < t->n; i++) {
        const struct ft_weight *w = t->ws[i];
        const int64_t groups = (w->rows + nr - 1) / nr;
        const int64_t r0 = FT_MIN(w->rows, groups * ith / nth * nr);
        const int64_t r1 = FT_MIN(w->rows, groups * (ith + 1) / nth * nr);
        if (r1 <= r0)
            continue;
        gemm_rows(t, i, r0, r1);
        if (t->glu && i == 1) /* gate and up have the same rows, so the same split */
            glu_rows(t, r0, r1);
    }
}

/* Batches of fewer rows than a GEMM panel (decode, a few streams) read
 * every weight once and do little else, so a thread that starts late (woken
 * late, or preempted on a shared machine) held up the whole product under a
 * split fixed in advance. Those take chunks of about
 * FT_GEMM_FLOAT_CHUNK_BYTES of weights (whole gemm_nr groups, so no two
 * threads write one cache line of output) from a counter instead, as the
 * vec_dot path of matmul.c does; larger batches keep one share per thread. */
#define FT_GEMM_FLOAT_CHUNK_BYTES (256u << 10)
static void plan_chunks(struct gemm_task *t) {
    t->chunked = !t->in && t->m < t->fk->gemm_mr && t->n <= FT_GEMM_FLOAT_MAX; /* oneDNN: one call per thread */
    if (!t->chunked)
        return;
    const int64_t nr = t->fk->gemm_nr;
    const int n = t->glu ? 1 : t->n;
    t->first_chunk[0] = 0;
    for (int i = 0; i < n; i++) {
        const struct ft_weight *w = t->ws[i];
        const int64_t rows = FT_MAX(nr, (int64_t)(FT_GEMM_FLOAT_CHUNK_BYTES / w->row_size) / nr * nr);
        t->chunk_rows[i] = rows;
        t->first_chunk[i + 1] = t->first_chunk[i] + (w->rows + rows - 1) / rows;
    }
    atomic_init(&t->next, 0);
}

/* Pack A for the GEMM (one pool task), unless the weights go to oneDNN,
 * which reads the f32 rows as they are: then NULL is returned in *packed
 * and `in` is what the GEMM task reads. */
static const float *prepare(struct ft_fwd *f, const float *in, const struct ft_weight *w, const void **packed) {
    if (f->n_rows >= FT_ONEDNN_MIN_ROWS && ft_onednn_matmul_applies(w)) {
        *packed = NULL;
        return in;
    }
    struct pack_task p = {ft_float_kernels(), w->type, in, f->n_rows, w->cols, f->s->act};
    ft_threadpool_run(f->m->pool, pack_run, &p);
    *packed = f->s->act;
    return NULL;
}

void ft_gemm_float(struct ft_fwd *f, const float *in, int n, float *const *outs, const struct ft_weight *const *ws,
                   const struct ft_weight *const *bs) {
    const void *packed;
    const float *raw = prepare(f, in, ws[0], &packed);
    struct gemm_task g = {
        .fk = ft_float_kernels(), .in = raw, .n = n, .outs = outs, .ws = ws, .bs = bs, .packed = packed, .m = f->n_rows};
    plan_chunks(&g);
    ft_threadpool_run(f->m->pool, gemm_run, &g);
}

void ft_gemm_float_glu(struct ft_fwd *f, const float *in, const struct ft_weight *gate, const struct ft_weight *up,
                       enum ft_glu act, float *gate_out, float *up_out) {
    float *outs[2] = {gate_out, up_out};
    const struct ft_weight *ws[2] = {gate, up};
    const void *packed;
    const float *raw = prepare(f, in, gate, &packed);
    struct gemm_task g = {.fk = ft_float_kernels(), .in = raw, .n = 2, .outs = outs, .ws = ws, .packed = packed,
                          .m = f->n_rows, .glu = 1 + (int)act};
    plan_chunks(&g);
    ft_threadpool_run(f->m->pool, gemm_run, &g);
}
