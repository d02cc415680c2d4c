/* Results of `ft bench` and how they are printed: a markdown table, CSV,
 * JSON or JSON lines, with llama-bench's field names (model_filename,
 * model_type, model_size, model_n_params, n_threads, n_prompt, n_gen,
 * avg_ns, stddev_ns, avg_ts, stddev_ts, samples_ns, samples_ts) so tools
 * that read llama-bench output read ours, plus FreeToken's own (isa, numa,
 * n_params, test). */
#ifndef FT_CLI_BENCH_REPORT_H
#define FT_CLI_BENCH_REPORT_H

#include "ft/gguf.h"

#include <stdint.h>
#include <stdio.h>

enum bench_format { BENCH_MD, BENCH_CSV, BENCH_JSON, BENCH_JSONL };

/* What a model file is, in llama-bench's terms. */
struct bench_model_info {
    char arch[32];
    char size_label[16]; /* general.size_label, else from the parameter count: "1.2B" */
    char ftype[40];      /* llama.cpp's file-type name: "F16", "Q4_K - Medium" */
    char model_type[96]; /* "<arch> <size_label> <ftype>", llama_model_desc's format */
    uint64_t model_size; /* bytes of tensor data */
    uint64_t n_params;   /* elements of all tensors */
};

/* One test (ppN or tgN) of one model at one thread count. */
struct bench_result {
    const char *model_filename;
    const struct bench_model_info *model;
    const char *isa;      /* kernel level: "avx512" */
    const char *cpu_info; /* CPU brand string */
    const char *numa;     /* "off", ... */
    int n_threads, n_batch, n_prompt, n_gen;
    int n_depth;        /* tokens in the KV cache before the test (llama-bench -d) */
    int n_parallel;     /* tgN: sequences decoding together (0 or 1: one) */
    char test_time[32]; /* ISO 8601, UTC, when the test started */
    int n_samples;
    const uint64_t *samples_ns; /* one per repetition, after the warm-up */
};

void bench_model_describe(const struct ft_gguf *g, const char *arch, struct bench_model_info *out);

/* Mean and sample standard deviation (n - 1), as llama-bench computes them;
 * tokens/s per sample is 1e9 * (n_prompt + n_gen * n_parallel) / ns. */
double bench_avg_ts(const struct bench_result *r);
double bench_stddev_ts(const struct bench_result *r);

/* "pp512", "tg128" or "pp512+tg128", with " x8" for 8 parallel sequences
 * and " @ d4096" at a depth (llama-bench's names, and ours for -np). */
void bench_test_name(const struct bench_result *r, char *buf, size_t cap);

int bench_format_parse(const char *s, enum bench_format *out); /* -1: unknown */
void bench_report_begin(FILE *f, enum bench_format fmt);
void bench_report_row(FILE *f, enum bench_format fmt, const struct bench_result *r);
void bench_report_end(FILE *f, enum bench_format fmt, const char *footer);

#endif
