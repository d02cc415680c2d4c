/* The float-op tables (include/ft/ops.h: struct ft_float_kernels) of every
 * kernel level this machine (or qemu) can run, against the scalar
 * references:
 *   - GEMM (levels that have one) for F32, F16 and BF16 weights, on shapes
 *     with tails in every dimension (m not a multiple of the panel height,
 *     k odd and across the k-slice size, n not a multiple of gemm_nr) and
 *     with the weight rows split between two "threads" at a multiple of
 *     gemm_nr, against ft_convert_rows_ref + ft_matmul_rows_ref with the
 *     reference vec_dot: |fast - ref| <= 1e-5 * sum |a_i w_i| of the
 *     rounded operands; output columns outside [n0, n1) stay untouched;
 *   - attention against ft_attention_f32acc_ref per row and head, on a paged cache
 *     whose blocks are out of order, with causal, sliding-window and empty
 *     key ranges, GQA groups of 1..4 heads, head sizes with tails:
 *     |fast - ref| <= 1e-5 * max |v| (the output is a convex combination of
 *     V rows); on levels that split, also in split-KV parts (chunks of
 *     128 and 40 keys, lengths 1..1000) merged with ft_attention_merge;
 *   - on AVX-512 CPUs with AVX512_BF16, also the vdpbf16ps GEMM that the
 *     level keeps for CPUs where it beats the FMA path (a table filled with
 *     use_bf16_dp = 1);
 *   - RMS norm (sums in double), RoPE (normal and NeoX, partial rotation),
 *     GeGLU: bit-identical to the reference; SwiGLU within 4 ulp-ish
 *     (1e-6 relative + 1e-37) since its exp is a polynomial, bit-identical
 *     on the NEON levels, whose exp is the reference's (also where exp(-g)
 *     is subnormal, zero or inf).
 * With FT_ISA=<level> only that level is tested (tests/arm runs one level
 * per qemu run). Buffers are allocated to the exact size and used at
 * addresses that are not vector-aligned, so an out-of-bounds access or an
 * alignment assumption shows (under ASan too). */
#include "ft/common.h"
#include "ft/cpu.h"
#include "ft/ops.h"
#include "ft/types.h"
#include "ft_test.h"
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float rng_gauss(void) { return ft_test_rng_gauss(&g_rng); }

/* An exact-size buffer at an address 4 bytes past a 64-byte boundary (not
 * vector-aligned, but aligned for floats and fp16). */
static void *alloc_odd(size_t bytes, void **base) {
    char *p = malloc(bytes + 4);
    *base = p;
    return p + 4;
}

/* ---- GEMM ------------------------------------------------------------------ */

static double g_gemm_worst[FT_ISA_COUNT]; /* max error / tolerance */

/* rel_tol: the error allowed, relative to sum |a * w| of the output (1e-5:
 * only the order of f32 additions differs). Returns the largest |error|
 * seen relative to that sum. */
