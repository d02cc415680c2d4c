#!/usr/bin/env python3
"""FreeToken vs llama.cpp on the same GGUF files, same threads, interleaved.

For every model and thread count, each repetition runs FreeToken's ppN, then
llama.cpp's ppN, then FreeToken's tgN, then llama.cpp's tgN (each a fresh
process that loads the model, warms up as llama-bench does and times one
run), so slow phases of a shared machine hit both engines alike. It prints
a markdown table of median tokens/s per engine and the ratio of medians.

Decode rows also get the rate at which weights were read (model bytes x
tokens/s) as a share of the machine's read bandwidth (ft-bench-bandwidth),
two ways: against the best bandwidth measured before and after all runs,
and against a short probe run just before each repetition's decode pair
(the median of those per-repetition shares), since on a shared host the
bandwidth itself moves by 15-20% within minutes.

llama.cpp comes from the npm package node-llama-cpp@3.21.1: its prebuilt CPU
libraries (@node-llama-cpp/linux-x64 or linux-arm64) and the llama.cpp
source it ships (llama/gitRelease.bundle, for llama.h and ggml.h). The script
npm-installs the package into the cache directory when it is absent (or
uses NLC_DIR, a directory where it is installed), compiles
bench/llamacpp_bench.c against those headers and links it to the prebuilt
libllama. ggml picks the CPU variant (libggml-cpu-<name>.so) for this CPU at
run time; the table's footer says which one ran.

LLAMA_CPP_LIB_DIR=/path/to/llama.cpp/build/bin adds another llama.cpp build
(e.g. one compiled with -DGGML_NATIVE=ON) as a third column; its headers come
from LLAMA_CPP_INCLUDE_DIRS (colon-separated) or from the source directory
recorded in ../CMakeCache.txt.

--isa LIST|all runs FreeToken once per kernel level (as `ft bench --isa`):
one column per level ("FT avx512", "FT avx2"), each with its ratio to
llama.cpp, interleaved with the others, so a level slower than a lower
one shows in the same table; "all" is every SIMD level this CPU runs.

usage: bench/compare_llamacpp.py -m MODEL.gguf [-m ...] [-t 2] [-p 512] [-n 128] [-r 5]
                                 [--isa LIST|all] [--llamacpp-cpu VARIANT] [--ft build/ft] [--cache DIR]
                                 [--json-out FILE]
"""
import argparse
import datetime
import hashlib
import json
import os
import pathlib
import platform
import re
import shutil
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
NLC_VERSION = "3.21.1"


def log(msg):
    print(f"compare_llamacpp: {msg}", file=sys.stderr, flush=True)


def die(msg):
    log(msg)
    sys.exit(1)


def nlc_platform():
    m = platform.machine()
    if m in ("x86_64", "AMD64"):
        return "linux-x64"
    if m in ("aarch64", "arm64"):
        return "linux-arm64"
    die(f"no prebuilt node-llama-cpp CPU libraries for {m}")


def ensure_nlc(cache):
    """The node-llama-cpp install to use: NLC_DIR, or one in the cache (installed now if absent)."""
    d = pathlib.Path(os.environ.get("NLC_DIR") or cache / f"node-llama-cpp-{NLC_VERSION}")
    plat = nlc_platform()
    pkg = d / "node_modules" / "node-llama-cpp" / "package.json"
    bins = d / "node_modules" / "@node-llama-cpp" / plat / "bins" / plat
    if not pkg.exists() or not bins.is_dir():
        if os.environ.get("NLC_DIR"):
            die(f"NLC_DIR={d} has no node-llama-cpp with {plat} binaries")
        if not shutil.which("npm"):
            die("npm is needed to install node-llama-cpp (apt-get install npm), or set NLC_DIR")
        log(f"installing node-llama-cpp@{NLC_VERSION} into {d}")
        d.mkdir(parents=True, exist_ok=True)
        # --ignore-scripts: the postinstall would try to build or download
        # llama.cpp; the prebuilt CPU package is all we need.
        subprocess.run(["npm", "install", "--prefix", str(d), "--ignore-scripts", "--omit=optional",
                        "--no-audit", "--no-fund", f"node-llama-cpp@{NLC_VERSION}",
                        f"@node-llama-cpp/{plat}@{NLC_VERSION}"], check=True, stdout=sys.stderr)
    version = json.loads(pkg.read_text())["version"]
    if version != NLC_VERSION:
        log(f"warning: {d} has node-llama-cpp {version}, not {NLC_VERSION}")
    return d, bins, version


