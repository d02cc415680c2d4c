/* AVX2 elementwise ops: the "avx2" level's rmsnorm, rope_apply, swiglu and
 * geglu, with the numerics of avx512_ops.c (bit-identical to the reference
 * except SwiGLU's exp polynomial). */
#include "ft/ops.h"
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/x86/avx2_common.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>

static void rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 sq = _mm256_mul_ps(v, v);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    s0 = _mm256_add_pd(s0, s1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s0), _mm256_extractf128_pd(s0, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    for (; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    const __m256 sv = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sv);
        if (w)
            v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++)
        y[i] = w ? x[i] * scale * w[i] : x[i] * scale;
}

/* Tails go through masked loads and stores, not scalar code: GCC's SLP
 * vectorizer turned the reference's scalar x0*c - x1*s / x0*s + x1*c into
 * vfmaddsub despite -ffp-contract=off (GCC 12), one rounding short of the
 * reference. */
static void rope_apply(float *x, int n_dims, bool neox, const float *cache) {
    const int half = n_dims / 2;
    if (!neox) {
        for (int i = 0; i < n_dims; i += 8) {
            const __m256i m = ft_lanes8(n_dims - i);
            const __m256 v = _mm256_maskload_ps(x + i, m);
            const __m256 cs = _mm256_maskload_ps(cache + i, m);
            const __m256 c = _mm256_moveldup_ps(cs), s = _mm256_movehdup_ps(cs);
            const __m256 w = _mm256_permute_ps(v, 0xb1); /* the pair partner */
            /* as ft_rope_apply_ref (ggml's contraction): even lanes
             * fma(x0, c, -(x1 s)), odd lanes fma(x0, s, x1 c) */
            const __m256 even = _mm256_fmsub_ps(v, c, _mm256_mul_ps(w, s));
            const __m256 odd = _mm256_fmadd_ps(w, s, _mm256_mul_ps(v, c));
            _mm256_maskstore_ps(x + i, m, _mm256_blend_ps(even, odd, 0xaa));
        }
        return;
    }
    const __m256i deint = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    for (int i = 0; i < half; i += 8) {
        /* cache + 2i: (c0 s0 c1 s1 c2 s2 c3 s3)(c4 s4 ... ) -> c0..c7, s0..s7 */
        const __m256 a = _mm256_permutevar8x32_ps(_mm256_maskload_ps(cache + 2 * i, ft_lanes8(2 * (half - i))), deint);
        const __m256 b =
            _mm256_permutevar8x32_ps(_mm256_maskload_ps(cache + 2 * i + 8, ft_lanes8(2 * (half - i) - 8)), deint);
        const __m256 c = _mm256_permute2f128_ps(a, b, 0x20), s = _mm256_permute2f128_ps(a, b, 0x31);
        const __m256i m = ft_lanes8(half - i);
        const __m256 x0 = _mm256_maskload_ps(x + i, m), x1 = _mm256_maskload_ps(x + i + half, m);
        _mm256_maskstore_ps(x + i, m, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
        _mm256_maskstore_ps(x + i + half, m, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
    }
}

static void swiglu(float *y, const float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = ft_lanes8(n - i);
        const __m256 x = _mm256_maskload_ps(g + i, m);
        const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, ft_exp256(_mm256_sub_ps(_mm256_setzero_ps(), x))));
        _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(silu, _mm256_maskload_ps(u + i, m)));
    }
}

static float g_gelu[65536]; /* as in avx512_ops.c */
static pthread_once_t g_gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void) {
    for (uint32_t h = 0; h < 65536; h++)
        g_gelu[h] = ft_half_to_float(ft_float_to_half(ft_gelu_tanh_ref(ft_half_to_float((uint16_t)h))));
}

static void geglu(float *y, const float *g, const float *u, int64_t n) {
    pthread_once(&g_gelu_once, gelu_table_init);
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = ft_lanes8(n - i);
        const __m256 x = _mm256_maskload_ps(g + i, m);
        const __m256i idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256 gx = _mm256_i32gather_ps(g_gelu, idx, 4);
        gx = _mm256_blendv_ps(gx, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
        gx = _mm256_blendv_ps(gx, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
        _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(gx, _mm256_maskload_ps(u + i, m)));
    }
}

void ft_avx2_ops_fill(struct ft_level *l) {
    struct ft_float_kernels *t = &l->ops;
    t->rmsnorm = rmsnorm;
    t->rope_apply = rope_apply;
    t->swiglu = swiglu;
    t->geglu = geglu;
}
