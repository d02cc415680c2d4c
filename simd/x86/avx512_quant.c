/* AVX-512 kernels: the "avx512" level's type table (include/ft/cpu.h).
 * What differs from avx2_quant.c only in vector width -- the F32 / F16 /
 * BF16 rows, the Q8 quantizers, the dequantizers -- is quant_impl.h over
 * vec512.h; this file adds the integer dots and the vdpbf16ps BF16 dot.
 *
 * Compiled with -mavx512f/bw/vl/dq -mavx512vnni -mavx2 -mfma -mf16c
 * -ffp-contract=off (cmake/FtSimd.cmake) and called only when CPUID says the
 * CPU has all of them (Ice Lake / Cascade Lake servers and later, Zen 4+).
 * The BF16 dot that uses vdpbf16ps is the one function built for
 * AVX512_BF16 (a target attribute) and is installed only when the CPU has
 * it; otherwise BF16 goes through shift + FMA.
 *
 * Int8 dots use VNNI vpdpbusd (unsigned x signed bytes, 4 products per
 * int32 lane). Unsigned weights go in directly; signed ones are biased into
 * the unsigned operand and the bias times sum(y) subtracted, which keeps the
 * sums exact for every byte value. The K-quants multiply 16-bit pair sums by
 * their sub-block scales with vpdpwssd.
 *
 * 32-element blocks (Q4_0 .. Q8_0) are processed two per zmm and eight per
 * iteration: the eight half-precision scales of x and of y are gathered
 * with vpermt2w from 128-byte windows and converted with one vcvtph2ps,
 * then spread to the lanes with vpermps -- converting them one by one cost
 * as much as the dot. Each loop prefetches the weights FT_PREFETCH_DIST
 * ahead (simd/kernels.h).
 *
 * Contract (simd/kernels.h): quantizers give the reference's bytes, to_float
 * the reference's floats, vec_dot the reference's integer sums with float
 * accumulation in another order. Activations must be in -127..127 only where
 * noted (they always are when they come from a Q8 quantizer).
 */
#include "simd/level.h"
#include "simd/x86/k4_sums512.h"
#include "simd/x86/vec512.h"
#include "simd/x86/quant_impl.h" /* F32/F16/BF16, the Q8 quantizers, dequantizers; f16, prefetch_ahead */

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

static inline __m512i loadu512(const void *p) { return _mm512_loadu_si512(p); }
static inline __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline __m128i loadu128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

static inline __m128i scales16_vec(struct ft_scales16 s) {
    return _mm_setr_epi32((int)s.w[0], (int)s.w[1], (int)s.w[2], (int)s.w[3]);
}

