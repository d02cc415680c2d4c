"""End-to-end tests of `logprobs` / `top_logprobs` and `n` > 1 in `ft serve`
(chat and completions, streamed and not), with the official openai client.

Log-probabilities are checked against an independent computation: `ft
logits` evaluates prompt + generated ids in one batch, and numpy takes the
log-softmax of every position's full row (the tiny model's vocabulary has
8000 tokens, so `--top 8000` is the whole row). The server computes them
one decode step at a time, so the two agree to float rounding of batched
versus single-row kernels, not bit for bit."""
import http.client
import json
import re

import numpy as np
import pytest

from conftest import ASAN_ENV, asan_bin, run_ft, stop_clean
from test_serve import Server, check_error, model_id, sse_events, tiny_model

openai = pytest.importorskip("openai")

N_VOCAB = 8000
PROMPT_IDS = [1, 2655, 7767, 1238, 3237, 5335, 398, 596, 6730, 4392, 774, 2998]  # llama-Q8_0.json


@pytest.fixture(scope="module")
def srv():
    s = Server(tiny_model(), "-c", "512", "--parallel", "4", "--enable-performance-metrics", env=ASAN_ENV)
    yield s
    stop_clean(s)


@pytest.fixture(scope="module")
def srv_nocache():
    s = Server(tiny_model(), "-c", "512", "--parallel", "4", "--no-prefix-cache", "--enable-performance-metrics",
               env=ASAN_ENV)
    yield s
    stop_clean(s)


def log_softmax_rows(ids):
    """Full log-softmax rows of `ft logits` over ids (one row per position)."""
    r = run_ft("logits", "-m", tiny_model(), "--tokens", " ".join(map(str, ids)), "--top", N_VOCAB, "-t", "2")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["top_logits"]
    out = np.full((len(rows), N_VOCAB), -np.inf)
    for i, row in enumerate(rows):
        assert len(row) == N_VOCAB
        for tid, logit in row:
            out[i, tid] = logit
    m = out.max(axis=1, keepdims=True)
    return out - (m + np.log(np.exp(out - m).sum(axis=1, keepdims=True)))


def token_id(s):
    m = re.fullmatch(r"token_id:(\d+)", s)
    assert m, s
    return int(m.group(1))


