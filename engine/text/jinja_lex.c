/* Lexer of the Jinja-subset interpreter: source text -> tokens.
 *
 * It reproduces Jinja2's lexer (jinja2/lexer.py) where templates can see it:
 *  - newlines are normalized (\r\n and \r become \n) and, unless
 *    keep_trailing_newline, one trailing newline is dropped;
 *  - `{{-`, `{%-`, `{#-` strip all whitespace before the tag; `-}}`, `-%}`,
 *    `-#}` strip all whitespace after it;
 *  - trim_blocks drops the first newline after `%}` or `#}` (not `}}`, not
 *    after `+%}`);
 *  - lstrip_blocks drops spaces and tabs between the start of a line and
 *    `{%` / `{#` when nothing else precedes the tag on that line (not
 *    `{%+`);
 *  - inside a tag, `}}` / `%}` close it only when brackets are balanced;
 *  - `{% raw %}...{% endraw %}` is text.
 * Whitespace means ASCII whitespace here (Python also strips Unicode spaces
 * next to `-` tags; templates do not rely on that).
 */
#include "jinja.h"

#include "ft/common.h"

#include <stdlib.h>
#include <string.h>

#define MAX_BRACKETS FTJ_MAX_PARSE_DEPTH

struct lexer {
    struct ftj_template *t;
    const struct ftj_lex_opts *o;
    const char *s;
    size_t n, pos;
    struct ftj_token *toks;
    size_t ntok, cap;
    bool line_starting;
    char brackets[MAX_BRACKETS];
    int nbrackets;
};

