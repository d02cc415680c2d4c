/* The web UI's routes and embedded files (http/webui.c, the generated
 * webui_assets.c): which paths are pages, the headers of a 200, the ETag
 * and If-None-Match (304), 405 for other methods; and what the files must
 * keep true: every asset a page names is served, no inline script or style
 * (the Content-Security-Policy would block it), no HTML parsing of text in
 * the script (innerHTML and friends), and the whole UI within its size
 * budget. */
#include "http/webui.h"
#include "http/webui_assets.h"

#include "ft_test.h"

#define SIZE_BUDGET (64 * 1024) /* docs/api.md, "Web UI: chat and live view", states the real size */

static struct ft_http_request make_req(enum ft_http_method method, const char *path, const char *inm) {
    struct ft_http_request r;
    memset(&r, 0, sizeof(r));
    r.method = method;
    r.method_name = method == FT_HTTP_GET ? "GET" : method == FT_HTTP_HEAD ? "HEAD" : "POST";
    r.target = path;
    r.path = path;
    r.minor = 1;
    if (inm) {
        r.fields[0] = (struct ft_http_field){"if-none-match", inm};
        r.n_fields = 1;
    }
    return r;
}

static const char *header(const struct ft_webui_reply *w, const char *name) {
    for (int i = 0; i < w->n_headers; i++)
        if (!strcmp(w->headers[i].name, name))
            return w->headers[i].value;
    return NULL;
}

static const struct ft_webui_asset *asset(const char *name) {
    for (int i = 0; i < ft_webui_n_assets; i++)
        if (!strcmp(ft_webui_assets[i].name, name))
            return &ft_webui_assets[i];
    return NULL;
}

