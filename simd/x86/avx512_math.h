/* Vector math shared by the AVX-512 float-op files (include only from
 * files compiled with the avx512 flags of cmake/FtSimd.cmake). */
#ifndef FT_SIMD_X86_AVX512_MATH_H
#define FT_SIMD_X86_AVX512_MATH_H

#include <immintrin.h>

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
