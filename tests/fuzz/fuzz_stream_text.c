/* libFuzzer target for the path of generated text to the client: token ids
 * through the streaming detokenizer, the stop-string matcher and the SSE /
 * JSON writers, as engine/serve/generate.c and http/completion.c chain them.
 *
 * Input layout: byte 0 picks the vocabulary (the five of ../shared/vocab);
 * byte 1 the number of stop strings (0..3); then the stop strings, each
 * ended by a NUL; then token ids, two bytes each (little-endian, folded
 * into the vocabulary). Stop strings that are not valid UTF-8 are dropped
 * (the request parser refuses them).
 *
 * Properties (abort on violation):
 *   - every chunk the writers make parses as JSON, is valid UTF-8, and
 *     carries exactly the released piece (a NUL byte as \u0000);
 *   - the released pieces joined equal the whole-sequence detokenization
 *     cut before the first stop string (or all of it), and contain no stop
 *     string;
 *   - the non-streamed body carries the same text.
 */
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/stop_strings.h"
#include "ft/tokenizer.h"

#include "http/responses.h"

#include "fuzz_vocab.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_IDS 512

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_load_vocabs("fuzz_stream_text");
    return 0;
}

/* The text a writer put in its JSON: choices[0].delta.content or .text or
 * .message.content. */
static const char *text_of(const cJSON *root) {
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(c0, "text");
    if (!t) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(c0, "delta");
        if (!d)
            d = cJSON_GetObjectItemCaseSensitive(c0, "message");
        t = cJSON_GetObjectItemCaseSensitive(d, "content");
    }
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static size_t count_escaped_nuls(const char *json) {
    size_t n = 0;
    for (const char *p = json; (p = strstr(p, "\\u0000")); p += 6)
        n++;
    return n;
}

/* cJSON decodes \u0000 into a C string, which ends there: compare up to the
 * first NUL, and count the escapes for the rest. */
static void check_json(char *json, const char *want, size_t want_len) {
    require(json != NULL, "a writer failed");
    require(ft_utf8_valid(json, strlen(json)), "a chunk is not valid UTF-8");
    cJSON *root = cJSON_Parse(json);
    require(root != NULL, "a chunk does not parse as JSON");
    const char *got = text_of(root);
    const char *nul = memchr(want, 0, want_len);
    const size_t head = nul ? (size_t)(nul - want) : want_len;
    size_t nuls = 0;
    for (size_t i = 0; i < want_len; i++)
        nuls += want[i] == '\0';
    require(got && strlen(got) == head && !memcmp(got, want, head), "a chunk carries other text");
    require(count_escaped_nuls(json) == nuls, "a NUL byte of the text is not in the chunk");
    cJSON_Delete(root);
    free(json);
}

static const struct ft_resp_ctx g_chat = {FT_API_CHAT, "chatcmpl-fuzz", 0, "m", false};
static const struct ft_resp_ctx g_comp = {FT_API_COMPLETIONS, "cmpl-fuzz", 0, "m", true};

/* One released piece: appended to the stream's text, and written as the
 * server writes it, in a chat chunk and a completion chunk. */
static void release(char *all, size_t *len, size_t cap, const char *out, size_t out_len) {
    if (!out_len)
        return;
    require(*len + out_len <= cap, "more text released than decoded");
    memcpy(all + *len, out, out_len);
    *len += out_len;
    char *z = malloc(out_len + 1); /* NUL-terminated after len, as the server's outbox */
    require(z != NULL, "out of memory");
    memcpy(z, out, out_len);
    z[out_len] = '\0';
    check_json(ft_resp_chunk_text(&g_chat, 0, z, out_len, NULL), z, out_len);
    check_json(ft_resp_chunk_text(&g_comp, 0, z, out_len, NULL), z, out_len);
    free(z);
}

static char *find_bytes(const char *h, size_t hl, const char *n, size_t nl) {
    if (nl == 0 || nl > hl)
        return NULL;
    for (size_t i = 0; i + nl <= hl; i++)
        if (!memcmp(h + i, n, nl))
            return (char *)h + i;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2 || g_n_loaded != N_VOCABS)
        return 0;
    const struct ft_tokenizer *t = g_tok[data[0] % N_VOCABS];
    const int want_stops = data[1] % 4;
    size_t pos = 2;
    const char *stops[3];
    int n_stops = 0;
    for (int i = 0; i < want_stops && pos < size; i++) {
        const char *s = (const char *)data + pos;
        const char *end = memchr(s, 0, size - pos);
        if (!end)
            return 0;
        pos += (size_t)(end - s) + 1;
        if (end > s && ft_utf8_valid(s, (size_t)(end - s)))
            stops[n_stops++] = s;
    }
    int32_t ids[MAX_IDS];
    size_t n = 0;
    const int32_t n_vocab = ft_tokenizer_n_vocab(t);
    for (; pos + 1 < size && n < MAX_IDS; pos += 2)
        ids[n++] = (int32_t)(((uint32_t)data[pos] | (uint32_t)data[pos + 1] << 8) % (uint32_t)n_vocab);

    /* The oracle: the whole sequence at once, cut before the first stop. */
    char *whole = NULL;
    size_t whole_len = 0;
    if (ft_detokenize(t, ids, n, false, &whole, &whole_len))
        return 0;
    size_t cut = whole_len;
    for (int i = 0; i < n_stops; i++) {
        const char *at = find_bytes(whole, whole_len, stops[i], strlen(stops[i]));
        if (at && (size_t)(at - whole) < cut)
            cut = (size_t)(at - whole);
    }

    struct ft_detok d;
    struct ft_stop_matcher sm;
    ft_detok_init(&d, t, false);
    ft_stop_init(&sm, stops, n_stops);
    char *released = malloc(whole_len + 1);
    size_t rl = 0;
    char piece[1024];
    const char *out;
    size_t out_len;
    for (size_t i = 0; i <= n && !sm.stopped && released; i++) {
        const int w = i < n ? ft_detok_push(&d, ids[i], piece, sizeof(piece)) : ft_detok_flush(&d, piece, sizeof(piece));
        require(w >= 0, "the detokenizer failed with a 1 KiB buffer");
        require(ft_stop_push(&sm, piece, (size_t)w, &out, &out_len) == 0, "the stop matcher failed");
        release(released, &rl, whole_len, out, out_len);
    }
    if (released && !sm.stopped) {
        ft_stop_flush(&sm, &out, &out_len); /* end of generation: what the matcher holds */
        release(released, &rl, whole_len, out, out_len);
    }
    if (released) {
        require(rl == cut && !memcmp(released, whole, rl), "released text differs from the decoded text");
        released[rl] = '\0';
        for (int i = 0; i < n_stops; i++)
            require(!find_bytes(released, rl, stops[i], strlen(stops[i])), "a stop string was released");
        const struct ft_request_metrics m = {0};
        const struct ft_resp_choice choice = {released, rl, FT_FINISH_STOP, NULL};
        check_json(ft_resp_completion(&g_chat, &choice, 1, &m, NULL), released, rl);
    }
    free(released);
    ft_stop_free(&sm);
    free(whole);
    return 0;
}
