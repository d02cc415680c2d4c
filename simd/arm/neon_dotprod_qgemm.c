/* Quantized GEMM, "neon-dotprod" level (include/ft/qgemm.h, tile layouts in
 * simd/qgemm_pack.h). Built with -march=armv8.2-a+dotprod
 * (cmake/FtSimd.cmake); the plain "neon" level has no GEMM and multiplies
 * with vec_dot.
 *
 * Micro-kernel: 8 weight rows x 4 tokens, run twice per activation tile of
 * 8 tokens. A weight group (4 consecutive elements of 8 rows) is two
 * int8x16 vectors, the matching activation bytes of 4 tokens are one, and
 * sdot by lane (vdotq_laneq_s32) multiplies each row's 4 bytes with one
 * token's 4 bytes: no broadcasts. sdot is signed x signed, which the
 * unsigned quants of every type but Q8_0 satisfy (they are at most 63);
 * Q8_0 keeps its signed weight bytes here (offset 0) instead of the
 * biased ones of the x86 tiles.
 *
 * As on AVX2, the Q8_K types fold the activation scale into each sub-block
 * scale (S * D): 32 registers hold the 8 int32 and 8 float accumulators,
 * not a third set of partial sums.
 *
 * CPUs with i8mm use neon_i8mm_qgemm.c instead (smmla on tiles of group
 * width 8), which gives the same floats.
 */
#include "simd/level.h"
#include "simd/qgemm_pack.h"

#include <arm_neon.h>

#define TR 8 /* weight rows per tile */
#define TT FT_QG_TT
#define TH 4 /* tokens per pass */

/* Batches from 4 tokens, as on AVX-512 (not measured on ARM hardware). */
#define MIN_TOKENS 4


