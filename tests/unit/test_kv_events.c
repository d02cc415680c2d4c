/* KV-event publisher (engine/serve/kv_events.c) through its public API and
 * its ROUTER replay socket, decoded with msgpack-c: endpoint validation;
 * chained stores sent as one BlockStored, removals as one BlockRemoved; the
 * first batch of a new publisher; a full queue dropped for one
 * AllBlocksCleared and counted; the replay ring bounded by batches and by
 * bytes; the positional (array) layout. No model needed. */
#include "ft_test.h"

#include "ft/common.h"
#include "ft/kv_events.h"

#include <msgpack.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define END_SEQ UINT64_MAX

static void sleep_ms(int ms) {
    struct timespec d = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
}

static uint64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* Wait until the publisher has sent n batches. */
static bool wait_batches(struct ft_kv_events *ev, uint64_t n) {
    for (int i = 0; i < 5000; i++) {
        struct ft_kv_events_stats st;
        ft_kv_events_get_stats(ev, &st);
        if (st.batches >= n)
            return true;
        sleep_ms(1);
    }
    return false;
}

struct batch {
    uint64_t seq;
    msgpack_unpacked u; /* the EventBatch; its strings point into raw */
    char *raw;
};

static void free_batches(struct batch *b, int n) {
    for (int i = 0; i < n; i++) {
        msgpack_unpacked_destroy(&b[i].u);
        free(b[i].raw);
    }
}

/* Replay from start: up to cap batches into out; returns how many came
 * before the end marker, -1 on a protocol error or a timeout. */
static int replay(void *zctx, const char *ep, uint64_t start, struct batch *out, int cap) {
    void *d = zmq_socket(zctx, ZMQ_DEALER);
    const int linger = 0, timeout = 10000;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(d, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    int n = -1, got = 0;
    if (zmq_connect(d, ep) != 0)
        goto done;
    unsigned char s[8];
    for (int i = 0; i < 8; i++)
        s[i] = (unsigned char)(start >> (56 - 8 * i));
    zmq_send(d, "", 0, ZMQ_SNDMORE);
    zmq_send(d, s, 8, 0);
    for (;;) {
        char empty[8], seq[16];
        static char payload[1 << 20];
        if (zmq_recv(d, empty, sizeof(empty), 0) != 0 || zmq_recv(d, seq, sizeof(seq), 0) != 8)
            goto done;
        const int len = zmq_recv(d, payload, sizeof(payload), 0);
        if (len < 0 || len > (int)sizeof(payload))
            goto done;
        const uint64_t q = be64((unsigned char *)seq);
        if (q == END_SEQ) {
            n = len == 0 ? got : -1;
            goto done;
        }
        if (got == cap)
            goto done;
        out[got].seq = q;
        if (!(out[got].raw = malloc((size_t)len)))
            goto done;
        memcpy(out[got].raw, payload, (size_t)len);
        msgpack_unpacked_init(&out[got].u);
        size_t off = 0;
        if (msgpack_unpack_next(&out[got].u, out[got].raw, (size_t)len, &off) != MSGPACK_UNPACK_SUCCESS ||
            off != (size_t)len) {
            msgpack_unpacked_destroy(&out[got].u);
            free(out[got].raw);
            goto done;
        }
        got++;
    }
done:
    if (n < 0)
        free_batches(out, got);
    zmq_close(d);
    return n;
}

static bool str_is(const msgpack_object *o, const char *s) {
    return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) && !memcmp(o->via.str.ptr, s, o->via.str.size);
}

static const msgpack_object *map_get(const msgpack_object *m, const char *key) {
    if (!m || m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++)
        if (str_is(&m->via.map.ptr[i].key, key))
            return &m->via.map.ptr[i].val;
    return NULL;
}

/* The events array of a batch, after checking its shape. */
static const msgpack_object *events_of(const struct batch *b) {
    const msgpack_object *o = &b->u.data;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
        return NULL;
    const msgpack_object *a = o->via.array.ptr;
    if (a[0].type != MSGPACK_OBJECT_FLOAT64 || a[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[2].via.u64 != 0 ||
        a[1].type != MSGPACK_OBJECT_ARRAY)
        return NULL;
    return &a[1];
}

static bool hashes_are(const msgpack_object *o, const uint64_t *h, uint32_t n) {
    if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n)
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (o->via.array.ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.array.ptr[i].via.u64 != h[i])
            return false;
    return true;
}

