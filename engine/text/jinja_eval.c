/* Evaluator of the Jinja-subset interpreter: walks the tree that
 * jinja_parse.c builds and writes the rendered text. The built-ins it calls
 * (tests, filters, methods, global functions) are jinja_builtins.c; the
 * value operations both use (errors, arguments, attributes, items, slices,
 * operators) jinja_ops.c; jinja_render.h holds the render state they share.
 *
 * Semantics follow Jinja2 with HF's chat-template environment
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
 * its tojson, raise_exception and strftime_now). Where they differ, on
 * purpose:
 *  - `.attr` and `[key]` on an undefined value give undefined instead of
 *    raising (as Jinja already does on `none`);
 *  - a string `+` none or undefined (either side) is the string, as in
 *    llama.cpp's engine, where Jinja raises: firefunction-v2 appends an
 *    unset `functions` and Command R+ an absent parameter description;
 *    any other `+` with none or undefined fails, as in Jinja;
 *  - upper/lower/title/capitalize map ASCII letters only; strip()/split()
 *    without arguments know all of Python's Unicode whitespace;
 *  - integers are 64-bit (overflow is an error, not a bignum);
 *  - str % args (printf-style formatting) is not supported.
 *
 * Scopes: one root frame (globals and top-level `set`), a fresh frame per
 * loop iteration (so `set` inside a loop does not leak, which is why
 * templates use namespace()), one per macro call (parent: the root) and per
 * `with`. `if` has no scope.
 *
 * Bounds (struct ftj_limits): output and captured blocks, scratch memory,
 * evaluation steps, loop iterations + macro calls, nesting depth, list size.
 * Hitting one stops the render with FT_ERANGE. The scratch arena is rolled
 * back after each `{{ }}`, `if` test and macro call that assigned no
 * namespace attribute, since nothing else can keep a value it created.
 */
#include "jinja_render.h"

#include "ft/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct ftj_limits ftj_default_limits = {
    .max_output = 16u << 20,
    .max_memory = 256u << 20,
    .max_steps = 50u * 1000 * 1000,
    .max_iterations = 1000u * 1000,
    .max_depth = 400,
    .max_list = 1000u * 1000,
};

enum { JX_BREAK = 1, JX_CONTINUE = 2 }; /* exec results besides 0 and FT_E* */

/* ---------------------------------------------------------------- output */

static int emit(struct ftj_render *R, size_t off, const char *s, size_t n) {
    CHARGE(R, n);
    if (R->out != &R->main_out) {
        if (n > R->lim.max_output || R->buffered > R->lim.max_output - n)
            return ftj_chk(R, off, FT_ERANGE, "output");
        R->buffered += n;
    }
    return ftj_chk(R, off, ftj_buf_put(R->out, s, n), "output");
}

static int emit_val(struct ftj_render *R, size_t off, struct ftj_val v) {
    if (v.type == FTJ_STR)
        return emit(R, off, v.u.s.p, v.u.s.n);
    size_t before = R->out->n;
    int rc = ftj_write_str(R->out, v);
    if (R->out != &R->main_out)
        R->buffered += R->out->n - before;
    return ftj_chk(R, off, rc, "output");
}

/* ---------------------------------------------------------------- scopes */

static struct var *frame_find(struct frame *f, struct ftj_str name) {
    for (size_t i = 0; i < f->n; i++)
        if (f->vars[i].name.n == name.n && memcmp(f->vars[i].name.p, name.p, name.n) == 0)
            return &f->vars[i];
    return NULL;
}

static int frame_set(struct ftj_render *R, struct frame *f, struct ftj_str name, struct ftj_val v, size_t off) {
    struct var *x = frame_find(f, name);
    if (x) {
        x->v = v;
        return 0;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        struct var *nv = ftj_alloc_array(&R->arena, cap, sizeof(*nv));
        if (!nv)
            return ftj_nomem(R, off);
        if (f->n)
            memcpy(nv, f->vars, f->n * sizeof(*nv));
        f->vars = nv;
        f->cap = cap;
    }
    f->vars[f->n].name = name;
    f->vars[f->n].v = v;
    f->n++;
    return 0;
}