def check_metrics_n(m, usage, n):
    """The metrics contract (docs/architecture.md) for a request of n choices (docs/api.md: how choices combine)."""
    assert usage["prompt_tokens"] == m["cached_prompt_tokens"] + m["prefill_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == m["cached_prompt_tokens"]
    assert m["decode_tokens"] == usage["completion_tokens"] - n
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert 0 <= m["queue_time_ms"] <= m["ttft_ms"] <= m["total_time_ms"]
    assert 0 < m["prefill_time_ms"] <= m["ttft_ms"]
    assert m["decode_time_ms"] <= m["total_time_ms"]
    if m["decode_tokens"] == 0 or m["decode_time_ms"] == 0:
        assert m["decode_tokens_per_second"] is None
    else:
        assert m["decode_tokens_per_second"] == pytest.approx(m["decode_tokens"] / (m["decode_time_ms"] / 1e3),
                                                              rel=1e-9)
    itl = m["inter_token_latency_ms"]
    assert 0 <= itl["p50"] <= itl["p90"] <= itl["p99"] <= itl["max"] <= m["decode_time_ms"] + 1e-9


# ---- logprobs ----------------------------------------------------------------------------


def test_completion_logprobs_match_ft_logits(srv):
    cl = srv.client()
    r = cl.completions.create(model=model_id(srv), prompt=PROMPT_IDS, max_tokens=12, temperature=0, logprobs=5,
                              extra_body={"return_tokens_as_token_ids": True, "ignore_eos": True})
    lp = r.choices[0].logprobs
    gen = [token_id(t) for t in lp.tokens]
    assert len(gen) == 12 == r.usage.completion_tokens
    rows = log_softmax_rows(PROMPT_IDS + gen[:-1])
    for i, t in enumerate(gen):
        row = rows[len(PROMPT_IDS) - 1 + i]
        # Greedy: the sampled token is the most likely one, and its logprob the row's maximum.
        assert t == int(np.argmax(row)), (i, t)
        assert lp.token_logprobs[i] == pytest.approx(row.max(), abs=2e-3)
        assert lp.token_logprobs[i] == pytest.approx(row[t], abs=2e-3)
        top = lp.top_logprobs[i]
        # logprobs=5: the five most likely tokens (the sampled one is among them).
        want = np.argsort(-row, kind="stable")[:5]
        assert len(top) == 5
        for tid in want:
            assert top[f"token_id:{tid}"] == pytest.approx(row[tid], abs=2e-3)
        assert list(top.values()) == sorted(top.values(), reverse=True)


def test_sampled_logprobs_are_raw_model_logprobs(srv):
    """Not the sampler's distribution: with temperature 1.5 and top-k 3 the
    reported values are still the model's log-softmax, and a sampled token
    outside the row's top 3 cannot occur."""
    cl = srv.client()
    r = cl.completions.create(model=model_id(srv), prompt=PROMPT_IDS, max_tokens=10, temperature=1.5, seed=11,
                              logprobs=3, extra_body={"return_tokens_as_token_ids": True, "ignore_eos": True,
                                                      "top_k": 3})
    lp = r.choices[0].logprobs
    gen = [token_id(t) for t in lp.tokens]
    rows = log_softmax_rows(PROMPT_IDS + gen[:-1])
    for i, t in enumerate(gen):
        row = rows[len(PROMPT_IDS) - 1 + i]
        assert lp.token_logprobs[i] == pytest.approx(row[t], abs=2e-3)
        assert t in set(np.argsort(-row, kind="stable")[:3].tolist())
        assert f"token_id:{t}" in lp.top_logprobs[i]


def test_chat_logprobs_shape_and_values(srv):
    cl = srv.client()
    msgs = [{"role": "user", "content": "The lighthouse keeper"}]
    r = cl.chat.completions.create(model=model_id(srv), messages=msgs, max_tokens=10, temperature=0, logprobs=True,
                                   top_logprobs=4)
    ch = r.choices[0]
    content = ch.logprobs.content
    assert len(content) == r.usage.completion_tokens == 10
    for e in content:
        assert isinstance(e.token, str) and isinstance(e.bytes, list) and e.logprob <= 0
        assert len(e.top_logprobs) == 4
        # Greedy: the sampled token is the top one.
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob
        assert [t.logprob for t in e.top_logprobs] == sorted((t.logprob for t in e.top_logprobs), reverse=True)
        assert sum(np.exp(t.logprob) for t in e.top_logprobs) <= 1 + 1e-5
    if ch.finish_reason == "length":
        assert b"".join(bytes(e.bytes) for e in content).decode() == ch.message.content
    # Raw JSON: every field OpenAI defines, in its shape.
    status, body = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 3, "temperature": 0,
                                                      "logprobs": True})
    assert status == 200
    lp = body["choices"][0]["logprobs"]
    assert set(lp) == {"content", "refusal"} and lp["refusal"] is None
    assert set(lp["content"][0]) == {"token", "logprob", "bytes", "top_logprobs"}
    assert lp["content"][0]["top_logprobs"] == []
    # Without logprobs the field stays null.
    status, body = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 2})
    assert body["choices"][0]["logprobs"] is None


def test_chat_and_completion_logprobs_agree(srv):
    """The plain chat template sends the message as BOS + text: the same
    tokens as the completion prompt, so the same logprobs."""
    cl = srv.client()
    text = "The lighthouse keeper"
    c = cl.chat.completions.create(model=model_id(srv), messages=[{"role": "user", "content": text}], max_tokens=6,
                                   temperature=0, logprobs=True, top_logprobs=2)
    p = cl.completions.create(model=model_id(srv), prompt=text, max_tokens=6, temperature=0, logprobs=2)
    if c.usage.prompt_tokens != p.usage.prompt_tokens:
        pytest.skip("the chat template does not give the completion's tokens")
    assert [e.token for e in c.choices[0].logprobs.content] == p.choices[0].logprobs.tokens
    assert [e.logprob for e in c.choices[0].logprobs.content] == p.choices[0].logprobs.token_logprobs


