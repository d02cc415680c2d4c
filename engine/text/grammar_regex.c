/* A regular-expression subset (JSON Schema "pattern") compiled to grammar
 * rules that match the *JSON text* of a string whose decoded value matches:
 * a '"' in the value is written \", a backslash \\, a newline \n.
 *
 * Supported: literals, '.', classes [...] with ranges and ^, the escapes
 * \d \D \w \W \s \S \n \r \t \f \v \uXXXX and escaped punctuation, groups
 * (...) and (?:...), alternation, quantifiers * + ? {m} {m,} {m,n} (a lazy
 * '?' after them changes nothing for matching), ^ at the start and $ at the
 * end. An unanchored side accepts any characters there, as JSON Schema
 * patterns search rather than match. Backreferences, lookaround and other
 * features are refused by name. */
#include "grammar_internal.h"

#include "ft/common.h"
#include "ft/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RE_MAX_RANGES 512

struct cpset {
    uint32_t r[2 * RE_MAX_RANGES];
    int n;
};

struct re {
    struct gbuild *b;
    const char *s, *p, *end;
    int depth;
    int32_t str_char; /* any JSON string character (for unanchored ends) */
    bool raw;         /* characters as themselves, not as JSON string text */
};

#define RE_FAIL(re, ...) gb_fail((re)->b, FT_EUNSUPPORTED, __VA_ARGS__)

static void cps_sort(struct cpset *c) {
    for (int i = 1; i < c->n; i++)
        for (int j = i; j > 0 && c->r[2 * j] < c->r[2 * (j - 1)]; j--) {
            uint32_t a = c->r[2 * j], b = c->r[2 * j + 1];
            c->r[2 * j] = c->r[2 * (j - 1)];
            c->r[2 * j + 1] = c->r[2 * (j - 1) + 1];
            c->r[2 * (j - 1)] = a;
            c->r[2 * (j - 1) + 1] = b;
        }
}

static int cps_add(struct re *re, struct cpset *c, uint32_t lo, uint32_t hi) {
    if (c->n == RE_MAX_RANGES)
        return RE_FAIL(re, "'pattern' has a class with more than %d ranges", RE_MAX_RANGES);
    c->r[2 * c->n] = lo;
    c->r[2 * c->n + 1] = hi;
    c->n++;
    return 0;
}

static void cps_negate(struct cpset *c) {
    cps_sort(c);
    struct cpset o;
    o.n = 0;
    uint32_t next = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->r[2 * i] > next && o.n < RE_MAX_RANGES) {
            o.r[2 * o.n] = next;
            o.r[2 * o.n + 1] = c->r[2 * i] - 1;
            o.n++;
        }
        if (c->r[2 * i + 1] + 1 > next)
            next = c->r[2 * i + 1] + 1;
    }
    if (next <= 0x10ffff && o.n < RE_MAX_RANGES) {
        o.r[2 * o.n] = next;
        o.r[2 * o.n + 1] = 0x10ffff;
        o.n++;
    }
    *c = o;
}

/* The complement within printable ASCII (0x20..0x7e). */
static void cps_ascii_negate(struct cpset *c) {
    cps_negate(c);
    struct cpset o;
    o.n = 0;
    for (int i = 0; i < c->n; i++) {
        uint32_t lo = FT_MAX(c->r[2 * i], 0x20u), hi = FT_MIN(c->r[2 * i + 1], 0x7eu);
        if (lo <= hi) {
            o.r[2 * o.n] = lo;
            o.r[2 * o.n + 1] = hi;
            o.n++;
        }
    }
    *c = o;
}

static bool cps_has(const struct cpset *c, uint32_t x) {
    for (int i = 0; i < c->n; i++)
        if (c->r[2 * i] <= x && x <= c->r[2 * i + 1])
            return true;
    return false;
}

