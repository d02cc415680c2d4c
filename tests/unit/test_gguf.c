/* GGUF reader and writer tests.
 *
 * - a file with every value type, nested arrays, quantized tensors and a
 *   non-default alignment is written, read back and checked value by value;
 * - tests/unit/data/gguf_pyfixture.gguf (made by tools/gen_gguf_fixture.py
 *   with gguf-py's GGUFWriter) is read and every value the script wrote is
 *   checked; copying it through our writer must reproduce it byte for byte;
 * - malformed files: truncation at every byte, corrupted counts, lengths,
 *   types, dims, offsets, alignments, duplicates, versions; each must fail
 *   with FT_EFORMAT and exactly one error line naming the right thing;
 * - allocation failure at every allocation of the reader;
 * - the writer's atomic write (nothing left behind on failure);
 * - every .gguf in ../shared/models and ../shared/vocab, when present.
 *
 * The reader is #included (with fault injection on) to reach its allocator;
 * the writer comes from the library.
 * Set FT_GGUF_WRITE_SEEDS=DIR to write the fuzz seed corpus into DIR.
 */
#define FT_GGUF_FAULT_INJECTION
#include "engine/gguf/gguf.c"

#include "ft_test.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>

/* ---- log capture ----------------------------------------------------------- */

static struct {
    int n_err;
    char last[1024];
    bool quiet;
} cap;

static void cap_sink(enum ft_log_level level, const char *func, const char *msg, void *ud) {
    (void)func;
    (void)ud;
    if (level < FT_LOG_ERROR)
        return;
    cap.n_err++;
    snprintf(cap.last, sizeof(cap.last), "%s", msg);
}

static void cap_reset(void) {
    cap.n_err = 0;
    cap.last[0] = '\0';
}

/* Parse a copy of buf[0..n) in an exactly-sized heap block, so ASan catches
 * any read past the end; on success reopen on `buf` itself (which outlives
 * the result) and return that. */
static int open_copy(const void *buf, size_t n, const char *name, struct ft_gguf **out) {
    void *copy = malloc(n ? n : 1);
    if (n)
        memcpy(copy, buf, n);
    int rc = ft_gguf_open_buffer(copy, n, name, out);
    if (rc == 0) {
        ft_gguf_close(*out);
        *out = NULL;
        rc = ft_gguf_open_buffer(buf, n, name, out);
    }
    free(copy);
    return rc;
}

/* Expect FT_EFORMAT with exactly one error line containing `want`. */
#define EXPECT_BAD(buf, n, want)                                                                  \
    do {                                                                                         \
        struct ft_gguf *g_ = NULL;                                                               \
        cap_reset();                                                                             \
        int rc_ = open_copy((buf), (n), "bad.gguf", &g_);                                        \
        CHECKF(rc_ == FT_EFORMAT, "rc %d for '%s'", rc_, want);                                  \
        CHECKF(g_ == NULL, "result set on failure");                                             \
        CHECKF(cap.n_err == 1, "%d error lines for '%s' (last: %s)", cap.n_err, want, cap.last); \
        CHECKF(strstr(cap.last, want) != NULL, "message '%s' lacks '%s'", cap.last, want);       \
        CHECKF(strncmp(cap.last, "bad.gguf: ", 10) == 0, "message '%s' lacks the name", cap.last); \
        CHECKF(strchr(cap.last, '\n') == NULL, "message has a newline: %s", cap.last);           \
        ft_gguf_close(g_);                                                                       \
    } while (0)

/* ---- a byte builder for hand-made files ----------------------------------- */

struct bb {
    uint8_t *p;
    size_t n, cap;
};

