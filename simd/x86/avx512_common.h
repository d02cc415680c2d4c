/* Helpers shared by the AVX-512 float-op files (avx512_float_gemm.c,
 * avx512_attn.c, avx512_ops.c): lane masks, a 16x16 transpose, exp.
 * Include only from files compiled with the avx512 flags of
 * cmake/FtSimd.cmake. */
#ifndef FT_SIMD_X86_AVX512_COMMON_H
#define FT_SIMD_X86_AVX512_COMMON_H

#include <immintrin.h>
#include <stdint.h>

/* Lanes [0, n) of 16, for any n (<= 0: none). */
static inline __mmask16 ft_mask16(int64_t n) {
    return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* In-place transpose of 16 rows of 16 floats. */
static inline void ft_transpose16(__m512 r[16]) {
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


/* e^x, within 2 ulp of expf on [-87.3, 88.7] (Cephes' polynomial after
 * x = n ln2 + r, |r| <= ln2/2). Inputs below the range give a tiny
 * positive value instead of a denormal or 0 -- callers that need an exact
 * 0 (masked attention scores) mask it -- and above it +inf; NaN stays NaN. */
static inline __m512 ft_exp512(__m512 x) {
    const __m512 hi = _mm512_set1_ps(88.72283935546875f), lo = _mm512_set1_ps(-87.33654022216797f);
    const __m512 x0 = x;
    const __mmask16 over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    x = _mm512_max_ps(_mm512_min_ps(x, hi), lo);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512 y = _mm512_scalef_ps(p, n);
    return _mm512_mask_mov_ps(_mm512_mask_mov_ps(y, over, _mm512_set1_ps(__builtin_inff())), nan, x0);
}

static inline float ft_hsum512(__m512 v) { return _mm512_reduce_add_ps(v); }
static inline float ft_hmax512(__m512 v) { return _mm512_reduce_max_ps(v); }

#endif
