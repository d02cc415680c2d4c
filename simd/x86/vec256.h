/* The 256-bit vector width for the width-generic x86 kernels: the names of
 * simd/x86/vec512.h over AVX2 + FMA + F16C ymm registers, so a kernel
 * family written once over them (ops_impl.h, attn_impl.h, quant_impl.h)
 * builds for the avx2 level when its file includes this header and for the
 * avx512 level with vec512.h. Include from one file per width, built with
 * the avx2 flags of cmake/FtSimd.cmake (-mavx2 -mfma -mf16c).
 *
 * Every name computes the same floats in both headers (an add is an add,
 * a conversion rounds to nearest even); where the two widths reduce in a
 * different order or treat a tail differently, the name says what this
 * width does and the generic code may not assume more:
 *   - horizontal sums and maxima halve the vector (upper half onto lower)
 *     until one lane is left;
 *   - FTV_TAIL_IN_VECTOR is 0: AVX2 has no 16-bit masked load, and the
 *     reductions of this level finish a partial last vector with scalar
 *     code after the horizontal sum (ops_impl.h, quant_impl.h);
 *   - narrowing int32 quants to bytes saturates (vpackssdw/vpacksswb).
 *
 * Types: ftv (FTV_N floats), ftvi (FTV_N int32), ftvd (FTV_N / 2 doubles),
 * ftvm (a lane mask: all-ones lanes of a ymm here, a __mmask16 there). */
#ifndef FT_SIMD_X86_VEC256_H
#define FT_SIMD_X86_VEC256_H

#ifdef FTV_N
#error "one vector width per file: vec256.h and vec512.h both included"
#endif

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define FTV_N 8
#define FTV_BYTES 32
#define FTV_TAIL_IN_VECTOR 0

typedef __m256 ftv;
typedef __m256i ftvi;
typedef __m256d ftvd;
typedef __m256 ftvm;

/* ---- loads, stores, masks ----------------------------------------------------- */

static inline ftv ftv_zero(void) { return _mm256_setzero_ps(); }
static inline ftv ftv_set1(float f) { return _mm256_set1_ps(f); }
static inline ftv ftv_bcast(const float *p) { return _mm256_broadcast_ss(p); }
static inline ftv ftv_load(const float *p) { return _mm256_loadu_ps(p); }
static inline ftv ftv_load_a(const float *p) { return _mm256_load_ps(p); } /* FTV_BYTES-aligned */
static inline void ftv_store(float *p, ftv v) { _mm256_storeu_ps(p, v); }
static inline void ftv_store_a(float *p, ftv v) { _mm256_store_ps(p, v); }

/* Lanes [0, n) of FTV_N, for any n (<= 0: none). */
static inline ftvm ftv_mask(int64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 0 ? 0 : n > 8 ? 8 : n)), idx));
}
/* Masked-off lanes read as 0 and are not touched by stores. */
static inline ftv ftv_load_m(const float *p, ftvm m) { return _mm256_maskload_ps(p, _mm256_castps_si256(m)); }
static inline void ftv_store_m(float *p, ftvm m, ftv v) { _mm256_maskstore_ps(p, _mm256_castps_si256(m), v); }
/* FTV_N floats of p, lanes >= n zero. */
static inline ftv ftv_load_n(const float *p, int64_t n) { return n >= 8 ? ftv_load(p) : ftv_load_m(p, ftv_mask(n)); }

/* m ? b : a, lane by lane; m ? v : 0. */
static inline ftv ftv_blend(ftv a, ftv b, ftvm m) { return _mm256_blendv_ps(a, b, m); }
static inline ftv ftv_maskz(ftvm m, ftv v) { return _mm256_and_ps(m, v); }
/* m ? a + b : a (AVX2: a + (m ? b : 0), so a masked-off -0 lane may turn +0) */
static inline ftv ftv_add_m(ftv a, ftvm m, ftv b) { return _mm256_add_ps(a, _mm256_and_ps(m, b)); }
static inline unsigned ftv_mask_bits(ftvm m) { return (unsigned)_mm256_movemask_ps(m); }