static void bb_put(struct bb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void bb_u32(struct bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(struct bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_strn(struct bb *b, const char *s, size_t n) {
    bb_u64(b, n);
    bb_put(b, s, n);
}
static void bb_str(struct bb *b, const char *s) { bb_strn(b, s, strlen(s)); }
static void bb_hdr(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b->n = 0;
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void bb_kv_u32(struct bb *b, const char *key, uint32_t v) {
    bb_str(b, key);
    bb_u32(b, FT_GGUF_UINT32);
    bb_u32(b, v);
}
static void bb_tinfo(struct bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                     uint64_t off) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        bb_u64(b, ne[i]);
    bb_u32(b, type);
    bb_u64(b, off);
}
static void bb_pad(struct bb *b, size_t a) {
    static const uint8_t z[256];
    while (b->n % a)
        bb_put(b, z, 1);
}
static void bb_zeros(struct bb *b, size_t n) {
    while (n--)
        bb_put(b, "", 1);
}

static uint32_t crc32_of(const void *p, size_t n) {
    const uint8_t *b = p;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= b[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

static bool str_eq(struct ft_str s, const char *c) { return s.len == strlen(c) && memcmp(s.s, c, s.len) == 0; }

/* The source tree: $FT_SOURCE_DIR (set by ctest), else derived from
 * __FILE__ (absolute in CMake builds), else ".". */
static const char *src_dir(void) {
    static char buf[4096];
    const char *d = getenv("FT_SOURCE_DIR");
    if (d && *d)
        return d;
    const char *file = __FILE__;
    const char *tail = strstr(file, "tests/unit/test_gguf.c");
    if (tail && tail > file && (size_t)(tail - file) < sizeof(buf)) {
        snprintf(buf, sizeof(buf), "%.*s", (int)(tail - file), file);
        return buf;
    }
    return ".";
}

/* ---- the python fixture ---------------------------------------------------- */

static void *load_pyfixture(size_t *n) {
    char path[8192];
    snprintf(path, sizeof(path), "%s/tests/unit/data/gguf_pyfixture.gguf", src_dir());
    void *buf = ft_test_read_file(path, n);
    CHECKF(buf != NULL, "cannot read %s (set FT_SOURCE_DIR)", path);
    return buf;
}

static void check_pyfixture(const struct ft_gguf *g, uint32_t version) {
    CHECK_EQ_INT(ft_gguf_version(g), version);
    CHECK_EQ_INT(ft_gguf_file_size(g), 1792);
    CHECK_EQ_INT(ft_gguf_alignment(g), 64);
    CHECK_EQ_INT(ft_gguf_data_offset(g), 1088);
    CHECK_EQ_INT(ft_gguf_n_kv(g), 23);
    CHECK_EQ_INT(ft_gguf_n_tensors(g), 5);

    static const char *keys[] = {
        "general.architecture", "general.alignment", "t.u8",      "t.i8",       "t.u16",     "t.i16",
        "t.u32",                "t.i32",             "t.f32",     "t.u64",      "t.i64",     "t.f64",
        "t.f64_big",            "t.bool",            "t.str",     "t.arr_i32",  "t.arr_f32", "t.arr_u8",
        "t.arr_i64",            "t.arr_bool",        "t.arr_str", "t.nested",   "t.nested_str",
    };
    static const enum ft_gguf_vtype types[] = {
        FT_GGUF_STRING, FT_GGUF_UINT32,  FT_GGUF_UINT8,   FT_GGUF_INT8,  FT_GGUF_UINT16, FT_GGUF_INT16,
        FT_GGUF_UINT32, FT_GGUF_INT32,   FT_GGUF_FLOAT32, FT_GGUF_UINT64, FT_GGUF_INT64, FT_GGUF_FLOAT64,
        FT_GGUF_FLOAT64, FT_GGUF_BOOL,   FT_GGUF_STRING,  FT_GGUF_ARRAY, FT_GGUF_ARRAY,  FT_GGUF_ARRAY,
        FT_GGUF_ARRAY,  FT_GGUF_ARRAY,   FT_GGUF_ARRAY,   FT_GGUF_ARRAY, FT_GGUF_ARRAY,
    };
    for (int64_t i = 0; i < 23; i++) {
        CHECKF(str_eq(ft_gguf_kv_key(g, i), keys[i]), "key #%lld", (long long)i);
        CHECK_EQ_INT(ft_gguf_kv_type(g, i), types[i]);
        CHECK_EQ_INT(ft_gguf_find_key(g, keys[i]), i);
    }

    struct ft_str s;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    bool b;
    CHECK(ft_gguf_get_str(g, "general.architecture", &s) == 0 && str_eq(s, "llama"));
    CHECK(ft_gguf_get_u32(g, "general.alignment", &u32) == 0 && u32 == 64);
    CHECK(ft_gguf_get_u32(g, "t.u8", &u32) == 0 && u32 == 200);
    CHECK(ft_gguf_get_i32(g, "t.i8", &i32) == 0 && i32 == -100);
    CHECK(ft_gguf_get_u32(g, "t.u16", &u32) == 0 && u32 == 60000);
    CHECK(ft_gguf_get_i32(g, "t.i16", &i32) == 0 && i32 == -30000);
    CHECK(ft_gguf_get_u32(g, "t.u32", &u32) == 0 && u32 == 4000000000u);
    CHECK(ft_gguf_get_i32(g, "t.i32", &i32) == 0 && i32 == -2000000000);
    CHECK(ft_gguf_get_f32(g, "t.f32", &f) == 0 && f == 1.5f);
    CHECK(ft_gguf_get_u64(g, "t.u64", &u64) == 0 && u64 == 10000000000003ull);
    {
        size_t n;
        const uint8_t *raw = ft_gguf_kv_raw(g, ft_gguf_find_key(g, "t.i64"), &n);
        int64_t v;
        CHECK(n == 8);
        memcpy(&v, raw, 8);
        CHECK(v == -1099511627781ll);
    }
    CHECK(ft_gguf_get_f32(g, "t.f64", &f) == 0 && f == 3.25f);
    CHECK(ft_gguf_get_bool(g, "t.bool", &b) == 0 && b);
    CHECK(ft_gguf_get_str(g, "t.str", &s) == 0 && str_eq(s, "h\xc3\xa9llo \xe2\x9c\x93"));

    enum ft_gguf_vtype t;
    const void *d;
    uint64_t n;
    CHECK(ft_gguf_get_arr(g, "t.arr_i32", &t, &d, &n) == 0 && t == FT_GGUF_INT32 && n == 3);
    if (n == 3)
        CHECK(((const int32_t *)d)[0] == 1 && ((const int32_t *)d)[1] == -2 && ((const int32_t *)d)[2] == 3);
    CHECK(ft_gguf_get_arr(g, "t.arr_f32", &t, &d, &n) == 0 && t == FT_GGUF_FLOAT32 && n == 2);
    if (n == 2)
        CHECK(((const float *)d)[0] == 0.5f && ((const float *)d)[1] == -1.25f);
    CHECK(ft_gguf_get_arr(g, "t.arr_u8", &t, &d, &n) == 0 && t == FT_GGUF_UINT8 && n == 4);
    if (n == 4)
        CHECK(memcmp(d, "\x07\x08\x09\xff", 4) == 0);
    CHECK(ft_gguf_get_arr(g, "t.arr_i64", &t, &d, &n) == 0 && t == FT_GGUF_INT64 && n == 2);
    if (n == 2) {
        CHECK(((uintptr_t)d % 8) == 0);
        CHECK(((const int64_t *)d)[0] == -5 && ((const int64_t *)d)[1] == (1ll << 40));
    }
    CHECK(ft_gguf_get_arr(g, "t.arr_bool", &t, &d, &n) == 0 && t == FT_GGUF_BOOL && n == 3);
    if (n == 3)
        CHECK(((const bool *)d)[0] && !((const bool *)d)[1] && ((const bool *)d)[2]);
    const struct ft_str *strs;
    CHECK(ft_gguf_get_arr_str(g, "t.arr_str", &strs, &n) == 0 && n == 3);
    if (n == 3)
        CHECK(str_eq(strs[0], "a") && str_eq(strs[1], "") && str_eq(strs[2], "ccc"));

    int64_t ki = ft_gguf_find_key(g, "t.nested");
    CHECK_EQ_INT(ft_gguf_kv_arr_type(g, ki), FT_GGUF_ARRAY);
    CHECK_EQ_INT(ft_gguf_kv_arr_n(g, ki), 2);
    {
        /* raw: u32 ARRAY, u64 2, [u32 INT32, u64 2, 1, 2], [u32 INT32, u64 1, 3] */
        size_t rn;
        const uint8_t *raw = ft_gguf_kv_raw(g, ki, &rn);
        CHECK_EQ_INT(rn, 12 + 12 + 8 + 12 + 4);
        struct bb e = {0};
        bb_u32(&e, FT_GGUF_ARRAY);
        bb_u64(&e, 2);
        bb_u32(&e, FT_GGUF_INT32);
        bb_u64(&e, 2);
        bb_u32(&e, 1);
        bb_u32(&e, 2);
        bb_u32(&e, FT_GGUF_INT32);
        bb_u64(&e, 1);
        bb_u32(&e, 3);
        CHECK(rn == e.n && memcmp(raw, e.p, rn) == 0);
        free(e.p);
    }
    ki = ft_gguf_find_key(g, "t.nested_str");
    CHECK_EQ_INT(ft_gguf_kv_arr_type(g, ki), FT_GGUF_ARRAY);
    CHECK_EQ_INT(ft_gguf_kv_arr_n(g, ki), 2);

    /* tensors */
    static const char *tn[] = {"w.f32", "w.f16", "w.i8", "w.q8_0", "w.q4_k"};
    static const enum ft_type tt[] = {FT_TYPE_F32, FT_TYPE_F16, FT_TYPE_I8, FT_TYPE_Q8_0, FT_TYPE_Q4_K};
    static const int nd[] = {2, 1, 3, 2, 2};
    static const int64_t ne[][4] = {{3, 2, 1, 1}, {4, 1, 1, 1}, {4, 3, 2, 1}, {64, 2, 1, 1}, {256, 2, 1, 1}};
    static const uint64_t off[] = {0, 64, 128, 192, 384};
    static const size_t sz[] = {24, 8, 24, 136, 288};
    for (int i = 0; i < 5; i++) {
        const struct ft_gguf_tensor *x = ft_gguf_tensor(g, i);
        CHECK(x && str_eq(x->name, tn[i]));
        CHECK(ft_gguf_find_tensor(g, tn[i]) == x);
        CHECK_EQ_INT(x->type, tt[i]);
        CHECK_EQ_INT(x->n_dims, nd[i]);
        for (int k = 0; k < 4; k++)
            CHECK_EQ_INT(x->ne[k], ne[i][k]);
        CHECK_EQ_INT(x->offset, off[i]);
        CHECK_EQ_INT(x->size, sz[i]);
    }
    const float *wf = ft_gguf_find_tensor(g, "w.f32")->data;
    for (int i = 0; i < 6; i++)
        CHECK(wf[i] == (float)i - 2.5f);
    const uint16_t *wh = ft_gguf_find_tensor(g, "w.f16")->data;
    CHECK(ft_fp16_to_fp32(wh[0]) == 1.0f && ft_fp16_to_fp32(wh[1]) == -2.0f && ft_fp16_to_fp32(wh[2]) == 0.5f &&
          ft_fp16_to_fp32(wh[3]) == 65504.0f);
    const int8_t *wi = ft_gguf_find_tensor(g, "w.i8")->data;
    for (int i = 0; i < 24; i++)
        CHECK(wi[i] == i);
    CHECK(crc32_of(ft_gguf_find_tensor(g, "w.q8_0")->data, 136) == 0xa1694881u);
    const uint8_t *wq = ft_gguf_find_tensor(g, "w.q4_k")->data;
    for (int i = 0; i < 288; i++)
        CHECK(wq[i] == (uint8_t)((i * 37) % 251));
    CHECK(ft_gguf_find_tensor(g, "w.nope") == NULL);
    CHECK(ft_gguf_tensor(g, 5) == NULL && ft_gguf_tensor(g, -1) == NULL);
}

static void test_pyfixture(void) {
    size_t n;
    uint8_t *buf = load_pyfixture(&n);
    if (!buf)
        return;
    CHECK(crc32_of(buf, n) == 0xccff6a07u); /* the file the script writes */
    struct ft_gguf *g = NULL;
    CHECK(ft_gguf_open_buffer(buf, n, "py.gguf", &g) == 0);
    if (g) {
        check_pyfixture(g, 3);

        /* Getter type rules and their messages. */
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        float f;
        bool b;
        struct ft_str s;
        cap_reset();
        CHECK(ft_gguf_get_u32(g, "t.str", &u32) == FT_EFORMAT);
        CHECKF(strcmp(cap.last, "py.gguf: key 't.str': expected uint32, got string") == 0, "%s", cap.last);
        CHECK(ft_gguf_get_u32(g, "t.i8", &u32) == FT_EFORMAT);
        CHECKF(strstr(cap.last, "key 't.i8': value -100 does not fit in uint32"), "%s", cap.last);
        CHECK(ft_gguf_get_i32(g, "t.u32", &i32) == FT_EFORMAT);
        CHECKF(strstr(cap.last, "key 't.u32': value 4000000000 does not fit in int32"), "%s", cap.last);
        CHECK(ft_gguf_get_u32(g, "t.u64", &u32) == FT_EFORMAT);
        CHECK(ft_gguf_get_u64(g, "t.i64", &u64) == FT_EFORMAT);
        CHECK(ft_gguf_get_u64(g, "t.u8", &u64) == 0 && u64 == 200);
        CHECK(ft_gguf_get_i32(g, "t.u16", &i32) == 0 && i32 == 60000);
        CHECK(ft_gguf_get_f32(g, "t.f64_big", &f) == FT_EFORMAT);
        CHECKF(strstr(cap.last, "key 't.f64_big'") && strstr(cap.last, "does not fit in float32"), "%s", cap.last);
        CHECK(ft_gguf_get_f32(g, "t.i32", &f) == FT_EFORMAT);
        CHECK(ft_gguf_get_bool(g, "t.u8", &b) == FT_EFORMAT);
        CHECK(ft_gguf_get_str(g, "t.arr_str", &s) == FT_EFORMAT);
        CHECKF(strstr(cap.last, "key 't.arr_str': expected string, got array of string"), "%s", cap.last);
        enum ft_gguf_vtype t;
        const void *d;
        uint64_t an;
        CHECK(ft_gguf_get_arr(g, "t.arr_str", &t, &d, &an) == FT_EFORMAT);
        CHECK(ft_gguf_get_arr(g, "t.nested", &t, &d, &an) == FT_EFORMAT);
        CHECKF(strstr(cap.last, "expected a numeric array, got array of array"), "%s", cap.last);
        const struct ft_str *strs;
        CHECK(ft_gguf_get_arr_str(g, "t.arr_i32", &strs, &an) == FT_EFORMAT);
        CHECK(ft_gguf_get_arr_str(g, "t.u8", &strs, &an) == FT_EFORMAT);
        CHECK_EQ_INT(cap.n_err, 13);
        cap_reset();
        CHECK(ft_gguf_get_u32(g, "absent", &u32) == FT_ENOENT);
        CHECK(ft_gguf_get_arr(g, "absent", &t, &d, &an) == FT_ENOENT);
        CHECK_EQ_INT(cap.n_err, 0); /* absent keys are not errors */

        /* Copy through our writer: byte-identical to gguf-py's file. */
        struct ft_gguf_writer *w = ft_gguf_writer_new();
        for (int64_t i = 0; i < ft_gguf_n_kv(g); i++)
            CHECK(ft_gguf_writer_copy_kv(w, g, i) == 0);
        for (int64_t i = 0; i < ft_gguf_n_tensors(g); i++) {
            const struct ft_gguf_tensor *x = ft_gguf_tensor(g, i);
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)x->name.len, x->name.s);
            CHECK(ft_gguf_writer_add_tensor(w, name, x->type, x->n_dims, x->ne, x->data) == 0);
        }
        void *out = NULL;
        size_t on = 0;
        CHECK(ft_gguf_writer_to_buffer(w, &out, &on) == 0);
        CHECKF(on == n && memcmp(out, buf, n) == 0, "round trip differs (%zu vs %zu bytes)", on, n);
        free(out);
        ft_gguf_writer_free(w);

        /* The same file as GGUF v2 (identical layout for little-endian). */
        uint8_t *v2 = malloc(n);
        memcpy(v2, buf, n);
        v2[4] = 2;
        struct ft_gguf *g2 = NULL;
        CHECK(ft_gguf_open_buffer(v2, n, "v2.gguf", &g2) == 0);
        if (g2) {
            check_pyfixture(g2, 2);
        }
        ft_gguf_close(g2);
        free(v2);
    }
    ft_gguf_close(g);
    free(buf);
}

/* ---- a full file from our writer ----------------------------------------- */

static uint8_t pat(size_t i, int seed) { return (uint8_t)(i * 31 + (size_t)seed * 7 + (i >> 8)); }

struct tspec {
    const char *name;
    enum ft_type type;
    int n_dims;
    int64_t ne[4];
};
static const struct tspec g_tensors[] = {
    {"token_embd.weight", FT_TYPE_F32, 2, {4, 3, 1, 1}},
    {"f16", FT_TYPE_F16, 1, {8, 1, 1, 1}},
    {"bf16", FT_TYPE_BF16, 2, {2, 2, 1, 1}},
    {"blk.0.q8", FT_TYPE_Q8_0, 2, {64, 2, 1, 1}},
    {"blk.0.q4_0", FT_TYPE_Q4_0, 3, {32, 1, 2, 1}},
    {"blk.0.q4_k", FT_TYPE_Q4_K, 2, {256, 1, 1, 1}},
    {"blk.0.q6_k", FT_TYPE_Q6_K, 4, {256, 1, 1, 2}},
    {"i32", FT_TYPE_I32, 3, {2, 3, 4, 1}},
    {"empty", FT_TYPE_F32, 2, {0, 5, 1, 1}},
};
#define N_TENSORS ((int)FT_ARRAY_LEN(g_tensors))

static size_t tspec_size(const struct tspec *t) {
    return ft_row_size(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

/* Builds the full test file. `datas` receives the tensor buffers (caller
 * frees). `py` (may be NULL) supplies the scalar types the writer has no
 * setter for, and nested arrays, through copy_kv. */
static struct ft_gguf_writer *build_full(const struct ft_gguf *py, uint8_t **datas, size_t alignment) {
    struct ft_gguf_writer *w = ft_gguf_writer_new();
    CHECK(w != NULL);
    CHECK(ft_gguf_writer_set_str(w, "general.architecture", "llama") == 0);
    CHECK(ft_gguf_writer_set_u32(w, "a.u32", 0xdeadbeefu) == 0);
    CHECK(ft_gguf_writer_set_i32(w, "a.i32", -123456) == 0);
    CHECK(ft_gguf_writer_set_u64(w, "a.u64", 0x123456789abcdef0ull) == 0);
    CHECK(ft_gguf_writer_set_f32(w, "a.f32", -0.375f) == 0);
    CHECK(ft_gguf_writer_set_bool(w, "a.bool", true) == 0);
    CHECK(ft_gguf_writer_set_bool(w, "a.bool_false", false) == 0);
    CHECK(ft_gguf_writer_set_str(w, "a.str", "hello, gguf") == 0);
    CHECK(ft_gguf_writer_set_str(w, "a.str_empty", "") == 0);
    static const uint8_t au8[] = {1, 2, 255};
    static const int8_t ai8[] = {-1, 0, 127};
    static const uint16_t au16[] = {65535, 1};
    static const int16_t ai16[] = {-32768, 5};
    static const uint32_t au32[] = {4000000000u, 7};
    static const int32_t ai32[] = {-7, 8, 9, 10};
    static const float af32[] = {0.25f, -8.5f};
    static const uint8_t abool[] = {1, 0, 2}; /* 2 is read as true */
    static const uint64_t au64[] = {UINT64_MAX};
    static const int64_t ai64[] = {INT64_MIN, 3};
    static const double af64[] = {1e-300, -2.5};
    CHECK(ft_gguf_writer_set_arr(w, "a.arr.u8", FT_GGUF_UINT8, au8, 3) == 0);
    CHECK(ft_gguf_writer_set_arr(w, "a.arr.i8", FT_GGUF_INT8, ai8, 3) == 0);
    CHECK(ft_gguf_writer_set_arr(w, "a.arr.u16", FT_GGUF_UINT16, au16, 2) == 0);
    CHECK(ft_gguf_writer_set_arr(w, "a.arr.i16", FT_GGUF_INT16, ai16, 2) == 0);
    CHECK(ft_gguf_writer_set_arr(w, "a.arr.u32", FT_GGUF_UINT32, au32, 2) == 0);
    CHECK(ft_gguf_writer_set_arr(w, "a.arr.i32", FT_GGUF_INT32, ai32, 4) == 0);
    CHECK(ft_gguf_writer_set_arr(w, "a.arr.f32", FT_GGUF_FLOAT32, af32, 2) == 0);
    CHECK(ft_gguf_writer_set_arr(w, "a.arr.bool", FT_GGUF_BOOL, abool, 3) == 0);
    CHECK(ft_gguf_writer_set_arr(w, "a.arr.u64", FT_GGUF_UINT64, au64, 1) == 0);
    CHECK(ft_gguf_writer_set_arr(w, "a.arr.i64", FT_GGUF_INT64, ai64, 2) == 0);
    CHECK(ft_gguf_writer_set_arr(w, "a.arr.f64", FT_GGUF_FLOAT64, af64, 2) == 0);
    CHECK(ft_gguf_writer_set_arr(w, "a.arr.empty", FT_GGUF_UINT32, NULL, 0) == 0);
    const struct ft_str strs[] = {{"one", 3}, {"", 0}, {"three", 5}, {"a\0b", 3}};
    CHECK(ft_gguf_writer_set_arr_str(w, "a.arr.str", strs, 4) == 0);
    CHECK(ft_gguf_writer_set_arr_str(w, "a.arr.str_empty", NULL, 0) == 0);
    if (py) {
        for (int64_t i = 0; i < ft_gguf_n_kv(py); i++) {
            struct ft_str k = ft_gguf_kv_key(py, i);
            if (k.len > 2 && memcmp(k.s, "t.", 2) == 0)
                CHECK(ft_gguf_writer_copy_kv(w, py, i) == 0);
        }
    }
    if (alignment)
        ft_gguf_writer_set_alignment(w, alignment);
    CHECK(ft_gguf_writer_set_u32(w, "a.u32", 7) == 0); /* replace: keeps position 1 */

    for (int i = 0; i < N_TENSORS; i++) {
        const struct tspec *t = &g_tensors[i];
        size_t sz = tspec_size(t);
        datas[i] = malloc(sz ? sz : 1);
        for (size_t k = 0; k < sz; k++)
            datas[i][k] = pat(k, i);
        CHECK(ft_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, datas[i]) == 0);
    }
    return w;
}

static void check_full(const struct ft_gguf *g, bool with_py, size_t alignment) {
    CHECK_EQ_INT(ft_gguf_version(g), 3);
    CHECK_EQ_INT(ft_gguf_alignment(g), alignment ? alignment : 32);
    CHECK_EQ_INT(ft_gguf_data_offset(g) % ft_gguf_alignment(g), 0);
    CHECK(str_eq(ft_gguf_kv_key(g, 0), "general.architecture"));
    CHECK(str_eq(ft_gguf_kv_key(g, 1), "a.u32"));
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    bool b;
    struct ft_str s;
    CHECK(ft_gguf_get_u32(g, "a.u32", &u32) == 0 && u32 == 7);
    CHECK(ft_gguf_get_i32(g, "a.i32", &i32) == 0 && i32 == -123456);
    CHECK(ft_gguf_get_u64(g, "a.u64", &u64) == 0 && u64 == 0x123456789abcdef0ull);
    CHECK(ft_gguf_get_f32(g, "a.f32", &f) == 0 && f == -0.375f);
    CHECK(ft_gguf_get_bool(g, "a.bool", &b) == 0 && b);
    CHECK(ft_gguf_get_bool(g, "a.bool_false", &b) == 0 && !b);
    CHECK(ft_gguf_get_str(g, "a.str", &s) == 0 && str_eq(s, "hello, gguf"));
    CHECK(ft_gguf_get_str(g, "a.str_empty", &s) == 0 && s.len == 0);

    enum ft_gguf_vtype t;
    const void *d;
    uint64_t n;
#define ARR(key, vt, ctype, ...)                                                         \
    do {                                                                                 \
        static const ctype want_[] = {__VA_ARGS__};                                      \
        CHECK(ft_gguf_get_arr(g, key, &t, &d, &n) == 0 && t == vt);                      \
        CHECK(n == FT_ARRAY_LEN(want_) && memcmp(d, want_, sizeof(want_)) == 0);         \
        CHECK((uintptr_t)d % sizeof(ctype) == 0);                                        \
    } while (0)
    ARR("a.arr.u8", FT_GGUF_UINT8, uint8_t, 1, 2, 255);
    ARR("a.arr.i8", FT_GGUF_INT8, int8_t, -1, 0, 127);
    ARR("a.arr.u16", FT_GGUF_UINT16, uint16_t, 65535, 1);
    ARR("a.arr.i16", FT_GGUF_INT16, int16_t, -32768, 5);
    ARR("a.arr.u32", FT_GGUF_UINT32, uint32_t, 4000000000u, 7);
    ARR("a.arr.i32", FT_GGUF_INT32, int32_t, -7, 8, 9, 10);
    ARR("a.arr.f32", FT_GGUF_FLOAT32, float, 0.25f, -8.5f);
    ARR("a.arr.bool", FT_GGUF_BOOL, uint8_t, 1, 0, 1);
    ARR("a.arr.u64", FT_GGUF_UINT64, uint64_t, UINT64_MAX);
    ARR("a.arr.i64", FT_GGUF_INT64, int64_t, INT64_MIN, 3);
    ARR("a.arr.f64", FT_GGUF_FLOAT64, double, 1e-300, -2.5);
#undef ARR
    CHECK(ft_gguf_get_arr(g, "a.arr.empty", &t, &d, &n) == 0 && t == FT_GGUF_UINT32 && n == 0 && d != NULL);
    const struct ft_str *strs;
    CHECK(ft_gguf_get_arr_str(g, "a.arr.str", &strs, &n) == 0 && n == 4);
    if (n == 4)
        CHECK(str_eq(strs[0], "one") && strs[1].len == 0 && str_eq(strs[2], "three") && strs[3].len == 3 &&
              memcmp(strs[3].s, "a\0b", 3) == 0);
    CHECK(ft_gguf_get_arr_str(g, "a.arr.str_empty", &strs, &n) == 0 && n == 0);

    if (with_py) {
        CHECK(ft_gguf_get_u32(g, "t.u8", &u32) == 0 && u32 == 200);
        CHECK(ft_gguf_get_i32(g, "t.i16", &i32) == 0 && i32 == -30000);
        CHECK(ft_gguf_get_f32(g, "t.f64", &f) == 0 && f == 3.25f);
        int64_t ki = ft_gguf_find_key(g, "t.nested_str");
        CHECK(ki >= 0 && ft_gguf_kv_arr_type(g, ki) == FT_GGUF_ARRAY && ft_gguf_kv_arr_n(g, ki) == 2);
    }

    CHECK_EQ_INT(ft_gguf_n_tensors(g), N_TENSORS);
    uint64_t expect_off = 0;
    for (int i = 0; i < N_TENSORS && i < ft_gguf_n_tensors(g); i++) {
        const struct tspec *ts = &g_tensors[i];
        const struct ft_gguf_tensor *x = ft_gguf_tensor(g, i);
        CHECK(str_eq(x->name, ts->name));
        CHECK(ft_gguf_find_tensor(g, ts->name) == x);
        CHECK_EQ_INT(x->type, ts->type);
        CHECK_EQ_INT(x->n_dims, ts->n_dims);
        for (int k = 0; k < 4; k++)
            CHECK_EQ_INT(x->ne[k], ts->ne[k]);
        size_t sz = tspec_size(ts);
        CHECK_EQ_INT(x->size, sz);
        CHECK_EQ_INT(x->offset, expect_off);
        CHECK_EQ_INT(x->offset % ft_gguf_alignment(g), 0);
        expect_off += (sz + ft_gguf_alignment(g) - 1) / ft_gguf_alignment(g) * ft_gguf_alignment(g);
        bool same = true;
        for (size_t k = 0; k < sz; k++)
            same = same && ((const uint8_t *)x->data)[k] == pat(k, i);
        CHECKF(same, "tensor %s data", ts->name);
    }
    CHECK_EQ_INT(ft_gguf_file_size(g), ft_gguf_data_offset(g) + expect_off);
}

static void free_datas(uint8_t **datas) {
    for (int i = 0; i < N_TENSORS; i++)
        free(datas[i]);
}

/* Must fail for every prefix that cuts into metadata or tensor data. */
static void check_truncations(const uint8_t *buf, size_t n, const char *what) {
    struct ft_gguf *g = NULL;
    CHECK(ft_gguf_open_buffer(buf, n, "t.gguf", &g) == 0);
    if (!g)
        return;
    size_t last_end = ft_gguf_data_offset(g);
    for (int64_t i = 0; i < ft_gguf_n_tensors(g); i++) {
        const struct ft_gguf_tensor *x = ft_gguf_tensor(g, i);
        last_end = FT_MAX(last_end, ft_gguf_data_offset(g) + x->offset + x->size);
    }
    ft_gguf_close(g);
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
        cap_reset();
        int rc = open_copy(buf, k, "t.gguf", &g);
        if (k < last_end) {
            if (rc != FT_EFORMAT || cap.n_err != 1 || strncmp(cap.last, "t.gguf: ", 8) != 0) {
                if (bad++ < 5)
                    CHECKF(0, "%s truncated at %zu: rc %d, %d error lines, '%s'", what, k, rc, cap.n_err, cap.last);
            }
        } else {
            CHECKF(rc == 0, "%s truncated inside the final padding at %zu: rc %d", what, k, rc);
        }
        ft_gguf_close(g);
        g = NULL;
    }
    CHECKF(bad == 0, "%s: %d truncations misbehaved", what, bad);
}

static void test_full(void) {
    size_t pn;
    uint8_t *py_buf = load_pyfixture(&pn);
    struct ft_gguf *py = NULL;
    if (py_buf)
        CHECK(ft_gguf_open_buffer(py_buf, pn, "py.gguf", &py) == 0);

    uint8_t *datas[N_TENSORS];
    struct ft_gguf_writer *w = build_full(py, datas, 128);
    void *buf = NULL;
    size_t n = 0;
    CHECK(ft_gguf_writer_to_buffer(w, &buf, &n) == 0);
    struct ft_gguf *g = NULL;
    CHECK(ft_gguf_open_buffer(buf, n, "full.gguf", &g) == 0);
    if (g) {
        check_full(g, py != NULL, 128);
        CHECK(strcmp(ft_gguf_path(g), "full.gguf") == 0);
    }

    /* Writing a file gives the same bytes, through mmap. */
    char dir[] = "/tmp/ft_gguf_test_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/full.gguf", dir);
    CHECK(ft_gguf_writer_write(w, path) == 0);
    struct ft_gguf *gf = NULL;
    CHECK(ft_gguf_open(path, &gf) == 0);
    if (gf) {
        check_full(gf, py != NULL, 128);
        CHECK(strcmp(ft_gguf_path(gf), path) == 0);
        CHECK(ft_gguf_file_size(gf) == n);
    }
    size_t fn;
    char *fbuf = ft_test_read_file(path, &fn);
    CHECK(fbuf && fn == n && memcmp(fbuf, buf, n) == 0);
    free(fbuf);
    ft_gguf_close(gf);

    /* Copying a file through a writer reproduces it (nested arrays too). */
    if (g) {
        struct ft_gguf_writer *w2 = ft_gguf_writer_new();
        for (int64_t i = 0; i < ft_gguf_n_kv(g); i++)
            CHECK(ft_gguf_writer_copy_kv(w2, g, i) == 0);
        for (int64_t i = 0; i < ft_gguf_n_tensors(g); i++) {
            const struct ft_gguf_tensor *x = ft_gguf_tensor(g, i);
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)x->name.len, x->name.s);
            CHECK(ft_gguf_writer_add_tensor(w2, name, x->type, x->n_dims, x->ne, x->data) == 0);
        }
        void *b2;
        size_t n2;
        CHECK(ft_gguf_writer_to_buffer(w2, &b2, &n2) == 0);
        CHECK(n2 == n && memcmp(b2, buf, n) == 0);
        free(b2);
        ft_gguf_writer_free(w2);
    }

    check_truncations(buf, n, "full");
    if (py_buf)
        check_truncations(py_buf, pn, "pyfixture");

    /* Default alignment, no python keys. */
    {
        uint8_t *d2[N_TENSORS];
        struct ft_gguf_writer *w3 = build_full(NULL, d2, 0);
        void *b3;
        size_t n3;
        CHECK(ft_gguf_writer_to_buffer(w3, &b3, &n3) == 0);
        struct ft_gguf *g3 = NULL;
        CHECK(ft_gguf_open_buffer(b3, n3, "d.gguf", &g3) == 0);
        if (g3) {
            check_full(g3, false, 0);
            CHECK(ft_gguf_find_key(g3, "general.alignment") < 0);
        }
        ft_gguf_close(g3);
        free(b3);
        ft_gguf_writer_free(w3);
        free_datas(d2);
    }

    /* Writer semantics: remove keeps the order of the rest. */
    CHECK(ft_gguf_writer_remove_key(w, "a.i32") == 0);
    CHECK(ft_gguf_writer_remove_key(w, "a.i32") == FT_ENOENT);
    void *b4;
    size_t n4;
    CHECK(ft_gguf_writer_to_buffer(w, &b4, &n4) == 0);
    struct ft_gguf *g4 = NULL;
    CHECK(ft_gguf_open_buffer(b4, n4, "r.gguf", &g4) == 0);
    if (g4) {
        CHECK(ft_gguf_find_key(g4, "a.i32") < 0);
        CHECK(str_eq(ft_gguf_kv_key(g4, 1), "a.u32") && str_eq(ft_gguf_kv_key(g4, 2), "a.u64"));
        CHECK_EQ_INT(ft_gguf_n_kv(g4), ft_gguf_n_kv(g) - 1);
    }
    ft_gguf_close(g4);
    free(b4);

    /* Writer argument checks. */
    cap_reset();
    int64_t ne_bad[2] = {33, 1};
    CHECK(ft_gguf_writer_add_tensor(w, "x", FT_TYPE_Q4_0, 2, ne_bad, datas[0]) == FT_EINVAL);
    CHECK(ft_gguf_writer_add_tensor(w, "f16", FT_TYPE_F16, 1, g_tensors[1].ne, datas[1]) == FT_EINVAL);
    CHECK(ft_gguf_writer_add_tensor(w, "y", (enum ft_type)4, 1, g_tensors[1].ne, datas[1]) == FT_EINVAL);
    CHECK(ft_gguf_writer_add_tensor(w, "y", FT_TYPE_F32, 5, g_tensors[1].ne, datas[1]) == FT_EINVAL);
    CHECK(ft_gguf_writer_add_tensor(w, "", FT_TYPE_F32, 1, g_tensors[1].ne, datas[1]) == FT_EINVAL);
    int64_t ne_neg[1] = {-4};
    CHECK(ft_gguf_writer_add_tensor(w, "y", FT_TYPE_F32, 1, ne_neg, datas[1]) == FT_EINVAL);
    int64_t ne_big[4] = {1ll << 40, 1ll << 40, 1, 1};
    CHECK(ft_gguf_writer_add_tensor(w, "y", FT_TYPE_F32, 4, ne_big, datas[1]) == FT_EINVAL);
    CHECK(ft_gguf_writer_set_u32(w, "", 1) == FT_EINVAL);
    CHECK(ft_gguf_writer_set_arr(w, "k", FT_GGUF_STRING, "x", 1) == FT_EINVAL);
    CHECK(ft_gguf_writer_set_arr(w, "k", FT_GGUF_UINT64, NULL, UINT64_MAX / 2) == FT_EINVAL);
    CHECK(ft_gguf_writer_copy_kv(w, g, -1) == FT_EINVAL);
    CHECK(ft_gguf_writer_copy_kv(w, g, ft_gguf_n_kv(g)) == FT_EINVAL);
    CHECK_EQ_INT(cap.n_err, 12);
    cap_reset();

    /* A wrong general.alignment or a bad set_alignment makes writing fail
     * and leaves nothing behind. */
    char path2[256];
    snprintf(path2, sizeof(path2), "%s/bad.gguf", dir);
    CHECK(ft_gguf_writer_set_str(w, "general.alignment", "64") == 0);
    CHECK(ft_gguf_writer_write(w, path2) == FT_EINVAL);
    CHECK(ft_gguf_writer_set_u32(w, "general.alignment", 48) == 0);
    CHECK(ft_gguf_writer_to_buffer(w, &b4, &n4) == FT_EINVAL);
    ft_gguf_writer_set_alignment(w, 64);
    CHECK(ft_gguf_writer_to_buffer(w, &b4, &n4) == 0);
    free(b4);
    ft_gguf_writer_set_alignment(w, 3);
    CHECK(ft_gguf_writer_write(w, path2) == FT_EINVAL);
    CHECK(access(path2, F_OK) != 0);

    /* A write that fails midway (file size limit) leaves nothing behind,
     * and does not replace an existing file. */
    uint8_t *d5[N_TENSORS];
    struct ft_gguf_writer *w5 = build_full(NULL, d5, 0);
    {
        struct rlimit old, lim;
        getrlimit(RLIMIT_FSIZE, &old);
        lim = old;
        lim.rlim_cur = 1000;
        void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
        CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
        cap_reset();
        CHECK(ft_gguf_writer_write(w5, path2) == FT_EIO);
        CHECK(ft_gguf_writer_write(w5, path) == FT_EIO); /* path exists: must stay intact */
        setrlimit(RLIMIT_FSIZE, &old);
        signal(SIGXFSZ, prev);
        CHECK_EQ_INT(cap.n_err, 2);
        CHECK(access(path2, F_OK) != 0);
        size_t keep_n;
        char *keep = ft_test_read_file(path, &keep_n);
        CHECK(keep && keep_n == n && memcmp(keep, buf, n) == 0);
        free(keep);
    }
    snprintf(path2, sizeof(path2), "%s/no/such/dir.gguf", dir);
    CHECK(ft_gguf_writer_write(w5, path2) == FT_EIO);
    ft_gguf_writer_free(w5);
    free_datas(d5);

    /* Nothing but full.gguf in the directory: no temporary files left. */
    DIR *dd = opendir(dir);
    int entries = 0;
    for (struct dirent *e; dd && (e = readdir(dd));) {
        if (e->d_name[0] == '.')
            continue;
        entries++;
        CHECKF(strcmp(e->d_name, "full.gguf") == 0, "left behind: %s", e->d_name);
    }
    if (dd)
        closedir(dd);
    CHECK_EQ_INT(entries, 1);

    /* ft_gguf_open errors. */
    cap_reset();
    struct ft_gguf *ge = NULL;
    CHECK(ft_gguf_open("/nonexistent/x.gguf", &ge) == FT_EIO && ge == NULL);
    CHECKF(strstr(cap.last, "/nonexistent/x.gguf") && strstr(cap.last, "No such file"), "%s", cap.last);
    CHECK(ft_gguf_open(dir, &ge) == FT_EIO);
    CHECKF(strstr(cap.last, "not a regular file"), "%s", cap.last);
    snprintf(path2, sizeof(path2), "%s/empty.gguf", dir);
    FILE *ef = fopen(path2, "wb");
    if (ef)
        fclose(ef);
    CHECK(ft_gguf_open(path2, &ge) == FT_EFORMAT);
    CHECKF(strstr(cap.last, "empty.gguf: truncated header"), "%s", cap.last);
    CHECK_EQ_INT(cap.n_err, 3);
    unlink(path2);
    unlink(path);
    rmdir(dir);

    ft_gguf_close(g);
    free(buf);
    ft_gguf_writer_free(w);
    free_datas(datas);
    ft_gguf_close(py);
    free(py_buf);
}

