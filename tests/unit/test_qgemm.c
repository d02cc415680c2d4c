/* The quantized GEMM (include/ft/qgemm.h) against the reference vec_dot.
 *
 * For every kernel level this machine can run (or the one FT_ISA names) and
 * every weight type that level has a GEMM for, a matrix of rows that do not
 * fill the last weight tile and a batch of tokens that does not fill the
 * last activation tile are multiplied tile by tile through pack_w, pack_a
 * and kernel, and every output is compared with the scalar reference
 * vec_dot of that (row, token):
 *   |gemm - ref| <= 1e-5 * sum |x_i y_i| + 1e-30
 * (x, y the dequantized operands: the vec_dot tolerance of
 * test_simd_kernels.c), on weights from the reference quantizer and on
 * random weight bytes, for several row lengths. Outputs are written into a
 * matrix with a wider stride, pre-filled with a marker: the gaps between
 * rows and the rows past the last token must keep it. Weight rows end at
 * the end of their allocation and tiles sit at addresses that are only
 * 4-byte aligned, so over-reads and alignment assumptions show (under ASan
 * too). The levels without a GEMM (scalar, NEON) must say so (NULL), which
 * is what sends the engine to vec_dot; neon-i8mm must have its own (smmla)
 * GEMM for every type, not neon-dotprod's, or its run would test nothing new;
 * and where both run, its outputs must be bit-identical to neon-dotprod's
 * (the same integer sums, the same order of float operations).
 */
#include "ft/common.h"
#include "ft/cpu.h"
#include "ft/qgemm.h"
#include "ft/types.h"
#include "ft_test.h"
#include "simd/fp16.h"
#include "simd/level.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static uint64_t g_rng;

static uint64_t rng_next(void) { return ft_test_rng_next(&g_rng); }
static float rng_uniform(void) { return ft_test_rng_uniform(&g_rng); } /* [0, 1) */
static float rng_gauss(void) { return ft_test_rng_gauss(&g_rng); }

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static const enum ft_type k_types[] = {FT_TYPE_Q8_0, FT_TYPE_Q4_0, FT_TYPE_Q4_1,   FT_TYPE_Q5_0,
                                       FT_TYPE_Q5_1, FT_TYPE_Q2_K, FT_TYPE_Q3_K,   FT_TYPE_Q4_K,
                                       FT_TYPE_Q5_K, FT_TYPE_Q6_K, FT_TYPE_IQ4_NL, FT_TYPE_IQ4_XS,
                                       FT_TYPE_MXFP4};

/* Random bytes with sane half-precision scales (no NaN/inf): every quant
 * and sub-block scale bit pattern appears. Offsets of the halves as in
 * simd/quant_ref.h. */
static void random_weight_bytes(enum ft_type t, uint8_t *x, int64_t n) {
    const struct ft_type_info *ti = ft_type_info(t);
    const int64_t nb = n / ti->blck_size;
    for (size_t i = 0; i < (size_t)nb * ti->type_size; i++)
        x[i] = (uint8_t)rng_next();
    int off[2] = {-1, -1};
    switch (t) {
    case FT_TYPE_Q4_0: case FT_TYPE_Q5_0: case FT_TYPE_Q8_0: case FT_TYPE_IQ4_NL: case FT_TYPE_IQ4_XS: off[0] = 0; break;
    case FT_TYPE_Q4_1: case FT_TYPE_Q5_1: case FT_TYPE_Q4_K: case FT_TYPE_Q5_K: off[0] = 0; off[1] = 2; break;
    case FT_TYPE_Q2_K: off[0] = 80; off[1] = 82; break;
    case FT_TYPE_Q3_K: off[0] = 108; break;
    case FT_TYPE_Q6_K: off[0] = 208; break;
    default: break;
    }
    for (int64_t b = 0; b < nb; b++)
        for (int j = 0; j < 2; j++)
            if (off[j] >= 0) {
                const float v = j == 1 && (t == FT_TYPE_Q4_1 || t == FT_TYPE_Q5_1) ? (rng_uniform() - 0.5f) * 0.1f
                                                                                    : (rng_uniform() + 0.05f) * 0.01f;
                const uint16_t h = ft_float_to_half(v);
                memcpy(x + b * (int64_t)ti->type_size + off[j], &h, 2);
            }
    if (t == FT_TYPE_MXFP4) /* E8M0 scales 2^-18 .. 2^-3 */
        for (int64_t b = 0; b < nb; b++)
            x[b * (int64_t)ti->type_size] = (uint8_t)(110 + rng_next() % 16);
}

