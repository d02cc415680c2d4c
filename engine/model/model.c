/* Model loading and the forward-pass entry point.
 *
 * ft_model_load() opens the GGUF file (mmap), picks the architecture from
 * general.architecture, reads the hyper-parameters from `<arch>.*` keys with
 * llama.cpp's defaults, binds every tensor with its shape and type checked,
 * and loads the tokenizer. Weights are not copied: every ft_weight points
 * into the mapping, which lives as long as the model; except under a NUMA
 * mode (--numa), where they point into copies placed on the right nodes
 * (engine/model/numa_weights.c), which also live as long as the model.
 *
 * ft_model_forward() validates a batch, reserves its KV blocks, and runs the
 * architecture's forward pass over internal batches of at most FT_UBATCH
 * tokens with scratch buffers that are reused across calls. One forward at
 * a time per model: the scratch and the thread pool belong to the model
 * (the scheduler thread owns both). */
#include "model_internal.h"

#include "arch.h"
#include "attention.h"
#include "blocks.h"
#include "kv_cache.h"
#include "matmul.h"
#include "moe_matmul.h"
#include "numa_weights.h"
#include "repack.h"

#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct ft_arch_ops *const g_archs[] = {
    &ft_arch_llama,
    &ft_arch_qwen2,
    &ft_arch_qwen3,
    &ft_arch_gemma3,
    &ft_arch_qwen3moe,
    &ft_arch_gptoss,
};

/* ---- metadata ------------------------------------------------------------------ */

/* `<arch>.<suffix>` as an int32 (scalar, or an array whose elements are all
 * equal: per-layer keys of uniform models). FT_ENOENT if absent (the
 * caller decides whether that is an error), FT_EUNSUPPORTED for per-layer
 * values that differ. */
static int key_i32(const struct ft_model *m, const char *suffix, int32_t *out) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", m->hp.arch_name, suffix);
    const int64_t id = ft_gguf_find_key(m->gguf, key);
    if (id < 0)
        return FT_ENOENT;
    if (ft_gguf_kv_type(m->gguf, id) != FT_GGUF_ARRAY)
        return ft_gguf_get_i32(m->gguf, key, out);

    enum ft_gguf_vtype t;
    const void *data;
    uint64_t n;
    int rc = ft_gguf_get_arr(m->gguf, key, &t, &data, &n);
    if (rc != FT_OK)
        return rc;
    if (n == 0 || (t != FT_GGUF_UINT32 && t != FT_GGUF_INT32)) {
        FT_LOG_E("%s: key %s must be an integer or a non-empty integer array", ft_gguf_path(m->gguf), key);
        return FT_EFORMAT;
    }
    const int32_t *v = data; /* UINT32 values above INT32_MAX fail the range check below */
    for (uint64_t i = 1; i < n; i++) {
        if (v[i] != v[0]) {
            FT_LOG_E("%s: per-layer values of %s differ (layer 0: %d, layer %llu: %d); not supported",
                     ft_gguf_path(m->gguf), key, (int)v[0], (unsigned long long)i, (int)v[i]);
            return FT_EUNSUPPORTED;
        }
    }
    if (v[0] < 0) {
        FT_LOG_E("%s: key %s is out of range", ft_gguf_path(m->gguf), key);
        return FT_EFORMAT;
    }
    *out = v[0];
    return FT_OK;
}

static int key_f32(const struct ft_model *m, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", m->hp.arch_name, suffix);
    return ft_gguf_get_f32(m->gguf, key, out);
}

static int key_str(const struct ft_model *m, const char *suffix, struct ft_str *out) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", m->hp.arch_name, suffix);
    return ft_gguf_get_str(m->gguf, key, out);
}

/* Absent keys keep the default already in *out; a present key with a bad
 * type is an error. */
static int opt(int rc) { return rc == FT_ENOENT ? FT_OK : rc; }

static int need(const struct ft_model *m, const char *suffix, int rc) {
    if (rc == FT_ENOENT) {
        FT_LOG_E("%s: required key %s.%s is missing", ft_gguf_path(m->gguf), m->hp.arch_name, suffix);
        return FT_EFORMAT;
    }
    return rc;
}

