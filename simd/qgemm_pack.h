/* Tile layouts of the quantized GEMM (include/ft/qgemm.h) and the portable
 * packers that fill them. Internal to simd/: included by the per-ISA GEMM
 * files, so these loops are compiled with (and auto-vectorized for) each
 * file's ISA flags; a file may replace a packer with a faster one of its own.
 *
 * Every weight type is described by three numbers:
 *   G     elements per sub-block: the quants of a sub-block share one float
 *         scale S (and, for types with mins, one float min M);
 *   ABLK  elements per activation block (32 for Q8_0/Q8_1, 256 for Q8_K):
 *         one activation scale D per block;
 *   X     per sub-block and token, either an int32 that starts the integer
 *         sum (-offset * sum(a), which turns the unsigned quants back into
 *         the type's signed ones: Q4_0's q - 8, Q6_K's q - 32, Q8_0's
 *         (q ^ 0x80) - 128) or a float that the mins multiply (Q4_1/Q5_1:
 *         the Q8_1 block's s; Q2_K/Q4_K/Q5_K: sum(a) of the sub-block).
 *
 * So one output is
 *   sum over activation blocks b of
 *     D[b] * sum over sub-blocks s of b of S[s] * (X[s] + sum_i q_i a_i)      (X int)
 *     D[b] * sum over s of (S[s] * sum_i q_i a_i + M[s] * X[s])             (X float, K-quants)
 *     D[b] * S[b] * sum_i q_i a_i + M[b] * X[b]                              (Q4_1/Q5_1)
 * with every integer sum exact -- the reference's sums, regrouped.
 *
 * Weight tile (TR rows, k elements), sub-block after sub-block:
 *   quants  G/W groups x TR rows x W bytes: group g holds elements
 *           Wg..Wg+W-1 of the sub-block of every row
 *   S       TR floats
 *   M       TR floats (types with mins only)
 * Activation tile (TT = FT_QG_TT tokens; pack_a1's one-token tile of decode
 * is the same with TT = 1), activation block after block:
 *   quants  ABLK/W groups x TT tokens x W bytes (int8)
 *   D       TT floats
 *   X       ABLK/G sub-blocks x TT values (int32 or float)
 * Missing rows and tokens are zero: their outputs are never stored.
 *
 * The group width W is 4 for the dot-product kernels (vpdpbusd, vpmaddubsw,
 * sdot: 4 bytes of a row per 32-bit lane) and 8 for the matrix-multiply one
 * (neon-i8mm's smmla: a 16-byte vector at an even row or token is 8
 * elements of it and of the next, the 2x8 operand). W changes only where
 * the bytes sit, so the tile sizes are the same.
 */
#ifndef FT_SIMD_QGEMM_PACK_H
#define FT_SIMD_QGEMM_PACK_H

#include "ft/qgemm.h"
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/quant_ref.h"

#include <stdint.h>
#include <string.h>

#define FT_QG_TT 8 /* tokens per activation tile, every level */

/* How an activation tile's X values are made. */
enum ft_qg_xmode {
    FT_QG_X_OFFSET, /* int32: -offset * sum of the sub-block's quants */
    FT_QG_X_SUM,    /* float: sum of the sub-block's quants (mins) */
    FT_QG_X_S,      /* float: the Q8_1 block's s (Q4_1/Q5_1 mins) */
};

/* Bytes of one sub-block of a weight tile, and of a whole tile. */
static inline size_t ft_qg_sb_bytes(int tr, int g, int mins) { return (size_t)(g * tr + 4 * tr * (1 + mins)); }
static inline size_t ft_qg_w_tile_bytes(int tr, int g, int mins, int64_t k) {
    return (size_t)(k / g) * ft_qg_sb_bytes(tr, g, mins);
}
/* Bytes of one activation block of an activation tile of tt tokens, and
 * of a whole tile. tt is FT_QG_TT, or 1 for the one-token tile of decode
 * (struct ft_qgemm's pack_a1: the same layout with TT = 1, so a token's
 * quants are contiguous). */
static inline size_t ft_qg_ab_bytes_tt(int g, int ablk, int tt) {
    return (size_t)(ablk * tt + 4 * tt + 4 * tt * (ablk / g));
}
static inline size_t ft_qg_ab_bytes(int g, int ablk) { return ft_qg_ab_bytes_tt(g, ablk, FT_QG_TT); }
static inline size_t ft_qg_a_tile_bytes(int g, int ablk, int64_t k) {
    return (size_t)(k / ablk) * ft_qg_ab_bytes(g, ablk);
}
static inline size_t ft_qg_a1_tile_bytes(int g, int ablk, int64_t k) {
    return (size_t)(k / ablk) * ft_qg_ab_bytes_tt(g, ablk, 1);
}

