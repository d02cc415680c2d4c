"""End-to-end tests of ft gen-model and ft bench.

gen-model's files are read back with a small GGUF reader written here (not
FreeToken's), so the shapes, metadata and weight statistics are checked
independently of the code that wrote them; ft info and ft run show the file
runs. ft bench runs on a tiny generated model; its three output formats must
parse and carry llama-bench's fields. Nothing here asserts on speed."""
import csv
import io
import json
import math
import re
import struct

import numpy as np
import pytest

# ---- a minimal, independent GGUF reader -------------------------------------------------

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_TYPE = {0: (np.float32, 1, 4), 1: (np.float16, 1, 2), 30: (None, 1, 2)}  # ggml type -> (dtype, block, bytes)


def _read_value(buf, off, vtype):
    if vtype in _SCALAR:
        fmt = _SCALAR[vtype]
        return struct.unpack_from(fmt, buf, off)[0], off + struct.calcsize(fmt)
    if vtype == 8:
        (n,) = struct.unpack_from("<Q", buf, off)
        return bytes(buf[off + 8:off + 8 + n]).decode("utf-8", "replace"), off + 8 + n
    if vtype == 9:
        etype, n = struct.unpack_from("<IQ", buf, off)
        off += 12
        vals = []
        for _ in range(n):
            v, off = _read_value(buf, off, etype)
            vals.append(v)
        return vals, off
    raise ValueError(f"bad GGUF value type {vtype}")


def read_gguf(path):
    """(metadata dict, {name: (ggml type, shape as ne list, numpy array or raw bytes)})."""
    buf = memoryview(open(path, "rb").read())
    magic, version, n_t, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    assert magic == b"GGUF" and version == 3
    off = 24
    meta = {}
    for _ in range(n_kv):
        key, off = _read_value(buf, off, 8)
        (vtype,) = struct.unpack_from("<I", buf, off)
        meta[key], off = _read_value(buf, off + 4, vtype)
    infos = []
    for _ in range(n_t):
        name, off = _read_value(buf, off, 8)
        (nd,) = struct.unpack_from("<I", buf, off)
        ne = list(struct.unpack_from(f"<{nd}Q", buf, off + 4))
        ttype, toff = struct.unpack_from("<IQ", buf, off + 4 + 8 * nd)
        off += 4 + 8 * nd + 12
        infos.append((name, ttype, ne, toff))
    align = meta.get("general.alignment", 32)
    data0 = (off + align - 1) // align * align
    tensors = {}
    for name, ttype, ne, toff in infos:
        n = math.prod(ne)
        dtype, _, size = _TYPE.get(ttype, (None, 1, 0))
        raw = buf[data0 + toff:data0 + toff + n * size]
        if dtype is not None:
            arr = np.frombuffer(raw, dtype=dtype).astype(np.float32)
        elif ttype == 30:  # BF16: the high half of an F32
            arr = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = bytes(raw)
        tensors[name] = (ttype, ne, arr)
    return meta, tensors


# ---- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from conftest import run_ft
    path = tmp_path_factory.mktemp("bench") / "tiny.gguf"
    r = run_ft("gen-model", "--preset", "tiny", "--seed", "7", "-o", path)
    assert r.returncode == 0, r.stderr
    return path


def one_error_line(r):
    lines = r.stderr.decode().strip().splitlines()
    return len(lines) == 1 and lines[0].startswith("ft ")


# ---- gen-model -------------------------------------------------------------------------------


def test_gen_model_tiny_runs(ft, tiny_model):
    r = ft("info", tiny_model)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "can run:          yes (llama, 2 layers, n_embd 256, 4 heads / 2 KV heads, vocab 512" in out
    r = ft("run", "-m", tiny_model, "-p", "hello world", "-n", "12", "--seed", "3", "--temp", "0.8",
           "--ignore-eos", "-t", "2")
    assert r.returncode == 0, r.stderr
    m = re.search(r"generated tokens:\s+(\d+)", r.stderr.decode())
    assert m and int(m.group(1)) == 12, r.stderr
    # logits of a random model are finite: ft logits prints numbers, not nan/inf
    r = ft("logits", "-m", tiny_model, "--tokens", "1 300 400 500", "--top", "3")
    assert r.returncode == 0, r.stderr
    top = json.loads(r.stdout)["top_logits"]
    assert all(math.isfinite(v) for row in top for _, v in row)