static bool str_eq(struct ft_str s, const char *c) {
    return s.len == strlen(c) && memcmp(s.s, c, s.len) == 0;
}

static int load_hparams(struct ft_model *m) {
    struct ft_hparams *hp = &m->hp;
    int rc;
    if ((rc = need(m, "context_length", key_i32(m, "context_length", &hp->n_ctx_train))) ||
        (rc = need(m, "embedding_length", key_i32(m, "embedding_length", &hp->n_embd))) ||
        (rc = need(m, "block_count", key_i32(m, "block_count", &hp->n_layer))) ||
        (rc = need(m, "feed_forward_length", key_i32(m, "feed_forward_length", &hp->n_ff))) ||
        (rc = need(m, "attention.head_count", key_i32(m, "attention.head_count", &hp->n_head))) ||
        (rc = need(m, "attention.layer_norm_rms_epsilon",
                   key_f32(m, "attention.layer_norm_rms_epsilon", &hp->norm_eps))))
        return rc;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_layer > 4096 || hp->n_head <= 0 || hp->n_ff <= 0) {
        FT_LOG_E("%s: bad sizes: n_embd %d, block_count %d, head_count %d, feed_forward_length %d",
                 ft_gguf_path(m->gguf), (int)hp->n_embd, (int)hp->n_layer, (int)hp->n_head, (int)hp->n_ff);
        return FT_EFORMAT;
    }
    hp->n_head_kv = hp->n_head;
    hp->head_dim_k = hp->n_embd / hp->n_head;
    hp->head_dim_v = hp->n_embd / hp->n_head;
    if ((rc = opt(key_i32(m, "attention.head_count_kv", &hp->n_head_kv))) ||
        (rc = opt(key_i32(m, "attention.key_length", &hp->head_dim_k))) ||
        (rc = opt(key_i32(m, "attention.value_length", &hp->head_dim_v))))
        return rc;
    hp->n_rot = hp->head_dim_k;
    if ((rc = opt(key_i32(m, "rope.dimension_count", &hp->n_rot))))
        return rc;
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0 || hp->head_dim_k <= 0 ||
        hp->head_dim_v <= 0 || hp->head_dim_k > 4096 || hp->head_dim_v > 4096 || hp->n_rot < 0 ||
        hp->n_rot > hp->head_dim_k || hp->n_rot % 2 != 0) {
        FT_LOG_E("%s: bad attention shape: head_count %d, head_count_kv %d, key_length %d, "
                 "value_length %d, rope.dimension_count %d",
                 ft_gguf_path(m->gguf), (int)hp->n_head, (int)hp->n_head_kv, (int)hp->head_dim_k,
                 (int)hp->head_dim_v, (int)hp->n_rot);
        return FT_EFORMAT;
    }
    if (!(hp->norm_eps >= 0.0f && hp->norm_eps < 1.0f)) {
        FT_LOG_E("%s: bad layer_norm_rms_epsilon %g", ft_gguf_path(m->gguf), hp->norm_eps);
        return FT_EFORMAT;
    }

    /* RoPE (llama_model::load_hparams and llama_context's cparams). */
    hp->rope_freq_base = 10000.0f;
    hp->rope_freq_base_swa = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    hp->rope_freq_scale_swa = 1.0f;
    hp->rope_ext_factor = 0.0f;
    hp->rope_attn_factor = 1.0f;
    hp->rope_beta_fast = 32.0f;
    hp->rope_beta_slow = 1.0f;
    hp->rope_n_ctx_orig = hp->n_ctx_train;
    if ((rc = opt(key_f32(m, "rope.freq_base", &hp->rope_freq_base))))
        return rc;
    float factor = 0.0f;
    rc = key_f32(m, "rope.scaling.factor", &factor);
    if (rc == FT_ENOENT)
        rc = opt(key_f32(m, "rope.scale_linear", &factor));
    if (rc)
        return rc;
    if (factor != 0.0f)
        hp->rope_freq_scale = 1.0f / factor;
    struct ft_str scaling = {"linear", 6};
    if ((rc = opt(key_str(m, "rope.scaling.type", &scaling))))
        return rc;
    float attn_factor = 1.0f;
    if ((rc = opt(key_i32(m, "rope.scaling.original_context_length", &hp->rope_n_ctx_orig))) ||
        (rc = opt(key_f32(m, "rope.scaling.attn_factor", &attn_factor))))
        return rc;
    if (str_eq(scaling, "none")) {
        hp->rope_freq_scale = 1.0f;
    } else if (str_eq(scaling, "yarn")) {
        /* cparams: ext_factor 1, attn_factor = mscale(factor) cancelled by
         * the kernel's own 1 + 0.1 ln(factor). */
        const float f = 1.0f / hp->rope_freq_scale;
        hp->rope_ext_factor = 1.0f;
        hp->rope_attn_factor = (f <= 1.0f ? 1.0f : 0.1f * logf(f) + 1.0f) / (1.0f + 0.1f * logf(f));
    } else if (!str_eq(scaling, "linear")) {
        FT_LOG_E("%s: rope scaling type '%.*s' is not supported (none, linear, yarn are)",
                 ft_gguf_path(m->gguf), (int)scaling.len, scaling.s);
        return FT_EUNSUPPORTED;
    }
    hp->rope_attn_factor *= attn_factor;
    if (!(hp->rope_freq_base > 0.0f) || !(hp->rope_freq_scale > 0.0f) || !isfinite(hp->rope_freq_scale)) {
        FT_LOG_E("%s: bad rope.freq_base %g or scaling factor %g", ft_gguf_path(m->gguf),
                 hp->rope_freq_base, factor);
        return FT_EFORMAT;
    }
    if (hp->rope_n_ctx_orig <= 0)
        hp->rope_n_ctx_orig = hp->n_ctx_train > 0 ? hp->n_ctx_train : 4096;

    if ((rc = opt(key_i32(m, "expert_count", &hp->n_expert))) ||
        (rc = opt(key_i32(m, "expert_used_count", &hp->n_expert_used))) ||
        (rc = opt(key_i32(m, "expert_feed_forward_length", &hp->n_ff_exp))))
        return rc;

    hp->pooling_type = -1;
    if ((rc = opt(key_i32(m, "pooling_type", &hp->pooling_type))))
        return rc;
    hp->rope_neox = m->arch->rope_neox;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim_k);
    if (m->arch->load_hparams && (rc = m->arch->load_hparams(m)))
        return rc;
    return FT_OK;
}

