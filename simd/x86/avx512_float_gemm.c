/* AVX-512 GEMM for float weights (F32, F16, BF16): the prefill matmul of
 * the "avx512" level (include/ft/ops.h, struct ft_float_kernels).
 *
 *   C (m, n) = A (m, k) W^T,   W: n rows of k weights in their file type.
 *
 * Numerics follow ggml: A is first rounded to the weight type's vec_dot_type
 * (fp16 for F16 weights, bf16 for BF16; F32 stays), then every product is
 * formed in f32 and accumulated in f32 -- as llama.cpp's F16 path (vec_dot
 * and llamafile's tinyBLAS) does. Only the order of the f32 additions
 * differs from ft_matmul_rows_ref.
 *
 * Blocking (GotoBLAS style, sized for 48 KiB L1 / 2 MiB L2):
 *   - A is packed once per call into panels of MR = 12 rows, k-major
 *     ([k][12] floats), so the micro-kernel broadcasts consecutive floats;
 *   - W is packed per (32-row panel, KC-deep slice) into an L1-sized buffer
 *     [KC][32] of f32 -- a 16x16 transpose after widening -- and reused by
 *     every A panel, so the transpose costs 1/(m/12) of the FMAs;
 *   - the micro-kernel holds a 12x32 tile of C in 24 zmm accumulators:
 *     per k, 2 loads of W, 12 broadcasts of A, 24 FMAs (FMA-bound).
 * BF16 weights are widened (a shift) and take the same FMA kernel; a
 * vdpbf16ps kernel on k-pairs (packed [k/2][12] pairs of A, [k/2][32]
 * pairs of W) exists for CPUs where it is faster, but on the test machine
 * it ran at half the FMA path's speed (see ft_simd_fill_avx512_gemm). It
 * treats subnormal bf16 as zero, like the vec_dot_bf16_dp of avx512_quant.c.
 *
 * Threads split n in multiples of 32 (ft_float_kernels.gemm_nr): each
 * weight is read by one thread, and the packed A is shared read-only. */
#include "ft/common.h"
#include "ft/ops.h"
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/x86/avx512_common.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define MR 12
#define NR 32
#define KC 256
/* Up to this many rows of A: gemm_small (see there). Measured with a
 * 8192x2048 F16 matrix, one thread: 1 row 3.3 ms (vec_dot loop 3.6), 2 rows
 * 3.4 (4.2), 4 rows 3.6 (6.7); at 8 rows the panel GEMM's 5.5 ms beat the
 * 2-row tiles' 7.1. */
#define SMALL_M 6

/* 16 consecutive elements of a weight row as f32 (or, for the vdpbf16ps
 * path, 16 bf16 pairs as raw 32-bit lanes); elements past `valid` are 0. */
static inline __m512 load_w16(enum ft_type wt, const void *p, int64_t valid) {
    const __mmask16 m = ft_mask16(valid);
    switch (wt) {
    case FT_TYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
    case FT_TYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
    default:
        return _mm512_maskz_loadu_ps(m, p);
    }
}

/* Pack rows [0, nv) of a 32-row weight panel, elements [k0, k0 + kc), into
 * out[k][32] f32; rows nv..31 are zero. */
static void pack_w_f32(enum ft_type wt, const char *w, size_t w_row, int64_t nv, int64_t k0, int64_t kc,
                       float *restrict out) {
    const size_t esz = wt == FT_TYPE_F32 ? 4 : 2;
    for (int64_t kk = 0; kk < kc; kk += 16) {
        const int64_t kv = kc - kk;
        for (int h = 0; h < 2; h++) {
            __m512 r[16];
            for (int j = 0; j < 16; j++) {
                const int64_t row = h * 16 + j;
                r[j] = row < nv ? load_w16(wt, w + (size_t)row * w_row + (size_t)(k0 + kk) * esz, kv)
                                : _mm512_setzero_ps();
            }
            ft_transpose16(r);
            for (int j = 0; j < 16 && j < kv; j++)
                _mm512_store_ps(out + (kk + j) * NR + h * 16, r[j]);
        }
    }
}

