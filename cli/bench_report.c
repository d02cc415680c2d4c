/* Printing `ft bench` results (see bench_report.h). The markdown table
 * mirrors llama-bench's (`t/s` as "mean ± sd"); CSV quotes every field as
 * llama-bench does; JSON carries the samples too. */
#include "bench_report.h"
#include "cli.h"
#include "format.h"

#include "ft/common.h"
#include "ft/types.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

/* ---- model description ------------------------------------------------------- */

/* llama.cpp's names of general.file_type values (llama_ftype_name). */
static const char *ftype_name(uint32_t ft) {
    switch (ft) {
    case 0: return "all F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K - Medium";
    case 11: return "Q3_K - Small";
    case 12: return "Q3_K - Medium";
    case 13: return "Q3_K - Large";
    case 14: return "Q4_K - Small";
    case 15: return "Q4_K - Medium";
    case 16: return "Q5_K - Small";
    case 17: return "Q5_K - Medium";
    case 18: return "Q6_K";
    case 21: return "Q2_K - Small";
    case 25: return "IQ4_NL - 4.5 bpw";
    case 30: return "IQ4_XS - 4.25 bpw";
    case 32: return "BF16";
    default: return NULL;
    }
}

/* The file type a tensor type implies when general.file_type is absent
 * (llama.cpp guesses from the most common type, as here). */
static const char *ftype_of_type(enum ft_type t) {
    switch (t) {
    case FT_TYPE_F32: return "all F32";
    case FT_TYPE_Q2_K: return "Q2_K - Medium";
    case FT_TYPE_Q3_K: return "Q3_K - Medium";
    case FT_TYPE_Q4_K: return "Q4_K - Medium";
    case FT_TYPE_Q5_K: return "Q5_K - Medium";
    default: return ft_type_name(t);
    }
}

void bench_model_describe(const struct ft_gguf *g, const char *arch, struct bench_model_info *out) {
    memset(out, 0, sizeof(*out));
    snprintf(out->arch, sizeof(out->arch), "%s", arch);
    uint64_t count[FT_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < ft_gguf_n_tensors(g); i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
        uint64_t ne = 1;
        for (int d = 0; d < t->n_dims; d++)
            ne *= (uint64_t)t->ne[d];
        out->n_params += ne;
        out->model_size += t->size;
        if (t->n_dims >= 2 && (unsigned)t->type < FT_TYPE_COUNT)
            count[t->type]++;
    }
    struct ft_str s;
    if (ft_gguf_get_str(g, "general.size_label", &s) == 0 && s.len > 0 && s.len < sizeof(out->size_label))
        snprintf(out->size_label, sizeof(out->size_label), "%.*s", (int)s.len, s.s);
    else
        ft_cli_size_label(out->n_params, out->size_label, sizeof(out->size_label));
    /* Printable ASCII only: the label ends up in tables and CSV. */
    for (char *c = out->size_label; *c; c++)
        if (*c < 0x21 || *c > 0x7e)
            *c = '?';

    uint32_t ft;
    const char *name = ft_gguf_get_u32(g, "general.file_type", &ft) == 0 ? ftype_name(ft) : NULL;
    if (name) {
        snprintf(out->ftype, sizeof(out->ftype), "%s", name);
    } else {
        int best = -1;
        for (int t = 0; t < FT_TYPE_COUNT; t++)
            if (count[t] && (best < 0 || count[t] > count[best]))
                best = t;
        snprintf(out->ftype, sizeof(out->ftype), "(guessed) %s",
                 best < 0 ? "unknown" : ftype_of_type((enum ft_type)best));
    }
    snprintf(out->model_type, sizeof(out->model_type), "%s %s %s", out->arch, out->size_label, out->ftype);
}

/* ---- statistics --------------------------------------------------------------- */

static double sample_ts(const struct bench_result *r, int i) {
    return 1e9 * (double)(r->n_prompt + (int64_t)r->n_gen * FT_MAX(1, r->n_parallel)) / (double)r->samples_ns[i];
}

double bench_avg_ts(const struct bench_result *r) {
    if (r->n_samples == 0)
        return 0.0;
    double s = 0.0;
    for (int i = 0; i < r->n_samples; i++)
        s += sample_ts(r, i);
    return s / r->n_samples;
}

double bench_stddev_ts(const struct bench_result *r) {
    if (r->n_samples <= 1)
        return 0.0;
    const double mean = bench_avg_ts(r);
    double ss = 0.0;
    for (int i = 0; i < r->n_samples; i++)
        ss += (sample_ts(r, i) - mean) * (sample_ts(r, i) - mean);
    return sqrt(ss / (r->n_samples - 1));
}

