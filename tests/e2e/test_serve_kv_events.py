"""`ft serve --kv-events`: the prefix cache's KV-block events in vLLM's
format, read the way a router reads them (pyzmq SUB + msgpack), and checked
against the prompts sent: every stored block is a 16-token window of a
prompt at its place in the chain, its hash is the one docs/api.md documents
(recomputed here from the tokens), every removed block was stored before
and is removed after the blocks that continue it, the sequence numbers
count up by one, and the ROUTER socket replays the same bytes. The server
tests run on the release build and, when FT_ASAN_BIN is set, on the
AddressSanitizer build (no report allowed)."""
import concurrent.futures
import random
import socket
import time

import pytest

from conftest import run_ft, stop_clean
from test_serve import Server, tiny_model

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")
prom_parser = pytest.importorskip("prometheus_client.parser")

BT = 16
MASK = (1 << 64) - 1
ROOT = 0x9E3779B97F4A7C15
TOPIC = b"kv@pod-a@tiny"
END = (1 << 64) - 1  # the replay's end marker: sequence -1 as 8 unsigned bytes


def chain_hash(parent, tokens):
    """docs/api.md "KV-cache events": a block's hash from its parent's (ROOT for a
    prompt's first block) and its 16 token ids."""
    h = parent ^ 0xCBF29CE484222325
    for t in tokens:
        h ^= t & 0xFFFFFFFF
        h = (h * 0x100000001B3) & MASK
        h ^= h >> 29
    return h


