"""Real routers in front of `ft serve` replicas, on loopback only: sglang-router
(the PyPI package `sglang-router`, a Rust binary behind a Python launcher) and
HAProxy (Debian's `haproxy` 2.6). Each is started in the foreground as a child
process on a free 127.0.0.1 port and stopped by its own pid.

Only the Python standard library; imported by bench/cluster_bench.py and
tests/e2e/test_cluster.py. What each router does when a replica dies is
measured there and written up in docs/fleet.md.
"""
import csv
import http.client
import importlib.util
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

LOOPBACK = "127.0.0.1"


def free_port():
    """A port that was free on 127.0.0.1 a moment ago (the kernel's pick)."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def get(port, path, timeout=10):
    """GET on loopback: (status, body bytes); (None, error text) when nothing answers."""
    c = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    except OSError as e:
        return None, str(e).encode()
    finally:
        c.close()


def sglang_router_available(python=None):
    """Whether the sglang-router package is importable by `python` (default: this interpreter)."""
    if python is None or python == sys.executable:
        return importlib.util.find_spec("sglang_router") is not None
    r = subprocess.run([python, "-c", "import sglang_router"], capture_output=True, timeout=60)
    return r.returncode == 0


def haproxy_binary():
    return shutil.which("haproxy") or (os.path.exists("/usr/sbin/haproxy") and "/usr/sbin/haproxy") or None


class _Proc:
    """A child process whose output goes to a file in its own temporary directory."""

    def __init__(self, cmd, name):
        self.dir = tempfile.mkdtemp(prefix=f"ft-{name}-")
        self.log_path = os.path.join(self.dir, "log")
        self._log = open(self.log_path, "wb")
        self.proc = None
        if cmd:
            self._start(cmd)

    def _start(self, cmd):
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.dir)

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:  # stopped: its directory is gone
            return ""

    def _check_alive(self, what):
        if self.proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {self.proc.returncode}: {self.log()[-3000:]}")

    def stop(self):
        """SIGTERM (then SIGKILL after 20 s) this process only; returns its exit status."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.proc.returncode if self.proc is not None else None


class SglangRouter(_Proc):
    """`python -m sglang_router.launch_router` over the given worker ports.

    The router probes each worker at start: GET /health, a gRPC attempt (an
    HTTP/2 preface, which ft serve refuses with 505, so the worker is taken
    as HTTP), then GET /server_info, /get_server_info, /model_info and
    /get_model_info (404 from ft serve: the worker is registered with model
    "unknown", which changes nothing for single-model routing). Its
    Prometheus exporter is bound to loopback too (default would be 0.0.0.0)."""

    def __init__(self, worker_ports, policy="cache_aware", python=None, extra=(), ready_timeout=60):
        self.port = free_port()
        self.prom_port = free_port()
        self.policy = policy
        self.worker_urls = [f"http://{LOOPBACK}:{p}" for p in worker_ports]
        cmd = [python or sys.executable, "-m", "sglang_router.launch_router",
               "--worker-urls", *self.worker_urls, "--policy", policy,
               "--host", LOOPBACK, "--port", str(self.port),
               "--prometheus-host", LOOPBACK, "--prometheus-port", str(self.prom_port),
               "--log-level", "warn", *extra]
        super().__init__(cmd, "sglang-router")
        self._wait_ready(ready_timeout)

    def workers(self):
        """The router's view of its workers: [{url, is_healthy, load, ...}]."""
        status, body = get(self.port, "/workers")
        if status != 200:
            return []
        return json.loads(body).get("workers", [])

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive("sglang-router")
            w = self.workers()
            if len(w) == len(self.worker_urls) and all(x.get("is_healthy") for x in w):
                return
            time.sleep(0.1)
        log = self.log()
        self.stop()
        raise RuntimeError("sglang-router did not register its workers: " + log[-3000:])


HAPROXY_CFG = """\
# HAProxy in front of ft serve replicas (written by bench/routers.py).
global
    maxconn 512

defaults
    mode http
    log stdout format raw local0
    option httplog
    # Streaming: a reply may stay open for minutes; the client and server
    # timeouts bound inactivity between SSE chunks, not the whole response.
    timeout connect 2s
    timeout client 300s
    timeout server 300s
    timeout http-request 10s
    timeout http-keep-alive 10s
    # A refused connection (replica gone) is retried once on another server.
    retries 1
    option redispatch 1

frontend fe
    bind {host}:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    # /health is 503 while a replica loads its model (docs/fleet.md).
    option httpchk GET /health
    http-check expect status 200
    default-server inter {inter_ms}ms fall {fall} rise {rise}
{servers}
listen stats
    bind {host}:{stats_port}
    stats enable
    stats uri /stats
"""


class HAProxy(_Proc):
    """`haproxy -db -f CFG`: round-robin over the replicas, health-checked on /health."""

    def __init__(self, worker_ports, inter_ms=500, fall=2, rise=1, ready_timeout=30):
        self.port = free_port()
        self.stats_port = free_port()
        servers = "".join(f"    server r{i} {LOOPBACK}:{p} check\n" for i, p in enumerate(worker_ports))
        self.config = HAPROXY_CFG.format(host=LOOPBACK, port=self.port, stats_port=self.stats_port,
                                         inter_ms=inter_ms, fall=fall, rise=rise, servers=servers)
        binary = haproxy_binary()
        if not binary:
            raise RuntimeError("haproxy is not installed")
        super().__init__(None, "haproxy")
        self.cfg_path = os.path.join(self.dir, "haproxy.cfg")
        with open(self.cfg_path, "w") as f:
            f.write(self.config)
        self._start([binary, "-db", "-f", self.cfg_path])
        self.n = len(worker_ports)
        self._wait_ready(ready_timeout)

    def server_status(self):
        """{server name: status} from the stats page's CSV ("UP", "DOWN", ...)."""
        status, body = get(self.stats_port, "/stats;csv")
        if status != 200:
            return {}
        rows = csv.DictReader(io.StringIO(body.decode().lstrip("# ")))
        return {r["svname"]: r["status"] for r in rows if r["pxname"] == "replicas"
                and r["svname"] not in ("FRONTEND", "BACKEND")}

    def access_log(self):
        return [l for l in self.log().splitlines() if '"' in l]

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive("haproxy")
            st = self.server_status()
            if len(st) == self.n and all(v.startswith("UP") for v in st.values()):
                return
            time.sleep(0.1)
        log = self.log()
        self.stop()
        raise RuntimeError("haproxy's servers did not come UP: " + log[-3000:])