/* A rule matching the JSON text of one character of the set. */
static int32_t cps_rule(struct re *re, const struct cpset *c) {
    struct gbuild *b = re->b;
    if (re->raw) {
        if (c->n == 0)
            return RE_FAIL(re, "'pattern' has a class that matches no character");
        int32_t r = gb_rule(b, NULL);
        gb_utf8_range(b, r, c->r, c->n);
        return b->rc ? -1 : r;
    }
    /* plain characters: the set minus controls, '"' and '\\' */
    struct cpset plain;
    plain.n = 0;
    for (int i = 0; i < c->n; i++) {
        uint32_t lo = c->r[2 * i], hi = c->r[2 * i + 1];
        static const uint32_t cut[][2] = {{0, 0x1f}, {0x22, 0x22}, {0x5c, 0x5c}};
        /* subtract the cuts from [lo, hi] (they are sorted and disjoint) */
        uint32_t cur = lo;
        for (size_t k = 0; k < FT_ARRAY_LEN(cut) && cur <= hi; k++) {
            if (cut[k][1] < cur)
                continue;
            if (cut[k][0] > hi)
                break;
            if (cut[k][0] > cur && plain.n < RE_MAX_RANGES) {
                plain.r[2 * plain.n] = cur;
                plain.r[2 * plain.n + 1] = cut[k][0] - 1;
                plain.n++;
            }
            cur = cut[k][1] + 1;
        }
        if (cur <= hi && plain.n < RE_MAX_RANGES) {
            plain.r[2 * plain.n] = cur;
            plain.r[2 * plain.n + 1] = hi;
            plain.n++;
        }
    }
    int32_t r = gb_rule(b, NULL);
    bool first = true;
    if (plain.n) {
        gb_utf8_range(b, r, plain.r, plain.n);
        first = false;
    }
    static const struct {
        uint32_t cp;
        const char *esc;
    } escs[] = {{'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"}, {'\r', "\\r"}, {'\t', "\\t"}, {'\b', "\\b"}, {'\f', "\\f"}};
    for (size_t k = 0; k < FT_ARRAY_LEN(escs); k++) {
        if (!cps_has(c, escs[k].cp))
            continue;
        if (!first)
            gb_alt(b, r);
        first = false;
        gb_lit(b, r, escs[k].esc, 2);
    }
    if (first)
        return RE_FAIL(re, "'pattern' has a class that matches no character that can be written");
    return r;
}

static int re_hex(struct re *re, int n, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        if (re->p >= re->end)
            return RE_FAIL(re, "'pattern' ends inside an escape");
        char c = *re->p++;
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0)
            return RE_FAIL(re, "'pattern' has a bad hexadecimal escape");
        v = v * 16 + (uint32_t)h;
    }
    *out = v;
    return 0;
}

static int re_utf8(struct re *re, uint32_t *cp) {
    unsigned char u = (unsigned char)*re->p;
    int n = u < 0x80 ? 1 : u >= 0xf0 ? 4 : u >= 0xe0 ? 3 : 2;
    if (re->p + n > re->end)
        return RE_FAIL(re, "'pattern' is not valid UTF-8");
    uint32_t v = n == 1 ? u : (uint32_t)(u & (0x3f >> (n - 1)));
    for (int i = 1; i < n; i++)
        v = (v << 6) | ((unsigned char)re->p[i] & 0x3f);
    re->p += n;
    *cp = v;
    return 0;
}

/* An escape after '\\': a class (\d ...) into *set, or one character. */
static int re_escape(struct re *re, struct cpset *set, bool *is_class, uint32_t *cp) {
    if (re->p >= re->end)
        return RE_FAIL(re, "'pattern' ends with '\\'");
    char e = *re->p++;
    *is_class = false;
    set->n = 0;
    switch (e) {
    /* \d \w \s are ASCII here, a subset of what validators (Python's re,
     * ECMA with /u) accept; their negations are the printable ASCII
     * outside them, as Unicode digits or letters would fail \D or \W there */
    case 'd': case 'D':
        *is_class = true;
        cps_add(re, set, '0', '9');
        if (e == 'D')
            cps_ascii_negate(set);
        return re->b->rc ? -1 : 0;
    case 'w': case 'W':
        *is_class = true;
        cps_add(re, set, '0', '9');
        cps_add(re, set, 'A', 'Z');
        cps_add(re, set, '_', '_');
        cps_add(re, set, 'a', 'z');
        if (e == 'W')
            cps_ascii_negate(set);
        return re->b->rc ? -1 : 0;
    case 's': case 'S':
        *is_class = true;
        cps_add(re, set, '\t', '\r');
        cps_add(re, set, ' ', ' ');
        if (e == 'S')
            cps_ascii_negate(set);
        return re->b->rc ? -1 : 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case 'u': return re_hex(re, 4, cp);
    case 'x': return re_hex(re, 2, cp);
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
            return RE_FAIL(re, "unsupported 'pattern' feature '\\%c'", e);
        *cp = (unsigned char)e;
        return 0;
    }
}

