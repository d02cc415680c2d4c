/* Sampler: turns one row of logits into a token id.
 *
 * Vocabularies reach 262k entries (Gemma 3), so nothing here sorts the whole
 * vocabulary per token: top-k uses a bounded min-heap, and top-p without
 * top-k widens a partially selected candidate set until it covers p. */
#include "ft/sampler.h"
#include "ft/common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ft_candidate {
    int32_t id;
    float logit;
    float p;
};

struct typ_score {
    float score; /* |-log p - entropy| */
    int32_t pos; /* index into the candidates */
};

struct ft_sampler {
    struct ft_sampler_params params;
    int32_t n_vocab;
    uint64_t rng[4];
    /* penalty history: a ring of the last repeat_last_n tokens */
    int32_t *history;
    int32_t history_cap;
    int32_t history_len;
    int32_t history_head;
    struct ft_logit_bias *bias; /* a copy of params.logit_bias */
    /* scratch */
    struct ft_candidate *cand;
    struct ft_candidate *kept; /* typical: the kept candidates (n_vocab) */
    struct typ_score *scores;  /* typical: (n_vocab) */
    float *work_logits;
    int32_t *counts; /* per-token occurrences within the window */
};

struct ft_sampler_params ft_sampler_default_params(void) {
    struct ft_sampler_params p = {
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .typical_p = 1.0f,
        .seed = 0,
    };
    return p;
}

int ft_sampler_params_check(const struct ft_sampler_params *p) {
    if (!isfinite(p->temperature) || p->temperature > 100.0f) {
        FT_LOG_E("temperature must be a finite number <= 100 (got %g)", p->temperature);
        return FT_EINVAL;
    }
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f)) {
        FT_LOG_E("top_p must be in [0, 1] (got %g)", p->top_p);
        return FT_EINVAL;
    }
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) {
        FT_LOG_E("min_p must be in [0, 1] (got %g)", p->min_p);
        return FT_EINVAL;
    }
    if (!(p->repeat_penalty > 0.0f && p->repeat_penalty <= 10.0f)) {
        FT_LOG_E("repeat_penalty must be in (0, 10] (got %g)", p->repeat_penalty);
        return FT_EINVAL;
    }
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f)) {
        FT_LOG_E("presence_penalty must be in [-2, 2] (got %g)", p->presence_penalty);
        return FT_EINVAL;
    }
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f)) {
        FT_LOG_E("frequency_penalty must be in [-2, 2] (got %g)", p->frequency_penalty);
        return FT_EINVAL;
    }
    if (!(p->typical_p >= 0.0f && p->typical_p <= 1.0f)) {
        FT_LOG_E("typical_p must be in [0, 1] (got %g)", p->typical_p);
        return FT_EINVAL;
    }
    if (p->n_logit_bias < 0 || p->n_logit_bias > FT_SAMPLER_MAX_LOGIT_BIAS || (p->n_logit_bias && !p->logit_bias)) {
        FT_LOG_E("logit_bias must have 0 to %d entries (got %d)", FT_SAMPLER_MAX_LOGIT_BIAS, p->n_logit_bias);
        return FT_EINVAL;
    }
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (isnan(p->logit_bias[i].bias) || p->logit_bias[i].bias == INFINITY) {
            FT_LOG_E("logit_bias[%d] must be a number or -infinity", i);
            return FT_EINVAL;
        }
    if (p->repeat_last_n < -1 || p->repeat_last_n > (1 << 20)) {
        FT_LOG_E("repeat_last_n must be in [-1, 1048576] (got %d)", p->repeat_last_n);
        return FT_EINVAL;
    }
    return FT_OK;
}

/* xoshiro256** seeded through splitmix64: small, fast, well-distributed. */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

int ft_sampler_new(const struct ft_sampler_params *p, int32_t n_vocab, struct ft_sampler **out) {
    *out = NULL;
    if (n_vocab <= 0) {
        FT_LOG_E("n_vocab must be positive (got %d)", n_vocab);
        return FT_EINVAL;
    }
    int rc = ft_sampler_params_check(p);
    if (rc)
        return rc;
    struct ft_sampler *s = calloc(1, sizeof(*s));
    if (!s)
        goto oom;
    s->params = *p;
    s->n_vocab = n_vocab;
    uint64_t seed = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&seed);
    s->history_cap = p->repeat_last_n < 0 ? 4096 : p->repeat_last_n;
    if (s->history_cap > 0 && !(s->history = malloc(sizeof(int32_t) * (size_t)s->history_cap)))
        goto oom;
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= n_vocab) {
            ft_sampler_free(s);
            FT_LOG_E("logit_bias names token %d, outside the vocabulary of %d", p->logit_bias[i].token, n_vocab);
            return FT_EINVAL;
        }
    s->params.logit_bias = NULL; /* the caller's; s->bias is ours */
    if (p->n_logit_bias > 0) {
        if (!(s->bias = malloc(sizeof(*s->bias) * (size_t)p->n_logit_bias)))
            goto oom;
        memcpy(s->bias, p->logit_bias, sizeof(*s->bias) * (size_t)p->n_logit_bias);
    }
    if (p->typical_p < 1.0f && (!(s->kept = malloc(sizeof(*s->kept) * (size_t)n_vocab)) ||
                                !(s->scores = malloc(sizeof(*s->scores) * (size_t)n_vocab))))
        goto oom;
    s->cand = malloc(sizeof(*s->cand) * (size_t)n_vocab);
    s->work_logits = malloc(sizeof(float) * (size_t)n_vocab);
    s->counts = calloc((size_t)n_vocab, sizeof(int32_t));
    if (!s->cand || !s->work_logits || !s->counts)
        goto oom;
    *out = s;
    return FT_OK;
