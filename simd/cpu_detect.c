/* CPU feature detection and the choice of kernel level (include/ft/cpu.h).
 *
 * What must stay true: this file is compiled without ISA flags (no -mavx2,
 * no -march=...+dotprod), so nothing here can execute an instruction the
 * machine lacks; it only decides whether the per-ISA files may be called.
 * A level counts as supported only if its kernel file is linked in
 * (FT_SIMD_X86 / FT_SIMD_ARM, set by cmake/FtSimd.cmake) AND the CPU reports
 * every feature that file was compiled for.
 */
#include "ft/cpu.h"

#include "ft/common.h"

#include "level.h"

#include <pthread.h>
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define FT_CPU_X86 1
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#define FT_CPU_ARM 1
#endif

static const char *const k_isa_names[FT_ISA_COUNT] = {
    [FT_ISA_SCALAR] = "scalar",
    [FT_ISA_AVX2] = "avx2",
    [FT_ISA_AVX_VNNI] = "avx-vnni",
    [FT_ISA_AVX512] = "avx512",
    [FT_ISA_NEON] = "neon",
    [FT_ISA_NEON_DOTPROD] = "neon-dotprod",
    [FT_ISA_NEON_I8MM] = "neon-i8mm",
    [FT_ISA_AMX] = "amx",
};

static struct ft_cpu_info g_cpu;
static pthread_once_t g_detect_once = PTHREAD_ONCE_INIT;

static atomic_int g_isa = FT_ISA_SCALAR;
static int g_env_status = FT_OK;
static pthread_once_t g_select_once = PTHREAD_ONCE_INIT;
static char g_error[256];

/* ---- x86-64 ---------------------------------------------------------------- */

#ifdef FT_CPU_X86
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    /* xgetbv with ecx = 0; spelled as bytes so no -mxsave is needed */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

static void trim_copy(char *dst, size_t cap, const char *src) {
    while (*src == ' ')
        src++;
    snprintf(dst, cap, "%s", src);
    size_t n = strlen(dst);
    while (n > 0 && dst[n - 1] == ' ')
        dst[--n] = '\0';
}

static void detect_x86(struct ft_cpu_info *c) {
    unsigned a, b, cx, d;
    c->arch = "x86_64";
    if (!__get_cpuid(0, &a, &b, &cx, &d))
        return;
    const unsigned max_leaf = a;
    memcpy(c->vendor + 0, &b, 4);
    memcpy(c->vendor + 4, &d, 4);
    memcpy(c->vendor + 8, &cx, 4);
    c->vendor[12] = '\0';

    unsigned ext_max = __get_cpuid_max(0x80000000u, NULL);
    if (ext_max >= 0x80000004u) {
        char brand[49];
        unsigned *w = (unsigned *)(void *)brand;
        for (unsigned leaf = 0; leaf < 3; leaf++)
            __get_cpuid(0x80000002u + leaf, &w[4 * leaf], &w[4 * leaf + 1], &w[4 * leaf + 2], &w[4 * leaf + 3]);
        brand[48] = '\0';
        trim_copy(c->model, sizeof(c->model), brand);
    }

    __get_cpuid(1, &a, &b, &cx, &d);
    const bool osxsave = cx & (1u << 27);
    const bool cpu_avx = cx & (1u << 28);
    const bool cpu_fma = cx & (1u << 12);
    const bool cpu_f16c = cx & (1u << 29);
    const uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    const bool os_ymm = (xcr0 & 0x6) == 0x6;        /* SSE + AVX state */
    const bool os_zmm = (xcr0 & 0xe6) == 0xe6;      /* + opmask, ZMM_Hi256, Hi16_ZMM */
    const bool os_amx = (xcr0 & 0x60000) == 0x60000; /* XTILECFG + XTILEDATA */

    c->avx = cpu_avx && os_ymm;
    c->fma = cpu_fma && os_ymm;
    c->f16c = cpu_f16c && os_ymm;
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, cx, d);
        c->avx2 = (b & (1u << 5)) && os_ymm;
        c->avx512f = (b & (1u << 16)) && os_zmm;
        c->avx512dq = (b & (1u << 17)) && os_zmm;
        c->avx512cd = (b & (1u << 28)) && os_zmm;
        c->avx512bw = (b & (1u << 30)) && os_zmm;
        c->avx512vl = (b & (1u << 31)) && os_zmm;
        c->avx512_vnni = (cx & (1u << 11)) && os_zmm;
        c->avx512_fp16 = (d & (1u << 23)) && os_zmm;
        c->amx_bf16 = (d & (1u << 22)) && os_amx;
        c->amx_tile = (d & (1u << 24)) && os_amx;
        c->amx_int8 = (d & (1u << 25)) && os_amx;
        const unsigned max_sub = a;
        if (max_sub >= 1) {
            __cpuid_count(7, 1, a, b, cx, d);
            c->avx_vnni = (a & (1u << 4)) && os_ymm;
            c->avx512_bf16 = (a & (1u << 5)) && os_zmm;
        }
    }
}
#endif

