/* The mixture-of-experts block (qwen3moe, gpt-oss): a router picks
 * n_expert_used of n_expert gated MLPs per token and the block returns the
 * weighted sum of their outputs.
 *
 *   l = Wrouter x (+ b)                                   (n_expert) per token
 *   softmax gating (qwen3moe):        p = softmax(l), sel = top-k(p), w = p[sel] / sum(p[sel])
 *   softmax-weight gating (gpt-oss):  sel = top-k(l), w = softmax(l[sel])
 *   y = sum_k w_k * (Wdown_e (act(Wgate_e x + bg_e, Wup_e x + bu_e)) + bd_e),  e = sel_k
 *
 * Numerics follow llama.cpp's build_moe_ffn on its CPU backend, so that the
 * reference kernels reproduce its logits bit for bit: the router is an
 * ordinary matmul (F32 weights); the softmax takes expf of x - max, sums
 * in double and scales by the float of the double reciprocal (ggml's
 * soft_max, ggml's scalar tail: fewer than 16 experts on the AVX-512
 * build); top-k is ggml's descending argsort (ties keep the lower index,
 * as std::sort's insertion sort does on such short rows); the renormalising
 * sum is a double sum rounded to float, clamped below at 2^-14; the expert
 * products are ggml_mul_mat_id's, one activation row at a time through the
 * single-row dot (vec_dot_gemv: for the weights ggml repacks it is its gemv,
 * for the others its vec_dot); the outputs are scaled by their weight and
 * added in the order of selection.
 *
 * Work is grouped by expert: the (token, slot) pairs are sorted by the
 * expert they chose, and each selected expert's matrices are multiplied
 * once with all its rows -- so a step reads only the selected experts'
 * weights, each once, and batches take the level's GEMM (as llama.cpp's
 * mul_mat_id groups rows by expert). Quantized experts go through
 * engine/model/moe_matmul.c: gate/up of every selected expert in one
 * thread-pool task, down in another. Float experts are gathered and go
 * one expert at a time through engine/model/matmul.c (its float GEMM). */
#include "moe.h"

#include "arch.h"
#include "matmul.h"
#include "moe_matmul.h"
#include "model_internal.h"

#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/ops.h"
#include "ft/threadpool.h"

#include <math.h>
#include <string.h>

int ft_moe_check_hparams(struct ft_model *m) {
    const struct ft_hparams *hp = &m->hp;
    if (hp->n_expert <= 0 || hp->n_expert > FT_MOE_MAX_EXPERTS || hp->n_expert_used <= 0 ||
        hp->n_expert_used > hp->n_expert || hp->n_ff_exp <= 0) {
        FT_LOG_E("%s: bad experts: %s.expert_count %d (1..%d), expert_used_count %d (1..expert_count), "
                 "expert_feed_forward_length %d",
                 ft_gguf_path(m->gguf), hp->arch_name, (int)hp->n_expert, FT_MOE_MAX_EXPERTS, (int)hp->n_expert_used,
                 (int)hp->n_ff_exp);
        return FT_EFORMAT;
    }
    return FT_OK;
}

/* ggml_soft_max over n values in place (scale 1, no mask, no sinks). */
static void softmax_ggml(float *x, int n) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++)
        max = fmaxf(max, x[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += (double)x[i];
    }
    sum = 1.0 / sum;
    const float inv = (float)sum;
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

/* The k largest of p[0, n) in descending order, ties to the lower index. */
static void top_k(const float *p, int n, int k, int32_t *sel) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            bool taken = false;
            for (int q = 0; q < j; q++)
                taken = taken || sel[q] == i;
            if (!taken && (best < 0 || p[i] > p[best]))
                best = i;
        }
        sel[j] = best;
    }
}

/* Expert e's rows of a stacked expert matrix (weights.h) as a matrix of its own. */
static struct ft_weight expert_view(const struct ft_weight *w, int64_t n_expert, int64_t e) {
    struct ft_weight v = *w;
    const int64_t rows = w->rows / n_expert;
    const size_t off = (size_t)(e * rows) * w->row_size;
    v.data = (const char *)w->data + off;
    v.rows = rows;
    v.rep_off = w->rep_off + off;
    v.rw = NULL;
    return v;
}

