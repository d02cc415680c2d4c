/* The experts' products of a mixture-of-experts block (engine/model/moe.c)
 * in two thread-pool tasks per layer: gate and up of every selected expert
 * in one, down of every selected expert in the other.
 *
 * moe.c sorts the (token, slot) pairs by expert, so expert e owns pairs
 * [start, start + cnt) of the sorted order. One task's work is a list of
 * chunks over (selected expert, rows of its matrices): a gate/up chunk
 * computes the same rows of gate and up for all of its expert's pairs and
 * applies the GLU to those columns; a down chunk computes rows of down and
 * scales them by each pair's routing weight. The threads take the chunks
 * as engine/model/chunk_runs.h says, so they finish together however the
 * tokens spread over the experts, and each expert's weights are read once
 * per step whatever its number of pairs.
 *
 * Per expert, the kernels are those engine/model/matmul.c would pick for a
 * matrix of cnt rows: the repacked tiles (engine/model/repack.c repacks
 * the expert tensors as it does dense ones, so a tile never straddles two
 * experts) with the one-token kernel for cnt == 1, the level's GEMM from
 * its min_tokens, else the single-row dot vec_dot_gemv (as ggml's
 * mul_mat_id runs one row at a time: the reference level reproduces its
 * numerics bit for bit). Activations are converted to the weights'
 * vec_dot_type once per pair row (per token when one token is the input of
 * every expert: decode's gate/up), and packed into tiles per expert.
 *
 * Float experts (F16/BF16/F32) are not done here (ft_moe_matmul_applies):
 * moe.c multiplies them one expert at a time through matmul.c, which has
 * their float GEMM. */
#include "moe_matmul.h"

#include "chunk_runs.h"
#include "model_internal.h"

#include "ft/common.h"
#include "ft/ops.h"
#include "ft/qgemm.h"
#include "ft/threadpool.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* Bytes of weights per in-place chunk (vec_dot rows or repacked tiles), as
 * engine/model/matmul.c's FT_MM_CHUNK_BYTES. */
#define MOE_CHUNK_BYTES (128u << 10)
/* Tokens per block of the GEMM loop (matmul.c's FT_QGEMM_TOKEN_BLOCK). */
#define MOE_TOKEN_BLOCK 64
/* Pairs from which the activations are converted on the pool. */
#define MOE_CONVERT_PARALLEL 16
/* Rows per conversion unit of an expert on vec_dot (no tiles). */
#define MOE_VEC_UNIT 8

bool ft_moe_matmul_applies(const struct ft_layer *l) {
    const struct ft_weight *g = &l->ffn_gate_exps, *u = &l->ffn_up_exps, *d = &l->ffn_down_exps;
    return ft_type_traits(g->type)->is_quantized && ft_type_traits(d->type)->is_quantized && g->type == u->type &&
           (g->rw == NULL) == (u->rw == NULL);
}

/* ---- per-expert kernels -------------------------------------------------------- */

/* The tiled kernels for an expert of w with cnt pairs, or NULL for vec_dot
 * (matmul.c's gemm_for). */
static const struct ft_qgemm *kernels_for(const struct ft_weight *w, int32_t cnt) {
    if (w->rw)
        return ft_qgemm_for_tokens(w->rw, cnt);
    const struct ft_qgemm *g = ft_qgemm_get(w->type);
    return g && cnt >= g->min_tokens ? ft_qgemm_for_tokens(g, cnt) : NULL;
}

/* Repacked tiles read as they are (not unpacked into a panel). */
static bool in_place(const struct ft_weight *w, const struct ft_qgemm *g, int32_t cnt) {
    return w->rw && !(g->unpack_rw && cnt >= FT_RW_UNPACK_MIN_TOKENS);
}

