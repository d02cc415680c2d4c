/* Scalar reference ops of the forward pass: RMS norm, RoPE, softmax, SiLU,
 * GELU (tanh), the gated activations, and the matmul of a block of weight
 * rows against converted activations.
 *
 * These are the `_ref` tier (docs/conventions.md, Kernels): plain loops that
 * define the answer, written to reproduce bit for bit what llama.cpp's x86
 * CPU backend computes (RMS norm sums squares in double, RoPE builds its
 * angles by repeated multiplication and rotates with the FMAs GCC makes of
 * ggml's code, SiLU uses ggml's vector exp, GELU goes through ggml's fp16
 * table, attention keeps ggml's fp16 accumulator), so a model run here gives
 * llama.cpp's logits. Faster per-ISA versions are tested against them.
 */
#ifndef FT_OPS_H
#define FT_OPS_H

#include "ft/cpu.h"
#include "ft/types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; w may be NULL (no weight).
 * y may alias x. */
void ft_rmsnorm_ref(float *y, const float *x, const float *w, int64_t n, float eps);

/* Rotary position embedding parameters for one layer (ggml_rope_ext). */
struct ft_rope {
    int n_dims;          /* rotated dims (rope.dimension_count), even, <= head size */
    bool neox;           /* NeoX pairs (i, i + n_dims/2); otherwise (2i, 2i+1) */
    float freq_base;     /* theta_i = pos * freq_base^(-2i/n_dims) */
    float freq_scale;    /* linear scaling: theta *= freq_scale */
    float ext_factor;    /* YaRN extrapolation mix; 0 = off */
    float attn_factor;   /* magnitude scale of cos/sin (1 unless YaRN) */
    float beta_fast;     /* YaRN ramp bounds */
    float beta_slow;
    int n_ctx_orig;      /* YaRN original context */
    const float *freq_factors; /* n_dims/2 divisors of theta (Llama 3.1 rope_freqs) or NULL */
};

/* cos/sin table for one position: cache[2i] = cos, cache[2i+1] = sin for
 * i < n_dims/2 (OUT: n_dims floats). */
void ft_rope_cache_ref(const struct ft_rope *r, int32_t pos, float *cache);
/* Rotate one head vector in place with a table from ft_rope_cache_ref().
 * Elements from n_dims on are left as they are. */
void ft_rope_apply_ref(float *x, int n_dims, bool neox, const float *cache);

/* In-place softmax over n values (max-subtracted). */
void ft_softmax_ref(float *x, int64_t n);

float ft_silu_ref(float x);      /* x / (1 + exp(-x)) with ggml's SIMD exp */
float ft_gelu_tanh_ref(float x); /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */

/* y = silu(g) * u (SwiGLU). y may alias g or u. */
void ft_swiglu_ref(float *y, const float *g, const float *u, int64_t n);
/* y = gelu_tanh(g) * u (GeGLU), with g rounded to fp16 and GELU's result
 * rounded to fp16, as ggml's CPU backend computes it through its fp16 GELU
 * table (|g| >= 10 short-cuts as ggml does). y may alias g or u. */
void ft_geglu_ref(float *y, const float *g, const float *u, int64_t n);

/* Attention of one query head over the F16 KV cache of one sequence, with
 * an online softmax (flash-style): keys and values at positions p0..p1
 * (inclusive) of a block-paged cache, position j living in block
 * blocks[j / block_tokens] at row j % block_tokens (ft_attn_k_at). out = softmax(scale *
 * q.K) V over those positions, computed as ggml's CPU flash attention does
 * for fewer than 64 query rows: Q rounded to fp16, ggml's f16 dot, and an
 * fp16 V accumulator (simd/ops_ref.c). */
struct ft_attn_kv {
    const uint16_t *k;        /* the layer's K pool (fp16 bits), head offset applied */
    const uint16_t *v;        /* the layer's V pool, head offset applied */
    const int32_t *blocks;    /* the sequence's block table */
    int32_t block_tokens;
    int64_t k_row, v_row;     /* elements from one token's row to the next, within a block */
    int64_t k_block, v_block; /* elements from one block to the next */
};
/* Key and value of position j. */
static inline const uint16_t *ft_attn_k_at(const struct ft_attn_kv *kv, int32_t j) {
    return kv->k + kv->blocks[j / kv->block_tokens] * kv->k_block + (j % kv->block_tokens) * kv->k_row;
}
static inline const uint16_t *ft_attn_v_at(const struct ft_attn_kv *kv, int32_t j) {
    return kv->v + kv->blocks[j / kv->block_tokens] * kv->v_block + (j % kv->block_tokens) * kv->v_row;
}
/* scratch: at least dk + dv floats. */
void ft_attention_ref(const float *q, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                      int32_t p0, int32_t p1, float *out, float *scratch);
/* The same with an f32 V accumulator throughout: what the per-ISA attention
 * kernels compute (they are tested against it). The fp16 accumulator of
 * ft_attention_ref moves outputs by up to 2^-11 relative, which quantized
 * models can turn into logit differences of a few tenths. */
