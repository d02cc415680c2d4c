/* ft-bench-kernels: throughput of the row kernels per type per kernel level.
 *
 * Decode is a matrix-vector product: every weight row is dotted with one
 * quantized activation row, so vec_dot over a weight matrix row by row is
 * the whole cost, and it should run at memory bandwidth. For each type and
 * each level this CPU supports it prints, single-threaded:
 *   L2:     the first rows of it, 1 MiB, pass after pass: the data stays
 *           in L2, so this is the kernel's compute speed;
 *   hot:    a 4096 x 4096 matrix, pass after pass (it stays in L3 when
 *           small enough);
 *   stream: rows of 4096 walked through a 1 GiB buffer, bigger than any
 *           last-level cache, so every byte comes from DRAM as in decode;
 * as GB/s of weight bytes read and Gelem/s (weights per second), plus the
 * speed-up of the hot number over the scalar reference (when the scalar
 * level is among those measured). Then the activation
 * quantizers and dequantizers (from_float / to_float) per level, and the
 * prefill GEMM (include/ft/qgemm.h) per type and level: a 256 x 2048 weight
 * matrix times 64 tokens, one thread, in cache, as GMAC/s (multiply-adds of
 * weights and activations) of the kernel alone, the cost of unpacking the
 * weights as a share of the kernel time at 512 tokens, and the same product
 * done with vec_dot row by row for comparison; for types repacked at load
 * (kernel_rw), the repacked kernel at 1, 4 and 8 tokens (decode of 1, 4
 * and 8 streams), and at 1 token on the one-token activation tile
 * (kernel_rw1, what decode of one stream runs where the level has it),
 * also over 512 MiB of tiles from DRAM ("stream", GB/s of tiles read).
 *
 * Times are the thread's CPU time (best of the repetitions), so other
 * processes on a shared machine disturb them less than wall-clock time.
 *
 * Not a test: it asserts nothing. Usage:
 *   ft-bench-kernels [--types Q4_0,Q4_K,...] [--isa avx2,avx512] [--seconds S] [--no-stream] [--no-gemm]
 */
#include "ft/cpu.h"
#include "ft/ops.h"
#include "ft/qgemm.h"
#include "ft/types.h"
#include "simd/fp16.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROW 4096
#define HOT_ROWS 4096
#define STREAM_BYTES (1ull << 30)
#define RW_STREAM_BYTES (512ull << 20)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The smaller of best and a measured time dt. A dt of 0 is no measurement:
 * this guest's thread CPU clock once read the same time before and after a
 * 4096-element dequantization, and the table printed "inf". */
static double best_of(double best, double dt) { return dt > 0 && dt < best ? dt : best; }

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint64_t rng_next(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static float rng_gauss(void) {
    float s = 0.0f;
    for (int i = 0; i < 12; i++)
        s += (float)((rng_next() >> 40) * 0x1p-24);
    return s - 6.0f;
}

/* Random rows with sane scales: the speed of a kernel does not depend on
 * the values, and quantizing 16M weights with the reference K-quant
 * searches would take minutes. Float types get finite values. */
static void fill_weights(enum ft_type t, uint8_t *x, size_t bytes) {
    const struct ft_type_info *ti = ft_type_info(t);
    if (!ti->is_quantized) {
        for (size_t i = 0; i + ti->type_size <= bytes; i += ti->type_size) {
            const float f = rng_gauss() * 0.02f;
            if (t == FT_TYPE_F32)
                memcpy(x + i, &f, 4);
            else {
                const uint16_t h = t == FT_TYPE_F16 ? ft_float_to_half(f) : ft_float_to_bfloat(f);
                memcpy(x + i, &h, 2);
            }
        }
        return;
    }
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        const uint64_t r = rng_next();
        memcpy(x + i, &r, 8);
    }
    /* scales: every half field at the offsets of quant_ref.h set to ~0.01 */
    const uint16_t d = ft_float_to_half(0.01f);
    size_t off[2] = {0, 0};
    int nf = 0;
    switch (t) {
    case FT_TYPE_Q4_0: case FT_TYPE_Q5_0: case FT_TYPE_Q8_0: off[0] = 0; nf = 1; break;
    case FT_TYPE_Q4_1: case FT_TYPE_Q5_1: off[0] = 0; off[1] = 2; nf = 2; break;
    case FT_TYPE_Q2_K: off[0] = 80; off[1] = 82; nf = 2; break;
    case FT_TYPE_Q3_K: off[0] = 108; nf = 1; break;
    case FT_TYPE_Q4_K: case FT_TYPE_Q5_K: off[0] = 0; off[1] = 2; nf = 2; break;
    case FT_TYPE_Q6_K: off[0] = 208; nf = 1; break;
    default: break;
    }
    for (size_t b = 0; b + ti->type_size <= bytes; b += ti->type_size)
        for (int k = 0; k < nf; k++)
            memcpy(x + b + off[k], &d, 2);
}

