/* Response bodies in OpenAI's exact shapes: chat.completion and
 * text_completion objects, their streaming chunks, usage, the model list, and
 * FreeToken's per-request `metrics` object (docs/architecture.md, Metrics
 * contract), which the access log reuses so both carry the same numbers. */
#ifndef FT_HTTP_RESPONSES_H
#define FT_HTTP_RESPONSES_H

#include "request_parse.h"

#include "ft/generate.h"
#include "ft/metrics.h"
#include "ft/tool_calls.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* What every object of one response repeats. */
struct ft_resp_ctx {
    enum ft_api_endpoint endpoint;
    const char *id;      /* "chatcmpl-..." / "cmpl-..." */
    long long created;   /* Unix seconds */
    const char *model;
    bool include_usage;  /* streaming: chunks carry "usage": null until the usage chunk */
};

/* The metrics object: the fields of the metrics contract
 * (docs/architecture.md), times in ms, undefined rates as null. */
cJSON *ft_resp_metrics(const struct ft_request_metrics *m);
/* usage with prompt_tokens_details.cached_tokens. */
cJSON *ft_resp_usage(const struct ft_request_metrics *m);

/* One choice of a non-streaming answer. logprobs (http/logprobs_json.h)
 * is taken over by ft_resp_completion; NULL writes "logprobs": null. */
struct ft_resp_choice {
    const char *text; /* len bytes; may hold NUL bytes (written as \u0000) */
    size_t len;
    enum ft_finish_reason finish;
    cJSON *logprobs;
    const char *reasoning; /* chat: message.reasoning_content, reasoning_len bytes; written when not empty */
    size_t reasoning_len;
};

/* All return malloc'd JSON text (NULL on allocation failure). A `logprobs`
 * argument is taken over (freed) in every case; NULL writes null. */
/* The non-streaming answer with choices[0..n) (index i for choices[i]);
 * metrics may be NULL (not requested). */
char *ft_resp_completion(const struct ft_resp_ctx *c, const struct ft_resp_choice *choices, int n,
                         const struct ft_request_metrics *usage, const struct ft_request_metrics *metrics);
/* Chat only: the first chunk of a choice, delta {"role": "assistant", "content": ""}. */
char *ft_resp_chunk_role(const struct ft_resp_ctx *c, int index);
/* A chunk of choice `index` with text (delta.content or text). */
char *ft_resp_chunk_text(const struct ft_resp_ctx *c, int index, const char *text, size_t len, cJSON *logprobs);
/* A chat chunk of choice `index` with delta.reasoning_content. */
char *ft_resp_chunk_reasoning(const struct ft_resp_ctx *c, int index, const char *text, size_t len,
                              cJSON *logprobs);
/* The chunk with the choice's finish_reason and an empty delta (and the
 * logprobs of tokens whose text never came, such as an end-of-turn token). */
char *ft_resp_chunk_finish(const struct ft_resp_ctx *c, int index, enum ft_finish_reason finish, cJSON *logprobs);
/* The last chunk: "choices": [], with usage (when usage != NULL) and/or metrics. */
char *ft_resp_chunk_final(const struct ft_resp_ctx *c, const struct ft_request_metrics *usage,
                          const struct ft_request_metrics *metrics);
/* Chat answers that call tools: message.content (null when empty) and
 * message.tool_calls [{id, type, function: {name, arguments}}] with ids[i]
 * for p->calls[i], message.reasoning_content when reasoning is not NULL or
 * empty, finish_reason "tool_calls". */
char *ft_resp_completion_tools(const struct ft_resp_ctx *c, const struct ft_tool_parse *p, const char *const *ids,
                               const char *reasoning, const struct ft_request_metrics *usage,
                               const struct ft_request_metrics *metrics);
/* A chunk with delta.tool_calls [{index, ...}]: the first for a call carries
 * id, type and function.name (arguments ""), later ones only
 * function.arguments (id and name NULL). */
char *ft_resp_chunk_tool_call(const struct ft_resp_ctx *c, int index, const char *id, const char *name,
                              const char *arguments);
/* The finishing chunk of an answer that called tools. */
char *ft_resp_chunk_finish_tools(const struct ft_resp_ctx *c);
/* GET /v1/models */
char *ft_resp_models(const char *model_id, long long created);

/* "stop" or "length" for OpenAI (cancelled and error never reach a client
 * as a finish_reason). */
const char *ft_resp_finish_reason(enum ft_finish_reason r);

#endif
