/* ft gen-model: write a GGUF model of a given shape with seeded random
 * weights, so benchmarks need no downloads (issue #4).
 *
 * The file is what llama.cpp's converter writes for a Llama model of that
 * shape: the same tensor names, shapes and metadata keys, norms of 1, and
 * for the Llama 3 presets the llama3 rope_freqs table and a tied output
 * head. Weights are written in a float type (F32, F16, BF16); quantized
 * files come from `ft quantize`. Tensors are generated chunk by chunk while
 * the file is written (ft_gguf_writer_add_tensor_fill), so a 1B model never
 * sits in memory.
 *
 * Weights: every row has its own generator seeded from (seed, tensor name,
 * row), so a file depends only on its options. Values are N(0, std^2)
 * approximated by the Irwin-Hall sum of four 16-bit uniforms (bounded at
 * +-3.5 std): cheap, and with std 0.02 the activations of a 2048-wide model
 * stay O(1), so logits are finite and speed is that of a real model. */
#include "args.h"
#include "cli.h"
#include "format.h"
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/types.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define GEN_MAX_EMBD 65536
#define GEN_MAX_FF (1 << 20)
#define GEN_MAX_LAYER 1024
#define GEN_MAX_HEAD 1024
#define GEN_MAX_HEAD_DIM 1024
#define GEN_MAX_VOCAB (1 << 22)
#define GEN_MIN_SYNTH_VOCAB 260 /* 3 specials + 256 bytes + one piece */

/* The shape of a model to generate. */
struct gen_shape {
    const char *name;
    int32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float rope_base;
    float rope_llama3_factor; /* > 0: Llama 3.1+ rope scaling (rope_freqs.weight) */
    int32_t rope_llama3_orig_ctx;
    bool tied;
    /* Mixture of experts (arch "qwen3moe"); NULL arch is "llama". */
    const char *arch;
    int32_t n_expert, n_expert_used, n_ff_exp;
};

/* Shapes of the models people benchmark; `tiny` is for tests. Vocabulary
 * sizes are those of the models (the Llama 3 vocabulary has 128256, Qwen's
 * 151936). qwen3moe-24e is a CPU-sized Qwen3-30B-A3B: its layer (n_embd
 * 2048, 32 query / 4 KV heads of 128, Q/K norms, experts of 768 of which a
 * token uses 8) with 24 experts instead of 128 and 24 layers instead of
 * 48, so its Q4_0 file is ~2 GiB and a token reads ~1 GB of it. */
static const struct gen_shape g_presets[] = {
    {"tiny", 256, 2, 4, 2, 64, 512, 512, 2048, 10000.0f, 0.0f, 0, true, NULL, 0, 0, 0},
    {"llama3.2-1b", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0f, 32.0f, 8192, true, NULL, 0, 0, 0},
    {"llama3.2-3b", 3072, 28, 24, 8, 128, 8192, 128256, 131072, 500000.0f, 32.0f, 8192, true, NULL, 0, 0, 0},
    {"llama3.1-8b", 4096, 32, 32, 8, 128, 14336, 128256, 131072, 500000.0f, 8.0f, 8192, false, NULL, 0, 0, 0},
    {"qwen3moe-24e", 2048, 24, 32, 4, 128, 6144, 151936, 40960, 1000000.0f, 0.0f, 0, false, "qwen3moe", 24, 8, 768},
    {"qwen3moe-tiny", 256, 2, 4, 2, 64, 512, 512, 2048, 1000000.0f, 0.0f, 0, false, "qwen3moe", 8, 2, 128},
};

/* ---- random weights ------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

enum gen_fill { GEN_NORMAL, GEN_ONES };

/* One tensor to generate; lives until the file is written. */
struct gen_tensor {
    char name[64];
    enum gen_fill fill;
    enum ft_type type;
    int64_t cols, rows;
    uint64_t key; /* seed mixed with the name */
    float std;
    float *row; /* one row of floats, shared by all tensors */
    struct gen_progress *progress;
};

