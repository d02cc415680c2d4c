/* Block layouts of the GGUF quantization types and the scalar reference row
 * operations on them (simd/quant_ref.c). Internal to simd/: other layers use
 * the per-type table of include/ft/types.h.
 *
 * Every layout below is the on-disk format of ggml (ggml-common.h), so a
 * tensor read from a GGUF file is an array of these structs. All multi-byte
 * fields are little-endian; `half` fields are IEEE binary16 bit patterns
 * (simd/fp16.h). A row of n elements is n / QK consecutive blocks.
 *
 * Notation in the layout comments: q[i] is the i-th quant of the block in
 * element order (the dequantized value of element i is built from q[i]).
 */
#ifndef FT_SIMD_QUANT_REF_H
#define FT_SIMD_QUANT_REF_H

#include <stdint.h>
#include <string.h>

#define FT_QK4_0 32
#define FT_QK4_1 32
#define FT_QK5_0 32
#define FT_QK5_1 32
#define FT_QK8_0 32
#define FT_QK8_1 32
#define FT_QK_K 256
#define FT_K_SCALE_SIZE 12

/* ---- 32-element blocks --------------------------------------------------- */

/* Q4_0, 18 bytes: x[i] = d * (q[i] - 8), q in 0..15.
 *   0  half d
 *   2  qs[16]: byte j holds q[j] in the low nibble, q[j+16] in the high one */
typedef struct {
    uint16_t d;
    uint8_t qs[FT_QK4_0 / 2];
} ft_block_q4_0;
_Static_assert(sizeof(ft_block_q4_0) == 18, "block_q4_0 is 18 bytes");

/* Q4_1, 20 bytes: x[i] = d * q[i] + m, q in 0..15.
 *   0  half d
 *   2  half m
 *   4  qs[16]: as Q4_0 */
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qs[FT_QK4_1 / 2];
} ft_block_q4_1;
_Static_assert(sizeof(ft_block_q4_1) == 20, "block_q4_1 is 20 bytes");

/* Q5_0, 22 bytes: x[i] = d * (q[i] - 16), q in 0..31.
 *   0  half d
 *   2  qh[4]: little-endian u32, bit i = bit 4 of q[i]
 *   6  qs[16]: low 4 bits, laid out as Q4_0 */
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[FT_QK5_0 / 2];
} ft_block_q5_0;
_Static_assert(sizeof(ft_block_q5_0) == 22, "block_q5_0 is 22 bytes");

/* Q5_1, 24 bytes: x[i] = d * q[i] + m, q in 0..31.
 *   0  half d
 *   2  half m
 *   4  qh[4]: as Q5_0
 *   8  qs[16]: as Q5_0 */
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[FT_QK5_1 / 2];
} ft_block_q5_1;
_Static_assert(sizeof(ft_block_q5_1) == 24, "block_q5_1 is 24 bytes");

/* Q8_0, 34 bytes: x[i] = d * q[i], q in -127..127 (weights and activations).
 *   0  half d
 *   2  int8 qs[32] */
typedef struct {
    uint16_t d;
    int8_t qs[FT_QK8_0];
} ft_block_q8_0;
_Static_assert(sizeof(ft_block_q8_0) == 34, "block_q8_0 is 34 bytes");

/* Q8_1, 36 bytes, activations for Q4_1/Q5_1: x[i] = d * q[i].
 *   0  half d
 *   2  half s = d * sum(q), so the weights' offset m costs one product
 *   4  int8 qs[32] */
typedef struct {
    uint16_t d;
    uint16_t s;
    int8_t qs[FT_QK8_1];
} ft_block_q8_1;
_Static_assert(sizeof(ft_block_q8_1) == 36, "block_q8_1 is 36 bytes");

/* ---- 256-element super-blocks (K-quants) ---------------------------------
 * A super-block holds 16 sub-blocks of 16 or 8 sub-blocks of 32 elements,
 * each with its own small integer scale (and min), themselves scaled by the
 * half-precision super-block d (and dmin). */

/* Q2_K, 84 bytes: 16 sub-blocks of 16; x[i] = d*sc[s]*q[i] - dmin*mn[s],
 * q in 0..3, s = i / 16.
 *   0  scales[16]: low nibble sc[s], high nibble mn[s]
 *  16  qs[64]: two 128-element halves of 32 bytes; in half h, byte l holds
 *      q[128h + l + 32k] in bits 2k..2k+1, k = 0..3
 *  80  half d
 *  82  half dmin */