/* ---- scratch ----------------------------------------------------------------------- */

static void scratch_free(struct ft_scratch *s) {
    free(s->x);
    free(s->xb);
    free(s->tmp);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->att);
    free(s->gate);
    free(s->up);
    free(s->act);
    free(s->qg_act);
    free(s->qg_panel);
    free(s->row_pos);
    free(s->row_seq);
    free(s->row_out);
    free(s->row_want);
    free(s->row_seq_n);
    free(s->row_seq_i);
    free(s->row_att_n);
    free(s->row_att_i);
    free(s->row_gemv);
    free(s->attn_scratch);
    free(s->attn_parts);
    free(s->moe_logits);
    free(s->moe_sel);
    free(s->moe_w);
    free(s->moe_rank);
    free(s->moe_x);
    free(s->moe_gate);
    free(s->moe_up);
    free(s->moe_ones);
    free(s->moe_zeros);
    free(s->moe_act);
    free(s->moe_tiles);
    free(s->moe_src);
    free(s->moe_pair_w);
    memset(s, 0, sizeof(*s));
}

static void *grow(void *p, size_t n, size_t elem, bool *fail) {
    void *q = realloc(p, n * elem);
    if (!q) {
        *fail = true;
        return p;
    }
    return q;
}

/* Bytes of A packed for the float GEMM of n rows of up to k elements, the
 * most any level this CPU runs asks for any float weight type (the level
 * may change between forward passes: ft_cpu_force_isa). */
