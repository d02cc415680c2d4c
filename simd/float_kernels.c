/* The per-level tables of float ops (include/ft/ops.h: struct
 * ft_float_kernels): the scalar level holds the _ref functions and no GEMM;
 * each other level starts from a copy of it and its kernel files replace
 * the slots they have faster versions of. Filled once (pthread_once) for
 * every level this CPU can run, like the type table in simd/types.c. */
#include "ft/cpu.h"
#include "ft/ops.h"

#include "kernels.h"

#include <pthread.h>
#include <stdbool.h>

static struct ft_float_kernels g_tables[FT_ISA_COUNT];
static bool g_have_table[FT_ISA_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static size_t attention_scratch_ref(int n_rows, int n_heads, int64_t dk, int64_t dv) {
    return (size_t)(dk + dv) * sizeof(float); /* ft_attention_ref: Q and the V accumulator */
}

static const struct ft_float_kernels g_scalar = {
    .gemm_mr = 0,
    .attention = ft_attention_rows_ref,
    .attention_scratch = attention_scratch_ref,
    .rmsnorm = ft_rmsnorm_ref,
    .rope_apply = ft_rope_apply_ref,
    .swiglu = ft_swiglu_ref,
    .geglu = ft_geglu_ref,
};

static void tables_init(void) {
    for (int isa = 0; isa < FT_ISA_COUNT; isa++) {
        if (!ft_isa_supported((enum ft_isa)isa))
            continue;
        g_tables[isa] = g_scalar;
        switch ((enum ft_isa)isa) {
#ifdef FT_SIMD_X86
        case FT_ISA_AVX2:
            ft_simd_fill_avx2_gemm(&g_tables[isa]);
            ft_simd_fill_avx2_attn(&g_tables[isa]);
            ft_simd_fill_avx2_ops(&g_tables[isa]);
            break;
        case FT_ISA_AVX512:
            ft_simd_fill_avx512_gemm(&g_tables[isa], 0); /* FMA beats vdpbf16ps here: see the file */
            ft_simd_fill_avx512_attn(&g_tables[isa]);
            ft_simd_fill_avx512_ops(&g_tables[isa]);
            break;
#endif
        default:
            break;
        }
        g_have_table[isa] = true;
    }
}

const struct ft_float_kernels *ft_float_kernels_isa(enum ft_isa isa) {
    if ((unsigned)isa >= FT_ISA_COUNT)
        return NULL;
    pthread_once(&g_once, tables_init);
    return g_have_table[isa] ? &g_tables[isa] : NULL;
}

const struct ft_float_kernels *ft_float_kernels(void) {
    pthread_once(&g_once, tables_init);
    return &g_tables[ft_cpu_isa()];
}