static double test_gemm_case_tol(enum ft_isa isa, const struct ft_float_kernels *fk, enum ft_type wt, int64_t m,
                                 int64_t k, int64_t n, float scale, double rel_tol) {
    const struct ft_type_info *ti = ft_type_traits_ref(wt);
    const enum ft_type vdt = ti->vec_dot_type;
    const size_t w_row = ft_row_size(wt, k);
    void *wb, *ab, *cb, *pb;
    char *w = alloc_odd(w_row * (size_t)n, &wb);
    const int64_t lda = k + 3; /* rows of A not packed back to back */
    float *a = alloc_odd(sizeof(float) * (size_t)(m * lda), &ab);
    float *c = alloc_odd(sizeof(float) * (size_t)(m * n), &cb);
    float *wf = malloc(sizeof(float) * (size_t)k);
    for (int64_t r = 0; r < n; r++) {
        for (int64_t i = 0; i < k; i++)
            wf[i] = rng_gauss() * scale;
        ti->from_float(wf, w + (size_t)r * w_row, k);
    }
    for (int64_t i = 0; i < m * lda; i++)
        a[i] = rng_gauss() * (i % 97 == 0 ? 30.0f : 1.0f);
    for (int64_t i = 0; i < m * n; i++)
        c[i] = 12345.0f; /* sentinel */

    const size_t psize = fk->gemm_packed_size(wt, m, k);
    CHECK(psize > 0);
    void *packed = alloc_odd(psize, &pb);
    const int64_t panels = (m + fk->gemm_mr - 1) / fk->gemm_mr;
    fk->gemm_pack(wt, a, lda, m, k, 0, panels / 2, packed); /* two "threads" pack */
    fk->gemm_pack(wt, a, lda, m, k, panels / 2, panels, packed);
    /* Rows [n0, n1) computed by two calls split at a multiple of gemm_nr;
     * n0 > 0 leaves columns to check untouched. */
    const int64_t n0a = n > fk->gemm_nr ? fk->gemm_nr : 0; /* columns below stay untouched */
    const int64_t split = FT_MIN(n, n0a + fk->gemm_nr);
    fk->gemm(wt, w, w_row, k, n0a, split, packed, m, c, n);
    if (split < n)
        fk->gemm(wt, w, w_row, k, split, n, packed, m, c, n);

    /* reference: rows converted to vdt, dots with the reference vec_dot */
    const size_t a_row = ft_row_size(vdt, k);
    char *ac = malloc(a_row * (size_t)m);
    for (int64_t i = 0; i < m; i++)
        ft_convert_rows_ref(vdt, a + i * lda, 1, k, ac + (size_t)i * a_row);
    float *ref = malloc(sizeof(float) * (size_t)(m * n));
    ft_matmul_rows_ref(ti->vec_dot, w, w_row, k, 0, n, ac, a_row, m, ref, n);
    const struct ft_type_info *vi = ft_type_traits_ref(vdt);
    float *af = malloc(sizeof(float) * (size_t)k);
    int bad = 0;
    double worst_rel = 0.0;
    for (int64_t i = 0; i < m; i++) {
        vi->to_float(ac + (size_t)i * a_row, af, k);
        for (int64_t r = 0; r < n; r++) {
            const float got = c[i * n + r];
            if (r < n0a) {
                if (got != 12345.0f && bad++ < 3)
                    CHECKF(got == 12345.0f, "%s %s: column %lld outside [%lld, %lld) was written", ft_isa_name(isa),
                           ft_type_name(wt), (long long)r, (long long)n0a, (long long)n);
                continue;
            }
            ti->to_float(w + (size_t)r * w_row, wf, k);
            double mag = 0.0;
            for (int64_t j = 0; j < k; j++)
                mag += fabs((double)af[j] * (double)wf[j]);
            const double tol = rel_tol * mag + 1e-30;
            const double err = fabs((double)got - (double)ref[i * n + r]);
            if (mag > 0 && err / mag > worst_rel)
                worst_rel = err / mag;
            if (err / tol > g_gemm_worst[isa])
                g_gemm_worst[isa] = err / tol;
            if (!(err <= tol) && bad++ < 3)
                CHECKF(err <= tol, "%s %s m=%lld k=%lld n=%lld: c[%lld][%lld] = %.9g, ref %.9g (tol %.3g)",
                       ft_isa_name(isa), ft_type_name(wt), (long long)m, (long long)k, (long long)n, (long long)i,
                       (long long)r, got, ref[i * n + r], tol);
        }
    }
    CHECK(bad == 0);
    free(wb);
    free(ab);
    free(cb);
    free(pb);
    free(wf);
    free(ac);
    free(ref);
    free(af);
    return worst_rel;
}

static void test_gemm_case(enum ft_isa isa, const struct ft_float_kernels *fk, enum ft_type wt, int64_t m, int64_t k,
                           int64_t n, float scale) {
    test_gemm_case_tol(isa, fk, wt, m, k, n, scale, 1e-5);
}

/* --f16-bf16 (ft_float_set_f16_via_bf16): F16 weights through AMX-BF16,
 * each product within 2^-7 of the F16 contract's (each operand rounded to
 * bf16 is within 2^-8 of itself) -- and measurably not
 * the exact path (its error above the 1e-5 of the order of additions). */