typedef struct {
    uint8_t scales[FT_QK_K / 16];
    uint8_t qs[FT_QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} ft_block_q2_K;
_Static_assert(sizeof(ft_block_q2_K) == 84, "block_q2_K is 84 bytes");

/* Q3_K, 110 bytes: 16 sub-blocks of 16; x[i] = d * (sc[s] - 32) * q[i],
 * q in -4..3 stored as 2 low bits plus a high bit that is SET for q >= 0.
 *   0  hmask[32]: bit k of byte l is the high bit of q[32k + l]
 *  32  qs[64]: low 2 bits, laid out as Q2_K
 *  96  scales[12]: sixteen 6-bit sc[s]: bytes 0..7 hold the low nibbles
 *      (byte j: sc[j] low, sc[j+8] high), bytes 8..11 the top 2 bits
 *      (byte 8 + s%4, bits 2*(s/4)..)
 * 108  half d */
typedef struct {
    uint8_t hmask[FT_QK_K / 8];
    uint8_t qs[FT_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} ft_block_q3_K;
_Static_assert(sizeof(ft_block_q3_K) == 110, "block_q3_K is 110 bytes");

/* Q4_K, 144 bytes: 8 sub-blocks of 32; x[i] = d*sc[s]*q[i] - dmin*mn[s],
 * q in 0..15, s = i / 32.
 *   0  half d
 *   2  half dmin
 *   4  scales[12]: eight 6-bit sc and eight 6-bit mn:
 *        s < 4: sc[s] = b[s] & 63,  mn[s] = b[s+4] & 63
 *        s >= 4: sc[s] = (b[s+4] & 15) | (b[s-4] >> 6) << 4,
 *                mn[s] = (b[s+4] >> 4) | (b[s] >> 6) << 4
 *  16  qs[128]: four 64-element chunks of 32 bytes; in chunk c, byte l
 *      holds q[64c + l] low and q[64c + 32 + l] high */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[FT_K_SCALE_SIZE];
    uint8_t qs[FT_QK_K / 2];
} ft_block_q4_K;
_Static_assert(sizeof(ft_block_q4_K) == 144, "block_q4_K is 144 bytes");

/* Q5_K, 176 bytes: as Q4_K with q in 0..31.
 *   0  half d
 *   2  half dmin
 *   4  scales[12]: as Q4_K
 *  16  qh[32]: bit k of byte l is bit 4 of q[32k + l]
 *  48  qs[128]: low 4 bits, laid out as Q4_K */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[FT_K_SCALE_SIZE];
    uint8_t qh[FT_QK_K / 8];
    uint8_t qs[FT_QK_K / 2];
} ft_block_q5_K;
_Static_assert(sizeof(ft_block_q5_K) == 176, "block_q5_K is 176 bytes");

/* Q6_K, 210 bytes: 16 sub-blocks of 16; x[i] = d * sc[s] * (q[i] - 32),
 * q in 0..63.
 *   0  ql[128]: low 4 bits; two 128-element halves of 64 bytes; in half h,
 *      byte l (l < 32) holds q[128h + l] low and q[128h + 64 + l] high,
 *      byte 32 + l holds q[128h + 32 + l] low and q[128h + 96 + l] high
 * 128  qh[64]: top 2 bits; in half h, byte l holds q[128h + l + 32k] in
 *      bits 2k..2k+1, k = 0..3
 * 192  int8 scales[16]
 * 208  half d */
typedef struct {
    uint8_t ql[FT_QK_K / 2];
    uint8_t qh[FT_QK_K / 4];
    int8_t scales[FT_QK_K / 16];
    uint16_t d;
} ft_block_q6_K;
_Static_assert(sizeof(ft_block_q6_K) == 210, "block_q6_K is 210 bytes");

/* Q8_K, 292 bytes, activations for the K-quants: x[i] = d * q[i].
 *   0  float d (full precision: it multiplies sums of 256 products)
 *   4  int8 qs[256]
 * 260  int16 bsums[16]: sum of q over each group of 16, so the K-quants'
 *      mins cost 16 products instead of 256 */
typedef struct {
    float d;
    int8_t qs[FT_QK_K];
    int16_t bsums[FT_QK_K / 16];
} ft_block_q8_K;
_Static_assert(sizeof(ft_block_q8_K) == 292, "block_q8_K is 292 bytes");

/* ---- 4-bit lookup formats --------------------------------------------------
 * Each 4-bit index picks a value from a fixed table of 16 small integers
 * instead of standing for itself, so the integer dot against 8-bit
 * activations stays exact: x = scale * table[q]. */

/* IQ4_NL and IQ4_XS: ggml's kvalues_iq4nl, a non-uniform grid denser near 0. */
#define FT_KVALUES_IQ4NL {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
/* MXFP4: the FP4 (E2M1) values doubled (ggml's kvalues_mxfp4), so they are
 * integers; the scale is halved to match (ft_e8m0_to_fp32_half). */
#define FT_KVALUES_MXFP4 {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

#define FT_QK4_NL 32
#define FT_QK_MXFP4 32

/* IQ4_NL, 18 bytes: x[i] = d * kvalues_iq4nl[q[i]], q in 0..15.
 *   0  half d
 *   2  qs[16]: as Q4_0 (byte j: q[j] low nibble, q[j+16] high) */
typedef struct {
    uint16_t d;
    uint8_t qs[FT_QK4_NL / 2];
} ft_block_iq4_nl;
_Static_assert(sizeof(ft_block_iq4_nl) == 18, "block_iq4_nl is 18 bytes");