void ft_moe_matmul_scratch_need(const struct ft_model *m, int32_t n_tok, size_t *rows, size_t *tiles) {
    *rows = 0;
    *tiles = 0;
    const int64_t X = m->hp.n_expert, P = (int64_t)n_tok * m->hp.n_expert_used;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct ft_layer *l = &m->layers[il];
        if (!ft_moe_matmul_applies(l))
            continue;
        const struct ft_weight *ws[] = {&l->ffn_gate_exps, &l->ffn_down_exps};
        for (size_t i = 0; i < FT_ARRAY_LEN(ws); i++) {
            const struct ft_weight *w = ws[i];
            const int64_t k = w->cols;
            *rows = FT_MAX(*rows, (size_t)P * ft_row_size(ft_type_traits(w->type)->vec_dot_type, k));
            /* every kernel entry any level may pick (the level may change
             * between passes; repacked weights keep their load-time one):
             * each expert's tiles from a 64-byte boundary */
            size_t per_token = 0, per_tile = 0; /* experts may take different entries */
            for (int isa = 0; isa < FT_ISA_COUNT; isa++) {
                const struct ft_qgemm *g0 = w->rw ? w->rw : ft_qgemm_get_isa(w->type, (enum ft_isa)isa);
                for (const struct ft_qgemm *g = g0; g; g = g->large) {
                    const size_t a = (g->a_tile_size(k) + 63) & ~(size_t)63; /* >= a1_tile_size */
                    per_token = FT_MAX(per_token, (a + (size_t)g->tile_tokens - 1) / (size_t)g->tile_tokens);
                    per_tile = FT_MAX(per_tile, a);
                }
                if (w->rw)
                    break;
            }
            *tiles = FT_MAX(*tiles, (size_t)P * per_token + (size_t)X * per_tile);
        }
    }
}

/* ---- the plan of one task ------------------------------------------------------- */

/* One selected expert in a task. */
struct xp {
    int32_t e;                /* expert id */
    int32_t start, cnt;       /* its pairs in the sorted order */
    const struct ft_qgemm *g; /* tiled kernels, NULL: vec_dot_gemv */
    bool one;                 /* one pair on repacked tiles: kernel_rw1 on a one-token tile */
    size_t tile_off;          /* its activation tiles in the scratch */
    int64_t chunk_rows;       /* rows of its matrices per chunk */
    int64_t first_chunk;      /* its first chunk's index */
    int32_t first_unit;       /* its first conversion unit */
};

struct xtask {
    struct ft_fwd *f;
    int n_w;                       /* products: 2 (gate, up) or 1 (down) */
    const struct ft_weight *w[2];  /* stacked expert matrices */
    const struct ft_weight *b[2];  /* stacked biases, or absent */
    float *out[2];                 /* (P, rows_e) per product */
    int64_t rows_e, k;             /* rows and columns of one expert's matrix */
    int n_x;
    struct xp *x;                  /* (n_x) */
    /* activations */
    const float *in;               /* float input rows */
    const int32_t *src;            /* per sorted pair, its row of in; NULL: row = pair */
    bool shared;                   /* every pair is in's row 0 (one token's gate/up) */
    enum ft_type vdt;
    size_t a_row;
    char *rows;                    /* converted rows, per sorted pair (row 0 only when shared) */
    char *tiles;
    int32_t n_units;
    /* after the products */
    const struct ft_moe_params *mp; /* gate/up: the GLU */
    const float *pair_w;           /* down: each sorted pair's routing weight */
    char *panels;
    size_t panel_stride;
    atomic_uint_fast64_t bytes;    /* weight bytes read (ft_model's counter) */
    struct ft_chunk_runs runs;
};

/* Conversion units of expert x: a tile of pairs, one pair, or MOE_VEC_UNIT rows. */
static int32_t unit_rows(const struct xp *x) {
    return x->one ? 1 : x->g ? x->g->tile_tokens : MOE_VEC_UNIT;
}

/* Converts unit u (rows of one expert) and packs its tile. */
static void convert_unit(const struct xtask *t, int32_t u) {
    int i = 0;
    while (i + 1 < t->n_x && u >= t->x[i + 1].first_unit)
        i++;
    const struct xp *x = &t->x[i];
    const int32_t ur = unit_rows(x), j = u - x->first_unit;
    const int32_t r0 = j * ur, r1 = FT_MIN(x->cnt, r0 + ur);
    char *rows = t->rows + (size_t)(t->shared ? 0 : x->start + r0) * t->a_row;
    const int32_t n = t->shared ? 1 : r1 - r0;
    for (int32_t r = 0; r < n; r++) {
        const int64_t s = t->shared ? 0 : t->src ? t->src[x->start + r0 + r] : x->start + r0 + r;
        ft_convert_rows_ref(t->vdt, t->in + s * t->k, 1, t->k, rows + (size_t)r * t->a_row);
    }
    if (x->one)
        x->g->pack_a1(rows, t->k, t->tiles + x->tile_off);
    else if (x->g)
        x->g->pack_a(rows, t->a_row, n, t->k, t->tiles + x->tile_off + (size_t)j * x->g->a_tile_size(t->k));
}

