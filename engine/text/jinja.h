/* Internal interface of the Jinja-subset interpreter behind chat_template.c.
 *
 *   jinja_lex.c    source text -> tokens (whitespace control happens here)
 *   jinja_parse.c  tokens -> statement/expression tree (names of filters,
 *                  tests and methods are resolved and checked here, so an
 *                  unsupported construct fails at parse time)
 *   jinja_value.c  arena, values, str()/repr()/tojson, equality, ordering
 *   jinja_eval.c   the tree walker: scopes, statements, expressions, and the
 *                  resource bounds
 *   jinja_ops.c    what the walker and the built-ins share: errors and
 *                  allocation in a render, arguments, attributes, items,
 *                  slices, the operators
 *   jinja_builtins.c  tests, filters, methods, global functions
 * (jinja_render.h: the render state and the interface of the last three).
 *
 * Memory: a parsed template owns one arena (tree nodes, unescaped string
 * literals, the normalized source). A render owns another arena for every
 * value it creates; values are plain structs that point into the template,
 * the caller's messages or the render arena, so nothing is reference-counted
 * and everything is freed at once when the render ends. Dicts are immutable
 * once built (as in HF's ImmutableSandboxedEnvironment), except namespaces,
 * whose attributes `{% set ns.x = ... %}` may change; lists grow through
 * list.append() and shrink through list.pop(), which llama.cpp's engine
 * allows and Kimi K2's template uses.
 *
 * Symbols are prefixed ftj_ (FreeToken Jinja).
 */
#ifndef FT_ENGINE_JINJA_H
#define FT_ENGINE_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- limits */

struct ftj_limits {
    size_t max_output;       /* bytes of rendered text, also of any captured block */
    size_t max_memory;       /* bytes of render-time scratch memory */
    uint64_t max_steps;      /* statement + expression evaluations per render */
    uint64_t max_iterations; /* loop iterations + macro calls per render */
    int max_depth;           /* nested evaluation depth (bounds C recursion) */
    size_t max_list;         /* elements of any one list built at render time */
};

extern const struct ftj_limits ftj_default_limits;

/* In the parser and the renderer: return the FT_E* code of x when it fails. */
#define TRY(x)                 \
    do {                       \
        int rc_ = (x);         \
        if (rc_)               \
            return rc_;        \
    } while (0)

#define FTJ_MAX_PARSE_DEPTH 100 /* nesting of expressions and blocks in the source */
#define FTJ_MAX_DATA_DEPTH 64   /* nesting of lists/dicts printed, compared or serialized */

/* ----------------------------------------------------------------- arena */

struct ftj_chunk;
struct ftj_arena {
    struct ftj_chunk *cur;
    size_t total; /* bytes held in chunks */
    size_t limit; /* 0 = unlimited */
    bool over_limit; /* the last failed allocation hit the limit (not malloc) */
};
struct ftj_mark {
    struct ftj_chunk *cur;
    size_t used;
    size_t total;
};

void ftj_arena_init(struct ftj_arena *a, size_t limit);
void ftj_arena_free(struct ftj_arena *a);
/* 16-byte aligned; NULL when the limit is hit or malloc fails. */
void *ftj_alloc(struct ftj_arena *a, size_t n);
void *ftj_alloc_array(struct ftj_arena *a, size_t n, size_t size);
/* Release everything allocated after `m` (which must come from this arena). */
struct ftj_mark ftj_arena_mark(const struct ftj_arena *a);
void ftj_arena_release(struct ftj_arena *a, struct ftj_mark m);

/* -------------------------------------------------- bounded output buffer */

struct ftj_buf {
    char *p; /* malloc'd */
    size_t n, cap;
    size_t limit;
};
/* 0, FT_ERANGE (limit) or FT_ENOMEM. */
int ftj_buf_put(struct ftj_buf *b, const char *s, size_t n);
int ftj_buf_putc(struct ftj_buf *b, char c);
void ftj_buf_free(struct ftj_buf *b);

/* ---------------------------------------------------------------- values */

