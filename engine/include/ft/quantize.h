/* Quantizing GGUF models: which type each tensor gets, and the conversion.
 *
 * The file types ("Q4_K_M") and the per-tensor choice of type are those of
 * llama.cpp's llama-quantize (src/llama-quant.cpp: llama_tensor_get_type),
 * so a file FreeToken quantizes has the same tensor types as one quantized
 * by llama.cpp from the same input, and -- since the quantizers are the
 * reference ones of simd/quant_ref.c, bit-exact with ggml -- the same bytes.
 * Without an importance matrix (FreeToken has none), that is:
 *   - 1-D tensors, norms, and a few small special tensors stay as they are;
 *   - output.weight (or token_embd.weight when the output is tied to it)
 *     gets Q6_K, or Q8_0 when its rows are not a multiple of the default
 *     type's block, or when the file type is Q8_0;
 *   - the _S/_M/_L mixes give attn_v, ffn_down and attn_output more bits in
 *     some layers (first and last eighth, every third in between);
 *   - a row length that is not a multiple of 256 makes a K-quant fall back
 *     to Q4_0 (from Q2_K/Q3_K), Q5_0 (Q4_K), Q5_1 (Q5_K), Q8_0 (Q6_K), and
 *     to F16 when even 32 does not divide it.
 * docs/quantization.md lists the rules per file type.
 */
#ifndef FT_QUANTIZE_H
#define FT_QUANTIZE_H

#include "ft/gguf.h"
#include "ft/types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* general.file_type values (llama.cpp's llama_ftype). */
enum ft_ftype {
    FT_FTYPE_ALL_F32 = 0,
    FT_FTYPE_F16 = 1,
    FT_FTYPE_Q4_0 = 2,
    FT_FTYPE_Q4_1 = 3,
    FT_FTYPE_Q8_0 = 7,
    FT_FTYPE_Q5_0 = 8,
    FT_FTYPE_Q5_1 = 9,
    FT_FTYPE_Q2_K = 10,
    FT_FTYPE_Q3_K_S = 11,
    FT_FTYPE_Q3_K_M = 12,
    FT_FTYPE_Q3_K_L = 13,
    FT_FTYPE_Q4_K_S = 14,
    FT_FTYPE_Q4_K_M = 15,
    FT_FTYPE_Q5_K_S = 16,
    FT_FTYPE_Q5_K_M = 17,
    FT_FTYPE_Q6_K = 18,
    FT_FTYPE_IQ4_NL = 25,
    FT_FTYPE_IQ4_XS = 30,
    FT_FTYPE_BF16 = 32,
    FT_FTYPE_MXFP4_MOE = 38,
};

struct ft_ftype_desc {
    const char *name;          /* "Q4_K_M" */
    enum ft_ftype ftype;
    enum ft_type default_type; /* most tensors get this */
    const char *about;         /* one line for --help */
};

/* The file types ft quantize writes, in --help order. */
size_t ft_ftype_list(const struct ft_ftype_desc **out);
/* By name, case-insensitive; "Q3_K", "Q4_K", "Q5_K" are the _M mixes (as in
 * llama-quantize). NULL if unknown. */
const struct ft_ftype_desc *ft_ftype_by_name(const char *name);
/* By general.file_type value; NULL for one ft cannot write. */
const struct ft_ftype_desc *ft_ftype_by_id(uint32_t ftype);
/* A type name ft can quantize a tensor to ("Q4_K", "F16", case-insensitive);
 * FT_EINVAL if unknown or not writable. */
int ft_quant_type_parse(const char *name, enum ft_type *out);

/* "TENSOR_GLOB=TYPE": tensors whose name matches the glob (fnmatch, first
 * match wins) get TYPE instead of the mixture's choice (shape fallbacks
 * still apply, as llama-quantize's --tensor-type). */
struct ft_quant_override {
    const char *glob;
    enum ft_type type;
};

/* What the mixture rules read from the model's metadata. */
struct ft_quant_model_info {
    char arch[64];
    int32_t n_layer;   /* <arch>.block_count */
    int32_t n_head;    /* layer 0 */
    int32_t n_head_kv; /* layer 0 */
    int32_t n_expert;  /* 0 if not MoE */
    bool is_70b;       /* llama.cpp's LLM_TYPE_70B (one attn_v rule) */
};

int ft_quant_model_info_read(const struct ft_gguf *g, struct ft_quant_model_info *out);

/* One tensor as the rules see it (name NUL-terminated). */
struct ft_quant_tensor {
    const char *name;
    enum ft_type type;
    int64_t ne[4];
};

struct ft_quant_choice {
    enum ft_type type; /* output type */
    bool fallback;     /* a K-quant that the row length forced to another type */
};

/* The order llama-quantize processes (and writes) tensors in: by layer
 * number ("blk.N."; other tensors first), then by name. Fills order[0..n). */
void ft_quant_order(const struct ft_quant_tensor *t, size_t n, size_t *order);

/* The type of every tensor for `ftype` (choices[i] for t[i]). `pure`
 * disables the mixture (every quantizable tensor gets the default type, then
 * the shape fallback). FT_EFORMAT (logged) when the rules cannot place a
 * tensor (an expert tensor without a layer number). */
int ft_quant_choose(const struct ft_quant_model_info *mi, const struct ft_quant_tensor *t, size_t n,
                    enum ft_ftype ftype, bool pure, const struct ft_quant_override *ov, int n_ov,
                    struct ft_quant_choice *choices);

/* ---- the conversion ---- */

struct ft_quant_progress {
    int64_t i_tensor, n_tensors; /* tensor being written, 1-based */
    const char *name;
    enum ft_type from, to;
    uint64_t bytes_done, bytes_total; /* of output tensor data, before this tensor */
};

struct ft_quant_params {
    enum ft_ftype ftype;
    int n_threads; /* <= 0: one per CPU */
    bool pure;
    const struct ft_quant_override *overrides;
    int n_overrides;
    /* Called before each tensor is written (from the calling thread). */
    void (*progress)(void *ud, const struct ft_quant_progress *p);
    void *progress_ud;
};

struct ft_quant_report {
    int64_t n_tensors;
    int64_t n_converted;   /* tensors whose type changed */
    int64_t n_requantized; /* converted from an already quantized type */
    int64_t n_fallback;
    uint64_t n_params;     /* elements of all tensors */
    uint64_t bytes_in;     /* tensor data */
    uint64_t bytes_out;
    enum ft_type requant_from; /* first quantized source type, when n_requantized > 0 */
};

/* Quantize `in` into `out` (atomically: a failure leaves nothing at `out`).
 * Refuses (FT_EINVAL) when `out` is `in` (same file, by device and inode).
 * Metadata is copied, general.quantization_version and general.file_type
 * are set (and moved last, as llama-quantize does), split keys removed.
 * A tensor that already has its target type is copied as is. Converting
 * from a quantized type works (dequantize, then quantize) and is counted in
 * report->n_requantized so the caller can warn. */
int ft_quantize_file(const char *in, const char *out, const struct ft_quant_params *p,
                     struct ft_quant_report *report);

#endif
