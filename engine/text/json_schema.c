/* JSON Schema to grammar, and the generic JSON grammar behind
 * response_format {"type": "json_object"}.
 *
 * What is supported, everything else being refused with the keyword named
 * (a schema from the network must never silently lose a constraint, or the
 * output would not validate):
 *   type (one or an array), enum, const, $ref (JSON pointers into the
 *   document, recursion included) with $defs/definitions, anyOf/oneOf (as
 *   anyOf), allOf of one schema; objects: properties, required,
 *   additionalProperties; arrays: items, minItems, maxItems; strings:
 *   minLength, maxLength, pattern (engine/text/grammar_regex.c), format
 *   date/time/date-time/uuid; integers and numbers: minimum, maximum,
 *   exclusiveMinimum, exclusiveMaximum (|bound| <= 1e15).
 * Annotations (title, description, default, examples, ...) are ignored.
 *
 * Choices that keep every output valid without searching: properties come
 * in the schema's order, optional ones may be left out; an object with
 * declared properties gets no others, whatever additionalProperties says;
 * numbers with bounds have no exponent; whitespace between tokens is at most
 * one newline and 20 spaces or tabs, so a model cannot pad forever. */
#include "grammar_internal.h"

#include "ft/common.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- generic JSON ------------------------------------------------------------- */

static int32_t digits_rule(struct gbuild *b, int32_t min, int32_t max) {
    int32_t d = gb_rule(b, NULL);
    struct ft_grammar_set s = {{0}};
    gset_add_range(&s, '0', '9');
    gb_set(b, d, &s);
    return gb_repeat(b, d, min, max);
}

void gjson_init(struct gbuild *b, struct gjson *j) {
    struct ft_grammar_set s;
    /* ws ::= "" | " " | "\n" [ \t]{0,20} */
    int32_t indent_ch = gb_rule(b, NULL);
    memset(&s, 0, sizeof(s));
    gset_add(&s, ' ');
    gset_add(&s, '\t');
    gb_set(b, indent_ch, &s);
    int32_t indent = gb_repeat(b, indent_ch, 0, 20);
    j->ws = gb_rule(b, NULL);
    gb_alt(b, j->ws);
    gb_byte(b, j->ws, ' ');
    gb_alt(b, j->ws);
    gb_byte(b, j->ws, '\n');
    gb_ref(b, j->ws, indent);

    /* str_char ::= any code point but '"', '\\' and controls | escape */
    j->str_char = gb_rule(b, NULL);
    static const uint32_t plain[] = {0x20, 0x21, 0x23, 0x5b, 0x5d, 0x10ffff};
    gb_utf8_range(b, j->str_char, plain, 3);
    gb_alt(b, j->str_char);
    gb_byte(b, j->str_char, '\\');
    int32_t esc = gb_rule(b, NULL);
    memset(&s, 0, sizeof(s));
    for (const char *c = "\"\\/bfnrt"; *c; c++)
        gset_add(&s, (unsigned char)*c);
    gb_set(b, esc, &s);
    /* \uXXXX outside the surrogates: a lone surrogate is not a character,
     * and a pair would count as one in minLength/maxLength */
    struct ft_grammar_set hex, d, d07;
    memset(&hex, 0, sizeof(hex));
    gset_add_range(&hex, '0', '9');
    gset_add_range(&hex, 'a', 'f');
    gset_add_range(&hex, 'A', 'F');
    d = hex;
    d.w['d' >> 5] &= ~(1u << ('d' & 31));
    d.w['D' >> 5] &= ~(1u << ('D' & 31));
    gb_alt(b, esc);
    gb_byte(b, esc, 'u');
    gb_set(b, esc, &d);
    for (int i = 0; i < 3; i++)
        gb_set(b, esc, &hex);
    memset(&d07, 0, sizeof(d07));
    gset_add_range(&d07, '0', '7');
    gb_alt(b, esc);
    gb_byte(b, esc, 'u');
    memset(&s, 0, sizeof(s));
    gset_add(&s, 'd');
    gset_add(&s, 'D');
    gb_set(b, esc, &s);
    gb_set(b, esc, &d07);
    gb_set(b, esc, &hex);
    gb_set(b, esc, &hex);
    gb_ref(b, j->str_char, esc);

    int32_t chars = gb_repeat(b, j->str_char, 0, -1);
    j->string = gb_rule(b, NULL);
    gb_byte(b, j->string, '"');
    gb_ref(b, j->string, chars);
    gb_byte(b, j->string, '"');

    /* integer ::= "-"? ("0" | [1-9] [0-9]{0,15}) */
    j->integer = gb_rule(b, NULL);
    int32_t mag = gb_rule(b, NULL);
    gb_byte(b, mag, '0');
    gb_alt(b, mag);
    memset(&s, 0, sizeof(s));
    gset_add_range(&s, '1', '9');
    gb_set(b, mag, &s);
    gb_ref(b, mag, digits_rule(b, 0, 15));
    gb_ref(b, j->integer, mag);
    gb_alt(b, j->integer);
    gb_byte(b, j->integer, '-');
    gb_ref(b, j->integer, mag);

    /* number ::= integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? */
    int32_t frac = gb_rule(b, NULL);
    gb_alt(b, frac);
    gb_byte(b, frac, '.');
    gb_ref(b, frac, digits_rule(b, 1, 16));
    int32_t exp = gb_rule(b, NULL);
    gb_alt(b, exp);
    memset(&s, 0, sizeof(s));
    gset_add(&s, 'e');
    gset_add(&s, 'E');
    gb_set(b, exp, &s);
    int32_t sign = gb_rule(b, NULL);
    gb_alt(b, sign);
    memset(&s, 0, sizeof(s));
    gset_add(&s, '-');
    gset_add(&s, '+');
    gb_set(b, sign, &s);
    gb_ref(b, exp, sign);
    gb_ref(b, exp, digits_rule(b, 1, 3));
    j->number = gb_rule(b, NULL);
    gb_ref(b, j->number, j->integer);
    gb_ref(b, j->number, frac);
    gb_ref(b, j->number, exp);

    /* value, object, array (mutually recursive) */
    j->value = gb_rule(b, NULL);
    j->object = gb_rule(b, NULL);
    j->array = gb_rule(b, NULL);
    gb_ref(b, j->value, j->object);
    gb_alt(b, j->value);
    gb_ref(b, j->value, j->array);
    gb_alt(b, j->value);
    gb_ref(b, j->value, j->string);
    gb_alt(b, j->value);
    gb_ref(b, j->value, j->number);
    static const char *const lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        gb_alt(b, j->value);
        gb_lit(b, j->value, lits[i], strlen(lits[i]));
    }
    /* object ::= "{" ws ( "}" | member ws ( "," ws member ws )* "}" ) */
    int32_t member = gb_rule(b, NULL);
    gb_ref(b, member, j->string);
    gb_ref(b, member, j->ws);
    gb_byte(b, member, ':');
    gb_ref(b, member, j->ws);
    gb_ref(b, member, j->value);
    int32_t more = gb_rule(b, NULL);
    gb_byte(b, more, ',');
    gb_ref(b, more, j->ws);
    gb_ref(b, more, member);
    gb_ref(b, more, j->ws);
    int32_t mores = gb_repeat(b, more, 0, -1);
    gb_byte(b, j->object, '{');
    gb_ref(b, j->object, j->ws);
    int32_t body = gb_rule(b, NULL);
    gb_byte(b, body, '}');
    gb_alt(b, body);
    gb_ref(b, body, member);
    gb_ref(b, body, j->ws);
    gb_ref(b, body, mores);
    gb_byte(b, body, '}');
    gb_ref(b, j->object, body);
    /* array ::= "[" ws ( "]" | value ws ( "," ws value ws )* "]" ) */
    int32_t amore = gb_rule(b, NULL);
    gb_byte(b, amore, ',');
    gb_ref(b, amore, j->ws);
    gb_ref(b, amore, j->value);
    gb_ref(b, amore, j->ws);
    int32_t amores = gb_repeat(b, amore, 0, -1);
    gb_byte(b, j->array, '[');
    gb_ref(b, j->array, j->ws);
    int32_t abody = gb_rule(b, NULL);
    gb_byte(b, abody, ']');
    gb_alt(b, abody);
    gb_ref(b, abody, j->value);
    gb_ref(b, abody, j->ws);
    gb_ref(b, abody, amores);
    gb_byte(b, abody, ']');
    gb_ref(b, j->array, abody);
}

