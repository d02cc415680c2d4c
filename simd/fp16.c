/* Public half/bfloat16 conversions and their row forms: the from_float /
 * to_float of the F16 and BF16 types. The arithmetic lives in simd/fp16.h so
 * the block kernels can inline it. */
#include "fp16.h"

#include "ft/types.h"

float ft_fp16_to_fp32(uint16_t h) { return ft_half_to_float(h); }
uint16_t ft_fp32_to_fp16(float f) { return ft_float_to_half(f); }
float ft_bf16_to_fp32(uint16_t h) { return ft_bfloat_to_float(h); }
uint16_t ft_fp32_to_bf16(float f) { return ft_float_to_bfloat(f); }

/* The rows are uint16_t arrays in memory but typed void * to match the
 * ft_to_float_fn / ft_from_float_fn table slots without casts. */
void ft_fp16_to_fp32_row(const void *restrict vx, float *restrict y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = ft_half_to_float(x[i]);
}

void ft_fp32_to_fp16_row(const float *restrict x, void *restrict vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = ft_float_to_half(x[i]);
}

void ft_bf16_to_fp32_row(const void *restrict vx, float *restrict y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = ft_bfloat_to_float(x[i]);
}

void ft_fp32_to_bf16_row(const float *restrict x, void *restrict vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = ft_float_to_bfloat(x[i]);
}
