/* ft compare: quantize a model into several formats (kept in a cache
 * directory and reused), then measure each one -- size, bits per weight,
 * prefill and decode speed (ft bench, as a subprocess), perplexity, and KL
 * divergence / top-1 agreement / Δp against the base model -- and report a
 * table (markdown, CSV or JSON) and an SVG chart (cmd_compare_chart.c).
 *
 * The base is evaluated once and its log-probabilities saved to a
 * temporary file in llama.cpp's format (as llama-perplexity's
 * --kl-divergence-base workflow does); every format is then scored against
 * that file. */
#include "cmd_compare.h"
#include "cmd_perplexity.h"

#include "args.h"
#include "cli.h"
#include "format.h"
#include "ft/atomic_file.h"
#include "ft/common.h"
#include "ft/cpu.h"
#include "ft/gguf.h"
#include "ft/model.h"
#include "ft/perplexity.h"
#include "ft/quantize.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TYPES "Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_0,Q3_K_M"
#define CORPUS "jargon-4.4.7-prose.txt"
#define MAX_ROWS 40

/* ---- files ------------------------------------------------------------------ */

static const char *stem_of(const char *path, char *buf, size_t cap) {
    const char *s = strrchr(path, '/');
    s = s ? s + 1 : path;
    snprintf(buf, cap, "%s", s);
    size_t n = strlen(buf);
    if (n > 5 && !strcasecmp(buf + n - 5, ".gguf"))
        buf[n - 5] = '\0';
    return buf;
}

static int mkdir_p(const char *dir) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* A cheap identity for the base file: FNV-1a over its size and its first
 * and last MiB, so a cached quantization is reused only for the same base. */
static uint64_t fingerprint(const char *path) {
    FILE *f = fopen(path, "rb");
    uint64_t h = 1469598103934665603ull;
    if (!f)
        return h;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    for (int i = 0; i < 8; i++)
        h = (h ^ (uint8_t)((uint64_t)size >> (8 * i))) * 1099511628211ull;
    static uint8_t buf[1 << 20];
    for (int part = 0; part < 2; part++) {
        fseek(f, part == 0 ? 0 : FT_MAX(0L, size - (long)sizeof(buf)), SEEK_SET);
        size_t n = fread(buf, 1, sizeof(buf), f);
        for (size_t i = 0; i < n; i++)
            h = (h ^ buf[i]) * 1099511628211ull;
    }
    fclose(f);
    return h;
}

/* The shipped corpus, looked for beside the binary (build trees put it one
 * to three levels below the repository) and in ./data. */
static const char *find_corpus(char *buf, size_t cap) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        const char *up[] = {"/../data/", "/../../data/", "/../../../data/"};
        for (size_t i = 0; i < FT_ARRAY_LEN(up); i++) {
            if ((size_t)snprintf(buf, cap, "%s%s%s", exe, up[i], CORPUS) < cap && access(buf, R_OK) == 0)
                return buf;
        }
    }
    snprintf(buf, cap, "data/%s", CORPUS);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

/* Size, bits per weight and file type of a GGUF; optionally its tensor
 * types (for "is it a copy of the base"). */
static int row_info(struct cmp_row *w, enum ft_type **types, int64_t *n_types, char *name, size_t name_cap) {
    struct ft_gguf *g = NULL;
    int rc = ft_gguf_open(w->path, &g);
    if (rc) {
        ft_cli_error("compare", rc, w->path);
        return -1;
    }
    w->file_bytes = ft_gguf_file_size(g);
    w->tensor_bytes = w->n_params = 0;
    int64_t n = ft_gguf_n_tensors(g);
    if (types) {
        *types = malloc(sizeof(enum ft_type) * (size_t)(n ? n : 1));
        *n_types = n;
    }
    for (int64_t i = 0; i < n; i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
        w->tensor_bytes += t->size;
        w->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        if (types && *types)
            (*types)[i] = t->type;
    }
    w->bpw = w->n_params ? 8.0 * (double)w->tensor_bytes / (double)w->n_params : 0;
    uint32_t ft;
    const struct ft_ftype_desc *fd = ft_gguf_get_u32(g, "general.file_type", &ft) == 0 ? ft_ftype_by_id(ft) : NULL;
    snprintf(w->ftype, sizeof(w->ftype), "%s", fd ? fd->name : "");
    struct ft_str s;
    if (name && ft_gguf_get_str(g, "general.name", &s) == 0 && s.len > 0)
        snprintf(name, name_cap, "%.*s", (int)FT_MIN(s.len, name_cap - 1), s.s);
    ft_gguf_close(g);
    return 0;
}

