#!/usr/bin/env python3
"""llama.cpp's reference outputs for the test models in tests/data/models.

The oracles of FreeToken's forward-pass tests are llama.cpp's outputs, never
FreeToken's. This script makes them with llama.cpp build 80fb11a, the build
../shared/models was computed with: the prebuilt libllama of the npm package
node-llama-cpp@3.21.1, installed into the cache directory as
bench/compare_llamacpp.py does, with tools/llamacpp_reference.c compiled
against the llama.h / ggml.h of the source that package ships.

The CPU backend variant (libggml-cpu-<variant>.so) decides the last digits
of the logits. `--cpu-variant cooperlake` (the default; needs AVX-512 with
BF16) reproduces the JSONs of ../shared/models closest of the 14 prebuilt
variants (`validate` prints the table; tests/data/README.md has it); the
one ggml picks on an AMX machine, sapphirerapids, was up to 0.32 off.
`--cpu-variant auto` lets ggml pick.

  tools/llamacpp_reference.py build
      install / compile what is needed; prints the helper's path
  tools/llamacpp_reference.py logits MODEL.gguf [--tokens-from REF.json] [-o OUT.json]
      the JSON of the reference files (prompt_tokens, top_logits, greedy)
      for MODEL: the 48 prompt tokens of REF.json (default: those of
      tests/data/models/llama-f32.json) in one batch from position 0
  tools/llamacpp_reference.py quantize IN.gguf OUT.gguf TYPE
      llama_model_quantize with llama-quantize's defaults (its bytes)
  tools/llamacpp_reference.py validate DIR
      every DIR/*.json recomputed from DIR/*.gguf and compared: exact bytes,
      largest logit difference, greedy tokens
  tools/llamacpp_reference.py regen
      the derived models of tests/data/models.txt that are made here
      (source "regen"): quantized with llama.cpp from their committed
      base, their JSONs recomputed, their sha256 in models.txt rewritten

Cache: $FT_BENCH_CACHE or ~/.cache/freetoken-bench (shared with the bench).
"""
import argparse
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import compare_llamacpp as cl  # noqa: E402  (ensure_nlc, ensure_llama_source, find_lib)

DATA = ROOT / "tests" / "data"
MANIFEST = DATA / "models.txt"


def log(msg):
    print(f"llamacpp_reference: {msg}", file=sys.stderr, flush=True)