static bool tokens_are(const msgpack_object *o, const int32_t *t, uint32_t n) {
    if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n)
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (o->via.array.ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.array.ptr[i].via.u64 != (uint64_t)t[i])
            return false;
    return true;
}

static bool is_u64(const msgpack_object *o, uint64_t v) {
    return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 == v;
}

static bool is_nil(const msgpack_object *o) { return o && o->type == MSGPACK_OBJECT_NIL; }

static bool is_cleared_map(const msgpack_object *e) {
    return e->type == MSGPACK_OBJECT_MAP && e->via.map.size == 1 && str_is(map_get(e, "type"), "AllBlocksCleared");
}

static void test_endpoints(void) {
    char why[128];
    const char *good[] = {"tcp://*:5557", "tcp://127.0.0.1:1", "tcp://[::1]:65535", "tcp://host.example:5557",
                          "ipc:///tmp/x"};
    const char *bad[] = {"", "5557", "tcp://", "tcp://:5557", "tcp://h", "tcp://h:", "tcp://h:0", "tcp://h:65536",
                         "tcp://h:55x", "ipc://", "udp://h:1", "inproc://x"};
    for (size_t i = 0; i < FT_ARRAY_LEN(good); i++)
        CHECKF(ft_kv_events_endpoint_ok(good[i], why, sizeof(why)), "%s: %s", good[i], why);
    for (size_t i = 0; i < FT_ARRAY_LEN(bad); i++) {
        why[0] = '\0';
        CHECKF(!ft_kv_events_endpoint_ok(bad[i], why, sizeof(why)) && why[0], "'%s' accepted", bad[i]);
    }
    CHECK(!ft_kv_events_endpoint_ok(NULL, why, sizeof(why)));
}

static void tokens_of(int32_t *t, int32_t base) {
    for (int i = 0; i < FT_KV_EVENTS_BLOCK; i++)
        t[i] = base + i;
}

