/* AVX2 attention over the F16 KV cache: the "avx2" level's
 * ft_float_kernels.attention. The scheme and numerics of avx512_attn.c
 * (see there) with tiles of 32 keys (two KV-cache blocks; each key's row
 * is looked up in the block table): K tile widened and transposed to
 * kt[d][32], V tile widened to vf[32][dv], online softmax per query with
 * one rescale per tile. */
#include "ft/common.h"
#include "ft/ops.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/x86/avx2_common.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* Keys per tile: the softmax bookkeeping (a horizontal max and sum, one
 * expf, the rescale of the accumulator in memory) is paid once per tile,
 * so a wide tile keeps it small next to the 2 x 32 x d multiply-adds. */
#define TILE 32
#define GROUPS (TILE / 8)

static inline int64_t up8(int64_t n) { return (n + 7) & ~(int64_t)7; }

static size_t scratch_floats(int nq, int64_t dk, int64_t dv) {
    return (size_t)nq * (size_t)up8(dk) + (size_t)up8(dk) * TILE + (size_t)TILE * (size_t)up8(dv) +
           (size_t)nq * (size_t)up8(dv) + 2 * (size_t)up8(nq) + TILE;
}

static size_t attention_scratch(int n_rows, int n_heads, int64_t dk, int64_t dv) {
    return scratch_floats(n_rows * n_heads, dk, dv) * sizeof(float) + 32;
}

/* Scores of n2 (1 or 2) queries against the tile's keys, 8 per ymm. */
static inline void scores2(const float *q0, const float *q1, int n2, const float *kt, int64_t dk,
                           __m256 s[2][GROUPS]) {
    for (int g = 0; g < GROUPS; g++)
        s[0][g] = s[1][g] = _mm256_setzero_ps();
    for (int64_t d = 0; d < dk; d++) {
        const float *kd = kt + d * TILE;
        const __m256 a = _mm256_broadcast_ss(q0 + d);
        const __m256 b = _mm256_broadcast_ss((n2 > 1 ? q1 : q0) + d);
        for (int g = 0; g < GROUPS; g++) {
            const __m256 k = _mm256_load_ps(kd + 8 * g);
            s[0][g] = _mm256_fmadd_ps(a, k, s[0][g]);
            s[1][g] = _mm256_fmadd_ps(b, k, s[1][g]);
        }
    }
}

/* Online softmax and P V for query qi with scores s (raw) over keys
 * jb..jb+nk-1, of which p0..p1 count. */
static inline void update(int qi, const __m256 s[GROUPS], float scale, int32_t jb, int nk, int32_t p0, int32_t p1,
                          const float *vf, int64_t dvp, float *acc, float *mx, float *sum, float *pb) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 sc[GROUPS], okf[GROUPS];
    __m256 bmv = _mm256_set1_ps(-INFINITY);
    for (int g = 0; g < GROUPS; g++) {
        const __m256i lane = _mm256_add_epi32(_mm256_set1_epi32(jb + 8 * g), iota);
        /* p0 <= lane <= p1 */
        const __m256i bad = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(p0), lane),
                                            _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(p1)));
        okf[g] = _mm256_castsi256_ps(_mm256_andnot_si256(bad, _mm256_set1_epi32(-1)));
        sc[g] = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_mul_ps(s[g], _mm256_set1_ps(scale)), okf[g]);
        bmv = _mm256_max_ps(bmv, sc[g]);
    }
    const float bm = ft_hmax256(bmv);
    if (bm == -INFINITY)
        return;
    const float m_new = bm > mx[qi] ? bm : mx[qi];
    const float c = mx[qi] == -INFINITY ? 0.0f : expf(mx[qi] - m_new);
    __m256 psum = _mm256_setzero_ps();
    for (int g = 0; g < GROUPS; g++) {
        const __m256 p = _mm256_and_ps(okf[g], ft_exp256(_mm256_sub_ps(sc[g], _mm256_set1_ps(m_new))));
        psum = _mm256_add_ps(psum, p);
        _mm256_store_ps(pb + 8 * g, p);
    }
    sum[qi] = sum[qi] * c + ft_hsum256(psum);
    mx[qi] = m_new;
    float *ac = acc + (size_t)qi * dvp;
    const __m256 cv = _mm256_set1_ps(c);
    for (int64_t d = 0; d < dvp; d += 32) {
        const int nv = (int)FT_MIN(4, (dvp - d) / 8);
        __m256 o[4];
        for (int t = 0; t < 4; t++)
            o[t] = t < nv ? _mm256_mul_ps(_mm256_load_ps(ac + d + 8 * t), cv) : _mm256_setzero_ps();
        for (int j = 0; j < nk; j++) {
            const __m256 pj = _mm256_broadcast_ss(pb + j);
            const float *vj = vf + j * dvp + d;
            for (int t = 0; t < 4; t++)
                if (t < nv)
                    o[t] = _mm256_fmadd_ps(pj, _mm256_load_ps(vj + 8 * t), o[t]);
        }
        for (int t = 0; t < nv; t++)
            _mm256_store_ps(ac + d + 8 * t, o[t]);
    }
}

