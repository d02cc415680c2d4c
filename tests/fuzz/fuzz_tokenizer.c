/* libFuzzer target for the tokenizers and the streaming detokenizer: text
 * comes from the network (prompts, messages), so tokenizing any bytes must
 * be safe, and detokenizing any ids must never emit broken UTF-8.
 *
 * Input layout: byte 0 picks the vocabulary (the five of tests/data/vocab),
 * byte 1 the flags (bit 0 add_special, bit 1 parse_special, bit 2 render
 * special tokens when decoding); the rest is the text. The text's token ids
 * are decoded again, and the same bytes reinterpreted as little-endian ids
 * (folded into the vocabulary) go through the streaming detokenizer.
 *
 * Checked properties (abort on violation, so the fuzzer reports them):
 *   - valid UTF-8 tokenizes without error, invalid UTF-8 is FT_EINVAL;
 *   - every id produced is inside the vocabulary;
 *   - byte-level BPE vocabularies round-trip plain text exactly;
 *   - everything the streaming detokenizer emits is valid UTF-8.
 * Seeds: tests/fuzz/corpus/tokenizer.
 */
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/tokenizer.h"
#include "fuzz_vocab.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_load_vocabs("fuzz_tokenizer");
    return 0;
}

/* Push ids through the streaming detokenizer; all output must be valid UTF-8. */
static void stream_decode(const struct ft_tokenizer *t, const int32_t *ids, size_t n, bool render_special) {
    struct ft_detok d;
    ft_detok_init(&d, t, render_special);
    char buf[1024];
    for (size_t i = 0; i < n; i++) {
        const int w = ft_detok_push(&d, ids[i], buf, sizeof(buf));
        require(w >= 0, "ft_detok_push failed with a 1 KiB buffer");
        require(ft_utf8_valid(buf, (size_t)w), "streamed piece is not valid UTF-8");
    }
    const int w = ft_detok_flush(&d, buf, sizeof(buf));
    require(w >= 0, "ft_detok_flush failed");
    require(ft_utf8_valid(buf, (size_t)w), "flushed bytes are not valid UTF-8");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2 || g_n_loaded != N_VOCABS)
        return 0;
    const size_t which = data[0] % N_VOCABS;
    const struct ft_tokenizer *t = g_tok[which];
    const bool add_special = data[1] & 1, parse_special = data[1] & 2, render_special = data[1] & 4;
    const char *text = (const char *)data + 2;
    const size_t len = size - 2;

    int32_t *ids = NULL;
    size_t n = 0;
    const int rc = ft_tokenize(t, text, len, add_special, parse_special, &ids, &n);
    const bool valid = ft_utf8_valid(text, len) && !memchr(text, 0, len);
    if (!valid) {
        free(ids);
        return 0;
    }
    require(rc == 0, "valid UTF-8 failed to tokenize");
    const int32_t n_vocab = ft_tokenizer_n_vocab(t);
    for (size_t i = 0; i < n; i++)
        require(ids[i] >= 0 && ids[i] < n_vocab, "token id outside the vocabulary");

    if (g_vocab_files[which].byte_level && !add_special && !parse_special) {
        char *back = NULL;
        size_t back_len = 0;
        require(ft_detokenize(t, ids, n, false, &back, &back_len) == 0, "detokenize failed");
        require(back_len == len && memcmp(back, text, len) == 0, "byte-level BPE did not round-trip");
        free(back);
    }
    stream_decode(t, ids, n, render_special);
    free(ids);

    /* The input bytes as arbitrary ids: decoding must stay valid UTF-8. */
    const size_t n_raw = len / 4;
    int32_t *raw = malloc((n_raw ? n_raw : 1) * sizeof(int32_t));
    require(raw != NULL, "out of memory");
    for (size_t i = 0; i < n_raw; i++) {
        uint32_t v;
        memcpy(&v, text + 4 * i, 4);
        raw[i] = (int32_t)(v % (uint32_t)n_vocab);
    }
    stream_decode(t, raw, n_raw, render_special);
    free(raw);
    return 0;
}
