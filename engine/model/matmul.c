/* Matmul dispatch: out = in W^T for the projections of a forward pass, on
 * the thread pool.
 *
 * Weights stay in their GGUF type. Activation rows are converted once per
 * product to the weight type's vec_dot_type by that type's from_float (the
 * type table, include/ft/types.h), so the rounding of activations is the
 * one place that defines it. Then one of two paths:
 *
 *   vec_dot  each weight row is dotted with each token row (row outer, so a
 *            row is read once per product). Decode (one token) is this: a
 *            single streaming pass over the weights, in chunks of rows the
 *            threads take in turn. Also every type or level without a GEMM,
 *            and batches too small for one. A token uses the type's
 *            vec_dot_gemv instead where llama.cpp would run its single-row
 *            kernel (uses_gemv), so the reference level agrees with it bit
 *            for bit.
 *   GEMM     batches of at least the GEMM's min_tokens (4 on AVX-512; on
 *            AVX2 4 for the types packed vector-wise, 8 for Q2_K/Q3_K)
 *            when the level has one for the type (include/ft/qgemm.h):
 *            activations are packed into tiles of 8 tokens once, then each
 *            thread takes panels of a few weight tiles (16 rows each on
 *            AVX-512), unpacks them into its own buffer (cache-resident, a
 *            few percent of the work) and multiplies them with every
 *            activation tile, in blocks of tokens so the panel and the
 *            token block share L2.
 *
 *   repacked weights repacked at load (engine/model/repack.c) take their tiles'
 *            kernel for every batch, one token too: activations are
 *            packed into tiles as for the GEMM, and each thread takes
 *            chunks of weight tiles straight from the weights (no
 *            unpacking), in blocks of tokens as the GEMM does.
 *
 * Float weights (F32/F16/BF16) in batches take the float GEMM of
 * engine/model/gemm_float.c instead.
 *
 * Several products of the same input (Q, K, V; gate, up) go through one
 * call, so they share the activation conversion and the thread-pool round
 * trips: one dispatch for the conversion (none for a single token, which
 * the calling thread converts) and one for all the products.
 */
#include "matmul.h"

#include "chunk_runs.h"
#include "ft/common.h"
#include "ft/ops.h"
#include "ft/qgemm.h"
#include "ft/threadpool.h"
#include "gemm_float.h"
#include "model_internal.h"

#include <string.h>

/* Products per dispatch (QKV is the most a forward pass groups). */
#define FT_MM_MAX 4
/* Tokens per block of the GEMM loop: the block's activation tiles and the
 * thread's weight panel together stay in L2. */
#define FT_QGEMM_TOKEN_BLOCK 64
/* Bytes of unpacked weights a thread works on at a time (at least one tile). */
#define FT_QGEMM_PANEL_BYTES (512u << 10)

/* The tiled kernels of w for n_tok tokens (its repacked ones, or the
 * level's GEMM), or NULL for vec_dot. */
static const struct ft_qgemm *gemm_for(const struct ft_weight *w, int32_t n_tok) {
    if (w->rw)
        return ft_qgemm_for_tokens(w->rw, n_tok);
    const struct ft_qgemm *g = ft_qgemm_get(w->type);
    return g && n_tok >= g->min_tokens ? ft_qgemm_for_tokens(g, n_tok) : NULL;
}

static enum ft_type vdt_of(const struct ft_weight *w) { return ft_type_traits(w->type)->vec_dot_type; }

/* Repacked weights in a batch this large are unpacked per product into a
 * panel for g's kernel rather than read by kernel_rw. */
static bool rw_unpacks(const struct ft_qgemm *g, int32_t n_tok) {
    return g->unpack_rw && n_tok >= FT_RW_UNPACK_MIN_TOKENS;
}

/* w's tiles go straight to g's kernel_rw, with no panel. */
static bool rw_in_place(const struct ft_weight *w, const struct ft_qgemm *g, int32_t n_tok) {
    return w->rw && !rw_unpacks(g, n_tok);
}

/* ggml multiplies the n activation rows of a matmul with its batch kernel
 * (vec_dot here) when n >= 2 and with its single-row kernel (vec_dot_gemv)
 * when n == 1 -- except for weights it repacks, which take rows in groups
 * of gemm_rows and the n % gemm_rows left over one by one, and IQ4_XS,
 * whose batch kernel starts at gemm_min_rows. n and i are the
 * row's count and index in its sequence (struct ft_scratch). */
