/* llamacpp_reference: llama.cpp's side of tools/llamacpp_reference.py, the
 * generator of the test oracles in tests/data/models. Not part of FreeToken
 * and never linked into it: the script compiles it against the llama.h /
 * ggml.h that node-llama-cpp ships and links it to that release's prebuilt
 * libllama (build 80fb11a, the one ../shared/models was computed with).
 *
 * Two commands:
 *
 *   logits -m MODEL.gguf --tokens "1 2655 ..." [--top 32] [--greedy 16] [-t 2]
 *          [--flash-attn auto|on|off] [-c CTX]
 *     evaluates the ids in one batch from position 0, keeps the TOP largest
 *     logits of every position, then decodes GREEDY tokens one per step
 *     (argmax, the lowest id on a tie) and prints the JSON of the reference
 *     files: prompt_tokens, top_logits ([id, logit] largest first, logits
 *     printed with 5 decimals), greedy.
 *
 *   quantize IN.gguf OUT.gguf TYPE [-t N]
 *     llama_model_quantize with llama-quantize's defaults, so OUT has the
 *     bytes `llama-quantize IN OUT TYPE N` writes. TYPE is one of the names
 *     llama-quantize takes for the basic and K types (F32 F16 BF16 Q8_0 Q4_0
 *     Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S/M/L Q4_K_S/M Q5_K_S/M Q6_K).
 *
 * --backend-dir DIR loads the ggml backends (libggml-cpu-<variant>.so) from
 * DIR; --cpu-backend FILE loads exactly that CPU variant instead of the one
 * ggml picks for this CPU. Logits are computed on the CPU backend only, with
 * weight repacking on as in llama.cpp's tools (--no-repack turns it off;
 * tests/data/README.md says how each choice compares with ../shared).
 */
#include "llama.h"

#include "ggml-backend.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 4096

static void null_log(enum ggml_log_level level, const char *text, void *ud) {
    (void)level;
    (void)text;
    (void)ud;
}

static void usage(void) {
    fprintf(stderr,
            "usage: llamacpp_reference logits -m MODEL.gguf --tokens \"ID ...\" [--top 32] [--greedy 16] [-t 2]\n"
            "                                 [--flash-attn auto|on|off] [-c CTX] [--backend-dir DIR]\n"
            "                                 [--cpu-backend FILE] [-v]\n"
            "       llamacpp_reference quantize IN.gguf OUT.gguf TYPE [-t N] [--backend-dir DIR] [-v]\n");
    exit(2);
}

