/* Q4_K and Q5_K prefill on the avx2 level with the sub-block scales in the
 * integers (compiled with avx2's flags, cmake/FtSimd.cmake).
 *
 * A Q4_K/Q5_K super-block of 256 weights has one float d and dmin and
 * eight 6-bit integer scales sc and mins m; its Q8_K activations one float
 * D. As ggml's vec_dot does,
 *   dot = D (d S - dmin M),  S = sum_s sc_s (q . a)_s,  M = sum_s m_s bsum_s
 * with S and M exact integers. avx2_qgemm.c's generic kernel scales every
 * 32-element sub-block's sums in floats (convert, multiply, two fused
 * multiply-adds per token and sub-block) and widens the 16-bit pair sums
 * every two groups. Here a Q4_K sub-block's 8 groups stay in 16 bits (at
 * most 8 x 2 x 15 x 128 = 30720; Q5_K's 31 allows 4 groups), and the one
 * vpmaddwd that widens them multiplies by the sub-block scale instead of
 * by ones: 17 vector operations per token and sub-block instead of 24, and
 * the floats once per super-block.
 *
 * The float steps are the amx level's (amx_qgemm_k4.c, amx_qgemm_k4_vnni.c):
 *   acc = (d S - dmin M) D + acc   per super-block, both fused,
 * so this kernel gives a (row, token) the floats of the amx kernels bit
 * for bit (tests/unit/test_qgemm.c checks it where both run).
 *
 * Micro-kernel: 8 weight rows x up to 4 tokens, as avx2_qgemm.c's: a ymm
 * holds 4 consecutive quants of each of the 8 rows, a token's 4 activation
 * bytes are broadcast into vpmaddubsw.
 *
 * Compiled again with FT_AVX_VNNI for the avx-vnni level (avx_vnni_qgemm_k4.c):
 * vpdpwssd widens and adds in one (simd/x86/dot256.h), same integers.
 */
#include "ft/common.h"
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/qgemm_pack.h"
#include "simd/quant_ref.h"
#include "simd/x86/dot256.h"
#include "simd/x86/rows8.h"

#include <immintrin.h>
#include <string.h>

#define TR 8 /* weight rows per tile */
#define TT FT_QG_TT
#define TH 4 /* tokens per pass of the micro-kernel */
#define NSUB 8
#define NGRP 8 /* groups of 4 elements per sub-block */

/* As avx2_qgemm.c's entries: from 8 tokens, below that the one-row dot. */
#define MIN_TOKENS 8

/* Weight tile, per super-block: d[8], dmin[8] (floats), the mins as pairs
 * [4][8] (uint32: m[2p] | m[2p+1] << 16 of each row), the scales [8][8]
 * (uint32: sc | sc << 16, vpmaddwd's word pairs), then the quants: per
 * sub-block 8 groups of 8 rows x 4 bytes. */
#define W_MP (2 * TR * 4)
#define W_SC (W_MP + 4 * TR * 4)
#define W_Q (W_SC + NSUB * TR * 4)
#define W_SB (W_Q + NSUB * NGRP * TR * 4)
/* Activation tile: simd/qgemm_pack.h's for these kernels (ft_qg_pack_a_k4). */
#define A_D FT_QG_K4_A_D(TT)
#define A_BP FT_QG_K4_A_BP(TT)
#define A_SB FT_QG_K4_A_SB(TT)

static size_t w_tile_size(int64_t k) { return (size_t)(k / FT_QK_K) * W_SB; }
static size_t a_tile_size(int64_t k) { return ft_qg_k4_a_tile_bytes(k, TT); }

/* ---- packing ------------------------------------------------------------------------- */

static inline void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* Row r's scales in a weight tile's super-block, from its block blk. */
static inline void pack_scales_row(uint8_t *sb, int r, const uint8_t *blk) {
    const struct ft_scales16 u = ft_k4_scales(blk + 4);
    const float d = ft_half_to_float(ft_qg_ld16(blk)), dmin = ft_half_to_float(ft_qg_ld16(blk + 2));
    memcpy(sb + 4 * r, &d, 4);
    memcpy(sb + 4 * (TR + r), &dmin, 4);
    for (int p = 0; p < 4; p++)
        put32(sb + W_MP + 4 * (p * TR + r),
              (uint32_t)ft_scales16_byte(u, 8 + 2 * p) | (uint32_t)ft_scales16_byte(u, 9 + 2 * p) << 16);
    for (int s = 0; s < NSUB; s++) {
        const uint32_t sc = ft_scales16_byte(u, s);
        put32(sb + W_SC + 4 * (s * TR + r), sc | sc << 16);
    }
}

/* Bit s of each byte of h, as bit 4: Q5_K's fifth bit of sub-block s. */
static inline __m256i bit4_of(__m256i h, int s) {
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, s), _mm256_set1_epi8(1)), 4);
}

