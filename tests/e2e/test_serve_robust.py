"""Robustness of `ft serve`'s HTTP layer (http/conn.c, http/http_parse.c):
every refused request gets an OpenAI-style JSON error, slow clients time
out without hurting others, clients that leave stop their generation,
a full queue says when to retry, SIGTERM drains, and keep-alive and
pipelining work. Each test runs against the release binary and, when
FT_ASAN_BIN is set, the AddressSanitizer build (no report allowed).

Generation has to take a while for some of these, so they use a synthetic
model written with `ft gen-model` (32M parameters, F16) and small prompt
batches (-b 16), so one scheduler step is short. Nothing asserts on speed:
waits poll /metrics and the access log with generous deadlines."""
import http.client
import json
import re
import signal
import socket
import threading
import time

import pytest

from conftest import SANITIZER_MARKS, stop_clean
from test_serve import Server, tiny_model


def start(binary, model, *args):
    return Server(model, *args, binary=binary["binary"], env=binary["env"])


# ---- raw HTTP ----------------------------------------------------------------------------------

def connect(s, timeout=60):
    return socket.create_connection(("127.0.0.1", s.port), timeout=timeout)


class Reader:
    """Reads HTTP/1.1 responses off one socket (Content-Length or chunked)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise EOFError("connection closed")
        self.buf += d

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self, head_only=False):
        status_line = self._line().decode()
        m = re.match(r"HTTP/1\.1 (\d{3}) ", status_line)
        assert m, status_line
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            k, v = line.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()
        if head_only:
            return int(m.group(1)), headers, b""
        if headers.get("transfer-encoding") == "chunked":
            return int(m.group(1)), headers, self.chunked_body()
        return int(m.group(1)), headers, self._exact(int(headers["content-length"]))

    def chunked_body(self):
        body = b""
        while True:
            n = int(self._line(), 16)
            if n == 0:
                self._line()
                return body
            body += self._exact(n)
            self._line()

    def closed(self, timeout=30):
        """True when the server closes the connection (nothing more to read)."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b"" and not self.buf
        except ConnectionResetError:
            return True


def raw_exchange(s, data, timeout=60):
    """Send bytes, read one response; returns (status, headers, body)."""
    sock = connect(s, timeout)
    try:
        sock.sendall(data)
        return Reader(sock).response()
    finally:
        sock.close()


def check_json_error(status, headers, body, want_status, want_code=None, contains=None):
    assert status == want_status, (status, body)
    assert headers["content-type"] == "application/json"
    e = json.loads(body)["error"]
    assert set(e) == {"message", "type", "param", "code"}
    assert e["message"]
    assert e["type"] == ("server_error" if want_status >= 500 else "invalid_request_error")
    if want_code:
        assert e["code"] == want_code, e
    if contains:
        assert contains in e["message"], e
    return e


def metric(s, name):
    status, _, body = s.request("GET", "/metrics", timeout=60)
    assert status == 200
    m = re.search(rf"^{name} (\S+)$", body.decode(), re.M)
    assert m, body
    return float(m.group(1))


def wait_for(pred, what, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def post_bytes(path, body):
    b = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(b)}\r\n\r\n").encode() + b


# ---- refusals are JSON -------------------------------------------------------------------------