static inline uint32_t ft_qg_ld32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint16_t ft_qg_ld16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* ---- activations ----------------------------------------------------------- */

/* n_tok rows of Q8_0 / Q8_1 / Q8_K blocks into an activation tile of group
 * width W (4 or 8) and TT tokens (FT_QG_TT, or 1). */
__attribute__((always_inline)) static inline void ft_qg_pack_a_width(const void *a, size_t a_row, int n_tok,
                                                                     int64_t k, void *tile, enum ft_type act, int g,
                                                                     enum ft_qg_xmode xmode, int offset,
                                                                     const int W, const int TT) {
    const int ablk = act == FT_TYPE_Q8_K ? FT_QK_K : 32;
    const int nsub = ablk / g;
    const size_t ab = ft_qg_ab_bytes_tt(g, ablk, TT);
    const size_t blk_bytes = act == FT_TYPE_Q8_K ? sizeof(ft_block_q8_K)
                             : act == FT_TYPE_Q8_1 ? sizeof(ft_block_q8_1)
                                                   : sizeof(ft_block_q8_0);
    const size_t qs_off = act == FT_TYPE_Q8_K ? 4 : act == FT_TYPE_Q8_1 ? 4 : 2;
    uint8_t *out = tile;
    for (int64_t b = 0; b < k / ablk; b++, out += ab) {
        uint8_t *q = out;
        float *D = (float *)(void *)(out + ablk * TT);
        uint8_t *X = out + ablk * TT + 4 * TT;
        for (int t = 0; t < TT; t++) {
            if (t >= n_tok) {
                for (int gi = 0; gi < ablk / W; gi++)
                    memset(q + (gi * TT + t) * W, 0, (size_t)W);
                D[t] = 0.0f;
                for (int s = 0; s < nsub; s++)
                    memset(X + (s * TT + t) * 4, 0, 4);
                continue;
            }
            const uint8_t *blk = (const uint8_t *)a + (size_t)t * a_row + (size_t)b * blk_bytes;
            const int8_t *qs = (const int8_t *)(blk + qs_off);
            for (int gi = 0; gi < ablk / W; gi++)
                memcpy(q + (gi * TT + t) * W, qs + W * gi, (size_t)W);
            if (act == FT_TYPE_Q8_K) {
                float d;
                memcpy(&d, blk, 4);
                D[t] = d;
            } else {
                D[t] = ft_half_to_float(ft_qg_ld16(blk));
            }
            for (int s = 0; s < nsub; s++) {
                uint8_t *xv = X + (s * TT + t) * 4;
                if (xmode == FT_QG_X_S) {
                    const float sv = ft_half_to_float(ft_qg_ld16(blk + 2));
                    memcpy(xv, &sv, 4);
                    continue;
                }
                int32_t sum = 0;
                if (act == FT_TYPE_Q8_K) {
                    /* bsums are per 16; the contract keeps them equal to the quants' sums */
                    const ft_block_q8_K *kb = (const ft_block_q8_K *)(const void *)blk;
                    for (int j = s * g / 16; j < (s + 1) * g / 16; j++)
                        sum += kb->bsums[j];
                } else {
                    for (int i = 0; i < g; i++)
                        sum += qs[s * g + i];
                }
                if (xmode == FT_QG_X_OFFSET) {
                    const int32_t v = -offset * sum;
                    memcpy(xv, &v, 4);
                } else {
                    const float v = (float)sum;
                    memcpy(xv, &v, 4);
                }
            }
        }
    }
}

static inline void ft_qg_pack_a(const void *a, size_t a_row, int n_tok, int64_t k, void *tile, enum ft_type act,
                                int g, enum ft_qg_xmode xmode, int offset) {
    ft_qg_pack_a_width(a, a_row, n_tok, k, tile, act, g, xmode, offset, 4, FT_QG_TT);
}
/* Group width 8: pairs of tokens interleaved 8 bytes at a time. */
static inline void ft_qg_pack_a_il(const void *a, size_t a_row, int n_tok, int64_t k, void *tile, enum ft_type act,
                                   int g, enum ft_qg_xmode xmode, int offset) {
    ft_qg_pack_a_width(a, a_row, n_tok, k, tile, act, g, xmode, offset, 8, FT_QG_TT);
}
/* One token, group width 4, into a one-token tile (pack_a1). */
static inline void ft_qg_pack_a1(const void *a, int64_t k, void *tile, enum ft_type act, int g, enum ft_qg_xmode xmode,
                                 int offset) {
    ft_qg_pack_a_width(a, 0, 1, k, tile, act, g, xmode, offset, 4, 1);
}

