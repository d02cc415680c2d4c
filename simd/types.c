/* The per-type table: static facts for every GGUF type id, and the
 * reference row operations (simd/quant_ref.c) for the types FreeToken runs.
 * Block and type sizes are those of ggml; they define the on-disk format.
 * vec_dot_type pairs each weight type with the activation format ggml uses
 * for it, so our quantized matmuls round activations as llama.cpp does.
 *
 * Each kernel level (simd/level.h) holds a copy of this table in which its
 * kernel files have replaced the slots they have faster versions of;
 * ft_type_traits() returns the one of the level in use (simd/levels.c). */
#include "ft/cpu.h"
#include "ft/types.h"

#include "fp16.h"
#include "kernels.h"
#include "quant_ref.h"

#include <stdbool.h>
#include <stddef.h>

/* A type we only know the size of. */
#define T(id, nm, bs, ts, q) [id] = {.name = nm, .blck_size = bs, .type_size = ts, .is_quantized = q}
/* A weight type we run: dequantize, quantize (weights; activations through
 * fromf_act), and dot against vdt. */
#define RA(id, nm, bs, ts, q, tof, fromf, fromf_act, vdt, dot, dot1, gemm)                               \
    [id] = {.name = nm, .blck_size = bs, .type_size = ts, .is_quantized = q, .can_run = true,            \
            .to_float = tof, .from_float = fromf, .from_float_act = fromf_act, .vec_dot_type = vdt,      \
            .vec_dot = dot, .vec_dot_gemv = dot1, .gemm_rows = gemm}
#define R(id, nm, bs, ts, q, tof, fromf, vdt, dot) RA(id, nm, bs, ts, q, tof, fromf, fromf, vdt, dot, dot, 0)
/* ... with a single-row dot of its own (types.h: vec_dot_gemv, gemm_rows) */
#define R1(id, nm, bs, ts, q, tof, fromf, vdt, dot, dot1, gemm)                                          \
    RA(id, nm, bs, ts, q, tof, fromf, fromf, vdt, dot, dot1, gemm)
/* An activation-only type (Q8_1, Q8_K): converts both ways, no dot of its own. */
#define A(id, nm, bs, ts, tof, fromf, fromf_act)                                                         \
    [id] = {.name = nm, .blck_size = bs, .type_size = ts, .is_quantized = true, .to_float = tof,         \
            .from_float = fromf, .from_float_act = fromf_act, .vec_dot_type = id}

