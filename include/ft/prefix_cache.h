/* Prefix cache: reuse the KV of earlier requests when a new prompt starts
 * with the same tokens (a shared system prompt, a conversation that grew by
 * one turn, the same prompt again).
 *
 * Each slot is one sequence of the KV cache plus the list of tokens whose
 * KV it holds. A new prompt takes the slot with the longest common token
 * prefix (least recently used among ties and misses), the slot is truncated
 * to that prefix, and only the rest of the prompt is computed. At least one
 * prompt token is always left to compute so the request gets its logits.
 *
 * Block-sharing between slots (several slots pointing at the same blocks,
 * DESIGN.md §5) is the next step; today a slot's prefix is reused in place.
 * Not thread-safe: the scheduler thread owns it with the KV cache. */
#ifndef FT_PREFIX_CACHE_H
#define FT_PREFIX_CACHE_H

#include "ft/model.h"

#include <stdbool.h>
#include <stdint.h>

struct ft_prefix_cache;

/* n_slots sequences (0..n_slots-1 of kv, which must hold at least that
 * many); reuse false makes every acquire start from an empty slot (the cache
 * off, for comparisons). */
int ft_prefix_cache_new(struct ft_kv_cache *kv, int32_t n_slots, bool reuse, struct ft_prefix_cache **out);
void ft_prefix_cache_free(struct ft_prefix_cache *pc); /* accepts NULL */

/* Pick a slot for prompt[0..n) (n >= 1) and truncate its KV to the reused
 * prefix. Returns the sequence id; *n_cached (OUT) is the number of prompt
 * tokens whose KV is already there (< n). */
int32_t ft_prefix_cache_acquire(struct ft_prefix_cache *pc, const int32_t *prompt, int32_t n,
                                int32_t *n_cached /* OUT */);

/* After a generation: the slot's KV holds a[0..na) followed by b[0..nb)
 * (the prompt and the generated tokens that were evaluated). If the KV
 * length disagrees, or on allocation failure, the slot is cleared. */
void ft_prefix_cache_commit(struct ft_prefix_cache *pc, int32_t seq, const int32_t *a, int32_t na,
                            const int32_t *b, int32_t nb);

/* Forget a slot and free its KV (after a failed generation). */
void ft_prefix_cache_clear(struct ft_prefix_cache *pc, int32_t seq);

#endif
