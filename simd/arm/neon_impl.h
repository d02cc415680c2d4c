/* NEON kernels for aarch64, included by simd/arm/neon_quant.c (ARMv8.0 ASIMD,
 * the "neon" level) and simd/arm/neon_dotprod_quant.c (ARMv8.2 + dotprod, the
 * "neon-dotprod" level). The two files differ only in how 16 int8 products
 * are summed into 4 int32 lanes: sdot (vdotq_s32) with dotprod, smull +
 * sadalp without. The including file defines FT_NEON_DOT (0/1) and
 * FT_NEON_FILL, the name of its table function.
 *
 * Contract (simd/kernels.h): quantizers give the reference's bytes, to_float
 * the reference's floats, vec_dot the reference's integer sums with float
 * accumulation in another order. Built with -ffp-contract=off, so a
 * multiply followed by a subtract stays two roundings like the reference;
 * FMAs are written as vfmaq where wanted.
 *
 * smmla (i8mm) multiplies 2x8 by 8x2 blocks, i.e. two weight rows against
 * two activation rows; it helps GEMM micro-kernels, not this single-row
 * vec_dot, and is left to them.
 */
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/quant_ref.h"

#include <arm_neon.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#ifndef FT_NEON_DOT
#error "define FT_NEON_DOT before including neon_impl.h"
#endif

/* ---- helpers ------------------------------------------------------------------ */

static inline float f16(uint16_t h) {
    __fp16 v;
    memcpy(&v, &h, 2);
    return (float)v;
}

/* fcvt rounds to nearest even like ft_float_to_half; only NaN payloads
 * differ, and no NaN reaches a block scale from finite input. */
static inline uint16_t to_f16(float f) {
    const __fp16 v = (__fp16)f;
    uint16_t h;
    memcpy(&h, &v, 2);
    return h;
}

/* acc + the 16 products a[i] * b[i] summed in groups of 4 (sdot) or of 2
 * and then 2 (smull + sadalp): only the lane a product lands in differs, and
 * every caller sums all four lanes of a sub-block alike. */
static inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if FT_NEON_DOT
    return vdotq_s32(acc, a, b);
#else
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

static inline void prefetch_ahead(const void *p, int bytes) {
    for (int o = 0; o < bytes; o += 64)
        __builtin_prefetch((const char *)p + FT_PREFETCH_DIST + o, 0, 3);
}

/* ---- F32 / F16 / BF16 ----------------------------------------------------------- */

static void vec_dot_f32(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const float *x = vx, *y = vy;
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        prefetch_ahead(x + i, 64);
        a0 = vfmaq_f32(a0, vld1q_f32(x + i), vld1q_f32(y + i));
        a1 = vfmaq_f32(a1, vld1q_f32(x + i + 4), vld1q_f32(y + i + 4));
        a2 = vfmaq_f32(a2, vld1q_f32(x + i + 8), vld1q_f32(y + i + 8));
        a3 = vfmaq_f32(a3, vld1q_f32(x + i + 12), vld1q_f32(y + i + 12));
    }
    for (; i + 4 <= n; i += 4)
        a0 = vfmaq_f32(a0, vld1q_f32(x + i), vld1q_f32(y + i));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++)
        sum += x[i] * y[i];
    *s = sum;
}

static inline float16x8_t load_f16x8(const uint16_t *p) { return vreinterpretq_f16_u16(vld1q_u16(p)); }

static void vec_dot_f16(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const uint16_t *x = vx, *y = vy;
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        prefetch_ahead(x + i, 32);
        const float16x8_t x0 = load_f16x8(x + i), y0 = load_f16x8(y + i);
        const float16x8_t x1 = load_f16x8(x + i + 8), y1 = load_f16x8(y + i + 8);
        a0 = vfmaq_f32(a0, vcvt_f32_f16(vget_low_f16(x0)), vcvt_f32_f16(vget_low_f16(y0)));
        a1 = vfmaq_f32(a1, vcvt_high_f32_f16(x0), vcvt_high_f32_f16(y0));
        a2 = vfmaq_f32(a2, vcvt_f32_f16(vget_low_f16(x1)), vcvt_f32_f16(vget_low_f16(y1)));
        a3 = vfmaq_f32(a3, vcvt_high_f32_f16(x1), vcvt_high_f32_f16(y1));
    }
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++)
        sum += f16(x[i]) * f16(y[i]);
    *s = sum;
}

static inline float32x4_t bf16_lo(uint16x8_t h) { return vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)); }
static inline float32x4_t bf16_hi(uint16x8_t h) { return vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)); }

