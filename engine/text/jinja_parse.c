/* Parser of the Jinja-subset interpreter: tokens -> statement/expression tree.
 *
 * The grammar and operator precedence follow Jinja2's parser
 * (jinja2/parser.py), loosest first:
 *   x if c else y  |  or  |  and  |  not  |  == != < <= > >= in, not in
 *   + -  |  ~  |  * / // %  |  **  |  unary - +  |  postfix . [] ()  and
 *   the filter/test suffixes | and `is`, which bind tightest, so
 *   `a + b|trim` is `a + (b|trim)` and `not x is defined` is `not (x is defined)`.
 * Statements: if/elif/else, for (with `if` filter and else), set (name,
 * tuple, namespace attribute, block), macro, break/continue (HF enables the
 * loopcontrols extension), filter, with, generation (HF's AssistantTracker
 * tag, rendered as its body) and raw (in the lexer).
 *
 * Constructs the evaluator does not implement are rejected here with
 * FT_EUNSUPPORTED and their line and column: include/import/extends/block/
 * call, recursive loops, star-args, and unknown filters and tests outside
 * `if` blocks (Jinja's own compile-time rule; inside them, as in Jinja, an
 * unknown name fails only the render that reaches it). Methods and
 * functions are resolved when called, as in Jinja.
 */
#include "jinja.h"

#include "ft/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ name tables */

struct name_id {
    const char *name;
    int id;
};

static const struct name_id filter_names[] = {
    {"abs", FTJ_FL_ABS},         {"capitalize", FTJ_FL_CAPITALIZE}, {"count", FTJ_FL_LENGTH},
    {"d", FTJ_FL_DEFAULT},       {"default", FTJ_FL_DEFAULT},       {"dictsort", FTJ_FL_DICTSORT},
    {"e", FTJ_FL_ESCAPE},        {"escape", FTJ_FL_ESCAPE},         {"first", FTJ_FL_FIRST},
    {"float", FTJ_FL_FLOAT},     {"indent", FTJ_FL_INDENT},         {"int", FTJ_FL_INT},
    {"items", FTJ_FL_ITEMS},     {"join", FTJ_FL_JOIN},             {"last", FTJ_FL_LAST},
    {"length", FTJ_FL_LENGTH},   {"list", FTJ_FL_LIST},             {"lower", FTJ_FL_LOWER},
    {"map", FTJ_FL_MAP},         {"max", FTJ_FL_MAX},               {"min", FTJ_FL_MIN},
    {"reject", FTJ_FL_REJECT},   {"rejectattr", FTJ_FL_REJECTATTR}, {"replace", FTJ_FL_REPLACE},
    {"reverse", FTJ_FL_REVERSE}, {"round", FTJ_FL_ROUND},           {"safe", FTJ_FL_SAFE},
    {"select", FTJ_FL_SELECT},   {"selectattr", FTJ_FL_SELECTATTR}, {"sort", FTJ_FL_SORT},
    {"string", FTJ_FL_STRING},   {"sum", FTJ_FL_SUM},               {"title", FTJ_FL_TITLE},
    {"tojson", FTJ_FL_TOJSON},   {"trim", FTJ_FL_TRIM},             {"unique", FTJ_FL_UNIQUE},
    {"upper", FTJ_FL_UPPER},     {"wordcount", FTJ_FL_WORDCOUNT},
};

static const struct name_id test_names[] = {
    {"boolean", FTJ_TS_BOOLEAN},   {"callable", FTJ_TS_CALLABLE}, {"defined", FTJ_TS_DEFINED},
    {"divisibleby", FTJ_TS_DIVISIBLEBY}, {"eq", FTJ_TS_EQ},       {"equalto", FTJ_TS_EQ},
    {"==", FTJ_TS_EQ},             {"ne", FTJ_TS_NE},             {"!=", FTJ_TS_NE},
    {"lt", FTJ_TS_LT},             {"lessthan", FTJ_TS_LT},       {"<", FTJ_TS_LT},
    {"le", FTJ_TS_LE},             {"<=", FTJ_TS_LE},             {"gt", FTJ_TS_GT},
    {"greaterthan", FTJ_TS_GT},    {">", FTJ_TS_GT},              {"ge", FTJ_TS_GE},
    {">=", FTJ_TS_GE},             {"escaped", FTJ_TS_ESCAPED},   {"even", FTJ_TS_EVEN},
    {"odd", FTJ_TS_ODD},           {"false", FTJ_TS_FALSE},       {"true", FTJ_TS_TRUE},
    {"float", FTJ_TS_FLOAT},       {"integer", FTJ_TS_INTEGER},   {"in", FTJ_TS_IN},
    {"iterable", FTJ_TS_ITERABLE}, {"lower", FTJ_TS_LOWER},       {"upper", FTJ_TS_UPPER},
    {"mapping", FTJ_TS_MAPPING},   {"none", FTJ_TS_NONE},         {"number", FTJ_TS_NUMBER},
    {"sameas", FTJ_TS_SAMEAS},     {"sequence", FTJ_TS_SEQUENCE}, {"string", FTJ_TS_STRING},
    {"undefined", FTJ_TS_UNDEFINED},
};

static const struct name_id method_names[] = {
    {"startswith", FTJ_M_STARTSWITH}, {"endswith", FTJ_M_ENDSWITH},   {"split", FTJ_M_SPLIT},
    {"rsplit", FTJ_M_RSPLIT},         {"strip", FTJ_M_STRIP},         {"lstrip", FTJ_M_LSTRIP},
    {"rstrip", FTJ_M_RSTRIP},         {"upper", FTJ_M_UPPER},         {"lower", FTJ_M_LOWER},
    {"title", FTJ_M_TITLE},           {"capitalize", FTJ_M_CAPITALIZE}, {"replace", FTJ_M_REPLACE},
    {"find", FTJ_M_FIND},             {"rfind", FTJ_M_RFIND},         {"count", FTJ_M_COUNT},
    {"join", FTJ_M_JOIN},             {"removeprefix", FTJ_M_REMOVEPREFIX},
    {"removesuffix", FTJ_M_REMOVESUFFIX}, {"isdigit", FTJ_M_ISDIGIT}, {"isalpha", FTJ_M_ISALPHA},
    {"isalnum", FTJ_M_ISALNUM},       {"isspace", FTJ_M_ISSPACE},     {"islower", FTJ_M_ISLOWER},
    {"isupper", FTJ_M_ISUPPER},       {"items", FTJ_M_ITEMS},         {"keys", FTJ_M_KEYS},
    {"values", FTJ_M_VALUES},         {"get", FTJ_M_GET},             {"cycle", FTJ_M_CYCLE},
    {"format", FTJ_M_FORMAT},         {"append", FTJ_M_APPEND},
    {"pop", FTJ_M_POP},
};

