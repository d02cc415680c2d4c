/* llamacpp_bench: llama.cpp's side of bench/compare_llamacpp.py. Not part
 * of FreeToken: the script compiles it against the llama.h / ggml.h of a
 * llama.cpp source tree and links it to that release's prebuilt libllama
 * (node-llama-cpp's, or any build named by LLAMA_CPP_LIB_DIR).
 *
 * It measures ppN and tgN exactly as llama-bench does (tools/llama-bench:
 * test_prompt / test_gen, a warm-up run, the KV cache cleared before every
 * repetition, a context of n_prompt + n_gen, an attached ggml thread pool,
 * default batch 2048 / ubatch 512 and flash attention "auto") and prints the
 * same JSON rows as `ft bench -o json`, so the script reads both engines
 * alike. Token ids come from the same seeded generator as ft bench, so with
 * the same --seed both engines evaluate the same ids.
 *
 * The "isa" field names the CPU backend variant ggml loaded (for builds
 * with dynamically loaded backends: libggml-cpu-<variant>.so, chosen by
 * ggml from this CPU's features) followed by the features it reports.
 *
 * usage: llamacpp_bench -m MODEL.gguf [-p 512] [-n 128] [-r 5] [-t 2] [-b 2048]
 *                       [--seed 1] [--no-warmup] [--backend-dir DIR] [-o json|jsonl] [-v]
 */
#include "llama.h"

#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REPS 1000

static uint64_t g_rng;

/* The same generator and reduction as ft bench's random_token(). */
static llama_token random_token(int32_t n_vocab) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (llama_token)(z % (uint64_t)n_vocab);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* llama-bench's test_prompt. */
static bool test_prompt(struct llama_context *ctx, int n_prompt, int n_batch, int n_threads) {
    llama_set_n_threads(ctx, n_threads, n_threads);
    const struct llama_vocab *vocab = llama_model_get_vocab(llama_get_model(ctx));
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    llama_token *tokens = malloc(sizeof(llama_token) * (size_t)n_batch);
    if (!tokens)
        return false;
    bool ok = true;
    for (int done = 0; done < n_prompt && ok;) {
        const int n = n_prompt - done < n_batch ? n_prompt - done : n_batch;
        for (int i = 0; i < n; i++)
            tokens[i] = (done == 0 && i == 0 && llama_vocab_get_add_bos(vocab)) ? llama_vocab_bos(vocab)
                                                                                 : random_token(n_vocab);
        if (llama_decode(ctx, llama_batch_get_one(tokens, n)) != 0) {
            fprintf(stderr, "llamacpp_bench: failed to decode a prompt batch\n");
            ok = false;
        }
        done += n;
    }
    llama_synchronize(ctx);
    free(tokens);
    return ok;
}

/* llama-bench's test_gen. */
static bool test_gen(struct llama_context *ctx, int n_gen, int n_threads) {
    llama_set_n_threads(ctx, n_threads, n_threads);
    const struct llama_vocab *vocab = llama_model_get_vocab(llama_get_model(ctx));
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    llama_token token = llama_vocab_get_add_bos(vocab) ? llama_vocab_bos(vocab) : random_token(n_vocab);
    for (int i = 0; i < n_gen; i++) {
        if (llama_decode(ctx, llama_batch_get_one(&token, 1)) != 0) {
            fprintf(stderr, "llamacpp_bench: failed to decode a generation batch\n");
            return false;
        }
        llama_synchronize(ctx);
        token = random_token(n_vocab);
    }
    return true;
}

static void null_log(enum ggml_log_level level, const char *text, void *ud) {
    (void)level;
    (void)text;
    (void)ud;
}

/* Which libggml-cpu variant the process mapped, from /proc/self/maps. */
static void cpu_variant(char *buf, size_t cap) {
    snprintf(buf, cap, "ggml-cpu (built in)");
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        char *p = strstr(line, "libggml-cpu");
        if (!p)
            continue;
        char *end = strstr(p, ".so");
        if (end) {
            *end = '\0';
            /* "libggml-cpu-cooperlake" -> "ggml-cpu-cooperlake"; "libggml-cpu" -> "ggml-cpu" */
            snprintf(buf, cap, "%s", p + 3);
        }
        break;
    }
    fclose(f);
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

struct result {
    const char *model_filename;
    char model_type[128];
    uint64_t model_size, n_params;
    int n_threads, n_batch, n_prompt, n_gen, n_samples;
    uint64_t samples_ns[MAX_REPS];
};

