/* The placement plan (engine/runtime/placement.c) on synthetic machines we do not
 * have: which core (and PU, when a core is shared) each worker gets and
 * which NUMA node(s) each weight buffer is bound to, for every NUMA mode,
 * on a two-node machine with SMT and a four-node machine without. The
 * expected values are written out by hand from the rules in placement.h. */
#include "ft_test.h"

#include "engine/runtime/placement.h"
#include "ft/common.h"

#include <hwloc.h>

/* Two packages, one node each, 4 cores of 2 PUs: core c holds PUs 2c and
 * 2c + 1, cores 0-3 are on node 0, cores 4-7 on node 1. */
#define TOPO_2NODES "pack:2 numa:1 core:4 pu:2"
/* Four nodes of three single-PU cores: node k holds cores 3k..3k+2. */
#define TOPO_4NODES "pack:2 l3:2 numa:1 core:3 pu:1"

static hwloc_topology_t load_synthetic(const char *desc) {
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) || hwloc_topology_set_synthetic(t, desc) || hwloc_topology_load(t)) {
        fprintf(stderr, "cannot load synthetic topology '%s'\n", desc);
        exit(1);
    }
    return t;
}

static int plan(hwloc_topology_t t, enum ft_numa_mode mode, int n, int node, int caller_pu,
                struct ft_placement *pl) {
    const struct ft_place_params pp = {.n_threads = n, .mode = mode, .numa_node = node, .caller_pu = caller_pu};
    return ft_placement_plan(t, &pp, pl);
}

/* Workers' cores and nodes; pus may be NULL (every worker alone on its core). */
static void expect_workers(const char *what, hwloc_topology_t t, const struct ft_placement *pl, int n,
                           const int *cores, const int *pus, const int *nodes) {
    CHECKF(pl->n_threads == n, "%s: %d threads, expected %d", what, pl->n_threads, n);
    for (int i = 0; i < n && i < pl->n_threads; i++) {
        const struct ft_worker_place *w = &pl->workers[i];
        const int want_pu = pus ? pus[i] : -1;
        CHECKF(w->core == cores[i] && w->pu == want_pu && w->node == nodes[i],
               "%s: worker %d on core %d PU %d node %d, expected core %d PU %d node %d", what, i, w->core, w->pu,
               w->node, cores[i], want_pu, nodes[i]);
        /* What it is bound to: its PU when the core is shared, else the core. */
        hwloc_obj_t o = want_pu >= 0 ? hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, (unsigned)want_pu)
                                     : hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, (unsigned)cores[i]);
        CHECKF(w->cpuset && o && hwloc_bitmap_isequal(w->cpuset, o->cpuset), "%s: worker %d bound to the wrong CPUs",
               what, i);
    }
}

/* Oversubscribed: no core; bound to the node's CPUs (node -1: not bound). */
static void expect_unpinned(const char *what, hwloc_topology_t t, const struct ft_placement *pl, int n,
                            const int *nodes) {
    CHECKF(pl->n_threads == n && pl->oversubscribed, "%s: %d threads, oversubscribed %d", what, pl->n_threads,
           (int)pl->oversubscribed);
    for (int i = 0; i < n && i < pl->n_threads; i++) {
        const struct ft_worker_place *w = &pl->workers[i];
        CHECKF(w->core == -1 && w->pu == -1 && w->node == nodes[i], "%s: worker %d core %d PU %d node %d", what, i,
               w->core, w->pu, w->node);
        if (nodes[i] < 0) {
            CHECKF(w->cpuset == NULL, "%s: worker %d is bound", what, i);
        } else {
            hwloc_obj_t nd = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)nodes[i]);
            CHECKF(w->cpuset && hwloc_bitmap_isequal(w->cpuset, nd->cpuset), "%s: worker %d not bound to node %d",
                   what, i, nodes[i]);
        }
    }
}

/* Buffer b: policy and exactly these nodes (a -1-terminated list). */
static void expect_buffer(const char *what, const struct ft_placement *pl, int b, enum ft_mem_policy policy,
                          int read_by, const int *nodes) {
    CHECKF(b < pl->n_buffers, "%s: no buffer %d (%d buffers)", what, b, pl->n_buffers);
    if (b >= pl->n_buffers)
        return;
    const struct ft_buffer_place *bp = &pl->buffers[b];
    int n = 0;
    for (; nodes[n] >= 0; n++)
        CHECKF(hwloc_bitmap_isset(bp->nodeset, (unsigned)nodes[n]), "%s: buffer %d not on node %d", what, b,
               nodes[n]);
    CHECKF(hwloc_bitmap_weight(bp->nodeset) == n, "%s: buffer %d on %d nodes, expected %d", what, b,
           hwloc_bitmap_weight(bp->nodeset), n);
    CHECKF(bp->policy == policy && bp->node == read_by, "%s: buffer %d policy %d read by node %d", what, b,
           (int)bp->policy, bp->node);
}

