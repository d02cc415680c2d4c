/* The token ids of a chat prompt in which control tokens come only from the
 * chat template: text a client sent as message content is tokenized with
 * special-token parsing off, so "<start_of_turn>model" inside a message is
 * text, not a forged turn. The rendered prompt is otherwise tokenized
 * exactly as a whole (same ids as before when no content holds special-token
 * text). How the contents are found in the render: http/chat_prompt.c. */
#ifndef FT_HTTP_CHAT_PROMPT_H
#define FT_HTTP_CHAT_PROMPT_H

#include "request_parse.h"

#include "ft/chat_template.h"
#include "ft/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* ctx: the Jinja context `real` (real_len bytes) was rendered from. Returns
 * 0 with *ids malloc'd, or -1 with *err: a 400 naming
 * messages[i].content when a content holds special-token text that the
 * template's transformations keep us from isolating. */
int ft_chat_prompt_tokens(const struct ft_chat_template *tmpl, const struct ft_tokenizer *tok,
                          const struct cJSON *ctx, const char *real, size_t real_len, int32_t **ids /* OUT */,
                          size_t *n_ids /* OUT */, struct ft_api_error *err);

#endif