def test_gen_model_contents(tiny_model):
    meta, t = read_gguf(tiny_model)
    assert meta["general.architecture"] == "llama"
    assert meta["general.file_type"] == 1
    assert meta["llama.embedding_length"] == 256 and meta["llama.block_count"] == 2
    assert meta["llama.attention.head_count"] == 4 and meta["llama.attention.head_count_kv"] == 2
    assert meta["llama.feed_forward_length"] == 512
    assert meta["tokenizer.ggml.model"] == "llama" and len(meta["tokenizer.ggml.tokens"]) == 512
    assert len(set(meta["tokenizer.ggml.tokens"])) == 512  # no duplicate pieces
    assert "output.weight" not in t  # tied output head, as Llama 3.2
    assert "rope_freqs.weight" not in t
    names = {f"blk.{i}.{n}.weight" for i in range(2) for n in
             ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
              "ffn_down")} | {"token_embd.weight", "output_norm.weight"}
    assert set(t) == names
    assert t["blk.0.attn_k.weight"][1] == [256, 128] and t["blk.1.ffn_down.weight"][1] == [512, 256]
    assert t["token_embd.weight"][1] == [256, 512] and t["token_embd.weight"][0] == 1
    for n in ("output_norm.weight", "blk.0.attn_norm.weight", "blk.1.ffn_norm.weight"):
        assert t[n][0] == 0 and np.all(t[n][2] == 1.0)
    w = np.concatenate([t[n][2] for n in names if t[n][0] == 1])
    assert abs(float(w.mean())) < 1e-3
    assert 0.019 < float(w.std()) < 0.021  # N(0, 0.02)
    assert float(np.abs(w).max()) < 0.02 * 3.5 + 1e-3  # Irwin-Hall bound
    # rows of one tensor differ (each row has its own generator)
    q = t["blk.0.attn_q.weight"][2].reshape(256, 256)
    assert not np.array_equal(q[0], q[1])


def test_gen_model_seeded(ft, tmp_path, tiny_model):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    assert ft("gen-model", "--seed", "7", "-o", a).returncode == 0
    assert ft("gen-model", "--seed", "8", "-o", b).returncode == 0
    assert a.read_bytes() == tiny_model.read_bytes()
    assert a.read_bytes() != b.read_bytes()


def test_gen_model_llama3_preset_shape(ft, tmp_path):
    """The 1B preset's shape and Llama 3 RoPE table, with one layer and a small vocabulary."""
    out = tmp_path / "l1.gguf"
    r = ft("gen-model", "--preset", "llama3.2-1b", "--n-layer", "1", "--n-vocab", "1000", "--type", "BF16",
           "-o", out)
    assert r.returncode == 0, r.stderr
    meta, t = read_gguf(out)
    assert meta["general.file_type"] == 32
    assert (meta["llama.embedding_length"], meta["llama.attention.head_count"],
            meta["llama.attention.head_count_kv"], meta["llama.feed_forward_length"]) == (2048, 32, 8, 8192)
    assert meta["llama.rope.freq_base"] == 500000.0 and meta["llama.rope.dimension_count"] == 64
    assert meta["llama.context_length"] == 131072
    assert t["blk.0.attn_k.weight"][1] == [2048, 512] and t["blk.0.attn_q.weight"][0] == 30
    assert "output.weight" not in t
    # Llama 3 frequency divisors (factor 32, low 1, high 4, original context 8192),
    # computed here the way Meta's reference code does.
    base, dim, factor, old = 500000.0, 64, 32.0, 8192
    want = []
    for i in range(0, dim, 2):
        wavelen = 2 * math.pi * base ** (i / dim)
        if wavelen < old / 4:
            want.append(1.0)
        elif wavelen > old / 1:
            want.append(factor)
        else:
            smooth = (old / wavelen - 1) / (4 - 1)
            want.append(1 / ((1 - smooth) / factor + smooth))
    assert t["rope_freqs.weight"][1] == [32]
    np.testing.assert_allclose(t["rope_freqs.weight"][2], want, rtol=1e-6)
    w = t["blk.0.ffn_up.weight"][2]
    assert 0.019 < float(w.std()) < 0.021
    r = ft("info", out)
    assert "can run:          yes (llama, 1 layers, n_embd 2048, 32 heads / 8 KV heads, vocab 1000" in r.stdout.decode()