static struct ftj_val lookup(struct ftj_render *R, struct ftj_str name) {
    for (struct frame *f = R->frame; f; f = f->parent) {
        struct var *x = frame_find(f, name);
        if (x)
            return x->v;
    }
    return ftj_undef_named(name);
}

/* ------------------------------------------------------------ iteration */

static int count_iteration(struct ftj_render *R, size_t off) {
    if (++R->iters > R->lim.max_iterations)
        return ftj_fail(R, off, FT_ERANGE, "more than %llu loop iterations and macro calls",
                        (unsigned long long)R->lim.max_iterations);
    return 0;
}

/* ---------------------------------------------------------- evaluation */

static int eval(struct ftj_render *R, const struct ftj_expr *e, struct ftj_val *out);
static int exec_body(struct ftj_render *R, const struct ftj_stmt *s);

static int enter(struct ftj_render *R, size_t off) {
    if (++R->depth > R->lim.max_depth)
        return ftj_fail(R, off, FT_ERANGE, "nested deeper than %d levels", R->lim.max_depth);
    if (++R->steps > R->lim.max_steps)
        return ftj_fail(R, off, FT_ERANGE, "more than %llu evaluation steps", (unsigned long long)R->lim.max_steps);
    return 0;
}

static int eval_args(struct ftj_render *R, const struct ftj_expr *e, struct args *a) {
    memset(a, 0, sizeof(*a));
    if (e->nargs) {
        ALLOC(a->pos, e->nargs * sizeof(struct ftj_val), e->off);
        for (size_t i = 0; i < e->nargs; i++)
            TRY(eval(R, e->args[i], &a->pos[i]));
        a->npos = e->nargs;
    }
    if (e->nkw) {
        ALLOC(a->kwv, e->nkw * sizeof(struct ftj_val), e->off);
        for (size_t i = 0; i < e->nkw; i++)
            TRY(eval(R, e->kw[i].val, &a->kwv[i]));
        a->kwx = e->kw;
        a->nkw = e->nkw;
    }
    return 0;
}

/* Run `body` with output captured into a string value. */
static int capture(struct ftj_render *R, size_t off, const struct ftj_stmt *body, struct ftj_val *out, int *flow) {
    struct ftj_buf b = {.limit = R->lim.max_output};
    struct ftj_buf *saved = R->out;
    R->out = &b;
    int rc = exec_body(R, body);
    R->out = saved;
    R->buffered -= FT_MIN(R->buffered, b.n);
    *flow = rc > 0 ? rc : 0;
    if (rc >= 0)
        rc = ftj_buf_to_val(R, off, &b, out);
    ftj_buf_free(&b);
    return rc;
}

/* A macro call runs in its own scope and returns its output as a string.
 * Everything it allocates is garbage once it returns, unless it stored a
 * value into a namespace, so the arena is rolled back when it did not. */