/* A whole tile's quants by transposes (a group of 4 bytes at a time, as
 * partial tiles are packed in pack_w, took 3x as long): per 16 quant bytes
 * of the 8 rows, ft_rows8_dwords4 gives groups 4h..4h+3 of two sub-blocks,
 * the low nibbles' and the high nibbles'. Q5: the rows' qh bytes go
 * through the same transposes. */
__attribute__((always_inline)) static inline void pack_q_rows8(uint8_t *sb, const uint8_t *blk, size_t w_row,
                                                               const int Q5) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const uint8_t *qs = blk + (Q5 ? 48 : 16);
    for (int h = 0; h < 2; h++) {
        __m256i th[4];
        if (Q5)
            ft_rows8_dwords4(blk + 16 + 16 * h, w_row, th);
        for (int c = 0; c < 4; c++) {
            __m256i t[4];
            ft_rows8_dwords4(qs + 32 * c + 16 * h, w_row, t);
            for (int j = 0; j < 4; j++) {
                __m256i lo = _mm256_and_si256(t[j], m4), hi = _mm256_and_si256(_mm256_srli_epi16(t[j], 4), m4);
                if (Q5) {
                    lo = _mm256_or_si256(lo, bit4_of(th[j], 2 * c));
                    hi = _mm256_or_si256(hi, bit4_of(th[j], 2 * c + 1));
                }
                _mm256_storeu_si256((__m256i *)(void *)(sb + W_Q + 32 * (2 * c * NGRP + 4 * h + j)), lo);
                _mm256_storeu_si256((__m256i *)(void *)(sb + W_Q + 32 * ((2 * c + 1) * NGRP + 4 * h + j)), hi);
            }
        }
    }
}

__attribute__((always_inline)) static inline void pack_w(const void *w, size_t w_row, int n_rows, int64_t k,
                                                         void *tile, size_t blk_bytes, ft_qg_group_fn group,
                                                         const int Q5) {
    if (n_rows < TR) { /* a partial tile: the missing rows are zero */
        memset(tile, 0, w_tile_size(k));
        for (int r = 0; r < n_rows; r++) {
            const uint8_t *row = (const uint8_t *)w + (size_t)r * w_row;
            for (int64_t b = 0; b < k / FT_QK_K; b++) {
                uint8_t *sb = (uint8_t *)tile + (size_t)b * W_SB;
                const uint8_t *blk = row + (size_t)b * blk_bytes;
                pack_scales_row(sb, r, blk);
                for (int j = 0; j < NSUB * NGRP; j++)
                    put32(sb + W_Q + 4 * (j * TR + r), group(0, blk, j));
            }
        }
        return;
    }
    for (int64_t b = 0; b < k / FT_QK_K; b++) {
        uint8_t *sb = (uint8_t *)tile + (size_t)b * W_SB;
        const uint8_t *blk = (const uint8_t *)w + (size_t)b * blk_bytes;
        for (int r = 0; r < TR; r++)
            pack_scales_row(sb, r, blk + (size_t)r * w_row);
        pack_q_rows8(sb, blk, w_row, Q5);
    }
}
static void pack_w_Q4_K(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    pack_w(w, w_row, n_rows, k, tile, sizeof(ft_block_q4_K), ft_qg_group_q4_K, 0);
}
static void pack_w_Q5_K(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    pack_w(w, w_row, n_rows, k, tile, sizeof(ft_block_q5_K), ft_qg_group_q5_K, 1);
}

/* n_tok Q8_K rows into an activation tile (simd/qgemm_pack.h). */
static void pack_a(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) {
    ft_qg_pack_a_k4(a, a_row, n_tok, k, tile, TT);
}

/* ---- kernel --------------------------------------------------------------------------- */


static inline __m256i bcast32(const uint8_t *p) { return _mm256_set1_epi32((int)ft_qg_ld32(p)); }

/* Tokens t0..t0+NT-1 of an activation tile times a weight tile. Q5: the
 * quants reach 31, so the 16-bit sums are widened every 4 groups. */