/* ---- aarch64 ----------------------------------------------------------------- */

#ifdef FT_CPU_ARM
/* Bit values from the kernel's uapi asm/hwcap.h, in case the libc headers
 * predate them. */
#define FT_HWCAP_ASIMD (1ul << 1)
#define FT_HWCAP_ASIMDHP (1ul << 10)
#define FT_HWCAP_ASIMDDP (1ul << 20)
#define FT_HWCAP_SVE (1ul << 22)
#define FT_HWCAP2_I8MM (1ul << 13)
#define FT_HWCAP2_BF16 (1ul << 14)

static void detect_arm(struct ft_cpu_info *c) {
    c->arch = "aarch64";
    const unsigned long hw = getauxval(AT_HWCAP);
    const unsigned long hw2 = getauxval(AT_HWCAP2);
    c->asimd = hw & FT_HWCAP_ASIMD;
    c->fp16 = hw & FT_HWCAP_ASIMDHP;
    c->dotprod = hw & FT_HWCAP_ASIMDDP;
    c->sve = hw & FT_HWCAP_SVE;
    c->i8mm = hw2 & FT_HWCAP2_I8MM;
    c->bf16 = hw2 & FT_HWCAP2_BF16;
}
#endif

/* ---- levels ------------------------------------------------------------------ */

/* The CPU has what the level's kernel files were compiled for, and what
 * every level under it needs (simd/levels.c: the descriptors). */
static bool cpu_has(const struct ft_cpu_info *c, enum ft_isa isa) {
    const struct ft_level_desc *d = ft_level_desc_get(isa);
    if (!d || !d->runs(c))
        return false;
    return d->base == isa || cpu_has(c, d->base);
}

static bool linked_in(enum ft_isa isa) { return ft_level_desc_get(isa) != NULL; }

static void detect_once(void) {
    struct ft_cpu_info *c = &g_cpu;
    c->arch = "other";
#if defined(FT_CPU_X86)
    detect_x86(c);
#elif defined(FT_CPU_ARM)
    detect_arm(c);
#elif defined(__aarch64__)
    c->arch = "aarch64"; /* not Linux: no HWCAP, stay scalar */
#endif
    c->best = FT_ISA_SCALAR;
    for (int i = 0; i < FT_ISA_COUNT; i++)
        if (linked_in((enum ft_isa)i) && cpu_has(c, (enum ft_isa)i))
            c->best = (enum ft_isa)i; /* levels of one arch are listed weakest first */
}

const struct ft_cpu_info *ft_cpu_info(void) {
    pthread_once(&g_detect_once, detect_once);
    return &g_cpu;
}

const char *ft_isa_name(enum ft_isa isa) {
    return (unsigned)isa < FT_ISA_COUNT ? k_isa_names[isa] : "?";
}

int ft_isa_parse(const char *name, enum ft_isa *out) {
    if (!name)
        return FT_EINVAL;
    if (strcasecmp(name, "auto") == 0) {
        *out = ft_cpu_info()->best;
        return FT_OK;
    }
    for (int i = 0; i < FT_ISA_COUNT; i++) {
        if (strcasecmp(name, k_isa_names[i]) == 0) {
            *out = (enum ft_isa)i;
            return FT_OK;
        }
    }
    if (strcasecmp(name, "avx_vnni") == 0 || strcasecmp(name, "avxvnni") == 0) {
        *out = FT_ISA_AVX_VNNI;
        return FT_OK;
    }
    if (strcasecmp(name, "dotprod") == 0 || strcasecmp(name, "neon_dotprod") == 0) {
        *out = FT_ISA_NEON_DOTPROD;
        return FT_OK;
    }
    if (strcasecmp(name, "i8mm") == 0 || strcasecmp(name, "neon_i8mm") == 0) {
        *out = FT_ISA_NEON_I8MM;
        return FT_OK;
    }
    return FT_EINVAL;
}

bool ft_isa_supported(enum ft_isa isa) {
    if ((unsigned)isa >= FT_ISA_COUNT)
        return false;
    return linked_in(isa) && cpu_has(ft_cpu_info(), isa);
}

bool ft_isa_builds_on(enum ft_isa isa, enum ft_isa base) {
    for (const struct ft_level_desc *d = ft_level_desc_get(isa); d; d = ft_level_desc_get(d->base)) {
        if (d->isa == base)
            return true;
        if (d->base == d->isa)
            break;
    }
    return false;
}