static int call_macro(struct ftj_render *R, size_t off, const struct ftj_stmt *m, const struct args *a,
                      struct ftj_val *out) {
    TRY(count_iteration(R, off));
    struct ftj_mark mark = ftj_arena_mark(&R->arena);
    uint64_t ns_writes = R->ns_writes;
    if (a->npos > m->nparams)
        return ftj_fail(R, off, FT_EINVAL, "macro '%.*s' takes at most %zu argument(s), %zu given", (int)m->name.n,
                        m->name.p, m->nparams, a->npos);
    struct frame f = {.parent = &R->root};
    struct frame *saved = R->frame;
    for (size_t k = 0; k < a->nkw; k++) {
        size_t j;
        for (j = 0; j < m->nparams; j++)
            if (m->params[j].name.n == a->kwx[k].name.n &&
                memcmp(m->params[j].name.p, a->kwx[k].name.p, a->kwx[k].name.n) == 0)
                break;
        if (j == m->nparams)
            return ftj_fail(R, off, FT_EINVAL, "macro '%.*s' has no argument '%.*s'", (int)m->name.n, m->name.p,
                            (int)FT_MIN(a->kwx[k].name.n, 64), a->kwx[k].name.p);
    }
    for (size_t j = 0; j < m->nparams; j++) {
        struct ftj_val v;
        if (!ftj_arg_get(a, j, NULL, &v)) {
            bool found = false;
            for (size_t k = 0; k < a->nkw && !found; k++)
                if (m->params[j].name.n == a->kwx[k].name.n &&
                    memcmp(m->params[j].name.p, a->kwx[k].name.p, a->kwx[k].name.n) == 0) {
                    v = a->kwv[k];
                    found = true;
                }
            if (!found) {
                if (m->params[j].def) {
                    R->frame = &f;
                    int rc = eval(R, m->params[j].def, &v);
                    R->frame = saved;
                    TRY(rc);
                } else {
                    v = ftj_undef_named(m->params[j].name);
                }
            }
        }
        TRY(frame_set(R, &f, m->params[j].name, v, off));
    }
    struct ftj_buf b = {.limit = R->lim.max_output};
    struct ftj_buf *saved_out = R->out;
    R->frame = &f;
    R->out = &b;
    int rc = exec_body(R, m->body);
    R->out = saved_out;
    R->frame = saved;
    R->buffered -= FT_MIN(R->buffered, b.n);
    if (R->ns_writes == ns_writes)
        ftj_arena_release(&R->arena, mark);
    if (rc >= 0)
        rc = ftj_buf_to_val(R, off, &b, out);
    ftj_buf_free(&b);
    return rc;
}

static int eval_call(struct ftj_render *R, const struct ftj_expr *e, struct ftj_val *out) {
    struct args a;
    if (e->a->kind == FTJ_E_ATTR) {
        struct ftj_val obj;
        TRY(eval(R, e->a->a, &obj));
        TRY(eval_args(R, e, &a));
        /* a macro stored in a namespace/dict is called like a method */
        struct ftj_val attr = ftj_get_attr(obj, e->a->name);
        if (e->id < 0 || attr.type == FTJ_MACRO) {
            if (attr.type == FTJ_MACRO)
                return call_macro(R, e->off, attr.u.macro, &a, out);
            if (attr.type == FTJ_FUNC)
                return ftj_call_func(R, e->off, attr.u.func, &a, out);
        }
        return ftj_call_method(R, e, obj, &a, out);
    }
    struct ftj_val callee;
    TRY(eval(R, e->a, &callee));
    if (callee.type == FTJ_UNDEF) {
        if (callee.u.s.n)
            return ftj_fail(R, e->off, FT_EUNSUPPORTED, "function '%.*s' is not defined", (int)FT_MIN(callee.u.s.n, 64),
                            callee.u.s.p);
        return ftj_fail(R, e->off, FT_EINVAL, "cannot call an undefined value");
    }
    if (callee.type != FTJ_MACRO && callee.type != FTJ_FUNC)
        return ftj_fail(R, e->off, FT_EINVAL, "'%s' object is not callable", ftj_type_name(callee));
    TRY(eval_args(R, e, &a));
    if (callee.type == FTJ_MACRO)
        return call_macro(R, e->off, callee.u.macro, &a, out);
    return ftj_call_func(R, e->off, callee.u.func, &a, out);
}