/* ---- hand-made malformed files -------------------------------------------- */

static void test_malformed(void) {
    struct bb b = {0};
    const uint64_t ne1[1] = {8};

    EXPECT_BAD("", 0, "truncated header: the file is 0 bytes");
    EXPECT_BAD("GGU", 3, "truncated header");
    bb_hdr(&b, 3, 0, 0);
    memcpy(b.p, "GGML", 4);
    EXPECT_BAD(b.p, b.n, "not a GGUF file (magic 'GGML'");
    memcpy(b.p, "\n\x01GU", 4);
    EXPECT_BAD(b.p, b.n, "magic '\\x0a\\x01GU'");
    bb_hdr(&b, 1, 0, 0);
    EXPECT_BAD(b.p, b.n, "GGUF version 1 is not supported");
    bb_hdr(&b, 4, 0, 0);
    EXPECT_BAD(b.p, b.n, "unsupported GGUF version 4");
    bb_hdr(&b, 0, 0, 0);
    EXPECT_BAD(b.p, b.n, "unsupported GGUF version 0");
    bb_hdr(&b, 0x03000000, 0, 0);
    EXPECT_BAD(b.p, b.n, "byte-swapped");
    bb_hdr(&b, 3, 0, 0);
    EXPECT_BAD(b.p, 12, "truncated in the header: the tensor count needs 8 bytes, 4 remain");
    EXPECT_BAD(b.p, 20, "truncated in the header: the key/value count needs 8 bytes, 4 remain");

    /* Minimal valid files. */
    struct ft_gguf *g = NULL;
    bb_hdr(&b, 3, 0, 0);
    CHECK(open_copy(b.p, b.n, "min.gguf", &g) == 0);
    if (g) {
        CHECK_EQ_INT(ft_gguf_data_offset(g), 24);
        CHECK_EQ_INT(ft_gguf_n_kv(g), 0);
        CHECK(ft_gguf_find_key(g, "x") == -1 && ft_gguf_find_tensor(g, "x") == NULL);
    }
    ft_gguf_close(g);
    g = NULL;
    bb_hdr(&b, 2, 0, 1);
    bb_kv_u32(&b, "k", 5);
    CHECK(open_copy(b.p, b.n, "min2.gguf", &g) == 0); /* no tensors, unpadded end */
    if (g)
        CHECK_EQ_INT(ft_gguf_data_offset(g), b.n);
    ft_gguf_close(g);
    g = NULL;

    /* Counts. */
    bb_hdr(&b, 3, 0, UINT64_MAX);
    EXPECT_BAD(b.p, b.n, "18446744073709551615 keys cannot fit");
    bb_hdr(&b, 3, 1ull << 62, 0);
    EXPECT_BAD(b.p, b.n, "4611686018427387904 tensors cannot fit");
    bb_hdr(&b, 3, 1, 1);
    bb_zeros(&b, 40);
    EXPECT_BAD(b.p, b.n, "1 tensors and 1 keys cannot fit in the 40 bytes");
    bb_hdr(&b, 3, 0, 2);
    bb_kv_u32(&b, "k", 5);
    bb_zeros(&b, 14);
    EXPECT_BAD(b.p, b.n, "key #1: the key is 0 bytes long");

    /* Keys. */
    bb_hdr(&b, 3, 0, 1);
    bb_u64(&b, UINT64_MAX);
    bb_zeros(&b, 8);
    EXPECT_BAD(b.p, b.n, "truncated in key #0: the key of 18446744073709551615 bytes, 8 remain");
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "");
    bb_u32(&b, FT_GGUF_UINT8);
    bb_u32(&b, 0);
    EXPECT_BAD(b.p, b.n, "key #0: the key is 0 bytes long, must be 1..65536");
    bb_hdr(&b, 3, 0, 1);
    bb_strn(&b, "a\0b", 3);
    bb_u32(&b, FT_GGUF_UINT8);
    bb_u32(&b, 0);
    EXPECT_BAD(b.p, b.n, "key #0: the key 'a\\x00b' contains a NUL byte");
    {
        /* 65536 bytes is the longest key; one more is an error. */
        char *longkey = malloc(65537);
        memset(longkey, 'k', 65537);
        for (int extra = 0; extra < 2; extra++) {
            bb_hdr(&b, 3, 0, 1);
            bb_strn(&b, longkey, 65536 + (size_t)extra);
            bb_u32(&b, FT_GGUF_UINT8);
            bb_u32(&b, 0);
            if (extra) {
                EXPECT_BAD(b.p, b.n, "the key is 65537 bytes long");
            } else {
                CHECK(open_copy(b.p, b.n, "long.gguf", &g) == 0);
                ft_gguf_close(g);
                g = NULL;
            }
        }
        free(longkey);
    }
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, 13);
    bb_u32(&b, 0);
    EXPECT_BAD(b.p, b.n, "bad.gguf: key 'k': unknown value type 13");
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "a\nkey\x01");
    bb_u32(&b, 0xffffffffu);
    bb_u32(&b, 0);
    EXPECT_BAD(b.p, b.n, "key 'a\\x0akey\\x01': unknown value type 4294967295");
    bb_hdr(&b, 3, 0, 2);
    bb_kv_u32(&b, "dup", 1);
    bb_kv_u32(&b, "dup", 2);
    EXPECT_BAD(b.p, b.n, "duplicate key 'dup' (#0 and #1)");
    bb_hdr(&b, 3, 0, 4);
    bb_kv_u32(&b, "a", 1);
    bb_kv_u32(&b, "b", 1);
    bb_kv_u32(&b, "c", 1);
    bb_kv_u32(&b, "b", 2);
    EXPECT_BAD(b.p, b.n, "duplicate key 'b' (#1 and #3)");

    /* Values. */
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "s");
    bb_u32(&b, FT_GGUF_STRING);
    bb_u64(&b, 1000000);
    bb_zeros(&b, 4);
    EXPECT_BAD(b.p, b.n, "truncated in key #0 ('s'): string value of 1000000 bytes, 4 remain");
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "f");
    bb_u32(&b, FT_GGUF_FLOAT64);
    bb_zeros(&b, 2);
    EXPECT_BAD(b.p, b.n, "truncated in key #0 ('f'): a float64 value needs 8 bytes, 2 remain");
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "tokenizer.ggml.tokens");
    bb_u32(&b, FT_GGUF_ARRAY);
    bb_u32(&b, FT_GGUF_STRING);
    bb_u64(&b, 32000);
    bb_zeros(&b, 1200);
    EXPECT_BAD(b.p, b.n,
               "bad.gguf: truncated in key #0 ('tokenizer.ggml.tokens'): string array of 32000 elements needs at "
               "least 256000 bytes, 1200 remain");
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "a");
    bb_u32(&b, FT_GGUF_ARRAY);
    bb_u32(&b, FT_GGUF_UINT64);
    bb_u64(&b, UINT64_MAX);
    bb_zeros(&b, 16);
    EXPECT_BAD(b.p, b.n, "uint64 array of 18446744073709551615 elements needs more than 2^64 bytes, 16 remain");
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "a");
    bb_u32(&b, FT_GGUF_ARRAY);
    bb_u32(&b, FT_GGUF_FLOAT32);
    bb_u64(&b, 5);
    bb_zeros(&b, 16);
    EXPECT_BAD(b.p, b.n, "float32 array of 5 elements needs at least 20 bytes, 16 remain");
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "a");
    bb_u32(&b, FT_GGUF_ARRAY);
    bb_u32(&b, 99);
    bb_u64(&b, 0);
    EXPECT_BAD(b.p, b.n, "key 'a': unknown array element type 99");
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "a");
    bb_u32(&b, FT_GGUF_ARRAY);
    bb_u32(&b, FT_GGUF_STRING);
    bb_u64(&b, 2);
    bb_str(&b, "x");
    bb_u64(&b, 100);
    EXPECT_BAD(b.p, b.n, "truncated in key #0 ('a'): a string array element of 100 bytes, 0 remain");
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "a");
    bb_u32(&b, FT_GGUF_ARRAY);
    bb_u32(&b, FT_GGUF_ARRAY);
    bb_u64(&b, 1);
    bb_u32(&b, FT_GGUF_ARRAY);
    bb_u64(&b, 1);
    bb_u32(&b, 77);
    bb_u64(&b, 0);
    EXPECT_BAD(b.p, b.n, "key 'a': unknown array element type 77");
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "a");
    bb_u32(&b, FT_GGUF_ARRAY);
    bb_u32(&b, FT_GGUF_ARRAY);
    bb_u64(&b, 1000);
    bb_zeros(&b, 100);
    EXPECT_BAD(b.p, b.n, "nested array of 1000 elements needs at least 12000 bytes, 100 remain");
    /* Nesting: 8 levels are fine, 9 are not. */
    for (int depth = 8; depth <= 9; depth++) {
        bb_hdr(&b, 3, 0, 1);
        bb_str(&b, "deep");
        bb_u32(&b, FT_GGUF_ARRAY);
        for (int k = 1; k < depth; k++) {
            bb_u32(&b, FT_GGUF_ARRAY);
            bb_u64(&b, 1);
        }
        bb_u32(&b, FT_GGUF_UINT8);
        bb_u64(&b, 1);
        bb_u32(&b, 0); /* the uint8 + padding to keep the minimum sizes */
        if (depth == 9) {
            EXPECT_BAD(b.p, b.n, "key 'deep': arrays nested more than 8 deep");
        } else {
            CHECK(open_copy(b.p, b.n, "deep.gguf", &g) == 0);
            if (g)
                CHECK(ft_gguf_kv_arr_type(g, 0) == FT_GGUF_ARRAY && ft_gguf_kv_arr_n(g, 0) == 1);
            ft_gguf_close(g);
            g = NULL;
        }
    }
    /* A bool value of 7 reads as true. */
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "b");
    bb_u32(&b, FT_GGUF_BOOL);
    bb_put(&b, "\x07", 1);
    bb_zeros(&b, 3);
    CHECK(open_copy(b.p, b.n, "bool.gguf", &g) == 0);
    if (g) {
        bool v = false;
        CHECK(ft_gguf_get_bool(g, "b", &v) == 0 && v);
    }
    ft_gguf_close(g);
    g = NULL;

    /* Alignment. */
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, FT_GGUF_STRING);
    bb_str(&b, "32");
    EXPECT_BAD(b.p, b.n, "bad.gguf: key 'general.alignment': expected uint32, got string");
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, FT_GGUF_UINT64);
    bb_u64(&b, 32);
    EXPECT_BAD(b.p, b.n, "key 'general.alignment': expected uint32, got uint64");
    static const uint32_t bad_align[] = {0, 3, 48, 0xffffffffu};
    for (size_t i = 0; i < FT_ARRAY_LEN(bad_align); i++) {
        bb_hdr(&b, 3, 0, 1);
        bb_kv_u32(&b, "general.alignment", bad_align[i]);
        EXPECT_BAD(b.p, b.n, "is not a nonzero power of two");
    }
    /* alignment 2^31 with a tensor: the data section cannot start in the file */
    bb_hdr(&b, 3, 1, 1);
    bb_kv_u32(&b, "general.alignment", 0x80000000u);
    bb_tinfo(&b, "w", 1, ne1, FT_TYPE_F32, 0);
    bb_zeros(&b, 64);
    EXPECT_BAD(b.p, b.n, "the tensor data section would start at byte 2147483648, past the end of the file");
    bb_hdr(&b, 3, 1, 1);
    bb_kv_u32(&b, "general.alignment", 1);
    bb_tinfo(&b, "w", 1, ne1, FT_TYPE_F32, 3);
    bb_zeros(&b, 35);
    CHECK(open_copy(b.p, b.n, "a1.gguf", &g) == 0); /* alignment 1: any offset */
    if (g)
        CHECK(ft_gguf_tensor(g, 0)->data == (const uint8_t *)b.p + b.n - 32);
    ft_gguf_close(g);
    g = NULL;