struct gen_progress {
    bool on; /* stderr is a terminal */
    size_t done, total;
    int last_pct;
};

static void progress_step(struct gen_progress *p, const char *name, size_t bytes) {
    p->done += bytes;
    if (!p->on || p->total == 0)
        return;
    int pct = (int)(100.0 * (double)p->done / (double)p->total);
    if (pct != p->last_pct) {
        fprintf(stderr, "\rft gen-model: %3d%% %-32s", pct, name);
        p->last_pct = pct;
    }
}

static int gen_fill_rows(void *ud, int64_t row0, int64_t n_rows, void *dst) {
    struct gen_tensor *t = ud;
    const struct ft_type_info *ti = ft_type_traits(t->type);
    const size_t row_size = ft_row_size(t->type, t->cols);
    /* Irwin-Hall: four U(0, 65535) sum to mean 131070, sd 65536 / sqrt(3). */
    const float scale = t->std * 1.7320508f / 65536.0f;
    for (int64_t r = 0; r < n_rows; r++) {
        float *x = t->row;
        if (t->fill == GEN_ONES) {
            for (int64_t i = 0; i < t->cols; i++)
                x[i] = 1.0f;
        } else {
            uint64_t s = t->key ^ ((uint64_t)(row0 + r) * 0xD1B54A32D192ED03ull);
            for (int64_t i = 0; i < t->cols; i++) {
                const uint64_t u = splitmix64(&s);
                const int32_t sum = (int32_t)(u & 0xffff) + (int32_t)((u >> 16) & 0xffff) +
                                    (int32_t)((u >> 32) & 0xffff) + (int32_t)(u >> 48);
                x[i] = (float)(sum - 131070) * scale;
            }
        }
        ti->from_float(x, (char *)dst + (size_t)r * row_size, t->cols);
    }
    progress_step(t->progress, t->name, (size_t)n_rows * row_size);
    return 0;
}

/* Llama 3.1+ frequency divisors, as llama.cpp's converter computes them
 * (LlamaModel.generate_extra_tensors: low_freq_factor 1, high_freq_factor 4). */
static void llama3_rope_freqs(const struct gen_shape *sh, float *out) {
    const double lo_wavelen = sh->rope_llama3_orig_ctx / 1.0, hi_wavelen = sh->rope_llama3_orig_ctx / 4.0;
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < sh->head_dim / 2; i++) {
        const double freq = 1.0 / pow(sh->rope_base, (2.0 * i) / sh->head_dim);
        const double wavelen = 2.0 * pi / freq;
        if (wavelen < hi_wavelen) {
            out[i] = 1.0f;
        } else if (wavelen > lo_wavelen) {
            out[i] = sh->rope_llama3_factor;
        } else {
            const double smooth = (sh->rope_llama3_orig_ctx / wavelen - 1.0) / (4.0 - 1.0);
            out[i] = (float)(1.0 / ((1.0 - smooth) / sh->rope_llama3_factor + smooth));
        }
    }
}

/* ---- vocabulary ---------------------------------------------------------------- */

/* Copy every tokenizer.* key of a vocabulary GGUF (e.g. ../shared/vocab's
 * ggml-vocab-llama-bpe.gguf); returns the token count, or -1. */
static int64_t copy_vocab(struct ft_gguf_writer *w, const char *path) {
    struct ft_gguf *g = NULL;
    int rc = ft_gguf_open(path, &g);
    if (rc) {
        ft_cli_error("gen-model", rc, path);
        return -1;
    }
    const struct ft_str *toks;
    uint64_t n = 0;
    if (ft_gguf_get_arr_str(g, "tokenizer.ggml.tokens", &toks, &n) != 0 || n == 0 || n > GEN_MAX_VOCAB) {
        fprintf(stderr, "ft gen-model: %s: no usable tokenizer.ggml.tokens (a vocabulary GGUF is needed)\n", path);
        ft_gguf_close(g);
        return -1;
    }
    for (int64_t i = 0; i < ft_gguf_n_kv(g); i++) {
        struct ft_str k = ft_gguf_kv_key(g, i);
        if (k.len > 10 && memcmp(k.s, "tokenizer.", 10) == 0 && (rc = ft_gguf_writer_copy_kv(w, g, i))) {
            ft_cli_error("gen-model", rc, "copying the vocabulary");
            ft_gguf_close(g);
            return -1;
        }
    }
    ft_gguf_close(g); /* the writer holds copies of the values */
    return (int64_t)n;
}

