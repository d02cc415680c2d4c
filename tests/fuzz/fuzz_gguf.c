/* libFuzzer target for the GGUF reader (and, on what it accepts, the writer).
 *
 * Any input: ft_gguf_open_buffer() must either fail cleanly or return a
 * result whose every accessor is safe (ASan checks every tensor byte lies
 * inside the input). Whatever the reader accepts, copying it through the
 * writer must give a file the reader accepts again, with the same keys,
 * values and tensors: the writer and reader agree on the format.
 *
 * Seeds: tests/fuzz/corpus/gguf (run with tests/fuzz/run_fuzz.sh). They are
 * written by the unit test, so they follow the writer:
 *   FT_GGUF_WRITE_SEEDS=tests/fuzz/corpus/gguf build/tests/test_gguf
 */
#include "ft/common.h"
#include "ft/gguf.h"
#include "fuzz_common.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

FUZZ_QUIET_INITIALIZE()

static volatile uint64_t g_sink; /* keeps the reads from being optimized out */

static void touch(const void *p, size_t n) {
    const volatile uint8_t *b = p;
    if (n) {
        g_sink += b[0];
        g_sink += b[n - 1];
        g_sink += b[n / 2];
    }
}

/* Every tensor must lie inside the input [in, in + in_size). */
static void touch_all(const struct ft_gguf *g, const uint8_t *in, size_t in_size) {
    (void)ft_gguf_path(g);
    (void)ft_gguf_version(g);
    size_t fsize = ft_gguf_file_size(g), doff = ft_gguf_data_offset(g), al = ft_gguf_alignment(g);
    REQUIRE(al && (al & (al - 1)) == 0);
    REQUIRE(doff <= fsize);
    int64_t n_kv = ft_gguf_n_kv(g);
    for (int64_t i = -1; i <= n_kv; i++) {
        struct ft_str k = ft_gguf_kv_key(g, i);
        touch(k.s, k.len);
        enum ft_gguf_vtype t = ft_gguf_kv_type(g, i);
        (void)ft_gguf_vtype_name(t);
        (void)ft_gguf_vtype_size(t);
        (void)ft_gguf_kv_arr_type(g, i);
        (void)ft_gguf_kv_arr_n(g, i);
        size_t rn;
        const void *raw = ft_gguf_kv_raw(g, i, &rn);
        touch(raw, rn);
        if (i < 0 || i >= n_kv)
            continue;
        char key[128];
        if (k.len >= sizeof(key))
            continue;
        memcpy(key, k.s, k.len);
        key[k.len] = '\0';
        REQUIRE(ft_gguf_find_key(g, key) == i);
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        float f;
        bool b;
        struct ft_str s;
        (void)ft_gguf_get_u32(g, key, &u32);
        (void)ft_gguf_get_i32(g, key, &i32);
        (void)ft_gguf_get_u64(g, key, &u64);
        (void)ft_gguf_get_f32(g, key, &f);
        if (ft_gguf_get_bool(g, key, &b) == 0)
            g_sink += b;
        if (ft_gguf_get_str(g, key, &s) == 0)
            touch(s.s, s.len);
        enum ft_gguf_vtype et;
        const void *d;
        uint64_t n;
        if (ft_gguf_get_arr(g, key, &et, &d, &n) == 0) {
            touch(d, (size_t)n * ft_gguf_vtype_size(et));
            if (et == FT_GGUF_BOOL)
                for (uint64_t j = 0; j < n; j++)
                    g_sink += ((const bool *)d)[j]; /* UBSan: must be 0/1 */
        }
        const struct ft_str *strs;
        if (ft_gguf_get_arr_str(g, key, &strs, &n) == 0)
            for (uint64_t j = 0; j < n; j++)
                touch(strs[j].s, strs[j].len);
    }
    int64_t n_t = ft_gguf_n_tensors(g);
    for (int64_t i = -1; i <= n_t; i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
        if (!t)
            continue;
        touch(t->name.s, t->name.len);
        touch(t->data, t->size);
        REQUIRE(t->n_dims >= 1 && t->n_dims <= FT_GGUF_MAX_DIMS);
        REQUIRE((const uint8_t *)t->data >= in + doff && t->size <= in_size - (size_t)((const uint8_t *)t->data - in));
        REQUIRE(t->offset % al == 0);
        char name[128];
        if (t->name.len < sizeof(name)) {
            memcpy(name, t->name.s, t->name.len);
            name[t->name.len] = '\0';
            REQUIRE(ft_gguf_find_tensor(g, name) == t);
        }
    }
    (void)ft_gguf_find_key(g, "general.alignment");
    (void)ft_gguf_find_tensor(g, "token_embd.weight");
}

