/* What structured output costs: the token trie's build time and memory, the
 * grammar mask per generated token (cold: every state walked once; warm: the
 * same schema again, states cached in a reused matcher), and decode tokens/s
 * with and without the grammar on a real model.
 *
 *   ft-bench-grammar [-m MODEL.gguf] [-n TOKENS] [-r REPS] [-t THREADS]
 *
 * Without -m it uses $FT_MODEL. Prints one line per measurement. */
#include "ft/clock.h"
#include "ft/common.h"
#include "ft/generate.h"
#include "ft/grammar.h"
#include "ft/model.h"
#include "ft/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
    "\"email\":{\"type\":\"string\"},"
    "\"city\":{\"type\":\"string\"},"
    "\"hobbies\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":5},"
    "\"score\":{\"type\":\"number\"}},"
    "\"required\":[\"name\",\"age\",\"email\",\"city\",\"hobbies\",\"score\"],\"additionalProperties\":false}";

struct run {
    double decode_ms;
    int32_t tokens;
    uint64_t masks, hits, walked;
    double mask_ms;
};

static int one(struct ft_model *m, const int32_t *prompt, int32_t n_prompt, int32_t n_tok, const struct ft_grammar *g,
               const struct ft_grammar_vocab *v, uint64_t seed, struct run *out) {
    const struct ft_hparams *hp = ft_model_hparams(m);
    struct ft_kv_cache *kv = NULL;
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    int rc = ft_kv_cache_new(m, n_prompt + n_tok + 8, 1, &kv);
    if (rc || !logits) {
        free(logits);
        ft_kv_cache_free(kv);
        return rc ? rc : FT_ENOMEM;
    }
    struct ft_gen_params gp = {.sampling = ft_sampler_default_params(), .max_tokens = n_tok, .grammar = g,
                               .grammar_vocab = v};
    gp.sampling.seed = seed;
    struct ft_gen gen;
    if ((rc = ft_gen_init(&gen, ft_model_tokenizer(m), hp->n_vocab, n_prompt + n_tok + 8, &gp))) {
        free(logits);
        ft_kv_cache_free(kv);
        return rc;
    }
    rc = ft_generate(m, kv, 0, prompt, n_prompt, 512, logits, &gen, NULL, NULL);
    uint64_t end = ft_clock_ticks();
    out->tokens = gen.n_tokens;
    out->decode_ms = ft_clock_ticks_to_ms(end - gen.timing.prefill_end);
    memset(&out->masks, 0, sizeof(*out) - offsetof(struct run, masks));
    if (gen.grammar) {
        struct ft_grammar_stats st;
        ft_grammar_matcher_stats(gen.grammar, &st);
        out->masks = st.masks;
        out->hits = st.mask_hits;
        out->walked = st.nodes_walked;
        out->mask_ms = (double)st.mask_ns / 1e6;
    }
    ft_gen_free(&gen);
    free(logits);
    ft_kv_cache_free(kv);
    return rc;
}

