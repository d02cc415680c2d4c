/* Quantized GEMM, AVX2 level (include/ft/qgemm.h, tile layouts in
 * simd/qgemm_pack.h). Compiled with -mavx2 -mfma -mf16c (cmake/FtSimd.cmake).
 *
 * Micro-kernel: 8 weight rows x 4 tokens, run twice per activation tile of
 * 8 tokens. A ymm holds 4 consecutive elements of each of the 8 rows;
 * vpmaddubsw multiplies them (unsigned) with a token's 4 broadcast
 * activation bytes (signed) into 16-bit pair sums, two groups of those are
 * added before vpmaddwd widens them to int32. That is exact only while the
 * unsigned quants stay below 64: two pairs of 63 * 127 are 32004 < 32767.
 * Every type but Q8_0 qualifies (Q6_K's 0..63 is the largest); Q8_0's
 * 0..255 would saturate, so its kernel (kernel_q8_0) multiplies signed by
 * signed instead: vpmaddubsw(|w|, sign(x, w)), one pair at a time (128 *
 * 127 * 2 = 32512 still fits), widened by vpmaddwd after every product.
 *
 * With 16 ymm registers there is no room for per-block partial sums, so for
 * the Q8_K types the activation scale D is folded into each sub-block's
 * weight scale (S * D) instead of being applied once per 256 elements.
 *
 * Weight tiles come from the portable packers of simd/qgemm_pack.h (8 rows).
 */
#include "simd/qgemm_pack.h"

#include <immintrin.h>

#define TR 8 /* weight rows per tile */
#define TT FT_QG_TT
#define TH 4 /* tokens per pass of the micro-kernel */

/* Batches from 8 tokens: measured on 2048 x 2048, one thread, data in
 * cache: vec_dot/GEMM time at 4 tokens Q4_0 1.5x but Q4_K 0.5x; at 8
 * tokens Q4_0 2.0x, Q4_K 1.6x, Q6_K 1.4x. */
#define MIN_TOKENS 8
/* Q6_K's portable unpacking costs as much as 21 tokens of its kernel
 * (ft-bench-kernels on Zen 3: pack 4.2% at 512 tokens, GEMM 74 GMAC/s,
 * vec_dot 27), so the GEMM only wins from about 12 tokens. It matters for
 * decode of several requests: Q6_K is the usual type of the output head. */
#define MIN_TOKENS_Q6_K 16

void ft_qgemm_fill_avx2(const struct ft_qgemm **table);