/* ---- weights ---------------------------------------------------------------- */

/* Per type, two functions on one block of a row:
 *   group(blk, j): the 4 unsigned quants of elements 4j..4j+3 of the block
 *     as one little-endian word, computed a word at a time (SWAR);
 *   scales(blk, S, M): per sub-block s the float scale S[s] and, for types
 *     with mins, the float min M[s];
 * such that element i of sub-block s is S[s] * (q_i - offset) + M[s]. */

/* The group functions are written once for any lane type V (uint32_t
 * here; a vector of 32-bit lanes in the ISA files, where LD gathers the
 * same word from every row of the tile) through this macro: it defines
 * P##q8_0 .. P##q6_K(C ctx, blk, j). Only &, |, ^ and shifts by constants
 * are used, which GCC's vector extensions apply lane-wise. */
#define FT_QG_NIB_LO(v) ((v) & 0x0f0f0f0fu)
#define FT_QG_NIB_HI(v) (((v) >> 4) & 0x0f0f0f0fu)
/* bits 0..3 of b to bit 4 of bytes 0..3 */
#define FT_QG_BITS_TO_BIT4(b) ((((b) & 1u) | ((b) & 2u) << 7 | ((b) & 4u) << 14 | ((b) & 8u) << 21) << 4)
#define FT_QG_DEFINE_GROUPS(P, V, C, LD)                                                                      \
    static inline V P##q8_0(C c, const uint8_t *blk, int j) { return LD(c, blk + 2 + 4 * j) ^ 0x80808080u; }   \
    static inline V P##q4_0(C c, const uint8_t *blk, int j) {                                                  \
        const V v = LD(c, blk + 2 + 4 * (j & 3));                                                              \
        return j < 4 ? FT_QG_NIB_LO(v) : FT_QG_NIB_HI(v);                                                      \
    }                                                                                                          \
    static inline V P##q4_1(C c, const uint8_t *blk, int j) {                                                  \
        const V v = LD(c, blk + 4 + 4 * (j & 3));                                                              \
        return j < 4 ? FT_QG_NIB_LO(v) : FT_QG_NIB_HI(v);                                                      \
    }                                                                                                          \
    static inline V P##q5_0(C c, const uint8_t *blk, int j) {                                                  \
        const V v = LD(c, blk + 6 + 4 * (j & 3));                                                              \
        const V h = LD(c, blk + 2) >> (4 * j);                                                                 \
        return (j < 4 ? FT_QG_NIB_LO(v) : FT_QG_NIB_HI(v)) | FT_QG_BITS_TO_BIT4(h);                            \
    }                                                                                                          \
    static inline V P##q5_1(C c, const uint8_t *blk, int j) {                                                  \
        const V v = LD(c, blk + 8 + 4 * (j & 3));                                                              \
        const V h = LD(c, blk + 4) >> (4 * j);                                                                 \
        return (j < 4 ? FT_QG_NIB_LO(v) : FT_QG_NIB_HI(v)) | FT_QG_BITS_TO_BIT4(h);                            \
    }                                                                                                          \
    /* Q2_K / Q3_K low bits: element e = 128h + 32k + l is bits 2k.. of qs[32h + l] */                         \
    static inline V P##crumbs(C c, const uint8_t *qs, int e) {                                                 \
        return (LD(c, qs + 32 * (e / 128) + e % 32) >> (2 * ((e % 128) / 32))) & 0x03030303u;                  \
    }                                                                                                          \
    static inline V P##q2_K(C c, const uint8_t *blk, int j) { return P##crumbs(c, blk + 16, 4 * j); }         \
    /* Q3_K high bit: bit e/32 of hmask[e % 32] */                                                             \
    static inline V P##q3_K(C c, const uint8_t *blk, int j) {                                                  \
        const int e = 4 * j;                                                                                   \
        return P##crumbs(c, blk + 32, e) | ((LD(c, blk + e % 32) >> (e / 32)) & 0x01010101u) << 2;             \
    }                                                                                                          \
    /* Q4_K / Q5_K: element e = 64c + 32half + l is nibble half of qs[32c + l] */                              \
    static inline V P##q4_K(C c, const uint8_t *blk, int j) {                                                  \
        const int e = 4 * j;                                                                                   \
        const V v = LD(c, blk + 16 + 32 * (e / 64) + e % 32);                                                  \
        return (e % 64) < 32 ? FT_QG_NIB_LO(v) : FT_QG_NIB_HI(v);                                              \
    }                                                                                                          \
    static inline V P##q5_K(C c, const uint8_t *blk, int j) {                                                  \
        const int e = 4 * j;                                                                                   \
        const V v = LD(c, blk + 48 + 32 * (e / 64) + e % 32);                                                  \
        const V h = ((LD(c, blk + 16 + e % 32) >> (e / 32)) & 0x01010101u) << 4;                               \
        return ((e % 64) < 32 ? FT_QG_NIB_LO(v) : FT_QG_NIB_HI(v)) | h;                                        \
    }                                                                                                          \
    /* Q6_K: element e = 128h + 32k + l: nibble k/2 of ql[64h + 32(k&1) + l], bits 2k.. of qh[32h + l] */      \
    static inline V P##q6_K(C c, const uint8_t *blk, int j) {                                                  \
        const int e = 4 * j, h = e / 128, kk = (e % 128) / 32, l = e % 32;                                     \
        const V lo = LD(c, blk + 64 * h + 32 * (kk & 1) + l);                                                  \
        const V hi = (LD(c, blk + 128 + 32 * h + l) >> (2 * kk)) & 0x03030303u;                                \
        return ((kk & 2) ? FT_QG_NIB_HI(lo) : FT_QG_NIB_LO(lo)) | hi << 4;                                     \
    }

