/* Stop-string matching over streamed text (see stop_strings.h). */
#include "ft/stop_strings.h"

#include <stdlib.h>
#include <string.h>

void ft_stop_init(struct ft_stop_matcher *s, const char *const *stops, int n_stops) {
    memset(s, 0, sizeof(*s));
    s->stops = stops;
    s->n_stops = n_stops;
}

void ft_stop_free(struct ft_stop_matcher *s) { free(s->buf); }

/* Length of the longest suffix of buf[from..len) that is a proper prefix of
 * some stop string: that much must be held back. */
static size_t held_back(const struct ft_stop_matcher *s, size_t from) {
    size_t hold = 0;
    for (int i = 0; i < s->n_stops; i++) {
        size_t sl = strlen(s->stops[i]);
        for (size_t k = sl > 0 ? sl - 1 : 0; k > hold; k--) {
            if (k > s->len - from)
                continue;
            if (!memcmp(s->buf + s->len - k, s->stops[i], k)) {
                hold = k;
                break;
            }
        }
    }
    return hold;
}

int ft_stop_push(struct ft_stop_matcher *s, const char *text, size_t len, const char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (s->stopped)
        return 0;
    if (s->len + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + len + 1)
            cap *= 2;
        char *nb = realloc(s->buf, cap);
        if (!nb)
            return -1;
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, text, len);
    s->len += len;
    s->buf[s->len] = '\0';

    /* earliest match that starts in the part not yet released */
    size_t match = s->len;
    for (int i = 0; i < s->n_stops; i++) {
        size_t sl = strlen(s->stops[i]);
        if (sl == 0)
            continue;
        size_t start = s->emitted;
        for (size_t p = start; p + sl <= s->len; p++) {
            if (!memcmp(s->buf + p, s->stops[i], sl)) {
                if (p < match)
                    match = p;
                break;
            }
        }
    }
    size_t release_to;
    if (match < s->len) {
        s->stopped = true;
        release_to = match;
    } else {
        release_to = s->len - held_back(s, s->emitted);
    }
    *out = s->buf + s->emitted;
    *out_len = release_to - s->emitted;
    s->emitted = release_to;
    return 0;
}

void ft_stop_flush(struct ft_stop_matcher *s, const char **out, size_t *out_len) {
    *out = s->buf ? s->buf + s->emitted : "";
    *out_len = s->stopped ? 0 : s->len - s->emitted;
    s->emitted = s->len;
}
