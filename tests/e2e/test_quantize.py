"""End-to-end tests of `ft quantize`: the files it writes against llama.cpp's,
its errors, its progress display, and that no failure -- a bad input, a full
disk, a kill in the middle -- leaves an output file behind.

With llama.cpp built in /tmp/llama-build (FT_LLAMA_BIN to override), also:
our file equals llama-quantize's byte for byte, and llama.cpp loads and runs
the files we write."""
import os
import pathlib
import pty
import re
import resource
import signal
import subprocess

import pytest

from conftest import ft_bin, run_ft

LLAMA_BIN = pathlib.Path(os.environ.get("FT_LLAMA_BIN", "/tmp/llama-build/bin"))
ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT = ROOT / "data" / "jargon-4.4.7-prose.txt"


def llama_tool(name):
    exe = LLAMA_BIN / name
    if not exe.exists():
        pytest.skip(f"llama.cpp's {name} not found in {LLAMA_BIN} (set FT_LLAMA_BIN)")
    return exe


def llama_env():
    return dict(os.environ, LD_LIBRARY_PATH=str(LLAMA_BIN))


def only_files(d):
    return sorted(p.name for p in pathlib.Path(d).iterdir())


def test_help_lists_types(ft):
    r = ft("quantize", "--help")
    assert r.returncode == 0
    out = r.stdout.decode()
    assert "usage: ft quantize" in out
    for t in ["Q4_K_M", "Q5_K_M", "Q3_K_M", "Q4_K_S", "Q5_K_S", "Q8_0", "Q6_K", "Q2_K", "BF16", "F16"]:
        assert t in out, t


@pytest.mark.parametrize("ftype", ["Q8_0", "Q4_0", "Q5_1", "BF16", "Q4_K_M", "Q3_K_M", "Q6_K", "Q2_K"])
def test_same_file_as_llama_cpp(ft, shared_models, tmp_path, ftype):
    """llama-TYPE.gguf was written by llama-quantize from llama-f32.gguf."""
    out = tmp_path / "out.gguf"
    r = ft("quantize", shared_models / "llama-f32.gguf", out, ftype, "-t", "2")
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == (shared_models / f"llama-{ftype}.gguf").read_bytes()
    assert b"wrote" in r.stderr and b"bits per weight" in r.stderr
    assert only_files(tmp_path) == ["out.gguf"]


