/* OpenAI's answer of a generation (http/completion.c): streamed chunks as
 * the pieces of text come, the non-streamed body, and tool calls. Loop
 * thread only. */
#ifndef FT_HTTP_COMPLETION_H
#define FT_HTTP_COMPLETION_H

#include "generation.h"

#include "ft/generate.h"
#include "ft/logprobs.h"
#include "ft/metrics.h"

#include <stddef.h>
#include <stdint.h>

/* A piece of choice c's text from the outbox, with its token's logprobs
 * (lp, or NULL) and, on the choice's last piece, how it finished:
 * streamed at once (with tools, content as it comes and a possible call
 * held back), or added to the choice's text. */
void ft_completion_piece(struct ft_generation *r, int32_t c, const char *text, size_t len,
                         const struct ft_token_logprob *lp, enum ft_finish_reason finish);
/* Streaming: choice c's chunk with its finish_reason, once. */
void ft_completion_finish_choice(struct ft_generation *r, int32_t c, enum ft_finish_reason finish);
/* The non-streaming body: every choice's text, finish reason and logprobs,
 * usage, and metrics when not NULL. NULL on allocation failure. */
char *ft_completion_body(struct ft_generation *r, const struct ft_request_metrics *usage,
                         const struct ft_request_metrics *metrics);
/* The end of an answer with tools (r->tools): the calls parsed from the
 * text (streaming: from what the stream held back) and sent, streamed or as
 * the body. Returns the finish reason for the log ("tool_calls" when there
 * were calls), or NULL on allocation failure. */
const char *ft_completion_tools(struct ft_generation *r, const struct ft_request_metrics *usage,
                                const struct ft_request_metrics *metrics);

#endif
