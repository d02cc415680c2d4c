/* Tool calls end to end without a model:
 *  - the parsers of the four formats on fixed model texts (well-formed
 *    calls, and the near misses that must stay content);
 *  - the streaming hold-back: the same texts fed byte by byte give the
 *    same content and calls, and plain content is not held back;
 *  - the request fields (tools, tool_choice, parallel_tool_calls, tool
 *    messages, assistant tool_calls): normalized values and the 400s with
 *    the offending field;
 *  - the chat context: a request with tools and a tool call + result in
 *    the history, rendered through real templates (Qwen 2.5, Qwen 3,
 *    Hermes 2 Pro, Mistral Nemo), must equal what llama.cpp renders for
 *    the same conversation (tests/data/templates/expected/);
 *  - the answers' JSON: message.tool_calls and streamed delta.tool_calls.
 * The HTTP sources are compiled in, as test_http_parse.c does. */
#include "http/chat_context.c"
#include "http/reasoning.c"
#include "http/request_parse.c"
#include "http/responses.c"
#include "http/tool_request.c"

#include "ft/gguf.h"
#include "ft/tool_calls.h"
#include "ft_test.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"get_weather", "search"};

/* Parse and compare: content, then (name, arguments) pairs. */
static void expect_parse(enum ft_tool_format f, const char *text, size_t max_calls, const char *content,
                         size_t n_calls, const char *const *want, int line) {
    struct ft_tool_parse p;
    int rc = ft_tool_calls_parse(f, text, strlen(text), names, 2, max_calls, &p);
    CHECKF(rc == 0, "line %d: rc %d", line, rc);
    if (rc)
        return;
    CHECKF(strcmp(p.content, content) == 0, "line %d: content '%s', want '%s'", line, p.content, content);
    CHECKF(p.n_calls == n_calls, "line %d: %zu calls, want %zu", line, p.n_calls, n_calls);
    for (size_t i = 0; i < p.n_calls && i < n_calls; i++) {
        CHECKF(strcmp(p.calls[i].name, want[2 * i]) == 0, "line %d: call %zu name '%s'", line, i, p.calls[i].name);
        CHECKF(strcmp(p.calls[i].arguments, want[2 * i + 1]) == 0, "line %d: call %zu arguments '%s' want '%s'",
               line, i, p.calls[i].arguments, want[2 * i + 1]);
    }
    ft_tool_parse_free(&p);

    /* The same text streamed one byte at a time. */
    struct ft_tool_stream s;
    ft_tool_stream_init(&s, f);
    size_t cap = strlen(text) + 1, n = 0;
    char *streamed = calloc(cap, 1);
    for (size_t i = 0; text[i]; i++) {
        char *e = NULL;
        CHECK(ft_tool_stream_feed(&s, text + i, 1, &e) == 0);
        size_t k = e ? strlen(e) : 0;
        CHECKF(n + k < cap, "line %d: streamed more than the text", line);
        if (n + k < cap)
            memcpy(streamed + n, e, k);
        n += k;
        free(e);
    }
    CHECK(ft_tool_stream_finish(&s, names, 2, max_calls, &p) == 0);
    size_t k = strlen(p.content);
    if (n + k < cap) {
        memcpy(streamed + n, p.content, k);
        streamed[n + k] = '\0';
    }
    CHECKF(strcmp(streamed, content) == 0, "line %d: streamed content '%s', want '%s'", line, streamed, content);
    CHECKF(p.n_calls == n_calls, "line %d: streamed %zu calls, want %zu", line, p.n_calls, n_calls);
    for (size_t i = 0; i < p.n_calls && i < n_calls; i++)
        CHECKF(strcmp(p.calls[i].arguments, want[2 * i + 1]) == 0, "line %d: streamed call %zu", line, i);
    ft_tool_parse_free(&p);
    ft_tool_stream_free(&s);
    free(streamed);
}

#define CALLS(...) ((const char *const[]){__VA_ARGS__})
#define PARSE(f, text, content, n, ...) expect_parse((f), (text), 0, (content), (n), CALLS(__VA_ARGS__), __LINE__)
#define CONTENT(f, text) expect_parse((f), (text), 0, (text), 0, CALLS(NULL), __LINE__)

static const char paris[] = "{\"location\":\"Paris\"}";
static const char search_args[] = "{\"query\":\"caf\xc3\xa9\",\"max_results\":3}";

static void test_hermes(void) {
    const enum ft_tool_format H = FT_TOOL_FORMAT_HERMES;
    PARSE(H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>", "", 1,
          "get_weather", paris);
    PARSE(H,
          "Let me look.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n"
          "</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"caf\xc3\xa9\", "
          "\"max_results\": 3}}\n</tool_call>\n",
          "Let me look.", 2, "get_weather", paris, "search", search_args);
    /* arguments quoted as a string holding JSON */
    PARSE(H, "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"location\\\": \\\"Paris\\\"}\"}</tool_call>",
          "", 1, "get_weather", paris);
    /* near misses stay content */
    CONTENT(H, "No tools needed: the answer is 4.");
    CONTENT(H, "a < b and <tool_ is not a call");
    CONTENT(H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}"); /* unclosed */
    CONTENT(H, "<tool_call>{\"name\": \"launch_missiles\", \"arguments\": {}}</tool_call>");          /* not offered */
    CONTENT(H, "<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>");              /* not an object */
    CONTENT(H, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"location\": </tool_call>");   /* bad JSON */
    CONTENT(H, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}} trailing</tool_call>");
    CONTENT(H, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call> and then some text");
    /* parallel_tool_calls false: two calls are not one call */
    const char two[] = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>"
                       "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>";
    expect_parse(H, two, 1, two, 0, CALLS(NULL), __LINE__);
    expect_parse(H, two, 0, "", 2, CALLS("get_weather", "{}", "search", "{}"), __LINE__);
}

