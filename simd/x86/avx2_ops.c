/* The "avx2" level's elementwise ops (rmsnorm, rope_apply, swiglu, geglu):
 * ops_impl.h over the 256-bit names of vec256.h. */
#include "simd/x86/vec256.h"

#define FT_OPS_FILL ft_avx2_ops_fill
#include "simd/x86/ops_impl.h"