static void expect_buffer_of_node(const char *what, const struct ft_placement *pl, const int *want) {
    for (int i = 0; i < pl->n_nodes; i++)
        CHECKF(pl->buffer_of_node[i] == want[i], "%s: node %d reads buffer %d, expected %d", what, i,
               pl->buffer_of_node[i], want[i]);
}

static void two_nodes(void) {
    hwloc_topology_t t = load_synthetic(TOPO_2NODES);
    struct ft_placement pl;
    CHECK_EQ_INT(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE), 2);

    /* off: cores in order, SMT siblings only past 8 threads, no buffers. */
    CHECK(plan(t, FT_NUMA_OFF, 0, -1, -1, &pl) == FT_OK);
    expect_workers("2n off default", t, &pl, 8, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, NULL,
                   (int[]){0, 0, 0, 0, 1, 1, 1, 1});
    CHECK_EQ_INT(pl.n_buffers, 0);
    CHECK_EQ_INT(pl.n_nodes, 2);
    expect_buffer_of_node("2n off", &pl, (int[]){-1, -1});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_OFF, 3, -1, -1, &pl) == FT_OK);
    expect_workers("2n off 3", t, &pl, 3, (int[]){0, 1, 2}, NULL, (int[]){0, 0, 0});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_OFF, 10, -1, -1, &pl) == FT_OK);
    expect_workers("2n off 10", t, &pl, 10, (int[]){0, 1, 2, 3, 4, 5, 6, 7, 0, 1},
                   (int[]){0, 2, -1, -1, -1, -1, -1, -1, 1, 3}, (int[]){0, 0, 0, 0, 1, 1, 1, 1, 0, 0});
    CHECK(!pl.oversubscribed);
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_OFF, 17, -1, -1, &pl) == FT_OK);
    int none[17];
    for (int i = 0; i < 17; i++)
        none[i] = -1;
    expect_unpinned("2n off 17", t, &pl, 17, none);
    ft_placement_free(&pl);

    /* distribute: round-robin over the nodes, one interleaved buffer. */
    CHECK(plan(t, FT_NUMA_DISTRIBUTE, 0, -1, -1, &pl) == FT_OK);
    expect_workers("2n distribute default", t, &pl, 8, (int[]){0, 4, 1, 5, 2, 6, 3, 7}, NULL,
                   (int[]){0, 1, 0, 1, 0, 1, 0, 1});
    CHECK_EQ_INT(pl.n_buffers, 1);
    expect_buffer("2n distribute", &pl, 0, FT_MEM_INTERLEAVE, -1, (int[]){0, 1, -1});
    expect_buffer_of_node("2n distribute", &pl, (int[]){0, 0});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_DISTRIBUTE, 3, -1, -1, &pl) == FT_OK);
    expect_workers("2n distribute 3", t, &pl, 3, (int[]){0, 4, 1}, NULL, (int[]){0, 1, 0});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_DISTRIBUTE, 1, -1, -1, &pl) == FT_OK);
    expect_workers("2n distribute 1", t, &pl, 1, (int[]){0}, NULL, (int[]){0});
    expect_buffer("2n distribute 1", &pl, 0, FT_MEM_INTERLEAVE, -1, (int[]){0, 1, -1});
    ft_placement_free(&pl);

    /* 10 threads: 8 cores first, then siblings on node 0 then node 1. */
    CHECK(plan(t, FT_NUMA_DISTRIBUTE, 10, -1, -1, &pl) == FT_OK);
    expect_workers("2n distribute 10", t, &pl, 10, (int[]){0, 4, 1, 5, 2, 6, 3, 7, 0, 4},
                   (int[]){0, 8, -1, -1, -1, -1, -1, -1, 1, 9}, (int[]){0, 1, 0, 1, 0, 1, 0, 1, 0, 1});
    ft_placement_free(&pl);

    /* isolate: the node asked for, or the caller's, or node 0. */
    CHECK(plan(t, FT_NUMA_ISOLATE, 0, 1, -1, &pl) == FT_OK);
    expect_workers("2n isolate node 1", t, &pl, 4, (int[]){4, 5, 6, 7}, NULL, (int[]){1, 1, 1, 1});
    CHECK_EQ_INT(pl.n_buffers, 1);
    expect_buffer("2n isolate node 1", &pl, 0, FT_MEM_BIND, -1, (int[]){1, -1});
    expect_buffer_of_node("2n isolate node 1", &pl, (int[]){-1, 0});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_ISOLATE, 0, -1, 11, &pl) == FT_OK); /* PU 11 is on core 5, node 1 */
    expect_workers("2n isolate caller on PU 11", t, &pl, 4, (int[]){4, 5, 6, 7}, NULL, (int[]){1, 1, 1, 1});
    expect_buffer("2n isolate caller on PU 11", &pl, 0, FT_MEM_BIND, -1, (int[]){1, -1});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_ISOLATE, 2, -1, 3, &pl) == FT_OK); /* PU 3: core 1, node 0 */
    expect_workers("2n isolate caller on PU 3", t, &pl, 2, (int[]){0, 1}, NULL, (int[]){0, 0});
    expect_buffer("2n isolate caller on PU 3", &pl, 0, FT_MEM_BIND, -1, (int[]){0, -1});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_ISOLATE, 0, -1, -1, &pl) == FT_OK); /* caller unknown: node 0 */
    expect_workers("2n isolate unknown caller", t, &pl, 4, (int[]){0, 1, 2, 3}, NULL, (int[]){0, 0, 0, 0});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_ISOLATE, 6, 1, -1, &pl) == FT_OK);
    expect_workers("2n isolate 6 on node 1", t, &pl, 6, (int[]){4, 5, 6, 7, 4, 5}, (int[]){8, 10, -1, -1, 9, 11},
                   (int[]){1, 1, 1, 1, 1, 1});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_ISOLATE, 9, 1, -1, &pl) == FT_OK);
    expect_unpinned("2n isolate 9 on node 1", t, &pl, 9, (int[]){1, 1, 1, 1, 1, 1, 1, 1, 1});
    expect_buffer("2n isolate 9 on node 1", &pl, 0, FT_MEM_BIND, -1, (int[]){1, -1});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_ISOLATE, 0, 2, -1, &pl) == FT_EINVAL); /* no node 2 */
    CHECK(pl.workers == NULL && pl.n_threads == 0);
    ft_placement_free(&pl);

    /* replicate: threads as distribute, one bound copy per node with workers. */
    CHECK(plan(t, FT_NUMA_REPLICATE, 0, -1, -1, &pl) == FT_OK);
    expect_workers("2n replicate default", t, &pl, 8, (int[]){0, 4, 1, 5, 2, 6, 3, 7}, NULL,
                   (int[]){0, 1, 0, 1, 0, 1, 0, 1});
    CHECK_EQ_INT(pl.n_buffers, 2);
    expect_buffer("2n replicate", &pl, 0, FT_MEM_BIND, 0, (int[]){0, -1});
    expect_buffer("2n replicate", &pl, 1, FT_MEM_BIND, 1, (int[]){1, -1});
    expect_buffer_of_node("2n replicate", &pl, (int[]){0, 1});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_REPLICATE, 1, -1, -1, &pl) == FT_OK); /* node 1 has nobody to read a copy */
    expect_workers("2n replicate 1", t, &pl, 1, (int[]){0}, NULL, (int[]){0});
    CHECK_EQ_INT(pl.n_buffers, 1);
    expect_buffer("2n replicate 1", &pl, 0, FT_MEM_BIND, 0, (int[]){0, -1});
    expect_buffer_of_node("2n replicate 1", &pl, (int[]){0, -1});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_REPLICATE, 20, -1, -1, &pl) == FT_OK);
    int alt[20];
    for (int i = 0; i < 20; i++)
        alt[i] = i % 2;
    expect_unpinned("2n replicate 20", t, &pl, 20, alt);
    CHECK_EQ_INT(pl.n_buffers, 2);
    expect_buffer_of_node("2n replicate 20", &pl, (int[]){0, 1});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_OFF, FT_MAX_THREADS + 1, -1, -1, &pl) == FT_EINVAL);
    ft_placement_free(&pl);
    ft_placement_free(NULL);
    hwloc_topology_destroy(t);
}

