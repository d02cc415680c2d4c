/* The render state of the Jinja interpreter and what its three parts
 * share: the evaluator (jinja_eval.c: scopes, expressions, statements, the
 * render API of jinja.h), the value operations it and the built-ins use
 * (jinja_ops.c: errors and allocation in a render, str(), arguments,
 * iteration, attributes, items and slices, the operators), and the
 * built-ins (jinja_builtins.c: tests, filters, methods, global functions).
 * jinja_eval.c calls the built-ins through the four ftj_run_test,
 * ftj_apply_filter_id, ftj_call_method and ftj_call_func; the built-ins
 * call only jinja_ops.c and jinja_value.c, never back into the evaluator.
 * Not a public header: only these files include it. */
#ifndef FT_JINJA_RENDER_H
#define FT_JINJA_RENDER_H

#include "jinja.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct var {
    struct ftj_str name;
    struct ftj_val v;
};

struct frame {
    struct frame *parent;
    struct var *vars;
    size_t n, cap;
};

struct ftj_render {
    const struct ftj_template *t;
    struct ftj_limits lim;
    struct ftj_arena arena;
    struct frame root;
    struct frame *frame;
    struct ftj_buf main_out;
    struct ftj_buf *out;
    size_t buffered; /* bytes in capture buffers still being filled */
    uint64_t steps, iters;
    uint64_t ns_writes; /* namespace attribute assignments so far (see eval_transient) */
    int depth;
    struct ftj_val block_input; /* the text a {% filter %} / block set applies its filters to */
    bool failed;
    int64_t now; /* what strftime_now() formats (seconds since the epoch); 0: the current time */
    bool quiet;  /* log nothing: a trial render whose failure is an answer */
};

/* positional + keyword arguments of a call, evaluated */
struct args {
    struct ftj_val *pos;
    size_t npos;
    struct ftj_kwarg *kwx; /* names from the tree */
    struct ftj_val *kwv;
    size_t nkw;
};

/* Work on long strings and lists is charged to the step budget (one step
 * per 64 bytes allocated, searched or written, one per list item searched
 * or sorted), so a template cannot spin for long on a few cheap-looking
 * steps. The budget is checked at the next evaluation step. */
#define CHARGE(R, bytes) ((R)->steps += (uint64_t)(bytes) >> 6)

#define ALLOC(var, n, off)                    \
    do {                                      \
        (var) = ftj_ralloc(R, (n));               \
        if (!(var))                           \
            return ftj_nomem(R, (off));           \
    } while (0)

/* ---- errors and allocation (jinja_ops.c) ---- */

/* Log one error at template offset off (once per render) and return rc. */
int ftj_fail(struct ftj_render *R, size_t off, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Map a raw error code from a helper (buffer, arena, value.c) to a logged one. */
int ftj_chk(struct ftj_render *R, size_t off, int rc, const char *what);
/* n bytes of the render's arena, charged to the step budget. */
void *ftj_ralloc(struct ftj_render *R, size_t n);
int ftj_nomem(struct ftj_render *R, size_t off);
/* A list of n items (within the list limit). */
int ftj_new_list(struct ftj_render *R, size_t off, size_t n, bool tuple, struct ftj_list **out);

static inline struct ftj_val ftj_list_val(struct ftj_list *l) {
    struct ftj_val v = {.type = FTJ_LIST, .u.list = l};
    return v;
}
static inline struct ftj_val ftj_dict_val(struct ftj_dict *d, bool ns) {
    struct ftj_val v = {.type = (uint8_t)(ns ? FTJ_NS : FTJ_DICT), .u.dict = d};
    return v;
}
static inline struct ftj_val ftj_undef_named(struct ftj_str name) {
    struct ftj_val v = {.type = FTJ_UNDEF, .u.s = name};
    return v;
}
static inline bool ftj_is_number(struct ftj_val v) {
    return v.type == FTJ_INT || v.type == FTJ_FLOAT || v.type == FTJ_BOOL;
}
static inline double ftj_as_f(struct ftj_val v) {
    return v.type == FTJ_FLOAT ? v.u.f : v.type == FTJ_INT ? (double)v.u.i : (double)v.u.b;
}
static inline int64_t ftj_as_i(struct ftj_val v) { return v.type == FTJ_INT ? v.u.i : (int64_t)v.u.b; }

/* ---- strings and arguments (jinja_ops.c) ---- */

/* str(v) as a string value in the arena. */
int ftj_to_str(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_str *out);
/* Copy a finished buffer into the arena as a string value. */
int ftj_buf_to_val(struct ftj_render *R, size_t off, const struct ftj_buf *b, struct ftj_val *out);
/* The first needle in hay at or after from; NULL if none. */
const char *ftj_memmem(struct ftj_str hay, size_t from, struct ftj_str needle);
/* Argument i, or the keyword argument name (NULL: positional only). */
bool ftj_arg_get(const struct args *a, size_t i, const char *name, struct ftj_val *out);
int ftj_arg_int(struct ftj_render *R, size_t off, const char *what, struct ftj_val v, int64_t *out);

/* ---- values (jinja_ops.c) ---- */

/* The items a `for` loop or a filter walks over. */
int ftj_iterate(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_list **out);
struct ftj_val ftj_get_attr(struct ftj_val v, struct ftj_str name);
int ftj_get_item(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_val key, struct ftj_val *out);
int ftj_do_slice(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_val vs, struct ftj_val ve,
                 struct ftj_val vst, struct ftj_val *out);
/* a op b for the arithmetic operators and ~ (FTJ_OP_*). */
int ftj_binop(struct ftj_render *R, size_t off, int op, struct ftj_val a, struct ftj_val b, struct ftj_val *out);
/* item in container. */
int ftj_contains(struct ftj_render *R, size_t off, struct ftj_val container, struct ftj_val item, bool *out);
/* a op b for the comparisons and `in` / `not in`. */
int ftj_compare_op(struct ftj_render *R, size_t off, int op, struct ftj_val a, struct ftj_val b, bool *out);

/* ---- built-ins (jinja_builtins.c) ---- */

/* `v is <test id>(args)`. */
int ftj_run_test(struct ftj_render *R, size_t off, int id, struct ftj_val v, const struct ftj_val *args,
                 size_t nargs, bool *out);
/* `v | <filter id>(args)`. */
int ftj_apply_filter_id(struct ftj_render *R, size_t off, int id, struct ftj_val v, const struct args *a,
                        struct ftj_val *out);
/* obj.<method>(args) of a string, list or dict (e->id: FTJ_M_*). */
int ftj_call_method(struct ftj_render *R, const struct ftj_expr *e, struct ftj_val obj, const struct args *a,
                    struct ftj_val *out);
/* A global function (FTJ_F_*): range, dict, namespace, joiner, cycler,
 * raise_exception, strftime_now. */
int ftj_call_func(struct ftj_render *R, size_t off, int fn, const struct args *a, struct ftj_val *out);

#endif