/* Expert e's part of a stacked bias vector; absent stays absent. */
static struct ft_weight bias_view(const struct ft_weight *b, int64_t n_expert, int64_t e) {
    struct ft_weight v = *b;
    if (!b->data)
        return v;
    const int64_t n = b->cols / n_expert;
    v.data = (const float *)b->data + e * n;
    v.cols = n;
    v.row_size = (size_t)n * sizeof(float);
    v.rep = NULL;
    return v;
}

/* Float experts (matmul.c's float GEMM): expert by expert, each one's
 * gate/up and down over its rows (gathered in moe_x) through matmul.c.
 * The sub-batch counts every row as a batch of one, so the matmuls take
 * the single-row dot as ggml_mul_mat_id does (or, on faster levels, the
 * GEMM by row count). */
static void experts_one_by_one(struct ft_fwd *f, const struct ft_layer *l, const struct ft_moe_params *mp,
                               const int32_t *cnt, const int32_t *start) {
    const struct ft_hparams *hp = &f->m->hp;
    struct ft_scratch *s = f->s;
    const int X = hp->n_expert;
    const int64_t E = hp->n_embd, F = hp->n_ff_exp;
    struct ft_scratch sub = *s;
    sub.row_seq_n = s->moe_ones;
    sub.row_seq_i = s->moe_zeros;
    struct ft_fwd g = *f;
    g.s = &sub;
    for (int e = 0; e < X; e++) {
        if (cnt[e] == 0)
            continue;
        g.n_rows = cnt[e];
        const struct ft_weight wg = expert_view(&l->ffn_gate_exps, X, e), wu = expert_view(&l->ffn_up_exps, X, e);
        const struct ft_weight bg = bias_view(&l->ffn_gate_exps_b, X, e), bu = bias_view(&l->ffn_up_exps_b, X, e);
        const struct ft_mm gu[2] = {{&wu, &bu, s->moe_up + (int64_t)start[e] * F},
                                    {&wg, &bg, s->moe_gate + (int64_t)start[e] * F}};
        ft_matmul(&g, s->moe_x + (int64_t)start[e] * E, 2, gu);
    }
    const int64_t P = (int64_t)f->n_rows * hp->n_expert_used;
    for (int64_t r = 0; r < P; r++) /* a row at a time, as ggml_vec_swiglu_f32 goes */
        ft_moe_glu(mp, s->moe_gate + r * F, s->moe_up + r * F, F);
    for (int e = 0; e < X; e++) {
        if (cnt[e] == 0)
            continue;
        g.n_rows = cnt[e];
        const struct ft_weight wd = expert_view(&l->ffn_down_exps, X, e);
        const struct ft_weight bd = bias_view(&l->ffn_down_exps_b, X, e);
        const struct ft_mm d = {&wd, &bd, s->moe_x + (int64_t)start[e] * E};
        ft_matmul(&g, s->moe_gate + (int64_t)start[e] * F, 1, &d);
    }
}

/* Tokens from which the weighted sum runs on the pool. */
#define FT_MOE_SUM_PARALLEL 16

struct sum_ctx {
    const struct ft_scratch *s;
    float *out;
    int64_t n_tok;
    int K;
    int64_t E;
};

/* out[t] = y(t, 0) + y(t, 1) + ... in selection order, for thread ith's tokens. */
static void sum_run(void *ctx, int ith, int nth) {
    const struct sum_ctx *c = ctx;
    const struct ft_scratch *s = c->s;
    const int64_t t0 = c->n_tok * ith / nth, t1 = c->n_tok * (ith + 1) / nth;
    for (int64_t t = t0; t < t1; t++) {
        float *o = c->out + t * c->E;
        memcpy(o, s->moe_x + (int64_t)s->moe_rank[t * c->K] * c->E, (size_t)c->E * sizeof(float));
        for (int k = 1; k < c->K; k++) {
            const float *y = s->moe_x + (int64_t)s->moe_rank[t * c->K + k] * c->E;
            for (int64_t j = 0; j < c->E; j++)
                o[j] += y[j];
        }
    }
}

