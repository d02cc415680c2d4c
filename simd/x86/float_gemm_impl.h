/* The panel path of the float GEMM (F32 / F16 / BF16 weights; include/ft/
 * ops.h, ft_float_kernels.gemm) written once over the vector names of
 * simd/x86/vec256.h / vec512.h: avx2_float_gemm.c includes this after
 * vec256.h, avx512_float_gemm.c after vec512.h. The including file defines
 *   FT_GEMM_MR            rows of A per panel (<= FTV_N; 6 for 16 ymm,
 *                         12 for 32 zmm: MR x 2 vector accumulators);
 *   FT_GEMM_CHUNK_PANELS  panels whose C tiles accumulate in one buffer;
 *   FT_GEMM_BF16_PAIRS    1 to add AVX-512's vdpbf16ps layout: the file
 *                         then defines pack_w_bf16_pairs, kernel_bf16_dp
 *                         and pack_a_pairs_row (declared below);
 *   FT_GEMM_SMALL_M       up to this many rows of A, gemm_small instead of
 *                         the panels (see there), with
 *   FT_GEMM_SMALL_R       weight rows per tile,
 *   FT_GEMM_SMALL_T       rows of A per tile (R x T accumulators + R
 *                         weights + 1 row of A fit the register file),
 *   FT_GEMM_SMALL_SKIP    1: a prefetch past the end of a weight row skips
 *                         to the same row of the next tile;
 * and keeps what differs in more than width: the table entries.
 *
 *   C (m, n) = A (m, k) W^T,   W: n rows of k weights in their file type.
 *
 * Numerics follow ggml: A is first rounded to the weight type's vec_dot_type
 * (fp16 for F16 weights, bf16 for BF16; F32 stays), then every product is
 * formed in f32 and accumulated in f32 -- as llama.cpp's F16 path (vec_dot
 * and llamafile's tinyBLAS) does. Only the order of the f32 additions
 * differs from ft_matmul_rows_ref.
 *
 * Blocking (GotoBLAS style):
 *   - A is packed once per call into panels of MR rows, k-major ([k][MR]
 *     floats), so the micro-kernel broadcasts consecutive floats;
 *   - W is packed per (NR = 2 FTV_N-row panel, KC-deep slice) into an
 *     L1-sized buffer [KC][NR] of f32 -- FTV_N x FTV_N transposes after
 *     widening -- and reused by every A panel, so the transpose costs
 *     1/(m/MR) of the FMAs;
 *   - the micro-kernel holds an MR x NR tile of C in 2 MR accumulators:
 *     per k, 2 loads of W, MR broadcasts of A, 2 MR FMAs (FMA-bound);
 *   - a chunk of CHUNK_PANELS A panels accumulates into a contiguous tile
 *     buffer, copied out to c once per weight panel: writing the k-slices
 *     straight into c touched one page per row (c rows are n floats apart),
 *     and on the 128256-wide output head those TLB misses cost two thirds
 *     of the time.
 *
 * Threads split n in multiples of NR (ft_float_kernels.gemm_nr): each
 * weight is read by one thread, and the packed A is shared read-only. */
#include "ft/common.h"
#include "ft/ops.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/x86/vec_math.h"

#include <stdbool.h>
#include <stdint.h>

#if !defined(FT_GEMM_MR) || !defined(FT_GEMM_CHUNK_PANELS) || !defined(FT_GEMM_BF16_PAIRS) ||                     \
    !defined(FT_GEMM_SMALL_M) || !defined(FT_GEMM_SMALL_R) || !defined(FT_GEMM_SMALL_T) || !defined(FT_GEMM_SMALL_SKIP)
#error "define FT_GEMM_MR, _CHUNK_PANELS, _BF16_PAIRS and _SMALL_M, _R, _T, _SKIP before including float_gemm_impl.h"
#endif

#define MR FT_GEMM_MR
#define NR (2 * FTV_N)
#define KC 256
#define CHUNK_PANELS FT_GEMM_CHUNK_PANELS
#define SMALL_M FT_GEMM_SMALL_M
_Static_assert(MR <= FTV_N, "a panel is packed from one FTV_N-row transpose");
_Static_assert(FT_GEMM_SMALL_T >= 1 && FT_GEMM_SMALL_T <= 8, "gemm_small's tiles have 1 to 8 rows of A");

/* FTV_N consecutive weights of a row as f32 (for the vdpbf16ps layout,
 * FTV_N bf16 pairs as raw 32-bit lanes); elements past `valid` are 0. */
static inline ftv load_w(enum ft_type wt, const void *p, int64_t valid) {
    switch (wt) {
    case FT_TYPE_F16:
        return ftv_load_f16_n(p, valid);
    case FT_TYPE_BF16:
        return ftv_load_bf16_n(p, valid);
    default:
        return ftv_load_n(p, valid);
    }
}