static void convert_run(void *ctx, int ith, int nth) {
    const struct xtask *t = ctx;
    const int32_t u0 = (int32_t)((int64_t)t->n_units * ith / nth), u1 = (int32_t)((int64_t)t->n_units * (ith + 1) / nth);
    for (int32_t u = u0; u < u1; u++)
        convert_unit(t, u);
}

/* ---- products ------------------------------------------------------------------ */

/* out[(x->start + p) * rows_e + r] for the expert's pairs p, rows [r0, r1)
 * of product w. */
static void expert_rows(struct xtask *t, const struct xp *x, int prod, int64_t r0, int64_t r1, char *panel,
                        int node) {
    const struct ft_weight *w = t->w[prod];
    const int64_t k = t->k, ld = t->rows_e;
    const char *wd = (const char *)ft_weight_data(w, node) + (size_t)(x->e * t->rows_e) * w->row_size;
    float *out = t->out[prod] + (int64_t)x->start * ld;
    const struct ft_qgemm *g = x->g;
    if (!g) {
        const struct ft_type_info *ti = ft_type_traits(w->type);
        const char *a = t->rows + (size_t)(t->shared ? 0 : x->start) * t->a_row;
        ft_matmul_rows_ref(ti->vec_dot_gemv, wd, w->row_size, k, r0, r1, a, t->a_row, x->cnt, out, ld);
        return;
    }
    const int tr = g->tile_rows;
    const int64_t np = (r1 - r0 + tr - 1) / tr;
    const char *a_tiles = t->tiles + x->tile_off;
    if (x->one) {
        const size_t w_tile = g->rw_tile_size(k);
        for (int64_t j = 0; j < np; j++) {
            const int64_t rr = r0 + j * tr;
            g->kernel_rw1(wd + (size_t)(rr / tr) * w_tile, a_tiles, k, (int)FT_MIN((int64_t)tr, r1 - rr), out + rr);
        }
        return;
    }
    const bool ip = in_place(w, g, x->cnt);
    const size_t w_tile = ip ? g->rw_tile_size(k) : g->w_tile_size(k);
    const char *tiles = ip ? wd + (size_t)(r0 / tr) * w_tile : panel;
    for (int64_t j = 0; !ip && j < np; j++) {
        const int64_t rr = r0 + j * tr;
        if (w->rw)
            g->unpack_rw(wd + (size_t)(rr / tr) * g->rw_tile_size(k), k, panel + (size_t)j * w_tile);
        else
            g->pack_w(wd + (size_t)rr * w->row_size, w->row_size, (int)FT_MIN((int64_t)tr, r1 - rr), k,
                      panel + (size_t)j * w_tile);
    }
    void (*kernel)(const void *, const void *, int64_t, int, int, float *, int64_t) = ip ? g->kernel_rw : g->kernel;
    const int tt = g->tile_tokens;
    const int32_t n_at = (x->cnt + tt - 1) / tt, at_block = FT_MAX(1, MOE_TOKEN_BLOCK / tt);
    const size_t a_tile = g->a_tile_size(k);
    for (int32_t ab = 0; ab < n_at; ab += at_block) {
        const int32_t ae = FT_MIN(n_at, ab + at_block);
        for (int64_t j = 0; j < np; j++) {
            const int64_t rr = r0 + j * tr;
            const int nr = (int)FT_MIN((int64_t)tr, r1 - rr);
            for (int32_t a = ab; a < ae; a++)
                kernel(tiles + (size_t)j * w_tile, a_tiles + (size_t)a * a_tile, k, nr,
                       (int)FT_MIN((int32_t)tt, x->cnt - a * tt), out + (int64_t)a * tt * ld + rr, ld);
        }
    }
}

