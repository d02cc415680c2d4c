/* Tests of ft quantize's engine (engine/eval/quantize_plan.c, engine/eval/quantize.c).
 * Expected values come from llama.cpp, never from the code under test:
 *   1. type selection against llama.cpp's own snapshot files
 *      (tests/snapshots/NAME.schema in its source tree: the type llama-quantize
 *      gives every tensor of Gemma 3 4B, Llama 3.1 70B, Qwen3 0.6B and 14B
 *      for every file type), on tensor lists built from the models' shapes;
 *      skipped when the llama.cpp source is absent (FT_LLAMA_CPP_SRC,
 *      default /opt/llama.cpp-src/src);
 *   2. ft_quantize_file on ../shared/models/llama-f32.gguf against every
 *      llama-TYPE.gguf that llama.cpp's llama-quantize wrote from it: the same
 *      type for every tensor, the same bytes for the legacy and float types,
 *      and for K-quants an RMSE against the F32 weights no worse (in fact the
 *      whole files come out identical, which is checked too); with 1 and 3
 *      threads;
 *   3. shape fallbacks and overrides on small synthetic files, refusing to
 *      overwrite the input (also through a hard link), bad input files, NaN
 *      weights; none of them leaves an output file.
 */
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/quantize.h"
#include "ft/types.h"
#include "ft_test.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---- helpers -------------------------------------------------------------- */

static char g_dir[] = "/tmp/ft_quantize_test_XXXXXX";

static int count_dir_entries(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    if (d)
        closedir(d);
    return n;
}

static void silence(enum ft_log_level level, const char *func, const char *msg, void *ud) {
    (void)level, (void)func, (void)msg, (void)ud;
}

/* A GGUF with just the metadata the rules read. */
static void model_info_for(const char *arch, int n_layer, int n_head, int n_head_kv, struct ft_quant_model_info *mi) {
    struct ft_gguf_writer *w = ft_gguf_writer_new();
    char key[128];
    ft_gguf_writer_set_str(w, "general.architecture", arch);
    snprintf(key, sizeof(key), "%s.block_count", arch);
    ft_gguf_writer_set_u32(w, key, (uint32_t)n_layer);
    snprintf(key, sizeof(key), "%s.attention.head_count", arch);
    ft_gguf_writer_set_u32(w, key, (uint32_t)n_head);
    snprintf(key, sizeof(key), "%s.attention.head_count_kv", arch);
    ft_gguf_writer_set_u32(w, key, (uint32_t)n_head_kv);
    void *buf;
    size_t n;
    CHECK(ft_gguf_writer_to_buffer(w, &buf, &n) == 0);
    struct ft_gguf *g = NULL;
    CHECK(ft_gguf_open_buffer(buf, n, "meta.gguf", &g) == 0);
    CHECK(g && ft_quant_model_info_read(g, mi) == 0);
    ft_gguf_close(g);
    free(buf);
    ft_gguf_writer_free(w);
}

/* ---- 1. llama.cpp's snapshot files --------------------------------------- */

struct model_shape {
    const char *file; /* tests/snapshots/FILE.schema */
    const char *arch;
    int n_embd, n_ff, n_vocab, n_layer, n_head, n_head_kv, head_dim;
    bool has_output;
};

/* The shapes of the models behind llama.cpp's snapshots (their GGUF
 * metadata, repeated in each file's header line). */
static const struct model_shape k_models[] = {
    {"gemma-3-4b-it", "gemma3", 2560, 10240, 262144, 34, 8, 4, 256, false},
    {"meta-llama-3.1-70b-instruct", "llama", 8192, 28672, 128256, 80, 64, 8, 128, true},
    {"qwen3-0.6b", "qwen3", 1024, 3072, 151936, 28, 16, 8, 128, true},
    {"qwen3-14b", "qwen3", 5120, 17408, 151936, 40, 40, 8, 128, true},
};

struct tensor_list {
    struct ft_quant_tensor *t;
    char (*names)[64];
    size_t n, cap;
};

static void tl_add(struct tensor_list *l, const char *name, int64_t ne0, int64_t ne1) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->t = realloc(l->t, l->cap * sizeof(*l->t));
        l->names = realloc(l->names, l->cap * sizeof(*l->names));
    }
    snprintf(l->names[l->n], sizeof(l->names[0]), "%s", name);
    l->t[l->n] = (struct ft_quant_tensor){.name = NULL, .type = FT_TYPE_F32, .ne = {ne0, ne1, 1, 1}};
    l->n++;
}