int ft_grammar_json_object(struct ft_grammar **out) {
    char err[128];
    struct gbuild b;
    gb_init(&b, err, sizeof(err));
    struct gjson j;
    gjson_init(&b, &j);
    int rc = gb_finish(&b, j.object, out);
    gb_free(&b);
    if (rc)
        FT_LOG_E("%s", err);
    return rc;
}

/* ---- the schema compiler ---------------------------------------------------------- */

struct sref {
    char *ref;
    int32_t rule;
};

struct sc {
    struct gbuild *b;
    struct gjson j;
    const cJSON *doc;
    struct sref *refs;
    int n_refs, cap_refs;
    char path[256];
};

#define SC_FAIL(sc, ...) gb_fail((sc)->b, FT_EUNSUPPORTED, __VA_ARGS__)

static const char *const annotations[] = {"title", "description", "$schema", "$id", "$comment", "default", "examples",
                                          "deprecated", "readOnly", "writeOnly", "$defs", "definitions",
                                          "contentEncoding", "contentMediaType", "$anchor", "id"};

static bool is_annotation(const char *k) {
    for (size_t i = 0; i < FT_ARRAY_LEN(annotations); i++)
        if (!strcmp(k, annotations[i]))
            return true;
    return false;
}

static int32_t sc_schema(struct sc *sc, const cJSON *s, int depth);

/* Append the exact JSON text of a value (cJSON escapes strings). */
static void lit_json(struct sc *sc, int32_t rule, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) {
        gb_fail(sc->b, FT_ENOMEM, "out of memory");
        return;
    }
    gb_lit(sc->b, rule, t, strlen(t));
    cJSON_free(t);
}

static const cJSON *sc_resolve(struct sc *sc, const char *ref) {
    if (ref[0] != '#')
        return NULL;
    const cJSON *cur = sc->doc;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char seg[256];
        size_t n = 0;
        while (*p && *p != '/') {
            char c = *p++;
            if (c == '~' && (*p == '0' || *p == '1'))
                c = *p++ == '0' ? '~' : '/';
            if (n + 1 >= sizeof(seg))
                return NULL;
            seg[n++] = c;
        }
        seg[n] = '\0';
        if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, seg);
        } else if (cJSON_IsArray(cur)) {
            char *e;
            long i = strtol(seg, &e, 10);
            cur = (*e || i < 0) ? NULL : cJSON_GetArrayItem(cur, (int)i);
        } else {
            return NULL;
        }
        if (!cur)
            return NULL;
    }
    return *p ? NULL : cur;
}

