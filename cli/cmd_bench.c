/* ft bench: prefill and decode throughput, measured the way llama-bench
 * measures it (tools/llama-bench/llama-bench.cpp), so the numbers of the two
 * engines compare directly:
 *
 *   ppN  N prompt tokens evaluated in batches of -b (default 2048, so one
 *        batch for the usual N), logits for the last token only; the first
 *        token is BOS when the vocabulary adds one, the rest random ids.
 *   tgN  N tokens evaluated one at a time from an empty cache (BOS first),
 *        each forward pass producing logits, the next id random.
 *   "xP" (-np P, as llama-batched-bench's decode): P sequences decode
 *        together, one token each per forward pass with logits for all P
 *        (what `ft serve` does for P requests); tokens/s counts all P.
 *   "@ dD" (-d D, llama-bench's n_depth): the test runs after D tokens are
 *        already in the KV cache (a prompt of D, evaluated untimed once per
 *        test; each repetition truncates the cache back to D), so decode
 *        and prefill at a long context can be measured.
 *
 * Each test runs once as a warm-up (the whole ppN; one token for tgN), then
 * -r times from a KV cache sized n_depth + n_prompt + n_gen holding the
 * depth's tokens; every repetition gives tokens/s = (n_prompt + n_gen) /
 * time (the depth is not counted), reported as mean ± sample standard
 * deviation. Token ids come from a seeded generator (--seed), so
 * runs evaluate the same tokens. Models are loaded once per kernel level and
 * thread count (the thread pool belongs to the model, and weights are
 * repacked at load for the level's kernels). With --isa LIST|all the same
 * tests run once per level, rows labelled by level, so a higher level
 * slower than a lower one shows in one table. */
#include "args.h"
#include "bench_report.h"
#include "cli.h"
#include "common_model.h"
#include "ft/common.h"
#include "ft/cpu.h"
#include "ft/model.h"
#include "ft/threadpool.h"
#include "ft/topology.h"
#include "ft/types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_LIST 64
#define BENCH_MAX_THREADS 1024
#define BENCH_MAX_TOKENS (1 << 20)
#define BENCH_MAX_REPS 1000
#define BENCH_MAX_PARALLEL 256

/* ---- NUMA ------------------------------------------------------------------------ */

/* --numa MODE / --numa-node N: the placement modes of docs/architecture.md
 * (Thread pool and NUMA), parsed as every model command parses them
 * (cli/common_model.c). */
static int bench_set_numa(const char *mode, int numa_node, struct ft_model_params *mp) {
    return ft_cli_model_params("bench", 0, mode, numa_node, mp);
}

/* ---- running one test ---------------------------------------------------------- */

struct bench_run {
    struct ft_model *m;
    struct ft_kv_cache *kv;
    int32_t n_vocab, bos;
    bool add_bos;
    int n_batch;
    uint64_t rng;
    int32_t *tokens, *pos, *seq; /* n_batch entries */
    bool *want;                  /* n_batch entries, all true */
    float *logits;               /* n_vocab x the largest -np */
};