/* A file with one tensor info and enough data; `...` writes the info. */
#define TENSOR_FILE(datasize, ...)            \
    do {                                      \
        bb_hdr(&b, 3, 1, 0);                  \
        __VA_ARGS__;                          \
        bb_pad(&b, 32);                       \
        bb_zeros(&b, datasize);               \
    } while (0)

    TENSOR_FILE(32, bb_tinfo(&b, "w", 1, ne1, FT_TYPE_F32, 0));
    CHECK(open_copy(b.p, b.n, "ok.gguf", &g) == 0);
    ft_gguf_close(g);
    g = NULL;
    TENSOR_FILE(32, bb_tinfo(&b, "w", 0, ne1, FT_TYPE_F32, 0));
    EXPECT_BAD(b.p, b.n, "tensor 'w': n_dims is 0, must be 1..4");
    {
        const uint64_t ne5[5] = {1, 1, 1, 1, 1};
        TENSOR_FILE(32, bb_tinfo(&b, "w", 5, ne5, FT_TYPE_F32, 0));
        EXPECT_BAD(b.p, b.n, "tensor 'w': n_dims is 5, must be 1..4");
        const uint64_t neg[2] = {8, 1ull << 63};
        TENSOR_FILE(32, bb_tinfo(&b, "w", 2, neg, FT_TYPE_F32, 0));
        EXPECT_BAD(b.p, b.n, "tensor 'w': dimension 1 is 9223372036854775808 (above INT64_MAX)");
        const uint64_t big[4] = {1ull << 32, 1ull << 32, 1, 1};
        TENSOR_FILE(32, bb_tinfo(&b, "w", 4, big, FT_TYPE_F32, 0));
        EXPECT_BAD(b.p, b.n, "tensor 'w': shape 4294967296 x 4294967296 x 1 x 1 has more than INT64_MAX elements");
        const uint64_t big2[2] = {1ull << 31, 1ull << 31};
        TENSOR_FILE(32, bb_tinfo(&b, "w", 2, big2, FT_TYPE_F32, 0));
        EXPECT_BAD(b.p, b.n, "of type F32 needs more than SIZE_MAX bytes");
        const uint64_t q[2] = {33, 2};
        TENSOR_FILE(32, bb_tinfo(&b, "blk.0.ffn", 2, q, FT_TYPE_Q4_0, 0));
        EXPECT_BAD(b.p, b.n, "tensor 'blk.0.ffn': row length 33 is not a multiple of the Q4_0 block size 32");
        const uint64_t qk[1] = {128};
        TENSOR_FILE(256, bb_tinfo(&b, "w", 1, qk, FT_TYPE_Q4_K, 0));
        EXPECT_BAD(b.p, b.n, "row length 128 is not a multiple of the Q4_K block size 256");
        const uint64_t zero[2] = {0, 4};
        TENSOR_FILE(0, bb_tinfo(&b, "z", 2, zero, FT_TYPE_Q4_K, 0));
        CHECK(open_copy(b.p, b.n, "zero.gguf", &g) == 0); /* empty tensors are fine */
        if (g)
            CHECK(ft_gguf_tensor(g, 0)->size == 0);
        ft_gguf_close(g);
        g = NULL;
    }
    static const uint32_t bad_types[] = {4, 5, 31, 36, 40, 1000, 0xffffffffu};
    for (size_t i = 0; i < FT_ARRAY_LEN(bad_types); i++) {
        TENSOR_FILE(64, bb_tinfo(&b, "w", 1, ne1, bad_types[i], 0));
        char want[64];
        snprintf(want, sizeof(want), "tensor 'w': unknown tensor type id %u", bad_types[i]);
        EXPECT_BAD(b.p, b.n, want);
    }
    TENSOR_FILE(64, bb_tinfo(&b, "w", 1, ne1, FT_TYPE_F32, 4));
    EXPECT_BAD(b.p, b.n, "tensor 'w': data offset 4 is not a multiple of the alignment 32");
    TENSOR_FILE(64, bb_tinfo(&b, "w", 1, ne1, FT_TYPE_F32, 96));
    EXPECT_BAD(b.p, b.n, "tensor 'w': data offset 96 is past the end of the data section (64 bytes at byte 64, file size 128)");
    TENSOR_FILE(64, bb_tinfo(&b, "w", 1, ne1, FT_TYPE_F32, 0xffffffffffffffe0ull));
    EXPECT_BAD(b.p, b.n, "tensor 'w': data offset 18446744073709551584 is past the end of the data section");
    {
        const uint64_t ne_q[2] = {256, 1};
        /* header 24 + info (8+19+4+16+4+8 = 59) = 83 -> data at 96; Q4_K
         * row of 144 bytes at offset 672 ends at 912 > 800. */
        bb_hdr(&b, 3, 1, 0);
        bb_tinfo(&b, "blk.3.attn_q.weight", 2, ne_q, FT_TYPE_Q4_K, 672);
        bb_pad(&b, 32);
        bb_zeros(&b, 800 - b.n);
        EXPECT_BAD(b.p, b.n, "bad.gguf: tensor 'blk.3.attn_q.weight': data ends at byte 912 past the end of the file (size 800)");
    }
    TENSOR_FILE(31, bb_tinfo(&b, "w", 1, ne1, FT_TYPE_F32, 0));
    EXPECT_BAD(b.p, b.n, "tensor 'w': data ends at byte 96 past the end of the file (size 95)");
    TENSOR_FILE(64, bb_tinfo(&b, "", 1, ne1, FT_TYPE_F32, 0));
    EXPECT_BAD(b.p, b.n, "tensor info #0: the tensor name is 0 bytes long");
    bb_hdr(&b, 3, 2, 0);
    bb_tinfo(&b, "w", 1, ne1, FT_TYPE_F32, 0);
    bb_tinfo(&b, "w", 1, ne1, FT_TYPE_F32, 32);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    EXPECT_BAD(b.p, b.n, "duplicate tensor name 'w' (#0 and #1)");
    bb_hdr(&b, 3, 2, 0);
    bb_tinfo(&b, "w", 1, ne1, FT_TYPE_F32, 0);
    bb_tinfo(&b, "v", 1, ne1, FT_TYPE_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 32);
    EXPECT_BAD(b.p, b.n, "tensor 'v': data at offset 0 overlaps tensor 'w' (offset 0, 32 bytes)");
    {
        /* out of order, adjacent, and empty tensors anywhere: fine */
        const uint64_t ne48[1] = {48}, ne0z[1] = {0};
        bb_hdr(&b, 3, 4, 0);
        bb_tinfo(&b, "c", 1, ne1, FT_TYPE_F32, 64);
        bb_tinfo(&b, "a", 1, ne1, FT_TYPE_F32, 0);
        bb_tinfo(&b, "e", 1, ne0z, FT_TYPE_F32, 32);
        bb_tinfo(&b, "b", 1, ne1, FT_TYPE_F32, 32);
        bb_pad(&b, 32);
        bb_zeros(&b, 96);
        CHECK(open_copy(b.p, b.n, "order.gguf", &g) == 0);
        ft_gguf_close(g);
        g = NULL;
        bb_hdr(&b, 3, 2, 0);
        bb_tinfo(&b, "big", 1, ne48, FT_TYPE_F32, 0); /* 192 bytes */
        bb_tinfo(&b, "small", 1, ne1, FT_TYPE_F32, 160);
        bb_pad(&b, 32);
        bb_zeros(&b, 192);
        EXPECT_BAD(b.p, b.n, "tensor 'small': data at offset 160 overlaps tensor 'big' (offset 0, 192 bytes)");
    }
    /* Tensor infos end exactly at the end of an unpadded file. */
    bb_hdr(&b, 3, 1, 0);
    const uint64_t ne0[1] = {0};
    bb_tinfo(&b, "w", 1, ne0, FT_TYPE_F32, 0);
    EXPECT_BAD(b.p, b.n, "the tensor data section would start at byte 64, past the end of the file (size 57)");
    bb_hdr(&b, 3, 1, 0);
    const uint64_t ne2[2] = {8, 1};
    bb_tinfo(&b, "w", 2, ne2, FT_TYPE_F32, 0);
    EXPECT_BAD(b.p, b.n - 3, "truncated in tensor info #0 ('w'): the tensor data offset needs 8 bytes, 5 remain");
