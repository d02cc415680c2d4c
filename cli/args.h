/* Table-driven command-line parsing shared by every `ft` subcommand, so all
 * of them accept the same forms (-m X, --model X, --model=X) and print
 * --help from the same table they parse with. */
#ifndef FT_CLI_ARGS_H
#define FT_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

enum ft_opt_kind {
    FT_OPT_STR,      /* const char ** */
    FT_OPT_STR_LIST, /* struct ft_str_list * (repeatable) */
    FT_OPT_INT,      /* int * */
    FT_OPT_U64,      /* uint64_t * */
    FT_OPT_FLOAT,    /* float * */
    FT_OPT_FLAG,     /* bool * (no value) */
};

struct ft_str_list {
    const char *items[32];
    int n;
};

struct ft_opt {
    const char *short_name; /* "-m" or NULL */
    const char *long_name;  /* "--model" */
    enum ft_opt_kind kind;
    void *dest;
    const char *metavar; /* "FILE" */
    const char *help;
};

struct ft_cmd_spec {
    const char *name;  /* "run" */
    const char *usage; /* "ft run -m MODEL.gguf -p PROMPT [options]" */
    const char *about; /* one paragraph */
    const struct ft_opt *opts;
    int n_opts;
    int max_positional; /* positional arguments accepted */
};

/* Parse argv (argv[0] is the subcommand name). Positional arguments are
 * stored in positional[0..*n_positional). Returns 0 on success, 1 if help
 * was printed (caller exits 0), -1 on error (one line printed, exit 2). */
int ft_args_parse(const struct ft_cmd_spec *spec, int argc, char **argv, const char **positional,
                  int *n_positional);
void ft_args_print_help(const struct ft_cmd_spec *spec);

/* ft_args_parse for a command that takes no positional arguments
 * (max_positional 0), its result turned into what the command returns:
 * FT_ARGS_GO_ON to carry on, else the exit status (0 after --help, 2 after
 * a usage error, whose line is printed). */
#define FT_ARGS_GO_ON (-1)
int ft_args_parse_opts(const struct ft_cmd_spec *spec, int argc, char **argv);

/* Parse "1,2,4" into ints; returns count or -1. */
int ft_args_parse_int_list(const char *s, int *out, int cap);

#endif