/* gpt-oss's clamped SwiGLU (ggml_swiglu_oai): min(g, limit) * sigmoid(alpha * min(g, limit)) *
 * (clamp(u, -limit, limit) + 1). */
static void swiglu_oai(float *y, const float *g, const float *u, int64_t n, float alpha, float limit) {
    for (int64_t i = 0; i < n; i++) {
        const float x = fminf(g[i], limit);
        const float v = fminf(fmaxf(u[i], -limit), limit);
        const float out = x / (1.0f + expf(alpha * (-x)));
        y[i] = out * (v + 1.0f);
    }
}

void ft_moe_glu(const struct ft_moe_params *mp, float *g, const float *u, int64_t n) {
    if (mp->act == FT_MOE_ACT_SWIGLU_OAI)
        swiglu_oai(g, g, u, n, mp->alpha, mp->limit);
    else
        ft_float_kernels()->swiglu(g, g, u, n);
}

static void expert_run(void *ctx, int ith, int nth) {
    (void)nth;
    struct xtask *t = ctx;
    char *panel = t->panels + (size_t)ith * t->panel_stride;
    const int node = ft_threadpool_current_node();
    const int64_t ld = t->rows_e;
    uint64_t bytes = 0;
    int i = 0;
    int64_t c;
    while (ft_chunk_runs_next(&t->runs, ith, &c)) {
        /* chunks are taken nearly in order: search from the last expert */
        while (i + 1 < t->n_x && c >= t->x[i + 1].first_chunk)
            i++;
        while (c < t->x[i].first_chunk)
            i--;
        const struct xp *x = &t->x[i];
        const int64_t r0 = (c - x->first_chunk) * x->chunk_rows, r1 = FT_MIN(ld, r0 + x->chunk_rows);
        for (int p = 0; p < t->n_w; p++) {
            expert_rows(t, x, p, r0, r1, panel, node);
            bytes += (uint64_t)(r1 - r0) * t->w[p]->row_size;
            if (t->b[p] && t->b[p]->data) { /* the bias after the product, as ggml_add */
                const float *b = (const float *)t->b[p]->data + x->e * ld;
                for (int32_t q = 0; q < x->cnt; q++)
                    for (int64_t r = r0; r < r1; r++)
                        t->out[p][(int64_t)(x->start + q) * ld + r] += b[r];
            }
        }
        for (int32_t q = 0; q < x->cnt; q++) {
            float *o = t->out[0] + (int64_t)(x->start + q) * ld;
            if (t->mp) /* the GLU on the columns this chunk computed */
                ft_moe_glu(t->mp, o + r0, t->out[1] + (int64_t)(x->start + q) * ld + r0, r1 - r0);
            else /* the routing weight: the product first, as ggml_mul does */
                for (int64_t r = r0; r < r1; r++)
                    o[r] *= t->pair_w[x->start + q];
        }
    }
    atomic_fetch_add_explicit(&t->bytes, bytes, memory_order_relaxed);
}

