/* Weight placement under a NUMA mode (engine/model/numa_weights.c). Not a
 * public header. */
#ifndef FT_NUMA_WEIGHTS_H
#define FT_NUMA_WEIGHTS_H

#include <stdbool.h>

struct ft_model;
struct ft_numa_weights;

/* Copy every bound weight into memory placed as the pool's plan says
 * (distribute: interleaved over the nodes; isolate: bound to the node;
 * replicate: one copy bound to each node with workers) and repoint the
 * ft_weights there; for --numa off one unbound copy when copy_when_off,
 * else nothing (weights stay in the mapping). Call after binding, and after
 * any step that replaces weight data, before the first forward. The copies
 * belong to m->numa_weights. */
int ft_numa_weights_place(struct ft_model *m, bool copy_when_off);
void ft_numa_weights_free(struct ft_numa_weights *nw); /* accepts NULL */

#endif