static void test_llama3(void) {
    const enum ft_tool_format L = FT_TOOL_FORMAT_LLAMA3;
    PARSE(L, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}", "", 1, "get_weather", paris);
    PARSE(L, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}", "", 1,
          "get_weather", paris);
    PARSE(L, "  {\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}; {\"name\": \"search\", "
             "\"parameters\": {\"query\": \"caf\xc3\xa9\", \"max_results\": 3}}\n",
          "", 2, "get_weather", paris, "search", search_args);
    CONTENT(L, "The weather in Paris is sunny.");
    CONTENT(L, "{\"answer\": 4}");
    CONTENT(L, "{\"name\": \"get_weather\"}"); /* no arguments */
    CONTENT(L, "{\"name\": \"get_weather\", \"parameters\": {}} Paris");
    CONTENT(L, "<|python_tag|>brave_search.call(query=\"Paris\")"); /* built-in tools are not functions */
}

static void test_mistral(void) {
    const enum ft_tool_format M = FT_TOOL_FORMAT_MISTRAL;
    PARSE(M, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}, \"id\": \"abc123def\"}]",
          "", 1, "get_weather", paris);
    PARSE(M, "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}[TOOL_CALLS]search[ARGS]{\"query\": "
             "\"caf\xc3\xa9\", \"max_results\": 3}",
          "", 2, "get_weather", paris, "search", search_args);
    PARSE(M, "Sure.[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}", "Sure.", 1, "get_weather", paris);
    CONTENT(M, "Paris is sunny [TOOL_CALLS] maybe");
    CONTENT(M, "[TOOL_CALLS][]");
    CONTENT(M, "[TOOL_CALLS]get_weather[ARGS]not json");
    /* the model's own id is kept (Mistral templates need 9 characters) */
    struct ft_tool_parse p;
    const char *t = "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}, \"id\": \"Ab3dE6gH9\"}]";
    CHECK(ft_tool_calls_parse(M, t, strlen(t), names, 2, 0, &p) == 0);
    CHECK(p.n_calls == 1 && p.calls[0].id && strcmp(p.calls[0].id, "Ab3dE6gH9") == 0);
    ft_tool_parse_free(&p);
}

static void test_generic(void) {
    const enum ft_tool_format G = FT_TOOL_FORMAT_GENERIC;
    PARSE(G, "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}}", "", 1,
          "get_weather", paris);
    PARSE(G, "```json\n{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}, "
             "{\"name\": \"search\", \"arguments\": {\"query\": \"caf\xc3\xa9\", \"max_results\": 3}}]}\n```",
          "", 2, "get_weather", paris, "search", search_args);
    /* {"response": ...} is the content */
    expect_parse(G, "{\"response\": \"It is sunny in Paris.\"}", 0, "It is sunny in Paris.", 0, CALLS(NULL),
                 __LINE__);
    CONTENT(G, "It is sunny in Paris.");
    CONTENT(G, "{\"response\": 4}");
    CONTENT(G, "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {}}, \"response\": \"x\"}");
    CONTENT(G, "{\"tool_calls\": []}");
    CONTENT(G, "``` not json ```");
}

static void test_stream_timing(void) {
    /* Content is sent as it arrives; only a possible marker waits. */
    struct ft_tool_stream s;
    char *e;
    ft_tool_stream_init(&s, FT_TOOL_FORMAT_HERMES);
    CHECK(ft_tool_stream_feed(&s, "Hello", 5, &e) == 0 && strcmp(e, "Hello") == 0);
    free(e);
    CHECK(ft_tool_stream_feed(&s, " <tool", 6, &e) == 0 && strcmp(e, "") == 0);
    free(e);
    CHECK(ft_tool_stream_feed(&s, "box>", 4, &e) == 0 && strcmp(e, " <toolbox>") == 0);
    free(e);
    ft_tool_stream_free(&s);

    ft_tool_stream_init(&s, FT_TOOL_FORMAT_GENERIC);
    CHECK(ft_tool_stream_feed(&s, "  ", 2, &e) == 0 && strcmp(e, "") == 0);
    free(e);
    CHECK(ft_tool_stream_feed(&s, "Hi", 2, &e) == 0 && strcmp(e, "  Hi") == 0);
    free(e);
    CHECK(ft_tool_stream_feed(&s, " {", 2, &e) == 0 && strcmp(e, " {") == 0); /* a brace later is content */
    free(e);
    ft_tool_stream_free(&s);

    ft_tool_stream_init(&s, FT_TOOL_FORMAT_LLAMA3);
    CHECK(ft_tool_stream_feed(&s, "<|py", 4, &e) == 0 && strcmp(e, "") == 0);
    free(e);
    CHECK(ft_tool_stream_feed(&s, "x", 1, &e) == 0 && strcmp(e, "<|pyx") == 0);
    free(e);
    ft_tool_stream_free(&s);
}

static void test_detect(void) {
    const char *dir = getenv("FT_SOURCE_DIR");
    if (!dir)
        return;
    static const struct {
        const char *file;
        enum ft_tool_format f;
    } cases[] = {
        {"Qwen-Qwen2.5-7B-Instruct.jinja", FT_TOOL_FORMAT_HERMES},
        {"Qwen-Qwen3-0.6B.jinja", FT_TOOL_FORMAT_HERMES},
        {"Qwen-QwQ-32B.jinja", FT_TOOL_FORMAT_HERMES},
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", FT_TOOL_FORMAT_HERMES},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", FT_TOOL_FORMAT_HERMES},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", FT_TOOL_FORMAT_LLAMA3},
        {"meta-llama-Llama-3.2-3B-Instruct.jinja", FT_TOOL_FORMAT_LLAMA3},
        {"meta-llama-Llama-3.3-70B-Instruct.jinja", FT_TOOL_FORMAT_LLAMA3},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", FT_TOOL_FORMAT_MISTRAL},
        {"Mistral-Small-3.2-24B-Instruct-2506.jinja", FT_TOOL_FORMAT_MISTRAL},
        {"unsloth-mistral-Devstral-Small-2507.jinja", FT_TOOL_FORMAT_MISTRAL},
        {"google-gemma-2-2b-it.jinja", FT_TOOL_FORMAT_GENERIC},
        {"microsoft-Phi-3.5-mini-instruct.jinja", FT_TOOL_FORMAT_GENERIC},
        {"Qwen3-Coder.jinja", FT_TOOL_FORMAT_GENERIC},       /* XML inside <tool_call> */
        {"GLM-4.6.jinja", FT_TOOL_FORMAT_GENERIC},           /* <arg_key> XML */
        {"meetkai-functionary-medium-v3.1.jinja", FT_TOOL_FORMAT_GENERIC},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        char path[4600];
        snprintf(path, sizeof(path), "%s/tests/data/templates/llama.cpp/%s", dir, cases[i].file);
        size_t n = 0;
        char *src = ft_test_read_file(path, &n);
        CHECKF(src != NULL, "cannot read %s", path);
        if (src)
            CHECKF(ft_tool_format_detect(src, n) == cases[i].f, "%s: %s", cases[i].file,
                   ft_tool_format_name(ft_tool_format_detect(src, n)));
        free(src);
    }
}

