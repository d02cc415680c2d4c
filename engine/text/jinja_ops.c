/* The value operations of the Jinja interpreter that the evaluator
 * (jinja_eval.c) and the built-ins (jinja_builtins.c) share: errors and
 * allocation within a render's limits, str() of a value, call arguments,
 * iteration, attributes, items and slices, and the operators, with
 * Jinja's semantics (jinja_eval.c's opening comment lists where they
 * differ on purpose). Declared in jinja_render.h. */
#include "jinja_render.h"

#include "ft/common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- errors */

int ftj_fail(struct ftj_render *R, size_t off, int rc, const char *fmt, ...) {
    if (R->failed)
        return rc;
    R->failed = true;
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    int line, col;
    ftj_position(R->t, off, &line, &col);
    if (!R->quiet)
        FT_LOG_E("chat template: line %d, column %d: %s", line, col, msg);
    return rc;
}

/* Map a raw error code from a helper (buffer, arena, value.c) to a logged one. */
int ftj_chk(struct ftj_render *R, size_t off, int rc, const char *what) {
    if (rc == 0 || R->failed)
        return rc;
    switch (rc) {
    case FT_ERANGE:
        return ftj_fail(R, off, rc, "%s: output larger than %zu bytes, or data nested deeper than %d", what,
                        R->lim.max_output, FTJ_MAX_DATA_DEPTH);
    case FT_ENOMEM:
        if (R->arena.over_limit)
            return ftj_fail(R, off, FT_ERANGE, "%s: render memory limit (%zu bytes) reached", what, R->lim.max_memory);
        return ftj_fail(R, off, rc, "%s: out of memory", what);
    default: return ftj_fail(R, off, rc, "%s failed", what);
    }
}

void *ftj_ralloc(struct ftj_render *R, size_t n) {
    CHARGE(R, n);
    return ftj_alloc(&R->arena, n);
}

int ftj_nomem(struct ftj_render *R, size_t off) { return ftj_chk(R, off, FT_ENOMEM, "allocation"); }

int ftj_new_list(struct ftj_render *R, size_t off, size_t n, bool tuple, struct ftj_list **out) {
    if (n > R->lim.max_list)
        return ftj_fail(R, off, FT_ERANGE, "a list of %zu items exceeds the limit of %zu", n, R->lim.max_list);
    *out = ftj_list_new(&R->arena, n, tuple);
    return *out ? 0 : ftj_nomem(R, off);
}

/* ---------------------------------------------------------------- strings */

/* str(v) as a string value in the arena. */
int ftj_to_str(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_str *out) {
    if (v.type == FTJ_STR) {
        *out = v.u.s;
        return 0;
    }
    struct ftj_buf b = {.limit = R->lim.max_output};
    int rc = ftj_write_str(&b, v);
    if (rc) {
        ftj_buf_free(&b);
        return ftj_chk(R, off, rc, "string conversion");
    }
    char *p = ftj_ralloc(R, b.n + 1);
    if (!p) {
        ftj_buf_free(&b);
        return ftj_nomem(R, off);
    }
    if (b.n)
        memcpy(p, b.p, b.n);
    p[b.n] = '\0';
    out->p = p;
    out->n = b.n;
    ftj_buf_free(&b);
    return 0;
}

/* Copy a finished buffer into the arena as a string value. */
int ftj_buf_to_val(struct ftj_render *R, size_t off, const struct ftj_buf *b, struct ftj_val *out) {
    char *p;
    ALLOC(p, b->n + 1, off);
    if (b->n)
        memcpy(p, b->p, b->n);
    p[b->n] = '\0';
    *out = ftj_strv(p, b->n);
    return 0;
}

const char *ftj_memmem(struct ftj_str hay, size_t from, struct ftj_str needle) {
    if (from > hay.n || needle.n > hay.n - from)
        return NULL;
    if (needle.n == 0)
        return hay.p + from;
    return memmem(hay.p + from, hay.n - from, needle.p, needle.n);
}

/* ---------------------------------------------------------------- args */

