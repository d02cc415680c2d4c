/* AVX2 GEMM for float weights (F32, F16, BF16): the "avx2" level's
 * ft_float_kernels.gemm (include/ft/ops.h). The panel path is
 * float_gemm_impl.h over vec256.h (see there), sized for 16 ymm registers:
 * panels of MR = 6 rows of A, a 6x16 micro-tile in 12 accumulators (2
 * loads of W and 6 broadcasts of A per k), chunks of 86 panels (516 rows).
 * 3 to 10 rows: gemm_small (float_gemm_impl.h), each weight row streamed
 * once against up to 5 rows of A at a time, kept row-major (fewer rows take
 * the vec_dot loop: gemm_min_m). */
#include "simd/x86/vec256.h"

#define FT_GEMM_MR 6
#define FT_GEMM_CHUNK_PANELS 86
#define FT_GEMM_BF16_PAIRS 0
/* gemm_small up to 10 rows. One thread, F16 2048x8192 and 8192x2048,
 * GFLOP/s against the panels: 6 rows 53-54 vs 50-51, 8 rows 56-57 vs
 * 45-46, 10 rows 62-67 vs 53, 11 rows 53-54 vs 59. */
#define FT_GEMM_SMALL_M 10
#define FT_GEMM_SMALL_R 2
#define FT_GEMM_SMALL_T 5
#define FT_GEMM_SMALL_SKIP 0
#include "simd/x86/float_gemm_impl.h"


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