#undef TENSOR_FILE
    free(b.p);
}

/* ---- allocation failures -------------------------------------------------- */

static void test_alloc_failures(void) {
    /* A file big enough for several arena chunks: 20000 strings. */
    struct ft_gguf_writer *w = ft_gguf_writer_new();
    struct ft_str *strs = malloc(20000 * sizeof(*strs));
    for (int i = 0; i < 20000; i++)
        strs[i] = (struct ft_str){"tok", 3};
    CHECK(ft_gguf_writer_set_arr_str(w, "tokens", strs, 20000) == 0);
    float *sc = calloc(20000, sizeof(float));
    CHECK(ft_gguf_writer_set_arr(w, "scores", FT_GGUF_FLOAT32, sc, 20000) == 0);
    CHECK(ft_gguf_writer_set_arr(w, "scores2", FT_GGUF_FLOAT32, sc, 20000) == 0);
    int64_t ne[2] = {32, 4};
    CHECK(ft_gguf_writer_add_tensor(w, "w", FT_TYPE_F32, 2, ne, sc) == 0);
    void *buf;
    size_t n;
    CHECK(ft_gguf_writer_to_buffer(w, &buf, &n) == 0);
    int fails = 0;
    for (long k = 0; k < 100; k++) {
        struct ft_gguf *g = NULL;
        cap_reset();
        gg_alloc_countdown = k;
        int rc = ft_gguf_open_buffer(buf, n, "oom.gguf", &g);
        gg_alloc_countdown = -1;
        if (rc == 0) {
            CHECK(g != NULL && ft_gguf_n_kv(g) == 3);
            ft_gguf_close(g);
            break;
        }
        fails++;
        CHECKF(rc == FT_ENOMEM && g == NULL, "alloc %ld: rc %d", k, rc);
        CHECKF(cap.n_err == 1 && strstr(cap.last, "oom.gguf: out of memory"), "alloc %ld: %s", k, cap.last);
    }
    CHECKF(fails >= 4, "only %d allocations seen", fails);
    free(buf);
    free(sc);
    free(strs);
    ft_gguf_writer_free(w);
}

