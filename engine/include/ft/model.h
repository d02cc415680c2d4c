/* Models: load a GGUF architecture and run its forward pass.
 *
 * Forward pass contract (docs/architecture.md, Models and the forward pass):
 * one call evaluates a batch of tokens that may belong to several sequences,
 * each token with its sequence id and position, and returns logits only for
 * the tokens that ask for them. KV for each sequence lives in fixed-size
 * blocks of the ft_kv_cache.
 */
#ifndef FT_MODEL_H
#define FT_MODEL_H

#include "ft/gguf.h"
#include "ft/tokenizer.h"
#include "ft/topology.h"

#include <stdbool.h>
#include <stdint.h>

struct ft_model;
struct ft_kv_cache;
struct ft_threadpool;

enum ft_arch {
    FT_ARCH_LLAMA,
    FT_ARCH_QWEN2,
    FT_ARCH_QWEN3,
    FT_ARCH_GEMMA3,
    FT_ARCH_QWEN3MOE,
    FT_ARCH_GPTOSS,
};

/* Hyper-parameters read from `<arch>.*` metadata, with llama.cpp's defaults
 * for absent keys. */
struct ft_hparams {
    enum ft_arch arch;
    char arch_name[32];
    int32_t n_vocab;          /* rows of token_embd */
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;        /* default n_head */
    int32_t head_dim_k;       /* key_length (default n_embd / n_head) */
    int32_t head_dim_v;       /* value_length (default n_embd / n_head) */
    int32_t n_ff;
    int32_t n_rot;            /* rope.dimension_count (default head_dim_k) */
    float norm_eps;           /* attention.layer_norm_rms_epsilon */
    float rope_freq_base;     /* default 10000 */
    float rope_freq_base_swa; /* gemma3 sliding-window layers (default 10000) */
    float rope_freq_scale;    /* 1 / rope.scaling.factor (default 1) */
    float rope_freq_scale_swa; /* sliding-window layers (default 1: gemma3; gpt-oss: rope_freq_scale) */
    float rope_ext_factor;    /* YaRN: 1 when rope.scaling.type is yarn, else 0 */
    float rope_attn_factor;   /* YaRN magnitude correction (1 otherwise) */
    float rope_beta_fast;     /* YaRN ramp (32) */
    float rope_beta_slow;     /* YaRN ramp (1) */
    int32_t rope_n_ctx_orig;  /* rope.scaling.original_context_length (default n_ctx_train) */
    int32_t sliding_window;   /* 0 = none */
    int32_t swa_pattern;      /* gemma3: layer il is global when il % swa_pattern == swa_pattern - 1 */
    float attn_scale;         /* multiplies Q.K (1/sqrt(head_dim_k) unless the arch says otherwise) */
    float final_softcap;      /* logits = c * tanh(logits / c); 0 = off */
    /* Mixture of experts (qwen3moe, gpt-oss); 0 for dense models. */
    int32_t n_expert;         /* expert_count */
    int32_t n_expert_used;    /* expert_used_count: experts per token */
    int32_t n_ff_exp;         /* expert_feed_forward_length: rows of one expert's gate/up */
    int32_t pooling_type;     /* <arch>.pooling_type, llama.cpp's numbers (0 none, 1 mean, 2 cls, 3 last,
                                 4 rank); -1 when absent. Embeddings only (http/embeddings.h) */
    bool rope_neox;
    bool tied_output;         /* output.weight absent: token_embd is the output head */
};

/* Threads, NUMA placement (engine/include/ft/topology.h describes the modes) and
 * where weights are read from. Zero-initialized params mean: one thread per
 * physical core, NUMA off, weights copied into anonymous memory.
 *
 * Why copy by default: the copy is advised to transparent huge pages, and
 * streaming the weights (decode) through 2 MiB pages instead of the file
 * mapping's 4 KiB ones saves the TLB misses that otherwise cap a decode step
 * at about 75% of the memory bandwidth (docs/performance.md, Threads and
 * NUMA). mmap reads them in place instead: faster start, and the page cache
 * is shared with other processes mapping the same file. */
