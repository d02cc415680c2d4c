/* ft_quantize_file: read a GGUF model, choose each tensor's type
 * (quantize_plan.c), and write the converted file.
 *
 * The output is written tensor by tensor through the GGUF writer's fill
 * callbacks, so memory holds one output tensor at a time (the input stays
 * memory-mapped), and atomically, so a failure or a kill leaves no file.
 * Rows are converted in parallel: each is dequantized to F32 (unless it is
 * F32 already) and quantized with the reference quantizer of its target
 * type, row by row -- the result does not depend on the thread count and
 * equals llama-quantize's, which quantizes rows independently too. */
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/quantize.h"
#include "ft/threadpool.h"
#include "ft/types.h"

#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GGML_QNT_VERSION 2 /* general.quantization_version that llama.cpp writes */

struct q_run;

/* One output tensor. */
struct q_job {
    struct q_run *run;
    const struct ft_gguf_tensor *src;
    char *name;
    enum ft_type to;
    int64_t index; /* 1-based, in output order */
    size_t out_size;
};

struct q_run {
    const struct ft_quant_params *p;
    struct ft_threadpool *pool;
    float *scratch; /* n_threads rows of max_row floats */
    int64_t max_row;
    int64_t n_jobs;
    uint64_t bytes_done, bytes_total;
    /* the task being run by the pool */
    const struct q_job *cur;
    void *cur_dst;
    int64_t cur_rows;
    atomic_llong bad_row; /* first row with a non-finite value (or overflow), -1 if none */
};

static bool all_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

/* F16 has no infinity in a weight on purpose: a value beyond its range. */
static bool f16_row_finite(const uint16_t *h, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if ((h[i] & 0x7c00) == 0x7c00)
            return false;
    return true;
}

static void note_bad_row(struct q_run *r, int64_t row) {
    long long cur = atomic_load(&r->bad_row);
    while ((cur < 0 || row < cur) && !atomic_compare_exchange_weak(&r->bad_row, &cur, row)) {
    }
}

static void convert_rows(void *ctx, int ith, int nth) {
    struct q_run *r = ctx;
    const struct q_job *j = r->cur;
    const struct ft_gguf_tensor *src = j->src;
    const int64_t ne0 = src->ne[0];
    const struct ft_type_info *ti = ft_type_traits_ref(src->type);
    const struct ft_type_info *to = ft_type_traits_ref(j->to);
    const size_t row_in = ft_row_size(src->type, ne0), row_out = ft_row_size(j->to, ne0);
    float *tmp = r->scratch + (size_t)ith * (size_t)r->max_row;
    const int64_t r0 = r->cur_rows * ith / nth, r1 = r->cur_rows * (ith + 1) / nth;
    for (int64_t row = r0; row < r1; row++) {
        const uint8_t *in = (const uint8_t *)src->data + (size_t)row * row_in;
        uint8_t *out = (uint8_t *)r->cur_dst + (size_t)row * row_out;
        ti->to_float(in, tmp, ne0); /* a copy even for F32: the mapping need not be float-aligned */
        if (!all_finite(tmp, ne0)) {
            note_bad_row(r, row);
            continue;
        }
        to->from_float(tmp, out, ne0);
        if (j->to == FT_TYPE_F16 && !f16_row_finite((const uint16_t *)out, ne0))
            note_bad_row(r, row);
    }
}

