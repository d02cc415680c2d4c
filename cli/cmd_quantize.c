/* ft quantize: write a GGUF model in another quantization format, with the
 * per-tensor types llama-quantize would choose (engine/eval/quantize_plan.c). */
#include "args.h"
#include "cli.h"
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct progress_state {
    bool tty;
    bool warned_requant;
    int last_len;
};

static void on_progress(void *ud, const struct ft_quant_progress *p) {
    struct progress_state *s = ud;
    const struct ft_type_info *from = ft_type_info(p->from);
    if (!s->warned_requant && p->from != p->to && from && from->is_quantized) {
        s->warned_requant = true;
        if (s->tty && s->last_len)
            fputc('\n', stderr);
        s->last_len = 0;
        fprintf(stderr,
                "ft quantize: warning: the input is already quantized (%s in %s): converting it adds a second "
                "rounding error on top of the first; quantize from an F32/F16/BF16 file when you have one\n",
                from->name, p->name);
    }
    if (!s->tty)
        return;
    double pct = p->bytes_total ? 100.0 * (double)p->bytes_done / (double)p->bytes_total : 0.0;
    s->last_len = fprintf(stderr, "\r[%4lld/%4lld] %5.1f%%  %-40.40s %6s -> %-6s\033[K", (long long)p->i_tensor,
                          (long long)p->n_tensors, pct, p->name, ft_type_name(p->from), ft_type_name(p->to));
    fflush(stderr);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --dry-run: the plan, without writing. */
static int print_plan(const char *in, enum ft_ftype ftype, bool pure, const struct ft_quant_override *ov, int n_ov) {
    struct ft_gguf *g = NULL;
    int rc = ft_gguf_open(in, &g);
    if (rc) {
        ft_cli_error("quantize", rc, in);
        return 1;
    }
    int64_t n = ft_gguf_n_tensors(g);
    struct ft_quant_tensor *qt = calloc((size_t)(n ? n : 1), sizeof(*qt));
    struct ft_quant_choice *ch = calloc((size_t)(n ? n : 1), sizeof(*ch));
    size_t *order = calloc((size_t)(n ? n : 1), sizeof(*order));
    char **names = calloc((size_t)(n ? n : 1), sizeof(*names));
    struct ft_quant_model_info mi;
    int status = 1;
    if (!qt || !ch || !order || !names) {
        fprintf(stderr, "ft quantize: out of memory\n");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
        names[i] = strndup(t->name.s, t->name.len);
        if (!names[i]) {
            fprintf(stderr, "ft quantize: out of memory\n");
            goto done;
        }
        qt[i] = (struct ft_quant_tensor){.name = names[i], .type = t->type};
        memcpy(qt[i].ne, t->ne, sizeof(qt[i].ne));
    }
    if ((rc = ft_quant_model_info_read(g, &mi)) || (rc = ft_quant_choose(&mi, qt, (size_t)n, ftype, pure, ov, n_ov, ch))) {
        ft_cli_error("quantize", rc, in);
        goto done;
    }
    ft_quant_order(qt, (size_t)n, order);
    uint64_t in_bytes = 0, out_bytes = 0, params = 0;
    printf("%-44s %-18s %-6s    %-6s %s\n", "tensor", "shape", "from", "to", "bytes");
    for (int64_t k = 0; k < n; k++) {
        size_t i = order[k];
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, (int64_t)i);
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        size_t ob = ft_row_size(ch[i].type, t->ne[0]) * (size_t)rows;
        char shape[64];
        snprintf(shape, sizeof(shape), t->n_dims > 1 ? "%lld x %lld" : "%lld", (long long)t->ne[0],
                 (long long)(t->n_dims > 1 ? rows : 0));
        printf("%-44s %-18s %-6s -> %-6s %zu%s\n", names[i], shape, ft_type_name(t->type), ft_type_name(ch[i].type),
               ob, ch[i].fallback ? "  (fallback: rows not a multiple of 256)" : "");
        in_bytes += t->size;
        out_bytes += ob;
        params += (uint64_t)(t->ne[0] * rows);
    }
    printf("\n%lld tensors, %.2f MiB -> %.2f MiB, %.3f bits per weight\n", (long long)n, in_bytes / 1048576.0,
           out_bytes / 1048576.0, params ? 8.0 * (double)out_bytes / (double)params : 0.0);
    status = 0;
done:
    for (int64_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
    free(order);
    free(ch);
    free(qt);
    ft_gguf_close(g);
    return status;
}

static void print_types_help(void) {
    const struct ft_ftype_desc *list;
    size_t n = ft_ftype_list(&list);
    printf("\ntypes (Q3_K, Q4_K, Q5_K are the _M mixes, as in llama-quantize):\n");
    for (size_t i = 0; i < n; i++)
        printf("  %-8s %s\n", list[i].name, list[i].about);
}

int ft_cmd_quantize(int argc, char **argv) {
    int threads = 0;
    bool pure = false, dry_run = false;
    struct ft_str_list keep = {0};
    const struct ft_opt opts[] = {
        {"-t", "--threads", FT_OPT_INT, &threads, "N", "threads (default: one per CPU)"},
        {NULL, "--keep", FT_OPT_STR_LIST, &keep, "GLOB=TYPE",
         "give tensors matching GLOB this type, e.g. 'token_embd.weight=Q8_0' (repeatable; first match wins)"},
        {NULL, "--pure", FT_OPT_FLAG, &pure, NULL, "no mixture: every quantizable tensor gets TYPE's base type"},
        {NULL, "--dry-run", FT_OPT_FLAG, &dry_run, NULL, "print each tensor's type and size, write nothing"},
    };
    const struct ft_cmd_spec spec = {
        "quantize", "ft quantize [options] IN.gguf OUT.gguf TYPE",
        "Writes IN in quantization format TYPE, choosing each tensor's type as llama.cpp's llama-quantize\n"
        "does (same types, and the same bytes, as llama-quantize without an importance matrix). Metadata is\n"
        "kept; general.file_type is set. OUT appears only when complete, and may not be IN. Quantizing an\n"
        "already quantized file works but warns: the errors add up.",
        opts, (int)FT_ARRAY_LEN(opts), 3};
    const char *pos[3];
    int n_pos;
    int r = ft_args_parse(&spec, argc, argv, pos, &n_pos);
    if (r) {
        if (r > 0)
            print_types_help();
        return r > 0 ? 0 : 2;
    }
    if (n_pos != 3) {
        fprintf(stderr, "ft quantize: expected IN.gguf OUT.gguf TYPE (see ft quantize --help)\n");
        return 2;
    }
    const char *in = pos[0], *out = pos[1];
    const struct ft_ftype_desc *fd = ft_ftype_by_name(pos[2]);
    if (!fd) {
        fprintf(stderr, "ft quantize: unknown type '%s' (see ft quantize --help for the list)\n", pos[2]);
        return 2;
    }
    if (threads < 0) {
        fprintf(stderr, "ft quantize: --threads must be positive\n");
        return 2;
    }
    struct ft_quant_override ov[32];
    for (int i = 0; i < keep.n; i++) {
        const char *eq = strrchr(keep.items[i], '=');
        if (!eq || eq == keep.items[i] || ft_quant_type_parse(eq + 1, &ov[i].type) != 0) {
            fprintf(stderr, "ft quantize: --keep expects GLOB=TYPE with a type such as Q8_0 or F16, got '%s'\n",
                    keep.items[i]);
            return 2;
        }
        /* The glob is the part before '=' (argv is writable). */
        ((char *)eq)[0] = '\0';
        ov[i].glob = keep.items[i];
    }
    if (dry_run)
        return print_plan(in, fd->ftype, pure, ov, keep.n);

    struct progress_state ps = {.tty = isatty(STDERR_FILENO) == 1};
    struct ft_quant_params qp = {.ftype = fd->ftype, .n_threads = threads, .pure = pure, .overrides = ov,
                                 .n_overrides = keep.n, .progress = on_progress, .progress_ud = &ps};
    struct ft_quant_report rep;
    double t0 = now_s();
    int rc = ft_quantize_file(in, out, &qp, &rep);
    if (ps.tty && ps.last_len)
        fprintf(stderr, "\r\033[K");
    if (rc) {
        ft_cli_error("quantize", rc, in);
        return 1;
    }
    double bpw = rep.n_params ? 8.0 * (double)rep.bytes_out / (double)rep.n_params : 0.0;
    fprintf(stderr, "ft quantize: wrote %s (%s): %lld tensors (%lld converted), %.2f MiB -> %.2f MiB, %.3f bits per weight, %.1f s\n",
            out, fd->name, (long long)rep.n_tensors, (long long)rep.n_converted, rep.bytes_in / 1048576.0,
            rep.bytes_out / 1048576.0, bpw, now_s() - t0);
    if (rep.n_fallback)
        fprintf(stderr,
                "ft quantize: %lld tensors have rows that are not a multiple of 256 and use a 32-block type "
                "instead of a K-quant (see --dry-run)\n",
                (long long)rep.n_fallback);
    return 0;
}
