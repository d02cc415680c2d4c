/* The placement plan: which core each worker of the pool runs on and which
 * NUMA node each weight buffer is bound to, for every NUMA mode.
 *
 * A pure function of the topology and the parameters (rules in
 * engine/runtime/placement.h), so tests/unit/test_placement.c can check it on
 * synthetic two- and four-node machines. Applying it is someone else's job:
 * engine/runtime/threadpool.c binds the threads, engine/model/numa_weights.c the memory.
 *
 * Why these rules: one worker per physical core is the default because
 * decode is memory-bound and prefill is limited by the vector units of a
 * core, which SMT siblings share; siblings are used only when asked for more
 * threads than cores. Round-robin over nodes (rather than filling node 0
 * first) keeps any thread count balanced across the nodes' memory
 * controllers. */
#include "placement.h"

#include "ft/common.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const g_mode_names[] = {"off", "distribute", "isolate", "replicate"};

const char *ft_numa_mode_name(enum ft_numa_mode mode) {
    return (unsigned)mode < FT_ARRAY_LEN(g_mode_names) ? g_mode_names[mode] : "?";
}

int ft_numa_mode_parse(const char *s, enum ft_numa_mode *out) {
    for (unsigned i = 0; s && i < FT_ARRAY_LEN(g_mode_names); i++) {
        if (!strcasecmp(s, g_mode_names[i])) {
            *out = (enum ft_numa_mode)i;
            return FT_OK;
        }
    }
    return FT_EINVAL;
}

/* One slot: the `sub`-th PU of a core. */
struct slot {
    int core;
    int sub;
};

/* The cores of one node (or of the machine, for off) and their slots. */
struct group {
    int node;           /* logical NUMA node; -1 for the whole machine */
    int n_cores;
    int n_slots;
    int taken;
    struct slot *slots; /* n_slots */
};

static hwloc_obj_type_t core_type(hwloc_topology_t t) {
    return hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
}

static hwloc_obj_t core_obj(hwloc_topology_t t, int core) {
    return hwloc_get_obj_by_type(t, core_type(t), (unsigned)core);
}

static int pus_of_core(hwloc_topology_t t, int core) {
    const int n = hwloc_get_nbobjs_inside_cpuset_by_type(t, core_obj(t, core)->cpuset, HWLOC_OBJ_PU);
    return n > 0 ? n : 1;
}

/* The `sub`-th PU inside a core. */
static hwloc_obj_t pu_of_core(hwloc_topology_t t, int core, int sub) {
    return hwloc_get_obj_inside_cpuset_by_type(t, core_obj(t, core)->cpuset, HWLOC_OBJ_PU, (unsigned)sub);
}

/* The first node (logical order) whose CPUs include the core's; 0 when
 * none does (a topology without NUMA information puts all memory in one
 * node covering everything, so this does not happen in practice). */
static int node_of_core(hwloc_topology_t t, int core) {
    hwloc_const_cpuset_t cs = core_obj(t, core)->cpuset;
    const int n_nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n_nodes; i++)
        if (hwloc_bitmap_isincluded(cs, hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)i)->cpuset))
            return i;
    return 0;
}

static hwloc_obj_t node_obj(hwloc_topology_t t, int node) {
    return hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)node);
}

/* Slots of a group: PU 0 of each core, then PU 1 of each core, ... */
static int fill_slots(hwloc_topology_t t, struct group *g, const int *cores) {
    int max_sub = 0;
    for (int i = 0; i < g->n_cores; i++) {
        const int n = pus_of_core(t, cores[i]);
        g->n_slots += n;
        max_sub = FT_MAX(max_sub, n);
    }
    g->slots = malloc((size_t)FT_MAX(g->n_slots, 1) * sizeof(*g->slots));
    if (!g->slots)
        return FT_ENOMEM;
    int k = 0;
    for (int sub = 0; sub < max_sub; sub++)
        for (int i = 0; i < g->n_cores; i++)
            if (sub < pus_of_core(t, cores[i]))
                g->slots[k++] = (struct slot){cores[i], sub};
    return FT_OK;
}