static int eval_inner(struct ftj_render *R, const struct ftj_expr *e, struct ftj_val *out) {
    struct ftj_val a, b;
    switch (e->kind) {
    case FTJ_E_LIT: *out = e->lit; return 0;
    case FTJ_E_NAME: *out = lookup(R, e->name); return 0;
    case FTJ_E_LIST:
    case FTJ_E_TUPLE: {
        struct ftj_list *l;
        TRY(ftj_new_list(R, e->off, e->nargs, e->kind == FTJ_E_TUPLE, &l));
        for (size_t i = 0; i < e->nargs; i++)
            TRY(eval(R, e->args[i], &l->v[i]));
        *out = ftj_list_val(l);
        return 0;
    }
    case FTJ_E_DICT: {
        struct ftj_dict *d = ftj_dict_new(&R->arena, e->nargs);
        if (!d)
            return ftj_nomem(R, e->off);
        for (size_t i = 0; i < e->nargs; i++) {
            TRY(eval(R, e->args[i], &a));
            TRY(eval(R, e->kw[i].val, &b));
            if (a.type != FTJ_STR && a.type != FTJ_INT && a.type != FTJ_BOOL && a.type != FTJ_NONE &&
                a.type != FTJ_FLOAT && !(a.type == FTJ_LIST && a.u.list->tuple))
                return ftj_fail(R, e->off, FT_EINVAL, "unhashable dict key of type %s", ftj_type_name(a));
            if (ftj_dict_set(&R->arena, d, a, b))
                return ftj_nomem(R, e->off);
        }
        *out = ftj_dict_val(d, false);
        return 0;
    }
    case FTJ_E_ATTR:
        TRY(eval(R, e->a, &a));
        *out = ftj_get_attr(a, e->name);
        return 0;
    case FTJ_E_INDEX:
        TRY(eval(R, e->a, &a));
        TRY(eval(R, e->b, &b));
        return ftj_get_item(R, e->off, a, b, out);
    case FTJ_E_SLICE: {
        struct ftj_val s = ftj_none(), t = ftj_none(), st = ftj_none();
        TRY(eval(R, e->a, &a));
        if (e->b)
            TRY(eval(R, e->b, &s));
        if (e->c)
            TRY(eval(R, e->c, &t));
        if (e->d)
            TRY(eval(R, e->d, &st));
        return ftj_do_slice(R, e->off, a, s, t, st, out);
    }
    case FTJ_E_CALL: return eval_call(R, e, out);
    case FTJ_E_FILTER: {
        struct args args;
        if (e->id < 0)
            return ftj_fail(R, e->off, FT_EUNSUPPORTED, "filter '%.*s' is not supported", (int)FT_MIN(e->name.n, 64),
                            e->name.p);
        if (e->a)
            TRY(eval(R, e->a, &a));
        else
            a = R->block_input;
        TRY(eval_args(R, e, &args));
        return ftj_apply_filter_id(R, e->off, e->id, a, &args, out);
    }
    case FTJ_E_TEST: {
        struct args args;
        bool r;
        if (e->id < 0)
            return ftj_fail(R, e->off, FT_EUNSUPPORTED, "test '%.*s' is not supported", (int)FT_MIN(e->name.n, 64),
                            e->name.p);
        TRY(eval(R, e->a, &a));
        TRY(eval_args(R, e, &args));
        TRY(ftj_run_test(R, e->off, e->id, a, args.pos, args.npos, &r));
        *out = ftj_bool(r != e->negate);
        return 0;
    }
    case FTJ_E_NEG:
    case FTJ_E_POS:
        TRY(eval(R, e->a, &a));
        if (!ftj_is_number(a))
            return ftj_fail(R, e->off, FT_EINVAL, "bad operand type for unary %c: %s", e->kind == FTJ_E_NEG ? '-' : '+',
                            ftj_type_name(a));
        if (e->kind == FTJ_E_POS) {
            *out = a.type == FTJ_BOOL ? ftj_int(a.u.b) : a;
        } else if (a.type == FTJ_FLOAT) {
            *out = ftj_float(-a.u.f);
        } else {
            if (ftj_as_i(a) == INT64_MIN)
                return ftj_fail(R, e->off, FT_ERANGE, "integer overflow in unary -");
            *out = ftj_int(-ftj_as_i(a));
        }
        return 0;
    case FTJ_E_NOT:
        TRY(eval(R, e->a, &a));
        *out = ftj_bool(!ftj_truthy(a));
        return 0;
    case FTJ_E_AND:
    case FTJ_E_OR:
        TRY(eval(R, e->a, &a));
        if (ftj_truthy(a) == (e->kind == FTJ_E_OR)) {
            *out = a;
            return 0;
        }
        return eval(R, e->b, out);
    case FTJ_E_BIN:
        TRY(eval(R, e->a, &a));
        TRY(eval(R, e->b, &b));
        return ftj_binop(R, e->off, e->op, a, b, out);
    case FTJ_E_CMP: {
        TRY(eval(R, e->a, &a));
        for (size_t i = 0; i < e->nargs; i++) {
            bool r;
            TRY(eval(R, e->args[i], &b));
            TRY(ftj_compare_op(R, e->args[i]->off, e->ops[i], a, b, &r));
            if (!r) {
                *out = ftj_bool(false);
                return 0;
            }
            a = b;
        }
        *out = ftj_bool(true);
        return 0;
    }
    case FTJ_E_COND:
        TRY(eval(R, e->a, &a));
        if (ftj_truthy(a))
            return eval(R, e->b, out);
        if (e->c)
            return eval(R, e->c, out);
        *out = ftj_undef();
        return 0;
    default: return ftj_fail(R, e->off, FT_EUNSUPPORTED, "expression not implemented");
    }
}