enum ftj_type {
    FTJ_UNDEF,  /* u.s: the name that was looked up (for messages), may be empty */
    FTJ_NONE,
    FTJ_BOOL,
    FTJ_INT,
    FTJ_FLOAT,
    FTJ_STR,
    FTJ_LIST,   /* list or tuple */
    FTJ_DICT,   /* mapping with insertion order */
    FTJ_NS,     /* namespace(): a dict whose attributes can be set */
    FTJ_LOOP,   /* the `loop` variable of a for loop */
    FTJ_MACRO,
    FTJ_FUNC,   /* a global function: range, namespace, raise_exception, ... */
};

struct ftj_str {
    const char *p;
    size_t n;
};

struct ftj_list;
struct ftj_dict;
struct ftj_loop;
struct ftj_stmt;

struct ftj_val {
    uint8_t type;
    union {
        bool b;
        int64_t i;
        double f;
        struct ftj_str s;
        struct ftj_list *list;
        struct ftj_dict *dict;
        struct ftj_loop *loop;
        const struct ftj_stmt *macro;
        int func;
    } u;
};

struct ftj_list {
    size_t n;
    size_t cap; /* slots in v list.append() may fill in place (0: exactly n); v belongs to this list alone */
    bool tuple;
    struct ftj_val *v;
};

struct ftj_dict {
    size_t n, cap;
    struct ftj_val *k, *v;
};

struct ftj_loop {
    int64_t index0, length;
    struct ftj_val prev, next; /* FTJ_UNDEF at the ends */
};

enum ftj_func {
    FTJ_F_RANGE,
    FTJ_F_NAMESPACE,
    FTJ_F_DICT,
    FTJ_F_RAISE,
    FTJ_F_STRFTIME,
};

static inline struct ftj_val ftj_undef(void) { struct ftj_val v = {.type = FTJ_UNDEF}; return v; }
static inline struct ftj_val ftj_none(void) { struct ftj_val v = {.type = FTJ_NONE}; return v; }
static inline struct ftj_val ftj_bool(bool b) { struct ftj_val v = {.type = FTJ_BOOL, .u.b = b}; return v; }
static inline struct ftj_val ftj_int(int64_t i) { struct ftj_val v = {.type = FTJ_INT, .u.i = i}; return v; }
static inline struct ftj_val ftj_float(double f) { struct ftj_val v = {.type = FTJ_FLOAT, .u.f = f}; return v; }
static inline struct ftj_val ftj_strv(const char *p, size_t n) {
    struct ftj_val v = {.type = FTJ_STR, .u.s = {p, n}};
    return v;
}

/* Containers built in an arena. NULL on allocation failure. */
struct ftj_list *ftj_list_new(struct ftj_arena *a, size_t n, bool tuple);
struct ftj_dict *ftj_dict_new(struct ftj_arena *a, size_t cap);
/* Insert or replace (keys compared with ftj_equal). 0 or FT_ENOMEM. */
int ftj_dict_set(struct ftj_arena *a, struct ftj_dict *d, struct ftj_val k, struct ftj_val v);
/* NULL if absent. */
struct ftj_val *ftj_dict_get(const struct ftj_dict *d, struct ftj_val k);
struct ftj_val *ftj_dict_get_str(const struct ftj_dict *d, const char *p, size_t n);

bool ftj_truthy(struct ftj_val v);
const char *ftj_type_name(struct ftj_val v);
/* Python `==`; data nested deeper than FTJ_MAX_DATA_DEPTH compares unequal. */
bool ftj_equal(struct ftj_val a, struct ftj_val b);
/* Python ordering for sort/min/max/<: -1, 0, 1 in *out; FT_EINVAL if the
 * types cannot be ordered. */
int ftj_compare(struct ftj_val a, struct ftj_val b, int *out /* OUT */);