/* ---- progress -------------------------------------------------------------- */

struct q_progress {
    bool tty;
    const char *what;
};

static void on_quant_progress(void *ud, const struct ft_quant_progress *p) {
    struct q_progress *s = ud;
    if (!s->tty)
        return;
    fprintf(stderr, "\rcompare: quantizing %s: %3.0f%%  %-40.40s\033[K", s->what,
            p->bytes_total ? 100.0 * (double)p->bytes_done / (double)p->bytes_total : 0.0, p->name);
    fflush(stderr);
}

struct p_progress {
    bool tty;
    const char *what;
    double t0;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_ppl_chunk(void *ud, int32_t chunk, int32_t n_chunk, const struct ft_ppl_acc *acc) {
    struct p_progress *s = ud;
    if (!s->tty)
        return;
    double el = now_s() - s->t0;
    fprintf(stderr, "\rcompare: scoring %s: window %d/%d, PPL %.4f, %.0f s left\033[K", s->what, chunk, n_chunk,
            exp(acc->sum_nll / (double)acc->count), el / chunk * (n_chunk - chunk));
    fflush(stderr);
}

static void end_line(bool tty) {
    if (tty)
        fprintf(stderr, "\r\033[K");
}

/* ---- reports ----------------------------------------------------------------- */

static void fmt_pm(char *buf, size_t cap, double v, double e, int prec) {
    snprintf(buf, cap, "%.*f ± %.*f", prec, v, prec, e);
}

/* KLD with 3 significant digits: small values vary over decades. */
static void fmt_kld(char *buf, size_t cap, const struct cmp_row *w) {
    if (!w->has_kld)
        snprintf(buf, cap, "—");
    else if (w->same_as_base)
        snprintf(buf, cap, "0 (= base)");
    else
        snprintf(buf, cap, "%.3g ± %.2g", w->kld, w->kld_err);
}

static void write_markdown(FILE *f, const struct cmp_report *r, const char *svg_rel) {
    fprintf(f, "# Quantization formats of %s\n\n", r->model_name);
    fprintf(f, "- Base: `%s` (%s, %.1f MiB, %.2f bits per weight).", r->base_path, r->base_ftype[0] ? r->base_ftype : "?",
            (double)r->rows[0].file_bytes / 1048576.0, r->rows[0].bpw);
    if (r->base_quantized)
        fprintf(f, " The base is itself quantized, so the other formats were made from it by `ft quantize` "
                   "(requantized): their KLD measures the error added on top of the base's, and a format whose "
                   "every tensor already has the base's type is a copy of it (KLD 0).");
    else
        fprintf(f, " The other formats were made from it by `ft quantize`.");
    fprintf(f, "\n- Quality: `%s`, %d windows of %d tokens, second half of each scored (%lld tokens), as "
               "llama-perplexity; KLD, top-1 agreement and Δp (change of the correct token's probability) "
               "against the base's log-probabilities; ± is one standard error.\n",
            r->text_path, r->n_chunk, r->n_ctx, (long long)r->n_scored);
    if (r->rows[0].has_speed)
        fprintf(f, "- Speed: `ft bench -p %d -n %d -r %d -t %d` (prefill = pp%d, decode = tg%d; mean ± sd).\n",
                r->bench_p, r->bench_n, r->bench_r, r->threads, r->bench_p, r->bench_n);
    else
        fprintf(f, "- Speed: not measured (`--no-bench`).\n");
    fprintf(f, "- Machine: %s, %d threads; %s.\n\n", r->cpu, r->threads, r->date);
    fprintf(f, "| format | size (GiB) | bits/weight | prefill (tok/s) | decode (tok/s) | PPL | KLD | same top-1 | mean Δp |\n");
    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < r->n_rows; i++) {
        const struct cmp_row *w = &r->rows[i];
        char pp[64] = "—", tg[64] = "—", ppl[64], kld[64], top[64] = "—", dp[64] = "—";
        if (w->has_speed) {
            fmt_pm(pp, sizeof(pp), w->pp_ts, w->pp_sd, 1);
            fmt_pm(tg, sizeof(tg), w->tg_ts, w->tg_sd, 1);
        }
        fmt_pm(ppl, sizeof(ppl), w->ppl, w->ppl_err, 3);
        fmt_kld(kld, sizeof(kld), w);
        if (w->has_kld) {
            snprintf(top, sizeof(top), "%.2f %%", 100.0 * w->same_top);
            snprintf(dp, sizeof(dp), "%+.3f %%", 100.0 * w->dp);
        }
        fprintf(f, "| %s | %.4g | %.2f | %s | %s | %s | %s | %s | %s |\n", w->label,
                (double)w->file_bytes / 1073741824.0, w->bpw, pp, tg, ppl, kld, top, dp);
    }
    if (svg_rel)
        fprintf(f, "\n![quality loss against %s](%s)\n", r->rows[0].has_speed ? "decode speed" : "size", svg_rel);
}

