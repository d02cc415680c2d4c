/* Sampler: greedy, determinism by seed, each filter's effect, penalties,
 * and that draws follow the filtered distribution (chi-square-free check:
 * frequencies within a generous bound of the analytic probabilities). */
#include "ft/common.h"
#include "ft/sampler.h"
#include "ft_test.h"

#include <math.h>
#include <stdlib.h>

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

/* logit_bias: added before everything; -100 bans in practice, +100 forces,
 * -INFINITY (llama.cpp's false) bans outright; greedy sees it too. */
static void test_logit_bias(void) {
    float logits[6] = {0.1f, 2.0f, -1.0f, 3.5f, 3.4f, 0.0f};
    struct ft_sampler_params p = greedy_params();
    struct ft_sampler *s;
    struct ft_logit_bias ban3[] = {{3, -100.0f}};
    p.logit_bias = ban3;
    p.n_logit_bias = 1;
    CHECK(ft_sampler_new(&p, 6, &s) == 0);
    CHECK(ft_sampler_sample(s, logits) == 4);
    ft_sampler_free(s);
    struct ft_logit_bias two[] = {{3, -INFINITY}, {4, -1.0f}, {4, -1.0f}}; /* repeated: both apply */
    p.logit_bias = two;
    p.n_logit_bias = 3;
    CHECK(ft_sampler_new(&p, 6, &s) == 0);
    CHECK(ft_sampler_sample(s, logits) == 1); /* 3 banned, 4 at 1.4 < 2.0 */
    ft_sampler_free(s);
    /* sampling at temperature 1: +100 forces token 2, -100 bans token 3 */
    p = ft_sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 11;
    struct ft_logit_bias force2[] = {{2, 100.0f}};
    p.logit_bias = force2;
    p.n_logit_bias = 1;
    CHECK(ft_sampler_new(&p, 6, &s) == 0);
    int ok = 1;
    for (int i = 0; i < 1000; i++)
        ok &= ft_sampler_sample(s, logits) == 2;
    CHECK(ok);
    ft_sampler_free(s);
    p.logit_bias = ban3;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    CHECK(ft_sampler_new(&p, 6, &s) == 0);
    int n3 = 0, n4 = 0;
    for (int i = 0; i < 2000; i++) {
        int t = ft_sampler_sample(s, logits);
        n3 += t == 3;
        n4 += t == 4;
    }
    CHECKF(n3 == 0 && n4 > 1000, "banned token drawn %d times, next best %d of 2000", n3, n4);
    ft_sampler_free(s);
    /* the caller's array may go away after ft_sampler_new */
    struct ft_logit_bias *heap = malloc(sizeof(*heap));
    heap[0] = (struct ft_logit_bias){0, 100.0f};
    p = greedy_params();
    p.logit_bias = heap;
    p.n_logit_bias = 1;
    CHECK(ft_sampler_new(&p, 6, &s) == 0);
    heap[0].token = 5;
    free(heap);
    CHECK(ft_sampler_sample(s, logits) == 0);
    ft_sampler_free(s);
    /* ids outside the vocabulary, NaN or +inf biases, too many entries */
    struct ft_logit_bias out[] = {{6, 1.0f}};
    p.logit_bias = out;
    CHECK(ft_sampler_new(&p, 6, &s) == FT_EINVAL);
    struct ft_logit_bias nan_bias[] = {{1, NAN}};
    p.logit_bias = nan_bias;
    CHECK(ft_sampler_new(&p, 6, &s) == FT_EINVAL);
    struct ft_logit_bias inf_bias[] = {{1, INFINITY}};
    p.logit_bias = inf_bias;
    CHECK(ft_sampler_new(&p, 6, &s) == FT_EINVAL);
    p.n_logit_bias = FT_SAMPLER_MAX_LOGIT_BIAS + 1;
    CHECK(ft_sampler_params_check(&p) == FT_EINVAL);
}

/* Locally typical sampling on p = (0.5, 0.3, 0.15, 0.05), worked by hand:
 * entropy H = 1.1421 nats; |-ln p - H| = 0.449, 0.062, 0.755, 1.854, so
 * the order is ids 1, 0, 2, 3 with cumulative mass 0.3, 0.8, 0.95, 1.
 * typical_p 0.25 keeps {1}; 0.5 keeps {1, 0}; 0.9 keeps {1, 0, 2}. */
static void test_typical(void) {
    float logits[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    struct ft_sampler_params p = greedy_params();
    struct ft_sampler *s;
    p.typical_p = 0.25f;
    CHECK(ft_sampler_new(&p, 4, &s) == 0);
    CHECK(ft_sampler_sample(s, logits) == 1); /* greedy within the typical set: not the argmax */
    ft_sampler_free(s);
    p.typical_p = 0.5f;
    CHECK(ft_sampler_new(&p, 4, &s) == 0);
    CHECK(ft_sampler_sample(s, logits) == 0);
    ft_sampler_free(s);
    static const struct {
        float typ;
        int allowed; /* bit i: id i may be drawn */
        double p0;   /* id 0's renormalized probability */
    } cases[] = {{0.25f, 0x2, 0.0}, {0.5f, 0x3, 0.5 / 0.8}, {0.9f, 0x7, 0.5 / 0.95}, {1.0f, 0xf, 0.5}};
    for (size_t c = 0; c < FT_ARRAY_LEN(cases); c++) {
        p = ft_sampler_default_params();
        p.temperature = 1.0f;
        p.top_k = c % 2 ? 0 : 40; /* the same with top-k off (the whole vocabulary) */
        p.top_p = 1.0f;
        p.min_p = 0.0f;
        p.typical_p = cases[c].typ;
        p.seed = 5;
        CHECK(ft_sampler_new(&p, 4, &s) == 0);
        enum { DRAWS = 20000 };
        int seen = 0, n0 = 0;
        for (int i = 0; i < DRAWS; i++) {
            int t = ft_sampler_sample(s, logits);
            seen |= 1 << t;
            n0 += t == 0;
        }
        CHECKF(seen == cases[c].allowed, "typical_p %g drew set 0x%x, want 0x%x", cases[c].typ, seen,
               cases[c].allowed);
        CHECKF(fabs((double)n0 / DRAWS - cases[c].p0) < 0.02, "typical_p %g: id 0 drawn %.3f, want %.3f",
               cases[c].typ, (double)n0 / DRAWS, cases[c].p0);
        ft_sampler_free(s);
    }
    p = ft_sampler_default_params();
    p.typical_p = 1.5f;
    CHECK(ft_sampler_params_check(&p) != 0);
    p.typical_p = NAN;
    CHECK(ft_sampler_params_check(&p) != 0);
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
    test_logit_bias();
    test_typical();
    test_bad_params();
    return ft_test_finish("test_sampler");
}