/* str(v) as Jinja prints it. */
int ftj_write_str(struct ftj_buf *b, struct ftj_val v);
/* repr(v), as str() of a list shows its items. */
int ftj_write_repr(struct ftj_buf *b, struct ftj_val v, int depth);
/* HF's tojson is json.dumps(v, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False); these are its arguments. */
struct ftj_json_opts {
    int indent;           /* < 0: None (one line) */
    bool sort_keys;
    bool ensure_ascii;    /* escape non-ASCII as \uXXXX */
    struct ftj_str item_sep, key_sep; /* p == NULL: json.dumps defaults */
};
/* FT_EINVAL for values JSON cannot hold (undefined, macros, ...). */
int ftj_write_json(struct ftj_buf *b, struct ftj_val v, const struct ftj_json_opts *o, int depth);
/* Python float repr (shortest round-trip, "1e+16", "0.0001", "1.0"). */
int ftj_format_float(char *out, size_t cap, double f);

/* UTF-8: number of code points; byte offset of code point i (i <= count). */
size_t ftj_utf8_count(const char *p, size_t n);
size_t ftj_utf8_offset(const char *p, size_t n, size_t i);
size_t ftj_utf8_next(const char *p, size_t n, size_t off); /* offset of the next code point */
/* Code point at p[*off], advancing *off; a malformed sequence yields U+FFFD. */
uint32_t ftj_utf8_decode(const char *p, size_t n, size_t *off);

/* ---------------------------------------------------------------- tokens */

enum ftj_tok {
    FTJ_TK_EOF,
    FTJ_TK_TEXT,
    FTJ_TK_VAR_BEGIN,
    FTJ_TK_VAR_END,
    FTJ_TK_BLOCK_BEGIN,
    FTJ_TK_BLOCK_END,
    FTJ_TK_NAME,
    FTJ_TK_STRING, /* p/n: the unescaped value */
    FTJ_TK_INT,
    FTJ_TK_FLOAT,
    FTJ_TK_OP,
};

enum ftj_op {
    FTJ_OP_NONE,
    FTJ_OP_ADD, FTJ_OP_SUB, FTJ_OP_MUL, FTJ_OP_DIV, FTJ_OP_FLOORDIV, FTJ_OP_MOD, FTJ_OP_POW,
    FTJ_OP_TILDE,
    FTJ_OP_EQ, FTJ_OP_NE, FTJ_OP_LT, FTJ_OP_LE, FTJ_OP_GT, FTJ_OP_GE,
    FTJ_OP_IN, FTJ_OP_NOTIN, /* only as comparison operators in the tree */
    FTJ_OP_ASSIGN, FTJ_OP_DOT, FTJ_OP_COMMA, FTJ_OP_COLON, FTJ_OP_PIPE,
    FTJ_OP_LPAREN, FTJ_OP_RPAREN, FTJ_OP_LBRACKET, FTJ_OP_RBRACKET, FTJ_OP_LBRACE, FTJ_OP_RBRACE,
};

struct ftj_token {
    uint8_t type;
    uint8_t op;
    size_t off; /* byte offset in the normalized source, for line/column */
    const char *p;
    size_t n;
    int64_t i;
    double f;
};

struct ftj_lex_opts {
    bool trim_blocks, lstrip_blocks, keep_trailing_newline;
};

/* The template-owned state the lexer and the parser share. */
struct ftj_template {
    struct ftj_arena arena;
    const char *src; /* normalized: \r\n and \r -> \n, trailing newline dropped */
    size_t src_len;
    struct ftj_stmt *body;
};

/* Tokenize t->src. *toks is malloc'd (the caller frees it) and ends with
 * FTJ_TK_EOF. Errors are logged with line/column. */
int ftj_lex(struct ftj_template *t, const struct ftj_lex_opts *o, struct ftj_token **toks /* OUT */,
            size_t *ntoks /* OUT */);

/* 1-based line and column of byte offset `off` in the normalized source. */
void ftj_position(const struct ftj_template *t, size_t off, int *line, int *col);

/* ------------------------------------------------------------------ tree */

