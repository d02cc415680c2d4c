/* Log-softmax of one logits row, at one token and its top k
 * (engine/include/ft/logprobs.h). */
#include "ft/logprobs.h"

#include "ft/common.h"

#include <math.h>
#include <string.h>

/* Heap order: a is "smaller" than b (worse rank): lower logit, or the same
 * logit and a higher id. The root is the worst of the kept ones. */
static int worse(const float *l, int32_t a, int32_t b) { return l[a] < l[b] || (l[a] == l[b] && a > b); }

static void sift_down(const float *l, int32_t *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && worse(l, h[c + 1], h[c]))
            c++;
        if (!worse(l, h[c], h[i]))
            return;
        const int32_t t = h[c];
        h[c] = h[i];
        h[i] = t;
        i = c;
    }
}

/* e^x for x <= 0 (a logit minus the row's maximum), in plain float
 * arithmetic the compiler vectorizes (libm's expf is a call per element:
 * 1.3 ms for Gemma 3's 262,144 logits). x = n ln 2 + r with |r| <= ln 2 / 2,
 * e^r by its Taylor series to r^6 (truncation < 2e-7 relative), 2^n
 * written into the exponent bits. Below -87, where e^x is under FLT_MIN
 * and adds nothing to a sum that holds 1, it returns e^-87. */
static inline float exp_nonpos(float x) {
    x = x < -87.0f ? -87.0f : x;
    const float t = x * 1.44269504088896341f;
    const int32_t n = (int32_t)(t - 0.5f); /* t <= 0: round to nearest */
    const float r = (t - (float)n) * 0.693147180559945309f;
    const float p =
        1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    union {
        uint32_t u;
        float f;
    } scale = {.u = (uint32_t)(n + 127) << 23};
    return p * scale.f;
}

void ft_logprobs_compute(const float *logits, int32_t n_vocab, int32_t token, int32_t k,
                         struct ft_token_logprob *out) {
    memset(out, 0, sizeof(*out));
    out->token = token;
    if (n_vocab <= 0)
        return;
    float mx = logits[0], m8[8];
    for (int j = 0; j < 8; j++)
        m8[j] = logits[0];
    int32_t v0 = 0;
    for (; v0 + 8 <= n_vocab; v0 += 8) /* eight running maxima: vectorizable */
        for (int j = 0; j < 8; j++)
            m8[j] = logits[v0 + j] > m8[j] ? logits[v0 + j] : m8[j];
    for (int j = 0; j < 8; j++)
        mx = m8[j] > mx ? m8[j] : mx;
    for (; v0 < n_vocab; v0++)
        mx = logits[v0] > mx ? logits[v0] : mx;
    /* Eight partial sums in double: a float sum of 32k terms drifts by
     * ~1e-5 (test_choices checks 1e-5 against a double reference). */
    double part[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n_vocab; i += 8)
        for (int j = 0; j < 8; j++)
            part[j] += exp_nonpos(logits[i + j] - mx);
    double sum = 0.0;
    for (; i < n_vocab; i++)
        sum += exp_nonpos(logits[i] - mx);
    for (int j = 0; j < 8; j++)
        sum += part[j];
    const double lse = (double)mx + log(sum);
    if (token >= 0 && token < n_vocab)
        out->logprob = (float)((double)logits[token] - lse);

    k = FT_MAX(0, FT_MIN(k, FT_MIN(FT_MAX_TOP_LOGPROBS, n_vocab)));
    if (!k)
        return;
    int32_t heap[FT_MAX_TOP_LOGPROBS];
    for (int32_t v = 0; v < k; v++)
        heap[v] = v;
    for (int32_t j = k / 2 - 1; j >= 0; j--)
        sift_down(logits, heap, k, j);
    /* Ids only grow, so a later logit equal to the root's never ranks above
     * it: only a larger one enters. Blocks of 16 whose maximum does not
     * pass the root's logit (nearly all of them) are skipped with one
     * vectorized compare. */
    float thr = logits[heap[0]];
    int32_t v = k;
    for (; v < n_vocab && v % 16; v++)
        if (logits[v] > thr) {
            heap[0] = v;
            sift_down(logits, heap, k, 0);
            thr = logits[heap[0]];
        }
    for (; v + 16 <= n_vocab; v += 16) {
        float bm = logits[v];
        for (int j = 1; j < 16; j++)
            bm = logits[v + j] > bm ? logits[v + j] : bm;
        if (!(bm > thr))
            continue;
        for (int j = 0; j < 16; j++)
            if (logits[v + j] > thr) {
                heap[0] = v + j;
                sift_down(logits, heap, k, 0);
                thr = logits[heap[0]];
            }
    }
    for (; v < n_vocab; v++)
        if (logits[v] > thr) {
            heap[0] = v;
            sift_down(logits, heap, k, 0);
            thr = logits[heap[0]];
        }
    /* Pop the worst to the back: the array ends best first. */
    for (int32_t m = k; m > 1; m--) {
        const int32_t t = heap[0];
        heap[0] = heap[m - 1];
        heap[m - 1] = t;
        sift_down(logits, heap, m - 1, 0);
    }
    out->n_top = k;
    for (int32_t j = 0; j < k; j++) {
        out->top_token[j] = heap[j];
        out->top_logprob[j] = (float)((double)logits[heap[j]] - lse);
    }
}
