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
 *
 * The avx-vnni level compiles this file again with FT_AVX_VNNI
 * (avx_vnni_qgemm.c): there vpdpbusd takes the products into the int32
 * sums directly (simd/x86/dot256.h), with no 16-bit step and so no bound on
 * the unsigned quants, and Q8_0 (and the lookup-table types packed as it)
 * goes through kernel_half like Q4_0: its tiles hold q + 128, and the
 * activations' X (-128 times their sum) starts each block's sum. The
 * integer sums, and so the floats, are the avx2 level's.
 */
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/qgemm_pack.h"
#include "simd/x86/dot256.h"
#include "simd/x86/rows8.h"

#include <immintrin.h>

#if FT_AVX_VNNI
#define QGEMM_FILL ft_avx_vnni_qgemm_fill
#define QGEMM_K4 ft_avx_vnni_qgemm_k4
#define Q8_BIAS 0x80 /* Q8_0's tiles hold q + 128, unsigned */
#else
#define QGEMM_FILL ft_avx2_qgemm_fill
#define QGEMM_K4 ft_avx2_qgemm_k4
#define Q8_BIAS 0 /* Q8_0's tiles hold q, signed (kernel_q8_0) */
#endif

#define TR 8 /* weight rows per tile */
#define TT FT_QG_TT
#define TH 4 /* tokens per pass of the micro-kernel */

/* Batches from 8 tokens: measured on 2048 x 2048, one thread, data in
 * cache: vec_dot/GEMM time at 4 tokens Q4_0 1.5x but Q4_K 0.5x; at 8
 * tokens Q4_0 2.0x, Q4_K 1.6x, Q6_K 1.4x. */
#define MIN_TOKENS 8
/* From 4 tokens for the types whose tiles are packed vector-wise (Q8_0,
 * Q4_1, Q5_0, Q5_1 and the lookup-table types: ENTRY4). Decode of 4
 * streams, 1.24B, 2 threads, t/s GEMM vs vec_dot: avx2 Q8_0 37.3 vs 30.1,
 * IQ4_NL 44.8 vs 36.4, IQ4_XS 42.4 vs 39.3, Q4_1 43.4 vs 37.2, Q5_0 36.6 vs
 * 25.3, Q5_1 32.4 vs 31.2; avx-vnni Q8_0 44.3 vs 30.1, IQ4_NL 55.9 vs
 * 36.8, Q5_0 39.9 vs 26.3. The types packed byte by byte lose there (Q2_K
 * 34.5 vs 52.9). */
#define MIN_TOKENS_FAST_PACK 4


