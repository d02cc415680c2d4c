/* Tensor binding for the architecture files: ft_bind() looks a weight up in
 * the GGUF file by name and checks its shape and type before it points the
 * struct ft_weight into the mapping; ft_bind_io, ft_bind_attention and
 * ft_bind_ffn bind the tensors every architecture shares, with the shapes
 * the hyperparameters give. A missing tensor or a wrong shape is
 * FT_EFORMAT, a type this engine cannot run FT_EUNSUPPORTED, each with one
 * log line naming the tensor. */
#include "bind.h"

#include "ft/common.h"
#include "ft/gguf.h"
#include "model_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void shape_str(char *buf, size_t cap, const int64_t *ne, int n_dims) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n_dims && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (o < cap)
        snprintf(buf + o, cap - o, "]");
}

/* Bind `name` expecting GGUF dims want[0..n_dims) (the rest 1) as a matrix
 * of `rows` rows of want[0] (rows 0: an F32 vector of every element). */
static int bind_dims(struct ft_model *m, struct ft_weight *w, bool optional, const int64_t *want, int n_dims,
                     int64_t rows, const char *name) {
    memset(w, 0, sizeof(*w));
    const char *path = ft_gguf_path(m->gguf);
    const struct ft_gguf_tensor *t = ft_gguf_find_tensor(m->gguf, name);
    const int64_t cols = want[0];
    char ws[64], hs[64];
    shape_str(ws, sizeof(ws), want, n_dims);
    if (!t) {
        if (optional)
            return FT_OK;
        FT_LOG_E("%s: tensor '%s' is missing (expected shape %s)", path, name, ws);
        return FT_EFORMAT;
    }
    bool ok = true;
    for (int i = 0; i < FT_GGUF_MAX_DIMS; i++)
        ok = ok && t->ne[i] == (i < n_dims ? want[i] : 1);
    if (!ok) {
        shape_str(hs, sizeof(hs), t->ne, t->n_dims);
        FT_LOG_E("%s: tensor '%s' has shape %s, expected %s", path, name, hs, ws);
        return FT_EFORMAT;
    }

    const struct ft_type_info *ti = ft_type_traits(t->type);
    if (rows == 0) {
        /* Norm weights and biases are used as float arrays. */
        if (t->type != FT_TYPE_F32 || ((uintptr_t)t->data & 3) != 0) {
            FT_LOG_E("%s: tensor '%s' has type %s; vectors must be F32", path, name, ft_type_name(t->type));
            return FT_EUNSUPPORTED;
        }
    } else {
        if (!ti || !ti->can_run || !ti->to_float || !ti->vec_dot) {
            FT_LOG_E("%s: tensor '%s' has type %s, which this engine cannot run", path, name,
                     ft_type_name(t->type));
            return FT_EUNSUPPORTED;
        }
        const struct ft_type_info *vt = ft_type_traits(ti->vec_dot_type);
        if (!vt || (ti->vec_dot_type != FT_TYPE_F32 && !vt->from_float_act) ||
            ft_row_size(ti->vec_dot_type, cols) == 0) {
            FT_LOG_E("%s: tensor '%s' (%s, row length %lld): activations cannot be converted to %s",
                     path, name, ft_type_name(t->type), (long long)cols, ft_type_name(ti->vec_dot_type));
            return FT_EUNSUPPORTED;
        }
    }
    int64_t n_el = 1; /* dims were checked against the file's, whose product fits */
    for (int i = 0; i < n_dims; i++)
        n_el *= want[i];
    const int64_t row_len = rows > 0 ? cols : n_el;
    const size_t row_size = ft_row_size(t->type, row_len);
    if (row_size == 0) {
        FT_LOG_E("%s: tensor '%s': row length %lld is not a multiple of the %s block size", path, name,
                 (long long)row_len, ft_type_name(t->type));
        return FT_EFORMAT;
    }
    w->data = t->data;
    w->type = t->type;
    w->rows = rows > 0 ? rows : 1;
    w->cols = row_len;
    w->row_size = row_size;
    return FT_OK;
}

int ft_bind(struct ft_model *m, struct ft_weight *w, bool optional, int64_t rows, int64_t cols,
            const char *fmt, ...) {
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    const int64_t want[2] = {cols, rows};
    return bind_dims(m, w, optional, want, rows > 0 ? 2 : 1, rows, name);
}

int ft_bind_experts(struct ft_model *m, struct ft_weight *w, bool optional, int64_t rows, int64_t cols,
                    const char *fmt, ...) {
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    const int64_t n_expert = m->hp.n_expert;
    if (rows > 0) {
        const int64_t want[3] = {cols, rows, n_expert};
        return bind_dims(m, w, optional, want, 3, rows * n_expert, name);
    }
    const int64_t want[2] = {cols, n_expert};
    return bind_dims(m, w, optional, want, 2, 0, name);
}

