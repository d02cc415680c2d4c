#!/usr/bin/env python3
"""Load test of `ft serve`: C concurrent clients for each C in a list.

Each level sends the same seeded mix of requests: short, medium and long
prompts, /v1/completions and /v1/chat/completions, streamed and not, all with
"performance_metrics": true. C client threads take requests from the level's
list until it is empty or the level's share of --time-limit is spent (requests
in flight then finish). Every completed response's metrics are checked against
the metrics contract (docs/architecture.md) and against the client's own clock
(bench/serve_client.py: metrics_violations); a violation counts as an error
and is printed.

Per level: requests/s and generated tokens/s (completed requests and their
completion tokens over the level's wall time); aggregate decode tokens/s
(the median of the requests' server-measured decode_tokens_per_second,
times the streams that decode at once: C, or the server's --parallel when
that is smaller; each stream's rate runs from its first token to its last,
so prefill steps of other requests that stall it are counted in); TTFT p50/p99 as the client
saw it (first chunk with text, streams only) and as the server measured it
(ttft_ms, all requests); inter-token latency p50/p99 from the arrival of
streamed chunks, and the server's (median of the per-request p50s, p99 of
the per-request p99s); errors; the server's RSS (VmRSS) before and after.

Usage: bench/load_serve.py [--ft build/ft] [-m MODEL.gguf] [-t N] [-c 1,2,4,8,16]
                           [--requests-per-level 32] [--max-tokens 32] [--time-limit 600]
                           [--parallel N] [--extra-args "..."] [--url http://127.0.0.1:PORT [--pid PID]]
                           [--seed 1] [--rounds 1] [--json-out FILE]
Without -m, `ft serve` loads its default model. Only the Python standard
library is needed. The machine's other load shows in every number: compare
runs made on a quiet machine only.
"""
import argparse
import json
import os
import queue
import random
import shlex
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_client  # noqa: E402  (bench/serve_client.py, beside this script)

SENTENCES = [
    "The keeper climbed the stairs to light the lamp before the storm came in.",
    "Ships passed the headland at dawn, their sails grey against the low clouds.",
    "A gull settled on the railing and watched the water churn below the rocks.",
    "In the village the baker opened early so the fishermen could eat before leaving.",
    "The radio crackled with reports of wind from the north and rising waves.",
    "Her logbook recorded every vessel, every change of weather, every repair.",
    "At night the beam swept across the bay in a slow and patient circle.",
    "Children from the school came each spring to count the seals on the sandbank.",
]
QUESTIONS = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Why is the sea salty?",
    "Write one sentence about a lighthouse.",
]
# Sentences of context before the question, per prompt length.
PROMPT_SENTENCES = {"short": 0, "medium": 8, "long": 40}


def prompt_mix(text):
    names = [x for x in text.split(",") if x]
    bad = [x for x in names if x not in PROMPT_SENTENCES]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(sorted(PROMPT_SENTENCES))}, got {text!r}")
    return names


def make_requests(n, seed, max_tokens, prompt_sentences=None, tag=""):
    """n request specs, the same for the same seed: endpoint path, body,
    stream or not. `tag` goes into each prompt's first line only, so levels
    get the same mix without reusing each other's prompts from the cache."""
    sizes = prompt_sentences or PROMPT_SENTENCES
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = rng.choice(sorted(sizes))
        context = " ".join(rng.choice(SENTENCES) for _ in range(sizes[size]))
        # A distinct first line, so the prefix cache cannot skip a whole prompt.
        text = f"Note {tag}{rng.randrange(1 << 30)}. {context} {rng.choice(QUESTIONS)}".replace("  ", " ")
        body = {"max_tokens": max_tokens, "performance_metrics": True, "seed": rng.randrange(1 << 31),
                "temperature": rng.choice([0.0, 0.8])}
        if rng.random() < 0.5:
            path = "/v1/completions"
            body["prompt"] = text
        else:
            path = "/v1/chat/completions"
            body["messages"] = [{"role": "user", "content": text}]
        out.append({"path": path, "body": body, "stream": rng.random() < 0.5, "size": size, "index": i})
    return out


