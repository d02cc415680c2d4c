/* llama: Llama 2/3, Mistral, TinyLlama, SmolLM (and the forward pass qwen2
 * shares).
 *
 *   x = embd[token]
 *   per layer:  h = rmsnorm(x) * attn_norm
 *               q, k, v = Wq h (+bq), Wk h (+bk), Wv h (+bv)     GQA: n_head_kv <= n_head
 *               q, k = rope(q), rope(k)                          normal pairs (2i, 2i+1)
 *               x += Wo attention(q, K, V) (+bo)                 scale 1/sqrt(head_dim)
 *               x += Wdown (silu(Wgate rmsnorm(x)) * Wup rmsnorm(x))
 *   logits = Wout (rmsnorm(x) * output_norm)                     Wout = embd when tied
 */
#include "arch.h"
#include "bind.h"
#include "blocks.h"
#include "ft/common.h"
#include "model_internal.h"

static int llama_bind(struct ft_model *m) {
    const struct ft_hparams *hp = &m->hp;
    int rc;
    if (hp->n_rot != hp->head_dim_k) {
        FT_LOG_E("%s: rope.dimension_count %d must equal the head size %d for llama",
                 ft_gguf_path(m->gguf), (int)hp->n_rot, (int)hp->head_dim_k);
        return FT_EFORMAT;
    }
    if ((rc = ft_bind_io(m)))
        return rc;
    /* Llama 3.1+: per-pair divisors of the rotation frequencies. */
    if ((rc = ft_bind(m, &m->rope_freqs, true, 0, hp->n_rot / 2, "rope_freqs.weight")))
        return rc;
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = ft_bind_attention(m, il, FT_BIND_QKV_BIAS | FT_BIND_O_BIAS)) || (rc = ft_bind_ffn(m, il)))
            return rc;
    return FT_OK;
}

void ft_llama_forward(struct ft_fwd *f) {
    const struct ft_model *m = f->m;
    const struct ft_hparams *hp = &m->hp;
    struct ft_scratch *s = f->s;

    ft_blk_embed(f, 1.0f);
    for (int il = 0; il < hp->n_layer; il++) {
        const struct ft_layer *l = &m->layers[il];
        struct ft_rope rope;
        ft_layer_rope(m, il, &rope);

        ft_blk_rmsnorm(f, s->xb, s->x, &l->attn_norm);
        ft_blk_qkv(f, l);
        ft_blk_rope(f, s->q, hp->n_head, hp->head_dim_k, &rope);
        ft_blk_rope(f, s->k, hp->n_head_kv, hp->head_dim_k, &rope);
        ft_blk_kv_store(f, il);
        if (il == hp->n_layer - 1)
            ft_blk_keep_out_rows(f); /* the rest only for rows that want logits */
        ft_blk_attention(f, il, hp->attn_scale, 0);
        ft_blk_attn_out(f, s->tmp, &l->wo, &l->bo, s->att);
        ft_blk_add(f, s->x, s->tmp, hp->n_embd);

        ft_blk_rmsnorm(f, s->xb, s->x, &l->ffn_norm);
        ft_blk_ffn(f, l, FT_GLU_SILU, s->tmp, s->xb);
        ft_blk_add(f, s->x, s->tmp, hp->n_embd);
    }
    ft_blk_output(f);
}

const struct ft_arch_ops ft_arch_llama = {
    .name = "llama",
    .arch = FT_ARCH_LLAMA,
    .rope_neox = false,
    .load_hparams = NULL,
    .bind = llama_bind,
    .forward = ft_llama_forward,
};