def prompt_blocks(prompt):
    """{hash: (parent hash or None, tokens)} for each full block of prompt."""
    out, parent = {}, None
    for i in range(len(prompt) // BT):
        toks = list(prompt[i * BT:(i + 1) * BT])
        h = chain_hash(ROOT if parent is None else parent, toks)
        out[h] = (parent, toks)
        parent = h
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Subscriber:
    """A SUB socket bound on a free port: the server connects to it (a
    tcp://HOST:PORT endpoint without '*' connects, as in vLLM)."""

    def __init__(self, ctx):
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.setsockopt(zmq.LINGER, 0)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.msgs = []  # (seq, payload bytes)

    def drain(self, quiet=1.0, timeout=60):
        """Receive until nothing came for `quiet` seconds."""
        t0 = time.time()
        while time.time() - t0 < timeout and self.sock.poll(int(quiet * 1000)):
            parts = self.sock.recv_multipart()
            assert len(parts) == 3, parts
            assert parts[0] == TOPIC
            assert len(parts[1]) == 8
            self.msgs.append((int.from_bytes(parts[1], "big"), parts[2]))
        return self.msgs


def replay(ctx, port, start, timeout=30):
    """vLLM's replay: send the start sequence (8 bytes, big-endian) to the
    ROUTER; get (seq, payload) pairs, then (-1, b"")."""
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.connect(f"tcp://127.0.0.1:{port}")
    try:
        d.send_multipart([b"", start.to_bytes(8, "big")])
        out = []
        while True:
            assert d.poll(timeout * 1000), "no end marker from the replay socket"
            empty, seq, payload = d.recv_multipart()
            assert empty == b"" and len(seq) == 8
            seq = int.from_bytes(seq, "big")
            if seq == END:
                assert payload == b""
                return out
            out.append((seq, payload))
    finally:
        d.close()


STORED_KEYS = {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
               "lora_name", "group_idx", "kv_cache_spec_kind"}


def decode(payload, fmt="map"):
    """One EventBatch: [ts, events, data_parallel_rank]; events as dicts."""
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    assert isinstance(batch, list) and len(batch) == 3, batch
    ts, events, rank = batch
    assert isinstance(ts, float) and abs(ts - time.time()) < 600, ts
    assert rank == 0
    assert isinstance(events, list) and events
    out = []
    for e in events:
        if fmt == "array":
            assert isinstance(e, list), e
            tag = e[0]
            if tag == "BlockStored":
                assert len(e) == 8, e
                e = dict(zip(["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                              "medium", "lora_name"], e))
            elif tag == "BlockRemoved":
                assert len(e) == 3, e
                e = dict(zip(["type", "block_hashes", "medium"], e))
            else:
                assert e == ["AllBlocksCleared"], e
                e = {"type": tag}
        else:
            assert isinstance(e, dict), e
            if e["type"] == "BlockStored":
                assert set(e) == STORED_KEYS, e
                assert e["group_idx"] == 0 and e["kv_cache_spec_kind"] == "full_attention"
            elif e["type"] == "BlockRemoved":
                assert set(e) == {"type", "block_hashes", "medium", "group_idx"}, e
            else:
                assert e == {"type": "AllBlocksCleared"}, e
        if e["type"] != "AllBlocksCleared":
            assert e["medium"] == "CPU"
            hs = e["block_hashes"]
            assert hs and all(isinstance(h, int) and 0 <= h <= MASK for h in hs), e
        if e["type"] == "BlockStored":
            assert e["block_size"] == BT and e["lora_id"] is None and e["lora_name"] is None
            assert len(e["token_ids"]) == BT * len(e["block_hashes"]), e
        out.append(e)
    return out


def apply(batches, expected):
    """Replay the stream as a consumer's index would, checking every event
    against the prompts' blocks. Returns (stored hashes, removals)."""
    present, parent_of, stored, n_removed = set(), {}, set(), 0
    for _, events in batches:
        for e in events:
            if e["type"] == "BlockStored":
                parent = e["parent_block_hash"]
                for i, h in enumerate(e["block_hashes"]):
                    toks = e["token_ids"][i * BT:(i + 1) * BT]
                    # a block is stored under a block the cache holds
                    assert parent is None or parent in present, (h, parent)
                    assert h == chain_hash(ROOT if parent is None else parent, toks)
                    # the tokens are a window of a prompt, at this place in its chain
                    assert expected.get(h) == (parent, toks), (h, parent, toks)
                    assert h not in present, "stored twice without a removal"
                    present.add(h)
                    parent_of[h] = parent
                    stored.add(h)
                    parent = h
            elif e["type"] == "BlockRemoved":
                for h in e["block_hashes"]:
                    assert h in present, f"removed {h:#x}, never stored (or removed twice)"
                    present.remove(h)
                    # the blocks that continue it went first
                    assert not any(parent_of[c] == h for c in present), h
                    n_removed += 1
            else:
                present.clear()
    return stored, n_removed


def completion(s, prompt, max_tokens=1, **kw):
    status, body = s.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **kw})
    assert status == 200, body
    return body


@pytest.fixture(scope="module")
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


def test_kv_events_match_prefix_cache(ctx, binary):
    sub = Subscriber(ctx)
    replay_port = free_port()
    # 1 MiB of prefix cache holds 64 idle blocks of this model: the prompts
    # below hold far more, so blocks get evicted.
    s = Server(tiny_model(), "-c", "512", "--parallel", "2", "--cache-mib", "1",
               "--kv-events", f"tcp://127.0.0.1:{sub.port}",
               "--kv-events-replay", f"tcp://127.0.0.1:{replay_port}",
               "--kv-events-topic", TOPIC.decode(), **binary)
    try:
        rng = random.Random(16)
        tok = lambda n: [rng.randrange(3, 8000) for _ in range(n)]
        prompts = []
        # The PUB socket connects in the background: until the subscription
        # reaches it, batches are not sent to us (replay fetches them).
        for _ in range(50):
            prompts.append(tok(20))
            completion(s, prompts[-1])
            if sub.drain(quiet=0.2):
                break
        assert sub.msgs, "no KV event reached the subscriber"
        shared_a, shared_b = tok(100), tok(64)
        group_a = [shared_a + tok(rng.randrange(1, 90)) for _ in range(8)]
        group_b = [shared_b + tok(rng.randrange(16, 200)) for _ in range(8)]
        for p in group_a:
            prompts.append(p)
            completion(s, p)
        prompts += group_b
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda p: completion(s, p), group_b))
        prompts.append(group_a[0])
        completion(s, group_a[0])  # its blocks were evicted meanwhile: stored again
        sub.drain()

        expected = {}
        for p in prompts:
            expected.update(prompt_blocks(p))

        got = sub.msgs
        seqs = [q for q, _ in got]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
        everything = replay(ctx, replay_port, 0)
        assert [q for q, _ in everything] == list(range(len(everything)))
        assert seqs[-1] == everything[-1][0]
        by_seq = dict(everything)
        for q, payload in got:
            assert by_seq[q] == payload, f"replayed batch {q} differs from the published one"
        batches = [(q, decode(p)) for q, p in everything]
        assert batches[0][1] == [{"type": "AllBlocksCleared"}]  # a new engine's first word
        stored, n_removed = apply(batches, expected)
        # Every block of the prompts sent one at a time was announced. (Of
        # two prompts computed at once, one keeps the shared blocks and the
        # other nothing beyond them: engine/include/ft/prefix_cache.h.)
        sequential = [p for p in prompts if p not in group_b] + [shared_b]
        for i, p in enumerate(sequential):
            missing = [j for j, h in enumerate(prompt_blocks(p)) if h not in stored]
            assert not missing, (i, len(p), missing)
        assert n_removed > 0, "no eviction: the test did not exercise BlockRemoved"
        # Chained blocks of one step travel in one BlockStored.
        assert any(len(e["block_hashes"]) > 1 for _, evs in batches for e in evs if e["type"] == "BlockStored")

        # /metrics counts what was published: the batches (the next
        # sequence number), one event per block plus the clears pushed
        # after the first batch, none dropped.
        fams = {f.name: f for f in prom_parser.text_string_to_metric_families(s.request("GET", "/metrics")[2].decode())}
        counter = lambda name: fams[name].samples[0].value
        assert counter("ft_kv_events_batches") == len(everything)
        per_block = sum(len(e["block_hashes"]) if "block_hashes" in e else 1 for _, evs in batches[1:] for e in evs)
        assert counter("ft_kv_events") == per_block
        assert counter("ft_kv_events_dropped") == 0

        # Replay from the middle, and from past the end.
        mid = len(everything) // 2
        assert replay(ctx, replay_port, mid) == everything[mid:]
        assert replay(ctx, replay_port, len(everything) + 5) == []
    finally:
        stop_clean(s)
    # Stopping drops the cache: the last batch says so.
    last = sub.drain(quiet=2.0)[-1]
    assert decode(last[1])[-1] == {"type": "AllBlocksCleared"}


