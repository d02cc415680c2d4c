/* The server's engine side: the model, its chat template and the
 * scheduler, loaded once (on a background thread, so /health can answer
 * while it loads), and turning an API request into prompt tokens. */
#ifndef FT_HTTP_BACKEND_H
#define FT_HTTP_BACKEND_H

#include "chat_context.h"
#include "request_parse.h"

#include "ft/chat_template.h"
#include "ft/model.h"
#include "ft/scheduler.h"
#include "ft/server.h"

#include <stddef.h>
#include <stdint.h>

struct ft_backend {
    struct ft_model *model;
    const struct ft_tokenizer *tok;
    struct ft_chat_template *tmpl;
    char *bos_text; /* bos_token / eos_token as templates see them */
    char *eos_text;
    struct ft_chat_tool_caps tool_caps; /* probed once from the template */
    struct ft_scheduler *sched;
    int32_t n_ctx;
    int32_t n_parallel; /* sequences at once, after the memory cap */
    int32_t n_vocab;
    bool special_in_messages; /* --special-tokens-in-messages: message text may hold control tokens */
};

/* Load the model, pick and trial-render the chat template (--chat-template
 * FILE, else the model's tokenizer.chat_template, else the built-in one for
 * its architecture), start the scheduler. On failure returns an FT_E*
 * code with one line in errbuf. */
int ft_backend_load(const struct ft_server_config *cfg, ft_event_fn on_event, void *ud,
                    struct ft_backend **out /* OUT */, char *errbuf, size_t errcap);
/* Stops the scheduler first (every request gets its DONE event). */
void ft_backend_free(struct ft_backend *b); /* accepts NULL */

/* The prompt tokens for a parsed request: the chat template rendered and
 * tokenized (BOS added only when the template did not write it), or the
 * completion prompt tokenized as `ft run` does. Fails with a 400 for a
 * template error, an empty prompt, or a prompt that does not fit the
 * context (the message gives both numbers). *out is malloc'd. */
int ft_backend_prompt(const struct ft_backend *b, const struct ft_api_request *r, int32_t **out /* OUT */,
                      int32_t *n_out /* OUT */, struct ft_api_error *err);

/* The chat template rendered for a chat request (the prompt text before
 * tokenization; POST /apply-template answers with it). *text is malloc'd.
 * Errors as ft_backend_prompt. */
int ft_backend_render_chat(const struct ft_backend *b, const struct ft_api_request *r, char **text /* OUT */,
                           size_t *len /* OUT */, struct ft_api_error *err);

#endif
