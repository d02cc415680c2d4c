/* The avx-vnni level's quantized GEMM: avx2_qgemm.c compiled with
 * FT_AVX_VNNI and -mavxvnni (cmake/FtSimd.cmake), for AVX2 CPUs with
 * AVX-VNNI and no AVX-512 (Intel's client cores from Alder Lake, Sierra
 * Forest and other E-core Xeons). */
#define FT_AVX_VNNI 1
#include "simd/x86/avx2_qgemm.c"
