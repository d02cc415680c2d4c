/* Grammar compilers (GBNF, JSON Schema, regex) and the matcher: byte strings
 * accepted and rejected, compile errors that name the problem, and the token
 * mask checked against brute force (every token tried one by one) on real
 * vocabularies from ../shared/vocab. Includes grammar_match.c to save and
 * restore the matcher's state (a set id) between brute-force tries. */
#include "ft_test.h"

#include "engine/text/grammar_match.c"

#include "ft/gguf.h"

static struct ft_tokenizer *load_vocab(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-%s.gguf", dir, name);
    struct ft_gguf *g = NULL;
    if (ft_gguf_open(path, &g))
        return NULL;
    struct ft_tokenizer *t = NULL;
    int rc = ft_tokenizer_load(g, &t);
    ft_gguf_close(g);
    return rc ? NULL : t;
}

/* Whole-string acceptance: every byte accepted and the sentence complete. */
static bool accepts(struct ft_grammar_matcher *m, const char *s) {
    ft_grammar_matcher_reset(m);
    return ft_grammar_matcher_accept_bytes(m, s, strlen(s)) == FT_OK && ft_grammar_matcher_complete(m);
}

static struct ft_grammar *schema(const char *text, char *err, size_t cap) {
    struct ft_grammar *g = NULL;
    int rc = ft_grammar_from_json_schema(text, strlen(text), &g, err, cap);
    if (rc)
        return NULL;
    return g;
}

static struct ft_grammar *gbnf(const char *text) {
    struct ft_grammar *g = NULL;
    char err[256];
    if (ft_grammar_from_gbnf(text, strlen(text), &g, err, sizeof(err))) {
        fprintf(stderr, "gbnf error: %s\n", err);
        return NULL;
    }
    return g;
}

struct accept_case {
    const char *text;
    bool ok;
};

static void check_cases(struct ft_grammar *g, const struct ft_grammar_vocab *v, const struct accept_case *c, size_t n,
                        const char *what) {
    struct ft_grammar_matcher *m = NULL;
    CHECK(g && ft_grammar_matcher_new(g, v, &m) == FT_OK);
    if (!m)
        return;
    for (size_t i = 0; i < n; i++)
        CHECKF(accepts(m, c[i].text) == c[i].ok, "%s: '%s' should be %s", what, c[i].text,
               c[i].ok ? "accepted" : "rejected");
    ft_grammar_matcher_free(m);
}

