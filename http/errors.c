/* OpenAI error bodies (http/errors.h). */
#include "errors.h"

#include <cjson/cJSON.h>
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
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
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

const char ft_http_oom_body[] =
    "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
