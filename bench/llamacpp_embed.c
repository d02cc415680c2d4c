/* llamacpp_embed: llama.cpp's embeddings of a few texts, the oracle for
 * FreeToken's /v1/embeddings. Not part of FreeToken:
 * tests/data/embeddings/make_llamacpp_embeddings.py compiles it against
 * the llama.h of the llama.cpp release node-llama-cpp ships and links it to
 * that release's prebuilt libllama, as bench/compare_llamacpp.py does.
 *
 * Each line of TEXTS is one input (no escapes; the script writes plain
 * lines). Every input is tokenized as llama-server tokenizes an embeddings
 * input (llama_tokenize with add_special and parse_special: BOS when the
 * vocabulary asks for it), evaluated alone in one batch from position 0
 * on a context made with embeddings on and the given pooling
 * (llama_set_embeddings semantics: the final hidden states after the
 * output norm, pooled per sequence), and llama_get_embeddings_seq's vector
 * is printed as it comes: pooled, not normalized (llama-server normalizes
 * afterwards; the test does the same).
 *
 * Prints one JSON object: {"pooling", "n_embd", "inputs": [{"text",
 * "tokens", "embedding"}]}.
 *
 * usage: llamacpp_embed -m MODEL.gguf -f TEXTS [--pooling mean|cls|last] [-t 2] [--backend-dir DIR]
 */
#include "llama.h"

#include "ggml-backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void null_log(enum ggml_log_level level, const char *text, void *ud) {
    (void)level;
    (void)text;
    (void)ud;
}

static void print_json_string(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

static int usage(void) {
    fprintf(stderr, "usage: llamacpp_embed -m MODEL.gguf -f TEXTS [--pooling mean|cls|last] [-t 2] "
                    "[--backend-dir DIR]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *model = NULL, *texts = NULL, *backend_dir = NULL, *pooling = "mean";
    int n_threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            return usage();
        const char *v = argv[++i];
        if (!strcmp(a, "-m"))
            model = v;
        else if (!strcmp(a, "-f"))
            texts = v;
        else if (!strcmp(a, "--pooling"))
            pooling = v;
        else if (!strcmp(a, "-t"))
            n_threads = atoi(v);
        else if (!strcmp(a, "--backend-dir"))
            backend_dir = v;
        else
            return usage();
    }
    enum llama_pooling_type pt = !strcmp(pooling, "mean") ? LLAMA_POOLING_TYPE_MEAN
                                 : !strcmp(pooling, "cls") ? LLAMA_POOLING_TYPE_CLS
                                 : !strcmp(pooling, "last") ? LLAMA_POOLING_TYPE_LAST
                                                            : LLAMA_POOLING_TYPE_UNSPECIFIED;
    if (!model || !texts || pt == LLAMA_POOLING_TYPE_UNSPECIFIED || n_threads < 1)
        return usage();

    llama_log_set(null_log, NULL);
    if (backend_dir)
        ggml_backend_load_all_from_path(backend_dir);
    else
        ggml_backend_load_all();
    llama_backend_init();
    struct llama_model *lm = llama_model_load_from_file(model, llama_model_default_params());
    if (!lm) {
        fprintf(stderr, "llamacpp_embed: cannot load %s\n", model);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(lm);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.embeddings = true;
    cp.pooling_type = pt;
    struct llama_context *ctx = llama_init_from_model(lm, cp);
    FILE *f = fopen(texts, "r");
    if (!ctx || !f) {
        fprintf(stderr, "llamacpp_embed: cannot make a context or open %s\n", texts);
        return 1;
    }
    const int n_embd = llama_model_n_embd(lm);
    printf("{\"pooling\": \"%s\", \"n_embd\": %d, \"inputs\": [", pooling, n_embd);
    char line[4096];
    llama_token tokens[512];
    int n_done = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        const int n = llama_tokenize(vocab, line, (int32_t)strlen(line), tokens, 512, true, true);
        if (n <= 0) {
            fprintf(stderr, "llamacpp_embed: cannot tokenize '%s'\n", line);
            return 1;
        }
        llama_memory_clear(llama_get_memory(ctx), true);
        struct llama_batch b = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; i++) {
            b.token[i] = tokens[i];
            b.pos[i] = i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = 1;
        }
        b.n_tokens = n;
        if (llama_decode(ctx, b) != 0) {
            fprintf(stderr, "llamacpp_embed: llama_decode failed\n");
            return 1;
        }
        const float *e = llama_get_embeddings_seq(ctx, 0);
        if (!e) {
            fprintf(stderr, "llamacpp_embed: no pooled embedding\n");
            return 1;
        }
        printf("%s\n  {\"text\": ", n_done++ ? "," : "");
        print_json_string(line);
        printf(", \"tokens\": [");
        for (int i = 0; i < n; i++)
            printf("%s%d", i ? ", " : "", tokens[i]);
        printf("], \"embedding\": [");
        for (int i = 0; i < n_embd; i++)
            printf("%s%.9g", i ? ", " : "", e[i]);
        printf("]}");
        llama_batch_free(b);
    }
    printf("\n]}\n");
    fclose(f);
    llama_free(ctx);
    llama_model_free(lm);
    llama_backend_free();
    return 0;
}
