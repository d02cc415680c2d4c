/* Scalar reference ops of the forward pass (include/ft/ops.h).
 *
 * Never optimized: these define the answer, which is what llama.cpp's x86
 * CPU backend (ggml built with FMA, as its releases are) computes, bit for
 * bit: with the shared reference models (../shared/models) the logits
 * agree to the 5 decimals llama.cpp printed. That takes the same order of
 * operations, and fused multiply-adds exactly where GCC contracts ggml's
 * expressions (-ffp-contract=fast is its default for GNU C) -- written out
 * with fmaf() below, each checked against ggml's output; everything else
 * must not be contracted, hence the pragma. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "ft/ops.h"

#include "fp16.h"
#include "reduce_ref.h"

#include <math.h>
#include <string.h>

/* fmaf() is a library call on x86-64 built for the baseline ISA, which
 * this file must run on; the loops that use it per element get a second
 * version compiled for FMA, which the loader picks when the CPU has it.
 * Both give the same bits: fmaf rounds once, in hardware or in libm. */
/* Not with clang before 16: its target_clones symbols cannot be called from
 * another file (the fuzz build links them from engine/). */
#if defined(__x86_64__) && defined(__has_attribute) && (!defined(__clang__) || __clang_major__ >= 16)
#if __has_attribute(target_clones)
#define FMA_CLONES __attribute__((target_clones("fma", "default")))
#endif
#endif
#ifndef FMA_CLONES
#define FMA_CLONES
#endif

void ft_rmsnorm_ref(float *y, const float *x, const float *w, int64_t n, float eps) {
    /* ggml: squares in float, summed in double, mean and scale in float. */
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w) {
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * scale * w[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * scale;
    }
}

/* ---- RoPE ------------------------------------------------------------------ */

static float rope_yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

static float rope_yarn_ramp(float low, float high, int i0) {
    const float y = ((float)(i0 / 2) - low) / fmaxf(0.001f, high - low);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

void ft_rope_cache_ref(const struct ft_rope *r, int32_t pos, float *cache) {
    /* As ggml_rope_cache_init: theta starts at pos and is multiplied by
     * theta_scale once per pair, in float (not powf per pair). */
    const float theta_scale = powf(r->freq_base, -2.0f / (float)r->n_dims);
    float corr[2] = {0.0f, 0.0f};
    if (r->ext_factor != 0.0f) {
        const float lo = floorf(rope_yarn_corr_dim(r->n_dims, r->n_ctx_orig, r->beta_fast, r->freq_base));
        const float hi = ceilf(rope_yarn_corr_dim(r->n_dims, r->n_ctx_orig, r->beta_slow, r->freq_base));
        corr[0] = fmaxf(0.0f, lo);
        corr[1] = fminf((float)(r->n_dims - 1), hi);
    }
    float theta = (float)pos;
    for (int i0 = 0; i0 < r->n_dims; i0 += 2) {
        const float ff = r->freq_factors ? r->freq_factors[i0 / 2] : 1.0f;
        const float theta_extrap = theta / ff;
        const float theta_interp = r->freq_scale * theta_extrap;
        float th = theta_interp;
        float mscale = r->attn_factor;
        if (r->ext_factor != 0.0f) {
            const float mix = rope_yarn_ramp(corr[0], corr[1], i0) * r->ext_factor;
            /* as GCC contracts ggml's rope_yarn (checked against ggml's
             * ROPE with YaRN, normal and NeoX) */
            th = fmaf(theta_interp, 1.0f - mix, theta_extrap * mix);
            mscale *= fmaf(0.1f, logf(1.0f / r->freq_scale), 1.0f);
        }
        cache[i0 + 0] = cosf(th) * mscale;
        cache[i0 + 1] = sinf(th) * mscale;
        theta *= theta_scale;
    }
}

FMA_CLONES void ft_rope_apply_ref(float *x, int n_dims, bool neox, const float *cache) {
    /* Normal: pairs (2i, 2i+1). NeoX: pairs (i, i + n_dims/2). Pair i uses
     * cache[2i], cache[2i+1] in both. */
    const int half = n_dims / 2;
    for (int i = 0; i < half; i++) {
        const float c = cache[2 * i + 0];
        const float s = cache[2 * i + 1];
        const int a = neox ? i : 2 * i;
        const int b = neox ? i + half : 2 * i + 1;
        const float x0 = x[a];
        const float x1 = x[b];
        /* ggml's x0*c - x1*s and x0*s + x1*c as GCC contracts them
         * (-ffp-contract=fast with FMA, how llama.cpp is built for x86):
         * the first product fused, the second rounded. */
        x[a] = fmaf(x0, c, -(x1 * s));
        x[b] = fmaf(x0, s, x1 * c);
    }
}

/* ---- activations -------------------------------------------------------- */

void ft_softmax_ref(float *x, int64_t n) {
    if (n <= 0)
        return;
    float max = x[0];
    for (int64_t i = 1; i < n; i++)
        max = fmaxf(max, x[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

/* ggml_v_expf: the exp that ggml's SIMD SiLU uses on x86 (AVX2 and
 * AVX-512 give the same result in range: 2^n * a polynomial of the
 * remainder, max error ~1.5 ulp vs libm). Written with fmaf where ggml uses
 * FMA instructions so the bits agree. */
static inline float ggml_v_expf(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f)
        return n <= 0.0f ? 0.0f : INFINITY;
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n); /* _mm512_scalef_ps */
}

float ft_silu_ref(float x) { return x / (1.0f + ggml_v_expf(-x)); }

float ft_gelu_tanh_ref(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    const float coef_a = 0.044715f;
    /* 1 + a x^2 as fma(a x, x, 1): how GCC contracts ggml_gelu_f32 when it
     * fills ggml's fp16 GELU table (checked against the table of all 65536
     * inputs; one entry differs without the FMA). */
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * fmaf(coef_a * x, x, 1.0f)));
}