static void build_tensors(const struct model_shape *m, struct tensor_list *l) {
    char nm[64];
    tl_add(l, "token_embd.weight", m->n_embd, m->n_vocab);
    tl_add(l, "output_norm.weight", m->n_embd, 1);
    if (m->has_output)
        tl_add(l, "output.weight", m->n_embd, m->n_vocab);
    const int q = m->n_head * m->head_dim, kv = m->n_head_kv * m->head_dim;
    for (int il = 0; il < m->n_layer; il++) {
#define T(suffix, a, b)                                               \
    do {                                                              \
        snprintf(nm, sizeof(nm), "blk.%d.%s", il, suffix);            \
        tl_add(l, nm, a, b);                                          \
    } while (0)
        T("attn_norm.weight", m->n_embd, 1);
        T("attn_q.weight", m->n_embd, q);
        T("attn_k.weight", m->n_embd, kv);
        T("attn_v.weight", m->n_embd, kv);
        T("attn_output.weight", q, m->n_embd);
        T("ffn_norm.weight", m->n_embd, 1);
        T("ffn_gate.weight", m->n_embd, m->n_ff);
        T("ffn_up.weight", m->n_embd, m->n_ff);
        T("ffn_down.weight", m->n_ff, m->n_embd);
        if (!strcmp(m->arch, "gemma3") || !strcmp(m->arch, "qwen3")) {
            T("attn_q_norm.weight", m->head_dim, 1);
            T("attn_k_norm.weight", m->head_dim, 1);
        }
        if (!strcmp(m->arch, "gemma3")) {
            T("post_attention_norm.weight", m->n_embd, 1);
            T("post_ffw_norm.weight", m->n_embd, 1);
        }
#undef T
    }
    for (size_t i = 0; i < l->n; i++)
        l->t[i].name = l->names[i];
}

/* Type names in the snapshots are ggml's ("q4_K", "f16"). */
static bool type_from_name(const char *s, enum ft_type *out) {
    for (int t = 0; t < FT_TYPE_COUNT; t++) {
        const struct ft_type_info *ti = ft_type_info((enum ft_type)t);
        if (ti && !strcasecmp(ti->name, s)) {
            *out = (enum ft_type)t;
            return true;
        }
    }
    return false;
}

/* One "[FTYPE] default" section: check every tensor. Returns sections
 * checked (0 or 1). */
static int check_section(const struct model_shape *m, struct ft_quant_model_info *mi, struct tensor_list *l,
                         const char *ftype_name, const char *default_name, char (*ov_names)[64],
                         enum ft_type *ov_types, int n_ov) {
    const struct ft_ftype_desc *fd = ft_ftype_by_name(ftype_name);
    if (!fd || strcasecmp(fd->name, ftype_name) != 0)
        return 0; /* a file type ft does not write (IQ*, TQ*, MXFP4, Q2_K_S) */
    enum ft_type def;
    CHECKF(type_from_name(default_name, &def) && def == fd->default_type, "%s [%s]: default %s", m->file,
           ftype_name, default_name);
    struct ft_quant_choice *ch = calloc(l->n, sizeof(*ch));
    CHECK(ft_quant_choose(mi, l->t, l->n, fd->ftype, false, NULL, 0, ch) == 0);
    int matched = 0, bad = 0;
    for (size_t i = 0; i < l->n; i++) {
        /* llama.cpp's snapshot lists only tensors it may quantize (2-D). */
        if (l->t[i].ne[1] == 1)
            continue;
        enum ft_type want = fd->default_type;
        for (int k = 0; k < n_ov; k++)
            if (!strcmp(ov_names[k], l->t[i].name)) {
                want = ov_types[k];
                matched++;
            }
        if (ch[i].type != want && bad++ < 5)
            CHECKF(0, "%s [%s] %s: ours %s, llama.cpp %s", m->file, ftype_name, l->t[i].name,
                   ft_type_name(ch[i].type), ft_type_name(want));
    }
    CHECKF(bad == 0, "%s [%s]: %d tensors differ", m->file, ftype_name, bad);
    CHECKF(matched == n_ov, "%s [%s]: %d of %d listed tensors exist in our list", m->file, ftype_name, matched, n_ov);
    free(ch);
    return 1;
}