void ftj_position(const struct ftj_template *t, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    if (off > t->src_len)
        off = t->src_len;
    for (size_t i = 0; i < off; i++) {
        if (t->src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)t->src[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static int lex_error(struct lexer *L, size_t off, int rc, const char *what) {
    int line, col;
    ftj_position(L->t, off, &line, &col);
    FT_LOG_E("chat template: line %d, column %d: %s", line, col, what);
    return rc;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

static bool at(const struct lexer *L, size_t p, const char *lit) {
    size_t k = strlen(lit);
    return p <= L->n && L->n - p >= k && memcmp(L->s + p, lit, k) == 0;
}

static struct ftj_token *push(struct lexer *L, enum ftj_tok type, size_t off) {
    if (L->ntok == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        struct ftj_token *p = realloc(L->toks, cap * sizeof(*p));
        if (!p)
            return NULL;
        L->toks = p;
        L->cap = cap;
    }
    struct ftj_token *tk = &L->toks[L->ntok++];
    memset(tk, 0, sizeof(*tk));
    tk->type = (uint8_t)type;
    tk->off = off;
    return tk;
}

static int push_text(struct lexer *L, size_t off, const char *p, size_t n) {
    if (n == 0)
        return 0;
    struct ftj_token *tk = push(L, FTJ_TK_TEXT, off);
    if (!tk)
        return FT_ENOMEM;
    tk->p = p;
    tk->n = n;
    return 0;
}

/* Whitespace control before a tag at `tag` whose text starts at `start`;
 * returns the new end of the text. */
static size_t strip_before(struct lexer *L, size_t start, size_t tag, char kind, char sign) {
    size_t end = tag;
    if (sign == '-') {
        while (end > start && is_ws(L->s[end - 1]))
            end--;
    } else if (sign != '+' && kind != '{' && L->o->lstrip_blocks) {
        size_t l = end;
        while (l > start && L->s[l - 1] != '\n')
            l--;
        if (l > start || L->line_starting) {
            size_t i = l;
            while (i < end && (L->s[i] == ' ' || L->s[i] == '\t' || L->s[i] == '\r' || L->s[i] == '\f' ||
                               L->s[i] == '\v'))
                i++;
            if (i == end && end > l)
                end = l;
        }
    }
    return end;
}

/* Whitespace control after a tag ends at `p` (just past `}}`, `%}` or `#}`). */
static size_t strip_after(struct lexer *L, size_t p, char sign, bool block_like) {
    size_t q = p;
    if (sign == '-') {
        while (q < L->n && is_ws(L->s[q]))
            q++;
    } else if (sign != '+' && block_like && L->o->trim_blocks && q < L->n && L->s[q] == '\n') {
        q++;
    }
    L->line_starting = q > 0 && L->s[q - 1] == '\n' && q > p;
    return q;
}

/* Python's unicode-escape decoding of a string literal's body. */
static int unescape(struct lexer *L, size_t off, const char *p, size_t n, struct ftj_token *tk) {
    char *out = ftj_alloc(&L->t->arena, n + 1);
    if (!out)
        return FT_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c != '\\' || i + 1 == n) {
            out[k++] = c;
            continue;
        }
        char e = p[++i];
        switch (e) {
        case '\n': break; /* line continuation */
        case '\\': out[k++] = '\\'; break;
        case '\'': out[k++] = '\''; break;
        case '"': out[k++] = '"'; break;
        case 'a': out[k++] = '\a'; break;
        case 'b': out[k++] = '\b'; break;
        case 'f': out[k++] = '\f'; break;
        case 'n': out[k++] = '\n'; break;
        case 'r': out[k++] = '\r'; break;
        case 't': out[k++] = '\t'; break;
        case 'v': out[k++] = '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int d = 0; d < digits; d++) {
                char h = i + 1 + (size_t)d < n ? p[i + 1 + (size_t)d] : 0;
                int v = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
                if (v < 0)
                    return lex_error(L, off, FT_EFORMAT, "truncated \\x, \\u or \\U escape in a string literal");
                cp = cp * 16 + (uint32_t)v;
            }
            i += (size_t)digits;
            if (cp > 0x10FFFF)
                return lex_error(L, off, FT_EFORMAT, "\\U escape out of range in a string literal");
            if (cp >= 0xD800 && cp <= 0xDFFF)
                cp = 0xFFFD; /* a lone surrogate cannot be UTF-8 */
            if (cp < 0x80) {
                out[k++] = (char)cp;
            } else if (cp < 0x800) {
                out[k++] = (char)(0xC0 | (cp >> 6));
                out[k++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                out[k++] = (char)(0xE0 | (cp >> 12));
                out[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[k++] = (char)(0x80 | (cp & 0x3F));
            } else {
                out[k++] = (char)(0xF0 | (cp >> 18));
                out[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                out[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[k++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        case 'N': return lex_error(L, off, FT_EUNSUPPORTED, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                uint32_t v = (uint32_t)(e - '0');
                for (int d = 0; d < 2 && i + 1 < n && p[i + 1] >= '0' && p[i + 1] <= '7'; d++)
                    v = v * 8 + (uint32_t)(p[++i] - '0');
                if (v < 0x80) {
                    out[k++] = (char)v;
                } else {
                    out[k++] = (char)(0xC0 | (v >> 6));
                    out[k++] = (char)(0x80 | (v & 0x3F));
                }
            } else {
                out[k++] = '\\'; /* unknown escapes stay as written */
                out[k++] = e;
            }
        }
    }
    out[k] = '\0';
    tk->p = out;
    tk->n = k;
    return 0;
}

static int lex_number(struct lexer *L, struct ftj_token *tk) {
    size_t p = L->pos, start = p;
    /* Jinja: [digits with _][.digits][e[+-]digits] ; a float needs . or e */
    while (p < L->n && (is_digit(L->s[p]) || (L->s[p] == '_' && p + 1 < L->n && is_digit(L->s[p + 1]))))
        p++;
    bool is_float = false;
    if (p + 1 < L->n && L->s[p] == '.' && is_digit(L->s[p + 1])) {
        is_float = true;
        p++;
        while (p < L->n && (is_digit(L->s[p]) || (L->s[p] == '_' && p + 1 < L->n && is_digit(L->s[p + 1]))))
            p++;
    }
    if (p < L->n && (L->s[p] == 'e' || L->s[p] == 'E')) {
        size_t q = p + 1;
        if (q < L->n && (L->s[q] == '+' || L->s[q] == '-'))
            q++;
        if (q < L->n && is_digit(L->s[q])) {
            is_float = true;
            p = q;
            while (p < L->n && (is_digit(L->s[p]) || (L->s[p] == '_' && p + 1 < L->n && is_digit(L->s[p + 1]))))
                p++;
        }
    }
    char buf[128];
    size_t k = 0;
    for (size_t i = start; i < p; i++) {
        if (L->s[i] == '_')
            continue;
        if (k + 1 >= sizeof(buf))
            return lex_error(L, start, FT_EUNSUPPORTED, "numeric literal too long");
        buf[k++] = L->s[i];
    }
    buf[k] = '\0';
    if (is_float) {
        tk->type = FTJ_TK_FLOAT;
        tk->f = strtod(buf, NULL);
    } else {
        tk->type = FTJ_TK_INT;
        int64_t v = 0;
        for (size_t i = 0; i < k; i++) {
            if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, buf[i] - '0', &v))
                return lex_error(L, start, FT_EUNSUPPORTED, "integer literal does not fit in 64 bits");
        }
        tk->i = v;
    }
    L->pos = p;
    return 0;
}

static const struct {
    const char *s;
    enum ftj_op op;
} ops[] = {
    {"//", FTJ_OP_FLOORDIV}, {"**", FTJ_OP_POW}, {"==", FTJ_OP_EQ},      {"!=", FTJ_OP_NE},
    {"<=", FTJ_OP_LE},       {">=", FTJ_OP_GE},  {"+", FTJ_OP_ADD},      {"-", FTJ_OP_SUB},
    {"*", FTJ_OP_MUL},       {"/", FTJ_OP_DIV},  {"%", FTJ_OP_MOD},      {"~", FTJ_OP_TILDE},
    {"<", FTJ_OP_LT},        {">", FTJ_OP_GT},   {"=", FTJ_OP_ASSIGN},   {".", FTJ_OP_DOT},
    {",", FTJ_OP_COMMA},     {":", FTJ_OP_COLON}, {"|", FTJ_OP_PIPE},    {"(", FTJ_OP_LPAREN},
    {")", FTJ_OP_RPAREN},    {"[", FTJ_OP_LBRACKET}, {"]", FTJ_OP_RBRACKET}, {"{", FTJ_OP_LBRACE},
    {"}", FTJ_OP_RBRACE},
};

/* Tokens inside {{ }} or {% %} up to and including the closing tag. */
static int lex_tag(struct lexer *L, bool is_block, size_t tag_off) {
    for (;;) {
        while (L->pos < L->n && is_ws(L->s[L->pos]))
            L->pos++;
        if (L->pos >= L->n)
            return lex_error(L, tag_off, FT_EFORMAT, is_block ? "unclosed '{%'" : "unclosed '{{'");
        size_t p = L->pos;
        if (L->nbrackets == 0) {
            char sign = 0;
            size_t q = p;
            if (L->s[q] == '-' || (is_block && L->s[q] == '+')) {
                sign = L->s[q];
                q++;
            }
            if (at(L, q, is_block ? "%}" : "}}")) {
                if (!push(L, is_block ? FTJ_TK_BLOCK_END : FTJ_TK_VAR_END, p))
                    return FT_ENOMEM;
                L->pos = strip_after(L, q + 2, sign, is_block);
                return 0;
            }
        }
        struct ftj_token *tk = push(L, FTJ_TK_OP, p);
        if (!tk)
            return FT_ENOMEM;
        char c = L->s[p];
        if (is_digit(c)) {
            int rc = lex_number(L, tk);
            if (rc)
                return rc;
            continue;
        }
        if (is_name_start(c)) {
            size_t q = p;
            while (q < L->n && is_name_char(L->s[q]))
                q++;
            tk->type = FTJ_TK_NAME;
            tk->p = L->s + p;
            tk->n = q - p;
            L->pos = q;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t q = p + 1;
            while (q < L->n && L->s[q] != c) {
                if (L->s[q] == '\\' && q + 1 < L->n)
                    q++;
                q++;
            }
            if (q >= L->n)
                return lex_error(L, p, FT_EFORMAT, "unterminated string literal");
            tk->type = FTJ_TK_STRING;
            int rc = unescape(L, p, L->s + p + 1, q - p - 1, tk);
            if (rc)
                return rc;
            L->pos = q + 1;
            continue;
        }
        size_t i;
        for (i = 0; i < FT_ARRAY_LEN(ops); i++)
            if (at(L, p, ops[i].s))
                break;
        if (i == FT_ARRAY_LEN(ops))
            return lex_error(L, p, FT_EFORMAT, "unexpected character in a tag");
        tk->op = (uint8_t)ops[i].op;
        L->pos = p + strlen(ops[i].s);
        char close = 0;
        switch (ops[i].op) {
        case FTJ_OP_LPAREN: close = ')'; break;
        case FTJ_OP_LBRACKET: close = ']'; break;
        case FTJ_OP_LBRACE: close = '}'; break;
        default: break;
        }
        if (close) {
            if (L->nbrackets == MAX_BRACKETS)
                return lex_error(L, p, FT_ERANGE, "brackets nested too deeply");
            L->brackets[L->nbrackets++] = close;
        } else if (c == ')' || c == ']' || c == '}') {
            if (L->nbrackets == 0 || L->brackets[L->nbrackets - 1] != c)
                return lex_error(L, p, FT_EFORMAT, "unbalanced bracket");
            L->nbrackets--;
        }
    }
}

/* `{%[-+]? raw [-]?%}` at p? On success *body is where the raw text starts. */
static bool match_raw_begin(struct lexer *L, size_t p, size_t *body) {
    size_t q = p + 2;
    if (q < L->n && (L->s[q] == '-' || L->s[q] == '+'))
        q++;
    while (q < L->n && is_ws(L->s[q]))
        q++;
    if (!at(L, q, "raw") || (q + 3 < L->n && is_name_char(L->s[q + 3])))
        return false;
    q += 3;
    while (q < L->n && is_ws(L->s[q]))
        q++;
    if (at(L, q, "-%}")) {
        q += 3;
        while (q < L->n && is_ws(L->s[q]))
            q++;
    } else if (at(L, q, "%}")) {
        q += 2;
    } else {
        return false;
    }
    *body = q;
    return true;
}

static int lex_raw(struct lexer *L, size_t body) {
    for (size_t p = body; p + 1 < L->n; p++) {
        if (L->s[p] != '{' || L->s[p + 1] != '%')
            continue;
        size_t q = p + 2;
        char sign = 0;
        if (q < L->n && (L->s[q] == '-' || L->s[q] == '+'))
            sign = L->s[q++];
        while (q < L->n && is_ws(L->s[q]))
            q++;
        if (!at(L, q, "endraw"))
            continue;
        q += 6;
        while (q < L->n && is_ws(L->s[q]))
            q++;
        char esign = 0;
        if (q < L->n && (L->s[q] == '-' || L->s[q] == '+'))
            esign = L->s[q++];
        if (!at(L, q, "%}"))
            continue;
        L->line_starting = false;
        size_t end = strip_before(L, body, p, '%', sign);
        int rc = push_text(L, body, L->s + body, end - body);
        if (rc)
            return rc;
        L->pos = strip_after(L, q + 2, esign, true);
        return 0;
    }
    return lex_error(L, body, FT_EFORMAT, "missing {% endraw %}");
}

int ftj_lex(struct ftj_template *t, const struct ftj_lex_opts *o, struct ftj_token **toks, size_t *ntoks) {
    struct lexer L = {.t = t, .o = o, .s = t->src, .n = t->src_len, .line_starting = true};
    int rc = 0;
    while (L.pos < L.n && !rc) {
        size_t start = L.pos, tag = start;
        while (tag + 1 < L.n && !(L.s[tag] == '{' && (L.s[tag + 1] == '{' || L.s[tag + 1] == '%' || L.s[tag + 1] == '#')))
            tag++;
        if (tag + 1 >= L.n) {
            rc = push_text(&L, start, L.s + start, L.n - start);
            L.pos = L.n;
            break;
        }
        char kind = L.s[tag + 1];
        char sign = tag + 2 < L.n && (L.s[tag + 2] == '-' || L.s[tag + 2] == '+') ? L.s[tag + 2] : 0;
        size_t end = strip_before(&L, start, tag, kind, sign);
        rc = push_text(&L, start, L.s + start, end - start);
        if (rc)
            break;
        size_t body;
        if (kind == '%' && match_raw_begin(&L, tag, &body)) {
            rc = lex_raw(&L, body);
            continue;
        }
        L.pos = tag + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t q = L.pos;
            char esign = 0;
            for (; q + 1 < L.n; q++) {
                if ((L.s[q] == '-' || L.s[q] == '+') && q + 2 < L.n && L.s[q + 1] == '#' && L.s[q + 2] == '}') {
                    esign = L.s[q];
                    q++;
                    break;
                }
                if (L.s[q] == '#' && L.s[q + 1] == '}')
                    break;
            }
            if (q + 1 >= L.n) {
                rc = lex_error(&L, tag, FT_EFORMAT, "unclosed comment '{#'");
                break;
            }
            L.pos = strip_after(&L, q + 2, esign, true);
            continue;
        }
        bool is_block = kind == '%';
        if (!push(&L, is_block ? FTJ_TK_BLOCK_BEGIN : FTJ_TK_VAR_BEGIN, tag)) {
            rc = FT_ENOMEM;
            break;
        }
        L.nbrackets = 0;
        rc = lex_tag(&L, is_block, tag);
    }
    if (!rc && !push(&L, FTJ_TK_EOF, L.n))
        rc = FT_ENOMEM;
    if (rc) {
        free(L.toks);
        return rc;
    }
    *toks = L.toks;
    *ntoks = L.ntok;
    return 0;
}