static inline __m256i bcast32(const uint8_t *p) { return _mm256_set1_epi32((int)ft_qg_ld32(p)); }
static inline float ldf(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

__attribute__((always_inline)) static inline void kernel_half(const uint8_t *restrict w, const uint8_t *restrict a,
                                                              int64_t k, int n_rows, int n_tok, int t0,
                                                              float *restrict out, int64_t ld, const int G,
                                                              const int ABLK, const int MINS, const int XINT) {
    const int nsub = ABLK / G;
    const int ngrp = G / 4;
    const size_t sb_bytes = ft_qg_sb_bytes(TR, G, MINS);
    const size_t ab_bytes = ft_qg_ab_bytes(G, ABLK);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 facc[TH];
    for (int t = 0; t < TH; t++)
        facc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / ABLK; b++, a += ab_bytes) {
        const uint8_t *D = a + ABLK * TT + 4 * t0;
        const uint8_t *X = a + ABLK * TT + 4 * TT + 4 * t0;
        for (int s = 0; s < nsub; s++, w += sb_bytes) {
            __m256i acc[TH];
            for (int t = 0; t < TH; t++)
                acc[t] = XINT ? bcast32(X + (s * TT + t) * 4) : _mm256_setzero_si256();
            const uint8_t *aq = a + (size_t)s * ngrp * TT * 4 + 4 * t0;
            for (int gi = 0; gi < ngrp; gi += 2) {
                const __m256i W0 = _mm256_loadu_si256((const __m256i *)(w + gi * 32));
                const __m256i W1 = _mm256_loadu_si256((const __m256i *)(w + gi * 32 + 32));
                for (int t = 0; t < TH; t++) {
                    const __m256i p0 = _mm256_maddubs_epi16(W0, bcast32(aq + (gi * TT + t) * 4));
                    const __m256i p1 = _mm256_maddubs_epi16(W1, bcast32(aq + ((gi + 1) * TT + t) * 4));
                    acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(_mm256_add_epi16(p0, p1), ones));
                }
            }
            const __m256 S = _mm256_loadu_ps((const float *)(const void *)(w + G * TR));
            if (nsub == 1) {
                for (int t = 0; t < TH; t++)
                    facc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[t]), S),
                                              _mm256_set1_ps(ldf(D + 4 * t)), facc[t]);
                if (MINS) {
                    const __m256 M = _mm256_loadu_ps((const float *)(const void *)(w + G * TR + 4 * TR));
                    for (int t = 0; t < TH; t++)
                        facc[t] = _mm256_fmadd_ps(M, _mm256_set1_ps(ldf(X + 4 * t)), facc[t]);
                }
            } else {
                for (int t = 0; t < TH; t++) {
                    const __m256 SD = _mm256_mul_ps(S, _mm256_set1_ps(ldf(D + 4 * t)));
                    facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), SD, facc[t]);
                }
                if (MINS) {
                    const __m256 M = _mm256_loadu_ps((const float *)(const void *)(w + G * TR + 4 * TR));
                    for (int t = 0; t < TH; t++)
                        facc[t] = _mm256_fmadd_ps(M, _mm256_set1_ps(ldf(X + (s * TT + t) * 4) * ldf(D + 4 * t)),
                                                  facc[t]);
                }
            }
        }
    }
    const __m256i rows = _mm256_cmpgt_epi32(_mm256_set1_epi32(n_rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int t = 0; t < TH; t++)
        if (t0 + t < n_tok)
            _mm256_maskstore_ps(out + (t0 + t) * ld, rows, facc[t]);
}

/* Q8_0: 8 rows x 4 tokens like kernel_half, but the packed quants (q + 128,
 * unsigned) are turned back into signed bytes, and each token's activation
 * bytes take the weights' signs so vpmaddubsw sees |w| (unsigned) times
 * sign(w) * x (signed): exact, no offset term. */
static void kernel_q8_0_half(const uint8_t *restrict w, const uint8_t *restrict a, int64_t k, int n_rows, int n_tok,
                             int t0, float *restrict out, int64_t ld) {
    enum { G = 32, NGRP = G / 4 };
    const size_t sb_bytes = ft_qg_sb_bytes(TR, G, 0);
    const size_t ab_bytes = ft_qg_ab_bytes(G, G);
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    __m256 facc[TH];
    for (int t = 0; t < TH; t++)
        facc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / G; b++, a += ab_bytes, w += sb_bytes) {
        const uint8_t *D = a + G * TT + 4 * t0;
        const uint8_t *aq = a + 4 * t0;
        __m256i acc[TH];
        for (int t = 0; t < TH; t++)
            acc[t] = _mm256_setzero_si256();
        for (int gi = 0; gi < NGRP; gi++) {
            const __m256i Ws = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + gi * 32)), bias);
            const __m256i Wa = _mm256_abs_epi8(Ws);
            for (int t = 0; t < TH; t++) {
                const __m256i x = _mm256_sign_epi8(bcast32(aq + (gi * TT + t) * 4), Ws);
                acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(Wa, x), ones));
            }
        }
        const __m256 S = _mm256_loadu_ps((const float *)(const void *)(w + G * TR));
        for (int t = 0; t < TH; t++)
            facc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[t]), S), _mm256_set1_ps(ldf(D + 4 * t)),
                                      facc[t]);
    }
    const __m256i rows = _mm256_cmpgt_epi32(_mm256_set1_epi32(n_rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int t = 0; t < TH; t++)
        if (t0 + t < n_tok)
            _mm256_maskstore_ps(out + (t0 + t) * ld, rows, facc[t]);
}

static void kernel_q8_0(const void *w, const void *a, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) {
    kernel_q8_0_half(w, a, k, n_rows, n_tok, 0, out, ld);
    if (n_tok > TH)
        kernel_q8_0_half(w, a, k, n_rows, n_tok, TH, out, ld);
}

