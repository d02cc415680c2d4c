/* libFuzzer target for the grammar compilers and the matcher
 * (engine/text/grammar.c, json_schema.c, grammar_regex.c, grammar_match.c):
 * GBNF and JSON Schema text arrive from the network in `grammar`,
 * `response_format` and friends.
 *
 * Input layout: one byte picking the compiler (low two bits: 0 GBNF, 1 JSON
 * Schema, 2 a whole-text regex as guided_regex compiles it, 3 a JSON
 * Schema in a frame of repeated items as forced tool calls use it; bit 2
 * with 0 instead splits the source at newlines into guided_choice
 * strings), then the source. A grammar that compiles is then run: masks over
 * the llama-spm vocabulary (32k tokens, from ../shared) and byte steps driven
 * by the input, so the matcher's bounds (parses, stacks, states) are
 * exercised by whatever grammar the fuzzer finds. Must never crash, leak,
 * hang or trip a sanitizer; compile errors are fine but must say something.
 * Seeds: tests/fuzz/corpus/grammar. */
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/grammar.h"
#include "ft/tokenizer.h"
#include "fuzz_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static struct ft_tokenizer *g_tok;
static struct ft_grammar_vocab *g_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    ft_log_set_sink(fuzz_quiet_sink, NULL);
    char path[4096];
    g_tok = fuzz_load_vocab("fuzz_grammar", "ggml-vocab-llama-spm.gguf", path, sizeof(path));
    if (!g_tok) {
        /* the compilers still run; the matcher needs a vocabulary */
        fprintf(stderr, "fuzz_grammar: %s not found: matcher not exercised (set FT_SHARED_DIR)\n", path);
        return 0;
    }
    if (ft_grammar_vocab_new(g_tok, &g_vocab) != 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 16))
        return 0;
    const char *src = (const char *)data + 1;
    const size_t n = size - 1;
    struct ft_grammar *gr = NULL;
    char err[256] = "";
    int rc;
    static const struct ft_grammar_frame frame = {
        .prefix = "[C][", .open = "<c>\n", .close = "\n</c>", .sep = ", ", .suffix = "]", .max_items = 3};
    switch (data[0] & 3) {
    case 0:
        if (data[0] & 4) {
            /* choices: the source's lines (NUL-free copies) */
            char *copy = malloc(n + 1);
            const char **lines = malloc(sizeof(char *) * (n + 1));
            if (!copy || !lines)
                abort();
            memcpy(copy, src, n);
            copy[n] = '\0';
            size_t k = 0;
            for (char *p = copy, *nl; p; p = nl ? nl + 1 : NULL) {
                nl = strchr(p, '\n');
                if (nl)
                    *nl = '\0';
                lines[k++] = p;
            }
            rc = memchr(src, 0, n) ? FT_EINVAL : ft_grammar_from_choices(lines, k, &gr, err, sizeof(err));
            if (rc == FT_EINVAL && !err[0])
                snprintf(err, sizeof(err), "NUL in a choice");
            free(lines);
            free(copy);
        } else {
            rc = ft_grammar_from_gbnf(src, n, &gr, err, sizeof(err));
        }
        break;
    case 1: rc = ft_grammar_from_json_schema(src, n, &gr, err, sizeof(err)); break;
    case 2: rc = ft_grammar_from_regex(src, n, &gr, err, sizeof(err)); break;
    default: rc = ft_grammar_from_json_schema_frame(src, n, &frame, &gr, err, sizeof(err)); break;
    }
    if (rc) {
        if (gr || (rc != FT_ENOMEM && err[0] == '\0'))
            abort(); /* an error must leave nothing behind and say why */
        return 0;
    }
    if (!gr)
        abort();
    if (g_vocab) {
        struct ft_grammar_matcher *m = NULL;
        if (ft_grammar_matcher_new(gr, g_vocab, &m) == FT_OK) {
            /* walk: mask, then take the input's bytes as the "generated"
             * text while the grammar allows them */
            const uint32_t *bits;
            int32_t n_allowed;
            for (size_t i = 0; i < n && i < 48; i++) {
                if (i % 16 == 0 && ft_grammar_matcher_mask(m, &bits, &n_allowed) != FT_OK)
                    break;
                if (ft_grammar_matcher_accept_bytes(m, src + i, 1) != FT_OK)
                    break;
            }
            if (ft_grammar_matcher_done(m) && !ft_grammar_matcher_complete(m))
                abort();
            ft_grammar_matcher_free(m);
        }
    }
    ft_grammar_free(gr);
    return 0;
}
