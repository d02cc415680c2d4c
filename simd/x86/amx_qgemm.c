/* Quantized GEMM on AMX tiles, the amx level (built on avx512; compiled
 * with avx512's flags plus AMX-TILE and AMX-INT8, cmake/FtSimd.cmake).
 *
 * The weight tiles are avx512's (simd/x86/avx512_qgemm.c: pack_w, and the
 * repacked Q4_0/Q6_K tiles with their unpack_rw): a sub-block of G
 * elements of 16 rows is G/4 groups of 64 bytes, each 4 consecutive
 * unsigned quants of every row, which is exactly the B operand of an AMX
 * int8 product (K/4 rows of N x 4 bytes). The activation tile is
 * ft_qg_pack_a_width's layout with a group as wide as the sub-block and 16
 * tokens: a sub-block's quants of the 16 tokens are 16 rows of G bytes,
 * the A operand. So one tdpbsud (signed activations x unsigned weights)
 * makes the 16 x 16 int32 sums of a sub-block, and AVX-512 then applies
 * the scales and offsets exactly as avx512's kernel_tile does, in the same
 * order: the outputs are avx512's bit for bit.
 *
 * Against the VNNI kernel this moves the products off the vector ports:
 * per sub-block of 32 and 16 tokens it was 8 vpdpbusd per token, it is one
 * tile instruction plus a store of the 16 x 16 sums, leaving the float
 * work (convert, scale, accumulate) as the cost. Decode is unchanged: one
 * token, or batches below the entries' thresholds, take avx512's kernels,
 * whose tiles are the same.
 *
 * Linux hands out the tile state only on request (cpu_detect.c asks,
 * ft_x86_amx_permit); a thread loads a tile configuration only when it
 * differs from its current one (amx_common.h).
 */
#include "simd/level.h"
#include "simd/qgemm_pack.h"
#include "simd/x86/amx_common.h"
#include "simd/x86/qgemm_scale512.h"

#include <immintrin.h>
#include <string.h>

#define TR 16 /* weight rows per tile: the 16 int32 columns of C */
#define TT 16 /* tokens per activation tile: the 16 rows of A and C */

/* Batches below one full activation tile take avx512's kernel for the
 * unrepacked types (their floats are the same): its 8-token tiles waste
 * less on 4-15 tokens. 1.24B Q8_0, 2 threads, decode of 4 and 8 streams:
 * 44.4 and 86.4 t/s against 42.3 and 84.0 with AMX from 4 tokens. */
#define LARGE_MIN_TOKENS TT

_Thread_local int ft_amx_cfg_id;

/* Two sets of tiles, so the tile unit works on one sub-block while the
 * vector units scale the sums of the one before: set 0 is tmm0 (C, 16
 * tokens x 16 int32), tmm1 (A, 16 tokens x G bytes), tmm2 (B, G/4 groups
 * x 16 rows x 4 bytes); set 1 is tmm3..tmm5 likewise. The configuration's
 * id is G. */
static inline void configure(int G) {
    if (ft_amx_cfg_id == G)
        return;
    struct ft_amx_cfg c;
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    for (int set = 0; set < 2; set++) {
        c.rows[3 * set + 0] = TT;
        c.colsb[3 * set + 0] = 4 * TR;
        c.rows[3 * set + 1] = TT;
        c.colsb[3 * set + 1] = (uint16_t)G;
        c.rows[3 * set + 2] = (uint8_t)(G / 4);
        c.colsb[3 * set + 2] = 4 * TR;
    }
    ft_amx_load(&c, G);
}


/* The 16 x 16 int32 sums of one sub-block (A at a, B at w) into tile set
 * `set`, and out of it into memory. */
static inline void tiles_issue(int set, const uint8_t *a, const uint8_t *w, int G, const int SIGNED) {
    if (set == 0) {
        _tile_zero(0);
        _tile_loadd(1, a, G);
        _tile_loadd(2, w, 4 * TR);
        if (SIGNED)
            _tile_dpbssd(0, 1, 2);
        else
            _tile_dpbsud(0, 1, 2);
    } else {
        _tile_zero(3);
        _tile_loadd(4, a, G);
        _tile_loadd(5, w, 4 * TR);
        if (SIGNED)
            _tile_dpbssd(3, 4, 5);
        else
            _tile_dpbsud(3, 4, 5);
    }
}
static inline void tiles_store(int set, int32_t *sums) {
    if (set == 0)
        _tile_stored(0, sums, 4 * TR);
    else
        _tile_stored(3, sums, 4 * TR);
}

/* Sub-block j's sums (in memory) scaled into the accumulators, as
 * avx512's kernel_tile does; sub-blocks are numbered j = block * nsub + s
 * over the whole row. */
