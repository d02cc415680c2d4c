/* libFuzzer target for OpenAI request bodies (http/request_parse.c): the
 * bytes every client can send to POST /v1/chat/completions and
 * /v1/completions, plus the response and error builders fed with what the
 * parser accepted.
 *
 * Input layout: one byte picking the endpoint (low bit) and the tool-call
 * format (bits 1-2), then the body. Must never crash, leak, hang or trip a
 * sanitizer; 400s are fine. An accepted request must satisfy what the
 * server relies on: bounded counts, valid UTF-8 strings, ranges inside the
 * sampler's limits (logit_bias ids inside the vocabulary), tools bounded
 * and normalized, and a forced tool_choice either a grammar or a 400
 * (ft_api_tools_grammar in the format picked).
 * Seeds: tests/fuzz/corpus/request.
 */
#include "http/errors.h"
#include "http/request_parse.h"
#include "http/responses.h"

#include "ft/common.h"
#include "ft/sampler.h"
#include "ft/tokenizer.h"
#include "fuzz_common.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

FUZZ_QUIET_INITIALIZE()

static void check_str(const char *s) {
    if (!s || !ft_utf8_valid(s, strlen(s)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 20))
        return 0;
    const enum ft_api_endpoint ep = (data[0] & 1) ? FT_API_COMPLETIONS : FT_API_CHAT;
    struct ft_api_request r;
    struct ft_api_error err;
    const int rc = ft_api_request_parse((const char *)data + 1, size - 1, ep, 8000, &r, &err);
    if (rc) {
        if (err.status != 400 && err.status != 500)
            abort();
        char *body = ft_http_error_body(err.status, err.message, err.param, err.code);
        free(body);
        return 0;
    }
    if (ft_sampler_params_check(&r.sampling) != FT_OK)
        abort();
    if (r.n_stops > FT_API_MAX_STOPS || r.n_messages > FT_API_MAX_MESSAGES || r.max_tokens < 0)
        abort();
    for (int i = 0; i < r.n_stops; i++)
        check_str(r.stops[i]);
    for (int32_t i = 0; i < r.n_messages; i++) {
        check_str(r.messages[i].role);
        check_str(r.messages[i].content);
        if (r.messages[i].n_tool_calls > FT_API_MAX_TOOLS)
            abort();
        for (int32_t j = 0; j < r.messages[i].n_tool_calls; j++) {
            check_str(r.messages[i].tool_calls[j].id);
            check_str(r.messages[i].tool_calls[j].name);
            check_str(r.messages[i].tool_calls[j].arguments);
        }
        if (!strcmp(r.messages[i].role, "tool"))
            check_str(r.messages[i].tool_call_id);
    }
    /* tools: bounded, named, and normalized to what templates expect */
    if (r.n_tools > FT_API_MAX_TOOLS || (r.n_tools > 0) != (r.tools != NULL) ||
        (r.tools && cJSON_GetArraySize(r.tools) != r.n_tools))
        abort();
    for (int32_t i = 0; i < r.n_tools; i++)
        check_str(r.tool_names[i]);
    /* logit_bias: ids in the vocabulary, values in range or a ban */
    if (r.n_logit_bias > FT_API_MAX_LOGIT_BIAS || r.n_logit_bias + r.n_bias_text > FT_API_MAX_LOGIT_BIAS ||
        r.sampling.n_logit_bias != r.n_logit_bias)
        abort();
    for (int32_t i = 0; i < r.n_logit_bias; i++)
        if (r.logit_bias[i].token < 0 || r.logit_bias[i].token >= 8000 ||
            !(r.logit_bias[i].bias == -INFINITY || (r.logit_bias[i].bias >= -100 && r.logit_bias[i].bias <= 100)))
            abort();
    for (int32_t i = 0; i < r.n_bias_text; i++)
        check_str(r.bias_text[i]);
    if (r.min_tokens < 0 || (r.max_tokens > 0 && r.min_tokens > r.max_tokens))
        abort();
    /* forced or strict calls: a grammar, or a 400 naming the field */
    const bool forced = r.tool_choice == FT_API_TOOL_CHOICE_REQUIRED || r.tool_choice == FT_API_TOOL_CHOICE_FUNCTION;
    const bool had_grammar = r.grammar != NULL;
    static const enum ft_tool_format formats[] = {FT_TOOL_FORMAT_GENERIC, FT_TOOL_FORMAT_HERMES, FT_TOOL_FORMAT_LLAMA3,
                                                  FT_TOOL_FORMAT_MISTRAL};
    if (ep == FT_API_CHAT) {
        if (ft_api_tools_grammar(&r, formats[(data[0] >> 1) & 3], &err)) {
            if ((err.status != 400 && err.status != 500) || !err.param[0])
                abort();
        } else if (forced && r.n_tools > 0 && !r.grammar) {
            abort();
        } else if (!forced && !had_grammar && r.grammar && !r.grammar_param) {
            abort();
        }
    }
    if (ep == FT_API_CHAT && r.n_messages < 1)
        abort();
    if (r.n < 1 || r.n > FT_API_MAX_N || r.top_logprobs < 0 || r.top_logprobs > FT_API_MAX_TOP_LOGPROBS ||
        (!r.logprobs && r.top_logprobs))
        abort();
    if (ep == FT_API_COMPLETIONS) {
        if (!r.prompt && r.n_prompt_tokens < 1)
            abort();
        if (r.prompt)
            check_str(r.prompt);
        for (int32_t i = 0; i < r.n_prompt_tokens; i++)
            if (r.prompt_tokens[i] < 0 || r.prompt_tokens[i] >= 8000)
                abort();
    }
    /* What the server would answer with, on the parsed strings. */
    struct ft_request_metrics m = {.prompt_tokens = 3, .completion_tokens = 2, .decode_tokens = 1,
                                   .prefill_tokens_per_second = -1, .decode_tokens_per_second = 10};
    const struct ft_resp_ctx ctx = {ep, "cmpl-fuzz", 0, r.model ? r.model : "m", r.include_usage};
    const char *text = ep == FT_API_CHAT ? r.messages[r.n_messages - 1].content : (r.prompt ? r.prompt : "");
    const struct ft_resp_choice choice = {text, strlen(text), FT_FINISH_STOP, NULL};
    char *s = ft_resp_completion(&ctx, &choice, 1, &m, r.performance_metrics == 1 ? &m : NULL);
    free(s);
    s = ft_resp_chunk_text(&ctx, r.n - 1, text, strlen(text), NULL);
    free(s);
    ft_api_request_free(&r);
    return 0;
}
