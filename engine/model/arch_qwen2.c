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
#include "arch.h"
#include "bind.h"
#include "ft/common.h"
#include "model_internal.h"

static int qwen2_bind(struct ft_model *m) {
    const struct ft_hparams *hp = &m->hp;
    int rc;
    if ((rc = ft_bind_io(m)) ||
        (rc = ft_bind(m, &m->output_b, true, 0, hp->n_vocab, "output.bias"))) /* (n_vocab) */
        return rc;
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = ft_bind_attention(m, il, FT_BIND_QKV_BIAS)) || (rc = ft_bind_ffn(m, il)))
            return rc;
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