/* Map layout, coalescing, the first batch, overflow. */
static void test_map(void *zctx, const char *dir) {
    char pub_ep[256], rep_ep[256];
    snprintf(pub_ep, sizeof(pub_ep), "ipc://%s/pub", dir);
    snprintf(rep_ep, sizeof(rep_ep), "ipc://%s/replay", dir);
    struct ft_kv_events *ev = NULL;
    const struct ft_kv_events_config cfg = {
        .endpoint = pub_ep, .replay_endpoint = rep_ep, .topic = "t", .max_queue = 4};
    CHECK_EQ_INT(ft_kv_events_new(&cfg, &ev), FT_OK);
    if (!ev)
        return;
    CHECK(wait_batches(ev, 1)); /* seq 0: AllBlocksCleared */

    int32_t ta[16], tb[16], tc[16], td[16];
    tokens_of(ta, 100);
    tokens_of(tb, 200);
    tokens_of(tc, 300);
    tokens_of(td, 400);
    /* seq 1: A <- B are one chain; C hangs under A (not B): a new message;
     * two removals; then D, first block of another prompt. 4 events fit. */
    ft_kv_events_block_stored(ev, 0xA, false, 0, ta);
    ft_kv_events_block_stored(ev, 0xFFFFFFFFFFFFFFF0ull, true, 0xA, tb);
    ft_kv_events_block_stored(ev, 0xC, true, 0xA, tc);
    ft_kv_events_block_removed(ev, 0xC);
    ft_kv_events_flush(ev); /* the queue holds 4: full, not over */
    CHECK(wait_batches(ev, 2));
    ft_kv_events_block_removed(ev, 0xFFFFFFFFFFFFFFF0ull);
    ft_kv_events_block_stored(ev, 0xD, false, 0, td);
    ft_kv_events_flush(ev);
    CHECK(wait_batches(ev, 3));
    /* seq 3: 10 unchained stores into a queue of 4 without a flush: the
     * 5th and the 8th find it full; what is left is Cleared, 8, 9, 10. */
    for (int i = 1; i <= 10; i++)
        ft_kv_events_block_stored(ev, (uint64_t)i, false, 0, ta);
    struct ft_kv_events_stats st;
    ft_kv_events_get_stats(ev, &st);
    CHECK_EQ_INT(st.dropped, 8);
    CHECK_EQ_INT(st.events, 16);
    ft_kv_events_flush(ev);
    CHECK(wait_batches(ev, 4));

    struct batch b[8];
    const int n = replay(zctx, rep_ep, 0, b, 8);
    CHECK_EQ_INT(n, 4);
    for (int i = 0; i < n; i++)
        CHECK_EQ_INT(b[i].seq, i);
    if (n == 4) {
        const msgpack_object *e0 = events_of(&b[0]), *e1 = events_of(&b[1]), *e2 = events_of(&b[2]),
                             *e3 = events_of(&b[3]);
        CHECK(e0 && e0->via.array.size == 1 && is_cleared_map(&e0->via.array.ptr[0]));
        CHECK(e1 && e1->via.array.size == 3);
        if (e1 && e1->via.array.size == 3) {
            const msgpack_object *s = &e1->via.array.ptr[0];
            const uint64_t ab[] = {0xA, 0xFFFFFFFFFFFFFFF0ull};
            int32_t tab[32];
            memcpy(tab, ta, sizeof(ta));
            memcpy(tab + 16, tb, sizeof(tb));
            CHECK(s->type == MSGPACK_OBJECT_MAP && s->via.map.size == 10);
            CHECK(str_is(map_get(s, "type"), "BlockStored"));
            CHECK(hashes_are(map_get(s, "block_hashes"), ab, 2));
            CHECK(is_nil(map_get(s, "parent_block_hash")));
            CHECK(tokens_are(map_get(s, "token_ids"), tab, 32));
            CHECK(is_u64(map_get(s, "block_size"), 16));
            CHECK(is_nil(map_get(s, "lora_id")) && is_nil(map_get(s, "lora_name")));
            CHECK(str_is(map_get(s, "medium"), "CPU"));
            CHECK(is_u64(map_get(s, "group_idx"), 0));
            CHECK(str_is(map_get(s, "kv_cache_spec_kind"), "full_attention"));
            const msgpack_object *c = &e1->via.array.ptr[1];
            const uint64_t hc[] = {0xC};
            CHECK(str_is(map_get(c, "type"), "BlockStored") && hashes_are(map_get(c, "block_hashes"), hc, 1));
            CHECK(is_u64(map_get(c, "parent_block_hash"), 0xA) && tokens_are(map_get(c, "token_ids"), tc, 16));
            const msgpack_object *r = &e1->via.array.ptr[2];
            CHECK(r->type == MSGPACK_OBJECT_MAP && r->via.map.size == 4);
            CHECK(str_is(map_get(r, "type"), "BlockRemoved") && hashes_are(map_get(r, "block_hashes"), hc, 1));
            CHECK(str_is(map_get(r, "medium"), "CPU") && is_u64(map_get(r, "group_idx"), 0));
        }
        CHECK(e2 && e2->via.array.size == 2);
        if (e2 && e2->via.array.size == 2) {
            const uint64_t hb[] = {0xFFFFFFFFFFFFFFF0ull}, hd[] = {0xD};
            CHECK(str_is(map_get(&e2->via.array.ptr[0], "type"), "BlockRemoved"));
            CHECK(hashes_are(map_get(&e2->via.array.ptr[0], "block_hashes"), hb, 1));
            CHECK(hashes_are(map_get(&e2->via.array.ptr[1], "block_hashes"), hd, 1));
            CHECK(is_nil(map_get(&e2->via.array.ptr[1], "parent_block_hash")));
        }
        CHECK(e3 && e3->via.array.size == 4);
        if (e3 && e3->via.array.size == 4) {
            CHECK(is_cleared_map(&e3->via.array.ptr[0]));
            for (uint64_t i = 1; i < 4; i++) {
                const uint64_t h[] = {7 + i};
                CHECKF(hashes_are(map_get(&e3->via.array.ptr[i], "block_hashes"), h, 1), "event %d", (int)i);
            }
        }
    }
    free_batches(b, n > 0 ? n : 0);
    /* From the middle; from past the end. */
    const int m = replay(zctx, rep_ep, 2, b, 8);
    CHECK_EQ_INT(m, 2);
    if (m > 0)
        CHECK_EQ_INT(b[0].seq, 2);
    free_batches(b, m > 0 ? m : 0);
    CHECK_EQ_INT(replay(zctx, rep_ep, 99, b, 8), 0);
    ft_kv_events_free(ev);
}

