/* Float GEMM on AMX-BF16 tiles, the amx level's prefill matmul for BF16
 * weights, and for F16 weights when asked (ft_float_set_f16_via_bf16).
 * Everything else -- F32 weights, F16 by default, batches below one panel
 * -- goes to the avx512 level's GEMM this level starts from.
 *
 *   C (m, n) = A (m, k) W^T
 *
 * tdpbf16ps multiplies bf16 pairs and accumulates in f32, which is the
 * contract of BF16 weights (activations rounded to bf16, products and sums
 * in f32; only the order of the additions differs from the reference, and,
 * as the vdpbf16ps dot of avx512_quant.c, subnormal bf16 count as zero).
 *
 * F16 weights keep F16's contract here too (activations rounded to fp16,
 * every product exact, sums in f32) by splitting: an fp16 value x (11
 * significant bits) is exactly hi + lo in bf16, hi its top 8 bits and lo
 * the 3 below (lo = x - hi, exact). Weights go into the B tiles as pairs
 * (w_hi, w_lo) and activations into two A tiles as pairs (a_hi, a_hi) and
 * (a_lo, a_lo), so one tdpbf16ps adds a_hi w_hi + a_hi w_lo and the other
 * a_lo w_hi + a_lo w_lo: the four partial products of a w, each exact in
 * f32 (at most 16 significant bits, never subnormal: fp16's smallest
 * magnitude is 2^-24), summed in f32 in another order, as the FMA path's
 * products are. Four tile products per 32 elements instead of one, still
 * several times the FMA units' rate. Only when asked (`--f16-bf16`) are F16
 * weights and activations rounded to bf16 instead (each within 2^-8 of
 * itself, so each product off by up to 2^-7 relative;
 * tests/unit/test_float_kernels.c holds every output to 2^-7 of sum|a*w|,
 * its worst is about 5e-3), one tile product per 32 elements.
 *
 * Layout (MR = 12 rows of A per panel, as avx512's, since the level shares
 * one gemm_mr; NR = 32 weight rows per group):
 *   - A is packed per panel and per step of 32 elements into an A tile of
 *     12 rows x 32 bf16 (768 bytes, rows past m zero); split F16: four,
 *     the hi pairs of elements 0-15 and 16-31, then the lo pairs;
 *   - W is packed per 32-row group and KC-deep slice into B tiles: per step
 *     of 32 elements, 16 rows of pairs (k, k+1) of the group's first and of
 *     its second 16 weight rows (4-byte groups, a 16x16 transpose); split
 *     F16: per half-step of 16 elements, 16 rows of pairs (hi, lo) of
 *     element k, the first 16 weight rows then the second;
 *   - four C tiles (2 panels x 2 halves of the group, 12 x 16 f32) stay in
 *     the tile unit over a slice and go through a buffer between slices and
 *     at the end, whose rows are 32 outputs of one row of A.
 */
#include "ft/common.h"
#include "ft/ops.h"
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/x86/amx_common.h"
#include "simd/x86/vec512.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define MR 12
#define NR 32
#define KC 1024          /* elements of k per weight slice (64 KiB of B tiles) */
#define CHUNK_PANELS 44  /* panels of A per pass (528 rows): even, over FT_UBATCH */
/* Fewer rows of A: avx512's GEMM (its small-m path) is faster. One thread,
 * 2048x8192 and 8192x2048, GFLOP/s tiles vs avx512: BF16 at 8 rows 109-113
 * vs 87-92, at 6 rows 81-84 vs 100-111; exact F16 (4 tile products per
 * step) at 16 rows 80-100 vs 97-106, at 20 rows 103-122 vs 95-98. */
#define MIN_M 8
#define MIN_M_SPLIT 18
#define CFG_ID 1000      /* this file's tile configuration (amx_common.h) */

static struct ft_float_kernels g_base; /* the avx512 level's GEMM */

/* F16 weights, exactly: each fp16 operand as hi + lo in bf16. */
static bool split_of(enum ft_type wt) { return wt == FT_TYPE_F16 && !ft_float_f16_via_bf16(); }

static bool applies(enum ft_type wt, int64_t m) {
    if (!ft_cpu_info()->amx_bf16 || (wt != FT_TYPE_BF16 && wt != FT_TYPE_F16))
        return false;
    return m >= (split_of(wt) ? MIN_M_SPLIT : MIN_M);
}

/* A tiles per step of 32 elements. */
static size_t a_tiles_of(enum ft_type wt) { return split_of(wt) ? 4 : 1; }