/* Rows [0, nv) of an NR-row weight panel, elements [k0, k0 + kc), into
 * out[k][NR] f32; rows nv.. are zero. */
static void pack_w_f32(enum ft_type wt, const char *w, size_t w_row, int64_t nv, int64_t k0, int64_t kc,
                       float *restrict out) {
    const size_t esz = wt == FT_TYPE_F32 ? 4 : 2;
    for (int64_t kk = 0; kk < kc; kk += FTV_N) {
        const int64_t kv = kc - kk;
        for (int h = 0; h < 2; h++) {
            ftv r[FTV_N];
            for (int j = 0; j < FTV_N; j++) {
                const int64_t row = h * FTV_N + j;
                r[j] = row < nv ? load_w(wt, w + (size_t)row * w_row + (size_t)(k0 + kk) * esz, kv) : ftv_zero();
            }
            ftv_transpose(r);
            for (int j = 0; j < FTV_N && j < kv; j++)
                ftv_store_a(out + (kk + j) * NR + h * FTV_N, r[j]);
        }
    }
}

/* ---- micro-kernel --------------------------------------------------------- */

/* Write (or add to) an MR x NR tile of the contiguous tile buffer. */
static inline void store_tile(ftv acc[MR][2], float *ct, bool add) {
    for (int i = 0; i < MR; i++) {
        float *ci = ct + i * NR;
        if (add) {
            acc[i][0] = ftv_add(acc[i][0], ftv_load_a(ci));
            acc[i][1] = ftv_add(acc[i][1], ftv_load_a(ci + FTV_N));
        }
        ftv_store_a(ci, acc[i][0]);
        ftv_store_a(ci + FTV_N, acc[i][1]);
    }
}

static void kernel_f32(int64_t kc, const float *restrict a, const float *restrict b, float *ct, bool add) {
    ftv acc[MR][2];
    FT_UNROLL(FT_GEMM_MR)
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = ftv_zero();
    for (int64_t k = 0; k < kc; k++) {
        const ftv b0 = ftv_load_a(b + k * NR);
        const ftv b1 = ftv_load_a(b + k * NR + FTV_N);
        FT_UNROLL(FT_GEMM_MR)
        for (int i = 0; i < MR; i++) {
            const ftv ai = ftv_bcast(a + k * MR + i);
            acc[i][0] = ftv_fmadd(ai, b0, acc[i][0]);
            acc[i][1] = ftv_fmadd(ai, b1, acc[i][1]);
        }
    }
    store_tile(acc, ct, add);
}

#if FT_GEMM_BF16_PAIRS
/* The vdpbf16ps layout, defined by the including file: out[p][NR] 32-bit
 * pairs (elements 2p, 2p+1 of each weight row); its kernel on [pairs][MR]
 * pairs of A; one row of A, FTV_N pairs from 2 FTV_N elements at src
 * (valid of them), rounded to bf16. */
static void pack_w_bf16_pairs(const char *w, size_t w_row, int64_t nv, int64_t k0, int64_t kc,
                              uint32_t *restrict out);
static void kernel_bf16_dp(int64_t pairs, const uint32_t *restrict a, const uint32_t *restrict b, float *ct, bool add);
static ftv pack_a_pairs_row(const float *src, int64_t valid);
#endif

/* ---- A packing ---------------------------------------------------------------- */

/* Bytes of A packed in panels (floats, or bf16 pairs: 4 bytes each). */
static size_t panels_size(int64_t m, int64_t k, bool pairs) {
    const int64_t panels = (m + MR - 1) / MR;
    return (size_t)panels * (size_t)(pairs ? (k + 1) / 2 : k) * MR * 4;
}

/* FTV_N elements of an activation row rounded as the weight type's
 * vec_dot_type, back in f32. vcvtps2ph rounds to nearest even as
 * ft_float_to_half does (NaN payloads aside, which stay NaN); BF16:
 * ft_float_to_bfloat's integer rounding (vcvtneps2bf16 would flush
 * subnormals), a NaN lane keeps a NaN. */
static inline ftv round_act(enum ft_type wt, ftv v) {
    if (wt == FT_TYPE_F16)
        return ftv_round_f16(v);
    if (wt == FT_TYPE_BF16) {
        const ftvi u = ftv_bits(v);
        const ftvi lsb = ftvi_and(ftvi_srli(u, 16), ftvi_set1(1));
        const ftvi r = ftvi_and(ftvi_add(u, ftvi_add(lsb, ftvi_set1(0x7fff))), ftvi_set1((int32_t)0xffff0000u));
        return ftv_blend(ftvi_as_ps(r), v, ftv_isnan(v));
    }
    return v;
}