static int lookup(const struct name_id *tab, size_t n, const char *p, size_t len) {
    for (size_t i = 0; i < n; i++)
        if (strlen(tab[i].name) == len && memcmp(tab[i].name, p, len) == 0)
            return tab[i].id;
    return -1;
}

int ftj_filter_id(const char *p, size_t n) { return lookup(filter_names, FT_ARRAY_LEN(filter_names), p, n); }
int ftj_test_id(const char *p, size_t n) { return lookup(test_names, FT_ARRAY_LEN(test_names), p, n); }
int ftj_method_id(const char *p, size_t n) { return lookup(method_names, FT_ARRAY_LEN(method_names), p, n); }

static bool in_list(const char *const *list, size_t n, struct ftj_str s) {
    for (size_t i = 0; i < n; i++)
        if (strlen(list[i]) == s.n && memcmp(list[i], s.p, s.n) == 0)
            return true;
    return false;
}

/* ---------------------------------------------------------------- parser */

struct parser {
    struct ftj_template *t;
    const struct ftj_token *tk;
    size_t ntk, i;
    int depth;
    int loop_depth;
    /* Jinja resolves filter and test names when it compiles a template,
     * except inside `if` blocks and inline `x if c else y` ("soft" frames),
     * where an unknown name only fails if it is evaluated. Unknown names
     * outside soft frames are collected here and rejected after parsing. */
    bool soft;
    struct ftj_expr **unknown;
    size_t n_unknown, cap_unknown;
};

static int note_unknown(struct parser *P, struct ftj_expr *e) {
    if (P->soft)
        return 0;
    if (P->n_unknown == P->cap_unknown) {
        size_t cap = P->cap_unknown ? P->cap_unknown * 2 : 8;
        struct ftj_expr **nv = ftj_alloc_array(&P->t->arena, cap, sizeof(*nv));
        if (!nv)
            return FT_ENOMEM;
        if (P->n_unknown)
            memcpy(nv, P->unknown, P->n_unknown * sizeof(*nv));
        P->unknown = nv;
        P->cap_unknown = cap;
    }
    P->unknown[P->n_unknown++] = e;
    return 0;
}

#define CUR(P) (&(P)->tk[(P)->i])

static int perr(struct parser *P, size_t off, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int perr(struct parser *P, size_t off, int rc, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    int line, col;
    ftj_position(P->t, off, &line, &col);
    FT_LOG_E("chat template: line %d, column %d: %s", line, col, msg);
    return rc;
}

static void advance(struct parser *P) {
    if (CUR(P)->type != FTJ_TK_EOF)
        P->i++;
}

static const struct ftj_token *peek(const struct parser *P, size_t k) {
    size_t j = P->i + k;
    return j < P->ntk ? &P->tk[j] : &P->tk[P->ntk - 1];
}

static bool is_op(const struct ftj_token *t, enum ftj_op op) { return t->type == FTJ_TK_OP && t->op == op; }
static bool is_name(const struct ftj_token *t, const char *name) {
    return t->type == FTJ_TK_NAME && strlen(name) == t->n && memcmp(t->p, name, t->n) == 0;
}

static const char *tok_desc(const struct ftj_token *t) {
    switch (t->type) {
    case FTJ_TK_EOF: return "end of template";
    case FTJ_TK_TEXT: return "text";
    case FTJ_TK_VAR_BEGIN: return "'{{'";
    case FTJ_TK_VAR_END: return "'}}'";
    case FTJ_TK_BLOCK_BEGIN: return "'{%'";
    case FTJ_TK_BLOCK_END: return "'%}'";
    case FTJ_TK_NAME: return "a name";
    case FTJ_TK_STRING: return "a string";
    case FTJ_TK_INT:
    case FTJ_TK_FLOAT: return "a number";
    default: return "an operator";
    }
}

static int unexpected(struct parser *P, const char *expected) {
    const struct ftj_token *t = CUR(P);
    if (t->type == FTJ_TK_NAME)
        return perr(P, t->off, FT_EFORMAT, "unexpected '%.*s', expected %s", (int)FT_MIN(t->n, 64), t->p, expected);
    return perr(P, t->off, FT_EFORMAT, "unexpected %s, expected %s", tok_desc(t), expected);
}

static int expect_op(struct parser *P, enum ftj_op op, const char *what) {
    if (!is_op(CUR(P), op))
        return unexpected(P, what);
    advance(P);
    return 0;
}

static struct ftj_expr *new_expr(struct parser *P, enum ftj_expr_kind kind, size_t off) {
    struct ftj_expr *e = ftj_alloc(&P->t->arena, sizeof(*e));
    if (!e)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->kind = (uint8_t)kind;
    e->off = off;
    return e;
}

static struct ftj_stmt *new_stmt(struct parser *P, enum ftj_stmt_kind kind, size_t off) {
    struct ftj_stmt *s = ftj_alloc(&P->t->arena, sizeof(*s));
    if (!s)
        return NULL;
    memset(s, 0, sizeof(*s));
    s->kind = (uint8_t)kind;
    s->off = off;
    return s;
}

/* A growable array of pointers in the template arena. */
struct vec {
    void **v;
    size_t n, cap;
};
static int vec_push(struct parser *P, struct vec *v, void *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        void **nv = ftj_alloc_array(&P->t->arena, cap, sizeof(void *));
        if (!nv)
            return FT_ENOMEM;
        if (v->n)
            memcpy(nv, v->v, v->n * sizeof(void *));
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

struct kwvec {
    struct ftj_kwarg *v;
    size_t n, cap;
};
static int kw_push(struct parser *P, struct kwvec *v, struct ftj_str name, struct ftj_expr *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        struct ftj_kwarg *nv = ftj_alloc_array(&P->t->arena, cap, sizeof(*nv));
        if (!nv)
            return FT_ENOMEM;
        if (v->n)
            memcpy(nv, v->v, v->n * sizeof(*nv));
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n].name = name;
    v->v[v->n].val = x;
    v->n++;
    return 0;
}

static int enter(struct parser *P, size_t off) {
    if (++P->depth > FTJ_MAX_PARSE_DEPTH)
        return perr(P, off, FT_ERANGE, "nested too deeply (more than %d levels)", FTJ_MAX_PARSE_DEPTH);
    return 0;
}

/* --------------------------------------------------------- expressions */

static int parse_expression(struct parser *P, bool with_condexpr, struct ftj_expr **out);
static int parse_or(struct parser *P, struct ftj_expr **out);
static int parse_unary(struct parser *P, bool with_filter, struct ftj_expr **out);
static int parse_primary(struct parser *P, struct ftj_expr **out);
static int parse_postfix(struct parser *P, struct ftj_expr **node);

#define NEW(var, kind, off)                    \
    do {                                       \
        (var) = new_expr(P, (kind), (off));    \
        if (!(var))                            \
            return FT_ENOMEM;                  \
    } while (0)

/* Is the current token the end of a tuple (for `{{ a, b }}`, `for x in a, b`)? */
static bool tuple_end(struct parser *P, const char *const *extra_end) {
    const struct ftj_token *t = CUR(P);
    if (t->type == FTJ_TK_VAR_END || t->type == FTJ_TK_BLOCK_END || t->type == FTJ_TK_EOF || is_op(t, FTJ_OP_RPAREN))
        return true;
    for (; extra_end && *extra_end; extra_end++)
        if (is_name(t, *extra_end))
            return true;
    return false;
}

/* Jinja's parse_tuple: one expression, or a tuple when commas separate several. */
static int parse_tuple(struct parser *P, bool with_condexpr, bool explicit_parens, const char *const *extra_end,
                       struct ftj_expr **out) {
    size_t off = CUR(P)->off;
    struct vec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n)
            TRY(expect_op(P, FTJ_OP_COMMA, "','"));
        if (tuple_end(P, extra_end))
            break;
        struct ftj_expr *e;
        TRY(parse_expression(P, with_condexpr, &e));
        TRY(vec_push(P, &items, e));
        if (is_op(CUR(P), FTJ_OP_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n) {
            *out = items.v[0];
            return 0;
        }
        if (!explicit_parens)
            return unexpected(P, "an expression");
    }
    struct ftj_expr *e;
    NEW(e, FTJ_E_TUPLE, off);
    e->args = (struct ftj_expr **)items.v;
    e->nargs = items.n;
    *out = e;
    return 0;
}