def test_gen_model_qwen3moe_preset_shape(ft, tmp_path):
    """The MoE preset's shape as llama.cpp's qwen3moe loader reads it: 3-D expert tensors
    (ne = row length, rows, experts), an F32 router, Q/K norms, the expert keys; ft runs it."""
    out = tmp_path / "m1.gguf"
    r = ft("gen-model", "--preset", "qwen3moe-24e", "--n-layer", "1", "--n-vocab", "1000", "-o", out)
    assert r.returncode == 0, r.stderr
    meta, t = read_gguf(out)
    assert meta["general.architecture"] == "qwen3moe"
    assert (meta["qwen3moe.expert_count"], meta["qwen3moe.expert_used_count"],
            meta["qwen3moe.expert_feed_forward_length"]) == (24, 8, 768)
    assert meta["qwen3moe.attention.key_length"] == 128 and meta["qwen3moe.attention.head_count_kv"] == 4
    assert t["blk.0.ffn_gate_exps.weight"][1] == [2048, 768, 24]
    assert t["blk.0.ffn_up_exps.weight"][1] == [2048, 768, 24]
    assert t["blk.0.ffn_down_exps.weight"][1] == [768, 2048, 24]
    assert t["blk.0.ffn_gate_inp.weight"][:2] == (0, [2048, 24])
    assert t["blk.0.attn_q.weight"][1] == [2048, 4096] and t["blk.0.attn_k_norm.weight"][1] == [128]
    assert "output.weight" in t and "blk.0.ffn_gate.weight" not in t
    w = t["blk.0.ffn_down_exps.weight"][2]
    assert 0.019 < float(w.std()) < 0.021
    r = ft("run", "-m", out, "-p", "Hello", "-n", "4", "--temp", "0")
    assert r.returncode == 0, r.stderr


def test_gen_model_vocab_file(ft, tmp_path, shared_vocab):
    vocab = shared_vocab / "ggml-vocab-llama-bpe.gguf"
    out = tmp_path / "v.gguf"
    r = ft("gen-model", "--n-layer", "1", "--vocab", vocab, "-o", out)
    assert r.returncode == 0, r.stderr
    meta, _ = read_gguf(out)
    vmeta, _ = read_gguf(vocab)
    for k, v in vmeta.items():
        if k.startswith("tokenizer."):
            assert meta[k] == v, k
    assert meta["llama.vocab_size"] == len(vmeta["tokenizer.ggml.tokens"]) == 128256
    text = b"Hello world, this is FreeToken."
    a = ft("tokenize", "-m", out, input=text)
    b = ft("tokenize", "-m", vocab, input=text)
    assert a.returncode == 0 and a.stdout == b.stdout


@pytest.mark.parametrize("args", [
    ["gen-model"],                                                  # no -o
    ["gen-model", "-o", "x.gguf", "--type", "Q4_0"],
    ["gen-model", "-o", "x.gguf", "--preset", "llama9"],
    ["gen-model", "-o", "x.gguf", "--arch", "gpt2"],
    ["gen-model", "-o", "x.gguf", "--n-head", "3", "--n-head-kv", "2"],
    ["gen-model", "-o", "x.gguf", "--n-embd", "0"],
    ["gen-model", "-o", "x.gguf", "--n-vocab", "100"],             # below the synthetic minimum
    ["gen-model", "-o", "x.gguf", "--std", "-1"],
    ["gen-model", "-o", "x.gguf", "--lm-head", "maybe"],
    ["gen-model", "-o", "x.gguf", "--head-dim", "63"],
    ["gen-model", "-o", "x.gguf", "--n-expert", "4"],                # llama has no experts
    ["gen-model", "-o", "x.gguf", "--preset", "qwen3moe-tiny", "--n-expert-used", "9"],
])
def test_gen_model_bad_args(ft, tmp_path, args):
    r = ft(*args)
    assert r.returncode == 2, (args, r.stderr)
    assert one_error_line(r), r.stderr
    assert not (tmp_path / "x.gguf").exists()


