/* Reasoning text in a model's answer: telling the thinking apart from the
 * answer, as llama-server and vLLM return it (`reasoning_content` beside
 * `content`).
 *
 * Syntaxes (chosen from the chat template's source, as llama.cpp does):
 *   think    <think>REASONING</think>CONTENT (Qwen3, QwQ, DeepSeek R1 and
 *            their distills, ...). The opening tag may be in the prompt
 *            (QwQ's and R1's generation prompt ends with "<think>\n"), so the
 *            answer starts inside the reasoning. Whitespace around the tags
 *            and around the reasoning is dropped; reasoning that is only
 *            whitespace (Qwen3's "<think>\n\n</think>" with thinking off) is
 *            none; an answer cut inside the reasoning is all reasoning; a
 *            "<think>" after other text is content.
 *   harmony  gpt-oss: messages <|channel|>C<|message|>BODY<|end|>, each
 *            after <|start|>assistant but the first (the generation prompt
 *            wrote it). The analysis channel is reasoning; final and
 *            commentary without a recipient are content; a header with
 *            " to=functions.NAME" (before or after the channel, with an
 *            optional " <|constrain|>json") is a tool call whose body is the
 *            arguments, ended by <|call|>. Text that does not start with a
 *            header is content as written.
 *
 * The parser is streaming: it takes the answer in pieces of any size (a
 * marker may be split across pieces) and gives back, for each piece, the
 * reasoning and the content that are certain by then; it holds back only
 * what may be the start of a marker or whitespace it may have to drop.
 * Feeding a whole answer at once gives the same text as feeding it byte by
 * byte, so a streamed answer and a non-streamed one agree.
 *
 * With extraction off (reasoning_format "none") the think syntax passes the
 * text through unchanged; harmony keeps the analysis in the content with its
 * markers (<|channel|>analysis<|message|>...<|end|>), as llama-server does. */
#ifndef FT_REASONING_H
#define FT_REASONING_H

#include <stdbool.h>
#include <stddef.h>

enum ft_reasoning_syntax {
    FT_REASONING_SYNTAX_NONE,
    FT_REASONING_SYNTAX_THINK,
    FT_REASONING_SYNTAX_HARMONY,
};

/* llama-server's reasoning_format values (deepseek-legacy is not offered). */
enum ft_reasoning_format {
    FT_REASONING_FORMAT_AUTO,     /* separate when the template has a syntax (the default) */
    FT_REASONING_FORMAT_NONE,     /* everything stays in content */
    FT_REASONING_FORMAT_DEEPSEEK, /* separate (same as auto here) */
};

/* The syntax of a chat template's source (never fails: none when neither
 * marker appears). */
enum ft_reasoning_syntax ft_reasoning_syntax_detect(const char *src, size_t len);
const char *ft_reasoning_syntax_name(enum ft_reasoning_syntax s); /* "none", "think", "harmony" */
/* "none", "auto", "deepseek" → 0 and *out; anything else FT_EINVAL. */
int ft_reasoning_format_parse(const char *name, enum ft_reasoning_format *out /* OUT */);
const char *ft_reasoning_format_name(enum ft_reasoning_format f);
/* Whether a rendered prompt leaves the answer inside the reasoning: it ends
 * with "<think>" and optional whitespace (think), or with
 * "<|channel|>analysis<|message|>" (harmony). */
bool ft_reasoning_prompt_opens(enum ft_reasoning_syntax s, const char *prompt, size_t len);

/* A harmony tool call as the model wrote it. */
struct ft_reasoning_call {
    char *name;      /* after "functions." */
    char *arguments; /* the message body, whitespace trimmed (not validated here) */
};

/* A growing byte string (owned by the parser). */
struct ft_reasoning_buf {
    char *s;
    size_t n, cap;
};

struct ft_reasoning_parser {
    enum ft_reasoning_syntax syntax;
    bool extract; /* false: reasoning_format "none" */
    int state;
    struct ft_reasoning_buf hold;          /* text not decided yet */
    struct ft_reasoning_buf reasoning, content; /* what the last call released */
    struct ft_reasoning_buf call_name;     /* harmony: the call being read */
    struct ft_reasoning_call *calls;       /* harmony: the calls read so far */
    size_t n_calls, cap_calls;
    size_t reasoning_total;                /* bytes of reasoning released in all */
};

/* starts_in_reasoning: ft_reasoning_prompt_opens() of the prompt. A parser
 * with syntax NONE passes everything through as content. */
void ft_reasoning_init(struct ft_reasoning_parser *p, enum ft_reasoning_syntax syntax, bool extract,
                       bool starts_in_reasoning);
/* Feed a piece of the answer. On return p->reasoning and p->content hold
 * what this piece released (either may be empty; valid until the next
 * call). 0 or FT_ENOMEM. */
int ft_reasoning_feed(struct ft_reasoning_parser *p, const char *text, size_t len);
/* The answer ended: release what was held (p->reasoning, p->content as
 * above) and close an unterminated harmony call. 0 or FT_ENOMEM. */
int ft_reasoning_finish(struct ft_reasoning_parser *p);
void ft_reasoning_free(struct ft_reasoning_parser *p); /* accepts a zeroed struct */

#endif
