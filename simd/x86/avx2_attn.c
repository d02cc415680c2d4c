/* The "avx2" level's attention over the F16 KV cache: attn_impl.h over the
 * 256-bit names of vec256.h. Tiles of 32 keys (four ymm of scores per
 * query) and two queries per pass: 8 score accumulators, the K loads and
 * the two query broadcasts fit the 16 ymm registers. */
#include "simd/x86/vec256.h"

#define FT_ATTN_FILL ft_avx2_attn_fill
#define FT_ATTN_GROUPS 4
#define FT_ATTN_QUERIES 2
#define FT_ATTN_CHAINS 1
#include "simd/x86/attn_impl.h"