/* ------------------------------------------------------------ requests */

static int parse_req(const char *body, struct ft_api_request *r, struct ft_api_error *err) {
    return ft_api_request_parse(body, strlen(body), FT_API_CHAT, 1000, r, err);
}

#define MSG_USER "{\"role\": \"user\", \"content\": \"hi\"}"
#define TOOL_W "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\"}}}"

static void expect_bad(const char *body, const char *param, const char *msg_part, int line) {
    struct ft_api_request r;
    struct ft_api_error err;
    int rc = parse_req(body, &r, &err);
    CHECKF(rc == -1, "line %d: accepted", line);
    if (rc != -1) {
        ft_api_request_free(&r);
        return;
    }
    CHECKF(err.status == 400, "line %d: status %d", line, err.status);
    CHECKF(strcmp(err.param, param) == 0, "line %d: param '%s', want '%s'", line, err.param, param);
    CHECKF(strstr(err.message, msg_part) != NULL, "line %d: message '%s' lacks '%s'", line, err.message, msg_part);
}
#define BAD_REQ(body, param, part) expect_bad((body), (param), (part), __LINE__)

static void test_requests(void) {
    struct ft_api_request r;
    struct ft_api_error err;
    const char *ok =
        "{\"messages\": [" MSG_USER ", {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": "
        "\"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": "
        "\"{\\\"location\\\": \\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"name\": "
        "\"get_weather\", \"content\": [{\"type\": \"text\", \"text\": \"18C\"}]}], \"tools\": [" TOOL_W ", "
        "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\", \"strict\": "
        "false}}], \"tool_choice\": \"auto\", \"parallel_tool_calls\": false}";
    CHECK(parse_req(ok, &r, &err) == 0);
    if (!err.status) {
        CHECK(r.n_messages == 3 && r.n_tools == 2 && r.tool_choice == FT_API_TOOL_CHOICE_AUTO);
        CHECK(!r.parallel_tool_calls && ft_chat_tools_active(&r));
        CHECK(strcmp(r.messages[1].content, "") == 0 && r.messages[1].n_tool_calls == 1);
        CHECK(strcmp(r.messages[1].tool_calls[0].arguments, "{\"location\": \"Paris\"}") == 0);
        CHECK(strcmp(r.messages[2].role, "tool") == 0 && strcmp(r.messages[2].tool_call_id, "call_1") == 0);
        CHECK(strcmp(r.messages[2].name, "get_weather") == 0 && strcmp(r.messages[2].content, "18C") == 0);
        char *tools = cJSON_PrintUnformatted(r.tools);
        CHECKF(strcmp(tools, "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"\","
                             "\"parameters\":{\"type\":\"object\"}}},{\"type\":\"function\",\"function\":{\"name\":"
                             "\"search\",\"description\":\"Search\",\"parameters\":{}}}]") == 0,
               "tools %s", tools);
        free(tools);
        ft_api_request_free(&r);
    }
    /* tool_choice none: tools are not offered to the model at all */
    CHECK(parse_req("{\"messages\": [" MSG_USER "], \"tools\": [" TOOL_W "], \"tool_choice\": \"none\"}", &r, &err) ==
          0);
    CHECK(r.tool_choice == FT_API_TOOL_CHOICE_NONE && !ft_chat_tools_active(&r));
    ft_api_request_free(&r);
    /* no tools, empty tools */
    CHECK(parse_req("{\"messages\": [" MSG_USER "], \"tools\": []}", &r, &err) == 0);
    CHECK(r.n_tools == 0 && !ft_chat_tools_active(&r));
    ft_api_request_free(&r);

    BAD_REQ("{\"messages\": [" MSG_USER "], \"tools\": {}}", "tools", "must be an array");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"tools\": [1]}", "tools[0]", "must be an object");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"tools\": [{\"type\": \"code_interpreter\"}]}", "tools[0].type",
            "only \"function\"");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"tools\": [{\"type\": \"function\"}]}", "tools[0].function",
            "must be an object");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}",
            "tools[0].function.name", "1 to 64 characters");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"tools\": [" TOOL_W ", {\"type\": \"function\", \"function\": {\"name\": "
            "\"x\", \"parameters\": []}}]}",
            "tools[1].function.parameters", "JSON Schema object");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"tools\": [" TOOL_W ", " TOOL_W "]}", "tools[1].function.name",
            "two tools are named");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"x\", "
            "\"strict\": 1}}]}",
            "tools[0].function.strict", "must be a boolean");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"tools\": [" TOOL_W "], \"tool_choice\": \"always\"}", "tool_choice",
            "must be \"none\"");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"tools\": [" TOOL_W "], \"tool_choice\": 1}", "tool_choice",
            "string or an object");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"tools\": [" TOOL_W "], \"tool_choice\": {\"type\": \"function\"}}",
            "tool_choice", "an object 'tool_choice' must be");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"tools\": [" TOOL_W "], \"tool_choice\": {\"type\": \"function\", "
            "\"function\": {\"name\": \"nope\"}}}",
            "tool_choice", "not in 'tools'");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"tool_choice\": \"auto\"}", "tool_choice", "needs a non-empty 'tools'");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"parallel_tool_calls\": 1}", "parallel_tool_calls", "boolean");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"functions\": []}", "functions", "deprecated");
    BAD_REQ("{\"messages\": [" MSG_USER "], \"function_call\": \"auto\"}", "function_call", "deprecated");
    /* messages */
    BAD_REQ("{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", "messages[0].tool_call_id", "required");
    BAD_REQ("{\"messages\": [{\"role\": \"tool\", \"tool_call_id\": 5, \"content\": \"x\"}]}",
            "messages[0].tool_call_id", "required");
    BAD_REQ("{\"messages\": [{\"role\": \"tool\", \"tool_call_id\": \"c\"}]}", "messages[0].content", "required");
    BAD_REQ("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"tool_call_id\": \"c\"}]}",
            "messages[0].tool_call_id", "only allowed in tool messages");
    BAD_REQ("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": []}]}", "messages[0].tool_calls",
            "only allowed in assistant messages");
    BAD_REQ("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": {}}]}", "messages[0].tool_calls",
            "must be an array");
    BAD_REQ("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"type\": \"function\", \"function\": "
            "{\"name\": \"f\", \"arguments\": \"{}\"}}]}]}",
            "messages[0].tool_calls[0].id", "1 to 256 bytes");
    BAD_REQ("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"c\", \"type\": \"web\", "
            "\"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}]}",
            "messages[0].tool_calls[0].type", "must be \"function\"");
    BAD_REQ("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"c\", \"function\": {\"name\": "
            "\"f\", \"arguments\": {}}}]}]}",
            "messages[0].tool_calls[0].function.arguments", "string holding JSON");
    BAD_REQ("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"c\", \"function\": {\"name\": "
            "\"f\", \"arguments\": \"{oops\"}}]}]}",
            "messages[0].tool_calls[0].function.arguments", "JSON object");
    BAD_REQ("{\"messages\": [{\"role\": \"function\", \"content\": \"x\"}]}", "messages[0].role", "unknown role");
}

