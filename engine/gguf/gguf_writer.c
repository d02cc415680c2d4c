/* GGUF v3 writer: collects key/values (in insertion order; replacing a key
 * keeps its position) and tensors (data borrowed, not copied), then
 * serializes them either into a malloc'd buffer or atomically into a file
 * (engine/include/ft/atomic_file.h: an unnamed file linked into place after fsync,
 * so a failed or killed write leaves nothing).
 *
 * A tensor's bytes are either borrowed (ft_gguf_writer_add_tensor) or made
 * while the file is written (ft_gguf_writer_add_tensor_fn), one tensor at a
 * time, so a converter such as ft quantize never holds the whole output.
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
 */
#include "ft/atomic_file.h"
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/types.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    const void *data; /* borrowed, or NULL when fill makes the bytes */
    ft_gguf_fill_fn fill;           /* the whole tensor at once, or */
    ft_gguf_fill_rows_fn fill_rows; /* chunks of rows */
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

static int gw_add_tensor(struct ft_gguf_writer *w, const char *name, enum ft_type type, int n_dims,
                         const int64_t *ne, const void *data, ft_gguf_fill_fn fill,
                         ft_gguf_fill_rows_fn fill_rows, void *fill_ud) {
    if (!w || !name || !ne) {
        FT_LOG_E("invalid argument (writer %p, name %p, ne %p)", (void *)w, (const void *)name, (const void *)ne);
        return FT_EINVAL;
    }
    size_t name_len = strlen(name);
    char sh[128];
    int rc = gw_check_name(__func__, "tensor name", name, name_len);
    if (rc)
        return rc;
    gw_show(sh, sizeof(sh), name, name_len);
    for (size_t i = 0; i < w->n_t; i++) {
        if (w->t[i].name_len == name_len && memcmp(w->t[i].name, name, name_len) == 0) {
            FT_LOG_E("tensor '%s' added twice", sh);
            return FT_EINVAL;
        }
    }
    const struct ft_type_info *ti = ft_type_info(type);
    if (!ti || ti->type_size == 0 || ti->blck_size <= 0) {
        FT_LOG_E("tensor '%s': unknown type id %d", sh, (int)type);
        return FT_EINVAL;
    }
    if (n_dims < 1 || n_dims > FT_GGUF_MAX_DIMS) {
        FT_LOG_E("tensor '%s': n_dims %d, must be 1..%d", sh, n_dims, FT_GGUF_MAX_DIMS);
        return FT_EINVAL;
    }
    struct gw_tensor t = {.type = type, .n_dims = n_dims, .data = data, .fill = fill, .fill_rows = fill_rows, .fill_ud = fill_ud};
    int64_t nel = 1;
    for (int d = 0; d < FT_GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 0) {
            FT_LOG_E("tensor '%s': dimension %d is negative (%" PRId64 ")", sh, d, t.ne[d]);
            return FT_EINVAL;
        }
        if (__builtin_mul_overflow(nel, t.ne[d], &nel)) {
            FT_LOG_E("tensor '%s': element count overflows", sh);
            return FT_EINVAL;
        }
    }
    if (t.ne[0] % ti->blck_size != 0) {
        FT_LOG_E("tensor '%s': row length %" PRId64 " is not a multiple of the %s block size %" PRId64, sh, t.ne[0],
                 ti->name, ti->blck_size);
        return FT_EINVAL;
    }
    if (ft_mul_overflow((size_t)(nel / ti->blck_size), ti->type_size, &t.size)) {
        FT_LOG_E("tensor '%s': size overflows", sh);
        return FT_EINVAL;
    }
    if (!data && !fill && !fill_rows && t.size) {
        FT_LOG_E("tensor '%s': NULL data for %zu bytes", sh, t.size);
        return FT_EINVAL;
    }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 16;
        struct gw_tensor *nt = realloc(w->t, cap * sizeof(*nt));
        if (!nt) {
            FT_LOG_E("out of memory");
            return FT_ENOMEM;
        }
        w->t = nt;
        w->cap_t = cap;
    }
    t.name = malloc(name_len + 1);
    if (!t.name) {
        FT_LOG_E("out of memory");
        return FT_ENOMEM;
    }
    memcpy(t.name, name, name_len + 1);
    t.name_len = name_len;
    w->t[w->n_t++] = t;
    return 0;
}

int ft_gguf_writer_add_tensor(struct ft_gguf_writer *w, const char *name, enum ft_type type, int n_dims,
                              const int64_t *ne, const void *data) {
    return gw_add_tensor(w, name, type, n_dims, ne, data, NULL, NULL, NULL);
}

int ft_gguf_writer_add_tensor_fn(struct ft_gguf_writer *w, const char *name, enum ft_type type, int n_dims,
                                 const int64_t *ne, ft_gguf_fill_fn fill, void *ud) {
    if (!fill) {
        FT_LOG_E("tensor '%s': NULL fill function", name ? name : "(null)");
        return FT_EINVAL;
    }
    return gw_add_tensor(w, name, type, n_dims, ne, NULL, fill, NULL, ud);
}

