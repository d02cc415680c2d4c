#!/usr/bin/env python3
"""Generate tests/data/templates: llama.cpp's chat templates and llama.cpp's own renderings of them.

llama.cpp's source comes from the npm package node-llama-cpp@3.21.1 (a git
bundle inside it, as bench/compare_llamacpp.py uses it). Its models/templates/
holds the chat templates of real models; oracle/render.cpp, compiled against the
same source's Jinja engine (common/jinja/*.cpp, common/json.cpp with the vendored
nlohmann json), renders each template for every scenario below with the context
common/chat.cpp builds. The outputs are written once and committed:

  llama.cpp/<name>.jinja        the template, byte for byte
  expected/<name>.json          {"template", "caps", "cases": [{"scenario", "context", "output" | "error"}]}
  scenarios.json                each scenario as an OpenAI client sends it ({"messages", "tools"?,
                                "add_generation_prompt"})

tests/unit/test_chat_template_corpus.c renders every case with FreeToken's Jinja
and compares byte for byte. Run from anywhere:

  tests/data/templates/generate.py [--cache DIR]

Needs npm, git and a C++17 compiler. The clock is fixed (FT_ORACLE_TIME, TZ=UTC)
so strftime_now and the date strings are reproducible.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile

NLC_VERSION = "3.21.1"
HERE = pathlib.Path(__file__).resolve().parent
ORACLE_TIME = "1785456000"  # 2026-07-31 00:00:00 UTC
BOS, EOS = "<s>", "</s>"

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "max_results": {"type": "integer", "description": "At most this many results"}},
            "required": ["query"]}}},
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What is the weather in Paris?"}
CALL1 = {"id": "call12345", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\", \"unit\": \"celsius\"}"}}
CALL2 = {"id": "call67890", "type": "function",
         "function": {"name": "search", "arguments": "{\"query\": \"Paris événements\", \"max_results\": 3}"}}

SCENARIOS = {
    # a plain conversation with a system message, ending on a user turn
    "chat": {"messages": [SYSTEM, {"role": "user", "content": "Hello!"},
                          {"role": "assistant", "content": "Hi! How can I help?"},
                          {"role": "user", "content": "Tell me a joke about \"quotes\" — and ünïcode."}],
             "add_generation_prompt": True},
    # one user message, no system message, no generation prompt
    "user_only": {"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": False},
    # tools offered, the model must decide
    "tools": {"messages": [SYSTEM, USER], "tools": TOOLS, "add_generation_prompt": True},
    # tools offered without a system message
    "tools_no_system": {"messages": [USER], "tools": TOOLS, "add_generation_prompt": True},
    # a tool call and its result in the history (content "" as llama-server passes it)
    "tool_result": {"messages": [SYSTEM, USER,
                                 {"role": "assistant", "content": "", "tool_calls": [CALL1]},
                                 {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
                                  "content": "{\"temperature\": 18, \"condition\": \"sunny\"}"}],
                    "tools": TOOLS, "add_generation_prompt": True},
    # two parallel calls, two results, then the final answer and a new question
    "parallel_calls": {"messages": [USER,
                                    {"role": "assistant", "content": "", "tool_calls": [CALL1, CALL2]},
                                    {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
                                     "content": "18 degrees, sunny"},
                                    {"role": "tool", "tool_call_id": "call67890", "name": "search",
                                     "content": "1. Fête de la musique"},
                                    {"role": "assistant", "content": "It is 18 °C and sunny in Paris."},
                                    {"role": "user", "content": "Thanks"}],
                       "tools": TOOLS, "add_generation_prompt": True},
}


def log(msg):
    print(msg, file=sys.stderr)


def llama_source(cache):
    """A checkout of llama.cpp's models/templates, common and vendor from node-llama-cpp's bundle."""
    pkg = cache / f"node-llama-cpp-{NLC_VERSION}"
    bundle = pkg / "package" / "llama" / "gitRelease.bundle"
    if not bundle.exists():
        pkg.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "pack", f"node-llama-cpp@{NLC_VERSION}"], cwd=pkg, check=True, stdout=sys.stderr)
        with tarfile.open(pkg / f"node-llama-cpp-{NLC_VERSION}.tgz") as t:
            t.extractall(pkg, filter="data")
    commit = subprocess.run(["git", "bundle", "list-heads", str(bundle)], capture_output=True, text=True,
                            check=True).stdout.split()[0]
    src = cache / f"llama.cpp-src-{commit[:12]}"
    if not (src / "common" / "jinja" / "runtime.cpp").exists():
        shutil.rmtree(src, ignore_errors=True)
        subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(bundle), str(src)], check=True)
        subprocess.run(["git", "-C", str(src), "checkout", "--quiet", "HEAD", "--", "models/templates", "common",
                        "vendor"], check=True)
    return src, commit


def build_oracle(src, cache):
    stub = cache / "oracle-stub"
    stub.mkdir(exist_ok=True)
    # common/json.cpp only takes GGML_ASSERT from ggml.h.
    (stub / "ggml.h").write_text("#pragma once\n#include <cstdio>\n#include <cstdlib>\n"
                                 "#define GGML_ASSERT(x) do { if (!(x)) { fprintf(stderr, \"assert %s\\n\", #x); "
                                 "abort(); } } while (0)\n")
    exe = cache / "oracle-render"
    cxx = os.environ.get("CXX", "g++")
    sources = sorted(str(p) for p in (src / "common" / "jinja").glob("*.cpp"))
    sources += [str(src / "common" / "json.cpp"), str(src / "common" / "unicode.cpp")]
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{stub}", f"-I{src / 'common'}", f"-I{src / 'vendor'}", "-o",
                    str(exe), str(HERE / "oracle" / "render.cpp")] + sources, check=True)
    return exe


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=str(pathlib.Path.home() / ".cache" / "freetoken-templates"))
    a = ap.parse_args()
    cache = pathlib.Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    src, commit = llama_source(cache)
    exe = build_oracle(src, cache)
    tdir, edir = HERE / "llama.cpp", HERE / "expected"
    shutil.rmtree(tdir, ignore_errors=True)
    shutil.rmtree(edir, ignore_errors=True)
    tdir.mkdir()
    edir.mkdir()
    env = dict(os.environ, TZ="UTC", FT_ORACLE_TIME=ORACLE_TIME)
    scen_dir = cache / "scenarios"
    scen_dir.mkdir(exist_ok=True)
    for name, scen in SCENARIOS.items():
        (scen_dir / f"{name}.json").write_text(json.dumps(scen, ensure_ascii=False))
    (HERE / "scenarios.json").write_text(json.dumps(SCENARIOS, ensure_ascii=False, indent=1) + "\n")
    templates = sorted((src / "models" / "templates").glob("*.jinja"))
    n_err = 0
    for path in templates:
        shutil.copyfile(path, tdir / path.name)
        cases, caps = [], None
        for name in SCENARIOS:
            r = subprocess.run([str(exe), str(path), str(scen_dir / f"{name}.json"), BOS, EOS], env=env,
                               capture_output=True, check=True)
            case = json.loads(r.stdout)
            caps = case.pop("caps", caps)
            n_err += "error" in case
            cases.append({"scenario": name, **case})
        doc = {"template": path.name, "llama.cpp": commit, "time": int(ORACLE_TIME), "caps": caps, "cases": cases}
        (edir / (path.stem + ".json")).write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n")
    log(f"{len(templates)} templates x {len(SCENARIOS)} scenarios from llama.cpp {commit[:12]}; "
        f"{n_err} cases are errors in llama.cpp too")


if __name__ == "__main__":
    main()
