/* Weight placement under each --numa mode on this machine (real topology):
 * the model computes bit-identical logits in every mode (only where the
 * bytes live changes), the weights are copies (not the file mapping) in
 * every mode, and the mapping itself for off with mmap, the copies
 * hold the file's bytes, a tied output head still shares token_embd's
 * bytes, the copies sit on the NUMA node(s) the plan names (hwloc reads the
 * pages' location back), and under replicate ft_weight_data() gives each
 * node its own copy. Models from ../shared/models (skipped when absent):
 * gemma3 (tied head) and qwen2 (biases). test_numa_synthetic.c runs the
 * same modes on a made-up two-node machine. */
#include "ft_test_model.h"

#include "engine/model/model_internal.h"
#include "engine/runtime/placement.h"
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/model.h"
#include "ft/threadpool.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define N_TOK 12

static int32_t g_tokens[N_TOK] = {1, 450, 4996, 1735, 1701, 432, 6, 23, 7999, 3, 100, 2000};

static float *eval(struct ft_model *m) { return ft_test_eval_last(m, g_tokens, N_TOK); }

static struct ft_model *load(const char *path, enum ft_numa_mode mode, bool mmap, int threads) {
    struct ft_model *m = NULL;
    const struct ft_model_params mp = {.n_threads = threads, .numa = mode, .numa_node = -1, .mmap = mmap};
    const int rc = ft_model_load(path, &mp, &m);
    CHECKF(rc == FT_OK, "load %s --numa %s: %s", path, ft_numa_mode_name(mode), ft_last_error());
    return m;
}

static bool in_mapping(const struct ft_gguf *g, const void *p) {
    for (int64_t i = 0; i < ft_gguf_n_tensors(g); i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
        if ((const char *)p >= (const char *)t->data && (const char *)p < (const char *)t->data + t->size)
            return true;
    }
    return false;
}

/* The pages of [p, p + n) are on exactly the nodes of `want`. */
static void expect_location(const char *what, const void *p, size_t n, hwloc_const_nodeset_t want) {
    hwloc_topology_t topo;
    CHECK(ft_topology_get(&topo) == FT_OK);
    hwloc_nodeset_t got = hwloc_bitmap_alloc();
    const int rc = hwloc_get_area_memlocation(topo, p, n, got, HWLOC_MEMBIND_BYNODESET);
    char a[64], b[64];
    hwloc_bitmap_list_snprintf(a, sizeof(a), got);
    hwloc_bitmap_list_snprintf(b, sizeof(b), want);
    CHECKF(rc == 0 && hwloc_bitmap_isequal(got, want), "%s: pages on nodes %s, plan says %s", what, a, b);
    hwloc_bitmap_free(got);
}

/* Second pass: weights repacked at load (engine/model/repack.c), which only
 * copies are; the reference is then a copy too. */
static bool g_repack;

static void check_mode(const char *path, enum ft_numa_mode mode, bool mmap, const float *ref) {
    if (g_repack && mode == FT_NUMA_OFF && mmap)
        return; /* the mapping is never repacked */
    struct ft_model *m = load(path, mode, mmap, 2);
    if (!m)
        return;
    const char *name = ft_numa_mode_name(mode);
    const size_t nv = (size_t)ft_model_hparams(m)->n_vocab;
    float *logits = eval(m);
    CHECKF(logits && !memcmp(logits, ref, nv * sizeof(float)), "%s --numa %s: logits differ from --numa off",
           path, name);
    free(logits);

    const struct ft_gguf *g = ft_model_gguf(m);
    const struct ft_gguf_tensor *wq = ft_gguf_find_tensor(g, "blk.0.attn_q.weight");
    const struct ft_gguf_tensor *down = ft_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    const struct ft_weight *lwq = &m->layers[0].wq, *ldown = &m->layers[1].ffn_down;
    CHECK(wq && down);
    if (!wq || !down)
        goto done;
    const bool copied = mode != FT_NUMA_OFF || !mmap; /* mmap applies to off only */
    CHECKF((m->numa_weights != NULL) == copied, "--numa %s: numa_weights %p", name, (void *)m->numa_weights);
    CHECKF(in_mapping(g, lwq->data) == !copied && in_mapping(g, ldown->data) == !copied,
           "--numa %s: weights %s the file mapping", name, copied ? "still in" : "not in");
    /* repacked tiles hold other bytes (test_qgemm checks them) */
    CHECKF((lwq->rw || !memcmp(lwq->data, wq->data, wq->size)) &&
               (ldown->rw || !memcmp(ldown->data, down->data, down->size)),
           "--numa %s: the weights' bytes differ from the file's", name);
    CHECK(m->output.data == m->tok_embd.data || !m->hp.tied_output);
    CHECK(ft_weight_data(lwq, -1) == lwq->data);

    const struct ft_placement *pl = ft_threadpool_placement(m->pool);
    CHECK_EQ_INT(pl->n_buffers, mode == FT_NUMA_OFF ? 0 : 1); /* one node here */
    if (mode == FT_NUMA_REPLICATE) {
        CHECK(lwq->rep != NULL && lwq->rep->n_nodes == pl->n_nodes);
        for (int nd = 0; lwq->rep && nd < pl->n_nodes; nd++) {
            const char *mine = ft_weight_data(lwq, nd);
            CHECKF(mine == lwq->rep->base[nd] + lwq->rep_off && !memcmp(mine, lwq->rw ? lwq->data : wq->data, wq->size),
                   "replicate: node %d's copy of blk.0.attn_q", nd);
        }
    } else {
        CHECK(lwq->rep == NULL);
    }
    for (int b = 0; b < pl->n_buffers; b++) {
        const char *buf = mode == FT_NUMA_REPLICATE ? lwq->rep->base[pl->buffers[b].node] + lwq->rep_off : lwq->data;
        expect_location(name, buf, wq->size, pl->buffers[b].nodeset);
    }
done:
    ft_model_free(m);
}

int main(void) {
    const char *shared = ft_test_shared_dir();
    if (!shared)
        FT_TEST_SKIP("FT_SHARED_DIR (../shared with models/) not found; no models to run");
    const char *models[] = {"gemma3-Q8_0.gguf", "qwen2-Q4_K_M.gguf"};
    for (int i = 0; i < 2 * (int)FT_ARRAY_LEN(models); i++) {
        g_repack = i >= (int)FT_ARRAY_LEN(models);
        if (g_repack)
            unsetenv("FT_REPACK");
        else
            setenv("FT_REPACK", "0", 1);
        char path[4096];
        snprintf(path, sizeof(path), "%s/models/%s", shared, models[i % FT_ARRAY_LEN(models)]);
        struct ft_model *m = load(path, FT_NUMA_OFF, !g_repack, 2);
        if (!m)
            continue;
        float *ref = eval(m);
        CHECK(ref != NULL);
        ft_model_free(m);
        for (int mode = FT_NUMA_OFF; ref && mode <= FT_NUMA_REPLICATE; mode++)
            for (int mmap = 0; mmap <= 1; mmap++)
                check_mode(path, (enum ft_numa_mode)mode, mmap, ref);
        free(ref);
        printf("%s: every NUMA mode checked%s\n", models[i % FT_ARRAY_LEN(models)],
               g_repack ? " (weights repacked)" : "");
    }
    return ft_test_finish("test_numa_weights");
}