static inline __m256i bcast32(const uint8_t *p) { return _mm256_set1_epi32((int)ft_qg_ld32(p)); }
static inline float ldf(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* Bytes per block of a repacked Q4_0 tile (repack_w_q4_0): 4 ymm of the
 * 8 rows' quant bytes as they are in the file, dword j of row i in dword i
 * of ymm j (low nibbles: elements 4j..4j+3, high: 16+4j..), then the 8
 * rows' f16 scales. As many bytes as the 8 rows' blocks. */
#define RW_Q4_0_BLOCK (4 * 32 + 2 * TR)

/* Repacked Q6_K tiles (the usual output head; repack_w_q6_K), per super-
 * block of 256 elements: the 8 rows' f16 d, then per sub-block of 16
 * elements its 4 groups G0..G3 (4 elements of each row, as the unpacked
 * tile has them) in 6 bits: N0 = G0 | G2 << 4 and N1 = G1 | G3 << 4 (low
 * nibbles), H = the high 2 bits of G0..G3 at bits 0, 2, 4, 6; then the 8
 * rows' int8 scales of the sub-block. 1680 bytes: the 8 rows' blocks. */
#define RW_Q6_K_SUB (3 * 32 + TR)
#define RW_Q6_K_SUPER (2 * TR + 16 * RW_Q6_K_SUB)

/* The 4 groups of a repacked Q6_K sub-block, as bytes 0..63. */
static inline void rw_q6_K_groups(const uint8_t *q, __m256i W[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const __m256i N0 = _mm256_loadu_si256((const __m256i *)(const void *)q);
    const __m256i N1 = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32));
    const __m256i H = _mm256_loadu_si256((const __m256i *)(const void *)(q + 64));
    W[0] = _mm256_or_si256(_mm256_and_si256(N0, m4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
    W[1] = _mm256_or_si256(_mm256_and_si256(N1, m4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
    W[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(N0, 4), m4), _mm256_and_si256(H, m30));
    W[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(N1, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
}

/* S = d * scale of the 8 rows for a sub-block whose scales are at sc. */
static inline __m256 rw_q6_K_scales(__m256 d, const uint8_t *sc) {
    const __m128i s8 = _mm_loadl_epi64((const __m128i *)(const void *)sc);
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s8)));
}

/* Which repacked tile kernel_half reads, if any. */
enum { RAW_NONE, RAW_Q4_0, RAW_Q6_K };

/* Tokens t0..t0+NT-1 (NT <= TH) of an activation tile of TA tokens (TT, or
 * 1: pack_a1's) times a weight tile.
 * RAW: the weight tile is a repacked Q4_0 (G 32) or Q6_K (G 16) one, whose
 * quants are rebuilt here, in registers, instead of by a packer: the same
 * integer sums and float steps as on the unpacked tile, so the same floats. */
__attribute__((always_inline)) static inline void kernel_half(const uint8_t *restrict w, const uint8_t *restrict a,
                                                              int64_t k, int n_rows, int n_tok, int t0,
                                                              float *restrict out, int64_t ld, const int G,
                                                              const int ABLK, const int MINS, const int XINT,
                                                              const int NT, const int RAW, const int TA) {
    const int nsub = ABLK / G;
    const int ngrp = G / 4;
    const size_t sb_bytes = RAW == RAW_Q4_0   ? RW_Q4_0_BLOCK
                            : RAW == RAW_Q6_K ? RW_Q6_K_SUB
                                              : ft_qg_sb_bytes(TR, G, MINS);
    const size_t ab_bytes = ft_qg_ab_bytes_tt(G, ABLK, TA);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 facc[TH];
    FT_UNROLL(16) for (int t = 0; t < NT; t++)
        facc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / ABLK; b++, a += ab_bytes) {
        const uint8_t *D = a + ABLK * TA + 4 * t0;
        const uint8_t *X = a + ABLK * TA + 4 * TA + 4 * t0;
        __m256 d6 = _mm256_setzero_ps(); /* RAW_Q6_K: the super-block's d of the 8 rows */
        if (RAW == RAW_Q6_K) {
            d6 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)w));
            w += 2 * TR;
        }
        for (int s = 0; s < nsub; s++, w += sb_bytes) {
            if (RAW) { /* repacked tiles are decode's weight stream, read once: ahead, as vec_dot does */
                _mm_prefetch((const char *)w + FT_PREFETCH_DIST, _MM_HINT_T0);
                _mm_prefetch((const char *)w + FT_PREFETCH_DIST + 64, _MM_HINT_T0);
            }
            __m256i acc[TH];
            FT_UNROLL(16) for (int t = 0; t < NT; t++)
                acc[t] = XINT ? bcast32(X + (s * TA + t) * 4) : _mm256_setzero_si256();
            const uint8_t *aq = a + (size_t)s * ngrp * TA * 4 + 4 * t0;
            __m256i W6[4];
            if (RAW == RAW_Q6_K)
                rw_q6_K_groups(w, W6);
            for (int gi = 0; gi < ngrp; gi += 2) {
                /* the pair of groups (g0, g1) that W0 and W1 hold */
                const int g0 = RAW == RAW_Q4_0 ? gi / 2 : gi, g1 = RAW == RAW_Q4_0 ? gi / 2 + 4 : gi + 1;
                __m256i W0, W1;
                if (RAW == RAW_Q4_0) {
                    const __m256i T = _mm256_loadu_si256((const __m256i *)(w + gi / 2 * 32));
                    W0 = _mm256_and_si256(T, m4);
                    W1 = _mm256_and_si256(_mm256_srli_epi16(T, 4), m4);
                } else if (RAW == RAW_Q6_K) {
                    W0 = W6[gi];
                    W1 = W6[gi + 1];
                } else {
                    W0 = _mm256_loadu_si256((const __m256i *)(w + gi * 32));
                    W1 = _mm256_loadu_si256((const __m256i *)(w + gi * 32 + 32));
                }
                FT_UNROLL(16) for (int t = 0; t < NT; t++) {
                    acc[t] = ft_dot_pair256(acc[t], W0, bcast32(aq + (g0 * TA + t) * 4), W1,
                                            bcast32(aq + (g1 * TA + t) * 4));
                    FT_KEEP_ORDER(acc[t]);
                }
            }
            const __m256 S = RAW == RAW_Q4_0   ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 4 * 32)))
                             : RAW == RAW_Q6_K ? rw_q6_K_scales(d6, w + 96)
                                               : _mm256_loadu_ps((const float *)(const void *)(w + G * TR));
            if (nsub == 1) {
                FT_UNROLL(16) for (int t = 0; t < NT; t++)
                    facc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[t]), S),
                                              _mm256_set1_ps(ldf(D + 4 * t)), facc[t]);
                if (MINS) {
                    const __m256 M = _mm256_loadu_ps((const float *)(const void *)(w + G * TR + 4 * TR));
                    FT_UNROLL(16) for (int t = 0; t < NT; t++)
                        facc[t] = _mm256_fmadd_ps(M, _mm256_set1_ps(ldf(X + 4 * t)), facc[t]);
                }
            } else {
                FT_UNROLL(16) for (int t = 0; t < NT; t++) {
                    const __m256 SD = _mm256_mul_ps(S, _mm256_set1_ps(ldf(D + 4 * t)));
                    facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), SD, facc[t]);
                }
                if (MINS) {
                    const __m256 M = _mm256_loadu_ps((const float *)(const void *)(w + G * TR + 4 * TR));
                    FT_UNROLL(16) for (int t = 0; t < NT; t++)
                        facc[t] = _mm256_fmadd_ps(M, _mm256_set1_ps(ldf(X + (s * TA + t) * 4) * ldf(D + 4 * t)),
                                                  facc[t]);
                }
            }
        }
    }
    const __m256i rows = _mm256_cmpgt_epi32(_mm256_set1_epi32(n_rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    FT_UNROLL(16) for (int t = 0; t < NT; t++)
        if (t0 + t < n_tok)
            _mm256_maskstore_ps(out + (t0 + t) * ld, rows, facc[t]);
}

#if !FT_AVX_VNNI
/* Q8_0: 8 rows x 4 tokens like kernel_half, but the tile holds the quants
 * as signed bytes (pack_w_q8_0_tile; the lookup-table types' values too),
 * and each token's activation bytes take the weights' signs so vpmaddubsw
 * sees |w| (unsigned) times sign(w) * x (signed): exact, no offset term. */
static void kernel_q8_0_half(const uint8_t *restrict w, const uint8_t *restrict a, int64_t k, int n_rows, int n_tok,
                             int t0, float *restrict out, int64_t ld) {
    enum { G = 32, NGRP = G / 4 };
    const size_t sb_bytes = ft_qg_sb_bytes(TR, G, 0);
    const size_t ab_bytes = ft_qg_ab_bytes(G, G);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 facc[TH];
    FT_UNROLL(16) for (int t = 0; t < TH; t++)
        facc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / G; b++, a += ab_bytes, w += sb_bytes) {
        const uint8_t *D = a + G * TT + 4 * t0;
        const uint8_t *aq = a + 4 * t0;
        __m256i acc[TH];
        FT_UNROLL(16) for (int t = 0; t < TH; t++)
            acc[t] = _mm256_setzero_si256();
        for (int gi = 0; gi < NGRP; gi++) {
            const __m256i Ws = _mm256_loadu_si256((const __m256i *)(w + gi * 32));
            const __m256i Wa = _mm256_abs_epi8(Ws);
            FT_UNROLL(16) for (int t = 0; t < TH; t++) {
                const __m256i x = _mm256_sign_epi8(bcast32(aq + (gi * TT + t) * 4), Ws);
                acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(Wa, x), ones));
                FT_KEEP_ORDER(acc[t]);
            }
        }
        const __m256 S = _mm256_loadu_ps((const float *)(const void *)(w + G * TR));
        FT_UNROLL(16) for (int t = 0; t < TH; t++)
            facc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[t]), S), _mm256_set1_ps(ldf(D + 4 * t)),
                                      facc[t]);
    }
    const __m256i rows = _mm256_cmpgt_epi32(_mm256_set1_epi32(n_rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    FT_UNROLL(16) for (int t = 0; t < TH; t++)
        if (t0 + t < n_tok)
            _mm256_maskstore_ps(out + (t0 + t) * ld, rows, facc[t]);
}

static void kernel_q8_0(const void *w, const void *a, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) {
    kernel_q8_0_half(w, a, k, n_rows, n_tok, 0, out, ld);
    if (n_tok > TH)
        kernel_q8_0_half(w, a, k, n_rows, n_tok, TH, out, ld);
}
#endif

#define KERNEL(name, G, ABLK, MINS, XINT)                                                                    \
    static void name(const void *w, const void *a, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) { \
        kernel_half(w, a, k, n_rows, n_tok, 0, out, ld, G, ABLK, MINS, XINT, TH, RAW_NONE, TT);                  \
        if (n_tok > TH)                                                                                      \
            kernel_half(w, a, k, n_rows, n_tok, TH, out, ld, G, ABLK, MINS, XINT, TH, RAW_NONE, TT);             \
    }
KERNEL(kernel_q4_0_class, 32, 32, 0, 1)  /* Q4_0, Q5_0 */
KERNEL(kernel_q4_1_class, 32, 32, 1, 0)  /* Q4_1, Q5_1 */
KERNEL(kernel_k32_mins, 32, 256, 1, 0)   /* Q4_K, Q5_K */
KERNEL(kernel_k16_mins, 16, 256, 1, 0)   /* Q2_K */
KERNEL(kernel_k16_offset, 16, 256, 0, 1) /* Q3_K, Q6_K */


/* Repacked tiles: tokens t0..t0+nt-1 (nt 1..4) a pass, only as many
 * token passes as there are tokens, so a single token (decode) costs a
 * quarter of a 4-token pass. */
#define RW_KERNEL(name, G, ABLK, RAW)                                                                            \
    static void name##_pass(const void *w, const void *a, int64_t k, int n_rows, int n_tok, int t0, int nt,     \
                            float *out, int64_t ld) {                                                            \
        switch (nt) {                                                                                            \
        case 1: kernel_half(w, a, k, n_rows, n_tok, t0, out, ld, G, ABLK, 0, 1, 1, RAW, TT); break;                  \
        case 2: kernel_half(w, a, k, n_rows, n_tok, t0, out, ld, G, ABLK, 0, 1, 2, RAW, TT); break;                  \
        case 3: kernel_half(w, a, k, n_rows, n_tok, t0, out, ld, G, ABLK, 0, 1, 3, RAW, TT); break;                  \
        default: kernel_half(w, a, k, n_rows, n_tok, t0, out, ld, G, ABLK, 0, 1, 4, RAW, TT); break;                 \
        }                                                                                                        \
    }                                                                                                            \
    static void name(const void *w, const void *a, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) {  \
        name##_pass(w, a, k, n_rows, n_tok, 0, n_tok < TH ? n_tok : TH, out, ld);                                \
        if (n_tok > TH)                                                                                          \
            name##_pass(w, a, k, n_rows, n_tok, TH, n_tok - TH, out, ld);                                        \
    }