/* Plans, converts and runs one task over the selected experts. */
static void run_task(struct xtask *t, const struct ft_moe_sel *sel) {
    struct ft_fwd *f = t->f;
    struct ft_scratch *s = f->s;
    struct xp x[FT_MOE_MAX_EXPERTS];
    const int nth = ft_threadpool_n_threads(f->m->pool);
    const struct ft_weight *w = t->w[0];
    t->x = x;
    t->n_x = 0;
    t->vdt = ft_type_traits(w->type)->vec_dot_type;
    t->a_row = ft_row_size(t->vdt, t->k);
    t->rows = s->moe_act;
    t->tiles = s->moe_tiles;
    t->panels = s->qg_panel;
    t->panel_stride = s->qg_panel_stride;
    size_t off = 0;
    int64_t chunks = 0;
    int32_t units = 0;
    for (int i = 0; i < sel->n; i++) {
        struct xp *e = &x[t->n_x++];
        *e = (struct xp){.e = sel->ex[i], .start = sel->start[i], .cnt = sel->cnt[i]};
        e->g = kernels_for(w, e->cnt);
        e->one = e->g && e->cnt == 1 && e->g->kernel_rw1 && in_place(w, e->g, 1);
        /* one token's gate/up: every expert reads the same tile at offset 0 */
        e->tile_off = t->shared ? 0 : off;
        if (!t->shared && e->one)
            off += (e->g->a1_tile_size(t->k) + 63) & ~(size_t)63;
        else if (!t->shared && e->g)
            off += (size_t)((e->cnt + e->g->tile_tokens - 1) / e->g->tile_tokens) *
                   ((e->g->a_tile_size(t->k) + 63) & ~(size_t)63);
        e->first_unit = units;
        units += t->shared ? (i == 0) : (e->cnt + unit_rows(e) - 1) / unit_rows(e);
        /* chunks: in place, small pieces of the stream (whole 16-row tiles,
         * MOE_CHUNK_BYTES over all products); unpacked, a panel's worth of
         * tiles, at least 4 chunks per thread over the experts */
        int64_t rows;
        if (e->g && !e->one && !in_place(w, e->g, e->cnt)) {
            const int64_t tr = e->g->tile_rows, tiles = (t->rows_e + tr - 1) / tr;
            const int64_t cap = (int64_t)FT_MAX((size_t)1, t->panel_stride / e->g->w_tile_size(t->k));
            const int64_t want = FT_MAX((int64_t)1, tiles * sel->n / (4 * nth) + 1);
            rows = FT_MIN(cap, FT_MIN(tiles, want)) * tr;
        } else {
            size_t row_bytes = 0;
            for (int p = 0; p < t->n_w; p++)
                row_bytes += t->w[p]->row_size;
            rows = FT_MAX((int64_t)16, (int64_t)(MOE_CHUNK_BYTES / row_bytes) / 16 * 16);
        }
        e->chunk_rows = rows;
        e->first_chunk = chunks;
        chunks += (t->rows_e + rows - 1) / rows;
    }
    t->n_units = units;
    /* The tiles' offsets above were 64-byte aligned, and a tile of one token
     * per expert (shared) needs no more room than the scratch holds. */
    if (units > 0) {
        const int32_t pairs = t->shared ? 1 : sel->start[sel->n - 1] + sel->cnt[sel->n - 1];
        if (pairs >= MOE_CONVERT_PARALLEL)
            ft_threadpool_run(f->m->pool, convert_run, t);
        else
            convert_run(t, 0, 1);
    }
    atomic_init(&t->bytes, 0);
    ft_chunk_runs_init(&t->runs, chunks, nth);
    ft_threadpool_run(f->m->pool, expert_run, t);
    atomic_fetch_add_explicit(&f->m->weight_bytes_read, atomic_load(&t->bytes), memory_order_relaxed);
}

void ft_moe_matmul_gate_up(struct ft_fwd *f, const struct ft_layer *l, const struct ft_moe_sel *sel,
                           const float *in, const int32_t *src, const struct ft_moe_params *mp, float *gate,
                           float *up) {
    struct xtask t = {
        .f = f,
        .n_w = 2,
        .w = {&l->ffn_gate_exps, &l->ffn_up_exps},
        .b = {&l->ffn_gate_exps_b, &l->ffn_up_exps_b},
        .out = {gate, up},
        .rows_e = l->ffn_gate_exps.rows / f->m->hp.n_expert,
        .k = l->ffn_gate_exps.cols,
        .in = in,
        .src = src,
        .shared = f->n_rows == 1,
        .mp = mp,
    };
    run_task(&t, sel);
}

void ft_moe_matmul_down(struct ft_fwd *f, const struct ft_layer *l, const struct ft_moe_sel *sel, const float *in,
                        const float *pair_w, float *out) {
    struct xtask t = {
        .f = f,
        .n_w = 1,
        .w = {&l->ffn_down_exps, NULL},
        .b = {&l->ffn_down_exps_b, NULL},
        .out = {out, NULL},
        .rows_e = l->ffn_down_exps.rows / f->m->hp.n_expert,
        .k = l->ffn_down_exps.cols,
        .in = in,
        .pair_w = pair_w,
    };
    run_task(&t, sel);
}
