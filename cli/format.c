/* Text formats shared by the subcommands (cli/format.h). */
#include "format.h"

void ft_cli_csv_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void ft_cli_size_label(uint64_t n, char *buf, size_t cap) {
    if (n >= 1000000000ull)
        snprintf(buf, cap, "%.1fB", (double)n / 1e9);
    else if (n >= 10000000ull)
        snprintf(buf, cap, "%.0fM", (double)n / 1e6);
    else if (n >= 1000000ull)
        snprintf(buf, cap, "%.1fM", (double)n / 1e6);
    else
        snprintf(buf, cap, "%.0fK", (double)n / 1e3);
}
