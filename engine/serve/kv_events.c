/* KV-cache event publisher (engine/include/ft/kv_events.h).
 *
 * The producer (the scheduler thread) appends fixed-size records to
 * `q` under `lock`; the publisher thread swaps `q` with its own empty
 * array, so neither side holds the lock for more than a copy of one record
 * or a pointer swap. The publisher sleeps in zmq_poll() on the read end of
 * a pipe (flush() writes one byte to it) and on the replay ROUTER socket,
 * so it needs no timeout and wakes only for work.
 *
 * Encoding (vLLM's, see the header for the two layouts): a run of
 * consecutive stores that chain (each one's parent is the previous one's
 * hash) becomes one BlockStored with several hashes and their tokens
 * concatenated, as vLLM sends a request's new blocks; consecutive removals
 * become one BlockRemoved. */
#include "ft/kv_events.h"

#include "ft/common.h"

#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define BT FT_KV_EVENTS_BLOCK
#define DEFAULT_QUEUE 16384
#define DEFAULT_REPLAY_BATCHES 10000
#define DEFAULT_REPLAY_BYTES ((size_t)64 << 20)
#define PUB_HWM 100000   /* messages the PUB socket holds per subscriber (vLLM's) */
#define LINGER_MS 1000   /* at exit, how long the sockets may take to send what is left */
#define MEDIUM "CPU"     /* where the blocks live: the KV cache is in main memory */

enum kind { EV_STORED, EV_REMOVED, EV_CLEARED };

struct event {
    uint8_t kind;
    bool has_parent;
    uint64_t hash;
    uint64_t parent;
    int32_t tokens[BT];
};

struct replay_entry {
    uint64_t seq;
    char *data; /* malloc'd msgpack payload */
    size_t len;
};

struct ft_kv_events {
    struct ft_kv_events_config cfg;
    char *topic;
    void *zctx, *pub, *router;
    int pipe_rd, pipe_wr;
    pthread_t thread;
    bool thread_started;

    pthread_mutex_t lock;
    struct event *q; /* max_queue records; the producer's side */
    int32_t n_q;
    bool signalled; /* a byte is in the pipe */
    bool stop;

    /* the publisher thread's own */
    struct event *spare; /* max_queue records */
    struct replay_entry *replay; /* ring of replay_batches */
    int32_t r_head, r_n;
    size_t r_bytes;
    uint64_t seq; /* next sequence number */
    uint64_t dropped_logged;
    double warned_at; /* CLOCK_MONOTONIC seconds of the last warning about drops */

    atomic_uint_least64_t n_batches, n_events, n_dropped;
};

bool ft_kv_events_endpoint_ok(const char *ep, char *why, size_t cap) {
    if (!ep || !*ep) {
        snprintf(why, cap, "empty endpoint");
        return false;
    }
    if (!strncmp(ep, "ipc://", 6)) {
        if (!ep[6]) {
            snprintf(why, cap, "ipc:// needs a path");
            return false;
        }
        return true;
    }
    if (strncmp(ep, "tcp://", 6) != 0) {
        snprintf(why, cap, "must be tcp://HOST:PORT or ipc://PATH");
        return false;
    }
    const char *host = ep + 6, *colon = strrchr(host, ':');
    if (!colon || colon == host) {
        snprintf(why, cap, "must be tcp://HOST:PORT (no %s)", colon ? "host" : "port");
        return false;
    }
    char *end = NULL;
    errno = 0;
    const long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || port < 1 || port > 65535) {
        snprintf(why, cap, "port must be a number in 1..65535 (got '%s')", colon + 1);
        return false;
    }
    return true;
}

/* ---- producer side (the scheduler thread) ------------------------------ */

/* Append under the lock. A full queue is dropped for one AllBlocksCleared:
 * the consumer then holds fewer blocks than we do (a missed hit), never
 * blocks we no longer have (a wrong route). */
static void push(struct ft_kv_events *ev, const struct event *e) {
    pthread_mutex_lock(&ev->lock);
    if (ev->n_q == ev->cfg.max_queue) {
        atomic_fetch_add(&ev->n_dropped, (uint64_t)ev->n_q);
        ev->n_q = 0;
        ev->q[ev->n_q++] = (struct event){.kind = EV_CLEARED};
    }
    ev->q[ev->n_q++] = *e;
    pthread_mutex_unlock(&ev->lock);
    atomic_fetch_add(&ev->n_events, 1);
}