static void test_f16_via_bf16(void) {
    if (!ft_isa_supported(FT_ISA_AMX) || !ft_cpu_info()->amx_bf16) {
        CHECK(!ft_float_set_f16_via_bf16(true) || !ft_isa_supported(FT_ISA_AMX));
        printf("SKIP --f16-bf16: no AMX-BF16 here\n");
        return;
    }
    CHECK(ft_float_set_f16_via_bf16(true));
    const struct ft_float_kernels *fk = ft_float_kernels_isa(FT_ISA_AMX);
    double worst = 0.0;
    static const int64_t ms[] = {16, 40, 100};
    static const int64_t ks[] = {33, 300, 1030};
    for (size_t mi = 0; mi < FT_ARRAY_LEN(ms); mi++)
        for (size_t ki = 0; ki < FT_ARRAY_LEN(ks); ki++) {
            const double w = test_gemm_case_tol(FT_ISA_AMX, fk, FT_TYPE_F16, ms[mi], ks[ki], 70, 1.0f, 1.0 / 128);
            worst = w > worst ? w : worst;
        }
    CHECKF(worst > 1e-5, "--f16-bf16: error %.3g, as small as the exact path's: not taken?", worst);
    /* small batches stay on the exact path */
    CHECK(test_gemm_case_tol(FT_ISA_AMX, fk, FT_TYPE_F16, 7, 300, 70, 1.0f, 1e-5) <= 1e-5);
    CHECK(ft_float_set_f16_via_bf16(false));
    CHECK(test_gemm_case_tol(FT_ISA_AMX, fk, FT_TYPE_F16, 40, 300, 70, 1.0f, 1e-5) <= 1e-5);
    printf("--f16-bf16: worst error %.2e of sum|a*w| (allowed 2^-7 = 7.8e-3)\n", worst);
}

static void test_gemm(enum ft_isa isa, const struct ft_float_kernels *fk) {
    if (fk->gemm_mr == 0) {
        CHECK(fk->gemm == NULL);
        return;
    }
    CHECK(fk->gemm_packed_size(FT_TYPE_Q8_0, 16, 64) == 0); /* quantized types are not its business */
    static const enum ft_type types[] = {FT_TYPE_F32, FT_TYPE_F16, FT_TYPE_BF16};
    /* around every path's bounds: gemm_small's chunks (avx2 to 10 rows, avx512 to 20), amx from 8 (BF16) and 18 (F16) */
    static const int64_t ms[] = {1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 16, 17, 18, 20, 21, 40};
    static const int64_t ks[] = {16, 33, 64, 300, 530};
    static const int64_t ns[] = {1, 31, 32, 70};
    for (size_t t = 0; t < FT_ARRAY_LEN(types); t++)
        for (size_t mi = 0; mi < FT_ARRAY_LEN(ms); mi++)
            for (size_t ki = 0; ki < FT_ARRAY_LEN(ks); ki++)
                for (size_t ni = 0; ni < FT_ARRAY_LEN(ns); ni++)
                    test_gemm_case(isa, fk, types[t], ms[mi], ks[ki], ns[ni], (ki + ni) % 3 == 0 ? 1e-3f : 1.0f);
    /* a larger one: several 516-row chunks would be too slow; one full panel chunk */
    test_gemm_case(isa, fk, FT_TYPE_F16, 100, 1024, 96, 1.0f);
}

/* ---- attention -------------------------------------------------------------- */

static double g_attn_worst[FT_ISA_COUNT];

/* Split-KV: the keys cut into chunks of `chunk` positions (aligned to
 * multiples of it), one kernel call per chunk writing a part, the parts
 * merged with ft_attention_merge; the result must meet the same tolerance
 * as one call over all keys. */