static int parse_call_args(struct parser *P, struct vec *args, struct kwvec *kw) {
    TRY(expect_op(P, FTJ_OP_LPAREN, "'('"));
    while (!is_op(CUR(P), FTJ_OP_RPAREN)) {
        if (args->n || kw->n) {
            TRY(expect_op(P, FTJ_OP_COMMA, "',' or ')'"));
            if (is_op(CUR(P), FTJ_OP_RPAREN))
                break;
        }
        if (is_op(CUR(P), FTJ_OP_MUL) || is_op(CUR(P), FTJ_OP_POW))
            return perr(P, CUR(P)->off, FT_EUNSUPPORTED, "*args and **kwargs in calls are not supported");
        if (CUR(P)->type == FTJ_TK_NAME && is_op(peek(P, 1), FTJ_OP_ASSIGN)) {
            struct ftj_str name = {CUR(P)->p, CUR(P)->n};
            advance(P);
            advance(P);
            struct ftj_expr *v;
            TRY(parse_expression(P, true, &v));
            TRY(kw_push(P, kw, name, v));
        } else {
            if (kw->n)
                return perr(P, CUR(P)->off, FT_EFORMAT, "positional argument after a keyword argument");
            struct ftj_expr *v;
            TRY(parse_expression(P, true, &v));
            TRY(vec_push(P, args, v));
        }
    }
    advance(P);
    return 0;
}

static int parse_call(struct parser *P, struct ftj_expr **node) {
    struct ftj_expr *callee = *node, *e;
    NEW(e, FTJ_E_CALL, CUR(P)->off);
    struct vec args = {0};
    struct kwvec kw = {0};
    TRY(parse_call_args(P, &args, &kw));
    e->a = callee;
    e->args = (struct ftj_expr **)args.v;
    e->nargs = args.n;
    e->kw = kw.v;
    e->nkw = kw.n;
    /* Methods and functions are looked up when called, as in Jinja: a name
     * we do not implement fails the render that reaches it. */
    e->id = callee->kind == FTJ_E_ATTR ? ftj_method_id(callee->name.p, callee->name.n) : FTJ_M_UNKNOWN;
    *node = e;
    return 0;
}

static int parse_filter(struct parser *P, struct ftj_expr **node, bool start_inline) {
    while (is_op(CUR(P), FTJ_OP_PIPE) || start_inline) {
        if (!start_inline)
            advance(P);
        start_inline = false;
        const struct ftj_token *t = CUR(P);
        if (t->type != FTJ_TK_NAME)
            return unexpected(P, "a filter name");
        struct ftj_expr *e;
        NEW(e, FTJ_E_FILTER, t->off);
        e->name.p = t->p;
        e->name.n = t->n;
        advance(P);
        if (is_op(CUR(P), FTJ_OP_DOT))
            return perr(P, t->off, FT_EUNSUPPORTED, "dotted filter names are not supported");
        e->id = ftj_filter_id(e->name.p, e->name.n);
        if (e->id < 0)
            TRY(note_unknown(P, e));
        if (is_op(CUR(P), FTJ_OP_LPAREN)) {
            struct vec args = {0};
            struct kwvec kw = {0};
            TRY(parse_call_args(P, &args, &kw));
            e->args = (struct ftj_expr **)args.v;
            e->nargs = args.n;
            e->kw = kw.v;
            e->nkw = kw.n;
        }
        e->a = *node;
        *node = e;
    }
    return 0;
}

