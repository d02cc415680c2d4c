/* Command-line parsing for `ft` subcommands (see args.h). Numbers are parsed
 * strictly: the whole argument must be a number in range, so "-n 12x" is an
 * error rather than 12. */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct ft_opt *find_opt(const struct ft_cmd_spec *spec, const char *name, size_t len) {
    for (int i = 0; i < spec->n_opts; i++) {
        const struct ft_opt *o = &spec->opts[i];
        if (o->long_name && strlen(o->long_name) == len && !strncmp(o->long_name, name, len))
            return o;
        if (o->short_name && strlen(o->short_name) == len && !strncmp(o->short_name, name, len))
            return o;
    }
    return NULL;
}

static int set_value(const struct ft_cmd_spec *spec, const struct ft_opt *o, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case FT_OPT_STR:
        *(const char **)o->dest = v;
        return 0;
    case FT_OPT_STR_LIST: {
        struct ft_str_list *l = o->dest;
        if (l->n >= (int)(sizeof(l->items) / sizeof(l->items[0]))) {
            fprintf(stderr, "ft %s: too many %s options (at most 32)\n", spec->name, o->long_name);
            return -1;
        }
        l->items[l->n++] = v;
        return 0;
    }
    case FT_OPT_INT: {
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end || x < -2147483647L || x > 2147483647L) {
            fprintf(stderr, "ft %s: %s expects an integer, got '%s'\n", spec->name, o->long_name, v);
            return -1;
        }
        *(int *)o->dest = (int)x;
        return 0;
    }
    case FT_OPT_U64: {
        if (*v == '-') {
            fprintf(stderr, "ft %s: %s expects a non-negative integer, got '%s'\n", spec->name,
                    o->long_name, v);
            return -1;
        }
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || end == v || *end) {
            fprintf(stderr, "ft %s: %s expects a non-negative integer, got '%s'\n", spec->name,
                    o->long_name, v);
            return -1;
        }
        *(uint64_t *)o->dest = (uint64_t)x;
        return 0;
    }
    case FT_OPT_FLOAT: {
        float x = strtof(v, &end);
        if (errno || end == v || *end || !isfinite(x)) {
            fprintf(stderr, "ft %s: %s expects a number, got '%s'\n", spec->name, o->long_name, v);
            return -1;
        }
        *(float *)o->dest = x;
        return 0;
    }
    case FT_OPT_FLAG:
        *(bool *)o->dest = true;
        return 0;
    }
    return -1;
}

int ft_args_parse(const struct ft_cmd_spec *spec, int argc, char **argv, const char **positional,
                  int *n_positional) {
    *n_positional = 0;
    bool only_positional = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_positional && (!strcmp(a, "-h") || !strcmp(a, "--help"))) {
            ft_args_print_help(spec);
            return 1;
        }
        if (!only_positional && !strcmp(a, "--")) {
            only_positional = true;
            continue;
        }
        if (!only_positional && a[0] == '-' && a[1] != '\0') {
            const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
            size_t len = eq ? (size_t)(eq - a) : strlen(a);
            const struct ft_opt *o = find_opt(spec, a, len);
            if (!o) {
                fprintf(stderr, "ft %s: unknown option '%.*s' (see ft %s --help)\n", spec->name, (int)len,
                        a, spec->name);
                return -1;
            }
            if (o->kind == FT_OPT_FLAG) {
                if (eq) {
                    fprintf(stderr, "ft %s: %s takes no value\n", spec->name, o->long_name);
                    return -1;
                }
                set_value(spec, o, NULL);
                continue;
            }
            const char *v = eq ? eq + 1 : NULL;
            if (!v) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "ft %s: %s needs a value (%s)\n", spec->name, o->long_name,
                            o->metavar ? o->metavar : "VALUE");
                    return -1;
                }
                v = argv[++i];
            }
            if (set_value(spec, o, v))
                return -1;
            continue;
        }
        if (*n_positional >= spec->max_positional) {
            fprintf(stderr, "ft %s: unexpected argument '%s' (see ft %s --help)\n", spec->name, a,
                    spec->name);
            return -1;
        }
        positional[(*n_positional)++] = a;
    }
    return 0;
}

int ft_args_parse_opts(const struct ft_cmd_spec *spec, int argc, char **argv) {
    const char *unused[1]; /* max_positional 0: never written */
    int n;
    int r = ft_args_parse(spec, argc, argv, unused, &n);
    if (r)
        return r > 0 ? 0 : 2;
    return FT_ARGS_GO_ON;
}

void ft_args_print_help(const struct ft_cmd_spec *spec) {
    printf("usage: %s\n\n%s\n\noptions:\n", spec->usage, spec->about);
    for (int i = 0; i < spec->n_opts; i++) {
        const struct ft_opt *o = &spec->opts[i];
        char left[64];
        snprintf(left, sizeof(left), "%s%s%s%s%s", o->short_name ? o->short_name : "",
                 o->short_name ? ", " : "    ", o->long_name, o->kind == FT_OPT_FLAG ? "" : " ",
                 o->kind == FT_OPT_FLAG ? "" : (o->metavar ? o->metavar : "VALUE"));
        printf("  %-28s %s\n", left, o->help);
    }
    printf("  %-28s %s\n", "-h, --help", "show this help and exit");
}

int ft_args_parse_int_list(const char *s, int *out, int cap) {
    int n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (errno || end == s || x < 0 || x > 1 << 20 || n >= cap)
            return -1;
        out[n++] = (int)x;
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return n;
}
