/* NEON attention over the F16 KV cache: the "neon" level's
 * ft_float_kernels.attention (include/ft/ops.h), inherited by neon-dotprod
 * and neon-i8mm. The scheme of avx512_attn.c and avx2_attn.c (see there),
 * in 4-lane vectors:
 *
 * One call handles a block of query rows of one sequence and the query
 * heads that share one KV head (GQA), so every K and V row is loaded and
 * widened once for all of them. Keys go in tiles of 16, each key's row
 * looked up in the block table (a tile may straddle two blocks):
 *   - K tile: widened (fcvtl) and transposed to kt[d][16], so the 16
 *     scores of one query are dk lane-broadcast FMAs (fmla by element);
 *     four queries at a time share the loads (16 accumulators);
 *   - V tile: widened to vf[16][dv];
 *   - per query, online softmax (flash attention): m = running max, l =
 *     running sum of exp(s - m), acc = running sum of exp(s - m) v; a new
 *     max rescales acc and l by exp(m_old - m_new) once per tile.
 * Split-KV parts (part_max set) keep the accumulator unnormalized.
 *
 * Numerics as ft_attention_f32acc_ref: Q rounded to fp16, products and
 * sums in f32, V accumulated in f32, masked keys contribute exactly 0. Only
 * the order of additions and the tile-wise (rather than key-wise)
 * rescaling differ; exp is ggml's (ft_neon_exp, ~1.5 ulp from expf). */
#include "ft/common.h"
#include "ft/ops.h"
#include "simd/arm/neon_common.h"
#include "simd/kernels.h"
#include "simd/level.h"

#include <arm_neon.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define TILE 16
#define GROUPS (TILE / 4)

static inline int64_t up4(int64_t n) { return (n + 3) & ~(int64_t)3; }

/* Scratch, in floats: Q (nq x dkp), kt (dkp x TILE), vf (TILE x dvp),
 * acc (nq x dvp), m and l (up4(nq) each), p (TILE). */
static size_t scratch_floats(int nq, int64_t dk, int64_t dv) {
    return (size_t)nq * (size_t)up4(dk) + (size_t)up4(dk) * TILE + (size_t)TILE * (size_t)up4(dv) +
           (size_t)nq * (size_t)up4(dv) + 2 * (size_t)up4(nq) + TILE;
}

static size_t attention_scratch(int n_rows, int n_heads, int64_t dk, int64_t dv) {
    return scratch_floats(n_rows * n_heads, dk, dv) * sizeof(float) + 16; /* + alignment slack */
}

/* s[i][g] lane l = q_i . k(4g + l) for four queries (rows of q past the
 * last live one repeat it); dkp is a multiple of 4 and both q and kt are
 * zero past dk. */
static inline void scores4(const float *const q[4], const float *kt, int64_t dkp, float32x4_t s[4][GROUPS]) {
    for (int i = 0; i < 4; i++)
        for (int g = 0; g < GROUPS; g++)
            s[i][g] = vdupq_n_f32(0.0f);
    for (int64_t d = 0; d < dkp; d += 4) {
        const float32x4_t q0 = vld1q_f32(q[0] + d), q1 = vld1q_f32(q[1] + d);
        const float32x4_t q2 = vld1q_f32(q[2] + d), q3 = vld1q_f32(q[3] + d);
#define FT_SCORE_LANE(L)                                                                                            \
    for (int g = 0; g < GROUPS; g++) {                                                                            \
        const float32x4_t k = vld1q_f32(kt + (d + (L)) * TILE + 4 * g);                                           \
        s[0][g] = vfmaq_laneq_f32(s[0][g], k, q0, (L));                                                           \
        s[1][g] = vfmaq_laneq_f32(s[1][g], k, q1, (L));                                                           \
        s[2][g] = vfmaq_laneq_f32(s[2][g], k, q2, (L));                                                           \
        s[3][g] = vfmaq_laneq_f32(s[3][g], k, q3, (L));                                                           \
    }
        FT_SCORE_LANE(0)
        FT_SCORE_LANE(1)
        FT_SCORE_LANE(2)
        FT_SCORE_LANE(3)
#undef FT_SCORE_LANE
    }
}

/* Online softmax and P V for query qi with raw scores s over the tile's
 * keys jb..jb+15, of which p0..p1 count; nk4: keys of the tile to sum
 * over, a multiple of 4 (vf rows past the tile's last key are zero). */
