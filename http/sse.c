/* SSE framing on a streamed connection response (http/sse.h). */
#include "sse.h"

#include "conn.h"

#include <string.h>

void ft_sse_start(struct ft_conn *c) {
    static const struct ft_http_header_out h[] = {
        {"Cache-Control", "no-cache"},
        {"X-Accel-Buffering", "no"}, /* proxies such as nginx would otherwise hold the events back */
    };
    ft_conn_stream_start(c, 200, "text/event-stream", h, 2);
}

int ft_sse_send(struct ft_conn *c, const char *json) {
    if (!json)
        return 0;
    if (ft_conn_stream_write(c, "data: ", 6) || ft_conn_stream_write(c, json, strlen(json)) ||
        ft_conn_stream_write(c, "\n\n", 2))
        return -1;
    return 0;
}

void ft_sse_finish(struct ft_conn *c) {
    if (ft_conn_stream_write(c, "data: [DONE]\n\n", 14) == 0)
        ft_conn_stream_end(c);
}