static int parse_test(struct parser *P, struct ftj_expr **node) {
    advance(P); /* 'is' */
    bool negate = false;
    if (is_name(CUR(P), "not")) {
        negate = true;
        advance(P);
    }
    const struct ftj_token *t = CUR(P);
    if (t->type != FTJ_TK_NAME)
        return unexpected(P, "a test name");
    struct ftj_expr *e;
    NEW(e, FTJ_E_TEST, t->off);
    e->name.p = t->p;
    e->name.n = t->n;
    e->negate = negate;
    e->id = ftj_test_id(t->p, t->n);
    if (e->id < 0)
        TRY(note_unknown(P, e));
    advance(P);
    if (is_op(CUR(P), FTJ_OP_DOT))
        return perr(P, t->off, FT_EUNSUPPORTED, "dotted test names are not supported");
    const struct ftj_token *c = CUR(P);
    if (is_op(c, FTJ_OP_LPAREN)) {
        struct vec args = {0};
        struct kwvec kw = {0};
        TRY(parse_call_args(P, &args, &kw));
        e->args = (struct ftj_expr **)args.v;
        e->nargs = args.n;
        if (kw.n)
            return perr(P, t->off, FT_EUNSUPPORTED, "keyword arguments to tests are not supported");
    } else if ((c->type == FTJ_TK_NAME || c->type == FTJ_TK_STRING || c->type == FTJ_TK_INT ||
                c->type == FTJ_TK_FLOAT || is_op(c, FTJ_OP_LPAREN) || is_op(c, FTJ_OP_LBRACKET) ||
                is_op(c, FTJ_OP_LBRACE)) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is"))
            return perr(P, c->off, FT_EFORMAT, "tests cannot be chained with 'is'");
        struct ftj_expr *arg;
        TRY(parse_primary(P, &arg));
        TRY(parse_postfix(P, &arg));
        e->args = ftj_alloc(&P->t->arena, sizeof(struct ftj_expr *));
        if (!e->args)
            return FT_ENOMEM;
        e->args[0] = arg;
        e->nargs = 1;
    }
    e->a = *node;
    *node = e;
    return 0;
}

static int parse_filter_expr(struct parser *P, struct ftj_expr **node) {
    for (;;) {
        if (is_op(CUR(P), FTJ_OP_PIPE))
            TRY(parse_filter(P, node, false));
        else if (is_name(CUR(P), "is"))
            TRY(parse_test(P, node));
        else if (is_op(CUR(P), FTJ_OP_LPAREN))
            TRY(parse_call(P, node));
        else
            return 0;
    }
}

/* One subscript inside [ ]: an index or a slice. */
static int parse_subscribed(struct parser *P, struct ftj_expr **out, bool *is_slice) {
    struct ftj_expr *parts[3] = {NULL, NULL, NULL};
    size_t off = CUR(P)->off;
    *is_slice = false;
    if (!is_op(CUR(P), FTJ_OP_COLON)) {
        TRY(parse_expression(P, true, &parts[0]));
        if (!is_op(CUR(P), FTJ_OP_COLON)) {
            *out = parts[0];
            return 0;
        }
    }
    *is_slice = true;
    advance(P); /* ':' */
    if (!is_op(CUR(P), FTJ_OP_COLON) && !is_op(CUR(P), FTJ_OP_RBRACKET) && !is_op(CUR(P), FTJ_OP_COMMA))
        TRY(parse_expression(P, true, &parts[1]));
    if (is_op(CUR(P), FTJ_OP_COLON)) {
        advance(P);
        if (!is_op(CUR(P), FTJ_OP_RBRACKET) && !is_op(CUR(P), FTJ_OP_COMMA))
            TRY(parse_expression(P, true, &parts[2]));
    }
    struct ftj_expr *e;
    NEW(e, FTJ_E_SLICE, off);
    e->b = parts[0];
    e->c = parts[1];
    e->d = parts[2];
    *out = e;
    return 0;
}

static int parse_postfix(struct parser *P, struct ftj_expr **node) {
    for (;;) {
        const struct ftj_token *t = CUR(P);
        if (is_op(t, FTJ_OP_DOT)) {
            advance(P);
            const struct ftj_token *a = CUR(P);
            struct ftj_expr *e;
            if (a->type == FTJ_TK_NAME) {
                NEW(e, FTJ_E_ATTR, a->off);
                e->name.p = a->p;
                e->name.n = a->n;
            } else if (a->type == FTJ_TK_INT) {
                struct ftj_expr *idx;
                NEW(idx, FTJ_E_LIT, a->off);
                idx->lit = ftj_int(a->i);
                NEW(e, FTJ_E_INDEX, a->off);
                e->b = idx;
            } else {
                return unexpected(P, "an attribute name");
            }
            advance(P);
            e->a = *node;
            *node = e;
        } else if (is_op(t, FTJ_OP_LBRACKET)) {
            advance(P);
            struct ftj_expr *sub;
            bool is_slice;
            TRY(parse_subscribed(P, &sub, &is_slice));
            if (is_op(CUR(P), FTJ_OP_COMMA))
                return perr(P, CUR(P)->off, FT_EUNSUPPORTED, "tuple subscripts are not supported");
            TRY(expect_op(P, FTJ_OP_RBRACKET, "']'"));
            if (is_slice) {
                sub->a = *node;
                *node = sub;
            } else {
                struct ftj_expr *e;
                NEW(e, FTJ_E_INDEX, t->off);
                e->a = *node;
                e->b = sub;
                *node = e;
            }
        } else if (is_op(t, FTJ_OP_LPAREN)) {
            TRY(parse_call(P, node));
        } else {
            return 0;
        }
    }
}

static int parse_list_or_dict(struct parser *P, bool dict, struct ftj_expr **out) {
    size_t off = CUR(P)->off;
    advance(P);
    enum ftj_op close = dict ? FTJ_OP_RBRACE : FTJ_OP_RBRACKET;
    struct vec items = {0};
    struct kwvec vals = {0};
    while (!is_op(CUR(P), close)) {
        if (items.n) {
            TRY(expect_op(P, FTJ_OP_COMMA, "','"));
            if (is_op(CUR(P), close))
                break;
        }
        struct ftj_expr *e;
        TRY(parse_expression(P, true, &e));
        TRY(vec_push(P, &items, e));
        if (dict) {
            TRY(expect_op(P, FTJ_OP_COLON, "':'"));
            struct ftj_expr *v;
            TRY(parse_expression(P, true, &v));
            struct ftj_str none = {NULL, 0};
            TRY(kw_push(P, &vals, none, v));
        }
    }
    advance(P);
    struct ftj_expr *e;
    NEW(e, dict ? FTJ_E_DICT : FTJ_E_LIST, off);
    e->args = (struct ftj_expr **)items.v;
    e->nargs = items.n;
    e->kw = vals.v;
    e->nkw = vals.n;
    *out = e;
    return 0;
}