static inline void update(int qi, const float32x4_t s[GROUPS], float scale, int32_t jb, int nk4, int32_t p0,
                          int32_t p1, const float *vf, int64_t dvp, float *acc, float *mx, float *sum, float *pb) {
    const int32x4_t iota = {0, 1, 2, 3};
    uint32x4_t ok[GROUPS];
    float32x4_t sc[GROUPS];
    float32x4_t bmv = vdupq_n_f32(-INFINITY);
    for (int g = 0; g < GROUPS; g++) {
        const int32x4_t lane = vaddq_s32(vdupq_n_s32(jb + 4 * g), iota);
        ok[g] = vandq_u32(vcgeq_s32(lane, vdupq_n_s32(p0)), vcleq_s32(lane, vdupq_n_s32(p1)));
        sc[g] = vbslq_f32(ok[g], vmulq_n_f32(s[g], scale), vdupq_n_f32(-INFINITY));
        bmv = vmaxq_f32(bmv, sc[g]);
    }
    const float bm = vmaxvq_f32(bmv);
    if (bm == -INFINITY) /* every key of the tile masked for this query */
        return;
    const float m_new = bm > mx[qi] ? bm : mx[qi];
    const float c = mx[qi] == -INFINITY ? 0.0f : expf(mx[qi] - m_new);
    float32x4_t psum = vdupq_n_f32(0.0f);
    for (int g = 0; g < GROUPS; g++) {
        const float32x4_t p = vreinterpretq_f32_u32(
            vandq_u32(ok[g], vreinterpretq_u32_f32(ft_neon_exp(vsubq_f32(sc[g], vdupq_n_f32(m_new))))));
        psum = vaddq_f32(psum, p);
        vst1q_f32(pb + 4 * g, p);
    }
    sum[qi] = sum[qi] * c + vaddvq_f32(psum);
    mx[qi] = m_new;
    float *ac = acc + (size_t)qi * dvp;
    for (int64_t d = 0; d < dvp; d += 16) {
        const int nv = (int)FT_MIN(4, (dvp - d) / 4);
        float32x4_t o[4];
        for (int t = 0; t < 4; t++)
            o[t] = t < nv ? vmulq_n_f32(vld1q_f32(ac + d + 4 * t), c) : vdupq_n_f32(0.0f);
        for (int j = 0; j < nk4; j += 4) {
            const float32x4_t p = vld1q_f32(pb + j);
            const float *v0 = vf + (size_t)j * dvp + d;
#define FT_PV_LANE(L)                                                                                               \
    for (int t = 0; t < 4; t++)                                                                                   \
        if (t < nv)                                                                                               \
            o[t] = vfmaq_laneq_f32(o[t], vld1q_f32(v0 + (L) * dvp + 4 * t), p, (L));
            FT_PV_LANE(0)
            FT_PV_LANE(1)
            FT_PV_LANE(2)
            FT_PV_LANE(3)
#undef FT_PV_LANE
        }
        for (int t = 0; t < nv; t++)
            vst1q_f32(ac + d + 4 * t, o[t]);
    }
}

