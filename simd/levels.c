/* The kernel levels (simd/level.h): their descriptors and the one place
 * that builds them.
 *
 * Each level is built once (pthread_once), for every level this CPU runs:
 * a copy of its base level, then the fills of its kernel files in order.
 * The scalar level is the references (simd/quant_ref.c, simd/ops_ref.c)
 * and no GEMM. Levels of one architecture are listed weakest first, the
 * order enum ft_isa gives them, so a base is always built before the
 * levels on it.
 */
#include "level.h"

#include "kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

bool ft_k4_int_scales(void) {
    const char *env = getenv("FT_KQUANT_INT_SCALES");
    return !(env && !strcmp(env, "0"));
}

/* ---- the descriptors ----------------------------------------------------------- */

static bool runs_always(const struct ft_cpu_info *c) {
    (void)c;
    return true;
}

#ifdef FT_SIMD_X86
static bool runs_avx2(const struct ft_cpu_info *c) { return c->avx && c->avx2 && c->fma && c->f16c; }
static bool runs_avx_vnni(const struct ft_cpu_info *c) { return c->avx_vnni; }
static bool runs_avx512(const struct ft_cpu_info *c) {
    return c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq && c->avx512_vnni;
}
static bool runs_amx(const struct ft_cpu_info *c) { return c->amx_tile && c->amx_int8 && ft_x86_amx_permit(); }
#endif
#ifdef FT_SIMD_ARM
static bool runs_neon(const struct ft_cpu_info *c) { return c->asimd; }
static bool runs_neon_dotprod(const struct ft_cpu_info *c) { return c->dotprod; }
static bool runs_neon_i8mm(const struct ft_cpu_info *c) { return c->i8mm; }
#endif

static const struct ft_level_desc k_levels[] = {
    {.isa = FT_ISA_SCALAR, .base = FT_ISA_SCALAR, .needs = "nothing", .runs = runs_always},
#ifdef FT_SIMD_X86
    {.isa = FT_ISA_AVX2,
     .base = FT_ISA_SCALAR,
     .needs = "x86-64 with AVX2, FMA and F16C",
     .runs = runs_avx2,
     .fill = {ft_avx2_quant_fill, ft_avx2_qgemm_fill, ft_avx2_float_gemm_fill, ft_avx2_attn_fill, ft_avx2_ops_fill}},
    {.isa = FT_ISA_AVX_VNNI, /* avx2's kernels; its GEMM files again with vpdpbusd/vpdpwssd */
     .base = FT_ISA_AVX2,
     .needs = "the avx2 level's features and AVX-VNNI",
     .runs = runs_avx_vnni,
     .fill = {ft_avx_vnni_qgemm_fill}},
    {.isa = FT_ISA_AVX512,
     .base = FT_ISA_AVX2,
     .needs = "x86-64 with AVX2, FMA, F16C, AVX-512 F/BW/VL/DQ and AVX512_VNNI",
     .runs = runs_avx512,
     .fill = {ft_avx512_quant_fill, ft_avx512_qgemm_fill, ft_avx512_float_gemm_fill, ft_avx512_attn_fill,
              ft_avx512_ops_fill}},
    {.isa = FT_ISA_AMX, /* avx512's kernels; AMX int8 tiles for quantized prefill, BF16 for float */
     .base = FT_ISA_AVX512,
     .needs = "the avx512 level's features, AMX-TILE and AMX-INT8, and a kernel that grants the tile state (Linux 5.16+)",
     .runs = runs_amx,
     .fill = {ft_amx_qgemm_fill, ft_amx_float_gemm_fill}},
#endif
#ifdef FT_SIMD_ARM
    {.isa = FT_ISA_NEON, /* the float ops here are the ARM levels' only ones: the others inherit them */
     .base = FT_ISA_SCALAR,
     .needs = "aarch64 with ASIMD",
     .runs = runs_neon,
     .fill = {ft_neon_quant_fill, ft_neon_float_gemm_fill, ft_neon_attn_fill, ft_neon_ops_fill}},
    {.isa = FT_ISA_NEON_DOTPROD,
     .base = FT_ISA_NEON,
     .needs = "aarch64 with ASIMD and dotprod",
     .runs = runs_neon_dotprod,
     .fill = {ft_neon_dotprod_quant_fill, ft_neon_dotprod_qgemm_fill}},
    {.isa = FT_ISA_NEON_I8MM, /* dotprod's kernels, and smmla GEMMs where there are */
     .base = FT_ISA_NEON_DOTPROD,
     .needs = "aarch64 with ASIMD, dotprod and i8mm",
     .runs = runs_neon_i8mm,
     .fill = {ft_neon_i8mm_qgemm_fill}},
#endif
};

const struct ft_level_desc *ft_level_desc_get(enum ft_isa isa) {
    for (size_t i = 0; i < sizeof(k_levels) / sizeof(k_levels[0]); i++)
        if (k_levels[i].isa == isa)
            return &k_levels[i];
    return NULL;
}