/* ------------------------------------------------ context vs llama.cpp */

/* generate.py's "tool_result" conversation, as a client sends it. */
static const char tool_result_req[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"}, {\"role\": \"user\", "
    "\"content\": \"What is the weather in Paris?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
    "[{\"id\": \"call12345\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": "
    "\"{\\\"location\\\": \\\"Paris\\\", \\\"unit\\\": \\\"celsius\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": "
    "\"call12345\", \"name\": \"get_weather\", \"content\": \"{\\\"temperature\\\": 18, \\\"condition\\\": "
    "\\\"sunny\\\"}\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"description\": \"Get the current weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"location\": {\"type\": \"string\", \"description\": \"City name, e.g. Paris\"}, \"unit\": {\"type\": "
    "\"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"location\"]}}}, {\"type\": \"function\", "
    "\"function\": {\"name\": \"search\", \"description\": \"Search the web\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"query\": {\"type\": \"string\"}, \"max_results\": {\"type\": \"integer\", \"description\": "
    "\"At most this many results\"}}, \"required\": [\"query\"]}}}]}";

static void test_context_matches_llamacpp(void) {
    const char *dir = getenv("FT_SOURCE_DIR");
    if (!dir)
        return;
    static const char *const templates[] = {"Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B",
                                            "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
                                            "mistralai-Mistral-Nemo-Instruct-2407"};
    struct ft_api_request r;
    struct ft_api_error err;
    CHECK(parse_req(tool_result_req, &r, &err) == 0);
    for (size_t i = 0; i < FT_ARRAY_LEN(templates) && !err.status; i++) {
        char path[4600];
        size_t n = 0;
        snprintf(path, sizeof(path), "%s/tests/data/templates/llama.cpp/%s.jinja", dir, templates[i]);
        char *src = ft_test_read_file(path, &n);
        snprintf(path, sizeof(path), "%s/tests/data/templates/expected/%s.json", dir, templates[i]);
        char *exp = ft_test_read_file(path, NULL);
        CHECKF(src && exp, "cannot read %s", templates[i]);
        cJSON *doc = exp ? cJSON_Parse(exp) : NULL;
        const char *want = NULL;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
            if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c, "scenario")), "tool_result"))
                want = cJSON_GetStringValue(cJSON_GetObjectItem(c, "output"));
        }
        CHECKF(want != NULL, "%s: no tool_result case", templates[i]);
        struct ft_chat_template *t = NULL;
        CHECK(src && ft_chat_template_parse(src, n, &t) == 0);
        if (t && want) {
            struct ft_chat_tool_caps caps;
            ft_chat_tool_caps_probe(t, "<s>", "</s>", &caps);
            CHECKF(caps.renders_tools && caps.renders_tool_calls, "%s: probe", templates[i]);
            cJSON *ctx = ft_chat_context_build(&r, &caps, "<s>", "</s>", &err);
            char *got = NULL;
            CHECK(ctx && ft_chat_template_render_json(t, ctx, 0, &got, NULL) == 0);
            CHECKF(got && strcmp(got, want) == 0, "%s: the prompt differs from llama.cpp's:\n%s\n--- llama.cpp:\n%s",
                   templates[i], got ? got : "(null)", want);
            free(got);
            cJSON_Delete(ctx);
        }
        ft_chat_template_free(t);
        cJSON_Delete(doc);
        free(src);
        free(exp);
    }
    ft_api_request_free(&r);
}

/* The probe against llama.cpp's own capability analysis (jinja::caps,
 * stored by generate.py) on all 68 templates. */
