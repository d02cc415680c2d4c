/* NEON GEMM for float weights (F32, F16, BF16): the "neon" level's
 * ft_float_kernels.gemm (include/ft/ops.h), inherited by neon-dotprod and
 * neon-i8mm.
 *
 *   C (m, n) = A (m, k) W^T,   W: n rows of k weights in their file type.
 *
 * Numerics as avx2_float_gemm.c and avx512_float_gemm.c: A is first
 * rounded to the weight type's vec_dot_type (fp16 for F16 weights with
 * fcvtn, bf16 for BF16 by ft_float_to_bfloat's rounding; F32 stays), F16
 * weights are widened with fcvtl and BF16 ones by a shift, and every
 * product is formed and accumulated in f32 with fmla. Only the order of
 * the f32 additions differs from ft_matmul_rows_ref.
 *
 * Blocking, as avx2's with 32 128-bit registers instead of 16 256-bit:
 *   - A packed in panels of MR = 6 rows, [k][6] floats;
 *   - W packed per (16-row panel, KC-deep slice) into [KC][16] f32 with
 *     4x4 transposes after widening (16 KiB, in L1), reused by every panel
 *     of A;
 *   - a 6x16 micro-tile: 24 accumulators; per k, 4 loads of W, one load of
 *     A's 6 values (a q and a d register) and 24 fmla by element;
 *   - tiles of up to 86 panels (516 rows) accumulate in a contiguous
 *     buffer copied to c once per weight panel;
 *   - up to SMALL_M = 5 rows: each weight row streamed once against all
 *     rows of A, kept row-major, in 4-row x T tiles (4T accumulators).
 * Threads split n in multiples of 16 (gemm_nr, one 64-byte line of an
 * output row). Tile sizes follow the register file; they were not tuned on
 * ARM hardware (the project has none yet: docs/performance.md). */
#include "ft/common.h"
#include "ft/ops.h"
#include "simd/arm/neon_common.h"
#include "simd/kernels.h"
#include "simd/level.h"

#include <arm_neon.h>
#include <stdbool.h>
#include <stdint.h>

#define MR 6
#define NR 16
#define KC 256
#define CHUNK_PANELS 86
#define SMALL_M 5
#define SMALL_R 4 /* weight rows per gemm_small tile */

/* 4 consecutive weights of a row as f32; lanes >= valid are zero. */
static inline float32x4_t load_w4(enum ft_type wt, const void *p, int64_t valid) {
    switch (wt) {
    case FT_TYPE_F16:
        return ft_neon_f16_to_f32(ft_neon_load4_u16(p, valid));
    case FT_TYPE_BF16:
        return ft_neon_bf16_to_f32(ft_neon_load4_u16(p, valid));
    default:
        return ft_neon_load4(p, valid);
    }
}

/* 4 activations rounded as the weight type's vec_dot_type, in f32. */
static inline float32x4_t round_act(enum ft_type wt, float32x4_t v) {
    if (wt == FT_TYPE_F16)
        return ft_neon_round_f16(v);
    if (wt == FT_TYPE_BF16)
        return ft_neon_round_bf16(v);
    return v;
}

/* Rows [0, nv) of a 16-row weight panel, elements [k0, k0 + kc) -> out[k][16]. */
static void pack_w(enum ft_type wt, const char *w, size_t w_row, int64_t nv, int64_t k0, int64_t kc,
                   float *restrict out) {
    const size_t esz = wt == FT_TYPE_F32 ? 4 : 2;
    for (int64_t kk = 0; kk < kc; kk += 4) {
        const int64_t kv = kc - kk;
        for (int h = 0; h < NR / 4; h++) {
            float32x4_t r[4];
            for (int j = 0; j < 4; j++) {
                const int64_t row = h * 4 + j;
                r[j] = row < nv ? load_w4(wt, w + (size_t)row * w_row + (size_t)(k0 + kk) * esz, kv)
                                : vdupq_n_f32(0.0f);
            }
            ft_neon_transpose4(r);
            for (int j = 0; j < 4 && j < kv; j++)
                vst1q_f32(out + (kk + j) * NR + h * 4, r[j]);
        }
    }
}

