/* One access-log line per HTTP request, as text (key=value) or as a JSON
 * object (--log-format json), with the same numbers as the response's
 * metrics object. Lines go to one FILE and are flushed at once, so a log
 * shipper sees each request as it finishes. */
#ifndef FT_HTTP_ACCESS_LOG_H
#define FT_HTTP_ACCESS_LOG_H

#include "ft/metrics.h"

#include <stdio.h>

enum ft_log_format { FT_LOG_FORMAT_TEXT, FT_LOG_FORMAT_JSON };

struct ft_access_entry {
    const char *remote; /* "127.0.0.1:50312" */
    const char *method;
    const char *path;
    int status;                               /* 499: the client went away first */
    const char *finish;                       /* finish reason of a generation, else NULL */
    const struct ft_request_metrics *metrics; /* tokens and timings of a generation, else NULL */
    const char *error;                        /* the error message of a failed request, else NULL */
    const char *prompt;                       /* --log-prompts: the request's messages or prompt, else NULL */
};

void ft_access_log_write(FILE *f, enum ft_log_format fmt, const struct ft_access_entry *e);

#endif