#define FT_QG_LD_SCALAR(c, p) ft_qg_ld32(p)
FT_QG_DEFINE_GROUPS(ft_qg_group_, uint32_t, int, FT_QG_LD_SCALAR)

static inline void ft_qg_scales_d0(const uint8_t *blk, float *S, float *M) {
    (void)M;
    S[0] = ft_half_to_float(ft_qg_ld16(blk));
}
static inline void ft_qg_scales_dm(const uint8_t *blk, float *S, float *M) {
    S[0] = ft_half_to_float(ft_qg_ld16(blk));
    M[0] = ft_half_to_float(ft_qg_ld16(blk + 2));
}
static inline void ft_qg_scales_q2_K(const uint8_t *blk, float *S, float *M) {
    const ft_block_q2_K *b = (const void *)blk;
    const float d = ft_half_to_float(b->d), dmin = ft_half_to_float(b->dmin);
    for (int s = 0; s < 16; s++) {
        S[s] = d * (float)(b->scales[s] & 0x0f);
        M[s] = -(dmin * (float)(b->scales[s] >> 4));
    }
}
static inline void ft_qg_scales_q3_K(const uint8_t *blk, float *S, float *M) {
    (void)M;
    const ft_block_q3_K *b = (const void *)blk;
    const struct ft_scales16 sc = ft_q3k_scales(b->scales);
    const float d = ft_half_to_float(b->d);
    for (int s = 0; s < 16; s++)
        S[s] = d * (float)((int)ft_scales16_byte(sc, s) - 32);
}
/* Q4_K / Q5_K: d, dmin and the 12 packed bytes lead both blocks. */
static inline void ft_qg_scales_k4(const uint8_t *blk, float *S, float *M) {
    const struct ft_scales16 u = ft_k4_scales(blk + 4);
    const float d = ft_half_to_float(ft_qg_ld16(blk)), dmin = ft_half_to_float(ft_qg_ld16(blk + 2));
    for (int s = 0; s < 8; s++) {
        S[s] = d * (float)ft_scales16_byte(u, s);
        M[s] = -(dmin * (float)ft_scales16_byte(u, 8 + s));
    }
}
static inline void ft_qg_scales_q6_K(const uint8_t *blk, float *S, float *M) {
    (void)M;
    const ft_block_q6_K *b = (const void *)blk;
    const float d = ft_half_to_float(b->d);
    for (int s = 0; s < 16; s++)
        S[s] = d * (float)b->scales[s];
}