static inline float hsum256_ps(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* Many of the loads below are broadcasts from memory: on Intel cores a
 * 128/256-bit broadcast load needs no shuffle uop, and a merge-masked one
 * only a blend, while vinserti64x4 / vshufi64x2 all compete for the one
 * shuffle port (p5) -- the kernels are bound by the two 512-bit ports. */

/* 32 bytes at a then 32 at b. */
static inline __m512i load_2x32(const void *a, const void *b) {
    return _mm512_mask_broadcast_i64x4(_mm512_castsi256_si512(loadu256(a)), 0xf0, loadu256(b));
}

/* The 32 nibbles of two Q4 blocks in element order, as unsigned bytes:
 * [lo(a) | hi(a) | lo(b) | hi(b)], 16 bytes each. */
static inline __m512i nibbles_2x32(const uint8_t *a, const uint8_t *b) {
    __m512i z = _mm512_broadcast_i32x4(loadu128(a));
    z = _mm512_mask_broadcast_i32x4(z, 0xff00, loadu128(b));  /* a a b b */
    z = _mm512_mask_srli_epi16(z, 0xff00ff00u, z, 4);        /* hi in lanes 1, 3 */
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

/* 64 nibbles of 32 bytes: [low nibbles | high nibbles] (Q4_K layout). */
static inline __m512i nibbles_64(const uint8_t *qs) {
    __m512i z = _mm512_broadcast_i64x4(loadu256(qs));
    z = _mm512_mask_srli_epi16(z, 0xffff0000u, z, 4);
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

/* The 8 half-precision fields at base + k * stride + byte_off (k = 0..7;
 * stride and byte_off even, stride 16..42 bytes) as 8 words, reading only
 * [base, base + 8 * stride): one or
 * two windows of 128 bytes, each gathered with one vpermt2w. Converting the
 * scales of the 32-element types one by one cost as much as their dot. */
#define HW_A(k) ((short)(((k) * stride + byte_off) / 2))
#define HW_B(k) ((short)(((k) * stride + byte_off - win_b) / 2))
#define HW_FROM_B(k) ((k) * stride + byte_off + 2 > 128 ? 1u << (k) : 0u)
__attribute__((always_inline)) static inline __m128i halves8(const void *base, int stride, int byte_off) {
    const uint8_t *p = base;
    const int win_b = stride >= 32 ? 4 * stride : 8 * stride - 128; /* start of window B */
    /* written out (no loops, no arrays) so the indices fold to constants
     * at -O2 too */
    const __mmask8 from_b = (__mmask8)(HW_FROM_B(0) | HW_FROM_B(1) | HW_FROM_B(2) | HW_FROM_B(3) | HW_FROM_B(4) |
                                       HW_FROM_B(5) | HW_FROM_B(6) | HW_FROM_B(7));
    const __m512i a = _mm512_permutex2var_epi16(
        loadu512(p),
        _mm512_castsi128_si512(_mm_setr_epi16(HW_A(0), HW_A(1), HW_A(2), HW_A(3), HW_A(4), HW_A(5), HW_A(6), HW_A(7))),
        loadu512(p + 64));
    if (!from_b)
        return _mm512_castsi512_si128(a);
    const __m512i b = _mm512_permutex2var_epi16(
        loadu512(p + win_b),
        _mm512_castsi128_si512(_mm_setr_epi16(HW_B(0), HW_B(1), HW_B(2), HW_B(3), HW_B(4), HW_B(5), HW_B(6), HW_B(7))),
        loadu512(p + win_b + 64));
    return _mm_mask_blend_epi16(from_b, _mm512_castsi512_si128(a), _mm512_castsi512_si128(b));
}
#undef HW_A
#undef HW_B
#undef HW_FROM_B

/* dx[k] * dy[k] for 8 blocks (the halves at byte_off of each block), as
 * the low 8 floats of a zmm. */
__attribute__((always_inline)) static inline __m512 scales8(const void *x, int xs, const void *y, int ys,
                                                            int byte_off) {
    const __m512 both = _mm512_cvtph_ps(
        _mm256_inserti128_si256(_mm256_castsi128_si256(halves8(x, xs, byte_off)), halves8(y, ys, byte_off), 1));
    return _mm512_castps256_ps512(_mm256_mul_ps(_mm512_castps512_ps256(both), _mm512_extractf32x8_ps(both, 1)));
}

/* Lanes 0..7 = D[2j], lanes 8..15 = D[2j+1], for the pair j of 8 blocks. */
static inline __m512 pair_scale(__m512 D, int j) {
    const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * j)), _mm256_set1_epi32(2 * j + 1), 1);
    return _mm512_permutexvar_ps(idx, D);
}