RW_KERNEL(kernel_rw_q4_0, 32, 32, RAW_Q4_0)
RW_KERNEL(kernel_rw_q6_K, 16, FT_QK_K, RAW_Q6_K)

/* One token on a one-token activation tile (pack_a1): decode of one stream.
 * The same integer sums and float steps as kernel_rw's one-token pass. */
#define RW1_KERNEL(name, G, ABLK, RAW)                                                    \
    static void name(const void *w, const void *a, int64_t k, int n_rows, float *out) { \
        kernel_half(w, a, k, n_rows, 1, 0, out, 0, G, ABLK, 0, 1, 1, RAW, 1);            \
    }
RW1_KERNEL(kernel_rw1_q4_0, 32, 32, RAW_Q4_0)
RW1_KERNEL(kernel_rw1_q6_K, 16, FT_QK_K, RAW_Q6_K)

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
        __m256i t[4];
        ft_rows8_dwords4(p + 2, w_row, t);
        uint16_t d[TR];
        for (int r = 0; r < TR; r++)
            memcpy(&d[r], p + (size_t)r * w_row, 2);
        for (int j = 0; j < 4; j++) {
            _mm256_storeu_si256((__m256i *)(void *)(o + 32 * j), _mm256_and_si256(t[j], m4));
            _mm256_storeu_si256((__m256i *)(void *)(o + 32 * (4 + j)),
                                _mm256_and_si256(_mm256_srli_epi16(t[j], 4), m4));
        }
        _mm256_storeu_ps((float *)(void *)(o + 32 * TR), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d)));
    }
}

