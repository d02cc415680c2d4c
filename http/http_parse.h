/* An incremental, strict HTTP/1.1 request-head parser: pure (no I/O, no
 * allocation beyond one copy of the head), bounded by the limits it is given.
 *
 * The caller keeps the bytes received since the request began and calls
 * ft_http_parse() each time more arrive, with all of them; the parser
 * remembers how far it has looked, so feeding a head byte by byte costs
 * O(head) in total. It reports a bad request line as soon as that line is
 * complete and an oversize head as soon as it exceeds the limit, without
 * waiting for the rest. When the head is complete it says how many bytes
 * it used and how many body bytes follow (Content-Length); the caller
 * reads those itself, and the next request (pipelining) starts after them.
 *
 * Refusals carry the HTTP status to answer with:
 *   400 malformed request line, header or Content-Length, obsolete line
 *       folding, bare LF, control bytes;
 *   405 a method that is not an HTTP method we know;
 *   413 Content-Length above max_body (before any body byte is read);
 *   417 an Expect other than 100-continue;
 *   431 a head above max_head bytes or with more than max_headers fields;
 *   501 any Transfer-Encoding (chunked request bodies are not supported:
 *       clients must send Content-Length);
 *   505 an HTTP version other than 1.0 and 1.1. */
#ifndef FT_HTTP_HTTP_PARSE_H
#define FT_HTTP_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#define FT_HTTP_MAX_HEADERS 128 /* hard cap on max_headers */

enum ft_http_method {
    FT_HTTP_GET,
    FT_HTTP_HEAD,
    FT_HTTP_POST,
    FT_HTTP_PUT,
    FT_HTTP_DELETE,
    FT_HTTP_OPTIONS,
    FT_HTTP_PATCH,
    FT_HTTP_TRACE,
    FT_HTTP_CONNECT,
};

struct ft_http_limits {
    size_t max_head;  /* request line + headers + the blank line, bytes */
    int max_headers;  /* header fields, <= FT_HTTP_MAX_HEADERS */
    size_t max_body;  /* Content-Length at most */
};

struct ft_http_field {
    const char *name; /* as sent; compare case-insensitively */
    const char *value; /* without surrounding whitespace */
};

/* A parsed head. The strings point into `storage`, which the request
 * owns: release it with ft_http_request_free(). */
struct ft_http_request {
    enum ft_http_method method;
    const char *method_name; /* "GET", ... (static) */
    const char *target;      /* the request target as sent: "/v1/models?x=1" */
    const char *path;        /* the target up to '?' */
    int minor;               /* HTTP/1.<minor>: 0 or 1 */
    bool keep_alive;         /* HTTP/1.1 unless "Connection: close"; 1.0 only with "keep-alive" */
    bool expect_continue;    /* "Expect: 100-continue" */
    size_t content_length;   /* body bytes that follow the head */
    int n_fields;
    struct ft_http_field fields[FT_HTTP_MAX_HEADERS];
    char *storage;
};

struct ft_http_error {
    int status;         /* 400, 405, 413, 417, 431, 501, 505 */
    const char *code;   /* OpenAI-style error code (static) */
    char message[160];
};

struct ft_http_parser {
    struct ft_http_limits limits;
    size_t scanned;     /* bytes already searched for the end of the head */
    bool line_checked;  /* the request line was complete and valid */
};

enum ft_http_status { FT_HTTP_NEED_MORE, FT_HTTP_HEAD_DONE, FT_HTTP_REFUSED };

void ft_http_parser_init(struct ft_http_parser *p, const struct ft_http_limits *limits);
/* Forget the request so far (before the next one on the connection). */
void ft_http_parser_reset(struct ft_http_parser *p);

/* buf[0..len): every byte received since the request began (more than
 * the head is fine). HEAD_DONE: *req is filled and *head_len (OUT) is the
 * head's size; the body is the next req->content_length bytes. REFUSED:
 * *err says why (req is left empty). NEED_MORE: call again with more. */
enum ft_http_status ft_http_parse(struct ft_http_parser *p, const char *buf, size_t len,
                                  struct ft_http_request *req /* OUT */, size_t *head_len /* OUT */,
                                  struct ft_http_error *err /* OUT */);

void ft_http_request_free(struct ft_http_request *req); /* accepts NULL; leaves it empty */

/* The first field called `name` (case-insensitive), or NULL. */
const char *ft_http_field(const struct ft_http_request *req, const char *name);

#endif
