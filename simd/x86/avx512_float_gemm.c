/* AVX-512 GEMM for float weights (F32, F16, BF16): the prefill matmul of
 * the "avx512" level (include/ft/ops.h, struct ft_float_kernels). The panel
 * path is float_gemm_impl.h over vec512.h (see there), sized for 32 zmm and
 * 48 KiB L1 / 2 MiB L2: panels of MR = 12 rows of A, a 12x32 micro-tile in
 * 24 accumulators (2 loads of W, 12 broadcasts of A, 24 FMAs per k),
 * chunks of 43 panels (516 rows, a whole FT_UBATCH).
 *
 * This file adds what AVX2 has no counterpart for, or tunes differently:
 *   - BF16 weights are widened (a shift) and take the same FMA kernel; a
 *     vdpbf16ps kernel on k-pairs (packed [k/2][12] pairs of A, [k/2][32]
 *     pairs of W) exists for CPUs where it is faster, but on the test
 *     machine it ran at half the FMA path's speed (see
 *     ft_avx512_float_gemm_fill_ops). It treats subnormal bf16 as zero,
 *     like the vec_dot_bf16_dp of avx512_quant.c.
 *   - up to 20 rows, gemm_small (float_gemm_impl.h) streams 4 weight rows
 *     at a time against up to 6 rows of A, with a prefetch that skips to
 *     the next tile at the ends of rows (AVX2's has 2-row tiles and no
 *     skip: each measured on its own).
 *
 * Threads split n in multiples of 32 (ft_float_kernels.gemm_nr): each
 * weight is read by one thread, and the packed A is shared read-only. */
#include "simd/x86/vec512.h"

#define FT_GEMM_MR 12
#define FT_GEMM_CHUNK_PANELS 43
#define FT_GEMM_BF16_PAIRS 1
/* gemm_small up to 20 rows. One thread, F16 2048x8192 and 8192x2048,
 * GFLOP/s against the panels: 8 rows 87-97 vs 59-62, 12 rows 103-110 vs
 * 88-92, 16 rows 99-106 vs 76-80, 20 rows 98-103 vs 97-98, 22 rows
 * 101-105 vs 108-110. */
#define FT_GEMM_SMALL_M 20
#define FT_GEMM_SMALL_R 4
#define FT_GEMM_SMALL_T 6
#define FT_GEMM_SMALL_SKIP 1
#include "simd/x86/float_gemm_impl.h"


/* ---- the vdpbf16ps layout (float_gemm_impl.h's FT_GEMM_BF16_PAIRS) ---------- */

/* out[p][32] 32-bit pairs (elements 2p, 2p+1 of each row) for pairs p of
 * [k0, k0 + kc); kc even or the last slice of an odd k (the missing
 * element is zero). */
static void pack_w_bf16_pairs(const char *w, size_t w_row, int64_t nv, int64_t k0, int64_t kc,
                              uint32_t *restrict out) {
    const int64_t pairs = (kc + 1) / 2;
    for (int64_t pp = 0; pp < pairs; pp += 16) {
        const int64_t ev = FT_MIN(32, kc - 2 * pp); /* valid elements in this chunk */
        for (int h = 0; h < 2; h++) {
            __m512 r[16];
            for (int j = 0; j < 16; j++) {
                const int64_t row = h * 16 + j;
                const __mmask32 m = ev >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << ev) - 1u);
                r[j] = row < nv ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(
                                      m, w + (size_t)row * w_row + (size_t)(k0 + 2 * pp) * 2))
                                : _mm512_setzero_ps();
            }
            ftv_transpose(r);
            for (int j = 0; j < 16 && pp + j < pairs; j++)
                _mm512_store_ps((float *)(out + (pp + j) * NR + h * 16), r[j]);
        }
    }
}

__attribute__((target("avx512bf16"))) static void kernel_bf16_dp(int64_t pairs, const uint32_t *restrict a,
                                                                  const uint32_t *restrict b, float *ct,
                                                                  bool add) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; p++) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(b + p * NR);
        const __m512bh b1 = (__m512bh)_mm512_load_si512(b + p * NR + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[p * MR + i]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
        }
    }
    store_tile(acc, ct, add);
}

