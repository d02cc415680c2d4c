/* ft run: one generation on the terminal. The completion streams to stdout
 * as it is produced; the metrics block (the same fields the server returns,
 * docs/architecture.md, Metrics contract) goes to stderr at the end. */
#include "args.h"
#include "cli.h"
#include "common_model.h"
#include "ft/clock.h"
#include "ft/common.h"
#include "ft/generate.h"
#include "ft/metrics.h"
#include "ft/model.h"
#include "ft/sampler.h"
#include "ft/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUN_MAX_PROMPT_FILE (64u << 20)

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && (unsigned long)n <= RUN_MAX_PROMPT_FILE && fseek(f, 0, SEEK_SET) == 0 &&
            (buf = malloc((size_t)n + 1))) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                buf[n] = '\0';
            }
        } else if (n > 0 && (unsigned long)n > RUN_MAX_PROMPT_FILE) {
            fprintf(stderr, "ft run: %s: prompt file larger than %u MiB\n", path, RUN_MAX_PROMPT_FILE >> 20);
        }
    }
    fclose(f);
    return buf;
}

/* Streams each piece of released text to stdout as it is produced. */
static bool print_step(void *ud, const struct ft_gen *g) {
    (void)ud;
    if (g->out_len) {
        fwrite(g->out, 1, g->out_len, stdout);
        fflush(stdout);
    }
    return false;
}

