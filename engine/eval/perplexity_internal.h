/* Shared between engine/eval/perplexity_eval.c and engine/eval/perplexity_logits.c. */
#ifndef FT_PERPLEXITY_INTERNAL_H
#define FT_PERPLEXITY_INTERNAL_H

#include "ft/atomic_file.h"

#include <stdint.h>

struct ft_logprob_file;

/* Read row k of a window without decoding it; checks (and logs) its scale
 * and offset, so ft_logprob_decode() of it cannot fail. */
int ft_logprob_file_read_raw(struct ft_logprob_file *f, int32_t chunk, int32_t k, uint16_t *row);

/* Start a log-probability file at `path` (atomically): header and tokens;
 * the caller appends rows with ft_atomic_file_write and commits. */
int ft_logprob_writer_open(struct ft_atomic_file *af, const char *path, int32_t n_ctx, int32_t n_vocab,
                           int32_t n_chunk, const int32_t *tokens);

#endif
