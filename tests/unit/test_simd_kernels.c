/* Per-ISA kernels against the scalar reference (docs/conventions.md, Kernels).
 *
 * For every kernel level this machine (or qemu) can run -- scalar, avx2,
 * avx512 on x86-64; scalar, neon, neon-dotprod, neon-i8mm on aarch64 -- and every type
 * FreeToken runs, on rows of several lengths (one block, a few blocks, the
 * real model's 640/1024/2048/2304/8192) filled from fixed seeds with several
 * value patterns (gaussian, tiny, large, outliers, zero blocks, exact
 * rounding ties), it checks:
 *   - from_float and from_float_act (weight and activation quantizers of
 *     Q8_0/Q8_1/Q8_K, F32->F16/BF16): bytes identical to the reference's;
 *   - to_float: floats bit-identical to the reference (F16/BF16 exhaustively
 *     over all 65536 inputs);
 *   - vec_dot: |fast - ref| <= 1e-5 * sum |x_i y_i| + 1e-30, with x_i, y_i
 *     the dequantized operands, on weights from the reference quantizer and
 *     on random weight bytes (every bit pattern of quants and scales);
 *   - on AVX-512, also the BF16 dot the level uses on CPUs without
 *     AVX512_BF16 (the table built with have_bf16 = 0);
 *   - the level API: FT_ISA / ft_cpu_force_isa() select the table, unknown
 *     and unsupported levels are refused with a message.
 * With FT_ISA=<level> set (tests/arm/run_arm_tests.sh runs one level per
 * qemu run) only that level is tested; if it is refused, only the API is.
 * Buffers are allocated to the exact byte and used at addresses that are
 * not vector-aligned, so an out-of-bounds or alignment-dependent load shows
 * up (under ASan too).
 */
#include "ft/common.h"
#include "ft/cpu.h"
#include "ft/types.h"
#include "ft_test.h"
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/quant_ref.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- data ------------------------------------------------------------------ */

static uint64_t g_rng;

static uint64_t rng_next(void) { return ft_test_rng_next(&g_rng); }
static float rng_uniform(void) { return ft_test_rng_uniform(&g_rng); } /* [0, 1) */
static float rng_gauss(void) { return ft_test_rng_gauss(&g_rng); }

enum pattern { P_GAUSS, P_TINY, P_LARGE, P_OUTLIERS, P_ZERO_BLOCKS, P_TIES, P_COUNT };
static const char *const k_pattern_names[P_COUNT] = {"gauss", "tiny", "large", "outliers", "zero-blocks", "ties"};

/* Weights (act_type < 0) stay inside the fp16 range of block scales;
 * activations go wider (Q8_K's scale is a float), except for Q8_1 whose
 * half-precision s = d * sum(q) overflows past |x| ~ 2000 (ggml's too). */
static void fill(float *v, int64_t n, enum pattern p, int act_type) {
    const int act = act_type >= 0;
    const float large = !act || act_type == FT_TYPE_Q8_1 ? 300.0f : 1e4f;
    for (int64_t i = 0; i < n; i++) {
        float g = rng_gauss();
        switch (p) {
        case P_GAUSS:
            break;
        case P_TINY:
            g *= act ? 1e-4f : 1e-3f;
            break;
        case P_LARGE:
            g *= large;
            break;
        case P_OUTLIERS:
            if (rng_next() % 37 == 0)
                g *= 100.0f;
            break;
        case P_ZERO_BLOCKS:
            if ((i / 32) % 3 == 1 || (i / 256) % 4 == 2)
                g = 0.0f;
            break;
        case P_TIES:
            /* multiples of 0.5 up to 63.5, and in each 32-block one element
             * of +-127 so Q8_0's d = 1 and Q8_K's iscale = +-1: the products
             * hit .5 exactly and rounding ties decide the bytes */
            g = (float)((int)(rng_next() % 255) - 127) * 0.5f;
            if (i % 32 == 5)
                g = (rng_next() & 1) ? 127.0f : -127.0f;
            break;
        default:
            break;
        }
        v[i] = g;
    }
}

