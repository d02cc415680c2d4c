/* AVX2 + FMA + F16C kernels: the "avx2" level (include/ft/cpu.h).
 *
 * Compiled with -mavx2 -mfma -mf16c -ffp-contract=off (cmake/FtSimd.cmake)
 * and called only when CPUID says so. Pure AVX2: int8 dots use
 * vpmaddubsw + vpmaddwd, not AVX-VNNI, so this level is exactly what an
 * AVX2-only machine (Zen 2/3, Haswell..Comet Lake) runs; machines with VNNI
 * get it through the avx512 level.
 *
 * Contract (simd/kernels.h): quantizers give the reference's bytes, to_float
 * the reference's floats, vec_dot the reference's integer sums with float
 * accumulation in another order. Structure of the dots: integer partial
 * sums per block in vector lanes, scaled into float vector accumulators;
 * one horizontal sum per row, never inside the loop; weights prefetched
 * FT_PREFETCH_DIST ahead (simd/kernels.h). Note: Sierra Forest-class
 * servers (AVX2 + AVX-VNNI, no AVX-512) would gain from a vpdpbusd variant
 * of this file; not written yet.
 *
 * The int8 tricks rely on activations in -127..127, which every Q8
 * quantizer guarantees (ft_quantize_row_q8_*): vpsignb cannot negate -128.
 */
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/quant_ref.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

/* Prefetch the cache lines of `bytes` weight bytes FT_PREFETCH_DIST ahead
 * of p (simd/kernels.h). bytes is a constant, so this unrolls. */
static inline void prefetch_ahead(const void *p, int bytes) {
    for (int o = 0; o < bytes; o += 64)
        _mm_prefetch((const char *)p + FT_PREFETCH_DIST + o, _MM_HINT_T0);
}

static inline float hsum_ps(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline int hsum_epi32(__m256i v) {
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(r);
}

static inline __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline __m128i loadu128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

static inline __m128i scales16_vec(struct ft_scales16 s) {
    return _mm_setr_epi32((int)s.w[0], (int)s.w[1], (int)s.w[2], (int)s.w[3]);
}

/* 8 int32 sums of 4 products of unsigned x (0..255) and signed y. The
 * int16 pair sums cannot saturate for x <= 128 and |y| <= 127. */
static inline __m256i dot_u8i8(__m256i ux, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ux, y), _mm256_set1_epi16(1));
}

/* Signed x times signed y (y != -128): |x| times y with x's sign. */
static inline __m256i dot_i8i8(__m256i x, __m256i y) {
    return dot_u8i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* 32 nibbles of a Q4_0/Q4_1/Q5 block in element order: bytes 0..15 the low
 * nibbles, 16..31 the high ones. */
static inline __m256i nibbles32(const uint8_t *qs) {
    const __m128i t = loadu128(qs);
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
}

/* 0xff in byte j where bit j of the little-endian 32-bit qh is set. */
static inline __m256i bits32(const uint8_t *qh) {
    uint32_t b;
    memcpy(&b, qh, 4);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                            3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)b), spread);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* Shuffle index broadcasting int16 word w of each 128-bit lane. */
static inline __m256i word_idx(int w) { return _mm256_set1_epi16((short)((2 * w + 1) << 8 | 2 * w)); }

/* Shuffle index for a 256-bit [lane0 | lane1]: word a of lane 0 in the low
 * lane, word b of lane 1 in the high one. */
static inline __m256i word_idx2(int a, int b) {
    return _mm256_setr_m128i(_mm_set1_epi16((short)((2 * a + 1) << 8 | 2 * a)),
                             _mm_set1_epi16((short)((2 * b + 1) << 8 | 2 * b)));
}

/* ---- F32 / F16 / BF16 ----------------------------------------------------------- */

static void vec_dot_f32(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const float *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        prefetch_ahead(x + i, 32 * 4);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++)
        sum += x[i] * y[i];
    *s = sum;
}

static inline __m256 load_f16x8(const uint16_t *p) { return _mm256_cvtph_ps(loadu128(p)); }