def test_alias_and_case(ft, shared_models, tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    assert ft("quantize", shared_models / "llama-f32.gguf", a, "q4_k").returncode == 0
    assert ft("quantize", shared_models / "llama-f32.gguf", b, "Q4_K_M").returncode == 0
    assert a.read_bytes() == b.read_bytes()


def test_usage_errors(ft, shared_models, tmp_path):
    src = shared_models / "llama-f32.gguf"
    for args in (["quantize"], ["quantize", src, tmp_path / "o.gguf"], ["quantize", src, tmp_path / "o.gguf", "Q9_9"],
                 ["quantize", src, tmp_path / "o.gguf", "IQ2_XS"],
                 ["quantize", src, tmp_path / "o.gguf", "Q4_0", "--keep", "nonsense"],
                 ["quantize", src, tmp_path / "o.gguf", "Q4_0", "--keep", "x=IQ2_XS"]):
        r = ft(*args)
        assert r.returncode == 2, args
        err = r.stderr.decode().strip().splitlines()
        assert len(err) == 1 and err[0].startswith("ft quantize"), err
    assert only_files(tmp_path) == []


def test_refuses_to_overwrite_input(ft, shared_models, tmp_path):
    src = tmp_path / "in.gguf"
    src.write_bytes((shared_models / "llama-Q8_0.gguf").read_bytes())
    before = src.read_bytes()
    link = tmp_path / "other-name.gguf"
    os.link(src, link)
    sym = tmp_path / "sym.gguf"
    sym.symlink_to(src)
    for out in (src, link, sym, tmp_path / "." / "in.gguf"):
        r = ft("quantize", src, out, "Q4_0")
        assert r.returncode == 1, out
        assert b"input" in r.stderr
    assert src.read_bytes() == before
    assert only_files(tmp_path) == ["in.gguf", "other-name.gguf", "sym.gguf"]


def test_missing_and_bad_inputs_leave_nothing(ft, shared_models, tmp_path):
    out = tmp_path / "out.gguf"
    r = ft("quantize", tmp_path / "missing.gguf", out, "Q4_0")
    assert r.returncode == 1 and b"missing.gguf" in r.stderr
    bad = tmp_path / "trunc.gguf"
    data = (shared_models / "llama-f32.gguf").read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    r = ft("quantize", bad, out, "Q4_0")
    assert r.returncode == 1 and b"trunc.gguf" in r.stderr
    assert len(r.stderr.decode().strip().splitlines()) == 1
    r = ft("quantize", shared_models / "llama-f32.gguf", tmp_path / "no" / "dir" / "out.gguf", "Q4_0")
    assert r.returncode == 1
    assert only_files(tmp_path) == ["trunc.gguf"]


def _limit_file_size(limit, ignore_sigxfsz):
    def fn():
        if ignore_sigxfsz:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return fn


def test_disk_full_leaves_nothing(shared_models, tmp_path):
    """A write that fails (here: file size limit, as on a full disk) leaves no
    output and does not touch an existing file of that name."""
    out = tmp_path / "out.gguf"
    out.write_bytes(b"old contents")
    r = subprocess.run([ft_bin(), "quantize", shared_models / "llama-f32.gguf", out, "Q8_0"], capture_output=True,
                       preexec_fn=_limit_file_size(1 << 20, True), timeout=120)
    assert r.returncode == 1
    assert b"write failed" in r.stderr or b"too large" in r.stderr
    assert out.read_bytes() == b"old contents"
    assert only_files(tmp_path) == ["out.gguf"]


def test_killed_midway_leaves_nothing(shared_models, tmp_path):
    """The kernel kills the process (SIGXFSZ) in the middle of writing: the
    unnamed temporary file disappears with it."""
    out = tmp_path / "out.gguf"
    r = subprocess.run([ft_bin(), "quantize", shared_models / "llama-f32.gguf", out, "Q8_0"], capture_output=True,
                       preexec_fn=_limit_file_size(1 << 20, False), timeout=120)
    assert r.returncode == -signal.SIGXFSZ
    assert only_files(tmp_path) == []


def test_sigkill_midway_leaves_nothing(real_model, tmp_path):
    """SIGKILL while converting a real model (long enough to be caught)."""
    out = tmp_path / "out.gguf"
    p = subprocess.Popen([ft_bin(), "quantize", real_model, out, "Q4_K_M", "--pure", "-t", "1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        p.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        p.kill()
    p.wait()
    if p.returncode == 0:
        pytest.skip("the conversion finished before it could be killed")
    assert only_files(tmp_path) == []


def test_requantize_warns(ft, shared_models, tmp_path):
    r = ft("quantize", shared_models / "llama-Q8_0.gguf", tmp_path / "o.gguf", "Q4_0")
    assert r.returncode == 0
    assert b"warning: the input is already quantized (Q8_0" in r.stderr
    r = ft("quantize", shared_models / "llama-f32.gguf", tmp_path / "p.gguf", "Q4_0")
    assert b"warning" not in r.stderr


def test_progress_only_on_a_terminal(shared_models, tmp_path):
    r = run_ft("quantize", shared_models / "llama-f32.gguf", tmp_path / "a.gguf", "Q4_K_M")
    assert b"\r" not in r.stderr
    # With stderr on a pseudo-terminal, a progress line is redrawn in place.
    master, slave = pty.openpty()
    p = subprocess.Popen([ft_bin(), "quantize", shared_models / "llama-f32.gguf", tmp_path / "b.gguf", "Q4_K_M"],
                         stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            c = os.read(master, 4096)
        except OSError:
            break
        if not c:
            break
        chunks.append(c)
    p.wait(timeout=60)
    os.close(master)
    tty = b"".join(chunks)
    assert p.returncode == 0
    assert re.search(rb"\r\[ *\d+/ *21\]", tty), tty[:200]
    assert b"blk.1.ffn_down.weight" in tty
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()


def test_dry_run_and_keep(ft, shared_models, tmp_path):
    r = ft("quantize", shared_models / "llama-f32.gguf", tmp_path / "o.gguf", "Q4_K_M", "--dry-run",
           "--keep", "token_embd.weight=Q8_0", "--keep", "blk.*.attn_q.weight=F16")
    assert r.returncode == 0
    out = r.stdout.decode()
    assert re.search(r"token_embd\.weight\s+256 x 8000\s+F32\s+->\s+Q8_0", out)
    assert re.search(r"blk\.0\.attn_q\.weight.*->\s+F16", out)
    assert re.search(r"blk\.1\.ffn_down\.weight.*->\s+Q6_K", out)
    assert re.search(r"output_norm\.weight.*F32\s+->\s+F32", out)
    assert "bits per weight" in out
    assert only_files(tmp_path) == []


def test_same_bytes_as_llama_quantize_gemma(shared_models, tmp_path):
    """gemma3 (tied output, 6 layers) through both quantizers."""
    lq = llama_tool("llama-quantize")
    src = shared_models / "gemma3-F16.gguf"
    for ftype in ["Q4_K_M", "Q3_K_M", "Q5_0"]:
        ours, theirs = tmp_path / f"ft-{ftype}.gguf", tmp_path / f"ll-{ftype}.gguf"
        assert run_ft("quantize", src, ours, ftype).returncode == 0
        r = subprocess.run([lq, src, theirs, ftype, "2"], capture_output=True, env=llama_env(), timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert ours.read_bytes() == theirs.read_bytes(), ftype


def test_llama_cpp_runs_our_files(shared_models, tmp_path):
    """llama.cpp loads what we write and computes the same perplexity as ft."""
    lp = llama_tool("llama-perplexity")
    out = tmp_path / "q.gguf"
    assert run_ft("quantize", shared_models / "qwen2-F16.gguf", out, "Q4_K_S").returncode == 0
    for _ in range(4):  # llama.cpp's logger thread can lose the last lines at exit
        r = subprocess.run([lp, "-m", out, "-f", TEXT, "-c", "128", "--chunks", "4", "-t", "2"], capture_output=True,
                           env=llama_env(), timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        m = re.search(rb"Final estimate: PPL = ([0-9.]+)", r.stdout + r.stderr)
        if m:
            break
    theirs = float(m.group(1))
    r2 = run_ft("perplexity", "-m", out, "-f", TEXT, "-c", "128", "--chunks", "4", "-t", "2")
    assert r2.returncode == 0, r2.stderr
    ours = float(re.search(rb"Final estimate: PPL = ([0-9.]+)", r2.stdout).group(1))
    assert abs(ours - theirs) <= 0.01 * theirs, (ours, theirs)