static void test_caps_match_llamacpp(void) {
    const char *dir = getenv("FT_SOURCE_DIR");
    if (!dir)
        return;
    char path[4600];
    snprintf(path, sizeof(path), "%s/tests/data/templates/expected", dir);
    DIR *d = opendir(path);
    CHECKF(d != NULL, "cannot open %s", path);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 6 || l > 250 || strcmp(e->d_name + l - 5, ".json") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/tests/data/templates/expected/%s", dir, e->d_name);
        char *text = ft_test_read_file(path, NULL);
        cJSON *doc = text ? cJSON_Parse(text) : NULL;
        free(text);
        const cJSON *caps = cJSON_GetObjectItem(doc, "caps");
        const char *tname = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "template"));
        CHECKF(caps && tname, "%s: no caps", e->d_name);
        snprintf(path, sizeof(path), "%s/tests/data/templates/llama.cpp/%s", dir, tname ? tname : "");
        size_t len = 0;
        char *src = tname ? ft_test_read_file(path, &len) : NULL;
        struct ft_chat_template *t = NULL;
        if (src && caps && ft_chat_template_parse(src, len, &t) == 0) {
            struct ft_chat_tool_caps c;
            ft_chat_tool_caps_probe(t, "<s>", "</s>", &c);
            CHECKF(c.renders_tools == cJSON_IsTrue(cJSON_GetObjectItem(caps, "supports_tools")), "%s: tools %d",
                   tname, c.renders_tools);
            CHECKF(c.renders_tool_calls == cJSON_IsTrue(cJSON_GetObjectItem(caps, "supports_tool_calls")),
                   "%s: tool calls %d", tname, c.renders_tool_calls);
            CHECKF(c.object_arguments == cJSON_IsTrue(cJSON_GetObjectItem(caps, "supports_object_arguments")),
                   "%s: object arguments %d", tname, c.object_arguments);
            CHECKF(c.system_role == cJSON_IsTrue(cJSON_GetObjectItem(caps, "supports_system_role")),
                   "%s: system role %d", tname, c.system_role);
            n++;
        }
        ft_chat_template_free(t);
        free(src);
        cJSON_Delete(doc);
    }
    if (d)
        closedir(d);
    CHECKF(n == 68, "%d templates probed", n);
}

/* Every scenario of generate.py (as a client sends it, tests/data/templates/
 * scenarios.json) through the whole server path — request parsing, the
 * probe, the context — on all 68 templates, against llama.cpp's prompt.
 * The scenario without a generation prompt is left out (the server always
 * asks for one). */
static void test_all_prompts_match_llamacpp(void) {
    const char *dir = getenv("FT_SOURCE_DIR");
    if (!dir)
        return;
    char path[4600];
    snprintf(path, sizeof(path), "%s/tests/data/templates/scenarios.json", dir);
    char *text = ft_test_read_file(path, NULL);
    cJSON *scen = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECKF(scen != NULL, "cannot read %s", path);
    snprintf(path, sizeof(path), "%s/tests/data/templates/expected", dir);
    DIR *d = opendir(path);
    int same = 0, total = 0, generic = 0;
    for (struct dirent *e; scen && d && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 6 || l > 250 || strcmp(e->d_name + l - 5, ".json") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/tests/data/templates/expected/%s", dir, e->d_name);
        text = ft_test_read_file(path, NULL);
        cJSON *doc = text ? cJSON_Parse(text) : NULL;
        free(text);
        const char *tname = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "template"));
        snprintf(path, sizeof(path), "%s/tests/data/templates/llama.cpp/%s", dir, tname ? tname : "");
        size_t len = 0;
        char *src = tname ? ft_test_read_file(path, &len) : NULL;
        struct ft_chat_template *t = NULL;
        if (!src || ft_chat_template_parse(src, len, &t)) {
            CHECKF(0, "%s: cannot parse", e->d_name);
        } else {
            struct ft_chat_tool_caps caps;
            ft_chat_tool_caps_probe(t, "<s>", "</s>", &caps);
            const cJSON *c;
            cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
                const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "scenario"));
                const cJSON *sc = cJSON_GetObjectItem(scen, name ? name : "");
                if (!cJSON_IsTrue(cJSON_GetObjectItem(sc, "add_generation_prompt")))
                    continue;
                const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(c, "output"));
                char *body = cJSON_PrintUnformatted(sc);
                struct ft_api_request r;
                struct ft_api_error err;
                CHECKF(body && parse_req(body, &r, &err) == 0, "%s/%s: %s", tname, name, err.message);
                free(body);
                if (err.status)
                    continue;
                cJSON *ctx = ft_chat_context_build(&r, &caps, "<s>", "</s>", &err);
                /* The globals llama.cpp adds beyond the conversation (its
                 * reasoning switch and date strings) and its fixed clock,
                 * taken from the case, so that what is compared is the
                 * conversation's part of the context. */
                const cJSON *lctx = cJSON_GetObjectItem(c, "context");
                static const char *const extra[] = {"enable_thinking", "datetime", "date_string"};
                for (size_t k = 0; ctx && k < FT_ARRAY_LEN(extra); k++)
                    cJSON_AddItemToObject(ctx, extra[k], cJSON_Duplicate(cJSON_GetObjectItem(lctx, extra[k]), 1));
                char *got = NULL;
                ft_log_set_level(FT_LOG_ERROR + 1); /* llama.cpp's own errors are expected here */
                int rc = ctx ? ft_chat_template_render_json(t, ctx, (int64_t)cJSON_GetNumberValue(
                                                                       cJSON_GetObjectItem(doc, "time")),
                                                           &got, NULL)
                             : -1;
                ft_log_set_level(FT_LOG_WARN);
                bool ok = want ? rc == 0 && strcmp(got, want) == 0 : rc != 0;
                total++;
                if (ft_chat_generic_prompt(&r, &caps)) {
                    /* Ours on purpose: llama.cpp no longer prompts for a format here. */
                    generic++;
                    /* (a template that rejects the conversation rejects it in llama.cpp too) */
                    CHECKF(rc == 0 ? strstr(got, "Respond in JSON format, either with `tool_call`") != NULL : !want,
                           "%s/%s", tname, name);
                } else {
                    same += ok;
                    CHECKF(ok, "%s/%s differs from llama.cpp (FT_TEMPLATE_VERBOSE=1 shows it)", tname, name);
                }
                if (!ok && !ft_chat_generic_prompt(&r, &caps) && getenv("FT_TEMPLATE_VERBOSE"))
                    printf("DIFF %s/%s\n--- freetoken:\n%s\n--- llama.cpp:\n%s\n", tname, name, got ? got : "(error)",
                           want ? want : "(error)");
                free(got);
                cJSON_Delete(ctx);
                ft_api_request_free(&r);
            }
        }
        ft_chat_template_free(t);
        free(src);
        cJSON_Delete(doc);
    }
    if (d)
        closedir(d);
    cJSON_Delete(scen);
    printf("%d of %d server prompts equal llama.cpp's; %d have the generic tool instructions instead\n", same,
           total, generic);
    CHECKF(total == 68 * 5, "%d cases", total);
}