typedef uint32_t (*ft_qg_group_fn)(int unused, const uint8_t *blk, int j);
typedef void (*ft_qg_scales_fn)(const uint8_t *blk, float *S, float *M);

/* Rows 0..n_rows-1 into a weight tile of tr rows and group width W (4 or
 * 8). blck/bytes: the type's block size and bytes; g: sub-block size.
 * Inlined with constant group and scales functions, so each type gets its
 * own loop. */
__attribute__((always_inline)) static inline void ft_qg_pack_w_width(const void *w, size_t w_row, int n_rows,
                                                                     int64_t k, void *tile, int tr, int g, int mins,
                                                                     int blck, size_t bytes, ft_qg_group_fn group,
                                                                     ft_qg_scales_fn scales, const int W) {
    const size_t sb = ft_qg_sb_bytes(tr, g, mins);
    const int nsub = blck / g;
    uint8_t *out = tile;
    float S[16], M[16];
    if (n_rows < tr)
        memset(tile, 0, ft_qg_w_tile_bytes(tr, g, mins, k));
    for (int r = 0; r < n_rows; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * w_row;
        for (int64_t b = 0; b < k / blck; b++) {
            const uint8_t *blk = row + (size_t)b * bytes;
            scales(blk, S, M);
            /* unrolled, so the group functions' offsets fold to constants */
#pragma GCC unroll 16
            for (int s = 0; s < nsub; s++) {
                uint8_t *o = out + (size_t)(b * nsub + s) * sb;
#pragma GCC unroll 8
                for (int j = 0; j < g / 4; j++) {
                    const uint32_t v = group(0, blk, s * g / 4 + j);
                    memcpy(o + ((j / (W / 4)) * tr + r) * W + (j % (W / 4)) * 4, &v, 4);
                }
                memcpy(o + (size_t)(g * tr + 4 * r), &S[s], 4);
                if (mins)
                    memcpy(o + (size_t)(g * tr + 4 * tr + 4 * r), &M[s], 4);
            }
        }
    }
}

__attribute__((always_inline)) static inline void ft_qg_pack_w(const void *w, size_t w_row, int n_rows, int64_t k,
                                                               void *tile, int tr, int g, int mins, int blck,
                                                               size_t bytes, ft_qg_group_fn group,
                                                               ft_qg_scales_fn scales) {
    ft_qg_pack_w_width(w, w_row, n_rows, k, tile, tr, g, mins, blck, bytes, group, scales, 4);
}

/* The portable packer of each type for a tile of tr rows and group width W
 * (a level may leave some unused: AVX2 has no Q8_0 GEMM). */