static bool uses_gemv(const struct ft_type_info *ti, int32_t n, int32_t i) {
    return n == 1 || n < ti->gemm_min_rows || (ti->gemm_rows > 1 && i >= n - n % ti->gemm_rows);
}

/* ---- scratch sizes ------------------------------------------------------------- */

/* Over every level this CPU runs: the level may change between forward
 * passes (ft_cpu_force_isa), the scratch stays big enough. */
static void need_of(const struct ft_weight *w, int32_t n_tok, size_t *act, size_t *panel) {
    if (!w->data || w->rows <= 0)
        return;
    /* smaller batches may take the base entry of a large one: room for both */
    if (w->rw) { /* activation tiles; a panel only where repacked tiles are unpacked */
        for (const struct ft_qgemm *g = w->rw; g; g = g->large) {
            const size_t tiles = (size_t)(n_tok + g->tile_tokens - 1) / (size_t)g->tile_tokens;
            *act = FT_MAX(*act, tiles * g->a_tile_size(w->cols));
            if (rw_unpacks(g, n_tok)) {
                const size_t wt = g->w_tile_size(w->cols);
                *panel = FT_MAX(*panel, FT_MAX(wt, FT_QGEMM_PANEL_BYTES / wt * wt));
            }
        }
        return;
    }
    for (int isa = 0; isa < FT_ISA_COUNT; isa++) {
        for (const struct ft_qgemm *g = ft_qgemm_get_isa(w->type, (enum ft_isa)isa); g; g = g->large) {
            if (n_tok < g->min_tokens)
                continue;
            const size_t tiles = (size_t)(n_tok + g->tile_tokens - 1) / (size_t)g->tile_tokens;
            const size_t wt = g->w_tile_size(w->cols);
            *act = FT_MAX(*act, tiles * g->a_tile_size(w->cols));
            *panel = FT_MAX(*panel, FT_MAX(wt, FT_QGEMM_PANEL_BYTES / wt * wt));
        }
    }
}

void ft_matmul_scratch_need(const struct ft_model *m, int32_t n_tok, size_t *act, size_t *panel) {
    *act = 0;
    *panel = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct ft_layer *l = &m->layers[il];
        const struct ft_weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->ffn_gate, &l->ffn_up, &l->ffn_down};
        for (size_t i = 0; i < FT_ARRAY_LEN(ws); i++)
            need_of(ws[i], n_tok, act, panel);
        /* experts: one expert at a time, as engine/model/moe.c multiplies them */
        const struct ft_weight *xs[] = {&l->ffn_gate_exps, &l->ffn_up_exps, &l->ffn_down_exps};
        for (size_t i = 0; i < FT_ARRAY_LEN(xs); i++) {
            struct ft_weight e = *xs[i];
            e.rows = m->hp.n_expert > 0 ? e.rows / m->hp.n_expert : 0;
            need_of(&e, n_tok, act, panel);
        }
    }
    need_of(&m->output, n_tok, act, panel);
    /* kernels are faster on 64-byte aligned tiles */
    *panel = (*panel + 63) & ~(size_t)63;
}

/* ---- activation conversion ------------------------------------------------------- */

struct act_task {
    enum ft_type vdt;
    const float *in;
    int32_t n_tok;
    int64_t k;
    void *rows; /* converted rows, a_row bytes apart */
    size_t a_row;
    const struct ft_qgemm *g; /* NULL: rows only; else also pack tiles */
    void *tiles;
    bool one; /* g's one-token tile (pack_a1) */
};

/* from_float_act: activations round as llama.cpp rounds them (types.h). */
static void convert_rows(const struct act_task *c, int32_t t0, int32_t t1) {
    ft_convert_rows_ref(c->vdt, c->in + (int64_t)t0 * c->k, t1 - t0, c->k, (char *)c->rows + (size_t)t0 * c->a_row);
}

/* Thread ith converts a contiguous run of token tiles and packs each one
 * right after its rows: no barrier between the two steps. */
static void act_run(void *ctx, int ith, int nth) {
    const struct act_task *c = ctx;
    const int tt = c->g ? c->g->tile_tokens : 1;
    const int32_t n_tiles = (c->n_tok + tt - 1) / tt;
    const int32_t i0 = (int32_t)((int64_t)n_tiles * ith / nth);
    const int32_t i1 = (int32_t)((int64_t)n_tiles * (ith + 1) / nth);
    for (int32_t i = i0; i < i1; i++) {
        const int32_t t0 = i * tt, t1 = FT_MIN(c->n_tok, t0 + tt);
        convert_rows(c, t0, t1);
        if (c->one)
            c->g->pack_a1(c->rows, c->k, c->tiles);
        else if (c->g)
            c->g->pack_a((const char *)c->rows + (size_t)t0 * c->a_row, c->a_row, t1 - t0, c->k,
                         (char *)c->tiles + (size_t)i * c->g->a_tile_size(c->k));
    }
}

