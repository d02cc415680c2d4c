/* Attention of one layer over the KV cache (engine/model/attention.h), threaded.
 *
 * Work items are (block of up to rows_per_block consecutive rows, KV head),
 * handed out through an atomic counter latest rows first (they have the
 * most keys), so two threads stay busy on a causal prefill whose rows
 * differ 512-fold in cost. A block whose rows belong to several sequences
 * is cut where the sequence changes: one kernel call reads one sequence's
 * cache.
 *
 * Split-KV ("flash decoding"): a decode step of a model with few KV heads
 * (Gemma 3 270M has one) has fewer items than threads, and one thread would
 * read the whole context alone. When the kernel level can write split-KV
 * parts (ft_float_kernels.attention_splits) and there are fewer than
 * FT_ATTN_SPLIT_FACTOR items per thread, each segment's key range (a
 * segment: the rows of one sequence within one block) is cut into chunks of
 * a multiple of FT_ATTN_CHUNK keys, and every (segment, chunk, KV head) is
 * an item. Its kernel call leaves an unnormalized accumulator with its own
 * max and sum in the parts buffer; the thread that completes the last
 * chunk of a (segment, KV head) merges its parts (ft_attention_merge: a
 * rescale by exp(m_i - m), exact up to rounding), so no barrier is needed.
 * With attention sinks (gpt-oss) the merge keeps the parts unnormalized
 * and the sink, one more logit, finishes them (merge_sink).
 * The parts buffer holds FT_ATTN_SPLIT_FACTOR row-chunks per thread; longer
 * contexts get longer chunks, not more of them.
 *
 * The reference level never splits: it runs one (row, head) at a time
 * through ft_attention_ref, or ft_attention_tiled_ref where llama.cpp's CPU
 * flash attention switches to its tiled algorithm, so the logits equal
 * llama.cpp's (simd/ops_ref.c). */
#include "attention.h"

#include "ft/common.h"
#include "ft/ops.h"
#include "kv_cache.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>

/* How the split-KV items map to segments, chunks and parts. Segment s is
 * rows [r0[s], r0[s + 1]) with keys from base[s]; its chunks are chunk_keys[s]
 * keys long, items chunk0[s] * n_head_kv on; its parts start at row-chunk
 * unit0[s] (unit of chunk c, row i: unit0[s] + c * rows + i). */
struct split_plan {
    int n_segs;
    int32_t r0[FT_ATTN_SPLIT_MAX_ROWS + 1];
    int32_t base[FT_ATTN_SPLIT_MAX_ROWS];
    int32_t chunk_keys[FT_ATTN_SPLIT_MAX_ROWS];
    int32_t chunk0[FT_ATTN_SPLIT_MAX_ROWS + 1];
    int32_t unit0[FT_ATTN_SPLIT_MAX_ROWS];
};

/* The parts buffer: per row-chunk unit n_head accumulators of dv floats,
 * then n_head maxima, n_head sums; then one completion counter per
 * (segment, KV head). */
struct parts_view {
    float *acc, *max, *sum;
    atomic_int *done;
};

struct attn_task {
    const struct ft_attn_job *job;
    const struct ft_float_kernels *fk;
    int64_t n_items;
    atomic_int_fast64_t next;
    bool split;
    struct split_plan plan;
    struct parts_view parts;
};

static int parts_units(int nth) { return FT_ATTN_SPLIT_FACTOR * FT_MAX(nth, 2); }

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static struct parts_view parts_layout(void *buf, int32_t n_head, int64_t dv, int nth) {
    const size_t units = (size_t)parts_units(nth);
    struct parts_view p;
    p.acc = buf;
    p.max = (float *)((char *)buf + align64(units * (size_t)n_head * (size_t)dv * sizeof(float)));
    p.sum = p.max + units * (size_t)n_head;
    p.done = (atomic_int *)((char *)p.sum + align64(units * (size_t)n_head * sizeof(float)));
    return p;
}

