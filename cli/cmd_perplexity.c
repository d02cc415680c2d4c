/* ft perplexity: perplexity of a text under a model, and KL divergence
 * against a base model or its saved log-probabilities, printed as
 * llama.cpp's llama-perplexity prints them (engine/perplexity*.c). */
#include "cmd_perplexity.h"

#include "args.h"
#include "cli.h"
#include "common_model.h"
#include "ft/common.h"
#include "ft/model.h"
#include "ft/perplexity.h"
#include "ft/tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_TEXT_BYTES ((size_t)256 << 20)

int64_t ft_cli_tokenize_file(const char *cmd, const struct ft_model *m, const char *path, int32_t **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "ft %s: %s: %s\n", cmd, path, f ? "not a regular file" : strerror(errno));
        if (f)
            fclose(f);
        return -1;
    }
    if ((size_t)st.st_size > MAX_TEXT_BYTES) {
        fprintf(stderr, "ft %s: %s: %lld bytes is more than the %zu MiB a text may have\n", cmd, path,
                (long long)st.st_size, MAX_TEXT_BYTES >> 20);
        fclose(f);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    char *text = malloc(n + 1);
    if (!text || fread(text, 1, n, f) != n) {
        fprintf(stderr, "ft %s: %s: %s\n", cmd, path, text ? "read failed" : "out of memory");
        free(text);
        fclose(f);
        return -1;
    }
    fclose(f);
    text[n] = '\0';
    size_t n_tok = 0;
    int rc = ft_tokenize(ft_model_tokenizer(m), text, n, true, false, out, &n_tok);
    free(text);
    if (rc) {
        fprintf(stderr, "ft %s: %s: %s\n", cmd, path,
                rc == FT_EINVAL ? "not valid UTF-8 text" : ft_last_error());
        return -1;
    }
    return (int64_t)n_tok;
}

static void print_quantiles(FILE *f, const char *what, const struct ft_ppl_quantiles *q, double scale,
                            const char *unit, bool with_quartiles) {
    const struct {
        const char *label;
        double v;
        bool quartile;
    } rows[] = {{"Maximum", q->max, false}, {"99.9%  ", q->p99_9, false}, {"99.0%  ", q->p99, false},
                {"95.0%  ", q->p95, false}, {"90.0%  ", q->p90, false},   {"75.0%  ", q->p75, true},
                {"Median ", q->median, false}, {"25.0%  ", q->p25, true}, {"10.0%  ", q->p10, false},
                {" 5.0%  ", q->p5, false},  {" 1.0%  ", q->p1, false},    {" 0.1%  ", q->p0_1, false},
                {"Minimum", q->min, false}};
    for (size_t i = 0; i < FT_ARRAY_LEN(rows); i++)
        if (with_quartiles || !rows[i].quartile)
            fprintf(f, "%s %s: %10.6f%s\n", rows[i].label, what, rows[i].v * scale, unit);
}