static void write_csv(FILE *f, const struct cmp_report *r) {
    fprintf(f, "format,file,size_bytes,size_gib,bits_per_weight,prefill_tps,prefill_sd,decode_tps,decode_sd,"
               "ppl,ppl_err,kld,kld_err,kld_p99,same_top1,same_top1_err,mean_dp,mean_dp_err\n");
    for (int i = 0; i < r->n_rows; i++) {
        const struct cmp_row *w = &r->rows[i];
        ft_cli_csv_str(f, w->label);
        fputc(',', f);
        ft_cli_csv_str(f, w->path);
        fprintf(f, ",%llu,%.6f,%.4f,", (unsigned long long)w->file_bytes, (double)w->file_bytes / 1073741824.0, w->bpw);
        if (w->has_speed)
            fprintf(f, "%.3f,%.3f,%.3f,%.3f,", w->pp_ts, w->pp_sd, w->tg_ts, w->tg_sd);
        else
            fprintf(f, ",,,,");
        fprintf(f, "%.6f,%.6f,", w->ppl, w->ppl_err);
        if (w->has_kld)
            fprintf(f, "%.8g,%.8g,%.8g,%.6f,%.6f,%.8g,%.8g\n", w->same_as_base ? 0.0 : w->kld,
                    w->same_as_base ? 0.0 : w->kld_err, w->same_as_base ? 0.0 : w->kld_p99, w->same_top,
                    w->same_top_err, w->dp, w->dp_err);
        else
            fprintf(f, ",,,,,,\n");
    }
}

static int write_json(FILE *f, const struct cmp_report *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model", r->model_name);
    cJSON_AddStringToObject(root, "base", r->base_path);
    cJSON_AddStringToObject(root, "base_type", r->base_ftype);
    cJSON_AddBoolToObject(root, "base_quantized", r->base_quantized);
    cJSON_AddStringToObject(root, "text", r->text_path);
    cJSON_AddNumberToObject(root, "n_ctx", r->n_ctx);
    cJSON_AddNumberToObject(root, "windows", r->n_chunk);
    cJSON_AddNumberToObject(root, "tokens_scored", (double)r->n_scored);
    cJSON_AddStringToObject(root, "cpu", r->cpu);
    cJSON_AddNumberToObject(root, "threads", r->threads);
    cJSON_AddStringToObject(root, "date", r->date);
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < r->n_rows; i++) {
        const struct cmp_row *w = &r->rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "format", w->label);
        cJSON_AddStringToObject(o, "file", w->path);
        cJSON_AddBoolToObject(o, "is_base", w->is_base);
        cJSON_AddNumberToObject(o, "size_bytes", (double)w->file_bytes);
        cJSON_AddNumberToObject(o, "bits_per_weight", w->bpw);
        if (w->has_speed) {
            cJSON_AddNumberToObject(o, "prefill_tps", w->pp_ts);
            cJSON_AddNumberToObject(o, "prefill_sd", w->pp_sd);
            cJSON_AddNumberToObject(o, "decode_tps", w->tg_ts);
            cJSON_AddNumberToObject(o, "decode_sd", w->tg_sd);
        }
        cJSON_AddNumberToObject(o, "ppl", w->ppl);
        cJSON_AddNumberToObject(o, "ppl_err", w->ppl_err);
        if (w->has_kld) {
            cJSON_AddBoolToObject(o, "same_as_base", w->same_as_base);
            cJSON_AddNumberToObject(o, "kld", w->same_as_base ? 0.0 : w->kld);
            cJSON_AddNumberToObject(o, "kld_err", w->same_as_base ? 0.0 : w->kld_err);
            cJSON_AddNumberToObject(o, "kld_p99", w->same_as_base ? 0.0 : w->kld_p99);
            cJSON_AddNumberToObject(o, "same_top1", w->same_top);
            cJSON_AddNumberToObject(o, "same_top1_err", w->same_top_err);
            cJSON_AddNumberToObject(o, "mean_dp", w->dp);
            cJSON_AddNumberToObject(o, "mean_dp_err", w->dp_err);
        }
        cJSON_AddItemToArray(rows, o);
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s)
        return -1;
    fprintf(f, "%s\n", s);
    cJSON_free(s);
    return 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcasecmp(s + n - m, suffix);
}