def test_gen_model_unwritable(ft, tmp_path):
    r = ft("gen-model", "-o", tmp_path / "no" / "such" / "dir.gguf")
    assert r.returncode == 1 and one_error_line(r), r.stderr


# ---- bench -----------------------------------------------------------------------------------

FIELDS = ["model_filename", "model_type", "model_size", "n_params", "model_n_params", "n_threads", "n_prompt",
          "n_gen", "test", "avg_ts", "stddev_ts", "isa", "numa"]


def bench(ft, model, *extra):
    r = ft("bench", "-m", model, "-r", "2", "-p", "16", "-n", "4", "-t", "2", *extra)
    assert r.returncode == 0, r.stderr
    assert r.stderr == b""  # no progress when stderr is not a terminal
    return r.stdout.decode()


def check_row(row, model):
    for f in FIELDS:
        assert f in row, f
    assert row["model_filename"] == str(model)
    assert row["model_type"] == "llama 1.3M F16"
    assert int(row["n_params"]) == int(row["model_n_params"]) == 1312000
    meta, t = read_gguf(model)
    assert int(row["model_size"]) == sum(math.prod(ne) * {0: 4, 1: 2}[tt] for tt, ne, _ in t.values())
    assert int(row["n_threads"]) == 2
    assert row["numa"] == "off"
    assert row["test"] in ("pp16", "tg4")
    assert (int(row["n_prompt"]), int(row["n_gen"])) == ((16, 0) if row["test"] == "pp16" else (0, 4))
    assert float(row["avg_ts"]) > 0 and float(row["stddev_ts"]) >= 0


def test_bench_json(ft, tiny_model):
    rows = json.loads(bench(ft, tiny_model, "-o", "json"))
    assert [r["test"] for r in rows] == ["pp16", "tg4"]
    for row in rows:
        check_row(row, tiny_model)
        assert len(row["samples_ns"]) == len(row["samples_ts"]) == 2
        n_tok = row["n_prompt"] + row["n_gen"]
        ts = [1e9 * n_tok / ns for ns in row["samples_ns"]]
        np.testing.assert_allclose(row["samples_ts"], ts, rtol=1e-6)
        assert row["avg_ts"] == pytest.approx(np.mean(ts), rel=1e-6)
        assert row["stddev_ts"] == pytest.approx(np.std(ts, ddof=1), rel=1e-5, abs=1e-6)


def test_bench_jsonl(ft, tiny_model):
    lines = bench(ft, tiny_model, "-o", "jsonl").strip().splitlines()
    rows = [json.loads(l) for l in lines]
    assert [r["test"] for r in rows] == ["pp16", "tg4"]
    for row in rows:
        check_row(row, tiny_model)


def test_bench_csv(ft, tiny_model):
    rows = list(csv.DictReader(io.StringIO(bench(ft, tiny_model, "-o", "csv"))))
    assert [r["test"] for r in rows] == ["pp16", "tg4"]
    for row in rows:
        check_row(row, tiny_model)


def test_bench_markdown(ft, tiny_model):
    lines = bench(ft, tiny_model).strip().splitlines()
    cols = [c.strip() for c in lines[0].strip("|").split("|")]
    assert cols == ["model", "size", "params", "type", "isa", "threads", "test", "t/s"]
    assert re.fullmatch(r"\|( -+:? \|)+", lines[1])
    rows = [[c.strip() for c in l.strip("|").split("|")] for l in lines[2:4]]
    assert [r[6] for r in rows] == ["pp16", "tg4"]
    for r in rows:
        assert r[0] == "llama 1.3M" and r[1] == "2.50 MiB" and r[2] == "1.31 M" and r[3] == "F16"
        assert r[5] == "2"
        assert re.fullmatch(r"\d+\.\d\d ± \d+\.\d\d", r[7]), r[7]
    assert lines[-1].startswith("ft ")