def test_refusals_are_json(binary):
    s = start(binary, tiny_model(), "-c", "256", "--max-body-size", "4096")
    try:
        # Over --max-body-size: refused from the Content-Length, before the body.
        st, h, b = raw_exchange(s, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        check_json_error(st, h, b, 413, "request_too_large", "4096")
        assert h["connection"] == "close"
        # ... and with the whole body sent, the client still reads the 413.
        st, h, b = raw_exchange(s, post_bytes("/v1/completions", {"prompt": "x" * 20000}))
        check_json_error(st, h, b, 413, "request_too_large")
        # Heads too large: one huge header, or too many.
        st, h, b = raw_exchange(s, b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n")
        check_json_error(st, h, b, 431, "headers_too_large")
        many = b"".join(b"X-H%d: v\r\n" % i for i in range(150))
        st, h, b = raw_exchange(s, b"GET /health HTTP/1.1\r\n" + many + b"\r\n")
        check_json_error(st, h, b, 431, "headers_too_large")
        # Malformed request lines and heads.
        for raw in (b"GARBAGE\r\n\r\n", b"GET /health\r\n\r\n", b"GET health HTTP/1.1\r\n\r\n",
                    b"GET /health HTTP/1.1\nHost: x\n\n", b"GET /health HTTP/1.1\r\nBad Header: x\r\n\r\n",
                    b"POST /v1/completions HTTP/1.1\r\nContent-Length: 12abc\r\n\r\n"):
            st, h, b = raw_exchange(s, raw)
            check_json_error(st, h, b, 400, "bad_request")
        st, h, b = raw_exchange(s, b"GET /health HTTP/2.0\r\n\r\n")
        check_json_error(st, h, b, 505)
        st, h, b = raw_exchange(s, b"BREW /health HTTP/1.1\r\n\r\n")
        check_json_error(st, h, b, 405, "method_not_allowed")
        assert "POST" in h["allow"]
        st, h, b = raw_exchange(s, b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   b"2\r\n{}\r\n0\r\n\r\n")
        check_json_error(st, h, b, 501, "not_implemented", "Content-Length")
        # Route-level refusals as before.
        st, h, b = raw_exchange(s, b"GET /nowhere HTTP/1.1\r\n\r\n")
        check_json_error(st, h, b, 404)
        st, h, b = raw_exchange(s, b"DELETE /health HTTP/1.1\r\n\r\n")
        check_json_error(st, h, b, 405)
        # Deep or huge JSON is refused before cJSON builds it.
        st, h, b = s.request("POST", "/v1/completions", b'{"a":' * 100 + b"1" + b"}" * 100)
        check_json_error(st, {k.lower(): v for k, v in h.items()}, b, 400, contains="deeper")
        # Every refusal is in the access log with its status.
        log = "\n".join(s.log_lines())
        for code in (" 413", " 431", " 400", " 505", " 405", " 501", " 404"):
            assert code in log, code
        assert s.request("GET", "/health")[0] == 200
    finally:
        stop_clean(s)


def test_slow_head_gets_408_and_others_are_served(binary):
    s = start(binary, tiny_model(), "-c", "256", "--timeout", "2")
    try:
        slow = connect(s)
        slow.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        # A slow-loris client: a byte now and then never completes the head.
        # Meanwhile everybody else is served.
        t0 = time.time()
        served = 0
        r = Reader(slow)
        while time.time() - t0 < 1.5:
            slow.sendall(b"X")
            assert s.request("GET", "/health")[0] == 200
            served += 1
            time.sleep(0.2)
        st, h, b = r.response()
        check_json_error(st, h, b, 408, "request_timeout")
        assert r.closed()
        slow.close()
        assert served > 0
        # An idle connection is closed silently after --timeout.
        idle = connect(s)
        assert Reader(idle).closed(timeout=30)
        idle.close()
        # A body that stalls gets 408 too.
        stall = connect(s)
        stall.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 50\r\n\r\n{\"pro")
        st, h, b = Reader(stall).response()
        check_json_error(st, h, b, 408, "request_timeout")
        stall.close()
        assert s.request("GET", "/health")[0] == 200
        assert '" 408 ' in "\n".join(s.log_lines())
    finally:
        stop_clean(s)


# ---- clients that leave ------------------------------------------------------------------------

def wait_idle_engine(s):
    wait_for(lambda: metric(s, "ft_requests_running") == 0 and metric(s, "ft_requests_waiting") == 0,
             "the engine to be idle")


def log_499s(s):
    return [l for l in s.log_lines() if '" 499 ' in l]


def test_disconnects_cancel_generation(binary, slow_model):
    # 4 prompt tokens per step: the long prompt's prefill takes 90 steps, so
    # the client is gone while it runs. ignore_eos: a decode never ends early
    # by the random model's end-of-sequence.
    s = start(binary, slow_model, "-c", "4096", "-b", "4", "--parallel", "1", "--no-prefix-cache")
    try:
        long_prompt = "the keeper lit the lamp " * 60
        cases = [
            ("prefill, non-streaming", {"prompt": long_prompt, "max_tokens": 4, "temperature": 0}),
            ("prefill, streaming", {"prompt": long_prompt, "max_tokens": 4, "stream": True, "temperature": 0}),
            ("decode, non-streaming", {"prompt": "a", "max_tokens": 4000, "temperature": 0, "ignore_eos": True}),
            ("decode, streaming", {"prompt": "b", "max_tokens": 4000, "stream": True, "temperature": 0, "ignore_eos": True}),
        ]
        for i, (what, body) in enumerate(cases):
            sock = connect(s)
            sock.sendall(post_bytes("/v1/completions", body))
            if body.get("stream") and "decode" in what:
                r = Reader(sock)
                st, h, _ = r.response(head_only=True)
                assert st == 200
                while b"data: " not in r.buf:  # the first token
                    r._fill()
            else:
                wait_for(lambda: metric(s, "ft_requests_running") == 1, f"{what}: running")
                if "decode" in what:
                    time.sleep(0.5)
            sock.close()
            wait_idle_engine(s)
            wait_for(lambda: len(log_499s(s)) == i + 1, f"{what}: a 499 in the access log")
            line = log_499s(s)[-1]
            n = int(re.search(r"completion_tokens=(\d+)", line).group(1))
            assert n < body["max_tokens"], (what, line)
            # The next request is served normally.
            status, resp = s.post("/v1/completions", {"prompt": "next", "max_tokens": 2, "temperature": 0})
            assert status == 200 and resp["usage"]["completion_tokens"] == 2, (what, resp)
    finally:
        stop_clean(s)


def test_queue_full_503_retry_after(binary, slow_model):
    s = start(binary, slow_model, "-c", "4096", "-b", "16", "--parallel", "1", "--max-queue", "1")
    try:
        running = connect(s)
        running.sendall(post_bytes("/v1/completions", {"prompt": "a", "max_tokens": 4000, "temperature": 0, "ignore_eos": True}))
        wait_for(lambda: metric(s, "ft_requests_running") == 1, "the first request to run")
        waiting = connect(s)
        waiting.sendall(post_bytes("/v1/completions", {"prompt": "b", "max_tokens": 4000, "temperature": 0, "ignore_eos": True}))
        wait_for(lambda: metric(s, "ft_requests_waiting") == 1, "the second request to wait")
        st, h, b = raw_exchange(s, post_bytes("/v1/completions", {"prompt": "c", "max_tokens": 2}))
        check_json_error(st, h, b, 503, "server_busy")
        assert h["retry-after"] == "1"
        running.close()
        waiting.close()
        wait_idle_engine(s)
        status, resp = s.post("/v1/completions", {"prompt": "again", "max_tokens": 2})
        assert status == 200, resp
    finally:
        stop_clean(s)


# ---- shutting down -----------------------------------------------------------------------------

def test_sigterm_lets_request_finish(binary, slow_model):
    s = start(binary, slow_model, "-c", "4096", "-b", "16")
    result = {}

    def go():
        result["r"] = s.post("/v1/completions", {"prompt": "finish me", "max_tokens": 40, "ignore_eos": True})

    t = threading.Thread(target=go)
    t.start()
    wait_for(lambda: metric(s, "ft_requests_running") == 1, "the request to run")
    s.proc.send_signal(signal.SIGTERM)
    t.join(timeout=300)
    status, resp = result["r"]
    assert status == 200 and resp["usage"]["completion_tokens"] == 40, resp
    assert s.proc.wait(timeout=60) == 0, s.stderr()
    err = s.stderr()
    assert "SIGTERM: shutting down" in err
    assert not any(m in err for m in SANITIZER_MARKS), err
    # The listener is gone.
    with pytest.raises(OSError):
        connect(s, timeout=5).close()


def test_sigterm_past_shutdown_timeout_cancels(binary, slow_model):
    s = start(binary, slow_model, "-c", "4096", "-b", "16", "--shutdown-timeout", "1")
    plain = connect(s)
    # ignore_eos: the random model's end-of-sequence cannot end the texts early.
    plain.sendall(post_bytes("/v1/completions", {"prompt": "a", "max_tokens": 4000, "temperature": 0, "ignore_eos": True}))
    wait_for(lambda: metric(s, "ft_requests_running") == 1, "the request to run")
    stream = connect(s)
    stream.sendall(post_bytes("/v1/chat/completions", {"messages": [{"role": "user", "content": "b"}],
                                                       "max_tokens": 4000, "stream": True, "temperature": 0, "ignore_eos": True}))
    rs = Reader(stream)
    st, h, _ = rs.response(head_only=True)
    assert st == 200 and h["transfer-encoding"] == "chunked"
    s.proc.send_signal(signal.SIGTERM)
    # The running request is cancelled after a second: a 503 JSON error.
    st, h, b = Reader(plain).response()
    check_json_error(st, h, b, 503, "shutting_down", "shutting down")
    # The stream ends with an error event, then [DONE].
    body = rs.chunked_body()
    events = [e[6:] for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"[DONE]", body
    err_ev = json.loads(events[-2])
    assert err_ev["error"]["code"] == "shutting_down", err_ev
    plain.close()
    stream.close()
    assert s.proc.wait(timeout=60) == 0, s.stderr()
    err = s.stderr()
    assert "cancelling" in err and not any(m in err for m in SANITIZER_MARKS), err


def test_second_signal_cancels_at_once(binary, slow_model):
    s = start(binary, slow_model, "-c", "4096", "-b", "16")  # --shutdown-timeout 30
    sock = connect(s)
    sock.sendall(post_bytes("/v1/completions", {"prompt": "a", "max_tokens": 4000, "ignore_eos": True}))
    wait_for(lambda: metric(s, "ft_requests_running") == 1, "the request to run")
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert s.proc.poll() is None
    s.proc.send_signal(signal.SIGINT)
    st, h, b = Reader(sock).response()
    check_json_error(st, h, b, 503, "shutting_down")
    sock.close()
    assert s.proc.wait(timeout=60) == 0, s.stderr()
    assert "again: cancelling now" in s.stderr()


# ---- keep-alive and pipelining -----------------------------------------------------------------

def test_pipelining_and_keep_alive(binary):
    s = start(binary, tiny_model(), "-c", "256")
    try:
        sock = connect(s)
        r = Reader(sock)
        # Three requests in one write: answered in order on one connection.
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" +
                     post_bytes("/v1/completions", {"prompt": "hi", "max_tokens": 3}) +
                     b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        st, h, b = r.response()
        assert st == 200 and json.loads(b) == {"status": "ok"} and "connection" not in h
        st, h, b = r.response()
        assert st == 200 and json.loads(b)["usage"]["completion_tokens"] == 3
        st, h, b = r.response()
        assert st == 200 and json.loads(b)["object"] == "list"
        # The connection stays open for more, including a stream (chunked).
        sock.sendall(post_bytes("/v1/completions", {"prompt": "x", "max_tokens": 2, "stream": True}))
        st, h, b = r.response()
        assert st == 200 and h["transfer-encoding"] == "chunked" and b.endswith(b"data: [DONE]\n\n")
        # HEAD: the headers of GET, no body.
        sock.sendall(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n")
        st, h, b = r.response(head_only=True)
        assert st == 200 and h["content-length"] == "15"
        # A refused request in the middle closes the connection after its answer.
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE\r\n\r\nGET /health HTTP/1.1\r\n\r\n")
        assert r.response()[0] == 200
        st, h, b = r.response()
        check_json_error(st, h, b, 400)
        assert r.closed()
        sock.close()
        # Connection: close and HTTP/1.0 end the connection after the answer.
        for raw in (b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n", b"GET /health HTTP/1.0\r\n\r\n"):
            sock = connect(s)
            r = Reader(sock)
            sock.sendall(raw)
            st, h, b = r.response()
            assert st == 200 and h["connection"] == "close"
            assert r.closed()
            sock.close()
        # A client that half-closes after its request still gets the answer.
        sock = connect(s)
        sock.sendall(b"GET /health HTTP/1.1\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        r = Reader(sock)
        assert r.response()[0] == 200 and r.closed()
        sock.close()
        # Expect: 100-continue gets its interim answer before the body is sent.
        sock = connect(s)
        r = Reader(sock)
        body = json.dumps({"prompt": "hi", "max_tokens": 1}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert r._line() == b"HTTP/1.1 100 Continue" and r._line() == b""
        sock.sendall(body)
        assert r.response()[0] == 200
        sock.close()
        # The openai client (httpx, keep-alive pool) is happy with all of this.
        cl = s.client()
        for _ in range(3):
            assert cl.completions.create(model="llama-Q8_0", prompt="a", max_tokens=1).usage.completion_tokens == 1
    finally:
        stop_clean(s)


def test_shutdown_timeout_flag(ft):
    assert "--shutdown-timeout" in ft("serve", "--help").stdout.decode()
    for bad in ("-1", "86401", "x"):
        r = ft("serve", "-m", "x.gguf", "--shutdown-timeout", bad)
        assert r.returncode == 2, bad
        assert len(r.stderr.decode().strip().splitlines()) == 1, r.stderr
