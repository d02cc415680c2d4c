/* ft tokenize: UTF-8 text on stdin -> token ids on stdout. Works on
 * vocabulary-only GGUF files, so it loads only the tokenizer. */
#include "args.h"
#include "cli.h"
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>

#define FT_TOKENIZE_MAX_INPUT (256u << 20) /* 256 MiB of text */

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0)
            break;
        if (n == cap) {
            if (cap >= FT_TOKENIZE_MAX_INPUT) {
                fprintf(stderr, "ft tokenize: input larger than %u MiB\n", FT_TOKENIZE_MAX_INPUT >> 20);
                free(buf);
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (buf && ferror(stdin)) {
        fprintf(stderr, "ft tokenize: error reading stdin\n");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int ft_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL;
    bool add_special = false, parse_special = false, pieces = false;
    const struct ft_opt opts[] = {
        {"-m", "--model", FT_OPT_STR, &model, "FILE", "GGUF model or vocabulary file (default: the default model)"},
        {NULL, "--add-special", FT_OPT_FLAG, &add_special, NULL, "add BOS/EOS as the vocabulary asks"},
        {NULL, "--parse-special", FT_OPT_FLAG, &parse_special, NULL,
         "turn control-token text such as <start_of_turn> into its id"},
        {NULL, "--pieces", FT_OPT_FLAG, &pieces, NULL, "print one 'id<TAB>piece' line per token"},
    };
    const struct ft_cmd_spec spec = {"tokenize", "ft tokenize -m MODEL.gguf [--add-special] < text.txt",
                                     "Reads UTF-8 text on stdin and prints its token ids separated by spaces.",
                                     opts, (int)FT_ARRAY_LEN(opts), 0};
    int code = ft_args_parse_opts(&spec, argc, argv);
    if (code != FT_ARGS_GO_ON)
        return code;
    if (!model && !(model = ft_cli_default_model("tokenize")))
        return 2;

    struct ft_gguf *g = NULL;
    struct ft_tokenizer *tok = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    int status = 1;
    int rc = ft_gguf_open(model, &g);
    if (rc) {
        ft_cli_error("tokenize", rc, model);
        goto done;
    }
    rc = ft_tokenizer_load(g, &tok);
    if (rc) {
        ft_cli_error("tokenize", rc, "loading the tokenizer");
        goto done;
    }
    size_t len = 0;
    if (!(text = read_stdin(&len)))
        goto done;
    size_t n = 0;
    rc = ft_tokenize(tok, text, len, add_special, parse_special, &ids, &n);
    if (rc) {
        ft_cli_error("tokenize", rc, "tokenizing stdin");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (pieces) {
            struct ft_str p = ft_tokenizer_piece_raw(tok, ids[i]);
            printf("%d\t%.*s\n", ids[i], (int)p.len, p.s);
        } else {
            printf(i ? " %d" : "%d", ids[i]);
        }
    }
    if (!pieces)
        printf("\n");
    status = 0;
done:
    free(ids);
    free(text);
    ft_tokenizer_free(tok);
    ft_gguf_close(g);
    return status;
}