static int32_t sc_ref(struct sc *sc, const char *ref, int depth) {
    for (int i = 0; i < sc->n_refs; i++)
        if (!strcmp(sc->refs[i].ref, ref))
            return sc->refs[i].rule;
    const cJSON *t = sc_resolve(sc, ref);
    if (!t)
        return SC_FAIL(sc, "'$ref' '%.100s' at %s does not resolve to a schema in this document", ref, sc->path);
    if (sc->n_refs == sc->cap_refs) {
        int cap = sc->cap_refs ? sc->cap_refs * 2 : 8;
        struct sref *p = realloc(sc->refs, sizeof(*p) * (size_t)cap);
        if (!p)
            return gb_fail(sc->b, FT_ENOMEM, "out of memory");
        sc->refs = p;
        sc->cap_refs = cap;
    }
    int32_t r = gb_rule(sc->b, NULL);
    char *dup = strdup(ref);
    if (r < 0 || !dup) {
        free(dup);
        return gb_fail(sc->b, FT_ENOMEM, "out of memory");
    }
    sc->refs[sc->n_refs++] = (struct sref){dup, r};
    /* defined after registering, so recursive references find it */
    char saved[sizeof(sc->path)];
    memcpy(saved, sc->path, sizeof(saved));
    snprintf(sc->path, sizeof(sc->path), "%.200s", ref);
    int32_t body = sc_schema(sc, t, depth + 1);
    memcpy(sc->path, saved, sizeof(saved));
    if (body < 0)
        return -1;
    gb_ref(sc->b, r, body);
    return r;
}

static size_t path_push(struct sc *sc, const char *a, const char *b) {
    size_t n = strlen(sc->path);
    snprintf(sc->path + n, sizeof(sc->path) - n, "/%s%s%.60s", a, b ? "/" : "", b ? b : "");
    return n;
}

static void digits_range(struct gbuild *b, int32_t rule, const char *lo, const char *hi, int n, bool *first);

/* Decimal strings of length n between lo and hi (same length, lo <= hi) as
 * alternatives of `rule`: a shared prefix digit, then the low edge, the full
 * middle digits and the high edge (the usual numeric-range construction). */
static void digits_range(struct gbuild *b, int32_t rule, const char *lo, const char *hi, int n, bool *first) {
    if (b->rc)
        return;
    struct ft_grammar_set s = {{0}};
    if (n == 0) {
        if (!*first)
            gb_alt(b, rule);
        *first = false;
        return;
    }
    if (lo[0] == hi[0]) {
        int32_t sub = gb_rule(b, NULL);
        bool f = true;
        digits_range(b, sub, lo + 1, hi + 1, n - 1, &f);
        if (!*first)
            gb_alt(b, rule);
        *first = false;
        gb_byte(b, rule, (unsigned char)lo[0]);
        gb_ref(b, rule, sub);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof(nines) - 1);
    memset(zeros, '0', sizeof(zeros) - 1);
    nines[sizeof(nines) - 1] = zeros[sizeof(zeros) - 1] = '\0';
    bool lo_zero = true, hi_nine = true; /* only the first n - 1 digits count */
    for (int i = 1; i < n; i++) {
        lo_zero &= lo[i] == '0';
        hi_nine &= hi[i] == '9';
    }
    int dlo = lo[0], dhi = hi[0];
    if (!lo_zero) {
        int32_t sub = gb_rule(b, NULL);
        bool f = true;
        digits_range(b, sub, lo + 1, nines, n - 1, &f);
        if (!*first)
            gb_alt(b, rule);
        *first = false;
        gb_byte(b, rule, (unsigned char)lo[0]);
        gb_ref(b, rule, sub);
        dlo++;
    }
    if (!hi_nine) {
        int32_t sub = gb_rule(b, NULL);
        bool f = true;
        digits_range(b, sub, zeros, hi + 1, n - 1, &f);
        if (!*first)
            gb_alt(b, rule);
        *first = false;
        gb_byte(b, rule, (unsigned char)hi[0]);
        gb_ref(b, rule, sub);
        dhi--;
    }
    if (dlo <= dhi) {
        if (!*first)
            gb_alt(b, rule);
        *first = false;
        gset_add_range(&s, (unsigned)dlo, (unsigned)dhi);
        gb_set(b, rule, &s);
        for (int i = 1; i < n; i++) {
            struct ft_grammar_set d = {{0}};
            gset_add_range(&d, '0', '9');
            gb_set(b, rule, &d);
        }
    }
}

#define MAX_DIGITS 15
static const double MAX_BOUND = 1e15;

/* Nonnegative integers in [lo, hi] (hi < 0: up to 15 digits) without
 * leading zeros, as alternatives of `rule`. */
static void uint_range(struct gbuild *b, int32_t rule, int64_t lo, int64_t hi, bool *first) {
    int64_t p = 1;
    for (int len = 1; len <= MAX_DIGITS; len++, p *= 10) {
        int64_t a = FT_MAX(lo, len == 1 ? 0 : p), z = p * 10 - 1;
        if (hi >= 0)
            z = FT_MIN(z, hi);
        if (a > z)
            continue;
        char sa[24], sz[24];
        snprintf(sa, sizeof(sa), "%lld", (long long)a);
        snprintf(sz, sizeof(sz), "%lld", (long long)z);
        digits_range(b, rule, sa, sz, len, first);
    }
}

/* Integers in [lo, hi]; has_lo/has_hi false means unbounded on that side
 * (15 digits at most). Returns false when the range is empty. */
