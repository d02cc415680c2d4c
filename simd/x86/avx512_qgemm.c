/* Quantized GEMM, AVX-512 VNNI level (include/ft/qgemm.h, tile layouts in
 * simd/qgemm_pack.h). Compiled with the avx512 level's flags
 * (cmake/FtSimd.cmake).
 *
 * Micro-kernel: 16 weight rows x 8 tokens. A zmm holds 4 consecutive
 * elements of each of the 16 rows (one group of the weight tile); each of
 * the 8 tokens' 4 matching activation bytes is broadcast from memory into
 * vpdpbusd (unsigned weights x signed activations, 4 products per int32
 * lane), so a group costs one load and 8 vpdpbusd. Per sub-block the int32
 * sums go to float and are scaled: 8 accumulators of int32, 8 of float (and
 * 8 partial sums per Q8_K block) stay in the 32 zmm registers.
 *
 * On the test machine (one 512-bit FMA port) vpdpbusd, vcvtdq2ps and the
 * float FMAs share port 0, so a Q4_0/Q8_0 block costs 8 + 3 uops per 16x8
 * outputs: at most 8/11 of the 64 int8 MACs per cycle. Every other
 * operation (loads, broadcasts, unpacking) goes elsewhere.
 *
 * Weight packers: gathers (vpgatherdd) read the same 4 bytes of 16 rows in
 * one instruction, which is the tile's layout; the nibble and bit fields
 * are then split lane-wise. The types without one here use the portable
 * packers of simd/qgemm_pack.h.
 *
 * Q4_0 and Q6_K are also repacked at load (include/ft/qgemm.h, kernel_rw):
 * a 16-row tile is two avx2 tiles of 8 rows (their repacker and layout),
 * which VNNI kernels read for every batch below FT_RW_UNPACK_MIN_TOKENS,
 * decode of one stream included ("repacked weights" below).
 */
#include "simd/level.h"
#include "simd/qgemm_pack.h"
#include "simd/x86/gather16.h"
#include "simd/x86/qgemm_scale512.h"

#include <immintrin.h>

#define TR 16 /* weight rows per tile */
#define TT FT_QG_TT

/* Batches from 4 tokens: measured on 2048 x 2048 Q4_0/Q4_K/Q8_0, one
 * thread, data in cache: GEMM/vec_dot time 2 tokens 0.9-1.2x, 4 tokens
 * 1.7-2.3x (a tile computes 8 tokens whatever n_tok is). */
#define MIN_TOKENS 4


/* ---- micro-kernel ------------------------------------------------------------------ */


/* acc += w . (the 4 bytes at p, broadcast): the broadcast as vpdpbusd's
 * embedded {1to16} memory operand, one micro-fused uop instead of a
 * vpbroadcastd and a vpdpbusd (GCC does not fold the two). */
static inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const uint8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)p));
    return acc;
}

/* G: sub-block size; ABLK: activation block; MINS: M per sub-block times
 * the float X; XINT: X is the int32 start of each integer sum; FOLD (no
 * MINS): D is folded into each sub-block's scale (S * D) as the avx2 level
 * does, instead of scaling the block's partial sums once, so that the tiles
 * unpacked from avx2's repacked ones give exactly the floats its kernel_rw
 * gives for the same weights (one more multiply per sub-block and token). */
__attribute__((always_inline)) static inline void kernel_tile(const uint8_t *restrict w, const uint8_t *restrict a,
                                                              int64_t k, int n_rows, int n_tok, float *restrict out,
                                                              int64_t ld, const int G, const int ABLK, const int MINS,
                                                              const int XINT, const int FOLD) {
    const int nsub = ABLK / G;
    const int ngrp = G / 4;
    const size_t sb_bytes = ft_qg_sb_bytes(TR, G, MINS);
    const size_t ab_bytes = ft_qg_ab_bytes(G, ABLK);
    __m512 facc[TT];
    FT_UNROLL(16) for (int t = 0; t < TT; t++)
        facc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < k / ABLK; b++, a += ab_bytes) {
        const uint8_t *D = a + ABLK * TT;
        const uint8_t *X = D + 4 * TT;
        __m512 part[TT];
        for (int s = 0; s < nsub; s++, w += sb_bytes) {
            __m512i acc[TT];
            FT_UNROLL(16) for (int t = 0; t < TT; t++)
                acc[t] = XINT ? ft_qg_bcast32(X + (s * TT + t) * 4) : _mm512_setzero_si512();
            const uint8_t *aq = a + (size_t)s * ngrp * TT * 4;
            for (int gi = 0; gi < ngrp; gi++) {
                const __m512i W = _mm512_loadu_si512(w + gi * 64);
                FT_UNROLL(16) for (int t = 0; t < TT; t++)
                    acc[t] = dpbusd_bcast(acc[t], W, aq + (gi * TT + t) * 4);
            }
            ft_qg_scale_sub(acc, s, w + G * TR, D, X, facc, part, NULL, nsub, MINS, FOLD, TR, TT, TT);
        }
    }
    const __mmask16 rows = (__mmask16)((1u << n_rows) - 1u);
    FT_UNROLL(16) for (int t = 0; t < TT; t++)
        if (t < n_tok)
            _mm512_mask_storeu_ps(out + t * ld, rows, facc[t]);
}

#define KERNEL(name, G, ABLK, MINS, XINT, FOLD)                                                              \
    static void name(const void *w, const void *a, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) { \
        kernel_tile(w, a, k, n_rows, n_tok, out, ld, G, ABLK, MINS, XINT, FOLD);                             \
    }
