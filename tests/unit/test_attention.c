/* engine/model/attention.c: one layer's attention over a paged F16 cache on a
 * two-thread pool, for every kernel level this machine runs
 * (ft_cpu_force_isa), with split-KV forced on, forced off and automatic:
 *   - every row and query head against ft_attention_f32acc_ref on levels
 *     with their own kernel (|out - ref| <= 1e-5 * max |v|), and bit for bit
 *     against ft_attention_ref on the scalar level, whose numerics are
 *     llama.cpp's and which must never split;
 *   - batches of one to eight rows from one or two sequences (segments cut
 *     where the sequence changes), GQA groups, head dims with tails, causal
 *     and sliding-window ranges, lengths around the 128-key chunk (1, 127,
 *     128, 129, 1000) and one long enough (5000) that the parts buffer
 *     makes chunks longer than 128 keys;
 *   - with attention sinks (gpt-oss): bit for bit against
 *     ft_attention_sink_ref on the scalar level, and on every level within
 *     1e-4 * max |v| of a double-precision softmax with the sink logit
 *     (Q rounded to fp16 as the kernels round it; 4e-3 on the scalar level,
 *     whose V accumulator is fp16 as llama.cpp's);
 *   - heads of other rows and columns outside the output are not written
 *     beyond the output buffer (exact-size buffers, ASan).
 * With FT_ISA=<level> only that level is tested (tests/arm runs the NEON
 * level alone on a CPU without dotprod). */
#include "engine/model/attention.h"
#include "engine/model/kv_cache.h"
#include "ft/common.h"
#include "ft/cpu.h"
#include "ft/ops.h"
#include "ft/threadpool.h"
#include "ft_test.h"
#include "simd/fp16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x2545f4914f6cdd1dull;

static float rng_gauss(void) { return ft_test_rng_gauss(&g_rng); }

struct shape {
    int32_t n_head, n_head_kv;
    int64_t dk, dv;
};

/* n_rows rows: the first n_first of sequence 0 (its last positions up to
 * len0 - 1), the rest of sequence 1 (up to len1 - 1). */
/* softmax(scale q.K, sink) V over keys p0..p1 in double, Q rounded to fp16. */
static void sink_double(const float *q, int64_t dk, int64_t dv, float scale, const struct ft_attn_kv *kv, int32_t p0,
                        int32_t p1, float sink, float *out) {
    double m = sink, den = 0.0, acc[512] = {0};
    for (int32_t j = p0; j <= p1; j++) {
        double sc = 0.0;
        for (int64_t d = 0; d < dk; d++)
            sc += (double)ft_fp16_to_fp32(ft_attn_k_at(kv, j)[d]) * (double)ft_fp16_to_fp32(ft_fp32_to_fp16(q[d]));
        m = fmax(m, sc * scale);
    }
    den = exp((double)sink - m);
    for (int32_t j = p0; j <= p1; j++) {
        double sc = 0.0;
        for (int64_t d = 0; d < dk; d++)
            sc += (double)ft_fp16_to_fp32(ft_attn_k_at(kv, j)[d]) * (double)ft_fp16_to_fp32(ft_fp32_to_fp16(q[d]));
        const double w = exp(sc * scale - m);
        den += w;
        for (int64_t d = 0; d < dv; d++)
            acc[d] += w * (double)ft_fp16_to_fp32(ft_attn_v_at(kv, j)[d]);
    }
    for (int64_t d = 0; d < dv; d++)
        out[d] = (float)(acc[d] / den);
}