static void free_groups(struct group *gs, int n) {
    for (int i = 0; gs && i < n; i++)
        free(gs[i].slots);
    free(gs);
}

/* The node isolate uses: the one asked for, else the caller's. */
static int isolate_node(hwloc_topology_t t, const struct ft_place_params *pp, const int *core_node,
                        const int *node_cores, int n_nodes, int *out) {
    if (pp->numa_node >= 0) {
        if (pp->numa_node >= n_nodes || node_cores[pp->numa_node] == 0) {
            FT_LOG_E("--numa-node %d: the machine has NUMA nodes 0..%d%s", pp->numa_node, n_nodes - 1,
                     pp->numa_node < n_nodes ? " and this one has no cores" : "");
            return FT_EINVAL;
        }
        *out = pp->numa_node;
        return FT_OK;
    }
    *out = -1;
    if (pp->caller_pu >= 0) {
        hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(t, (unsigned)pp->caller_pu);
        hwloc_obj_t core = pu ? hwloc_get_ancestor_obj_by_type(t, core_type(t), pu) : NULL;
        if (core_type(t) == HWLOC_OBJ_PU)
            core = pu;
        if (core)
            *out = core_node[core->logical_index];
    }
    for (int i = 0; *out < 0 && i < n_nodes; i++)
        if (node_cores[i] > 0)
            *out = i;
    return FT_OK;
}

/* The groups of a mode: one for off and isolate, one per node with cores
 * for distribute and replicate. */
static int make_groups(hwloc_topology_t t, const struct ft_place_params *pp, struct group **out, int *n_out) {
    const int n_cores = hwloc_get_nbobjs_by_type(t, core_type(t));
    const int n_nodes = FT_MAX(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE), 1);
    int rc = FT_ENOMEM;
    int *core_node = malloc((size_t)FT_MAX(n_cores, 1) * sizeof(int));
    int *node_cores = calloc((size_t)n_nodes, sizeof(int));
    int *cores = malloc((size_t)FT_MAX(n_cores, 1) * sizeof(int));
    struct group *gs = calloc((size_t)n_nodes, sizeof(*gs));
    int n_groups = 0;
    if (!core_node || !node_cores || !cores || !gs)
        goto done;
    if (n_cores <= 0) {
        FT_LOG_E("the topology has no cores");
        rc = FT_EINVAL;
        goto done;
    }
    for (int c = 0; c < n_cores; c++) {
        core_node[c] = node_of_core(t, c);
        node_cores[core_node[c]]++;
    }
    int only = -1; /* isolate's node */
    if (pp->mode == FT_NUMA_ISOLATE && (rc = isolate_node(t, pp, core_node, node_cores, n_nodes, &only)))
        goto done;
    rc = FT_ENOMEM;
    for (int nd = -1; nd < n_nodes; nd++) {
        /* nd == -1 is the whole machine (off); the others are single nodes. */
        const bool wanted = pp->mode == FT_NUMA_OFF           ? nd == -1
                            : pp->mode == FT_NUMA_ISOLATE     ? nd == only
                                                              : nd >= 0 && node_cores[nd] > 0;
        if (!wanted)
            continue;
        struct group *g = &gs[n_groups++];
        g->node = nd;
        for (int c = 0; c < n_cores; c++)
            if (nd < 0 || core_node[c] == nd)
                cores[g->n_cores++] = c;
        if (fill_slots(t, g, cores))
            goto done;
    }
    *out = gs;
    *n_out = n_groups;
    gs = NULL;
    rc = FT_OK;
done:
    free_groups(gs, n_groups);
    free(core_node);
    free(node_cores);
    free(cores);
    return rc;
}

