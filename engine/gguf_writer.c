/* GGUF v3 writer: collects key/values (in insertion order; replacing a key
 * keeps its position) and tensors (data borrowed, not copied), then
 * serializes them either into a malloc'd buffer or atomically into a file
 * ("<path>.tmp-XXXXXX", fsync, rename; removed on any failure).
 *
 * Every value is stored already serialized (the bytes that follow the type
 * tag in the file), so ft_gguf_writer_copy_kv() copies any value verbatim,
 * nested arrays included, from ft_gguf_kv_raw().
 *
 * Alignment: the value of the key general.alignment if present (it must be
 * a uint32 power of two), else 32. ft_gguf_writer_set_alignment() sets that
 * key, so the file always says which alignment it uses. Tensor data starts
 * at an aligned offset and every tensor is zero-padded to the alignment
 * (a file without tensors ends right after its metadata).
 *
 * The writer validates what it is given with the reader's rules (names
 * 1..65536 bytes without NUL, unique; shapes and types), so whatever it
 * writes, ft_gguf_open() reads back.
 *
 * A tensor's bytes come either from a borrowed buffer or from a fill
 * callback that produces them chunk by chunk while the file is written
 * (ft_gguf_writer_add_tensor_fill), so generated or converted models
 * stream to disk instead of being built in memory first.
 */
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/types.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GW_MAX_NAME 65536

struct gw_kv {
    char *key; /* NUL-terminated copy */
    size_t key_len;
    enum ft_gguf_vtype type;
    uint8_t *val; /* serialized value (after the type tag) */
    size_t val_len;
};

struct gw_tensor {
    char *name;
    size_t name_len;
    enum ft_type type;
    int n_dims;
    int64_t ne[FT_GGUF_MAX_DIMS];
    const void *data; /* borrowed; NULL when fill is set */
    ft_gguf_fill_fn fill;
    void *fill_ud;
    size_t size;
};

struct ft_gguf_writer {
    struct gw_kv *kv;
    size_t n_kv, cap_kv;
    struct gw_tensor *t;
    size_t n_t, cap_t;
    int err; /* sticky error from ft_gguf_writer_set_alignment() */
};

struct ft_gguf_writer *ft_gguf_writer_new(void) {
    struct ft_gguf_writer *w = calloc(1, sizeof(*w));
    if (!w)
        FT_LOG_E("out of memory");
    return w;
}

