/* The row kernels of the type table (struct ft_type_info) that differ
 * between the x86 levels only in vector width, written once over the names
 * of simd/x86/vec256.h / vec512.h: avx2_quant.c includes this after
 * vec256.h, avx512_quant.c after vec512.h, and each fills the table with
 * quant_fill_common() before adding its own integer dots (vpmaddubsw on
 * AVX2, VNNI on AVX-512), which differ in more than width.
 *
 * Here: the F32 / F16 / BF16 dots and row conversions, the Q8_0 / Q8_1 /
 * Q8_K quantizers, and the Q8_0 / Q4_0 / Q4_K / Q6_K dequantizers; and the
 * helpers the including file's kernels share (f16, prefetch_ahead).
 *
 * Contract (simd/kernels.h): quantizers give the reference's bytes,
 * to_float the reference's floats, vec_dot the reference's products with
 * the f32 additions in another order. The dequantizers unpack quants with
 * SSE or AVX2 integer ops (both levels have them) and convert them to
 * floats at the width. */
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/quant_ref.h"
#include "simd/x86/vec_math.h"

#include <stdbool.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

/* Prefetch the cache lines of `bytes` weight bytes FT_PREFETCH_DIST ahead
 * of p (simd/kernels.h). bytes is a constant, so this unrolls. Always
 * inlined: GCC 12 finds the function free of side effects (prefetches do
 * not count) and drops calls that are not inlined before that analysis --
 * it did so in dot_kind. */
static inline __attribute__((always_inline)) void prefetch_ahead(const void *p, int bytes) {
    for (int o = 0; o < bytes; o += 64)
        _mm_prefetch((const char *)p + FT_PREFETCH_DIST + o, _MM_HINT_T0);
}

/* ---- F32 / F16 / BF16 ----------------------------------------------------------- */

enum float_kind { KIND_F32, KIND_F16, KIND_BF16 };

/* FTV_N elements of a row of `kind` at element i, as floats; partial: lanes
 * >= n zero. */
static inline ftv load_kind(enum float_kind kind, const void *p, int64_t i) {
    switch (kind) {
    case KIND_F16:
        return ftv_load_f16((const uint16_t *)p + i);
    case KIND_BF16:
        return ftv_load_bf16((const uint16_t *)p + i);
    default:
        return ftv_load((const float *)p + i);
    }
}

static inline ftv load_kind_n(enum float_kind kind, const void *p, int64_t i, int64_t n) {
    switch (kind) {
    case KIND_F16:
        return ftv_load_f16_n((const uint16_t *)p + i, n);
    case KIND_BF16:
        return ftv_load_bf16_n((const uint16_t *)p + i, n);
    default:
        return ftv_load_n((const float *)p + i, n);
    }
}