/* Q4_0 rows, once at load, into the tiles kernel_rw_q4_0 reads: the same
 * transposes as pack_w_q4_0_fast without the nibble split, so a tile is
 * as small as the rows and decode streams it as it would the rows. */
static size_t rw_size_q4_0(int64_t k) { return (size_t)(k / 32) * RW_Q4_0_BLOCK; }

static void repack_w_q4_0(const void *w, size_t w_row, int64_t k, void *tile) {
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / 32; b++, o += RW_Q4_0_BLOCK) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)sizeof(ft_block_q4_0);
        __m256i t[4];
        ft_rows8_dwords4(p + 2, w_row, t);
        for (int j = 0; j < 4; j++)
            _mm256_storeu_si256((__m256i *)(void *)(o + 32 * j), t[j]);
        for (int r = 0; r < TR; r++)
            memcpy(o + 4 * 32 + 2 * r, p + (size_t)r * w_row, 2);
    }
}

/* A repacked Q4_0 tile into kernel_q4_0_class's (large batches): the
 * nibble split of pack_w_q4_0_fast, without its transposes. */
static void unpack_rw_q4_0(const void *rw, int64_t k, void *tile) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const size_t sb = ft_qg_sb_bytes(TR, 32, 0);
    const uint8_t *t = rw;
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / 32; b++, t += RW_Q4_0_BLOCK, o += sb) {
        for (int j = 0; j < 4; j++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(t + 32 * j));
            _mm256_storeu_si256((__m256i *)(void *)(o + 32 * j), _mm256_and_si256(v, m4));
            _mm256_storeu_si256((__m256i *)(void *)(o + 32 * (4 + j)), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        }
        _mm256_storeu_ps((float *)(void *)(o + 32 * TR),
                         _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(t + 4 * 32))));
    }
}

static void rw_row_q4_0(const void *tile, int r, int64_t k, void *row) {
    const uint8_t *t = tile;
    ft_block_q4_0 *o = row;
    for (int64_t b = 0; b < k / 32; b++, t += RW_Q4_0_BLOCK) {
        memcpy(&o[b].d, t + 4 * 32 + 2 * r, 2);
        for (int j = 0; j < 4; j++)
            memcpy(o[b].qs + 4 * j, t + 32 * j + 4 * r, 4);
    }
}

/* Q6_K the same way (the usual type of the output head, which decode of
 * several requests multiplies through the GEMM): element 128h + 32k + l is
 * nibble k/2 of ql[64h + 32(k&1) + l] with bits 2k.. of qh[32h + l] on top. */
static void pack_w_q6_K_fast(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (n_rows < TR) {
        pack_w_q6_K(w, w_row, n_rows, k, tile);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
    const size_t sb = ft_qg_sb_bytes(TR, 16, 0);
    uint8_t *o = tile;
    float S[16];
    for (int64_t b = 0; b < k / FT_QK_K; b++, o += 16 * sb) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)sizeof(ft_block_q6_K);
        for (int r = 0; r < TR; r++) {
            ft_qg_scales_q6_K(p + (size_t)r * w_row, S, NULL);
            for (int sub = 0; sub < 16; sub++)
                memcpy(o + (size_t)sub * sb + 16 * TR + 4 * r, &S[sub], 4);
        }
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 2; c++) { /* l0 = 16c + 4j */
                __m256i la[4], lb[4], qh[4];
                ft_rows8_dwords4(p + 64 * h + 16 * c, w_row, la);
                ft_rows8_dwords4(p + 64 * h + 32 + 16 * c, w_row, lb);
                ft_rows8_dwords4(p + 128 + 32 * h + 16 * c, w_row, qh);
                for (int j = 0; j < 4; j++) {
                    const __m256i q[4] = {
                        _mm256_or_si256(_mm256_and_si256(la[j], m4), _mm256_slli_epi16(_mm256_and_si256(qh[j], m3), 4)),
                        _mm256_or_si256(_mm256_and_si256(lb[j], m4),
                                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[j], 2), m3), 4)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(la[j], 4), m4),
                                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[j], 4), m3), 4)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lb[j], 4), m4),
                                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[j], 6), m3), 4))};
                    /* element 128h + 32kk + 16c + 4j: sub-block 8h + 2kk + c, group j */
                    for (int kk = 0; kk < 4; kk++)
                        _mm256_storeu_si256((__m256i *)(void *)(o + (size_t)(8 * h + 2 * kk + c) * sb + 32 * j), q[kk]);
                }
            }
    }
}


