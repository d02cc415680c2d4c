#!/usr/bin/env python3
"""Soak test of `ft serve`: N concurrent clients for a while, every kind of
traffic a public endpoint sees, and what must hold at the end.

Each client thread picks, from its own seeded generator, one of:
  chat         /v1/chat/completions, short or long prompt, streamed or not
  prefix       /v1/completions sharing a long prefix with other requests
  leave        a streamed request the client abandons after a few chunks
  invalid      a malformed or out-of-range request (expects 400)
  burst        several requests at once past --max-queue (expects 200 or 503)
and checks each answer: the status is one the kind allows, and every
completed response's metrics satisfy the metrics contract
(bench/serve_client.py: metrics_violations). A sampler thread reads the
server's RSS and open descriptors every second.

At the end: unexpected statuses, metrics violations, the slope of RSS after
warm-up (the first --warmup fraction of the run; least squares, MiB/min),
the spread of open descriptors after warm-up, and whether /metrics'
ft_requests_total{endpoint,status} equals what the clients saw (with 499
for each abandoned stream). Exit status 0 when there were no unexpected
statuses, no violations and the counters match; RSS and descriptors are
reported (and judged by the caller: tests/e2e/test_soak.py).

Usage: bench/soak.py [--ft build/ft] [-m MODEL.gguf] [--clients 16] [--duration 600]
                     [--parallel 4] [--max-queue 16] [--cache-mib 16] [--seed 1] [--json-out FILE]
Only the Python standard library. Loopback only: it starts its own server.
"""
import argparse
import collections
import http.client
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_client  # noqa: E402

WORDS = ("keeper lamp storm harbour gull tide beacon rope anchor signal fog reef pier mast lantern "
         "current sail compass chart ledger").split()
SHARED_PREFIX = " ".join(WORDS * 12) + ". "


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_kind = collections.Counter()
        self.statuses = collections.Counter()  # (endpoint, status) as the server should count them
        self.unexpected = []
        self.violations = []
        self.completion_tokens = 0

    def saw(self, kind, endpoint, status, allowed, detail=""):
        with self.lock:
            self.by_kind[kind] += 1
            self.statuses[(endpoint, status)] += 1
            if status not in allowed:
                self.unexpected.append(f"{kind} {endpoint}: HTTP {status} (allowed {sorted(allowed)}) {detail}")

    def check(self, kind, data):
        bad = serve_client.metrics_violations((data or {}).get("metrics"), (data or {}).get("usage"))
        with self.lock:
            if bad:
                self.violations.append(f"{kind}: " + "; ".join(bad))
            elif data:
                self.completion_tokens += data["usage"]["completion_tokens"]


