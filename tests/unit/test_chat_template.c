/* Chat templates: real templates of the supported families rendered with
 * several conversations and compared with prompts worked out by hand from
 * the template text (and cross-checked once with Python jinja2 in HF's
 * configuration); then the Jinja semantics the templates rely on, the error
 * paths (raise_exception, unsupported syntax with its position, bad role
 * order) and the resource bounds against hostile templates.
 *
 * Real template texts live in tests/unit/data/templates/ (see README.md);
 * they are found through FT_SOURCE_DIR, which ctest sets. */
#include "ft/chat_template.h"
#include "ft/common.h"

#include "engine/text/jinja.h"
#include "ft_test.h"

#include <pthread.h>
#include <time.h>

/* ------------------------------------------------------------ helpers */

typedef struct ft_chat_message msg;

static char *render(const struct ft_chat_template *t, const msg *m, size_t n, bool gen, const char *bos,
                    const char *eos, int *rc_out) {
    char *out = NULL;
    size_t len = 0;
    int rc = ft_chat_template_render(t, m, n, gen, bos, eos, &out, &len);
    if (rc_out)
        *rc_out = rc;
    if (rc)
        return NULL;
    if (strlen(out) != len) {
        CHECKF(0, "out_len %zu != strlen %zu", len, strlen(out));
    }
    return out;
}

#define EXPECT_RENDER(t, m, gen, bos, eos, expected)                                                        \
    do {                                                                                                    \
        int rc_;                                                                                            \
        char *got_ = render((t), (m), FT_ARRAY_LEN(m), (gen), (bos), (eos), &rc_);                          \
        CHECKF(rc_ == 0, "render failed: %d (%s)", rc_, ft_last_error());                                   \
        if (got_) {                                                                                         \
            CHECKF(strcmp(got_, (expected)) == 0, "\n--- got:\n%s\n--- expected:\n%s\n---", got_, (expected)); \
            free(got_);                                                                                     \
        }                                                                                                   \
    } while (0)

#define EXPECT_FAIL(t, m, gen, want_rc, want_msg)                                                          \
    do {                                                                                                   \
        int rc_;                                                                                           \
        ft_clear_error();                                                                                  \
        char *got_ = render((t), (m), FT_ARRAY_LEN(m), (gen), "<s>", "</s>", &rc_);                       \
        CHECKF(rc_ == (want_rc), "rc %d, want %d (%s)", rc_, (want_rc), ft_last_error());                 \
        CHECKF(strstr(ft_last_error(), (want_msg)) != NULL, "error '%s' lacks '%s'", ft_last_error(), (want_msg)); \
        free(got_);                                                                                        \
    } while (0)

static struct ft_chat_template *load(const char *name) {
    const char *dir = getenv("FT_SOURCE_DIR");
    if (!dir || !*dir)
        return NULL;
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/unit/data/templates/%s", dir, name);
    size_t n = 0;
    char *src = ft_test_read_file(path, &n);
    CHECKF(src != NULL, "cannot read %s", path);
    if (!src)
        return NULL;
    struct ft_chat_template *t = NULL;
    int rc = ft_chat_template_parse(src, n, &t);
    CHECKF(rc == 0, "%s: parse failed %d (%s)", name, rc, ft_last_error());
    free(src);
    return t;
}

/* Render a small inline template with one user message "Hello". */
static char *quick(const char *src, int *rc) {
    struct ft_chat_template *t = NULL;
    *rc = ft_chat_template_parse(src, strlen(src), &t);
    if (*rc)
        return NULL;
    msg m[] = {{"user", "Hello"}};
    char *out = render(t, m, 1, true, "<s>", "</s>", rc);
    ft_chat_template_free(t);
    return out;
}

static void expect_quick(const char *src, const char *expected, int line) {
    int rc;
    char *got = quick(src, &rc);
    CHECKF(rc == 0, "line %d: %d (%s)", line, rc, ft_last_error());
    if (got) {
        CHECKF(strcmp(got, expected) == 0, "line %d: template %s\n  got:      [%s]\n  expected: [%s]", line, src, got,
               expected);
        free(got);
    }
}
#define Q(src, expected) expect_quick((src), (expected), __LINE__)

static void expect_quick_fail(const char *src, int want_rc, const char *want_msg, int line) {
    int rc;
    ft_clear_error();
    char *got = quick(src, &rc);
    CHECKF(rc == want_rc, "line %d: rc %d want %d (%s)", line, rc, want_rc, ft_last_error());
    CHECKF(strstr(ft_last_error(), want_msg) != NULL, "line %d: error '%s' lacks '%s'", line, ft_last_error(),
           want_msg);
    free(got);
}
#define QF(src, rc, msg) expect_quick_fail((src), (rc), (msg), __LINE__)

/* ------------------------------------------------------ conversations */

static const msg sys_user[] = {{"system", "You are terse."}, {"user", "Hi"}};
static const msg user_only[] = {{"user", "Hi"}};
static const msg multi[] = {
    {"system", "You are terse."}, {"user", "What is 2+2?"}, {"assistant", "  It is 4.  "}, {"user", "And 3+3?"}};
static const msg multi_nosys[] = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};
static const msg two_users[] = {{"user", "a"}, {"user", "b"}};
static const msg assistant_first[] = {{"assistant", "a"}, {"user", "b"}};
static const msg with_tool[] = {{"user", "a"}, {"tool", "42"}};

