/* Log-softmax of one logits row, at one token and its top k
 * (include/ft/logprobs.h). */
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

void ft_logprobs_compute(const float *logits, int32_t n_vocab, int32_t token, int32_t k,
                         struct ft_token_logprob *out) {
    memset(out, 0, sizeof(*out));
    out->token = token;
    if (n_vocab <= 0)
        return;
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    /* Eight partial sums in double: a float sum of 32k terms drifts by
     * ~1e-5 (test_choices checks 1e-5 against a double reference). */
    double part[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n_vocab; i += 8)
        for (int j = 0; j < 8; j++)
            part[j] += expf(logits[i + j] - mx);
    double sum = 0.0;
    for (; i < n_vocab; i++)
        sum += expf(logits[i] - mx);
    for (int j = 0; j < 8; j++)
        sum += part[j];
    const double lse = (double)mx + log(sum);
    if (token >= 0 && token < n_vocab)
        out->logprob = (float)((double)logits[token] - lse);

    k = FT_MAX(0, FT_MIN(k, FT_MIN(FT_MAX_TOP_LOGPROBS, n_vocab)));
    if (!k)
        return;
    int32_t heap[FT_MAX_TOP_LOGPROBS];
    int32_t n = 0;
    for (int32_t v = 0; v < n_vocab; v++) {
        if (n < k) {
            heap[n++] = v;
            if (n == k) /* heapify once full */
                for (int32_t j = k / 2 - 1; j >= 0; j--)
                    sift_down(logits, heap, k, j);
        } else if (worse(logits, heap[0], v)) {
            heap[0] = v;
            sift_down(logits, heap, k, 0);
        }
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
