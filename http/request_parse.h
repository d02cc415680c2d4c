/* Parsing and validating OpenAI request bodies (POST /v1/chat/completions
 * and /v1/completions) with cJSON.
 *
 * Every body is hostile: it must be UTF-8 JSON with an object at the top,
 * each honoured field must have the right type and range, strings may not
 * contain U+0000, and counts are bounded. Schemas and grammars are compiled
 * here (engine/text/json_schema.c, grammar.c), with their own bounds. Unknown fields are ignored (SDKs
 * send many); fields that would change the shape of the answer in a way
 * this server does not implement (echo, best_of) are rejected with a
 * message that says so, rather than silently ignored.
 * No model is needed to parse, so the fuzzer runs this on its own. */
#ifndef FT_HTTP_REQUEST_PARSE_H
#define FT_HTTP_REQUEST_PARSE_H

#include "ft/grammar.h"
#include "ft/reasoning.h"
#include "ft/sampler.h"
#include "ft/tool_calls.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ft_api_endpoint { FT_API_CHAT, FT_API_COMPLETIONS };

#define FT_API_MAX_STOPS 16
#define FT_API_MAX_STOP_LEN 256
#define FT_API_MAX_MESSAGES 4096
#define FT_API_MAX_PARTS 1024
/* n: choices per request (also bounded by the server's -np). */
#define FT_API_MAX_N 16
/* Chat's top_logprobs (OpenAI: 0..20); completions' logprobs is 0..5 in
 * OpenAI's legacy API, accepted up to 20 as vLLM does. */
#define FT_API_MAX_TOP_LOGPROBS 20
/* The JSON body before cJSON sees it: nesting depth and number of values
 * (cJSON recurses per level and allocates per value). */
#define FT_API_MAX_JSON_DEPTH 64
#define FT_API_MAX_JSON_VALUES 262144

#define FT_API_MAX_TOOLS 128 /* OpenAI's limit, also for calls in one message */
/* logit_bias entries as sent (OpenAI's limit); a text key (llama.cpp's
 * extension) is at most FT_API_MAX_BIAS_TEXT bytes and may expand to
 * several tokens, up to FT_SAMPLER_MAX_LOGIT_BIAS entries in all. */
#define FT_API_MAX_LOGIT_BIAS 300
#define FT_API_MAX_BIAS_TEXT 256

/* A call in an assistant message of the history (OpenAI's tool_calls[i]). */
struct ft_api_tool_call {
    char *id;
    char *name;
    char *arguments; /* JSON text, as the client sent it (checked to be JSON) */
};

struct ft_api_message {
    const char *role; /* "system", "user", "assistant" or "tool" (static) */
    char *content;    /* malloc'd UTF-8; text parts joined with "\n"; "" for a null content */
    struct ft_api_tool_call *tool_calls; /* assistant: the calls it made */
    int32_t n_tool_calls;
    char *tool_call_id; /* tool: the call this is the result of */
    char *name;         /* tool: the function's name, when given */
    char *reasoning_content; /* assistant: its reasoning (http/reasoning.c), NULL when not given */
};

enum ft_api_tool_choice {
    FT_API_TOOL_CHOICE_AUTO,     /* the default when tools are given */
    FT_API_TOOL_CHOICE_NONE,     /* the default without tools: no tool in the prompt, none parsed */
    FT_API_TOOL_CHOICE_REQUIRED, /* one or more calls, forced by a grammar (ft_api_tools_grammar) */
    FT_API_TOOL_CHOICE_FUNCTION, /* {"type": "function", "function": {"name": ...}}: calls of that one */
};