static inline float scalar_kind(enum float_kind kind, const void *p, int64_t i) {
    switch (kind) {
    case KIND_F16:
        return f16(((const uint16_t *)p)[i]);
    case KIND_BF16:
        return ft_bfloat_to_float(((const uint16_t *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}

/* Four accumulators over 4 FTV_N elements per step, then single vectors;
 * the tail as FTV_TAIL_IN_VECTOR says (vec256.h). */
static inline __attribute__((always_inline)) float dot_kind(enum float_kind kind, int64_t n, const void *x,
                                                            const void *y) {
    const int esz = kind == KIND_F32 ? 4 : 2;
    ftv a0 = ftv_zero(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 4 * FTV_N <= n; i += 4 * FTV_N) {
        prefetch_ahead((const char *)x + i * esz, 4 * FTV_N * esz);
        a0 = ftv_fmadd(load_kind(kind, x, i), load_kind(kind, y, i), a0);
        a1 = ftv_fmadd(load_kind(kind, x, i + FTV_N), load_kind(kind, y, i + FTV_N), a1);
        a2 = ftv_fmadd(load_kind(kind, x, i + 2 * FTV_N), load_kind(kind, y, i + 2 * FTV_N), a2);
        a3 = ftv_fmadd(load_kind(kind, x, i + 3 * FTV_N), load_kind(kind, y, i + 3 * FTV_N), a3);
    }
    for (; i + FTV_N <= n; i += FTV_N)
        a0 = ftv_fmadd(load_kind(kind, x, i), load_kind(kind, y, i), a0);
#if FTV_TAIL_IN_VECTOR
    if (i < n) {
        a1 = ftv_fmadd(load_kind_n(kind, x, i, n - i), load_kind_n(kind, y, i, n - i), a1);
        i = n;
    }
#endif
    float sum = ftv_hsum(ftv_add(ftv_add(a0, a1), ftv_add(a2, a3)));
    for (; i < n; i++)
        sum += scalar_kind(kind, x, i) * scalar_kind(kind, y, i);
    return sum;
}

static void vec_dot_f32(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    *s = dot_kind(KIND_F32, n, vx, vy);
}
static void vec_dot_f16(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    *s = dot_kind(KIND_F16, n, vx, vy);
}
static void vec_dot_bf16(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    *s = dot_kind(KIND_BF16, n, vx, vy);
}

/* Widening is exact, so vector and scalar agree (a NaN keeps its payload
 * with the quiet bit set, as ft_half_to_float). */
static inline __attribute__((always_inline)) void widen_kind(enum float_kind kind, const void *restrict x,
                                                              float *restrict y, int64_t n) {
    int64_t i = 0;
    for (; i + 2 * FTV_N <= n; i += 2 * FTV_N) {
        ftv_store(y + i, load_kind(kind, x, i));
        ftv_store(y + i + FTV_N, load_kind(kind, x, i + FTV_N));
    }
    for (; i + FTV_N <= n; i += FTV_N)
        ftv_store(y + i, load_kind(kind, x, i));
#if FTV_TAIL_IN_VECTOR
    if (i < n) {
        ftv_store_m(y + i, ftv_mask(n - i), load_kind_n(kind, x, i, n - i));
        i = n;
    }
#endif
    for (; i < n; i++)
        y[i] = kind == KIND_F16 ? ft_half_to_float(((const uint16_t *)x)[i])
                                : ft_bfloat_to_float(((const uint16_t *)x)[i]);
}

static void f16_to_f32_row(const void *restrict vx, float *restrict y, int64_t n) { widen_kind(KIND_F16, vx, y, n); }
static void bf16_to_f32_row(const void *restrict vx, float *restrict y, int64_t n) { widen_kind(KIND_BF16, vx, y, n); }

/* vcvtps2ph rounds to nearest even like ft_float_to_half and agrees on
 * overflow and subnormals; only NaNs differ (it keeps the payload, the
 * reference writes sign | 0x7e00), so a vector holding a NaN goes scalar.
 * bf16: integer round-to-nearest-even as ft_float_to_bfloat; NaN likewise. */
static inline __attribute__((always_inline)) void narrow_kind(enum float_kind kind, const float *restrict x,
                                                               uint16_t *restrict y, int64_t n) {
    int64_t i = 0;
    for (; i + 2 * FTV_N <= n; i += 2 * FTV_N) {
        const ftv v0 = ftv_load(x + i), v1 = ftv_load(x + i + FTV_N);
        if (ftv_mask_bits(ftv_isnan(v0)) | ftv_mask_bits(ftv_isnan(v1))) {
            for (int j = 0; j < 2 * FTV_N; j++)
                y[i + j] = kind == KIND_F16 ? ft_float_to_half(x[i + j]) : ft_float_to_bfloat(x[i + j]);
            continue;
        }
        if (kind == KIND_F16) {
            ftv_store_f16(y + i, v0);
            ftv_store_f16(y + i + FTV_N, v1);
        } else {
            ftvi_store_u16x2(y + i, ftv_bf16_bits(v0), ftv_bf16_bits(v1));
        }
    }
    for (; i + FTV_N <= n; i += FTV_N) {
        const ftv v = ftv_load(x + i);
        if (ftv_mask_bits(ftv_isnan(v))) {
            for (int j = 0; j < FTV_N; j++)
                y[i + j] = kind == KIND_F16 ? ft_float_to_half(x[i + j]) : ft_float_to_bfloat(x[i + j]);
            continue;
        }
        if (kind == KIND_F16)
            ftv_store_f16(y + i, v);
        else
            ftvi_store_u16(y + i, ftv_bf16_bits(v));
    }
    for (; i < n; i++)
        y[i] = kind == KIND_F16 ? ft_float_to_half(x[i]) : ft_float_to_bfloat(x[i]);
}

static void f32_to_f16_row(const float *restrict x, void *restrict vy, int64_t n) { narrow_kind(KIND_F16, x, vy, n); }
static void f32_to_bf16_row(const float *restrict x, void *restrict vy, int64_t n) { narrow_kind(KIND_BF16, x, vy, n); }

/* ---- Q8_0 / Q8_1 / Q8_K activations ------------------------------------------------ */

#define Q8_VECS (32 / FTV_N) /* vectors per 32 elements */

/* One 32-element Q8 block: d and the quants as the reference computes
 * them. act: activations as llama.cpp's x86 backend makes them (127 /
 * amax, ties to even: simd/quant_ref.c); else the GGUF weight quantizer
 * (1 / d, ties away from zero). sum (Q8_1): the sum of the quants. */
static inline __attribute__((always_inline)) float quantize_block_q8(const float *x, int8_t *qs, int32_t *sum,
                                                                      bool act) {
    ftv v[Q8_VECS];
    for (int k = 0; k < Q8_VECS; k++)
        v[k] = ftv_load(x + FTV_N * k);
    ftv amax = ftv_abs(v[0]); /* = max(0, |v[0]|), NaN lanes included */
    for (int k = 1; k < Q8_VECS; k++)
        amax = ftv_max(amax, ftv_abs(v[k]));
    const float am = ftv_hmax(amax);
    const float d = am / 127;
    ftvi q[Q8_VECS];
    if (act) {
        const ftv id = ftv_set1(am != 0.0f ? 127.f / am : 0.0f);
        for (int k = 0; k < Q8_VECS; k++) /* vcvtps2dq: nearest even under the default MXCSR */
            q[k] = ftv_cvt_i32(ftv_mul(v[k], id));
    } else {
        const ftv id = ftv_set1(d != 0.0f ? 1.0f / d : 0.0f);
        for (int k = 0; k < Q8_VECS; k++)
            q[k] = ftv_cvtt_i32(ftv_round_away(ftv_mul(v[k], id)));
    }
    ftvi_store_i8x32(qs, q);
    if (sum) {
        ftvi t = q[0];
        for (int k = 1; k < Q8_VECS; k++)
            t = ftvi_add(t, q[k]);
        *sum = ftvi_hsum(t);
    }
    return d;
}

static inline void quantize_q8_0(const float *restrict x, void *restrict vy, int64_t n, bool act) {
    ft_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / FT_QK8_0; i++) {
        const float d = quantize_block_q8(x + i * FT_QK8_0, y[i].qs, NULL, act);
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    }
}

static inline void quantize_q8_1(const float *restrict x, void *restrict vy, int64_t n, bool act) {
    ft_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / FT_QK8_1; i++) {
        int32_t sum;
        const float d = quantize_block_q8(x + i * FT_QK8_1, y[i].qs, &sum, act);
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        y[i].s = _cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

static void quantize_row_q8_0(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_0(x, y, n, false); }
static void quantize_row_q8_0_act(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_0(x, y, n, true); }
static void quantize_row_q8_1(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_1(x, y, n, false); }
static void quantize_row_q8_1_act(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_1(x, y, n, true); }

/* q = min(127, nearest_int(-127 / max * x)), max the first element of
 * largest magnitude (its sign matters); vcvtps2dq rounds to nearest even
 * like nearest_int() under the default MXCSR. */
static void quantize_row_q8_K(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / FT_QK_K; i++, x += FT_QK_K) {
        ftv am = ftv_zero();
        for (int k = 0; k < FT_QK_K / FTV_N; k++)
            am = ftv_max(am, ftv_abs(ftv_load(x + FTV_N * k)));
        const float amax = ftv_hmax(am);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const ftv amv = ftv_set1(amax);
        int first = 0;
        for (int k = 0; k < FT_QK_K / FTV_N; k++) {
            const unsigned m = ftv_mask_bits(ftv_eq(ftv_abs(ftv_load(x + FTV_N * k)), amv));
            if (m) {
                first = FTV_N * k + __builtin_ctz(m);
                break;
            }
        }
        const float iscale = -127.f / x[first];
        const ftv is = ftv_set1(iscale);
        for (int k = 0; k < FT_QK_K / 32; k++) {
            ftvi q[Q8_VECS];
            for (int j = 0; j < Q8_VECS; j++)
                q[j] = ftvi_min(ftvi_set1(127), ftv_cvt_i32(ftv_mul(is, ftv_load(x + 32 * k + FTV_N * j))));
            int32_t bsum[2];
            ftvi_store_i8x32_sum16(y[i].qs + 32 * k, q, bsum);
            y[i].bsums[2 * k] = (int16_t)bsum[0];
            y[i].bsums[2 * k + 1] = (int16_t)bsum[1];
        }
        y[i].d = 1 / iscale;
    }
}

/* ---- dequantizers ------------------------------------------------------------------- */

/* 16 signed / unsigned bytes times d (d * q for unsigned, so the product
 * is the reference's), to y. */
static inline void store_i8x16_scaled(float *y, __m128i q, ftv d) {
    ftv v[16 / FTV_N];
    ftv_from_i8x16(q, v);
    for (int t = 0; t < 16 / FTV_N; t++)
        ftv_store(y + FTV_N * t, ftv_mul(v[t], d));
}

static void dequantize_row_q8_0(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / FT_QK8_0; i++, y += FT_QK8_0) {
        const ftv d = ftv_set1(f16(x[i].d));
        for (int k = 0; k < Q8_VECS; k++)
            ftv_store(y + FTV_N * k, ftv_mul(ftv_load_i8(x[i].qs + FTV_N * k), d));
    }
}

static void dequantize_row_q4_0(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q4_0 *x = vx;
    const __m128i m4 = _mm_set1_epi8(0x0f), off = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n / FT_QK4_0; i++, y += FT_QK4_0) {
        const ftv d = ftv_set1(f16(x[i].d));
        const __m128i q = _mm_loadu_si128((const __m128i *)x[i].qs);
        store_i8x16_scaled(y, _mm_sub_epi8(_mm_and_si128(q, m4), off), d);
        store_i8x16_scaled(y + 16, _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), off), d);
    }
}

