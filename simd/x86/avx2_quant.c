/* AVX2 + FMA + F16C kernels: the "avx2" level's type table (include/ft/cpu.h).
 * What differs from avx512_quant.c only in vector width -- the F32 / F16 /
 * BF16 rows, the Q8 quantizers, the dequantizers -- is quant_impl.h over
 * vec256.h; this file adds the integer dots.
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
#include "simd/level.h"
#include "simd/x86/vec256.h"
#include "simd/x86/quant_impl.h" /* F32/F16/BF16, the Q8 quantizers, dequantizers; f16, prefetch_ahead */
#include "simd/x86/sums8.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

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
        *s = ftv_hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), accm)) + summs;                                  \
    }

/* Q8_0, Q4_0 and Q5_0 add in their GEMM's order instead (below). */
DOT_32(vec_dot_q4_1_q8_1, ft_block_q4_1, ft_block_q8_1, block_q4_1, 1)
DOT_32(vec_dot_q5_1_q8_1, ft_block_q5_1, ft_block_q8_1, block_q5_1, 1)

/* Q8_0 / Q4_0 / Q5_0 in the order of the level's GEMM (avx2_qgemm.c,
 * kernel_half and kernel_q8_0): per block, in order,
 *   acc = ((float) isum * dx) * dy + acc     (the multiply rounded, the add fused)
 * with isum the block's exact integer sum. So a (row, token) gets the same
 * floats in a batch of any size (decode, multi-stream batches, a prompt's
 * tail after a prefix-cache hit, prefill): tests/unit/test_qgemm.c checks
 * it bit for bit. Eight blocks' sums and products are vectors; only the
 * chain of adds is serial. */
#define DOT_32_GEMM_ORDER(name, XT, BLOCK)                                                                      \
    static void name(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {         \
        const XT *x = vx;                                                                                      \
        const ft_block_q8_0 *y = vy;                                                                           \
        const int64_t nb = n / 32;                                                                             \
        float acc = 0.0f, t8[8], dy8[8];                                                                       \
        int64_t i = 0;                                                                                         \
        for (; i + 8 <= nb; i += 8) {                                                                          \
            prefetch_ahead(&x[i], 8 * (int)sizeof(XT));                                                        \
            const __m256i is = ft_sums8(BLOCK(&x[i], &y[i]), BLOCK(&x[i + 1], &y[i + 1]), BLOCK(&x[i + 2], &y[i + 2]), \
                                     BLOCK(&x[i + 3], &y[i + 3]), BLOCK(&x[i + 4], &y[i + 4]),                  \
                                     BLOCK(&x[i + 5], &y[i + 5]), BLOCK(&x[i + 6], &y[i + 6]),                  \
                                     BLOCK(&x[i + 7], &y[i + 7]));                                              \
            _mm256_storeu_ps(t8, _mm256_mul_ps(_mm256_cvtepi32_ps(is), halves8(&x[i], sizeof(XT), 0)));       \
            _mm256_storeu_ps(dy8, halves8(&y[i], sizeof(ft_block_q8_0), 0));                                  \
            for (int k = 0; k < 8; k++)                                                                        \
                acc = fmaf(t8[k], dy8[k], acc);                                                                \
        }                                                                                                      \
        for (; i < nb; i++)                                                                                    \
            acc = fmaf((float)ft_sum8(BLOCK(&x[i], &y[i])) * f16(x[i].d), f16(y[i].d), acc);                      \
        *s = acc;                                                                                              \
    }
DOT_32_GEMM_ORDER(vec_dot_q8_0_gemm_order, ft_block_q8_0, block_q8_0)
DOT_32_GEMM_ORDER(vec_dot_q4_0_gemm_order, ft_block_q4_0, block_q4_0)
DOT_32_GEMM_ORDER(vec_dot_q5_0_gemm_order, ft_block_q5_0, block_q5_0)
#undef DOT_32_GEMM_ORDER

/* ---- lookup-table types: IQ4_NL, IQ4_XS, MXFP4 ------------------------------------------- */

static const int8_t k_iq4nl[16] = FT_KVALUES_IQ4NL;
static const int8_t k_mxfp4[16] = FT_KVALUES_MXFP4;

/* The 32 signed values a block's nibbles pick from table kv, in element
 * order (vpshufb looks up in each 128-bit lane; the table is in both). */
static inline __m256i lut32(const int8_t *kv, const uint8_t *qs) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(loadu128(kv)), nibbles32(qs));
}

