/* Shared transformer blocks the architecture files compose: embedding,
 * RMS norm, the projections, RoPE, KV store, attention, gated MLP, the
 * output head. The projections run through engine/model/matmul.c and the
 * attention kernel through engine/model/attention.c; every ft_blk_* is
 * here.
 *
 * Matmul follows ggml so results agree with llama.cpp's: weights stay in
 * their GGUF type; each activation row is converted once to the weight
 * type's vec_dot_type (Q8_0, Q8_1, Q8_K, F16, BF16 or F32) with its
 * from_float_act, and weight rows are dotted against it with that type's
 * vec_dot -- or vec_dot_gemv where llama.cpp would run its single-row
 * kernel, which adds in another order -- or, on kernel levels that have
 * one, a quantized or float GEMM for batches. The projections are
 * engine/model/matmul.c.
 *
 * Those kernel choices, and the attention algorithm, depend in llama.cpp on
 * how many rows a batch has; here on how many rows of the row's own
 * sequence it has. With the reference kernels (FT_ISA=scalar) a lone
 * sequence (ft run, ft logits) gets llama.cpp's numbers exactly, and a
 * sequence in a shared batch the numbers it gets alone
 * (tests/unit/test_model_batch.c). The GEMMs of the faster levels go by the
 * rows of the whole batch instead, so that a continuous-batching step reads
 * each weight once for all its sequences.
 *
 * Every function works on the rows of one internal batch (struct ft_fwd);
 * none allocates. */
#include "blocks.h"

#include "attention.h"
#include "ft/qgemm.h"
#include "kv_cache.h"
#include "matmul.h"
#include "model_internal.h"

#include <math.h>
#include <string.h>

bool ft_layer_is_swa(const struct ft_hparams *hp, int il) {
    if (hp->sliding_window <= 0)
        return false;
    /* llama.cpp set_swa_pattern: pattern 0 makes every layer local; else the
     * last layer of each group of `pattern` is global. */
    if (hp->swa_pattern <= 0)
        return true;
    return il % hp->swa_pattern < hp->swa_pattern - 1;
}

void ft_layer_rope(const struct ft_model *m, int il, struct ft_rope *r) {
    const struct ft_hparams *hp = &m->hp;
    const bool swa = ft_layer_is_swa(hp, il);
    r->n_dims = hp->n_rot;
    r->neox = hp->rope_neox;
    /* llama.cpp: local layers have their own base and scaling (gemma3: none,
     * gpt-oss: the global one); the YaRN settings are the context's, shared
     * by all layers. */
    r->freq_base = swa ? hp->rope_freq_base_swa : hp->rope_freq_base;
    r->freq_scale = swa ? hp->rope_freq_scale_swa : hp->rope_freq_scale;
    r->ext_factor = hp->rope_ext_factor;
    r->attn_factor = hp->rope_attn_factor;
    r->beta_fast = hp->rope_beta_fast;
    r->beta_slow = hp->rope_beta_slow;
    r->n_ctx_orig = hp->rope_n_ctx_orig;
    r->freq_factors = m->rope_freqs.data;
}

/* ---- which kernel llama.cpp would use ------------------------------------------ */

/* For each row, how many rows of its sequence are in rows[0, n) and its
 * index among them. Batches are at most FT_UBATCH rows: quadratic is fine. */
static void count_seq_rows(const int32_t *seq, int32_t n, int32_t *cnt, int32_t *idx) {
    for (int32_t r = 0; r < n; r++) {
        int32_t i = 0;
        for (int32_t q = 0; q < r; q++)
            i += seq[q] == seq[r];
        idx[r] = i;
    }
    for (int32_t r = 0; r < n; r++) {
        int32_t c = idx[r] + 1;
        for (int32_t q = r + 1; q < n; q++)
            c += seq[q] == seq[r];
        cnt[r] = c;
    }
}

void ft_blk_rows_init(struct ft_fwd *f) {
    struct ft_scratch *s = f->s;
    count_seq_rows(s->row_seq, f->n_rows, s->row_seq_n, s->row_seq_i);
    memcpy(s->row_att_n, s->row_seq_n, sizeof(int32_t) * (size_t)f->n_rows);
    memcpy(s->row_att_i, s->row_seq_i, sizeof(int32_t) * (size_t)f->n_rows);
}

/* ---- elementwise and per-row blocks ------------------------------------------ */

/* Row ops run on the pool when the batch has at least this many rows;
 * below that (decode) inline: a decode step's norm takes a microsecond or
 * two, about what waking the workers costs. */
#define FT_ROWS_PARALLEL 16

typedef void (*rows_fn)(const void *ctx, struct ft_fwd *f, int64_t i0, int64_t i1);

