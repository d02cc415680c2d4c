/* Constrained decoding: a context-free grammar over bytes, compiled from a
 * JSON Schema, from llama.cpp's GBNF, or the built-in "any JSON object", and
 * a matcher that turns the grammar's current state into a mask over the
 * vocabulary while sampling.
 *
 * How the pieces fit (the design of llama.cpp's grammar matcher made fast the
 * way llguidance and XGrammar do it):
 *   - struct ft_grammar: immutable, model-independent; rules of alternatives
 *     of byte-class and rule-reference elements. Compiling bounds every size
 *     and rejects left recursion, so matching can never loop.
 *   - struct ft_grammar_vocab: every token's bytes in a trie (preorder arrays,
 *     shared prefixes), built once per tokenizer. A rejected prefix prunes the
 *     whole subtree of tokens that start with it.
 *   - struct ft_grammar_matcher: per request. Its state is a set of stacks
 *     (a pushdown automaton); stacks are hash-consed so equal stacks are equal
 *     ids, one byte step of a stack is memoized, and the mask of a whole state
 *     is cached, so revisiting a state (the inside of a JSON string after
 *     every token) costs a lookup.
 *
 * End of generation: an end-of-generation token is allowed exactly when the
 * bytes so far form a complete sentence; when nothing can follow
 * (ft_grammar_matcher_done) the caller stops.
 *
 * Errors follow ft/common.h; compile errors also fill a caller buffer with a
 * message that names the offending keyword, rule or position. */
#ifndef FT_GRAMMAR_H
#define FT_GRAMMAR_H

#include "ft/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits on what a client may send (checked while compiling). */
#define FT_GRAMMAR_MAX_SOURCE (1u << 20)   /* bytes of GBNF / JSON Schema text */
#define FT_GRAMMAR_MAX_ELEMS (1u << 20)    /* elements of all rules */
#define FT_GRAMMAR_MAX_RULES (1u << 17)
#define FT_GRAMMAR_MAX_DEPTH 64            /* nesting of schemas, groups, regexes */
#define FT_GRAMMAR_MAX_REPEAT 4096         /* {m,n}, minLength, maxItems, ... */

struct ft_grammar;

/* GBNF as llama.cpp writes it: `name ::= alternatives`, "literals",
 * [classes] with ranges and ^, (groups), postfix * + ? {m} {m,} {m,n},
 * # comments; the start rule is `root`. */
int ft_grammar_from_gbnf(const char *src, size_t len, struct ft_grammar **out, char *err, size_t err_cap);

/* A JSON Schema (the text of one JSON value). Unsupported keywords are
 * FT_EUNSUPPORTED with the keyword named in err. */
int ft_grammar_from_json_schema(const char *schema, size_t len, struct ft_grammar **out, char *err, size_t err_cap);

/* The same between fixed text, for forcing a call in a model's own format:
 * prefix "<tool_call>\n", a schema of {"name", "arguments"} objects (anyOf
 * over the tools), suffix "\n</tool_call>". prefix/suffix may be NULL. */
int ft_grammar_from_json_schema_framed(const char *schema, size_t len, const char *prefix, const char *suffix,
                                       struct ft_grammar **out, char *err, size_t err_cap);

/* Several documents of one schema in fixed text: `prefix`, then 1 to
 * max_items (0: any number, else at most FT_GRAMMAR_MAX_REPEAT) items
 * `open` SCHEMA `close` separated by `sep`, then `suffix`. Every string may
 * be NULL or "". Hermes' parallel calls are open "<tool_call>\n", close
 * "\n</tool_call>", sep "\n"; Mistral's prefix "[TOOL_CALLS][", sep ", ",
 * suffix "]". */
struct ft_grammar_frame {
    const char *prefix, *open, *close, *sep, *suffix;
    int32_t max_items;
};
int ft_grammar_from_json_schema_frame(const char *schema, size_t len, const struct ft_grammar_frame *f,
                                      struct ft_grammar **out, char *err, size_t err_cap);

/* Exactly one of n strings (vLLM's guided_choice): 1 to FT_GRAMMAR_MAX_CHOICES
 * non-empty strings of at most FT_GRAMMAR_MAX_SOURCE bytes in all. */
