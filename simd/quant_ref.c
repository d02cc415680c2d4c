/* Scalar reference quantization: GGUF block formats, bit-compatible with
 * ggml (llama.cpp build 80fb11a, ggml-quants.c and ggml-cpu/quants.c).
 *
 * For each type there are three operations:
 *   quantize   = ggml's quantize_row_*_ref: the bytes llama-quantize writes
 *                without an importance matrix. Same algorithm, same float
 *                operation order, same rounding tricks (nearest_int(),
 *                roundf(), truncating casts), so the bytes are identical.
 *   dequantize = ggml's dequantize_row_*: the same floats.
 *   vec_dot    = the dot product against the activation type (F32, F16,
 *                BF16, Q8_0, Q8_1 or Q8_K) that llama.cpp's x86 CPU backend
 *                computes for a batch of tokens (ggml's AVX-512 build: the
 *                llamafile tinyBLAS, repack GEMM or AVX2 vec_dot kernel the
 *                type goes through): the same integer sums, combined in the
 *                same float order with the same FMAs, so quantized matmuls
 *                give llama.cpp's results bit for bit. Each function says
 *                which kernel it mirrors.
 * Activations are converted with the vec_dot type's from_float_act (types.h):
 * for Q8_0/Q8_1 that is the x86 backend's rounding, not the reference
 * quantizer's.
 * These are the answers the per-ISA kernels in simd/x86, simd/arm are
 * tested against: clarity first, but no per-element indirect calls.
 *
 * Bit-exactness needs IEEE single-precision arithmetic done exactly as
 * written: fused multiply-adds only where fmaf() says so, no other
 * contraction of a*b+c (which -march=native would otherwise allow), no
 * reassociation (never build this file with -ffast-math).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "quant_ref.h"

#include "fp16.h"
#include "reduce_ref.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define GROUP_MAX_EPS 1e-15f /* ggml: a group below this is all zeros */

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int iclamp(int v, int lo, int hi) { return imax(lo, imin(hi, v)); }

/* Round to nearest, ties to even, for |f| <= 2^22: adding 1.5 * 2^23 puts
 * the integer in the low mantissa bits (the FPU rounds). ggml uses exactly
 * this, and its ties-to-even differ from roundf(), so we must too. */
static inline int nearest_int(float f) {
    const float v = f + 12582912.f;
    return (int)(ft_f32_bits(v) & 0x007fffffu) - 0x00400000;
}

/* ======================================================================== */
/* F32: the identity, and the dot of ggml's AVX-512 build (below).         */

void ft_dequantize_row_f32_ref(const void *restrict x, float *restrict y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}

void ft_quantize_row_f32_ref(const float *restrict x, void *restrict y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}

/* Row length a multiple of 16: llamafile's tinyBLAS (ggml's AVX-512 build,
 * every matmul of two or more tokens): 16 lanes, lane l accumulating
 * x[16k + l] * y[16k + l] with FMA, then _mm512_reduce_add_ps. */
static float dot16_fma(int64_t n, const float *x, const float *y) {
    float acc[16] = {0};
    for (int64_t i = 0; i < n; i += 16)
        for (int l = 0; l < 16; l++)
            acc[l] = fmaf(x[i + l], y[i + l], acc[l]);
    return ft_hsum16_ref(acc);
}

/* Otherwise ggml_vec_dot_f32 (AVX-512): four 16-lane FMA accumulators over
 * steps of 64, folded 0+2, 1+3, 0+1, reduced; the tail FMA'd into the float
 * sum (GCC contracts sumf += x*y there). */
static float dot64_ggml_f32(int64_t n, const float *x, const float *y) {
    const int64_t np = n & ~(int64_t)63;
    float sum[4][16] = {{0}};
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++)
                sum[j][l] = fmaf(x[i + 16 * j + l], y[i + 16 * j + l], sum[j][l]);
    for (int l = 0; l < 16; l++) {
        sum[0][l] += sum[2][l];
        sum[1][l] += sum[3][l];
    }
    for (int l = 0; l < 16; l++)
        sum[0][l] += sum[1][l];
    float sumf = ft_hsum16_ref(sum[0]);
    for (int64_t i = np; i < n; i++)
        sumf = fmaf(x[i], y[i], sumf);
    return sumf;
}

/* A batch of tokens (tinyBLAS) when the row length allows it, else
 * ggml_vec_dot_f32 as for a single row. */
void ft_vec_dot_f32_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const float *x = vx, *y = vy;
    *s = n % 16 == 0 ? dot16_fma(n, x, y) : dot64_ggml_f32(n, x, y);
}

void ft_vec_dot_f32_gemv_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    *s = dot64_ggml_f32(n, vx, vy);
}

/* ======================================================================== */
/* F16 / BF16: conversions in simd/fp16.c; the dots of ggml's AVX-512      */
/* build (with AVX512_BF16 for BF16).                                        */

/* ggml_vec_dot_f16 (AVX-512 without FP16 arithmetic): as ggml_vec_dot_f32,
 * but the sum and its tail in double. */
static float dot64_ggml_f16(int64_t n, const uint16_t *x, const uint16_t *y) {
    const int64_t np = n & ~(int64_t)63;
    float sum[4][16] = {{0}};
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++)
                sum[j][l] = fmaf(ft_half_to_float(x[i + 16 * j + l]), ft_half_to_float(y[i + 16 * j + l]), sum[j][l]);
    for (int l = 0; l < 16; l++) {
        sum[0][l] += sum[2][l];
        sum[1][l] += sum[3][l];
    }
    for (int l = 0; l < 16; l++)
        sum[0][l] += sum[1][l];
    double sumf = ft_hsum16_ref(sum[0]);
    for (int64_t i = np; i < n; i++)
        sumf += (double)(ft_half_to_float(x[i]) * ft_half_to_float(y[i]));
    return (float)sumf;
}

/* A batch: tinyBLAS on the fp16 operands converted to f32. */
void ft_vec_dot_f16_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const uint16_t *x = vx, *y = vy;
    if (n % 16 != 0) {
        *s = dot64_ggml_f16(n, x, y);
        return;
    }
    float acc[16] = {0};
    for (int64_t i = 0; i < n; i += 16)
        for (int l = 0; l < 16; l++)
            acc[l] = fmaf(ft_half_to_float(x[i + l]), ft_half_to_float(y[i + l]), acc[l]);
    *s = ft_hsum16_ref(acc);
}

void ft_vec_dot_f16_gemv_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    *s = dot64_ggml_f16(n, vx, vy);
}

/* One lane of vdpbf16ps (AVX512_BF16), as measured on the hardware:
 * acc + x[1]y[1] rounded, then + x[0]y[0] rounded; the bf16 products are
 * exact in f32; denormal inputs and results are flushed to zero. */
static inline float ftz(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v; }
static inline float bf16_daz(uint16_t h) { return (h & 0x7f80u) == 0 ? copysignf(0.0f, ft_bfloat_to_float(h)) : ft_bfloat_to_float(h); }
static inline float dpbf16_lane(float acc, const uint16_t *x, const uint16_t *y) {
    acc = ftz(acc + bf16_daz(x[1]) * bf16_daz(y[1]));
    return ftz(acc + bf16_daz(x[0]) * bf16_daz(y[0]));
}