def run_one(host, port, req):
    """Send one request; returns a result dict (see run_level)."""
    res = {"index": req["index"], "stream": req["stream"], "size": req["size"], "error": None, "violations": [],
           "client_ttft_s": None, "client_gaps_s": [], "client_total_s": None, "metrics": None, "usage": None}
    try:
        if req["stream"]:
            r = serve_client.post_stream(host, port, req["path"], req["body"])
            res["client_total_s"] = r["total_s"]
            res["client_ttft_s"] = r["first_s"]
            t = r["chunk_times"]
            res["client_gaps_s"] = [b - a for a, b in zip(t, t[1:])]
            if r["error"]:
                res["error"] = r["error"]
            elif not r["final"]:
                res["error"] = "no usage chunk before data: [DONE]"
            else:
                res["metrics"], res["usage"] = r["final"].get("metrics"), r["final"].get("usage")
        else:
            status, data, total = serve_client.post_json(host, port, req["path"], req["body"])
            res["client_total_s"] = total
            if status != 200 or not isinstance(data, dict):
                res["error"] = f"HTTP {status}: {json.dumps(data)[:300]}"
            else:
                res["metrics"], res["usage"] = data.get("metrics"), data.get("usage")
    except (OSError, ValueError) as e:  # connection trouble, bad JSON
        res["error"] = f"{type(e).__name__}: {e}"
    if not res["error"]:
        res["violations"] = serve_client.metrics_violations(res["metrics"], res["usage"], res["client_ttft_s"],
                                                            res["client_total_s"])
    return res


def run_level(host, port, concurrency, requests, time_budget_s, pid=None, parallel=None):
    """Drive the server with `concurrency` client threads over `requests`
    until done or `time_budget_s` has passed (no new request starts then).
    Returns the level's summary dict (see the module docstring)."""
    todo = queue.Queue()
    for r in requests:
        todo.put(r)
    results, lock = [], threading.Lock()
    rss_before = serve_client.rss_mib(pid)
    t0 = time.perf_counter()
    deadline = t0 + time_budget_s

    def client():
        while time.perf_counter() < deadline:
            try:
                req = todo.get_nowait()
            except queue.Empty:
                return
            res = run_one(host, port, req)
            with lock:
                results.append(res)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    rss_after = serve_client.rss_mib(pid)
    return summarize(concurrency, results, wall, rss_before, rss_after, len(requests), parallel)


def summarize(concurrency, results, wall, rss_before, rss_after, planned, parallel=None):
    ok = [r for r in results if not r["error"]]
    errors = [f"request {r['index']}: {r['error']}" for r in results if r["error"]]
    errors += [f"request {r['index']} ({'stream' if r['stream'] else 'plain'}): {v}"
               for r in results for v in r["violations"]]
    failed = sum(1 for r in results if r["error"] or r["violations"])
    server_ttft = [r["metrics"]["ttft_ms"] for r in ok if isinstance(r["metrics"], dict)]
    client_ttft = [r["client_ttft_s"] * 1000.0 for r in ok if r["client_ttft_s"] is not None]
    client_gaps = [g * 1000.0 for r in ok for g in r["client_gaps_s"]]
    # The server reports its own per-request percentiles; requests with one
    # token have no gaps (all zeros) and are left out.
    with_gaps = [r["metrics"]["inter_token_latency_ms"] for r in ok
                 if isinstance(r["metrics"], dict) and r["metrics"].get("decode_tokens", 0) > 0]
    tokens = sum(r["usage"]["completion_tokens"] for r in ok if isinstance(r["usage"], dict))
    stream_rates = [r["metrics"]["decode_tokens_per_second"] for r in ok if isinstance(r["metrics"], dict)
                    and r["metrics"].get("decode_tokens", 0) > 0]
    streams = min(concurrency, parallel) if parallel else concurrency
    stream_rate = serve_client.percentile(stream_rates, 0.5)
    return {
        "concurrency": concurrency,
        "planned": planned,
        "completed": len(ok),
        "errors": failed,
        "error_messages": errors,
        "wall_s": wall,
        "requests_per_s": len(ok) / wall if wall > 0 else None,
        "generated_tokens": tokens,
        "generated_tokens_per_s": tokens / wall if wall > 0 else None,
        "decode_streams": streams,
        "stream_decode_tokens_per_s_p50": stream_rate,
        "decode_tokens_per_s": streams * stream_rate if stream_rate is not None else None,
        "ttft_client_ms": {"p50": serve_client.percentile(client_ttft, 0.5),
                           "p99": serve_client.percentile(client_ttft, 0.99)},
        "ttft_server_ms": {"p50": serve_client.percentile(server_ttft, 0.5),
                           "p99": serve_client.percentile(server_ttft, 0.99)},
        "itl_client_ms": {"p50": serve_client.percentile(client_gaps, 0.5),
                          "p99": serve_client.percentile(client_gaps, 0.99)},
        "itl_server_ms": {"p50": serve_client.percentile([g["p50"] for g in with_gaps], 0.5),
                          "p99": serve_client.percentile([g["p99"] for g in with_gaps], 0.99)},
        "rss_mib": {"before": rss_before, "after": rss_after},
        "max_client_total_ms": max((r["client_total_s"] * 1000.0 for r in ok if r["client_total_s"]), default=None),
    }


