/* ft-bench-float-gemm: the float-weight GEMM of each kernel level against
 * oneDNN's matmul, per shape and batch size -- the numbers behind the path
 * choice in engine/model/gemm_float.c and engine/model/onednn_matmul.c
 * (docs/performance.md, Float weights, attention and row ops).
 *
 * One thread; GFLOP/s (2 m k n / time) from the thread's CPU time, best of
 * a few repetitions, so a machine shared with other jobs disturbs it less
 * than wall time would. Shapes default to Llama-3.2-1B's (k -> n):
 * 2048->2048, 2048->512, 2048->8192, 8192->2048, 2048->128256; m = 1, 8,
 * 64, 512. Columns: our GEMM with F16, BF16 and F32 weights (the level in
 * use, FT_ISA to force one), and with FT_ONEDNN oneDNN's f32 and bf16
 * matmul given its preferred (reordered) weight layout and the GGUF row
 * layout as it is. Not a test: it asserts nothing.
 *
 *   ft-bench-float-gemm [--m 1,8,64,512] [--shapes 2048x2048,...] [--no-onednn]
 */
#include "ft/cpu.h"
#include "ft/ops.h"
#include "ft/types.h"

#ifdef FT_HAVE_ONEDNN
#include <dlfcn.h>
#include <dnnl.h>
#endif
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int reps_for(double flops) { return flops > 1e11 ? 2 : flops > 1e9 ? 5 : 30; }

static void *xmalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(1);
    }
    memset(p, 0, n);
    return p;
}

/* Our GEMM: pack A then the product, as engine/model/gemm_float.c runs it. */
static double own_gflops(enum ft_type wt, int64_t m, int64_t k, int64_t n) {
    const struct ft_float_kernels *fk = ft_float_kernels();
    const size_t w_row = ft_row_size(wt, k);
    char *w = xmalloc(w_row * (size_t)n);
    float *a = xmalloc(sizeof(float) * (size_t)(m * k));
    float *c = xmalloc(sizeof(float) * (size_t)(m * n));
    uint16_t one = wt == FT_TYPE_F16 ? ft_fp32_to_fp16(0.01f) : ft_fp32_to_bf16(0.01f);
    for (size_t i = 0; i < w_row * (size_t)n / 2; i++)
        ((uint16_t *)w)[i] = one; /* F32: the same bytes as some small float */
    for (int64_t i = 0; i < m * k; i++)
        a[i] = 0.5f;
    void *packed = xmalloc(fk->gemm_packed_size(wt, m, k));
    const int64_t panels = (m + fk->gemm_mr - 1) / fk->gemm_mr;
    const double flops = 2.0 * (double)m * (double)k * (double)n;
    double best = 1e30;
    for (int r = 0; r < reps_for(flops); r++) {
        const double t0 = cpu_now();
        fk->gemm_pack(wt, a, k, m, k, 0, panels, packed);
        fk->gemm(wt, w, w_row, k, 0, n, packed, m, c, n);
        const double t = cpu_now() - t0;
        if (t < best)
            best = t;
    }
    free(w);
    free(a);
    free(c);
    free(packed);
    return flops / best * 1e-9;
}

/* Decode's case: m rows against a weight matrix far larger than the caches
 * (1 GiB of weights in rows of k), so every weight byte comes from DRAM
 * once; GB/s of weights read, from the thread's CPU time. With the level's
 * GEMM where it takes m rows (gemm_min_m), else the vec_dot loop. */
