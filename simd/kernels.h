/* The per-ISA kernel files (simd/x86/, simd/arm/) and what they
 * share. Internal to simd/: other layers reach the kernels through the type
 * table (ft_type_traits(), include/ft/types.h).
 *
 * Each kernel file exports one fill function (simd/level.h) that overwrites,
 * in its level's tables, the slots it has faster versions of; simd/levels.c
 * calls it once, and only when ft_isa_supported() says the CPU can run that
 * level.
 *
 * The contract every kernel keeps (tested by tests/unit/test_simd_kernels.c):
 *   from_float: the SAME bytes as the reference quantizer for finite input
 *               (activations quantized by any level are interchangeable);
 *   to_float:   the same floats as the reference;
 *   vec_dot:    integer sums exact; only the order of float accumulation
 *               differs, so |fast - ref| is a few ulps of sum |x_i y_i|.
 * No kernel needs vector-aligned pointers (blocks are 18, 34, 210... bytes);
 * rows need the natural alignment of their block struct (2 bytes, 4 for
 * F32/Q8_K). Activations are trusted to come from our quantizers: Q8 quants
 * in -127..127 (the AVX2 sign trick cannot negate -128) and Q8_K bsums
 * consistent with the quants (Q3_K/Q6_K kernels fold their offsets into
 * them). Weights may hold any bytes.
 */
#ifndef FT_SIMD_KERNELS_H
#define FT_SIMD_KERNELS_H

#include "ft/types.h"

#include <stdint.h>
#include <string.h>

/* Software prefetch distance for the weight rows, in bytes. Decode streams
 * each weight matrix once from DRAM; the hardware prefetcher alone left a
 * single core at about half of its streaming bandwidth (8 vs 13 GB/s for
 * Q4_K on a Xeon), prefetching ahead recovered it. 2 KiB against 4: 1.24B
 * decode, 2 threads, Xeon with AMX: Q8_0 19.7 vs 17.4 t/s, Q4_K_M 34.1 vs
 * 32.5 (amx level), 31.3 vs 29.4 (avx2); Q4_0 equal (amx), 36.6 vs 34.7
 * (avx2); 1 KiB lost Q4_K_M, 3 KiB was 2's within noise. Rows of a matrix
 * are contiguous, so running past the end of a row fetches the next one
 * (prefetches never fault). */
#define FT_PREFETCH_DIST 2048

/* Before a loop over a kernel's accumulators (arrays of vectors): GCC then
 * unrolls it early and keeps the arrays in registers; left to its late
 * unroller they stay arrays in memory, loaded and stored around every
 * block (the amx Q8_0 GEMM kernel, one thread: 338 -> 411 GMAC/s). */
#define FT_PRAGMA(x) _Pragma(#x)
#define FT_UNROLL(n) FT_PRAGMA(GCC unroll n)

/* An empty asm that "changes" a vector accumulator: GCC otherwise
 * reassociates a block's integer sums into a tree, computes every product
 * first and spills them (avx2 GEMM, one thread, GMAC/s: Q8_0 51 -> 56-58,
 * Q4_0 76-79 -> 80-84). */
#if defined(__x86_64__) || defined(__i386__)
#define FT_KEEP_ORDER(v) __asm__("" : "+x"(v))
#else
#define FT_KEEP_ORDER(v) __asm__("" : "+w"(v))
#endif

/* Unpacked sub-block scales of a K-quant block, 16 bytes as four
 * little-endian 32-bit words. Kernels turn them into a vector with
 * _mm_setr_epi32 / vcombine_u8: writing a byte array and reloading it as a
 * vector stalls store forwarding in every block (it halved Q3_K's speed). */
struct ft_scales16 {
    uint32_t w[4];
};

static inline uint8_t ft_scales16_byte(struct ft_scales16 s, int i) { return (uint8_t)(s.w[i / 4] >> (8 * (i % 4))); }

/* Q4_K/Q5_K: the eight 6-bit scales (bytes 0..7) and mins (bytes 8..15)
 * from the 12 packed bytes (layout in quant_ref.h), four 32-bit operations
 * per word instead of a byte loop. */
static inline struct ft_scales16 ft_k4_scales(const uint8_t *restrict packed) {
    uint32_t a[3];
    memcpy(a, packed, 12);
    struct ft_scales16 s;
    s.w[0] = a[0] & 0x3f3f3f3fu;                                               /* sc 0..3 */
    s.w[1] = (a[2] & 0x0f0f0f0fu) | (((a[0] >> 6) & 0x03030303u) << 4);        /* sc 4..7 */
    s.w[2] = a[1] & 0x3f3f3f3fu;                                               /* mn 0..3 */
    s.w[3] = ((a[2] >> 4) & 0x0f0f0f0fu) | (((a[1] >> 6) & 0x03030303u) << 4); /* mn 4..7 */
    return s;
}

/* Q3_K: the sixteen 6-bit scales, still biased by +32 (0..63). */
static inline struct ft_scales16 ft_q3k_scales(const uint8_t *restrict packed) {
    uint32_t a[3];
    memcpy(a, packed, 12);
    struct ft_scales16 s;
    s.w[0] = (a[0] & 0x0f0f0f0fu) | ((a[2] & 0x03030303u) << 4);
    s.w[1] = (a[1] & 0x0f0f0f0fu) | (((a[2] >> 2) & 0x03030303u) << 4);
    s.w[2] = ((a[0] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 4) & 0x03030303u) << 4);
    s.w[3] = ((a[1] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 6) & 0x03030303u) << 4);
    return s;
}

#endif