/* The SVG's path relative to the report's directory when it is below it. */
static const char *svg_relative(const char *report, const char *svg) {
    const char *slash = strrchr(report, '/');
    if (!slash)
        return svg;
    size_t dir = (size_t)(slash - report + 1);
    return !strncmp(svg, report, dir) ? svg + dir : svg;
}

/* ---- the command --------------------------------------------------------------- */

/* Score one model against the base's saved log-probabilities. */
static int score(struct cmp_row *w, struct ft_logprob_file *base_lp, const int32_t *tokens, int64_t n_tokens,
                 const char *save, int n_ctx, int n_batch, int chunks, int threads, struct cmp_report *rep) {
    struct ft_model *m = NULL;
    struct ft_model_params mp = {.n_threads = threads};
    int rc = ft_model_load(w->path, &mp, &m);
    if (rc) {
        ft_cli_error("compare", rc, w->path);
        return -1;
    }
    struct p_progress pp = {.tty = isatty(STDERR_FILENO) == 1, .what = w->label, .t0 = now_s()};
    struct ft_ppl_inputs in = {.model = m, .tokens = tokens, .n_tokens = (size_t)n_tokens, .base_file = base_lp,
                               .save_path = save, .on_chunk = on_ppl_chunk, .ud = &pp};
    struct ft_ppl_config cfg = {.n_ctx = base_lp ? 0 : n_ctx, .n_batch = n_batch, .n_chunks = chunks,
                                .n_threads = threads};
    struct ft_ppl_result res;
    rc = ft_perplexity_eval(&in, &cfg, &res);
    end_line(pp.tty);
    if (rc) {
        ft_cli_error("compare", rc, w->path);
        ft_model_free(m);
        return -1;
    }
    struct ft_ppl_stats st;
    ft_ppl_stats_compute(&res.acc, base_lp != NULL, res.kld_values, res.p_diff_values, (size_t)res.acc.count, &st);
    w->ppl = st.ppl;
    w->ppl_err = st.ppl_err;
    if (base_lp) {
        w->has_kld = true;
        w->kld = st.kld;
        w->kld_err = st.kld_err;
        w->kld_p99 = st.kld_q.p99;
        w->same_top = st.same_top;
        w->same_top_err = st.same_top_err;
        w->dp = st.dp;
        w->dp_err = st.dp_err;
    }
    rep->n_ctx = res.n_ctx;
    rep->n_chunk = res.n_chunk;
    rep->n_scored = res.acc.count;
    fprintf(stderr, "compare: %-14s PPL %.4f", w->label, st.ppl);
    if (base_lp)
        fprintf(stderr, ", KLD %.6f, same top-1 %.2f %%", st.kld, 100.0 * st.same_top);
    fprintf(stderr, "\n");
    ft_ppl_result_free(&res);
    ft_model_free(m);
    return 0;
}