__attribute__((always_inline)) static inline void kernel_pass(const uint8_t *restrict w, const uint8_t *restrict a,
                                                              int64_t k, int n_rows, int n_tok, int t0,
                                                              float *restrict out, int64_t ld, const int NT,
                                                              const int Q5) {
    const int widen = Q5 ? 4 : NGRP; /* groups per vpmaddwd */
    __m256 facc[TH];
    FT_UNROLL(16) for (int t = 0; t < NT; t++)
        facc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / FT_QK_K; b++, w += W_SB, a += A_SB) {
        __m256i acc[TH];
        FT_UNROLL(16) for (int t = 0; t < NT; t++)
            acc[t] = _mm256_setzero_si256();
        for (int s = 0; s < NSUB; s++) {
            const __m256i SC = _mm256_loadu_si256((const __m256i *)(const void *)(w + W_SC + 32 * s));
            __m256i sum[TH] = {0}; /* every group starts them; set for the compiler */
#pragma GCC unroll 8
            for (int gi = 0; gi < NGRP; gi++) {
                const int g = s * NGRP + gi;
                const __m256i W = _mm256_loadu_si256((const __m256i *)(const void *)(w + W_Q + 32 * g));
                FT_UNROLL(16) for (int t = 0; t < NT; t++) {
                    const __m256i p = _mm256_maddubs_epi16(W, bcast32(a + 4 * (g * TT + t0 + t)));
                    sum[t] = gi % widen == 0 ? p : _mm256_add_epi16(sum[t], p);
                    FT_KEEP_ORDER(sum[t]);
                }
                if (gi % widen == widen - 1)
                    FT_UNROLL(16) for (int t = 0; t < NT; t++)
                        acc[t] = ft_madd_add256(acc[t], sum[t], SC);
            }
        }
        const __m256 d = _mm256_loadu_ps((const float *)(const void *)w);
        const __m256 dmin = _mm256_loadu_ps((const float *)(const void *)(w + 4 * TR));
        FT_UNROLL(16) for (int t = 0; t < NT; t++) {
            __m256i m = _mm256_setzero_si256();
            for (int p = 0; p < 4; p++)
                m = ft_madd_add256(m, _mm256_loadu_si256((const __m256i *)(const void *)(w + W_MP + 32 * p)),
                                   bcast32(a + A_BP + 4 * (p * TT + t0 + t)));
            const __m256 f = _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(acc[t]), _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(m)));
            float D;
            memcpy(&D, a + A_D + 4 * (t0 + t), 4);
            facc[t] = _mm256_fmadd_ps(f, _mm256_set1_ps(D), facc[t]);
        }
    }
    const __m256i rows = _mm256_cmpgt_epi32(_mm256_set1_epi32(n_rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    FT_UNROLL(16) for (int t = 0; t < NT; t++)
        if (t0 + t < n_tok)
            _mm256_maskstore_ps(out + (t0 + t) * ld, rows, facc[t]);
}

#define KERNEL(name, Q5)                                                                                        \
    static void name##_pass(const uint8_t *w, const uint8_t *a, int64_t k, int n_rows, int n_tok, int t0,        \
                            float *out, int64_t ld) {                                                            \
        switch (n_tok - t0 < TH ? n_tok - t0 : TH) {                                                             \
        case 1: kernel_pass(w, a, k, n_rows, n_tok, t0, out, ld, 1, Q5); break;                                  \
        case 2: kernel_pass(w, a, k, n_rows, n_tok, t0, out, ld, 2, Q5); break;                                  \
        case 3: kernel_pass(w, a, k, n_rows, n_tok, t0, out, ld, 3, Q5); break;                                  \
        default: kernel_pass(w, a, k, n_rows, n_tok, t0, out, ld, 4, Q5); break;                                 \
        }                                                                                                        \
    }                                                                                                            \
    static void name(const void *w, const void *a, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) {  \
        for (int t0 = 0; t0 < n_tok; t0 += TH)                                                                   \
            name##_pass(w, a, k, n_rows, n_tok, t0, out, ld);                                                    \
    }
KERNEL(kernel_q4_K, 0)
KERNEL(kernel_q5_K, 1)
#undef KERNEL

/* ---- entries -------------------------------------------------------------------------- */

#define ENTRY(T, t)                                                                                           \
    static const struct ft_qgemm g_##T = {                                                                    \
        .type = FT_TYPE_##T,                                                                                  \
        .act_type = FT_TYPE_Q8_K,                                                                             \
        .tile_rows = TR,                                                                                      \
        .tile_tokens = TT,                                                                                    \
        .min_tokens = MIN_TOKENS,                                                                             \
        .w_tile_size = w_tile_size,                                                                           \
        .a_tile_size = a_tile_size,                                                                           \
        .pack_w = pack_w_##T,                                                                                 \
        .pack_a = pack_a,                                                                                     \
        .kernel = kernel_##t,                                                                                 \
    };
ENTRY(Q4_K, q4_K)
ENTRY(Q5_K, q5_K)
#undef ENTRY

#if FT_AVX_VNNI
const struct ft_qgemm *ft_avx_vnni_qgemm_k4(enum ft_type t) {
#else
const struct ft_qgemm *ft_avx2_qgemm_k4(enum ft_type t) {
#endif
    return t == FT_TYPE_Q4_K ? &g_Q4_K : t == FT_TYPE_Q5_K ? &g_Q5_K : NULL;
}
