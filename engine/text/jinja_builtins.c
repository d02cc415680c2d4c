/* The built-ins of the Jinja interpreter: tests (`is`), filters (`|`),
 * the methods of strings, lists and dicts, and the global functions of
 * HF's chat-template environment (range, dict, namespace, joiner, cycler,
 * raise_exception, strftime_now). The evaluator (jinja_eval.c) calls them
 * through ftj_run_test, ftj_apply_filter_id, ftj_call_method and
 * ftj_call_func (jinja_render.h); they use only the value operations of
 * jinja_ops.c and jinja_value.c. Every one works within the render's
 * limits: long strings and lists are charged to the step budget. */
#include "jinja_render.h"

#include "ft/common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --------------------------------------------------------- string helpers */

static bool py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static char a_upper(char c) { return c >= 'a' && c <= 'z' ? (char)(c - 32) : c; }
static char a_lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }
static bool a_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* Byte offset of the code point before `off`. */
static size_t utf8_prev(const char *p, size_t off) {
    if (off == 0)
        return 0;
    size_t i = off - 1;
    size_t floor = off >= 4 ? off - 4 : 0;
    while (i > floor && ((unsigned char)p[i] & 0xC0) == 0x80)
        i--;
    /* make sure the sequence starting at i really ends at off */
    if (ftj_utf8_next(p, off, i) != off)
        return off - 1;
    return i;
}

/* A set of code points (the `chars` argument of strip()). NULL = whitespace. */
struct cpset {
    const struct ftj_str *chars;
};
static bool cpset_has(struct cpset set, uint32_t c) {
    if (!set.chars)
        return py_space(c);
    size_t off = 0;
    while (off < set.chars->n)
        if (ftj_utf8_decode(set.chars->p, set.chars->n, &off) == c)
            return true;
    return false;
}

static struct ftj_str str_strip(struct ftj_str s, struct cpset set, bool left, bool right) {
    size_t b = 0, e = s.n;
    if (left) {
        while (b < e) {
            size_t nx = b;
            uint32_t c = ftj_utf8_decode(s.p, e, &nx);
            if (!cpset_has(set, c))
                break;
            b = nx;
        }
    }
    if (right) {
        while (e > b) {
            size_t pv = utf8_prev(s.p, e), tmp = pv;
            uint32_t c = ftj_utf8_decode(s.p, e, &tmp);
            if (!cpset_has(set, c))
                break;
            e = pv;
        }
    }
    struct ftj_str r = {s.p + b, e - b};
    return r;
}

static int str_map(struct ftj_render *R, size_t off, struct ftj_str s, int mode, struct ftj_val *out) {
    /* mode: 0 upper, 1 lower, 2 capitalize, 3 str.title(), 4 Jinja's title filter */
    char *p;
    ALLOC(p, s.n + 1, off);
    bool prev_cased = false;
    bool first = true;
    for (size_t i = 0; i < s.n; i++) {
        char c = s.p[i];
        switch (mode) {
        case 0: c = a_upper(c); break;
        case 1: c = a_lower(c); break;
        case 2: c = first ? a_upper(c) : a_lower(c); break;
        case 3:
            if (a_alpha(c))
                c = prev_cased ? a_lower(c) : a_upper(c);
            prev_cased = a_alpha(c) || ((unsigned char)c >= 0x80);
            break;
        default: {
            /* words start after one of - whitespace ( { [ < */
            bool sep = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
                       c == '(' || c == '{' || c == '[' || c == '<';
            c = (first || prev_cased) ? a_upper(c) : a_lower(c);
            prev_cased = sep;
            break;
        }
        }
        if (((unsigned char)s.p[i] & 0xC0) != 0x80)
            first = false;
        p[i] = c;
    }
    p[s.n] = '\0';
    *out = ftj_strv(p, s.n);
    return 0;
}

static int str_replace(struct ftj_render *R, size_t off, struct ftj_str s, struct ftj_str from, struct ftj_str to,
                       int64_t count, struct ftj_val *out) {
    struct ftj_buf b = {.limit = R->lim.max_output};
    int rc = 0;
    if (from.n == 0) {
        /* Python inserts `to` between code points and at both ends */
        size_t i = 0;
        int64_t k = 0;
        for (;;) {
            if (count < 0 || k < count) {
                rc = ftj_buf_put(&b, to.p, to.n);
                k++;
            }
            if (rc || i >= s.n)
                break;
            size_t nx = ftj_utf8_next(s.p, s.n, i);
            rc = ftj_buf_put(&b, s.p + i, nx - i);
            if (rc)
                break;
            i = nx;
        }
    } else {
        size_t i = 0;
        int64_t k = 0;
        while (!rc) {
            const char *hit = (count < 0 || k < count) ? ftj_memmem(s, i, from) : NULL;
            if (!hit) {
                rc = ftj_buf_put(&b, s.p + i, s.n - i);
                break;
            }
            size_t at = (size_t)(hit - s.p);
            rc = ftj_buf_put(&b, s.p + i, at - i);
            if (!rc)
                rc = ftj_buf_put(&b, to.p, to.n);
            i = at + from.n;
            k++;
        }
    }
    if (!rc)
        rc = ftj_buf_to_val(R, off, &b, out);
    else
        rc = ftj_chk(R, off, rc, "replace");
    ftj_buf_free(&b);
    return rc;
}

/* ---------------------------------------------------------------- args */

static int arg_check(struct ftj_render *R, size_t off, const char *what, const struct args *a,
                     const char *const *names) {
    size_t n = 0;
    while (names[n])
        n++;
    if (a->npos > n)
        return ftj_fail(R, off, FT_EINVAL, "%s takes at most %zu argument(s), %zu given", what, n, a->npos);
    for (size_t k = 0; k < a->nkw; k++) {
        size_t j;
        for (j = 0; j < n; j++)
            if (a->kwx[k].name.n == strlen(names[j]) && memcmp(a->kwx[k].name.p, names[j], a->kwx[k].name.n) == 0)
                break;
        if (j == n)
            return ftj_fail(R, off, FT_EUNSUPPORTED, "%s: unsupported keyword argument '%.*s'", what,
                            (int)FT_MIN(a->kwx[k].name.n, 64), a->kwx[k].name.p);
        if (j < a->npos)
            return ftj_fail(R, off, FT_EINVAL, "%s: argument '%s' given twice", what, names[j]);
    }
    return 0;
}

static int arg_str(struct ftj_render *R, size_t off, const char *what, struct ftj_val v, struct ftj_str *out) {
    out->p = "";
    out->n = 0;
    if (v.type != FTJ_STR)
        return ftj_fail(R, off, FT_EINVAL, "%s: expected a string, got %s", what, ftj_type_name(v));
    *out = v.u.s;
    return 0;
}

/* ------------------------------------------------------------------ tests */