/* |table value| <= 127, so dot_i8i8's pair sums stay below 2^15. */
static inline __m256i block_iq4_nl(const ft_block_iq4_nl *x, const ft_block_q8_0 *y) {
    return dot_i8i8(lut32(k_iq4nl, x->qs), loadu256(y->qs));
}

DOT_32(vec_dot_iq4_nl_q8_0, ft_block_iq4_nl, ft_block_q8_0, block_iq4_nl, 0)

/* MXFP4's scale is a power of two (E8M0), not a half: no halves8 here. */
static void vec_dot_mxfp4_q8_0(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_mxfp4 *x = vx;
    const ft_block_q8_0 *y = vy;
    const int64_t nb = n / 32;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        prefetch_ahead(&x[i], 2 * (int)sizeof(x[i]));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(ft_e8m0_to_fp32_half(x[i].e) * f16(y[i].d)),
                               _mm256_cvtepi32_ps(dot_i8i8(lut32(k_mxfp4, x[i].qs), loadu256(y[i].qs))), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(ft_e8m0_to_fp32_half(x[i + 1].e) * f16(y[i + 1].d)),
                               _mm256_cvtepi32_ps(dot_i8i8(lut32(k_mxfp4, x[i + 1].qs), loadu256(y[i + 1].qs))), acc1);
    }
    if (i < nb)
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(ft_e8m0_to_fp32_half(x[i].e) * f16(y[i].d)),
                               _mm256_cvtepi32_ps(dot_i8i8(lut32(k_mxfp4, x[i].qs), loadu256(y[i].qs))), acc0);
    *s = ftv_hsum(_mm256_add_ps(acc0, acc1));
}

/* IQ4_XS: per sub-block of 32 the pair sums (vpmaddubsw) times the signed
 * 6-bit scale (vpmaddwd), 8 int32 lanes per super-block, one FMA. */
static void vec_dot_iq4_xs_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_iq4_xs *x = vx;
    const ft_block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / FT_QK_K; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        __m256i sumi = _mm256_setzero_si256();
        for (int b = 0; b < FT_QK_K / 32; b++) {
            const __m256i q = lut32(k_iq4nl, x[i].qs + 16 * b);
            const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q),
                                                     _mm256_sign_epi8(loadu256(y[i].qs + 32 * b), q));
            const __m256i sc = _mm256_set1_epi16((short)(ft_iq4_xs_scale(&x[i], b) - 32));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, sc));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = ftv_hsum(acc);
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
    *s = ftv_hsum(acc);
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
    *s = ftv_hsum(acc);
}

/* Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scale and min; qh (Q5_K) is
 * NULL for Q4_K. The integer sums of one super-block: *sumi's lanes add
 * up to S = sum_s sc_s (q . a)_s, *mins' to
 * M = sum_s mn_s (bsum[2s] + bsum[2s+1]). */
static inline void k4_sums(const uint8_t *restrict packed, const uint8_t *restrict qs, const uint8_t *restrict qh,
                           const ft_block_q8_K *restrict y, __m256i *sumi, __m128i *mins) {
    const __m256i sm16 = _mm256_cvtepu8_epi16(scales16_vec(ft_k4_scales(packed))); /* sc 0..7 | mn 0..7 */
    const __m128i bs = _mm_hadd_epi16(loadu128(y->bsums), loadu128(y->bsums + 8));
    __m128i prod = _mm_madd_epi16(_mm256_extracti128_si256(sm16, 1), bs);
    const __m256i scales = _mm256_permute4x64_epi64(sm16, 0x44); /* sc 0..7 in both lanes */
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i hb = qh ? loadu256(qh) : _mm256_setzero_si256();
    __m256i acc = _mm256_setzero_si256();
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
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(pl, ph));
    }
    *sumi = acc;
    *mins = prod;
}

/* ggml's order: S's lanes scaled by D d in floats, the mins apart. */
static inline float dot_k4_block(const uint8_t *restrict packed, uint16_t xd, uint16_t xdmin, const uint8_t *restrict qs,
                                 const uint8_t *restrict qh, const ft_block_q8_K *restrict y, __m256 *acc) {
    const float d = y->d * f16(xd);
    const float dmin = y->d * f16(xdmin);
    __m256i sumi;
    __m128i prod;
    k4_sums(packed, qs, qh, y, &sumi, &prod);
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), *acc);
    prod = _mm_add_epi32(prod, _mm_unpackhi_epi64(prod, prod));
    prod = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, _MM_SHUFFLE(2, 3, 0, 1)));
    return dmin * (float)_mm_cvtsi128_si32(prod);
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
    *s = ftv_hsum(acc) - mins;
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
    *s = ftv_hsum(acc) - mins;
}

