/* A weight tensor as the forward pass reads it (struct ft_weight, bound
 * from the GGUF mapping by engine/model/bind.c, copied by
 * engine/model/numa_weights.c, repacked by engine/model/repack.c) and the
 * tensors of one layer (struct ft_layer). Not a public header.
 *
 * Shapes in comments are (rows, row length) = (outputs, inputs) of y = W x,
 * the order a reader of the maths expects; GGUF lists the same dims
 * reversed (ne[0] is the row length). */
#ifndef FT_WEIGHTS_H
#define FT_WEIGHTS_H

#include "ft/types.h"

#include <stddef.h>
#include <stdint.h>

struct ft_qgemm;

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
    /* Mixture of experts (engine/model/moe.c). The 3-D expert tensors are
     * bound as one matrix of n_expert stacked (rows, row length) matrices:
     * expert e is rows [e * rows_e, (e + 1) * rows_e). */
    struct ft_weight ffn_gate_inp;   /* (n_expert, n_embd) router, F32 */
    struct ft_weight ffn_gate_inp_b; /* (n_expert) router bias (gpt-oss) */
    struct ft_weight ffn_gate_exps;  /* (n_expert * n_ff_exp, n_embd) */
    struct ft_weight ffn_up_exps;    /* (n_expert * n_ff_exp, n_embd) */
    struct ft_weight ffn_down_exps;  /* (n_expert * n_embd, n_ff_exp) */
    struct ft_weight ffn_gate_exps_b; /* (n_expert * n_ff_exp) expert biases (gpt-oss) */
    struct ft_weight ffn_up_exps_b;   /* (n_expert * n_ff_exp) */
    struct ft_weight ffn_down_exps_b; /* (n_expert * n_embd) */
    struct ft_weight attn_sinks;     /* (n_head) one extra softmax logit per head (gpt-oss) */
};

#endif