bool ftj_arg_get(const struct args *a, size_t i, const char *name, struct ftj_val *out) {
    if (i < a->npos) {
        *out = a->pos[i];
        return true;
    }
    for (size_t k = 0; name && k < a->nkw; k++) {
        if (a->kwx[k].name.n == strlen(name) && memcmp(a->kwx[k].name.p, name, a->kwx[k].name.n) == 0) {
            *out = a->kwv[k];
            return true;
        }
    }
    return false;
}

/* Reject extra positional arguments and unknown keywords. `names` is a
 * NULL-terminated list of the accepted parameters, in positional order. */
int ftj_arg_int(struct ftj_render *R, size_t off, const char *what, struct ftj_val v, int64_t *out) {
    *out = 0;
    if (v.type == FTJ_INT)
        *out = v.u.i;
    else if (v.type == FTJ_BOOL)
        *out = v.u.b;
    else
        return ftj_fail(R, off, FT_EINVAL, "%s: expected an integer, got %s", what, ftj_type_name(v));
    return 0;
}

/* ------------------------------------------------------------ iteration */

/* The items a `for` loop or a filter walks over. */
int ftj_iterate(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_list **out) {
    switch (v.type) {
    case FTJ_LIST: *out = v.u.list; return 0;
    case FTJ_UNDEF: return ftj_new_list(R, off, 0, false, out);
    case FTJ_DICT:
    case FTJ_NS: {
        TRY(ftj_new_list(R, off, v.u.dict->n, false, out));
        for (size_t i = 0; i < v.u.dict->n; i++)
            (*out)->v[i] = v.u.dict->k[i];
        return 0;
    }
    case FTJ_STR: {
        size_t n = ftj_utf8_count(v.u.s.p, v.u.s.n);
        TRY(ftj_new_list(R, off, n, false, out));
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            size_t nx = ftj_utf8_next(v.u.s.p, v.u.s.n, o);
            (*out)->v[i] = ftj_strv(v.u.s.p + o, nx - o);
            o = nx;
        }
        return 0;
    }
    default: return ftj_fail(R, off, FT_EINVAL, "'%s' object is not iterable", ftj_type_name(v));
    }
}

/* ------------------------------------------------------- attribute/item */

static struct ftj_val loop_attr(const struct ftj_loop *l, struct ftj_str name) {
#define IS(s) (name.n == strlen(s) && memcmp(name.p, s, name.n) == 0)
    if (IS("index0"))
        return ftj_int(l->index0);
    if (IS("index"))
        return ftj_int(l->index0 + 1);
    if (IS("revindex"))
        return ftj_int(l->length - l->index0);
    if (IS("revindex0"))
        return ftj_int(l->length - l->index0 - 1);
    if (IS("first"))
        return ftj_bool(l->index0 == 0);
    if (IS("last"))
        return ftj_bool(l->index0 == l->length - 1);
    if (IS("length"))
        return ftj_int(l->length);
    if (IS("previtem"))
        return l->prev;
    if (IS("nextitem"))
        return l->next;
    if (IS("depth"))
        return ftj_int(1);
    if (IS("depth0"))
        return ftj_int(0);
#undef IS
    return ftj_undef_named(name);
}

struct ftj_val ftj_get_attr(struct ftj_val v, struct ftj_str name) {
    switch (v.type) {
    case FTJ_DICT:
    case FTJ_NS: {
        struct ftj_val *x = ftj_dict_get_str(v.u.dict, name.p, name.n);
        return x ? *x : ftj_undef_named(name);
    }
    case FTJ_LOOP: return loop_attr(v.u.loop, name);
    default: return ftj_undef_named(name);
    }
}

