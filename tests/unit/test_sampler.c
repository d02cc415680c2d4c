/* Sampler: greedy, determinism by seed, each filter's effect, penalties,
 * and that draws follow the filtered distribution (chi-square-free check:
 * frequencies within a generous bound of the analytic probabilities). */
#include "ft/sampler.h"
#include "ft_test.h"

#include <math.h>

static struct ft_sampler_params greedy_params(void) {
    struct ft_sampler_params p = ft_sampler_default_params();
    p.temperature = 0;
    return p;
}

static void test_greedy(void) {
    float logits[6] = {0.1f, 2.0f, -1.0f, 3.5f, 3.4f, 0.0f};
    struct ft_sampler_params p = greedy_params();
    struct ft_sampler *s;
    CHECK(ft_sampler_new(&p, 6, &s) == 0);
    CHECK_EQ_INT(ft_sampler_sample(s, logits), 3);
    ft_sampler_free(s);
}

static void test_repeat_penalty(void) {
    /* token 3 leads by 0.1; a repeat penalty of 1.5 divides its positive
     * logit (3.5 -> 2.333) so token 4 wins */
    float logits[6] = {0.1f, 2.0f, -1.0f, 3.5f, 3.4f, 0.0f};
    struct ft_sampler_params p = greedy_params();
    p.repeat_penalty = 1.5f;
    struct ft_sampler *s;
    CHECK(ft_sampler_new(&p, 6, &s) == 0);
    ft_sampler_accept(s, 3);
    CHECK_EQ_INT(ft_sampler_sample(s, logits), 4);
    ft_sampler_free(s);

    /* frequency penalty grows with the count: 3 occurrences of token 4 at
     * 0.5 each push it below token 1 (3.4 - 1.5 = 1.9 < 2.0) once 3 is
     * also penalized by presence 2.0 (3.5 - 2 = 1.5) */
    p = greedy_params();
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 2.0f;
    CHECK(ft_sampler_new(&p, 6, &s) == 0);
    ft_sampler_accept(s, 3);
    ft_sampler_accept(s, 4);
    ft_sampler_accept(s, 4);
    ft_sampler_accept(s, 4);
    /* token 3: 3.5 - 0.5 - 2 = 1.0; token 4: 3.4 - 1.5 - 2 = -0.1 */
    CHECK_EQ_INT(ft_sampler_sample(s, logits), 1);
    ft_sampler_free(s);

    /* the window forgets: with last-n 2, after two other tokens token 3 is
     * no longer penalized */
    p = greedy_params();
    p.repeat_penalty = 1.5f;
    p.repeat_last_n = 2;
    CHECK(ft_sampler_new(&p, 6, &s) == 0);
    ft_sampler_accept(s, 3);
    ft_sampler_accept(s, 0);
    ft_sampler_accept(s, 5);
    CHECK_EQ_INT(ft_sampler_sample(s, logits), 3);
    ft_sampler_free(s);
}

static void test_determinism_and_distribution(void) {
    enum { V = 1000, DRAWS = 20000 };
    static float logits[V];
    for (int i = 0; i < V; i++)
        logits[i] = -10.0f;
    logits[10] = 1.0f;
    logits[20] = 0.0f;
    logits[30] = -0.5f;
    struct ft_sampler_params p = ft_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    struct ft_sampler *a, *b;
    CHECK(ft_sampler_new(&p, V, &a) == 0);
    CHECK(ft_sampler_new(&p, V, &b) == 0);
    int counts[V] = {0};
    int same = 1;
    for (int i = 0; i < DRAWS; i++) {
        int32_t x = ft_sampler_sample(a, logits), y = ft_sampler_sample(b, logits);
        same &= x == y;
        counts[x]++;
    }
    CHECK(same);
    /* analytic probabilities: softmax over the full vocabulary */
    double z = exp(1.0) + exp(0.0) + exp(-0.5) + (V - 3) * exp(-10.0);
    double p10 = exp(1.0) / z, p20 = 1.0 / z, p30 = exp(-0.5) / z;
    double sd = sqrt(DRAWS * p10 * (1 - p10));
    CHECKF(fabs(counts[10] - DRAWS * p10) < 5 * sd, "token 10 drawn %d times, expected %.0f", counts[10], DRAWS * p10);
    CHECKF(fabs(counts[20] - DRAWS * p20) < 5 * sd, "token 20 drawn %d times, expected %.0f", counts[20], DRAWS * p20);
    CHECKF(fabs(counts[30] - DRAWS * p30) < 5 * sd, "token 30 drawn %d times, expected %.0f", counts[30], DRAWS * p30);
    ft_sampler_free(a);
    ft_sampler_free(b);

    /* a different seed gives a different sequence */
    p.seed = 99;
    CHECK(ft_sampler_new(&p, V, &a) == 0);
    p.seed = 1234;
    CHECK(ft_sampler_new(&p, V, &b) == 0);
    int differ = 0;
    for (int i = 0; i < 200; i++)
        differ |= ft_sampler_sample(a, logits) != ft_sampler_sample(b, logits);
    CHECK(differ);
    ft_sampler_free(a);
    ft_sampler_free(b);
}