static bool int_range(struct gbuild *b, int32_t rule, bool has_lo, int64_t lo, bool has_hi, int64_t hi, bool *first) {
    bool any = false;
    /* nonnegative part */
    if (!has_hi || hi >= 0) {
        int64_t a = has_lo ? FT_MAX(lo, 0) : 0;
        if (!has_hi || a <= hi) {
            uint_range(b, rule, a, has_hi ? hi : -1, first);
            any = true;
        }
    }
    /* negative part: "-" k with k in [max(1, -hi), -lo] */
    if (!has_lo || lo < 0) {
        int64_t ka = has_hi ? FT_MAX(1, -hi) : 1;
        int64_t kz = has_lo ? -lo : -1;
        if (kz < 0 || ka <= kz) {
            int32_t sub = gb_rule(b, NULL);
            bool f = true;
            uint_range(b, sub, ka, kz, &f);
            if (!*first)
                gb_alt(b, rule);
            *first = false;
            gb_byte(b, rule, '-');
            gb_ref(b, rule, sub);
            any = true;
        }
    }
    return any;
}

static int get_bound(struct sc *sc, const cJSON *s, const char *kw, double *v, bool *given) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, kw);
    *given = x != NULL;
    if (!x)
        return 0;
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble))
        return SC_FAIL(sc, "'%s' at %s must be a number", kw, sc->path);
    if (fabs(x->valuedouble) > MAX_BOUND)
        return SC_FAIL(sc, "'%s' at %s is beyond the supported range of +-1e15", kw, sc->path);
    *v = x->valuedouble;
    return 0;
}

static int32_t sc_number(struct sc *sc, const cJSON *s, bool integer) {
    struct gbuild *b = sc->b;
    double mn = 0, mx = 0, emn = 0, emx = 0;
    bool hmn, hmx, hemn, hemx;
    if (get_bound(sc, s, "minimum", &mn, &hmn) || get_bound(sc, s, "maximum", &mx, &hmx) ||
        get_bound(sc, s, "exclusiveMinimum", &emn, &hemn) || get_bound(sc, s, "exclusiveMaximum", &emx, &hemx))
        return -1;
    if (!hmn && !hmx && !hemn && !hemx)
        return integer ? sc->j.integer : sc->j.number;
    /* integer bounds of the value: [lo, hi] */
    bool has_lo = hmn || hemn, has_hi = hmx || hemx;
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    if (hmn)
        lo = (int64_t)ceil(mn);
    if (hemn)
        lo = FT_MAX(lo, (int64_t)floor(emn) + 1);
    if (hmx)
        hi = (int64_t)floor(mx);
    if (hemx)
        hi = FT_MIN(hi, (int64_t)ceil(emx) - 1);
    int32_t r = gb_rule(b, NULL);
    bool first = true;
    bool any = int_range(b, r, has_lo, lo, has_hi, hi, &first);
    if (!integer) {
        /* i "." digits with i >= 0: needs i >= lo and i + 1 <= the maximum */
        int64_t fhi = -1;
        bool fhas_hi = has_hi;
        if (hmx)
            fhi = (int64_t)floor(mx) - 1;
        if (hemx)
            fhi = hmx ? FT_MIN(fhi, (int64_t)floor(emx) - 1) : (int64_t)floor(emx) - 1;
        int64_t flo = has_lo ? FT_MAX(lo, 0) : 0;
        int32_t frac = gb_rule(b, NULL);
        gb_byte(b, frac, '.');
        gb_ref(b, frac, digits_rule(b, 1, 15));
        if (!fhas_hi || flo <= fhi) {
            int32_t ip = gb_rule(b, NULL);
            bool f = true;
            uint_range(b, ip, flo, fhas_hi ? fhi : -1, &f);
            if (!first)
                gb_alt(b, r);
            first = false;
            gb_ref(b, r, ip);
            gb_ref(b, r, frac);
            any = true;
        }
        /* "-" k "." digits: -(k + f) in range needs k >= -hi and k + 1 <= -minimum */
        int64_t kmin = has_hi ? FT_MAX(0, -hi) : 0;
        bool khas_max = has_lo;
        int64_t kmax = 0;
        if (hmn)
            kmax = (int64_t)floor(-mn) - 1;
        if (hemn)
            kmax = hmn ? FT_MIN(kmax, (int64_t)floor(-emn) - 1) : (int64_t)floor(-emn) - 1;
        if (!khas_max || kmin <= kmax) {
            int32_t ip = gb_rule(b, NULL);
            bool f = true;
            uint_range(b, ip, kmin, khas_max ? kmax : -1, &f);
            if (!first)
                gb_alt(b, r);
            first = false;
            gb_byte(b, r, '-');
            gb_ref(b, r, ip);
            gb_ref(b, r, frac);
            any = true;
        }
    }
    if (!any)
        return SC_FAIL(sc, "the bounds at %s allow no %s", sc->path, integer ? "integer" : "number");
    return r;
}

static const struct {
    const char *name, *re;
} formats[] = {
    {"date", "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$"},
    {"time", "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
    {"date-time", "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
    {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
};

static int get_count(struct sc *sc, const cJSON *s, const char *kw, int32_t *v, bool *given) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, kw);
    *given = x != NULL;
    if (!x)
        return 0;
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble != floor(x->valuedouble))
        return SC_FAIL(sc, "'%s' at %s must be a nonnegative integer", kw, sc->path);
    *v = x->valuedouble > 1e9 ? 1000000000 : (int32_t)x->valuedouble;
    return 0;
}