static int parse_primary(struct parser *P, struct ftj_expr **out) {
    const struct ftj_token *t = CUR(P);
    struct ftj_expr *e;
    switch (t->type) {
    case FTJ_TK_NAME:
        NEW(e, FTJ_E_LIT, t->off);
        if (is_name(t, "true") || is_name(t, "True")) {
            e->lit = ftj_bool(true);
        } else if (is_name(t, "false") || is_name(t, "False")) {
            e->lit = ftj_bool(false);
        } else if (is_name(t, "none") || is_name(t, "None")) {
            e->lit = ftj_none();
        } else {
            e->kind = FTJ_E_NAME;
            e->name.p = t->p;
            e->name.n = t->n;
        }
        advance(P);
        break;
    case FTJ_TK_STRING: {
        /* adjacent literals concatenate: 'a' "b" == 'ab' */
        size_t total = 0, j = P->i;
        while (P->tk[j].type == FTJ_TK_STRING) {
            if (ft_add_overflow(total, P->tk[j].n, &total))
                return FT_ENOMEM;
            j++;
        }
        NEW(e, FTJ_E_LIT, t->off);
        if (j == P->i + 1) {
            e->lit = ftj_strv(t->p, t->n);
            advance(P);
        } else {
            char *buf = ftj_alloc(&P->t->arena, total + 1);
            if (!buf)
                return FT_ENOMEM;
            size_t k = 0;
            while (CUR(P)->type == FTJ_TK_STRING) {
                memcpy(buf + k, CUR(P)->p, CUR(P)->n);
                k += CUR(P)->n;
                advance(P);
            }
            buf[k] = '\0';
            e->lit = ftj_strv(buf, k);
        }
        break;
    }
    case FTJ_TK_INT:
        NEW(e, FTJ_E_LIT, t->off);
        e->lit = ftj_int(t->i);
        advance(P);
        break;
    case FTJ_TK_FLOAT:
        NEW(e, FTJ_E_LIT, t->off);
        e->lit = ftj_float(t->f);
        advance(P);
        break;
    case FTJ_TK_OP:
        if (t->op == FTJ_OP_LPAREN) {
            advance(P);
            TRY(parse_tuple(P, true, true, NULL, &e));
            TRY(expect_op(P, FTJ_OP_RPAREN, "')'"));
            break;
        }
        if (t->op == FTJ_OP_LBRACKET || t->op == FTJ_OP_LBRACE) {
            TRY(parse_list_or_dict(P, t->op == FTJ_OP_LBRACE, &e));
            break;
        }
        return unexpected(P, "an expression");
    default: return unexpected(P, "an expression");
    }
    *out = e;
    return 0;
}

static int parse_unary(struct parser *P, bool with_filter, struct ftj_expr **out) {
    const struct ftj_token *t = CUR(P);
    struct ftj_expr *node;
    if (is_op(t, FTJ_OP_SUB) || is_op(t, FTJ_OP_ADD)) {
        TRY(enter(P, t->off));
        advance(P);
        struct ftj_expr *arg;
        TRY(parse_unary(P, false, &arg));
        P->depth--;
        NEW(node, t->op == FTJ_OP_SUB ? FTJ_E_NEG : FTJ_E_POS, t->off);
        node->a = arg;
    } else {
        TRY(parse_primary(P, &node));
    }
    TRY(parse_postfix(P, &node));
    if (with_filter)
        TRY(parse_filter_expr(P, &node));
    *out = node;
    return 0;
}

static int parse_binary_level(struct parser *P, int level, struct ftj_expr **out);

/* Levels, tightest last: 0 = + -, 1 = ~, 2 = * / // %, 3 = **. */
static int parse_binary_level(struct parser *P, int level, struct ftj_expr **out) {
    struct ftj_expr *left;
    if (level == 4)
        return parse_unary(P, true, out);
    TRY(parse_binary_level(P, level + 1, &left));
    for (;;) {
        const struct ftj_token *t = CUR(P);
        bool match = false;
        if (t->type == FTJ_TK_OP) {
            switch (level) {
            case 0: match = t->op == FTJ_OP_ADD || t->op == FTJ_OP_SUB; break;
            case 1: match = t->op == FTJ_OP_TILDE; break;
            case 2:
                match = t->op == FTJ_OP_MUL || t->op == FTJ_OP_DIV || t->op == FTJ_OP_FLOORDIV || t->op == FTJ_OP_MOD;
                break;
            default: match = t->op == FTJ_OP_POW; break;
            }
        }
        if (!match)
            break;
        advance(P);
        struct ftj_expr *right, *e;
        TRY(parse_binary_level(P, level + 1, &right));
        NEW(e, FTJ_E_BIN, t->off);
        e->op = t->op;
        e->a = left;
        e->b = right;
        left = e;
    }
    *out = left;
    return 0;
}

static int parse_compare(struct parser *P, struct ftj_expr **out) {
    struct ftj_expr *first;
    size_t off = CUR(P)->off;
    TRY(parse_binary_level(P, 0, &first));
    struct vec operands = {0};
    uint8_t ops_buf[64];
    size_t nops = 0;
    for (;;) {
        const struct ftj_token *t = CUR(P);
        uint8_t op = FTJ_OP_NONE;
        if (t->type == FTJ_TK_OP && t->op >= FTJ_OP_EQ && t->op <= FTJ_OP_GE) {
            op = t->op;
            advance(P);
        } else if (is_name(t, "in")) {
            op = FTJ_OP_IN;
            advance(P);
        } else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = FTJ_OP_NOTIN;
            advance(P);
            advance(P);
        } else {
            break;
        }
        if (nops == sizeof(ops_buf))
            return perr(P, t->off, FT_ERANGE, "comparison chain too long");
        struct ftj_expr *rhs;
        TRY(parse_binary_level(P, 0, &rhs));
        TRY(vec_push(P, &operands, rhs));
        ops_buf[nops++] = op;
    }
    if (!nops) {
        *out = first;
        return 0;
    }
    struct ftj_expr *e;
    NEW(e, FTJ_E_CMP, off);
    e->a = first;
    e->args = (struct ftj_expr **)operands.v;
    e->nargs = operands.n;
    e->ops = ftj_alloc(&P->t->arena, nops);
    if (!e->ops)
        return FT_ENOMEM;
    memcpy(e->ops, ops_buf, nops);
    *out = e;
    return 0;
}

