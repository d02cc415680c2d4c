/* Helpers shared by the subcommands that load a model and evaluate it. */
#ifndef FT_CLI_COMMON_MODEL_H
#define FT_CLI_COMMON_MODEL_H

#include "args.h"
#include "ft/model.h"

#include <stdbool.h>
#include <stdint.h>

/* Threads and NUMA placement from the flags every model command takes:
 * -t N (0: one per physical core), --numa MODE, --numa-node N (-1: unset;
 * only with --numa isolate). Returns 0, or prints one line and returns -1. */
int ft_cli_model_params(const char *cmd, int threads, const char *numa, int numa_node,
                        struct ft_model_params *out);

/* Help texts of those flags, so every command describes them alike. */
#define FT_CLI_HELP_THREADS "threads (default: one per physical core)"
#define FT_CLI_HELP_NUMA \
    "off (default), distribute (threads on all nodes, weights interleaved), isolate (one node), " \
    "replicate (a weight copy per node)"
#define FT_CLI_HELP_NUMA_NODE "the node for --numa isolate (default: the node ft starts on)"
#define FT_CLI_HELP_MMAP \
    "read weights in place from the file mapping (no copy: faster start, shared page cache; " \
    "decode is slower without the copy's huge pages)"

#define FT_CLI_HELP_F16_BF16 \
    "F16 weights' prefill in bf16 on AMX-BF16 tiles (faster, but each product within 2^-7 of the exact one; " \
    "docs/performance.md)"
/* Apply --f16-bf16 when given: a warning (and nothing else) where the CPU
 * has no AMX-BF16. */
void ft_cli_f16_bf16(const char *cmd, bool on);

/* The flags of the commands that load a model to run it (run, logits,
 * serve), one table row each in FT_CLI_MODEL_OPTS(flags). Start from
 * FT_CLI_MODEL_FLAGS_DEFAULT. */
struct ft_cli_model_flags {
    int threads;      /* -t N */
    const char *numa; /* --numa MODE */
    int numa_node;    /* --numa-node N (-1: unset) */
    bool mmap;        /* --mmap */
    bool f16_bf16;    /* --f16-bf16 */
};
#define FT_CLI_MODEL_FLAGS_DEFAULT {.threads = 0, .numa = NULL, .numa_node = -1, .mmap = false, .f16_bf16 = false}
#define FT_CLI_MODEL_OPTS(f)                                                                 \
    {"-t", "--threads", FT_OPT_INT, &(f).threads, "N", FT_CLI_HELP_THREADS},                 \
    {NULL, "--numa", FT_OPT_STR, &(f).numa, "MODE", FT_CLI_HELP_NUMA},                       \
    {NULL, "--numa-node", FT_OPT_INT, &(f).numa_node, "N", FT_CLI_HELP_NUMA_NODE},           \
    {NULL, "--mmap", FT_OPT_FLAG, &(f).mmap, NULL, FT_CLI_HELP_MMAP},                        \
    {NULL, "--f16-bf16", FT_OPT_FLAG, &(f).f16_bf16, NULL, FT_CLI_HELP_F16_BF16}

/* ft_cli_model_params() from the flags, with --mmap set in out and
 * --f16-bf16 applied (ft_cli_f16_bf16). Returns 0, or prints one line and
 * returns -1. */
int ft_cli_model_flags_params(const char *cmd, const struct ft_cli_model_flags *f, struct ft_model_params *out);

/* Parse "1 2655 7767" (spaces or commas) into a malloc'd id array, each id
 * checked against n_vocab. Returns count or -1 (message printed). */
int ft_cli_parse_tokens(const char *cmd, const char *s, int32_t n_vocab, int32_t **out);

/* The KV context to allocate: `requested` if > 0 (checked against memory),
 * else the model's training context capped so the KV cache takes at most
 * half of available memory (a warning says so). Returns 0 on error. */
int32_t ft_cli_choose_ctx(const char *cmd, const struct ft_model *m, int32_t requested);

/* Evaluate `n` tokens of sequence 0 from position `pos0` in batches of at
 * most `n_batch`, writing the last token's logits to `last_logits` (or all
 * rows to `all_logits` when non-NULL, n * n_vocab floats). */
int ft_cli_eval(struct ft_model *m, struct ft_kv_cache *kv, const int32_t *tokens, int32_t n,
                int32_t pos0, int32_t n_batch, float *last_logits, float *all_logits);

#endif
