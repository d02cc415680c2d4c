/* Error strings and the engine's single logging function. Every layer logs
 * through ft_log(); the last error message is also kept per thread so a caller
 * holding only an FT_E* code can still show the precise reason. */
#include "ft/common.h"

#include <stdio.h>
#include <string.h>

static ft_log_sink g_sink;
static void *g_sink_ud;
static enum ft_log_level g_min_level = FT_LOG_WARN;
static _Thread_local char t_last_error[512];

const char *ft_strerror(int err) {
    switch (err) {
    case FT_OK: return "success";
    case FT_EINVAL: return "invalid argument";
    case FT_ENOMEM: return "out of memory";
    case FT_EIO: return "I/O error";
    case FT_EFORMAT: return "malformed data";
    case FT_EUNSUPPORTED: return "unsupported";
    case FT_ENOENT: return "not found";
    case FT_ERANGE: return "out of range";
    case FT_EFULL: return "full";
    default: return "unknown error";
    }
}

void ft_log_set_sink(ft_log_sink sink, void *ud) {
    g_sink = sink;
    g_sink_ud = ud;
}

void ft_log_set_level(enum ft_log_level min_level) { g_min_level = min_level; }

const char *ft_last_error(void) { return t_last_error; }
void ft_clear_error(void) { t_last_error[0] = '\0'; }

void ft_log(enum ft_log_level level, const char *func, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level >= FT_LOG_ERROR)
        memcpy(t_last_error, msg, sizeof(msg));
    if (g_sink) {
        g_sink(level, func, msg, g_sink_ud);
        return;
    }
    if (level < g_min_level)
        return;
    static const char *names[] = {"debug", "info", "warning", "error"};
    if (level == FT_LOG_DEBUG)
        fprintf(stderr, "ft: %s: %s: %s\n", names[level], func, msg);
    else
        fprintf(stderr, "ft: %s: %s\n", names[level], msg);
}
