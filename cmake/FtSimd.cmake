# Sources and per-file ISA flags of the simd/ layer, shared by the main build
# and the aarch64 cross build of tests/arm (so both compile the same files
# with the same flags).
#
#   simd/*.c        portable C (reference kernels, tables, CPU detection):
#                   no ISA flags, so they run on any CPU of the architecture.
#   simd/x86/*.c    x86-64 only; each file carries its own -m flags and is
#                   called only after CPUID says the machine has them.
#   simd/arm/*.c    aarch64 only; likewise: -march=armv8-a for the neon
#                   level's files (its int8 dots and the float ops every
#                   ARM level inherits), +dotprod for neon-dotprod's, and
#                   +i8mm for neon_i8mm_qgemm.c alone.
#
# Every kernel file is built with -ffp-contract=off: the dequantizers must
# reproduce the reference's separately rounded multiply and add bit for bit,
# and GCC would otherwise fuse `_mm256_mul_ps` + `_mm256_sub_ps` (both are
# plain vector arithmetic to it) into an FMA. Kernels that want FMA ask for
# it with the intrinsic.
#
# ft_simd_sources(<out-var> <out-defs-var>): the source list and the compile
# definitions (FT_SIMD_X86 / FT_SIMD_ARM) that tell simd/levels.c and
# simd/cpu_detect.c which kernel files are linked in.

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|x64)$")
  set(FT_SIMD_ARCH x86_64)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  set(FT_SIMD_ARCH aarch64)
else()
  set(FT_SIMD_ARCH other)
endif()

function(ft_simd_sources out_sources out_defs)
  get_filename_component(root ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/.. ABSOLUTE)
  file(GLOB srcs CONFIGURE_DEPENDS ${root}/simd/*.c)
  set(defs "")
  if(FT_SIMD_ARCH STREQUAL "x86_64" AND CMAKE_SIZEOF_VOID_P EQUAL 8)
    set(avx2 ${root}/simd/x86/avx2_quant.c ${root}/simd/x86/avx2_float_gemm.c ${root}/simd/x86/avx2_attn.c
             ${root}/simd/x86/avx2_ops.c ${root}/simd/x86/avx2_qgemm.c
             ${root}/simd/x86/avx2_qgemm_k4.c)
    # avx-vnni: the avx2 GEMM files again, with AVX-VNNI (simd/x86/dot256.h).
    set(avx_vnni ${root}/simd/x86/avx_vnni_qgemm.c ${root}/simd/x86/avx_vnni_qgemm_k4.c)
    set_source_files_properties(${avx_vnni} PROPERTIES COMPILE_OPTIONS
      "-mavx2;-mfma;-mf16c;-mavxvnni;-ffp-contract=off")
    set(avx512 ${root}/simd/x86/avx512_quant.c ${root}/simd/x86/avx512_float_gemm.c ${root}/simd/x86/avx512_attn.c
               ${root}/simd/x86/avx512_ops.c ${root}/simd/x86/avx512_qgemm.c)
    set_source_files_properties(${avx2} PROPERTIES COMPILE_OPTIONS
      "-mavx2;-mfma;-mf16c;-ffp-contract=off")
    # AVX512_BF16 is not a file-wide flag: the one BF16 dot that uses
    # vdpbf16ps carries __attribute__((target("avx512bf16"))), so the rest of
    # the AVX-512 level also runs on Ice Lake / Cascade Lake servers.
    set_source_files_properties(${avx512} PROPERTIES COMPILE_OPTIONS
      "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx2;-mfma;-mf16c;-ffp-contract=off")
    # AMX: avx512's flags and the tile instructions, in the one file that
    # runs them (the amx level; cpu_detect.c checks CPUID, XCR0 and the
    # kernel's permission before anything calls it).
    set(amx ${root}/simd/x86/amx_qgemm.c ${root}/simd/x86/amx_qgemm_k4.c ${root}/simd/x86/amx_qgemm_k4_vnni.c ${root}/simd/x86/amx_float_gemm.c)
    set_source_files_properties(${amx} PROPERTIES COMPILE_OPTIONS
      "-mamx-tile;-mamx-int8;-mamx-bf16;-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx2;-mfma;-mf16c;-ffp-contract=off")
    list(APPEND srcs ${avx2} ${avx_vnni} ${avx512} ${amx})
    list(APPEND defs FT_SIMD_X86=1)
  elseif(FT_SIMD_ARCH STREQUAL "aarch64")
    set(neon ${root}/simd/arm/neon_quant.c ${root}/simd/arm/neon_float_gemm.c ${root}/simd/arm/neon_attn.c
             ${root}/simd/arm/neon_ops.c)
    set(neon_dot ${root}/simd/arm/neon_dotprod_quant.c ${root}/simd/arm/neon_dotprod_qgemm.c)
    set(neon_i8mm ${root}/simd/arm/neon_i8mm_qgemm.c)
    set_source_files_properties(${neon} PROPERTIES COMPILE_OPTIONS
      "-march=armv8-a;-ffp-contract=off")
    set_source_files_properties(${neon_dot} PROPERTIES COMPILE_OPTIONS
      "-march=armv8.2-a+dotprod;-ffp-contract=off")
    set_source_files_properties(${neon_i8mm} PROPERTIES COMPILE_OPTIONS
      "-march=armv8.2-a+dotprod+i8mm;-ffp-contract=off")
    list(APPEND srcs ${neon} ${neon_dot} ${neon_i8mm})
    list(APPEND defs FT_SIMD_ARM=1)
  endif()
  set(${out_sources} ${srcs} PARENT_SCOPE)
  set(${out_defs} ${defs} PARENT_SCOPE)
endfunction()
