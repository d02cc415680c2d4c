/* Quantized matrix-matrix products for batches of tokens (prefill).
 *
 * out[t][r] = dot(W row r, A row t) for a weight matrix W in its GGUF type
 * and activation rows A already converted to W's vec_dot_type by that
 * type's from_float (include/ft/types.h), so the integer sums are the ones
 * the vec_dot kernels compute and the activation rounding is the one the
 * type table defines.
 *
 * The kernels work on tiles in a kernel-friendly layout, made on the fly:
 *   - pack_w unpacks up to tile_rows consecutive weight rows into a weight
 *     tile: quants as unsigned bytes, row-interleaved 4 bytes at a time (one
 *     vector = 4 consecutive elements of each of the tile's rows), with the
 *     per-sub-block scales (and mins) as floats next to them;
 *   - pack_a interleaves up to tile_tokens activation rows the same way and
 *     adds, per block, the activation scale and the per-sub-block sums of the
 *     quants that fold the weight type's offset (q - 8, q - 32, ...) or min
 *     back in;
 *   - kernel multiplies one weight tile by one activation tile with integer
 *     dot products (AVX-512 VNNI vpdpbusd, AVX2 vpmaddubsw) and writes the
 *     tile_rows x tile_tokens block of floats.
 * Unpacking costs O(rows * k) per product and is reused by every token tile,
 * so for a prompt it is a few percent of the O(rows * k * tokens) work; the
 * GGUF mapping stays the only copy of the weights and decode keeps streaming
 * it with vec_dot.
 *
 * Numerics: each output equals the reference vec_dot's (integer block sums
 * exact) up to the order and grouping of the float operations, within the
 * vec_dot tolerance of simd/kernels.h (tests/unit/test_qgemm.c).
 *
 * Tile buffers need only 4-byte alignment; 64 bytes is faster.
 */
#ifndef FT_QGEMM_H
#define FT_QGEMM_H

#include "ft/cpu.h"
#include "ft/types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ft_qgemm {
    enum ft_type type;     /* weight type */
    enum ft_type act_type; /* its vec_dot_type, what A rows are in */
    int tile_rows;         /* weight rows per weight tile */
    int tile_tokens;       /* tokens per activation tile */
    int min_tokens;        /* smallest batch for which this beats vec_dot row by row */
    /* Bytes of one weight tile / activation tile for rows of k elements
     * (k a multiple of the type's block size). */
    size_t (*w_tile_size)(int64_t k);
    size_t (*a_tile_size)(int64_t k);
    /* Rows 0..n_rows-1 (n_rows <= tile_rows) of w, w_row bytes apart, into
     * a weight tile; the missing rows are zero. */
    void (*pack_w)(const void *w, size_t w_row, int n_rows, int64_t k, void *tile);
    /* Activation rows 0..n_tok-1 (n_tok <= tile_tokens), a_row bytes apart,
     * into an activation tile; the missing tokens are zero. */
    void (*pack_a)(const void *a, size_t a_row, int n_tok, int64_t k, void *tile);
    /* out[t * ld + r] = dot(row r, token t) for r < n_rows, t < n_tok
     * (n_rows <= tile_rows, n_tok <= tile_tokens); nothing else is written. */
    void (*kernel)(const void *w_tile, const void *a_tile, int64_t k, int n_rows, int n_tok, float *out,
                   int64_t ld);
    /* Optional (NULL: none, else all four): weights repacked once at load (engine/model/repack.c)
     * into tiles of tile_rows rows that kernel_rw reads as they are, for any
     * batch from one token up: no pack_w per product. repack_w takes exactly
     * tile_rows rows, w_row bytes apart; a repacked tile is rw_tile_size(k)
     * bytes, which is tile_rows rows' bytes, so it can replace them in place.
     * kernel_rw takes any n_tok from 1 to tile_tokens, as kernel does. */
    size_t (*rw_tile_size)(int64_t k);
    void (*repack_w)(const void *w, size_t w_row, int64_t k, void *tile);
    void (*kernel_rw)(const void *rw_tile, const void *a_tile, int64_t k, int n_rows, int n_tok, float *out,
                      int64_t ld);
    /* Row r of a repacked tile back in the type's own blocks (row_size
     * bytes): the lookup of a token embedding that is also the output head. */
    void (*rw_row)(const void *rw_tile, int r, int64_t k, void *row);
    /* Optional (NULL: none, else all three; only with kernel_rw): decode of
     * one token on repacked tiles with a one-token activation tile, whose
     * layout is pack_a's with one token per tile, so the token's quants are
     * contiguous. In pack_a's tile they are 4 bytes of every 32, and a
     * single token's pass streamed tile_tokens times more activation bytes
     * through the cache than it used. pack_a1 takes one activation row;
     * a1_tile_size(k) <= a_tile_size(k). kernel_rw1 writes out[r] for
     * r < n_rows (<= tile_rows), the floats kernel_rw writes for one token. */
    size_t (*a1_tile_size)(int64_t k);
    void (*pack_a1)(const void *a, int64_t k, void *tile);
    void (*kernel_rw1)(const void *rw_tile, const void *a1_tile, int64_t k, int n_rows, float *out);
    /* Optional: a repacked tile into kernel's tile (w_tile_size bytes), for
     * batches large enough that unpacking once per product beats unpacking
     * in registers per 4 tokens (FT_RW_UNPACK_MIN_TOKENS). */
    void (*unpack_rw)(const void *rw_tile, int64_t k, void *w_tile);
    /* Optional: the GEMM for batches of at least large_min_tokens, with
     * activation tiles and a kernel of its own (the amx level's tile
     * unit), and the same floats for every (row, token) as this entry.
     * Where the weights are repacked it shares this entry's weight tiles
     * (w_tile_size, pack_w, and the repacked layout with its unpack_rw),
     * large_min_tokens >= FT_RW_UNPACK_MIN_TOKENS, so it only ever runs on
     * unpacked tiles and never on kernel_rw's path; otherwise its weight
     * tiles may be its own too (the amx Q4_K/Q5_K entries). */
    const struct ft_qgemm *large;
    int large_min_tokens;
};

/* Batches from which repacked weights with unpack_rw are unpacked into a
 * panel and go through kernel (on the 1B Q4_0 at 512 tokens kernel_rw
 * measured about 4% behind the unpacked kernel, near this host's noise). */
#define FT_RW_UNPACK_MIN_TOKENS 32

/* g, or its large entry when n_tok reaches it. */
static inline const struct ft_qgemm *ft_qgemm_for_tokens(const struct ft_qgemm *g, int64_t n_tok) {
    return g && g->large && n_tok >= g->large_min_tokens ? g->large : g;
}

/* The GEMM of the kernel level in use for weights of type t, or NULL when
 * that level has none for t (use vec_dot row by row). */
const struct ft_qgemm *ft_qgemm_get(enum ft_type t);
/* The same for a given level (tests and benchmarks compare levels). */
const struct ft_qgemm *ft_qgemm_get_isa(enum ft_type t, enum ft_isa isa);

#endif