/* IQ4_XS, 136 bytes: 8 sub-blocks of 32; x[i] = d * (ls[s] - 32) *
 * kvalues_iq4nl[q[i]], s = i / 32, ls a 6-bit scale.
 *   0  half d
 *   2  u16 scales_h: bits 2s..2s+1 are the top 2 bits of ls[s]
 *   4  scales_l[4]: byte s/2 holds the low 4 bits of ls[s] (low nibble for
 *      even s, high for odd)
 *   8  qs[128]: per sub-block 16 bytes laid out as Q4_0's */
typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[FT_QK_K / 64];
    uint8_t qs[FT_QK_K / 2];
} ft_block_iq4_xs;
_Static_assert(sizeof(ft_block_iq4_xs) == 136, "block_iq4_xs is 136 bytes");

/* MXFP4 (OCP microscaling FP4), 17 bytes: x[i] = 2^(e - 128) *
 * kvalues_mxfp4[q[i]] (the table holds the E2M1 values doubled).
 *   0  u8 e: E8M0 exponent, biased by 127
 *   1  qs[16]: as Q4_0 */
typedef struct {
    uint8_t e;
    uint8_t qs[FT_QK_MXFP4 / 2];
} ft_block_mxfp4;
_Static_assert(sizeof(ft_block_mxfp4) == 17, "block_mxfp4 is 17 bytes");

/* 2^(e - 128) as ggml's ggml_e8m0_to_fp32_half: e = 0 and 1 are the
 * subnormals 2^-128 and 2^-127. */
static inline float ft_e8m0_to_fp32_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* IQ4_XS's 6-bit scale of sub-block s (0..63; the weight uses ls - 32). */
static inline int ft_iq4_xs_scale(const ft_block_iq4_xs *b, int s) {
    return ((b->scales_l[s / 2] >> (4 * (s % 2))) & 0xf) | (((b->scales_h >> (2 * s)) & 3) << 4);
}

/* ---- reference row operations --------------------------------------------
 * Signatures match ft_to_float_fn / ft_from_float_fn / ft_vec_dot_fn so they
 * sit in the type table directly. n is a multiple of the block size.
 *
 * quantize_row_*_ref: ggml's quantize_row_*_ref, byte for byte (what
 *   llama-quantize writes without an importance matrix).
 * dequantize_row_*_ref: ggml's dequantize_row_*, float for float.
 * vec_dot_*_ref: the integer sums and float accumulation order of ggml's
 *   scalar (generic) dot products, so results match them bit for bit. */

void ft_dequantize_row_f32_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_quantize_row_f32_ref(const float *restrict x, void *restrict y, int64_t n);

void ft_dequantize_row_q4_0_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_q4_1_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_q5_0_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_q5_1_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_q8_0_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_q8_1_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_q2_K_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_q3_K_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_q4_K_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_q5_K_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_q6_K_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_q8_K_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_iq4_nl_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_iq4_xs_ref(const void *restrict x, float *restrict y, int64_t n);
void ft_dequantize_row_mxfp4_ref(const void *restrict x, float *restrict y, int64_t n);

void ft_quantize_row_q4_0_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_q4_1_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_q5_0_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_q5_1_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_q8_0_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_q8_1_ref(const float *restrict x, void *restrict y, int64_t n);
/* Q8_0 / Q8_1 for activations: as llama.cpp's x86 backend (127 / amax,
 * ties to even); the functions above are the weight (GGUF) quantizers. */
void ft_quantize_row_q8_0_act_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_q8_1_act_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_q2_K_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_q3_K_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_q4_K_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_q5_K_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_q6_K_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_q8_K_ref(const float *restrict x, void *restrict y, int64_t n);
/* IQ4_NL / IQ4_XS: ggml's quantize_iq4_nl / quantize_iq4_xs without an
 * importance matrix (what llama-quantize calls: the +-7 scale search), not
 * quantize_row_iq4_nl_ref (no search). MXFP4: quantize_row_mxfp4_ref. */
void ft_quantize_row_iq4_nl_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_iq4_xs_ref(const float *restrict x, void *restrict y, int64_t n);
void ft_quantize_row_mxfp4_ref(const float *restrict x, void *restrict y, int64_t n);

void ft_vec_dot_f32_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_f16_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_bf16_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_q4_0_q8_0_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_q4_1_q8_1_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_q5_0_q8_0_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_q5_1_q8_1_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_q8_0_q8_0_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_q2_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_q3_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_q4_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_q5_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_q6_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_iq4_nl_q8_0_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_iq4_xs_q8_K_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_mxfp4_q8_0_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);

/* The single-row (decode) dots where llama.cpp's kernel adds in another
 * order than for a batch (ggml_vec_dot_f32/f16/bf16, repack GEMV). */
void ft_vec_dot_f32_gemv_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_f16_gemv_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_bf16_gemv_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_q2_K_q8_K_gemv_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_q4_K_q8_K_gemv_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void ft_vec_dot_iq4_xs_q8_K_gemv_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);

#endif