static void run_case(struct ft_threadpool *pool, const struct shape *sh, int32_t len0, int32_t len1, int n_rows,
                     int n_first, int32_t window, bool with_sinks) {
    const enum ft_isa isa = ft_cpu_isa();
    const int32_t lens[2] = {len0, len1};
    const int32_t bt = FT_KV_BLOCK_TOKENS;
    const int32_t max_blocks = (FT_MAX(len0, len1) + bt - 1) / bt;
    const int32_t n_blocks = 2 * max_blocks;
    const int64_t k_row = sh->n_head_kv * sh->dk, v_row = sh->n_head_kv * sh->dv;
    uint16_t *k = malloc(sizeof(uint16_t) * (size_t)(n_blocks * bt * k_row));
    uint16_t *v = malloc(sizeof(uint16_t) * (size_t)(n_blocks * bt * v_row));
    float vmax = 0.0f;
    for (int64_t i = 0; i < n_blocks * bt * k_row; i++)
        k[i] = ft_fp32_to_fp16(rng_gauss() * 2.0f);
    for (int64_t i = 0; i < n_blocks * bt * v_row; i++) {
        v[i] = ft_fp32_to_fp16(rng_gauss());
        vmax = fmaxf(vmax, fabsf(ft_fp16_to_fp32(v[i])));
    }
    /* the two sequences' blocks interleaved and backwards */
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)(2 * max_blocks));
    struct ft_kv_seq seqs[2];
    for (int s = 0; s < 2; s++) {
        for (int32_t b = 0; b < max_blocks; b++)
            tables[s * max_blocks + b] = n_blocks - 1 - (2 * b + s);
        seqs[s] = (struct ft_kv_seq){.len = lens[s], .n_blocks = max_blocks, .blocks = tables + s * max_blocks};
    }

    int32_t pos[8], seq[8], att_n[8];
    for (int r = 0; r < n_rows; r++) {
        const int s = r < n_first ? 0 : 1;
        const int n_s = s == 0 ? n_first : n_rows - n_first;
        const int i_s = s == 0 ? r : r - n_first;
        seq[r] = s;
        pos[r] = lens[s] - n_s + i_s;
        att_n[r] = n_s;
    }
    const int64_t q_row = sh->n_head * sh->dk, o_row = sh->n_head * sh->dv;
    float *q = malloc(sizeof(float) * (size_t)(n_rows * q_row));
    float *out = malloc(sizeof(float) * (size_t)(n_rows * o_row));
    for (int64_t i = 0; i < n_rows * q_row; i++)
        q[i] = rng_gauss();
    float sinks[16];
    for (int h = 0; h < 16; h++)
        sinks[h] = rng_gauss() * 3.0f;
    const int nth = ft_threadpool_n_threads(pool);
    const struct ft_hparams hp = {.head_dim_k = (int32_t)sh->dk, .head_dim_v = (int32_t)sh->dv};
    const int rows_per_block = ft_attn_rows_per_block(&hp);
    const size_t stride = ft_attention_scratch_size(rows_per_block, sh->n_head, sh->n_head_kv, sh->dk, sh->dv);
    char *scratch = malloc(stride * (size_t)nth);
    void *parts = aligned_alloc(64, ft_attention_parts_size(sh->n_head, sh->n_head_kv, sh->dv, nth));
    float *ref = malloc(sizeof(float) * (size_t)sh->dv);
    float *tmp = malloc(sizeof(float) * (size_t)(sh->dk + sh->dv));

    static const enum ft_attn_split modes[] = {FT_ATTN_SPLIT_NEVER, FT_ATTN_SPLIT_ALWAYS, FT_ATTN_SPLIT_AUTO};
    for (size_t mi = 0; mi < FT_ARRAY_LEN(modes); mi++) {
        for (int64_t i = 0; i < n_rows * o_row; i++)
            out[i] = NAN;
        const struct ft_attn_job job = {
            .n_head = sh->n_head, .n_head_kv = sh->n_head_kv, .dk = sh->dk, .dv = sh->dv,
            .scale = 0.125f, .window = window, .rows_per_block = rows_per_block,
            .k = k, .v = v, .k_row = k_row, .v_row = v_row, .seqs = seqs,
            .n_rows = n_rows, .q = q, .out = out, .row_pos = pos, .row_seq = seq, .row_att_n = att_n,
            .scratch = scratch, .scratch_stride = stride, .parts = parts, .split = modes[mi],
            .sinks = with_sinks ? sinks : NULL,
        };
        ft_attention_run(pool, &job);
        const double tol = 1e-5 * vmax;
        int bad = 0;
        for (int r = 0; r < n_rows; r++) {
            for (int32_t h = 0; h < sh->n_head; h++) {
                const int32_t kvh = h / (sh->n_head / sh->n_head_kv);
                /* the engine's head-major blocks (engine/include/ft/model.h) */
                const struct ft_attn_kv kv = {k + kvh * bt * sh->dk, v + kvh * bt * sh->dv, seqs[seq[r]].blocks,
                                              bt, sh->dk, sh->dv, bt * k_row, bt * v_row};
                const int32_t p0 = window > 0 ? FT_MAX(0, pos[r] - window + 1) : 0;
                const float *o = out + r * o_row + h * sh->dv;
                if (with_sinks) {
                    if (isa == FT_ISA_SCALAR) {
                        ft_attention_sink_ref(q + r * q_row + h * sh->dk, sh->dk, sh->dv, 0.125f, &kv, p0, pos[r],
                                              sinks[h], ref, tmp);
                        if (memcmp(o, ref, sizeof(float) * (size_t)sh->dv) != 0 && bad++ < 3)
                            CHECKF(0, "scalar sinks: row %d head %d differs from ft_attention_sink_ref", r, h);
                    }
                    sink_double(q + r * q_row + h * sh->dk, sh->dk, sh->dv, 0.125f, &kv, p0, pos[r], sinks[h], ref);
                    for (int64_t d = 0; d < sh->dv; d++) {
                        const double err = fabs((double)o[d] - (double)ref[d]);
                        /* the scalar level's fp16 accumulator: 2^-11 relative per step */
                        if (!(err <= (isa == FT_ISA_SCALAR ? 4e-3 : 1e-4) * vmax) && bad++ < 3)
                            CHECKF(0, "%s sinks mode %d heads %d/%d lens %d rows %d window %d: row %d head %d [%lld] %.8g vs %.8g",
                                   ft_isa_name(isa), (int)modes[mi], sh->n_head, sh->n_head_kv, len0, n_rows, window, r, h,
                                   (long long)d, o[d], ref[d]);
                    }
                    continue;
                }
                if (isa == FT_ISA_SCALAR) {
                    if (att_n[r] >= FT_ATTN_TILE)
                        continue; /* (never: at most 8 rows) */
                    ft_attention_ref(q + r * q_row + h * sh->dk, sh->dk, sh->dv, 0.125f, &kv, p0, pos[r], ref, tmp);
                    if (memcmp(o, ref, sizeof(float) * (size_t)sh->dv) != 0 && bad++ < 3)
                        CHECKF(0, "scalar mode %d: row %d head %d differs from ft_attention_ref", (int)modes[mi], r, h);
                    continue;
                }
                ft_attention_f32acc_ref(q + r * q_row + h * sh->dk, sh->dk, sh->dv, 0.125f, &kv, p0, pos[r], ref, tmp);
                for (int64_t d = 0; d < sh->dv; d++) {
                    const double err = fabs((double)o[d] - (double)ref[d]);
                    if (!(err <= tol) && bad++ < 3)
                        CHECKF(err <= tol,
                               "%s mode %d heads %d/%d dk=%lld dv=%lld lens %d,%d rows %d (%d first) window %d: "
                               "row %d head %d [%lld] %.8g vs ref %.8g",
                               ft_isa_name(isa), (int)modes[mi], sh->n_head, sh->n_head_kv, (long long)sh->dk,
                               (long long)sh->dv, len0, len1, n_rows, n_first, window, r, h, (long long)d, o[d],
                               ref[d]);
                }
            }
        }
        CHECK(bad == 0);
    }
    free(k);
    free(v);
    free(tables);
    free(q);
    free(out);
    free(scratch);
    free(parts);
    free(ref);
    free(tmp);
}

