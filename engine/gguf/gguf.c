/* GGUF v2/v3 reader: memory-maps a file (or takes a caller's buffer), checks
 * every byte of the header, metadata and tensor infos against the file's
 * size, and builds the tables the accessors in ft/gguf.h serve.
 *
 * The file is hostile until proven otherwise. Rules enforced at open:
 *  - magic "GGUF", version 2 or 3 (v1 and big-endian files are rejected
 *    with a message saying so); the host must be little-endian.
 *  - every count is bounded by what the remaining bytes can hold before
 *    anything is allocated: a key/value needs >= 14 bytes, a tensor info
 *    >= 33, an array element its scalar size (string >= 8, array >= 12).
 *  - keys and tensor names: 1..FT_GGUF_MAX_NAME (65536) bytes, no NUL
 *    byte, unique (duplicates are an error). Other bytes are not checked
 *    (names are printed escaped in messages).
 *  - value types 0..12; arrays nest at most FT_GGUF_MAX_ARRAY_DEPTH deep.
 *  - general.alignment, if present: uint32, nonzero power of two.
 *  - tensors: n_dims 1..4, every ne >= 0, ne[0] a multiple of the type's
 *    block size, a known type id with a nonzero size, element count and
 *    byte size free of overflow, offset a multiple of the alignment, and
 *    the data inside the file; tensors with data do not overlap (ggml
 *    requires them packed in order; any order is accepted here).
 *  - bool values other than 0/1 are read as true (the array copy holds
 *    0/1, so it is safe to read as C bool).
 * Errors use a 0-based index for keys and tensor infos ("key #5").
 *
 * Memory: one struct, then a chunked bump arena for every table and array
 * copy; ft_gguf_close() frees the chunks and unmaps the file. The total
 * allocated is bounded by a small multiple of the file size.
 */
#include "ft/gguf.h"

#include "ft/common.h"
#include "ft/types.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

#define FT_GGUF_MAX_NAME 65536      /* bytes in a key or tensor name */
#define FT_GGUF_MAX_ARRAY_DEPTH 8   /* an array of arrays is depth 2 */
#define GG_MIN_KV_BYTES 14          /* u64 len + 1-byte key + u32 type + 1-byte value */
#define GG_MIN_TINFO_BYTES 33       /* u64 len + 1 + u32 n_dims + u64 ne + u32 type + u64 off */
#define GG_ARENA_CHUNK (64 * 1024)

/* ---- memory --------------------------------------------------------------- */

#ifdef FT_GGUF_FAULT_INJECTION
/* Tests that #include this file set this to N to fail the (N+1)-th
 * allocation; -1 never fails. */
static long gg_alloc_countdown = -1;
#endif

static void *gg_malloc(size_t n) {
#ifdef FT_GGUF_FAULT_INJECTION
    if (gg_alloc_countdown == 0)
        return NULL;
    if (gg_alloc_countdown > 0)
        gg_alloc_countdown--;
#endif
    return malloc(n);
}

struct gg_chunk {
    struct gg_chunk *next;
    size_t cap, used;
    max_align_t data[]; /* so that every chunk starts max-aligned */
};

/* Bump allocator: allocations are max_align_t-aligned and freed all at once. */
static void *gg_arena_alloc(struct gg_chunk **head, size_t n) {
    const size_t al = alignof(max_align_t);
    size_t need = (n + al - 1) & ~(al - 1);
    if (need < n)
        return NULL;
    struct gg_chunk *c = *head;
    if (!c || c->cap - c->used < need) {
        /* A large block gets a chunk of its own, linked behind the head so
         * the head's free space still serves the small allocations. */
        bool own = need > GG_ARENA_CHUNK / 4;
        size_t cap = own ? need : GG_ARENA_CHUNK, total;
        if (ft_add_overflow(sizeof(*c), cap, &total))
            return NULL;
        struct gg_chunk *nc = gg_malloc(total);
        if (!nc)
            return NULL;
        nc->cap = cap;
        nc->used = 0;
        if (own && c) {
            nc->next = c->next;
            c->next = nc;
        } else {
            nc->next = c;
            *head = nc;
        }
        c = nc;
    }
    void *p = (char *)c->data + c->used;
    c->used += need;
    return p;
}

static void gg_arena_free(struct gg_chunk *c) {
    while (c) {
        struct gg_chunk *next = c->next;
        free(c);
        c = next;
    }
}

/* ---- the parsed file ----------------------------------------------------- */

struct gg_kv {
    struct ft_str key;
    enum ft_gguf_vtype type;
    enum ft_gguf_vtype arr_type; /* arrays only */
    uint64_t arr_n;              /* arrays only */
    const uint8_t *raw;          /* the value's bytes after the type tag */
    size_t raw_size;
    const void *arr; /* numeric arrays: aligned copy; string arrays: struct ft_str[n] */
};

/* Sorted name index: binary search for lookups, adjacent equal = duplicate. */
struct gg_name {
    const char *s;
    size_t len;
    int64_t idx;
};

struct ft_gguf {
    char *name; /* path or buffer name, NUL-terminated (arena) */
    const uint8_t *base;
    size_t size;
    void *map; /* mmap address, NULL for caller buffers */
    size_t map_size;
    uint32_t version;
    size_t alignment;
    size_t data_offset;
    int64_t n_kv, n_tensors;
    struct gg_kv *kv;
    struct ft_gguf_tensor *tensors;
    struct gg_name *kv_index, *tensor_index;
    struct gg_chunk *arena;
};