void ft_kv_events_block_stored(struct ft_kv_events *ev, uint64_t hash, bool has_parent, uint64_t parent,
                               const int32_t *tokens) {
    if (!ev)
        return;
    struct event e = {.kind = EV_STORED, .has_parent = has_parent, .hash = hash, .parent = has_parent ? parent : 0};
    memcpy(e.tokens, tokens, sizeof(e.tokens));
    push(ev, &e);
}

void ft_kv_events_block_removed(struct ft_kv_events *ev, uint64_t hash) {
    if (ev)
        push(ev, &(struct event){.kind = EV_REMOVED, .hash = hash});
}

void ft_kv_events_all_cleared(struct ft_kv_events *ev) {
    if (ev)
        push(ev, &(struct event){.kind = EV_CLEARED});
}

/* Called with the lock held. The pipe is non-blocking and holds at most
 * one byte from us, so this never waits. */
static void signal_locked(struct ft_kv_events *ev) {
    if (ev->signalled)
        return;
    const char c = 1;
    if (write(ev->pipe_wr, &c, 1) == 1)
        ev->signalled = true;
}

void ft_kv_events_flush(struct ft_kv_events *ev) {
    if (!ev)
        return;
    pthread_mutex_lock(&ev->lock);
    if (ev->n_q)
        signal_locked(ev);
    pthread_mutex_unlock(&ev->lock);
}

void ft_kv_events_get_stats(struct ft_kv_events *ev, struct ft_kv_events_stats *out) {
    memset(out, 0, sizeof(*out));
    if (!ev)
        return;
    out->batches = atomic_load(&ev->n_batches);
    out->events = atomic_load(&ev->n_events);
    out->dropped = atomic_load(&ev->n_dropped);
}

/* ---- encoding ---------------------------------------------------------- */

static int pack_cstr(msgpack_packer *pk, const char *s) { return msgpack_pack_str_with_body(pk, s, strlen(s)); }

/* Events e[0..n) of one kind that go into one message. */
static int32_t run_length(const struct event *e, int32_t n) {
    int32_t k = 1;
    if (e[0].kind == EV_STORED)
        while (k < n && e[k].kind == EV_STORED && e[k].has_parent && e[k].parent == e[k - 1].hash)
            k++;
    else if (e[0].kind == EV_REMOVED)
        while (k < n && e[k].kind == EV_REMOVED)
            k++;
    return k;
}

static int pack_hashes(msgpack_packer *pk, const struct event *e, int32_t k) {
    int rc = msgpack_pack_array(pk, (size_t)k);
    for (int32_t i = 0; i < k; i++)
        rc |= msgpack_pack_uint64(pk, e[i].hash);
    return rc;
}

static int pack_stored(msgpack_packer *pk, const struct event *e, int32_t k, bool map) {
    int rc = map ? msgpack_pack_map(pk, 10) : msgpack_pack_array(pk, 8);
    if (map)
        rc |= pack_cstr(pk, "type");
    rc |= pack_cstr(pk, "BlockStored");
    if (map)
        rc |= pack_cstr(pk, "block_hashes");
    rc |= pack_hashes(pk, e, k);
    if (map)
        rc |= pack_cstr(pk, "parent_block_hash");
    rc |= e[0].has_parent ? msgpack_pack_uint64(pk, e[0].parent) : msgpack_pack_nil(pk);
    if (map)
        rc |= pack_cstr(pk, "token_ids");
    rc |= msgpack_pack_array(pk, (size_t)k * BT);
    for (int32_t i = 0; i < k; i++)
        for (int32_t j = 0; j < BT; j++)
            rc |= msgpack_pack_int32(pk, e[i].tokens[j]);
    if (map)
        rc |= pack_cstr(pk, "block_size");
    rc |= msgpack_pack_int32(pk, BT);
    if (map)
        rc |= pack_cstr(pk, "lora_id");
    rc |= msgpack_pack_nil(pk);
    if (map)
        rc |= pack_cstr(pk, "medium");
    rc |= pack_cstr(pk, MEDIUM);
    if (map)
        rc |= pack_cstr(pk, "lora_name");
    rc |= msgpack_pack_nil(pk);
    if (map) {
        /* vLLM's single KV-cache group of full-attention blocks: a block
         * here holds every layer's KV of its 16 positions. */
        rc |= pack_cstr(pk, "group_idx");
        rc |= msgpack_pack_int32(pk, 0);
        rc |= pack_cstr(pk, "kv_cache_spec_kind");
        rc |= pack_cstr(pk, "full_attention");
    }
    return rc;
}