/* A buffer of n bytes at an address that is 4 mod 64. */
struct buf {
    uint8_t *base, *p;
};

static struct buf buf_new(size_t n) {
    struct buf b;
    b.base = xmalloc(n + 68);
    b.p = b.base + (64 - ((uintptr_t)b.base & 63)) % 64 + 4;
    return b;
}

static double g_max_err[FT_ISA_COUNT][FT_TYPE_COUNT];

/* out[t * ld + r] = the GEMM's product of rows x n_tok, tile by tile.
 * repacked: whole tiles go through repack_w and kernel_rw (the weights
 * engine/model/repack.c repacks at load), the last partial one as usual. */
static void gemm_run(const struct ft_qgemm *g, const uint8_t *w, size_t w_row, int rows, const uint8_t *a,
                     size_t a_row, int n_tok, int64_t k, float *out, int64_t ld, bool repacked) {
    struct buf wt = buf_new(g->w_tile_size(k)), at = buf_new(g->a_tile_size(k));
    struct buf rt = buf_new(repacked ? g->rw_tile_size(k) : 1);
    for (int t0 = 0; t0 < n_tok; t0 += g->tile_tokens) {
        const int nt = n_tok - t0 < g->tile_tokens ? n_tok - t0 : g->tile_tokens;
        g->pack_a(a + (size_t)t0 * a_row, a_row, nt, k, at.p);
        for (int r0 = 0; r0 < rows; r0 += g->tile_rows) {
            const int nr = rows - r0 < g->tile_rows ? rows - r0 : g->tile_rows;
            if (repacked && nr == g->tile_rows) {
                g->repack_w(w + (size_t)r0 * w_row, w_row, k, rt.p);
                g->kernel_rw(rt.p, at.p, k, nr, nt, out + t0 * ld + r0, ld);
                continue;
            }
            g->pack_w(w + (size_t)r0 * w_row, w_row, nr, k, wt.p);
            g->kernel(wt.p, at.p, k, nr, nt, out + t0 * ld + r0, ld);
        }
    }
    free(wt.base);
    free(at.base);
    free(rt.base);
}

/* The amx level's Q4_K/Q5_K kernels with the scales in the integers, on
 * tiles (simd/x86/amx_qgemm_k4.c) and on VNNI (amx_qgemm_k4_vnni.c), and
 * whether the level holds them (unless FT_KQUANT_INT_SCALES=0) with its
 * one-row dot in their order; x86 builds only. */
#if defined(__x86_64__)
static const struct ft_qgemm *amx_k4(enum ft_type t) { return ft_amx_qgemm_k4(t); }
static const struct ft_qgemm *amx_k4_vnni(enum ft_type t) { return ft_amx_qgemm_k4_vnni(t); }
static bool amx_k4_in_level(void) { return ft_k4_int_scales(); }
static const struct ft_qgemm *avx2_k4(enum ft_type t) { return ft_avx2_qgemm_k4(t); }
#else
static const struct ft_qgemm *amx_k4(enum ft_type t) { return (void)t, NULL; }
static const struct ft_qgemm *amx_k4_vnni(enum ft_type t) { return (void)t, NULL; }
static bool amx_k4_in_level(void) { return false; }
static const struct ft_qgemm *avx2_k4(enum ft_type t) { return (void)t, NULL; }
#endif
/* The avx2 level's 32-element types whose one-row dot adds in the GEMM's
 * order (simd/x86/avx2_quant.c, DOT_32_GEMM_ORDER). */
static bool avx2_gemm_order(enum ft_isa isa, enum ft_type t) {
    return isa == FT_ISA_AVX2 && (t == FT_TYPE_Q8_0 || t == FT_TYPE_Q4_0 || t == FT_TYPE_Q5_0);
}

/* g is one of them (or the level's copy of the VNNI entry, whose large
 * entry is the tile one). */