#define KERNEL(name, G, ABLK, MINS, XINT)                                                                    \
    static void name(const void *w, const void *a, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) { \
        kernel_half(w, a, k, n_rows, n_tok, 0, out, ld, G, ABLK, MINS, XINT);                                \
        if (n_tok > TH)                                                                                      \
            kernel_half(w, a, k, n_rows, n_tok, TH, out, ld, G, ABLK, MINS, XINT);                           \
    }
KERNEL(kernel_q4_0_class, 32, 32, 0, 1)  /* Q4_0, Q5_0 */
KERNEL(kernel_q4_1_class, 32, 32, 1, 0)  /* Q4_1, Q5_1 */
KERNEL(kernel_k32_mins, 32, 256, 1, 0)   /* Q4_K, Q5_K */
KERNEL(kernel_k16_mins, 16, 256, 1, 0)   /* Q2_K */
KERNEL(kernel_k16_offset, 16, 256, 0, 1) /* Q3_K, Q6_K */

FT_QG_PACK_W_PORTABLE(pack_w_, TR)

/* Q4_0 by transposes: a batch of a few tokens (decode of several requests)
 * spends as long unpacking the weights as multiplying them, and the
 * portable packer moves 4 bytes at a time. Here each row's 16 quant bytes
 * are one load, a 4x4 transpose of dwords per 128-bit lane turns the 8
 * rows into "dword j of every row", and the nibble split gives the 8
 * groups. (vpgatherdd is slower than the portable packer on Zen 3.) */
static void pack_w_q4_0_fast(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (n_rows < TR) {
        pack_w_q4_0(w, w_row, n_rows, k, tile);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const size_t sb = ft_qg_sb_bytes(TR, 32, 0);
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / 32; b++, o += sb) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)sizeof(ft_block_q4_0);
        __m256i v[4];
        uint16_t d[TR];
        for (int r = 0; r < 4; r++) {
            const uint8_t *lo = p + (size_t)r * w_row, *hi = p + (size_t)(r + 4) * w_row;
            v[r] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(lo + 2))),
                                           _mm_loadu_si128((const __m128i *)(hi + 2)), 1);
            memcpy(&d[r], lo, 2);
            memcpy(&d[r + 4], hi, 2);
        }
        /* lane l of v[r] holds row r + 4l; after the transpose, t[j] holds
         * dword j of rows 0..3 (low lane) and 4..7 (high lane) */
        const __m256i a = _mm256_unpacklo_epi32(v[0], v[1]), c = _mm256_unpackhi_epi32(v[0], v[1]);
        const __m256i e = _mm256_unpacklo_epi32(v[2], v[3]), f = _mm256_unpackhi_epi32(v[2], v[3]);
        const __m256i t[4] = {_mm256_unpacklo_epi64(a, e), _mm256_unpackhi_epi64(a, e), _mm256_unpacklo_epi64(c, f),
                              _mm256_unpackhi_epi64(c, f)};
        for (int j = 0; j < 4; j++) {
            _mm256_storeu_si256((__m256i *)(void *)(o + 32 * j), _mm256_and_si256(t[j], m4));
            _mm256_storeu_si256((__m256i *)(void *)(o + 32 * (4 + j)),
                                _mm256_and_si256(_mm256_srli_epi16(t[j], 4), m4));
        }
        /* the lanes hold rows 0..3 | 4..7, so d[] is in row order */
        _mm256_storeu_ps((float *)(void *)(o + 32 * TR), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d)));
    }
}

#define PACK_A(name, ACT, G, XMODE, OFF)                                                \
    static void name(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) { \
        ft_qg_pack_a(a, a_row, n_tok, k, tile, ACT, G, XMODE, OFF);                   \
    }