static int parse_not(struct parser *P, struct ftj_expr **out) {
    const struct ftj_token *t = CUR(P);
    if (is_name(t, "not")) {
        TRY(enter(P, t->off));
        advance(P);
        struct ftj_expr *arg, *e;
        TRY(parse_not(P, &arg));
        P->depth--;
        NEW(e, FTJ_E_NOT, t->off);
        e->a = arg;
        *out = e;
        return 0;
    }
    return parse_compare(P, out);
}

static int parse_and_or(struct parser *P, bool is_or, struct ftj_expr **out) {
    struct ftj_expr *left;
    if (is_or)
        TRY(parse_and_or(P, false, &left));
    else
        TRY(parse_not(P, &left));
    while (is_name(CUR(P), is_or ? "or" : "and")) {
        size_t off = CUR(P)->off;
        advance(P);
        struct ftj_expr *right, *e;
        if (is_or)
            TRY(parse_and_or(P, false, &right));
        else
            TRY(parse_not(P, &right));
        NEW(e, is_or ? FTJ_E_OR : FTJ_E_AND, off);
        e->a = left;
        e->b = right;
        left = e;
    }
    *out = left;
    return 0;
}

static int parse_or(struct parser *P, struct ftj_expr **out) { return parse_and_or(P, true, out); }

static int parse_condexpr(struct parser *P, struct ftj_expr **out) {
    struct ftj_expr *then;
    size_t mark = P->n_unknown;
    TRY(parse_or(P, &then));
    while (is_name(CUR(P), "if")) {
        size_t off = CUR(P)->off;
        advance(P);
        P->n_unknown = mark; /* the whole inline if is a soft frame */
        bool saved = P->soft;
        P->soft = true;
        struct ftj_expr *cond, *otherwise = NULL, *e;
        TRY(parse_or(P, &cond));
        if (is_name(CUR(P), "else")) {
            advance(P);
            TRY(parse_condexpr(P, &otherwise));
        }
        P->soft = saved;
        NEW(e, FTJ_E_COND, off);
        e->a = cond;
        e->b = then;
        e->c = otherwise;
        then = e;
    }
    *out = then;
    return 0;
}

static int parse_expression(struct parser *P, bool with_condexpr, struct ftj_expr **out) {
    TRY(enter(P, CUR(P)->off));
    int rc = with_condexpr ? parse_condexpr(P, out) : parse_or(P, out);
    P->depth--;
    return rc;
}

/* ---------------------------------------------------------- statements */

static int parse_body(struct parser *P, const char *const *ends, struct ftj_stmt **out, const char **which);

static int expect_block_end(struct parser *P) {
    if (CUR(P)->type != FTJ_TK_BLOCK_END)
        return unexpected(P, "'%}'");
    advance(P);
    return 0;
}

static int parse_name(struct parser *P, struct ftj_str *out) {
    if (CUR(P)->type != FTJ_TK_NAME)
        return unexpected(P, "a name");
    out->p = CUR(P)->p;
    out->n = CUR(P)->n;
    advance(P);
    return 0;
}

static bool reserved_target(struct ftj_str s) {
    static const char *const words[] = {"true", "false", "none", "True", "False", "None", "in", "not", "and", "or", "is", "if", "else"};
    return in_list(words, FT_ARRAY_LEN(words), s);
}

/* Assignment target: name, `ns.attr` (with_ns), or names separated by commas
 * (optionally in parentheses). */
static int parse_target(struct parser *P, bool with_ns, struct ftj_expr **out) {
    size_t off = CUR(P)->off;
    if (with_ns && CUR(P)->type == FTJ_TK_NAME && is_op(peek(P, 1), FTJ_OP_DOT)) {
        struct ftj_expr *obj, *e;
        NEW(obj, FTJ_E_NAME, off);
        TRY(parse_name(P, &obj->name));
        advance(P); /* '.' */
        NEW(e, FTJ_E_ATTR, CUR(P)->off);
        TRY(parse_name(P, &e->name));
        e->a = obj;
        *out = e;
        return 0;
    }
    bool paren = is_op(CUR(P), FTJ_OP_LPAREN);
    if (paren)
        advance(P);
    struct vec names = {0};
    bool is_tuple = paren;
    for (;;) {
        struct ftj_expr *n;
        NEW(n, FTJ_E_NAME, CUR(P)->off);
        TRY(parse_name(P, &n->name));
        if (reserved_target(n->name))
            return perr(P, n->off, FT_EFORMAT, "cannot assign to '%.*s'", (int)n->name.n, n->name.p);
        TRY(vec_push(P, &names, n));
        if (!is_op(CUR(P), FTJ_OP_COMMA))
            break;
        is_tuple = true;
        advance(P);
        if (paren && is_op(CUR(P), FTJ_OP_RPAREN))
            break;
        if (!paren && (is_name(CUR(P), "in") || is_op(CUR(P), FTJ_OP_ASSIGN)))
            break;
    }
    if (paren)
        TRY(expect_op(P, FTJ_OP_RPAREN, "')'"));
    if (!is_tuple) {
        *out = names.v[0];
        return 0;
    }
    struct ftj_expr *e;
    NEW(e, FTJ_E_TUPLE, off);
    e->args = (struct ftj_expr **)names.v;
    e->nargs = names.n;
    *out = e;
    return 0;
}

static int parse_if(struct parser *P, size_t off, struct ftj_stmt **out) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const ends_else[] = {"endif", NULL};
    struct ftj_stmt *s = new_stmt(P, FTJ_S_IF, off);
    if (!s)
        return FT_ENOMEM;
    *out = s;
    bool saved_soft = P->soft;
    P->soft = true;
    for (;;) {
        TRY(parse_tuple(P, false, false, NULL, &s->expr));
        TRY(expect_block_end(P));
        const char *which;
        TRY(parse_body(P, ends, &s->body, &which));
        if (strcmp(which, "elif") == 0) {
            struct ftj_stmt *e = new_stmt(P, FTJ_S_IF, CUR(P)->off);
            if (!e)
                return FT_ENOMEM;
            e->name.p = "elif"; /* marks a chained if: exec walks the chain without recursing */
            s->orelse = e;
            s = e;
            continue;
        }
        if (strcmp(which, "else") == 0) {
            TRY(expect_block_end(P));
            TRY(parse_body(P, ends_else, &s->orelse, &which));
        }
        P->soft = saved_soft;
        return expect_block_end(P);
    }
}

