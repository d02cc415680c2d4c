/* Chat templates (engine/include/ft/chat_template.h): the public face of the Jinja
 * interpreter in jinja_*.c, the variables a chat template sees, and the
 * built-in templates for models whose GGUF carries no
 * `tokenizer.chat_template`.
 *
 * The built-in texts are the families' official Hugging Face templates
 * (data, not code): Gemma 3 (google/gemma-3-*-it), ChatML as Qwen and
 * OpenHermes use it without tools or a default system prompt, Llama 3
 * (meta-llama/Meta-Llama-3-8B-Instruct), Llama 2 chat
 * (meta-llama/Llama-2-7b-chat-hf) and Mistral's v1 template with a system
 * prompt (mistralai/Mistral-7B-Instruct-v0.2).
 */
#include "ft/chat_template.h"

#include "ft/common.h"
#include "jinja.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <stdlib.h>

struct ft_chat_template {
    struct ftj_template *t;
};

#define FT_CHAT_TEMPLATE_MAX_SRC (1u << 20) /* real templates are a few KiB */

/* How Hugging Face transformers renders chat templates. */
static const struct ftj_lex_opts hf_lex = {.trim_blocks = true, .lstrip_blocks = true, .keep_trailing_newline = false};

static const char gemma_src[] =
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n";

static const char chatml_src[] =
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char llama3_src[] =
    "{% set loop_messages = messages %}"
    "{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

static const char llama2_src[] =
    "{% if messages[0]['role'] == 'system' %}"
    "{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
    "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}";

static const char mistral_src[] =
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "\n"
    "{{- bos_token }}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/...') }}\n"
    "    {%- endif %}\n"
    "    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n"
    "            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
    "        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n"
    "        {{- ' ' + message['content'] + eos_token}}\n"
    "    {%- else %}\n"
    "        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial "
    "optional system message!') }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n";

/* For base (pretrained) models, which carry no chat template and were
 * never trained on turn markers: the messages' text, blank-line separated,
 * for the model to continue. */
