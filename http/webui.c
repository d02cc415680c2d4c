/* The web UI's routes (http/webui.h): which path serves which embedded
 * file, with which headers. The pages themselves are in http/webui/ (two
 * .html files, app.css and app.js); they talk to the server only through
 * the API. */
#include "webui.h"

#include "webui_assets.h"

#include "ft/common.h"

#include <string.h>

struct page {
    const char *path;         /* URL path */
    const char *file;         /* in http/webui/ */
    const char *content_type;
};

static const struct page k_pages[] = {
    {"/", "index.html", "text/html; charset=utf-8"},
    {"/dashboard", "dashboard.html", "text/html; charset=utf-8"},
    {"/webui/app.css", "app.css", "text/css; charset=utf-8"},
    {"/webui/app.js", "app.js", "text/javascript; charset=utf-8"},
};

/* Scripts and styles from this origin only and never inline (the pages
 * build every element with textContent, and a policy without
 * 'unsafe-inline' stops any injected markup from running); fetches only to
 * this origin; the favicon is the empty data: URL; no framing. */
#define CSP                                                                                                     \
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "      \
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

static const char k_405_body[] = "{\"error\":{\"message\":\"the web UI's pages answer GET and HEAD only\","
                                 "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"method_not_allowed\"}}";

static const struct page *find_page(const char *path) {
    for (size_t i = 0; i < FT_ARRAY_LEN(k_pages); i++)
        if (!strcmp(path, k_pages[i].path))
            return &k_pages[i];
    return NULL;
}

static const struct ft_webui_asset *find_asset(const char *file) {
    for (int i = 0; i < ft_webui_n_assets; i++)
        if (!strcmp(file, ft_webui_assets[i].name))
            return &ft_webui_assets[i];
    return NULL;
}

bool ft_webui_handles(const char *path) {
    const struct page *p = path ? find_page(path) : NULL;
    return p && find_asset(p->file);
}

/* If-None-Match (RFC 9110 §13.1.2): "*" or a list of entity tags, each
 * "opaque" or W/"opaque", compared weakly. etag is ours, quoted. Bounded
 * by the header: every turn moves p forward or stops. */
static bool etag_listed(const char *h, const char *etag) {
    const size_t elen = strlen(etag);
    for (const char *p = h; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (!*p)
            break;
        if (*p == '*')
            return true;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        if (*p != '"')
            return false; /* malformed: no match, the full answer */
        const char *close = strchr(p + 1, '"');
        if (!close)
            return false;
        const size_t len = (size_t)(close - p) + 1;
        if (len == elen && !memcmp(p, etag, len))
            return true;
        p = close + 1;
    }
    return false;
}

static void add_header(struct ft_webui_reply *out, const char *name, const char *value) {
    if (out->n_headers < FT_WEBUI_MAX_HEADERS)
        out->headers[out->n_headers++] = (struct ft_http_header_out){name, value};
}

void ft_webui_respond(const struct ft_http_request *req, struct ft_webui_reply *out) {
    memset(out, 0, sizeof(*out));
    const struct page *p = find_page(req->path);
    const struct ft_webui_asset *a = p ? find_asset(p->file) : NULL;
    /* (!a is not reached: callers ask ft_webui_handles() first.) */
    if (!a || (req->method != FT_HTTP_GET && req->method != FT_HTTP_HEAD)) {
        out->status = 405;
        out->content_type = "application/json";
        out->body = k_405_body;
        out->len = sizeof(k_405_body) - 1;
        add_header(out, "Allow", "GET, HEAD");
        return;
    }
    /* The same validators and caching rules on 200 and 304 (RFC 9110 §15.4.5). */
    add_header(out, "ETag", a->etag);
    add_header(out, "Cache-Control", "no-cache");
    const char *inm = ft_http_field(req, "If-None-Match");
    if (inm && etag_listed(inm, a->etag)) {
        out->status = 304;
        return;
    }
    out->status = 200;
    out->content_type = p->content_type;
    out->body = (const char *)a->data;
    out->len = a->len;
    add_header(out, "Content-Security-Policy", CSP);
    add_header(out, "X-Content-Type-Options", "nosniff");
    add_header(out, "Referrer-Policy", "no-referrer");
}
