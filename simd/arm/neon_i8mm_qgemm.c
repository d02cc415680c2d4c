/* Quantized GEMM, "neon-i8mm" level (include/ft/qgemm.h, tile layouts in
 * simd/qgemm_pack.h). Built with -march=armv8.2-a+dotprod+i8mm
 * (cmake/FtSimd.cmake) and called only when HWCAP2 has i8mm; every other
 * kernel of the level is neon-dotprod's (simd/types.c).
 *
 * smmla (vmmlaq_s32) multiplies a 2x8 int8 matrix by an 8x2 one into the
 * 2x2 int32 block [r0t0 r0t1 r1t0 r1t1]: 32 multiply-adds, twice sdot's 16.
 * So both tiles use group width 8: one 16-byte vector holds 8 consecutive
 * elements of two weight rows (or two tokens), which is smmla's operand as
 * loaded, with no shuffles in the inner loop.
 *
 * Micro-kernel: 8 weight rows x 4 tokens, run twice per activation tile of
 * 8 tokens, as in neon_dotprod_qgemm.c. Per 8 elements it loads 4 weight
 * vectors (row pairs) and 2 activation vectors (token pairs) and issues 8
 * smmla, where the dotprod kernel issues 16 sdot. The sub-block scales,
 * mins and offsets are applied per 2x2 block with vectors that repeat each
 * row's (token's) value in its lanes, in the same order of float operations
 * as the dotprod kernel, so the two levels give the same floats.
 *
 * smmla is signed x signed like sdot: the unsigned quants of every type but
 * Q8_0 are at most 63, and Q8_0 keeps its signed weight bytes (offset 0).
 */
#include "simd/level.h"
#include "simd/qgemm_pack.h"

#include <arm_neon.h>

#define TR 8 /* weight rows per tile */
#define TT FT_QG_TT
#define TH 4      /* tokens per pass */
#define W 8       /* group width: smmla's 8 elements per row */
#define RP (TR / 2) /* row pairs */
#define TP (TH / 2) /* token pairs per pass */

/* Batches from 4 tokens, as on neon-dotprod (not measured on ARM hardware). */
#define MIN_TOKENS 4


/* Each of the 4 floats at p (rows r..r+3) twice: [S_r S_r S_r+1 S_r+1],
 * [S_r+2 S_r+2 S_r+3 S_r+3], the row factor of two 2x2 blocks. */
static inline void row_pairs(const uint8_t *p, float32x4_t *lo, float32x4_t *hi) {
    const float32x4_t v = vld1q_f32((const float *)(const void *)p);
    *lo = vzip1q_f32(v, v);
    *hi = vzip2q_f32(v, v);
}

/* The 2 floats at p (tokens t, t+1) as [x_t x_t+1 x_t x_t+1]. */
static inline float32x4_t token_pair(const uint8_t *p) {
    const float32x2_t v = vld1_f32((const float *)(const void *)p);
    return vcombine_f32(v, v);
}