def cache_dir():
    d = pathlib.Path(os.environ.get("FT_BENCH_CACHE", pathlib.Path.home() / ".cache" / "freetoken-bench"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def build(variant="cooperlake"):
    """(helper executable, backend arguments) for the given CPU backend variant."""
    cache = cache_dir()
    nlc_dir, bins, _ = cl.ensure_nlc(cache)
    src, commit = cl.ensure_llama_source(nlc_dir, cache)
    srcfile = ROOT / "tools" / "llamacpp_reference.c"
    libs = [cl.find_lib(bins, r"libllama(\.v[0-9.]+)?\.so", "libllama"),
            cl.find_lib(bins, r"libggml(\.v[0-9.]+)?\.so", "libggml"),
            cl.find_lib(bins, r"libggml-base\.so", "libggml-base")]
    key = hashlib.sha1("\n".join([str(bins), str(src), srcfile.read_text()]).encode()).hexdigest()
    exe = cache / f"llamacpp_reference-{key[:12]}"
    if not exe.exists():
        cmd = [os.environ.get("CC", "cc"), "-O2", "-std=c11", "-D_GNU_SOURCE", f"-I{src / 'include'}",
               f"-I{src / 'ggml' / 'include'}", str(srcfile), "-o", str(exe) + ".tmp", *map(str, libs),
               f"-Wl,-rpath,{bins}", "-lm"]
        subprocess.run(cmd, check=True)
        os.rename(str(exe) + ".tmp", exe)
    if variant == "auto":
        return exe, ["--backend-dir", str(bins)]
    lib = bins / f"libggml-cpu-{variant}.so"
    if not lib.exists():
        cl.die(f"no CPU variant {variant} in {bins}")
    return exe, ["--cpu-backend", str(lib)]


def run_logits(tool, model, tokens):
    exe, backend = tool
    r = subprocess.run([str(exe), "logits", "-m", str(model), "--tokens", " ".join(map(str, tokens)), "--top", "32",
                        "--greedy", "16", "-t", "2", *backend], capture_output=True, text=True)
    if r.returncode != 0:
        cl.die(f"logits for {model} failed: {r.stderr.strip()}")
    return r.stdout


def run_quantize(tool, src, dst, ftype):
    exe, backend = tool
    r = subprocess.run([str(exe), "quantize", str(src), str(dst), ftype, "-t", "2", *backend], capture_output=True,
                       text=True)
    if r.returncode != 0:
        cl.die(f"quantize {src} -> {ftype} failed: {r.stderr.strip()}")


def prompt_of(ref):
    return json.loads(pathlib.Path(ref).read_text())["prompt_tokens"]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest():
    """Lines of tests/data/models.txt: name, base, type, source, sha256."""
    rows = []
    for line in MANIFEST.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            rows.append(line.split())
    return rows


def compare(ours_text, ref_path):
    ours, ref = json.loads(ours_text), json.loads(pathlib.Path(ref_path).read_text())
    same_bytes = ours_text == pathlib.Path(ref_path).read_text()
    ids_same = all([a[0] for a in ra] == [b[0] for b in rb] for ra, rb in zip(ours["top_logits"], ref["top_logits"]))
    maxdiff = max(abs(a[1] - b[1]) for ra, rb in zip(ours["top_logits"], ref["top_logits"]) for a, b in zip(ra, rb))
    return same_bytes, ids_same, maxdiff, ours["greedy"] == ref["greedy"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-variant", default="cooperlake",
                    help="prebuilt libggml-cpu variant to load (default cooperlake), or auto for ggml's pick")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build")
    p = sub.add_parser("logits")
    p.add_argument("model")
    p.add_argument("--tokens-from", default=str(DATA / "models" / "llama-f32.json"))
    p.add_argument("-o", "--output")
    p = sub.add_parser("quantize")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("type")
    p = sub.add_parser("validate")
    p.add_argument("dir")
    sub.add_parser("regen")
    a = ap.parse_args()

    tool = build(a.cpu_variant)
    if a.cmd == "build":
        print(tool[0], *tool[1])
    elif a.cmd == "logits":
        text = run_logits(tool, a.model, prompt_of(a.tokens_from))
        if a.output:
            pathlib.Path(a.output).write_text(text)
        else:
            sys.stdout.write(text)
    elif a.cmd == "quantize":
        run_quantize(tool, a.src, a.dst, a.type)
    elif a.cmd == "validate":
        d = pathlib.Path(a.dir)
        worst = 0.0
        print("| file | bytes identical | top-32 ids identical | largest logit difference | greedy identical |")
        print("|---|---|---|---|---|")
        for ref in sorted(d.glob("*.json")):
            model = ref.with_suffix(".gguf")
            if not model.exists():
                continue
            same, ids, diff, greedy = compare(run_logits(tool, model, prompt_of(ref)), ref)
            worst = max(worst, diff)
            print(f"| {ref.name} | {'yes' if same else 'no'} | {'yes' if ids else 'no'} | {diff:.5f} | "
                  f"{'yes' if greedy else 'no'} |", flush=True)
        print(f"\nlargest difference over all files: {worst:.5f}")
    elif a.cmd == "regen":
        models = DATA / "models"
        rows = read_manifest()
        out_lines = []
        with tempfile.TemporaryDirectory() as tmp:
            for name, base, ftype, source, digest in rows:
                if source == "regen":
                    dst = pathlib.Path(tmp) / name
                    run_quantize(tool, models / base, dst, ftype)
                    digest = sha256(dst)
                    (models / name.replace(".gguf", ".json")).write_text(
                        run_logits(tool, dst, prompt_of(models / "llama-f32.json")))
                    log(f"{name}: {digest}")
                out_lines.append(f"{name} {base} {ftype} {source} {digest}")
        head = [l for l in MANIFEST.read_text().splitlines() if l.startswith("#")]
        MANIFEST.write_text("\n".join(head + out_lines) + "\n")


if __name__ == "__main__":
    main()
