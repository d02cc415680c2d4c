"""The soak test in CI: bench/soak.py for 60 seconds, 16 clients, against
the tiny model (the 10-minute run is documented in docs/performance.md).
Everything it checks must hold: no unexpected status, every response's
metrics within the contract, /metrics' request counters equal to what the
clients saw; and after warm-up the server's memory and descriptors stay
flat (bounds on bytes and counts, not on time)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, ft_bin
from test_serve import tiny_model


def test_soak_60s(tmp_path):
    out = tmp_path / "soak.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--ft", ft_bin(), "-m", str(tiny_model()),
                        "--clients", "16", "--duration", os.environ.get("FT_SOAK_SECONDS", "60"),
                        "--json-out", str(out)], capture_output=True, timeout=600)
    assert out.exists(), r.stderr.decode()[-3000:]
    res = json.loads(out.read_text())
    assert r.returncode == 0, json.dumps(res, indent=1)[:4000]
    assert res["n_unexpected"] == 0 and res["n_violations"] == 0 and res["counter_mismatch"] == {}
    assert res["server_exit"] == 0
    kinds = res["by_kind"]
    assert all(kinds.get(k, 0) > 0 for k in ("chat", "prefix", "leave", "invalid", "burst")), kinds
    st = res["statuses"]
    assert st.get("/v1/chat/completions 499", 0) > 0  # clients left mid-stream, and the server saw it
    assert st.get("/v1/completions 503", 0) + st.get("/v1/chat/completions 503", 0) > 0  # over the queue limit
    # Flat after warm-up: descriptors within the clients' own connections,
    # memory growing less than 2 MiB a minute (the prefix cache is capped at 16 MiB).
    lo, hi = res["fds_after_warmup"]
    assert hi - lo <= 16 * 15 + 8, res["fds_after_warmup"]
    assert res["rss_slope_mib_per_min"] < 2.0, res