/* ---- the accessors on NULL / out of range ---------------------------------- */

static void test_edges(void) {
    CHECK(ft_gguf_n_kv(NULL) == 0 && ft_gguf_n_tensors(NULL) == 0);
    CHECK(ft_gguf_find_key(NULL, "x") == -1);
    CHECK(ft_gguf_kv_key(NULL, 0).len == 0);
    CHECK(ft_gguf_kv_type(NULL, 0) == FT_GGUF_VTYPE_COUNT);
    size_t sz = 1;
    CHECK(ft_gguf_kv_raw(NULL, 0, &sz) == NULL && sz == 0);
    CHECK(ft_gguf_tensor(NULL, 0) == NULL && ft_gguf_find_tensor(NULL, "x") == NULL);
    ft_gguf_close(NULL);
    ft_gguf_writer_free(NULL);
    CHECK(strcmp(ft_gguf_vtype_name(FT_GGUF_FLOAT64), "float64") == 0);
    CHECK(strcmp(ft_gguf_vtype_name((enum ft_gguf_vtype)99), "?") == 0);
    CHECK(ft_gguf_vtype_size(FT_GGUF_UINT16) == 2 && ft_gguf_vtype_size(FT_GGUF_STRING) == 0);
    cap_reset();
    struct ft_gguf *g = (struct ft_gguf *)1;
    CHECK(ft_gguf_open_buffer(NULL, 5, "x", &g) == FT_EINVAL);
    CHECK(ft_gguf_open(NULL, &g) == FT_EINVAL);
    CHECK_EQ_INT(cap.n_err, 2);
}