def ensure_llama_source(nlc_dir, cache):
    """llama.cpp's headers from the source node-llama-cpp ships (a git bundle), checked out once."""
    bundle = nlc_dir / "node_modules" / "node-llama-cpp" / "llama" / "gitRelease.bundle"
    if not bundle.exists():
        die(f"{bundle} is missing: node-llama-cpp ships llama.cpp's source there")
    heads = subprocess.run(["git", "bundle", "list-heads", str(bundle)], capture_output=True, text=True,
                           check=True).stdout.split()
    commit = heads[0] if heads else "unknown"
    src = cache / f"llama.cpp-{commit[:12]}"
    if not (src / "include" / "llama.h").exists():
        log(f"checking out llama.cpp {commit[:12]} from {bundle}")
        tmp = src.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        # Only the public headers are needed: check out include/ and ggml/include/.
        subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(bundle), str(tmp)], check=True)
        subprocess.run(["git", "-C", str(tmp), "checkout", "--quiet", "HEAD", "--", "include", "ggml/include"],
                       check=True)
        tmp.rename(src)
    return src, commit


def find_lib(libdir, pattern, what):
    for f in sorted(os.listdir(libdir)):
        if re.fullmatch(pattern, f):
            return libdir / f
    die(f"no {what} in {libdir}")


def compile_bench(libdir, include_dirs, cache):
    """bench/llamacpp_bench.c compiled against these headers and linked to libdir's libllama."""
    srcfile = ROOT / "bench" / "llamacpp_bench.c"
    libs = [find_lib(libdir, r"libllama(\.v[0-9.]+)?\.so", "libllama"),
            find_lib(libdir, r"libggml(\.v[0-9.]+)?\.so", "libggml"),
            find_lib(libdir, r"libggml-base\.so", "libggml-base")]
    key = hashlib.sha1("\n".join([str(libdir), *map(str, include_dirs), srcfile.read_text()]).encode()).hexdigest()
    exe = cache / f"llamacpp_bench-{key[:12]}"
    if not exe.exists():
        cc = os.environ.get("CC", "cc")
        cmd = [cc, "-O2", "-std=c11", "-D_GNU_SOURCE", *[f"-I{d}" for d in include_dirs], str(srcfile), "-o",
               str(exe) + ".tmp", *map(str, libs), f"-Wl,-rpath,{libdir}", "-lm"]
        subprocess.run(cmd, check=True)
        os.rename(str(exe) + ".tmp", exe)
    return exe


def include_dirs_for(libdir, fallback):
    env = os.environ.get("LLAMA_CPP_INCLUDE_DIRS")
    if env:
        return [pathlib.Path(p) for p in env.split(":") if p]
    cache = libdir.parent / "CMakeCache.txt"
    if cache.exists():
        m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache.read_text(), re.M)
        if m:
            src = pathlib.Path(m.group(1))
            return [src / "include", src / "ggml" / "include"]
    log(f"warning: no headers known for {libdir}; using node-llama-cpp's (set LLAMA_CPP_INCLUDE_DIRS)")
    return fallback