/* A SentencePiece-style vocabulary of n tokens that needs no file: the
 * three specials, the 256 byte tokens, then "▁" and letter strings in
 * plain and "▁"-prefixed forms with decreasing scores. Enough to tokenize
 * any text (byte fallback) and to detokenize what a random model samples. */
static int synth_vocab(struct ft_gguf_writer *w, int32_t n) {
    struct ft_str *strs = calloc((size_t)n, sizeof(*strs));
    float *scores = calloc((size_t)n, sizeof(float));
    int32_t *types = calloc((size_t)n, sizeof(int32_t));
    char *text = malloc((size_t)n * 16);
    int rc = FT_ENOMEM;
    if (!strs || !scores || !types || !text)
        goto done;
    size_t off = 0;
    int32_t id = 0;
#define PUSH(str, ty)                                              \
    do {                                                           \
        size_t l_ = strlen(str);                                   \
        memcpy(text + off, str, l_);                               \
        strs[id] = (struct ft_str){text + off, l_};                \
        types[id] = (ty);                                          \
        scores[id] = (ty) == 1 ? -(float)(id - 259) : 0.0f;        \
        off += l_;                                                 \
        id++;                                                      \
    } while (0)
    PUSH("<unk>", 2);
    PUSH("<s>", 3);
    PUSH("</s>", 3);
    char buf[16];
    for (int b = 0; b < 256; b++) {
        snprintf(buf, sizeof(buf), "<0x%02X>", b);
        PUSH(buf, 6);
    }
    PUSH("\xe2\x96\x81", 1); /* "▁", the SentencePiece space */
    /* Letter strings of growing length: k-th string in base 26, each also
     * with the "▁" prefix; lengths up to 5 give 2 * 12.4M > GEN_MAX_VOCAB. */
    for (int len = 1; id < n && len <= 5; len++) {
        int64_t count = 1;
        for (int i = 0; i < len; i++)
            count *= 26;
        for (int64_t k = 0; k < count && id < n; k++) {
            char s[8];
            int64_t v = k;
            for (int i = len - 1; i >= 0; i--, v /= 26)
                s[i] = (char)('a' + v % 26);
            s[len] = '\0';
            PUSH(s, 1);
            if (id < n) {
                snprintf(buf, sizeof(buf), "\xe2\x96\x81%s", s);
                PUSH(buf, 1);
            }
        }
    }
#undef PUSH
    if ((rc = ft_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama")) ||
        (rc = ft_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, (uint64_t)n)) ||
        (rc = ft_gguf_writer_set_arr(w, "tokenizer.ggml.scores", FT_GGUF_FLOAT32, scores, (uint64_t)n)) ||
        (rc = ft_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", FT_GGUF_INT32, types, (uint64_t)n)) ||
        (rc = ft_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0)) ||
        (rc = ft_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1)) ||
        (rc = ft_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2)) ||
        (rc = ft_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true)) ||
        (rc = ft_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false)))
        goto done;
    rc = FT_OK;
done:
    if (rc)
        ft_cli_error("gen-model", rc, "building the vocabulary");
    free(strs);
    free(scores);
    free(types);
    free(text);
    return rc;
}

/* ---- the command --------------------------------------------------------------- */

static const struct gen_shape *find_preset(const char *name) {
    for (size_t i = 0; i < FT_ARRAY_LEN(g_presets); i++)
        if (!strcmp(g_presets[i].name, name))
            return &g_presets[i];
    return NULL;
}