static void vec_dot_bf16(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const uint16_t *x = vx, *y = vy;
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        prefetch_ahead(x + i, 32);
        const uint16x8_t x0 = vld1q_u16(x + i), y0 = vld1q_u16(y + i);
        const uint16x8_t x1 = vld1q_u16(x + i + 8), y1 = vld1q_u16(y + i + 8);
        a0 = vfmaq_f32(a0, bf16_lo(x0), bf16_lo(y0));
        a1 = vfmaq_f32(a1, bf16_hi(x0), bf16_hi(y0));
        a2 = vfmaq_f32(a2, bf16_lo(x1), bf16_lo(y1));
        a3 = vfmaq_f32(a3, bf16_hi(x1), bf16_hi(y1));
    }
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++)
        sum += ft_bfloat_to_float(x[i]) * ft_bfloat_to_float(y[i]);
    *s = sum;
}

static void f16_to_f32_row(const void *restrict vx, float *restrict y, int64_t n) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float16x8_t h = load_f16x8(x + i);
        vst1q_f32(y + i, vcvt_f32_f16(vget_low_f16(h)));
        vst1q_f32(y + i + 4, vcvt_high_f32_f16(h));
    }
    for (; i < n; i++)
        y[i] = ft_half_to_float(x[i]);
}

static inline int any_nan(float32x4_t a, float32x4_t b) {
    const uint32x4_t ok = vandq_u32(vceqq_f32(a, a), vceqq_f32(b, b));
    return vminvq_u32(ok) == 0;
}

/* fcvtn agrees with ft_float_to_half except on NaN payloads: NaN chunks go
 * to the scalar code. */
static void f32_to_f16_row(const float *restrict x, void *restrict vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
        if (any_nan(a, b)) {
            for (int j = 0; j < 8; j++)
                y[i + j] = ft_float_to_half(x[i + j]);
            continue;
        }
        vst1q_u16(y + i, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(a), b)));
    }
    for (; i < n; i++)
        y[i] = ft_float_to_half(x[i]);
}

static void bf16_to_f32_row(const void *restrict vx, float *restrict y, int64_t n) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint16x8_t h = vld1q_u16(x + i);
        vst1q_f32(y + i, bf16_lo(h));
        vst1q_f32(y + i + 4, bf16_hi(h));
    }
    for (; i < n; i++)
        y[i] = ft_bfloat_to_float(x[i]);
}

/* Round to nearest even in integer arithmetic, as ft_float_to_bfloat. */
static inline uint16x4_t bf16_round(float32x4_t v) {
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    return vshrn_n_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16);
}

static void f32_to_bf16_row(const float *restrict x, void *restrict vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
        if (any_nan(a, b)) {
            for (int j = 0; j < 8; j++)
                y[i + j] = ft_float_to_bfloat(x[i + j]);
            continue;
        }
        vst1q_u16(y + i, vcombine_u16(bf16_round(a), bf16_round(b)));
    }
    for (; i < n; i++)
        y[i] = ft_float_to_bfloat(x[i]);
}

/* ---- Q8_0 / Q8_1 / Q8_K activations --------------------------------------------------- */

/* Narrow 4x4 int32 (each -128..127) to 16 int8 in order. */
static inline int8x16_t narrow_16(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
    const int16x8_t ab = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
    const int16x8_t cd = vcombine_s16(vqmovn_s32(c), vqmovn_s32(d));
    return vcombine_s8(vqmovn_s16(ab), vqmovn_s16(cd));
}

/* One 32-element block as the reference: d = amax / 127 and
 * q = roundf(x / d); fcvtas is exactly roundf's ties-away rounding. */
/* One Q8 block. act: activations as llama.cpp's x86 backend makes them
 * (127 / amax, ties to even: simd/quant_ref.c); else the GGUF weight
 * quantizer (1 / d, ties away from zero). */
static inline float quantize_block_q8(const float *x, int8_t *qs, int *sum, bool act) {
    float32x4_t v[8];
    float32x4_t am = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        am = vmaxq_f32(am, vabsq_f32(v[k]));
    }
    const float amax = vmaxvq_f32(am);
    const float d = amax / 127;
    int32x4_t q[8];
    if (act) {
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (int k = 0; k < 8; k++) /* fcvtns: nearest, ties to even */
            q[k] = vcvtnq_s32_f32(vmulq_n_f32(v[k], id));
    } else {
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int k = 0; k < 8; k++) /* fcvtas: nearest, ties away from zero */
            q[k] = vcvtaq_s32_f32(vmulq_n_f32(v[k], id));
    }
    vst1q_s8(qs, narrow_16(q[0], q[1], q[2], q[3]));
    vst1q_s8(qs + 16, narrow_16(q[4], q[5], q[6], q[7]));
    if (sum) {
        int32x4_t t = vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3]));
        t = vaddq_s32(t, vaddq_s32(vaddq_s32(q[4], q[5]), vaddq_s32(q[6], q[7])));
        *sum = vaddvq_s32(t);
    }
    return d;
}