static inline __m512 scale_2(float a, float b) {
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

/* vdpbf16ps: 32 products per instruction, pairs summed in float. It treats
 * subnormal bf16 inputs as zero (DAZ) -- far below the tolerance of any dot
 * that matters, and the reason this is not the reference. */
__attribute__((target("avx512bf16"))) static void vec_dot_bf16_dp(int64_t n, float *restrict s,
                                                                   const void *restrict vx, const void *restrict vy) {
    const uint16_t *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) {
        prefetch_ahead(x + i, 128 * 2);
        a0 = _mm512_dpbf16_ps(a0, (__m512bh)loadu512(x + i), (__m512bh)loadu512(y + i));
        a1 = _mm512_dpbf16_ps(a1, (__m512bh)loadu512(x + i + 32), (__m512bh)loadu512(y + i + 32));
        a2 = _mm512_dpbf16_ps(a2, (__m512bh)loadu512(x + i + 64), (__m512bh)loadu512(y + i + 64));
        a3 = _mm512_dpbf16_ps(a3, (__m512bh)loadu512(x + i + 96), (__m512bh)loadu512(y + i + 96));
    }
    for (; i + 32 <= n; i += 32)
        a0 = _mm512_dpbf16_ps(a0, (__m512bh)loadu512(x + i), (__m512bh)loadu512(y + i));
    if (i < n) {
        const __mmask32 m = (__mmask32)((1ull << (n - i)) - 1u);
        a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_maskz_loadu_epi16(m, x + i),
                              (__m512bh)_mm512_maskz_loadu_epi16(m, y + i));
    }
    *s = ftv_hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* ---- 32-element weight blocks ------------------------------------------------------------ */

/* Each dot below has the same shape: pairs of blocks in a zmm, eight blocks
 * per iteration with vectorized scales, then pairs and a last single block
 * (in a ymm) with scalar scales. PAIR(a, b) yields the int32 lanes of two
 * blocks (8 lanes each) and is all that differs between types. */

/* Q8_0: x + 128 is unsigned; subtract 128 * sum(y). Exact for any bytes. */
static inline __m512i pair_q8_0(const ft_block_q8_0 *x, const ft_block_q8_0 *y) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512i xu = _mm512_xor_si512(load_2x32(x[0].qs, x[1].qs), bias);
    const __m512i yy = load_2x32(y[0].qs, y[1].qs);
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), xu, yy),
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, yy));
}

static inline __m256i one_q8_0(const ft_block_q8_0 *x, const ft_block_q8_0 *y) {
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    const __m256i yy = loadu256(y->qs);
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_xor_si256(loadu256(x->qs), bias), yy),
                            _mm256_dpbusd_epi32(_mm256_setzero_si256(), bias, yy));
}

/* Q4_0: q - 8 with q unsigned: subtract 8 * sum(y). */
static inline __m512i pair_q4_0(const ft_block_q4_0 *x, const ft_block_q8_0 *y) {
    const __m512i q = nibbles_2x32(x[0].qs, x[1].qs);
    const __m512i yy = load_2x32(y[0].qs, y[1].qs);
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q, yy),
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(8), yy));
}

static inline __m256i nibbles_32(const uint8_t *qs) {
    const __m128i t = loadu128(qs);
    return _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1),
                            _mm256_set1_epi8(0x0f));
}

static inline __m256i one_q4_0(const ft_block_q4_0 *x, const ft_block_q8_0 *y) {
    const __m256i yy = loadu256(y->qs);
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), nibbles_32(x->qs), yy),
                            _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(8), yy));
}

/* Q5: bit 4 of q[j] is bit j of qh; two blocks' qh make one 64-bit mask. */
static inline __mmask64 qh_mask_2(const uint8_t *qa, const uint8_t *qb) {
    uint32_t a, b;
    memcpy(&a, qa, 4);
    memcpy(&b, qb, 4);
    return _cvtu64_mask64((uint64_t)b << 32 | a);
}

static inline __m512i pair_q5_0(const ft_block_q5_0 *x, const ft_block_q8_0 *y) {
    __m512i q = nibbles_2x32(x[0].qs, x[1].qs);
    q = _mm512_mask_add_epi8(q, qh_mask_2(x[0].qh, x[1].qh), q, _mm512_set1_epi8(16));
    const __m512i yy = load_2x32(y[0].qs, y[1].qs);
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q, yy),
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(16), yy));
}