static void test_gbnf(const struct ft_grammar_vocab *v) {
    struct ft_grammar *g = gbnf("root ::= greeting \" \" name (\"!\")?\n"
                                "greeting ::= \"hello\" | \"hi\"\n"
                                "name ::= [A-Z] [a-z]* # a comment\n");
    static const struct accept_case c1[] = {{"hello World", true}, {"hi Bob!", true}, {"hi bob", false},
                                            {"hello ", false},     {"hey Bob", false}, {"hi Bob!!", false}};
    check_cases(g, v, c1, FT_ARRAY_LEN(c1), "gbnf greeting");
    ft_grammar_free(g);

    /* repetition bounds, unicode classes, negation, groups */
    g = gbnf("root ::= [0-9]{2,3} \"-\" [^a-z\\n]+ (\"é\" | [α-ω]){1}");
    static const struct accept_case c2[] = {{"12-AB\xc3\xa9", true}, {"123-Z\xce\xb2", true}, {"1-AB\xc3\xa9", false},
                                            {"1234-A\xc3\xa9", false}, {"12-ab\xc3\xa9", false}, {"12-\xc3\xa9", false},
                                            {"12-\xe2\x82\xac\xc3\xa9", true}};
    check_cases(g, v, c2, FT_ARRAY_LEN(c2), "gbnf classes");
    ft_grammar_free(g);

    /* nullable loops terminate: (x?)* */
    g = gbnf("root ::= (\"a\"?)* \"b\"");
    static const struct accept_case c3[] = {{"b", true}, {"aaab", true}, {"aa", false}};
    check_cases(g, v, c3, FT_ARRAY_LEN(c3), "gbnf nullable loop");
    ft_grammar_free(g);

    /* exponential ambiguity is bounded: each 'a' doubles the parses, and
     * past the bound the matcher fails (and stays failed) instead of
     * growing */
    g = gbnf("root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"\"");
    if (g) {
        struct ft_grammar_matcher *m = NULL;
        CHECK(ft_grammar_matcher_new(g, v, &m) == FT_OK);
        CHECK(ft_grammar_matcher_accept_bytes(m, "aaaaab", 6) == FT_OK);
        CHECK(ft_grammar_matcher_accept_bytes(m, "a", 1) == FT_EINVAL); /* only closers now */
        ft_grammar_matcher_reset(m);
        CHECK(ft_grammar_matcher_accept_bytes(m, "aaaaaaaaaaaaaaaa", 16) == FT_ERANGE);
        const uint32_t *bits;
        CHECK(ft_grammar_matcher_mask(m, &bits, NULL) == FT_ERANGE);
        ft_grammar_matcher_free(m);
        ft_grammar_free(g);
    }

    /* errors that name the problem */
    struct {
        const char *src, *needle;
    } bad[] = {
        {"root ::= foo", "'foo' is used but not defined"},
        {"root ::= root \"a\" | \"b\"", "left-recursive"},
        {"root ::= a | \"z\"\na ::= \"b\"? root \"c\"", "left-recursive"},
        {"root ::= \"a\" root", "matches no input"},
        {"root ::= \"abc", "unterminated string"},
        {"root ::= [a-", "unterminated class"},
        {"root ::= (\"a\"", "not closed"},
        {"root ::= \"a\"{5000}", "repetition"},
        {"foo ::= \"a\"", "no 'root' rule"},
        {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(bad); i++) {
        struct ft_grammar *x = NULL;
        char err[256] = "";
        int rc = ft_grammar_from_gbnf(bad[i].src, strlen(bad[i].src), &x, err, sizeof(err));
        CHECKF(rc != 0 && strstr(err, bad[i].needle), "'%s' gave rc %d '%s'", bad[i].src, rc, err);
        ft_grammar_free(x);
    }
    /* deep nesting is refused, not a stack overflow */
    char deep[1024] = "root ::= ";
    for (int i = 0; i < 200; i++)
        strcat(deep, "(");
    struct ft_grammar *x = NULL;
    char err[256];
    CHECK(ft_grammar_from_gbnf(deep, strlen(deep), &x, err, sizeof(err)) != 0 && strstr(err, "deeper"));
}

static void test_schema(const struct ft_grammar_vocab *v) {
    char err[320];
    struct ft_grammar *g = schema("{\"type\":\"object\",\"properties\":{"
                                  "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":5},"
                                  "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
                                  "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2},"
                                  "\"ok\":{\"type\":\"boolean\"}},"
                                  "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
                                  err, sizeof(err));
    CHECKF(g != NULL, "%s", err);
    static const struct accept_case c1[] = {
        {"{\"name\":\"Al\",\"age\":42}", true},
        {"{ \"name\": \"Al\", \"age\": 150, \"ok\": true }", true},
        {"{\"name\":\"Al\",\"age\":42,\"tags\":[\"a\",\"b\"]}", true},
        {"{\"name\":\"Al\",\"age\":42,\"tags\":[]}", true},
        {"{\"name\":\"Al\",\"age\":42,\"tags\":[\"a\",\"b\",\"a\"]}", false},
        {"{\"name\":\"Al\",\"age\":151}", false},
        {"{\"name\":\"Al\",\"age\":-1}", false},
        {"{\"name\":\"Al\",\"age\":007}", false},
        {"{\"name\":\"\",\"age\":1}", false},
        {"{\"name\":\"abcdef\",\"age\":1}", false},
        {"{\"age\":1}", false},
        {"{\"name\":\"Al\"}", false},
        {"{\"name\":\"Al\",\"age\":1,\"x\":1}", false},
        {"{\"name\":\"A\\\"l\",\"age\":1}", true},
        {"{\"name\":\"\xc3\xa9t\xc3\xa9\",\"age\":1}", true},
        {"{\"name\":\"Al\",\"age\":42}  ", false},
    };
    check_cases(g, v, c1, FT_ARRAY_LEN(c1), "schema object");
    ft_grammar_free(g);

    /* $ref recursion, anyOf, type arrays, const, number ranges, patterns */
    g = schema("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":[\"integer\",\"null\"]},"
               "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
               "\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"const\":\"leaf\"}]}",
               err, sizeof(err));
    CHECKF(g != NULL, "%s", err);
    static const struct accept_case c2[] = {
        {"{\"v\":1}", true},
        {"{\"v\":null,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}", true},
        {"\"leaf\"", true},
        {"\"leaves\"", false},
        {"{\"v\":1.5}", false},
    };
    check_cases(g, v, c2, FT_ARRAY_LEN(c2), "schema ref");
    ft_grammar_free(g);

    g = schema("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":10},"
               "\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"},"
               "\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
               "\"n\":{\"type\":\"integer\",\"exclusiveMinimum\":-20,\"exclusiveMaximum\":1000}},"
               "\"required\":[\"x\",\"code\",\"id\",\"n\"]}",
               err, sizeof(err));
    CHECKF(g != NULL, "%s", err);
    static const struct accept_case c3[] = {
        {"{\"x\":-2,\"code\":\"AB-123\",\"id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"n\":-19}", true},
        {"{\"x\":-1.75,\"code\":\"AB-123\",\"id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"n\":999}", true},
        {"{\"x\":9.99,\"code\":\"ZZ-000\",\"id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"n\":0}", true},
        {"{\"x\":10,\"code\":\"ZZ-000\",\"id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"n\":0}", true},
        {"{\"x\":10.5,\"code\":\"ZZ-000\",\"id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"n\":0}", false},
        {"{\"x\":-3,\"code\":\"ZZ-000\",\"id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"n\":0}", false},
        {"{\"x\":1,\"code\":\"Z-000\",\"id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"n\":0}", false},
        {"{\"x\":1,\"code\":\"ZZ-000\",\"id\":\"0f8fad5b\",\"n\":0}", false},
        {"{\"x\":1,\"code\":\"ZZ-000\",\"id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"n\":-20}", false},
        {"{\"x\":1,\"code\":\"ZZ-000\",\"id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"n\":1000}", false},
    };
    check_cases(g, v, c3, FT_ARRAY_LEN(c3), "schema ranges");
    ft_grammar_free(g);

    /* integer ranges exhaustively: [-137, 2048] against its definition */
    g = schema("{\"type\":\"integer\",\"minimum\":-137,\"maximum\":2048}", err, sizeof(err));
    struct ft_grammar_matcher *m = NULL;
    CHECK(g && ft_grammar_matcher_new(g, v, &m) == FT_OK);
    int wrong = 0;
    for (int i = -3000; i <= 3000 && m; i++) {
        char b[16];
        snprintf(b, sizeof(b), "%d", i);
        wrong += accepts(m, b) != (i >= -137 && i <= 2048);
    }
    CHECK_EQ_INT(wrong, 0);
    ft_grammar_matcher_free(m);
    ft_grammar_free(g);

    /* a required name outside properties takes additionalProperties' schema;
     * \D is ASCII (a validator's \D refuses Unicode digits) */
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"^\\\\D+$\"}},"
               "\"required\":[\"a\",\"b\"],\"additionalProperties\":{\"type\":\"integer\"}}",
               err, sizeof(err));
    CHECKF(g != NULL, "%s", err);
    static const struct accept_case c6[] = {
        {"{\"a\":\"x\",\"b\":3}", true},
        {"{\"a\":\"x\",\"b\":\"3\"}", false},
        {"{\"a\":\"x1\",\"b\":3}", false},
        {"{\"a\":\"\xd9\xa3\",\"b\":3}", false},
    };
    check_cases(g, v, c6, FT_ARRAY_LEN(c6), "required outside properties");
    ft_grammar_free(g);

    /* framed: a forced tool call in a model's own markup */
    g = NULL;
    static const char tools[] = "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_weather\"},"
                                "\"arguments\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                                "\"required\":[\"city\"]}},\"required\":[\"name\",\"arguments\"]}]}";
    CHECK(ft_grammar_from_json_schema_framed(tools, strlen(tools), "<tool_call>\n", "\n</tool_call>", &g, err,
                                             sizeof(err)) == FT_OK);
    static const struct accept_case c5[] = {
        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", true},
        {"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", false},
        {"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", false},
    };
    check_cases(g, v, c5, FT_ARRAY_LEN(c5), "framed tool call");
    ft_grammar_free(g);

    /* frames: several calls, each in its markup, separated; at most max_items */
    static const char call[] = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
                               "\"required\":[\"n\"],\"additionalProperties\":false}";
    struct ft_grammar_frame hermes = {.open = "<c>", .close = "</c>", .sep = "\n", .max_items = 0};
    CHECK(ft_grammar_from_json_schema_frame(call, strlen(call), &hermes, &g, err, sizeof(err)) == FT_OK);
    static const struct accept_case c7[] = {
        {"<c>{\"n\":1}</c>", true},
        {"<c>{\"n\":1}</c>\n<c>{\"n\": 22}</c>\n<c>{\"n\":3}</c>", true},
        {"<c>{\"n\":1}</c><c>{\"n\":2}</c>", false},   /* no separator */
        {"<c>{\"n\":1}</c>\n", false},                  /* a separator needs an item */
        {"", false},                                     /* at least one */
        {"<c>{\"n\":\"1\"}</c>", false},
    };
    check_cases(g, v, c7, FT_ARRAY_LEN(c7), "frame: any number of items");
    ft_grammar_free(g);
    struct ft_grammar_frame mistral = {.prefix = "[C][", .sep = ", ", .suffix = "]", .max_items = 2};
    CHECK(ft_grammar_from_json_schema_frame(call, strlen(call), &mistral, &g, err, sizeof(err)) == FT_OK);
    static const struct accept_case c8[] = {
        {"[C][{\"n\":1}]", true},
        {"[C][{\"n\":1}, {\"n\":2}]", true},
        {"[C][{\"n\":1}, {\"n\":2}, {\"n\":3}]", false}, /* max_items 2 */
        {"[C][]", false},
        {"{\"n\":1}", false},
    };
    check_cases(g, v, c8, FT_ARRAY_LEN(c8), "frame: prefix, suffix, at most 2");
    ft_grammar_free(g);
    struct ft_grammar_frame neg = {.max_items = -1};
    CHECK(ft_grammar_from_json_schema_frame(call, strlen(call), &neg, &g, err, sizeof(err)) == FT_EINVAL && !g);

    /* guided_choice: exactly one of the strings */
    static const char *const choices[] = {"Paris", "Par", "Rome \"x\"", "\xc3\xa9t\xc3\xa9"};
    CHECK(ft_grammar_from_choices(choices, FT_ARRAY_LEN(choices), &g, err, sizeof(err)) == FT_OK);
    static const struct accept_case c9[] = {
        {"Paris", true}, {"Par", true}, {"Rome \"x\"", true}, {"\xc3\xa9t\xc3\xa9", true},
        {"Pari", false}, {"Paris ", false}, {"paris", false}, {"", false}, {"ParisPar", false},
    };
    check_cases(g, v, c9, FT_ARRAY_LEN(c9), "choices");
    ft_grammar_free(g);
    static const char *const empty_choice[] = {"a", ""};
    CHECK(ft_grammar_from_choices(empty_choice, 2, &g, err, sizeof(err)) == FT_EINVAL && !g);
    CHECKF(strstr(err, "choice 1 is empty") != NULL, "err '%s'", err);
    CHECK(ft_grammar_from_choices(choices, 0, &g, err, sizeof(err)) == FT_EINVAL && !g);

    /* guided_regex: characters as themselves, the whole text must match */
    static const char re[] = "[A-Z][a-z]+, \\d{4}( \"q\")?";
    CHECK(ft_grammar_from_regex(re, strlen(re), &g, err, sizeof(err)) == FT_OK);
    static const struct accept_case c10[] = {
        {"Paris, 1999", true}, {"Rome, 2024 \"q\"", true},
        {"Paris, 199", false}, {"xParis, 1999", false}, {"Paris, 1999!", false},
        {"Rome, 2024 \\\"q\\\"", false}, /* no JSON escaping */
    };
    check_cases(g, v, c10, FT_ARRAY_LEN(c10), "regex, raw and anchored");
    ft_grammar_free(g);
    static const char re2[] = "^a.c$";
    CHECK(ft_grammar_from_regex(re2, strlen(re2), &g, err, sizeof(err)) == FT_OK);
    static const struct accept_case c11[] = {{"abc", true}, {"a\"c", true}, {"a\nc", false}, {"abcd", false}};
    check_cases(g, v, c11, FT_ARRAY_LEN(c11), "regex with explicit anchors");
    ft_grammar_free(g);
    static const char re3[] = "a(?=b)";
    CHECK(ft_grammar_from_regex(re3, strlen(re3), &g, err, sizeof(err)) == FT_EUNSUPPORTED && !g);
    CHECKF(strstr(err, "the regex") && !strstr(err, "'pattern'"), "err '%s'", err);

    /* json_object: any object, nothing else */
    CHECK(ft_grammar_json_object(&g) == FT_OK);
    static const struct accept_case c4[] = {
        {"{}", true},
        {"{\"a\": [1, 2.5e3, -0, \"x\", true, null, {\"b\": {}}]}", true},
        {"{\n  \"a\": \"\\u00e9\\n\"\n}", true},
        {"[]", false},
        {"{\"a\":}", false},
        {"{\"a\":01}", false},
        {"{\"a\":\"\x01\"}", false},
        {"{\"a\":\"\\ud83d\\ude00\"}", false}, /* surrogates: written raw as UTF-8 instead */
        {"{\"a\":\"\\uD7FF\\uE000\"}", true},
    };
    check_cases(g, v, c4, FT_ARRAY_LEN(c4), "json_object");
    ft_grammar_free(g);

    /* unsupported keywords and bad schemas are named */
    struct {
        const char *src, *needle;
    } bad[] = {
        {"{\"type\":\"object\",\"not\":{}}", "'not'"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'"},
        {"{\"type\":\"object\",\"patternProperties\":{}}", "'patternProperties'"},
        {"{\"type\":\"string\",\"format\":\"email\"}", "'format'"},
        {"{\"allOf\":[{},{}]}", "'allOf'"},
        {"{\"$ref\":\"#/$defs/missing\"}", "does not resolve"},
        {"{\"$ref\":\"#\"}", "refers to itself"},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookaround"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "'\\1'"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "allow no"},
        {"{\"type\":\"wat\"}", "unknown type"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"minimum\":1,\"if\":{}}}}",
         "'if' at #/properties/a"},
        {"[1]", "must be an object"},
        {"{", "not valid JSON"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(bad); i++) {
        struct ft_grammar *x = NULL;
        char e[320] = "";
        int rc = ft_grammar_from_json_schema(bad[i].src, strlen(bad[i].src), &x, e, sizeof(e));
        CHECKF(rc != 0 && strstr(e, bad[i].needle), "'%s' gave rc %d '%s'", bad[i].src, rc, e);
        ft_grammar_free(x);
    }
}

/* Brute force: from the state after `prefix`, a token is allowed iff its
 * bytes can be accepted (end-of-generation iff complete); compare with the
 * mask for every token of the vocabulary. */
static void check_mask(const struct ft_grammar *g, const struct ft_grammar_vocab *v, const char *prefix,
                       const char *what) {
    struct ft_grammar_matcher *m = NULL;
    CHECK(ft_grammar_matcher_new(g, v, &m) == FT_OK);
    if (!m)
        return;
    CHECKF(ft_grammar_matcher_accept_bytes(m, prefix, strlen(prefix)) == FT_OK, "%s: prefix rejected", what);
    const uint32_t *bits;
    int32_t n_allowed = 0;
    CHECK(ft_grammar_matcher_mask(m, &bits, &n_allowed) == FT_OK);
    uint32_t *copy = malloc(sizeof(uint32_t) * (size_t)m->n_words);
    memcpy(copy, bits, sizeof(uint32_t) * (size_t)m->n_words);
    const int32_t saved = m->sid;
    int mismatches = 0, count = 0;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        bool ok = ft_grammar_matcher_accept_token(m, id) == FT_OK;
        set_sid(m, saved);
        bool bit = (copy[id >> 5] >> (id & 31)) & 1u;
        count += ok;
        if (ok != bit && mismatches++ < 5)
            fprintf(stderr, "%s: token %d: brute force %d, mask %d\n", what, (int)id, ok, bit);
    }
    CHECKF(mismatches == 0, "%s: %d mismatches", what, mismatches);
    CHECK_EQ_INT(count, n_allowed);
    /* the cache answers the same state the same way */
    CHECK(ft_grammar_matcher_mask(m, &bits, NULL) == FT_OK && !memcmp(bits, copy, sizeof(uint32_t) * (size_t)m->n_words));
    free(copy);
    ft_grammar_matcher_free(m);
}