static const enum ft_type k_types[] = {
    FT_TYPE_F32,  FT_TYPE_F16,  FT_TYPE_BF16, FT_TYPE_Q8_0, FT_TYPE_Q4_0, FT_TYPE_Q4_1, FT_TYPE_Q5_0,
    FT_TYPE_Q5_1, FT_TYPE_Q2_K, FT_TYPE_Q3_K, FT_TYPE_Q4_K, FT_TYPE_Q5_K, FT_TYPE_Q6_K,
};

static volatile float g_sink;

/* Dot `rows` rows starting at row `first` (mod nrows) against y; returns
 * the row after the last one. */
static int64_t run_rows(const struct ft_type_info *ti, const uint8_t *w, size_t row_bytes, int64_t nrows,
                        int64_t first, int64_t rows, const void *y) {
    float acc = 0.0f;
    int64_t r = first;
    for (int64_t k = 0; k < rows; k++) {
        float s;
        ti->vec_dot(ROW, &s, w + (size_t)r * row_bytes, y);
        acc += s;
        if (++r == nrows)
            r = 0;
    }
    g_sink = acc;
    return r;
}

/* Best pass time over at least `seconds` of passes of `rows` rows. */
static double time_passes(const struct ft_type_info *ti, const uint8_t *w, size_t row_bytes, int64_t nrows,
                          int64_t rows, const void *y, double seconds) {
    double best = 1e30, start = now();
    int64_t pos = 0;
    int passes = 0;
    pos = run_rows(ti, w, row_bytes, nrows, pos, rows < 64 ? rows : 64, y); /* warm-up */
    while (passes < 3 || now() - start < seconds) {
        const double t0 = now();
        pos = run_rows(ti, w, row_bytes, nrows, pos, rows, y);
        const double dt = now() - t0;
        best = best_of(best, dt);
        passes++;
        if (passes > 1000)
            break;
    }
    return best;
}

static int in_list(const char *list, const char *name);

/* The repacked kernel over the rows x k weights w (rows wr bytes apart) at
 * 1, 4 and 8 tokens of the activation tile at, and kernel_rw1 (one token
 * on the one-token tile of activation row a) where the level has it:
 * GMAC/s, printed on the current line. out holds rows x 8 floats. */
static void bench_rw(const struct ft_qgemm *g, const uint8_t *w, size_t wr, int rows, int64_t k, const uint8_t *at,
                     const uint8_t *a, float *out, double seconds) {
    const size_t rs = g->rw_tile_size(k);
    const int n_wt = rows / g->tile_rows;
    uint8_t *rw = aligned_alloc(64, (rs * (size_t)n_wt + 63) / 64 * 64);
    for (int r = 0; r < n_wt; r++)
        g->repack_w(w + (size_t)r * g->tile_rows * wr, wr, k, rw + (size_t)r * rs);
    uint8_t *a1 = g->kernel_rw1 ? aligned_alloc(64, (g->a1_tile_size(k) + 63) / 64 * 64) : NULL;
    if (a1)
        g->pack_a1(a, k, a1);
    const int toks[4] = {1, 4, 8, 1};
    for (int i = 0; i < (a1 ? 4 : 3); i++) {
        const int nt = toks[i] < g->tile_tokens ? toks[i] : g->tile_tokens;
        double best = 1e30, start = now();
        for (int rep = 0; rep < 5 || now() - start < seconds / 4; rep++) {
            const double t0 = now();
            for (int r = 0; r < n_wt; r++)
                if (i == 3)
                    g->kernel_rw1(rw + (size_t)r * rs, a1, k, g->tile_rows, out + (size_t)r * g->tile_rows);
                else
                    g->kernel_rw(rw + (size_t)r * rs, at, k, g->tile_rows, nt, out + (size_t)r * g->tile_rows, rows);
            const double dt = now() - t0;
            best = best_of(best, dt);
            if (rep > 20000)
                break;
        }
        printf("%s%.1f", i == 3 ? "  1-token tile " : i ? " / " : "  ", (double)rows * (double)k * nt / best * 1e-9);
    }
    /* decode's case: the one-token kernel over tiles that come from DRAM
     * (copies of these, RW_STREAM_BYTES in all), as GB/s of tiles read */
    uint8_t *big = a1 ? aligned_alloc(64, RW_STREAM_BYTES) : NULL;
    if (big) {
        const size_t blk = rs * (size_t)n_wt;
        const size_t n_blk = RW_STREAM_BYTES / blk;
        for (size_t i = 0; i < n_blk; i++)
            memcpy(big + i * blk, rw, blk);
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            const double t0 = now();
            for (size_t i = 0; i < n_blk * (size_t)n_wt; i++)
                g->kernel_rw1(big + i * rs, a1, k, g->tile_rows, out + (i % (size_t)n_wt) * (size_t)g->tile_rows);
            best = best_of(best, now() - t0);
        }
        printf("  stream %.1f GB/s", (double)(n_blk * blk) / best * 1e-9);
    }
    free(big);
    free(a1);
    free(rw);
}

