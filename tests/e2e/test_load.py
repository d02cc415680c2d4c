"""A small load on the sanitizer build of `ft serve`: bench/load_serve.py's mix
(short, medium and long prompts; chat and completions; streamed and not) at
concurrency 1, 2 and 4 on the tiny llama-Q8_0 model. Every response must
succeed and satisfy the metrics contract's invariants (docs/architecture.md),
and ASan/UBSan must stay silent. The load code is imported from bench/, not
copied.

Nothing here asserts on speed; the invariant checker itself is tested on
hand-made metrics first, so a checker that accepts everything would fail."""
import os
import sys

import pytest

from conftest import ROOT, SHARED

sys.path.insert(0, str(ROOT / "bench"))
import load_serve  # noqa: E402
import serve_client  # noqa: E402

TINY = SHARED / "models" / "llama-Q8_0.gguf"

# One consistent response, values worked out by hand: 12 prompt tokens (4
# cached), 5 completion tokens; 8 tokens in 16 ms = 500/s, 4 in 8 ms = 500/s.
GOOD_USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17,
              "prompt_tokens_details": {"cached_tokens": 4}}
GOOD_METRICS = {"ttft_ms": 20.0, "queue_time_ms": 1.5, "prefill_tokens": 8, "cached_prompt_tokens": 4,
                "prefill_time_ms": 16.0, "prefill_tokens_per_second": 500.0, "decode_tokens": 4,
                "decode_time_ms": 8.0, "decode_tokens_per_second": 500.0,
                "inter_token_latency_ms": {"p50": 2.0, "p90": 2.0, "p99": 2.0, "max": 2.0}, "total_time_ms": 29.0}


def test_invariant_checker_accepts_good_metrics():
    assert serve_client.metrics_violations(GOOD_METRICS, GOOD_USAGE, 0.021, 0.030) == []
    # One completion token: no decode, so its rate is null.
    one = dict(GOOD_METRICS, decode_tokens=0, decode_time_ms=0.0, decode_tokens_per_second=None)
    assert serve_client.metrics_violations(one, dict(GOOD_USAGE, completion_tokens=1)) == []


@pytest.mark.parametrize("change, usage_change, client, words", [
    ({"prefill_tokens": 7, "prefill_tokens_per_second": 437.5}, {}, (None, None), "prompt_tokens 12"),
    ({"cached_prompt_tokens": 3, "prefill_tokens": 9, "prefill_tokens_per_second": 562.5}, {}, (None, None),
     "cached_tokens 4"),
    ({"decode_tokens": 5, "decode_tokens_per_second": 625.0}, {}, (None, None), "decode_tokens 5"),
    ({"decode_tokens_per_second": 400.0}, {}, (None, None), "decode_tokens_per_second"),
    ({"prefill_tokens_per_second": None}, {}, (None, None), "prefill_tokens_per_second"),
    ({"decode_tokens": 0, "decode_time_ms": 0.0, "decode_tokens_per_second": 0.0}, {"completion_tokens": 1},
     (None, None), "want null"),
    ({"queue_time_ms": 21.0}, {}, (None, None), "queue_time_ms"),
    ({"ttft_ms": 30.0}, {}, (None, None), "total_time_ms"),
    ({}, {}, (0.019, None), "client TTFT"),
    ({}, {}, (None, 0.028), "client total"),
    ({"ttft_ms": None}, {}, (None, None), "malformed"),
])
def test_invariant_checker_catches(change, usage_change, client, words):
    bad = serve_client.metrics_violations(dict(GOOD_METRICS, **change), dict(GOOD_USAGE, **usage_change), *client)
    assert len(bad) == 1 and words in bad[0], bad