static inline void quantize_q8_0(const float *restrict x, void *restrict vy, int64_t n, bool act) {
    ft_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / FT_QK8_0; i++)
        y[i].d = to_f16(quantize_block_q8(x + i * FT_QK8_0, y[i].qs, NULL, act));
}

static inline void quantize_q8_1(const float *restrict x, void *restrict vy, int64_t n, bool act) {
    ft_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / FT_QK8_1; i++) {
        int sum;
        const float d = quantize_block_q8(x + i * FT_QK8_1, y[i].qs, &sum, act);
        y[i].d = to_f16(d);
        y[i].s = to_f16((float)sum * d);
    }
}

static void quantize_row_q8_0(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_0(x, y, n, false); }
static void quantize_row_q8_0_act(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_0(x, y, n, true); }
static void quantize_row_q8_1(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_1(x, y, n, false); }
static void quantize_row_q8_1_act(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_1(x, y, n, true); }

/* q = min(127, nearest_int(-127 / max * x)), max the first element of
 * largest magnitude; fcvtns rounds to nearest even like nearest_int(). */
static void quantize_row_q8_K(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / FT_QK_K; i++, x += FT_QK_K) {
        float32x4_t am = vdupq_n_f32(0.0f);
        for (int k = 0; k < 64; k++)
            am = vmaxq_f32(am, vabsq_f32(vld1q_f32(x + 4 * k)));
        const float amax = vmaxvq_f32(am);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        int first = 0; /* bounded: with a NaN in the block amax is NaN */
        while (first < FT_QK_K - 1 && fabsf(x[first]) != amax)
            first++;
        const float iscale = -127.f / x[first];
        const int32x4_t cap = vdupq_n_s32(127);
        for (int k = 0; k < 16; k++) {
            int32x4_t q[4];
            for (int j = 0; j < 4; j++)
                q[j] = vminq_s32(cap, vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * k + 4 * j), iscale)));
            const int8x16_t b = narrow_16(q[0], q[1], q[2], q[3]);
            vst1q_s8(y[i].qs + 16 * k, b);
            y[i].bsums[k] = vaddlvq_s8(b);
        }
        y[i].d = 1 / iscale;
    }
}

static void dequantize_row_q8_0(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / FT_QK8_0; i++, y += FT_QK8_0) {
        const float d = f16(x[i].d);
        for (int k = 0; k < 2; k++) {
            const int8x16_t q = vld1q_s8(x[i].qs + 16 * k);
            const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
            vst1q_f32(y + 16 * k + 0, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
            vst1q_f32(y + 16 * k + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d));
            vst1q_f32(y + 16 * k + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
            vst1q_f32(y + 16 * k + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d));
        }
    }
}

/* 16 int8 times a float scale, as 16 floats (to_float helpers). */
static inline void store_scaled_16(float *y, int8x16_t q, float d) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    vst1q_f32(y + 0, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
    vst1q_f32(y + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d));
    vst1q_f32(y + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
    vst1q_f32(y + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d));
}

static void dequantize_row_q4_0(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / FT_QK4_0; i++, y += FT_QK4_0) {
        const float d = f16(x[i].d);
        const uint8x16_t q = vld1q_u8(x[i].qs);
        const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
        const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
        store_scaled_16(y, lo, d);
        store_scaled_16(y + 16, hi, d);
    }
}

/* ---- 32-element weight blocks ---------------------------------------------------------- */

/* 0xff in byte j where bit j of qh (16 bytes: bits 0..15, or 16..31 with
 * byte_off 2) is set. */