static size_t float_gemm_pack_need(size_t n, size_t k) {
    static const enum ft_type types[] = {FT_TYPE_F32, FT_TYPE_F16, FT_TYPE_BF16};
    size_t need = 0;
    for (int isa = 0; isa < FT_ISA_COUNT; isa++) {
        const struct ft_float_kernels *fk =
            ft_isa_supported((enum ft_isa)isa) ? ft_float_kernels_isa((enum ft_isa)isa) : NULL;
        if (!fk || fk->gemm_mr == 0 || !fk->gemm_packed_size)
            continue;
        for (size_t t = 0; t < FT_ARRAY_LEN(types); t++)
            need = FT_MAX(need, fk->gemm_packed_size(types[t], (int64_t)n, (int64_t)k));
    }
    return need;
}

/* Size every buffer for n tokens (n <= FT_UBATCH, so no overflow). */
static int scratch_reserve(struct ft_model *m, int32_t n) {
    struct ft_scratch *s = &m->s;
    if (s->cap >= n)
        return FT_OK;
    const struct ft_hparams *hp = &m->hp;
    const size_t N = (size_t)n;
    const size_t wq = (size_t)hp->n_head * (size_t)hp->head_dim_k;
    const size_t wk = (size_t)hp->n_head_kv * (size_t)hp->head_dim_k;
    const size_t wv = (size_t)hp->n_head_kv * (size_t)hp->head_dim_v;
    const size_t wa = (size_t)hp->n_head * (size_t)hp->head_dim_v;
    /* Widest matmul input; a converted row never takes more than 4 bytes
     * per element (F32 is the widest vec_dot_type). */
    const size_t max_in = FT_MAX(FT_MAX(FT_MAX((size_t)hp->n_embd, (size_t)hp->n_ff), wa), (size_t)hp->n_ff_exp);
    bool fail = false;
    s->x = grow(s->x, N * (size_t)hp->n_embd, sizeof(float), &fail);
    s->xb = grow(s->xb, N * (size_t)hp->n_embd, sizeof(float), &fail);
    s->tmp = grow(s->tmp, N * (size_t)hp->n_embd, sizeof(float), &fail);
    s->q = grow(s->q, N * wq, sizeof(float), &fail);
    s->k = grow(s->k, N * wk, sizeof(float), &fail);
    s->v = grow(s->v, N * wv, sizeof(float), &fail);
    s->att = grow(s->att, N * wa, sizeof(float), &fail);
    s->gate = grow(s->gate, N * (size_t)hp->n_ff, sizeof(float), &fail);
    s->up = grow(s->up, N * (size_t)hp->n_ff, sizeof(float), &fail);
    /* + 16 rows: the float GEMM packs A in panels of up to 16 rows, and
     * some levels' packed A is larger than its floats (amx's split F16) */
    const size_t act_bytes = FT_MAX((N + 16) * max_in * sizeof(float), float_gemm_pack_need(N, max_in));
    s->act = grow(s->act, (act_bytes + sizeof(float) - 1) / sizeof(float), sizeof(float), &fail);
    size_t qg_act = 0, qg_panel = 0;
    ft_matmul_scratch_need(m, n, &qg_act, &qg_panel);
    if (qg_act > 0) {
        /* 64-byte aligned: the GEMM kernels stream these tiles */
        const size_t nth = (size_t)ft_threadpool_n_threads(m->pool);
        free(s->qg_act);
        free(s->qg_panel);
        s->qg_act = aligned_alloc(64, (qg_act + 63) & ~(size_t)63);
        s->qg_panel = aligned_alloc(64, nth * qg_panel);
        s->qg_panel_stride = qg_panel;
        fail = fail || !s->qg_act || !s->qg_panel;
    }
    s->row_pos = grow(s->row_pos, N, sizeof(int32_t), &fail);
    s->row_seq = grow(s->row_seq, N, sizeof(int32_t), &fail);
    s->row_out = grow(s->row_out, N, sizeof(int32_t), &fail);
    s->row_want = grow(s->row_want, N, sizeof(uint8_t), &fail);
    s->row_seq_n = grow(s->row_seq_n, N, sizeof(int32_t), &fail);
    s->row_seq_i = grow(s->row_seq_i, N, sizeof(int32_t), &fail);
    s->row_att_n = grow(s->row_att_n, N, sizeof(int32_t), &fail);
    s->row_att_i = grow(s->row_att_i, N, sizeof(int32_t), &fail);
    s->row_gemv = grow(s->row_gemv, N, sizeof(uint8_t), &fail);
    if (hp->n_expert > 0) { /* engine/model/moe.c */
        const size_t P = N * (size_t)hp->n_expert_used;
        s->moe_logits = grow(s->moe_logits, N * (size_t)hp->n_expert, sizeof(float), &fail);
        s->moe_sel = grow(s->moe_sel, P, sizeof(int32_t), &fail);
        s->moe_w = grow(s->moe_w, P, sizeof(float), &fail);
        s->moe_rank = grow(s->moe_rank, P, sizeof(int32_t), &fail);
        s->moe_x = grow(s->moe_x, P * (size_t)hp->n_embd, sizeof(float), &fail);
        s->moe_gate = grow(s->moe_gate, P * (size_t)hp->n_ff_exp, sizeof(float), &fail);
        s->moe_up = grow(s->moe_up, P * (size_t)hp->n_ff_exp, sizeof(float), &fail);
        s->moe_ones = grow(s->moe_ones, N, sizeof(int32_t), &fail);
        s->moe_zeros = grow(s->moe_zeros, N, sizeof(int32_t), &fail);
        s->moe_src = grow(s->moe_src, P, sizeof(int32_t), &fail);
        s->moe_pair_w = grow(s->moe_pair_w, P, sizeof(float), &fail);
        size_t act = 0, tiles = 0; /* engine/model/moe_matmul.c */
        ft_moe_matmul_scratch_need(m, n, &act, &tiles);
        free(s->moe_act);
        free(s->moe_tiles);
        s->moe_act = aligned_alloc(64, (FT_MAX(act, (size_t)1) + 63) & ~(size_t)63);
        s->moe_tiles = aligned_alloc(64, (FT_MAX(tiles, (size_t)1) + 63) & ~(size_t)63);
        fail = fail || !s->moe_act || !s->moe_tiles;
        if (!fail)
            for (size_t i = 0; i < N; i++) {
                s->moe_ones[i] = 1;
                s->moe_zeros[i] = 0;
            }
    }
    if (fail) {
        FT_LOG_E("out of memory for the scratch of a %d-token batch", (int)n);
        return FT_ENOMEM;
    }
    s->act_size = act_bytes;
    s->cap = n;
    return FT_OK;
}