static size_t rw_size_q6_K(int64_t k) { return (size_t)(k / FT_QK_K) * RW_Q6_K_SUPER; }

static void repack_w_q6_K(const void *w, size_t w_row, int64_t k, void *tile) {
    enum { SB = 16 * TR + 4 * TR }; /* ft_qg_sb_bytes(TR, 16, 0) */
    uint8_t un[16 * SB];           /* one super-block, unpacked */
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / FT_QK_K; b++, o += RW_Q6_K_SUPER) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)sizeof(ft_block_q6_K);
        pack_w_q6_K_fast(p, w_row, TR, FT_QK_K, un);
        for (int r = 0; r < TR; r++) {
            const ft_block_q6_K *blk = (const void *)(p + (size_t)r * w_row);
            memcpy(o + 2 * r, &blk->d, 2);
            for (int sub = 0; sub < 16; sub++)
                o[2 * TR + sub * RW_Q6_K_SUB + 96 + r] = (uint8_t)blk->scales[sub];
        }
        for (int sub = 0; sub < 16; sub++) {
            const uint8_t *u = un + (size_t)sub * SB;
            __m256i g[4];
            for (int j = 0; j < 4; j++)
                g[j] = _mm256_loadu_si256((const __m256i *)(const void *)(u + 32 * j));
            const __m256i n0 =
                _mm256_or_si256(_mm256_and_si256(g[0], m4), _mm256_slli_epi16(_mm256_and_si256(g[2], m4), 4));
            const __m256i n1 =
                _mm256_or_si256(_mm256_and_si256(g[1], m4), _mm256_slli_epi16(_mm256_and_si256(g[3], m4), 4));
            __m256i h = _mm256_setzero_si256();
            for (int j = 0; j < 4; j++)
                h = _mm256_or_si256(h, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(g[j], 4), m3), 2 * j));
            uint8_t *q = o + 2 * TR + sub * RW_Q6_K_SUB;
            _mm256_storeu_si256((__m256i *)(void *)q, n0);
            _mm256_storeu_si256((__m256i *)(void *)(q + 32), n1);
            _mm256_storeu_si256((__m256i *)(void *)(q + 64), h);
        }
    }
}

static void rw_row_q6_K(const void *tile, int r, int64_t k, void *row) {
    const uint8_t *t = tile;
    ft_block_q6_K *o = row;
    for (int64_t b = 0; b < k / FT_QK_K; b++, t += RW_Q6_K_SUPER) {
        ft_block_q6_K *blk = &o[b];
        memset(blk, 0, sizeof(*blk));
        memcpy(&blk->d, t + 2 * r, 2);
        for (int sub = 0; sub < 16; sub++) {
            const uint8_t *q = t + 2 * TR + sub * RW_Q6_K_SUB;
            blk->scales[sub] = (int8_t)q[96 + r];
            for (int j = 0; j < 4; j++)
                for (int i = 0; i < 4; i++) {
                    const uint8_t n = q[32 * (j & 1) + 4 * r + i], h = q[64 + 4 * r + i];
                    const int v = ((j < 2 ? n : n >> 4) & 0x0f) | ((h >> (2 * j)) & 3) << 4;
                    const int e = 16 * sub + 4 * j + i, hf = e / 128, kk = e % 128 / 32, l = e % 32;
                    blk->ql[64 * hf + 32 * (kk & 1) + l] |= (uint8_t)((v & 0x0f) << (4 * (kk >> 1)));
                    blk->qh[32 * hf + l] |= (uint8_t)((v >> 4) << (2 * kk));
                }
        }
    }
}


/* A repacked Q6_K tile into kernel_k16_offset's (large batches). */
static void unpack_rw_q6_K(const void *rw, int64_t k, void *tile) {
    const size_t sb = ft_qg_sb_bytes(TR, 16, 0);
    const uint8_t *t = rw;
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / FT_QK_K; b++, t += RW_Q6_K_SUPER) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)t));
        for (int sub = 0; sub < 16; sub++, o += sb) {
            const uint8_t *q = t + 2 * TR + sub * RW_Q6_K_SUB;
            __m256i W[4];
            rw_q6_K_groups(q, W);
            for (int j = 0; j < 4; j++)
                _mm256_storeu_si256((__m256i *)(void *)(o + 32 * j), W[j]);
            _mm256_storeu_ps((float *)(void *)(o + 16 * TR), rw_q6_K_scales(d, q + 96));
        }
    }
}


