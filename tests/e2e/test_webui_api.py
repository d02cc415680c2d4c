"""The web UI's server side over plain HTTP: the pages and their headers
(Content-Type, ETag and 304, Cache-Control, Content-Security-Policy),
--no-webui (404), --api-key (pages public, data behind the key), and GET
/v1/requests/recent, the ring of the last requests' metrics the live view
polls: its shape, order, `limit` and `since`, its bound (256 entries
however many requests finish), the same numbers as the responses' own
metrics, hostile queries refused. No browser here: tests/e2e/test_webui.py
drives one."""
import http.client
import json

import pytest

from test_serve import METRIC_FIELDS, Server, tiny_model

PAGES = {"/": "text/html; charset=utf-8", "/dashboard": "text/html; charset=utf-8",
         "/webui/app.css": "text/css; charset=utf-8", "/webui/app.js": "text/javascript; charset=utf-8"}
CAPACITY = 256


@pytest.fixture(scope="module")
def srv():
    s = Server(tiny_model(), "-c", "512", "--parallel", "4")
    yield s
    assert s.stop() == 0, s.stderr()


def recent(s, query="", headers=None):
    st, _, body = s.request("GET", "/v1/requests/recent" + query, headers=headers)
    return st, json.loads(body)


def test_pages(srv):
    total = 0
    for path, ctype in PAGES.items():
        st, h, body = srv.request("GET", path)
        assert st == 200, path
        assert h["Content-Type"] == ctype
        assert int(h["Content-Length"]) == len(body) > 100
        assert h["Cache-Control"] == "no-cache"
        assert h["X-Content-Type-Options"] == "nosniff"
        csp = h["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "connect-src 'self'" in csp and "unsafe" not in csp
        etag = h["ETag"]
        assert etag.startswith('"') and etag.endswith('"')
        total += len(body)
        # HEAD: the same head, no body.
        st, hh, hb = srv.request("HEAD", path)
        assert st == 200 and hb == b"" and hh["ETag"] == etag and hh["Content-Length"] == h["Content-Length"]
        # Revalidation: 304 with the tag and no body while it matches.
        st, h304, b304 = srv.request("GET", path, headers={"If-None-Match": etag})
        assert st == 304 and b304 == b"" and h304["ETag"] == etag and "Content-Length" not in h304
        st, _, _ = srv.request("GET", path, headers={"If-None-Match": f'W/"other", {etag}'})
        assert st == 304
        st, _, b = srv.request("GET", path, headers={"If-None-Match": '"0000000000000000"'})
        assert st == 200 and b == body
    assert total < 64 * 1024  # docs/api.md states the size
    st, h, body = srv.request("POST", "/", body="{}")
    assert st == 405 and h["Allow"] == "GET, HEAD"
    assert json.loads(body)["error"]["code"] == "method_not_allowed"
    # Paths near the pages are not pages.
    for path in ("/index.html", "/dashboard/", "/webui/", "/webui/app.js.map", "/favicon.ico"):
        assert srv.request("GET", path)[0] == 404, path


def test_no_webui():
    s = Server(tiny_model(), "-c", "256", "--no-webui")
    try:
        for path in PAGES:
            st, _, body = s.request("GET", path)
            assert st == 404, path
            assert json.loads(body)["error"]["code"] == "unknown_url"
        assert s.request("POST", "/", body="{}")[0] == 404
        # The API stays, the ring included.
        assert s.request("GET", "/v1/models")[0] == 200
        st, r = recent(s)
        assert st == 200 and r["data"] == []
    finally:
        assert s.stop() == 0, s.stderr()


def test_help_lists_no_webui(ft):
    r = ft("serve", "--help")
    assert r.returncode == 0 and b"--no-webui" in r.stdout and b"/dashboard" in r.stdout


def test_api_key():
    """Pages public (same bytes for everyone, no data); the API behind the key, the ring too."""
    s = Server(tiny_model(), "-c", "256", "--api-key", "k1")
    try:
        for path in PAGES:
            assert s.request("GET", path)[0] == 200, path
        for h in (None, {"Authorization": "Bearer nope"}, {"Authorization": "k1"}):
            st, hdrs, body = s.request("GET", "/v1/requests/recent", headers=h)
            assert st == 401 and hdrs["WWW-Authenticate"] == "Bearer", h
            assert json.loads(body)["error"]["code"] == "invalid_api_key"
        st, r = recent(s, headers={"Authorization": "Bearer k1"})
        assert st == 200 and r["object"] == "list"
        assert s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})[0] == 401
    finally:
        assert s.stop() == 0, s.stderr()


def chat(s, stream, **kw):
    """A chat request with metrics; returns (id, metrics, usage)."""
    body = {"messages": [{"role": "user", "content": "Say something"}], "max_tokens": 6, "stream": stream,
            "performance_metrics": True, **kw}
    if not stream:
        st, r = s.post("/v1/chat/completions", body)
        assert st == 200, r
        return r["id"], r["metrics"], r["usage"]
    body["stream_options"] = {"include_usage": True}
    st, _, raw = s.request("POST", "/v1/chat/completions", body)
    assert st == 200
    events = [json.loads(l[6:]) for l in raw.decode().split("\n\n") if l.startswith("data: {")]
    last = events[-1]
    return last["id"], last["metrics"], last["usage"]