/* ggml_vec_dot_bf16 (AVX512_BF16): two vdpbf16ps accumulators over steps
 * of 64, each reduced into a double, the tail in double. */
static float dot64_ggml_bf16(int64_t n, const uint16_t *x, const uint16_t *y) {
    float c1[16] = {0}, c2[16] = {0};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int l = 0; l < 16; l++) {
            c1[l] = dpbf16_lane(c1[l], x + i + 2 * l, y + i + 2 * l);
            c2[l] = dpbf16_lane(c2[l], x + i + 32 + 2 * l, y + i + 32 + 2 * l);
        }
    double sumf = 0.0;
    sumf += ft_hsum16_ref(c1);
    sumf += ft_hsum16_ref(c2);
    for (; i < n; i++)
        sumf += (double)(ft_bfloat_to_float(x[i]) * ft_bfloat_to_float(y[i]));
    return (float)sumf;
}

/* A batch: tinyBLAS with vdpbf16ps, 16 lanes of pairs. */
void ft_vec_dot_bf16_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const uint16_t *x = vx, *y = vy;
    if (n % 32 != 0) {
        *s = dot64_ggml_bf16(n, x, y);
        return;
    }
    float acc[16] = {0};
    for (int64_t i = 0; i < n; i += 32)
        for (int l = 0; l < 16; l++)
            acc[l] = dpbf16_lane(acc[l], x + i + 2 * l, y + i + 2 * l);
    *s = ft_hsum16_ref(acc);
}

void ft_vec_dot_bf16_gemv_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    *s = dot64_ggml_bf16(n, vx, vy);
}

/* ======================================================================== */
/* Q8_0: symmetric 8-bit, d = amax / 127, q = roundf(x / d) (ties away from */
/* zero, unlike the K-quants). Also the activation type of Q4_0/Q5_0/Q8_0.  */

void ft_quantize_row_q8_0_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q8_0 *y = vy;
    const int64_t nb = n / FT_QK8_0;
    for (int64_t i = 0; i < nb; i++, x += FT_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < FT_QK8_0; j++)
            amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]); /* ggml's MAX() */
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ft_float_to_half(d);
        for (int j = 0; j < FT_QK8_0; j++)
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void ft_dequantize_row_q8_0_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q8_0 *x = vx;
    const int64_t nb = n / FT_QK8_0;
    for (int64_t i = 0; i < nb; i++, y += FT_QK8_0) {
        const float d = ft_half_to_float(x[i].d);
        for (int j = 0; j < FT_QK8_0; j++)
            y[j] = x[i].qs[j] * d;
    }
}

/* The 8-lane order of ggml's x86 dots of 32-element blocks (vec_dot AVX2
 * and llamafile's tinyBLAS_Q0_AVX): lane l holds the integer products of
 * elements 4l..4l+3 of a block and accumulates d * lane with FMA across
 * blocks; hsum_float_8 at the end. wq: the weight quants as signed values. */
static inline void q32_lanes_fma(float acc[8], const int8_t *restrict wq, const int8_t *restrict aq, float d) {
    for (int l = 0; l < 8; l++) {
        int sumi = 0;
        for (int k = 4 * l; k < 4 * l + 4; k++)
            sumi += wq[k] * aq[k];
        acc[l] = fmaf(d, (float)sumi, acc[l]);
    }
}

void ft_vec_dot_q8_0_q8_0_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q8_0 *x = vx;
    const ft_block_q8_0 *y = vy;
    const int64_t nb = n / FT_QK8_0;
    float acc[8] = {0};
    for (int64_t i = 0; i < nb; i++)
        q32_lanes_fma(acc, x[i].qs, y[i].qs, ft_half_to_float(x[i].d) * ft_half_to_float(y[i].d));
    *s = ft_hsum8_ref(acc);
}

/* ======================================================================== */
/* Q8_1: Q8_0 plus s = d * sum(q), for the offset term of Q4_1/Q5_1 dots.   */
/* Activation-only; ggml has no dequantizer for it, ours is x = d * q.      */

void ft_quantize_row_q8_1_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q8_1 *y = vy;
    const int64_t nb = n / FT_QK8_1;
    for (int64_t i = 0; i < nb; i++, x += FT_QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < FT_QK8_1; j++)
            amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]); /* ggml's MAX() */
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ft_float_to_half(d);
        int sum = 0;
        for (int j = 0; j < FT_QK8_1; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = ft_float_to_half(sum * d);
    }
}

/* Activations in Q8_0 / Q8_1 as llama.cpp's x86 CPU backend makes them
 * (the SIMD quantize_row_q8_0/q8_1 of ggml-cpu/arch/x86/quants.c, and the
 * repack quantize_mat_q8_0 that mirrors them): the multiplier is
 * 127 / amax, not 1 / d, and q is rounded to nearest even, not away from
 * zero. The two differ in the last bit of the multiplier in about a
 * quarter of the blocks, so a few activations in ten thousand land on the
 * neighbouring integer -- and every such flip moves the matmul outputs of
 * that token. Weights keep the reference quantizer above (llama-quantize's
 * bytes). */
static float quantize_block_q8_act(const float *restrict x, int8_t *restrict qs, int *restrict sum) {
    float amax = 0.0f;
    for (int j = 0; j < FT_QK8_0; j++)
        amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    int s = 0;
    for (int j = 0; j < FT_QK8_0; j++) {
        qs[j] = (int8_t)nearbyintf(x[j] * id); /* ties to even (default rounding mode) */
        s += qs[j];
    }
    *sum = s;
    return amax / 127.f;
}

void ft_quantize_row_q8_0_act_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / FT_QK8_0; i++) {
        int sum;
        y[i].d = ft_float_to_half(quantize_block_q8_act(x + i * FT_QK8_0, y[i].qs, &sum));
    }
}

void ft_quantize_row_q8_1_act_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / FT_QK8_1; i++) {
        int sum;
        const float d = quantize_block_q8_act(x + i * FT_QK8_1, y[i].qs, &sum);
        y[i].d = ft_float_to_half(d);
        y[i].s = ft_float_to_half(d * (float)sum);
    }
}

void ft_dequantize_row_q8_1_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q8_1 *x = vx;
    const int64_t nb = n / FT_QK8_1;
    for (int64_t i = 0; i < nb; i++, y += FT_QK8_1) {
        const float d = ft_half_to_float(x[i].d);
        for (int j = 0; j < FT_QK8_1; j++)
            y[j] = x[i].qs[j] * d;
    }
}

/* ======================================================================== */
/* Q4_0: symmetric 4-bit. d = max / -8 where max is the signed value of     */
/* largest magnitude, so that value maps exactly to q = 0 (-8 * d) and the  */
/* full range -8..7 is used; q = trunc(x / d + 8.5) capped at 15.           */