void ft_gguf_writer_free(struct ft_gguf_writer *w) {
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* A name for messages: printable ASCII kept, the rest as '?', cut at 96. */
static const char *gw_show(char *buf, size_t cap, const char *s, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 4 < cap && i < 96; i++)
        buf[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (len > 96 && o + 4 < cap) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

static int gw_check_name(const char *func, const char *what, const char *s, size_t len) {
    if (len == 0 || len > GW_MAX_NAME) {
        ft_log(FT_LOG_ERROR, func, "%s is %zu bytes long, must be 1..%d", what, len, GW_MAX_NAME);
        return FT_EINVAL;
    }
    if (memchr(s, 0, len)) {
        ft_log(FT_LOG_ERROR, func, "%s contains a NUL byte", what);
        return FT_EINVAL;
    }
    return 0;
}

static ptrdiff_t gw_find_key(const struct ft_gguf_writer *w, const char *key, size_t len) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (w->kv[i].key_len == len && memcmp(w->kv[i].key, key, len) == 0)
            return (ptrdiff_t)i;
    return -1;
}

/* Store (key, type, val): replaces in place or appends. Takes ownership of
 * `val` (malloc'd) on success and on failure. */
static int gw_put(struct ft_gguf_writer *w, const char *func, const char *key, size_t key_len, enum ft_gguf_vtype type,
                  uint8_t *val, size_t val_len) {
    int rc;
    if (!w || !key) {
        ft_log(FT_LOG_ERROR, func, "invalid argument (writer %p, key %p)", (void *)w, (const void *)key);
        free(val);
        return FT_EINVAL;
    }
    if ((rc = gw_check_name(func, "key", key, key_len))) {
        free(val);
        return rc;
    }
    ptrdiff_t i = gw_find_key(w, key, key_len);
    if (i >= 0) {
        free(w->kv[i].val);
        w->kv[i].type = type;
        w->kv[i].val = val;
        w->kv[i].val_len = val_len;
        return 0;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 16;
        struct gw_kv *kv = realloc(w->kv, cap * sizeof(*kv));
        if (!kv) {
            ft_log(FT_LOG_ERROR, func, "out of memory");
            free(val);
            return FT_ENOMEM;
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = malloc(key_len + 1);
    if (!k) {
        ft_log(FT_LOG_ERROR, func, "out of memory");
        free(val);
        return FT_ENOMEM;
    }
    memcpy(k, key, key_len);
    k[key_len] = '\0';
    w->kv[w->n_kv++] = (struct gw_kv){k, key_len, type, val, val_len};
    return 0;
}

static int gw_put_scalar(struct ft_gguf_writer *w, const char *func, const char *key, enum ft_gguf_vtype type,
                         const void *v) {
    size_t n = ft_gguf_vtype_size(type);
    uint8_t *val = malloc(n);
    if (!val) {
        ft_log(FT_LOG_ERROR, func, "out of memory");
        return FT_ENOMEM;
    }
    memcpy(val, v, n);
    return gw_put(w, func, key, key ? strlen(key) : 0, type, val, n);
}

int ft_gguf_writer_set_u32(struct ft_gguf_writer *w, const char *key, uint32_t v) {
    return gw_put_scalar(w, __func__, key, FT_GGUF_UINT32, &v);
}
int ft_gguf_writer_set_i32(struct ft_gguf_writer *w, const char *key, int32_t v) {
    return gw_put_scalar(w, __func__, key, FT_GGUF_INT32, &v);
}
int ft_gguf_writer_set_u64(struct ft_gguf_writer *w, const char *key, uint64_t v) {
    return gw_put_scalar(w, __func__, key, FT_GGUF_UINT64, &v);
}
int ft_gguf_writer_set_f32(struct ft_gguf_writer *w, const char *key, float v) {
    return gw_put_scalar(w, __func__, key, FT_GGUF_FLOAT32, &v);
}
int ft_gguf_writer_set_bool(struct ft_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return gw_put_scalar(w, __func__, key, FT_GGUF_BOOL, &b);
}

int ft_gguf_writer_set_str(struct ft_gguf_writer *w, const char *key, const char *v) {
    if (!v) {
        FT_LOG_E("NULL string for key '%s'", key ? key : "(null)");
        return FT_EINVAL;
    }
    size_t len = strlen(v), n;
    if (ft_add_overflow(len, 8, &n)) {
        FT_LOG_E("string too long");
        return FT_EINVAL;
    }
    uint8_t *val = malloc(n);
    if (!val) {
        FT_LOG_E("out of memory");
        return FT_ENOMEM;
    }
    uint64_t l = len;
    memcpy(val, &l, 8);
    memcpy(val + 8, v, len);
    return gw_put(w, __func__, key, key ? strlen(key) : 0, FT_GGUF_STRING, val, n);
}

int ft_gguf_writer_set_arr(struct ft_gguf_writer *w, const char *key, enum ft_gguf_vtype type, const void *data,
                           uint64_t n) {
    size_t es = ft_gguf_vtype_size(type), bytes, total;
    if (es == 0) {
        FT_LOG_E("key '%s': %s is not a numeric element type", key ? key : "(null)", ft_gguf_vtype_name(type));
        return FT_EINVAL;
    }
    if (n > SIZE_MAX || ft_mul_overflow((size_t)n, es, &bytes) || ft_add_overflow(bytes, 12, &total)) {
        FT_LOG_E("key '%s': array of %" PRIu64 " elements is too large", key ? key : "(null)", n);
        return FT_EINVAL;
    }
    if (!data && n) {
        FT_LOG_E("key '%s': NULL data for %" PRIu64 " elements", key ? key : "(null)", n);
        return FT_EINVAL;
    }
    uint8_t *val = malloc(total);
    if (!val) {
        FT_LOG_E("out of memory (%zu bytes)", total);
        return FT_ENOMEM;
    }
    uint32_t t = type;
    memcpy(val, &t, 4);
    memcpy(val + 4, &n, 8);
    if (bytes)
        memcpy(val + 12, data, bytes);
    return gw_put(w, __func__, key, key ? strlen(key) : 0, FT_GGUF_ARRAY, val, total);
}

int ft_gguf_writer_set_arr_str(struct ft_gguf_writer *w, const char *key, const struct ft_str *strs, uint64_t n) {
    if (!strs && n) {
        FT_LOG_E("key '%s': NULL strings for %" PRIu64 " elements", key ? key : "(null)", n);
        return FT_EINVAL;
    }
    size_t total = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i].s && strs[i].len) {
            FT_LOG_E("key '%s': string #%" PRIu64 " is NULL", key ? key : "(null)", i);
            return FT_EINVAL;
        }
        if (ft_add_overflow(total, 8, &total) || ft_add_overflow(total, strs[i].len, &total)) {
            FT_LOG_E("key '%s': string array too large", key ? key : "(null)");
            return FT_EINVAL;
        }
    }
    uint8_t *val = malloc(total), *p = val;
    if (!val) {
        FT_LOG_E("out of memory (%zu bytes)", total);
        return FT_ENOMEM;
    }
    uint32_t t = FT_GGUF_STRING;
    memcpy(p, &t, 4);
    memcpy(p + 4, &n, 8);
    p += 12;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = strs[i].len;
        memcpy(p, &l, 8);
        if (l)
            memcpy(p + 8, strs[i].s, strs[i].len);
        p += 8 + strs[i].len;
    }
    return gw_put(w, __func__, key, key ? strlen(key) : 0, FT_GGUF_ARRAY, val, total);
}