__attribute__((always_inline)) static inline void kernel_half(const uint8_t *restrict w, const uint8_t *restrict a,
                                                              int64_t k, int n_rows, int n_tok, int t0,
                                                              float *restrict out, int64_t ld, const int G,
                                                              const int ABLK, const int MINS, const int XINT) {
    const int nsub = ABLK / G;
    const int ngrp = G / W;
    const size_t sb_bytes = ft_qg_sb_bytes(TR, G, MINS);
    const size_t ab_bytes = ft_qg_ab_bytes(G, ABLK);
    float32x4_t facc[RP][TP]; /* [row pair][token pair], lanes as smmla's */
    for (int p = 0; p < RP; p++)
        for (int q = 0; q < TP; q++)
            facc[p][q] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < k / ABLK; b++, a += ab_bytes) {
        const uint8_t *D = a + ABLK * TT + 4 * t0;
        const uint8_t *X = a + ABLK * TT + 4 * TT + 4 * t0;
        float32x4_t d[TP];
        for (int q = 0; q < TP; q++)
            d[q] = token_pair(D + 8 * q);
        for (int s = 0; s < nsub; s++, w += sb_bytes) {
            int32x4_t acc[RP][TP];
            for (int q = 0; q < TP; q++) {
                int32x4_t x0 = vdupq_n_s32(0);
                if (XINT) {
                    const int32x2_t x = vld1_s32((const int32_t *)(const void *)(X + (s * TT + 2 * q) * 4));
                    x0 = vcombine_s32(x, x);
                }
                for (int p = 0; p < RP; p++)
                    acc[p][q] = x0;
            }
            const uint8_t *aq = a + (size_t)s * ngrp * TT * W + W * t0;
            for (int gi = 0; gi < ngrp; gi++) {
                const int8_t *wg = (const int8_t *)(w + gi * TR * W);
                const int8_t *ag = (const int8_t *)(aq + gi * TT * W);
                const int8x16_t w0 = vld1q_s8(wg), w1 = vld1q_s8(wg + 16);
                const int8x16_t w2 = vld1q_s8(wg + 32), w3 = vld1q_s8(wg + 48);
                const int8x16_t a0 = vld1q_s8(ag), a1 = vld1q_s8(ag + 16);
                acc[0][0] = vmmlaq_s32(acc[0][0], w0, a0);
                acc[0][1] = vmmlaq_s32(acc[0][1], w0, a1);
                acc[1][0] = vmmlaq_s32(acc[1][0], w1, a0);
                acc[1][1] = vmmlaq_s32(acc[1][1], w1, a1);
                acc[2][0] = vmmlaq_s32(acc[2][0], w2, a0);
                acc[2][1] = vmmlaq_s32(acc[2][1], w2, a1);
                acc[3][0] = vmmlaq_s32(acc[3][0], w3, a0);
                acc[3][1] = vmmlaq_s32(acc[3][1], w3, a1);
            }
            float32x4_t S[RP], M[RP];
            row_pairs(w + G * TR, &S[0], &S[1]);
            row_pairs(w + G * TR + 16, &S[2], &S[3]);
            if (MINS) {
                row_pairs(w + G * TR + 4 * TR, &M[0], &M[1]);
                row_pairs(w + G * TR + 4 * TR + 16, &M[2], &M[3]);
            }
            for (int q = 0; q < TP; q++) {
                if (nsub == 1) {
                    const float32x4_t x = MINS ? token_pair(X + 8 * q) : d[q];
                    for (int p = 0; p < RP; p++) {
                        facc[p][q] = vfmaq_f32(facc[p][q], vmulq_f32(vcvtq_f32_s32(acc[p][q]), S[p]), d[q]);
                        if (MINS)
                            facc[p][q] = vfmaq_f32(facc[p][q], M[p], x);
                    }
                } else {
                    const float32x4_t xd = MINS ? vmulq_f32(token_pair(X + (s * TT + 2 * q) * 4), d[q]) : d[q];
                    for (int p = 0; p < RP; p++) {
                        facc[p][q] = vfmaq_f32(facc[p][q], vcvtq_f32_s32(acc[p][q]), vmulq_f32(S[p], d[q]));
                        if (MINS)
                            facc[p][q] = vfmaq_f32(facc[p][q], M[p], xd);
                    }
                }
            }
        }
    }
    /* lanes [r0t0 r0t1 r1t0 r1t1]: the even lanes of two row pairs are one
     * token's 4 rows, the odd lanes the next token's */
    float v[TH][TR];
    for (int q = 0; q < TP; q++) {
        vst1q_f32(v[2 * q], vuzp1q_f32(facc[0][q], facc[1][q]));
        vst1q_f32(v[2 * q] + 4, vuzp1q_f32(facc[2][q], facc[3][q]));
        vst1q_f32(v[2 * q + 1], vuzp2q_f32(facc[0][q], facc[1][q]));
        vst1q_f32(v[2 * q + 1] + 4, vuzp2q_f32(facc[2][q], facc[3][q]));
    }
    for (int t = 0; t < TH && t0 + t < n_tok; t++)
        memcpy(out + (t0 + t) * ld, v[t], (size_t)n_rows * sizeof(float));
}

#define KERNEL(name, G, ABLK, MINS, XINT)                                                                    \
    static void name(const void *w, const void *a, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) { \
        kernel_half(w, a, k, n_rows, n_tok, 0, out, ld, G, ABLK, MINS, XINT);                                \
        if (n_tok > TH)                                                                                      \
            kernel_half(w, a, k, n_rows, n_tok, TH, out, ld, G, ABLK, MINS, XINT);                           \
    }
KERNEL(kernel_q8_0_class, 32, 32, 0, 1)  /* Q8_0, Q4_0, Q5_0 */
KERNEL(kernel_q4_1_class, 32, 32, 1, 0)  /* Q4_1, Q5_1 */
KERNEL(kernel_k32_mins, 32, 256, 1, 0)   /* Q4_K, Q5_K */
KERNEL(kernel_k16_mins, 16, 256, 1, 0)   /* Q2_K */
KERNEL(kernel_k16_offset, 16, 256, 0, 1) /* Q3_K, Q6_K */