KERNEL(kernel_q8_0_class, 32, 32, 0, 1, 0)   /* Q8_0, Q4_0, Q5_0 */
KERNEL(kernel_q4_1_class, 32, 32, 1, 0, 0)   /* Q4_1, Q5_1 */
KERNEL(kernel_k32_mins, 32, 256, 1, 0, 0)    /* Q4_K, Q5_K */
KERNEL(kernel_k16_mins, 16, 256, 1, 0, 0)    /* Q2_K */
KERNEL(kernel_k16_offset, 16, 256, 0, 1, 0)  /* Q3_K */
KERNEL(kernel_q6_K_fold, 16, 256, 0, 1, 1)   /* Q6_K, repacked as on avx2 */

/* ---- gather packers -------------------------------------------------------------------- */

FT_QG_PACK_W_PORTABLE(portable_, TR)

static inline void store(uint8_t *p, __m512i v) { _mm512_storeu_si512(p, v); }
static inline void storef(uint8_t *p, __m512 v) { _mm512_storeu_ps(p, v); }

static void pack_w_q8_0(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (!ft_rows16_fit(w_row)) {
        portable_q8_0(w, w_row, n_rows, k, tile);
        return;
    }
    const struct ft_rows16 r = ft_rows16(w_row, n_rows);
    const __m512i bias = _mm512_set1_epi32((int)0x80808080u);
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / 32; b++, o += ft_qg_sb_bytes(TR, 32, 0)) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)sizeof(ft_block_q8_0);
        for (int g = 0; g < 8; g++)
            store(o + 64 * g, _mm512_xor_si512(ft_gather16(r, p + 2 + 4 * g), bias));
        storef(o + 512, ft_half_lo16(ft_gather16(r, p)));
    }
}

static void pack_w_q4_0(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (!ft_rows16_fit(w_row)) {
        portable_q4_0(w, w_row, n_rows, k, tile);
        return;
    }
    const struct ft_rows16 r = ft_rows16(w_row, n_rows);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / 32; b++, o += ft_qg_sb_bytes(TR, 32, 0)) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)sizeof(ft_block_q4_0);
        for (int j = 0; j < 4; j++) {
            const __m512i v = ft_gather16(r, p + 2 + 4 * j);
            store(o + 64 * j, _mm512_and_si512(v, m4));
            store(o + 64 * (4 + j), _mm512_and_si512(_mm512_srli_epi32(v, 4), m4));
        }
        storef(o + 512, ft_half_lo16(ft_gather16(r, p)));
    }
}

/* Q4_K scales of 16 rows into the tile's S and M slots. */
static inline void k4_scales16(struct ft_rows16 r, const uint8_t *p, uint8_t *o, size_t sb) {
    __m512i w4[4];
    __m512 d, dmin;
    ft_k4_scales16(r, p, w4, &d, &dmin);
    for (int s = 0; s < 8; s++) {
        const __m512i sc = ft_byte16(w4[s / 4], s % 4), mn = ft_byte16(w4[2 + s / 4], s % 4);
        storef(o + s * sb + 32 * TR, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        /* -(dmin * mn), as the portable packer rounds it (and signs a zero) */
        storef(o + s * sb + 32 * TR + 4 * TR,
               _mm512_xor_ps(_mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn)), _mm512_set1_ps(-0.0f)));
    }
}

static void pack_w_q4_K(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (!ft_rows16_fit(w_row)) {
        portable_q4_K(w, w_row, n_rows, k, tile);
        return;
    }
    const struct ft_rows16 r = ft_rows16(w_row, n_rows);
    const size_t sb = ft_qg_sb_bytes(TR, 32, 1);
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / FT_QK_K; b++, o += 8 * sb) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)sizeof(ft_block_q4_K);
        k4_scales16(r, p, o, sb);
        ft_k4_quants16(r, p + 16, NULL, o, sb);
    }
}

static void pack_w_q5_K(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (!ft_rows16_fit(w_row)) {
        portable_q5_K(w, w_row, n_rows, k, tile);
        return;
    }
    const struct ft_rows16 r = ft_rows16(w_row, n_rows);
    const size_t sb = ft_qg_sb_bytes(TR, 32, 1);
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / FT_QK_K; b++, o += 8 * sb) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)sizeof(ft_block_q5_K);
        k4_scales16(r, p, o, sb);
        ft_k4_quants16(r, p + 48, p + 16, o, sb);
    }
}

static void pack_w_q6_K(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (!ft_rows16_fit(w_row)) {
        portable_q6_K(w, w_row, n_rows, k, tile);
        return;
    }
    const struct ft_rows16 r = ft_rows16(w_row, n_rows);
    const __m512i m4 = _mm512_set1_epi8(0x0f), m3 = _mm512_set1_epi8(0x03);
    const size_t sb = ft_qg_sb_bytes(TR, 16, 0);
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / FT_QK_K; b++, o += 16 * sb) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)sizeof(ft_block_q6_K);
        /* d is the high half of the word at 206 (the block ends at 210) */
        const __m512 d = ft_half_hi16(ft_gather16(r, p + 206));
        for (int m = 0; m < 4; m++) {
            const __m512i sc4 = ft_gather16(r, p + 192 + 4 * m);
            for (int i = 0; i < 4; i++) {
                const __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(sc4, 24 - 8 * i), 24);
                storef(o + (4 * m + i) * sb + 16 * TR, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
            }
        }
        for (int h = 0; h < 2; h++)
            for (int l0 = 0; l0 < 32; l0 += 4) {
                const __m512i la = ft_gather16(r, p + 64 * h + l0);      /* k = 0 low, k = 2 high nibbles */
                const __m512i lb = ft_gather16(r, p + 64 * h + 32 + l0); /* k = 1, k = 3 */
                const __m512i qh = ft_gather16(r, p + 128 + 32 * h + l0);
                __m512i q[4];
                q[0] = _mm512_or_si512(_mm512_and_si512(la, m4), _mm512_slli_epi32(_mm512_and_si512(qh, m3), 4));
                q[1] = _mm512_or_si512(_mm512_and_si512(lb, m4),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 2), m3), 4));
                q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(la, 4), m4),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 4), m3), 4));
                q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(lb, 4), m4),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 6), m3), 4));
                for (int kk = 0; kk < 4; kk++) {
                    /* element 128h + 32kk + l0: sub-block 8h + 2kk + l0/16, group (l0 % 16) / 4 */
                    const int s = 8 * h + 2 * kk + l0 / 16;
                    store(o + s * sb + 64 * ((l0 % 16) / 4), q[kk]);
                }
            }
    }
}

