"""End-to-end tests of continuous batching in `ft serve`: concurrent requests
give the greedy output they give one at a time, the block prefix cache reports
cached tokens for a shared prompt prefix, every response keeps the metrics
invariants of docs/architecture.md (Metrics contract) while requests share
steps, and an abandoned stream leaves the others running. Nothing here asserts
on speed."""
import http.client
import json
import threading

import pytest

from test_serve import Server, check_metrics, tiny_model

openai = pytest.importorskip("openai")
prom_parser = pytest.importorskip("prometheus_client.parser")

PROMPTS = [
    "The lighthouse keeper counted the ships",
    "Seven bakers in a row",
    "Once upon a time, in a land far away, there lived a king who loved numbers",
    "Mountains",
    "The committee met on a rainy Tuesday to discuss the budget",
    "A quiet village at the edge of the forest",
    "Rivers run to the sea and the sea",
    "Numbers: one, two, three, four",
]

SYSTEM = ("You are a careful assistant. Answer in short sentences, never use jargon unless the user asks for it, "
          "check your facts twice, say so when you are unsure, and keep every answer under one hundred words "
          "because the people who read them are busy and read on small screens while they travel to work.")


# The scalar kernels: a step of many rows would otherwise go through the
# quantized GEMM, whose float rounding differs from the single-row vec_dot
# a request alone gets, and the random-weight model's near-ties would flip.
# What is tested here is the scheduler (no cross-talk between sequences, the
# KV blocks they share), which the kernel level does not change.
SAME_KERNELS = {"FT_ISA": "scalar"}


@pytest.fixture(scope="module")
def srv_batch():
    s = Server(tiny_model(), "-c", "512", "-np", "8", "-b", "64", "--enable-performance-metrics", env=SAME_KERNELS)
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def srv_alone():
    s = Server(tiny_model(), "-c", "512", "-np", "1", "--no-prefix-cache", "--enable-performance-metrics",
               env=SAME_KERNELS)
    yield s
    assert s.stop() == 0, s.stderr()


def completion(s, prompt, max_tokens):
    status, r = s.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    assert status == 200, r
    return r


def run_concurrently(fn, n):
    results, errors = [None] * n, []

    def go(i):
        try:
            results[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def prometheus(s):
    status, _, body = s.request("GET", "/metrics")
    assert status == 200
    out = {}
    for fam in prom_parser.text_string_to_metric_families(body.decode()):
        for smp in fam.samples:
            if not smp.labels:
                out[smp.name] = smp.value
    return out


def test_concurrent_requests_match_sequential(srv_batch, srv_alone):
    max_tokens = [24, 31, 17, 40, 9, 28, 35, 20]
    alone = [completion(srv_alone, p, max_tokens[i]) for i, p in enumerate(PROMPTS)]
    together = run_concurrently(lambda i: completion(srv_batch, PROMPTS[i], max_tokens[i]), len(PROMPTS))
    for a, b in zip(alone, together):
        assert b["choices"][0]["text"] == a["choices"][0]["text"]
        assert b["usage"]["completion_tokens"] == a["usage"]["completion_tokens"]
        assert b["choices"][0]["finish_reason"] == a["choices"][0]["finish_reason"]
        check_metrics(b["metrics"], b["usage"])
        check_metrics(a["metrics"], a["usage"])
    # Twice as many requests as slots: the second wave waits, and all finish.
    twice = run_concurrently(lambda i: completion(srv_batch, PROMPTS[i % 8], max_tokens[i % 8]), 16)
    for i, r in enumerate(twice):
        assert r["choices"][0]["text"] == alone[i % 8]["choices"][0]["text"]
        check_metrics(r["metrics"], r["usage"])
    p = prometheus(srv_batch)
    assert p["ft_requests_running"] == 0
    assert p["ft_requests_waiting"] == 0


def test_cached_tokens_on_shared_prefix():
    s = Server(tiny_model(), "-c", "512", "-np", "4", "--enable-performance-metrics")
    try:
        def chat(question):
            status, r = s.post("/v1/chat/completions", {
                "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
                "max_tokens": 6, "temperature": 0})
            assert status == 200, r
            check_metrics(r["metrics"], r["usage"])
            return r

        first = chat("What is the tallest mountain?")
        assert first["usage"]["prompt_tokens_details"]["cached_tokens"] <= 1
        # Different questions after the same system prompt: the shared part
        # (at least its whole blocks of 16 tokens) comes from the cache.
        others = run_concurrently(lambda i: chat(["Why do cats purr?", "How far is the moon?",
                                                  "Name a red fruit."][i]), 3)
        for r in others:
            assert r["usage"]["prompt_tokens_details"]["cached_tokens"] >= 48, r["usage"]
            assert r["usage"]["prompt_tokens_details"]["cached_tokens"] < r["usage"]["prompt_tokens"]
        # The same conversation again: everything but the last prompt token.
        again = chat("What is the tallest mountain?")
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == again["usage"]["prompt_tokens"] - 1
        assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
        everything = [first, *others, again]
        p = prometheus(s)
        assert p["ft_prompt_tokens_cached_total"] == sum(r["usage"]["prompt_tokens_details"]["cached_tokens"]
                                                         for r in everything)
        assert p["ft_prompt_tokens_total"] == sum(r["usage"]["prompt_tokens"] for r in everything)
    finally:
        assert s.stop() == 0, s.stderr()


def test_abandoned_stream_does_not_stall_others(srv_batch):
    # A long stream whose client goes away after a few chunks, while two
    # other requests run: they finish and the server has nothing left running.
    c = http.client.HTTPConnection("127.0.0.1", srv_batch.port, timeout=120)
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Count with me", "max_tokens": 400,
                                                          "temperature": 0, "stream": True, "ignore_eos": True}),
              headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    assert resp.status == 200
    resp.read1(64)
    others = run_concurrently(lambda i: completion(srv_batch, PROMPTS[i], 30), 2)
    c.close()
    for r in others:
        check_metrics(r["metrics"], r["usage"])
    for _ in range(200):
        if prometheus(srv_batch)["ft_requests_running"] == 0:
            break
        threading.Event().wait(0.05)
    assert prometheus(srv_batch)["ft_requests_running"] == 0


def test_parallel_flags(ft):
    r = ft("serve", "-m", str(tiny_model()), "-np", "0")
    assert r.returncode == 2 and "--parallel" in r.stderr.decode()
    r = ft("serve", "-m", str(tiny_model()), "--cache-mib", "-1")
    assert r.returncode == 2 and "--cache-mib" in r.stderr.decode()
    r = ft("serve", "--help")
    for flag in ("-np", "--parallel", "-b", "--batch-tokens", "--cache-mib", "--cache-slots", "--batch-size",
                 "--no-prefix-cache"):
        assert flag in r.stdout.decode()
    # The old names still work.
    s = Server(tiny_model(), "-c", "256", "--cache-slots", "3", "--batch-size", "32")
    try:
        assert "3 parallel requests" in s.stderr()
        assert completion(s, "Hello", 3)["usage"]["completion_tokens"] >= 1
    finally:
        assert s.stop() == 0, s.stderr()
