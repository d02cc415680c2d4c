/* Internals shared by engine/model/model.c, engine/model/blocks.c, engine/model/kv_cache.c and
 * the architecture files engine/arch_*.c. Not a public header.
 *
 * Shapes in comments are (rows, row length) = (outputs, inputs) of y = W x,
 * the order a reader of the maths expects; GGUF lists the same dims
 * reversed (ne[0] is the row length). A batch's activations are row-major:
 * one row of the given width per token.
 */
#ifndef FT_MODEL_INTERNAL_H
#define FT_MODEL_INTERNAL_H

#include "ft/common.h"
#include "ft/model.h"
#include "ft/ops.h"
#include "ft/threadpool.h"
#include "ft/types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ft_qgemm;

/* Tokens evaluated per internal pass: a larger batch is split so scratch
 * stays bounded (each pass writes its KV before the next one reads it). */
#define FT_UBATCH 512

/* Per-node copies of all weights (--numa replicate, engine/model/numa_weights.c):
 * node k's copy starts at base[k] (NULL for a node that runs no worker). */
struct ft_weight_replicas {
    int n_nodes;
    char *const *base;
};

/* A tensor bound from the GGUF mapping (weights stay in their file type). */
struct ft_weight {
    const void *data; /* NULL: absent optional tensor */
    enum ft_type type;
    int64_t rows;     /* ne[1] (1 for vectors) */
    int64_t cols;     /* ne[0], the row length */
    size_t row_size;  /* bytes per row */
    const struct ft_weight_replicas *rep; /* NULL unless replicated */
    size_t rep_off;   /* offset of this tensor inside every copy */
    /* Non-NULL: repacked at load (engine/model/repack.c), data holds rw's tiles
     * of rw->tile_rows rows in row order, read only by rw->kernel_rw. */
    const struct ft_qgemm *rw;
};

/* Largest row of a token embedding that may be repacked (its lookup
 * rebuilds a row on the stack). */
#define FT_RW_EMBED_ROW_MAX 16384

/* The copy of w's bytes to read on NUMA node `node`: in a task, pass
 * ft_threadpool_current_node() so each worker reads its local copy. Any
 * node gives the same bytes; -1 (unknown) gives w->data. */
static inline const void *ft_weight_data(const struct ft_weight *w, int node) {
    if (w->rep && (unsigned)node < (unsigned)w->rep->n_nodes && w->rep->base[node])
        return w->rep->base[node] + w->rep_off;
    return w->data;
}

/* Every tensor a layer of a supported architecture may have; each arch file
 * binds the ones it uses. hd_k / hd_v are key_length / value_length. */
struct ft_layer {
    struct ft_weight attn_norm;      /* (n_embd) */
    struct ft_weight wq;             /* (n_head * hd_k, n_embd) */
    struct ft_weight wk;             /* (n_head_kv * hd_k, n_embd) */
    struct ft_weight wv;             /* (n_head_kv * hd_v, n_embd) */
    struct ft_weight bq, bk, bv;     /* (n_head * hd_k), (n_head_kv * hd_k), (n_head_kv * hd_v); optional */
    struct ft_weight q_norm;         /* (hd_k) per-head RMS norm weight (qwen3, gemma3) */
    struct ft_weight k_norm;         /* (hd_k) */
    struct ft_weight wo;             /* (n_embd, n_head * hd_v) */
    struct ft_weight bo;             /* (n_embd); optional */
    struct ft_weight attn_post_norm; /* (n_embd) gemma3 */
    struct ft_weight ffn_norm;       /* (n_embd) */
    struct ft_weight ffn_gate;       /* (n_ff, n_embd) */
    struct ft_weight ffn_up;         /* (n_ff, n_embd) */
    struct ft_weight ffn_down;       /* (n_embd, n_ff) */
    struct ft_weight ffn_post_norm;  /* (n_embd) gemma3 */
};

struct ft_fwd;

