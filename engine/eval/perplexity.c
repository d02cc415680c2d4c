/* Perplexity and KL divergence of one position, and the statistics over
 * many (engine/include/ft/perplexity.h): the definitions of llama.cpp's
 * tools/perplexity/perplexity.cpp, in double precision where it sums. */
#include "ft/common.h"
#include "ft/perplexity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Round to nearest, ties to even (llama.cpp's nearest_int trick). */
static int round_int(float x) { return (int)lrintf(x); }

double ft_logprob_encode(const float *logits, int32_t n_vocab, int32_t tok, uint16_t *row) {
    float max_logit = logits[0], min_logit = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) {
        max_logit = FT_MAX(max_logit, logits[i]);
        min_logit = FT_MIN(min_logit, logits[i]);
    }
    min_logit = FT_MAX(min_logit, max_logit - 16); /* keep the top 16 nats */
    double sum_exp = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    const float min_log_prob = min_logit - max_logit - log_sum_exp;
    const float scale = (max_logit - min_logit) / 65535.f;
    memcpy(row, &scale, sizeof(float));
    memcpy(row + 2, &min_log_prob, sizeof(float));
    uint16_t *q = row + 4;
    if (scale > 0) {
        const float inv = 1 / scale;
        for (int32_t i = 0; i < n_vocab; i++)
            q[i] = logits[i] > min_logit ? (uint16_t)FT_MIN(round_int(inv * (logits[i] - min_logit)), 65535) : 0;
    } else {
        memset(q, 0, sizeof(uint16_t) * (size_t)n_vocab);
    }
    if (n_vocab % 2)
        q[n_vocab] = 0; /* the padding element: written, so files are deterministic */
    return (double)max_logit + log_sum_exp - logits[tok];
}

int ft_logprob_decode(const uint16_t *row, int32_t n_vocab, float *logp) {
    float scale, min_log_prob;
    memcpy(&scale, row, sizeof(float));
    memcpy(&min_log_prob, row + 2, sizeof(float));
    /* An encoder writes scale = range/65535 with range <= 16, and an offset
     * that is a log-probability (<= 0, and at worst -16 - ln(n_vocab)). */
    if (!isfinite(scale) || scale < 0 || scale > 16.0f / 65535.f * 1.001f || !isfinite(min_log_prob) ||
        min_log_prob > 1e-3f || min_log_prob < -1e4f)
        return FT_EFORMAT;
    const uint16_t *q = row + 4;
    for (int32_t i = 0; i < n_vocab; i++)
        logp[i] = scale * q[i] + min_log_prob;
    return 0;
}

void ft_log_softmax(const float *logits, int32_t n_vocab, float *logp) {
    float max_logit = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        max_logit = FT_MAX(max_logit, logits[i]);
    double sum_exp = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum_exp += expf(logits[i] - max_logit);
    const double lse = max_logit + log(sum_exp);
    for (int32_t i = 0; i < n_vocab; i++)
        logp[i] = (float)((double)logits[i] - lse);
}

void ft_ppl_score_row(const float *logits, int32_t n_vocab, int32_t tok, const float *base_logp, float base_cutoff,
                      struct ft_ppl_score *out) {
    float max_logit = logits[0];
    int32_t imax = 0;
    for (int32_t i = 1; i < n_vocab; i++) {
        if (logits[i] > max_logit) {
            max_logit = logits[i];
            imax = i;
        }
    }
    double sum_exp = 0.0; /* float terms, double sum: as llama.cpp, and fast */
    for (int32_t i = 0; i < n_vocab; i++)
        sum_exp += expf(logits[i] - max_logit);
    const double lse = max_logit + log(sum_exp); /* ln Q_i = logits[i] - lse */
    memset(out, 0, sizeof(*out));
    out->nll = lse - logits[tok];
    if (!base_logp)
        return;
    out->nll_base = -(double)base_logp[tok];
    double kld = 0.0;
    int32_t imax_base = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float lp = base_logp[i];
        if (lp > base_logp[imax_base])
            imax_base = i;
        if (lp > base_cutoff)
            kld += (double)expf(lp) * ((double)lp - ((double)logits[i] - lse));
    }
    out->kld = kld;
    out->same_top = imax == imax_base;
    out->p_diff = exp(-out->nll) - exp(-out->nll_base);
}

void ft_ppl_acc_add(struct ft_ppl_acc *a, const struct ft_ppl_score *s) {
    a->count++;
    a->sum_nll += s->nll;
    a->sum_nll2 += s->nll * s->nll;
    a->sum_nll_base += s->nll_base;
    a->sum_nll_base2 += s->nll_base * s->nll_base;
    a->sum_nll_nll_base += s->nll * s->nll_base;
    a->sum_kld += s->kld;
    a->sum_kld2 += s->kld * s->kld;
    const double d2 = s->p_diff * s->p_diff;
    a->sum_p_diff += s->p_diff;
    a->sum_p_diff2 += d2;
    a->sum_p_diff4 += d2 * d2;
    a->max_p_diff = FT_MAX(a->max_p_diff, fabs(s->p_diff));
    a->n_same_top += s->same_top;
}

