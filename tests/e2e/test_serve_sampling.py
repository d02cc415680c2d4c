"""Sampling and output-shaping fields end to end on the real Gemma 3 270M
model with the official openai client: OpenAI's logit_bias (and llama.cpp's
array and text-key forms), vLLM's guided_choice / guided_regex /
guided_grammar and min_tokens, llama.cpp's typical_p. Expected values come
from the model itself (an unbiased request's own greedy token and
alternatives) or from Python (re.fullmatch), never from the code under
test; each field is checked streamed and not, and its bad values are 400s
naming it while the server keeps serving."""
import re

import pytest

from test_serve import Server, model_id

openai = pytest.importorskip("openai")

PROMPT = "The capital of France is"
PARIS = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def gemma(real_model):
    s = Server(real_model, "-c", "2048", "--parallel", "2")
    yield s
    assert s.stop() == 0, s.stderr()


def ids(lp):
    return [int(t.split(":")[1]) for t in lp.tokens]


def complete(c, m, **kw):
    args = dict(model=m, prompt=PROMPT, temperature=0, max_tokens=1, logprobs=5,
                extra_body={"return_tokens_as_token_ids": True, **kw.pop("extra_body", {})})
    args.update(kw)
    return c.completions.create(**args).choices[0]


def stream_text(stream):
    text, finish = "", None
    for chunk in stream:
        for ch in chunk.choices:
            text += getattr(ch, "text", None) or (ch.delta.content if hasattr(ch, "delta") else "") or ""
            finish = ch.finish_reason or finish
    return text, finish


def test_logit_bias_bans_the_greedy_token(gemma):
    c, m = gemma.client(), model_id(gemma)
    base = complete(c, m)
    greedy = ids(base.logprobs)[0]
    ranked = sorted(base.logprobs.top_logprobs[0].items(), key=lambda kv: -kv[1])
    second = int(ranked[1][0].split(":")[1])
    assert int(ranked[0][0].split(":")[1]) == greedy
    # OpenAI's object, llama.cpp's [[id, bias]] and its `false`: the runner-up of the raw distribution
    for bias in ({str(greedy): -100}, [[greedy, -100]], [[greedy, False]]):
        ch = complete(c, m, logit_bias=bias) if isinstance(bias, dict) else \
            complete(c, m, extra_body={"logit_bias": bias})
        assert ids(ch.logprobs)[0] == second, bias
    # streamed: the same text
    ban = {str(greedy): -100}
    whole = c.completions.create(model=m, prompt=PROMPT, temperature=0, max_tokens=8, logit_bias=ban).choices[0].text
    text, finish = stream_text(c.completions.create(model=m, prompt=PROMPT, temperature=0, max_tokens=8,
                                                   logit_bias=ban, stream=True))
    assert text == whole and finish == "length"
    unbiased = c.completions.create(model=m, prompt=PROMPT, temperature=0, max_tokens=8).choices[0].text
    assert whole != unbiased


def test_logit_bias_forces_a_token_and_logprobs_stay_raw(gemma):
    c, m = gemma.client(), model_id(gemma)
    base = complete(c, m)
    ranked = sorted(base.logprobs.top_logprobs[0].items(), key=lambda kv: -kv[1])
    forced, raw_lp = int(ranked[4][0].split(":")[1]), ranked[4][1]
    args = dict(model=m, prompt=PROMPT, temperature=0.8, seed=3, max_tokens=6, logprobs=5,
                logit_bias={str(forced): 100}, extra_body={"return_tokens_as_token_ids": True})
    ch = c.completions.create(**args).choices[0]
    toks, lps = ids(ch.logprobs), ch.logprobs.token_logprobs
    assert toks == [forced] * 6, toks
    # the reported logprob is the model's own, before the bias (documented)
    assert abs(lps[0] - raw_lp) < 1e-3, (lps[0], raw_lp)
    streamed = []
    for chunk in c.completions.create(stream=True, **args):
        for x in chunk.choices:
            if x.logprobs:
                streamed += ids(x.logprobs)
    assert streamed == toks


def test_logit_bias_in_chat_streamed_and_not(gemma):
    c, m = gemma.client(), model_id(gemma)
    first = c.chat.completions.create(model=m, messages=PARIS, temperature=0, max_tokens=1, logprobs=True,
                                      extra_body={"return_tokens_as_token_ids": True}).choices[0]
    tok = int(first.logprobs.content[0].token.split(":")[1])
    args = dict(model=m, messages=PARIS, temperature=0, max_tokens=10, logit_bias={str(tok): -100})
    whole = c.chat.completions.create(**args).choices[0].message.content
    text, _ = stream_text(c.chat.completions.create(stream=True, **args))
    plain = c.chat.completions.create(model=m, messages=PARIS, temperature=0, max_tokens=10).choices[0].message.content
    assert text == whole and whole != plain


@pytest.mark.parametrize("bias", [
    {"300000": 1}, {"5": 101}, {"5": -100.5}, {"5": "x"}, {"5": True}, {"-1": 5}, {str(i): 1 for i in range(301)},
    [[5]], [[5, 1, 2]], [["", 1]], "5", {"": 3},
])
def test_bad_logit_bias_is_400(gemma, bias):
    c, m = gemma.client(), model_id(gemma)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=m, messages=PARIS, max_tokens=1, extra_body={"logit_bias": bias})
    assert e.value.status_code == 400 and e.value.body["param"] == "logit_bias", e.value.body
    assert c.chat.completions.create(model=m, messages=PARIS, max_tokens=1).choices[0].finish_reason


CHOICES = ["Paris", "Lyon", "Marseille", "Nice is nice"]


