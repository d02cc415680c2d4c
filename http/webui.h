/* The web UI of `ft serve` (docs/api.md, "Web UI: chat and live view"): GET / is a
 * chat page, GET /dashboard the live view of the server's requests, both
 * with their stylesheet and script under /webui/, all embedded in the
 * binary (http/webui_assets.h), so the page works offline and with no
 * third-party origin. --no-webui turns it off (the paths are then unknown
 * URLs, 404).
 *
 * The files are served without the API key on purpose: they are the same
 * bytes for everyone (they ship in the binary) and hold no data; what
 * they fetch -- /v1/chat/completions, /v1/models, /v1/requests/recent --
 * needs the key like any API call, which the page asks the user for and
 * sends as "Authorization: Bearer KEY". (A browser navigating to a page
 * cannot send a Bearer header, so guarding the page itself would need a
 * cookie or Basic authentication, a second way in to secure.)
 *
 * Responses carry a strict Content-Security-Policy (scripts and styles
 * only from this origin, no inline code, fetches only to this origin, no
 * framing), Cache-Control: no-cache and an ETag, so a browser revalidates
 * with If-None-Match and gets 304 until the binary changes. */
#ifndef FT_HTTP_WEBUI_H
#define FT_HTTP_WEBUI_H

#include "conn.h"

#include <stdbool.h>
#include <stddef.h>

#define FT_WEBUI_MAX_HEADERS 8

struct ft_webui_reply {
    int status;               /* 200, 304 or 405 */
    const char *content_type; /* NULL for 304 */
    const char *body;         /* static; len bytes */
    size_t len;
    struct ft_http_header_out headers[FT_WEBUI_MAX_HEADERS];
    int n_headers;
};

/* Whether path is a page or an asset of the UI. */
bool ft_webui_handles(const char *path);

/* The answer to req, whose path ft_webui_handles(): for GET and HEAD the
 * file (200) or 304 when If-None-Match names its ETag; 405 with an
 * OpenAI error body for any other method. Nothing to free. */
void ft_webui_respond(const struct ft_http_request *req, struct ft_webui_reply *out /* OUT */);

#endif