/* ---- gather packers for the other types: the shared group functions, lane-wise ---- */

typedef uint32_t v16u __attribute__((vector_size(64)));
static inline v16u gather_v(struct ft_rows16 r, const uint8_t *p) { return (v16u)ft_gather16(r, p); }
#define LD_GATHER(c, p) gather_v(c, p)
FT_QG_DEFINE_GROUPS(vgroup_, v16u, struct ft_rows16, LD_GATHER)

typedef v16u (*vgroup_fn)(struct ft_rows16 r, const uint8_t *blk, int j);
/* Writes S (and M) of every sub-block of one block of the 16 rows. */
typedef void (*vscales_fn)(struct ft_rows16 r, const uint8_t *blk, uint8_t *o, size_t sb);

__attribute__((always_inline)) static inline void pack_w_gather(const void *w, size_t w_row, int n_rows, int64_t k,
                                                                void *tile, int g, int mins, int blck, size_t bytes,
                                                                vgroup_fn group, vscales_fn scales) {
    const struct ft_rows16 r = ft_rows16(w_row, n_rows);
    const int nsub = blck / g;
    const size_t sb = ft_qg_sb_bytes(TR, g, mins);
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / blck; b++, o += (size_t)nsub * sb) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)bytes;
        scales(r, p, o, sb);
        for (int s = 0; s < nsub; s++)
            for (int j = 0; j < g / 4; j++)
                store(o + s * sb + 64 * j, (__m512i)group(r, p, s * g / 4 + j));
    }
}

/* d at byte 0 (and m at byte 2) of a 32-element block: S (and M). */
static void vscales_d(struct ft_rows16 r, const uint8_t *p, uint8_t *o, size_t sb) {
    (void)sb;
    storef(o + 32 * TR, ft_half_lo16(ft_gather16(r, p)));
}

static void vscales_dm(struct ft_rows16 r, const uint8_t *p, uint8_t *o, size_t sb) {
    (void)sb;
    const __m512i dm = ft_gather16(r, p);
    storef(o + 32 * TR, ft_half_lo16(dm));
    storef(o + 32 * TR + 4 * TR, ft_half_hi16(dm));
}

/* Q2_K: scales[16] at 0 (low nibble sc, high nibble mn), d/dmin at 80. */
static void vscales_q2_K(struct ft_rows16 r, const uint8_t *p, uint8_t *o, size_t sb) {
    const __m512i dd = ft_gather16(r, p + 80);
    const __m512 d = ft_half_lo16(dd), dmin = ft_half_hi16(dd);
    const __m512i m4 = _mm512_set1_epi32(0x0f);
    for (int m = 0; m < 4; m++) {
        const __m512i v = ft_gather16(r, p + 4 * m);
        for (int i = 0; i < 4; i++) {
            const __m512i byte = _mm512_srli_epi32(v, 8 * i);
            const __m512i sc = _mm512_and_si512(byte, m4);
            const __m512i mn = _mm512_and_si512(_mm512_srli_epi32(byte, 4), m4);
            storef(o + (4 * m + i) * sb + 16 * TR, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
            storef(o + (4 * m + i) * sb + 16 * TR + 4 * TR,
                   _mm512_xor_ps(_mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn)), _mm512_set1_ps(-0.0f)));
        }
    }
}

/* Q3_K: the 6-bit scales at 96 (ft_q3k_scales, lane-wise) minus 32, d at 108. */
static void vscales_q3_K(struct ft_rows16 r, const uint8_t *p, uint8_t *o, size_t sb) {
    const __m512 d = ft_half_hi16(ft_gather16(r, p + 106));
    const __m512i a0 = ft_gather16(r, p + 96), a1 = ft_gather16(r, p + 100), a2 = ft_gather16(r, p + 104);
    const __m512i m0f = _mm512_set1_epi32(0x0f0f0f0f), m03 = _mm512_set1_epi32(0x03030303);
    __m512i w4[4];
    w4[0] = _mm512_or_si512(_mm512_and_si512(a0, m0f), _mm512_slli_epi32(_mm512_and_si512(a2, m03), 4));
    w4[1] = _mm512_or_si512(_mm512_and_si512(a1, m0f),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a2, 2), m03), 4));
    w4[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a0, 4), m0f),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a2, 4), m03), 4));
    w4[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a1, 4), m0f),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a2, 6), m03), 4));
    const __m512i ff = _mm512_set1_epi32(0xff), b32 = _mm512_set1_epi32(32);
    for (int s = 0; s < 16; s++) {
        const __m512i sc = _mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(w4[s / 4], 8 * (s % 4)), ff), b32);
        storef(o + s * sb + 16 * TR, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
    }
}

