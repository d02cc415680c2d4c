/* The web UI's files (http/webui/), embedded in the binary at build time:
 * cmake/FtEmbed.cmake writes BUILD/webui_assets.c with these definitions
 * (CMakeLists.txt, the ft_http library). */
#ifndef FT_HTTP_WEBUI_ASSETS_H
#define FT_HTTP_WEBUI_ASSETS_H

#include <stddef.h>

struct ft_webui_asset {
    const char *name;          /* the file name in http/webui/: "index.html" */
    const unsigned char *data; /* len bytes, then a NUL */
    size_t len;
    const char *etag;          /* "\"<16 hex digits of its SHA-256>\"" */
};

extern const struct ft_webui_asset ft_webui_assets[];
extern const int ft_webui_n_assets;

#endif