/* ct (MR x NR, row-major) = (add ? ct : 0) + a (panel, [kc][MR]) . b ([kc][NR]) */
static void kernel(int64_t kc, const float *restrict a, const float *restrict b, float *ct, bool add) {
    float32x4_t acc[MR][NR / 4];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR / 4; j++)
            acc[i][j] = vdupq_n_f32(0.0f);
    for (int64_t k = 0; k < kc; k++) {
        const float32x4_t b0 = vld1q_f32(b + k * NR), b1 = vld1q_f32(b + k * NR + 4);
        const float32x4_t b2 = vld1q_f32(b + k * NR + 8), b3 = vld1q_f32(b + k * NR + 12);
        const float32x4_t a03 = vld1q_f32(a + k * MR);
        const float32x2_t a45 = vld1_f32(a + k * MR + 4);
#define FT_ROW_Q(I)                                                                                                 \
    acc[I][0] = vfmaq_laneq_f32(acc[I][0], b0, a03, I);                                                           \
    acc[I][1] = vfmaq_laneq_f32(acc[I][1], b1, a03, I);                                                           \
    acc[I][2] = vfmaq_laneq_f32(acc[I][2], b2, a03, I);                                                           \
    acc[I][3] = vfmaq_laneq_f32(acc[I][3], b3, a03, I);
#define FT_ROW_D(I)                                                                                                 \
    acc[4 + I][0] = vfmaq_lane_f32(acc[4 + I][0], b0, a45, I);                                                    \
    acc[4 + I][1] = vfmaq_lane_f32(acc[4 + I][1], b1, a45, I);                                                    \
    acc[4 + I][2] = vfmaq_lane_f32(acc[4 + I][2], b2, a45, I);                                                    \
    acc[4 + I][3] = vfmaq_lane_f32(acc[4 + I][3], b3, a45, I);
        FT_ROW_Q(0)
        FT_ROW_Q(1)
        FT_ROW_Q(2)
        FT_ROW_Q(3)
        FT_ROW_D(0)
        FT_ROW_D(1)
#undef FT_ROW_Q
#undef FT_ROW_D
    }
    for (int i = 0; i < MR; i++) {
        float *ci = ct + i * NR;
        for (int j = 0; j < NR / 4; j++) {
            if (add)
                acc[i][j] = vaddq_f32(acc[i][j], vld1q_f32(ci + 4 * j));
            vst1q_f32(ci + 4 * j, acc[i][j]);
        }
    }
}

static size_t gemm_packed_size(enum ft_type wt, int64_t m, int64_t k) {
    if (wt != FT_TYPE_F32 && wt != FT_TYPE_F16 && wt != FT_TYPE_BF16)
        return 0;
    if (m <= SMALL_M) /* row-major for gemm_small */
        return (size_t)m * (size_t)k * sizeof(float);
    return (size_t)((m + MR - 1) / MR) * (size_t)k * MR * sizeof(float);
}

static void gemm_pack(enum ft_type wt, const float *a, int64_t lda, int64_t m, int64_t k, int64_t p0, int64_t p1,
                      void *packed) {
    if (m <= SMALL_M) {
        for (int64_t i = p0 * MR; i < FT_MIN(m, p1 * MR); i++)
            for (int64_t kk = 0; kk < k; kk += 4)
                ft_neon_store4((float *)packed + i * k + kk, round_act(wt, ft_neon_load4(a + i * lda + kk, k - kk)),
                               k - kk);
        return;
    }
    for (int64_t p = p0; p < p1; p++) {
        float *out = (float *)packed + (size_t)p * (size_t)k * MR;
        const int64_t r0 = p * MR;
        const int mv = (int)FT_MIN(MR, m - r0);
        for (int64_t k0 = 0; k0 < k; k0 += 4) {
            const int64_t kv = k - k0;
            float32x4_t r[MR];
            for (int i = 0; i < MR; i++)
                r[i] = i < mv ? round_act(wt, ft_neon_load4(a + (r0 + i) * lda + k0, kv)) : vdupq_n_f32(0.0f);
            ft_neon_transpose4(r); /* rows 0-3: r[j] = column k0 + j */
            /* rows 4-5: (r4[j], r5[j]) pairs, two columns per register */
            const float32x4_t lo = vzip1q_f32(r[4], r[5]), hi = vzip2q_f32(r[4], r[5]);
            const float32x2_t pair[4] = {vget_low_f32(lo), vget_high_f32(lo), vget_low_f32(hi), vget_high_f32(hi)};
            for (int64_t j = 0; j < 4 && j < kv; j++) {
                vst1q_f32(out + (k0 + j) * MR, r[j]);
                vst1_f32(out + (k0 + j) * MR + 4, pair[j]);
            }
        }
    }
}

/* ---- up to SMALL_M rows: weight rows streamed once against all rows of A ---- */