#define FT_QG_PACK_W_ONE(prefix, tr, W, T, G, MINS, BLCK, SCALES)                                                 \
    __attribute__((unused)) static void prefix##T(const void *w, size_t wr, int n, int64_t k, void *t) {          \
        ft_qg_pack_w_width(w, wr, n, k, t, tr, G, MINS, BLCK, sizeof(ft_block_##T), ft_qg_group_##T, SCALES, W); \
    }
#define FT_QG_PACK_W_PORTABLE_WIDTH(prefix, tr, W)                               \
    FT_QG_PACK_W_ONE(prefix, tr, W, q8_0, 32, 0, 32, ft_qg_scales_d0)           \
    FT_QG_PACK_W_ONE(prefix, tr, W, q4_0, 32, 0, 32, ft_qg_scales_d0)           \
    FT_QG_PACK_W_ONE(prefix, tr, W, q4_1, 32, 1, 32, ft_qg_scales_dm)           \
    FT_QG_PACK_W_ONE(prefix, tr, W, q5_0, 32, 0, 32, ft_qg_scales_d0)           \
    FT_QG_PACK_W_ONE(prefix, tr, W, q5_1, 32, 1, 32, ft_qg_scales_dm)           \
    FT_QG_PACK_W_ONE(prefix, tr, W, q2_K, 16, 1, FT_QK_K, ft_qg_scales_q2_K)    \
    FT_QG_PACK_W_ONE(prefix, tr, W, q3_K, 16, 0, FT_QK_K, ft_qg_scales_q3_K)    \
    FT_QG_PACK_W_ONE(prefix, tr, W, q4_K, 32, 1, FT_QK_K, ft_qg_scales_k4)      \
    FT_QG_PACK_W_ONE(prefix, tr, W, q5_K, 32, 1, FT_QK_K, ft_qg_scales_k4)      \
    FT_QG_PACK_W_ONE(prefix, tr, W, q6_K, 16, 0, FT_QK_K, ft_qg_scales_q6_K)
#define FT_QG_PACK_W_PORTABLE(prefix, tr) FT_QG_PACK_W_PORTABLE_WIDTH(prefix, tr, 4)

/* ---- Q8_K activations of the Q4_K/Q5_K kernels with integer scales ----------
 * (avx2_qgemm_k4.c, amx_qgemm_k4_vnni.c). Per super-block: its 64 groups
 * x tt tokens x 4 bytes, D[tt] (floats), then the 32-element sums as int16
 * pairs [4][tt] (uint32 per token: sum 2p | sum 2p+1 << 16), the operands
 * of the mins' vpmaddwd/vpdpwssd. Missing tokens are zero. */
#define FT_QG_K4_A_D(tt) (FT_QK_K * (tt))
#define FT_QG_K4_A_BP(tt) (FT_QG_K4_A_D(tt) + 4 * (tt))
#define FT_QG_K4_A_SB(tt) (FT_QG_K4_A_BP(tt) + 16 * (tt))

static inline size_t ft_qg_k4_a_tile_bytes(int64_t k, int tt) { return (size_t)(k / FT_QK_K) * FT_QG_K4_A_SB(tt); }

static inline void ft_qg_pack_a_k4(const void *a, size_t a_row, int n_tok, int64_t k, void *tile, int tt) {
    memset(tile, 0, ft_qg_k4_a_tile_bytes(k, tt));
    for (int t = 0; t < n_tok; t++) {
        const ft_block_q8_K *y = (const ft_block_q8_K *)(const void *)((const uint8_t *)a + (size_t)t * a_row);
        for (int64_t b = 0; b < k / FT_QK_K; b++) {
            uint8_t *sb = (uint8_t *)tile + (size_t)b * FT_QG_K4_A_SB(tt);
            for (int g = 0; g < FT_QK_K / 4; g++) /* group g: sub-block g / 8, its group g % 8 */
                memcpy(sb + ((size_t)g * (size_t)tt + (size_t)t) * 4, y[b].qs + 4 * g, 4);
            memcpy(sb + FT_QG_K4_A_D(tt) + 4 * t, &y[b].d, 4);
            for (int p = 0; p < 4; p++) {
                const int s0 = y[b].bsums[4 * p] + y[b].bsums[4 * p + 1];
                const int s1 = y[b].bsums[4 * p + 2] + y[b].bsums[4 * p + 3];
                const uint32_t v = (uint32_t)(uint16_t)(int16_t)s0 | (uint32_t)(uint16_t)(int16_t)s1 << 16;
                memcpy(sb + FT_QG_K4_A_BP(tt) + (size_t)(p * tt + t) * 4, &v, 4);
            }
        }
    }
}

/* ---- lookup-table types (IQ4_NL, IQ4_XS, MXFP4) -------------------------------
 * Their quants are table values (IQ4: -127..113, MXFP4: -12..12), so the
 * tile holds them as Q8_0's do and the level's Q8_0 kernel multiplies them:
 * the signed value XOR bias, bias 0x80 where Q8_0's tile is q + 128 (x86,
 * offset 128 in pack_a) and 0 where it keeps signed bytes (NEON, offset 0).
 * One sub-block of 32 per scale, also for IQ4_XS (S = d * (ls - 32)); its
 * Q8_K activations go into 32-element activation blocks
 * (ft_qg_pack_a_q8_K_32), so the Q8_0 kernel's shape fits all three. */

/* Elements 4j..4j+3 of a 32-element block of nibbles qs (laid out as
 * Q4_0) looked up in kv, XOR bias, as one little-endian word. */
static inline uint32_t ft_qg_lut_group(const int8_t *kv, const uint8_t *qs, int j, uint8_t bias) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        const uint8_t q = j < 4 ? qs[4 * j + i] & 0x0f : qs[4 * (j - 4) + i] >> 4;
        v |= (uint32_t)((uint8_t)kv[q] ^ bias) << (8 * i);
    }
    return v;
}

static const int8_t ft_qg_kv_iq4nl[16] = FT_KVALUES_IQ4NL;
static const int8_t ft_qg_kv_mxfp4[16] = FT_KVALUES_MXFP4;

