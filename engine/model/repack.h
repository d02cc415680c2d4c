/* Repacking of matmul weights at load (engine/model/repack.c). Not a
 * public header. */
#ifndef FT_REPACK_H
#define FT_REPACK_H

struct ft_model;

/* After ft_numa_weights_place copied the weights: repack, in every copy,
 * the matmul weights whose type the kernel level repacks (engine/model/repack.c).
 * FT_REPACK=0 in the environment turns it off (for comparisons). */
int ft_weights_repack(struct ft_model *m);

#endif