static inline uint8x16_t qh_bytes(uint32_t qh, int upper) {
    const uint8x16_t rep = vreinterpretq_u8_u32(vdupq_n_u32(qh));
    static const uint8_t idx_lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t idx_hi[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t b = vqtbl1q_u8(rep, vld1q_u8(upper ? idx_hi : idx_lo));
    return vtstq_u8(b, vld1q_u8(bits));
}

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Each dot: int32 lanes of one block (4), scaled by dx * dy into float
 * lanes; two blocks per iteration into two accumulators. */
#define DOT_32(name, XT, YT, BLOCK, OFFSET)                                                                    \
    static void name(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {         \
        const XT *x = vx;                                                                                      \
        const YT *y = vy;                                                                                      \
        const int64_t nb = n / 32;                                                                             \
        float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);                                        \
        float summs = 0.0f;                                                                                    \
        int64_t i = 0;                                                                                         \
        for (; i + 2 <= nb; i += 2) {                                                                          \
            prefetch_ahead(&x[i], 2 * (int)sizeof(XT));                                                        \
            const int32x4_t p0 = BLOCK(&x[i], &y[i]);                                                          \
            const int32x4_t p1 = BLOCK(&x[i + 1], &y[i + 1]);                                                  \
            acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(p0), f16(x[i].d) * f16(y[i].d));                            \
            acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(p1), f16(x[i + 1].d) * f16(y[i + 1].d));                    \
            if (OFFSET)                                                                                        \
                summs += offset_term(&x[i], &y[i]) + offset_term(&x[i + 1], &y[i + 1]);                        \
        }                                                                                                      \
        if (i < nb) {                                                                                          \
            acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(BLOCK(&x[i], &y[i])), f16(x[i].d) * f16(y[i].d));           \
            if (OFFSET)                                                                                        \
                summs += offset_term(&x[i], &y[i]);                                                            \
        }                                                                                                      \
        *s = vaddvq_f32(vaddq_f32(acc0, acc1)) + summs;                                                        \
    }

/* m * s of a Q4_1/Q5_1 block: the halves at byte 2 of x and of y. */
static inline float offset_term(const void *xb, const void *yb) {
    uint16_t m, s;
    memcpy(&m, (const uint8_t *)xb + 2, 2);
    memcpy(&s, (const uint8_t *)yb + 2, 2);
    return f16(m) * f16(s);
}

static inline int32x4_t block_q8_0(const ft_block_q8_0 *x, const ft_block_q8_0 *y) {
    const int32x4_t p = dot16(vdupq_n_s32(0), vld1q_s8(x->qs), vld1q_s8(y->qs));
    return dot16(p, vld1q_s8(x->qs + 16), vld1q_s8(y->qs + 16));
}

static inline int32x4_t block_q4_0(const ft_block_q4_0 *x, const ft_block_q8_0 *y) {
    const uint8x16_t q = vld1q_u8(x->qs);
    const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
    return dot16(dot16(vdupq_n_s32(0), lo, vld1q_s8(y->qs)), hi, vld1q_s8(y->qs + 16));
}

static inline int32x4_t block_q4_1(const ft_block_q4_1 *x, const ft_block_q8_1 *y) {
    const uint8x16_t q = vld1q_u8(x->qs);
    const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f)));
    const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
    return dot16(dot16(vdupq_n_s32(0), lo, vld1q_s8(y->qs)), hi, vld1q_s8(y->qs + 16));
}

/* Q5_0: q - 16 = nibble - 16 where bit 4 is clear, the nibble where set. */
static inline int32x4_t block_q5_0(const ft_block_q5_0 *x, const ft_block_q8_0 *y) {
    const uint32_t qh = load_u32(x->qh);
    const uint8x16_t q = vld1q_u8(x->qs);
    const uint8x16_t m16 = vdupq_n_u8(0x10);
    const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))),
                                  vreinterpretq_s8_u8(vbicq_u8(m16, qh_bytes(qh, 0))));
    const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)),
                                  vreinterpretq_s8_u8(vbicq_u8(m16, qh_bytes(qh, 1))));
    return dot16(dot16(vdupq_n_s32(0), lo, vld1q_s8(y->qs)), hi, vld1q_s8(y->qs + 16));
}

static inline int32x4_t block_q5_1(const ft_block_q5_1 *x, const ft_block_q8_1 *y) {
    const uint32_t qh = load_u32(x->qh);
    const uint8x16_t q = vld1q_u8(x->qs);
    const uint8x16_t m16 = vdupq_n_u8(0x10);
    const int8x16_t lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0f)), vandq_u8(m16, qh_bytes(qh, 0))));
    const int8x16_t hi = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(m16, qh_bytes(qh, 1))));
    return dot16(dot16(vdupq_n_s32(0), lo, vld1q_s8(y->qs)), hi, vld1q_s8(y->qs + 16));
}

DOT_32(vec_dot_q8_0_q8_0, ft_block_q8_0, ft_block_q8_0, block_q8_0, 0)
DOT_32(vec_dot_q4_0_q8_0, ft_block_q4_0, ft_block_q8_0, block_q4_0, 0)
DOT_32(vec_dot_q4_1_q8_1, ft_block_q4_1, ft_block_q8_1, block_q4_1, 1)
DOT_32(vec_dot_q5_0_q8_0, ft_block_q5_0, ft_block_q8_0, block_q5_0, 0)
DOT_32(vec_dot_q5_1_q8_1, ft_block_q5_1, ft_block_q8_1, block_q5_1, 1)