void ft_attention_f32acc_ref(const float *q, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                             int32_t p0, int32_t p1, float *out, float *scratch);

/* ft_attention_ref with an attention sink (gpt-oss): one more logit, `sink`,
 * in the softmax's sum, with no value -- applied after the keys as ggml's
 * flash attention applies it. */
void ft_attention_sink_ref(const float *q, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                           int32_t p0, int32_t p1, float sink, float *out, float *scratch);

/* ggml's query and key tile; a batch of at least FT_ATTN_TILE query rows
 * (and dv a multiple of 16) goes through its tiled flash attention. */
#define FT_ATTN_TILE 64
/* The same attention as ggml's tiled flash attention computes it: Q in f32,
 * keys in tiles of FT_ATTN_TILE positions (aligned to multiples of it),
 * the softmax updated once per tile with ggml's vector exp, f32 V
 * accumulator. scratch: at least FT_ATTN_TILE floats. */
void ft_attention_tiled_ref(const float *q, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                            int32_t p0, int32_t p1, float *out, float *scratch);

/* ft_attention_tiled_ref with an attention sink (ft_attention_sink_ref). */
void ft_attention_tiled_sink_ref(const float *q, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                                 int32_t p0, int32_t p1, float sink, float *out, float *scratch);
/* Normalize one split-KV part covering all of a query's keys (ft_attn_rows:
 * unnormalized accumulator acc, max m, sum s) with an attention sink, as
 * ggml applies it: out = acc' / (s' ) after rescaling by the sink. acc is
 * modified; out may be acc. */
void ft_attention_sink_finish(float sink, float m, float s, float *acc, int64_t dv, float *out);

/* A block of query rows of one sequence against one KV head: for row
 * i < n_rows and query head h < n_heads (the heads sharing that KV head),
 *   out + i * out_row + h * dv = attention of q + i * q_row + h * dk over
 *   positions p0[i]..p1[i] (empty when p0 > p1: out = 0),
 * each as ft_attention_ref computes it.
 *
 * Split-KV ("flash decoding"): with part_max set (levels whose table says
 * attention_splits), the call computes one part of the softmax instead --
 * out gets the unnormalized accumulator sum_j exp(s_j - m) v_j, and
 * part_max[i * part_row + h] = m (the max score over p0[i]..p1[i]),
 * part_sum[i * part_row + h] = sum_j exp(s_j - m); an empty range gives
 * m = -inf, sum 0, out 0. Parts over disjoint key ranges combine exactly
 * with ft_attention_merge, so threads can share one query's keys. */
struct ft_attn_rows {
    const float *q;
    int64_t q_row;
    float *out;
    int64_t out_row;
    int n_rows;
    int n_heads;
    const int32_t *p0;
    const int32_t *p1;
    float *part_max; /* NULL: normalized output */
    float *part_sum;
    int64_t part_row;
};
/* ft_attention_ref per row and head; scratch: at least dk + dv floats.
 * Never splits (part_max must be NULL): its numerics are llama.cpp's. */
void ft_attention_rows_ref(const struct ft_attn_rows *a, int64_t dk, int64_t dv, float scale,
                           const struct ft_attn_kv *kv, void *scratch);

/* Combine n_parts split-KV parts of one query head (see ft_attn_rows):
 * part i has accumulator acc + i * acc_stride (dv floats), max m[i *
 * ml_stride] and sum l[i * ml_stride]. With M = max m_i,
 *   out = sum_i exp(m_i - M) acc_i / sum_i exp(m_i - M) l_i,
 * out = 0 when every part is empty. */
void ft_attention_merge(const float *acc, int64_t acc_stride, const float *m, const float *l, int64_t ml_stride,
                        int n_parts, int64_t dv, float *out);

