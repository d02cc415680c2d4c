/* Shared conventions for every FreeToken layer: error codes and logging.
 *
 * Rule (as in libuv): every fallible function returns 0 (FT_OK) or a negative
 * FT_E* code, and logs exactly one line through ft_log() naming the function
 * and the offending name or value. Only the CLI's main() decides to exit.
 */
#ifndef FT_COMMON_H
#define FT_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

enum {
    FT_OK = 0,
    FT_EINVAL = -1,       /* bad argument from the caller */
    FT_ENOMEM = -2,       /* allocation failed */
    FT_EIO = -3,          /* open/read/write/mmap failed */
    FT_EFORMAT = -4,      /* malformed input file or data */
    FT_EUNSUPPORTED = -5, /* well-formed but not something we can run */
    FT_ENOENT = -6,       /* key / tensor / file not found */
    FT_ERANGE = -7,       /* value outside the allowed range, or overflow */
    FT_EFULL = -8,        /* a bounded resource (KV cache, queue) is full */
};

const char *ft_strerror(int err);

enum ft_log_level {
    FT_LOG_DEBUG = 0,
    FT_LOG_INFO = 1,
    FT_LOG_WARN = 2,
    FT_LOG_ERROR = 3,
};

/* The one place the engine prints. The default sink writes
 * "ft: error: <message>" lines to stderr for levels >= the threshold. */
typedef void (*ft_log_sink)(enum ft_log_level level, const char *func, const char *msg, void *ud);

void ft_log(enum ft_log_level level, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ft_log_set_sink(ft_log_sink sink, void *ud); /* NULL restores the default */
void ft_log_set_level(enum ft_log_level min_level);

/* The text of the last error logged on this thread (empty if none). Lets a
 * CLI or the HTTP layer show the precise reason behind an FT_E* code. */
const char *ft_last_error(void);
void ft_clear_error(void);

#define FT_LOG_E(...) ft_log(FT_LOG_ERROR, __func__, __VA_ARGS__)
#define FT_LOG_W(...) ft_log(FT_LOG_WARN, __func__, __VA_ARGS__)
#define FT_LOG_I(...) ft_log(FT_LOG_INFO, __func__, __VA_ARGS__)
#define FT_LOG_D(...) ft_log(FT_LOG_DEBUG, __func__, __VA_ARGS__)

/* Overflow-checked size arithmetic: return 0 on success, -1 on overflow. */
static inline int ft_mul_overflow(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int ft_add_overflow(size_t a, size_t b, size_t *out) {
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

#define FT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define FT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define FT_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