struct ft_model_params {
    int n_threads;          /* <= 0: one per physical core (of the node, for isolate) */
    enum ft_numa_mode numa; /* FT_NUMA_OFF: no binding (one copy, or the mapping with mmap) */
    int numa_node;          /* isolate: logical node index; -1: the node of the loading thread */
    bool mmap;              /* NUMA off only: read weights in place from the file mapping */
};

int ft_model_load(const char *path, const struct ft_model_params *params, struct ft_model **out);
void ft_model_free(struct ft_model *m); /* accepts NULL */

const struct ft_hparams *ft_model_hparams(const struct ft_model *m);
const struct ft_tokenizer *ft_model_tokenizer(const struct ft_model *m);
const struct ft_gguf *ft_model_gguf(const struct ft_model *m);
/* Bytes of KV cache one token takes across all layers (F16 K and V). */
size_t ft_model_kv_bytes_per_token(const struct ft_model *m);

/* A batch: n_tokens entries (1..FT_MAX_BATCH), each with its sequence,
 * position and whether logits are wanted. Logits are written row by row, in
 * batch order, for the entries with want_logits set; want_logits == NULL
 * asks for the last entry only. */
#define FT_MAX_BATCH 4096
struct ft_batch {
    int32_t n_tokens;
    const int32_t *token;
    const int32_t *pos;
    const int32_t *seq_id;
    const bool *want_logits;
};

/* KV cache: one pool of blocks of FT_KV_BLOCK_TOKENS tokens (F16 K and V of
 * every layer) for up to max_seqs sequences, each with its own block table.
 * ft_kv_cache_new sizes the pool for n_ctx tokens (rounded up to whole
 * blocks) per sequence: memory is about n_ctx * max_seqs *
 * ft_model_kv_bytes_per_token(); ft_kv_cache_new_pool takes the block count.
 * A sequence id is any value in 0..max_seqs-1; truncating returns its blocks
 * to the pool at once.
 *
 * Sharing (the prefix cache): a block may be listed by several sequence
 * tables (ft_kv_cache_seq_attach) and held by the prefix cache
 * (ft_kv_cache_block_set_cached). A pass that writes into a partly filled
 * block someone else also holds first copies it (copy-on-write), so shared
 * rows never change. A cached block no sequence lists is idle: it stays
 * valid, ordered least recently released first, and is evicted (the evict
 * callback tells its holder) when a pass needs blocks and the free list is
 * empty, or at once beyond the idle limit (ft_kv_cache_set_idle_limit).
 *
 * Layout: a block holds, per layer, its tokens' K head-major -- KV head h's
 * rows of the block's FT_KV_BLOCK_TOKENS tokens side by side -- and V the
 * same way, so the attention of one KV head reads one contiguous run per
 * block instead of one head_dim-sized piece per token row. */
#define FT_KV_BLOCK_TOKENS 16

int ft_kv_cache_new(const struct ft_model *m, int32_t n_ctx, int32_t max_seqs,
                    struct ft_kv_cache **out);
int ft_kv_cache_new_pool(const struct ft_model *m, int32_t n_ctx, int32_t max_seqs, int32_t n_blocks,
                         struct ft_kv_cache **out);
void ft_kv_cache_free(struct ft_kv_cache *kv); /* accepts NULL */
/* Tokens currently held for a sequence (positions 0..len-1). */
int32_t ft_kv_cache_seq_len(const struct ft_kv_cache *kv, int32_t seq);
/* Drop positions >= pos of a sequence (0 clears it) and release its blocks
 * beyond: to the free list, or to the idle list when the prefix cache
 * holds them. */
