/* Values of the Jinja-subset interpreter: the arena they live in, the bounded
 * output buffer, containers, and the Python semantics that templates observe
 * through them — truthiness, ==, ordering, str(), repr() and HF's tojson.
 * See engine/text/jinja.h for the memory model. */
#include "jinja.h"

#include "ft/common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- arena */

struct ftj_chunk {
    struct ftj_chunk *prev;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

#define FTJ_CHUNK_MIN (32u * 1024u)

void ftj_arena_init(struct ftj_arena *a, size_t limit) {
    a->cur = NULL;
    a->total = 0;
    a->limit = limit;
    a->over_limit = false;
}

void ftj_arena_free(struct ftj_arena *a) {
    if (!a)
        return;
    struct ftj_chunk *c = a->cur;
    while (c) {
        struct ftj_chunk *p = c->prev;
        free(c);
        c = p;
    }
    a->cur = NULL;
    a->total = 0;
}

void *ftj_alloc(struct ftj_arena *a, size_t n) {
    if (n == 0)
        n = 1;
    if (n > SIZE_MAX / 2)
        return NULL;
    n = (n + 15) & ~(size_t)15;
    struct ftj_chunk *c = a->cur;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > FTJ_CHUNK_MIN ? n : FTJ_CHUNK_MIN;
        size_t bytes = sizeof(struct ftj_chunk) + cap;
        if (a->limit && (a->total > a->limit || bytes > a->limit - a->total)) {
            a->over_limit = true;
            return NULL;
        }
        c = malloc(bytes);
        if (!c) {
            a->over_limit = false;
            return NULL;
        }
        c->prev = a->cur;
        c->cap = cap;
        c->used = 0;
        a->cur = c;
        a->total += bytes;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

void *ftj_alloc_array(struct ftj_arena *a, size_t n, size_t size) {
    size_t bytes;
    if (ft_mul_overflow(n, size, &bytes))
        return NULL;
    return ftj_alloc(a, bytes);
}

struct ftj_mark ftj_arena_mark(const struct ftj_arena *a) {
    struct ftj_mark m = {a->cur, a->cur ? a->cur->used : 0, a->total};
    return m;
}

void ftj_arena_release(struct ftj_arena *a, struct ftj_mark m) {
    while (a->cur && a->cur != m.cur) {
        struct ftj_chunk *p = a->cur->prev;
        free(a->cur);
        a->cur = p;
    }
    if (a->cur)
        a->cur->used = m.used;
    a->total = m.total;
}

/* ---------------------------------------------------------------- buffer */

int ftj_buf_put(struct ftj_buf *b, const char *s, size_t n) {
    if (n == 0)
        return 0;
    if (b->n > b->limit || n > b->limit - b->n)
        return FT_ERANGE;
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return FT_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

int ftj_buf_putc(struct ftj_buf *b, char c) { return ftj_buf_put(b, &c, 1); }

void ftj_buf_free(struct ftj_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static int buf_puts(struct ftj_buf *b, const char *s) { return ftj_buf_put(b, s, strlen(s)); }

/* ------------------------------------------------------------ containers */

struct ftj_list *ftj_list_new(struct ftj_arena *a, size_t n, bool tuple) {
    struct ftj_list *l = ftj_alloc(a, sizeof(*l));
    if (!l)
        return NULL;
    l->n = n;
    l->tuple = tuple;
    l->cap = 0; /* v is exactly n slots; list.append() copies */
    l->v = ftj_alloc_array(a, n ? n : 1, sizeof(struct ftj_val));
    if (!l->v)
        return NULL;
    for (size_t i = 0; i < n; i++)
        l->v[i] = ftj_undef();
    return l;
}

struct ftj_dict *ftj_dict_new(struct ftj_arena *a, size_t cap) {
    struct ftj_dict *d = ftj_alloc(a, sizeof(*d));
    if (!d)
        return NULL;
    if (cap < 4)
        cap = 4;
    d->n = 0;
    d->cap = cap;
    d->k = ftj_alloc_array(a, cap, sizeof(struct ftj_val));
    d->v = ftj_alloc_array(a, cap, sizeof(struct ftj_val));
    if (!d->k || !d->v)
        return NULL;
    return d;
}

struct ftj_val *ftj_dict_get(const struct ftj_dict *d, struct ftj_val k) {
    for (size_t i = 0; i < d->n; i++)
        if (ftj_equal(d->k[i], k))
            return &d->v[i];
    return NULL;
}

struct ftj_val *ftj_dict_get_str(const struct ftj_dict *d, const char *p, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].type == FTJ_STR && d->k[i].u.s.n == n && memcmp(d->k[i].u.s.p, p, n) == 0)
            return &d->v[i];
    return NULL;
}

int ftj_dict_set(struct ftj_arena *a, struct ftj_dict *d, struct ftj_val k, struct ftj_val v) {
    struct ftj_val *slot = ftj_dict_get(d, k);
    if (slot) {
        *slot = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap * 2;
        struct ftj_val *nk = ftj_alloc_array(a, cap, sizeof(*nk));
        struct ftj_val *nv = ftj_alloc_array(a, cap, sizeof(*nv));
        if (!nk || !nv)
            return FT_ENOMEM;
        memcpy(nk, d->k, d->n * sizeof(*nk));
        memcpy(nv, d->v, d->n * sizeof(*nv));
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return 0;
}

/* ------------------------------------------------------------- semantics */

bool ftj_truthy(struct ftj_val v) {
    switch (v.type) {
    case FTJ_UNDEF:
    case FTJ_NONE: return false;
    case FTJ_BOOL: return v.u.b;
    case FTJ_INT: return v.u.i != 0;
    case FTJ_FLOAT: return v.u.f != 0.0;
    case FTJ_STR: return v.u.s.n != 0;
    case FTJ_LIST: return v.u.list->n != 0;
    case FTJ_DICT: return v.u.dict->n != 0;
    default: return true;
    }
}

const char *ftj_type_name(struct ftj_val v) {
    switch (v.type) {
    case FTJ_UNDEF: return "undefined";
    case FTJ_NONE: return "none";
    case FTJ_BOOL: return "boolean";
    case FTJ_INT: return "integer";
    case FTJ_FLOAT: return "float";
    case FTJ_STR: return "string";
    case FTJ_LIST: return v.u.list->tuple ? "tuple" : "list";
    case FTJ_DICT: return "mapping";
    case FTJ_NS: return "namespace";
    case FTJ_LOOP: return "loop";
    case FTJ_MACRO: return "macro";
    default: return "function";
    }
}

static bool is_num(struct ftj_val v) { return v.type == FTJ_BOOL || v.type == FTJ_INT || v.type == FTJ_FLOAT; }
static double num_f(struct ftj_val v) {
    return v.type == FTJ_FLOAT ? v.u.f : v.type == FTJ_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t num_i(struct ftj_val v) { return v.type == FTJ_INT ? v.u.i : (int64_t)v.u.b; }

static bool equal_depth(struct ftj_val a, struct ftj_val b, int depth) {
    if (depth > FTJ_MAX_DATA_DEPTH)
        return false;
    if (is_num(a) && is_num(b)) {
        if (a.type == FTJ_FLOAT || b.type == FTJ_FLOAT)
            return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.type == FTJ_UNDEF || b.type == FTJ_UNDEF)
        return a.type == b.type; /* Undefined == Undefined */
    if (a.type != b.type)
        return false;
    switch (a.type) {
    case FTJ_NONE: return true;
    case FTJ_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case FTJ_LIST:
        if (a.u.list->tuple != b.u.list->tuple || a.u.list->n != b.u.list->n)
            return false;
        for (size_t i = 0; i < a.u.list->n; i++)
            if (!equal_depth(a.u.list->v[i], b.u.list->v[i], depth + 1))
                return false;
        return true;
    case FTJ_DICT:
        if (a.u.dict->n != b.u.dict->n)
            return false;
        for (size_t i = 0; i < a.u.dict->n; i++) {
            const struct ftj_dict *d = b.u.dict;
            size_t j;
            for (j = 0; j < d->n; j++)
                if (equal_depth(d->k[j], a.u.dict->k[i], depth + 1))
                    break;
            if (j == d->n || !equal_depth(a.u.dict->v[i], d->v[j], depth + 1))
                return false;
        }
        return true;
    case FTJ_NS: return a.u.dict == b.u.dict; /* identity, as Python objects */
    case FTJ_LOOP: return a.u.loop == b.u.loop;
    case FTJ_MACRO: return a.u.macro == b.u.macro;
    case FTJ_FUNC: return a.u.func == b.u.func;
    default: return false;
    }
}

bool ftj_equal(struct ftj_val a, struct ftj_val b) { return equal_depth(a, b, 0); }

static int compare_depth(struct ftj_val a, struct ftj_val b, int *out, int depth) {
    if (depth > FTJ_MAX_DATA_DEPTH)
        return FT_ERANGE;
    if (is_num(a) && is_num(b)) {
        if (a.type == FTJ_FLOAT || b.type == FTJ_FLOAT) {
            double x = num_f(a), y = num_f(b);
            *out = x < y ? -1 : x > y ? 1 : 0; /* NaN compares equal: good enough for sorting */
        } else {
            int64_t x = num_i(a), y = num_i(b);
            *out = x < y ? -1 : x > y ? 1 : 0;
        }
        return 0;
    }
    if (a.type == FTJ_STR && b.type == FTJ_STR) {
        /* Code point order equals UTF-8 byte order. */
        size_t n = FT_MIN(a.u.s.n, b.u.s.n);
        int c = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0;
        *out = c < 0 ? -1 : c > 0 ? 1 : a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n ? 1 : 0;
        return 0;
    }
    if (a.type == FTJ_LIST && b.type == FTJ_LIST && a.u.list->tuple == b.u.list->tuple) {
        size_t n = FT_MIN(a.u.list->n, b.u.list->n);
        for (size_t i = 0; i < n; i++) {
            if (equal_depth(a.u.list->v[i], b.u.list->v[i], depth + 1))
                continue;
            return compare_depth(a.u.list->v[i], b.u.list->v[i], out, depth + 1);
        }
        *out = a.u.list->n < b.u.list->n ? -1 : a.u.list->n > b.u.list->n ? 1 : 0;
        return 0;
    }
    return FT_EINVAL;
}

int ftj_compare(struct ftj_val a, struct ftj_val b, int *out) { return compare_depth(a, b, out, 0); }

/* ------------------------------------------------------------------ UTF-8 */

size_t ftj_utf8_next(const char *p, size_t n, size_t off) {
    /* A lead byte and its continuation bytes form one code point; a stray
     * byte counts as one, so invalid input still advances. */
    if (off >= n)
        return n;
    unsigned char c = (unsigned char)p[off];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    size_t i = 1;
    while (i < len && off + i < n && ((unsigned char)p[off + i] & 0xC0) == 0x80)
        i++;
    return off + i;
}

size_t ftj_utf8_count(const char *p, size_t n) {
    size_t k = 0;
    for (size_t off = 0; off < n; off = ftj_utf8_next(p, n, off))
        k++;
    return k;
}

size_t ftj_utf8_offset(const char *p, size_t n, size_t i) {
    size_t off = 0;
    while (i-- > 0 && off < n)
        off = ftj_utf8_next(p, n, off);
    return off;
}

/* ------------------------------------------------------------- printing */

int ftj_format_float(char *out, size_t cap, double f) {
    if (isnan(f))
        return snprintf(out, cap, "nan") < 0 ? FT_EINVAL : 0;
    if (isinf(f))
        return snprintf(out, cap, f < 0 ? "-inf" : "inf") < 0 ? FT_EINVAL : 0;
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    if (prec > 17)
        prec = 17;
    /* tmp = d.ddde[+-]XX with `prec` significant digits */
    char digits[24];
    int nd = 0;
    const char *q = tmp;
    bool neg = false;
    if (*q == '-') {
        neg = true;
        q++;
    }
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9')
            digits[nd++] = *q;
    int exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    char res[64];
    size_t k = 0;
    if (neg)
        res[k++] = '-';
    if (exp10 < -4 || exp10 >= 16) {
        /* Python repr: scientific with at least two exponent digits */
        res[k++] = digits[0];
        if (nd > 1) {
            res[k++] = '.';
            for (int i = 1; i < nd; i++)
                res[k++] = digits[i];
        }
        k += (size_t)snprintf(res + k, sizeof(res) - k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    } else if (exp10 < 0) {
        res[k++] = '0';
        res[k++] = '.';
        for (int i = 0; i < -exp10 - 1; i++)
            res[k++] = '0';
        for (int i = 0; i < nd; i++)
            res[k++] = digits[i];
    } else {
        for (int i = 0; i <= exp10; i++)
            res[k++] = i < nd ? digits[i] : '0';
        res[k++] = '.';
        if (nd > exp10 + 1)
            for (int i = exp10 + 1; i < nd; i++)
                res[k++] = digits[i];
        else
            res[k++] = '0';
    }
    res[k] = '\0';
    if (k + 1 > cap)
        return FT_ERANGE;
    memcpy(out, res, k + 1);
    return 0;
}

static int write_num(struct ftj_buf *b, struct ftj_val v) {
    char tmp[64];
    if (v.type == FTJ_INT) {
        snprintf(tmp, sizeof(tmp), "%lld", (long long)v.u.i);
    } else {
        int rc = ftj_format_float(tmp, sizeof(tmp), v.u.f);
        if (rc)
            return rc;
    }
    return buf_puts(b, tmp);
}

/* Python repr() of a str: single quotes unless the text has ' and no ". */
static int write_py_str(struct ftj_buf *b, struct ftj_str s) {
    bool has_sq = memchr(s.p, '\'', s.n) != NULL, has_dq = memchr(s.p, '"', s.n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    int rc = ftj_buf_putc(b, q);
    size_t run = 0;
    for (size_t i = 0; i < s.n && !rc; i++) {
        unsigned char c = (unsigned char)s.p[i];
        const char *esc = NULL;
        char tmp[8];
        if (c == (unsigned char)q || c == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)c;
            tmp[2] = '\0';
            esc = tmp;
        } else if (c == '\n') {
            esc = "\\n";
        } else if (c == '\r') {
            esc = "\\r";
        } else if (c == '\t') {
            esc = "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(tmp, sizeof(tmp), "\\x%02x", c);
            esc = tmp;
        }
        if (esc) {
            rc = ftj_buf_put(b, s.p + i - run, run);
            run = 0;
            if (!rc)
                rc = buf_puts(b, esc);
        } else {
            run++;
        }
    }
    if (!rc)
        rc = ftj_buf_put(b, s.p + s.n - run, run);
    if (!rc)
        rc = ftj_buf_putc(b, q);
    return rc;
}

int ftj_write_repr(struct ftj_buf *b, struct ftj_val v, int depth) {
    if (depth > FTJ_MAX_DATA_DEPTH)
        return FT_ERANGE;
    int rc = 0;
    switch (v.type) {
    case FTJ_STR: return write_py_str(b, v.u.s);
    case FTJ_LIST: {
        const struct ftj_list *l = v.u.list;
        rc = ftj_buf_putc(b, l->tuple ? '(' : '[');
        for (size_t i = 0; i < l->n && !rc; i++) {
            if (i)
                rc = ftj_buf_put(b, ", ", 2);
            if (!rc)
                rc = ftj_write_repr(b, l->v[i], depth + 1);
        }
        if (!rc && l->tuple && l->n == 1)
            rc = ftj_buf_putc(b, ',');
        if (!rc)
            rc = ftj_buf_putc(b, l->tuple ? ')' : ']');
        return rc;
    }
    case FTJ_DICT:
    case FTJ_NS: {
        const struct ftj_dict *d = v.u.dict;
        if (v.type == FTJ_NS)
            rc = buf_puts(b, "<Namespace ");
        if (!rc)
            rc = ftj_buf_putc(b, '{');
        for (size_t i = 0; i < d->n && !rc; i++) {
            if (i)
                rc = ftj_buf_put(b, ", ", 2);
            if (!rc)
                rc = ftj_write_repr(b, d->k[i], depth + 1);
            if (!rc)
                rc = ftj_buf_put(b, ": ", 2);
            if (!rc)
                rc = ftj_write_repr(b, d->v[i], depth + 1);
        }
        if (!rc)
            rc = ftj_buf_putc(b, '}');
        if (!rc && v.type == FTJ_NS)
            rc = ftj_buf_putc(b, '>');
        return rc;
    }
    default: return ftj_write_str(b, v);
    }
}

int ftj_write_str(struct ftj_buf *b, struct ftj_val v) {
    switch (v.type) {
    case FTJ_UNDEF: return 0;
    case FTJ_NONE: return buf_puts(b, "None");
    case FTJ_BOOL: return buf_puts(b, v.u.b ? "True" : "False");
    case FTJ_INT:
    case FTJ_FLOAT: return write_num(b, v);
    case FTJ_STR: return ftj_buf_put(b, v.u.s.p, v.u.s.n);
    case FTJ_LIST:
    case FTJ_DICT:
    case FTJ_NS: return ftj_write_repr(b, v, 0);
    case FTJ_LOOP: return buf_puts(b, "<LoopContext>");
    case FTJ_MACRO: return buf_puts(b, "<Macro>");
    default: return buf_puts(b, "<function>");
    }
}

/* ------------------------------------------------------------------- JSON */

/* Code point at p[*off], advancing *off; a malformed byte yields U+FFFD. */
uint32_t ftj_utf8_decode(const char *p, size_t n, size_t *off) {
    size_t start = *off, end = ftj_utf8_next(p, n, start);
    const unsigned char *u = (const unsigned char *)p + start;
    size_t len = end - start;
    *off = end;
    if (len == 1)
        return u[0] < 0x80 ? u[0] : 0xFFFD;
    if (len == 2 && (u[0] >> 5) == 6)
        return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    if (len == 3 && (u[0] >> 4) == 14)
        return ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    if (len == 4 && (u[0] >> 3) == 30)
        return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) |
               (u[3] & 0x3F);
    return 0xFFFD;
}

static int write_json_str(struct ftj_buf *b, struct ftj_str s, bool ensure_ascii) {
    int rc = ftj_buf_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < s.n && !rc; i++) {
        unsigned char c = (unsigned char)s.p[i];
        char tmp[16];
        const char *esc = NULL;
        if (c >= 0x80 && ensure_ascii) {
            rc = ftj_buf_put(b, s.p + i - run, run);
            run = 0;
            size_t off = i;
            uint32_t cp = ftj_utf8_decode(s.p, s.n, &off);
            if (cp >= 0x10000)
                snprintf(tmp, sizeof(tmp), "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                         0xDC00 + ((cp - 0x10000) & 0x3FF));
            else
                snprintf(tmp, sizeof(tmp), "\\u%04x", cp);
            if (!rc)
                rc = buf_puts(b, tmp);
            i = off - 1;
            continue;
        }
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(tmp, sizeof(tmp), "\\u%04x", c);
                esc = tmp;
            }
        }
        if (esc) {
            rc = ftj_buf_put(b, s.p + i - run, run);
            run = 0;
            if (!rc)
                rc = buf_puts(b, esc);
        } else {
            run++;
        }
    }
    if (!rc)
        rc = ftj_buf_put(b, s.p + s.n - run, run);
    if (!rc)
        rc = ftj_buf_putc(b, '"');
    return rc;
}

static int json_newline(struct ftj_buf *b, int indent, int level) {
    int rc = ftj_buf_putc(b, '\n');
    for (int i = 0; i < indent * level && !rc; i++)
        rc = ftj_buf_putc(b, ' ');
    return rc;
}

/* Keys of a dict in output order: as inserted, or sorted (sort_keys). */
static int json_key_order(const struct ftj_dict *d, bool sort_keys, size_t *order) {
    for (size_t i = 0; i < d->n; i++)
        order[i] = i;
    if (!sort_keys)
        return 0;
    for (size_t i = 1; i < d->n; i++) { /* insertion sort: dicts in templates are small */
        size_t x = order[i], j = i;
        while (j > 0) {
            int c;
            if (ftj_compare(d->k[order[j - 1]], d->k[x], &c))
                return FT_EINVAL;
            if (c <= 0)
                break;
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    return 0;
}

static int write_json_key(struct ftj_buf *b, struct ftj_val k, bool ensure_ascii) {
    char tmp[64];
    switch (k.type) {
    case FTJ_STR: return write_json_str(b, k.u.s, ensure_ascii);
    case FTJ_INT:
        snprintf(tmp, sizeof(tmp), "\"%lld\"", (long long)k.u.i);
        return buf_puts(b, tmp);
    case FTJ_BOOL: return buf_puts(b, k.u.b ? "\"true\"" : "\"false\"");
    case FTJ_NONE: return buf_puts(b, "\"null\"");
    case FTJ_FLOAT: {
        int rc = ftj_format_float(tmp + 1, sizeof(tmp) - 2, k.u.f);
        if (rc)
            return rc;
        tmp[0] = '"';
        size_t n = strlen(tmp);
        tmp[n] = '"';
        tmp[n + 1] = '\0';
        return buf_puts(b, tmp);
    }
    default: return FT_EINVAL;
    }
}

int ftj_write_json(struct ftj_buf *b, struct ftj_val v, const struct ftj_json_opts *o, int depth) {
    if (depth > FTJ_MAX_DATA_DEPTH)
        return FT_ERANGE;
    int indent = o->indent;
    struct ftj_str item_sep = o->item_sep, key_sep = o->key_sep;
    if (!item_sep.p) {
        item_sep.p = indent >= 0 ? "," : ", ";
        item_sep.n = strlen(item_sep.p);
    }
    if (!key_sep.p) {
        key_sep.p = ": ";
        key_sep.n = 2;
    }
    int rc = 0;
    switch (v.type) {
    case FTJ_NONE: return buf_puts(b, "null");
    case FTJ_BOOL: return buf_puts(b, v.u.b ? "true" : "false");
    case FTJ_INT: return write_num(b, v);
    case FTJ_FLOAT:
        if (isnan(v.u.f))
            return buf_puts(b, "NaN");
        if (isinf(v.u.f))
            return buf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        return write_num(b, v);
    case FTJ_STR: return write_json_str(b, v.u.s, o->ensure_ascii);
    case FTJ_LIST: {
        const struct ftj_list *l = v.u.list;
        if (l->n == 0)
            return buf_puts(b, "[]");
        rc = ftj_buf_putc(b, '[');
        for (size_t i = 0; i < l->n && !rc; i++) {
            if (i)
                rc = ftj_buf_put(b, item_sep.p, item_sep.n);
            if (!rc && indent >= 0)
                rc = json_newline(b, indent, depth + 1);
            if (!rc)
                rc = ftj_write_json(b, l->v[i], o, depth + 1);
        }
        if (!rc && indent >= 0)
            rc = json_newline(b, indent, depth);
        if (!rc)
            rc = ftj_buf_putc(b, ']');
        return rc;
    }
    case FTJ_DICT:
    case FTJ_NS: {
        const struct ftj_dict *d = v.u.dict;
        if (d->n == 0)
            return buf_puts(b, "{}");
        size_t *order = malloc(d->n * sizeof(*order));
        if (!order)
            return FT_ENOMEM;
        rc = json_key_order(d, o->sort_keys, order);
        if (!rc)
            rc = ftj_buf_putc(b, '{');
        for (size_t i = 0; i < d->n && !rc; i++) {
            if (i)
                rc = ftj_buf_put(b, item_sep.p, item_sep.n);
            if (!rc && indent >= 0)
                rc = json_newline(b, indent, depth + 1);
            if (!rc)
                rc = write_json_key(b, d->k[order[i]], o->ensure_ascii);
            if (!rc)
                rc = ftj_buf_put(b, key_sep.p, key_sep.n);
            if (!rc)
                rc = ftj_write_json(b, d->v[order[i]], o, depth + 1);
        }
        if (!rc && indent >= 0)
            rc = json_newline(b, indent, depth);
        if (!rc)
            rc = ftj_buf_putc(b, '}');
        free(order);
        return rc;
    }
    default: return FT_EINVAL; /* undefined, loop, macro, function: not JSON serializable */
    }
}
