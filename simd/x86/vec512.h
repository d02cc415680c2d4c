/* The 512-bit vector width for the width-generic x86 kernels: the names of
 * simd/x86/vec256.h (see there) over AVX-512 zmm registers and mask
 * registers. Include from one file per width, built with the avx512 flags
 * of cmake/FtSimd.cmake.
 *
 * What this width does where the two may differ:
 *   - horizontal sums and maxima halve the vector (upper half onto lower)
 *     until one lane is left, as vec256.h's do (_mm512_reduce_add_ps is
 *     that tree);
 *   - FTV_TAIL_IN_VECTOR is 1: a partial last vector is a masked load, and
 *     reductions fold it into their vector accumulators;
 *   - narrowing int32 quants to bytes truncates (vpmovdb).
 *
 * Types: ftv (FTV_N floats), ftvi (FTV_N int32), ftvd (FTV_N / 2 doubles),
 * ftvm (a __mmask16). */
#ifndef FT_SIMD_X86_VEC512_H
#define FT_SIMD_X86_VEC512_H

#ifdef FTV_N
#error "one vector width per file: vec256.h and vec512.h both included"
#endif

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#define FTV_N 16
#define FTV_BYTES 64
#define FTV_TAIL_IN_VECTOR 1

typedef __m512 ftv;
typedef __m512i ftvi;
typedef __m512d ftvd;
typedef __mmask16 ftvm;

/* ---- loads, stores, masks ----------------------------------------------------- */

static inline ftv ftv_zero(void) { return _mm512_setzero_ps(); }
static inline ftv ftv_set1(float f) { return _mm512_set1_ps(f); }
static inline ftv ftv_bcast(const float *p) { return _mm512_set1_ps(*p); }
static inline ftv ftv_load(const float *p) { return _mm512_loadu_ps(p); }
static inline ftv ftv_load_a(const float *p) { return _mm512_load_ps(p); } /* FTV_BYTES-aligned */
static inline void ftv_store(float *p, ftv v) { _mm512_storeu_ps(p, v); }
static inline void ftv_store_a(float *p, ftv v) { _mm512_store_ps(p, v); }

/* Lanes [0, n) of FTV_N, for any n (<= 0: none). */
static inline ftvm ftv_mask(int64_t n) {
    return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}
/* Masked-off lanes read as 0 and are not touched by stores. */
static inline ftv ftv_load_m(const float *p, ftvm m) { return _mm512_maskz_loadu_ps(m, p); }
static inline void ftv_store_m(float *p, ftvm m, ftv v) { _mm512_mask_storeu_ps(p, m, v); }
/* FTV_N floats of p, lanes >= n zero. */
static inline ftv ftv_load_n(const float *p, int64_t n) { return ftv_load_m(p, ftv_mask(n)); }

/* m ? b : a, lane by lane; m ? v : 0. */
static inline ftv ftv_blend(ftv a, ftv b, ftvm m) { return _mm512_mask_mov_ps(a, m, b); }
static inline ftv ftv_maskz(ftvm m, ftv v) { return _mm512_maskz_mov_ps(m, v); }
/* m ? a + b : a */
static inline ftv ftv_add_m(ftv a, ftvm m, ftv b) { return _mm512_mask_add_ps(a, m, a, b); }
static inline unsigned ftv_mask_bits(ftvm m) { return (unsigned)m; }