int ftj_run_test(struct ftj_render *R, size_t off, int id, struct ftj_val v, const struct ftj_val *args,
                 size_t nargs, bool *out) {
    struct ftj_val arg = nargs ? args[0] : ftj_undef();
    bool need_arg = false;
    switch (id) {
    case FTJ_TS_BOOLEAN: *out = v.type == FTJ_BOOL; break;
    case FTJ_TS_CALLABLE: *out = v.type == FTJ_MACRO || v.type == FTJ_FUNC; break;
    case FTJ_TS_DEFINED: *out = v.type != FTJ_UNDEF; break;
    case FTJ_TS_UNDEFINED: *out = v.type == FTJ_UNDEF; break;
    case FTJ_TS_NONE: *out = v.type == FTJ_NONE; break;
    case FTJ_TS_TRUE: *out = v.type == FTJ_BOOL && v.u.b; break;
    case FTJ_TS_FALSE: *out = v.type == FTJ_BOOL && !v.u.b; break;
    case FTJ_TS_FLOAT: *out = v.type == FTJ_FLOAT; break;
    case FTJ_TS_INTEGER: *out = v.type == FTJ_INT; break;
    case FTJ_TS_NUMBER: *out = ftj_is_number(v); break;
    case FTJ_TS_STRING: *out = v.type == FTJ_STR; break;
    case FTJ_TS_MAPPING: *out = v.type == FTJ_DICT; break;
    case FTJ_TS_ITERABLE:
    case FTJ_TS_SEQUENCE:
        *out = v.type == FTJ_STR || v.type == FTJ_LIST || v.type == FTJ_DICT || v.type == FTJ_UNDEF;
        break;
    case FTJ_TS_ESCAPED: *out = false; break;
    case FTJ_TS_LOWER:
    case FTJ_TS_UPPER: {
        /* Python islower/isupper: at least one cased char and none of the other case */
        bool cased = false, ok = v.type == FTJ_STR;
        for (size_t i = 0; ok && i < v.u.s.n; i++) {
            char c = v.u.s.p[i];
            if (a_alpha(c)) {
                cased = true;
                if ((id == FTJ_TS_LOWER) != (c >= 'a' && c <= 'z'))
                    ok = false;
            }
        }
        *out = ok && cased;
        break;
    }
    case FTJ_TS_EVEN:
    case FTJ_TS_ODD: {
        int64_t i;
        TRY(ftj_arg_int(R, off, id == FTJ_TS_EVEN ? "even" : "odd", v, &i));
        *out = (i % 2 == 0) == (id == FTJ_TS_EVEN);
        break;
    }
    case FTJ_TS_DIVISIBLEBY: {
        need_arg = true;
        if (!nargs)
            break;
        int64_t a, b;
        TRY(ftj_arg_int(R, off, "divisibleby", v, &a));
        TRY(ftj_arg_int(R, off, "divisibleby", arg, &b));
        if (b == 0)
            return ftj_fail(R, off, FT_EINVAL, "divisibleby 0");
        *out = b == -1 || a % b == 0;
        break;
    }
    case FTJ_TS_EQ: need_arg = true; *out = ftj_equal(v, arg); break;
    case FTJ_TS_NE: need_arg = true; *out = !ftj_equal(v, arg); break;
    case FTJ_TS_LT: need_arg = true; if (nargs) TRY(ftj_compare_op(R, off, FTJ_OP_LT, v, arg, out)); break;
    case FTJ_TS_LE: need_arg = true; if (nargs) TRY(ftj_compare_op(R, off, FTJ_OP_LE, v, arg, out)); break;
    case FTJ_TS_GT: need_arg = true; if (nargs) TRY(ftj_compare_op(R, off, FTJ_OP_GT, v, arg, out)); break;
    case FTJ_TS_GE: need_arg = true; if (nargs) TRY(ftj_compare_op(R, off, FTJ_OP_GE, v, arg, out)); break;
    case FTJ_TS_IN: need_arg = true; if (nargs) TRY(ftj_contains(R, off, arg, v, out)); break;
    case FTJ_TS_SAMEAS:
        need_arg = true;
        if (v.type != arg.type) {
            *out = false;
        } else {
            switch (v.type) {
            case FTJ_LIST: *out = v.u.list == arg.u.list; break;
            case FTJ_DICT:
            case FTJ_NS: *out = v.u.dict == arg.u.dict; break;
            case FTJ_STR: *out = v.u.s.p == arg.u.s.p && v.u.s.n == arg.u.s.n; break;
            default: *out = ftj_equal(v, arg); break;
            }
        }
        break;
    default: return ftj_fail(R, off, FT_EUNSUPPORTED, "test not implemented");
    }
    if (need_arg && nargs != 1)
        return ftj_fail(R, off, FT_EINVAL, "test takes exactly one argument");
    if (!need_arg && nargs)
        return ftj_fail(R, off, FT_EINVAL, "test takes no arguments");
    return 0;
}

/* ------------------------------------------------------------- sorting */

struct sort_item {
    struct ftj_val key, val;
};

/* Stable merge sort that can fail (values of types without an order). */
static int sort_items(struct ftj_render *R, size_t off, struct sort_item *a, size_t n, bool reverse) {
    if (n < 2)
        return 0;
    R->steps += n;
    struct sort_item *tmp = ftj_alloc_array(&R->arena, n, sizeof(*tmp));
    if (!tmp)
        return ftj_nomem(R, off);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = FT_MIN(lo + width, n), hi = FT_MIN(lo + 2 * width, n);
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c;
                if (ftj_compare(a[i].key, a[j].key, &c))
                    return ftj_fail(R, off, FT_EINVAL, "cannot sort: %s and %s are not comparable",
                                    ftj_type_name(a[i].key), ftj_type_name(a[j].key));
                if (reverse)
                    c = -c;
                tmp[k++] = c <= 0 ? a[i++] : a[j++];
            }
            while (i < mid)
                tmp[k++] = a[i++];
            while (j < hi)
                tmp[k++] = a[j++];
        }
        memcpy(a, tmp, n * sizeof(*a));
    }
    return 0;
}

/* Jinja's ignore_case: lower-case strings for comparisons. */
static int fold_case(struct ftj_render *R, size_t off, struct ftj_val v, bool case_sensitive, struct ftj_val *out) {
    if (case_sensitive || v.type != FTJ_STR) {
        *out = v;
        return 0;
    }
    return str_map(R, off, v.u.s, 1, out);
}

/* Attribute lookup for filters (attribute='a.b' or an integer index). */
static int filter_attr(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_val attr, struct ftj_val *out) {
    if (attr.type == FTJ_INT)
        return ftj_get_item(R, off, v, attr, out);
    struct ftj_str a;
    TRY(arg_str(R, off, "attribute", attr, &a));
    *out = v;
    size_t start = 0;
    for (size_t i = 0; i <= a.n; i++) {
        if (i < a.n && a.p[i] != '.')
            continue;
        struct ftj_str part = {a.p + start, i - start};
        /* a numeric part indexes a list */
        bool digits = part.n > 0 && part.n < 18;
        for (size_t k = 0; k < part.n && digits; k++)
            digits = part.p[k] >= '0' && part.p[k] <= '9';
        if (digits) {
            int64_t idx = 0;
            for (size_t k = 0; k < part.n; k++)
                idx = idx * 10 + (part.p[k] - '0');
            TRY(ftj_get_item(R, off, *out, ftj_int(idx), out));
        } else {
            struct ftj_val x = ftj_get_attr(*out, part);
            if (x.type == FTJ_UNDEF && out->type != FTJ_UNDEF)
                TRY(ftj_get_item(R, off, *out, ftj_strv(part.p, part.n), &x));
            *out = x;
        }
        start = i + 1;
    }
    return 0;
}

/* ------------------------------------------------------------- filters */

/* select/reject(test, args...) and selectattr/rejectattr(attr, test, args...) */
static int filter_select(struct ftj_render *R, size_t off, struct ftj_val v, const struct args *a, bool by_attr,
                         bool keep_if, struct ftj_val *out) {
    if (a->nkw)
        return ftj_fail(R, off, FT_EUNSUPPORTED, "keyword arguments to select/reject filters are not supported");
    struct ftj_list *items;
    TRY(ftj_iterate(R, off, ftj_truthy(v) ? v : ftj_undef(), &items)); /* Jinja: `if value:` */
    size_t first = by_attr ? 1 : 0;
    if (by_attr && a->npos < 1)
        return ftj_fail(R, off, FT_EINVAL, "selectattr/rejectattr need an attribute name");
    int test = -1;
    if (a->npos > first) {
        struct ftj_str tn;
        TRY(arg_str(R, off, "test name", a->pos[first], &tn));
        test = ftj_test_id(tn.p, tn.n);
        if (test < 0)
            return ftj_fail(R, off, FT_EUNSUPPORTED, "test '%.*s' is not supported", (int)FT_MIN(tn.n, 64), tn.p);
    }
    struct ftj_list *res;
    TRY(ftj_new_list(R, off, items->n, false, &res));
    res->n = 0;
    for (size_t i = 0; i < items->n; i++) {
        struct ftj_val x = items->v[i];
        if (by_attr)
            TRY(filter_attr(R, off, x, a->pos[0], &x));
        bool ok;
        if (test < 0)
            ok = ftj_truthy(x);
        else
            TRY(ftj_run_test(R, off, test, x, a->pos + first + 1, a->npos - first - 1, &ok));
        if (ok == keep_if)
            res->v[res->n++] = items->v[i];
    }
    *out = ftj_list_val(res);
    return 0;
}

