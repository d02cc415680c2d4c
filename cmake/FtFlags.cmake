# Per-target compile flags. ISA-specific flags are NOT set here: kernels in
# simd/x86 and simd/arm set their own per file, and CPU detection is compiled
# without ISA flags so it cannot use an instruction the machine lacks.
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
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C>:${FT_WARN_FLAGS}> ${FT_SAN_FLAGS})
  if(FT_SANITIZE)
    target_link_options(${target} PRIVATE ${FT_SAN_FLAGS})
  endif()
  if(FT_NATIVE)
    target_compile_options(${target} PRIVATE -march=native)
  endif()
  target_compile_definitions(${target} PRIVATE _GNU_SOURCE)
endfunction()
