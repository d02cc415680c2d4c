"""Who may call `ft serve`, and what it keeps: several API keys and a key
file, CORS only for the origins named, prompts out of the access log unless
--log-prompts."""
import json

import pytest

from conftest import run_ft
from test_serve import Server, tiny_model

openai = pytest.importorskip("openai")

SECRET = "my bank password is hunter2"


def chat(s, key, content="hi"):
    cl = s.client(api_key=key)
    return cl.chat.completions.create(model="m", messages=[{"role": "user", "content": content}], max_tokens=2)


def test_several_keys_and_a_key_file(tmp_path):
    kf = tmp_path / "keys"
    kf.write_text("# team keys\n\n  key-from-file  \r\nsecond-file-key\n")
    s = Server(tiny_model(), "-c", "256", "--alias", "m", "--api-key", "alpha", "--api-key", "beta",
               "--api-key-file", kf)
    try:
        for key in ("alpha", "beta", "key-from-file", "second-file-key"):
            assert chat(s, key).choices
        for bad in ("alph", "alphaa", "# team keys", "", "key-from-fil"):
            with pytest.raises(openai.AuthenticationError):
                chat(s, bad or "x")
        assert s.request("GET", "/health")[0] == 200
        assert s.request("GET", "/livez")[0] == 200
        assert s.request("GET", "/v1/models")[0] == 401
    finally:
        assert s.stop() == 0, s.stderr()


@pytest.mark.parametrize("content,msg", [(None, b"cannot read --api-key-file"),
                                         ("# only a comment\n\n", b"holds no key"),
                                         ("x" * 600 + "\n", b"key longer than 512 bytes")])
def test_bad_key_files(tmp_path, content, msg):
    kf = tmp_path / "keys"
    if content is not None:
        kf.write_text(content)
    r = run_ft("serve", "-m", tiny_model(), "--api-key-file", kf)
    assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_cors_off_by_default():
    s = Server(tiny_model(), "-c", "256")
    try:
        st, h, _ = s.request("GET", "/v1/models", headers={"Origin": "http://page.example"})
        assert st == 200 and "Access-Control-Allow-Origin" not in h
        st, h, _ = s.request("OPTIONS", "/v1/chat/completions",
                             headers={"Origin": "http://page.example", "Access-Control-Request-Method": "POST"})
        assert st == 405 and "Access-Control-Allow-Origin" not in h
    finally:
        assert s.stop() == 0, s.stderr()


def test_cors_for_named_origins_only():
    s = Server(tiny_model(), "-c", "256", "--cors-origin", "http://page.example:8000", "--api-key", "k")
    ok, evil = "http://page.example:8000", "http://evil.example"
    try:
        # Preflight: answered without the key, for the named origin only.
        st, h, body = s.request("OPTIONS", "/v1/chat/completions",
                                headers={"Origin": ok, "Access-Control-Request-Method": "POST",
                                         "Access-Control-Request-Headers": "authorization, content-type"})
        assert st == 204 and body == b""
        assert h["Access-Control-Allow-Origin"] == ok and h["Vary"] == "Origin"
        assert "POST" in h["Access-Control-Allow-Methods"]
        assert "Authorization" in h["Access-Control-Allow-Headers"]
        st, h, _ = s.request("OPTIONS", "/v1/chat/completions",
                             headers={"Origin": evil, "Access-Control-Request-Method": "POST"})
        assert st == 401 and "Access-Control-Allow-Origin" not in h
        # Real requests: the header for the named origin, on JSON, errors and streams.
        auth = {"Authorization": "Bearer k"}
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        st, h, _ = s.request("POST", "/v1/chat/completions", body, headers={"Origin": ok, **auth})
        assert st == 200 and h["Access-Control-Allow-Origin"] == ok
        st, h, _ = s.request("POST", "/v1/chat/completions", {"messages": []}, headers={"Origin": ok, **auth})
        assert st == 400 and h["Access-Control-Allow-Origin"] == ok
        st, h, data = s.request("POST", "/v1/chat/completions", {**body, "stream": True},
                                headers={"Origin": ok, **auth})
        assert st == 200 and h["Access-Control-Allow-Origin"] == ok and b"data: [DONE]" in data
        st, h, _ = s.request("POST", "/v1/chat/completions", body, headers={"Origin": evil, **auth})
        assert st == 200 and "Access-Control-Allow-Origin" not in h
    finally:
        assert s.stop() == 0, s.stderr()


def test_cors_bad_origin_flag():
    r = run_ft("serve", "-m", tiny_model(), "--cors-origin", "page.example")
    assert r.returncode == 2 and b"--cors-origin must be * or http(s)://HOST[:PORT]" in r.stderr


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_prompts_stay_out_of_the_log_unless_asked(fmt):
    for log_prompts in (False, True):
        extra = ["--log-prompts"] if log_prompts else []
        s = Server(tiny_model(), "-c", "256", "--alias", "m", "--log-format", fmt, *extra)
        try:
            chat(s, "none", content=SECRET + "\n\"quoted\"")
            s.client().completions.create(model="m", prompt="completion " + SECRET, max_tokens=2)
        finally:
            assert s.stop() == 0, s.stderr()
        log = "\n".join(s.log_lines())
        if not log_prompts:
            assert "hunter2" not in log and "hunter2" not in s.stderr()
            continue
        lines = [l for l in s.log_lines() if "hunter2" in l]
        assert len(lines) == 2, log
        if fmt == "json":
            prompts = [json.loads(l)["prompt"] for l in lines]
            assert prompts == [f"user: {SECRET}\n\"quoted\"", "completion " + SECRET]
        else:
            assert f'prompt="user: {SECRET}\\x0a\\"quoted\\""' in lines[0]  # one line, quotes escaped
