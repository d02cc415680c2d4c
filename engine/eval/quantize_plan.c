/* Which type each tensor gets when a model is quantized: a port of
 * llama.cpp's src/llama-quant.cpp (tensor_allows_quantization,
 * tensor_get_category, llama_tensor_get_type_impl, tensor_type_fallback),
 * restricted to the file types FreeToken writes and to quantization without
 * an importance matrix. The structure and the order of the tests follow
 * that file on purpose, so the two can be read side by side; where a rule
 * there depends on state (counters of attn_v and ffn_down tensors seen so
 * far), the same state is kept here and tensors are visited in the same
 * order (ft_quant_order). */
#include "ft/common.h"
#include "ft/quantize.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- file types ------------------------------------------------------------ */

static const struct ft_ftype_desc g_ftypes[] = {
    {"F32", FT_FTYPE_ALL_F32, FT_TYPE_F32, "32-bit float (dequantizes a quantized input)"},
    {"F16", FT_FTYPE_F16, FT_TYPE_F16, "16-bit float"},
    {"BF16", FT_FTYPE_BF16, FT_TYPE_BF16, "bfloat16"},
    {"Q8_0", FT_FTYPE_Q8_0, FT_TYPE_Q8_0, "8.50 bpw"},
    {"Q6_K", FT_FTYPE_Q6_K, FT_TYPE_Q6_K, "6.56 bpw"},
    {"Q5_1", FT_FTYPE_Q5_1, FT_TYPE_Q5_1, "6.00 bpw"},
    {"Q5_0", FT_FTYPE_Q5_0, FT_TYPE_Q5_0, "5.50 bpw"},
    {"Q5_K_M", FT_FTYPE_Q5_K_M, FT_TYPE_Q5_K, "Q5_K, attn_v/ffn_down Q6_K in some layers"},
    {"Q5_K_S", FT_FTYPE_Q5_K_S, FT_TYPE_Q5_K, "Q5_K throughout (output Q6_K)"},
    {"Q4_1", FT_FTYPE_Q4_1, FT_TYPE_Q4_1, "5.00 bpw"},
    {"Q4_0", FT_FTYPE_Q4_0, FT_TYPE_Q4_0, "4.50 bpw"},
    {"Q4_K_M", FT_FTYPE_Q4_K_M, FT_TYPE_Q4_K, "Q4_K, attn_v/ffn_down Q6_K in some layers"},
    {"Q4_K_S", FT_FTYPE_Q4_K_S, FT_TYPE_Q4_K, "Q4_K, early attn_v/ffn_down Q5_K"},
    {"Q3_K_L", FT_FTYPE_Q3_K_L, FT_TYPE_Q3_K, "Q3_K, attn_v/attn_output/ffn_down Q5_K"},
    {"Q3_K_M", FT_FTYPE_Q3_K_M, FT_TYPE_Q3_K, "Q3_K, attn_v/attn_output/ffn_down Q4_K-Q5_K"},
    {"Q3_K_S", FT_FTYPE_Q3_K_S, FT_TYPE_Q3_K, "Q3_K throughout (output Q6_K)"},
    {"Q2_K", FT_FTYPE_Q2_K, FT_TYPE_Q2_K, "Q2_K, attn_v/attn_output/ffn_down Q3_K-Q4_K"},
    {"IQ4_NL", FT_FTYPE_IQ4_NL, FT_TYPE_IQ4_NL, "4.50 bpw non-linear"},
    {"IQ4_XS", FT_FTYPE_IQ4_XS, FT_TYPE_IQ4_XS, "4.25 bpw non-linear"},
    {"MXFP4_MOE", FT_FTYPE_MXFP4_MOE, FT_TYPE_MXFP4, "MoE experts MXFP4, the other matrices Q8_0"},
};

size_t ft_ftype_list(const struct ft_ftype_desc **out) {
    *out = g_ftypes;
    return FT_ARRAY_LEN(g_ftypes);
}

const struct ft_ftype_desc *ft_ftype_by_id(uint32_t ftype) {
    for (size_t i = 0; i < FT_ARRAY_LEN(g_ftypes); i++)
        if ((uint32_t)g_ftypes[i].ftype == ftype)
            return &g_ftypes[i];
    return NULL;
}

