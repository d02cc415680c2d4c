/* OpenAI error bodies (http/errors.h). */
#include "errors.h"

#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <stdlib.h>
#include <string.h>

const char *ft_http_error_type(int status) {
    if (status == 401)
        return "authentication_error";
    if (status == 429)
        return "rate_limit_error";
    return status >= 500 ? "server_error" : "invalid_request_error";
}

const char *ft_http_reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

static cJSON *str_or_null(const char *s) { return s && *s ? cJSON_CreateString(s) : cJSON_CreateNull(); }

char *ft_http_error_body(int status, const char *message, const char *param, const char *code) {
    cJSON *root = cJSON_CreateObject(), *e = cJSON_CreateObject();
    char *out = NULL;
    if (root && e) {
        cJSON_AddItemToObject(root, "error", e);
        e = NULL;
        cJSON *err = cJSON_GetObjectItem(root, "error");
        cJSON_AddItemToObject(err, "message", cJSON_CreateString(message ? message : ""));
        cJSON_AddItemToObject(err, "type", cJSON_CreateString(ft_http_error_type(status)));
        cJSON_AddItemToObject(err, "param", str_or_null(param));
        cJSON_AddItemToObject(err, "code", str_or_null(code));
        out = cJSON_PrintUnformatted(root);
    }
    cJSON_Delete(e);
    cJSON_Delete(root);
    return out;
}

void ft_http_send_error(struct evhttp_request *req, int status, const char *message, const char *param,
                        const char *code) {
    struct evbuffer *buf = evbuffer_new();
    char *body = ft_http_error_body(status, message, param, code);
    if (buf && body)
        evbuffer_add(buf, body, strlen(body));
    else if (buf)
        evbuffer_add_printf(buf, "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                 "\"param\":null,\"code\":null}}");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply(req, status, ft_http_reason(status), buf);
    if (buf)
        evbuffer_free(buf);
    free(body);
}