int ft_gguf_writer_copy_kv(struct ft_gguf_writer *w, const struct ft_gguf *g, int64_t i) {
    if (!g || i < 0 || i >= ft_gguf_n_kv(g)) {
        FT_LOG_E("no key #%" PRId64 " in %s", i, g ? ft_gguf_path(g) : "(null)");
        return FT_EINVAL;
    }
    size_t n;
    const void *raw = ft_gguf_kv_raw(g, i, &n);
    struct ft_str key = ft_gguf_kv_key(g, i);
    uint8_t *val = malloc(n ? n : 1);
    if (!val) {
        FT_LOG_E("out of memory (%zu bytes)", n);
        return FT_ENOMEM;
    }
    if (n)
        memcpy(val, raw, n);
    return gw_put(w, __func__, key.s, key.len, ft_gguf_kv_type(g, i), val, n);
}

int ft_gguf_writer_remove_key(struct ft_gguf_writer *w, const char *key) {
    if (!w || !key)
        return FT_EINVAL;
    ptrdiff_t i = gw_find_key(w, key, strlen(key));
    if (i < 0)
        return FT_ENOENT;
    free(w->kv[i].key);
    free(w->kv[i].val);
    memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - (size_t)i - 1) * sizeof(*w->kv));
    w->n_kv--;
    return 0;
}

/* Validate and append a tensor whose bytes come from `data` or `fill`. */
static int gw_add_tensor(struct ft_gguf_writer *w, const char *func, const char *name, enum ft_type type,
                         int n_dims, const int64_t *ne, const void *data, ft_gguf_fill_fn fill, void *fill_ud) {
    if (!w || !name || !ne) {
        ft_log(FT_LOG_ERROR, func, "invalid argument (writer %p, name %p, ne %p)", (void *)w, (const void *)name,
               (const void *)ne);
        return FT_EINVAL;
    }
    size_t name_len = strlen(name);
    char sh[128];
    int rc = gw_check_name(func, "tensor name", name, name_len);
    if (rc)
        return rc;
    gw_show(sh, sizeof(sh), name, name_len);
    for (size_t i = 0; i < w->n_t; i++) {
        if (w->t[i].name_len == name_len && memcmp(w->t[i].name, name, name_len) == 0) {
            ft_log(FT_LOG_ERROR, func, "tensor '%s' added twice", sh);
            return FT_EINVAL;
        }
    }
    const struct ft_type_info *ti = ft_type_info(type);
    if (!ti || ti->type_size == 0 || ti->blck_size <= 0) {
        ft_log(FT_LOG_ERROR, func, "tensor '%s': unknown type id %d", sh, (int)type);
        return FT_EINVAL;
    }
    if (n_dims < 1 || n_dims > FT_GGUF_MAX_DIMS) {
        ft_log(FT_LOG_ERROR, func, "tensor '%s': n_dims %d, must be 1..%d", sh, n_dims, FT_GGUF_MAX_DIMS);
        return FT_EINVAL;
    }
    struct gw_tensor t = {.type = type, .n_dims = n_dims, .data = data, .fill = fill, .fill_ud = fill_ud};
    int64_t nel = 1;
    for (int d = 0; d < FT_GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 0) {
            ft_log(FT_LOG_ERROR, func, "tensor '%s': dimension %d is negative (%" PRId64 ")", sh, d, t.ne[d]);
            return FT_EINVAL;
        }
        if (__builtin_mul_overflow(nel, t.ne[d], &nel)) {
            ft_log(FT_LOG_ERROR, func, "tensor '%s': element count overflows", sh);
            return FT_EINVAL;
        }
    }
    if (t.ne[0] % ti->blck_size != 0) {
        ft_log(FT_LOG_ERROR, func, "tensor '%s': row length %" PRId64 " is not a multiple of the %s block size %" PRId64,
               sh, t.ne[0], ti->name, ti->blck_size);
        return FT_EINVAL;
    }
    if (ft_mul_overflow((size_t)(nel / ti->blck_size), ti->type_size, &t.size)) {
        ft_log(FT_LOG_ERROR, func, "tensor '%s': size overflows", sh);
        return FT_EINVAL;
    }
    if (!data && !fill && t.size) {
        ft_log(FT_LOG_ERROR, func, "tensor '%s': NULL data for %zu bytes", sh, t.size);
        return FT_EINVAL;
    }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 16;
        struct gw_tensor *nt = realloc(w->t, cap * sizeof(*nt));
        if (!nt) {
            ft_log(FT_LOG_ERROR, func, "out of memory");
            return FT_ENOMEM;
        }
        w->t = nt;
        w->cap_t = cap;
    }
    t.name = malloc(name_len + 1);
    if (!t.name) {
        ft_log(FT_LOG_ERROR, func, "out of memory");
        return FT_ENOMEM;
    }
    memcpy(t.name, name, name_len + 1);
    t.name_len = name_len;
    w->t[w->n_t++] = t;
    return 0;
}