#if defined(FT_CPU_X86) && defined(__linux__)
#define FT_ARCH_REQ_XCOMP_PERM 0x1023 /* uapi asm/prctl.h */
#define FT_XFEATURE_XTILEDATA 18
static bool g_amx_ok;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;
static void amx_permit_once(void) {
    g_amx_ok = syscall(SYS_arch_prctl, FT_ARCH_REQ_XCOMP_PERM, FT_XFEATURE_XTILEDATA) == 0;
}
bool ft_x86_amx_permit(void) {
    pthread_once(&g_amx_once, amx_permit_once);
    return g_amx_ok;
}
#else
bool ft_x86_amx_permit(void) { return false; }
#endif

/* Validate a level name; FT_OK and *out, or an error with g_error set.
 * `what` names the source of the request ("FT_ISA", "--isa"). */
static int resolve(const char *what, const char *name, enum ft_isa *out) {
    enum ft_isa isa;
    if (ft_isa_parse(name, &isa) != FT_OK) {
        snprintf(g_error, sizeof(g_error),
                 "%s=%s: unknown kernel level (expected auto, scalar, avx2, avx-vnni, avx512, amx, neon, neon-dotprod or "
                 "neon-i8mm)",
                 what, name ? name : "(null)");
        return FT_EINVAL;
    }
    if (!ft_isa_supported(isa)) {
        const struct ft_cpu_info *c = ft_cpu_info();
        if (linked_in(isa))
            snprintf(g_error, sizeof(g_error), "%s=%s: this CPU cannot run it (needs %s); best here is %s", what,
                     name, ft_level_desc_get(isa)->needs, k_isa_names[c->best]);
        else
            snprintf(g_error, sizeof(g_error),
                     "%s=%s: this build cannot run it (its kernels are compiled for another architecture); best "
                     "here is %s",
                     what, name, k_isa_names[c->best]);
        return FT_EUNSUPPORTED;
    }
    *out = isa;
    return FT_OK;
}

static void select_once(void) {
    const struct ft_cpu_info *c = ft_cpu_info();
    enum ft_isa isa = c->best;
    const char *env = getenv("FT_ISA");
    if (env && *env) {
        enum ft_isa want;
        g_env_status = resolve("FT_ISA", env, &want);
        if (g_env_status == FT_OK)
            isa = want;
    }
    atomic_store(&g_isa, (int)isa);
}

int ft_cpu_init(void) {
    pthread_once(&g_select_once, select_once);
    return g_env_status;
}

int ft_cpu_force_isa(const char *name) {
    pthread_once(&g_select_once, select_once);
    enum ft_isa isa;
    const int rc = resolve("--isa", name, &isa);
    if (rc != FT_OK)
        return rc;
    atomic_store(&g_isa, (int)isa);
    return FT_OK;
}

enum ft_isa ft_cpu_isa(void) {
    pthread_once(&g_select_once, select_once);
    return (enum ft_isa)atomic_load_explicit(&g_isa, memory_order_relaxed);
}

const char *ft_cpu_error(void) { return g_error; }

int ft_cpu_describe(char *buf, size_t len) {
    const struct ft_cpu_info *c = ft_cpu_info();
    char feats[512];
    size_t n = 0;
    feats[0] = '\0';
#define FEAT(flag, label)                                                         \
    do {                                                                          \
        if (c->flag && n < sizeof(feats))                                         \
            n += (size_t)snprintf(feats + n, sizeof(feats) - n, " %s", label);   \
    } while (0)
    FEAT(avx, "avx");
    FEAT(avx2, "avx2");
    FEAT(fma, "fma");
    FEAT(f16c, "f16c");
    FEAT(avx_vnni, "avx_vnni");
    FEAT(avx512f, "avx512f");
    FEAT(avx512bw, "avx512bw");
    FEAT(avx512vl, "avx512vl");
    FEAT(avx512dq, "avx512dq");
    FEAT(avx512cd, "avx512cd");
    FEAT(avx512_vnni, "avx512_vnni");
    FEAT(avx512_bf16, "avx512_bf16");
    FEAT(avx512_fp16, "avx512_fp16");
    FEAT(amx_tile, "amx_tile");
    FEAT(amx_int8, "amx_int8");
    FEAT(amx_bf16, "amx_bf16");
    FEAT(asimd, "asimd");
    FEAT(dotprod, "dotprod");
    FEAT(i8mm, "i8mm");
    FEAT(fp16, "fp16");
    FEAT(bf16, "bf16");
    FEAT(sve, "sve");
#undef FEAT
    return snprintf(buf, len, "%s%s%s%s%s:%s | kernels: %s (best %s)", c->arch, c->vendor[0] ? " " : "", c->vendor,
                    c->model[0] ? " " : "", c->model, n ? feats : " (no SIMD features used)",
                    k_isa_names[ft_cpu_isa()], k_isa_names[c->best]);
}