/* ---- load / free ------------------------------------------------------------------ */

int ft_model_load(const char *path, const struct ft_model_params *params, struct ft_model **out) {
    *out = NULL;
    if (!path) {
        FT_LOG_E("no model path");
        return FT_EINVAL;
    }
    struct ft_model *m = calloc(1, sizeof(*m));
    if (!m) {
        FT_LOG_E("out of memory");
        return FT_ENOMEM;
    }
    int rc = ft_gguf_open(path, &m->gguf);
    if (rc)
        goto fail;

    struct ft_str arch;
    rc = ft_gguf_get_str(m->gguf, "general.architecture", &arch);
    if (rc) {
        if (rc == FT_ENOENT)
            FT_LOG_E("%s: general.architecture is missing", path);
        rc = FT_EFORMAT;
        goto fail;
    }
    for (size_t i = 0; i < FT_ARRAY_LEN(g_archs); i++)
        if (str_eq(arch, g_archs[i]->name))
            m->arch = g_archs[i];
    if (!m->arch) {
        FT_LOG_E("%s: architecture '%.*s' is not supported (llama, qwen2, qwen3, gemma3, qwen3moe, gpt-oss are)", path,
                 (int)FT_MIN(arch.len, 64), arch.s);
        rc = FT_EUNSUPPORTED;
        goto fail;
    }
    m->hp.arch = m->arch->arch;
    snprintf(m->hp.arch_name, sizeof(m->hp.arch_name), "%s", m->arch->name);

    if ((rc = load_hparams(m)))
        goto fail;
    if ((rc = ft_tokenizer_load(m->gguf, &m->tok)))
        goto fail;
    m->hp.n_vocab = ft_tokenizer_n_vocab(m->tok);
    if (m->hp.n_vocab <= 0) {
        FT_LOG_E("%s: the vocabulary is empty", path);
        rc = FT_EFORMAT;
        goto fail;
    }

    m->layers = calloc((size_t)m->hp.n_layer, sizeof(*m->layers));
    if (!m->layers) {
        rc = FT_ENOMEM;
        FT_LOG_E("out of memory");
        goto fail;
    }
    if ((rc = m->arch->bind(m)))
        goto fail;

    const struct ft_threadpool_params tp = {
        .n_threads = params ? params->n_threads : 0,
        .numa = params ? params->numa : FT_NUMA_OFF,
        .numa_node = params ? params->numa_node : -1,
    };
    if ((rc = ft_threadpool_new_ex(&tp, &m->pool)))
        goto fail;
    if ((rc = ft_numa_weights_place(m, !(params && params->mmap))) || (rc = ft_weights_repack(m)))
        goto fail;
    /* Per-thread attention scratch does not depend on the batch size. */
    const int nth = ft_threadpool_n_threads(m->pool);
    m->s.attn_scratch_stride = ft_attention_scratch_size(ft_attn_rows_per_block(&m->hp), m->hp.n_head,
                                                         m->hp.n_head_kv, m->hp.head_dim_k, m->hp.head_dim_v);
    m->s.attn_scratch = malloc((size_t)nth * m->s.attn_scratch_stride);
    m->s.attn_parts = aligned_alloc(64, ft_attention_parts_size(m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim_v, nth));
    if (!m->s.attn_scratch || !m->s.attn_parts) {
        rc = FT_ENOMEM;
        FT_LOG_E("out of memory");
        goto fail;
    }
    FT_LOG_I("%s: %s, %d layers, n_embd %d, %d heads (%d kv, dim %d), n_ff %d, vocab %d, %d threads, numa %s",
             path, m->hp.arch_name, (int)m->hp.n_layer, (int)m->hp.n_embd, (int)m->hp.n_head,
             (int)m->hp.n_head_kv, (int)m->hp.head_dim_k, (int)m->hp.n_ff, (int)m->hp.n_vocab, nth,
             ft_numa_mode_name(tp.numa));
    *out = m;
    return FT_OK;

fail:
    ft_model_free(m);
    return rc;
}

