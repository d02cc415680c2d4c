/* Helpers shared by the NEON float-op files (neon_float_gemm.c,
 * neon_attn.c, neon_ops.c): partial loads and stores, fp16/bf16 widening,
 * the fp16 rounding of activations, a 4x4 transpose and ggml's vector exp.
 * Include only from files built with the neon flags of cmake/FtSimd.cmake
 * (-march=armv8-a -ffp-contract=off): everything here is ARMv8.0 ASIMD,
 * including the fp16 <-> f32 conversions (fcvtl, fcvtn). */
#ifndef FT_SIMD_ARM_NEON_COMMON_H
#define FT_SIMD_ARM_NEON_COMMON_H

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

/* 4 floats of p, lanes >= n zero (NEON has no masked load: a partial one
 * goes through a zeroed copy, so nothing past p + n is read). */
static inline float32x4_t ft_neon_load4(const float *p, int64_t n) {
    if (n >= 4)
        return vld1q_f32(p);
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (n > 0)
        memcpy(t, p, (size_t)n * sizeof(float));
    return vld1q_f32(t);
}

/* Lanes [0, n) of v to p (all four when n >= 4). */
static inline void ft_neon_store4(float *p, float32x4_t v, int64_t n) {
    if (n >= 4) {
        vst1q_f32(p, v);
        return;
    }
    float t[4];
    vst1q_f32(t, v);
    if (n > 0)
        memcpy(p, t, (size_t)n * sizeof(float));
}

/* 4 halves (fp16 or bf16 bits) of p, lanes >= n zero. */
static inline uint16x4_t ft_neon_load4_u16(const uint16_t *p, int64_t n) {
    if (n >= 4)
        return vld1_u16(p);
    uint16_t t[4] = {0, 0, 0, 0};
    if (n > 0)
        memcpy(t, p, (size_t)n * sizeof(uint16_t));
    return vld1_u16(t);
}

/* fp16 -> f32 is exact (fcvtl); a NaN keeps its payload, made quiet, as
 * ft_half_to_float does. */
static inline float32x4_t ft_neon_f16_to_f32(uint16x4_t h) { return vcvt_f32_f16(vreinterpret_f16_u16(h)); }

/* bf16 -> f32 is a shift. */
static inline float32x4_t ft_neon_bf16_to_f32(uint16x4_t h) { return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); }

/* The value a float takes stored as fp16 (fcvtn rounds to nearest even,
 * keeps subnormals and overflows to inf like ft_float_to_half; only NaN
 * payloads can differ, and a NaN stays a NaN). */
static inline float32x4_t ft_neon_round_f16(float32x4_t v) { return vcvt_f32_f16(vcvt_f16_f32(v)); }

/* The value a float takes stored as bf16: ft_float_to_bfloat's rounding
 * (to nearest even); NaN lanes keep a NaN. */
static inline float32x4_t ft_neon_round_bf16(float32x4_t v) {
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vandq_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), vdupq_n_u32(0xffff0000u));
    return vbslq_f32(vceqq_f32(v, v), vreinterpretq_f32_u32(r), v);
}

/* r[i][j] -> r[j][i] */
static inline void ft_neon_transpose4(float32x4_t r[4]) {
    const float32x4_t t0 = vtrn1q_f32(r[0], r[1]), t1 = vtrn2q_f32(r[0], r[1]);
    const float32x4_t t2 = vtrn1q_f32(r[2], r[3]), t3 = vtrn2q_f32(r[2], r[3]);
    r[0] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    r[1] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
    r[2] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    r[3] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
}

/* e^x as ggml_v_expf, the reference's exp (simd/ops_ref.c), bit for bit:
 * the same FMAs in the same order, then 2^n applied in two exact halves so
 * the one rounding is ldexpf's, also where the result is subnormal or
 * overflows. |n| > 192: 0 or +inf, as the reference. NaN stays NaN. */
static inline float32x4_t ft_neon_exp(float32x4_t x) {
    const float32x4_t r = vdupq_n_f32(0x1.8p23f);
    const float32x4_t z = vfmaq_f32(r, x, vdupq_n_f32(0x1.715476p+0f));
    const float32x4_t n = vsubq_f32(z, r);
    const float32x4_t nn = vnegq_f32(n);
    const float32x4_t b =
        vfmaq_f32(vfmaq_f32(x, nn, vdupq_n_f32(0x1.62e4p-1f)), nn, vdupq_n_f32(0x1.7f7d1cp-20f));
    const float32x4_t u = vmulq_f32(b, b);
    const float32x4_t j = vfmaq_f32(
        vfmaq_f32(vdupq_n_f32(1.0f), vdupq_n_f32(0x1.ffffecp-1f), b),
        vfmaq_f32(vfmaq_f32(vdupq_n_f32(0x1.fffdb6p-2f), vdupq_n_f32(0x1.555e66p-3f), b),
                  vfmaq_f32(vdupq_n_f32(0x1.573e2ep-5f), vdupq_n_f32(0x1.0e4020p-7f), b), u),
        u);
    /* 2^n = 2^h1 * 2^h2, |h1|, |h2| <= 96: j * 2^h1 is exact, so the
     * product rounds once */
    const float32x4_t lim = vdupq_n_f32(192.0f);
    const int32x4_t ni = vcvtq_s32_f32(vminq_f32(vmaxq_f32(n, vnegq_f32(lim)), lim));
    const int32x4_t h1 = vshrq_n_s32(ni, 1), h2 = vsubq_s32(ni, h1);
    const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(h1, vdupq_n_s32(127)), 23));
    const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(h2, vdupq_n_s32(127)), 23));
    const float32x4_t y = vmulq_f32(vmulq_f32(j, s1), s2);
    /* |n| > 192 (NaN compares false and keeps y, a NaN) */
    const uint32x4_t big = vcagtq_f32(n, lim);
    const float32x4_t edge = vbslq_f32(vcleq_f32(n, vdupq_n_f32(0.0f)), vdupq_n_f32(0.0f), vdupq_n_f32(__builtin_inff()));
    return vbslq_f32(big, edge, y);
}

#endif