/* Rows of panels [p0, p1) row-major, rounded (for the small-m paths). */
static void pack_a_rows(enum ft_type wt, const float *a, int64_t lda, int64_t m, int64_t k, int64_t p0, int64_t p1,
                        float *packed) {
    for (int64_t i = p0 * MR; i < FT_MIN(m, p1 * MR); i++)
        for (int64_t kk = 0; kk < k; kk += FTV_N) {
            const ftvm km = ftv_mask(k - kk);
            ftv_store_m(packed + i * k + kk, km, round_act(wt, ftv_load_m(a + i * lda + kk, km)));
        }
}

/* Panels [p0, p1) of A (m rows of k floats, lda apart): [k][MR] floats, or
 * [(k + 1) / 2][MR] bf16 pairs. */
static void pack_a_panels(enum ft_type wt, const float *a, int64_t lda, int64_t m, int64_t k, int64_t p0, int64_t p1,
                          void *packed, bool pairs) {
    const int64_t kk = pairs ? (k + 1) / 2 : k;
    const int64_t step = pairs ? 2 * FTV_N : FTV_N; /* elements per transpose */
    for (int64_t p = p0; p < p1; p++) {
        uint32_t *out = (uint32_t *)packed + (size_t)p * (size_t)kk * MR;
        const int64_t r0 = p * MR;
        const int mv = (int)FT_MIN(MR, m - r0);
        for (int64_t k0 = 0; k0 < k; k0 += step) {
            const int64_t kv = k - k0;
            ftv r[FTV_N];
            for (int i = 0; i < FTV_N; i++) {
                if (i >= mv) {
                    r[i] = ftv_zero();
                    continue;
                }
                const float *src = a + (r0 + i) * lda + k0;
#if FT_GEMM_BF16_PAIRS
                if (pairs) {
                    r[i] = pack_a_pairs_row(src, kv);
                    continue;
                }
#endif
                r[i] = round_act(wt, ftv_load_n(src, kv));
            }
            ftv_transpose(r);
            const int64_t steps = pairs ? FT_MIN(FTV_N, (kv + 1) / 2) : FT_MIN(FTV_N, kv);
            const int64_t base = pairs ? k0 / 2 : k0;
            for (int64_t j = 0; j < steps; j++)
                ftv_store_m((float *)(out + (base + j) * MR), ftv_mask(MR), r[j]);
        }
    }
}

/* ---- driver -------------------------------------------------------------------- */

static void gemm_panels(enum ft_type wt, const void *w, size_t w_row, int64_t k, int64_t n0, int64_t n1,
                        const void *packed, int64_t m, float *c, int64_t ldc, bool pairs) {
    _Alignas(FTV_BYTES) float bbuf[KC * NR];
    _Alignas(FTV_BYTES) float ctile[CHUNK_PANELS * MR * NR];
    const int64_t panels = (m + MR - 1) / MR;
    const int64_t kk = pairs ? (k + 1) / 2 : k; /* packed steps per panel row */
    for (int64_t pc = 0; pc < panels; pc += CHUNK_PANELS) {
        const int64_t pn = FT_MIN(CHUNK_PANELS, panels - pc);
        for (int64_t n = n0; n < n1; n += NR) {
            const int64_t nv = FT_MIN(NR, n1 - n);
            const char *wp = (const char *)w + (size_t)n * w_row;
            for (int64_t k0 = 0; k0 < k; k0 += KC) {
                const int64_t kc = FT_MIN(KC, k - k0);
#if FT_GEMM_BF16_PAIRS
                if (pairs) {
                    pack_w_bf16_pairs(wp, w_row, nv, k0, kc, (uint32_t *)bbuf);
                    for (int64_t p = 0; p < pn; p++)
                        kernel_bf16_dp((kc + 1) / 2, (const uint32_t *)packed + ((size_t)(pc + p) * kk + k0 / 2) * MR,
                                       (const uint32_t *)bbuf, ctile + p * MR * NR, k0 > 0);
                    continue;
                }
#endif
                pack_w_f32(wt, wp, w_row, nv, k0, kc, bbuf);
                for (int64_t p = 0; p < pn; p++)
                    kernel_f32(kc, (const float *)packed + ((size_t)(pc + p) * kk + k0) * MR, bbuf,
                               ctile + p * MR * NR, k0 > 0);
            }
            const ftvm m0 = ftv_mask(nv), m1 = ftv_mask(nv - FTV_N);
            const int64_t rows = FT_MIN(pn * MR, m - pc * MR);
            for (int64_t i = 0; i < rows; i++) {
                float *ci = c + (pc * MR + i) * ldc + n;
                ftv_store_m(ci, m0, ftv_load_a(ctile + i * NR));
                ftv_store_m(ci + FTV_N, m1, ftv_load_a(ctile + i * NR + FTV_N));
            }
        }
    }
}