def test_ring_shape_order_and_numbers(srv):
    _, before = recent(srv)
    base = before["recorded"]
    sent = [chat(srv, stream=True), chat(srv, stream=False), chat(srv, stream=True, n=2)]
    st, r = srv.post("/v1/completions", {"prompt": "a b c", "max_tokens": 4})
    assert st == 200
    # A refused request never reaches the engine: not in the ring.
    assert srv.post("/v1/chat/completions", {"messages": []})[0] == 400
    st, r2 = recent(srv)
    assert st == 200
    assert set(r2) == {"object", "model", "time", "capacity", "recorded", "completion_tokens_total", "gauges", "data"}
    assert r2["object"] == "list" and r2["model"] == "llama-Q8_0" and r2["capacity"] == CAPACITY
    assert r2["recorded"] == base + 4
    g = r2["gauges"]
    assert g["loaded"] is True and set(g) == {"loaded", "running", "waiting", "kv_cache_usage", "kv_blocks_total",
                                             "connections"}
    assert g["running"] == 0 and g["waiting"] == 0 and 0 <= g["kv_cache_usage"] <= 1 and g["kv_blocks_total"] > 0
    assert g["connections"] >= 1
    data = r2["data"]
    assert [e["seq"] for e in data[:4]] == [base + 4, base + 3, base + 2, base + 1]  # newest first
    assert data[0]["id"] == r["id"] and data[0]["endpoint"] == "/v1/completions" and data[0]["stream"] is False
    for e, (rid, metrics, usage), stream in zip(data[1:4], reversed(sent), (True, False, True)):
        assert set(e) == {"seq", "id", "endpoint", "status", "finish_reason", "stream", "finished_at",
                          "prompt_tokens", "completion_tokens", "metrics"}
        assert e["id"] == rid and e["endpoint"] == "/v1/chat/completions" and e["status"] == 200
        assert e["stream"] is stream and e["finish_reason"] in ("stop", "length")
        assert e["prompt_tokens"] == usage["prompt_tokens"]
        assert e["completion_tokens"] == usage["completion_tokens"]
        assert e["metrics"] == metrics  # the very numbers the client got
        assert list(e["metrics"]) == METRIC_FIELDS
        assert r2["time"] - 600 < e["finished_at"] <= r2["time"]
    assert data[0]["finished_at"] >= data[3]["finished_at"]
    assert r2["completion_tokens_total"] - before["completion_tokens_total"] == \
        sum(u["completion_tokens"] for _, _, u in sent) + r["usage"]["completion_tokens"]
    # limit and since
    st, r3 = recent(srv, "?limit=2")
    assert [e["seq"] for e in r3["data"]] == [base + 4, base + 3]
    st, r4 = recent(srv, f"?since={base + 2}")
    assert [e["seq"] for e in r4["data"]] == [base + 4, base + 3]
    st, r5 = recent(srv, f"?since={base + 4}&limit=5")
    assert r5["data"] == [] and r5["recorded"] == base + 4


def test_ring_is_bounded(srv):
    """More requests than the ring holds: it keeps the newest 256, in order."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    body = json.dumps({"prompt": "x", "max_tokens": 1})
    try:
        for _ in range(CAPACITY + 20):
            c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            assert r.status == 200
    finally:
        c.close()
    st, r = recent(srv, f"?limit={CAPACITY}")
    assert st == 200
    n = r["recorded"]
    assert n >= CAPACITY + 20
    assert [e["seq"] for e in r["data"]] == list(range(n, n - CAPACITY, -1))
    assert len(recent(srv)[1]["data"]) == 50  # the default limit
    # Everything older than the ring is gone, even when asked for by since.
    assert len(recent(srv, f"?since=0&limit={CAPACITY}")[1]["data"]) == CAPACITY


@pytest.mark.parametrize("query,param", [
    ("?limit=0", "limit"), ("?limit=257", "limit"), ("?limit=-1", "limit"), ("?limit=abc", "limit"),
    ("?limit=", "limit"), ("?limit=1&limit=2", "limit"), ("?limit=99999999999999999999999", "limit"),
    ("?limit=%31", "limit"), ("?since=-1", "since"), ("?since=1e3", "since"),
    ("?since=18446744073709551616", "since"),
])
def test_ring_refuses_bad_queries(srv, query, param):
    st, r = recent(srv, query)
    assert st == 400
    assert r["error"]["param"] == param and r["error"]["type"] == "invalid_request_error"


def test_ring_counted_in_prometheus(srv):
    recent(srv)
    st, _, body = srv.request("GET", "/metrics")
    assert st == 200
    assert 'ft_requests_total{endpoint="/v1/requests/recent",status="200"}' in body.decode()