static int filter_map(struct ftj_render *R, size_t off, struct ftj_val v, const struct args *a, struct ftj_val *out) {
    struct ftj_list *items, *res;
    TRY(ftj_iterate(R, off, ftj_truthy(v) ? v : ftj_undef(), &items)); /* Jinja: `if value:` */
    TRY(ftj_new_list(R, off, items->n, false, &res));
    struct ftj_val attr, dflt = ftj_undef();
    bool has_default = ftj_arg_get(a, 99, "default", &dflt);
    if (a->npos == 0 && ftj_arg_get(a, 99, "attribute", &attr)) {
        for (size_t i = 0; i < items->n; i++) {
            TRY(filter_attr(R, off, items->v[i], attr, &res->v[i]));
            if (res->v[i].type == FTJ_UNDEF && has_default)
                res->v[i] = dflt;
        }
    } else {
        if (a->npos == 0)
            return ftj_fail(R, off, FT_EINVAL, "map needs a filter name or attribute=");
        struct ftj_str fname;
        TRY(arg_str(R, off, "map", a->pos[0], &fname));
        int fid = ftj_filter_id(fname.p, fname.n);
        if (fid < 0)
            return ftj_fail(R, off, FT_EUNSUPPORTED, "filter '%.*s' is not supported", (int)FT_MIN(fname.n, 64),
                            fname.p);
        struct args rest = {a->pos + 1, a->npos - 1, a->kwx, a->kwv, a->nkw};
        for (size_t i = 0; i < items->n; i++)
            TRY(ftj_apply_filter_id(R, off, fid, items->v[i], &rest, &res->v[i]));
    }
    *out = ftj_list_val(res);
    return 0;
}

static int filter_indent(struct ftj_render *R, size_t off, struct ftj_str s, const struct args *a,
                         struct ftj_val *out) {
    static const char *const names[] = {"width", "first", "blank", NULL};
    TRY(arg_check(R, off, "indent", a, names));
    struct ftj_val w = ftj_int(4), first = ftj_bool(false), blank = ftj_bool(false);
    ftj_arg_get(a, 0, "width", &w);
    ftj_arg_get(a, 1, "first", &first);
    ftj_arg_get(a, 2, "blank", &blank);
    struct ftj_str ind;
    char *spaces = NULL;
    if (w.type == FTJ_STR) {
        ind = w.u.s;
    } else {
        int64_t n;
        TRY(ftj_arg_int(R, off, "indent width", w, &n));
        if (n < 0)
            n = 0;
        if ((uint64_t)n > R->lim.max_output)
            return ftj_chk(R, off, FT_ERANGE, "indent");
        ALLOC(spaces, (size_t)n + 1, off);
        memset(spaces, ' ', (size_t)n);
        ind.p = spaces;
        ind.n = (size_t)n;
    }
    /* Jinja splits (s + "\n") with splitlines(): the lines of s, keeping an
     * empty last line after a trailing newline. Only \n, \r, \r\n break here. */
    struct ftj_buf b = {.limit = R->lim.max_output};
    int rc = 0;
    if (ftj_truthy(first))
        rc = ftj_buf_put(&b, ind.p, ind.n);
    size_t i = 0, line = 0;
    while (!rc && i <= s.n) {
        size_t e = i;
        while (e < s.n && s.p[e] != '\n' && s.p[e] != '\r')
            e++;
        if (line > 0) {
            rc = ftj_buf_putc(&b, '\n');
            if (!rc && (e > i || ftj_truthy(blank)))
                rc = ftj_buf_put(&b, ind.p, ind.n);
        }
        if (!rc)
            rc = ftj_buf_put(&b, s.p + i, e - i);
        line++;
        if (e >= s.n)
            break;
        i = e + ((s.p[e] == '\r' && e + 1 < s.n && s.p[e + 1] == '\n') ? 2 : 1);
    }
    if (!rc)
        rc = ftj_buf_to_val(R, off, &b, out);
    else
        rc = ftj_chk(R, off, rc, "indent");
    ftj_buf_free(&b);
    return rc;
}

static int filter_tojson(struct ftj_render *R, size_t off, struct ftj_val v, const struct args *a, struct ftj_val *out) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    TRY(arg_check(R, off, "tojson", a, names));
    struct ftj_json_opts o = {.indent = -1};
    struct ftj_val x;
    if (ftj_arg_get(a, 0, "ensure_ascii", &x))
        o.ensure_ascii = ftj_truthy(x);
    if (ftj_arg_get(a, 1, "indent", &x) && x.type != FTJ_NONE) {
        int64_t n;
        TRY(ftj_arg_int(R, off, "tojson indent", x, &n));
        o.indent = (int)FT_MAX(0, FT_MIN(n, 64));
    }
    if (ftj_arg_get(a, 2, "separators", &x) && x.type != FTJ_NONE) {
        if (x.type != FTJ_LIST || x.u.list->n != 2 || x.u.list->v[0].type != FTJ_STR || x.u.list->v[1].type != FTJ_STR)
            return ftj_fail(R, off, FT_EINVAL, "tojson separators must be a pair of strings");
        o.item_sep = x.u.list->v[0].u.s;
        o.key_sep = x.u.list->v[1].u.s;
    }
    if (ftj_arg_get(a, 3, "sort_keys", &x))
        o.sort_keys = ftj_truthy(x);
    struct ftj_buf b = {.limit = R->lim.max_output};
    int rc = ftj_write_json(&b, v, &o, 0);
    if (rc == FT_EINVAL)
        rc = ftj_fail(R, off, FT_EINVAL, "tojson: a %s value is not JSON serializable", ftj_type_name(v));
    else if (rc)
        rc = ftj_chk(R, off, rc, "tojson");
    else
        rc = ftj_buf_to_val(R, off, &b, out);
    ftj_buf_free(&b);
    return rc;
}

static int parse_py_int(struct ftj_str s, int base, int64_t *out) {
    struct cpset ws = {NULL};
    s = str_strip(s, ws, true, true);
    size_t i = 0;
    bool neg = false;
    if (i < s.n && (s.p[i] == '+' || s.p[i] == '-'))
        neg = s.p[i++] == '-';
    if (base == 0 || base == 16 || base == 8 || base == 2) {
        if (i + 1 < s.n && s.p[i] == '0') {
            char c = a_lower(s.p[i + 1]);
            int b = c == 'x' ? 16 : c == 'o' ? 8 : c == 'b' ? 2 : 0;
            if (b && (base == 0 || base == b)) {
                base = b;
                i += 2;
            }
        }
        if (base == 0)
            base = 10;
    }
    if (base < 2 || base > 36 || i >= s.n)
        return -1;
    int64_t v = 0;
    bool any = false;
    for (; i < s.n; i++) {
        char c = a_lower(s.p[i]);
        if (c == '_' && any && i + 1 < s.n && s.p[i + 1] != '_')
            continue;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
        if (d >= base)
            return -1;
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v))
            return -1;
        any = true;
    }
    *out = neg ? -v : v;
    return 0;
}

static int parse_py_float(struct ftj_str s, double *out) {
    struct cpset ws = {NULL};
    s = str_strip(s, ws, true, true);
    if (s.n == 0 || s.n > 64)
        return -1;
    char buf[72];
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++)
        if (s.p[i] != '_')
            buf[k++] = s.p[i];
    buf[k] = '\0';
    char *end;
    *out = strtod(buf, &end);
    return *end == '\0' && end != buf ? 0 : -1;
}

static int seq_len(struct ftj_render *R, size_t off, struct ftj_val v, int64_t *out) {
    *out = 0;
    switch (v.type) {
    case FTJ_STR:
        CHARGE(R, v.u.s.n);
        *out = (int64_t)ftj_utf8_count(v.u.s.p, v.u.s.n);
        return 0;
    case FTJ_LIST: *out = (int64_t)v.u.list->n; return 0;
    case FTJ_DICT:
    case FTJ_NS: *out = (int64_t)v.u.dict->n; return 0;
    case FTJ_UNDEF: *out = 0; return 0;
    default: return ftj_fail(R, off, FT_EINVAL, "object of type '%s' has no len()", ftj_type_name(v));
    }
}

static int items_of(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_val *out) {
    if (v.type == FTJ_UNDEF) {
        struct ftj_list *l;
        TRY(ftj_new_list(R, off, 0, false, &l));
        *out = ftj_list_val(l);
        return 0;
    }
    if (v.type != FTJ_DICT && v.type != FTJ_NS)
        return ftj_fail(R, off, FT_EINVAL, "items: expected a mapping, got %s", ftj_type_name(v));
    struct ftj_list *l;
    TRY(ftj_new_list(R, off, v.u.dict->n, false, &l));
    for (size_t i = 0; i < v.u.dict->n; i++) {
        struct ftj_list *pair;
        TRY(ftj_new_list(R, off, 2, true, &pair));
        pair->v[0] = v.u.dict->k[i];
        pair->v[1] = v.u.dict->v[i];
        l->v[i] = ftj_list_val(pair);
    }
    *out = ftj_list_val(l);
    return 0;
}

