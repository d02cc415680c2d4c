/* Scalar reference ops of the forward pass (include/ft/ops.h).
 *
 * Never optimized: these define the answer. Where ggml's order of
 * operations changes the low bits in a way that shows in logits, the loops
 * below follow it and say so, because the engine is checked against
 * llama.cpp's outputs (../shared/models). */
#include "ft/ops.h"

#include "fp16.h"

#include <math.h>
#include <string.h>

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
            th = theta_interp * (1.0f - mix) + theta_extrap * mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / r->freq_scale);
        }
        cache[i0 + 0] = cosf(th) * mscale;
        cache[i0 + 1] = sinf(th) * mscale;
        theta *= theta_scale;
    }
}

void ft_rope_apply_ref(float *x, int n_dims, bool neox, const float *cache) {
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
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
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

float ft_silu_ref(float x) { return x / (1.0f + expf(-x)); }

float ft_gelu_tanh_ref(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    const float coef_a = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
}

void ft_swiglu_ref(float *y, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = ft_silu_ref(g[i]) * u[i];
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
        if (type == FT_TYPE_F32 || !ti->from_float)
            memcpy(dst, x + i * k, (size_t)k * sizeof(float));
        else
            ti->from_float(x + i * k, dst, k);
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

/* Numerics, compared with ggml's CPU flash attention (what llama.cpp runs):
 * Q is rounded to fp16 and dotted with the fp16 K row in f32, as ggml does
 * for an F16 cache. ggml then keeps the V accumulator in fp16 for batches
 * under 64 tokens (and in f32 for larger ones); we keep it in f32 always.
 * An fp16 accumulator loses small contributions once it has grown (2^-11
 * relative per add) and can overflow past 65504 on long, flat attention;
 * matching it would move our logits on the shared reference models by ~0.01
 * toward llama.cpp's, which is not worth that risk at long context. */
void ft_attention_ref(const float *q, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                      int32_t p0, int32_t p1, float *out, uint16_t *scratch) {
    uint16_t *q16 = scratch;
    for (int64_t d = 0; d < dk; d++)
        q16[d] = ft_float_to_half(q[d]);
    for (int64_t d = 0; d < dv; d++)
        out[d] = 0.0f;

    float m = -INFINITY; /* running max of the scores */
    float s = 0.0f;      /* running sum of exp(score - m) */
    for (int32_t j = p0; j <= p1; j++) {
        const int64_t cell = (int64_t)kv->blocks[j / kv->block_tokens] * kv->block_tokens +
                             j % kv->block_tokens;
        const uint16_t *kr = kv->k + cell * kv->k_row;
        const uint16_t *vr = kv->v + cell * kv->v_row;
        float dot = 0.0f;
        for (int64_t d = 0; d < dk; d++)
            dot += ft_half_to_float(q16[d]) * ft_half_to_float(kr[d]);
        const float sc = dot * scale;

        float ms = 1.0f; /* rescale of what was accumulated so far */
        float vs = 1.0f; /* weight of this position */
        if (sc > m) {
            ms = expf(m - sc);
            m = sc;
            for (int64_t d = 0; d < dv; d++)
                out[d] *= ms;
        } else {
            vs = expf(sc - m);
        }
        for (int64_t d = 0; d < dv; d++)
            out[d] += vs * ft_half_to_float(vr[d]);
        s = s * ms + vs;
    }
    const float inv = s == 0.0f ? 0.0f : 1.0f / s;
    for (int64_t d = 0; d < dv; d++)
        out[d] *= inv;
}

void ft_attention_rows_ref(const struct ft_attn_rows *a, int64_t dk, int64_t dv, float scale,
                           const struct ft_attn_kv *kv, void *scratch) {
    for (int i = 0; i < a->n_rows; i++)
        for (int h = 0; h < a->n_heads; h++)
            ft_attention_ref(a->q + i * a->q_row + h * dk, dk, dv, scale, kv, a->p0[i], a->p1[i],
                             a->out + i * a->out_row + h * dv, scratch);
}
