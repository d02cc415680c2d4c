/* The experts' products of a mixture-of-experts block in one thread-pool
 * task for gate/up and one for down (engine/model/moe_matmul.c). Not a
 * public header. */
#ifndef FT_MOE_MATMUL_H
#define FT_MOE_MATMUL_H

#include "forward.h"
#include "moe.h"
#include "weights.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The selected experts of a step, ascending: expert ex[i] owns pairs
 * [start[i], start[i] + cnt[i]) of the expert-sorted (token, slot) pairs,
 * cnt[i] > 0. */
struct ft_moe_sel {
    int n;
    int32_t ex[FT_MOE_MAX_EXPERTS], start[FT_MOE_MAX_EXPERTS], cnt[FT_MOE_MAX_EXPERTS];
};

/* Layer l's experts go through these functions: quantized, gate and up
 * of one type (float experts go through matmul.c's float GEMM). */
bool ft_moe_matmul_applies(const struct ft_layer *l);

/* gate (P, n_ff_exp) = GLU(gate, up) of every selected expert over its
 * pairs, pair p's input being in's row src[p] (in: (n_rows, n_embd));
 * up (P, n_ff_exp) is scratch. One token (f->n_rows == 1) is every pair's
 * input and is converted once. */
void ft_moe_matmul_gate_up(struct ft_fwd *f, const struct ft_layer *l, const struct ft_moe_sel *sel,
                           const float *in, const int32_t *src, const struct ft_moe_params *mp, float *gate,
                           float *up);
/* out (P, n_embd) = pair_w[p] * (Wdown_e in[p] + bd_e) for each sorted pair p of expert e. */
void ft_moe_matmul_down(struct ft_fwd *f, const struct ft_layer *l, const struct ft_moe_sel *sel, const float *in,
                        const float *pair_w, float *out);

/* g = GLU(g, u) over n values, as mp says (SwiGLU, or gpt-oss's clamped one). */
void ft_moe_glu(const struct ft_moe_params *mp, float *g, const float *u, int64_t n);

/* Bytes of scratch for batches of up to n_tok tokens: converted pair rows
 * (struct ft_scratch.moe_act) and activation tiles (moe_tiles). */
void ft_moe_matmul_scratch_need(const struct ft_model *m, int32_t n_tok, size_t *rows, size_t *tiles);

#endif