__attribute__((always_inline)) static inline void scale_sums(const int32_t *sums, int64_t j, const uint8_t *a,
                                                             const uint8_t *w, __m512 *facc, __m512 *part, float *facc_mem,
                                                             const int G, const int ABLK, const int MINS,
                                                             const int FOLD, const int NT) {
    const int nsub = ABLK / G;
    const int s = (int)(j % nsub);
    const uint8_t *ab = a + (size_t)(j / nsub) * ft_qg_ab_bytes_tt(G, ABLK, TT);
    const uint8_t *D = ab + ABLK * TT;
    const uint8_t *X = D + 4 * TT;
    const uint8_t *ws = w + (size_t)j * ft_qg_sb_bytes(TR, G, MINS);
    /* the sums read where the tile store left them, one token at a time */
    const __m512i *acc = (const __m512i *)(const void *)sums;
    ft_qg_scale_sub(acc, s, ws + G * TR, D, X, facc, part, facc_mem, nsub, MINS, FOLD, TR, TT, NT);
}

/* kernel_tile of avx512_qgemm.c with the integer sums from the tile unit;
 * NT (8 or 16) tokens are scaled, the rest of the tile is zero padding.
 * A software pipeline: while the tile unit computes sub-block j + 1, the
 * vector units scale sub-block j - 1, whose sums were stored an iteration
 * earlier (scaling the sums just stored waited for the store, and the
 * tile unit and the vector units took turns). */
__attribute__((always_inline)) static inline void amx_tile(const uint8_t *restrict w, const uint8_t *restrict a,
                                                           int64_t k, int n_rows, int n_tok, float *restrict out,
                                                           int64_t ld, const int G, const int ABLK, const int MINS,
                                                           const int FOLD, const int SIGNED,
                                                           const int NT) {
    configure(G);
    const int nsub = ABLK / G;
    const size_t sb_bytes = ft_qg_sb_bytes(TR, G, MINS);
    const size_t ab_bytes = ft_qg_ab_bytes_tt(G, ABLK, TT);
    const int64_t nsb = k / G;
    int32_t sums[2][TT * TR] __attribute__((aligned(64)));
    __m512 facc[TT], part[TT];
    /* blocks of several sub-blocks: the block sums in memory (scale_sub) */
    float facc_buf[TT * TR] __attribute__((aligned(64)));
    float *facc_mem = nsub > 1 && !FOLD && NT > 8 ? facc_buf : NULL;
    FT_UNROLL(16) for (int t = 0; t < NT; t++) {
        facc[t] = part[t] = _mm512_setzero_ps();
        if (facc_mem)
            _mm512_store_ps(facc_mem + 16 * t, facc[t]);
    }
    tiles_issue(0, a, w, G, SIGNED);
    for (int64_t j = 0; j < nsb; j++) {
        const int set = (int)(j & 1);
        tiles_store(set, sums[set]);
        if (j + 1 < nsb) {
            const int64_t b1 = (j + 1) / nsub, s1 = (j + 1) % nsub;
            tiles_issue(set ^ 1, a + (size_t)b1 * ab_bytes + (size_t)s1 * TT * G, w + (size_t)(j + 1) * sb_bytes, G, SIGNED);
        }
        if (j > 0)
            scale_sums(sums[set ^ 1], j - 1, a, w, facc, part, facc_mem, G, ABLK, MINS, FOLD, NT);
    }
    scale_sums(sums[(nsb - 1) & 1], nsb - 1, a, w, facc, part, facc_mem, G, ABLK, MINS, FOLD, NT);
    const __mmask16 rows = (__mmask16)((1u << n_rows) - 1u);
    FT_UNROLL(16) for (int t = 0; t < NT; t++)
        if (t < n_tok)
            _mm512_mask_storeu_ps(out + t * ld, rows, facc_mem ? _mm512_load_ps(facc_mem + 16 * t) : facc[t]);
}

/* SIGNED: the weight tiles hold the signed quants (below), the product is
 * signed x signed and there is no X to add; the integer sums are the same
 * as avx512's (X + dot). */
#define KERNEL(name, G, ABLK, MINS, FOLD, SIGNED)                                                      \
    static void name(const void *w, const void *a, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) { \
        if (n_tok <= 8)                                                                                        \
            amx_tile(w, a, k, n_rows, n_tok, out, ld, G, ABLK, MINS, FOLD, SIGNED, 8);                       \
        else                                                                                                   \
            amx_tile(w, a, k, n_rows, n_tok, out, ld, G, ABLK, MINS, FOLD, SIGNED, TT);                      \
    }
