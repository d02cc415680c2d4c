/* The ring of the last requests' metrics (http/request_ring.h). */
#include "request_ring.h"

#include "request_parse.h"
#include "responses.h"

#include "ft/common.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ft_request_ring {
    pthread_mutex_t lock;
    struct ft_request_ring_entry *e; /* capacity slots; slot seq % capacity holds seq */
    int32_t capacity;
    uint64_t seq;               /* the newest entry's; 0: none yet */
    uint64_t completion_tokens; /* over every entry ever added */
};

struct ft_request_ring *ft_request_ring_new(int32_t capacity) {
    if (capacity < 1 || capacity > FT_REQUEST_RING_MAX_CAPACITY) {
        FT_LOG_E("capacity %d is not in 1..%d", (int)capacity, FT_REQUEST_RING_MAX_CAPACITY);
        return NULL;
    }
    struct ft_request_ring *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    if (!(r->e = calloc((size_t)capacity, sizeof(*r->e)))) {
        free(r);
        return NULL;
    }
    r->capacity = capacity;
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

void ft_request_ring_free(struct ft_request_ring *r) {
    if (!r)
        return;
    pthread_mutex_destroy(&r->lock);
    free(r->e);
    free(r);
}

int32_t ft_request_ring_capacity(const struct ft_request_ring *r) { return r->capacity; }

static void copy_str(char *dst, size_t cap, const char *src) { snprintf(dst, cap, "%s", src ? src : ""); }

void ft_request_ring_add(struct ft_request_ring *r, const char *id, const char *endpoint, int status,
                         const char *finish_reason, bool stream, const struct ft_request_metrics *m) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    /* Filled outside the lock: only the copy into the slot is guarded. */
    struct ft_request_ring_entry e = {.finished_at = (double)now.tv_sec + (double)now.tv_nsec / 1e9,
                                      .status = status,
                                      .stream = stream};
    copy_str(e.id, sizeof(e.id), id);
    copy_str(e.endpoint, sizeof(e.endpoint), endpoint);
    copy_str(e.finish_reason, sizeof(e.finish_reason), finish_reason);
    if (m)
        e.metrics = *m;
    pthread_mutex_lock(&r->lock);
    e.seq = ++r->seq;
    r->completion_tokens += m && m->completion_tokens > 0 ? (uint64_t)m->completion_tokens : 0;
    r->e[e.seq % (uint64_t)r->capacity] = e;
    pthread_mutex_unlock(&r->lock);
}

int32_t ft_request_ring_snapshot(struct ft_request_ring *r, uint64_t since, struct ft_request_ring_entry *out,
                                 int32_t max, uint64_t *recorded, uint64_t *completion_tokens) {
    int32_t n = 0;
    pthread_mutex_lock(&r->lock);
    /* The ring holds seq - capacity + 1 .. seq (those that exist). */
    const uint64_t held = r->seq < (uint64_t)r->capacity ? r->seq : (uint64_t)r->capacity;
    for (uint64_t k = 0; k < held && n < max; k++) {
        const uint64_t seq = r->seq - k;
        if (seq <= since)
            break;
        out[n++] = r->e[seq % (uint64_t)r->capacity];
    }
    if (recorded)
        *recorded = r->seq;
    if (completion_tokens)
        *completion_tokens = r->completion_tokens;
    pthread_mutex_unlock(&r->lock);
    return n;
}

/* value[0..len) as an unsigned decimal below `bound`; false otherwise
 * (empty, a sign, any other byte, too many digits). */
static bool parse_digits(const char *v, size_t len, uint64_t bound, uint64_t *out) {
    if (len == 0 || len > 19)
        return false; /* 19 digits stay below 2^64 before the bound check */
    uint64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    if (x >= bound)
        return false;
    *out = x;
    return true;
}