int ft_gguf_writer_add_tensor(struct ft_gguf_writer *w, const char *name, enum ft_type type, int n_dims,
                              const int64_t *ne, const void *data) {
    return gw_add_tensor(w, __func__, name, type, n_dims, ne, data, NULL, NULL);
}

int ft_gguf_writer_add_tensor_fill(struct ft_gguf_writer *w, const char *name, enum ft_type type,
                                   int n_dims, const int64_t *ne, ft_gguf_fill_fn fill, void *ud) {
    if (!fill) {
        FT_LOG_E("tensor '%s': NULL fill function", name ? name : "(null)");
        return FT_EINVAL;
    }
    return gw_add_tensor(w, __func__, name, type, n_dims, ne, NULL, fill, ud);
}

void ft_gguf_writer_set_alignment(struct ft_gguf_writer *w, size_t alignment) {
    if (!w)
        return;
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > UINT32_MAX) {
        FT_LOG_E("alignment %zu is not a power of two in 1..2^31", alignment);
        w->err = FT_EINVAL;
        return;
    }
    int rc = ft_gguf_writer_set_u32(w, "general.alignment", (uint32_t)alignment);
    if (rc)
        w->err = rc;
}

/* ---- serialization ------------------------------------------------------- */

/* The layout computed before writing: alignment, and where data starts. */
struct gw_layout {
    size_t alignment;
    size_t header_size; /* magic .. end of tensor infos */
    size_t data_offset; /* header_size rounded up */
    size_t total;       /* whole file */
};

static size_t gw_pad(size_t x, size_t a) { return (a - x % a) % a; }

static int gw_layout(const struct ft_gguf_writer *w, const char *func, struct gw_layout *L) {
    if (w->err) {
        ft_log(FT_LOG_ERROR, func, "an earlier ft_gguf_writer_set_alignment() failed");
        return w->err;
    }
    L->alignment = FT_GGUF_DEFAULT_ALIGNMENT;
    ptrdiff_t ai = gw_find_key(w, "general.alignment", strlen("general.alignment"));
    if (ai >= 0) {
        uint32_t a = 0;
        if (w->kv[ai].type == FT_GGUF_UINT32)
            memcpy(&a, w->kv[ai].val, 4);
        if (w->kv[ai].type != FT_GGUF_UINT32 || a == 0 || (a & (a - 1)) != 0) {
            ft_log(FT_LOG_ERROR, func, "key 'general.alignment' must be a uint32 power of two");
            return FT_EINVAL;
        }
        L->alignment = a;
    }
    /* Sums of sizes of objects in memory: overflow only with absurd input,
     * but check anyway. */
    size_t s = 24;
    int ovf = 0;
    for (size_t i = 0; i < w->n_kv; i++) {
        ovf |= ft_add_overflow(s, 8 + 4, &s);
        ovf |= ft_add_overflow(s, w->kv[i].key_len, &s);
        ovf |= ft_add_overflow(s, w->kv[i].val_len, &s);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        ovf |= ft_add_overflow(s, 8 + 4 + 4 + 8 + 8 * (size_t)w->t[i].n_dims, &s);
        ovf |= ft_add_overflow(s, w->t[i].name_len, &s);
    }
    L->header_size = s;
    /* No tensors, no data section: no padding (as llama.cpp writes vocab-only
     * files; the reader accepts both). */
    if (w->n_t)
        ovf |= ft_add_overflow(s, gw_pad(s, L->alignment), &s);
    L->data_offset = s;
    for (size_t i = 0; i < w->n_t; i++) {
        ovf |= ft_add_overflow(s, w->t[i].size, &s);
        ovf |= ft_add_overflow(s, gw_pad(w->t[i].size, L->alignment), &s);
    }
    L->total = s;
    if (ovf) {
        ft_log(FT_LOG_ERROR, func, "file size overflows");
        return FT_ERANGE;
    }
    return 0;
}

