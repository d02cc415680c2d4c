# Per-target compile flags. ISA-specific flags are NOT set here: kernels in
# simd/x86 and simd/arm set their own per file, and CPU detection is compiled
# without ISA flags so it cannot use an instruction the machine lacks.
# -ffp-contract=off everywhere: GCC contracts a * b + c into one fused
# multiply-add by default wherever the target has one (aarch64 always; x86
# with -mfma or FT_NATIVE), and the reference kernels (simd/quant_ref.c,
# simd/ops_ref.c) must round each product and sum separately, as written,
# to give llama.cpp's logits bit for bit on every architecture. Kernels that
# want a fused multiply-add ask for it with an intrinsic.
set(FT_FP_FLAGS -ffp-contract=off)
set(FT_WARN_FLAGS -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
    -Wno-unused-parameter -Wpointer-arith -Wformat=2 -Wvla)
if(FT_WERROR)
  list(APPEND FT_WARN_FLAGS -Werror)
endif()

set(FT_SAN_FLAGS "")
if(FT_SANITIZE)
  set(FT_SAN_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
endif()

function(ft_target_flags target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C>:${FT_WARN_FLAGS} ${FT_FP_FLAGS}> ${FT_SAN_FLAGS})
  if(FT_SANITIZE)
    target_link_options(${target} PRIVATE ${FT_SAN_FLAGS})
  endif()
  if(FT_NATIVE)
    target_compile_options(${target} PRIVATE -march=native)
  endif()
  target_compile_definitions(${target} PRIVATE _GNU_SOURCE)
endfunction()