/* ---- K-quants --------------------------------------------------------------------------- */

static inline uint8x16_t scales16_vec(struct ft_scales16 s) {
    return vcombine_u8(vcreate_u8((uint64_t)s.w[0] | (uint64_t)s.w[1] << 32),
                       vcreate_u8((uint64_t)s.w[2] | (uint64_t)s.w[3] << 32));
}

/* sum over 16 sub-blocks of sc[s] * bsums[s] (sc signed bytes). */
static inline int32_t scale_bsums(int8x16_t sc, const int16_t *bsums) {
    const int16x8_t s0 = vmovl_s8(vget_low_s8(sc)), s1 = vmovl_high_s8(sc);
    const int16x8_t b0 = vld1q_s16(bsums), b1 = vld1q_s16(bsums + 8);
    int32x4_t p = vmull_s16(vget_low_s16(s0), vget_low_s16(b0));
    p = vmlal_high_s16(p, s0, b0);
    p = vmlal_s16(p, vget_low_s16(s1), vget_low_s16(b1));
    p = vmlal_high_s16(p, s1, b1);
    return vaddvq_s32(p);
}

static void vec_dot_q2_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q2_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    const uint8x16_t m3 = vdupq_n_u8(3);
    float32x4_t acc = vdupq_n_f32(0.0f);
    float summ = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        const float d = y[i].d * f16(x[i].d);
        const float dmin = y[i].d * f16(x[i].dmin);
        const uint8x16_t sm = vld1q_u8(x[i].scales);
        summ += dmin * (float)scale_bsums(vreinterpretq_s8_u8(vshrq_n_u8(sm, 4)), y[i].bsums);
        uint8_t sc[16];
        vst1q_u8(sc, vandq_u8(sm, vdupq_n_u8(0x0f)));
        int32x4_t sumi = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            const uint8x16x2_t q = vld1q_u8_x2(x[i].qs + 32 * h);
            const int8_t *q8 = y[i].qs + 128 * h;
            for (int k = 0; k < 4; k++) { /* 32 elements = sub-blocks 8h+2k, 8h+2k+1 */
                const int8x16_t shift = vdupq_n_s8((int8_t)(-2 * k));
                const int8x16_t a = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q.val[0], shift), m3));
                const int8x16_t b = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q.val[1], shift), m3));
                sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), a, vld1q_s8(q8 + 32 * k)), sc[8 * h + 2 * k]);
                sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), b, vld1q_s8(q8 + 32 * k + 16)), sc[8 * h + 2 * k + 1]);
            }
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    *s = vaddvq_f32(acc) - summ;
}

/* Q3_K: u = low2 | hbit << 2 is q + 4; the 4 comes back through bsums. */
static void vec_dot_q3_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q3_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    const uint8x16_t m3 = vdupq_n_u8(3), m4 = vdupq_n_u8(4);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        const float d = y[i].d * f16(x[i].d);
        const int8x16_t scv = vsubq_s8(vreinterpretq_s8_u8(scales16_vec(ft_q3k_scales(x[i].scales))), vdupq_n_s8(32));
        int8_t sc[16];
        vst1q_s8(sc, scv);
        int32x4_t sumi = vsetq_lane_s32(-4 * scale_bsums(scv, y[i].bsums), vdupq_n_s32(0), 0);
        const uint8x16x2_t hm = vld1q_u8_x2(x[i].hmask);
        for (int h = 0; h < 2; h++) {
            const uint8x16x2_t q = vld1q_u8_x2(x[i].qs + 32 * h);
            const int8_t *q8 = y[i].qs + 128 * h;
            for (int k = 0; k < 4; k++) {
                const int8x16_t shift = vdupq_n_s8((int8_t)(-2 * k));
                const int8x16_t hshift = vdupq_n_s8((int8_t)(2 - (4 * h + k))); /* hmask bit -> bit 2 */
                const int8x16_t a = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(vshlq_u8(q.val[0], shift), m3),
                                                                 vandq_u8(vshlq_u8(hm.val[0], hshift), m4)));
                const int8x16_t b = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(vshlq_u8(q.val[1], shift), m3),
                                                                 vandq_u8(vshlq_u8(hm.val[1], hshift), m4)));
                sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), a, vld1q_s8(q8 + 32 * k)), sc[8 * h + 2 * k]);
                sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), b, vld1q_s8(q8 + 32 * k + 16)), sc[8 * h + 2 * k + 1]);
            }
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    *s = vaddvq_f32(acc);
}

/* Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scale and min; qh NULL for
 * Q4_K. Adds d * sum to acc and returns dmin * sum(mn * bsums). */