/* ---- messages ------------------------------------------------------------ */

/* Enough for a shown name of ~96 source bytes escaped (\xNN) plus "...". */
#define GG_SHOW_MAX 96
struct gg_show {
    char s[GG_SHOW_MAX * 4 + 8];
};

/* A name from the file, made printable for a one-line message: non-printable
 * bytes, quote and backslash as \xNN, long names cut with "...". */
static const char *gg_show(struct gg_show *b, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < len && i < GG_SHOW_MAX; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
            b->s[o++] = (char)c;
        } else {
            b->s[o++] = '\\';
            b->s[o++] = 'x';
            b->s[o++] = hex[c >> 4];
            b->s[o++] = hex[c & 15];
        }
    }
    if (len > GG_SHOW_MAX) {
        memcpy(b->s + o, "...", 3);
        o += 3;
    }
    b->s[o] = '\0';
    return b->s;
}

static void gg_log(const char *func, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gg_log(const char *func, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ft_log(FT_LOG_ERROR, func, "%s", msg);
}

const char *ft_gguf_vtype_name(enum ft_gguf_vtype t) {
    static const char *names[FT_GGUF_VTYPE_COUNT] = {
        "uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
        "bool",  "string", "array",  "uint64", "int64",  "float64",
    };
    return (unsigned)t < FT_GGUF_VTYPE_COUNT ? names[t] : "?";
}

size_t ft_gguf_vtype_size(enum ft_gguf_vtype t) {
    static const unsigned char sizes[FT_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < FT_GGUF_VTYPE_COUNT ? sizes[t] : 0;
}

/* ---- parser -------------------------------------------------------------- */

struct gg_parser {
    struct ft_gguf *g;
    const char *name; /* for messages (valid before g->name is set) */
    const uint8_t *p, *end;
    /* Where we are, for messages: "key #5 ('x')" for truncation and
     * "key 'x'" for everything else; set by the key/tensor loops. */
    char where[GG_SHOW_MAX * 4 + 64];
    char subject[GG_SHOW_MAX * 4 + 64];
};

static int gg_fail(struct gg_parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int gg_fail(struct gg_parser *ps, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ft_log(FT_LOG_ERROR, "ft_gguf_open", "%s: %s", ps->name, msg);
    return FT_EFORMAT;
}

static int gg_oom(struct gg_parser *ps, size_t n) {
    ft_log(FT_LOG_ERROR, "ft_gguf_open", "%s: out of memory (%zu bytes)", ps->name, n);
    return FT_ENOMEM;
}

static size_t gg_remain(const struct gg_parser *ps) { return (size_t)(ps->end - ps->p); }

/* Fails unless n bytes remain; `what` names the item being read. */
static int gg_need(struct gg_parser *ps, size_t n, const char *what) {
    if (gg_remain(ps) < n)
        return gg_fail(ps, "truncated in %s: %s needs %zu bytes, %zu remain", ps->where, what, n,
                       gg_remain(ps));
    return 0;
}

static int gg_u32(struct gg_parser *ps, uint32_t *v, const char *what) {
    int rc = gg_need(ps, 4, what);
    if (rc)
        return rc;
    memcpy(v, ps->p, 4);
    ps->p += 4;
    return 0;
}

static int gg_u64(struct gg_parser *ps, uint64_t *v, const char *what) {
    int rc = gg_need(ps, 8, what);
    if (rc)
        return rc;
    memcpy(v, ps->p, 8);
    ps->p += 8;
    return 0;
}

/* A length-prefixed string; the bytes stay in the file. */
static int gg_str(struct gg_parser *ps, struct ft_str *s, const char *what) {
    uint64_t len;
    char w[64];
    snprintf(w, sizeof(w), "the length of %s", what);
    int rc = gg_u64(ps, &len, w);
    if (rc)
        return rc;
    if (len > gg_remain(ps))
        return gg_fail(ps, "truncated in %s: %s of %" PRIu64 " bytes, %zu remain", ps->where, what, len,
                       gg_remain(ps));
    s->s = (const char *)ps->p;
    s->len = (size_t)len;
    ps->p += len;
    return 0;
}

/* A key or tensor name: a string of 1..FT_GGUF_MAX_NAME bytes without NUL. */
static int gg_name_str(struct gg_parser *ps, struct ft_str *s, const char *what) {
    int rc = gg_str(ps, s, what);
    if (rc)
        return rc;
    if (s->len == 0 || s->len > FT_GGUF_MAX_NAME)
        return gg_fail(ps, "%s: %s is %zu bytes long, must be 1..%d", ps->where, what, s->len,
                       FT_GGUF_MAX_NAME);
    if (memchr(s->s, 0, s->len)) {
        struct gg_show sh;
        return gg_fail(ps, "%s: %s '%s' contains a NUL byte", ps->where, what, gg_show(&sh, s->s, s->len));
    }
    return 0;
}

/* Minimum bytes one element of type t occupies in the file. */
static size_t gg_min_elem_size(enum ft_gguf_vtype t) {
    if (t == FT_GGUF_STRING)
        return 8;
    if (t == FT_GGUF_ARRAY)
        return 12; /* element type + count */
    return ft_gguf_vtype_size(t);
}

/* Parse one value of type t at ps->p. For a top-level value (kv != NULL)
 * record the array details and make the array copies; nested arrays are
 * only validated (they stay reachable through the raw bytes). */
static int gg_value(struct gg_parser *ps, enum ft_gguf_vtype t, int depth, struct gg_kv *kv) {
    int rc;
    if (t == FT_GGUF_STRING) {
        struct ft_str s;
        return gg_str(ps, &s, "string value");
    }
    if (t != FT_GGUF_ARRAY) {
        char w[48];
        snprintf(w, sizeof(w), "a %s value", ft_gguf_vtype_name(t));
        rc = gg_need(ps, ft_gguf_vtype_size(t), w);
        if (!rc)
            ps->p += ft_gguf_vtype_size(t);
        return rc;
    }

    uint32_t et;
    uint64_t n;
    if ((rc = gg_u32(ps, &et, "the array element type")))
        return rc;
    if (et >= FT_GGUF_VTYPE_COUNT)
        return gg_fail(ps, "%s: unknown array element type %" PRIu32, ps->subject, et);
    if ((rc = gg_u64(ps, &n, "the array length")))
        return rc;
    if (et == FT_GGUF_ARRAY && depth + 1 > FT_GGUF_MAX_ARRAY_DEPTH)
        return gg_fail(ps, "%s: arrays nested more than %d deep", ps->subject, FT_GGUF_MAX_ARRAY_DEPTH);

    /* Every element occupies at least `min` bytes: check the count against
     * what remains before allocating or looping. */
    size_t min = gg_min_elem_size((enum ft_gguf_vtype)et);
    if (n > gg_remain(ps) / min) {
        const char *en = et == FT_GGUF_ARRAY ? "nested" : ft_gguf_vtype_name((enum ft_gguf_vtype)et);
        uint64_t need;
        if (__builtin_mul_overflow(n, (uint64_t)min, &need))
            return gg_fail(ps, "truncated in %s: %s array of %" PRIu64 " elements needs more than 2^64 bytes, %zu remain",
                           ps->where, en, n, gg_remain(ps));
        return gg_fail(ps, "truncated in %s: %s array of %" PRIu64 " elements needs at least %" PRIu64 " bytes, %zu remain",
                       ps->where, en, n, need, gg_remain(ps));
    }
    size_t count = (size_t)n;

    if (kv) {
        kv->arr_type = (enum ft_gguf_vtype)et;
        kv->arr_n = n;
    }

    if (et != FT_GGUF_STRING && et != FT_GGUF_ARRAY) {
        size_t bytes = count * min; /* <= remain, no overflow */
        if (kv) {
            void *copy = gg_arena_alloc(&ps->g->arena, bytes ? bytes : 1);
            if (!copy)
                return gg_oom(ps, bytes);
            if (bytes)
                memcpy(copy, ps->p, bytes);
            if (et == FT_GGUF_BOOL) {
                uint8_t *b = copy;
                for (size_t i = 0; i < count; i++)
                    b[i] = b[i] != 0;
            }
            kv->arr = copy;
        }
        ps->p += bytes;
        return 0;
    }

    if (et == FT_GGUF_STRING) {
        struct ft_str *strs = NULL;
        if (kv) {
            size_t bytes = count * sizeof(*strs); /* count <= remain/8: no overflow */
            strs = gg_arena_alloc(&ps->g->arena, bytes ? bytes : 1);
            if (!strs)
                return gg_oom(ps, bytes);
            kv->arr = strs;
        }
        for (size_t i = 0; i < count; i++) {
            struct ft_str s;
            if ((rc = gg_str(ps, &s, "a string array element")))
                return rc;
            if (strs)
                strs[i] = s;
        }
        return 0;
    }

    for (size_t i = 0; i < count; i++)
        if ((rc = gg_value(ps, FT_GGUF_ARRAY, depth + 1, NULL)))
            return rc;
    return 0;
}

static int gg_name_cmp(const void *a, const void *b) {
    const struct gg_name *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int64_t gg_index_find(const struct gg_name *idx, int64_t n, const char *s, size_t len) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        struct gg_name probe = {s, len, -1}; /* idx -1 sorts before any equal name */
        if (gg_name_cmp(&idx[mid], &probe) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < n && idx[lo].len == len && memcmp(idx[lo].s, s, len) == 0)
        return idx[lo].idx;
    return -1;
}

/* Sort the names; report the first duplicate as "<what> 'x' appears twice". */
static int gg_index_build(struct gg_parser *ps, struct gg_name *idx, int64_t n, const char *what) {
    if (n > 1)
        qsort(idx, (size_t)n, sizeof(*idx), gg_name_cmp);
    for (int64_t i = 1; i < n; i++) {
        if (idx[i].len == idx[i - 1].len && memcmp(idx[i].s, idx[i - 1].s, idx[i].len) == 0) {
            struct gg_show sh;
            return gg_fail(ps, "duplicate %s '%s' (#%" PRId64 " and #%" PRId64 ")", what,
                           gg_show(&sh, idx[i].s, idx[i].len), idx[i - 1].idx, idx[i].idx);
        }
    }
    return 0;
}

static int gg_parse_header(struct gg_parser *ps, uint64_t *n_tensors, uint64_t *n_kv) {
    struct ft_gguf *g = ps->g;
    if (g->size < 8)
        return gg_fail(ps, "truncated header: the file is %zu bytes, a GGUF header needs 24", g->size);
    if (memcmp(ps->p, "GGUF", 4) != 0) {
        struct gg_show sh;
        return gg_fail(ps, "not a GGUF file (magic '%s', expected 'GGUF')", gg_show(&sh, (const char *)ps->p, 4));
    }
    ps->p += 4;
    uint32_t v;
    memcpy(&v, ps->p, 4);
    ps->p += 4;
    if (v == 1)
        return gg_fail(ps, "GGUF version 1 is not supported (FreeToken reads versions 2 and 3)");
    if (v != 2 && v != 3) {
        if ((v & 0xffff) == 0 && v != 0)
            return gg_fail(ps, "GGUF version 0x%08" PRIx32 " looks byte-swapped: big-endian GGUF files are not supported", v);
        return gg_fail(ps, "unsupported GGUF version %" PRIu32 " (FreeToken reads versions 2 and 3)", v);
    }
    g->version = v;
    int rc;
    if ((rc = gg_u64(ps, n_tensors, "the tensor count")) || (rc = gg_u64(ps, n_kv, "the key/value count")))
        return rc;

    /* Bound both counts by the bytes that could hold them. */
    size_t remain = gg_remain(ps);
    if (*n_tensors > remain / GG_MIN_TINFO_BYTES)
        return gg_fail(ps, "header: %" PRIu64 " tensors cannot fit in the %zu bytes after the header (a tensor info needs at least %d)",
                       *n_tensors, remain, GG_MIN_TINFO_BYTES);
    if (*n_kv > remain / GG_MIN_KV_BYTES)
        return gg_fail(ps, "header: %" PRIu64 " keys cannot fit in the %zu bytes after the header (a key/value needs at least %d)",
                       *n_kv, remain, GG_MIN_KV_BYTES);
    if (*n_tensors * GG_MIN_TINFO_BYTES + *n_kv * GG_MIN_KV_BYTES > remain)
        return gg_fail(ps, "header: %" PRIu64 " tensors and %" PRIu64 " keys cannot fit in the %zu bytes after the header",
                       *n_tensors, *n_kv, remain);
    return 0;
}

static int gg_parse_kvs(struct gg_parser *ps) {
    struct ft_gguf *g = ps->g;
    int rc;
    for (int64_t i = 0; i < g->n_kv; i++) {
        struct gg_kv *kv = &g->kv[i];
        struct gg_show sh;
        snprintf(ps->where, sizeof(ps->where), "key #%" PRId64, i);
        snprintf(ps->subject, sizeof(ps->subject), "key #%" PRId64, i);
        if ((rc = gg_name_str(ps, &kv->key, "the key")))
            return rc;
        gg_show(&sh, kv->key.s, kv->key.len);
        snprintf(ps->where, sizeof(ps->where), "key #%" PRId64 " ('%s')", i, sh.s);
        snprintf(ps->subject, sizeof(ps->subject), "key '%s'", sh.s);

        uint32_t t;
        if ((rc = gg_u32(ps, &t, "the value type")))
            return rc;
        if (t >= FT_GGUF_VTYPE_COUNT)
            return gg_fail(ps, "%s: unknown value type %" PRIu32, ps->subject, t);
        kv->type = (enum ft_gguf_vtype)t;
        kv->raw = ps->p;
        if ((rc = gg_value(ps, kv->type, 1, kv)))
            return rc;
        kv->raw_size = (size_t)(ps->p - kv->raw);
    }
    return 0;
}

static int gg_parse_alignment(struct gg_parser *ps) {
    struct ft_gguf *g = ps->g;
    g->alignment = FT_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gg_index_find(g->kv_index, g->n_kv, "general.alignment", strlen("general.alignment"));
    if (i < 0)
        return 0;
    const struct gg_kv *kv = &g->kv[i];
    if (kv->type != FT_GGUF_UINT32)
        return gg_fail(ps, "key 'general.alignment': expected uint32, got %s", ft_gguf_vtype_name(kv->type));
    uint32_t a;
    memcpy(&a, kv->raw, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return gg_fail(ps, "key 'general.alignment': %" PRIu32 " is not a nonzero power of two", a);
    g->alignment = a;
    return 0;
}

static int gg_parse_tensor_infos(struct gg_parser *ps) {
    struct ft_gguf *g = ps->g;
    int rc;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct ft_gguf_tensor *t = &g->tensors[i];
        struct gg_show sh;
        snprintf(ps->where, sizeof(ps->where), "tensor info #%" PRId64, i);
        if ((rc = gg_name_str(ps, &t->name, "the tensor name")))
            return rc;
        gg_show(&sh, t->name.s, t->name.len);
        snprintf(ps->where, sizeof(ps->where), "tensor info #%" PRId64 " ('%s')", i, sh.s);

        uint32_t n_dims;
        if ((rc = gg_u32(ps, &n_dims, "n_dims")))
            return rc;
        if (n_dims < 1 || n_dims > FT_GGUF_MAX_DIMS)
            return gg_fail(ps, "tensor '%s': n_dims is %" PRIu32 ", must be 1..%d", sh.s, n_dims, FT_GGUF_MAX_DIMS);
        t->n_dims = (int)n_dims;
        for (int d = 0; d < FT_GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t ne;
            if ((rc = gg_u64(ps, &ne, "a dimension")))
                return rc;
            if (ne > (uint64_t)INT64_MAX)
                return gg_fail(ps, "tensor '%s': dimension %" PRIu32 " is %" PRIu64 " (above INT64_MAX)", sh.s, d, ne);
            t->ne[d] = (int64_t)ne;
        }
        uint32_t type;
        if ((rc = gg_u32(ps, &type, "the tensor type")))
            return rc;
        const struct ft_type_info *ti = type < FT_TYPE_COUNT ? ft_type_info((enum ft_type)type) : NULL;
        if (!ti || ti->type_size == 0 || ti->blck_size <= 0)
            return gg_fail(ps, "tensor '%s': unknown tensor type id %" PRIu32, sh.s, type);
        t->type = (enum ft_type)type;
        if ((rc = gg_u64(ps, &t->offset, "the tensor data offset")))
            return rc;

        if (t->ne[0] % ti->blck_size != 0)
            return gg_fail(ps, "tensor '%s': row length %" PRId64 " is not a multiple of the %s block size %" PRId64,
                           sh.s, t->ne[0], ti->name, ti->blck_size);
        int64_t nel = 1;
        for (int d = 0; d < FT_GGUF_MAX_DIMS; d++)
            if (__builtin_mul_overflow(nel, t->ne[d], &nel))
                return gg_fail(ps, "tensor '%s': shape %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64
                               " has more than INT64_MAX elements", sh.s, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
        size_t size;
        if (ft_mul_overflow((size_t)(nel / ti->blck_size), ti->type_size, &size))
            return gg_fail(ps, "tensor '%s': shape %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64
                           " of type %s needs more than SIZE_MAX bytes", sh.s, t->ne[0], t->ne[1], t->ne[2], t->ne[3], ti->name);
        t->size = size;
    }
    return 0;
}

static int gg_offset_cmp(const void *a, const void *b) {
    const struct ft_gguf_tensor *x = *(const struct ft_gguf_tensor *const *)a;
    const struct ft_gguf_tensor *y = *(const struct ft_gguf_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return (x > y) - (x < y);
}

/* Tensors with data must not share bytes. ggml itself requires them to be
 * packed in order, so real files never overlap; refusing overlap bounds
 * what a copy of the file can cost (n tensors x alignment otherwise). */
static int gg_check_overlap(struct gg_parser *ps) {
    struct ft_gguf *g = ps->g;
    if (g->n_tensors < 2)
        return 0;
    size_t bytes = (size_t)g->n_tensors * sizeof(struct ft_gguf_tensor *);
    struct ft_gguf_tensor **order = gg_arena_alloc(&g->arena, bytes);
    if (!order)
        return gg_oom(ps, bytes);
    int64_t n = 0;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].size)
            order[n++] = &g->tensors[i];
    qsort(order, (size_t)n, sizeof(*order), gg_offset_cmp);
    for (int64_t i = 1; i < n; i++) {
        const struct ft_gguf_tensor *a = order[i - 1], *b = order[i];
        if (b->offset < a->offset + a->size) { /* both end inside the file: no overflow */
            struct gg_show sa, sb;
            return gg_fail(ps, "tensor '%s': data at offset %" PRIu64 " overlaps tensor '%s' (offset %" PRIu64 ", %zu bytes)",
                           gg_show(&sb, b->name.s, b->name.len), b->offset, gg_show(&sa, a->name.s, a->name.len),
                           a->offset, a->size);
        }
    }
    return 0;
}

/* Now that the data section's start is known, place every tensor in it. */
static int gg_place_tensors(struct gg_parser *ps) {
    struct ft_gguf *g = ps->g;
    size_t end_of_infos = (size_t)(ps->p - g->base), data_offset;
    if (ft_add_overflow(end_of_infos, g->alignment - 1, &data_offset))
        data_offset = SIZE_MAX; /* only reachable with an absurd alignment */
    else
        data_offset &= ~(g->alignment - 1);
    if (data_offset > g->size) {
        if (g->n_tensors > 0)
            return gg_fail(ps, "the tensor data section would start at byte %zu, past the end of the file (size %zu)",
                           data_offset, g->size);
        data_offset = g->size; /* no tensors: an empty data section */
    }
    g->data_offset = data_offset;
    size_t data_size = g->size - data_offset;

    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct ft_gguf_tensor *t = &g->tensors[i];
        struct gg_show sh;
        gg_show(&sh, t->name.s, t->name.len);
        if (t->offset % g->alignment != 0)
            return gg_fail(ps, "tensor '%s': data offset %" PRIu64 " is not a multiple of the alignment %zu",
                           sh.s, t->offset, g->alignment);
        if (t->offset > data_size)
            return gg_fail(ps, "tensor '%s': data offset %" PRIu64 " is past the end of the data section (%zu bytes at byte %zu, file size %zu)",
                           sh.s, t->offset, data_size, data_offset, g->size);
        if (t->size > data_size - t->offset) {
            uint64_t end;
            if (__builtin_add_overflow((uint64_t)data_offset + t->offset, (uint64_t)t->size, &end))
                return gg_fail(ps, "tensor '%s': %zu bytes of data at offset %" PRIu64 " run past the end of the file (size %zu)",
                               sh.s, t->size, t->offset, g->size);
            return gg_fail(ps, "tensor '%s': data ends at byte %" PRIu64 " past the end of the file (size %zu)", sh.s,
                           end, g->size);
        }
        t->data = g->base + data_offset + t->offset;
    }
    return gg_check_overlap(ps);
}

/* Parse and validate (base, size). On failure everything is freed and
 * *out is untouched. */
static int gg_parse(const void *base, size_t size, const char *name, struct ft_gguf **out) {
    struct gg_parser ps;
    memset(&ps, 0, sizeof(ps));
    ps.name = name;
    snprintf(ps.where, sizeof(ps.where), "the header");
    snprintf(ps.subject, sizeof(ps.subject), "the header");

    struct ft_gguf *g = gg_malloc(sizeof(*g));
    if (!g)
        return gg_oom(&ps, sizeof(*g));
    memset(g, 0, sizeof(*g));
    ps.g = g;
    g->base = base;
    g->size = size;
    ps.p = base;
    ps.end = ps.p + size;

    int rc;
    size_t name_len = strlen(name);
    g->name = gg_arena_alloc(&g->arena, name_len + 1);
    if (!g->name) {
        rc = gg_oom(&ps, name_len + 1);
        goto fail;
    }
    memcpy(g->name, name, name_len + 1);

    uint64_t n_tensors = 0, n_kv = 0;
    if ((rc = gg_parse_header(&ps, &n_tensors, &n_kv)))
        goto fail;
    g->n_tensors = (int64_t)n_tensors;
    g->n_kv = (int64_t)n_kv;
    /* The counts are bounded by size/14, so these products cannot overflow. */
    size_t kv_bytes = (size_t)n_kv * (sizeof(struct gg_kv) + sizeof(struct gg_name));
    size_t t_bytes = (size_t)n_tensors * (sizeof(struct ft_gguf_tensor) + sizeof(struct gg_name));
    char *tables = gg_arena_alloc(&g->arena, kv_bytes + t_bytes + 1);
    if (!tables) {
        rc = gg_oom(&ps, kv_bytes + t_bytes);
        goto fail;
    }
    memset(tables, 0, kv_bytes + t_bytes);
    g->kv = (struct gg_kv *)tables;
    g->kv_index = (struct gg_name *)(g->kv + n_kv);
    g->tensors = (struct ft_gguf_tensor *)(g->kv_index + n_kv);
    g->tensor_index = (struct gg_name *)(g->tensors + n_tensors);

    if ((rc = gg_parse_kvs(&ps)))
        goto fail;
    for (int64_t i = 0; i < g->n_kv; i++)
        g->kv_index[i] = (struct gg_name){g->kv[i].key.s, g->kv[i].key.len, i};
    if ((rc = gg_index_build(&ps, g->kv_index, g->n_kv, "key")))
        goto fail;
    if ((rc = gg_parse_alignment(&ps)))
        goto fail;
    if ((rc = gg_parse_tensor_infos(&ps)))
        goto fail;
    for (int64_t i = 0; i < g->n_tensors; i++)
        g->tensor_index[i] = (struct gg_name){g->tensors[i].name.s, g->tensors[i].name.len, i};
    if ((rc = gg_index_build(&ps, g->tensor_index, g->n_tensors, "tensor name")))
        goto fail;
    if ((rc = gg_place_tensors(&ps)))
        goto fail;
    *out = g;
    return 0;

fail:
    gg_arena_free(g->arena);
    free(g);
    return rc;
}

/* ---- open / close -------------------------------------------------------- */

int ft_gguf_open_buffer(const void *data, size_t size, const char *name, struct ft_gguf **out) {
    if (!out || (!data && size)) {
        FT_LOG_E("invalid argument (data %p, size %zu, out %p)", data, size, (void *)out);
        return FT_EINVAL;
    }
    *out = NULL;
    static const uint8_t empty[1];
    return gg_parse(data ? data : empty, size, name ? name : "<buffer>", out);
}

int ft_gguf_open(const char *path, struct ft_gguf **out) {
    if (!path || !out) {
        FT_LOG_E("invalid argument (path %p, out %p)", (const void *)path, (void *)out);
        return FT_EINVAL;
    }
    *out = NULL;
    char eb[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        FT_LOG_E("%s: cannot open: %s", path, strerror_r(errno, eb, sizeof(eb)));
        return FT_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        FT_LOG_E("%s: cannot stat: %s", path, strerror_r(errno, eb, sizeof(eb)));
        close(fd);
        return FT_EIO;
    }
    if (!S_ISREG(st.st_mode)) {
        FT_LOG_E("%s: not a regular file", path);
        close(fd);
        return FT_EIO;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > SIZE_MAX) {
        FT_LOG_E("%s: file size %lld is not addressable", path, (long long)st.st_size);
        close(fd);
        return FT_EIO;
    }
    size_t size = (size_t)st.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            FT_LOG_E("%s: cannot mmap %zu bytes: %s", path, size, strerror_r(errno, eb, sizeof(eb)));
            close(fd);
            return FT_EIO;
        }
    }
    close(fd); /* the mapping keeps the file */

    static const uint8_t empty[1];
    int rc = gg_parse(map ? map : empty, size, path, out);
    if (rc) {
        if (map)
            munmap(map, size);
        return rc;
    }
    (*out)->map = map;
    (*out)->map_size = size;
    return 0;
}

