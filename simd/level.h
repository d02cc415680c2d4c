/* Kernel levels (include/ft/cpu.h: enum ft_isa), internal to simd/.
 *
 * A level is one struct ft_level: the per-type row operations (the type
 * table of include/ft/types.h), the float ops (include/ft/ops.h) and the
 * quantized GEMMs with their repacked layouts (include/ft/qgemm.h). It is
 * described by one struct ft_level_desc: the level it builds on, what the
 * CPU must have, and the fill functions of its kernel files. simd/levels.c
 * builds every level this CPU runs once: a copy of its base level (the
 * references for the lowest), then each fill replaces the entries it has
 * something better for. So a level takes a lower level's entry wherever it
 * has nothing of its own, and a new level (AVX-VNNI on AVX2-only chips,
 * SVE) is one descriptor in simd/levels.c, its kernel files and their line
 * in cmake/FtSimd.cmake.
 */
#ifndef FT_SIMD_LEVEL_H
#define FT_SIMD_LEVEL_H

#include "ft/cpu.h"
#include "ft/ops.h"
#include "ft/qgemm.h"
#include "ft/types.h"

#include <stdbool.h>

struct ft_level {
    struct ft_type_info types[FT_TYPE_COUNT];    /* row ops: to/from float, vec_dot */
    struct ft_float_kernels ops;                 /* float GEMM, attention, row ops */
    const struct ft_qgemm *qgemm[FT_TYPE_COUNT]; /* quantized GEMMs; NULL: vec_dot row by row */
};

typedef void (*ft_level_fill_fn)(struct ft_level *l);

#define FT_LEVEL_MAX_FILLS 6

struct ft_level_desc {
    enum ft_isa isa;
    enum ft_isa base;  /* entries this level has nothing better for come from it */
    const char *needs; /* what the CPU must have, for error messages */
    /* The CPU has what this level's own files were compiled for (the base's
     * features are checked separately). */
    bool (*runs)(const struct ft_cpu_info *c);
    ft_level_fill_fn fill[FT_LEVEL_MAX_FILLS]; /* in order; NULL ends the list */
};

/* The descriptor of a level linked into this build, or NULL. */
const struct ft_level_desc *ft_level_desc_get(enum ft_isa isa);
/* The built level, or NULL when this CPU or build cannot run it. */
const struct ft_level *ft_level_get(enum ft_isa isa);

/* Linux hands a process the AMX tile state only on request
 * (arch_prctl ARCH_REQ_XCOMP_PERM); asks once, true when granted. */
bool ft_x86_amx_permit(void);

/* ft_float_set_f16_via_bf16's setting (include/ft/ops.h). */
bool ft_float_f16_via_bf16(void);

/* The kernel files' fill functions: ft_<level>_<family>_fill. */
void ft_avx2_quant_fill(struct ft_level *l);
void ft_avx2_qgemm_fill(struct ft_level *l);
void ft_avx2_float_gemm_fill(struct ft_level *l);
void ft_avx2_attn_fill(struct ft_level *l);
void ft_avx2_ops_fill(struct ft_level *l);
void ft_avx512_quant_fill(struct ft_level *l);
void ft_avx512_qgemm_fill(struct ft_level *l);
void ft_avx512_float_gemm_fill(struct ft_level *l);
void ft_avx512_attn_fill(struct ft_level *l);
void ft_avx512_ops_fill(struct ft_level *l);
/* The avx2 level's Q4_K/Q5_K GEMM with the sub-block scales in the
 * integers (avx2_qgemm_k4.c; the amx kernels' floats). NULL for other
 * types. */
const struct ft_qgemm *ft_avx2_qgemm_k4(enum ft_type t);
/* The avx-vnni level: avx2_qgemm.c and avx2_qgemm_k4.c compiled again with
 * AVX-VNNI (avx_vnni_qgemm.c, avx_vnni_qgemm_k4.c). */
void ft_avx_vnni_qgemm_fill(struct ft_level *l);
const struct ft_qgemm *ft_avx_vnni_qgemm_k4(enum ft_type t);
/* The Q4_K/Q5_K kernels that take the sub-block scales into their integer
 * sums (avx2 and amx levels) are on unless FT_KQUANT_INT_SCALES=0, which
 * keeps the kernels that scale each 32-element sub-block in floats. */
bool ft_k4_int_scales(void);
void ft_amx_qgemm_fill(struct ft_level *l);
void ft_amx_float_gemm_fill(struct ft_level *l);
/* The amx level's Q4_K/Q5_K kernels with the sub-block scales in the
 * integers, one float order for every batch size: on AMX tiles
 * (amx_qgemm_k4.c) from FT_AMX_K4_TILE_TOKENS tokens, on VNNI
 * (amx_qgemm_k4_vnni.c) from FT_AMX_K4_MIN_TOKENS, and below that the
 * one-row dot. ft_amx_k4_fill() puts them into the level unless
 * ft_k4_int_scales() says no (then it keeps the per-32 AMX kernel and
 * avx512's dot). NULL for other types. */
#define FT_AMX_K4_MIN_TOKENS 4
#define FT_AMX_K4_TILE_TOKENS 32
const struct ft_qgemm *ft_amx_qgemm_k4(enum ft_type t);
const struct ft_qgemm *ft_amx_qgemm_k4_vnni(enum ft_type t);
void ft_amx_k4_fill(struct ft_level *l);
void ft_neon_quant_fill(struct ft_level *l);
void ft_neon_float_gemm_fill(struct ft_level *l);
void ft_neon_attn_fill(struct ft_level *l);
void ft_neon_ops_fill(struct ft_level *l);
void ft_neon_dotprod_quant_fill(struct ft_level *l);
void ft_neon_dotprod_qgemm_fill(struct ft_level *l);
void ft_neon_i8mm_qgemm_fill(struct ft_level *l);

/* Variants the default fill does not choose on every CPU, for tests that
 * check them where the CPU has more: avx512's type table without
 * vdpbf16ps, and its float GEMM with vdpbf16ps for BF16 weights. */
void ft_avx512_quant_fill_types(struct ft_type_info *t, bool have_bf16);
void ft_avx512_float_gemm_fill_ops(struct ft_float_kernels *t, bool use_bf16_dp);

#endif
