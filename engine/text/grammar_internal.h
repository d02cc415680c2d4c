/* The grammar's representation and the builder that GBNF, JSON Schema and
 * regex compilers share (engine/text/grammar*.c, json_schema.c).
 *
 * A grammar is rules; a rule is alternatives; an alternative is a sequence of
 * elements, each either a byte class (a 256-bit set) or a reference to a
 * rule. Flattened, every rule is its alternatives' elements separated by
 * GE_ALT and closed by GE_END, so a position (an index into elems) whose
 * element is GE_ALT or GE_END is the end of an alternative. Unicode is
 * compiled to UTF-8 byte sequences, so matching is byte by byte. */
#ifndef FT_GRAMMAR_INTERNAL_H
#define FT_GRAMMAR_INTERNAL_H

#include "ft/grammar.h"

#include <stdbool.h>
#include <stdint.h>

/* element = kind in the top 4 bits, argument below */
#define GE_KIND(e) ((uint32_t)(e) >> 28)
#define GE_ARG(e) ((int32_t)((uint32_t)(e) & 0x0fffffffu))
enum { GE_END = 0, GE_CHARS = 1, GE_RULE = 2, GE_ALT = 3 };
#define GE_MAKE(kind, arg) (((uint32_t)(kind) << 28) | (uint32_t)(arg))

struct ft_grammar_set {
    uint32_t w[8];
};

static inline bool gset_has(const struct ft_grammar_set *s, unsigned b) { return (s->w[b >> 5] >> (b & 31)) & 1u; }
static inline void gset_add(struct ft_grammar_set *s, unsigned b) { s->w[b >> 5] |= 1u << (b & 31); }
static inline void gset_add_range(struct ft_grammar_set *s, unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi; b++)
        gset_add(s, b);
}

struct ft_grammar {
    uint32_t *elems;   /* all rules, flattened */
    int32_t n_elems;
    int32_t *alt_start; /* start position of every alternative */
    int32_t *rule_alt;  /* rule r's alternatives: alt_start[rule_alt[r] .. rule_alt[r+1]) */
    int32_t n_rules;
    int32_t root;
    struct ft_grammar_set *sets;
    int32_t n_sets;
};

/* The builder: rules grow independently (a compiler may open a helper rule
 * while it is in the middle of another), then ft_gb_finish flattens them.
 * The first error sticks: later calls do nothing and return -1, so compilers
 * check once at the end or wherever convenient. */
struct gb_rule {
    uint32_t *el;
    int32_t n, cap;
    char *name; /* GBNF names (NULL for generated rules) */
    bool defined;
};

struct gbuild {
    struct gb_rule *rules;
    int32_t n_rules, cap_rules;
    struct ft_grammar_set *sets;
    int32_t n_sets, cap_sets;
    int32_t *set_hash; /* open addressing over sets, -1 empty */
    int32_t set_hash_cap;
    size_t n_elems;
    int rc;            /* first error (FT_E*) */
    char *err;         /* caller's message buffer */
    size_t err_cap;
};

void gb_init(struct gbuild *b, char *err, size_t err_cap);
void gb_free(struct gbuild *b);
/* Sets b->rc (if not set yet) and the message; returns -1. */
int gb_fail(struct gbuild *b, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int32_t gb_rule(struct gbuild *b, const char *name); /* a new rule with one empty alternative */
void gb_alt(struct gbuild *b, int32_t rule);          /* start the next alternative */
void gb_set(struct gbuild *b, int32_t rule, const struct ft_grammar_set *s);
void gb_byte(struct gbuild *b, int32_t rule, unsigned char c);
void gb_lit(struct gbuild *b, int32_t rule, const char *s, size_t n);
void gb_ref(struct gbuild *b, int32_t rule, int32_t target);
/* Append the code point range [lo, hi] as UTF-8 alternatives: a reference to
 * a new rule (or one byte class when every code point is ASCII). */
void gb_utf8_range(struct gbuild *b, int32_t rule, const uint32_t *ranges, int n_ranges);
/* rule ::= x{min,max} as a new rule (max < 0: unbounded); x is a rule. */
int32_t gb_repeat(struct gbuild *b, int32_t x, int32_t min, int32_t max);
/* Flatten with `root` as the start rule; checks undefined rules (GBNF) and
 * left recursion. Frees nothing: the caller frees b. */
int gb_finish(struct gbuild *b, int32_t root, struct ft_grammar **out);

/* Regex subset (JSON Schema "pattern") as the content of a JSON string:
 * appends to `rule` a reference to the compiled rule. */
int ft_grammar_regex(struct gbuild *b, int32_t rule, const char *re, size_t len);

/* The shared JSON pieces: generic value, string, number, whitespace. */
struct gjson {
    int32_t ws, value, object, array, string, number, integer, str_char;
};
void gjson_init(struct gbuild *b, struct gjson *j);

#endif