const struct ft_ftype_desc *ft_ftype_by_name(const char *name) {
    static const struct {
        const char *alias, *name;
    } aliases[] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};
    if (!name)
        return NULL;
    for (size_t i = 0; i < FT_ARRAY_LEN(aliases); i++)
        if (!strcasecmp(name, aliases[i].alias))
            name = aliases[i].name;
    for (size_t i = 0; i < FT_ARRAY_LEN(g_ftypes); i++)
        if (!strcasecmp(name, g_ftypes[i].name))
            return &g_ftypes[i];
    return NULL;
}

/* Types a tensor can be quantized to: those with a reference quantizer. */
static bool writable_type(enum ft_type t) {
    switch (t) {
    case FT_TYPE_F32: case FT_TYPE_F16: case FT_TYPE_BF16: case FT_TYPE_Q8_0: case FT_TYPE_Q4_0:
    case FT_TYPE_Q4_1: case FT_TYPE_Q5_0: case FT_TYPE_Q5_1: case FT_TYPE_Q2_K: case FT_TYPE_Q3_K:
    case FT_TYPE_Q4_K: case FT_TYPE_Q5_K: case FT_TYPE_Q6_K: case FT_TYPE_IQ4_NL: case FT_TYPE_IQ4_XS:
    case FT_TYPE_MXFP4:
        return true;
    default:
        return false;
    }
}

int ft_quant_type_parse(const char *name, enum ft_type *out) {
    for (int t = 0; name && t < FT_TYPE_COUNT; t++) {
        const struct ft_type_info *ti = ft_type_info((enum ft_type)t);
        if (ti && writable_type((enum ft_type)t) && !strcasecmp(ti->name, name)) {
            *out = (enum ft_type)t;
            return 0;
        }
    }
    return FT_EINVAL;
}

/* ---- model facts -------------------------------------------------------- */

/* A per-layer count that may be a scalar or an array (layer 0 is used, as
 * llama.cpp's n_gqa() does). */
static int read_layer0(const struct ft_gguf *g, const char *key, int32_t *out) {
    uint32_t v;
    int rc = ft_gguf_get_u32(g, key, &v);
    if (rc == 0) {
        if (v > INT32_MAX)
            return FT_EFORMAT;
        *out = (int32_t)v;
        return 0;
    }
    if (rc == FT_ENOENT)
        return rc;
    int64_t ki = ft_gguf_find_key(g, key);
    if (ki < 0 || ft_gguf_kv_type(g, ki) != FT_GGUF_ARRAY)
        return rc;
    enum ft_gguf_vtype et;
    const void *data;
    uint64_t n;
    if ((rc = ft_gguf_get_arr(g, key, &et, &data, &n)) || n == 0)
        return rc ? rc : FT_EFORMAT;
    int64_t x;
    switch (et) {
    case FT_GGUF_UINT32: x = ((const uint32_t *)data)[0]; break;
    case FT_GGUF_INT32: x = ((const int32_t *)data)[0]; break;
    case FT_GGUF_UINT16: x = ((const uint16_t *)data)[0]; break;
    case FT_GGUF_INT16: x = ((const int16_t *)data)[0]; break;
    case FT_GGUF_UINT8: x = ((const uint8_t *)data)[0]; break;
    case FT_GGUF_INT8: x = ((const int8_t *)data)[0]; break;
    default:
        FT_LOG_E("%s: key '%s' is an array of %s, expected integers", ft_gguf_path(g), key, ft_gguf_vtype_name(et));
        return FT_EFORMAT;
    }
    if (x < 0 || x > INT32_MAX) {
        FT_LOG_E("%s: key '%s' has a bad first value %lld", ft_gguf_path(g), key, (long long)x);
        return FT_EFORMAT;
    }
    *out = (int32_t)x;
    return 0;
}