static void vec_dot_f16(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const uint16_t *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        prefetch_ahead(x + i, 32 * 2);
        a0 = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), a0);
        a1 = _mm256_fmadd_ps(load_f16x8(x + i + 8), load_f16x8(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16x8(x + i + 16), load_f16x8(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16x8(x + i + 24), load_f16x8(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), a0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++)
        sum += f16(x[i]) * f16(y[i]);
    *s = sum;
}

static inline __m256 load_bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(p)), 16));
}

static void vec_dot_bf16(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const uint16_t *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        prefetch_ahead(x + i, 32 * 2);
        a0 = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), a0);
        a1 = _mm256_fmadd_ps(load_bf16x8(x + i + 8), load_bf16x8(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_bf16x8(x + i + 16), load_bf16x8(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_bf16x8(x + i + 24), load_bf16x8(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), a0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++)
        sum += ft_bfloat_to_float(x[i]) * ft_bfloat_to_float(y[i]);
    *s = sum;
}

static void f16_to_f32_row(const void *restrict vx, float *restrict y, int64_t n) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(y + i, load_f16x8(x + i));
        _mm256_storeu_ps(y + i + 8, load_f16x8(x + i + 8));
    }
    for (; i < n; i++)
        y[i] = ft_half_to_float(x[i]);
}

/* vcvtps2ph rounds to nearest even like ft_float_to_half and agrees on
 * overflow and subnormals; only NaNs differ (it keeps the payload, the
 * reference writes sign | 0x7e00), so a chunk holding a NaN goes scalar. */
static void f32_to_f16_row(const float *restrict x, void *restrict vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (int j = 0; j < 8; j++)
                y[i + j] = ft_float_to_half(x[i + j]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++)
        y[i] = ft_float_to_half(x[i]);
}

static void bf16_to_f32_row(const void *restrict vx, float *restrict y, int64_t n) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(y + i, load_bf16x8(x + i));
        _mm256_storeu_ps(y + i + 8, load_bf16x8(x + i + 8));
    }
    for (; i < n; i++)
        y[i] = ft_bfloat_to_float(x[i]);
}

/* Round to nearest even in integer arithmetic, as ft_float_to_bfloat (not
 * vcvtneps2bf16, which flushes subnormals). NaN chunks go scalar. */
static inline __m256i bf16_round(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
}

static void f32_to_bf16_row(const float *restrict x, void *restrict vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        const __m256 nan = _mm256_or_ps(_mm256_cmp_ps(v0, v0, _CMP_UNORD_Q), _mm256_cmp_ps(v1, v1, _CMP_UNORD_Q));
        if (_mm256_movemask_ps(nan)) {
            for (int j = 0; j < 16; j++)
                y[i + j] = ft_float_to_bfloat(x[i + j]);
            continue;
        }
        /* packus works per 128-bit lane: fix the qword order afterwards */
        const __m256i p = _mm256_packus_epi32(bf16_round(v0), bf16_round(v1));
        _mm256_storeu_si256((__m256i *)(y + i), _mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0)));
    }
    for (; i < n; i++)
        y[i] = ft_float_to_bfloat(x[i]);
}

/* ---- Q8_0 / Q8_1 activations ------------------------------------------------------ */

/* roundf(): nearest, ties away from zero (vroundps has no such mode). The
 * fraction v - trunc(v) is exact, so comparing it with 0.5 is too. */
static inline __m256 round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign));
    return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one));
}