/* The GEMM section (see the top of the file). Weights from the reference
 * quantizer (the K-quant search is slow, so 16 distinct rows repeated). */
static void bench_gemm(const char *types, const char *isas, const float *act, double seconds) {
    enum { G_ROWS = 256, G_K = 2048, G_TOK = 64 };
    printf("\nGEMM, %d x %d weights x %d tokens, one thread: GMAC/s; pack = unpacking as %% of the kernel at "
           "512 tokens\n",
           G_ROWS, G_K, G_TOK);
    printf("%-5s %-13s %9s %7s %14s %23s\n", "type", "level", "GMAC/s", "pack", "vec_dot GMAC/s",
           "repacked 1/4/8 tok, 1-token tile");
    float *f = malloc(G_K * sizeof(float));
    float *out = malloc((size_t)G_ROWS * G_TOK * sizeof(float));
    for (size_t ti = 0; ti < sizeof(k_types) / sizeof(k_types[0]); ti++) {
        const enum ft_type t = k_types[ti];
        if (!in_list(types, ft_type_name(t)) || !ft_type_info(t)->is_quantized)
            continue;
        const struct ft_type_info *ref = ft_type_traits_ref(t);
        const size_t wr = ft_row_size(t, G_K), ar = ft_row_size(ref->vec_dot_type, G_K);
        uint8_t *w = malloc(wr * G_ROWS), *a = malloc(ar * G_TOK);
        for (int r = 0; r < G_ROWS; r++) {
            if (r < 16) {
                for (int i = 0; i < G_K; i++)
                    f[i] = rng_gauss() * 0.02f;
                ref->from_float(f, w + (size_t)r * wr, G_K);
            } else {
                memcpy(w + (size_t)r * wr, w + (size_t)(r % 16) * wr, wr);
            }
        }
        for (int i = 0; i < G_TOK; i++)
            ft_type_traits_ref(ref->vec_dot_type)->from_float(act, a + (size_t)i * ar, G_K);
        for (int l = 0; l < FT_ISA_COUNT; l++) {
            const enum ft_isa isa = (enum ft_isa)l;
            /* the entry a batch of G_TOK takes (a level may switch kernels
             * by batch size); the repacked columns are its smallest one's */
            const struct ft_qgemm *head = ft_isa_supported(isa) ? ft_qgemm_get_isa(t, isa) : NULL;
            if (!head || !in_list(isas, ft_isa_name(isa)))
                continue;
            const struct ft_qgemm *g = ft_qgemm_for_tokens(head, G_TOK);
            const size_t ws = g->w_tile_size(G_K), as = g->a_tile_size(G_K);
            const int n_wt = G_ROWS / g->tile_rows, n_at = G_TOK / g->tile_tokens;
            uint8_t *wt = aligned_alloc(64, (ws * (size_t)n_wt + 63) / 64 * 64);
            uint8_t *at = aligned_alloc(64, (as * (size_t)n_at + 63) / 64 * 64);
            for (int i = 0; i < n_at; i++)
                g->pack_a(a + (size_t)i * g->tile_tokens * ar, ar, g->tile_tokens, G_K, at + (size_t)i * as);
            double best_pack = 1e30, best_kern = 1e30, best_dot = 1e30, start = now();
            const ft_vec_dot_fn dot = ft_type_traits_isa(t, isa)->vec_dot;
            for (int rep = 0; rep < 5 || now() - start < seconds; rep++) {
                const double t0 = now();
                for (int r = 0; r < n_wt; r++)
                    g->pack_w(w + (size_t)r * g->tile_rows * wr, wr, g->tile_rows, G_K, wt + (size_t)r * ws);
                const double t1 = now();
                for (int i = 0; i < n_at; i++)
                    for (int r = 0; r < n_wt; r++)
                        g->kernel(wt + (size_t)r * ws, at + (size_t)i * as, G_K, g->tile_rows, g->tile_tokens,
                                  out + (size_t)i * g->tile_tokens * G_ROWS + (size_t)r * g->tile_rows, G_ROWS);
                const double t2 = now();
                if (rep % 4 == 0) /* vec_dot is slow: fewer samples */
                    ft_matmul_rows_ref(dot, w, wr, G_K, 0, G_ROWS, a, ar, G_TOK, out, G_ROWS);
                const double t3 = now();
                best_pack = best_of(best_pack, t1 - t0);
                best_kern = best_of(best_kern, t2 - t1);
                if (rep % 4 == 0)
                    best_dot = best_of(best_dot, t3 - t2);
                if (rep > 2000)
                    break;
            }
            const double macs = (double)G_ROWS * G_K * G_TOK;
            printf("%-5s %-13s %9.1f %6.1f%% %14.1f", ft_type_name(t), ft_isa_name(isa), macs / best_kern * 1e-9,
                   100.0 * best_pack / (best_kern * 512 / G_TOK), macs / best_dot * 1e-9);
            if (head->repack_w) {
                if (head != g) { /* its own activation tiles */
                    free(at);
                    const size_t hs = head->a_tile_size(G_K), n_ht = G_TOK / head->tile_tokens;
                    at = aligned_alloc(64, (hs * n_ht + 63) / 64 * 64);
                    for (size_t i = 0; i < n_ht; i++)
                        head->pack_a(a + i * head->tile_tokens * ar, ar, head->tile_tokens, G_K, at + i * hs);
                }
                bench_rw(head, w, wr, G_ROWS, G_K, at, a, out, seconds);
            }
            printf("\n");
            fflush(stdout);
            free(wt);
            free(at);
        }
        free(w);
        free(a);
    }
    free(f);
    free(out);
}