int ft_quant_model_info_read(const struct ft_gguf *g, struct ft_quant_model_info *mi) {
    memset(mi, 0, sizeof(*mi));
    struct ft_str arch;
    if (ft_gguf_get_str(g, "general.architecture", &arch) != 0 || arch.len == 0 || arch.len >= sizeof(mi->arch) ||
        memchr(arch.s, 0, arch.len)) {
        FT_LOG_E("%s: no usable general.architecture", ft_gguf_path(g));
        return FT_EFORMAT;
    }
    memcpy(mi->arch, arch.s, arch.len);
    mi->arch[arch.len] = '\0';
    char key[128];
    snprintf(key, sizeof(key), "%s.block_count", mi->arch);
    if (read_layer0(g, key, &mi->n_layer) != 0 || mi->n_layer <= 0) {
        FT_LOG_E("%s: missing or bad %s", ft_gguf_path(g), key);
        return FT_EFORMAT;
    }
    snprintf(key, sizeof(key), "%s.attention.head_count", mi->arch);
    int rc = read_layer0(g, key, &mi->n_head);
    if (rc && rc != FT_ENOENT) {
        FT_LOG_E("%s: bad %s", ft_gguf_path(g), key);
        return FT_EFORMAT;
    }
    snprintf(key, sizeof(key), "%s.attention.head_count_kv", mi->arch);
    rc = read_layer0(g, key, &mi->n_head_kv);
    if (rc == FT_ENOENT)
        mi->n_head_kv = mi->n_head; /* llama.cpp's default */
    else if (rc) {
        FT_LOG_E("%s: bad %s", ft_gguf_path(g), key);
        return FT_EFORMAT;
    }
    snprintf(key, sizeof(key), "%s.expert_count", mi->arch);
    rc = read_layer0(g, key, &mi->n_expert);
    if (rc == FT_ENOENT)
        mi->n_expert = 0;
    else if (rc) {
        FT_LOG_E("%s: bad %s", ft_gguf_path(g), key);
        return FT_EFORMAT;
    }
    /* llama.cpp's model size classes that matter here (src/models/ARCH.cpp). */
    const char *a = mi->arch;
    mi->is_70b = (!strcmp(a, "llama") && mi->n_layer == 80 && mi->n_head != mi->n_head_kv) ||
                 ((!strcmp(a, "qwen2") || !strcmp(a, "deci") || !strcmp(a, "olmo")) && mi->n_layer == 80) ||
                 (!strcmp(a, "jais2") && mi->n_layer == 68);
    return 0;
}

/* ---- tensor classes ------------------------------------------------------ */

enum category {
    CAT_OTHER,
    CAT_OUTPUT,
    CAT_TOKEN_EMBD,
    CAT_ATTN_QKV,
    CAT_ATTN_KV_B,
    CAT_ATTN_V,
    CAT_ATTN_K,
    CAT_ATTN_Q,
    CAT_ATTN_OUTPUT,
    CAT_FFN_UP,
    CAT_FFN_GATE,
    CAT_FFN_DOWN,
};

static bool has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static enum category category_of(const char *name) {
    if (!strcmp(name, "output.weight"))
        return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight"))
        return CAT_TOKEN_EMBD;
    if (has(name, "attn_qkv.weight"))
        return CAT_ATTN_QKV;
    if (has(name, "attn_kv_b.weight"))
        return CAT_ATTN_KV_B;
    if (has(name, "attn_v.weight"))
        return CAT_ATTN_V;
    if (has(name, "attn_k.weight"))
        return CAT_ATTN_K;
    if (has(name, "attn_q.weight"))
        return CAT_ATTN_Q;
    if (has(name, "attn_output.weight"))
        return CAT_ATTN_OUTPUT;
    if (has(name, "ffn_up"))
        return CAT_FFN_UP;
    if (has(name, "ffn_gate"))
        return CAT_FFN_GATE;
    if (has(name, "ffn_down"))
        return CAT_FFN_DOWN;
    return CAT_OTHER;
}

/* attn_v and the tensors that hold V (more sensitive to quantization). */
static bool is_attn_v_like(enum category c) { return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B; }

/* ggml_n_dims: trailing dimensions of size 1 do not count. */
static int n_dims_of(const int64_t ne[4]) {
    for (int i = 3; i >= 1; i--)
        if (ne[i] > 1)
            return i + 1;
    return 1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !memcmp(s + n - m, suffix, m);
}