static const char plain_src[] =
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if not loop.first %}{{ '\\n\\n' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for item in message['content'] %}{% if item['type'] == 'text' %}{{ item['text'] | trim }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{% endfor %}";

static const struct {
    const char *name;
    const char *src;
    size_t len;
} builtins[] = {
    {"plain", plain_src, sizeof(plain_src) - 1},
    {"gemma", gemma_src, sizeof(gemma_src) - 1},
    {"chatml", chatml_src, sizeof(chatml_src) - 1},
    {"llama3", llama3_src, sizeof(llama3_src) - 1},
    {"llama2", llama2_src, sizeof(llama2_src) - 1},
    {"mistral", mistral_src, sizeof(mistral_src) - 1},
};

int ft_chat_template_parse(const char *src, size_t len, struct ft_chat_template **out) {
    if (!out || (!src && len)) {
        FT_LOG_E("chat template: no template text");
        return FT_EINVAL;
    }
    *out = NULL;
    if (len > FT_CHAT_TEMPLATE_MAX_SRC) {
        FT_LOG_E("chat template: %zu bytes is larger than the %u-byte limit", len, FT_CHAT_TEMPLATE_MAX_SRC);
        return FT_ERANGE;
    }
    struct ft_chat_template *t = calloc(1, sizeof(*t));
    if (!t) {
        FT_LOG_E("chat template: out of memory");
        return FT_ENOMEM;
    }
    int rc = ftj_parse(src ? src : "", len, &hf_lex, &t->t);
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int ft_chat_template_builtin(const char *name, struct ft_chat_template **out) {
    for (size_t i = 0; name && i < FT_ARRAY_LEN(builtins); i++)
        if (strcmp(name, builtins[i].name) == 0)
            return ft_chat_template_parse(builtins[i].src, builtins[i].len, out);
    FT_LOG_E("chat template: no built-in template named '%s' (" FT_CHAT_TEMPLATE_BUILTIN_NAMES ")",
             name ? name : "(null)");
    return FT_ENOENT;
}

bool ft_chat_template_builtin_exists(const char *name) {
    for (size_t i = 0; name && i < FT_ARRAY_LEN(builtins); i++)
        if (strcmp(name, builtins[i].name) == 0)
            return true;
    return false;
}

void ft_chat_template_free(struct ft_chat_template *t) {
    if (!t)
        return;
    ftj_template_free(t->t);
    free(t);
}

/* Renders with the globals set in r, then frees r whatever the result:
 * *out (malloc'd) and, when asked, *out_len. */
static int run_and_free(struct ftj_render *r, char **out, size_t *out_len) {
    size_t len = 0;
    int rc = ftj_render_run(r, out, &len);
    ftj_render_free(r);
    if (!rc && out_len)
        *out_len = len;
    return rc;
}

static struct ftj_val cstr(const char *s) { return s ? ftj_strv(s, strlen(s)) : ftj_strv("", 0); }

int ft_chat_template_render(const struct ft_chat_template *t, const struct ft_chat_message *msgs, size_t n,
                            bool add_generation_prompt, const char *bos_token, const char *eos_token, char **out,
                            size_t *out_len) {
    if (!t || !out || (n && !msgs)) {
        FT_LOG_E("chat template: invalid arguments");
        return FT_EINVAL;
    }
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (n > ftj_default_limits.max_list) {
        FT_LOG_E("chat template: %zu messages is more than the limit of %zu", n, ftj_default_limits.max_list);
        return FT_ERANGE;
    }
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role) {
            FT_LOG_E("chat template: message %zu has no role", i);
            return FT_EINVAL;
        }
    }
    struct ftj_render *r;
    int rc = ftj_render_new(t->t, &ftj_default_limits, &r);
    if (rc) {
        FT_LOG_E("chat template: out of memory");
        return rc;
    }
    struct ftj_arena *a = ftj_render_arena(r);
    struct ftj_list *list = ftj_list_new(a, n, false);
    rc = list ? 0 : FT_ENOMEM;
    for (size_t i = 0; i < n && !rc; i++) {
        struct ftj_dict *d = ftj_dict_new(a, 2);
        if (!d || ftj_dict_set(a, d, ftj_strv("role", 4), cstr(msgs[i].role)) ||
            ftj_dict_set(a, d, ftj_strv("content", 7), msgs[i].content ? cstr(msgs[i].content) : ftj_none())) {
            rc = FT_ENOMEM;
            break;
        }
        list->v[i].type = FTJ_DICT;
        list->v[i].u.dict = d;
    }
    if (!rc) {
        struct ftj_val lv = {.type = FTJ_LIST, .u.list = list};
        rc = ftj_render_set(r, "messages", lv);
        if (!rc)
            rc = ftj_render_set(r, "add_generation_prompt", ftj_bool(add_generation_prompt));
        if (!rc)
            rc = ftj_render_set(r, "bos_token", cstr(bos_token));
        if (!rc)
            rc = ftj_render_set(r, "eos_token", cstr(eos_token));
    }
    if (rc) {
        if (a->over_limit)
            rc = FT_ERANGE;
        FT_LOG_E("chat template: %s building %zu messages", rc == FT_ERANGE ? "render memory limit reached" : "out of memory",
                 n);
        ftj_render_free(r);
        return rc;
    }
    return run_and_free(r, out, out_len);
}

/* JSON -> Jinja values. Strings point into the cJSON tree, which outlives
 * the render. JSON numbers that are whole and fit in 2^53 become integers,
 * others floats (cJSON keeps no trace of "1" vs "1.0"). Depth and list sizes
 * are bounded like every other value a template sees. */
static int json_to_val(struct ftj_arena *a, const cJSON *j, int depth, struct ftj_val *out /* OUT */) {
    if (depth > FTJ_MAX_DATA_DEPTH) {
        FT_LOG_E("chat template: context nested deeper than %d", FTJ_MAX_DATA_DEPTH);
        return FT_ERANGE;
    }
    if (cJSON_IsNull(j)) {
        *out = ftj_none();
    } else if (cJSON_IsBool(j)) {
        *out = ftj_bool(cJSON_IsTrue(j));
    } else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) <= 9007199254740992.0)
            *out = ftj_int((int64_t)d);
        else
            *out = ftj_float(d);
    } else if (cJSON_IsString(j)) {
        *out = cstr(j->valuestring);
    } else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
        size_t n = 0;
        for (const cJSON *c = j->child; c; c = c->next)
            n++;
        if (n > ftj_default_limits.max_list) {
            FT_LOG_E("chat template: a context list or object has %zu items, more than the limit of %zu", n,
                     ftj_default_limits.max_list);
            return FT_ERANGE;
        }
        if (cJSON_IsArray(j)) {
            struct ftj_list *l = ftj_list_new(a, n, false);
            if (!l)
                return FT_ENOMEM;
            size_t i = 0;
            for (const cJSON *c = j->child; c; c = c->next, i++) {
                int rc = json_to_val(a, c, depth + 1, &l->v[i]);
                if (rc)
                    return rc;
            }
            out->type = FTJ_LIST;
            out->u.list = l;
        } else {
            struct ftj_dict *d = ftj_dict_new(a, n ? n : 1);
            if (!d)
                return FT_ENOMEM;
            for (const cJSON *c = j->child; c; c = c->next) {
                struct ftj_val v;
                int rc = json_to_val(a, c, depth + 1, &v);
                if (!rc && ftj_dict_set(a, d, cstr(c->string), v))
                    rc = FT_ENOMEM;
                if (rc)
                    return rc;
            }
            out->type = FTJ_DICT;
            out->u.dict = d;
        }
    } else {
        FT_LOG_E("chat template: invalid JSON value in the context");
        return FT_EINVAL;
    }
    return 0;
}