static int parse_for(struct parser *P, size_t off, struct ftj_stmt **out) {
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const ends_else[] = {"endfor", NULL};
    static const char *const iter_end[] = {"recursive", NULL};
    struct ftj_stmt *s = new_stmt(P, FTJ_S_FOR, off);
    if (!s)
        return FT_ENOMEM;
    TRY(parse_target(P, false, &s->target));
    if (!is_name(CUR(P), "in"))
        return unexpected(P, "'in'");
    advance(P);
    TRY(parse_tuple(P, false, false, iter_end, &s->expr));
    bool saved_soft = P->soft;
    P->soft = false; /* the loop body, filter and else are an inner frame */
    if (is_name(CUR(P), "if")) {
        advance(P);
        TRY(parse_expression(P, true, &s->cond));
    }
    if (is_name(CUR(P), "recursive"))
        return perr(P, CUR(P)->off, FT_EUNSUPPORTED, "recursive for loops are not supported");
    TRY(expect_block_end(P));
    const char *which;
    P->loop_depth++;
    TRY(parse_body(P, ends, &s->body, &which));
    P->loop_depth--;
    if (strcmp(which, "else") == 0) {
        TRY(expect_block_end(P));
        TRY(parse_body(P, ends_else, &s->orelse, &which));
    }
    P->soft = saved_soft;
    *out = s;
    return expect_block_end(P);
}

static int parse_set(struct parser *P, size_t off, struct ftj_stmt **out) {
    static const char *const ends[] = {"endset", NULL};
    struct ftj_stmt *s = new_stmt(P, FTJ_S_SET, off);
    if (!s)
        return FT_ENOMEM;
    TRY(parse_target(P, true, &s->target));
    if (is_op(CUR(P), FTJ_OP_ASSIGN)) {
        advance(P);
        TRY(parse_tuple(P, true, false, NULL, &s->expr));
        *out = s;
        return expect_block_end(P);
    }
    /* {% set x %}...{% endset %}, optionally {% set x | filter %} */
    s->kind = FTJ_S_SETBLOCK;
    if (s->target->kind != FTJ_E_NAME && s->target->kind != FTJ_E_ATTR)
        return perr(P, off, FT_EFORMAT, "a block set assigns a single name");
    bool saved_soft = P->soft;
    P->soft = false;
    if (is_op(CUR(P), FTJ_OP_PIPE)) {
        s->expr = NULL;
        TRY(parse_filter(P, &s->expr, false));
    }
    TRY(expect_block_end(P));
    const char *which;
    TRY(parse_body(P, ends, &s->body, &which));
    P->soft = saved_soft;
    *out = s;
    return expect_block_end(P);
}

static int parse_macro(struct parser *P, size_t off, struct ftj_stmt **out) {
    static const char *const ends[] = {"endmacro", NULL};
    struct ftj_stmt *s = new_stmt(P, FTJ_S_MACRO, off);
    if (!s)
        return FT_ENOMEM;
    TRY(parse_name(P, &s->name));
    TRY(expect_op(P, FTJ_OP_LPAREN, "'('"));
    bool saved_soft = P->soft;
    P->soft = false;
    size_t n = 0, cap = 0;
    struct ftj_param *params = NULL;
    bool seen_default = false;
    while (!is_op(CUR(P), FTJ_OP_RPAREN)) {
        if (n)
            TRY(expect_op(P, FTJ_OP_COMMA, "','"));
        if (is_op(CUR(P), FTJ_OP_RPAREN))
            break;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 4;
            struct ftj_param *np = ftj_alloc_array(&P->t->arena, ncap, sizeof(*np));
            if (!np)
                return FT_ENOMEM;
            if (n)
                memcpy(np, params, n * sizeof(*np));
            params = np;
            cap = ncap;
        }
        size_t poff = CUR(P)->off;
        TRY(parse_name(P, &params[n].name));
        params[n].def = NULL;
        if (is_op(CUR(P), FTJ_OP_ASSIGN)) {
            advance(P);
            TRY(parse_expression(P, true, &params[n].def));
            seen_default = true;
        } else if (seen_default) {
            return perr(P, poff, FT_EFORMAT, "non-default argument follows default argument");
        }
        n++;
    }
    advance(P);
    s->params = params;
    s->nparams = n;
    TRY(expect_block_end(P));
    const char *which;
    int saved_loops = P->loop_depth;
    P->loop_depth = 0;
    TRY(parse_body(P, ends, &s->body, &which));
    P->loop_depth = saved_loops;
    P->soft = saved_soft;
    *out = s;
    return expect_block_end(P);
}

static int parse_with(struct parser *P, size_t off, struct ftj_stmt **out) {
    static const char *const ends[] = {"endwith", NULL};
    struct ftj_stmt *s = new_stmt(P, FTJ_S_WITH, off);
    if (!s)
        return FT_ENOMEM;
    bool saved_soft = P->soft;
    P->soft = false;
    size_t n = 0, cap = 0;
    while (CUR(P)->type != FTJ_TK_BLOCK_END) {
        if (n)
            TRY(expect_op(P, FTJ_OP_COMMA, "','"));
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 4;
            struct ftj_param *np = ftj_alloc_array(&P->t->arena, ncap, sizeof(*np));
            if (!np)
                return FT_ENOMEM;
            if (n)
                memcpy(np, s->params, n * sizeof(*np));
            s->params = np;
            cap = ncap;
        }
        TRY(parse_name(P, &s->params[n].name));
        TRY(expect_op(P, FTJ_OP_ASSIGN, "'='"));
        TRY(parse_expression(P, true, &s->params[n].def));
        n++;
    }
    s->nparams = n;
    TRY(expect_block_end(P));
    const char *which;
    TRY(parse_body(P, ends, &s->body, &which));
    P->soft = saved_soft;
    *out = s;
    return expect_block_end(P);
}

