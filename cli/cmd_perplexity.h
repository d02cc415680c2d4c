/* Pieces of ft perplexity that ft compare reuses. */
#ifndef FT_CLI_CMD_PERPLEXITY_H
#define FT_CLI_CMD_PERPLEXITY_H

#include "ft/model.h"
#include "ft/perplexity.h"

#include <stdint.h>
#include <stdio.h>

/* Read a UTF-8 text file (at most 256 MiB) and tokenize it as llama.cpp's
 * perplexity tool does (special tokens added: BOS first when the vocabulary
 * adds one; control-token text not parsed). Prints one error line and
 * returns -1 on failure, else the token count (*out malloc'd). */
int64_t ft_cli_tokenize_file(const char *cmd, const struct ft_model *m, const char *path, int32_t **out);

/* The report blocks llama.cpp's perplexity tool prints after a KLD run. */
void ft_cli_print_ppl_stats(FILE *f, const struct ft_ppl_stats *s);

#endif
