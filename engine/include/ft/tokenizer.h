/* Tokenizers read from GGUF `tokenizer.ggml.*` metadata:
 *   - "llama": SentencePiece-style (scores, byte fallback, ▁ for spaces);
 *   - "gpt2":  byte-level BPE (merges) with the pre-tokenizer named by
 *              `tokenizer.ggml.pre` (llama-bpe/llama3, qwen2, gpt2, ...).
 * Conformance: exact token-for-token equality with the vectors in
 * ../shared/vocab/.
 */
#ifndef FT_TOKENIZER_H
#define FT_TOKENIZER_H

#include "ft/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ft_tokenizer;

/* Build from a reader; the tokenizer copies what it needs, so the reader may
 * be closed afterwards. FT_EUNSUPPORTED names an unknown model/pre. */
int ft_tokenizer_load(const struct ft_gguf *g, struct ft_tokenizer **out);
void ft_tokenizer_free(struct ft_tokenizer *t); /* accepts NULL */

int32_t ft_tokenizer_n_vocab(const struct ft_tokenizer *t);
int32_t ft_tokenizer_bos(const struct ft_tokenizer *t); /* -1 if none */
int32_t ft_tokenizer_eos(const struct ft_tokenizer *t); /* -1 if none */
bool ft_tokenizer_add_bos(const struct ft_tokenizer *t);
bool ft_tokenizer_add_eos(const struct ft_tokenizer *t);
/* End of generation: eos, eot, <end_of_turn>, <|im_end|>, <|eot_id|>, ... */
bool ft_tokenizer_is_eog(const struct ft_tokenizer *t, int32_t id);
/* Control/special token (rendered as nothing when decoding plain text). */
bool ft_tokenizer_is_control(const struct ft_tokenizer *t, int32_t id);
/* All end-of-generation ids, sorted ascending (pointer valid while t lives);
 * returns their count. */
size_t ft_tokenizer_eog_ids(const struct ft_tokenizer *t, const int32_t **ids);
/* Longest decoded piece (bytes) of any token, special tokens rendered. */
size_t ft_tokenizer_max_piece_len(const struct ft_tokenizer *t);
/* Token id of an exact piece ("<end_of_turn>"), or -1. */
int32_t ft_tokenizer_find(const struct ft_tokenizer *t, const char *piece, size_t len);
/* The raw vocabulary string of a token (as stored in GGUF). */
struct ft_str ft_tokenizer_piece_raw(const struct ft_tokenizer *t, int32_t id);

/* Tokenize UTF-8 text (invalid UTF-8 is FT_EINVAL). add_special adds BOS/EOS
 * as the vocabulary asks; parse_special turns control-token text such as
 * "<start_of_turn>" into their ids. `*out` is malloc'd (caller frees). */
int ft_tokenize(const struct ft_tokenizer *t, const char *text, size_t len, bool add_special,
                bool parse_special, int32_t **out, size_t *n_out);

/* Byte range [start, end) of a text. */
struct ft_text_span {
    size_t start, end;
};

/* ft_tokenize() with special tokens parsed everywhere except in `plain`
 * (sorted, disjoint spans): text there never becomes a control token, and
 * a special token is only matched wholly inside or wholly outside a span.
 * With no special-token text in the spans the ids equal ft_tokenize()'s
 * with parse_special. For chat prompts: the template's markers are
 * special, the messages' text is plain. */
int ft_tokenize_spans(const struct ft_tokenizer *t, const char *text, size_t len, bool add_special,
                      const struct ft_text_span *plain, size_t n_plain, int32_t **out, size_t *n_out);

/* The bytes a token stands for when decoding (byte-fallback tokens give the
 * raw byte, ▁ gives a space, byte-level BPE symbols their bytes; control
 * tokens give "" unless render_special). Returns the byte count (may exceed
 * cap, as snprintf; nothing beyond cap is written) or a negative FT_E*. */
int ft_token_to_piece(const struct ft_tokenizer *t, int32_t id, bool render_special, char *buf,
                      size_t cap);

/* Incremental detokenizer for streaming: feed tokens one at a time and get
 * back only complete UTF-8 characters; an incomplete sequence is held until
 * the next token completes it, and ft_detok_flush() returns what is left
 * (invalid bytes replaced with U+FFFD). Handles the SentencePiece rule that
 * the first token's leading space is dropped when BOS was added. */
struct ft_detok {
    const struct ft_tokenizer *t;
    char pending[8];    /* an incomplete UTF-8 sequence (at most 3 bytes) */
    int n_pending;
    bool at_start;      /* BOS was just pushed: drop the next piece's leading space */
    bool render_special;
};
void ft_detok_init(struct ft_detok *d, const struct ft_tokenizer *t, bool render_special);
/* Appends the complete text produced by `id` to out (cap bytes); returns the
 * number of bytes written or a negative FT_E* (FT_ERANGE if cap too small,
 * in which case the state is unchanged and the push may be retried with a
 * larger buffer). 3 * (ft_tokenizer_max_piece_len(t) + 3) bytes always
 * suffice (invalid bytes expand to U+FFFD); for the supported vocabularies a
 * piece is at most 128 bytes, so 256 bytes hold any piece that is valid UTF-8.
 * Only a stream that starts with BOS (a whole prompt) drops the first
 * piece's leading space; a stream of generated tokens keeps it. */
int ft_detok_push(struct ft_detok *d, int32_t id, char *out, size_t cap);
/* Emits what is pending (an incomplete sequence becomes one U+FFFD) and
 * resets the stream; needs 3 bytes. */
int ft_detok_flush(struct ft_detok *d, char *out, size_t cap);

/* Whole-sequence decode through the streaming detokenizer (same rules);
 * `*out` is malloc'd and NUL-terminated (caller frees). */
int ft_detokenize(const struct ft_tokenizer *t, const int32_t *ids, size_t n, bool render_special, char **out,
                  size_t *len);

/* UTF-8 validation (strict: no overlongs, no surrogates, <= U+10FFFF). */
bool ft_utf8_valid(const char *s, size_t len);

#endif