/* A template that knows nothing of tools (Gemma's built-in) gets them in a
 * system message, and the history's call and result as JSON turns. */
static void test_generic_context(void) {
    struct ft_chat_template *t = NULL;
    CHECK(ft_chat_template_builtin("gemma", &t) == 0);
    struct ft_chat_tool_caps caps;
    ft_chat_tool_caps_probe(t, "<bos>", "<eos>", &caps);
    CHECK(caps.format == FT_TOOL_FORMAT_GENERIC && !caps.renders_tools && !caps.renders_tool_calls);
    struct ft_api_request r;
    struct ft_api_error err;
    const char *body =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": "
        "null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": "
        "\"get_weather\", \"arguments\": \"{\\\"location\\\":\\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", "
        "\"tool_call_id\": \"call_1\", \"content\": \"18C\"}], \"tools\": [" TOOL_W "], \"parallel_tool_calls\": false}";
    CHECK(parse_req(body, &r, &err) == 0);
    cJSON *ctx = ft_chat_context_build(&r, &caps, "<bos>", "<eos>", &err);
    char *got = NULL;
    CHECK(ctx && ft_chat_template_render_json(t, ctx, 0, &got, NULL) == 0);
    static const char want[] =
        "<bos><start_of_turn>user\n"
        "You can call any of the following tools to satisfy the user's requests: [\n"
        "  {\n"
        "    \"type\": \"function\",\n"
        "    \"function\": {\n"
        "      \"name\": \"get_weather\",\n"
        "      \"description\": \"\",\n"
        "      \"parameters\": {\n"
        "        \"type\": \"object\"\n"
        "      }\n"
        "    }\n"
        "  }\n"
        "]\n\n"
        "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to the "
        "user's request.\n"
        "To call a tool: {\"tool_call\": {\"name\": \"<tool name>\", \"arguments\": {<the arguments>}}}\n"
        "To answer: {\"response\": \"<your answer>\"}\n\n"
        "Weather?<end_of_turn>\n"
        "<start_of_turn>model\n"
        "{\n  \"tool_calls\": [\n    {\n      \"name\": \"get_weather\",\n      \"arguments\": {\n        "
        "\"location\": \"Paris\"\n      },\n      \"id\": \"call_1\"\n    }\n  ]\n}<end_of_turn>\n"
        "<start_of_turn>user\n"
        "{\n  \"tool_response\": {\n    \"tool\": \"\",\n    \"content\": \"18C\",\n    \"tool_call_id\": "
        "\"call_1\"\n  }\n}<end_of_turn>\n"
        "<start_of_turn>model\n";
    CHECKF(got && strcmp(got, want) == 0, "generic prompt:\n%s", got ? got : "(null)");
    free(got);
    cJSON_Delete(ctx);
    ft_api_request_free(&r);
    ft_chat_template_free(t);
}

/* ------------------------------------------------------------ answers */

static void test_answers(void) {
    struct ft_resp_ctx c = {FT_API_CHAT, "chatcmpl-1", 1700000000, "m", false};
    struct ft_request_metrics m = {0};
    m.prompt_tokens = 10;
    m.completion_tokens = 5;
    struct ft_tool_call call = {NULL, "get_weather", (char *)paris};
    struct ft_tool_parse p = {"", &call, 1};
    const char *ids[] = {"call_abc"};
    char *s = ft_resp_completion_tools(&c, &p, ids, NULL, &m, NULL);
    CHECKF(s && strcmp(s, "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":"
                          "\"m\",\"system_fingerprint\":\"freetoken\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                          "\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_abc\",\"type\":\"function\","
                          "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\":\\\"Paris\\\"}\"}}]"
                          ",\"refusal\":null},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],\"usage\":{"
                          "\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15,\"prompt_tokens_details\":"
                          "{\"cached_tokens\":0}}}") == 0,
           "%s", s);
    free(s);
    s = ft_resp_chunk_tool_call(&c, 0, "call_abc", "get_weather", "");
    CHECKF(s && strstr(s, "\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_abc\","
                          "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},"
                          "\"logprobs\":null,\"finish_reason\":null}]"),
           "%s", s);
    free(s);
    s = ft_resp_chunk_tool_call(&c, 1, NULL, NULL, paris);
    CHECKF(s && strstr(s, "\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":"
                          "\"{\\\"location\\\":\\\"Paris\\\"}\"}}]}"),
           "%s", s);
    free(s);
    s = ft_resp_chunk_finish_tools(&c);
    CHECKF(s && strstr(s, "\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\""), "%s", s);
    free(s);
}

/* ------------------------------------------------------------ forced calls */

#define TOOLS_WS                                                                                                  \
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "      \
    "\"properties\": {\"location\": {\"type\": \"string\", \"maxLength\": 8}, \"unit\": {\"$ref\": \"#/$defs/u\"}}, "  \
    "\"required\": [\"location\", \"unit\"], \"additionalProperties\": false, \"$defs\": {\"u\": {\"enum\": [\"c\", "  \
    "\"f\"]}}}}}, {\"type\": \"function\", \"function\": {\"name\": \"search\", \"parameters\": {\"type\": "          \
    "\"object\", \"properties\": {\"q\": {\"type\": \"integer\"}}, \"required\": [\"q\"]}}}]"