static int eval(struct ftj_render *R, const struct ftj_expr *e, struct ftj_val *out) {
    TRY(enter(R, e->off));
    int rc = eval_inner(R, e, out);
    R->depth--;
    return rc;
}

/* ------------------------------------------------------------ statements */

static int assign(struct ftj_render *R, const struct ftj_expr *target, struct ftj_val v) {
    switch (target->kind) {
    case FTJ_E_NAME: return frame_set(R, R->frame, target->name, v, target->off);
    case FTJ_E_TUPLE: {
        if (v.type != FTJ_LIST) {
            struct ftj_list *l;
            TRY(ftj_iterate(R, target->off, v, &l));
            v = ftj_list_val(l);
        }
        if (v.u.list->n != target->nargs)
            return ftj_fail(R, target->off, FT_EINVAL, "cannot unpack %zu values into %zu names", v.u.list->n,
                            target->nargs);
        for (size_t i = 0; i < target->nargs; i++)
            TRY(frame_set(R, R->frame, target->args[i]->name, v.u.list->v[i], target->off));
        return 0;
    }
    case FTJ_E_ATTR: {
        struct ftj_val obj = lookup(R, target->a->name);
        if (obj.type != FTJ_NS)
            return ftj_fail(R, target->off, FT_EINVAL, "cannot assign attribute on a %s (only on namespace())",
                            ftj_type_name(obj));
        R->ns_writes++;
        if (ftj_dict_set(&R->arena, obj.u.dict, ftj_strv(target->name.p, target->name.n), v))
            return ftj_nomem(R, target->off);
        return 0;
    }
    default: return ftj_fail(R, target->off, FT_EINVAL, "cannot assign to this expression");
    }
}

/* Evaluate a value that nothing keeps (an output, or a condition whose
 * truth goes to *truth), and roll the arena back afterwards. Expressions
 * have no side effects except through macros that assign namespace
 * attributes, so the roll-back is skipped when one did. */
static int eval_transient(struct ftj_render *R, const struct ftj_expr *e, bool *truth) {
    struct ftj_mark m = ftj_arena_mark(&R->arena);
    uint64_t ns_writes = R->ns_writes;
    struct ftj_val v;
    int rc = eval(R, e, &v);
    if (!rc) {
        if (truth)
            *truth = ftj_truthy(v);
        else
            rc = emit_val(R, e->off, v);
    }
    if (R->ns_writes == ns_writes)
        ftj_arena_release(&R->arena, m);
    return rc;
}