static int in_list(const char *list, const char *name) {
    if (!list)
        return 1;
    const size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n) {
        const int start_ok = p == list || p[-1] == ',';
        const int end_ok = p[n] == '\0' || p[n] == ',';
        if (start_ok && end_ok)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *types = NULL, *isas = NULL;
    double seconds = 0.3;
    int stream = 1, gemm = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--types") == 0 && i + 1 < argc)
            types = argv[++i];
        else if (strcmp(argv[i], "--isa") == 0 && i + 1 < argc)
            isas = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--no-stream") == 0)
            stream = 0;
        else if (strcmp(argv[i], "--no-gemm") == 0)
            gemm = 0;
        else {
            fprintf(stderr, "usage: %s [--types Q4_0,Q4_K,...] [--isa scalar,avx2,...] [--seconds S] [--no-stream] [--no-gemm]\n",
                    argv[0]);
            return 2;
        }
    }

    char line[1024];
    ft_cpu_describe(line, sizeof(line));
    printf("cpu: %s\n", line);
    printf("vec_dot, rows of %d, single thread; hot = %dx%d matrix, stream = rows of a 1 GiB buffer\n\n", ROW,
           HOT_ROWS, ROW);
    printf("%-5s %-13s %9s %9s %9s %11s %10s\n", "type", "level", "L2 GB/s", "hot GB/s", "Gelem/s", "stream GB/s",
           "vs scalar");

    float *act = malloc(ROW * sizeof(float));
    for (int i = 0; i < ROW; i++)
        act[i] = rng_gauss();
    uint8_t *big = stream ? malloc(STREAM_BYTES) : NULL;
    if (stream && !big) {
        fprintf(stderr, "cannot allocate 1 GiB for the stream test; use --no-stream\n");
        return 1;
    }

    for (size_t ti = 0; ti < sizeof(k_types) / sizeof(k_types[0]); ti++) {
        const enum ft_type t = k_types[ti];
        if (!in_list(types, ft_type_name(t)))
            continue;
        const size_t row_bytes = ft_row_size(t, ROW);
        uint8_t *hot = malloc(row_bytes * HOT_ROWS);
        fill_weights(t, hot, row_bytes * HOT_ROWS);
        int64_t stream_rows = 0;
        if (stream) {
            stream_rows = (int64_t)(STREAM_BYTES / row_bytes);
            fill_weights(t, big, (size_t)stream_rows * row_bytes);
        }
        double scalar_hot = 0.0;
        for (int l = 0; l < FT_ISA_COUNT; l++) {
            const enum ft_isa isa = (enum ft_isa)l;
            if (!ft_isa_supported(isa) || !in_list(isas, ft_isa_name(isa)))
                continue;
            const struct ft_type_info *tt = ft_type_traits_isa(t, isa);
            const struct ft_type_info *at = ft_type_traits_isa(tt->vec_dot_type, isa);
            void *y = malloc(ft_row_size(tt->vec_dot_type, ROW));
            at->from_float(act, y, ROW);

            const int64_t l2_rows = (int64_t)((1u << 20) / row_bytes);
            const double tl2 = time_passes(tt, hot, row_bytes, l2_rows, l2_rows, y, seconds / 2);
            const double th = time_passes(tt, hot, row_bytes, HOT_ROWS, HOT_ROWS, y, seconds);
            const double gbs = (double)row_bytes * HOT_ROWS / th * 1e-9;
            const double gel = (double)ROW * HOT_ROWS / th * 1e-9;
            if (isa == FT_ISA_SCALAR)
                scalar_hot = th;
            char sgbs[32] = "-";
            /* the reference is compute-bound: streaming it only costs time */
            if (stream && isa != FT_ISA_SCALAR) {
                const int64_t rows = stream_rows < HOT_ROWS * 4 ? stream_rows : HOT_ROWS * 4;
                const double ts = time_passes(tt, big, row_bytes, stream_rows, rows, y, seconds);
                snprintf(sgbs, sizeof(sgbs), "%.2f", (double)row_bytes * (double)rows / ts * 1e-9);
            }
            char speed[32] = "";
            if (scalar_hot > 0 && isa != FT_ISA_SCALAR)
                snprintf(speed, sizeof(speed), "%.1fx", scalar_hot / th);
            printf("%-5s %-13s %9.2f %9.2f %9.2f %11s %10s\n", ft_type_name(t), ft_isa_name(isa),
                       (double)row_bytes * (double)l2_rows / tl2 * 1e-9, gbs, gel, sgbs, speed);
            fflush(stdout);
            free(y);
        }
        free(hot);
    }
    free(big);

    /* activation quantizers and dequantizers, on a hot row of 4096 */
    printf("\nfrom_float / to_float, %d elements, Gelem/s\n", ROW);
    printf("%-14s", "op");
    for (int l = 0; l < FT_ISA_COUNT; l++)
        if (ft_isa_supported((enum ft_isa)l))
            printf(" %13s", ft_isa_name((enum ft_isa)l));
    printf("\n");
    const enum ft_type conv[] = {FT_TYPE_Q8_0, FT_TYPE_Q8_1, FT_TYPE_Q8_K, FT_TYPE_F16,
                                 FT_TYPE_BF16, FT_TYPE_Q4_0, FT_TYPE_Q4_K, FT_TYPE_Q6_K};
    uint8_t *buf = malloc(ROW * 4);
    float *out = malloc(ROW * sizeof(float));
    for (int dir = 0; dir < 2; dir++) {
        for (size_t c = 0; c < sizeof(conv) / sizeof(conv[0]); c++) {
            const enum ft_type t = conv[c];
            if (dir == 0 && (t == FT_TYPE_Q4_0 || t == FT_TYPE_Q4_K || t == FT_TYPE_Q6_K))
                continue; /* weights: quantized offline by the reference */
            if (dir == 1 && (t == FT_TYPE_Q8_1 || t == FT_TYPE_Q8_K))
                continue;
            printf("%-5s %-8s", ft_type_name(t), dir == 0 ? "from" : "to");
            ft_type_traits_ref(t)->from_float(act, buf, ROW);
            for (int l = 0; l < FT_ISA_COUNT; l++) {
                if (!ft_isa_supported((enum ft_isa)l))
                    continue;
                const struct ft_type_info *tt = ft_type_traits_isa(t, (enum ft_isa)l);
                double best = 1e30, start = now();
                int reps = 0;
                while (reps < 5 || now() - start < seconds / 4) {
                    const double t0 = now();
                    for (int k = 0; k < 16; k++) {
                        if (dir == 0)
                            tt->from_float(act, buf, ROW);
                        else
                            tt->to_float(buf, out, ROW);
                    }
                    const double dt = (now() - t0) / 16;
                    best = best_of(best, dt);
                    reps++;
                }
                printf(" %13.2f", ROW / best * 1e-9);
            }
            printf("\n");
        }
    }
    free(buf);
    free(out);
    if (gemm)
        bench_gemm(types, isas, act, seconds);
    free(act);
    return 0;
}
