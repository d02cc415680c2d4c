/* Tests of perplexity and KL divergence (engine/perplexity*.c) and of the
 * bench-JSON reader of ft compare (cli/cmd_compare_bench.c).
 *
 * Expected values are computed here from the definitions, in double
 * precision and without the code under test:
 *   1. one position: NLL, KLD, Δp, top-1 against a direct computation;
 *   2. llama.cpp's 16-bit log-prob rows: decoded values within half a step
 *      of the exact log-softmax;
 *   3. statistics (PPL ± error, KLD, percentiles, same-top) from their
 *      formulas on known values;
 *   4. the log-prob file reader on the fuzz seeds (written by numpy from
 *      the format's definition) and on hostile variants;
 *   5. with ../shared/models: windows and scored positions checked against
 *      a loop over ft_model_forward written here; results independent of
 *      the batch size (one window split over calls, several windows per
 *      call) and of the thread count; a model against its own saved
 *      log-probabilities has KLD ~0; file and exact KLD agree.
 * ft perplexity's numbers are also checked against numpy on `ft logits`
 * output and against llama-perplexity itself in tests/e2e/test_perplexity.py. */
#include "ft/common.h"
#include "ft/model.h"
#include "ft/perplexity.h"
#include "ft_test.h"

#include "cli/cmd_compare_bench.c"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static double urand(void) { return (double)(ft_test_rng_next(&g_rng) >> 11) * 0x1p-53; }

static void silence(enum ft_log_level level, const char *func, const char *msg, void *ud) {
    (void)level, (void)func, (void)msg, (void)ud;
}

static void ref_log_softmax(const float *x, int n, double *out) {
    double mx = x[0];
    for (int i = 1; i < n; i++)
        mx = fmax(mx, x[i]);
    double s = 0;
    for (int i = 0; i < n; i++)
        s += exp(x[i] - mx);
    for (int i = 0; i < n; i++)
        out[i] = x[i] - mx - log(s);
}

/* ---- 1, 2: one position ---------------------------------------------------------- */

static void test_position(void) {
    enum { N = 1000 };
    static float q[N], p[N], plogp[N];
    static double lq[N], lp[N];
    static uint16_t row[N + 8];
    for (int trial = 0; trial < 20; trial++) {
        double spread = trial < 10 ? 3.0 : 12.0;
        for (int i = 0; i < N; i++) {
            p[i] = (float)(spread * (urand() - 0.5));
            q[i] = p[i] + (float)(0.3 * (urand() - 0.5));
        }
        int tok = (int)(urand() * N);
        ref_log_softmax(q, N, lq);
        ref_log_softmax(p, N, lp);
        double kld = 0;
        int iq = 0, ip = 0;
        for (int i = 0; i < N; i++) {
            kld += exp(lp[i]) * (lp[i] - lq[i]);
            if (q[i] > q[iq])
                iq = i;
            if (p[i] > p[ip])
                ip = i;
        }
        ft_log_softmax(p, N, plogp);
        for (int i = 0; i < N; i++)
            CHECK_NEAR(plogp[i], lp[i], 1e-5);
        struct ft_ppl_score s;
        ft_ppl_score_row(q, N, tok, plogp, -INFINITY, &s);
        CHECK_NEAR(s.nll, -lq[tok], 1e-5);
        CHECK_NEAR(s.nll_base, -lp[tok], 1e-5);
        CHECK_NEAR(s.kld, kld, 1e-5 + 1e-4 * kld);
        CHECK_NEAR(s.p_diff, exp(lq[tok]) - exp(lp[tok]), 1e-6);
        CHECK(s.same_top == (iq == ip));
        ft_ppl_score_row(q, N, tok, NULL, 0, &s);
        CHECK_NEAR(s.nll, -lq[tok], 1e-5);

        /* 16-bit rows: values above max - 16 within half a step, the rest
         * at or below the row's floor. */
        double nll = ft_logprob_encode(p, N, tok, row);
        CHECK_NEAR(nll, -lp[tok], 1e-5);
        float scale;
        memcpy(&scale, row, 4);
        CHECK(ft_logprob_decode(row, N, plogp) == 0);
        double mx = -INFINITY;
        for (int i = 0; i < N; i++)
            mx = fmax(mx, lp[i]);
        for (int i = 0; i < N; i++) {
            if (lp[i] > mx - 16 + 1e-3)
                CHECKF(fabs(plogp[i] - lp[i]) <= 0.5 * scale + 2e-5, "row %d: %g vs %g", i, plogp[i], lp[i]);
            else
                CHECK(plogp[i] <= lp[i] + 0.5 * scale + 2e-5 || plogp[i] <= mx - 16 + 1e-3);
        }
    }
    /* A flat row: scale 0, every value -ln N. */
    for (int i = 0; i < N; i++)
        p[i] = 1.5f;
    ft_logprob_encode(p, N, 0, row);
    CHECK(ft_logprob_decode(row, N, plogp) == 0);
    CHECK_NEAR(plogp[7], -log((double)N), 1e-5);
    /* Hostile header values are refused. */
    float bad[] = {NAN, INFINITY, -1.0f, 1.0f};
    for (size_t k = 0; k < FT_ARRAY_LEN(bad); k++) {
        memcpy(row, &bad[k], 4);
        CHECK(ft_logprob_decode(row, N, plogp) == FT_EFORMAT);
    }
}