static inline float dot_k4_block(const uint8_t *restrict packed, uint16_t xd, uint16_t xdmin,
                                 const uint8_t *restrict qs, const uint8_t *restrict qh,
                                 const ft_block_q8_K *restrict y, float32x4_t *acc) {
    const float d = y->d * f16(xd);
    const float dmin = y->d * f16(xdmin);
    const uint8x16_t u = scales16_vec(ft_k4_scales(packed)); /* sc 0..7 | mn 0..7 */
    /* mins: mn[s] * (bsum[2s] + bsum[2s+1]) */
    const int16x8_t bs = vpaddq_s16(vld1q_s16(y->bsums), vld1q_s16(y->bsums + 8));
    const int16x8_t mn = vreinterpretq_s16_u16(vmovl_high_u8(u));
    int32x4_t pm = vmull_s16(vget_low_s16(mn), vget_low_s16(bs));
    pm = vmlal_high_s16(pm, mn, bs);
    uint8_t sc[16];
    vst1q_u8(sc, u);
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    uint8x16x2_t hb = {{vdupq_n_u8(0), vdupq_n_u8(0)}};
    if (qh)
        hb = vld1q_u8_x2(qh);
    int32x4_t sumi = vdupq_n_s32(0);
    for (int j = 0; j < 4; j++) {
        const uint8x16x2_t q = vld1q_u8_x2(qs + 32 * j);
        uint8x16_t l0 = vandq_u8(q.val[0], m4), l1 = vandq_u8(q.val[1], m4);
        uint8x16_t h0 = vshrq_n_u8(q.val[0], 4), h1 = vshrq_n_u8(q.val[1], 4);
        if (qh) { /* bit 2j of qh[l] -> element 64j + l, bit 2j+1 -> 64j + 32 + l */
            const uint8x16_t one = vdupq_n_u8(1), two = vdupq_n_u8(2);
            l0 = vorrq_u8(l0, vshlq_n_u8(vandq_u8(hb.val[0], one), 4));
            l1 = vorrq_u8(l1, vshlq_n_u8(vandq_u8(hb.val[1], one), 4));
            h0 = vorrq_u8(h0, vshlq_n_u8(vandq_u8(hb.val[0], two), 3));
            h1 = vorrq_u8(h1, vshlq_n_u8(vandq_u8(hb.val[1], two), 3));
            hb.val[0] = vshrq_n_u8(hb.val[0], 2);
            hb.val[1] = vshrq_n_u8(hb.val[1], 2);
        }
        const int8x16x4_t q8 = vld1q_s8_x4(y->qs + 64 * j);
        int32x4_t pl = dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(l0), q8.val[0]);
        pl = dot16(pl, vreinterpretq_s8_u8(l1), q8.val[1]);
        int32x4_t ph = dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(h0), q8.val[2]);
        ph = dot16(ph, vreinterpretq_s8_u8(h1), q8.val[3]);
        sumi = vmlaq_n_s32(sumi, pl, sc[2 * j]);
        sumi = vmlaq_n_s32(sumi, ph, sc[2 * j + 1]);
    }
    *acc = vfmaq_n_f32(*acc, vcvtq_f32_s32(sumi), d);
    return dmin * (float)vaddvq_s32(pm);
}

static void vec_dot_q4_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q4_K *x = vx;
    const ft_block_q8_K *y = vy;
    float32x4_t acc = vdupq_n_f32(0.0f);
    float mins = 0.0f;
    for (int64_t i = 0; i < n / FT_QK_K; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        mins += dot_k4_block(x[i].scales, x[i].d, x[i].dmin, x[i].qs, NULL, &y[i], &acc);
    }
    *s = vaddvq_f32(acc) - mins;
}

static void vec_dot_q5_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q5_K *x = vx;
    const ft_block_q8_K *y = vy;
    float32x4_t acc = vdupq_n_f32(0.0f);
    float mins = 0.0f;
    for (int64_t i = 0; i < n / FT_QK_K; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        mins += dot_k4_block(x[i].scales, x[i].d, x[i].dmin, x[i].qs, x[i].qh, &y[i], &acc);
    }
    *s = vaddvq_f32(acc) - mins;
}

/* The 6-bit quants (0..63) of one 128-element half of a Q6_K block, in 8
 * vectors of 16 elements. */