void ft_quantize_row_q4_0_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q4_0 *y = vy;
    const int64_t nb = n / FT_QK4_0;
    for (int64_t i = 0; i < nb; i++, x += FT_QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < FT_QK4_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ft_float_to_half(d);
        for (int j = 0; j < FT_QK4_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[j + FT_QK4_0 / 2] * id;
            const uint8_t q0 = (uint8_t)imin(15, (int8_t)(x0 + 8.5f));
            const uint8_t q1 = (uint8_t)imin(15, (int8_t)(x1 + 8.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void ft_dequantize_row_q4_0_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q4_0 *x = vx;
    const int64_t nb = n / FT_QK4_0;
    for (int64_t i = 0; i < nb; i++, y += FT_QK4_0) {
        const float d = ft_half_to_float(x[i].d);
        for (int j = 0; j < FT_QK4_0 / 2; j++) {
            y[j] = ((x[i].qs[j] & 0x0f) - 8) * d;
            y[j + FT_QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ggml's AVX2/AVX-512 build repacks Q4_0 weights with a multiple of 8 rows
 * (repack.cpp, q4_0_8x8) and its GEMM/GEMV add each block's integer dot
 * with one FMA: acc = fma((float)sumi, dx * dy, acc). */
void ft_vec_dot_q4_0_q8_0_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q4_0 *x = vx;
    const ft_block_q8_0 *y = vy;
    const int64_t nb = n / FT_QK8_0;
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int sumi = 0;
        for (int j = 0; j < FT_QK8_0 / 2; j++) {
            sumi += ((x[i].qs[j] & 0x0f) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + FT_QK8_0 / 2];
        }
        acc = fmaf((float)sumi, ft_half_to_float(x[i].d) * ft_half_to_float(y[i].d), acc);
    }
    *s = acc;
}

/* ======================================================================== */
/* Q4_1: asymmetric 4-bit, m = min, d = (max - min) / 15,                   */
/* q = trunc((x - m) / d + 0.5) capped at 15.                               */

void ft_quantize_row_q4_1_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q4_1 *y = vy;
    const int64_t nb = n / FT_QK4_1;
    for (int64_t i = 0; i < nb; i++, x += FT_QK4_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < FT_QK4_1; j++) {
            if (x[j] < min)
                min = x[j];
            if (x[j] > max)
                max = x[j];
        }
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ft_float_to_half(d);
        y[i].m = ft_float_to_half(min);
        for (int j = 0; j < FT_QK4_1 / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[j + FT_QK4_1 / 2] - min) * id;
            const uint8_t q0 = (uint8_t)imin(15, (int8_t)(x0 + 0.5f));
            const uint8_t q1 = (uint8_t)imin(15, (int8_t)(x1 + 0.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void ft_dequantize_row_q4_1_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q4_1 *x = vx;
    const int64_t nb = n / FT_QK4_1;
    for (int64_t i = 0; i < nb; i++, y += FT_QK4_1) {
        const float d = ft_half_to_float(x[i].d);
        const float m = ft_half_to_float(x[i].m);
        for (int j = 0; j < FT_QK4_1 / 2; j++) {
            y[j] = (x[i].qs[j] & 0x0f) * d + m;
            y[j + FT_QK4_1 / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* ggml_vec_dot_q4_1_q8_1 (AVX2): the 8-lane order for dx dy sum(qx qy),
 * and the offsets m * s summed with FMA in a float of their own. */
void ft_vec_dot_q4_1_q8_1_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q4_1 *x = vx;
    const ft_block_q8_1 *y = vy;
    const int64_t nb = n / FT_QK8_1;
    float acc[8] = {0};
    float summs = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        summs = fmaf(ft_half_to_float(x[i].m), ft_half_to_float(y[i].s), summs);
        int8_t w[FT_QK8_1];
        for (int j = 0; j < FT_QK8_1 / 2; j++) {
            w[j] = (int8_t)(x[i].qs[j] & 0x0f);
            w[j + FT_QK8_1 / 2] = (int8_t)(x[i].qs[j] >> 4);
        }
        q32_lanes_fma(acc, w, y[i].qs, ft_half_to_float(x[i].d) * ft_half_to_float(y[i].d));
    }
    *s = ft_hsum8_ref(acc) + summs;
}

/* ======================================================================== */
/* Q5_0 / Q5_1: Q4_0 / Q4_1 with one more bit per quant, kept in qh.        */

static inline uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static inline void store_qh(uint8_t qh[4], uint32_t v) {
    qh[0] = (uint8_t)v;
    qh[1] = (uint8_t)(v >> 8);
    qh[2] = (uint8_t)(v >> 16);
    qh[3] = (uint8_t)(v >> 24);
}

/* q[j] and q[j+16] of a Q5 block: 4 low bits from qs, bit 4 from qh. */
static inline int q5_lo(const uint8_t *qs, uint32_t qh, int j) {
    return (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
}
static inline int q5_hi(const uint8_t *qs, uint32_t qh, int j) {
    return (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
}

void ft_quantize_row_q5_0_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q5_0 *y = vy;
    const int64_t nb = n / FT_QK5_0;
    for (int64_t i = 0; i < nb; i++, x += FT_QK5_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < FT_QK5_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ft_float_to_half(d);
        uint32_t qh = 0;
        for (int j = 0; j < FT_QK5_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[j + FT_QK5_0 / 2] * id;
            const uint8_t q0 = (uint8_t)imin(31, (int8_t)(x0 + 16.5f));
            const uint8_t q1 = (uint8_t)imin(31, (int8_t)(x1 + 16.5f));
            y[i].qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + FT_QK5_0 / 2);
        }
        store_qh(y[i].qh, qh);
    }
}

void ft_dequantize_row_q5_0_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q5_0 *x = vx;
    const int64_t nb = n / FT_QK5_0;
    for (int64_t i = 0; i < nb; i++, y += FT_QK5_0) {
        const float d = ft_half_to_float(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < FT_QK5_0 / 2; j++) {
            y[j] = (q5_lo(x[i].qs, qh, j) - 16) * d;
            y[j + FT_QK5_0 / 2] = (q5_hi(x[i].qs, qh, j) - 16) * d;
        }
    }
}

/* tinyBLAS_Q0_AVX and ggml_vec_dot_q5_0_q8_0 (AVX2): the 8-lane order. */
void ft_vec_dot_q5_0_q8_0_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q5_0 *x = vx;
    const ft_block_q8_0 *y = vy;
    const int64_t nb = n / FT_QK8_0;
    float acc[8] = {0};
    for (int64_t i = 0; i < nb; i++) {
        const uint32_t qh = load_qh(x[i].qh);
        int8_t w[FT_QK8_0];
        for (int j = 0; j < FT_QK8_0 / 2; j++) {
            w[j] = (int8_t)(q5_lo(x[i].qs, qh, j) - 16);
            w[j + FT_QK8_0 / 2] = (int8_t)(q5_hi(x[i].qs, qh, j) - 16);
        }
        q32_lanes_fma(acc, w, y[i].qs, ft_half_to_float(x[i].d) * ft_half_to_float(y[i].d));
    }
    *s = ft_hsum8_ref(acc);
}

void ft_quantize_row_q5_1_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q5_1 *y = vy;
    const int64_t nb = n / FT_QK5_1;
    for (int64_t i = 0; i < nb; i++, x += FT_QK5_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < FT_QK5_1; j++) {
            if (x[j] < min)
                min = x[j];
            if (x[j] > max)
                max = x[j];
        }
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ft_float_to_half(d);
        y[i].m = ft_float_to_half(min);
        uint32_t qh = 0;
        for (int j = 0; j < FT_QK5_1 / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[j + FT_QK5_1 / 2] - min) * id;
            /* no cap at 31 here, as in ggml: (max - min) * id + 0.5 < 32 */
            const uint8_t q0 = (uint8_t)(x0 + 0.5f);
            const uint8_t q1 = (uint8_t)(x1 + 0.5f);
            y[i].qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= (uint32_t)((q0 & 0x10u) >> 4) << j;
            qh |= (uint32_t)((q1 & 0x10u) >> 4) << (j + FT_QK5_1 / 2);
        }
        store_qh(y[i].qh, qh);
    }
}

void ft_dequantize_row_q5_1_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q5_1 *x = vx;
    const int64_t nb = n / FT_QK5_1;
    for (int64_t i = 0; i < nb; i++, y += FT_QK5_1) {
        const float d = ft_half_to_float(x[i].d);
        const float m = ft_half_to_float(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < FT_QK5_1 / 2; j++) {
            y[j] = q5_lo(x[i].qs, qh, j) * d + m;
            y[j + FT_QK5_1 / 2] = q5_hi(x[i].qs, qh, j) * d + m;
        }
    }
}

/* ggml_vec_dot_q5_1_q8_1 (AVX2): as Q4_1. */
void ft_vec_dot_q5_1_q8_1_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q5_1 *x = vx;
    const ft_block_q8_1 *y = vy;
    const int64_t nb = n / FT_QK8_1;
    float acc[8] = {0};
    float summs = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        summs = fmaf(ft_half_to_float(x[i].m), ft_half_to_float(y[i].s), summs);
        const uint32_t qh = load_qh(x[i].qh);
        int8_t w[FT_QK8_1];
        for (int j = 0; j < FT_QK8_1 / 2; j++) {
            w[j] = (int8_t)q5_lo(x[i].qs, qh, j);
            w[j + FT_QK8_1 / 2] = (int8_t)q5_hi(x[i].qs, qh, j);
        }
        q32_lanes_fma(acc, w, y[i].qs, ft_half_to_float(x[i].d) * ft_half_to_float(y[i].d));
    }
    *s = ft_hsum8_ref(acc) + summs;
}