/* ---- 3: statistics ----------------------------------------------------------------- */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_stats(void) {
    enum { N = 101 };
    struct ft_ppl_acc acc = {0};
    static float kv[N], dv[N];
    static double nll[N], nllb[N], kd[N], dp[N];
    int same = 0;
    for (int i = 0; i < N; i++) {
        struct ft_ppl_score s = {.nll = 1 + urand(), .nll_base = 1 + 0.8 * urand(), .kld = 0.01 * urand(),
                                 .p_diff = 0.02 * (urand() - 0.5), .same_top = urand() < 0.9};
        nll[i] = s.nll, nllb[i] = s.nll_base, kd[i] = s.kld, dp[i] = s.p_diff;
        same += s.same_top;
        kv[i] = (float)s.kld;
        dv[i] = (float)s.p_diff;
        ft_ppl_acc_add(&acc, &s);
    }
    struct ft_ppl_stats st;
    ft_ppl_stats_compute(&acc, true, kv, dv, N, &st);
    double m = 0, mb = 0, mk = 0, md = 0;
    for (int i = 0; i < N; i++)
        m += nll[i] / N, mb += nllb[i] / N, mk += kd[i] / N, md += dp[i] / N;
    double v = 0, vb = 0, vk = 0, cov = 0;
    for (int i = 0; i < N; i++) {
        v += (nll[i] - m) * (nll[i] - m) / N;
        vb += (nllb[i] - mb) * (nllb[i] - mb) / N;
        vk += (kd[i] - mk) * (kd[i] - mk) / N;
        cov += (nll[i] - m) * (nllb[i] - mb) / N;
    }
    double e = sqrt(v / (N - 1)), eb = sqrt(vb / (N - 1)), c = cov / (N - 1);
    CHECK_EQ_INT(st.count, N);
    CHECK_NEAR(st.ppl, exp(m), 1e-9);
    CHECK_NEAR(st.ppl_err, exp(m) * e, 1e-9);
    CHECK_NEAR(st.ppl_base, exp(mb), 1e-9);
    CHECK_NEAR(st.ln_ratio, m - mb, 1e-9);
    CHECK_NEAR(st.ln_ratio_err, sqrt(e * e + eb * eb - 2 * c), 1e-9);
    CHECK_NEAR(st.cor_ln_ppl, c / (e * eb), 1e-9);
    CHECK_NEAR(st.ratio, exp(m - mb), 1e-9);
    CHECK_NEAR(st.kld, mk, 1e-9);
    CHECK_NEAR(st.kld_err, sqrt(vk / (N - 1)), 1e-9);
    CHECK_NEAR(st.dp, md, 1e-9);
    CHECK_NEAR(st.same_top, (double)same / N, 1e-12);
    CHECK_NEAR(st.same_top_err, sqrt(st.same_top * (1 - st.same_top) / (N - 1)), 1e-12);
    qsort(kd, N, sizeof(double), cmp_d);
    CHECK_NEAR(st.kld_q.median, kd[N / 2], 1e-7);
    CHECK_NEAR(st.kld_q.min, kd[0], 1e-7);
    CHECK_NEAR(st.kld_q.max, kd[N - 1], 1e-7);
    CHECK_NEAR(st.kld_q.p90, kd[90], 1e-7); /* 0.9 * (N - 1) = 90 exactly */
    CHECK_NEAR(st.kld_q.p99_9, kd[99] + 0.9 * (kd[100] - kd[99]), 1e-7);
    /* No base: only the PPL. */
    ft_ppl_stats_compute(&acc, false, NULL, NULL, 0, &st);
    CHECK(!st.has_base && st.kld == 0);
    CHECK_NEAR(st.ppl, exp(m), 1e-9);
}

