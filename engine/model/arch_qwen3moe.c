/* qwen3moe: Qwen 3 mixture of experts (Qwen3-30B-A3B, Qwen3-235B-A22B). The
 * qwen3 graph with the MLP replaced by n_expert_used of n_expert gated MLPs
 * per token (engine/model/moe.c): the router's softmax over all experts,
 * its top k, their probabilities renormalised to sum 1; no shared expert.
 *
 *   per layer:  h = rmsnorm(x) * attn_norm
 *               q, k, v = Wq h, Wk h, Wv h
 *               q = rope_neox(rmsnorm_per_head(q) * q_norm)
 *               k = rope_neox(rmsnorm_per_head(k) * k_norm)
 *               x += Wo attention(q, K, V)                      scale 1/sqrt(head_dim)
 *               h = rmsnorm(x) * ffn_norm
 *               p = softmax(Wrouter h),  S = top-k(p),  w_e = p_e / sum_S p
 *               x += sum_{e in S} w_e Wdown_e (silu(Wgate_e h) * Wup_e h)
 *   logits = Wout (rmsnorm(x) * output_norm)
 */
#include "arch.h"
#include "bind.h"
#include "blocks.h"
#include "ft/common.h"
#include "model_internal.h"
#include "moe.h"

static int qwen3moe_bind(struct ft_model *m) {
    int rc;
    if ((rc = ft_bind_io(m)))
        return rc;
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct ft_layer *l = &m->layers[il];
        if ((rc = ft_bind_attention(m, il, FT_BIND_QK_NORM)) ||
            (rc = ft_bind(m, &l->ffn_norm, false, 0, m->hp.n_embd, "blk.%d.ffn_norm.weight", il)) || /* (E) */
            (rc = ft_bind_moe(m, il, 0)))
            return rc;
    }
    return FT_OK;
}

static void qwen3moe_forward(struct ft_fwd *f) {
    const struct ft_model *m = f->m;
    const struct ft_hparams *hp = &m->hp;
    struct ft_scratch *s = f->s;
    const struct ft_moe_params moe = {.gating = FT_MOE_GATING_SOFTMAX, .norm_w = true, .act = FT_MOE_ACT_SWIGLU};

    ft_blk_embed(f, 1.0f);
    for (int il = 0; il < hp->n_layer; il++) {
        const struct ft_layer *l = &m->layers[il];
        ft_qwen3_attention(f, il);

        ft_blk_rmsnorm(f, s->xb, s->x, &l->ffn_norm);
        ft_blk_moe(f, l, &moe, s->tmp, s->xb);
        ft_blk_add(f, s->x, s->tmp, hp->n_embd);
    }
    ft_blk_output(f);
}

const struct ft_arch_ops ft_arch_qwen3moe = {
    .name = "qwen3moe",
    .arch = FT_ARCH_QWEN3MOE,
    .rope_neox = true,
    .load_hparams = ft_moe_check_hparams,
    .bind = qwen3moe_bind,
    .forward = qwen3moe_forward,
};
