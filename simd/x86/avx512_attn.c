/* AVX-512 attention over the F16 KV cache: the "avx512" level's
 * ft_float_kernels.attention (include/ft/ops.h).
 *
 * One call handles a block of query rows of one sequence and the query
 * heads that share one KV head (GQA), so every K and V row is loaded and
 * widened once for all of them. Keys go in tiles of 16 (one KV-cache block
 * row range: blocks hold FT_KV_BLOCK_TOKENS = 16 rows, and tiles start at
 * multiples of 16 so a tile never straddles two blocks):
 *   - K tile: widened and transposed to kt[d][16], so the 16 scores of one
 *     query are dk broadcast-FMAs (four queries at a time share the loads);
 *   - V tile: widened to vf[16][dv];
 *   - per query, online softmax (flash attention): m = running max, l =
 *     running sum of exp(s - m), acc = running sum of exp(s - m) v; a new
 *     max rescales acc and l by exp(m_old - m_new) once per tile.
 * Numerics as ft_attention_ref: Q rounded to fp16, products and sums in
 * f32, V accumulated in f32, masked keys contribute exactly 0. Only the
 * order of additions and the tile-wise (rather than key-wise) rescaling
 * differ, and exp is a polynomial within 2 ulp of expf. */
#include "ft/common.h"
#include "ft/ops.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/x86/avx512_common.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define TILE 16

static inline int64_t up16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* Scratch, in floats, each part a multiple of 16 floats (64 bytes). */
static size_t scratch_floats(int nq, int64_t dk, int64_t dv) {
    return (size_t)nq * (size_t)up16(dk) /* q */ + (size_t)up16(dk) * TILE /* kt */ +
           (size_t)TILE * (size_t)up16(dv) /* vf */ + (size_t)nq * (size_t)up16(dv) /* acc */ +
           2 * (size_t)up16(nq) /* m, l */ + TILE /* p */;
}

static size_t attention_scratch(int n_rows, int n_heads, int64_t dk, int64_t dv) {
    return scratch_floats(n_rows * n_heads, dk, dv) * sizeof(float) + 64; /* + alignment slack */
}