def test_bench_lists_in_llama_bench_order(ft, tiny_model):
    r = ft("bench", "-m", tiny_model, "-m", tiny_model, "-r", "1", "-p", "8,16", "-n", "2", "-t", "1,2",
           "--no-warmup", "-o", "jsonl")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(l) for l in r.stdout.decode().splitlines()]
    got = [(x["n_threads"], x["test"]) for x in rows]
    assert got == [(1, "pp8"), (1, "pp16"), (1, "tg2"), (2, "pp8"), (2, "pp16"), (2, "tg2")] * 2
    assert all(len(x["samples_ns"]) == 1 for x in rows)


def test_bench_depth(ft, tiny_model):
    # llama-bench's -d: per depth every ppN then every tgN, named "... @ dD"
    r = ft("bench", "-m", tiny_model, "-r", "2", "-p", "8", "-n", "3", "-d", "0,40", "-t", "2", "-o", "jsonl")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(l) for l in r.stdout.decode().splitlines()]
    got = [(x["test"], x["n_depth"], x["n_prompt"], x["n_gen"]) for x in rows]
    assert got == [("pp8", 0, 8, 0), ("tg3", 0, 0, 3), ("pp8 @ d40", 40, 8, 0), ("tg3 @ d40", 40, 0, 3)]
    for x in rows:
        # the depth's tokens are not counted (nor timed)
        n_tok = x["n_prompt"] + x["n_gen"]
        np.testing.assert_allclose(x["samples_ts"], [1e9 * n_tok / ns for ns in x["samples_ns"]], rtol=1e-6)
    md = ft("bench", "-m", tiny_model, "-r", "1", "-p", "0", "-n", "2", "-d", "33", "--no-warmup")
    assert md.returncode == 0, md.stderr
    assert [c.strip() for c in md.stdout.decode().splitlines()[2].strip("|").split("|")][6] == "tg2 @ d33"
    rows = list(csv.DictReader(io.StringIO(ft("bench", "-m", tiny_model, "-r", "1", "-p", "4", "-n", "0", "-d", "20",
                                              "-o", "csv").stdout.decode())))
    assert [(x["test"], x["n_depth"]) for x in rows] == [("pp4 @ d20", "20")]


def test_bench_parallel(ft, tiny_model):
    # -np P: P sequences decode together; only the tgN tests take it, named "tgN xP",
    # and tokens/s counts the tokens of all P
    r = ft("bench", "-m", tiny_model, "-r", "2", "-p", "8", "-n", "3", "-np", "1,4", "-d", "0,20", "-t", "2",
           "-o", "jsonl")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(l) for l in r.stdout.decode().splitlines()]
    got = [(x["test"], x["n_depth"], x["n_parallel"]) for x in rows]
    assert got == [("pp8", 0, 1), ("tg3", 0, 1), ("tg3 x4", 0, 4),
                   ("pp8 @ d20", 20, 1), ("tg3 @ d20", 20, 1), ("tg3 x4 @ d20", 20, 4)]
    for x in rows:
        n_tok = x["n_prompt"] + x["n_gen"] * x["n_parallel"]
        np.testing.assert_allclose(x["samples_ts"], [1e9 * n_tok / ns for ns in x["samples_ns"]], rtol=1e-6)
    md = ft("bench", "-m", tiny_model, "-r", "1", "-p", "0", "-n", "2", "-np", "3", "--no-warmup")
    assert md.returncode == 0, md.stderr
    assert [c.strip() for c in md.stdout.decode().splitlines()[2].strip("|").split("|")][6] == "tg2 x3"