static double own_stream_gbs(enum ft_type wt, int64_t m, int64_t k) {
    const struct ft_float_kernels *fk = ft_float_kernels();
    const struct ft_type_info *ti = ft_type_traits(wt);
    const size_t w_row = ft_row_size(wt, k);
    const int64_t n = (int64_t)((1ull << 30) / w_row) / 64 * 64;
    char *w = xmalloc(w_row * (size_t)n);
    for (size_t i = 0; i < w_row * (size_t)n / 2; i++)
        ((uint16_t *)w)[i] = (uint16_t)(0x2000 + (i & 0xff)); /* small finite F16/BF16 values */
    float *a = xmalloc(sizeof(float) * (size_t)(m * k));
    float *c = xmalloc(sizeof(float) * (size_t)(m * n));
    for (int64_t i = 0; i < m * k; i++)
        a[i] = 0.5f;
    const bool gemm = fk->gemm_mr && m >= fk->gemm_min_m;
    void *packed = gemm ? xmalloc(fk->gemm_packed_size(wt, m, k)) : NULL;
    void *act = xmalloc(ft_row_size(ti->vec_dot_type, k) * (size_t)m);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        const double t0 = cpu_now();
        if (gemm) {
            fk->gemm_pack(wt, a, k, m, k, 0, (m + fk->gemm_mr - 1) / fk->gemm_mr, packed);
            fk->gemm(wt, w, w_row, k, 0, n, packed, m, c, n);
        } else {
            const size_t a_row = ft_row_size(ti->vec_dot_type, k);
            for (int64_t i = 0; i < m; i++)
                ft_type_traits(ti->vec_dot_type)->from_float_act(a + i * k, (char *)act + (size_t)i * a_row, k);
            for (int64_t rr = 0; rr < n; rr++)
                for (int64_t i = 0; i < m; i++)
                    ti->vec_dot(k, &c[i * n + rr], w + (size_t)rr * w_row, (char *)act + (size_t)i * a_row);
        }
        const double t = cpu_now() - t0;
        if (t < best)
            best = t;
    }
    free(w);
    free(a);
    free(c);
    free(packed);
    free(act);
    return (double)w_row * (double)n / best * 1e-9;
}

#ifdef FT_HAVE_ONEDNN
/* oneDNN matmul, A (m, k) f32 or bf16, W given as (k, n) with `reordered`
 * the library's preferred layout, else the GGUF rows (strides 1, k). */
static double onednn_gflops(dnnl_engine_t eng, dnnl_stream_t st, dnnl_data_type_t dt, bool reordered, int64_t m,
                            int64_t k, int64_t n) {
    dnnl_memory_desc_t a_md, w_md, c_md;
    const dnnl_dims_t ad = {m, k}, wd = {k, n}, cd = {m, n};
    if (dnnl_memory_desc_init_by_tag(&a_md, 2, ad, dt, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&w_md, 2, wd, dt, reordered ? dnnl_format_tag_any : dnnl_ba) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&c_md, 2, cd, dnnl_f32, dnnl_ab) != dnnl_success)
        return -1.0;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    if (dnnl_matmul_desc_init(&md, &a_md, &w_md, NULL, &c_md) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) != dnnl_success)
        return -1.0;
    if (dnnl_primitive_create(&prim, pd) != dnnl_success) {
        dnnl_primitive_desc_destroy(pd);
        return -1.0;
    }
    const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const size_t esz = dt == dnnl_f32 ? 4 : 2;
    void *a = xmalloc(esz * (size_t)(m * k)), *w = xmalloc(dnnl_memory_desc_get_size(wq));
    void *c = xmalloc(sizeof(float) * (size_t)(m * n));
    dnnl_memory_t ma, mw, mc;
    dnnl_memory_create(&ma, &a_md, eng, a);
    dnnl_memory_create(&mw, wq, eng, w);
    dnnl_memory_create(&mc, &c_md, eng, c);
    const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, mc}};
    const double flops = 2.0 * (double)m * (double)k * (double)n;
    double best = 1e30;
    for (int r = 0; r <= reps_for(flops); r++) { /* the first run warms up */
        const double t0 = cpu_now();
        dnnl_primitive_execute(prim, st, 3, args);
        dnnl_stream_wait(st);
        const double t = cpu_now() - t0;
        if (r > 0 && t < best)
            best = t;
    }
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mw);
    dnnl_memory_destroy(mc);
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
    free(a);
    free(w);
    free(c);
    return flops / best * 1e-9;
}
#endif

