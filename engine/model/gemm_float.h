/* The float GEMM (engine/model/gemm_float.c) for float weights in batches.
 * Not a public header. */
#ifndef FT_GEMM_FLOAT_H
#define FT_GEMM_FLOAT_H

#include "forward.h"
#include "weights.h"

#include <stdbool.h>

/* Float weights (F32/F16/BF16) in a batch of several rows go through the
 * level's GEMM (engine/model/gemm_float.c): whether w does, and the call, with
 * n weights sharing the input (outs[i] (n_rows, ws[i]->rows) = in
 * ws[i]^T + bs[i]; bs may be NULL, and so may bs[i]->data). */
bool ft_gemm_float_applies(const struct ft_fwd *f, const struct ft_weight *w);
void ft_gemm_float(struct ft_fwd *f, const float *in, int n, float *const *outs, const struct ft_weight *const *ws,
                   const struct ft_weight *const *bs);
/* The gate activation of a gated feed-forward. */
enum ft_glu { FT_GLU_SILU, FT_GLU_GELU_TANH };
/* gate = act(gate(in)) * up(in), up = up(in), both through the GEMM (both
 * weights must satisfy ft_gemm_float_applies and share a type). */
void ft_gemm_float_glu(struct ft_fwd *f, const float *in, const struct ft_weight *gate, const struct ft_weight *up,
                       enum ft_glu act, float *gate_out, float *up_out);

#endif