struct rows_task {
    rows_fn fn;
    const void *ctx;
    struct ft_fwd *f;
    int64_t n;
};

static void rows_run(void *ctx, int ith, int nth) {
    const struct rows_task *t = ctx;
    const int64_t i0 = t->n * ith / nth, i1 = t->n * (ith + 1) / nth;
    if (i1 > i0)
        t->fn(t->ctx, t->f, i0, i1);
}

/* fn over rows [0, n), split over the pool for large batches. */
static void for_rows(struct ft_fwd *f, int64_t n, rows_fn fn, const void *ctx) {
    if (f->n_rows < FT_ROWS_PARALLEL) {
        fn(ctx, f, 0, n);
        return;
    }
    struct rows_task t = {fn, ctx, f, n};
    ft_threadpool_run(f->m->pool, rows_run, &t);
}

struct embed_ctx {
    float scale;
};

static void embed_rows(const void *ctx, struct ft_fwd *f, int64_t i0, int64_t i1) {
    const struct embed_ctx *c = ctx;
    const struct ft_weight *e = &f->m->tok_embd;
    const ft_to_float_fn to_float = ft_type_traits(e->type)->to_float;
    /* repacked (it is also the output head, engine/model/repack.c): rebuild the row */
    _Alignas(64) char row[FT_RW_EMBED_ROW_MAX];
    for (int64_t i = i0; i < i1; i++) {
        float *x = f->s->x + i * e->cols;
        const char *src = (const char *)e->data + (size_t)f->token[i] * e->row_size;
        if (e->rw) {
            const int tr = e->rw->tile_rows;
            const size_t tile = (size_t)tr * e->row_size;
            e->rw->rw_row((const char *)e->data + (size_t)(f->token[i] / tr) * tile, f->token[i] % tr, e->cols, row);
            src = row;
        }
        to_float(src, x, e->cols);
        if (c->scale != 1.0f)
            for (int64_t j = 0; j < e->cols; j++)
                x[j] *= c->scale;
    }
}

void ft_blk_embed(struct ft_fwd *f, float scale) {
    const struct embed_ctx c = {scale};
    for_rows(f, f->n, embed_rows, &c);
}

struct norm_ctx {
    float *y;
    const float *x;
    const float *w;
    int64_t n;
};

static void norm_rows(const void *ctx, struct ft_fwd *f, int64_t i0, int64_t i1) {
    const struct norm_ctx *c = ctx;
    const struct ft_float_kernels *fk = ft_float_kernels();
    for (int64_t i = i0; i < i1; i++)
        fk->rmsnorm(c->y + i * c->n, c->x + i * c->n, c->w, c->n, f->m->hp.norm_eps);
}

void ft_blk_rmsnorm(struct ft_fwd *f, float *y, const float *x, const struct ft_weight *w) {
    const struct norm_ctx c = {y, x, w->data, w->cols};
    for_rows(f, f->n_rows, norm_rows, &c);
}

void ft_blk_head_norm(struct ft_fwd *f, float *x, int32_t n_head, const struct ft_weight *w) {
    const struct norm_ctx c = {x, x, w->data, w->cols};
    for_rows(f, (int64_t)f->n_rows * n_head, norm_rows, &c);
}

/* ---- projections (engine/model/matmul.c) --------------------------------------- */

void ft_blk_matmul(struct ft_fwd *f, float *out, const struct ft_weight *w, const struct ft_weight *bias,
                   const float *in) {
    const struct ft_mm mm = {w, bias, out};
    ft_matmul(f, in, 1, &mm);
}

void ft_blk_attn_out(struct ft_fwd *f, float *out, const struct ft_weight *wo, const struct ft_weight *bo,
                     const float *in) {
    /* llama.cpp keeps all rows of the batch through the last layer's
     * output projection and only then selects the rows that want logits;
     * we drop them before attention, but pick its kernels by all rows */
    const struct ft_mm mm = {wo, bo, out};
    ft_matmul_att_rows(f, in, 1, &mm);
}

void ft_blk_qkv(struct ft_fwd *f, const struct ft_layer *l) {
    const struct ft_mm mm[3] = {{&l->wq, &l->bq, f->s->q}, {&l->wk, &l->bk, f->s->k}, {&l->wv, &l->bv, f->s->v}};
    ft_matmul(f, f->s->xb, 3, mm);
}

struct rope_ctx {
    float *x;
    int32_t n_head, hd;
    const struct ft_rope *r;
};

