/* libFuzzer target for the tool-call parsers and the streaming hold-back
 * (engine/text/tool_calls.c): model text is what a prompt-injected or
 * broken model can make the server parse.
 *
 * Input layout: one byte picking the format (low two bits) and
 * parallel_tool_calls (bit 2), then the text. Must never crash, leak or trip
 * a sanitizer, and the text streamed in pieces (cut where the bytes of the
 * text say) must give the same content and calls as parsed whole, with
 * every call naming an offered tool and carrying a JSON object.
 * Seeds: tests/fuzz/corpus/tool_calls.
 */
#include "ft/common.h"
#include "ft/tool_calls.h"
#include "fuzz_common.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

FUZZ_QUIET_INITIALIZE()

static const char *const names[] = {"get_weather", "search", "f"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 16))
        return 0;
    const enum ft_tool_format f = (enum ft_tool_format)(data[0] & 3);
    const size_t max_calls = (data[0] & 4) ? 1 : 0;
    /* The generated text never holds a NUL (the server passes C strings). */
    size_t n = size - 1;
    char *text = malloc(n + 1);
    if (!text)
        return 0;
    memcpy(text, data + 1, n);
    text[n] = '\0';
    n = strlen(text);

    struct ft_tool_parse whole;
    if (ft_tool_calls_parse(f, text, n, names, 3, max_calls, &whole)) {
        free(text);
        return 0;
    }
    for (size_t i = 0; i < whole.n_calls; i++) {
        bool known = false;
        for (size_t k = 0; k < 3; k++)
            known |= strcmp(whole.calls[i].name, names[k]) == 0;
        cJSON *a = cJSON_Parse(whole.calls[i].arguments);
        if (!known || !cJSON_IsObject(a))
            abort();
        cJSON_Delete(a);
    }
    if (max_calls && whole.n_calls > max_calls)
        abort();

    struct ft_tool_stream s;
    ft_tool_stream_init(&s, f);
    char *streamed = calloc(n + 1, 1);
    size_t got = 0, off = 0;
    bool oom = !streamed;
    while (!oom && off < n) {
        size_t piece = 1 + (unsigned char)text[off] % 7;
        if (piece > n - off)
            piece = n - off;
        char *e = NULL;
        if (ft_tool_stream_feed(&s, text + off, piece, &e)) {
            oom = true;
            break;
        }
        size_t k = strlen(e);
        if (got + k > n)
            abort(); /* never more content than text */
        memcpy(streamed + got, e, k);
        got += k;
        free(e);
        off += piece;
    }
    struct ft_tool_parse tail;
    if (!oom && ft_tool_stream_finish(&s, names, 3, max_calls, &tail) == 0) {
        size_t k = strlen(tail.content);
        if (got + k > n)
            abort();
        memcpy(streamed + got, tail.content, k);
        streamed[got + k] = '\0';
        if (strcmp(streamed, whole.content) != 0 || tail.n_calls != whole.n_calls)
            abort();
        for (size_t i = 0; i < tail.n_calls; i++)
            if (strcmp(tail.calls[i].name, whole.calls[i].name) != 0 ||
                strcmp(tail.calls[i].arguments, whole.calls[i].arguments) != 0)
                abort();
        ft_tool_parse_free(&tail);
    }
    ft_tool_stream_free(&s);
    ft_tool_parse_free(&whole);
    free(streamed);
    free(text);
    return 0;
}