static inline __m256i one_q5_0(const ft_block_q5_0 *x, const ft_block_q8_0 *y) {
    uint32_t h;
    memcpy(&h, x->qh, 4);
    __m256i q = nibbles_32(x->qs);
    q = _mm256_mask_add_epi8(q, _cvtu32_mask32(h), q, _mm256_set1_epi8(16));
    const __m256i yy = loadu256(y->qs);
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), q, yy),
                            _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(16), yy));
}

static inline __m512i pair_q4_1(const ft_block_q4_1 *x, const ft_block_q8_1 *y) {
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), nibbles_2x32(x[0].qs, x[1].qs), load_2x32(y[0].qs, y[1].qs));
}

static inline __m256i one_q4_1(const ft_block_q4_1 *x, const ft_block_q8_1 *y) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), nibbles_32(x->qs), loadu256(y->qs));
}

static inline __m512i pair_q5_1(const ft_block_q5_1 *x, const ft_block_q8_1 *y) {
    __m512i q = nibbles_2x32(x[0].qs, x[1].qs);
    q = _mm512_mask_add_epi8(q, qh_mask_2(x[0].qh, x[1].qh), q, _mm512_set1_epi8(16));
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, load_2x32(y[0].qs, y[1].qs));
}

static inline __m256i one_q5_1(const ft_block_q5_1 *x, const ft_block_q8_1 *y) {
    uint32_t h;
    memcpy(&h, x->qh, 4);
    __m256i q = nibbles_32(x->qs);
    q = _mm256_mask_add_epi8(q, _cvtu32_mask32(h), q, _mm256_set1_epi8(16));
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, loadu256(y->qs));
}

/* The loop shared by the 32-element types. XT/YT: block types; PAIR/ONE:
 * the integer parts above; OFFSET: 1 for Q4_1/Q5_1, whose m * s terms
 * (x's offset times y's d * sum) are accumulated in a vector too. */
#define DOT_32(name, XT, YT, PAIR, ONE, OFFSET)                                                                 \
    static void name(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {         \
        const XT *x = vx;                                                                                      \
        const YT *y = vy;                                                                                      \
        const int64_t nb = n / 32;                                                                             \
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();                                         \
        __m256 accm = _mm256_setzero_ps();                                                                     \
        float summs = 0.0f;                                                                                    \
        int64_t i = 0;                                                                                         \
        for (; i + 8 <= nb; i += 8) {                                                                          \
            prefetch_ahead(&x[i], 8 * (int)sizeof(XT));                                                        \
            const __m512 D = scales8(&x[i], (int)sizeof(XT), &y[i], (int)sizeof(YT), 0);                       \
            if (OFFSET) /* m (byte 2 of x) times s (byte 2 of y) */                                            \
                accm = _mm256_add_ps(accm, _mm512_castps512_ps256(                                             \
                                               scales8(&x[i], (int)sizeof(XT), &y[i], (int)sizeof(YT), 2)));    \
            acc0 = _mm512_fmadd_ps(pair_scale(D, 0), _mm512_cvtepi32_ps(PAIR(&x[i + 0], &y[i + 0])), acc0);    \
            acc1 = _mm512_fmadd_ps(pair_scale(D, 1), _mm512_cvtepi32_ps(PAIR(&x[i + 2], &y[i + 2])), acc1);    \
            acc0 = _mm512_fmadd_ps(pair_scale(D, 2), _mm512_cvtepi32_ps(PAIR(&x[i + 4], &y[i + 4])), acc0);    \
            acc1 = _mm512_fmadd_ps(pair_scale(D, 3), _mm512_cvtepi32_ps(PAIR(&x[i + 6], &y[i + 6])), acc1);    \
        }                                                                                                      \
        for (; i + 2 <= nb; i += 2) {                                                                          \
            const __m512 d2 = scale_2(f16(x[i].d) * f16(y[i].d), f16(x[i + 1].d) * f16(y[i + 1].d));          \
            acc0 = _mm512_fmadd_ps(d2, _mm512_cvtepi32_ps(PAIR(&x[i], &y[i])), acc0);                          \
            if (OFFSET)                                                                                        \
                summs += ft_offset_term(&x[i], &y[i]) + ft_offset_term(&x[i + 1], &y[i + 1]);                  \
        }                                                                                                      \
        __m256 acc2 = _mm256_setzero_ps();                                                                     \
        if (i < nb) {                                                                                          \
            acc2 = _mm256_mul_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(ONE(&x[i], &y[i]))); \
            if (OFFSET)                                                                                        \
                summs += ft_offset_term(&x[i], &y[i]);                                                         \
        }                                                                                                      \
        *s = ftv_hsum(_mm512_add_ps(acc0, acc1)) + hsum256_ps(_mm256_add_ps(acc2, accm)) + summs;               \
    }

