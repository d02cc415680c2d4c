/* Horizontal sums in the order of ggml's x86 kernels, for the scalar
 * reference code (simd/quant_ref.c, simd/ops_ref.c) that mirrors what
 * llama.cpp's CPU backend computes. Float addition is not associative, and
 * a difference in the last bit of a dot product is enough to flip an 8-bit
 * activation quantization or an fp16 rounding downstream; so the reference
 * adds lanes in exactly the order the vector instructions do. Internal to
 * simd/. */
#ifndef FT_SIMD_REDUCE_REF_H
#define FT_SIMD_REDUCE_REF_H

/* hsum_float_8 (ggml-cpu/arch/x86/quants.c) and tinyBLAS hsum(__m256):
 * upper half onto lower, then lanes 0+2 and 1+3, then those two. */
static inline float ft_hsum8_ref(const float a[8]) {
    float r[4];
    for (int i = 0; i < 4; i++)
        r[i] = a[i + 4] + a[i];
    return (r[0] + r[2]) + (r[1] + r[3]);
}

/* _mm512_reduce_add_ps as GCC expands it: 256-bit halves, 128-bit halves,
 * then lanes 0+2 and 1+3, then those two. */
static inline float ft_hsum16_ref(const float a[16]) {
    float t[8];
    for (int i = 0; i < 8; i++)
        t[i] = a[i + 8] + a[i];
    return ft_hsum8_ref(t);
}

#endif
