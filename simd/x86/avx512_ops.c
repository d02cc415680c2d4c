/* The "avx512" level's elementwise ops (rmsnorm, rope_apply, swiglu,
 * geglu): ops_impl.h over the 512-bit names of vec512.h. */
#include "simd/x86/vec512.h"

#define FT_OPS_FILL ft_avx512_ops_fill
#include "simd/x86/ops_impl.h"