oom:
    ft_sampler_free(s);
    FT_LOG_E("out of memory for a sampler over %d tokens", n_vocab);
    return FT_ENOMEM;
}

void ft_sampler_free(struct ft_sampler *s) {
    if (!s)
        return;
    free(s->history);
    free(s->bias);
    free(s->kept);
    free(s->scores);
    free(s->cand);
    free(s->work_logits);
    free(s->counts);
    free(s);
}

void ft_sampler_accept(struct ft_sampler *s, int32_t token) {
    if (s->history_cap == 0 || token < 0 || token >= s->n_vocab)
        return;
    if (s->history_len == s->history_cap) {
        /* window full: the oldest token leaves it */
        int32_t old = s->history[s->history_head];
        s->counts[old]--;
        s->history[s->history_head] = token;
        s->history_head = (s->history_head + 1) % s->history_cap;
    } else {
        s->history[(s->history_head + s->history_len) % s->history_cap] = token;
        s->history_len++;
    }
    s->counts[token]++;
}

/* Penalties as llama.cpp applies them: repeat penalty divides positive
 * logits and multiplies negative ones; frequency and presence subtract. */
static void apply_penalties(struct ft_sampler *s, float *logits) {
    const struct ft_sampler_params *p = &s->params;
    if (s->history_len == 0 ||
        (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f))
        return;
    for (int32_t i = 0; i < s->history_len; i++) {
        int32_t tok = s->history[(s->history_head + i) % s->history_cap];
        int32_t c = s->counts[tok];
        if (c <= 0)
            continue; /* already penalized via an earlier occurrence */
        float *l = &logits[tok];
        if (*l <= 0.0f)
            *l *= p->repeat_penalty;
        else
            *l /= p->repeat_penalty;
        *l -= (float)c * p->frequency_penalty + p->presence_penalty; /* c > 0 here */
        s->counts[tok] = -c; /* mark done; restored below */
    }
    for (int32_t i = 0; i < s->history_len; i++) {
        int32_t tok = s->history[(s->history_head + i) % s->history_cap];
        if (s->counts[tok] < 0)
            s->counts[tok] = -s->counts[tok];
    }
}

static int cmp_cand_desc(const void *a, const void *b) {
    float x = ((const struct ft_candidate *)a)->logit, y = ((const struct ft_candidate *)b)->logit;
    if (x > y)
        return -1;
    if (x < y)
        return 1;
    /* ties: lower id first, so results never depend on qsort's order */
    return ((const struct ft_candidate *)a)->id - ((const struct ft_candidate *)b)->id;
}

/* Move the k largest of c[0..n) to the front, sorted descending. O(n log k). */
static void select_top(struct ft_candidate *c, int32_t n, int32_t k) {
    if (k >= n) {
        qsort(c, (size_t)n, sizeof(*c), cmp_cand_desc);
        return;
    }
    /* min-heap of size k over c[0..k) */
    for (int32_t i = k / 2 - 1; i >= 0; i--) {
        int32_t j = i;
        for (;;) {
            int32_t l = 2 * j + 1, r = l + 1, m = j;
            if (l < k && cmp_cand_desc(&c[l], &c[m]) > 0) m = l;
            if (r < k && cmp_cand_desc(&c[r], &c[m]) > 0) m = r;
            if (m == j) break;
            struct ft_candidate t = c[j]; c[j] = c[m]; c[m] = t;
            j = m;
        }
    }
    for (int32_t i = k; i < n; i++) {
        if (cmp_cand_desc(&c[i], &c[0]) >= 0)
            continue; /* not better than the heap's minimum */
        struct ft_candidate t = c[0]; c[0] = c[i]; c[i] = t;
        int32_t j = 0;
        for (;;) {
            int32_t l = 2 * j + 1, r = l + 1, m = j;
            if (l < k && cmp_cand_desc(&c[l], &c[m]) > 0) m = l;
            if (r < k && cmp_cand_desc(&c[r], &c[m]) > 0) m = r;
            if (m == j) break;
            struct ft_candidate u = c[j]; c[j] = c[m]; c[m] = u;
            j = m;
        }
    }
    qsort(c, (size_t)k, sizeof(*c), cmp_cand_desc);
}

