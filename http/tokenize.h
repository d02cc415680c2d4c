/* POST /tokenize and POST /detokenize in llama-server's shapes, answered on
 * the HTTP thread (the tokenizer is read-only once loaded):
 *
 *   /tokenize   {"content": "text", "add_special": false, "parse_special": true, "with_pieces": false}
 *               -> {"tokens": [id, ...]}, or with_pieces
 *               -> {"tokens": [{"id": id, "piece": "text" | [byte, ...]}, ...]}
 *                  (a piece that is not valid UTF-8 on its own, such as one
 *                  byte of a multi-byte character, is its byte values)
 *   /detokenize {"tokens": [id, ...]} -> {"content": "text"}
 *
 * As llama-server: add_special adds BOS/EOS as the vocabulary asks,
 * parse_special turns control-token text into its id, pieces render special
 * tokens as their text, and detokenizing concatenates the pieces (no
 * leading space is dropped); bytes that do not form UTF-8 there become
 * U+FFFD. Stricter than llama-server: content is required and must be a
 * string, ids must be integers in the vocabulary, and a text may give at
 * most FT_TOKENIZE_MAX_TOKENS tokens. */
#ifndef FT_HTTP_TOKENIZE_H
#define FT_HTTP_TOKENIZE_H

#include "request_parse.h"

#include "ft/tokenizer.h"

#include <stddef.h>

#define FT_TOKENIZE_MAX_TOKENS (1 << 20)

/* The response body (malloc'd), or NULL with *err filled (400 for the
 * request, 500 out of memory). */
char *ft_tokenize_handle(const struct ft_tokenizer *tok, const char *body, size_t len,
                         struct ft_api_error *err /* OUT */);
char *ft_detokenize_handle(const struct ft_tokenizer *tok, const char *body, size_t len,
                           struct ft_api_error *err /* OUT */);

#endif