/* ---- 4: the file reader ---------------------------------------------------------------- */

static void test_file_reader(void) {
    const char *src = getenv("FT_SOURCE_DIR");
    if (!src) {
        printf("SKIP part: FT_SOURCE_DIR unset; seed files not read\n");
        return;
    }
    static const struct {
        const char *name;
        int open_rc, read_rc; /* read_rc: of row 0 of chunk 0 */
    } seeds[] = {{"small", 0, 0},          {"two_chunks", 0, 0},        {"odd_ctx_vocab", 0, 0},
                 {"flat_row", 0, 0},       {"nan_scale", 0, FT_EFORMAT}, {"truncated", FT_EFORMAT, 0},
                 {"bad_magic", FT_EFORMAT, 0}, {"bad_token", FT_EFORMAT, 0}, {"huge_counts", FT_EFORMAT, 0}};
    ft_log_set_sink(silence, NULL);
    for (size_t i = 0; i < FT_ARRAY_LEN(seeds); i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/logprob_file/%s", src, seeds[i].name);
        struct ft_logprob_file *f = NULL;
        int rc = ft_logprob_file_open(path, &f);
        CHECKF(rc == seeds[i].open_rc, "%s: open %d", seeds[i].name, rc);
        if (!f)
            continue;
        int32_t nv = ft_logprob_file_n_vocab(f);
        uint16_t *row = malloc(ft_logprob_row_len(nv) * 2);
        float *lp = malloc(sizeof(float) * (size_t)nv);
        rc = ft_logprob_file_read(f, 0, 0, row, lp);
        CHECKF(rc == seeds[i].read_rc, "%s: read %d", seeds[i].name, rc);
        if (rc == 0) { /* a distribution: probabilities sum to ~1 */
            double s = 0;
            for (int32_t k = 0; k < nv; k++)
                s += exp(lp[k]);
            CHECKF(fabs(s - 1) < 1e-3, "%s: sum %g", seeds[i].name, s);
        }
        CHECK(ft_logprob_file_read(f, ft_logprob_file_n_chunk(f), 0, row, lp) == FT_EINVAL);
        free(row);
        free(lp);
        ft_logprob_file_close(f);
    }
    struct ft_logprob_file *f = NULL;
    CHECK(ft_logprob_file_open("/nonexistent/x.kld", &f) == FT_EIO && !f);
    CHECK(ft_logprob_file_open("/tmp", &f) == FT_EIO && !f);
    /* Every shorter prefix of a good file is refused. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/logprob_file/two_chunks", src);
    size_t n = 0;
    char *buf = ft_test_read_file(path, &n);
    CHECK(buf != NULL);
    for (size_t k = 0; buf && k < n; k++) {
        CHECK(ft_logprob_file_open_buffer(buf, k, "prefix", &f) == FT_EFORMAT);
        ft_logprob_file_close(f);
    }
    free(buf);
    ft_log_set_sink(NULL, NULL);
}

/* ---- 5: evaluation on a real model ----------------------------------------------------- */

/* NLL summed over the scored positions, by a loop written here. */
static double ref_sum_nll(struct ft_model *m, const int32_t *tokens, int n_ctx, int n_chunk, int64_t *count) {
    const int32_t nv = ft_model_hparams(m)->n_vocab, bos = ft_tokenizer_bos(ft_model_tokenizer(m));
    struct ft_kv_cache *kv = NULL;
    CHECK(ft_kv_cache_new(m, n_ctx, 1, &kv) == 0);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_ctx), *pos = malloc(sizeof(int32_t) * (size_t)n_ctx);
    int32_t *seq = calloc((size_t)n_ctx, sizeof(int32_t));
    bool *want = malloc((size_t)n_ctx);
    float *lg = malloc(sizeof(float) * (size_t)n_ctx * (size_t)nv);
    double *lp = malloc(sizeof(double) * (size_t)nv);
    double sum = 0;
    *count = 0;
    for (int c = 0; c < n_chunk; c++) {
        ft_kv_cache_seq_truncate(kv, 0, 0);
        for (int i = 0; i < n_ctx; i++) {
            tok[i] = i == 0 ? bos : tokens[c * n_ctx + i];
            pos[i] = i;
            want[i] = true;
        }
        struct ft_batch b = {.n_tokens = n_ctx, .token = tok, .pos = pos, .seq_id = seq, .want_logits = want};
        CHECK(ft_model_forward(m, kv, &b, lg) == 0);
        for (int i = n_ctx / 2; i <= n_ctx - 2; i++) {
            ref_log_softmax(lg + (size_t)i * (size_t)nv, nv, lp);
            sum -= lp[tokens[c * n_ctx + i + 1]];
            (*count)++;
        }
    }
    free(tok);
    free(pos);
    free(seq);
    free(want);
    free(lg);
    free(lp);
    ft_kv_cache_free(kv);
    return sum;
}