/* ======================================================================== */
/* K-quant helpers: ggml's scale searches. Each returns the float scale of  */
/* one sub-block and its quants L; the caller then quantizes those scales   */
/* to 4, 6 or 8 bits and re-quantizes the values against the rounded scale. */

/* Symmetric, for Q6_K (ggml make_qx_quants with rmse_type 1, no imatrix):
 * start from the scale that maps the largest-magnitude value to -nmax, then
 * try 18 nearby scales and keep the one minimising the x^2-weighted squared
 * error, using the closed-form optimum scale sum(w x l) / sum(w l^2).
 * L[i] = l + nmax with l in -nmax..nmax-1. */
static float make_qx_quants(int n, int nmax, const float *restrict x, int8_t *restrict L) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = iclamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = iclamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + iclamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Symmetric, for Q3_K (ggml make_q3_quants with do_rmse): start as above,
 * then up to 5 passes of coordinate descent, moving one quant at a time to
 * its best level if that raises (sum w x l)^2 / sum w l^2 (w = x^2).
 * L[i] = l + nmax. */
static float make_q3_quants(int n, int nmax, const float *restrict x, int8_t *restrict L) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = iclamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int new_l = iclamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric, for Q2_K/Q4_K/Q5_K (ggml make_qkx2_quants): x ~ scale*l - min
 * with l in 0..nmax and min >= 0 returned in *the_min. Tries nstep+1 scales
 * around nmax / (max - min), each with the least-squares (scale, min) for
 * its rounding, keeping the lowest weighted error (squared, or absolute
 * with use_mad). Laux is scratch of n bytes. */
