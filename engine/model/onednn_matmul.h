/* oneDNN matmuls for F32 weights (engine/model/onednn_matmul.c). Not a
 * public header. */
#ifndef FT_ONEDNN_MATMUL_H
#define FT_ONEDNN_MATMUL_H

#include "weights.h"

#include <stdbool.h>
#include <stdint.h>

/* oneDNN for F32 weights on the avx512 level (engine/model/onednn_matmul.c;
 * false / FT_EUNSUPPORTED in builds without FT_ONEDNN): c (m, n), rows ldc
 * apart, = a (m, k) W^T for n weight rows of k floats. Called from pool
 * threads, each on its own slice. */
bool ft_onednn_matmul_applies(const struct ft_weight *w);
int ft_onednn_matmul(const float *a, int64_t m, int64_t k, const float *w, int64_t n, float *c, int64_t ldc);

#endif