static int32_t sc_string(struct sc *sc, const cJSON *s) {
    struct gbuild *b = sc->b;
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    int32_t mn = 0, mx = -1;
    bool hmn, hmx;
    if (get_count(sc, s, "minLength", &mn, &hmn) || get_count(sc, s, "maxLength", &mx, &hmx))
        return -1;
    if (!hmx)
        mx = -1;
    if ((pat || fmt) && (hmn || hmx))
        return SC_FAIL(sc, "'minLength'/'maxLength' together with '%s' at %s are not supported",
                       pat ? "pattern" : "format", sc->path);
    if (pat && fmt)
        return SC_FAIL(sc, "'pattern' together with 'format' at %s is not supported", sc->path);
    if (mn > FT_GRAMMAR_MAX_REPEAT || (hmx && mx > FT_GRAMMAR_MAX_REPEAT)) {
        if (mn > FT_GRAMMAR_MAX_REPEAT)
            return SC_FAIL(sc, "'minLength' at %s is above the supported %d", sc->path, FT_GRAMMAR_MAX_REPEAT);
        mx = -1; /* longer than any generation can be: unbounded */
    }
    if (hmx && mx < mn)
        return SC_FAIL(sc, "'maxLength' is below 'minLength' at %s", sc->path);
    int32_t r = gb_rule(b, NULL);
    gb_byte(b, r, '"');
    if (pat) {
        if (!cJSON_IsString(pat))
            return SC_FAIL(sc, "'pattern' at %s must be a string", sc->path);
        if (ft_grammar_regex(b, r, pat->valuestring, strlen(pat->valuestring)))
            return -1;
    } else if (fmt) {
        if (!cJSON_IsString(fmt))
            return SC_FAIL(sc, "'format' at %s must be a string", sc->path);
        size_t i = 0;
        while (i < FT_ARRAY_LEN(formats) && strcmp(formats[i].name, fmt->valuestring))
            i++;
        if (i == FT_ARRAY_LEN(formats))
            return SC_FAIL(sc, "unsupported JSON Schema keyword 'format' value '%.40s' at %s (supported: date, time, "
                               "date-time, uuid)", fmt->valuestring, sc->path);
        if (ft_grammar_regex(b, r, formats[i].re, strlen(formats[i].re)))
            return -1;
    } else {
        gb_ref(b, r, gb_repeat(b, sc->j.str_char, mn, mx));
    }
    gb_byte(b, r, '"');
    return r;
}

static int32_t sc_array(struct sc *sc, const cJSON *s, int depth) {
    struct gbuild *b = sc->b;
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    int32_t mn = 0, mx = -1;
    bool hmn, hmx;
    if (get_count(sc, s, "minItems", &mn, &hmn) || get_count(sc, s, "maxItems", &mx, &hmx))
        return -1;
    if (!hmx)
        mx = -1;
    if (mn > FT_GRAMMAR_MAX_REPEAT)
        return SC_FAIL(sc, "'minItems' at %s is above the supported %d", sc->path, FT_GRAMMAR_MAX_REPEAT);
    if (mx > FT_GRAMMAR_MAX_REPEAT)
        mx = -1; /* more items than any generation can hold */
    if (hmx && mx >= 0 && mx < mn)
        return SC_FAIL(sc, "'maxItems' is below 'minItems' at %s", sc->path);
    int32_t item;
    if (!items || cJSON_IsTrue(items)) {
        item = sc->j.value;
    } else if (cJSON_IsFalse(items)) {
        if (mn > 0)
            return SC_FAIL(sc, "'items': false with 'minItems' > 0 at %s allows nothing", sc->path);
        mx = 0;
        item = sc->j.value;
    } else if (cJSON_IsObject(items)) {
        size_t n = path_push(sc, "items", NULL);
        item = sc_schema(sc, items, depth + 1);
        sc->path[n] = '\0';
        if (item < 0)
            return -1;
    } else {
        return SC_FAIL(sc, "unsupported JSON Schema keyword 'items' as an array (tuple validation) at %s", sc->path);
    }
    /* "[" ws ( "]" | item ws ( "," ws item ws ){mn-1, mx-1} "]" ) */
    int32_t r = gb_rule(b, NULL);
    gb_byte(b, r, '[');
    gb_ref(b, r, sc->j.ws);
    int32_t body = gb_rule(b, NULL);
    bool first = true;
    if (mn == 0) {
        gb_byte(b, body, ']');
        first = false;
    }
    if (mx != 0) {
        int32_t more = gb_rule(b, NULL);
        gb_byte(b, more, ',');
        gb_ref(b, more, sc->j.ws);
        gb_ref(b, more, item);
        gb_ref(b, more, sc->j.ws);
        if (!first)
            gb_alt(b, body);
        gb_ref(b, body, item);
        gb_ref(b, body, sc->j.ws);
        gb_ref(b, body, gb_repeat(b, more, mn > 0 ? mn - 1 : 0, mx < 0 ? -1 : mx - 1));
        gb_byte(b, body, ']');
    }
    gb_ref(b, r, body);
    return r;
}

/* A property name as a JSON string literal. */
static void key_lit(struct sc *sc, int32_t rule, const char *key) {
    struct gbuild *b = sc->b;
    gb_byte(b, rule, '"');
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        if (*p == '"' || *p == '\\') {
            gb_byte(b, rule, '\\');
            gb_byte(b, rule, *p);
        } else if (*p < 0x20) {
            char e[8];
            snprintf(e, sizeof(e), "\\u%04x", *p);
            gb_lit(b, rule, e, 6);
        } else {
            gb_byte(b, rule, *p);
        }
    }
    gb_byte(b, rule, '"');
}

