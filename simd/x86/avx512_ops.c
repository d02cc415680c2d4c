/* AVX-512 elementwise ops of the forward pass: the "avx512" level's
 * rmsnorm, rope_apply, swiglu and geglu (include/ft/ops.h, struct
 * ft_float_kernels), each with the contract of its _ref in simd/ops_ref.c.
 *
 * Where the reference reproduces ggml's rounding, these keep it bit for
 * bit: RMS norm squares in f32 and sums them in double (vcvtps2pd), then
 * scales as (x * scale) * w; RoPE does the reference's separate multiplies
 * and one add/sub per element (no FMA); GeGLU looks the fp16-rounded input
 * up in a table of the reference's fp16 GELU values, as ggml's table does.
 * SwiGLU differs from the reference only by the exp polynomial (<= 2 ulp). */
#include "ft/ops.h"
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/x86/avx512_common.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>

static void rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(ft_mask16(n - i), x + i);
        const __m512 sq = _mm512_mul_ps(v, v);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(sq, 1)));
    }
    const double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    const float mean = (float)(sum / (double)n);
    const __m512 scale = _mm512_set1_ps(1.0f / sqrtf(mean + eps));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = ft_mask16(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), scale);
        if (w)
            v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

static void rope_apply(float *x, int n_dims, bool neox, const float *cache) {
    const int half = n_dims / 2;
    if (!neox) {
        /* Pairs (2i, 2i+1) against cache (cos_i, sin_i) at the same offsets. */
        for (int i = 0; i < n_dims; i += 16) {
            const __mmask16 m = ft_mask16(n_dims - i);
            const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
            const __m512 cs = _mm512_maskz_loadu_ps(m, cache + i);
            const __m512 c = _mm512_moveldup_ps(cs), s = _mm512_movehdup_ps(cs);
            const __m512 w = _mm512_permute_ps(v, 0xb1); /* the pair partner */
            /* as ft_rope_apply_ref (ggml's contraction): even lanes
             * fma(x0, c, -(x1 s)), odd lanes fma(x0, s, x1 c) */
            const __m512 even = _mm512_fmsub_ps(v, c, _mm512_mul_ps(w, s));
            const __m512 odd = _mm512_fmadd_ps(w, s, _mm512_mul_ps(v, c));
            _mm512_mask_storeu_ps(x + i, m, _mm512_mask_blend_ps(0xaaaa, even, odd));
        }
        return;
    }
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int i = 0; i < half; i += 16) {
        const __mmask16 m = ft_mask16(half - i);
        const __m512 ca = _mm512_maskz_loadu_ps(ft_mask16(2 * (half - i)), cache + 2 * i);
        const __m512 cb = _mm512_maskz_loadu_ps(ft_mask16(2 * (half - i) - 16), cache + 2 * i + 16);
        const __m512 c = _mm512_permutex2var_ps(ca, even, cb), s = _mm512_permutex2var_ps(ca, odd, cb);
        const __m512 x0 = _mm512_maskz_loadu_ps(m, x + i), x1 = _mm512_maskz_loadu_ps(m, x + i + half);
        _mm512_mask_storeu_ps(x + i, m, _mm512_fmsub_ps(x0, c, _mm512_mul_ps(x1, s)));
        _mm512_mask_storeu_ps(x + i + half, m, _mm512_fmadd_ps(x0, s, _mm512_mul_ps(x1, c)));
    }
}

static void swiglu(float *y, const float *g, const float *u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = ft_mask16(n - i);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        const __m512 silu = _mm512_div_ps(x, _mm512_add_ps(one, ft_exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, u + i)));
    }
}

/* GELU of every fp16 value, rounded to fp16 and widened: 256 KiB, built on
 * first use (ggml_table_gelu_f16). */
static float g_gelu[65536];
static pthread_once_t g_gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void) {
    for (uint32_t h = 0; h < 65536; h++)
        g_gelu[h] = ft_half_to_float(ft_float_to_half(ft_gelu_tanh_ref(ft_half_to_float((uint16_t)h))));
}

static void geglu(float *y, const float *g, const float *u, int64_t n) {
    pthread_once(&g_gelu_once, gelu_table_init);
    const __m512 lo = _mm512_set1_ps(-10.0f), hi = _mm512_set1_ps(10.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = ft_mask16(n - i);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        const __m512i idx = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m512 gx = _mm512_i32gather_ps(idx, g_gelu, 4);
        gx = _mm512_mask_mov_ps(gx, _mm512_cmp_ps_mask(x, hi, _CMP_GE_OQ), x);
        gx = _mm512_mask_mov_ps(gx, _mm512_cmp_ps_mask(x, lo, _CMP_LE_OQ), _mm512_setzero_ps());
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(gx, _mm512_maskz_loadu_ps(m, u + i)));
    }
}

void ft_avx512_ops_fill(struct ft_level *l) {
    struct ft_float_kernels *t = &l->ops;
    t->rmsnorm = rmsnorm;
    t->rope_apply = rope_apply;
    t->swiglu = swiglu;
    t->geglu = geglu;
}
