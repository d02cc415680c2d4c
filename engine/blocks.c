/* Shared transformer blocks the architecture files compose: embedding,
 * RMS norm, RoPE, KV store and attention
 * with GQA and sliding windows, gated MLP, the output head.
 *
 * The projections themselves are engine/matmul.c.
 *
 * Every function works on the rows of one internal batch (struct ft_fwd);
 * none allocates. */
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
    /* llama.cpp: local layers have their own base and no linear scaling;
     * the YaRN settings are the context's, shared by all layers. */
    r->freq_base = swa ? hp->rope_freq_base_swa : hp->rope_freq_base;
    r->freq_scale = swa ? 1.0f : hp->rope_freq_scale;
    r->ext_factor = hp->rope_ext_factor;
    r->attn_factor = hp->rope_attn_factor;
    r->beta_fast = hp->rope_beta_fast;
    r->beta_slow = hp->rope_beta_slow;
    r->n_ctx_orig = hp->rope_n_ctx_orig;
    r->freq_factors = m->rope_freqs.data;
}

/* ---- elementwise and per-row blocks ------------------------------------------ */

void ft_blk_embed(struct ft_fwd *f, float scale) {
    const struct ft_weight *e = &f->m->tok_embd;
    const ft_to_float_fn to_float = ft_type_traits(e->type)->to_float;
    for (int32_t i = 0; i < f->n; i++) {
        float *x = f->s->x + (int64_t)i * e->cols;
        to_float((const char *)e->data + (size_t)f->token[i] * e->row_size, x, e->cols);
        if (scale != 1.0f)
            for (int64_t j = 0; j < e->cols; j++)
                x[j] *= scale;
    }
}

void ft_blk_rmsnorm(struct ft_fwd *f, float *y, const float *x, const struct ft_weight *w) {
    const int64_t n = w->cols;
    for (int32_t i = 0; i < f->n_rows; i++)
        ft_rmsnorm_ref(y + i * n, x + i * n, w->data, n, f->m->hp.norm_eps);
}

void ft_blk_head_norm(struct ft_fwd *f, float *x, int32_t n_head, const struct ft_weight *w) {
    const int64_t hd = w->cols;
    const int64_t rows = (int64_t)f->n_rows * n_head;
    for (int64_t i = 0; i < rows; i++)
        ft_rmsnorm_ref(x + i * hd, x + i * hd, w->data, hd, f->m->hp.norm_eps);
}

void ft_blk_rope(struct ft_fwd *f, float *x, int32_t n_head, int32_t hd, const struct ft_rope *r) {
    float *cache = f->s->rope_cache;
    for (int32_t i = 0; i < f->n_rows; i++) {
        ft_rope_cache_ref(r, f->s->row_pos[i], cache);
        for (int32_t h = 0; h < n_head; h++)
            ft_rope_apply_ref(x + ((int64_t)i * n_head + h) * hd, r->n_dims, r->neox, cache);
    }
}

void ft_blk_scale(struct ft_fwd *f, float *x, int64_t width, float scale) {
    const int64_t n = (int64_t)f->n_rows * width;
    for (int64_t i = 0; i < n; i++)
        x[i] *= scale;
}

void ft_blk_add(struct ft_fwd *f, float *x, const float *y, int64_t width) {
    const int64_t n = (int64_t)f->n_rows * width;
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* ---- KV and attention --------------------------------------------------------- */

void ft_blk_kv_store(struct ft_fwd *f, int il) {
    struct ft_kv_cache *kv = f->kv;
    for (int32_t i = 0; i < f->n_rows; i++) {
        const int64_t cell = ft_kv_cell(kv, f->s->row_seq[i], f->s->row_pos[i]);
        uint16_t *kd = kv->k[il] + cell * kv->k_row;
        uint16_t *vd = kv->v[il] + cell * kv->v_row;
        const float *ks = f->s->k + (int64_t)i * kv->k_row;
        const float *vs = f->s->v + (int64_t)i * kv->v_row;
        for (int64_t j = 0; j < kv->k_row; j++)
            kd[j] = ft_fp32_to_fp16(ks[j]);
        for (int64_t j = 0; j < kv->v_row; j++)
            vd[j] = ft_fp32_to_fp16(vs[j]);
    }
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
    }
    f->n_rows = f->n_out;
}