static void rope_rows(const void *ctx, struct ft_fwd *f, int64_t i0, int64_t i1) {
    const struct rope_ctx *c = ctx;
    const struct ft_float_kernels *fk = ft_float_kernels();
    float cache[4096]; /* n_rot <= head_dim_k <= 4096 (checked at load) */
    for (int64_t i = i0; i < i1; i++) {
        ft_rope_cache_ref(c->r, f->s->row_pos[i], cache);
        for (int32_t h = 0; h < c->n_head; h++)
            fk->rope_apply(c->x + (i * c->n_head + h) * c->hd, c->r->n_dims, c->r->neox, cache);
    }
}

void ft_blk_rope(struct ft_fwd *f, float *x, int32_t n_head, int32_t hd, const struct ft_rope *r) {
    const struct rope_ctx c = {x, n_head, hd, r};
    for_rows(f, f->n_rows, rope_rows, &c);
}

struct scale_ctx {
    float *x;
    const float *y;
    int64_t width;
    float scale;
};

static void scale_rows(const void *ctx, struct ft_fwd *f, int64_t i0, int64_t i1) {
    const struct scale_ctx *c = ctx;
    for (int64_t i = i0 * c->width; i < i1 * c->width; i++)
        c->x[i] *= c->scale;
}

void ft_blk_scale(struct ft_fwd *f, float *x, int64_t width, float scale) {
    const struct scale_ctx c = {x, NULL, width, scale};
    for_rows(f, f->n_rows, scale_rows, &c);
}

static void add_rows(const void *ctx, struct ft_fwd *f, int64_t i0, int64_t i1) {
    const struct scale_ctx *c = ctx;
    for (int64_t i = i0 * c->width; i < i1 * c->width; i++)
        c->x[i] += c->y[i];
}

void ft_blk_add(struct ft_fwd *f, float *x, const float *y, int64_t width) {
    const struct scale_ctx c = {x, y, width, 1.0f};
    for_rows(f, f->n_rows, add_rows, &c);
}

/* ---- KV and attention --------------------------------------------------------- */

struct kv_store_ctx {
    int il;
};

static void kv_store_rows(const void *ctx, struct ft_fwd *f, int64_t i0, int64_t i1) {
    const struct kv_store_ctx *c = ctx;
    struct ft_kv_cache *kv = f->kv;
    const ft_from_float_fn to_f16 = ft_type_traits(FT_TYPE_F16)->from_float; /* the reference's bytes */
    const int64_t dk = kv->head_dim_k, dv = kv->head_dim_v, n_kv = kv->k_row / dk;
    for (int64_t i = i0; i < i1; i++) {
        const int32_t seq = f->s->row_seq[i], pos = f->s->row_pos[i];
        uint16_t *k = kv->k[c->il] + ft_kv_offset(kv, seq, pos, kv->k_row, dk);
        uint16_t *v = kv->v[c->il] + ft_kv_offset(kv, seq, pos, kv->v_row, dv);
        for (int64_t h = 0; h < n_kv; h++) {
            to_f16(f->s->k + i * kv->k_row + h * dk, k + ft_kv_head_offset(h, dk), dk);
            to_f16(f->s->v + i * kv->v_row + h * dv, v + ft_kv_head_offset(h, dv), dv);
        }
    }
}

void ft_blk_kv_store(struct ft_fwd *f, int il) {
    const struct kv_store_ctx c = {il};
    for_rows(f, f->n_rows, kv_store_rows, &c);
}

void ft_blk_keep_out_rows(struct ft_fwd *f) {
    struct ft_scratch *s = f->s;
    const struct ft_hparams *hp = &f->m->hp;
    const int64_t wx = hp->n_embd;
    const int64_t wq = (int64_t)hp->n_head * hp->head_dim_k;
    for (int32_t o = 0; o < f->n_out; o++) {
        const int32_t i = s->row_out[o]; /* increasing, so i >= o */
        if (i == o)
            continue;
        memmove(s->x + o * wx, s->x + i * wx, (size_t)wx * sizeof(float));
        memmove(s->q + o * wq, s->q + i * wq, (size_t)wq * sizeof(float));
        s->row_pos[o] = s->row_pos[i];
        s->row_seq[o] = s->row_seq[i];
        s->row_att_n[o] = s->row_att_n[i];
        s->row_att_i[o] = s->row_att_i[i];
    }
    f->n_rows = f->n_out;
    /* the matmuls after this see only the kept rows, as llama.cpp's do */
    count_seq_rows(s->row_seq, f->n_rows, s->row_seq_n, s->row_seq_i);
}


void ft_blk_attention(struct ft_fwd *f, int il, float kq_scale, int32_t window) {
    ft_blk_attention_sinks(f, il, kq_scale, window, NULL);
}

