/* Model-running helpers shared by ft run and ft logits. */
#include "common_model.h"

#include "ft/common.h"
#include "ft/ops.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void ft_cli_f16_bf16(const char *cmd, bool on) {
    if (on && !ft_float_set_f16_via_bf16(true))
        fprintf(stderr, "ft %s: warning: --f16-bf16 needs AMX-BF16, which this CPU lacks: F16 stays exact\n", cmd);
}

int ft_cli_model_flags_params(const char *cmd, const struct ft_cli_model_flags *f, struct ft_model_params *out) {
    if (ft_cli_model_params(cmd, f->threads, f->numa, f->numa_node, out))
        return -1;
    out->mmap = f->mmap;
    ft_cli_f16_bf16(cmd, f->f16_bf16);
    return 0;
}

int ft_cli_model_params(const char *cmd, int threads, const char *numa, int numa_node,
                        struct ft_model_params *out) {
    *out = (struct ft_model_params){.n_threads = threads, .numa = FT_NUMA_OFF, .numa_node = -1};
    if (threads < 0) {
        fprintf(stderr, "ft %s: -t must be 1 or more (0: one per physical core), got %d\n", cmd, threads);
        return -1;
    }
    if (numa && ft_numa_mode_parse(numa, &out->numa)) {
        fprintf(stderr, "ft %s: --numa: unknown mode '%s' (off, distribute, isolate, replicate)\n", cmd, numa);
        return -1;
    }
    if (numa_node != -1) {
        if (out->numa != FT_NUMA_ISOLATE) {
            fprintf(stderr, "ft %s: --numa-node only applies to --numa isolate\n", cmd);
            return -1;
        }
        if (numa_node < 0 || numa_node >= ft_hw_n_numa_nodes()) {
            fprintf(stderr, "ft %s: --numa-node %d: this machine has NUMA nodes 0..%d\n", cmd, numa_node,
                    ft_hw_n_numa_nodes() - 1);
            return -1;
        }
        out->numa_node = numa_node;
    }
    return 0;
}

int ft_cli_parse_tokens(const char *cmd, const char *s, int32_t n_vocab, int32_t **out) {
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids)
        return -1;
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n')
            s++;
        if (!*s)
            break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v >= n_vocab) {
            fprintf(stderr, "ft %s: bad token id near '%.16s' (ids are 0..%d)\n", cmd, s, n_vocab - 1);
            free(ids);
            return -1;
        }
        if (n == cap) {
            int32_t *p = realloc(ids, cap * 2 * sizeof(int32_t));
            if (!p) {
                free(ids);
                return -1;
            }
            ids = p;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        s = end;
    }
    *out = ids;
    return (int)n;
}

int32_t ft_cli_choose_ctx(const char *cmd, const struct ft_model *m, int32_t requested) {
    const struct ft_hparams *hp = ft_model_hparams(m);
    size_t per_token = ft_model_kv_bytes_per_token(m);
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double avail = (pages > 0 && page > 0) ? (double)pages * (double)page : 8.0 * (1 << 30);
    int32_t n_ctx = requested > 0 ? requested : hp->n_ctx_train;
    if (n_ctx <= 0)
        n_ctx = 4096;
    double need = (double)per_token * n_ctx;
    if (need > avail * 0.5) {
        int32_t cap = (int32_t)(avail * 0.5 / (double)per_token);
        cap -= cap % FT_KV_BLOCK_TOKENS;
        if (cap < FT_KV_BLOCK_TOKENS) {
            fprintf(stderr, "ft %s: not enough memory for any KV cache (%.1f MiB available)\n", cmd,
                    avail / (1 << 20));
            return 0;
        }
        fprintf(stderr,
                "ft %s: warning: context capped to %d tokens: %d tokens of KV cache would need %.2f GiB, "
                "%.2f GiB available (choose with -c)\n",
                cmd, cap, n_ctx, need / (1 << 30), avail / (1 << 30));
        n_ctx = cap;
    }
    return n_ctx;
}

int ft_cli_eval(struct ft_model *m, struct ft_kv_cache *kv, const int32_t *tokens, int32_t n,
                int32_t pos0, int32_t n_batch, float *last_logits, float *all_logits) {
    int32_t n_vocab = ft_model_hparams(m)->n_vocab;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_batch);
    int32_t *seq = calloc((size_t)n_batch, sizeof(int32_t));
    bool *want = malloc(sizeof(bool) * (size_t)n_batch);
    int rc = FT_ENOMEM;
    if (!pos || !seq || !want)
        goto done;
    for (int32_t start = 0; start < n; start += n_batch) {
        int32_t nb = FT_MIN(n_batch, n - start);
        for (int32_t i = 0; i < nb; i++) {
            pos[i] = pos0 + start + i;
            want[i] = all_logits != NULL || start + i == n - 1;
        }
        struct ft_batch b = {.n_tokens = nb, .token = tokens + start, .pos = pos, .seq_id = seq, .want_logits = want};
        float *dst = all_logits ? all_logits + (size_t)start * (size_t)n_vocab
                                : (start + nb == n ? last_logits : NULL);
        rc = ft_model_forward(m, kv, &b, dst);
        if (rc)
            goto done;
    }
    rc = FT_OK;
done:
    free(pos);
    free(seq);
    free(want);
    return rc;
}