/* n bytes at an address 4 mod 16 -- the natural alignment of every block
 * struct (2 or 4 bytes) but no vector alignment -- with the allocation
 * ending exactly at the end of the buffer so an over-read is caught by
 * ASan. */
struct buf {
    uint8_t *base;
    uint8_t *p;
};

static struct buf buf_new(size_t n) {
    struct buf b;
    b.base = malloc(n + 4);
    if (!b.base) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    b.p = b.base + 4;
    return b;
}

static void buf_free(struct buf *b) { free(b->base); }

/* ---- checks -------------------------------------------------------------------- */

static const enum ft_type k_weight_types[] = {
    FT_TYPE_F32,  FT_TYPE_F16,  FT_TYPE_BF16, FT_TYPE_Q4_0, FT_TYPE_Q4_1, FT_TYPE_Q5_0, FT_TYPE_Q5_1,
    FT_TYPE_Q8_0, FT_TYPE_Q2_K, FT_TYPE_Q3_K, FT_TYPE_Q4_K, FT_TYPE_Q5_K, FT_TYPE_Q6_K,
    FT_TYPE_IQ4_NL, FT_TYPE_IQ4_XS, FT_TYPE_MXFP4,
};
static const enum ft_type k_act_types[] = {FT_TYPE_Q8_0, FT_TYPE_Q8_1, FT_TYPE_Q8_K, FT_TYPE_F16, FT_TYPE_BF16};
static const int64_t k_lengths[] = {1, 7, 17, 32, 64, 96, 256, 512, 640, 768, 1024, 2048, 2304, 8192};

static double g_max_err[FT_ISA_COUNT][FT_TYPE_COUNT];

/* Random bytes for a row of type t with sane half-precision scales: every
 * quant and sub-block scale bit pattern appears, but no NaN/inf. */
static void random_weight_bytes(enum ft_type t, uint8_t *x, int64_t n) {
    const struct ft_type_info *ti = ft_type_info(t);
    const int64_t nb = n / ti->blck_size;
    for (size_t i = 0; i < (size_t)nb * ti->type_size; i++)
        x[i] = (uint8_t)rng_next();
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = x + b * (int64_t)ti->type_size;
        const uint16_t d = ft_float_to_half((rng_uniform() + 0.05f) * 0.01f);
        const uint16_t m = ft_float_to_half((rng_uniform() - 0.5f) * 0.1f);
        switch (t) {
        case FT_TYPE_Q4_0:
        case FT_TYPE_Q5_0:
        case FT_TYPE_Q8_0:
            memcpy(blk, &d, 2);
            break;
        case FT_TYPE_Q4_1:
        case FT_TYPE_Q5_1:
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &m, 2);
            break;
        case FT_TYPE_Q2_K:
            memcpy(blk + 80, &d, 2);
            memcpy(blk + 82, &d, 2);
            break;
        case FT_TYPE_Q3_K:
            memcpy(blk + 108, &d, 2);
            break;
        case FT_TYPE_Q4_K:
        case FT_TYPE_Q5_K:
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &d, 2);
            break;
        case FT_TYPE_Q6_K:
            memcpy(blk + 208, &d, 2);
            break;
        case FT_TYPE_IQ4_NL:
        case FT_TYPE_IQ4_XS:
            memcpy(blk, &d, 2);
            break;
        case FT_TYPE_MXFP4: /* scales 2^-18 .. 2^-3, like d above */
            blk[0] = (uint8_t)(110 + rng_next() % 16);
            break;
        default:
            break;
        }
    }
}