static int fill_tensor(void *ud, void *dst, size_t size) {
    struct q_job *j = ud;
    struct q_run *r = j->run;
    const struct ft_gguf_tensor *src = j->src;
    if (r->p->progress) {
        struct ft_quant_progress pr = {.i_tensor = j->index, .n_tensors = r->n_jobs, .name = j->name,
                                       .from = src->type, .to = j->to, .bytes_done = r->bytes_done,
                                       .bytes_total = r->bytes_total};
        r->p->progress(r->p->progress_ud, &pr);
    }
    if (size != j->out_size) { /* cannot happen: the writer computed it from the same shape */
        FT_LOG_E("tensor '%s': internal size mismatch (%zu vs %zu)", j->name, size, j->out_size);
        return FT_EINVAL;
    }
    if (src->type == j->to) {
        memcpy(dst, src->data, size);
    } else {
        r->cur = j;
        r->cur_dst = dst;
        r->cur_rows = src->ne[0] ? (int64_t)(size / ft_row_size(j->to, src->ne[0])) : 0;
        atomic_store(&r->bad_row, -1);
        ft_threadpool_run(r->pool, convert_rows, r);
        long long bad = atomic_load(&r->bad_row);
        if (bad >= 0) {
            FT_LOG_E("tensor '%s': row %lld has a value that is NaN, infinite%s; refusing to write it",
                     j->name, bad, j->to == FT_TYPE_F16 ? " or beyond F16's range" : "");
            return FT_EFORMAT;
        }
    }
    r->bytes_done += size;
    return 0;
}