int ft_bind_attention(struct ft_model *m, int il, unsigned opts) {
    const struct ft_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, D = hp->head_dim_k;
    const int64_t Q = (int64_t)hp->n_head * hp->head_dim_k;
    const int64_t K = (int64_t)hp->n_head_kv * hp->head_dim_k;
    const int64_t V = (int64_t)hp->n_head_kv * hp->head_dim_v;
    const int64_t O = (int64_t)hp->n_head * hp->head_dim_v;
    struct ft_layer *l = &m->layers[il];
    int rc;
    if ((rc = ft_bind(m, &l->attn_norm, false, 0, E, "blk.%d.attn_norm.weight", il)) || /* (E) */
        (rc = ft_bind(m, &l->wq, false, Q, E, "blk.%d.attn_q.weight", il)) ||           /* (Q, E) */
        (rc = ft_bind(m, &l->wk, false, K, E, "blk.%d.attn_k.weight", il)) ||           /* (K, E) */
        (rc = ft_bind(m, &l->wv, false, V, E, "blk.%d.attn_v.weight", il)) ||           /* (V, E) */
        (rc = ft_bind(m, &l->wo, false, E, O, "blk.%d.attn_output.weight", il)))        /* (E, O) */
        return rc;
    if ((opts & FT_BIND_QKV_BIAS) &&
        ((rc = ft_bind(m, &l->bq, true, 0, Q, "blk.%d.attn_q.bias", il)) || /* (Q) */
         (rc = ft_bind(m, &l->bk, true, 0, K, "blk.%d.attn_k.bias", il)) || /* (K) */
         (rc = ft_bind(m, &l->bv, true, 0, V, "blk.%d.attn_v.bias", il))))  /* (V) */
        return rc;
    if ((opts & FT_BIND_O_BIAS) && (rc = ft_bind(m, &l->bo, true, 0, E, "blk.%d.attn_output.bias", il))) /* (E) */
        return rc;
    if ((opts & FT_BIND_QK_NORM) &&
        ((rc = ft_bind(m, &l->q_norm, false, 0, D, "blk.%d.attn_q_norm.weight", il)) || /* (D) */
         (rc = ft_bind(m, &l->k_norm, false, 0, D, "blk.%d.attn_k_norm.weight", il))))  /* (D) */
        return rc;
    return FT_OK;
}

int ft_bind_ffn(struct ft_model *m, int il) {
    const int64_t E = m->hp.n_embd, F = m->hp.n_ff;
    struct ft_layer *l = &m->layers[il];
    int rc;
    if ((rc = ft_bind(m, &l->ffn_norm, false, 0, E, "blk.%d.ffn_norm.weight", il)) || /* (E) */
        (rc = ft_bind(m, &l->ffn_gate, false, F, E, "blk.%d.ffn_gate.weight", il)) || /* (F, E) */
        (rc = ft_bind(m, &l->ffn_up, false, F, E, "blk.%d.ffn_up.weight", il)) ||     /* (F, E) */
        (rc = ft_bind(m, &l->ffn_down, false, E, F, "blk.%d.ffn_down.weight", il)))   /* (E, F) */
        return rc;
    return FT_OK;
}

int ft_bind_io(struct ft_model *m) {
    const struct ft_hparams *hp = &m->hp;
    int rc;
    if ((rc = ft_bind(m, &m->tok_embd, false, hp->n_vocab, hp->n_embd, "token_embd.weight")) ||
        (rc = ft_bind(m, &m->output_norm, false, 0, hp->n_embd, "output_norm.weight")) ||
        (rc = ft_bind(m, &m->output, true, hp->n_vocab, hp->n_embd, "output.weight")))
        return rc;
    if (!m->output.data) {
        m->output = m->tok_embd;
        m->hp.tied_output = true;
    }
    return FT_OK;
}

int ft_bind_moe(struct ft_model *m, int il, unsigned opts) {
    const struct ft_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff_exp, X = hp->n_expert;
    struct ft_layer *l = &m->layers[il];
    const bool b = (opts & FT_BIND_MOE_BIAS) != 0;
    int rc;
    if ((rc = ft_bind(m, &l->ffn_gate_inp, false, X, E, "blk.%d.ffn_gate_inp.weight", il)) ||   /* (X, E) */
        (rc = ft_bind_experts(m, &l->ffn_gate_exps, false, F, E, "blk.%d.ffn_gate_exps.weight", il)) ||
        (rc = ft_bind_experts(m, &l->ffn_up_exps, false, F, E, "blk.%d.ffn_up_exps.weight", il)) ||
        (rc = ft_bind_experts(m, &l->ffn_down_exps, false, E, F, "blk.%d.ffn_down_exps.weight", il)))
        return rc;
    if (b && ((rc = ft_bind(m, &l->ffn_gate_inp_b, false, 0, X, "blk.%d.ffn_gate_inp.bias", il)) ||
              (rc = ft_bind_experts(m, &l->ffn_gate_exps_b, false, 0, F, "blk.%d.ffn_gate_exps.bias", il)) ||
              (rc = ft_bind_experts(m, &l->ffn_up_exps_b, false, 0, F, "blk.%d.ffn_up_exps.bias", il)) ||
              (rc = ft_bind_experts(m, &l->ffn_down_exps_b, false, 0, E, "blk.%d.ffn_down_exps.bias", il))))
        return rc;
    if (l->ffn_gate_inp.type != FT_TYPE_F32) {
        FT_LOG_E("%s: blk.%d.ffn_gate_inp.weight has type %s; the router must be F32 (llama-quantize keeps it so)",
                 ft_gguf_path(m->gguf), il, ft_type_name(l->ffn_gate_inp.type));
        return FT_EUNSUPPORTED;
    }
    return FT_OK;
}
