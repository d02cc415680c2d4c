/* Matmul dispatch (engine/model/matmul.c): the products of a forward pass,
 * out = in W^T, on the model's thread pool. Not a public header. */
#ifndef FT_MATMUL_H
#define FT_MATMUL_H

#include "forward.h"
#include "weights.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One product of a call to ft_matmul(): out (n_rows, w->rows) = in W^T + bias. */
struct ft_mm {
    const struct ft_weight *w;
    const struct ft_weight *bias; /* NULL or absent: none */
    float *out;
};
/* n products of the same input (n_rows, k); every w has k columns. */
void ft_matmul(struct ft_fwd *f, const float *in, int n, const struct ft_mm *mm);
/* Bytes of GEMM scratch for batches of up to n_tok tokens: the activation
 * tiles, and the weight panel of one thread. */
void ft_matmul_scratch_need(const struct ft_model *m, int32_t n_tok, size_t *act, size_t *panel);

/* ft_matmul, with the kernels picked by the rows as attention counts
 * them (the whole batch, also after ft_blk_keep_out_rows): the attention
 * output projection (ft_blk_attn_out). */
void ft_matmul_att_rows(struct ft_fwd *f, const float *in, int n, const struct ft_mm *mm);

#endif
