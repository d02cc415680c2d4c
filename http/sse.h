/* Server-sent events over a streamed (chunked) HTTP response, as OpenAI
 * streams: "data: <json>\n\n" per event and "data: [DONE]\n\n" at the end. */
#ifndef FT_HTTP_SSE_H
#define FT_HTTP_SSE_H

struct ft_conn;

/* Status 200 with text/event-stream headers; starts the streamed reply. */
void ft_sse_start(struct ft_conn *c);
/* One event carrying `json` (NULL sends nothing). -1: the client cannot
 * keep up and the connection was closed (the handler's on_gone ran). */
int ft_sse_send(struct ft_conn *c, const char *json);
/* data: [DONE] and the end of the reply. */
void ft_sse_finish(struct ft_conn *c);

#endif