/* out is the same file as in (also through a link or another name). */
static bool same_file(const char *in, const char *out) {
    struct stat a, b;
    if (stat(in, &a) != 0 || stat(out, &b) != 0)
        return false;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static char *name_dup(struct ft_str s) {
    char *n = malloc(s.len + 1);
    if (n) {
        memcpy(n, s.s, s.len);
        n[s.len] = '\0';
    }
    return n;
}

/* Keys that must not be copied: set anew (moved last, as llama-quantize's
 * gguf_set_val_u32 does), or meaningless in a single output file. */
static bool key_dropped(struct ft_str k) {
    static const char *const drop[] = {"general.quantization_version", "general.file_type", "split.no",
                                       "split.count", "split.tensors.count"};
    for (size_t i = 0; i < FT_ARRAY_LEN(drop); i++)
        if (k.len == strlen(drop[i]) && !memcmp(k.s, drop[i], k.len))
            return true;
    return false;
}

int ft_quantize_file(const char *in, const char *out, const struct ft_quant_params *p,
                     struct ft_quant_report *report) {
    struct ft_quant_report rep = {0};
    struct ft_gguf *g = NULL;
    struct ft_gguf_writer *w = NULL;
    struct ft_quant_tensor *qt = NULL;
    struct ft_quant_choice *ch = NULL;
    struct q_job *jobs = NULL;
    size_t *order = NULL;
    struct q_run run = {.p = p};
    int64_t n = 0;
    int rc;

    if (!in || !out || !p) {
        FT_LOG_E("invalid argument");
        return FT_EINVAL;
    }
    const struct ft_ftype_desc *fd = ft_ftype_by_id((uint32_t)p->ftype);
    if (!fd) {
        FT_LOG_E("file type %d is not one ft can write", (int)p->ftype);
        return FT_EINVAL;
    }
    if (same_file(in, out)) {
        FT_LOG_E("%s: the output is the input file; choose another output name", out);
        return FT_EINVAL;
    }
    if ((rc = ft_gguf_open(in, &g)))
        return rc;
    uint32_t split_count = 1;
    if (ft_gguf_get_u32(g, "split.count", &split_count) == 0 && split_count > 1) {
        FT_LOG_E("%s is part 1 of %u of a split model; merge the parts first", in, split_count);
        rc = FT_EUNSUPPORTED;
        goto done;
    }
    struct ft_quant_model_info mi;
    if ((rc = ft_quant_model_info_read(g, &mi)))
        goto done;

    n = ft_gguf_n_tensors(g);
    qt = calloc((size_t)(n ? n : 1), sizeof(*qt));
    ch = calloc((size_t)(n ? n : 1), sizeof(*ch));
    jobs = calloc((size_t)(n ? n : 1), sizeof(*jobs));
    order = malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    if (!qt || !ch || !jobs || !order) {
        FT_LOG_E("out of memory");
        rc = FT_ENOMEM;
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
        jobs[i].name = name_dup(t->name);
        if (!jobs[i].name) {
            FT_LOG_E("out of memory");
            rc = FT_ENOMEM;
            goto done;
        }
        qt[i] = (struct ft_quant_tensor){.name = jobs[i].name, .type = t->type};
        memcpy(qt[i].ne, t->ne, sizeof(qt[i].ne));
    }
    if ((rc = ft_quant_choose(&mi, qt, (size_t)n, p->ftype, p->pure, p->overrides, p->n_overrides, ch)))
        goto done;

    if (!(w = ft_gguf_writer_new())) {
        rc = FT_ENOMEM;
        goto done;
    }
    for (int64_t i = 0; i < ft_gguf_n_kv(g); i++) {
        if (key_dropped(ft_gguf_kv_key(g, i)))
            continue;
        if ((rc = ft_gguf_writer_copy_kv(w, g, i)))
            goto done;
    }
    if ((rc = ft_gguf_writer_set_u32(w, "general.quantization_version", GGML_QNT_VERSION)) ||
        (rc = ft_gguf_writer_set_u32(w, "general.file_type", (uint32_t)p->ftype)))
        goto done;

    ft_quant_order(qt, (size_t)n, order);
    for (int64_t k = 0; k < n; k++) {
        int64_t i = (int64_t)order[k];
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
        struct q_job *j = &jobs[i];
        j->run = &run;
        j->src = t;
        j->to = ch[i].type;
        j->index = k + 1;
        int64_t rows = 1;
        for (int d = 1; d < FT_GGUF_MAX_DIMS; d++)
            rows *= t->ne[d]; /* the reader checked the element count fits */
        size_t row_out = ft_row_size(j->to, t->ne[0]);
        if (t->ne[0] && !row_out) { /* cannot happen: the fallback ensures it */
            FT_LOG_E("tensor '%s': %s cannot hold rows of %" PRId64, j->name, ft_type_name(j->to), t->ne[0]);
            rc = FT_EINVAL;
            goto done;
        }
        j->out_size = row_out * (size_t)rows;
        rep.n_tensors++;
        rep.bytes_in += t->size;
        rep.bytes_out += j->out_size;
        int64_t nel = t->ne[0] * rows;
        rep.n_params += (uint64_t)nel;
        if (j->to != t->type) {
            const struct ft_type_info *src_ti = ft_type_traits_ref(t->type);
            if (!src_ti || !src_ti->to_float) {
                FT_LOG_E("tensor '%s': cannot convert from %s (FreeToken cannot read that type)", j->name,
                         ft_type_name(t->type));
                rc = FT_EUNSUPPORTED;
                goto done;
            }
            rep.n_converted++;
            if (src_ti->is_quantized) {
                if (rep.n_requantized++ == 0)
                    rep.requant_from = t->type;
            }
            if (ch[i].fallback)
                rep.n_fallback++;
            run.max_row = FT_MAX(run.max_row, t->ne[0]);
        }
        rc = ft_gguf_writer_add_tensor_fn(w, j->name, j->to, t->n_dims, t->ne, fill_tensor, j);
        if (rc)
            goto done;
    }
    run.n_jobs = n;
    run.bytes_total = rep.bytes_out;
    atomic_init(&run.bad_row, -1);
    if ((rc = ft_threadpool_new(p->n_threads, &run.pool)))
        goto done;
    int nth = ft_threadpool_n_threads(run.pool);
    if (run.max_row > 0) {
        size_t nf;
        if (ft_mul_overflow((size_t)run.max_row, (size_t)nth, &nf) ||
            !(run.scratch = malloc(nf * sizeof(float)))) {
            FT_LOG_E("out of memory (%d rows of %" PRId64 " floats)", nth, run.max_row);
            rc = FT_ENOMEM;
            goto done;
        }
    }
    rc = ft_gguf_writer_write(w, out);

done:
    if (report)
        *report = rep;
    ft_threadpool_free(run.pool);
    free(run.scratch);
    for (int64_t i = 0; jobs && i < n; i++)
        free(jobs[i].name);
    free(jobs);
    free(order);
    free(ch);
    free(qt);
    ft_gguf_writer_free(w);
    ft_gguf_close(g);
    return rc;
}
