/* The float half of the AVX-512 quantized GEMM kernels: one sub-block's
 * int32 sums of 16 weight rows x NT tokens (acc[t], the offset X already
 * added where the type has one) scaled into the float accumulators, in
 * the one order both the VNNI kernel (avx512_qgemm.c) and the AMX kernel
 * (amx_qgemm.c) use, so their floats are the same bit for bit. Layouts:
 * simd/qgemm_pack.h (S, M after a sub-block's quants; D, X after an
 * activation block's, TT tokens per tile). */
#ifndef FT_SIMD_X86_QGEMM_SCALE512_H
#define FT_SIMD_X86_QGEMM_SCALE512_H

#include "simd/qgemm_pack.h"

#include <immintrin.h>
#include <string.h>

static inline __m512i ft_qg_bcast32(const uint8_t *p) { return _mm512_set1_epi32((int)ft_qg_ld32(p)); }
static inline __m512 ft_qg_bcastf(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return _mm512_set1_ps(f);
}

/* Sub-block s of nsub in its activation block; sw: the sub-block's scales
 * (S, then M with MINS); D, X: the block's activation scales and X values
 * (TT tokens per tile). part holds the block's partial sums when nsub > 1
 * and not FOLD; facc gets them at the block's last sub-block, or facc_mem
 * (16 floats per token) when not NULL: with 16 tokens, part and facc would
 * be all 32 registers. */
__attribute__((always_inline)) static inline void ft_qg_scale_sub(const __m512i *acc, int s, const uint8_t *sw,
                                                                  const uint8_t *D, const uint8_t *X, __m512 *facc,
                                                                  __m512 *part, float *facc_mem, const int nsub,
                                                                  const int MINS, const int FOLD, const int TR,
                                                                  const int TT, const int NT) {
    const __m512 S = _mm512_loadu_ps(sw);
    if (nsub == 1) {
        FT_UNROLL(16) for (int t = 0; t < NT; t++)
            facc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[t]), S), ft_qg_bcastf(D + 4 * t), facc[t]);
        if (MINS) {
            const __m512 M = _mm512_loadu_ps(sw + 4 * TR);
            FT_UNROLL(16) for (int t = 0; t < NT; t++)
                facc[t] = _mm512_fmadd_ps(M, ft_qg_bcastf(X + 4 * t), facc[t]);
        }
    } else if (FOLD) {
        FT_UNROLL(16) for (int t = 0; t < NT; t++)
            facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), _mm512_mul_ps(S, ft_qg_bcastf(D + 4 * t)), facc[t]);
    } else {
        FT_UNROLL(16) for (int t = 0; t < NT; t++)
            part[t] = s == 0 ? _mm512_mul_ps(_mm512_cvtepi32_ps(acc[t]), S)
                             : _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), S, part[t]);
        if (MINS) {
            const __m512 M = _mm512_loadu_ps(sw + 4 * TR);
            FT_UNROLL(16) for (int t = 0; t < NT; t++)
                part[t] = _mm512_fmadd_ps(M, ft_qg_bcastf(X + (s * TT + t) * 4), part[t]);
        }
        if (s == nsub - 1 && facc_mem)
            FT_UNROLL(16) for (int t = 0; t < NT; t++)
                _mm512_store_ps(facc_mem + 16 * t,
                                _mm512_fmadd_ps(part[t], ft_qg_bcastf(D + 4 * t), _mm512_load_ps(facc_mem + 16 * t)));
        else if (s == nsub - 1)
            FT_UNROLL(16) for (int t = 0; t < NT; t++)
                facc[t] = _mm512_fmadd_ps(part[t], ft_qg_bcastf(D + 4 * t), facc[t]);
    }
}

#endif