int ftj_get_item(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_val key, struct ftj_val *out) {
    *out = ftj_undef();
    switch (v.type) {
    case FTJ_LIST:
        if (key.type == FTJ_INT || key.type == FTJ_BOOL) {
            int64_t i = key.type == FTJ_INT ? key.u.i : key.u.b;
            int64_t n = (int64_t)v.u.list->n;
            if (i < 0)
                i += n;
            if (i >= 0 && i < n)
                *out = v.u.list->v[i];
        }
        return 0;
    case FTJ_STR:
        if (key.type == FTJ_INT || key.type == FTJ_BOOL) {
            int64_t i = key.type == FTJ_INT ? key.u.i : key.u.b;
            CHARGE(R, v.u.s.n);
            int64_t n = (int64_t)ftj_utf8_count(v.u.s.p, v.u.s.n);
            if (i < 0)
                i += n;
            if (i >= 0 && i < n) {
                size_t o = ftj_utf8_offset(v.u.s.p, v.u.s.n, (size_t)i);
                *out = ftj_strv(v.u.s.p + o, ftj_utf8_next(v.u.s.p, v.u.s.n, o) - o);
            }
        }
        return 0;
    case FTJ_DICT:
    case FTJ_NS: {
        struct ftj_val *x = ftj_dict_get(v.u.dict, key);
        if (x)
            *out = *x;
        else if (key.type == FTJ_STR)
            *out = ftj_undef_named(key.u.s);
        return 0;
    }
    case FTJ_LOOP:
        if (key.type == FTJ_STR)
            *out = loop_attr(v.u.loop, key.u.s);
        return 0;
    default:
        (void)off;
        return 0;
    }
}

/* Python slice index normalization (PySlice_AdjustIndices). */
static int slice_indices(struct ftj_render *R, size_t off, struct ftj_val vs, struct ftj_val ve, struct ftj_val vst,
                         int64_t len, int64_t *start, int64_t *step, int64_t *count) {
    int64_t st = 1, s, e;
    if (vst.type != FTJ_UNDEF && vst.type != FTJ_NONE)
        TRY(ftj_arg_int(R, off, "slice step", vst, &st));
    if (st == 0)
        return ftj_fail(R, off, FT_EINVAL, "slice step cannot be zero");
    if (st == INT64_MIN)
        st = -INT64_MAX;
    if (vs.type == FTJ_UNDEF || vs.type == FTJ_NONE) {
        s = st < 0 ? len - 1 : 0;
    } else {
        TRY(ftj_arg_int(R, off, "slice start", vs, &s));
        if (s < 0) {
            s = s < -len ? (st < 0 ? -1 : 0) : s + len;
        } else if (s >= len) {
            s = st < 0 ? len - 1 : len;
        }
    }
    if (ve.type == FTJ_UNDEF || ve.type == FTJ_NONE) {
        e = st < 0 ? -1 : len;
    } else {
        TRY(ftj_arg_int(R, off, "slice stop", ve, &e));
        if (e < 0) {
            e = e < -len ? (st < 0 ? -1 : 0) : e + len;
        } else if (e >= len) {
            e = st < 0 ? len - 1 : len;
        }
    }
    int64_t c = 0;
    if (st > 0 && s < e)
        c = (e - s - 1) / st + 1;
    else if (st < 0 && e < s)
        c = (s - e - 1) / (-st) + 1;
    *start = s;
    *step = st;
    *count = c;
    return 0;
}

