/* The HTTP/1.1 request-head parser (http/http_parse.c): heads fed whole
 * and byte by byte, pipelined requests, and every refusal with its status. */
#include "http/http_parse.c"

#include "ft_test.h"

static const struct ft_http_limits k_limits = {.max_head = 1024, .max_headers = 8, .max_body = 4096};

struct outcome {
    enum ft_http_status st;
    size_t head_len;
    size_t fed;  /* bytes given when the parser decided */
    struct ft_http_error err;
};

/* Feed buf[0..len) growing one byte at a time, as a slow client sends it;
 * stop at the first answer that is not NEED_MORE. */
static struct outcome feed_bytewise(const char *buf, size_t len, struct ft_http_request *req) {
    struct ft_http_parser p;
    ft_http_parser_init(&p, &k_limits);
    struct outcome o = {FT_HTTP_NEED_MORE, 0, 0, {0}};
    for (size_t n = 1; n <= len; n++) {
        o.st = ft_http_parse(&p, buf, n, req, &o.head_len, &o.err);
        o.fed = n;
        if (o.st != FT_HTTP_NEED_MORE)
            break;
    }
    return o;
}

static struct outcome feed_whole(const char *buf, size_t len, struct ft_http_request *req) {
    struct ft_http_parser p;
    ft_http_parser_init(&p, &k_limits);
    struct outcome o = {FT_HTTP_NEED_MORE, 0, len, {0}};
    o.st = ft_http_parse(&p, buf, len, req, &o.head_len, &o.err);
    return o;
}