# ft serve's default -np: the most requests that decode at once
DEFAULT_PARALLEL = 8


def run_load(host, port, levels, requests_per_level, max_tokens, time_limit_s, seed=1, pid=None,
             prompt_sentences=None, log=None, parallel=None, rounds=1):
    """Every level in turn, `rounds` times over, each with the same seeded
    mix of requests (new prompt texts for every level and round, so the
    prefix cache never serves one level's prompts to another) and an equal
    share of what is left of time_limit_s. Returns the level summaries, in
    the order they ran, with their round (1..rounds)."""
    end = time.perf_counter() + time_limit_s
    out = []
    runs = [(r, i, c) for r in range(rounds) for i, c in enumerate(levels)]
    for n, (r, i, c) in enumerate(runs):
        tag = f"{i}-" if r == 0 else f"{r}.{i}-"
        requests = make_requests(requests_per_level, seed, max_tokens, prompt_sentences, tag=tag)
        budget = max(0.0, (end - time.perf_counter()) / (len(runs) - n))
        s = run_level(host, port, c, requests, budget, pid, parallel)
        s["round"] = r + 1
        out.append(s)
        if log:
            log(f"concurrency {c}: {s['completed']}/{s['planned']} requests in {s['wall_s']:.1f} s, "
                f"{s['errors']} errors")
            for e in s["error_messages"]:
                log(f"  error: {e}")
    return out


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def fmt_pair(d):
    return f"{fmt(d['p50'])} / {fmt(d['p99'])}"