@pytest.mark.parametrize("stream", [False, True])
def test_guided_choice(gemma, stream):
    c, m = gemma.client(), model_id(gemma)
    for seed in range(3):
        args = dict(model=m, messages=PARIS, seed=seed, temperature=1.0, max_tokens=20,
                    extra_body={"guided_choice": CHOICES})
        if stream:
            text, finish = stream_text(c.chat.completions.create(stream=True, **args))
        else:
            ch = c.chat.completions.create(**args).choices[0]
            text, finish = ch.message.content, ch.finish_reason
        assert text in CHOICES and finish == "stop", text
    ch = c.completions.create(model=m, prompt=PROMPT, max_tokens=20, temperature=0,
                              extra_body={"guided_choice": CHOICES}).choices[0]
    assert ch.text in CHOICES and ch.finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_guided_regex_and_grammar(gemma, stream):
    c, m = gemma.client(), model_id(gemma)
    cases = [({"guided_regex": r"[A-Z][a-z]{2,10} is in (France|Italy), [0-9]{4}\."},
              r"[A-Z][a-z]{2,10} is in (France|Italy), [0-9]{4}\."),
             ({"guided_grammar": 'root ::= ("yes" | "no") ", " [a-z]{1,12} "!"'}, r"(yes|no), [a-z]{1,12}!")]
    for extra, pattern in cases:
        for seed in range(2):
            args = dict(model=m, messages=PARIS, seed=seed, temperature=0.9, max_tokens=40, extra_body=extra)
            if stream:
                text, finish = stream_text(c.chat.completions.create(stream=True, **args))
            else:
                ch = c.chat.completions.create(**args).choices[0]
                text, finish = ch.message.content, ch.finish_reason
            assert re.fullmatch(pattern, text) and finish == "stop", (extra, text, finish)


@pytest.mark.parametrize("extra, param", [
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_choice": ["a", ""]}, "guided_choice"),
    ({"guided_choice": "a"}, "guided_choice"),
    ({"guided_regex": "a(?=b)"}, "guided_regex"),
    ({"guided_regex": "(a"}, "guided_regex"),
    ({"guided_grammar": "root ::= undefined"}, "guided_grammar"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_regex"),
    ({"guided_grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}}, "guided_grammar"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"min_tokens": 5, "max_tokens": 4}, "min_tokens"),
    ({"typical_p": 1.5}, "typical_p"),
    ({"typical_p": "x"}, "typical_p"),
    ({"mirostat": 2}, "mirostat"),
    ({"suffix": "x"}, "suffix"),
])
def test_bad_fields_are_400(gemma, extra, param):
    c, m = gemma.client(), model_id(gemma)
    body = {"max_tokens": 8}
    body.update(extra)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=m, messages=PARIS, extra_body=body)
    assert e.value.status_code == 400 and e.value.body["param"] == param, e.value.body
    assert c.chat.completions.create(model=m, messages=PARIS, max_tokens=1).choices[0].finish_reason


def test_min_tokens_holds_back_eos_and_stop_strings(gemma):
    c, m = gemma.client(), model_id(gemma)
    # A bias on the end-of-generation tokens (<eos> 1, <end_of_turn> 106)
    # makes greedy end at once; min_tokens N masks them for N tokens, so the
    # end comes as token N + 1, counted in completion_tokens.
    eog = {"1": 60, "106": 60}
    now = c.chat.completions.create(model=m, messages=PARIS, temperature=0, max_tokens=64, logit_bias=eog)
    assert now.usage.completion_tokens == 1 and now.choices[0].finish_reason == "stop"
    for stream in (False, True):
        args = dict(model=m, messages=PARIS, temperature=0, max_tokens=64, logit_bias=eog,
                    extra_body={"min_tokens": 9})
        if stream:
            chunks = list(c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **args))
            used, finish = chunks[-1].usage.completion_tokens, [x.choices[0].finish_reason for x in chunks
                                                                 if x.choices and x.choices[0].finish_reason]
            assert finish == ["stop"]
        else:
            r = c.chat.completions.create(**args)
            used = r.usage.completion_tokens
            assert r.choices[0].finish_reason == "stop"
        assert used == 10, used
    # A stop string completed within the first min_tokens tokens is not
    # matched (vLLM's rule): the answer runs to its next occurrence.
    base = c.chat.completions.create(model=m, messages=PARIS, temperature=0, max_tokens=64).choices[0].message.content
    first = base.find("Paris")
    second = base.find("Paris", first + 1)
    assert 0 < first < second, base
    cut = c.chat.completions.create(model=m, messages=PARIS, temperature=0, max_tokens=64, stop=["Paris"])
    assert cut.choices[0].message.content == base[:first]
    held = c.chat.completions.create(model=m, messages=PARIS, temperature=0, max_tokens=64, stop=["Paris"],
                                     extra_body={"min_tokens": 12})
    assert held.choices[0].message.content == base[:second] and held.choices[0].finish_reason == "stop"


def test_typical_p(gemma):
    """typical_p near 0 keeps one token per step (the most typical), so the
    seed no longer matters; off (1.0), seeds give different texts."""
    c, m = gemma.client(), model_id(gemma)

    def texts(typical_p):
        return [c.chat.completions.create(model=m, messages=PARIS, temperature=1.0, seed=seed, max_tokens=12,
                                          extra_body={"typical_p": typical_p}).choices[0].message.content
                for seed in range(3)]

    narrow = texts(1e-6)
    assert len(set(narrow)) == 1, narrow
    assert len(set(texts(1.0))) > 1
    streamed, _ = stream_text(c.chat.completions.create(model=m, messages=PARIS, temperature=1.0, seed=9,
                                                        max_tokens=12, stream=True,
                                                        extra_body={"typical_p": 1e-6}))
    assert streamed == narrow[0]
