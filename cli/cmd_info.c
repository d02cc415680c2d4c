/* ft info: what a GGUF file holds and whether FreeToken can run it. */
#include "args.h"
#include "cli.h"
#include "common_model.h"
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/model.h"
#include "ft/topology.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define INFO_ARRAY_PREVIEW 6   /* elements shown of a long array */
#define INFO_STRING_PREVIEW 120 /* bytes shown of a long string */

/* Print a string with control characters escaped, cut at `max` bytes. */
static void print_escaped(const char *s, size_t len, size_t max) {
    size_t n = len < max ? len : max;
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('"');
    if (len > max)
        printf("... (%zu bytes)", len);
}

static void print_number(enum ft_gguf_vtype t, const void *p) {
    switch (t) {
    case FT_GGUF_UINT8: printf("%u", *(const uint8_t *)p); break;
    case FT_GGUF_INT8: printf("%d", *(const int8_t *)p); break;
    case FT_GGUF_UINT16: printf("%u", *(const uint16_t *)p); break;
    case FT_GGUF_INT16: printf("%d", *(const int16_t *)p); break;
    case FT_GGUF_UINT32: printf("%" PRIu32, *(const uint32_t *)p); break;
    case FT_GGUF_INT32: printf("%" PRId32, *(const int32_t *)p); break;
    case FT_GGUF_UINT64: printf("%" PRIu64, *(const uint64_t *)p); break;
    case FT_GGUF_INT64: printf("%" PRId64, *(const int64_t *)p); break;
    case FT_GGUF_FLOAT32: printf("%.9g", *(const float *)p); break;
    case FT_GGUF_FLOAT64: printf("%.17g", *(const double *)p); break;
    case FT_GGUF_BOOL: printf("%s", *(const uint8_t *)p ? "true" : "false"); break;
    default: printf("?"); break;
    }
}

static void print_kv(const struct ft_gguf *g, int64_t i) {
    struct ft_str key = ft_gguf_kv_key(g, i);
    enum ft_gguf_vtype t = ft_gguf_kv_type(g, i);
    char keybuf[256];
    snprintf(keybuf, sizeof(keybuf), "%.*s", (int)FT_MIN(key.len, sizeof(keybuf) - 1), key.s);
    printf("  %-44s ", keybuf);
    if (t == FT_GGUF_STRING) {
        struct ft_str s;
        ft_gguf_get_str(g, keybuf, &s);
        print_escaped(s.s, s.len, INFO_STRING_PREVIEW);
    } else if (t == FT_GGUF_ARRAY) {
        enum ft_gguf_vtype at = ft_gguf_kv_arr_type(g, i);
        uint64_t n = ft_gguf_kv_arr_n(g, i);
        printf("[%s x %" PRIu64 "]", ft_gguf_vtype_name(at), n);
        if (at == FT_GGUF_STRING) {
            const struct ft_str *strs;
            uint64_t m;
            if (ft_gguf_get_arr_str(g, keybuf, &strs, &m) == 0) {
                printf(" ");
                for (uint64_t j = 0; j < m && j < INFO_ARRAY_PREVIEW; j++) {
                    print_escaped(strs[j].s, strs[j].len, 24);
                    printf(j + 1 < m ? ", " : "");
                }
                if (m > INFO_ARRAY_PREVIEW)
                    printf("...");
            }
        } else if (at != FT_GGUF_ARRAY) {
            enum ft_gguf_vtype et;
            const void *data;
            uint64_t m;
            if (ft_gguf_get_arr(g, keybuf, &et, &data, &m) == 0) {
                printf(" ");
                size_t es = ft_gguf_vtype_size(et);
                for (uint64_t j = 0; j < m && j < INFO_ARRAY_PREVIEW; j++) {
                    print_number(et, (const char *)data + j * es);
                    printf(j + 1 < m ? ", " : "");
                }
                if (m > INFO_ARRAY_PREVIEW)
                    printf("...");
            }
        }
    } else {
        size_t sz;
        const void *raw = ft_gguf_kv_raw(g, i, &sz);
        uint64_t tmp[1] = {0};
        memcpy(tmp, raw, sz < sizeof(tmp) ? sz : sizeof(tmp)); /* the mapping may be unaligned */
        print_number(t, tmp);
    }
    printf("\n");
}

static void format_bytes(double b, char *buf, size_t cap) {
    if (b >= 1 << 30)
        snprintf(buf, cap, "%.2f GiB", b / (1 << 30));
    else if (b >= 1 << 20)
        snprintf(buf, cap, "%.2f MiB", b / (1 << 20));
    else if (b >= 1 << 10)
        snprintf(buf, cap, "%.2f KiB", b / (1 << 10));
    else
        snprintf(buf, cap, "%.0f B", b);
}

/* ft info --hw: the machine, and where threads and weights would go. */
static int info_hw(int threads, const char *numa, int numa_node) {
    struct ft_model_params mp;
    if (ft_cli_model_params("info", threads, numa, numa_node, &mp))
        return 2;
    int rc = ft_hw_report(stdout);
    if (rc == FT_OK)
        rc = ft_hw_report_placement(stdout, mp.n_threads, mp.numa, mp.numa_node);
    if (rc) {
        ft_cli_error("info", rc, "reading the hardware topology");
        return 1;
    }
    return 0;
}