static int render_json(const struct ft_chat_template *t, const cJSON *globals, int64_t now, bool quiet, char **out,
                       size_t *out_len) {
    if (!t || !out || !cJSON_IsObject(globals)) {
        FT_LOG_E("chat template: invalid arguments");
        return FT_EINVAL;
    }
    *out = NULL;
    if (out_len)
        *out_len = 0;
    struct ftj_render *r;
    int rc = ftj_render_new(t->t, &ftj_default_limits, &r);
    if (rc) {
        FT_LOG_E("chat template: out of memory");
        return rc;
    }
    ftj_render_set_time(r, now);
    ftj_render_set_quiet(r, quiet);
    struct ftj_arena *a = ftj_render_arena(r);
    for (const cJSON *c = globals->child; c && !rc; c = c->next) {
        struct ftj_val v;
        rc = json_to_val(a, c, 0, &v);
        if (!rc && ftj_render_set(r, c->string, v))
            rc = FT_ENOMEM;
    }
    if (rc) {
        if (rc == FT_ENOMEM && a->over_limit)
            rc = FT_ERANGE;
        if (rc == FT_ENOMEM || a->over_limit)
            FT_LOG_E("chat template: %s building the context",
                     rc == FT_ERANGE ? "render memory limit reached" : "out of memory");
        ftj_render_free(r);
        return rc;
    }
    return run_and_free(r, out, out_len);
}

int ft_chat_template_render_json(const struct ft_chat_template *t, const cJSON *globals, int64_t now, char **out,
                                 size_t *out_len) {
    return render_json(t, globals, now, false, out, out_len);
}

int ft_chat_template_try_render_json(const struct ft_chat_template *t, const cJSON *globals, char **out) {
    return render_json(t, globals, 0, true, out, NULL);
}

const char *ft_chat_template_source(const struct ft_chat_template *t, size_t *len) {
    *len = t->t->src_len;
    return t->t->src;
}