static int re_class(struct re *re, struct cpset *set) {
    set->n = 0;
    bool neg = false;
    if (re->p < re->end && *re->p == '^') {
        neg = true;
        re->p++;
    }
    bool first = true, has_escape_class = false;
    while (re->p < re->end && (*re->p != ']' || first)) {
        first = false;
        uint32_t lo = 0;
        if (*re->p == '\\') {
            re->p++;
            struct cpset sub;
            bool is_class;
            if (re_escape(re, &sub, &is_class, &lo))
                return -1;
            if (is_class) {
                has_escape_class = true;
                for (int i = 0; i < sub.n; i++)
                    if (cps_add(re, set, sub.r[2 * i], sub.r[2 * i + 1]))
                        return -1;
                continue;
            }
        } else if (*re->p == '[' && re->p + 1 < re->end && re->p[1] == ':') {
            return RE_FAIL(re, "unsupported 'pattern' feature: POSIX classes [:name:]");
        } else if (re_utf8(re, &lo)) {
            return -1;
        }
        uint32_t hi = lo;
        if (re->p + 1 < re->end && *re->p == '-' && re->p[1] != ']') {
            re->p++;
            if (*re->p == '\\') {
                re->p++;
                struct cpset sub;
                bool is_class;
                if (re_escape(re, &sub, &is_class, &hi))
                    return -1;
                if (is_class)
                    return RE_FAIL(re, "'pattern' has a range ending in a class escape");
            } else if (re_utf8(re, &hi)) {
                return -1;
            }
        }
        if (hi < lo)
            return RE_FAIL(re, "'pattern' has an empty range");
        if (cps_add(re, set, lo, hi))
            return -1;
    }
    if (re->p >= re->end)
        return RE_FAIL(re, "'pattern' has an unterminated class");
    re->p++;
    if (neg && has_escape_class)
        cps_ascii_negate(set); /* [^\d...]: validators exclude Unicode digits too */
    else if (neg)
        cps_negate(set);
    return 0;
}

static int re_alternatives(struct re *re, int32_t rule);

/* A sequence of quantified atoms appended to `rule`. */
static int re_sequence(struct re *re, int32_t rule) {
    struct gbuild *b = re->b;
    while (re->p < re->end && *re->p != '|' && *re->p != ')') {
        const char c = *re->p;
        int32_t atom;
        struct cpset set;
        if (c == '$') {
            if (re->p + 1 != re->end)
                return RE_FAIL(re, "unsupported 'pattern' feature: '$' before the end");
            return 0; /* handled by the caller */
        }
        if (c == '^')
            return RE_FAIL(re, "unsupported 'pattern' feature: '^' after the start");
        if (c == '*' || c == '+' || c == '?' || c == '{')
            return RE_FAIL(re, "'pattern' has a quantifier with nothing to repeat");
        if (c == '(') {
            re->p++;
            if (re->p < re->end && *re->p == '?') {
                if (re->p + 1 < re->end && re->p[1] == ':')
                    re->p += 2;
                else
                    return RE_FAIL(re, "unsupported 'pattern' feature: lookaround or named groups '(?'");
            }
            if (++re->depth > FT_GRAMMAR_MAX_DEPTH)
                return RE_FAIL(re, "'pattern' nests groups deeper than %d", FT_GRAMMAR_MAX_DEPTH);
            atom = gb_rule(b, NULL);
            if (atom < 0 || re_alternatives(re, atom))
                return -1;
            if (re->p >= re->end || *re->p != ')')
                return RE_FAIL(re, "'pattern' has an unclosed '('");
            re->p++;
            re->depth--;
        } else if (c == '[') {
            re->p++;
            if (re_class(re, &set) || (atom = cps_rule(re, &set)) < 0)
                return -1;
        } else if (c == '.') {
            re->p++;
            set.n = 0;
            cps_add(re, &set, '\n', '\n');
            cps_negate(&set);
            if ((atom = cps_rule(re, &set)) < 0)
                return -1;
        } else {
            uint32_t cp = 0;
            bool is_class = false;
            if (c == '\\') {
                re->p++;
                if (re_escape(re, &set, &is_class, &cp))
                    return -1;
            } else if (re_utf8(re, &cp)) {
                return -1;
            }
            if (!is_class) {
                set.n = 0;
                cps_add(re, &set, cp, cp);
            }
            if ((atom = cps_rule(re, &set)) < 0)
                return -1;
        }
        /* quantifier */
        int32_t min = -1, max = -1;
        if (re->p < re->end && (*re->p == '*' || *re->p == '+' || *re->p == '?')) {
            min = *re->p == '+' ? 1 : 0;
            max = *re->p == '?' ? 1 : -1;
            re->p++;
        } else if (re->p < re->end && *re->p == '{') {
            const char *q = re->p + 1;
            long lo = 0, hi;
            bool digits = false;
            while (q < re->end && *q >= '0' && *q <= '9' && lo <= FT_GRAMMAR_MAX_REPEAT) {
                lo = lo * 10 + (*q++ - '0');
                digits = true;
            }
            hi = lo;
            if (q < re->end && *q == ',') {
                q++;
                hi = -1;
                if (q < re->end && *q >= '0' && *q <= '9') {
                    hi = 0;
                    while (q < re->end && *q >= '0' && *q <= '9' && hi <= FT_GRAMMAR_MAX_REPEAT)
                        hi = hi * 10 + (*q++ - '0');
                }
            }
            if (!digits || q >= re->end || *q != '}')
                return RE_FAIL(re, "'pattern' has a malformed {m,n} quantifier");
            re->p = q + 1;
            min = (int32_t)lo;
            max = (int32_t)hi;
        }
        if (min >= 0) {
            if (re->p < re->end && (*re->p == '?' || *re->p == '+'))
                re->p++; /* lazy or possessive: the same set of matches */
            if ((atom = gb_repeat(b, atom, min, max)) < 0)
                return -1;
        }
        gb_ref(b, rule, atom);
        if (b->rc)
            return -1;
    }
    return 0;
}

