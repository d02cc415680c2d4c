/* ft compare: shared between its driver (cmd_compare.c), the bench
 * subprocess (cmd_compare_bench.c) and the chart (cmd_compare_chart.c). */
#ifndef FT_CLI_CMD_COMPARE_H
#define FT_CLI_CMD_COMPARE_H

#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>

/* One compared model (the base is row 0). */
struct cmp_row {
    char label[64];   /* "Q4_K_M", "base (Q4_K_M)", or a file's stem */
    char path[4096];
    char ftype[32];   /* general.file_type's name, "" if unknown */
    bool is_base;
    bool same_as_base; /* every tensor has the base's type: a copy of it */
    uint64_t file_bytes, tensor_bytes, n_params;
    double bpw;
    bool has_speed;
    double pp_ts, pp_sd, tg_ts, tg_sd; /* tokens/s, mean and standard deviation */
    double ppl, ppl_err;
    bool has_kld;
    double kld, kld_err, kld_p99, same_top, same_top_err, dp, dp_err;
};

struct cmp_report {
    const char *model_name; /* general.name of the base, or its file name */
    const char *base_path;
    const char *base_ftype;
    bool base_quantized;
    const char *text_path;
    int32_t n_ctx, n_chunk;
    int64_t n_scored;
    int threads;
    int bench_p, bench_n, bench_r;
    char cpu[160]; /* "Intel(R) Xeon(R) Processor (avx512)" */
    char date[32];
    struct cmp_row *rows;
    int n_rows;
};

/* Run `/proc/self/exe bench -m PATH -p P -n N -r R -t T -o json` and fill
 * the row's speed. Returns 0, or 1 when this ft has no bench command (the
 * caller says what to do), or -1 on another failure (message printed). */
int ft_compare_bench(struct cmp_row *row, int p, int n, int r, int threads);
/* Parse llama-bench-style JSON (an array of rows with n_prompt, n_gen,
 * avg_ts, stddev_ts, or "test": "pp512"/"tg128"). Returns 0 when both a
 * prefill and a decode row were found. */
int ft_compare_parse_bench_json(const char *json, double *pp_ts, double *pp_sd, double *tg_ts, double *tg_sd);

/* Write the chart (quality loss against decode speed, or against bits per
 * weight when there are no speeds). Returns 0 or -1 (message printed). */
void ft_compare_write_svg(const struct cmp_report *r, FILE *f);

#endif