/* ---- lookup-table types: IQ4_NL, IQ4_XS, MXFP4 ------------------------------------------- */

/* The tables biased by 128, as unsigned bytes for vpdpbusd (IQ4_NL's
 * -127..113 -> 1..241, MXFP4's -12..12 -> 116..140); the bias comes off as
 * 128 * sum(y), which keeps the sums exact. */
static const int8_t k_iq4nl_s[16] = FT_KVALUES_IQ4NL;
static const int8_t k_mxfp4_s[16] = FT_KVALUES_MXFP4;

static inline __m512i lut_u8_512(const int8_t *kv) {
    return _mm512_xor_si512(_mm512_broadcast_i32x4(loadu128(kv)), _mm512_set1_epi8((char)0x80));
}

/* int32 lanes of two blocks' table values (nibbles qa, qb) times y. */
static inline __m512i pair_lut(const int8_t *kv, const uint8_t *qa, const uint8_t *qb, const int8_t *ya,
                               const int8_t *yb) {
    const __m512i xu = _mm512_shuffle_epi8(lut_u8_512(kv), nibbles_2x32(qa, qb));
    const __m512i yy = load_2x32(ya, yb);
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), xu, yy),
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), yy));
}

static inline __m256i one_lut(const int8_t *kv, const uint8_t *q, const int8_t *y) {
    const __m256i lut = _mm256_xor_si256(_mm256_broadcastsi128_si256(loadu128(kv)), _mm256_set1_epi8((char)0x80));
    const __m256i xu = _mm256_shuffle_epi8(lut, nibbles_32(q));
    const __m256i yy = loadu256(y);
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), xu, yy),
                            _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), yy));
}

static inline __m512i pair_iq4_nl(const ft_block_iq4_nl *x, const ft_block_q8_0 *y) {
    return pair_lut(k_iq4nl_s, x[0].qs, x[1].qs, y[0].qs, y[1].qs);
}

static inline __m256i one_iq4_nl(const ft_block_iq4_nl *x, const ft_block_q8_0 *y) {
    return one_lut(k_iq4nl_s, x->qs, y->qs);
}

/* MXFP4: E8M0 scales, so pairs with scalar scales (no halves8 gather). */
static void vec_dot_mxfp4_q8_0(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_mxfp4 *x = vx;
    const ft_block_q8_0 *y = vy;
    const int64_t nb = n / 32;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        prefetch_ahead(&x[i], 4 * (int)sizeof(x[i]));
        acc0 = _mm512_fmadd_ps(scale_2(ft_e8m0_to_fp32_half(x[i].e) * f16(y[i].d),
                                       ft_e8m0_to_fp32_half(x[i + 1].e) * f16(y[i + 1].d)),
                               _mm512_cvtepi32_ps(pair_lut(k_mxfp4_s, x[i].qs, x[i + 1].qs, y[i].qs, y[i + 1].qs)),
                               acc0);
        acc1 = _mm512_fmadd_ps(scale_2(ft_e8m0_to_fp32_half(x[i + 2].e) * f16(y[i + 2].d),
                                       ft_e8m0_to_fp32_half(x[i + 3].e) * f16(y[i + 3].d)),
                               _mm512_cvtepi32_ps(pair_lut(k_mxfp4_s, x[i + 2].qs, x[i + 3].qs, y[i + 2].qs, y[i + 3].qs)),
                               acc1);
    }
    __m256 acc2 = _mm256_setzero_ps();
    for (; i < nb; i++)
        acc2 = _mm256_fmadd_ps(_mm256_set1_ps(ft_e8m0_to_fp32_half(x[i].e) * f16(y[i].d)),
                               _mm256_cvtepi32_ps(one_lut(k_mxfp4_s, x[i].qs, y[i].qs)), acc2);
    *s = ftv_hsum(_mm512_add_ps(acc0, acc1)) + hsum256_ps(acc2);
}