static int exec_for(struct ftj_render *R, const struct ftj_stmt *s) {
    struct ftj_val it;
    TRY(eval(R, s->expr, &it));
    struct ftj_list *items;
    TRY(ftj_iterate(R, s->off, it, &items));
    /* Copy: a loop must not see a namespace it iterates change under it. */
    struct frame f = {.parent = R->frame};
    struct frame *saved = R->frame;
    int rc = 0;
    if (s->cond) {
        struct ftj_list *kept;
        TRY(ftj_new_list(R, s->off, items->n, false, &kept));
        kept->n = 0;
        R->frame = &f;
        for (size_t i = 0; i < items->n && !rc; i++) {
            struct ftj_val c;
            f.n = 0;
            rc = count_iteration(R, s->off);
            if (!rc)
                rc = assign(R, s->target, items->v[i]);
            if (!rc)
                rc = eval(R, s->cond, &c);
            if (!rc && ftj_truthy(c))
                kept->v[kept->n++] = items->v[i];
        }
        R->frame = saved;
        TRY(rc);
        items = kept;
    }
    if (items->n == 0)
        return s->orelse ? exec_body(R, s->orelse) : 0;
    struct ftj_loop *loop;
    ALLOC(loop, sizeof(*loop), s->off);
    loop->length = (int64_t)items->n;
    struct ftj_val loopv = {.type = FTJ_LOOP, .u.loop = loop};
    static const struct ftj_str loop_name = {"loop", 4};
    R->frame = &f;
    for (size_t i = 0; i < items->n; i++) {
        rc = count_iteration(R, s->off);
        if (rc)
            break;
        f.n = 0; /* each iteration starts from a fresh scope */
        loop->index0 = (int64_t)i;
        loop->prev = i ? items->v[i - 1] : ftj_undef();
        loop->next = i + 1 < items->n ? items->v[i + 1] : ftj_undef();
        rc = frame_set(R, &f, loop_name, loopv, s->off);
        if (!rc)
            rc = assign(R, s->target, items->v[i]);
        if (!rc)
            rc = exec_body(R, s->body);
        if (rc == JX_CONTINUE)
            rc = 0;
        if (rc)
            break;
    }
    R->frame = saved;
    return rc == JX_BREAK ? 0 : rc;
}

static int exec_stmt(struct ftj_render *R, const struct ftj_stmt *s) {
    switch (s->kind) {
    case FTJ_S_TEXT: return emit(R, s->off, s->text.p, s->text.n);
    case FTJ_S_OUT: return eval_transient(R, s->expr, NULL);
    case FTJ_S_IF:
        for (;;) {
            bool t;
            TRY(eval_transient(R, s->expr, &t));
            if (t)
                return exec_body(R, s->body);
            const struct ftj_stmt *e = s->orelse;
            if (e && e->kind == FTJ_S_IF && e->name.p && !e->next) {
                s = e; /* elif: walk the chain without recursing */
                TRY(enter(R, s->off));
                R->depth--;
                continue;
            }
            return exec_body(R, e);
        }
    case FTJ_S_FOR: return exec_for(R, s);
    case FTJ_S_SET: {
        struct ftj_val v;
        TRY(eval(R, s->expr, &v));
        return assign(R, s->target, v);
    }
    case FTJ_S_SETBLOCK:
    case FTJ_S_FILTER: {
        struct ftj_val v;
        int flow;
        TRY(capture(R, s->off, s->body, &v, &flow));
        if (s->expr) {
            struct ftj_val saved = R->block_input;
            R->block_input = v;
            int rc = eval(R, s->expr, &v);
            R->block_input = saved;
            TRY(rc);
        }
        if (s->kind == FTJ_S_SETBLOCK)
            TRY(assign(R, s->target, v));
        else
            TRY(emit_val(R, s->off, v));
        return flow;
    }
    case FTJ_S_MACRO: {
        struct ftj_val v = {.type = FTJ_MACRO, .u.macro = s};
        return frame_set(R, R->frame, s->name, v, s->off);
    }
    case FTJ_S_BREAK: return JX_BREAK;
    case FTJ_S_CONTINUE: return JX_CONTINUE;
    case FTJ_S_WITH: {
        struct frame f = {.parent = R->frame};
        struct frame *saved = R->frame;
        R->frame = &f;
        int rc = 0;
        for (size_t i = 0; i < s->nparams && !rc; i++) {
            struct ftj_val v;
            rc = eval(R, s->params[i].def, &v);
            if (!rc)
                rc = frame_set(R, &f, s->params[i].name, v, s->off);
        }
        if (!rc)
            rc = exec_body(R, s->body);
        R->frame = saved;
        return rc;
    }
    case FTJ_S_GROUP: return exec_body(R, s->body);
    default: return ftj_fail(R, s->off, FT_EUNSUPPORTED, "statement not implemented");
    }
}

