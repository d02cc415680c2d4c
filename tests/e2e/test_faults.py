"""Files the tools write appear whole or not at all: `ft gen-model`,
`ft perplexity --save-logits` and `ft compare` (its reports and chart) are
killed mid-write (SIGKILL, and SIGXFSZ from a file-size limit) and leave
nothing; on a full disk (a small tmpfs when the tests run as root, else the
file-size limit with SIGXFSZ ignored) they fail with one line and leave
nothing, and an older file of that name stays as it was.
(`ft quantize` has the same checks in test_quantize.py.)"""
import os
import pathlib
import resource
import signal
import subprocess
import time

import pytest

from conftest import SHARED, ft_bin, run_ft
from test_quantize import _limit_file_size as file_size_limit

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT = ROOT / "data" / "jargon-4.4.7-prose.txt"
GEN = ["gen-model", "--n-embd", "512", "--n-layer", "8", "--n-head", "8", "--n-ff", "2048", "--n-vocab", "4000"]


def files(d):
    return sorted(p.name for p in pathlib.Path(d).iterdir())


def small_model():
    m = SHARED / "models" / "llama-F16.gguf"
    if not m.exists():
        pytest.skip(f"{m} is absent: the reference models come with ../shared")
    return m


def run(args, limit=None, ignore=False, timeout=600):
    return subprocess.run([ft_bin(), *map(str, args)], capture_output=True, timeout=timeout,
                          preexec_fn=file_size_limit(limit, ignore) if limit else None)


# Each tool with its output in directory d: (args, the output files it writes).
def jobs(d):
    return {
        "gen-model": ([*GEN, "-o", d / "m.gguf"], ["m.gguf"]),
        "perplexity": (["perplexity", "-m", small_model(), "-f", TEXT, "-c", "64", "--chunks", "8", "--save-logits",
                        d / "base.kld"], ["base.kld"]),
        "compare": (["compare", "-m", small_model(), "-q", "Q8_0", "-f", TEXT, "-c", "64", "--chunks", "4",
                     "--no-bench", "--cache-dir", d.parent / (d.name + "-cache"), "-o", d / "r.md", "--svg",
                     d / "c.svg"], ["c.svg", "r.md"]),
    }


@pytest.mark.parametrize("tool", ["gen-model", "perplexity", "compare"])
def test_complete_run_writes_whole_files(tool, tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    args, outs = jobs(d)[tool]
    r = run(args)
    assert r.returncode == 0, r.stderr
    assert files(tmp_path / "out") == outs


@pytest.mark.parametrize("tool", ["gen-model", "perplexity", "compare"])
def test_killed_by_the_kernel_mid_write_leaves_nothing(tool, tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    args, _ = jobs(d)[tool]
    r = run(args, limit=4096)  # the first write past 4 KiB kills the process (SIGXFSZ)
    assert r.returncode == -signal.SIGXFSZ, r.stderr
    assert files(d) == []


def test_sigkill_while_generating_a_model_leaves_nothing(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    p = subprocess.Popen([ft_bin(), "gen-model", "--preset", "llama3.2-1b", "-o", d / "big.gguf"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    if p.poll() is not None:
        pytest.skip("the model was written before it could be killed")
    p.kill()
    p.wait()
    assert files(d) == []


def mount_small_tmpfs(d, size):
    if os.geteuid() != 0:
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True)
    return r.returncode == 0


@pytest.mark.parametrize("tool", ["gen-model", "perplexity", "compare"])
def test_full_disk_is_one_line_and_leaves_the_old_file(tool, tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    args, outs = jobs(d)[tool]
    tmpfs = mount_small_tmpfs(d, f"{4 * len(outs)}k")  # room for the old files' pages alone
    try:
        for name in outs:
            (d / name).write_bytes(b"old")
        r = run(args) if tmpfs else run(args, limit=4096, ignore=True)
        assert r.returncode == 1, r.stderr
        err = r.stderr.decode().strip().splitlines()
        assert len([l for l in err if l.startswith("ft ")]) == 1, err  # one error line
        assert "No space left" in err[-1] or "too large" in err[-1] or "write failed" in err[-1], err
        assert files(d) == outs
        assert all((d / name).read_bytes() == b"old" for name in outs)
    finally:
        if tmpfs:
            subprocess.run(["umount", str(d)], check=True)


def test_allocation_failure_at_load_is_one_line(real_model):
    # 400 MB of address space: the 253 MB mapping fits, the copy of the weights does not.
    for limit in (100 << 20, 400 << 20):
        def cap(limit=limit):
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        r = subprocess.run([ft_bin(), "run", "-m", real_model, "-p", "hi", "-n", "2"], capture_output=True,
                           timeout=120, preexec_fn=cap)
        assert r.returncode == 1, r.stderr
        lines = r.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ft run: ") and "memory" in lines[0].lower(), lines


def test_model_file_replaced_or_truncated_under_a_server(tmp_path):
    """Without --mmap the server runs from its copy of the weights: the file
    may be truncated under it. With --mmap a file replaced by rename (as
    ft quantize writes) leaves the mapped old one serving."""
    from test_serve import Server
    for mmap in (False, True):
        model = tmp_path / f"m{int(mmap)}.gguf"
        model.write_bytes(small_model().read_bytes())
        s = Server(model, "-c", "256", *(["--mmap"] if mmap else []))
        try:
            cl = s.client()
            mid = cl.models.list().data[0].id
            before = cl.completions.create(model=mid, prompt="a b c", max_tokens=4, temperature=0).choices[0].text
            if mmap:
                new = tmp_path / "new.gguf"
                new.write_bytes(b"not a model")
                os.rename(new, model)
            else:
                with open(model, "r+b") as f:
                    f.truncate(1000)
            after = cl.completions.create(model=mid, prompt="a b c", max_tokens=4, temperature=0).choices[0].text
            assert after == before
        finally:
            assert s.stop() == 0, s.stderr()
