/* gemma3: Gemma 3 (text). Differences from llama: the embeddings are
 * scaled by sqrt(n_embd); Q and K get a per-head RMS norm; the attention
 * and MLP outputs are RMS-normed again before the residual add; the MLP is
 * GELU(tanh)-gated; NeoX RoPE; sliding-window attention on every layer but
 * each swa_pattern-th (default 6: il % 6 == 5 is global), the local layers
 * with their own RoPE base (rope.freq_base_swa, default 10000, no scaling);
 * the output head is tied to the embeddings. The norm weights in GGUF
 * already include Gemma's "+1".
 *
 *   x = embd[token] * sqrt(n_embd)
 *   per layer:  h = rmsnorm(x) * attn_norm
 *               q = rope_neox(rmsnorm_per_head(Wq h) * q_norm) * attn_scale
 *               k = rope_neox(rmsnorm_per_head(Wk h) * k_norm),  v = Wv h
 *               x += rmsnorm(Wo attention(q, K, V)) * attn_post_norm   (window on local layers)
 *               x += rmsnorm(Wdown (gelu(Wgate h2) * Wup h2)) * ffn_post_norm,  h2 = rmsnorm(x) * ffn_norm
 *   logits = Wout (rmsnorm(x) * output_norm), soft-capped if final_logit_softcapping is set
 */
#include "arch.h"
#include "bind.h"
#include "blocks.h"
#include "ft/common.h"
#include "model_internal.h"

#include <math.h>
#include <stdio.h>

static int gemma3_hparams(struct ft_model *m) {
    struct ft_hparams *hp = &m->hp;
    const char *a = hp->arch_name;
    char key[128];
    int32_t window = 0;
    int rc;

    snprintf(key, sizeof(key), "%s.attention.sliding_window", a);
    if ((rc = ft_gguf_get_i32(m->gguf, key, &window)) && rc != FT_ENOENT)
        return rc;
    if (window > 0) {
        hp->sliding_window = window;
        hp->swa_pattern = 6;
        uint32_t pattern = 6;
        snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", a);
        if ((rc = ft_gguf_get_u32(m->gguf, key, &pattern)) && rc != FT_ENOENT)
            return rc;
        if (pattern > 4096) {
            FT_LOG_E("%s: bad %s %u", ft_gguf_path(m->gguf), key, pattern);
            return FT_EFORMAT;
        }
        hp->swa_pattern = (int32_t)pattern;
        snprintf(key, sizeof(key), "%s.rope.freq_base_swa", a);
        if ((rc = ft_gguf_get_f32(m->gguf, key, &hp->rope_freq_base_swa)) && rc != FT_ENOENT)
            return rc;
    }
    snprintf(key, sizeof(key), "%s.final_logit_softcapping", a);
    if ((rc = ft_gguf_get_f32(m->gguf, key, &hp->final_softcap)) && rc != FT_ENOENT)
        return rc;

    /* llama.cpp (after gemma_pytorch): the 27B model (62 layers) scales by
     * 1/sqrt(n_embd / n_head), the others by 1/sqrt(head_dim). */
    hp->attn_scale = hp->n_layer == 62 ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
                                       : 1.0f / sqrtf((float)hp->head_dim_k);
    return FT_OK;
}

static int gemma3_bind(struct ft_model *m) {
    const int64_t E = m->hp.n_embd;
    int rc;
    if ((rc = ft_bind_io(m)))
        return rc;
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct ft_layer *l = &m->layers[il];
        if ((rc = ft_bind_attention(m, il, FT_BIND_QK_NORM)) ||
            (rc = ft_bind(m, &l->attn_post_norm, false, 0, E, "blk.%d.post_attention_norm.weight", il)) || /* (E) */
            (rc = ft_bind_ffn(m, il)) ||
            (rc = ft_bind(m, &l->ffn_post_norm, false, 0, E, "blk.%d.post_ffw_norm.weight", il))) /* (E) */
            return rc;
    }
    return FT_OK;
}

static void gemma3_forward(struct ft_fwd *f) {
    const struct ft_model *m = f->m;
    const struct ft_hparams *hp = &m->hp;
    struct ft_scratch *s = f->s;

    ft_blk_embed(f, sqrtf((float)hp->n_embd));
    for (int il = 0; il < hp->n_layer; il++) {
        const struct ft_layer *l = &m->layers[il];
        struct ft_rope rope;
        ft_layer_rope(m, il, &rope);
        const int32_t window = ft_layer_is_swa(hp, il) ? hp->sliding_window : 0;

        ft_blk_rmsnorm(f, s->xb, s->x, &l->attn_norm);
        ft_blk_qkv(f, l);
        ft_blk_head_norm(f, s->q, hp->n_head, &l->q_norm);
        ft_blk_rope(f, s->q, hp->n_head, hp->head_dim_k, &rope);
        ft_blk_head_norm(f, s->k, hp->n_head_kv, &l->k_norm);
        ft_blk_rope(f, s->k, hp->n_head_kv, hp->head_dim_k, &rope);
        ft_blk_scale(f, s->q, (int64_t)hp->n_head * hp->head_dim_k, hp->attn_scale);
        ft_blk_kv_store(f, il);
        if (il == hp->n_layer - 1)
            ft_blk_keep_out_rows(f); /* the rest only for rows that want logits */
        ft_blk_attention(f, il, 1.0f, window); /* Q is already scaled */
        ft_blk_attn_out(f, s->tmp, &l->wo, NULL, s->att);
        ft_blk_rmsnorm(f, s->tmp, s->tmp, &l->attn_post_norm);
        ft_blk_add(f, s->x, s->tmp, hp->n_embd);

        ft_blk_rmsnorm(f, s->xb, s->x, &l->ffn_norm);
        ft_blk_ffn(f, l, FT_GLU_GELU_TANH, s->tmp, s->xb);
        ft_blk_rmsnorm(f, s->tmp, s->tmp, &l->ffn_post_norm);
        ft_blk_add(f, s->x, s->tmp, hp->n_embd);
    }
    ft_blk_output(f);
}

const struct ft_arch_ops ft_arch_gemma3 = {
    .name = "gemma3",
    .arch = FT_ARCH_GEMMA3,
    .rope_neox = true,
    .load_hparams = gemma3_hparams,
    .bind = gemma3_bind,
    .forward = gemma3_forward,
};