void ft_gguf_close(struct ft_gguf *g) {
    if (!g)
        return;
    if (g->map)
        munmap(g->map, g->map_size);
    gg_arena_free(g->arena);
    free(g);
}

/* ---- accessors ----------------------------------------------------------- */

const char *ft_gguf_path(const struct ft_gguf *g) { return g ? g->name : ""; }
uint32_t ft_gguf_version(const struct ft_gguf *g) { return g ? g->version : 0; }
size_t ft_gguf_file_size(const struct ft_gguf *g) { return g ? g->size : 0; }
size_t ft_gguf_alignment(const struct ft_gguf *g) { return g ? g->alignment : 0; }
size_t ft_gguf_data_offset(const struct ft_gguf *g) { return g ? g->data_offset : 0; }

int64_t ft_gguf_n_kv(const struct ft_gguf *g) { return g ? g->n_kv : 0; }

int64_t ft_gguf_find_key(const struct ft_gguf *g, const char *key) {
    if (!g || !key)
        return -1;
    return gg_index_find(g->kv_index, g->n_kv, key, strlen(key));
}

static const struct gg_kv *gg_kv_at(const struct ft_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

struct ft_str ft_gguf_kv_key(const struct ft_gguf *g, int64_t i) {
    const struct gg_kv *kv = gg_kv_at(g, i);
    return kv ? kv->key : (struct ft_str){"", 0};
}

enum ft_gguf_vtype ft_gguf_kv_type(const struct ft_gguf *g, int64_t i) {
    const struct gg_kv *kv = gg_kv_at(g, i);
    return kv ? kv->type : FT_GGUF_VTYPE_COUNT;
}

enum ft_gguf_vtype ft_gguf_kv_arr_type(const struct ft_gguf *g, int64_t i) {
    const struct gg_kv *kv = gg_kv_at(g, i);
    return kv && kv->type == FT_GGUF_ARRAY ? kv->arr_type : FT_GGUF_VTYPE_COUNT;
}

uint64_t ft_gguf_kv_arr_n(const struct ft_gguf *g, int64_t i) {
    const struct gg_kv *kv = gg_kv_at(g, i);
    return kv && kv->type == FT_GGUF_ARRAY ? kv->arr_n : 0;
}

const void *ft_gguf_kv_raw(const struct ft_gguf *g, int64_t i, size_t *size) {
    const struct gg_kv *kv = gg_kv_at(g, i);
    if (size)
        *size = kv ? kv->raw_size : 0;
    return kv ? kv->raw : NULL;
}

/* The kv for a typed getter, or NULL with *rc set (FT_ENOENT is silent). */
static const struct gg_kv *gg_get(const struct ft_gguf *g, const char *key, const char *func, int *rc) {
    if (!g || !key) {
        ft_log(FT_LOG_ERROR, func, "invalid argument (g %p, key %p)", (const void *)g, (const void *)key);
        *rc = FT_EINVAL;
        return NULL;
    }
    int64_t i = ft_gguf_find_key(g, key);
    if (i < 0) {
        *rc = FT_ENOENT;
        return NULL;
    }
    *rc = 0;
    return &g->kv[i];
}

static int gg_type_error(const struct ft_gguf *g, const struct gg_kv *kv, const char *func, const char *expected) {
    struct gg_show sh;
    if (kv->type == FT_GGUF_ARRAY)
        gg_log(func, "%s: key '%s': expected %s, got array of %s", g->name, gg_show(&sh, kv->key.s, kv->key.len),
               expected, ft_gguf_vtype_name(kv->arr_type));
    else
        gg_log(func, "%s: key '%s': expected %s, got %s", g->name, gg_show(&sh, kv->key.s, kv->key.len), expected,
               ft_gguf_vtype_name(kv->type));
    return FT_EFORMAT;
}

/* An integer value of any width: neg ? i : u. Returns false if not integer. */
static bool gg_int_value(const struct gg_kv *kv, bool *neg, int64_t *i, uint64_t *u) {
    const uint8_t *p = kv->raw;
    int64_t s;
    *neg = false;
    switch (kv->type) {
    case FT_GGUF_UINT8: *u = p[0]; return true;
    case FT_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *u = v; return true; }
    case FT_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); *u = v; return true; }
    case FT_GGUF_UINT64: memcpy(u, p, 8); return true;
    case FT_GGUF_INT8: { int8_t v; memcpy(&v, p, 1); s = v; break; }
    case FT_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); s = v; break; }
    case FT_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); s = v; break; }
    case FT_GGUF_INT64: memcpy(&s, p, 8); break;
    default: return false;
    }
    if (s < 0) {
        *neg = true;
        *i = s;
    } else {
        *u = (uint64_t)s;
    }
    return true;
}

