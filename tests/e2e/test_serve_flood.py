"""Connection floods: idle and slow connections never starve new requests.
Thousands of sockets that send nothing stay open while /health, /metrics
and generations are answered; at the connection limit the longest idle
connection is closed to make room; slow heads get their own short
timeout. Loopback only, bounded counts."""
import resource
import socket
import time

import pytest

from test_serve import Server, tiny_model

openai = pytest.importorskip("openai")


def raise_fd_limit(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"needs {need} open files, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def open_idle(port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        socks.append(s)
    return socks


def closed_by_server(sock, timeout=5.0):
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True


def metric(s, name):
    for line in s.request("GET", "/metrics")[2].decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_3000_idle_sockets_do_not_block_health_metrics_or_generation():
    raise_fd_limit(3300)
    s = Server(tiny_model(), "-c", "256")
    socks = []
    try:
        socks = open_idle(s.port, 3000)
        time.sleep(0.5)
        assert metric(s, "ft_http_connections") >= 3000  # all held, none refused
        assert s.request("GET", "/health")[0] == 200
        cl = s.client()
        r = cl.chat.completions.create(model=cl.models.list().data[0].id,
                                       messages=[{"role": "user", "content": "hi"}], max_tokens=3)
        assert r.choices[0].finish_reason in ("stop", "length")
        assert metric(s, "ft_http_connections_evicted_total") == 0
    finally:
        for k in socks:
            k.close()
        assert s.stop() == 0, s.stderr()


def test_at_the_limit_the_longest_idle_connection_makes_room():
    raise_fd_limit(600)
    s = Server(tiny_model(), "-c", "256", "--max-connections", "64")
    socks = []
    try:
        first = open_idle(s.port, 8)
        time.sleep(0.2)
        socks = first + open_idle(s.port, 56)  # the pool is now full: 64 idle
        time.sleep(0.2)
        socks += open_idle(s.port, 8)  # each new one evicts the longest idle
        time.sleep(0.2)
        assert all(closed_by_server(k) for k in first)  # the oldest went first
        assert not any(closed_by_server(k, timeout=0.2) for k in socks[-8:])  # the newest are kept
        assert metric(s, "ft_http_connections_evicted_total") >= 8
        for _ in range(8):  # a full pool of idle sockets never refuses a probe
            assert s.request("GET", "/health")[0] == 200
        # A connection in the middle of a request is never evicted: a slow
        # head holds its slot until its own timeout.
        busy = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        busy.sendall(b"GET /health HTTP/1.1\r\n")
        for _ in range(70):  # more than the limit: every idle one is gone by now
            assert s.request("GET", "/health")[0] == 200
        busy.sendall(b"Host: x\r\n\r\n")
        assert b"200 OK" in busy.recv(4096)
        busy.close()
    finally:
        for k in socks:
            k.close()
        assert s.stop() == 0, s.stderr()


def test_slow_head_has_its_own_short_timeout():
    s = Server(tiny_model(), "-c", "256", "--request-timeout", "1", "--timeout", "60")
    try:
        k = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        t0 = time.time()
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = k.recv(4096)
            assert chunk, "closed without an answer"
            data += chunk
        assert data.startswith(b"HTTP/1.1 408")
        assert time.time() - t0 < 30  # the 1 s head timeout, not the 60 s idle one
        k.close()
        idle = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        assert not closed_by_server(idle, timeout=2.5)  # idle connections keep --timeout
        idle.close()
    finally:
        assert s.stop() == 0, s.stderr()


@pytest.mark.parametrize("args,msg", [(["--max-connections", "3"], b"--max-connections must be in 16..1000000"),
                                      (["--request-timeout", "-1"], b"--request-timeout must be in 1..86400")])
def test_bad_limits(args, msg):
    from conftest import run_ft
    r = run_ft("serve", "-m", tiny_model(), *args)
    assert r.returncode == 2 and msg in r.stderr