static const struct ft_type_info g_info[FT_TYPE_COUNT] = {
    R1(FT_TYPE_F32, "F32", 1, 4, false, ft_dequantize_row_f32_ref, ft_quantize_row_f32_ref, FT_TYPE_F32,
       ft_vec_dot_f32_ref, ft_vec_dot_f32_gemv_ref, 0),
    R1(FT_TYPE_F16, "F16", 1, 2, false, ft_fp16_to_fp32_row, ft_fp32_to_fp16_row, FT_TYPE_F16,
       ft_vec_dot_f16_ref, ft_vec_dot_f16_gemv_ref, 0),
    R1(FT_TYPE_Q4_0, "Q4_0", 32, 18, true, ft_dequantize_row_q4_0_ref, ft_quantize_row_q4_0_ref, FT_TYPE_Q8_0,
       ft_vec_dot_q4_0_q8_0_ref, ft_vec_dot_q4_0_q8_0_ref, 4), /* GEMM and GEMV add alike */
    R(FT_TYPE_Q4_1, "Q4_1", 32, 20, true,
      ft_dequantize_row_q4_1_ref, ft_quantize_row_q4_1_ref, FT_TYPE_Q8_1, ft_vec_dot_q4_1_q8_1_ref),
    R(FT_TYPE_Q5_0, "Q5_0", 32, 22, true,
      ft_dequantize_row_q5_0_ref, ft_quantize_row_q5_0_ref, FT_TYPE_Q8_0, ft_vec_dot_q5_0_q8_0_ref),
    R(FT_TYPE_Q5_1, "Q5_1", 32, 24, true,
      ft_dequantize_row_q5_1_ref, ft_quantize_row_q5_1_ref, FT_TYPE_Q8_1, ft_vec_dot_q5_1_q8_1_ref),
    RA(FT_TYPE_Q8_0, "Q8_0", 32, 34, true, ft_dequantize_row_q8_0_ref, ft_quantize_row_q8_0_ref,
       ft_quantize_row_q8_0_act_ref, FT_TYPE_Q8_0, ft_vec_dot_q8_0_q8_0_ref, ft_vec_dot_q8_0_q8_0_ref, 0),
    A(FT_TYPE_Q8_1, "Q8_1", 32, 36, ft_dequantize_row_q8_1_ref, ft_quantize_row_q8_1_ref, ft_quantize_row_q8_1_act_ref),
    R1(FT_TYPE_Q2_K, "Q2_K", 256, 84, true, ft_dequantize_row_q2_K_ref, ft_quantize_row_q2_K_ref, FT_TYPE_Q8_K,
       ft_vec_dot_q2_K_q8_K_ref, ft_vec_dot_q2_K_q8_K_gemv_ref, 4),
    R(FT_TYPE_Q3_K, "Q3_K", 256, 110, true,
      ft_dequantize_row_q3_K_ref, ft_quantize_row_q3_K_ref, FT_TYPE_Q8_K, ft_vec_dot_q3_K_q8_K_ref),
    R1(FT_TYPE_Q4_K, "Q4_K", 256, 144, true, ft_dequantize_row_q4_K_ref, ft_quantize_row_q4_K_ref, FT_TYPE_Q8_K,
       ft_vec_dot_q4_K_q8_K_ref, ft_vec_dot_q4_K_q8_K_gemv_ref, 4),
    R(FT_TYPE_Q5_K, "Q5_K", 256, 176, true,
      ft_dequantize_row_q5_K_ref, ft_quantize_row_q5_K_ref, FT_TYPE_Q8_K, ft_vec_dot_q5_K_q8_K_ref),
    R(FT_TYPE_Q6_K, "Q6_K", 256, 210, true,
      ft_dequantize_row_q6_K_ref, ft_quantize_row_q6_K_ref, FT_TYPE_Q8_K, ft_vec_dot_q6_K_q8_K_ref),
    A(FT_TYPE_Q8_K, "Q8_K", 256, 292, ft_dequantize_row_q8_K_ref, ft_quantize_row_q8_K_ref, ft_quantize_row_q8_K_ref),
    T(FT_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66, true),
    T(FT_TYPE_IQ2_XS, "IQ2_XS", 256, 74, true),
    T(FT_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98, true),
    T(FT_TYPE_IQ1_S, "IQ1_S", 256, 50, true),
    R1(FT_TYPE_IQ4_NL, "IQ4_NL", 32, 18, true, ft_dequantize_row_iq4_nl_ref, ft_quantize_row_iq4_nl_ref,
       FT_TYPE_Q8_0, ft_vec_dot_iq4_nl_q8_0_ref, ft_vec_dot_iq4_nl_q8_0_ref, 4), /* repacked as Q4_0 */
    T(FT_TYPE_IQ3_S, "IQ3_S", 256, 110, true),
    T(FT_TYPE_IQ2_S, "IQ2_S", 256, 82, true),
    [FT_TYPE_IQ4_XS] = {.name = "IQ4_XS", .blck_size = 256, .type_size = 136, .is_quantized = true, .can_run = true,
                        .to_float = ft_dequantize_row_iq4_xs_ref, .from_float = ft_quantize_row_iq4_xs_ref,
                        .from_float_act = ft_quantize_row_iq4_xs_ref, .vec_dot_type = FT_TYPE_Q8_K,
                        .vec_dot = ft_vec_dot_iq4_xs_q8_K_ref, .vec_dot_gemv = ft_vec_dot_iq4_xs_q8_K_gemv_ref,
                        .gemm_min_rows = 8}, /* panel GEMM from 8 rows (ggml-cpu/iqp.cpp) */
    T(FT_TYPE_I8, "I8", 1, 1, false),
    T(FT_TYPE_I16, "I16", 1, 2, false),
    T(FT_TYPE_I32, "I32", 1, 4, false),
    T(FT_TYPE_I64, "I64", 1, 8, false),
    T(FT_TYPE_F64, "F64", 1, 8, false),
    T(FT_TYPE_IQ1_M, "IQ1_M", 256, 56, true),
    R1(FT_TYPE_BF16, "BF16", 1, 2, false, ft_bf16_to_fp32_row, ft_fp32_to_bf16_row, FT_TYPE_BF16,
       ft_vec_dot_bf16_ref, ft_vec_dot_bf16_gemv_ref, 0),
    T(FT_TYPE_TQ1_0, "TQ1_0", 256, 54, true),
    T(FT_TYPE_TQ2_0, "TQ2_0", 256, 66, true),
    R1(FT_TYPE_MXFP4, "MXFP4", 32, 17, true, ft_dequantize_row_mxfp4_ref, ft_quantize_row_mxfp4_ref, FT_TYPE_Q8_0,
       ft_vec_dot_mxfp4_q8_0_ref, ft_vec_dot_mxfp4_q8_0_ref, 4), /* repacked as Q4_0 */
};

const struct ft_type_info *ft_type_info(enum ft_type t) {
    if ((unsigned)t >= FT_TYPE_COUNT || g_info[t].name == NULL)
        return NULL;
    return &g_info[t];
}

const struct ft_type_info *ft_type_traits_ref(enum ft_type t) { return ft_type_info(t); }

const char *ft_simd_isa_name(void) { return ft_isa_name(ft_cpu_isa()); }

const char *ft_type_name(enum ft_type t) {
    const struct ft_type_info *i = ft_type_info(t);
    return i ? i->name : "?";
}

size_t ft_row_size(enum ft_type t, int64_t n) {
    const struct ft_type_info *i = ft_type_info(t);
    if (!i || n < 0 || n % i->blck_size != 0)
        return 0;
    return (size_t)(n / i->blck_size) * i->type_size;
}
