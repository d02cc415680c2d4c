/* The shared transformer blocks the architecture files compose
 * (engine/model/blocks.c, ft_blk_*): each works on the rows of one internal
 * batch (struct ft_fwd, engine/model/forward.h). Not a public header. */
#ifndef FT_BLOCKS_H
#define FT_BLOCKS_H

#include "forward.h"
#include "gemm_float.h"
#include "weights.h"

#include "ft/model.h"
#include "ft/ops.h"

#include <stdbool.h>
#include <stdint.h>

bool ft_layer_is_swa(const struct ft_hparams *hp, int il);
/* RoPE parameters of layer il (per-layer base for sliding-window layers). */
void ft_layer_rope(const struct ft_model *m, int il, struct ft_rope *out);

/* x = embedding rows of the tokens, times scale. */
void ft_blk_embed(struct ft_fwd *f, float scale);
/* y = rmsnorm(x) * w over n_rows rows of w->cols. */
void ft_blk_rmsnorm(struct ft_fwd *f, float *y, const float *x, const struct ft_weight *w);
/* RMS norm of every head of every row in place (rows of n_head heads of w->cols). */
void ft_blk_head_norm(struct ft_fwd *f, float *x, int32_t n_head, const struct ft_weight *w);
/* out (n_rows, w->rows) = in (n_rows, w->cols) W^T (+ bias). */
void ft_blk_matmul(struct ft_fwd *f, float *out, const struct ft_weight *w, const struct ft_weight *bias,
                   const float *in);
/* The attention output projection: ft_blk_matmul, numerically as llama.cpp
 * does it also after ft_blk_keep_out_rows (see blocks.c). */
void ft_blk_attn_out(struct ft_fwd *f, float *out, const struct ft_weight *wo, const struct ft_weight *bo,
                     const float *in);
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
/* att = attention of q over the cache of layer il; window > 0 limits it
 * to the last `window` positions (sliding-window layers), through
 * ft_attention_run (engine/model/attention.h). */
void ft_blk_attention(struct ft_fwd *f, int il, float kq_scale, int32_t window);
/* ft_blk_attention with attention sinks: NULL or (n_head) logits that take
 * their share of each head's softmax and add no value (gpt-oss). */
void ft_blk_attention_sinks(struct ft_fwd *f, int il, float kq_scale, int32_t window, const float *sinks);
/* x += y over n_rows rows of width. */
void ft_blk_add(struct ft_fwd *f, float *x, const float *y, int64_t width);

/* out = down(act(gate(in)) * up(in)). */
void ft_blk_ffn(struct ft_fwd *f, const struct ft_layer *l, enum ft_glu act, float *out, const float *in);
/* h = rmsnorm(x) * output_norm, copied to f->embd for the rows that want
 * it; logits = output(h), optional soft-capping, for the rows that want
 * them (the others leave the buffers first). */
void ft_blk_output(struct ft_fwd *f);

#endif