static inline void ft_qg_scales_mxfp4(const uint8_t *blk, float *S, float *M) {
    (void)M;
    S[0] = ft_e8m0_to_fp32_half(blk[0]);
}
static inline void ft_qg_scales_iq4_xs(const uint8_t *blk, float *S, float *M) {
    (void)M;
    const ft_block_iq4_xs *b = (const void *)blk;
    const float d = ft_half_to_float(b->d);
    for (int s = 0; s < 8; s++)
        S[s] = d * (float)(ft_iq4_xs_scale(b, s) - 32);
}

#define FT_QG_PACK_W_LUT(prefix, tr, W, BIAS)                                                                   \
    static inline uint32_t prefix##g_iq4_nl(int c, const uint8_t *blk, int j) {                                 \
        (void)c;                                                                                                \
        return ft_qg_lut_group(ft_qg_kv_iq4nl, blk + 2, j, BIAS);                                               \
    }                                                                                                           \
    static inline uint32_t prefix##g_mxfp4(int c, const uint8_t *blk, int j) {                                  \
        (void)c;                                                                                                \
        return ft_qg_lut_group(ft_qg_kv_mxfp4, blk + 1, j, BIAS);                                               \
    }                                                                                                           \
    static inline uint32_t prefix##g_iq4_xs(int c, const uint8_t *blk, int j) {                                 \
        (void)c;                                                                                                \
        return ft_qg_lut_group(ft_qg_kv_iq4nl, blk + 8 + 16 * (j / 8), j % 8, BIAS);                           \
    }                                                                                                           \
    static void prefix##iq4_nl(const void *w, size_t wr, int n, int64_t k, void *t) {                          \
        ft_qg_pack_w_width(w, wr, n, k, t, tr, 32, 0, 32, sizeof(ft_block_iq4_nl), prefix##g_iq4_nl,            \
                           ft_qg_scales_d0, W);                                                                 \
    }                                                                                                           \
    static void prefix##mxfp4(const void *w, size_t wr, int n, int64_t k, void *t) {                           \
        ft_qg_pack_w_width(w, wr, n, k, t, tr, 32, 0, 32, sizeof(ft_block_mxfp4), prefix##g_mxfp4,              \
                           ft_qg_scales_mxfp4, W);                                                              \
    }                                                                                                           \
    static void prefix##iq4_xs(const void *w, size_t wr, int n, int64_t k, void *t) {                          \
        ft_qg_pack_w_width(w, wr, n, k, t, tr, 32, 0, FT_QK_K, sizeof(ft_block_iq4_xs), prefix##g_iq4_xs,       \
                           ft_qg_scales_iq4_xs, W);                                                             \
    }

/* n_tok rows of Q8_K into an activation tile of 32-element blocks (G = ABLK
 * = 32, X = -offset * sum): each Q8_K block is 8 such blocks sharing its
 * float d, so the sums the kernel makes are IQ4_XS's, regrouped. */
static inline void ft_qg_pack_a_q8_K_32(const void *a, size_t a_row, int n_tok, int64_t k, void *tile, int offset,
                                        const int W, const int TT) {
    const size_t ab = ft_qg_ab_bytes_tt(32, 32, TT);
    uint8_t *out = tile;
    for (int64_t b = 0; b < k / 32; b++, out += ab) {
        float *D = (float *)(void *)(out + 32 * TT);
        uint8_t *X = out + 32 * TT + 4 * TT;
        for (int t = 0; t < TT; t++) {
            if (t >= n_tok) {
                for (int gi = 0; gi < 32 / W; gi++)
                    memset(out + (gi * TT + t) * W, 0, (size_t)W);
                D[t] = 0.0f;
                memset(X + 4 * t, 0, 4);
                continue;
            }
            const ft_block_q8_K *kb = (const ft_block_q8_K *)(const void *)((const uint8_t *)a + (size_t)t * a_row) +
                                      b / 8;
            const int8_t *qs = kb->qs + 32 * (b % 8);
            for (int gi = 0; gi < 32 / W; gi++)
                memcpy(out + (gi * TT + t) * W, qs + W * gi, (size_t)W);
            D[t] = kb->d;
            const int32_t x = -offset * (kb->bsums[2 * (b % 8)] + kb->bsums[2 * (b % 8) + 1]);
            memcpy(X + 4 * t, &x, 4);
        }
    }
}
/* The activation tile size that goes with it. */
static inline size_t ft_qg_a_tile_bytes_q8_K_32(int64_t k, int tt) { return (size_t)(k / 32) * ft_qg_ab_bytes_tt(32, 32, tt); }

#endif
