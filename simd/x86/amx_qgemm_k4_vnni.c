/* Q4_K and Q5_K in small batches on the amx level: AVX-512 VNNI with the
 * floats of amx_qgemm_k4.c, for the batches too small to pay for its
 * tiles (multi-stream decode, short prompts and their tails). Compiled
 * with the amx flags, but no tile instruction here.
 *
 * The amx level gives a (weight row, token) the same floats in every
 * batch: the one-row dot, this kernel and the AMX kernel all compute
 *   acc = (d S - dmin M) D + acc      per super-block, in order,
 * with S = sum_s sc_s (q . a)_s and M = sum_s m_s bsum_s exact integers
 * and the two float operations fused. A prompt's tail evaluated again after
 * a prefix-cache hit, or a sequence decoding beside others, then gets the
 * numbers it gets alone (tests/unit/test_qgemm.c checks all three paths
 * bit for bit).
 *
 * Micro-kernel: 16 weight rows x up to 8 tokens, as avx512_qgemm.c's: a zmm
 * holds 4 consecutive quants of each of the 16 rows, each token's 4
 * activation bytes are broadcast into vpdpbusd. Per sub-block the int32
 * sums are multiplied by the integer scales (vpmulld) into S; per
 * super-block the mins' term is four vpdpwssd on the activations'
 * 32-element sums, then the float expression above. The token count is a
 * compile-time constant (1..8), so 4 streams do not pay for 8.
 */
#include "ft/common.h"
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/qgemm_pack.h"
#include "simd/quant_ref.h"
#include "simd/x86/gather16.h"

#include <immintrin.h>
#include <string.h>

#define TR 16 /* weight rows per tile */
#define TT 8  /* tokens per activation tile */
#define NSUB 8

/* Weight tile, per super-block: d[16], dmin[16] (floats), the mins as
 * pairs [4][16] (uint32: m[2p] | m[2p+1] << 16 of each row), then per
 * 32-element sub-block its quants, 8 groups of 16 rows x 4 bytes, and its
 * scales sc[16] (int32). */
#define W_MP (2 * TR * 4)
#define W_SUB0 (W_MP + 4 * TR * 4)
#define W_SUB (8 * TR * 4 + TR * 4)
#define W_SB (W_SUB0 + NSUB * W_SUB)
/* Activation tile: simd/qgemm_pack.h's for these kernels (ft_qg_pack_a_k4):
 * per super-block, per sub-block 8 groups x TT tokens x 4 bytes, then
 * D[TT], then the 32-element sums as int16 pairs [4][TT]. */
#define A_D FT_QG_K4_A_D(TT)
#define A_BP FT_QG_K4_A_BP(TT)
#define A_SB FT_QG_K4_A_SB(TT)

static size_t w_tile_size(int64_t k) { return (size_t)(k / FT_QK_K) * W_SB; }
static size_t a_tile_size(int64_t k) { return ft_qg_k4_a_tile_bytes(k, TT); }

/* ---- packing ------------------------------------------------------------------------- */

static inline void store(uint8_t *p, __m512i v) { _mm512_storeu_si512(p, v); }

/* The scales of 16 rows' super-block at p into the tile's super-block o. */
static inline void scales16(struct ft_rows16 r, const uint8_t *p, uint8_t *o) {
    __m512i w4[4];
    __m512 d, dmin;
    ft_k4_scales16(r, p, w4, &d, &dmin);
    _mm512_storeu_ps(o, d);
    _mm512_storeu_ps(o + TR * 4, dmin);
    for (int s = 0; s < NSUB; s++)
        store(o + W_SUB0 + s * W_SUB + 8 * TR * 4, ft_byte16(w4[s / 4], s % 4));
    for (int p2 = 0; p2 < 4; p2++) /* mins 2 p2, 2 p2 + 1: bytes 2 (p2 % 2), + 1 of w4[2 + p2 / 2] */
        store(o + W_MP + p2 * TR * 4,
              _mm512_or_si512(ft_byte16(w4[2 + p2 / 2], 2 * (p2 % 2)),
                              _mm512_slli_epi32(ft_byte16(w4[2 + p2 / 2], 2 * (p2 % 2) + 1), 16)));
}