/* Tiles 0-3: C (panel 0 rows 0-15, panel 0 rows 16-31, panel 1 ..., 12 x
 * 16 f32); 4, 5: A of panels 0 and 1 (12 x 32 bf16); 6, 7: B of the
 * group's weight rows 0-15 and 16-31 (16 pairs x 16 rows). */
static void configure(void) {
    struct ft_amx_cfg c;
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    for (int t = 0; t < 4; t++) {
        c.rows[t] = MR;
        c.colsb[t] = 64;
    }
    c.rows[4] = c.rows[5] = MR;
    c.colsb[4] = c.colsb[5] = 64;
    c.rows[6] = c.rows[7] = 16;
    c.colsb[6] = c.colsb[7] = 64;
    ft_amx_load(&c, CFG_ID);
}

/* ---- packing ------------------------------------------------------------------ */

static size_t steps_of(int64_t k) { return (size_t)((k + 31) / 32); }

static size_t packed_size(enum ft_type wt, int64_t m, int64_t k) {
    if (!applies(wt, m))
        return g_base.gemm_packed_size(wt, m, k);
    return (size_t)((m + MR - 1) / MR) * steps_of(k) * a_tiles_of(wt) * MR * 64;
}

/* 16 f32 that are fp16 values as their bf16 hi (top 8 significant bits)
 * and lo (x - hi, exact: at most 3 significant bits), each in the low 16
 * bits of a lane. */
static inline void split16(__m512 x, __m512i *hi, __m512i *lo) {
    const __m512 h = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0xffff0000u)));
    *hi = _mm512_srli_epi32(_mm512_castps_si512(h), 16);
    *lo = _mm512_srli_epi32(_mm512_castps_si512(_mm512_sub_ps(x, h)), 16);
}

/* A rows for split F16: 16 activations rounded to fp16 as F16 weights'
 * activations are (nearest even), then the pairs (hi, hi) and (lo, lo). */
static inline void split_a16(__m512 v, uint8_t *hi_out, uint8_t *lo_out) {
    const __m512 x = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m512i hi, lo;
    split16(x, &hi, &lo);
    _mm512_storeu_si512(hi_out, _mm512_or_si512(hi, _mm512_slli_epi32(hi, 16)));
    _mm512_storeu_si512(lo_out, _mm512_or_si512(lo, _mm512_slli_epi32(lo, 16)));
}

/* f32 -> bf16 with ft_float_to_bfloat's rounding (nearest even, NaN kept). */
static inline __m256i to_bf16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

/* Panels [p0, p1) of A: per panel, per step, 12 rows of 32 bf16. */
static void pack_a(enum ft_type wt, const float *a, int64_t lda, int64_t m, int64_t k, int64_t p0, int64_t p1,
                   void *packed) {
    if (!applies(wt, m)) {
        g_base.gemm_pack(wt, a, lda, m, k, p0, p1, packed);
        return;
    }
    const size_t steps = steps_of(k), at = a_tiles_of(wt);
    for (int64_t p = p0; p < p1; p++) {
        uint8_t *out = (uint8_t *)packed + (size_t)p * steps * at * MR * 64;
        for (int i = 0; i < MR; i++) {
            const int64_t row = p * MR + i;
            for (size_t s = 0; s < steps; s++) {
                uint8_t *o = out + (s * at * MR + (size_t)i) * 64;
                if (row >= m) {
                    for (size_t t = 0; t < at; t++)
                        memset(o + t * MR * 64, 0, 64);
                    continue;
                }
                const int64_t k0 = (int64_t)s * 32;
                const float *src = a + row * lda + k0;
                if (at == 4) { /* tiles: hi 0-15, hi 16-31, lo 0-15, lo 16-31 */
                    for (int j = 0; j < 2; j++)
                        split_a16(_mm512_maskz_loadu_ps(ftv_mask(k - k0 - 16 * j), src + 16 * j),
                                  o + (size_t)j * MR * 64, o + (size_t)(2 + j) * MR * 64);
                    continue;
                }
                _mm256_storeu_si256((__m256i *)o, to_bf16(_mm512_maskz_loadu_ps(ftv_mask(k - k0), src)));
                _mm256_storeu_si256((__m256i *)(o + 32),
                                    to_bf16(_mm512_maskz_loadu_ps(ftv_mask(k - k0 - 16), src + 16)));
            }
        }
    }
}

/* 32 elements of a weight row from k0 as bf16 in 16 32-bit lanes (pairs);
 * elements past `valid` are zero. F16 is rounded to bf16. */