enum ftj_expr_kind {
    FTJ_E_LIT,    /* lit */
    FTJ_E_NAME,   /* name */
    FTJ_E_LIST,   /* args */
    FTJ_E_TUPLE,  /* args */
    FTJ_E_DICT,   /* args: keys, kwvals: values (nargs == nkw) */
    FTJ_E_ATTR,   /* a.name */
    FTJ_E_INDEX,  /* a[b] */
    FTJ_E_SLICE,  /* a[b:c:d], each of b/c/d may be NULL */
    FTJ_E_CALL,   /* a(args, kw) ; id = method id when a is FTJ_E_ATTR */
    FTJ_E_FILTER, /* a|name(args, kw) ; id = filter id ; a NULL = {% filter %} block input */
    FTJ_E_TEST,   /* a is [not] name args ; id = test id ; negate */
    FTJ_E_NEG,    /* -a */
    FTJ_E_POS,    /* +a */
    FTJ_E_NOT,    /* not a */
    FTJ_E_AND,    /* a and b */
    FTJ_E_OR,     /* a or b */
    FTJ_E_BIN,    /* a op b, op in ADD..TILDE */
    FTJ_E_CMP,    /* a op1 args[0] op2 args[1] ... ; ops[] */
    FTJ_E_COND,   /* b if a else c (c may be NULL) */
};

struct ftj_expr;
struct ftj_kwarg {
    struct ftj_str name;
    struct ftj_expr *val;
};

struct ftj_expr {
    uint8_t kind;
    uint8_t op;
    bool negate;
    int id;
    size_t off;
    struct ftj_val lit;
    struct ftj_str name;
    struct ftj_expr *a, *b, *c, *d;
    struct ftj_expr **args;
    size_t nargs;
    struct ftj_kwarg *kw;   /* keyword args; for FTJ_E_DICT the values (name unused) */
    size_t nkw;
    uint8_t *ops;           /* FTJ_E_CMP */
};

enum ftj_stmt_kind {
    FTJ_S_TEXT,     /* text */
    FTJ_S_OUT,      /* {{ expr }} */
    FTJ_S_IF,       /* if expr: body else orelse */
    FTJ_S_FOR,      /* for target in expr [if cond]: body else orelse */
    FTJ_S_SET,      /* set target = expr ; target: NAME, TUPLE of NAMEs, or ATTR (ns.x) */
    FTJ_S_SETBLOCK, /* set target %}body{% endset ; expr = optional filter chain */
    FTJ_S_MACRO,    /* macro name(params) body */
    FTJ_S_BREAK,
    FTJ_S_CONTINUE,
    FTJ_S_FILTER,   /* filter chain expr applied to body */
    FTJ_S_WITH,     /* with assignments: body (a new scope) */
    FTJ_S_GROUP,    /* body in the same scope ({% generation %}) */
};

struct ftj_param {
    struct ftj_str name;
    struct ftj_expr *def; /* NULL: no default */
};

struct ftj_stmt {
    uint8_t kind;
    size_t off;
    struct ftj_stmt *next;
    struct ftj_str text;
    struct ftj_expr *expr;
    struct ftj_expr *target;
    struct ftj_expr *cond;
    struct ftj_stmt *body, *orelse;
    struct ftj_str name;       /* macro */
    struct ftj_param *params;  /* macro params / with assignments (def = value) */
    size_t nparams;
};

/* ids resolved at parse time */
enum ftj_filter {
    FTJ_FL_ABS, FTJ_FL_CAPITALIZE, FTJ_FL_DEFAULT, FTJ_FL_DICTSORT, FTJ_FL_ESCAPE, FTJ_FL_FIRST,
    FTJ_FL_FLOAT, FTJ_FL_INDENT, FTJ_FL_INT, FTJ_FL_ITEMS, FTJ_FL_JOIN, FTJ_FL_LAST, FTJ_FL_LENGTH,
    FTJ_FL_LIST, FTJ_FL_LOWER, FTJ_FL_MAP, FTJ_FL_MAX, FTJ_FL_MIN, FTJ_FL_REJECT, FTJ_FL_REJECTATTR,
    FTJ_FL_REPLACE, FTJ_FL_REVERSE, FTJ_FL_ROUND, FTJ_FL_SAFE, FTJ_FL_SELECT, FTJ_FL_SELECTATTR,
    FTJ_FL_SORT, FTJ_FL_STRING, FTJ_FL_SUM, FTJ_FL_TITLE, FTJ_FL_TOJSON, FTJ_FL_TRIM, FTJ_FL_UNIQUE,
    FTJ_FL_UPPER, FTJ_FL_WORDCOUNT,
};

