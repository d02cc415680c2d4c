/* One layer's attention over a block-paged F16 KV cache, threaded over
 * (rows, KV head) work items and, when those are fewer than the threads
 * can use, over chunks of the keys (split-KV). engine/model/attention.c; the
 * forward pass reaches it through ft_blk_attention (blocks.h), the
 * unit test and bench/bench_attention.c through ft_attention_run with
 * explicit inputs. Not a public header. */
#ifndef FT_ATTENTION_H
#define FT_ATTENTION_H

#include "ft/model.h"
#include "ft/threadpool.h"

#include <stddef.h>
#include <stdint.h>

struct ft_kv_seq;

/* Rows of a block of the attention kernel. */
#define FT_ATTN_MAX_ROWS 8
int ft_attn_rows_per_block(const struct ft_hparams *hp);

/* Keys per split-KV chunk (a chunk is a multiple of it, aligned to it). */
#define FT_ATTN_CHUNK 128
/* Split when there are fewer than this many work items per thread; also
 * the number of parts per thread the parts buffer holds. */
#define FT_ATTN_SPLIT_FACTOR 4
/* Batches of at most this many rows may split (decode, short chunks). */
#define FT_ATTN_SPLIT_MAX_ROWS 8

/* Most query heads per KV head a job with attention sinks may have. */
#define FT_ATTN_SINK_GROUP_MAX 64

enum ft_attn_split {
    FT_ATTN_SPLIT_AUTO,   /* when the items are too few for the threads */
    FT_ATTN_SPLIT_NEVER,
    FT_ATTN_SPLIT_ALWAYS, /* whenever the level can and a range spans several chunks (tests) */
};

struct ft_attn_job {
    int32_t n_head, n_head_kv; /* query heads, KV heads (n_head a multiple) */
    int64_t dk, dv;            /* head dims of K and V */
    float scale;               /* of the scores */
    int32_t window;            /* > 0: only the last `window` positions (sliding window) */
    const float *sinks;        /* NULL, or (n_head) attention-sink logits (gpt-oss): never split */
    int rows_per_block;        /* <= FT_ATTN_MAX_ROWS: rows sharing one kernel call */
    /* The layer's cache: K and V pools (fp16) of blocks laid out head-major
     * (engine/include/ft/model.h), k_row / v_row elements per token (every KV
     * head), block tables per sequence. */
    const uint16_t *k, *v;
    int64_t k_row, v_row;
    const struct ft_kv_seq *seqs;
    /* The rows: query (n_rows, n_head * dk), output (n_rows, n_head * dv),
     * position and sequence of each, and the row count of its sequence in
     * the batch (the reference switches algorithm on it, as llama.cpp). */
    int32_t n_rows;
    const float *q;
    float *out;
    const int32_t *row_pos, *row_seq, *row_att_n;
    /* Per thread: scratch_stride bytes of kernel scratch. */
    char *scratch;
    size_t scratch_stride;
    /* ft_attention_parts_size bytes for split-KV parts (64-byte aligned). */
    void *parts;
    enum ft_attn_split split;
};

/* Bytes of split-KV parts buffer for a pool of nth threads. */
size_t ft_attention_parts_size(int32_t n_head, int32_t n_head_kv, int64_t dv, int nth);
/* Bytes of kernel scratch per thread, for every kernel level this CPU runs. */
size_t ft_attention_scratch_size(int rows_per_block, int32_t n_head, int32_t n_head_kv, int64_t dk, int64_t dv);
/* job->out = attention of every row, on pool (one run()). */
void ft_attention_run(struct ft_threadpool *pool, const struct ft_attn_job *job);

#endif