int ftj_do_slice(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_val vs, struct ftj_val ve,
                 struct ftj_val vst, struct ftj_val *out) {
    int64_t start, step, count;
    if (v.type == FTJ_LIST) {
        const struct ftj_list *l = v.u.list;
        TRY(slice_indices(R, off, vs, ve, vst, (int64_t)l->n, &start, &step, &count));
        struct ftj_list *r;
        TRY(ftj_new_list(R, off, (size_t)count, l->tuple, &r));
        for (int64_t i = 0; i < count; i++)
            r->v[i] = l->v[start + i * step];
        *out = ftj_list_val(r);
        return 0;
    }
    if (v.type == FTJ_STR) {
        struct ftj_str s = v.u.s;
        CHARGE(R, s.n);
        size_t n = ftj_utf8_count(s.p, s.n);
        TRY(slice_indices(R, off, vs, ve, vst, (int64_t)n, &start, &step, &count));
        if (count == 0) {
            *out = ftj_strv("", 0);
            return 0;
        }
        /* offsets of every code point, plus the end */
        size_t *offs = ftj_alloc_array(&R->arena, n + 1, sizeof(size_t));
        if (!offs)
            return ftj_nomem(R, off);
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            offs[i] = o;
            o = ftj_utf8_next(s.p, s.n, o);
        }
        offs[n] = s.n;
        if (step == 1) {
            *out = ftj_strv(s.p + offs[start], offs[start + count] - offs[start]);
            return 0;
        }
        size_t bytes = 0;
        for (int64_t i = 0; i < count; i++) {
            int64_t k = start + i * step;
            bytes += offs[k + 1] - offs[k];
        }
        char *p;
        ALLOC(p, bytes + 1, off);
        size_t w = 0;
        for (int64_t i = 0; i < count; i++) {
            int64_t k = start + i * step;
            memcpy(p + w, s.p + offs[k], offs[k + 1] - offs[k]);
            w += offs[k + 1] - offs[k];
        }
        p[w] = '\0';
        *out = ftj_strv(p, w);
        return 0;
    }
    if (v.type == FTJ_UNDEF) {
        *out = v;
        return 0;
    }
    return ftj_fail(R, off, FT_EINVAL, "cannot slice a %s", ftj_type_name(v));
}

/* ------------------------------------------------------------ operators */

static const char *op_name(int op) {
    switch (op) {
    case FTJ_OP_ADD: return "+";
    case FTJ_OP_SUB: return "-";
    case FTJ_OP_MUL: return "*";
    case FTJ_OP_DIV: return "/";
    case FTJ_OP_FLOORDIV: return "//";
    case FTJ_OP_MOD: return "%";
    case FTJ_OP_POW: return "**";
    case FTJ_OP_LT: return "<";
    case FTJ_OP_LE: return "<=";
    case FTJ_OP_GT: return ">";
    case FTJ_OP_GE: return ">=";
    default: return "?";
    }
}

static int type_error(struct ftj_render *R, size_t off, int op, struct ftj_val a, struct ftj_val b) {
    if (a.type == FTJ_UNDEF || b.type == FTJ_UNDEF) {
        struct ftj_str n = a.type == FTJ_UNDEF ? a.u.s : b.u.s;
        if (n.n)
            return ftj_fail(R, off, FT_EINVAL, "'%.*s' is undefined", (int)FT_MIN(n.n, 64), n.p);
        return ftj_fail(R, off, FT_EINVAL, "undefined value in '%s'", op_name(op));
    }
    return ftj_fail(R, off, FT_EINVAL, "unsupported operand types for %s: %s and %s", op_name(op), ftj_type_name(a),
                    ftj_type_name(b));
}

static int concat_str(struct ftj_render *R, size_t off, struct ftj_str a, struct ftj_str b, struct ftj_val *out) {
    size_t n;
    if (ft_add_overflow(a.n, b.n, &n) || n > R->lim.max_output)
        return ftj_chk(R, off, FT_ERANGE, "string concatenation");
    char *p;
    ALLOC(p, n + 1, off);
    if (a.n)
        memcpy(p, a.p, a.n);
    if (b.n)
        memcpy(p + a.n, b.p, b.n);
    p[n] = '\0';
    *out = ftj_strv(p, n);
    return 0;
}

static int repeat(struct ftj_render *R, size_t off, struct ftj_val seq, int64_t times, struct ftj_val *out) {
    if (times < 0)
        times = 0;
    if (seq.type == FTJ_STR) {
        size_t n;
        if (ft_mul_overflow(seq.u.s.n, (size_t)times, &n) || n > R->lim.max_output)
            return ftj_chk(R, off, FT_ERANGE, "string repetition");
        char *p;
        ALLOC(p, n + 1, off);
        /* an empty string times 3 ** 22 is empty at once, not after 3 ** 22
         * empty copies (the long fuzzing run found that one) */
        for (int64_t i = 0; seq.u.s.n > 0 && i < times; i++)
            memcpy(p + (size_t)i * seq.u.s.n, seq.u.s.p, seq.u.s.n);
        p[n] = '\0';
        *out = ftj_strv(p, n);
        return 0;
    }
    size_t n;
    if (ft_mul_overflow(seq.u.list->n, (size_t)times, &n) || n > R->lim.max_list)
        return ftj_fail(R, off, FT_ERANGE, "list repetition too large");
    struct ftj_list *l;
    TRY(ftj_new_list(R, off, n, seq.u.list->tuple, &l));
    for (size_t i = 0; i < n; i++)
        l->v[i] = seq.u.list->v[i % seq.u.list->n];
    *out = ftj_list_val(l);
    return 0;
}