/* Integer getter core: value must lie in [lo, hi]. */
static int gg_get_int(const struct ft_gguf *g, const char *key, const char *func, const char *tname, int64_t lo,
                      uint64_t hi, bool *neg, int64_t *i, uint64_t *u) {
    int rc;
    const struct gg_kv *kv = gg_get(g, key, func, &rc);
    if (!kv)
        return rc;
    if (!gg_int_value(kv, neg, i, u))
        return gg_type_error(g, kv, func, tname);
    if ((*neg && *i < lo) || (!*neg && *u > hi)) {
        struct gg_show sh;
        if (*neg)
            gg_log(func, "%s: key '%s': value %" PRId64 " does not fit in %s", g->name,
                   gg_show(&sh, kv->key.s, kv->key.len), *i, tname);
        else
            gg_log(func, "%s: key '%s': value %" PRIu64 " does not fit in %s", g->name,
                   gg_show(&sh, kv->key.s, kv->key.len), *u, tname);
        return FT_EFORMAT;
    }
    return 0;
}

int ft_gguf_get_u32(const struct ft_gguf *g, const char *key, uint32_t *out) {
    bool neg;
    int64_t i;
    uint64_t u;
    int rc = gg_get_int(g, key, __func__, "uint32", 0, UINT32_MAX, &neg, &i, &u);
    if (!rc && out)
        *out = (uint32_t)u;
    return rc;
}

