"""`ft serve` replicas behind real routers, on loopback only: sglang-router
(PyPI `sglang-router`, cache-aware and round-robin) and HAProxy 2.6 (Debian,
round-robin with `option httpchk GET /health`). The routers are started by
bench/routers.py, the same code bench/cluster_bench.py uses.

What is checked, for each router:
- a streamed chat completion passes through chunk by chunk, ends with usage,
  the engine's `metrics` and `data: [DONE]`, and has the same greedy text as
  the same request sent straight to a replica;
- a client that leaves mid-stream cancels its request on the replica that
  ran it (a 499 line in that replica's access log, fewer tokens than asked,
  nothing left running);
- (sglang-router) with two shared prefixes sent one request at a time, the
  cache-aware policy keeps each prefix on one replica (6 of 8 requests find
  it cached) where round-robin does not (4 of 8);
- a replica killed with SIGKILL mid-run loses exactly the streams it was
  running, the streams on the other replicas go on, and requests sent right
  after the kill all succeed on the others (sglang-router retries them,
  HAProxy redispatches them and its health check marks the replica DOWN).

The replicas run a small random F16 model (ft gen-model) so a decode lasts
long enough to be interrupted; every wait is bounded and nothing asserts on
speed. Tests skip only when a router is not installed (CI installs both:
scripts/setup.sh, tests/requirements.txt)."""
import http.client
import json
import re
import signal
import socket
import sys
import threading
import time

import pytest

from conftest import ROOT
from test_serve import Server

sys.path.insert(0, str(ROOT / "bench"))
import routers  # noqa: E402
import serve_client  # noqa: E402

prom_parser = pytest.importorskip("prometheus_client.parser")

WAIT_S = 60  # bound on every wait below; the runs themselves take seconds
ROUTERS = ["sglang", "haproxy"]


def start_replicas(model, n):
    # --enable-performance-metrics: sglang-router 0.3.2 re-serializes chat
    # requests from its own typed struct and drops the per-request
    # "performance_metrics" field (completions pass through whole).
    out = []
    try:
        for _ in range(n):
            out.append(Server(model, "-t", "1", "-c", "4096", "--parallel", "4", "--enable-performance-metrics"))
    except Exception:
        for s in out:
            s.stop()
        raise
    return out


def start_router(kind, ports, policy="round_robin"):
    if kind == "sglang":
        if not routers.sglang_router_available():
            pytest.skip("sglang-router is not installed (tests/requirements.txt)")
        return routers.SglangRouter(ports, policy=policy)
    if not routers.haproxy_binary():
        pytest.skip("haproxy is not installed (scripts/setup.sh)")
    return routers.HAProxy(ports)


def metric(s, name):
    """A label-less sample of a replica's /metrics (None if the replica is gone)."""
    try:
        status, _, body = s.request("GET", "/metrics", timeout=10)
    except OSError:
        return None
    assert status == 200
    for fam in prom_parser.text_string_to_metric_families(body.decode()):
        for x in fam.samples:
            if x.name == name and not x.labels:
                return x.value
    raise AssertionError(f"{name} not in /metrics")