/* One architecture: its hparams beyond the common ones, its tensors and its
 * forward pass over one internal batch. */
struct ft_arch_ops {
    const char *name; /* general.architecture */
    enum ft_arch arch;
    bool rope_neox;
    int (*load_hparams)(struct ft_model *m); /* may be NULL */
    int (*bind)(struct ft_model *m);
    void (*forward)(struct ft_fwd *f);
};

extern const struct ft_arch_ops ft_arch_llama;
extern const struct ft_arch_ops ft_arch_qwen2;
extern const struct ft_arch_ops ft_arch_qwen3;
extern const struct ft_arch_ops ft_arch_gemma3;

/* The llama forward pass, shared by qwen2 (same graph, with biases). */
void ft_llama_forward(struct ft_fwd *f);

/* Scratch reused across forward calls; grown to the largest internal batch
 * seen (at most FT_UBATCH tokens). */
struct ft_scratch {
    int32_t cap;      /* tokens the buffers hold */
    float *x;         /* (cap, n_embd) residual stream */
    float *xb;        /* (cap, n_embd) normed input of a block */
    float *tmp;       /* (cap, n_embd) a block's output */
    float *q;         /* (cap, n_head * hd_k) */
    float *k;         /* (cap, n_head_kv * hd_k) */
    float *v;         /* (cap, n_head_kv * hd_v) */
    float *att;       /* (cap, n_head * hd_v) */
    float *gate;      /* (cap, n_ff) */
    float *up;        /* (cap, n_ff) */
    void *act;        /* activations converted to a vec_dot_type, or packed for the float GEMM:
                         cap + 16 rows of the widest input, 4 bytes per element */
    size_t act_size;
    void *qg_act;     /* GEMM activation tiles of the widest input (engine/model/matmul.c) */
    void *qg_panel;   /* per thread: qg_panel_stride bytes of unpacked weight tiles */
    size_t qg_panel_stride;
    int32_t *row_pos; /* (cap) position of each row */
    int32_t *row_seq; /* (cap) sequence of each row */
    int32_t *row_out; /* (cap) batch-local index of each row wanting logits or its hidden state */
    uint8_t *row_want; /* (cap) per kept row (index into row_out): FT_WANT_* bits */
    /* Which kernels llama.cpp would run for a row (blocks.c): the number of
     * rows of the row's sequence in this batch and the row's index among
     * them -- as the matmuls see them (after ft_blk_keep_out_rows: among the
     * kept rows), and as attention and the last attention output projection
     * see them (the whole batch). Per sequence, so that a sequence gets the
     * numerics it gets alone whatever shares its batch. */
    int32_t *row_seq_n, *row_seq_i;
    int32_t *row_att_n, *row_att_i;
    uint8_t *row_gemv; /* (cap) per matmul: the row goes through vec_dot_gemv */
    char *attn_scratch; /* per thread: attn_scratch_stride bytes for the attention kernel */
    size_t attn_scratch_stride;
    void *attn_parts;   /* split-KV parts of attention (engine/model/attention.h) */
};

struct ft_model {
    struct ft_hparams hp;
    const struct ft_arch_ops *arch;
    struct ft_gguf *gguf;      /* owns the mapping the ft_weights point into (--numa off) */
    struct ft_tokenizer *tok;
    struct ft_threadpool *pool;
    struct ft_numa_weights *numa_weights; /* weight copies placed by --numa; NULL for off */

    struct ft_weight tok_embd;    /* (n_vocab, n_embd) */
    struct ft_weight output_norm; /* (n_embd) */
    struct ft_weight output;      /* (n_vocab, n_embd); tok_embd when tied */
    struct ft_weight output_b;    /* (n_vocab) optional (qwen2) */
    struct ft_weight rope_freqs;  /* (n_rot / 2) optional rope frequency divisors (Llama 3.1) */
    struct ft_layer *layers;      /* n_layer */

    struct ft_scratch s;
};