static uint64_t avg_ns(const struct bench_result *r) {
    if (r->n_samples == 0)
        return 0;
    double s = 0.0;
    for (int i = 0; i < r->n_samples; i++)
        s += (double)r->samples_ns[i];
    return (uint64_t)(s / r->n_samples);
}

static uint64_t stddev_ns(const struct bench_result *r) {
    if (r->n_samples <= 1)
        return 0;
    const double mean = (double)avg_ns(r);
    double ss = 0.0;
    for (int i = 0; i < r->n_samples; i++)
        ss += ((double)r->samples_ns[i] - mean) * ((double)r->samples_ns[i] - mean);
    return (uint64_t)sqrt(ss / (r->n_samples - 1));
}

void bench_test_name(const struct bench_result *r, char *buf, size_t cap) {
    int n;
    if (r->n_prompt > 0 && r->n_gen == 0)
        n = snprintf(buf, cap, "pp%d", r->n_prompt);
    else if (r->n_gen > 0 && r->n_prompt == 0)
        n = snprintf(buf, cap, "tg%d", r->n_gen);
    else
        n = snprintf(buf, cap, "pp%d+tg%d", r->n_prompt, r->n_gen);
    if (r->n_parallel > 1 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " x%d", r->n_parallel);
    if (r->n_depth > 0 && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " @ d%d", r->n_depth);
}

/* ---- formats -------------------------------------------------------------------- */