void ft_model_free(struct ft_model *m) {
    if (!m)
        return;
    const char *stats = getenv("FT_READ_STATS");
    if (stats && !strcmp(stats, "1") && m->decode_passes > 0)
        FT_LOG_I("weights read per one-token pass: %.1f MB (mean of %llu passes; %.1f MB in all passes)",
                 (double)m->decode_bytes / (double)m->decode_passes / 1e6, (unsigned long long)m->decode_passes,
                 (double)atomic_load(&m->weight_bytes_read) / 1e6);
    ft_threadpool_free(m->pool);
    ft_numa_weights_free(m->numa_weights);
    scratch_free(&m->s);
    free(m->layers);
    ft_tokenizer_free(m->tok);
    ft_gguf_close(m->gguf);
    free(m);
}

const struct ft_hparams *ft_model_hparams(const struct ft_model *m) { return &m->hp; }
const struct ft_tokenizer *ft_model_tokenizer(const struct ft_model *m) { return m->tok; }
const struct ft_gguf *ft_model_gguf(const struct ft_model *m) { return m->gguf; }

size_t ft_model_kv_bytes_per_token(const struct ft_model *m) {
    const struct ft_hparams *hp = &m->hp;
    return (size_t)hp->n_layer * (size_t)hp->n_head_kv *
           ((size_t)hp->head_dim_k + (size_t)hp->head_dim_v) * sizeof(uint16_t);
}

/* ---- forward ----------------------------------------------------------------------- */