static inline float hmax_ps(__m256 v) {
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* Pack 4x8 int32 (each -128..127) into 32 int8 in element order. */
static inline __m256i pack_i32x32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    const __m256i p = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One 32-element Q8_0/Q8_1 block: d and the quants as the reference
 * computes them (d = amax / 127, q = roundf(x * (1 / d))). */
/* One Q8 block. act: activations as llama.cpp's x86 backend makes them
 * (127 / amax, ties to even: simd/quant_ref.c); else the GGUF weight
 * quantizer (1 / d, ties away from zero). */
static inline float quantize_block_q8(const float *x, int8_t *qs, __m256i *sum, bool act) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
    }
    const float am = hmax_ps(amax);
    const float d = am / 127;
    __m256i q[4];
    if (act) {
        const __m256 id = _mm256_set1_ps(am != 0.0f ? 127.f / am : 0.0f);
        for (int k = 0; k < 4; k++) /* vcvtps2dq: nearest even under the default MXCSR */
            q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id));
    } else {
        const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[k], id)));
    }
    _mm256_storeu_si256((__m256i *)qs, pack_i32x32(q[0], q[1], q[2], q[3]));
    if (sum)
        *sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
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
        __m256i sum;
        const float d = quantize_block_q8(x + i * FT_QK8_1, y[i].qs, &sum, act);
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        y[i].s = _cvtss_sh((float)hsum_epi32(sum) * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

static void quantize_row_q8_0(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_0(x, y, n, false); }
static void quantize_row_q8_0_act(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_0(x, y, n, true); }
static void quantize_row_q8_1(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_1(x, y, n, false); }
static void quantize_row_q8_1_act(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_1(x, y, n, true); }

static void dequantize_row_q8_0(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / FT_QK8_0; i++, y += FT_QK8_0) {
        const __m256 d = _mm256_set1_ps(f16(x[i].d));
        for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + 8 * k)));
            _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

/* ---- Q8_K activations ----------------------------------------------------------------- */

/* q = min(127, nearest_int(-127 / max * x)), max the first element of
 * largest magnitude (its sign matters); vcvtps2dq rounds to nearest even
 * like nearest_int() under the default MXCSR. */
static void quantize_row_q8_K(const float *restrict x, void *restrict vy, int64_t n) {
    ft_block_q8_K *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / FT_QK_K; i++, x += FT_QK_K) {
        __m256 amax8 = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++)
            amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
        const float amax = hmax_ps(amax8);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const __m256 am = _mm256_set1_ps(amax);
        int first = 0;
        for (int k = 0; k < 32; k++) {
            const int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), am,
                                                           _CMP_EQ_OQ));
            if (m) {
                first = 8 * k + __builtin_ctz((unsigned)m);
                break;
            }
        }
        const float iscale = -127.f / x[first];
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i cap = _mm256_set1_epi32(127);
        for (int k = 0; k < 8; k++) {
            __m256i q[4];
            for (int j = 0; j < 4; j++)
                q[j] = _mm256_min_epi32(cap, _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * k + 8 * j))));
            const __m256i p = pack_i32x32(q[0], q[1], q[2], q[3]);
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * k), p);
            /* bsums of the two 16-groups: psadbw sums |q + 128| per 8 bytes */
            const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(p, _mm256_set1_epi8((char)0x80)),
                                                _mm256_setzero_si256());
            const __m128i lo = _mm256_castsi256_si128(sad), hi = _mm256_extracti128_si256(sad, 1);
            y[i].bsums[2 * k] = (int16_t)(_mm_cvtsi128_si32(_mm_add_epi64(lo, _mm_unpackhi_epi64(lo, lo))) - 16 * 128);
            y[i].bsums[2 * k + 1] =
                (int16_t)(_mm_cvtsi128_si32(_mm_add_epi64(hi, _mm_unpackhi_epi64(hi, hi))) - 16 * 128);
        }
        y[i].d = 1 / iscale;
    }
}

/* ---- 32-element weight blocks ----------------------------------------------------------- */

/* The 8 half-precision fields at base + k * stride + byte_off (k = 0..7)
 * as 8 floats. Converting the scales of the 32-element types one at a time
 * (load, move to xmm, vcvtph2ps, per x and per y) cost as much as the dot
 * itself; gathered with vpinsrw they convert in one instruction. */