static void attention_split(const struct ft_float_kernels *fk, const struct ft_attn_rows *rows, int64_t dk, int64_t dv,
                            float scale, const struct ft_attn_kv *kv, int32_t n_pos, int32_t chunk, void *scratch) {
    const int n_chunks = (n_pos + chunk - 1) / chunk;
    const int nq = rows->n_rows * rows->n_heads;
    float *acc = malloc(sizeof(float) * (size_t)(n_chunks * nq) * (size_t)dv);
    float *pm = malloc(sizeof(float) * (size_t)(n_chunks * nq));
    float *pl = malloc(sizeof(float) * (size_t)(n_chunks * nq));
    for (int c = 0; c < n_chunks; c++) {
        int32_t p0[8], p1[8];
        for (int r = 0; r < rows->n_rows; r++) {
            p0[r] = FT_MAX(rows->p0[r], c * chunk);
            p1[r] = FT_MIN(rows->p1[r], c * chunk + chunk - 1);
        }
        struct ft_attn_rows part = *rows;
        part.out = acc + (size_t)(c * nq) * (size_t)dv;
        part.out_row = rows->n_heads * dv;
        part.p0 = p0;
        part.p1 = p1;
        part.part_max = pm + c * nq;
        part.part_sum = pl + c * nq;
        part.part_row = rows->n_heads;
        fk->attention(&part, dk, dv, scale, kv, scratch);
    }
    for (int r = 0; r < rows->n_rows; r++)
        for (int h = 0; h < rows->n_heads; h++) {
            const int i = r * rows->n_heads + h;
            ft_attention_merge(acc + (size_t)i * (size_t)dv, nq * dv, pm + i, pl + i, nq, n_chunks, dv,
                               rows->out + r * rows->out_row + h * dv);
        }
    free(acc);
    free(pm);
    free(pl);
}

static void test_attn_case(enum ft_isa isa, const struct ft_float_kernels *fk, int64_t dk, int64_t dv, int n_heads,
                           int n_rows, int32_t n_pos, int32_t window, int empty_row, int32_t chunk) {
    const int32_t bt = 16;
    const int32_t n_blocks = (n_pos + bt - 1) / bt + 2;
    const int n_kv = 2; /* the pool holds two KV heads, head-major per block; the call reads the second */
    const int64_t k_row = n_kv * dk, v_row = n_kv * dv;
    void *kb, *vb, *qb, *ob, *sb;
    uint16_t *k = alloc_odd(sizeof(uint16_t) * (size_t)(n_blocks * bt * k_row), &kb);
    uint16_t *v = alloc_odd(sizeof(uint16_t) * (size_t)(n_blocks * bt * v_row), &vb);
    float vmax = 0.0f;
    for (int64_t i = 0; i < n_blocks * bt * k_row; i++)
        k[i] = ft_fp32_to_fp16(rng_gauss() * 2.0f);
    for (int64_t i = 0; i < n_blocks * bt * v_row; i++) {
        const float x = rng_gauss();
        v[i] = ft_fp32_to_fp16(x);
        vmax = fmaxf(vmax, fabsf(ft_fp16_to_fp32(v[i])));
    }
    int32_t blocks[64];
    for (int32_t b = 0; b < (n_pos + bt - 1) / bt; b++)
        blocks[b] = n_blocks - 1 - b; /* out of order */
    const struct ft_attn_kv kv = {k + bt * dk, v + bt * dv, blocks, bt, dk, dv, bt * k_row, bt * v_row};

    const int n_head_total = n_heads + 1; /* the q rows hold one more head before the group */
    const int64_t q_row = n_head_total * dk, o_row = n_head_total * dv;
    float *q = alloc_odd(sizeof(float) * (size_t)(n_rows * q_row), &qb);
    float *out = alloc_odd(sizeof(float) * (size_t)(n_rows * o_row), &ob);
    for (int64_t i = 0; i < n_rows * q_row; i++)
        q[i] = rng_gauss();
    for (int64_t i = 0; i < n_rows * o_row; i++)
        out[i] = 777.0f;
    int32_t p0[8], p1[8];
    for (int r = 0; r < n_rows; r++) {
        p1[r] = n_pos - n_rows + r; /* the last rows of the sequence, causal */
        p0[r] = window > 0 ? FT_MAX(0, p1[r] - window + 1) : 0;
    }
    if (empty_row >= 0) {
        p0[empty_row] = 5;
        p1[empty_row] = 4;
    }
    const struct ft_attn_rows rows = {
        .q = q + dk, .q_row = q_row, .out = out + dv, .out_row = o_row,
        .n_rows = n_rows, .n_heads = n_heads, .p0 = p0, .p1 = p1,
    };
    void *scratch = alloc_odd(fk->attention_scratch(n_rows, n_heads, dk, dv), &sb);
    if (chunk > 0)
        attention_split(fk, &rows, dk, dv, 0.125f, &kv, n_pos, chunk, scratch);
    else
        fk->attention(&rows, dk, dv, 0.125f, &kv, scratch);

    float *ref = malloc(sizeof(float) * (size_t)dv);
    float *tmp = malloc(sizeof(float) * (size_t)(dk + dv));
    const double tol = 1e-5 * vmax;
    int bad = 0;
    for (int r = 0; r < n_rows; r++) {
        for (int h = 0; h < n_head_total; h++) {
            const float *o = out + r * o_row + h * dv;
            if (h == 0) { /* outside the group: untouched */
                for (int64_t d = 0; d < dv; d++)
                    if (o[d] != 777.0f && bad++ < 3)
                        CHECKF(o[d] == 777.0f, "%s: head outside the group written", ft_isa_name(isa));
                continue;
            }
            /* a level without a kernel of its own runs the reference itself
             * (fp16 accumulator); kernels accumulate in f32 */
            if (fk->attention == ft_attention_rows_ref)
                ft_attention_ref(q + r * q_row + h * dk, dk, dv, 0.125f, &kv, p0[r], p1[r], ref, tmp);
            else
                ft_attention_f32acc_ref(q + r * q_row + h * dk, dk, dv, 0.125f, &kv, p0[r], p1[r], ref, tmp);
            for (int64_t d = 0; d < dv; d++) {
                const double err = fabs((double)o[d] - (double)ref[d]);
                if (err / tol > g_attn_worst[isa])
                    g_attn_worst[isa] = err / tol;
                if (!(err <= tol) && bad++ < 3)
                    CHECKF(err <= tol, "%s dk=%lld dv=%lld heads=%d rows=%d pos=%d window=%d chunk=%d: row %d head %d [%lld] %.8g vs ref %.8g",
                           ft_isa_name(isa), (long long)dk, (long long)dv, n_heads, n_rows, (int)n_pos, (int)window,
                           (int)chunk, r, h, (long long)d, o[d], ref[d]);
            }
        }
    }
    CHECK(bad == 0);
    free(kb);
    free(vb);
    free(qb);
    free(ob);
    free(sb);
    free(ref);
    free(tmp);
}

