/* The avx-vnni level's Q4_K/Q5_K GEMM with the sub-block scales in the
 * integers: avx2_qgemm_k4.c compiled with FT_AVX_VNNI and -mavxvnni. */
#define FT_AVX_VNNI 1
#include "simd/x86/avx2_qgemm_k4.c"