#define PACK_W_GATHER(T, G, MINS, BLCK, SCALES)                                                            \
    static void pack_w_##T(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {               \
        if (!ft_rows16_fit(w_row))                                                                              \
            portable_##T(w, w_row, n_rows, k, tile);                                                       \
        else                                                                                               \
            pack_w_gather(w, w_row, n_rows, k, tile, G, MINS, BLCK, sizeof(ft_block_##T), vgroup_##T, SCALES); \
    }
PACK_W_GATHER(q4_1, 32, 1, 32, vscales_dm)
PACK_W_GATHER(q5_0, 32, 0, 32, vscales_d)
PACK_W_GATHER(q5_1, 32, 1, 32, vscales_dm)
PACK_W_GATHER(q2_K, 16, 1, FT_QK_K, vscales_q2_K)
PACK_W_GATHER(q3_K, 16, 0, FT_QK_K, vscales_q3_K)

/* ---- the activations, and the table ------------------------------------------------------- */

#define PACK_A(name, ACT, G, XMODE, OFF)                                                \
    static void name(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) { \
        ft_qg_pack_a(a, a_row, n_tok, k, tile, ACT, G, XMODE, OFF);                   \
    }
PACK_A(pack_a_q8_0, FT_TYPE_Q8_0, 32, FT_QG_X_OFFSET, 128)
PACK_A(pack_a_q4_0, FT_TYPE_Q8_0, 32, FT_QG_X_OFFSET, 8)
PACK_A(pack_a_q5_0, FT_TYPE_Q8_0, 32, FT_QG_X_OFFSET, 16)
PACK_A(pack_a_q4_1, FT_TYPE_Q8_1, 32, FT_QG_X_S, 0)
PACK_A(pack_a_k32_sum, FT_TYPE_Q8_K, 32, FT_QG_X_SUM, 0)
PACK_A(pack_a_k16_sum, FT_TYPE_Q8_K, 16, FT_QG_X_SUM, 0)
PACK_A(pack_a_q3_K, FT_TYPE_Q8_K, 16, FT_QG_X_OFFSET, 4)
PACK_A(pack_a_q6_K, FT_TYPE_Q8_K, 16, FT_QG_X_OFFSET, 32)

#define SIZES(name, G, ABLK, MINS)                                                                    \
    static size_t name##_w(int64_t k) { return ft_qg_w_tile_bytes(TR, G, MINS, k); }                 \
    static size_t name##_a(int64_t k) { return ft_qg_a_tile_bytes(G, ABLK, k); }
SIZES(size_q8_0_class, 32, 32, 0)
SIZES(size_q4_1_class, 32, 32, 1)
SIZES(size_k32_mins, 32, 256, 1)
SIZES(size_k16_mins, 16, 256, 1)
SIZES(size_k16_offset, 16, 256, 0)

/* ---- repacked weights: the avx2 level's tiles, two to a tile of 16 rows ---------------- *
 *
 * The types the avx2 level repacks at load (Q4_0, Q6_K) are repacked the
 * same way here, 8 rows at a time, and a tile of 16 rows is two avx2 tiles
 * one after the other. Batches below FT_RW_UNPACK_MIN_TOKENS (decode of one
 * or a few requests) run the avx2 level's kernel_rw / kernel_rw1 on each
 * half: without repacked tiles this level unpacked the weights in every
 * product of 4 or more tokens and read them with vec_dot below that
 * (Llama 3.2 1B Q4_0, 2 threads, tg: 37 tokens/s against avx2's 64).
 * Larger batches unpack both halves into this level's 16-row tile for the
 * VNNI kernel. The activation tiles are the same bytes on both levels
 * (ft_qg_pack_a / ft_qg_pack_a1 with the same parameters). */

/* The avx2 level's entries of the types it repacks (ft_qgemm_fill_avx512). */
static const struct ft_qgemm *g_half[FT_TYPE_COUNT];
#define HR 8 /* rows of an avx2 tile */

static void pair_repack(const struct ft_qgemm *h, const void *w, size_t w_row, int64_t k, void *tile) {
    h->repack_w(w, w_row, k, tile);
    h->repack_w((const uint8_t *)w + HR * w_row, w_row, k, (uint8_t *)tile + h->rw_tile_size(k));
}

static void pair_row(const struct ft_qgemm *h, const void *tile, int r, int64_t k, void *row) {
    if (r < HR)
        h->rw_row(tile, r, k, row);
    else
        h->rw_row((const uint8_t *)tile + h->rw_tile_size(k), r - HR, k, row);
}

/* Both halves, a block of ABLK elements at a time, through the avx2 level's
 * unpack_rw into its 8-row tiles, then interleaved into this level's: per
 * sub-block of G, group j of the 16 rows is the halves' groups j one after
 * the other, and so are the scales (no mins: Q4_0 and Q6_K have none). */
static void pair_unpack(const struct ft_qgemm *h, const void *rw, int64_t k, void *tile, const int G,
                        const int ABLK) {
    enum { MAX_HALF = 16 * (16 * HR + 4 * HR) }; /* ft_qg_w_tile_bytes(HR, 16, 0, 256), the largest */
    _Alignas(64) uint8_t un[2][MAX_HALF];
    const size_t half = h->rw_tile_size(k), rb = h->rw_tile_size(ABLK);
    const size_t sb8 = ft_qg_sb_bytes(HR, G, 0), sb16 = ft_qg_sb_bytes(TR, G, 0);
    const uint8_t *src = rw;
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / ABLK; b++) {
        for (int i = 0; i < 2; i++)
            h->unpack_rw(src + (size_t)i * half + (size_t)b * rb, ABLK, un[i]);
        for (int s = 0; s < ABLK / G; s++, o += sb16)
            for (int i = 0; i < 2; i++) {
                const uint8_t *u = un[i] + (size_t)s * sb8;
                for (int j = 0; j < G / 4; j++)
                    memcpy(o + 64 * j + 32 * i, u + 32 * j, 32);
                memcpy(o + G * TR + 32 * i, u + G * HR, 32);
            }
    }
}