FMA_CLONES void ft_swiglu_ref(float *y, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = g[i] / (1.0f + ggml_v_expf(-g[i])) * u[i]; /* ft_silu_ref, inlined for the FMA version */
}

void ft_geglu_ref(float *y, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        float gx;
        if (x <= -10.0f) {
            gx = 0.0f;
        } else if (x >= 10.0f) {
            gx = x;
        } else {
            /* ggml_table_gelu_f16[fp16(x)], stored as fp16 */
            gx = ft_half_to_float(ft_float_to_half(ft_gelu_tanh_ref(ft_half_to_float(ft_float_to_half(x)))));
        }
        y[i] = gx * u[i];
    }
}

/* ---- matmul --------------------------------------------------------------- */

void ft_convert_rows_ref(enum ft_type type, const float *x, int64_t n_rows, int64_t k, void *out) {
    const struct ft_type_info *ti = ft_type_traits(type);
    const size_t row = ft_row_size(type, k);
    for (int64_t i = 0; i < n_rows; i++) {
        char *dst = (char *)out + (size_t)i * row;
        if (type == FT_TYPE_F32 || !ti->from_float_act)
            memcpy(dst, x + i * k, (size_t)k * sizeof(float));
        else
            ti->from_float_act(x + i * k, dst, k);
    }
}

void ft_matmul_rows_ref(ft_vec_dot_fn vec_dot, const void *w, size_t w_row_size, int64_t k,
                        int64_t r0, int64_t r1, const void *a, size_t a_row_size, int64_t n_tok,
                        float *out, int64_t ld_out) {
    /* Weight rows outer, tokens inner: each weight row is read once per call
     * and the (small) activation block stays in cache. */
    for (int64_t r = r0; r < r1; r++) {
        const char *wr = (const char *)w + (size_t)r * w_row_size;
        for (int64_t t = 0; t < n_tok; t++)
            vec_dot(k, &out[t * ld_out + r], wr, (const char *)a + (size_t)t * a_row_size);
    }
}

/* ---- attention ------------------------------------------------------------ */

