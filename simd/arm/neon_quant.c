/* The "neon" kernel level: ARMv8.0 ASIMD, built with -march=armv8-a so it
 * runs on every aarch64 CPU. Int8 dots use smull + sadalp. The kernels are
 * in neon_impl.h, shared with neon_dotprod_quant.c. */
#define FT_NEON_DOT 0
#define FT_NEON_FILL ft_neon_quant_fill
#include "neon_impl.h"