int ftj_apply_filter_id(struct ftj_render *R, size_t off, int id, struct ftj_val v, const struct args *a,
                        struct ftj_val *out) {
    struct ftj_val x;
    struct ftj_str s;
    switch (id) {
    case FTJ_FL_SAFE: *out = v; return 0;
    case FTJ_FL_DEFAULT: {
        struct ftj_val d = ftj_strv("", 0), boolean = ftj_bool(false);
        ftj_arg_get(a, 0, "default_value", &d);
        ftj_arg_get(a, 1, "boolean", &boolean);
        bool use = v.type == FTJ_UNDEF || (ftj_truthy(boolean) && !ftj_truthy(v));
        *out = use ? d : v;
        return 0;
    }
    case FTJ_FL_LENGTH: {
        int64_t n;
        TRY(seq_len(R, off, v, &n));
        *out = ftj_int(n);
        return 0;
    }
    case FTJ_FL_STRING:
        TRY(ftj_to_str(R, off, v, &s));
        *out = ftj_strv(s.p, s.n);
        return 0;
    case FTJ_FL_TRIM: {
        TRY(ftj_to_str(R, off, v, &s));
        struct ftj_str chars;
        struct cpset set = {NULL};
        if (ftj_arg_get(a, 0, "chars", &x) && x.type != FTJ_NONE) {
            TRY(arg_str(R, off, "trim", x, &chars));
            set.chars = &chars;
        }
        s = str_strip(s, set, true, true);
        *out = ftj_strv(s.p, s.n);
        return 0;
    }
    case FTJ_FL_UPPER:
    case FTJ_FL_LOWER:
    case FTJ_FL_CAPITALIZE:
    case FTJ_FL_TITLE:
        TRY(ftj_to_str(R, off, v, &s));
        return str_map(R, off, s, id == FTJ_FL_UPPER ? 0 : id == FTJ_FL_LOWER ? 1 : id == FTJ_FL_CAPITALIZE ? 2 : 4,
                       out);
    case FTJ_FL_ESCAPE: {
        TRY(ftj_to_str(R, off, v, &s));
        struct ftj_buf b = {.limit = R->lim.max_output};
        int rc = 0;
        for (size_t i = 0; i < s.n && !rc; i++) {
            switch (s.p[i]) {
            case '&': rc = ftj_buf_put(&b, "&amp;", 5); break;
            case '<': rc = ftj_buf_put(&b, "&lt;", 4); break;
            case '>': rc = ftj_buf_put(&b, "&gt;", 4); break;
            case '"': rc = ftj_buf_put(&b, "&#34;", 5); break;
            case '\'': rc = ftj_buf_put(&b, "&#39;", 5); break;
            default: rc = ftj_buf_putc(&b, s.p[i]);
            }
        }
        rc = rc ? ftj_chk(R, off, rc, "escape") : ftj_buf_to_val(R, off, &b, out);
        ftj_buf_free(&b);
        return rc;
    }
    case FTJ_FL_REPLACE: {
        struct ftj_val o, n, c = ftj_int(-1);
        if (!ftj_arg_get(a, 0, "old", &o) || !ftj_arg_get(a, 1, "new", &n))
            return ftj_fail(R, off, FT_EINVAL, "replace needs two arguments");
        ftj_arg_get(a, 2, "count", &c);
        struct ftj_str os, ns;
        int64_t cnt = -1;
        TRY(ftj_to_str(R, off, v, &s));
        TRY(ftj_to_str(R, off, o, &os));
        TRY(ftj_to_str(R, off, n, &ns));
        if (c.type != FTJ_NONE)
            TRY(ftj_arg_int(R, off, "replace count", c, &cnt));
        return str_replace(R, off, s, os, ns, cnt, out);
    }
    case FTJ_FL_FIRST:
    case FTJ_FL_LAST: {
        struct ftj_list *l;
        TRY(ftj_iterate(R, off, v, &l));
        *out = l->n ? l->v[id == FTJ_FL_FIRST ? 0 : l->n - 1] : ftj_undef();
        return 0;
    }
    case FTJ_FL_LIST: {
        struct ftj_list *l, *r;
        TRY(ftj_iterate(R, off, v, &l));
        TRY(ftj_new_list(R, off, l->n, false, &r));
        for (size_t i = 0; i < l->n; i++)
            r->v[i] = l->v[i];
        *out = ftj_list_val(r);
        return 0;
    }
    case FTJ_FL_REVERSE: {
        if (v.type == FTJ_STR) {
            size_t n = v.u.s.n, o = 0;
            char *p;
            ALLOC(p, n + 1, off);
            while (o < n) {
                size_t nx = ftj_utf8_next(v.u.s.p, n, o);
                memcpy(p + n - nx, v.u.s.p + o, nx - o);
                o = nx;
            }
            p[n] = '\0';
            *out = ftj_strv(p, n);
            return 0;
        }
        struct ftj_list *l, *r;
        TRY(ftj_iterate(R, off, v, &l));
        TRY(ftj_new_list(R, off, l->n, false, &r));
        for (size_t i = 0; i < l->n; i++)
            r->v[i] = l->v[l->n - 1 - i];
        *out = ftj_list_val(r);
        return 0;
    }
    case FTJ_FL_JOIN: {
        struct ftj_val sep = ftj_strv("", 0), attr;
        ftj_arg_get(a, 0, "d", &sep);
        bool by_attr = ftj_arg_get(a, 1, "attribute", &attr);
        struct ftj_str ss;
        TRY(ftj_to_str(R, off, sep, &ss));
        struct ftj_list *l;
        TRY(ftj_iterate(R, off, v, &l));
        struct ftj_buf b = {.limit = R->lim.max_output};
        int rc = 0;
        for (size_t i = 0; i < l->n && !rc; i++) {
            struct ftj_val it = l->v[i];
            if (by_attr)
                rc = filter_attr(R, off, it, attr, &it);
            if (!rc && i)
                rc = ftj_chk(R, off, ftj_buf_put(&b, ss.p, ss.n), "join");
            if (!rc)
                rc = ftj_chk(R, off, ftj_write_str(&b, it), "join");
        }
        if (!rc)
            rc = ftj_buf_to_val(R, off, &b, out);
        ftj_buf_free(&b);
        return rc;
    }
    case FTJ_FL_ITEMS: return items_of(R, off, v, out);
    case FTJ_FL_TOJSON: return filter_tojson(R, off, v, a, out);
    case FTJ_FL_INDENT:
        TRY(ftj_to_str(R, off, v, &s));
        return filter_indent(R, off, s, a, out);
    case FTJ_FL_MAP: return filter_map(R, off, v, a, out);
    case FTJ_FL_SELECT: return filter_select(R, off, v, a, false, true, out);
    case FTJ_FL_REJECT: return filter_select(R, off, v, a, false, false, out);
    case FTJ_FL_SELECTATTR: return filter_select(R, off, v, a, true, true, out);
    case FTJ_FL_REJECTATTR: return filter_select(R, off, v, a, true, false, out);
    case FTJ_FL_ABS:
        if (v.type == FTJ_INT || v.type == FTJ_BOOL) {
            int64_t i = ftj_as_i(v);
            if (i == INT64_MIN)
                return ftj_fail(R, off, FT_ERANGE, "integer overflow in abs");
            *out = ftj_int(i < 0 ? -i : i);
        } else if (v.type == FTJ_FLOAT) {
            *out = ftj_float(fabs(v.u.f));
        } else {
            return ftj_fail(R, off, FT_EINVAL, "bad operand type for abs(): %s", ftj_type_name(v));
        }
        return 0;
    case FTJ_FL_INT: {
        struct ftj_val d = ftj_int(0), b = ftj_int(10);
        ftj_arg_get(a, 0, "default", &d);
        ftj_arg_get(a, 1, "base", &b);
        int64_t base, i;
        double f;
        TRY(ftj_arg_int(R, off, "int base", b, &base));
        if (v.type == FTJ_INT || v.type == FTJ_BOOL) {
            *out = ftj_int(ftj_as_i(v));
        } else if (v.type == FTJ_FLOAT) {
            if (!(v.u.f > -9.2e18 && v.u.f < 9.2e18))
                return ftj_fail(R, off, FT_ERANGE, "float too large for int");
            *out = ftj_int((int64_t)v.u.f);
        } else if (v.type == FTJ_STR && parse_py_int(v.u.s, (int)base, &i) == 0) {
            *out = ftj_int(i);
        } else if (v.type == FTJ_STR && parse_py_float(v.u.s, &f) == 0 && f > -9.2e18 && f < 9.2e18) {
            *out = ftj_int((int64_t)f);
        } else {
            *out = d;
        }
        return 0;
    }
    case FTJ_FL_FLOAT: {
        struct ftj_val d = ftj_float(0.0);
        ftj_arg_get(a, 0, "default", &d);
        double f;
        if (ftj_is_number(v))
            *out = ftj_float(ftj_as_f(v));
        else if (v.type == FTJ_STR && parse_py_float(v.u.s, &f) == 0)
            *out = ftj_float(f);
        else
            *out = d;
        return 0;
    }
    case FTJ_FL_ROUND: {
        struct ftj_val p = ftj_int(0), m = ftj_strv("common", 6);
        ftj_arg_get(a, 0, "precision", &p);
        ftj_arg_get(a, 1, "method", &m);
        int64_t prec;
        struct ftj_str ms;
        TRY(ftj_arg_int(R, off, "round precision", p, &prec));
        TRY(arg_str(R, off, "round method", m, &ms));
        if (!ftj_is_number(v))
            return ftj_fail(R, off, FT_EINVAL, "round: expected a number, got %s", ftj_type_name(v));
        bool common = ms.n == 6 && memcmp(ms.p, "common", 6) == 0;
        bool ceil_m = ms.n == 4 && memcmp(ms.p, "ceil", 4) == 0;
        bool floor_m = ms.n == 5 && memcmp(ms.p, "floor", 5) == 0;
        if (!common && !ceil_m && !floor_m)
            return ftj_fail(R, off, FT_EINVAL, "round method must be common, ceil or floor");
        if (common && v.type != FTJ_FLOAT && prec >= 0) {
            *out = ftj_int(ftj_as_i(v)); /* Python round(int, n) keeps the int */
            return 0;
        }
        double f = ftj_as_f(v), scale = pow(10.0, (double)FT_MAX(-300, FT_MIN(prec, 300))), r;
        if (common && prec >= 0 && prec <= 30 && isfinite(f)) {
            /* Python rounds the exact binary value to `prec` decimals, ties to
             * even; glibc's printf does the same. */
            char buf[400];
            snprintf(buf, sizeof(buf), "%.*f", (int)prec, f);
            r = strtod(buf, NULL);
        } else {
            r = common ? nearbyint(f * scale) / scale : ceil_m ? ceil(f * scale) / scale : floor(f * scale) / scale;
        }
        if (!isfinite(r))
            r = f;
        *out = ftj_float(r);
        return 0;
    }
    case FTJ_FL_WORDCOUNT: {
        TRY(ftj_to_str(R, off, v, &s));
        int64_t n = 0;
        bool in_word = false;
        for (size_t i = 0; i < s.n; i++) {
            unsigned char c = (unsigned char)s.p[i];
            bool w = a_alpha((char)c) || (c >= '0' && c <= '9') || c == '_' || c >= 0x80;
            if (w && !in_word)
                n++;
            in_word = w;
        }
        *out = ftj_int(n);
        return 0;
    }
    case FTJ_FL_SORT:
    case FTJ_FL_UNIQUE:
    case FTJ_FL_MIN:
    case FTJ_FL_MAX:
    case FTJ_FL_DICTSORT:
    case FTJ_FL_SUM: break;
    default: return ftj_fail(R, off, FT_EUNSUPPORTED, "filter not implemented");
    }

    /* filters over a sequence with keys: sort, unique, min, max, dictsort, sum */
    struct ftj_val cs = ftj_bool(false), rev = ftj_bool(false), attr = ftj_undef();
    bool has_attr;
    struct ftj_list *l;
    if (id == FTJ_FL_SUM) {
        struct ftj_val start = ftj_int(0);
        has_attr = ftj_arg_get(a, 0, "attribute", &attr);
        ftj_arg_get(a, 1, "start", &start);
        TRY(ftj_iterate(R, off, v, &l));
        struct ftj_val acc = start;
        for (size_t i = 0; i < l->n; i++) {
            struct ftj_val it = l->v[i];
            if (has_attr)
                TRY(filter_attr(R, off, it, attr, &it));
            TRY(ftj_binop(R, off, FTJ_OP_ADD, acc, it, &acc));
        }
        *out = acc;
        return 0;
    }
    if (id == FTJ_FL_DICTSORT) {
        struct ftj_val by = ftj_strv("key", 3);
        ftj_arg_get(a, 0, "case_sensitive", &cs);
        ftj_arg_get(a, 1, "by", &by);
        ftj_arg_get(a, 2, "reverse", &rev);
        struct ftj_str bys;
        TRY(arg_str(R, off, "dictsort by", by, &bys));
        bool by_value = bys.n == 5 && memcmp(bys.p, "value", 5) == 0;
        TRY(items_of(R, off, v, &x));
        l = x.u.list;
        struct sort_item *si = ftj_alloc_array(&R->arena, l->n ? l->n : 1, sizeof(*si));
        if (!si)
            return ftj_nomem(R, off);
        for (size_t i = 0; i < l->n; i++) {
            si[i].val = l->v[i];
            TRY(fold_case(R, off, l->v[i].u.list->v[by_value ? 1 : 0], ftj_truthy(cs), &si[i].key));
        }
        TRY(sort_items(R, off, si, l->n, ftj_truthy(rev)));
        for (size_t i = 0; i < l->n; i++)
            l->v[i] = si[i].val;
        *out = x;
        return 0;
    }
    if (id == FTJ_FL_SORT) {
        ftj_arg_get(a, 0, "reverse", &rev);
        ftj_arg_get(a, 1, "case_sensitive", &cs);
        has_attr = ftj_arg_get(a, 2, "attribute", &attr);
    } else if (id == FTJ_FL_UNIQUE) {
        ftj_arg_get(a, 0, "case_sensitive", &cs);
        has_attr = ftj_arg_get(a, 1, "attribute", &attr);
    } else {
        ftj_arg_get(a, 0, "case_sensitive", &cs);
        has_attr = ftj_arg_get(a, 1, "attribute", &attr);
    }
    TRY(ftj_iterate(R, off, v, &l));
    struct sort_item *si = ftj_alloc_array(&R->arena, l->n ? l->n : 1, sizeof(*si));
    if (!si)
        return ftj_nomem(R, off);
    for (size_t i = 0; i < l->n; i++) {
        struct ftj_val k = l->v[i];
        if (has_attr)
            TRY(filter_attr(R, off, k, attr, &k));
        si[i].val = l->v[i];
        TRY(fold_case(R, off, k, ftj_truthy(cs), &si[i].key));
    }
    if (id == FTJ_FL_UNIQUE) {
        struct ftj_list *r;
        TRY(ftj_new_list(R, off, l->n, false, &r));
        r->n = 0;
        for (size_t i = 0; i < l->n; i++) {
            bool seen = false;
            for (size_t j = 0; j < i && !seen; j++)
                seen = ftj_equal(si[j].key, si[i].key);
            if (!seen)
                r->v[r->n++] = si[i].val;
            if ((i & 1023) == 0 && ++R->steps > R->lim.max_steps)
                return ftj_fail(R, off, FT_ERANGE, "evaluation step limit reached");
        }
        *out = ftj_list_val(r);
        return 0;
    }
    if (id == FTJ_FL_MIN || id == FTJ_FL_MAX) {
        if (l->n == 0) {
            *out = ftj_undef();
            return 0;
        }
        size_t best = 0;
        for (size_t i = 1; i < l->n; i++) {
            int c;
            if (ftj_compare(si[i].key, si[best].key, &c))
                return ftj_fail(R, off, FT_EINVAL, "min/max: values are not comparable");
            if ((id == FTJ_FL_MIN && c < 0) || (id == FTJ_FL_MAX && c > 0))
                best = i;
        }
        *out = si[best].val;
        return 0;
    }
    TRY(sort_items(R, off, si, l->n, ftj_truthy(rev)));
    struct ftj_list *r;
    TRY(ftj_new_list(R, off, l->n, false, &r));
    for (size_t i = 0; i < l->n; i++)
        r->v[i] = si[i].val;
    *out = ftj_list_val(r);
    return 0;
}

