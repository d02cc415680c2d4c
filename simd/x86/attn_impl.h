/* Attention over the F16 KV cache (ft_float_kernels.attention,
 * include/ft/ops.h) written once over the vector names of
 * simd/x86/vec256.h / vec512.h: avx2_attn.c includes this with vec256.h,
 * avx512_attn.c with vec512.h. The including file defines FT_ATTN_FILL
 * (its fill function) and three blocking constants, chosen for its
 * register file (16 ymm or 32 zmm):
 *   FT_ATTN_GROUPS   vectors of keys per tile: a tile is TILE = GROUPS x
 *                    FTV_N keys;
 *   FT_ATTN_QUERIES  queries scored together against one tile (they share
 *                    the loads of K);
 *   FT_ATTN_CHAINS   independent FMA chains per score vector over d, added
 *                    at the end.
 * They decide the order of the f32 additions, so each level keeps its own.
 *
 * One call handles a block of query rows of one sequence and the query
 * heads that share one KV head (GQA), so every K and V row is loaded and
 * widened once for all of them. Keys go in tiles of TILE, the first one
 * starting at the lowest position rounded down to a multiple of FTV_N:
 *   - K tile: widened and transposed to kt[d][TILE], so the scores of one
 *     query are dk broadcast-FMAs per vector of keys;
 *   - V tile: widened to vf[TILE][dv];
 *   - per query, online softmax (flash attention): m = running max, l =
 *     running sum of exp(s - m), acc = running sum of exp(s - m) v; a new
 *     max rescales acc and l by exp(m_old - m_new) once per tile, so the
 *     bookkeeping (a horizontal max and sum, one expf, the rescale of the
 *     accumulator in memory) is paid once per TILE keys.
 * Numerics as ft_attention_f32acc_ref: Q rounded to fp16, products and sums
 * in f32, V accumulated in f32, masked keys contribute exactly 0. Only the
 * order of additions and the tile-wise (rather than key-wise) rescaling
 * differ, and exp is a polynomial within 2 ulp of expf. */
#include "ft/common.h"
#include "ft/ops.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/x86/vec_math.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#if !defined(FT_ATTN_FILL) || !defined(FT_ATTN_GROUPS) || !defined(FT_ATTN_QUERIES) || !defined(FT_ATTN_CHAINS)
#error "define FT_ATTN_FILL, FT_ATTN_GROUPS, FT_ATTN_QUERIES and FT_ATTN_CHAINS before including attn_impl.h"
#endif

#define GROUPS FT_ATTN_GROUPS
#define TILE (FT_ATTN_GROUPS * FTV_N)
#define NQ FT_ATTN_QUERIES
#define CHAINS FT_ATTN_CHAINS

static inline int64_t up_n(int64_t n) { return (n + FTV_N - 1) / FTV_N * FTV_N; }

/* Scratch, in floats, each part a multiple of FTV_N floats (one vector). */
static size_t scratch_floats(int nq, int64_t dk, int64_t dv) {
    return (size_t)nq * (size_t)up_n(dk) /* q */ + (size_t)up_n(dk) * TILE /* kt */ +
           (size_t)TILE * (size_t)up_n(dv) /* vf */ + (size_t)nq * (size_t)up_n(dv) /* acc */ +
           2 * (size_t)up_n(nq) /* m, l */ + TILE /* p */;
}

static size_t attention_scratch(int n_rows, int n_heads, int64_t dk, int64_t dv) {
    return scratch_floats(n_rows * n_heads, dk, dv) * sizeof(float) + FTV_BYTES; /* + alignment slack */
}

/* s[i][g] lane l = q_i . key (FTV_N g + l) of the tile, for queries i < nq
 * (the others are left alone). */