/* Softmax over the sorted candidates c[0..n) (c[0] has the max logit). */
static void softmax_sorted(struct ft_candidate *c, int32_t n, float temperature) {
    float max = c[0].logit;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - max) / temperature);
        sum += c[i].p;
    }
    for (int32_t i = 0; i < n; i++)
        c[i].p = (float)(c[i].p / sum);
}

static int cmp_typ(const void *a, const void *b) {
    const struct typ_score *x = a, *y = b;
    if (x->score < y->score)
        return -1;
    if (x->score > y->score)
        return 1;
    return x->pos - y->pos; /* ties: the more likely first (c is sorted) */
}

/* Locally typical sampling as llama.cpp's llama_sampler_typical (min_keep
 * 0): over c[0..k) (sorted, p their softmax), keep the tokens whose
 * information -log p is closest to the entropy until their mass exceeds
 * typ_p; the kept ones come back sorted by logit, p renormalized (what
 * llama.cpp's next sampler recomputes). Returns their count. */
static int32_t apply_typical(struct ft_sampler *s, struct ft_candidate *c, int32_t k, float typ_p) {
    float entropy = 0.0f;
    for (int32_t i = 0; i < k; i++)
        if (c[i].p > 0.0f)
            entropy += -c[i].p * logf(c[i].p);
    struct typ_score *sc = s->scores;
    for (int32_t i = 0; i < k; i++) {
        sc[i].score = c[i].p > 0.0f ? fabsf(-logf(c[i].p) - entropy) : INFINITY;
        sc[i].pos = i;
    }
    qsort(sc, (size_t)k, sizeof(*sc), cmp_typ);
    float cum = 0.0f;
    int32_t keep = k;
    for (int32_t i = 0; i < k; i++) {
        cum += c[sc[i].pos].p;
        if (cum > typ_p) {
            keep = i + 1;
            break;
        }
    }
    for (int32_t i = 0; i < keep; i++)
        s->kept[i] = c[sc[i].pos];
    memcpy(c, s->kept, sizeof(*c) * (size_t)keep);
    qsort(c, (size_t)keep, sizeof(*c), cmp_cand_desc);
    softmax_sorted(c, keep, 1.0f);
    return keep;
}

int32_t ft_sampler_sample(struct ft_sampler *s, const float *in_logits) {
    const struct ft_sampler_params *p = &s->params;
    float *logits = s->work_logits;
    memcpy(logits, in_logits, sizeof(float) * (size_t)s->n_vocab);
    /* logit_bias first, as llama.cpp's chain starts with it */
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        logits[s->bias[i].token] += s->bias[i].bias;
    apply_penalties(s, logits);

    struct ft_candidate *c = s->cand;
    int32_t n = s->n_vocab;
    for (int32_t i = 0; i < n; i++) {
        c[i].id = i;
        c[i].logit = isnan(logits[i]) ? -INFINITY : logits[i];
    }

    const bool typical = p->typical_p < 1.0f;
    if (p->temperature <= 0.0f && !typical) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (c[i].logit > c[best].logit)
                best = i;
        return best;
    }

    /* top-k, or (top-k off) a candidate window widened until it holds top-p
     * of the mass: probabilities are relative to the full-vocabulary softmax,
     * computed once with the max logit and the total sum. */
    int32_t k = p->top_k > 0 ? FT_MIN(p->top_k, n) : n;
    if (k == n && p->top_p < 1.0f && !typical) {
        float max = -INFINITY;
        for (int32_t i = 0; i < n; i++)
            max = c[i].logit > max ? c[i].logit : max;
        double total = 0.0;
        for (int32_t i = 0; i < n; i++)
            total += expf(c[i].logit - max);
        int32_t w = FT_MIN(256, n);
        for (;;) {
            select_top(c, n, w);
            double mass = 0.0;
            for (int32_t i = 0; i < w; i++)
                mass += expf(c[i].logit - max);
            if (mass / total >= p->top_p || w == n)
                break;
            w = w * 4 > n ? n : w * 4;
        }
        k = w;
        for (int32_t i = 0; i < k; i++)
            c[i].p = (float)(expf(c[i].logit - max) / total);
    } else {
        select_top(c, n, k);
        softmax_sorted(c, k, 1.0f);
    }
    if (typical) {
        k = apply_typical(s, c, k, p->typical_p);
        if (p->temperature <= 0.0f)
            return c[0].id; /* greedy among the typical set */
    }

    /* top-p and min-p on the distribution before temperature, as llama.cpp */
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        int32_t keep = k;
        for (int32_t i = 0; i < k; i++) {
            cum += c[i].p;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        k = keep;
    }
    if (p->min_p > 0.0f) {
        float thresh = c[0].p * p->min_p;
        int32_t keep = 1;
        while (keep < k && c[keep].p >= thresh)
            keep++;
        k = keep;
    }
    softmax_sorted(c, k, p->temperature);

    double r = rng_uniform(s->rng), cum = 0.0;
    for (int32_t i = 0; i < k; i++) {
        cum += c[i].p;
        if (r < cum)
            return c[i].id;
    }
    return c[k - 1].id;
}