static void test_attention(enum ft_isa isa, const struct ft_float_kernels *fk) {
    static const int64_t dims[][2] = {{64, 64}, {16, 16}, {80, 48}, {256, 256}, {8, 24}};
    static const int32_t positions[] = {1, 15, 16, 17, 70};
    for (size_t d = 0; d < FT_ARRAY_LEN(dims); d++)
        for (size_t p = 0; p < FT_ARRAY_LEN(positions); p++)
            for (int heads = 1; heads <= 4; heads += 3)
                for (int rows = 1; rows <= 8; rows += 7) {
                    if (rows > positions[p])
                        continue;
                    test_attn_case(isa, fk, dims[d][0], dims[d][1], heads, rows, positions[p], 0, -1, 0);
                    test_attn_case(isa, fk, dims[d][0], dims[d][1], heads, rows, positions[p], 5, -1, 0);
                    if (rows > 1)
                        test_attn_case(isa, fk, dims[d][0], dims[d][1], heads, rows, positions[p], 0, 1, 0);
                }
    if (!fk->attention_splits)
        return;
    /* split-KV parts: lengths around the 128-key chunk, chunks not a
     * multiple of the kernels' tiles, sliding windows that start inside a
     * chunk, a row whose range misses whole chunks */
    static const int64_t split_dims[][2] = {{64, 64}, {256, 256}, {80, 48}, {8, 24}};
    static const int32_t lengths[] = {1, 127, 128, 129, 1000};
    static const int32_t chunks[] = {128, 40};
    for (size_t d = 0; d < FT_ARRAY_LEN(split_dims); d++)
        for (size_t l = 0; l < FT_ARRAY_LEN(lengths); l++)
            for (size_t c = 0; c < FT_ARRAY_LEN(chunks); c++)
                for (int heads = 1; heads <= 4; heads += 3) {
                    const int rows = lengths[l] >= 8 && (d + l) % 2 ? 8 : 1;
                    const int64_t dk = split_dims[d][0], dv = split_dims[d][1];
                    test_attn_case(isa, fk, dk, dv, heads, rows, lengths[l], 0, -1, chunks[c]);
                    test_attn_case(isa, fk, dk, dv, heads, rows, lengths[l], 100, -1, chunks[c]);
                    if (rows > 1)
                        test_attn_case(isa, fk, dk, dv, heads, rows, lengths[l], 0, 1, chunks[c]);
                }
}

