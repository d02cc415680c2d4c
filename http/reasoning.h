/* Reasoning in the server (http/reasoning.c): the request fields
 * (`reasoning_format`, an assistant message's `reasoning_content`,
 * `chat_template_kwargs.enable_thinking`), what the template sees of them,
 * and the per-choice parsers (engine/text/reasoning.c) that split an answer
 * into `reasoning_content` and `content` (http/completion.c feeds them). */
#ifndef FT_HTTP_REASONING_H
#define FT_HTTP_REASONING_H

#include "request_parse.h"

#include "ft/reasoning.h"
#include "ft/tool_calls.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* One choice's parser and, not streamed, its reasoning so far. */
struct ft_reasoning_choice {
    struct ft_reasoning_parser parser;
    struct ft_reasoning_buf text; /* non-streaming: the reasoning gathered */
    bool flushed;                 /* ft_reasoning_finish has run */
};

/* A request's answer, n choices of it (loop thread only). */
struct ft_reasoning_answer {
    enum ft_reasoning_syntax syntax;
    int32_t n;
    struct ft_reasoning_choice choices[];
};

/* Request fields (chat): `reasoning_format` ("none", "auto", "deepseek"),
 * `chat_template_kwargs.enable_thinking` (bool), and each assistant
 * message's `reasoning_content` (string or null; messages[i] of root is
 * r->messages[i]). 0 or -1 with *err (a 400 naming the field). */
int ft_api_parse_reasoning(const struct cJSON *root, struct ft_api_request *r, struct ft_api_error *err);

/* The template's context, after ft_chat_context_build: enable_thinking
 * (true unless the request turned it off, as llama-server passes it), and
 * for harmony templates each message's reasoning_content copied to
 * `thinking` (content dropped beside tool calls), as llama.cpp's gpt-oss
 * handler does. false on allocation failure. */
bool ft_reasoning_context(struct cJSON *ctx, const struct ft_api_request *r, enum ft_reasoning_syntax syntax);

/* The answer's parsers for a chat request: NULL (nothing to separate) when
 * the template has no syntax or for completions; *oom on allocation
 * failure. fmt_default is the server's --reasoning-format; the request's
 * field wins. opens: the rendered prompt left the answer inside the
 * reasoning (api->reasoning_opens). */
struct ft_reasoning_answer *ft_reasoning_answer_new(enum ft_reasoning_syntax syntax,
                                                    enum ft_reasoning_format fmt_default,
                                                    const struct ft_api_request *api, bool *oom /* OUT */);
void ft_reasoning_answer_free(struct ft_reasoning_answer *a); /* accepts NULL */

/* Harmony: the calls choice 0's parser read, when they are well-formed
 * calls of offered tools (arguments a JSON object), replace p's calls
 * (at most max_calls when max_calls > 0; otherwise none are taken).
 * 0 or FT_ENOMEM. */
int ft_reasoning_take_calls(struct ft_reasoning_answer *a, const char *const *names, size_t n_names,
                            size_t max_calls, struct ft_tool_parse *p);

#endif