/* `off` is where the tag's `{%` starts, for messages. */
static int parse_statement(struct parser *P, size_t off, struct ftj_stmt **out) {
    const struct ftj_token *t = CUR(P);
    if (t->type != FTJ_TK_NAME)
        return unexpected(P, "a statement name");
    struct ftj_str name = {t->p, t->n};
    advance(P);
#define IS(s) (name.n == strlen(s) && memcmp(name.p, s, name.n) == 0)
    if (IS("if"))
        return parse_if(P, off, out);
    if (IS("for"))
        return parse_for(P, off, out);
    if (IS("set"))
        return parse_set(P, off, out);
    if (IS("macro"))
        return parse_macro(P, off, out);
    if (IS("with"))
        return parse_with(P, off, out);
    if (IS("break") || IS("continue")) {
        if (P->loop_depth == 0)
            return perr(P, off, FT_EFORMAT, "'%.*s' outside a for loop", (int)name.n, name.p);
        struct ftj_stmt *s = new_stmt(P, IS("break") ? FTJ_S_BREAK : FTJ_S_CONTINUE, off);
        if (!s)
            return FT_ENOMEM;
        *out = s;
        return expect_block_end(P);
    }
    if (IS("filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        struct ftj_stmt *s = new_stmt(P, FTJ_S_FILTER, off);
        if (!s)
            return FT_ENOMEM;
        s->expr = NULL;
        TRY(parse_filter(P, &s->expr, true));
        TRY(expect_block_end(P));
        const char *which;
        bool saved_soft = P->soft;
        P->soft = false;
        TRY(parse_body(P, ends, &s->body, &which));
        P->soft = saved_soft;
        *out = s;
        return expect_block_end(P);
    }
    if (IS("generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        struct ftj_stmt *s = new_stmt(P, FTJ_S_GROUP, off);
        if (!s)
            return FT_ENOMEM;
        TRY(expect_block_end(P));
        const char *which;
        TRY(parse_body(P, ends, &s->body, &which));
        *out = s;
        return expect_block_end(P);
    }
    static const char *const unsupported[] = {"include", "import", "from", "extends", "block", "call", "do",
                                              "autoescape", "trans", "pluralize", "print"};
    if (in_list(unsupported, FT_ARRAY_LEN(unsupported), name))
        return perr(P, off, FT_EUNSUPPORTED, "'{%% %.*s %%}' is not supported", (int)name.n, name.p);
    return perr(P, off, FT_EFORMAT, "unexpected tag '%.*s'", (int)FT_MIN(name.n, 64), name.p);
#undef IS
}

/* Statements until `{% <one of ends>` (consumed, the name returned in
 * *which) or the end of the template (only when ends is NULL). */
static int parse_body(struct parser *P, const char *const *ends, struct ftj_stmt **out, const char **which) {
    TRY(enter(P, CUR(P)->off));
    struct ftj_stmt *head = NULL, **tail = &head;
    *which = NULL;
    for (;;) {
        const struct ftj_token *t = CUR(P);
        struct ftj_stmt *s = NULL;
        if (t->type == FTJ_TK_EOF) {
            if (ends)
                return perr(P, t->off, FT_EFORMAT, "unexpected end of template, expected '{%% %s %%}'", ends[0]);
            break;
        }
        if (t->type == FTJ_TK_TEXT) {
            s = new_stmt(P, FTJ_S_TEXT, t->off);
            if (!s)
                return FT_ENOMEM;
            s->text.p = t->p;
            s->text.n = t->n;
            advance(P);
        } else if (t->type == FTJ_TK_VAR_BEGIN) {
            advance(P);
            s = new_stmt(P, FTJ_S_OUT, t->off);
            if (!s)
                return FT_ENOMEM;
            TRY(parse_tuple(P, true, false, NULL, &s->expr));
            if (CUR(P)->type != FTJ_TK_VAR_END)
                return unexpected(P, "'}}'");
            advance(P);
        } else if (t->type == FTJ_TK_BLOCK_BEGIN) {
            const struct ftj_token *nm = peek(P, 1);
            for (const char *const *e = ends; e && *e; e++) {
                if (is_name(nm, *e)) {
                    advance(P);
                    advance(P);
                    *which = *e;
                    *tail = NULL;
                    *out = head;
                    P->depth--;
                    return 0;
                }
            }
            advance(P);
            TRY(parse_statement(P, t->off, &s));
        } else {
            return unexpected(P, "text or a tag");
        }
        *tail = s;
        tail = &s->next;
    }
    *out = head;
    P->depth--;
    return 0;
}

/* ----------------------------------------------------------------- entry */

int ftj_parse(const char *src, size_t len, const struct ftj_lex_opts *o, struct ftj_template **out) {
    *out = NULL;
    struct ftj_template *t = calloc(1, sizeof(*t));
    if (!t)
        return FT_ENOMEM;
    ftj_arena_init(&t->arena, 0);
    /* Normalize newlines as Jinja does before lexing. */
    char *s = ftj_alloc(&t->arena, len + 1);
    if (!s) {
        ftj_template_free(t);
        return FT_ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            s[k++] = src[i];
        }
    }
    if (!o->keep_trailing_newline && k > 0 && s[k - 1] == '\n')
        k--;
    s[k] = '\0';
    t->src = s;
    t->src_len = k;

    struct ftj_token *toks = NULL;
    size_t ntoks = 0;
    int rc = ftj_lex(t, o, &toks, &ntoks);
    if (rc) {
        ftj_template_free(t);
        return rc;
    }
    struct parser P = {.t = t, .tk = toks, .ntk = ntoks};
    const char *which;
    rc = parse_body(&P, NULL, &t->body, &which);
    if (!rc && P.n_unknown) {
        const struct ftj_expr *e = P.unknown[0];
        rc = perr(&P, e->off, FT_EUNSUPPORTED, "%s '%.*s' is not supported", e->kind == FTJ_E_FILTER ? "filter" : "test",
                  (int)FT_MIN(e->name.n, 64), e->name.p);
    }
    free(toks);
    if (rc) {
        ftj_template_free(t);
        return rc == FT_ENOMEM ? (FT_LOG_E("chat template: out of memory while parsing"), FT_ENOMEM) : rc;
    }
    *out = t;
    return 0;
}

void ftj_template_free(struct ftj_template *t) {
    if (!t)
        return;
    ftj_arena_free(&t->arena);
    free(t);
}