int ft_cmd_compare(int argc, char **argv) {
    struct ft_str_list models = {0}, outs = {0};
    const char *types = NULL, *text = NULL, *svg = NULL, *cache = NULL;
    int threads = 0, n_ctx = 512, n_batch = 0, chunks = 8, bp = 512, bn = 128, br = 3;
    bool no_bench = false;
    const struct ft_opt opts[] = {
        {"-m", "--model", FT_OPT_STR_LIST, &models, "FILE",
         "the base model; more -m files are compared as they are (default: the default model)"},
        {"-q", "--quant", FT_OPT_STR, &types, "LIST", "formats to make from the base (default " DEFAULT_TYPES ")"},
        {"-f", "--file", FT_OPT_STR, &text, "TEXT", "text to score (default: the shipped data/" CORPUS ")"},
        {"-t", "--threads", FT_OPT_INT, &threads, "N", "threads (default: one per CPU)"},
        {"-c", "--ctx-size", FT_OPT_INT, &n_ctx, "N", "perplexity window (default 512)"},
        {"-b", "--batch-size", FT_OPT_INT, &n_batch, "N", "tokens per forward pass (default: one window)"},
        {NULL, "--chunks", FT_OPT_INT, &chunks, "N", "windows to score (default 8; 0: the whole text)"},
        {"-o", "--output", FT_OPT_STR_LIST, &outs, "FILE", "also write the report: .md, .csv or .json (repeatable)"},
        {NULL, "--svg", FT_OPT_STR, &svg, "FILE", "write the chart: KLD against decode speed, marker area = size"},
        {NULL, "--cache-dir", FT_OPT_STR, &cache, "DIR",
         "where quantized files are kept and reused (default ~/.cache/freetoken/quant)"},
        {NULL, "--no-bench", FT_OPT_FLAG, &no_bench, NULL, "skip the speed measurement (ft bench)"},
        {"-p", "--n-prompt", FT_OPT_INT, &bp, "N", "ft bench prompt length (default 512)"},
        {"-n", "--n-gen", FT_OPT_INT, &bn, "N", "ft bench generated tokens (default 128)"},
        {"-r", "--repetitions", FT_OPT_INT, &br, "N", "ft bench repetitions (default 3)"},
    };
    const struct ft_cmd_spec spec = {
        "compare", "ft compare -m BASE.gguf [-q " DEFAULT_TYPES "] [-f TEXT] [-t N] [-o report.md] [--svg chart.svg]",
        "Makes each format from BASE with ft quantize (cached and reused), then measures each: file size, bits\n"
        "per weight, prefill and decode tokens/s (ft bench), perplexity, and KL divergence, top-1 agreement and\n"
        "Δp against BASE over the same windows. Prints a markdown table; -o writes it as markdown, CSV or JSON\n"
        "(by extension); --svg draws quality loss against decode speed.",
        opts, (int)FT_ARRAY_LEN(opts), 0};
    int code = ft_args_parse_opts(&spec, argc, argv);
    if (code != FT_ARGS_GO_ON)
        return code;
    if (threads < 0 || n_ctx < 8 || n_batch < 0 || chunks < 0 || bp < 1 || bn < 1 || br < 1) {
        fprintf(stderr, "ft compare: -t, -b, --chunks must be >= 0, -c >= 8, and -p, -n, -r >= 1\n");
        return 2;
    }
    for (int i = 0; i < outs.n; i++) {
        const char *o = outs.items[i];
        if (!ends_with(o, ".md") && !ends_with(o, ".csv") && !ends_with(o, ".json")) {
            fprintf(stderr, "ft compare: -o %s: the name must end in .md, .csv or .json\n", o);
            return 2;
        }
    }
    const char *base_path = models.n ? models.items[0] : ft_cli_default_model("compare");
    if (!base_path)
        return 2;
    char corpus[4096], text_real[PATH_MAX];
    if (!text) {
        if (!(text = find_corpus(corpus, sizeof(corpus)))) {
            fprintf(stderr, "ft compare: no text given and data/" CORPUS " not found: pass -f TEXT\n");
            return 2;
        }
        if (realpath(text, text_real)) /* build/dev/../../data/... reads badly in a report */
            text = text_real;
    }
    /* The formats. */
    char type_buf[512];
    snprintf(type_buf, sizeof(type_buf), "%s", types ? types : (models.n > 1 ? "" : DEFAULT_TYPES));
    const struct ft_ftype_desc *fds[MAX_ROWS];
    int n_fd = 0;
    for (char *save = NULL, *tok = strtok_r(type_buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const struct ft_ftype_desc *fd = ft_ftype_by_name(tok);
        if (!fd) {
            fprintf(stderr, "ft compare: unknown format '%s' (see ft quantize --help)\n", tok);
            return 2;
        }
        if (n_fd + models.n >= MAX_ROWS) {
            fprintf(stderr, "ft compare: at most %d models\n", MAX_ROWS - 1);
            return 2;
        }
        fds[n_fd++] = fd;
    }
    if (n_fd == 0 && models.n < 2) {
        fprintf(stderr, "ft compare: nothing to compare: give -q formats or more -m files\n");
        return 2;
    }
    int n_threads = threads > 0 ? threads : (int)FT_MAX(1L, sysconf(_SC_NPROCESSORS_ONLN));

    /* Cache directory. */
    char cache_dir[4096];
    if (cache)
        snprintf(cache_dir, sizeof(cache_dir), "%s", cache);
    else if (getenv("XDG_CACHE_HOME") && *getenv("XDG_CACHE_HOME"))
        snprintf(cache_dir, sizeof(cache_dir), "%s/freetoken/quant", getenv("XDG_CACHE_HOME"));
    else
        snprintf(cache_dir, sizeof(cache_dir), "%s/.cache/freetoken/quant", getenv("HOME") ? getenv("HOME") : "/tmp");
    if (n_fd && mkdir_p(cache_dir) != 0) {
        fprintf(stderr, "ft compare: cannot create the cache directory %s: %s\n", cache_dir, strerror(errno));
        return 1;
    }

    struct cmp_row *rows = calloc(MAX_ROWS, sizeof(*rows));
    struct cmp_report rep = {.rows = rows, .base_path = base_path, .text_path = text, .threads = n_threads,
                             .bench_p = bp, .bench_n = bn, .bench_r = br};
    char model_name[128] = "", stem[256], logits_path[4200] = "";
    enum ft_type *base_types = NULL;
    int64_t n_base_types = 0;
    int32_t *tokens = NULL;
    struct ft_logprob_file *base_lp = NULL;
    int status = 1;
    if (!rows) {
        fprintf(stderr, "ft compare: out of memory\n");
        return 1;
    }
    const struct ft_cpu_info *ci = ft_cpu_info();
    snprintf(rep.cpu, sizeof(rep.cpu), "%s (%s, kernels %s)", ci->model[0] ? ci->model : ci->arch, ci->arch,
             ft_isa_name(ft_cpu_isa()));
    time_t now = time(NULL);
    strftime(rep.date, sizeof(rep.date), "%Y-%m-%d", gmtime(&now));

    /* Row 0: the base. */
    struct cmp_row *b = &rows[0];
    snprintf(b->path, sizeof(b->path), "%s", base_path);
    b->is_base = true;
    if (row_info(b, &base_types, &n_base_types, model_name, sizeof(model_name)) != 0)
        goto done;
    stem_of(base_path, stem, sizeof(stem));
    if (!model_name[0])
        snprintf(model_name, sizeof(model_name), "%.100s", stem);
    rep.model_name = model_name;
    rep.base_ftype = b->ftype;
    const struct ft_ftype_desc *bfd = ft_ftype_by_name(b->ftype);
    rep.base_quantized = bfd && ft_type_info(bfd->default_type)->is_quantized;
    snprintf(b->label, sizeof(b->label), "base (%.50s)", b->ftype[0] ? b->ftype : stem);
    rep.n_rows = 1;

    /* The formats: quantize, or reuse the cached file. */
    uint64_t fp = fingerprint(base_path);
    bool tty = isatty(STDERR_FILENO) == 1;
    for (int i = 0; i < n_fd; i++) {
        struct cmp_row *w = &rows[rep.n_rows++];
        snprintf(w->label, sizeof(w->label), "%s", fds[i]->name);
        if ((size_t)snprintf(w->path, sizeof(w->path), "%s/%s.%016llx.%s.gguf", cache_dir, stem,
                             (unsigned long long)fp, fds[i]->name) >= sizeof(w->path)) {
            fprintf(stderr, "ft compare: the cache directory's path is too long\n");
            goto done;
        }
        struct ft_gguf *g = NULL;
        uint32_t ftv = 0;
        bool cached = ft_gguf_open(w->path, &g) == 0 && ft_gguf_get_u32(g, "general.file_type", &ftv) == 0 &&
                      ftv == (uint32_t)fds[i]->ftype;
        ft_gguf_close(g);
        ft_clear_error();
        if (cached) {
            fprintf(stderr, "compare: %-8s reusing %s\n", fds[i]->name, w->path);
        } else {
            struct q_progress qp = {.tty = tty, .what = fds[i]->name};
            struct ft_quant_params p = {.ftype = fds[i]->ftype, .n_threads = threads, .progress = on_quant_progress,
                                        .progress_ud = &qp};
            struct ft_quant_report qr;
            int rc = ft_quantize_file(base_path, w->path, &p, &qr);
            end_line(tty);
            if (rc) {
                ft_cli_error("compare", rc, w->path);
                goto done;
            }
            fprintf(stderr, "compare: %-8s wrote %s (%.1f MiB)\n", fds[i]->name, w->path, qr.bytes_out / 1048576.0);
        }
        enum ft_type *tt = NULL;
        int64_t nt = 0;
        if (row_info(w, &tt, &nt, NULL, 0) != 0)
            goto done;
        w->same_as_base = tt && nt == n_base_types && !memcmp(tt, base_types, sizeof(*tt) * (size_t)nt);
        free(tt);
    }
    for (int i = 1; i < models.n; i++) {
        struct cmp_row *w = &rows[rep.n_rows++];
        snprintf(w->path, sizeof(w->path), "%s", models.items[i]);
        stem_of(models.items[i], w->label, sizeof(w->label));
        if (row_info(w, NULL, NULL, NULL, 0) != 0)
            goto done;
    }

    /* Speed first: it fails fast when this ft has no bench. */
    if (!no_bench) {
        for (int i = 0; i < rep.n_rows; i++) {
            fprintf(stderr, "compare: measuring the speed of %s (ft bench)\n", rows[i].label);
            int br_rc = ft_compare_bench(&rows[i], bp, bn, br, n_threads);
            if (br_rc == 1) {
                fprintf(stderr, "ft compare: this ft has no `bench` command, which the speed columns need; "
                                "rerun with --no-bench to compare size and quality only\n");
                goto done;
            }
            if (br_rc != 0)
                goto done;
        }
    }

    /* The base's log-probabilities, then every format against them. */
    {
        struct ft_model *bm = NULL;
        struct ft_model_params mp = {.n_threads = threads};
        int rc = ft_model_load(base_path, &mp, &bm);
        if (rc) {
            ft_cli_error("compare", rc, base_path);
            goto done;
        }
        int64_t n_tokens = ft_cli_tokenize_file("compare", bm, text, &tokens);
        ft_model_free(bm);
        if (n_tokens < 0)
            goto done;
        snprintf(logits_path, sizeof(logits_path), "%s/.base-logprobs-%ld.tmp",
                 n_fd ? cache_dir : "/tmp", (long)getpid());
        if (score(b, NULL, tokens, n_tokens, logits_path, n_ctx, n_batch, chunks, threads, &rep) != 0)
            goto done;
        if ((rc = ft_logprob_file_open(logits_path, &base_lp))) {
            ft_cli_error("compare", rc, logits_path);
            goto done;
        }
        /* Open is enough from here on: a process killed later leaves no scratch file. */
        unlink(logits_path);
        logits_path[0] = '\0';
        for (int i = 1; i < rep.n_rows; i++)
            if (score(&rows[i], base_lp, NULL, 0, NULL, n_ctx, n_batch, chunks, threads, &rep) != 0)
                goto done;
    }

    write_markdown(stdout, &rep, NULL);
    for (int oi = 0; oi <= outs.n; oi++) {
        const char *out = oi < outs.n ? outs.items[oi] : svg;
        if (!out)
            break;
        /* Composed in memory, then put in place whole or not at all. */
        char *doc = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&doc, &len);
        if (!f) {
            fprintf(stderr, "ft compare: out of memory for %s\n", out);
            goto done;
        }
        if (oi == outs.n)
            ft_compare_write_svg(&rep, f);
        else if (ends_with(out, ".csv"))
            write_csv(f, &rep);
        else if (ends_with(out, ".json"))
            write_json(f, &rep);
        else
            write_markdown(f, &rep, svg ? svg_relative(out, svg) : NULL);
        const bool ok = fclose(f) == 0 && doc;
        const int rc = ok ? ft_atomic_file_save(out, doc, len) : FT_ENOMEM;
        free(doc);
        if (rc) {
            ft_cli_error("compare", rc, out);
            goto done;
        }
        fprintf(stderr, "compare: wrote %s\n", out);
    }
    status = 0;
done:
    ft_logprob_file_close(base_lp);
    if (logits_path[0])
        unlink(logits_path);
    free(tokens);
    free(base_types);
    free(rows);
    return status;
}