static inline void q6_half(const uint8_t *ql, const uint8_t *qh, int8x16_t q[8]) {
    const uint8x16x4_t l = vld1q_u8_x4(ql);
    const uint8x16x2_t h = vld1q_u8_x2(qh);
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m30 = vdupq_n_u8(0x30);
    for (int t = 0; t < 2; t++) {
        q[0 + t] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l.val[t], m4), vandq_u8(vshlq_n_u8(h.val[t], 4), m30)));
        q[2 + t] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l.val[2 + t], m4), vandq_u8(vshlq_n_u8(h.val[t], 2), m30)));
        q[4 + t] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l.val[t], 4), vandq_u8(h.val[t], m30)));
        q[6 + t] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l.val[2 + t], 4), vandq_u8(vshrq_n_u8(h.val[t], 2), m30)));
    }
}

/* Q6_K: q - 32 with q in 0..63; the 32 comes back through bsums. */
static void vec_dot_q6_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q6_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        const float d = y[i].d * f16(x[i].d);
        const int8x16_t scv = vld1q_s8(x[i].scales);
        int32x4_t sumi = vsetq_lane_s32(-32 * scale_bsums(scv, y[i].bsums), vdupq_n_s32(0), 0);
        for (int h = 0; h < 2; h++) {
            int8x16_t q[8];
            q6_half(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
            const int8x16x4_t ya = vld1q_s8_x4(y[i].qs + 128 * h);
            const int8x16x4_t yb = vld1q_s8_x4(y[i].qs + 128 * h + 64);
            const int8_t *sc = x[i].scales + 8 * h;
            for (int t = 0; t < 4; t++) {
                sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), q[t], ya.val[t]), sc[t]);
                sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), q[4 + t], yb.val[t]), sc[4 + t]);
            }
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    *s = vaddvq_f32(acc);
}

/* (d * sc) * q - (dmin * mn), each product rounded as in the reference. */
static void dequantize_row_q4_K(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q4_K *x = vx;
    for (int64_t i = 0; i < n / FT_QK_K; i++, y += FT_QK_K) {
        const float d = f16(x[i].d), dmin = f16(x[i].dmin);
        const struct ft_scales16 u = ft_k4_scales(x[i].scales);
        for (int j = 0; j < 4; j++) {
            const uint8x16x2_t q = vld1q_u8_x2(x[i].qs + 32 * j);
            for (int half = 0; half < 2; half++) {
                const int sb = 2 * j + half;
                const float d1 = d * ft_scales16_byte(u, sb), m1 = dmin * ft_scales16_byte(u, 8 + sb);
                for (int t = 0; t < 2; t++) {
                    const uint8x16_t v = half ? vshrq_n_u8(q.val[t], 4) : vandq_u8(q.val[t], vdupq_n_u8(0x0f));
                    const uint16x8_t lo = vmovl_u8(vget_low_u8(v)), hi = vmovl_high_u8(v);
                    float *out = y + 32 * sb + 16 * t;
                    const uint32x4_t w[4] = {vmovl_u16(vget_low_u16(lo)), vmovl_high_u16(lo), vmovl_u16(vget_low_u16(hi)),
                                             vmovl_high_u16(hi)};
                    for (int k = 0; k < 4; k++)
                        vst1q_f32(out + 4 * k, vsubq_f32(vmulq_n_f32(vcvtq_f32_u32(w[k]), d1), vdupq_n_f32(m1)));
                }
            }
        }
    }
}

static void dequantize_row_q6_K(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q6_K *x = vx;
    for (int64_t i = 0; i < n / FT_QK_K; i++, y += FT_QK_K) {
        const float d = f16(x[i].d);
        for (int h = 0; h < 2; h++) {
            int8x16_t q[8];
            q6_half(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
            for (int t = 0; t < 8; t++) { /* 16 elements = sub-block 8h + t */
                const int sb = 8 * h + t;
                store_scaled_16(y + 16 * sb, vsubq_s8(q[t], vdupq_n_s8(32)), d * x[i].scales[sb]);
            }
        }
    }
}

/* ---- lookup-table types: IQ4_NL, IQ4_XS, MXFP4 ------------------------------------------- */

static const int8_t k_iq4nl[16] = FT_KVALUES_IQ4NL;
static const int8_t k_mxfp4[16] = FT_KVALUES_MXFP4;

/* Table values of a block's 32 nibbles (tbl), dotted with 32 activations. */
static inline int32x4_t dot_lut32(int8x16_t lut, const uint8_t *qs, const int8_t *y) {
    const uint8x16_t q = vld1q_u8(qs);
    const int8x16_t lo = vqtbl1q_s8(lut, vandq_u8(q, vdupq_n_u8(0x0f)));
    const int8x16_t hi = vqtbl1q_s8(lut, vshrq_n_u8(q, 4));
    return dot16(dot16(vdupq_n_s32(0), lo, vld1q_s8(y)), hi, vld1q_s8(y + 16));
}

static inline int32x4_t block_iq4_nl(const ft_block_iq4_nl *x, const ft_block_q8_0 *y) {
    return dot_lut32(vld1q_s8(k_iq4nl), x->qs, y->qs);
}

DOT_32(vec_dot_iq4_nl_q8_0, ft_block_iq4_nl, ft_block_q8_0, block_iq4_nl, 0)

static void vec_dot_mxfp4_q8_0(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_mxfp4 *x = vx;
    const ft_block_q8_0 *y = vy;
    const int8x16_t lut = vld1q_s8(k_mxfp4);
    const int64_t nb = n / 32;
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        prefetch_ahead(&x[i], 2 * (int)sizeof(x[i]));
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(dot_lut32(lut, x[i].qs, y[i].qs)),
                           ft_e8m0_to_fp32_half(x[i].e) * f16(y[i].d));
        acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(dot_lut32(lut, x[i + 1].qs, y[i + 1].qs)),
                           ft_e8m0_to_fp32_half(x[i + 1].e) * f16(y[i + 1].d));
    }
    if (i < nb)
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(dot_lut32(lut, x[i].qs, y[i].qs)),
                           ft_e8m0_to_fp32_half(x[i].e) * f16(y[i].d));
    *s = vaddvq_f32(vaddq_f32(acc0, acc1));
}