/* ------------------------------------------------------------- methods */

static int str_split(struct ftj_render *R, size_t off, struct ftj_str s, const struct args *a, bool from_right,
                     struct ftj_val *out) {
    static const char *const names[] = {"sep", "maxsplit", NULL};
    TRY(arg_check(R, off, from_right ? "rsplit" : "split", a, names));
    struct ftj_val sepv = ftj_none(), maxv = ftj_int(-1);
    ftj_arg_get(a, 0, "sep", &sepv);
    ftj_arg_get(a, 1, "maxsplit", &maxv);
    int64_t maxsplit;
    TRY(ftj_arg_int(R, off, "maxsplit", maxv, &maxsplit));
    /* Collect [start, end) pieces, then build the list in order. */
    size_t cap = 16, n = 0;
    size_t *pieces = ftj_alloc_array(&R->arena, cap * 2, sizeof(size_t));
    if (!pieces)
        return ftj_nomem(R, off);
#define PUSH_PIECE(b_, e_)                                                                         \
    do {                                                                                           \
        if (n == cap) {                                                                            \
            if (cap * 2 > R->lim.max_list)                                                         \
                return ftj_fail(R, off, FT_ERANGE, "split: more than %zu pieces", R->lim.max_list);    \
            size_t *np_ = ftj_alloc_array(&R->arena, cap * 4, sizeof(size_t));                     \
            if (!np_)                                                                              \
                return ftj_nomem(R, off);                                                              \
            memcpy(np_, pieces, n * 2 * sizeof(size_t));                                           \
            pieces = np_;                                                                          \
            cap *= 2;                                                                              \
        }                                                                                          \
        pieces[2 * n] = (b_);                                                                      \
        pieces[2 * n + 1] = (e_);                                                                  \
        n++;                                                                                       \
    } while (0)
    if (sepv.type == FTJ_NONE || sepv.type == FTJ_UNDEF) {
        /* runs of whitespace; no empty pieces */
        if (!from_right) {
            size_t i = 0;
            int64_t splits = 0;
            for (;;) {
                while (i < s.n) {
                    size_t nx = i;
                    if (!py_space(ftj_utf8_decode(s.p, s.n, &nx)))
                        break;
                    i = nx;
                }
                if (i >= s.n)
                    break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    PUSH_PIECE(i, s.n);
                    break;
                }
                size_t b = i;
                while (i < s.n) {
                    size_t nx = i;
                    if (py_space(ftj_utf8_decode(s.p, s.n, &nx)))
                        break;
                    i = nx;
                }
                PUSH_PIECE(b, i);
                splits++;
            }
        } else {
            size_t e = s.n;
            int64_t splits = 0;
            for (;;) {
                while (e > 0) {
                    size_t pv = utf8_prev(s.p, e), t = pv;
                    if (!py_space(ftj_utf8_decode(s.p, e, &t)))
                        break;
                    e = pv;
                }
                if (e == 0)
                    break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    PUSH_PIECE(0, e);
                    break;
                }
                size_t b = e;
                while (b > 0) {
                    size_t pv = utf8_prev(s.p, b), t = pv;
                    if (py_space(ftj_utf8_decode(s.p, b, &t)))
                        break;
                    b = pv;
                }
                PUSH_PIECE(b, e);
                e = b;
                splits++;
            }
        }
    } else {
        struct ftj_str sep;
        TRY(arg_str(R, off, "split separator", sepv, &sep));
        if (sep.n == 0)
            return ftj_fail(R, off, FT_EINVAL, "split: empty separator");
        if (!from_right) {
            size_t i = 0;
            int64_t splits = 0;
            for (;;) {
                const char *hit = (maxsplit < 0 || splits < maxsplit) ? ftj_memmem(s, i, sep) : NULL;
                if (!hit) {
                    PUSH_PIECE(i, s.n);
                    break;
                }
                PUSH_PIECE(i, (size_t)(hit - s.p));
                i = (size_t)(hit - s.p) + sep.n;
                splits++;
            }
        } else {
            size_t e = s.n;
            int64_t splits = 0;
            for (;;) {
                size_t hit = SIZE_MAX;
                if ((maxsplit < 0 || splits < maxsplit) && e >= sep.n) {
                    for (size_t k = e - sep.n + 1; k-- > 0;)
                        if (memcmp(s.p + k, sep.p, sep.n) == 0) {
                            hit = k;
                            break;
                        }
                }
                if (hit == SIZE_MAX) {
                    PUSH_PIECE(0, e);
                    break;
                }
                PUSH_PIECE(hit + sep.n, e);
                e = hit;
                splits++;
            }
        }
    }