/* Scores of up to four queries against the tile: s[i][lane] = q_i . k_lane. */
static inline void scores4(const float *const q[4], int nq4, const float *kt, int64_t dk, __m512 s[4]) {
    __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    __m512 b[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t d = 0;
    for (; d + 2 <= dk; d += 2) {
        const __m512 k0 = _mm512_load_ps(kt + d * TILE), k1 = _mm512_load_ps(kt + (d + 1) * TILE);
        for (int i = 0; i < 4; i++) {
            if (i < nq4) {
                a[i] = _mm512_fmadd_ps(_mm512_set1_ps(q[i][d]), k0, a[i]);
                b[i] = _mm512_fmadd_ps(_mm512_set1_ps(q[i][d + 1]), k1, b[i]);
            }
        }
    }
    for (; d < dk; d++)
        for (int i = 0; i < nq4; i++)
            a[i] = _mm512_fmadd_ps(_mm512_set1_ps(q[i][d]), _mm512_load_ps(kt + d * TILE), a[i]);
    for (int i = 0; i < 4; i++)
        s[i] = _mm512_add_ps(a[i], b[i]);
}

static void attention(const struct ft_attn_rows *a, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                      void *scratch) {
    const int nq = a->n_rows * a->n_heads;
    const int64_t dkp = up16(dk), dvp = up16(dv);
    float *base = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *qf = base;
    float *kt = qf + (size_t)nq * dkp;
    float *vf = kt + dkp * TILE;
    float *acc = vf + TILE * dvp;
    float *mx = acc + (size_t)nq * dvp;
    float *sum = mx + up16(nq);
    float *pb = sum + up16(nq);

    /* Queries rounded to fp16 (as ggml converts Q to the cache's type). */
    int32_t jlo = INT32_MAX, jhi = -1;
    for (int r = 0; r < a->n_rows; r++) {
        if (a->p0[r] <= a->p1[r]) {
            jlo = FT_MIN(jlo, a->p0[r]);
            jhi = FT_MAX(jhi, a->p1[r]);
        }
        for (int h = 0; h < a->n_heads; h++) {
            const float *src = a->q + r * a->q_row + h * dk;
            float *dst = qf + (size_t)(r * a->n_heads + h) * dkp;
            for (int64_t d = 0; d < dk; d += 16) {
                const __m512 v = _mm512_maskz_loadu_ps(ft_mask16(dk - d), src + d);
                _mm512_storeu_ps(dst + d, _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
            }
        }
    }
    for (int i = 0; i < nq; i++) {
        mx[i] = -INFINITY;
        sum[i] = 0.0f;
        for (int64_t d = 0; d < dvp; d += 16)
            _mm512_store_ps(acc + (size_t)i * dvp + d, _mm512_setzero_ps());
    }

    for (int32_t jb = jhi < 0 ? 0 : jlo / TILE * TILE; jb <= jhi; jb += TILE) {
        const int nk = (int)FT_MIN(TILE, jhi + 1 - jb);
        const uint16_t *krow = ft_attn_k_at(kv, jb); /* the tile's keys: one block's rows */
        const uint16_t *vrow = ft_attn_v_at(kv, jb);
        /* K tile -> kt[d][key]; keys outside [jlo, jhi] are zero (and masked
         * below; zero, so a masked key's p = 0 never meets a stale inf). */
        for (int64_t d0 = 0; d0 < dk; d0 += 16) {
            __m512 r[16];
            for (int j = 0; j < 16; j++)
                r[j] = j < nk && jb + j >= jlo ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(ft_mask16(dk - d0), krow + j * kv->k_row + d0))
                              : _mm512_setzero_ps();
            ft_transpose16(r);
            for (int i = 0; i < 16 && d0 + i < dk; i++)
                _mm512_store_ps(kt + (d0 + i) * TILE, r[i]);
        }
        for (int j = 0; j < TILE; j++)
            for (int64_t d = 0; d < dv; d += 16)
                _mm512_store_ps(vf + j * dvp + d,
                                j < nk && jb + j >= jlo ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(ft_mask16(dv - d), vrow + j * kv->v_row + d))
                                       : _mm512_setzero_ps());

        const __m512i lane = _mm512_add_epi32(_mm512_set1_epi32(jb),
                                              _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
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
            __m512 s[4];
            scores4(qs, n4, kt, dk, s);
            for (int i = 0; i < n4; i++) {
                if (!(live >> i & 1))
                    continue;
                const int qi = i0 + i;
                const int r = qi / a->n_heads;
                const __mmask16 ok = _mm512_cmp_epi32_mask(lane, _mm512_set1_epi32(a->p0[r]), _MM_CMPINT_NLT) &
                                     _mm512_cmp_epi32_mask(lane, _mm512_set1_epi32(a->p1[r]), _MM_CMPINT_LE);
                const __m512 sc = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), ok, _mm512_mul_ps(s[i], _mm512_set1_ps(scale)));
                const float bm = ft_hmax512(sc);
                if (bm == -INFINITY) /* every key of the tile masked for this row */
                    continue;
                const float m_new = bm > mx[qi] ? bm : mx[qi];
                const float c = mx[qi] == -INFINITY ? 0.0f : expf(mx[qi] - m_new);
                const __m512 p = _mm512_maskz_mov_ps(ok, ft_exp512(_mm512_sub_ps(sc, _mm512_set1_ps(m_new))));
                sum[qi] = sum[qi] * c + ft_hsum512(p);
                mx[qi] = m_new;
                _mm512_store_ps(pb, p);
                float *ac = acc + (size_t)qi * dvp;
                const __m512 cv = _mm512_set1_ps(c);
                for (int64_t d = 0; d < dvp; d += 64) {
                    const int nv = (int)FT_MIN(4, (dvp - d) / 16);
                    __m512 o[4];
                    for (int t = 0; t < 4; t++)
                        o[t] = t < nv ? _mm512_mul_ps(_mm512_load_ps(ac + d + 16 * t), cv) : _mm512_setzero_ps();
                    for (int j = 0; j < nk; j++) {
                        const __m512 pj = _mm512_set1_ps(pb[j]);
                        for (int t = 0; t < 4; t++)
                            if (t < nv)
                                o[t] = _mm512_fmadd_ps(pj, _mm512_load_ps(vf + j * dvp + d + 16 * t), o[t]);
                    }
                    for (int t = 0; t < nv; t++)
                        _mm512_store_ps(ac + d + 16 * t, o[t]);
                }
            }
        }
    }

    for (int i = 0; i < nq; i++) {
        const int r = i / a->n_heads, h = i % a->n_heads;
        float *dst = a->out + r * a->out_row + h * dv;
        /* a split-KV part keeps its accumulator unnormalized (ops.h) */
        const __m512 inv = _mm512_set1_ps(a->part_max ? 1.0f : sum[i] == 0.0f ? 0.0f : 1.0f / sum[i]);
        if (a->part_max) {
            a->part_max[r * a->part_row + h] = mx[i];
            a->part_sum[r * a->part_row + h] = sum[i];
        }
        for (int64_t d = 0; d < dv; d += 16)
            _mm512_mask_storeu_ps(dst + d, ft_mask16(dv - d), _mm512_mul_ps(_mm512_load_ps(acc + (size_t)i * dvp + d), inv));
    }
}

void ft_avx512_attn_fill(struct ft_level *l) {
    struct ft_float_kernels *t = &l->ops;
    t->attention = attention;
    t->attention_scratch = attention_scratch;
    t->attention_splits = true;
}