def test_completion_logprobs_fields(srv):
    status, body = srv.post("/v1/completions", {"prompt": "The lighthouse keeper", "max_tokens": 8,
                                                 "temperature": 0.9, "seed": 3, "logprobs": 0})
    assert status == 200
    ch = body["choices"][0]
    lp = ch["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    n = body["usage"]["completion_tokens"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
    for tok, v, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        # logprobs=0: only the sampled token (OpenAI returns up to logprobs+1 entries).
        assert top == {tok: v}
    # text_offset: characters of the completion before each token.
    if ch["finish_reason"] == "length" and all("\\x" not in t for t in lp["tokens"]):
        text = ch["text"]
        assert lp["text_offset"][0] == 0
        for i, tok in enumerate(lp["tokens"]):
            assert text[lp["text_offset"][i]:].startswith(tok)


def test_partial_utf8_tokens_get_bytes_and_escapes(srv):
    """A token holding part of a UTF-8 character (the tiny vocabulary's
    byte tokens <0x..>) has its bytes in `bytes` and "\\xNN" in `token`."""
    cl = srv.client()
    seen = 0
    for seed in range(4):
        r = cl.chat.completions.create(model=model_id(srv), messages=[{"role": "user", "content": "Über café"}],
                                       max_tokens=24, temperature=1.5, seed=seed, logprobs=True, top_logprobs=20,
                                       extra_body={"ignore_eos": True, "top_k": 0, "top_p": 1, "min_p": 0})
        for e in r.choices[0].logprobs.content:
            for t in [e] + list(e.top_logprobs):
                raw = bytes(t.bytes)
                try:
                    assert t.token == raw.decode()
                except UnicodeDecodeError:
                    seen += 1
                    assert "\\x" in t.token
                    # Valid characters stay, invalid bytes become \xNN.
                    assert re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(0xDC00 + int(m.group(1), 16)),
                                  t.token).encode("utf-8", "surrogateescape") == raw
    assert seen > 0, "no partial UTF-8 token among 4 x 24 x 21 candidates"


def test_streamed_logprobs_equal_unstreamed(srv):
    cl = srv.client()
    msgs = [{"role": "user", "content": "Once upon a time"}]
    kw = dict(model=model_id(srv), max_tokens=16, temperature=1.0, seed=5)
    full = cl.chat.completions.create(messages=msgs, logprobs=True, top_logprobs=3, **kw)
    got, text = [], ""
    for chunk in cl.chat.completions.create(messages=msgs, logprobs=True, top_logprobs=3, stream=True, **kw):
        for c in chunk.choices:
            if c.delta.content:
                # A chunk with text carries the logprobs of its tokens.
                assert c.logprobs is not None and c.logprobs.content
                text += c.delta.content
            if c.logprobs:
                got += c.logprobs.content
    assert text == full.choices[0].message.content
    assert [e.model_dump() for e in got] == [e.model_dump() for e in full.choices[0].logprobs.content]

    pfull = cl.completions.create(prompt="Once upon a time", logprobs=2, **kw)
    toks, lps, tops, offs = [], [], [], []
    for chunk in cl.completions.create(prompt="Once upon a time", logprobs=2, stream=True, **kw):
        for c in chunk.choices:
            if c.logprobs:
                toks += c.logprobs.tokens
                lps += c.logprobs.token_logprobs
                tops += c.logprobs.top_logprobs
                offs += c.logprobs.text_offset
    want = pfull.choices[0].logprobs
    assert (toks, lps, tops, offs) == (want.tokens, want.token_logprobs, want.top_logprobs, want.text_offset)