/* llama.cpp's tensor_allows_quantization (quantize_output_tensor on,
 * only_copy off). */
static bool allows_quantization(const struct ft_quant_tensor *t) {
    if (n_dims_of(t->ne) < 2)
        return false;
    const char *n = t->name;
    bool q = ends_with(n, "weight");
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
        "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
        "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
        "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
        "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
        "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    for (size_t i = 0; q && i < FT_ARRAY_LEN(never); i++)
        if (has(n, never[i]))
            q = false;
    /* positional embeddings and token types (BERT) */
    if (!strcmp(n, "position_embd.weight") || !strcmp(n, "token_types.weight"))
        q = false;
    return q;
}

/* ---- the rules ------------------------------------------------------------ */

struct state {
    const struct ft_quant_model_info *mi;
    enum ft_ftype ftype;
    bool falcon;
    bool tied; /* no output.weight: token_embd is the output head */
    int n_attention_wv, i_attention_wv;
    int n_ffn_down, i_ffn_down;
    int n_ffn_gate, i_ffn_gate;
    int n_ffn_up, i_ffn_up;
};

static bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

/* The layer of an ffn tensor: its position among its kind, except in MoE
 * models where experts are not consecutive and the name says the layer. */
static int layer_info(const struct state *s, int counter, int n_layer, const char *name, int *i_layer) {
    *i_layer = counter;
    if (s->mi->n_expert > 1) {
        if (sscanf(name, "blk.%d.", i_layer) != 1) {
            FT_LOG_E("failed to determine the layer of tensor %s", name);
            return FT_EFORMAT;
        }
        if (*i_layer < 0 || *i_layer >= n_layer) {
            FT_LOG_E("bad layer %d for tensor %s: must be in [0, %d)", *i_layer, name, n_layer);
            return FT_EFORMAT;
        }
    }
    return 0;
}

static int64_t blck(enum ft_type t) { return ft_type_info(t)->blck_size; }