/* ----------------------------------------------------- real templates */

static void test_gemma3(struct ft_chat_template *t) {
    EXPECT_RENDER(t, sys_user, true, "<bos>", "<eos>",
                  "<bos><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
    EXPECT_RENDER(t, sys_user, false, "<bos>", "<eos>", "<bos><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n");
    EXPECT_RENDER(t, user_only, true, "<bos>", "<eos>", "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    EXPECT_RENDER(t, multi, true, "<bos>", "<eos>",
                  "<bos><start_of_turn>user\nYou are terse.\n\nWhat is 2+2?<end_of_turn>\n"
                  "<start_of_turn>model\nIt is 4.<end_of_turn>\n"
                  "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n");
    EXPECT_RENDER(t, multi_nosys, false, "<bos>", "<eos>",
                  "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                  "<start_of_turn>user\nBye<end_of_turn>\n");
    EXPECT_FAIL(t, two_users, true, FT_EINVAL, "Conversation roles must alternate user/assistant/user/assistant/...");
    EXPECT_FAIL(t, assistant_first, true, FT_EINVAL, "Conversation roles must alternate");
    /* an unknown role in an assistant slot is rendered under its own name */
    EXPECT_RENDER(t, with_tool, false, "<bos>", "<eos>",
                  "<bos><start_of_turn>user\na<end_of_turn>\n<start_of_turn>tool\n42<end_of_turn>\n");
    /* content none: neither string nor iterable */
    msg none_content[] = {{"user", NULL}};
    EXPECT_FAIL(t, none_content, true, FT_EINVAL, "Invalid content type");
}

static void test_gemma2(struct ft_chat_template *t) {
    EXPECT_RENDER(t, multi_nosys, true, "<bos>", "<eos>",
                  "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                  "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    EXPECT_FAIL(t, sys_user, true, FT_EINVAL, "System role not supported");
}

static void test_qwen25(struct ft_chat_template *t) {
    EXPECT_RENDER(t, sys_user, true, "", "<|im_end|>",
                  "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_RENDER(t, user_only, false, "", "<|im_end|>",
                  "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n");
    EXPECT_RENDER(t, multi, true, "", "<|im_end|>",
                  "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                  "<|im_start|>assistant\n  It is 4.  <|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"
                  "<|im_start|>assistant\n");
    /* a tool message becomes a user turn with <tool_response> */
    EXPECT_RENDER(t, with_tool, false, "", "",
                  "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                  "<|im_start|>user\na<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n");
}

static void test_qwen3(struct ft_chat_template *t) {
    EXPECT_RENDER(t, sys_user, true, "", "",
                  "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_RENDER(t, user_only, false, "", "", "<|im_start|>user\nHi<|im_end|>\n");
    EXPECT_RENDER(t, multi, true, "", "",
                  "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                  "<|im_start|>assistant\n  It is 4.  <|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"
                  "<|im_start|>assistant\n");
    /* Reasoning in an earlier assistant turn is dropped from the history... */
    msg think_hist[] = {{"user", "Hi"}, {"assistant", "<think>\nhmm\n</think>\n\nHello!"}, {"user", "Joke?"}};
    EXPECT_RENDER(t, think_hist, true, "", "",
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
                  "<|im_start|>user\nJoke?<|im_end|>\n<|im_start|>assistant\n");
    /* ...and kept, normalized, in an assistant turn after the last query. */
    msg think_last[] = {{"user", "Hi"}, {"assistant", "<think>\n\nhmm\n\n</think>\n\n\nHello!"}};
    EXPECT_RENDER(t, think_last, false, "", "",
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nHello!<|im_end|>\n");
    /* A user message that is a tool response does not count as the last query. */
    msg tool_resp[] = {{"user", "Q"}, {"assistant", "<think>r1</think>A1"}, {"user", "<tool_response>x</tool_response>"},
                       {"assistant", "<think>r2</think>A2"}};
    EXPECT_RENDER(t, tool_resp, false, "", "",
                  "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nr1\n</think>\n\nA1<|im_end|>\n"
                  "<|im_start|>user\n<tool_response>x</tool_response><|im_end|>\n"
                  "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n");
    /* consecutive tool messages share one user turn */
    msg tools2[] = {{"user", "a"}, {"tool", "1"}, {"tool", "2"}};
    EXPECT_RENDER(t, tools2, false, "", "",
                  "<|im_start|>user\na<|im_end|>\n<|im_start|>user\n<tool_response>\n1\n</tool_response>\n"
                  "<tool_response>\n2\n</tool_response><|im_end|>\n");
}

static void today(char *buf, size_t n) {
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(buf, n, "%d %b %Y", &tm);
}

static void test_llama31(struct ft_chat_template *t) {
    const char *B = "<|begin_of_text|>";
    EXPECT_RENDER(t, sys_user, true, B, "<|eot_id|>",
                  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                  "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                  "You are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    EXPECT_RENDER(t, user_only, false, B, "<|eot_id|>",
                  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                  "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                  "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
    EXPECT_RENDER(t, multi, true, B, "<|eot_id|>",
                  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                  "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                  "You are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nIt is 4.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* tool (ipython) messages */
    EXPECT_RENDER(t, with_tool, false, B, "",
                  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                  "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                  "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>"
                  "<|start_header_id|>ipython<|end_header_id|>\n\n\"42\"<|eot_id|>"); /* a string `is iterable` */
}

static void test_llama32(struct ft_chat_template *t) {
    /* strftime_now("%d %b %Y"): read the clock around the render so a
     * midnight between the two cannot fail the test */
    char d0[32], d1[32], e0[512], e1[512];
    today(d0, sizeof(d0));
    char *got = render(t, sys_user, FT_ARRAY_LEN(sys_user), true, "<|begin_of_text|>", "", NULL);
    today(d1, sizeof(d1));
#define LLAMA32_FMT                                                                                   \
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"                                  \
    "Cutting Knowledge Date: December 2023\nToday Date: %s\n\n"                                        \
    "You are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"                  \
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
    snprintf(e0, sizeof(e0), LLAMA32_FMT, d0);
    snprintf(e1, sizeof(e1), LLAMA32_FMT, d1);
#undef LLAMA32_FMT
    CHECK(got != NULL);
    if (got) {
        CHECKF(strcmp(got, e0) == 0 || strcmp(got, e1) == 0, "got:\n%s\nexpected:\n%s", got, e0);
        free(got);
    }
}

static void test_llama2(struct ft_chat_template *t, const char *what) {
    EXPECT_RENDER(t, sys_user, true, "<s>", "</s>", "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST]");
    EXPECT_RENDER(t, user_only, false, "<s>", "</s>", "<s>[INST] Hi [/INST]");
    EXPECT_RENDER(t, multi, true, "<s>", "</s>",
                  "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nWhat is 2+2? [/INST] It is 4. </s><s>[INST] And 3+3? [/INST]");
    EXPECT_FAIL(t, two_users, true, FT_EINVAL, "Conversation roles must alternate");
    EXPECT_FAIL(t, assistant_first, true, FT_EINVAL, "Conversation roles must alternate");
    /* unknown roles are skipped */
    EXPECT_RENDER(t, with_tool, false, "<s>", "</s>", "<s>[INST] a [/INST]");
    (void)what;
}

static void test_mistral_v1(struct ft_chat_template *t) {
    EXPECT_RENDER(t, sys_user, true, "<s>", "</s>", "<s> [INST] You are terse.\n\nHi [/INST]");
    EXPECT_RENDER(t, user_only, true, "<s>", "</s>", "<s> [INST] Hi [/INST]");
    EXPECT_RENDER(t, multi, false, "<s>", "</s>",
                  "<s> [INST] You are terse.\n\nWhat is 2+2? [/INST]   It is 4.  </s> [INST] And 3+3? [/INST]");
    EXPECT_FAIL(t, two_users, true, FT_EINVAL,
                "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...");
    EXPECT_FAIL(t, with_tool, true, FT_EINVAL,
                "Only user and assistant roles are supported, with the exception of an initial optional system message!");
}

static void test_mistral_v0(struct ft_chat_template *t) {
    EXPECT_RENDER(t, multi_nosys, true, "<s>", "</s>", "<s>[INST] Hi [/INST]Hello!</s>[INST] Bye [/INST]");
    /* no system role at all: a system message breaks the alternation first */
    EXPECT_FAIL(t, sys_user, true, FT_EINVAL, "Conversation roles must alternate");
    EXPECT_FAIL(t, with_tool, true, FT_EINVAL, "Only user and assistant roles are supported!");
}

static void test_mistral_nemo(struct ft_chat_template *t) {
    /* Nemo puts the system prompt into the LAST user message */
    EXPECT_RENDER(t, multi, true, "<s>", "</s>",
                  "<s>[INST]What is 2+2?[/INST]  It is 4.  </s>[INST]You are terse.\n\nAnd 3+3?[/INST]");
    EXPECT_RENDER(t, user_only, true, "<s>", "</s>", "<s>[INST]Hi[/INST]");
    EXPECT_FAIL(t, two_users, true, FT_EINVAL, "After the optional system message, conversation roles must alternate");
}

static void test_real_templates(void) {
    struct {
        const char *file;
        void (*fn)(struct ft_chat_template *);
    } cases[] = {
        {"google-gemma-3-it.jinja", test_gemma3},
        {"google-gemma-2-2b-it.jinja", test_gemma2},
        {"Qwen-Qwen2.5-7B-Instruct.jinja", test_qwen25},
        {"Qwen-Qwen3-0.6B.jinja", test_qwen3},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", test_llama31},
        {"meta-llama-Llama-3.2-3B-Instruct.jinja", test_llama32},
        {"mistralai-Mistral-7B-Instruct-v0.2.jinja", test_mistral_v1},
        {"mistralai-Mistral-7B-Instruct-v0.1.jinja", test_mistral_v0},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", test_mistral_nemo},
    };
    if (!getenv("FT_SOURCE_DIR")) {
        printf("note: FT_SOURCE_DIR unset, real template files skipped\n");
        return;
    }
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        struct ft_chat_template *t = load(cases[i].file);
        if (t)
            cases[i].fn(t);
        ft_chat_template_free(t);
    }
    struct ft_chat_template *t = load("meta-llama-Llama-2-7b-chat-hf.jinja");
    if (t)
        test_llama2(t, "file");
    ft_chat_template_free(t);
}

/* ---------------------------------------------------------- built-ins */

static void test_builtins(void) {
    struct ft_chat_template *t = NULL;
    CHECK_EQ_INT(ft_chat_template_builtin("plain", &t), 0);
    if (t) {
        /* contents trimmed, blank-line separated, no generation prompt */
        EXPECT_RENDER(t, multi, true, "<bos>", "",
                      "<bos>You are terse.\n\nWhat is 2+2?\n\nIt is 4.\n\nAnd 3+3?");
        EXPECT_RENDER(t, user_only, false, "", "", "Hi");
    }
    ft_chat_template_free(t);

    t = NULL;
    CHECK_EQ_INT(ft_chat_template_builtin("gemma", &t), 0);
    if (t)
        test_gemma3(t);
    ft_chat_template_free(t);

    t = NULL;
    CHECK_EQ_INT(ft_chat_template_builtin("chatml", &t), 0);
    if (t) {
        EXPECT_RENDER(t, multi, true, "", "",
                      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                      "<|im_start|>assistant\n  It is 4.  <|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"
                      "<|im_start|>assistant\n");
        EXPECT_RENDER(t, user_only, false, "", "", "<|im_start|>user\nHi<|im_end|>\n");
    }
    ft_chat_template_free(t);

    t = NULL;
    CHECK_EQ_INT(ft_chat_template_builtin("llama3", &t), 0);
    if (t) {
        EXPECT_RENDER(t, sys_user, true, "<|begin_of_text|>", "",
                      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n");
        EXPECT_RENDER(t, multi_nosys, false, "<|begin_of_text|>", "",
                      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                      "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>");
    }
    ft_chat_template_free(t);

    t = NULL;
    CHECK_EQ_INT(ft_chat_template_builtin("llama2", &t), 0);
    if (t)
        test_llama2(t, "builtin");
    ft_chat_template_free(t);

    t = NULL;
    CHECK_EQ_INT(ft_chat_template_builtin("mistral", &t), 0);
    if (t)
        test_mistral_v1(t);
    ft_chat_template_free(t);

    t = (struct ft_chat_template *)1;
    CHECK_EQ_INT(ft_chat_template_builtin("vicuna", &t), FT_ENOENT);
    CHECK(t == (struct ft_chat_template *)1 || t == NULL);
    CHECK_EQ_INT(ft_chat_template_builtin(NULL, &t), FT_ENOENT);

    /* Every name the help text lists is a built-in, and nothing else is. */
    char names[] = FT_CHAT_TEMPLATE_BUILTIN_NAMES;
    int n_names = 0;
    for (char *save = NULL, *name = strtok_r(names, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
        CHECK(ft_chat_template_builtin_exists(name));
        n_names++;
    }
    CHECK_EQ_INT(n_names, 6);
    CHECK(!ft_chat_template_builtin_exists("vicuna"));
    CHECK(!ft_chat_template_builtin_exists("gemma "));
    CHECK(!ft_chat_template_builtin_exists(""));
    CHECK(!ft_chat_template_builtin_exists(NULL));
}

/* ------------------------------------------------------------ semantics */

static void test_whitespace(void) {
    /* trim_blocks: the newline after %} goes; lstrip_blocks: indentation before {% goes */
    Q("  {% if true %}\n  x\n  {% endif %}\n  y  \n", "  x\n  y  ");
    Q("a\n{% if true %}\nb\n{% endif %}\nc", "a\nb\nc");
    Q("a {{- ' b ' -}} c", "a b c");
    Q("a  {%- if true -%}  b  {%- endif -%}  c", "abc");
    Q("{{ 'x' }}\n{{ 'y' }}", "x\ny");  /* no trimming after }} */
    Q("a\n{# comment #}\nb", "a\nb"); /* comments trim like blocks */
    Q("a\n    {#- c -#}   \n  b", "ab");
    Q("  {%+ if true %}x{% endif +%}\ny", "  x\ny"); /* + disables lstrip/trim */
    Q("x {% if true %}y{% endif %}", "x y");    /* lstrip only when the tag starts the line */
    Q("a\r\nb\rc\n", "a\nb\nc");                /* newlines normalized, trailing newline dropped */
    Q("{% raw %}{{ x }}{% endraw %}", "{{ x }}");
    Q("{{ '{{' }}}}", "{{}}");
    Q("{{ {'a': {'b': 1}}['a']['b'] }}", "1"); /* }} inside brackets does not end the tag */
}

static void test_expressions(void) {
    Q("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }}", "7 9 64 4 5");
    Q("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 1 / 2 }} {{ 4 / 2 }} {{ 7.5 // 2 }}", "3 -4 2 -2 0.5 2.0 3.0");
    Q("{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-5 }} {{ 1e16 }} {{ 1e15 }} {{ 3.0 }} {{ -0.0 }}",
      "0.30000000000000004 1e+20 1.5e-05 1e+16 1000000000000000.0 3.0 -0.0");
    Q("{{ 'a' ~ 1 ~ none ~ true }} {{ 'a' + 'b' }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ 'a' ~ 'b' + 'c' }}",
      "a1NoneTrue ab abab [1, 2] abc");
    Q("{{ [1, 'a', none, true, 1.5] }} {{ {'a': 1} }} {{ (1,) }} {{ () }} {{ [\"it's\"] }}",
      "[1, 'a', None, True, 1.5] {'a': 1} (1,) () [\"it's\"]");
    Q("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }}",
      "True False True True True True");
    Q("{{ 'a' in 'cat' }} {{ 1 in [1] }} {{ 'a' in {'a': 1} }} {{ 'x' not in 'y' }} {{ not 'a' in 'b' }}",
      "True True True True True");
    Q("{{ '' or 'x' }} {{ 0 and 1 }} {{ 1 and 2 }} {{ none or [] }}", "x 0 2 []");
    Q("{{ 'y' if true else 'n' }} {{ 'y' if false else 'n' }} [{{ 'y' if false }}]", "y n []");
    Q("{{ 'a' 'b' }} {{ '\\n'|length }} {{ '\\u00e9\\x41\\101' }} {{ \"\\\"\" }}", "ab 1 éAA \"");
}

static void test_subscripts(void) {
    Q("{{ [1, 2, 3][::-1] }} {{ 'hello'[1:3] }} {{ [1, 2, 3][-1] }} [{{ [1][5] }}] {{ [0, 1, 2, 3, 4, 5][1:5:2] }}",
      "[3, 2, 1] el 3 [] [1, 3]");
    Q("{{ 'héllo'[1] }} {{ 'héllo'[::-1] }} {{ 'héllo'|length }} {{ [0, 1, 2, 3][-10:10] }} [{{ 'abc'[5:] }}]",
      "é olléh 5 [0, 1, 2, 3] []");
    Q("{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages[-1].content }} [{{ messages[0].nope }}]",
      "user Hello Hello []");
    Q("{% set d = {'a': {'b': [10, 20]}} %}{{ d.a.b[1] }} {{ d['a']['b'].1 }} [{{ d.x.y.z }}]", "20 20 []");
}

static void test_strings(void) {
    Q("{{ 'a b  c'.split() }} {{ 'a,b'.split(',') }} {{ 'a,,b'.split(',') }} {{ 'a b c'.split(None, 1) }} {{ ''.split() }}",
      "['a', 'b', 'c'] ['a', 'b'] ['a', '', 'b'] ['a', 'b c'] []");
    Q("{{ 'a b c'.rsplit(' ', 1) }} {{ 'x</think>y</think>z'.split('</think>')[-1] }}", "['a b', 'c'] z");
    Q("[{{ '  x '.strip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '\\n\\nab\\n'.lstrip('\\n') }}] [{{ 'ab\\n\\n'.rstrip() }}]",
      "[x] [a] [ab\n] [ab]");
    Q("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'abc'.replace('b', 'XX') }} "
      "{{ 'aaa'.replace('a', 'b', 2) }}",
      "True True aXXc bba");
    Q("{{ 'AbC'.lower() }} {{ 'AbC'.upper() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ '-'.join(['a', 'b']) }}",
      "abc ABC Hello World Hello a-b");
    Q("{{ 'héllo'.find('l') }} {{ 'x'.find('y') }} {{ 'aaa'.count('a') }} {{ '{} and {}'.format('a', 'b') }} {{ '{x}!'.format(x=3) }}",
      "2 -1 3 a and b 3!");
    /* strip() without arguments knows Unicode spaces, as Python's */
    Q("[{{ '\\u00a0\\u3000x\\u2003'|trim }}]", "[x]");
}

static void test_filters(void) {
    Q("{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'a']|sort }} {{ [{'n': 2}, {'n': 1}]|sort(attribute='n') }} {{ {'b': 1, 'A': 2}|dictsort }}",
      "[1, 2, 3] ['A', 'a', 'b'] [{'n': 1}, {'n': 2}] [('A', 2), ('b', 1)]");
    Q("{{ ['a', 'b']|join(', ') }} {{ ['a', 'b']|map('upper')|join }} {{ [1, 2]|join('-') }} {{ [1, 2, 2]|unique|list }}",
      "a, b AB 1-2 [1, 2]");
    Q("{{ [1, 5, 3]|max }} {{ [1, 5, 3]|min }} {{ [1, 2]|sum }} {{ [1, 2]|first }} {{ [1, 2]|last }} {{ 'ab'|reverse }}",
      "5 1 3 1 2 ba");
    Q("{{ u|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }}", "d  d None");
    Q("{{ ' 42 '|int }} {{ '4.7'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ '3.5'|float }} {{ 2.5|round }} {{ 2.675|round(2) }} {{ 5|abs }}",
      "42 4 5 3 3.5 2.0 2.67 5");
    Q("{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ [1, 2, 3]|select('odd')|list }} "
      "{{ [1, 2, 3]|reject('odd')|list }} {{ messages|map(attribute='role')|list }} {{ none|selectattr('a')|list }}",
      "1 [1, 3] [2] ['user'] []");
    Q("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n'|indent }}", "a\n  b\n\n  c|  a\n  b|a\n");
    Q("{{ '<a&\"\\''|e }} {{ 'hello world'|title }} {{ 'x'|upper }} {{ 'ab cd'|wordcount }} {{ 5|string ~ '!' }}",
      "&lt;a&amp;&#34;&#39; Hello World X 2 5!");
    Q("{{ {'a': 1}|items|list }} {{ 'abc'|list }} {{ 'a-b'|replace('-', '+') }}", "[('a', 1)] ['a', 'b', 'c'] a+b");
}

static void test_tojson(void) {
    /* HF's tojson: json.dumps(ensure_ascii=False), separators ", " / ": " */
    Q("{{ {'a': [1, 2.5, none, true, 'é\\n\"<']}|tojson }}", "{\"a\": [1, 2.5, null, true, \"é\\n\\\"<\"]}");
    Q("{{ {'b': [1, {'c': 'd'}], 'a': {}}|tojson(indent=2) }}",
      "{\n  \"b\": [\n    1,\n    {\n      \"c\": \"d\"\n    }\n  ],\n  \"a\": {}\n}");
    Q("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ 'é😀'|tojson(ensure_ascii=true) }} {{ [1, 2]|tojson(separators=(',', ':')) }}",
      "{\"a\": 2, \"b\": 1} \"\\u00e9\\ud83d\\ude00\" [1,2]");
    Q("{{ messages|tojson }}", "[{\"role\": \"user\", \"content\": \"Hello\"}]");
    QF("{{ u|tojson }}", FT_EINVAL, "not JSON serializable");
}

static void test_tests(void) {
    Q("{{ 'x' is string }} {{ 1 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }}",
      "True True True True False True");
    Q("{{ u is defined }} {{ u is undefined }} {{ none is none }} {{ u is iterable }} {{ {} is mapping }} {{ [] is sequence }}",
      "False True True True True True");
    Q("{{ 2 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 'ab' is lower }} {{ 1 is eq 1 }} {{ 1 is lt 2 }} "
      "{{ 'x' is in 'xyz' }} {{ true is true }} {{ '' is false }} {{ u is not defined }}",
      "True True True True True True True True False True");
    Q("{{ tools is defined }} {{ strftime_now is defined }} {{ raise_exception is callable }} {{ add_generation_prompt }}",
      "False True True True");
}

static void test_statements(void) {
    Q("{% for i in range(3) %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
      "103TrueFalse3|212FalseFalse3|321FalseTrue3|");
    Q("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}{{ loop.cycle('a', 'b') }} {% endfor %}",
      "-2a 1-3b 2-a ");
    Q("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for k in {'a': 1} %}{{ k }}{% endfor %}",
      "a=1;b=2;a");
    Q("{% for x in [] %}x{% else %}empty{% endfor %} {% for x in [1, 2, 3, 4] if x is odd %}{{ loop.index }}{{ x }}{{ loop.length }}{% endfor %}",
      "empty 112232");
    Q("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}"
      "{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
      "131");
    /* `set` in a loop body does not leak; namespace() is the way out */
    Q("{% set x = 0 %}{% for i in [1, 2, 3] %}{{ x }}{% set x = i %}{% endfor %}{{ x }}", "0000");
    Q("{% set ns = namespace(a=1, b='') %}{% for i in [1, 2] %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}", "4");
    Q("{% if true %}{% set y = 5 %}{% endif %}{{ y }}", "5"); /* if has no scope */
    Q("{% if false %}a{% elif 1 == 2 %}b{% elif true %}c{% else %}d{% endif %}", "c");
    Q("{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = (3, 4) %}{% set c, d = t %}{{ c + d }}", "12 7");
    Q("{% set x %}hi {{ 1 }}{% endset %}{{ x|upper }} {% filter upper %}ab{% endfilter %} {% with a = 1 %}{{ a }}{% endwith %}",
      "HI 1 AB 1");
    Q("{% macro f(a, b=2) %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, b=3) }}{{ f(b=5, a=0) }}{{ f() }}",
      "[12][13][05][2]");
    Q("{% macro greet(m) %}{{ m.role|upper }}{% endmacro %}{% for m in messages %}{{ greet(m) }}{% endfor %}", "USER");
    Q("{% generation %}kept{% endgeneration %}", "kept");
    Q("{% set messages = messages + [{'role': 'x', 'content': 'y'}] %}{{ messages|length }}", "2");
}

static void test_errors(void) {
    /* raise_exception -> FT_EINVAL with the template's message */
    QF("{{ raise_exception('Custom failure: ' ~ messages[0].role) }}", FT_EINVAL, "Custom failure: user");
    /* syntax errors -> FT_EFORMAT with the position */
    QF("Hello\n  {% if %}", FT_EFORMAT, "line 2, column 9");
    QF("{% for x in y %}", FT_EFORMAT, "expected '{% endfor %}'");
    QF("{{ 'abc }}", FT_EFORMAT, "unterminated string");
    QF("{{ (1 }}", FT_EFORMAT, "line 1");
    QF("{% endif %}", FT_EFORMAT, "unexpected tag 'endif'");
    QF("{% break %}", FT_EFORMAT, "outside a for loop");
    QF("{# open", FT_EFORMAT, "unclosed comment");
    /* unsupported constructs -> FT_EUNSUPPORTED naming the construct and position */
    QF("line1\n\n   {% include 'x.html' %}", FT_EUNSUPPORTED, "line 3, column 4: '{% include %}' is not supported");
    QF("{% extends 'base' %}", FT_EUNSUPPORTED, "'{% extends %}' is not supported");
    QF("{{ x|wordwrap(3) }}", FT_EUNSUPPORTED, "line 1, column 6: filter 'wordwrap' is not supported");
    QF("{% if x is fancytest %}{% endif %}{{ 1 is fancytest }}", FT_EUNSUPPORTED, "test 'fancytest' is not supported");
    QF("{% for x in y recursive %}{% endfor %}", FT_EUNSUPPORTED, "recursive");
    QF("{{ f(*args) }}", FT_EUNSUPPORTED, "*args");
    /* unknown filter inside an if: only fails when evaluated (as Jinja) */
    Q("{% if false %}{{ x|from_json }}{% endif %}ok", "ok");
    QF("{% if true %}{{ x|from_json }}{% endif %}", FT_EUNSUPPORTED, "filter 'from_json' is not supported");
    QF("{{ 'a'.zfill(3) }}", FT_EUNSUPPORTED, "method 'zfill()' of string is not supported");
    QF("{{ cycler(1, 2) }}", FT_EUNSUPPORTED, "function 'cycler' is not defined");
    QF("{{ '%s' % 1 }}", FT_EUNSUPPORTED, "printf-style");
    /* runtime type errors -> FT_EINVAL */
    QF("{{ 'a' + 1 }}", FT_EINVAL, "unsupported operand types for +: string and integer");
    QF("{{ 1 + nope }}", FT_EINVAL, "'nope' is undefined");
    QF("{{ none + none }}", FT_EINVAL, "unsupported operand types");
    /* as llama.cpp: a string + none/undefined is the string */
    Q("{{ 'a' + nope }}|{{ none + 'b' }}|{{ 'c' + none + 'd' }}", "a|b|cd");
    /* list.append / list.pop mutate in place, as in Python and llama.cpp */
    Q("{% set ns = namespace(l=[]) %}{% set _ = ns.l.append(1) %}{% for i in range(20) %}{% set _ = ns.l.append(i) %}"
      "{% endfor %}{{ ns.l|length }} {{ ns.l.pop(0) }} {{ ns.l.pop() }} {{ ns.l.pop(-2) }} {{ ns.l|length }} "
      "{{ ns.l[:3] }}",
      "21 1 19 17 18 [0, 1, 2]");
    Q("{% set l = [1, 2] %}{% set m = l %}{% set _ = l.append(3) %}{{ m }}{{ l.append(4) }}", "[1, 2, 3]None");
    QF("{{ [].pop() }}", FT_EINVAL, "pop from empty list");
    QF("{{ [1].pop(1) }}", FT_EINVAL, "pop index out of range");
    QF("{{ [1].pop('a') }}", FT_EINVAL, "must be an integer");
    QF("{{ (1, 2).append(3) }}", FT_EINVAL, "'tuple' object has no attribute 'append'");
    QF("{{ [].append() }}", FT_EINVAL, "exactly one argument");
    QF("{{ 1 / 0 }}", FT_EINVAL, "division by zero");
    QF("{{ 1 < 'a' }}", FT_EINVAL, "not supported between");
    QF("{% for x in 5 %}{% endfor %}", FT_EINVAL, "not iterable");
    QF("{% set x = 1 %}{% set x.y = 2 %}", FT_EINVAL, "only on namespace()");
    QF("{{ 9223372036854775807 + 1 }}", FT_ERANGE, "integer overflow");
    /* arguments */
    struct ft_chat_template *t = NULL;
    CHECK_EQ_INT(ft_chat_template_parse(NULL, 0, &t), 0); /* empty template renders empty */
    if (t) {
        msg m[] = {{"user", "x"}};
        EXPECT_RENDER(t, m, true, NULL, NULL, "");
        msg bad[] = {{NULL, "x"}};
        int rc;
        char *o = render(t, bad, 1, true, NULL, NULL, &rc);
        CHECK_EQ_INT(rc, FT_EINVAL);
        free(o);
    }
    ft_chat_template_free(t);
    ft_chat_template_free(NULL);
}

static void test_limits(void) {
    /* runaway loops: bounded iterations */
    QF("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", FT_ERANGE,
       "loop iterations");
    QF("{{ range(100000000)|length }}", FT_ERANGE, "range()");
    /* output and string sizes bounded (16 MiB) */
    QF("{% for i in range(20000) %}{{ 'x' * 1000 }}{% endfor %}", FT_ERANGE, "output");
    QF("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
       FT_ERANGE, "bytes");
    QF("{{ 'x' * 100000000 }}", FT_ERANGE, "string repetition");
    /* an empty string repeated 3 ** 30 times: empty at once (long fuzzing
     * found a template that spent minutes copying nothing) */
    Q("{{ '' * 3 ** 30 }}|{{ ('' * 3 ** 30)|length }}", "|0");
    /* CPU time bounded: searching a long string costs steps in proportion */
    QF("{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{% if 'y' in s %}{% endif %}{% endfor %}", FT_ERANGE,
       "evaluation steps");
    /* recursion bounded */
    QF("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", FT_ERANGE, "nested deeper");
    /* exponential macro fan-out: bounded by the iteration (call) budget */
    QF("{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}", FT_ERANGE,
       "macro calls");
    /* parse nesting bounded */
    char deep[4096];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof(deep) - k, "{{ ");
    for (int i = 0; i < 500; i++)
        deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 500; i++)
        deep[k++] = ')';
    snprintf(deep + k, sizeof(deep) - k, " }}");
    QF(deep, FT_ERANGE, "nested too deeply");
    k = 0;
    for (int i = 0; i < 300; i++)
        k += (size_t)snprintf(deep + k, sizeof(deep) - k, "{%% if 1 %%}");
    QF(deep, FT_ERANGE, "nested too deeply");
    /* a long chain a+a+a+... is bounded at render time */
    static char chain[64 * 1024];
    k = (size_t)snprintf(chain, sizeof(chain), "{{ 1");
    for (int i = 0; i < 5000; i++)
        k += (size_t)snprintf(chain + k, sizeof(chain) - k, " + 1");
    snprintf(chain + k, sizeof(chain) - k, " }}");
    QF(chain, FT_ERANGE, "nested deeper");
    /* data nested deeper than the printer allows */
    QF("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}", FT_ERANGE, "nested");
    /* messages from the network: huge content is fine within limits */
    struct ft_chat_template *t = NULL;
    CHECK_EQ_INT(ft_chat_template_builtin("chatml", &t), 0);
    if (t) {
        size_t big = 4u << 20;
        char *content = malloc(big + 1);
        memset(content, 'a', big);
        content[big] = '\0';
        msg m[] = {{"user", content}};
        int rc;
        char *o = render(t, m, 1, true, "", "", &rc);
        CHECK_EQ_INT(rc, 0);
        CHECK(o && strlen(o) == big + strlen("<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"));
        free(o);
        /* over the output limit */
        char *huge = realloc(content, (17u << 20) + 1);
        if (huge) {
            memset(huge, 'b', 17u << 20);
            huge[17u << 20] = '\0';
            m[0].content = huge;
            o = render(t, m, 1, true, "", "", &rc);
            CHECK_EQ_INT(rc, FT_ERANGE);
            free(o);
            content = huge;
        }
        free(content);
    }
    ft_chat_template_free(t);
}

/* The render arena's memory limit, the step budget, and lists: through the
 * internal API with small limits, as the fuzz target uses it. */
static void test_internal_limits(void) {
    const struct ftj_lex_opts o = {.trim_blocks = true, .lstrip_blocks = true};
    struct ftj_limits mem = {.max_output = 1 << 20, .max_memory = 256 << 10, .max_steps = 1000000,
                             .max_iterations = 100000, .max_depth = 50, .max_list = 100000};
    struct ftj_limits small = mem, iters = mem, list = mem;
    small.max_output = 1000;
    iters.max_iterations = 1000;
    list.max_list = 5;
    struct {
        const char *src;
        const struct ftj_limits *lim;
        int rc;
        const char *msg;
    } cases[] = {
        {"{% for i in range(1000) %}{% set x = 'ab' * 500 %}{% endfor %}", &mem, FT_ERANGE, "memory limit"},
        {"{% for i in range(1000) %}{{ i }}{% endfor %}", &small, FT_ERANGE, "output"},
        {"{% for i in range(50) %}{% for j in range(50) %}{% endfor %}{% endfor %}", &iters, FT_ERANGE, "iterations"},
        {"{{ 'a b c d e f g h i j'.split() }}", &list, FT_ERANGE, "items exceeds the limit of 5"},
        {"{% macro f(n) %}{% if n < 12 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}", &mem, 0, ""},
        {"{% for i in range(999) %}{% endfor %}{% for i in range(999) %}{% endfor %}", &mem, 0, ""},
        {"{{ 1 }}", &small, 0, ""},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        const struct ftj_limits *lim = cases[i].lim;
        struct ftj_template *t = NULL;
        int rc = ftj_parse(cases[i].src, strlen(cases[i].src), &o, &t);
        CHECK_EQ_INT(rc, 0);
        if (rc)
            continue;
        struct ftj_render *r = NULL;
        CHECK_EQ_INT(ftj_render_new(t, lim, &r), 0);
        char *out = NULL;
        size_t len = 0;
        ft_clear_error();
        rc = ftj_render_run(r, &out, &len);
        CHECKF(rc == cases[i].rc, "case %zu: rc %d want %d (%s)", i, rc, cases[i].rc, ft_last_error());
        CHECKF(strstr(ft_last_error(), cases[i].msg) != NULL, "case %zu: '%s' lacks '%s'", i, ft_last_error(),
               cases[i].msg);
        free(out);
        ftj_render_free(r);
        ftj_template_free(t);
    }
}

/* A parsed template is immutable: render it from several threads at once. */
struct thread_arg {
    const struct ft_chat_template *t;
    int failures;
};

static void *render_thread(void *p) {
    struct thread_arg *a = p;
    for (int i = 0; i < 200; i++) {
        char *out = NULL;
        size_t len;
        int rc = ft_chat_template_render(a->t, multi, FT_ARRAY_LEN(multi), true, "<bos>", "<eos>", &out, &len);
        if (rc || strcmp(out, "<bos><start_of_turn>user\nYou are terse.\n\nWhat is 2+2?<end_of_turn>\n"
                              "<start_of_turn>model\nIt is 4.<end_of_turn>\n"
                              "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n") != 0)
            a->failures++;
        free(out);
    }
    return NULL;
}

static void test_threads(void) {
    struct ft_chat_template *t = NULL;
    CHECK_EQ_INT(ft_chat_template_builtin("gemma", &t), 0);
    if (!t)
        return;
    pthread_t th[4];
    struct thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i].t = t;
        args[i].failures = 0;
        CHECK_EQ_INT(pthread_create(&th[i], NULL, render_thread, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(args[i].failures, 0);
    }
    ft_chat_template_free(t);
}

static void quiet_sink(enum ft_log_level level, const char *func, const char *msg_, void *ud) {
    (void)level;
    (void)func;
    (void)msg_;
    (void)ud;
}

int main(void) {
    ft_log_set_sink(quiet_sink, NULL); /* expected errors would flood stderr; ft_last_error() still works */
    test_real_templates();
    test_builtins();
    test_whitespace();
    test_expressions();
    test_subscripts();
    test_strings();
    test_filters();
    test_tojson();
    test_tests();
    test_statements();
    test_errors();
    test_limits();
    test_internal_limits();
    test_threads();
    return ft_test_finish("test_chat_template");
}