size_t ft_attention_parts_size(int32_t n_head, int32_t n_head_kv, int64_t dv, int nth) {
    const size_t units = (size_t)parts_units(nth);
    return align64(units * (size_t)n_head * (size_t)dv * sizeof(float)) +
           2 * align64(units * (size_t)n_head * sizeof(float)) +
           align64((size_t)FT_ATTN_SPLIT_MAX_ROWS * (size_t)n_head_kv * sizeof(atomic_int));
}

size_t ft_attention_scratch_size(int rows_per_block, int32_t n_head, int32_t n_head_kv, int64_t dk, int64_t dv) {
    /* the reference path: dk + dv floats for ft_attention_ref or
     * FT_ATTN_TILE floats for ft_attention_tiled_ref */
    size_t bytes = FT_MAX((size_t)dk + (size_t)dv, (size_t)FT_ATTN_TILE) * sizeof(float);
    /* every level, since the level may be forced later */
    for (int isa = 0; isa < FT_ISA_COUNT; isa++) {
        const struct ft_float_kernels *fk = ft_float_kernels_isa((enum ft_isa)isa);
        if (fk)
            bytes = FT_MAX(bytes, fk->attention_scratch(rows_per_block, n_head / n_head_kv, dk, dv));
    }
    return align64(bytes);
}

/* llama.cpp masks key j of a sliding-window layer when pos - j >= window. */
static int32_t first_key(const struct ft_attn_job *j, int32_t pos) {
    return j->window > 0 ? FT_MAX(0, pos - j->window + 1) : 0;
}

static struct ft_attn_kv kv_of(const struct ft_attn_job *j, int32_t seq, int32_t kvh) {
    /* blocks are head-major (engine/include/ft/model.h) */
    const struct ft_attn_kv a = {
        .k = j->k + ft_kv_head_offset(kvh, j->dk),
        .v = j->v + ft_kv_head_offset(kvh, j->dv),
        .blocks = j->seqs[seq].blocks,
        .block_tokens = FT_KV_BLOCK_TOKENS,
        .k_row = j->dk,
        .v_row = j->dv,
        .k_block = FT_KV_BLOCK_TOKENS * j->k_row,
        .v_block = FT_KV_BLOCK_TOKENS * j->v_row,
    };
    return a;
}

/* One kernel call: rows [r0, r1) of one sequence, KV head kvh, keys
 * clipped to [c0, c1]; into out (normalized) or, with parts, a split part. */
static void attend(const struct attn_task *t, int32_t r0, int32_t r1, int32_t kvh, int32_t c0, int32_t c1,
                   float *out, int64_t out_row, float *pmax, float *psum, int64_t part_row, void *scratch) {
    const struct ft_attn_job *j = t->job;
    const int32_t group = j->n_head / j->n_head_kv; /* query heads per KV head */
    int32_t p0[FT_ATTN_MAX_ROWS], p1[FT_ATTN_MAX_ROWS];
    for (int32_t r = r0; r < r1; r++) {
        p0[r - r0] = FT_MAX(first_key(j, j->row_pos[r]), c0);
        p1[r - r0] = FT_MIN(j->row_pos[r], c1);
    }
    const int64_t q_row = (int64_t)j->n_head * j->dk;
    const struct ft_attn_kv a = kv_of(j, j->row_seq[r0], kvh);
    const struct ft_attn_rows rows = {
        .q = j->q + r0 * q_row + (int64_t)kvh * group * j->dk,
        .q_row = q_row,
        .out = out,
        .out_row = out_row,
        .n_rows = r1 - r0,
        .n_heads = group,
        .p0 = p0,
        .p1 = p1,
        .part_max = pmax,
        .part_sum = psum,
        .part_row = part_row,
    };
    t->fk->attention(&rows, j->dk, j->dv, j->scale, &a, scratch);
}

/* attend() for rows [r0, r1) with attention sinks (at most
 * FT_ATTN_SINK_GROUP_MAX heads per KV head: their parts live on the stack): the kernel leaves each
 * query's unnormalized accumulator over all its keys, with its max and sum
 * (a split-KV part of one chunk), and the sink finishes it. */