int main(void) {
    if (ft_cpu_init() != FT_OK) {
        printf("FT_ISA refused: %s\n", ft_cpu_error());
        return ft_test_finish("test_attention");
    }
    struct ft_threadpool *pool = NULL;
    CHECK(ft_threadpool_new(2, &pool) == FT_OK);
    if (!pool)
        return ft_test_finish("test_attention");
    static const struct shape shapes[] = {
        {4, 1, 256, 256}, /* Gemma 3 270M */
        {8, 2, 64, 64},   /* Llama 3.2 1B's group of 4, fewer heads */
        {3, 3, 80, 48},   /* no GQA, tails */
    };
    static const int32_t lengths[] = {1, 127, 128, 129, 1000};
    const char *env = getenv("FT_ISA");
    const int only = env && *env && strcmp(env, "auto") != 0 ? (int)ft_cpu_isa() : -1;
    for (int isa = 0; isa < FT_ISA_COUNT; isa++) {
        if ((only >= 0 && isa != only) || !ft_isa_supported((enum ft_isa)isa) ||
            ft_cpu_force_isa(ft_isa_name((enum ft_isa)isa)) != FT_OK)
            continue;
        const int before = ft_test_failures;
        for (size_t s = 0; s < FT_ARRAY_LEN(shapes); s++)
            for (size_t l = 0; l < FT_ARRAY_LEN(lengths); l++) {
                const int32_t n = lengths[l];
                run_case(pool, &shapes[s], n, n, 1, 1, 0, false);         /* decode */
                run_case(pool, &shapes[s], n, n, 1, 1, 100, false);       /* decode, sliding window */
                run_case(pool, &shapes[s], n, n, 1, 1, 16, true);         /* decode, window, sinks (gpt-oss) */
                run_case(pool, &shapes[s], n, n, 1, 1, 0, true);          /* decode, sinks, split-KV past 128 keys */
                if (n >= 8) {
                    run_case(pool, &shapes[s], n, n, 8, 8, 0, false);     /* a short chunk of one sequence */
                    run_case(pool, &shapes[s], n, 300, 5, 2, 512, false); /* two sequences in one batch */
                    run_case(pool, &shapes[s], n, n, 8, 8, 0, true);      /* a chunk with sinks */
                }
            }
        run_case(pool, &shapes[0], 5000, 17, 2, 1, 0, false); /* chunks longer than 128 keys */
        run_case(pool, &shapes[0], 5000, 17, 2, 1, 0, true);  /* the same with sinks */
        printf("level %-12s %s\n", ft_isa_name((enum ft_isa)isa), ft_test_failures == before ? "ok" : "FAILED");
    }
    ft_threadpool_free(pool);
    return ft_test_finish("test_attention");
}