def wait_for(cond, what, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def log_499s(s):
    return [l for l in s.log_lines() if '" 499 ' in l]


def posts(s):
    return [l for l in s.log_lines() if '"POST ' in l]


class Stream(threading.Thread):
    """One streamed completion through the router, read with http.client
    (which undoes the chunked framing: routers re-chunk the SSE stream, e.g.
    sglang-router sends "data: " and the JSON as two HTTP chunks). Counts the
    events it receives; ends on [DONE], on EOF or an error (failed), or when
    the test shuts its socket (a client that leaves)."""

    def __init__(self, port, prompt, max_tokens=4000):
        super().__init__(daemon=True)
        self.body = {"model": "slow", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                     "ignore_eos": True, "stream": True}
        self.conn = http.client.HTTPConnection(routers.LOOPBACK, port, timeout=WAIT_S)
        self.events = 0
        self.done = False
        self.failed = None  # why the stream broke, when it did
        self.closed_by_us = False
        self.finished = threading.Event()

    def run(self):
        try:
            self.conn.request("POST", "/v1/completions", body=json.dumps(self.body),
                              headers={"Content-Type": "application/json"})
            r = self.conn.getresponse()
            if r.status != 200:
                self.failed = f"HTTP {r.status}"
                return
            while True:
                line = r.readline()
                if not line:
                    self.failed = "EOF before data: [DONE]"
                    return
                if line.startswith(b"data: [DONE]"):
                    self.done = True
                    return
                if line.startswith(b"data: {"):
                    if b'"error"' in line:
                        self.failed = "error event: " + line[:300].decode(errors="replace")
                        return
                    self.events += 1
        except (OSError, http.client.HTTPException, ValueError, AttributeError) as e:
            if not self.closed_by_us:
                self.failed = f"{type(e).__name__}: {e}"
        finally:
            self.finished.set()

    def leave(self):
        self.closed_by_us = True
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.conn.close()


@pytest.fixture(scope="module")
def pair(slow_model):
    reps = start_replicas(slow_model, 2)
    yield reps
    for s in reps:
        assert s.stop() == 0, s.stderr()


@pytest.mark.parametrize("kind", ROUTERS)
def test_streaming_passes_through(pair, kind):
    r = start_router(kind, [s.port for s in pair])
    try:
        body = {"model": "slow", "messages": [{"role": "user", "content": f"count to ten, {kind}"}],
                "max_tokens": 24, "temperature": 0, "ignore_eos": True, "performance_metrics": True}
        got = serve_client.post_stream(routers.LOOPBACK, r.port, "/v1/chat/completions", body)
        assert got["status"] == 200 and got["error"] is None, got
        assert len(got["chunk_times"]) > 1, got  # many chunks, not one buffered body
        final = got["final"]
        assert final["usage"]["completion_tokens"] == 24, final
        assert serve_client.metrics_violations(final["metrics"], final["usage"], got["first_s"], got["total_s"]) == []
        # The same greedy request straight to a replica gives the same text.
        status, direct = pair[0].post("/v1/chat/completions", dict(body, stream=False))
        assert status == 200
        assert got["text"] == direct["choices"][0]["message"]["content"]
    finally:
        r.stop()


@pytest.mark.parametrize("kind", ROUTERS)
def test_client_that_leaves_cancels_on_its_replica(pair, kind):
    r = start_router(kind, [s.port for s in pair])
    try:
        before = [len(log_499s(s)) for s in pair]
        st = Stream(r.port, f"a client that leaves, via {kind}")
        st.start()
        wait_for(lambda: st.events >= 3 or st.finished.is_set(), "the first chunks through the router")
        assert st.failed is None and not st.done, st.failed
        st.leave()
        # The router drops its upstream connection; the replica cancels and logs 499.
        wait_for(lambda: sum(len(log_499s(s)) for s in pair) == sum(before) + 1, "a 499 on a replica")
        line = [l for s, b in zip(pair, before) for l in log_499s(s)[b:]][0]
        assert "finish=cancelled" in line, line
        n = int(re.search(r"completion_tokens=(\d+)", line).group(1))
        assert 0 < n < 4000, line
        wait_for(lambda: all(metric(s, "ft_requests_running") == 0 for s in pair), "nothing left running")
    finally:
        r.stop()


def test_cache_aware_keeps_each_prefix_on_one_replica(pair):
    # Two documents, requests one at a time in the order A A B B A B A B.
    # Cache-aware: each document stays on the replica that computed it, so
    # every request but each document's first finds its prefix cached (6).
    # Round-robin alternates replicas: the second A and both Bs of the first
    # pairs land where their document is not (4). Sequential requests keep
    # the load even, so the cache-aware policy never rebalances.
    if not routers.sglang_router_available():
        pytest.skip("sglang-router is not installed (tests/requirements.txt)")
    hits = {}
    for policy in ("cache_aware", "round_robin"):
        r = routers.SglangRouter([s.port for s in pair], policy=policy)
        try:
            docs = {d: f"{policy} document {d}: " + " ".join(f"{d}{i} lamp harbour" for i in range(30))
                    for d in "AB"}
            n = 0
            for i, d in enumerate("AABBABAB"):
                st, data, _ = serve_client.post_json(
                    routers.LOOPBACK, r.port, "/v1/chat/completions",
                    {"model": "slow", "max_tokens": 2, "temperature": 0,
                     "messages": [{"role": "system", "content": docs[d]}, {"role": "user", "content": f"q{i}"}]})
                assert st == 200, data
                u = data["usage"]
                n += u["prompt_tokens_details"]["cached_tokens"] >= u["prompt_tokens"] // 2
            hits[policy] = n
        finally:
            r.stop()
    assert hits == {"cache_aware": 6, "round_robin": 4}, hits


@pytest.mark.parametrize("kind", ROUTERS)
def test_killed_replica_loses_only_its_requests(slow_model, kind):
    reps = start_replicas(slow_model, 3)
    r = None
    streams = []
    try:
        r = start_router(kind, [s.port for s in reps])
        streams = [Stream(r.port, f"stream {i} through {kind}") for i in range(4)]
        for st in streams:
            st.start()
        wait_for(lambda: all(st.events >= 2 or st.finished.is_set() for st in streams), "every stream under way")
        assert not [st.failed for st in streams if st.failed], [st.failed for st in streams]
        running = [metric(s, "ft_requests_running") for s in reps]
        assert sum(running) == 4, running
        victim = max(range(3), key=lambda i: running[i])
        lost = int(running[victim])
        assert 0 < lost < 4, running  # round-robin spread them: some run elsewhere
        counts = [st.events for st in streams]

        reps[victim].proc.send_signal(signal.SIGKILL)
        reps[victim].proc.wait(timeout=WAIT_S)
        # The victim's streams break; the others go on producing tokens.
        wait_for(lambda: sum(1 for st in streams if st.failed) == lost, f"{lost} streams to fail")
        alive = [(st, c) for st, c in zip(streams, counts) if not st.failed]
        assert len(alive) == 4 - lost
        wait_for(lambda: all(st.events >= c + 5 for st, c in alive), "the other streams to go on")
        assert not [st for st, _ in alive if st.failed or st.done]

        # New requests right after the kill: all served by the survivors.
        survivors = [s for i, s in enumerate(reps) if i != victim]
        before = sum(len(posts(s)) for s in survivors)
        codes = []
        for i in range(6):
            status, data, _ = serve_client.post_json(routers.LOOPBACK, r.port, "/v1/completions",
                                                     {"model": "slow", "prompt": f"after the kill {i}",
                                                      "max_tokens": 2, "temperature": 0})
            codes.append(status)
            if status == 200:
                assert data["usage"]["completion_tokens"] == 2
        assert codes == [200] * 6, codes
        assert sum(len(posts(s)) for s in survivors) == before + 6
        if kind == "haproxy":
            # The health check takes the dead replica out of the rotation.
            wait_for(lambda: r.server_status().get(f"r{victim}", "").startswith("DOWN"), "HAProxy to mark it DOWN")

        for st, _ in alive:
            st.leave()
        wait_for(lambda: all(metric(s, "ft_requests_running") == 0 for s in survivors), "survivors idle")
    finally:
        for st in streams:
            if not st.finished.is_set():
                st.leave()
        if r:
            r.stop()
        for i, s in enumerate(reps):
            rc = s.stop()
            assert s.proc.returncode is not None
            if s.proc.returncode != -signal.SIGKILL:
                assert rc == 0, s.stderr()