KERNEL(kernel_q8_0_class, 32, 32, 0, 0, 1)  /* Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4, IQ4_XS (signed tiles) */
KERNEL(kernel_q4_1_class, 32, 32, 1, 0, 0)  /* Q4_1, Q5_1 */
KERNEL(kernel_k32_mins, 32, 256, 1, 0, 0)   /* Q4_K, Q5_K */
KERNEL(kernel_k16_offset, 16, 256, 0, 0, 1) /* Q3_K (signed tiles) */
KERNEL(kernel_q6_K_fold, 16, 256, 0, 1, 1)  /* Q6_K (signed tiles; avx512 unpacks its repacked tiles with the scales folded) */

/* Signed weight tiles: avx512 stores the quants of the types with an
 * offset (Q8_0 q + 128, Q4_0 q + 8 as the file has it, ...) as unsigned
 * bytes because vpdpbusd multiplies unsigned by signed, and folds the
 * offset back in through the activations' X; the tile unit multiplies
 * signed by signed, so this level's tiles are avx512's with the offset
 * taken off the quants, which saves the vector units the X additions. */
static void (*g_base_pack_w[FT_TYPE_COUNT])(const void *, size_t, int, int64_t, void *);
static void (*g_base_unpack_rw[FT_TYPE_COUNT])(const void *, int64_t, void *);

static void unoffset(void *tile, int64_t k, int G, int off) {
    const size_t sb = ft_qg_sb_bytes(TR, G, 0), q = (size_t)G * TR;
    const __m512i o = _mm512_set1_epi8((char)off);
    for (uint8_t *p = tile, *end = p + (size_t)(k / G) * sb; p < end; p += sb)
        for (size_t i = 0; i < q; i += 64)
            _mm512_storeu_si512(p + i, _mm512_sub_epi8(_mm512_loadu_si512(p + i), o));
}

#define SIGNED_TILES(T, G, OFF)                                                                              \
    static void pack_w_signed_##T(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {        \
        g_base_pack_w[FT_TYPE_##T](w, w_row, n_rows, k, tile);                                              \
        unoffset(tile, k, G, OFF);                                                                          \
    }                                                                                                       \
    static void unpack_rw_signed_##T(const void *rw, int64_t k, void *tile) {                              \
        g_base_unpack_rw[FT_TYPE_##T](rw, k, tile);                                                         \
        unoffset(tile, k, G, OFF);                                                                          \
    }
SIGNED_TILES(Q8_0, 32, 128)
SIGNED_TILES(Q4_0, 32, 8)
SIGNED_TILES(Q5_0, 32, 16)
SIGNED_TILES(Q3_K, 16, 4)
SIGNED_TILES(Q6_K, 16, 32)
SIGNED_TILES(IQ4_NL, 32, 128) /* table values XOR 0x80 (qgemm_pack.h) */
SIGNED_TILES(MXFP4, 32, 128)
SIGNED_TILES(IQ4_XS, 32, 128)

/* Activation tiles: a group is a whole sub-block, 16 tokens; the X and D
 * values as avx512 makes them. */
#define PACK_A(name, ACT, G, ABLK, XMODE, OFF)                                                 \
    static void name(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) {        \
        ft_qg_pack_a_width(a, a_row, n_tok, k, tile, ACT, G, XMODE, OFF, G, TT);             \
    }                                                                                          \
    static size_t name##_size(int64_t k) { return (size_t)(k / ABLK) * ft_qg_ab_bytes_tt(G, ABLK, TT); }
PACK_A(pack_a_q8_0, FT_TYPE_Q8_0, 32, 32, FT_QG_X_OFFSET, 128)
PACK_A(pack_a_q4_0, FT_TYPE_Q8_0, 32, 32, FT_QG_X_OFFSET, 8)
PACK_A(pack_a_q5_0, FT_TYPE_Q8_0, 32, 32, FT_QG_X_OFFSET, 16)
PACK_A(pack_a_q4_1, FT_TYPE_Q8_1, 32, 32, FT_QG_X_S, 0)
PACK_A(pack_a_k32_sum, FT_TYPE_Q8_K, 32, 256, FT_QG_X_SUM, 0)
PACK_A(pack_a_q3_K, FT_TYPE_Q8_K, 16, 256, FT_QG_X_OFFSET, 4)
PACK_A(pack_a_q6_K, FT_TYPE_Q8_K, 16, 256, FT_QG_X_OFFSET, 32)
/* IQ4_XS: Q8_K rows in 32-element blocks, for Q8_0's kernel (qgemm_pack.h) */
static void pack_a_iq4_xs(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) {
    ft_qg_pack_a_q8_K_32(a, a_row, n_tok, k, tile, 128, 32, TT);
}
static size_t pack_a_iq4_xs_size(int64_t k) { return ft_qg_a_tile_bytes_q8_K_32(k, TT); }

/* ---- the table ------------------------------------------------------------------------ */

/* This level's entries: avx512's with the AMX activation tiles and kernel
 * (g_amx), under avx512's entry as it is for smaller batches (g_small: for
 * repacked types below FT_RW_UNPACK_MIN_TOKENS, because kernel_rw reads
 * avx512's activation tiles; for the others below LARGE_MIN_TOKENS). */