static bool in_range(const char *what, int64_t v, int64_t lo, int64_t hi) {
    if (v >= lo && v <= hi)
        return true;
    fprintf(stderr, "ft gen-model: %s must be in %" PRId64 "..%" PRId64 " (got %" PRId64 ")\n", what, lo, hi, v);
    return false;
}

static bool check_shape(const struct gen_shape *s, bool synthetic_vocab) {
    if (!in_range("--n-embd", s->n_embd, 1, GEN_MAX_EMBD) || !in_range("--n-layer", s->n_layer, 1, GEN_MAX_LAYER) ||
        !in_range("--n-head", s->n_head, 1, GEN_MAX_HEAD) || !in_range("--n-head-kv", s->n_head_kv, 1, s->n_head) ||
        !in_range("--head-dim", s->head_dim, 2, GEN_MAX_HEAD_DIM) || !in_range("--n-ff", s->n_ff, 1, GEN_MAX_FF) ||
        !in_range("--n-vocab", s->n_vocab, synthetic_vocab ? GEN_MIN_SYNTH_VOCAB : 1, GEN_MAX_VOCAB) ||
        !in_range("--ctx", s->n_ctx, 1, 1 << 24))
        return false;
    if (s->n_head % s->n_head_kv != 0) {
        fprintf(stderr, "ft gen-model: --n-head %d must be a multiple of --n-head-kv %d\n", s->n_head, s->n_head_kv);
        return false;
    }
    if (s->head_dim % 2 != 0) {
        fprintf(stderr, "ft gen-model: --head-dim must be even for RoPE (got %d)\n", s->head_dim);
        return false;
    }
    if (!(s->rope_base > 1.0f)) {
        fprintf(stderr, "ft gen-model: --rope-base must be > 1 (got %g)\n", s->rope_base);
        return false;
    }
    return true;
}

static int parse_type(const char *s, enum ft_type *out, uint32_t *file_type) {
    if (!strcasecmp(s, "F32")) {
        *out = FT_TYPE_F32;
        *file_type = 0; /* LLAMA_FTYPE_ALL_F32 */
    } else if (!strcasecmp(s, "F16")) {
        *out = FT_TYPE_F16;
        *file_type = 1; /* LLAMA_FTYPE_MOSTLY_F16 */
    } else if (!strcasecmp(s, "BF16")) {
        *out = FT_TYPE_BF16;
        *file_type = 32; /* LLAMA_FTYPE_MOSTLY_BF16 */
    } else {
        fprintf(stderr,
                "ft gen-model: --type %s: gen-model writes F32, F16 or BF16; make quantized files from its output "
                "with ft quantize IN.gguf OUT.gguf TYPE\n",
                s);
        return -1;
    }
    return 0;
}