/* (d * sc) * q - (dmin * mn), products rounded separately as the reference
 * (no FMA: -ffp-contract=off). */
static void dequantize_row_q4_K(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q4_K *x = vx;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / FT_QK_K; i++, y += FT_QK_K) {
        const float d = f16(x[i].d), dmin = f16(x[i].dmin);
        const struct ft_scales16 u = ft_k4_scales(x[i].scales);
        for (int j = 0; j < 4; j++) {
            for (int half = 0; half < 2; half++) {
                const int sb = 2 * j + half;
                const ftv d1 = ftv_set1(d * ft_scales16_byte(u, sb));
                const ftv m1 = ftv_set1(dmin * ft_scales16_byte(u, 8 + sb));
                for (int k = 0; k < 2; k++) {
                    __m128i q = _mm_loadu_si128((const __m128i *)(x[i].qs + 32 * j + 16 * k));
                    q = _mm_and_si128(half ? _mm_srli_epi16(q, 4) : q, m4);
                    ftv v[16 / FTV_N];
                    ftv_from_u8x16(q, v);
                    for (int t = 0; t < 16 / FTV_N; t++)
                        ftv_store(y + 32 * sb + 16 * k + FTV_N * t, ftv_sub(ftv_mul(d1, v[t]), m1));
                }
            }
        }
    }
}