int main(int argc, char **argv) {
    const char *model = getenv("FT_MODEL");
    int n_tok = 96, reps = 3, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "-n"))
            n_tok = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t"))
            threads = atoi(argv[i + 1]);
    }
    if (!model) {
        fprintf(stderr, "usage: ft-bench-grammar -m MODEL.gguf [-n TOKENS] [-r REPS] [-t THREADS]\n");
        return 2;
    }
    ft_clock_init();
    struct ft_model_params mp = {.n_threads = threads, .numa = FT_NUMA_OFF, .numa_node = -1};
    struct ft_model *m = NULL;
    if (ft_model_load(model, &mp, &m)) {
        fprintf(stderr, "ft-bench-grammar: %s\n", ft_last_error());
        return 1;
    }
    const struct ft_tokenizer *tok = ft_model_tokenizer(m);

    uint64_t t0 = ft_clock_ticks();
    struct ft_grammar_vocab *v = NULL;
    if (ft_grammar_vocab_new(tok, &v)) {
        fprintf(stderr, "ft-bench-grammar: %s\n", ft_last_error());
        return 1;
    }
    printf("trie: %d tokens, %zu nodes, %.1f MiB, built in %.1f ms\n", (int)ft_grammar_vocab_n_tokens(v),
           ft_grammar_vocab_n_nodes(v), (double)ft_grammar_vocab_bytes(v) / (1 << 20),
           ft_clock_ticks_to_ms(ft_clock_ticks() - t0));
    struct ft_grammar *g = NULL;
    char err[256];
    t0 = ft_clock_ticks();
    if (ft_grammar_from_json_schema(SCHEMA, strlen(SCHEMA), &g, err, sizeof(err))) {
        fprintf(stderr, "ft-bench-grammar: %s\n", err);
        return 1;
    }
    printf("schema: %zu rules, %zu elements, compiled in %.3f ms\n", ft_grammar_n_rules(g), ft_grammar_n_elems(g),
           ft_clock_ticks_to_ms(ft_clock_ticks() - t0));

    /* the mask alone on a fixed byte path, cold then warm: every prefix of a
     * valid document is a state the generation can reach */
    static const char *const DOC = "{\"name\": \"Ada Lovelace\", \"age\": 36, \"email\": \"ada@example.com\", "
                                   "\"city\": \"London\", \"hobbies\": [\"mathematics\", \"poetry\"], \"score\": 9.5}";
    struct ft_grammar_matcher *gm = NULL;
    if (ft_grammar_matcher_new(g, v, &gm)) {
        fprintf(stderr, "ft-bench-grammar: %s\n", ft_last_error());
        return 1;
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    ft_tokenize(tok, DOC, strlen(DOC), false, false, &ids, &n_ids);
    for (int pass = 0; pass < 2; pass++) {
        ft_grammar_matcher_reset(gm);
        struct ft_grammar_stats a, b;
        ft_grammar_matcher_stats(gm, &a);
        const uint32_t *bits;
        size_t ok = 0;
        for (size_t i = 0; i < n_ids; i++) {
            ft_grammar_matcher_mask(gm, &bits, NULL);
            ok += ft_grammar_matcher_accept_token(gm, ids[i]) == FT_OK;
        }
        ft_grammar_matcher_stats(gm, &b);
        printf("mask on a %zu-token document (%s): %.3f ms/token, %llu trie nodes walked, %llu of %llu cached, "
               "tokens accepted %zu/%zu, complete %d\n",
               n_ids, pass ? "warm" : "cold", (double)(b.mask_ns - a.mask_ns) / 1e6 / (double)n_ids,
               (unsigned long long)(b.nodes_walked - a.nodes_walked), (unsigned long long)(b.mask_hits - a.mask_hits),
               (unsigned long long)(b.masks - a.masks), ok, n_ids, ft_grammar_matcher_complete(gm));
    }
    free(ids);
    ft_grammar_matcher_free(gm);

    /* decode with and without the grammar, interleaved */
    const char *prompt = "Write a JSON record describing a person.\n";
    int32_t *p = NULL;
    size_t np = 0;
    ft_tokenize(tok, prompt, strlen(prompt), true, false, &p, &np);
    double ms[2] = {0, 0}, mask_ms = 0;
    int32_t toks[2] = {0, 0};
    uint64_t masks = 0, hits = 0;
    for (int r = 0; r < reps; r++) {
        for (int with = 0; with < 2; with++) {
            struct run run;
            if (one(m, p, (int32_t)np, n_tok, with ? g : NULL, v, 1234 + (uint64_t)r, &run)) {
                fprintf(stderr, "ft-bench-grammar: %s\n", ft_last_error());
                return 1;
            }
            ms[with] += run.decode_ms;
            toks[with] += run.tokens - 1; /* the first token comes from the prefill */
            if (with) {
                mask_ms += run.mask_ms;
                masks += run.masks;
                hits += run.hits;
            }
        }
    }
    printf("decode without grammar: %.2f tokens/s (%d tokens)\n", toks[0] / (ms[0] / 1e3), (int)toks[0]);
    printf("decode with grammar:    %.2f tokens/s (%d tokens), mask %.3f ms/token (%llu masks, %llu cached) = "
           "%.1f%% of the decode step\n",
           toks[1] / (ms[1] / 1e3), (int)toks[1], mask_ms / (double)masks, (unsigned long long)masks,
           (unsigned long long)hits, 100.0 * mask_ms / ms[1]);
    free(p);
    ft_grammar_free(g);
    ft_grammar_vocab_free(v);
    ft_model_free(m);
    return 0;
}