/* The array layout, and the replay ring's two bounds. */
static void test_array_and_ring(void *zctx, const char *dir) {
    char pub_ep[256], rep_ep[256];
    snprintf(pub_ep, sizeof(pub_ep), "ipc://%s/pub2", dir);
    snprintf(rep_ep, sizeof(rep_ep), "ipc://%s/replay2", dir);
    struct ft_kv_events *ev = NULL;
    const struct ft_kv_events_config cfg = {.endpoint = pub_ep,
                                            .replay_endpoint = rep_ep,
                                            .format = FT_KV_EVENTS_ARRAY,
                                            .replay_batches = 3};
    CHECK_EQ_INT(ft_kv_events_new(&cfg, &ev), FT_OK);
    if (!ev)
        return;
    CHECK(wait_batches(ev, 1));
    int32_t t[16];
    tokens_of(t, 7);
    for (uint64_t i = 1; i <= 4; i++) {
        ft_kv_events_block_stored(ev, i, i > 1, i - 1, t);
        if (i == 4)
            ft_kv_events_block_removed(ev, 1);
        ft_kv_events_flush(ev);
        CHECK(wait_batches(ev, i + 1));
    }
    struct batch b[8];
    const int n = replay(zctx, rep_ep, 0, b, 8);
    CHECK_EQ_INT(n, 3); /* seqs 2, 3, 4: the ring keeps 3 */
    for (int i = 0; i < n; i++)
        CHECK_EQ_INT(b[i].seq, i + 2);
    if (n == 3) {
        const msgpack_object *e = events_of(&b[2]);
        CHECK(e && e->via.array.size == 2);
        if (e && e->via.array.size == 2) {
            const msgpack_object *s = &e->via.array.ptr[0], *r = &e->via.array.ptr[1];
            const uint64_t h4[] = {4}, h1[] = {1};
            CHECK(s->type == MSGPACK_OBJECT_ARRAY && s->via.array.size == 8);
            if (s->type == MSGPACK_OBJECT_ARRAY && s->via.array.size == 8) {
                const msgpack_object *f = s->via.array.ptr;
                CHECK(str_is(&f[0], "BlockStored") && hashes_are(&f[1], h4, 1) && is_u64(&f[2], 3));
                CHECK(tokens_are(&f[3], t, 16) && is_u64(&f[4], 16) && is_nil(&f[5]) && str_is(&f[6], "CPU") &&
                      is_nil(&f[7]));
            }
            CHECK(r->type == MSGPACK_OBJECT_ARRAY && r->via.array.size == 3);
            if (r->type == MSGPACK_OBJECT_ARRAY && r->via.array.size == 3)
                CHECK(str_is(&r->via.array.ptr[0], "BlockRemoved") && hashes_are(&r->via.array.ptr[1], h1, 1) &&
                      str_is(&r->via.array.ptr[2], "CPU"));
        }
    }
    free_batches(b, n > 0 ? n : 0);
    ft_kv_events_free(ev);

    /* Bounded by bytes: a batch of one stored block is 181 bytes, so 400
     * keep two. */
    snprintf(pub_ep, sizeof(pub_ep), "ipc://%s/pub3", dir);
    snprintf(rep_ep, sizeof(rep_ep), "ipc://%s/replay3", dir);
    const struct ft_kv_events_config cfg3 = {.endpoint = pub_ep, .replay_endpoint = rep_ep, .replay_bytes = 400};
    CHECK_EQ_INT(ft_kv_events_new(&cfg3, &ev), FT_OK);
    if (!ev)
        return;
    CHECK(wait_batches(ev, 1));
    for (uint64_t i = 1; i <= 5; i++) {
        ft_kv_events_block_stored(ev, i, false, 0, t);
        ft_kv_events_flush(ev);
        CHECK(wait_batches(ev, i + 1));
    }
    const int k = replay(zctx, rep_ep, 0, b, 8);
    CHECK_EQ_INT(k, 2);
    if (k == 2)
        CHECK(b[0].seq == 4 && b[1].seq == 5);
    free_batches(b, k > 0 ? k : 0);
    ft_kv_events_free(ev);
}

