/* Stop strings for streamed text: text is released only once it cannot be
 * the beginning of a stop string, and generation ends at the first match
 * (the stop string itself is not output), as OpenAI's `stop` behaves. */
#ifndef FT_STOP_STRINGS_H
#define FT_STOP_STRINGS_H

#include <stdbool.h>
#include <stddef.h>

struct ft_stop_matcher {
    const char *const *stops;
    int n_stops;
    char *buf;      /* text generated so far */
    size_t len;
    size_t cap;
    size_t emitted; /* bytes of buf already released */
    bool stopped;
};

void ft_stop_init(struct ft_stop_matcher *s, const char *const *stops, int n_stops);
void ft_stop_free(struct ft_stop_matcher *s);
/* Append text; the pair (*out, *out_len) is the part now safe to release (points into
 * the matcher; valid until the next call). Returns -1 on allocation failure. */
int ft_stop_push(struct ft_stop_matcher *s, const char *text, size_t len, const char **out, size_t *out_len);
/* At the end of generation: release whatever is held back. */
void ft_stop_flush(struct ft_stop_matcher *s, const char **out, size_t *out_len);

#endif