#define PACK_A(name, ACT, G, XMODE, OFF)                                                \
    static void name(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) { \
        ft_qg_pack_a(a, a_row, n_tok, k, tile, ACT, G, XMODE, OFF);                   \
    }
PACK_A(pack_a_q8_0, FT_TYPE_Q8_0, 32, FT_QG_X_OFFSET, Q8_BIAS) /* X: avx-vnni's; kernel_q8_0 reads none */
PACK_A(pack_a_q5_0, FT_TYPE_Q8_0, 32, FT_QG_X_OFFSET, 16)
PACK_A(pack_a_q4_1, FT_TYPE_Q8_1, 32, FT_QG_X_S, 0)
PACK_A(pack_a_k32_sum, FT_TYPE_Q8_K, 32, FT_QG_X_SUM, 0)
PACK_A(pack_a_k16_sum, FT_TYPE_Q8_K, 16, FT_QG_X_SUM, 0)
PACK_A(pack_a_q3_K, FT_TYPE_Q8_K, 16, FT_QG_X_OFFSET, 4)
/* A repacked type t's pack_a and its one-token pack_a1 (with that tile's
 * size), from one list of parameters, so the two tiles cannot disagree. */
#define PACK_A_RW(t, ACT, ABLK, G, XMODE, OFF)                              \
    PACK_A(pack_a_##t, ACT, G, XMODE, OFF)                                  \
    static void pack_a1_##t(const void *a, int64_t k, void *tile) {         \
        ft_qg_pack_a1(a, k, tile, ACT, G, XMODE, OFF);                      \
    }                                                                       \
    static size_t a1_size_##t(int64_t k) { return ft_qg_a1_tile_bytes(G, ABLK, k); }
PACK_A_RW(q4_0, FT_TYPE_Q8_0, 32, 32, FT_QG_X_OFFSET, 8)
PACK_A_RW(q6_K, FT_TYPE_Q8_K, FT_QK_K, 16, FT_QG_X_OFFSET, 32)

#define SIZES(name, G, ABLK, MINS)                                                    \
    static size_t name##_w(int64_t k) { return ft_qg_w_tile_bytes(TR, G, MINS, k); } \
    static size_t name##_a(int64_t k) { return ft_qg_a_tile_bytes(G, ABLK, k); }
SIZES(size_q4_0_class, 32, 32, 0)
SIZES(size_q4_1_class, 32, 32, 1)
SIZES(size_k32_mins, 32, 256, 1)
SIZES(size_k16_mins, 16, 256, 1)
SIZES(size_k16_offset, 16, 256, 0)

#define ENTRY_FIELDS(T, ACT, SZ, PW, PA, KER, MT)                                                 \
    .type = FT_TYPE_##T, .act_type = FT_TYPE_##ACT, .tile_rows = TR, .tile_tokens = TT,              \
    .min_tokens = MT, .w_tile_size = SZ##_w, .a_tile_size = SZ##_a, .pack_w = PW, .pack_a = PA, \
    .kernel = KER
#define ENTRY(T, ACT, SZ, PW, PA, KER)                                                                      \
    static const struct ft_qgemm g_##T = {ENTRY_FIELDS(T, ACT, SZ, PW, PA, KER, MIN_TOKENS)};
#define ENTRY4(T, ACT, SZ, PW, PA, KER)                                                                     \
    static const struct ft_qgemm g_##T = {ENTRY_FIELDS(T, ACT, SZ, PW, PA, KER, MIN_TOKENS_FAST_PACK)};
/* A type repacked at load: its functions are named after t (q4_0: rw_size_q4_0, ...). */
#define ENTRY_RW(T, t, ACT, SZ, PW, PA, KER)                                                                \
    static const struct ft_qgemm g_##T = {ENTRY_FIELDS(T, ACT, SZ, PW, PA, KER, MIN_TOKENS), .rw_tile_size = rw_size_##t, \
                                          .repack_w = repack_w_##t, .kernel_rw = kernel_rw_##t,              \
                                          .rw_row = rw_row_##t, .unpack_rw = unpack_rw_##t,                  \
                                          .a1_tile_size = a1_size_##t, .pack_a1 = pack_a1_##t,                \
                                          .kernel_rw1 = kernel_rw1_##t};
/* Q8_0's quants, XOR Q8_BIAS: group j of a block. */
static inline uint32_t group_q8_0_tile(int c, const uint8_t *blk, int j) {
    (void)c;
    return ft_qg_ld32(blk + 2 + 4 * j) ^ (Q8_BIAS * 0x01010101u);
}

/* Q8_0's quants (XOR Q8_BIAS) by the transposes of pack_w_q4_0_fast (each
 * row's 32 bytes are two loads); a partial tile through the portable packer. */
