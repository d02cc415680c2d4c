/* AVX2 GEMM for float weights (F32, F16, BF16): the "avx2" level's
 * ft_float_kernels.gemm (include/ft/ops.h). Same scheme and numerics as
 * avx512_float_gemm.c (see there), sized for 16 ymm registers:
 *   - A packed in panels of MR = 6 rows, [k][6] floats, rounded to the
 *     weight type's vec_dot_type;
 *   - W packed per (16-row panel, KC-deep slice) into [KC][16] f32 with
 *     8x8 transposes;
 *   - a 6x16 micro-tile: 12 ymm accumulators, 2 loads of W and 6
 *     broadcasts of A per k, 12 FMAs;
 *   - tiles of up to 86 panels (516 rows) accumulate in a contiguous
 *     buffer copied to c once per weight panel;
 *   - 3 to 5 rows: each weight row streamed once against all rows of A,
 *     kept row-major (fewer rows take the vec_dot loop: gemm_min_m). */
#include "ft/common.h"
#include "ft/ops.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/x86/avx2_common.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#define MR 6
#define NR 16
#define KC 256
#define CHUNK_PANELS 86
/* Up to this many rows of A: gemm_small, as on AVX-512 (avx512_float_gemm.c),
 * with 2-row tiles (2 x 5 accumulators + 2 weights + 1 row of A in 16 ymm). */
#define SMALL_M 5

/* 8 consecutive weights of a row as f32; lanes >= valid are zero. */
static inline __m256 load_w8(enum ft_type wt, const void *p, int64_t valid) {
    switch (wt) {
    case FT_TYPE_F16:
        return _mm256_cvtph_ps(ft_load8_u16(p, valid));
    case FT_TYPE_BF16:
        return ft_bf16x8_to_ps(ft_load8_u16(p, valid));
    default:
        return ft_load8_ps(p, valid);
    }
}

/* Rows [0, nv) of a 16-row weight panel, elements [k0, k0 + kc) -> out[k][16]. */
static void pack_w(enum ft_type wt, const char *w, size_t w_row, int64_t nv, int64_t k0, int64_t kc,
                   float *restrict out) {
    const size_t esz = wt == FT_TYPE_F32 ? 4 : 2;
    for (int64_t kk = 0; kk < kc; kk += 8) {
        const int64_t kv = kc - kk;
        for (int h = 0; h < 2; h++) {
            __m256 r[8];
            for (int j = 0; j < 8; j++) {
                const int64_t row = h * 8 + j;
                r[j] = row < nv ? load_w8(wt, w + (size_t)row * w_row + (size_t)(k0 + kk) * esz, kv)
                                : _mm256_setzero_ps();
            }
            ft_transpose8(r);
            for (int j = 0; j < 8 && j < kv; j++)
                _mm256_store_ps(out + (kk + j) * NR + h * 8, r[j]);
        }
    }
}

static void kernel(int64_t kc, const float *restrict a, const float *restrict b, float *ct, bool add) {
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_load_ps(b + k * NR);
        const __m256 b1 = _mm256_load_ps(b + k * NR + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const __m256 ai = _mm256_broadcast_ss(a + k * MR + i);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    for (int i = 0; i < MR; i++) {
        float *ci = ct + i * NR;
        if (add) {
            acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_load_ps(ci));
            acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_load_ps(ci + 8));
        }
        _mm256_store_ps(ci, acc[i][0]);
        _mm256_store_ps(ci + 8, acc[i][1]);
    }
}

static size_t gemm_packed_size(enum ft_type wt, int64_t m, int64_t k) {
    if (wt != FT_TYPE_F32 && wt != FT_TYPE_F16 && wt != FT_TYPE_BF16)
        return 0;
    if (m <= SMALL_M) /* row-major for gemm_small */
        return (size_t)m * (size_t)k * sizeof(float);
    return (size_t)((m + MR - 1) / MR) * (size_t)k * MR * sizeof(float);
}

/* 8 activations rounded as the weight type's vec_dot_type, in f32. */
static inline __m256 round_act(enum ft_type wt, __m256 v) {
    if (wt == FT_TYPE_F16)
        return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (wt == FT_TYPE_BF16) { /* ft_float_to_bfloat's rounding; NaN lanes keep a NaN */
        const __m256i u = _mm256_castps_si256(v);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
        r = _mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u));
        return _mm256_blendv_ps(_mm256_castsi256_ps(r), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    return v;
}

