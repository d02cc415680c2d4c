/* The integer part of a Q4_K/Q5_K super-block's dot with its Q8_K
 * activations, with AVX-512: shared by avx512's one-row dot
 * (avx512_quant.c) and the amx level's dot in its kernels' order
 * (amx_qgemm_k4.c), which differ only in the float steps after it.
 * Include in files compiled with AVX-512 F/BW/VL/VNNI. */
#ifndef FT_SIMD_X86_K4_SUMS512_H
#define FT_SIMD_X86_K4_SUMS512_H

#include "simd/kernels.h"
#include "simd/quant_ref.h"

#include <immintrin.h>
#include <stdint.h>

/* scales: the block's 12 packed bytes; qh NULL for Q4_K. Per lane:
 *   *sumi: parts of S = sum_s sc_s (q . a)_s (16 int32 lanes),
 *   *mins: parts of M = sum_s mn_s (bsum[2s] + bsum[2s+1]) (8 int32 lanes);
 * S and M are the sums of their lanes. */
static inline void ft_k4_sums512(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                                 const ft_block_q8_K *y, __m512i *sumi, __m256i *mins) {
    const struct ft_scales16 sv = ft_k4_scales(scales);
    const __m128i u = _mm_setr_epi32((int)sv.w[0], (int)sv.w[1], (int)sv.w[2], (int)sv.w[3]);
    /* each mn twice, against the 16 sums of 16 elements */
    const __m128i mn2 = _mm_shuffle_epi8(u, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
    *mins = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mn2), _mm256_loadu_si256((const __m256i *)(const void *)y->bsums));
    /* S: 64 elements (sub-blocks 2j, 2j+1) a step */
    const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(u)); /* sc 0..7 as words, in every 128 bits */
    const __m512i hq = qh ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)qh))
                          : _mm512_setzero_si512();
    const __m512i low = _mm512_set1_epi8(0x0f);
    __m512i acc = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {
        __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * j)));
        q = _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xffff0000u, q, 4), low);
        if (qh) { /* bit 2j of qh[l] is bit 4 of element 64j + l, bit 2j + 1 of 64j + 32 + l */
            const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * j))),
                                                   _mm256_set1_epi8((char)(2 << (2 * j))), 1);
            q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hq, sel), q, _mm512_set1_epi8(16));
        }
        const __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512(y->qs + 64 * j));
        /* word 2j's scale in the low 256 bits, word 2j + 1's in the high */
        const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16((short)((4 * j + 1) << 8 | 4 * j)),
                                               _mm256_set1_epi16((short)((4 * j + 3) << 8 | (4 * j + 2))), 1);
        acc = _mm512_dpwssd_epi32(acc, p, _mm512_shuffle_epi8(sc, idx));
    }
    *sumi = acc;
}

#endif