static int pack_removed(msgpack_packer *pk, const struct event *e, int32_t k, bool map) {
    int rc = map ? msgpack_pack_map(pk, 4) : msgpack_pack_array(pk, 3);
    if (map)
        rc |= pack_cstr(pk, "type");
    rc |= pack_cstr(pk, "BlockRemoved");
    if (map)
        rc |= pack_cstr(pk, "block_hashes");
    rc |= pack_hashes(pk, e, k);
    if (map)
        rc |= pack_cstr(pk, "medium");
    rc |= pack_cstr(pk, MEDIUM);
    if (map) {
        rc |= pack_cstr(pk, "group_idx");
        rc |= msgpack_pack_int32(pk, 0);
    }
    return rc;
}

static int pack_cleared(msgpack_packer *pk, bool map) {
    if (map)
        return msgpack_pack_map(pk, 1) | pack_cstr(pk, "type") | pack_cstr(pk, "AllBlocksCleared");
    return msgpack_pack_array(pk, 1) | pack_cstr(pk, "AllBlocksCleared");
}

/* EventBatch [ts, events, data_parallel_rank] into sbuf (cleared first). */
static int encode_batch(const struct event *e, int32_t n, bool map, msgpack_sbuffer *sbuf) {
    msgpack_sbuffer_clear(sbuf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sbuf, msgpack_sbuffer_write);
    int32_t n_msgs = 0;
    for (int32_t i = 0; i < n; i += run_length(e + i, n - i))
        n_msgs++;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int rc = msgpack_pack_array(&pk, 3);
    rc |= msgpack_pack_double(&pk, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    rc |= msgpack_pack_array(&pk, (size_t)n_msgs);
    for (int32_t i = 0; i < n;) {
        const int32_t k = run_length(e + i, n - i);
        if (e[i].kind == EV_STORED)
            rc |= pack_stored(&pk, e + i, k, map);
        else if (e[i].kind == EV_REMOVED)
            rc |= pack_removed(&pk, e + i, k, map);
        else
            rc |= pack_cleared(&pk, map);
        i += k;
    }
    rc |= msgpack_pack_int32(&pk, 0); /* data_parallel_rank: one engine, rank 0 */
    return rc ? FT_ENOMEM : FT_OK;
}

/* ---- the publisher thread ---------------------------------------------- */

static void put_be64(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static uint64_t get_be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void replay_keep(struct ft_kv_events *ev, uint64_t seq, char *data, size_t len) {
    const int32_t cap = ev->cfg.replay_batches;
    while (ev->r_n && (ev->r_n == cap || ev->r_bytes + len > ev->cfg.replay_bytes)) {
        struct replay_entry *old = &ev->replay[ev->r_head];
        ev->r_bytes -= old->len;
        free(old->data);
        ev->r_head = (ev->r_head + 1) % cap;
        ev->r_n--;
    }
    if (len > ev->cfg.replay_bytes) {
        free(data);
        return;
    }
    ev->replay[(ev->r_head + ev->r_n) % cap] = (struct replay_entry){seq, data, len};
    ev->r_n++;
    ev->r_bytes += len;
}

static void publish(struct ft_kv_events *ev, const struct event *e, int32_t n, msgpack_sbuffer *sbuf) {
    if (encode_batch(e, n, ev->cfg.format == FT_KV_EVENTS_MAP, sbuf)) {
        FT_LOG_E("out of memory encoding %d KV events", (int)n);
        return;
    }
    unsigned char seq[8];
    put_be64(seq, ev->seq);
    /* PUB never blocks: past its high-water mark it drops the message
     * (the subscriber sees the gap in the sequence numbers and replays). */
    zmq_send(ev->pub, ev->topic, strlen(ev->topic), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(ev->pub, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(ev->pub, sbuf->data, sbuf->size, ZMQ_DONTWAIT);
    if (ev->router) {
        const size_t len = sbuf->size;
        char *data = msgpack_sbuffer_release(sbuf);
        replay_keep(ev, ev->seq, data, len);
    }
    ev->seq++;
    atomic_store(&ev->n_batches, ev->seq);
}

/* One request on the ROUTER socket: [identity, "", start sequence (8 bytes
 * big-endian)]. The answer, as vLLM's: one [identity, "", seq, payload] per
 * kept batch from start on, then [identity, "", -1, ""]. Anything else is
 * read and ignored. */
static void serve_replay(struct ft_kv_events *ev) {
    zmq_msg_t parts[3], extra;
    int n = 0;
    for (bool more = true; more;) {
        zmq_msg_t *m = n < 3 ? &parts[n] : &extra;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, ev->router, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(m);
            break;
        }
        more = zmq_msg_more(m);
        if (m == &extra)
            zmq_msg_close(m);
        n++;
    }
    const bool ok = n == 3 && zmq_msg_size(&parts[1]) == 0 && zmq_msg_size(&parts[2]) == 8;
    if (ok) {
        const uint64_t start = get_be64(zmq_msg_data(&parts[2]));
        const void *id = zmq_msg_data(&parts[0]);
        const size_t id_len = zmq_msg_size(&parts[0]);
        unsigned char seq[8];
        for (int32_t i = 0; i < ev->r_n; i++) {
            const struct replay_entry *r = &ev->replay[(ev->r_head + i) % ev->cfg.replay_batches];
            if (r->seq < start)
                continue;
            put_be64(seq, r->seq);
            zmq_send(ev->router, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(ev->router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(ev->router, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(ev->router, r->data, r->len, ZMQ_DONTWAIT);
        }
        put_be64(seq, UINT64_MAX); /* -1 */
        zmq_send(ev->router, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(ev->router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(ev->router, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(ev->router, "", 0, ZMQ_DONTWAIT);
    }
    for (int i = 0; i < FT_MIN(n, 3); i++)
        zmq_msg_close(&parts[i]);
}

static void *thread_main(void *arg) {
    struct ft_kv_events *ev = arg;
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init(&sbuf);
    for (;;) {
        zmq_pollitem_t items[2] = {{NULL, ev->pipe_rd, ZMQ_POLLIN, 0}, {ev->router, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, ev->router ? 2 : 1, -1) < 0 && zmq_errno() != EINTR) {
            FT_LOG_E("zmq_poll: %s", zmq_strerror(zmq_errno()));
            break;
        }
        if (items[1].revents & ZMQ_POLLIN)
            serve_replay(ev);
        char buf[64];
        while (read(ev->pipe_rd, buf, sizeof(buf)) > 0) {
        }
        pthread_mutex_lock(&ev->lock);
        ev->signalled = false;
        struct event *taken = ev->q;
        const int32_t n = ev->n_q;
        ev->q = ev->spare;
        ev->n_q = 0;
        const bool stop = ev->stop;
        pthread_mutex_unlock(&ev->lock);
        ev->spare = taken;
        if (n)
            publish(ev, taken, n, &sbuf);
        /* At most one warning every 10 s: a queue that overflows once
         * overflows again at every step until the load changes. */
        const uint64_t dropped = atomic_load(&ev->n_dropped);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        const double t = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
        if (dropped != ev->dropped_logged && (!ev->dropped_logged || t - ev->warned_at >= 10.0)) {
            FT_LOG_W("KV-event queue full (%d events): dropped %llu events so far and sent AllBlocksCleared",
                     (int)ev->cfg.max_queue, (unsigned long long)dropped);
            ev->dropped_logged = dropped;
            ev->warned_at = t;
        }
        if (stop)
            break;
    }
    msgpack_sbuffer_destroy(&sbuf);
    return NULL;
}

/* ---- setup ------------------------------------------------------------- */

static bool binds(const char *ep) {
    return strchr(ep, '*') || strstr(ep, "::") || !strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9);
}

int ft_kv_events_new(const struct ft_kv_events_config *cfg, struct ft_kv_events **out) {
    *out = NULL;
    if (!cfg || !cfg->endpoint) {
        FT_LOG_E("no endpoint");
        return FT_EINVAL;
    }
    struct ft_kv_events *ev = calloc(1, sizeof(*ev));
    if (!ev) {
        FT_LOG_E("out of memory");
        return FT_ENOMEM;
    }
    ev->pipe_rd = ev->pipe_wr = -1;
    pthread_mutex_init(&ev->lock, NULL);
    ev->cfg = *cfg;
    if (ev->cfg.max_queue <= 0)
        ev->cfg.max_queue = DEFAULT_QUEUE;
    ev->cfg.max_queue = FT_MAX(ev->cfg.max_queue, 2); /* an overflow leaves AllBlocksCleared and the new event */
    if (ev->cfg.replay_batches <= 0)
        ev->cfg.replay_batches = DEFAULT_REPLAY_BATCHES;
    if (!ev->cfg.replay_bytes)
        ev->cfg.replay_bytes = DEFAULT_REPLAY_BYTES;
    int rc = FT_ENOMEM;
    int fds[2];
    ev->topic = strdup(cfg->topic ? cfg->topic : "");
    ev->q = malloc(sizeof(struct event) * (size_t)ev->cfg.max_queue);
    ev->spare = malloc(sizeof(struct event) * (size_t)ev->cfg.max_queue);
    if (cfg->replay_endpoint)
        ev->replay = calloc((size_t)ev->cfg.replay_batches, sizeof(*ev->replay));
    if (!ev->topic || !ev->q || !ev->spare || (cfg->replay_endpoint && !ev->replay)) {
        FT_LOG_E("out of memory");
        goto fail;
    }
    rc = FT_EIO;
    if (pipe(fds) != 0) {
        FT_LOG_E("pipe: %s", strerror(errno));
        goto fail;
    }
    ev->pipe_rd = fds[0];
    ev->pipe_wr = fds[1];
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    const int hwm = PUB_HWM, linger = LINGER_MS;
    if (!(ev->zctx = zmq_ctx_new()) || !(ev->pub = zmq_socket(ev->zctx, ZMQ_PUB)) ||
        zmq_setsockopt(ev->pub, ZMQ_SNDHWM, &hwm, sizeof(hwm)) ||
        zmq_setsockopt(ev->pub, ZMQ_LINGER, &linger, sizeof(linger))) {
        FT_LOG_E("cannot make a ZeroMQ socket: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if ((binds(cfg->endpoint) ? zmq_bind : zmq_connect)(ev->pub, cfg->endpoint) != 0) {
        FT_LOG_E("cannot %s %s: %s", binds(cfg->endpoint) ? "bind" : "connect to", cfg->endpoint,
                 zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (cfg->replay_endpoint) {
        /* One whole replay fits in a client's pipe; beyond that the ROUTER
         * drops rather than grows (the client sees no end marker and asks
         * again). */
        const int rhwm = ev->cfg.replay_batches * 4 + 8;
        if (!(ev->router = zmq_socket(ev->zctx, ZMQ_ROUTER)) ||
            zmq_setsockopt(ev->router, ZMQ_SNDHWM, &rhwm, sizeof(rhwm)) ||
            zmq_setsockopt(ev->router, ZMQ_LINGER, &linger, sizeof(linger)) ||
            zmq_bind(ev->router, cfg->replay_endpoint) != 0) {
            FT_LOG_E("cannot bind %s: %s", cfg->replay_endpoint, zmq_strerror(zmq_errno()));
            goto fail;
        }
    }
    ev->q[ev->n_q++] = (struct event){.kind = EV_CLEARED};
    if (pthread_create(&ev->thread, NULL, thread_main, ev) != 0) {
        FT_LOG_E("cannot start the KV-event publisher thread");
        rc = FT_ENOMEM;
        goto fail;
    }
    ev->thread_started = true;
    ft_kv_events_flush(ev);
    *out = ev;
    return FT_OK;
fail:
    ft_kv_events_free(ev);
    return rc;
}

void ft_kv_events_free(struct ft_kv_events *ev) {
    if (!ev)
        return;
    if (ev->thread_started) {
        pthread_mutex_lock(&ev->lock);
        ev->stop = true;
        ev->signalled = false; /* a byte may be pending: one more is harmless */
        signal_locked(ev);
        pthread_mutex_unlock(&ev->lock);
        pthread_join(ev->thread, NULL);
    }
    if (ev->pub)
        zmq_close(ev->pub);
    if (ev->router)
        zmq_close(ev->router);
    if (ev->zctx)
        zmq_ctx_term(ev->zctx); /* waits up to LINGER_MS for unsent messages */
    if (ev->replay)
        for (int32_t i = 0; i < ev->r_n; i++)
            free(ev->replay[(ev->r_head + i) % ev->cfg.replay_batches].data);
    free(ev->replay);
    if (ev->pipe_rd >= 0)
        close(ev->pipe_rd);
    if (ev->pipe_wr >= 0)
        close(ev->pipe_wr);
    free(ev->q);
    free(ev->spare);
    free(ev->topic);
    pthread_mutex_destroy(&ev->lock);
    free(ev);
}
