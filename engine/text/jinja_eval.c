/* Evaluator of the Jinja-subset interpreter: walks the tree that
 * jinja_parse.c builds and writes the rendered text.
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
#include "jinja.h"

#include "ft/common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const struct ftj_limits ftj_default_limits = {
    .max_output = 16u << 20,
    .max_memory = 256u << 20,
    .max_steps = 50u * 1000 * 1000,
    .max_iterations = 1000u * 1000,
    .max_depth = 400,
    .max_list = 1000u * 1000,
};

enum { JX_BREAK = 1, JX_CONTINUE = 2 }; /* exec results besides 0 and FT_E* */

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

#define TRY(x)                 \
    do {                       \
        int rc_ = (x);         \
        if (rc_)               \
            return rc_;        \
    } while (0)

/* ---------------------------------------------------------------- errors */

static int fail(struct ftj_render *R, size_t off, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(struct ftj_render *R, size_t off, int rc, const char *fmt, ...) {
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
static int chk(struct ftj_render *R, size_t off, int rc, const char *what) {
    if (rc == 0 || R->failed)
        return rc;
    switch (rc) {
    case FT_ERANGE:
        return fail(R, off, rc, "%s: output larger than %zu bytes, or data nested deeper than %d", what,
                    R->lim.max_output, FTJ_MAX_DATA_DEPTH);
    case FT_ENOMEM:
        if (R->arena.over_limit)
            return fail(R, off, FT_ERANGE, "%s: render memory limit (%zu bytes) reached", what, R->lim.max_memory);
        return fail(R, off, rc, "%s: out of memory", what);
    default: return fail(R, off, rc, "%s failed", what);
    }
}

/* Work on long strings and lists is charged to the step budget (one step
 * per 64 bytes allocated, searched or written, one per list item searched
 * or sorted), so a template cannot spin for long on a few cheap-looking
 * steps. The budget is checked at the next evaluation step. */
#define CHARGE(R, bytes) ((R)->steps += (uint64_t)(bytes) >> 6)

static void *ralloc(struct ftj_render *R, size_t n) {
    CHARGE(R, n);
    return ftj_alloc(&R->arena, n);
}

static int nomem(struct ftj_render *R, size_t off) { return chk(R, off, FT_ENOMEM, "allocation"); }

#define ALLOC(var, n, off)                    \
    do {                                      \
        (var) = ralloc(R, (n));               \
        if (!(var))                           \
            return nomem(R, (off));           \
    } while (0)

static int new_list(struct ftj_render *R, size_t off, size_t n, bool tuple, struct ftj_list **out) {
    if (n > R->lim.max_list)
        return fail(R, off, FT_ERANGE, "a list of %zu items exceeds the limit of %zu", n, R->lim.max_list);
    *out = ftj_list_new(&R->arena, n, tuple);
    return *out ? 0 : nomem(R, off);
}

static struct ftj_val list_val(struct ftj_list *l) {
    struct ftj_val v = {.type = FTJ_LIST, .u.list = l};
    return v;
}
static struct ftj_val dict_val(struct ftj_dict *d, bool ns) {
    struct ftj_val v = {.type = (uint8_t)(ns ? FTJ_NS : FTJ_DICT), .u.dict = d};
    return v;
}
static struct ftj_val undef_named(struct ftj_str name) {
    struct ftj_val v = {.type = FTJ_UNDEF, .u.s = name};
    return v;
}

/* ---------------------------------------------------------------- output */

static int emit(struct ftj_render *R, size_t off, const char *s, size_t n) {
    CHARGE(R, n);
    if (R->out != &R->main_out) {
        if (n > R->lim.max_output || R->buffered > R->lim.max_output - n)
            return chk(R, off, FT_ERANGE, "output");
        R->buffered += n;
    }
    return chk(R, off, ftj_buf_put(R->out, s, n), "output");
}

static int emit_val(struct ftj_render *R, size_t off, struct ftj_val v) {
    if (v.type == FTJ_STR)
        return emit(R, off, v.u.s.p, v.u.s.n);
    size_t before = R->out->n;
    int rc = ftj_write_str(R->out, v);
    if (R->out != &R->main_out)
        R->buffered += R->out->n - before;
    return chk(R, off, rc, "output");
}

/* str(v) as a string value in the arena. */
static int to_str(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_str *out) {
    if (v.type == FTJ_STR) {
        *out = v.u.s;
        return 0;
    }
    struct ftj_buf b = {.limit = R->lim.max_output};
    int rc = ftj_write_str(&b, v);
    if (rc) {
        ftj_buf_free(&b);
        return chk(R, off, rc, "string conversion");
    }
    char *p = ralloc(R, b.n + 1);
    if (!p) {
        ftj_buf_free(&b);
        return nomem(R, off);
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
static int buf_to_val(struct ftj_render *R, size_t off, const struct ftj_buf *b, struct ftj_val *out) {
    char *p;
    ALLOC(p, b->n + 1, off);
    if (b->n)
        memcpy(p, b->p, b->n);
    p[b->n] = '\0';
    *out = ftj_strv(p, b->n);
    return 0;
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
            return nomem(R, off);
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
    return undef_named(name);
}

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

static const char *memmem_s(struct ftj_str hay, size_t from, struct ftj_str needle) {
    if (from > hay.n || needle.n > hay.n - from)
        return NULL;
    if (needle.n == 0)
        return hay.p + from;
    return memmem(hay.p + from, hay.n - from, needle.p, needle.n);
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
            const char *hit = (count < 0 || k < count) ? memmem_s(s, i, from) : NULL;
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
        rc = buf_to_val(R, off, &b, out);
    else
        rc = chk(R, off, rc, "replace");
    ftj_buf_free(&b);
    return rc;
}

/* ---------------------------------------------------------------- args */

static bool arg_get(const struct args *a, size_t i, const char *name, struct ftj_val *out) {
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
static int arg_check(struct ftj_render *R, size_t off, const char *what, const struct args *a,
                     const char *const *names) {
    size_t n = 0;
    while (names[n])
        n++;
    if (a->npos > n)
        return fail(R, off, FT_EINVAL, "%s takes at most %zu argument(s), %zu given", what, n, a->npos);
    for (size_t k = 0; k < a->nkw; k++) {
        size_t j;
        for (j = 0; j < n; j++)
            if (a->kwx[k].name.n == strlen(names[j]) && memcmp(a->kwx[k].name.p, names[j], a->kwx[k].name.n) == 0)
                break;
        if (j == n)
            return fail(R, off, FT_EUNSUPPORTED, "%s: unsupported keyword argument '%.*s'", what,
                        (int)FT_MIN(a->kwx[k].name.n, 64), a->kwx[k].name.p);
        if (j < a->npos)
            return fail(R, off, FT_EINVAL, "%s: argument '%s' given twice", what, names[j]);
    }
    return 0;
}

static int arg_str(struct ftj_render *R, size_t off, const char *what, struct ftj_val v, struct ftj_str *out) {
    out->p = "";
    out->n = 0;
    if (v.type != FTJ_STR)
        return fail(R, off, FT_EINVAL, "%s: expected a string, got %s", what, ftj_type_name(v));
    *out = v.u.s;
    return 0;
}

static int arg_int(struct ftj_render *R, size_t off, const char *what, struct ftj_val v, int64_t *out) {
    *out = 0;
    if (v.type == FTJ_INT)
        *out = v.u.i;
    else if (v.type == FTJ_BOOL)
        *out = v.u.b;
    else
        return fail(R, off, FT_EINVAL, "%s: expected an integer, got %s", what, ftj_type_name(v));
    return 0;
}

/* ------------------------------------------------------------ iteration */

/* The items a `for` loop or a filter walks over. */
static int iterate(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_list **out) {
    switch (v.type) {
    case FTJ_LIST: *out = v.u.list; return 0;
    case FTJ_UNDEF: return new_list(R, off, 0, false, out);
    case FTJ_DICT:
    case FTJ_NS: {
        TRY(new_list(R, off, v.u.dict->n, false, out));
        for (size_t i = 0; i < v.u.dict->n; i++)
            (*out)->v[i] = v.u.dict->k[i];
        return 0;
    }
    case FTJ_STR: {
        size_t n = ftj_utf8_count(v.u.s.p, v.u.s.n);
        TRY(new_list(R, off, n, false, out));
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            size_t nx = ftj_utf8_next(v.u.s.p, v.u.s.n, o);
            (*out)->v[i] = ftj_strv(v.u.s.p + o, nx - o);
            o = nx;
        }
        return 0;
    }
    default: return fail(R, off, FT_EINVAL, "'%s' object is not iterable", ftj_type_name(v));
    }
}

static int count_iteration(struct ftj_render *R, size_t off) {
    if (++R->iters > R->lim.max_iterations)
        return fail(R, off, FT_ERANGE, "more than %llu loop iterations and macro calls",
                    (unsigned long long)R->lim.max_iterations);
    return 0;
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
    return undef_named(name);
}

static struct ftj_val get_attr(struct ftj_val v, struct ftj_str name) {
    switch (v.type) {
    case FTJ_DICT:
    case FTJ_NS: {
        struct ftj_val *x = ftj_dict_get_str(v.u.dict, name.p, name.n);
        return x ? *x : undef_named(name);
    }
    case FTJ_LOOP: return loop_attr(v.u.loop, name);
    default: return undef_named(name);
    }
}

static int get_item(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_val key, struct ftj_val *out) {
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
            *out = undef_named(key.u.s);
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
        TRY(arg_int(R, off, "slice step", vst, &st));
    if (st == 0)
        return fail(R, off, FT_EINVAL, "slice step cannot be zero");
    if (st == INT64_MIN)
        st = -INT64_MAX;
    if (vs.type == FTJ_UNDEF || vs.type == FTJ_NONE) {
        s = st < 0 ? len - 1 : 0;
    } else {
        TRY(arg_int(R, off, "slice start", vs, &s));
        if (s < 0) {
            s = s < -len ? (st < 0 ? -1 : 0) : s + len;
        } else if (s >= len) {
            s = st < 0 ? len - 1 : len;
        }
    }
    if (ve.type == FTJ_UNDEF || ve.type == FTJ_NONE) {
        e = st < 0 ? -1 : len;
    } else {
        TRY(arg_int(R, off, "slice stop", ve, &e));
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

static int do_slice(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_val vs, struct ftj_val ve,
                    struct ftj_val vst, struct ftj_val *out) {
    int64_t start, step, count;
    if (v.type == FTJ_LIST) {
        const struct ftj_list *l = v.u.list;
        TRY(slice_indices(R, off, vs, ve, vst, (int64_t)l->n, &start, &step, &count));
        struct ftj_list *r;
        TRY(new_list(R, off, (size_t)count, l->tuple, &r));
        for (int64_t i = 0; i < count; i++)
            r->v[i] = l->v[start + i * step];
        *out = list_val(r);
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
            return nomem(R, off);
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
    return fail(R, off, FT_EINVAL, "cannot slice a %s", ftj_type_name(v));
}

/* ------------------------------------------------------------ operators */

static bool is_number(struct ftj_val v) { return v.type == FTJ_INT || v.type == FTJ_FLOAT || v.type == FTJ_BOOL; }
static double as_f(struct ftj_val v) {
    return v.type == FTJ_FLOAT ? v.u.f : v.type == FTJ_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t as_i(struct ftj_val v) { return v.type == FTJ_INT ? v.u.i : (int64_t)v.u.b; }

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
            return fail(R, off, FT_EINVAL, "'%.*s' is undefined", (int)FT_MIN(n.n, 64), n.p);
        return fail(R, off, FT_EINVAL, "undefined value in '%s'", op_name(op));
    }
    return fail(R, off, FT_EINVAL, "unsupported operand types for %s: %s and %s", op_name(op), ftj_type_name(a),
                ftj_type_name(b));
}

static int concat_str(struct ftj_render *R, size_t off, struct ftj_str a, struct ftj_str b, struct ftj_val *out) {
    size_t n;
    if (ft_add_overflow(a.n, b.n, &n) || n > R->lim.max_output)
        return chk(R, off, FT_ERANGE, "string concatenation");
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
            return chk(R, off, FT_ERANGE, "string repetition");
        char *p;
        ALLOC(p, n + 1, off);
        for (int64_t i = 0; i < times; i++)
            memcpy(p + (size_t)i * seq.u.s.n, seq.u.s.p, seq.u.s.n);
        p[n] = '\0';
        *out = ftj_strv(p, n);
        return 0;
    }
    size_t n;
    if (ft_mul_overflow(seq.u.list->n, (size_t)times, &n) || n > R->lim.max_list)
        return fail(R, off, FT_ERANGE, "list repetition too large");
    struct ftj_list *l;
    TRY(new_list(R, off, n, seq.u.list->tuple, &l));
    for (size_t i = 0; i < n; i++)
        l->v[i] = seq.u.list->v[i % seq.u.list->n];
    *out = list_val(l);
    return 0;
}

static int binop(struct ftj_render *R, size_t off, int op, struct ftj_val a, struct ftj_val b, struct ftj_val *out) {
    if (op == FTJ_OP_TILDE) {
        struct ftj_str x, y;
        TRY(to_str(R, off, a, &x));
        TRY(to_str(R, off, b, &y));
        return concat_str(R, off, x, y, out);
    }
    if (is_number(a) && is_number(b)) {
        bool fl = a.type == FTJ_FLOAT || b.type == FTJ_FLOAT || op == FTJ_OP_DIV;
        if (!fl) {
            int64_t x = as_i(a), y = as_i(b), r = 0;
            bool ovf = false;
            switch (op) {
            case FTJ_OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
            case FTJ_OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
            case FTJ_OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
            case FTJ_OP_FLOORDIV:
            case FTJ_OP_MOD:
                if (y == 0)
                    return fail(R, off, FT_EINVAL, "integer division or modulo by zero");
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
                return fail(R, off, FT_ERANGE, "integer overflow in '%s'", op_name(op));
            if (!fl) {
                *out = ftj_int(r);
                return 0;
            }
        }
        double x = as_f(a), y = as_f(b), r;
        switch (op) {
        case FTJ_OP_ADD: r = x + y; break;
        case FTJ_OP_SUB: r = x - y; break;
        case FTJ_OP_MUL: r = x * y; break;
        case FTJ_OP_DIV:
            if (y == 0)
                return fail(R, off, FT_EINVAL, "division by zero");
            r = x / y;
            break;
        case FTJ_OP_FLOORDIV:
        case FTJ_OP_MOD: {
            if (y == 0)
                return fail(R, off, FT_EINVAL, "float division or modulo by zero");
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
                return fail(R, off, FT_EINVAL, "0.0 cannot be raised to a negative power");
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
        TRY(new_list(R, off, a.u.list->n + b.u.list->n, a.u.list->tuple, &l));
        for (size_t i = 0; i < a.u.list->n; i++)
            l->v[i] = a.u.list->v[i];
        for (size_t i = 0; i < b.u.list->n; i++)
            l->v[a.u.list->n + i] = b.u.list->v[i];
        *out = list_val(l);
        return 0;
    }
    if (op == FTJ_OP_MUL) {
        if ((a.type == FTJ_STR || a.type == FTJ_LIST) && (b.type == FTJ_INT || b.type == FTJ_BOOL))
            return repeat(R, off, a, as_i(b), out);
        if ((b.type == FTJ_STR || b.type == FTJ_LIST) && (a.type == FTJ_INT || a.type == FTJ_BOOL))
            return repeat(R, off, b, as_i(a), out);
    }
    if (op == FTJ_OP_MOD && a.type == FTJ_STR)
        return fail(R, off, FT_EUNSUPPORTED, "printf-style string formatting ('...' %% x) is not supported");
    return type_error(R, off, op, a, b);
}

static int contains(struct ftj_render *R, size_t off, struct ftj_val container, struct ftj_val item, bool *out) {
    switch (container.type) {
    case FTJ_STR:
        if (item.type != FTJ_STR)
            return fail(R, off, FT_EINVAL, "'in <string>' requires a string as left operand, not %s",
                        ftj_type_name(item));
        CHARGE(R, container.u.s.n);
        *out = memmem_s(container.u.s, 0, item.u.s) != NULL;
        return 0;
    case FTJ_LIST:
        R->steps += container.u.list->n;
        *out = false;
        for (size_t i = 0; i < container.u.list->n && !*out; i++)
            *out = ftj_equal(container.u.list->v[i], item);
        return 0;
    case FTJ_DICT: *out = ftj_dict_get(container.u.dict, item) != NULL; return 0;
    case FTJ_UNDEF: *out = false; return 0;
    default: return fail(R, off, FT_EINVAL, "argument of type '%s' is not iterable", ftj_type_name(container));
    }
}

static int compare_op(struct ftj_render *R, size_t off, int op, struct ftj_val a, struct ftj_val b, bool *out) {
    if (a.type == FTJ_STR)
        CHARGE(R, a.u.s.n);
    switch (op) {
    case FTJ_OP_EQ: *out = ftj_equal(a, b); return 0;
    case FTJ_OP_NE: *out = !ftj_equal(a, b); return 0;
    case FTJ_OP_IN: return contains(R, off, b, a, out);
    case FTJ_OP_NOTIN: TRY(contains(R, off, b, a, out)); *out = !*out; return 0;
    default: {
        int c;
        if (ftj_compare(a, b, &c)) {
            if (a.type == FTJ_UNDEF || b.type == FTJ_UNDEF)
                return type_error(R, off, op, a, b);
            return fail(R, off, FT_EINVAL, "'%s' not supported between %s and %s", op_name(op), ftj_type_name(a),
                        ftj_type_name(b));
        }
        *out = op == FTJ_OP_LT ? c < 0 : op == FTJ_OP_LE ? c <= 0 : op == FTJ_OP_GT ? c > 0 : c >= 0;
        return 0;
    }
    }
}

/* ------------------------------------------------------------------ tests */

static int run_test(struct ftj_render *R, size_t off, int id, struct ftj_val v, const struct ftj_val *args,
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
    case FTJ_TS_NUMBER: *out = is_number(v); break;
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
        TRY(arg_int(R, off, id == FTJ_TS_EVEN ? "even" : "odd", v, &i));
        *out = (i % 2 == 0) == (id == FTJ_TS_EVEN);
        break;
    }
    case FTJ_TS_DIVISIBLEBY: {
        need_arg = true;
        if (!nargs)
            break;
        int64_t a, b;
        TRY(arg_int(R, off, "divisibleby", v, &a));
        TRY(arg_int(R, off, "divisibleby", arg, &b));
        if (b == 0)
            return fail(R, off, FT_EINVAL, "divisibleby 0");
        *out = b == -1 || a % b == 0;
        break;
    }
    case FTJ_TS_EQ: need_arg = true; *out = ftj_equal(v, arg); break;
    case FTJ_TS_NE: need_arg = true; *out = !ftj_equal(v, arg); break;
    case FTJ_TS_LT: need_arg = true; if (nargs) TRY(compare_op(R, off, FTJ_OP_LT, v, arg, out)); break;
    case FTJ_TS_LE: need_arg = true; if (nargs) TRY(compare_op(R, off, FTJ_OP_LE, v, arg, out)); break;
    case FTJ_TS_GT: need_arg = true; if (nargs) TRY(compare_op(R, off, FTJ_OP_GT, v, arg, out)); break;
    case FTJ_TS_GE: need_arg = true; if (nargs) TRY(compare_op(R, off, FTJ_OP_GE, v, arg, out)); break;
    case FTJ_TS_IN: need_arg = true; if (nargs) TRY(contains(R, off, arg, v, out)); break;
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
    default: return fail(R, off, FT_EUNSUPPORTED, "test not implemented");
    }
    if (need_arg && nargs != 1)
        return fail(R, off, FT_EINVAL, "test takes exactly one argument");
    if (!need_arg && nargs)
        return fail(R, off, FT_EINVAL, "test takes no arguments");
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
        return nomem(R, off);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = FT_MIN(lo + width, n), hi = FT_MIN(lo + 2 * width, n);
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c;
                if (ftj_compare(a[i].key, a[j].key, &c))
                    return fail(R, off, FT_EINVAL, "cannot sort: %s and %s are not comparable",
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
        return get_item(R, off, v, attr, out);
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
            TRY(get_item(R, off, *out, ftj_int(idx), out));
        } else {
            struct ftj_val x = get_attr(*out, part);
            if (x.type == FTJ_UNDEF && out->type != FTJ_UNDEF)
                TRY(get_item(R, off, *out, ftj_strv(part.p, part.n), &x));
            *out = x;
        }
        start = i + 1;
    }
    return 0;
}

/* ------------------------------------------------------------- filters */

static int apply_filter_id(struct ftj_render *R, size_t off, int id, struct ftj_val v, const struct args *a,
                           struct ftj_val *out);

/* select/reject(test, args...) and selectattr/rejectattr(attr, test, args...) */
static int filter_select(struct ftj_render *R, size_t off, struct ftj_val v, const struct args *a, bool by_attr,
                         bool keep_if, struct ftj_val *out) {
    if (a->nkw)
        return fail(R, off, FT_EUNSUPPORTED, "keyword arguments to select/reject filters are not supported");
    struct ftj_list *items;
    TRY(iterate(R, off, ftj_truthy(v) ? v : ftj_undef(), &items)); /* Jinja: `if value:` */
    size_t first = by_attr ? 1 : 0;
    if (by_attr && a->npos < 1)
        return fail(R, off, FT_EINVAL, "selectattr/rejectattr need an attribute name");
    int test = -1;
    if (a->npos > first) {
        struct ftj_str tn;
        TRY(arg_str(R, off, "test name", a->pos[first], &tn));
        test = ftj_test_id(tn.p, tn.n);
        if (test < 0)
            return fail(R, off, FT_EUNSUPPORTED, "test '%.*s' is not supported", (int)FT_MIN(tn.n, 64), tn.p);
    }
    struct ftj_list *res;
    TRY(new_list(R, off, items->n, false, &res));
    res->n = 0;
    for (size_t i = 0; i < items->n; i++) {
        struct ftj_val x = items->v[i];
        if (by_attr)
            TRY(filter_attr(R, off, x, a->pos[0], &x));
        bool ok;
        if (test < 0)
            ok = ftj_truthy(x);
        else
            TRY(run_test(R, off, test, x, a->pos + first + 1, a->npos - first - 1, &ok));
        if (ok == keep_if)
            res->v[res->n++] = items->v[i];
    }
    *out = list_val(res);
    return 0;
}

static int filter_map(struct ftj_render *R, size_t off, struct ftj_val v, const struct args *a, struct ftj_val *out) {
    struct ftj_list *items, *res;
    TRY(iterate(R, off, ftj_truthy(v) ? v : ftj_undef(), &items)); /* Jinja: `if value:` */
    TRY(new_list(R, off, items->n, false, &res));
    struct ftj_val attr, dflt = ftj_undef();
    bool has_default = arg_get(a, 99, "default", &dflt);
    if (a->npos == 0 && arg_get(a, 99, "attribute", &attr)) {
        for (size_t i = 0; i < items->n; i++) {
            TRY(filter_attr(R, off, items->v[i], attr, &res->v[i]));
            if (res->v[i].type == FTJ_UNDEF && has_default)
                res->v[i] = dflt;
        }
    } else {
        if (a->npos == 0)
            return fail(R, off, FT_EINVAL, "map needs a filter name or attribute=");
        struct ftj_str fname;
        TRY(arg_str(R, off, "map", a->pos[0], &fname));
        int fid = ftj_filter_id(fname.p, fname.n);
        if (fid < 0)
            return fail(R, off, FT_EUNSUPPORTED, "filter '%.*s' is not supported", (int)FT_MIN(fname.n, 64), fname.p);
        struct args rest = {a->pos + 1, a->npos - 1, a->kwx, a->kwv, a->nkw};
        for (size_t i = 0; i < items->n; i++)
            TRY(apply_filter_id(R, off, fid, items->v[i], &rest, &res->v[i]));
    }
    *out = list_val(res);
    return 0;
}

static int filter_indent(struct ftj_render *R, size_t off, struct ftj_str s, const struct args *a,
                         struct ftj_val *out) {
    static const char *const names[] = {"width", "first", "blank", NULL};
    TRY(arg_check(R, off, "indent", a, names));
    struct ftj_val w = ftj_int(4), first = ftj_bool(false), blank = ftj_bool(false);
    arg_get(a, 0, "width", &w);
    arg_get(a, 1, "first", &first);
    arg_get(a, 2, "blank", &blank);
    struct ftj_str ind;
    char *spaces = NULL;
    if (w.type == FTJ_STR) {
        ind = w.u.s;
    } else {
        int64_t n;
        TRY(arg_int(R, off, "indent width", w, &n));
        if (n < 0)
            n = 0;
        if ((uint64_t)n > R->lim.max_output)
            return chk(R, off, FT_ERANGE, "indent");
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
        rc = buf_to_val(R, off, &b, out);
    else
        rc = chk(R, off, rc, "indent");
    ftj_buf_free(&b);
    return rc;
}

static int filter_tojson(struct ftj_render *R, size_t off, struct ftj_val v, const struct args *a, struct ftj_val *out) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    TRY(arg_check(R, off, "tojson", a, names));
    struct ftj_json_opts o = {.indent = -1};
    struct ftj_val x;
    if (arg_get(a, 0, "ensure_ascii", &x))
        o.ensure_ascii = ftj_truthy(x);
    if (arg_get(a, 1, "indent", &x) && x.type != FTJ_NONE) {
        int64_t n;
        TRY(arg_int(R, off, "tojson indent", x, &n));
        o.indent = (int)FT_MAX(0, FT_MIN(n, 64));
    }
    if (arg_get(a, 2, "separators", &x) && x.type != FTJ_NONE) {
        if (x.type != FTJ_LIST || x.u.list->n != 2 || x.u.list->v[0].type != FTJ_STR || x.u.list->v[1].type != FTJ_STR)
            return fail(R, off, FT_EINVAL, "tojson separators must be a pair of strings");
        o.item_sep = x.u.list->v[0].u.s;
        o.key_sep = x.u.list->v[1].u.s;
    }
    if (arg_get(a, 3, "sort_keys", &x))
        o.sort_keys = ftj_truthy(x);
    struct ftj_buf b = {.limit = R->lim.max_output};
    int rc = ftj_write_json(&b, v, &o, 0);
    if (rc == FT_EINVAL)
        rc = fail(R, off, FT_EINVAL, "tojson: a %s value is not JSON serializable", ftj_type_name(v));
    else if (rc)
        rc = chk(R, off, rc, "tojson");
    else
        rc = buf_to_val(R, off, &b, out);
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
    default: return fail(R, off, FT_EINVAL, "object of type '%s' has no len()", ftj_type_name(v));
    }
}

static int items_of(struct ftj_render *R, size_t off, struct ftj_val v, struct ftj_val *out) {
    if (v.type == FTJ_UNDEF) {
        struct ftj_list *l;
        TRY(new_list(R, off, 0, false, &l));
        *out = list_val(l);
        return 0;
    }
    if (v.type != FTJ_DICT && v.type != FTJ_NS)
        return fail(R, off, FT_EINVAL, "items: expected a mapping, got %s", ftj_type_name(v));
    struct ftj_list *l;
    TRY(new_list(R, off, v.u.dict->n, false, &l));
    for (size_t i = 0; i < v.u.dict->n; i++) {
        struct ftj_list *pair;
        TRY(new_list(R, off, 2, true, &pair));
        pair->v[0] = v.u.dict->k[i];
        pair->v[1] = v.u.dict->v[i];
        l->v[i] = list_val(pair);
    }
    *out = list_val(l);
    return 0;
}

static int apply_filter_id(struct ftj_render *R, size_t off, int id, struct ftj_val v, const struct args *a,
                           struct ftj_val *out) {
    struct ftj_val x;
    struct ftj_str s;
    switch (id) {
    case FTJ_FL_SAFE: *out = v; return 0;
    case FTJ_FL_DEFAULT: {
        struct ftj_val d = ftj_strv("", 0), boolean = ftj_bool(false);
        arg_get(a, 0, "default_value", &d);
        arg_get(a, 1, "boolean", &boolean);
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
        TRY(to_str(R, off, v, &s));
        *out = ftj_strv(s.p, s.n);
        return 0;
    case FTJ_FL_TRIM: {
        TRY(to_str(R, off, v, &s));
        struct ftj_str chars;
        struct cpset set = {NULL};
        if (arg_get(a, 0, "chars", &x) && x.type != FTJ_NONE) {
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
        TRY(to_str(R, off, v, &s));
        return str_map(R, off, s, id == FTJ_FL_UPPER ? 0 : id == FTJ_FL_LOWER ? 1 : id == FTJ_FL_CAPITALIZE ? 2 : 4,
                       out);
    case FTJ_FL_ESCAPE: {
        TRY(to_str(R, off, v, &s));
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
        rc = rc ? chk(R, off, rc, "escape") : buf_to_val(R, off, &b, out);
        ftj_buf_free(&b);
        return rc;
    }
    case FTJ_FL_REPLACE: {
        struct ftj_val o, n, c = ftj_int(-1);
        if (!arg_get(a, 0, "old", &o) || !arg_get(a, 1, "new", &n))
            return fail(R, off, FT_EINVAL, "replace needs two arguments");
        arg_get(a, 2, "count", &c);
        struct ftj_str os, ns;
        int64_t cnt = -1;
        TRY(to_str(R, off, v, &s));
        TRY(to_str(R, off, o, &os));
        TRY(to_str(R, off, n, &ns));
        if (c.type != FTJ_NONE)
            TRY(arg_int(R, off, "replace count", c, &cnt));
        return str_replace(R, off, s, os, ns, cnt, out);
    }
    case FTJ_FL_FIRST:
    case FTJ_FL_LAST: {
        struct ftj_list *l;
        TRY(iterate(R, off, v, &l));
        *out = l->n ? l->v[id == FTJ_FL_FIRST ? 0 : l->n - 1] : ftj_undef();
        return 0;
    }
    case FTJ_FL_LIST: {
        struct ftj_list *l, *r;
        TRY(iterate(R, off, v, &l));
        TRY(new_list(R, off, l->n, false, &r));
        for (size_t i = 0; i < l->n; i++)
            r->v[i] = l->v[i];
        *out = list_val(r);
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
        TRY(iterate(R, off, v, &l));
        TRY(new_list(R, off, l->n, false, &r));
        for (size_t i = 0; i < l->n; i++)
            r->v[i] = l->v[l->n - 1 - i];
        *out = list_val(r);
        return 0;
    }
    case FTJ_FL_JOIN: {
        struct ftj_val sep = ftj_strv("", 0), attr;
        arg_get(a, 0, "d", &sep);
        bool by_attr = arg_get(a, 1, "attribute", &attr);
        struct ftj_str ss;
        TRY(to_str(R, off, sep, &ss));
        struct ftj_list *l;
        TRY(iterate(R, off, v, &l));
        struct ftj_buf b = {.limit = R->lim.max_output};
        int rc = 0;
        for (size_t i = 0; i < l->n && !rc; i++) {
            struct ftj_val it = l->v[i];
            if (by_attr)
                rc = filter_attr(R, off, it, attr, &it);
            if (!rc && i)
                rc = chk(R, off, ftj_buf_put(&b, ss.p, ss.n), "join");
            if (!rc)
                rc = chk(R, off, ftj_write_str(&b, it), "join");
        }
        if (!rc)
            rc = buf_to_val(R, off, &b, out);
        ftj_buf_free(&b);
        return rc;
    }
    case FTJ_FL_ITEMS: return items_of(R, off, v, out);
    case FTJ_FL_TOJSON: return filter_tojson(R, off, v, a, out);
    case FTJ_FL_INDENT:
        TRY(to_str(R, off, v, &s));
        return filter_indent(R, off, s, a, out);
    case FTJ_FL_MAP: return filter_map(R, off, v, a, out);
    case FTJ_FL_SELECT: return filter_select(R, off, v, a, false, true, out);
    case FTJ_FL_REJECT: return filter_select(R, off, v, a, false, false, out);
    case FTJ_FL_SELECTATTR: return filter_select(R, off, v, a, true, true, out);
    case FTJ_FL_REJECTATTR: return filter_select(R, off, v, a, true, false, out);
    case FTJ_FL_ABS:
        if (v.type == FTJ_INT || v.type == FTJ_BOOL) {
            int64_t i = as_i(v);
            if (i == INT64_MIN)
                return fail(R, off, FT_ERANGE, "integer overflow in abs");
            *out = ftj_int(i < 0 ? -i : i);
        } else if (v.type == FTJ_FLOAT) {
            *out = ftj_float(fabs(v.u.f));
        } else {
            return fail(R, off, FT_EINVAL, "bad operand type for abs(): %s", ftj_type_name(v));
        }
        return 0;
    case FTJ_FL_INT: {
        struct ftj_val d = ftj_int(0), b = ftj_int(10);
        arg_get(a, 0, "default", &d);
        arg_get(a, 1, "base", &b);
        int64_t base, i;
        double f;
        TRY(arg_int(R, off, "int base", b, &base));
        if (v.type == FTJ_INT || v.type == FTJ_BOOL) {
            *out = ftj_int(as_i(v));
        } else if (v.type == FTJ_FLOAT) {
            if (!(v.u.f > -9.2e18 && v.u.f < 9.2e18))
                return fail(R, off, FT_ERANGE, "float too large for int");
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
        arg_get(a, 0, "default", &d);
        double f;
        if (is_number(v))
            *out = ftj_float(as_f(v));
        else if (v.type == FTJ_STR && parse_py_float(v.u.s, &f) == 0)
            *out = ftj_float(f);
        else
            *out = d;
        return 0;
    }
    case FTJ_FL_ROUND: {
        struct ftj_val p = ftj_int(0), m = ftj_strv("common", 6);
        arg_get(a, 0, "precision", &p);
        arg_get(a, 1, "method", &m);
        int64_t prec;
        struct ftj_str ms;
        TRY(arg_int(R, off, "round precision", p, &prec));
        TRY(arg_str(R, off, "round method", m, &ms));
        if (!is_number(v))
            return fail(R, off, FT_EINVAL, "round: expected a number, got %s", ftj_type_name(v));
        bool common = ms.n == 6 && memcmp(ms.p, "common", 6) == 0;
        bool ceil_m = ms.n == 4 && memcmp(ms.p, "ceil", 4) == 0;
        bool floor_m = ms.n == 5 && memcmp(ms.p, "floor", 5) == 0;
        if (!common && !ceil_m && !floor_m)
            return fail(R, off, FT_EINVAL, "round method must be common, ceil or floor");
        if (common && v.type != FTJ_FLOAT && prec >= 0) {
            *out = ftj_int(as_i(v)); /* Python round(int, n) keeps the int */
            return 0;
        }
        double f = as_f(v), scale = pow(10.0, (double)FT_MAX(-300, FT_MIN(prec, 300))), r;
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
        TRY(to_str(R, off, v, &s));
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
    default: return fail(R, off, FT_EUNSUPPORTED, "filter not implemented");
    }

    /* filters over a sequence with keys: sort, unique, min, max, dictsort, sum */
    struct ftj_val cs = ftj_bool(false), rev = ftj_bool(false), attr = ftj_undef();
    bool has_attr;
    struct ftj_list *l;
    if (id == FTJ_FL_SUM) {
        struct ftj_val start = ftj_int(0);
        has_attr = arg_get(a, 0, "attribute", &attr);
        arg_get(a, 1, "start", &start);
        TRY(iterate(R, off, v, &l));
        struct ftj_val acc = start;
        for (size_t i = 0; i < l->n; i++) {
            struct ftj_val it = l->v[i];
            if (has_attr)
                TRY(filter_attr(R, off, it, attr, &it));
            TRY(binop(R, off, FTJ_OP_ADD, acc, it, &acc));
        }
        *out = acc;
        return 0;
    }
    if (id == FTJ_FL_DICTSORT) {
        struct ftj_val by = ftj_strv("key", 3);
        arg_get(a, 0, "case_sensitive", &cs);
        arg_get(a, 1, "by", &by);
        arg_get(a, 2, "reverse", &rev);
        struct ftj_str bys;
        TRY(arg_str(R, off, "dictsort by", by, &bys));
        bool by_value = bys.n == 5 && memcmp(bys.p, "value", 5) == 0;
        TRY(items_of(R, off, v, &x));
        l = x.u.list;
        struct sort_item *si = ftj_alloc_array(&R->arena, l->n ? l->n : 1, sizeof(*si));
        if (!si)
            return nomem(R, off);
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
        arg_get(a, 0, "reverse", &rev);
        arg_get(a, 1, "case_sensitive", &cs);
        has_attr = arg_get(a, 2, "attribute", &attr);
    } else if (id == FTJ_FL_UNIQUE) {
        arg_get(a, 0, "case_sensitive", &cs);
        has_attr = arg_get(a, 1, "attribute", &attr);
    } else {
        arg_get(a, 0, "case_sensitive", &cs);
        has_attr = arg_get(a, 1, "attribute", &attr);
    }
    TRY(iterate(R, off, v, &l));
    struct sort_item *si = ftj_alloc_array(&R->arena, l->n ? l->n : 1, sizeof(*si));
    if (!si)
        return nomem(R, off);
    for (size_t i = 0; i < l->n; i++) {
        struct ftj_val k = l->v[i];
        if (has_attr)
            TRY(filter_attr(R, off, k, attr, &k));
        si[i].val = l->v[i];
        TRY(fold_case(R, off, k, ftj_truthy(cs), &si[i].key));
    }
    if (id == FTJ_FL_UNIQUE) {
        struct ftj_list *r;
        TRY(new_list(R, off, l->n, false, &r));
        r->n = 0;
        for (size_t i = 0; i < l->n; i++) {
            bool seen = false;
            for (size_t j = 0; j < i && !seen; j++)
                seen = ftj_equal(si[j].key, si[i].key);
            if (!seen)
                r->v[r->n++] = si[i].val;
            if ((i & 1023) == 0 && ++R->steps > R->lim.max_steps)
                return fail(R, off, FT_ERANGE, "evaluation step limit reached");
        }
        *out = list_val(r);
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
                return fail(R, off, FT_EINVAL, "min/max: values are not comparable");
            if ((id == FTJ_FL_MIN && c < 0) || (id == FTJ_FL_MAX && c > 0))
                best = i;
        }
        *out = si[best].val;
        return 0;
    }
    TRY(sort_items(R, off, si, l->n, ftj_truthy(rev)));
    struct ftj_list *r;
    TRY(new_list(R, off, l->n, false, &r));
    for (size_t i = 0; i < l->n; i++)
        r->v[i] = si[i].val;
    *out = list_val(r);
    return 0;
}

/* ------------------------------------------------------------- methods */

static int str_split(struct ftj_render *R, size_t off, struct ftj_str s, const struct args *a, bool from_right,
                     struct ftj_val *out) {
    static const char *const names[] = {"sep", "maxsplit", NULL};
    TRY(arg_check(R, off, from_right ? "rsplit" : "split", a, names));
    struct ftj_val sepv = ftj_none(), maxv = ftj_int(-1);
    arg_get(a, 0, "sep", &sepv);
    arg_get(a, 1, "maxsplit", &maxv);
    int64_t maxsplit;
    TRY(arg_int(R, off, "maxsplit", maxv, &maxsplit));
    /* Collect [start, end) pieces, then build the list in order. */
    size_t cap = 16, n = 0;
    size_t *pieces = ftj_alloc_array(&R->arena, cap * 2, sizeof(size_t));
    if (!pieces)
        return nomem(R, off);
#define PUSH_PIECE(b_, e_)                                                                         \
    do {                                                                                           \
        if (n == cap) {                                                                            \
            if (cap * 2 > R->lim.max_list)                                                         \
                return fail(R, off, FT_ERANGE, "split: more than %zu pieces", R->lim.max_list);    \
            size_t *np_ = ftj_alloc_array(&R->arena, cap * 4, sizeof(size_t));                     \
            if (!np_)                                                                              \
                return nomem(R, off);                                                              \
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
            return fail(R, off, FT_EINVAL, "split: empty separator");
        if (!from_right) {
            size_t i = 0;
            int64_t splits = 0;
            for (;;) {
                const char *hit = (maxsplit < 0 || splits < maxsplit) ? memmem_s(s, i, sep) : NULL;
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
    TRY(new_list(R, off, n, false, &l));
    for (size_t i = 0; i < n; i++) {
        size_t k = from_right ? n - 1 - i : i;
        l->v[i] = ftj_strv(s.p + pieces[2 * k], pieces[2 * k + 1] - pieces[2 * k]);
    }
    *out = list_val(l);
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
            rc = chk(R, off, ftj_buf_putc(&b, c), "format");
            i++;
            continue;
        }
        if (c == '}') {
            rc = fail(R, off, FT_EINVAL, "format: single '}' encountered in format string");
            break;
        }
        if (c != '{') {
            rc = chk(R, off, ftj_buf_putc(&b, c), "format");
            continue;
        }
        size_t j = i + 1;
        while (j < s.n && s.p[j] != '}' && s.p[j] != '{' && s.p[j] != ':' && s.p[j] != '!' && s.p[j] != '.' &&
               s.p[j] != '[')
            j++;
        if (j >= s.n || s.p[j] != '}') {
            rc = fail(R, off, FT_EUNSUPPORTED, "format: only plain {}, {N} and {name} fields are supported");
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
            rc = fail(R, off, FT_EINVAL, "format: no argument for field {%.*s}", (int)FT_MIN(field.n, 64), field.p);
            break;
        }
        rc = chk(R, off, ftj_write_str(&b, v), "format");
        i = j;
    }
    if (!rc)
        rc = buf_to_val(R, off, &b, out);
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
        return fail(R, off, FT_EINVAL, "append() takes exactly one argument");
    if (l->tuple)
        return fail(R, off, FT_EINVAL, "'tuple' object has no attribute 'append'");
    if (l->n >= R->lim.max_list)
        return fail(R, off, FT_ERANGE, "a list of %zu items exceeds the limit of %zu", l->n + 1, R->lim.max_list);
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
        return fail(R, off, FT_EINVAL, "pop() takes at most one argument");
    if (l->tuple)
        return fail(R, off, FT_EINVAL, "'tuple' object has no attribute 'pop'");
    int64_t i = -1;
    if (a->npos) {
        if (a->pos[0].type != FTJ_INT)
            return fail(R, off, FT_EINVAL, "pop() index must be an integer, not %s", ftj_type_name(a->pos[0]));
        i = a->pos[0].u.i;
    }
    if (l->n == 0)
        return fail(R, off, FT_EINVAL, "pop from empty list");
    if (i < 0)
        i += (int64_t)l->n;
    if (i < 0 || (uint64_t)i >= l->n)
        return fail(R, off, FT_EINVAL, "pop index out of range");
    *out = l->v[i];
    memmove(&l->v[i], &l->v[i + 1], (l->n - (size_t)i - 1) * sizeof(l->v[0]));
    l->n--;
    R->ns_writes++;
    return 0;
}

static int call_method(struct ftj_render *R, const struct ftj_expr *e, struct ftj_val obj, const struct args *a,
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
                return fail(R, off, FT_EUNSUPPORTED, "%.*s() takes exactly one positional argument here",
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
            if (arg_get(a, 0, "chars", &x) && x.type != FTJ_NONE) {
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
            if (!arg_get(a, 0, "old", &o) || !arg_get(a, 1, "new", &n))
                return fail(R, off, FT_EINVAL, "replace() needs two arguments");
            arg_get(a, 2, "count", &c);
            struct ftj_str os, ns;
            int64_t cnt;
            TRY(arg_str(R, off, "replace", o, &os));
            TRY(arg_str(R, off, "replace", n, &ns));
            TRY(arg_int(R, off, "replace count", c, &cnt));
            return str_replace(R, off, s, os, ns, cnt, out);
        }
        case FTJ_M_FIND:
        case FTJ_M_RFIND:
        case FTJ_M_COUNT: {
            if (a->npos != 1 || a->nkw)
                return fail(R, off, FT_EUNSUPPORTED, "%.*s() takes exactly one argument here", (int)name.n, name.p);
            TRY(arg_str(R, off, "find/count", a->pos[0], &arg));
            if (id == FTJ_M_COUNT) {
                int64_t k = 0;
                if (arg.n == 0) {
                    k = (int64_t)ftj_utf8_count(s.p, s.n) + 1;
                } else {
                    for (size_t i = 0; memmem_s(s, i, arg); k++)
                        i = (size_t)(memmem_s(s, i, arg) - s.p) + arg.n;
                }
                *out = ftj_int(k);
                return 0;
            }
            size_t at = SIZE_MAX;
            if (id == FTJ_M_FIND) {
                const char *h = memmem_s(s, 0, arg);
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
                return fail(R, off, FT_EINVAL, "join() takes exactly one argument");
            struct ftj_list *l;
            TRY(iterate(R, off, a->pos[0], &l));
            struct ftj_buf b = {.limit = R->lim.max_output};
            int rc = 0;
            for (size_t i = 0; i < l->n && !rc; i++) {
                if (l->v[i].type != FTJ_STR) {
                    rc = fail(R, off, FT_EINVAL, "join: sequence item %zu: expected str, got %s", i,
                              ftj_type_name(l->v[i]));
                    break;
                }
                if (i)
                    rc = chk(R, off, ftj_buf_put(&b, s.p, s.n), "join");
                if (!rc)
                    rc = chk(R, off, ftj_buf_put(&b, l->v[i].u.s.p, l->v[i].u.s.n), "join");
            }
            if (!rc)
                rc = buf_to_val(R, off, &b, out);
            ftj_buf_free(&b);
            return rc;
        }
        case FTJ_M_REMOVEPREFIX:
        case FTJ_M_REMOVESUFFIX: {
            if (a->npos != 1 || a->nkw)
                return fail(R, off, FT_EINVAL, "%.*s() takes exactly one argument", (int)name.n, name.p);
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
                return fail(R, off, FT_EINVAL, "%.*s() takes no arguments", (int)name.n, name.p);
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
            TRY(run_test(R, off, id == FTJ_M_ISLOWER ? FTJ_TS_LOWER : FTJ_TS_UPPER, obj, NULL, 0, &b));
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
                return fail(R, off, FT_EINVAL, "%.*s() takes no arguments", (int)name.n, name.p);
            if (obj.type == FTJ_NS)
                break;
            if (id == FTJ_M_ITEMS)
                return items_of(R, off, obj, out);
            struct ftj_list *l;
            TRY(new_list(R, off, obj.u.dict->n, false, &l));
            for (size_t i = 0; i < obj.u.dict->n; i++)
                l->v[i] = id == FTJ_M_KEYS ? obj.u.dict->k[i] : obj.u.dict->v[i];
            *out = list_val(l);
            return 0;
        }
        case FTJ_M_GET: {
            if (obj.type == FTJ_NS)
                break;
            if (a->npos < 1 || a->npos > 2 || a->nkw)
                return fail(R, off, FT_EINVAL, "get() takes one or two arguments");
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
            return fail(R, off, FT_EINVAL, "loop.cycle() needs at least one argument");
        *out = a->pos[obj.u.loop->index0 % (int64_t)a->npos];
        return 0;
    }
    if (obj.type == FTJ_UNDEF)
        return fail(R, off, FT_EINVAL, "cannot call '%.*s()' on an undefined value", (int)FT_MIN(name.n, 64), name.p);
    if (obj.type == FTJ_STR || obj.type == FTJ_LIST || obj.type == FTJ_DICT)
        return fail(R, off, FT_EUNSUPPORTED, "method '%.*s()' of %s is not supported", (int)FT_MIN(name.n, 64), name.p,
                    ftj_type_name(obj));
    return fail(R, off, FT_EINVAL, "%s has no method '%.*s()'", ftj_type_name(obj), (int)FT_MIN(name.n, 64), name.p);
}

/* ---------------------------------------------------------- evaluation */

static int eval(struct ftj_render *R, const struct ftj_expr *e, struct ftj_val *out);
static int exec_body(struct ftj_render *R, const struct ftj_stmt *s);

static int enter(struct ftj_render *R, size_t off) {
    if (++R->depth > R->lim.max_depth)
        return fail(R, off, FT_ERANGE, "nested deeper than %d levels", R->lim.max_depth);
    if (++R->steps > R->lim.max_steps)
        return fail(R, off, FT_ERANGE, "more than %llu evaluation steps", (unsigned long long)R->lim.max_steps);
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
        rc = buf_to_val(R, off, &b, out);
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
        return fail(R, off, FT_EINVAL, "macro '%.*s' takes at most %zu argument(s), %zu given", (int)m->name.n,
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
            return fail(R, off, FT_EINVAL, "macro '%.*s' has no argument '%.*s'", (int)m->name.n, m->name.p,
                        (int)FT_MIN(a->kwx[k].name.n, 64), a->kwx[k].name.p);
    }
    for (size_t j = 0; j < m->nparams; j++) {
        struct ftj_val v;
        if (!arg_get(a, j, NULL, &v)) {
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
                    v = undef_named(m->params[j].name);
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
        rc = buf_to_val(R, off, &b, out);
    ftj_buf_free(&b);
    return rc;
}

static int call_func(struct ftj_render *R, size_t off, int fn, const struct args *a, struct ftj_val *out) {
    switch (fn) {
    case FTJ_F_RANGE: {
        if (a->nkw || a->npos < 1 || a->npos > 3)
            return fail(R, off, FT_EINVAL, "range() takes 1 to 3 positional arguments");
        int64_t v[3] = {0, 0, 0}, start = 0, stop, step = 1;
        for (size_t i = 0; i < a->npos; i++)
            TRY(arg_int(R, off, "range", a->pos[i], &v[i]));
        if (a->npos == 1) {
            stop = v[0];
        } else {
            start = v[0];
            stop = v[1];
            if (a->npos == 3)
                step = v[2];
        }
        if (step == 0)
            return fail(R, off, FT_EINVAL, "range() step must not be zero");
        uint64_t n = 0;
        if (step > 0 && start < stop)
            n = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
        else if (step < 0 && start > stop)
            n = ((uint64_t)start - (uint64_t)stop - 1) / (0 - (uint64_t)step) + 1;
        if (n > R->lim.max_list)
            return fail(R, off, FT_ERANGE, "range() of %llu items exceeds the limit of %zu", (unsigned long long)n,
                        R->lim.max_list);
        struct ftj_list *l;
        TRY(new_list(R, off, (size_t)n, false, &l));
        for (uint64_t i = 0; i < n; i++)
            l->v[i] = ftj_int((int64_t)((uint64_t)start + i * (uint64_t)step));
        *out = list_val(l);
        return 0;
    }
    case FTJ_F_NAMESPACE:
    case FTJ_F_DICT: {
        struct ftj_dict *d = ftj_dict_new(&R->arena, a->nkw);
        if (!d)
            return nomem(R, off);
        for (size_t i = 0; i < a->npos; i++) {
            struct ftj_val p = a->pos[i];
            if (p.type != FTJ_DICT && p.type != FTJ_NS)
                return fail(R, off, FT_EINVAL, "%s() positional arguments must be mappings",
                            fn == FTJ_F_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < p.u.dict->n; k++)
                if (ftj_dict_set(&R->arena, d, p.u.dict->k[k], p.u.dict->v[k]))
                    return nomem(R, off);
        }
        for (size_t i = 0; i < a->nkw; i++)
            if (ftj_dict_set(&R->arena, d, ftj_strv(a->kwx[i].name.p, a->kwx[i].name.n), a->kwv[i]))
                return nomem(R, off);
        *out = dict_val(d, fn == FTJ_F_NAMESPACE);
        return 0;
    }
    case FTJ_F_RAISE: {
        struct ftj_str msg = {"", 0};
        if (a->npos)
            TRY(to_str(R, off, a->pos[0], &msg));
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
            return fail(R, off, FT_EINVAL, "strftime_now() takes one argument");
        TRY(arg_str(R, off, "strftime_now", a->pos[0], &fmt));
        if (fmt.n > 256)
            return fail(R, off, FT_EINVAL, "strftime_now() format too long");
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
    default: return fail(R, off, FT_EUNSUPPORTED, "function not implemented");
    }
}

static int eval_call(struct ftj_render *R, const struct ftj_expr *e, struct ftj_val *out) {
    struct args a;
    if (e->a->kind == FTJ_E_ATTR) {
        struct ftj_val obj;
        TRY(eval(R, e->a->a, &obj));
        TRY(eval_args(R, e, &a));
        /* a macro stored in a namespace/dict is called like a method */
        struct ftj_val attr = get_attr(obj, e->a->name);
        if (e->id < 0 || attr.type == FTJ_MACRO) {
            if (attr.type == FTJ_MACRO)
                return call_macro(R, e->off, attr.u.macro, &a, out);
            if (attr.type == FTJ_FUNC)
                return call_func(R, e->off, attr.u.func, &a, out);
        }
        return call_method(R, e, obj, &a, out);
    }
    struct ftj_val callee;
    TRY(eval(R, e->a, &callee));
    if (callee.type == FTJ_UNDEF) {
        if (callee.u.s.n)
            return fail(R, e->off, FT_EUNSUPPORTED, "function '%.*s' is not defined", (int)FT_MIN(callee.u.s.n, 64),
                        callee.u.s.p);
        return fail(R, e->off, FT_EINVAL, "cannot call an undefined value");
    }
    if (callee.type != FTJ_MACRO && callee.type != FTJ_FUNC)
        return fail(R, e->off, FT_EINVAL, "'%s' object is not callable", ftj_type_name(callee));
    TRY(eval_args(R, e, &a));
    if (callee.type == FTJ_MACRO)
        return call_macro(R, e->off, callee.u.macro, &a, out);
    return call_func(R, e->off, callee.u.func, &a, out);
}

static int eval_inner(struct ftj_render *R, const struct ftj_expr *e, struct ftj_val *out) {
    struct ftj_val a, b;
    switch (e->kind) {
    case FTJ_E_LIT: *out = e->lit; return 0;
    case FTJ_E_NAME: *out = lookup(R, e->name); return 0;
    case FTJ_E_LIST:
    case FTJ_E_TUPLE: {
        struct ftj_list *l;
        TRY(new_list(R, e->off, e->nargs, e->kind == FTJ_E_TUPLE, &l));
        for (size_t i = 0; i < e->nargs; i++)
            TRY(eval(R, e->args[i], &l->v[i]));
        *out = list_val(l);
        return 0;
    }
    case FTJ_E_DICT: {
        struct ftj_dict *d = ftj_dict_new(&R->arena, e->nargs);
        if (!d)
            return nomem(R, e->off);
        for (size_t i = 0; i < e->nargs; i++) {
            TRY(eval(R, e->args[i], &a));
            TRY(eval(R, e->kw[i].val, &b));
            if (a.type != FTJ_STR && a.type != FTJ_INT && a.type != FTJ_BOOL && a.type != FTJ_NONE &&
                a.type != FTJ_FLOAT && !(a.type == FTJ_LIST && a.u.list->tuple))
                return fail(R, e->off, FT_EINVAL, "unhashable dict key of type %s", ftj_type_name(a));
            if (ftj_dict_set(&R->arena, d, a, b))
                return nomem(R, e->off);
        }
        *out = dict_val(d, false);
        return 0;
    }
    case FTJ_E_ATTR:
        TRY(eval(R, e->a, &a));
        *out = get_attr(a, e->name);
        return 0;
    case FTJ_E_INDEX:
        TRY(eval(R, e->a, &a));
        TRY(eval(R, e->b, &b));
        return get_item(R, e->off, a, b, out);
    case FTJ_E_SLICE: {
        struct ftj_val s = ftj_none(), t = ftj_none(), st = ftj_none();
        TRY(eval(R, e->a, &a));
        if (e->b)
            TRY(eval(R, e->b, &s));
        if (e->c)
            TRY(eval(R, e->c, &t));
        if (e->d)
            TRY(eval(R, e->d, &st));
        return do_slice(R, e->off, a, s, t, st, out);
    }
    case FTJ_E_CALL: return eval_call(R, e, out);
    case FTJ_E_FILTER: {
        struct args args;
        if (e->id < 0)
            return fail(R, e->off, FT_EUNSUPPORTED, "filter '%.*s' is not supported", (int)FT_MIN(e->name.n, 64),
                        e->name.p);
        if (e->a)
            TRY(eval(R, e->a, &a));
        else
            a = R->block_input;
        TRY(eval_args(R, e, &args));
        return apply_filter_id(R, e->off, e->id, a, &args, out);
    }
    case FTJ_E_TEST: {
        struct args args;
        bool r;
        if (e->id < 0)
            return fail(R, e->off, FT_EUNSUPPORTED, "test '%.*s' is not supported", (int)FT_MIN(e->name.n, 64),
                        e->name.p);
        TRY(eval(R, e->a, &a));
        TRY(eval_args(R, e, &args));
        TRY(run_test(R, e->off, e->id, a, args.pos, args.npos, &r));
        *out = ftj_bool(r != e->negate);
        return 0;
    }
    case FTJ_E_NEG:
    case FTJ_E_POS:
        TRY(eval(R, e->a, &a));
        if (!is_number(a))
            return fail(R, e->off, FT_EINVAL, "bad operand type for unary %c: %s", e->kind == FTJ_E_NEG ? '-' : '+',
                        ftj_type_name(a));
        if (e->kind == FTJ_E_POS) {
            *out = a.type == FTJ_BOOL ? ftj_int(a.u.b) : a;
        } else if (a.type == FTJ_FLOAT) {
            *out = ftj_float(-a.u.f);
        } else {
            if (as_i(a) == INT64_MIN)
                return fail(R, e->off, FT_ERANGE, "integer overflow in unary -");
            *out = ftj_int(-as_i(a));
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
        return binop(R, e->off, e->op, a, b, out);
    case FTJ_E_CMP: {
        TRY(eval(R, e->a, &a));
        for (size_t i = 0; i < e->nargs; i++) {
            bool r;
            TRY(eval(R, e->args[i], &b));
            TRY(compare_op(R, e->args[i]->off, e->ops[i], a, b, &r));
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
    default: return fail(R, e->off, FT_EUNSUPPORTED, "expression not implemented");
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
            TRY(iterate(R, target->off, v, &l));
            v = list_val(l);
        }
        if (v.u.list->n != target->nargs)
            return fail(R, target->off, FT_EINVAL, "cannot unpack %zu values into %zu names", v.u.list->n,
                        target->nargs);
        for (size_t i = 0; i < target->nargs; i++)
            TRY(frame_set(R, R->frame, target->args[i]->name, v.u.list->v[i], target->off));
        return 0;
    }
    case FTJ_E_ATTR: {
        struct ftj_val obj = lookup(R, target->a->name);
        if (obj.type != FTJ_NS)
            return fail(R, target->off, FT_EINVAL, "cannot assign attribute on a %s (only on namespace())",
                        ftj_type_name(obj));
        R->ns_writes++;
        if (ftj_dict_set(&R->arena, obj.u.dict, ftj_strv(target->name.p, target->name.n), v))
            return nomem(R, target->off);
        return 0;
    }
    default: return fail(R, target->off, FT_EINVAL, "cannot assign to this expression");
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
    TRY(iterate(R, s->off, it, &items));
    /* Copy: a loop must not see a namespace it iterates change under it. */
    struct frame f = {.parent = R->frame};
    struct frame *saved = R->frame;
    int rc = 0;
    if (s->cond) {
        struct ftj_list *kept;
        TRY(new_list(R, s->off, items->n, false, &kept));
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
    default: return fail(R, s->off, FT_EUNSUPPORTED, "statement not implemented");
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
    r->failed = true; /* frame_set logs through fail() only on OOM; keep set-up quiet */
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