/* Rows more than 2 GiB apart: row by row, a quant at a time. */
static void pack_rows_scalar(const void *w, size_t w_row, int n_rows, int64_t k, void *tile, bool q5) {
    memset(tile, 0, w_tile_size(k));
    for (int r = 0; r < n_rows; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * w_row;
        for (int64_t b = 0; b < k / FT_QK_K; b++) {
            const uint8_t *p = row + (size_t)b * (q5 ? sizeof(ft_block_q5_K) : sizeof(ft_block_q4_K));
            const uint8_t *qh = q5 ? p + 16 : NULL, *qs = q5 ? p + 48 : p + 16;
            uint8_t *o = (uint8_t *)tile + (size_t)b * W_SB;
            uint16_t dh, dmh;
            memcpy(&dh, p, 2);
            memcpy(&dmh, p + 2, 2);
            const float d = ft_half_to_float(dh), dmin = ft_half_to_float(dmh);
            memcpy(o + 4 * r, &d, 4);
            memcpy(o + TR * 4 + 4 * r, &dmin, 4);
            const struct ft_scales16 sv = ft_k4_scales(p + 4);
            for (int s = 0; s < NSUB; s++) {
                const int32_t sc = ft_scales16_byte(sv, s);
                memcpy(o + W_SUB0 + s * W_SUB + 8 * TR * 4 + 4 * r, &sc, 4);
                for (int e = 0; e < 32; e++) {
                    uint8_t q = (uint8_t)((qs[32 * (s / 2) + e] >> (4 * (s % 2))) & 0x0f);
                    if (qh && (qh[e] >> s & 1))
                        q |= 16;
                    o[W_SUB0 + s * W_SUB + (e / 4) * TR * 4 + 4 * r + e % 4] = q;
                }
            }
            for (int p2 = 0; p2 < 4; p2++) {
                const uint32_t mp = (uint32_t)ft_scales16_byte(sv, 8 + 2 * p2) |
                                    (uint32_t)ft_scales16_byte(sv, 9 + 2 * p2) << 16;
                memcpy(o + W_MP + p2 * TR * 4 + 4 * r, &mp, 4);
            }
        }
    }
}

static void pack_w_k4(const void *w, size_t w_row, int n_rows, int64_t k, void *tile, bool q5) {
    if (!ft_rows16_fit(w_row)) {
        pack_rows_scalar(w, w_row, n_rows, k, tile, q5);
        return;
    }
    const struct ft_rows16 r = ft_rows16(w_row, n_rows);
    for (int64_t b = 0; b < k / FT_QK_K; b++) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)(q5 ? sizeof(ft_block_q5_K) : sizeof(ft_block_q4_K));
        uint8_t *o = (uint8_t *)tile + (size_t)b * W_SB;
        scales16(r, p, o);
        ft_k4_quants16(r, q5 ? p + 48 : p + 16, q5 ? p + 16 : NULL, o + W_SUB0, W_SUB);
    }
}

static void pack_w_Q4_K(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    pack_w_k4(w, w_row, n_rows, k, tile, false);
}

static void pack_w_Q5_K(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    pack_w_k4(w, w_row, n_rows, k, tile, true);
}

/* n_tok Q8_K rows into an activation tile (simd/qgemm_pack.h). */
static void pack_a(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) {
    ft_qg_pack_a_k4(a, a_row, n_tok, k, tile, TT);
}

/* ---- kernel --------------------------------------------------------------------------- */

/* acc += w . (the 4 bytes at p, broadcast), the broadcast folded into
 * vpdpbusd as avx512_qgemm.c does. */
static inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const uint8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)p));
    return acc;
}

static inline __m512i bcast32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