static void test_snapshots(const char *src) {
    int files = 0, sections = 0;
    for (size_t mi_ = 0; mi_ < FT_ARRAY_LEN(k_models); mi_++) {
        const struct model_shape *m = &k_models[mi_];
        char path[4096];
        snprintf(path, sizeof(path), "%s/tests/snapshots/%s.schema", src, m->file);
        FILE *f = fopen(path, "r");
        if (!f) {
            printf("  (no %s)\n", path);
            continue;
        }
        files++;
        struct ft_quant_model_info mi;
        model_info_for(m->arch, m->n_layer, m->n_head, m->n_head_kv, &mi);
        CHECK(mi.is_70b == (m->n_layer == 80));
        struct tensor_list l = {0};
        build_tensors(m, &l);
        char line[512], ftype_name[64] = "", default_name[64] = "";
        static char ov_names[4096][64];
        static enum ft_type ov_types[4096];
        int n_ov = 0;
        bool in_section = false, ok_types = true;
        for (;;) {
            char *got = fgets(line, sizeof(line), f);
            if (got) {
                line[strcspn(line, "\r\n")] = '\0';
                if (line[0] == '#' || line[0] == '\0')
                    continue;
            }
            if (!got || line[0] == '[') {
                if (in_section && ok_types)
                    sections += check_section(m, &mi, &l, ftype_name, default_name, ov_names, ov_types, n_ov);
                if (!got)
                    break;
                CHECK(sscanf(line, "[%63[^]]] %63s", ftype_name, default_name) == 2);
                in_section = true;
                ok_types = true;
                n_ov = 0;
                continue;
            }
            char tn[64], ty[64];
            if (sscanf(line, "%63s %63s", tn, ty) == 2 && n_ov < 4096) {
                snprintf(ov_names[n_ov], sizeof(ov_names[0]), "%s", tn);
                if (!type_from_name(ty, &ov_types[n_ov]))
                    ok_types = false; /* an IQ type: a section we skip anyway */
                n_ov++;
            }
        }
        fclose(f);
        free(l.t);
        free(l.names);
    }
    printf("llama.cpp snapshots: %d files, %d file-type sections checked\n", files, sections);
    CHECK_EQ_INT(sections, 20 * files); /* the 20 file types ft writes, in every file */
}

/* ---- 2. the llama.cpp-quantized reference files -------------------------- */

static double sq_err(enum ft_type t, const void *q, const float *f, int64_t ne0, int64_t rows) {
    const struct ft_type_info *ti = ft_type_traits_ref(t);
    const size_t rs = ft_row_size(t, ne0);
    float *tmp = malloc((size_t)ne0 * sizeof(float));
    double se = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        ti->to_float((const uint8_t *)q + (size_t)r * rs, tmp, ne0);
        for (int64_t i = 0; i < ne0; i++) {
            const double d = (double)tmp[i] - f[r * ne0 + i];
            se += d * d;
        }
    }
    free(tmp);
    return se;
}