/* Bind each worker to its core, or to its PU when the core is shared. */
static int bind_to_slots(hwloc_topology_t t, struct ft_placement *pl, const struct slot *chosen) {
    const int n_cores = hwloc_get_nbobjs_by_type(t, core_type(t));
    int *per_core = calloc((size_t)n_cores, sizeof(int));
    if (!per_core)
        return FT_ENOMEM;
    for (int i = 0; i < pl->n_threads; i++)
        per_core[chosen[i].core]++;
    int rc = FT_OK;
    for (int i = 0; i < pl->n_threads && !rc; i++) {
        struct ft_worker_place *w = &pl->workers[i];
        w->core = chosen[i].core;
        w->node = node_of_core(t, w->core);
        if (per_core[w->core] == 1) {
            w->pu = -1;
            w->cpuset = hwloc_bitmap_dup(core_obj(t, w->core)->cpuset);
        } else {
            hwloc_obj_t pu = pu_of_core(t, w->core, chosen[i].sub);
            w->pu = (int)pu->logical_index;
            w->cpuset = hwloc_bitmap_dup(pu->cpuset);
        }
        if (!w->cpuset)
            rc = FT_ENOMEM;
    }
    free(per_core);
    return rc;
}

static int assign_workers(hwloc_topology_t t, struct ft_placement *pl, struct group *gs, int n_groups) {
    int total = 0;
    for (int g = 0; g < n_groups; g++)
        total += gs[g].n_slots;
    const bool round_robin = pl->mode == FT_NUMA_DISTRIBUTE || pl->mode == FT_NUMA_REPLICATE;
    if (pl->n_threads > total) {
        pl->oversubscribed = true;
        FT_LOG_W("%d threads on %d hardware threads: threads are not pinned to cores%s", pl->n_threads,
                 total, pl->mode == FT_NUMA_OFF ? "" : ", only to NUMA nodes");
        for (int i = 0; i < pl->n_threads; i++) {
            struct ft_worker_place *w = &pl->workers[i];
            const struct group *g = &gs[round_robin ? i % n_groups : 0];
            w->core = w->pu = -1;
            w->node = g->node;
            if (g->node >= 0 && !(w->cpuset = hwloc_bitmap_dup(node_obj(t, g->node)->cpuset)))
                return FT_ENOMEM;
        }
        return FT_OK;
    }
    struct slot *chosen = malloc((size_t)pl->n_threads * sizeof(*chosen));
    if (!chosen)
        return FT_ENOMEM;
    int g = 0;
    for (int i = 0; i < pl->n_threads; i++) {
        while (gs[g].taken == gs[g].n_slots) /* total >= n_threads: some group has room */
            g = (g + 1) % n_groups;
        chosen[i] = gs[g].slots[gs[g].taken++];
        if (round_robin)
            g = (g + 1) % n_groups;
    }
    int rc = bind_to_slots(t, pl, chosen);
    free(chosen);
    return rc;
}

static int plan_buffers(hwloc_topology_t t, struct ft_placement *pl, const struct group *gs, int n_groups) {
    for (int i = 0; i < pl->n_nodes; i++)
        pl->buffer_of_node[i] = -1;
    if (pl->mode == FT_NUMA_OFF)
        return FT_OK;
    const bool replicate = pl->mode == FT_NUMA_REPLICATE;
    pl->buffers = calloc((size_t)n_groups, sizeof(*pl->buffers));
    if (!pl->buffers)
        return FT_ENOMEM;
    for (int g = 0; g < n_groups; g++) {
        bool has_worker = false;
        for (int i = 0; i < pl->n_threads; i++)
            has_worker |= pl->workers[i].node == gs[g].node;
        if (replicate && !has_worker)
            continue; /* fewer threads than nodes: nobody would read this copy */
        const hwloc_const_nodeset_t ns = node_obj(t, gs[g].node)->nodeset;
        if (replicate || pl->n_buffers == 0) {
            struct ft_buffer_place *b = &pl->buffers[pl->n_buffers++];
            b->policy = pl->mode == FT_NUMA_DISTRIBUTE ? FT_MEM_INTERLEAVE : FT_MEM_BIND;
            b->node = replicate ? gs[g].node : -1;
            if (!(b->nodeset = hwloc_bitmap_dup(ns)))
                return FT_ENOMEM;
        } else if (hwloc_bitmap_or(pl->buffers[0].nodeset, pl->buffers[0].nodeset, ns)) {
            return FT_ENOMEM; /* distribute: interleave over every node with cores */
        }
        pl->buffer_of_node[gs[g].node] = pl->n_buffers - 1;
    }
    return FT_OK;
}