/* IQ4_XS: each sub-block's 4 exact lanes times its signed scale (mla),
 * one FMA per super-block. */
static void vec_dot_iq4_xs_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_iq4_xs *x = vx;
    const ft_block_q8_K *y = vy;
    const int8x16_t lut = vld1q_s8(k_iq4nl);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n / FT_QK_K; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        int32x4_t sumi = vdupq_n_s32(0);
        for (int b = 0; b < FT_QK_K / 32; b++)
            sumi = vmlaq_n_s32(sumi, dot_lut32(lut, x[i].qs + 16 * b, y[i].qs + 32 * b),
                               ft_iq4_xs_scale(&x[i], b) - 32);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(sumi), f16(x[i].d) * y[i].d);
    }
    *s = vaddvq_f32(acc);
}

/* ---- the table ------------------------------------------------------------------------------ */

void FT_NEON_FILL(struct ft_level *l) {
    struct ft_type_info *t = l->types;
    t[FT_TYPE_F32].vec_dot = vec_dot_f32;
    t[FT_TYPE_F16].vec_dot = vec_dot_f16;
    t[FT_TYPE_F16].to_float = f16_to_f32_row;
    t[FT_TYPE_F16].from_float = f32_to_f16_row;
    t[FT_TYPE_F16].from_float_act = f32_to_f16_row;
    t[FT_TYPE_BF16].vec_dot = vec_dot_bf16;
    t[FT_TYPE_BF16].to_float = bf16_to_f32_row;
    t[FT_TYPE_BF16].from_float = f32_to_bf16_row;
    t[FT_TYPE_BF16].from_float_act = f32_to_bf16_row;

    t[FT_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0;
    t[FT_TYPE_Q8_0].from_float = quantize_row_q8_0;
    t[FT_TYPE_Q8_0].from_float_act = quantize_row_q8_0_act;
    t[FT_TYPE_Q8_0].to_float = dequantize_row_q8_0;
    t[FT_TYPE_Q8_1].from_float = quantize_row_q8_1;
    t[FT_TYPE_Q8_1].from_float_act = quantize_row_q8_1_act;
    t[FT_TYPE_Q8_K].from_float = quantize_row_q8_K;
    t[FT_TYPE_Q8_K].from_float_act = quantize_row_q8_K;

    t[FT_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0;
    t[FT_TYPE_Q4_0].to_float = dequantize_row_q4_0;
    t[FT_TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1;
    t[FT_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0;
    t[FT_TYPE_Q5_1].vec_dot = vec_dot_q5_1_q8_1;

    t[FT_TYPE_Q2_K].vec_dot = vec_dot_q2_K_q8_K;
    t[FT_TYPE_Q3_K].vec_dot = vec_dot_q3_K_q8_K;
    t[FT_TYPE_Q4_K].vec_dot = vec_dot_q4_K_q8_K;
    t[FT_TYPE_Q4_K].to_float = dequantize_row_q4_K;
    t[FT_TYPE_Q5_K].vec_dot = vec_dot_q5_K_q8_K;
    t[FT_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K;
    t[FT_TYPE_Q6_K].to_float = dequantize_row_q6_K;

    t[FT_TYPE_IQ4_NL].vec_dot = vec_dot_iq4_nl_q8_0;
    t[FT_TYPE_IQ4_XS].vec_dot = vec_dot_iq4_xs_q8_K;
    t[FT_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0;
}