static bool is_amx_k4(enum ft_isa isa, const struct ft_qgemm *g) {
    const struct ft_qgemm *k4 = amx_k4(g->type);
    return isa == FT_ISA_AMX && k4 && (g == k4 || g == amx_k4_vnni(g->type) || g->large == k4);
}

/* rows x n_tok product of one type at one level and row length (with
 * repacked: through the repacked tiles, which must also give exactly the
 * floats of the unpacked ones: the same integer sums, scaled in the same
 * order). */
static void check_gemm(enum ft_isa isa, const struct ft_qgemm *g, int64_t k, int rows, int n_tok, int random_bytes,
                       bool repacked) {
    const enum ft_type t = g->type;
    const struct ft_type_info *ref = ft_type_traits_ref(t);
    const struct ft_type_info *aref = ft_type_traits_ref(ref->vec_dot_type);
    const struct ft_type_info *afast = ft_type_traits_isa(ref->vec_dot_type, isa);
    const size_t w_row = ft_row_size(t, k), a_row = ft_row_size(ref->vec_dot_type, k);
    CHECK_EQ_INT(g->act_type, ref->vec_dot_type);

    /* weights: exact-size allocation, so reading past the last row faults under ASan */
    uint8_t *w = xmalloc((size_t)rows * w_row);
    float *f = xmalloc((size_t)k * sizeof(float));
    for (int r = 0; r < rows; r++) {
        if (random_bytes) {
            random_weight_bytes(t, w + (size_t)r * w_row, k);
        } else {
            for (int64_t i = 0; i < k; i++)
                f[i] = rng_gauss() * (r % 3 == 0 ? 0.02f : 1.0f);
            ref->from_float(f, w + (size_t)r * w_row, k);
        }
    }
    uint8_t *a = xmalloc((size_t)n_tok * a_row);
    for (int i = 0; i < n_tok; i++) {
        /* tokens 2 and 3 mod 4: every quant +127 / -127, the largest integer
         * sums (where 16-bit pair sums would saturate) */
        for (int64_t j = 0; j < k; j++)
            f[j] = i % 4 == 2 ? 0.5f : i % 4 == 3 ? -0.5f : rng_gauss() * (i % 4 == 1 ? 30.0f : 1.0f);
        afast->from_float(f, a + (size_t)i * a_row, k);
    }

    /* the product, tile by tile, into a wider matrix pre-filled with a marker */
    const int64_t ld = rows + 3;
    const int tok_rows = n_tok + 2;
    float *out = xmalloc((size_t)tok_rows * (size_t)ld * sizeof(float));
    const float marker = -12345.5f;
    for (int64_t i = 0; i < tok_rows * ld; i++)
        out[i] = marker;
    gemm_run(g, w, w_row, rows, a, a_row, n_tok, k, out, ld, repacked);
    if (repacked) {
        CHECK_EQ_INT((long long)g->rw_tile_size(k), (long long)((size_t)g->tile_rows * w_row));
        /* rw_row undoes the repacking, byte for byte */
        uint8_t *tile = xmalloc(g->rw_tile_size(k)), *back = xmalloc(w_row);
        g->repack_w(w, w_row, k, tile);
        for (int r = 0; r < g->tile_rows; r++) {
            g->rw_row(tile, r, k, back);
            CHECKF(memcmp(back, w + (size_t)r * w_row, w_row) == 0, "%s rw_row %s k=%lld row %d: not the row repacked",
                   ft_isa_name(isa), ref->name, (long long)k, r);
        }
        /* unpack_rw gives the tile pack_w makes from the rows */
        if (g->unpack_rw) {
            uint8_t *from_rw = xmalloc(g->w_tile_size(k)), *from_rows = xmalloc(g->w_tile_size(k));
            g->unpack_rw(tile, k, from_rw);
            g->pack_w(w, w_row, g->tile_rows, k, from_rows);
            CHECKF(memcmp(from_rw, from_rows, g->w_tile_size(k)) == 0, "%s unpack_rw %s k=%lld: not pack_w's tile",
                   ft_isa_name(isa), ref->name, (long long)k);
            /* and the large entry's unpack_rw its own pack_w's tile */
            const struct ft_qgemm *L = g->large;
            if (L && L->unpack_rw) {
                L->unpack_rw(tile, k, from_rw);
                L->pack_w(w, w_row, g->tile_rows, k, from_rows);
                CHECKF(memcmp(from_rw, from_rows, L->w_tile_size(k)) == 0,
                       "%s large unpack_rw %s k=%lld: not its pack_w's tile", ft_isa_name(isa), ref->name,
                       (long long)k);
            }
            free(from_rw);
            free(from_rows);
        }
        /* kernel_rw1 on pack_a1's one-token tile: kernel_rw's floats for that
         * token, exactly, and nothing written past n_rows */
        if (g->kernel_rw1) {
            CHECK(g->a1_tile_size(k) <= g->a_tile_size(k));
            struct buf a1 = buf_new(g->a1_tile_size(k));
            float o1[64];
            CHECK(g->tile_rows + 1 <= (int)FT_ARRAY_LEN(o1));
            for (int i = 0; i < n_tok; i++) {
                g->pack_a1(a + (size_t)i * a_row, k, a1.p);
                for (int r0 = 0; r0 + g->tile_rows <= rows; r0 += g->tile_rows) {
                    g->repack_w(w + (size_t)r0 * w_row, w_row, k, tile);
                    for (int nr = g->tile_rows; nr >= g->tile_rows - 3; nr -= 3) {
                        for (size_t j = 0; j < FT_ARRAY_LEN(o1); j++)
                            o1[j] = marker;
                        g->kernel_rw1(tile, a1.p, k, nr, o1);
                        CHECKF(memcmp(o1, out + i * ld + r0, (size_t)nr * sizeof(float)) == 0 && o1[nr] == marker,
                               "%s kernel_rw1 %s k=%lld token %d rows %d+%d: not kernel_rw's floats",
                               ft_isa_name(isa), ref->name, (long long)k, i, r0, nr);
                    }
                }
            }
            free(a1.base);
        }
        free(tile);
        free(back);
        float *out_packed = xmalloc((size_t)tok_rows * (size_t)ld * sizeof(float));
        for (int64_t i = 0; i < tok_rows * ld; i++)
            out_packed[i] = marker;
        gemm_run(g, w, w_row, rows, a, a_row, n_tok, k, out_packed, ld, false);
        CHECKF(memcmp(out, out_packed, (size_t)tok_rows * (size_t)ld * sizeof(float)) == 0,
               "%s repacked %s k=%lld rows=%d tokens=%d: not the floats of the unpacked tiles", ft_isa_name(isa),
               ref->name, (long long)k, rows, n_tok);
        free(out_packed);
    }

    /* neon-i8mm sums the same integers as neon-dotprod, amx as avx512 and
     * avx-vnni as avx2, and each applies the scales in the same order as
     * the level it builds on: the floats must be identical */
    const enum ft_isa same_as = isa == FT_ISA_NEON_I8MM   ? FT_ISA_NEON_DOTPROD
                                : isa == FT_ISA_AMX      ? FT_ISA_AVX512
                                : isa == FT_ISA_AVX_VNNI ? FT_ISA_AVX2
                                                         : isa;
    /* except the amx Q4_K/Q5_K entries, whose integer sums take the
     * sub-block scales (amx_qgemm_k4.c): their floats are another order,
     * held to the reference below */
    const bool own_order = is_amx_k4(isa, g);
    if (same_as != isa && ft_isa_supported(same_as) && !own_order) {
        float *out_dot = xmalloc((size_t)tok_rows * (size_t)ld * sizeof(float));
        memcpy(out_dot, out, (size_t)tok_rows * (size_t)ld * sizeof(float));
        gemm_run(ft_qgemm_get_isa(t, same_as), w, w_row, rows, a, a_row, n_tok, k, out_dot, ld, false);
        CHECKF(memcmp(out, out_dot, (size_t)tok_rows * (size_t)ld * sizeof(float)) == 0,
               "%s gemm %s k=%lld rows=%d tokens=%d: not the floats of %s", ft_isa_name(isa), ref->name,
               (long long)k, rows, n_tok, ft_isa_name(same_as));
        free(out_dot);
    }

    /* avx2's Q4_K/Q5_K kernel with the scales in the integers
     * (avx2_qgemm_k4.c) adds in the amx kernels' order: their floats, bit
     * for bit, where the CPU runs both */
    if (isa == FT_ISA_AVX2 && g == avx2_k4(t) && ft_isa_supported(FT_ISA_AMX) && amx_k4_in_level()) {
        float *out_amx = xmalloc((size_t)tok_rows * (size_t)ld * sizeof(float));
        memcpy(out_amx, out, (size_t)tok_rows * (size_t)ld * sizeof(float));
        gemm_run(amx_k4_vnni(t), w, w_row, rows, a, a_row, n_tok, k, out_amx, ld, false);
        CHECKF(memcmp(out, out_amx, (size_t)tok_rows * (size_t)ld * sizeof(float)) == 0,
               "avx2 gemm %s k=%lld rows=%d tokens=%d: not the floats of the amx k4 kernels", ref->name,
               (long long)k, rows, n_tok);
        free(out_amx);
    }

    /* The Q4_K/Q5_K kernels with integer scales in their levels (amx,
     * avx2): every batch size must give a (row, token) the same floats, so
     * the level's one-row dot (batches below its min_tokens, decode, a
     * prompt's tail after a prefix-cache hit) must add in the kernel's
     * order, bit for bit. */
    if ((own_order && amx_k4_in_level()) || (isa == FT_ISA_AVX2 && g == avx2_k4(t)) || avx2_gemm_order(isa, t)) {
        const struct ft_type_info *lvl = ft_type_traits_isa(t, isa);
        int differ = 0;
        for (int i = 0; i < n_tok; i++)
            for (int r = 0; r < rows; r++) {
                float d1 = 0.0f, dg = 0.0f;
                lvl->vec_dot(k, &d1, w + (size_t)r * w_row, a + (size_t)i * a_row);
                lvl->vec_dot_gemv(k, &dg, w + (size_t)r * w_row, a + (size_t)i * a_row);
                const float gm = out[i * ld + r];
                differ += memcmp(&d1, &gm, sizeof(float)) != 0 || memcmp(&dg, &gm, sizeof(float)) != 0;
            }
        CHECKF(differ == 0, "%s %s k=%lld rows=%d tokens=%d: %d outputs of the one-row dot differ from the GEMM's",
               ft_isa_name(isa), ref->name, (long long)k, rows, n_tok, differ);
    }

    float *xd = xmalloc((size_t)k * sizeof(float)), *yd = xmalloc((size_t)k * sizeof(float));
    int bad = 0;
    for (int i = 0; i < n_tok; i++) {
        aref->to_float(a + (size_t)i * a_row, yd, k);
        for (int r = 0; r < rows; r++) {
            ref->to_float(w + (size_t)r * w_row, xd, k);
            double norm = 0.0;
            for (int64_t j = 0; j < k; j++)
                norm += fabs((double)xd[j] * (double)yd[j]);
            float s_ref = NAN;
            ref->vec_dot(k, &s_ref, w + (size_t)r * w_row, a + (size_t)i * a_row);
            const float s = out[i * ld + r];
            const double err = fabs((double)s - (double)s_ref);
            const double rel = norm > 0 ? err / norm : err;
            if (rel > g_max_err[isa][t])
                g_max_err[isa][t] = rel;
            if (!(err <= 1e-5 * norm + 1e-30) || !isfinite(s)) {
                if (bad++ < 3)
                    CHECKF(0, "%s gemm %s k=%lld rows=%d tokens=%d%s%s: out[%d][%d] = %.9g, ref %.9g (diff %.3g, tol %.3g)",
                           ft_isa_name(isa), ref->name, (long long)k, rows, n_tok,
                           random_bytes ? " (random bytes)" : "", repacked ? " (repacked)" : "", i, r, (double)s,
                           (double)s_ref, err,
                           1e-5 * norm + 1e-30);
            }
        }
        for (int64_t r = rows; r < ld; r++)
            if (out[i * ld + r] != marker && bad++ < 3)
                CHECKF(0, "%s gemm %s: wrote out[%d][%lld], past the %d rows", ft_isa_name(isa), ref->name, i,
                       (long long)r, rows);
    }
    for (int i = n_tok; i < tok_rows; i++)
        for (int64_t r = 0; r < ld; r++)
            if (out[i * ld + r] != marker && bad++ < 3)
                CHECKF(0, "%s gemm %s: wrote out[%d][%lld], past the %d tokens", ft_isa_name(isa), ref->name, i,
                       (long long)r, n_tok);
    CHECK(bad == 0);

    free(xd);
    free(yd);
    free(out);
    free(a);
    free(f);
    free(w);
}