/* Output sink: a memory buffer of known size, or a FILE. `scratch` holds
 * one fill chunk on its way to the FILE. */
struct gw_out {
    uint8_t *buf;
    size_t pos, cap;
    FILE *f;
    uint8_t *scratch;
    int failed;
    int fill_err; /* the FT_E* code a fill callback returned */
};

static void gw_emit(struct gw_out *o, const void *p, size_t n) {
    if (o->failed || n == 0)
        return;
    if (o->f) {
        if (fwrite(p, 1, n, o->f) != n)
            o->failed = 1;
        return;
    }
    if (o->cap - o->pos < n) {
        o->failed = 1;
        return;
    }
    memcpy(o->buf + o->pos, p, n);
    o->pos += n;
}

static void gw_zeros(struct gw_out *o, size_t n) {
    static const uint8_t z[256];
    while (n) {
        size_t k = n < sizeof(z) ? n : sizeof(z);
        gw_emit(o, z, k);
        n -= k;
    }
}

/* Rows of a fill chunk: as many as fit in FT_GGUF_FILL_CHUNK, at least 1. */
static int64_t gw_chunk_rows(size_t row_size) {
    size_t r = FT_GGUF_FILL_CHUNK / row_size;
    return r ? (int64_t)r : 1;
}

static size_t gw_row_bytes(const struct gw_tensor *t) { return ft_row_size(t->type, t->ne[0]); }

/* Produce a fill tensor's bytes chunk by chunk: straight into the memory
 * buffer, or through the scratch chunk into the FILE. */
static void gw_emit_fill(struct gw_out *o, const struct gw_tensor *t) {
    const size_t row_size = gw_row_bytes(t);
    if (o->failed || t->size == 0 || row_size == 0)
        return;
    const int64_t rows = (int64_t)(t->size / row_size);
    const int64_t step = gw_chunk_rows(row_size);
    for (int64_t r0 = 0; r0 < rows && !o->failed; r0 += step) {
        const int64_t n = FT_MIN(step, rows - r0);
        const size_t bytes = (size_t)n * row_size;
        uint8_t *dst;
        if (o->f) {
            dst = o->scratch;
        } else {
            if (o->cap - o->pos < bytes) {
                o->failed = 1;
                return;
            }
            dst = o->buf + o->pos;
        }
        int rc = t->fill(t->fill_ud, r0, n, dst);
        if (rc) {
            o->failed = 1;
            o->fill_err = rc;
            return;
        }
        if (o->f)
            gw_emit(o, dst, bytes);
        else
            o->pos += bytes;
    }
}

/* Scratch for the largest fill chunk any tensor asks for (0 if none). */
static size_t gw_scratch_size(const struct ft_gguf_writer *w) {
    size_t m = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const struct gw_tensor *t = &w->t[i];
        const size_t row_size = gw_row_bytes(t);
        if (t->fill && t->size && row_size) {
            const int64_t rows = (int64_t)(t->size / row_size);
            const size_t n = (size_t)FT_MIN(gw_chunk_rows(row_size), rows) * row_size;
            m = FT_MAX(m, n);
        }
    }
    return m;
}

static void gw_u32(struct gw_out *o, uint32_t v) { gw_emit(o, &v, 4); }
static void gw_u64(struct gw_out *o, uint64_t v) { gw_emit(o, &v, 8); }

