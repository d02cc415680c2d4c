/* The reasoning parser (engine/text/reasoning.c): the think syntax (Qwen3,
 * QwQ, DeepSeek R1) and harmony (gpt-oss), fed whole, byte by byte and
 * split at every offset, so a marker cut across pieces is recognised and a
 * streamed answer equals a non-streamed one; an unterminated think, no
 * reasoning at all, reasoning_format "none", prompts that open the
 * reasoning, harmony tool calls; detection on llama.cpp's templates. */
#include "ft_test.h"

#include "ft/reasoning.h"

#include "ft/common.h"

#include <stdbool.h>

struct result {
    char reasoning[2048], content[2048];
    char calls[512]; /* "name(args);" per call */
};

static void cat(char *dst, size_t cap, const char *s, size_t n) {
    const size_t k = strlen(dst);
    if (k + n + 1 <= cap) {
        memcpy(dst + k, s, n);
        dst[k + n] = '\0';
    }
}

/* Feed text in pieces: cuts[0..n_cuts) are the offsets where a piece ends. */
static void parse_cut(enum ft_reasoning_syntax syn, bool extract, bool opens, const char *text, const size_t *cuts,
                      size_t n_cuts, struct result *out) {
    memset(out, 0, sizeof(*out));
    struct ft_reasoning_parser p;
    ft_reasoning_init(&p, syn, extract, opens);
    size_t at = 0;
    const size_t len = strlen(text);
    for (size_t i = 0; i <= n_cuts; i++) {
        const size_t end = i < n_cuts ? cuts[i] : len;
        CHECK(ft_reasoning_feed(&p, text + at, end - at) == 0);
        cat(out->reasoning, sizeof(out->reasoning), p.reasoning.s ? p.reasoning.s : "", p.reasoning.n);
        cat(out->content, sizeof(out->content), p.content.s ? p.content.s : "", p.content.n);
        at = end;
    }
    CHECK(ft_reasoning_finish(&p) == 0);
    cat(out->reasoning, sizeof(out->reasoning), p.reasoning.s ? p.reasoning.s : "", p.reasoning.n);
    cat(out->content, sizeof(out->content), p.content.s ? p.content.s : "", p.content.n);
    for (size_t i = 0; i < p.n_calls; i++) {
        char c[256];
        snprintf(c, sizeof(c), "%s(%s);", p.calls[i].name, p.calls[i].arguments);
        cat(out->calls, sizeof(out->calls), c, strlen(c));
    }
    CHECK(p.reasoning_total == strlen(out->reasoning));
    ft_reasoning_free(&p);
}

/* Whole, byte by byte, and cut once at every offset: always the same. */
static void expect(enum ft_reasoning_syntax syn, bool extract, bool opens, const char *text, const char *reasoning,
                   const char *content, const char *calls) {
    const size_t len = strlen(text);
    struct result r;
    parse_cut(syn, extract, opens, text, NULL, 0, &r);
    CHECKF(!strcmp(r.reasoning, reasoning), "%s: reasoning [%s], want [%s]", text, r.reasoning, reasoning);
    CHECKF(!strcmp(r.content, content), "%s: content [%s], want [%s]", text, r.content, content);
    CHECKF(!strcmp(r.calls, calls), "%s: calls [%s], want [%s]", text, r.calls, calls);
    size_t *cuts = malloc(sizeof(size_t) * (len + 1));
    for (size_t i = 0; i < len; i++)
        cuts[i] = i;
    parse_cut(syn, extract, opens, text, cuts, len, &r);
    CHECKF(!strcmp(r.reasoning, reasoning) && !strcmp(r.content, content) && !strcmp(r.calls, calls),
           "%s byte by byte: [%s] [%s] [%s]", text, r.reasoning, r.content, r.calls);
    for (size_t i = 1; i < len; i++) {
        parse_cut(syn, extract, opens, text, &i, 1, &r);
        CHECKF(!strcmp(r.reasoning, reasoning) && !strcmp(r.content, content) && !strcmp(r.calls, calls),
               "%s cut at %zu: [%s] [%s] [%s]", text, i, r.reasoning, r.content, r.calls);
    }
    free(cuts);
}