/* ggml_vec_dot_f16 of ggml's AVX-512 build (the F16 K cache times Q, which
 * flash attention has rounded to fp16; qf holds those values as floats):
 * four 16-lane FMA accumulators over steps of 64, folded 0+2, 1+3, then
 * 0+1 and reduced; a tail that is not a multiple of 64 is added product by
 * product in double. */
static float dot_f16_ggml(int64_t n, const uint16_t *x, const float *qf) {
    const int64_t np = n & ~(int64_t)63;
    float sum[4][16] = {{0}};
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++)
                /* ggml's FMA: the product of two fp16 values is exact in
                 * float, so a multiply and an add give the same bits */
                sum[j][l] = ft_half_to_float(x[i + 16 * j + l]) * qf[i + 16 * j + l] + sum[j][l];
    for (int l = 0; l < 16; l++) {
        sum[0][l] += sum[2][l];
        sum[1][l] += sum[3][l];
    }
    for (int l = 0; l < 16; l++)
        sum[0][l] += sum[1][l];
    double sumf = ft_hsum16_ref(sum[0]);
    for (int64_t i = np; i < n; i++)
        sumf += (double)(ft_half_to_float(x[i]) * qf[i]);
    return (float)sumf;
}

/* ft_half_to_float(ft_float_to_half(x)), the rounding of a value stored in
 * fp16, without the round trip where the result is a normal fp16 number:
 * the 23-bit mantissa rounded to 10 bits, ties to even (a carry correctly
 * bumps the exponent). */
static inline float round_to_half(float x) {
    const uint32_t u = ft_f32_bits(x);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x38800000u && a < 0x477ff000u) { /* 2^-14 .. below the overflow to inf */
        a += 0xfffu + ((a >> 13) & 1u);
        return ft_f32_from_bits((u & 0x80000000u) | (a & 0xffffe000u));
    }
    return ft_half_to_float(ft_float_to_half(x));
}

/* Attention as ggml's CPU flash attention computes it for an F16 cache
 * (ops.cpp, ggml_compute_forward_flash_attn_ext_f16_one_chunk), which is
 * what llama.cpp runs for a batch of fewer than 64 query rows -- every
 * decode step and short prompts:
 *   Q is rounded to fp16 and each score is ggml_vec_dot_f16(K row, Q)
 *   (dot_f16_ggml) times scale;
 *   an online softmax over the keys in position order, whose V accumulator
 *   is fp16: on a new maximum it is scaled by exp(old - new) and rounded,
 *   then V * exp(score - max) is added with one FMA and rounded again;
 *   the output is the accumulator in f32 times 1/sum.
 * The fp16 rounding of the accumulator is not noise to be ignored: it
 * moves each output by up to 2^-11 relative, and quantized models
 * re-quantize that output to 8 bits, so without it our logits differed
 * from llama.cpp's by up to 0.3 on the shared reference models.
 * An fp16 accumulator can overflow (past 65504) on long, flat attention
 * over large values, where ggml returns inf; in that case only, we redo the
 * row with an f32 accumulator. The accumulator is kept as floats that
 * always hold fp16 values (round_to_half). */
/* An attention sink (gpt-oss): a logit `sink` that takes its share of the
 * softmax and adds no value, applied as ggml's flash attention applies it
 * after the keys: acc and the sum s (running max m) are rescaled when the
 * sink is the new max. Returns the new sum. */
static FMA_CLONES float sink_apply(float sink, float m, float s, float *acc, int64_t dv) {
    float ms = 1.0f, vs = 1.0f;
    if (sink > m) {
        ms = expf(m - sink);
        for (int64_t d = 0; d < dv; d++)
            acc[d] *= ms;
    } else {
        vs = expf(sink - m);
    }
    return fmaf(s, ms, vs); /* S = S*ms + vs, contracted in ggml */
}