/* vdpbf16ps layout: out[p][32] 32-bit pairs (elements 2p, 2p+1 of each
 * row) for pairs p of [k0, k0 + kc); kc even or the last slice of an odd k
 * (the missing element is zero). */
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
            ft_transpose16(r);
            for (int j = 0; j < 16 && pp + j < pairs; j++)
                _mm512_store_ps((float *)(out + (pp + j) * NR + h * 16), r[j]);
        }
    }
}

/* ---- micro-kernels --------------------------------------------------------- */

/* Write (or add to) a 12x32 tile of the contiguous tile buffer. */
static inline void store_tile(__m512 acc[MR][2], float *ct, bool add) {
    for (int i = 0; i < MR; i++) {
        float *ci = ct + i * NR;
        if (add) {
            acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_load_ps(ci));
            acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_load_ps(ci + 16));
        }
        _mm512_store_ps(ci, acc[i][0]);
        _mm512_store_ps(ci + 16, acc[i][1]);
    }
}

static void kernel_f32(int64_t kc, const float *restrict a, const float *restrict b, float *ct, bool add) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_load_ps(b + k * NR);
        const __m512 b1 = _mm512_load_ps(b + k * NR + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            const __m512 ai = _mm512_set1_ps(a[k * MR + i]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    store_tile(acc, ct, add);
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

/* ---- A packing ---------------------------------------------------------------- */

/* dp: the CPU has AVX512_BF16, so BF16 weights take the vdpbf16ps path. */
static size_t packed_size(enum ft_type wt, int64_t m, int64_t k, bool dp) {
    if (wt != FT_TYPE_F32 && wt != FT_TYPE_F16 && wt != FT_TYPE_BF16)
        return 0;
    if (m <= SMALL_M) /* row-major floats for gemm_small */
        return (size_t)m * (size_t)k * sizeof(float);
    const int64_t panels = (m + MR - 1) / MR;
    const int64_t kk = wt == FT_TYPE_BF16 && dp ? (k + 1) / 2 : k; /* floats or pairs: 4 bytes each */
    return (size_t)panels * (size_t)kk * MR * 4;
}

/* 16 elements of an activation row rounded as the weight type's
 * vec_dot_type, back in f32. vcvtps2ph rounds to nearest even as
 * ft_float_to_half does (NaN payloads aside, which stay NaN). */
static inline __m512 round_act(enum ft_type wt, __m512 v) {
    if (wt == FT_TYPE_F16)
        return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (wt == FT_TYPE_BF16) {
        /* ft_float_to_bfloat's integer rounding (vcvtneps2bf16 would flush
         * subnormals); a NaN lane keeps a NaN. */
        const __m512i u = _mm512_castps_si512(v);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
        r = _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
        const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        return _mm512_mask_mov_ps(_mm512_castsi512_ps(r), nan, v);
    }
    return v;
}

/* Panels [p0, p1) of A (m rows of k floats, lda apart). */
static void pack_a(enum ft_type wt, const float *a, int64_t lda, int64_t m, int64_t k, int64_t p0, int64_t p1,
                   void *packed, bool dp) {
    if (m <= SMALL_M) { /* row-major for gemm_small */
        for (int64_t i = p0 * MR; i < FT_MIN(m, p1 * MR); i++)
            for (int64_t kk = 0; kk < k; kk += 16) {
                const __mmask16 km = ft_mask16(k - kk);
                _mm512_mask_storeu_ps((float *)packed + i * k + kk, km,
                                      round_act(wt, _mm512_maskz_loadu_ps(km, a + i * lda + kk)));
            }
        return;
    }
    const bool pairs = wt == FT_TYPE_BF16 && dp;
    const int64_t kk = pairs ? (k + 1) / 2 : k;
    for (int64_t p = p0; p < p1; p++) {
        uint32_t *out = (uint32_t *)packed + (size_t)p * (size_t)kk * MR;
        const int64_t r0 = p * MR;
        const int mv = (int)FT_MIN(MR, m - r0);
        for (int64_t k0 = 0; k0 < k; k0 += pairs ? 32 : 16) {
            const int64_t kv = k - k0;
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                if (i >= mv) {
                    r[i] = _mm512_setzero_ps();
                } else if (!pairs) {
                    r[i] = round_act(wt, _mm512_maskz_loadu_ps(ft_mask16(kv), a + (r0 + i) * lda + k0));
                } else {
                    /* 32 elements -> 16 bf16 pairs in 32-bit lanes */
                    const float *src = a + (r0 + i) * lda + k0;
                    const __m512 lo = round_act(wt, _mm512_maskz_loadu_ps(ft_mask16(kv), src));
                    const __m512 hi = round_act(wt, _mm512_maskz_loadu_ps(ft_mask16(kv > 16 ? kv - 16 : 0), src + 16));
                    const __m512i l16 = _mm512_srli_epi32(_mm512_castps_si512(lo), 16);
                    const __m512i h16 = _mm512_srli_epi32(_mm512_castps_si512(hi), 16);
                    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(l16)),
                                                         _mm512_cvtepi32_epi16(h16), 1);
                    r[i] = _mm512_castsi512_ps(w);
                }
            }
            ft_transpose16(r);
            const int64_t steps = pairs ? FT_MIN(16, (kv + 1) / 2) : FT_MIN(16, kv);
            const int64_t base = pairs ? k0 / 2 : k0;
            for (int64_t j = 0; j < steps; j++)
                _mm512_mask_storeu_ps((float *)(out + (base + j) * MR), (__mmask16)0x0fff, r[j]);
        }
    }
}