static void gemm_pack(enum ft_type wt, const float *a, int64_t lda, int64_t m, int64_t k, int64_t p0, int64_t p1,
                      void *packed) {
    if (m <= SMALL_M) {
        for (int64_t i = p0 * MR; i < FT_MIN(m, p1 * MR); i++)
            for (int64_t kk = 0; kk < k; kk += 8) {
                const __m256i km = ft_lanes8(k - kk);
                _mm256_maskstore_ps((float *)packed + i * k + kk, km,
                                    round_act(wt, _mm256_maskload_ps(a + i * lda + kk, km)));
            }
        return;
    }
    const __m256i six = ft_lanes8(MR);
    for (int64_t p = p0; p < p1; p++) {
        float *out = (float *)packed + (size_t)p * (size_t)k * MR;
        const int64_t r0 = p * MR;
        const int mv = (int)FT_MIN(MR, m - r0);
        for (int64_t k0 = 0; k0 < k; k0 += 8) {
            const int64_t kv = k - k0;
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = i < mv ? round_act(wt, ft_load8_ps(a + (r0 + i) * lda + k0, kv)) : _mm256_setzero_ps();
            ft_transpose8(r);
            for (int64_t j = 0; j < 8 && j < kv; j++)
                _mm256_maskstore_ps(out + (k0 + j) * MR, six, r[j]);
        }
    }
}

/* ---- up to SMALL_M rows: weight rows streamed once against all rows of A ---- */

static inline __attribute__((always_inline)) void small_tile(enum ft_type wt, const char *w, size_t w_row, int64_t k,
                                                             int R, int T, const float *a, float *c, int64_t ldc,
                                                             int rv) {
    const size_t esz = wt == FT_TYPE_F32 ? 4 : 2;
    __m256 acc[2][SMALL_M];
    for (int r = 0; r < 2; r++) /* all of it: GCC cannot tell R x T covers the reads */
        for (int t = 0; t < SMALL_M; t++)
            acc[r][t] = _mm256_setzero_ps();
    for (int64_t kk = 0; kk < k; kk += 8) {
        __m256 wv[2];
        for (int r = 0; r < R; r++) {
            const char *wr = w + (size_t)(r < rv ? r : 0) * w_row + (size_t)kk * esz;
            _mm_prefetch(wr + FT_PREFETCH_DIST, _MM_HINT_T0);
            wv[r] = load_w8(wt, wr, k - kk);
        }
        for (int t = 0; t < T; t++) {
            const __m256 av = ft_load8_ps(a + t * k + kk, k - kk);
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm256_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
    for (int r = 0; r < rv; r++)
        for (int t = 0; t < T; t++)
            c[t * ldc + r] = ft_hsum256(acc[r][t]);
}

#define SMALL_CASE(R, T)                                                                                          \
    case T:                                                                                                       \
        for (int64_t n = n0; n < n1; n += R)                                                                      \
            small_tile(wt, (const char *)w + (size_t)n * w_row, w_row, k, R, T, a, c + n, ldc, (int)FT_MIN(R, n1 - n)); \
        break;

static void gemm_small(enum ft_type wt, const void *w, size_t w_row, int64_t k, int64_t n0, int64_t n1, const float *a,
                       int64_t m, float *c, int64_t ldc) {
    switch (m) {
        SMALL_CASE(2, 1) /* only reached when called directly (tests): the engine */
        SMALL_CASE(2, 2) /* takes the vec_dot loop below gemm_min_m = 3 rows */
        SMALL_CASE(2, 3)
        SMALL_CASE(2, 4)
        SMALL_CASE(2, 5)
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
    _Alignas(32) float bbuf[KC * NR];
    _Alignas(32) float ctile[CHUNK_PANELS * MR * NR];
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
            const __m256i m0 = ft_lanes8(nv), m1 = ft_lanes8(nv - 8);
            const int64_t rows = FT_MIN(pn * MR, m - pc * MR);
            for (int64_t i = 0; i < rows; i++) {
                float *ci = c + (pc * MR + i) * ldc + n;
                _mm256_maskstore_ps(ci, m0, _mm256_load_ps(ctile + i * NR));
                _mm256_maskstore_ps(ci + 8, m1, _mm256_load_ps(ctile + i * NR + 8));
            }
        }
    }
}

void ft_avx2_float_gemm_fill(struct ft_level *l) {
    struct ft_float_kernels *t = &l->ops;
    t->gemm_mr = MR;
    t->gemm_nr = NR;
    /* 1-2 rows: the vec_dot loop keeps more FMA chains in flight than 2x1
     * or 2x2 tiles (measured 2.8 vs 3.2 ms and 3.8 vs 4.5 ms on 8192x2048
     * F16); from 3 rows gemm_small wins (3.7 vs 4.7 ms). */
    t->gemm_min_m = 3;
    t->gemm_packed_size = gemm_packed_size;
    t->gemm_pack = gemm_pack;
    t->gemm = gemm;
}