/* Ordered comparisons (false on NaN) and the NaN test. */
static inline ftvm ftv_gt(ftv a, ftv b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline ftvm ftv_ge(ftv a, ftv b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline ftvm ftv_le(ftv a, ftv b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
static inline ftvm ftv_eq(ftv a, ftv b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline ftvm ftv_isnan(ftv a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }

/* Lanes whose position base + lane lies in [p0, p1]. */
static inline ftvm ftv_mask_range(int32_t base, int32_t p0, int32_t p1) {
    const __m256i lane = _mm256_add_epi32(_mm256_set1_epi32(base), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(p0), lane),
                                        _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(p1)));
    return _mm256_castsi256_ps(_mm256_andnot_si256(out, _mm256_set1_epi32(-1)));
}

/* ---- arithmetic ------------------------------------------------------------------ */

static inline ftv ftv_add(ftv a, ftv b) { return _mm256_add_ps(a, b); }
static inline ftv ftv_sub(ftv a, ftv b) { return _mm256_sub_ps(a, b); }
static inline ftv ftv_mul(ftv a, ftv b) { return _mm256_mul_ps(a, b); }
static inline ftv ftv_div(ftv a, ftv b) { return _mm256_div_ps(a, b); }
static inline ftv ftv_max(ftv a, ftv b) { return _mm256_max_ps(a, b); }
static inline ftv ftv_min(ftv a, ftv b) { return _mm256_min_ps(a, b); }
static inline ftv ftv_fmadd(ftv a, ftv b, ftv c) { return _mm256_fmadd_ps(a, b, c); }   /* a b + c */
static inline ftv ftv_fmsub(ftv a, ftv b, ftv c) { return _mm256_fmsub_ps(a, b, c); }   /* a b - c */
static inline ftv ftv_fnmadd(ftv a, ftv b, ftv c) { return _mm256_fnmadd_ps(a, b, c); } /* c - a b */
static inline ftv ftv_abs(ftv a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline ftv ftv_round(ftv a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline ftv ftv_trunc(ftv a) { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }

/* p * 2^n for integral n in [-127, 128], in two steps (2^(n/2) twice) so
 * that neither factor leaves the exponent range; exact unless the product
 * is subnormal, where it rounds once. */
static inline ftv ftv_mul_pow2(ftv p, ftv n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i h1 = _mm256_srai_epi32(ni, 1), h2 = _mm256_sub_epi32(ni, h1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h1, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* ---- reductions ------------------------------------------------------------------ */

static inline float ftv_hsum(ftv v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline float ftv_hmax(ftv v) {
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* Doubles: the lower and the upper half of v widened. */
static inline ftvd ftvd_zero(void) { return _mm256_setzero_pd(); }
static inline ftvd ftvd_add(ftvd a, ftvd b) { return _mm256_add_pd(a, b); }
static inline ftvd ftv_lo_pd(ftv v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
static inline ftvd ftv_hi_pd(ftv v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
static inline double ftvd_hsum(ftvd v) {
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

/* ---- int32 lanes ---------------------------------------------------------------- */

static inline ftvi ftvi_set1(int32_t x) { return _mm256_set1_epi32(x); }
static inline ftvi ftvi_add(ftvi a, ftvi b) { return _mm256_add_epi32(a, b); }
static inline ftvi ftvi_min(ftvi a, ftvi b) { return _mm256_min_epi32(a, b); }
static inline ftvi ftv_cvt_i32(ftv v) { return _mm256_cvtps_epi32(v); }   /* nearest even (default MXCSR) */
static inline ftvi ftv_cvtt_i32(ftv v) { return _mm256_cvttps_epi32(v); } /* toward zero */
static inline int32_t ftvi_hsum(ftvi v) {
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

static inline __m256i ftvi_pack_i8x32(const ftvi q[4]) {
    const __m256i ab = _mm256_packs_epi32(q[0], q[1]), cd = _mm256_packs_epi32(q[2], q[3]);
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 32 int32 quants (32 / FTV_N vectors, each in -128..127 when it comes from
 * a finite input) as 32 int8 in element order; out-of-range lanes saturate. */
static inline void ftvi_store_i8x32(int8_t *dst, const ftvi q[4]) {
    _mm256_storeu_si256((__m256i *)dst, ftvi_pack_i8x32(q));
}

/* The same, and the sums of quants 0..15 and 16..31: here of the stored
 * (saturated) bytes, with vpsadbw. */
static inline void ftvi_store_i8x32_sum16(int8_t *dst, const ftvi q[4], int32_t sum16[2]) {
    const __m256i p = ftvi_pack_i8x32(q);
    _mm256_storeu_si256((__m256i *)dst, p);
    /* psadbw sums |q + 128| per 8 bytes */
    const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(p, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
    const __m128i lo = _mm256_castsi256_si128(sad), hi = _mm256_extracti128_si256(sad, 1);
    sum16[0] = _mm_cvtsi128_si32(_mm_add_epi64(lo, _mm_unpackhi_epi64(lo, lo))) - 16 * 128;
    sum16[1] = _mm_cvtsi128_si32(_mm_add_epi64(hi, _mm_unpackhi_epi64(hi, hi))) - 16 * 128;
}

/* FTV_N signed bytes of p as floats. */
static inline ftv ftv_load_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* 16 bytes as floats into FTV_N-lane vectors out[0 .. 16 / FTV_N). */
static inline void ftv_from_i8x16(__m128i b, ftv out[2]) {
    out[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    out[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
}
static inline void ftv_from_u8x16(__m128i b, ftv out[2]) {
    out[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    out[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
}

/* ---- fp16 / bf16 --------------------------------------------------------------- */

/* FTV_N halves (fp16 or bf16 bits) of p, lanes >= n zero; AVX2 has no
 * 16-bit masked load, so a partial one goes through a zeroed copy. */
static inline __m128i ftv_load_u16_n(const uint16_t *p, int64_t n) {
    if (n >= 8)
        return _mm_loadu_si128((const __m128i *)p);
    uint16_t t[8] = {0};
    if (n > 0)
        memcpy(t, p, (size_t)n * sizeof(uint16_t));
    return _mm_loadu_si128((const __m128i *)t);
}
static inline ftv ftv_f16_to_ps(__m128i h) { return _mm256_cvtph_ps(h); }
static inline ftv ftv_bf16_to_ps(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline ftv ftv_load_f16(const uint16_t *p) { return ftv_f16_to_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline ftv ftv_load_bf16(const uint16_t *p) { return ftv_bf16_to_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline ftv ftv_load_f16_n(const uint16_t *p, int64_t n) { return ftv_f16_to_ps(ftv_load_u16_n(p, n)); }
static inline ftv ftv_load_bf16_n(const uint16_t *p, int64_t n) { return ftv_bf16_to_ps(ftv_load_u16_n(p, n)); }

/* vcvtps2ph, round to nearest even. */
static inline void ftv_store_f16(uint16_t *p, ftv v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* v rounded to fp16 and back. */
static inline ftv ftv_round_f16(ftv v) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* The fp16 bits of v (rounded to nearest even) as int32 lanes. */
static inline ftvi ftv_f16_bits(ftv v) {
    return _mm256_cvtepu16_epi32(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* The low 16 bits of each lane (each <= 0xffff) to p. */
static inline void ftvi_store_u16(uint16_t *p, ftvi v) {
    _mm_storeu_si128((__m128i *)p, _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

/* The same for two vectors (a then b) in one store. */
static inline void ftvi_store_u16x2(uint16_t *p, ftvi a, ftvi b) {
    /* packus works per 128-bit lane: fix the qword order afterwards */
    _mm256_storeu_si256((__m256i *)p, _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* ---- bit-level lanes (integer arithmetic on the float bits) ------------------------ */

static inline ftvi ftv_bits(ftv v) { return _mm256_castps_si256(v); }
static inline ftv ftvi_as_ps(ftvi v) { return _mm256_castsi256_ps(v); }
static inline ftvi ftvi_and(ftvi a, ftvi b) { return _mm256_and_si256(a, b); }
static inline ftvi ftvi_or(ftvi a, ftvi b) { return _mm256_or_si256(a, b); }
static inline ftvi ftvi_srli(ftvi a, int n) { return _mm256_srli_epi32(a, n); }

/* table[idx] per lane. */
static inline ftv ftv_gather(const float *table, ftvi idx) { return _mm256_i32gather_ps(table, idx, 4); }

/* ---- lane moves ------------------------------------------------------------------ */

/* Pairs of lanes (2i, 2i+1): the even lane in both, the odd in both, the
 * two swapped; odd lanes of b over a. */
static inline ftv ftv_dup_even(ftv v) { return _mm256_moveldup_ps(v); }
static inline ftv ftv_dup_odd(ftv v) { return _mm256_movehdup_ps(v); }
static inline ftv ftv_swap_pairs(ftv v) { return _mm256_permute_ps(v, 0xb1); }
static inline ftv ftv_blend_odd(ftv a, ftv b) { return _mm256_blend_ps(a, b, 0xaa); }

/* 2 FTV_N floats (a then b) -> their even-indexed and odd-indexed ones. */
static inline void ftv_deinterleave(ftv a, ftv b, ftv *even, ftv *odd) {
    const __m256i deint = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    a = _mm256_permutevar8x32_ps(a, deint);
    b = _mm256_permutevar8x32_ps(b, deint);
    *even = _mm256_permute2f128_ps(a, b, 0x20);
    *odd = _mm256_permute2f128_ps(a, b, 0x31);
}

/* In-place transpose of FTV_N rows of FTV_N floats. */
static inline void ftv_transpose(ftv r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

#endif