/* Convert in (n_tok, k) to vdt rows in the scratch (F32: in itself), and
 * with g also into g's activation tiles (one: its one-token tile). */
static const void *convert_act(struct ft_fwd *f, const float *in, int64_t k, enum ft_type vdt,
                               const struct ft_qgemm *g, bool one, size_t *a_row) {
    *a_row = ft_row_size(vdt, k);
    if (vdt == FT_TYPE_F32 && !g)
        return in;
    struct act_task c = {vdt, in, f->n_rows, k, f->s->act, *a_row, g, f->s->qg_act, one};
    /* one token: converting on this thread is cheaper than a dispatch */
    if (f->n_rows == 1)
        act_run(&c, 0, 1);
    else
        ft_threadpool_run(f->m->pool, act_run, &c);
    return f->s->act;
}

/* ---- products ---------------------------------------------------------------- */

/* Work is handed out in chunks, which the threads take as
 * engine/model/chunk_runs.h says (a run each, then stealing).
 *   vec_dot: chunks of about FT_MM_CHUNK_BYTES of weight rows, whole
 *            multiples of 16 rows (no two threads write one cache line of
 *            output);
 *   GEMM:    a panel of up to panel_stride bytes of weight tiles, times
 *            every token. */
#define FT_MM_CHUNK_BYTES (128u << 10)

struct mm_task {
    const struct ft_mm *mm;
    int n;              /* products */
    const void *a;      /* converted rows (vec_dot) */
    size_t a_row;
    int32_t n_tok;
    /* GEMM */
    const struct ft_qgemm *const *g; /* per product */
    const void *a_tiles;
    bool one; /* one token on repacked tiles: kernel_rw1 on pack_a1's tile */
    /* vec_dot: per token, its sequence's row count and index (uses_gemv) */
    const int32_t *seq_n, *seq_i;
    char *panels;                    /* per thread */
    size_t panel_stride;
    /* chunks: per product its rows per chunk and its first chunk's index */
    int64_t chunk_rows[FT_MM_MAX];
    int64_t first_chunk[FT_MM_MAX + 1];
    struct ft_chunk_runs runs;
};

static void add_bias(const struct ft_mm *p, int32_t n_tok, int64_t r0, int64_t r1) {
    if (!p->bias || !p->bias->data)
        return;
    const float *b = p->bias->data;
    const int64_t ld = p->w->rows;
    for (int32_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++)
            p->out[t * ld + r] += b[r];
}

/* The next chunk for thread ith: product and rows [r0, r1); false when
 * none is left anywhere. */
static bool next_chunk(struct mm_task *t, int ith, int *prod, int64_t *r0, int64_t *r1) {
    int64_t c;
    if (!ft_chunk_runs_next(&t->runs, ith, &c))
        return false;
    int p = 0;
    while (c >= t->first_chunk[p + 1])
        p++;
    *prod = p;
    *r0 = (c - t->first_chunk[p]) * t->chunk_rows[p];
    *r1 = FT_MIN(t->mm[p].w->rows, *r0 + t->chunk_rows[p]);
    return true;
}

static void vec_dot_run(void *ctx, int ith, int nth) {
    (void)nth;
    struct mm_task *t = ctx;
    const int node = ft_threadpool_current_node();
    int prod;
    int64_t r0, r1;
    while (next_chunk(t, ith, &prod, &r0, &r1)) {
        const struct ft_mm *p = &t->mm[prod];
        const struct ft_weight *w = p->w;
        const struct ft_type_info *ti = ft_type_traits(w->type);
        const void *wd = ft_weight_data(w, node); /* node-local copy (--numa) */
        /* runs of tokens that use the same dot (one run when the two dots are one) */
        const bool two_dots = ti->vec_dot_gemv != ti->vec_dot;
        for (int32_t t0 = 0, t1; t0 < t->n_tok; t0 = t1) {
            const bool gemv = two_dots && uses_gemv(ti, t->seq_n[t0], t->seq_i[t0]);
            for (t1 = t0 + 1; t1 < t->n_tok; t1++)
                if (two_dots && uses_gemv(ti, t->seq_n[t1], t->seq_i[t1]) != gemv)
                    break;
            ft_matmul_rows_ref(gemv ? ti->vec_dot_gemv : ti->vec_dot, wd, w->row_size, w->cols, r0, r1,
                               (const char *)t->a + (size_t)t0 * t->a_row, t->a_row, t1 - t0,
                               p->out + (int64_t)t0 * w->rows, w->rows);
        }
        add_bias(p, t->n_tok, r0, r1);
    }
}

