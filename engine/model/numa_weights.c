/* Weight memory under a NUMA mode: copies of every weight, placed as the
 * pool's plan says (engine/runtime/placement.h), that the model's ft_weights then
 * point into.
 *
 * Why copy instead of binding the file mapping in place: the pages of a
 * mapped regular file live in the page cache, which the kernel allocates by
 * the policy of whichever task first reads them (possibly another process,
 * long ago), not by the mapping's policy; mbind() on a file mapping does not
 * move them. Anonymous memory from hwloc_alloc_membind() follows the policy
 * on every page. The cost is a copy at load time and the memory of one copy
 * per buffer (two for replicate on two nodes).
 *
 * --numa off makes one copy too, bound nowhere (first touch), unless the
 * model params ask for mmap: the copies are advised to transparent huge
 * pages, which the page cache behind a file mapping does not give, and a
 * decode step streams every weight once, so 4 KiB pages cost a TLB miss
 * every 4 KiB (measured: 75% of the read bandwidth from the mapping, 93%
 * from the copy, docs/performance.md, Threads and NUMA).
 *
 * Layout: the bound weights' byte ranges, sorted and merged (tensors are
 * contiguous in a GGUF, and a tied output head shares token_embd's bytes),
 * are laid out in one arena per buffer at the same offset modulo the page
 * size as in the source, so every alignment a kernel could rely on is kept.
 * For replicate every copy has the same layout, so a weight is one offset
 * (rep_off) into whichever copy its reader's node has (ft_weight_data()).
 *
 * The copy runs on the pool: under replicate, the workers of each node fill
 * that node's copy. */
#include "numa_weights.h"

#include "engine/runtime/placement.h"
#include "ft/common.h"
#include "ft/threadpool.h"
#include "model_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Every ft_weight of a layer; the assertion below fires when struct
 * ft_layer grows, so a new field is not forgotten here (a weight left out
 * would still work, read from the file mapping without NUMA placement). */
static const size_t k_layer_weights[] = {
    offsetof(struct ft_layer, attn_norm),      offsetof(struct ft_layer, wq),
    offsetof(struct ft_layer, wk),             offsetof(struct ft_layer, wv),
    offsetof(struct ft_layer, bq),             offsetof(struct ft_layer, bk),
    offsetof(struct ft_layer, bv),             offsetof(struct ft_layer, q_norm),
    offsetof(struct ft_layer, k_norm),         offsetof(struct ft_layer, wo),
    offsetof(struct ft_layer, bo),             offsetof(struct ft_layer, attn_post_norm),
    offsetof(struct ft_layer, ffn_norm),       offsetof(struct ft_layer, ffn_gate),
    offsetof(struct ft_layer, ffn_up),         offsetof(struct ft_layer, ffn_down),
    offsetof(struct ft_layer, ffn_post_norm),  offsetof(struct ft_layer, ffn_gate_inp),
    offsetof(struct ft_layer, ffn_gate_inp_b), offsetof(struct ft_layer, ffn_gate_exps),
    offsetof(struct ft_layer, ffn_up_exps),    offsetof(struct ft_layer, ffn_down_exps),
    offsetof(struct ft_layer, ffn_gate_exps_b), offsetof(struct ft_layer, ffn_up_exps_b),
    offsetof(struct ft_layer, ffn_down_exps_b), offsetof(struct ft_layer, attn_sinks),
};
_Static_assert(sizeof(k_layer_weights) / sizeof(k_layer_weights[0]) * sizeof(struct ft_weight) ==
                   sizeof(struct ft_layer),
               "a field of struct ft_layer is missing from k_layer_weights");

struct region {
    const char *start;
    size_t size;
    size_t arena_off; /* where it starts in every arena */
};

struct ft_numa_weights {
    hwloc_topology_t topo;
    int n_buffers;
    char **buffers;    /* n_buffers arenas of arena_size bytes */
    size_t arena_size;
    char **node_base;  /* per node: the arena its workers read (replicate) */
    struct ft_weight_replicas rep;
};

