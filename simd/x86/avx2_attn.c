/* AVX2 attention over the F16 KV cache: the "avx2" level's
 * ft_float_kernels.attention. The scheme and numerics of avx512_attn.c
 * (see there) with tiles of 8 keys (half a KV-cache block, so a tile never
 * straddles two blocks): K tile widened and transposed to kt[d][8], V tile
 * widened to vf[8][dv], online softmax per query with one rescale per
 * tile. */
#include "ft/common.h"
#include "ft/ops.h"
#include "simd/kernels.h"
#include "simd/x86/avx2_common.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define TILE 8

static inline int64_t up8(int64_t n) { return (n + 7) & ~(int64_t)7; }

static size_t scratch_floats(int nq, int64_t dk, int64_t dv) {
    return (size_t)nq * (size_t)up8(dk) + (size_t)up8(dk) * TILE + (size_t)TILE * (size_t)up8(dv) +
           (size_t)nq * (size_t)up8(dv) + 2 * (size_t)up8(nq) + TILE;
}

static size_t attention_scratch(int n_rows, int n_heads, int64_t dk, int64_t dv) {
    return scratch_floats(n_rows * n_heads, dk, dv) * sizeof(float) + 32;
}

static inline void scores4(const float *const q[4], int n4, const float *kt, int64_t dk, __m256 s[4]) {
    __m256 a[4], b[4];
    for (int i = 0; i < 4; i++)
        a[i] = b[i] = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 2 <= dk; d += 2) {
        const __m256 k0 = _mm256_load_ps(kt + d * TILE), k1 = _mm256_load_ps(kt + (d + 1) * TILE);
        for (int i = 0; i < 4; i++) {
            if (i < n4) {
                a[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(q[i] + d), k0, a[i]);
                b[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(q[i] + d + 1), k1, b[i]);
            }
        }
    }
    for (; d < dk; d++)
        for (int i = 0; i < n4; i++)
            a[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(q[i] + d), _mm256_load_ps(kt + d * TILE), a[i]);
    for (int i = 0; i < 4; i++)
        s[i] = _mm256_add_ps(a[i], b[i]);
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

    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int32_t jb = jhi < 0 ? 0 : jlo / TILE * TILE; jb <= jhi; jb += TILE) {
        const int nk = (int)FT_MIN(TILE, jhi + 1 - jb);
        const int64_t cell = (int64_t)kv->blocks[jb / kv->block_tokens] * kv->block_tokens + jb % kv->block_tokens;
        const uint16_t *krow = kv->k + cell * kv->k_row;
        const uint16_t *vrow = kv->v + cell * kv->v_row;
        /* keys outside [jlo, jhi] are zero (and masked below) */
        for (int64_t d0 = 0; d0 < dk; d0 += 8) {
            __m256 r[8];
            for (int j = 0; j < 8; j++)
                r[j] = j < nk && jb + j >= jlo ? _mm256_cvtph_ps(ft_load8_u16(krow + j * kv->k_row + d0, dk - d0))
                                               : _mm256_setzero_ps();
            ft_transpose8(r);
            for (int i = 0; i < 8 && d0 + i < dk; i++)
                _mm256_store_ps(kt + (d0 + i) * TILE, r[i]);
        }
        for (int j = 0; j < TILE; j++)
            for (int64_t d = 0; d < dv; d += 8)
                _mm256_store_ps(vf + j * dvp + d, j < nk && jb + j >= jlo
                                                      ? _mm256_cvtph_ps(ft_load8_u16(vrow + j * kv->v_row + d, dv - d))
                                                      : _mm256_setzero_ps());

        const __m256i lane = _mm256_add_epi32(_mm256_set1_epi32(jb), iota);
        for (int i0 = 0; i0 < nq; i0 += 4) {
            const int n4 = FT_MIN(4, nq - i0);
            const float *qs[4];
            int live = 0;
            for (int i = 0; i < 4; i++) {
                const int qi = FT_MIN(i0 + i, nq - 1);
                const int r = qi / a->n_heads;
                qs[i] = qf + (size_t)qi * dkp;
                live |= (i < n4 && a->p0[r] <= jb + nk - 1 && a->p1[r] >= jb) << i;
            }
            if (!live)
                continue;
            __m256 s[4];
            scores4(qs, n4, kt, dk, s);
            for (int i = 0; i < n4; i++) {
                if (!(live >> i & 1))
                    continue;
                const int qi = i0 + i;
                const int r = qi / a->n_heads;
                /* p0 <= lane <= p1 */
                const __m256i ok = _mm256_andnot_si256(
                    _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(a->p0[r]), lane),
                                    _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(a->p1[r]))),
                    _mm256_set1_epi32(-1));
                const __m256 okf = _mm256_castsi256_ps(ok);
                const __m256 sc = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_mul_ps(s[i], _mm256_set1_ps(scale)), okf);
                const float bm = ft_hmax256(sc);
                if (bm == -INFINITY)
                    continue;
                const float m_new = bm > mx[qi] ? bm : mx[qi];
                const float c = mx[qi] == -INFINITY ? 0.0f : expf(mx[qi] - m_new);
                const __m256 p = _mm256_and_ps(okf, ft_exp256(_mm256_sub_ps(sc, _mm256_set1_ps(m_new))));
                sum[qi] = sum[qi] * c + ft_hsum256(p);
                mx[qi] = m_new;
                _mm256_store_ps(pb, p);
                float *ac = acc + (size_t)qi * dvp;
                const __m256 cv = _mm256_set1_ps(c);
                for (int64_t d = 0; d < dvp; d += 32) {
                    const int nv = (int)FT_MIN(4, (dvp - d) / 8);
                    __m256 o[4];
                    for (int t = 0; t < 4; t++)
                        o[t] = t < nv ? _mm256_mul_ps(_mm256_load_ps(ac + d + 8 * t), cv) : _mm256_setzero_ps();
                    for (int j = 0; j < nk; j++) {
                        const __m256 pj = _mm256_broadcast_ss(pb + j);
                        for (int t = 0; t < 4; t++)
                            if (t < nv)
                                o[t] = _mm256_fmadd_ps(pj, _mm256_load_ps(vf + j * dvp + d + 8 * t), o[t]);
                    }
                    for (int t = 0; t < nv; t++)
                        _mm256_store_ps(ac + d + 8 * t, o[t]);
                }
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

void ft_simd_fill_avx2_attn(struct ft_float_kernels *t) {
    t->attention = attention;
    t->attention_scratch = attention_scratch;
    t->attention_splits = true;
}