static void test_reference_files(const char *shared) {
    static const char *const types[] = {"F16",  "BF16",   "Q8_0",   "Q4_0",   "Q4_1", "Q5_0",   "Q5_1",
                                        "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"};
    char in[4096], ref[4096], out[4096];
    snprintf(in, sizeof(in), "%s/models/llama-f32.gguf", shared);
    struct ft_gguf *src = NULL;
    if (ft_gguf_open(in, &src) != 0) {
        CHECKF(0, "cannot open %s", in);
        return;
    }
    int identical_files = 0;
    for (size_t k = 0; k < FT_ARRAY_LEN(types); k++) {
        snprintf(ref, sizeof(ref), "%s/models/llama-%s.gguf", shared, types[k]);
        snprintf(out, sizeof(out), "%s/llama-%s.gguf", g_dir, types[k]);
        if (!strncmp(types[k], "IQ4", 3) && access(ref, F_OK) != 0) { /* ../shared keeps them apart */
            printf("note: no %s; not compared\n", ref);
            continue;
        }
        const struct ft_ftype_desc *fd = ft_ftype_by_name(types[k]);
        CHECK(fd != NULL);
        struct ft_quant_params qp = {.ftype = fd->ftype, .n_threads = k % 2 ? 3 : 1};
        struct ft_quant_report rep;
        CHECKF(ft_quantize_file(in, out, &qp, &rep) == 0, "%s: %s", types[k], ft_last_error());
        struct ft_gguf *a = NULL, *b = NULL;
        if (ft_gguf_open(out, &a) != 0 || ft_gguf_open(ref, &b) != 0) {
            CHECKF(0, "%s: cannot open the outputs", types[k]);
            ft_gguf_close(a);
            ft_gguf_close(b);
            continue;
        }
        uint32_t ftv = 0, qv = 0;
        CHECK(ft_gguf_get_u32(a, "general.file_type", &ftv) == 0 && ftv == (uint32_t)fd->ftype);
        CHECK(ft_gguf_get_u32(a, "general.quantization_version", &qv) == 0 && qv == 2);
        CHECK_EQ_INT(ft_gguf_n_kv(a), ft_gguf_n_kv(b));
        CHECK_EQ_INT(ft_gguf_n_tensors(a), ft_gguf_n_tensors(b));
        CHECK_EQ_INT(rep.n_tensors, ft_gguf_n_tensors(b));
        CHECK_EQ_INT(rep.n_requantized, 0);
        for (int64_t i = 0; i < ft_gguf_n_tensors(b); i++) {
            const struct ft_gguf_tensor *tb = ft_gguf_tensor(b, i);
            char name[256];
            snprintf(name, sizeof(name), "%.*s", (int)tb->name.len, tb->name.s);
            const struct ft_gguf_tensor *ta = ft_gguf_find_tensor(a, name);
            const struct ft_gguf_tensor *tf = ft_gguf_find_tensor(src, name);
            CHECKF(ta && tf, "%s: tensor %s missing", types[k], name);
            if (!ta || !tf)
                continue;
            CHECKF(ta->type == tb->type, "%s: %s is %s, llama.cpp chose %s", types[k], name, ft_type_name(ta->type),
                   ft_type_name(tb->type));
            if (ta->type != tb->type || ta->size != tb->size)
                continue;
            bool same = memcmp(ta->data, tb->data, ta->size) == 0;
            bool kquant = ta->type >= FT_TYPE_Q2_K && ta->type <= FT_TYPE_Q6_K;
            if (!kquant) {
                CHECKF(same, "%s: %s (%s): bytes differ from llama.cpp's", types[k], name, ft_type_name(ta->type));
            } else if (tf->type == FT_TYPE_F32) {
                int64_t rows = ta->ne[1] * ta->ne[2] * ta->ne[3];
                double ea = sq_err(ta->type, ta->data, tf->data, ta->ne[0], rows);
                double eb = same ? ea : sq_err(tb->type, tb->data, tf->data, tb->ne[0], rows);
                CHECKF(ea <= eb * (1 + 1e-9), "%s: %s (%s): squared error %.9g, llama.cpp's %.9g", types[k], name,
                       ft_type_name(ta->type), ea, eb);
            }
        }
        ft_gguf_close(a);
        ft_gguf_close(b);
        size_t na = 0, nb = 0;
        char *fa = ft_test_read_file(out, &na), *fb = ft_test_read_file(ref, &nb);
        bool same_file = fa && fb && na == nb && memcmp(fa, fb, na) == 0;
        CHECKF(same_file, "%s: the file differs from llama.cpp's (sizes %zu, %zu)", types[k], na, nb);
        identical_files += same_file;
        free(fa);
        free(fb);
        unlink(out);
    }
    ft_gguf_close(src);
    printf("llama-f32.gguf: %d of %zu quantized files byte-identical with llama-quantize's\n", identical_files,
           FT_ARRAY_LEN(types));
}

/* ---- 3. synthetic files ---------------------------------------------------- */

/* A small llama-like file: rows of `ne0` (not a multiple of 256 when ne0 =
 * 96 or 640), F32 weights from a fixed generator. */