/* Mean and its standard error (llama.cpp's mean_and_uncertainty, which
 * reports no error for ten values or fewer). */
static void mean_err(double sum, double sum2, int64_t n, double *mean, double *err) {
    *mean = *err = 0.0;
    if (n < 1)
        return;
    *mean = sum / (double)n;
    double var = sum2 / (double)n - *mean * *mean;
    *err = var > 0 && n > 10 ? sqrt(var / (double)(n - 1)) : 0.0;
}

/* Covariance of the two means (llama.cpp's covariance()). */
static double cov_of_means(double suma, double sumb, double sumab, int64_t n) {
    if (n < 10)
        return 0.0;
    double c = sumab / (double)n - (suma / (double)n) * (sumb / (double)n);
    return c / (double)(n - 1);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between order statistics, as llama.cpp. */
static double percentile(const float *v, size_t n, double fraction) {
    if (fraction <= 0)
        return v[0];
    if (fraction >= 1)
        return v[n - 1];
    double p = fraction * (double)(n - 1);
    size_t ip = (size_t)p;
    p -= (double)ip;
    return (1 - p) * v[ip] + p * v[FT_MIN(ip + 1, n - 1)];
}

static void quantiles(float *v, size_t n, struct ft_ppl_quantiles *q) {
    memset(q, 0, sizeof(*q));
    if (!v || n == 0)
        return;
    qsort(v, n, sizeof(float), cmp_float);
    q->min = v[0];
    q->max = v[n - 1];
    q->median = n % 2 == 0 ? 0.5 * ((double)v[n / 2] + v[n / 2 - 1]) : v[n / 2];
    q->p99_9 = percentile(v, n, 0.999);
    q->p99 = percentile(v, n, 0.99);
    q->p95 = percentile(v, n, 0.95);
    q->p90 = percentile(v, n, 0.90);
    q->p75 = percentile(v, n, 0.75);
    q->p25 = percentile(v, n, 0.25);
    q->p10 = percentile(v, n, 0.10);
    q->p5 = percentile(v, n, 0.05);
    q->p1 = percentile(v, n, 0.01);
    q->p0_1 = percentile(v, n, 0.001);
}

void ft_ppl_stats_compute(const struct ft_ppl_acc *a, bool has_base, float *kld_values, float *p_diff_values,
                          size_t n, struct ft_ppl_stats *s) {
    memset(s, 0, sizeof(*s));
    s->count = a->count;
    double m, e;
    mean_err(a->sum_nll, a->sum_nll2, a->count, &m, &e);
    s->ppl = exp(m);
    s->ppl_err = s->ppl * e;
    if (!has_base)
        return;
    s->has_base = true;
    double mb, eb;
    mean_err(a->sum_nll_base, a->sum_nll_base2, a->count, &mb, &eb);
    s->ppl_base = exp(mb);
    s->ppl_base_err = s->ppl_base * eb;
    const double cov = cov_of_means(a->sum_nll, a->sum_nll_base, a->sum_nll_nll_base, a->count);
    s->cor_ln_ppl = e > 0 && eb > 0 ? cov / (e * eb) : 0.0;
    s->ln_ratio = m - mb;
    s->ln_ratio_err = sqrt(FT_MAX(0.0, e * e + eb * eb - 2.0 * cov));
    s->ratio = exp(s->ln_ratio);
    s->ratio_err = s->ratio * s->ln_ratio_err;
    s->diff = s->ppl - s->ppl_base;
    s->diff_err = sqrt(FT_MAX(0.0, s->ppl_err * s->ppl_err + s->ppl_base_err * s->ppl_base_err -
                                       2.0 * s->ppl * s->ppl_base * cov));
    mean_err(a->sum_kld, a->sum_kld2, a->count, &s->kld, &s->kld_err);
    mean_err(a->sum_p_diff, a->sum_p_diff2, a->count, &s->dp, &s->dp_err);
    double mse, mse_err;
    mean_err(a->sum_p_diff2, a->sum_p_diff4, a->count, &mse, &mse_err);
    s->dp_rms = sqrt(mse);
    s->dp_rms_err = s->dp_rms > 0 ? 0.5 / s->dp_rms * mse_err : 0.0;
    if (a->count > 0) {
        s->same_top = (double)a->n_same_top / (double)a->count;
        s->same_top_err = a->count > 1 ? sqrt(s->same_top * (1 - s->same_top) / (double)(a->count - 1)) : 0.0;
    }
    quantiles(kld_values, n, &s->kld_q);
    quantiles(p_diff_values, n, &s->dp_q);
}