static float make_qkx2_quants(int n, int nmax, const float *restrict x, const float *restrict weights,
                              uint8_t *restrict L, float *restrict the_min, uint8_t *restrict Laux,
                              float rmin, float rdelta, int nstep, int use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)iclamp(l, 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = iclamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0.0f;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (layout in
 * quant_ref.h). */
static inline void get_scale_min_k4(int j, const uint8_t *restrict q, uint8_t *restrict sc, uint8_t *restrict mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Pack 2-bit values L[0..255] (each 0..3) as Q2_K/Q3_K qs. */
static void pack_2bit(const uint8_t *restrict L, uint8_t *restrict qs) {
    for (int j = 0; j < FT_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* The 2-bit quant of element i in a Q2_K/Q3_K qs array (layout in quant_ref.h). */
static inline int q2_at(const uint8_t *qs, int i) {
    return (qs[(i / 128) * 32 + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

/* The 16 signed 6-bit scales of a Q3_K block, minus 32. */
static void q3_K_scales(const uint8_t *restrict packed, int *restrict sc) {
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? packed[j] & 0x0f : packed[j - 8] >> 4;
        const int hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (lo | (hi << 4)) - 32;
    }
}

/* The eight 6-bit scales and mins of a Q4_K/Q5_K block. */
static void k4_scales(const uint8_t *restrict packed, int *restrict sc, int *restrict mn) {
    for (int j = 0; j < 8; j++) {
        uint8_t s, m;
        get_scale_min_k4(j, packed, &s, &m);
        sc[j] = s;
        mn[j] = m;
    }
}

/* The lane split of ggml's AVX2 K-quant dots (Q3_K, Q5_K, Q6_K): the
 * integer products scale * w[i] * a[i] of a super-block go to 8 int32
 * lanes by (i % 32) / 4 (maddubs + madd over 32-byte chunks); each lane is
 * then added as d * lane with FMA into 8 float sums across super-blocks,
 * and hsum_float_8 adds those at the end. */
static inline void lanes_add(int32_t lanes[8], const int8_t *restrict w, const int8_t *restrict a,
                             const int *restrict scale, int group) {
    for (int i = 0; i < FT_QK_K; i++)
        lanes[(i % 32) / 4] += scale[i / group] * (w[i] * a[i]);
}

static inline void lanes_fma(float acc[8], const int32_t lanes[8], float d) {
    for (int l = 0; l < 8; l++)
        acc[l] = fmaf(d, (float)lanes[l], acc[l]);
}

/* ======================================================================== */
/* Q8_K: activations for the K-quants. Symmetric, q = nearest_int(-127/max  */
/* * x) (ties to even), with per-16 sums for the mins. d is a float.        */

void ft_quantize_row_q8_K_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    for (int64_t i = 0; i < nb; i++, x += FT_QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < FT_QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            /* ggml leaves bsums stale here; zero is the sane value */
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        /* -127, not -128: ggml changed it so SIMD kernels can negate */
        const float iscale = -127.f / max;
        for (int j = 0; j < FT_QK_K; j++)
            y[i].qs[j] = (int8_t)imin(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < FT_QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void ft_dequantize_row_q8_K_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q8_K *x = vx;
    const int64_t nb = n / FT_QK_K;
    for (int64_t i = 0; i < nb; i++, y += FT_QK_K)
        for (int j = 0; j < FT_QK_K; j++)
            y[j] = x[i].d * x[i].qs[j];
}

/* ======================================================================== */
/* Q2_K: 2-bit asymmetric; per 16 elements a 4-bit scale and 4-bit min,    */
/* searched with |x| weights and absolute error.                            */

void ft_quantize_row_q2_K_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q2_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    const float q4scale = 15.f;
    uint8_t L[FT_QK_K];
    uint8_t Laux[16];
    float weights[16];
    float mins[FT_QK_K / 16];
    float scales[FT_QK_K / 16];

    for (int64_t i = 0; i < nb; i++, x += FT_QK_K) {
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < FT_QK_K / 16; j++) {
            for (int l = 0; l < 16; l++)
                weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }

        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < FT_QK_K / 16; j++)
                y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = ft_float_to_half(max_scale / q4scale);
        } else {
            memset(y[i].scales, 0, sizeof(y[i].scales));
            y[i].d = ft_float_to_half(0.0f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < FT_QK_K / 16; j++)
                y[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = ft_float_to_half(max_min / q4scale);
        } else {
            y[i].dmin = ft_float_to_half(0.0f);
        }

        /* re-quantize against the rounded scales and mins */
        for (int j = 0; j < FT_QK_K / 16; j++) {
            const float d = ft_half_to_float(y[i].d) * (y[i].scales[j] & 0x0f);
            if (d == 0.0f)
                continue;
            const float dm = ft_half_to_float(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)iclamp(nearest_int((x[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

void ft_dequantize_row_q2_K_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q2_K *x = vx;
    const int64_t nb = n / FT_QK_K;
    for (int64_t i = 0; i < nb; i++, y += FT_QK_K) {
        const float d = ft_half_to_float(x[i].d);
        const float dmin = ft_half_to_float(x[i].dmin);
        for (int s = 0; s < 16; s++) {
            const float dl = d * (x[i].scales[s] & 0x0f);
            const float ml = dmin * (x[i].scales[s] >> 4);
            for (int l = 0; l < 16; l++)
                y[16 * s + l] = dl * q2_at(x[i].qs, 16 * s + l) - ml;
        }
    }
}

/* ggml's AVX-512 build repacks Q2_K weights with a multiple of 8 rows
 * (repack.cpp, q2_K_8x8). Its GEMM adds, per half super-block (128
 * elements), the integer sum of scale * q2 * q8 with one FMA into acc and
 * the integer sum of min * bsum with one FMA into acc_min, and returns
 * acc - acc_min. */
void ft_vec_dot_q2_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q2_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const float dall = ft_half_to_float(x[i].d) * y[i].d;
        const float dmin = ft_half_to_float(x[i].dmin) * y[i].d;
        for (int h = 0; h < 2; h++) {
            int isum = 0, imin = 0;
            for (int j = 8 * h; j < 8 * h + 8; j++) {
                int isuml = 0;
                for (int l = 0; l < 16; l++)
                    isuml += y[i].qs[16 * j + l] * q2_at(x[i].qs, 16 * j + l);
                isum += (x[i].scales[j] & 0x0f) * isuml;
                imin += (x[i].scales[j] >> 4) * y[i].bsums[j];
            }
            acc = fmaf((float)isum, dall, acc);
            acc_min = fmaf((float)imin, dmin, acc_min);
        }
    }
    *s = acc - acc_min;
}

/* A single row: the repack GEMV adds each super-block's two integer sums
 * with one FMA each. */
void ft_vec_dot_q2_K_q8_K_gemv_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q2_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int isum = 0, imin = 0;
        for (int j = 0; j < 16; j++) {
            int isuml = 0;
            for (int l = 0; l < 16; l++)
                isuml += y[i].qs[16 * j + l] * q2_at(x[i].qs, 16 * j + l);
            isum += (x[i].scales[j] & 0x0f) * isuml;
            imin += (x[i].scales[j] >> 4) * y[i].bsums[j];
        }
        acc = fmaf((float)isum, ft_half_to_float(x[i].d) * y[i].d, acc);
        acc_min = fmaf((float)imin, ft_half_to_float(x[i].dmin) * y[i].d, acc_min);
    }
    *s = acc - acc_min;
}

/* ======================================================================== */
/* Q3_K: 3-bit symmetric; per 16 elements a signed 6-bit scale.             */

void ft_quantize_row_q3_K_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q3_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    int8_t L[FT_QK_K];
    float scales[FT_QK_K / 16];

    for (int64_t i = 0; i < nb; i++, x += FT_QK_K) {
        float max_scale = 0.0f, amax = 0.0f;
        for (int j = 0; j < FT_QK_K / 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            const float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }

        memset(y[i].scales, 0, sizeof(y[i].scales));
        if (max_scale != 0.0f) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < FT_QK_K / 16; j++) {
                const int l = iclamp((int8_t)nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8)
                    y[i].scales[j] = (uint8_t)(l & 0x0f);
                else
                    y[i].scales[j - 8] |= (uint8_t)((l & 0x0f) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = ft_float_to_half(1 / iscale);
        } else {
            y[i].d = ft_float_to_half(0.0f);
        }

        /* re-quantize against the rounded scales */
        int sc[16];
        q3_K_scales(y[i].scales, sc);
        for (int j = 0; j < FT_QK_K / 16; j++) {
            const float d = ft_half_to_float(y[i].d) * sc[j];
            if (d == 0.0f)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(iclamp(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }

        /* high bit of element j goes to bit j/32 of hmask[j%32] */
        memset(y[i].hmask, 0, sizeof(y[i].hmask));
        uint8_t low[FT_QK_K];
        for (int j = 0; j < FT_QK_K; j++) {
            int l = L[j];
            if (l > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
                l -= 4;
            }
            low[j] = (uint8_t)l;
        }
        pack_2bit(low, y[i].qs);
    }
}

/* The signed 3-bit quant of element i: low 2 bits, minus 4 unless the
 * hmask bit is set. */
static inline int q3_at(const ft_block_q3_K *b, int i) {
    return q2_at(b->qs, i) - ((b->hmask[i % 32] >> (i / 32)) & 1 ? 0 : 4);
}

void ft_dequantize_row_q3_K_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q3_K *x = vx;
    const int64_t nb = n / FT_QK_K;
    for (int64_t i = 0; i < nb; i++, y += FT_QK_K) {
        const float d_all = ft_half_to_float(x[i].d);
        int sc[16];
        q3_K_scales(x[i].scales, sc);
        for (int s = 0; s < 16; s++) {
            const float dl = d_all * sc[s];
            for (int l = 0; l < 16; l++)
                y[16 * s + l] = dl * q3_at(&x[i], 16 * s + l);
        }
    }
}

/* ggml_vec_dot_q3_K_q8_K (AVX2): the K-quant lane order. */
void ft_vec_dot_q3_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q3_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    float acc[8] = {0};
    for (int64_t i = 0; i < nb; i++) {
        int8_t a[FT_QK_K];
        for (int j = 0; j < FT_QK_K; j++)
            a[j] = (int8_t)q3_at(&x[i], j);
        int sc[16];
        q3_K_scales(x[i].scales, sc);
        int32_t lanes[8] = {0};
        lanes_add(lanes, a, y[i].qs, sc, 16);
        lanes_fma(acc, lanes, y[i].d * ft_half_to_float(x[i].d));
    }
    *s = ft_hsum8_ref(acc);
}

/* ======================================================================== */
/* Q4_K / Q5_K: 4- and 5-bit asymmetric; per 32 elements a 6-bit scale and  */
/* 6-bit min, searched with weights av|x| + |x| and squared error.          */

/* Shared by Q4_K and Q5_K: search the 8 sub-blocks, pack the 6-bit scales
 * and mins into b_scales, set d/dmin, and re-quantize L (0..nmax). */
static void quantize_k4_superblock(const float *restrict x, int nmax, float rmin, int nstep, uint8_t *restrict L,
                                   uint8_t *restrict b_scales, uint16_t *restrict b_d, uint16_t *restrict b_dmin) {
    uint8_t Laux[32];
    float weights[32];
    float mins[FT_QK_K / 32];
    float scales[FT_QK_K / 32];
    float max_scale = 0.0f, max_min = 0.0f;

    for (int j = 0; j < FT_QK_K / 32; j++) {
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }

    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.0f;
    for (int j = 0; j < FT_QK_K / 32; j++) {
        /* ggml truncates to uint8_t before capping at 63 */
        const uint8_t ls = (uint8_t)imin(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        const uint8_t lm = (uint8_t)imin(63, (uint8_t)nearest_int(inv_min * mins[j]));
        if (j < 4) {
            b_scales[j] = ls;
            b_scales[j + 4] = lm;
        } else {
            b_scales[j + 4] = (uint8_t)((ls & 0x0f) | ((lm & 0x0f) << 4));
            b_scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            b_scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *b_d = ft_float_to_half(max_scale / 63.f);
    *b_dmin = ft_float_to_half(max_min / 63.f);

    for (int j = 0; j < FT_QK_K / 32; j++) {
        uint8_t sc, m;
        get_scale_min_k4(j, b_scales, &sc, &m);
        const float d = ft_half_to_float(*b_d) * sc;
        if (d == 0.0f)
            continue;
        const float dm = ft_half_to_float(*b_dmin) * m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)iclamp(nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void ft_quantize_row_q4_K_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q4_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    uint8_t L[FT_QK_K];
    for (int64_t i = 0; i < nb; i++, x += FT_QK_K) {
        quantize_k4_superblock(x, 15, -1.0f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

/* The 4-bit quant of element i of a Q4_K/Q5_K qs array. */
static inline int q4k_at(const uint8_t *qs, int i) {
    const uint8_t b = qs[(i / 64) * 32 + i % 32];
    return (i % 64) < 32 ? (b & 0x0f) : (b >> 4);
}

void ft_dequantize_row_q4_K_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q4_K *x = vx;
    const int64_t nb = n / FT_QK_K;
    for (int64_t i = 0; i < nb; i++, y += FT_QK_K) {
        const float d = ft_half_to_float(x[i].d);
        const float min = ft_half_to_float(x[i].dmin);
        int sc[8], mn[8];
        k4_scales(x[i].scales, sc, mn);
        for (int s = 0; s < 8; s++) {
            const float d1 = d * sc[s];
            const float m1 = min * mn[s];
            for (int l = 0; l < 32; l++)
                y[32 * s + l] = d1 * q4k_at(x[i].qs, 32 * s + l) - m1;
        }
    }
}


/* ggml's AVX2/AVX-512 build repacks Q4_K weights with a multiple of 8 rows
 * (repack.cpp, q4_K_8x8). Its GEMM adds, per pair of sub-blocks (64
 * elements), the integer sum of scale * q4 * q8 with one FMA into acc and
 * min * bsum with one FMA into acc_min, and returns acc - acc_min. */
void ft_vec_dot_q4_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q4_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int sc[8], mn[8];
        k4_scales(x[i].scales, sc, mn);
        const float d = ft_half_to_float(x[i].d) * y[i].d;
        const float dmin = ft_half_to_float(x[i].dmin) * y[i].d;
        for (int p = 0; p < 4; p++) {
            int isum = 0, imin = 0;
            for (int j = 2 * p; j < 2 * p + 2; j++) {
                int isub = 0;
                for (int l = 0; l < 32; l++)
                    isub += q4k_at(x[i].qs, 32 * j + l) * y[i].qs[32 * j + l];
                isum += sc[j] * isub;
                imin += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
            }
            acc = fmaf((float)isum, d, acc);
            acc_min = fmaf((float)imin, dmin, acc_min);
        }
    }
    *s = acc - acc_min;
}

/* A single row: the repack GEMV adds each super-block's two integer sums
 * with one FMA each. */
void ft_vec_dot_q4_K_q8_K_gemv_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q4_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int sc[8], mn[8];
        k4_scales(x[i].scales, sc, mn);
        int isum = 0, imin = 0;
        for (int j = 0; j < 8; j++) {
            int isub = 0;
            for (int l = 0; l < 32; l++)
                isub += q4k_at(x[i].qs, 32 * j + l) * y[i].qs[32 * j + l];
            isum += sc[j] * isub;
            imin += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        acc = fmaf((float)isum, ft_half_to_float(x[i].d) * y[i].d, acc);
        acc_min = fmaf((float)imin, ft_half_to_float(x[i].dmin) * y[i].d, acc_min);
    }
    *s = acc - acc_min;
}

void ft_quantize_row_q5_K_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q5_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    uint8_t L[FT_QK_K];
    for (int64_t i = 0; i < nb; i++, x += FT_QK_K) {
        quantize_k4_superblock(x, 31, -0.5f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
                if (l1 > 15) {
                    l1 -= 16;
                    y[i].qh[l] |= (uint8_t)(1u << (2 * c));
                }
                if (l2 > 15) {
                    l2 -= 16;
                    y[i].qh[l] |= (uint8_t)(2u << (2 * c));
                }
                y[i].qs[32 * c + l] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

static inline int q5k_at(const ft_block_q5_K *b, int i) {
    return q4k_at(b->qs, i) | (((b->qh[i % 32] >> (i / 32)) & 1) << 4);
}

void ft_dequantize_row_q5_K_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q5_K *x = vx;
    const int64_t nb = n / FT_QK_K;
    for (int64_t i = 0; i < nb; i++, y += FT_QK_K) {
        const float d = ft_half_to_float(x[i].d);
        const float min = ft_half_to_float(x[i].dmin);
        int sc[8], mn[8];
        k4_scales(x[i].scales, sc, mn);
        for (int s = 0; s < 8; s++) {
            const float d1 = d * sc[s];
            const float m1 = min * mn[s];
            for (int l = 0; l < 32; l++)
                y[32 * s + l] = d1 * q5k_at(&x[i], 32 * s + l) - m1;
        }
    }
}

/* ggml_vec_dot_q5_K_q8_K (AVX2): the K-quant lane order, and the mins as
 * -dy dmin * sum(min * bsum) FMA'd into a float of their own. */
void ft_vec_dot_q5_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q5_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    float acc[8] = {0};
    float summs = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int sc[8], mn[8];
        k4_scales(x[i].scales, sc, mn);
        int imin = 0;
        for (int j = 0; j < 8; j++)
            imin += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        summs = fmaf(-y[i].d * ft_half_to_float(x[i].dmin), (float)imin, summs);
        int8_t w[FT_QK_K];
        for (int j = 0; j < FT_QK_K; j++)
            w[j] = (int8_t)q5k_at(&x[i], j);
        int32_t lanes[8] = {0};
        lanes_add(lanes, w, y[i].qs, sc, 32);
        lanes_fma(acc, lanes, y[i].d * ft_half_to_float(x[i].d));
    }
    *s = ft_hsum8_ref(acc) + summs;
}

/* ======================================================================== */
/* Q6_K: 6-bit symmetric; per 16 elements a signed 8-bit scale.             */

void ft_quantize_row_q6_K_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q6_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    int8_t L[FT_QK_K];
    float scales[FT_QK_K / 16];

    for (int64_t i = 0; i < nb; i++, x += FT_QK_K) {
        float max_scale = 0.0f, max_abs_scale = 0.0f;
        for (int ib = 0; ib < FT_QK_K / 16; ib++) {
            scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            const float abs_scale = fabsf(scales[ib]);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }

        const float iscale = -128.f / max_scale;
        y[i].d = ft_float_to_half(1 / iscale);
        for (int ib = 0; ib < FT_QK_K / 16; ib++)
            y[i].scales[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));

        /* re-quantize against the rounded scales */
        for (int j = 0; j < FT_QK_K / 16; j++) {
            const float d = ft_half_to_float(y[i].d) * y[i].scales[j];
            if (d == 0.0f)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(iclamp(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
        }

        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = y[i].ql + 64 * h;
            uint8_t *qh = y[i].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0x0f) | ((Lh[l + 64] & 0x0f) << 4));
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0x0f) | ((Lh[l + 96] & 0x0f) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                  ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

/* The signed 6-bit quant (q - 32) of element i of a Q6_K block. */
static inline int q6_at(const ft_block_q6_K *b, int i) {
    const int h = i / 128, r = i % 128, l = r % 32, k = r / 32; /* k: which of 4 */
    const uint8_t lo = b->ql[64 * h + l + 32 * (k & 1)];
    const int low = (k & 2) ? (lo >> 4) : (lo & 0x0f);
    const int high = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return (low | (high << 4)) - 32;
}

void ft_dequantize_row_q6_K_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q6_K *x = vx;
    const int64_t nb = n / FT_QK_K;
    for (int64_t i = 0; i < nb; i++, y += FT_QK_K) {
        const float d = ft_half_to_float(x[i].d);
        for (int j = 0; j < FT_QK_K; j++)
            y[j] = d * x[i].scales[j / 16] * q6_at(&x[i], j);
    }
}

/* ggml_vec_dot_q6_K_q8_K (AVX2): the K-quant lane order on the unsigned
 * quants (0..63); the -32 offset is taken out per lane l as
 * 32 * (bsum[2l] scale[2l] + bsum[2l+1] scale[2l+1]) -- a different split
 * than the products', which shows in the float rounding. */
void ft_vec_dot_q6_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q6_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    float acc[8] = {0};
    for (int64_t i = 0; i < nb; i++) {
        int8_t a[FT_QK_K];
        for (int j = 0; j < FT_QK_K; j++)
            a[j] = (int8_t)(q6_at(&x[i], j) + 32);
        int sc[16];
        for (int j = 0; j < 16; j++)
            sc[j] = x[i].scales[j];
        int32_t lanes[8] = {0};
        lanes_add(lanes, a, y[i].qs, sc, 16);
        for (int l = 0; l < 8; l++)
            lanes[l] -= 32 * (y[i].bsums[2 * l] * sc[2 * l] + y[i].bsums[2 * l + 1] * sc[2 * l + 1]);
        lanes_fma(acc, lanes, y[i].d * ft_half_to_float(x[i].d));
    }
    *s = ft_hsum8_ref(acc);
}

/* ======================================================================== */
/* IQ4_NL, IQ4_XS: 4-bit indices into kvalues_iq4nl. The quantizer searches */
/* the block scale: a least-squares scale for the grid points nearest      */
/* x / d, then 15 trial scales (itry - 127) / max around it.               */

static const int8_t k_iq4nl[16] = FT_KVALUES_IQ4NL;
static const int8_t k_mxfp4[16] = FT_KVALUES_MXFP4;

/* The index of the grid value nearest x (ggml's best_index_int8; val sorted). */
static int best_index_int8(int n, const int8_t *val, float x) {
    if (x <= val[0])
        return 0;
    if (x >= val[n - 1])
        return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav])
            mu = mav;
        else
            ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* ggml's quantize_row_iq4_nl_impl with no importance matrix (weights x^2)
 * and ntry = 7: one IQ4_NL block (sb = 32) or one IQ4_XS super-block
 * (sb = 256, then scales_h/scales_l get the 6-bit sub-block scales). */
static void quantize_iq4_superblock(int sb, const float *restrict x, uint16_t *restrict dh, uint8_t *restrict q4,
                                    uint16_t *restrict scales_h, uint8_t *restrict scales_l) {
    enum { NTRY = 7, BS = 32 };
    const int8_t *values = k_iq4nl;
    float scales[FT_QK_K / BS], weight[BS];
    uint8_t L[FT_QK_K];
    memset(q4, 0, (size_t)sb / 2);
    *dh = ft_float_to_half(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < sb / BS; ++ib) {
        const float *xb = x + ib * BS;
        uint8_t *Lb = L + ib * BS;
        for (int j = 0; j < BS; ++j)
            weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < BS; ++j) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            continue;
        }
        float d = -max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < BS; ++j) {
            const int l = best_index_int8(16, values, id * xb[j]);
            Lb[j] = (uint8_t)l;
            const float q = values[l], w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -NTRY; itry <= NTRY; ++itry) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < BS; ++j) {
                const int l = best_index_int8(16, values, id * xb[j]);
                const float q = values[l], w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        const float abs_d = fabsf(d);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = d;
        }
    }
    if (sb / BS > 1) {
        *scales_h = 0;
        const float d = -max_scale / 32;
        *dh = ft_float_to_half(d);
        const float id = d != 0.f ? 1 / d : 0.f;
        for (int ib = 0; ib < sb / BS; ++ib) {
            int l = iclamp(nearest_int(id * scales[ib]), -32, 31);
            const float dl = d * l;
            const float idl = dl != 0.f ? 1 / dl : 0.f;
            for (int j = 0; j < BS; ++j)
                L[ib * BS + j] = (uint8_t)best_index_int8(16, values, idl * x[ib * BS + j]);
            l += 32;
            if (ib % 2 == 0)
                scales_l[ib / 2] = (uint8_t)(l & 0xf);
            else
                scales_l[ib / 2] |= (uint8_t)((l & 0xf) << 4);
            *scales_h |= (uint16_t)((l >> 4) << 2 * (ib % 8));
        }
    } else {
        *dh = ft_float_to_half(scales[0]);
        const float id = scales[0] != 0.f ? 1 / scales[0] : 0;
        for (int j = 0; j < sb; ++j)
            L[j] = (uint8_t)best_index_int8(16, values, id * x[j]);
    }
    for (int i = 0; i < sb / 32; ++i)
        for (int j = 0; j < 16; ++j)
            q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

void ft_quantize_row_iq4_nl_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_iq4_nl *y = vy;
    uint16_t unused_h;
    for (int64_t i = 0; i < n / FT_QK4_NL; i++)
        quantize_iq4_superblock(FT_QK4_NL, x + i * FT_QK4_NL, &y[i].d, y[i].qs, &unused_h, NULL);
}

