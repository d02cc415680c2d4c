/* qwen3: Qwen 3 (dense). The llama graph with a per-head RMS norm on Q and
 * K before RoPE, NeoX RoPE, no biases.
 *
 *   per layer:  h = rmsnorm(x) * attn_norm
 *               q, k, v = Wq h, Wk h, Wv h
 *               q = rope_neox(rmsnorm_per_head(q) * q_norm)
 *               k = rope_neox(rmsnorm_per_head(k) * k_norm)
 *               x += Wo attention(q, K, V)                      scale 1/sqrt(head_dim)
 *               x += Wdown (silu(Wgate rmsnorm(x)) * Wup rmsnorm(x))
 *   logits = Wout (rmsnorm(x) * output_norm)
 */
#include "arch.h"
#include "bind.h"
#include "blocks.h"
#include "ft/common.h"
#include "model_internal.h"

static int qwen3_bind(struct ft_model *m) {
    int rc;
    if ((rc = ft_bind_io(m)))
        return rc;
    for (int il = 0; il < m->hp.n_layer; il++)
        if ((rc = ft_bind_attention(m, il, FT_BIND_QK_NORM)) || (rc = ft_bind_ffn(m, il)))
            return rc;
    return FT_OK;
}

void ft_qwen3_attention(struct ft_fwd *f, int il) {
    const struct ft_model *m = f->m;
    const struct ft_hparams *hp = &m->hp;
    struct ft_scratch *s = f->s;
    const struct ft_layer *l = &m->layers[il];
    struct ft_rope rope;
    ft_layer_rope(m, il, &rope);

    ft_blk_rmsnorm(f, s->xb, s->x, &l->attn_norm);
    ft_blk_qkv(f, l);
    ft_blk_head_norm(f, s->q, hp->n_head, &l->q_norm);
    ft_blk_head_norm(f, s->k, hp->n_head_kv, &l->k_norm);
    ft_blk_rope(f, s->q, hp->n_head, hp->head_dim_k, &rope);
    ft_blk_rope(f, s->k, hp->n_head_kv, hp->head_dim_k, &rope);
    ft_blk_kv_store(f, il);
    if (il == hp->n_layer - 1)
        ft_blk_keep_out_rows(f); /* the rest only for rows that want logits */
    ft_blk_attention(f, il, hp->attn_scale, 0);
    ft_blk_attn_out(f, s->tmp, &l->wo, NULL, s->att);
    ft_blk_add(f, s->x, s->tmp, hp->n_embd);
}

static void qwen3_forward(struct ft_fwd *f) {
    const struct ft_model *m = f->m;
    const struct ft_hparams *hp = &m->hp;
    struct ft_scratch *s = f->s;

    ft_blk_embed(f, 1.0f);
    for (int il = 0; il < hp->n_layer; il++) {
        const struct ft_layer *l = &m->layers[il];
        ft_qwen3_attention(f, il);

        ft_blk_rmsnorm(f, s->xb, s->x, &l->ffn_norm);
        ft_blk_ffn(f, l, FT_GLU_SILU, s->tmp, s->xb);
        ft_blk_add(f, s->x, s->tmp, hp->n_embd);
    }
    ft_blk_output(f);
}

const struct ft_arch_ops ft_arch_qwen3 = {
    .name = "qwen3",
    .arch = FT_ARCH_QWEN3,
    .rope_neox = true,
    .load_hparams = NULL,
    .bind = qwen3_bind,
    .forward = qwen3_forward,
};
