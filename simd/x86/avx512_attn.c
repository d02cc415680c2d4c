/* The "avx512" level's attention over the F16 KV cache: attn_impl.h over
 * the 512-bit names of vec512.h. Tiles of 16 keys (one KV-cache block's
 * rows), four queries per pass and two FMA chains per query (even and odd
 * d): 8 score accumulators in the 32 zmm registers. */
#include "simd/x86/vec512.h"

#define FT_ATTN_FILL ft_avx512_attn_fill
#define FT_ATTN_GROUPS 1
#define FT_ATTN_QUERIES 4
#define FT_ATTN_CHAINS 2
#include "simd/x86/attn_impl.h"
