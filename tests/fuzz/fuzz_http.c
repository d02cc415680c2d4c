/* libFuzzer target for HTTP/1.1 request heads (http/http_parse.c): the
 * first bytes any client can send to `ft serve`.
 *
 * Input: the bytes of a connection. They are parsed as the connection
 * does it (request after request, skipping each body), once with the whole
 * input and once fed in pieces whose sizes come from the input's own
 * bytes; both runs must agree on every request, since TCP may split the
 * stream anywhere. Accepted heads must respect the limits; refusals must
 * carry a status the server knows. Must never crash, leak or hang.
 * Seeds: tests/fuzz/corpus/http.
 */
#include "http/http_parse.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct ft_http_limits k_limits = {.max_head = 2048, .max_headers = 16, .max_body = 1 << 16};

#define MAX_EVENTS 64

struct event {
    enum ft_http_status st;
    int status;
    size_t head_len, content_length;
    enum ft_http_method method;
};

static void check_request(const struct ft_http_request *r, size_t head_len) {
    if (head_len < 18 || head_len > k_limits.max_head || r->content_length > k_limits.max_body)
        abort();
    if (!r->path || r->path[0] != '/' || !r->target || !r->method_name || (r->minor != 0 && r->minor != 1))
        abort();
    if (r->n_fields < 0 || r->n_fields > k_limits.max_headers)
        abort();
    for (int i = 0; i < r->n_fields; i++)
        if (!r->fields[i].name[0] || strchr(r->fields[i].value, '\r') || strchr(r->fields[i].value, '\n'))
            abort();
}

static void check_refusal(const struct ft_http_error *e) {
    static const int known[] = {400, 405, 413, 417, 431, 501, 503, 505};
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (e->status == known[i] && e->code && e->message[0])
            return;
    abort();
}

/* Parse the stream; `step` > 0 feeds it that many bytes more at a time
 * (varying with the data), 0 feeds everything at once. */
static int run(const uint8_t *data, size_t size, int step, struct event *ev) {
    struct ft_http_parser p;
    ft_http_parser_init(&p, &k_limits);
    size_t off = 0;
    int n = 0;
    while (off < size && n < MAX_EVENTS) {
        size_t avail = step ? 0 : size - off;
        struct ft_http_request req;
        struct ft_http_error err;
        size_t head = 0;
        enum ft_http_status st = FT_HTTP_NEED_MORE;
        while (st == FT_HTTP_NEED_MORE) {
            if (step) {
                const size_t more = 1 + (size_t)(data[(off + avail) % size] % (unsigned)step);
                if (avail == size - off && avail)
                    break;
                avail = avail + more > size - off ? size - off : avail + more;
            }
            st = ft_http_parse(&p, (const char *)data + off, avail, &req, &head, &err);
            if (!step)
                break;
        }
        ev[n] = (struct event){st, st == FT_HTTP_REFUSED ? err.status : 0, head, 0, 0};
        if (st == FT_HTTP_NEED_MORE) {
            n++;
            break;
        }
        if (st == FT_HTTP_REFUSED) {
            check_refusal(&err);
            if (req.storage)
                abort();
            n++;
            break; /* the connection closes */
        }
        check_request(&req, head);
        ev[n].content_length = req.content_length;
        ev[n].method = req.method;
        n++;
        const size_t used = head + req.content_length;
        ft_http_request_free(&req);
        ft_http_parser_reset(&p);
        if (used > size - off)
            break; /* the body is incomplete */
        off += used;
    }
    return n;
}

static bool same(const struct event *x, const struct event *y) {
    return x->st == y->st && x->status == y->status && x->head_len == y->head_len &&
           x->content_length == y->content_length && x->method == y->method;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > (1u << 16))
        return 0;
    struct event whole[MAX_EVENTS], pieces[MAX_EVENTS], single[MAX_EVENTS];
    const int a = run(data, size, 0, whole);
    const int b = run(data, size, 7, pieces);
    const int c = run(data, size, 1, single);
    if (a != b || a != c)
        abort();
    for (int i = 0; i < a; i++)
        if (!same(&whole[i], &pieces[i]) || !same(&whole[i], &single[i]))
            abort();
    return 0;
}