/* The grammar of a request in format f: each text accepted or rejected as
 * a whole, and each accepted one parses (the parser is separate code) into
 * the calls named in `calls` ("name,name" in order). */
struct forced_case {
    const char *text;
    bool ok;
    const char *calls;
};

static void check_forced(const struct ft_grammar_vocab *v, enum ft_tool_format f, const char *extra,
                         const struct forced_case *c, size_t n, int line) {
    char body[4096];
    snprintf(body, sizeof(body), "{\"messages\": [" MSG_USER "], \"tools\": " TOOLS_WS ", %s}", extra);
    struct ft_api_request r;
    struct ft_api_error err;
    CHECKF(parse_req(body, &r, &err) == 0, "line %d: %s", line, err.message);
    if (err.status)
        return;
    CHECKF(ft_api_tools_grammar(&r, f, &err) == 0 && r.grammar, "line %d: %s", line, err.message);
    struct ft_grammar_matcher *m = NULL;
    if (r.grammar && v)
        CHECK(ft_grammar_matcher_new(r.grammar, v, &m) == FT_OK);
    for (size_t i = 0; m && i < n; i++) {
        ft_grammar_matcher_reset(m);
        bool ok = ft_grammar_matcher_accept_bytes(m, c[i].text, strlen(c[i].text)) == FT_OK &&
                  ft_grammar_matcher_complete(m);
        CHECKF(ok == c[i].ok, "line %d, %s: '%s' should be %s", line, ft_tool_format_name(f), c[i].text,
               c[i].ok ? "accepted" : "rejected");
        if (!ok || !c[i].ok)
            continue;
        struct ft_tool_parse p;
        CHECK(ft_tool_calls_parse(f, c[i].text, strlen(c[i].text), (const char *const *)r.tool_names,
                                  (size_t)r.n_tools, r.parallel_tool_calls ? 0 : 1, &p) == 0);
        char got[256] = "";
        for (size_t j = 0; j < p.n_calls; j++)
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", j ? "," : "", p.calls[j].name);
        CHECKF(strcmp(got, c[i].calls) == 0 && !p.content[0], "line %d: '%s' parsed as calls '%s' content '%s'",
               line, c[i].text, got, p.content);
        ft_tool_parse_free(&p);
    }
    ft_grammar_matcher_free(m);
    ft_api_request_free(&r);
}