static void test_eval(const char *shared) {
    char path[4096], path_q[4096], save[256];
    snprintf(path, sizeof(path), "%s/models/llama-f32.gguf", shared);
    snprintf(path_q, sizeof(path_q), "%s/models/llama-Q4_0.gguf", shared);
    struct ft_model *m = NULL, *mq = NULL;
    struct ft_model_params mp = {.n_threads = 2};
    CHECK(ft_model_load(path, &mp, &m) == 0);
    CHECK(ft_model_load(path_q, &mp, &mq) == 0);
    if (!m || !mq)
        return;
    const int n_ctx = 32, n_chunk = 3;
    int32_t tokens[200];
    tokens[0] = ft_tokenizer_bos(ft_model_tokenizer(m));
    for (int i = 1; i < 200; i++)
        tokens[i] = 3 + (int32_t)(urand() * 7000);
    int64_t ref_count;
    double ref = ref_sum_nll(m, tokens, n_ctx, n_chunk, &ref_count);

    /* Windows: 200 tokens = 6 windows of 32; --chunks 3 keeps 3. */
    struct ft_ppl_inputs in = {.model = m, .tokens = tokens, .n_tokens = 200};
    const int batches[] = {0, 32, 16, 13, 64, 96, 4096};
    double first_sum = 0;
    for (size_t k = 0; k < FT_ARRAY_LEN(batches); k++) {
        for (int th = 1; th <= 3; th += 2) {
            struct ft_ppl_config cfg = {.n_ctx = n_ctx, .n_batch = batches[k], .n_chunks = n_chunk, .n_threads = th};
            struct ft_ppl_result r;
            CHECK(ft_perplexity_eval(&in, &cfg, &r) == 0);
            CHECK_EQ_INT(r.acc.count, ref_count);
            CHECK_EQ_INT(r.acc.count, n_chunk * (n_ctx - 1 - n_ctx / 2));
            CHECK_EQ_INT(r.n_chunk, n_chunk);
            CHECKF(fabs(r.acc.sum_nll - ref) <= 1e-4 * fabs(ref), "batch %d: %.9g vs %.9g", batches[k], r.acc.sum_nll,
                   ref);
            if (k == 0 && th == 1)
                first_sum = r.acc.sum_nll;
            if (batches[k] == 0 || batches[k] == 32) /* same batches: bit-identical for any thread count */
                CHECK(r.acc.sum_nll == first_sum);
            ft_ppl_result_free(&r);
        }
    }

    /* Save, then compare the model with itself and with Q4_0, through the
     * file and exactly. */
    snprintf(save, sizeof(save), "/tmp/ft_ppl_test_%d.kld", (int)getpid());
    struct ft_ppl_inputs sin = {.model = m, .tokens = tokens, .n_tokens = 200, .save_path = save};
    struct ft_ppl_config cfg = {.n_ctx = n_ctx, .n_chunks = n_chunk, .n_threads = 2};
    struct ft_ppl_result r;
    CHECK(ft_perplexity_eval(&sin, &cfg, &r) == 0);
    ft_ppl_result_free(&r);
    struct ft_logprob_file *lf = NULL;
    CHECK(ft_logprob_file_open(save, &lf) == 0);
    if (lf) {
        CHECK_EQ_INT(ft_logprob_file_n_ctx(lf), n_ctx);
        CHECK_EQ_INT(ft_logprob_file_n_chunk(lf), n_chunk);
        CHECK(!memcmp(ft_logprob_file_tokens(lf), tokens, sizeof(int32_t) * n_ctx * n_chunk));
        struct ft_ppl_inputs kin = {.model = m, .base_file = lf};
        struct ft_ppl_config kcfg = {.n_threads = 2};
        CHECK(ft_perplexity_eval(&kin, &kcfg, &r) == 0);
        struct ft_ppl_stats st;
        ft_ppl_stats_compute(&r.acc, true, r.kld_values, r.p_diff_values, (size_t)r.acc.count, &st);
        CHECKF(fabs(st.kld) < 1e-4, "self KLD through the file %g", st.kld);
        CHECK(st.same_top > 0.95);
        ft_ppl_result_free(&r);

        kin.model = mq;
        CHECK(ft_perplexity_eval(&kin, &kcfg, &r) == 0);
        struct ft_ppl_stats sf;
        ft_ppl_stats_compute(&r.acc, true, r.kld_values, r.p_diff_values, (size_t)r.acc.count, &sf);
        ft_ppl_result_free(&r);
        struct ft_ppl_inputs ein = {.model = mq, .base_model = m, .tokens = tokens, .n_tokens = 200};
        CHECK(ft_perplexity_eval(&ein, &cfg, &r) == 0);
        struct ft_ppl_stats se;
        ft_ppl_stats_compute(&r.acc, true, r.kld_values, r.p_diff_values, (size_t)r.acc.count, &se);
        ft_ppl_result_free(&r);
        CHECK(se.kld > 0.01);
        CHECKF(fabs(sf.kld - se.kld) <= 0.02 * se.kld, "KLD file %g, exact %g", sf.kld, se.kld);
        CHECK_NEAR(sf.ppl, se.ppl, 1e-6 * se.ppl); /* the evaluated model's own NLL: same either way */
        CHECK(fabs(sf.same_top - se.same_top) <= 0.05);

        /* Errors: the file's context is fixed; no save without a complete run. */
        ft_log_set_sink(silence, NULL);
        struct ft_ppl_config bad = {.n_ctx = 64};
        CHECK(ft_perplexity_eval(&kin, &bad, &r) == FT_EINVAL);
        ft_logprob_file_close(lf);
    }
    ft_log_set_sink(silence, NULL);
    struct ft_ppl_config big = {.n_ctx = 128};
    CHECK(ft_perplexity_eval(&in, &big, &r) == FT_EINVAL); /* 200 tokens < two windows of 128 */
    struct ft_ppl_inputs nodir = {.model = m, .tokens = tokens, .n_tokens = 200, .save_path = "/nonexistent/d/x.kld"};
    CHECK(ft_perplexity_eval(&nodir, &cfg, &r) == FT_EIO);
    ft_log_set_sink(NULL, NULL);
    unlink(save);
    ft_model_free(mq);
    ft_model_free(m);
}