/* Pending events are published by free(): a subscriber that is connected
 * gets them. Also: the topic and sequence frames. */
static void test_free_flushes(void *zctx, const char *dir) {
    char ep[256];
    snprintf(ep, sizeof(ep), "ipc://%s/pub4", dir);
    struct ft_kv_events *ev = NULL;
    const struct ft_kv_events_config cfg = {.endpoint = ep, .topic = "kv@p@m"};
    CHECK_EQ_INT(ft_kv_events_new(&cfg, &ev), FT_OK);
    if (!ev)
        return;
    void *sub = zmq_socket(zctx, ZMQ_SUB);
    const int timeout = 200, linger = 0;
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    zmq_setsockopt(sub, ZMQ_LINGER, &linger, sizeof(linger));
    CHECK_EQ_INT(zmq_connect(sub, ep), 0);
    /* Until the subscription reaches the PUB socket, batches are dropped:
     * send removals until one arrives. */
    char buf[512];
    bool synced = false;
    uint64_t seq = 0;
    for (int i = 0; i < 100 && !synced; i++) {
        ft_kv_events_block_removed(ev, 1);
        ft_kv_events_flush(ev);
        if (zmq_recv(sub, buf, sizeof(buf), 0) == 6 && !memcmp(buf, "kv@p@m", 6)) {
            CHECK_EQ_INT(zmq_recv(sub, buf, sizeof(buf), 0), 8);
            seq = be64((unsigned char *)buf);
            CHECK(zmq_recv(sub, buf, sizeof(buf), 0) > 0);
            synced = true;
        }
    }
    CHECK(synced);
    /* The rest of the sync: a batch flushed by an earlier attempt can arrive
     * after a later one was flushed, so receive until quiet (each receive
     * waits up to 200 ms) and keep the newest sequence number. */
    while (synced && zmq_recv(sub, buf, sizeof(buf), 0) == 6) {
        if (zmq_recv(sub, buf, sizeof(buf), 0) != 8)
            break;
        const uint64_t s = be64((unsigned char *)buf);
        if (s > seq)
            seq = s;
        if (zmq_recv(sub, buf, sizeof(buf), 0) <= 0)
            break;
    }
    /* The publisher thread counts a batch after sending it: wait (bounded)
     * until the newest one is counted, so the count is not read early. */
    struct ft_kv_events_stats st;
    for (int i = 0; i < 1000; i++) {
        ft_kv_events_get_stats(ev, &st);
        if (st.batches >= seq + 1)
            break;
        usleep(5000);
    }
    CHECK_EQ_INT(st.batches, seq + 1);
    int32_t t[16];
    tokens_of(t, 1);
    ft_kv_events_block_stored(ev, 42, false, 0, t); /* no flush */
    ft_kv_events_free(ev);
    int got = 0;
    uint64_t last = seq;
    for (;;) {
        if (zmq_recv(sub, buf, sizeof(buf), 0) < 0)
            break;
        CHECK_EQ_INT(zmq_recv(sub, buf, sizeof(buf), 0), 8);
        last = be64((unsigned char *)buf);
        const int len = zmq_recv(sub, buf, sizeof(buf), 0);
        CHECK(len > 0);
        got++;
    }
    CHECK(got >= 1);
    CHECK_EQ_INT(last, st.batches); /* the batch free() sent is the next one */
    zmq_close(sub);
}

int main(void) {
    char dir[] = "/tmp/ft-kv-events-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    void *zctx = zmq_ctx_new();
    test_endpoints();
    test_map(zctx, dir);
    test_array_and_ring(zctx, dir);
    test_free_flushes(zctx, dir);
    zmq_ctx_term(zctx);
    const char *names[] = {"pub", "replay", "pub2", "replay2", "pub3", "replay3", "pub4"};
    for (size_t i = 0; i < FT_ARRAY_LEN(names); i++) {
        char p[300];
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return ft_test_finish("test_kv_events");
}
