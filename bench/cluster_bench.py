#!/usr/bin/env python3
"""Shared-prefix traffic through real routers in front of `ft serve` replicas:
how much of the prompt the replicas find in their prefix caches
(`cached_prompt_tokens`, from each response's usage) and what throughput the
client sees, with sglang-router's cache-aware policy against round-robin
(sglang-router's and HAProxy's).

Traffic: G documents (long shared prefixes, the system message) and short
questions about them; each request picks a document at random (seeded), so
every run sends the same requests in the same order. Each replica's prefix
cache is sized (-c, --parallel, --cache-mib) to hold about G/N documents, not
all G: the situation a cache-aware router is for. Replicas are started fresh
for every run (cold caches), on loopback only, and stopped after it.

On one machine the replicas share its cores: throughput here shows what the
routing does to the work (prefill saved by cache hits), not scaling.

  bench/cluster_bench.py [--ft build/rel/ft] [-m MODEL] [--replicas 3] [--requests 120] [-o table.md]

Only the standard library plus bench/routers.py and bench/serve_client.py;
sglang-router comes from PyPI (tests/requirements.txt), HAProxy from Debian
(scripts/setup.sh). Prints a Markdown table (docs/fleet.md has one)."""
import argparse
import concurrent.futures
import datetime
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import routers  # noqa: E402
import serve_client  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("lamp keeper harbour tide ledger cargo beacon rope anchor signal storm chart "
         "compass north shore vessel rock island mile fog bell light watch night").split()
QUESTIONS = ["Summarize the text.", "Who is named first?", "List three places.", "What happens at night?",
             "Give the title.", "What is the weather?", "Name one object.", "How does it end?"]


def documents(n_docs, words, seed):
    rng = random.Random(seed)
    return [f"Document {d}. " + " ".join(rng.choice(WORDS) for _ in range(words)) for d in range(n_docs)]


def workload(n_requests, n_docs, words, seed):
    docs = documents(n_docs, words, seed)
    rng = random.Random(seed + 1)
    out = []
    for i in range(n_requests):
        d = rng.randrange(n_docs)
        out.append({"doc": d, "body": {
            "model": "bench",
            "messages": [{"role": "system", "content": docs[d]},
                         {"role": "user", "content": f"Q{i}: {rng.choice(QUESTIONS)}"}],
            "max_tokens": 16, "temperature": 0, "ignore_eos": True}})
    return out


def start_replicas(ft, model, n, args):
    reps = []
    for _ in range(n):
        reps.append(serve_client.Server(ft, ["-m", model, "-t", str(args.threads), "-c", str(args.ctx),
                                             "--parallel", str(args.parallel), "--cache-mib", str(args.cache_mib),
                                             "--enable-performance-metrics", "--alias", "bench"]))
    return reps


def run(args, label, make_router, reqs):
    reps = start_replicas(args.ft, args.model, args.replicas, args)
    router = None
    try:
        router = make_router([r.port for r in reps])
        def one(req):
            st, data, total = serve_client.post_json(routers.LOOPBACK, router.port, "/v1/chat/completions",
                                                      req["body"])
            return st, data, total, None

        t_start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as ex:
            results = list(ex.map(one, reqs))
        wall = time.perf_counter() - t_start
        bad = [(st, d) for st, d, _, _ in results if st != 200]
        if bad:
            raise RuntimeError(f"{label}: {len(bad)} requests failed, first: {bad[0]}")
        prompt = sum(d["usage"]["prompt_tokens"] for _, d, _, _ in results)
        cached = sum(d["usage"]["prompt_tokens_details"]["cached_tokens"] for _, d, _, _ in results)
        completion = sum(d["usage"]["completion_tokens"] for _, d, _, _ in results)
        lat = [t for _, _, t, _ in results]
        ttft = [d["metrics"]["ttft_ms"] for _, d, _, _ in results]
        per_rep = []
        for r in reps:
            st, body = routers.get(r.port, "/metrics")
            n = 0
            for line in body.decode().splitlines():
                if line.startswith("ft_requests_total{") and 'endpoint="/v1/' in line:
                    n += float(line.rsplit(" ", 1)[1])
            per_rep.append(int(n))
        return {"label": label, "requests": len(results), "prompt": prompt, "cached": cached,
                "share": cached / prompt, "wall_s": wall, "req_s": len(results) / wall,
                "tok_s": completion / wall, "lat_p50": serve_client.percentile(lat, 0.5),
                "ttft_p50": serve_client.percentile(ttft, 0.5), "per_replica": per_rep}
    finally:
        if router:
            router.stop()
        for r in reps:
            r.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ft", default=os.path.join(ROOT, "build", "rel", "ft"))
    ap.add_argument("-m", "--model", default=os.path.join(os.path.dirname(ROOT), "shared", "models", "llama-Q8_0.gguf"))
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--concurrency", type=int, default=6)
    ap.add_argument("--docs", type=int, default=6, help="shared prefixes (default 6)")
    ap.add_argument("--words", type=int, default=450, help="words per document (default 450)")
    ap.add_argument("--threads", type=int, default=1, help="-t per replica (default 1)")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--cache-mib", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1, help="runs per configuration, interleaved")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("-o", "--output", help="also write the Markdown table here")
    args = ap.parse_args()
    if args.requests > 2000 or args.replicas > 8:
        ap.error("bounded: at most 2000 requests and 8 replicas")

    configs = []
    if routers.sglang_router_available():
        configs.append(("sglang-router cache_aware", lambda ports: routers.SglangRouter(ports, policy="cache_aware")))
        configs.append(("sglang-router round_robin", lambda ports: routers.SglangRouter(ports, policy="round_robin")))
    else:
        print("sglang-router is not installed: skipping it", file=sys.stderr)
    if routers.haproxy_binary():
        configs.append(("HAProxy roundrobin", lambda ports: routers.HAProxy(ports)))
    else:
        print("haproxy is not installed: skipping it", file=sys.stderr)
    reqs = workload(args.requests, args.docs, args.words, args.seed)

    rows = []
    for rep in range(args.repeat):
        for label, make in configs:
            r = run(args, label, make, reqs)
            rows.append(r)
            print(f"{label}: cached {r['share']:.1%}, {r['req_s']:.2f} req/s, per replica {r['per_replica']}",
                  file=sys.stderr)

    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    head = (f"{datetime.date.today()}, commit {commit}, {os.cpu_count()} cores shared by {args.replicas} replicas "
            f"(-t {args.threads} -c {args.ctx} --parallel {args.parallel} --cache-mib {args.cache_mib}), "
            f"model {os.path.basename(args.model)}; {args.requests} chat requests at concurrency {args.concurrency}, "
            f"{args.docs} shared prefixes of {args.words} words ({rows[0]['prompt'] // args.requests} prompt tokens "
            f"per request on average), 16 tokens out each\n")
    lines = [head, "| router, policy | cached prompt tokens | share | requests/s | output tokens/s | "
                   "latency p50 ms | TTFT p50 ms (engine) | requests per replica |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['cached']} / {r['prompt']} | {r['share']:.1%} | {r['req_s']:.2f} | "
                     f"{r['tok_s']:.1f} | {r['lat_p50'] * 1000:.1f} | {r['ttft_p50']:.2f} | "
                     f"{' / '.join(map(str, r['per_replica']))} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