void ft_quantize_row_iq4_xs_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_iq4_xs *y = vy;
    for (int64_t i = 0; i < n / FT_QK_K; i++)
        quantize_iq4_superblock(FT_QK_K, x + i * FT_QK_K, &y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l);
}

void ft_dequantize_row_iq4_nl_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / FT_QK4_NL; i++, y += FT_QK4_NL) {
        const float d = ft_half_to_float(x[i].d);
        for (int j = 0; j < FT_QK4_NL / 2; j++) {
            y[j] = d * k_iq4nl[x[i].qs[j] & 0xf];
            y[j + FT_QK4_NL / 2] = d * k_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void ft_dequantize_row_iq4_xs_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_iq4_xs *x = vx;
    for (int64_t i = 0; i < n / FT_QK_K; i++) {
        const float d = ft_half_to_float(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int s = 0; s < FT_QK_K / 32; s++, y += 32, qs += 16) {
            const float dl = d * (ft_iq4_xs_scale(&x[i], s) - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * k_iq4nl[qs[j] & 0xf];
                y[j + 16] = dl * k_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* The integer dot of one 32-element block of 4-bit indices into table kv
 * (laid out as Q4_0) with 32 activation quants. */
static inline int dot_lut32(const uint8_t *restrict qs, const int8_t *restrict kv, const int8_t *restrict a) {
    int sumi = 0;
    for (int j = 0; j < 16; j++)
        sumi += kv[qs[j] & 0xf] * a[j] + kv[qs[j] >> 4] * a[j + 16];
    return sumi;
}

/* ggml's AVX2/AVX-512 build repacks IQ4_NL weights with a multiple of 8
 * rows into the Q4_0 layout (repack.cpp iq4_nl_8x8, the same GEMM/GEMV
 * template as Q4_0), so it adds as Q4_0 does: one FMA per block. */
void ft_vec_dot_iq4_nl_q8_0_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_iq4_nl *x = vx;
    const ft_block_q8_0 *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / FT_QK4_NL; i++)
        acc = fmaf((float)dot_lut32(x[i].qs, k_iq4nl, y[i].qs), ft_half_to_float(x[i].d) * ft_half_to_float(y[i].d),
                   acc);
    *s = acc;
}

/* Batches of 8+ rows: ggml's IQ panel GEMM (ggml-cpu/iqp.cpp), which
 * decodes 8 weight rows to int8 with integer sub-block scales and adds one
 * FMA per super-block of its exact integer sum with fp16(d) * d8. */
void ft_vec_dot_iq4_xs_q8_K_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_iq4_xs *x = vx;
    const ft_block_q8_K *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / FT_QK_K; i++) {
        int sumi = 0;
        for (int b = 0; b < FT_QK_K / 32; b++)
            sumi += (ft_iq4_xs_scale(&x[i], b) - 32) * dot_lut32(x[i].qs + 16 * b, k_iq4nl, y[i].qs + 32 * b);
        acc = fmaf((float)sumi, ft_half_to_float(x[i].d) * y[i].d, acc);
    }
    *s = acc;
}

/* Fewer rows: ggml_vec_dot_iq4_xs_q8_K (AVX2): per super-block the signed
 * scale times each product goes to 8 int32 lanes by (i % 32) / 4, then one
 * FMA per lane with d * d8, hsum_float_8 at the end. */
void ft_vec_dot_iq4_xs_q8_K_gemv_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_iq4_xs *x = vx;
    const ft_block_q8_K *y = vy;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / FT_QK_K; i++) {
        int8_t w[FT_QK_K];
        int sc[FT_QK_K / 32];
        for (int b = 0; b < FT_QK_K / 32; b++) {
            sc[b] = ft_iq4_xs_scale(&x[i], b) - 32;
            for (int j = 0; j < 16; j++) {
                w[32 * b + j] = k_iq4nl[x[i].qs[16 * b + j] & 0xf];
                w[32 * b + j + 16] = k_iq4nl[x[i].qs[16 * b + j] >> 4];
            }
        }
        int32_t lanes[8] = {0};
        lanes_add(lanes, w, y[i].qs, sc, 32);
        lanes_fma(acc, lanes, ft_half_to_float(x[i].d) * y[i].d);
    }
    *s = ft_hsum8_ref(acc);
}

