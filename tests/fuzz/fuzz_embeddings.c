/* libFuzzer target for the bodies of POST /v1/embeddings, /tokenize and
 * /detokenize (http/embeddings.c, http/tokenize.c), with the Llama
 * SentencePiece vocabulary of ../shared/vocab.
 *
 * Input layout: one byte picking the route (low two bits: embeddings,
 * tokenize, detokenize), then the body. Must never crash, leak, hang or
 * trip a sanitizer; 400s are fine. An accepted embeddings request must be
 * what the scheduler relies on: 1..2048 inputs of 1..n_ctx tokens inside the
 * vocabulary, offsets increasing; its response (from arbitrary vectors,
 * both encodings) must be JSON; every answer of the other routes valid JSON.
 * Seeds: tests/fuzz/corpus/embeddings.
 */
#include "http/embeddings.h"
#include "http/tokenize.h"

#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/tokenizer.h"
#include "fuzz_common.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define N_CTX 64
#define N_EMBD 8

static struct ft_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    ft_log_set_sink(fuzz_quiet_sink, NULL);
    char path[4096];
    g_tok = fuzz_load_vocab("fuzz_embeddings", "ggml-vocab-llama-spm.gguf", path, sizeof(path));
    if (!g_tok)
        fprintf(stderr, "fuzz_embeddings: SKIPPED: %s not found (set FT_SHARED_DIR to the shared/ folder)\n", path);
    return 0;
}

static void require_json(char *s) {
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    require(j != NULL, "a response is not JSON");
    cJSON_Delete(j);
    free(s);
}

static void embeddings(const char *body, size_t len) {
    const int32_t n_vocab = ft_tokenizer_n_vocab(g_tok);
    struct ft_embd_request r;
    struct ft_api_error err;
    if (ft_embd_parse(body, len, n_vocab, &r, &err)) {
        require(err.status == 400 || err.status == 500, "parse error status");
        return;
    }
    /* pooling from the body's length: absent, mean, cls, last, none */
    const int32_t pooling = (int32_t)(len % 5) - 1;
    if (ft_embd_prepare(&r, g_tok, N_CTX, N_EMBD, pooling, &err)) {
        require(err.status == 400 || err.status == 500, "prepare error status");
        ft_embd_request_free(&r);
        return;
    }
    require(r.n_inputs >= 1 && r.n_inputs <= FT_EMBD_MAX_INPUTS, "input count");
    require(r.job.offs[0] == 0 && r.job.out == r.out, "job");
    for (int32_t i = 0; i < r.n_inputs; i++) {
        const int32_t n = r.offs[i + 1] - r.offs[i];
        require(n >= 1 && n <= N_CTX, "input length");
        for (int32_t k = r.offs[i]; k < r.offs[i + 1]; k++)
            require(r.tokens[k] >= 0 && r.tokens[k] < n_vocab, "token id");
    }
    for (size_t i = 0; i < (size_t)r.n_inputs * N_EMBD; i++)
        r.out[i] = (float)((int)(i % 7) - 3) * 0.25f; /* zero vectors included */
    struct ft_request_metrics m = {.prompt_tokens = r.offs[r.n_inputs], .prefill_tokens = r.offs[r.n_inputs]};
    require_json(ft_embd_response(&r, "model", &m, len & 1));
    r.base64 = !r.base64;
    require_json(ft_embd_response(&r, "model", &m, false));
    ft_embd_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_tok || size < 1 || size > (1u << 20))
        return 0;
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    struct ft_api_error err;
    switch (data[0] & 3) {
    case 0:
    case 3: embeddings(body, len); break;
    case 1: {
        char *s = ft_tokenize_handle(g_tok, body, len, &err);
        if (s)
            require_json(s);
        else
            require(err.status == 400 || err.status == 500, "tokenize error status");
        break;
    }
    case 2: {
        char *s = ft_detokenize_handle(g_tok, body, len, &err);
        if (s)
            require_json(s);
        else
            require(err.status == 400 || err.status == 500, "detokenize error status");
        break;
    }
    }
    return 0;
}