class Engine:
    def __init__(self, label, name, argv):
        self.label = label  # table column
        self.name = name  # footnote
        self.argv = argv  # the command without -m/-p/-n/-t
        self.isa = None
        self.samples = {}  # (model, threads, test) -> [t/s]
        self.model_type = {}
        self.model_size = {}

    def run(self, model, threads, n_prompt, n_gen, seed):
        cmd = [*self.argv, "-m", str(model), "-t", str(threads), "-p", str(n_prompt), "-n", str(n_gen),
               "-r", "1", "--seed", str(seed), "-o", "json"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            die(f"{self.name} failed ({' '.join(cmd)}):\n{r.stderr.strip()}")
        rows = json.loads(r.stdout)
        if len(rows) != 1:
            die(f"{self.name}: expected one result row, got {len(rows)}")
        row = rows[0]
        self.isa = row.get("isa", "?")
        key = (str(model), threads, row["test"])
        self.samples.setdefault(key, []).append(row["samples_ts"][0])
        self.model_type[str(model)] = row.get("model_type", "?")
        self.model_size[str(model)] = row.get("model_size", 0)
        return row["samples_ts"][0]


# Kernel levels, best first within each architecture (ft's --isa names).
FT_LEVELS = ["amx", "avx512", "avx-vnni", "avx2", "neon-i8mm", "neon-dotprod", "neon"]


def ft_levels(ft_bin, spec):
    """The levels of --isa SPEC that this CPU runs ("all": every SIMD one), checked with ft itself."""
    names = FT_LEVELS if spec == "all" else [x for x in spec.split(",") if x]
    ok = []
    for name in names:
        r = subprocess.run([str(ft_bin), "bench", "--hw"], capture_output=True, text=True,
                           env={**os.environ, "FT_ISA": name})
        if r.returncode == 0:
            ok.append(name)
        elif spec != "all":
            die(f"--isa {name}: {r.stderr.strip()}")
    if not ok:
        die(f"--isa {spec}: no kernel level to run")
    return ok


def fmt_ts(v):
    return f"{v:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", action="append", required=True, help="GGUF model (repeatable)")
    ap.add_argument("-t", "--threads", default="2", help="thread counts, comma-separated (default 2)")
    ap.add_argument("-p", "--n-prompt", type=int, default=512, help="ppN prompt length (default 512; 0 = skip)")
    ap.add_argument("-n", "--n-gen", type=int, default=128, help="tgN generated tokens (default 128; 0 = skip)")
    ap.add_argument("-r", "--repetitions", type=int, default=5, help="interleaved runs per engine (default 5)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the random token ids (both engines)")
    ap.add_argument("--isa", help="FreeToken kernel levels, comma-separated or 'all': a column per level")
    ap.add_argument("--llamacpp-cpu", metavar="VARIANT",
                    help="load only this CPU backend of the prebuilt llama.cpp (e.g. haswell for AVX2, "
                         "next to --isa avx2), instead of the best one for this CPU")
    ap.add_argument("--ft", default=os.environ.get("FT_BIN", str(ROOT / "build" / "ft")), help="the ft binary")
    ap.add_argument("--cache", default=os.environ.get("FT_BENCH_CACHE",
                                                      str(pathlib.Path.home() / ".cache" / "freetoken-bench")),
                    help="where node-llama-cpp, llama.cpp's headers and the compiled helper go")
    ap.add_argument("--json-out", help="also write every sample and the environment to this JSON file")
    a = ap.parse_args()

    threads = [int(x) for x in a.threads.split(",") if x]
    tests = [(a.n_prompt, 0)] if a.n_prompt > 0 else []
    tests += [(0, a.n_gen)] if a.n_gen > 0 else []
    if not tests or a.repetitions < 1 or not threads or min(threads) < 1:
        die("nothing to run: check -p, -n, -r and -t")
    for m in a.model:
        if not os.path.isfile(m):
            die(f"{m}: no such file")
    ft_bin = pathlib.Path(a.ft)
    if not ft_bin.exists():
        die(f"{ft_bin} not found: build ft first (cmake --build build) or pass --ft")
    cache = pathlib.Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)

    nlc_dir, nlc_bins, nlc_version = ensure_nlc(cache)
    src, commit = ensure_llama_source(nlc_dir, cache)
    nlc_inc = [src / "include", src / "ggml" / "include"]
    if a.isa:
        engines = [Engine(f"FT {isa}", f"FreeToken, {isa} kernels", [str(ft_bin), "bench", "--isa", isa])
                   for isa in ft_levels(ft_bin, a.isa)]
    else:
        engines = [Engine("FT", "FreeToken", [str(ft_bin), "bench"])]
    n_ft = len(engines)
    exe = compile_bench(nlc_bins, nlc_inc, cache)
    backend_dir = nlc_bins
    if a.llamacpp_cpu:
        # a directory with the shared libraries and this one CPU variant, so
        # ggml_backend_load_all_from_path has only it to choose
        lib = nlc_bins / f"libggml-cpu-{a.llamacpp_cpu}.so"
        if not lib.exists():
            have = sorted(p.name[len("libggml-cpu-"):-3] for p in nlc_bins.glob("libggml-cpu-*.so"))
            die(f"--llamacpp-cpu {a.llamacpp_cpu}: no such variant (have: {', '.join(have)})")
        backend_dir = cache / f"llamacpp-cpu-{a.llamacpp_cpu}"
        backend_dir.mkdir(exist_ok=True)
        for p in nlc_bins.iterdir():
            if p.name.startswith("libggml-cpu-") and p != lib:
                continue
            dst = backend_dir / p.name
            if not dst.exists():
                dst.symlink_to(p)
    engines.append(Engine("llama.cpp", f"llama.cpp: node-llama-cpp {nlc_version} prebuilt ({backend_dir})",
                          [str(exe), "--backend-dir", str(backend_dir)]))
    extra = os.environ.get("LLAMA_CPP_LIB_DIR")
    if extra:
        libdir = pathlib.Path(extra).resolve()
        exe2 = compile_bench(libdir, include_dirs_for(libdir, nlc_inc), cache)
        engines.append(Engine("llama.cpp²", f"llama.cpp²: LLAMA_CPP_LIB_DIR={libdir}",
                              [str(exe2), "--backend-dir", str(libdir)]))

    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    ft_version = subprocess.run([str(ft_bin), "--version"], capture_output=True, text=True).stdout.strip()
    env = {"cpu": cpu, "n_cpus": os.cpu_count(), "date": str(datetime.date.today()), "ft_version": ft_version,
           "llama_cpp_commit": commit, "node_llama_cpp": nlc_version, "repetitions": a.repetitions,
           "engines": {e.label: e.name for e in engines}}

    bw = read_bandwidth(ft_bin, max(threads))
    env["read_bandwidth_gb_per_s"] = bw

    # Rows are printed as soon as a model x threads group is done, so a long
    # run that is interrupted still leaves its finished rows.
    ft = engines[0]
    # ratio columns: every FreeToken level against every llama.cpp build
    pairs = [(f, r) for r in range(n_ft, len(engines)) for f in range(n_ft)]
    head = "| model | type | threads | test | " + " | ".join(f"{e.label} t/s" for e in engines)
    head += " | " + " | ".join(f"{engines[f].label} ÷ {engines[r].label}" for f, r in pairs) + " |"
    print(head)
    print("|" + " --- |" * 4 + " ---: |" * (len(engines) + len(pairs)), flush=True)
    results = []
    adjacent_bw = {}  # (model, threads, rep) -> GB/s probed just before that repetition's decode runs
    total = len(a.model) * len(threads) * a.repetitions * len(tests) * len(engines)
    done = 0
    for model in a.model:
        for t in threads:
            for rep in range(a.repetitions):
                for (p, n) in tests:
                    if n:
                        adjacent_bw[(str(model), t, rep)] = read_bandwidth(ft_bin, t, quick=True).get(t)
                    for e in engines:
                        done += 1
                        test = f"pp{p}" if p else f"tg{n}"
                        log(f"[{done}/{total}] {os.path.basename(model)} t{t} {test} run {rep + 1}/{a.repetitions}: "
                            f"{e.label}")
                        v = e.run(model, t, p, n, a.seed)
                        log(f"    {v:.2f} t/s")
            mtype = ft.model_type.get(str(model), "?")
            for (p, n) in tests:
                test = f"pp{p}" if p else f"tg{n}"
                key = (str(model), t, test)
                meds = [statistics.median(e.samples[key]) for e in engines]
                ratios = [meds[f] / meds[r] if meds[r] > 0 else float("nan") for f, r in pairs]
                cells = [os.path.basename(model), mtype, str(t), test, *map(fmt_ts, meds),
                         *(f"{r:.2f}×" for r in ratios)]
                print("| " + " | ".join(cells) + " |", flush=True)
                row = {"model": str(model), "model_type": mtype, "model_size": ft.model_size[str(model)],
                       "threads": t, "test": test,
                       "median_ts": {e.label: m for e, m in zip(engines, meds)},
                       "samples_ts": {e.label: e.samples[key] for e in engines},
                       "ratio_of_medians": ({engines[r].label: v for (f, r), v in zip(pairs, ratios)} if n_ft == 1 else
                                            {f"{engines[f].label} / {engines[r].label}": v
                                             for (f, r), v in zip(pairs, ratios)})}
                if n:
                    # Decode reads (nearly) every weight once per token: bytes x tokens/s.
                    row["weight_read_gb_per_s"] = {e.label: ft.model_size[str(model)] * m / 1e9
                                                   for e, m in zip(engines, meds)}
                    probes = [adjacent_bw.get((str(model), t, rep)) for rep in range(a.repetitions)]
                    if all(probes):
                        row["adjacent_read_bandwidth_gb_per_s"] = probes
                        row["share_of_adjacent_read_bandwidth"] = {
                            e.label: statistics.median(ft.model_size[str(model)] * v / 1e9 / bw_rep
                                                       for v, bw_rep in zip(e.samples[key], probes))
                            for e in engines}
                results.append(row)
            if a.json_out:
                env["isa"] = {e.label: e.isa for e in engines}
                pathlib.Path(a.json_out).write_text(
                    json.dumps({"environment": env, "results": results}, indent=2) + "\n")

    # The probe again: another job may have held the memory bus the first
    # time; the better of the two is the yardstick.
    for t, v in read_bandwidth(ft_bin, max(threads)).items():
        bw[t] = max(bw.get(t, 0.0), v)
    for r in results:
        if "weight_read_gb_per_s" in r and bw.get(r["threads"]):
            r["share_of_read_bandwidth"] = {k: v / bw[r["threads"]] for k, v in r["weight_read_gb_per_s"].items()}
    if a.json_out:
        pathlib.Path(a.json_out).write_text(json.dumps({"environment": env, "results": results}, indent=2) + "\n")

    print()
    print(f"Medians of {a.repetitions} runs per engine, interleaved run by run; "
          f"{cpu or platform.machine()}, {os.cpu_count()} CPUs, {datetime.date.today()}.")
    for e in engines[:n_ft]:
        print(f"- {e.label}: FreeToken {ft_version}, kernels {e.isa}")
    for e in engines[n_ft:]:
        print(f"- {e.name}, CPU backend {e.isa}")
    print(f"- llama.cpp source {commit[:12]} (node-llama-cpp's bundle); each run loads the model, warms up "
          f"as llama-bench does and times one repetition")
    if bw:
        print("- machine read bandwidth (ft-bench-bandwidth, best of before/after the runs): "
              + ", ".join(f"{t} thread{'s' if t > 1 else ''} {v:.1f} GB/s" for t, v in sorted(bw.items())))
    for r in results:
        if "weight_read_gb_per_s" in r:
            share = r.get("share_of_read_bandwidth", {})
            adj = r.get("share_of_adjacent_read_bandwidth", {})
            print(f"- {os.path.basename(r['model'])} t{r['threads']} {r['test']}: weights read at "
                  + ", ".join(f"{k} {v:.1f} GB/s" + (f" ({100 * share[k]:.0f}%" if k in share else "")
                              + (f", {100 * adj[k]:.0f}% of the adjacent probe" if k in adj else "")
                              + (")" if k in share else "")
                              for k, v in r["weight_read_gb_per_s"].items())
                  + " (model bytes x decode tokens/s; % of the machine's best read bandwidth, and the median"
                  " share of the probe run just before each repetition"
                  + (f": {', '.join(f'{b:.1f}' for b in r['adjacent_read_bandwidth_gb_per_s'])} GB/s"
                     if "adjacent_read_bandwidth_gb_per_s" in r else "") + ")")


def read_bandwidth(ft_bin, max_threads, quick=False):
    """GB/s per thread count from ft-bench-bandwidth (built beside ft), the
    better of its plain and prefetch columns; {} when it is not there.
    quick: a one-second probe (512 MiB, best of 3 passes)."""
    probe = ft_bin.parent / "ft-bench-bandwidth"
    if not probe.exists():
        if not quick:
            log(f"{probe} not found: no bandwidth yardstick")
        return {}
    log(f"measuring read bandwidth with {probe}")
    size, passes = ("512", "3") if quick else ("1024", "5")
    out = subprocess.run([str(probe), "-t", str(max_threads), "--mib", size, "--passes", passes],
                         capture_output=True, text=True).stdout
    bw = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[0].isdigit():
            bw[int(f[0])] = max(float(f[1]), float(f[2]))
    return bw


if __name__ == "__main__":
    main()