def test_loopback_only():
    assert serve_client.loopback_address("http://127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert serve_client.loopback_address("http://localhost:9") == ("localhost", 9)
    for url in ("http://192.0.2.1:8080", "http://10.1.2.3", "https://127.0.0.1:8080", "127.0.0.1:8080"):
        with pytest.raises(ValueError):
            serve_client.loopback_address(url)


def test_request_mix_is_seeded_and_mixed():
    a = load_serve.make_requests(24, 7, 8)
    assert a == load_serve.make_requests(24, 7, 8)
    assert a != load_serve.make_requests(24, 8, 8)
    assert {r["size"] for r in a} == set(load_serve.PROMPT_SENTENCES)
    assert {r["stream"] for r in a} == {True, False}
    assert {r["path"] for r in a} == {"/v1/completions", "/v1/chat/completions"}
    assert all(r["body"]["performance_metrics"] is True and r["body"]["max_tokens"] == 8 for r in a)
    # Another level: the same mix, other prompts.
    b = load_serve.make_requests(24, 7, 8, tag="1-")
    assert [(r["path"], r["stream"], r["size"]) for r in a] == [(r["path"], r["stream"], r["size"]) for r in b]
    assert all(ra["body"] != rb["body"] for ra, rb in zip(a, b))


def test_rounds_summary_takes_medians_per_level():
    def level(c, r, gen, dec, errors=0):
        return {"concurrency": c, "round": r, "generated_tokens_per_s": gen, "decode_tokens_per_s": dec,
                "errors": errors}
    # C=1 decode 20, 30, 10 -> median 20; C=8 decode 70, 50, 60 -> median 60: 3.00x.
    runs = [level(1, 1, 18.0, 20.0), level(8, 1, 50.0, 70.0), level(1, 2, 25.0, 30.0), level(8, 2, 40.0, 50.0, 1),
            level(1, 3, 9.0, 10.0), level(8, 3, 45.0, 60.0)]
    rows = load_serve.summary_table(runs).splitlines()
    assert rows[2] == "| 1 | 3 | 0 | 18.0 | 20.0 | 20.0, 30.0, 10.0 | 1.00× |"
    assert rows[3] == "| 8 | 3 | 1 | 45.0 | 60.0 | 70.0, 50.0, 60.0 | 3.00× |"


def test_load_on_asan_build():
    asan = os.environ.get("FT_ASAN_BIN")
    if not asan or not os.path.exists(asan):
        pytest.skip("FT_ASAN_BIN is not set (or missing): the load test runs on the sanitizer build")
    if not TINY.exists():
        pytest.skip(f"{TINY} is absent: the small model comes with ../shared")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    env.pop("FT_MODEL", None)
    s = serve_client.Server(asan, ["-m", str(TINY), "-c", "1024", "-t", "2", "--parallel", "2"], env=env)
    try:
        log = []
        levels = load_serve.run_load(s.host, s.port, [1, 2, 4], requests_per_level=6, max_tokens=8,
                                     time_limit_s=600, seed=3, pid=s.pid,
                                     prompt_sentences={"short": 0, "medium": 4, "long": 16}, log=log.append,
                                     parallel=2)
    finally:
        rc = s.stop()
    err = s.stderr()
    assert "AddressSanitizer" not in err and "runtime error" not in err and "LeakSanitizer" not in err, err
    assert rc == 0, err
    assert [lv["concurrency"] for lv in levels] == [1, 2, 4]
    for lv in levels:
        assert lv["errors"] == 0 and lv["error_messages"] == [], "\n".join(log)
        assert lv["completed"] == lv["planned"] == 6, "\n".join(log)
        assert lv["generated_tokens"] >= 6
        # aggregate decode rate: the median stream's rate times the streams decoding at once
        assert lv["decode_streams"] == min(lv["concurrency"], 2)
        assert lv["decode_tokens_per_s"] == pytest.approx(lv["decode_streams"] * lv["stream_decode_tokens_per_s_p50"])
        assert lv["stream_decode_tokens_per_s_p50"] > 0
        # Streams were measured on the client and every response on the server.
        assert lv["ttft_client_ms"]["p50"] is not None and lv["ttft_server_ms"]["p50"] is not None
        assert lv["rss_mib"]["before"] > 0 and lv["rss_mib"]["after"] > 0
    print(load_serve.markdown_table(levels))