/* The order of the Q4_K/Q5_K GEMM with integer scales (avx2_qgemm_k4.c,
 * the amx kernels): per super-block acc = (d S - dmin M) D + acc, both
 * fused, with S and M reduced to integers first. A (row, token) then gets
 * the same floats in a batch of any size: decode, a prompt's tail
 * evaluated again after a prefix-cache hit, and prefill. */
#define DOT_IN_GEMM_ORDER(T, QH)                                                                                 \
    static void vec_dot_##T##_gemm_order(int64_t n, float *restrict s, const void *restrict vx,                  \
                                         const void *restrict vy) {                                              \
        const ft_block_##T *x = vx;                                                                              \
        const ft_block_q8_K *y = vy;                                                                             \
        float acc = 0.0f;                                                                                        \
        for (int64_t i = 0; i < n / FT_QK_K; i++) {                                                              \
            prefetch_ahead(&x[i], (int)sizeof(x[i]));                                                            \
            __m256i sumi;                                                                                        \
            __m128i mins;                                                                                        \
            k4_sums(x[i].scales, x[i].qs, QH, &y[i], &sumi, &mins);                                              \
            /* S and M together: [S, M, S, M] */                                                                 \
            const __m128i v = _mm_add_epi32(_mm256_castsi256_si128(sumi), _mm256_extracti128_si256(sumi, 1));    \
            const __m128i h = _mm_hadd_epi32(v, mins);                                                           \
            const __m128 sm = _mm_cvtepi32_ps(_mm_hadd_epi32(h, h));                                             \
            const float f = fmaf(f16(x[i].d), _mm_cvtss_f32(sm),                                                 \
                                 -(f16(x[i].dmin) * _mm_cvtss_f32(_mm_shuffle_ps(sm, sm, 1))));                  \
            acc = fmaf(f, y[i].d, acc);                                                                          \
        }                                                                                                        \
        *s = acc;                                                                                                \
    }
DOT_IN_GEMM_ORDER(q4_K, NULL)
DOT_IN_GEMM_ORDER(q5_K, x[i].qh)
#undef DOT_IN_GEMM_ORDER

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
    *s = ftv_hsum(acc);
}

/* ---- the table ------------------------------------------------------------------------------- */

void ft_avx2_quant_fill(struct ft_level *l) {
    struct ft_type_info *t = l->types;
    quant_fill_common(t);
    /* Q8_0, Q4_0, Q5_0, Q4_K, Q5_K: in the order of the level's GEMM */
    t[FT_TYPE_Q8_0].vec_dot = vec_dot_q8_0_gemm_order;
    t[FT_TYPE_Q4_0].vec_dot = vec_dot_q4_0_gemm_order;
    t[FT_TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1;
    t[FT_TYPE_Q5_0].vec_dot = vec_dot_q5_0_gemm_order;
    t[FT_TYPE_Q5_1].vec_dot = vec_dot_q5_1_q8_1;
    t[FT_TYPE_Q2_K].vec_dot = vec_dot_q2_K_q8_K;
    t[FT_TYPE_Q3_K].vec_dot = vec_dot_q3_K_q8_K;
    /* in the order of the level's Q4_K/Q5_K GEMM (avx2_qgemm_k4.c) unless
     * FT_KQUANT_INT_SCALES=0 keeps that GEMM and this order out */
    t[FT_TYPE_Q4_K].vec_dot = ft_k4_int_scales() ? vec_dot_q4_K_gemm_order : vec_dot_q4_K_q8_K;
    t[FT_TYPE_Q5_K].vec_dot = ft_k4_int_scales() ? vec_dot_q5_K_gemm_order : vec_dot_q5_K_q8_K;
    t[FT_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K;
    t[FT_TYPE_IQ4_NL].vec_dot = vec_dot_iq4_nl_q8_0;
    t[FT_TYPE_IQ4_XS].vec_dot = vec_dot_iq4_xs_q8_K;
    t[FT_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0;
}
