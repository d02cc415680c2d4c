/* Small text formats that more than one subcommand writes: quoted CSV
 * fields (ft bench -o csv, ft compare's .csv) and llama.cpp's model size
 * labels (ft gen-model writes one, ft bench shows one). */
#ifndef FT_CLI_FORMAT_H
#define FT_CLI_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* s as one CSV field: in double quotes, each '"' doubled (RFC 4180). */
void ft_cli_csv_str(FILE *f, const char *s);

/* "1.2B", "270M", "1.3M", "800K" for n parameters: the size label
 * llama.cpp's converter writes as general.size_label. */
void ft_cli_size_label(uint64_t n, char *buf, size_t cap);

#endif