static inline __m256 halves8(const void *base, size_t stride, size_t byte_off) {
    const uint8_t *p = (const uint8_t *)base + byte_off;
    uint16_t h[8];
    for (int k = 0; k < 8; k++)
        memcpy(&h[k], p + (size_t)k * stride, 2);
    __m128i v = _mm_cvtsi32_si128(h[0]);
    v = _mm_insert_epi16(v, h[1], 1);
    v = _mm_insert_epi16(v, h[2], 2);
    v = _mm_insert_epi16(v, h[3], 3);
    v = _mm_insert_epi16(v, h[4], 4);
    v = _mm_insert_epi16(v, h[5], 5);
    v = _mm_insert_epi16(v, h[6], 6);
    v = _mm_insert_epi16(v, h[7], 7);
    return _mm256_cvtph_ps(v);
}

/* Integer lanes of one block (8 int32 sums of 4 products) per type. */
static inline __m256i block_q8_0(const ft_block_q8_0 *x, const ft_block_q8_0 *y) {
    return dot_i8i8(loadu256(x->qs), loadu256(y->qs));
}

static inline __m256i block_q4_0(const ft_block_q4_0 *x, const ft_block_q8_0 *y) {
    return dot_i8i8(_mm256_sub_epi8(nibbles32(x->qs), _mm256_set1_epi8(8)), loadu256(y->qs));
}

static inline __m256i block_q4_1(const ft_block_q4_1 *x, const ft_block_q8_1 *y) {
    return dot_u8i8(nibbles32(x->qs), loadu256(y->qs));
}

/* Q5_0 quants minus 16 as int8: the nibble, or nibble - 16 (= nibble |
 * 0xf0) where bit 4 is clear. */
static inline __m256i block_q5_0(const ft_block_q5_0 *x, const ft_block_q8_0 *y) {
    const __m256i hi = _mm256_andnot_si256(bits32(x->qh), _mm256_set1_epi8((char)0xf0));
    return dot_i8i8(_mm256_or_si256(nibbles32(x->qs), hi), loadu256(y->qs));
}

static inline __m256i block_q5_1(const ft_block_q5_1 *x, const ft_block_q8_1 *y) {
    const __m256i q = _mm256_or_si256(nibbles32(x->qs), _mm256_and_si256(bits32(x->qh), _mm256_set1_epi8(0x10)));
    return dot_u8i8(q, loadu256(y->qs));
}

/* m * s of a Q4_1/Q5_1 block: the halves at byte 2 of x and of y. */
static inline float offset_term(const void *xb, const void *yb) {
    uint16_t m, s;
    memcpy(&m, (const uint8_t *)xb + 2, 2);
    memcpy(&s, (const uint8_t *)yb + 2, 2);
    return f16(m) * f16(s);
}

/* Eight blocks per iteration: their dx * dy in one vector, stored and read
 * back with broadcast loads (load-port only, no shuffle). OFFSET: Q4_1/Q5_1,
 * whose m * s terms are a vector product of the same kind. */
#define DOT_32(name, XT, YT, BLOCK, OFFSET)                                                                     \
    static void name(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {         \
        const XT *x = vx;                                                                                      \
        const YT *y = vy;                                                                                      \
        const int64_t nb = n / 32;                                                                             \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), accm = _mm256_setzero_ps();             \
        float summs = 0.0f;                                                                                    \
        float d8[8];                                                                                           \
        int64_t i = 0;                                                                                         \
        for (; i + 8 <= nb; i += 8) {                                                                          \
            prefetch_ahead(&x[i], 8 * (int)sizeof(XT));                                                        \
            _mm256_storeu_ps(d8, _mm256_mul_ps(halves8(&x[i], sizeof(XT), 0), halves8(&y[i], sizeof(YT), 0))); \
            if (OFFSET)                                                                                        \
                accm = _mm256_fmadd_ps(halves8(&x[i], sizeof(XT), 2), halves8(&y[i], sizeof(YT), 2), accm);    \
            for (int k = 0; k < 8; k += 2) {                                                                   \
                acc0 = _mm256_fmadd_ps(_mm256_broadcast_ss(&d8[k]),                                            \
                                       _mm256_cvtepi32_ps(BLOCK(&x[i + k], &y[i + k])), acc0);                 \
                acc1 = _mm256_fmadd_ps(_mm256_broadcast_ss(&d8[k + 1]),                                        \
                                       _mm256_cvtepi32_ps(BLOCK(&x[i + k + 1], &y[i + k + 1])), acc1);         \
            }                                                                                                  \
        }                                                                                                      \
        for (; i < nb; i++) {                                                                                  \
            acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)),                                  \
                                   _mm256_cvtepi32_ps(BLOCK(&x[i], &y[i])), acc0);                             \
            if (OFFSET)                                                                                        \
                summs += offset_term(&x[i], &y[i]);                                                            \
        }                                                                                                      \
        *s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), accm)) + summs;                                  \
    }

