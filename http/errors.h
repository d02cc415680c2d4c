/* OpenAI-style error responses: {"error": {"message", "type", "param",
 * "code"}} with the HTTP status, as OpenAI's SDKs expect them. */
#ifndef FT_HTTP_ERRORS_H
#define FT_HTTP_ERRORS_H

/* The body as a malloc'd string (NULL on allocation failure). param and
 * code may be NULL or empty (JSON null). */
char *ft_http_error_body(int status, const char *message, const char *param, const char *code);
/* The body to send when even the error body could not be allocated. */
extern const char ft_http_oom_body[];

/* OpenAI's error type for a status: invalid_request_error (4xx),
 * authentication_error (401), server_error (5xx). */
const char *ft_http_error_type(int status);
const char *ft_http_reason(int status); /* "Bad Request", ... */

#endif
