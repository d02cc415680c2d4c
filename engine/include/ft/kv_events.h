/* KV-cache events: the prefix cache's stores and evictions published in
 * vLLM's format, for routers that score endpoints by the KV blocks each one
 * holds (llm-d's precise prefix-cache scorer, NVIDIA Dynamo's KV router,
 * AIBrix). docs/api.md "KV-cache events" documents the wire format and how the
 * block hashes are made.
 *
 * Wire: a ZeroMQ PUB socket sends one multipart message per batch:
 * (topic, 8-byte big-endian sequence number counting from 0, msgpack
 * EventBatch [ts, events, data_parallel_rank]). Events are BlockStored,
 * BlockRemoved and AllBlocksCleared. An optional ROUTER socket replays the
 * recent batches from a sequence number.
 *
 * Threads: the producer calls (block_stored, block_removed, all_cleared,
 * flush) come from one thread, the scheduler's, and never wait on the
 * network: they append to a bounded queue under a mutex held only for a
 * copy. A publisher thread takes the queue when flush() wakes it (once per
 * scheduler step), encodes it as one batch and sends it. When the queue is
 * full the queued events are dropped and replaced by one AllBlocksCleared,
 * so a consumer forgets this engine's blocks rather than believing in
 * blocks whose removal it never heard of; the drops are counted and logged. */
#ifndef FT_KV_EVENTS_H
#define FT_KV_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ft_kv_events;

enum ft_kv_events_format {
    /* vLLM since vllm-project/vllm#42892 (v0.26.0 checked): each event a
     * msgpack map tagged by "type"; the batch stays an array. */
    FT_KV_EVENTS_MAP = 0,
    /* vLLM up to v0.23: each event a positional array tagged by its first
     * element (["BlockStored", hashes, parent, tokens, block_size, lora_id,
     * medium, lora_name]), for consumers built before the change. */
    FT_KV_EVENTS_ARRAY = 1,
};

struct ft_kv_events_config {
    /* PUB socket. Bound when it contains '*' or "::" or is ipc:// or
     * inproc://, connected otherwise (vLLM's rule, so its deployments'
     * endpoints mean the same here). */
    const char *endpoint;
    const char *replay_endpoint; /* ROUTER socket, always bound; NULL: no replay */
    const char *topic;           /* first frame of every message; NULL: "" */
    enum ft_kv_events_format format;
    int32_t max_queue;      /* events waiting for the publisher at most (>= 2); <= 0: 16384 */
    int32_t replay_batches; /* batches kept for replay at most; <= 0: 10000 (vLLM's default) */
    size_t replay_bytes;    /* and at most these bytes of them; 0: 64 MiB */
};

/* True when ep is tcp://HOST:PORT (PORT 1..65535, HOST non-empty; '*' binds
 * every interface) or ipc://PATH; else false with the reason in why. */
bool ft_kv_events_endpoint_ok(const char *ep, char *why, size_t cap);

/* Opens the sockets and starts the publisher thread. The first batch
 * (sequence 0) is one AllBlocksCleared: a consumer that knew an earlier
 * run of this engine at the same endpoint forgets its blocks. */
int ft_kv_events_new(const struct ft_kv_events_config *cfg, struct ft_kv_events **out /* OUT */);
/* Publishes what is queued (waiting at most about a second for the sockets
 * to take it), stops the thread, closes the sockets. Accepts NULL. */
void ft_kv_events_free(struct ft_kv_events *ev);

#define FT_KV_EVENTS_BLOCK 16 /* tokens per block: FT_KV_BLOCK_TOKENS */

/* Producer side (one thread). Every call accepts ev == NULL as "off". */
/* A full block became reusable: its hash, its parent's (has_parent false
 * for a prompt's first block) and its FT_KV_EVENTS_BLOCK tokens. */
void ft_kv_events_block_stored(struct ft_kv_events *ev, uint64_t hash, bool has_parent, uint64_t parent,
                               const int32_t *tokens);
void ft_kv_events_block_removed(struct ft_kv_events *ev, uint64_t hash);
void ft_kv_events_all_cleared(struct ft_kv_events *ev);
/* The end of a step: wake the publisher to send what is queued. */
void ft_kv_events_flush(struct ft_kv_events *ev);

struct ft_kv_events_stats {
    uint64_t batches;  /* batches sent (the next sequence number) */
    uint64_t events;   /* events queued by the producer */
    uint64_t dropped;  /* events dropped because the queue was full */
};
/* Safe from any thread. */
void ft_kv_events_get_stats(struct ft_kv_events *ev, struct ft_kv_events_stats *out /* OUT */);

#endif