BAD = [
    ("/v1/chat/completions", {"logprobs": "yes"}, "logprobs", "boolean"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs", "between"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": -1}, "top_logprobs", "between"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 2.5}, "top_logprobs", "integer"),
    ("/v1/chat/completions", {"top_logprobs": 3}, "top_logprobs", "logprobs"),
    ("/v1/chat/completions", {"logprobs": False, "top_logprobs": 3}, "top_logprobs", "logprobs"),
    ("/v1/completions", {"logprobs": 21}, "logprobs", "between"),
    ("/v1/completions", {"logprobs": -1}, "logprobs", "between"),
    ("/v1/completions", {"logprobs": True}, "logprobs", "integer"),
    ("/v1/completions", {"logprobs": "5"}, "logprobs", "integer"),
    ("/v1/chat/completions", {"return_tokens_as_token_ids": 1}, "return_tokens_as_token_ids", "boolean"),
    ("/v1/chat/completions", {"n": 0}, "n", "between 1 and 16"),
    ("/v1/chat/completions", {"n": 17}, "n", "between 1 and 16"),
    ("/v1/completions", {"n": -3}, "n", "between"),
    ("/v1/completions", {"n": "2"}, "n", "integer"),
    ("/v1/completions", {"n": 2.5}, "n", "integer"),
    ("/v1/chat/completions", {"n": 5}, "n", "-np 4"),
    ("/v1/completions", {"n": 16}, "n", "-np 4"),
]


@pytest.mark.parametrize("path,extra,param,contains", BAD)
def test_bad_logprobs_and_n(srv, path, extra, param, contains):
    body = {"messages": [{"role": "user", "content": "x"}]} if "chat" in path else {"prompt": "x"}
    body.update(extra, max_tokens=2)
    status, resp = srv.post(path, body)
    check_error(status, resp, 400, param, contains)
    assert srv.request("GET", "/health")[0] == 200


# ---- n > 1 -------------------------------------------------------------------------------