static void attend_sinks(const struct attn_task *t, int32_t r0, int32_t r1, int32_t kvh, float *out, int64_t out_row,
                         void *scratch) {
    const struct ft_attn_job *j = t->job;
    const int32_t group = j->n_head / j->n_head_kv;
    float pmax[FT_ATTN_MAX_ROWS * FT_ATTN_SINK_GROUP_MAX], psum[FT_ATTN_MAX_ROWS * FT_ATTN_SINK_GROUP_MAX];
    attend(t, r0, r1, kvh, 0, INT32_MAX, out, out_row, pmax, psum, group, scratch);
    for (int32_t i = 0; i < r1 - r0; i++)
        for (int32_t h = 0; h < group; h++) {
            float *o = out + i * out_row + h * j->dv;
            ft_attention_sink_finish(j->sinks[kvh * group + h], pmax[i * group + h], psum[i * group + h], o, j->dv, o);
        }
}

static void run_block(const struct attn_task *t, int64_t it, void *scratch) {
    const struct ft_attn_job *j = t->job;
    const int32_t group = j->n_head / j->n_head_kv;
    const int64_t n_blocks = (j->n_rows + j->rows_per_block - 1) / j->rows_per_block;
    const int64_t b = n_blocks - 1 - it / j->n_head_kv;
    const int32_t kvh = (int32_t)(it % j->n_head_kv);
    const int32_t r_end = (int32_t)FT_MIN(j->n_rows, (b + 1) * j->rows_per_block);
    const int64_t o_row = (int64_t)j->n_head * j->dv;
    for (int32_t r0 = (int32_t)(b * j->rows_per_block); r0 < r_end;) {
        int32_t r1 = r0 + 1;
        while (r1 < r_end && j->row_seq[r1] == j->row_seq[r0])
            r1++;
        if (j->sinks)
            attend_sinks(t, r0, r1, kvh, j->out + r0 * o_row + (int64_t)kvh * group * j->dv, o_row, scratch);
        else
            attend(t, r0, r1, kvh, 0, INT32_MAX, j->out + r0 * o_row + (int64_t)kvh * group * j->dv, o_row, NULL,
                   NULL, 0, scratch);
        r0 = r1;
    }
}

/* ft_attention_merge with an attention sink: the parts merged into one
 * unnormalized accumulator with its max and sum (the sink is one more
 * part: max sink, sum 1, no value), which ft_attention_sink_finish
 * normalizes as it does the single part of an unsplit query. */
static void merge_sink(const float *acc, int64_t acc_stride, const float *m, const float *l, int64_t ml_stride,
                       int n_parts, int64_t dv, float sink, float *out) {
    float mx = -INFINITY;
    for (int i = 0; i < n_parts; i++)
        mx = fmaxf(mx, m[i * ml_stride]);
    for (int64_t d = 0; d < dv; d++)
        out[d] = 0.0f;
    float sum = 0.0f;
    for (int i = 0; mx != -INFINITY && i < n_parts; i++) {
        if (m[i * ml_stride] == -INFINITY) /* an empty part: l = 0, acc = 0 */
            continue;
        const float w = expf(m[i * ml_stride] - mx);
        sum += w * l[i * ml_stride];
        const float *a = acc + i * acc_stride;
        for (int64_t d = 0; d < dv; d++)
            out[d] += w * a[d];
    }
    ft_attention_sink_finish(sink, mx, sum, out, dv, out);
}

