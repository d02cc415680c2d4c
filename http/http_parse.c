/* HTTP/1.1 request heads (http/http_parse.h). RFC 9112 grammar, strictly:
 * CRLF line ends only, single spaces in the request line, token field
 * names, no obsolete line folding. */
#include "http_parse.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    enum ft_http_method method;
} k_methods[] = {
    {"GET", FT_HTTP_GET},         {"HEAD", FT_HTTP_HEAD},       {"POST", FT_HTTP_POST},
    {"PUT", FT_HTTP_PUT},         {"DELETE", FT_HTTP_DELETE},   {"OPTIONS", FT_HTTP_OPTIONS},
    {"PATCH", FT_HTTP_PATCH},     {"TRACE", FT_HTTP_TRACE},     {"CONNECT", FT_HTTP_CONNECT},
};

void ft_http_parser_init(struct ft_http_parser *p, const struct ft_http_limits *limits) {
    memset(p, 0, sizeof(*p));
    p->limits = *limits;
    if (p->limits.max_headers > FT_HTTP_MAX_HEADERS || p->limits.max_headers < 0)
        p->limits.max_headers = FT_HTTP_MAX_HEADERS;
}

void ft_http_parser_reset(struct ft_http_parser *p) {
    p->scanned = 0;
    p->line_checked = false;
}

void ft_http_request_free(struct ft_http_request *req) {
    if (!req)
        return;
    free(req->storage);
    memset(req, 0, sizeof(*req));
}

const char *ft_http_field(const struct ft_http_request *req, const char *name) {
    for (int i = 0; i < req->n_fields; i++)
        if (!strcasecmp(req->fields[i].name, name))
            return req->fields[i].value;
    return NULL;
}

static enum ft_http_status refuse(struct ft_http_error *err, int status, const char *code, const char *fmt, ...) {
    err->status = status;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return FT_HTTP_REFUSED;
}

#define BAD(...) refuse(err, 400, "bad_request", __VA_ARGS__)

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-value bytes: visible ASCII, space, tab and obs-text; no CR, LF, NUL or other controls. */
static bool is_value_char(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

struct line_parts {
    const char *method, *target;
    size_t method_len, target_len;
    int minor;
    enum ft_http_method m;
};

/* The request line without its CRLF: METHOD SP request-target SP HTTP/1.x */
static enum ft_http_status check_request_line(const char *s, size_t n, struct line_parts *out,
                                              struct ft_http_error *err) {
    if (n == 0)
        return BAD("the request line is empty");
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)s[i]))
        i++;
    if (i == 0 || i == n || s[i] != ' ')
        return BAD("malformed request line: expected 'METHOD /path HTTP/1.1'");
    out->method = s;
    out->method_len = i;
    const size_t t0 = ++i;
    while (i < n && (unsigned char)s[i] > 0x20 && (unsigned char)s[i] < 0x7f)
        i++;
    if (i == t0 || i == n || s[i] != ' ')
        return BAD("malformed request line: expected 'METHOD /path HTTP/1.1'");
    out->target = s + t0;
    out->target_len = i - t0;
    const char *v = s + i + 1;
    const size_t vn = n - i - 1;
    if (vn != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' ||
        v[7] > '9')
        return BAD("malformed request line: the version must look like HTTP/1.1");
    if (v[5] != '1' || (v[7] != '0' && v[7] != '1'))
        return refuse(err, 505, "http_version_not_supported", "HTTP/%c.%c is not supported; use HTTP/1.1", v[5],
                      v[7]);
    out->minor = v[7] - '0';
    bool known = false;
    for (size_t k = 0; k < sizeof(k_methods) / sizeof(k_methods[0]); k++) {
        if (strlen(k_methods[k].name) == out->method_len && !memcmp(k_methods[k].name, s, out->method_len)) {
            out->m = k_methods[k].method;
            known = true;
        }
    }
    if (!known)
        return refuse(err, 405, "method_not_allowed", "method %.*s is not allowed",
                      (int)(out->method_len < 32 ? out->method_len : 32), s);
    if (out->target[0] != '/' && !(out->target_len > 7 && !strncasecmp(out->target, "http://", 7)) &&
        !(out->target_len > 8 && !strncasecmp(out->target, "https://", 8)))
        return BAD("the request target must be a path starting with '/'");
    return FT_HTTP_NEED_MORE;
}

