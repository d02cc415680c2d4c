/* Prefix cache: reuse the KV of earlier and running sequences when a new
 * prompt starts with the same tokens (a shared system prompt, a
 * conversation that grew by one turn, the same prompt again).
 *
 * It holds KV blocks, not sequences. Every full block a sequence computes
 * becomes a node keyed by a hash chain (the parent block's hash and the
 * block's own tokens; a hit also compares the tokens and the parent), so
 * the blocks of any cached sequence serve any later prompt with that
 * prefix, while their first owner still runs or long after. A new prompt
 * attaches the matching full blocks to its sequence (shared, counted in the
 * KV cache) and then the block among the next candidates whose first rows
 * match the most of the rest (the partial block of a finished sequence, or
 * a full block whose end differs): the KV cache copies it on the first
 * write, so a 40-token shared prompt reuses 40 tokens. At least one prompt
 * token is always left to compute so the request gets its logits.
 *
 * Cached blocks no sequence uses stay in the KV cache's idle list and are
 * evicted oldest first when it needs room; evicting a block drops its node
 * and every node that continues it (they could never match again).
 * Not thread-safe: the scheduler thread owns it with the KV cache. */
#ifndef FT_PREFIX_CACHE_H
#define FT_PREFIX_CACHE_H

#include "ft/model.h"

#include <stdbool.h>
#include <stdint.h>

struct ft_prefix_cache;

/* Over all of kv's blocks and sequences; reuse false makes attach find
 * nothing and keeps nothing (the cache off, for comparisons). Registers
 * itself as kv's evict callback. */
int ft_prefix_cache_new(struct ft_kv_cache *kv, bool reuse, struct ft_prefix_cache **out);
/* Lets go of every cached block (they return to kv's free list unless a
 * sequence still lists them). Accepts NULL. */
void ft_prefix_cache_free(struct ft_prefix_cache *pc);

/* Start the empty sequence `seq` on the longest cached prefix of
 * prompt[0..n) (n >= 1). Returns the number of prompt tokens whose KV it
 * now holds (0 .. n-1). */
int32_t ft_prefix_cache_attach(struct ft_prefix_cache *pc, int32_t seq, const int32_t *prompt, int32_t n);

/* Start the empty sequence `dst` on the first len tokens of sequence `src`
 * (len <= its length): dst's table lists the same blocks (the KV cache
 * copies the partly filled last one on the first write to it) and
 * continues src's chain of cache nodes. This is how the choices of one
 * request (n > 1) share their prompt. FT_EINVAL when dst is not empty or
 * len is out of range. */
int ft_prefix_cache_fork(struct ft_prefix_cache *pc, int32_t dst, int32_t src, int32_t len);

/* After a forward pass: the KV of `seq` holds the tokens a[0..na) followed
 * by b[0..nb) (the prompt and the generated tokens evaluated so far, or a
 * prefix of them). Its newly completed blocks become cache nodes. */
void ft_prefix_cache_update(struct ft_prefix_cache *pc, int32_t seq, const int32_t *a, int32_t na,
                            const int32_t *b, int32_t nb);

/* The sequence is done: as update, plus its partly filled last block, then
 * the sequence is cleared (its blocks stay only where cached). a == NULL
 * (a failed generation) keeps nothing new. */
void ft_prefix_cache_release(struct ft_prefix_cache *pc, int32_t seq, const int32_t *a, int32_t na,
                             const int32_t *b, int32_t nb);

/* Report to ev (engine/include/ft/kv_events.h) every full block that becomes a
 * node (BlockStored: its chain hash, its parent's, its tokens), every full
 * node dropped (BlockRemoved) and, from ft_prefix_cache_free, the end of
 * them all (AllBlocksCleared). NULL stops reporting. The caller flushes. */
struct ft_kv_events;
void ft_prefix_cache_set_events(struct ft_prefix_cache *pc, struct ft_kv_events *ev);

/* Blocks the cache holds (in use by sequences or idle). */
int32_t ft_prefix_cache_blocks(const struct ft_prefix_cache *pc);

#endif
