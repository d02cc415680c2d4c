/* Access-log lines (http/access_log.h). */
#include "access_log.h"

#include "responses.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static void iso_time(char *buf, size_t cap) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%03dZ", (int)(tv.tv_usec / 1000));
}

static void write_json(FILE *f, const char *ts, const struct ft_access_entry *e) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return;
    cJSON_AddStringToObject(o, "time", ts);
    cJSON_AddStringToObject(o, "remote", e->remote ? e->remote : "");
    cJSON_AddStringToObject(o, "method", e->method ? e->method : "");
    cJSON_AddStringToObject(o, "path", e->path ? e->path : "");
    cJSON_AddNumberToObject(o, "status", e->status);
    if (e->finish)
        cJSON_AddStringToObject(o, "finish_reason", e->finish);
    if (e->metrics) {
        cJSON_AddNumberToObject(o, "prompt_tokens", e->metrics->prompt_tokens);
        cJSON_AddNumberToObject(o, "completion_tokens", e->metrics->completion_tokens);
        cJSON_AddItemToObject(o, "metrics", ft_resp_metrics(e->metrics));
    }
    if (e->error)
        cJSON_AddStringToObject(o, "error", e->error);
    if (e->prompt)
        cJSON_AddStringToObject(o, "prompt", e->prompt);
    char *s = cJSON_PrintUnformatted(o);
    if (s) {
        fprintf(f, "%s\n", s);
        free(s);
    }
    cJSON_Delete(o);
}

/* Quotes, backslashes and control bytes escaped, so a line stays one line
 * and a client-chosen path cannot forge fields. */
static void put_escaped(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
}

static void write_text(FILE *f, const char *ts, const struct ft_access_entry *e) {
    fprintf(f, "%s %s \"%s ", ts, e->remote ? e->remote : "-", e->method ? e->method : "-");
    put_escaped(f, e->path ? e->path : "-");
    fprintf(f, "\" %d", e->status);
    if (e->finish)
        fprintf(f, " finish=%s", e->finish);
    const struct ft_request_metrics *m = e->metrics;
    if (m) {
        fprintf(f,
                " prompt_tokens=%d cached_prompt_tokens=%d prefill_tokens=%d completion_tokens=%d decode_tokens=%d"
                " queue_time_ms=%.3f ttft_ms=%.3f prefill_time_ms=%.3f",
                m->prompt_tokens, m->cached_prompt_tokens, m->prefill_tokens, m->completion_tokens,
                m->decode_tokens, m->queue_time_ms, m->ttft_ms, m->prefill_time_ms);
        if (m->prefill_tokens_per_second >= 0)
            fprintf(f, " prefill_tokens_per_second=%.2f", m->prefill_tokens_per_second);
        fprintf(f, " decode_time_ms=%.3f", m->decode_time_ms);
        if (m->decode_tokens_per_second >= 0)
            fprintf(f, " decode_tokens_per_second=%.2f", m->decode_tokens_per_second);
        fprintf(f, " itl_p50_ms=%.3f itl_p90_ms=%.3f itl_p99_ms=%.3f itl_max_ms=%.3f total_time_ms=%.3f",
                m->inter_token_latency_ms.p50, m->inter_token_latency_ms.p90, m->inter_token_latency_ms.p99,
                m->inter_token_latency_ms.max, m->total_time_ms);
    }
    if (e->error) {
        fputs(" error=\"", f);
        put_escaped(f, e->error);
        fputc('"', f);
    }
    if (e->prompt) {
        fputs(" prompt=\"", f);
        put_escaped(f, e->prompt);
        fputc('"', f);
    }
    fputc('\n', f);
}

void ft_access_log_write(FILE *f, enum ft_log_format fmt, const struct ft_access_entry *e) {
    char ts[40];
    iso_time(ts, sizeof(ts));
    if (fmt == FT_LOG_FORMAT_JSON)
        write_json(f, ts, e);
    else
        write_text(f, ts, e);
    fflush(f);
}