int bench_format_parse(const char *s, enum bench_format *out) {
    static const struct {
        const char *name;
        enum bench_format fmt;
    } names[] = {{"md", BENCH_MD}, {"csv", BENCH_CSV}, {"json", BENCH_JSON}, {"jsonl", BENCH_JSONL}};
    for (size_t i = 0; i < FT_ARRAY_LEN(names); i++) {
        if (!strcmp(s, names[i].name)) {
            *out = names[i].fmt;
            return 0;
        }
    }
    return -1;
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

/* The fields of CSV and JSON, in order. */
enum field_kind { F_STR, F_INT, F_FLOAT };
struct field {
    const char *name;
    enum field_kind kind;
    const char *s;
    long long i;
    double d;
};

#define N_FIELDS 21

static void fill_fields(const struct bench_result *r, struct field *fl, char *test, size_t test_cap) {
    bench_test_name(r, test, test_cap);
    const struct field v[N_FIELDS] = {
        {"ft_version", F_STR, FT_CLI_VERSION, 0, 0},
        {"cpu_info", F_STR, r->cpu_info, 0, 0},
        {"backends", F_STR, "CPU", 0, 0},
        {"isa", F_STR, r->isa, 0, 0},
        {"model_filename", F_STR, r->model_filename, 0, 0},
        {"model_type", F_STR, r->model->model_type, 0, 0},
        {"model_size", F_INT, NULL, (long long)r->model->model_size, 0},
        {"model_n_params", F_INT, NULL, (long long)r->model->n_params, 0},
        {"n_params", F_INT, NULL, (long long)r->model->n_params, 0},
        {"n_batch", F_INT, NULL, r->n_batch, 0},
        {"n_threads", F_INT, NULL, r->n_threads, 0},
        {"numa", F_STR, r->numa, 0, 0},
        {"n_prompt", F_INT, NULL, r->n_prompt, 0},
        {"n_gen", F_INT, NULL, r->n_gen, 0},
        {"n_depth", F_INT, NULL, r->n_depth, 0},
        {"n_parallel", F_INT, NULL, FT_MAX(1, r->n_parallel), 0},
        {"test", F_STR, test, 0, 0},
        {"test_time", F_STR, r->test_time, 0, 0},
        {"avg_ns", F_INT, NULL, (long long)avg_ns(r), 0},
        {"stddev_ns", F_INT, NULL, (long long)stddev_ns(r), 0},
        {"avg_ts", F_FLOAT, NULL, 0, bench_avg_ts(r)},
    };
    memcpy(fl, v, sizeof(v));
}

static void print_value(FILE *f, const struct field *x, bool csv) {
    switch (x->kind) {
    case F_STR: csv ? ft_cli_csv_str(f, x->s) : json_str(f, x->s); break;
    case F_INT: fprintf(f, csv ? "\"%lld\"" : "%lld", x->i); break;
    case F_FLOAT: fprintf(f, csv ? "\"%.6f\"" : "%.6f", x->d); break;
    }
}

static void md_size(uint64_t bytes, char *buf, size_t cap) {
    if (bytes < (1ull << 30))
        snprintf(buf, cap, "%.2f MiB", (double)bytes / (1 << 20));
    else
        snprintf(buf, cap, "%.2f GiB", (double)bytes / (1 << 30));
}

static void md_params(uint64_t n, char *buf, size_t cap) {
    if (n < 1000000000ull)
        snprintf(buf, cap, "%.2f M", (double)n / 1e6);
    else
        snprintf(buf, cap, "%.2f B", (double)n / 1e9);
}

void bench_report_begin(FILE *f, enum bench_format fmt) {
    switch (fmt) {
    case BENCH_MD:
        fprintf(f, "| %-24s | %10s | %9s | %-16s | %-8s | %7s | %13s | %20s |\n", "model", "size", "params", "type",
                "isa", "threads", "test", "t/s");
        fprintf(f, "| %.24s | %.9s: | %.8s: | %.16s | %.8s | %.6s: | %.12s: | %.19s: |\n",
                "------------------------", "----------", "---------", "----------------", "--------", "-------",
                "-------------", "--------------------");
        break;
    case BENCH_CSV: {
        struct field fl[N_FIELDS];
        char test[32];
        const struct bench_model_info mi = {0};
        const struct bench_result dummy = {.model = &mi, .model_filename = "", .isa = "", .cpu_info = "", .numa = ""};
        fill_fields(&dummy, fl, test, sizeof(test));
        for (int i = 0; i < N_FIELDS; i++)
            fprintf(f, "%s,", fl[i].name);
        fprintf(f, "stddev_ts\n");
        break;
    }
    case BENCH_JSON: fprintf(f, "[\n"); break;
    case BENCH_JSONL: break;
    }
    fflush(f);
}

static int g_json_rows; /* rows printed so far (JSON needs commas between them) */

void bench_report_row(FILE *f, enum bench_format fmt, const struct bench_result *r) {
    struct field fl[N_FIELDS];
    char test[32];
    fill_fields(r, fl, test, sizeof(test));
    const double sd = bench_stddev_ts(r);
    switch (fmt) {
    case BENCH_MD: {
        char name[64], size[32], params[32], ts[48];
        snprintf(name, sizeof(name), "%s %s", r->model->arch, r->model->size_label);
        md_size(r->model->model_size, size, sizeof(size));
        md_params(r->model->n_params, params, sizeof(params));
        snprintf(ts, sizeof(ts), "%.2f ± %.2f", bench_avg_ts(r), sd);
        /* "±" is two bytes in UTF-8: one more column of padding bytes. */
        fprintf(f, "| %-24s | %10s | %9s | %-16s | %-8s | %7d | %13s | %21s |\n", name, size, params, r->model->ftype,
                r->isa, r->n_threads, test, ts);
        break;
    }
    case BENCH_CSV:
        for (int i = 0; i < N_FIELDS; i++) {
            print_value(f, &fl[i], true);
            fputc(',', f);
        }
        fprintf(f, "\"%.6f\"\n", sd);
        break;
    case BENCH_JSON:
    case BENCH_JSONL: {
        const bool pretty = fmt == BENCH_JSON;
        if (pretty)
            fprintf(f, "%s  {\n", g_json_rows++ ? ",\n" : "");
        else
            fputc('{', f);
        for (int i = 0; i < N_FIELDS; i++) {
            fprintf(f, pretty ? "    \"%s\": " : "\"%s\": ", fl[i].name);
            print_value(f, &fl[i], false);
            fprintf(f, pretty ? ",\n" : ", ");
        }
        fprintf(f, pretty ? "    \"stddev_ts\": %.6f,\n    \"samples_ns\": [" : "\"stddev_ts\": %.6f, \"samples_ns\": [",
                sd);
        for (int i = 0; i < r->n_samples; i++)
            fprintf(f, "%s%" PRIu64, i ? ", " : " ", r->samples_ns[i]);
        fprintf(f, pretty ? " ],\n    \"samples_ts\": [" : " ], \"samples_ts\": [");
        for (int i = 0; i < r->n_samples; i++)
            fprintf(f, "%s%.6f", i ? ", " : " ", sample_ts(r, i));
        fprintf(f, pretty ? " ]\n  }" : " ]}\n");
        break;
    }
    }
    fflush(f);
}

void bench_report_end(FILE *f, enum bench_format fmt, const char *footer) {
    if (fmt == BENCH_MD)
        fprintf(f, "\n%s\n", footer);
    else if (fmt == BENCH_JSON)
        fprintf(f, "%s]\n", g_json_rows ? "\n" : "");
    fflush(f);
}
