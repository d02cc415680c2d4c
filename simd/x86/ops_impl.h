/* Elementwise ops of the forward pass -- rmsnorm, rope_apply, swiglu,
 * geglu (include/ft/ops.h, struct ft_float_kernels) -- written once over
 * the vector names of simd/x86/vec256.h / vec512.h. avx2_ops.c includes
 * this with vec256.h, avx512_ops.c with vec512.h; each defines FT_OPS_FILL,
 * the name of its fill function. Each op keeps the contract of its _ref in
 * simd/ops_ref.c.
 *
 * Where the reference reproduces ggml's rounding, these keep it bit for
 * bit: RMS norm squares in f32 and sums them in double, then scales as
 * (x * scale) * w; RoPE does the reference's multiplies and one FMA per
 * element, as ggml's contraction does; GeGLU looks the fp16-rounded input
 * up in a table of the reference's fp16 GELU values, as ggml's table does.
 * SwiGLU differs from the reference only by the exp polynomial (<= 2 ulp).
 *
 * Tails go through masked loads and stores, not scalar code: GCC's SLP
 * vectorizer turned the reference's scalar x0*c - x1*s / x0*s + x1*c into
 * vfmaddsub despite -ffp-contract=off (GCC 12), one rounding short of the
 * reference. The one exception is RMS norm's sum of squares on a width
 * without FTV_TAIL_IN_VECTOR, which adds the tail's squares after the
 * horizontal sum, in double like the reference. */
#include "ft/ops.h"
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/x86/vec_math.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>

#ifndef FT_OPS_FILL
#error "define FT_OPS_FILL before including ops_impl.h"
#endif

static inline void sum_sq(ftv v, ftvd *s0, ftvd *s1) {
    const ftv sq = ftv_mul(v, v);
    *s0 = ftvd_add(*s0, ftv_lo_pd(sq));
    *s1 = ftvd_add(*s1, ftv_hi_pd(sq));
}

static void rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    ftvd s0 = ftvd_zero(), s1 = ftvd_zero();
    int64_t i = 0;
    for (; i + FTV_N <= n; i += FTV_N)
        sum_sq(ftv_load(x + i), &s0, &s1);
#if FTV_TAIL_IN_VECTOR
    if (i < n) {
        sum_sq(ftv_load_n(x + i, n - i), &s0, &s1);
        i = n;
    }
#endif
    double sum = ftvd_hsum(ftvd_add(s0, s1));
    for (; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const ftv scale = ftv_set1(1.0f / sqrtf(mean + eps));
    for (i = 0; i < n; i += FTV_N) {
        const ftvm m = ftv_mask(n - i);
        const bool full = i + FTV_N <= n;
        ftv v = ftv_mul(full ? ftv_load(x + i) : ftv_load_m(x + i, m), scale);
        if (w)
            v = ftv_mul(v, full ? ftv_load(w + i) : ftv_load_m(w + i, m));
        if (full)
            ftv_store(y + i, v);
        else
            ftv_store_m(y + i, m, v);
    }
}

static void rope_apply(float *x, int n_dims, bool neox, const float *cache) {
    const int half = n_dims / 2;
    if (!neox) {
        /* Pairs (2i, 2i+1) against cache (cos_i, sin_i) at the same offsets. */
        for (int i = 0; i < n_dims; i += FTV_N) {
            const ftvm m = ftv_mask(n_dims - i);
            const ftv v = ftv_load_m(x + i, m);
            const ftv cs = ftv_load_m(cache + i, m);
            const ftv c = ftv_dup_even(cs), s = ftv_dup_odd(cs);
            const ftv w = ftv_swap_pairs(v); /* the pair partner */
            /* as ft_rope_apply_ref (ggml's contraction): even lanes
             * fma(x0, c, -(x1 s)), odd lanes fma(x0, s, x1 c) */
            const ftv even = ftv_fmsub(v, c, ftv_mul(w, s));
            const ftv odd = ftv_fmadd(w, s, ftv_mul(v, c));
            ftv_store_m(x + i, m, ftv_blend_odd(even, odd));
        }
        return;
    }
    for (int i = 0; i < half; i += FTV_N) {
        /* cache + 2i: (c0 s0 c1 s1 ...) over two vectors -> c0.., s0.. */
        ftv c, s;
        ftv_deinterleave(ftv_load_m(cache + 2 * i, ftv_mask(2 * (half - i))),
                         ftv_load_m(cache + 2 * i + FTV_N, ftv_mask(2 * (half - i) - FTV_N)), &c, &s);
        const ftvm m = ftv_mask(half - i);
        const ftv x0 = ftv_load_m(x + i, m), x1 = ftv_load_m(x + i + half, m);
        ftv_store_m(x + i, m, ftv_fmsub(x0, c, ftv_mul(x1, s)));
        ftv_store_m(x + i + half, m, ftv_fmadd(x0, s, ftv_mul(x1, c)));
    }
}

static void swiglu(float *y, const float *g, const float *u, int64_t n) {
    const ftv one = ftv_set1(1.0f);
    for (int64_t i = 0; i < n; i += FTV_N) {
        const ftvm m = ftv_mask(n - i);
        const ftv x = ftv_load_m(g + i, m);
        const ftv silu = ftv_div(x, ftv_add(one, ftv_exp(ftv_sub(ftv_zero(), x))));
        ftv_store_m(y + i, m, ftv_mul(silu, ftv_load_m(u + i, m)));
    }
}

/* GELU of every fp16 value, rounded to fp16 and widened: 256 KiB, built on
 * first use (ggml_table_gelu_f16); one per level file. */
static float g_gelu[65536];
static pthread_once_t g_gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void) {
    for (uint32_t h = 0; h < 65536; h++)
        g_gelu[h] = ft_half_to_float(ft_float_to_half(ft_gelu_tanh_ref(ft_half_to_float((uint16_t)h))));
}

static void geglu(float *y, const float *g, const float *u, int64_t n) {
    pthread_once(&g_gelu_once, gelu_table_init);
    const ftv lo = ftv_set1(-10.0f), hi = ftv_set1(10.0f);
    for (int64_t i = 0; i < n; i += FTV_N) {
        const ftvm m = ftv_mask(n - i);
        const ftv x = ftv_load_m(g + i, m);
        ftv gx = ftv_gather(g_gelu, ftv_f16_bits(x));
        gx = ftv_blend(gx, x, ftv_ge(x, hi));
        gx = ftv_blend(gx, ftv_zero(), ftv_le(x, lo));
        ftv_store_m(y + i, m, ftv_mul(gx, ftv_load_m(u + i, m)));
    }
}

void FT_OPS_FILL(struct ft_level *l) {
    struct ft_float_kernels *t = &l->ops;
    t->rmsnorm = rmsnorm;
    t->rope_apply = rope_apply;
    t->swiglu = swiglu;
    t->geglu = geglu;
}