struct attn_task {
    struct ft_fwd *f;
    int il;
    float scale;
    int32_t window;
};

static void attn_run(void *ctx, int ith, int nth) {
    const struct attn_task *t = ctx;
    const struct ft_fwd *f = t->f;
    const struct ft_hparams *hp = &f->m->hp;
    const struct ft_kv_cache *kv = f->kv;
    const int64_t n_items = (int64_t)f->n_rows * hp->n_head;
    const int64_t i0 = n_items * ith / nth;
    const int64_t i1 = n_items * (ith + 1) / nth;
    const int32_t group = hp->n_head / hp->n_head_kv; /* query heads per KV head */
    uint16_t *tmp = f->s->attn_tmp + (size_t)ith * f->s->attn_tmp_stride;

    for (int64_t it = i0; it < i1; it++) {
        const int32_t r = (int32_t)(it / hp->n_head);
        const int32_t h = (int32_t)(it % hp->n_head);
        const int32_t kvh = h / group;
        const int32_t pos = f->s->row_pos[r];
        const struct ft_attn_kv a = {
            .k = kv->k[t->il] + (int64_t)kvh * hp->head_dim_k,
            .v = kv->v[t->il] + (int64_t)kvh * hp->head_dim_v,
            .blocks = kv->seqs[f->s->row_seq[r]].blocks,
            .block_tokens = FT_KV_BLOCK_TOKENS,
            .k_row = kv->k_row,
            .v_row = kv->v_row,
        };
        /* llama.cpp masks key j of a sliding-window layer when pos - j >= window. */
        const int32_t p0 = t->window > 0 ? FT_MAX(0, pos - t->window + 1) : 0;
        const float *q = f->s->q + ((int64_t)r * hp->n_head + h) * hp->head_dim_k;
        float *out = f->s->att + ((int64_t)r * hp->n_head + h) * hp->head_dim_v;
        ft_attention_ref(q, hp->head_dim_k, hp->head_dim_v, t->scale, &a, p0, pos, out, tmp);
    }
}

void ft_blk_attention(struct ft_fwd *f, int il, float kq_scale, int32_t window) {
    struct attn_task t = {f, il, kq_scale, window};
    ft_threadpool_run(f->m->pool, attn_run, &t);
}

/* ---- MLP and output ------------------------------------------------------------ */

void ft_blk_ffn(struct ft_fwd *f, const struct ft_layer *l, enum ft_glu act, float *out, const float *in) {
    struct ft_scratch *s = f->s;
    const struct ft_mm gate_up[2] = {{&l->ffn_gate, NULL, s->gate}, {&l->ffn_up, NULL, s->up}};
    ft_matmul(f, in, 2, gate_up);
    const int64_t n = (int64_t)f->n_rows * l->ffn_gate.rows;
    if (act == FT_GLU_SILU)
        ft_swiglu_ref(s->gate, s->gate, s->up, n);
    else
        ft_geglu_ref(s->gate, s->gate, s->up, n);
    ft_blk_matmul(f, out, &l->ffn_down, NULL, s->gate);
}

void ft_blk_output(struct ft_fwd *f) {
    const struct ft_model *m = f->m;
    if (f->n_rows == 0)
        return;
    ft_blk_rmsnorm(f, f->s->xb, f->s->x, &m->output_norm);
    ft_blk_matmul(f, f->logits, &m->output, &m->output_b, f->s->xb);
    if (m->hp.final_softcap > 0.0f) {
        const int64_t n = (int64_t)f->n_rows * m->output.rows;
        const float c = m->hp.final_softcap;
        for (int64_t i = 0; i < n; i++)
            f->logits[i] = c * tanhf(f->logits[i] * (1.0f / c));
    }
}