def test_n3_seeded_each_choice_is_seed_plus_i(srv):
    cl = srv.client()
    msgs = [{"role": "user", "content": "A story about a cat"}]
    kw = dict(model=model_id(srv), messages=msgs, max_tokens=12, temperature=1.0, seed=42)
    r = cl.chat.completions.create(n=3, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    again = cl.chat.completions.create(n=3, **kw)
    assert [c.message.content for c in again.choices] == [c.message.content for c in r.choices]
    # Choice i samples with seed + i: the same text as n=1 with that seed.
    for i, c in enumerate(r.choices):
        one = cl.chat.completions.create(**{**kw, "seed": 42 + i})
        assert one.choices[0].message.content == c.message.content
        assert one.choices[0].finish_reason == c.finish_reason
    assert len({c.message.content for c in r.choices}) > 1  # three seeds, not one text three times
    m = r.model_extra["metrics"]
    check_metrics_n(m, r.usage.model_dump(), 3)
    assert r.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counts once


def test_n_usage_sums_choices_and_prefills_once(srv_nocache):
    s = srv_nocache
    cl = s.client()

    def prom_prompt_tokens():
        _, _, body = s.request("GET", "/metrics")
        return float(re.search(rb"^ft_prompt_tokens_total (\S+)$", body, re.M).group(1))

    before = prom_prompt_tokens()
    r = cl.completions.create(model=model_id(s), prompt="The lighthouse keeper walked", n=4, max_tokens=9,
                              temperature=0.8, seed=1, logprobs=1, extra_body={"ignore_eos": True})
    assert len(r.choices) == 4
    assert all(len(c.logprobs.tokens) == 9 and c.finish_reason == "length" for c in r.choices)
    assert r.usage.completion_tokens == 4 * 9
    m = r.model_extra["metrics"]
    check_metrics_n(m, r.usage.model_dump(), 4)
    # Prefilled once: without the prefix cache every prompt token is computed, once.
    assert m["cached_prompt_tokens"] == 0 and m["prefill_tokens"] == r.usage.prompt_tokens
    assert prom_prompt_tokens() - before == r.usage.prompt_tokens
    # One token each: all from the shared prefill, so no decode tokens.
    r1 = cl.completions.create(model=model_id(s), prompt="The lighthouse keeper walked", n=3, max_tokens=1)
    m1 = r1.model_extra["metrics"]
    assert r1.usage.completion_tokens == 3 and m1["decode_tokens"] == 0
    assert m1["decode_tokens_per_second"] is None
    check_metrics_n(m1, r1.usage.model_dump(), 3)


def test_greedy_n2_identical(srv):
    cl = srv.client()
    r = cl.chat.completions.create(model=model_id(srv), messages=[{"role": "user", "content": "Hello there"}], n=2,
                                   max_tokens=10, temperature=0, logprobs=True, top_logprobs=2)
    a, b = r.choices
    assert a.message.content == b.message.content and a.finish_reason == b.finish_reason
    assert a.logprobs.model_dump() == b.logprobs.model_dump()
    one = cl.chat.completions.create(model=model_id(srv), messages=[{"role": "user", "content": "Hello there"}],
                                     max_tokens=10, temperature=0)
    assert one.choices[0].message.content == a.message.content


def test_n3_streamed_chat_and_completions(srv):
    cl = srv.client()
    kw = dict(model=model_id(srv), max_tokens=10, temperature=1.0, seed=9)
    msgs = [{"role": "user", "content": "A story about a dog"}]
    full = cl.chat.completions.create(messages=msgs, n=3, logprobs=True, **kw)
    texts, roles, finish, lps = ["", "", ""], [0, 0, 0], [None] * 3, [[], [], []]
    last = None
    for chunk in cl.chat.completions.create(messages=msgs, n=3, logprobs=True, stream=True,
                                            stream_options={"include_usage": True}, **kw):
        last = chunk
        assert len(chunk.choices) <= 1
        for c in chunk.choices:
            if c.delta.role:
                roles[c.index] += 1
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                assert finish[c.index] is None
                finish[c.index] = c.finish_reason
            if c.logprobs:
                lps[c.index] += c.logprobs.content
    assert roles == [1, 1, 1]
    assert texts == [c.message.content for c in full.choices]
    assert finish == [c.finish_reason for c in full.choices]
    assert [[e.model_dump() for e in l] for l in lps] == \
        [[e.model_dump() for e in c.logprobs.content] for c in full.choices]
    assert last.choices == [] and last.usage.completion_tokens == full.usage.completion_tokens
    check_metrics_n(last.model_extra["metrics"], last.usage.model_dump(), 3)

    pfull = cl.completions.create(prompt="A story about a dog", n=3, **kw)
    texts = ["", "", ""]
    for chunk in cl.completions.create(prompt="A story about a dog", n=3, stream=True, **kw):
        for c in chunk.choices:
            texts[c.index] += c.text
    assert texts == [c.text for c in pfull.choices]


def test_n_raw_stream_shapes(srv):
    ev = sse_events(srv, "/v1/completions", {"prompt": "x", "n": 2, "max_tokens": 3, "stream": True,
                                             "performance_metrics": False})
    assert ev[-1] == "[DONE]"
    chunks = ev[:-1]
    assert {c["choices"][0]["index"] for c in chunks} == {0, 1}
    for c in chunks:
        assert c["object"] == "text_completion" and len(c["choices"]) == 1
        assert c["choices"][0]["logprobs"] is None


def test_n_waits_for_free_slots_and_others_run(srv):
    """n=4 takes all four slots of the -np 4 server: it waits while another
    request runs, and both finish."""
    import threading
    cl = srv.client()
    out = {}

    def long_one():
        out["long"] = cl.completions.create(model=model_id(srv), prompt="x", max_tokens=60,
                                            extra_body={"ignore_eos": True})

    t = threading.Thread(target=long_one)
    t.start()
    r = cl.completions.create(model=model_id(srv), prompt="y", n=4, max_tokens=20, temperature=0.7, seed=2,
                              extra_body={"ignore_eos": True})
    t.join()
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert r.usage.completion_tokens == 80 and out["long"].usage.completion_tokens == 60
    check_metrics_n(r.model_extra["metrics"], r.usage.model_dump(), 4)


def test_choices_on_the_sanitizer_build():
    """n, logprobs, abandoned streams of several choices and a shutdown with
    choices in flight, on the AddressSanitizer build: no report, exit 0."""
    asan = asan_bin()
    s = Server(tiny_model(), "-c", "256", "--parallel", "3", binary=asan, env=ASAN_ENV)
    try:
        cl = s.client()
        r = cl.chat.completions.create(model=model_id(s), messages=[{"role": "user", "content": "Hello"}], n=3,
                                       max_tokens=6, temperature=0.9, seed=1, logprobs=True, top_logprobs=20)
        assert len(r.choices) == 3 and all(len(c.logprobs.content) >= 1 for c in r.choices)
        ev = sse_events(s, "/v1/completions", {"prompt": "Hello", "n": 3, "max_tokens": 6, "stream": True,
                                               "logprobs": 20, "stream_options": {"include_usage": True}})
        assert ev[-1] == "[DONE]" and ev[-2]["usage"]["completion_tokens"] >= 3
        for body in ({"prompt": "x", "n": 4}, {"prompt": "x", "logprobs": 99}, {"prompt": "x", "n": "3"}):
            assert s.post("/v1/completions", body)[0] == 400
        # Abandon a stream of three choices, then shut down with another in flight.
        for _ in range(2):
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
            c.request("POST", "/v1/completions", headers={"Content-Type": "application/json"},
                      body=json.dumps({"prompt": "x", "n": 3, "max_tokens": 200, "stream": True, "logprobs": 5,
                                       "ignore_eos": True}))
            c.getresponse().fp.readline()
            c.close()
        assert s.request("GET", "/health")[0] == 200
    finally:
        stop_clean(s)


def test_n_with_stop_string_and_logprobs(srv):
    """Each choice stops on its own; the text leaves the stop string out, the
    logprobs keep every token counted in usage (the last one completes the
    stop string)."""
    cl = srv.client()
    kw = dict(model=model_id(srv), prompt="The lighthouse keeper", max_tokens=16, temperature=0,
              extra_body={"ignore_eos": True})
    full = cl.completions.create(**kw).choices[0].text
    stop = full[6:9]
    assert len(stop) == 3 and full.index(stop) >= 1
    r = cl.completions.create(n=2, stop=[stop], logprobs=0, **kw)
    for c in r.choices:
        assert c.finish_reason == "stop" and c.text == full[:full.index(stop)]
        joined = "".join(c.logprobs.tokens)
        assert joined.startswith(c.text) and stop in joined[len(c.text):]
        # Generation stopped at the token that completed the stop string.
        assert stop not in "".join(c.logprobs.tokens[:-1])[len(c.text):]
    assert r.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in r.choices)


def test_streamed_choice_finishes_while_others_go_on(srv):
    cl = srv.client()
    kw = dict(model=model_id(srv), prompt="The lighthouse keeper", max_tokens=24, temperature=1.0, seed=3,
              stop=["e"], n=3)
    full = cl.completions.create(logprobs=0, **kw)
    lens = [len(c.logprobs.tokens) for c in full.choices]
    events = []
    for chunk in cl.completions.create(stream=True, **kw):
        for c in chunk.choices:
            events.append((c.index, "finish" if c.finish_reason else "text"))
    for i in range(3):
        fin = events.index((i, "finish"))
        assert all(e[0] != i for e in events[fin + 1:])  # nothing of a choice after its finish chunk
    if max(lens) > min(lens) + 1:
        # The shortest choice's finish chunk precedes text of a longer one.
        short = lens.index(min(lens))
        fin = events.index((short, "finish"))
        assert any(kind == "text" and i != short for i, kind in events[fin + 1:]), (lens, events)
    else:
        pytest.skip(f"the seeded choices have {lens} tokens: no early finish to see")
