"""End-to-end tests of the hardware report and the thread/NUMA flags:
ft info --hw on this machine and on a synthetic two-node machine
(HWLOC_SYNTHETIC), the flags' usage errors, and the same output from
ft run / ft logits under every --numa mode, on this machine and on the
synthetic one (where each node's workers read their own weight copy)."""
import os
import re
import subprocess

import pytest

from conftest import ft_bin

MODES = ["off", "distribute", "isolate", "replicate"]
TWO_NODES = {"HWLOC_SYNTHETIC": "pack:2 numa:1 core:4 pu:2"}


def test_info_hw(ft):
    r = ft("info", "--hw")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    for field in ("cpu:", "isa:", "features:", "topology:", "numa 0:", "caches:", "binding:", "placement:"):
        assert field in out, out
    assert re.search(r"isa:\s+(scalar|avx2|avx-vnni|avx512|amx|neon|neon-dotprod|neon-i8mm) kernels in use", out), out
    assert re.search(r"L1d \d+ KiB x\d+", out), out
    cores = int(re.search(r"(\d+) cores, (\d+) PUs", out).group(1))
    # Default: one thread per physical core, each on its own core.
    assert f"placement: {cores} threads, --numa off" in out
    for i in range(cores):
        assert re.search(rf"thread {i}: core {i}, node \d+", out), out


def test_info_hw_synthetic_two_nodes(ft):
    r = ft("info", "--hw", "--numa", "replicate", "-t", "6", env=TWO_NODES)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "2 packages, 8 cores, 16 PUs (hardware threads), 2 NUMA nodes" in out
    assert "numa 1:" in out and "CPUs 8-15" in out
    expected = [(0, 0, 0), (1, 4, 1), (2, 1, 0), (3, 5, 1), (4, 2, 0), (5, 6, 1)]
    for t, core, node in expected:
        assert f"thread {t}: core {core}, node {node}," in out, out
    assert "weights 0: bound to node 0, read by node 0" in out
    assert "weights 1: bound to node 1, read by node 1" in out

    r = ft("info", "--hw", "--numa", "distribute", env=TWO_NODES)
    out = r.stdout.decode()
    assert "placement: 8 threads, --numa distribute" in out
    assert "weights 0: interleaved over nodes 0-1" in out

    r = ft("info", "--hw", "--numa", "isolate", "--numa-node", "1", env=TWO_NODES)
    out = r.stdout.decode()
    assert "placement: 4 threads, --numa isolate" in out
    assert "thread 0: core 4, node 1," in out and "thread 3: core 7, node 1," in out
    assert "weights 0: bound to node 1" in out


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs and sched_setaffinity")
def test_info_hw_obeys_cpu_binding():
    # Like `taskset -c LAST ft info --hw`: one core, the thread on that CPU.
    last = max(os.sched_getaffinity(0))
    r = subprocess.run([ft_bin(), "info", "--hw"], capture_output=True, timeout=60,
                       preexec_fn=lambda: os.sched_setaffinity(0, {last}))
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert re.search(r"1 core, 1 PU", out), out
    assert "placement: 1 thread, --numa off" in out
    assert re.search(rf"thread 0: core 0, node \d+, CPUs {last}\n", out), out


@pytest.mark.parametrize("args", [
    ["run", "-m", "x.gguf", "-p", "a", "--numa", "numactl"],
    ["run", "-m", "x.gguf", "-p", "a", "--numa-node", "0"],
    ["run", "-m", "x.gguf", "-p", "a", "--numa", "isolate", "--numa-node", "64"],
    ["run", "-m", "x.gguf", "-p", "a", "-t", "-1"],
    ["logits", "-m", "x.gguf", "--tokens", "1", "--numa", "bogus"],
    ["info", "--hw", "--numa", "bogus"],
    ["info", "x.gguf", "--numa", "off"],
])
def test_flag_errors_are_one_line(ft, args):
    r = ft(*args)
    assert r.returncode == 2, args
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ft"), (args, lines)


def greedy(ft, model, mode, threads, env=None):
    r = ft("run", "-m", model, "-p", "Once upon a time", "-n", "16", "--temp", "0", "-t", threads,
           "--numa", mode, "--no-metrics", env=env)
    assert r.returncode == 0, (mode, r.stderr)
    return r.stdout


def test_run_same_text_in_every_mode(ft, shared_models):
    m = shared_models / "llama-Q4_K_M.gguf"
    ref = greedy(ft, m, "off", 2)
    assert len(ref) > 0
    for mode in MODES[1:]:
        assert greedy(ft, m, mode, 2) == ref, mode


def test_run_same_text_on_two_synthetic_nodes(ft, shared_models):
    # Threads cannot be pinned to made-up cores, nor memory bound to made-up
    # nodes: ft warns and runs, with one weight copy per node for replicate.
    m = shared_models / "gemma3-Q8_0.gguf"
    ref = greedy(ft, m, "off", 4)
    for mode in MODES[1:]:
        assert greedy(ft, m, mode, 4, env=TWO_NODES) == ref, mode


def test_logits_same_in_every_mode(ft, shared_models):
    m = shared_models / "qwen2-Q8_0.gguf"
    outs = [ft("logits", "-m", m, "--tokens", "1 450 4996 1735", "--numa", mode).stdout for mode in MODES]
    assert outs[0].startswith(b"{") and all(o == outs[0] for o in outs), MODES