void ft_blk_attention_sinks(struct ft_fwd *f, int il, float kq_scale, int32_t window, const float *sinks) {
    const struct ft_hparams *hp = &f->m->hp;
    const struct ft_scratch *s = f->s;
    const struct ft_attn_job job = {
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .dk = hp->head_dim_k,
        .dv = hp->head_dim_v,
        .scale = kq_scale,
        .window = window,
        .sinks = sinks,
        .rows_per_block = ft_attn_rows_per_block(hp),
        .k = f->kv->k[il],
        .v = f->kv->v[il],
        .k_row = f->kv->k_row,
        .v_row = f->kv->v_row,
        .seqs = f->kv->seqs,
        .n_rows = f->n_rows,
        .q = s->q,
        .out = s->att,
        .row_pos = s->row_pos,
        .row_seq = s->row_seq,
        .row_att_n = s->row_att_n,
        .scratch = s->attn_scratch,
        .scratch_stride = s->attn_scratch_stride,
        .parts = s->attn_parts,
        .split = FT_ATTN_SPLIT_AUTO,
    };
    ft_attention_run(f->m->pool, &job);
}

/* ---- MLP and output ------------------------------------------------------------ */

struct glu_ctx {
    enum ft_glu act;
    int64_t n;
};

static void glu_rows(const void *ctx, struct ft_fwd *f, int64_t i0, int64_t i1) {
    const struct glu_ctx *c = ctx;
    const struct ft_float_kernels *fk = ft_float_kernels();
    float *g = f->s->gate + i0 * c->n;
    const float *u = f->s->up + i0 * c->n;
    (c->act == FT_GLU_SILU ? fk->swiglu : fk->geglu)(g, g, u, (i1 - i0) * c->n);
}

void ft_blk_ffn(struct ft_fwd *f, const struct ft_layer *l, enum ft_glu act, float *out, const float *in) {
    struct ft_scratch *s = f->s;
    if (l->ffn_gate.type == l->ffn_up.type && ft_gemm_float_applies(f, &l->ffn_gate) &&
        ft_gemm_float_applies(f, &l->ffn_up)) {
        /* gate and up in one GEMM task, the GLU applied by each thread to
         * the columns it computed (no extra pass or barrier) */
        ft_gemm_float_glu(f, in, &l->ffn_gate, &l->ffn_up, act, s->gate, s->up);
    } else {
        const struct ft_mm gate_up[2] = {{&l->ffn_gate, NULL, s->gate}, {&l->ffn_up, NULL, s->up}};
        ft_matmul(f, in, 2, gate_up);
        const struct glu_ctx c = {act, l->ffn_gate.rows};
        for_rows(f, f->n_rows, glu_rows, &c);
    }
    ft_blk_matmul(f, out, &l->ffn_down, NULL, s->gate);
}

void ft_blk_output(struct ft_fwd *f) {
    const struct ft_model *m = f->m;
    struct ft_scratch *s = f->s;
    if (f->n_rows == 0)
        return;
    ft_blk_rmsnorm(f, s->xb, s->x, &m->output_norm);
    /* The kept rows are in row_want's order (ft_blk_keep_out_rows). */
    const int64_t E = m->hp.n_embd;
    int32_t n_embd = 0, n_logits = 0;
    for (int32_t o = 0; o < f->n_rows; o++) {
        if (s->row_want[o] & FT_WANT_EMBD)
            memcpy(f->embd + n_embd++ * E, s->xb + o * E, (size_t)E * sizeof(float));
        n_logits += (s->row_want[o] & FT_WANT_LOGITS) != 0;
    }
    if (n_logits < f->n_rows) {
        /* Rows that wanted only their hidden state skip the LM head. */
        int32_t k = 0;
        for (int32_t o = 0; o < f->n_rows; o++) {
            if (!(s->row_want[o] & FT_WANT_LOGITS))
                continue;
            if (k != o) {
                memmove(s->xb + k * E, s->xb + o * E, (size_t)E * sizeof(float));
                s->row_pos[k] = s->row_pos[o];
                s->row_seq[k] = s->row_seq[o];
            }
            k++;
        }
        f->n_rows = n_logits;
        count_seq_rows(s->row_seq, f->n_rows, s->row_seq_n, s->row_seq_i);
        if (n_logits == 0)
            return;
    }
    ft_blk_matmul(f, f->logits, &m->output, &m->output_b, s->xb);
    if (m->hp.final_softcap > 0.0f) {
        const int64_t n = (int64_t)f->n_rows * m->output.rows;
        const float c = m->hp.final_softcap;
        for (int64_t i = 0; i < n; i++)
            f->logits[i] = c * tanhf(f->logits[i] * (1.0f / c));
    }
}
