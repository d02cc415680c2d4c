/* Server-sent events over an evhttp chunked reply, as OpenAI streams:
 * "data: <json>\n\n" per event and "data: [DONE]\n\n" at the end. */
#ifndef FT_HTTP_SSE_H
#define FT_HTTP_SSE_H

struct evhttp_request;

/* Status 200 with text/event-stream headers; starts the chunked reply. */
void ft_sse_start(struct evhttp_request *req);
/* One event carrying `json` (NULL sends nothing). */
void ft_sse_send(struct evhttp_request *req, const char *json);
/* data: [DONE] and the end of the reply. */
void ft_sse_finish(struct evhttp_request *req);

#endif