/* ---- building them ----------------------------------------------------------------- */

static size_t attention_scratch_ref(int n_rows, int n_heads, int64_t dk, int64_t dv) {
    (void)n_rows, (void)n_heads;
    return (size_t)(dk + dv) * sizeof(float); /* ft_attention_ref: Q and the V accumulator */
}

static struct ft_level g_levels[FT_ISA_COUNT];
static bool g_built[FT_ISA_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void build_reference(struct ft_level *l) {
    memset(l, 0, sizeof(*l));
    for (int t = 0; t < FT_TYPE_COUNT; t++)
        if (ft_type_info((enum ft_type)t))
            l->types[t] = *ft_type_info((enum ft_type)t);
    l->ops = (struct ft_float_kernels){
        .gemm_mr = 0,
        .attention = ft_attention_rows_ref,
        .attention_scratch = attention_scratch_ref,
        .rmsnorm = ft_rmsnorm_ref,
        .rope_apply = ft_rope_apply_ref,
        .swiglu = ft_swiglu_ref,
        .geglu = ft_geglu_ref,
    };
}

/* A fill that replaced a type's vec_dot (or from_float) and left its
 * single-row dot (or activation quantizer) as it found it uses the new one
 * for both (include/ft/types.h: vec_dot_gemv, from_float_act). */
static void pair_slots(struct ft_level *l, const struct ft_level *before) {
    for (int t = 0; t < FT_TYPE_COUNT; t++) {
        struct ft_type_info *ti = &l->types[t];
        const struct ft_type_info *was = &before->types[t];
        const struct ft_type_info *ref = ft_type_info((enum ft_type)t);
        if (ti->vec_dot != was->vec_dot && ti->vec_dot_gemv == was->vec_dot_gemv)
            ti->vec_dot_gemv = ti->vec_dot;
        if (ref && ti->from_float != was->from_float && ti->from_float_act == was->from_float_act &&
            ref->from_float_act == ref->from_float)
            ti->from_float_act = ti->from_float;
    }
}

static void build_all(void) {
    for (size_t i = 0; i < sizeof(k_levels) / sizeof(k_levels[0]); i++) {
        const struct ft_level_desc *d = &k_levels[i];
        if (!ft_isa_supported(d->isa))
            continue;
        struct ft_level *l = &g_levels[d->isa];
        if (d->isa == FT_ISA_SCALAR) {
            build_reference(l);
        } else {
            if (!g_built[d->base])
                continue; /* ft_isa_supported() checks the base chain: cannot happen */
            *l = g_levels[d->base];
            for (int f = 0; f < FT_LEVEL_MAX_FILLS && d->fill[f]; f++) {
                const struct ft_level before = *l;
                d->fill[f](l);
                pair_slots(l, &before);
            }
        }
        g_built[d->isa] = true;
    }
}

const struct ft_level *ft_level_get(enum ft_isa isa) {
    if ((unsigned)isa >= FT_ISA_COUNT)
        return NULL;
    pthread_once(&g_once, build_all);
    return g_built[isa] ? &g_levels[isa] : NULL;
}

/* ---- options of the levels' kernels ------------------------------------------------- */

static atomic_bool g_f16_via_bf16;

bool ft_float_set_f16_via_bf16(bool on) {
    const bool can = ft_cpu_info()->amx_bf16 && ft_isa_supported(FT_ISA_AMX);
    atomic_store(&g_f16_via_bf16, on && can);
    return !on || can;
}

bool ft_float_f16_via_bf16(void) { return atomic_load_explicit(&g_f16_via_bf16, memory_order_relaxed); }

/* ---- the tables' public accessors (include/ft/types.h, ops.h, qgemm.h) ---------------- */

const struct ft_type_info *ft_type_traits_isa(enum ft_type t, enum ft_isa isa) {
    const struct ft_level *l = ft_type_info(t) ? ft_level_get(isa) : NULL;
    return l ? &l->types[t] : NULL;
}

const struct ft_type_info *ft_type_traits(enum ft_type t) { return ft_type_traits_isa(t, ft_cpu_isa()); }

const struct ft_float_kernels *ft_float_kernels_isa(enum ft_isa isa) {
    const struct ft_level *l = ft_level_get(isa);
    return l ? &l->ops : NULL;
}

const struct ft_float_kernels *ft_float_kernels(void) { return ft_float_kernels_isa(ft_cpu_isa()); }

const struct ft_qgemm *ft_qgemm_get_isa(enum ft_type t, enum ft_isa isa) {
    if ((unsigned)t >= FT_TYPE_COUNT)
        return NULL;
    const struct ft_level *l = ft_level_get(isa);
    return l ? l->qgemm[t] : NULL;
}

const struct ft_qgemm *ft_qgemm_get(enum ft_type t) { return ft_qgemm_get_isa(t, ft_cpu_isa()); }