/* KV cache (engine/model/kv_cache.c). Pools are per layer: n_blocks blocks of
 * FT_KV_BLOCK_TOKENS rows, a row holding one token's K (n_head_kv * hd_k
 * fp16) or V. A sequence's block table maps position p to block
 * blocks[p / FT_KV_BLOCK_TOKENS], row p % FT_KV_BLOCK_TOKENS. */
struct ft_kv_seq {
    int32_t len;      /* positions 0..len-1 are held */
    int32_t n_blocks; /* entries of blocks[] in use */
    int32_t *blocks;  /* max_blocks_per_seq entries */
};

struct ft_kv_cache {
    const struct ft_model *m;
    int32_t n_ctx;
    int32_t max_seqs;
    int32_t n_blocks;
    int32_t max_blocks_per_seq;
    int32_t n_layer;
    int64_t k_row; /* elements per token: every KV head's row */
    int64_t v_row;
    int64_t head_dim_k, head_dim_v;
    uint16_t **k;  /* n_layer pools */
    uint16_t **v;
    struct ft_kv_seq *seqs;
    int32_t *free_list; /* stack of free block ids */
    int32_t n_free;
    int32_t *pending;   /* max_seqs: lengths after the batch being validated, else -1 */
    int32_t *touched;   /* max_seqs: the sequences a batch touches */
    /* Sharing (include/ft/model.h): per block, how many sequence tables
     * list it and whether the prefix cache holds it. A cached block no
     * sequence lists is idle: it sits in the LRU list (oldest at lru_head)
     * and is evicted through `evict` when the free list runs dry. */
    int32_t *seq_refs;
    uint8_t *cached;
    int32_t *lru_prev, *lru_next; /* -1 terminated */
    int32_t lru_head, lru_tail;
    int32_t n_idle;
    int32_t max_idle; /* ft_kv_cache_set_idle_limit; INT32_MAX: none */
    ft_kv_evict_fn evict;
    void *evict_ud;
};

/* Check a batch against the cache and reserve the blocks it needs; on
 * error nothing is changed. */
int ft_kv_cache_prepare(struct ft_kv_cache *kv, const struct ft_batch *b);
/* Record that (seq, pos) now holds valid KV. */
void ft_kv_cache_commit(struct ft_kv_cache *kv, int32_t seq, int32_t pos);
/* Blocks are head-major (include/ft/model.h): within a block, KV head h's
 * rows start this many elements after head 0's. */
static inline int64_t ft_kv_head_offset(int64_t h, int64_t head_dim) { return h * FT_KV_BLOCK_TOKENS * head_dim; }
/* Elements into a layer's pool (row = k_row or v_row, head_dim its head's)
 * of KV head 0 of a reserved position (head h: ft_kv_head_offset further). */
static inline int64_t ft_kv_offset(const struct ft_kv_cache *kv, int32_t seq, int32_t pos, int64_t row,
                                   int64_t head_dim) {
    return (int64_t)kv->seqs[seq].blocks[pos / FT_KV_BLOCK_TOKENS] * FT_KV_BLOCK_TOKENS * row +
           pos % FT_KV_BLOCK_TOKENS * head_dim;
}

/* What a kept row is for (struct ft_scratch.row_want). */
#define FT_WANT_LOGITS 1u
#define FT_WANT_EMBD 2u

/* The state of one internal batch while the arch's forward runs. Rows of
 * the scratch buffers are tokens; after ft_blk_keep_out_rows() only the rows
 * that want logits remain (n_rows == n_out). */
struct ft_fwd {
    struct ft_model *m;
    struct ft_kv_cache *kv;
    int32_t n;             /* tokens */
    const int32_t *token;  /* (n) */
    int32_t n_rows;        /* rows currently in the buffers */
    int32_t n_out;         /* rows that want logits or their hidden state */
    float *logits;         /* (rows wanting logits, n_vocab) */
    float *embd;           /* (rows wanting their hidden state, n_embd) */
    struct ft_scratch *s;
};

