/* struct ft_model, the loaded model behind engine/include/ft/model.h's opaque
 * handle: hyperparameters, architecture, bound weights, thread pool and
 * forward-pass scratch. engine/model/model.c loads and frees it; the other
 * files of engine/model/ read it. Not a public header.
 *
 * Shapes in comments are (rows, row length) = (outputs, inputs) of y = W x
 * (engine/model/weights.h). */
#ifndef FT_MODEL_INTERNAL_H
#define FT_MODEL_INTERNAL_H

#include "forward.h"
#include "weights.h"

#include "ft/model.h"

#include <stdatomic.h>
#include <stdint.h>

struct ft_arch_ops;
struct ft_numa_weights;

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

    /* Bytes of weights the matmuls read (engine/model/matmul.c counts whole
     * matrices, engine/model/moe_matmul.c the rows each chunk reads), and
     * the share of one-token passes (decode) with their number:
     * FT_READ_STATS=1 logs decode's bytes per token when the model is freed. */
    atomic_uint_fast64_t weight_bytes_read;
    uint64_t decode_bytes, decode_passes;
};

#endif