static void test_think(void) {
    const enum ft_reasoning_syntax T = FT_REASONING_SYNTAX_THINK;
    /* Qwen3: the model opens the tag; whitespace around the tags goes. */
    expect(T, true, false, "<think>\nLet me count: 2+2.\n</think>\n\nIt is 4.", "Let me count: 2+2.", "It is 4.", "");
    expect(T, true, false, "  <think>a\n\nb</think>c </think> d", "a\n\nb", "c </think> d", "");
    /* no reasoning: the text untouched, leading whitespace too */
    expect(T, true, false, "Hello <think>x</think>", "", "Hello <think>x</think>", "");
    expect(T, true, false, "\n <thinking", "", "\n <thinking", "");
    expect(T, true, false, "<thin", "", "<thin", "");
    expect(T, true, false, "", "", "", "");
    /* thinking off: Qwen3's empty block is no reasoning */
    expect(T, true, false, "<think>\n\n</think>\n\nHi", "", "Hi", "");
    /* unterminated: all of it is reasoning */
    expect(T, true, false, "<think>\nstill thinking </thi", "still thinking </thi", "", "");
    expect(T, true, false, "<think>", "", "", "");
    /* QwQ / R1: the prompt opened the tag */
    expect(T, true, true, "Hmm, 3 cases.\n</think>\n\nThree.", "Hmm, 3 cases.", "Three.", "");
    expect(T, true, true, "no end", "no end", "", "");
    expect(T, true, true, "</think>answer", "", "answer", "");
    /* reasoning_format none: unchanged */
    expect(T, false, false, "<think>\nx\n</think>\n\ny", "", "<think>\nx\n</think>\n\ny", "");
    expect(T, false, true, "x</think>y", "", "x</think>y", "");
    /* multi-byte UTF-8 and a "<" inside the reasoning */
    expect(T, true, false, "<think>é < ü</think>ñ", "é < ü", "ñ", "");
    /* syntax none passes everything */
    expect(FT_REASONING_SYNTAX_NONE, true, false, "<think>x</think>", "", "<think>x</think>", "");
}

static void test_harmony(void) {
    const enum ft_reasoning_syntax H = FT_REASONING_SYNTAX_HARMONY;
    const char *full = "<|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|>"
                       "<|start|>assistant<|channel|>final<|message|>2+2 = 4.";
    expect(H, true, false, full, "User asks 2+2. Answer 4.", "2+2 = 4.", "");
    /* the <|return|> token is end of generation, but when it is text it ends the message */
    expect(H, true, false, "<|channel|>final<|message|>Hi<|return|>", "", "Hi", "");
    /* two analysis blocks and a commentary preamble */
    expect(H, true, false,
           "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>commentary<|message|>Let me "
           "check.<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|><|start|>assistant<|channel|>final<|"
           "message|>done",
           "ab", "Let me check.done", "");
    /* a tool call, recipient in the role header */
    expect(H, true, false,
           "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions.get_weather"
           "<|channel|>commentary <|constrain|>json<|message|>{\"location\": \"Paris\"}<|call|>",
           "Need weather.", "", "get_weather({\"location\": \"Paris\"});");
    /* recipient in the channel header, cut off before <|call|> */
    expect(H, true, false, "<|channel|>commentary to=functions.search <|constrain|>json<|message|> {\"q\": 1} ", "",
           "", "search({\"q\": 1});");
    /* stray "commentary to=assistant" before the final channel */
    expect(H, true, false, "<|channel|>commentary to=assistant<|channel|>final<|message|>ok", "", "ok", "");
    /* a message to another recipient is dropped */
    expect(H, true, false,
           "<|channel|>analysis to=browser.search<|message|>{}<|call|><|start|>assistant<|channel|>final<|message|>x",
           "", "x", "");
    /* no markup at all: content as written */
    expect(H, true, false, "Just text, <|end|> and all.", "", "Just text, <|end|> and all.", "");
    expect(H, true, false, "", "", "", "");
    /* unterminated analysis */
    expect(H, true, false, "<|channel|>analysis<|message|>thinking <|en", "thinking <|en", "", "");
    /* the prompt opened the analysis (a continued message) */
    expect(H, true, true, "more<|end|><|start|>assistant<|channel|>final<|message|>y", "more", "y", "");
    /* none: the analysis stays in the content with its markers, as llama-server's */
    expect(H, false, false, full, "",
           "<|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|>2+2 = 4.", "");
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    *len = fread(s, 1, (size_t)n, f);
    s[*len] = '\0';
    fclose(f);
    return s;
}