__attribute__((always_inline)) static inline void kernel_nt(const uint8_t *restrict w, const uint8_t *restrict a,
                                                            int64_t k, int n_rows, float *restrict out, int64_t ld,
                                                            const int NT) {
    __m512 facc[TT];
    FT_UNROLL(16) for (int t = 0; t < NT; t++)
        facc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < k / FT_QK_K; b++, w += W_SB, a += A_SB) {
        __m512i S[TT], M[TT];
        for (int s = 0; s < NSUB; s++) {
            const uint8_t *ws = w + W_SUB0 + s * W_SUB, *as = a + (size_t)s * 8 * TT * 4;
            __m512i acc[TT];
            FT_UNROLL(16) for (int t = 0; t < NT; t++)
                acc[t] = _mm512_setzero_si512();
            for (int g = 0; g < 8; g++) {
                const __m512i W = _mm512_loadu_si512(ws + 64 * g);
                FT_UNROLL(16) for (int t = 0; t < NT; t++)
                    acc[t] = dpbusd_bcast(acc[t], W, as + (g * TT + t) * 4);
            }
            const __m512i sc = _mm512_loadu_si512(ws + 8 * TR * 4);
            FT_UNROLL(16) for (int t = 0; t < NT; t++)
                S[t] = s == 0 ? _mm512_mullo_epi32(acc[t], sc) : _mm512_add_epi32(S[t], _mm512_mullo_epi32(acc[t], sc));
        }
        FT_UNROLL(16) for (int t = 0; t < NT; t++)
            M[t] = _mm512_setzero_si512();
        for (int p = 0; p < 4; p++) {
            const __m512i mp = _mm512_loadu_si512(w + W_MP + p * TR * 4);
            FT_UNROLL(16) for (int t = 0; t < NT; t++)
                M[t] = _mm512_dpwssd_epi32(M[t], mp, bcast32(a + A_BP + (p * TT + t) * 4));
        }
        const __m512 d = _mm512_loadu_ps(w), dmin = _mm512_loadu_ps(w + TR * 4);
        FT_UNROLL(16) for (int t = 0; t < NT; t++) {
            float D;
            memcpy(&D, a + A_D + 4 * t, 4);
            const __m512 f = _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(S[t]), _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(M[t])));
            facc[t] = _mm512_fmadd_ps(f, _mm512_set1_ps(D), facc[t]);
        }
    }
    const __mmask16 rows = (__mmask16)((1u << n_rows) - 1u);
    FT_UNROLL(16) for (int t = 0; t < NT; t++)
        _mm512_mask_storeu_ps(out + t * ld, rows, facc[t]);
}

static void kernel(const void *w, const void *a, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) {
    switch (n_tok) {
    case 1: kernel_nt(w, a, k, n_rows, out, ld, 1); break;
    case 2: kernel_nt(w, a, k, n_rows, out, ld, 2); break;
    case 3: kernel_nt(w, a, k, n_rows, out, ld, 3); break;
    case 4: kernel_nt(w, a, k, n_rows, out, ld, 4); break;
    case 5: kernel_nt(w, a, k, n_rows, out, ld, 5); break;
    case 6: kernel_nt(w, a, k, n_rows, out, ld, 6); break;
    case 7: kernel_nt(w, a, k, n_rows, out, ld, 7); break;
    default: kernel_nt(w, a, k, n_rows, out, ld, TT); break;
    }
}

/* ---- entries -------------------------------------------------------------------------- */

#define ENTRY(T)                                                                                              \
    static const struct ft_qgemm g_##T = {                                                                    \
        .type = FT_TYPE_##T,                                                                                  \
        .act_type = FT_TYPE_Q8_K,                                                                             \
        .tile_rows = TR,                                                                                      \
        .tile_tokens = TT,                                                                                    \
        .min_tokens = FT_AMX_K4_MIN_TOKENS,                                                                   \
        .w_tile_size = w_tile_size,                                                                           \
        .a_tile_size = a_tile_size,                                                                           \
        .pack_w = pack_w_##T,                                                                                 \
        .pack_a = pack_a,                                                                                     \
        .kernel = kernel,                                                                                     \
    };
ENTRY(Q4_K)
ENTRY(Q5_K)
#undef ENTRY

const struct ft_qgemm *ft_amx_qgemm_k4_vnni(enum ft_type t) {
    return t == FT_TYPE_Q4_K ? &g_Q4_K : t == FT_TYPE_Q5_K ? &g_Q5_K : NULL;
}
