/* 8 rows of bytes as "dword j of every row": the transpose the avx2
 * packers (avx2_qgemm.c, avx2_qgemm_k4.c) build their 8-row tiles with.
 * Include after <immintrin.h>, in files compiled with AVX2. */
#ifndef FT_SIMD_X86_ROWS8_H
#define FT_SIMD_X86_ROWS8_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

/* 16 bytes at p of each of the 8 rows (w_row bytes apart), transposed:
 * t[j] holds dword j of them, rows 0..3 in the low lane, 4..7 in the high. */
static inline void ft_rows8_dwords4(const uint8_t *p, size_t w_row, __m256i t[4]) {
    __m256i v[4];
    for (int r = 0; r < 4; r++)
        v[r] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + (size_t)r * w_row))),
                                       _mm_loadu_si128((const __m128i *)(p + (size_t)(r + 4) * w_row)), 1);
    const __m256i a = _mm256_unpacklo_epi32(v[0], v[1]), c = _mm256_unpackhi_epi32(v[0], v[1]);
    const __m256i e = _mm256_unpacklo_epi32(v[2], v[3]), f = _mm256_unpackhi_epi32(v[2], v[3]);
    t[0] = _mm256_unpacklo_epi64(a, e);
    t[1] = _mm256_unpackhi_epi64(a, e);
    t[2] = _mm256_unpacklo_epi64(c, f);
    t[3] = _mm256_unpackhi_epi64(c, f);
}

#endif