/* ---- real files --------------------------------------------------------------- */

static int check_dir(const char *dir, bool models) {
    DIR *d = opendir(dir);
    if (!d) {
        printf("SKIP part: %s is absent\n", dir);
        return 0;
    }
    int count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".gguf") != 0)
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        struct ft_gguf *g = NULL;
        cap_reset();
        int rc = ft_gguf_open(path, &g);
        CHECKF(rc == 0, "%s: %s", path, cap.last);
        if (!g)
            continue;
        count++;
        struct ft_str arch;
        CHECKF(ft_gguf_get_str(g, "general.architecture", &arch) == 0, "%s: no general.architecture", path);
        CHECK((ft_gguf_alignment(g) & (ft_gguf_alignment(g) - 1)) == 0);
        if (models) {
            CHECKF(ft_gguf_n_tensors(g) > 0, "%s", path);
            CHECKF(ft_gguf_find_tensor(g, "token_embd.weight") != NULL, "%s", path);
        }
        uint64_t end = ft_gguf_data_offset(g);
        for (int64_t i = 0; i < ft_gguf_n_tensors(g); i++) {
            const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
            CHECK(t->n_dims >= 1 && t->n_dims <= 4);
            for (int k = 0; k < 4; k++)
                CHECK(t->ne[k] >= 1 && (k < t->n_dims || t->ne[k] == 1));
            CHECK(t->size == ft_row_size(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]));
            CHECK(t->size > 0);
            end = FT_MAX(end, ft_gguf_data_offset(g) + t->offset + t->size);
        }
        CHECK(end <= ft_gguf_file_size(g));
        const struct ft_str *toks;
        uint64_t n_tok;
        if (ft_gguf_get_arr_str(g, "tokenizer.ggml.tokens", &toks, &n_tok) == 0)
            CHECKF(n_tok > 1000, "%s: %llu tokens", path, (unsigned long long)n_tok);
        ft_gguf_close(g);
    }
    closedir(d);
    return count;
}

