/* Where threads run and where weight memory lives: the hwloc topology of
 * the process (engine/runtime/topology.c) and the placement plan computed from it
 * (engine/runtime/placement.c). Engine-internal: the thread pool, the weight
 * placement (engine/model/numa_weights.c) and tests use it.
 *
 * The plan is a pure function of a topology and the parameters, so the
 * NUMA logic is tested on synthetic topologies of machines we do not have.
 * Indexes are hwloc logical indexes (0..n-1 in topology order) unless the
 * field says OS index.
 */
#ifndef FT_PLACEMENT_H
#define FT_PLACEMENT_H

#include "ft/topology.h"

#include <hwloc.h>
#include <stdbool.h>

#define FT_MAX_THREADS 1024

/* The process topology, loaded on first use and kept until exit (read-only,
 * safe to share between threads). FT_EIO when hwloc cannot load it. */
int ft_topology_get(hwloc_topology_t *out);
/* OS index of the PU the calling thread runs on; -1 if hwloc cannot tell
 * (a synthetic topology, an OS without the query). */
int ft_topology_current_pu(hwloc_topology_t topo);

struct ft_place_params {
    int n_threads;          /* <= 0: one per core of the cores the mode uses */
    enum ft_numa_mode mode;
    int numa_node;          /* isolate: logical NUMA node; -1: the node of caller_pu */
    int caller_pu;          /* OS index of the PU the caller runs on; -1: unknown (node 0) */
};

struct ft_worker_place {
    int core;               /* logical core index; -1: not tied to one core */
    int pu;                 /* logical PU index when bound to one PU (its core hosts
                               several workers); -1 when bound to a whole core or more */
    int node;               /* logical NUMA node; -1: any */
    hwloc_cpuset_t cpuset;  /* what the thread is bound to; NULL: not bound */
};

enum ft_mem_policy {
    FT_MEM_BIND,        /* all pages on the one node of the nodeset */
    FT_MEM_INTERLEAVE,  /* pages round-robin over the nodeset */
    FT_MEM_FIRST_TOUCH, /* not bound: where the thread that writes a page runs (nodeset NULL) */
};

/* A weight buffer: a copy of every weight, placed as the mode says. */
struct ft_buffer_place {
    enum ft_mem_policy policy;
    hwloc_nodeset_t nodeset; /* OS indexes, as hwloc's membind calls take them */
    int node;                /* replicate: logical node whose workers read it; else -1 */
};

struct ft_placement {
    enum ft_numa_mode mode;
    int n_threads;
    struct ft_worker_place *workers; /* n_threads; [0] is the thread that calls run() */
    int n_nodes;                     /* NUMA nodes in the topology */
    /* Weight buffers: none for off (weights stay in the file mapping), one
     * for distribute and isolate, one per node with workers for replicate. */
    int n_buffers;
    struct ft_buffer_place *buffers;
    int *buffer_of_node;             /* n_nodes: the buffer a node's workers read; -1: none */
    bool oversubscribed;             /* more threads than PUs: bound to nodes, not cores */
};

/* Compute the plan. Rules, in order:
 *  - the cores used: all (off, distribute, replicate) or those of one node
 *    (isolate); a node's cores are those inside its cpuset (a core inside
 *    several, as with HBM + DDR nodes, belongs to the first);
 *  - slots: the first PU of every core, then the second PU of every core
 *    (SMT siblings only after every core has a worker), ...;
 *  - off and isolate take slots in order; distribute and replicate take one
 *    slot from each node in turn (worker i on node i % n, skipping nodes that
 *    are full);
 *  - a worker alone on its core is bound to the core's cpuset, one that
 *    shares it to its PU;
 *  - more threads than slots: each worker is bound to its node's cpuset
 *    (off: not bound at all), and a warning is logged.
 * FT_EINVAL for a thread count over FT_MAX_THREADS or a bad numa_node,
 * FT_ENOMEM. On error *out is left empty (safe to free). */
int ft_placement_plan(hwloc_topology_t topo, const struct ft_place_params *pp, struct ft_placement *out);
void ft_placement_free(struct ft_placement *pl); /* accepts an empty or NULL plan */

/* "worker 0: core 3 (node 1)" lines for logs and `ft info --hw`. */
void ft_placement_describe(const struct ft_placement *pl, FILE *f);

#endif