def test_kv_events_array_format_and_generated_tokens(ctx, binary):
    """--kv-events-format array: vLLM's positional layout (up to v0.23).
    Blocks filled by generated tokens are announced too."""
    sub = Subscriber(ctx)
    s = Server(tiny_model(), "-c", "256", "--parallel", "1", "--kv-events", f"tcp://127.0.0.1:{sub.port}",
               "--kv-events-topic", TOPIC.decode(), "--kv-events-format", "array", **binary)
    try:
        rng = random.Random(3)
        for _ in range(50):
            completion(s, [rng.randrange(3, 8000) for _ in range(17)])
            if sub.drain(quiet=0.2):
                break
        assert sub.msgs
        prompt = [rng.randrange(3, 8000) for _ in range(40)]
        body = completion(s, prompt, max_tokens=40, ignore_eos=True)
        n_gen = body["usage"]["completion_tokens"]
        assert n_gen == 40
        start = len(sub.msgs)
        sub.drain()
        events = [e for _, p in sub.msgs[start:] for e in decode(p, "array")]
        stored = [e for e in events if e["type"] == "BlockStored"]
        hashes = [h for e in stored for h in e["block_hashes"]]
        tokens = [t for e in stored for t in e["token_ids"]]
        # the KV holds the prompt and every generated token but the last
        assert len(hashes) == (len(prompt) + n_gen - 1) // BT
        assert tokens[:len(prompt)] == prompt
        assert stored[0]["parent_block_hash"] is None
        parent = ROOT
        for i, h in enumerate(hashes):
            assert h == chain_hash(parent, tokens[i * BT:(i + 1) * BT])
            parent = h
    finally:
        stop_clean(s)


@pytest.mark.parametrize("args, msg", [
    (["--kv-events", "localhost:5557"], "--kv-events: must be tcp://HOST:PORT or ipc://PATH"),
    (["--kv-events", "tcp://127.0.0.1"], "--kv-events: must be tcp://HOST:PORT"),
    (["--kv-events", "tcp://:5557"], "--kv-events: must be tcp://HOST:PORT"),
    (["--kv-events", "tcp://127.0.0.1:0"], "--kv-events: port must be a number in 1..65535"),
    (["--kv-events", "tcp://127.0.0.1:http"], "--kv-events: port must be a number in 1..65535"),
    (["--kv-events", "ipc://"], "--kv-events: ipc:// needs a path"),
    (["--kv-events", "tcp://*:5557", "--kv-events-replay", "udp://x:1"], "--kv-events-replay: must be"),
    (["--kv-events-replay", "tcp://*:5558"], "need --kv-events"),
    (["--kv-events", "tcp://*:5557", "--kv-events-format", "json"], "--kv-events-format must be map or array"),
    (["--kv-events", "tcp://*:5557", "--no-prefix-cache"], "cannot go with --no-prefix-cache"),
])
def test_kv_events_bad_flags(args, msg):
    r = run_ft("serve", "-m", tiny_model(), *args, timeout=60)
    assert r.returncode == 2, r.stderr
    assert msg in r.stderr.decode(), r.stderr


def test_kv_events_endpoint_in_use(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_ft("serve", "-m", tiny_model(), "--port", "0", "--kv-events", f"ipc://{tmp_path}/events",
                   "--kv-events-replay", f"tcp://127.0.0.1:{port}", timeout=60)
    assert r.returncode == 1, r.stderr
    assert f"cannot bind tcp://127.0.0.1:{port}: Address already in use" in r.stderr.decode(), r.stderr
