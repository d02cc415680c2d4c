/* The integer multiply-adds of the avx2 GEMM files (avx2_qgemm.c,
 * avx2_qgemm_k4.c), which are compiled twice: for the avx2 level, and with
 * FT_AVX_VNNI for the avx-vnni level (avx_vnni_qgemm.c, cmake/FtSimd.cmake),
 * where each is one AVX-VNNI instruction. The integer results are the same
 * either way, so the two levels' floats are too.
 * Include after <immintrin.h>, in files compiled with AVX2 (and -mavxvnni
 * when FT_AVX_VNNI is set). */
#ifndef FT_SIMD_X86_DOT256_H
#define FT_SIMD_X86_DOT256_H

#include <immintrin.h>

#ifndef FT_AVX_VNNI
#define FT_AVX_VNNI 0
#endif

/* acc + the products of two groups: unsigned bytes u0, u1 times signed
 * bytes s0, s1, each 4 adjacent products summed into an int32 lane.
 * AVX2 adds the two groups' pair sums in 16 bits first (vpmaddubsw,
 * vpaddw, vpmaddwd with ones, vpaddd), which is exact only while each
 * unsigned byte stays below 64 (avx2_qgemm.c); vpdpbusd has no 16-bit step
 * and no such bound. */
static inline __m256i ft_dot_pair256(__m256i acc, __m256i u0, __m256i s0, __m256i u1, __m256i s1) {
#if FT_AVX_VNNI
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, u0, s0), u1, s1);
#else
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}

/* acc + int16 pairs a times b, each pair summed into an int32 lane. */
static inline __m256i ft_madd_add256(__m256i acc, __m256i a, __m256i b) {
#if FT_AVX_VNNI
    return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

#endif
