/* Scalar reference ops (simd/ops_ref.c) against values worked out by hand,
 * so a convention (RoPE pairing, norm weight order, window bounds of
 * attention) is pinned independently of the model tests. */
#include "ft_test.h"

#include "ft/common.h"
#include "ft/ops.h"
#include "ft/types.h"

#include <math.h>
#include <stdint.h>

static struct ft_rope rope4(bool neox) {
    struct ft_rope r = {
        .n_dims = 4, .neox = neox, .freq_base = 10000.0f, .freq_scale = 1.0f, .ext_factor = 0.0f,
        .attn_factor = 1.0f, .beta_fast = 32.0f, .beta_slow = 1.0f, .n_ctx_orig = 4096, .freq_factors = NULL,
    };
    return r;
}

int main(void) {
    /* RMS norm: [3, 4] has mean square 12.5. */
    float x[2] = {3, 4}, w[2] = {2, 0.5f}, y[2];
    ft_rmsnorm_ref(y, x, w, 2, 0.0f);
    CHECK_NEAR(y[0], 3 / sqrt(12.5) * 2, 1e-6);
    CHECK_NEAR(y[1], 4 / sqrt(12.5) * 0.5, 1e-6);
    ft_rmsnorm_ref(x, x, NULL, 2, 0.0f); /* in place, no weight */
    CHECK_NEAR(x[1], 4 / sqrt(12.5), 1e-6);

    /* RoPE, 4 dims: pair 0 turns by pos rad, pair 1 by pos * 10000^-0.5. */
    float c[4];
    struct ft_rope r = rope4(false);
    ft_rope_cache_ref(&r, 1, c);
    CHECK_NEAR(c[0], cos(1.0), 1e-6);
    CHECK_NEAR(c[1], sin(1.0), 1e-6);
    CHECK_NEAR(c[2], cos(0.01), 1e-6);
    CHECK_NEAR(c[3], sin(0.01), 1e-6);
    float v[5] = {1, 0, 1, 0, 7};
    ft_rope_apply_ref(v, 4, false, c); /* normal: pairs (0,1), (2,3) */
    CHECK_NEAR(v[0], cos(1.0), 1e-6);
    CHECK_NEAR(v[1], sin(1.0), 1e-6);
    CHECK_NEAR(v[2], cos(0.01), 1e-6);
    CHECK_NEAR(v[3], sin(0.01), 1e-6);
    CHECK(v[4] == 7); /* beyond n_dims: untouched */
    float nx[4] = {1, 1, 0, 0};
    ft_rope_apply_ref(nx, 4, true, c); /* NeoX: pairs (0,2), (1,3) */
    CHECK_NEAR(nx[0], cos(1.0), 1e-6);
    CHECK_NEAR(nx[2], sin(1.0), 1e-6);
    CHECK_NEAR(nx[1], cos(0.01), 1e-6);
    CHECK_NEAR(nx[3], sin(0.01), 1e-6);
    ft_rope_cache_ref(&r, 0, c); /* position 0 is the identity */
    CHECK(c[0] == 1 && c[1] == 0 && c[2] == 1 && c[3] == 0);
    r.freq_scale = 0.5f; /* linear scaling halves the angles */
    ft_rope_cache_ref(&r, 2, c);
    CHECK_NEAR(c[1], sin(1.0), 1e-6);
    const float ff[2] = {1.0f, 4.0f}; /* rope_freqs divide the angles */
    r.freq_scale = 1.0f;
    r.freq_factors = ff;
    ft_rope_cache_ref(&r, 4, c);
    CHECK_NEAR(c[1], sin(4.0), 1e-6);
    CHECK_NEAR(c[3], sin(0.01), 1e-6);

    /* softmax, SiLU, GELU */
    float s[3] = {1, 2, 3};
    ft_softmax_ref(s, 3);
    CHECK_NEAR(s[0], 0.0900306, 1e-6);
    CHECK_NEAR(s[2], 0.6652410, 1e-6);
    CHECK_NEAR(ft_silu_ref(1.0f), 0.7310586, 1e-6);
    CHECK_NEAR(ft_gelu_tanh_ref(1.0f), 0.8411920, 1e-6);
    float g[3] = {1.0f, -20.0f, 12.0f}, u[3] = {2.0f, 3.0f, 0.5f}, o[3];
    ft_geglu_ref(o, g, u, 3);
    CHECK(o[0] == ft_fp16_to_fp32(ft_fp32_to_fp16(ft_gelu_tanh_ref(1.0f))) * 2.0f);
    CHECK(o[1] == 0.0f && o[2] == 6.0f);
    ft_swiglu_ref(o, g, u, 1);
    CHECK_NEAR(o[0], 0.7310586 * 2, 1e-6);

    /* Attention over a block-paged F16 cache: positions 0..2 in blocks 5, 2
     * with 2 tokens per block; keys along e0 with scores 0, 1, 2. */
    uint16_t kc[8 * 2], vc[8 * 2];
    for (int i = 0; i < 16; i++)
        kc[i] = vc[i] = ft_fp32_to_fp16(0.0f);
    const int32_t blocks[2] = {5, 2};
    const int cell[3] = {10, 11, 4};
    for (int p = 0; p < 3; p++) {
        kc[cell[p] * 1] = ft_fp32_to_fp16((float)p); /* k_row = 1 */
        vc[cell[p] * 1] = ft_fp32_to_fp16((float)(10 * (p + 1)));
    }
    const struct ft_attn_kv kv = {kc, vc, blocks, 2, 1, 1, 2, 2};
    float tmp[4];
    const float q = 1.0f;
    float out;
    ft_attention_ref(&q, 1, 1, 1.0f, &kv, 0, 2, &out, tmp);
    const double e0 = 1, e1 = exp(1.0), e2 = exp(2.0);
    /* the V accumulator is fp16 (ggml's): each of the 5 roundings of an
     * accumulator below 64 is off by at most 2^-6 / 2, times weights <= 1 */
    CHECK_NEAR(out, (10 * e0 + 20 * e1 + 30 * e2) / (e0 + e1 + e2), 5 * 0x1p-7);
    ft_attention_ref(&q, 1, 1, 1.0f, &kv, 1, 2, &out, tmp); /* window: positions 1..2 */
    CHECK_NEAR(out, (20 * e1 + 30 * e2) / (e1 + e2), 5 * 0x1p-7);
    ft_attention_ref(&q, 1, 1, 1.0f, &kv, 0, 0, &out, tmp); /* causal: position 0 only */
    CHECK_NEAR(out, 10, 1e-6);

    /* fp16 accumulator, worked by hand: two keys with score 0 and V = 2048,
     * then 1. acc = 2048, then fp16(2048 + 1) = 2048 (2049 is a tie between
     * 2048 and 2050, to even); out = 2048 / 2 = 1024 where an f32
     * accumulator would give 1024.5. */
    uint16_t k2[2] = {ft_fp32_to_fp16(0.0f), ft_fp32_to_fp16(0.0f)};
    uint16_t v2[2] = {ft_fp32_to_fp16(2048.0f), ft_fp32_to_fp16(1.0f)};
    const int32_t blk0[1] = {0};
    const struct ft_attn_kv kv2 = {k2, v2, blk0, 2, 1, 1, 2, 2};
    ft_attention_ref(&q, 1, 1, 1.0f, &kv2, 0, 1, &out, tmp);
    CHECK(out == 1024.0f);
    /* where fp16 would overflow (60000 + 60000 > 65504) ggml returns inf; we
     * redo the row in f32 */
    v2[0] = v2[1] = ft_fp32_to_fp16(60000.0f);
    ft_attention_ref(&q, 1, 1, 1.0f, &kv2, 0, 1, &out, tmp);
    CHECK(out == 60000.0f);

    /* matmul rows with the F32 dot: out[t][r] = W[r] . A[t] */
    const float W[3][2] = {{1, 2}, {3, 4}, {5, 6}}, A[2][2] = {{1, 0}, {1, 1}};
    float M[2][3] = {{0}};
    const struct ft_type_info *ti = ft_type_traits(FT_TYPE_F32);
    CHECK(ti && ti->vec_dot);
    if (ti && ti->vec_dot) {
        ft_matmul_rows_ref(ti->vec_dot, W, sizeof(W[0]), 2, 1, 3, A, sizeof(A[0]), 2, &M[0][0], 3);
        CHECK(M[0][0] == 0 && M[0][1] == 3 && M[0][2] == 5 && M[1][1] == 7 && M[1][2] == 11);
    }
    return ft_test_finish("test_ops_ref");
}