static void pack_w_q8_0_tile(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (n_rows < TR) {
        ft_qg_pack_w(w, w_row, n_rows, k, tile, TR, 32, 0, 32, sizeof(ft_block_q8_0), group_q8_0_tile,
                     ft_qg_scales_d0);
        return;
    }
    const __m256i bias = _mm256_set1_epi8((char)Q8_BIAS);
    const size_t sb = ft_qg_sb_bytes(TR, 32, 0);
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / 32; b++, o += sb) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)sizeof(ft_block_q8_0);
        __m256i t[4];
        for (int h = 0; h < 2; h++) {
            ft_rows8_dwords4(p + 2 + 16 * h, w_row, t);
            for (int j = 0; j < 4; j++)
                _mm256_storeu_si256((__m256i *)(void *)(o + 32 * (4 * h + j)), _mm256_xor_si256(t[j], bias));
        }
        uint16_t d[TR];
        for (int r = 0; r < TR; r++)
            memcpy(&d[r], p + (size_t)r * w_row, 2);
        _mm256_storeu_ps((float *)(void *)(o + 32 * TR), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d)));
    }
}
#if FT_AVX_VNNI
#define KERNEL_Q8 kernel_q4_0_class /* unsigned tiles, X from the activations */
#else
#define KERNEL_Q8 kernel_q8_0
#endif
ENTRY4(Q8_0, Q8_0, size_q4_0_class, pack_w_q8_0_tile, pack_a_q8_0, KERNEL_Q8)
/* The lookup-table types: their values packed as Q8_0's, Q8_0's kernel. */
FT_QG_PACK_W_LUT(pack_w_lut_, TR, 4, Q8_BIAS)
static void pack_a_iq4_xs(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) {
    ft_qg_pack_a_q8_K_32(a, a_row, n_tok, k, tile, 128, 4, TT);
}
/* The lookup-table types by pack_w_q4_0_fast's transposes (each 32-element
 * sub-block has Q4_0's nibble order), each nibble through the table (XOR
 * Q8_BIAS) with one vpshufb: the tiles of pack_w_lut_iq4_nl / _mxfp4 /
 * _iq4_xs without a table lookup per byte. blck, bsz: elements and bytes of
 * a block; qs: offset of its first sub-block's 16 nibble bytes; scales: its
 * per-row scales (simd/qgemm_pack.h). Whole tiles of 8 rows only. */
__attribute__((always_inline)) static inline void pack_w_lut8(const void *w, size_t w_row, int64_t k, void *tile,
                                                              const int8_t *kv, int blck, size_t bsz, int qs,
                                                              ft_qg_scales_fn scales) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i lut = _mm256_broadcastsi128_si256(
        _mm_xor_si128(_mm_loadu_si128((const __m128i *)(const void *)kv), _mm_set1_epi8((char)Q8_BIAS)));
    const int nsub = blck / 32;
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / blck; b++) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)bsz;
        float S[8][TR], row_s[8], row_m[8];
        for (int r = 0; r < TR; r++) {
            scales(p + (size_t)r * w_row, row_s, row_m);
            for (int s = 0; s < nsub; s++)
                S[s][r] = row_s[s];
        }
        for (int s = 0; s < nsub; s++, o += ft_qg_sb_bytes(TR, 32, 0)) {
            __m256i t[4];
            ft_rows8_dwords4(p + qs + 16 * s, w_row, t);
            for (int j = 0; j < 4; j++) {
                _mm256_storeu_si256((__m256i *)(void *)(o + 32 * j),
                                    _mm256_shuffle_epi8(lut, _mm256_and_si256(t[j], m4)));
                _mm256_storeu_si256((__m256i *)(void *)(o + 32 * (4 + j)),
                                    _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(t[j], 4), m4)));
            }
            memcpy(o + 32 * TR, S[s], sizeof(S[s]));
        }
    }
}

static void pack_w_iq4_nl_fast(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (n_rows < TR)
        pack_w_lut_iq4_nl(w, w_row, n_rows, k, tile);
    else
        pack_w_lut8(w, w_row, k, tile, ft_qg_kv_iq4nl, 32, sizeof(ft_block_iq4_nl), 2, ft_qg_scales_d0);
}

static void pack_w_mxfp4_fast(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (n_rows < TR)
        pack_w_lut_mxfp4(w, w_row, n_rows, k, tile);
    else
        pack_w_lut8(w, w_row, k, tile, ft_qg_kv_mxfp4, 32, sizeof(ft_block_mxfp4), 1, ft_qg_scales_mxfp4);
}

static void pack_w_iq4_xs_fast(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (n_rows < TR)
        pack_w_lut_iq4_xs(w, w_row, n_rows, k, tile);
    else
        pack_w_lut8(w, w_row, k, tile, ft_qg_kv_iq4nl, FT_QK_K, sizeof(ft_block_iq4_xs), 8, ft_qg_scales_iq4_xs);
}

ENTRY4(IQ4_NL, Q8_0, size_q4_0_class, pack_w_iq4_nl_fast, pack_a_q8_0, KERNEL_Q8)
ENTRY4(MXFP4, Q8_0, size_q4_0_class, pack_w_mxfp4_fast, pack_a_q8_0, KERNEL_Q8)
ENTRY4(IQ4_XS, Q8_K, size_q4_0_class, pack_w_iq4_xs_fast, pack_a_iq4_xs, KERNEL_Q8)
ENTRY_RW(Q4_0, q4_0, Q8_0, size_q4_0_class, pack_w_q4_0_fast, pack_a_q4_0, kernel_q4_0_class)
/* Q4_1, Q5_0, Q5_1: the shared group functions of simd/qgemm_pack.h applied
 * to 8 rows at once (GCC vector extensions: each lane one row's 4 bytes,
 * loaded one row at a time; vpgatherdd is slower on Zen 3), d (and m) per
 * row. The tiles are the portable packer's; whole tiles of 8 rows only. */