/* One weight type at one level, length and pattern. */
static void check_vec_dot(enum ft_isa isa, enum ft_type t, int64_t n, enum pattern p, int random_bytes) {
    const struct ft_type_info *ref = ft_type_traits_ref(t);
    const struct ft_type_info *fast = ft_type_traits_isa(t, isa);
    const enum ft_type at = ref->vec_dot_type;
    const struct ft_type_info *aref = ft_type_traits_ref(at);
    const struct ft_type_info *afast = ft_type_traits_isa(at, isa);
    if (n % ref->blck_size != 0 || n % aref->blck_size != 0)
        return;
    const size_t xs = ft_row_size(t, n), ys = ft_row_size(at, n);

    float *w = malloc((size_t)n * sizeof(float));
    float *a = malloc((size_t)n * sizeof(float));
    float *xd = malloc((size_t)n * sizeof(float));
    float *yd = malloc((size_t)n * sizeof(float));
    struct buf x = buf_new(xs), y = buf_new(ys), y2 = buf_new(ys);
    if (!w || !a || !xd || !yd) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }

    if (random_bytes && ref->is_quantized) {
        random_weight_bytes(t, x.p, n);
    } else {
        fill(w, n, p, -1);
        ref->from_float(w, x.p, n);
    }
    fill(a, n, p, (int)at);
    aref->from_float_act(a, y.p, n);

    /* the level's activation quantizer gives the same bytes */
    afast->from_float_act(a, y2.p, n);
    if (memcmp(y.p, y2.p, ys) != 0) {
        size_t k = 0;
        while (y.p[k] == y2.p[k])
            k++;
        CHECKF(0, "%s from_float_act %s n=%lld %s: byte %zu differs (%02x vs ref %02x)", ft_isa_name(isa), aref->name,
               (long long)n, k_pattern_names[p], k, y2.p[k], y.p[k]);
    } else {
        CHECK(1);
    }

    /* the level's to_float of the weights gives the same floats */
    ref->to_float(x.p, xd, n);
    fast->to_float(x.p, yd, n);
    if (memcmp(xd, yd, (size_t)n * sizeof(float)) != 0) {
        int64_t k = 0;
        while (memcmp(&xd[k], &yd[k], sizeof(float)) == 0)
            k++;
        CHECKF(0, "%s to_float %s n=%lld %s%s: element %lld is %.9g, ref %.9g", ft_isa_name(isa), ref->name,
               (long long)n, k_pattern_names[p], random_bytes ? " (random bytes)" : "", (long long)k, yd[k], xd[k]);
    } else {
        CHECK(1);
    }

    /* vec_dot within the normalized tolerance */
    aref->to_float(y.p, yd, n);
    double norm = 0.0;
    for (int64_t i = 0; i < n; i++)
        norm += fabs((double)xd[i] * (double)yd[i]);
    float s_ref = NAN, s_fast = NAN;
    ref->vec_dot(n, &s_ref, x.p, y.p);
    fast->vec_dot(n, &s_fast, x.p, y.p);
    const double err = fabs((double)s_fast - (double)s_ref);
    const double tol = 1e-5 * norm + 1e-30;
    const double rel = norm > 0 ? err / norm : err;
    if (rel > g_max_err[isa][t])
        g_max_err[isa][t] = rel;
    CHECKF(err <= tol && isfinite(s_fast), "%s vec_dot %s n=%lld %s%s: %.9g vs ref %.9g (|diff| %.3g > tol %.3g)",
           ft_isa_name(isa), ref->name, (long long)n, k_pattern_names[p], random_bytes ? " (random bytes)" : "",
           (double)s_fast, (double)s_ref, err, tol);

    buf_free(&x);
    buf_free(&y);
    buf_free(&y2);
    free(w);
    free(a);
    free(xd);
    free(yd);
}