DOT_32(vec_dot_q8_0_q8_0, ft_block_q8_0, ft_block_q8_0, block_q8_0, 0)
DOT_32(vec_dot_q4_0_q8_0, ft_block_q4_0, ft_block_q8_0, block_q4_0, 0)
DOT_32(vec_dot_q4_1_q8_1, ft_block_q4_1, ft_block_q8_1, block_q4_1, 1)
DOT_32(vec_dot_q5_0_q8_0, ft_block_q5_0, ft_block_q8_0, block_q5_0, 0)
DOT_32(vec_dot_q5_1_q8_1, ft_block_q5_1, ft_block_q8_1, block_q5_1, 1)

static void dequantize_row_q4_0(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / FT_QK4_0; i++, y += FT_QK4_0) {
        const __m256 d = _mm256_set1_ps(f16(x[i].d));
        const __m256i q = _mm256_sub_epi8(nibbles32(x[i].qs), _mm256_set1_epi8(8));
        const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        _mm256_storeu_ps(y + 0, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
        _mm256_storeu_ps(y + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
        _mm256_storeu_ps(y + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
        _mm256_storeu_ps(y + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
    }
}

/* ---- K-quants ---------------------------------------------------------------------------- */

/* Q2_K: x = d*sc*q - dmin*mn per 16; the mins go through Q8_K's bsums. */
static void vec_dot_q2_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q2_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        const float d = y[i].d * f16(x[i].d);
        const float dmin = y[i].d * f16(x[i].dmin);
        const __m128i sm = loadu128(x[i].scales);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m4));
        const __m256i prod = _mm256_madd_epi16(mins, loadu256(y[i].bsums));
        acc = _mm256_fnmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);

        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, m4)); /* 16 words */
        const __m256i scl[2] = {_mm256_permute4x64_epi64(sc16, 0x44), _mm256_permute4x64_epi64(sc16, 0xee)};
        const uint8_t *q2 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++, q2 += 32, q8 += 128) {
            const __m256i bits = loadu256(q2);
            for (int k = 0; k < 4; k++) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
                __m256i p = _mm256_maddubs_epi16(q, loadu256(q8 + 32 * k));
                /* 32 elements = sub-blocks 8h + 2k (low lane), 8h + 2k + 1 */
                p = _mm256_madd_epi16(_mm256_shuffle_epi8(scl[h], word_idx2(2 * k, 2 * k + 1)), p);
                sumi = _mm256_add_epi32(sumi, p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc);
}

/* Q3_K: q in -4..3 is (low2 | hbit << 2) - 4; the -4 goes through bsums:
 * sum sc*(u - 4)*y = sum sc*u*y - 4 * sum sc*bsum, with u in 0..7 unsigned. */