#undef PUSH_PIECE
    struct ftj_list *l;
    TRY(ftj_new_list(R, off, n, false, &l));
    for (size_t i = 0; i < n; i++) {
        size_t k = from_right ? n - 1 - i : i;
        l->v[i] = ftj_strv(s.p + pieces[2 * k], pieces[2 * k + 1] - pieces[2 * k]);
    }
    *out = ftj_list_val(l);
    return 0;
}

/* str.format() with plain fields: {} {0} {name}, and {{ }}. Format specs,
 * conversions and attribute lookups inside fields are not supported. */
static int str_format(struct ftj_render *R, size_t off, struct ftj_str s, const struct args *a, struct ftj_val *out) {
    struct ftj_buf b = {.limit = R->lim.max_output};
    int rc = 0;
    size_t auto_idx = 0;
    for (size_t i = 0; i < s.n && !rc; i++) {
        char c = s.p[i];
        if ((c == '{' || c == '}') && i + 1 < s.n && s.p[i + 1] == c) {
            rc = ftj_chk(R, off, ftj_buf_putc(&b, c), "format");
            i++;
            continue;
        }
        if (c == '}') {
            rc = ftj_fail(R, off, FT_EINVAL, "format: single '}' encountered in format string");
            break;
        }
        if (c != '{') {
            rc = ftj_chk(R, off, ftj_buf_putc(&b, c), "format");
            continue;
        }
        size_t j = i + 1;
        while (j < s.n && s.p[j] != '}' && s.p[j] != '{' && s.p[j] != ':' && s.p[j] != '!' && s.p[j] != '.' &&
               s.p[j] != '[')
            j++;
        if (j >= s.n || s.p[j] != '}') {
            rc = ftj_fail(R, off, FT_EUNSUPPORTED, "format: only plain {}, {N} and {name} fields are supported");
            break;
        }
        struct ftj_str field = {s.p + i + 1, j - i - 1};
        struct ftj_val v;
        bool found;
        if (field.n == 0) {
            found = auto_idx < a->npos;
            if (found)
                v = a->pos[auto_idx++];
        } else if (field.p[0] >= '0' && field.p[0] <= '9') {
            size_t k = 0;
            for (size_t d = 0; d < field.n && k < 1000000; d++)
                k = k * 10 + (size_t)(field.p[d] - '0');
            found = k < a->npos;
            if (found)
                v = a->pos[k];
        } else {
            found = false;
            for (size_t k = 0; k < a->nkw && !found; k++)
                if (a->kwx[k].name.n == field.n && memcmp(a->kwx[k].name.p, field.p, field.n) == 0) {
                    v = a->kwv[k];
                    found = true;
                }
        }
        if (!found) {
            rc = ftj_fail(R, off, FT_EINVAL, "format: no argument for field {%.*s}", (int)FT_MIN(field.n, 64), field.p);
            break;
        }
        rc = ftj_chk(R, off, ftj_write_str(&b, v), "format");
        i = j;
    }
    if (!rc)
        rc = ftj_buf_to_val(R, off, &b, out);
    ftj_buf_free(&b);
    return rc;
}

/* list.append(x): grows the list in place, so every name bound to it sees
 * the new item, as in Python; returns none. A full array is copied into one
 * twice the size (the old one stays valid: slices and loops may point at
 * it). Counted as a mutation so that no arena roll-back frees the copy. */