enum ftj_test {
    FTJ_TS_BOOLEAN, FTJ_TS_CALLABLE, FTJ_TS_DEFINED, FTJ_TS_DIVISIBLEBY, FTJ_TS_EQ, FTJ_TS_NE,
    FTJ_TS_LT, FTJ_TS_LE, FTJ_TS_GT, FTJ_TS_GE, FTJ_TS_ESCAPED, FTJ_TS_EVEN, FTJ_TS_ODD,
    FTJ_TS_FALSE, FTJ_TS_TRUE, FTJ_TS_FLOAT, FTJ_TS_INTEGER, FTJ_TS_IN, FTJ_TS_ITERABLE,
    FTJ_TS_LOWER, FTJ_TS_UPPER, FTJ_TS_MAPPING, FTJ_TS_NONE, FTJ_TS_NUMBER, FTJ_TS_SAMEAS,
    FTJ_TS_SEQUENCE, FTJ_TS_STRING, FTJ_TS_UNDEFINED,
};

enum ftj_method {
    FTJ_M_UNKNOWN = -1,
    FTJ_M_STARTSWITH, FTJ_M_ENDSWITH, FTJ_M_SPLIT, FTJ_M_RSPLIT, FTJ_M_STRIP, FTJ_M_LSTRIP,
    FTJ_M_RSTRIP, FTJ_M_UPPER, FTJ_M_LOWER, FTJ_M_TITLE, FTJ_M_CAPITALIZE, FTJ_M_REPLACE,
    FTJ_M_FIND, FTJ_M_RFIND, FTJ_M_COUNT, FTJ_M_JOIN, FTJ_M_REMOVEPREFIX, FTJ_M_REMOVESUFFIX,
    FTJ_M_ISDIGIT, FTJ_M_ISALPHA, FTJ_M_ISALNUM, FTJ_M_ISSPACE, FTJ_M_ISLOWER, FTJ_M_ISUPPER,
    FTJ_M_ITEMS, FTJ_M_KEYS, FTJ_M_VALUES, FTJ_M_GET, FTJ_M_CYCLE, FTJ_M_FORMAT, FTJ_M_APPEND, FTJ_M_POP,
};

/* Name tables (jinja_parse.c): id for a name, or -1. */
int ftj_filter_id(const char *p, size_t n);
int ftj_test_id(const char *p, size_t n);
int ftj_method_id(const char *p, size_t n);

/* Parse `src` into a template. Errors are logged with line and column:
 * FT_EFORMAT (syntax), FT_EUNSUPPORTED, FT_ERANGE (nesting), FT_ENOMEM. */
int ftj_parse(const char *src, size_t len, const struct ftj_lex_opts *o, struct ftj_template **out /* OUT */);
void ftj_template_free(struct ftj_template *t);

/* ---------------------------------------------------------------- render */

struct ftj_render;

/* A render context: an arena for values plus the global variables. */
int ftj_render_new(const struct ftj_template *t, const struct ftj_limits *lim, struct ftj_render **out /* OUT */);
void ftj_render_free(struct ftj_render *r);
struct ftj_arena *ftj_render_arena(struct ftj_render *r);
/* Define a global variable (name must outlive the render). */
int ftj_render_set(struct ftj_render *r, const char *name, struct ftj_val v);
/* The time strftime_now() formats, in seconds since the epoch (default 0:
 * the current time at each call), for reproducible renders. */
void ftj_render_set_time(struct ftj_render *r, int64_t now);
/* Log nothing when the template fails (trial renders whose failure is an answer). */
void ftj_render_set_quiet(struct ftj_render *r, bool quiet);
/* Run the template. *out is malloc'd, NUL-terminated. Errors are logged once
 * as "chat template: ..." with the line and column of the failing construct. */
int ftj_render_run(struct ftj_render *r, char **out /* OUT */, size_t *out_len /* OUT */);

#endif