static int32_t random_token(struct bench_run *b) {
    uint64_t z = (b->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (int32_t)(z % (uint64_t)b->n_vocab);
}

/* llama-bench's test_prompt: n_prompt tokens of sequence seq in batches of
 * n_batch, from position start (BOS first at position 0). */
static int run_prompt(struct bench_run *b, int32_t seq, int start, int n_prompt) {
    for (int done = 0; done < n_prompt;) {
        const int n = FT_MIN(n_prompt - done, b->n_batch);
        for (int i = 0; i < n; i++) {
            b->pos[i] = start + done + i;
            b->tokens[i] = (b->pos[i] == 0 && b->add_bos) ? b->bos : random_token(b);
            b->seq[i] = seq;
        }
        const struct ft_batch batch = {.n_tokens = n, .token = b->tokens, .pos = b->pos, .seq_id = b->seq};
        int rc = ft_model_forward(b->m, b->kv, &batch, b->logits);
        if (rc)
            return rc;
        done += n;
    }
    return 0;
}

/* llama-bench's test_gen: n_gen single-token passes from position start;
 * with n_par > 1 every pass takes one token of each of sequences
 * 0..n_par-1 (all at the same position) and computes logits for all. */
static int run_gen(struct bench_run *b, int start, int n_gen, int n_par) {
    for (int s = 0; s < n_par; s++) {
        b->tokens[s] = start == 0 && b->add_bos ? b->bos : random_token(b);
        b->seq[s] = s;
    }
    for (int i = 0; i < n_gen; i++) {
        for (int s = 0; s < n_par; s++)
            b->pos[s] = start + i;
        const struct ft_batch batch = {
            .n_tokens = n_par, .token = b->tokens, .pos = b->pos, .seq_id = b->seq, .want_logits = b->want};
        int rc = ft_model_forward(b->m, b->kv, &batch, b->logits);
        if (rc)
            return rc;
        for (int s = 0; s < n_par; s++)
            b->tokens[s] = random_token(b);
    }
    return 0;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct bench_progress {
    bool on; /* stderr is a terminal */
    const char *model;
    int n_threads;
};

static void progress(const struct bench_progress *p, const char *test, const char *what, int i, int n) {
    if (!p->on)
        return;
    const char *base = strrchr(p->model, '/');
    fprintf(stderr, "\r\033[Kft bench: %s t%d %s: %s", base ? base + 1 : p->model, p->n_threads, test, what);
    if (n > 0)
        fprintf(stderr, " %d/%d", i, n);
    fflush(stderr);
}

static void progress_clear(const struct bench_progress *p) {
    if (p->on) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
}

/* One ppN or tgN test: the depth's tokens, a warm-up, then `reps` timed
 * runs from the cache truncated back to the depth. */
static int run_test(struct bench_run *b, struct bench_result *r, bool warmup, int reps, uint64_t *samples,
                    const struct bench_progress *pr) {
    char test[32];
    bench_test_name(r, test, sizeof(test));
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(r->test_time, sizeof(r->test_time), "%Y-%m-%dT%H:%M:%SZ", &tm);

    const int d = r->n_depth, n_par = FT_MAX(1, r->n_parallel);
    int rc = ft_kv_cache_new(b->m, d + r->n_prompt + r->n_gen, n_par, &b->kv);
    if (rc)
        return rc;
    if (d > 0) {
        progress(pr, test, "depth", 0, 0);
        for (int s = 0; s < n_par; s++)
            if ((rc = run_prompt(b, s, 0, d)))
                goto done;
    }
    if (warmup) {
        progress(pr, test, "warm-up", 0, 0);
        if (r->n_prompt > 0 && (rc = run_prompt(b, 0, d, r->n_prompt)))
            goto done;
        if (r->n_gen > 0) {
            ft_kv_cache_seq_truncate(b->kv, 0, d);
            if ((rc = run_gen(b, d, 1, n_par)))
                goto done;
        }
    }
    for (int i = 0; i < reps; i++) {
        progress(pr, test, "run", i + 1, reps);
        for (int s = 0; s < n_par; s++)
            ft_kv_cache_seq_truncate(b->kv, s, d);
        const uint64_t t0 = now_ns();
        if (r->n_prompt > 0 && (rc = run_prompt(b, 0, d, r->n_prompt)))
            goto done;
        if (r->n_gen > 0 && (rc = run_gen(b, d, r->n_gen, n_par)))
            goto done;
        samples[i] = now_ns() - t0;
    }
    r->samples_ns = samples;
    r->n_samples = reps;
done:
    progress_clear(pr);
    ft_kv_cache_free(b->kv);
    b->kv = NULL;
    return rc;
}

/* ---- the command ----------------------------------------------------------------- */

static int parse_list(const char *opt, const char *s, int lo, int hi, int *out) {
    int n = ft_args_parse_int_list(s, out, BENCH_MAX_LIST);
    if (n <= 0) {
        fprintf(stderr, "ft bench: %s expects a comma-separated list of integers, got '%s'\n", opt, s);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (out[i] < lo || out[i] > hi) {
            fprintf(stderr, "ft bench: %s values must be in %d..%d (got %d)\n", opt, lo, hi, out[i]);
            return -1;
        }
    }
    return n;
}

/* --isa: the kernel levels to run, best first for "all" (every SIMD level
 * this CPU runs; the scalar reference only when named, as it is orders of
 * magnitude slower). The number of levels, or -1 after a message. */
static int parse_isas(const char *s, enum ft_isa *out) {
    int n = 0;
    if (!strcmp(s, "all")) {
        for (int i = FT_ISA_COUNT - 1; i > FT_ISA_SCALAR; i--)
            if (ft_isa_supported((enum ft_isa)i))
                out[n++] = (enum ft_isa)i;
        if (n == 0)
            out[n++] = FT_ISA_SCALAR;
        return n;
    }
    char buf[256];
    if (strlen(s) >= sizeof(buf)) {
        fprintf(stderr, "ft bench: --isa list too long\n");
        return -1;
    }
    strcpy(buf, s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        enum ft_isa isa;
        if (ft_isa_parse(tok, &isa) != FT_OK || n == FT_ISA_COUNT) {
            fprintf(stderr,
                    "ft bench: --isa expects 'all' or a list of at most %d levels (scalar, avx2, avx-vnni, avx512, amx, neon, "
                    "neon-dotprod, neon-i8mm, auto), got '%s'\n",
                    FT_ISA_COUNT, s);
            return -1;
        }
        if (!ft_isa_supported(isa)) {
            fprintf(stderr, "ft bench: --isa %s: this CPU or build cannot run that level (best here: %s)\n", tok,
                    ft_isa_name(ft_cpu_info()->best));
            return -1;
        }
        out[n++] = isa;
    }
    if (n == 0) {
        fprintf(stderr, "ft bench: --isa expects 'all' or a list of levels, got '%s'\n", s);
        return -1;
    }
    return n;
}

/* Threads a model gets when -t is absent: one per physical core. */
static int default_threads(void) { return ft_hw_n_cores(); }

int ft_cmd_bench(int argc, char **argv) {
    struct ft_str_list models = {0};
    const char *p_s = "512", *n_s = "128", *d_s = "0", *np_s = "1", *t_s = NULL, *numa = "off", *fmt_s = "md";
    const char *isa_s = NULL;
    int reps = 5, n_batch = 2048, numa_node = -1;
    uint64_t seed = 1;
    bool no_warmup = false, hw = false, use_mmap = false, f16_bf16 = false;
    const struct ft_opt opts[] = {
        {"-m", "--model", FT_OPT_STR_LIST, &models, "FILE", "GGUF model (repeatable; default: $FT_MODEL or Gemma 3 270M)"},
        {"-p", "--n-prompt", FT_OPT_STR, &p_s, "N[,N..]", "prompt lengths of the ppN tests (default 512; 0 = none)"},
        {"-n", "--n-gen", FT_OPT_STR, &n_s, "N[,N..]", "generated tokens of the tgN tests (default 128; 0 = none)"},
        {"-d", "--n-depth", FT_OPT_STR, &d_s, "N[,N..]",
         "tokens already in the KV cache when each test starts (default 0), rows \"tg128 @ d4096\""},
        {"-np", "--parallel", FT_OPT_STR, &np_s, "N[,N..]",
         "sequences decoding together in the tgN tests, one token each per pass (default 1), rows \"tg128 x8\""},
        {"-t", "--threads", FT_OPT_STR, &t_s, "N[,N..]", "thread counts (default: one per core)"},
        {"-r", "--repetitions", FT_OPT_INT, &reps, "N", "timed runs per test after the warm-up (default 5)"},
        {"-b", "--batch-size", FT_OPT_INT, &n_batch, "N", "prompt tokens per forward pass (default 2048)"},
        {"-o", "--output", FT_OPT_STR, &fmt_s, "FMT", "output format: md (default), csv, json, jsonl"},
        {NULL, "--isa", FT_OPT_STR, &isa_s, "LIST|all",
         "kernel levels to compare, e.g. avx512,avx2, or all (every SIMD level this CPU runs); rows per level "
         "(default: the level in use, FT_ISA or the best)"},
        {NULL, "--numa", FT_OPT_STR, &numa, "MODE", FT_CLI_HELP_NUMA},
        {NULL, "--numa-node", FT_OPT_INT, &numa_node, "N", FT_CLI_HELP_NUMA_NODE},
        {NULL, "--mmap", FT_OPT_FLAG, &use_mmap, NULL, FT_CLI_HELP_MMAP},
        {NULL, "--f16-bf16", FT_OPT_FLAG, &f16_bf16, NULL, FT_CLI_HELP_F16_BF16},
        {NULL, "--seed", FT_OPT_U64, &seed, "S", "seed of the random token ids (default 1)"},
        {NULL, "--no-warmup", FT_OPT_FLAG, &no_warmup, NULL, "skip the warm-up run of each test"},
        {NULL, "--hw", FT_OPT_FLAG, &hw, NULL, "print the detected hardware (as ft info --hw) and exit"},
    };
    const struct ft_cmd_spec spec = {
        "bench",
        "ft bench -m MODEL.gguf [-m MODEL2.gguf ...] [-p 512] [-n 128] [-d 0] [-np 1] [-r 5] [-t 1,2] [--isa all] "
        "[-o md|csv|json]",
        "Measures prefill (ppN: N prompt tokens in one batch) and decode (tgN: N tokens one at a time)\n"
        "throughput in tokens/s, mean ± standard deviation over the repetitions after a warm-up, as\n"
        "llama-bench does; one row per model x threads x depth x test. With -d D a test starts with D\n"
        "tokens already in the KV cache (not timed): \"tg128 @ d4096\" is decode at a 4096-token context.\n"
        "With -np P, P sequences decode together as P requests do in ft serve: \"tg128 x8\" counts the\n"
        "tokens of all 8. With --isa every test runs once per kernel level, rows labelled by level.\n"
        "JSON and CSV use llama-bench's field names (n_depth too). Progress goes to stderr when it is a terminal.",
        opts, (int)FT_ARRAY_LEN(opts), 0};
    int code = ft_args_parse_opts(&spec, argc, argv);
    if (code != FT_ARGS_GO_ON)
        return code;

    if (hw)
        return ft_hw_report(stdout) == 0 ? 0 : 1;
    const int n_default_threads = default_threads();
    int prompts[BENCH_MAX_LIST], gens[BENCH_MAX_LIST], depths[BENCH_MAX_LIST], threads[BENCH_MAX_LIST];
    int n_prompts = parse_list("-p", p_s, 0, BENCH_MAX_TOKENS, prompts);
    if (n_prompts < 0)
        return 2;
    int n_gens = parse_list("-n", n_s, 0, BENCH_MAX_TOKENS, gens);
    if (n_gens < 0)
        return 2;
    int n_depths = parse_list("-d", d_s, 0, BENCH_MAX_TOKENS, depths);
    if (n_depths < 0)
        return 2;
    int pars[BENCH_MAX_LIST];
    int n_pars = parse_list("-np", np_s, 1, BENCH_MAX_PARALLEL, pars);
    if (n_pars < 0)
        return 2;
    int max_par = 1;
    for (int i = 0; i < n_pars; i++)
        max_par = FT_MAX(max_par, pars[i]);
    int n_threads_list = 1;
    threads[0] = n_default_threads;
    if (t_s && (n_threads_list = parse_list("-t", t_s, 1, BENCH_MAX_THREADS, threads)) < 0)
        return 2;
    if (reps < 1 || reps > BENCH_MAX_REPS) {
        fprintf(stderr, "ft bench: -r must be in 1..%d (got %d)\n", BENCH_MAX_REPS, reps);
        return 2;
    }
    if (n_batch < 1 || n_batch > FT_MAX_BATCH) {
        fprintf(stderr, "ft bench: -b must be in 1..%d (got %d)\n", FT_MAX_BATCH, n_batch);
        return 2;
    }
    enum bench_format fmt;
    if (bench_format_parse(fmt_s, &fmt)) {
        fprintf(stderr, "ft bench: -o must be md, csv, json or jsonl (got '%s')\n", fmt_s);
        return 2;
    }
    bool any = false;
    for (int i = 0; i < n_prompts; i++)
        any = any || prompts[i] > 0;
    for (int i = 0; i < n_gens; i++)
        any = any || gens[i] > 0;
    if (!any) {
        fprintf(stderr, "ft bench: nothing to measure: -p and -n are all 0\n");
        return 2;
    }
    enum ft_isa isas[FT_ISA_COUNT];
    int n_isas = 1;
    isas[0] = ft_cpu_isa();
    if (isa_s && (n_isas = parse_isas(isa_s, isas)) < 0)
        return 2;
    struct ft_model_params mp = {0};
    if (bench_set_numa(numa, numa_node, &mp))
        return 2;
    mp.mmap = use_mmap;
    ft_cli_f16_bf16("bench", f16_bf16);
    if (models.n == 0) {
        const char *d = ft_cli_default_model("bench");
        if (!d)
            return 2;
        models.items[models.n++] = d;
    }

    const struct ft_cpu_info *cpu = ft_cpu_info();
    char isa_names[128] = "";
    for (int i = 0; i < n_isas; i++)
        snprintf(isa_names + strlen(isa_names), sizeof(isa_names) - strlen(isa_names), "%s%s", i ? "," : "",
                 ft_isa_name(isas[i]));
    const struct bench_progress base_pr = {.on = isatty(STDERR_FILENO)};
    uint64_t *samples = malloc(sizeof(uint64_t) * (size_t)reps);
    struct bench_run b = {.n_batch = n_batch, .rng = seed};
    const size_t n_entries = (size_t)FT_MAX(n_batch, max_par);
    b.tokens = malloc(sizeof(int32_t) * n_entries);
    b.pos = malloc(sizeof(int32_t) * n_entries);
    b.seq = calloc(n_entries, sizeof(int32_t));
    b.want = malloc(sizeof(bool) * n_entries);
    if (!samples || !b.tokens || !b.pos || !b.seq || !b.want) {
        fprintf(stderr, "ft bench: out of memory\n");
        free(samples);
        free(b.tokens);
        free(b.pos);
        free(b.seq);
        free(b.want);
        return 1;
    }
    for (size_t i = 0; i < n_entries; i++)
        b.want[i] = true;

    int status = 0;
    bench_report_begin(stdout, fmt);
    for (int mi = 0; mi < models.n && status == 0; mi++) {
        const char *path = models.items[mi];
        for (int li = 0; li < n_isas * n_threads_list && status == 0; li++) {
            const int ti = li % n_threads_list;
            const char *isa = ft_isa_name(isas[li / n_threads_list]);
            /* before the load: weights are repacked for the level in use */
            if (isa_s && ft_cpu_force_isa(isa) != FT_OK) {
                fprintf(stderr, "ft bench: %s\n", ft_cpu_error());
                status = 1;
                break;
            }
            mp.n_threads = threads[ti];
            ft_clear_error();
            int rc = ft_model_load(path, &mp, &b.m);
            if (rc) {
                ft_cli_error("bench", rc, path);
                status = 1;
                break;
            }
            const struct ft_hparams *hp = ft_model_hparams(b.m);
            const struct ft_tokenizer *tok = ft_model_tokenizer(b.m);
            struct bench_model_info info;
            bench_model_describe(ft_model_gguf(b.m), hp->arch_name, &info);
            b.n_vocab = hp->n_vocab;
            b.bos = ft_tokenizer_bos(tok);
            b.add_bos = ft_tokenizer_add_bos(tok) && b.bos >= 0;
            b.logits = malloc(sizeof(float) * (size_t)hp->n_vocab * (size_t)max_par);
            if (!b.logits) {
                fprintf(stderr, "ft bench: out of memory\n");
                status = 1;
            }
            struct bench_progress pr = base_pr;
            pr.model = path;
            pr.n_threads = threads[ti];
            /* llama-bench's order: per depth, every ppN, then every tgN (for
             * each -np). */
            const int per_depth = n_prompts + n_gens * n_pars;
            for (int k = 0; k < n_depths * per_depth && status == 0; k++) {
                const int depth = depths[k / per_depth];
                const int kt = k % per_depth < n_prompts ? k % per_depth
                                                         : n_prompts + (k % per_depth - n_prompts) / n_pars;
                const int par = k % per_depth < n_prompts ? 1 : pars[(k % per_depth - n_prompts) % n_pars];
                struct bench_result res = {
                    .model_filename = path,
                    .model = &info,
                    .isa = isa,
                    .cpu_info = cpu->model[0] ? cpu->model : cpu->arch,
                    .numa = numa,
                    .n_threads = threads[ti],
                    .n_batch = n_batch,
                    .n_prompt = kt < n_prompts ? prompts[kt] : 0,
                    .n_gen = kt < n_prompts ? 0 : gens[kt - n_prompts],
                    .n_depth = depth,
                    .n_parallel = par,
                };
                if (res.n_prompt == 0 && res.n_gen == 0)
                    continue;
                ft_clear_error();
                if ((rc = run_test(&b, &res, !no_warmup, reps, samples, &pr))) {
                    ft_cli_error("bench", rc, path);
                    status = 1;
                    break;
                }
                bench_report_row(stdout, fmt, &res);
            }
            free(b.logits);
            b.logits = NULL;
            ft_model_free(b.m);
            b.m = NULL;
        }
    }
    char footer[256];
    snprintf(footer, sizeof(footer), "ft %s, kernels %s, %s", FT_CLI_VERSION, isa_names,
             cpu->model[0] ? cpu->model : cpu->arch);
    bench_report_end(stdout, fmt, footer);
    free(samples);
    free(b.tokens);
    free(b.pos);
    free(b.seq);
    free(b.want);
    return status;
}
