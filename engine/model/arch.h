/* The supported architectures (engine/model/arch_*.c): each names its
 * general.architecture, reads its own hyperparameters, binds its tensors
 * (engine/model/bind.h) and runs its forward pass over one internal batch
 * with the shared blocks (engine/model/blocks.h). engine/model/model.c
 * picks one at load. Not a public header. */
#ifndef FT_ARCH_H
#define FT_ARCH_H

#include "ft/model.h"

#include <stdbool.h>

struct ft_fwd;
struct ft_model;

/* One architecture: its hparams beyond the common ones, its tensors and its
 * forward pass over one internal batch. */
struct ft_arch_ops {
    const char *name; /* general.architecture */
    enum ft_arch arch;
    bool rope_neox;
    int (*load_hparams)(struct ft_model *m); /* may be NULL */
    int (*bind)(struct ft_model *m);
    void (*forward)(struct ft_fwd *f);
};

extern const struct ft_arch_ops ft_arch_llama;
extern const struct ft_arch_ops ft_arch_qwen2;
extern const struct ft_arch_ops ft_arch_qwen3;
extern const struct ft_arch_ops ft_arch_gemma3;
extern const struct ft_arch_ops ft_arch_qwen3moe;
extern const struct ft_arch_ops ft_arch_gptoss;

/* The MoE hyperparameters (expert_count, expert_used_count,
 * expert_feed_forward_length) present and in range; for the MoE archs'
 * load_hparams. */
int ft_moe_check_hparams(struct ft_model *m);

/* The llama forward pass, shared by qwen2 (same graph, with biases). */
void ft_llama_forward(struct ft_fwd *f);

/* Layer il's attention half of the qwen3 graph (Q/K head norms, NeoX RoPE,
 * x += Wo attention), shared by qwen3moe. */
void ft_qwen3_attention(struct ft_fwd *f, int il);

#endif