/* ---- fewer rows: weight rows streamed against row-major A ------------------
 *
 * Up to SMALL_M rows (decode of one sequence or a few) the per-call
 * transpose of every weight slice costs more than the FMAs it feeds, so A
 * stays row-major (pack_a_rows) and each weight row is widened once and
 * dotted with the rows of A: R weight rows x T rows of A in R*T
 * accumulators, reduced at the end. More rows of A than one tile holds go
 * in chunks of at most FT_GEMM_SMALL_T over the same R weight rows in turn:
 * the first chunk streams them from memory (prefetched ahead, as vec_dot
 * does), the others find them in L1/L2. So 8 sequences decoding together
 * read each weight once, as 4 do. */

static inline __attribute__((always_inline)) void small_tile(enum ft_type wt, const char *w, size_t w_row, int64_t k,
                                                             int T, const float *a, float *c, int64_t ldc, int rv) {
    enum { R = FT_GEMM_SMALL_R };
    const size_t esz = wt == FT_TYPE_F32 ? 4 : 2;
    ftv acc[R][FT_GEMM_SMALL_T];
    FT_UNROLL(8) for (int r = 0; r < R; r++) /* all of it: GCC cannot tell R x T covers the reads */
        FT_UNROLL(8) for (int t = 0; t < FT_GEMM_SMALL_T; t++)
            acc[r][t] = ftv_zero();
    for (int64_t kk = 0; kk < k; kk += FTV_N) {
        ftv wv[R];
        /* R rows are R streams side by side: a prefetch that runs past the
         * end of its row would land in the next row of the tile (already
         * streaming), so with SKIP it goes to the same row of the next tile */
        const size_t skip = FT_GEMM_SMALL_SKIP && (size_t)kk * esz + FT_PREFETCH_DIST >= (size_t)k * esz
                                ? (size_t)(R - 1) * w_row
                                : 0;
        FT_UNROLL(8) for (int r = 0; r < R; r++) {
            const char *wr = w + (size_t)(r < rv ? r : 0) * w_row + (size_t)kk * esz;
            _mm_prefetch(wr + skip + FT_PREFETCH_DIST, _MM_HINT_T0);
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

/* One tile with T (1..FT_GEMM_SMALL_T) rows of A, each T compiled on its own. */
static void small_tile_rows(enum ft_type wt, const char *w, size_t w_row, int64_t k, int T, const float *a, float *c,
                            int64_t ldc, int rv) {
#define SMALL_CASE(N)                                                                                               \
    case N:                                                                                                         \
        small_tile(wt, w, w_row, k, N, a, c, ldc, rv);                                                               \
        break;
    switch (T) {
        SMALL_CASE(1)
#if FT_GEMM_SMALL_T >= 2
        SMALL_CASE(2)
#endif
#if FT_GEMM_SMALL_T >= 3
        SMALL_CASE(3)
#endif
#if FT_GEMM_SMALL_T >= 4
        SMALL_CASE(4)
#endif
#if FT_GEMM_SMALL_T >= 5
        SMALL_CASE(5)
#endif
#if FT_GEMM_SMALL_T >= 6
        SMALL_CASE(6)
#endif
#if FT_GEMM_SMALL_T >= 7
        SMALL_CASE(7)
#endif
#if FT_GEMM_SMALL_T >= 8
        SMALL_CASE(8)
#endif
    default:
        break;
    }
#undef SMALL_CASE
}

/* m <= SMALL_M rows of A, row-major (a: pack_a_rows), against weight rows
 * [n0, n1): the chunks of A as even as they can be (8 rows with T = 6:
 * 4 + 4, not 6 + 2). */
static void gemm_small(enum ft_type wt, const void *w, size_t w_row, int64_t k, int64_t n0, int64_t n1, const float *a,
                       int64_t m, float *c, int64_t ldc) {
    const int64_t chunks = (m + FT_GEMM_SMALL_T - 1) / FT_GEMM_SMALL_T;
    for (int64_t n = n0; n < n1; n += FT_GEMM_SMALL_R) {
        const char *wn = (const char *)w + (size_t)n * w_row;
        const int rv = (int)FT_MIN(FT_GEMM_SMALL_R, n1 - n);
        for (int64_t i = 0, t0 = 0; i < chunks; i++) {
            const int T = (int)((m - t0) / (chunks - i));
            small_tile_rows(wt, wn, w_row, k, T, a + t0 * k, c + t0 * ldc + n, ldc, rv);
            t0 += T;
        }
    }
}