/* 32 elements of a row of A (valid of them) -> 16 bf16 pairs in 32-bit lanes. */
static ftv pack_a_pairs_row(const float *src, int64_t valid) {
    const __m512 lo = round_act(FT_TYPE_BF16, _mm512_maskz_loadu_ps(ftv_mask(valid), src));
    const __m512 hi = round_act(FT_TYPE_BF16, _mm512_maskz_loadu_ps(ftv_mask(valid - 16), src + 16));
    const __m512i l16 = _mm512_srli_epi32(_mm512_castps_si512(lo), 16);
    const __m512i h16 = _mm512_srli_epi32(_mm512_castps_si512(hi), 16);
    return _mm512_castsi512_ps(
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(l16)), _mm512_cvtepi32_epi16(h16), 1));
}

/* dp: the CPU has AVX512_BF16, so BF16 weights take the vdpbf16ps path. */
static size_t packed_size(enum ft_type wt, int64_t m, int64_t k, bool dp) {
    if (wt != FT_TYPE_F32 && wt != FT_TYPE_F16 && wt != FT_TYPE_BF16)
        return 0;
    if (m <= SMALL_M) /* row-major floats for gemm_small */
        return (size_t)m * (size_t)k * sizeof(float);
    return panels_size(m, k, wt == FT_TYPE_BF16 && dp);
}

static void pack_a(enum ft_type wt, const float *a, int64_t lda, int64_t m, int64_t k, int64_t p0, int64_t p1,
                   void *packed, bool dp) {
    if (m <= SMALL_M)
        pack_a_rows(wt, a, lda, m, k, p0, p1, packed);
    else
        pack_a_panels(wt, a, lda, m, k, p0, p1, packed, wt == FT_TYPE_BF16 && dp);
}

static void gemm(enum ft_type wt, const void *w, size_t w_row, int64_t k, int64_t n0, int64_t n1,
                 const void *packed, int64_t m, float *c, int64_t ldc, bool dp) {
    if (m <= SMALL_M)
        gemm_small(wt, w, w_row, k, n0, n1, packed, m, c, ldc);
    else
        gemm_panels(wt, w, w_row, k, n0, n1, packed, m, c, ldc, wt == FT_TYPE_BF16 && dp);
}

static size_t packed_size_fma(enum ft_type wt, int64_t m, int64_t k) { return packed_size(wt, m, k, false); }
static size_t packed_size_dp(enum ft_type wt, int64_t m, int64_t k) { return packed_size(wt, m, k, true); }
static void pack_a_fma(enum ft_type wt, const float *a, int64_t lda, int64_t m, int64_t k, int64_t p0, int64_t p1,
                       void *packed) {
    pack_a(wt, a, lda, m, k, p0, p1, packed, false);
}
static void pack_a_dp(enum ft_type wt, const float *a, int64_t lda, int64_t m, int64_t k, int64_t p0, int64_t p1,
                      void *packed) {
    pack_a(wt, a, lda, m, k, p0, p1, packed, true);
}
static void gemm_fma(enum ft_type wt, const void *w, size_t w_row, int64_t k, int64_t n0, int64_t n1,
                     const void *packed, int64_t m, float *c, int64_t ldc) {
    gemm(wt, w, w_row, k, n0, n1, packed, m, c, ldc, false);
}
static void gemm_dp(enum ft_type wt, const void *w, size_t w_row, int64_t k, int64_t n0, int64_t n1,
                    const void *packed, int64_t m, float *c, int64_t ldc) {
    gemm(wt, w, w_row, k, n0, n1, packed, m, c, ldc, true);
}

/* use_bf16_dp: take the vdpbf16ps path for BF16 weights. Measured on the
 * 2-core AVX512_BF16 test machine (Xeon, KVM), one thread, the 1B's shapes
 * at m = 512: vdpbf16ps 78-80 GFLOP/s, widening bf16 + FMA 125-145 --
 * vdpbf16ps runs at half the FMA rate there -- so ft_avx512_float_gemm_fill
 * passes 0 and the dp path stays, tested, for CPUs where it pays. */
void ft_avx512_float_gemm_fill_ops(struct ft_float_kernels *t, bool use_bf16_dp) {
    t->gemm_mr = MR;
    t->gemm_nr = NR;
    t->gemm_min_m = 1;
    t->gemm_packed_size = use_bf16_dp ? packed_size_dp : packed_size_fma;
    t->gemm_pack = use_bf16_dp ? pack_a_dp : pack_a_fma;
    t->gemm = use_bf16_dp ? gemm_dp : gemm_fma;
}

/* FMA beats vdpbf16ps here: see the opening comment. */
void ft_avx512_float_gemm_fill(struct ft_level *l) { ft_avx512_float_gemm_fill_ops(&l->ops, false); }
