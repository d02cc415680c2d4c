/* The `logprobs` object of a choice, in OpenAI's two shapes, from the
 * engine's per-token records (engine/include/ft/logprobs.h):
 *
 *  chat         {"content": [{"token", "logprob", "bytes", "top_logprobs":
 *               [{"token", "logprob", "bytes"}, ...]}, ...], "refusal": null}
 *  completions  {"tokens": [...], "token_logprobs": [...], "top_logprobs":
 *               [{TOKEN: LOGPROB, ...}, ...], "text_offset": [...]}
 *
 * A token's text is the bytes it decodes to (ft_token_to_piece, control
 * tokens such as <eos> rendered); `bytes` lists them, and where they are
 * not valid UTF-8 on their own (one token holding part of a character)
 * the text writes each such byte as the escape "\xNN", as OpenAI does.
 * Completions' top_logprobs maps the N most likely tokens and the sampled
 * one (OpenAI's "up to logprobs+1" entries); text_offset counts characters
 * of the completion text before each token (control tokens add none). */
#ifndef FT_HTTP_LOGPROBS_JSON_H
#define FT_HTTP_LOGPROBS_JSON_H

#include "request_parse.h"

#include "ft/logprobs.h"
#include "ft/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

/* v[0..n) as the logprobs object of one choice (or of one streamed chunk).
 * *text_offset (completions) is the offset of v[0] and is advanced past
 * v[n-1], so the chunks of a stream continue one another. NULL on
 * allocation failure. */
cJSON *ft_logprobs_json(enum ft_api_endpoint ep, const struct ft_tokenizer *tok, const struct ft_token_logprob *v,
                        int32_t n, bool tokens_as_ids, int64_t *text_offset /* in/out */);

/* The text of one token for `token` fields: *out is malloc'd. */
int ft_logprobs_token_text(const struct ft_tokenizer *tok, int32_t id, bool as_id, char **out, size_t *n_bytes_out,
                           unsigned char **bytes_out);

#endif