static const struct {
    const char *name;
    enum llama_ftype ftype;
} k_ftypes[] = {
    {"F32", LLAMA_FTYPE_ALL_F32},         {"F16", LLAMA_FTYPE_MOSTLY_F16},
    {"BF16", LLAMA_FTYPE_MOSTLY_BF16},    {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
    {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},    {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
    {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},    {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
    {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K},    {"Q3_K_S", LLAMA_FTYPE_MOSTLY_Q3_K_S},
    {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M}, {"Q3_K_L", LLAMA_FTYPE_MOSTLY_Q3_K_L},
    {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S}, {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M},
    {"Q5_K_S", LLAMA_FTYPE_MOSTLY_Q5_K_S}, {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M},
    {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},     {"IQ4_NL", LLAMA_FTYPE_MOSTLY_IQ4_NL},
    {"IQ4_XS", LLAMA_FTYPE_MOSTLY_IQ4_XS}, {"MXFP4_MOE", LLAMA_FTYPE_MOSTLY_MXFP4_MOE},
};

static int cmd_quantize(const char *in, const char *out, const char *type, int n_threads) {
    for (size_t i = 0; i < sizeof(k_ftypes) / sizeof(k_ftypes[0]); i++) {
        if (strcmp(k_ftypes[i].name, type) != 0)
            continue;
        llama_model_quantize_params qp = llama_model_quantize_default_params();
        qp.nthread = n_threads;
        qp.ftype = k_ftypes[i].ftype;
        if (llama_model_quantize(in, out, &qp) != 0) {
            fprintf(stderr, "llamacpp_reference: llama_model_quantize %s -> %s (%s) failed\n", in, out, type);
            return 1;
        }
        return 0;
    }
    fprintf(stderr, "llamacpp_reference: unknown type %s\n", type);
    return 2;
}

/* The n largest of v[0..n_vocab) as (id, logit), largest first, ties by the
 * lower id (a stable selection, as std::partial_sort over ids in order). */
static void top_k(const float *v, int n_vocab, int k, int *ids) {
    for (int j = 0; j < k; j++)
        ids[j] = -1;
    for (int t = 0; t < n_vocab; t++) {
        int pos = k;
        while (pos > 0 && (ids[pos - 1] < 0 || v[t] > v[ids[pos - 1]]))
            pos--;
        if (pos >= k)
            continue;
        memmove(ids + pos + 1, ids + pos, sizeof(int) * (size_t)(k - pos - 1));
        ids[pos] = t;
    }
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static int cmd_logits(const char *model_path, const char *tokens_arg, int top, int n_greedy, int n_threads,
                      int flash_attn, int n_ctx, bool repack) {
    static llama_token toks[MAX_TOKENS];
    int n_tok = 0;
    for (const char *p = tokens_arg; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        if (n_tok == MAX_TOKENS) {
            fprintf(stderr, "llamacpp_reference: more than %d tokens\n", MAX_TOKENS);
            return 2;
        }
        toks[n_tok++] = (llama_token)v;
        p = end;
        while (*p == ' ' || *p == ',')
            p++;
    }
    if (n_tok == 0) {
        fprintf(stderr, "llamacpp_reference: no tokens\n");
        return 2;
    }

    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = repack;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        fprintf(stderr, "llamacpp_reference: cannot load %s\n", model_path);
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    if (top > n_vocab)
        top = n_vocab;

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)(n_tok > 512 ? n_tok : 512);
    cp.n_ubatch = cp.n_batch;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.flash_attn_type = (enum llama_flash_attn_type)flash_attn;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llamacpp_reference: cannot create a context for %s\n", model_path);
        llama_model_free(model);
        return 1;
    }

    /* The prompt in one batch from position 0, logits for every position. */
    struct llama_batch b = llama_batch_init(n_tok, 0, 1);
    for (int i = 0; i < n_tok; i++) {
        b.token[i] = toks[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n_tok;
    int rc = 1;
    int *ids = malloc(sizeof(int) * (size_t)(top > 0 ? top : 1));
    int *greedy = malloc(sizeof(int) * (size_t)(n_greedy > 0 ? n_greedy : 1));
    if (!ids || !greedy || llama_decode(ctx, b) != 0) {
        fprintf(stderr, "llamacpp_reference: decoding the prompt failed\n");
        goto done;
    }

    printf("{\n  \"prompt_tokens\": [");
    for (int i = 0; i < n_tok; i++)
        printf("%s%d", i ? ", " : "", toks[i]);
    printf("],\n  \"top_logits\": [\n");
    for (int i = 0; i < n_tok; i++) {
        const float *lg = llama_get_logits_ith(ctx, i);
        top_k(lg, n_vocab, top, ids);
        printf("    [");
        for (int j = 0; j < top; j++)
            printf("%s[%d, %.5f]", j ? ", " : "", ids[j], (double)lg[ids[j]]);
        printf("]%s\n", i + 1 < n_tok ? "," : "");
    }
    printf("  ],\n");

    /* Greedy decoding: one token per step after the prompt. */
    llama_token next = (llama_token)argmax(llama_get_logits_ith(ctx, n_tok - 1), n_vocab);
    for (int g = 0; g < n_greedy; g++) {
        greedy[g] = next;
        if (g + 1 == n_greedy)
            break;
        if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) {
            fprintf(stderr, "llamacpp_reference: decoding greedy step %d failed\n", g);
            goto done;
        }
        next = (llama_token)argmax(llama_get_logits_ith(ctx, -1), n_vocab);
    }
    printf("  \"greedy\": [");
    for (int g = 0; g < n_greedy; g++)
        printf("%s%d", g ? ", " : "", greedy[g]);
    printf("]\n}\n");
    rc = 0;
done:
    free(ids);
    free(greedy);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2)
        usage();
    const char *cmd = argv[1];
    const char *model = NULL, *tokens = NULL, *backend_dir = NULL, *cpu_backend = NULL;
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0, top = 32, n_greedy = 16, n_threads = 2, flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
    int n_ctx = 4096;
    bool verbose = false, repack = true;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-v")) {
            verbose = true;
            continue;
        }
        if (!strcmp(a, "--no-repack")) {
            repack = false;
            continue;
        }
        if (a[0] != '-') {
            if (n_pos == 3)
                usage();
            pos[n_pos++] = a;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "-m"))
            model = v;
        else if (!strcmp(a, "--tokens"))
            tokens = v;
        else if (!strcmp(a, "--top"))
            top = atoi(v);
        else if (!strcmp(a, "--greedy"))
            n_greedy = atoi(v);
        else if (!strcmp(a, "-t"))
            n_threads = atoi(v);
        else if (!strcmp(a, "-c"))
            n_ctx = atoi(v);
        else if (!strcmp(a, "--backend-dir"))
            backend_dir = v;
        else if (!strcmp(a, "--cpu-backend"))
            cpu_backend = v;
        else if (!strcmp(a, "--flash-attn"))
            flash_attn = !strcmp(v, "on")    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                         : !strcmp(v, "off") ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                             : LLAMA_FLASH_ATTN_TYPE_AUTO;
        else
            usage();
    }
    if (!verbose)
        llama_log_set(null_log, NULL);
    if (cpu_backend)
        ggml_backend_load(cpu_backend);
    else if (backend_dir)
        ggml_backend_load_all_from_path(backend_dir);
    else
        ggml_backend_load_all();
    llama_backend_init();

    int rc;
    if (!strcmp(cmd, "logits")) {
        if (!model || !tokens || n_pos || top < 0 || n_greedy < 0 || n_threads < 1)
            usage();
        rc = cmd_logits(model, tokens, top, n_greedy, n_threads, flash_attn, n_ctx, repack);
    } else if (!strcmp(cmd, "quantize")) {
        if (n_pos != 3 || n_threads < 1)
            usage();
        rc = cmd_quantize(pos[0], pos[1], pos[2], n_threads);
    } else {
        usage();
    }
    llama_backend_free();
    return rc;
}