int ftj_binop(struct ftj_render *R, size_t off, int op, struct ftj_val a, struct ftj_val b, struct ftj_val *out) {
    if (op == FTJ_OP_TILDE) {
        struct ftj_str x, y;
        TRY(ftj_to_str(R, off, a, &x));
        TRY(ftj_to_str(R, off, b, &y));
        return concat_str(R, off, x, y, out);
    }
    if (ftj_is_number(a) && ftj_is_number(b)) {
        bool fl = a.type == FTJ_FLOAT || b.type == FTJ_FLOAT || op == FTJ_OP_DIV;
        if (!fl) {
            int64_t x = ftj_as_i(a), y = ftj_as_i(b), r = 0;
            bool ovf = false;
            switch (op) {
            case FTJ_OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
            case FTJ_OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
            case FTJ_OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
            case FTJ_OP_FLOORDIV:
            case FTJ_OP_MOD:
                if (y == 0)
                    return ftj_fail(R, off, FT_EINVAL, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) {
                    ovf = op == FTJ_OP_FLOORDIV;
                    r = 0;
                    break;
                }
                if (op == FTJ_OP_FLOORDIV) {
                    r = x / y;
                    if ((x % y != 0) && ((x < 0) != (y < 0)))
                        r--;
                } else {
                    r = x % y;
                    if (r != 0 && ((r < 0) != (y < 0)))
                        r += y;
                }
                break;
            case FTJ_OP_POW:
                if (y < 0) {
                    fl = true;
                    break;
                }
                r = 1;
                for (int64_t base = x, e = y; e > 0 && !ovf; e >>= 1) {
                    if (e & 1)
                        ovf = __builtin_mul_overflow(r, base, &r);
                    if (e > 1 && !ovf)
                        ovf = __builtin_mul_overflow(base, base, &base);
                }
                break;
            default: return type_error(R, off, op, a, b);
            }
            if (ovf)
                return ftj_fail(R, off, FT_ERANGE, "integer overflow in '%s'", op_name(op));
            if (!fl) {
                *out = ftj_int(r);
                return 0;
            }
        }
        double x = ftj_as_f(a), y = ftj_as_f(b), r;
        switch (op) {
        case FTJ_OP_ADD: r = x + y; break;
        case FTJ_OP_SUB: r = x - y; break;
        case FTJ_OP_MUL: r = x * y; break;
        case FTJ_OP_DIV:
            if (y == 0)
                return ftj_fail(R, off, FT_EINVAL, "division by zero");
            r = x / y;
            break;
        case FTJ_OP_FLOORDIV:
        case FTJ_OP_MOD: {
            if (y == 0)
                return ftj_fail(R, off, FT_EINVAL, "float division or modulo by zero");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0)))
                m += y;
            r = op == FTJ_OP_MOD ? m : floor((x - m) / y + 0.5);
            if (op == FTJ_OP_FLOORDIV && !isfinite(r))
                r = floor(x / y);
            break;
        }
        case FTJ_OP_POW:
            if (x == 0 && y < 0)
                return ftj_fail(R, off, FT_EINVAL, "0.0 cannot be raised to a negative power");
            r = pow(x, y);
            break;
        default: return type_error(R, off, op, a, b);
        }
        *out = ftj_float(r);
        return 0;
    }
    if (op == FTJ_OP_ADD && a.type == FTJ_STR && b.type == FTJ_STR)
        return concat_str(R, off, a.u.s, b.u.s, out);
    if (op == FTJ_OP_ADD && ((a.type == FTJ_STR && (b.type == FTJ_NONE || b.type == FTJ_UNDEF)) ||
                             (b.type == FTJ_STR && (a.type == FTJ_NONE || a.type == FTJ_UNDEF)))) {
        *out = a.type == FTJ_STR ? a : b;
        return 0;
    }
    if (op == FTJ_OP_ADD && a.type == FTJ_LIST && b.type == FTJ_LIST && a.u.list->tuple == b.u.list->tuple) {
        struct ftj_list *l;
        TRY(ftj_new_list(R, off, a.u.list->n + b.u.list->n, a.u.list->tuple, &l));
        for (size_t i = 0; i < a.u.list->n; i++)
            l->v[i] = a.u.list->v[i];
        for (size_t i = 0; i < b.u.list->n; i++)
            l->v[a.u.list->n + i] = b.u.list->v[i];
        *out = ftj_list_val(l);
        return 0;
    }
    if (op == FTJ_OP_MUL) {
        if ((a.type == FTJ_STR || a.type == FTJ_LIST) && (b.type == FTJ_INT || b.type == FTJ_BOOL))
            return repeat(R, off, a, ftj_as_i(b), out);
        if ((b.type == FTJ_STR || b.type == FTJ_LIST) && (a.type == FTJ_INT || a.type == FTJ_BOOL))
            return repeat(R, off, b, ftj_as_i(a), out);
    }
    if (op == FTJ_OP_MOD && a.type == FTJ_STR)
        return ftj_fail(R, off, FT_EUNSUPPORTED, "printf-style string formatting ('...' %% x) is not supported");
    return type_error(R, off, op, a, b);
}