FT_QG_PACK_W_PORTABLE_WIDTH(pack_w_, TR, W)

/* Q8_0 with its signed bytes as they are (smmla is signed x signed). */
static inline uint32_t group_q8_0_signed(int unused, const uint8_t *blk, int j) {
    (void)unused;
    return ft_qg_ld32(blk + 2 + 4 * j);
}
static void pack_w_q8_0_signed(const void *w, size_t wr, int n, int64_t k, void *t) {
    ft_qg_pack_w_width(w, wr, n, k, t, TR, 32, 0, 32, sizeof(ft_block_q8_0), group_q8_0_signed, ft_qg_scales_d0, W);
}

#define PACK_A(name, ACT, G, XMODE, OFF)                                                \
    static void name(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) { \
        ft_qg_pack_a_il(a, a_row, n_tok, k, tile, ACT, G, XMODE, OFF);                \
    }
PACK_A(pack_a_q8_0, FT_TYPE_Q8_0, 32, FT_QG_X_OFFSET, 0)
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
SIZES(size_q8_0_class, 32, 32, 0)
SIZES(size_q4_1_class, 32, 32, 1)
SIZES(size_k32_mins, 32, 256, 1)
SIZES(size_k16_mins, 16, 256, 1)
SIZES(size_k16_offset, 16, 256, 0)

#define ENTRY(T, ACT, SZ, PW, PA, KER)                                                                      \
    static const struct ft_qgemm g_##T = {                                                                  \
        .type = FT_TYPE_##T, .act_type = FT_TYPE_##ACT, .tile_rows = TR, .tile_tokens = TT,                 \
        .min_tokens = MIN_TOKENS, .w_tile_size = SZ##_w, .a_tile_size = SZ##_a, .pack_w = PW, .pack_a = PA, \
        .kernel = KER};
ENTRY(Q8_0, Q8_0, size_q8_0_class, pack_w_q8_0_signed, pack_a_q8_0, kernel_q8_0_class)
ENTRY(Q4_0, Q8_0, size_q8_0_class, pack_w_q4_0, pack_a_q4_0, kernel_q8_0_class)
ENTRY(Q5_0, Q8_0, size_q8_0_class, pack_w_q5_0, pack_a_q5_0, kernel_q8_0_class)
ENTRY(Q4_1, Q8_1, size_q4_1_class, pack_w_q4_1, pack_a_q4_1, kernel_q4_1_class)
ENTRY(Q5_1, Q8_1, size_q4_1_class, pack_w_q5_1, pack_a_q4_1, kernel_q4_1_class)
ENTRY(Q2_K, Q8_K, size_k16_mins, pack_w_q2_K, pack_a_k16_sum, kernel_k16_mins)
ENTRY(Q3_K, Q8_K, size_k16_offset, pack_w_q3_K, pack_a_q3_K, kernel_k16_offset)
ENTRY(Q4_K, Q8_K, size_k32_mins, pack_w_q4_K, pack_a_k32_sum, kernel_k32_mins)
ENTRY(Q5_K, Q8_K, size_k32_mins, pack_w_q5_K, pack_a_k32_sum, kernel_k32_mins)
ENTRY(Q6_K, Q8_K, size_k16_offset, pack_w_q6_K, pack_a_q6_K, kernel_k16_offset)
/* The lookup-table types: their signed values packed as Q8_0's, Q8_0's kernel. */
FT_QG_PACK_W_LUT(pack_w_lut_, TR, W, 0)
static void pack_a_iq4_xs(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) {
    ft_qg_pack_a_q8_K_32(a, a_row, n_tok, k, tile, 0, W, TT);
}
ENTRY(IQ4_NL, Q8_0, size_q8_0_class, pack_w_lut_iq4_nl, pack_a_q8_0, kernel_q8_0_class)
ENTRY(MXFP4, Q8_0, size_q8_0_class, pack_w_lut_mxfp4, pack_a_q8_0, kernel_q8_0_class)
ENTRY(IQ4_XS, Q8_K, size_q8_0_class, pack_w_lut_iq4_xs, pack_a_iq4_xs, kernel_q8_0_class)

void ft_neon_i8mm_qgemm_fill(struct ft_level *l) {
    const struct ft_qgemm **t = l->qgemm;
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
    t[FT_TYPE_IQ4_NL] = &g_IQ4_NL;
    t[FT_TYPE_IQ4_XS] = &g_IQ4_XS;
    t[FT_TYPE_MXFP4] = &g_MXFP4;
}