static int write_synthetic(const char *path, int64_t ne0, float poison) {
    struct ft_gguf_writer *w = ft_gguf_writer_new();
    ft_gguf_writer_set_str(w, "general.architecture", "llama");
    ft_gguf_writer_set_u32(w, "llama.block_count", 2);
    ft_gguf_writer_set_u32(w, "llama.attention.head_count", 4);
    ft_gguf_writer_set_u32(w, "general.file_type", 0);
    ft_gguf_writer_set_str(w, "general.name", "synthetic");
    static const char *const names[] = {"token_embd.weight",    "output.weight",        "blk.0.attn_v.weight",
                                        "blk.0.ffn_down.weight", "blk.1.attn_v.weight", "blk.1.ffn_down.weight",
                                        "blk.0.attn_norm.weight"};
    float *data[FT_ARRAY_LEN(names)];
    uint32_t s = 12345;
    for (size_t i = 0; i < FT_ARRAY_LEN(names); i++) {
        int64_t ne[2] = {ne0, i == 6 ? 1 : 8};
        data[i] = malloc(sizeof(float) * (size_t)(ne[0] * ne[1]));
        for (int64_t j = 0; j < ne[0] * ne[1]; j++) {
            s = s * 1664525u + 1013904223u;
            data[i][j] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.2f;
        }
        if (i == 3)
            data[i][5] = poison; /* 0 or NaN */
        ft_gguf_writer_add_tensor(w, names[i], FT_TYPE_F32, i == 6 ? 1 : 2, ne, data[i]);
    }
    int rc = ft_gguf_writer_write(w, path);
    ft_gguf_writer_free(w);
    for (size_t i = 0; i < FT_ARRAY_LEN(names); i++)
        free(data[i]);
    return rc;
}

static enum ft_type type_of(const char *path, const char *tensor) {
    struct ft_gguf *g = NULL;
    enum ft_type t = FT_TYPE_COUNT;
    if (ft_gguf_open(path, &g) == 0) {
        const struct ft_gguf_tensor *x = ft_gguf_find_tensor(g, tensor);
        if (x)
            t = x->type;
    }
    ft_gguf_close(g);
    return t;
}

