/* The state of a forward pass: the scratch buffers a model reuses across
 * calls (struct ft_scratch) and one internal batch while the
 * architecture's forward runs (struct ft_fwd). Not a public header.
 *
 * A batch's activations are row-major: one row of the given width per
 * token; shapes in comments are (rows, row length). */
#ifndef FT_FORWARD_H
#define FT_FORWARD_H

#include <stddef.h>
#include <stdint.h>

struct ft_kv_cache;
struct ft_model;

/* Tokens evaluated per internal pass: a larger batch is split so scratch
 * stays bounded (each pass writes its KV before the next one reads it). */
#define FT_UBATCH 512

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
    /* Mixture of experts (engine/model/moe.c), NULL for dense models; K =
     * n_expert_used, P = cap * K (token, slot) pairs. */
    float *moe_logits;  /* (cap, n_expert) router logits, then probabilities */
    int32_t *moe_sel;   /* (cap, K) selected experts */
    float *moe_w;       /* (cap, K) their weights */
    int32_t *moe_rank;  /* (P) each pair's row in the expert-sorted order */
    float *moe_x;       /* (P, n_embd) gathered inputs, then the experts' outputs */
    float *moe_gate;    /* (P, n_ff_exp) */
    float *moe_up;      /* (P, n_ff_exp) */
    int32_t *moe_ones, *moe_zeros; /* (cap) a sub-batch's row counts and indices */
    int32_t *moe_src;   /* (P) each sorted pair's token */
    float *moe_pair_w;  /* (P) each sorted pair's weight */
    void *moe_act;      /* (P) pair rows converted to the experts' vec_dot_type (engine/model/moe_matmul.c) */
    void *moe_tiles;    /* their activation tiles, per expert */
};

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

#endif
