"""End-to-end tests of `ft serve`: a real server on a free port, driven with
the official `openai` client and with raw HTTP.

The small model is llama-Q8_0 from ../shared/models (tests skip when it is
absent); one group runs against the real Gemma 3 270M model from PyPI, and one
against the AddressSanitizer build (FT_ASAN_BIN) when CI provides it. Nothing
here asserts on speed: timings are only checked against each other (the
invariants of docs/architecture.md, Metrics contract) and against what the
client measured."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import ASAN_ENV, SHARED, asan_bin, ft_bin

openai = pytest.importorskip("openai")
prom_parser = pytest.importorskip("prometheus_client.parser")

TINY = SHARED / "models" / "llama-Q8_0.gguf"
METRIC_FIELDS = ["ttft_ms", "queue_time_ms", "prefill_tokens", "cached_prompt_tokens", "prefill_time_ms",
                 "prefill_tokens_per_second", "decode_tokens", "decode_time_ms", "decode_tokens_per_second",
                 "inter_token_latency_ms", "total_time_ms"]


class Server:
    """A running `ft serve`; stdout (the access log) and stderr go to files."""

    def __init__(self, model, *args, binary=None, env=None, wait_ready=True):
        self.dir = tempfile.mkdtemp(prefix="ft-serve-")
        self.out_path = os.path.join(self.dir, "stdout")
        self.err_path = os.path.join(self.dir, "stderr")
        e = dict(os.environ)
        e.pop("FT_MODEL", None)
        e.update(env or {})
        cmd = [binary or ft_bin(), "serve", "-m", str(model), "--port", "0", "-t", "2", *map(str, args)]
        self.proc = subprocess.Popen(cmd, stdout=open(self.out_path, "wb"), stderr=open(self.err_path, "wb"), env=e)
        self.port = self._wait_port()
        if wait_ready:
            self.wait_ready()

    def _wait_port(self, timeout=60):
        t0 = time.time()
        while time.time() - t0 < timeout:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.stderr())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"ft serve exited {self.proc.returncode}: {self.stderr()}")
            time.sleep(0.02)
        raise RuntimeError("ft serve did not start listening: " + self.stderr())

    def wait_ready(self, timeout=300):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ft serve exited {self.proc.returncode}: {self.stderr()}")
            status, _, _ = self.request("GET", "/health")
            if status == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("ft serve never became ready: " + self.stderr())

    def stderr(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode(errors="replace")

    def log_lines(self):
        with open(self.out_path, "rb") as f:
            return [l for l in f.read().decode().splitlines() if l]

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}/v1"

    def client(self, api_key="none"):
        return openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, timeout=300)

    def request(self, method, path, body=None, headers=None, timeout=300):
        """Raw HTTP: (status, headers, body bytes)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def post(self, path, body, headers=None):
        status, _, data = self.request("POST", path, body, headers)
        return status, json.loads(data) if data else None

    def stop(self):
        """SIGTERM; returns the exit status (0 expected)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.proc.returncode


def tiny_model():
    if not TINY.exists():
        pytest.skip(f"{TINY} is absent: the small model comes with ../shared")
    return TINY


@pytest.fixture(scope="module")
def srv():
    s = Server(tiny_model(), "-c", "512", "--parallel", "4")
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def srv_metrics():
    s = Server(tiny_model(), "-c", "512", "--enable-performance-metrics", "--log-format", "json")
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def srv_nocache():
    s = Server(tiny_model(), "-c", "512", "--no-prefix-cache")
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def srv_key():
    s = Server(tiny_model(), "-c", "256", "--api-key", "sekrit-key", "--max-body-size", "4096")
    yield s
    assert s.stop() == 0, s.stderr()


def model_id(s):
    return s.client().models.list().data[0].id


def check_metrics(m, usage):
    """The invariants of the metrics contract (docs/architecture.md), on one
    response's metrics and usage."""
    assert list(m.keys()) == METRIC_FIELDS, m.keys()
    assert set(m["inter_token_latency_ms"]) == {"p50", "p90", "p99", "max"}
    assert usage["prompt_tokens"] == m["cached_prompt_tokens"] + m["prefill_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == m["cached_prompt_tokens"]
    assert m["decode_tokens"] == usage["completion_tokens"] - 1
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert 0 <= m["queue_time_ms"] <= m["ttft_ms"] <= m["total_time_ms"]
    assert 0 < m["prefill_time_ms"] <= m["ttft_ms"]
    assert m["decode_time_ms"] <= m["total_time_ms"]
    for tokens, ms, rate in (("prefill_tokens", "prefill_time_ms", "prefill_tokens_per_second"),
                             ("decode_tokens", "decode_time_ms", "decode_tokens_per_second")):
        if m[tokens] == 0 or m[ms] == 0:
            assert m[rate] is None, m
        else:
            assert m[rate] == pytest.approx(m[tokens] / (m[ms] / 1000.0), rel=1e-9)
    itl = m["inter_token_latency_ms"]
    assert 0 <= itl["p50"] <= itl["p90"] <= itl["p99"] <= itl["max"]
    if m["decode_tokens"] > 0:
        assert itl["max"] <= m["decode_time_ms"] + 1e-9


# ---- endpoints and shapes --------------------------------------------------------------

def test_help_lists_serve(ft):
    r = ft("serve", "--help")
    assert r.returncode == 0
    out = r.stdout.decode()
    for flag in ("--host", "--port", "--enable-performance-metrics", "--api-key", "--log-format", "--chat-template",
                 "-c", "-t"):
        assert flag in out


def test_health_and_models(srv):
    status, headers, body = srv.request("GET", "/health")
    assert status == 200 and json.loads(body) == {"status": "ok"}
    models = srv.client().models.list()
    assert [m.id for m in models.data] == ["llama-Q8_0"]
    assert models.data[0].object == "model"


def test_chat_completion_shape(srv):
    r = srv.client().chat.completions.create(model=model_id(srv), messages=[{"role": "user", "content": "Hello"}],
                                             max_tokens=8, temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == "llama-Q8_0"
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and c.message.role == "assistant" and isinstance(c.message.content, str)
    assert c.finish_reason == "length"
    assert r.usage.completion_tokens == 8
    assert r.usage.prompt_tokens > 1
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8
    assert r.usage.prompt_tokens_details.cached_tokens is not None
    # Plain OpenAI answer: no metrics unless asked for.
    assert "metrics" not in (r.model_extra or {})


def test_completion_shape(srv):
    r = srv.client().completions.create(model=model_id(srv), prompt="Once upon a time", max_tokens=5,
                                        temperature=0)
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert r.choices[0].finish_reason == "length" and isinstance(r.choices[0].text, str)
    assert r.usage.completion_tokens == 5
    assert r.usage.prompt_tokens_details.cached_tokens >= 0
    # Token ids and a one-element list are prompts too.
    status, body = srv.post("/v1/completions", {"prompt": [1, 100, 200, 300, 400], "max_tokens": 3, "temperature": 0})
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] == 5
    status, body = srv.post("/v1/completions", {"prompt": ["Once upon a time"], "max_tokens": 5, "temperature": 0})
    assert status == 200 and body["choices"][0]["text"] == r.choices[0].text


def test_content_parts_and_roles(srv):
    cl = srv.client()
    parts = cl.chat.completions.create(
        model=model_id(srv), max_tokens=4, temperature=0,
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}])
    plain = cl.chat.completions.create(
        model=model_id(srv), max_tokens=4, temperature=0,
        messages=[{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hello\nthere"}])
    # Text parts are joined with a newline; "developer" is the system role.
    assert parts.usage.prompt_tokens == plain.usage.prompt_tokens
    assert parts.choices[0].message.content == plain.choices[0].message.content


def test_stop_strings(srv):
    cl = srv.client()
    base = cl.completions.create(model=model_id(srv), prompt="The old lighthouse keeper", max_tokens=16,
                                 temperature=0).choices[0].text
    words = base.split()
    assert len(words) >= 3, base
    stop = words[2]
    cut = cl.completions.create(model=model_id(srv), prompt="The old lighthouse keeper", max_tokens=16,
                                temperature=0, stop=[stop, "zzzz-never"])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == base[:base.index(stop)]
    single = cl.completions.create(model=model_id(srv), prompt="The old lighthouse keeper", max_tokens=16,
                                   temperature=0, stop=stop)
    assert single.choices[0].text == cut.choices[0].text


def test_seed_gives_same_text(srv):
    cl = srv.client()
    kw = dict(model=model_id(srv), prompt="In the beginning", max_tokens=12, temperature=1.0,
              extra_body={"top_k": 0, "min_p": 0.0})
    a = cl.completions.create(seed=7, **kw).choices[0].text
    b = cl.completions.create(seed=7, **kw).choices[0].text
    c = cl.completions.create(seed=8, **kw).choices[0].text
    assert a == b
    assert a != c


def test_ignore_eos_generates_past_end_of_sequence(srv):
    # Find a seed whose sample ends early by end-of-sequence (the model and
    # the sampler are seeded, so the search goes the same way every run).
    body = {"prompt": "Once upon a time", "max_tokens": 64}
    for seed in range(1, 41):
        status, early = srv.post("/v1/completions", dict(body, seed=seed))
        assert status == 200, early
        if early["choices"][0]["finish_reason"] == "stop":
            break
    else:
        pytest.fail("no seed in 1..40 ended by end-of-sequence within 64 tokens")
    assert early["usage"]["completion_tokens"] < 64, early
    status, full = srv.post("/v1/completions", dict(body, seed=seed, ignore_eos=True))
    assert status == 200, full
    assert full["choices"][0]["finish_reason"] == "length", full
    assert full["usage"]["completion_tokens"] == 64, full
    assert full["choices"][0]["text"].startswith(early["choices"][0]["text"]), (early, full)


# ---- streaming ---------------------------------------------------------------------------

def sse_events(srv, path, body):
    """Raw SSE: the list of decoded `data:` payloads, with [DONE] kept."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Type").startswith("text/event-stream")
    raw = r.read()
    c.close()
    events = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        assert block.startswith(b"data: "), block
        payload = block[6:].decode("utf-8")  # strict: every event is whole UTF-8
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_stream_chat_raw_shapes(srv):
    body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "temperature": 0, "stream": True}
    ev = sse_events(srv, "/v1/chat/completions", body)
    assert ev[-1] == "[DONE]"
    chunks = ev[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["delta"] == {} and chunks[-1]["choices"][0]["finish_reason"] == "length"
    for c in chunks[1:-1]:
        assert set(c["choices"][0]["delta"]) == {"content"} and c["choices"][0]["finish_reason"] is None
    assert all("usage" not in c and "metrics" not in c for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    plain = srv.post("/v1/chat/completions", dict(body, stream=False))[1]
    assert text == plain["choices"][0]["message"]["content"]

    # include_usage: "usage": null on every chunk, then a usage chunk with no choices.
    ev = sse_events(srv, "/v1/chat/completions", dict(body, stream_options={"include_usage": True}))
    chunks = ev[:-1]
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    assert "metrics" not in chunks[-1]

    # metrics without include_usage: a final chunk of its own, choices [].
    ev = sse_events(srv, "/v1/chat/completions", dict(body, performance_metrics=True))
    last = ev[-2]
    assert last["choices"] == [] and "usage" not in last and list(last["metrics"]) == METRIC_FIELDS
    assert ev[-3]["choices"][0]["finish_reason"] == "length"


def test_stream_completions_raw_shapes(srv):
    body = {"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "performance_metrics": True}
    ev = sse_events(srv, "/v1/completions", body)
    assert ev[-1] == "[DONE]"
    chunks = ev[:-1]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    final = chunks[-1]
    assert final["choices"] == []
    check_metrics(final["metrics"], final["usage"])


def test_stream_openai_client_metrics_and_client_timing(srv):
    cl = srv.client()
    t0 = time.perf_counter()
    stream = cl.chat.completions.create(model=model_id(srv), messages=[{"role": "user", "content": "Tell a story"}],
                                        max_tokens=24, temperature=0, stream=True,
                                        stream_options={"include_usage": True},
                                        extra_body={"performance_metrics": True})
    first_content = None
    chunks = []
    for chunk in stream:
        if first_content is None and chunk.choices and chunk.choices[0].delta.content:
            first_content = time.perf_counter() - t0
        chunks.append(chunk)
    total = time.perf_counter() - t0
    assert chunks[0].choices[0].delta.role == "assistant"
    final = chunks[-1]
    assert final.choices == [] and final.usage.completion_tokens == 24
    m = final.model_extra["metrics"]
    check_metrics(m, final.usage.model_dump())
    # The engine's clock starts after the body arrived and stops before the
    # last bytes left: it never exceeds what the client measured.
    assert first_content is not None
    assert m["ttft_ms"] <= first_content * 1000.0
    assert m["total_time_ms"] <= total * 1000.0


def test_streamed_text_is_whole_utf8(srv):
    # Random weights at temperature 1.5 sample byte-fallback tokens often;
    # no event may carry a split character (the strict decode would fail).
    for seed in range(3):
        body = {"prompt": "Zürich 東京 😀", "max_tokens": 60, "temperature": 1.5, "seed": seed, "top_k": 0,
                "min_p": 0, "top_p": 1, "stream": True}
        ev = sse_events(srv, "/v1/completions", body)
        streamed = "".join(c["choices"][0]["text"] for c in ev[:-1])
        plain = srv.post("/v1/completions", dict(body, stream=False))[1]["choices"][0]["text"]
        assert streamed == plain


# ---- metrics opt-in and invariants ----------------------------------------------------

def test_metrics_opt_in(srv, srv_metrics):
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
    assert "metrics" not in srv.post("/v1/chat/completions", body)[1]
    r = srv.post("/v1/chat/completions", dict(body, performance_metrics=True))[1]
    check_metrics(r["metrics"], r["usage"])
    r = srv_metrics.post("/v1/chat/completions", body)[1]
    check_metrics(r["metrics"], r["usage"])
    assert "metrics" not in srv_metrics.post("/v1/chat/completions", dict(body, performance_metrics=False))[1]
    ev = sse_events(srv_metrics, "/v1/chat/completions", dict(body, stream=True, performance_metrics=False))
    assert all("metrics" not in c for c in ev[:-1])


def test_invariants_over_many_requests(srv_metrics):
    cl = srv_metrics.client()
    for i, n in enumerate([1, 2, 7, 30]):
        r = cl.completions.create(model=model_id(srv_metrics), prompt=f"Request number {i}:", max_tokens=n,
                                  temperature=0.7, seed=i)
        m = r.model_extra["metrics"]
        check_metrics(m, r.usage.model_dump())
        if n == 1:
            assert m["decode_tokens"] == 0 and m["decode_tokens_per_second"] is None
            assert m["decode_time_ms"] == 0


def test_prefix_cache_hits_and_same_greedy_output(srv, srv_nocache):
    system = {"role": "system", "content": "You are a terse assistant that answers in one line. " * 4}
    turn1 = [system, {"role": "user", "content": "What is a lighthouse?"}]
    body = {"messages": turn1, "max_tokens": 12, "temperature": 0, "performance_metrics": True}
    a = srv.post("/v1/chat/completions", body)[1]
    b = srv.post("/v1/chat/completions", body)[1]
    # The identical prompt again: everything but its last token is reused.
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == b["usage"]["prompt_tokens"] - 1
    assert b["metrics"]["prefill_tokens"] == 1
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    cold = srv_nocache.post("/v1/chat/completions", body)[1]
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert cold["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]

    # The conversation grows by one turn: the earlier turns come from the cache.
    turn2 = turn1 + [{"role": "assistant", "content": b["choices"][0]["message"]["content"]},
                     {"role": "user", "content": "And a windmill?"}]
    body2 = dict(body, messages=turn2)
    c = srv.post("/v1/chat/completions", body2)[1]
    assert c["usage"]["prompt_tokens_details"]["cached_tokens"] >= a["usage"]["prompt_tokens"] - 1
    check_metrics(c["metrics"], c["usage"])
    cold2 = srv_nocache.post("/v1/chat/completions", body2)[1]
    assert cold2["choices"][0]["message"]["content"] == c["choices"][0]["message"]["content"]

    # Same system prompt, another question: the system prompt is reused.
    turn3 = [system, {"role": "user", "content": "What is a harbour?"}]
    d = srv.post("/v1/chat/completions", dict(body, messages=turn3))[1]
    assert d["usage"]["prompt_tokens_details"]["cached_tokens"] >= 20
    cold3 = srv_nocache.post("/v1/chat/completions", dict(body, messages=turn3))[1]
    assert cold3["choices"][0]["message"]["content"] == d["choices"][0]["message"]["content"]


# ---- /metrics and the access log ---------------------------------------------------------

def test_prometheus_metrics(srv_metrics):
    cl = srv_metrics.client()
    for i in range(3):
        cl.chat.completions.create(model=model_id(srv_metrics), messages=[{"role": "user", "content": f"hi {i}"}],
                                   max_tokens=5, temperature=0)
    srv_metrics.post("/v1/chat/completions", {"messages": []})  # a 400, counted too
    status, headers, body = srv_metrics.request("GET", "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    families = {f.name: f for f in prom_parser.text_string_to_metric_families(text)}
    for h in ("ft_time_to_first_token_seconds", "ft_inter_token_latency_seconds", "ft_request_queue_time_seconds",
              "ft_request_prefill_time_seconds", "ft_request_decode_time_seconds", "ft_request_duration_seconds"):
        assert families[h].type == "histogram", h
    for c in ("ft_requests", "ft_prompt_tokens", "ft_prompt_tokens_cached", "ft_generation_tokens"):
        assert families[c].type == "counter", c
    for g in ("ft_requests_running", "ft_requests_waiting", "ft_kv_cache_usage_ratio"):
        assert families[g].type == "gauge", g

    def sample(family, name, **labels):
        for s in families[family].samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
        return None

    assert sample("ft_requests", "ft_requests_total", endpoint="/v1/chat/completions", status="200") >= 3
    assert sample("ft_requests", "ft_requests_total", endpoint="/v1/chat/completions", status="400") >= 1
    assert sample("ft_generation_tokens", "ft_generation_tokens_total") >= 15
    n = sample("ft_time_to_first_token_seconds", "ft_time_to_first_token_seconds_count")
    assert n >= 3
    assert sample("ft_time_to_first_token_seconds", "ft_time_to_first_token_seconds_bucket", le="+Inf") == n
    # ITL: one observation per gap, 4 per 5-token request.
    assert sample("ft_inter_token_latency_seconds", "ft_inter_token_latency_seconds_count") >= 12
    assert 0 < sample("ft_kv_cache_usage_ratio", "ft_kv_cache_usage_ratio") <= 1
    assert sample("ft_requests_running", "ft_requests_running") == 0
    if shutil.which("promtool"):
        r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True)
        assert r.returncode == 0, r.stdout + r.stderr


def test_access_log_json(srv_metrics):
    before = len(srv_metrics.log_lines())
    r = srv_metrics.post("/v1/completions", {"prompt": "Log me", "max_tokens": 3, "temperature": 0})[1]
    srv_metrics.request("GET", "/nope")
    lines = srv_metrics.log_lines()[before:]
    assert len(lines) == 2
    gen, missing = (json.loads(l) for l in lines)
    assert gen["method"] == "POST" and gen["path"] == "/v1/completions" and gen["status"] == 200
    assert gen["finish_reason"] == "length" and gen["completion_tokens"] == 3
    assert gen["metrics"] == {k: r["metrics"][k] for k in METRIC_FIELDS}
    assert missing["status"] == 404 and missing["path"] == "/nope" and "error" in missing


def test_access_log_text(srv):
    before = len(srv.log_lines())
    srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})
    line = srv.log_lines()[before:][0]
    assert '"POST /v1/chat/completions" 200 finish=length' in line
    for key in ("prompt_tokens=", "cached_prompt_tokens=", "completion_tokens=2", "queue_time_ms=", "ttft_ms=",
                "prefill_time_ms=", "decode_time_ms=", "total_time_ms="):
        assert key in line, line


# ---- errors ------------------------------------------------------------------------------

def check_error(status, body, want_status, param=None, contains=None):
    assert status == want_status, (status, body)
    assert set(body) == {"error"}
    e = body["error"]
    assert set(e) == {"message", "type", "param", "code"}
    assert isinstance(e["message"], str) and e["message"]
    assert e["type"] == ("invalid_request_error" if want_status < 500 and want_status != 401 else e["type"])
    if param is not None:
        assert e["param"] == param, e
    if contains:
        assert contains in e["message"], e


BAD_CHAT = [
    ({"messages": "hi"}, "messages", "must be an array"),
    ({}, "messages", "required"),
    ({"messages": []}, "messages", "must not be empty"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role", "unknown role"),
    ({"messages": [{"role": "user"}]}, "messages[0].content", "required"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", None),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content", "not supported"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens", "at least 1"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "8"}, "max_tokens", "integer"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2.5}, "max_tokens", "integer"),
    ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -3}, "max_completion_tokens", None),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": 3}, "temperature", "between"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature", "number"),
    ({"messages": [{"role": "user", "content": "x"}], "top_p": 1.5}, "top_p", None),
    ({"messages": [{"role": "user", "content": "x"}], "top_k": -1}, "top_k", None),
    ({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream", "boolean"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": 7}, "stop", None),
    ({"messages": [{"role": "user", "content": "x"}], "stop": ["a"] * 17}, "stop", "at most"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 0}, "n", "between 1 and"),
    ({"messages": [{"role": "user", "content": "x"}], "performance_metrics": "yes"}, "performance_metrics", None),
    ({"messages": [{"role": "user", "content": "x"}], "seed": "abc"}, "seed", None),
    ({"messages": [{"role": "user", "content": "x"}], "ignore_eos": 1}, "ignore_eos", "boolean"),
    ({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 9}, "presence_penalty", None),
    ({"messages": [{"role": "user", "content": "x"}], "logprobs": "yes"}, "logprobs", "boolean"),
    ({"messages": [{"role": "user", "content": "x"}], "stream_options": 3}, "stream_options", None),
    # Fields that would change the answer and are not implemented: refused, not ignored.
    ({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"99999999": 10}}, "logit_bias", "outside"),
    ({"messages": [{"role": "user", "content": "x"}], "mirostat": 2}, "mirostat", "not supported"),
    ({"messages": [{"role": "user", "content": "x"}], "prediction": {"type": "content"}}, "prediction", None),
    ({"messages": [{"role": "user", "content": "x"}], "modalities": ["text", "audio"]}, "modalities", "text"),
    ({"messages": [{"role": "user", "content": "x"}], "audio": {"voice": "x"}}, "audio", None),
    ({"messages": [{"role": "user", "content": "x"}], "min_tokens": -4}, "min_tokens", None),
]


def test_fields_without_effect_are_accepted(srv):
    r = srv.client().chat.completions.create(
        model=model_id(srv), messages=[{"role": "user", "content": "hi"}], max_tokens=2, user="u1", store=False,
        metadata={"k": "v"}, service_tier="auto", modalities=["text"], logit_bias=None)
    assert r.choices[0].message.content is not None


@pytest.mark.parametrize("body,param,contains", BAD_CHAT)
def test_bad_chat_fields(srv, body, param, contains):
    status, resp = srv.post("/v1/chat/completions", body)
    check_error(status, resp, 400, param, contains)


def test_bad_completion_fields(srv):
    for body, param in (({"prompt": 5}, "prompt"), ({}, "prompt"), ({"prompt": ["a", "b"]}, "prompt"),
                        ({"prompt": [1, 99999999]}, "prompt"), ({"prompt": []}, "prompt"),
                        ({"prompt": "x", "echo": True}, "echo"), ({"prompt": "x", "suffix": "y"}, "suffix")):
        status, resp = srv.post("/v1/completions", body)
        check_error(status, resp, 400, param)


def test_malformed_bodies(srv):
    for raw, contains in ((b"{not json", "not valid JSON"), (b"", "empty"), (b"[1, 2]", "JSON object"),
                          (b'{"prompt": "a"} trailing', "after the JSON"), (b'{"prompt": "\xff\xfe"}', "UTF-8"),
                          (b'{"prompt": "a\\u0000b"}', "U+0000"), (b'{"prompt": "a\x00b"}', "U+0000")):
        status, _, data = srv.request("POST", "/v1/completions", raw)
        check_error(status, json.loads(data), 400, None, contains)


def test_prompt_longer_than_context(srv):
    status, resp = srv.post("/v1/completions", {"prompt": "lighthouse " * 600, "max_tokens": 4})
    check_error(status, resp, 400, "prompt")
    assert resp["error"]["code"] == "context_length_exceeded"
    m = re.search(r"has (\d+) tokens but the context holds (\d+)", resp["error"]["message"])
    assert m and int(m.group(1)) > 512 and int(m.group(2)) == 512, resp
    status, resp = srv.post("/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "lighthouse " * 600}], "max_tokens": 4})
    check_error(status, resp, 400, "messages")
    assert "512" in resp["error"]["message"]
    with pytest.raises(openai.BadRequestError) as ei:
        srv.client().completions.create(model=model_id(srv), prompt="lighthouse " * 600, max_tokens=4)
    assert ei.value.status_code == 400


def test_unknown_model_route_and_method(srv):
    status, resp = srv.post("/v1/chat/completions", {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]})
    check_error(status, resp, 404, "model")
    assert resp["error"]["code"] == "model_not_found"
    status, _, data = srv.request("GET", "/v1/nothing-here")
    check_error(status, json.loads(data), 404)
    status, headers, data = srv.request("GET", "/v1/chat/completions")
    check_error(status, json.loads(data), 405)
    assert headers["Allow"] == "POST"
    status, _, data = srv.request("DELETE", "/v1/models")
    check_error(status, json.loads(data), 405)
    with pytest.raises(openai.NotFoundError):
        srv.client().chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])


def test_api_key_and_body_limit(srv_key):
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    status, resp = srv_key.post("/v1/chat/completions", body)
    check_error(status, resp, 401)
    assert resp["error"]["type"] == "authentication_error"
    status, resp = srv_key.post("/v1/chat/completions", body, headers={"Authorization": "Bearer wrong-key"})
    check_error(status, resp, 401)
    status, resp = srv_key.post("/v1/chat/completions", body, headers={"Authorization": "Bearer sekrit-ke"})
    check_error(status, resp, 401)
    with pytest.raises(openai.AuthenticationError):
        srv_key.client("wrong").models.list()
    # /health needs no key; everything else works with it.
    assert srv_key.request("GET", "/health")[0] == 200
    assert srv_key.request("GET", "/metrics")[0] == 401
    assert srv_key.request("GET", "/metrics", headers={"Authorization": "Bearer sekrit-key"})[0] == 200
    r = srv_key.client("sekrit-key").chat.completions.create(model=model_id_key(srv_key), max_tokens=2,
                                                             messages=[{"role": "user", "content": "x"}])
    assert r.usage.completion_tokens == 2
    # 413 over --max-body-size, as an OpenAI error.
    big = {"prompt": "x" * 5000, "max_tokens": 1}
    status, resp = srv_key.post("/v1/completions", big, headers={"Authorization": "Bearer sekrit-key"})
    check_error(status, resp, 413)
    assert "4096" in resp["error"]["message"]
    # ... and the server keeps serving.
    status, resp = srv_key.post("/v1/completions", {"prompt": "x", "max_tokens": 1},
                                headers={"Authorization": "Bearer sekrit-key"})
    assert status == 200, resp


def model_id_key(s):
    return s.client("sekrit-key").models.list().data[0].id


def test_server_survives_every_error(srv):
    for raw in (b"{", b"\xff", b'{"messages": [{"role": "x"}]}', b"[]" * 1000, b'{"a":' * 2000):
        srv.request("POST", "/v1/chat/completions", raw)
    srv.request("PUT", "/v1/completions", b"{}")
    # A client that closes mid-request does not hurt either.
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
    s.close()
    assert srv.request("GET", "/health")[0] == 200
    status, resp = srv.post("/v1/completions", {"prompt": "still here", "max_tokens": 3, "temperature": 0})
    assert status == 200 and resp["usage"]["completion_tokens"] == 3
    assert srv.proc.poll() is None


def test_concurrent_requests_queue_in_order(srv_metrics):
    results = [None] * 4

    def go(i):
        results[i] = srv_metrics.post("/v1/completions", {"prompt": f"Queue {i}", "max_tokens": 40,
                                                          "temperature": 0})[1]

    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        check_metrics(r["metrics"], r["usage"])
    # Requests join the batch at the next step after they arrive: not all at the same moment.
    assert max(r["metrics"]["queue_time_ms"] for r in results) > min(r["metrics"]["queue_time_ms"] for r in results)


# ---- start-up: loading, templates, bad files -------------------------------------------------

def test_health_503_while_loading(tmp_path):
    # The model path is a FIFO: loading blocks in open() until we open the
    # other end, so the server is reliably "loading" meanwhile.
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    s = Server(fifo, wait_ready=False)
    try:
        status, _, body = s.request("GET", "/health")
        assert status == 503 and json.loads(body) == {"status": "loading"}
        status, resp = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
        check_error(status, resp, 503)
        assert s.request("GET", "/metrics")[0] == 200
    finally:
        fd = os.open(fifo, os.O_WRONLY)
        os.close(fd)
    # Not a GGUF file: the server says so in one line and exits 1.
    assert s.proc.wait(timeout=60) == 1
    err = [l for l in s.stderr().splitlines() if "error" in l or "model.gguf" in l]
    assert any("model.gguf" in l for l in err), s.stderr()


def test_chat_template_file(tmp_path):
    tpl = tmp_path / "chatml.jinja"
    tpl.write_text("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    s = Server(tiny_model(), "-c", "256", "--chat-template", tpl)
    try:
        body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1}
        r = s.post("/v1/chat/completions", body)[1]
        # <|im_start|> is not in this vocabulary: plain text, many tokens,
        # plus the BOS the template did not write.
        assert r["usage"]["prompt_tokens"] > 12
    finally:
        assert s.stop() == 0
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content }")
    p = subprocess.run([ft_bin(), "serve", "-m", str(tiny_model()), "--port", "0", "--chat-template", str(bad)],
                       capture_output=True, timeout=120)
    assert p.returncode == 1
    assert b"bad.jinja" in p.stderr and b"cannot be parsed" in p.stderr, p.stderr
    raising = tmp_path / "raise.jinja"
    raising.write_text("{{ raise_exception('no') }}")
    p = subprocess.run([ft_bin(), "serve", "-m", str(tiny_model()), "--port", "0", "--chat-template", str(raising)],
                       capture_output=True, timeout=120)
    assert p.returncode == 1 and b"cannot be rendered" in p.stderr, p.stderr


def test_bad_flags_and_files(ft, tmp_path):
    for args in (["serve", "--port", "70000"], ["serve", "--log-format", "xml"], ["serve", "--api-key", ""],
                 ["serve", "-c", "3"], ["serve", "--timeout", "0"]):
        r = ft(*args, "-m", "x.gguf")
        assert r.returncode == 2, args
        assert len(r.stderr.decode().strip().splitlines()) == 1
    p = subprocess.run([ft_bin(), "serve", "-m", str(tmp_path / "missing.gguf"), "--port", "0"], capture_output=True,
                       timeout=60)
    assert p.returncode == 1 and b"missing.gguf" in p.stderr


# ---- the real model ------------------------------------------------------------------------

def test_real_gemma(real_model):
    s = Server(real_model, "-c", "2048", "--parallel", "2")
    try:
        assert "chat messages are sent as plain text" in s.stderr()
        cl = s.client()
        msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
        r = cl.chat.completions.create(model=model_id(s), messages=msgs, max_tokens=16, temperature=0,
                                       extra_body={"performance_metrics": True})
        m = r.model_extra["metrics"]
        check_metrics(m, r.usage.model_dump())
        assert r.choices[0].finish_reason in ("stop", "length")
        assert r.choices[0].message.content.strip()
        # The template writes <bos> itself: exactly one BOS, so the prompt
        # is as long as the rendered template's tokens.
        assert r.usage.prompt_tokens < 30
        # Streaming the same request: all but one prompt token from the
        # prefix cache. That last token is computed alone, not in a batch of
        # the whole prompt, which may flip the base model's near-ties; so
        # the streamed text is compared with a second cached request's.
        again = cl.chat.completions.create(model=model_id(s), messages=msgs, max_tokens=16, temperature=0)
        assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
        t0 = time.perf_counter()
        first = None
        text = ""
        final = None
        for c in cl.chat.completions.create(model=model_id(s), messages=msgs, max_tokens=16, temperature=0,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"performance_metrics": True}):
            if c.choices and c.choices[0].delta.content:
                first = first or time.perf_counter() - t0
                text += c.choices[0].delta.content
            final = c
        total = time.perf_counter() - t0
        assert text == again.choices[0].message.content
        fm = final.model_extra["metrics"]
        check_metrics(fm, final.usage.model_dump())
        assert final.usage.prompt_tokens_details.cached_tokens == final.usage.prompt_tokens - 1
        assert fm["ttft_ms"] <= first * 1000 and fm["total_time_ms"] <= total * 1000
        # Completions on the base model, as ft run does it.
        r = cl.completions.create(model=model_id(s), prompt="The capital of France is the city of", max_tokens=8,
                                  temperature=0)
        assert "Paris" in r.choices[0].text

        # A client that goes away mid-stream: the server cancels, logs 499
        # with the metrics it has, and keeps serving.
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Once upon a time", "max_tokens": 1500,
                                                               "stream": True, "temperature": 1.0}),
                  headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        resp.fp.readline()
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        deadline = time.time() + 120
        while time.time() < deadline and not any('" 499 ' in l for l in s.log_lines()):
            time.sleep(0.1)
        line = [l for l in s.log_lines() if '" 499 ' in l]
        assert line, s.log_lines()
        n = int(re.search(r"completion_tokens=(\d+)", line[0]).group(1))
        assert 1 <= n < 1500
        assert s.request("GET", "/health")[0] == 200
    finally:
        assert s.stop() == 0, s.stderr()


def test_long_request_outlives_connection_timeout(real_model):
    # --timeout closes idle connections; a request whose prefill alone takes
    # longer (a ~600-token prompt on Gemma) must still get its answer, both
    # streamed and not.
    s = Server(real_model, "-c", "2048", "--timeout", "1")
    try:
        prompt = "The keeper climbed the stairs to light the lamp. " * 60
        t0 = time.time()
        status, resp = s.post("/v1/completions", {"prompt": "A " + prompt, "max_tokens": 2,
                                                  "performance_metrics": True})
        assert status == 200, resp
        assert resp["usage"]["prompt_tokens"] > 500
        if time.time() - t0 < 1.5:
            pytest.skip("the machine prefilled too fast to outlast a 1 s timeout")
        ev = sse_events(s, "/v1/completions", {"prompt": "B " + prompt, "max_tokens": 2, "stream": True,
                                               "stream_options": {"include_usage": True}})
        assert ev[-1] == "[DONE]" and ev[-2]["usage"]["completion_tokens"] == 2
        # Idle connections are still closed after the timeout.
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.settimeout(30)
        t0 = time.time()
        assert sock.recv(1) == b""
        assert time.time() - t0 < 25
        sock.close()
    finally:
        assert s.stop() == 0, s.stderr()


# ---- the sanitizer build ---------------------------------------------------------------------

def test_asan_build_smoke():
    s = Server(tiny_model(), "-c", "256", "--cache-slots", "2", binary=asan_bin(), env=ASAN_ENV)
    try:
        cl = s.client()
        r = cl.chat.completions.create(model=model_id(s), messages=[{"role": "user", "content": "Hello"}],
                                       max_tokens=8, temperature=0, extra_body={"performance_metrics": True})
        check_metrics(r.model_extra["metrics"], r.usage.model_dump())
        ev = sse_events(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}],
                                                     "max_tokens": 8, "stream": True, "temperature": 0,
                                                     "stream_options": {"include_usage": True}})
        assert ev[-1] == "[DONE]" and ev[-2]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        for body, _, _ in BAD_CHAT:
            s.post("/v1/chat/completions", body)
        for raw in (b"{", b"\xff", b'{"prompt": "a\\u0000"}', b'{"a":' * 2000):
            s.request("POST", "/v1/completions", raw)
        s.request("GET", "/nope")
        assert s.request("GET", "/metrics")[0] == 200
        status, resp = s.post("/v1/completions", {"prompt": "lighthouse " * 300, "max_tokens": 2})
        assert status == 400
        # Abandon a stream, then shut down with work in flight.
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": "x", "max_tokens": 200, "stream": True}),
                  headers={"Content-Type": "application/json"})
        c.getresponse().fp.readline()
        c.close()
        assert s.request("GET", "/health")[0] == 200
    finally:
        rc = s.stop()
    err = s.stderr()
    assert "AddressSanitizer" not in err and "runtime error" not in err and "LeakSanitizer" not in err, err
    assert rc == 0, err