static void test_shared(void) {
    const char *sd = ft_test_shared_dir();
    if (!sd) {
        printf("SKIP part: FT_SHARED_DIR/models is absent, real GGUF files not checked\n");
        return;
    }
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/models", sd);
    int nm = check_dir(dir, true);
    snprintf(dir, sizeof(dir), "%s/vocab", sd);
    int nv = check_dir(dir, false);
    printf("checked %d model and %d vocab GGUF files\n", nm, nv);
    CHECK(nm > 0);
}

/* ---- fuzz seeds ------------------------------------------------------------ */

static void write_seed(const char *dir, const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECKF(f != NULL, "cannot write %s", path);
    if (f) {
        fwrite(p, 1, n, f);
        fclose(f);
    }
}

static void write_seeds(const char *dir) {
    size_t pn;
    uint8_t *py = load_pyfixture(&pn);
    if (py)
        write_seed(dir, "pyfixture.gguf", py, pn);
    struct ft_gguf *pg = NULL;
    if (py)
        ft_gguf_open_buffer(py, pn, "py", &pg);
    uint8_t *datas[N_TENSORS];
    struct ft_gguf_writer *w = build_full(pg, datas, 64);
    void *buf;
    size_t n;
    if (ft_gguf_writer_to_buffer(w, &buf, &n) == 0) {
        write_seed(dir, "full.gguf", buf, n);
        free(buf);
    }
    ft_gguf_writer_free(w);
    free_datas(datas);
    ft_gguf_close(pg);
    free(py);

    struct bb b = {0};
    bb_hdr(&b, 3, 0, 0);
    write_seed(dir, "empty.gguf", b.p, b.n);
    bb_hdr(&b, 2, 2, 2);
    bb_kv_u32(&b, "general.alignment", 16);
    bb_str(&b, "n");
    bb_u32(&b, FT_GGUF_ARRAY);
    bb_u32(&b, FT_GGUF_ARRAY);
    bb_u64(&b, 2);
    bb_u32(&b, FT_GGUF_STRING);
    bb_u64(&b, 1);
    bb_str(&b, "xy");
    bb_u32(&b, FT_GGUF_UINT16);
    bb_u64(&b, 2);
    bb_u32(&b, 0x00050004);
    const uint64_t ne_a[2] = {32, 1}, ne_b[1] = {2};
    bb_tinfo(&b, "q", 2, ne_a, FT_TYPE_Q8_0, 0);
    bb_tinfo(&b, "h", 1, ne_b, FT_TYPE_F16, 48);
    bb_pad(&b, 16);
    bb_zeros(&b, 52);
    write_seed(dir, "v2_nested.gguf", b.p, b.n);
    free(b.p);
}

int main(void) {
    ft_log_set_sink(cap_sink, NULL);
    const char *seeds = getenv("FT_GGUF_WRITE_SEEDS");
    if (seeds && *seeds) {
        write_seeds(seeds);
        return ft_test_finish("test_gguf (seeds)");
    }
    test_edges();
    test_pyfixture();
    test_full();
    test_malformed();
    test_alloc_failures();
    test_shared();
    ft_log_set_sink(NULL, NULL);
    return ft_test_finish("test_gguf");
}