int ft_gguf_writer_add_tensor_fill(struct ft_gguf_writer *w, const char *name, enum ft_type type, int n_dims,
                                   const int64_t *ne, ft_gguf_fill_rows_fn fill_rows, void *ud) {
    if (!fill_rows) {
        FT_LOG_E("tensor '%s': NULL fill function", name ? name : "(null)");
        return FT_EINVAL;
    }
    return gw_add_tensor(w, name, type, n_dims, ne, NULL, NULL, fill_rows, ud);
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

/* Output sink: a memory buffer of known size, or an atomic file. */
struct gw_out {
    uint8_t *buf;
    size_t pos, cap;
    struct ft_atomic_file *f;
    int failed; /* FT_E* of the first failure (logged where it happened) */
};

static void gw_emit(struct gw_out *o, const void *p, size_t n) {
    if (o->failed || n == 0)
        return;
    if (o->f) {
        int rc = ft_atomic_file_write(o->f, p, n);
        if (rc)
            o->failed = rc;
        return;
    }
    if (o->cap - o->pos < n) {
        o->failed = FT_EINVAL;
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

static void gw_u32(struct gw_out *o, uint32_t v) { gw_emit(o, &v, 4); }
static void gw_u64(struct gw_out *o, uint64_t v) { gw_emit(o, &v, 8); }

/* A tensor's bytes: borrowed, or made by its fill function -- straight into
 * the output buffer, or into `scratch` (grown to the largest such tensor). */
/* A tensor made chunk by chunk by fill_rows: each chunk goes straight into
 * the buffer, or through scratch (at most FT_GGUF_FILL_CHUNK bytes, or one
 * row if a row is larger) to the file. */
static void gw_emit_tensor_rows(const struct gw_tensor *t, struct gw_out *o, uint8_t **scratch,
                                size_t *scratch_cap) {
    const size_t row_size = ft_row_size(t->type, t->ne[0]);
    if (t->size == 0 || row_size == 0)
        return;
    const int64_t rows = (int64_t)(t->size / row_size);
    const int64_t per_chunk = FT_MAX((int64_t)1, (int64_t)(FT_GGUF_FILL_CHUNK / row_size));
    for (int64_t r0 = 0; r0 < rows && !o->failed; r0 += per_chunk) {
        const int64_t n = FT_MIN(per_chunk, rows - r0);
        const size_t bytes = (size_t)n * row_size;
        uint8_t *dst;
        if (!o->f) {
            if (o->cap - o->pos < bytes) {
                o->failed = FT_EINVAL;
                return;
            }
            dst = o->buf + o->pos;
        } else {
            if (*scratch_cap < bytes) {
                free(*scratch);
                *scratch = malloc(bytes);
                *scratch_cap = *scratch ? bytes : 0;
                if (!*scratch) {
                    FT_LOG_E("tensor '%s': out of memory (%zu bytes)", t->name, bytes);
                    o->failed = FT_ENOMEM;
                    return;
                }
            }
            dst = *scratch;
        }
        const int rc = t->fill_rows(t->fill_ud, r0, n, dst);
        if (rc) { /* the fill function logged why */
            o->failed = rc < 0 ? rc : FT_EINVAL;
            return;
        }
        if (o->f)
            gw_emit(o, dst, bytes);
        else
            o->pos += bytes;
    }
}

static void gw_emit_tensor(const struct gw_tensor *t, struct gw_out *o, uint8_t **scratch, size_t *scratch_cap) {
    if (o->failed)
        return;
    if (t->fill_rows) {
        gw_emit_tensor_rows(t, o, scratch, scratch_cap);
        return;
    }
    if (!t->fill) {
        gw_emit(o, t->data, t->size);
        return;
    }
    if (t->size == 0)
        return;
    uint8_t *dst;
    if (!o->f) {
        if (o->cap - o->pos < t->size) {
            o->failed = FT_EINVAL;
            return;
        }
        dst = o->buf + o->pos;
    } else {
        if (*scratch_cap < t->size) {
            free(*scratch);
            *scratch = malloc(t->size);
            *scratch_cap = *scratch ? t->size : 0;
            if (!*scratch) {
                FT_LOG_E("tensor '%s': out of memory (%zu bytes)", t->name, t->size);
                o->failed = FT_ENOMEM;
                return;
            }
        }
        dst = *scratch;
    }
    int rc = t->fill(t->fill_ud, dst, t->size);
    if (rc) { /* the fill function logged why */
        o->failed = rc < 0 ? rc : FT_EINVAL;
        return;
    }
    if (o->f)
        gw_emit(o, dst, t->size);
    else
        o->pos += t->size;
}

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
    uint8_t *scratch = NULL;
    size_t scratch_cap = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        gw_emit_tensor(&w->t[i], o, &scratch, &scratch_cap);
        gw_zeros(o, gw_pad(w->t[i].size, L->alignment));
    }
    free(scratch);
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
    struct gw_out o = {.buf = malloc(L.total ? L.total : 1), .cap = L.total};
    if (!o.buf) {
        FT_LOG_E("out of memory (%zu bytes)", L.total);
        return FT_ENOMEM;
    }
    gw_serialize(w, &L, &o);
    if (o.failed || o.pos != L.total) {
        if (!o.failed) /* cannot happen: the layout is exact */
            FT_LOG_E("internal error: wrote %zu of %zu bytes", o.pos, L.total);
        free(o.buf);
        return o.failed ? o.failed : FT_EINVAL;
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
    struct ft_atomic_file f;
    if ((rc = ft_atomic_file_open(&f, path))) {
        ft_atomic_file_abort(&f);
        return rc == FT_ENOMEM ? rc : FT_EIO;
    }
    struct gw_out o = {.f = &f};
    gw_serialize(w, &L, &o);
    if (o.failed) {
        ft_atomic_file_abort(&f);
        return o.failed;
    }
    if (f.written != L.total) { /* cannot happen: the layout is exact */
        FT_LOG_E("internal error: wrote %llu of %zu bytes", (unsigned long long)f.written, L.total);
        ft_atomic_file_abort(&f);
        return FT_EINVAL;
    }
    rc = ft_atomic_file_commit(&f);
    return rc ? FT_EIO : 0;
}