/* IQ4_XS: two sub-blocks per zmm (lanes 0..7 and 8..15), each lane's exact
 * int32 times its sub-block's signed scale (vpmulld), one FMA per
 * super-block. */
static void vec_dot_iq4_xs_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_iq4_xs *x = vx;
    const ft_block_q8_K *y = vy;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / FT_QK_K; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        __m512i sumi = _mm512_setzero_si512();
        for (int b = 0; b < FT_QK_K / 32; b += 2) {
            const __m512i p = pair_lut(k_iq4nl_s, x[i].qs + 16 * b, x[i].qs + 16 * b + 16, y[i].qs + 32 * b,
                                       y[i].qs + 32 * b + 32);
            const __m512i sc = _mm512_inserti64x4(_mm512_set1_epi32(ft_iq4_xs_scale(&x[i], b) - 32),
                                                  _mm256_set1_epi32(ft_iq4_xs_scale(&x[i], b + 1) - 32), 1);
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(p, sc));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(f16(x[i].d) * y[i].d), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = ftv_hsum(acc);
}

/* m * s of one Q4_1/Q5_1 block: the half at byte 2 of x (m) and of y (s). */
static inline float ft_offset_term(const void *xb, const void *yb) {
    uint16_t m, s;
    memcpy(&m, (const uint8_t *)xb + 2, 2);
    memcpy(&s, (const uint8_t *)yb + 2, 2);
    return f16(m) * f16(s);
}

DOT_32(vec_dot_q8_0_q8_0, ft_block_q8_0, ft_block_q8_0, pair_q8_0, one_q8_0, 0)
DOT_32(vec_dot_q4_0_q8_0, ft_block_q4_0, ft_block_q8_0, pair_q4_0, one_q4_0, 0)
DOT_32(vec_dot_q5_0_q8_0, ft_block_q5_0, ft_block_q8_0, pair_q5_0, one_q5_0, 0)
DOT_32(vec_dot_q4_1_q8_1, ft_block_q4_1, ft_block_q8_1, pair_q4_1, one_q4_1, 1)
DOT_32(vec_dot_q5_1_q8_1, ft_block_q5_1, ft_block_q8_1, pair_q5_1, one_q5_1, 1)
DOT_32(vec_dot_iq4_nl_q8_0, ft_block_iq4_nl, ft_block_q8_0, pair_iq4_nl, one_iq4_nl, 0)

/* ---- K-quants ------------------------------------------------------------------------------ */

/* vpermw indices for 16-element sub-blocks: zmm j of a 256-element block
 * holds sub-blocks 4j..4j+3, one per 128-bit lane, so lane t takes scale
 * word 4j + t. */
static inline __m512i sub16_idx(int j) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_setr_m128i(_mm_set1_epi16((short)(4 * j)), _mm_set1_epi16((short)(4 * j + 1)))),
        _mm256_setr_m128i(_mm_set1_epi16((short)(4 * j + 2)), _mm_set1_epi16((short)(4 * j + 3))), 1);
}

/* 2-bit fields of 32 bytes, for 128 elements: [q&3 | q>>2&3] and
 * [q>>4&3 | q>>6&3] (Q2_K/Q3_K qs layout). */
static inline void crumbs_128(const uint8_t *qs, __m512i *a, __m512i *b) {
    const __m256i q = loadu256(qs);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 2), 1);
    const __m512i m3 = _mm512_set1_epi8(3);
    *a = _mm512_and_si512(z, m3);
    *b = _mm512_and_si512(_mm512_srli_epi16(z, 4), m3);
}