/* ---- fewer rows than one panel ------------------------------------------------
 *
 * Up to SMALL_M rows (decode, batched decode of a few sequences) the
 * per-call transpose of every weight slice costs more than the FMAs it
 * feeds, so A is kept row-major (rounded as usual) and each weight row is
 * widened once and dotted with all m rows: R weight rows x T rows of A in
 * R*T accumulators, reduced at the end. Weights stream from memory once
 * (prefetched ahead, as vec_dot does). */

static inline __attribute__((always_inline)) void small_tile(enum ft_type wt, const char *w, size_t w_row, int64_t k,
                                                             int R, int T, const float *a, int64_t lda, float *c,
                                                             int64_t ldc, int rv) {
    const size_t esz = wt == FT_TYPE_F32 ? 4 : 2;
    __m512 acc[4][SMALL_M];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < k; kk += 16) {
        __m512 wv[4];
        /* R rows are R streams side by side: a prefetch that runs past the
         * end of its row would land in the next row of the tile (already
         * streaming), so it skips to the same row of the next tile */
        const size_t skip = (size_t)kk * esz + FT_PREFETCH_DIST >= (size_t)k * esz ? (size_t)(R - 1) * w_row : 0;
        for (int r = 0; r < R; r++) {
            const char *wr = w + (size_t)(r < rv ? r : 0) * w_row + (size_t)kk * esz;
            _mm_prefetch(wr + skip + FT_PREFETCH_DIST, _MM_HINT_T0);
            wv[r] = load_w16(wt, wr, k - kk);
        }
        for (int t = 0; t < T; t++) {
            const __m512 av = _mm512_maskz_loadu_ps(ft_mask16(k - kk), a + t * lda + kk);
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm512_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
    for (int r = 0; r < rv; r++)
        for (int t = 0; t < T; t++)
            c[t * ldc + r] = _mm512_reduce_add_ps(acc[r][t]);
}

#define SMALL_CASE(R, T)                                                                                          \
    case T:                                                                                                       \
        for (int64_t n = n0; n < n1; n += R)                                                                      \
            small_tile(wt, (const char *)w + (size_t)n * w_row, w_row, k, R, T, a, k, c + n, ldc, (int)FT_MIN(R, n1 - n)); \
        break;

static void gemm_small(enum ft_type wt, const void *w, size_t w_row, int64_t k, int64_t n0, int64_t n1, const float *a,
                       int64_t m, float *c, int64_t ldc) {
    switch (m) {
        SMALL_CASE(4, 1)
        SMALL_CASE(4, 2)
        SMALL_CASE(4, 3)
        SMALL_CASE(4, 4)
        SMALL_CASE(4, 5)
        SMALL_CASE(4, 6)
    default:
        break;
    }
}

/* ---- driver -------------------------------------------------------------------- */

/* A chunk of at most CHUNK_PANELS A panels (516 rows, a whole FT_UBATCH)
 * accumulates into a contiguous tile buffer, copied out to c once per
 * weight panel: writing the k-slices straight into c touched one page per
 * row (c rows are n floats apart), and on the 128256-wide output head those
 * TLB misses cost two thirds of the time. */
#define CHUNK_PANELS 43

static void gemm(enum ft_type wt, const void *w, size_t w_row, int64_t k, int64_t n0, int64_t n1,
                 const void *packed, int64_t m, float *c, int64_t ldc, bool dp) {
    if (m <= SMALL_M) {
        gemm_small(wt, w, w_row, k, n0, n1, packed, m, c, ldc);
        return;
    }
    _Alignas(64) float bbuf[KC * NR];
    _Alignas(64) float ctile[CHUNK_PANELS * MR * NR];
    const bool pairs = wt == FT_TYPE_BF16 && dp;
    const int64_t panels = (m + MR - 1) / MR;
    const int64_t kk = pairs ? (k + 1) / 2 : k; /* packed steps per panel row */
    for (int64_t pc = 0; pc < panels; pc += CHUNK_PANELS) {
        const int64_t pn = FT_MIN(CHUNK_PANELS, panels - pc);
        for (int64_t n = n0; n < n1; n += NR) {
            const int64_t nv = FT_MIN(NR, n1 - n);
            const char *wp = (const char *)w + (size_t)n * w_row;
            for (int64_t k0 = 0; k0 < k; k0 += KC) {
                const int64_t kc = FT_MIN(KC, k - k0);
                if (pairs)
                    pack_w_bf16_pairs(wp, w_row, nv, k0, kc, (uint32_t *)bbuf);
                else
                    pack_w_f32(wt, wp, w_row, nv, k0, kc, bbuf);
                for (int64_t p = 0; p < pn; p++) {
                    float *ct = ctile + p * MR * NR;
                    if (pairs) {
                        const uint32_t *ap = (const uint32_t *)packed + ((size_t)(pc + p) * kk + k0 / 2) * MR;
                        kernel_bf16_dp((kc + 1) / 2, ap, (const uint32_t *)bbuf, ct, k0 > 0);
                    } else {
                        const float *ap = (const float *)packed + ((size_t)(pc + p) * kk + k0) * MR;
                        kernel_f32(kc, ap, bbuf, ct, k0 > 0);
                    }
                }
            }
            const __mmask16 m0 = ft_mask16(nv), m1 = ft_mask16(nv > 16 ? nv - 16 : 0);
            const int64_t rows = FT_MIN(pn * MR, m - pc * MR);
            for (int64_t i = 0; i < rows; i++) {
                float *ci = c + (pc * MR + i) * ldc + n;
                _mm512_mask_storeu_ps(ci, m0, _mm512_load_ps(ctile + i * NR));
                _mm512_mask_storeu_ps(ci + 16, m1, _mm512_load_ps(ctile + i * NR + 16));
            }
        }
    }
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
 * vdpbf16ps runs at half the FMA rate there -- so ft_simd_fill_avx512_gemm
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