/* ======================================================================== */
/* MXFP4: 4-bit E2M1 values with one power-of-two (E8M0) scale per 32.     */
/* e = floor(log2(amax)) - 2 puts amax in the top binade of the grid (6).   */

static int best_index_mxfp4(float x, float e) {
    int best = 0;
    float best_err = fabsf(k_mxfp4[0] * e - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(k_mxfp4[i] * e - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

void ft_quantize_row_mxfp4_ref(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_mxfp4 *y = vy;
    for (int64_t i = 0; i < n / FT_QK_MXFP4; i++, x += FT_QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < FT_QK_MXFP4; j++)
            if (amax < fabsf(x[j]))
                amax = fabsf(x[j]);
        /* ggml casts the float to uint8_t; below 2^-125 that is out of range,
         * where x86 truncates through int32 (kept, for the same bytes) */
        const uint8_t e = amax > 0.0f ? (uint8_t)(int)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = ft_e8m0_to_fp32_half(e);
        y[i].e = e;
        for (int j = 0; j < FT_QK_MXFP4 / 2; j++)
            y[i].qs[j] = (uint8_t)(best_index_mxfp4(x[j], d) | best_index_mxfp4(x[j + FT_QK_MXFP4 / 2], d) << 4);
    }
}

void ft_dequantize_row_mxfp4_ref(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_mxfp4 *x = vx;
    for (int64_t i = 0; i < n / FT_QK_MXFP4; i++, y += FT_QK_MXFP4) {
        const float d = ft_e8m0_to_fp32_half(x[i].e);
        for (int j = 0; j < FT_QK_MXFP4 / 2; j++) {
            y[j] = k_mxfp4[x[i].qs[j] & 0x0f] * d;
            y[j + FT_QK_MXFP4 / 2] = k_mxfp4[x[i].qs[j] >> 4] * d;
        }
    }
}

/* Repacked like IQ4_NL (repack.cpp mxfp4_8x8, dense and expert matrices
 * alike), so one FMA per block with the scale 2^(e-128) * d8. */
void ft_vec_dot_mxfp4_q8_0_ref(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_mxfp4 *x = vx;
    const ft_block_q8_0 *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / FT_QK_MXFP4; i++)
        acc = fmaf((float)dot_lut32(x[i].qs, k_mxfp4, y[i].qs),
                   ft_e8m0_to_fp32_half(x[i].e) * ft_half_to_float(y[i].d), acc);
    *s = acc;
}
