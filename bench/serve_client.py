"""What the `ft serve` benchmark scripts share: starting a server, talking to
it over plain HTTP (streamed and not), timing what the client sees, and
checking each response's metrics against the metrics contract
(docs/architecture.md).

Only the Python standard library; imported by bench/bench_serve.py,
bench/load_serve.py and tests/e2e/test_load.py.
"""
import http.client
import ipaddress
import json
import math
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_FT = os.path.join(ROOT, "build", "ft")

# Generous: a long prompt on a slow build (ASan) on a busy machine.
HTTP_TIMEOUT_S = 600
READY_TIMEOUT_S = 300


class Server:
    """A `ft serve` this process started on a free loopback port."""

    def __init__(self, ft, args, env=None, cwd=None):
        self._err = tempfile.NamedTemporaryFile(prefix="ft-serve-", suffix=".err", delete=False)
        self.err_path = self._err.name
        cmd = [ft, "serve", "--host", "127.0.0.1", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._err, env=env,
                                     cwd=cwd)
        self.host = "127.0.0.1"
        self.port = self._wait_ready()

    @property
    def pid(self):
        return self.proc.pid

    def stderr(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode(errors="replace")

    def _wait_ready(self):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.stderr()
            m = re.search(r"listening on http://[^:]+:(\d+)", text)
            if m and "ready:" in text:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"ft serve exited with {self.proc.returncode}: {text.strip()}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("ft serve did not become ready in time: " + self.stderr().strip())

    def stop(self):
        """SIGTERM and wait; returns the exit status (0 when it shut down cleanly)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._err.close()
        return self.proc.returncode


def serve_help_lists(ft, flag):
    """Whether `ft serve --help` of this binary lists `flag`."""
    p = subprocess.run([ft, "serve", "--help"], capture_output=True, timeout=60)
    return re.search(r"(^|[\s,])" + re.escape(flag) + r"\b", p.stdout.decode(errors="replace"), re.M) is not None


def loopback_address(url):
    """(host, port) of an http:// URL whose host is this machine; ValueError otherwise.
    The load generator must never be pointed at someone else's server."""
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http" or not u.hostname:
        raise ValueError(f"{url}: expected http://HOST:PORT")
    port = u.port or 80
    try:
        infos = socket.getaddrinfo(u.hostname, port, proto=socket.IPPROTO_TCP)
    except socket.gaierror as e:
        raise ValueError(f"{url}: cannot resolve {u.hostname}: {e}") from None
    addrs = {ipaddress.ip_address(i[4][0].split("%")[0]) for i in infos}
    if not addrs or not all(a.is_loopback for a in addrs):
        raise ValueError(f"{url}: {u.hostname} is not a loopback address (refusing to load another machine)")
    return u.hostname, port


def post_json(host, port, path, body):
    """Non-streamed POST: (status, parsed body or None, client seconds to the whole response)."""
    c = http.client.HTTPConnection(host, port, timeout=HTTP_TIMEOUT_S)
    try:
        t0 = time.perf_counter()
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
        total = time.perf_counter() - t0
    finally:
        c.close()
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        data = None
    return r.status, data, total


def _event_text(ev):
    """The text a chunk adds (completions: choices[0].text; chat: delta.content)."""
    ch = ev.get("choices") or []
    if not ch:
        return ""
    if "text" in ch[0]:
        return ch[0]["text"] or ""
    return (ch[0].get("delta") or {}).get("content") or ""


def post_stream(host, port, path, body):
    """Streamed POST with usage and metrics in the final chunk. Returns a dict:
    status, error (None or a message), text, first_s (client seconds to the
    first chunk with text), chunk_times (seconds of every chunk with text),
    total_s, final (the usage chunk: usage and metrics)."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    out = {"status": None, "error": None, "text": "", "first_s": None, "chunk_times": [], "total_s": None,
           "final": None}
    c = http.client.HTTPConnection(host, port, timeout=HTTP_TIMEOUT_S)
    try:
        t0 = time.perf_counter()
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out["status"] = r.status
        if r.status != 200:
            out["error"] = f"HTTP {r.status}: {r.read()[:300].decode(errors='replace')}"
            return out
        done = False
        while True:
            line = r.readline()  # de-chunked; one SSE field per line
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                done = True
                break
            now = time.perf_counter() - t0
            ev = json.loads(payload)
            if "error" in ev:
                out["error"] = f"error event: {ev['error']}"
                break
            piece = _event_text(ev)
            if piece:
                out["text"] += piece
                out["chunk_times"].append(now)
                if out["first_s"] is None:
                    out["first_s"] = now
            if not ev.get("choices") and "usage" in ev:
                out["final"] = ev
        out["total_s"] = time.perf_counter() - t0
        if not done and not out["error"]:
            out["error"] = "the stream ended without data: [DONE]"
    finally:
        c.close()
    return out


def metrics_violations(m, usage, client_ttft_s=None, client_total_s=None):
    """The invariants of the metrics contract (docs/architecture.md) that one
    response's metrics and usage must satisfy, plus causality against what the
    client measured: the server's TTFT and total time start later (body
    parsed) and end earlier (before the bytes travel) than the client's.
    Returns the broken ones as readable strings (empty when all hold)."""
    bad = []

    def need(ok, what):
        if not ok:
            bad.append(what)

    if not isinstance(m, dict) or not isinstance(usage, dict):
        return [f"metrics or usage missing (metrics={m!r}, usage={usage!r})"]
    try:
        pt, ct = usage["prompt_tokens"], usage["completion_tokens"]
        cached_usage = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        need(pt == m["cached_prompt_tokens"] + m["prefill_tokens"],
             f"prompt_tokens {pt} != cached_prompt_tokens {m['cached_prompt_tokens']} + "
             f"prefill_tokens {m['prefill_tokens']}")
        need(cached_usage == m["cached_prompt_tokens"],
             f"usage cached_tokens {cached_usage} != cached_prompt_tokens {m['cached_prompt_tokens']}")
        need(m["decode_tokens"] == ct - 1, f"decode_tokens {m['decode_tokens']} != completion_tokens {ct} - 1")
        for tokens, ms, rate in (("prefill_tokens", "prefill_time_ms", "prefill_tokens_per_second"),
                                 ("decode_tokens", "decode_time_ms", "decode_tokens_per_second")):
            if m[tokens] == 0 or m[ms] == 0:
                need(m[rate] is None, f"{rate} is {m[rate]} with {tokens}={m[tokens]}, {ms}={m[ms]} (want null)")
            else:
                want = m[tokens] / (m[ms] / 1000.0)
                need(m[rate] is not None and math.isclose(m[rate], want, rel_tol=1e-9),
                     f"{rate} {m[rate]} != {tokens} / {ms} = {want}")
        need(0 <= m["queue_time_ms"] <= m["ttft_ms"] <= m["total_time_ms"],
             f"not queue_time_ms {m['queue_time_ms']} <= ttft_ms {m['ttft_ms']} <= "
             f"total_time_ms {m['total_time_ms']}")
        if client_ttft_s is not None:
            need(m["ttft_ms"] <= client_ttft_s * 1000.0,
                 f"server ttft_ms {m['ttft_ms']:.3f} > client TTFT {client_ttft_s * 1000.0:.3f} ms")
        if client_total_s is not None:
            need(m["total_time_ms"] <= client_total_s * 1000.0,
                 f"server total_time_ms {m['total_time_ms']:.3f} > client total {client_total_s * 1000.0:.3f} ms")
    except (KeyError, TypeError) as e:
        bad.append(f"malformed metrics or usage ({e!r}): metrics={m!r} usage={usage!r}")
    return bad


def percentile(values, q):
    """Nearest-rank percentile (as the server computes its own), None when empty."""
    if not values:
        return None
    v = sorted(values)
    rank = min(len(v), max(1, math.ceil(q * len(v))))
    return v[rank - 1]


def rss_mib(pid):
    """Resident set size of a process (VmRSS from /proc/PID/status) in MiB, None if unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None