static inline __attribute__((always_inline)) void scores_n(const float *const q[NQ], int nq, const float *kt,
                                                           int64_t dk, ftv s[NQ][GROUPS]) {
    ftv acc[CHAINS][NQ][GROUPS];
    for (int c = 0; c < CHAINS; c++)
        for (int i = 0; i < NQ; i++)
            for (int g = 0; g < GROUPS; g++)
                acc[c][i][g] = ftv_zero();
    int64_t d = 0;
    for (; d + CHAINS <= dk; d += CHAINS) {
        for (int c = 0; c < CHAINS; c++) {
            const float *kd = kt + (d + c) * TILE;
            ftv qd[NQ]; /* broadcast once for all groups (AVX2 has no broadcast operand) */
            for (int i = 0; i < NQ; i++)
                qd[i] = ftv_bcast(q[i] + d + c);
            for (int g = 0; g < GROUPS; g++) {
                const ftv k = ftv_load_a(kd + FTV_N * g);
                for (int i = 0; i < NQ; i++)
                    if (i < nq)
                        acc[c][i][g] = ftv_fmadd(qd[i], k, acc[c][i][g]);
            }
        }
    }
    for (; d < dk; d++) /* CHAINS > 1: the last d (dk mod CHAINS) go to chain 0 */
        for (int g = 0; g < GROUPS; g++)
            for (int i = 0; i < nq; i++)
                acc[0][i][g] = ftv_fmadd(ftv_bcast(q[i] + d), ftv_load_a(kt + d * TILE + FTV_N * g), acc[0][i][g]);
    for (int i = 0; i < nq; i++) {
        for (int g = 0; g < GROUPS; g++) {
            s[i][g] = acc[0][i][g];
            for (int c = 1; c < CHAINS; c++)
                s[i][g] = ftv_add(s[i][g], acc[c][i][g]);
        }
    }
}

/* All NQ queries without a test per FMA, or the last few. */
static inline void scores(const float *const q[NQ], int nq, const float *kt, int64_t dk, ftv s[NQ][GROUPS]) {
    if (nq == NQ)
        scores_n(q, NQ, kt, dk, s);
    else
        scores_n(q, nq, kt, dk, s);
}

/* Online softmax and P V for query qi with raw scores s over keys
 * jb..jb+nk-1, of which p0..p1 count. */
static inline void update(int qi, const ftv s[GROUPS], float scale, int32_t jb, int nk, int32_t p0, int32_t p1,
                          const float *vf, int64_t dvp, float *acc, float *mx, float *sum, float *pb) {
    ftv sc[GROUPS];
    ftvm ok[GROUPS];
    for (int g = 0; g < GROUPS; g++) {
        ok[g] = ftv_mask_range(jb + FTV_N * g, p0, p1);
        sc[g] = ftv_blend(ftv_set1(-INFINITY), ftv_mul(s[g], ftv_set1(scale)), ok[g]);
    }
    ftv bmv = sc[0];
    for (int g = 1; g < GROUPS; g++)
        bmv = ftv_max(bmv, sc[g]);
    const float bm = ftv_hmax(bmv);
    if (bm == -INFINITY) /* every key of the tile masked for this row */
        return;
    const float m_new = bm > mx[qi] ? bm : mx[qi];
    const float c = mx[qi] == -INFINITY ? 0.0f : expf(mx[qi] - m_new);
    ftv psum = ftv_zero();
    for (int g = 0; g < GROUPS; g++) {
        const ftv p = ftv_maskz(ok[g], ftv_exp(ftv_sub(sc[g], ftv_set1(m_new))));
        psum = g == 0 ? p : ftv_add(psum, p);
        ftv_store_a(pb + FTV_N * g, p);
    }
    sum[qi] = sum[qi] * c + ftv_hsum(psum);
    mx[qi] = m_new;
    float *ac = acc + (size_t)qi * dvp;
    const ftv cv = ftv_set1(c);
    for (int64_t d = 0; d < dvp; d += 4 * FTV_N) {
        const int nv = (int)FT_MIN(4, (dvp - d) / FTV_N);
        ftv o[4];
        for (int t = 0; t < 4; t++)
            o[t] = t < nv ? ftv_mul(ftv_load_a(ac + d + FTV_N * t), cv) : ftv_zero();
        for (int j = 0; j < nk; j++) {
            const ftv pj = ftv_bcast(pb + j);
            const float *vj = vf + j * dvp + d;
            for (int t = 0; t < 4; t++)
                if (t < nv)
                    o[t] = ftv_fmadd(pj, ftv_load_a(vj + FTV_N * t), o[t]);
        }
        for (int t = 0; t < nv; t++)
            ftv_store_a(ac + d + FTV_N * t, o[t]);
    }
}

