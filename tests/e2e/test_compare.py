"""End-to-end tests of `ft compare` on a small generated model (the F16
reference model of ../shared, random weights): the table in its three
formats, the SVG chart, the cache, the ranking of formats, and the bench
step (which needs `ft bench`; until this ft has one, compare must say so
and point to --no-bench)."""
import csv
import io
import json
import pathlib
import re
import xml.etree.ElementTree as ET

import pytest

from conftest import SHARED, run_ft

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT = ROOT / "data" / "jargon-4.4.7-prose.txt"
SVG = "{http://www.w3.org/2000/svg}"


def compare(base, tmp_path, *extra):
    return run_ft("compare", "-m", base, "-q", "Q8_0,Q5_K_M,Q4_0,Q2_K", "-f", TEXT, "-c", "64", "--chunks", "4",
                  "-t", "2", "--cache-dir", tmp_path / "cache", *extra, timeout=900)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    shared_models = SHARED / "models"
    if not (shared_models / "README.md").exists():
        pytest.skip(f"{shared_models} is absent: the reference models come with ../shared")
    d = tmp_path_factory.mktemp("compare")
    r = compare(shared_models / "llama-F16.gguf", d, "--no-bench", "-o", d / "report.json", "--svg",
                d / "chart.svg")
    assert r.returncode == 0, r.stderr
    return d, r, json.loads((d / "report.json").read_text())


def test_table_and_ranking(report):
    d, r, rep = report
    rows = rep["rows"]
    assert [x["format"] for x in rows] == ["base (F16)", "Q8_0", "Q5_K_M", "Q4_0", "Q2_K"]
    assert rows[0]["is_base"] and "kld" not in rows[0]
    assert rep["windows"] == 4 and rep["n_ctx"] == 64 and rep["tokens_scored"] == 4 * 31
    q = rows[1:]
    # bits per weight fall down the list, and KLD grows; top-1 agreement falls
    assert all(a["bits_per_weight"] > b["bits_per_weight"] for a, b in zip(q, q[1:]))
    assert all(a["kld"] < b["kld"] for a, b in zip(q, q[1:]))
    assert all(a["same_top1"] > b["same_top1"] for a, b in zip(q, q[1:]))
    assert all(x["kld"] > 0 and not x["same_as_base"] for x in q)
    assert all(x["size_bytes"] == (d / "cache").joinpath(pathlib.Path(x["file"]).name).stat().st_size for x in q)
    # the markdown table on stdout
    out = r.stdout.decode()
    assert "| format | size (GiB) | bits/weight | prefill (tok/s) | decode (tok/s) | PPL | KLD | same top-1 | mean Δp |" in out
    assert re.search(r"\| Q4_0 \| [0-9.e-]+ \| 5\.3\d \| — \| — \| [0-9.]+ ± [0-9.]+ \| [0-9.e-]+ ± [0-9.e-]+ \| [0-9.]+ % \|", out)
    assert "not measured (`--no-bench`)" in out


def test_chart(report):
    d, _, rep = report
    root = ET.parse(d / "chart.svg").getroot()  # well-formed XML
    assert root.tag == SVG + "svg"
    texts = " ".join("".join(t.itertext()) for t in root.iter(SVG + "text"))
    for fmt in ("Q8_0", "Q5_K_M", "Q4_0", "Q2_K"):
        assert fmt in texts
    assert "bits per weight" in texts  # x axis without speeds
    assert "mean KL divergence" in texts and "log scale" in texts
    assert "threads" in texts and "Machine:" in texts and "jargon-4.4.7-prose.txt" in texts
    circles = list(root.iter(SVG + "circle"))
    assert len(circles) == 4
    # marker area grows with file size
    radius = {float(c.get("r")) for c in circles}
    assert len(radius) == 4


def test_csv_and_md_outputs_and_cache(shared_models, report, tmp_path):
    d, _, rep = report
    # Same cache directory: nothing is quantized again.
    r = compare(shared_models / "llama-F16.gguf", d, "--no-bench", "-o", tmp_path / "r.csv")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(b"reusing") == 4 and b"wrote " + bytes(d / "cache") not in r.stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "r.csv").read_text())))
    assert [x["format"] for x in rows] == [x["format"] for x in rep["rows"]]
    for a, b in zip(rows[1:], rep["rows"][1:]):
        assert abs(float(a["kld"]) - b["kld"]) <= 1e-6 * b["kld"]
    r = compare(shared_models / "llama-F16.gguf", d, "--no-bench", "-o", tmp_path / "r.md", "--svg",
                tmp_path / "c.svg")
    md = (tmp_path / "r.md").read_text()
    assert md.startswith("# Quantization formats of synthetic-llama-256x2")
    assert "![quality loss against size](c.svg)" in md


def test_quantized_base(shared_models, tmp_path):
    """A quantized base: requantizations, and its own format is a copy."""
    r = run_ft("compare", "-m", shared_models / "llama-Q8_0.gguf", "-q", "Q8_0,Q4_0", "-f", TEXT, "-c", "64",
               "--chunks", "2", "--no-bench", "--cache-dir", tmp_path, "-o", tmp_path / "r.json", timeout=900)
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["base_quantized"] and rep["base_type"] == "Q8_0"
    q8, q4 = rep["rows"][1], rep["rows"][2]
    assert q8["same_as_base"] and q8["kld"] == 0 and q8["same_top1"] > 0.97
    assert not q4["same_as_base"] and q4["kld"] > 0
    assert "itself quantized" in r.stdout.decode()


def test_bench_step(shared_models, tmp_path):
    has_bench = re.search(rb"^\s+bench\s", run_ft("--help").stdout, re.M) is not None
    r = run_ft("compare", "-m", shared_models / "llama-F16.gguf", "-q", "Q4_0", "-f", TEXT, "-c", "64", "--chunks",
               "2", "-p", "16", "-n", "4", "-r", "1", "--cache-dir", tmp_path, "-o", tmp_path / "r.json", timeout=900)
    if not has_bench:
        assert r.returncode == 1
        assert b"no `bench` command" in r.stderr and b"--no-bench" in r.stderr
        assert not (tmp_path / "r.json").exists()
    else:
        assert r.returncode == 0, r.stderr
        rows = json.loads((tmp_path / "r.json").read_text())["rows"]
        assert all(x["prefill_tps"] > 0 and x["decode_tps"] > 0 for x in rows)


def test_errors(ft, shared_models, tmp_path):
    m = shared_models / "llama-F16.gguf"
    for args in (["-q", "Q4_0,Q9_9"], ["-q", "Q4_0", "-o", tmp_path / "r.txt"], ["-q", "Q4_0", "-c", "4"],
                 ["-q", ""]):
        r = ft("compare", "-m", m, *args)
        assert r.returncode == 2, args
        assert len(r.stderr.decode().strip().splitlines()) == 1, r.stderr
    r = ft("compare", "-m", tmp_path / "missing.gguf", "-q", "Q4_0", "--cache-dir", tmp_path, "--no-bench")
    assert r.returncode == 1 and b"missing.gguf" in r.stderr