int ft_gguf_get_i32(const struct ft_gguf *g, const char *key, int32_t *out) {
    bool neg;
    int64_t i;
    uint64_t u;
    int rc = gg_get_int(g, key, __func__, "int32", INT32_MIN, INT32_MAX, &neg, &i, &u);
    if (!rc && out)
        *out = neg ? (int32_t)i : (int32_t)u;
    return rc;
}

int ft_gguf_get_u64(const struct ft_gguf *g, const char *key, uint64_t *out) {
    bool neg;
    int64_t i;
    uint64_t u;
    int rc = gg_get_int(g, key, __func__, "uint64", 0, UINT64_MAX, &neg, &i, &u);
    if (!rc && out)
        *out = u;
    return rc;
}

int ft_gguf_get_f32(const struct ft_gguf *g, const char *key, float *out) {
    int rc;
    const struct gg_kv *kv = gg_get(g, key, __func__, &rc);
    if (!kv)
        return rc;
    float f;
    if (kv->type == FT_GGUF_FLOAT32) {
        memcpy(&f, kv->raw, 4);
    } else if (kv->type == FT_GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->raw, 8);
        if (isfinite(d) && fabs(d) > FLT_MAX) {
            struct gg_show sh;
            gg_log(__func__, "%s: key '%s': value %g does not fit in float32", g->name,
                   gg_show(&sh, kv->key.s, kv->key.len), d);
            return FT_EFORMAT;
        }
        f = (float)d;
    } else {
        return gg_type_error(g, kv, __func__, "float32");
    }
    if (out)
        *out = f;
    return 0;
}

