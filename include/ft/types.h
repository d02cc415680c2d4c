/* Tensor element types, bit-compatible with GGUF/ggml, and the per-type table
 * of row operations.
 *
 * The enum values are the on-disk type ids of GGUF (ggml_type), so a value
 * read from a file maps directly. A quantized type stores rows as a sequence
 * of fixed-size blocks of `blck_size` elements taking `type_size` bytes.
 *
 * Every type has reference (scalar, never optimized) row operations in
 * simd/quant_ref.c. ft_type_traits() returns the table in use, which the
 * speed work fills with per-ISA kernels; ft_type_traits_ref() always returns
 * the reference table, the answer the fast kernels are tested against.
 */
#ifndef FT_TYPES_H
#define FT_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ft_type {
    FT_TYPE_F32 = 0,
    FT_TYPE_F16 = 1,
    FT_TYPE_Q4_0 = 2,
    FT_TYPE_Q4_1 = 3,
    /* 4, 5: removed Q4_2/Q4_3 */
    FT_TYPE_Q5_0 = 6,
    FT_TYPE_Q5_1 = 7,
    FT_TYPE_Q8_0 = 8,
    FT_TYPE_Q8_1 = 9,
    FT_TYPE_Q2_K = 10,
    FT_TYPE_Q3_K = 11,
    FT_TYPE_Q4_K = 12,
    FT_TYPE_Q5_K = 13,
    FT_TYPE_Q6_K = 14,
    FT_TYPE_Q8_K = 15,
    FT_TYPE_IQ2_XXS = 16,
    FT_TYPE_IQ2_XS = 17,
    FT_TYPE_IQ3_XXS = 18,
    FT_TYPE_IQ1_S = 19,
    FT_TYPE_IQ4_NL = 20,
    FT_TYPE_IQ3_S = 21,
    FT_TYPE_IQ2_S = 22,
    FT_TYPE_IQ4_XS = 23,
    FT_TYPE_I8 = 24,
    FT_TYPE_I16 = 25,
    FT_TYPE_I32 = 26,
    FT_TYPE_I64 = 27,
    FT_TYPE_F64 = 28,
    FT_TYPE_IQ1_M = 29,
    FT_TYPE_BF16 = 30,
    FT_TYPE_TQ1_0 = 34,
    FT_TYPE_TQ2_0 = 35,
    FT_TYPE_MXFP4 = 39,
    FT_TYPE_COUNT = 40,
};

/* Dequantize n elements (n a multiple of blck_size). */
typedef void (*ft_to_float_fn)(const void *restrict x, float *restrict y, int64_t n);
/* Quantize n elements (n a multiple of blck_size). */
typedef void (*ft_from_float_fn)(const float *restrict x, void *restrict y, int64_t n);
/* *s = dot(x, y) over n elements; x has the row's type, y has vec_dot_type. */
typedef void (*ft_vec_dot_fn)(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);

struct ft_type_info {
    const char *name;      /* "Q4_K", as GGUF tools print it */
    int64_t blck_size;     /* elements per block */
    size_t type_size;      /* bytes per block */
    bool is_quantized;
    bool can_run;          /* FreeToken has dequant + vec_dot for it */
    ft_to_float_fn to_float;
    ft_from_float_fn from_float;    /* weights: GGUF reference quantizer */
    /* activations converted to this type before a matmul, as llama.cpp's
     * x86 CPU backend converts them: from_float, except Q8_0 and Q8_1
     * (127 / amax and ties to even; simd/quant_ref.c) */
    ft_from_float_fn from_float_act;
    enum ft_type vec_dot_type;      /* what activations are converted to */
    ft_vec_dot_fn vec_dot;
    /* the same dot for a matmul of a single activation row (decode):
     * llama.cpp runs other kernels there for F32/F16/BF16/Q4_K/Q2_K, which
     * add in another order; vec_dot for the other types */
    ft_vec_dot_fn vec_dot_gemv;
    /* llama.cpp repacks these weights (Q4_0, Q4_K, Q2_K on x86) and runs
     * activation rows through vec_dot in groups of gemm_rows, the remainder
     * through vec_dot_gemv; 0 for the others */
    int32_t gemm_rows;
    /* llama.cpp runs vec_dot only for matmuls of at least this many
     * activation rows and vec_dot_gemv for fewer (IQ4_XS: its panel GEMM
     * takes batches from 8 rows, smaller ones go through its plain dot);
     * 0 for the others, where a batch of 2 is already vec_dot's */
    int32_t gemm_min_rows;
};

/* Static facts (name, block size, type size) for every GGUF type id we know
 * of, including ones we cannot run; NULL for ids that do not exist. */
const struct ft_type_info *ft_type_info(enum ft_type t);
/* The reference table (scalar). Same as ft_type_info. */
const struct ft_type_info *ft_type_traits_ref(enum ft_type t);
/* The table in use: per-ISA kernels where available, otherwise reference.
 * The level is chosen once at start-up (include/ft/cpu.h: CPUID/HWCAP,
 * FT_ISA, ft_cpu_force_isa()). Every level's kernels accept the same
 * inputs as the reference: rows need only the natural alignment of their
 * block struct (2 bytes; 4 for F32 and Q8_K) -- no vector alignment -- and
 * a vec_dot's y must be a row made by the vec_dot_type's from_float (of any
 * level: they write identical bytes), which keeps Q8 quants in -127..127
 * and Q8_K's bsums equal to the sums of its quants. */
const struct ft_type_info *ft_type_traits(enum ft_type t);
/* Name of the kernel level ft_type_traits() uses: "scalar", "avx2",
 * "avx512", "neon", "neon-dotprod", "neon-i8mm". */
const char *ft_simd_isa_name(void);

const char *ft_type_name(enum ft_type t); /* "?" for unknown ids */
/* Bytes for a row of n elements; 0 if n is not a multiple of the block
 * size or the type is unknown. */
size_t ft_row_size(enum ft_type t, int64_t n);

/* Scalar half/bfloat conversions (bit-exact with ggml's). */
float ft_fp16_to_fp32(uint16_t h);
uint16_t ft_fp32_to_fp16(float f);
float ft_bf16_to_fp32(uint16_t h);
uint16_t ft_fp32_to_bf16(float f); /* round to nearest even, NaN kept quiet */

#endif