static void four_nodes(void) {
    hwloc_topology_t t = load_synthetic(TOPO_4NODES);
    struct ft_placement pl;
    CHECK_EQ_INT(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE), 4);

    CHECK(plan(t, FT_NUMA_OFF, 5, -1, -1, &pl) == FT_OK);
    expect_workers("4n off 5", t, &pl, 5, (int[]){0, 1, 2, 3, 4}, NULL, (int[]){0, 0, 0, 1, 1});
    CHECK_EQ_INT(pl.n_buffers, 0);
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_OFF, 13, -1, -1, &pl) == FT_OK);
    int none[13];
    for (int i = 0; i < 13; i++)
        none[i] = -1;
    expect_unpinned("4n off 13", t, &pl, 13, none);
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_DISTRIBUTE, 0, -1, -1, &pl) == FT_OK);
    expect_workers("4n distribute default", t, &pl, 12, (int[]){0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}, NULL,
                   (int[]){0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
    CHECK_EQ_INT(pl.n_buffers, 1);
    expect_buffer("4n distribute", &pl, 0, FT_MEM_INTERLEAVE, -1, (int[]){0, 1, 2, 3, -1});
    expect_buffer_of_node("4n distribute", &pl, (int[]){0, 0, 0, 0});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_DISTRIBUTE, 6, -1, -1, &pl) == FT_OK);
    expect_workers("4n distribute 6", t, &pl, 6, (int[]){0, 3, 6, 9, 1, 4}, NULL, (int[]){0, 1, 2, 3, 0, 1});
    expect_buffer("4n distribute 6", &pl, 0, FT_MEM_INTERLEAVE, -1, (int[]){0, 1, 2, 3, -1});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_ISOLATE, 0, 2, -1, &pl) == FT_OK);
    expect_workers("4n isolate node 2", t, &pl, 3, (int[]){6, 7, 8}, NULL, (int[]){2, 2, 2});
    expect_buffer("4n isolate node 2", &pl, 0, FT_MEM_BIND, -1, (int[]){2, -1});
    expect_buffer_of_node("4n isolate node 2", &pl, (int[]){-1, -1, 0, -1});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_ISOLATE, 0, -1, 10, &pl) == FT_OK); /* PU 10: core 10, node 3 */
    expect_workers("4n isolate caller on PU 10", t, &pl, 3, (int[]){9, 10, 11}, NULL, (int[]){3, 3, 3});
    expect_buffer("4n isolate caller on PU 10", &pl, 0, FT_MEM_BIND, -1, (int[]){3, -1});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_ISOLATE, 4, 0, -1, &pl) == FT_OK); /* 4 threads, 3 PUs on node 0 */
    expect_unpinned("4n isolate 4 on node 0", t, &pl, 4, (int[]){0, 0, 0, 0});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_REPLICATE, 0, -1, -1, &pl) == FT_OK);
    expect_workers("4n replicate default", t, &pl, 12, (int[]){0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}, NULL,
                   (int[]){0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
    CHECK_EQ_INT(pl.n_buffers, 4);
    for (int b = 0; b < 4; b++)
        expect_buffer("4n replicate", &pl, b, FT_MEM_BIND, b, (int[]){b, -1});
    expect_buffer_of_node("4n replicate", &pl, (int[]){0, 1, 2, 3});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_REPLICATE, 3, -1, -1, &pl) == FT_OK);
    expect_workers("4n replicate 3", t, &pl, 3, (int[]){0, 3, 6}, NULL, (int[]){0, 1, 2});
    CHECK_EQ_INT(pl.n_buffers, 3);
    for (int b = 0; b < 3; b++)
        expect_buffer("4n replicate 3", &pl, b, FT_MEM_BIND, b, (int[]){b, -1});
    expect_buffer_of_node("4n replicate 3", &pl, (int[]){0, 1, 2, -1});
    ft_placement_free(&pl);

    CHECK(plan(t, FT_NUMA_ISOLATE, 0, 4, -1, &pl) == FT_EINVAL);
    ft_placement_free(&pl);
    hwloc_topology_destroy(t);
}

static void mode_names(void) {
    enum ft_numa_mode m = FT_NUMA_OFF;
    const char *names[] = {"off", "distribute", "isolate", "replicate"};
    for (int i = 0; i < 4; i++) {
        CHECK(ft_numa_mode_parse(names[i], &m) == FT_OK && (int)m == i);
        CHECK(!strcmp(ft_numa_mode_name(m), names[i]));
    }
    CHECK(ft_numa_mode_parse("REPLICATE", &m) == FT_OK && m == FT_NUMA_REPLICATE);
    CHECK(ft_numa_mode_parse("numactl", &m) == FT_EINVAL);
    CHECK(ft_numa_mode_parse("", &m) == FT_EINVAL);
    CHECK(!strcmp(ft_numa_mode_name((enum ft_numa_mode)9), "?"));
}

int main(void) {
    ft_log_set_level(FT_LOG_ERROR); /* the oversubscription warnings are expected */
    two_nodes();
    four_nodes();
    mode_names();
    return ft_test_finish("test_placement");
}