/* ---- shared blocks (engine/model/blocks.c) ---- */

bool ft_layer_is_swa(const struct ft_hparams *hp, int il);
/* RoPE parameters of layer il (per-layer base for sliding-window layers). */
void ft_layer_rope(const struct ft_model *m, int il, struct ft_rope *out);

/* x = embedding rows of the tokens, times scale. */
void ft_blk_embed(struct ft_fwd *f, float scale);
/* y = rmsnorm(x) * w over n_rows rows of w->cols. */
void ft_blk_rmsnorm(struct ft_fwd *f, float *y, const float *x, const struct ft_weight *w);
/* RMS norm of every head of every row in place (rows of n_head heads of w->cols). */
void ft_blk_head_norm(struct ft_fwd *f, float *x, int32_t n_head, const struct ft_weight *w);
/* ---- matmul dispatch (engine/model/matmul.c) ---- */

/* One product of a call to ft_matmul(): out (n_rows, w->rows) = in W^T + bias. */
struct ft_mm {
    const struct ft_weight *w;
    const struct ft_weight *bias; /* NULL or absent: none */
    float *out;
};
/* n products of the same input (n_rows, k); every w has k columns. */
void ft_matmul(struct ft_fwd *f, const float *in, int n, const struct ft_mm *mm);
/* Bytes of GEMM scratch for batches of up to n_tok tokens: the activation
 * tiles, and the weight panel of one thread. */
void ft_matmul_scratch_need(const struct ft_model *m, int32_t n_tok, size_t *act, size_t *panel);

/* out (n_rows, w->rows) = in (n_rows, w->cols) W^T (+ bias). */
void ft_blk_matmul(struct ft_fwd *f, float *out, const struct ft_weight *w, const struct ft_weight *bias,
                   const float *in);
/* The attention output projection: ft_blk_matmul, numerically as llama.cpp
 * does it also after ft_blk_keep_out_rows (see blocks.c). */
void ft_blk_attn_out(struct ft_fwd *f, float *out, const struct ft_weight *wo, const struct ft_weight *bo,
                     const float *in);
/* Float weights (F32/F16/BF16) in a batch of several rows go through the
 * level's GEMM (engine/model/gemm_float.c): whether w does, and the call, with
 * n weights sharing the input (outs[i] (n_rows, ws[i]->rows) = in
 * ws[i]^T + bs[i]; bs may be NULL, and so may bs[i]->data). */
bool ft_gemm_float_applies(const struct ft_fwd *f, const struct ft_weight *w);
void ft_gemm_float(struct ft_fwd *f, const float *in, int n, float *const *outs, const struct ft_weight *const *ws,
                   const struct ft_weight *const *bs);
/* oneDNN for F32 weights on the avx512 level (engine/model/onednn_matmul.c;
 * false / FT_EUNSUPPORTED in builds without FT_ONEDNN): c (m, n), rows ldc
 * apart, = a (m, k) W^T for n weight rows of k floats. Called from pool
 * threads, each on its own slice. */
bool ft_onednn_matmul_applies(const struct ft_weight *w);
int ft_onednn_matmul(const float *a, int64_t m, int64_t k, const float *w, int64_t n, float *c, int64_t ldc);
enum ft_glu { FT_GLU_SILU, FT_GLU_GELU_TANH };
/* gate = act(gate(in)) * up(in), up = up(in), both through the GEMM (both
 * weights must satisfy ft_gemm_float_applies and share a type). */
void ft_gemm_float_glu(struct ft_fwd *f, const float *in, const struct ft_weight *gate, const struct ft_weight *up,
                       enum ft_glu act, float *gate_out, float *up_out);