int ft_gguf_get_bool(const struct ft_gguf *g, const char *key, bool *out) {
    int rc;
    const struct gg_kv *kv = gg_get(g, key, __func__, &rc);
    if (!kv)
        return rc;
    if (kv->type != FT_GGUF_BOOL)
        return gg_type_error(g, kv, __func__, "bool");
    if (out)
        *out = kv->raw[0] != 0;
    return 0;
}

int ft_gguf_get_str(const struct ft_gguf *g, const char *key, struct ft_str *out) {
    int rc;
    const struct gg_kv *kv = gg_get(g, key, __func__, &rc);
    if (!kv)
        return rc;
    if (kv->type != FT_GGUF_STRING)
        return gg_type_error(g, kv, __func__, "string");
    if (out) {
        uint64_t len;
        memcpy(&len, kv->raw, 8); /* validated at open: raw_size == 8 + len */
        out->s = (const char *)kv->raw + 8;
        out->len = (size_t)len;
    }
    return 0;
}

int ft_gguf_get_arr(const struct ft_gguf *g, const char *key, enum ft_gguf_vtype *type, const void **data,
                    uint64_t *n) {
    int rc;
    const struct gg_kv *kv = gg_get(g, key, __func__, &rc);
    if (!kv)
        return rc;
    if (kv->type != FT_GGUF_ARRAY || kv->arr_type == FT_GGUF_STRING || kv->arr_type == FT_GGUF_ARRAY)
        return gg_type_error(g, kv, __func__, "a numeric array");
    if (type)
        *type = kv->arr_type;
    if (data)
        *data = kv->arr;
    if (n)
        *n = kv->arr_n;
    return 0;
}

int ft_gguf_get_arr_str(const struct ft_gguf *g, const char *key, const struct ft_str **strs, uint64_t *n) {
    int rc;
    const struct gg_kv *kv = gg_get(g, key, __func__, &rc);
    if (!kv)
        return rc;
    if (kv->type != FT_GGUF_ARRAY || kv->arr_type != FT_GGUF_STRING)
        return gg_type_error(g, kv, __func__, "array of string");
    if (strs)
        *strs = kv->arr;
    if (n)
        *n = kv->arr_n;
    return 0;
}

/* ---- tensors ------------------------------------------------------------- */

int64_t ft_gguf_n_tensors(const struct ft_gguf *g) { return g ? g->n_tensors : 0; }

const struct ft_gguf_tensor *ft_gguf_tensor(const struct ft_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct ft_gguf_tensor *ft_gguf_find_tensor(const struct ft_gguf *g, const char *name) {
    if (!g || !name)
        return NULL;
    int64_t i = gg_index_find(g->tensor_index, g->n_tensors, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}