static void vec_dot_q3_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q3_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i m4 = _mm256_set1_epi8(4);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        const float d = y[i].d * f16(x[i].d);
        const __m256i sc16 =
            _mm256_sub_epi16(_mm256_cvtepu8_epi16(scales16_vec(ft_q3k_scales(x[i].scales))), _mm256_set1_epi16(32));
        const __m256i corr = _mm256_madd_epi16(sc16, loadu256(y[i].bsums));
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 2));
        const __m256i scl[2] = {_mm256_permute4x64_epi64(sc16, 0x44), _mm256_permute4x64_epi64(sc16, 0xee)};
        const __m256i hbits = loadu256(x[i].hmask);
        const uint8_t *q3 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        for (int h = 0; h < 2; h++, q3 += 32, q8 += 128) {
            const __m256i bits = loadu256(q3);
            for (int k = 0; k < 4; k++) {
                const int b = 4 * h + k; /* hmask bit of this chunk, moved to bit 2 */
                const __m256i hb = b >= 2 ? _mm256_srli_epi16(hbits, b - 2) : _mm256_slli_epi16(hbits, 2 - b);
                const __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3),
                                                  _mm256_and_si256(hb, m4));
                __m256i p = _mm256_maddubs_epi16(q, loadu256(q8 + 32 * k));
                p = _mm256_madd_epi16(_mm256_shuffle_epi8(scl[h], word_idx2(2 * k, 2 * k + 1)), p);
                sumi = _mm256_add_epi32(sumi, p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc);
}

/* Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scale and min. hbits (Q5_K)
 * is NULL for Q4_K. */
static inline float dot_k4_block(const uint8_t *restrict packed, uint16_t xd, uint16_t xdmin, const uint8_t *restrict qs,
                                 const uint8_t *restrict qh, const ft_block_q8_K *restrict y, __m256 *acc) {
    const float d = y->d * f16(xd);
    const float dmin = y->d * f16(xdmin);
    const __m256i sm16 = _mm256_cvtepu8_epi16(scales16_vec(ft_k4_scales(packed))); /* sc 0..7 | mn 0..7 */
    /* mins: mn[s] * (bsum[2s] + bsum[2s+1]) */
    const __m128i bs = _mm_hadd_epi16(loadu128(y->bsums), loadu128(y->bsums + 8));
    const __m128i prod = _mm_madd_epi16(_mm256_extracti128_si256(sm16, 1), bs);
    const __m256i scales = _mm256_permute4x64_epi64(sm16, 0x44); /* sc 0..7 in both lanes */
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i hb = qh ? loadu256(qh) : _mm256_setzero_si256();
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        const __m256i bits = loadu256(qs + 32 * j);
        __m256i lo = _mm256_and_si256(bits, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        if (qh) { /* bit 2j of qh[l] -> element 64j + l, bit 2j+1 -> 64j + 32 + l */
            const __m256i b16 = _mm256_set1_epi8(0x10);
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), b16));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 3), b16));
            hb = _mm256_srli_epi16(hb, 2);
        }
        __m256i pl = _mm256_maddubs_epi16(lo, loadu256(y->qs + 64 * j));
        __m256i ph = _mm256_maddubs_epi16(hi, loadu256(y->qs + 64 * j + 32));
        pl = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, word_idx(2 * j)), pl);
        ph = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, word_idx(2 * j + 1)), ph);
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
    }
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), *acc);
    __m128i p = _mm_add_epi32(prod, _mm_unpackhi_epi64(prod, prod));
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, _MM_SHUFFLE(2, 3, 0, 1)));
    return dmin * (float)_mm_cvtsi128_si32(p);
}

static void vec_dot_q4_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q4_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        mins += dot_k4_block(x[i].scales, x[i].d, x[i].dmin, x[i].qs, NULL, &y[i], &acc);
    }
    *s = hsum_ps(acc) - mins;
}

static void vec_dot_q5_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q5_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        mins += dot_k4_block(x[i].scales, x[i].d, x[i].dmin, x[i].qs, x[i].qh, &y[i], &acc);
    }
    *s = hsum_ps(acc) - mins;
}