/* Type T's (functions named after t) layout over g_half[FT_TYPE_T]. */
#define RW_PAIR(T, t, G, ABLK)                                                                                  \
    static size_t rw_size_##t(int64_t k) { return 2 * g_half[FT_TYPE_##T]->rw_tile_size(k); }                 \
    static void repack_w_##t(const void *w, size_t w_row, int64_t k, void *tile) {                            \
        pair_repack(g_half[FT_TYPE_##T], w, w_row, k, tile);                                                   \
    }                                                                                                          \
    static void rw_row_##t(const void *tile, int r, int64_t k, void *row) {                                  \
        pair_row(g_half[FT_TYPE_##T], tile, r, k, row);                                                        \
    }                                                                                                          \
    static void unpack_rw_##t(const void *rw, int64_t k, void *tile) {                                        \
        pair_unpack(g_half[FT_TYPE_##T], rw, k, tile, G, ABLK);                                                \
    }                                                                                                          \
    static size_t a1_size_##t(int64_t k) { return g_half[FT_TYPE_##T]->a1_tile_size(k); }                     \
    static void pack_a1_##t(const void *a, int64_t k, void *tile) { g_half[FT_TYPE_##T]->pack_a1(a, k, tile); }
RW_PAIR(Q4_0, q4_0, 32, 32)
RW_PAIR(Q6_K, q6_K, 16, FT_QK_K)

/* Q4_0 on the pair tile with VNNI: per block of 32 elements each half
 * holds 4 x 32 quant bytes (dword i of vector j: row i's bytes 4j..4j+3,
 * whose low nibbles are elements 4j.. and high nibbles 16 + 4j..) and its
 * 8 rows' f16 scales. Vector j of both halves is one zmm of the 16 rows,
 * split into groups j and 4 + j in registers, then the block is
 * kernel_tile's Q4_0 block (vpdpbusd from X, times S, times D): the same
 * integer sums and float steps as on the unpacked tile, so the same floats.
 * NT tokens of an activation tile of TA tokens (TT, or 1: pack_a1's);
 * only NT tokens' work is done, so one token costs one token. Each half is
 * decode's weight stream, prefetched ahead as vec_dot prefetches rows. */
#define RW_Q4_0_BLOCK (4 * 32 + 2 * HR) /* a half's bytes per block */

/* A pair tile is two streams, its halves (hb bytes each), read side by
 * side. A prefetch FT_PREFETCH_DIST ahead of offset off in a half lands
 * past that half's end near it: in the other half, already on its way.
 * There it skips hb more, to the same half of the next tile (tiles of a
 * matrix follow each other; a prefetch past the last one is harmless). */
static inline size_t pair_prefetch_skip(size_t off, size_t hb) { return off + FT_PREFETCH_DIST >= hb ? hb : 0; }
__attribute__((always_inline)) static inline void kernel_rw_q4_0_nt(const uint8_t *restrict w,
                                                                    const uint8_t *restrict a, int64_t k, int n_rows,
                                                                    int n_tok, float *restrict out, int64_t ld,
                                                                    const int NT, const int TA) {
    const size_t ab_bytes = ft_qg_ab_bytes_tt(32, 32, TA);
    const size_t hb = (size_t)(k / 32) * RW_Q4_0_BLOCK;
    const uint8_t *wa = w, *wb = w + hb;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 facc[TT];
    FT_UNROLL(16) for (int t = 0; t < NT; t++)
        facc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < k / 32; b++, a += ab_bytes, wa += RW_Q4_0_BLOCK, wb += RW_Q4_0_BLOCK) {
        const size_t skip = pair_prefetch_skip(b * RW_Q4_0_BLOCK, hb);
        _mm_prefetch((const char *)wa + skip + FT_PREFETCH_DIST, _MM_HINT_T0);
        _mm_prefetch((const char *)wa + skip + FT_PREFETCH_DIST + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)wb + skip + FT_PREFETCH_DIST, _MM_HINT_T0);
        _mm_prefetch((const char *)wb + skip + FT_PREFETCH_DIST + 64, _MM_HINT_T0);
        const uint8_t *D = a + 32 * TA;
        const uint8_t *X = D + 4 * TA;
        __m512i acc[TT];
        FT_UNROLL(16) for (int t = 0; t < NT; t++)
            acc[t] = ft_qg_bcast32(X + 4 * t);
        for (int j = 0; j < 4; j++) {
            const __m512i Z = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(wa + 32 * j))),
                _mm256_loadu_si256((const __m256i *)(const void *)(wb + 32 * j)), 1);
            const __m512i lo = _mm512_and_si512(Z, m4);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(Z, 4), m4);
            FT_UNROLL(16) for (int t = 0; t < NT; t++) {
                acc[t] = dpbusd_bcast(acc[t], lo, a + (j * TA + t) * 4);
                acc[t] = dpbusd_bcast(acc[t], hi, a + ((4 + j) * TA + t) * 4);
            }
        }
        const __m256i h16 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(wa + 4 * 32))),
            _mm_loadu_si128((const __m128i *)(const void *)(wb + 4 * 32)), 1);
        const __m512 S = _mm512_cvtph_ps(h16);
        FT_UNROLL(16) for (int t = 0; t < NT; t++)
            facc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[t]), S), ft_qg_bcastf(D + 4 * t), facc[t]);
    }
    const __mmask16 rows = (__mmask16)((1u << n_rows) - 1u);
    FT_UNROLL(16) for (int t = 0; t < NT; t++)
        if (t < n_tok)
            _mm512_mask_storeu_ps(out + t * ld, rows, facc[t]);
}

