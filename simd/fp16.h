/* Half (IEEE binary16) and bfloat16 <-> float conversions, inline for the
 * kernels that convert one block scale at a time. Internal to simd/; the
 * public entry points are ft_fp16_to_fp32() & co. in include/ft/types.h.
 *
 * What must stay true: every conversion is bit-exact with ggml's
 * (ggml-impl.h ggml_compute_*), because GGUF files written by llama.cpp and
 * by us must agree byte for byte:
 *   fp32 -> fp16: round to nearest even, subnormals kept, overflow to inf,
 *                 any NaN -> sign | 0x7E00 (ggml's canonical quiet NaN);
 *   fp16 -> fp32: exact; a NaN keeps its payload with the quiet bit set
 *                 (what ggml's multiply-based decoder yields on x86/ARM);
 *   fp32 -> bf16: round to nearest even; a NaN is truncated and forced quiet;
 *   bf16 -> fp32: exact (a shift).
 * They rely on the default floating-point environment (round to nearest,
 * no flush-to-zero), as ggml does.
 */
#ifndef FT_SIMD_FP16_H
#define FT_SIMD_FP16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t ft_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float ft_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline float ft_half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN made quiet */
        return ft_f32_from_bits(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0));
    if (exp == 0) /* zero or subnormal: man * 2^-24, exact in float */
        return ft_f32_from_bits(sign | ft_f32_bits((float)man * 0x1p-24f));
    return ft_f32_from_bits(sign | ((exp + (127 - 15)) << 23) | (man << 13));
}

static inline uint16_t ft_float_to_half(float f) {
    const uint32_t x = ft_f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN */
        return sign | 0x7e00u;
    if (ax >= 0x477ff000u) /* >= 65520 (halfway above 65504) rounds to inf */
        return sign | 0x7c00u;
    if (ax < 0x38800000u) {
        /* Below 2^-14: the result is a multiple of 2^-24. Adding 0.5f (whose
         * ulp is 2^-24) makes the FPU round to it, nearest-even, and the
         * mantissa bits then count the units (1024 = smallest normal). */
        const float v = ft_f32_from_bits(ax) + 0.5f;
        return sign | (uint16_t)(ft_f32_bits(v) - 0x3f000000u);
    }
    /* Normal: round the 23-bit mantissa to 10 bits, nearest-even; a carry
     * out of the mantissa correctly bumps the exponent. */
    ax += 0xfffu + ((ax >> 13) & 1u);
    ax -= (uint32_t)(127 - 15) << 23;
    return sign | (uint16_t)(ax >> 13);
}

static inline float ft_bfloat_to_float(uint16_t h) { return ft_f32_from_bits((uint32_t)h << 16); }

static inline uint16_t ft_float_to_bfloat(float f) {
    const uint32_t x = ft_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate, force quiet */
        return (uint16_t)((x >> 16) | 64u);
    return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

/* Row conversions (simd/fp16.c). */
void ft_fp16_to_fp32_row(const void *restrict x, float *restrict y, int64_t n);
void ft_fp32_to_fp16_row(const float *restrict x, void *restrict y, int64_t n);
void ft_bf16_to_fp32_row(const void *restrict x, float *restrict y, int64_t n);
void ft_fp32_to_bf16_row(const float *restrict x, void *restrict y, int64_t n);

#endif