static void test_forced(void) {
    const char *dir = ft_test_shared_dir();
    char path[4096];
    struct ft_gguf *gg = NULL;
    struct ft_tokenizer *tok = NULL;
    struct ft_grammar_vocab *v = NULL;
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-llama-bpe.gguf", dir ? dir : ".");
    if (dir && ft_gguf_open(path, &gg) == FT_OK && ft_tokenizer_load(gg, &tok) == FT_OK)
        CHECK(ft_grammar_vocab_new(tok, &v) == FT_OK);
    ft_gguf_close(gg);
    if (!v)
        printf("no vocabulary (FT_SHARED_DIR): forced-call grammars compiled but not matched\n");

#define W(loc, unit) "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"" loc "\", \"unit\": \"" unit "\"}}"
#define S(q) "{\"name\": \"search\", \"arguments\": {\"q\": " q "}}"
    static const struct forced_case hermes[] = {
        {"<tool_call>\n" W("Paris", "c") "\n</tool_call>", true, "get_weather"},
        {"<tool_call>\n" W("Paris", "c") "\n</tool_call>\n<tool_call>\n" S("3") "\n</tool_call>", true,
         "get_weather,search"},
        {"<tool_call>\n" W("Paris", "k") "\n</tool_call>", false, NULL},         /* unit not in the $ref'd enum */
        {"<tool_call>\n" W("Amsterdam", "c") "\n</tool_call>", false, NULL},     /* maxLength 8 */
        {"<tool_call>\n" S("\"3\"") "\n</tool_call>", false, NULL},              /* q is an integer */
        {"<tool_call>\n{\"name\": \"delete\", \"arguments\": {}}\n</tool_call>", false, NULL},
        {"Sure! <tool_call>\n" W("Paris", "c") "\n</tool_call>", false, NULL},   /* forced: calls only */
        {"", false, NULL},
    };
    check_forced(v, FT_TOOL_FORMAT_HERMES, "\"tool_choice\": \"required\"", hermes, FT_ARRAY_LEN(hermes), __LINE__);
    static const struct forced_case named[] = {
        {"<tool_call>\n" S("3") "\n</tool_call>", true, "search"},
        {"<tool_call>\n" W("Paris", "c") "\n</tool_call>", false, NULL},
        {"<tool_call>\n" S("3") "\n</tool_call>\n<tool_call>\n" S("4") "\n</tool_call>", false, NULL}, /* one */
    };
    check_forced(v, FT_TOOL_FORMAT_HERMES,
                 "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"search\"}}, "
                 "\"parallel_tool_calls\": false",
                 named, FT_ARRAY_LEN(named), __LINE__);
    static const struct forced_case llama3[] = {
        {"{\"name\": \"search\", \"parameters\": {\"q\": 1}}", true, "search"},
        {"{\"name\": \"search\", \"parameters\": {\"q\": 1}}; {\"name\": \"search\", \"parameters\": {\"q\": 2}}", true,
         "search,search"},
        {S("1"), false, NULL}, /* llama3 writes "parameters" */
    };
    check_forced(v, FT_TOOL_FORMAT_LLAMA3, "\"tool_choice\": \"required\"", llama3, FT_ARRAY_LEN(llama3), __LINE__);
    static const struct forced_case mistral[] = {
        {"[TOOL_CALLS][" S("1") "]", true, "search"},
        {"[TOOL_CALLS][" S("1") ", " W("Rome", "f") "]", true, "search,get_weather"},
        {"[TOOL_CALLS][]", false, NULL},
        {S("1"), false, NULL},
    };
    check_forced(v, FT_TOOL_FORMAT_MISTRAL, "\"tool_choice\": \"required\"", mistral, FT_ARRAY_LEN(mistral), __LINE__);
    static const struct forced_case generic1[] = {
        {"{\"tool_call\": " S("1") "}", true, "search"},
        {"{\"tool_calls\": [" S("1") "]}", false, NULL}, /* parallel false: the single form */
        {"{\"response\": \"hi\"}", false, NULL},       /* forced: no answer in words */
    };
    check_forced(v, FT_TOOL_FORMAT_GENERIC, "\"tool_choice\": \"required\", \"parallel_tool_calls\": false", generic1,
                 FT_ARRAY_LEN(generic1), __LINE__);
    static const struct forced_case generic_n[] = {
        {"{\"tool_calls\": [" S("1") ", " W("Oslo", "c") "]}", true, "search,get_weather"},
        {"{\"tool_calls\": []}", false, NULL},
        {"{\"tool_call\": " S("1") "}", false, NULL},
    };
    check_forced(v, FT_TOOL_FORMAT_GENERIC, "\"tool_choice\": \"required\"", generic_n, FT_ARRAY_LEN(generic_n),
                 __LINE__);
    ft_grammar_vocab_free(v);
    ft_tokenizer_free(tok);
#undef W
#undef S

    /* strict under auto: a lazy grammar from the format's marker; generic
     * answers may be words ({"response"}) but calls validate */
    struct ft_api_request r;
    struct ft_api_error err;
    const char *strict = "{\"messages\": [" MSG_USER "], \"tools\": [{\"type\": \"function\", \"function\": "
                         "{\"name\": \"f\", \"strict\": true, \"parameters\": {\"type\": \"object\"}}}]}";
    static const struct {
        enum ft_tool_format f;
        const char *trigger;
        bool at_start;
    } lazy[] = {{FT_TOOL_FORMAT_HERMES, "<tool_call>", false},
                {FT_TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]", false},
                {FT_TOOL_FORMAT_LLAMA3, "{", true},
                {FT_TOOL_FORMAT_GENERIC, NULL, false}};
    for (size_t i = 0; i < FT_ARRAY_LEN(lazy); i++) {
        CHECK(parse_req(strict, &r, &err) == 0);
        CHECK(ft_api_tools_grammar(&r, lazy[i].f, &err) == 0 && r.grammar);
        CHECKF(lazy[i].trigger ? r.grammar_trigger && !strcmp(r.grammar_trigger, lazy[i].trigger) : !r.grammar_trigger,
               "%s trigger", ft_tool_format_name(lazy[i].f));
        CHECK(r.grammar_trigger_at_start == lazy[i].at_start && !strcmp(r.grammar_param, "tools"));
        ft_api_request_free(&r);
    }
    /* no strict, auto: no grammar at all */
    CHECK(parse_req("{\"messages\": [" MSG_USER "], \"tools\": " TOOLS_WS "}", &r, &err) == 0);
    CHECK(ft_api_tools_grammar(&r, FT_TOOL_FORMAT_HERMES, &err) == 0 && !r.grammar);
    ft_api_request_free(&r);

    /* refusals, each naming its field */
    static const struct {
        const char *extra;
        const char *tools;
        const char *param, *part;
    } bad[] = {
        {"\"tool_choice\": \"required\", \"response_format\": {\"type\": \"json_object\"}", TOOLS_WS,
         "response_format", "cannot be combined"},
        {"\"tool_choice\": \"required\", \"guided_regex\": \"a+\"", TOOLS_WS, "guided_regex", "cannot be combined"},
        {"\"grammar\": \"root ::= \\\"a\\\"\"",
         "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"strict\": true}}]", "grammar",
         "cannot be combined"},
        {"\"tool_choice\": \"auto\"",
         "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"strict\": true, \"parameters\": {\"type\": "
         "\"object\", \"properties\": {\"x\": {\"not\": {}}}}}}]",
         "tools[0].function.parameters", "unsupported JSON Schema keyword 'not'"},
        {"\"tool_choice\": \"required\"",
         "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"strict\": true, \"parameters\": {\"type\": "
         "\"string\"}}}]",
         "tools[0].function.parameters", "must describe a JSON object"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(bad); i++) {
        char body[2048];
        snprintf(body, sizeof(body), "{\"messages\": [" MSG_USER "], \"tools\": %s, %s}", bad[i].tools, bad[i].extra);
        int rc = parse_req(body, &r, &err);
        CHECKF(rc == 0, "bad[%zu] parse: %s", i, err.message);
        if (rc)
            continue;
        CHECKF(ft_api_tools_grammar(&r, FT_TOOL_FORMAT_HERMES, &err) == -1 && err.status == 400 &&
                   !strcmp(err.param, bad[i].param) && strstr(err.message, bad[i].part),
               "bad[%zu]: %d %s: %s", i, err.status, err.param, err.message);
        ft_api_request_free(&r);
    }
    /* a non-strict tool the compiler cannot take: any object, when forced */
    CHECK(parse_req("{\"messages\": [" MSG_USER "], \"tool_choice\": \"required\", \"tools\": [{\"type\": "
                    "\"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", "
                    "\"properties\": {\"x\": {\"not\": {}}}}}}]}",
                    &r, &err) == 0);
    CHECK(ft_api_tools_grammar(&r, FT_TOOL_FORMAT_HERMES, &err) == 0 && r.grammar);
    ft_api_request_free(&r);
}

int main(void) {
    test_hermes();
    test_llama3();
    test_mistral();
    test_generic();
    test_stream_timing();
    test_detect();
    test_requests();
    test_context_matches_llamacpp();
    test_caps_match_llamacpp();
    test_all_prompts_match_llamacpp();
    test_generic_context();
    test_answers();
    test_forced();
    return ft_test_finish("test_tool_calls");
}