def markdown_table(levels):
    rounds = any(s.get("round", 1) > 1 for s in levels)
    head = ("| round " if rounds else "") + ("| C | done | errors | req/s | gen tok/s | decode tok/s | TTFT client p50/p99 ms | TTFT server p50/p99 ms "
            "| ITL client p50/p99 ms | ITL server p50/p99 ms | RSS before/after MiB |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in levels:
        rows.append((f"| {s['round']} " if rounds else "") + f"| {s['concurrency']} | {s['completed']}/{s['planned']} | {s['errors']} "
                    f"| {fmt(s['requests_per_s'], 2)} | {fmt(s['generated_tokens_per_s'])} "
                    f"| {fmt(s['decode_tokens_per_s'])} "
                    f"| {fmt_pair(s['ttft_client_ms'])} | {fmt_pair(s['ttft_server_ms'])} "
                    f"| {fmt_pair(s['itl_client_ms'])} | {fmt_pair(s['itl_server_ms'])} "
                    f"| {fmt(s['rss_mib']['before'])} / {fmt(s['rss_mib']['after'])} |")
    return "\n".join(rows)


def summary_table(levels):
    """Per concurrency, the medians over rounds of the throughput columns and
    the ratio of the median decode rate to that of C = 1 (when measured)."""
    by_c = {}
    for s in levels:
        by_c.setdefault(s["concurrency"], []).append(s)
    def med(runs, key):
        vals = [s[key] for s in runs if s[key] is not None]
        return statistics.median(vals) if vals else None
    one = med(by_c[1], "decode_tokens_per_s") if 1 in by_c else None
    rows = ["| C | rounds | errors | gen tok/s (median) | decode tok/s (median) | decode tok/s per round "
            "| decode ÷ C=1 |", "|---|---|---|---|---|---|---|"]
    for c, runs in by_c.items():
        d = med(runs, "decode_tokens_per_s")
        rows.append(f"| {c} | {len(runs)} | {sum(s['errors'] for s in runs)} "
                    f"| {fmt(med(runs, 'generated_tokens_per_s'))} | {fmt(d)} "
                    f"| {', '.join(fmt(s['decode_tokens_per_s']) for s in runs)} "
                    f"| {fmt(d / one, 2) + '×' if d is not None and one else '-'} |")
    return "\n".join(rows)


def concurrency_list(text):
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None
    if not levels or any(c < 1 or c > 1024 for c in levels):
        raise argparse.ArgumentTypeError("concurrency levels must be in 1..1024")
    return levels


def positive(kind):
    def parse(text):
        v = kind(text)
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be positive (got {text})")
        return v
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ft", default=serve_client.DEFAULT_FT, help="the ft binary (default build/ft)")
    ap.add_argument("-m", "--model", help="GGUF model (default: ft serve's default model)")
    ap.add_argument("-t", "--threads", type=positive(int), help="threads for ft serve")
    ap.add_argument("-c", "--concurrency", type=concurrency_list, default=[1, 2, 4, 8, 16],
                    help="comma-separated client counts (default 1,2,4,8,16)")
    ap.add_argument("--requests-per-level", type=positive(int), default=32)
    ap.add_argument("--max-tokens", type=positive(int), default=32)
    ap.add_argument("--time-limit", type=positive(float), default=600.0,
                    help="seconds for all levels together; a level starts no request after its share (default 600)")
    ap.add_argument("--parallel", type=positive(int),
                    help=f"passed as ft serve --parallel N when this binary has that flag; also caps the streams "
                         f"of the aggregate decode rate (default: ft serve's {DEFAULT_PARALLEL})")
    ap.add_argument("--ctx", type=positive(int), default=4096, help="ft serve -c (default 4096)")
    ap.add_argument("--extra-args", default="", help="more ft serve arguments, shell-quoted")
    ap.add_argument("--url", help="use a running server at this loopback URL instead of starting one")
    ap.add_argument("--pid", type=positive(int), help="with --url: the server's process id, for its RSS")
    ap.add_argument("--seed", type=int, default=1, help="seed of the request mix (default 1)")
    ap.add_argument("--prompts", type=prompt_mix, default=sorted(PROMPT_SENTENCES),
                    help="prompt lengths in the mix, comma-separated: short (~15 tokens), medium (~150), "
                         "long (~650) (default: all three)")
    ap.add_argument("--rounds", type=positive(int), default=1,
                    help="run the whole list of levels this many times, interleaved (1,8,1,8,...), and add a "
                         "table of per-level medians: on a shared machine the host's load moves between "
                         "levels, and interleaving spreads it over all of them (default 1)")
    ap.add_argument("--json-out", help="also write the results as JSON to this file")
    a = ap.parse_args()

    server = None
    if a.url:
        try:
            host, port = serve_client.loopback_address(a.url)
        except ValueError as e:
            raise SystemExit(f"load_serve: {e}")
        pid = a.pid
    else:
        if not os.path.exists(a.ft):
            raise SystemExit(f"load_serve: {a.ft} does not exist (build first, or pass --ft)")
        args = ["-c", str(a.ctx)]
        if a.model:
            args += ["-m", a.model]
        if a.threads:
            args += ["-t", str(a.threads)]
        if a.parallel:
            if serve_client.serve_help_lists(a.ft, "--parallel"):
                args += ["--parallel", str(a.parallel)]
            else:
                print("load_serve: this ft serve has no --parallel flag; not passed", file=sys.stderr)
        args += shlex.split(a.extra_args)
        try:
            server = serve_client.Server(a.ft, args)
        except RuntimeError as e:
            raise SystemExit(f"load_serve: {e}")
        host, port, pid = server.host, server.port, server.pid
    try:
        levels = run_load(host, port, a.concurrency, a.requests_per_level, a.max_tokens, a.time_limit, a.seed,
                          pid, prompt_sentences={k: PROMPT_SENTENCES[k] for k in a.prompts},
                          log=lambda s: print(s, file=sys.stderr, flush=True),
                          parallel=a.parallel or DEFAULT_PARALLEL, rounds=a.rounds)
    finally:
        if server and server.stop() != 0:
            print(f"load_serve: ft serve exited with {server.proc.returncode}:\n{server.stderr()}", file=sys.stderr)
    print(markdown_table(levels))
    if a.rounds > 1:
        print()
        print(f"Medians over {a.rounds} interleaved rounds:")
        print()
        print(summary_table(levels))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"model": a.model, "url": a.url, "levels": levels}, f, indent=1)
    if any(s["errors"] for s in levels):
        sys.exit(1)


if __name__ == "__main__":
    main()