/* Convert n_rows rows of k floats to `type` (the weights' vec_dot_type)
 * with its activation quantizer (from_float_act), row i at
 * out + i * ft_row_size(type, k). F32 copies. */
void ft_convert_rows_ref(enum ft_type type, const float *x, int64_t n_rows, int64_t k, void *out);

/* out[t * ld_out + r] = dot(W row r, A row t) for r in [r0, r1), t < n_tok.
 * W rows are w_row_size bytes apart, A rows (already in the vec_dot_type of
 * W's type) a_row_size bytes apart; k is the row length in elements. The
 * dot product is the given vec_dot (from ft_type_traits), so the same loop
 * serves the reference and the per-ISA kernels. */
void ft_matmul_rows_ref(ft_vec_dot_fn vec_dot, const void *w, size_t w_row_size, int64_t k,
                        int64_t r0, int64_t r1, const void *a, size_t a_row_size, int64_t n_tok,
                        float *out, int64_t ld_out);

/* ---- per-level fast versions ---------------------------------------------------
 *
 * The ops above, and a GEMM for float weights, as each kernel level
 * (include/ft/cpu.h) implements them; a slot a level has no faster version
 * of holds the _ref function (or NULL for the GEMM). Filled once per level,
 * like the type table; tests/unit/test_float_kernels.c checks every slot
 * of every level against the reference. */
struct ft_float_kernels {
    /* Prefill GEMM for F32 / F16 / BF16 weights:
     *   c[i * ldc + r] = dot(A row i, W row r), i < m, r in [n0, n1),
     * with A's rows first rounded to the weight type's vec_dot_type (fp16
     * for F16, bf16 for BF16) and the products accumulated in f32, so it
     * agrees with ft_convert_rows_ref + ft_matmul_rows_ref up to the order
     * of the f32 additions. A is packed once (gemm_pack, panels of gemm_mr
     * rows, threads may pack disjoint panel ranges [p0, p1)) and shared by
     * all threads; threads split the weight rows, n0 a multiple of
     * gemm_nr. gemm_mr == 0: this level has no GEMM. */
    int gemm_mr;
    int gemm_nr;
    /* Fewer rows than this: the vec_dot loop (ft_matmul_rows_ref) is faster. */
    int gemm_min_m;
    /* Bytes of packed A for m rows of k; 0 when wt is not handled. */
    size_t (*gemm_packed_size)(enum ft_type wt, int64_t m, int64_t k);
    void (*gemm_pack)(enum ft_type wt, const float *a, int64_t lda, int64_t m, int64_t k, int64_t p0, int64_t p1,
                      void *packed);
    void (*gemm)(enum ft_type wt, const void *w, size_t w_row, int64_t k, int64_t n0, int64_t n1,
                 const void *packed, int64_t m, float *c, int64_t ldc);

    /* Attention (ft_attention_rows_ref's contract) and the bytes of
     * scratch one call needs for a block of n_rows x n_heads queries. */
    void (*attention)(const struct ft_attn_rows *a, int64_t dk, int64_t dv, float scale,
                      const struct ft_attn_kv *kv, void *scratch);
    size_t (*attention_scratch)(int n_rows, int n_heads, int64_t dk, int64_t dv);
    /* The attention kernel writes split-KV parts when asked (part_max). */
    bool attention_splits;

    /* Row ops with the contracts of their _ref functions above. */
    void (*rmsnorm)(float *y, const float *x, const float *w, int64_t n, float eps);
    void (*rope_apply)(float *x, int n_dims, bool neox, const float *cache);
    void (*swiglu)(float *y, const float *g, const float *u, int64_t n);
    void (*geglu)(float *y, const float *g, const float *u, int64_t n);
};

/* F16 weights' prefill GEMM in bf16 on the amx level's AMX-BF16 tiles
 * (`--f16-bf16`): weights and activations rounded to bf16, products and
 * sums in f32, each product within 2^-7 relative of the F16 contract's.
 * Off by default: it changes the numbers. Set it before any forward pass.
 * False when asked for on a CPU without AMX-BF16 (nothing changes). */
bool ft_float_set_f16_via_bf16(bool on);

/* The table of the level in use (ft_cpu_isa()); never NULL. */
const struct ft_float_kernels *ft_float_kernels(void);
/* The table of one level; NULL when this CPU or build cannot run it. */
const struct ft_float_kernels *ft_float_kernels_isa(enum ft_isa isa);

#endif