/* Q6_K: q - 32 with q in 0..63; the -32 goes through bsums. */
static void vec_dot_q6_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q6_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        const float d = y[i].d * f16(x[i].d);
        const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(x[i].scales));
        const __m256i corr = _mm256_madd_epi16(sc16, loadu256(y[i].bsums));
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
        const __m256i scl[2] = {_mm256_permute4x64_epi64(sc16, 0x44), _mm256_permute4x64_epi64(sc16, 0xee)};
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *q8 = y[i].qs;
        for (int h = 0; h < 2; h++, ql += 64, qh += 32, q8 += 128) {
            const __m256i l0 = loadu256(ql), l1 = loadu256(ql + 32), hb = loadu256(qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
            for (int k = 0; k < 4; k++) {
                __m256i p = _mm256_maddubs_epi16(q[k], loadu256(q8 + 32 * k));
                p = _mm256_madd_epi16(_mm256_shuffle_epi8(scl[h], word_idx2(2 * k, 2 * k + 1)), p);
                sumi = _mm256_add_epi32(sumi, p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc);
}

/* Same floats as the reference: (d * sc) * q - (dmin * mn), each product
 * rounded on its own (no FMA: this file is built with -ffp-contract=off). */
static void dequantize_row_q4_K(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q4_K *x = vx;
    for (int64_t i = 0; i < n / FT_QK_K; i++, y += FT_QK_K) {
        const float d = f16(x[i].d), dmin = f16(x[i].dmin);
        const struct ft_scales16 u = ft_k4_scales(x[i].scales);
        for (int j = 0; j < 4; j++) {
            const __m256i bits = loadu256(x[i].qs + 32 * j);
            const __m256i lo = _mm256_and_si256(bits, _mm256_set1_epi8(0x0f));
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), _mm256_set1_epi8(0x0f));
            for (int half = 0; half < 2; half++) {
                const int sb = 2 * j + half;
                const __m256 d1 = _mm256_set1_ps(d * ft_scales16_byte(u, sb));
                const __m256 m1 = _mm256_set1_ps(dmin * ft_scales16_byte(u, 8 + sb));
                const __m256i q = half ? hi : lo;
                float *out = y + 32 * sb;
                const __m128i q0 = _mm256_castsi256_si128(q), q1 = _mm256_extracti128_si256(q, 1);
                const __m256i w[4] = {_mm256_cvtepu8_epi32(q0), _mm256_cvtepu8_epi32(_mm_srli_si128(q0, 8)),
                                      _mm256_cvtepu8_epi32(q1), _mm256_cvtepu8_epi32(_mm_srli_si128(q1, 8))};
                for (int k = 0; k < 4; k++)
                    _mm256_storeu_ps(out + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d1, _mm256_cvtepi32_ps(w[k])), m1));
            }
        }
    }
}

static void dequantize_row_q6_K(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_block_q6_K *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i m30 = _mm256_set1_epi8(0x30);
    const __m256i off = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / FT_QK_K; i++, y += FT_QK_K) {
        const float d = f16(x[i].d);
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = loadu256(x[i].ql + 64 * h), l1 = loadu256(x[i].ql + 64 * h + 32);
            const __m256i hb = loadu256(x[i].qh + 32 * h);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
            for (int k = 0; k < 4; k++) {
                const __m256i qs = _mm256_sub_epi8(q[k], off);
                const int sb = 8 * h + 2 * k; /* sub-blocks sb (first 16) and sb + 1 */
                float *out = y + 128 * h + 32 * k;
                const __m128i q0 = _mm256_castsi256_si128(qs), q1 = _mm256_extracti128_si256(qs, 1);
                const __m256 d0 = _mm256_set1_ps(d * x[i].scales[sb]);
                const __m256 d1 = _mm256_set1_ps(d * x[i].scales[sb + 1]);
                _mm256_storeu_ps(out + 0, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q0))));
                _mm256_storeu_ps(out + 8,
                                 _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q0, 8)))));
                _mm256_storeu_ps(out + 16, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q1))));
                _mm256_storeu_ps(out + 24,
                                 _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q1, 8)))));
            }
        }
    }
}

/* ---- the table ------------------------------------------------------------------------------- */

void ft_avx2_quant_fill(struct ft_level *l) {
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
}