static int32_t sc_object(struct sc *sc, const cJSON *s, int depth) {
    struct gbuild *b = sc->b;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props))
        return SC_FAIL(sc, "'properties' at %s must be an object", sc->path);
    if (req && !cJSON_IsArray(req))
        return SC_FAIL(sc, "'required' at %s must be an array of strings", sc->path);
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return SC_FAIL(sc, "'additionalProperties' at %s must be a boolean or a schema", sc->path);
    /* declared properties, then required names that are not declared */
    const cJSON *q;
    int n = 0;
    cJSON_ArrayForEach(q, props) n++;
    const cJSON *rq;
    cJSON_ArrayForEach(rq, req) {
        if (!cJSON_IsString(rq))
            return SC_FAIL(sc, "'required' at %s must be an array of strings", sc->path);
        if (!props || !cJSON_GetObjectItemCaseSensitive(props, rq->valuestring)) {
            if (cJSON_IsFalse(addl))
                return SC_FAIL(sc, "required property '%.60s' at %s is not in 'properties' and "
                                   "additionalProperties is false", rq->valuestring, sc->path);
            n++;
        }
    }
    if (n > 1024)
        return SC_FAIL(sc, "more than 1024 properties at %s", sc->path);
    int32_t r = gb_rule(b, NULL);
    gb_byte(b, r, '{');
    gb_ref(b, r, sc->j.ws);
    if (n == 0) {
        if (cJSON_IsFalse(addl)) {
            gb_byte(b, r, '}');
            return r;
        }
        int32_t val = sc->j.value;
        if (cJSON_IsObject(addl)) {
            size_t pn = path_push(sc, "additionalProperties", NULL);
            val = sc_schema(sc, addl, depth + 1);
            sc->path[pn] = '\0';
            if (val < 0)
                return -1;
        }
        int32_t member = gb_rule(b, NULL);
        gb_ref(b, member, sc->j.string);
        gb_ref(b, member, sc->j.ws);
        gb_byte(b, member, ':');
        gb_ref(b, member, sc->j.ws);
        gb_ref(b, member, val);
        int32_t more = gb_rule(b, NULL);
        gb_byte(b, more, ',');
        gb_ref(b, more, sc->j.ws);
        gb_ref(b, more, member);
        gb_ref(b, more, sc->j.ws);
        int32_t body = gb_rule(b, NULL);
        gb_byte(b, body, '}');
        gb_alt(b, body);
        gb_ref(b, body, member);
        gb_ref(b, body, sc->j.ws);
        gb_ref(b, body, gb_repeat(b, more, 0, -1));
        gb_byte(b, body, '}');
        gb_ref(b, r, body);
        return r;
    }
    /* member_i ::= "\"key\"" ws ":" ws value_i; first_i / comma_i chain the
     * members in order, optional ones skippable (see the file comment) */
    int32_t *member = malloc(sizeof(int32_t) * (size_t)n);
    bool *required = calloc((size_t)n, sizeof(bool));
    if (!member || !required) {
        free(member);
        free(required);
        return gb_fail(b, FT_ENOMEM, "out of memory");
    }
    int i = 0;
    const cJSON *any = NULL;
    cJSON_ArrayForEach(q, props) {
        member[i] = gb_rule(b, NULL);
        key_lit(sc, member[i], q->string);
        gb_ref(b, member[i], sc->j.ws);
        gb_byte(b, member[i], ':');
        gb_ref(b, member[i], sc->j.ws);
        size_t pn = path_push(sc, "properties", q->string);
        int32_t v = sc_schema(sc, q, depth + 1);
        sc->path[pn] = '\0';
        if (v < 0)
            goto fail;
        gb_ref(b, member[i], v);
        gb_ref(b, member[i], sc->j.ws);
        cJSON_ArrayForEach(rq, req) required[i] |= !strcmp(rq->valuestring, q->string);
        i++;
    }
    (void)any;
    int32_t addl_rule = sc->j.value; /* required names not in properties: additionalProperties' schema */
    if (cJSON_IsObject(addl) && n > i) {
        size_t pn = path_push(sc, "additionalProperties", NULL);
        addl_rule = sc_schema(sc, addl, depth + 1);
        sc->path[pn] = '\0';
        if (addl_rule < 0)
            goto fail;
    }
    cJSON_ArrayForEach(rq, req) {
        if (props && cJSON_GetObjectItemCaseSensitive(props, rq->valuestring))
            continue;
        member[i] = gb_rule(b, NULL);
        key_lit(sc, member[i], rq->valuestring);
        gb_ref(b, member[i], sc->j.ws);
        gb_byte(b, member[i], ':');
        gb_ref(b, member[i], sc->j.ws);
        gb_ref(b, member[i], addl_rule);
        gb_ref(b, member[i], sc->j.ws);
        required[i++] = true;
    }
    /* first_n = comma_n = ""; first_i = member_i comma_{i+1} | first_{i+1} (optional i);
     * comma_i = "," ws member_i comma_{i+1} | comma_{i+1} (optional i) */
    int32_t first = gb_rule(b, NULL), comma = gb_rule(b, NULL);
    for (int k = n - 1; k >= 0; k--) {
        int32_t f = gb_rule(b, NULL), c = gb_rule(b, NULL);
        gb_ref(b, f, member[k]);
        gb_ref(b, f, comma);
        gb_byte(b, c, ',');
        gb_ref(b, c, sc->j.ws);
        gb_ref(b, c, member[k]);
        gb_ref(b, c, comma);
        if (!required[k]) {
            gb_alt(b, f);
            gb_ref(b, f, first);
            gb_alt(b, c);
            gb_ref(b, c, comma);
        }
        first = f;
        comma = c;
    }
    gb_ref(b, r, first);
    gb_byte(b, r, '}');
    free(member);
    free(required);
    return b->rc ? -1 : r;