static void test_detect(void) {
    const char *src = getenv("FT_SOURCE_DIR");
    if (!src) {
        printf("FT_SOURCE_DIR not set: template detection skipped\n");
        return;
    }
    static const struct {
        const char *name;
        enum ft_reasoning_syntax syntax;
    } cases[] = {
        {"openai-gpt-oss-120b", FT_REASONING_SYNTAX_HARMONY},
        {"Qwen-Qwen3-0.6B", FT_REASONING_SYNTAX_THINK},
        {"Qwen-QwQ-32B", FT_REASONING_SYNTAX_THINK},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", FT_REASONING_SYNTAX_THINK},
        {"llama-cpp-deepseek-r1", FT_REASONING_SYNTAX_THINK},
        {"Qwen-Qwen2.5-7B-Instruct", FT_REASONING_SYNTAX_NONE},
        {"meta-llama-Llama-3.1-8B-Instruct", FT_REASONING_SYNTAX_NONE},
        {"google-gemma-2-2b-it", FT_REASONING_SYNTAX_NONE},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/tests/data/templates/llama.cpp/%s.jinja", src, cases[i].name);
        size_t len = 0;
        char *t = slurp(path, &len);
        CHECKF(t != NULL, "%s", path);
        CHECKF(ft_reasoning_syntax_detect(t, len) == cases[i].syntax, "%s: %s", cases[i].name,
               ft_reasoning_syntax_name(ft_reasoning_syntax_detect(t, len)));
        free(t);
    }
}

static void test_names_and_prompts(void) {
    enum ft_reasoning_format f;
    CHECK(ft_reasoning_format_parse("none", &f) == 0 && f == FT_REASONING_FORMAT_NONE);
    CHECK(ft_reasoning_format_parse("auto", &f) == 0 && f == FT_REASONING_FORMAT_AUTO);
    CHECK(ft_reasoning_format_parse("deepseek", &f) == 0 && f == FT_REASONING_FORMAT_DEEPSEEK);
    CHECK(ft_reasoning_format_parse("deepseek-legacy", &f) == FT_EINVAL);
    CHECK(ft_reasoning_format_parse(NULL, &f) == FT_EINVAL);
    const char *qwq = "<|im_start|>assistant\n<think>\n";
    CHECK(ft_reasoning_prompt_opens(FT_REASONING_SYNTAX_THINK, qwq, strlen(qwq)));
    const char *qwen3_off = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    CHECK(!ft_reasoning_prompt_opens(FT_REASONING_SYNTAX_THINK, qwen3_off, strlen(qwen3_off)));
    const char *qwen3 = "<|im_start|>assistant\n";
    CHECK(!ft_reasoning_prompt_opens(FT_REASONING_SYNTAX_THINK, qwen3, strlen(qwen3)));
    const char *oss = "<|start|>assistant";
    CHECK(!ft_reasoning_prompt_opens(FT_REASONING_SYNTAX_HARMONY, oss, strlen(oss)));
    const char *oss_open = "<|start|>assistant<|channel|>analysis<|message|>";
    CHECK(ft_reasoning_prompt_opens(FT_REASONING_SYNTAX_HARMONY, oss_open, strlen(oss_open)));
    ft_reasoning_free(NULL);
    struct ft_reasoning_parser z = {0};
    ft_reasoning_free(&z);
}

int main(void) {
    test_think();
    test_harmony();
    test_detect();
    test_names_and_prompts();
    return ft_test_finish("test_reasoning");
}