static int exec_body(struct ftj_render *R, const struct ftj_stmt *s) {
    for (; s; s = s->next) {
        TRY(enter(R, s->off));
        int rc = exec_stmt(R, s);
        R->depth--;
        if (rc)
            return rc;
    }
    return 0;
}

/* ----------------------------------------------------------------- API */

int ftj_render_new(const struct ftj_template *t, const struct ftj_limits *lim, struct ftj_render **out) {
    *out = NULL;
    struct ftj_render *R = calloc(1, sizeof(*R));
    if (!R)
        return FT_ENOMEM;
    R->t = t;
    R->lim = lim ? *lim : ftj_default_limits;
    ftj_arena_init(&R->arena, R->lim.max_memory);
    R->frame = &R->root;
    R->main_out.limit = R->lim.max_output;
    R->out = &R->main_out;
    static const struct {
        const char *name;
        int fn;
    } funcs[] = {
        {"range", FTJ_F_RANGE},
        {"namespace", FTJ_F_NAMESPACE},
        {"dict", FTJ_F_DICT},
        {"raise_exception", FTJ_F_RAISE},
        {"strftime_now", FTJ_F_STRFTIME},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(funcs); i++) {
        struct ftj_val v = {.type = FTJ_FUNC, .u.func = funcs[i].fn};
        if (ftj_render_set(R, funcs[i].name, v)) {
            ftj_render_free(R);
            return FT_ENOMEM;
        }
    }
    *out = R;
    return 0;
}

void ftj_render_free(struct ftj_render *r) {
    if (!r)
        return;
    ftj_arena_free(&r->arena);
    ftj_buf_free(&r->main_out);
    free(r);
}

struct ftj_arena *ftj_render_arena(struct ftj_render *r) { return &r->arena; }

void ftj_render_set_time(struct ftj_render *r, int64_t now) { r->now = now; }

void ftj_render_set_quiet(struct ftj_render *r, bool quiet) { r->quiet = quiet; }

int ftj_render_set(struct ftj_render *r, const char *name, struct ftj_val v) {
    struct ftj_str n = {name, strlen(name)};
    r->failed = true; /* frame_set logs through ftj_fail() only on OOM; keep set-up quiet */
    int rc = frame_set(r, &r->root, n, v, 0);
    r->failed = false;
    return rc;
}

int ftj_render_run(struct ftj_render *R, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    int rc = exec_body(R, R->t->body);
    if (rc > 0)
        rc = 0; /* break/continue cannot escape a loop (the parser checks) */
    if (rc) {
        if (!R->failed && !R->quiet)
            FT_LOG_E("chat template: render failed: %s", ft_strerror(rc));
        return rc;
    }
    if (!R->main_out.p) {
        R->main_out.p = malloc(1);
        if (!R->main_out.p) {
            FT_LOG_E("chat template: out of memory");
            return FT_ENOMEM;
        }
        R->main_out.p[0] = '\0';
    }
    *out = R->main_out.p;
    *out_len = R->main_out.n;
    R->main_out.p = NULL;
    R->main_out.n = R->main_out.cap = 0;
    return 0;
}