/* Activation quantizers on their own, incl. lengths the dots skip. */
static void check_quantizers(enum ft_isa isa) {
    for (size_t ti = 0; ti < FT_ARRAY_LEN(k_act_types); ti++) {
        const enum ft_type t = k_act_types[ti];
        const struct ft_type_info *ref = ft_type_traits_ref(t), *fast = ft_type_traits_isa(t, isa);
        for (size_t li = 0; li < FT_ARRAY_LEN(k_lengths); li++) {
            const int64_t n = k_lengths[li];
            if (n % ref->blck_size)
                continue;
            for (int p = 0; p < P_COUNT; p++) {
                g_rng = 0x1234567ull + (uint64_t)(n * 131 + p * 7 + (int)t);
                float *a = malloc((size_t)n * sizeof(float));
                struct buf y = buf_new(ft_row_size(t, n)), y2 = buf_new(ft_row_size(t, n));
                fill(a, n, (enum pattern)p, (int)t);
                ref->from_float(a, y.p, n);
                fast->from_float(a, y2.p, n);
                CHECKF(memcmp(y.p, y2.p, ft_row_size(t, n)) == 0, "%s from_float %s n=%lld %s: bytes differ",
                       ft_isa_name(isa), ref->name, (long long)n, k_pattern_names[p]);
                ref->from_float_act(a, y.p, n);
                fast->from_float_act(a, y2.p, n);
                CHECKF(memcmp(y.p, y2.p, ft_row_size(t, n)) == 0, "%s from_float_act %s n=%lld %s: bytes differ",
                       ft_isa_name(isa), ref->name, (long long)n, k_pattern_names[p]);
                buf_free(&y);
                buf_free(&y2);
                free(a);
            }
        }
    }
}

/* F16/BF16 conversions on every bit pattern and on special floats. */
static void check_half_conversions(enum ft_isa isa) {
    const enum ft_type types[2] = {FT_TYPE_F16, FT_TYPE_BF16};
    uint16_t *h = malloc(65536 * sizeof(uint16_t));
    float *f0 = malloc(65536 * sizeof(float)), *f1 = malloc(65536 * sizeof(float));
    uint16_t *h0 = malloc(65536 * sizeof(uint16_t)), *h1 = malloc(65536 * sizeof(uint16_t));
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    for (int k = 0; k < 2; k++) {
        const struct ft_type_info *ref = ft_type_traits_ref(types[k]), *fast = ft_type_traits_isa(types[k], isa);
        ref->to_float(h, f0, 65536);
        fast->to_float(h, f1, 65536);
        CHECKF(memcmp(f0, f1, 65536 * sizeof(float)) == 0, "%s to_float %s: all 65536 inputs", ft_isa_name(isa),
               ref->name);
        /* round trip of those floats (incl. NaN payloads, infs, subnormals),
         * then floats around every rounding boundary: f0 nudged by +-1 ulp
         * and halfway points */
        ref->from_float(f0, h0, 65536);
        fast->from_float(f0, h1, 65536);
        CHECKF(memcmp(h0, h1, 65536 * 2) == 0, "%s from_float %s: exact values", ft_isa_name(isa), ref->name);
        for (int i = 0; i < 65536; i++) {
            uint32_t u = ft_f32_bits(f0[i]);
            u += (uint32_t)((i % 3) - 1) << (k == 0 ? 12 : 15); /* near the tie of the dropped bits */
            f1[i] = ft_f32_from_bits(u);
        }
        ref->from_float(f1, h0, 65536);
        fast->from_float(f1, h1, 65536);
        CHECKF(memcmp(h0, h1, 65536 * 2) == 0, "%s from_float %s: near ties", ft_isa_name(isa), ref->name);
        for (int i = 0; i < 65536; i++)
            f1[i] = ft_f32_from_bits((uint32_t)rng_next());
        ref->from_float(f1, h0, 65536);
        fast->from_float(f1, h1, 65536);
        CHECKF(memcmp(h0, h1, 65536 * 2) == 0, "%s from_float %s: random bits", ft_isa_name(isa), ref->name);
    }
    free(h);
    free(f0);
    free(f1);
    free(h0);
    free(h1);
}

