/* oneDNN matmul for F32 weights in prefill (FT_ONEDNN builds), called by
 * the float GEMM path (engine/model/gemm_float.c) on each pool thread's slice of
 * weight rows.
 *
 * Measured against our own kernels (docs/performance.md, Float weights,
 * attention and row ops): oneDNN 2.6.3, as Debian ships it, has no f16 matmul
 * on this CPU and its bf16 one ran at ~80 GFLOP/s per core against ~140 for
 * ours, so F16 and BF16 weights use our GEMM; for F32 weights oneDNN's brgemm
 * was ahead by 5-10% at 64..512 rows and by 2-3x at 8 rows (our GEMM repacks
 * each weight slice per call), so F32 weights come here. Only on the avx512
 * level: a forced lower level (FT_ISA) must not run AVX-512 code behind the
 * user's back.
 *
 * Threading: Debian's libdnnl is the OpenMP build. Each pool thread calls
 * it on its own slice of the weight rows with omp_set_num_threads(1) set
 * once on that thread (found with dlsym in the runtime libdnnl loaded), so oneDNN never starts a team of its own next to
 * our pool (no oversubscription), and the split is the same as our GEMM's.
 * Primitives are created once per shape (rows, k, slice width, ldc) and
 * cached; each thread has its own stream and its own scratchpad (user
 * scratchpad mode, which makes concurrent execution of one primitive
 * safe). A shape the full cache cannot hold, or any oneDNN error, falls
 * back to our GEMM. */
#include "onednn_matmul.h"

#include "ft/common.h"
#include "ft/cpu.h"

#ifdef FT_HAVE_ONEDNN

#include <dlfcn.h>
#include <dnnl.h>
#include <pthread.h>
#include <stdlib.h>

#define FT_DNNL_CACHE 64

struct dnnl_entry {
    int64_t m, k, n, ldc;
    dnnl_primitive_t prim;
    size_t scratch; /* scratchpad bytes */
};

static struct {
    pthread_mutex_t mutex;
    dnnl_engine_t engine; /* NULL: oneDNN unusable */
    struct dnnl_entry cache[FT_DNNL_CACHE];
    int n;
} g_dnnl = {.mutex = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t g_dnnl_once = PTHREAD_ONCE_INIT;

/* Per thread: stream and scratchpad, freed when the thread exits. */
struct dnnl_thread {
    dnnl_stream_t stream;
    void *scratch;
    size_t scratch_size;
};
static pthread_key_t g_thread_key;

static void thread_free(void *p) {
    struct dnnl_thread *t = p;
    if (t->stream)
        dnnl_stream_destroy(t->stream);
    free(t->scratch);
    free(t);
}

static void dnnl_init(void) {
    if (pthread_key_create(&g_thread_key, thread_free) != 0)
        return;
    if (dnnl_engine_create(&g_dnnl.engine, dnnl_cpu, 0) != dnnl_success) {
        g_dnnl.engine = NULL;
        FT_LOG_W("oneDNN: no CPU engine; F32 matmuls use the built-in GEMM");
    }
}

static struct dnnl_thread *thread_state(void) {
    struct dnnl_thread *t = pthread_getspecific(g_thread_key);
    if (t)
        return t;
    t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    if (dnnl_stream_create(&t->stream, g_dnnl.engine, dnnl_stream_default_flags) != dnnl_success) {
        free(t);
        return NULL;
    }
    /* This thread's oneDNN calls stay on this thread. The OpenMP runtime is
     * the one libdnnl brought in; looked up at run time so FreeToken itself
     * needs no OpenMP (clang builds have no omp.h without libomp-dev), and
     * absent in a non-OpenMP libdnnl. */
    void (*set_threads)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (set_threads)
        set_threads(1);
    pthread_setspecific(g_thread_key, t);
    return t;
}

/* c (m, n) with rows ldc apart = a (m, k) W^T, W rows k apart. */
static struct dnnl_entry *entry_for(int64_t m, int64_t k, int64_t n, int64_t ldc) {
    struct dnnl_entry *e = NULL;
    pthread_mutex_lock(&g_dnnl.mutex);
    for (int i = 0; i < g_dnnl.n; i++) {
        struct dnnl_entry *c = &g_dnnl.cache[i];
        if (c->m == m && c->k == k && c->n == n && c->ldc == ldc) {
            e = c;
            break;
        }
    }
    if (!e && g_dnnl.n < FT_DNNL_CACHE) {
        dnnl_memory_desc_t a_md, w_md, c_md;
        const dnnl_dims_t a_dims = {m, k}, a_str = {k, 1};
        const dnnl_dims_t w_dims = {k, n}, w_str = {1, k};
        const dnnl_dims_t c_dims = {m, n}, c_str = {ldc, 1};
        dnnl_matmul_desc_t md;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_primitive_desc_t pd = NULL;
        dnnl_primitive_t prim = NULL;
        if (dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dnnl_f32, a_str) == dnnl_success &&
            dnnl_memory_desc_init_by_strides(&w_md, 2, w_dims, dnnl_f32, w_str) == dnnl_success &&
            dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_str) == dnnl_success &&
            dnnl_matmul_desc_init(&md, &a_md, &w_md, NULL, &c_md) == dnnl_success &&
            dnnl_primitive_attr_create(&attr) == dnnl_success &&
            dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
            dnnl_primitive_desc_create(&pd, &md, attr, g_dnnl.engine, NULL) == dnnl_success &&
            dnnl_primitive_create(&prim, pd) == dnnl_success) {
            const dnnl_memory_desc_t *s_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
            e = &g_dnnl.cache[g_dnnl.n++];
            *e = (struct dnnl_entry){m, k, n, ldc, prim, s_md ? dnnl_memory_desc_get_size(s_md) : 0};
        } else if (prim) {
            dnnl_primitive_destroy(prim);
        }
        if (pd)
            dnnl_primitive_desc_destroy(pd);
        if (attr)
            dnnl_primitive_attr_destroy(attr);
    }
    pthread_mutex_unlock(&g_dnnl.mutex);
    return e;
}