/* The path of an origin-form or absolute-form target, up to '?'. */
static void target_path(const char *t, size_t n, const char **path, size_t *path_len) {
    if (t[0] != '/') { /* absolute-form: skip scheme://authority */
        const char *p = memchr(t, ':', n);
        size_t off = (size_t)(p - t) + 3;
        const char *slash = off < n ? memchr(t + off, '/', n - off) : NULL;
        if (!slash) {
            *path = "/";
            *path_len = 1;
            return;
        }
        n -= (size_t)(slash - t);
        t = slash;
    }
    const char *q = memchr(t, '?', n);
    *path = t;
    *path_len = q ? (size_t)(q - t) : n;
}

/* Does a comma-separated header value list `token` (case-insensitive)? */
static bool list_has(const char *v, const char *token) {
    const size_t tn = strlen(token);
    while (*v) {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        const char *e = v;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > v && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - v) == tn && !strncasecmp(v, token, tn))
            return true;
        v = e;
    }
    return false;
}

/* Fields of the copied head: s[0..n) is everything after the request
 * line's CRLF, ending with the blank line's CRLF. Splits it in place. */
static enum ft_http_status parse_fields(struct ft_http_parser *p, char *s, size_t n, struct ft_http_request *req,
                                        struct ft_http_error *err) {
    size_t i = 0;
    bool have_length = false;
    while (i < n) {
        char *line = s + i;
        char *lf = memchr(line, '\n', n - i);
        if (!lf || lf == line || lf[-1] != '\r')
            return BAD("header lines must end with CRLF");
        const size_t len = (size_t)(lf - 1 - line);
        i += len + 2;
        if (len == 0)
            break; /* the blank line */
        if (line[0] == ' ' || line[0] == '\t')
            return BAD("obsolete header line folding is not accepted");
        size_t k = 0;
        while (k < len && is_tchar((unsigned char)line[k]))
            k++;
        if (k == 0 || k == len || line[k] != ':')
            return BAD("malformed header line (expected 'Name: value')");
        size_t v0 = k + 1, v1 = len;
        while (v0 < v1 && (line[v0] == ' ' || line[v0] == '\t'))
            v0++;
        while (v1 > v0 && (line[v1 - 1] == ' ' || line[v1 - 1] == '\t'))
            v1--;
        for (size_t j = v0; j < v1; j++)
            if (!is_value_char((unsigned char)line[j]))
                return BAD("a header value contains a control byte");
        if (req->n_fields >= p->limits.max_headers)
            return refuse(err, 431, "headers_too_large", "the request has more than %d header fields",
                          p->limits.max_headers);
        line[k] = '\0';
        line[v1] = '\0';
        req->fields[req->n_fields++] = (struct ft_http_field){line, line + v0};
        const char *name = line, *value = line + v0;
        if (!strcasecmp(name, "Content-Length")) {
            if (have_length)
                return BAD("the request has more than one Content-Length");
            have_length = true;
            if (!*value)
                return BAD("Content-Length is empty");
            size_t cl = 0;
            for (const char *c = value; *c; c++) {
                if (*c < '0' || *c > '9')
                    return BAD("Content-Length must be a decimal number");
                const size_t d = (size_t)(*c - '0');
                if (cl > (SIZE_MAX - d) / 10)
                    return refuse(err, 413, "request_too_large",
                                  "Content-Length is too large; the limit is %zu bytes (--max-body-size)",
                                  p->limits.max_body);
                cl = cl * 10 + d;
            }
            req->content_length = cl;
        } else if (!strcasecmp(name, "Transfer-Encoding")) {
            return refuse(err, 501, "not_implemented",
                          "Transfer-Encoding '%.60s' is not supported: send the body with Content-Length", value);
        } else if (!strcasecmp(name, "Connection")) {
            if (list_has(value, "close"))
                req->keep_alive = false;
            else if (list_has(value, "keep-alive"))
                req->keep_alive = true;
        } else if (!strcasecmp(name, "Expect")) {
            if (strcasecmp(value, "100-continue") != 0)
                return refuse(err, 417, "expectation_failed", "only 'Expect: 100-continue' is supported");
            req->expect_continue = true;
        }
    }
    if (req->content_length > p->limits.max_body)
        return refuse(err, 413, "request_too_large",
                      "the request body has %zu bytes; the limit is %zu (--max-body-size)", req->content_length,
                      p->limits.max_body);
    return FT_HTTP_HEAD_DONE;
}