static void run_chunk(struct attn_task *t, int64_t it, void *scratch) {
    const struct ft_attn_job *j = t->job;
    const struct split_plan *p = &t->plan;
    const int32_t group = j->n_head / j->n_head_kv;
    const int32_t kvh = (int32_t)(it % j->n_head_kv);
    const int32_t chunk = (int32_t)(it / j->n_head_kv);
    int s = 0;
    while (chunk >= p->chunk0[s + 1])
        s++;
    const int32_t c = chunk - p->chunk0[s];
    const int32_t n_chunks = p->chunk0[s + 1] - p->chunk0[s];
    const int32_t rows = p->r0[s + 1] - p->r0[s];
    const int32_t c0 = p->base[s] + c * p->chunk_keys[s];
    const int64_t unit = p->unit0[s] + (int64_t)c * rows;
    const int64_t head0 = (int64_t)kvh * group;
    attend(t, p->r0[s], p->r0[s + 1], kvh, c0, c0 + p->chunk_keys[s] - 1,
           t->parts.acc + (unit * j->n_head + head0) * j->dv, (int64_t)j->n_head * j->dv,
           t->parts.max + unit * j->n_head + head0, t->parts.sum + unit * j->n_head + head0, j->n_head, scratch);

    /* The last chunk of (segment, KV head) to finish merges: acq_rel makes
     * the other chunks' parts visible to it. */
    atomic_int *done = &t->parts.done[s * j->n_head_kv + kvh];
    if (atomic_fetch_add_explicit(done, 1, memory_order_acq_rel) != n_chunks - 1)
        return;
    const int64_t o_row = (int64_t)j->n_head * j->dv;
    for (int32_t i = 0; i < rows; i++) {
        for (int32_t h = 0; h < group; h++) {
            const int64_t u = (int64_t)p->unit0[s] + i;
            const float *acc = t->parts.acc + (u * j->n_head + head0 + h) * j->dv;
            const float *mx = t->parts.max + u * j->n_head + head0 + h, *sm = t->parts.sum + u * j->n_head + head0 + h;
            float *o = j->out + (p->r0[s] + i) * o_row + (head0 + h) * j->dv;
            if (j->sinks)
                merge_sink(acc, (int64_t)rows * j->n_head * j->dv, mx, sm, (int64_t)rows * j->n_head, n_chunks, j->dv,
                           j->sinks[head0 + h], o);
            else
                ft_attention_merge(acc, (int64_t)rows * j->n_head * j->dv, mx, sm, (int64_t)rows * j->n_head, n_chunks,
                                   j->dv, o);
        }
    }
}

static void attn_run(void *ctx, int ith, int nth) {
    struct attn_task *t = ctx;
    void *scratch = t->job->scratch + (size_t)ith * t->job->scratch_stride;
    (void)nth;
    for (;;) {
        const int64_t it = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        if (it >= t->n_items)
            break;
        if (t->split)
            run_chunk(t, it, scratch);
        else
            run_block(t, it, scratch);
    }
}

static void attn_run_ref(void *ctx, int ith, int nth) {
    const struct attn_task *t = ctx;
    const struct ft_attn_job *j = t->job;
    const int64_t n_items = (int64_t)j->n_rows * j->n_head;
    const int64_t i0 = n_items * ith / nth;
    const int64_t i1 = n_items * (ith + 1) / nth;
    const int32_t group = j->n_head / j->n_head_kv;
    float *tmp = (float *)(j->scratch + (size_t)ith * j->scratch_stride);

    for (int64_t it = i0; it < i1; it++) {
        const int32_t r = (int32_t)(it / j->n_head);
        const int32_t h = (int32_t)(it % j->n_head);
        const int32_t pos = j->row_pos[r];
        const struct ft_attn_kv a = kv_of(j, j->row_seq[r], h / group);
        const float *q = j->q + ((int64_t)r * j->n_head + h) * j->dk;
        float *out = j->out + ((int64_t)r * j->n_head + h) * j->dv;
        /* ggml's CPU flash attention switches algorithm (and numerics) on
         * the number of query rows -- all of them, also in the last layer
         * where we only keep the rows that want logits */
        const bool tiled = j->row_att_n[r] >= FT_ATTN_TILE && j->dv % 16 == 0;
        if (j->sinks && tiled)
            ft_attention_tiled_sink_ref(q, j->dk, j->dv, j->scale, &a, first_key(j, pos), pos, j->sinks[h], out, tmp);
        else if (j->sinks)
            ft_attention_sink_ref(q, j->dk, j->dv, j->scale, &a, first_key(j, pos), pos, j->sinks[h], out, tmp);
        else if (tiled)
            ft_attention_tiled_ref(q, j->dk, j->dv, j->scale, &a, first_key(j, pos), pos, out, tmp);
        else
            ft_attention_ref(q, j->dk, j->dv, j->scale, &a, first_key(j, pos), pos, out, tmp);
    }
}