void ft_cli_print_ppl_stats(FILE *f, const struct ft_ppl_stats *s) {
    fprintf(f, "====== Perplexity statistics ======\n");
    fprintf(f, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", s->ppl, s->ppl_err);
    fprintf(f, "Mean PPL(base)                : %10.6f ± %10.6f\n", s->ppl_base, s->ppl_base_err);
    fprintf(f, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * s->cor_ln_ppl);
    fprintf(f, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", s->ln_ratio, s->ln_ratio_err);
    fprintf(f, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", s->ratio, s->ratio_err);
    fprintf(f, "Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", s->diff, s->diff_err);
    fprintf(f, "\n====== KL divergence statistics ======\n");
    fprintf(f, "Mean    KLD: %10.6f ± %10.6f\n", s->kld, s->kld_err);
    print_quantiles(f, "KLD", &s->kld_q, 1.0, "", false);
    fprintf(f, "\n====== Token probability statistics ======\n");
    fprintf(f, "Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * s->dp, 100.0 * s->dp_err);
    print_quantiles(f, "Δp", &s->dp_q, 100.0, "%", true);
    fprintf(f, "RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * s->dp_rms, 100.0 * s->dp_rms_err);
    fprintf(f, "Same top p: %6.3f ± %5.3f %%\n", 100.0 * s->same_top, 100.0 * s->same_top_err);
}

struct run_state {
    bool with_base;
    double t0;
    bool eta_shown;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_chunk(void *ud, int32_t chunk, int32_t n_chunk, const struct ft_ppl_acc *acc) {
    struct run_state *s = ud;
    if (!s->eta_shown) {
        s->eta_shown = true;
        double per = now_s() - s->t0;
        fprintf(stderr, "perplexity: %.2f seconds per window, ETA %.2f minutes\n", per / chunk,
                per / chunk * (n_chunk - chunk) / 60.0);
        if (s->with_base)
            printf("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
                   "Δp RMS            Same top p\n");
    }
    struct ft_ppl_stats st;
    ft_ppl_stats_compute(acc, s->with_base, NULL, NULL, 0, &st);
    if (!s->with_base) {
        printf("[%d]%.4f,", chunk, st.ppl);
    } else {
        printf("%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    %6.3f ± %6.3f %%\n",
               chunk, st.ppl, st.ppl_err, st.ln_ratio, st.ln_ratio_err, st.kld, st.kld_err, 100.0 * st.dp_rms,
               100.0 * st.dp_rms_err, 100.0 * st.same_top, 100.0 * st.same_top_err);
    }
    fflush(stdout);
}

int ft_cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *kld_base = NULL, *save = NULL, *kld_file = NULL;
    int n_ctx = 0, n_batch = 0, threads = 0, chunks = 0;
    bool f16_bf16 = false;
    const struct ft_opt opts[] = {
        {"-m", "--model", FT_OPT_STR, &model, "FILE", "GGUF model (default: the default model)"},
        {"-f", "--file", FT_OPT_STR, &text, "TEXT", "UTF-8 text to score (e.g. data/jargon-4.4.7-prose.txt)"},
        {"-c", "--ctx-size", FT_OPT_INT, &n_ctx, "N", "window length in tokens (default 512; with --kld: the file's)"},
        {"-b", "--batch-size", FT_OPT_INT, &n_batch, "N",
         "tokens per forward pass (default: one window; a multiple of -c runs windows side by side)"},
        {"-t", "--threads", FT_OPT_INT, &threads, "N", "threads (default: one per CPU)"},
        {NULL, "--chunks", FT_OPT_INT, &chunks, "N", "score at most N windows (default: all)"},
        {NULL, "--kld-base", FT_OPT_STR, &kld_base, "BASE.gguf",
         "also compare with this model, evaluated alongside (exact KL divergence)"},
        {NULL, "--save-logits", FT_OPT_STR, &save, "FILE",
         "save this model's log-probabilities for later --kld runs (llama.cpp's --kl-divergence-base format)"},
        {NULL, "--kld", FT_OPT_STR, &kld_file, "FILE",
         "compare with log-probabilities saved by --save-logits (the text and -c come from FILE)"},
        {NULL, "--f16-bf16", FT_OPT_FLAG, &f16_bf16, NULL, FT_CLI_HELP_F16_BF16},
    };
    const struct ft_cmd_spec spec = {
        "perplexity", "ft perplexity -m MODEL.gguf -f TEXT [-c 512] [--kld-base BASE.gguf | --save-logits FILE | --kld FILE]",
        "Perplexity of TEXT as llama.cpp's llama-perplexity computes it: the text is cut into windows of -c\n"
        "tokens (each starting with BOS), and the second half of every window is scored. Prints the running\n"
        "PPL per window and the final PPL with its standard error. With a base (--kld-base, or --kld with\n"
        "log-probabilities saved from the base by --save-logits): KL divergence, top-1 agreement ('same top'),\n"
        "the change of the correct token's probability (Δp) and PPL ratios, as llama-perplexity prints them.",
        opts, (int)FT_ARRAY_LEN(opts), 0};
    int code = ft_args_parse_opts(&spec, argc, argv);
    if (code != FT_ARGS_GO_ON)
        return code;
    ft_cli_f16_bf16("perplexity", f16_bf16);
    if (kld_base && kld_file) {
        fprintf(stderr, "ft perplexity: --kld-base and --kld are alternatives: give one\n");
        return 2;
    }
    if (!text && !kld_file) {
        fprintf(stderr, "ft perplexity: -f TEXT is required (the repository ships data/jargon-4.4.7-prose.txt)\n");
        return 2;
    }
    if (n_ctx < 0 || n_batch < 0 || threads < 0 || chunks < 0) {
        fprintf(stderr, "ft perplexity: -c, -b, -t and --chunks take positive numbers\n");
        return 2;
    }
    if (kld_file && text)
        fprintf(stderr, "ft perplexity: note: -f is not used with --kld (the tokens come from %s)\n", kld_file);
    if (!kld_file && n_ctx == 0)
        n_ctx = 512;
    if (!model && !(model = ft_cli_default_model("perplexity")))
        return 2;

    struct ft_model *m = NULL, *base = NULL;
    struct ft_logprob_file *lf = NULL;
    int32_t *tokens = NULL;
    struct ft_ppl_result res = {0};
    int status = 1, rc;
    struct ft_model_params mp = {.n_threads = threads};
    if ((rc = ft_model_load(model, &mp, &m))) {
        ft_cli_error("perplexity", rc, model);
        goto done;
    }
    if (kld_base && (rc = ft_model_load(kld_base, &mp, &base))) {
        ft_cli_error("perplexity", rc, kld_base);
        goto done;
    }
    if (kld_file && (rc = ft_logprob_file_open(kld_file, &lf))) {
        ft_cli_error("perplexity", rc, kld_file);
        goto done;
    }
    int64_t n_tokens = 0;
    if (!kld_file) {
        n_tokens = ft_cli_tokenize_file("perplexity", m, text, &tokens);
        if (n_tokens < 0)
            goto done;
        if (base) {
            int32_t *bt = NULL;
            int64_t nb = ft_cli_tokenize_file("perplexity", base, text, &bt);
            bool same = nb == n_tokens && !memcmp(bt, tokens, sizeof(int32_t) * (size_t)n_tokens);
            free(bt);
            if (nb >= 0 && !same)
                fprintf(stderr, "ft perplexity: %s and %s tokenize the text differently: they cannot be compared\n",
                        model, kld_base);
            if (!same)
                goto done;
        }
    }
    const struct ft_hparams *hp = ft_model_hparams(m);
    int32_t eff_ctx = kld_file ? ft_logprob_file_n_ctx(lf) : n_ctx;
    if (eff_ctx > hp->n_ctx_train)
        fprintf(stderr, "ft perplexity: warning: the model was trained on %d tokens of context, -c is %d\n",
                hp->n_ctx_train, eff_ctx);
    if (!kld_file)
        fprintf(stderr, "perplexity: %s: %lld tokens, %lld windows of %d (%d scored per window)\n", text,
                (long long)n_tokens, (long long)(n_tokens / eff_ctx), eff_ctx, eff_ctx - 1 - eff_ctx / 2);
    else
        fprintf(stderr, "perplexity: %s: %d windows of %d (%d scored per window)\n", kld_file,
                ft_logprob_file_n_chunk(lf), eff_ctx, eff_ctx - 1 - eff_ctx / 2);

    struct run_state rs = {.with_base = base || lf, .t0 = now_s()};
    struct ft_ppl_inputs in = {.model = m, .tokens = tokens, .n_tokens = (size_t)n_tokens, .base_model = base,
                               .base_file = lf, .save_path = save, .on_chunk = on_chunk, .ud = &rs};
    struct ft_ppl_config cfg = {.n_ctx = n_ctx, .n_batch = n_batch, .n_chunks = chunks,
                                .n_threads = threads};
    rc = ft_perplexity_eval(&in, &cfg, &res);
    printf("\n");
    fflush(stdout);
    if (rc) {
        ft_cli_error("perplexity", rc, model);
        goto done;
    }
    struct ft_ppl_stats st;
    ft_ppl_stats_compute(&res.acc, rs.with_base, res.kld_values, res.p_diff_values, (size_t)res.acc.count, &st);
    printf("Final estimate: PPL = %.4f +/- %.5f (%lld tokens scored)\n", st.ppl, st.ppl_err,
           (long long)res.acc.count);
    if (rs.with_base) {
        printf("\n");
        ft_cli_print_ppl_stats(stdout, &st);
    }
    if (save)
        fprintf(stderr, "perplexity: saved log-probabilities to %s\n", save);
    status = 0;
done:
    ft_ppl_result_free(&res);
    free(tokens);
    ft_logprob_file_close(lf);
    ft_model_free(base);
    ft_model_free(m);
    return status;
}
