/* The Jinja context of a chat request: messages (with tool calls and tool
 * results), tools, bos/eos tokens, add_generation_prompt — built as
 * llama.cpp's common/chat.cpp builds it — and what the server needs to know
 * about a chat template's handling of tools, probed once at start-up. */
#ifndef FT_HTTP_CHAT_CONTEXT_H
#define FT_HTTP_CHAT_CONTEXT_H

#include "request_parse.h"

#include "ft/chat_template.h"
#include "ft/tool_calls.h"

#include <stdbool.h>

struct cJSON;

struct ft_chat_tool_caps {
    enum ft_tool_format format; /* how the model writes calls (from the template's text) */
    bool renders_tools;         /* the template puts `tools` into the prompt */
    bool renders_tool_calls;    /* it renders assistant tool_calls and tool results */
    bool object_arguments;      /* it wants tool_calls[].function.arguments as an object */
    bool system_role;           /* it shows a system message (else: merged into the next one) */
};

/* Probe a parsed template by rendering small conversations with needles,
 * as llama.cpp's minja-era capability detection did (a probe the template
 * rejects counts as "no"); on llama.cpp's 68 templates the answers equal
 * its jinja::caps (supports_tools, supports_tool_calls,
 * supports_object_arguments, supports_system_role). */
void ft_chat_tool_caps_probe(const struct ft_chat_template *t, const char *bos, const char *eos,
                             struct ft_chat_tool_caps *out /* OUT */);

/* Whether a request's answer is parsed for tool calls. */
bool ft_chat_tools_active(const struct ft_api_request *r);
/* Whether the prompt gets the generic format's instructions: tools are
 * active and the template neither has a known format nor describes tools. */
bool ft_chat_generic_prompt(const struct ft_api_request *r, const struct ft_chat_tool_caps *caps);

/* The globals for ft_chat_template_render_json. With tools and a template
 * that does not describe them (ft_chat_generic_prompt), a system message
 * tells the model the tools and the {"tool_call": ...} / {"response": ...}
 * answer; a template that does not render tool calls gets them in the
 * history as that JSON (and tool results as user messages), as minja's
 * polyfill did; a template without a system role gets the system text in
 * front of the next message, as llama.cpp does. NULL with *err on failure. */
struct cJSON *ft_chat_context_build(const struct ft_api_request *r, const struct ft_chat_tool_caps *caps,
                                    const char *bos, const char *eos, struct ft_api_error *err);

#endif
