/* Tensor binding (engine/model/bind.c), used by the architecture files:
 * every weight is looked up in the GGUF file by name and checked for shape
 * and type before it is bound. Not a public header. */
#ifndef FT_BIND_H
#define FT_BIND_H

#include "weights.h"

#include <stdbool.h>
#include <stdint.h>

struct ft_model;

/* Bind `name` (printf-style with the layer index) expecting shape
 * (rows, cols) (rows 0: a vector of cols). Missing and not optional, or a
 * wrong shape: FT_EFORMAT naming the tensor and both shapes. A type we
 * cannot run: FT_EUNSUPPORTED. */
int ft_bind(struct ft_model *m, struct ft_weight *w, bool optional, int64_t rows, int64_t cols,
            const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* A 3-D expert tensor [cols, rows, n_expert] (GGUF order) as one matrix of
 * n_expert * rows rows (engine/model/weights.h); rows 0: an F32 expert
 * bias [cols, n_expert] as one vector. */
int ft_bind_experts(struct ft_model *m, struct ft_weight *w, bool optional, int64_t rows, int64_t cols,
                    const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Common to every arch: token_embd, output_norm, output (tied when absent). */
int ft_bind_io(struct ft_model *m);

/* What a layer's attention block has besides attn_norm, Wq, Wk, Wv, Wo. */
enum ft_bind_attn_opts {
    FT_BIND_QKV_BIAS = 1 << 0, /* attn_q/k/v.bias, optional */
    FT_BIND_O_BIAS = 1 << 1,   /* attn_output.bias, optional */
    FT_BIND_QK_NORM = 1 << 2,  /* attn_q_norm / attn_k_norm per head, required */
};
/* Layer il's attention weights, with the shapes the hyperparameters give. */
int ft_bind_attention(struct ft_model *m, int il, unsigned opts);
/* Layer il's gated feed-forward: ffn_norm, ffn_gate, ffn_up, ffn_down. */
int ft_bind_ffn(struct ft_model *m, int il);

/* What a layer's MoE block has besides the router and the three expert tensors. */
enum ft_bind_moe_opts {
    FT_BIND_MOE_BIAS = 1 << 0, /* router and expert biases, required (gpt-oss) */
};
/* Layer il's mixture of experts: ffn_gate_inp (F32 router), ffn_{gate,up,down}_exps. */
int ft_bind_moe(struct ft_model *m, int il, unsigned opts);

#endif