static void gw_serialize(const struct ft_gguf_writer *w, const struct gw_layout *L, struct gw_out *o) {
    gw_emit(o, "GGUF", 4);
    gw_u32(o, 3);
    gw_u64(o, w->n_t);
    gw_u64(o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        gw_u64(o, w->kv[i].key_len);
        gw_emit(o, w->kv[i].key, w->kv[i].key_len);
        gw_u32(o, (uint32_t)w->kv[i].type);
        gw_emit(o, w->kv[i].val, w->kv[i].val_len);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const struct gw_tensor *t = &w->t[i];
        gw_u64(o, t->name_len);
        gw_emit(o, t->name, t->name_len);
        gw_u32(o, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            gw_u64(o, (uint64_t)t->ne[d]);
        gw_u32(o, (uint32_t)t->type);
        gw_u64(o, off);
        off += t->size + gw_pad(t->size, L->alignment);
    }
    gw_zeros(o, L->data_offset - L->header_size);
    for (size_t i = 0; i < w->n_t; i++) {
        if (w->t[i].fill)
            gw_emit_fill(o, &w->t[i]);
        else
            gw_emit(o, w->t[i].data, w->t[i].size);
        gw_zeros(o, gw_pad(w->t[i].size, L->alignment));
    }
}

int ft_gguf_writer_to_buffer(struct ft_gguf_writer *w, void **out, size_t *size) {
    if (!w || !out || !size) {
        FT_LOG_E("invalid argument");
        return FT_EINVAL;
    }
    struct gw_layout L;
    int rc = gw_layout(w, __func__, &L);
    if (rc)
        return rc;
    struct gw_out o = {.buf = malloc(L.total), .cap = L.total};
    if (!o.buf) {
        FT_LOG_E("out of memory (%zu bytes)", L.total);
        return FT_ENOMEM;
    }
    gw_serialize(w, &L, &o);
    if (o.fill_err) {
        free(o.buf);
        return o.fill_err;
    }
    if (o.failed || o.pos != L.total) { /* cannot happen: the layout is exact */
        FT_LOG_E("internal error: wrote %zu of %zu bytes", o.pos, L.total);
        free(o.buf);
        return FT_EINVAL;
    }
    *out = o.buf;
    *size = L.total;
    return 0;
}

int ft_gguf_writer_write(struct ft_gguf_writer *w, const char *path) {
    if (!w || !path) {
        FT_LOG_E("invalid argument");
        return FT_EINVAL;
    }
    struct gw_layout L;
    int rc = gw_layout(w, __func__, &L);
    if (rc)
        return rc;

    char eb[128];
    size_t plen = strlen(path);
    const size_t scratch_size = gw_scratch_size(w);
    uint8_t *scratch = scratch_size ? malloc(scratch_size) : NULL;
    char *tmp = malloc(plen + sizeof(".tmp-XXXXXX"));
    if (!tmp || (scratch_size && !scratch)) {
        FT_LOG_E("out of memory");
        free(tmp);
        free(scratch);
        return FT_ENOMEM;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp-XXXXXX", sizeof(".tmp-XXXXXX"));
    int fd = mkstemp(tmp);
    if (fd < 0) {
        FT_LOG_E("%s: cannot create a temporary file next to it: %s", path, strerror_r(errno, eb, sizeof(eb)));
        free(tmp);
        free(scratch);
        return FT_EIO;
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        FT_LOG_E("%s: fdopen: %s", tmp, strerror_r(errno, eb, sizeof(eb)));
        close(fd);
        goto fail_unlink;
    }
    (void)fchmod(fd, 0644); /* mkstemp makes 0600; a model file is not a secret */
    struct gw_out o = {.f = f, .scratch = scratch};
    gw_serialize(w, &L, &o);
    int err = o.failed ? errno : 0;
    if (!o.failed && fflush(f) != 0) {
        o.failed = 1;
        err = errno;
    }
    if (!o.failed && fsync(fd) != 0) {
        o.failed = 1;
        err = errno;
    }
    if (fclose(f) != 0 && !o.failed) {
        o.failed = 1;
        err = errno;
    }
    if (o.fill_err) { /* the fill callback logged why */
        unlink(tmp);
        free(tmp);
        free(scratch);
        return o.fill_err;
    }
    if (o.failed) {
        FT_LOG_E("%s: write failed: %s", tmp, strerror_r(err ? err : EIO, eb, sizeof(eb)));
        goto fail_unlink;
    }
    if (rename(tmp, path) != 0) {
        FT_LOG_E("%s: cannot rename %s into place: %s", path, tmp, strerror_r(errno, eb, sizeof(eb)));
        goto fail_unlink;
    }
    free(tmp);
    free(scratch);
    return 0;

fail_unlink:
    unlink(tmp);
    free(tmp);
    free(scratch);
    return FT_EIO;
}