static void test_filters(void) {
    enum { V = 5000 };
    static float logits[V];
    for (int i = 0; i < V; i++)
        logits[i] = -(float)i * 0.001f; /* token 0 best, slowly decreasing */
    struct ft_sampler_params p = ft_sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 7;
    struct ft_sampler *s;

    /* top-k 3: only ids 0..2 */
    p.top_k = 3; p.top_p = 1.0f; p.min_p = 0.0f;
    CHECK(ft_sampler_new(&p, V, &s) == 0);
    int ok = 1;
    for (int i = 0; i < 500; i++)
        ok &= ft_sampler_sample(s, logits) < 3;
    CHECK(ok);
    ft_sampler_free(s);

    /* top-p 0.1 with top-k off over a near-flat distribution: the smallest
     * prefix holding 10% of the mass. Analytic: mass of ids < n is
     * (1 - e^{-0.001 n}) / (1 - e^{-5}); solve for 10%. */
    p.top_k = 0; p.top_p = 0.1f;
    double zfull = (1 - exp(-0.001 * V)) / (1 - exp(-0.001));
    int n_keep = 0;
    double cum = 0;
    while (cum < 0.1 * zfull) {
        cum += exp(-0.001 * n_keep);
        n_keep++;
    }
    CHECK(ft_sampler_new(&p, V, &s) == 0);
    int max_seen = 0;
    for (int i = 0; i < 3000; i++) {
        int t = ft_sampler_sample(s, logits);
        max_seen = t > max_seen ? t : max_seen;
    }
    CHECKF(max_seen < n_keep, "top-p drew id %d, allowed < %d", max_seen, n_keep);
    CHECKF(max_seen > n_keep * 8 / 10, "top-p never drew near the cut (max %d of %d)", max_seen, n_keep);
    ft_sampler_free(s);

    /* min-p 0.99: only tokens within 1% of the best probability: ids with
     * e^{-0.001 i} >= 0.99, i.e. i <= 10 */
    p.top_p = 1.0f; p.min_p = 0.99f;
    CHECK(ft_sampler_new(&p, V, &s) == 0);
    ok = 1;
    for (int i = 0; i < 500; i++)
        ok &= ft_sampler_sample(s, logits) <= 10;
    CHECK(ok);
    ft_sampler_free(s);
}

static void test_bad_params(void) {
    struct ft_sampler_params p = ft_sampler_default_params();
    p.top_p = 1.5f;
    CHECK(ft_sampler_params_check(&p) != 0);
    p = ft_sampler_default_params();
    p.temperature = NAN;
    CHECK(ft_sampler_params_check(&p) != 0);
    p = ft_sampler_default_params();
    p.presence_penalty = 3;
    CHECK(ft_sampler_params_check(&p) != 0);
    struct ft_sampler *s;
    p = ft_sampler_default_params();
    CHECK(ft_sampler_new(&p, 0, &s) != 0);
}

int main(void) {
    test_greedy();
    test_repeat_penalty();
    test_determinism_and_distribution();
    test_filters();
    test_bad_params();
    return ft_test_finish("test_sampler");
}