def test_bench_skips_zero_tests(ft, tiny_model):
    r = ft("bench", "-m", tiny_model, "-r", "1", "-p", "0", "-n", "3", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert [x["test"] for x in json.loads(r.stdout)] == ["tg3"]


def test_bench_hw(ft):
    # the same report as `ft info --hw` (engine/runtime/topology.c)
    r = ft("bench", "--hw")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert ft("info", "--hw").stdout.decode().startswith(out)  # info adds the thread placement
    assert out.startswith("cpu:") and "isa:" in out and "numa 0:" in out and "default:" in out


@pytest.mark.parametrize("args", [
    ["-r", "0"],
    ["-p", "abc"],
    ["-p", "1,,2"],
    ["-n", "-3"],
    ["-t", "0"],
    ["-t", "1,x"],
    ["-b", "0"],
    ["-d", "-1"],
    ["-d", "4,y"],
    ["-np", "0"],
    ["-np", "2,x"],
    ["-np", "257"],
    ["-o", "xml"],
    ["--numa", "bogus"],
    ["-p", "0", "-n", "0"],
    ["--bogus"],
])
def test_bench_bad_args(ft, tiny_model, args):
    r = ft("bench", "-m", tiny_model, *args)
    assert r.returncode == 2, (args, r.stderr)
    assert one_error_line(r), r.stderr
    assert r.stdout == b""


def test_bench_missing_model(ft, tmp_path):
    r = ft("bench", "-m", tmp_path / "missing.gguf", "-r", "1", "-p", "4", "-n", "0", "-o", "json")
    assert r.returncode == 1
    assert one_error_line(r) and b"missing.gguf" in r.stderr
    assert json.loads(r.stdout) == []  # the JSON array is still closed


def _levels(ft):
    """The best kernel level here, from the --hw report ("isa: ... (best here: avx512; ..."), and
    whether the CPU has AVX-VNNI (the avx-vnni level, between avx2 and avx512)."""
    out = ft("bench", "--hw").stdout.decode()
    return re.search(r"best here: ([a-z0-9-]+)", out).group(1), re.search(r"\bavx_vnni\b", out) is not None


def test_bench_isa_all(ft, tiny_model):
    # --isa all: the same tests once per SIMD level this CPU runs, best first, rows labelled
    # by level (so a higher level slower than a lower one shows in one table)
    best, vnni = _levels(ft)
    r = ft("bench", "-m", tiny_model, "-r", "1", "-p", "8", "-n", "2", "-np", "1,2", "-t", "1", "--isa", "all",
           "--no-warmup", "-o", "jsonl")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(l) for l in r.stdout.decode().splitlines()]
    levels = list(dict.fromkeys(x["isa"] for x in rows))
    assert levels[0] == best and "scalar" not in levels
    x86 = ["amx", "avx512"] + (["avx-vnni"] if vnni else []) + ["avx2"]
    order = {"amx": x86, "avx512": x86[1:], "avx-vnni": ["avx-vnni", "avx2"], "avx2": ["avx2"],
             "neon-i8mm": ["neon-i8mm", "neon-dotprod", "neon"],
             "neon-dotprod": ["neon-dotprod", "neon"], "neon": ["neon"]}
    if best in order:
        assert levels == order[best]
    assert [(x["isa"], x["test"]) for x in rows] == [(l, t) for l in levels for t in ("pp8", "tg2", "tg2 x2")]
    # a list names the levels and their order; the markdown labels rows and the footer lists them
    md = ft("bench", "-m", tiny_model, "-r", "1", "-p", "0", "-n", "2", "-t", "1", "--isa", f"scalar,{best}",
            "--no-warmup")
    assert md.returncode == 0, md.stderr
    lines = md.stdout.decode().strip().splitlines()
    assert [[c.strip() for c in l.strip("|").split("|")][4] for l in lines[2:4]] == ["scalar", best]
    assert f"kernels scalar,{best}" in lines[-1]
    # without --isa, the level in use (FT_ISA) labels the rows
    env = ft("bench", "-m", tiny_model, "-r", "1", "-p", "0", "-n", "2", "-t", "1", "--no-warmup", "-o", "jsonl",
             env={"FT_ISA": "scalar"})
    assert env.returncode == 0, env.stderr
    assert [json.loads(l)["isa"] for l in env.stdout.decode().splitlines()] == ["scalar"]


@pytest.mark.parametrize("isa", ["bogus", ",", "avx2,nope"])
def test_bench_isa_bad(ft, tiny_model, isa):
    r = ft("bench", "-m", tiny_model, "--isa", isa)
    assert r.returncode == 2, r.stderr
    assert one_error_line(r), r.stderr


def test_bench_isa_unsupported(ft, tiny_model):
    # a level this CPU (or build) cannot run is an argument error, named in the message
    lacking = "neon" if _levels(ft)[0] in ("avx2", "avx-vnni", "avx512", "amx") else "avx2"
    r = ft("bench", "-m", tiny_model, "--isa", lacking)
    assert r.returncode == 2 and one_error_line(r) and lacking.encode() in r.stderr