static void attention(const struct ft_attn_rows *a, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                      void *scratch) {
    const int nq = a->n_rows * a->n_heads;
    const int64_t dkp = up4(dk), dvp = up4(dv);
    float *base = (float *)(((uintptr_t)scratch + 15) & ~(uintptr_t)15);
    float *qf = base;
    float *kt = qf + (size_t)nq * dkp;
    float *vf = kt + dkp * TILE;
    float *acc = vf + TILE * dvp;
    float *mx = acc + (size_t)nq * dvp;
    float *sum = mx + up4(nq);
    float *pb = sum + up4(nq);

    /* Queries rounded to fp16 (as ggml converts Q to the cache's type),
     * zero past dk. */
    int32_t jlo = INT32_MAX, jhi = -1;
    for (int r = 0; r < a->n_rows; r++) {
        if (a->p0[r] <= a->p1[r]) {
            jlo = FT_MIN(jlo, a->p0[r]);
            jhi = FT_MAX(jhi, a->p1[r]);
        }
        for (int h = 0; h < a->n_heads; h++) {
            const float *src = a->q + r * a->q_row + h * dk;
            float *dst = qf + (size_t)(r * a->n_heads + h) * dkp;
            for (int64_t d = 0; d < dk; d += 4)
                vst1q_f32(dst + d, ft_neon_round_f16(ft_neon_load4(src + d, dk - d)));
        }
    }
    for (int i = 0; i < nq; i++) {
        mx[i] = -INFINITY;
        sum[i] = 0.0f;
        for (int64_t d = 0; d < dvp; d += 4)
            vst1q_f32(acc + (size_t)i * dvp + d, vdupq_n_f32(0.0f));
    }

    for (int32_t jb = jhi < 0 ? 0 : jlo / 4 * 4; jb <= jhi; jb += TILE) {
        const int nk = (int)FT_MIN(TILE, jhi + 1 - jb);
        const int nk4 = (int)up4(nk);
        const uint16_t *krow[TILE], *vrow[TILE]; /* NULL: outside [jlo, jhi] */
        for (int j = 0; j < TILE; j++) {
            const bool in = j < nk && jb + j >= jlo;
            krow[j] = in ? ft_attn_k_at(kv, jb + j) : NULL;
            vrow[j] = in ? ft_attn_v_at(kv, jb + j) : NULL;
        }
        /* K widened and transposed to kt[d][TILE] (zero rows past dk), V
         * widened to vf[TILE][dvp]; keys outside [jlo, jhi] are zero, so a
         * masked key's p = 0 never meets a stale inf or NaN */
        for (int g = 0; g < GROUPS; g++) {
            for (int64_t d0 = 0; d0 < dk; d0 += 4) {
                float32x4_t r[4];
                for (int j = 0; j < 4; j++)
                    r[j] = krow[4 * g + j] ? ft_neon_f16_to_f32(ft_neon_load4_u16(krow[4 * g + j] + d0, dk - d0))
                                           : vdupq_n_f32(0.0f);
                ft_neon_transpose4(r);
                for (int i = 0; i < 4; i++)
                    vst1q_f32(kt + (d0 + i) * TILE + 4 * g, r[i]);
            }
        }
        for (int j = 0; j < nk4; j++)
            for (int64_t d = 0; d < dv; d += 4)
                vst1q_f32(vf + (size_t)j * dvp + d,
                          vrow[j] ? ft_neon_f16_to_f32(ft_neon_load4_u16(vrow[j] + d, dv - d)) : vdupq_n_f32(0.0f));

        for (int i0 = 0; i0 < nq; i0 += 4) {
            const int n4 = FT_MIN(4, nq - i0);
            const float *qs[4];
            bool live[4];
            bool any = false;
            for (int i = 0; i < 4; i++) {
                const int qi = FT_MIN(i0 + i, nq - 1);
                const int r = qi / a->n_heads;
                qs[i] = qf + (size_t)qi * dkp;
                live[i] = i < n4 && a->p0[r] <= jb + nk - 1 && a->p1[r] >= jb;
                any |= live[i];
            }
            if (!any)
                continue;
            float32x4_t s[4][GROUPS];
            scores4(qs, kt, dkp, s);
            for (int i = 0; i < n4; i++) {
                const int r = (i0 + i) / a->n_heads;
                if (live[i])
                    update(i0 + i, s[i], scale, jb, nk4, a->p0[r], a->p1[r], vf, dvp, acc, mx, sum, pb);
            }
        }
    }

    for (int i = 0; i < nq; i++) {
        const int r = i / a->n_heads, h = i % a->n_heads;
        float *dst = a->out + r * a->out_row + h * dv;
        /* a split-KV part keeps its accumulator unnormalized (ops.h) */
        const float inv = a->part_max ? 1.0f : sum[i] == 0.0f ? 0.0f : 1.0f / sum[i];
        if (a->part_max) {
            a->part_max[r * a->part_row + h] = mx[i];
            a->part_sum[r * a->part_row + h] = sum[i];
        }
        for (int64_t d = 0; d < dv; d += 4)
            ft_neon_store4(dst + d, vmulq_n_f32(vld1q_f32(acc + (size_t)i * dvp + d), inv), dv - d);
    }
}

void ft_neon_attn_fill(struct ft_level *l) {
    struct ft_float_kernels *t = &l->ops;
    t->attention = attention;
    t->attention_scratch = attention_scratch;
    t->attention_splits = true;
}