def prompt(rng, n_words):
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def one_request(srv, rng, tally):
    kind = rng.choices(["chat", "prefix", "leave", "invalid", "burst"], weights=[6, 4, 1, 1, 0.25])[0]
    host, port = srv.host, srv.port
    if kind == "chat":
        words = rng.choice([4, 20, 200])
        body = {"messages": [{"role": "user", "content": prompt(rng, words)}], "max_tokens": rng.randint(1, 24),
                "performance_metrics": True, "seed": rng.randrange(1 << 30)}
        if rng.random() < 0.5:
            r = serve_client.post_stream(host, port, "/v1/chat/completions", body)
            tally.saw(kind, "/v1/chat/completions", r["status"], {200, 503}, r["error"] or "")
            if r["status"] == 200:
                tally.check(kind, r["final"])
        else:
            st, data, _ = serve_client.post_json(host, port, "/v1/chat/completions", body)
            tally.saw(kind, "/v1/chat/completions", st, {200, 503})
            if st == 200:
                tally.check(kind, data)
    elif kind == "prefix":
        body = {"prompt": SHARED_PREFIX + prompt(rng, 6), "max_tokens": rng.randint(1, 16), "performance_metrics": True}
        st, data, _ = serve_client.post_json(host, port, "/v1/completions", body)
        tally.saw(kind, "/v1/completions", st, {200, 503})
        if st == 200:
            tally.check(kind, data)
    elif kind == "leave":
        # Streams, reads a few chunks, hangs up: the server must cancel and log 499.
        body = json.dumps({"messages": [{"role": "user", "content": prompt(rng, 30)}], "max_tokens": 400,
                           "ignore_eos": True, "stream": True})
        c = http.client.HTTPConnection(host, port, timeout=600)
        c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status == 200:
            for _ in range(rng.randint(1, 4)):
                r.readline()
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
            tally.saw(kind, "/v1/chat/completions", 499, {499})
        else:
            r.read()
            c.close()
            tally.saw(kind, "/v1/chat/completions", r.status, {503})
    elif kind == "invalid":
        bad = rng.choice([b"{not json", json.dumps({"messages": []}).encode(),
                          json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": -3}).encode(),
                          json.dumps({"prompt": "x", "temperature": "hot"}).encode(), b"\xff\xfe"])
        path = "/v1/completions" if b"prompt" in bad else "/v1/chat/completions"
        c = http.client.HTTPConnection(host, port, timeout=600)
        c.request("POST", path, body=bad, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        tally.saw(kind, path, r.status, {400}, data[:200].decode(errors="replace"))
        if b'"error"' not in data:
            with tally.lock:
                tally.unexpected.append(f"invalid {path}: no OpenAI error body: {data[:200]!r}")
    else:  # burst: more at once than --parallel + --max-queue can hold
        n = 14
        results = [None] * n

        def go(i):
            results[i] = serve_client.post_json(host, port, "/v1/completions",
                                                {"prompt": prompt(rng, 8), "max_tokens": 8, "performance_metrics": True})

        ts = [threading.Thread(target=go, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for st, data, _ in results:
            tally.saw(kind, "/v1/completions", st, {200, 503})
            if st == 200:
                tally.check(kind, data)


def scrape_requests_total(srv):
    c = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line.startswith("ft_requests_total{"):
            labels, value = line[len("ft_requests_total{"):].split("} ")
            d = dict(kv.split("=", 1) for kv in labels.split(","))
            out[(d["endpoint"].strip('"'), int(d["status"].strip('"')))] = int(float(value))
    return out


def slope_mib_per_min(samples):
    if len(samples) < 3:
        return 0.0
    n = len(samples)
    mx = sum(t for t, _ in samples) / n
    my = sum(v for _, v in samples) / n
    sxx = sum((t - mx) ** 2 for t, _ in samples)
    sxy = sum((t - mx) * (v - my) for t, v in samples)
    return (sxy / sxx) * 60.0 if sxx > 0 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ft", default=serve_client.DEFAULT_FT)
    ap.add_argument("-m", "--model")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of traffic")
    ap.add_argument("--warmup", type=float, default=0.25, help="fraction of the run before RSS is judged")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--max-queue", type=int, default=16)
    ap.add_argument("--cache-mib", type=int, default=16)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json-out")
    a = ap.parse_args()
    if not 1 <= a.clients <= 256 or not 1 <= a.duration <= 24 * 3600:
        ap.error("--clients must be 1..256 and --duration 1..86400")

    args = ["-t", str(a.threads), "-c", "1024", "-np", str(a.parallel), "--max-queue", str(a.max_queue),
            "--cache-mib", str(a.cache_mib)]
    if a.model:
        args = ["-m", a.model, *args]
    srv = serve_client.Server(a.ft, args)
    tally = Tally()
    stop = threading.Event()
    samples = []  # (seconds, rss MiB, fds)
    t0 = time.monotonic()

    def sampler():
        while not stop.is_set():
            samples.append((time.monotonic() - t0, serve_client.rss_mib(srv.pid), fd_count(srv.pid)))
            stop.wait(1.0)

    def client(i):
        rng = random.Random(a.seed * 1000 + i)
        while time.monotonic() - t0 < a.duration:
            try:
                one_request(srv, rng, tally)
            except Exception as e:  # a client-side failure is a finding, not a crash of the soak
                with tally.lock:
                    tally.unexpected.append(f"client {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=sampler)] + [threading.Thread(target=client, args=(i,))
                                                      for i in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    elapsed = time.monotonic() - t0
    time.sleep(1.5)  # abandoned streams are cancelled within a step; let their 499 lines land
    stop.set()
    threads[0].join()
    server_counts = scrape_requests_total(srv)
    status = srv.stop()

    judged = [s for s in samples if s[0] >= a.warmup * a.duration and s[1] is not None]
    rss_slope = slope_mib_per_min([(t, r) for t, r, _ in judged])
    fds = [f for _, _, f in judged if f is not None]
    client_counts = dict(tally.statuses)
    mismatch = {f"{ep} {st}": (client_counts.get((ep, st), 0), server_counts.get((ep, st), 0))
                for ep, st in set(client_counts) | {k for k in server_counts if k[0].startswith("/v1/")}
                if client_counts.get((ep, st), 0) != server_counts.get((ep, st), 0)}
    result = {
        "duration_s": round(elapsed, 1),
        "clients": a.clients,
        "requests": sum(tally.by_kind.values()),
        "by_kind": dict(tally.by_kind),
        "statuses": {f"{ep} {st}": n for (ep, st), n in sorted(client_counts.items())},
        "completion_tokens": tally.completion_tokens,
        "unexpected": tally.unexpected[:50],
        "n_unexpected": len(tally.unexpected),
        "violations": tally.violations[:50],
        "n_violations": len(tally.violations),
        "counter_mismatch": mismatch,
        "rss_mib_start": samples[0][1] if samples else None,
        "rss_mib_end": samples[-1][1] if samples else None,
        "rss_slope_mib_per_min": round(rss_slope, 3),
        "fds_after_warmup": [min(fds), max(fds)] if fds else None,
        "server_exit": status,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if a.json_out:
        with open(a.json_out, "w") as f:
            f.write(text + "\n")
    ok = not tally.unexpected and not tally.violations and not mismatch and status == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
