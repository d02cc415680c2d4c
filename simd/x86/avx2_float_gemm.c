/* AVX2 GEMM for float weights (F32, F16, BF16): the "avx2" level's
 * ft_float_kernels.gemm (include/ft/ops.h). The panel path is
 * float_gemm_impl.h over vec256.h (see there), sized for 16 ymm registers:
 * panels of MR = 6 rows of A, a 6x16 micro-tile in 12 accumulators (2
 * loads of W and 6 broadcasts of A per k), chunks of 86 panels (516 rows).
 * 3 to 5 rows: each weight row streamed once against all rows of A, kept
 * row-major (fewer rows take the vec_dot loop: gemm_min_m). */
#include "simd/x86/vec256.h"

#define FT_GEMM_MR 6
#define FT_GEMM_CHUNK_PANELS 86
#define FT_GEMM_BF16_PAIRS 0
#include "simd/x86/float_gemm_impl.h"

/* Up to this many rows of A: gemm_small, as on AVX-512 (avx512_float_gemm.c),
 * with 2-row tiles (2 x 5 accumulators + 2 weights + 1 row of A in 16 ymm). */
#define SMALL_M 5

static size_t gemm_packed_size(enum ft_type wt, int64_t m, int64_t k) {
    if (wt != FT_TYPE_F32 && wt != FT_TYPE_F16 && wt != FT_TYPE_BF16)
        return 0;
    if (m <= SMALL_M) /* row-major for gemm_small */
        return (size_t)m * (size_t)k * sizeof(float);
    return panels_size(m, k, false);
}

static void gemm_pack(enum ft_type wt, const float *a, int64_t lda, int64_t m, int64_t k, int64_t p0, int64_t p1,
                      void *packed) {
    if (m <= SMALL_M)
        pack_a_rows(wt, a, lda, m, k, p0, p1, packed);
    else
        pack_a_panels(wt, a, lda, m, k, p0, p1, packed, false);
}

/* ---- up to SMALL_M rows: weight rows streamed once against all rows of A ---- */

static inline __attribute__((always_inline)) void small_tile(enum ft_type wt, const char *w, size_t w_row, int64_t k,
                                                             int R, int T, const float *a, float *c, int64_t ldc,
                                                             int rv) {
    const size_t esz = wt == FT_TYPE_F32 ? 4 : 2;
    ftv acc[2][SMALL_M];
    FT_UNROLL(8) for (int r = 0; r < 2; r++) /* all of it: GCC cannot tell R x T covers the reads */
        FT_UNROLL(8) for (int t = 0; t < SMALL_M; t++)
            acc[r][t] = ftv_zero();
    for (int64_t kk = 0; kk < k; kk += FTV_N) {
        ftv wv[2];
        FT_UNROLL(8) for (int r = 0; r < R; r++) {
            const char *wr = w + (size_t)(r < rv ? r : 0) * w_row + (size_t)kk * esz;
            _mm_prefetch(wr + FT_PREFETCH_DIST, _MM_HINT_T0);
            wv[r] = load_w(wt, wr, k - kk);
        }
        FT_UNROLL(8) for (int t = 0; t < T; t++) {
            const ftv av = ftv_load_n(a + t * k + kk, k - kk);
            FT_UNROLL(8) for (int r = 0; r < R; r++)
                acc[r][t] = ftv_fmadd(wv[r], av, acc[r][t]);
        }
    }
    FT_UNROLL(8) for (int r = 0; r < R; r++)
        FT_UNROLL(8) for (int t = 0; t < T; t++)
            if (r < rv)
                c[t * ldc + r] = ftv_hsum(acc[r][t]);
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
    if (m <= SMALL_M)
        gemm_small(wt, w, w_row, k, n0, n1, packed, m, c, ldc);
    else
        gemm_panels(wt, w, w_row, k, n0, n1, packed, m, c, ldc, false);
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