static void gemm_run(void *ctx, int ith, int nth) {
    (void)nth;
    struct mm_task *t = ctx;
    char *panel = t->panels + (size_t)ith * t->panel_stride;
    const int tt = t->g[0]->tile_tokens;
    const int32_t n_at = (t->n_tok + tt - 1) / tt;
    const int32_t at_block = FT_MAX(1, FT_QGEMM_TOKEN_BLOCK / tt);
    const size_t a_tile = t->g[0]->a_tile_size(t->mm[0].w->cols);
    const int node = ft_threadpool_current_node();
    int prod;
    int64_t r0, r1;
    while (next_chunk(t, ith, &prod, &r0, &r1)) {
        const struct ft_mm *p = &t->mm[prod];
        const struct ft_weight *w = p->w;
        const struct ft_qgemm *g = t->g[prod];
        const char *wd = ft_weight_data(w, node); /* node-local copy (--numa) */
        const int tr = g->tile_rows;
        const int64_t np = (r1 - r0 + tr - 1) / tr;
        /* repacked weights are read in place (or, in large batches, unpacked
         * from their tiles); others are unpacked from their rows */
        const bool in_place = rw_in_place(w, g, t->n_tok);
        const size_t w_tile = in_place ? g->rw_tile_size(w->cols) : g->w_tile_size(w->cols);
        const char *tiles = in_place ? wd + (size_t)(r0 / tr) * w_tile : panel;
        if (t->one) {
            for (int64_t j = 0; j < np; j++) {
                const int64_t rr = r0 + j * tr;
                g->kernel_rw1(tiles + (size_t)j * w_tile, t->a_tiles, w->cols, (int)FT_MIN((int64_t)tr, r1 - rr),
                              p->out + rr);
            }
            add_bias(p, t->n_tok, r0, r1);
            continue;
        }
        void (*kernel)(const void *, const void *, int64_t, int, int, float *, int64_t) =
            in_place ? g->kernel_rw : g->kernel;
        for (int64_t j = 0; !in_place && j < np; j++) {
            const int64_t rr = r0 + j * tr;
            if (w->rw)
                g->unpack_rw(wd + (size_t)(rr / tr) * g->rw_tile_size(w->cols), w->cols, panel + (size_t)j * w_tile);
            else
                g->pack_w(wd + (size_t)rr * w->row_size, w->row_size, (int)FT_MIN((int64_t)tr, r1 - rr), w->cols,
                          panel + (size_t)j * w_tile);
        }
        for (int32_t ab = 0; ab < n_at; ab += at_block) {
            const int32_t ae = FT_MIN(n_at, ab + at_block);
            for (int64_t j = 0; j < np; j++) {
                const int64_t rr = r0 + j * tr;
                const int nr = (int)FT_MIN((int64_t)tr, r1 - rr);
                for (int32_t a = ab; a < ae; a++) {
                    const int nt = (int)FT_MIN((int32_t)tt, t->n_tok - a * tt);
                    kernel(tiles + (size_t)j * w_tile, (const char *)t->a_tiles + (size_t)a * a_tile, w->cols, nr, nt,
                           p->out + (int64_t)a * tt * w->rows + rr, w->rows);
                }
            }
        }
        add_bias(p, t->n_tok, r0, r1);
    }
}