/* Copy g through the writer and check the copy reads back the same. */
static void round_trip(const struct ft_gguf *g) {
    struct ft_gguf_writer *w = ft_gguf_writer_new();
    REQUIRE(w);
    for (int64_t i = 0; i < ft_gguf_n_kv(g); i++)
        REQUIRE(ft_gguf_writer_copy_kv(w, g, i) == 0);
    char **names = calloc((size_t)ft_gguf_n_tensors(g) + 1, sizeof(char *));
    for (int64_t i = 0; i < ft_gguf_n_tensors(g); i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
        names[i] = malloc(t->name.len + 1);
        memcpy(names[i], t->name.s, t->name.len);
        names[i][t->name.len] = '\0';
        REQUIRE(ft_gguf_writer_add_tensor(w, names[i], t->type, t->n_dims, t->ne, t->data) == 0);
    }
    void *buf;
    size_t n;
    REQUIRE(ft_gguf_writer_to_buffer(w, &buf, &n) == 0);
    struct ft_gguf *h = NULL;
    REQUIRE(ft_gguf_open_buffer(buf, n, "copy", &h) == 0);
    REQUIRE(ft_gguf_n_kv(h) == ft_gguf_n_kv(g) && ft_gguf_n_tensors(h) == ft_gguf_n_tensors(g));
    REQUIRE(ft_gguf_alignment(h) == ft_gguf_alignment(g));
    for (int64_t i = 0; i < ft_gguf_n_kv(g); i++) {
        struct ft_str a = ft_gguf_kv_key(g, i), b = ft_gguf_kv_key(h, i);
        REQUIRE(a.len == b.len && memcmp(a.s, b.s, a.len) == 0);
        REQUIRE(ft_gguf_kv_type(g, i) == ft_gguf_kv_type(h, i));
        size_t ra, rb;
        const void *pa = ft_gguf_kv_raw(g, i, &ra), *pb = ft_gguf_kv_raw(h, i, &rb);
        REQUIRE(ra == rb && memcmp(pa, pb, ra) == 0);
    }
    for (int64_t i = 0; i < ft_gguf_n_tensors(g); i++) {
        const struct ft_gguf_tensor *a = ft_gguf_tensor(g, i), *b = ft_gguf_tensor(h, i);
        REQUIRE(a->type == b->type && a->n_dims == b->n_dims && a->size == b->size);
        REQUIRE(memcmp(a->ne, b->ne, sizeof(a->ne)) == 0);
        REQUIRE(a->size == 0 || memcmp(a->data, b->data, a->size) == 0);
        free(names[i]);
    }
    free(names);
    ft_gguf_close(h);
    free(buf);
    ft_gguf_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct ft_gguf *g = NULL;
    int rc = ft_gguf_open_buffer(data, size, "fuzz.gguf", &g);
    if (rc != 0) {
        REQUIRE(g == NULL);
        REQUIRE(rc == FT_EFORMAT || rc == FT_ENOMEM);
        return 0;
    }
    touch_all(g, data, size);
    /* The copy is at most about the input's size plus one alignment
     * (tensors do not overlap; a file without tensors is not padded). */
    if (ft_gguf_file_size(g) <= (1u << 20))
        round_trip(g);
    ft_gguf_close(g);
    return 0;
}