struct ft_api_request {
    enum ft_api_endpoint endpoint;
    char *model; /* NULL when absent */
    /* chat */
    struct ft_api_message *messages;
    int32_t n_messages;
    /* completions: a text prompt, or token ids (then prompt is NULL) */
    char *prompt;
    int32_t *prompt_tokens;
    int32_t n_prompt_tokens;
    int32_t max_tokens; /* 0: not given (until end of generation or context) */
    struct ft_sampler_params sampling; /* engine defaults for fields not given */
    bool seed_set;
    bool ignore_eos; /* llama.cpp server / vLLM extension: generate past end-of-generation tokens */
    char *stops[FT_API_MAX_STOPS];
    int n_stops;
    int32_t n;          /* choices, 1 .. FT_API_MAX_N */
    bool logprobs;      /* chat: logprobs true; completions: logprobs given (an integer) */
    int32_t top_logprobs; /* chat: top_logprobs; completions: the logprobs integer */
    bool tokens_as_ids; /* vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:ID" */
    /* tools (http/tool_request.c): validated and normalized to what chat
     * templates expect, [{"type": "function", "function": {"name",
     * "description", "parameters"}}]; NULL when not given */
    struct cJSON *tools;
    char **tool_names; /* n_tools names, in order */
    bool *tool_strict; /* n_tools: function.strict */
    int32_t n_tools;
    enum ft_api_tool_choice tool_choice;
    char *tool_choice_name; /* FT_API_TOOL_CHOICE_FUNCTION */
    bool parallel_tool_calls; /* default true */
    bool stream;
    bool include_usage;      /* stream_options.include_usage */
    int performance_metrics; /* -1 not given, 0 false, 1 true */
    /* Structured output: response_format json_object / json_schema, or the
     * llama.cpp server's `grammar` (GBNF) / `json_schema`, or vLLM's
     * `guided_json`, compiled while parsing so a bad schema is a 400. */
    struct ft_grammar *grammar; /* owned; NULL when unconstrained */
    const char *grammar_param;  /* the field that gave it (static), for errors */
    /* A lazy grammar (strict tools, tool_choice auto): see ft_gen_params. */
    const char *grammar_trigger; /* static; NULL: the grammar holds from the start */
    bool grammar_trigger_at_start;
    /* logit_bias: token ids and biases (-INFINITY for llama.cpp's false);
     * text keys are kept in bias_text until ft_api_logit_bias_resolve()
     * tokenizes them. */
    struct ft_logit_bias *logit_bias;
    int32_t n_logit_bias;
    char **bias_text;
    float *bias_text_value;
    int32_t n_bias_text;
    int32_t min_tokens; /* vLLM's: no end of generation or stop string before this many tokens */
    /* Reasoning (http/reasoning.c): llama-server's reasoning_format (the
     * server's --reasoning-format when not set), chat_template_kwargs'
     * enable_thinking false, and, set by the backend when it renders the
     * prompt, whether the prompt leaves the answer inside the reasoning. */
    bool reasoning_format_set;
    enum ft_reasoning_format reasoning_format;
    bool thinking_off;
    bool reasoning_opens;
};

/* What is wrong with a request: HTTP status (400), the offending parameter
 * (may be empty) and a message for the OpenAI error body. */
struct ft_api_error {
    int status;
    char param[64];
    char message[320];
    const char *code; /* OpenAI error code or NULL */
};

/* Parse body[0..len). n_vocab bounds token-id prompts. Returns 0, or -1
 * with *err filled (and *out freed). */
int ft_api_request_parse(const char *body, size_t len, enum ft_api_endpoint ep, int32_t n_vocab,
                         struct ft_api_request *out /* OUT */, struct ft_api_error *err /* OUT */);
void ft_api_request_free(struct ft_api_request *r); /* accepts a zeroed struct */

/* The checks every JSON body gets (UTF-8, no U+0000, depth and value
 * bounds, one JSON object and nothing after it): the parsed object (the
 * caller cJSON_Deletes it), or NULL with *err filled. */
struct cJSON;
struct cJSON *ft_api_parse_body(const char *body, size_t len, struct ft_api_error *err /* OUT */);
/* http/tool_request.c, called by the parser above: `tools`, `tool_choice`,
 * `parallel_tool_calls` of the body, and the tool fields of messages[i]
 * (role "tool" with tool_call_id, assistant tool_calls). 0 or -1 with *err. */
int ft_api_parse_tools(const struct cJSON *root, struct ft_api_request *r, struct ft_api_error *err);
int ft_api_parse_message_tools(const struct cJSON *m, int i, struct ft_api_message *msg, struct ft_api_error *err);
void ft_api_tools_free(struct ft_api_request *r);
/* The grammar that forces or checks tool calls in the template's format f
 * (tool_choice "required" or a named function: the whole answer is calls;
 * strict tools under "auto": a lazy grammar from the format's opening
 * marker). Sets r->grammar; a response_format or other grammar next to it
 * is a 400 naming that field. 0 or -1 with *err. */
int ft_api_tools_grammar(struct ft_api_request *r, enum ft_tool_format f, struct ft_api_error *err);
/* Tokenize the text keys of logit_bias (llama.cpp's extension: the bias
 * goes to every token of the text) into r->logit_bias. 0 or -1 with *err. */
struct ft_tokenizer;
int ft_api_logit_bias_resolve(struct ft_api_request *r, const struct ft_tokenizer *tok, struct ft_api_error *err);
void ft_api_message_tools_free(struct ft_api_message *msg);

void ft_api_error_set(struct ft_api_error *err, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
