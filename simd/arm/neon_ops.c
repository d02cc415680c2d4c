/* NEON elementwise ops of the forward pass: the "neon" level's rmsnorm,
 * rope_apply, swiglu and geglu (include/ft/ops.h, struct ft_float_kernels),
 * inherited by neon-dotprod and neon-i8mm. Each is bit-identical to its
 * _ref in simd/ops_ref.c:
 *   - RMS norm squares in f32 and sums the squares in double (fcvtl to
 *     f64 lanes), then scales as (x * scale) * w;
 *   - RoPE rotates with the reference's contraction, one fused product and
 *     one rounded one per element (fmla on a rounded product);
 *   - SwiGLU uses ggml's exp (ft_neon_exp, the reference's polynomial and
 *     FMAs) and IEEE division, so unlike AVX2/AVX-512, whose Cephes exp is
 *     within 2 ulp, it gives the reference's bits;
 *   - GeGLU looks the fp16-rounded input up in a table of the reference's
 *     fp16 GELU values, as ggml's table does.
 * Tails go through the vector code on zero-padded copies rather than a
 * scalar loop, so no compiler contraction or vectorization of a scalar
 * tail can move a result (avx2_ops.c met one in GCC's SLP vectorizer). */
#include "ft/ops.h"
#include "simd/arm/neon_common.h"
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"

#include <arm_neon.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>

static void rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    /* The squares summed in double in another order than the reference's
     * running sum: the double sum differs by a few 2^-53, and the mean is
     * rounded to float, as on x86. */
    float64x2_t s0 = vdupq_n_f64(0.0), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
        const float32x4_t qa = vmulq_f32(a, a), qb = vmulq_f32(b, b);
        s0 = vaddq_f64(s0, vcvt_f64_f32(vget_low_f32(qa)));
        s1 = vaddq_f64(s1, vcvt_high_f64_f32(qa));
        s2 = vaddq_f64(s2, vcvt_f64_f32(vget_low_f32(qb)));
        s3 = vaddq_f64(s3, vcvt_high_f64_f32(qb));
    }
    for (; i < n; i += 4) {
        const float32x4_t a = ft_neon_load4(x + i, n - i); /* zero lanes add 0 */
        const float32x4_t qa = vmulq_f32(a, a);
        s0 = vaddq_f64(s0, vcvt_f64_f32(vget_low_f32(qa)));
        s1 = vaddq_f64(s1, vcvt_high_f64_f32(qa));
    }
    const double sum = vaddvq_f64(vaddq_f64(vaddq_f64(s0, s1), vaddq_f64(s2, s3)));
    const float mean = (float)(sum / (double)n);
    const float32x4_t scale = vdupq_n_f32(1.0f / sqrtf(mean + eps));
    for (i = 0; i < n; i += 4) {
        float32x4_t v = vmulq_f32(ft_neon_load4(x + i, n - i), scale);
        if (w)
            v = vmulq_f32(v, ft_neon_load4(w + i, n - i));
        ft_neon_store4(y + i, v, n - i);
    }
}

/* ft_rope_apply_ref on 4 pairs: x0' = fma(x0, c, -(x1 s)),
 * x1' = fma(x0, s, x1 c), the second product of each rounded. */
static inline void rotate4(float32x4_t *x0, float32x4_t *x1, float32x4_t c, float32x4_t s) {
    const float32x4_t a = *x0, b = *x1;
    *x0 = vfmaq_f32(vnegq_f32(vmulq_f32(b, s)), a, c);
    *x1 = vfmaq_f32(vmulq_f32(b, c), a, s);
}