/* Weight rows more than 2 GiB / 16 apart, where the gathering packers'
 * int32 row offsets would overflow: pack_w must give the tile it gives for
 * the same rows side by side. A whole tile of rows (what packers put in
 * the missing rows' places differs and is never read), 129 MiB apart in a
 * mapping that is reserved, not backed (only the rows' first bytes are
 * touched). */
static void check_far_rows(enum ft_isa isa, const struct ft_qgemm *g) {
    const enum ft_type t = g->type;
    const int64_t k = 2 * ft_type_info(t)->blck_size;
    const size_t row = ft_row_size(t, k), far = (size_t)129 << 20;
    const int n = g->tile_rows;
    uint8_t *big = mmap(NULL, far * (size_t)n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                        -1, 0);
    if (big == MAP_FAILED) {
        printf("%s %s: no room to map rows 129 MiB apart, far-rows check skipped\n", ft_isa_name(isa),
               ft_type_name(t));
        return;
    }
    uint8_t *near = xmalloc((size_t)n * row);
    for (int r = 0; r < n; r++) {
        random_weight_bytes(t, near + (size_t)r * row, k);
        memcpy(big + (size_t)r * far, near + (size_t)r * row, row);
    }
    uint8_t *a = xmalloc(g->w_tile_size(k)), *b = xmalloc(g->w_tile_size(k));
    g->pack_w(near, row, n, k, a);
    g->pack_w(big, far, n, k, b);
    size_t at = 0;
    while (at < g->w_tile_size(k) && a[at] == b[at])
        at++;
    CHECKF(at == g->w_tile_size(k), "%s %s pack_w: rows 129 MiB apart give another tile (byte %zu of %zu: %02x, not %02x)",
           ft_isa_name(isa), ft_type_name(t), at, g->w_tile_size(k), b[at], a[at]);
    free(a);
    free(b);
    free(near);
    munmap(big, far * (size_t)n);
}