static FMA_CLONES void attention_online(const float *q, int64_t dk, int64_t dv, float scale,
                                        const struct ft_attn_kv *kv, int32_t p0, int32_t p1, float *out,
                                        float *scratch, bool f16_first, const float *sink) {
    float *qh = scratch;       /* dk: Q rounded to fp16 */
    float *acc = scratch + dk; /* dv */
    for (int64_t d = 0; d < dk; d++)
        qh[d] = ft_half_to_float(ft_float_to_half(q[d]));

    for (int pass = f16_first ? 0 : 1; pass < 2; pass++) {
        const bool f16_acc = pass == 0;
        for (int64_t d = 0; d < dv; d++)
            acc[d] = 0.0f;
        bool overflow = false;
        float m = -INFINITY; /* running max of the scores */
        float s = 0.0f;      /* running sum of exp(score - m) */
        for (int32_t j = p0; j <= p1; j++) {
            const uint16_t *kr = ft_attn_k_at(kv, j);
            const uint16_t *vr = ft_attn_v_at(kv, j);
            const float sc = dot_f16_ggml(dk, kr, qh) * scale;

            float ms = 1.0f; /* rescale of what was accumulated so far */
            float vs = 1.0f; /* weight of this position */
            if (sc > m) {
                ms = expf(m - sc);
                m = sc;
                for (int64_t d = 0; d < dv; d++)
                    acc[d] = f16_acc ? round_to_half(acc[d] * ms) : acc[d] * ms;
            } else {
                vs = expf(sc - m);
            }
            for (int64_t d = 0; d < dv; d++) {
                const float a = fmaf(ft_half_to_float(vr[d]), vs, acc[d]);
                acc[d] = f16_acc ? round_to_half(a) : a;
            }
            if (f16_acc)
                for (int64_t d = 0; d < dv; d++)
                    overflow |= isinf(acc[d]) || isnan(acc[d]);
            s = fmaf(s, ms, vs); /* S = S*ms + vs, contracted in ggml */
        }
        if (f16_acc && overflow)
            continue;
        if (sink) /* ggml: one more logit in the sum, in f32 after the accumulator */
            s = sink_apply(*sink, m, s, acc, dv);
        const float inv = s == 0.0f ? 0.0f : 1.0f / s;
        for (int64_t d = 0; d < dv; d++)
            out[d] = acc[d] * inv;
        return;
    }
}

void ft_attention_ref(const float *q, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv, int32_t p0,
                      int32_t p1, float *out, float *scratch) {
    attention_online(q, dk, dv, scale, kv, p0, p1, out, scratch, true, NULL);
}

void ft_attention_sink_ref(const float *q, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                           int32_t p0, int32_t p1, float sink, float *out, float *scratch) {
    attention_online(q, dk, dv, scale, kv, p0, p1, out, scratch, true, &sink);
}

void ft_attention_f32acc_ref(const float *q, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                             int32_t p0, int32_t p1, float *out, float *scratch) {
    attention_online(q, dk, dv, scale, kv, p0, p1, out, scratch, false, NULL);
}

/* ggml_compute_forward_flash_attn_ext_tiled, what llama.cpp runs for 64 or
 * more query rows, one query row at a time (its rows are independent):
 *   per tile of 64 key positions: scores q.k as a chain of FMAs over the
 *   head dimension in order (simd_gemm with Q and K in f32), times scale;
 *   the tile's max updates the running max (rescaling the accumulator and
 *   the sum by exp(old - new)); p = ggml_v_expf(score - max), summed in
 *   double by 16-lane groups and added to the float sum; then each output
 *   element gets p[k] * v[k] added with FMA over the tile in order.
 *   Masked keys score -inf (p = 0), which leaves the FMA chain unchanged,
 *   so they are skipped. */
