/* SSE framing on evhttp (http/sse.h). */
#include "sse.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <string.h>

void ft_sse_start(struct evhttp_request *req) {
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "text/event-stream");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    /* Proxies such as nginx would otherwise hold the events back. */
    evhttp_add_header(h, "X-Accel-Buffering", "no");
    evhttp_send_reply_start(req, 200, "OK");
}

void ft_sse_send(struct evhttp_request *req, const char *json) {
    if (!json)
        return;
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return;
    evbuffer_add(b, "data: ", 6);
    evbuffer_add(b, json, strlen(json));
    evbuffer_add(b, "\n\n", 2);
    evhttp_send_reply_chunk(req, b);
    evbuffer_free(b);
}

void ft_sse_finish(struct evhttp_request *req) {
    struct evbuffer *b = evbuffer_new();
    if (b) {
        evbuffer_add(b, "data: [DONE]\n\n", 14);
        evhttp_send_reply_chunk(req, b);
        evbuffer_free(b);
    }
    evhttp_send_reply_end(req);
}
