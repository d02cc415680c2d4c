/* Chat templates: turn a list of chat messages into the prompt text a model
 * was trained on, from the model's `tokenizer.chat_template` (a Jinja2
 * template stored in the GGUF) or from a built-in template chosen by name.
 *
 * The template is run by a small interpreter for the Jinja subset that real
 * chat templates use (engine/jinja_*.c), with the settings Hugging Face
 * transformers renders them with: trim_blocks and lstrip_blocks on, no
 * autoescaping, HF's `tojson` (ensure_ascii off, ", "/": " separators), and
 * the globals `raise_exception(msg)` and `strftime_now(fmt)` (local time).
 * Variables: `messages` (a list of {"role", "content"} mappings; a NULL
 * content is `none`), `add_generation_prompt`, `bos_token`, `eos_token`;
 * `tools` and everything else is undefined.
 *
 * Differences from Jinja that a template can observe are documented in
 * engine/text/jinja_eval.c (undefined values are lenient under `.`/`[]`, upper/lower
 * map ASCII only, integers are 64-bit).
 *
 * Hostile input: templates come from model files and messages from the
 * network. Parsing bounds nesting depth; rendering bounds output size
 * (16 MiB), scratch memory, loop iterations, evaluation steps and recursion
 * depth, and fails with FT_ERANGE when a bound is hit. No input crashes it.
 *
 * Thread safety: a parsed template is immutable; any number of threads may
 * render it at once.
 */
#ifndef FT_CHAT_TEMPLATE_H
#define FT_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

struct ft_chat_message {
    const char *role;    /* UTF-8, NUL-terminated: "system", "user", "assistant", ... */
    const char *content; /* UTF-8, NUL-terminated; NULL renders as Jinja `none` */
};

struct ft_chat_template;

/* Parse once at start-up. Errors (one log line each, with line and column):
 * FT_EFORMAT for syntax errors, FT_EUNSUPPORTED for a construct the
 * interpreter does not implement (`{% include %}`, an unknown filter, ...),
 * FT_ERANGE for nesting deeper than the parser allows (or a text over 1 MiB).
 * As in Jinja, names used inside `{% if %}` blocks and inline ifs (filters,
 * tests) and every method or function name are resolved when evaluated, so
 * a template whose unused branch calls something unsupported still parses;
 * a trial render at start-up (system + user message) surfaces the rest. */
int ft_chat_template_parse(const char *src, size_t len, struct ft_chat_template **out /* OUT */);

/* Built-in templates, for models whose GGUF carries none:
 *   "plain"  the contents only, separated by blank lines (base models)
 *   "gemma"  <start_of_turn>user\n...<end_of_turn>\n, assistant -> "model",
 *            the system prompt folded into the first user turn (Gemma 3's)
 *   "chatml" <|im_start|>role\n...<|im_end|>\n (Qwen 2/2.5/3 without tools)
 *   "llama3" <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
 *   "llama2" <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s> (Llama 2 chat)
 *   "mistral" <s> [INST] system\n\nuser [/INST] answer</s> (Mistral 7B v0.2 "v1")
 * Like the originals, they put bos_token at the start of the text: tokenize
 * the result without adding another BOS. FT_ENOENT for an unknown name. */
int ft_chat_template_builtin(const char *name, struct ft_chat_template **out /* OUT */);

/* The names ft_chat_template_builtin() knows, for help texts and errors. */
#define FT_CHAT_TEMPLATE_BUILTIN_NAMES "plain, gemma, chatml, llama3, llama2, mistral"

/* Whether `name` is one of FT_CHAT_TEMPLATE_BUILTIN_NAMES (false for NULL). */
bool ft_chat_template_builtin_exists(const char *name);

void ft_chat_template_free(struct ft_chat_template *t); /* accepts NULL */

/* Render `msgs` into the prompt text. *out is malloc'd and NUL-terminated
 * (the caller frees it); *out_len excludes the NUL. bos_token / eos_token may
 * be NULL (empty string).
 * Errors: FT_EINVAL when the template calls raise_exception(msg) (msg is
 * logged and is the text of ft_last_error()) or rejects the input in another
 * way (a type error such as adding a string to a number); FT_EUNSUPPORTED for
 * a method or function the interpreter does not implement; FT_ERANGE when a
 * resource bound is hit; FT_ENOMEM. */
int ft_chat_template_render(const struct ft_chat_template *t, const struct ft_chat_message *msgs, size_t n,
                            bool add_generation_prompt, const char *bos_token, const char *eos_token,
                            char **out /* OUT */, size_t *out_len /* OUT, may be NULL */);

/* The template's text (line ends normalized to \n), e.g. to tell which
 * tool-call format its model writes (engine/include/ft/tool_calls.h). */
const char *ft_chat_template_source(const struct ft_chat_template *t, size_t *len /* OUT */);

/* Render with the variables llama.cpp and Hugging Face pass: every member of
 * the JSON object `globals` becomes a variable of that name (`messages` with
 * `tool_calls` and `role: "tool"` entries, `tools` as a list of
 * {"type": "function", "function": {...}}, `add_generation_prompt`,
 * `bos_token`, ...). `now` is the time strftime_now() formats, in seconds
 * since the epoch (0: the current time). The JSON must outlive the call.
 * Errors as ft_chat_template_render(); FT_ERANGE also for a context nested
 * deeper than 64 levels or with a list longer than the render limit. */
int ft_chat_template_render_json(const struct ft_chat_template *t, const struct cJSON *globals, int64_t now,
                                 char **out /* OUT */, size_t *out_len /* OUT, may be NULL */);

/* ft_chat_template_render_json (current time) that logs nothing when the
 * template fails: for probes, where a rejection is the answer. */
int ft_chat_template_try_render_json(const struct ft_chat_template *t, const struct cJSON *globals,
                                     char **out /* OUT */);

#endif