static inline __m512i load_pairs(enum ft_type wt, const char *p, int64_t valid) {
    const __mmask32 m = valid >= 32 ? (__mmask32)0xffffffffu : valid <= 0 ? 0 : (__mmask32)((1u << valid) - 1u);
    const __m512i raw = _mm512_maskz_loadu_epi16(m, p);
    if (wt == FT_TYPE_BF16)
        return raw;
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(raw));
    const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(raw, 1));
    return _mm512_inserti64x4(_mm512_castsi256_si512(to_bf16(lo)), to_bf16(hi), 1);
}

/* Rows [0, nv) of a 32-row weight group, elements [k0, k0 + kc), into B
 * tiles: per step s, 2 x (16 pair rows x 16 weight rows x 4 bytes), the
 * group's first 16 rows then its second. Missing rows and elements are 0. */
static void pack_w(enum ft_type wt, const char *w, size_t w_row, int64_t nv, int64_t k0, int64_t kc,
                   uint8_t *restrict out) {
    const int64_t steps = (kc + 31) / 32;
    for (int64_t s = 0; s < steps; s++) {
        for (int h = 0; h < 2; h++) {
            __m512 r[16];
            for (int j = 0; j < 16; j++) {
                const int64_t row = h * 16 + j;
                r[j] = row < nv ? _mm512_castsi512_ps(load_pairs(wt, w + (size_t)row * w_row + (size_t)(k0 + 32 * s) * 2,
                                                                 kc - 32 * s))
                                : _mm512_setzero_ps();
            }
            ftv_transpose(r); /* r[q] = pair q of the 16 rows */
            uint8_t *o = out + ((size_t)s * 2 + (size_t)h) * 1024;
            for (int q = 0; q < 16; q++)
                _mm512_store_ps((float *)(o + q * 64), r[q]);
        }
    }
}

/* pack_w for split F16: per step, per half-step j, per half h of the
 * group, a B tile of 16 element rows x 16 weight rows of (hi, lo) pairs. */
static void pack_w_split(const char *w, size_t w_row, int64_t nv, int64_t k0, int64_t kc, uint8_t *restrict out) {
    const int64_t steps = (kc + 31) / 32;
    for (int64_t s = 0; s < steps; s++)
        for (int j = 0; j < 2; j++) {
            const int64_t e0 = 32 * s + 16 * j, valid = kc - e0;
            const __mmask16 m = ftv_mask(valid);
            for (int h = 0; h < 2; h++) {
                __m512 r[16];
                for (int q = 0; q < 16; q++) {
                    const int64_t row = h * 16 + q;
                    if (row >= nv || valid <= 0) {
                        r[q] = _mm512_setzero_ps();
                        continue;
                    }
                    const __m256i raw = _mm256_maskz_loadu_epi16(m, w + (size_t)row * w_row + (size_t)(k0 + e0) * 2);
                    __m512i hi, lo;
                    split16(_mm512_cvtph_ps(raw), &hi, &lo);
                    r[q] = _mm512_castsi512_ps(_mm512_or_si512(hi, _mm512_slli_epi32(lo, 16)));
                }
                ftv_transpose(r); /* r[e] = element e of the 16 rows */
                uint8_t *o = out + (((size_t)s * 2 + (size_t)j) * 2 + (size_t)h) * 1024;
                for (int e = 0; e < 16; e++)
                    _mm512_store_ps((float *)(o + e * 64), r[e]);
            }
        }
}

/* ---- the GEMM --------------------------------------------------------------------- */

/* The four C tiles of two panels from their buffers (zero on the first
 * slice), and back. */
static inline void c_tiles_load(float *c0, float *c1, bool first) {
    if (first) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    } else {
        _tile_loadd(0, c0, NR * 4);
        _tile_loadd(1, c0 + 16, NR * 4);
        _tile_loadd(2, c1, NR * 4);
        _tile_loadd(3, c1 + 16, NR * 4);
    }
}

static inline void c_tiles_store(float *c0, float *c1) {
    _tile_stored(0, c0, NR * 4);
    _tile_stored(1, c0 + 16, NR * 4);
    _tile_stored(2, c1, NR * 4);
    _tile_stored(3, c1 + 16, NR * 4);
}

/* Panels pa and pb (pb may be pa when the chunk's count is odd: its
 * results are discarded) against one weight group over `steps` steps:
 * the C tiles of ct (12 x 32 floats per panel) are loaded (or zeroed on
 * the first slice), accumulated and stored back. */
