/* GGUF writer: tensors whose bytes come from a fill callback
 * (ft_gguf_writer_add_tensor_fill) must serialize to exactly the bytes the
 * same data gives as a borrowed buffer, in files and in memory, across
 * several chunks; a failing callback must abort the write and leave no file. */
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft_test.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

/* 1100 rows of 1024 F32: 4.3 MiB, so more than one FT_GGUF_FILL_CHUNK. */
#define ROWS 1100
#define COLS 1024

struct fill_state {
    const float *src;
    int64_t next_row; /* rows must come in order, without gaps */
    int calls;
    int fail_at_call; /* 0 = never */
    int order_ok;
};

static int fill_rows(void *ud, int64_t row0, int64_t n_rows, void *dst) {
    struct fill_state *st = ud;
    st->calls++;
    if (row0 != st->next_row || n_rows <= 0 || (size_t)n_rows * COLS * sizeof(float) > FT_GGUF_FILL_CHUNK)
        st->order_ok = 0;
    st->next_row = row0 + n_rows;
    if (st->fail_at_call && st->calls == st->fail_at_call) {
        FT_LOG_E("injected failure at row %lld", (long long)row0);
        return FT_EIO;
    }
    memcpy(dst, st->src + row0 * COLS, (size_t)n_rows * COLS * sizeof(float));
    return 0;
}

static struct ft_gguf_writer *make_writer(const float *big, const uint16_t *small, bool use_fill,
                                          struct fill_state *st) {
    struct ft_gguf_writer *w = ft_gguf_writer_new();
    CHECK(ft_gguf_writer_set_str(w, "general.architecture", "test") == 0);
    const int64_t ne_small[2] = {64, 3};
    const int64_t ne_big[2] = {COLS, ROWS};
    CHECK(ft_gguf_writer_add_tensor(w, "small", FT_TYPE_F16, 2, ne_small, small) == 0);
    if (use_fill)
        CHECK(ft_gguf_writer_add_tensor_fill(w, "big", FT_TYPE_F32, 2, ne_big, fill_rows, st) == 0);
    else
        CHECK(ft_gguf_writer_add_tensor(w, "big", FT_TYPE_F32, 2, ne_big, big) == 0);
    CHECK(ft_gguf_writer_add_tensor(w, "after", FT_TYPE_F16, 2, ne_small, small) == 0);
    return w;
}

int main(void) {
    float *big = malloc(sizeof(float) * ROWS * COLS);
    uint16_t small[64 * 3];
    for (int64_t i = 0; i < (int64_t)ROWS * COLS; i++)
        big[i] = (float)(i % 977) * 0.25f - 100.0f;
    for (int i = 0; i < 64 * 3; i++)
        small[i] = ft_fp32_to_fp16((float)i);

    /* In memory: fill and borrowed data give identical bytes. */
    struct fill_state st = {.src = big, .order_ok = 1};
    struct ft_gguf_writer *wf = make_writer(big, small, true, &st);
    struct ft_gguf_writer *wb = make_writer(big, small, false, NULL);
    void *bf = NULL, *bb = NULL;
    size_t nf = 0, nb = 0;
    CHECK(ft_gguf_writer_to_buffer(wf, &bf, &nf) == 0);
    CHECK(ft_gguf_writer_to_buffer(wb, &bb, &nb) == 0);
    CHECK(nf == nb && nf > (size_t)ROWS * COLS * 4);
    CHECK(bf && bb && memcmp(bf, bb, nb) == 0);
    CHECK(st.order_ok && st.next_row == ROWS);
    CHECKF(st.calls >= 2, "%d chunks", st.calls);

    /* In a file: same bytes again, read back through the reader. */
    char dir[] = "/tmp/ft_gguf_fill_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], path2[256];
    snprintf(path, sizeof(path), "%s/fill.gguf", dir);
    snprintf(path2, sizeof(path2), "%s/fail.gguf", dir);
    st = (struct fill_state){.src = big, .order_ok = 1};
    CHECK(ft_gguf_writer_write(wf, path) == 0);
    CHECK(st.order_ok && st.next_row == ROWS);
    size_t n_file = 0;
    char *file = ft_test_read_file(path, &n_file);
    CHECK(file && n_file == nb && memcmp(file, bb, nb) == 0);
    free(file);
    struct ft_gguf *g = NULL;
    CHECK(ft_gguf_open(path, &g) == 0);
    const struct ft_gguf_tensor *t = g ? ft_gguf_find_tensor(g, "big") : NULL;
    CHECK(t && t->type == FT_TYPE_F32 && t->ne[0] == COLS && t->ne[1] == ROWS);
    CHECK(t && memcmp(t->data, big, sizeof(float) * ROWS * COLS) == 0);
    ft_gguf_close(g);

    /* A failing callback: its code comes back, nothing is left on disk, and
     * an existing file of the same name stays intact. */
    st = (struct fill_state){.src = big, .order_ok = 1, .fail_at_call = 2};
    CHECK(ft_gguf_writer_write(wf, path2) == FT_EIO);
    struct stat sb;
    CHECK(stat(path2, &sb) != 0);
    st = (struct fill_state){.src = big, .order_ok = 1, .fail_at_call = 1};
    CHECK(ft_gguf_writer_write(wf, path) == FT_EIO);
    CHECK(stat(path, &sb) == 0 && (size_t)sb.st_size == nb);
    st = (struct fill_state){.src = big, .order_ok = 1, .fail_at_call = 1};
    void *bx = NULL;
    size_t nx = 0;
    CHECK(ft_gguf_writer_to_buffer(wf, &bx, &nx) == FT_EIO);
    CHECK(bx == NULL);
    /* The directory holds only fill.gguf: no temporary files left behind. */
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "test $(ls -A %s | wc -l) -eq 1", dir);
    CHECK(system(cmd) == 0);

    /* Argument checks. */
    const int64_t ne[2] = {COLS, 2};
    CHECK(ft_gguf_writer_add_tensor_fill(wf, "nofill", FT_TYPE_F32, 2, ne, NULL, NULL) == FT_EINVAL);
    CHECK(ft_gguf_writer_add_tensor_fill(wf, "big", FT_TYPE_F32, 2, ne, fill_rows, &st) == FT_EINVAL);

    unlink(path);
    rmdir(dir);
    free(bf);
    free(bb);
    free(big);
    ft_gguf_writer_free(wf);
    ft_gguf_writer_free(wb);
    return ft_test_finish("test_gguf_fill");
}