static FMA_CLONES void attention_tiled(const float *q, int64_t dk, int64_t dv, float scale,
                                       const struct ft_attn_kv *kv, int32_t p0, int32_t p1, float *out,
                                       float *scratch, const float *sink) {
    float *p = scratch; /* FT_ATTN_TILE */
    for (int64_t d = 0; d < dv; d++)
        out[d] = 0.0f;
    float m = -INFINITY, s = 0.0f;
    for (int32_t t0 = p0 - p0 % FT_ATTN_TILE; t0 <= p1; t0 += FT_ATTN_TILE) {
        float tile_max = -INFINITY;
        for (int k = 0; k < FT_ATTN_TILE; k++) {
            const int32_t j = t0 + k;
            p[k] = -INFINITY;
            if (j < p0 || j > p1)
                continue;
            const uint16_t *kr = ft_attn_k_at(kv, j);
            float dot = 0.0f;
            for (int64_t d = 0; d < dk; d++)
                dot = fmaf(ft_half_to_float(kr[d]), q[d], dot);
            p[k] = dot * scale;
            tile_max = fmaxf(tile_max, p[k]);
        }
        const float m_new = fmaxf(m, tile_max);
        if (m_new > m) {
            const float ms = expf(m - m_new);
            for (int64_t d = 0; d < dv; d++)
                out[d] *= ms;
            s *= ms;
        }
        m = m_new;
        double sum = 0.0;
        for (int g = 0; g < FT_ATTN_TILE; g += 16) {
            for (int k = g; k < g + 16; k++)
                p[k] = ggml_v_expf(p[k] - m);
            sum += ft_hsum16_ref(p + g);
        }
        s = (float)((double)s + sum);
        for (int k = 0; k < FT_ATTN_TILE; k++) {
            const int32_t j = t0 + k;
            if (j < p0 || j > p1)
                continue;
            const uint16_t *vr = ft_attn_v_at(kv, j);
            for (int64_t d = 0; d < dv; d++)
                out[d] = fmaf(ft_half_to_float(vr[d]), p[k], out[d]);
        }
    }
    if (sink)
        s = sink_apply(*sink, m, s, out, dv);
    const float inv = s == 0.0f ? 0.0f : 1.0f / s;
    for (int64_t d = 0; d < dv; d++)
        out[d] *= inv;
}

void ft_attention_tiled_ref(const float *q, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                            int32_t p0, int32_t p1, float *out, float *scratch) {
    attention_tiled(q, dk, dv, scale, kv, p0, p1, out, scratch, NULL);
}

void ft_attention_tiled_sink_ref(const float *q, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                                 int32_t p0, int32_t p1, float sink, float *out, float *scratch) {
    attention_tiled(q, dk, dv, scale, kv, p0, p1, out, scratch, &sink);
}

void ft_attention_sink_finish(float sink, float m, float s, float *acc, int64_t dv, float *out) {
    if (m == -INFINITY) { /* no key: the sink takes everything */
        for (int64_t d = 0; d < dv; d++)
            out[d] = 0.0f;
        return;
    }
    s = sink_apply(sink, m, s, acc, dv);
    const float inv = s == 0.0f ? 0.0f : 1.0f / s;
    for (int64_t d = 0; d < dv; d++)
        out[d] = acc[d] * inv;
}

void ft_attention_rows_ref(const struct ft_attn_rows *a, int64_t dk, int64_t dv, float scale,
                           const struct ft_attn_kv *kv, void *scratch) {
    for (int i = 0; i < a->n_rows; i++)
        for (int h = 0; h < a->n_heads; h++)
            ft_attention_ref(a->q + i * a->q_row + h * dk, dk, dv, scale, kv, a->p0[i], a->p1[i],
                             a->out + i * a->out_row + h * dv, scratch);
}

void ft_attention_merge(const float *acc, int64_t acc_stride, const float *m, const float *l, int64_t ml_stride,
                        int n_parts, int64_t dv, float *out) {
    float mx = -INFINITY;
    for (int i = 0; i < n_parts; i++)
        mx = fmaxf(mx, m[i * ml_stride]);
    for (int64_t d = 0; d < dv; d++)
        out[d] = 0.0f;
    if (mx == -INFINITY)
        return;
    float sum = 0.0f;
    for (int i = 0; i < n_parts; i++) {
        if (m[i * ml_stride] == -INFINITY) /* an empty part: l = 0, acc = 0 */
            continue;
        const float w = expf(m[i * ml_stride] - mx);
        sum += w * l[i * ml_stride];
        const float *a = acc + i * acc_stride;
        for (int64_t d = 0; d < dv; d++)
            out[d] += w * a[d];
    }
    const float inv = 1.0f / sum; /* the part holding mx has l >= 1 */
    for (int64_t d = 0; d < dv; d++)
        out[d] *= inv;
}