int ft_cmd_gen_model(int argc, char **argv) {
    const char *preset = "tiny", *arch = NULL, *out = NULL, *vocab = NULL, *type_s = "F16", *lm_head = NULL;
    int n_embd = -1, n_layer = -1, n_head = -1, n_head_kv = -1, head_dim = -1, n_ff = -1, n_vocab = -1, n_ctx = -1;
    int n_expert = -1, n_expert_used = -1, n_ff_exp = -1;
    float rope_base = -1.0f, std = 0.02f;
    uint64_t seed = 1;
    const struct ft_opt opts[] = {
        {NULL, "--preset", FT_OPT_STR, &preset, "NAME",
         "tiny (default), llama3.2-1b, llama3.2-3b, llama3.1-8b, qwen3moe-24e, qwen3moe-tiny"},
        {NULL, "--arch", FT_OPT_STR, &arch, "ARCH", "architecture: llama or qwen3moe (default: the preset's)"},
        {"-o", "--output", FT_OPT_STR, &out, "FILE", "the GGUF file to write (required)"},
        {NULL, "--type", FT_OPT_STR, &type_s, "TYPE", "weight type: F16 (default), BF16 or F32"},
        {"-s", "--seed", FT_OPT_U64, &seed, "S", "random seed (default 1); same options and seed, same file"},
        {NULL, "--vocab", FT_OPT_STR, &vocab, "FILE",
         "copy the tokenizer of this GGUF (Llama 3: ../shared/vocab/ggml-vocab-llama-bpe.gguf); "
         "default: a synthetic one of --n-vocab tokens"},
        {NULL, "--n-embd", FT_OPT_INT, &n_embd, "N", "embedding width"},
        {NULL, "--n-layer", FT_OPT_INT, &n_layer, "N", "number of blocks"},
        {NULL, "--n-head", FT_OPT_INT, &n_head, "N", "attention heads"},
        {NULL, "--n-head-kv", FT_OPT_INT, &n_head_kv, "N", "key/value heads (grouped-query attention)"},
        {NULL, "--head-dim", FT_OPT_INT, &head_dim, "N", "size of one head (default n_embd / n_head)"},
        {NULL, "--n-ff", FT_OPT_INT, &n_ff, "N", "feed-forward width"},
        {NULL, "--n-expert", FT_OPT_INT, &n_expert, "N", "qwen3moe: experts per layer"},
        {NULL, "--n-expert-used", FT_OPT_INT, &n_expert_used, "N", "qwen3moe: experts a token uses"},
        {NULL, "--n-ff-exp", FT_OPT_INT, &n_ff_exp, "N", "qwen3moe: feed-forward width of one expert"},
        {NULL, "--n-vocab", FT_OPT_INT, &n_vocab, "N", "vocabulary size (synthetic vocabulary only)"},
        {"-c", "--ctx", FT_OPT_INT, &n_ctx, "N", "training context length written to the file"},
        {NULL, "--rope-base", FT_OPT_FLOAT, &rope_base, "F", "RoPE frequency base"},
        {NULL, "--lm-head", FT_OPT_STR, &lm_head, "tied|separate", "output head tied to the embeddings or its own"},
        {NULL, "--std", FT_OPT_FLOAT, &std, "F", "standard deviation of the weights (default 0.02)"},
    };
    const struct ft_cmd_spec spec = {
        "gen-model", "ft gen-model [--preset NAME] [shape options] [--type F16] [--seed S] [--vocab FILE] -o OUT.gguf",
        "Writes a GGUF model of the given shape with seeded random weights (N(0, 0.02), norms 1), for\n"
        "benchmarks without downloads. Presets give the shapes of Llama 3.2 1B / 3B and Llama 3.1 8B\n"
        "(Llama 3 RoPE scaling, tied output for 3.2) and of a Qwen3-30B-A3B-like mixture of experts\n"
        "with 24 experts and 24 layers (qwen3moe-24e; vocabulary: tests/data/vocab/ggml-vocab-qwen2.gguf);\n"
        "shape options override the preset.\n"
        "Quantize the result with ft quantize.",
        opts, (int)FT_ARRAY_LEN(opts), 0};
    int code = ft_args_parse_opts(&spec, argc, argv);
    if (code != FT_ARGS_GO_ON)
        return code;

    const struct gen_shape *p = find_preset(preset);
    if (!p) {
        fprintf(stderr,
                "ft gen-model: unknown --preset '%s' (tiny, llama3.2-1b, llama3.2-3b, llama3.1-8b, qwen3moe-24e, "
                "qwen3moe-tiny)\n",
                preset);
        return 2;
    }
    if (!arch)
        arch = p->arch ? p->arch : "llama";
    const bool moe = !strcmp(arch, "qwen3moe");
    if (!moe && strcmp(arch, "llama") != 0) {
        fprintf(stderr, "ft gen-model: --arch %s: gen-model writes llama or qwen3moe models\n", arch);
        return 2;
    }
    if (!out) {
        fprintf(stderr, "ft gen-model: give the output file with -o OUT.gguf\n");
        return 2;
    }
    enum ft_type type;
    uint32_t file_type;
    if (parse_type(type_s, &type, &file_type))
        return 2;
    if (!(std > 0.0f && std <= 1.0f)) {
        fprintf(stderr, "ft gen-model: --std must be in (0, 1] (got %g)\n", std);
        return 2;
    }
    struct gen_shape sh = *p;
    if (n_embd >= 0)
        sh.n_embd = n_embd;
    if (n_layer >= 0)
        sh.n_layer = n_layer;
    if (n_head >= 0)
        sh.n_head = n_head;
    if (n_head_kv >= 0)
        sh.n_head_kv = n_head_kv;
    else if (n_head >= 0)
        sh.n_head_kv = FT_MIN(sh.n_head_kv, sh.n_head);
    if (head_dim >= 0)
        sh.head_dim = head_dim;
    else if (n_embd >= 0 || n_head >= 0)
        sh.head_dim = sh.n_head > 0 ? sh.n_embd / sh.n_head : 0;
    if (n_ff >= 0)
        sh.n_ff = n_ff;
    if (n_ctx >= 0)
        sh.n_ctx = n_ctx;
    if (rope_base >= 0.0f)
        sh.rope_base = rope_base;
    if (lm_head) {
        if (!strcmp(lm_head, "tied") || !strcmp(lm_head, "separate")) {
            sh.tied = !strcmp(lm_head, "tied");
        } else {
            fprintf(stderr, "ft gen-model: --lm-head must be tied or separate (got '%s')\n", lm_head);
            return 2;
        }
    }
    if (vocab && n_vocab >= 0) {
        fprintf(stderr, "ft gen-model: --n-vocab and --vocab exclude each other (the file sets the size)\n");
        return 2;
    }
    if (n_vocab >= 0)
        sh.n_vocab = n_vocab;
    if (!check_shape(&sh, vocab == NULL))
        return 2;
    if (moe) {
        if (!sh.n_expert) { /* a llama preset made a mixture: Qwen3-30B-A3B's experts, fewer of them */
            sh.n_expert = 16;
            sh.n_expert_used = 8;
            sh.n_ff_exp = sh.n_ff / 8;
        }
        if (n_expert >= 0)
            sh.n_expert = n_expert;
        if (n_expert_used >= 0)
            sh.n_expert_used = n_expert_used;
        if (n_ff_exp >= 0)
            sh.n_ff_exp = n_ff_exp;
        if (!in_range("--n-expert", sh.n_expert, 1, 256) ||
            !in_range("--n-expert-used", sh.n_expert_used, 1, sh.n_expert) ||
            !in_range("--n-ff-exp", sh.n_ff_exp, 1, GEN_MAX_FF))
            return 2;
        if (sh.rope_llama3_factor > 0.0f) {
            fprintf(stderr, "ft gen-model: qwen3moe has no Llama 3 RoPE scaling: use a qwen3moe preset\n");
            return 2;
        }
    } else if (n_expert >= 0 || n_expert_used >= 0 || n_ff_exp >= 0) {
        fprintf(stderr, "ft gen-model: --n-expert, --n-expert-used and --n-ff-exp are for --arch qwen3moe\n");
        return 2;
    }

    struct ft_gguf_writer *w = ft_gguf_writer_new();
    struct gen_tensor *ts = NULL;
    float *row = NULL, *rope_freqs = NULL;
    int status = 1, rc;
    if (!w)
        goto done;
    if (vocab) {
        int64_t nv = copy_vocab(w, vocab);
        if (nv < 0)
            goto done;
        sh.n_vocab = (int32_t)nv;
    } else if (synth_vocab(w, sh.n_vocab)) {
        goto done;
    }

    /* Tensors in the order llama.cpp's converter writes them. */
    const int64_t E = sh.n_embd, F = sh.n_ff, V = sh.n_vocab;
    const int64_t Q = (int64_t)sh.n_head * sh.head_dim, KV = (int64_t)sh.n_head_kv * sh.head_dim;
    const int64_t X = sh.n_expert, FX = sh.n_ff_exp;
    const size_t n_max = 3 + (size_t)sh.n_layer * 12;
    ts = calloc(n_max, sizeof(*ts));
    row = malloc(sizeof(float) * (size_t)FT_MAX(FT_MAX(FT_MAX(E, F), Q), FX));
    if (!ts || !row) {
        fprintf(stderr, "ft gen-model: out of memory\n");
        goto done;
    }
    struct gen_progress prog = {.on = isatty(STDERR_FILENO), .last_pct = -1};
    size_t nt = 0;
    uint64_t n_params = 0;
    /* ADD3: (n_mat, rows, cols), n_mat stacked matrices (the 3-D expert
     * tensors); ADD: one matrix, or a vector when fill is GEN_ONES. Norms
     * and the router are F32, as llama.cpp's converter writes them. */
#define ADD3(fill_, n_mat_, rows_, cols_, ...)                                                \
    do {                                                                                      \
        struct gen_tensor *t_ = &ts[nt++];                                                    \
        snprintf(t_->name, sizeof(t_->name), __VA_ARGS__);                                    \
        t_->fill = (fill_);                                                                   \
        t_->type = (fill_) == GEN_ONES || strstr(t_->name, "gate_inp") ? FT_TYPE_F32 : type;  \
        t_->rows = (int64_t)(n_mat_) * (rows_);                                               \
        t_->cols = (cols_);                                                                   \
        t_->key = seed ^ fnv1a(t_->name);                                                     \
        t_->std = std;                                                                        \
        t_->row = row;                                                                        \
        t_->progress = &prog;                                                                 \
        const int64_t ne_[3] = {(cols_), (rows_), (n_mat_)};                                  \
        const int nd_ = (fill_) == GEN_ONES ? 1 : (n_mat_) > 1 ? 3 : 2;                       \
        if ((rc = ft_gguf_writer_add_tensor_fill(w, t_->name, t_->type, nd_, ne_, gen_fill_rows, t_))) { \
            ft_cli_error("gen-model", rc, t_->name);                                          \
            goto done;                                                                        \
        }                                                                                     \
        n_params += (uint64_t)t_->rows * (uint64_t)(cols_);                                   \
        prog.total += ft_row_size(t_->type, (cols_)) * (size_t)t_->rows;                      \
    } while (0)
#define ADD(fill_, rows_, cols_, ...) ADD3(fill_, 1, rows_, cols_, __VA_ARGS__)

    ADD(GEN_NORMAL, V, E, "token_embd.weight");                 /* (V, E) */
    if (sh.rope_llama3_factor > 0.0f) {
        rope_freqs = malloc(sizeof(float) * (size_t)(sh.head_dim / 2));
        if (!rope_freqs)
            goto done;
        llama3_rope_freqs(&sh, rope_freqs);
        const int64_t ne[1] = {sh.head_dim / 2};
        if ((rc = ft_gguf_writer_add_tensor(w, "rope_freqs.weight", FT_TYPE_F32, 1, ne, rope_freqs))) {
            ft_cli_error("gen-model", rc, "rope_freqs.weight");
            goto done;
        }
        n_params += (uint64_t)ne[0];
    }
    for (int il = 0; il < sh.n_layer; il++) {
        ADD(GEN_ONES, 1, E, "blk.%d.attn_norm.weight", il);     /* (E) */
        ADD(GEN_NORMAL, Q, E, "blk.%d.attn_q.weight", il);      /* (Q, E) */
        ADD(GEN_NORMAL, KV, E, "blk.%d.attn_k.weight", il);     /* (KV, E) */
        ADD(GEN_NORMAL, KV, E, "blk.%d.attn_v.weight", il);     /* (KV, E) */
        ADD(GEN_NORMAL, E, Q, "blk.%d.attn_output.weight", il); /* (E, Q) */
        if (moe) {
            ADD(GEN_ONES, 1, sh.head_dim, "blk.%d.attn_q_norm.weight", il);       /* (hd) */
            ADD(GEN_ONES, 1, sh.head_dim, "blk.%d.attn_k_norm.weight", il);       /* (hd) */
        }
        ADD(GEN_ONES, 1, E, "blk.%d.ffn_norm.weight", il);      /* (E) */
        if (moe) {
            ADD(GEN_NORMAL, X, E, "blk.%d.ffn_gate_inp.weight", il);              /* (X, E) */
            ADD3(GEN_NORMAL, X, FX, E, "blk.%d.ffn_gate_exps.weight", il);        /* (X, FX, E) */
            ADD3(GEN_NORMAL, X, E, FX, "blk.%d.ffn_down_exps.weight", il);        /* (X, E, FX) */
            ADD3(GEN_NORMAL, X, FX, E, "blk.%d.ffn_up_exps.weight", il);          /* (X, FX, E) */
            continue;
        }
        ADD(GEN_NORMAL, F, E, "blk.%d.ffn_gate.weight", il);    /* (F, E) */
        ADD(GEN_NORMAL, F, E, "blk.%d.ffn_up.weight", il);      /* (F, E) */
        ADD(GEN_NORMAL, E, F, "blk.%d.ffn_down.weight", il);    /* (E, F) */
    }
    ADD(GEN_ONES, 1, E, "output_norm.weight");                  /* (E) */
    if (!sh.tied)
        ADD(GEN_NORMAL, V, E, "output.weight");                 /* (V, E) */
#undef ADD
#undef ADD3

    char label[32], name[96];
    ft_cli_size_label(n_params, label, sizeof(label));
    snprintf(name, sizeof(name), "ft gen-model %s (seed %" PRIu64 ")", preset, seed);
    /* arch.* keys: KEY(suffix) names one in a buffer of its own per use */
    char kb[16][96];
    int nk = 0;
#define KEY(suffix) (snprintf(kb[nk % 16], sizeof(kb[0]), "%s." suffix, arch), kb[nk++ % 16])
    if ((rc = ft_gguf_writer_set_str(w, "general.architecture", arch)) ||
        (rc = ft_gguf_writer_set_str(w, "general.type", "model")) ||
        (rc = ft_gguf_writer_set_str(w, "general.name", name)) ||
        (rc = ft_gguf_writer_set_str(w, "general.size_label", label)) ||
        (rc = ft_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)sh.n_layer)) ||
        (rc = ft_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)sh.n_ctx)) ||
        (rc = ft_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)sh.n_embd)) ||
        (rc = ft_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)sh.n_ff)) ||
        (rc = ft_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)sh.n_head)) ||
        (rc = ft_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)sh.n_head_kv)) ||
        (rc = ft_gguf_writer_set_f32(w, KEY("rope.freq_base"), sh.rope_base)) ||
        (rc = ft_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), moe ? 1e-6f : 1e-5f)) ||
        (rc = ft_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)sh.head_dim)) ||
        (rc = ft_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)sh.head_dim)) ||
        (rc = ft_gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)sh.head_dim)) ||
        (rc = ft_gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)sh.n_vocab)) ||
        (moe && (rc = ft_gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)sh.n_expert))) ||
        (moe && (rc = ft_gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)sh.n_expert_used))) ||
        (moe && (rc = ft_gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)sh.n_ff_exp))) ||
        (rc = ft_gguf_writer_set_u32(w, "general.file_type", file_type))) {
#undef KEY
        ft_cli_error("gen-model", rc, "metadata");
        goto done;
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = ft_gguf_writer_write(w, out);
    if (prog.on)
        fprintf(stderr, "\r%60s\r", "");
    if (rc) {
        ft_cli_error("gen-model", rc, out);
        goto done;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("ft gen-model: wrote %s: %s %s %s, %d layers, n_embd %d, vocab %d, %" PRIu64
           " parameters, %.2f GiB in %.1f s\n",
           out, arch, label, ft_type_name(type), sh.n_layer, sh.n_embd, sh.n_vocab, n_params,
           (double)prog.total / (1 << 30), (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    status = 0;
done:
    free(ts);
    free(row);
    free(rope_freqs);
    ft_gguf_writer_free(w);
    return status;
}