int ft_placement_plan(hwloc_topology_t t, const struct ft_place_params *pp, struct ft_placement *out) {
    memset(out, 0, sizeof(*out));
    if (pp->n_threads > FT_MAX_THREADS) {
        FT_LOG_E("%d threads is more than %d", pp->n_threads, FT_MAX_THREADS);
        return FT_EINVAL;
    }
    if ((unsigned)pp->mode > FT_NUMA_REPLICATE) {
        FT_LOG_E("bad NUMA mode %d", (int)pp->mode);
        return FT_EINVAL;
    }
    struct group *gs = NULL;
    int n_groups = 0;
    int rc = make_groups(t, pp, &gs, &n_groups);
    if (rc)
        return rc;
    out->mode = pp->mode;
    out->n_nodes = FT_MAX(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE), 1);
    int cores = 0;
    for (int g = 0; g < n_groups; g++)
        cores += gs[g].n_cores;
    out->n_threads = pp->n_threads > 0 ? pp->n_threads : FT_MIN(cores, FT_MAX_THREADS);
    out->workers = calloc((size_t)out->n_threads, sizeof(*out->workers));
    out->buffer_of_node = calloc((size_t)out->n_nodes, sizeof(int));
    rc = FT_ENOMEM;
    if (!out->workers || !out->buffer_of_node)
        goto fail;
    if ((rc = assign_workers(t, out, gs, n_groups)))
        goto fail;
    if ((rc = plan_buffers(t, out, gs, n_groups)))
        goto fail;
    free_groups(gs, n_groups);
    return FT_OK;
fail:
    if (rc == FT_ENOMEM)
        FT_LOG_E("out of memory planning %d threads", out->n_threads);
    free_groups(gs, n_groups);
    ft_placement_free(out);
    return rc;
}

void ft_placement_free(struct ft_placement *pl) {
    if (!pl)
        return;
    for (int i = 0; pl->workers && i < pl->n_threads; i++)
        hwloc_bitmap_free(pl->workers[i].cpuset);
    for (int i = 0; pl->buffers && i < pl->n_buffers; i++)
        hwloc_bitmap_free(pl->buffers[i].nodeset);
    free(pl->workers);
    free(pl->buffers);
    free(pl->buffer_of_node);
    memset(pl, 0, sizeof(*pl));
}

void ft_placement_describe(const struct ft_placement *pl, FILE *f) {
    for (int i = 0; i < pl->n_threads; i++) {
        const struct ft_worker_place *w = &pl->workers[i];
        char cpus[64] = "any";
        if (w->cpuset)
            hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), w->cpuset);
        fprintf(f, "  thread %d: ", i);
        if (w->core >= 0)
            fprintf(f, "core %d", w->core);
        else
            fprintf(f, "no core");
        if (w->pu >= 0)
            fprintf(f, " (PU %d)", w->pu);
        fprintf(f, ", node %d, CPUs %s\n", w->node, cpus);
    }
    for (int b = 0; b < pl->n_buffers; b++) {
        char nodes[64];
        hwloc_bitmap_list_snprintf(nodes, sizeof(nodes), pl->buffers[b].nodeset);
        const bool bind = pl->buffers[b].policy == FT_MEM_BIND;
        fprintf(f, "  weights %d: %s node%s %s", b, bind ? "bound to" : "interleaved over",
                hwloc_bitmap_weight(pl->buffers[b].nodeset) == 1 ? "" : "s", nodes);
        if (pl->buffers[b].node >= 0)
            fprintf(f, ", read by node %d", pl->buffers[b].node);
        fputc('\n', f);
    }
    if (pl->n_buffers == 0)
        fprintf(f, "  weights: one copy, not bound (read in place from the file mapping with --mmap)\n");
}