int ft_cmd_info(int argc, char **argv) {
    bool no_tensors = false, hw = false;
    const char *model_opt = NULL, *numa = NULL;
    int threads = 0, numa_node = -1;
    const struct ft_opt opts[] = {
        {"-m", "--model", FT_OPT_STR, &model_opt, "FILE", "GGUF file (or give it as the argument)"},
        {NULL, "--no-tensors", FT_OPT_FLAG, &no_tensors, NULL, "omit the tensor table"},
        {NULL, "--hw", FT_OPT_FLAG, &hw, NULL,
         "print the hardware instead: ISA, cores, NUMA nodes, caches, and where threads would run"},
        {"-t", "--threads", FT_OPT_INT, &threads, "N", "with --hw: " FT_CLI_HELP_THREADS},
        {NULL, "--numa", FT_OPT_STR, &numa, "MODE", "with --hw: " FT_CLI_HELP_NUMA},
        {NULL, "--numa-node", FT_OPT_INT, &numa_node, "N", "with --hw: " FT_CLI_HELP_NUMA_NODE},
    };
    const struct ft_cmd_spec spec = {
        "info", "ft info MODEL.gguf [--no-tensors] | ft info --hw [-t N] [--numa MODE]",
        "Prints the file's metadata (long arrays summarized), its tensors (name, type, shape, bytes),\n"
        "parameter count, size, bits per weight, and whether FreeToken can run it.\n"
        "With --hw, prints what was detected about this machine instead, and the thread and\n"
        "weight placement that -t and --numa would give.",
        opts, (int)FT_ARRAY_LEN(opts), 1};
    const char *pos[1];
    int n_pos;
    int r = ft_args_parse(&spec, argc, argv, pos, &n_pos);
    if (r)
        return r > 0 ? 0 : 2;
    if (hw)
        return info_hw(threads, numa, numa_node);
    if (threads || numa || numa_node != -1) {
        fprintf(stderr, "ft info: -t, --numa and --numa-node go with --hw\n");
        return 2;
    }
    const char *path = n_pos ? pos[0] : model_opt;
    if (!path && !(path = ft_cli_default_model("info")))
        return 2;

    struct ft_gguf *g = NULL;
    int rc = ft_gguf_open(path, &g);
    if (rc) {
        ft_cli_error("info", rc, path);
        return 1;
    }
    printf("file:      %s\n", path);
    printf("format:    GGUF v%u, %" PRId64 " metadata keys, %" PRId64 " tensors, alignment %zu\n",
           ft_gguf_version(g), ft_gguf_n_kv(g), ft_gguf_n_tensors(g), ft_gguf_alignment(g));
    printf("\nmetadata:\n");
    for (int64_t i = 0; i < ft_gguf_n_kv(g); i++)
        print_kv(g, i);

    uint64_t n_params = 0, tensor_bytes = 0;
    uint64_t type_count[FT_TYPE_COUNT] = {0};
    if (!no_tensors && ft_gguf_n_tensors(g) > 0)
        printf("\ntensors:\n  %-40s %-6s %-24s %12s\n", "name", "type", "shape", "bytes");
    for (int64_t i = 0; i < ft_gguf_n_tensors(g); i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
        uint64_t ne = 1;
        char shape[64] = "";
        size_t off = 0;
        for (int d = 0; d < t->n_dims; d++) {
            ne *= (uint64_t)t->ne[d];
            off += (size_t)snprintf(shape + off, sizeof(shape) - off, d ? " x %" PRId64 : "%" PRId64, t->ne[d]);
            if (off >= sizeof(shape))
                break;
        }
        n_params += ne;
        tensor_bytes += t->size;
        if ((unsigned)t->type < FT_TYPE_COUNT)
            type_count[t->type]++;
        if (!no_tensors)
            printf("  %-40.*s %-6s %-24s %12zu\n", (int)t->name.len, t->name.s, ft_type_name(t->type),
                   shape, t->size);
    }

    char fsz[32], tsz[32];
    format_bytes((double)ft_gguf_file_size(g), fsz, sizeof(fsz));
    format_bytes((double)tensor_bytes, tsz, sizeof(tsz));
    printf("\nsummary:\n");
    printf("  parameters:       %" PRIu64 " (%.3f B)\n", n_params, (double)n_params / 1e9);
    printf("  file size:        %s (%zu bytes)\n", fsz, ft_gguf_file_size(g));
    printf("  tensor data:      %s\n", tsz);
    if (n_params)
        printf("  bits per weight:  %.3f\n", (double)tensor_bytes * 8.0 / (double)n_params);
    printf("  tensor types:    ");
    for (int t = 0; t < FT_TYPE_COUNT; t++)
        if (type_count[t])
            printf(" %s x%" PRIu64, ft_type_name((enum ft_type)t), type_count[t]);
    printf("\n");

    /* "Can run" means exactly what loading does: the same validation. */
    if (ft_gguf_n_tensors(g) == 0) {
        printf("  can run:          no (no tensors: a vocabulary-only file; ft tokenize can use it)\n");
    } else {
        struct ft_model *m = NULL;
        struct ft_model_params mp = {.n_threads = 1, .mmap = true}; /* nothing runs: no copy */
        ft_clear_error();
        rc = ft_model_load(path, &mp, &m);
        if (rc == 0) {
            const struct ft_hparams *hp = ft_model_hparams(m);
            printf("  can run:          yes (%s, %d layers, n_embd %d, %d heads / %d KV heads, vocab %d, "
                   "context %d)\n",
                   hp->arch_name, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->n_vocab,
                   hp->n_ctx_train);
        } else {
            printf("  can run:          no: %s\n", *ft_last_error() ? ft_last_error() : ft_strerror(rc));
        }
        ft_model_free(m);
    }
    ft_gguf_close(g);
    return 0;
}