/* "1,8,64" or, with pairs, "2048x2048,2048x512"; -1 on a malformed list. */
static int parse_list(const char *s, int64_t *out, int cap, bool pairs) {
    int n = 0;
    char *end;
    while (*s) {
        if (n + (pairs ? 2 : 1) > cap)
            return -1;
        out[n++] = strtoll(s, &end, 10);
        if (end == s || out[n - 1] <= 0)
            return -1;
        s = end;
        if (pairs) {
            if (*s != 'x')
                return -1;
            out[n++] = strtoll(s + 1, &end, 10);
            if (end == s + 1 || out[n - 1] <= 0)
                return -1;
            s = end;
        }
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

int main(int argc, char **argv) {
    int64_t ms[16] = {1, 8, 64, 512}, shapes[32] = {2048, 2048, 2048, 512, 2048, 8192, 8192, 2048, 2048, 128256};
    int n_m = 4, n_sh = 10;
    bool use_onednn = true, stream = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--m") && i + 1 < argc && (n_m = parse_list(argv[i + 1], ms, 16, false)) > 0) {
            i++;
        } else if (!strcmp(argv[i], "--shapes") && i + 1 < argc &&
                   (n_sh = parse_list(argv[i + 1], shapes, 32, true)) > 0) {
            i++;
        } else if (!strcmp(argv[i], "--stream")) {
            stream = true;
        } else if (!strcmp(argv[i], "--no-onednn")) {
            use_onednn = false;
        } else {
            fprintf(stderr, "usage: %s [--m 1,8,64,512] [--shapes 2048x2048,...] [--no-onednn] [--stream]\n", argv[0]);
            return strcmp(argv[i], "--help") ? 1 : 0;
        }
    }
    if (ft_cpu_init() != 0) {
        fprintf(stderr, "%s\n", ft_cpu_error());
        return 1;
    }
    char cpu[512];
    ft_cpu_describe(cpu, sizeof(cpu));
    printf("%s\none thread, GFLOP/s from thread CPU time (best of a few runs)\n\n", cpu);
    if (ft_float_kernels()->gemm_mr == 0) {
        printf("this kernel level has no float GEMM\n");
        return 0;
    }
    if (stream) {
        printf("decode from DRAM: 1 GiB of weights in rows of 2048, GB/s of weights read\n\n| m | F16 | BF16 |\n|---:|---:|---:|\n");
        for (int j = 0; j < n_m; j++)
            printf("| %lld | %.2f | %.2f |\n", (long long)ms[j], own_stream_gbs(FT_TYPE_F16, ms[j], 2048),
                   own_stream_gbs(FT_TYPE_BF16, ms[j], 2048));
        return 0;
    }
#ifdef FT_HAVE_ONEDNN
    dnnl_engine_t eng = NULL;
    dnnl_stream_t st = NULL;
    /* one OpenMP thread, so the thread CPU time is all of oneDNN's work */
    void (*set_threads)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (set_threads)
        set_threads(1);
    if (use_onednn && (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success ||
                       dnnl_stream_create(&st, eng, dnnl_stream_default_flags) != dnnl_success))
        use_onednn = false;
    printf("| k->n | m | own F16 | own BF16 | own F32 |%s\n",
           use_onednn ? " oneDNN f32 | oneDNN f32 rows | oneDNN bf16 | oneDNN bf16 rows |" : "");
    printf("|---|---:|---:|---:|---:|%s\n", use_onednn ? "---:|---:|---:|---:|" : "");
#else
    (void)use_onednn; /* built without FT_ONEDNN */
    printf("| k->n | m | own F16 | own BF16 | own F32 |\n|---|---:|---:|---:|---:|\n");
#endif
    for (int s = 0; s + 1 < n_sh; s += 2) {
        const int64_t k = shapes[s], n = shapes[s + 1];
        for (int i = 0; i < n_m; i++) {
            const int64_t m = ms[i];
            printf("| %lldx%lld | %lld | %.1f | %.1f | %.1f |", (long long)k, (long long)n, (long long)m,
                   own_gflops(FT_TYPE_F16, m, k, n), own_gflops(FT_TYPE_BF16, m, k, n),
                   own_gflops(FT_TYPE_F32, m, k, n));
#ifdef FT_HAVE_ONEDNN
            if (use_onednn)
                printf(" %.1f | %.1f | %.1f | %.1f |", onednn_gflops(eng, st, dnnl_f32, true, m, k, n),
                       onednn_gflops(eng, st, dnnl_f32, false, m, k, n),
                       onednn_gflops(eng, st, dnnl_bf16, true, m, k, n),
                       onednn_gflops(eng, st, dnnl_bf16, false, m, k, n));
#endif
            printf("\n");
            fflush(stdout);
        }
    }
#ifdef FT_HAVE_ONEDNN
    if (st)
        dnnl_stream_destroy(st);
    if (eng)
        dnnl_engine_destroy(eng);
#endif
    return 0;
}