static void kernel_rw_q4_0(const void *w, const void *a, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) {
    switch (n_tok) {
    case 1: kernel_rw_q4_0_nt(w, a, k, n_rows, n_tok, out, ld, 1, TT); break;
    case 2: kernel_rw_q4_0_nt(w, a, k, n_rows, n_tok, out, ld, 2, TT); break;
    case 3: kernel_rw_q4_0_nt(w, a, k, n_rows, n_tok, out, ld, 3, TT); break;
    case 4: kernel_rw_q4_0_nt(w, a, k, n_rows, n_tok, out, ld, 4, TT); break;
    case 5: kernel_rw_q4_0_nt(w, a, k, n_rows, n_tok, out, ld, 5, TT); break;
    case 6: kernel_rw_q4_0_nt(w, a, k, n_rows, n_tok, out, ld, 6, TT); break;
    case 7: kernel_rw_q4_0_nt(w, a, k, n_rows, n_tok, out, ld, 7, TT); break;
    default: kernel_rw_q4_0_nt(w, a, k, n_rows, n_tok, out, ld, TT, TT); break;
    }
}

static void kernel_rw1_q4_0(const void *w, const void *a1, int64_t k, int n_rows, float *out) {
    kernel_rw_q4_0_nt(w, a1, k, n_rows, 1, out, 0, 1, 1);
}

/* 32 bytes at p of both halves (hb bytes apart) as one zmm: rows 0..7 in
 * the low 256 bits, 8..15 in the high. */
static inline __m512i pair256(const uint8_t *p, size_t hb) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)p)),
                              _mm256_loadu_si256((const __m256i *)(const void *)(p + hb)), 1);
}

/* 16 bytes at p of both halves as one ymm. */
static inline __m256i pair128(const uint8_t *p, size_t hb) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p)),
                                   _mm_loadu_si128((const __m128i *)(const void *)(p + hb)), 1);
}

/* Q6_K on the pair tile with VNNI. A half's super-block of 256 elements
 * (avx2_qgemm.c, RW_Q6_K_SUPER): its 8 rows' f16 d, then per sub-block of
 * 16 elements N0, N1 (low nibbles of groups 0|2, 1|3), H (the high 2 bits
 * of groups 0..3 at bits 0, 2, 4, 6), 32 bytes each, and the 8 rows' int8
 * scales. The groups are rebuilt in registers as the avx2 kernel does, the
 * integer sums start at X (the offset 32 folded in), and each sub-block
 * adds sum * (d * scale * D), kernel_q6_K_fold's steps on the unpacked
 * tile: the same floats. */
#define RW_Q6_K_SUB (3 * 32 + HR)
#define RW_Q6_K_SUPER (2 * HR + 16 * RW_Q6_K_SUB)
__attribute__((always_inline)) static inline void kernel_rw_q6_K_nt(const uint8_t *restrict w,
                                                                    const uint8_t *restrict a, int64_t k, int n_rows,
                                                                    int n_tok, float *restrict out, int64_t ld,
                                                                    const int NT, const int TA) {
    const size_t ab_bytes = ft_qg_ab_bytes_tt(16, FT_QK_K, TA);
    const size_t hb = (size_t)(k / FT_QK_K) * RW_Q6_K_SUPER;
    const uint8_t *const w0 = w;
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    __m512 facc[TT];
    FT_UNROLL(16) for (int t = 0; t < NT; t++)
        facc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < k / FT_QK_K; b++, a += ab_bytes) {
        const uint8_t *D = a + FT_QK_K * TA;
        const uint8_t *X = D + 4 * TA;
        const __m512 d = _mm512_cvtph_ps(pair128(w, hb));
        w += 2 * HR;
        __m512 DT[TT];
        FT_UNROLL(16) for (int t = 0; t < NT; t++)
            DT[t] = ft_qg_bcastf(D + 4 * t);
        for (int s = 0; s < 16; s++, w += RW_Q6_K_SUB) {
            const char *pf = (const char *)w + pair_prefetch_skip((size_t)(w - w0), hb) + FT_PREFETCH_DIST;
            _mm_prefetch(pf, _MM_HINT_T0);
            _mm_prefetch(pf + 64, _MM_HINT_T0);
            _mm_prefetch(pf + hb, _MM_HINT_T0);
            _mm_prefetch(pf + hb + 64, _MM_HINT_T0);
            const __m512i N0 = pair256(w, hb), N1 = pair256(w + 32, hb), H = pair256(w + 64, hb);
            const __m512i W[4] = {
                _mm512_or_si512(_mm512_and_si512(N0, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30)),
                _mm512_or_si512(_mm512_and_si512(N1, m4), _mm512_and_si512(_mm512_slli_epi16(H, 2), m30)),
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(N0, 4), m4), _mm512_and_si512(H, m30)),
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(N1, 4), m4),
                                _mm512_and_si512(_mm512_srli_epi16(H, 2), m30))};
            const uint8_t *aq = a + (size_t)s * 4 * TA * 4;
            __m512i acc[TT];
            FT_UNROLL(16) for (int t = 0; t < NT; t++)
                acc[t] = ft_qg_bcast32(X + (s * TA + t) * 4);
            for (int j = 0; j < 4; j++)
                FT_UNROLL(16) for (int t = 0; t < NT; t++)
                    acc[t] = dpbusd_bcast(acc[t], W[j], aq + (j * TA + t) * 4);
            uint64_t sa, sb;
            memcpy(&sa, w + 96, 8);
            memcpy(&sb, w + hb + 96, 8);
            const __m512 S = _mm512_mul_ps(
                d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_set_epi64x((long long)sb, (long long)sa))));
            FT_UNROLL(16) for (int t = 0; t < NT; t++)
                facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), _mm512_mul_ps(S, DT[t]), facc[t]);
        }
    }
    const __mmask16 rows = (__mmask16)((1u << n_rows) - 1u);
    FT_UNROLL(16) for (int t = 0; t < NT; t++)
        if (t < n_tok)
            _mm512_mask_storeu_ps(out + t * ld, rows, facc[t]);
}