/* The model's weights, as pointers to the ft_weight fields. */
static struct ft_weight **list_weights(struct ft_model *m, int *n_out) {
    const int per_layer = (int)FT_ARRAY_LEN(k_layer_weights);
    const size_t n = 5 + (size_t)m->hp.n_layer * (size_t)per_layer;
    struct ft_weight **ws = malloc(n * sizeof(*ws));
    if (!ws)
        return NULL;
    int k = 0;
    ws[k++] = &m->tok_embd;
    ws[k++] = &m->output_norm;
    ws[k++] = &m->output;
    ws[k++] = &m->output_b;
    ws[k++] = &m->rope_freqs;
    for (int il = 0; il < m->hp.n_layer; il++)
        for (int j = 0; j < per_layer; j++)
            ws[k++] = (struct ft_weight *)((char *)&m->layers[il] + k_layer_weights[j]);
    *n_out = k;
    return ws;
}

static int cmp_region(const void *a, const void *b) {
    const struct region *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

/* Sorted, merged byte ranges of the weights; lays them out in an arena. */
static int make_regions(struct ft_weight *const *ws, int n_ws, struct region **out, int *n_out, size_t *arena) {
    struct region *rs = malloc((size_t)FT_MAX(n_ws, 1) * sizeof(*rs));
    if (!rs)
        return FT_ENOMEM;
    int n = 0;
    for (int i = 0; i < n_ws; i++) {
        size_t bytes;
        if (!ws[i]->data)
            continue;
        if (ft_mul_overflow((size_t)ws[i]->rows, ws[i]->row_size, &bytes)) {
            free(rs);
            FT_LOG_E("weight of %lld rows of %zu bytes: size overflows", (long long)ws[i]->rows, ws[i]->row_size);
            return FT_ERANGE;
        }
        rs[n++] = (struct region){ws[i]->data, bytes, 0};
    }
    qsort(rs, (size_t)n, sizeof(*rs), cmp_region);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0 && rs[i].start <= rs[m - 1].start + rs[m - 1].size) {
            const char *end = FT_MAX(rs[m - 1].start + rs[m - 1].size, rs[i].start + rs[i].size);
            rs[m - 1].size = (size_t)(end - rs[m - 1].start);
        } else {
            rs[m++] = rs[i];
        }
    }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t off = 0;
    for (int i = 0; i < m; i++) {
        const size_t phase = (uintptr_t)rs[i].start % page;
        off += (phase + page - off % page) % page; /* off % page == phase */
        rs[i].arena_off = off;
        if (ft_add_overflow(off, rs[i].size, &off)) {
            free(rs);
            FT_LOG_E("weights do not fit in the address space");
            return FT_ERANGE;
        }
    }
    *out = rs;
    *n_out = m;
    *arena = FT_MAX(off, 1);
    return FT_OK;
}

/* The region holding p (regions are sorted and disjoint). */
static const struct region *find_region(const struct region *rs, int n, const char *p) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        if (p < rs[mid].start)
            hi = mid - 1;
        else if (p >= rs[mid].start + rs[mid].size)
            lo = mid + 1;
        else
            return &rs[mid];
    }
    return NULL;
}

struct copy_task {
    const struct region *rs;
    int n_rs;
    size_t total;          /* bytes of all regions */
    char *const *buffers;
    int n_buffers;
    int n_threads;         /* of the pool */
    const int *buf_of;     /* per thread: the buffer its node reads, -1 none */
    const int *rank;       /* per thread: its index among the threads of that buffer */
    const int *n_readers;  /* per buffer: threads that read it */
};

/* Copy bytes [lo, hi) of the concatenated regions into one arena. */
static void copy_range(const struct copy_task *c, char *dst, size_t lo, size_t hi) {
    size_t base = 0;
    for (int i = 0; i < c->n_rs && base < hi; i++) {
        const size_t a = FT_MAX(lo, base), b = FT_MIN(hi, base + c->rs[i].size);
        if (a < b)
            memcpy(dst + c->rs[i].arena_off + (a - base), c->rs[i].start + (a - base), b - a);
        base += c->rs[i].size;
    }
}

/* Each buffer is filled by the threads that will read it, split evenly (a
 * buffer nobody reads, which the plans never make, by all threads). Run
 * with fewer threads than the pool has (nested), one thread copies all. */
static void copy_run(void *ctx, int ith, int nth) {
    const struct copy_task *c = ctx;
    const bool by_reader = nth == c->n_threads;
    for (int b = 0; b < c->n_buffers; b++) {
        int r = ith, n = nth;
        if (by_reader && c->n_readers[b] > 0) {
            if (c->buf_of[ith] != b)
                continue;
            r = c->rank[ith];
            n = c->n_readers[b];
        }
        const size_t lo = c->total / (size_t)n * (size_t)r + FT_MIN(c->total % (size_t)n, (size_t)r);
        const size_t hi = c->total / (size_t)n * (size_t)(r + 1) + FT_MIN(c->total % (size_t)n, (size_t)r + 1);
        copy_range(c, c->buffers[b], lo, hi);
    }
}

