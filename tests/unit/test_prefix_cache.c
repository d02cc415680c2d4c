/* Prefix cache over shared KV blocks: the reused count, greedy output
 * identical with and without reuse, blocks shared between sequences at
 * once, a shared prompt that ends inside a block, eviction when the pool
 * runs dry (tiny llama model from ../shared). */
#include "ft_test_model.h"

#include "ft/common.h"
#include "ft/generate.h"
#include "ft/model.h"
#include "ft/prefix_cache.h"
#include "ft/tokenizer.h"

static struct ft_model *g_model;

struct run {
    int32_t tokens[64];
    int32_t n;
    int32_t cached;
};

/* Greedy generation of n_gen tokens for prompt on sequence seq, starting
 * from what the cache has; keep (release) tells whether to hand the
 * sequence back to the cache at the end. */
static struct run generate_on(struct ft_kv_cache *kv, struct ft_prefix_cache *pc, int32_t seq, const int32_t *prompt,
                              int32_t n, int32_t n_gen, bool release) {
    struct run out = {0};
    const struct ft_hparams *hp = ft_model_hparams(g_model);
    struct ft_gen_params p = {.sampling = ft_sampler_default_params(), .max_tokens = n_gen, .ignore_eos = true};
    p.sampling.temperature = 0;
    struct ft_gen g;
    CHECK_EQ_INT(ft_gen_init(&g, ft_model_tokenizer(g_model), hp->n_vocab, ft_kv_cache_n_ctx(kv), &p), FT_OK);
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    out.cached = ft_prefix_cache_attach(pc, seq, prompt, n);
    CHECK(out.cached >= 0 && out.cached < n);
    CHECK_EQ_INT(ft_kv_cache_seq_len(kv, seq), out.cached);
    CHECK_EQ_INT(ft_generate(g_model, kv, seq, prompt, n, 7, logits, &g, NULL, NULL), FT_OK);
    CHECK_EQ_INT(g.timing.cached_prompt_tokens, out.cached);
    CHECK_EQ_INT(g.timing.prompt_tokens, n);
    if (release)
        ft_prefix_cache_release(pc, seq, prompt, n, g.tokens, g.n_past - n);
    else
        ft_prefix_cache_update(pc, seq, prompt, n, g.tokens, g.n_past - n);
    out.n = g.n_tokens;
    memcpy(out.tokens, g.tokens, sizeof(int32_t) * (size_t)g.n_tokens);
    free(logits);
    ft_gen_free(&g);
    return out;
}

static struct run generate(struct ft_kv_cache *kv, struct ft_prefix_cache *pc, const int32_t *prompt, int32_t n,
                           int32_t n_gen) {
    return generate_on(kv, pc, 0, prompt, n, n_gen, true);
}

static void check_same(const struct run *a, const struct run *b, const char *what) {
    CHECKF(a->n == b->n && !memcmp(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->n), "%s: tokens differ", what);
}

static int32_t tokenize(const char *text, int32_t *out, int32_t cap) {
    return ft_test_tokenize(g_model, text, out, cap);
}

