/* The machine the engine runs on, as hwloc sees it, and the NUMA modes.
 *
 * The topology is discovered once per process (the first call of anything
 * here or of ft_threadpool_new*) and never changes afterwards; it only holds
 * the cores and memory this process may use (its CPU binding at that
 * moment, e.g. from taskset or numactl, and cgroup limits).
 * HWLOC_SYNTHETIC or HWLOC_XMLFILE in the environment replace it with a
 * made-up machine; threads then cannot be pinned (a warning says so) but
 * everything else works, which is how the NUMA modes can be tried on a
 * one-node machine.
 *
 * NUMA modes (--numa), see engine/runtime/placement.c for the exact rules:
 *   off         threads on the first cores in topology order; weights
 *               copied once, not bound (first touch), or read in place
 *               from the file mapping with --mmap;
 *   distribute  threads spread round-robin over the NUMA nodes that have
 *               cores; weights copied into memory interleaved over them;
 *   isolate     threads and weights on one node: --numa-node N, or by
 *               default the node the loading thread runs on;
 *   replicate   threads as in distribute; one copy of the weights bound to
 *               each node that runs workers; a worker reads its node's copy.
 */
#ifndef FT_TOPOLOGY_H
#define FT_TOPOLOGY_H

#include <stdio.h>

enum ft_numa_mode {
    FT_NUMA_OFF = 0,
    FT_NUMA_DISTRIBUTE,
    FT_NUMA_ISOLATE,
    FT_NUMA_REPLICATE,
};

const char *ft_numa_mode_name(enum ft_numa_mode mode); /* "off"...; "?" out of range */
/* "off", "distribute", "isolate", "replicate" (case-insensitive). FT_EINVAL
 * for anything else (nothing logged: the caller names the flag). */
int ft_numa_mode_parse(const char *s, enum ft_numa_mode *out);

/* Physical cores this process may run on (>= 1; the default thread count),
 * and NUMA nodes (>= 1). 1 when the topology cannot be read. */
int ft_hw_n_cores(void);
int ft_hw_n_numa_nodes(void);

/* What `ft info --hw` and `ft bench --hw` print: CPU and ISA level with
 * its extensions, packages/cores/PUs, each NUMA node with its memory and
 * CPUs, the caches, whether threads and memory can be bound, and the
 * default thread count. Returns FT_OK or the error from loading the
 * topology (the CPU lines are printed in any case). */
int ft_hw_report(FILE *f);
/* Where a pool with these parameters would put its threads and the weight
 * copies, one line each (what `ft info --hw -t N --numa MODE` prints).
 * Computes the plan only: no thread is started, nothing is bound. Returns
 * FT_OK or the plan's error (bad thread count or node, logged). */
int ft_hw_report_placement(FILE *f, int n_threads, enum ft_numa_mode mode, int numa_node);

#endif
