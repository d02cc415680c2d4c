/* Reading the same bytes of 16 weight rows at once: one vpgatherdd per 4
 * bytes, which is the layout of a 16-row weight tile (a zmm of 4 bytes per
 * row). Used by the AVX-512 packers (avx512_qgemm.c, amx_qgemm_k4_vnni.c);
 * compiled with their flags. */
#ifndef FT_SIMD_X86_GATHER16_H
#define FT_SIMD_X86_GATHER16_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

/* Byte offsets of the tile's rows and the mask of those that exist. */
struct ft_rows16 {
    __m512i off;
    __mmask16 m;
};

/* Row offsets are int32: callers check ft_rows16_fit() and pack rows more
 * than 2 GiB apart (16 rows of at most 128 MiB each) another way. */
static inline int ft_rows16_fit(size_t w_row) { return w_row <= (size_t)INT32_MAX / 16; }

static inline struct ft_rows16 ft_rows16(size_t w_row, int n_rows) {
    struct ft_rows16 r;
    r.off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                               _mm512_set1_epi32((int)w_row));
    r.m = (__mmask16)((1u << n_rows) - 1u);
    return r;
}

/* The 4 bytes at p + row offset of each row (0 for missing rows). */
static inline __m512i ft_gather16(struct ft_rows16 r, const uint8_t *p) {
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), r.m, r.off, p, 1);
}

/* The half at byte 0 (lo) or 2 (hi) of each gathered word, as floats. */
static inline __m512 ft_half_lo16(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }
static inline __m512 ft_half_hi16(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16))); }

/* Q4_K/Q5_K super-block header of 16 rows at p (d/dmin word, then the 12
 * packed scale bytes), decoded lane-wise as ft_k4_scales does for one row:
 * w4[0] the scales 0..3 as bytes of each lane, w4[1] scales 4..7, w4[2]
 * mins 0..3, w4[3] mins 4..7; d and dmin as floats. */
static inline void ft_k4_scales16(struct ft_rows16 r, const uint8_t *p, __m512i w4[4], __m512 *d, __m512 *dmin) {
    const __m512i dd = ft_gather16(r, p);
    const __m512i a0 = ft_gather16(r, p + 4), a1 = ft_gather16(r, p + 8), a2 = ft_gather16(r, p + 12);
    const __m512i m3f = _mm512_set1_epi32(0x3f3f3f3f), m0f = _mm512_set1_epi32(0x0f0f0f0f),
                  m03 = _mm512_set1_epi32(0x03030303);
    w4[0] = _mm512_and_si512(a0, m3f);
    w4[1] = _mm512_or_si512(_mm512_and_si512(a2, m0f),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a0, 6), m03), 4));
    w4[2] = _mm512_and_si512(a1, m3f);
    w4[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a2, 4), m0f),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a1, 6), m03), 4));
    *d = ft_half_lo16(dd);
    *dmin = ft_half_hi16(dd);
}

/* Byte j (0..3) of each lane of w as an int32. */
static inline __m512i ft_byte16(__m512i w, int j) {
    return _mm512_and_si512(_mm512_srli_epi32(w, 8 * j), _mm512_set1_epi32(0xff));
}

/* The 256 quants of a Q4_K (qh NULL) or Q5_K super-block of 16 rows at qs
 * (qh: the Q5_K high bits), as bytes: group g (4 elements) of sub-block s
 * at out + s * stride + 64 g, 4 bytes per row. */
static inline void ft_k4_quants16(struct ft_rows16 r, const uint8_t *qs, const uint8_t *qh, uint8_t *out,
                                  size_t stride) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
    for (int g = 0; g < 8; g++) {
        /* qh bytes 4g..4g+3: bit s -> sub-block s */
        const __m512i h = qh ? ft_gather16(r, qh + 4 * g) : _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) { /* 32 bytes: sub-block 2c in the low nibbles, 2c + 1 in the high */
            const __m512i v = ft_gather16(r, qs + 32 * c + 4 * g);
            const __m512i hl = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2 * c), one), 4);
            const __m512i hh = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2 * c + 1), one), 4);
            _mm512_storeu_si512(out + (size_t)(2 * c) * stride + 64 * g, _mm512_or_si512(_mm512_and_si512(v, m4), hl));
            _mm512_storeu_si512(out + (size_t)(2 * c + 1) * stride + 64 * g,
                                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v, 4), m4), hh));
        }
    }
}

#endif
