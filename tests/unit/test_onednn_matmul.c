/* engine/model/onednn_matmul.c against the reference f32 matmul
 * (ft_matmul_rows_ref with the reference F32 vec_dot): slices of weight
 * rows written into a wider output (ldc > n), shapes with odd sizes, the
 * same shape again (a cached primitive), and two threads running slices of
 * one matrix at once as the pool does; afterwards no thread of oneDNN's
 * own (OpenMP team) is alive. |got - ref| <= 1e-5 * sum |a_i w_i|.
 * Skips (77) in builds without FT_ONEDNN or on a CPU whose best level is not
 * avx512 (the only level that routes F32 weights to oneDNN). */
#include "engine/model/onednn_matmul.h"
#include "ft/common.h"
#include "ft/cpu.h"
#include "ft/ops.h"
#include "ft_test.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t g_rng = 0x243f6a8885a308d3ull;

static float rng_gauss(void) { return ft_test_rng_gauss(&g_rng); }

struct slice {
    const float *a, *w;
    int64_t m, k, r0, r1, ldc;
    float *c;
    int rc;
};

static void *run_slice(void *p) {
    struct slice *s = p;
    s->rc = ft_onednn_matmul(s->a, s->m, s->k, s->w + s->r0 * s->k, s->r1 - s->r0, s->c + s->r0, s->ldc);
    return NULL;
}

static void check_case(int64_t m, int64_t k, int64_t n, int threads) {
    float *a = malloc(sizeof(float) * (size_t)(m * k));
    float *w = malloc(sizeof(float) * (size_t)(n * k));
    float *c = malloc(sizeof(float) * (size_t)(m * n));
    float *ref = malloc(sizeof(float) * (size_t)(m * n));
    for (int64_t i = 0; i < m * k; i++)
        a[i] = rng_gauss();
    for (int64_t i = 0; i < n * k; i++)
        w[i] = rng_gauss() * 0.1f;
    for (int64_t i = 0; i < m * n; i++)
        c[i] = 0.0f;
    struct slice s[2];
    pthread_t th[2];
    for (int t = 0; t < threads; t++) {
        s[t] = (struct slice){a, w, m, k, n * t / threads, n * (t + 1) / threads, n, c, -1};
        CHECK(pthread_create(&th[t], NULL, run_slice, &s[t]) == 0);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        CHECK_EQ_INT(s[t].rc, FT_OK);
    }
    ft_matmul_rows_ref(ft_type_traits_ref(FT_TYPE_F32)->vec_dot, w, (size_t)k * sizeof(float), k, 0, n, a,
                       (size_t)k * sizeof(float), m, ref, n);
    int bad = 0;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t r = 0; r < n; r++) {
            double mag = 0.0;
            for (int64_t j = 0; j < k; j++)
                mag += fabs((double)a[i * k + j] * (double)w[r * k + j]);
            const double err = fabs((double)c[i * n + r] - (double)ref[i * n + r]);
            if (!(err <= 1e-5 * mag + 1e-30) && bad++ < 3)
                CHECKF(0, "m=%lld k=%lld n=%lld: c[%lld][%lld] = %.8g, ref %.8g", (long long)m, (long long)k,
                       (long long)n, (long long)i, (long long)r, c[i * n + r], ref[i * n + r]);
        }
    }
    CHECK(bad == 0);
    free(a);
    free(w);
    free(c);
    free(ref);
}

int main(void) {
    const struct ft_weight probe = {.type = FT_TYPE_F32};
    if (!ft_onednn_matmul_applies(&probe))
        FT_TEST_SKIP("oneDNN is not used here (built without FT_ONEDNN, or the kernel level is not avx512)");
    static const int64_t shapes[][3] = {{4, 64, 32}, {13, 100, 70}, {48, 256, 96}, {512, 64, 33}, {7, 1000, 5}};
    for (size_t i = 0; i < FT_ARRAY_LEN(shapes); i++) {
        check_case(shapes[i][0], shapes[i][1], shapes[i][2], 1);
        check_case(shapes[i][0], shapes[i][1], shapes[i][2], 2);
        check_case(shapes[i][0], shapes[i][1], shapes[i][2], 2); /* cached primitives */
    }
    /* oneDNN runs on the calling thread only: with one OpenMP thread per
     * caller it starts no OpenMP team. A call from this (long-lived) thread
     * would leave such a team parked, so after it only this thread is. */
    {
        struct slice one = {NULL, NULL, 64, 256, 0, 96, 96, NULL, -1};
        float *a = calloc(64 * 256, sizeof(float)), *w = calloc(96 * 256, sizeof(float));
        float *c = calloc(64 * 96, sizeof(float));
        one.a = a, one.w = w, one.c = c;
        run_slice(&one);
        CHECK_EQ_INT(one.rc, FT_OK);
        free(a);
        free(w);
        free(c);
    }
    int tasks = 0;
    DIR *d = opendir("/proc/self/task");
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            tasks += e->d_name[0] != '.';
        closedir(d);
        CHECKF(tasks == 1, "%d threads alive after the calls: oneDNN started threads of its own", tasks);
    }
    return ft_test_finish("test_onednn_matmul");
}