/* Products of one path and one activation format, same input. */
static void run_group(struct ft_fwd *f, const float *in, int n, const struct ft_mm *mm,
                      const struct ft_qgemm *const *g, bool att) {
    const int64_t k = mm[0].w->cols;
    /* one token and every weight repacked with a one-token kernel: the
     * compact activation tile (struct ft_qgemm's pack_a1) */
    bool one = g && f->n_rows == 1;
    for (int i = 0; one && i < n; i++)
        one = g[i]->kernel_rw1 && g[i]->pack_a1 == g[0]->pack_a1 && rw_in_place(mm[i].w, g[i], 1);
    size_t a_row;
    const void *a = convert_act(f, in, k, vdt_of(mm[0].w), g ? g[0] : NULL, one, &a_row);
    struct mm_task t = {
        .mm = mm,
        .n = n,
        .a = a,
        .a_row = a_row,
        .n_tok = f->n_rows,
        .g = g,
        .a_tiles = f->s->qg_act,
        .one = one,
        .seq_n = att ? f->s->row_att_n : f->s->row_seq_n,
        .seq_i = att ? f->s->row_att_i : f->s->row_seq_i,
        .panels = f->s->qg_panel,
        .panel_stride = f->s->qg_panel_stride,
    };
    const int64_t nth = ft_threadpool_n_threads(f->m->pool);
    t.first_chunk[0] = 0;
    for (int i = 0; i < n; i++) {
        const struct ft_weight *w = mm[i].w;
        int64_t rows;
        if (g && !rw_in_place(w, g[i], t.n_tok)) {
            /* a panel of whole tiles; at least 4 per thread to share out */
            const int64_t tiles = (w->rows + g[i]->tile_rows - 1) / g[i]->tile_rows;
            const int64_t cap = (int64_t)FT_MAX((size_t)1, t.panel_stride / g[i]->w_tile_size(w->cols));
            rows = FT_MAX((int64_t)1, FT_MIN(cap, tiles / (4 * nth))) * g[i]->tile_rows;
        } else {
            /* rows read in place (vec_dot, or repacked tiles): small chunks
             * of the stream, whole tiles (16 rows is a multiple of every
             * tile), so the threads finish together */
            rows = FT_MAX((int64_t)16, (int64_t)(FT_MM_CHUNK_BYTES / w->row_size) / 16 * 16);
        }
        t.chunk_rows[i] = rows;
        t.first_chunk[i + 1] = t.first_chunk[i] + (w->rows + rows - 1) / rows;
    }
    ft_chunk_runs_init(&t.runs, t.first_chunk[n], (int)nth);
    ft_threadpool_run(f->m->pool, g ? gemm_run : vec_dot_run, &t);
}

/* Float weights through engine/model/gemm_float.c, all of mm[0, n) in one task
 * when they all go there with one type. True when it did them (nothing
 * is done otherwise). */
static bool matmul_float(struct ft_fwd *f, const float *in, int n, const struct ft_mm *mm) {
    float *outs[FT_MM_MAX];
    const struct ft_weight *ws[FT_MM_MAX], *bs[FT_MM_MAX];
    for (int i = 0; i < n; i++) {
        if (mm[i].w->type != mm[0].w->type || !ft_gemm_float_applies(f, mm[i].w))
            return false;
        outs[i] = mm[i].out;
        ws[i] = mm[i].w;
        bs[i] = mm[i].bias;
    }
    ft_gemm_float(f, in, n, outs, ws, bs);
    return true;
}

/* att: count the rows as attention sees them (ft_blk_attn_out). */
static void matmul(struct ft_fwd *f, const float *in, int n, const struct ft_mm *mm, bool att) {
    uint64_t bytes = 0; /* each product reads its whole matrix once */
    for (int i = 0; i < n; i++)
        bytes += (uint64_t)mm[i].w->rows * mm[i].w->row_size;
    atomic_fetch_add_explicit(&f->m->weight_bytes_read, bytes, memory_order_relaxed);
    if (matmul_float(f, in, n, mm))
        return;
    /* Consecutive products that share the path and the activation tiles
     * (or rows) run as one group. */
    int i = 0;
    while (i < n) {
        if (matmul_float(f, in, 1, &mm[i])) {
            i++;
            continue;
        }
        const struct ft_qgemm *g0 = gemm_for(mm[i].w, f->n_rows);
        const struct ft_qgemm *gs[FT_MM_MAX];
        gs[0] = g0;
        int j = i + 1;
        while (j < n && j - i < FT_MM_MAX && !ft_gemm_float_applies(f, mm[j].w)) {
            const struct ft_qgemm *gj = gemm_for(mm[j].w, f->n_rows);
            const bool same = g0 ? gj && gj->pack_a == g0->pack_a && gj->tile_rows == g0->tile_rows
                                 : !gj && vdt_of(mm[j].w) == vdt_of(mm[i].w);
            if (!same)
                break;
            gs[j - i] = gj;
            j++;
        }
        run_group(f, in, j - i, mm + i, g0 ? gs : NULL, att);
        i = j;
    }
}

void ft_matmul(struct ft_fwd *f, const float *in, int n, const struct ft_mm *mm) {
    matmul(f, in, n, mm, false);
}

void ft_matmul_att_rows(struct ft_fwd *f, const float *in, int n, const struct ft_mm *mm) {
    matmul(f, in, n, mm, true);
}