static void kernel_rw_q6_K(const void *w, const void *a, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) {
    switch (n_tok) {
    case 1: kernel_rw_q6_K_nt(w, a, k, n_rows, n_tok, out, ld, 1, TT); break;
    case 2: kernel_rw_q6_K_nt(w, a, k, n_rows, n_tok, out, ld, 2, TT); break;
    case 3: kernel_rw_q6_K_nt(w, a, k, n_rows, n_tok, out, ld, 3, TT); break;
    case 4: kernel_rw_q6_K_nt(w, a, k, n_rows, n_tok, out, ld, 4, TT); break;
    case 5: kernel_rw_q6_K_nt(w, a, k, n_rows, n_tok, out, ld, 5, TT); break;
    case 6: kernel_rw_q6_K_nt(w, a, k, n_rows, n_tok, out, ld, 6, TT); break;
    case 7: kernel_rw_q6_K_nt(w, a, k, n_rows, n_tok, out, ld, 7, TT); break;
    default: kernel_rw_q6_K_nt(w, a, k, n_rows, n_tok, out, ld, TT, TT); break;
    }
}

static void kernel_rw1_q6_K(const void *w, const void *a1, int64_t k, int n_rows, float *out) {
    kernel_rw_q6_K_nt(w, a1, k, n_rows, 1, out, 0, 1, 1);
}

#define ENTRY(T, ACT, SZ, PW, PA, KER)                                                           \
    static const struct ft_qgemm g_##T = {                                                               \
        .type = FT_TYPE_##T, .act_type = FT_TYPE_##ACT, .tile_rows = TR, .tile_tokens = TT,              \
        .min_tokens = MIN_TOKENS, .w_tile_size = SZ##_w, .a_tile_size = SZ##_a, .pack_w = PW, .pack_a = PA, \
        .kernel = KER};
/* A type repacked at load (RW_PAIR), its functions named after t. */
#define ENTRY_RW(T, t, ACT, SZ, PW, PA, KER)                                                                  \
    static const struct ft_qgemm g_##T = {                                                                    \
        .type = FT_TYPE_##T, .act_type = FT_TYPE_##ACT, .tile_rows = TR, .tile_tokens = TT,                   \
        .min_tokens = MIN_TOKENS, .w_tile_size = SZ##_w, .a_tile_size = SZ##_a, .pack_w = PW, .pack_a = PA,  \
        .kernel = KER, .rw_tile_size = rw_size_##t, .repack_w = repack_w_##t, .kernel_rw = kernel_rw_##t,     \
        .rw_row = rw_row_##t, .unpack_rw = unpack_rw_##t, .a1_tile_size = a1_size_##t, .pack_a1 = pack_a1_##t, \
        .kernel_rw1 = kernel_rw1_##t};
ENTRY(Q8_0, Q8_0, size_q8_0_class, pack_w_q8_0, pack_a_q8_0, kernel_q8_0_class)
/* The lookup-table types: their values packed as Q8_0's (q + 128), Q8_0's kernel. */
FT_QG_PACK_W_LUT(pack_w_lut_, TR, 4, 0x80)
static void pack_a_iq4_xs(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) {
    ft_qg_pack_a_q8_K_32(a, a_row, n_tok, k, tile, 128, 4, TT);
}
/* The lookup-table types as pack_w_q4_0 packs Q4_0 (each 32-element
 * sub-block has Q4_0's nibble order), each nibble through the table (XOR
 * 0x80) with one vpshufb: the tiles of pack_w_lut_iq4_nl / _mxfp4 /
 * _iq4_xs without a table lookup per byte, which at 4 tokens cost more than
 * the products (decode of 4 streams ran at half the speed of one). blck,
 * bsz: elements and bytes of a block; qs: offset of its first sub-block's
 * 16 nibble bytes; scales: its per-row scales (simd/qgemm_pack.h), or NULL
 * for a half at the block's start, gathered and widened 16 rows at once
 * (scalar per row it cost IQ4_NL's 4-stream decode 30%). */
