/* Model loading errors: variants of a real model (../shared/models/
 * llama-F16.gguf) written with the GGUF writer, each with one thing wrong,
 * must fail with the documented code and a log line naming the culprit:
 *   unknown architecture, unrunnable tensor type -> FT_EUNSUPPORTED;
 *   missing tensor, wrong shape, missing required key -> FT_EFORMAT;
 * and the unmodified copy, and a copy without output.weight (tied head),
 * must load. */
#include "ft_test.h"

#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mutation {
    const char *what;
    const char *set_arch;     /* general.architecture override */
    const char *drop_key;     /* remove this key */
    const char *drop_tensor;  /* leave this tensor out */
    const char *swap_tensor;  /* write this tensor with ne[1] - 64 rows */
    const char *retype;       /* write this tensor as IQ2_XXS bytes */
    int want_rc;
    const char *want_text[2]; /* must appear in the error line */
};

static int write_variant(const struct ft_gguf *g, const struct mutation *mu, const char *path) {
    struct ft_gguf_writer *w = ft_gguf_writer_new();
    if (!w)
        return -1;
    int rc = 0;
    for (int64_t i = 0; i < ft_gguf_n_kv(g) && !rc; i++)
        rc = ft_gguf_writer_copy_kv(w, g, i);
    if (!rc && mu->set_arch)
        rc = ft_gguf_writer_set_str(w, "general.architecture", mu->set_arch);
    if (!rc && mu->drop_key)
        rc = ft_gguf_writer_remove_key(w, mu->drop_key);
    for (int64_t i = 0; i < ft_gguf_n_tensors(g) && !rc; i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.s);
        if (mu->drop_tensor && !strcmp(name, mu->drop_tensor))
            continue;
        int64_t ne[FT_GGUF_MAX_DIMS];
        memcpy(ne, t->ne, sizeof(ne));
        enum ft_type type = t->type;
        if (mu->swap_tensor && !strcmp(name, mu->swap_tensor))
            ne[1] -= 64; /* fewer rows: the data is a prefix of the original */
        if (mu->retype && !strcmp(name, mu->retype)) {
            type = FT_TYPE_IQ2_XXS; /* 256-element blocks of 66 bytes: fits in the F16 data */
        }
        rc = ft_gguf_writer_add_tensor(w, name, type, t->n_dims, ne, t->data);
    }
    if (!rc)
        rc = ft_gguf_writer_write(w, path);
    ft_gguf_writer_free(w);
    return rc;
}

int main(void) {
    const char *shared = ft_test_shared_dir();
    if (!shared)
        FT_TEST_SKIP("FT_SHARED_DIR (../shared with models/) not found");
    char src[4096], path[4096];
    snprintf(src, sizeof(src), "%s/models/llama-F16.gguf", shared);
    snprintf(path, sizeof(path), "/tmp/ft_test_model_load_%d.gguf", (int)getpid());
    struct ft_gguf *g = NULL;
    if (ft_gguf_open(src, &g) != FT_OK)
        FT_TEST_SKIP("cannot open %s", src);

    const struct mutation cases[] = {
        {"unchanged", .want_rc = FT_OK},
        {"tied output", .drop_tensor = "output.weight", .want_rc = FT_OK},
        {"unknown arch", .set_arch = "mamba", .want_rc = FT_EUNSUPPORTED, .want_text = {"mamba", "not supported"}},
        {"missing tensor", .drop_tensor = "blk.1.ffn_up.weight", .want_rc = FT_EFORMAT,
         .want_text = {"blk.1.ffn_up.weight", "missing"}},
        {"wrong shape", .swap_tensor = "blk.0.attn_k.weight", .want_rc = FT_EFORMAT,
         .want_text = {"blk.0.attn_k.weight", "[256, 64], expected [256, 128]"}},
        {"unrunnable type", .retype = "blk.0.ffn_gate.weight", .want_rc = FT_EUNSUPPORTED,
         .want_text = {"blk.0.ffn_gate.weight", "IQ2_XXS"}},
        {"missing key", .drop_key = "llama.embedding_length", .want_rc = FT_EFORMAT,
         .want_text = {"llama.embedding_length", "missing"}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct mutation *mu = &cases[i];
        if (write_variant(g, mu, path) != FT_OK) {
            CHECKF(0, "%s: cannot write the variant: %s", mu->what, ft_last_error());
            continue;
        }
        ft_clear_error();
        struct ft_model *m = NULL;
        struct ft_model_params mp = {.n_threads = 1};
        const int rc = ft_model_load(path, &mp, &m);
        const char *err = ft_last_error();
        printf("%-16s rc %d  %s\n", mu->what, rc, rc ? err : "");
        CHECKF(rc == mu->want_rc, "%s: rc %d (%s), want %d", mu->what, rc, err, mu->want_rc);
        for (int j = 0; j < 2; j++)
            if (mu->want_text[j])
                CHECKF(strstr(err, mu->want_text[j]) != NULL, "%s: '%s' not in '%s'", mu->what,
                       mu->want_text[j], err);
        if (rc == FT_OK) {
            CHECK(m != NULL);
            CHECK(ft_model_hparams(m)->tied_output == (mu->drop_tensor != NULL));
        } else {
            CHECK(m == NULL);
        }
        ft_model_free(m);
    }
    unlink(path);
    ft_gguf_close(g);
    return ft_test_finish("test_model_load");
}