#define FT_GRAMMAR_MAX_CHOICES 4096
int ft_grammar_from_choices(const char *const *choices, size_t n, struct ft_grammar **out, char *err,
                            size_t err_cap);

/* Text that matches a regular expression as a whole (vLLM's guided_regex):
 * the subset JSON Schema patterns have (grammar_regex.c), characters as
 * themselves rather than JSON-escaped, anchored at both ends whether or not
 * it starts with ^ and ends with $. */
int ft_grammar_from_regex(const char *re, size_t len, struct ft_grammar **out, char *err, size_t err_cap);

/* Any JSON object (response_format {"type": "json_object"}). */
int ft_grammar_json_object(struct ft_grammar **out);

void ft_grammar_free(struct ft_grammar *g); /* accepts NULL */

/* Elements and rules after compiling (for logs and tests). */
size_t ft_grammar_n_rules(const struct ft_grammar *g);
size_t ft_grammar_n_elems(const struct ft_grammar *g);

/* The token trie of a tokenizer. Control tokens and tokens that decode to no
 * bytes are never allowed by a grammar (end-of-generation ids excepted). */
struct ft_grammar_vocab;
int ft_grammar_vocab_new(const struct ft_tokenizer *tok, struct ft_grammar_vocab **out);
void ft_grammar_vocab_free(struct ft_grammar_vocab *v); /* accepts NULL */
int32_t ft_grammar_vocab_n_tokens(const struct ft_grammar_vocab *v);
size_t ft_grammar_vocab_n_nodes(const struct ft_grammar_vocab *v);
size_t ft_grammar_vocab_bytes(const struct ft_grammar_vocab *v); /* memory held */

/* A matcher borrows g and v: both must outlive it. */
struct ft_grammar_matcher;
int ft_grammar_matcher_new(const struct ft_grammar *g, const struct ft_grammar_vocab *v,
                           struct ft_grammar_matcher **out);
void ft_grammar_matcher_free(struct ft_grammar_matcher *m); /* accepts NULL */
const struct ft_grammar_vocab *ft_grammar_matcher_vocab(const struct ft_grammar_matcher *m);

/* The allowed tokens of the current state as a bitset (bit i of word i/32),
 * ceil(n_vocab / 32) words, valid until the next call on m. *n_allowed
 * (may be NULL) counts them; 0 means nothing can follow. FT_ERANGE if the
 * grammar is too ambiguous (more than a bounded number of parses at once). */
int ft_grammar_matcher_mask(struct ft_grammar_matcher *m, const uint32_t **bits, int32_t *n_allowed);

/* Set the logits of disallowed tokens to -INFINITY (n_vocab floats). */
int ft_grammar_matcher_apply(struct ft_grammar_matcher *m, float *logits, int32_t *n_allowed);

/* Advance by a sampled token; FT_EINVAL if the grammar does not allow it
 * (the state is then unchanged). An end-of-generation token is accepted
 * when the sentence is complete. */
int ft_grammar_matcher_accept_token(struct ft_grammar_matcher *m, int32_t id);
/* Advance by raw bytes (tests, forced prefixes); FT_EINVAL if rejected. */
int ft_grammar_matcher_accept_bytes(struct ft_grammar_matcher *m, const char *s, size_t n);
/* The bytes so far form a complete sentence. */
bool ft_grammar_matcher_complete(const struct ft_grammar_matcher *m);
/* Complete and nothing more may follow: generation must stop. */
bool ft_grammar_matcher_done(const struct ft_grammar_matcher *m);
/* Back to the start state (keeps the caches). */
void ft_grammar_matcher_reset(struct ft_grammar_matcher *m);

/* Work counters for benchmarks. */
struct ft_grammar_stats {
    uint64_t masks;        /* ft_grammar_matcher_mask calls */
    uint64_t mask_hits;    /* answered from the per-state cache */
    uint64_t nodes_walked; /* trie nodes visited by cache misses */
    uint64_t mask_ns;      /* time in ft_grammar_matcher_mask */
};
void ft_grammar_matcher_stats(const struct ft_grammar_matcher *m, struct ft_grammar_stats *out);

#endif