int ft_cmd_run(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *prompt_file = NULL;
    int n_predict = 128, n_ctx_req = 0, n_batch = 512;
    struct ft_cli_model_flags mf = FT_CLI_MODEL_FLAGS_DEFAULT;
    bool ignore_eos = false, no_metrics = false;
    uint64_t seed_u = 0;
    bool seed_set = false;
    struct ft_str_list stops = {0};
    struct ft_sampler_params sp = ft_sampler_default_params();
    const char *seed_str = NULL;
    const struct ft_opt opts[] = {
        {"-m", "--model", FT_OPT_STR, &model, "FILE", "GGUF model (default: Gemma 3 270M from PyPI, or $FT_MODEL)"},
        {"-p", "--prompt", FT_OPT_STR, &prompt, "TEXT", "the prompt"},
        {"-f", "--file", FT_OPT_STR, &prompt_file, "FILE", "read the prompt from a file"},
        {"-n", "--n-predict", FT_OPT_INT, &n_predict, "N", "tokens to generate (default 128; -1: until EOS or context end)"},
        {"-c", "--ctx-size", FT_OPT_INT, &n_ctx_req, "N", "context size (default: the model's, capped by memory)"},
        FT_CLI_MODEL_OPTS(mf),
        {"-b", "--batch-size", FT_OPT_INT, &n_batch, "N", "prompt tokens per forward pass (default 512)"},
        {NULL, "--temp", FT_OPT_FLOAT, &sp.temperature, "T", "temperature (default 0.8; 0 = greedy)"},
        {NULL, "--top-k", FT_OPT_INT, &sp.top_k, "K", "top-k sampling (default 40; 0 = off)"},
        {NULL, "--top-p", FT_OPT_FLOAT, &sp.top_p, "P", "top-p sampling (default 0.95; 1 = off)"},
        {NULL, "--min-p", FT_OPT_FLOAT, &sp.min_p, "P", "min-p sampling (default 0.05; 0 = off)"},
        {NULL, "--repeat-penalty", FT_OPT_FLOAT, &sp.repeat_penalty, "R", "repetition penalty (default 1.0 = off)"},
        {NULL, "--repeat-last-n", FT_OPT_INT, &sp.repeat_last_n, "N", "tokens the penalties look back (default 64; -1 = all)"},
        {NULL, "--presence-penalty", FT_OPT_FLOAT, &sp.presence_penalty, "P", "presence penalty (default 0)"},
        {NULL, "--frequency-penalty", FT_OPT_FLOAT, &sp.frequency_penalty, "F", "frequency penalty (default 0)"},
        {"-s", "--seed", FT_OPT_STR, &seed_str, "S", "random seed (default: random; printed with the metrics)"},
        {NULL, "--stop", FT_OPT_STR_LIST, &stops, "STR", "stop when this text is generated (repeatable)"},
        {NULL, "--ignore-eos", FT_OPT_FLAG, &ignore_eos, NULL, "keep generating after an end-of-generation token"},
        {NULL, "--no-metrics", FT_OPT_FLAG, &no_metrics, NULL, "do not print the metrics block"},
    };
    const struct ft_cmd_spec spec = {
        "run", "ft run [-m MODEL.gguf] -p PROMPT [-n N] [sampling options]",
        "Generates a completion of the prompt (no chat template), streaming it to stdout, and prints\n"
        "prompt tokens, generated tokens, TTFT, prefill and decode tokens/s to stderr.\n"
        "The same seed and settings give the same text.",
        opts, (int)FT_ARRAY_LEN(opts), 0};
    int code = ft_args_parse_opts(&spec, argc, argv);
    if (code != FT_ARGS_GO_ON)
        return code;
    if (seed_str) {
        char *end;
        unsigned long long v = strtoull(seed_str, &end, 10);
        if (end == seed_str || *end || seed_str[0] == '-') {
            fprintf(stderr, "ft run: --seed expects a non-negative integer, got '%s'\n", seed_str);
            return 2;
        }
        seed_u = v;
        seed_set = true;
    }
    if (!seed_set) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed_u = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    sp.seed = seed_u;
    if (!!prompt + !!prompt_file != 1) {
        fprintf(stderr, "ft run: give the prompt with exactly one of -p TEXT or -f FILE\n");
        return 2;
    }
    if (n_predict < -1 || n_predict == 0) {
        fprintf(stderr, "ft run: -n must be positive or -1 (got %d)\n", n_predict);
        return 2;
    }
    if (n_batch < 1 || n_batch > 4096) {
        fprintf(stderr, "ft run: -b must be in 1..4096 (got %d)\n", n_batch);
        return 2;
    }
    struct ft_model_params mp;
    if (ft_cli_model_flags_params("run", &mf, &mp))
        return 2;
    if (n_ctx_req < 0) {
        fprintf(stderr, "ft run: -c must be positive (got %d)\n", n_ctx_req);
        return 2;
    }
    ft_clear_error();
    if (ft_sampler_params_check(&sp)) {
        fprintf(stderr, "ft run: %s\n", ft_last_error());
        return 2;
    }
    if (!model && !(model = ft_cli_default_model("run")))
        return 2;

    ft_clock_init();
    const uint64_t received = ft_clock_ticks();

    char *file_text = NULL;
    struct ft_model *m = NULL;
    struct ft_kv_cache *kv = NULL;
    struct ft_gen gen;
    memset(&gen, 0, sizeof(gen));
    int32_t *ids = NULL;
    float *logits = NULL;
    int status = 1;
    int rc;

    if (prompt_file && !(prompt = file_text = read_file(prompt_file)))
        goto done;
    if ((rc = ft_model_load(model, &mp, &m))) {
        ft_cli_error("run", rc, model);
        goto done;
    }
    const struct ft_tokenizer *tok = ft_model_tokenizer(m);
    const struct ft_hparams *hp = ft_model_hparams(m);
    size_t n_ids = 0;
    if ((rc = ft_tokenize(tok, prompt, strlen(prompt), true, true, &ids, &n_ids))) {
        ft_cli_error("run", rc, "tokenizing the prompt");
        goto done;
    }
    if (n_ids == 0) {
        fprintf(stderr, "ft run: the prompt is empty\n");
        status = 2;
        goto done;
    }
    int32_t n_ctx = ft_cli_choose_ctx("run", m, n_ctx_req);
    if (n_ctx == 0)
        goto done;
    if ((int64_t)n_ids >= n_ctx) {
        fprintf(stderr, "ft run: the prompt has %zu tokens but the context holds %d (raise -c)\n", n_ids, n_ctx);
        status = 2;
        goto done;
    }
    if ((rc = ft_kv_cache_new(m, n_ctx, 1, &kv))) {
        ft_cli_error("run", rc, "allocating the KV cache");
        goto done;
    }
    const struct ft_gen_params gp = {
        .sampling = sp, .max_tokens = n_predict, .stops = stops.items, .n_stops = stops.n, .ignore_eos = ignore_eos};
    if ((rc = ft_gen_init(&gen, tok, hp->n_vocab, n_ctx, &gp))) {
        ft_cli_error("run", rc, "sampler");
        goto done;
    }
    if (!(logits = malloc(sizeof(float) * (size_t)hp->n_vocab))) {
        fprintf(stderr, "ft run: out of memory\n");
        goto done;
    }
    ft_gen_accept_prompt(&gen, ids, (int32_t)n_ids);
    gen.timing.received = received;
    gen.timing.admitted = ft_clock_ticks();
    if ((rc = ft_generate(m, kv, 0, ids, (int32_t)n_ids, n_batch, logits, &gen, print_step, NULL))) {
        ft_cli_error("run", rc, "generation");
        goto done;
    }
    printf("\n");
    fflush(stdout);
    gen.timing.done = ft_clock_ticks();

    if (!no_metrics) {
        struct ft_request_metrics met;
        ft_metrics_compute(&gen.timing, &met);
        char block[1024];
        ft_metrics_format_text(&met, block, sizeof(block));
        fprintf(stderr, "\n%sseed:               %llu\n", block, (unsigned long long)seed_u);
    }
    status = 0;
done:
    ft_gen_free(&gen);
    free(logits);
    free(ids);
    free(file_text);
    ft_kv_cache_free(kv);
    ft_model_free(m);
    return status;
}