static inline float ldf(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

#define DOT_LANE(acc, w, a, lane) vdotq_laneq_s32(acc, w, a, lane)

__attribute__((always_inline)) static inline void kernel_half(const uint8_t *restrict w, const uint8_t *restrict a,
                                                              int64_t k, int n_rows, int n_tok, int t0,
                                                              float *restrict out, int64_t ld, const int G,
                                                              const int ABLK, const int MINS, const int XINT) {
    const int nsub = ABLK / G;
    const int ngrp = G / 4;
    const size_t sb_bytes = ft_qg_sb_bytes(TR, G, MINS);
    const size_t ab_bytes = ft_qg_ab_bytes(G, ABLK);
    float32x4_t facc[TH][2];
    for (int t = 0; t < TH; t++)
        facc[t][0] = facc[t][1] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < k / ABLK; b++, a += ab_bytes) {
        const uint8_t *D = a + ABLK * TT + 4 * t0;
        const uint8_t *X = a + ABLK * TT + 4 * TT + 4 * t0;
        for (int s = 0; s < nsub; s++, w += sb_bytes) {
            int32x4_t acc[TH][2];
            for (int t = 0; t < TH; t++) {
                int32_t x0 = 0;
                if (XINT)
                    memcpy(&x0, X + (s * TT + t) * 4, 4);
                acc[t][0] = acc[t][1] = vdupq_n_s32(x0);
            }
            const uint8_t *aq = a + (size_t)s * ngrp * TT * 4 + 4 * t0;
            for (int gi = 0; gi < ngrp; gi++) {
                const int8x16_t w0 = vld1q_s8((const int8_t *)(w + gi * 32));
                const int8x16_t w1 = vld1q_s8((const int8_t *)(w + gi * 32 + 16));
                const int8x16_t av = vld1q_s8((const int8_t *)(aq + gi * TT * 4)); /* 4 tokens x 4 bytes */
                acc[0][0] = DOT_LANE(acc[0][0], w0, av, 0);
                acc[0][1] = DOT_LANE(acc[0][1], w1, av, 0);
                acc[1][0] = DOT_LANE(acc[1][0], w0, av, 1);
                acc[1][1] = DOT_LANE(acc[1][1], w1, av, 1);
                acc[2][0] = DOT_LANE(acc[2][0], w0, av, 2);
                acc[2][1] = DOT_LANE(acc[2][1], w1, av, 2);
                acc[3][0] = DOT_LANE(acc[3][0], w0, av, 3);
                acc[3][1] = DOT_LANE(acc[3][1], w1, av, 3);
            }
            const float32x4_t S0 = vld1q_f32((const float *)(const void *)(w + G * TR));
            const float32x4_t S1 = vld1q_f32((const float *)(const void *)(w + G * TR + 16));
            float32x4_t M0 = S0, M1 = S1;
            if (MINS) {
                M0 = vld1q_f32((const float *)(const void *)(w + G * TR + 4 * TR));
                M1 = vld1q_f32((const float *)(const void *)(w + G * TR + 4 * TR + 16));
            }
            for (int t = 0; t < TH; t++) {
                const float d = ldf(D + 4 * t);
                if (nsub == 1) {
                    facc[t][0] = vfmaq_n_f32(facc[t][0], vmulq_f32(vcvtq_f32_s32(acc[t][0]), S0), d);
                    facc[t][1] = vfmaq_n_f32(facc[t][1], vmulq_f32(vcvtq_f32_s32(acc[t][1]), S1), d);
                    if (MINS) {
                        const float x = ldf(X + 4 * t);
                        facc[t][0] = vfmaq_n_f32(facc[t][0], M0, x);
                        facc[t][1] = vfmaq_n_f32(facc[t][1], M1, x);
                    }
                } else {
                    facc[t][0] = vfmaq_f32(facc[t][0], vcvtq_f32_s32(acc[t][0]), vmulq_n_f32(S0, d));
                    facc[t][1] = vfmaq_f32(facc[t][1], vcvtq_f32_s32(acc[t][1]), vmulq_n_f32(S1, d));
                    if (MINS) {
                        const float xd = ldf(X + (s * TT + t) * 4) * d;
                        facc[t][0] = vfmaq_n_f32(facc[t][0], M0, xd);
                        facc[t][1] = vfmaq_n_f32(facc[t][1], M1, xd);
                    }
                }
            }
        }
    }
    for (int t = 0; t < TH; t++) {
        if (t0 + t >= n_tok)
            break;
        float v[TR];
        vst1q_f32(v, facc[t][0]);
        vst1q_f32(v + 4, facc[t][1]);
        memcpy(out + (t0 + t) * ld, v, (size_t)n_rows * sizeof(float));
    }
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

FT_QG_PACK_W_PORTABLE(pack_w_, TR)

/* Q8_0 with its signed bytes as they are (sdot is signed x signed). */
static inline uint32_t group_q8_0_signed(int unused, const uint8_t *blk, int j) {
    (void)unused;
    return ft_qg_ld32(blk + 2 + 4 * j);
}
static void pack_w_q8_0_signed(const void *w, size_t wr, int n, int64_t k, void *t) {
    ft_qg_pack_w(w, wr, n, k, t, TR, 32, 0, 32, sizeof(ft_block_q8_0), group_q8_0_signed, ft_qg_scales_d0);
}

#define PACK_A(name, ACT, G, XMODE, OFF)                                                \
    static void name(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) { \
        ft_qg_pack_a(a, a_row, n_tok, k, tile, ACT, G, XMODE, OFF);                   \
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

#define ENTRY(T, ACT, SZ, PW, PA, KER)                                                           \
    static const struct ft_qgemm g_##T = {                                                               \
        .type = FT_TYPE_##T, .act_type = FT_TYPE_##ACT, .tile_rows = TR, .tile_tokens = TT,              \
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
FT_QG_PACK_W_LUT(pack_w_lut_, TR, 4, 0)
static void pack_a_iq4_xs(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) {
    ft_qg_pack_a_q8_K_32(a, a_row, n_tok, k, tile, 0, 4, TT);
}
ENTRY(IQ4_NL, Q8_0, size_q8_0_class, pack_w_lut_iq4_nl, pack_a_q8_0, kernel_q8_0_class)
ENTRY(MXFP4, Q8_0, size_q8_0_class, pack_w_lut_mxfp4, pack_a_q8_0, kernel_q8_0_class)
ENTRY(IQ4_XS, Q8_K, size_q8_0_class, pack_w_lut_iq4_xs, pack_a_iq4_xs, kernel_q8_0_class)

void ft_neon_dotprod_qgemm_fill(struct ft_level *l) {
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