/* Segments and chunks for split-KV; false when nothing would be split. */
static bool plan_split(const struct ft_attn_job *j, int nth, struct split_plan *p) {
    int n = 0;
    p->r0[0] = 0;
    for (int32_t r = 1; r <= j->n_rows; r++)
        if (r == j->n_rows || r % j->rows_per_block == 0 || j->row_seq[r] != j->row_seq[r - 1])
            p->r0[++n] = r;
    p->n_segs = n;
    /* at most this many chunks per segment: the parts buffer's row-chunk
     * units shared by the rows, and about FT_ATTN_SPLIT_FACTOR items per
     * thread over all segments and KV heads */
    const int units = parts_units(nth);
    const int by_items = FT_ATTN_SPLIT_FACTOR * nth / (n * j->n_head_kv);
    const int limit = FT_MAX(1, FT_MIN(units / j->n_rows, by_items));
    bool split = false;
    p->chunk0[0] = 0;
    int32_t unit = 0;
    for (int s = 0; s < n; s++) {
        int32_t lo = INT32_MAX, hi = -1;
        for (int32_t r = p->r0[s]; r < p->r0[s + 1]; r++) {
            lo = FT_MIN(lo, first_key(j, j->row_pos[r]));
            hi = FT_MAX(hi, j->row_pos[r]);
        }
        p->base[s] = hi < 0 ? 0 : lo / FT_ATTN_CHUNK * FT_ATTN_CHUNK;
        const int32_t want = hi < 0 ? 1 : (hi + 1 - p->base[s] + FT_ATTN_CHUNK - 1) / FT_ATTN_CHUNK;
        const int32_t per = (want + limit - 1) / limit; /* FT_ATTN_CHUNKs per chunk */
        const int32_t n_chunks = (want + per - 1) / per;
        p->chunk_keys[s] = per * FT_ATTN_CHUNK;
        p->chunk0[s + 1] = p->chunk0[s] + n_chunks;
        p->unit0[s] = unit;
        unit += n_chunks * (p->r0[s + 1] - p->r0[s]);
        split |= n_chunks > 1;
    }
    return split;
}

void ft_attention_run(struct ft_threadpool *pool, const struct ft_attn_job *job) {
    const struct ft_float_kernels *fk = ft_float_kernels();
    if (fk->attention == ft_attention_rows_ref) {
        struct attn_task t = {.job = job, .fk = fk};
        ft_threadpool_run(pool, attn_run_ref, &t);
        return;
    }
    const int nth = ft_threadpool_n_threads(pool);
    struct attn_task t = {.job = job, .fk = fk};
    t.n_items = (job->n_rows + job->rows_per_block - 1) / job->rows_per_block * job->n_head_kv;
    const bool want_split =
        job->split == FT_ATTN_SPLIT_ALWAYS ||
        (job->split == FT_ATTN_SPLIT_AUTO && nth > 1 && t.n_items < (int64_t)FT_ATTN_SPLIT_FACTOR * nth);
    if (want_split && fk->attention_splits && job->parts && job->n_rows > 0 && job->n_rows <= FT_ATTN_SPLIT_MAX_ROWS &&
        plan_split(job, nth, &t.plan)) {
        t.split = true;
        t.n_items = (int64_t)t.plan.chunk0[t.plan.n_segs] * job->n_head_kv;
        t.parts = parts_layout(job->parts, job->n_head, job->dv, nth);
        for (int i = 0; i < t.plan.n_segs * job->n_head_kv; i++)
            atomic_init(&t.parts.done[i], 0);
    }
    atomic_init(&t.next, 0);
    ft_threadpool_run(pool, attn_run, &t);
}

int ft_attn_rows_per_block(const struct ft_hparams *hp) {
    /* Up to 32 query vectors of <= 128 dims share each widened K/V tile and
     * stay in L1 with it; wider heads take fewer rows. */
    return hp->head_dim_k <= 128 && hp->head_dim_v <= 128 ? FT_ATTN_MAX_ROWS : FT_ATTN_MAX_ROWS / 2;
}