/* llama_tensor_get_type_impl for the file types of g_ftypes. */
static int choose_mixture(struct state *s, enum ft_type *type, const struct ft_quant_tensor *t, enum category cat) {
    enum ft_type nt = *type;
    const enum ft_ftype ft = s->ftype;
    const int n_gqa = s->mi->n_head_kv > 0 ? s->mi->n_head / s->mi->n_head_kv : 0;
    const int n_expert = s->mi->n_expert;
    int i_layer, rc;

    if (cat == CAT_OUTPUT || (s->tied && cat == CAT_TOKEN_EMBD)) {
        if (ft == FT_FTYPE_MXFP4_MOE || s->falcon || t->ne[0] % blck(nt) != 0)
            nt = FT_TYPE_Q8_0;
        else if (nt != FT_TYPE_Q8_0)
            nt = FT_TYPE_Q6_K;
    } else if (ft == FT_FTYPE_MXFP4_MOE) {
        /* expert matrices (3D) in MXFP4, every other matrix in Q8_0
         * (llama.cpp also excludes bailingmoe3's 3D MLA projections) */
        nt = t->ne[2] > 1 ? FT_TYPE_MXFP4 : FT_TYPE_Q8_0;
    } else if (cat == CAT_TOKEN_EMBD) {
        /* only the IQ and ternary file types change it */
    } else if (is_attn_v_like(cat)) {
        if (ft == FT_FTYPE_Q2_K)
            nt = n_gqa >= 4 ? FT_TYPE_Q4_K : FT_TYPE_Q3_K;
        else if (ft == FT_FTYPE_Q3_K_M)
            nt = s->i_attention_wv < 2 ? FT_TYPE_Q5_K : FT_TYPE_Q4_K;
        else if (ft == FT_FTYPE_Q3_K_L)
            nt = FT_TYPE_Q5_K;
        else if ((ft == FT_FTYPE_IQ4_NL || ft == FT_FTYPE_IQ4_XS) && n_gqa >= 4)
            nt = FT_TYPE_Q5_K;
        else if ((ft == FT_FTYPE_Q4_K_M || ft == FT_FTYPE_Q5_K_M) &&
                 use_more_bits(s->i_attention_wv, s->n_attention_wv))
            nt = FT_TYPE_Q6_K;
        else if (ft == FT_FTYPE_Q4_K_S && s->i_attention_wv < 4)
            nt = FT_TYPE_Q5_K;
        /* 70B: attn_v is 8x smaller than attn_q (8 heads share it), so more
         * bits cost almost nothing. */
        if (s->mi->is_70b && (nt == FT_TYPE_Q3_K || nt == FT_TYPE_Q4_K))
            nt = FT_TYPE_Q5_K;
        if (n_expert == 8)
            nt = FT_TYPE_Q8_0;
        ++s->i_attention_wv;
    } else if (cat == CAT_ATTN_K) {
        if (n_expert == 8)
            nt = FT_TYPE_Q8_0;
    } else if (cat == CAT_ATTN_Q) {
        /* only IQ file types */
    } else if (cat == CAT_FFN_DOWN) {
        if ((rc = layer_info(s, s->i_ffn_down, s->n_ffn_down, t->name, &i_layer)))
            return rc;
        const int n_layer = s->n_ffn_down;
        if (ft == FT_FTYPE_Q2_K)
            nt = FT_TYPE_Q3_K;
        else if (ft == FT_FTYPE_Q3_K_M)
            nt = i_layer < n_layer / 16                            ? FT_TYPE_Q5_K
                 : !s->falcon || use_more_bits(i_layer, n_layer) ? FT_TYPE_Q4_K
                                                                   : FT_TYPE_Q3_K;
        else if (ft == FT_FTYPE_Q3_K_L)
            nt = s->falcon ? FT_TYPE_Q4_K : FT_TYPE_Q5_K;
        else if (ft == FT_FTYPE_Q4_K_M) {
            if (s->falcon)
                nt = i_layer < n_layer / 16 ? FT_TYPE_Q6_K
                     : use_more_bits(i_layer, n_layer) ? FT_TYPE_Q5_K
                                                       : FT_TYPE_Q4_K;
            else if (use_more_bits(i_layer, n_layer))
                nt = FT_TYPE_Q6_K;
        } else if (i_layer < n_layer / 8 && (ft == FT_FTYPE_IQ4_NL || ft == FT_FTYPE_IQ4_XS))
            nt = FT_TYPE_Q5_K; /* (no importance matrix) */
        else if (ft == FT_FTYPE_Q5_K_M && use_more_bits(i_layer, n_layer))
            nt = FT_TYPE_Q6_K;
        else if (ft == FT_FTYPE_Q4_K_S && !s->falcon && i_layer < n_layer / 8)
            nt = FT_TYPE_Q5_K;
        ++s->i_ffn_down;
    } else if (cat == CAT_ATTN_OUTPUT) {
        if (!s->falcon) {
            if (n_expert == 8) {
                if (ft == FT_FTYPE_Q2_K || ft == FT_FTYPE_Q3_K_S || ft == FT_FTYPE_Q3_K_M || ft == FT_FTYPE_Q4_K_S ||
                    ft == FT_FTYPE_Q4_K_M || ft == FT_FTYPE_IQ4_NL || ft == FT_FTYPE_IQ4_XS)
                    nt = FT_TYPE_Q5_K;
            } else {
                if (ft == FT_FTYPE_Q2_K)
                    nt = FT_TYPE_Q3_K;
                else if (ft == FT_FTYPE_Q3_K_M)
                    nt = FT_TYPE_Q4_K;
                else if (ft == FT_FTYPE_Q3_K_L)
                    nt = FT_TYPE_Q5_K;
            }
        } else if (ft == FT_FTYPE_Q3_K_L) {
            nt = FT_TYPE_Q4_K;
        }
    } else if (cat == CAT_FFN_GATE) {
        if ((rc = layer_info(s, s->i_ffn_gate, s->n_ffn_gate, t->name, &i_layer)))
            return rc;
        ++s->i_ffn_gate;
    } else if (cat == CAT_FFN_UP) {
        if ((rc = layer_info(s, s->i_ffn_up, s->n_ffn_up, t->name, &i_layer)))
            return rc;
        ++s->i_ffn_up;
    }
    /* (attn_qkv has a rule of its own in llama.cpp, after the attn_v one,
     * which it never reaches: attn_qkv is attn_v-like.) */
    *type = nt;
    return 0;
}