/* Ordered comparisons (false on NaN) and the NaN test. */
static inline ftvm ftv_gt(ftv a, ftv b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline ftvm ftv_ge(ftv a, ftv b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
static inline ftvm ftv_le(ftv a, ftv b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
static inline ftvm ftv_eq(ftv a, ftv b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
static inline ftvm ftv_isnan(ftv a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }

/* Lanes whose position base + lane lies in [p0, p1]. */
static inline ftvm ftv_mask_range(int32_t base, int32_t p0, int32_t p1) {
    const __m512i lane = _mm512_add_epi32(_mm512_set1_epi32(base),
                                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    return _mm512_cmp_epi32_mask(lane, _mm512_set1_epi32(p0), _MM_CMPINT_NLT) &
           _mm512_cmp_epi32_mask(lane, _mm512_set1_epi32(p1), _MM_CMPINT_LE);
}

/* ---- arithmetic ------------------------------------------------------------------ */

static inline ftv ftv_add(ftv a, ftv b) { return _mm512_add_ps(a, b); }
static inline ftv ftv_sub(ftv a, ftv b) { return _mm512_sub_ps(a, b); }
static inline ftv ftv_mul(ftv a, ftv b) { return _mm512_mul_ps(a, b); }
static inline ftv ftv_div(ftv a, ftv b) { return _mm512_div_ps(a, b); }
static inline ftv ftv_max(ftv a, ftv b) { return _mm512_max_ps(a, b); }
static inline ftv ftv_min(ftv a, ftv b) { return _mm512_min_ps(a, b); }
static inline ftv ftv_fmadd(ftv a, ftv b, ftv c) { return _mm512_fmadd_ps(a, b, c); }   /* a b + c */
static inline ftv ftv_fmsub(ftv a, ftv b, ftv c) { return _mm512_fmsub_ps(a, b, c); }   /* a b - c */
static inline ftv ftv_fnmadd(ftv a, ftv b, ftv c) { return _mm512_fnmadd_ps(a, b, c); } /* c - a b */
static inline ftv ftv_abs(ftv a) { return _mm512_abs_ps(a); }
static inline ftv ftv_round(ftv a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline ftv ftv_trunc(ftv a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }

/* p * 2^n for integral n (vscalefps: one rounding, only where the product
 * is subnormal, as vec256.h's two steps). */
static inline ftv ftv_mul_pow2(ftv p, ftv n) { return _mm512_scalef_ps(p, n); }

/* ---- reductions ------------------------------------------------------------------ */

static inline float ftv_hsum(ftv v) { return _mm512_reduce_add_ps(v); }
static inline float ftv_hmax(ftv v) { return _mm512_reduce_max_ps(v); }

/* Doubles: the lower and the upper half of v widened. */
static inline ftvd ftvd_zero(void) { return _mm512_setzero_pd(); }
static inline ftvd ftvd_add(ftvd a, ftvd b) { return _mm512_add_pd(a, b); }
static inline ftvd ftv_lo_pd(ftv v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
static inline ftvd ftv_hi_pd(ftv v) { return _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)); }
static inline double ftvd_hsum(ftvd v) { return _mm512_reduce_add_pd(v); }

/* ---- int32 lanes ---------------------------------------------------------------- */

static inline ftvi ftvi_set1(int32_t x) { return _mm512_set1_epi32(x); }
static inline ftvi ftvi_add(ftvi a, ftvi b) { return _mm512_add_epi32(a, b); }
static inline ftvi ftvi_min(ftvi a, ftvi b) { return _mm512_min_epi32(a, b); }
static inline ftvi ftv_cvt_i32(ftv v) { return _mm512_cvtps_epi32(v); }   /* nearest even (default MXCSR) */
static inline ftvi ftv_cvtt_i32(ftv v) { return _mm512_cvttps_epi32(v); } /* toward zero */
static inline int32_t ftvi_hsum(ftvi v) { return _mm512_reduce_add_epi32(v); }

/* 32 int32 quants (32 / FTV_N vectors, each in -128..127 when it comes from
 * a finite input) as 32 int8 in element order; out-of-range lanes keep
 * their low byte. */
static inline void ftvi_store_i8x32(int8_t *dst, const ftvi q[2]) {
    _mm_storeu_si128((__m128i *)dst, _mm512_cvtepi32_epi8(q[0]));
    _mm_storeu_si128((__m128i *)(dst + 16), _mm512_cvtepi32_epi8(q[1]));
}

/* The same, and the sums of quants 0..15 and 16..31: here of the int32
 * lanes (they agree with the bytes' whenever the quants fit a byte). */
static inline void ftvi_store_i8x32_sum16(int8_t *dst, const ftvi q[2], int32_t sum16[2]) {
    ftvi_store_i8x32(dst, q);
    sum16[0] = _mm512_reduce_add_epi32(q[0]);
    sum16[1] = _mm512_reduce_add_epi32(q[1]);
}

/* FTV_N signed bytes of p as floats. */
static inline ftv ftv_load_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* 16 bytes as floats into FTV_N-lane vectors out[0 .. 16 / FTV_N). */
static inline void ftv_from_i8x16(__m128i b, ftv out[1]) { out[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)); }
static inline void ftv_from_u8x16(__m128i b, ftv out[1]) { out[0] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)); }

/* ---- fp16 / bf16 --------------------------------------------------------------- */

/* FTV_N halves (fp16 or bf16 bits) of p, lanes >= n zero. */
static inline __m256i ftv_load_u16_n(const uint16_t *p, int64_t n) { return _mm256_maskz_loadu_epi16(ftv_mask(n), p); }
static inline ftv ftv_f16_to_ps(__m256i h) { return _mm512_cvtph_ps(h); }
static inline ftv ftv_bf16_to_ps(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline ftv ftv_load_f16(const uint16_t *p) { return ftv_f16_to_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline ftv ftv_load_bf16(const uint16_t *p) { return ftv_bf16_to_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline ftv ftv_load_f16_n(const uint16_t *p, int64_t n) { return ftv_f16_to_ps(ftv_load_u16_n(p, n)); }
static inline ftv ftv_load_bf16_n(const uint16_t *p, int64_t n) { return ftv_bf16_to_ps(ftv_load_u16_n(p, n)); }

/* vcvtps2ph, round to nearest even. */
static inline void ftv_store_f16(uint16_t *p, ftv v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* v rounded to fp16 and back. */
static inline ftv ftv_round_f16(ftv v) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* The fp16 bits of v (rounded to nearest even) as int32 lanes. */
static inline ftvi ftv_f16_bits(ftv v) {
    return _mm512_cvtepu16_epi32(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* The low 16 bits of each lane (each <= 0xffff) to p. */
static inline void ftvi_store_u16(uint16_t *p, ftvi v) { _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(v)); }

/* The same for two vectors (a then b). */
static inline void ftvi_store_u16x2(uint16_t *p, ftvi a, ftvi b) {
    ftvi_store_u16(p, a);
    ftvi_store_u16(p + 16, b);
}

/* ---- bit-level lanes (integer arithmetic on the float bits) ------------------------ */

static inline ftvi ftv_bits(ftv v) { return _mm512_castps_si512(v); }
static inline ftv ftvi_as_ps(ftvi v) { return _mm512_castsi512_ps(v); }
static inline ftvi ftvi_and(ftvi a, ftvi b) { return _mm512_and_si512(a, b); }
static inline ftvi ftvi_or(ftvi a, ftvi b) { return _mm512_or_si512(a, b); }
static inline ftvi ftvi_srli(ftvi a, int n) { return _mm512_srli_epi32(a, (unsigned)n); }

/* table[idx] per lane. */
static inline ftv ftv_gather(const float *table, ftvi idx) { return _mm512_i32gather_ps(idx, table, 4); }

/* ---- lane moves ------------------------------------------------------------------ */

/* Pairs of lanes (2i, 2i+1): the even lane in both, the odd in both, the
 * two swapped; odd lanes of b over a. */
static inline ftv ftv_dup_even(ftv v) { return _mm512_moveldup_ps(v); }
static inline ftv ftv_dup_odd(ftv v) { return _mm512_movehdup_ps(v); }
static inline ftv ftv_swap_pairs(ftv v) { return _mm512_permute_ps(v, 0xb1); }
static inline ftv ftv_blend_odd(ftv a, ftv b) { return _mm512_mask_blend_ps(0xaaaa, a, b); }

/* 2 FTV_N floats (a then b) -> their even-indexed and odd-indexed ones. */
static inline void ftv_deinterleave(ftv a, ftv b, ftv *even, ftv *odd) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    *even = _mm512_permutex2var_ps(a, ev, b);
    *odd = _mm512_permutex2var_ps(a, _mm512_add_epi32(ev, _mm512_set1_epi32(1)), b);
}

/* In-place transpose of FTV_N rows of FTV_N floats. */
static inline void ftv_transpose(ftv r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 2; j++) {
            const __m512d a = _mm512_castps_pd(t[4 * i + j]), b = _mm512_castps_pd(t[4 * i + j + 2]);
            r[4 * i + 2 * j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
            r[4 * i + 2 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        }
    }
    /* r[4i + c] now holds columns {c, c+4, c+8, c+12} of rows 4i..4i+3 in
     * its four 128-bit lanes; gather lanes across the four groups. */
    for (int c = 0; c < 4; c++) {
        const __m512 a = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);      /* lanes 0,2 | 0,2 */
        const __m512 b = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);      /* lanes 1,3 | 1,3 */
        const __m512 d = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        const __m512 e = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
        t[c] = _mm512_shuffle_f32x4(a, d, 0x88);      /* lane 0 of each group: column c */
        t[8 + c] = _mm512_shuffle_f32x4(a, d, 0xdd);  /* lane 2: column c + 8 */
        t[4 + c] = _mm512_shuffle_f32x4(b, e, 0x88);  /* lane 1: column c + 4 */
        t[12 + c] = _mm512_shuffle_f32x4(b, e, 0xdd); /* lane 3: column c + 12 */
    }
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

#endif