int main(void) {
    g_model = ft_test_load_shared_model("llama-F16.gguf", 1);

    struct ft_kv_cache *kv_on = NULL, *kv_off = NULL;
    struct ft_prefix_cache *on = NULL, *off = NULL;
    CHECK_EQ_INT(ft_kv_cache_new(g_model, 256, 3, &kv_on), FT_OK);
    CHECK_EQ_INT(ft_kv_cache_new(g_model, 256, 1, &kv_off), FT_OK);
    CHECK_EQ_INT(ft_prefix_cache_new(kv_on, true, &on), FT_OK);
    CHECK_EQ_INT(ft_prefix_cache_new(kv_off, false, &off), FT_OK);
    CHECK(ft_prefix_cache_new(NULL, true, &(struct ft_prefix_cache *){NULL}) == FT_EINVAL);

    int32_t a[200], b[200];
    const int32_t na = tokenize("The old lighthouse keeper climbed the stairs every evening to light the lamp", a, 100);
    CHECK(na > 10);

    /* 1. The same prompt twice: all but the last token come from the cache,
     *    and greedy output matches a cold run. */
    struct run cold = generate(kv_off, off, a, na, 12);
    CHECK_EQ_INT(cold.cached, 0);
    struct run first = generate(kv_on, on, a, na, 12);
    CHECK_EQ_INT(first.cached, 0);
    check_same(&cold, &first, "first run");
    struct run again = generate(kv_on, on, a, na, 12);
    CHECK_EQ_INT(again.cached, na - 1);
    check_same(&cold, &again, "identical prompt from the cache");

    /* 2. A conversation that grows: prompt + reply + a new turn reuses the
     *    whole previous prompt and the evaluated reply tokens. */
    memcpy(b, a, sizeof(int32_t) * (size_t)na);
    memcpy(b + na, again.tokens, sizeof(int32_t) * (size_t)again.n);
    int32_t nb = na + again.n;
    nb += tokenize("and then he went home", b + nb, 200 - nb) - 1; /* drop the second BOS */
    memmove(b + na + again.n, b + na + again.n + 1, sizeof(int32_t) * (size_t)(nb - na - again.n));
    struct run grown_cold = generate(kv_off, off, b, nb, 10);
    struct run grown = generate(kv_on, on, b, nb, 10);
    /* The last reply token was sampled but never evaluated. */
    CHECK_EQ_INT(grown.cached, na + again.n - 1);
    check_same(&grown_cold, &grown, "grown conversation");

    /* 3. An unrelated prompt that shares only BOS leaves the long
     *    conversation cached. */
    int32_t c[100];
    const int32_t nc = tokenize("Quantum chromodynamics describes the strong interaction", c, 100);
    struct run other = generate(kv_on, on, c, nc, 5);
    CHECKF(other.cached <= 1, "cached %d", other.cached);
    struct run back = generate(kv_on, on, b, nb, 10);
    CHECK_EQ_INT(back.cached, nb - 1);
    check_same(&grown_cold, &back, "conversation after an unrelated prompt");

    /* 4. A prompt that diverges near its end (an edited last turn) reuses
     *    exactly the common part. */
    int32_t d[200];
    memcpy(d, b, sizeof(int32_t) * (size_t)nb);
    d[nb - 4] = (d[nb - 4] + 1) % ft_model_hparams(g_model)->n_vocab;
    struct run div_cold = generate(kv_off, off, d, nb, 8);
    struct run div = generate(kv_on, on, d, nb, 8);
    CHECK_EQ_INT(div.cached, nb - 4);
    check_same(&div_cold, &div, "diverging prompt");

    /* 5. A short match against a long cached sequence does not evict it. */
    int32_t e[200];
    memcpy(e, d, sizeof(int32_t) * 4);
    memcpy(e + 4, c + 1, sizeof(int32_t) * (size_t)(nc - 1));
    struct run other2 = generate(kv_on, on, e, 3 + nc, 4);
    CHECKF(other2.cached <= 4, "cached %d", other2.cached);
    struct run d_again = generate(kv_on, on, d, nb, 8);
    CHECK_EQ_INT(d_again.cached, nb - 1);
    check_same(&div_cold, &d_again, "sequence kept after a short match");

    /* 6. A short prompt repeated: its whole prompt but one token is reused
     *    (from a block that also holds a longer reply). */
    struct run s1 = generate(kv_on, on, a, 5, 30);
    struct run s2 = generate(kv_on, on, a, 5, 30);
    CHECK_EQ_INT(s2.cached, 4);
    check_same(&s1, &s2, "short prompt repeated");

    /* 7. Two sequences at once on the same cached prefix list the same
     *    blocks; each writes its own copy of the shared partial block. */
    {
        CHECK_EQ_INT(ft_prefix_cache_attach(on, 1, b, nb), nb - 1);
        CHECK_EQ_INT(ft_prefix_cache_attach(on, 2, b, nb), nb - 1);
        const int32_t blk0 = ft_kv_cache_seq_block(kv_on, 1, 0);
        CHECK(blk0 >= 0 && blk0 == ft_kv_cache_seq_block(kv_on, 2, 0));
        CHECK_EQ_INT(ft_kv_cache_block_seq_refs(kv_on, blk0), 2);
        CHECK(ft_kv_cache_block_is_cached(kv_on, blk0));
        ft_prefix_cache_release(on, 1, NULL, 0, NULL, 0);
        ft_prefix_cache_release(on, 2, NULL, 0, NULL, 0);
        CHECK_EQ_INT(ft_kv_cache_block_seq_refs(kv_on, blk0), 0);
        CHECK(ft_kv_cache_block_is_cached(kv_on, blk0)); /* idle, still cached */
        struct run x = generate_on(kv_on, on, 1, b, nb, 10, false);
        struct run y = generate_on(kv_on, on, 2, b, nb, 10, false);
        CHECK_EQ_INT(x.cached, nb - 1);
        CHECK_EQ_INT(y.cached, nb - 1);
        check_same(&grown_cold, &x, "first of two sharing sequences");
        check_same(&grown_cold, &y, "second of two sharing sequences");
        const int32_t last = (nb - 1) / FT_KV_BLOCK_TOKENS;
        CHECK(ft_kv_cache_seq_block(kv_on, 1, last) != ft_kv_cache_seq_block(kv_on, 2, last));
        ft_prefix_cache_release(on, 1, NULL, 0, NULL, 0);
        ft_prefix_cache_release(on, 2, NULL, 0, NULL, 0);
    }

    /* 8. A shared prompt of 40 tokens followed by different questions:
     *    all 40 come from the cache although 40 ends inside a block, and
     *    the output matches a cold run. */
    {
        int32_t sys[96], q1[128], q2[128];
        const int32_t ns = tokenize("You are a careful assistant who answers in short sentences and never uses "
                                    "jargon unless the user asks for it explicitly, and then only with care. "
                                    "Be kind to the user, check your facts twice and say so when unsure.",
                                    sys, 96);
        CHECK(ns >= 41);
        int32_t n1 = 40, n2 = 40;
        memcpy(q1, sys, sizeof(int32_t) * 40);
        memcpy(q2, sys, sizeof(int32_t) * 40);
        int32_t tmp[64];
        int32_t nt = tokenize("What is the tallest mountain on Earth?", tmp, 64);
        memcpy(q1 + n1, tmp + 1, sizeof(int32_t) * (size_t)(nt - 1));
        n1 += nt - 1;
        nt = tokenize("Why do cats purr?", tmp, 64);
        memcpy(q2 + n2, tmp + 1, sizeof(int32_t) * (size_t)(nt - 1));
        n2 += nt - 1;
        CHECK(q1[40] != q2[40]);
        struct run r1 = generate(kv_on, on, q1, n1, 6);
        CHECK(r1.cached <= 1);
        struct run c2 = generate(kv_off, off, q2, n2, 6);
        struct run r2 = generate(kv_on, on, q2, n2, 6);
        CHECK_EQ_INT(r2.cached, 40);
        check_same(&c2, &r2, "shared 40-token prompt");
    }

    /* 9. The cache off keeps and finds nothing. */
    CHECK_EQ_INT(generate(kv_off, off, a, na, 4).cached, 0);
    CHECK_EQ_INT(generate(kv_off, off, a, na, 4).cached, 0);
    CHECK_EQ_INT(ft_prefix_cache_blocks(off), 0);

    /* 10. Eviction: the pool (48 blocks) cannot hold every prompt; idle
     *     cached blocks make room, the latest prompts stay cached, and
     *     the blocks the cache holds are always idle or in use. */
    {
        char text[160];
        int32_t p[128];
        int32_t np = 0;
        for (int k = 0; k < 20; k++) {
            snprintf(text, sizeof(text),
                     "Story number %d begins on a grey morning when the harbour bells ring for the %d time", k,
                     k * 7 + 3);
            np = tokenize(text, p, 128);
            generate(kv_on, on, p, np, 20);
            CHECK(ft_prefix_cache_blocks(on) <= ft_kv_cache_blocks_total(kv_on));
            CHECK_EQ_INT(ft_kv_cache_blocks_free(kv_on) + ft_kv_cache_blocks_idle(kv_on),
                         ft_kv_cache_blocks_total(kv_on));
        }
        CHECK(ft_kv_cache_blocks_free(kv_on) < 3); /* the pool filled up */
        struct run last = generate(kv_on, on, p, np, 20);
        CHECK_EQ_INT(last.cached, np - 1);
        /* The earliest conversation was evicted. */
        CHECK(generate(kv_on, on, b, nb, 2).cached < nb - 1);
    }

    ft_prefix_cache_free(on);
    CHECK_EQ_INT(ft_kv_cache_blocks_free(kv_on), ft_kv_cache_blocks_total(kv_on));
    ft_prefix_cache_free(off);
    ft_kv_cache_free(kv_on);
    ft_kv_cache_free(kv_off);
    ft_model_free(g_model);
    return ft_test_finish("test_prefix_cache");
}