/* tensor_type_fallback: a row length the type's block does not divide. */
static enum ft_type shape_fallback(const struct ft_quant_tensor *t, enum ft_type target, bool *fell_back) {
    *fell_back = false;
    if (t->ne[0] % blck(target) == 0)
        return target;
    *fell_back = true;
    enum ft_type r;
    switch (target) {
    case FT_TYPE_IQ4_XS: r = FT_TYPE_IQ4_NL; break;
    case FT_TYPE_Q2_K:
    case FT_TYPE_Q3_K: r = FT_TYPE_Q4_0; break;
    case FT_TYPE_Q4_K: r = FT_TYPE_Q5_0; break;
    case FT_TYPE_Q5_K: r = FT_TYPE_Q5_1; break;
    case FT_TYPE_Q6_K: r = FT_TYPE_Q8_0; break;
    default: r = target; break; /* a 32-block type: only F16 is left */
    }
    if (t->ne[0] % blck(r) != 0)
        r = FT_TYPE_F16;
    return r;
}

static int layer_of(const char *name) {
    int layer = -1;
    sscanf(name, "blk.%d.", &layer); /* as llama_model_loader's weight_name_comparer */
    return layer;
}

static int order_cmp(const void *a, const void *b, void *ctx) {
    const struct ft_quant_tensor *t = ctx;
    const struct ft_quant_tensor *x = &t[*(const size_t *)a];
    const struct ft_quant_tensor *y = &t[*(const size_t *)b];
    int lx = layer_of(x->name), ly = layer_of(y->name);
    if (lx != ly)
        return lx < ly ? -1 : 1;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

void ft_quant_order(const struct ft_quant_tensor *t, size_t n, size_t *order) {
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, n, sizeof(*order), order_cmp, (void *)t);
}

int ft_quant_choose(const struct ft_quant_model_info *mi, const struct ft_quant_tensor *t, size_t n,
                    enum ft_ftype ftype, bool pure, const struct ft_quant_override *ov, int n_ov,
                    struct ft_quant_choice *choices) {
    const struct ft_ftype_desc *fd = ft_ftype_by_id((uint32_t)ftype);
    if (!fd) {
        FT_LOG_E("file type %d is not one ft can write", (int)ftype);
        return FT_EINVAL;
    }
    struct state s = {.mi = mi, .ftype = ftype, .falcon = !strcmp(mi->arch, "falcon"), .tied = true};
    for (size_t i = 0; i < n; i++) {
        enum category c = category_of(t[i].name);
        if (is_attn_v_like(c))
            ++s.n_attention_wv;
        if (c == CAT_OUTPUT)
            s.tied = false;
    }
    s.n_ffn_down = s.n_ffn_gate = s.n_ffn_up = mi->n_layer;

    size_t *order = malloc(sizeof(size_t) * (n ? n : 1));
    if (!order) {
        FT_LOG_E("out of memory");
        return FT_ENOMEM;
    }
    ft_quant_order(t, n, order);
    const bool quantized_default = ft_type_info(fd->default_type)->is_quantized;
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        const struct ft_quant_tensor *x = &t[order[k]];
        struct ft_quant_choice *ch = &choices[order[k]];
        ch->fallback = false;
        ch->type = x->type;
        if (!allows_quantization(x))
            continue;
        enum ft_type nt = fd->default_type;
        bool manual = false;
        for (int j = 0; j < n_ov; j++) {
            if (fnmatch(ov[j].glob, x->name, 0) == 0) {
                nt = ov[j].type;
                manual = true;
                break;
            }
        }
        /* llama.cpp applies the mixture and the fallbacks only when the
         * default type is quantized (F16/BF16/F32 files are uniform); an
         * explicit override is honoured for every file type. */
        if (quantized_default || manual) {
            if (!manual && !pure)
                rc = choose_mixture(&s, &nt, x, category_of(x->name));
            nt = shape_fallback(x, nt, &ch->fallback);
        }
        ch->type = nt;
    }
    free(order);
    return rc;
}