static void test_synthetic(void) {
    char in[512], out[512], link_path[512];
    snprintf(in, sizeof(in), "%s/syn-640.gguf", g_dir);
    snprintf(out, sizeof(out), "%s/syn-out.gguf", g_dir);
    CHECK(write_synthetic(in, 640, 0.0f) == 0);

    /* Fallbacks of llama-quant.cpp's tensor_type_fallback for 640-wide rows:
     * the output gets Q8_0 (640 % 256 != 0), Q4_K -> Q5_0, Q6_K -> Q8_0,
     * Q3_K/Q2_K -> Q4_0, Q5_K -> Q5_1. */
    struct {
        const char *ftype, *tensor;
        enum ft_type want;
    } cases[] = {
        {"Q4_K_M", "output.weight", FT_TYPE_Q8_0},       {"Q4_K_M", "token_embd.weight", FT_TYPE_Q5_0},
        {"Q4_K_M", "blk.1.attn_v.weight", FT_TYPE_Q8_0}, {"Q4_K_M", "blk.0.attn_v.weight", FT_TYPE_Q5_0},
        {"Q3_K_M", "token_embd.weight", FT_TYPE_Q4_0},   {"Q5_K_S", "blk.0.ffn_down.weight", FT_TYPE_Q5_1},
        {"Q2_K", "blk.0.attn_v.weight", FT_TYPE_Q4_0},   {"Q4_0", "output.weight", FT_TYPE_Q8_0},
        {"Q4_0", "token_embd.weight", FT_TYPE_Q4_0},     {"F16", "blk.0.attn_norm.weight", FT_TYPE_F32},
        {"F16", "token_embd.weight", FT_TYPE_F16},       {"Q8_0", "output.weight", FT_TYPE_Q8_0},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        struct ft_quant_params qp = {.ftype = ft_ftype_by_name(cases[i].ftype)->ftype, .n_threads = 2};
        struct ft_quant_report rep;
        CHECK(ft_quantize_file(in, out, &qp, &rep) == 0);
        enum ft_type got = type_of(out, cases[i].tensor);
        CHECKF(got == cases[i].want, "%s %s: %s, want %s", cases[i].ftype, cases[i].tensor, ft_type_name(got),
               ft_type_name(cases[i].want));
    }
    /* 48-wide rows: neither a K-quant nor its 32-block fallback fits: F16. */
    {
        char in48[512];
        snprintf(in48, sizeof(in48), "%s/syn-48.gguf", g_dir);
        CHECK(write_synthetic(in48, 48, 0.0f) == 0);
        struct ft_quant_params qp = {.ftype = FT_FTYPE_Q4_K_M};
        struct ft_quant_report rep;
        CHECK(ft_quantize_file(in48, out, &qp, &rep) == 0);
        CHECK(type_of(out, "blk.0.ffn_down.weight") == FT_TYPE_F16);
        CHECK(rep.n_fallback >= 4);
        unlink(in48);
    }
    /* Overrides (first match wins) and --pure. */
    {
        struct ft_quant_override ov[] = {{"blk.*.attn_v.weight", FT_TYPE_Q8_0}, {"*", FT_TYPE_Q4_0}};
        struct ft_quant_params qp = {.ftype = FT_FTYPE_Q6_K, .overrides = ov, .n_overrides = 2};
        CHECK(ft_quantize_file(in, out, &qp, NULL) == 0);
        CHECK(type_of(out, "blk.1.attn_v.weight") == FT_TYPE_Q8_0);
        CHECK(type_of(out, "blk.1.ffn_down.weight") == FT_TYPE_Q4_0);
        CHECK(type_of(out, "blk.0.attn_norm.weight") == FT_TYPE_F32); /* 1-D: never quantized */
        struct ft_quant_override ov2[] = {{"token_embd.weight", FT_TYPE_Q4_K}};
        struct ft_quant_params qp2 = {.ftype = FT_FTYPE_Q8_0, .overrides = ov2, .n_overrides = 1};
        CHECK(ft_quantize_file(in, out, &qp2, NULL) == 0);
        CHECK(type_of(out, "token_embd.weight") == FT_TYPE_Q5_0); /* the override, then its fallback */
        struct ft_quant_params qp3 = {.ftype = FT_FTYPE_Q4_K_M, .pure = true};
        CHECK(ft_quantize_file(in, out, &qp3, NULL) == 0);
        CHECK(type_of(out, "output.weight") == FT_TYPE_Q5_0); /* no output rule: Q4_K, then the fallback */
    }
    /* Requantizing is counted (the CLI warns). */
    {
        char out2[512];
        snprintf(out2, sizeof(out2), "%s/syn-requant.gguf", g_dir);
        struct ft_quant_params qp = {.ftype = FT_FTYPE_Q8_0};
        CHECK(ft_quantize_file(in, out, &qp, NULL) == 0);
        struct ft_quant_params qp2 = {.ftype = FT_FTYPE_Q4_0};
        struct ft_quant_report rep;
        CHECK(ft_quantize_file(out, out2, &qp2, &rep) == 0);
        CHECK(rep.n_requantized > 0 && rep.requant_from == FT_TYPE_Q8_0);
        unlink(out2);
    }
    unlink(out);

    /* Failures leave nothing: same file (by name, by hard link), a missing or
     * truncated input, NaN weights, a directory that does not exist. */
    int before = count_dir_entries();
    ft_log_set_sink(silence, NULL);
    struct ft_quant_params qp = {.ftype = FT_FTYPE_Q4_0};
    CHECK(ft_quantize_file(in, in, &qp, NULL) == FT_EINVAL);
    snprintf(link_path, sizeof(link_path), "%s/hardlink.gguf", g_dir);
    CHECK(link(in, link_path) == 0);
    CHECK(ft_quantize_file(in, link_path, &qp, NULL) == FT_EINVAL);
    unlink(link_path);
    char missing[512];
    snprintf(missing, sizeof(missing), "%s/missing.gguf", g_dir);
    CHECK(ft_quantize_file(missing, out, &qp, NULL) != 0);
    size_t n = 0;
    char *bytes = ft_test_read_file(in, &n);
    char trunc[512];
    snprintf(trunc, sizeof(trunc), "%s/trunc.gguf", g_dir);
    FILE *f = fopen(trunc, "wb");
    fwrite(bytes, 1, n - 100, f);
    fclose(f);
    free(bytes);
    CHECK(ft_quantize_file(trunc, out, &qp, NULL) == FT_EFORMAT);
    unlink(trunc);
    char nan_in[512];
    snprintf(nan_in, sizeof(nan_in), "%s/nan.gguf", g_dir);
    CHECK(write_synthetic(nan_in, 640, NAN) == 0);
    CHECK(ft_quantize_file(nan_in, out, &qp, NULL) == FT_EFORMAT);
    CHECK(strstr(ft_last_error(), "blk.0.ffn_down.weight") != NULL);
    unlink(nan_in);
    char nodir[512];
    snprintf(nodir, sizeof(nodir), "%s/no/such/dir.gguf", g_dir);
    CHECK(ft_quantize_file(in, nodir, &qp, NULL) == FT_EIO);
    ft_log_set_sink(NULL, NULL);
    CHECK(access(out, F_OK) != 0);
    CHECK_EQ_INT(count_dir_entries(), before);
    unlink(in);
}