static void print_row(FILE *f, const struct result *r, const char *isa, const char *cpu_info, bool pretty,
                      bool first) {
    double ts[MAX_REPS], mean = 0.0, sd = 0.0, mean_ns = 0.0, sd_ns = 0.0;
    for (int i = 0; i < r->n_samples; i++) {
        ts[i] = 1e9 * (double)(r->n_prompt + r->n_gen) / (double)r->samples_ns[i];
        mean += ts[i] / r->n_samples;
        mean_ns += (double)r->samples_ns[i] / r->n_samples;
    }
    for (int i = 0; r->n_samples > 1 && i < r->n_samples; i++) {
        sd += (ts[i] - mean) * (ts[i] - mean) / (r->n_samples - 1);
        sd_ns += ((double)r->samples_ns[i] - mean_ns) * ((double)r->samples_ns[i] - mean_ns) / (r->n_samples - 1);
    }
    char test[48];
    if (r->n_prompt > 0 && r->n_gen == 0)
        snprintf(test, sizeof(test), "pp%d", r->n_prompt);
    else if (r->n_gen > 0 && r->n_prompt == 0)
        snprintf(test, sizeof(test), "tg%d", r->n_gen);
    else
        snprintf(test, sizeof(test), "pp%d+tg%d", r->n_prompt, r->n_gen);
    const char *nl = pretty ? "\n    " : " ";
    fprintf(f, "%s%s{%s", first ? "" : (pretty ? ",\n" : ""), pretty ? "  " : "", pretty ? "\n    " : "");
    fprintf(f, "\"engine\": \"llama.cpp\",%s\"cpu_info\": ", nl);
    json_str(f, cpu_info);
    fprintf(f, ",%s\"backends\": \"CPU\",%s\"isa\": ", nl, nl);
    json_str(f, isa);
    fprintf(f, ",%s\"model_filename\": ", nl);
    json_str(f, r->model_filename);
    fprintf(f, ",%s\"model_type\": ", nl);
    json_str(f, r->model_type);
    fprintf(f,
            ",%s\"model_size\": %" PRIu64 ",%s\"model_n_params\": %" PRIu64 ",%s\"n_params\": %" PRIu64
            ",%s\"n_batch\": %d,%s\"n_threads\": %d,%s\"n_prompt\": %d,%s\"n_gen\": %d,%s\"n_depth\": 0,%s"
            "\"test\": \"%s\",%s\"avg_ns\": %.0f,%s\"stddev_ns\": %.0f,%s\"avg_ts\": %.6f,%s\"stddev_ts\": %.6f,%s"
            "\"samples_ns\": [",
            nl, r->model_size, nl, r->n_params, nl, r->n_params, nl, r->n_batch, nl, r->n_threads, nl, r->n_prompt,
            nl, r->n_gen, nl, nl, test, nl, mean_ns, nl, sqrt(sd_ns), nl, mean, nl, sqrt(sd), nl);
    for (int i = 0; i < r->n_samples; i++)
        fprintf(f, "%s%" PRIu64, i ? ", " : " ", r->samples_ns[i]);
    fprintf(f, " ],%s\"samples_ts\": [", nl);
    for (int i = 0; i < r->n_samples; i++)
        fprintf(f, "%s%.6f", i ? ", " : " ", ts[i]);
    fprintf(f, " ]%s}%s", pretty ? "\n  " : "", pretty ? "" : "\n");
    fflush(f);
}