static hwloc_membind_policy_t hwloc_policy(enum ft_mem_policy p) {
    return p == FT_MEM_INTERLEAVE ? HWLOC_MEMBIND_INTERLEAVE : HWLOC_MEMBIND_BIND;
}

/* One arena placed as b says; unplaced (with a warning) when the system
 * cannot bind memory, as under a synthetic topology. Not STRICT: on Linux
 * a bind is then "preferred" (MPOL_PREFERRED_MANY), so a copy that does
 * not fit on its node spills over (slower) instead of failing. Huge pages
 * where the kernel allows them: weights are streamed, TLB misses add up. */
static char *alloc_buffer(hwloc_topology_t topo, const struct ft_buffer_place *b, size_t size) {
    void *p;
    if (b->policy == FT_MEM_FIRST_TOUCH) {
        p = hwloc_alloc(topo, size);
    } else if (!(p = hwloc_alloc_membind(topo, size, b->nodeset, hwloc_policy(b->policy), HWLOC_MEMBIND_BYNODESET))) {
        char nodes[64];
        hwloc_bitmap_list_snprintf(nodes, sizeof(nodes), b->nodeset);
        FT_LOG_W("cannot bind %zu bytes of weights to NUMA node(s) %s; they are placed by the kernel", size,
                 nodes);
        p = hwloc_alloc(topo, size);
    }
#ifdef MADV_HUGEPAGE
    if (p)
        madvise(p, size, MADV_HUGEPAGE);
#endif
    return p;
}

/* Whether madvise(MADV_HUGEPAGE) can give huge pages: THP "always" or
 * "madvise" (the kernel marks the choice in brackets). */
static bool huge_pages_possible(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char line[128] = "";
    if (!f)
        return false;
    const bool ok = fgets(line, sizeof(line), f) && !strstr(line, "[never]");
    fclose(f);
    return ok;
}

/* The part of the file mapping holding tensor data. */
static void tensor_span(const struct ft_gguf *g, const char **lo, const char **hi) {
    *lo = NULL;
    *hi = NULL;
    for (int64_t i = 0; i < ft_gguf_n_tensors(g); i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor(g, i);
        const char *s = t->data;
        if (!*lo || s < *lo)
            *lo = s;
        if (!*hi || s + t->size > *hi)
            *hi = s + t->size;
    }
}

/* The copies are made: give the mapped pages back (they stay in the page
 * cache; only this process's references go). Only whole pages inside the
 * file's tensor data, so nothing else is touched. */
static void release_mapping(const struct ft_model *m, const struct region *rs, int n) {
    const char *lo, *hi;
    tensor_span(m->gguf, &lo, &hi);
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < n && lo; i++) {
        if (rs[i].start < lo || rs[i].start + rs[i].size > hi)
            continue;
        const uintptr_t a = ((uintptr_t)rs[i].start + page - 1) & ~(page - 1);
        const uintptr_t b = ((uintptr_t)rs[i].start + rs[i].size) & ~(page - 1);
        if (b > a)
            madvise((void *)a, b - a, MADV_DONTNEED);
    }
}

/* Per thread: the buffer it reads and its rank among that buffer's threads. */
static int reader_tables(const struct ft_placement *pl, int **buf_of, int **rank, int **n_readers) {
    *buf_of = malloc((size_t)pl->n_threads * sizeof(int));
    *rank = malloc((size_t)pl->n_threads * sizeof(int));
    *n_readers = calloc((size_t)pl->n_buffers, sizeof(int));
    if (!*buf_of || !*rank || !*n_readers)
        return FT_ENOMEM;
    for (int i = 0; i < pl->n_threads; i++) {
        const int node = pl->workers[i].node;
        const int b = node >= 0 && pl->buffer_of_node ? pl->buffer_of_node[node] : -1;
        (*buf_of)[i] = b;
        (*rank)[i] = b >= 0 ? (*n_readers)[b]++ : 0;
    }
    return FT_OK;
}