fail:
    free(member);
    free(required);
    return -1;
}

static const char *const type_names[] = {"object", "array", "string", "number", "integer", "boolean", "null"};

static const char *const known[] = {"type", "properties", "required", "additionalProperties", "items", "minItems",
                                    "maxItems", "enum", "const", "pattern", "format", "minLength", "maxLength",
                                    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "$ref", "anyOf",
                                    "oneOf", "allOf", "uniqueItems"};

static int32_t sc_typed(struct sc *sc, const cJSON *s, const char *type, int depth) {
    struct gbuild *b = sc->b;
    if (!strcmp(type, "object"))
        return sc_object(sc, s, depth);
    if (!strcmp(type, "array"))
        return sc_array(sc, s, depth);
    if (!strcmp(type, "string"))
        return sc_string(sc, s);
    if (!strcmp(type, "number"))
        return sc_number(sc, s, false);
    if (!strcmp(type, "integer"))
        return sc_number(sc, s, true);
    int32_t r = gb_rule(b, NULL);
    if (!strcmp(type, "boolean")) {
        gb_lit(b, r, "true", 4);
        gb_alt(b, r);
        gb_lit(b, r, "false", 5);
    } else if (!strcmp(type, "null")) {
        gb_lit(b, r, "null", 4);
    } else {
        return SC_FAIL(sc, "unknown type '%.40s' at %s", type, sc->path);
    }
    return r;
}

static int32_t sc_alternatives(struct sc *sc, const cJSON *arr, const char *kw, int depth) {
    struct gbuild *b = sc->b;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0)
        return SC_FAIL(sc, "'%s' at %s must be a non-empty array of schemas", kw, sc->path);
    int32_t r = gb_rule(b, NULL);
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) {
        char idx[16];
        snprintf(idx, sizeof(idx), "%d", i);
        size_t pn = path_push(sc, kw, idx);
        int32_t a = sc_schema(sc, x, depth + 1);
        sc->path[pn] = '\0';
        if (a < 0)
            return -1;
        if (i++)
            gb_alt(b, r);
        gb_ref(b, r, a);
    }
    return r;
}