static int usage(void) {
    fprintf(stderr, "usage: llamacpp_bench -m MODEL.gguf [-p 512] [-n 128] [-r 5] [-t 2] [-b 2048] [--seed 1] "
                    "[--no-warmup] [--backend-dir DIR] [-o json|jsonl] [-v]\n");
    return 2;
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

int main(int argc, char **argv) {
    const char *model = NULL, *backend_dir = NULL, *fmt = "json";
    int n_prompt = 512, n_gen = 128, reps = 5, n_threads = 2, n_batch = 2048;
    bool warmup = true, verbose = false;
    g_rng = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "--no-warmup")) {
            warmup = false;
            continue;
        }
        if (!strcmp(a, "-v")) {
            verbose = true;
            continue;
        }
        if (!v)
            return usage();
        i++;
        if (!strcmp(a, "-m"))
            model = v;
        else if (!strcmp(a, "--backend-dir"))
            backend_dir = v;
        else if (!strcmp(a, "-o"))
            fmt = v;
        else if (!strcmp(a, "-p"))
            ok = parse_int(v, 0, 1 << 20, &n_prompt);
        else if (!strcmp(a, "-n"))
            ok = parse_int(v, 0, 1 << 20, &n_gen);
        else if (!strcmp(a, "-r"))
            ok = parse_int(v, 1, MAX_REPS, &reps);
        else if (!strcmp(a, "-t"))
            ok = parse_int(v, 1, 1024, &n_threads);
        else if (!strcmp(a, "-b"))
            ok = parse_int(v, 1, 1 << 16, &n_batch);
        else if (!strcmp(a, "--seed")) {
            char *end;
            g_rng = strtoull(v, &end, 10);
            ok = end != v && !*end;
        } else
            return usage();
        if (!ok) {
            fprintf(stderr, "llamacpp_bench: bad value for %s: '%s'\n", a, v);
            return 2;
        }
    }
    const bool pretty = !strcmp(fmt, "json");
    if (!model || (!pretty && strcmp(fmt, "jsonl")) || (n_prompt == 0 && n_gen == 0))
        return usage();

    if (!verbose)
        llama_log_set(null_log, NULL);
    if (backend_dir)
        ggml_backend_load_all_from_path(backend_dir);
    else
        ggml_backend_load_all();
    ggml_backend_dev_t cpu_dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu_dev) {
        fprintf(stderr, "llamacpp_bench: no CPU backend was loaded (--backend-dir?)\n");
        return 1;
    }
    ggml_backend_reg_t cpu_reg = ggml_backend_dev_backend_reg(cpu_dev);
    typedef struct ggml_threadpool *(*tp_new_fn)(struct ggml_threadpool_params *);
    typedef void (*tp_free_fn)(struct ggml_threadpool *);
    tp_new_fn tp_new = (tp_new_fn)ggml_backend_reg_get_proc_address(cpu_reg, "ggml_threadpool_new");
    tp_free_fn tp_free = (tp_free_fn)ggml_backend_reg_get_proc_address(cpu_reg, "ggml_threadpool_free");
    llama_backend_init();

    char isa[1024], variant[128];
    cpu_variant(variant, sizeof(variant));
    snprintf(isa, sizeof(isa), "%s: %s", variant, llama_print_system_info());
    /* Trim the trailing " | " llama_print_system_info leaves. */
    for (size_t n = strlen(isa); n > 0 && (isa[n - 1] == ' ' || isa[n - 1] == '|'); n--)
        isa[n - 1] = '\0';
    const char *cpu_info = ggml_backend_dev_description(cpu_dev);

    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *lm = llama_model_load_from_file(model, mp);
    if (!lm) {
        fprintf(stderr, "llamacpp_bench: failed to load model '%s'\n", model);
        return 1;
    }
    static struct result r;
    r.model_filename = model;
    llama_model_desc(lm, r.model_type, sizeof(r.model_type));
    r.model_size = llama_model_size(lm);
    r.n_params = llama_model_n_params(lm);
    r.n_threads = n_threads;
    r.n_batch = n_batch;

    /* llama-bench's order: the ppN test, then the tgN test, each in its own
     * context of n_prompt + n_gen tokens (here: n_prompt or n_gen). */
    const int tests[2][2] = {{n_prompt, 0}, {0, n_gen}};
    bool first = true;
    int status = 0;
    if (pretty)
        printf("[\n");
    for (int k = 0; k < 2 && status == 0; k++) {
        if (tests[k][0] == 0 && tests[k][1] == 0)
            continue;
        r.n_prompt = tests[k][0];
        r.n_gen = tests[k][1];
        struct llama_context_params cp = llama_context_default_params();
        cp.n_ctx = (uint32_t)(r.n_prompt + r.n_gen);
        cp.n_batch = (uint32_t)n_batch;
        cp.n_ubatch = 512;
        struct llama_context *ctx = llama_init_from_model(lm, cp);
        if (!ctx) {
            fprintf(stderr, "llamacpp_bench: failed to create a context\n");
            status = 1;
            break;
        }
        struct ggml_threadpool_params tpp = ggml_threadpool_params_default(n_threads);
        struct ggml_threadpool *tp = tp_new ? tp_new(&tpp) : NULL;
        if (tp)
            llama_attach_threadpool(ctx, tp, NULL);
        llama_memory_clear(llama_get_memory(ctx), false);
        if (warmup) {
            if ((r.n_prompt > 0 && !test_prompt(ctx, r.n_prompt, n_batch, n_threads)) ||
                (r.n_gen > 0 && !test_gen(ctx, 1, n_threads)))
                status = 1;
        }
        for (int i = 0; i < reps && status == 0; i++) {
            llama_memory_clear(llama_get_memory(ctx), false);
            const uint64_t t0 = now_ns();
            if ((r.n_prompt > 0 && !test_prompt(ctx, r.n_prompt, n_batch, n_threads)) ||
                (r.n_gen > 0 && !test_gen(ctx, r.n_gen, n_threads))) {
                status = 1;
                break;
            }
            r.samples_ns[i] = now_ns() - t0;
        }
        r.n_samples = reps;
        if (status == 0) {
            print_row(stdout, &r, isa, cpu_info, pretty, first);
            first = false;
        }
        llama_free(ctx);
        if (tp && tp_free)
            tp_free(tp);
    }
    if (pretty)
        printf("%s]\n", first ? "" : "\n");
    llama_model_free(lm);
    llama_backend_free();
    return status;
}