static int re_alternatives(struct re *re, int32_t rule) {
    for (;;) {
        if (re_sequence(re, rule))
            return -1;
        if (re->p < re->end && *re->p == '|') {
            re->p++;
            gb_alt(re->b, rule);
            continue;
        }
        return 0;
    }
}

static int regex_compile(struct gbuild *b, int32_t rule, const char *s, size_t len, bool raw) {
    struct re re = {.b = b, .s = s, .p = s, .end = s + len, .raw = raw};
    struct cpset any;
    any.n = 0;
    cps_add(&re, &any, 0, 0x10ffff);
    int32_t any_char = cps_rule(&re, &any);
    bool anchored_start = len > 0 && s[0] == '^';
    bool anchored_end = len > 0 && s[len - 1] == '$' && (len < 2 || s[len - 2] != '\\');
    if (anchored_start)
        re.p++;
    if (!anchored_start && !raw)
        gb_ref(b, rule, gb_repeat(b, any_char, 0, -1));
    int32_t body = gb_rule(b, NULL);
    if (body < 0 || re_alternatives(&re, body))
        return -1;
    if (anchored_end && re.p == re.end - 1)
        re.p++;
    if (re.p != re.end)
        return RE_FAIL(&re, "'pattern' has an unmatched ')' at byte %zu", (size_t)(re.p - s));
    gb_ref(b, rule, body);
    if (!anchored_end && !raw)
        gb_ref(b, rule, gb_repeat(b, any_char, 0, -1));
    return b->rc ? -1 : 0;
}

int ft_grammar_regex(struct gbuild *b, int32_t rule, const char *s, size_t len) {
    return regex_compile(b, rule, s, len, false);
}

int ft_grammar_from_regex(const char *s, size_t len, struct ft_grammar **out, char *err, size_t err_cap) {
    *out = NULL;
    struct gbuild b;
    gb_init(&b, err, err_cap);
    if (len > FT_GRAMMAR_MAX_SOURCE)
        gb_fail(&b, FT_ERANGE, "the regular expression is longer than %u bytes", FT_GRAMMAR_MAX_SOURCE);
    else if (!ft_utf8_valid(s, len))
        gb_fail(&b, FT_EINVAL, "the regular expression is not valid UTF-8");
    int32_t root = b.rc ? -1 : gb_rule(&b, NULL);
    if (root >= 0 && !regex_compile(&b, root, s, len, true))
        gb_finish(&b, root, out);
    int rc = b.rc;
    gb_free(&b);
    /* The messages name JSON Schema's keyword; here it is the whole regex. */
    char *k;
    while (rc && err && (k = strstr(err, "'pattern'")))
        memcpy(k, "the regex", 9);
    return rc;
}