static inline __attribute__((always_inline)) void small_tile(enum ft_type wt, const char *w, size_t w_row, int64_t k,
                                                             int T, const float *a, float *c, int64_t ldc, int rv) {
    const size_t esz = wt == FT_TYPE_F32 ? 4 : 2;
    float32x4_t acc[SMALL_R][SMALL_M];
    for (int r = 0; r < SMALL_R; r++)
        for (int t = 0; t < SMALL_M; t++)
            acc[r][t] = vdupq_n_f32(0.0f);
    for (int64_t kk = 0; kk < k; kk += 4) {
        float32x4_t wv[SMALL_R];
        for (int r = 0; r < SMALL_R; r++) {
            /* rows past rv repeat row 0 (computed, not stored) */
            const char *wr = w + (size_t)(r < rv ? r : 0) * w_row + (size_t)kk * esz;
            __builtin_prefetch(wr + FT_PREFETCH_DIST, 0, 3);
            wv[r] = load_w4(wt, wr, k - kk);
        }
        for (int t = 0; t < T; t++) {
            const float32x4_t av = ft_neon_load4(a + t * k + kk, k - kk);
            for (int r = 0; r < SMALL_R; r++)
                acc[r][t] = vfmaq_f32(acc[r][t], wv[r], av);
        }
    }
    for (int r = 0; r < rv; r++)
        for (int t = 0; t < T; t++)
            c[t * ldc + r] = vaddvq_f32(acc[r][t]);
}

#define SMALL_CASE(T)                                                                                             \
    case T:                                                                                                       \
        for (int64_t n = n0; n < n1; n += SMALL_R)                                                                \
            small_tile(wt, (const char *)w + (size_t)n * w_row, w_row, k, T, a, c + n, ldc,                       \
                       (int)FT_MIN(SMALL_R, n1 - n));                                                             \
        break;

static void gemm_small(enum ft_type wt, const void *w, size_t w_row, int64_t k, int64_t n0, int64_t n1, const float *a,
                       int64_t m, float *c, int64_t ldc) {
    switch (m) {
        SMALL_CASE(1) /* 1-2 rows: only reached when called directly (tests): */
        SMALL_CASE(2) /* the engine takes the vec_dot loop below gemm_min_m */
        SMALL_CASE(3)
        SMALL_CASE(4)
        SMALL_CASE(5)
    default:
        break;
    }
}

static void gemm(enum ft_type wt, const void *w, size_t w_row, int64_t k, int64_t n0, int64_t n1,
                 const void *packed, int64_t m, float *c, int64_t ldc) {
    if (m <= SMALL_M) {
        gemm_small(wt, w, w_row, k, n0, n1, packed, m, c, ldc);
        return;
    }
    _Alignas(16) float bbuf[KC * NR];
    _Alignas(16) float ctile[CHUNK_PANELS * MR * NR];
    const int64_t panels = (m + MR - 1) / MR;
    for (int64_t pc = 0; pc < panels; pc += CHUNK_PANELS) {
        const int64_t pn = FT_MIN(CHUNK_PANELS, panels - pc);
        for (int64_t n = n0; n < n1; n += NR) {
            const int64_t nv = FT_MIN(NR, n1 - n);
            const char *wp = (const char *)w + (size_t)n * w_row;
            for (int64_t k0 = 0; k0 < k; k0 += KC) {
                const int64_t kc = FT_MIN(KC, k - k0);
                pack_w(wt, wp, w_row, nv, k0, kc, bbuf);
                for (int64_t p = 0; p < pn; p++)
                    kernel(kc, (const float *)packed + ((size_t)(pc + p) * (size_t)k + (size_t)k0) * MR, bbuf,
                           ctile + p * MR * NR, k0 > 0);
            }
            const int64_t rows = FT_MIN(pn * MR, m - pc * MR);
            for (int64_t i = 0; i < rows; i++) {
                float *ci = c + (pc * MR + i) * ldc + n;
                for (int j = 0; j < NR; j += 4)
                    ft_neon_store4(ci + j, vld1q_f32(ctile + i * NR + j), nv - j);
            }
        }
    }
}

void ft_neon_float_gemm_fill(struct ft_level *l) {
    struct ft_float_kernels *t = &l->ops;
    t->gemm_mr = MR;
    t->gemm_nr = NR;
    /* As on avx2, where 1-2 rows ran faster through the vec_dot loop (not
     * measured on ARM). */
    t->gemm_min_m = 3;
    t->gemm_packed_size = gemm_packed_size;
    t->gemm_pack = gemm_pack;
    t->gemm = gemm;
}