static bool wants(const struct ft_batch *b, int32_t i) {
    return b->want_logits ? b->want_logits[i] : i == b->n_tokens - 1;
}


int ft_model_forward(struct ft_model *m, struct ft_kv_cache *kv, const struct ft_batch *b,
                     float *logits) {
    return ft_model_forward_embd(m, kv, b, NULL, logits, NULL);
}

int ft_model_forward_embd(struct ft_model *m, struct ft_kv_cache *kv, const struct ft_batch *b,
                          const bool *want_embd, float *logits, float *embd) {
    if (!m || !kv || !b || !b->token || !b->pos || !b->seq_id) {
        FT_LOG_E("missing model, cache or batch arrays");
        return FT_EINVAL;
    }
    if (kv->m != m) {
        FT_LOG_E("the KV cache was created for another model");
        return FT_EINVAL;
    }
    if (b->n_tokens <= 0 || b->n_tokens > FT_MAX_BATCH) {
        FT_LOG_E("batch of %d tokens: must be 1..%d", (int)b->n_tokens, FT_MAX_BATCH);
        return FT_EINVAL;
    }
    int32_t n_want = 0, n_want_embd = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        if (b->token[i] < 0 || b->token[i] >= m->hp.n_vocab) {
            FT_LOG_E("token %d: id %d is outside the vocabulary (0..%d)", (int)i, (int)b->token[i],
                     (int)m->hp.n_vocab - 1);
            return FT_EINVAL;
        }
        n_want += wants(b, i);
        n_want_embd += want_embd && want_embd[i];
    }
    if (n_want > 0 && !logits) {
        FT_LOG_E("%d tokens want logits but no logits buffer was given", (int)n_want);
        return FT_EINVAL;
    }
    if (n_want_embd > 0 && !embd) {
        FT_LOG_E("%d tokens want their hidden state but no buffer was given", (int)n_want_embd);
        return FT_EINVAL;
    }
    int rc = scratch_reserve(m, FT_MIN(b->n_tokens, FT_UBATCH));
    if (rc)
        return rc;
    if ((rc = ft_kv_cache_prepare(kv, b)))
        return rc;

    int32_t out_done = 0, embd_done = 0;
    for (int32_t start = 0; start < b->n_tokens; start += FT_UBATCH) {
        const int32_t n = FT_MIN(FT_UBATCH, b->n_tokens - start);
        struct ft_scratch *s = &m->s;
        int32_t n_out = 0, n_logits = 0, n_embd = 0;
        for (int32_t i = 0; i < n; i++) {
            s->row_pos[i] = b->pos[start + i];
            s->row_seq[i] = b->seq_id[start + i];
            const uint8_t w = (uint8_t)((wants(b, start + i) ? FT_WANT_LOGITS : 0u) |
                                        (want_embd && want_embd[start + i] ? FT_WANT_EMBD : 0u));
            if (w) {
                s->row_want[n_out] = w;
                s->row_out[n_out++] = i;
                n_logits += (w & FT_WANT_LOGITS) != 0;
                n_embd += (w & FT_WANT_EMBD) != 0;
            }
        }
        struct ft_fwd f = {
            .m = m,
            .kv = kv,
            .n = n,
            .token = b->token + start,
            .n_rows = n,
            .n_out = n_out,
            .logits = logits ? logits + (size_t)out_done * (size_t)m->hp.n_vocab : NULL,
            .embd = embd ? embd + (size_t)embd_done * (size_t)m->hp.n_embd : NULL,
            .s = s,
        };
        ft_blk_rows_init(&f);
        const uint64_t read0 = atomic_load_explicit(&m->weight_bytes_read, memory_order_relaxed);
        m->arch->forward(&f);
        if (n == 1) {
            m->decode_bytes += atomic_load_explicit(&m->weight_bytes_read, memory_order_relaxed) - read0;
            m->decode_passes++;
        }
        for (int32_t i = 0; i < n; i++)
            ft_kv_cache_commit(kv, b->seq_id[start + i], b->pos[start + i]);
        out_done += n_logits;
        embd_done += n_embd;
    }
    return FT_OK;
}