static void check_level(enum ft_isa isa) {
    check_half_conversions(isa);
    check_quantizers(isa);
    for (size_t ti = 0; ti < FT_ARRAY_LEN(k_weight_types); ti++) {
        const enum ft_type t = k_weight_types[ti];
        for (size_t li = 0; li < FT_ARRAY_LEN(k_lengths); li++) {
            for (int p = 0; p < P_COUNT; p++) {
                g_rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(k_lengths[li] * 1000003 + p * 101 + (int)t);
                check_vec_dot(isa, t, k_lengths[li], (enum pattern)p, 0);
            }
            g_rng = 0xabcdef12345ull + (uint64_t)k_lengths[li] + (uint64_t)t;
            check_vec_dot(isa, t, k_lengths[li], P_GAUSS, 1);
        }
    }
}

/* The avx512 level on a CPU without AVX512_BF16 (Ice Lake / Cascade Lake
 * servers) dots BF16 with shift + FMA instead of vdpbf16ps; this machine may
 * have BF16, so build that table variant directly and test its dot. */
static void check_avx512_without_bf16(void) {
#if defined(__x86_64__)
    if (!ft_isa_supported(FT_ISA_AVX512))
        return;
    static struct ft_type_info table[FT_TYPE_COUNT];
    for (int t = 0; t < FT_TYPE_COUNT; t++)
        if (ft_type_info((enum ft_type)t))
            table[t] = *ft_type_info((enum ft_type)t);
    ft_avx512_quant_fill_types(table, false);
    const struct ft_type_info *ref = ft_type_traits_ref(FT_TYPE_BF16);
    CHECK(table[FT_TYPE_BF16].vec_dot != ft_type_traits_isa(FT_TYPE_BF16, FT_ISA_AVX512)->vec_dot ||
          !ft_cpu_info()->avx512_bf16);
    for (size_t li = 0; li < FT_ARRAY_LEN(k_lengths); li++) {
        const int64_t n = k_lengths[li];
        float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
        struct buf x = buf_new((size_t)n * 2), y = buf_new((size_t)n * 2);
        g_rng = 0x5151ull + (uint64_t)n;
        fill(a, n, P_OUTLIERS, -1);
        fill(b, n, P_GAUSS, FT_TYPE_BF16);
        ref->from_float(a, x.p, n);
        ref->from_float(b, y.p, n);
        double norm = 0.0;
        for (int64_t i = 0; i < n; i++)
            norm += fabs((double)ft_bf16_to_fp32(((uint16_t *)(void *)x.p)[i]) *
                         (double)ft_bf16_to_fp32(((uint16_t *)(void *)y.p)[i]));
        float s_ref, s_fast;
        ref->vec_dot(n, &s_ref, x.p, y.p);
        table[FT_TYPE_BF16].vec_dot(n, &s_fast, x.p, y.p);
        CHECKF(fabs((double)s_fast - (double)s_ref) <= 1e-5 * norm + 1e-30,
               "avx512 (no BF16) vec_dot BF16 n=%lld: %.9g vs ref %.9g", (long long)n, (double)s_fast, (double)s_ref);
        buf_free(&x);
        buf_free(&y);
        free(a);
        free(b);
    }
#endif
}

/* ---- the level API ------------------------------------------------------------------- */

/* Returns the level FT_ISA asks for, FT_ISA_COUNT when unset (test all),
 * or -1 when FT_ISA was refused (test none). */