typedef uint32_t v8u __attribute__((vector_size(32)));
static inline v8u load_rows8(size_t w_row, const uint8_t *p) {
    return (v8u)_mm256_setr_epi32((int)ft_qg_ld32(p), (int)ft_qg_ld32(p + w_row), (int)ft_qg_ld32(p + 2 * w_row),
                                  (int)ft_qg_ld32(p + 3 * w_row), (int)ft_qg_ld32(p + 4 * w_row),
                                  (int)ft_qg_ld32(p + 5 * w_row), (int)ft_qg_ld32(p + 6 * w_row),
                                  (int)ft_qg_ld32(p + 7 * w_row));
}
#define LD_ROWS8(c, p) load_rows8(c, p)
FT_QG_DEFINE_GROUPS(vgroup_, v8u, size_t, LD_ROWS8)

__attribute__((always_inline)) static inline void pack_w_rows8(const void *w, size_t w_row, int64_t k, void *tile,
                                                               int mins, size_t bytes,
                                                               v8u (*group)(size_t, const uint8_t *, int)) {
    const size_t sb = ft_qg_sb_bytes(TR, 32, mins);
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / 32; b++, o += sb) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)bytes;
        FT_UNROLL(8) for (int j = 0; j < 8; j++)
            _mm256_storeu_si256((__m256i *)(void *)(o + 32 * j), (__m256i)group(w_row, p, j));
        float S[TR], M[TR];
        for (int r = 0; r < TR; r++)
            S[r] = ft_half_to_float(ft_qg_ld16(p + (size_t)r * w_row));
        memcpy(o + 32 * TR, S, sizeof(S));
        if (mins) {
            for (int r = 0; r < TR; r++)
                M[r] = ft_half_to_float(ft_qg_ld16(p + (size_t)r * w_row + 2));
            memcpy(o + 32 * TR + 4 * TR, M, sizeof(M));
        }
    }
}

static void pack_w_q4_1_fast(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (n_rows < TR)
        pack_w_q4_1(w, w_row, n_rows, k, tile);
    else
        pack_w_rows8(w, w_row, k, tile, 1, sizeof(ft_block_q4_1), vgroup_q4_1);
}

static void pack_w_q5_0_fast(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (n_rows < TR)
        pack_w_q5_0(w, w_row, n_rows, k, tile);
    else
        pack_w_rows8(w, w_row, k, tile, 0, sizeof(ft_block_q5_0), vgroup_q5_0);
}

static void pack_w_q5_1_fast(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (n_rows < TR)
        pack_w_q5_1(w, w_row, n_rows, k, tile);
    else
        pack_w_rows8(w, w_row, k, tile, 1, sizeof(ft_block_q5_1), vgroup_q5_1);
}

ENTRY4(Q5_0, Q8_0, size_q4_0_class, pack_w_q5_0_fast, pack_a_q5_0, kernel_q4_0_class)
ENTRY4(Q4_1, Q8_1, size_q4_1_class, pack_w_q4_1_fast, pack_a_q4_1, kernel_q4_1_class)
ENTRY4(Q5_1, Q8_1, size_q4_1_class, pack_w_q5_1_fast, pack_a_q4_1, kernel_q4_1_class)
ENTRY(Q2_K, Q8_K, size_k16_mins, pack_w_q2_K, pack_a_k16_sum, kernel_k16_mins)
ENTRY(Q3_K, Q8_K, size_k16_offset, pack_w_q3_K, pack_a_q3_K, kernel_k16_offset)
ENTRY(Q4_K, Q8_K, size_k32_mins, pack_w_q4_K, pack_a_k32_sum, kernel_k32_mins)
ENTRY(Q5_K, Q8_K, size_k32_mins, pack_w_q5_K, pack_a_k32_sum, kernel_k32_mins)
ENTRY_RW(Q6_K, q6_K, Q8_K, size_k16_offset, pack_w_q6_K_fast, pack_a_q6_K, kernel_k16_offset)

void QGEMM_FILL(struct ft_level *l) {
    const struct ft_qgemm **t = l->qgemm;
    t[FT_TYPE_Q8_0] = &g_Q8_0;
    t[FT_TYPE_Q4_0] = &g_Q4_0;
    t[FT_TYPE_Q5_0] = &g_Q5_0;
    t[FT_TYPE_Q4_1] = &g_Q4_1;
    t[FT_TYPE_Q5_1] = &g_Q5_1;
    t[FT_TYPE_Q2_K] = &g_Q2_K;
    t[FT_TYPE_Q3_K] = &g_Q3_K;
    t[FT_TYPE_Q4_K] = ft_k4_int_scales() ? QGEMM_K4(FT_TYPE_Q4_K) : &g_Q4_K;
    t[FT_TYPE_Q5_K] = ft_k4_int_scales() ? QGEMM_K4(FT_TYPE_Q5_K) : &g_Q5_K;
    t[FT_TYPE_Q6_K] = &g_Q6_K;
    t[FT_TYPE_IQ4_NL] = &g_IQ4_NL;
    t[FT_TYPE_IQ4_XS] = &g_IQ4_XS;
    t[FT_TYPE_MXFP4] = &g_MXFP4;
}