static void rope_apply(float *x, int n_dims, bool neox, const float *cache) {
    const int half = n_dims / 2;
    if (!neox) {
        /* pairs (2i, 2i+1) and (cos_i, sin_i) at the same offsets: ld2
         * splits both into even and odd lanes */
        int i = 0;
        for (; i + 8 <= n_dims; i += 8) {
            float32x4x2_t v = vld2q_f32(x + i);
            const float32x4x2_t cs = vld2q_f32(cache + i);
            rotate4(&v.val[0], &v.val[1], cs.val[0], cs.val[1]);
            vst2q_f32(x + i, v);
        }
        if (i < n_dims) {
            float tx[8] = {0}, tc[8] = {0};
            memcpy(tx, x + i, sizeof(float) * (size_t)(n_dims - i));
            memcpy(tc, cache + i, sizeof(float) * (size_t)(n_dims - i));
            float32x4x2_t v = vld2q_f32(tx);
            const float32x4x2_t cs = vld2q_f32(tc);
            rotate4(&v.val[0], &v.val[1], cs.val[0], cs.val[1]);
            vst2q_f32(tx, v);
            memcpy(x + i, tx, sizeof(float) * (size_t)(n_dims - i));
        }
        return;
    }
    /* NeoX: pairs (i, i + half); pair i's cos and sin at cache[2i], [2i+1] */
    for (int i = 0; i < half; i += 4) {
        const int nv = half - i < 4 ? half - i : 4;
        float32x4x2_t cs;
        if (nv == 4) {
            cs = vld2q_f32(cache + 2 * i);
        } else {
            float tc[8] = {0};
            memcpy(tc, cache + 2 * i, sizeof(float) * (size_t)(2 * nv));
            cs = vld2q_f32(tc);
        }
        float32x4_t x0 = ft_neon_load4(x + i, nv), x1 = ft_neon_load4(x + i + half, nv);
        rotate4(&x0, &x1, cs.val[0], cs.val[1]);
        ft_neon_store4(x + i, x0, nv);
        ft_neon_store4(x + i + half, x1, nv);
    }
}

/* y = g / (1 + exp(-g)) * u, as ft_swiglu_ref. y may alias g or u. */
static void swiglu(float *y, const float *g, const float *u, int64_t n) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    for (int64_t i = 0; i < n; i += 4) {
        const float32x4_t x = ft_neon_load4(g + i, n - i);
        const float32x4_t silu = vdivq_f32(x, vaddq_f32(one, ft_neon_exp(vnegq_f32(x))));
        ft_neon_store4(y + i, vmulq_f32(silu, ft_neon_load4(u + i, n - i)), n - i);
    }
}

/* GELU of every fp16 value, rounded to fp16 and widened: 256 KiB, built on
 * first use (ggml_table_gelu_f16), as avx512_ops.c has it. */
static float g_gelu[65536];
static pthread_once_t g_gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void) {
    for (uint32_t h = 0; h < 65536; h++)
        g_gelu[h] = ft_half_to_float(ft_float_to_half(ft_gelu_tanh_ref(ft_half_to_float((uint16_t)h))));
}

static void geglu(float *y, const float *g, const float *u, int64_t n) {
    pthread_once(&g_gelu_once, gelu_table_init);
    const float32x4_t lo = vdupq_n_f32(-10.0f), hi = vdupq_n_f32(10.0f);
    for (int64_t i = 0; i < n; i += 4) {
        const float32x4_t x = ft_neon_load4(g + i, n - i);
        const uint16x4_t idx = vreinterpret_u16_f16(vcvt_f16_f32(x));
        /* no gather on NEON: four lookups */
        float32x4_t gx = vdupq_n_f32(g_gelu[vget_lane_u16(idx, 0)]);
        gx = vsetq_lane_f32(g_gelu[vget_lane_u16(idx, 1)], gx, 1);
        gx = vsetq_lane_f32(g_gelu[vget_lane_u16(idx, 2)], gx, 2);
        gx = vsetq_lane_f32(g_gelu[vget_lane_u16(idx, 3)], gx, 3);
        gx = vbslq_f32(vcgeq_f32(x, hi), x, gx);
        gx = vbslq_f32(vcleq_f32(x, lo), vdupq_n_f32(0.0f), gx);
        ft_neon_store4(y + i, vmulq_f32(gx, ft_neon_load4(u + i, n - i)), n - i);
    }
}

void ft_neon_ops_fill(struct ft_level *l) {
    struct ft_float_kernels *t = &l->ops;
    t->rmsnorm = rmsnorm;
    t->rope_apply = rope_apply;
    t->swiglu = swiglu;
    t->geglu = geglu;
}
