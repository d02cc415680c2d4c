/* qwen2: Qwen 2 / 2.5. The llama graph with Q/K/V biases and NeoX RoPE
 * (pairs (i, i + n_rot/2)); an optional output bias; output tied in the
 * small models.
 *
 *   per layer:  h = rmsnorm(x) * attn_norm
 *               q, k, v = Wq h + bq, Wk h + bk, Wv h + bv
 *               q, k = rope_neox(q), rope_neox(k)
 *               x += Wo attention(q, K, V)
 *               x += Wdown (silu(Wgate rmsnorm(x)) * Wup rmsnorm(x))
 *   logits = Wout (rmsnorm(x) * output_norm) (+ bout)
 */
#include "model_internal.h"

static int qwen2_bind(struct ft_model *m) {
    const struct ft_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff;
    const int64_t Q = (int64_t)hp->n_head * hp->head_dim_k;
    const int64_t K = (int64_t)hp->n_head_kv * hp->head_dim_k;
    const int64_t V = (int64_t)hp->n_head_kv * hp->head_dim_v;
    const int64_t O = (int64_t)hp->n_head * hp->head_dim_v;
    int rc;
    if ((rc = ft_bind_io(m)) ||
        (rc = ft_bind(m, &m->output_b, true, 0, hp->n_vocab, "output.bias"))) /* (n_vocab) */
        return rc;
    for (int il = 0; il < hp->n_layer; il++) {
        struct ft_layer *l = &m->layers[il];
        if ((rc = ft_bind(m, &l->attn_norm, false, 0, E, "blk.%d.attn_norm.weight", il)) || /* (E) */
            (rc = ft_bind(m, &l->wq, false, Q, E, "blk.%d.attn_q.weight", il)) ||           /* (Q, E) */
            (rc = ft_bind(m, &l->wk, false, K, E, "blk.%d.attn_k.weight", il)) ||           /* (K, E) */
            (rc = ft_bind(m, &l->wv, false, V, E, "blk.%d.attn_v.weight", il)) ||           /* (V, E) */
            (rc = ft_bind(m, &l->bq, true, 0, Q, "blk.%d.attn_q.bias", il)) ||              /* (Q) */
            (rc = ft_bind(m, &l->bk, true, 0, K, "blk.%d.attn_k.bias", il)) ||              /* (K) */
            (rc = ft_bind(m, &l->bv, true, 0, V, "blk.%d.attn_v.bias", il)) ||              /* (V) */
            (rc = ft_bind(m, &l->wo, false, E, O, "blk.%d.attn_output.weight", il)) ||      /* (E, O) */
            (rc = ft_bind(m, &l->ffn_norm, false, 0, E, "blk.%d.ffn_norm.weight", il)) ||   /* (E) */
            (rc = ft_bind(m, &l->ffn_gate, false, F, E, "blk.%d.ffn_gate.weight", il)) ||   /* (F, E) */
            (rc = ft_bind(m, &l->ffn_up, false, F, E, "blk.%d.ffn_up.weight", il)) ||       /* (F, E) */
            (rc = ft_bind(m, &l->ffn_down, false, E, F, "blk.%d.ffn_down.weight", il)))     /* (E, F) */
            return rc;
    }
    return FT_OK;
}

const struct ft_arch_ops ft_arch_qwen2 = {
    .name = "qwen2",
    .arch = FT_ARCH_QWEN2,
    .rope_neox = true,
    .load_hparams = NULL,
    .bind = qwen2_bind,
    .forward = ft_llama_forward, /* same graph; the biases are in the weights */
};
