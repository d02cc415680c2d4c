"""End-to-end tests of `ft perplexity`.

The numbers are checked against an independent computation: numpy on the
full logits that `ft logits` prints (log-softmax, NLL, KL divergence, top-1,
Δp written out here from their definitions), over the same windows built
here from `ft tokenize` output; and, when llama.cpp is built in
/tmp/llama-build, against llama-perplexity itself, including reading each
other's saved log-probability files."""
import json
import os
import pathlib
import re
import subprocess

import numpy as np
import pytest

from conftest import SHARED, run_ft

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT = ROOT / "data" / "jargon-4.4.7-prose.txt"
LLAMA_BIN = pathlib.Path(os.environ.get("FT_LLAMA_BIN", "/tmp/llama-build/bin"))
N_CTX, N_CHUNK = 32, 3


def final_ppl(out):
    return float(re.search(rb"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out).group(1))


def stat(out, label):
    m = re.search(re.escape(label).encode() + rb"\s*:\s*(-?[0-9.]+)", out)
    assert m, (label, out[-3000:])
    return float(m.group(1))


def tokens_of(model):
    r = run_ft("tokenize", "-m", model, "--add-special", input=TEXT.read_bytes())
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


def window_logits(model, window):
    """All logits of one window, from ft logits (not the code under test)."""
    r = run_ft("logits", "-m", model, "--tokens", " ".join(map(str, window)), "--top", "8000")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["top_logits"]
    out = np.empty((len(rows), 8000))
    for i, row in enumerate(rows):
        for tok, logit in row:
            out[i, tok] = logit
    return out


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def scored(model, toks):
    """Per scored position: log-probs and the target token, as llama.cpp
    defines them: windows of N_CTX, BOS first, second half scored."""
    bos = 1
    lps, targets = [], []
    for c in range(N_CHUNK):
        w = toks[c * N_CTX:(c + 1) * N_CTX]
        lp = log_softmax(window_logits(model, [bos] + w[1:]))
        for i in range(N_CTX // 2, N_CTX - 1):
            lps.append(lp[i])
            targets.append(w[i + 1])
    return np.array(lps), np.array(targets)


@pytest.fixture(scope="module")
def f32_and_q(request):
    d = SHARED / "models"
    if not (d / "README.md").exists():
        pytest.skip(f"{d} is absent")
    base, q = d / "llama-f32.gguf", d / "llama-Q4_0.gguf"
    toks = tokens_of(base)
    assert toks[0] == 1  # BOS
    return base, q, toks, scored(base, toks), scored(q, toks)


def test_ppl_against_numpy(f32_and_q):
    base, _, _, (lp, tgt), _ = f32_and_q
    nll = -lp[np.arange(len(tgt)), tgt]
    r = run_ft("perplexity", "-m", base, "-f", TEXT, "-c", N_CTX, "--chunks", N_CHUNK, "-t", "2")
    assert r.returncode == 0, r.stderr
    assert abs(final_ppl(r.stdout) - np.exp(nll.mean())) <= 2e-4 * np.exp(nll.mean())
    # the running value after the first window
    first = float(re.search(rb"\[1\]([0-9.]+),", r.stdout).group(1))
    k = N_CTX - 1 - N_CTX // 2
    assert abs(first - np.exp(nll[:k].mean())) <= 2e-4 * first
    # standard error as llama.cpp: ppl * sqrt(var(nll) / (n - 1))
    err = float(re.search(rb"\+/- ([0-9.]+)", r.stdout).group(1))
    want = np.exp(nll.mean()) * np.sqrt(nll.var() / (len(nll) - 1))
    assert abs(err - want) <= 1e-3 * want + 1e-4


def test_kld_against_numpy(f32_and_q):
    base, q, _, (lpb, tgt), (lpq, _) = f32_and_q
    idx = np.arange(len(tgt))
    kld = (np.exp(lpb) * (lpb - lpq)).sum(axis=1)
    same = (lpb.argmax(axis=1) == lpq.argmax(axis=1)).mean()
    dp = np.exp(lpq[idx, tgt]) - np.exp(lpb[idx, tgt])
    r = run_ft("perplexity", "-m", q, "--kld-base", base, "-f", TEXT, "-c", N_CTX, "--chunks", N_CHUNK, "-t", "2")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert abs(stat(out, "Mean    KLD") - kld.mean()) <= 1e-3 * kld.mean() + 1e-5
    assert abs(stat(out, "Median  KLD") - np.median(kld)) <= 1e-3 * np.median(kld) + 1e-5
    assert abs(stat(out, "Maximum KLD") - kld.max()) <= 1e-3 * kld.max() + 1e-5
    assert abs(stat(out, "Same top p") - 100 * same) <= 100.0 / len(tgt) + 1e-3  # one position of slack (ties)
    assert abs(stat(out, "Mean    Δp") - 100 * dp.mean()) <= 2e-3
    assert abs(stat(out, "Mean PPL(Q)") - np.exp(-lpq[idx, tgt].mean())) <= 2e-4 * np.exp(-lpq[idx, tgt].mean())
    assert abs(stat(out, "Mean PPL(base)") - np.exp(-lpb[idx, tgt].mean())) <= 2e-4 * np.exp(-lpb[idx, tgt].mean())


def test_saved_logits_round_trip(f32_and_q, tmp_path):
    base, q, *_ = f32_and_q
    saved = tmp_path / "base.kld"
    r = run_ft("perplexity", "-m", base, "-f", TEXT, "-c", N_CTX, "--chunks", N_CHUNK, "--save-logits", saved)
    assert r.returncode == 0, r.stderr
    n_vocab, nv = 8000, 8004
    assert saved.stat().st_size == 20 + 4 * N_CHUNK * N_CTX + 2 * N_CHUNK * (N_CTX - 1 - N_CTX // 2) * nv
    assert saved.read_bytes()[:8] == b"_logits_"
    exact = run_ft("perplexity", "-m", q, "--kld-base", base, "-f", TEXT, "-c", N_CTX, "--chunks", N_CHUNK)
    viafile = run_ft("perplexity", "-m", q, "--kld", saved)
    assert viafile.returncode == 0, viafile.stderr
    a, b = stat(exact.stdout, "Mean    KLD"), stat(viafile.stdout, "Mean    KLD")
    assert abs(a - b) <= 0.02 * a
    assert stat(exact.stdout, "Mean PPL(Q)") == stat(viafile.stdout, "Mean PPL(Q)")
    # against itself: ~0
    self_ = run_ft("perplexity", "-m", base, "--kld", saved)
    assert abs(stat(self_.stdout, "Mean    KLD")) < 1e-4
    assert stat(self_.stdout, "Same top p") > 97


def test_errors(ft, shared_models, tmp_path):
    m = shared_models / "llama-f32.gguf"
    for args in (["perplexity", "-m", m], ["perplexity", "-m", m, "-f", TEXT, "--kld-base", m, "--kld", "x"],
                 ["perplexity", "-m", m, "-f", TEXT, "-c", "-5"]):
        r = ft(*args)
        assert r.returncode == 2, args
        assert len(r.stderr.decode().strip().splitlines()) == 1
    short = tmp_path / "short.txt"
    short.write_text("A few words only.")
    bad_utf8 = tmp_path / "bad.txt"
    bad_utf8.write_bytes(b"abc \xff\xfe def " * 100)
    good = tmp_path / "good.kld"
    assert ft("perplexity", "-m", m, "-f", TEXT, "-c", "16", "--chunks", "2", "--save-logits", good).returncode == 0
    trunc = tmp_path / "trunc.kld"
    trunc.write_bytes(good.read_bytes()[:-10])
    notlogits = tmp_path / "not.kld"
    notlogits.write_bytes(b"hello, world" * 10)
    other_vocab = ROOT / "tests" / "fuzz" / "corpus" / "logprob_file" / "two_chunks"
    cases = [
        (["-f", tmp_path / "missing.txt"], b"missing.txt"),
        (["-f", short, "-c", "64"], b"two windows"),
        (["-f", bad_utf8], b"UTF-8"),
        (["--kld", trunc], b"truncated"),
        (["--kld", notlogits], b"not a log-probability file"),
        (["--kld", other_vocab], b"vocabulary of 16 tokens"),
        (["--kld", good, "-c", "32"], b"context of 16"),
        (["--kld", tmp_path / "none.kld"], b"none.kld"),
        (["-f", TEXT, "-c", "16", "--chunks", "2", "--save-logits", tmp_path / "no" / "x.kld"], b"x.kld"),
    ]
    for extra, msg in cases:
        r = ft("perplexity", "-m", m, *extra)
        assert r.returncode == 1, extra
        assert msg in r.stderr, (extra, r.stderr)
    assert not (tmp_path / "no").exists()


def run_llama(args, want, env):
    """llama.cpp's logger writes from a thread that can lose the last lines
    at exit (seen here on a loaded machine): retry until `want` is there."""
    for _ in range(8):
        r = subprocess.run(args, capture_output=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        if all(w in r.stdout + r.stderr for w in want):
            return r.stdout + r.stderr
    pytest.fail(f"llama-perplexity never printed all of {want!r}")


def llama_perplexity():
    exe = LLAMA_BIN / "llama-perplexity"
    if not exe.exists():
        pytest.skip(f"llama-perplexity not found in {LLAMA_BIN} (set FT_LLAMA_BIN)")
    return exe


def test_against_llama_perplexity(shared_models, tmp_path):
    lp = llama_perplexity()
    env = dict(os.environ, LD_LIBRARY_PATH=str(LLAMA_BIN))
    base, q = shared_models / "llama-f32.gguf", shared_models / "llama-Q8_0.gguf"
    args = ["-f", TEXT, "-c", "128", "--chunks", "4", "-t", "2"]
    theirs_file = tmp_path / "llama.kld"
    theirs = final_ppl(run_llama([lp, "-m", base, *args, "--kl-divergence-base", theirs_file], [b"Final estimate"],
                                 env))
    ours_file = tmp_path / "ft.kld"
    r = run_ft("perplexity", "-m", base, *args, "--save-logits", ours_file)
    assert abs(final_ppl(r.stdout) - theirs) <= 1e-3 * theirs
    # Each reads the other's file. The two engines' Q8_0 logits differ by
    # about as much as Q8_0 differs from F32 on this random model, so each
    # engine's KLD is compared with itself, on the two files (which differ
    # only by the engines' F32 logits, ~0.02).
    def llama_kld(f):
        out = run_llama([lp, "-m", q, "-t", "2", "--kl-divergence-base", f, "--kl-divergence"], [b"Mean    KLD"], env)
        return stat(out, "Mean    KLD")

    def ft_kld(f):
        r = run_ft("perplexity", "-m", q, "--kld", f)
        assert r.returncode == 0, r.stderr
        return stat(r.stdout, "Mean    KLD")

    for kld in (llama_kld, ft_kld):
        k_ours, k_theirs = kld(ours_file), kld(theirs_file)
        assert abs(k_ours - k_theirs) <= 0.05 * k_theirs + 1e-4, (kld.__name__, k_ours, k_theirs)
