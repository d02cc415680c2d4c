/* What the CPU can do, and which kernel level (ISA) the type table uses.
 *
 * Detection runs once (CPUID + XGETBV on x86-64, HWCAP/HWCAP2 on aarch64) in
 * code compiled without ISA flags. A level is usable when the CPU has every
 * feature its kernel file was compiled for and that file is linked in:
 *
 *   scalar        the reference kernels (simd/quant_ref.c), any CPU
 *   avx2          x86-64: AVX2 + FMA + F16C (OS saves YMM)
 *   avx512        x86-64: avx2 + AVX-512 F/BW/VL/DQ + AVX512_VNNI (OS saves
 *                 ZMM); the BF16 dot uses vdpbf16ps when AVX512_BF16 is
 *                 present too, a shift-and-FMA path otherwise
 *   neon          aarch64: ASIMD (ARMv8.0); int8 dots with smull/sadalp
 *   neon-dotprod  aarch64: ASIMD + dotprod (sdot)
 *   neon-i8mm     aarch64: neon-dotprod + i8mm (smmla); the dotprod kernels
 *                 with a GEMM (prefill) that multiplies 2x8 by 8x2 blocks
 *
 * The level in use is the best one, unless FT_ISA=<name> in the environment
 * or ft_cpu_force_isa() (a CLI's --isa) chose another. Asking for a level the
 * CPU lacks, or an unknown name, is an error: ft_cpu_force_isa() and
 * ft_cpu_init() return FT_EUNSUPPORTED / FT_EINVAL and ft_cpu_error() holds
 * the message. simd/ cannot log, so the caller shows it; a program should
 * call ft_cpu_init() at start-up so a bad FT_ISA stops it instead of quietly
 * running another level (without that call the best level is used).
 */
#ifndef FT_CPU_H
#define FT_CPU_H

#include "ft/types.h"

#include <stdbool.h>
#include <stddef.h>

/* One architecture's levels weakest first: the best level a CPU runs is
 * the last one it supports. */
enum ft_isa {
    FT_ISA_SCALAR = 0,
    FT_ISA_AVX2 = 1,
    FT_ISA_AVX_VNNI = 2, /* avx2 + AVX-VNNI (vpdpbusd on ymm) for the GEMM */
    FT_ISA_AVX512 = 3,
    FT_ISA_AMX = 4, /* avx512 + AMX tiles for prefill */
    FT_ISA_NEON = 5,
    FT_ISA_NEON_DOTPROD = 6,
    FT_ISA_NEON_I8MM = 7,
    FT_ISA_COUNT = 8,
};

struct ft_cpu_info {
    const char *arch; /* "x86_64", "aarch64" or "other" */
    char vendor[16];  /* x86: CPUID vendor ("GenuineIntel"); else "" */
    char model[64];   /* x86: CPUID brand string, trimmed; else "" */
    /* x86-64. The AVX/AVX-512 flags are set only when the OS also saves the
     * registers (XCR0), i.e. when the instructions can actually run. */
    bool avx, avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512cd;
    bool avx512_vnni, avx512_bf16, avx512_fp16, avx_vnni;
    bool amx_tile, amx_int8, amx_bf16; /* CPUID + XCR0 only; Linux also wants arch_prctl */
    /* aarch64 (HWCAP / HWCAP2) */
    bool asimd, dotprod, i8mm, fp16, bf16, sve;
    enum ft_isa best; /* the highest level usable here */
};

/* Detected once, thread-safe; never NULL. */
const struct ft_cpu_info *ft_cpu_info(void);

const char *ft_isa_name(enum ft_isa isa); /* "avx512"; "?" if out of range */
/* Parse a level name (case-insensitive; "auto" = the best level).
 * FT_EINVAL for an unknown name. */
int ft_isa_parse(const char *name, enum ft_isa *out);
/* The level's kernels are linked in and this CPU can run them. */
bool ft_isa_supported(enum ft_isa isa);
/* isa is base or a level built on it (its entries start as base's). */
bool ft_isa_builds_on(enum ft_isa isa, enum ft_isa base);

/* Apply FT_ISA from the environment (once; later calls return the same
 * result). FT_OK when unset, "auto", or a usable level. */
int ft_cpu_init(void);
/* Use this level from now on, overriding FT_ISA. Safe at any time (kernels
 * of all levels give the same quantized bytes and dots within rounding), but
 * meant for start-up. FT_EINVAL: unknown name; FT_EUNSUPPORTED: this CPU or
 * build lacks it. On error the level in use is unchanged. */
int ft_cpu_force_isa(const char *name);
/* The level ft_type_traits() uses. */
enum ft_isa ft_cpu_isa(void);
/* Message of the last failed ft_cpu_init()/ft_cpu_force_isa(), "" if none.
 * Not thread-safe: call these from the thread that starts the program. */
const char *ft_cpu_error(void);

/* One line for `ft info --hw` and bench headers, e.g.
 * "x86_64 GenuineIntel Intel(R) Xeon(R) ...: avx2 fma f16c avx512f ... | kernels: avx512 (best avx512)".
 * Returns what snprintf returns. */
int ft_cpu_describe(char *buf, size_t len);

/* The type table of one level (NULL for an unknown type id, or when the
 * level is not supported here). ft_type_traits() is this at ft_cpu_isa();
 * tests and benchmarks use it to compare levels in one process. */
const struct ft_type_info *ft_type_traits_isa(enum ft_type t, enum ft_isa isa);

#endif