/* Look at buf[from..len) for the end of the head: returns the index just
 * past "\r\n\r\n", 0 while absent, or SIZE_MAX at a bare LF (refused at
 * once rather than when a blank line finally comes). */
static size_t find_head_end(const char *buf, size_t from, size_t len) {
    for (size_t i = from; i < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (i == 0 || buf[i - 1] != '\r')
            return SIZE_MAX;
        if (i >= 3 && buf[i - 2] == '\n' && buf[i - 3] == '\r')
            return i + 1;
    }
    return 0;
}

enum ft_http_status ft_http_parse(struct ft_http_parser *p, const char *buf, size_t len, struct ft_http_request *req,
                                  size_t *head_len, struct ft_http_error *err) {
    memset(req, 0, sizeof(*req));
    memset(err, 0, sizeof(*err));
    *head_len = 0;
    const size_t limit = len < p->limits.max_head ? len : p->limits.max_head;
    struct line_parts lp;
    if (!p->line_checked) {
        const char *lf = p->scanned < limit ? memchr(buf + p->scanned, '\n', limit - p->scanned) : NULL;
        if (!lf) {
            p->scanned = limit;
            if (len > p->limits.max_head)
                return refuse(err, 431, "headers_too_large",
                              "the request line is longer than the %zu-byte limit for the request head",
                              p->limits.max_head);
            return FT_HTTP_NEED_MORE;
        }
        if (lf == buf || lf[-1] != '\r')
            return BAD("the request line must end with CRLF");
        const size_t n = (size_t)(lf - 1 - buf);
        if (memchr(buf, '\r', n))
            return BAD("malformed request line: stray CR");
        if (check_request_line(buf, n, &lp, err) == FT_HTTP_REFUSED)
            return FT_HTTP_REFUSED;
        p->line_checked = true;
        p->scanned = n + 1; /* the head may end right after the request line */
    }
    const size_t end = find_head_end(buf, p->scanned, limit);
    if (end == SIZE_MAX)
        return BAD("header lines must end with CRLF");
    if (!end) {
        p->scanned = limit;
        if (len >= p->limits.max_head)
            return refuse(err, 431, "headers_too_large", "the request head is larger than %zu bytes",
                          p->limits.max_head);
        return FT_HTTP_NEED_MORE;
    }
    /* The whole head: parse a private copy. */
    const char *lf = memchr(buf, '\n', end);
    const size_t line_len = (size_t)(lf - 1 - buf);
    check_request_line(buf, line_len, &lp, err); /* valid: checked above */
    const char *path;
    size_t path_len;
    target_path(lp.target, lp.target_len, &path, &path_len);
    char *st = malloc(end + 1 + lp.target_len + 1 + path_len + 1);
    if (!st)
        return refuse(err, 503, "server_busy", "out of memory for the request head");
    memcpy(st, buf, end);
    st[end] = '\0';
    char *target = st + end + 1;
    memcpy(target, lp.target, lp.target_len);
    target[lp.target_len] = '\0';
    char *pth = target + lp.target_len + 1;
    memcpy(pth, path, path_len);
    pth[path_len] = '\0';
    req->storage = st;
    req->method = lp.m;
    for (size_t k = 0; k < sizeof(k_methods) / sizeof(k_methods[0]); k++)
        if (k_methods[k].method == lp.m)
            req->method_name = k_methods[k].name;
    req->target = target;
    req->path = pth;
    req->minor = lp.minor;
    req->keep_alive = lp.minor == 1;
    if (parse_fields(p, st + line_len + 2, end - line_len - 2, req, err) != FT_HTTP_HEAD_DONE) {
        ft_http_request_free(req);
        return FT_HTTP_REFUSED;
    }
    *head_len = end;
    return FT_HTTP_HEAD_DONE;
}
