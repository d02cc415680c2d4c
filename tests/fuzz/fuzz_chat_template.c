/* libFuzzer target for chat templates: the Jinja lexer, parser and
 * evaluator (templates come from model files) and the rendering of hostile
 * messages (they come from the network).
 *
 * Input layout: TEMPLATE [\0 MSG [\0 MSG ...]]. Each MSG's first byte picks
 * its role (system/user/assistant/tool/other, or a NULL content); the rest is
 * its content. Without messages a fixed conversation is used. The template
 * is parsed with HF's settings and rendered with small limits so one input
 * stays fast; every built-in template also renders the messages.
 *
 * Must never crash, leak, hang or trip a sanitizer; errors are fine.
 * Seeds: tests/fuzz/corpus/chat_template (real templates + conversations).
 */
#include "ft/chat_template.h"
#include "ft/common.h"

#include "engine/text/jinja.h"
#include "fuzz_common.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

FUZZ_QUIET_INITIALIZE()

#define MAX_MSGS 16

static const struct ftj_limits fuzz_limits = {
    .max_output = 1u << 20,
    .max_memory = 64u << 20,
    .max_steps = 200000,
    .max_iterations = 20000,
    .max_depth = 200,
    .max_list = 100000,
};

static void render_internal(const struct ftj_template *t, const struct ft_chat_message *m, size_t n) {
    struct ftj_render *r = NULL;
    if (ftj_render_new(t, &fuzz_limits, &r))
        return;
    struct ftj_arena *a = ftj_render_arena(r);
    struct ftj_list *list = ftj_list_new(a, n, false);
    if (!list)
        goto out;
    for (size_t i = 0; i < n; i++) {
        struct ftj_dict *d = ftj_dict_new(a, 2);
        if (!d || ftj_dict_set(a, d, ftj_strv("role", 4), ftj_strv(m[i].role, strlen(m[i].role))) ||
            ftj_dict_set(a, d, ftj_strv("content", 7),
                         m[i].content ? ftj_strv(m[i].content, strlen(m[i].content)) : ftj_none()))
            goto out;
        list->v[i].type = FTJ_DICT;
        list->v[i].u.dict = d;
    }
    struct ftj_val lv = {.type = FTJ_LIST, .u.list = list};
    if (ftj_render_set(r, "messages", lv) || ftj_render_set(r, "add_generation_prompt", ftj_bool(n & 1)) ||
        ftj_render_set(r, "bos_token", ftj_strv("<s>", 3)) || ftj_render_set(r, "eos_token", ftj_strv("</s>", 4)))
        goto out;
    char *text = NULL;
    size_t len = 0;
    if (ftj_render_run(r, &text, &len) == 0) {
        if (strlen(text) > len) /* NUL-terminated, length covers the text */
            __builtin_trap();
        free(text);
    }
out:
    ftj_render_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (256u << 10))
        return 0;
    /* one copy, NUL-terminated pieces */
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    size_t tlen = strnlen(buf, size);

    static const char *const roles[] = {"system", "user", "assistant", "tool", "ipython", "model", ""};
    struct ft_chat_message msgs[MAX_MSGS];
    size_t n = 0;
    for (size_t p = tlen + 1; p < size && n < MAX_MSGS;) {
        size_t l = strnlen(buf + p, size - p);
        unsigned char sel = l ? (unsigned char)buf[p] : 0;
        msgs[n].role = roles[sel % FT_ARRAY_LEN(roles)];
        msgs[n].content = (sel & 0x80) ? NULL : buf + p + (l ? 1 : 0);
        n++;
        p += l + 1;
    }
    if (n == 0) {
        static const struct ft_chat_message def[] = {
            {"system", "You are helpful."}, {"user", "Hi <think>x</think>"}, {"assistant", " ok "}, {"user", "bye"}};
        memcpy(msgs, def, sizeof(def));
        n = FT_ARRAY_LEN(def);
    }

    static const struct ftj_lex_opts hf = {.trim_blocks = true, .lstrip_blocks = true};
    struct ftj_template *t = NULL;
    if (ftj_parse(buf, tlen, &hf, &t) == 0) {
        render_internal(t, msgs, n);
        ftj_template_free(t);
    }

    /* Hostile messages through the public API and every built-in template. */
    static const char *const builtins[] = {"gemma", "chatml", "llama3", "llama2", "mistral"};
    static struct ft_chat_template *bt[FT_ARRAY_LEN(builtins)];
    for (size_t i = 0; i < FT_ARRAY_LEN(builtins); i++) {
        if (!bt[i] && ft_chat_template_builtin(builtins[i], &bt[i]))
            __builtin_trap();
        char *out = NULL;
        size_t len = 0;
        if (ft_chat_template_render(bt[i], msgs, n, true, "<s>", "</s>", &out, &len) == 0)
            free(out);
    }
    free(buf);
    return 0;
}