PACK_A(pack_a_q8_0, FT_TYPE_Q8_0, 32, FT_QG_X_OFFSET, 0) /* kernel_q8_0 reads no X */
PACK_A(pack_a_q4_0, FT_TYPE_Q8_0, 32, FT_QG_X_OFFSET, 8)
PACK_A(pack_a_q5_0, FT_TYPE_Q8_0, 32, FT_QG_X_OFFSET, 16)
PACK_A(pack_a_q4_1, FT_TYPE_Q8_1, 32, FT_QG_X_S, 0)
PACK_A(pack_a_k32_sum, FT_TYPE_Q8_K, 32, FT_QG_X_SUM, 0)
PACK_A(pack_a_k16_sum, FT_TYPE_Q8_K, 16, FT_QG_X_SUM, 0)
PACK_A(pack_a_q3_K, FT_TYPE_Q8_K, 16, FT_QG_X_OFFSET, 4)
PACK_A(pack_a_q6_K, FT_TYPE_Q8_K, 16, FT_QG_X_OFFSET, 32)

#define SIZES(name, G, ABLK, MINS)                                                    \
    static size_t name##_w(int64_t k) { return ft_qg_w_tile_bytes(TR, G, MINS, k); } \
    static size_t name##_a(int64_t k) { return ft_qg_a_tile_bytes(G, ABLK, k); }
SIZES(size_q4_0_class, 32, 32, 0)
SIZES(size_q4_1_class, 32, 32, 1)
SIZES(size_k32_mins, 32, 256, 1)
SIZES(size_k16_mins, 16, 256, 1)
SIZES(size_k16_offset, 16, 256, 0)

#define ENTRY_MIN(T, ACT, SZ, PW, PA, KER, MIN)                                                  \
    static const struct ft_qgemm g_##T = {                                                               \
        .type = FT_TYPE_##T, .act_type = FT_TYPE_##ACT, .tile_rows = TR, .tile_tokens = TT,              \
        .min_tokens = MIN, .w_tile_size = SZ##_w, .a_tile_size = SZ##_a, .pack_w = PW, .pack_a = PA,     \
        .kernel = KER};
#define ENTRY(T, ACT, SZ, PW, PA, KER) ENTRY_MIN(T, ACT, SZ, PW, PA, KER, MIN_TOKENS)
ENTRY(Q8_0, Q8_0, size_q4_0_class, pack_w_q8_0, pack_a_q8_0, kernel_q8_0)
ENTRY(Q4_0, Q8_0, size_q4_0_class, pack_w_q4_0_fast, pack_a_q4_0, kernel_q4_0_class)
ENTRY(Q5_0, Q8_0, size_q4_0_class, pack_w_q5_0, pack_a_q5_0, kernel_q4_0_class)
ENTRY(Q4_1, Q8_1, size_q4_1_class, pack_w_q4_1, pack_a_q4_1, kernel_q4_1_class)
ENTRY(Q5_1, Q8_1, size_q4_1_class, pack_w_q5_1, pack_a_q4_1, kernel_q4_1_class)
ENTRY(Q2_K, Q8_K, size_k16_mins, pack_w_q2_K, pack_a_k16_sum, kernel_k16_mins)
ENTRY(Q3_K, Q8_K, size_k16_offset, pack_w_q3_K, pack_a_q3_K, kernel_k16_offset)
ENTRY(Q4_K, Q8_K, size_k32_mins, pack_w_q4_K, pack_a_k32_sum, kernel_k32_mins)
ENTRY(Q5_K, Q8_K, size_k32_mins, pack_w_q5_K, pack_a_k32_sum, kernel_k32_mins)
ENTRY_MIN(Q6_K, Q8_K, size_k16_offset, pack_w_q6_K, pack_a_q6_K, kernel_k16_offset, MIN_TOKENS_Q6_K)

void ft_qgemm_fill_avx2(const struct ft_qgemm **t) {
    t[FT_TYPE_Q8_0] = &g_Q8_0;
    t[FT_TYPE_Q4_0] = &g_Q4_0;
    t[FT_TYPE_Q5_0] = &g_Q5_0;
    t[FT_TYPE_Q4_1] = &g_Q4_1;
    t[FT_TYPE_Q5_1] = &g_Q5_1;
    t[FT_TYPE_Q2_K] = &g_Q2_K;
    t[FT_TYPE_Q3_K] = &g_Q3_K;
    t[FT_TYPE_Q4_K] = &g_Q4_K;
    t[FT_TYPE_Q5_K] = &g_Q5_K;
    t[FT_TYPE_Q6_K] = &g_Q6_K;
}