bool ft_onednn_matmul_applies(const struct ft_weight *w) {
    if (w->type != FT_TYPE_F32 || !ft_isa_builds_on(ft_cpu_isa(), FT_ISA_AVX512))
        return false;
    pthread_once(&g_dnnl_once, dnnl_init);
    return g_dnnl.engine != NULL;
}

int ft_onednn_matmul(const float *a, int64_t m, int64_t k, const float *w, int64_t n, float *c, int64_t ldc) {
    struct dnnl_thread *t = thread_state();
    struct dnnl_entry *e = t ? entry_for(m, k, n, ldc) : NULL;
    if (!e)
        return FT_ENOMEM;
    if (e->scratch > t->scratch_size) {
        void *s = realloc(t->scratch, e->scratch);
        if (!s)
            return FT_ENOMEM;
        t->scratch = s;
        t->scratch_size = e->scratch;
    }
    const dnnl_memory_desc_t *a_md, *w_md, *c_md, *s_md;
    const_dnnl_primitive_desc_t pd;
    if (dnnl_primitive_get_primitive_desc(e->prim, &pd) != dnnl_success)
        return FT_EINVAL;
    a_md = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    c_md = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    s_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
    int rc = FT_EINVAL;
    if (dnnl_memory_create(&mem[0], a_md, g_dnnl.engine, (void *)a) == dnnl_success &&
        dnnl_memory_create(&mem[1], w_md, g_dnnl.engine, (void *)w) == dnnl_success &&
        dnnl_memory_create(&mem[2], c_md, g_dnnl.engine, c) == dnnl_success &&
        dnnl_memory_create(&mem[3], s_md, g_dnnl.engine, e->scratch ? t->scratch : NULL) == dnnl_success) {
        const dnnl_exec_arg_t args[4] = {
            {DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}, {DNNL_ARG_SCRATCHPAD, mem[3]}};
        if (dnnl_primitive_execute(e->prim, t->stream, 4, args) == dnnl_success &&
            dnnl_stream_wait(t->stream) == dnnl_success)
            rc = FT_OK;
    }
    for (int i = 0; i < 4; i++)
        if (mem[i])
            dnnl_memory_destroy(mem[i]);
    return rc;
}

#else /* !FT_HAVE_ONEDNN */

bool ft_onednn_matmul_applies(const struct ft_weight *w) {
    (void)w;
    return false;
}

int ft_onednn_matmul(const float *a, int64_t m, int64_t k, const float *w, int64_t n, float *c, int64_t ldc) {
    (void)a, (void)m, (void)k, (void)w, (void)n, (void)c, (void)ldc;
    return FT_EUNSUPPORTED;
}

#endif