void ft_blk_moe(struct ft_fwd *f, const struct ft_layer *l, const struct ft_moe_params *mp, float *out,
                const float *in) {
    const struct ft_hparams *hp = &f->m->hp;
    struct ft_scratch *s = f->s;
    const int32_t n = f->n_rows;
    const int X = hp->n_expert, K = hp->n_expert_used;
    const int64_t E = hp->n_embd;
    if (n == 0)
        return;

    /* Router logits (n, X), bias added after the product as ggml_add does. */
    const struct ft_mm router = {&l->ffn_gate_inp, &l->ffn_gate_inp_b, s->moe_logits};
    ft_matmul(f, in, 1, &router);

    /* Selection and weights per token. */
    int32_t cnt[FT_MOE_MAX_EXPERTS] = {0};
    for (int32_t t = 0; t < n; t++) {
        float *p = s->moe_logits + (int64_t)t * X;
        int32_t *sel = s->moe_sel + (int64_t)t * K;
        float *w = s->moe_w + (int64_t)t * K;
        if (mp->gating == FT_MOE_GATING_SOFTMAX)
            softmax_ggml(p, X);
        top_k(p, X, K, sel);
        for (int k = 0; k < K; k++)
            w[k] = p[sel[k]];
        if (mp->gating == FT_MOE_GATING_SOFTMAX_WEIGHT)
            softmax_ggml(w, K);
        if (mp->norm_w) {
            double sum = 0.0;
            for (int k = 0; k < K; k++)
                sum += (double)w[k];
            const float sf = fmaxf((float)sum, 6.103515625e-5f); /* ggml_clamp to the smallest normal fp16 */
            for (int k = 0; k < K; k++)
                w[k] = w[k] / sf;
        }
        for (int k = 0; k < K; k++)
            cnt[sel[k]]++;
    }

    /* Pairs (t, k) sorted by expert: expert e's are [start[e], start[e] + cnt[e]). */
    int32_t start[FT_MOE_MAX_EXPERTS + 1];
    start[0] = 0;
    for (int e = 0; e < X; e++)
        start[e + 1] = start[e] + cnt[e];
    int32_t fill[FT_MOE_MAX_EXPERTS];
    memcpy(fill, start, sizeof(int32_t) * (size_t)X);
    const int64_t P = (int64_t)n * K;
    const bool fused = ft_moe_matmul_applies(l);
    for (int32_t t = 0; t < n; t++)
        for (int k = 0; k < K; k++) {
            const int32_t r = fill[s->moe_sel[(int64_t)t * K + k]]++;
            s->moe_rank[(int64_t)t * K + k] = r;
            if (fused) { /* the pair's token and weight, by sorted row */
                s->moe_src[r] = t;
                s->moe_pair_w[r] = s->moe_w[(int64_t)t * K + k];
            } else {
                memcpy(s->moe_x + (int64_t)r * E, in + (int64_t)t * E, (size_t)E * sizeof(float));
            }
        }

    if (fused) {
        /* Every selected expert's gate/up in one task, then its down in
         * another (engine/model/moe_matmul.c); down's outputs come back
         * scaled by their weights. */
        struct ft_moe_sel sel = {0};
        for (int e = 0; e < X; e++)
            if (cnt[e] > 0) {
                sel.ex[sel.n] = e;
                sel.start[sel.n] = start[e];
                sel.cnt[sel.n++] = cnt[e];
            }
        ft_moe_matmul_gate_up(f, l, &sel, in, s->moe_src, mp, s->moe_gate, s->moe_up);
        ft_moe_matmul_down(f, l, &sel, s->moe_gate, s->moe_pair_w, s->moe_x);
    } else {
        experts_one_by_one(f, l, mp, cnt, start);
        /* the outputs scaled by their weights: the products first, as
         * ggml_mul does, so no compiler contracts them into the adds */
        for (int64_t r = 0; r < P; r++) {
            float *y = s->moe_x + (int64_t)s->moe_rank[r] * E;
            const float w = s->moe_w[r];
            for (int64_t j = 0; j < E; j++)
                y[j] *= w;
        }
    }

    /* out = y_0 w_0 + y_1 w_1 + ..., in selection order */
    struct sum_ctx c = {s, out, n, K, E};
    if (n >= FT_MOE_SUM_PARALLEL)
        ft_threadpool_run(f->m->pool, sum_run, &c);
    else
        sum_run(&c, 0, 1);
}
