/* The server's engine side: the model, its chat template and the
 * scheduler, loaded once (on a background thread, so /health can answer
 * while it loads), and turning an API request into the engine's request. */
#ifndef FT_HTTP_BACKEND_H
#define FT_HTTP_BACKEND_H

#include "chat_context.h"
#include "request_parse.h"

#include "ft/chat_template.h"
#include "ft/model.h"
#include "ft/reasoning.h"
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
    enum ft_reasoning_syntax reasoning_syntax; /* the template's (engine/include/ft/reasoning.h) */
    enum ft_reasoning_format reasoning_format; /* --reasoning-format: the requests' default */
};

/* Load the model, pick and trial-render the chat template (--chat-template
 * FILE, else the model's tokenizer.chat_template, else the built-in one for
 * its architecture), start the scheduler. On failure returns an FT_E*
 * code with one line in errbuf. */
int ft_backend_load(const struct ft_server_config *cfg, ft_event_fn on_event, void *ud,
                    struct ft_backend **out /* OUT */, char *errbuf, size_t errcap);
/* Stops the scheduler first (every request gets its DONE event). */
void ft_backend_free(struct ft_backend *b); /* accepts NULL */

/* The engine request for a parsed generation request (chat or
 * completions), the one place where an API request becomes a struct
 * ft_request: `n` checked against the slots, logit_bias text keys
 * tokenized, the grammar of forced or strict tool calls (chat), the prompt
 * tokens (the chat template rendered and tokenized, BOS added only when
 * the template did not write it; or the completion prompt tokenized as
 * `ft run` does), tools refused together with n > 1 or logprobs, and every
 * generation parameter copied into er->params, with `seed` as the sampling
 * seed when the request gave none. Fills er's prompt, n_prompt, n_choices
 * and params; the rest of er is the caller's. *prompt (malloc'd) holds the
 * tokens er->prompt points to, and er->params borrows api's stop strings,
 * grammar and logit biases: the caller keeps both until FT_EVENT_DONE.
 * Fails with a 400 for a template error, an empty prompt, or a prompt that
 * does not fit the context (the message gives both numbers). Returns 0, or
 * -1 with *err filled. */
int ft_backend_engine_request(const struct ft_backend *b, struct ft_api_request *api, uint64_t seed,
                              struct ft_request *er /* OUT */, int32_t **prompt /* OUT */, struct ft_api_error *err);

/* The chat template rendered for a chat request (the prompt text before
 * tokenization; POST /apply-template answers with it). *text is malloc'd.
 * A template error is a 400, as in ft_backend_engine_request(). */
int ft_backend_render_chat(const struct ft_backend *b, const struct ft_api_request *r, char **text /* OUT */,
                           size_t *len /* OUT */, struct ft_api_error *err);

#endif
