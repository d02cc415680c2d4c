/* ft-bench-attention: one decode step's attention of one layer
 * (engine/model/attention.c: ft_attention_run, the call the forward pass makes)
 * against context length, with split-KV off and automatic.
 *
 * A decode step has one query row; with few KV heads there are fewer
 * (row, KV head) items than threads, and split-KV cuts the keys into chunks
 * so all threads share them. For each context length it prints the median
 * ns per call of both ways and their ratio (median of --runs calls, after a
 * warm-up; the cache is random fp16 in a shuffled block order). The shape
 * defaults to Gemma 3 270M (4 query heads, 1 KV head, head dim 256). Not a
 * test: it asserts nothing. Usage:
 *   ft-bench-attention [-t 2] [--heads 4] [--kv-heads 1] [--dim 256] [--runs 200] [--window 0]
 */
#include "engine/model/attention.h"
#include "engine/model/kv_cache.h"
#include "ft/common.h"
#include "ft/cpu.h"
#include "ft/ops.h"
#include "ft/threadpool.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rng_next(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

/* Median ns of one ft_attention_run over `runs` calls. */
static double time_calls(struct ft_threadpool *pool, const struct ft_attn_job *job, int runs, double *t) {
    for (int i = 0; i < runs / 10 + 1; i++)
        ft_attention_run(pool, job);
    for (int i = 0; i < runs; i++) {
        const double t0 = now_ns();
        ft_attention_run(pool, job);
        t[i] = now_ns() - t0;
    }
    qsort(t, (size_t)runs, sizeof(double), cmp_double);
    return t[runs / 2];
}

int main(int argc, char **argv) {
    int nth = 2, n_head = 4, n_head_kv = 1, dim = 256, runs = 200, window = 0;
    for (int i = 1; i < argc; i++) {
        int *dst = !strcmp(argv[i], "-t")           ? &nth
                   : !strcmp(argv[i], "--heads")    ? &n_head
                   : !strcmp(argv[i], "--kv-heads") ? &n_head_kv
                   : !strcmp(argv[i], "--dim")      ? &dim
                   : !strcmp(argv[i], "--runs")     ? &runs
                   : !strcmp(argv[i], "--window")   ? &window
                                                    : NULL;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "usage: %s [-t 2] [--heads 4] [--kv-heads 1] [--dim 256] [--runs 200] [--window 0]\n",
                    argv[0]);
            return 2;
        }
        *dst = atoi(argv[++i]);
    }
    if (nth < 1 || nth > 1024 || n_head_kv < 1 || n_head < n_head_kv || n_head > 256 || n_head % n_head_kv ||
        dim < 1 || dim > 1024 || runs < 10 || runs > 1000000 || window < 0) {
        fprintf(stderr, "%s: bad arguments\n", argv[0]);
        return 2;
    }
    if (ft_cpu_init() != FT_OK) {
        fprintf(stderr, "%s: %s\n", argv[0], ft_cpu_error());
        return 1;
    }
    struct ft_threadpool *pool = NULL;
    if (ft_threadpool_new(nth, &pool)) {
        fprintf(stderr, "%s: cannot make a pool of %d threads\n", argv[0], nth);
        return 1;
    }
    nth = ft_threadpool_n_threads(pool);

    static const int32_t lengths[] = {128, 512, 1024, 2048, 4096, 8192, 16384};
    const int32_t max_len = lengths[FT_ARRAY_LEN(lengths) - 1];
    const int32_t n_blocks = max_len / FT_KV_BLOCK_TOKENS;
    const int64_t k_row = (int64_t)n_head_kv * dim;
    const size_t cells = (size_t)n_blocks * FT_KV_BLOCK_TOKENS;
    uint16_t *kc = malloc(sizeof(uint16_t) * cells * (size_t)k_row);
    uint16_t *vc = malloc(sizeof(uint16_t) * cells * (size_t)k_row);
    int32_t *blocks = malloc(sizeof(int32_t) * (size_t)n_blocks);
    float *q = malloc(sizeof(float) * (size_t)n_head * (size_t)dim);
    float *out = malloc(sizeof(float) * (size_t)n_head * (size_t)dim);
    double *t = malloc(sizeof(double) * (size_t)runs);
    const struct ft_hparams hp = {.head_dim_k = dim, .head_dim_v = dim};
    const int rows_per_block = ft_attn_rows_per_block(&hp);
    const size_t stride = ft_attention_scratch_size(rows_per_block, n_head, n_head_kv, dim, dim);
    char *scratch = malloc(stride * (size_t)nth);
    void *parts = aligned_alloc(64, ft_attention_parts_size(n_head, n_head_kv, dim, nth));
    if (!kc || !vc || !blocks || !q || !out || !t || !scratch || !parts) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 1;
    }
    /* fp16 values of magnitude 0.5..2 (exponent 14 or 15), random mantissa and sign */
    for (size_t i = 0; i < cells * (size_t)k_row; i++) {
        kc[i] = (uint16_t)(0x3800 | (rng_next() & 0x87ff));
        vc[i] = (uint16_t)(0x3800 | (rng_next() & 0x87ff));
    }
    for (int32_t b = 0; b < n_blocks; b++)
        blocks[b] = b;
    for (int32_t b = n_blocks - 1; b > 0; b--) { /* a cache filled by several sequences */
        const int32_t j = (int32_t)(rng_next() % (uint32_t)(b + 1)), x = blocks[b];
        blocks[b] = blocks[j];
        blocks[j] = x;
    }
    for (int i = 0; i < n_head * dim; i++)
        q[i] = (float)(rng_next() % 2000) / 1000.0f - 1.0f;
    const struct ft_kv_seq seq = {.len = max_len, .n_blocks = n_blocks, .blocks = blocks};
    const int32_t row_seq = 0, row_att_n = 1;

    printf("attention of one decode row: %d heads, %d KV heads, dim %d, window %d, %d threads, kernels %s\n",
           n_head, n_head_kv, dim, window, nth, ft_isa_name(ft_cpu_isa()));
    printf("%8s %14s %14s %8s\n", "context", "unsplit ns", "split ns", "ratio");
    for (size_t l = 0; l < FT_ARRAY_LEN(lengths); l++) {
        const int32_t pos = lengths[l] - 1;
        struct ft_attn_job job = {
            .n_head = n_head, .n_head_kv = n_head_kv, .dk = dim, .dv = dim, .scale = 0.0625f, .window = window,
            .rows_per_block = rows_per_block, .k = kc, .v = vc, .k_row = k_row, .v_row = k_row, .seqs = &seq,
            .n_rows = 1, .q = q, .out = out, .row_pos = &pos, .row_seq = &row_seq, .row_att_n = &row_att_n,
            .scratch = scratch, .scratch_stride = stride, .parts = parts, .split = FT_ATTN_SPLIT_NEVER,
        };
        const double unsplit = time_calls(pool, &job, runs, t);
        job.split = FT_ATTN_SPLIT_AUTO;
        const double split = time_calls(pool, &job, runs, t);
        printf("%8d %14.0f %14.0f %7.2fx\n", lengths[l], unsplit, split, unsplit / split);
    }
    free(kc);
    free(vc);
    free(blocks);
    free(q);
    free(out);
    free(t);
    free(scratch);
    free(parts);
    ft_threadpool_free(pool);
    return 0;
}