/* The writer's fill callbacks (used by ft_quantize_file) give the same
 * bytes as borrowed data, in a buffer too; a failing fill fails the write. */
static int fill_pattern(void *ud, void *dst, size_t size) {
    const uint8_t *src = ud;
    memcpy(dst, src, size);
    return 0;
}

static int fill_fail(void *ud, void *dst, size_t size) {
    (void)ud, (void)dst, (void)size;
    return FT_EFORMAT;
}

static void test_writer_fill(void) {
    uint8_t data[34 * 4];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 7);
    int64_t ne[2] = {64, 2};
    struct ft_gguf_writer *a = ft_gguf_writer_new(), *b = ft_gguf_writer_new();
    CHECK(ft_gguf_writer_add_tensor(a, "t", FT_TYPE_Q8_0, 2, ne, data) == 0);
    CHECK(ft_gguf_writer_add_tensor_fn(b, "t", FT_TYPE_Q8_0, 2, ne, fill_pattern, data) == 0);
    void *ba = NULL, *bb = NULL;
    size_t na = 0, nb = 0;
    CHECK(ft_gguf_writer_to_buffer(a, &ba, &na) == 0);
    CHECK(ft_gguf_writer_to_buffer(b, &bb, &nb) == 0);
    CHECK(ba && bb && na == nb && memcmp(ba, bb, na) == 0);
    free(ba);
    free(bb);
    struct ft_gguf_writer *c = ft_gguf_writer_new();
    CHECK(ft_gguf_writer_add_tensor_fn(c, "t", FT_TYPE_Q8_0, 2, ne, fill_fail, NULL) == 0);
    CHECK(ft_gguf_writer_to_buffer(c, &ba, &na) == FT_EFORMAT);
    char path[512];
    snprintf(path, sizeof(path), "%s/fill-fail.gguf", g_dir);
    CHECK(ft_gguf_writer_write(c, path) == FT_EFORMAT);
    CHECK(access(path, F_OK) != 0);
    ft_gguf_writer_free(a);
    ft_gguf_writer_free(b);
    ft_gguf_writer_free(c);
}

static void test_names(void) {
    CHECK(ft_ftype_by_name("q4_k_m")->ftype == FT_FTYPE_Q4_K_M);
    CHECK(ft_ftype_by_name("Q4_K")->ftype == FT_FTYPE_Q4_K_M); /* llama-quantize's alias */
    CHECK(ft_ftype_by_name("Q3_K")->ftype == FT_FTYPE_Q3_K_M);
    CHECK(ft_ftype_by_name("IQ2_XS") == NULL);
    CHECK(ft_ftype_by_name("Q4_K_MM") == NULL);
    CHECK(ft_ftype_by_id(15)->default_type == FT_TYPE_Q4_K);
    CHECK(ft_ftype_by_id(4) == NULL);
    enum ft_type t;
    CHECK(ft_quant_type_parse("q6_k", &t) == 0 && t == FT_TYPE_Q6_K);
    CHECK(ft_quant_type_parse("IQ4_NL", &t) == 0 && t == FT_TYPE_IQ4_NL);
    CHECK(ft_quant_type_parse("IQ2_XS", &t) == FT_EINVAL);
    CHECK(ft_ftype_by_name("mxfp4_moe")->default_type == FT_TYPE_MXFP4);
    CHECK(ft_ftype_by_id(30)->default_type == FT_TYPE_IQ4_XS);
    CHECK(ft_quant_type_parse("Q8_K", &t) == FT_EINVAL); /* activations only */
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_names();
    test_writer_fill();
    test_synthetic();

    const char *src = getenv("FT_LLAMA_CPP_SRC");
    if (!src || !*src)
        src = "/opt/llama.cpp-src/src";
    char probe[4096];
    snprintf(probe, sizeof(probe), "%s/src/llama-quant.cpp", src);
    if (access(probe, R_OK) == 0)
        test_snapshots(src);
    else
        printf("SKIP part: llama.cpp source not found at %s (set FT_LLAMA_CPP_SRC); snapshot tests not run\n", src);

    const char *shared = ft_test_shared_dir();
    if (shared)
        test_reference_files(shared);
    else
        printf("SKIP part: ../shared/models not found; reference file comparison not run\n");
    rmdir(g_dir);
    return ft_test_finish("test_quantize");
}