static void test_masks(const struct ft_grammar_vocab *v, const char *vname) {
    char err[320], what[128];
    struct ft_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                                  "\"n\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":300},"
                                  "\"t\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}}},"
                                  "\"required\":[\"name\",\"n\",\"t\"],\"additionalProperties\":false}",
                                  err, sizeof(err));
    CHECKF(g != NULL, "%s", err);
    static const char *const prefixes[] = {"", "{", "{\"na", "{\"name\": \"ab", "{\"name\": \"a\\", "{\"name\": \"\xc3",
                                           "{\"name\":\"x\",\"n\":2", "{\"name\":\"x\",\"n\":-",
                                           "{\"name\":\"x\",\"n\":1,\"t\":[1.5",
                                           "{\"name\":\"x\",\"n\":1,\"t\":[]"};
    for (size_t i = 0; g && i < FT_ARRAY_LEN(prefixes); i++) {
        snprintf(what, sizeof(what), "%s schema after '%s'", vname, prefixes[i]);
        check_mask(g, v, prefixes[i], what);
    }
    ft_grammar_free(g);
    /* a complete sentence allows end-of-generation */
    g = gbnf("root ::= [a-z]+ \".\"?");
    if (g) {
        check_mask(g, v, "ab", "gbnf complete-or-more");
        check_mask(g, v, "ab.", "gbnf done");
        struct ft_grammar_matcher *m = NULL;
        CHECK(ft_grammar_matcher_new(g, v, &m) == FT_OK);
        CHECK(!ft_grammar_matcher_complete(m));
        CHECK(ft_grammar_matcher_accept_bytes(m, "ab", 2) == FT_OK && ft_grammar_matcher_complete(m) &&
              !ft_grammar_matcher_done(m));
        CHECK(ft_grammar_matcher_accept_bytes(m, ".", 1) == FT_OK && ft_grammar_matcher_done(m));
        CHECK(ft_grammar_matcher_accept_bytes(m, "x", 1) == FT_EINVAL);
        ft_grammar_matcher_free(m);
    }
    ft_grammar_free(g);
}

int main(void) {
    const char *dir = ft_test_shared_dir();
    if (!dir)
        FT_TEST_SKIP("FT_SHARED_DIR (../shared) is absent: no vocabulary to test the matcher on");
    static const char *const vocabs[] = {"llama-bpe", "llama-spm"};
    for (size_t k = 0; k < FT_ARRAY_LEN(vocabs); k++) {
        struct ft_tokenizer *t = load_vocab(dir, vocabs[k]);
        CHECKF(t != NULL, "cannot load %s", vocabs[k]);
        if (!t)
            continue;
        struct ft_grammar_vocab *v = NULL;
        CHECK(ft_grammar_vocab_new(t, &v) == FT_OK);
        if (v) {
            printf("%s: %d tokens, %zu trie nodes, %zu bytes\n", vocabs[k], (int)ft_grammar_vocab_n_tokens(v),
                   ft_grammar_vocab_n_nodes(v), ft_grammar_vocab_bytes(v));
            if (k == 0) {
                test_gbnf(v);
                test_schema(v);
            }
            test_masks(v, vocabs[k]);
        }
        ft_grammar_vocab_free(v);
        ft_tokenizer_free(t);
    }
    return ft_test_finish("test_grammar");
}
