/* llamacpp_tokenize: llama.cpp's tokenizer as an oracle for the tests. Not
 * part of FreeToken: tools/gen_tokenizer_special_cases.py compiles it
 * against the llama.h of a llama.cpp source tree and links it to that
 * release's prebuilt libllama (node-llama-cpp's), once, to write the
 * expected ids that tests/unit/test_tokenizer_special.c compares with.
 *
 *   llamacpp_tokenize VOCAB.gguf specials
 *       every token llama.cpp treats as control or user-defined, after its
 *       load-time overrides: one line "ID ATTR TEXT-AS-HEX"
 *   llamacpp_tokenize VOCAB.gguf tokenize < CASES
 *       CASES: texts separated by NUL bytes; per text one line with the ids
 *       for parse_special = false, then one for parse_special = true
 *       (no BOS/EOS added).
 */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
    (void)level, (void)text, (void)ud;
}

static void tokenize(const struct llama_vocab *v, const char *text, int len, bool parse_special) {
    int cap = len * 2 + 16;
    llama_token *ids = malloc(sizeof(*ids) * (size_t)cap);
    int n = llama_tokenize(v, text, len, ids, cap, false, parse_special);
    if (n < 0) {
        cap = -n;
        ids = realloc(ids, sizeof(*ids) * (size_t)cap);
        n = llama_tokenize(v, text, len, ids, cap, false, parse_special);
    }
    for (int i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids);
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const struct llama_vocab *v = llama_model_get_vocab(m);
    if (!strcmp(argv[2], "specials")) {
        for (llama_token id = 0; id < llama_vocab_n_tokens(v); id++) {
            const int a = llama_vocab_get_attr(v, id);
            if (!(a & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED)))
                continue;
            printf("%d %d ", id, a);
            for (const unsigned char *p = (const unsigned char *)llama_vocab_get_text(v, id); *p; p++)
                printf("%02x", *p);
            printf("\n");
        }
    } else {
        size_t cap = 1 << 20, len = 0;
        char *buf = malloc(cap);
        size_t r;
        while ((r = fread(buf + len, 1, cap - len, stdin)) > 0) {
            len += r;
            if (len == cap)
                buf = realloc(buf, cap *= 2);
        }
        for (size_t at = 0; at < len;) {
            const char *end = memchr(buf + at, 0, len - at);
            const size_t n = end ? (size_t)(end - (buf + at)) : len - at;
            tokenize(v, buf + at, (int)n, false);
            tokenize(v, buf + at, (int)n, true);
            at += n + 1;
        }
        free(buf);
    }
    llama_model_free(m);
    return 0;
}