static void attention(const struct ft_attn_rows *a, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                      void *scratch) {
    const int nq = a->n_rows * a->n_heads;
    const int64_t dkp = up8(dk), dvp = up8(dv);
    float *base = (float *)(((uintptr_t)scratch + 31) & ~(uintptr_t)31);
    float *qf = base;
    float *kt = qf + (size_t)nq * dkp;
    float *vf = kt + dkp * TILE;
    float *acc = vf + TILE * dvp;
    float *mx = acc + (size_t)nq * dvp;
    float *sum = mx + up8(nq);
    float *pb = sum + up8(nq);

    int32_t jlo = INT32_MAX, jhi = -1;
    for (int r = 0; r < a->n_rows; r++) {
        if (a->p0[r] <= a->p1[r]) {
            jlo = FT_MIN(jlo, a->p0[r]);
            jhi = FT_MAX(jhi, a->p1[r]);
        }
        for (int h = 0; h < a->n_heads; h++) {
            const float *src = a->q + r * a->q_row + h * dk;
            float *dst = qf + (size_t)(r * a->n_heads + h) * dkp;
            for (int64_t d = 0; d < dk; d += 8) {
                const __m256 v = ft_load8_ps(src + d, dk - d);
                _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
            }
        }
    }
    for (int i = 0; i < nq; i++) {
        mx[i] = -INFINITY;
        sum[i] = 0.0f;
        for (int64_t d = 0; d < dvp; d += 8)
            _mm256_store_ps(acc + (size_t)i * dvp + d, _mm256_setzero_ps());
    }

    for (int32_t jb = jhi < 0 ? 0 : jlo / 8 * 8; jb <= jhi; jb += TILE) {
        const int nk = (int)FT_MIN(TILE, jhi + 1 - jb);
        const uint16_t *krow[TILE], *vrow[TILE]; /* NULL: outside [jlo, jhi] */
        for (int j = 0; j < TILE; j++) {
            const bool in = j < nk && jb + j >= jlo;
            krow[j] = in ? ft_attn_k_at(kv, jb + j) : NULL;
            vrow[j] = in ? ft_attn_v_at(kv, jb + j) : NULL;
        }
        /* K widened and transposed to kt[d][TILE], V widened to vf[TILE][dvp];
         * keys outside [jlo, jhi] are zero (and masked in update) */
        for (int g = 0; g < GROUPS; g++) {
            for (int64_t d0 = 0; d0 < dk; d0 += 8) {
                __m256 r[8];
                for (int j = 0; j < 8; j++)
                    r[j] = krow[8 * g + j] ? _mm256_cvtph_ps(ft_load8_u16(krow[8 * g + j] + d0, dk - d0))
                                           : _mm256_setzero_ps();
                ft_transpose8(r);
                for (int i = 0; i < 8 && d0 + i < dk; i++)
                    _mm256_store_ps(kt + (d0 + i) * TILE + 8 * g, r[i]);
            }
        }
        for (int j = 0; j < nk; j++)
            for (int64_t d = 0; d < dv; d += 8)
                _mm256_store_ps(vf + j * dvp + d,
                                vrow[j] ? _mm256_cvtph_ps(ft_load8_u16(vrow[j] + d, dv - d)) : _mm256_setzero_ps());

        for (int i0 = 0; i0 < nq; i0 += 2) {
            const int n2 = FT_MIN(2, nq - i0);
            bool live[2] = {false, false};
            for (int i = 0; i < n2; i++) {
                const int r = (i0 + i) / a->n_heads;
                live[i] = a->p0[r] <= jb + nk - 1 && a->p1[r] >= jb;
            }
            if (!live[0] && !live[1])
                continue;
            __m256 s[2][GROUPS];
            scores2(qf + (size_t)i0 * dkp, qf + (size_t)(i0 + n2 - 1) * dkp, n2, kt, dk, s);
            for (int i = 0; i < n2; i++) {
                const int r = (i0 + i) / a->n_heads;
                if (live[i])
                    update(i0 + i, s[i], scale, jb, nk, a->p0[r], a->p1[r], vf, dvp, acc, mx, sum, pb);
            }
        }
    }

    for (int i = 0; i < nq; i++) {
        const int r = i / a->n_heads, h = i % a->n_heads;
        float *dst = a->out + r * a->out_row + h * dv;
        /* a split-KV part keeps its accumulator unnormalized (ops.h) */
        const __m256 inv = _mm256_set1_ps(a->part_max ? 1.0f : sum[i] == 0.0f ? 0.0f : 1.0f / sum[i]);
        if (a->part_max) {
            a->part_max[r * a->part_row + h] = mx[i];
            a->part_sum[r * a->part_row + h] = sum[i];
        }
        for (int64_t d = 0; d < dv; d += 8)
            _mm256_maskstore_ps(dst + d, ft_lanes8(dv - d), _mm256_mul_ps(_mm256_load_ps(acc + (size_t)i * dvp + d), inv));
    }
}

void ft_avx2_attn_fill(struct ft_level *l) {
    struct ft_float_kernels *t = &l->ops;
    t->attention = attention;
    t->attention_scratch = attention_scratch;
    t->attention_splits = true;
}
