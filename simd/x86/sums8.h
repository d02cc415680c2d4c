/* Eight blocks' int32 lane sums reduced to one vector, block k in lane k,
 * for the one-row dots that add in their GEMM's order (avx2_quant.c: per
 * block acc = ((float) isum * dx) * dy + acc).
 * Include in files compiled with AVX2. */
#ifndef FT_SIMD_X86_SUMS8_H
#define FT_SIMD_X86_SUMS8_H

#include <immintrin.h>

/* v0..v7: 8 int32 lanes each; lane k of the result is the sum of vk's (exact). */
static inline __m256i ft_sums8(__m256i v0, __m256i v1, __m256i v2, __m256i v3, __m256i v4, __m256i v5, __m256i v6,
                               __m256i v7) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v4, v5), _mm256_hadd_epi32(v6, v7));
    /* a: blocks 0..3, their low lanes' sums then their high lanes' */
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* The sum of v's 8 int32 lanes. */
static inline int ft_sum8(__m256i v) {
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    return _mm_cvtsi128_si32(_mm_add_epi32(r, _mm_shuffle_epi32(r, 1)));
}

#endif