static void check_level(enum ft_isa isa) {
    int n_gemm = 0, n_rw = 0;
    for (size_t ti = 0; ti < FT_ARRAY_LEN(k_types); ti++) {
        const enum ft_type t = k_types[ti];
        const struct ft_qgemm *g = ft_qgemm_get_isa(t, isa);
        if (isa == FT_ISA_SCALAR)
            CHECKF(g == NULL, "the scalar level is the reference: no GEMM for %s", ft_type_name(t));
        if (isa == FT_ISA_NEON_I8MM)
            CHECKF(g && g != ft_qgemm_get_isa(t, FT_ISA_NEON_DOTPROD), "neon-i8mm: no smmla GEMM for %s",
                   ft_type_name(t));
        if (!g)
            continue;
        n_gemm++;
        CHECK_EQ_INT(g->type, t);
        for (const struct ft_qgemm *e = g; e; e = e->large)
            check_far_rows(isa, e);
        CHECK(g->tile_rows > 0 && g->tile_tokens > 0 && g->min_tokens >= 1);
        const int64_t blck = ft_type_info(t)->blck_size;
        const int64_t ks[] = {blck, 3 * blck, 2048, 2304};
        for (size_t ki = 0; ki < FT_ARRAY_LEN(ks); ki++) {
            const int64_t k = ks[ki];
            if (k % blck)
                continue;
            const int rows = 2 * g->tile_rows + 5;
            g_rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(k * 1000003 + (int64_t)t * 17 + isa);
            check_gemm(isa, g, k, rows, g->tile_tokens + 5, 0, false);
            check_gemm(isa, g, k, rows, 1, 1, false);
            check_gemm(isa, g, k, g->tile_rows, 2 * g->tile_tokens, 1, false);
            if (g->repack_w) /* every batch size the kernel takes, one token (decode) too */
                for (int nt = 1; nt <= g->tile_tokens + 3; nt++)
                    check_gemm(isa, g, k, rows, nt, nt % 2, true);
            /* the large-batch entry, on the weight tiles it shares: every
             * batch size of a tile and past it (tokens that are padding) */
            if (g->large)
                for (int nt = 1; nt <= g->large->tile_tokens + 3; nt += nt < 4 ? 1 : 3)
                    check_gemm(isa, g->large, k, rows, nt, nt % 2, false);
            /* the amx Q4_K/Q5_K kernels with the scales in the integers, also
             * when FT_KQUANT_INT_SCALES=0 leaves them out of the table */
            const struct ft_qgemm *k4s[2] = {isa == FT_ISA_AMX ? amx_k4(t) : NULL,
                                             isa == FT_ISA_AMX ? amx_k4_vnni(t) : NULL};
            for (int e = 0; e < 2; e++)
                if (k4s[e] && !is_amx_k4(isa, g))
                    for (int nt = 1; nt <= k4s[e]->tile_tokens + 3; nt += nt < 4 ? 1 : 3)
                        check_gemm(isa, k4s[e], k, rows, nt, nt % 2, false);
            /* the VNNI entry in the table: every token count of its tile */
            if (is_amx_k4(isa, g))
                for (int nt = 1; nt <= g->tile_tokens; nt++)
                    check_gemm(isa, g, k, rows, nt, nt % 2, false);
        }
        if (g->large) {
            const struct ft_qgemm *L = g->large;
            CHECK(L->type == t && L->act_type == g->act_type && L->tile_rows == g->tile_rows && !L->large);
            /* weights repacked at load: the large entry unpacks them into its tiles */
            CHECK(!g->kernel_rw || (L->w_tile_size == g->w_tile_size && L->unpack_rw));
            CHECKF(!g->kernel_rw || g->large_min_tokens >= FT_RW_UNPACK_MIN_TOKENS,
                   "%s %s: the large entry would run on kernel_rw's path", ft_isa_name(isa), ft_type_name(t));
            CHECK(ft_qgemm_for_tokens(g, g->large_min_tokens - 1) == g && ft_qgemm_for_tokens(g, g->large_min_tokens) == L);
        }
        if (g->repack_w)
            n_rw++;
        CHECK((g->repack_w != NULL) == (g->kernel_rw != NULL) && (g->repack_w != NULL) == (g->rw_tile_size != NULL) &&
              (g->repack_w != NULL) == (g->rw_row != NULL));
        CHECK((g->kernel_rw1 != NULL) == (g->pack_a1 != NULL) && (g->kernel_rw1 != NULL) == (g->a1_tile_size != NULL) &&
              (!g->kernel_rw1 || g->kernel_rw));
    }
    printf("level %-13s %d GEMM types (%d repacked at load); max |diff| / sum|x*y|:", ft_isa_name(isa), n_gemm, n_rw);
    for (size_t ti = 0; ti < FT_ARRAY_LEN(k_types); ti++)
        if (ft_qgemm_get_isa(k_types[ti], isa))
            printf(" %s %.1e", ft_type_name(k_types[ti]), g_max_err[isa][k_types[ti]]);
    printf("\n");
}

int main(void) {
    const char *env = getenv("FT_ISA");
    int only = FT_ISA_COUNT;
    if (ft_cpu_init() != FT_OK) {
        printf("FT_ISA=%s refused: %s\n", env ? env : "", ft_cpu_error());
        return ft_test_finish("test_qgemm");
    }
    if (env && *env)
        only = (int)ft_cpu_isa();
    CHECK(ft_qgemm_get((enum ft_type)FT_TYPE_COUNT) == NULL);
    CHECK(ft_qgemm_get(FT_TYPE_F32) == NULL);
    CHECK(ft_qgemm_get(FT_TYPE_Q8_K) == NULL); /* activation-only */
    CHECK(ft_qgemm_get(FT_TYPE_Q4_K) == ft_qgemm_get_isa(FT_TYPE_Q4_K, ft_cpu_isa()));
    for (int i = 0; i < FT_ISA_COUNT; i++) {
        if ((only != FT_ISA_COUNT && i != only) || !ft_isa_supported((enum ft_isa)i))
            continue;
        check_level((enum ft_isa)i);
    }
    return ft_test_finish("test_qgemm");
}