/* q, k, v = xb projections with optional biases. */
void ft_blk_qkv(struct ft_fwd *f, const struct ft_layer *l);
/* Rotate every head of x (n_rows rows of n_head heads of hd) at the rows' positions. */
void ft_blk_rope(struct ft_fwd *f, float *x, int32_t n_head, int32_t hd, const struct ft_rope *r);
/* q *= scale. */
void ft_blk_scale(struct ft_fwd *f, float *x, int64_t width, float scale);
/* Store every row's K and V (fp16) in the cache of layer il. */
void ft_blk_kv_store(struct ft_fwd *f, int il);
/* Fill the row_seq_* / row_att_* arrays for a new batch. */
void ft_blk_rows_init(struct ft_fwd *f);
/* Keep only the rows that want logits in x and q (and their positions). */
void ft_blk_keep_out_rows(struct ft_fwd *f);
/* Rows of a block of the attention kernel (engine/model/attention.c). */
#define FT_ATTN_MAX_ROWS 8
int ft_attn_rows_per_block(const struct ft_hparams *hp);
/* att = attention of q over the cache of layer il; window > 0 limits it
 * to the last `window` positions (sliding-window layers). engine/model/attention.c */
void ft_blk_attention(struct ft_fwd *f, int il, float kq_scale, int32_t window);
/* x += y over n_rows rows of width. */
void ft_blk_add(struct ft_fwd *f, float *x, const float *y, int64_t width);

/* out = down(act(gate(in)) * up(in)). */
void ft_blk_ffn(struct ft_fwd *f, const struct ft_layer *l, enum ft_glu act, float *out, const float *in);
/* h = rmsnorm(x) * output_norm, copied to f->embd for the rows that want
 * it; logits = output(h), optional soft-capping, for the rows that want
 * them (the others leave the buffers first). */
void ft_blk_output(struct ft_fwd *f);

/* ---- weight placement under a NUMA mode (engine/model/numa_weights.c) ---- */

/* Copy every bound weight into memory placed as the pool's plan says
 * (distribute: interleaved over the nodes; isolate: bound to the node;
 * replicate: one copy bound to each node with workers) and repoint the
 * ft_weights there; for --numa off one unbound copy when copy_when_off,
 * else nothing (weights stay in the mapping). Call after binding, and after
 * any step that replaces weight data, before the first forward. The copies
 * belong to m->numa_weights. */
int ft_numa_weights_place(struct ft_model *m, bool copy_when_off);
/* After ft_numa_weights_place copied the weights: repack, in every copy,
 * the matmul weights whose type the kernel level repacks (engine/model/repack.c).
 * FT_REPACK=0 in the environment turns it off (for comparisons). */
int ft_weights_repack(struct ft_model *m);
void ft_numa_weights_free(struct ft_numa_weights *nw); /* accepts NULL */

/* ---- tensor binding (engine/model/model.c), used by the arch files ---- */

/* Bind `name` (printf-style with the layer index) expecting shape
 * (rows, cols) (rows 0: a vector of cols). Missing and not optional, or a
 * wrong shape: FT_EFORMAT naming the tensor and both shapes. A type we
 * cannot run: FT_EUNSUPPORTED. */
int ft_bind(struct ft_model *m, struct ft_weight *w, bool optional, int64_t rows, int64_t cols,
            const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Common to every arch: token_embd, output_norm, output (tied when absent). */
int ft_bind_io(struct ft_model *m);

/* What a layer's attention block has besides attn_norm, Wq, Wk, Wv, Wo. */
enum ft_bind_attn_opts {
    FT_BIND_QKV_BIAS = 1 << 0, /* attn_q/k/v.bias, optional */
    FT_BIND_O_BIAS = 1 << 1,   /* attn_output.bias, optional */
    FT_BIND_QK_NORM = 1 << 2,  /* attn_q_norm / attn_k_norm per head, required */
};
/* Layer il's attention weights, with the shapes the hyperparameters give. */
int ft_bind_attention(struct ft_model *m, int il, unsigned opts);
/* Layer il's gated feed-forward: ffn_norm, ffn_gate, ffn_up, ffn_down. */
int ft_bind_ffn(struct ft_model *m, int il);

#endif