__attribute__((always_inline)) static inline void pack_w_lut16(const void *w, size_t w_row, int n_rows, int64_t k,
                                                               void *tile, const int8_t *kv, int blck, size_t bsz,
                                                               int qs, ft_qg_scales_fn scales) {
    const struct ft_rows16 r = ft_rows16(w_row, n_rows);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i lut =
        _mm512_broadcast_i32x4(_mm_xor_si128(_mm_loadu_si128((const __m128i *)(const void *)kv), _mm_set1_epi8(-128)));
    const int nsub = blck / 32;
    uint8_t *o = tile;
    for (int64_t b = 0; b < k / blck; b++) {
        const uint8_t *p = (const uint8_t *)w + b * (int64_t)bsz;
        float S[8][TR], row_s[8], row_m[8];
        if (scales) {
            memset(S, 0, sizeof(S));
            for (int i = 0; i < n_rows; i++) {
                scales(p + (size_t)i * w_row, row_s, row_m);
                for (int s = 0; s < nsub; s++)
                    S[s][i] = row_s[s];
            }
        }
        for (int s = 0; s < nsub; s++, o += ft_qg_sb_bytes(TR, 32, 0)) {
            for (int j = 0; j < 4; j++) { /* missing rows stay 0, as the portable packer leaves them */
                const __m512i v = ft_gather16(r, p + qs + 16 * s + 4 * j);
                store(o + 64 * j, _mm512_maskz_mov_epi32(r.m, _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4))));
                store(o + 64 * (4 + j), _mm512_maskz_mov_epi32(
                                            r.m, _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi32(v, 4), m4))));
            }
            storef(o + 512, scales ? _mm512_loadu_ps(S[s]) : ft_half_lo16(ft_gather16(r, p)));
        }
    }
}

static void pack_w_iq4_nl(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (!ft_rows16_fit(w_row))
        pack_w_lut_iq4_nl(w, w_row, n_rows, k, tile);
    else
        pack_w_lut16(w, w_row, n_rows, k, tile, ft_qg_kv_iq4nl, 32, sizeof(ft_block_iq4_nl), 2, NULL);
}

static void pack_w_mxfp4(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (!ft_rows16_fit(w_row))
        pack_w_lut_mxfp4(w, w_row, n_rows, k, tile);
    else
        pack_w_lut16(w, w_row, n_rows, k, tile, ft_qg_kv_mxfp4, 32, sizeof(ft_block_mxfp4), 1, ft_qg_scales_mxfp4);
}

static void pack_w_iq4_xs(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    if (!ft_rows16_fit(w_row))
        pack_w_lut_iq4_xs(w, w_row, n_rows, k, tile);
    else
        pack_w_lut16(w, w_row, n_rows, k, tile, ft_qg_kv_iq4nl, FT_QK_K, sizeof(ft_block_iq4_xs), 8,
                     ft_qg_scales_iq4_xs);
}

ENTRY(IQ4_NL, Q8_0, size_q8_0_class, pack_w_iq4_nl, pack_a_q8_0, kernel_q8_0_class)
ENTRY(MXFP4, Q8_0, size_q8_0_class, pack_w_mxfp4, pack_a_q8_0, kernel_q8_0_class)
ENTRY(IQ4_XS, Q8_K, size_q8_0_class, pack_w_iq4_xs, pack_a_iq4_xs, kernel_q8_0_class)
ENTRY_RW(Q4_0, q4_0, Q8_0, size_q8_0_class, pack_w_q4_0, pack_a_q4_0, kernel_q8_0_class)
ENTRY(Q5_0, Q8_0, size_q8_0_class, pack_w_q5_0, pack_a_q5_0, kernel_q8_0_class)
ENTRY(Q4_1, Q8_1, size_q4_1_class, pack_w_q4_1, pack_a_q4_1, kernel_q4_1_class)
ENTRY(Q5_1, Q8_1, size_q4_1_class, pack_w_q5_1, pack_a_q4_1, kernel_q4_1_class)
ENTRY(Q2_K, Q8_K, size_k16_mins, pack_w_q2_K, pack_a_k16_sum, kernel_k16_mins)
ENTRY(Q3_K, Q8_K, size_k16_offset, pack_w_q3_K, pack_a_q3_K, kernel_k16_offset)
ENTRY(Q4_K, Q8_K, size_k32_mins, pack_w_q4_K, pack_a_k32_sum, kernel_k32_mins)
ENTRY(Q5_K, Q8_K, size_k32_mins, pack_w_q5_K, pack_a_k32_sum, kernel_k32_mins)
ENTRY_RW(Q6_K, q6_K, Q8_K, size_k16_offset, pack_w_q6_K, pack_a_q6_K, kernel_q6_K_fold)

void ft_avx512_qgemm_fill(struct ft_level *l) {
    /* the avx2 entries under RW_PAIR's types: the base level's (simd/levels.c;
     * avx2_qgemm.c repacks both, and test_qgemm runs every entry of this level) */
    const struct ft_qgemm **t = l->qgemm;
    g_half[FT_TYPE_Q4_0] = t[FT_TYPE_Q4_0];
    g_half[FT_TYPE_Q6_K] = t[FT_TYPE_Q6_K];
    t[FT_TYPE_Q8_0] = &g_Q8_0;
    t[FT_TYPE_Q4_0] = &g_Q4_0;
    t[FT_TYPE_Q5_0] = &g_Q5_0;
    t[FT_TYPE_Q4_1] = &g_Q4_1;
    t[FT_TYPE_Q5_1] = &g_Q5_1;
    t[FT_TYPE_Q2_K] = &g_Q2_K;
    t[FT_TYPE_Q3_K] = &g_Q3_K;
    t[FT_TYPE_Q4_K] = &g_Q4_K;
    t[FT_TYPE_Q5_K] = &g_Q5_K;
    t[FT_TYPE_Q6_K] = &g_Q6_K;
    t[FT_TYPE_IQ4_NL] = &g_IQ4_NL;
    t[FT_TYPE_IQ4_XS] = &g_IQ4_XS;
    t[FT_TYPE_MXFP4] = &g_MXFP4;
}