/* ---- row ops ------------------------------------------------------------------- */

static int bits_equal(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

/* The NEON levels' SwiGLU computes ggml's exp itself (simd/arm/neon_common.h),
 * so it owes the reference's bits, not just the tolerance. */
static bool swiglu_exact(enum ft_isa isa) {
    return isa == FT_ISA_SCALAR || isa == FT_ISA_NEON || isa == FT_ISA_NEON_DOTPROD || isa == FT_ISA_NEON_I8MM;
}

/* SwiGLU where exp(-g) nears or leaves the float range: g from -140 to
 * 20 (below 17, exp(-g) shows in 1 + exp(-g)), densely around -88.72,
 * where exp(-g) = j 2^128 with j < 1 is still finite (2^n applied in two
 * halves), past the |n| > 192 cut-offs, and signed zeros. */
static void test_swiglu_range(enum ft_isa isa, const struct ft_float_kernels *fk) {
    enum { N = 420 };
    float g[N], u[N], y[N], z[N];
    for (int i = 0; i < N; i++) {
        g[i] = i < 100 ? -88.72283935546875f + 1e-5f * (float)(i - 50) : -140.0f + 0.5f * (float)(i - 100);
        u[i] = rng_gauss();
    }
    g[0] = 0.0f;
    g[1] = -0.0f;
    g[2] = 150.0f;  /* exp(-150) = 2^-216, past the cut-off: 0 */
    g[3] = -150.0f; /* exp(150): inf, silu -0 */
    ft_swiglu_ref(y, g, u, N);
    fk->swiglu(z, g, u, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const bool same = memcmp(&y[i], &z[i], sizeof(float)) == 0;
        const bool near = fabsf(y[i] - z[i]) <= 1e-6f * fabsf(y[i]) + 1e-37f;
        if (!(swiglu_exact(isa) ? same : near) && bad++ < 3)
            CHECKF(0, "%s swiglu(%.9g) * %.9g = %.9g, ref %.9g", ft_isa_name(isa), g[i], u[i], z[i], y[i]);
    }
    CHECK(bad == 0);
}

static void test_row_ops(enum ft_isa isa, const struct ft_float_kernels *fk) {
    test_swiglu_range(isa, fk);
    static const int64_t lens[] = {1, 15, 16, 17, 64, 100, 2048, 2304};
    void *xb, *yb, *zb, *wb;
    for (size_t li = 0; li < FT_ARRAY_LEN(lens); li++) {
        const int64_t n = lens[li];
        float *x = alloc_odd(sizeof(float) * (size_t)n, &xb);
        float *y = alloc_odd(sizeof(float) * (size_t)n, &yb);
        float *z = alloc_odd(sizeof(float) * (size_t)n, &zb);
        float *w = alloc_odd(sizeof(float) * (size_t)n, &wb);
        for (int pattern = 0; pattern < 3; pattern++) {
            const float sc = pattern == 0 ? 1.0f : pattern == 1 ? 1e-3f : 40.0f;
            for (int64_t i = 0; i < n; i++) {
                x[i] = rng_gauss() * sc;
                w[i] = rng_gauss();
            }
            /* RMS norm, with and without weight, in place too */
            ft_rmsnorm_ref(y, x, w, n, 1e-6f);
            fk->rmsnorm(z, x, w, n, 1e-6f);
            CHECKF(bits_equal(y, z, n), "%s rmsnorm n=%lld", ft_isa_name(isa), (long long)n);
            ft_rmsnorm_ref(y, x, NULL, n, 1e-5f);
            memcpy(z, x, sizeof(float) * (size_t)n);
            fk->rmsnorm(z, z, NULL, n, 1e-5f);
            CHECKF(bits_equal(y, z, n), "%s rmsnorm in place n=%lld", ft_isa_name(isa), (long long)n);

            /* SwiGLU / GeGLU on g = x * scale (GeGLU's range goes past the +-10 cut-offs) */
            ft_swiglu_ref(y, x, w, n);
            fk->swiglu(z, x, w, n);
            int ok = 1;
            for (int64_t i = 0; i < n; i++)
                ok &= fabsf(y[i] - z[i]) <= 1e-6f * fabsf(y[i]) + 1e-37f;
            CHECKF(ok, "%s swiglu n=%lld scale %g", ft_isa_name(isa), (long long)n, sc);
            if (swiglu_exact(isa))
                CHECKF(bits_equal(y, z, n), "%s swiglu n=%lld scale %g: not the reference's bits", ft_isa_name(isa),
                       (long long)n, sc);
            ft_geglu_ref(y, x, w, n);
            fk->geglu(z, x, w, n);
            CHECKF(bits_equal(y, z, n), "%s geglu n=%lld scale %g", ft_isa_name(isa), (long long)n, sc);
        }
        free(xb);
        free(yb);
        free(zb);
        free(wb);
    }

    /* RoPE: normal and NeoX, full and partial rotation, a few positions */
    static const int dims[][2] = {{64, 64}, {128, 128}, {256, 64}, {80, 80}, {40, 20}, {2, 2}};
    for (size_t d = 0; d < FT_ARRAY_LEN(dims); d++) {
        const int hd = dims[d][0], n_dims = dims[d][1];
        float *x = alloc_odd(sizeof(float) * (size_t)hd, &xb);
        float *y = alloc_odd(sizeof(float) * (size_t)hd, &yb);
        float *cache = alloc_odd(sizeof(float) * (size_t)n_dims, &zb);
        for (int neox = 0; neox < 2; neox++) {
            for (int pos = 0; pos < 3000; pos += 777) {
                const struct ft_rope r = {.n_dims = n_dims, .neox = neox, .freq_base = 500000.0f, .freq_scale = 1.0f,
                                          .attn_factor = 1.0f, .beta_fast = 32.0f, .beta_slow = 1.0f, .n_ctx_orig = 8192};
                ft_rope_cache_ref(&r, pos, cache);
                for (int i = 0; i < hd; i++)
                    x[i] = y[i] = rng_gauss();
                ft_rope_apply_ref(x, n_dims, neox, cache);
                fk->rope_apply(y, n_dims, neox, cache);
                CHECKF(bits_equal(x, y, hd), "%s rope hd=%d n_dims=%d neox=%d pos=%d", ft_isa_name(isa), hd, n_dims,
                       neox, pos);
            }
        }
        free(xb);
        free(yb);
        free(zb);
    }
}

int main(void) {
    if (ft_cpu_init() != FT_OK) {
        printf("FT_ISA refused: %s\n", ft_cpu_error());
        return ft_test_finish("test_float_kernels");
    }
    const char *env = getenv("FT_ISA");
    const int only = env && *env && strcmp(env, "auto") != 0 ? (int)ft_cpu_isa() : -1;
    CHECK(ft_float_kernels() == ft_float_kernels_isa(ft_cpu_isa()));
    CHECK(ft_float_kernels_isa(FT_ISA_COUNT) == NULL);
    for (int isa = 0; isa < FT_ISA_COUNT; isa++) {
        const struct ft_float_kernels *fk = ft_float_kernels_isa((enum ft_isa)isa);
        if (!fk || (only >= 0 && isa != only))
            continue;
        const int before = ft_test_failures;
        test_gemm((enum ft_isa)isa, fk);
        test_attention((enum ft_isa)isa, fk);
        test_row_ops((enum ft_isa)isa, fk);
        printf("level %-12s %s  (gemm: %s, worst error/tolerance %.3f; attention worst %.3f)\n",
               ft_isa_name((enum ft_isa)isa), ft_test_failures == before ? "ok" : "FAILED",
               fk->gemm_mr ? "yes" : "none", g_gemm_worst[isa], g_attn_worst[isa]);
    }
#if defined(__x86_64__)
    if ((only < 0 || only == FT_ISA_AVX512) && ft_float_kernels_isa(FT_ISA_AVX512) && ft_cpu_info()->avx512_bf16) {
        struct ft_float_kernels dp = *ft_float_kernels_isa(FT_ISA_AVX512);
        ft_avx512_float_gemm_fill_ops(&dp, true);
        const int before = ft_test_failures;
        test_gemm(FT_ISA_AVX512, &dp);
        printf("avx512 with vdpbf16ps GEMM %s\n", ft_test_failures == before ? "ok" : "FAILED");
    }
#endif
    if (only < 0 || only == FT_ISA_AMX)
        test_f16_via_bf16();
    return ft_test_finish("test_float_kernels");
}