static int32_t sc_schema(struct sc *sc, const cJSON *s, int depth) {
    struct gbuild *b = sc->b;
    if (b->rc)
        return -1;
    if (depth > FT_GRAMMAR_MAX_DEPTH)
        return SC_FAIL(sc, "the schema nests deeper than %d at %s", FT_GRAMMAR_MAX_DEPTH, sc->path);
    if (cJSON_IsTrue(s))
        return sc->j.value;
    if (cJSON_IsFalse(s))
        return SC_FAIL(sc, "the schema at %s is false: nothing validates", sc->path);
    if (!cJSON_IsObject(s))
        return SC_FAIL(sc, "the schema at %s must be an object or a boolean", sc->path);
    /* every keyword must be known or an annotation */
    const cJSON *k;
    int n_constraints = 0;
    cJSON_ArrayForEach(k, s) {
        if (is_annotation(k->string))
            continue;
        size_t i = 0;
        while (i < FT_ARRAY_LEN(known) && strcmp(known[i], k->string))
            i++;
        if (i == FT_ARRAY_LEN(known))
            return SC_FAIL(sc, "unsupported JSON Schema keyword '%.60s' at %s", k->string, sc->path);
        if (!strcmp(k->string, "uniqueItems") && !cJSON_IsFalse(k))
            return SC_FAIL(sc, "unsupported JSON Schema keyword 'uniqueItems' at %s", sc->path);
        n_constraints++;
    }
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    const cJSON *anyof = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    const cJSON *oneof = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    const cJSON *allof = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    const char *combiner = ref ? "$ref" : anyof ? "anyOf" : oneof ? "oneOf" : allof ? "allOf" : en ? "enum"
                         : cn ? "const" : NULL;
    if (combiner && n_constraints > 1) {
        /* siblings of a combiner would be ANDed with it: refused rather than dropped */
        cJSON_ArrayForEach(k, s) {
            if (!is_annotation(k->string) && strcmp(k->string, combiner) &&
                !(strcmp(combiner, "enum") == 0 || strcmp(combiner, "const") == 0 ? !strcmp(k->string, "type")
                                                                                   : false))
                return SC_FAIL(sc, "unsupported JSON Schema keyword '%.60s' next to '%s' at %s", k->string, combiner,
                               sc->path);
        }
    }
    if (ref) {
        if (!cJSON_IsString(ref))
            return SC_FAIL(sc, "'$ref' at %s must be a string", sc->path);
        return sc_ref(sc, ref->valuestring, depth);
    }
    if (anyof)
        return sc_alternatives(sc, anyof, "anyOf", depth);
    if (oneof)
        return sc_alternatives(sc, oneof, "oneOf", depth);
    if (allof) {
        if (!cJSON_IsArray(allof) || cJSON_GetArraySize(allof) != 1)
            return SC_FAIL(sc, "unsupported JSON Schema keyword 'allOf' with more than one schema at %s", sc->path);
        size_t pn = path_push(sc, "allOf", "0");
        int32_t r = sc_schema(sc, cJSON_GetArrayItem(allof, 0), depth + 1);
        sc->path[pn] = '\0';
        return r;
    }
    if (cn) {
        int32_t r = gb_rule(b, NULL);
        lit_json(sc, r, cn);
        return b->rc ? -1 : r;
    }
    if (en) {
        if (!cJSON_IsArray(en) || cJSON_GetArraySize(en) == 0)
            return SC_FAIL(sc, "'enum' at %s must be a non-empty array", sc->path);
        int32_t r = gb_rule(b, NULL);
        int i = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, en) {
            if (i++)
                gb_alt(b, r);
            lit_json(sc, r, x);
        }
        return b->rc ? -1 : r;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(type))
        return sc_typed(sc, s, type->valuestring, depth);
    if (cJSON_IsArray(type)) {
        if (cJSON_GetArraySize(type) == 0)
            return SC_FAIL(sc, "'type' at %s is an empty array", sc->path);
        int32_t r = gb_rule(b, NULL);
        int i = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, type) {
            if (!cJSON_IsString(t))
                return SC_FAIL(sc, "'type' at %s must be a string or an array of strings", sc->path);
            bool dup = false; /* ["object", "object", ...] must not compile the properties twice */
            for (const cJSON *u = type->child; u != t; u = u->next)
                dup |= cJSON_IsString(u) && !strcmp(u->valuestring, t->valuestring);
            if (dup)
                continue;
            int32_t a = sc_typed(sc, s, t->valuestring, depth);
            if (a < 0)
                return -1;
            if (i++)
                gb_alt(b, r);
            gb_ref(b, r, a);
        }
        return r;
    }
    if (type)
        return SC_FAIL(sc, "'type' at %s must be a string or an array of strings", sc->path);
    /* no type: the keywords say which one, else any value */
    static const char *const by_kw[][2] = {
        {"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
        {"items", "array"}, {"minItems", "array"}, {"maxItems", "array"},
        {"pattern", "string"}, {"format", "string"}, {"minLength", "string"}, {"maxLength", "string"},
        {"minimum", "number"}, {"maximum", "number"}, {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(by_kw); i++)
        if (cJSON_GetObjectItemCaseSensitive(s, by_kw[i][0]))
            return sc_typed(sc, s, by_kw[i][1], depth);
    (void)type_names;
    return sc->j.value;
}

int ft_grammar_from_json_schema(const char *text, size_t len, struct ft_grammar **out, char *err, size_t err_cap) {
    return ft_grammar_from_json_schema_frame(text, len, NULL, out, err, err_cap);
}

int ft_grammar_from_json_schema_framed(const char *text, size_t len, const char *prefix, const char *suffix,
                                       struct ft_grammar **out, char *err, size_t err_cap) {
    const struct ft_grammar_frame f = {.open = prefix, .close = suffix, .max_items = 1};
    return ft_grammar_from_json_schema_frame(text, len, &f, out, err, err_cap);
}

static void lit_opt(struct gbuild *b, int32_t rule, const char *s) {
    if (s && *s)
        gb_lit(b, rule, s, strlen(s));
}

int ft_grammar_from_json_schema_frame(const char *text, size_t len, const struct ft_grammar_frame *f,
                                      struct ft_grammar **out, char *err, size_t err_cap) {
    *out = NULL;
    struct gbuild b;
    gb_init(&b, err, err_cap);
    struct sc sc = {.b = &b, .path = "#"};
    cJSON *doc = NULL;
    if (len > FT_GRAMMAR_MAX_SOURCE) {
        gb_fail(&b, FT_ERANGE, "the schema is longer than %u bytes", FT_GRAMMAR_MAX_SOURCE);
        goto done;
    }
    if (f && (f->max_items < 0 || f->max_items > FT_GRAMMAR_MAX_REPEAT)) {
        gb_fail(&b, FT_EINVAL, "a frame repeats its item 0 to %d times (got %d)", FT_GRAMMAR_MAX_REPEAT,
                (int)f->max_items);
        goto done;
    }
    doc = cJSON_ParseWithLength(text, len);
    if (!doc) {
        gb_fail(&b, FT_EINVAL, "the schema is not valid JSON");
        goto done;
    }
    sc.doc = doc;
    gjson_init(&b, &sc.j);
    /* the root is a $ref to "#" so a schema may refer to itself */
    int32_t root = sc_ref(&sc, "#", 0);
    if (root >= 0 && f) {
        /* item ::= open schema close; rest ::= sep item; the whole:
         * prefix item rest{0, max_items - 1} suffix */
        int32_t item = gb_rule(&b, NULL);
        lit_opt(&b, item, f->open);
        gb_ref(&b, item, root);
        lit_opt(&b, item, f->close);
        int32_t framed = gb_rule(&b, NULL);
        lit_opt(&b, framed, f->prefix);
        gb_ref(&b, framed, item);
        if (f->max_items != 1) {
            int32_t rest = gb_rule(&b, NULL);
            lit_opt(&b, rest, f->sep);
            gb_ref(&b, rest, item);
            gb_ref(&b, framed, gb_repeat(&b, rest, 0, f->max_items > 0 ? f->max_items - 1 : -1));
        }
        lit_opt(&b, framed, f->suffix);
        root = framed;
    }
    if (root >= 0)
        gb_finish(&b, root, out);
done:;
    int rc = b.rc;
    if (rc == FT_EINVAL && b.err && (strstr(b.err, "left-recursive") || strstr(b.err, "matches no input")))
        snprintf(err, err_cap, "the schema refers to itself without consuming input (a $ref cycle)");
    for (int i = 0; i < sc.n_refs; i++)
        free(sc.refs[i].ref);
    free(sc.refs);
    cJSON_Delete(doc);
    gb_free(&b);
    return rc;
}
