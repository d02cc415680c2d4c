/* The quantized GEMM table (include/ft/qgemm.h): per kernel level, the
 * GEMM of each weight type that level has one for, filled once from the
 * level's GEMM file (simd/x86/ISA_qgemm.c, simd/arm/neon_ISA_qgemm.c).
 * Levels without one (scalar, plain neon) leave every entry NULL, and the
 * engine multiplies with vec_dot row by row: the scalar level is the
 * reference, and ARMv8.0 has no int8 dot instruction to tile.
 */
#include "ft/cpu.h"
#include "ft/qgemm.h"

#include <pthread.h>
#include <stddef.h>

void ft_qgemm_fill_avx512(const struct ft_qgemm **table);
void ft_qgemm_fill_avx2(const struct ft_qgemm **table);
void ft_qgemm_fill_neon_dotprod(const struct ft_qgemm **table);
void ft_qgemm_fill_neon_i8mm(const struct ft_qgemm **table);

static const struct ft_qgemm *g_tables[FT_ISA_COUNT][FT_TYPE_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void tables_init(void) {
#ifdef FT_SIMD_X86
    if (ft_isa_supported(FT_ISA_AVX512))
        ft_qgemm_fill_avx512(g_tables[FT_ISA_AVX512]);
    if (ft_isa_supported(FT_ISA_AVX2))
        ft_qgemm_fill_avx2(g_tables[FT_ISA_AVX2]);
#endif
#ifdef FT_SIMD_ARM
    if (ft_isa_supported(FT_ISA_NEON_DOTPROD))
        ft_qgemm_fill_neon_dotprod(g_tables[FT_ISA_NEON_DOTPROD]);
    if (ft_isa_supported(FT_ISA_NEON_I8MM)) {
        /* dotprod's GEMMs, replaced by smmla ones wherever there is one */
        ft_qgemm_fill_neon_dotprod(g_tables[FT_ISA_NEON_I8MM]);
        ft_qgemm_fill_neon_i8mm(g_tables[FT_ISA_NEON_I8MM]);
    }
#endif
}

const struct ft_qgemm *ft_qgemm_get_isa(enum ft_type t, enum ft_isa isa) {
    if ((unsigned)t >= FT_TYPE_COUNT || (unsigned)isa >= FT_ISA_COUNT)
        return NULL;
    pthread_once(&g_once, tables_init);
    return g_tables[isa][t];
}

const struct ft_qgemm *ft_qgemm_get(enum ft_type t) { return ft_qgemm_get_isa(t, ft_cpu_isa()); }
