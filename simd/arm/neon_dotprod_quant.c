/* The "neon-dotprod" kernel level: ARMv8.2 ASIMD + dotprod, built with
 * -march=armv8.2-a+dotprod and called only when HWCAP has asimddp. Int8
 * dots use sdot (vdotq_s32). The kernels are in neon_impl.h. */
#define FT_NEON_DOT 1
#define FT_NEON_FILL ft_neon_dotprod_quant_fill
#include "neon_impl.h"