static int check_api(void) {
    const char *env = getenv("FT_ISA");
    const int init = ft_cpu_init();
    int only = FT_ISA_COUNT;
    if (env && *env) {
        enum ft_isa want;
        if (ft_isa_parse(env, &want) == FT_OK && ft_isa_supported(want)) {
            CHECK_EQ_INT(init, FT_OK);
            CHECK_EQ_INT(ft_cpu_isa(), want);
            printf("FT_ISA=%s: table in use is %s\n", env, ft_simd_isa_name());
            only = (int)want;
        } else {
            CHECK(init != FT_OK);
            CHECK(ft_cpu_error()[0] != '\0');
            printf("FT_ISA=%s refused: %s\n", env, ft_cpu_error());
            only = -1;
        }
    } else {
        CHECK_EQ_INT(init, FT_OK);
        CHECK_EQ_INT(ft_cpu_isa(), ft_cpu_info()->best);
    }

    enum ft_isa isa;
    CHECK_EQ_INT(ft_isa_parse("AVX512", &isa), FT_OK);
    CHECK_EQ_INT(isa, FT_ISA_AVX512);
    CHECK_EQ_INT(ft_isa_parse("neon-dotprod", &isa), FT_OK);
    CHECK_EQ_INT(isa, FT_ISA_NEON_DOTPROD);
    CHECK_EQ_INT(ft_isa_parse("NEON-I8MM", &isa), FT_OK);
    CHECK_EQ_INT(isa, FT_ISA_NEON_I8MM);
    CHECK_EQ_INT(ft_isa_parse("i8mm", &isa), FT_OK);
    CHECK_EQ_INT(isa, FT_ISA_NEON_I8MM);
    CHECK(strcmp(ft_isa_name(FT_ISA_NEON_I8MM), "neon-i8mm") == 0);
    CHECK_EQ_INT(ft_isa_parse("sse9", &isa), FT_EINVAL);

    const enum ft_isa before = ft_cpu_isa();
    CHECK_EQ_INT(ft_cpu_force_isa("sse9"), FT_EINVAL);
    CHECK(strstr(ft_cpu_error(), "sse9") != NULL);
    CHECK_EQ_INT(ft_cpu_isa(), before);
    for (int i = 0; i < FT_ISA_COUNT; i++) {
        if (!ft_isa_supported((enum ft_isa)i)) {
            CHECK_EQ_INT(ft_cpu_force_isa(ft_isa_name((enum ft_isa)i)), FT_EUNSUPPORTED);
            CHECK(strstr(ft_cpu_error(), ft_isa_name((enum ft_isa)i)) != NULL);
            CHECK_EQ_INT(ft_cpu_isa(), before);
            CHECK(ft_type_traits_isa(FT_TYPE_Q4_0, (enum ft_isa)i) == NULL);
        }
    }
    CHECK_EQ_INT(ft_cpu_force_isa("scalar"), FT_OK);
    CHECK(strcmp(ft_simd_isa_name(), "scalar") == 0);
    CHECK(ft_type_traits(FT_TYPE_Q4_0)->vec_dot == ft_type_traits_ref(FT_TYPE_Q4_0)->vec_dot);
    CHECK_EQ_INT(ft_cpu_force_isa("auto"), FT_OK);
    CHECK_EQ_INT(ft_cpu_isa(), ft_cpu_info()->best);
    CHECK(ft_type_traits(FT_TYPE_Q4_K) == ft_type_traits_isa(FT_TYPE_Q4_K, ft_cpu_info()->best));
    CHECK(ft_type_traits((enum ft_type)4) == NULL); /* removed Q4_2 */
    CHECK_EQ_INT(ft_cpu_force_isa(ft_isa_name(before)), FT_OK);

    char line[1024];
    ft_cpu_describe(line, sizeof(line));
    printf("cpu: %s\n", line);
    return only;
}

int main(void) {
    const int only = check_api();
    int levels = 0;
    for (int i = 0; i < FT_ISA_COUNT; i++) {
        const enum ft_isa isa = (enum ft_isa)i;
        if (only != FT_ISA_COUNT && i != only)
            continue;
        if (!ft_isa_supported(isa)) {
            printf("SKIP level %s: not supported by this CPU/build\n", ft_isa_name(isa));
            continue;
        }
        const int before = ft_test_failures;
        check_level(isa);
        if (isa == FT_ISA_AVX512)
            check_avx512_without_bf16();
        levels++;
        printf("level %-13s %s; max |diff| / sum|x*y| per type:", ft_isa_name(isa),
               ft_test_failures == before ? "ok" : "FAILED");
        for (size_t ti = 0; ti < FT_ARRAY_LEN(k_weight_types); ti++)
            printf(" %s %.1e", ft_type_name(k_weight_types[ti]), g_max_err[isa][k_weight_types[ti]]);
        printf("\n");
    }
    printf("%d kernel levels tested\n", levels);
    return ft_test_finish("test_simd_kernels");
}