static void tiles_pair(const uint8_t *a0, const uint8_t *a1, const uint8_t *b, int64_t steps, float *c0, float *c1,
                       bool first) {
    c_tiles_load(c0, c1, first);
    for (int64_t s = 0; s < steps; s++) {
        _tile_loadd(4, a0 + s * MR * 64, 64);
        _tile_loadd(5, a1 + s * MR * 64, 64);
        _tile_loadd(6, b + s * 2048, 64);
        _tile_loadd(7, b + s * 2048 + 1024, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    c_tiles_store(c0, c1);
}

/* tiles_pair for split F16: per half-step, the hi and then the lo A
 * tiles of both panels against the half-step's two B tiles. A tiles per
 * step: hi 0-15, hi 16-31, lo 0-15, lo 16-31 (MR x 64 bytes each). */
static void tiles_pair_split(const uint8_t *a0, const uint8_t *a1, const uint8_t *b, int64_t steps, float *c0,
                             float *c1, bool first) {
    c_tiles_load(c0, c1, first);
    for (int64_t s = 0; s < steps; s++)
        for (int j = 0; j < 2; j++) {
            const uint8_t *bj = b + ((size_t)s * 2 + (size_t)j) * 2048;
            _tile_loadd(6, bj, 64);
            _tile_loadd(7, bj + 1024, 64);
            for (int part = 0; part < 2; part++) {
                const size_t off = ((size_t)s * 4 + (size_t)(2 * part + j)) * MR * 64;
                _tile_loadd(4, a0 + off, 64);
                _tile_loadd(5, a1 + off, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
    c_tiles_store(c0, c1);
}

static void gemm(enum ft_type wt, const void *w, size_t w_row, int64_t k, int64_t n0, int64_t n1,
                 const void *packed, int64_t m, float *c, int64_t ldc) {
    if (!applies(wt, m)) {
        g_base.gemm(wt, w, w_row, k, n0, n1, packed, m, c, ldc);
        return;
    }
    configure();
    _Alignas(64) uint8_t bbuf[KC / 32 * 2048];
    _Alignas(64) float ctile[(CHUNK_PANELS + 1) * MR * NR];
    const int64_t panels = (m + MR - 1) / MR;
    const size_t steps = steps_of(k), at = a_tiles_of(wt);
    const bool split = at == 4;
    const int64_t kcs = split ? KC / 2 : KC; /* split B tiles take twice the bytes */
    const uint8_t *ap = packed;
    for (int64_t pc = 0; pc < panels; pc += CHUNK_PANELS) {
        const int64_t pn = FT_MIN(CHUNK_PANELS, panels - pc);
        for (int64_t n = n0; n < n1; n += NR) {
            const int64_t nv = FT_MIN(NR, n1 - n);
            const char *wp = (const char *)w + (size_t)n * w_row;
            for (int64_t k0 = 0; k0 < k; k0 += kcs) {
                const int64_t kc = FT_MIN(kcs, k - k0);
                if (split)
                    pack_w_split(wp, w_row, nv, k0, kc, bbuf);
                else
                    pack_w(wt, wp, w_row, nv, k0, kc, bbuf);
                for (int64_t p = 0; p < pn; p += 2) {
                    const int64_t q = p + 1 < pn ? p + 1 : pn; /* pn: the spare panel of ctile */
                    const uint8_t *a0 = ap + ((size_t)(pc + p) * steps + (size_t)(k0 / 32)) * at * MR * 64;
                    const uint8_t *a1 = q < pn ? a0 + steps * at * MR * 64 : a0;
                    (split ? tiles_pair_split : tiles_pair)(a0, a1, bbuf, (kc + 31) / 32, ctile + p * MR * NR,
                                                            ctile + q * MR * NR, k0 == 0);
                }
            }
            const __mmask16 m0 = ftv_mask(nv), m1 = ftv_mask(nv - 16);
            const int64_t rows = FT_MIN(pn * MR, m - pc * MR);
            for (int64_t i = 0; i < rows; i++) {
                float *ci = c + (pc * MR + i) * ldc + n;
                _mm512_mask_storeu_ps(ci, m0, _mm512_load_ps(ctile + i * NR));
                _mm512_mask_storeu_ps(ci + 16, m1, _mm512_load_ps(ctile + i * NR + 16));
            }
        }
    }
}

void ft_amx_float_gemm_fill(struct ft_level *l) {
    if (!ft_cpu_info()->amx_bf16)
        return;
    g_base = l->ops; /* the avx512 level's, this level's base */
    l->ops.gemm_packed_size = packed_size;
    l->ops.gemm_pack = pack_a;
    l->ops.gemm = gemm;
}