void ft_kv_cache_seq_truncate(struct ft_kv_cache *kv, int32_t seq, int32_t pos);
int32_t ft_kv_cache_n_ctx(const struct ft_kv_cache *kv);     /* max tokens per sequence */
int32_t ft_kv_cache_max_seqs(const struct ft_kv_cache *kv);
int32_t ft_kv_cache_blocks_free(const struct ft_kv_cache *kv);  /* on the free list */
int32_t ft_kv_cache_blocks_idle(const struct ft_kv_cache *kv);  /* cached, listed by no sequence */
int32_t ft_kv_cache_blocks_total(const struct ft_kv_cache *kv);

/* Block i (0 .. ceil(len / FT_KV_BLOCK_TOKENS) - 1) of a sequence's table;
 * -1 outside. */
int32_t ft_kv_cache_seq_block(const struct ft_kv_cache *kv, int32_t seq, int32_t i);
/* Start an empty sequence on existing blocks: its table becomes
 * blocks[0..n) and its length len ((n-1) * FT_KV_BLOCK_TOKENS < len <=
 * n * FT_KV_BLOCK_TOKENS, len <= n_ctx). Each block must be listed by a
 * sequence or cached. FT_EINVAL (nothing changed) otherwise. */
int ft_kv_cache_seq_attach(struct ft_kv_cache *kv, int32_t seq, const int32_t *blocks, int32_t n, int32_t len);
/* Mark a block as held (or no longer held) by the prefix cache. Holding
 * needs the block to be listed by a sequence (FT_EINVAL otherwise); letting
 * go of an idle block frees it. */
int ft_kv_cache_block_set_cached(struct ft_kv_cache *kv, int32_t block, bool cached);
bool ft_kv_cache_block_is_cached(const struct ft_kv_cache *kv, int32_t block);
/* References to a block from sequence tables (tests, statistics). */
int32_t ft_kv_cache_block_seq_refs(const struct ft_kv_cache *kv, int32_t block);
/* Called with the oldest idle block when a pass needs room; the callback
 * must let go of it (ft_kv_cache_block_set_cached(kv, block, false)) and
 * may let go of others. Without a callback the cache lets go itself. */
typedef void (*ft_kv_evict_fn)(void *ud, int32_t block);
void ft_kv_cache_set_evict(struct ft_kv_cache *kv, ft_kv_evict_fn fn, void *ud);
/* Keep at most n idle blocks (n >= 0): beyond that the oldest are evicted
 * as soon as they go idle, not only when a pass needs room. This is the
 * prefix cache's memory budget: without it idle blocks spread over the
 * whole pool, and since the free list hands back the most recently freed
 * block first, a bounded idle list also keeps serving on the same blocks
 * (resident memory stops growing once the load's peak is reached). The
 * default is no limit. */
void ft_kv_cache_set_idle_limit(struct ft_kv_cache *kv, int32_t n);

/* Evaluate a batch. Positions of a sequence in the batch must continue its
 * cache (pos == current length, increasing by one); entries of different
 * sequences may interleave. logits must hold (number of wanted entries) *
 * n_vocab floats. Errors (FT_EINVAL for a bad batch, FT_EFULL when the
 * cache has no room) leave the cache unchanged. One call at a time per model
 * (the model owns its scratch and thread pool). */
int ft_model_forward(struct ft_model *m, struct ft_kv_cache *kv, const struct ft_batch *b,
                     float *logits);
/* ft_model_forward that also writes, row by row in batch order, the final
 * hidden state (after the output norm, before the LM head: n_embd floats)
 * of every entry i with want_embd[i] set (want_embd NULL: none) into embd,
 * which must hold (number of such entries) * n_embd floats. What embeddings are pooled from (the
 * server's /v1/embeddings); an entry that wants only this skips the LM
 * head, most of a large-vocabulary model's last-token cost. */
int ft_model_forward_embd(struct ft_model *m, struct ft_kv_cache *kv, const struct ft_batch *b,
                          const bool *want_embd, float *logits, float *embd);

#endif