int ftj_contains(struct ftj_render *R, size_t off, struct ftj_val container, struct ftj_val item, bool *out) {
    switch (container.type) {
    case FTJ_STR:
        if (item.type != FTJ_STR)
            return ftj_fail(R, off, FT_EINVAL, "'in <string>' requires a string as left operand, not %s",
                            ftj_type_name(item));
        CHARGE(R, container.u.s.n);
        *out = ftj_memmem(container.u.s, 0, item.u.s) != NULL;
        return 0;
    case FTJ_LIST:
        R->steps += container.u.list->n;
        *out = false;
        for (size_t i = 0; i < container.u.list->n && !*out; i++)
            *out = ftj_equal(container.u.list->v[i], item);
        return 0;
    case FTJ_DICT: *out = ftj_dict_get(container.u.dict, item) != NULL; return 0;
    case FTJ_UNDEF: *out = false; return 0;
    default: return ftj_fail(R, off, FT_EINVAL, "argument of type '%s' is not iterable", ftj_type_name(container));
    }
}

int ftj_compare_op(struct ftj_render *R, size_t off, int op, struct ftj_val a, struct ftj_val b, bool *out) {
    if (a.type == FTJ_STR)
        CHARGE(R, a.u.s.n);
    switch (op) {
    case FTJ_OP_EQ: *out = ftj_equal(a, b); return 0;
    case FTJ_OP_NE: *out = !ftj_equal(a, b); return 0;
    case FTJ_OP_IN: return ftj_contains(R, off, b, a, out);
    case FTJ_OP_NOTIN: TRY(ftj_contains(R, off, b, a, out)); *out = !*out; return 0;
    default: {
        int c;
        if (ftj_compare(a, b, &c)) {
            if (a.type == FTJ_UNDEF || b.type == FTJ_UNDEF)
                return type_error(R, off, op, a, b);
            return ftj_fail(R, off, FT_EINVAL, "'%s' not supported between %s and %s", op_name(op), ftj_type_name(a),
                            ftj_type_name(b));
        }
        *out = op == FTJ_OP_LT ? c < 0 : op == FTJ_OP_LE ? c <= 0 : op == FTJ_OP_GT ? c > 0 : c >= 0;
        return 0;
    }
    }
}
