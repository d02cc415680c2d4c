/* gpt-oss: OpenAI's open-weight mixture of experts (gpt-oss-20b, -120b;
 * llama.cpp's LLM_ARCH_OPENAI_MOE). Differences from qwen3moe: Q/K/V/O
 * biases and no Q/K norms; every attention head has a sink, one more logit
 * in its softmax that carries no value; even layers attend to a sliding
 * window (sliding_window_pattern, default 2), with the same RoPE as the
 * others (YaRN, NeoX); the router has a bias and weights the top k by a
 * softmax over their logits only; the experts have biases and a clamped
 * SwiGLU (alpha 1.702, limit 7). The norm before the experts is
 * post_attention_norm.
 *
 *   per layer:  h = rmsnorm(x) * attn_norm
 *               q = rope_neox(Wq h + bq),  k = rope_neox(Wk h + bk),  v = Wv h + bv
 *               x += Wo attention_sinks(q, K, V) + bo          (window on even layers)
 *               h = rmsnorm(x) * post_attention_norm
 *               l = Wrouter h + br,  S = top-k(l),  w = softmax(l_S)
 *               g_e = Wgate_e h + bg_e,  u_e = Wup_e h + bu_e
 *               x += sum_{e in S} w_e (Wdown_e swiglu_oai(g_e, u_e) + bd_e)
 *   logits = Wout (rmsnorm(x) * output_norm)
 *
 * llama.cpp runs the last layer over every row of the batch and only then
 * keeps the rows that want logits, so we do too (the kernels of its
 * matmuls depend on the row count). */
#include "arch.h"
#include "attention.h"
#include "bind.h"
#include "blocks.h"
#include "ft/common.h"
#include "ft/gguf.h"
#include "model_internal.h"
#include "moe.h"

#include <stdio.h>

static int gptoss_hparams(struct ft_model *m) {
    struct ft_hparams *hp = &m->hp;
    char key[128];
    int rc;
    if ((rc = ft_moe_check_hparams(m)))
        return rc;
    int32_t window = 0;
    snprintf(key, sizeof(key), "%s.attention.sliding_window", hp->arch_name);
    if ((rc = ft_gguf_get_i32(m->gguf, key, &window))) {
        if (rc == FT_ENOENT)
            FT_LOG_E("%s: required key %s is missing", ft_gguf_path(m->gguf), key);
        return rc == FT_ENOENT ? FT_EFORMAT : rc;
    }
    uint32_t pattern = 2;
    snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", hp->arch_name);
    if ((rc = ft_gguf_get_u32(m->gguf, key, &pattern)) && rc != FT_ENOENT)
        return rc;
    if (window <= 0 || pattern > 4096) {
        FT_LOG_E("%s: bad sliding window %d or pattern %u", ft_gguf_path(m->gguf), (int)window, pattern);
        return FT_EFORMAT;
    }
    hp->sliding_window = window;
    hp->swa_pattern = (int32_t)pattern;
    hp->rope_freq_base_swa = hp->rope_freq_base;
    hp->rope_freq_scale_swa = hp->rope_freq_scale;
    snprintf(key, sizeof(key), "%s.rope.freq_base_swa", hp->arch_name);
    if ((rc = ft_gguf_get_f32(m->gguf, key, &hp->rope_freq_base_swa)) && rc != FT_ENOENT)
        return rc;
    if (hp->n_head / hp->n_head_kv > FT_ATTN_SINK_GROUP_MAX) {
        FT_LOG_E("%s: %d query heads per KV head; attention sinks support at most %d", ft_gguf_path(m->gguf),
                 (int)(hp->n_head / hp->n_head_kv), FT_ATTN_SINK_GROUP_MAX);
        return FT_EUNSUPPORTED;
    }
    return FT_OK;
}

static int gptoss_bind(struct ft_model *m) {
    const struct ft_hparams *hp = &m->hp;
    int rc;
    if ((rc = ft_bind_io(m)))
        return rc;
    for (int il = 0; il < hp->n_layer; il++) {
        struct ft_layer *l = &m->layers[il];
        if ((rc = ft_bind_attention(m, il, FT_BIND_QKV_BIAS | FT_BIND_O_BIAS)) ||
            (rc = ft_bind(m, &l->attn_sinks, false, 0, hp->n_head, "blk.%d.attn_sinks.weight", il)) || /* (n_head) */
            (rc = ft_bind(m, &l->ffn_norm, false, 0, hp->n_embd, "blk.%d.post_attention_norm.weight", il)) ||
            (rc = ft_bind_moe(m, il, FT_BIND_MOE_BIAS)))
            return rc;
    }
    return FT_OK;
}

static void gptoss_forward(struct ft_fwd *f) {
    const struct ft_model *m = f->m;
    const struct ft_hparams *hp = &m->hp;
    struct ft_scratch *s = f->s;
    const struct ft_moe_params moe = {
        .gating = FT_MOE_GATING_SOFTMAX_WEIGHT, .norm_w = false, .act = FT_MOE_ACT_SWIGLU_OAI, .alpha = 1.702f, .limit = 7.0f};

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
        ft_blk_attention_sinks(f, il, hp->attn_scale, ft_layer_is_swa(hp, il) ? hp->sliding_window : 0,
                               l->attn_sinks.data);
        ft_blk_attn_out(f, s->tmp, &l->wo, &l->bo, s->att);
        ft_blk_add(f, s->x, s->tmp, hp->n_embd);

        ft_blk_rmsnorm(f, s->xb, s->x, &l->ffn_norm);
        ft_blk_moe(f, l, &moe, s->tmp, s->xb);
        ft_blk_add(f, s->x, s->tmp, hp->n_embd);
    }
    ft_blk_keep_out_rows(f);
    ft_blk_output(f);
}

const struct ft_arch_ops ft_arch_gptoss = {
    .name = "gpt-oss",
    .arch = FT_ARCH_GPTOSS,
    .rope_neox = true,
    .load_hparams = gptoss_hparams,
    .bind = gptoss_bind,
    .forward = gptoss_forward,
};