int ft_request_ring_parse_query(const char *target, int32_t capacity, struct ft_request_ring_query *out,
                                struct ft_api_error *err) {
    memset(err, 0, sizeof(*err));
    out->limit = FT_MIN(FT_REQUEST_RING_DEFAULT_LIMIT, capacity);
    out->since = 0;
    const char *q = target ? strchr(target, '?') : NULL;
    if (!q)
        return 0;
    bool seen_limit = false, seen_since = false;
    /* Each '&'-separated part moves p forward: bounded by the target. */
    for (const char *p = q + 1; *p;) {
        const char *end = strchr(p, '&');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        const size_t klen = eq ? (size_t)(eq - p) : len;
        const char *v = eq ? eq + 1 : p + len;
        const size_t vlen = (size_t)(p + len - v);
        uint64_t x = 0;
        if (klen == 5 && !memcmp(p, "limit", 5)) {
            if (seen_limit || !parse_digits(v, vlen, (uint64_t)capacity + 1, &x) || x == 0) {
                ft_api_error_set(err, 400, "limit", NULL, "'limit' must be given once, as an integer in 1..%d",
                                 (int)capacity);
                return -1;
            }
            seen_limit = true;
            out->limit = (int32_t)x;
        } else if (klen == 5 && !memcmp(p, "since", 5)) {
            if (seen_since || !parse_digits(v, vlen, (uint64_t)INT64_MAX + 1, &x)) {
                ft_api_error_set(err, 400, "since", NULL,
                                 "'since' must be given once, as the integer 'seq' of an entry (0 or more)");
                return -1;
            }
            seen_since = true;
            out->since = x;
        }
        p += len;
        if (*p == '&')
            p++;
    }
    return 0;
}

static cJSON *entry_json(const struct ft_request_ring_entry *e) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "seq", (double)e->seq);
    cJSON_AddStringToObject(o, "id", e->id);
    cJSON_AddStringToObject(o, "endpoint", e->endpoint);
    cJSON_AddNumberToObject(o, "status", e->status);
    cJSON_AddStringToObject(o, "finish_reason", e->finish_reason);
    cJSON_AddBoolToObject(o, "stream", e->stream);
    cJSON_AddNumberToObject(o, "finished_at", e->finished_at);
    cJSON_AddNumberToObject(o, "prompt_tokens", e->metrics.prompt_tokens);
    cJSON_AddNumberToObject(o, "completion_tokens", e->metrics.completion_tokens);
    cJSON *m = ft_resp_metrics(&e->metrics);
    if (!m || !cJSON_AddItemToObject(o, "metrics", m)) {
        cJSON_Delete(m);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *gauges_json(const struct ft_request_ring_gauges *g) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddBoolToObject(o, "loaded", g->loaded);
    /* Unknown while the model loads: null, not a made-up 0. */
    if (g->loaded) {
        cJSON_AddNumberToObject(o, "running", g->sched.running);
        cJSON_AddNumberToObject(o, "waiting", g->sched.waiting);
        cJSON_AddNumberToObject(o, "kv_cache_usage", g->sched.kv_usage);
        cJSON_AddNumberToObject(o, "kv_blocks_total", g->sched.kv_blocks_total);
    } else {
        cJSON_AddNullToObject(o, "running");
        cJSON_AddNullToObject(o, "waiting");
        cJSON_AddNullToObject(o, "kv_cache_usage");
        cJSON_AddNullToObject(o, "kv_blocks_total");
    }
    cJSON_AddNumberToObject(o, "connections", g->connections);
    return o;
}

char *ft_request_ring_json(struct ft_request_ring *r, const char *target, const struct ft_request_ring_gauges *g,
                           struct ft_api_error *err) {
    struct ft_request_ring_query q;
    if (ft_request_ring_parse_query(target, r->capacity, &q, err))
        return NULL;
    struct ft_request_ring_entry *es = malloc(sizeof(*es) * (size_t)q.limit);
    if (!es) {
        ft_api_error_set(err, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    uint64_t recorded = 0, tokens = 0;
    const int32_t n = ft_request_ring_snapshot(r, q.since, es, q.limit, &recorded, &tokens);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);

    char *out = NULL;
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddStringToObject(o, "model", g->model ? g->model : "");
        cJSON_AddNumberToObject(o, "time", (double)now.tv_sec + (double)now.tv_nsec / 1e9);
        cJSON_AddNumberToObject(o, "capacity", r->capacity);
        cJSON_AddNumberToObject(o, "recorded", (double)recorded);
        cJSON_AddNumberToObject(o, "completion_tokens_total", (double)tokens);
    }
    cJSON *gauges = o ? gauges_json(g) : NULL;
    bool ok = gauges && cJSON_AddItemToObject(o, "gauges", gauges);
    if (!ok)
        cJSON_Delete(gauges);
    cJSON *data = ok ? cJSON_AddArrayToObject(o, "data") : NULL;
    ok = data != NULL;
    for (int32_t i = 0; ok && i < n; i++) {
        cJSON *e = entry_json(&es[i]);
        ok = e && cJSON_AddItemToArray(data, e);
        if (!ok)
            cJSON_Delete(e);
    }
    if (ok)
        out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    free(es);
    if (!out)
        ft_api_error_set(err, 500, NULL, NULL, "out of memory");
    return out;
}