static void test_simple_post(void) {
    const char *s = "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                    "Content-Length:  12 \r\nAuthorization: Bearer k\r\n\r\n{\"prompt\":1}";
    const size_t head = strlen(s) - 12;
    for (int mode = 0; mode < 2; mode++) {
        struct ft_http_request req;
        struct outcome o = mode ? feed_bytewise(s, strlen(s), &req) : feed_whole(s, strlen(s), &req);
        CHECK(o.st == FT_HTTP_HEAD_DONE);
        CHECK_EQ_INT(o.head_len, head);
        if (mode)
            CHECK_EQ_INT(o.fed, head); /* decided on the last byte of the head, not later */
        CHECK(req.method == FT_HTTP_POST && !strcmp(req.method_name, "POST"));
        CHECK(!strcmp(req.target, "/v1/completions?x=1"));
        CHECK(!strcmp(req.path, "/v1/completions"));
        CHECK_EQ_INT(req.minor, 1);
        CHECK(req.keep_alive);
        CHECK_EQ_INT(req.content_length, 12);
        CHECK_EQ_INT(req.n_fields, 4);
        CHECK(!strcmp(ft_http_field(&req, "content-length"), "12"));
        CHECK(!strcmp(ft_http_field(&req, "AUTHORIZATION"), "Bearer k"));
        CHECK(ft_http_field(&req, "Cookie") == NULL);
        ft_http_request_free(&req);
    }
}

static void test_versions_connection_head(void) {
    struct ft_http_request req;
    struct outcome o = feed_whole("GET /health HTTP/1.0\r\n\r\n", 24, &req);
    CHECK(o.st == FT_HTTP_HEAD_DONE && req.minor == 0 && !req.keep_alive && req.content_length == 0);
    ft_http_request_free(&req);
    const char *ka = "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
    o = feed_whole(ka, strlen(ka), &req);
    CHECK(o.st == FT_HTTP_HEAD_DONE && req.keep_alive);
    ft_http_request_free(&req);
    const char *cl = "GET / HTTP/1.1\r\nConnection: foo, close\r\n\r\n";
    o = feed_whole(cl, strlen(cl), &req);
    CHECK(o.st == FT_HTTP_HEAD_DONE && !req.keep_alive);
    ft_http_request_free(&req);
    const char *hd = "HEAD /health HTTP/1.1\r\n\r\n";
    o = feed_bytewise(hd, strlen(hd), &req);
    CHECK(o.st == FT_HTTP_HEAD_DONE && req.method == FT_HTTP_HEAD && !strcmp(req.path, "/health"));
    ft_http_request_free(&req);
    const char *ex = "POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n";
    o = feed_whole(ex, strlen(ex), &req);
    CHECK(o.st == FT_HTTP_HEAD_DONE && req.expect_continue && req.content_length == 5);
    ft_http_request_free(&req);
    const char *abs = "GET http://example.com/v1/models?a HTTP/1.1\r\n\r\n";
    o = feed_whole(abs, strlen(abs), &req);
    CHECK(o.st == FT_HTTP_HEAD_DONE && !strcmp(req.path, "/v1/models"));
    ft_http_request_free(&req);
    /* Incomplete heads are never answered early. */
    const char *part = "GET / HTTP/1.1\r\nHost: x\r\n";
    o = feed_bytewise(part, strlen(part), &req);
    CHECK(o.st == FT_HTTP_NEED_MORE);
}

/* Two requests in one buffer: the second starts after the first's body. */
static void test_pipelining(void) {
    const char *s = "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\n\r\nGET /c HTTP/1.1\r\nConnection: close\r\n\r\n";
    const size_t len = strlen(s);
    struct ft_http_parser p;
    ft_http_parser_init(&p, &k_limits);
    struct ft_http_request req;
    struct ft_http_error err;
    size_t off = 0, head = 0;
    const char *paths[] = {"/a", "/b", "/c"};
    for (int i = 0; i < 3; i++) {
        CHECK(ft_http_parse(&p, s + off, len - off, &req, &head, &err) == FT_HTTP_HEAD_DONE);
        CHECK(!strcmp(req.path, paths[i]));
        CHECK(req.keep_alive == (i < 2));
        off += head + req.content_length;
        ft_http_request_free(&req);
        ft_http_parser_reset(&p);
    }
    CHECK_EQ_INT(off, len);
}

struct refusal {
    const char *text;
    int status;
};

static void test_refusals(void) {
    static const struct refusal cases[] = {
        {"GARBAGE\r\n\r\n", 400},
        {"GET\r\n\r\n", 400},
        {"GET /\r\n\r\n", 400},
        {"GET  / HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1 \r\n\r\n", 400},
        {"GET / HTTP/1.1\n\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n: a\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nA: b\r\n  folded\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", 400},
        {"GET x HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTX/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1x\r\n\r\n", 400},
        {"GET /\x7f HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/2.0\r\n\r\n", 505},
        {"GET / HTTP/1.2\r\n\r\n", 505},
        {"GET / HTTP/0.9\r\n\r\n", 505},
        {"BREW / HTTP/1.1\r\n\r\n", 405},
        {"get / HTTP/1.1\r\n\r\n", 405},
        {"POST / HTTP/1.1\r\nContent-Length: 4097\r\n\r\n", 413},
        {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999999\r\n\r\n", 413},
        {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", 417},
        {"GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\nG: 1\r\nH: 1\r\nI: 1\r\n\r\n", 431},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int mode = 0; mode < 2; mode++) {
            struct ft_http_request req;
            const size_t len = strlen(cases[i].text);
            struct outcome o = mode ? feed_bytewise(cases[i].text, len, &req) : feed_whole(cases[i].text, len, &req);
            CHECKF(o.st == FT_HTTP_REFUSED && o.err.status == cases[i].status, "case %zu (%s): st %d status %d",
                   i, mode ? "bytewise" : "whole", (int)o.st, o.err.status);
            CHECKF(o.err.message[0] && o.err.code, "case %zu: no message", i);
            CHECK(req.storage == NULL);
        }
    }
}

/* A bad request line is refused when its line ends, before any header. */
static void test_early_refusal(void) {
    const char *s = "GET / HTTP/3.0\r\nHost: a\r\n\r\n";
    struct ft_http_request req;
    struct outcome o = feed_bytewise(s, strlen(s), &req);
    CHECK(o.st == FT_HTTP_REFUSED && o.err.status == 505);
    CHECK_EQ_INT(o.fed, 16);
}

/* Heads over max_head are refused once max_head + 1 bytes are in, with no
 * blank line needed; a head of exactly max_head bytes is fine. */
static void test_head_limit(void) {
    char big[2048];
    strcpy(big, "GET / HTTP/1.1\r\nX-Big: ");
    size_t n = strlen(big);
    memset(big + n, 'a', sizeof(big) - n - 1);
    big[sizeof(big) - 1] = '\0';
    struct ft_http_request req;
    struct outcome o = feed_bytewise(big, strlen(big), &req);
    CHECK(o.st == FT_HTTP_REFUSED && o.err.status == 431);
    CHECK_EQ_INT(o.fed, k_limits.max_head);
    /* A request line alone longer than the limit. */
    memcpy(big, "GET /", 5);
    memset(big + 5, 'a', sizeof(big) - 6);
    o = feed_whole(big, strlen(big), &req);
    CHECK(o.st == FT_HTTP_REFUSED && o.err.status == 431);
    /* Exactly max_head bytes. */
    char exact[1025];
    strcpy(exact, "GET / HTTP/1.1\r\nX: ");
    n = strlen(exact);
    memset(exact + n, 'b', 1024 - n - 4);
    memcpy(exact + 1024 - 4, "\r\n\r\n", 4);
    exact[1024] = '\0';
    o = feed_bytewise(exact, 1024, &req);
    CHECK(o.st == FT_HTTP_HEAD_DONE && o.head_len == 1024);
    CHECK(strlen(ft_http_field(&req, "X")) == 1024 - n - 4);
    ft_http_request_free(&req);
}

int main(void) {
    test_simple_post();
    test_versions_connection_head();
    test_pipelining();
    test_refusals();
    test_early_refusal();
    test_head_limit();
    return ft_test_finish("test_http_parse");
}