/* ---- 6: ft bench's JSON ------------------------------------------------------------------ */

static void test_bench_json(void) {
    double pp = 0, pps = 0, tg = 0, tgs = 0;
    const char *llama_bench =
        "[{\"model_filename\": \"m.gguf\", \"n_prompt\": 512, \"n_gen\": 0, \"avg_ts\": 812.5, \"stddev_ts\": 3.25},"
        " {\"model_filename\": \"m.gguf\", \"n_prompt\": 0, \"n_gen\": 128, \"avg_ts\": 41.75, \"stddev_ts\": 0.5}]";
    CHECK(ft_compare_parse_bench_json(llama_bench, &pp, &pps, &tg, &tgs) == 0);
    CHECK(pp == 812.5 && pps == 3.25 && tg == 41.75 && tgs == 0.5);
    const char *with_test = "{\"results\": [{\"test\": \"tg128\", \"avg_ts\": 9, \"stddev_ts\": 1},"
                            "{\"test\": \"pp512\", \"avg_ts\": 90}]}";
    CHECK(ft_compare_parse_bench_json(with_test, &pp, &pps, &tg, &tgs) == 0);
    CHECK(pp == 90 && pps == 0 && tg == 9 && tgs == 1);
    CHECK(ft_compare_parse_bench_json("[{\"n_prompt\": 512, \"n_gen\": 0, \"avg_ts\": 1}]", &pp, &pps, &tg, &tgs) != 0);
    CHECK(ft_compare_parse_bench_json("not json", &pp, &pps, &tg, &tgs) != 0);
    char banner[1024];
    snprintf(banner, sizeof(banner), "ft bench: 1 model\n%s\n", llama_bench);
    CHECK(ft_compare_parse_bench_json(banner, &pp, &pps, &tg, &tgs) == 0 && tg == 41.75);
    CHECK(ft_compare_parse_bench_json("{\"results\": 3}", &pp, &pps, &tg, &tgs) != 0);
    CHECK(ft_compare_parse_bench_json("[1, \"x\", {\"test\": \"tg1\", \"avg_ts\": -5}]", &pp, &pps, &tg, &tgs) != 0);
}

int main(void) {
    test_position();
    test_stats();
    test_file_reader();
    test_bench_json();
    const char *shared = ft_test_shared_dir();
    if (shared)
        test_eval(shared);
    else
        printf("SKIP part: ../shared/models not found; evaluation on a model not run\n");
    return ft_test_finish("test_perplexity");
}
