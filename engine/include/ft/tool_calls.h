/* Tool calls in a model's text: which format a chat template's model writes
 * them in, and turning the generated text back into OpenAI tool calls.
 *
 * Formats (chosen from the chat template's source, as llama.cpp does):
 *   hermes   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, any
 *            number of them, after optional text (Qwen 2.5/3, QwQ, Hermes 2/3)
 *   llama3   {"name": ..., "parameters": {...}}, optionally after
 *            <|python_tag|>, several separated by ';' (Llama 3.1/3.2/3.3)
 *   mistral  [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}, ...]
 *            (Mistral Nemo, v0.3) or [TOOL_CALLS]name[ARGS]{...} (Small 3.2,
 *            Devstral, Ministral)
 *   generic  the whole answer is {"tool_call": {"name", "arguments"}},
 *            {"tool_calls": [...]} or {"response": "..."}: llama.cpp's
 *            format for templates that do not describe tools themselves; the
 *            server tells the model about it in a system message.
 *
 * The parser never invents a call: text that is not exactly a well-formed
 * call of an offered tool (an unknown name, arguments that are not a JSON
 * object, an unclosed block) stays content. Forced and strict calls
 * (tool_choice "required" or a named function, strict: true) are written
 * by the model under a grammar built from the tools' parameter schemas in
 * the format below (http/tool_request.c, ft_api_tools_grammar); the parser
 * then reads them unchanged.
 *
 * Streaming: struct ft_tool_stream passes content through as it arrives and
 * holds back only text that may be the start of a call (a partial
 * "<tool_call>" at the end, or an answer that opens with "{" / a marker in
 * the start-anchored formats); ft_tool_stream_finish() parses what it held. */
#ifndef FT_TOOL_CALLS_H
#define FT_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>

enum ft_tool_format {
    FT_TOOL_FORMAT_GENERIC,
    FT_TOOL_FORMAT_HERMES,
    FT_TOOL_FORMAT_LLAMA3,
    FT_TOOL_FORMAT_MISTRAL,
};

/* The format for a chat template's source text (never fails: generic when
 * nothing else matches). */
enum ft_tool_format ft_tool_format_detect(const char *src, size_t len);
const char *ft_tool_format_name(enum ft_tool_format f); /* "hermes", ... */

struct ft_tool_call {
    char *id;        /* the model's own id (mistral) or NULL: the server assigns one */
    char *name;      /* one of the offered names */
    char *arguments; /* a JSON object, compact */
};

struct ft_tool_parse {
    char *content; /* malloc'd, may be "" (never NULL after a successful parse) */
    struct ft_tool_call *calls;
    size_t n_calls;
};

/* Parse a whole answer. names[0..n_names) are the tools the model may call;
 * max_calls > 0 keeps at most that many (parallel_tool_calls false: 1), and
 * a text with more calls than that is content. 0 or FT_ENOMEM. */
int ft_tool_calls_parse(enum ft_tool_format f, const char *text, size_t len, const char *const *names,
                        size_t n_names, size_t max_calls, struct ft_tool_parse *out /* OUT */);
void ft_tool_parse_free(struct ft_tool_parse *p); /* accepts a zeroed struct */

struct ft_tool_stream {
    enum ft_tool_format format;
    char *buf; /* text held back */
    size_t n, cap;
    bool holding; /* a call may have started: hold everything to the end */
    bool passing; /* start-anchored formats: the answer is plain content */
};

void ft_tool_stream_init(struct ft_tool_stream *s, enum ft_tool_format f);
/* Feed a piece of generated text. *emit (malloc'd, may be empty, NULL on
 * FT_ENOMEM) is the content that can be sent now. */
int ft_tool_stream_feed(struct ft_tool_stream *s, const char *text, size_t len, char **emit /* OUT */);
/* At the end: parse what was held. out->content is the content not sent
 * yet. Same arguments as ft_tool_calls_parse. */
int ft_tool_stream_finish(struct ft_tool_stream *s, const char *const *names, size_t n_names, size_t max_calls,
                          struct ft_tool_parse *out /* OUT */);
void ft_tool_stream_free(struct ft_tool_stream *s);

#endif