int ft_numa_weights_place(struct ft_model *m, bool copy_when_off) {
    const struct ft_placement *plan = ft_threadpool_placement(m->pool);
    if (!plan || (plan->n_buffers == 0 && !copy_when_off))
        return FT_OK;
    /* --numa off: the plan has no buffer; one bound nowhere, that nobody
     * reads in particular (so every thread copies a share) */
    struct ft_buffer_place unbound = {FT_MEM_FIRST_TOUCH, NULL, -1};
    struct ft_placement with_copy = *plan;
    if (plan->n_buffers == 0) {
        with_copy.n_buffers = 1;
        with_copy.buffers = &unbound;
        with_copy.buffer_of_node = NULL;
    }
    const struct ft_placement *pl = &with_copy;
    hwloc_topology_t topo;
    int rc = ft_topology_get(&topo);
    if (rc)
        return rc;
    struct ft_weight **ws = NULL;
    struct region *rs = NULL;
    int *buf_of = NULL, *rank = NULL, *n_readers = NULL;
    int n_ws = 0, n_rs = 0;
    struct ft_numa_weights *nw = calloc(1, sizeof(*nw));
    rc = FT_ENOMEM;
    if (!nw || !(ws = list_weights(m, &n_ws)))
        goto fail;
    nw->topo = topo;
    if ((rc = make_regions(ws, n_ws, &rs, &n_rs, &nw->arena_size)))
        goto fail;
    rc = FT_ENOMEM;
    nw->buffers = calloc((size_t)pl->n_buffers, sizeof(char *));
    nw->node_base = calloc((size_t)pl->n_nodes, sizeof(char *));
    if (!nw->buffers || !nw->node_base)
        goto fail;
    nw->n_buffers = pl->n_buffers;
    for (int b = 0; b < pl->n_buffers; b++)
        if (!(nw->buffers[b] = alloc_buffer(topo, &pl->buffers[b], nw->arena_size))) {
            FT_LOG_E("out of memory for a %zu-byte copy of the weights", nw->arena_size);
            goto fail;
        }
    if (reader_tables(pl, &buf_of, &rank, &n_readers))
        goto fail;

    size_t total = 0;
    for (int i = 0; i < n_rs; i++)
        total += rs[i].size; /* <= arena_size: no overflow */
    struct copy_task c = {rs, n_rs, total, nw->buffers, pl->n_buffers, pl->n_threads, buf_of, rank, n_readers};
    ft_threadpool_run(m->pool, copy_run, &c);

    /* Repoint: single-threaded readers (the embedding lookup) get worker
     * 0's copy; tasks ask ft_weight_data() for their node's. */
    for (int nd = 0; nd < pl->n_nodes; nd++)
        nw->node_base[nd] = pl->buffer_of_node && pl->buffer_of_node[nd] >= 0 ? nw->buffers[pl->buffer_of_node[nd]] : NULL;
    nw->rep.n_nodes = pl->n_nodes;
    nw->rep.base = nw->node_base;
    const int b0 = buf_of[0] >= 0 ? buf_of[0] : 0;
    for (int i = 0; i < n_ws; i++) {
        if (!ws[i]->data)
            continue;
        const struct region *r = find_region(rs, n_rs, ws[i]->data);
        const size_t off = r->arena_off + (size_t)((const char *)ws[i]->data - r->start);
        ws[i]->data = nw->buffers[b0] + off;
        if (pl->mode == FT_NUMA_REPLICATE) {
            ws[i]->rep = &nw->rep;
            ws[i]->rep_off = off;
        }
    }
    release_mapping(m, rs, n_rs);
    FT_LOG_I("weights: %d cop%s of %.1f MiB placed for --numa %s", pl->n_buffers, pl->n_buffers == 1 ? "y" : "ies",
             (double)total / (1 << 20), ft_numa_mode_name(pl->mode));
    if (pl->n_buffers == 1 && !huge_pages_possible())
        FT_LOG_I("transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/enabled): "
                 "decode reads weights through 4 KiB pages");
    m->numa_weights = nw;
    rc = FT_OK;
    nw = NULL;
fail:
    ft_numa_weights_free(nw);
    free(ws);
    free(rs);
    free(buf_of);
    free(rank);
    free(n_readers);
    return rc;
}

void ft_numa_weights_free(struct ft_numa_weights *nw) {
    if (!nw)
        return;
    for (int b = 0; nw->buffers && b < nw->n_buffers; b++)
        if (nw->buffers[b])
            hwloc_free(nw->topo, nw->buffers[b], nw->arena_size);
    free(nw->buffers);
    free(nw->node_base);
    free(nw);
}