static void vec_dot_q2_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q2_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        const float d = y[i].d * f16(x[i].d);
        const float dmin = y[i].d * f16(x[i].dmin);
        const __m128i sm = loadu128(x[i].scales);
        const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m4));
        accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_madd_epi16(mn16, loadu256(y[i].bsums))),
                               accm);
        const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sm, m4)));
        __m512i sumi = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512i a, b;
            crumbs_128(x[i].qs + 32 * h, &a, &b);
            const __m512i pa = _mm512_maddubs_epi16(a, loadu512(y[i].qs + 128 * h));
            const __m512i pb = _mm512_maddubs_epi16(b, loadu512(y[i].qs + 128 * h + 64));
            sumi = _mm512_dpwssd_epi32(sumi, pa, _mm512_permutexvar_epi16(sub16_idx(2 * h), sc));
            sumi = _mm512_dpwssd_epi32(sumi, pb, _mm512_permutexvar_epi16(sub16_idx(2 * h + 1), sc));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = ftv_hsum(acc) - hsum256_ps(accm);
}

/* Q3_K: u = low2 | hbit << 2 in 0..7 is q + 4; the 4 comes back through
 * bsums: sum sc*q*y = sum sc*u*y - 4 * sum sc*bsum. */
static void vec_dot_q3_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q3_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    const __m512i four = _mm512_set1_epi8(4);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        const float d = y[i].d * f16(x[i].d);
        const __m256i sc16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(scales16_vec(ft_q3k_scales(x[i].scales))), _mm256_set1_epi16(32));
        const __m256i corr = _mm256_madd_epi16(sc16, loadu256(y[i].bsums));
        __m512i sumi = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 2)));
        const __m512i sc = _mm512_castsi256_si512(sc16);
        const __m512i hm = _mm512_broadcast_i64x4(loadu256(x[i].hmask));
        for (int h = 0; h < 2; h++) {
            __m512i a, b;
            crumbs_128(x[i].qs + 32 * h, &a, &b);
            /* hmask bit 4h + k belongs to 32-element chunk k of this half */
            const __m512i sel_a = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (4 * h))),
                                                     _mm256_set1_epi8((char)(1 << (4 * h + 1))), 1);
            const __m512i sel_b = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (4 * h + 2))),
                                                     _mm256_set1_epi8((char)(1 << (4 * h + 3))), 1);
            a = _mm512_mask_add_epi8(a, _mm512_test_epi8_mask(hm, sel_a), a, four);
            b = _mm512_mask_add_epi8(b, _mm512_test_epi8_mask(hm, sel_b), b, four);
            const __m512i pa = _mm512_maddubs_epi16(a, loadu512(y[i].qs + 128 * h));
            const __m512i pb = _mm512_maddubs_epi16(b, loadu512(y[i].qs + 128 * h + 64));
            sumi = _mm512_dpwssd_epi32(sumi, pa, _mm512_permutexvar_epi16(sub16_idx(2 * h), sc));
            sumi = _mm512_dpwssd_epi32(sumi, pb, _mm512_permutexvar_epi16(sub16_idx(2 * h + 1), sc));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = ftv_hsum(acc);
}

/* Q4_K / Q5_K: 8 sub-blocks of 32, 6-bit scale and min. One zmm holds 64
 * elements = sub-blocks 2j (low half) and 2j+1 (high half). qh is NULL for
 * Q4_K. Returns dmin * sum(mn * bsums) for the caller to subtract. */
static inline void dot_k4_block(const uint8_t *restrict packed, uint16_t xd, uint16_t xdmin,
                                const uint8_t *restrict qs, const uint8_t *restrict qh,
                                const ft_block_q8_K *restrict y, __m512 *acc, __m256 *accm) {
    const float d = y->d * f16(xd);
    const float dmin = y->d * f16(xdmin);
    __m512i sumi;
    __m256i mins;
    ft_k4_sums512(packed, qs, qh, y, &sumi, &mins);
    *accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(mins), *accm);
    *acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), *acc);
}

