/* The five tokenizer vocabularies of tests/data/vocab, loaded once by the
 * fuzz targets that need real vocabularies (fuzz_tokenizer,
 * fuzz_stream_text). FT_SHARED_DIR overrides the folder (it must hold
 * vocab/); without the files a target runs but checks nothing. */
#ifndef FT_FUZZ_VOCAB_H
#define FT_FUZZ_VOCAB_H

#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/tokenizer.h"
#include "fuzz_common.h"

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
    for (size_t i = 0; i < N_VOCABS; i++) {
        char path[4096];
        if (!(g_tok[i] = fuzz_load_vocab(target, g_vocab_files[i].file, path, sizeof(path)))) {
            fprintf(stderr, "%s: SKIPPED: %s not found (FT_SHARED_DIR needs vocab/)\n", target, path);
            return;
        }
        g_n_loaded++;
    }
}

#endif