/* Q6_K: q = (ql nibble | 2 bits of qh << 4) - 32, times d * scale of its
 * 16. Element 128h + 32m + l (l < 32) takes nibble m / 2 of ql[64h + 32(m
 * % 2) + l] and bits 2m, 2m+1 of qh[32h + l]; unpacked 32 at a time with
 * AVX2 integer ops, which the avx512 level has too. */
static void dequantize_row_q6_K(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q6_K *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30), off = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / FT_QK_K; i++, y += FT_QK_K) {
        const float d = f16(x[i].d);
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
                _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)),
            };
            for (int m = 0; m < 4; m++) {
                const __m256i qs = _mm256_sub_epi8(q[m], off);
                const int sb = 8 * h + 2 * m; /* sub-blocks sb (first 16) and sb + 1 */
                float *out = y + 128 * h + 32 * m;
                store_i8x16_scaled(out, _mm256_castsi256_si128(qs), ftv_set1(d * x[i].scales[sb]));
                store_i8x16_scaled(out + 16, _mm256_extracti128_si256(qs, 1), ftv_set1(d * x[i].scales[sb + 1]));
            }
        }
    }
}

/* The entries above; the including file adds its integer dots. */
static void quant_fill_common(struct ft_type_info *t) {
    t[FT_TYPE_F32].vec_dot = vec_dot_f32;
    t[FT_TYPE_F16].vec_dot = vec_dot_f16;
    t[FT_TYPE_F16].to_float = f16_to_f32_row;
    t[FT_TYPE_F16].from_float = f32_to_f16_row;
    t[FT_TYPE_F16].from_float_act = f32_to_f16_row;
    t[FT_TYPE_BF16].vec_dot = vec_dot_bf16;
    t[FT_TYPE_BF16].to_float = bf16_to_f32_row;
    t[FT_TYPE_BF16].from_float = f32_to_bf16_row;
    t[FT_TYPE_BF16].from_float_act = f32_to_bf16_row;

    t[FT_TYPE_Q8_0].from_float = quantize_row_q8_0;
    t[FT_TYPE_Q8_0].from_float_act = quantize_row_q8_0_act;
    t[FT_TYPE_Q8_0].to_float = dequantize_row_q8_0;
    t[FT_TYPE_Q8_1].from_float = quantize_row_q8_1;
    t[FT_TYPE_Q8_1].from_float_act = quantize_row_q8_1_act;
    t[FT_TYPE_Q8_K].from_float = quantize_row_q8_K;
    t[FT_TYPE_Q8_K].from_float_act = quantize_row_q8_K;

    t[FT_TYPE_Q4_0].to_float = dequantize_row_q4_0;
    t[FT_TYPE_Q4_K].to_float = dequantize_row_q4_K;
    t[FT_TYPE_Q6_K].to_float = dequantize_row_q6_K;
}