static struct ft_qgemm g_amx[FT_TYPE_COUNT], g_small[FT_TYPE_COUNT];

typedef void (*pack_a_fn)(const void *, size_t, int, int64_t, void *);
typedef void (*pack_w_fn)(const void *, size_t, int, int64_t, void *);
typedef void (*unpack_rw_fn)(const void *, int64_t, void *);
typedef size_t (*size_fn)(int64_t);
typedef void (*kernel_fn)(const void *, const void *, int64_t, int, int, float *, int64_t);

/* pack_w, unpack_rw: the signed tiles' (NULL: avx512's as they are). */
static void set(struct ft_level *l, enum ft_type t, pack_a_fn pack_a, size_fn a_size, kernel_fn kernel,
                pack_w_fn pack_w, unpack_rw_fn unpack_rw) {
    const struct ft_qgemm *base = l->qgemm[t];
    if (!base || base->type != t || base->w_tile_size == NULL)
        return;
    g_amx[t] = *base;
    if (pack_w) {
        g_base_pack_w[t] = base->pack_w;
        g_base_unpack_rw[t] = base->unpack_rw;
        g_amx[t].pack_w = pack_w;
        g_amx[t].unpack_rw = base->unpack_rw ? unpack_rw : NULL;
    }
    g_amx[t].tile_tokens = TT;
    g_amx[t].a_tile_size = a_size;
    g_amx[t].pack_a = pack_a;
    g_amx[t].kernel = kernel;
    g_small[t] = *base;
    g_small[t].large = &g_amx[t];
    g_small[t].large_min_tokens = base->kernel_rw ? FT_RW_UNPACK_MIN_TOKENS : LARGE_MIN_TOKENS;
    g_amx[t].min_tokens = g_small[t].large_min_tokens;
    l->qgemm[t] = &g_small[t];
}

void ft_amx_qgemm_fill(struct ft_level *l) {
    set(l, FT_TYPE_Q8_0, pack_a_q8_0, pack_a_q8_0_size, kernel_q8_0_class, pack_w_signed_Q8_0, unpack_rw_signed_Q8_0);
    set(l, FT_TYPE_Q4_0, pack_a_q4_0, pack_a_q4_0_size, kernel_q8_0_class, pack_w_signed_Q4_0, unpack_rw_signed_Q4_0);
    set(l, FT_TYPE_Q5_0, pack_a_q5_0, pack_a_q5_0_size, kernel_q8_0_class, pack_w_signed_Q5_0, unpack_rw_signed_Q5_0);
    set(l, FT_TYPE_Q4_1, pack_a_q4_1, pack_a_q4_1_size, kernel_q4_1_class, NULL, NULL);
    set(l, FT_TYPE_Q5_1, pack_a_q4_1, pack_a_q4_1_size, kernel_q4_1_class, NULL, NULL);
    set(l, FT_TYPE_Q3_K, pack_a_q3_K, pack_a_q3_K_size, kernel_k16_offset, pack_w_signed_Q3_K, unpack_rw_signed_Q3_K);
    set(l, FT_TYPE_Q4_K, pack_a_k32_sum, pack_a_k32_sum_size, kernel_k32_mins, NULL, NULL);
    set(l, FT_TYPE_Q5_K, pack_a_k32_sum, pack_a_k32_sum_size, kernel_k32_mins, NULL, NULL);
    set(l, FT_TYPE_Q6_K, pack_a_q6_K, pack_a_q6_K_size, kernel_q6_K_fold, pack_w_signed_Q6_K, unpack_rw_signed_Q6_K);
    set(l, FT_TYPE_IQ4_NL, pack_a_q8_0, pack_a_q8_0_size, kernel_q8_0_class, pack_w_signed_IQ4_NL, unpack_rw_signed_IQ4_NL);
    set(l, FT_TYPE_MXFP4, pack_a_q8_0, pack_a_q8_0_size, kernel_q8_0_class, pack_w_signed_MXFP4, unpack_rw_signed_MXFP4);
    set(l, FT_TYPE_IQ4_XS, pack_a_iq4_xs, pack_a_iq4_xs_size, kernel_q8_0_class, pack_w_signed_IQ4_XS, unpack_rw_signed_IQ4_XS);
    /* Q2_K keeps avx512's kernel: its 16-element sub-blocks with scales
     * and mins leave the tiles' sums to float work that costs as much as
     * the products (1.24B Q2_K pp512, 2 threads: 304 t/s on the tiles,
     * 313 on avx512's kernel).
     * Q4_K, Q5_K: the kernel with the scales in the integers and the
     * one-row dot in its order instead (amx_qgemm_k4.c) */
    ft_amx_k4_fill(l);
}