static void attention(const struct ft_attn_rows *a, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv,
                      void *scratch) {
    const int nq = a->n_rows * a->n_heads;
    const int64_t dkp = up_n(dk), dvp = up_n(dv);
    float *base = (float *)(((uintptr_t)scratch + FTV_BYTES - 1) & ~(uintptr_t)(FTV_BYTES - 1));
    float *qf = base;
    float *kt = qf + (size_t)nq * dkp;
    float *vf = kt + dkp * TILE;
    float *acc = vf + TILE * dvp;
    float *mx = acc + (size_t)nq * dvp;
    float *sum = mx + up_n(nq);
    float *pb = sum + up_n(nq);

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
            for (int64_t d = 0; d < dk; d += FTV_N)
                ftv_store(dst + d, ftv_round_f16(ftv_load_n(src + d, dk - d)));
        }
    }
    for (int i = 0; i < nq; i++) {
        mx[i] = -INFINITY;
        sum[i] = 0.0f;
        for (int64_t d = 0; d < dvp; d += FTV_N)
            ftv_store_a(acc + (size_t)i * dvp + d, ftv_zero());
    }

    for (int32_t jb = jhi < 0 ? 0 : jlo / FTV_N * FTV_N; jb <= jhi; jb += TILE) {
        const int nk = (int)FT_MIN(TILE, jhi + 1 - jb);
        /* The tile's K and V rows (NULL: outside [jlo, jhi]), walking the
         * block table from jb's block. */
        const uint16_t *krow[TILE], *vrow[TILE];
        int32_t blk = jb / kv->block_tokens, row = jb % kv->block_tokens;
        for (int j = 0; j < TILE; j++) {
            const bool in = j < nk && jb + j >= jlo;
            krow[j] = in ? kv->k + kv->blocks[blk] * kv->k_block + row * kv->k_row : NULL;
            vrow[j] = in ? kv->v + kv->blocks[blk] * kv->v_block + row * kv->v_row : NULL;
            if (j + 1 < nk && ++row == kv->block_tokens) {
                blk++;
                row = 0;
            }
        }
        /* K widened and transposed to kt[d][TILE], V widened to vf[TILE][dvp];
         * keys outside [jlo, jhi] are zero (and masked in update; zero, so a
         * masked key's p = 0 never meets a stale inf) */
        for (int g = 0; g < GROUPS; g++) {
            for (int64_t d0 = 0; d0 < dk; d0 += FTV_N) {
                ftv r[FTV_N];
                for (int j = 0; j < FTV_N; j++) {
                    const uint16_t *k = krow[FTV_N * g + j];
                    r[j] = k ? ftv_load_f16_n(k + d0, dk - d0) : ftv_zero();
                }
                ftv_transpose(r);
                for (int i = 0; i < FTV_N && d0 + i < dk; i++)
                    ftv_store_a(kt + (d0 + i) * TILE + FTV_N * g, r[i]);
            }
        }
        for (int j = 0; j < nk; j++)
            for (int64_t d = 0; d < dv; d += FTV_N)
                ftv_store_a(vf + j * dvp + d, vrow[j] ? ftv_load_f16_n(vrow[j] + d, dv - d) : ftv_zero());

        for (int i0 = 0; i0 < nq; i0 += NQ) {
            const int n = FT_MIN(NQ, nq - i0);
            const float *qs[NQ];
            unsigned live = 0;
            for (int i = 0; i < NQ; i++) {
                const int qi = FT_MIN(i0 + i, nq - 1);
                const int r = qi / a->n_heads;
                qs[i] = qf + (size_t)qi * dkp;
                live |= (unsigned)(i < n && a->p0[r] <= jb + nk - 1 && a->p1[r] >= jb) << i;
            }
            if (!live)
                continue;
            ftv s[NQ][GROUPS];
            scores(qs, n, kt, dk, s);
            for (int i = 0; i < n; i++) {
                const int r = (i0 + i) / a->n_heads;
                if (live >> i & 1)
                    update(i0 + i, s[i], scale, jb, nk, a->p0[r], a->p1[r], vf, dvp, acc, mx, sum, pb);
            }
        }
    }

    for (int i = 0; i < nq; i++) {
        const int r = i / a->n_heads, h = i % a->n_heads;
        float *dst = a->out + r * a->out_row + h * dv;
        /* a split-KV part keeps its accumulator unnormalized (ops.h) */
        const ftv inv = ftv_set1(a->part_max ? 1.0f : sum[i] == 0.0f ? 0.0f : 1.0f / sum[i]);
        if (a->part_max) {
            a->part_max[r * a->part_row + h] = mx[i];
            a->part_sum[r * a->part_row + h] = sum[i];
        }
        for (int64_t d = 0; d < dv; d += FTV_N)
            ftv_store_m(dst + d, ftv_mask(dv - d), ftv_mul(ftv_load_a(acc + (size_t)i * dvp + d), inv));
    }
}

#undef GROUPS
#undef TILE
#undef NQ
#undef CHAINS

void FT_ATTN_FILL(struct ft_level *l) {
    struct ft_float_kernels *t = &l->ops;
    t->attention = attention;
    t->attention_scratch = attention_scratch;
    t->attention_splits = true;
}