static int list_append(struct ftj_render *R, size_t off, struct ftj_list *l, const struct args *a,
                       struct ftj_val *out) {
    if (a->npos != 1 || a->nkw)
        return ftj_fail(R, off, FT_EINVAL, "append() takes exactly one argument");
    if (l->tuple)
        return ftj_fail(R, off, FT_EINVAL, "'tuple' object has no attribute 'append'");
    if (l->n >= R->lim.max_list)
        return ftj_fail(R, off, FT_ERANGE, "a list of %zu items exceeds the limit of %zu", l->n + 1, R->lim.max_list);
    if (l->n >= l->cap) {
        size_t cap = l->n < 4 ? 8 : FT_MIN(2 * l->n, R->lim.max_list);
        struct ftj_val *v;
        ALLOC(v, cap * sizeof(*v), off);
        if (l->n)
            memcpy(v, l->v, l->n * sizeof(*v));
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = a->pos[0];
    R->ns_writes++;
    *out = ftj_none();
    return 0;
}

/* list.pop([i]): removes and returns item i (default the last; negative
 * counts from the end), shifting the rest down in place, as in Python. */
static int list_pop(struct ftj_render *R, size_t off, struct ftj_list *l, const struct args *a,
                    struct ftj_val *out) {
    if (a->npos > 1 || a->nkw)
        return ftj_fail(R, off, FT_EINVAL, "pop() takes at most one argument");
    if (l->tuple)
        return ftj_fail(R, off, FT_EINVAL, "'tuple' object has no attribute 'pop'");
    int64_t i = -1;
    if (a->npos) {
        if (a->pos[0].type != FTJ_INT)
            return ftj_fail(R, off, FT_EINVAL, "pop() index must be an integer, not %s", ftj_type_name(a->pos[0]));
        i = a->pos[0].u.i;
    }
    if (l->n == 0)
        return ftj_fail(R, off, FT_EINVAL, "pop from empty list");
    if (i < 0)
        i += (int64_t)l->n;
    if (i < 0 || (uint64_t)i >= l->n)
        return ftj_fail(R, off, FT_EINVAL, "pop index out of range");
    *out = l->v[i];
    memmove(&l->v[i], &l->v[i + 1], (l->n - (size_t)i - 1) * sizeof(l->v[0]));
    l->n--;
    R->ns_writes++;
    return 0;
}

int ftj_call_method(struct ftj_render *R, const struct ftj_expr *e, struct ftj_val obj, const struct args *a,
                    struct ftj_val *out) {
    size_t off = e->off;
    int id = e->id;
    struct ftj_str name = e->a->name;
    struct ftj_val x;
    if (obj.type == FTJ_STR) {
        struct ftj_str s = obj.u.s, arg;
        CHARGE(R, s.n);
        switch (id) {
        case FTJ_M_STARTSWITH:
        case FTJ_M_ENDSWITH: {
            if (a->npos != 1 || a->nkw)
                return ftj_fail(R, off, FT_EUNSUPPORTED, "%.*s() takes exactly one positional argument here",
                                (int)name.n, name.p);
            struct ftj_val p = a->pos[0];
            size_t np = p.type == FTJ_LIST ? p.u.list->n : 1;
            bool hit = false;
            for (size_t i = 0; i < np && !hit; i++) {
                struct ftj_val c = p.type == FTJ_LIST ? p.u.list->v[i] : p;
                TRY(arg_str(R, off, "startswith/endswith", c, &arg));
                if (arg.n <= s.n)
                    hit = memcmp(id == FTJ_M_STARTSWITH ? s.p : s.p + s.n - arg.n, arg.p, arg.n) == 0;
            }
            *out = ftj_bool(hit);
            return 0;
        }
        case FTJ_M_SPLIT:
        case FTJ_M_RSPLIT: return str_split(R, off, s, a, id == FTJ_M_RSPLIT, out);
        case FTJ_M_STRIP:
        case FTJ_M_LSTRIP:
        case FTJ_M_RSTRIP: {
            static const char *const names[] = {"chars", NULL};
            TRY(arg_check(R, off, "strip", a, names));
            struct cpset set = {NULL};
            if (ftj_arg_get(a, 0, "chars", &x) && x.type != FTJ_NONE) {
                TRY(arg_str(R, off, "strip", x, &arg));
                set.chars = &arg;
            }
            s = str_strip(s, set, id != FTJ_M_RSTRIP, id != FTJ_M_LSTRIP);
            *out = ftj_strv(s.p, s.n);
            return 0;
        }
        case FTJ_M_UPPER: return str_map(R, off, s, 0, out);
        case FTJ_M_LOWER: return str_map(R, off, s, 1, out);
        case FTJ_M_CAPITALIZE: return str_map(R, off, s, 2, out);
        case FTJ_M_TITLE: return str_map(R, off, s, 3, out);
        case FTJ_M_REPLACE: {
            static const char *const names[] = {"old", "new", "count", NULL};
            TRY(arg_check(R, off, "replace", a, names));
            struct ftj_val o, n, c = ftj_int(-1);
            if (!ftj_arg_get(a, 0, "old", &o) || !ftj_arg_get(a, 1, "new", &n))
                return ftj_fail(R, off, FT_EINVAL, "replace() needs two arguments");
            ftj_arg_get(a, 2, "count", &c);
            struct ftj_str os, ns;
            int64_t cnt;
            TRY(arg_str(R, off, "replace", o, &os));
            TRY(arg_str(R, off, "replace", n, &ns));
            TRY(ftj_arg_int(R, off, "replace count", c, &cnt));
            return str_replace(R, off, s, os, ns, cnt, out);
        }
        case FTJ_M_FIND:
        case FTJ_M_RFIND:
        case FTJ_M_COUNT: {
            if (a->npos != 1 || a->nkw)
                return ftj_fail(R, off, FT_EUNSUPPORTED, "%.*s() takes exactly one argument here", (int)name.n, name.p);
            TRY(arg_str(R, off, "find/count", a->pos[0], &arg));
            if (id == FTJ_M_COUNT) {
                int64_t k = 0;
                if (arg.n == 0) {
                    k = (int64_t)ftj_utf8_count(s.p, s.n) + 1;
                } else {
                    for (size_t i = 0; ftj_memmem(s, i, arg); k++)
                        i = (size_t)(ftj_memmem(s, i, arg) - s.p) + arg.n;
                }
                *out = ftj_int(k);
                return 0;
            }
            size_t at = SIZE_MAX;
            if (id == FTJ_M_FIND) {
                const char *h = ftj_memmem(s, 0, arg);
                if (h)
                    at = (size_t)(h - s.p);
            } else if (arg.n <= s.n) {
                for (size_t k = s.n - arg.n + 1; k-- > 0;)
                    if (memcmp(s.p + k, arg.p, arg.n) == 0) {
                        at = k;
                        break;
                    }
            }
            *out = ftj_int(at == SIZE_MAX ? -1 : (int64_t)ftj_utf8_count(s.p, at));
            return 0;
        }
        case FTJ_M_JOIN: {
            if (a->npos != 1 || a->nkw)
                return ftj_fail(R, off, FT_EINVAL, "join() takes exactly one argument");
            struct ftj_list *l;
            TRY(ftj_iterate(R, off, a->pos[0], &l));
            struct ftj_buf b = {.limit = R->lim.max_output};
            int rc = 0;
            for (size_t i = 0; i < l->n && !rc; i++) {
                if (l->v[i].type != FTJ_STR) {
                    rc = ftj_fail(R, off, FT_EINVAL, "join: sequence item %zu: expected str, got %s", i,
                                  ftj_type_name(l->v[i]));
                    break;
                }
                if (i)
                    rc = ftj_chk(R, off, ftj_buf_put(&b, s.p, s.n), "join");
                if (!rc)
                    rc = ftj_chk(R, off, ftj_buf_put(&b, l->v[i].u.s.p, l->v[i].u.s.n), "join");
            }
            if (!rc)
                rc = ftj_buf_to_val(R, off, &b, out);
            ftj_buf_free(&b);
            return rc;
        }
        case FTJ_M_REMOVEPREFIX:
        case FTJ_M_REMOVESUFFIX: {
            if (a->npos != 1 || a->nkw)
                return ftj_fail(R, off, FT_EINVAL, "%.*s() takes exactly one argument", (int)name.n, name.p);
            TRY(arg_str(R, off, "removeprefix/removesuffix", a->pos[0], &arg));
            bool pre = id == FTJ_M_REMOVEPREFIX;
            if (arg.n <= s.n && memcmp(pre ? s.p : s.p + s.n - arg.n, arg.p, arg.n) == 0) {
                s.n -= arg.n;
                if (pre)
                    s.p += arg.n;
            }
            *out = ftj_strv(s.p, s.n);
            return 0;
        }
        case FTJ_M_ISDIGIT:
        case FTJ_M_ISALPHA:
        case FTJ_M_ISALNUM:
        case FTJ_M_ISSPACE: {
            if (a->npos || a->nkw)
                return ftj_fail(R, off, FT_EINVAL, "%.*s() takes no arguments", (int)name.n, name.p);
            bool ok = s.n > 0;
            for (size_t i = 0; i < s.n && ok; i++) {
                char c = s.p[i];
                bool d = c >= '0' && c <= '9';
                ok = id == FTJ_M_ISDIGIT ? d : id == FTJ_M_ISALPHA ? a_alpha(c) : id == FTJ_M_ISALNUM ? (d || a_alpha(c))
                     : (c == ' ' || (c >= '\t' && c <= '\r'));
            }
            *out = ftj_bool(ok);
            return 0;
        }
        case FTJ_M_FORMAT: return str_format(R, off, s, a, out);
        case FTJ_M_ISLOWER:
        case FTJ_M_ISUPPER: {
            bool b;
            TRY(ftj_run_test(R, off, id == FTJ_M_ISLOWER ? FTJ_TS_LOWER : FTJ_TS_UPPER, obj, NULL, 0, &b));
            *out = ftj_bool(b);
            return 0;
        }
        default: break;
        }
    } else if (obj.type == FTJ_DICT || obj.type == FTJ_NS) {
        switch (id) {
        case FTJ_M_ITEMS:
        case FTJ_M_KEYS:
        case FTJ_M_VALUES: {
            if (a->npos || a->nkw)
                return ftj_fail(R, off, FT_EINVAL, "%.*s() takes no arguments", (int)name.n, name.p);
            if (obj.type == FTJ_NS)
                break;
            if (id == FTJ_M_ITEMS)
                return items_of(R, off, obj, out);
            struct ftj_list *l;
            TRY(ftj_new_list(R, off, obj.u.dict->n, false, &l));
            for (size_t i = 0; i < obj.u.dict->n; i++)
                l->v[i] = id == FTJ_M_KEYS ? obj.u.dict->k[i] : obj.u.dict->v[i];
            *out = ftj_list_val(l);
            return 0;
        }
        case FTJ_M_GET: {
            if (obj.type == FTJ_NS)
                break;
            if (a->npos < 1 || a->npos > 2 || a->nkw)
                return ftj_fail(R, off, FT_EINVAL, "get() takes one or two arguments");
            struct ftj_val *hit = ftj_dict_get(obj.u.dict, a->pos[0]);
            *out = hit ? *hit : a->npos == 2 ? a->pos[1] : ftj_none();
            return 0;
        }
        default: break;
        }
    } else if (obj.type == FTJ_LIST && id == FTJ_M_APPEND) {
        return list_append(R, off, obj.u.list, a, out);
    } else if (obj.type == FTJ_LIST && id == FTJ_M_POP) {
        return list_pop(R, off, obj.u.list, a, out);
    } else if (obj.type == FTJ_LOOP && id == FTJ_M_CYCLE) {
        if (a->npos == 0)
            return ftj_fail(R, off, FT_EINVAL, "loop.cycle() needs at least one argument");
        *out = a->pos[obj.u.loop->index0 % (int64_t)a->npos];
        return 0;
    }
    if (obj.type == FTJ_UNDEF)
        return ftj_fail(R, off, FT_EINVAL, "cannot call '%.*s()' on an undefined value", (int)FT_MIN(name.n, 64),
                        name.p);
    if (obj.type == FTJ_STR || obj.type == FTJ_LIST || obj.type == FTJ_DICT)
        return ftj_fail(R, off, FT_EUNSUPPORTED, "method '%.*s()' of %s is not supported", (int)FT_MIN(name.n, 64),
                        name.p, ftj_type_name(obj));
    return ftj_fail(R, off, FT_EINVAL, "%s has no method '%.*s()'", ftj_type_name(obj), (int)FT_MIN(name.n, 64),
                    name.p);
}

/* ------------------------------------------------------------- functions */

int ftj_call_func(struct ftj_render *R, size_t off, int fn, const struct args *a, struct ftj_val *out) {
    switch (fn) {
    case FTJ_F_RANGE: {
        if (a->nkw || a->npos < 1 || a->npos > 3)
            return ftj_fail(R, off, FT_EINVAL, "range() takes 1 to 3 positional arguments");
        int64_t v[3] = {0, 0, 0}, start = 0, stop, step = 1;
        for (size_t i = 0; i < a->npos; i++)
            TRY(ftj_arg_int(R, off, "range", a->pos[i], &v[i]));
        if (a->npos == 1) {
            stop = v[0];
        } else {
            start = v[0];
            stop = v[1];
            if (a->npos == 3)
                step = v[2];
        }
        if (step == 0)
            return ftj_fail(R, off, FT_EINVAL, "range() step must not be zero");
        uint64_t n = 0;
        if (step > 0 && start < stop)
            n = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
        else if (step < 0 && start > stop)
            n = ((uint64_t)start - (uint64_t)stop - 1) / (0 - (uint64_t)step) + 1;
        if (n > R->lim.max_list)
            return ftj_fail(R, off, FT_ERANGE, "range() of %llu items exceeds the limit of %zu", (unsigned long long)n,
                            R->lim.max_list);
        struct ftj_list *l;
        TRY(ftj_new_list(R, off, (size_t)n, false, &l));
        for (uint64_t i = 0; i < n; i++)
            l->v[i] = ftj_int((int64_t)((uint64_t)start + i * (uint64_t)step));
        *out = ftj_list_val(l);
        return 0;
    }
    case FTJ_F_NAMESPACE:
    case FTJ_F_DICT: {
        struct ftj_dict *d = ftj_dict_new(&R->arena, a->nkw);
        if (!d)
            return ftj_nomem(R, off);
        for (size_t i = 0; i < a->npos; i++) {
            struct ftj_val p = a->pos[i];
            if (p.type != FTJ_DICT && p.type != FTJ_NS)
                return ftj_fail(R, off, FT_EINVAL, "%s() positional arguments must be mappings",
                                fn == FTJ_F_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < p.u.dict->n; k++)
                if (ftj_dict_set(&R->arena, d, p.u.dict->k[k], p.u.dict->v[k]))
                    return ftj_nomem(R, off);
        }
        for (size_t i = 0; i < a->nkw; i++)
            if (ftj_dict_set(&R->arena, d, ftj_strv(a->kwx[i].name.p, a->kwx[i].name.n), a->kwv[i]))
                return ftj_nomem(R, off);
        *out = ftj_dict_val(d, fn == FTJ_F_NAMESPACE);
        return 0;
    }
    case FTJ_F_RAISE: {
        struct ftj_str msg = {"", 0};
        if (a->npos)
            TRY(ftj_to_str(R, off, a->pos[0], &msg));
        if (!R->failed) {
            R->failed = true;
            if (!R->quiet)
                FT_LOG_E("chat template: %.*s", (int)FT_MIN(msg.n, 400), msg.p);
        }
        return FT_EINVAL;
    }
    case FTJ_F_STRFTIME: {
        struct ftj_str fmt;
        if (a->npos != 1 || a->nkw)
            return ftj_fail(R, off, FT_EINVAL, "strftime_now() takes one argument");
        TRY(arg_str(R, off, "strftime_now", a->pos[0], &fmt));
        if (fmt.n > 256)
            return ftj_fail(R, off, FT_EINVAL, "strftime_now() format too long");
        char f[260], buf[1024];
        memcpy(f, fmt.p, fmt.n);
        f[fmt.n] = '\0';
        time_t now = R->now ? (time_t)R->now : time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        /* The format comes from the template, as in HF's strftime_now. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        size_t n = fmt.n ? strftime(buf, sizeof(buf), f, &tm) : 0;
#pragma GCC diagnostic pop
        char *p;
        ALLOC(p, n + 1, off);
        memcpy(p, buf, n);
        p[n] = '\0';
        *out = ftj_strv(p, n);
        return 0;
    }
    default: return ftj_fail(R, off, FT_EUNSUPPORTED, "function not implemented");
    }
}
