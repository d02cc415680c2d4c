/* The scheduler: the one thread that owns the model's forward passes, the
 * KV cache and the prefix cache, and runs submitted requests
 * (docs/architecture.md, Scheduler).
 *
 * Other threads hand it requests with ft_scheduler_submit() (a locked FIFO
 * queue with a wake-up); it reports back through one callback, called on
 * the scheduler thread, with the text of each token as it is released and
 * a final FT_EVENT_DONE that carries the finish reason and the request's
 * timing record. The callback must not block (the HTTP layer copies the
 * text into its own queue and wakes its event loop); after FT_EVENT_DONE
 * the scheduler never touches the request again.
 *
 * Continuous batching: up to n_slots sequences run at once. Each step is
 * one forward pass over one batch that holds the next token of every
 * decoding sequence plus prompt chunks of sequences still in prefill, up
 * to n_batch tokens; queued requests join (first in, first out) at the
 * next step when a slot is free, and finished or cancelled ones leave
 * without holding up the others. The KV cache is a shared block pool with
 * the prefix cache on top (engine/include/ft/prefix_cache.h). */
#ifndef FT_SCHEDULER_H
#define FT_SCHEDULER_H

#include "ft/generate.h"
#include "ft/metrics.h"
#include "ft/model.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How token hidden states become one embedding: llama.cpp's enum
 * llama_pooling_type numbers, as stored in a GGUF's <arch>.pooling_type.
 * MEAN averages every token's, CLS takes the first token's, LAST the last
 * one's. */
enum ft_pooling { FT_POOLING_NONE = 0, FT_POOLING_MEAN = 1, FT_POOLING_CLS = 2, FT_POOLING_LAST = 3 };

struct ft_embd_job {
    /* Set by the submitter. */
    int32_t n_inputs;      /* >= 1 */
    const int32_t *tokens; /* input i is tokens[offs[i] .. offs[i + 1]) */
    const int32_t *offs;   /* n_inputs + 1 entries; every input 1 .. n_ctx tokens */
    enum ft_pooling pooling; /* MEAN, CLS or LAST */
    float *out;            /* (n_inputs, n_embd): the pooled vectors, not normalized */
    /* Scheduler-private. */
    int32_t next;   /* inputs started */
    int32_t active; /* inputs on slots now */
};

struct ft_request {
    /* Set by the submitter; read-only for the scheduler until FT_EVENT_DONE. */
    const int32_t *prompt; /* 1 .. n_ctx-1 tokens */
    int32_t n_prompt;
    struct ft_embd_job *embd; /* non-NULL: embeddings instead of a generation (prompt and params unused) */
    struct ft_gen_params params;
    /* Completions of the prompt (the API's `n`), 1 .. FT_MAX_CHOICES and at
     * most n_slots (0 means 1). The prompt is prefilled once; then each
     * choice continues on its own sequence over the prompt's KV blocks
     * (shared, copied on write), with its own sampler seeded with
     * params.sampling.seed + choice, its own stops and finish reason. */
    int32_t n_choices;
    uint64_t received; /* ft_clock_ticks() when the request was received (body parsed) */
    atomic_bool cancel; /* any thread may set it; the scheduler stops it at the next step */
    void *user;

    /* Filled by the scheduler before FT_EVENT_DONE; the submitter's after. */
    enum ft_finish_reason finish; /* the request's: ERROR or CANCELLED when any choice ended so, else choice 0's */
    enum ft_finish_reason choice_finish[FT_MAX_CHOICES];
    int error;               /* FT_E* when finish == FT_FINISH_ERROR */
    char error_msg[256];
    struct ft_request_timing timing; /* the submitter frees it (ft_request_timing_free); embeddings:
                                        prompt_tokens is the sum over the inputs, prefill_start and
                                        prefill_end the first and last prefill step of any of them */
    struct ft_request_metrics metrics; /* computed from timing */

    /* Valid during an FT_EVENT_TEXT callback: the choice that released the
     * text; with params.logprobs, its token's log-probabilities (with
     * logprobs every token gets an event, even when it releases no text);
     * and, on the choice's last event, how it finished (STOP or LENGTH;
     * NONE before; a cancelled or failed request ends only with DONE). */
    int32_t event_choice;
    const struct ft_token_logprob *event_logprob;
    enum ft_finish_reason event_finish;

    /* Scheduler-private. */
    struct ft_request *next; /* queue link */
    int32_t choices_left;
    struct ft_request_timing choice_timing[FT_MAX_CHOICES];
};

enum ft_event { FT_EVENT_TEXT, FT_EVENT_DONE };

/* TEXT: text[0..len) was released by the request (valid during the call).
 * DONE: the result fields of the request are filled. */
typedef void (*ft_event_fn)(void *ud, struct ft_request *r, enum ft_event ev, const char *text, size_t len);

struct ft_scheduler_params {
    int32_t n_ctx;      /* tokens per sequence */
    int32_t n_slots;    /* sequences generated at once (--parallel), >= 1 */
    bool prefix_reuse;  /* false: never reuse a prefix (for comparisons) */
    int32_t n_batch;    /* tokens per step (decode tokens plus prompt chunks) */
    int32_t cache_mib;  /* KV pool beyond what n_slots full sequences need, kept for the prefix cache */
    int32_t max_queue; /* submitted requests waiting at most (FT_EFULL beyond) */
    struct ft_kv_events *kv_events; /* the prefix cache's events, flushed once per step; NULL: none */
    ft_event_fn on_event;
    void *ud;
};

struct ft_scheduler;

/* Allocates the KV pool (n_slots * (ceil(n_ctx / FT_KV_BLOCK_TOKENS) + 1)
 * blocks plus cache_mib of blocks, so running sequences never run out of
 * blocks) and starts the thread. The model must outlive the
 * scheduler and not be used by anyone else meanwhile. */
int ft_scheduler_new(struct ft_model *m, const struct ft_scheduler_params *p, struct ft_scheduler **out);
/* Stops the thread: the running requests and every queued one finish as
 * FT_FINISH_CANCELLED (each still gets FT_EVENT_DONE, and is not touched
 * after it). Accepts NULL. */
void ft_scheduler_free(struct ft_scheduler *s);

/* Queue a request. FT_EINVAL when the prompt (an embeddings input) does
 * not fit the context or n_choices is out of range (more than n_slots),
 * FT_EFULL when max_queue requests are already waiting. On error the
 * request is not queued and no event will come. */
int ft_scheduler_submit(struct ft_scheduler *s, struct ft_request *r);

struct ft_scheduler_stats {
    int32_t running;
    int32_t waiting;
    double kv_usage; /* KV blocks not free (running sequences' and the prefix cache's) / all blocks */
    int32_t kv_blocks_total; /* blocks of FT_KV_BLOCK_TOKENS tokens in the pool */
};
/* Safe from any thread (values are published atomically). */
void ft_scheduler_get_stats(struct ft_scheduler *s, struct ft_scheduler_stats *out);

#endif