static void test_paths(void) {
    static const char *const yes[] = {"/", "/dashboard", "/webui/app.css", "/webui/app.js"};
    static const char *const no[] = {"", "/index.html", "/dashboard/", "/Dashboard", "/webui/", "/webui",
                                     "/webui/../webui/app.js", "/webui/app.js/", "//", "/v1/models",
                                     "/webui/index.html", "/favicon.ico"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        CHECKF(ft_webui_handles(yes[i]), "%s", yes[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        CHECKF(!ft_webui_handles(no[i]), "%s", no[i]);
    CHECK(!ft_webui_handles(NULL));
}

static void test_get(void) {
    static const struct {
        const char *path, *type, *starts;
    } pages[] = {
        {"/", "text/html; charset=utf-8", "<!doctype html>"},
        {"/dashboard", "text/html; charset=utf-8", "<!doctype html>"},
        {"/webui/app.css", "text/css; charset=utf-8", "/*"},
        {"/webui/app.js", "text/javascript; charset=utf-8", "//"},
    };
    for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
        for (int head = 0; head < 2; head++) {
            struct ft_http_request req = make_req(head ? FT_HTTP_HEAD : FT_HTTP_GET, pages[i].path, NULL);
            struct ft_webui_reply w;
            ft_webui_respond(&req, &w);
            CHECKF(w.status == 200, "%s: %d", pages[i].path, w.status);
            CHECKF(w.content_type && !strcmp(w.content_type, pages[i].type), "%s", pages[i].path);
            CHECK(w.body && w.len > 100 && strlen(w.body) == w.len); /* text, NUL-terminated past len */
            CHECK(w.body && !strncmp(w.body, pages[i].starts, strlen(pages[i].starts)));
            const char *etag = header(&w, "ETag");
            CHECK(etag && strlen(etag) == 18 && etag[0] == '"' && etag[17] == '"');
            CHECK(header(&w, "Cache-Control") && !strcmp(header(&w, "Cache-Control"), "no-cache"));
            CHECK(header(&w, "X-Content-Type-Options") && !strcmp(header(&w, "X-Content-Type-Options"), "nosniff"));
            const char *csp = header(&w, "Content-Security-Policy");
            CHECK(csp && strstr(csp, "default-src 'none'") && strstr(csp, "script-src 'self'") &&
                  strstr(csp, "connect-src 'self'") && strstr(csp, "frame-ancestors 'none'") &&
                  !strstr(csp, "unsafe"));
        }
    }
}

static void test_conditional(void) {
    struct ft_http_request req = make_req(FT_HTTP_GET, "/webui/app.js", NULL);
    struct ft_webui_reply w;
    ft_webui_respond(&req, &w);
    char etag[64], weak[80], list[200], unquoted[64];
    snprintf(etag, sizeof(etag), "%s", header(&w, "ETag"));
    snprintf(weak, sizeof(weak), "W/%s", etag);
    snprintf(list, sizeof(list), "\"0000000000000000\" ,  W/\"x\",%s", etag);
    snprintf(unquoted, sizeof(unquoted), "%.16s", etag + 1);
    static char many_commas[4000];
    memset(many_commas, ',', sizeof(many_commas) - 1);
    const struct {
        const char *inm;
        int status;
    } cases[] = {
        {etag, 304},  {weak, 304},           {list, 304},       {"*", 304},       {" \t*", 304},
        {unquoted, 200}, {"\"0000000000000000\"", 200}, {"\"", 200}, {"W/", 200}, {"", 200},
        {many_commas, 200}, {"\"a\" garbage", 200},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        req = make_req(FT_HTTP_GET, "/webui/app.js", cases[i].inm);
        ft_webui_respond(&req, &w);
        CHECKF(w.status == cases[i].status, "If-None-Match '%.40s': %d", cases[i].inm, w.status);
        if (w.status == 304) {
            CHECK(w.content_type == NULL && w.len == 0);
            CHECK(header(&w, "ETag") && !strcmp(header(&w, "ETag"), etag));
            CHECK(header(&w, "Cache-Control") != NULL);
        }
    }
    /* Another file's tag does not match. */
    req = make_req(FT_HTTP_GET, "/", etag);
    ft_webui_respond(&req, &w);
    CHECK(w.status == 200);
}

static void test_methods(void) {
    const enum ft_http_method ms[] = {FT_HTTP_POST, FT_HTTP_PUT, FT_HTTP_DELETE, FT_HTTP_OPTIONS, FT_HTTP_PATCH};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
        struct ft_http_request req = make_req(ms[i], "/", NULL);
        struct ft_webui_reply w;
        ft_webui_respond(&req, &w);
        CHECK(w.status == 405);
        CHECK(header(&w, "Allow") && !strcmp(header(&w, "Allow"), "GET, HEAD"));
        CHECK(w.body && strstr(w.body, "\"error\"") && strlen(w.body) == w.len);
    }
}

/* The files themselves. */
static void test_files(void) {
    size_t total = 0;
    for (int i = 0; i < ft_webui_n_assets; i++)
        total += ft_webui_assets[i].len;
    CHECKF(total <= SIZE_BUDGET, "the web UI is %zu bytes, over its budget of %d", total, SIZE_BUDGET);
    printf("test_webui: %d files, %zu bytes embedded\n", ft_webui_n_assets, total);

    const char *const pages[] = {"index.html", "dashboard.html"};
    for (size_t i = 0; i < 2; i++) {
        const struct ft_webui_asset *a = asset(pages[i]);
        CHECK(a != NULL);
        if (!a)
            continue;
        const char *html = (const char *)a->data;
        /* What the page loads is served. */
        CHECKF(strstr(html, "href=\"/webui/app.css\"") && strstr(html, "src=\"/webui/app.js\""), "%s", pages[i]);
        /* Nothing the CSP would block: no inline script or style, no event-handler attributes. */
        CHECKF(!strstr(html, "<script>") && !strstr(html, "<style") && !strstr(html, "style="), "%s", pages[i]);
        for (const char *p = html; (p = strstr(p, " on")); p++) {
            const char *q = p + 3;
            while (*q >= 'a' && *q <= 'z')
                q++;
            CHECKF(*q != '=', "%s: an inline event handler at '%.20s'", pages[i], p);
        }
        /* No third-party origin: the page works offline. */
        CHECKF(!strstr(html, "http://") && !strstr(html, "https://") && !strstr(html, "//cdn"), "%s", pages[i]);
        CHECKF(strstr(html, "<meta name=\"viewport\""), "%s", pages[i]);
    }
    const struct ft_webui_asset *js = asset("app.js");
    CHECK(js != NULL);
    if (js) {
        const char *s = (const char *)js->data;
        /* Text from the server is set with textContent, never parsed as HTML. */
        for (const char *const *bad = (const char *const[]){"innerHTML", "outerHTML", "insertAdjacentHTML",
                                                              "document.write", "eval(", "new Function",
                                                              "http://", "https://", NULL};
             *bad; bad++)
            CHECKF(!strstr(s, *bad), "app.js uses %s", *bad);
        CHECK(strstr(s, "performance_metrics: true") != NULL); /* the per-request metrics opt-in */
    }
}

int main(void) {
    test_paths();
    test_get();
    test_conditional();
    test_methods();
    test_files();
    return ft_test_finish("test_webui");
}
