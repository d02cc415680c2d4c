/* The five tokenizer vocabularies of tests/data/vocab, loaded once by the
 * fuzz targets that need real vocabularies (fuzz_tokenizer,
 * fuzz_stream_text). FT_SHARED_DIR overrides the folder (it must hold
 * vocab/); without the files a target runs but checks nothing. */
#ifndef FT_FUZZ_VOCAB_H
#define FT_FUZZ_VOCAB_H

#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/tokenizer.h"
#include "fuzz_quiet.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static const struct {
    const char *file;
    bool byte_level; /* byte-level BPE: decode(encode(text)) == text */
} g_vocab_files[] = {
    {"ggml-vocab-llama-spm.gguf", false},
    {"ggml-vocab-phi-3.gguf", false},
    {"ggml-vocab-llama-bpe.gguf", true},
    {"ggml-vocab-qwen2.gguf", true},
    {"ggml-vocab-gpt-2.gguf", true},
};
#define N_VOCABS (sizeof(g_vocab_files) / sizeof(g_vocab_files[0]))

static struct ft_tokenizer *g_tok[N_VOCABS];
static size_t g_n_loaded;

/* Quiets the log and loads g_tok[]; g_n_loaded == N_VOCABS when all are there. */
static inline void fuzz_load_vocabs(const char *target) {
    ft_log_set_sink(fuzz_quiet_sink, NULL);
    const char *shared = getenv("FT_SHARED_DIR");
    if (!shared || !*shared)
        shared = FT_SHARED_DIR_DEFAULT;
    for (size_t i = 0; i < N_VOCABS; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/vocab/%s", shared, g_vocab_files[i].file);
        struct ft_gguf *g = NULL;
        if (ft_gguf_open(path, &g) != 0) {
            fprintf(stderr, "%s: SKIPPED: %s not found (FT_SHARED_DIR needs vocab/)\n", target, path);
            return;
        }
        if (ft_tokenizer_load(g, &g_tok[i]) != 0) {
            fprintf(stderr, "%s: %s: %s\n", target, path, ft_last_error());
            exit(1);
        }
        ft_gguf_close(g);
        g_n_loaded++;
    }
}

#endif
