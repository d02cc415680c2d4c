/* The mixture-of-experts block (engine/model/moe.c), used by the MoE
 * architectures in place of ft_blk_ffn. Not a public header. */
#ifndef FT_MOE_H
#define FT_MOE_H

#include "forward.h"
#include "weights.h"

#include <stdbool.h>

/* Most experts a layer may have (llama.cpp's LLAMA_MAX_EXPERTS). */
#define FT_MOE_MAX_EXPERTS 512

/* How the router's logits become the selected experts' weights (llama.cpp's
 * llama_expert_gating_func_type). */
enum ft_moe_gating {
    FT_MOE_GATING_SOFTMAX,        /* softmax over all experts, top-k of the probabilities (qwen3moe) */
    FT_MOE_GATING_SOFTMAX_WEIGHT, /* top-k of the logits, softmax over the k (gpt-oss) */
};

enum ft_moe_act {
    FT_MOE_ACT_SWIGLU,     /* silu(gate) * up */
    FT_MOE_ACT_SWIGLU_OAI, /* gpt-oss: clamped, alpha-scaled sigmoid, up + 1 (moe.c) */
};

struct ft_moe_params {
    enum ft_moe_gating gating;
    bool norm_w;        /* divide the k weights by their sum */
    enum ft_moe_act act;
    float alpha, limit; /* FT_MOE_ACT_SWIGLU_OAI */
};

/* out (n_rows, n_embd) = the MoE block of layer l over in (n_rows, n_embd). */
void ft_blk_moe(struct ft_fwd *f, const struct ft_layer *l, const struct ft_moe_params *mp, float *out,
                const float *in);

#endif