static void vec_dot_q4_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q4_K *x = vx;
    const ft_block_q8_K *y = vy;
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / FT_QK_K; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        dot_k4_block(x[i].scales, x[i].d, x[i].dmin, x[i].qs, NULL, &y[i], &acc, &accm);
    }
    *s = ftv_hsum(acc) - hsum256_ps(accm);
}

static void vec_dot_q5_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q5_K *x = vx;
    const ft_block_q8_K *y = vy;
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / FT_QK_K; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        dot_k4_block(x[i].scales, x[i].d, x[i].dmin, x[i].qs, x[i].qh, &y[i], &acc, &accm);
    }
    *s = ftv_hsum(acc) - hsum256_ps(accm);
}

/* The 6-bit quants of one 128-element half of a Q6_K block, unsigned
 * (0..63): a = elements 0..63, b = 64..127. */
static inline void q6_half(const uint8_t *ql, const uint8_t *qh, __m512i *a, __m512i *b) {
    const __m512i l = loadu512(ql);
    const __m256i h = loadu256(qh);
    const __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    *a = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_slli_epi16(hz, 4), m30));
    *b = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(hz, m30));
}

/* Q6_K: q - 32 with q unsigned; the 32 comes back through bsums. */
static void vec_dot_q6_K_q8_K(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) {
    const ft_block_q6_K *x = vx;
    const ft_block_q8_K *y = vy;
    const int64_t nb = n / FT_QK_K;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(&x[i], (int)sizeof(x[i]));
        const float d = y[i].d * f16(x[i].d);
        const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(x[i].scales));
        const __m256i corr = _mm256_madd_epi16(sc16, loadu256(y[i].bsums));
        __m512i sumi = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5)));
        const __m512i sc = _mm512_castsi256_si512(sc16);
        for (int h = 0; h < 2; h++) {
            __m512i a, b;
            q6_half(x[i].ql + 64 * h, x[i].qh + 32 * h, &a, &b);
            const __m512i pa = _mm512_maddubs_epi16(a, loadu512(y[i].qs + 128 * h));
            const __m512i pb = _mm512_maddubs_epi16(b, loadu512(y[i].qs + 128 * h + 64));
            sumi = _mm512_dpwssd_epi32(sumi, pa, _mm512_permutexvar_epi16(sub16_idx(2 * h), sc));
            sumi = _mm512_dpwssd_epi32(sumi, pb, _mm512_permutexvar_epi16(sub16_idx(2 * h + 1), sc));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = ftv_hsum(acc);
}

/* ---- the table ---------------------------------------------------------------------------------- */

void ft_avx512_quant_fill_types(struct ft_type_info *t, bool have_bf16) {
    quant_fill_common(t);
    if (have_bf16)
        t[FT_TYPE_BF16].vec_dot = vec_dot_bf16_dp;
    t[FT_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0;
    t[FT_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0;
    t[FT_TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1;
    t[FT_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0;
    t[FT_TYPE_Q5_1].vec_dot = vec_dot_q5_1_q8_1;
    t[FT_TYPE_Q2_K].vec_dot = vec_dot_q2_K_q8_K;
    t[FT_TYPE_Q3_K].vec_dot = vec_dot_q3_K_q8_K;
    t[FT_TYPE_Q4_K].vec_dot = vec_dot_q4_K_q8_K;
    t[FT_TYPE_Q5_K].vec_dot = vec_dot_q5_K_q8_K;
    t[FT_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K;
    t[FT_TYPE_IQ4_NL].vec_dot = vec_dot_iq4_nl_q8_0;
    t[FT_TYPE_IQ4_XS].vec_dot = vec_dot_iq4_xs_q8_K;
    t[FT_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0;
}

void ft_avx512_quant_fill(struct ft_level *l) { ft_avx512_quant_fill_types(l->types, ft_cpu_info()->avx512_bf16); }
