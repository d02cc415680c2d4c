/* ft logits: evaluate token ids in one batch from position 0 and print the
 * top logits per position as JSON, in the format of ../shared/models/NAME.json,
 * so FreeToken's numbers can be compared with llama.cpp's directly. */
#include "args.h"
#include "cli.h"
#include "common_model.h"
#include "ft/common.h"
#include "ft/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Indices of the k largest values of v[0..n), largest first (ties: lower id). */
static void top_k(const float *v, int32_t n, int32_t k, int32_t *idx) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m == k && !(v[i] > v[idx[k - 1]]))
            continue;
        int32_t j = m < k ? m++ : k - 1;
        while (j > 0 && v[i] > v[idx[j - 1]]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
}

int ft_cmd_logits(int argc, char **argv) {
    const char *model = NULL, *tokens_arg = NULL;
    int top = 32;
    struct ft_cli_model_flags mf = FT_CLI_MODEL_FLAGS_DEFAULT;
    const struct ft_opt opts[] = {
        {"-m", "--model", FT_OPT_STR, &model, "FILE", "GGUF model (default: the default model)"},
        {NULL, "--tokens", FT_OPT_STR, &tokens_arg, "IDS", "token ids separated by spaces or commas"},
        {NULL, "--top", FT_OPT_INT, &top, "K", "logits per position, largest first (default 32)"},
        FT_CLI_MODEL_OPTS(mf),
    };
    const struct ft_cmd_spec spec = {
        "logits", "ft logits -m MODEL.gguf --tokens \"1 2655 7767\" [--top K]",
        "Evaluates the tokens in one batch from position 0 and prints\n"
        "{\"top_logits\": [[[id, logit], ...], ...]}, one list per position, largest first.",
        opts, (int)FT_ARRAY_LEN(opts), 0};
    int code = ft_args_parse_opts(&spec, argc, argv);
    if (code != FT_ARGS_GO_ON)
        return code;
    if (!tokens_arg) {
        fprintf(stderr, "ft logits: --tokens is required\n");
        return 2;
    }
    if (top < 1) {
        fprintf(stderr, "ft logits: --top must be at least 1\n");
        return 2;
    }
    struct ft_model_params mp;
    if (ft_cli_model_flags_params("logits", &mf, &mp))
        return 2;
    if (!model && !(model = ft_cli_default_model("logits")))
        return 2;

    struct ft_model *m = NULL;
    struct ft_kv_cache *kv = NULL;
    int32_t *ids = NULL, *idx = NULL;
    float *logits = NULL;
    int status = 1;
    int rc = ft_model_load(model, &mp, &m);
    if (rc) {
        ft_cli_error("logits", rc, model);
        goto done;
    }
    int32_t n_vocab = ft_model_hparams(m)->n_vocab;
    int n = ft_cli_parse_tokens("logits", tokens_arg, n_vocab, &ids);
    if (n < 0) {
        status = 2;
        goto done;
    }
    if (n == 0) {
        fprintf(stderr, "ft logits: --tokens has no ids\n");
        status = 2;
        goto done;
    }
    int32_t n_ctx = n + (FT_KV_BLOCK_TOKENS - n % FT_KV_BLOCK_TOKENS);
    if ((rc = ft_kv_cache_new(m, n_ctx, 1, &kv))) {
        ft_cli_error("logits", rc, "KV cache");
        goto done;
    }
    if (top > n_vocab)
        top = n_vocab;
    logits = malloc(sizeof(float) * (size_t)n * (size_t)n_vocab);
    idx = malloc(sizeof(int32_t) * (size_t)top);
    if (!logits || !idx) {
        fprintf(stderr, "ft logits: out of memory\n");
        goto done;
    }
    if ((rc = ft_cli_eval(m, kv, ids, n, 0, FT_MIN(n, 2048), NULL, logits))) {
        ft_cli_error("logits", rc, "evaluating");
        goto done;
    }
    printf("{\"top_logits\": [");
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * (size_t)n_vocab;
        top_k(row, n_vocab, top, idx);
        printf(i ? ",\n  [" : "\n  [");
        for (int j = 0; j < top; j++) {
            float v = row[idx[j]];
            if (isfinite(v))
                printf(j ? ", [%d, %.6f]" : "[%d, %.6f]", idx[j], v);
            else
                printf(j ? ", [%d, null]" : "[%d, null]", idx[j]);
        }
        printf("]");
    }
    printf("\n]}\n");
    status = 0;
done:
    free(idx);
    free(logits);
    free(ids);
    ft_kv_cache_free(kv);
    ft_model_free(m);
    return status;
}
